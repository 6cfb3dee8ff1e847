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
//! Noise: the baseline and every variant run interleaved, one repetition of
//! each back to back, the order reversed every other repetition
//! ([`Plan::points`]), so a drift of a shared host or the place right after
//! the native run lands on neither side. A factor is credited only when the
//! 95% interval of the paired ratio (variant ÷ baseline wall time of the same
//! repetition, [`smplab_stats::paired_ratio`]) excludes 1; otherwise the table
//! says "within noise" and the credit counts as 0 in the sum, the interaction
//! and the chart. Fewer than 6 pairs have no 95% interval: nothing is
//! credited, and the table says so.
//!
//! Not applicable: a removal whose variant runs the same program in the same
//! configuration as the baseline (the spin→block variant of a profile that
//! does not spin, a setting the baseline already has) measures nothing but
//! run order; it is reported as not applicable and not run. "The same" is
//! decided from the workload model and the typed configuration themselves.
//!
//! This module owns the factors and the plan of a diagnosis (which points to
//! run, and finding plans in a store); `attribution` computes the credits from
//! stored results and `table` prints the attribution.

mod attribution;
pub mod sim;
mod table;

pub use attribution::{attribute, Attribution, FactorRow};
pub use table::table;

use crate::metrics::Results;
use smplab_experiment::point::{Point, Variant};
use smplab_experiment::runner::prepare;
use smplab_record::config::{IdlePolicy, Placement, Ple, RunConfig, SyncMode};
use smplab_record::Executor;

/// One factor of Ding & Shan and how to remove it from a point.
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

/// What no single factor removal explains, in charts of credits.
pub const INTERACTION: &str = "interaction";
/// The slowdown left with every factor removed, in charts of credits.
pub const REMAINDER: &str = "remainder (all removed)";

/// A factor's place among the factors (then [`INTERACTION`], then
/// [`REMAINDER`]): a report draws each in its own category colour, the same
/// in every diagnosis.
pub fn factor_rank(name: &str) -> usize {
    match name {
        INTERACTION => FACTORS.len(),
        REMAINDER => FACTORS.len() + 1,
        _ => FACTORS
            .iter()
            .position(|f| f.name == name)
            .unwrap_or(FACTORS.len() + 2),
    }
}

/// The factors in the order Ding & Shan examines them.
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
        removal: "the spin→block variant of the workload (spinning barriers and adaptive mutexes block at once; spin locks stay)",
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

/// The baseline configuration of a diagnosis: Ding & Shan's default settings
/// (HLT idle, floating vCPUs, global device lock, the platform's PLE, no
/// APICv).
pub fn baseline(
    executor: Executor,
    workload: &str,
    vcpus: u32,
    scale: f64,
    platform: &str,
) -> Point {
    let mut config = RunConfig::defaults(executor, vcpus, platform);
    config.set_sync(SyncMode::Global);
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
    /// `(factor, why)`: removals that would run the baseline again (the same
    /// program in the same configuration). Not run, not attributed.
    pub not_applicable: Vec<(Factor, String)>,
    pub all_removed: Point,
}

/// Why `variant` would run exactly what `base` runs, or `None` when it runs
/// something else: a different configuration, or a different program (the
/// workload model instantiated as each point asks, compared as data). A
/// workload that cannot be instantiated counts as different: its runs will
/// say why they fail.
pub fn unchanged_by(base: &Point, variant: &Point) -> Option<String> {
    if base.config != variant.config
        || base.threads != variant.threads
        || base.scale != variant.scale
        || base.workload != variant.workload
    {
        return None;
    }
    if base.variant == variant.variant {
        return Some("the baseline's configuration already has it removed".into());
    }
    let (a, _) = prepare(base).ok()?;
    let (mut b, _) = prepare(variant).ok()?;
    // The variant's program carries its own name; only what runs counts.
    b.name.clone_from(&a.name);
    (a == b).then(|| {
        format!(
            "the {} variant of {} is the same program: it has no spinning barrier and no mutex that spins before blocking (spin_limit = 0), and spin locks stay",
            variant.variant.as_str(),
            base.workload
        )
    })
}

impl Plan {
    pub fn new(baseline: Point) -> Plan {
        let factors: Vec<Factor> = FACTORS
            .iter()
            .copied()
            .filter(|f| (f.applies)(baseline.executor()))
            .collect();
        let mut removed = Vec::new();
        let mut not_applicable = Vec::new();
        for f in &factors {
            let mut p = baseline.clone();
            (f.remove)(&mut p);
            match unchanged_by(&baseline, &p) {
                Some(why) => not_applicable.push((*f, why)),
                None => removed.push((*f, p)),
            }
        }
        let mut all = baseline.clone();
        for (f, _) in &removed {
            (f.remove)(&mut all);
        }
        Plan {
            native: baseline.native_twin(),
            baseline,
            removed,
            not_applicable,
            all_removed: all,
        }
    }

    /// Every configuration of the plan in its run order: native (the
    /// simulator needs none: it models native itself), the baseline, each
    /// applicable removal, all removed at once.
    pub fn configs(&self) -> Vec<Point> {
        let mut configs = Vec::new();
        if self.baseline.executor() != Executor::Sim {
            configs.push(self.native.clone());
        }
        configs.push(self.baseline.clone());
        configs.extend(self.removed.iter().map(|(_, p)| p.clone()));
        configs.push(self.all_removed.clone());
        configs
    }

    /// Every point, `reps` repetitions each, interleaved: one repetition of
    /// every configuration, then the next, the order reversed every other
    /// repetition. Each variant's repetition `r` pairs with the baseline's
    /// repetition `r`, run minutes apart at most, before it in one
    /// repetition and after it in the next, so neither a drift of the host
    /// nor the slot right after the native run favours one side.
    pub fn points(&self, reps: u32) -> Vec<Point> {
        let configs = self.configs();
        let mut out = Vec::new();
        for rep in 0..reps {
            let order: Vec<&Point> = if rep.is_multiple_of(2) {
                configs.iter().collect()
            } else {
                configs.iter().rev().collect()
            };
            for c in order {
                let mut p = c.clone();
                p.rep = rep;
                p.timeout_s = self.baseline.timeout_s;
                out.push(p);
            }
        }
        out
    }
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

#[cfg(test)]
mod tests;
