//! Tests of the diagnosis: plans, attribution arithmetic and its caveats.

use super::*;
use smplab_experiment::runner::fake::{fake_wall_ns, FakeRunner};
use smplab_experiment::store::Store;
use smplab_experiment::sweep::{run_points, SweepOptions};

#[test]
fn plan_has_the_factors_for_each_executor() {
    let vm = Plan::new(baseline(Executor::Vm, "streamcluster", 2, 0.1, ""));
    let names: Vec<_> = vm.removed.iter().map(|(f, _)| f.name).collect();
    assert_eq!(
        names,
        [
            "HLT idle",
            "user-space spinning",
            "placement",
            "global device lock"
        ]
    );
    assert!(vm.not_applicable.is_empty());
    let sim = Plan::new(baseline(
        Executor::Sim,
        "streamcluster",
        16,
        0.1,
        smplab_record::config::DEFAULT_PLATFORM,
    ));
    assert_eq!(sim.removed.len(), 6);
    match &sim.all_removed.config {
        RunConfig::Sim(s) => {
            assert_eq!(s.ple, Some(Ple::Off));
            assert!(s.apicv);
        }
        other => panic!("not a sim config: {other:?}"),
    }
    assert_eq!(vm.points(2).len(), (1 + 1 + 4 + 1) * 2);
    assert_eq!(
        sim.points(1).len(),
        1 + 6 + 1,
        "no native run for the simulator"
    );
}

/// dedup's mutexes have spin_limit = 0 and it has no barriers; spinlock's
/// spinning is in spin locks, which the variant keeps: for both the
/// spin→block variant is the same program, so the removal is not applicable
/// and not run. streamcluster's spin-then-block barriers do change.
#[test]
fn a_removal_that_runs_the_same_program_is_not_applicable() {
    for w in ["dedup", "spinlock"] {
        let plan = Plan::new(baseline(Executor::Vm, w, 2, 0.1, ""));
        let names: Vec<_> = plan.removed.iter().map(|(f, _)| f.name).collect();
        assert_eq!(
            names,
            ["HLT idle", "placement", "global device lock"],
            "{w}"
        );
        assert_eq!(plan.not_applicable.len(), 1, "{w}");
        let (f, why) = &plan.not_applicable[0];
        assert_eq!(f.name, "user-space spinning");
        assert!(why.contains("same program"), "{why}");
        assert!(plan.points(3).iter().all(|p| p.variant == Variant::AsIs));
        assert_eq!(plan.all_removed.variant, Variant::AsIs);
    }
    // A setting the baseline already has is not applicable either.
    let mut b = baseline(Executor::Vm, "streamcluster", 2, 0.1, "");
    b.config.set_idle(IdlePolicy::Poll);
    let plan = Plan::new(b.clone());
    assert_eq!(plan.not_applicable[0].0.name, "HLT idle");
    assert!(plan.not_applicable[0].1.contains("already"));
    assert!(unchanged_by(&b, &b.native_twin()).is_none());
}

#[test]
fn repetitions_alternate_their_order() {
    let plan = Plan::new(baseline(Executor::Vm, "dedup", 2, 0.1, ""));
    let pts = plan.points(2);
    let k = pts.len() / 2;
    assert_eq!(pts[0].config_key(), plan.native.config_key());
    assert_eq!(pts[1].config_key(), plan.baseline.config_key());
    assert_eq!(pts[k - 1].config_key(), plan.all_removed.config_key());
    // Repetition 1 runs the same configurations in the reverse order.
    for i in 0..k {
        assert_eq!(pts[i].rep, 0);
        assert_eq!(pts[k + i].rep, 1);
        assert_eq!(pts[i].config_key(), pts[2 * k - 1 - i].config_key());
    }
}

/// A runner whose every VM configuration takes the same time, on a host
/// that gets 2% slower with every run: only run order differs. Interleaved,
/// alternating pairs leave every paired ratio's interval around 1, so
/// nothing is credited.
#[test]
fn run_order_is_not_credited() {
    use smplab_experiment::runner::{RunError, Runner};
    use std::sync::atomic::{AtomicU64, Ordering};
    struct Drifting(FakeRunner, AtomicU64);
    impl Runner for Drifting {
        fn availability(
            &self,
            e: Executor,
        ) -> Result<(), smplab_experiment::execute::ExecuteError> {
            self.0.availability(e)
        }
        fn run(&self, p: &Point) -> Result<Vec<smplab_record::RunRecord>, RunError> {
            let n = self.1.fetch_add(1, Ordering::Relaxed);
            let mut rs = self.0.run(p)?;
            let base = if p.executor() == Executor::Native {
                1e9
            } else {
                2e9
            };
            for r in &mut rs {
                // Casts: a few seconds in ns fit u64.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let wall = (base * (1.0 + 0.02 * n as f64)) as u64;
                r.timing.wall_ns = wall;
            }
            Ok(rs)
        }
    }
    let plan = Plan::new(baseline(Executor::Vm, "streamcluster", 2, 0.1, ""));
    let mut store = Store::from_entries(vec![]);
    let runner = Drifting(FakeRunner::new(), AtomicU64::new(0));
    run_points(
        &plan.points(8),
        &mut store,
        &runner,
        &SweepOptions::default(),
    )
    .unwrap();
    let a = attribute(&Results::new(&store), &plan).unwrap();
    assert_eq!(a.rows.len(), 4);
    for r in &a.rows {
        let c = r.paired.unwrap();
        assert_eq!(c.n, 8);
        assert!(c.lo < 1.0 && c.hi > 1.0, "{}: {c:?}", r.factor);
        assert!(!r.credited, "{}", r.factor);
    }
}

#[test]
fn attribution_arithmetic_on_fake_runs() {
    let plan = Plan::new(baseline(Executor::Vm, "streamcluster", 2, 0.1, ""));
    let mut store = Store::from_entries(vec![]);
    run_points(
        &plan.points(6),
        &mut store,
        &FakeRunner::new(),
        &SweepOptions::default(),
    )
    .unwrap();
    let results = Results::new(&store);
    let a = attribute(&results, &plan).unwrap();
    // Fake: native 1.0; VM = 1 + 0.4 hlt + 0.3 spin + 0.1 unpinned + 0.2 global.
    assert!((a.baseline.median - 1.0).abs() < 1e-9);
    let c: Vec<f64> = a.rows.iter().map(|r| r.contribution).collect();
    for (got, want) in c.iter().zip([0.4, 0.3, 0.1, 0.2]) {
        assert!((got - want).abs() < 1e-9, "{c:?}");
    }
    // Six identical pairs each: every ratio's interval is a point below 1.
    assert!(a.rows.iter().all(|r| r.credited), "{:?}", a.rows);
    assert!((a.rows[0].paired.unwrap().median - 1.6 / 2.0).abs() < 1e-9);
    // The fake's factors are additive: nothing left, no interaction.
    assert!(a.all_removed.unwrap().median.abs() < 1e-9);
    assert!(a.interaction.unwrap().abs() < 1e-9);
    assert!(a.missing.is_empty());
    let t = table(&a);
    assert!(t.contains("HLT idle") && t.contains("Factors interact"));
    assert!(!t.contains("NaN"));
    assert!(!t.contains("WARNING"), "{t}");
    assert_eq!(detect(&results).len(), 1);
    assert_eq!(fake_wall_ns(&plan.native), 1_000_000_000);
}

/// One repetition: whatever the differences, a warning and no credit.
#[test]
fn one_repetition_is_warned_about_and_credits_nothing() {
    for reps in [1u32, 3] {
        let plan = Plan::new(baseline(Executor::Vm, "streamcluster", 2, 0.1, ""));
        let mut store = Store::from_entries(vec![]);
        run_points(
            &plan.points(reps),
            &mut store,
            &FakeRunner::new(),
            &SweepOptions::default(),
        )
        .unwrap();
        let a = attribute(&Results::new(&store), &plan).unwrap();
        assert!(a.rows.iter().all(|r| !r.credited && r.credit() == 0.0));
        assert!(a.too_few_pairs());
        let t = table(&a);
        assert!(t.contains("WARNING"), "{t}");
        assert_eq!(t.contains("one repetition"), reps == 1, "{t}");
    }
    // The not-applicable row is in the table.
    let plan = Plan::new(baseline(Executor::Vm, "dedup", 2, 0.1, ""));
    let mut store = Store::from_entries(vec![]);
    run_points(
        &plan.points(1),
        &mut store,
        &FakeRunner::new(),
        &SweepOptions::default(),
    )
    .unwrap();
    let t = table(&attribute(&Results::new(&store), &plan).unwrap());
    assert!(
        t.contains("not applicable") && t.contains("same program"),
        "{t}"
    );
    assert!(!t.contains("every spin wait blocks"), "{t}");
}

#[test]
fn removals_that_cost_more_than_the_factors_are_called_out() {
    use smplab_experiment::store::{Entry, Status};
    use smplab_experiment::testutil::rec;
    let base = baseline(Executor::Vm, "dedup", 2, 0.1, "");
    let plan = Plan::new(base.clone());
    let ms = 1_000_000u64;
    let es = vec![
        Entry::new(
            plan.native.clone(),
            Status::Ok,
            0.0,
            vec![rec(Executor::Native, "dedup", 2, 100 * ms)],
        ),
        Entry::new(
            base,
            Status::Ok,
            0.0,
            vec![rec(Executor::Vm, "dedup", 2, 150 * ms)],
        ),
        Entry::new(
            plan.all_removed.clone(),
            Status::Ok,
            0.0,
            vec![rec(Executor::Vm, "dedup", 2, 900 * ms)],
        ),
    ];
    let store = Store::from_entries(es);
    let t = table(&attribute(&Results::new(&store), &plan).unwrap());
    assert!(t.contains("does not reduce the slowdown"), "{t}");
    assert!(!t.contains("remains with every factor removed"), "{t}");
    assert!(t.contains("native 100.000 ms"), "{t}");
}

#[test]
fn overcommitted_diagnosis_with_several_vms() {
    let mut b = baseline(Executor::Vm, "spinlock", 2, 0.1, "");
    b.config.set_vms(2);
    let plan = Plan::new(b);
    assert!(plan.removed.iter().all(|(_, p)| p.vms() == 2));
    assert_eq!(plan.native.vms(), 1);
    let mut store = Store::from_entries(vec![]);
    run_points(
        &plan.points(2),
        &mut store,
        &FakeRunner::new(),
        &SweepOptions::default(),
    )
    .unwrap();
    let results = Results::new(&store);
    let a = attribute(&results, &plan).unwrap();
    // Fake: two VMs take 1.5x as long; baseline 2.0 s x 1.5 = 3.0 s vs 1.0 s native.
    assert!((a.baseline.median - 2.0).abs() < 1e-9);
    assert!(
        (a.rows[0].contribution - 0.6).abs() < 1e-9,
        "HLT: 0.4 x 1.5"
    );
    assert_eq!(a.vms, 2);
    assert!(table(&a).contains("2 VMs at once"));
    assert_eq!(detect(&results).len(), 1);
}

#[test]
fn noise_and_a_large_remainder_are_called_out() {
    use smplab_experiment::store::{Entry, Status};
    use smplab_experiment::testutil::rec;
    let base = baseline(Executor::Vm, "dedup", 2, 0.1, "");
    let plan = Plan::new(base.clone());
    let ms = 1_000_000u64;
    let mut es = vec![];
    for rep in 0..2u32 {
        let at = |p: &Point, wall: u64, e: Executor| {
            let mut p = p.clone();
            p.rep = rep;
            Entry::new(p, Status::Ok, 0.0, vec![rec(e, "dedup", 2, wall)])
        };
        es.push(at(&plan.native, 100 * ms, Executor::Native));
        es.push(at(&base, (200 + 20 * rep as u64) * ms, Executor::Vm));
        // Removing HLT: 210/230 ms, overlapping the baseline's 200/220.
        es.push(at(
            &plan.removed[0].1,
            (210 + 20 * rep as u64) * ms,
            Executor::Vm,
        ));
        es.push(at(&plan.all_removed, 190 * ms, Executor::Vm));
    }
    let store = Store::from_entries(es);
    let a = attribute(&Results::new(&store), &plan).unwrap();
    let t = table(&a);
    assert!(t.contains("within noise"), "{t}");
    assert!(!a.rows[0].credited);
    assert!(t.contains("Fewer than 6 runs"), "{t}");
    assert!(t.contains("remains with every factor removed"), "{t}");
}

/// Six hand-made repetitions per configuration: removing HLT is faster in
/// every pair (credited); removing spinning is faster in some pairs and
/// slower in others (within noise, not counted).
#[test]
fn only_factors_outside_the_noise_are_credited() {
    use smplab_experiment::store::{Entry, Status};
    use smplab_experiment::testutil::rec;
    let base = baseline(Executor::Vm, "streamcluster", 2, 0.1, "");
    let plan = Plan::new(base.clone());
    assert_eq!(plan.removed[1].0.name, "user-space spinning");
    let ms = 1_000_000u64;
    let jitter = [0, 3, 6, 2, 5, 1];
    let spin_jitter = [2, 1, 4, 3, 3, 0];
    let mut es = vec![];
    for (rep, (j, k)) in jitter.iter().zip(spin_jitter).enumerate() {
        let at = |p: &Point, wall: u64, e: Executor| {
            let mut p = p.clone();
            p.rep = u32::try_from(rep).unwrap_or(u32::MAX);
            Entry::new(p, Status::Ok, 0.0, vec![rec(e, "streamcluster", 2, wall)])
        };
        es.push(at(&plan.native, 100 * ms, Executor::Native));
        es.push(at(&base, (200 + j) * ms, Executor::Vm));
        // HLT removed: 150–156 ms, 50 ms below its pair every time.
        es.push(at(&plan.removed[0].1, (150 + j) * ms, Executor::Vm));
        // Spinning removed: 199–203 ms, above its pair in some repetitions.
        es.push(at(&plan.removed[1].1, (199 + k) * ms, Executor::Vm));
        es.push(at(&plan.all_removed, (140 + j) * ms, Executor::Vm));
    }
    let store = Store::from_entries(es);
    let a = attribute(&Results::new(&store), &plan).unwrap();
    assert_eq!(a.baseline_ci.n, 6);
    assert!(a.baseline_ci.coverage >= 0.95);
    let hlt = &a.rows[0];
    let spin = &a.rows[1];
    assert!(
        hlt.credited && (hlt.credit() - 0.5).abs() < 0.011,
        "{hlt:?}"
    );
    assert!(!spin.credited && spin.credit() == 0.0, "{spin:?}");
    assert!(spin.contribution > 0.0, "the raw difference is kept");
    let s0 = a.baseline.median;
    let all = a.all_removed.unwrap().median;
    assert!((a.interaction.unwrap() - (s0 - all - hlt.contribution)).abs() < 1e-9);
    let t = table(&a);
    assert!(t.contains("within noise"), "{t}");
    assert!(t.contains("[+100.0, +106.0]"), "intervals shown: {t}");
    assert!(!t.contains("Fewer than 6 runs"), "{t}");
}

/// The simulator's native reference comes from the baseline's platform,
/// not from a run of the same workload on another platform.
#[test]
fn sim_native_reference_uses_the_same_platform() {
    use smplab_experiment::store::{Entry, Status};
    use smplab_experiment::testutil::rec;
    let mut es = vec![];
    for (platform, native_ms, wall_ms) in [
        (smplab_record::config::DEFAULT_PLATFORM, 100u64, 150u64),
        ("kvm2015", 50, 60),
    ] {
        let b = baseline(Executor::Sim, "dedup", 16, 0.1, platform);
        let mut r = rec(Executor::Sim, "dedup", 16, wall_ms * 1_000_000);
        r.sim = Some(smplab_record::sim::SimSection {
            native_wall_ns: Some(native_ms * 1_000_000),
            ..Default::default()
        });
        es.push(Entry::new(b, Status::Ok, 0.0, vec![r]));
    }
    let store = Store::from_entries(es);
    let results = Results::new(&store);
    for (platform, want) in [
        (smplab_record::config::DEFAULT_PLATFORM, 0.5),
        ("kvm2015", 0.2),
    ] {
        let plan = Plan::new(baseline(Executor::Sim, "dedup", 16, 0.1, platform));
        let a = attribute(&results, &plan).unwrap();
        assert!((a.baseline.median - want).abs() < 1e-9, "{platform}: {a:?}");
    }
}

#[test]
fn interaction_is_what_single_removals_do_not_explain() {
    // Hand-made: s0 = 1.0, removing A → 0.5, removing B → 0.5, both → 0.3,
    // six repetitions each (so the paired ratios can be credited).
    // c_A + c_B = 1.0 but only 0.7 goes away together: interaction −0.3.
    use smplab_experiment::store::{Entry, Status};
    use smplab_experiment::testutil::rec;
    let base = baseline(Executor::Vm, "dedup", 2, 0.1, "");
    let plan = Plan::new(base.clone());
    let s = 1_000_000_000u64;
    let mut es = vec![];
    for rep in 0..6u32 {
        let at = |p: &Point, e: Executor, wall: u64| {
            let mut p = p.clone();
            p.rep = rep;
            Entry::new(p, Status::Ok, 0.0, vec![rec(e, "dedup", 2, wall)])
        };
        es.push(at(&plan.native, Executor::Native, s));
        es.push(at(&base, Executor::Vm, 2 * s));
        for (_, p) in plan.removed.iter().take(2) {
            es.push(at(p, Executor::Vm, 3 * s / 2));
        }
        es.push(at(&plan.all_removed, Executor::Vm, 13 * s / 10));
    }
    let store = Store::from_entries(es);
    let a = attribute(&Results::new(&store), &plan).unwrap();
    assert_eq!(a.rows.len(), 2);
    assert_eq!(a.missing, vec!["global device lock"]);
    assert!((a.interaction.unwrap() + 0.3).abs() < 1e-9);
}
