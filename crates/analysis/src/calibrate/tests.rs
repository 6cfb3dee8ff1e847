//! Tests of the calibration: the fit on simulated micro-runs, held-out rows
//! from hand-made store entries, the repetition of the probe runs, the
//! written profile.

use super::*;
use smplab_experiment::store::{Entry, Status, Store};
use smplab_experiment::testutil::rec;
use smplab_record::Executor;

const MS: u64 = 1_000_000;

/// The simulated micro-runs of `truth` as observations.
fn synthetic(truth: &Platform, scale: f64) -> Vec<fit::Observation> {
    micro::MICROS
        .iter()
        .map(|m| {
            let (program, info) = micro::program(m, scale).unwrap();
            let case = fit::SimCase {
                program,
                info,
                vcpus: m.vcpus,
                pcpus: m.vcpus,
                idle: m.idle,
            };
            let sim = fit::simulate_with_idle(truth, &case).unwrap();
            fit::Observation {
                name: m.name.into(),
                case,
                vm_ns: Some(sim.vm_ns),
                native_ns: m.native.then_some(sim.native_ns),
                vm_ci: None,
                native_ci: None,
                vm_idle: m.idle_fitted.then_some(sim.vm_idle),
            }
        })
        .collect()
}

/// Costs off by factors up to 2 in either direction.
const PERTURBED: &[(&str, f64)] = &[
    ("cpu.compute_ns_per_iter", 1.3),
    ("cache.shared_write_ns_per_line", 1.7),
    ("cpu.context_switch_ns", 1.5),
    ("vm_kernel.context_switch_ns", 1.6),
    ("vm_kernel.shootdown_handler_ns", 0.5),
    ("vmm.hlt_wake_ns", 0.6),
    ("vmm.ipi_receive_ns", 1.8),
];

#[test]
fn the_fit_recovers_known_parameters_from_simulated_micro_runs() {
    check_fit_recovers(PERTURBED);
}

/// The same with the VM's wake cost also perturbed (×0.7). `relay-poll`
/// puts the wake on the critical path without the halted-vCPU wakeup
/// that `relay` adds to it and without the block that `pingpong` adds,
/// so the three separate them (micro.rs). The wake's sensitivity is
/// bounded by wake / switch per micro-run, so it stays near 0.3: 0.327
/// here, 0.30-0.36 from -32% to +30% of relay-poll's compute and ±25% of
/// pingpong's, short of 0.3 only at the corner -32%/+25% (0.299;
/// docs/sim.md, "Calibration").
#[test]
fn the_fit_recovers_the_vm_wake_cost_too() {
    let mut with_wake = PERTURBED.to_vec();
    with_wake.push(("vm_kernel.wake_ns", 0.7));
    check_fit_recovers(&with_wake);
}

fn check_fit_recovers(perturbed: &[(&str, f64)]) {
    let base = Platform::builtin(smplab_record::config::DEFAULT_PLATFORM).unwrap();
    let mut truth = base.clone();
    for &(field, factor) in perturbed {
        let v = fit::get(&base, field).unwrap();
        assert!(fit::set(&mut truth, field, v * factor));
    }
    let obs = synthetic(&truth, 0.3);
    let f = fit::fit(&base, fit::PARAMS, &obs, 30).unwrap();
    let worst = f
        .residuals
        .iter()
        .map(|r| r.rel().abs())
        .fold(0.0, f64::max);
    assert!(worst < 0.03, "residuals {:#?}", f.residuals);
    // Well-determined fields come back within 15%.
    for &(field, value, sens) in &f.values {
        let want = fit::get(&truth, field).unwrap();
        if sens >= 0.3 {
            assert!(
                ((value - want) / want).abs() < 0.15,
                "{field}: fitted {value}, true {want} (sensitivity {sens})"
            );
        }
    }
    let strong: Vec<&str> = f
        .values
        .iter()
        .filter(|v| v.2 >= 0.3)
        .map(|v| v.0)
        .collect();
    for must in [
        "cpu.compute_ns_per_iter",
        "cache.shared_write_ns_per_line",
        "vm_kernel.context_switch_ns",
        "vm_kernel.wake_ns",
        "vm_kernel.shootdown_handler_ns",
    ] {
        assert!(
            strong.contains(&must),
            "{must} not determined: {:?}",
            f.values
        );
    }
    // The relay micro-run puts the halted-vCPU wakeup on the critical
    // path: the fit sees it (if weakly: it is ~5% of a round).
    let hlt = f.values.iter().find(|v| v.0 == "vmm.hlt_wake_ns").unwrap();
    assert!(hlt.2 > fit::WEAK, "{hlt:?}");
    // And the profile it makes parses, with the fitted values.
    let mut cal = Calibration::default();
    record_fit(&mut cal, &f, obs.len());
    let p = profile(&cal).unwrap();
    let k = p.kernel(true);
    assert!(k.shootdown_handler_ns < base.kernel(true).shootdown_handler_ns);
    assert_ne!(p.kernel(true), p.kernel(false));
    assert!(cal.info.iter().any(|(k, _)| k == "residual pingpong vm"));
    assert!(table(&cal).contains("least-squares fit"));
}

#[test]
fn held_out_rows_compare_stored_runs_with_predictions() {
    let scale = 0.05;
    let platform = Platform::builtin(smplab_record::config::DEFAULT_PLATFORM).unwrap();
    let mut es = Vec::new();
    for &(w, n) in heldout::HELDOUT.iter().take(2) {
        for (vm, ms) in [(true, 30), (false, 10)] {
            let p = heldout::point(w, n, vm, scale);
            let e = if vm { Executor::Vm } else { Executor::Native };
            es.push(Entry::new(p, Status::Ok, 0.0, vec![rec(e, w, n, ms * MS)]));
        }
    }
    let store = Store::from_entries(es);
    let (rows, problems) = heldout::evaluate(&Results::new(&store), &platform, scale, 2);
    assert_eq!(rows.len(), 2, "{problems:?}");
    assert_eq!(problems.len(), heldout::HELDOUT.len() - 2);
    for r in &rows {
        assert!((r.measured_slowdown - 3.0).abs() < 1e-9);
        assert!(r.predicted_wall_ns > 0.0 && r.predicted_slowdown > 0.0);
    }
    let (w, s) = heldout::medians(&rows).unwrap();
    assert!(w.is_finite() && s.is_finite());
    let t = heldout::table("held-out", &rows);
    assert!(
        t.contains("median |error|") && t.contains("dedup 2 vCPUs"),
        "{t}"
    );
}

#[test]
fn kvm_halt_statistics_are_summarized() {
    let mut r = rec(Executor::Vm, "ocean_ncp", 2, MS);
    let mut k = BTreeMap::new();
    k.insert("halt_attempted_poll".to_string(), 10u64);
    k.insert("halt_successful_poll".to_string(), 4u64);
    k.insert("halt_poll_success_ns".to_string(), 20_000u64);
    k.insert("halt_wait_ns".to_string(), 600_000u64);
    k.insert("halt_wakeup".to_string(), 6u64);
    r.vmm = Some(smplab_record::vmm::VmmSection {
        kvm_vcpu_stats: vec![k],
        ..Default::default()
    });
    let info = kvm_halt_info(&[&r]);
    assert!(
        info[0].1.contains("4 of 10") && info[0].1.contains("40%") && info[0].1.contains("5.0 µs"),
        "{info:?}"
    );
    assert!(info[1].1.contains("100.0 µs"), "{info:?}");
    assert!(kvm_halt_info(&[]).is_empty());
}

#[test]
fn slope_of_the_exit_loop() {
    // 9.5 µs per read plus 30 ms of set-up.
    let s = slope(&[(2000, 30 * MS + 19 * MS), (20000, 30 * MS + 190 * MS)]).unwrap();
    assert!((s - 9500.0).abs() < 1e-6);
    assert!(slope(&[(5, 5)]).is_none());
}

#[test]
fn civil_dates() {
    assert_eq!(civil_date(0), "1970-01-01");
    assert_eq!(civil_date(20_416), "2025-11-24");
    assert_eq!(civil_date(11_016), "2000-02-29");
    assert_eq!(today().len(), 10);
}

#[test]
fn profile_fields_are_replaced_and_typed() {
    let base = "name = \"pvm-here\"\ndescription = \"x\"\n[vmm]\nexit_ns = 100\nuser_exit_ns = 200\n[cpu]\ncompute_ns_per_iter = 0.3\n";
    let cal = Calibration {
        estimates: vec![
            Estimate {
                field: "vmm.user_exit_ns",
                value: 9512.4,
                spread: None,
                how: String::new(),
            },
            Estimate {
                field: "cpu.compute_ns_per_iter",
                value: 0.29,
                spread: None,
                how: String::new(),
            },
        ],
        unmeasured: vec![],
        info: vec![],
    };
    let out = apply_to_profile(base, "calibrated", &cal).unwrap();
    let t: toml::Table = out.parse().unwrap();
    assert_eq!(t["name"].as_str(), Some("calibrated"));
    assert_eq!(t["vmm"]["user_exit_ns"].as_integer(), Some(9512));
    assert_eq!(t["vmm"]["exit_ns"].as_integer(), Some(100));
    assert_eq!(t["cpu"]["compute_ns_per_iter"].as_float(), Some(0.29));
    assert!(t["description"]
        .as_str()
        .unwrap()
        .contains("vmm.user_exit_ns"));
    // The APICv costs are not measured: kept, and the comment says so.
    assert!(out.starts_with("# Written by `smplab calibrate`"), "{out}");
    assert!(
        out.contains("#   vmm.ipi_receive_apicv_ns: this host has no APICv"),
        "{out}"
    );
    let bad = Calibration {
        estimates: vec![Estimate {
            field: "nosuch.x",
            value: 1.0,
            spread: None,
            how: String::new(),
        }],
        unmeasured: vec![],
        info: vec![],
    };
    assert!(matches!(
        apply_to_profile(base, "c", &bad),
        Err(CalibrateError::NoSection { .. })
    ));
}

/// `n` stored repetitions of `p`, wall times cycling through `walls_ms`.
fn reps_of(
    p: &smplab_experiment::point::Point,
    e: Executor,
    walls_ms: &[u64],
    n: u32,
) -> Vec<Entry> {
    (0..n)
        .map(|rep| {
            let mut q = p.clone();
            q.rep = rep;
            let ms = walls_ms[rep as usize % walls_ms.len()];
            let r = rec(e, &p.workload, p.threads, ms * MS);
            Entry::new(q, Status::Ok, 0.0, vec![r])
        })
        .collect()
}

#[test]
fn held_out_rows_carry_intervals_and_wide_ones_are_marked() {
    let scale = 0.05;
    let platform = Platform::builtin(smplab_record::config::DEFAULT_PLATFORM).unwrap();
    let steady: &[u64] = &[30, 30, 31, 30, 30, 31];
    // Alternating ±20%: never within ±5%.
    let noisy: &[u64] = &[10, 15];
    // (VM walls, native walls) of the first three held-out configurations:
    // both narrow; native wide; VM wide.
    let cases: [(&[u64], &[u64]); 3] = [(steady, &[10]), (steady, noisy), (&[30, 45], &[10])];
    let mut es = Vec::new();
    for (&(w, n), (vm, native)) in heldout::HELDOUT.iter().zip(cases) {
        es.extend(reps_of(
            &heldout::point(w, n, true, scale),
            Executor::Vm,
            vm,
            8,
        ));
        es.extend(reps_of(
            &heldout::point(w, n, false, scale),
            Executor::Native,
            native,
            8,
        ));
    }
    let store = Store::from_entries(es);
    let (rows, _) = heldout::evaluate(&Results::new(&store), &platform, scale, 2);
    assert_eq!(rows.len(), 3);
    let narrow: Vec<(bool, bool)> = rows
        .iter()
        .map(|r| (r.wall_is_narrow(), r.slowdown_is_narrow()))
        .collect();
    assert_eq!(narrow, [(true, true), (true, false), (false, false)]);
    assert_eq!(rows[1].native_ci.unwrap().n, 8);
    assert!(rows[2].vm_ci.unwrap().rel_half_width() > 0.05);
    let n = heldout::narrow_medians(&rows);
    assert_eq!((n.wall_rows, n.slowdown_rows), (2, 1));
    let median2 = |a: f64, b: f64| (a + b) / 2.0;
    assert!((n.wall.unwrap() - median2(rows[0].wall_error(), rows[1].wall_error())).abs() < 1e-12);
    assert!((n.slowdown.unwrap() - rows[0].slowdown_error()).abs() < 1e-12);
    let t = heldout::table("held-out", &rows);
    let line = |label: &str| t.lines().find(|l| l.contains(label)).unwrap().to_string();
    // The wide cells carry the mark, the narrow ones not.
    let first = line(&rows[0].label);
    assert!(!first.contains('*'), "{t}");
    assert_eq!(line(&rows[1].label).matches('*').count(), 1, "{t}");
    assert_eq!(line(&rows[2].label).matches('*').count(), 1, "{t}");
    assert!(first.contains("8/8"), "runs per executor: {t}");
    // Both medians, the all-points one first.
    let all = t.find("median |error|, all 3 points").expect(&t);
    let only = t
        .find("median |error|, narrow points only (2 wall, 1 slowdown)")
        .expect(&t);
    assert!(all < only, "{t}");
}

fn row(label: &str, wall_err: f64, vm: &[f64], native: &[f64]) -> heldout::Row {
    heldout::Row {
        label: label.into(),
        measured_wall_ns: 100.0,
        predicted_wall_ns: 100.0 * (1.0 + wall_err),
        measured_slowdown: 2.0,
        predicted_slowdown: 2.0 * (1.0 + 2.0 * wall_err),
        vm_ci: smplab_stats::MedianCi::of(vm),
        native_ci: smplab_stats::MedianCi::of(native),
    }
}

#[test]
fn the_narrow_medians_leave_out_wide_and_short_measurements() {
    let narrow = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98];
    let wide = [1.0, 1.5, 0.7, 1.0, 1.3, 0.8];
    let rows = [
        row("a", 0.10, &narrow, &narrow),
        row("b", 0.20, &narrow, &narrow),
        row("c", 0.90, &wide, &narrow),
        // Three runs: no 95% interval, so not narrow however close.
        row("d", 0.80, &[1.0, 1.0, 1.0], &narrow),
        row("e", 0.30, &narrow, &wide),
    ];
    let (all_wall, all_slow) = heldout::medians(&rows).unwrap();
    assert!((all_wall - 0.30).abs() < 1e-12);
    assert!((all_slow - 0.60).abs() < 1e-12);
    let n = heldout::narrow_medians(&rows);
    // Wall: a, b, e (the native interval does not matter to it).
    assert_eq!(n.wall_rows, 3);
    assert!((n.wall.unwrap() - 0.20).abs() < 1e-12);
    // Slowdown: a and b.
    assert_eq!(n.slowdown_rows, 2);
    assert!((n.slowdown.unwrap() - 0.30).abs() < 1e-12);
    let t = heldout::table("t", &rows);
    assert!(t.contains("†"), "fewer than 6 runs is marked: {t}");
    // Nothing narrow: the narrow line says so instead of a figure.
    let t = heldout::table("t", &rows[2..4]);
    let last = t
        .lines()
        .find(|l| l.contains("narrow points only (0 wall, 0 slowdown)"))
        .expect(&t);
    assert_eq!(last.matches('–').count(), 2, "{t}");
}

/// Fake runs where a micro-run's VM configuration and a held-out native
/// configuration alternate 1.0 s / 1.5 s (never narrow); the rest steady.
struct NoisyProbes(smplab_experiment::runner::fake::FakeRunner);
impl smplab_experiment::runner::Runner for NoisyProbes {
    fn availability(&self, e: Executor) -> Result<(), smplab_experiment::execute::ExecuteError> {
        self.0.availability(e)
    }
    fn run(
        &self,
        p: &smplab_experiment::point::Point,
    ) -> Result<Vec<RunRecord>, smplab_experiment::runner::RunError> {
        let mut rs = self.0.run(p)?;
        if noisy_probe(p) && p.rep % 2 == 1 {
            for r in &mut rs {
                r.timing.wall_ns += r.timing.wall_ns / 2;
            }
        }
        Ok(rs)
    }
}

fn noisy_probe(p: &smplab_experiment::point::Point) -> bool {
    let relay_vm = p.study.as_deref() == Some("calibrate-relay") && p.executor() == Executor::Vm;
    let blackscholes_native = p.study.as_deref() == Some("calibrate-heldout")
        && p.workload == "blackscholes"
        && p.executor() == Executor::Native;
    relay_vm || blackscholes_native
}

#[test]
fn probe_runs_repeat_until_narrow_interleaved_and_resume() {
    let dir = smplab_experiment::testutil::temp_dir("calibrate-reps");
    micro::write_programs(&dir).unwrap();
    let mut store = Store::from_entries(vec![]);
    let runner = NoisyProbes(smplab_experiment::runner::fake::FakeRunner::new());
    let reps = smplab_experiment::sweep::Repetitions::adaptive(8);
    let s = run_probes(&runner, &mut store, &dir, 0.05, &reps, false).unwrap();
    let configs = probe_points(&dir, 0.05);
    let noisy = configs.iter().filter(|p| noisy_probe(p)).count();
    assert_eq!(noisy, 2);
    assert_eq!(s.failed, 0, "{:?}", s.problems);
    // A noisy VM configuration's native twin runs beside it to the maximum
    // too (the sweep pairs them: smplab_experiment::sweep, "Pairs").
    let twin_of_noisy = |c: &smplab_experiment::point::Point| {
        configs.iter().any(|v| {
            noisy_probe(v)
                && v.executor() == Executor::Vm
                && v.native_twin().config_key() == c.config_key()
        })
    };
    let kept = configs.iter().filter(|c| twin_of_noisy(c)).count();
    assert_eq!(kept, 1);
    assert_eq!(s.ok, 6 * configs.len() + 2 * noisy + 2 * kept);
    // Steady configurations stop at the minimum, noisy ones at the maximum.
    for c in &configs {
        let runs = store
            .entries()
            .iter()
            .filter(|e| e.point.config_key() == c.config_key())
            .count();
        assert_eq!(
            runs,
            if noisy_probe(c) || twin_of_noisy(c) {
                8
            } else {
                6
            },
            "{}",
            c.label()
        );
    }
    // Round-robin over micro-runs and held-out runs alike: every
    // configuration's repetition r before any repetition r + 1.
    let order: Vec<u32> = store.entries().iter().map(|e| e.point.rep).collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
    assert!(store.entries()[..configs.len()]
        .iter()
        .all(|e| e.point.rep == 0));
    // The wide ones are reported with short labels.
    assert_eq!(s.wide.len(), 2, "{:?}", s.wide);
    for (label, ci) in &s.wide {
        assert!(label.starts_with("calibration: "), "{label}");
        assert!(!label.contains(&dir.display().to_string()), "{label}");
        assert_eq!(ci.n, 8);
    }
    assert!(wide_text(&s.wide, 8).contains("2 calibration configurations reached 8"));
    // Resuming runs nothing new and still reports them.
    let again = run_probes(&runner, &mut store, &dir, 0.05, &reps, false).unwrap();
    assert_eq!(again.ok, 0);
    assert_eq!(again.wide.len(), 2);
    // The observations carry the intervals the fit weights by.
    let obs = observations(&Results::new(&store), &dir, 0.05).unwrap();
    let relay = obs.iter().find(|o| o.name == "relay").unwrap();
    assert!(fit::certainty(relay.vm_ci.as_ref()) < fit::certainty(relay.native_ci.as_ref()));
    assert!((fit::certainty(relay.native_ci.as_ref()) - 1.0).abs() < 1e-12);
}
