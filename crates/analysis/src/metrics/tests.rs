//! Tests of the lab's metrics (split from metrics.rs by size).

use super::*;
use smplab_experiment::store::Status;
use smplab_experiment::testutil::rec;
use smplab_experiment::testutil::vm_point;
use smplab_record::sim::SimSection;
use smplab_record::vmm::{IoThreadStats, VmmSection};
use smplab_record::LatencyHistogram;

fn entry(p: Point, records: Vec<RunRecord>) -> Entry {
    Entry::new(p, Status::Ok, 0.0, records)
}
fn native(workload: &str, n: u32, rep: u32) -> Point {
    let mut p = vm_point(workload, n, rep).native_twin();
    p.rep = rep;
    p
}
const S: u64 = 1_000_000_000;

#[test]
fn summary_median_and_spread() {
    let s = Summary::of(&[3.0, 1.0, 2.0, 100.0]).unwrap();
    assert_eq!(s.median, 2.5);
    assert_eq!(s.min, 1.0);
    assert_eq!(s.max, 100.0);
    // deviations 1.5, 0.5, 0.5, 97.5 -> median 1.0
    assert_eq!(s.mad, 1.0);
    assert!(Summary::of(&[]).is_none());
    assert!(Summary::of(&[f64::NAN]).is_none());
}

#[test]
fn slowdown_vs_native_uses_native_median() {
    let mut es = vec![];
    for (rep, t) in [(0, 10), (1, 12), (2, 11)] {
        es.push(entry(
            native("dedup", 2, rep),
            vec![rec(Executor::Native, "dedup", 2, t * S / 10)],
        ));
    }
    for (rep, t) in [(0, 22), (1, 33), (2, 27)] {
        es.push(entry(
            vm_point("dedup", 2, rep),
            vec![rec(Executor::Vm, "dedup", 2, t * S / 10)],
        ));
    }
    let store = Store::from_entries(es);
    let r = Results::new(&store);
    let s = r.slowdown(&vm_point("dedup", 2, 0)).unwrap();
    // native median 1.1 s; vm 2.2, 3.3, 2.7 -> slowdowns 1.0, 2.0, 1.4545
    assert!((s.median - (2.7 / 1.1 - 1.0)).abs() < 1e-9);
    assert!((s.min - 1.0).abs() < 1e-9);
    assert!((s.max - 2.0).abs() < 1e-9);
    assert_eq!(s.n, 3);
    assert!(r.slowdown(&native("dedup", 2, 0)).is_none());
}

#[test]
fn failed_entries_are_ignored() {
    let es = vec![
        entry(
            native("dedup", 2, 0),
            vec![rec(Executor::Native, "dedup", 2, S)],
        ),
        Entry::new(
            vm_point("dedup", 2, 0),
            Status::Failed { reason: "x".into() },
            0.0,
            vec![rec(Executor::Vm, "dedup", 2, 9 * S)],
        ),
        entry(
            vm_point("dedup", 2, 1),
            vec![rec(Executor::Vm, "dedup", 2, 2 * S)],
        ),
    ];
    let store = Store::from_entries(es);
    let r = Results::new(&store);
    let s = r.slowdown(&vm_point("dedup", 2, 0)).unwrap();
    assert_eq!(s.n, 1);
    assert!((s.median - 1.0).abs() < 1e-12);
}

#[test]
fn sim_slowdown_uses_its_own_native_model() {
    let p = smplab_experiment::testutil::as_sim(
        &vm_point("dedup", 2, 0),
        smplab_record::config::DEFAULT_PLATFORM,
    );
    let mut r0 = rec(Executor::Sim, "dedup", 2, 3 * S);
    r0.sim = Some(SimSection {
        native_wall_ns: Some(2 * S),
        vcpus: 2,
        idle_ns: S,
        spin_ns: 3 * S,
        ..Default::default()
    });
    let store = Store::from_entries(vec![entry(p.clone(), vec![r0])]);
    let r = Results::new(&store);
    assert!((r.slowdown(&p).unwrap().median - 0.5).abs() < 1e-12);
    // idle 1 s over 2 vCPUs × 3 s; spin 3 s over 6 vCPU-seconds.
    assert!((r.idle_fraction(&p).unwrap().median - 1.0 / 6.0).abs() < 1e-12);
    assert!((r.spin_fraction(&p).unwrap().median - 0.5).abs() < 1e-12);
    assert!(r.spin_rate(&p).is_some());
}

/// Hand-made runs: six natives at 100–105 ms, six VM runs at 150–156 ms,
/// and 2-VM runs: slowdown and weighted speedup with intervals.
#[test]
fn slowdown_and_weighted_speedup_intervals() {
    let ms = 1_000_000u64;
    let jitter = [0u64, 3, 5, 1, 4, 2];
    let vm1 = vm_point("dedup", 2, 0);
    let native = vm1.native_twin();
    let mut vm2 = vm1.clone();
    vm2.config.set_vms(2);
    let mut es = vec![];
    for (rep, j) in jitter.iter().enumerate() {
        let at = |p: &Point| {
            let mut p = p.clone();
            p.rep = u32::try_from(rep).unwrap_or(u32::MAX);
            p
        };
        // Native repetitions numbered apart from the VM's: no pairs, so the
        // slowdown's interval is built from the two independent intervals
        // (the paired one: metrics/paired.rs).
        let mut n = at(&native);
        n.rep += 100;
        es.push(entry(
            n,
            vec![rec(Executor::Native, "dedup", 2, (100 + j) * ms)],
        ));
        es.push(entry(
            at(&vm1),
            vec![rec(Executor::Vm, "dedup", 2, (150 + j) * ms)],
        ));
        // Two VMs each twice as slow: weighted speedup ~1.
        es.push(entry(
            at(&vm2),
            vec![
                rec(Executor::Vm, "dedup", 2, (300 + j) * ms),
                rec(Executor::Vm, "dedup", 2, (300 + j) * ms),
            ],
        ));
    }
    let store = Store::from_entries(es);
    let r = Results::new(&store);
    let w = r.wall_ci(&native).unwrap();
    assert_eq!((w.n, w.lo, w.hi), (6, 0.100, 0.105));
    let s = r.slowdown_ci(&vm1).unwrap();
    // Ratio of medians 152.5/102.5; interval [150/105, 155/100] − 1.
    assert!((s.median - (152.5 / 102.5 - 1.0)).abs() < 1e-12, "{s:?}");
    assert!((s.lo - (150.0 / 105.0 - 1.0)).abs() < 1e-12, "{s:?}");
    assert!((s.hi - (155.0 / 100.0 - 1.0)).abs() < 1e-12, "{s:?}");
    assert!(s.lo <= s.median && s.median <= s.hi);
    assert!((s.coverage - 0.96875 * 0.96875).abs() < 1e-12);
    let ws = r.weighted_speedup_ci(&vm2).unwrap();
    assert_eq!(ws.ci.n, 6);
    assert_eq!(ws.excluded, 0);
    assert_eq!(
        ws.unverified, 6,
        "records without windows cannot be checked"
    );
    assert!(ws.ci.lo <= ws.ci.median && ws.ci.median <= ws.ci.hi);
    // Per rep 2 × 152.5/(300+j) ms; widened by T_1's [150, 155] around 152.5.
    let hi = 2.0 * 152.5 / 300.0 * 155.0 / 152.5;
    assert!((ws.ci.hi - hi).abs() < 1e-12, "{ws:?}");
    assert!((r.weighted_speedup(&vm2).unwrap().median - ws.ci.median).abs() < 1e-12);
    // A native point has no slowdown; a divisor interval reaching 0 no ratio.
    assert!(r.slowdown_ci(&native).is_none());
    let zero = MedianCi::of(&[0.0, 1.0]).unwrap();
    assert!(ratio_ci(&w, &zero).is_none());
}

#[test]
fn spin_rate_of_measured_runs() {
    let p = vm_point("spinlock", 2, 0);
    let mut a = rec(Executor::Vm, "spinlock", 2, 2 * S);
    a.counters.spin_iterations = 4_000_000;
    let mut b = rec(Executor::Vm, "spinlock", 2, S);
    b.counters.spin_iterations = 1_000_000;
    let mut p1 = p.clone();
    p1.rep = 1;
    let store = Store::from_entries(vec![entry(p.clone(), vec![a]), entry(p1, vec![b])]);
    let r = Results::new(&store);
    let s = r.spin_rate(&p).unwrap();
    // 2 M/s and 1 M/s: median 1.5 M/s.
    assert!((s.median - 1.5e6).abs() < 1e-6);
    assert!(
        r.spin_fraction(&p).is_none(),
        "no spin time without the simulator"
    );
}

fn windowed(mut r: RunRecord, start_ms: u64, end_ms: u64) -> RunRecord {
    let ms = 1_000_000;
    r.timing.window = Some(smplab_record::WorkloadWindow {
        clock: smplab_record::WindowClock::HostMonotonic,
        threads_ready_ns: start_ms * ms,
        start_ns: start_ms * ms,
        end_ns: end_ms * ms,
        start_gate: None,
        settle: None,
    });
    r
}

/// Hand-made 2-VM runs: one whose windows overlap fully, one that
/// overlaps 50/150, one without windows. The second is excluded, the
/// third counted but unverified.
#[test]
fn weighted_speedup_excludes_runs_whose_windows_did_not_overlap() {
    let one = vm_point("dedup", 2, 0);
    let mut es = vec![entry(
        one.clone(),
        vec![rec(Executor::Vm, "dedup", 2, 2 * S)],
    )];
    let mut p2 = one.clone();
    p2.config.set_vms(2);
    let two = |rep: u32, a: RunRecord, b: RunRecord| {
        let mut p = p2.clone();
        p.rep = rep;
        entry(p, vec![a, b])
    };
    let r4 = || rec(Executor::Vm, "dedup", 2, 4 * S);
    // Together: weighted speedup 2/4 + 2/4 = 1.
    es.push(two(0, windowed(r4(), 0, 100), windowed(r4(), 0, 100)));
    // Apart (overlap 1/3) and faster: 2/1 + 2/1 = 4, must not count.
    let r1 = || rec(Executor::Vm, "dedup", 2, S);
    es.push(two(1, windowed(r1(), 0, 100), windowed(r1(), 50, 150)));
    // No windows (older records): counted, marked unverified.
    es.push(two(2, r4(), r4()));
    assert_eq!(workload_overlap(&es[1].records), Some(1.0));
    assert_eq!(workload_overlap(&es[2].records), Some(50.0 / 150.0));
    assert_eq!(workload_overlap(&es[3].records), None);
    let store = Store::from_entries(es);
    let r = Results::new(&store);
    assert!((r.weighted_speedup(&p2).unwrap().median - 1.0).abs() < 1e-12);
    let ws = r.weighted_speedup_ci(&p2).unwrap();
    assert_eq!((ws.excluded, ws.unverified), (1, 1));
    assert!((ws.ci.median - 1.0).abs() < 1e-12);
}

#[test]
fn weighted_speedup_over_vms() {
    let mut es = vec![entry(
        vm_point("dedup", 2, 0),
        vec![rec(Executor::Vm, "dedup", 2, 2 * S)],
    )];
    // Two VMs each taking 4 s: throughput equal to one VM -> 1.0.
    let mut p2 = vm_point("dedup", 2, 0);
    p2.config.set_vms(2);
    es.push(entry(
        p2.clone(),
        vec![
            rec(Executor::Vm, "dedup", 2, 4 * S),
            rec(Executor::Vm, "dedup", 2, 4 * S),
        ],
    ));
    // Four VMs: 2 s, 4 s, 8 s, 8 s -> 1 + 0.5 + 0.25 + 0.25 = 2.0.
    let mut p4 = vm_point("dedup", 2, 0);
    p4.config.set_vms(4);
    es.push(entry(
        p4.clone(),
        [2, 4, 8, 8]
            .iter()
            .map(|t| rec(Executor::Vm, "dedup", 2, t * S))
            .collect(),
    ));
    let store = Store::from_entries(es);
    let r = Results::new(&store);
    assert!((r.weighted_speedup(&p2).unwrap().median - 1.0).abs() < 1e-12);
    assert!((r.weighted_speedup(&p4).unwrap().median - 2.0).abs() < 1e-12);
    let series = r.weighted_speedup_series(&vm_point("dedup", 2, 0));
    assert_eq!(
        series.iter().map(|x| x.0).collect::<Vec<_>>(),
        vec![1, 2, 4]
    );
    assert!((series[0].1.median - 1.0).abs() < 1e-12);
}

fn vmm_record(wall_s: u64, exits: &[(&str, u64)], lat_ns: &[u64]) -> RunRecord {
    let mut r = rec(Executor::Vm, "dedup", 2, wall_s * S);
    let mut per = vec![BTreeMap::new(), BTreeMap::new()];
    for (i, (k, n)) in exits.iter().enumerate() {
        per[i % 2].insert(k.to_string(), *n);
    }
    let mut lat = BTreeMap::new();
    lat.insert(
        "uart/global".to_string(),
        LatencyHistogram::from_samples(lat_ns),
    );
    r.vmm = Some(VmmSection {
        sync: "global".into(),
        vcpus: 2,
        exits_per_vcpu: per,
        exit_latency: lat,
        global_lock_wait: Some(LatencyHistogram::from_samples(&[100, 200, 300, 400])),
        ..Default::default()
    });
    r
}

/// A hand-made record whose whole run (10 s: boot, workload, result
/// stream) and workload window (2 s) differ: every exit figure and the
/// Amdahl input come from the window; an old record without one falls
/// back to the whole run and says so.
#[test]
fn exit_figures_come_from_the_workload_window() {
    let mut whole = vmm_record(10, &[("io_out", 1000), ("mmio_read", 500)], &[50_000]);
    let old = whole.clone();
    let mut win_exits = vec![BTreeMap::new(), BTreeMap::new()];
    win_exits[0].insert("io_out".to_string(), 100);
    win_exits[1].insert("mmio_read".to_string(), 60);
    let mut win_lat = BTreeMap::new();
    win_lat.insert(
        "uart/global".to_string(),
        LatencyHistogram::from_samples(&[1000; 160]),
    );
    if let Some(v) = whole.vmm.as_mut() {
        v.window = Some(smplab_record::vmm::VmmWindow {
            ready_ns: S,
            go_ns: 2 * S,
            done_ns: Some(4 * S),
            exits_per_vcpu: win_exits,
            exit_latency: win_lat,
            global_lock_wait: Some(LatencyHistogram::from_samples(&[7, 7, 7])),
            ..Default::default()
        });
    }
    assert_eq!(exit_scope(&whole), Some(ExitScope::Window));
    assert_eq!(exit_scope(&old), Some(ExitScope::WholeRun));
    let c = exit_counts(&whole);
    assert_eq!((c["io_out"], c["mmio_read"]), (100, 60));
    let rates = exit_rates(std::slice::from_ref(&whole));
    assert!((rates["io_out"] - 50.0).abs() < 1e-9, "{rates:?}");
    assert!((exit_rates(std::slice::from_ref(&old))["io_out"] - 100.0).abs() < 1e-9);
    // 160 exits / 2 vCPUs / 2 s × 1 µs.
    let h = exit_handling_per_cpu(&whole).unwrap();
    assert!((h - 160.0 / 2.0 / 2.0 * 1e-6).abs() < 1e-9, "{h}");
    let h_old = exit_handling_per_cpu(&old).unwrap();
    assert!(
        (h_old - 1500.0 / 2.0 / 10.0 * 50e-6).abs() < 1e-9,
        "{h_old}"
    );

    let p = vm_point("dedup", 2, 0);
    let store = Store::from_entries(vec![entry(p.clone(), vec![whole.clone()])]);
    let r = Results::new(&store);
    assert_eq!(r.exit_scope(&p), Some(ExitScope::Window));
    assert_eq!(r.lock_wait(&p).unwrap()[0].median, 7.0);
    assert_eq!(r.exit_latency(&p).unwrap()[0].median, 1000.0);
    let mut q = p.clone();
    q.rep = 1;
    let store = Store::from_entries(vec![entry(p.clone(), vec![whole]), entry(q, vec![old])]);
    assert_eq!(
        Results::new(&store).exit_scope(&p),
        Some(ExitScope::WholeRun)
    );
}

/// A measured run and a simulated run of the same work, the measured one
/// with boot and result-stream exits outside its window and KVM-only
/// reasons inside it, the simulated one with simulator-only reasons:
/// "exits/s" counts the same reasons over the same span for both.
#[test]
fn exits_per_s_counts_the_same_reasons_over_the_same_span_for_vm_and_sim() {
    // Whole run 10 s: boot HLTs and the result stream are in it.
    let mut vm = vmm_record(10, &[("io_out", 900), ("hlt", 400)], &[1000]);
    let mut win = vec![BTreeMap::new(), BTreeMap::new()];
    // Six device exits and the guest's "done" on the window port.
    win[0].insert("io_out".to_string(), 7u64);
    win[1].insert("intr".to_string(), 1u64);
    let mut win_lat = BTreeMap::new();
    win_lat.insert(
        "window/fine".to_string(),
        LatencyHistogram::from_samples(&[3000]),
    );
    let mut k0 = BTreeMap::new();
    k0.insert("halt_exits".to_string(), 30u64);
    k0.insert("irq_exits".to_string(), 500u64);
    k0.insert("irq_window_exits".to_string(), 70u64);
    let mut k1 = BTreeMap::new();
    k1.insert("halt_exits".to_string(), 10u64);
    k1.insert("irq_exits".to_string(), 480u64);
    if let Some(v) = vm.vmm.as_mut() {
        v.window = Some(smplab_record::vmm::VmmWindow {
            go_ns: S,
            done_ns: Some(3 * S),
            exits_per_vcpu: win,
            exit_latency: win_lat,
            kvm_vcpu_stats: vec![k0, k1],
            ..Default::default()
        });
    }
    vm.timing.wall_ns = 2 * S;
    let p = vm_point("dedup", 2, 0);
    let sp = smplab_experiment::testutil::as_sim(&p, smplab_record::config::DEFAULT_PLATFORM);
    let mut sim = rec(Executor::Sim, "dedup", 2, 2 * S);
    let sim_exits: BTreeMap<String, u64> = [
        ("hlt", 40),
        ("io", 6),
        ("irq", 980),
        ("apic_icr", 300),
        ("apic_eoi", 300),
        ("preemption", 50),
        ("timer", 4),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    sim.sim = Some(SimSection {
        vcpus: 2,
        exits: sim_exits,
        ..Default::default()
    });
    let store = Store::from_entries(vec![
        entry(p.clone(), vec![vm]),
        entry(sp.clone(), vec![sim]),
    ]);
    let r = Results::new(&store);
    // (40 HLT + 6 I/O + 980 host interrupts) over the 2 s window.
    let want = (40.0 + 6.0 + 980.0) / 2.0;
    assert_eq!(r.workload_exits_per_s(&p), Some(want));
    assert_eq!(r.workload_exits_per_s(&sp), Some(want));
    // The reasons only one side counts are still reported by reason.
    assert!(r.exits_per_s(&p).contains_key("irq_window"));
    assert!(r.exits_per_s(&p).contains_key("window_port"));
    assert!(r.exits_per_s(&sp).contains_key("apic_icr"));
    let pred = r.predictions(None);
    let e = pred
        .iter()
        .find(|x| x.metric == "exits/s")
        .expect("exits/s pair");
    assert_eq!(e.rel_error(), 0.0);
}

/// Idle fraction: the guest's window idle time, not its whole-run idle
/// counters (boot, result stream and the idle context's scheduling work);
/// records without window idle have none rather than another meaning.
#[test]
fn idle_fraction_is_idle_inside_the_window_for_vm_and_sim() {
    let mut vm = rec(Executor::Vm, "dedup", 2, 2 * S);
    vm.guest = Some(smplab_record::guest::GuestSection {
        idle_ns_per_vcpu: vec![3 * S, S],
        window_idle_ns_per_vcpu: vec![S, 0],
        ..Default::default()
    });
    assert_eq!(idle_fraction(&vm), Some(0.25));
    let mut old = vm.clone();
    if let Some(g) = old.guest.as_mut() {
        g.window_idle_ns_per_vcpu.clear();
    }
    assert_eq!(idle_fraction(&old), None);
    let mut sim = rec(Executor::Sim, "dedup", 2, 2 * S);
    sim.sim = Some(SimSection {
        vcpus: 2,
        idle_ns: S,
        ..Default::default()
    });
    assert_eq!(idle_fraction(&sim), Some(0.25));
}

#[test]
fn exits_per_second_by_reason_and_latency_percentiles() {
    let p = vm_point("dedup", 2, 0);
    let store = Store::from_entries(vec![entry(
        p.clone(),
        vec![vmm_record(
            2,
            &[("io_out", 1000), ("hlt", 400)],
            &[1000; 10],
        )],
    )]);
    let r = Results::new(&store);
    let e = r.exits_per_s(&p);
    assert_eq!(e["io_out"].median, 500.0);
    assert_eq!(e["hlt"].median, 200.0);
    let [p50, _, _] = r.exit_latency(&p).unwrap();
    assert!((p50.median - 1000.0).abs() <= 1.0);
    let [l50, _, l99] = r.lock_wait(&p).unwrap();
    assert!((l50.median - 200.0).abs() <= 1.0);
    assert!((l99.median - 400.0).abs() <= 1.0);
}

#[test]
fn exit_counts_merge_vmm_and_kvm_and_split_the_result_stream() {
    let mut r = vmm_record(1, &[("io_out", 330), ("eagain", 1)], &[1]);
    let v = r.vmm.as_mut().unwrap();
    v.exit_latency.insert(
        "result/global".into(),
        LatencyHistogram::from_samples(&[200; 320]),
    );
    let mut k0 = BTreeMap::new();
    k0.insert("halt_exits".to_string(), 17u64);
    k0.insert("irq_exits".to_string(), 3u64);
    let mut k1 = BTreeMap::new();
    k1.insert("halt_exits".to_string(), 5u64);
    v.kvm_vcpu_stats = vec![k0, k1];
    // vCPU 1 also counted 2 HLTs itself: the larger count (5) wins.
    v.exits_per_vcpu[1].insert("hlt".into(), 2);
    v.exit_latency.insert(
        "window/global".into(),
        LatencyHistogram::from_samples(&[300]),
    );
    let c = exit_counts(&r);
    assert_eq!(c["io_out"], 9);
    assert_eq!(c["window_port"], 1);
    assert_eq!(c["result_stream"], 320);
    assert_eq!(c["hlt"], 22);
    assert_eq!(c["irq"], 3);
    assert!(!c.contains_key("eagain"));
}

#[test]
fn merged_histogram_counts_add_up() {
    let a = LatencyHistogram::from_samples(&[10, 20, 30]);
    let b = LatencyHistogram::from_samples(&[1000, 2000]);
    let m = merge_histograms(&[&a, &b]).unwrap();
    assert_eq!(m.count, 5);
    assert_eq!(m.buckets.iter().map(|x| x.1).sum::<u64>(), 5);
    assert!(m.p99_ns >= 2000);
    assert!(m.p50_ns <= 64);
}

#[test]
fn amdahl_matches_seed_004_figure_3_7() {
    // Native: P = 97.5 %, S(16) = 11.64.
    assert!((amdahl(0.975, 16.0) - 11.64).abs() < 0.01);
    // I/O thread: exit handling 0.159 % per CPU, 62.98 % synchronous.
    let i = AmdahlInputs {
        p_native: 0.975,
        exit_handling_per_cpu: 0.00159,
        sync_share: 0.6298,
    };
    assert!((i.p_at(16.0) - 0.9594).abs() < 0.0005);
    assert!((i.projected(16.0) - 9.94).abs() < 0.05);
    // And back: the P that explains S(16) = 11.64.
    assert!((parallel_fraction(11.64, 16.0).unwrap() - 0.975).abs() < 0.001);
}

#[test]
fn speedup_vs_vcpus_with_projection() {
    let mut es = vec![
        entry(
            native("dedup", 1, 0),
            vec![rec(Executor::Native, "dedup", 1, 10 * S)],
        ),
        // Native speedup 1.9 on 2 threads -> P = (1 - 1/1.9)/(1/2) = 0.947.
        entry(
            native("dedup", 2, 0),
            vec![rec(Executor::Native, "dedup", 2, 10 * S / 19 * 10 / 10)],
        ),
    ];
    // Recompute exactly: 10 / 1.9 s.
    es[1].records[0].timing.wall_ns = 5_263_157_894; // 10 s / 1.9, truncated
    let mut v1 = vmm_record(10, &[("io_out", 10_000)], &[10_000; 4]);
    v1.vmm.as_mut().unwrap().vcpus = 1;
    es.push(entry(vm_point("dedup", 1, 0), vec![v1]));
    es.push(entry(
        vm_point("dedup", 2, 0),
        vec![vmm_record(6, &[("io_out", 1)], &[1])],
    ));
    let store = Store::from_entries(es);
    let r = Results::new(&store);
    let (curve, inputs) = r.speedup_vs_vcpus(&vm_point("dedup", 2, 0));
    assert_eq!(curve.len(), 2);
    assert!((curve[0].measured.median - 1.0).abs() < 1e-12);
    assert!((curve[1].measured.median - 10.0 / 6.0).abs() < 1e-9);
    // One repetition: the interval is the point itself.
    assert_eq!(curve[1].measured_ci.median, curve[1].measured.median);
    assert_eq!(curve[1].measured_ci.lo, curve[1].measured_ci.hi);
    let i = inputs.unwrap();
    assert!((i.p_native - (1.0 - 1.0 / 1.9) * 2.0).abs() < 1e-6);
    // 1000 exits/s on one vCPU × 10 µs = 1 % of the vCPU; global: all synchronous.
    assert!((i.exit_handling_per_cpu - 0.01).abs() < 1e-4);
    assert_eq!(i.sync_share, 1.0);
    let proj = curve[1].projected.unwrap();
    let expect = amdahl(i.p_native * (1.0 - 0.01 * 2.0), 2.0);
    assert!((proj - expect).abs() < 1e-3);
    assert!(curve[1].native_bound.unwrap() > proj);
}

#[test]
fn speedup_is_per_unit_of_work() {
    // Weak scaling: twice the threads do twice the iterations in the same
    // time -> speedup 2 and P = 1, not speedup 1.
    let mut n1 = rec(Executor::Native, "blackscholes", 1, S);
    n1.counters.ops.insert("compute_iters".into(), 1_000_000);
    let mut n2 = rec(Executor::Native, "blackscholes", 2, S);
    n2.counters.ops.insert("compute_iters".into(), 2_000_000);
    let mut v1 = rec(Executor::Vm, "blackscholes", 1, 2 * S);
    v1.counters.ops.insert("compute_iters".into(), 1_000_000);
    let mut v2 = rec(Executor::Vm, "blackscholes", 2, 2 * S);
    v2.counters.ops.insert("compute_iters".into(), 2_000_000);
    let store = Store::from_entries(vec![
        entry(native("blackscholes", 1, 0), vec![n1]),
        entry(native("blackscholes", 2, 0), vec![n2]),
        entry(vm_point("blackscholes", 1, 0), vec![v1]),
        entry(vm_point("blackscholes", 2, 0), vec![v2]),
    ]);
    let r = Results::new(&store);
    assert!(
        (r.native_parallel_fraction(&vm_point("blackscholes", 1, 0))
            .unwrap()
            - 1.0)
            .abs()
            < 1e-9
    );
    let (curve, _) = r.speedup_vs_vcpus(&vm_point("blackscholes", 2, 0));
    assert!((curve[1].measured.median - 2.0).abs() < 1e-9);
}

#[test]
fn pearson_and_macro_micro_correlation() {
    assert!((pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]).unwrap() - 1.0).abs() < 1e-12);
    assert!((pearson(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]).unwrap() + 1.0).abs() < 1e-12);
    assert!(pearson(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]).is_none());
    assert!(pearson(&[1.0, 2.0], &[1.0, 2.0]).is_none());
    // Three workloads: slowdown follows the halt rate, not the spin rate.
    let mut es = vec![];
    for (wl, halts, spins, vm_s) in [
        ("a", 100u64, 7u64, 2u64),
        ("b", 300, 1, 4),
        ("c", 200, 9, 3),
    ] {
        es.push(entry(
            native(wl, 2, 0),
            vec![rec(Executor::Native, wl, 2, S)],
        ));
        let mut r = rec(Executor::Vm, wl, 2, vm_s * S);
        r.guest = Some(smplab_record::guest::GuestSection {
            halts: halts * vm_s,
            ..Default::default()
        });
        r.counters.spin_iterations = spins * vm_s;
        let mut p = vm_point(wl, 2, 0);
        p.workload = wl.into();
        es.push(entry(p, vec![r]));
    }
    let store = Store::from_entries(es);
    let r = Results::new(&store);
    let c = correlate_with_slowdown(&r, Executor::Vm);
    assert_eq!(c[0].micro, "guest halts");
    assert!((c[0].r - 1.0).abs() < 1e-9);
    assert_eq!(c[0].pairs.len(), 3);
    let spin = c.iter().find(|x| x.micro == "spin iterations").unwrap();
    assert!(spin.r.abs() < 0.9);
}

#[test]
fn sync_share_by_mode() {
    let mut r = vmm_record(1, &[("io_out", 80), ("io_in", 20)], &[1]);
    assert_eq!(sync_share(&r), 1.0);
    let v = r.vmm.as_mut().unwrap();
    v.sync = "iothread".into();
    v.io_thread = Some(IoThreadStats {
        requests: 100,
        posted_writes: 60,
        ..Default::default()
    });
    assert!((sync_share(&r) - 0.4).abs() < 1e-12);
    r.vmm.as_mut().unwrap().sync = "fine".into();
    assert_eq!(sync_share(&r), 0.0);
}

#[test]
fn predictions_pair_sim_with_measurement() {
    let mut es = vec![
        entry(
            native("dedup", 2, 0),
            vec![rec(Executor::Native, "dedup", 2, S)],
        ),
        entry(
            vm_point("dedup", 2, 0),
            vec![rec(Executor::Vm, "dedup", 2, 2 * S)],
        ),
    ];
    let sp = smplab_experiment::testutil::as_sim(&vm_point("dedup", 2, 0), "calibrated");
    let mut sr = rec(Executor::Sim, "dedup", 2, 3 * S);
    sr.sim = Some(SimSection {
        native_wall_ns: Some(2 * S),
        vcpus: 2,
        ..Default::default()
    });
    es.push(entry(sp, vec![sr]));
    let store = Store::from_entries(es);
    let r = Results::new(&store);
    let preds = r.predictions(None);
    let slow = preds.iter().find(|p| p.metric == "slowdown").unwrap();
    assert!((slow.measured - 1.0).abs() < 1e-12);
    assert!((slow.predicted - 0.5).abs() < 1e-12);
    assert!((slow.rel_error() + 0.5).abs() < 1e-12);
    let by = prediction_error_by_metric(&preds);
    let slow = by["slowdown"].rel.unwrap();
    assert!((slow.median - 0.5).abs() < 1e-12);
    assert!(r.predictions(Some("other")).is_empty());
}

fn pred(metric: &str, measured: f64, predicted: f64) -> Prediction {
    Prediction {
        label: format!("{metric} {measured}"),
        metric: metric.into(),
        measured,
        predicted,
    }
}

/// A measured 0 has no relative error: the pair is counted apart, not in
/// the relative median (nor dropped), and its absolute error is kept.
#[test]
fn prediction_errors_count_pairs_without_a_relative_error() {
    let preds = [
        pred("idle fraction", 0.0, 0.000002),
        pred("idle fraction", 0.0009, 0.000005),
        pred("idle fraction", 0.2, 0.3),
    ];
    let by = prediction_error_by_metric(&preds);
    let e = by["idle fraction"];
    assert_eq!(e.pairs, 3);
    assert_eq!(e.rel_undefined, 1);
    let rel = e.rel.unwrap();
    assert_eq!(rel.n, 2);
    // |−0.9944| and 0.5: the median of the two.
    assert!((rel.median - (0.000895 / 0.0009 + 0.5) / 2.0).abs() < 1e-9);
    let abs = e.abs.unwrap();
    assert_eq!(abs.n, 3);
    // |absolute errors| 0.000002, 0.000895, 0.1: median 0.000895 (0.09 pp).
    assert!((abs.median - 0.000895).abs() < 1e-12);
    assert!(e.ratio.is_none(), "only slowdowns have a ratio error");
    // A slowdown of +2% predicted at −1%: 150% off, 3 points, and as
    // VM/native ratios 0.99 for 1.02, 2.9% off.
    let s = prediction_error_by_metric(&[pred("slowdown", 0.02, -0.01)])["slowdown"];
    assert!((s.rel.unwrap().median - 1.5).abs() < 1e-9);
    assert!((s.abs.unwrap().median - 0.03).abs() < 1e-12);
    assert!((s.ratio.unwrap().median - (1.0 - 0.99 / 1.02)).abs() < 1e-12);
    assert!(error_reads_in_points("idle fraction"));
    assert!(error_reads_in_points("slowdown"));
    assert!(!error_reads_in_points("exits/s"));
    assert!(!error_reads_in_points("wall time (s)"));
}

/// Only measured zeros: no relative summary at all, every pair counted.
#[test]
fn prediction_errors_with_only_measured_zeros_have_no_relative_median() {
    let by = prediction_error_by_metric(&[pred("idle fraction", 0.0, 0.01)]);
    let e = by["idle fraction"];
    assert_eq!((e.pairs, e.rel_undefined), (1, 1));
    assert!(e.rel.is_none());
    assert!((e.abs.unwrap().median - 0.01).abs() < 1e-12);
}
