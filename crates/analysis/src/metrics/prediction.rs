//! Simulator predictions beside measurements (Ye et al.): the simulator twin
//! of a measured configuration, the metrics both have, and the prediction
//! errors per metric.

use super::{Results, Summary};
use serde::Serialize;
use smplab_experiment::point::Point;
use smplab_record::Executor;
use std::collections::BTreeMap;

/// A simulator prediction beside the measurement of the same configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// The measured configuration's label.
    pub label: String,
    pub metric: String,
    pub measured: f64,
    pub predicted: f64,
}

impl Prediction {
    /// Relative error `(predicted − measured) / |measured|`; for quantities
    /// near zero (slowdowns of a few %) the absolute error is more telling, so
    /// both are reported.
    pub fn rel_error(&self) -> f64 {
        if self.measured == 0.0 {
            f64::NAN
        } else {
            (self.predicted - self.measured) / self.measured.abs()
        }
    }
    pub fn abs_error(&self) -> f64 {
        self.predicted - self.measured
    }
}

/// The simulator twin of a measured point: same workload, sizes, VMs, sync,
/// idle and pinning; any platform/PLE/APICv.
fn sim_twin_matches(measured: &Point, sim: &Point) -> bool {
    sim.executor() == Executor::Sim
        && sim.workload == measured.workload
        && sim.variant == measured.variant
        && sim.threads == measured.threads
        && sim.scale == measured.scale
        && sim.vcpus() == measured.vcpus()
        && sim.vms() == measured.vms()
        && sim.config.idle() == measured.config.idle()
        && sim.config.placement() == measured.config.placement()
        && (measured.executor() == Executor::Qemu || sim.config.sync() == measured.config.sync())
        && sim.study == measured.study
}

impl Results<'_> {
    /// The simulator configuration [`Results::predictions`] pairs with the
    /// measured configuration `m` (on `platform`, or any).
    pub fn sim_twin(&self, m: &Point, platform: Option<&str>) -> Option<&Point> {
        self.points().find(|s| {
            sim_twin_matches(m, s) && platform.is_none_or(|pl| s.config.platform() == Some(pl))
        })
    }

    /// Every metric both a measured (vm/qemu) configuration and its simulator
    /// twin have: slowdown, wall time, weighted speedup, idle fraction, total
    /// exits/s.
    pub fn predictions(&self, platform: Option<&str>) -> Vec<Prediction> {
        let mut out = Vec::new();
        for m in self
            .points()
            .filter(|p| p.executor().is_real_vm() && p.study.is_none())
        {
            let Some(s) = self.sim_twin(m, platform) else {
                continue;
            };
            let mut pair = |metric: &str, a: Option<Summary>, b: Option<Summary>| {
                if let (Some(a), Some(b)) = (a, b) {
                    out.push(Prediction {
                        label: m.label(),
                        metric: metric.into(),
                        measured: a.median,
                        predicted: b.median,
                    });
                }
            };
            pair("slowdown", self.slowdown(m), self.slowdown(s));
            // Absolute time: meaningful once the platform is calibrated to this host.
            pair("wall time (s)", self.wall(m), self.wall(s));
            if m.vms() > 1 {
                pair(
                    "weighted speedup",
                    self.weighted_speedup(m),
                    self.weighted_speedup(s),
                );
            }
            pair(
                "idle fraction",
                self.idle_fraction(m),
                self.idle_fraction(s),
            );
            let total = |p: &Point| {
                self.workload_exits_per_s(p).map(|median| Summary {
                    n: 1,
                    median,
                    min: 0.0,
                    max: 0.0,
                    mad: 0.0,
                })
            };
            pair("exits/s", total(m), total(s));
        }
        out
    }
}

/// The prediction errors of one metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PredictionErrors {
    /// Pairs of this metric.
    pub pairs: usize,
    /// |relative error| over the pairs that have one; None when none has.
    pub rel: Option<Summary>,
    /// Pairs whose measured value is 0, so their relative error is
    /// undefined (NaN): left out of `rel`, counted here, never dropped
    /// silently. Their absolute error is in `abs`.
    pub rel_undefined: usize,
    /// |predicted − measured| over every pair with finite values, in the
    /// metric's unit (a fraction for idle fraction and slowdown: × 100 =
    /// percentage points). For quantities near 0 this is the telling one: 0.0009
    /// measured against 0.000005 predicted is −99% but 0.09 points.
    pub abs: Option<Summary>,
    /// Slowdowns only: |relative error| of the VM/native wall-time ratio
    /// (`1 + slowdown`), the held-out table's slowdown error, defined and
    /// steady where the slowdown itself is near 0; None for other metrics.
    pub ratio: Option<Summary>,
}

/// Per metric: the median |relative error| of predictions and the median
/// |absolute error| beside it (and for slowdowns the VM/native ratio's
/// error), with the pairs whose relative error is undefined counted.
pub fn prediction_error_by_metric(preds: &[Prediction]) -> BTreeMap<String, PredictionErrors> {
    /// One metric's |errors| so far.
    #[derive(Default)]
    struct Errors {
        pairs: usize,
        rel: Vec<f64>,
        abs: Vec<f64>,
        ratio: Vec<f64>,
    }
    let mut by: BTreeMap<String, Errors> = BTreeMap::new();
    for p in preds {
        let e = by.entry(p.metric.clone()).or_default();
        e.pairs += 1;
        e.rel.push(p.rel_error().abs());
        e.abs.push(p.abs_error().abs());
        if p.metric == "slowdown" {
            e.ratio
                .push(((1.0 + p.predicted) / (1.0 + p.measured) - 1.0).abs());
        }
    }
    by.into_iter()
        .map(|(k, e)| {
            let out = PredictionErrors {
                pairs: e.pairs,
                rel_undefined: e.rel.iter().filter(|x| !x.is_finite()).count(),
                rel: Summary::of(&e.rel),
                abs: Summary::of(&e.abs),
                ratio: Summary::of(&e.ratio),
            };
            (k, out)
        })
        .collect()
}

/// Whether a metric's absolute error reads as percentage points: a fraction
/// (idle fraction, 0-1) or a slowdown (`T_vm / T_native − 1`, a fraction of
/// native time). Both sit near 0 for many pairs (a compute-bound program
/// slows +1%), where a relative error says little: −1% predicted for +2%
/// measured is 150% off but 3 points.
pub fn error_reads_in_points(metric: &str) -> bool {
    metric == "idle fraction" || metric == "slowdown"
}
