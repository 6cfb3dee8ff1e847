//! Exit figures of stored runs: which span a record's exit counts cover
//! (the workload window or the whole run), exit counts and rates by reason
//! merged from smplab-vmm's and KVM's counters, the reasons "exits/s" totals,
//! exit-handling latency percentiles and merged latency histograms.

use super::{Results, Summary};
use serde::Serialize;
use smplab_experiment::point::Point;
use smplab_record::{LatencyHistogram, RunRecord};
use std::collections::BTreeMap;

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
/// (HLT), `irq` (a host interrupt, such as the host's timer tick or the
/// kick that delivers a virtual interrupt, taking a vCPU out of guest
/// mode: KVM's `irq_exits`, the simulator's host-tick and kick models) and the device exits to the VMM (`io_in`, `io_out`, `mmio_read`,
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
pub(super) struct ExitView<'a> {
    pub(super) scope: ExitScope,
    pub(super) seconds: f64,
    pub(super) exits_per_vcpu: &'a [BTreeMap<String, u64>],
    pub(super) kvm_vcpu_stats: &'a [BTreeMap<String, u64>],
    pub(super) exit_latency: &'a BTreeMap<String, LatencyHistogram>,
    pub(super) global_lock_wait: Option<&'a LatencyHistogram>,
}

/// The window's figures when the record has a complete window, else the
/// whole run's (over the record's wall time).
pub(super) fn exit_view(v: &smplab_record::vmm::VmmSection, wall_ns: u64) -> ExitView<'_> {
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

impl Results<'_> {
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
