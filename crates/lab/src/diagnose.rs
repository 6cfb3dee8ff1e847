//! The seed-000 diagnosis, automated: run the baseline, then the baseline with
//! one factor removed at a time, then with every factor removed, and attribute
//! the slowdown versus native to the factors.
//!
//! Attribution: with `s0` the baseline slowdown, `s_f` the slowdown with factor
//! `f` removed and `s_all` with all removed, factor `f` is credited
//! `c_f = s0 − s_f`. Factors interact (removing HLT exits also removes the IPIs
//! that woke halted vCPUs; blocking instead of spinning creates HLTs), so
//! `Σ c_f` need not equal `s0 − s_all`; the difference is reported as its own
//! "interaction" term rather than spread over the factors:
//! `s0 = Σ c_f + interaction + s_all`.
//!
//! Noise: a factor is credited only when the 95% intervals of the slowdown's
//! median with and without it do not overlap ([`MedianCi::differs_from`]);
//! otherwise the table says "within noise" and the credit counts as 0 in the
//! sum, the interaction and the chart.

use crate::metrics::{mean_wall_s, Results, Summary};
use crate::point::{Point, Variant};
use crate::stats::MedianCi;
use serde::Serialize;
use smplab_record::config::{
    GuestSettings, IdlePolicy, NativeSettings, Placement, Ple, QemuSettings, RunConfig,
    SimSettings, SyncMode, VmSettings,
};
use smplab_record::Executor;

/// One factor of seed 000 and how to remove it from a point.
#[derive(Debug, Clone, Copy)]
pub struct Factor {
    /// Short name used in tables and the chart legend.
    pub name: &'static str,
    /// What removing it means.
    pub removal: &'static str,
    remove: fn(&mut Point),
    applies: fn(Executor) -> bool,
}

fn measured_or_sim(e: Executor) -> bool {
    matches!(e, Executor::Vm | Executor::Sim)
}
fn sim_only(e: Executor) -> bool {
    e == Executor::Sim
}

/// The factors in the order seed 000 examines them.
pub const FACTORS: &[Factor] = &[
    Factor {
        name: "HLT idle",
        removal: "idle vCPUs poll instead of halting (idle = poll)",
        remove: |p| p.config.set_idle(IdlePolicy::Poll),
        applies: measured_or_sim,
    },
    Factor {
        name: "PLE preemption",
        removal: "pause-loop exiting off (simulator only: PVM here has no PLE to switch)",
        remove: |p| {
            if let RunConfig::Sim(s) = &mut p.config {
                s.ple = Some(Ple::Off);
            }
        },
        applies: sim_only,
    },
    Factor {
        name: "APIC exits",
        removal: "APIC virtualization on (simulator only: this host has no APICv)",
        remove: |p| {
            if let RunConfig::Sim(s) = &mut p.config {
                s.apicv = true;
            }
        },
        applies: sim_only,
    },
    Factor {
        name: "user-space spinning",
        removal: "the spin→block variant of the workload (every spin wait blocks)",
        remove: |p| p.variant = Variant::SpinToBlock,
        applies: measured_or_sim,
    },
    Factor {
        name: "placement",
        removal: "vCPUs pinned one per host CPU (cache-aware placement)",
        remove: |p| p.config.set_placement(Placement::Spread),
        applies: measured_or_sim,
    },
    Factor {
        name: "global device lock",
        removal: "device sync hybrid instead of global",
        remove: |p| p.config.set_sync(SyncMode::Hybrid),
        applies: measured_or_sim,
    },
];

/// The baseline configuration of a diagnosis: seed 000's default settings
/// (HLT idle, floating vCPUs, global device lock, the platform's PLE, no
/// APICv).
pub fn baseline(
    executor: Executor,
    workload: &str,
    vcpus: u32,
    scale: f64,
    platform: &str,
) -> Point {
    let guest = GuestSettings::new(vcpus);
    let config = match executor {
        Executor::Native => RunConfig::Native(NativeSettings::default()),
        Executor::Qemu => RunConfig::Qemu(QemuSettings { guest }),
        Executor::Vm => RunConfig::Vm(VmSettings::new(guest, SyncMode::Global)),
        Executor::Sim => {
            let mut s = SimSettings::new(vcpus, platform);
            s.sync = SyncMode::Global;
            RunConfig::Sim(s)
        }
    };
    let mut p = Point::new(workload, vcpus, scale, config);
    p.study = Some("diagnose".into());
    p
}

/// A diagnosis plan: which points to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub native: Point,
    pub baseline: Point,
    /// `(factor, point with that factor removed)`.
    pub removed: Vec<(Factor, Point)>,
    pub all_removed: Point,
}

impl Plan {
    pub fn new(baseline: Point) -> Plan {
        let factors: Vec<Factor> = FACTORS
            .iter()
            .copied()
            .filter(|f| (f.applies)(baseline.executor()))
            .collect();
        let removed: Vec<(Factor, Point)> = factors
            .iter()
            .map(|f| {
                let mut p = baseline.clone();
                (f.remove)(&mut p);
                (*f, p)
            })
            .collect();
        let mut all = baseline.clone();
        for f in &factors {
            (f.remove)(&mut all);
        }
        Plan {
            native: baseline.native_twin(),
            baseline,
            removed,
            all_removed: all,
        }
    }

    /// Every point, `reps` repetitions each, repetitions round-robin. The
    /// simulator needs no native run: it models native itself.
    pub fn points(&self, reps: u32) -> Vec<Point> {
        let mut configs = Vec::new();
        if self.baseline.executor() != Executor::Sim {
            configs.push(self.native.clone());
        }
        configs.push(self.baseline.clone());
        configs.extend(self.removed.iter().map(|(_, p)| p.clone()));
        configs.push(self.all_removed.clone());
        let mut out = Vec::new();
        for rep in 0..reps {
            for c in &configs {
                let mut p = c.clone();
                p.rep = rep;
                p.timeout_s = self.baseline.timeout_s;
                out.push(p);
            }
        }
        out
    }
}

/// One row of the attribution table.
#[derive(Debug, Clone, Serialize)]
pub struct FactorRow {
    pub factor: String,
    pub removal: String,
    /// Slowdown versus native with this factor removed.
    pub slowdown_without: Summary,
    /// Its median with the 95% interval.
    pub slowdown_without_ci: MedianCi,
    /// `s0 − s_f`: the slowdown this factor accounts for on its own (the
    /// difference of the medians, whether or not it is outside the noise).
    pub contribution: f64,
    /// The intervals with and without the factor do not overlap: the
    /// contribution is credited. Otherwise it is within noise and counts as 0.
    pub credited: bool,
}

impl FactorRow {
    /// The contribution if it is outside the noise, else 0.
    pub fn credit(&self) -> f64 {
        if self.credited {
            self.contribution
        } else {
            0.0
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Attribution {
    pub workload: String,
    pub executor: Executor,
    pub vcpus: u32,
    pub vms: u32,
    pub native_wall_s: Summary,
    pub baseline: Summary,
    /// The baseline slowdown's median with its 95% interval.
    pub baseline_ci: MedianCi,
    pub rows: Vec<FactorRow>,
    pub all_removed: Option<Summary>,
    pub all_removed_ci: Option<MedianCi>,
    /// `s0 − s_all − Σ credited c_f`: what one-at-a-time removal cannot
    /// assign to a single factor (overlap or synergy between factors, plus
    /// the credits within noise).
    pub interaction: Option<f64>,
    /// Factors the plan wanted but whose runs are missing or failed.
    pub missing: Vec<String>,
    /// The measured runs happened on a PVM host (guest kernel code emulated).
    pub pvm_host: bool,
    /// Simulator diagnoses: its exact time accounting of the unmodified
    /// baseline, printed beside the table and naming the remainder by cause.
    pub sim: Option<crate::diagnose_sim::SimExplanation>,
}

/// Slowdowns in a diagnosis are all against the *original* program's native
/// time, so the spin→block variant is judged against what the user runs today.
/// The median with its spread and with its 95% interval.
fn slowdown_vs(results: &Results, p: &Point, native_s: Option<f64>) -> Option<(Summary, MedianCi)> {
    let es = results.get(p)?;
    let v: Vec<f64> = es
        .iter()
        .filter_map(|e| {
            let wall = mean_wall_s(&e.records);
            // Simulator: its native model of the original program.
            let native = native_s.or_else(|| sim_native_of(results, p))?;
            Some(wall / native - 1.0)
        })
        .collect();
    Some((Summary::of(&v)?, MedianCi::of(&v)?))
}

/// The simulator's native time for the original (as-is) program of `p`'s
/// baseline: `sim.native_wall_ns` of the as-is runs of the plan on the same
/// platform (a native reference from another platform's CPU costs would mix
/// two machines in one ratio).
fn sim_native_of(results: &Results, p: &Point) -> Option<f64> {
    let candidates: Vec<f64> = results
        .points()
        .filter(|r| {
            r.executor() == Executor::Sim
                && r.workload == p.workload
                && r.variant == Variant::AsIs
                && r.threads == p.threads
                && r.scale == p.scale
                && r.vcpus() == p.vcpus()
                && r.config.platform() == p.config.platform()
        })
        .filter_map(|r| results.get(r))
        .flat_map(|es| es.iter())
        .flat_map(|e| e.records.iter())
        .filter_map(|r| r.sim.as_ref()?.native_wall_ns)
        .map(|ns| ns as f64 / 1e9)
        .collect();
    Summary::of(&candidates).map(|s| s.median)
}

/// Attribute the slowdown from stored results of a plan.
pub fn attribute(results: &Results, plan: &Plan) -> Option<Attribution> {
    let b = &plan.baseline;
    let native = if b.executor() == Executor::Sim {
        Summary::of(&[sim_native_of(results, b)?])?
    } else {
        results.wall(&plan.native)?
    };
    let native_s = (b.executor() != Executor::Sim).then_some(native.median);
    let (s0, s0_ci) = slowdown_vs(results, b, native_s)?;
    let mut rows = Vec::new();
    let mut missing = Vec::new();
    for (f, p) in &plan.removed {
        match slowdown_vs(results, p, native_s) {
            Some((s, ci)) => rows.push(FactorRow {
                factor: f.name.into(),
                removal: f.removal.into(),
                contribution: s0.median - s.median,
                credited: ci.differs_from(&s0_ci),
                slowdown_without: s,
                slowdown_without_ci: ci,
            }),
            None => missing.push(f.name.to_string()),
        }
    }
    let all = slowdown_vs(results, &plan.all_removed, native_s);
    let interaction = all
        .as_ref()
        .map(|(a, _)| s0.median - a.median - rows.iter().map(FactorRow::credit).sum::<f64>());
    let pvm_host = b.executor() != Executor::Sim
        && results.get(b).is_some_and(|es| {
            es.iter()
                .flat_map(|e| e.records.iter())
                .any(|r| r.host.kvm.backing == smplab_record::host::KvmBacking::Pvm)
        });
    Some(Attribution {
        pvm_host,
        sim: crate::diagnose_sim::explain(results, b),
        workload: b.workload.clone(),
        executor: b.executor(),
        vcpus: b.vcpus().unwrap_or(0),
        vms: b.vms(),
        native_wall_s: native,
        baseline: s0,
        baseline_ci: s0_ci,
        rows,
        all_removed: all.map(|a| a.0),
        all_removed_ci: all.map(|a| a.1),
        interaction,
        missing,
    })
}

/// Find diagnosis plans in a store: every baseline-shaped configuration
/// (HLT, as-is, unpinned, global, PLE on, no APICv, any number of VMs) that has at least
/// one factor-removed sibling.
pub fn detect(results: &Results) -> Vec<Plan> {
    let mut plans = Vec::new();
    for p in results.points() {
        if !matches!(p.executor(), Executor::Vm | Executor::Sim) {
            continue;
        }
        let mut b = baseline(
            p.executor(),
            &p.workload,
            p.vcpus().unwrap_or(1),
            p.scale,
            p.config.platform().unwrap_or(""),
        );
        b.config.set_vms(p.vms());
        if b.config_key() != p.config_key() || b.threads != p.threads {
            continue;
        }
        let plan = Plan::new(p.clone());
        if plan.removed.iter().any(|(_, q)| results.get(q).is_some()) {
            plans.push(plan);
        }
    }
    plans
}

/// A slowdown interval in percent: `+12.3% [+10.1, +14.0]`.
fn pct_ci(ci: &MedianCi) -> String {
    format!(
        "{:+.1}% [{:+.1}, {:+.1}]",
        ci.median * 100.0,
        ci.lo * 100.0,
        ci.hi * 100.0
    )
}

/// The attribution as a text table.
pub fn table(a: &Attribution) -> String {
    let mut s = format!(
        "Diagnosis of {} on {} ({} vCPUs{}): native {:.3} ms, baseline slowdown {} (95% interval of the median, {} runs)\n",
        a.workload,
        a.executor,
        a.vcpus,
        if a.vms > 1 { format!(", {} VMs at once", a.vms) } else { String::new() },
        a.native_wall_s.median * 1e3,
        pct_ci(&a.baseline_ci),
        a.baseline_ci.n,
    );
    s.push_str(&format!(
        "  {:<22} {:>30} {:>13}  {}\n",
        "factor removed", "slowdown without [95% interval]", "attributed", "how"
    ));
    let mut noisy = false;
    let mut few = a.baseline_ci.coverage < 0.95;
    for r in &a.rows {
        noisy |= !r.credited;
        few |= r.slowdown_without_ci.coverage < 0.95;
        let credit = if r.credited {
            format!("{:+.1}%", r.contribution * 100.0)
        } else {
            "within noise".to_string()
        };
        s.push_str(&format!(
            "  {:<22} {:>30} {:>13}  {}\n",
            r.factor,
            pct_ci(&r.slowdown_without_ci),
            credit,
            r.removal
        ));
    }
    if let (Some(all), Some(i)) = (a.all_removed_ci, a.interaction) {
        s.push_str(&format!(
            "  {:<22} {:>30} {:>13}  (what no single credited removal explains)\n",
            "interaction",
            "",
            format!("{:+.1}%", i * 100.0)
        ));
        s.push_str(&format!(
            "  {:<22} {:>30} {:>13}  every factor above removed at once\n",
            "remainder",
            pct_ci(&all),
            ""
        ));
    }
    for m in &a.missing {
        s.push_str(&format!("  {m}: no successful run, not attributed\n"));
    }
    if noisy {
        s.push_str("  within noise: the 95% intervals of the median slowdown with and without the factor overlap, so the\n  difference is not credited (it counts as 0 in the interaction); more repetitions or longer runs narrow them.\n");
    }
    if few {
        s.push_str("  Fewer than 6 runs of a configuration: its interval is the full range and covers the median with less than 95%.\n");
    }
    if let Some(all) = a.all_removed {
        if a.baseline.median > 0.0 && all.median >= a.baseline.median {
            s.push_str(&format!(
                "  Removing every factor at once does not reduce the slowdown ({:+.1}% against {:+.1}%): here the\n  removals cost more than the factors (e.g. blocking instead of spinning pays a guest context switch per wait).\n",
                all.median * 100.0,
                a.baseline.median * 100.0
            ));
        } else if let (true, Some(x)) = (
            a.baseline.median > 0.0 && all.median > 0.5 * a.baseline.median,
            a.sim.as_ref().filter(|x| !x.causes.is_empty()),
        ) {
            s.push_str(&format!(
                "  Most of the slowdown ({:.0}% of it) remains with every factor removed; the simulator's accounting\n  of the baseline names where the VM's extra time goes: {}.\n",
                all.median / a.baseline.median * 100.0,
                crate::diagnose_sim::named_causes(x)
            ));
        } else if a.baseline.median > 0.0 && all.median > 0.5 * a.baseline.median {
            s.push_str(&format!(
                "  Most of the slowdown ({:.0}% of it) remains with every factor removed: its main cause is not among these factors.\n",
                all.median / a.baseline.median * 100.0
            ));
            if a.pvm_host {
                s.push_str("  On this PVM host guest kernel code (CPL0: blocking, wakeups, IPIs, the scheduler) runs in KVM's\n  instruction emulator, ~1000x slower than natively (PLATFORM.md) - the likely remainder.\n");
            }
        }
    }
    s.push_str(
        "  Factors interact: each is removed from the baseline alone, so the attributions need not add up;\n  the interaction line is the difference, and the order of removal would change a sequential split.\n",
    );
    if let Some(x) = &a.sim {
        s.push('\n');
        s.push_str(&x.table);
    }
    s
}

/// The Fig. 3-style charts: slowdown of each configuration (bars), and the
/// baseline slowdown decomposed into factors (one stacked bar).
pub fn charts(a: &Attribution) -> String {
    use crate::svg::{bar_chart, stacked_bars, Bar};
    let mut bars = vec![Bar {
        label: "baseline".into(),
        value: a.baseline_ci.median * 100.0,
        range: Some((a.baseline_ci.lo * 100.0, a.baseline_ci.hi * 100.0)),
        group: 0,
    }];
    for r in &a.rows {
        bars.push(Bar {
            label: format!("− {}", r.factor),
            value: r.slowdown_without_ci.median * 100.0,
            range: Some((
                r.slowdown_without_ci.lo * 100.0,
                r.slowdown_without_ci.hi * 100.0,
            )),
            group: 1,
        });
    }
    if let Some(all) = a.all_removed_ci {
        bars.push(Bar {
            label: "− all factors".into(),
            value: all.median * 100.0,
            range: Some((all.lo * 100.0, all.hi * 100.0)),
            group: 2,
        });
    }
    let title = format!(
        "{} on {}: slowdown vs native (%, whiskers: 95% interval of the median)",
        a.workload, a.executor
    );
    let mut out = bar_chart(&title, "slowdown %", &bars, &[]);
    let mut series: Vec<String> = a.rows.iter().map(|r| r.factor.clone()).collect();
    // Credits within noise are drawn as 0, as they are counted.
    let mut vals: Vec<f64> = a.rows.iter().map(|r| r.credit() * 100.0).collect();
    if let (Some(all), Some(i)) = (a.all_removed, a.interaction) {
        series.push("interaction".into());
        vals.push(i * 100.0);
        series.push("remainder (all removed)".into());
        vals.push(all.median * 100.0);
    }
    out.push_str(&stacked_bars(
        &format!("{}: baseline slowdown attributed to factors", a.workload),
        "percentage points of slowdown (negative: removing the factor made it slower; within noise: 0)",
        &series,
        &[(format!("{} {}", a.workload, a.executor), vals)],
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::fake::{fake_wall_ns, FakeRunner};
    use crate::store::Store;
    use crate::sweep::{run_points, SweepOptions};

    #[test]
    fn plan_has_the_factors_for_each_executor() {
        let vm = Plan::new(baseline(Executor::Vm, "dedup", 2, 0.1, ""));
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
        let sim = Plan::new(baseline(Executor::Sim, "dedup", 16, 0.1, "pvm-here"));
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

    #[test]
    fn attribution_arithmetic_on_fake_runs() {
        let plan = Plan::new(baseline(Executor::Vm, "dedup", 2, 0.1, ""));
        let mut store = Store::from_entries(vec![]);
        run_points(
            &plan.points(3),
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
        // The fake's factors are additive: nothing left, no interaction.
        assert!(a.all_removed.unwrap().median.abs() < 1e-9);
        assert!(a.interaction.unwrap().abs() < 1e-9);
        assert!(a.missing.is_empty());
        let t = table(&a);
        assert!(t.contains("HLT idle") && t.contains("Factors interact"));
        assert!(!t.contains("NaN"));
        let svg = charts(&a);
        assert!(svg.contains("<svg") && svg.contains("interaction"));
        assert_eq!(detect(&results).len(), 1);
        assert_eq!(fake_wall_ns(&plan.native), 1_000_000_000);
    }

    #[test]
    fn removals_that_cost_more_than_the_factors_are_called_out() {
        use crate::store::{Entry, Status};
        use crate::testutil::rec;
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
        use crate::store::{Entry, Status};
        use crate::testutil::rec;
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

    /// Six hand-made repetitions per configuration: removing HLT gives
    /// intervals clear of the baseline's (credited), removing spinning gives
    /// overlapping ones (within noise, not counted).
    #[test]
    fn only_factors_outside_the_noise_are_credited() {
        use crate::store::{Entry, Status};
        use crate::testutil::rec;
        let base = baseline(Executor::Vm, "dedup", 2, 0.1, "");
        let plan = Plan::new(base.clone());
        let ms = 1_000_000u64;
        let jitter = [0, 3, 6, 2, 5, 1];
        let mut es = vec![];
        for (rep, j) in jitter.iter().enumerate() {
            let at = |p: &Point, wall: u64, e: Executor| {
                let mut p = p.clone();
                p.rep = u32::try_from(rep).unwrap_or(u32::MAX);
                Entry::new(p, Status::Ok, 0.0, vec![rec(e, "dedup", 2, wall)])
            };
            es.push(at(&plan.native, 100 * ms, Executor::Native));
            es.push(at(&base, (200 + j) * ms, Executor::Vm));
            // HLT removed: 150–156 ms, clear of 200–206.
            es.push(at(&plan.removed[0].1, (150 + j) * ms, Executor::Vm));
            // Spinning removed: 198–204 ms, inside the baseline's interval.
            es.push(at(&plan.removed[1].1, (198 + j) * ms, Executor::Vm));
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
        // s0 − s_all − credited = 1.025 − 0.425 − 0.5 (medians of the jittered runs).
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
        use crate::store::{Entry, Status};
        use crate::testutil::rec;
        let mut es = vec![];
        for (platform, native_ms, wall_ms) in [("pvm-here", 100u64, 150u64), ("kvm2015", 50, 60)] {
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
        for (platform, want) in [("pvm-here", 0.5), ("kvm2015", 0.2)] {
            let plan = Plan::new(baseline(Executor::Sim, "dedup", 16, 0.1, platform));
            let a = attribute(&results, &plan).unwrap();
            assert!((a.baseline.median - want).abs() < 1e-9, "{platform}: {a:?}");
        }
    }

    #[test]
    fn interaction_is_what_single_removals_do_not_explain() {
        // Hand-made: s0 = 1.0, removing A → 0.5, removing B → 0.5, both → 0.3.
        // c_A + c_B = 1.0 but only 0.7 goes away together: interaction −0.3.
        use crate::store::{Entry, Status};
        use crate::testutil::rec;
        let base = baseline(Executor::Vm, "dedup", 2, 0.1, "");
        let plan = Plan::new(base.clone());
        let s = 1_000_000_000u64;
        let mut es = vec![Entry::new(
            plan.native.clone(),
            Status::Ok,
            0.0,
            vec![rec(Executor::Native, "dedup", 2, s)],
        )];
        es.push(Entry::new(
            base,
            Status::Ok,
            0.0,
            vec![rec(Executor::Vm, "dedup", 2, 2 * s)],
        ));
        for (i, (_, p)) in plan.removed.iter().enumerate().take(2) {
            let _ = i;
            es.push(Entry::new(
                p.clone(),
                Status::Ok,
                0.0,
                vec![rec(Executor::Vm, "dedup", 2, 3 * s / 2)],
            ));
        }
        es.push(Entry::new(
            plan.all_removed.clone(),
            Status::Ok,
            0.0,
            vec![rec(Executor::Vm, "dedup", 2, 13 * s / 10)],
        ));
        let store = Store::from_entries(es);
        let a = attribute(&Results::new(&store), &plan).unwrap();
        assert_eq!(a.rows.len(), 2);
        assert_eq!(a.missing, vec!["placement", "global device lock"]);
        assert!((a.interaction.unwrap() + 0.3).abs() < 1e-9);
    }
}
