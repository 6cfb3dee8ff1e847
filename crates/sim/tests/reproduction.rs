//! The reproduction targets (docs/sim-reproduction.md):
//! the shape of each seed result, with the tolerance stated at each assertion.
//! Workloads are the built-in profiles at reduced scale so the whole file runs
//! in seconds in the debug test profile; the shapes do not depend on the scale
//! as long as runs are long compared with the host time slice where that
//! matters (the 2-VM streamcluster case).

use smplab_sim::{
    simulate, Idle, Placement, Platform, Policy, RunRecord, Scenario, Topology, VmSpec,
};

fn kvm() -> Platform {
    Platform::builtin("kvm2015").unwrap()
}

fn vm(name: &str, n: u32, scale: f64, vcpus: u32) -> VmSpec {
    VmSpec::from_workload(name, Some(n), scale, vcpus).unwrap()
}

fn run(s: &Scenario) -> Vec<RunRecord> {
    let r = simulate(s).unwrap();
    assert!(r.iter().all(|r| r.is_ok()));
    r
}

/// Slowdown versus the same model without virtualization, in percent.
fn slowdown(r: &RunRecord) -> f64 {
    let native = r.sim.as_ref().unwrap().native_wall_ns.unwrap() as f64;
    (r.timing.wall_ns as f64 / native - 1.0) * 100.0
}

fn seed000_slowdown(name: &str, idle: Idle) -> f64 {
    let mut v = vm(name, 16, 0.25, 16);
    v.idle = idle;
    slowdown(&run(&Scenario::new(kvm(), 16, vec![v]))[0])
}

/// Ding & Shan Fig. 1: in a 16-vCPU VM on 16 pCPUs, dedup (blocking pipeline:
/// IPIs and HLT exits) slows down far more than blackscholes (no exits).
#[test]
fn seed000_dedup_slows_far_more_than_blackscholes() {
    let dedup = seed000_slowdown("dedup", Idle::Hlt);
    let bs = seed000_slowdown("blackscholes", Idle::Hlt);
    eprintln!("slowdown dedup {dedup:.1}%, blackscholes {bs:.1}%");
    // Tolerance: "far more" = at least 5 points and at least 5x blackscholes's.
    assert!(dedup >= 5.0, "dedup {dedup:.1}%");
    assert!(
        dedup >= 5.0 * bs.max(0.0),
        "dedup {dedup:.1}% vs blackscholes {bs:.1}%"
    );
}

/// Ding & Shan Fig. 3: polling idle instead of HLT exits reduces the slowdown of
/// the blocking-heavy profiles (59% → 35% on average in the seed).
#[test]
fn seed000_polling_idle_reduces_blocking_slowdown() {
    let mut hlt_sum = 0.0;
    let mut poll_sum = 0.0;
    for name in ["dedup", "fluidanimate", "ocean_ncp", "vips", "volrend"] {
        let hlt = seed000_slowdown(name, Idle::Hlt);
        let poll = seed000_slowdown(name, Idle::Poll);
        eprintln!("{name}: hlt {hlt:.1}%, poll {poll:.1}%");
        // Tolerance: strictly lower for every blocking-heavy profile.
        assert!(poll < hlt, "{name}: poll {poll:.1}% vs hlt {hlt:.1}%");
        hlt_sum += hlt;
        poll_sum += poll;
    }
    // Tolerance: on average at least halved (the seed removes ~40% of it; the
    // model has no other exit sources left once idle exits are gone).
    assert!(
        poll_sum <= 0.5 * hlt_sum,
        "poll {poll_sum:.1} vs hlt {hlt_sum:.1}"
    );
}

/// Weighted speedup of `vms` VMs relative to one VM alone (Ding & Shan §III).
fn weighted_speedup(v: &VmSpec, vms: usize) -> f64 {
    let base = run(&Scenario::new(kvm(), 16, vec![v.clone()]))[0]
        .timing
        .wall_ns;
    let mut s = Scenario::new(kvm(), 16, vec![v.clone(); vms]);
    s.native_reference = false;
    smplab_sim::weighted_speedup(base, &run(&s))
}

/// Ding & Shan Fig. 2/5: two 16-vCPU streamcluster VMs on 16 pCPUs lose about
/// 2x throughput because PLE cannot see the user-mode, PAUSE-less barrier
/// spin; with the barrier blocking instead, throughput is back (1.04 in the seed).
///
/// Scale 30: ~64 ms per instance, about ten host time slices (6 ms); with
/// only three or four slices the outcome depends on how the jittered slices
/// happen to line up (one seed in eight then escapes the collapse).
fn streamcluster_two_vms(block: bool) -> f64 {
    let mut v = vm("streamcluster", 16, 30.0, 16);
    if block {
        v.program = v.program.spin_to_block();
    }
    let ws = weighted_speedup(&v, 2);
    eprintln!("weighted speedup, 2 VMs, blocking barrier {block}: {ws:.2}");
    ws
}

#[test]
#[ignore = "not reached: sim 0.503 vs at most 0.5 (0.51 before the kvm2015 exit-cost correction; 0.13 with 5 µs phases, 0.51 with PARSEC-like 42 µs phases); within the spin time's uncertainty: PARSEC's 35,000-pass volatile-counter loop takes 70-100 µs on Ding & Shan's host (5-7 cycles a pass), and at 87.5 µs (43,750 of the profile's passes) this gives 0.46 but moves Kulkarni & Kulkarni's streamcluster pin/float from 0.968 to 0.9702, past its 0.97 bound (docs/sim-reproduction.md)"]
fn seed000_streamcluster_two_vms_spinning_collapses() {
    // Tolerance: "reduced by about 2x" read as "loses at least 2x" =
    // weighted speedup at most 0.5.
    let ws_spin = streamcluster_two_vms(false);
    assert!(ws_spin <= 0.5, "spin {ws_spin:.2}");
}

#[test]
fn seed000_streamcluster_two_vms_blocking_keeps_throughput() {
    // Tolerance: "about 1.0" = no collapse, at least 0.9. The model may give
    // more than 1: the blocking variant leaves vCPUs idle that a second VM
    // fills (Ding & Shan sees the same for other programs, e.g. facesim +74%).
    let ws_block = streamcluster_two_vms(true);
    assert!(ws_block >= 0.9, "block {ws_block:.2}");
}

/// Wells et al. §5: one 24-vCPU VM on 8 pCPUs (spin-lock microbenchmark);
/// spin-triggered preemption by the SDB wastes fewer cycles spinning than
/// plain 100 µs time slices.
#[test]
fn seed002_sdb_spins_less_than_time_slices() {
    let mk = |sdb: bool| {
        let mut v = vm("spinlock", 24, 0.05, 24);
        v.ple = smplab_sim::Ple::Off;
        if sdb {
            v.sdb = Some(Default::default());
        }
        let mut s = Scenario::new(kvm(), 8, vec![v]);
        s.policy = Policy::fair().with_slice(100_000);
        s.native_reference = false;
        run(&s).remove(0)
    };
    let slices = mk(false);
    let sdb = mk(true);
    let (a, b) = (
        slices.sim.as_ref().unwrap().spin_ns,
        sdb.sim.as_ref().unwrap().spin_ns,
    );
    eprintln!(
        "spin: 100us slices {:.2} ms, SDB {:.2} ms; wall {:.2} vs {:.2} ms",
        a as f64 / 1e6,
        b as f64 / 1e6,
        slices.timing.wall_ns as f64 / 1e6,
        sdb.timing.wall_ns as f64 / 1e6
    );
    // Tolerance: at most half the spin time (Wells et al. Fig. 2 reports 1.9-3.2x
    // fewer instructions for the spin-heavy workloads).
    assert!(2 * b <= a, "SDB {b} ns vs slices {a} ns");
    assert!(sdb.timing.wall_ns < slices.timing.wall_ns);
}

/// Wells et al. §6: two 8-vCPU VMs on 8 pCPUs; logical partitioning (4 pCPUs
/// each, SDB handling the overcommit inside each partition) beats gang
/// scheduling with 100 µs slices. vips is a thread pool that leaves vCPUs
/// idle part of the time, like the seed's half-utilized consolidation
/// workloads (which gained most): gang scheduling keeps those pCPUs idle.
#[test]
fn seed002_partitioning_beats_gang_scheduling() {
    let mk = |policy: &str| {
        let mut v = vm("vips", 8, 1.0, 8);
        v.sdb = Some(Default::default());
        let mut s = Scenario::new(kvm(), 8, vec![v.clone(), v]);
        s.policy = Policy::parse(policy).unwrap();
        s.native_reference = false;
        run(&s).iter().map(|r| r.timing.wall_ns).max().unwrap()
    };
    let gang = mk("gang:100us");
    let part = mk("partition:100us");
    eprintln!(
        "makespan gang {:.2} ms, partition {:.2} ms",
        gang as f64 / 1e6,
        part as f64 / 1e6
    );
    // Tolerance: at least 10% faster (Wells et al. Fig. 6: 10-25%).
    assert!(
        part as f64 <= 0.9 * gang as f64,
        "partition {part} vs gang {gang}"
    );
}

/// Kulkarni & Kulkarni §4.3.1: an 8-vCPU guest with 8 threads under pCPU contention (6
/// pCPUs in three LLC domains): pinning each vCPU helps the cache-sensitive
/// streamcluster and hurts the resched-IPI-heavy fluidanimate.
/// Pinned / floating wall time of 8 vCPUs (8 threads) on 6 pCPUs in 3 LLC
/// domains (Kulkarni & Kulkarni Fig. 5, 6).
fn pin_over_float(name: &str) -> f64 {
    let mut w = [0u64; 2];
    for (i, aff) in [Placement::Float, Placement::Spread]
        .into_iter()
        .enumerate()
    {
        let mut v = vm(name, 8, 1.0, 8);
        v.placement = aff.clone();
        let mut s = Scenario::new(kvm(), 6, vec![v]);
        s.topology = Topology {
            pcpus_per_llc: Some(2),
        };
        s.native_reference = false;
        let r = run(&s).remove(0);
        let sim = r.sim.as_ref().unwrap();
        eprintln!(
            "{name} {}: wall {:.2} ms, migrations {}, warm-up {:.2} ms, ipis {}, steal {:.2} ms",
            aff,
            r.timing.wall_ns as f64 / 1e6,
            sim.migrations,
            sim.warmup_ns as f64 / 1e6,
            sim.ipis,
            sim.steal_ns as f64 / 1e6
        );
        w[i] = r.timing.wall_ns;
    }
    w[1] as f64 / w[0] as f64
}

/// Kulkarni & Kulkarni Fig. 5/6: under pCPU contention pinning helps the cache-sensitive
/// streamcluster (no refill after migrations).
#[test]
fn seed001_pinning_helps_cache_sensitive() {
    let sc = pin_over_float("streamcluster");
    eprintln!("pin/float: streamcluster {sc:.3}");
    // Tolerance: a 3% effect (Kulkarni & Kulkarni Fig. 5/6 show ~5-20%).
    assert!(sc <= 0.97, "streamcluster pin/float {sc:.3}");
}

/// The IPI-heavy half of the Kulkarni & Kulkarni pinning figure.
#[test]
#[ignore = "not reached: fluidanimate pin/float 0.991 (0.995 before the kvm2015 exit-cost correction; 1.05 while a barrier's wakes all landed at one instant; with serial wakes the floating VM's migrations cost about what pinning's extra steal does)"]
fn seed001_pinning_hurts_ipi_heavy() {
    let fa = pin_over_float("fluidanimate");
    eprintln!("pin/float: fluidanimate {fa:.3}");
    // Tolerance: a 3% effect (Kulkarni & Kulkarni Fig. 5/6 show ~5-20%).
    assert!(fa >= 1.03, "fluidanimate pin/float {fa:.3}");
}

/// Partheymüller §5.1 (Fig. 5.1): with device-model exits from 16 vCPUs, fine-grained
/// locking scales best, the global lock worst, the I/O thread in between, and
/// the hybrid (bypassing part of the requests) between I/O thread and fine.
#[test]
fn seed004_device_sync_ordering() {
    let wall = |sync: smplab_sim::DeviceSync| {
        let mut v = vm("blackscholes", 16, 0.25, 16);
        // Partheymüller's 1845 exits/s per CPU amplified 20x so the serialized
        // device work (0.86 µs each) is a visible share at 16 vCPUs.
        v.devices = Some(smplab_sim::Devices {
            exits_per_ms: 36.9,
            sync,
            synchronous: 0.6298,
        });
        let mut s = Scenario::new(kvm(), 16, vec![v]);
        s.native_reference = false;
        let r = run(&s).remove(0);
        (r.timing.wall_ns, r.sim.unwrap().device_wait_ns)
    };
    use smplab_sim::DeviceSync::*;
    let (fine, fw) = wall(Fine);
    let (hybrid, _) = wall(Hybrid { bypass: 0.6 });
    let (io, _) = wall(IoThread);
    let (global, gw) = wall(Global);
    eprintln!("wall: fine {fine}, hybrid {hybrid}, iothread {io}, global {global}; wait fine {fw}, global {gw}");
    // Tolerance: strict ordering only (the seed's speedups depend on its kernel compile).
    assert_eq!(fw, 0);
    assert!(fine < hybrid && hybrid < io && io < global);
}

/// Ding & Shan Fig. 4: APICv removes about half of the APIC-access exits of
/// dedup (52% in the seed) and its slowdown falls roughly in proportion (47%).
#[test]
fn seed000_apicv_halves_apic_exits() {
    let mk = |apicv: bool| {
        // Ding & Shan measured this on the 4-vCPU R420 with PLE off and polling
        // idle; in the model dedup's IPIs come from waking halted vCPUs, so
        // it keeps HLT idle, and uses the 16-vCPU setup of Fig. 1 where the
        // pipeline's wakeups are on the critical path (at n=4 the serial
        // first stage hides them).
        let mut v = vm("dedup", 16, 0.25, 16);
        v.apicv = apicv;
        v.ple = smplab_sim::Ple::Off;
        let r = run(&Scenario::new(kvm(), 16, vec![v])).remove(0);
        let e = &r.sim.as_ref().unwrap().exits;
        (e["apic_icr"] + e["apic_eoi"], slowdown(&r))
    };
    let (exits_off, slow_off) = mk(false);
    let (exits_on, slow_on) = mk(true);
    eprintln!("APIC exits {exits_off} -> {exits_on}, slowdown {slow_off:.1}% -> {slow_on:.1}%");
    // Tolerance: 40-60% fewer APIC exits, and a lower slowdown.
    let cut = 1.0 - exits_on as f64 / exits_off as f64;
    assert!((0.4..=0.6).contains(&cut), "cut {cut:.2}");
    assert!(slow_on < slow_off);
}

// ---- Ding & Shan's figures, quantitatively ----
//
// Each target is the paper's stated value with a ±25% tolerance on kvm2015
// (16 pCPUs, one 16-vCPU VM unless stated). Targets the model does not reach
// yet are `#[ignore]`d with the model's figure in the reason
// (docs/sim-reproduction.md): the tolerance is not loosened to make them pass.
// `cargo test --release -p smplab-sim --test reproduction -- --ignored` runs them.

/// Within ±25% of the paper's value.
fn within_25pct(what: &str, sim: f64, paper: f64) {
    eprintln!("{what}: sim {sim:.2}, paper {paper:.2}");
    assert!(
        (sim - paper).abs() <= 0.25 * paper.abs(),
        "{what}: sim {sim:.2} vs paper {paper:.2} (±25%)"
    );
}

fn apic_exits(r: &RunRecord) -> u64 {
    let s = r.sim.as_ref().unwrap();
    s.exits.get("apic_icr").copied().unwrap_or(0) + s.exits.get("apic_eoi").copied().unwrap_or(0)
}

/// Fig. 4's set-up (Ding & Shan §IV.C): the R420 (one 6-core Ivy Bridge-EN,
/// the only host with APICv), PLE off, polling idle, dedup with 4 threads in
/// a 4-vCPU VM. The kvm2015 costs stand in for the R420's (same generation
/// of VT-x; the paper gives no separate figures).
fn dedup4(apicv: bool) -> RunRecord {
    let mut v = vm("dedup", 4, 0.25, 4);
    v.apicv = apicv;
    v.idle = Idle::Poll;
    v.ple = smplab_sim::Ple::Off;
    let mut s = Scenario::new(kvm(), 6, vec![v]);
    s.topology = Topology {
        pcpus_per_llc: Some(6),
    };
    run(&s).remove(0)
}

/// Ding & Shan Fig. 4: with 4 vCPUs, APICv removes 52% of dedup's APIC exits.
#[test]
fn seed000_q_apicv_cuts_apic_exits_by_52pct() {
    let cut = 100.0 * (1.0 - apic_exits(&dedup4(true)) as f64 / apic_exits(&dedup4(false)) as f64);
    within_25pct("APICv cut of APIC exits, %", cut, 52.0);
}

#[test]
#[ignore = "not reached: sim 63.2% vs paper 47% (slowdown 11.0% without APICv, 4.0% with; 64.2%, 10.4% and 3.7% before shared-write line transfers; 61-66% over scales 0.25-1 and bare-metal idle polls 0-40 us): the model's 4-vCPU slowdown is almost only APIC-exit cost, which APICv halves, less the reference's own IPI costs that APICv cannot cut; it lacks the VM costs APICv does not touch (the same gap as ocean_ncp's 8% with PLE off); docs/sim-reproduction.md"]
fn seed000_q_apicv_cuts_dedup_slowdown_by_47pct() {
    let cut = 100.0 * (1.0 - slowdown(&dedup4(true)) / slowdown(&dedup4(false)));
    within_25pct("APICv cut of dedup slowdown, %", cut, 47.0);
}

/// Fitted: the dedup profile's one free number (one munmap shootdown per two
/// chunks, which the seed does not give) is set from this figure; the
/// polling-idle and APICv figures are predictions.
#[test]
fn seed000_q_dedup_hlt_173pct() {
    within_25pct(
        "dedup slowdown, HLT idle, %",
        seed000_slowdown("dedup", Idle::Hlt),
        173.0,
    );
}

/// A prediction: the munmap rate is fitted to the HLT figure above.
#[test]
fn seed000_q_dedup_poll_103pct() {
    within_25pct(
        "dedup slowdown, polling idle, %",
        seed000_slowdown("dedup", Idle::Poll),
        103.0,
    );
}

#[test]
#[ignore = "not reached: sim 0.2% vs paper 28%: with KVM 3.19's PLE window (doubling per exit up to INT_MAX/2 cycles, reset only when the vCPU thread is scheduled in, which never happens to a polling vCPU on a dedicated host) any guest kernel spinning costs at most ~18 PLE exits per vCPU; modelling futex hash-bucket spinlocks gave 0.7% (fixed window: 38.4%); docs/sim-reproduction.md"]
fn seed000_q_ocean_poll_28pct() {
    within_25pct(
        "ocean_ncp slowdown, polling idle, %",
        seed000_slowdown("ocean_ncp", Idle::Poll),
        28.0,
    );
}

#[test]
#[ignore = "not reached: sim 0.2% vs paper 8%: a polling guest without IPIs has no VM cost left in the model (timer interrupts, EPT walks not modelled); docs/sim-reproduction.md"]
fn seed000_q_ocean_poll_ple_off_8pct() {
    let mut v = vm("ocean_ncp", 16, 0.25, 16);
    v.idle = Idle::Poll;
    v.ple = smplab_sim::Ple::Off;
    let s = slowdown(&run(&Scenario::new(kvm(), 16, vec![v]))[0]);
    within_25pct("ocean_ncp slowdown, polling idle, PLE off, %", s, 8.0);
}

fn streamcluster_blocking_throughput(vms: usize) -> f64 {
    let mut v = vm("streamcluster", 16, 7.5, 16);
    v.program = v.program.spin_to_block();
    weighted_speedup(&v, vms)
}

#[test]
fn seed000_q_streamcluster_blocking_two_vms_1_04() {
    within_25pct(
        "streamcluster blocking, 2 VMs, throughput",
        streamcluster_blocking_throughput(2),
        1.04,
    );
}

#[test]
fn seed000_q_streamcluster_blocking_four_vms_1_06() {
    within_25pct(
        "streamcluster blocking, 4 VMs, throughput",
        streamcluster_blocking_throughput(4),
        1.06,
    );
}
