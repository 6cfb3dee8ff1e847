//! Metrics from stored results. Every metric is defined on the successful
//! entries of a store (the latest entry per point), per configuration (points
//! that differ only in their repetition), as a median with its spread over
//! repetitions. Definitions are repeated in docs/lab.md.

use crate::point::Point;
use crate::stats::MedianCi;
use crate::store::{Entry, Store};
use serde::Serialize;
use smplab_record::config::Placement;
use smplab_record::{Executor, LatencyHistogram, RunRecord};
use std::collections::BTreeMap;

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

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The successful results of a store grouped by configuration.
pub struct Results<'a> {
    /// config key → its repetitions' entries.
    pub configs: BTreeMap<String, Vec<&'a Entry>>,
}

impl<'a> Results<'a> {
    pub fn new(store: &'a Store) -> Self {
        Self::from_entries(store.latest())
    }

    pub fn from_entries(entries: Vec<&'a Entry>) -> Self {
        let mut configs: BTreeMap<String, Vec<&Entry>> = BTreeMap::new();
        for e in entries
            .into_iter()
            .filter(|e| e.is_ok() && !e.records.is_empty())
        {
            configs.entry(e.point.config_key()).or_default().push(e);
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

    /// Slowdown versus native (seed 000 Fig. 1): `T_exec / T_native - 1`, per
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

    /// Weighted speedup (seed 000 Fig. 2) of a `vms = K` configuration:
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
    /// Measured executors: the ratio of the medians, `T̃_exec / T̃_native − 1`,
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

    /// Exits per second during the workload ("exits/s"): the medians of the
    /// [`COUNTED_EXIT_REASONS`] summed, the reasons every executor that
    /// counts exits counts the same way. `None` when the point has no exit
    /// counts at all.
    pub fn workload_exits_per_s(&self, p: &Point) -> Option<f64> {
        let e = self.exits_per_s(p);
        let total: f64 = e
            .iter()
            .filter(|(k, _)| is_counted_exit_reason(k))
            .map(|(_, s)| s.median)
            .sum();
        (!e.is_empty()).then_some(total)
    }

    /// The span a point's exit figures cover: [`ExitScope::WholeRun`] if
    /// any of its smplab-vmm records lacks a complete workload window (its
    /// figures include boot and the result stream), `None` without
    /// smplab-vmm records.
    pub fn exit_scope(&self, p: &Point) -> Option<ExitScope> {
        let scopes: Vec<ExitScope> = self
            .get(p)?
            .iter()
            .flat_map(|e| e.records.iter())
            .filter_map(exit_scope)
            .collect();
        let first = *scopes.first()?;
        Some(if scopes.contains(&ExitScope::WholeRun) {
            ExitScope::WholeRun
        } else {
            first
        })
    }

    /// Exits per second by reason, medians over repetitions.
    pub fn exits_per_s(&self, p: &Point) -> BTreeMap<String, Summary> {
        let Some(es) = self.get(p) else {
            return BTreeMap::new();
        };
        let per_rep: Vec<BTreeMap<String, f64>> =
            es.iter().map(|e| exit_rates(&e.records)).collect();
        let reasons: std::collections::BTreeSet<&String> =
            per_rep.iter().flat_map(|m| m.keys()).collect();
        reasons
            .into_iter()
            .filter_map(|r| {
                let v: Vec<f64> = per_rep
                    .iter()
                    .map(|m| m.get(r).copied().unwrap_or(0.0))
                    .collect();
                Some((r.clone(), Summary::of(&v)?))
            })
            .collect()
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

    /// Percentiles (p50, p90, p99, ns) of the VMM's global device-lock wait.
    pub fn lock_wait(&self, p: &Point) -> Option<[Summary; 3]> {
        self.percentiles(p, |r| {
            exit_view(r.vmm.as_ref()?, r.timing.wall_ns)
                .global_lock_wait
                .cloned()
        })
    }

    /// Percentiles (p50, p90, p99, ns) of exit-handling latency over every
    /// device/mode key, histograms merged per run.
    pub fn exit_latency(&self, p: &Point) -> Option<[Summary; 3]> {
        self.percentiles(p, |r| {
            let v = exit_view(r.vmm.as_ref()?, r.timing.wall_ns);
            let hs: Vec<&LatencyHistogram> = v.exit_latency.values().collect();
            merge_histograms(&hs)
        })
    }

    /// The merged exit-latency histogram of a configuration, for plotting.
    pub fn exit_latency_histogram(&self, p: &Point) -> Option<LatencyHistogram> {
        let es = self.get(p)?;
        let hs: Vec<&LatencyHistogram> = es
            .iter()
            .flat_map(|e| e.records.iter())
            .filter_map(|r| Some(exit_view(r.vmm.as_ref()?, r.timing.wall_ns)))
            .flat_map(|v| v.exit_latency.values())
            .collect();
        merge_histograms(&hs)
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

    fn percentiles(
        &self,
        p: &Point,
        f: impl Fn(&RunRecord) -> Option<LatencyHistogram>,
    ) -> Option<[Summary; 3]> {
        let es = self.get(p)?;
        let hs: Vec<LatencyHistogram> = es
            .iter()
            .flat_map(|e| e.records.iter())
            .filter_map(&f)
            .filter(|h| h.count > 0)
            .collect();
        let q = |g: fn(&LatencyHistogram) -> u64| {
            Summary::of(&hs.iter().map(|h| g(h) as f64).collect::<Vec<_>>())
        };
        Some([q(|h| h.p50_ns)?, q(|h| h.p90_ns)?, q(|h| h.p99_ns)?])
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

/// Mean wall time over a point's records, seconds.
pub fn mean_wall_s(records: &[RunRecord]) -> f64 {
    if records.is_empty() {
        return f64::NAN;
    }
    records.iter().map(|r| r.timing.wall_ns as f64).sum::<f64>() / records.len() as f64 / 1e9
}

/// KVM per-vCPU stats that count exits handled inside KVM, and the reason
/// name the lab reports them under.
const KVM_EXIT_STATS: &[(&str, &str)] = &[
    ("halt_exits", "hlt"),
    ("irq_exits", "irq"),
    ("irq_window_exits", "irq_window"),
    ("nmi_window_exits", "nmi_window"),
    ("request_irq_exits", "request_irq"),
];

/// The exit reason of the guest's result stream (after the workload).
pub const RESULT_STREAM: &str = "result_stream";

/// The exit reason of the guest's workload-window port writes (docs/guest-abi.md):
/// inside the window only its closing "done".
pub const WINDOW_PORT: &str = "window_port";

/// The exit reasons "exits/s" totals (docs/lab.md): those smplab-vmm with
/// KVM's stats and the simulator both count, with the same meaning — `hlt`
/// (HLT), `irq` (a host interrupt, such as the host's timer tick, taking a
/// vCPU out of guest mode: KVM's `irq_exits`, the simulator's host-tick
/// model) and the device exits to the VMM (`io_in`, `io_out`, `mmio_read`,
/// `mmio_write`; the simulator's `io`). Left out: reasons only one side can
/// count — measured `window_port` (the guest's "done" that closes the
/// window, one per run), `irq_window`, `nmi_window`, `request_irq` (KVM
/// interrupt-delivery details the simulator folds into an IPI's cost),
/// `intr` (the VMM's own signal kicks); simulated `apic_icr` and `apic_eoi`
/// (no KVM stat counts ICR or EOI writes, and on this PVM host the guest
/// kernel's writes are emulated, not exits), `ple`, `sdb`, `preemption` (a
/// host preemption happens at a host interrupt, which `irq` counts),
/// `timer` (a guest timer waking a halted vCPU, a wakeup KVM does not count
/// as an exit) — and the `result_stream` written after the workload.
pub const COUNTED_EXIT_REASONS: &[&str] = &[
    "hlt",
    "irq",
    "io",
    "io_in",
    "io_out",
    "mmio_read",
    "mmio_write",
];

/// Whether "exits/s" counts exits of this reason ([`COUNTED_EXIT_REASONS`]).
pub fn is_counted_exit_reason(reason: &str) -> bool {
    COUNTED_EXIT_REASONS.contains(&reason)
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

/// The span of a run that its exit figures (counts, rates, latencies,
/// global-lock wait) cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitScope {
    /// Only exits handled inside the workload window (smplab-vmm's
    /// `vmm.window`, from its "go" to the guest's "done"): neither boot nor
    /// the result stream written after the workload is in them.
    Window,
    /// The whole run, boot and result stream included: records without a
    /// complete `vmm.window` (older records, a run stopped before "done").
    WholeRun,
}

/// One run's exit statistics over the span [`ExitScope`] names, and that
/// span's length.
struct ExitView<'a> {
    scope: ExitScope,
    seconds: f64,
    exits_per_vcpu: &'a [BTreeMap<String, u64>],
    kvm_vcpu_stats: &'a [BTreeMap<String, u64>],
    exit_latency: &'a BTreeMap<String, LatencyHistogram>,
    global_lock_wait: Option<&'a LatencyHistogram>,
}

/// The window's figures when the record has a complete window, else the
/// whole run's (over the record's wall time).
fn exit_view(v: &smplab_record::vmm::VmmSection, wall_ns: u64) -> ExitView<'_> {
    match &v.window {
        Some(w) if w.done_ns.is_some_and(|d| d > w.go_ns) => ExitView {
            scope: ExitScope::Window,
            seconds: w.done_ns.unwrap_or(w.go_ns).saturating_sub(w.go_ns) as f64 / 1e9,
            exits_per_vcpu: &w.exits_per_vcpu,
            kvm_vcpu_stats: &w.kvm_vcpu_stats,
            exit_latency: &w.exit_latency,
            global_lock_wait: w.global_lock_wait.as_ref(),
        },
        _ => ExitView {
            scope: ExitScope::WholeRun,
            seconds: wall_ns as f64 / 1e9,
            exits_per_vcpu: &v.exits_per_vcpu,
            kvm_vcpu_stats: &v.kvm_vcpu_stats,
            exit_latency: &v.exit_latency,
            global_lock_wait: v.global_lock_wait.as_ref(),
        },
    }
}

/// The span [`exit_counts`] and [`exit_rates`] cover for one record: `None`
/// for records without a `vmm` section (native, QEMU, simulated runs).
pub fn exit_scope(r: &RunRecord) -> Option<ExitScope> {
    Some(exit_view(r.vmm.as_ref()?, r.timing.wall_ns).scope)
}

/// Exit counts by reason for one run, summed over vCPUs, inside the workload
/// window when the record has one ([`ExitScope`]).
///
/// Measured runs combine two sources: smplab-vmm counts the exits that reach
/// user space (port and MMIO I/O, ...) and KVM's binary stats count those it
/// handles itself (HLT, external interrupts, ...). KVM's `io_exits` stays 0 on
/// this PVM host, so I/O comes from the VMM; HLT and interrupt exits come from
/// KVM (the VMM never sees them with the in-kernel irqchip). Port writes of the
/// guest's result stream and exit code happen after the workload, so they are
/// reported as their own reason `result_stream` instead of inflating `io_out`.
/// Simulated runs report the simulator's counts.
pub fn exit_counts(r: &RunRecord) -> BTreeMap<String, u64> {
    let mut m: BTreeMap<String, u64> = BTreeMap::new();
    if let Some(v) = r.vmm.as_ref().map(|v| exit_view(v, r.timing.wall_ns)) {
        let n = v.exits_per_vcpu.len().max(v.kvm_vcpu_stats.len());
        for i in 0..n {
            let mut per: BTreeMap<String, u64> = BTreeMap::new();
            if let Some(vmm) = v.exits_per_vcpu.get(i) {
                for (k, c) in vmm {
                    // KVM_RUN retries (EAGAIN on a not-yet-started AP) are not exits.
                    if k != "eagain" {
                        per.insert(k.clone(), *c);
                    }
                }
            }
            if let Some(stats) = v.kvm_vcpu_stats.get(i) {
                for (stat, reason) in KVM_EXIT_STATS {
                    if let Some(&c) = stats.get(*stat) {
                        // The VMM counts HLT itself only without an in-kernel
                        // irqchip: take the larger count, never the sum.
                        let e = per.entry(reason.to_string()).or_default();
                        *e = (*e).max(c);
                    }
                }
            }
            for (k, c) in per {
                *m.entry(k).or_default() += c;
            }
        }
        let count = |prefixes: &[&str]| -> u64 {
            v.exit_latency
                .iter()
                .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
                .map(|(_, h)| h.count)
                .sum()
        };
        let stream = count(&["result/", "debug_exit/"]);
        // The guest's "done" on the window port closes the window from
        // inside it: the measurement's own exit, not the workload's.
        let window = count(&["window/"]);
        for (n, reason) in [(stream, RESULT_STREAM), (window, WINDOW_PORT)] {
            if n > 0 {
                if let Some(out) = m.get_mut("io_out") {
                    let moved = n.min(*out);
                    *out -= moved;
                    *m.entry(reason.into()).or_default() += moved;
                }
            }
        }
    }
    if let Some(s) = &r.sim {
        for (k, n) in &s.exits {
            *m.entry(k.clone()).or_default() += n;
        }
    }
    m.retain(|_, n| *n > 0);
    m
}

/// Exits per second by reason over a point's records (summed over VMs: the
/// host's exit load): exits inside the workload window over the window's
/// length when the record has one, else whole-run exits over wall time.
pub fn exit_rates(records: &[RunRecord]) -> BTreeMap<String, f64> {
    let mut m: BTreeMap<String, f64> = BTreeMap::new();
    for r in records {
        let wall = match &r.vmm {
            Some(v) => exit_view(v, r.timing.wall_ns).seconds,
            None => r.timing.wall_ns as f64 / 1e9,
        };
        if wall <= 0.0 {
            continue;
        }
        for (k, n) in exit_counts(r) {
            *m.entry(k).or_default() += n as f64 / wall;
        }
    }
    m
}

/// Merge histograms bucket-wise; percentiles are re-derived from the merged
/// buckets (upper bounds, so they err high by at most one log2 bucket).
pub fn merge_histograms(hs: &[&LatencyHistogram]) -> Option<LatencyHistogram> {
    let hs: Vec<&&LatencyHistogram> = hs.iter().filter(|h| h.count > 0).collect();
    if hs.is_empty() {
        return None;
    }
    if hs.len() == 1 {
        return Some((*hs[0]).clone());
    }
    let mut buckets: BTreeMap<u64, u64> = BTreeMap::new();
    for h in &hs {
        for &(ub, c) in &h.buckets {
            *buckets.entry(ub).or_default() += c;
        }
    }
    let count: u64 = hs.iter().map(|h| h.count).sum();
    let mean = hs.iter().map(|h| h.mean_ns * h.count as f64).sum::<f64>() / count as f64;
    let total_b: u64 = buckets.values().sum();
    // Casts: f is a quantile in 0..=1, so the target is in 0..=total_b.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let q = |f: f64| -> u64 {
        let target = (f * total_b as f64).ceil() as u64;
        let mut acc = 0;
        for (&ub, &c) in &buckets {
            acc += c;
            if acc >= target.max(1) {
                return ub;
            }
        }
        buckets.keys().last().copied().unwrap_or(0)
    };
    Some(LatencyHistogram {
        count,
        min_ns: hs.iter().map(|h| h.min_ns).min().unwrap_or(0),
        max_ns: hs.iter().map(|h| h.max_ns).max().unwrap_or(0),
        mean_ns: mean,
        p50_ns: q(0.5),
        p90_ns: q(0.9),
        p99_ns: q(0.99),
        p999_ns: q(0.999),
        buckets: buckets.into_iter().collect(),
    })
}

// ---------------------------------------------------------------------------
// Speedup versus vCPUs and the Amdahl projection (seed 004, eq. 5.1).

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

/// Share of exits the VMM serializes, by sync mode (seed 004 §3.4).
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
    /// as seed 004's kernel compile with a fixed job is.
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

// ---------------------------------------------------------------------------
// Prediction error (seed 003: macro and micro results side by side).

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
            .filter(|p| matches!(p.executor(), Executor::Vm | Executor::Qemu) && p.study.is_none())
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

// ---------------------------------------------------------------------------
// Macro versus micro (seed 003): which low-level rate moves with the slowdown?

/// Per-second rates of low-level events of one configuration (medians over
/// repetitions): exits by reason (`exit:REASON`), guest IPIs, halts, wakeups
/// and context switches, workload blocks and spin iterations.
pub fn micro_rates(results: &Results, p: &Point) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for (k, s) in results.exits_per_s(p) {
        if k != RESULT_STREAM && k != WINDOW_PORT {
            out.insert(format!("exit:{k}"), s.median);
        }
    }
    let rate = |f: Counter| {
        results.per_rep(p, |r| {
            let wall = r.timing.wall_ns as f64 / 1e9;
            (wall > 0.0).then_some(f(r)? as f64 / wall)
        })
    };
    type Counter = fn(&RunRecord) -> Option<u64>;
    let fields: [(&str, Counter); 6] = [
        ("guest IPIs", |r| Some(r.guest.as_ref()?.ipis_sent)),
        ("guest halts", |r| Some(r.guest.as_ref()?.halts)),
        ("guest wakeups", |r| Some(r.guest.as_ref()?.wakeups)),
        ("guest context switches", |r| {
            Some(r.guest.as_ref()?.context_switches)
        }),
        ("blocks", |r| Some(r.counters.blocks)),
        ("spin iterations", |r| Some(r.counters.spin_iterations)),
    ];
    for (name, f) in fields {
        if let Some(s) = rate(f) {
            out.insert(name.to_string(), s.median);
        }
    }
    out
}

/// Pearson correlation of two equally long series; `None` when either is
/// constant or there are fewer than three pairs.
pub fn pearson(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let n = xs.len();
    if n < 3 || ys.len() != n {
        return None;
    }
    let mx = xs.iter().sum::<f64>() / n as f64;
    let my = ys.iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx).powi(2);
        syy += (y - my).powi(2);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// One micro rate's correlation with the slowdown across configurations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Correlation {
    pub micro: String,
    pub r: f64,
    /// `(configuration label, micro rate, slowdown)` pairs.
    pub pairs: Vec<(String, f64, f64)>,
}

/// For the one-VM configurations of `executor` (outside studies), correlate
/// each micro rate with the slowdown; strongest |r| first. A missing rate
/// counts as 0 when other configurations have it (an absent exit reason did
/// not happen).
pub fn correlate_with_slowdown(results: &Results, executor: Executor) -> Vec<Correlation> {
    // (label, slowdown, micro rates) per configuration.
    type Row = (String, f64, BTreeMap<String, f64>);
    let rows: Vec<Row> = results
        .points()
        .filter(|p| p.executor() == executor && p.vms() == 1 && p.study.is_none())
        .filter_map(|p| {
            Some((
                p.label(),
                results.slowdown(p)?.median,
                micro_rates(results, p),
            ))
        })
        .collect();
    let names: std::collections::BTreeSet<&String> = rows.iter().flat_map(|r| r.2.keys()).collect();
    let mut out: Vec<Correlation> = names
        .into_iter()
        .filter_map(|name| {
            let xs: Vec<f64> = rows
                .iter()
                .map(|r| r.2.get(name).copied().unwrap_or(0.0))
                .collect();
            let ys: Vec<f64> = rows.iter().map(|r| r.1).collect();
            let r = pearson(&xs, &ys)?;
            Some(Correlation {
                micro: name.clone(),
                r,
                pairs: rows
                    .iter()
                    .zip(&xs)
                    .map(|(row, x)| (row.0.clone(), *x, row.1))
                    .collect(),
            })
        })
        .collect();
    out.sort_by(|a, b| b.r.abs().total_cmp(&a.r.abs()));
    out
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
    /// metric's unit (a fraction for idle fraction: × 100 = percentage
    /// points). For quantities near 0 this is the telling one: 0.0009
    /// measured against 0.000005 predicted is −99% but 0.09 points.
    pub abs: Option<Summary>,
}

/// Per metric: the median |relative error| of predictions and the median
/// |absolute error| beside it, with the pairs whose relative error is
/// undefined counted.
pub fn prediction_error_by_metric(preds: &[Prediction]) -> BTreeMap<String, PredictionErrors> {
    let mut by: BTreeMap<String, (Vec<f64>, Vec<f64>, usize)> = BTreeMap::new();
    for p in preds {
        let (rel, abs, n) = by.entry(p.metric.clone()).or_default();
        *n += 1;
        rel.push(p.rel_error().abs());
        abs.push(p.abs_error().abs());
    }
    by.into_iter()
        .map(|(k, (rel, abs, pairs))| {
            let e = PredictionErrors {
                pairs,
                rel_undefined: rel.iter().filter(|x| !x.is_finite()).count(),
                rel: Summary::of(&rel),
                abs: Summary::of(&abs),
            };
            (k, e)
        })
        .collect()
}

/// Whether a metric is a fraction (0-1), whose absolute error reads as
/// percentage points.
pub fn is_fraction_metric(metric: &str) -> bool {
    metric == "idle fraction"
}

#[cfg(test)]
mod tests;
