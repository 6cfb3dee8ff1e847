//! Metrics from stored results. Every metric is defined on the successful
//! entries of a store (the latest entry per point), per configuration (points
//! that differ only in their repetition), as a median with its spread over
//! repetitions. Definitions are repeated in docs/lab.md.
//!
//! This module owns the grouping of results by configuration ([`Results`]),
//! the [`Summary`] of repetitions and the wall-time metrics built on it:
//! wall time, slowdown versus native, weighted speedup of K VMs (with their
//! 95% intervals) and the idle and spin fractions. Exit figures are in
//! `exits`, speedup versus vCPUs and the Amdahl projection in `scaling`,
//! simulator predictions beside measurements in `prediction` and the
//! macro-versus-micro correlation in `micro`; their public items are
//! re-exported here.

use serde::Serialize;
use smplab_experiment::point::Point;
use smplab_experiment::store::{Entry, Store};
use smplab_record::config::Placement;
use smplab_record::{Executor, RunRecord};
use smplab_stats::MedianCi;
use std::collections::BTreeMap;

mod exits;
mod micro;
mod paired;
mod prediction;
mod scaling;

pub use exits::{
    exit_counts, exit_rates, exit_scope, is_counted_exit_reason, merge_histograms, ExitScope,
    COUNTED_EXIT_REASONS, RESULT_STREAM, WINDOW_PORT,
};
pub use micro::{correlate_with_slowdown, micro_rates, pearson, Correlation};
pub use paired::Precision;
pub use prediction::{
    error_reads_in_points, prediction_error_by_metric, Prediction, PredictionErrors,
};
pub use scaling::{
    amdahl, exit_handling_per_cpu, parallel_fraction, sync_share, work, AmdahlInputs, SpeedupPoint,
};

/// Median and spread of one quantity over repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Median absolute deviation from the median: a spread robust to one
    /// disturbed repetition (the host is shared).
    pub mad: f64,
}

impl Summary {
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let median = median_sorted(&v);
        let mut dev: Vec<f64> = v.iter().map(|x| (x - median).abs()).collect();
        dev.sort_by(f64::total_cmp);
        Some(Summary {
            n: v.len(),
            median,
            min: v[0],
            max: v[v.len() - 1],
            mad: median_sorted(&dev),
        })
    }
    /// The spread as a fraction of the median (for "±x %" in tables).
    pub fn rel_spread(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / 2.0 / self.median.abs()
        }
    }
}

use smplab_stats::median_of_sorted as median_sorted;

/// The successful results of a store grouped by configuration.
pub struct Results<'a> {
    /// config key → its repetitions' entries.
    pub configs: BTreeMap<String, Vec<&'a Entry>>,
}

impl<'a> Results<'a> {
    pub fn new(store: &'a Store) -> Self {
        Self::from_entries(store.latest())
    }

    /// Successful entries by configuration. Repetitions the sweep flagged as
    /// disturbed (the host's steal above its threshold, `Entry::disturbed`)
    /// are left out, unless every repetition of a configuration was: then
    /// they are all it has, and they stay.
    pub fn from_entries(entries: Vec<&'a Entry>) -> Self {
        let mut configs: BTreeMap<String, Vec<&Entry>> = BTreeMap::new();
        for e in entries
            .into_iter()
            .filter(|e| e.is_ok() && !e.records.is_empty())
        {
            configs.entry(e.point.config_key()).or_default().push(e);
        }
        for es in configs.values_mut() {
            if es.iter().any(|e| !e.disturbed) {
                es.retain(|e| !e.disturbed);
            }
        }
        Results { configs }
    }

    /// One representative point per configuration (repetition 0's parameters).
    pub fn points(&self) -> impl Iterator<Item = &Point> {
        self.configs.values().map(|v| &v[0].point)
    }

    pub fn get(&self, p: &Point) -> Option<&Vec<&'a Entry>> {
        self.configs.get(&p.config_key())
    }

    /// Median wall time (seconds) of a configuration; for multi-VM points the
    /// per-repetition value is the mean over VMs.
    pub fn wall(&self, p: &Point) -> Option<Summary> {
        let es = self.get(p)?;
        Summary::of(
            &es.iter()
                .map(|e| mean_wall_s(&e.records))
                .collect::<Vec<_>>(),
        )
    }

    /// The native configuration slowdown is measured against: same workload,
    /// variant, threads and scale; same pinning if measured, else any.
    pub fn native_for(&self, p: &Point) -> Option<&Vec<&'a Entry>> {
        let mut twin = p.native_twin();
        twin.config.set_placement(p.config.placement().clone());
        if let Some(e) = self.get(&twin) {
            return Some(e);
        }
        twin.config.set_placement(Placement::Float);
        if let Some(e) = self.get(&twin) {
            return Some(e);
        }
        let prefix = {
            let k = twin.config_key();
            k.split("/pin=").next().unwrap_or_default().to_string()
        };
        self.configs
            .iter()
            .find(|(k, _)| k.starts_with(&format!("{prefix}/pin=")))
            .map(|(_, v)| v)
    }

    /// Slowdown versus native (Ding & Shan Fig. 1): `T_exec / T_native - 1`, per
    /// repetition against the native median. For the simulator the native
    /// time is its own no-virtualization model (`sim.native_wall_ns`) of the
    /// same run, so a prediction needs no native measurement.
    pub fn slowdown(&self, p: &Point) -> Option<Summary> {
        if p.executor() == Executor::Native {
            return None;
        }
        let es = self.get(p)?;
        if p.executor() == Executor::Sim {
            let v: Vec<f64> = es
                .iter()
                .filter_map(|e| Some(mean_wall_s(&e.records) / sim_native_s(&e.records)? - 1.0))
                .collect();
            if let Some(s) = Summary::of(&v) {
                return Some(s);
            }
        }
        let native = Summary::of(
            &self
                .native_for(p)?
                .iter()
                .map(|e| mean_wall_s(&e.records))
                .collect::<Vec<_>>(),
        )?
        .median;
        if native <= 0.0 {
            return None;
        }
        Summary::of(
            &es.iter()
                .map(|e| mean_wall_s(&e.records) / native - 1.0)
                .collect::<Vec<_>>(),
        )
    }

    /// Weighted speedup (Ding & Shan Fig. 2) of a `vms = K` configuration:
    /// `Σ_i T_1 / T_K,i` over its K VMs, where `T_1` is the median wall time of
    /// the same configuration with one VM. 1 means the same throughput as one
    /// VM alone; K means perfect scaling.
    pub fn weighted_speedup(&self, p: &Point) -> Option<Summary> {
        let mut one = p.clone();
        one.config.set_vms(1);
        let t1 = self.wall(&one)?.median;
        let es = self.get(p)?;
        Summary::of(
            &es.iter()
                // Runs whose VMs did not run their workloads at the same time
                // say nothing about sharing the host.
                .filter(|e| workload_overlap(&e.records).is_none_or(|f| f >= MIN_WORKLOAD_OVERLAP))
                .map(|e| {
                    e.records
                        .iter()
                        .map(|r| r.timing.wall_ns as f64 / 1e9)
                        .filter(|&t| t > 0.0)
                        .map(|t| t1 / t)
                        .sum::<f64>()
                })
                .collect::<Vec<_>>(),
        )
    }

    /// Wall time (seconds) of a configuration: the median over repetitions
    /// with its distribution-free 95% interval (per repetition the mean over
    /// VMs).
    pub fn wall_ci(&self, p: &Point) -> Option<MedianCi> {
        let es = self.get(p)?;
        MedianCi::of(
            &es.iter()
                .map(|e| mean_wall_s(&e.records))
                .collect::<Vec<_>>(),
        )
    }

    /// Slowdown versus native with a 95% interval.
    ///
    /// Measured executors with at least 6 repetitions paired with the native
    /// twin's (same repetition index, run beside it): the interval of the
    /// paired ratio's median, minus 1 ([`Results::paired_slowdown_ci`]).
    /// Otherwise the ratio of the medians, `T̃_exec / T̃_native − 1`,
    /// and an interval built conservatively from the two medians' intervals:
    /// `[lo_exec / hi_native − 1, hi_exec / lo_native − 1]`. The two are
    /// measured independently, so it covers the true ratio of medians with at
    /// least the product of their coverages (≥ 0.939 with 6 repetitions each,
    /// recorded in `coverage`). No bootstrap: with 6–10 repetitions a
    /// bootstrap interval of a median is too coarse to trust.
    ///
    /// Simulator: per repetition against the simulator's own native model of
    /// the same run, the interval of those ratios' median.
    pub fn slowdown_ci(&self, p: &Point) -> Option<MedianCi> {
        if p.executor() == Executor::Native {
            return None;
        }
        if p.executor() == Executor::Sim {
            let es = self.get(p)?;
            let v: Vec<f64> = es
                .iter()
                .filter_map(|e| Some(mean_wall_s(&e.records) / sim_native_s(&e.records)? - 1.0))
                .collect();
            if let Some(ci) = MedianCi::of(&v) {
                return Some(ci);
            }
        }
        // Interleaved pairs with the native twin, when there are enough.
        if let Some(ci) = self.paired_slowdown_ci(p) {
            return Some(ci);
        }
        let exec = self.wall_ci(p)?;
        let native = MedianCi::of(
            &self
                .native_for(p)?
                .iter()
                .map(|e| mean_wall_s(&e.records))
                .collect::<Vec<_>>(),
        )?;
        ratio_ci(&exec, &native).map(|r| MedianCi {
            median: r.median - 1.0,
            lo: r.lo - 1.0,
            hi: r.hi - 1.0,
            ..r
        })
    }

    /// Weighted speedup with a 95% interval, over the repetitions whose K
    /// VMs ran their workloads at the same time (see [`WeightedSpeedup`]).
    ///
    /// Per repetition `Σ_i T̃_1 / T_K,i`; the interval of those values'
    /// median is widened by the relative interval of `T̃_1` (the 1-VM median
    /// every repetition divides by): `[lo · lo_1/T̃_1, hi · hi_1/T̃_1]`,
    /// coverage the product of the two.
    pub fn weighted_speedup_ci(&self, p: &Point) -> Option<WeightedSpeedup> {
        let mut one = p.clone();
        one.config.set_vms(1);
        let t1 = self.wall_ci(&one)?;
        if t1.median <= 0.0 {
            return None;
        }
        let es = self.get(p)?;
        let (mut used, mut excluded, mut unverified) = (Vec::new(), 0, 0);
        for e in es {
            match workload_overlap(&e.records) {
                Some(f) if f < MIN_WORKLOAD_OVERLAP => {
                    excluded += 1;
                    continue;
                }
                Some(_) => {}
                None => unverified += usize::from(e.records.len() > 1),
            }
            used.push(
                e.records
                    .iter()
                    .map(|r| r.timing.wall_ns as f64 / 1e9)
                    .filter(|&t| t > 0.0)
                    .map(|t| t1.median / t)
                    .sum::<f64>(),
            );
        }
        let ws = MedianCi::of(&used)?;
        Some(WeightedSpeedup {
            ci: MedianCi {
                lo: ws.lo * t1.lo / t1.median,
                hi: ws.hi * t1.hi / t1.median,
                coverage: ws.coverage * t1.coverage,
                ..ws
            },
            excluded,
            unverified,
        })
    }

    /// Weighted speedup as VMs go from 1 to K, for the family of `p`.
    pub fn weighted_speedup_series(&self, p: &Point) -> Vec<(u32, Summary)> {
        let mut out: Vec<(u32, Summary)> = self
            .points()
            .filter(|q| {
                let mut a = (*q).clone();
                a.config.set_vms(p.vms());
                a.config_key() == p.config_key()
            })
            .filter_map(|q| Some((q.vms(), self.weighted_speedup(q)?)))
            .collect();
        out.sort_by_key(|x| x.0);
        out
    }

    /// Fraction of vCPU time idle inside the workload window, per
    /// repetition the mean over VMs ([`idle_fraction`]).
    pub fn idle_fraction(&self, p: &Point) -> Option<Summary> {
        self.per_rep(p, idle_fraction)
    }

    /// Fraction of vCPU time spent spinning. Only the simulator knows spin
    /// *time*; for measured runs see [`Results::spin_rate`].
    pub fn spin_fraction(&self, p: &Point) -> Option<Summary> {
        self.per_rep(p, |r| {
            let s = r.sim.as_ref()?;
            let wall = r.timing.wall_ns as f64;
            (wall > 0.0).then(|| s.spin_ns as f64 / (s.vcpus.max(1) as f64 * wall))
        })
    }

    /// Spin-loop iterations per second of wall time (every executor counts them).
    pub fn spin_rate(&self, p: &Point) -> Option<Summary> {
        self.per_rep(p, |r| {
            let wall = r.timing.wall_ns as f64 / 1e9;
            (wall > 0.0).then(|| r.counters.spin_iterations as f64 / wall)
        })
    }

    pub fn per_rep(&self, p: &Point, f: impl Fn(&RunRecord) -> Option<f64>) -> Option<Summary> {
        let es = self.get(p)?;
        let v: Vec<f64> = es
            .iter()
            .filter_map(|e| {
                let xs: Vec<f64> = e.records.iter().filter_map(&f).collect();
                (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
            })
            .collect();
        Summary::of(&v)
    }
}

/// A weighted speedup with its interval, and which runs it stands on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WeightedSpeedup {
    pub ci: MedianCi,
    /// Repetitions left out: their VMs' workload windows overlapped less than
    /// [`MIN_WORKLOAD_OVERLAP`], so they did not share the host the whole time.
    pub excluded: usize,
    /// Multi-VM repetitions counted whose records carry no workload windows
    /// (older records): their overlap is assumed, not checked.
    pub unverified: usize,
}

/// The least overlap of the K VMs' workload windows for a run to count in
/// weighted speedup: 90% of the union of the windows.
pub const MIN_WORKLOAD_OVERLAP: f64 = 0.9;

/// How much the workload windows of a multi-VM run's records overlapped: the
/// time all K ran their workloads at once over the union of their windows
/// (1 = fully together; [`smplab_record::overlap_of_records`]). `None` when
/// it cannot be known: records without windows (older smplab, a run stopped
/// before the guest said "done") or QEMU runs, whose windows are on each
/// guest's own clock. A single record overlaps itself fully.
pub fn workload_overlap(records: &[RunRecord]) -> Option<f64> {
    if records.len() < 2 {
        return Some(1.0);
    }
    smplab_record::overlap_of_records(records).ok()
}

/// `a / b` of two independent medians with a conservative interval:
/// `[a.lo / b.hi, a.hi / b.lo]`, coverage the product of both coverages.
/// `None` when `b`'s interval reaches zero.
pub fn ratio_ci(a: &MedianCi, b: &MedianCi) -> Option<MedianCi> {
    if b.lo <= 0.0 || b.median <= 0.0 {
        return None;
    }
    Some(MedianCi {
        median: a.median / b.median,
        lo: a.lo / b.hi,
        hi: a.hi / b.lo,
        n: a.n.min(b.n),
        coverage: a.coverage * b.coverage,
    })
}

/// The simulator's native model of a run (mean over VMs), seconds.
pub fn sim_native_s(records: &[RunRecord]) -> Option<f64> {
    let n: Vec<f64> = records
        .iter()
        .filter_map(|r| r.sim.as_ref()?.native_wall_ns)
        .map(|ns| ns as f64 / 1e9)
        .collect();
    (!n.is_empty()).then(|| n.iter().sum::<f64>() / n.len() as f64)
}

/// Fraction of one run's vCPU time that was idle inside the workload
/// window: idle time inside the window over `vCPUs × wall`, where idle means
/// nothing to run and halted (the HLT exit, host halt-polling, blocked, the
/// wakeup until the vCPU runs guest code again) or polling in the guest's
/// idle loop. The guest kernel's own scheduling work on the way into and out
/// of idle is kernel time, not idle time. Measured runs: the guest's
/// `window_idle_ns_per_vcpu` (None for records without it: their idle
/// counters span the whole run, boot included, and count that scheduling
/// work). Simulated runs: `sim.idle_ns` (the causes `exit_hlt`, `halt_poll`,
/// `idle_halted`, `wake_latency`, `idle_poll`), which covers the workload only.
/// Definition in docs/lab.md.
pub fn idle_fraction(r: &RunRecord) -> Option<f64> {
    let wall = r.timing.wall_ns as f64;
    if wall <= 0.0 {
        return None;
    }
    if let Some(s) = &r.sim {
        return Some(s.idle_ns as f64 / (f64::from(s.vcpus.max(1)) * wall));
    }
    let g = r.guest.as_ref()?;
    if g.window_idle_ns_per_vcpu.is_empty() {
        return None;
    }
    let idle: u64 = g.window_idle_ns_per_vcpu.iter().sum();
    Some(idle as f64 / (g.window_idle_ns_per_vcpu.len() as f64 * wall))
}

pub use smplab_experiment::sweep::mean_wall_s;

#[cfg(test)]
mod tests;
