//! The reproduction targets (docs/sim-reproduction.md):
//! the shape of each seed result, with the tolerance stated at each assertion.
//! Bounds come from the paper's own figure (Ding & Shan's values ±25%, of the
//! change for a before → after figure); a figure the model misses is not an
//! ignored test here but a claim with status `missed` in docs/claims.toml,
//! which `smplab claims check` recomputes and checks for drift at our value.
//! Figures something in the model was fitted to are `seed000_calibration_*`:
//! they guard the calibration and are not counted as reproduced.
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
/// the blocking-heavy profiles (59% → 35% on average in the seed). The
/// direction is asserted here; the size is missed (the model removes 81% of
/// the summed slowdown where the paper removes 41%: ledger claim
/// `seed000.poll-over-hlt`).
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
    // The paper's direction for the average: lower with polling.
    assert!(poll_sum < hlt_sum, "poll {poll_sum:.1} vs hlt {hlt_sum:.1}");
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

/// Ding & Shan §III.B: "reduced by about 2x" with 2 VMs, i.e. a weighted
/// speedup of 0.5, with the ±25% of every Ding & Shan figure.
#[test]
fn seed000_q_streamcluster_spinning_two_vms_about_half() {
    within_25pct(
        "streamcluster spinning, 2 VMs, weighted speedup",
        streamcluster_two_vms(false),
        0.5,
    );
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
    // Tolerance: at least the paper's smallest gain (Wells et al. Fig. 2:
    // 1.9-3.2x fewer instructions for the spin-heavy workloads); the model's
    // larger gain is a different metric (ledger claim `seed002.sdb-over-slices`).
    assert!(b as f64 * 1.9 <= a as f64, "SDB {b} ns vs slices {a} ns");
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
    // Tolerance: at least the paper's smallest gain, 10% (Wells et al. Fig. 6:
    // 10-25%); the model's 39% is above the band (ledger claim
    // `seed002.partition-over-gang`, missed).
    assert!(
        part as f64 <= 0.9 * gang as f64,
        "partition {part} vs gang {gang}"
    );
}

/// Pinned / floating wall time of 8 vCPUs (8 threads) on `pcpus` pCPUs in
/// LLC domains of 2 (Kulkarni & Kulkarni Fig. 5, 6).
fn pin_over_float(name: &str, pcpus: u32) -> f64 {
    let mut w = [0u64; 2];
    for (i, aff) in [Placement::Float, Placement::Spread]
        .into_iter()
        .enumerate()
    {
        let mut v = vm(name, 8, 1.0, 8);
        v.placement = aff.clone();
        let mut s = Scenario::new(kvm(), pcpus, vec![v]);
        s.topology = Topology {
            pcpus_per_llc: Some(2),
        };
        s.native_reference = false;
        let r = run(&s).remove(0);
        let sim = r.sim.as_ref().unwrap();
        eprintln!(
            "{name} {} on {pcpus}: wall {:.2} ms, migrations {}, warm-up {:.2} ms, ipis {}, steal {:.2} ms",
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

/// Kulkarni & Kulkarni §4.3.1, Fig. 6: under pCPU contention pinning
/// improves the cache-sensitive streamcluster "except in the case of 6 and 2
/// pCPUs". Asserted where the paper says it helps and the model agrees (3, 5
/// and 7 pCPUs); 4 pCPUs (no effect in the model) and 6 (the model helps
/// where the paper shows no gain) are missed, ledger claims
/// `seed001.pin-streamcluster-{4,6}`, as is fluidanimate's Fig. 5
/// (`seed001.pin-fluidanimate-min`).
#[test]
fn seed001_pinning_helps_cache_sensitive() {
    for pcpus in [3, 5, 7] {
        let sc = pin_over_float("streamcluster", pcpus);
        eprintln!("pin/float: streamcluster on {pcpus} pCPUs {sc:.3}");
        // Tolerance: the paper's direction (its figure gives no number in
        // the text): pinned faster than floating.
        assert!(sc < 1.0, "streamcluster pin/float on {pcpus} pCPUs {sc:.3}");
    }
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

/// Ding & Shan Fig. 4 as a mechanism, on the 16-vCPU set-up of Fig. 1
/// (dedup, HLT idle, PLE off), where the pipeline's wakeups are on the
/// critical path: APICv (Intel SDM vol. 3, ch. 30) removes the receiver's
/// EOI exits (edge-triggered vectors) but not the sender's ICR writes (an
/// APIC-write exit before IPI virtualization), and the slowdown falls.
#[test]
fn seed000_apicv_removes_receipt_exits_not_icr_writes() {
    let mk = |apicv: bool| {
        let mut v = vm("dedup", 16, 0.25, 16);
        v.apicv = apicv;
        v.ple = smplab_sim::Ple::Off;
        let r = run(&Scenario::new(kvm(), 16, vec![v])).remove(0);
        let e = r.sim.as_ref().unwrap().exits.clone();
        (e["apic_icr"], e["apic_eoi"], e["irq"], slowdown(&r))
    };
    let (icr_off, eoi_off, irq_off, slow_off) = mk(false);
    let (icr_on, eoi_on, irq_on, slow_on) = mk(true);
    eprintln!("ICR {icr_off} -> {icr_on}, EOI {eoi_off} -> {eoi_on}, irq {irq_off} -> {irq_on}, slowdown {slow_off:.1}% -> {slow_on:.1}%");
    assert!(icr_on > 0 && eoi_off > 0, "dedup sends IPIs");
    assert_eq!(eoi_on, 0, "EOI virtualization: no EOI exit");
    // The sends are the same program's, within the run's timing changes.
    let ratio = icr_on as f64 / icr_off as f64;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "ICR writes {icr_off} -> {icr_on}"
    );
    assert!(irq_on <= irq_off, "posted interrupts need no kick exit");
    assert!(slow_on < slow_off);
}

// ---- Ding & Shan's figures, quantitatively ----
//
// Each target is the paper's stated value with a ±25% tolerance on kvm2015
// (16 pCPUs, one 16-vCPU VM unless stated). Targets the model does not reach
// are ledger claims with status `missed` (docs/claims.toml, with the
// model's figure and why): `smplab claims check` keeps them from drifting,
// and the tolerance here is never loosened to make one pass.

/// Within ±25% of the paper's value.
fn within_25pct(what: &str, sim: f64, paper: f64) {
    eprintln!("{what}: sim {sim:.2}, paper {paper:.2}");
    assert!(
        (sim - paper).abs() <= 0.25 * paper.abs(),
        "{what}: sim {sim:.2} vs paper {paper:.2} (±25%)"
    );
}

/// APIC-access exits: ICR writes, EOI writes and timer programming.
fn apic_exits(r: &RunRecord) -> u64 {
    let s = r.sim.as_ref().unwrap();
    ["apic_icr", "apic_eoi", "timer"]
        .iter()
        .map(|k| s.exits.get(*k).copied().unwrap_or(0))
        .sum()
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

/// Calibration, not evidence: the dedup profile's one free number (one
/// munmap shootdown per two chunks, which the seed does not give) was fitted
/// to this figure (ledger claim `seed000.dedup-hlt`, kind `fitted`).
#[test]
fn seed000_calibration_dedup_hlt_173pct() {
    within_25pct(
        "dedup slowdown, HLT idle, %",
        seed000_slowdown("dedup", Idle::Hlt),
        173.0,
    );
}

/// Calibration, not evidence: the munmap rate is fitted to the HLT figure
/// above, and this one entered its band only after kvm2015's exit cost was
/// re-converted (862 → 959 ns) while working toward it (74.6% before; ledger
/// claim `seed000.dedup-poll`, kind `fitted`).
#[test]
fn seed000_calibration_dedup_poll_103pct() {
    within_25pct(
        "dedup slowdown, polling idle, %",
        seed000_slowdown("dedup", Idle::Poll),
        103.0,
    );
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
