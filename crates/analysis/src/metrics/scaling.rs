//! Speedup versus vCPUs and the Seoul thesis's Amdahl projection (eq. 5.1): work
//! per run, time per unit of work, the native parallel fraction, and the
//! projection's inputs (exit handling per vCPU, the share of exits the VMM
//! serializes).

use super::exits::{exit_counts, exit_view, merge_histograms};
use super::{mean_wall_s, Results, Summary};
use serde::Serialize;
use smplab_experiment::point::Point;
use smplab_record::{Executor, LatencyHistogram, RunRecord};
use smplab_stats::MedianCi;

/// Eq. 5.1 and its inputs are written once, in smplab-record, for every crate.
pub use smplab_record::amdahl::{amdahl, parallel_fraction, AmdahlInputs};

/// One point of a speedup-versus-vCPUs curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpeedupPoint {
    pub vcpus: u32,
    /// Measured `T(N_min) / T(N)` × `N_min` (so a curve starting at one vCPU
    /// starts at 1).
    pub measured: Summary,
    /// The 95% interval of the measured speedup's median, widened by the
    /// relative interval of the smallest configuration's time per work every
    /// repetition divides by (as [`Results::weighted_speedup_ci`] does).
    pub measured_ci: MedianCi,
    /// Eq. 5.1 with the pilot's exit load, if the inputs could be measured.
    pub projected: Option<f64>,
    /// Native Amdahl curve with `P_native` (the no-VMM bound).
    pub native_bound: Option<f64>,
}

/// Work done by a point's runs: mean compute-kernel iterations per record,
/// or 1 when the records do not count them (then speedups compare times).
pub fn work(records: &[RunRecord]) -> f64 {
    let w: Vec<f64> = records
        .iter()
        .filter_map(|r| r.counters.ops.get("compute_iters").copied())
        .filter(|&n| n > 0)
        .map(|n| n as f64)
        .collect();
    if w.is_empty() {
        1.0
    } else {
        w.iter().sum::<f64>() / w.len() as f64
    }
}

/// Share of exits the VMM serializes, by sync mode (the Seoul thesis §3.4).
pub fn sync_share(r: &RunRecord) -> f64 {
    let Some(v) = &r.vmm else {
        return 1.0;
    };
    let total: u64 = exit_counts(r)
        .iter()
        .filter(|(k, _)| k.starts_with("io") || k.starts_with("mmio"))
        .map(|(_, n)| n)
        .sum();
    match v.sync.as_str() {
        "global" => 1.0,
        "fine" => 0.0,
        _ => match &v.io_thread {
            // Posted writes are asynchronous: the vCPU does not wait for them.
            Some(io) if total > 0 => {
                (io.requests.saturating_sub(io.posted_writes) as f64 / total as f64).min(1.0)
            }
            Some(io) if io.requests > 0 => {
                io.requests.saturating_sub(io.posted_writes) as f64 / io.requests as f64
            }
            _ => 1.0,
        },
    }
}

/// Exit handling per vCPU (fraction of a vCPU's time spent handling device
/// exits): device exits per vCPU per second × the mean exit-handling latency.
///
/// Counts, latencies and time all come from the workload window when the
/// record has one ([`ExitScope::Window`]), else from the whole run.
pub fn exit_handling_per_cpu(r: &RunRecord) -> Option<f64> {
    let vmm = r.vmm.as_ref()?;
    let v = exit_view(vmm, r.timing.wall_ns);
    let wall = v.seconds;
    if wall <= 0.0 || vmm.vcpus == 0 {
        return None;
    }
    let hs: Vec<&LatencyHistogram> = v.exit_latency.values().collect();
    let h = merge_histograms(&hs)?;
    // Seed 004 models the exits the VMM's device emulation serializes: port
    // and MMIO exits during the run (not HLT or interrupt exits, which KVM
    // handles, nor the result stream written after the workload).
    let exits: u64 = exit_counts(r)
        .iter()
        .filter(|(k, _)| k.starts_with("io_") || k.starts_with("mmio"))
        .map(|(_, n)| n)
        .sum();
    Some(exits as f64 / vmm.vcpus as f64 / wall * h.mean_ns / 1e9)
}

impl Results<'_> {
    /// Speedup versus vCPUs for the family of `p` (same everything but vCPUs
    /// and threads, threads = vCPUs), with the Amdahl projection beside it.
    pub fn speedup_vs_vcpus(&self, p: &Point) -> (Vec<SpeedupPoint>, Option<AmdahlInputs>) {
        let family = |q: &Point| {
            let mut a = q.clone();
            a.config.set_vcpus(p.vcpus().unwrap_or(1));
            a.threads = p.threads;
            a.config_key() == p.config_key() && q.vcpus() == Some(q.threads)
        };
        let mut members: Vec<&Point> = self.points().filter(|q| family(q)).collect();
        members.sort_by_key(|q| q.vcpus());
        let Some(first) = members.first() else {
            return (vec![], None);
        };
        let n0 = first.vcpus().unwrap_or(1) as f64;
        let Some(t0_ci) = MedianCi::of(&self.time_per_work_samples(first)) else {
            return (vec![], None);
        };
        let t0 = t0_ci.median;
        let inputs = self.amdahl_inputs(first);
        let out = members
            .iter()
            .filter_map(|q| {
                let es = self.get(q)?;
                let n = q.vcpus().unwrap_or(1) as f64;
                let samples: Vec<f64> = es
                    .iter()
                    .map(|e| t0 / (mean_wall_s(&e.records) / work(&e.records)) * n0)
                    .collect();
                let measured = Summary::of(&samples)?;
                let ci = MedianCi::of(&samples)?;
                let measured_ci = if t0 > 0.0 {
                    MedianCi {
                        lo: ci.lo * t0_ci.lo / t0,
                        hi: ci.hi * t0_ci.hi / t0,
                        coverage: ci.coverage * t0_ci.coverage,
                        ..ci
                    }
                } else {
                    ci
                };
                Some(SpeedupPoint {
                    vcpus: q.vcpus().unwrap_or(1),
                    measured,
                    measured_ci,
                    projected: inputs.map(|i| i.projected(n)),
                    native_bound: inputs.map(|i| amdahl(i.p_native, n)),
                })
            })
            .collect();
        (out, inputs)
    }

    /// Wall time per unit of work (per compute-kernel iteration, when the
    /// records count them): speedups divide these, so a profile whose work
    /// grows with its thread count (weak scaling) is judged by throughput,
    /// as the Seoul thesis's kernel compile with a fixed job is.
    pub fn time_per_work(&self, p: &Point) -> Option<Summary> {
        Summary::of(&self.time_per_work_samples(p))
    }

    /// Wall time per unit of work of each repetition.
    fn time_per_work_samples(&self, p: &Point) -> Vec<f64> {
        self.get(p).map_or_else(Vec::new, |es| {
            es.iter()
                .map(|e| mean_wall_s(&e.records) / work(&e.records))
                .collect()
        })
    }

    /// Native parallel fraction of `p`'s workload from its native runs: the
    /// speedup (per unit of work) from the fewest to the most threads measured.
    pub fn native_parallel_fraction(&self, p: &Point) -> Option<f64> {
        let mut natives: Vec<(u32, f64)> = self
            .points()
            .filter(|q| {
                q.executor() == Executor::Native
                    && q.workload == p.workload
                    && q.variant == p.variant
                    && q.scale == p.scale
            })
            .filter_map(|q| Some((q.threads, self.time_per_work(q)?.median)))
            .collect();
        natives.sort_by_key(|x| x.0);
        let (n1, t1) = *natives.first()?;
        let (nk, tk) = *natives.last()?;
        if nk <= n1 || tk <= 0.0 {
            return None;
        }
        // Strong-scaling estimate: the speedup from n1 to nk threads over the
        // thread ratio (exact when n1 = 1).
        parallel_fraction(t1 / tk, nk as f64 / n1 as f64)
    }

    /// Projection inputs from a pilot configuration (the smallest vCPU count).
    pub fn amdahl_inputs(&self, pilot: &Point) -> Option<AmdahlInputs> {
        let p_native = self.native_parallel_fraction(pilot)?;
        let es = self.get(pilot)?;
        let recs: Vec<&RunRecord> = es.iter().flat_map(|e| e.records.iter()).collect();
        let h: Vec<f64> = recs
            .iter()
            .filter_map(|r| exit_handling_per_cpu(r))
            .collect();
        let share: Vec<f64> = recs.iter().map(|r| sync_share(r)).collect();
        Some(AmdahlInputs {
            p_native,
            exit_handling_per_cpu: Summary::of(&h)?.median,
            sync_share: Summary::of(&share)?.median,
        })
    }
}
