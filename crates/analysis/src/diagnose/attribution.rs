//! Attributing a diagnosis's slowdown to the factors from stored results:
//! each configuration's slowdown against the original program's native time,
//! the factors' credits (only where the paired ratio of wall times is outside
//! the noise), the interaction and the remainder (the arithmetic in the parent
//! module's doc).

use super::Plan;
use crate::metrics::{mean_wall_s, Results, Summary};
use serde::Serialize;
use smplab_experiment::point::{Point, Variant};
use smplab_record::Executor;
use smplab_stats::{paired_ratio, MedianCi, MIN_SAMPLES_FOR_95};
use std::collections::BTreeMap;

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
    /// Wall time without the factor ÷ the baseline's, per repetition (the two
    /// ran back to back), with the 95% interval of its median. `None` when no
    /// repetition of both succeeded.
    #[serde(default)]
    pub paired: Option<MedianCi>,
    /// The paired ratio's 95% interval excludes 1: the contribution is
    /// credited. Otherwise (or with fewer than 6 pairs, which have no 95%
    /// interval) it is within noise and counts as 0.
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
    /// `(factor, why)`: removals that would run the baseline again, not run.
    #[serde(default)]
    pub not_applicable: Vec<(String, String)>,
    /// The measured runs happened on a PVM host (guest kernel code emulated).
    pub pvm_host: bool,
    /// Simulator diagnoses: its exact time accounting of the unmodified
    /// baseline, printed beside the table and naming the remainder by cause.
    pub sim: Option<crate::diagnose::sim::SimExplanation>,
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

/// Per repetition index, the wall time (s, mean over VMs) of `p`'s
/// successful runs.
fn walls_by_rep(results: &Results, p: &Point) -> BTreeMap<u32, f64> {
    results
        .get(p)
        .map(|es| {
            es.iter()
                .map(|e| (e.point.rep, mean_wall_s(&e.records)))
                .collect()
        })
        .unwrap_or_default()
}

/// The paired ratio of `variant`'s wall time to `baseline`'s, repetition by
/// repetition (only repetitions both have).
fn paired_wall_ratio(results: &Results, baseline: &Point, variant: &Point) -> Option<MedianCi> {
    let b = walls_by_rep(results, baseline);
    let v = walls_by_rep(results, variant);
    let pairs: Vec<(f64, f64)> = b
        .iter()
        .filter_map(|(rep, wb)| Some((*wb, *v.get(rep)?)))
        .collect();
    paired_ratio(&pairs)
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
            Some((s, ci)) => {
                let paired = paired_wall_ratio(results, b, p);
                rows.push(FactorRow {
                    factor: f.name.into(),
                    removal: f.removal.into(),
                    contribution: s0.median - s.median,
                    credited: paired.is_some_and(|r| r.excludes(1.0)),
                    paired,
                    slowdown_without: s,
                    slowdown_without_ci: ci,
                })
            }
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
        sim: crate::diagnose::sim::explain(results, b),
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
        not_applicable: plan
            .not_applicable
            .iter()
            .map(|(f, why)| (f.name.to_string(), why.clone()))
            .collect(),
    })
}

impl Attribution {
    /// The fewest pairs (repetitions of the baseline and a variant) behind any
    /// row; `None` without rows.
    pub fn fewest_pairs(&self) -> Option<usize> {
        self.rows.iter().map(|r| r.paired.map_or(0, |c| c.n)).min()
    }

    /// Some row has too few pairs for a 95% interval: nothing there can be
    /// credited.
    pub fn too_few_pairs(&self) -> bool {
        self.fewest_pairs().is_some_and(|n| n < MIN_SAMPLES_FOR_95)
    }
}
