//! Hand-checkable cases, one per mechanism, on a platform with round costs.
//! Each expected time is derived in the comment above its assertion.

use smplab_sim::{
    simulate, DeviceSync, Devices, Idle, Platform, Ple, Policy, Scenario, Sdb, VmSpec,
};
use smplab_workload::Source;

/// Round numbers: compute 1 ns/iter, no atomic or sync-op cost.
const UNIT: &str = r#"
name = "unit"
[cpu]
compute_ns_per_iter = 1.0
touch_ns_per_access = 1.0
atomic_ns = 0
line_transfer_ns = 100
spin_iter_pause_ns = 10.0
spin_iter_nopause_ns = 1.0
sync_op_ns = 0
context_switch_ns = 200
wake_ns = 50
yield_ns = 10
shootdown_handler_ns = 300
guest_slice_ns = 1000000000
[native]
ipi_send_ns = 20
ipi_receive_ns = 30
idle_wake_ns = 400
poll_notice_ns = 10
idle_poll_ns = 0
[vmm]
exit_ns = 500
user_exit_ns = 2000
hlt_exit_ns = 600
hlt_wake_ns = 4000
halt_poll_wake_ns = 700
ipi_send_ns = 800
ipi_send_apicv_ns = 400
ipi_receive_ns = 1000
ipi_receive_apicv_ns = 500
vcpu_switch_ns = 2000
poll_notice_ns = 10
ple_window_ns = 1000
ple_gap_ns = 50
[cache]
pcpus_per_core = 1
pcpus_per_llc = 8
line_bytes = 64
refill_llc_ns_per_line = 0.0
refill_remote_ns_per_line = 0.0
private_bytes = 65536
remote_share_factor = 0.0
shared_write_ns_per_line = 0.0
[sdb]
detect_ns = 900
false_positive_rate = 0.0
window_ns = 400
[device]
service_ns = 1000
[defaults]
time_slice_ns = 1000000
halt_poll_ns = 0
# Periodic balancing out of the way: these cases are hand-checked.
balance_ns_per_pcpu = 1000000000
load_half_life_ns = 32000000
imbalance_pct = 117
host_tick_hz = 250
"#;

/// vCPU switch on first dispatch.
const S: u64 = 2000;

fn platform() -> Platform {
    Platform::from_text("unit", UNIT).unwrap()
}

fn vm(workload: &str, vcpus: u32) -> VmSpec {
    let src = Source::from_text("test", workload).unwrap();
    let program = src.instantiate(None, 1.0).unwrap();
    let info = src.workload_info(&program);
    let mut v = VmSpec::new(program, info, vcpus);
    v.ple = Ple::Off;
    v
}

fn run(s: &Scenario) -> smplab_sim::RunRecord {
    simulate(s).unwrap().remove(0)
}

#[test]
fn one_thread_compute() {
    let w = "name = \"c\"\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ { compute = 1000 } ]\n";
    let s = Scenario::new(platform(), 1, vec![vm(w, 1)]);
    let r = run(&s);
    // VM: first dispatch pays the vCPU switch, then 1000 iterations at 1 ns.
    assert_eq!(r.timing.wall_ns, S + 1000);
    // Bare metal: just the work.
    assert_eq!(r.sim.unwrap().native_wall_ns, Some(1000));
}

const LOCK: &str = r#"
name = "lock"
[spin_locks.l]
kind = "ttas"
pause = true
[[groups]]
name = "g"
threads = 2
ops = [ { spin_lock = "l" }, { compute = 1000 }, { spin_unlock = "l" } ]
"#;

#[test]
fn two_vcpus_one_lock() {
    let s = Scenario::new(platform(), 2, vec![vm(LOCK, 2)]);
    let r = run(&s);
    // Both start at S; thread 0 takes the lock, thread 1 spins. Thread 0
    // releases at S+1000; the spinning thread gets it after the line transfer
    // (100) and computes 1000: wall = S + 1000 + 100 + 1000.
    assert_eq!(r.timing.wall_ns, S + 2100);
    let sim = r.sim.unwrap();
    // Thread 1 spun from S to S+1000; 1000 ns / 10 ns per PAUSE iteration.
    assert_eq!(sim.spin_ns, 1000);
    assert_eq!(r.counters.spin_iterations, 100);
    assert_eq!(sim.native_wall_ns, Some(2100));
}

const BARRIER: &str = r#"
name = "barrier"
[barriers.b]
parties = 2
wait = "block"
[[groups]]
name = "fast"
threads = 1
ops = [ { compute = 1000 }, { barrier = "b" } ]
[[groups]]
name = "slow"
threads = 1
ops = [ { compute = 3000 }, { barrier = "b" } ]
"#;

#[test]
fn blocking_barrier_wakes_a_halted_vcpu_by_ipi() {
    let mut s = Scenario::new(platform(), 2, vec![vm(BARRIER, 2)]);
    s.native_reference = true;
    let r = run(&s);
    // fast arrives at S+1000, blocks (switch 200), its vCPU HLT-exits (600)
    // and halts. slow arrives at S+3000 and wakes fast: it pays the wake (50)
    // and the IPI send (800), and the kick lands when that is done, at
    // S+3850; the halted vCPU's host thread is woken after hlt_wake 4000,
    // re-entered on the same pCPU (no switch), injects the IPI (1000): fast
    // finishes at S+3850+5000. slow ends at S+3850.
    assert_eq!(r.timing.wall_ns, S + 8850);
    let sim = r.sim.unwrap();
    // fast's vCPU at S+1200, slow's after slow exits (fast is not done yet).
    assert_eq!(sim.exits["hlt"], 2);
    assert_eq!(sim.exits["apic_icr"], 1);
    // Bare metal (idle_poll 0): fast halts; the wakeup is a flag store plus
    // the C-state exit (400) after slow's wake work (50): fast ends at
    // 3000+50+400, slow at 3000+50.
    assert_eq!(sim.native_wall_ns, Some(3450));
}

#[test]
fn polling_idle_needs_no_ipi() {
    let mut v = vm(BARRIER, 2);
    v.idle = Idle::Poll;
    let s = Scenario::new(platform(), 2, vec![v]);
    let r = run(&s);
    // fast polls after blocking; slow pays only the wake (50), after which
    // the flag store is noticed in 10 ns: max(S+3060, S+3050).
    assert_eq!(r.timing.wall_ns, S + 3060);
    let sim = r.sim.unwrap();
    assert_eq!(sim.exits["hlt"], 0);
    assert_eq!(sim.exits["apic_icr"], 0);
}

#[test]
fn halt_polling_window_catches_the_wakeup() {
    let mut v = vm(BARRIER, 2);
    v.idle = Idle::HaltPoll(10_000);
    let s = Scenario::new(platform(), 2, vec![v]);
    let r = run(&s);
    // Still inside the 10 µs window when the IPI lands at S+3850 (slow pays
    // 50+800 first) and fast resumes after halt_poll_wake 700: S+4550.
    assert_eq!(r.timing.wall_ns, S + 4550);
    // fast's vCPU halts once, while waiting; slow's vCPU halts after slow
    // exits at S+3850 (fast is still running); fast's exit ends the VM.
    assert_eq!(r.sim.unwrap().exits["hlt"], 2);
}

#[test]
fn apicv_halves_ipi_costs() {
    let mut v = vm(BARRIER, 2);
    v.apicv = true;
    let s = Scenario::new(platform(), 2, vec![v]);
    // As the HLT case with send 400 instead of 800 and receive 500 instead
    // of 1000: the kick lands at S+3450, fast ends at S+3450+4000+500.
    assert_eq!(run(&s).timing.wall_ns, S + 7950);
}

const SHOOT: &str = r#"
name = "shoot"
[[groups]]
name = "g"
threads = 1
ops = [ { shootdown = 1 } ]
"#;

#[test]
fn shootdown_waits_for_the_halted_vcpu() {
    let s = Scenario::new(platform(), 2, vec![vm(SHOOT, 2)]);
    let r = run(&s);
    // vCPU 1 has no thread: at S it HLT-exits (600) and halts at S+600.
    // The initiator sends one IPI (800), flushes locally (300), then spins.
    // The IPI arrives at S+800: wake 4000 → dispatched at S+4800 (same pCPU,
    // no switch), injection 1000, handler 300 → ack at S+6100; the initiator
    // continues after the line transfer 100 and exits at S+6200.
    assert_eq!(r.timing.wall_ns, S + 6200);
    let sim = r.sim.unwrap();
    assert_eq!(sim.exits["apic_icr"], 1);
    assert_eq!(sim.spin_ns, 6100 - 1100);
}

/// Two vCPUs on one pCPU: the holder is preempted inside its critical section.
const LHP: &str = r#"
name = "lhp"
[spin_locks.l]
kind = "ttas"
pause = true
[[groups]]
name = "g"
threads = 2
ops = [ { spin_lock = "l" }, { compute = 3000000 }, { spin_unlock = "l" } ]
"#;

#[test]
fn ple_sees_user_pause_loops_only_on_amd() {
    let mk = |ple: Ple| {
        let mut v = vm(LHP, 2);
        v.ple = ple;
        let mut s = Scenario::new(platform(), 1, vec![v]);
        s.native_reference = false;
        s.policy = Policy::fair().with_slice(1_000_000);
        run(&s)
    };
    let intel = mk(Ple::Intel);
    let amd = mk(Ple::Amd);
    // Intel: the user-mode spin is invisible; the spinner burns whole slices.
    assert_eq!(intel.sim.as_ref().unwrap().exits["ple"], 0);
    // AMD: a PLE exit after 1 µs of spinning yields the pCPU back to the holder.
    assert!(amd.sim.as_ref().unwrap().exits["ple"] >= 1);
    assert!(amd.sim.as_ref().unwrap().spin_ns * 10 < intel.sim.as_ref().unwrap().spin_ns);
    assert!(amd.timing.wall_ns < intel.timing.wall_ns);
}

#[test]
fn sdb_preempts_a_spinner_after_the_detection_latency() {
    let mut v = vm(LHP, 2);
    v.sdb = Some(Sdb {
        detect_ns: Some(900),
        false_positive_rate: Some(0.0),
    });
    let mut s = Scenario::new(platform(), 1, vec![v]);
    s.native_reference = false;
    s.policy = Policy::fair().with_slice(1_000_000);
    let r = run(&s);
    let sim = r.sim.unwrap();
    assert!(sim.exits["sdb"] >= 1);
    // Each time the spinner is dispatched it spins for exactly the detection
    // latency (after its switch-in) before the SDB hands the pCPU back.
    assert_eq!(sim.spin_ns % 900, 0);
    assert!(sim.spin_ns <= 900 * sim.exits["sdb"]);
}

#[test]
fn safe_points_defer_preemption_of_the_lock_holder() {
    let mk = |safe: bool| {
        let mut s = Scenario::new(platform(), 1, vec![vm(LHP, 2)]);
        s.native_reference = false;
        s.policy = Policy::fair().with_slice(1_000_000);
        if safe {
            // Safe points are a user-level policy's: the round robin's.
            s.policy.kind = smplab_sim::PolicyKind::RoundRobin;
            s.policy.safe_point_grace_ns = Some(10_000_000);
        }
        run(&s)
    };
    let plain = mk(false);
    let safe = mk(true);
    // With a grace period longer than the critical section the holder is never
    // preempted while holding the lock, so nobody spins on a preempted holder.
    assert_eq!(safe.sim.as_ref().unwrap().spin_ns, 0);
    assert!(plain.sim.as_ref().unwrap().spin_ns >= 1_000_000);
    assert!(safe.timing.wall_ns < plain.timing.wall_ns);
}

const IO: &str = r#"
name = "io"
[[groups]]
name = "g"
threads = 2
ops = [ { compute = 100000 } ]
"#;

#[test]
fn device_sync_modes() {
    let mk = |sync: DeviceSync, synchronous: f64| {
        let mut v = vm(IO, 2);
        v.devices = Some(Devices {
            exits_per_ms: 100.0,
            sync,
            synchronous,
        });
        let mut s = Scenario::new(platform(), 2, vec![v]);
        s.native_reference = false;
        run(&s)
    };
    // 100 µs of work at 100 exits/ms: an exit after every 10 µs of running,
    // 9 per vCPU (the 10th would fall on the end of the work).
    let fine = mk(DeviceSync::Fine, 1.0);
    let sim = fine.sim.as_ref().unwrap();
    assert_eq!(sim.exits["io"], 18);
    assert_eq!(sim.device_wait_ns, 0);
    // Fine-grained: each exit costs user_exit 2000 + service 1000 in parallel.
    assert_eq!(fine.timing.wall_ns, S + 100_000 + 9 * 3000);
    // Global lock: both vCPUs make their first exit at the same instant and
    // one waits a service time (1000); that offsets them by exactly one
    // service time, so later requests never collide.
    let global = mk(DeviceSync::Global, 1.0);
    assert_eq!(global.sim.as_ref().unwrap().device_wait_ns, 1000);
    assert_eq!(global.timing.wall_ns, fine.timing.wall_ns + 1000);
    // I/O thread with only posted writes: nobody waits.
    let posted = mk(DeviceSync::IoThread, 0.0);
    assert_eq!(posted.sim.as_ref().unwrap().device_wait_ns, 0);
    assert_eq!(posted.timing.wall_ns, S + 100_000 + 9 * 2000);
}

#[test]
fn gang_leaves_halted_vcpus_pcpus_idle() {
    // Two 2-vCPU VMs on 2 pCPUs; each VM's second vCPU has no thread.
    let w = "name = \"c\"\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ { compute = 100000 } ]\n";
    let mk = |policy: &str| {
        let mut s = Scenario::new(platform(), 2, vec![vm(w, 2), vm(w, 2)]);
        s.policy = Policy::parse(policy).unwrap();
        s.native_reference = false;
        simulate(&s).unwrap()
    };
    let gang = mk("gang:10us");
    let fair = mk("fair:10us");
    let span = |r: &[smplab_sim::RunRecord]| r.iter().map(|r| r.timing.wall_ns).max().unwrap();
    // Fair share runs both busy vCPUs side by side on the two pCPUs; gang
    // scheduling alternates the VMs, idling the pCPU of each halted vCPU.
    assert!(span(&fair) < 110_000, "{}", span(&fair));
    assert!(span(&gang) > 190_000, "{}", span(&gang));
}

/// Host-tick exits (`irq`): the host's timer fires `host_tick_hz` (250)
/// times a second on each pCPU, and each tick that finds a vCPU in guest
/// mode is an exit. Guest kernel work is in guest mode with hardware
/// assistance, but not on a platform that emulates the guest kernel
/// (`[vm_kernel]`), where the tick lands in the host's emulator.
#[test]
fn host_ticks_exit_only_from_guest_mode() {
    // 40 ms of compute on one vCPU: 40 ms × 250/s = 10 ticks in guest mode
    // (the first dispatch's 2 µs switch is host time).
    let w =
        "name = \"c\"\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ { compute = 40000000 } ]\n";
    let r = run(&Scenario::new(platform(), 1, vec![vm(w, 1)]));
    assert_eq!(r.timing.wall_ns, S + 40_000_000);
    assert_eq!(r.sim.unwrap().exits["irq"], 10);

    // 20 ms of guest kernel work: 10000 yields of 2 µs while another thread
    // waits its turn on the one vCPU, beside 20 ms of compute.
    let y = "name = \"y\"\n[[groups]]\nname = \"g\"\nthreads = 2\nops = [ { yield = 5000 }, { compute = 10000000 } ]\n";
    let with_yield_ns = |emulated: bool| {
        let text = UNIT.replace("yield_ns = 10", "yield_ns = 2000")
            + if emulated {
                "[vm_kernel]\ncontext_switch_ns = 200\nwake_ns = 50\nyield_ns = 2000\nshootdown_handler_ns = 300\n"
            } else {
                ""
            };
        let p = Platform::from_text("unit-yield", &text).unwrap();
        run(&Scenario::new(p, 1, vec![vm(y, 1)]))
    };
    let assisted = with_yield_ns(false);
    let emulated = with_yield_ns(true);
    // The same costs either way, so the same run ...
    assert_eq!(assisted.timing.wall_ns, emulated.timing.wall_ns);
    let (a, e) = (assisted.sim.unwrap(), emulated.sim.unwrap());
    let kernel_ns = a.vcpu_time_ns["kernel_sched"];
    assert!(kernel_ns >= 19_000_000, "{kernel_ns} ns of yields");
    // ... but only the user time takes ticks when the kernel is emulated:
    // 20 ms → 5; with hardware assistance the ~20 ms of yields too → ~10.
    assert_eq!(e.exits["irq"], 5);
    assert_eq!(
        a.exits["irq"],
        5 + (kernel_ns * 250 + 500_000_000) / 1_000_000_000
    );
}

/// A shootdown IPI to a vCPU running user work: without APICv, KVM kicks
/// its pCPU with a host IPI, an external-interrupt exit it counts as
/// `irq_exits`, whether the guest kernel runs in guest mode or emulated
/// (the receiver is in user mode either way). With APICv the posted
/// interrupt needs no exit; a halted receiver is woken, not kicked.
#[test]
fn an_ipi_to_a_vcpu_in_guest_mode_is_a_kick_exit() {
    // 1 ms of compute on the receiver and ~2 µs on the initiator: ticks
    // round to 0 (1 ms × 250/s = 0.25), so `irq` counts kicks only.
    let w = r#"
name = "kick"
[[groups]]
name = "busy"
threads = 1
ops = [ { compute = 1000000 } ]
[[groups]]
name = "shoot"
threads = 1
ops = [ { compute = 1000 }, { shootdown = 1 } ]
"#;
    let irq = |emulated: bool, apicv: bool| {
        let text = UNIT.to_string()
            + if emulated {
                "[vm_kernel]\ncontext_switch_ns = 200\nwake_ns = 50\nyield_ns = 10\nshootdown_handler_ns = 300\n"
            } else {
                ""
            };
        let p = Platform::from_text("unit-kick", &text).unwrap();
        let mut v = vm(w, 2);
        v.apicv = apicv;
        let r = run(&Scenario::new(p, 2, vec![v]));
        let sim = r.sim.unwrap();
        assert_eq!(sim.exits["apic_icr"], 1, "one IPI sent");
        sim.exits["irq"]
    };
    assert_eq!(irq(false, false), 1);
    assert_eq!(irq(true, false), 1);
    assert_eq!(irq(false, true), 0);
    // The halted receiver of `shootdown_waits_for_the_halted_vcpu`: no kick.
    let r = run(&Scenario::new(platform(), 2, vec![vm(SHOOT, 2)]));
    assert_eq!(r.sim.unwrap().exits["irq"], 0);
}

/// APICv as the mechanism (Intel SDM vol. 3, ch. 30 "APIC Virtualization and
/// Virtual Interrupts"), so the share of APIC-access exits it removes
/// depends on the workload: it removes the EOI exit of every (edge-triggered)
/// interrupt receipt, but an IPI's ICR write still exits (before IPI
/// virtualization) and so does programming the LAPIC timer (a sleep's
/// TSC-deadline write). One shootdown and two sleeps on a halted vCPU: 6
/// APIC exits without APICv (the ICR write, three EOIs: the IPI's and the
/// two timer interrupts', two timer writes), 3 with it; device completions
/// (no ICR write: the IOAPIC delivers them) lose every APIC exit. So the cut
/// is 50% for a program whose APIC traffic is IPIs and timers, and more the
/// larger its share of device interrupts.
#[test]
fn apicv_cut_of_apic_exits_depends_on_what_exits() {
    let shoot_and_sleep = r#"
name = "shoot-sleep"
[[groups]]
name = "g"
threads = 1
ops = [ { sleep_us = 1 }, { shootdown = 1 }, { sleep_us = 1 } ]
[[groups]]
name = "busy"
threads = 1
ops = [ { compute = 200000 } ]
"#;
    let exits = |w: &str, apicv: bool| {
        let mut v = vm(w, 2);
        v.apicv = apicv;
        let r = run(&Scenario::new(platform(), 2, vec![v]));
        let e = r.sim.unwrap().exits;
        (e["apic_icr"], e["apic_eoi"], e["timer"])
    };
    assert_eq!(exits(shoot_and_sleep, false), (1, 3, 2));
    assert_eq!(exits(shoot_and_sleep, true), (1, 0, 2));
    // Bare metal: no exits at all.
    let mut v = vm(shoot_and_sleep, 2);
    v.apicv = true;
    let mut s = Scenario::new(platform(), 2, vec![v]);
    s.virtualized = false;
    let e = run(&s).sim.unwrap().exits;
    assert_eq!(e.values().sum::<u64>(), 0, "{e:?}");
    let io = r#"
name = "io"
[devices.disk]
[[groups]]
name = "g"
threads = 1
ops = [ { repeat = { count = 3, ops = [ { io = { device = "disk", service_us = 5 } } ] } } ]
[[groups]]
name = "busy"
threads = 1
ops = [ { compute = 200000 } ]
"#;
    let (icr, eoi, timer) = exits(io, false);
    assert_eq!(
        (icr, timer),
        (0, 0),
        "a device completion needs no ICR write"
    );
    assert!(eoi >= 3, "each completion's EOI exits without APICv: {eoi}");
    assert_eq!(exits(io, true), (0, 0, 0));
}

/// An idle vCPU given a woken thread first switches to it
/// (`[vm_kernel] switch_in_ns`): kernel work on the woken vCPU, after its
/// wakeup, never on the waker.
#[test]
fn an_idle_vcpu_pays_the_switch_in_to_the_woken_thread() {
    let with_switch_in = |ns: u64, idle: Idle| {
        let text = UNIT.to_string()
            + &format!("[vm_kernel]\ncontext_switch_ns = 200\nwake_ns = 50\nyield_ns = 10\nshootdown_handler_ns = 300\nswitch_in_ns = {ns}\n");
        let p = Platform::from_text("unit-switch-in", &text).unwrap();
        let mut v = vm(BARRIER, 2);
        v.idle = idle;
        run(&Scenario::new(p, 2, vec![v]))
    };
    // Halted: as blocking_barrier_wakes_a_halted_vcpu_by_ipi (S+8850), and
    // fast's vCPU then owes the switch-in (3000) beside the IPI injection
    // (1000) once its host thread is woken: S+11850.
    let none = with_switch_in(0, Idle::Hlt);
    let some = with_switch_in(3000, Idle::Hlt);
    assert_eq!(none.timing.wall_ns, S + 8850);
    assert_eq!(some.timing.wall_ns, S + 11850);
    let (n, s) = (none.sim.unwrap(), some.sim.unwrap());
    assert_eq!(
        s.vcpu_time_ns["kernel_sched"],
        n.vcpu_time_ns["kernel_sched"] + 3000
    );
    // The waker's wake work is unchanged (the woken vCPU pays).
    assert_eq!(
        s.vcpu_time_ns["kernel_futex"],
        n.vcpu_time_ns["kernel_futex"]
    );
    // Polling: the flag store is noticed after 10 ns, then the switch-in:
    // fast ends at S+3050+10+3000.
    let poll = with_switch_in(3000, Idle::Poll);
    assert_eq!(poll.timing.wall_ns, S + 6060);
}

/// The unit platform with a 10 ns charge per line a co-writer wrote.
fn shared_write_platform() -> Platform {
    Platform::from_text(
        "unit-sw",
        &UNIT.replace(
            "shared_write_ns_per_line = 0.0",
            "shared_write_ns_per_line = 10.0",
        ),
    )
    .unwrap()
}

/// `threads` threads, each walking 4 KiB of `buffer` (64 lines, one
/// access per line: 64 ns) 1000 times; `buffer` is a TOML touch target
/// (`"b"` shared, omitted for private) and `write` says whether it writes.
fn walks(threads: u32, shared: bool, write: bool) -> String {
    let target = if shared { "buffer = \"b\", " } else { "" };
    format!(
        "name = \"walks\"\n[buffers.b]\nbytes = 4096\n[[groups]]\nname = \"g\"\nthreads = {threads}\nops = [ {{ repeat = {{ count = 1000, ops = [ {{ touch = {{ {target}bytes = 4096, stride = 64, write = {write} }} }} ] }} }} ]\n"
    )
}

/// Bare-metal wall and `cache_line_transfer` time of a walk program on as
/// many cores as threads.
fn native_walks(threads: u32, shared: bool, write: bool) -> (u64, u64) {
    let s = Scenario::new(
        shared_write_platform(),
        threads,
        vec![vm(&walks(threads, shared, write), threads)],
    );
    let sim = run(&s).sim.unwrap();
    (
        sim.native_wall_ns.unwrap(),
        sim.native_time_ns
            .get("cache_line_transfer")
            .copied()
            .unwrap_or(0),
    )
}

#[test]
fn shared_writes_pay_line_transfers_while_a_co_writer_runs() {
    // One walk: 64 accesses at 1 ns; with a co-writer running, its 64 lines
    // cost 10 ns more each: 704 ns. Segments holding such walks are cut at
    // 20 µs: uncharged, 313 walks (20,032 ns); charged, 29 walks (20,416).
    //
    // Two threads, one shared buffer, both writing, two cores. Core 0
    // dispatches thread 0 first and fuses its first segment before core 1
    // runs thread 1: 313 walks uncharged, to 20,032. Thread 1 (fused with
    // thread 0 running) pays for every walk; so does thread 0 from its
    // second segment on: it ends at 20,032 + 687 × 704 = 503,680. By then
    // thread 1 has run 24 segments of 29 (to 489,984) and is in its 25th
    // (fused with thread 0 running, charged) to 510,400: 725 walks. Its last
    // 275 walks are fused alone, uncharged: 275 × 64 = 17,600, so the wall
    // is 528,000 and the transfers (687 + 725) × 640 = 903,680.
    assert_eq!(native_walks(2, true, true), (528_000, 903_680));
    // Private buffers, or a shared buffer only read: no transfers, each
    // thread 1000 × 64 ns on its own core.
    assert_eq!(native_walks(2, false, true), (64_000, 0));
    assert_eq!(native_walks(2, true, false), (64_000, 0));
    // One writer alone never pays.
    assert_eq!(native_walks(1, true, true), (64_000, 0));
    // In a VM the same: the two vCPUs run their writers on two pCPUs.
    let s = Scenario::new(
        shared_write_platform(),
        2,
        vec![vm(&walks(2, true, true), 2)],
    );
    let r = run(&s);
    let t = r.sim.unwrap().vcpu_time_ns["cache_line_transfer"];
    assert!((1000 * 640..=2000 * 640).contains(&t), "{t}");
    // Two writers time-sharing one vCPU share its core's cache: no charge.
    let s = Scenario::new(
        shared_write_platform(),
        1,
        vec![vm(&walks(2, true, true), 1)],
    );
    let sim = run(&s).sim.unwrap();
    assert_eq!(
        sim.vcpu_time_ns
            .get("cache_line_transfer")
            .copied()
            .unwrap_or(0),
        0
    );
}
