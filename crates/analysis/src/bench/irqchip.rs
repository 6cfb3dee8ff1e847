//! The view of `smplab bench irqchip` (built-in spec `bench-irqchip`):
//! Seoul thesis Figure 5.x on real workloads. Per workload and configuration
//! (interrupt controller, sync mode, vCPUs): the wall time per unit of work
//! (median and spread over the repetitions), exits per second by reason, the
//! speedup over the fewest vCPUs next to eq. 5.1's projection
//! (`smplab_record::amdahl`, with P from native runs of the same workload and
//! the exit load measured at the fewest vCPUs, as
//! `metrics::Results::amdahl_inputs` does), and the ratio of each `user` time
//! to the `kernel` time of the same workload, mode and vCPUs, per repetition.

use super::{by_rep, failure};
use crate::metrics::{
    exit_counts, exit_handling_per_cpu, mean_wall_s, parallel_fraction, sync_share, work,
    AmdahlInputs, Summary,
};
use smplab_experiment::store::Entry;
use smplab_record::config::{Irqchip, RunConfig, SyncMode};
use smplab_record::RunRecord;
use std::collections::BTreeMap;

/// One configuration of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    irqchip: Irqchip,
    sync: SyncMode,
    vcpus: u32,
}

/// Everything measured for one workload.
#[derive(Default)]
struct WorkloadRuns {
    /// Per configuration, one record per repetition, in repetition order.
    vm: BTreeMap<Key, Vec<RunRecord>>,
    /// Failed runs by configuration, with the reason.
    failed: BTreeMap<Key, String>,
    /// Native time per work unit by thread count.
    native: BTreeMap<u32, Vec<f64>>,
}

fn time_per_work(r: &RunRecord) -> f64 {
    mean_wall_s(std::slice::from_ref(r)) / work(std::slice::from_ref(r))
}

/// The bench's tables, one per workload in the order the entries first name
/// them; `host_cpus` marks overcommitted vCPU counts.
pub fn table(entries: &[&Entry], host_cpus: u32) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut runs: BTreeMap<String, WorkloadRuns> = BTreeMap::new();
    for e in by_rep(entries) {
        let w = &e.point.workload;
        if !order.contains(w) {
            order.push(w.clone());
        }
        let wr = runs.entry(w.clone()).or_default();
        match &e.point.config {
            RunConfig::Native(_) if e.is_ok() => {
                wr.native
                    .entry(e.point.threads)
                    .or_default()
                    .extend(e.records.iter().map(time_per_work));
            }
            RunConfig::Vm(v) => {
                let key = Key {
                    irqchip: v.irqchip,
                    sync: v.sync,
                    vcpus: v.guest.vcpus,
                };
                match failure(e) {
                    None => wr.vm.entry(key).or_default().extend(e.records.clone()),
                    Some(why) => {
                        wr.failed.insert(key, why);
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = String::new();
    for w in &order {
        if let Some(r) = runs.get(w) {
            out.push_str(&workload_table(w, r, host_cpus));
        }
    }
    out
}

/// Native parallel fraction from the fewest and most threads measured.
fn p_native(runs: &WorkloadRuns) -> Option<f64> {
    let first = runs.native.iter().next()?;
    let last = runs.native.iter().next_back()?;
    let t1 = Summary::of(first.1)?.median;
    let tk = Summary::of(last.1)?.median;
    if last.0 <= first.0 || tk <= 0.0 {
        return None;
    }
    parallel_fraction(t1 / tk, f64::from(*last.0) / f64::from(*first.0))
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Exits per second by reason, over a configuration's records.
fn exit_rates(records: &[RunRecord]) -> BTreeMap<String, f64> {
    let mut rates: BTreeMap<String, f64> = BTreeMap::new();
    for r in records {
        let secs = r.timing.wall_ns as f64 / 1e9;
        if secs <= 0.0 {
            continue;
        }
        for (reason, n) in exit_counts(r) {
            *rates.entry(reason).or_default() += n as f64 / secs / records.len() as f64;
        }
    }
    rates
}

fn short_rates(rates: &BTreeMap<String, f64>) -> String {
    let mut v: Vec<(&String, &f64)> = rates.iter().filter(|(_, r)| **r >= 1.0).collect();
    v.sort_by(|a, b| b.1.total_cmp(a.1));
    v.iter()
        .take(5)
        .map(|(k, r)| format!("{k}={r:.0}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Median over a configuration's records of a per-record figure in ns, as µs.
fn median_us(records: &[RunRecord], figure: impl Fn(&RunRecord) -> Option<u64>) -> String {
    let v: Vec<f64> = records
        .iter()
        .filter_map(&figure)
        .map(|ns| ns as f64)
        .collect();
    smplab_stats::median(&v).map_or("-".into(), |m| format!("{:.1}", m / 1e3))
}

/// p50 handling time of the guest's LAPIC accesses (user irqchip; includes
/// the wait for the global lock or the I/O thread's reply).
fn lapic_p50(r: &RunRecord) -> Option<u64> {
    let v = r.vmm.as_ref()?;
    v.exit_latency
        .iter()
        .find(|(k, _)| k.starts_with("lapic/"))
        .map(|(_, h)| h.p50_ns)
}

/// p50 wake-up latency of a vCPU halted in the VMM (user irqchip).
fn wake_p50(r: &RunRecord) -> Option<u64> {
    let u = r.vmm.as_ref()?.user_irqchip.as_ref()?;
    u.wake_latency.as_ref().map(|h| h.p50_ns)
}

/// p99 wait for the global lock (`global` mode).
fn lock_p99(r: &RunRecord) -> Option<u64> {
    r.vmm.as_ref()?.global_lock_wait.as_ref().map(|h| h.p99_ns)
}

fn fmt_summary(s: &Summary) -> String {
    format!("{:.3} ±{:.0}%", s.median * 1e3, s.rel_spread() * 100.0)
}

/// A user-space interrupt controller's time per work against the in-kernel
/// one's at the same sync mode and vCPUs: the ratio of the medians `t` and
/// the kernel's, with the range of the per-repetition ratios of `times`;
/// `-` for the in-kernel controller itself or without its runs.
fn vs_kernel(runs: &WorkloadRuns, key: &Key, times: &[f64], t: &Summary) -> String {
    (key.irqchip != Irqchip::Kernel)
        .then(|| {
            let kernel = runs.vm.get(&Key {
                irqchip: Irqchip::Kernel,
                ..*key
            })?;
            let kt = Summary::of(&kernel.iter().map(time_per_work).collect::<Vec<_>>())?;
            // Ratio of medians, with the range of per-repetition ratios.
            let ratios: Vec<f64> = times
                .iter()
                .zip(kernel.iter().map(time_per_work))
                .map(|(u, k)| u / k)
                .collect();
            let r = Summary::of(&ratios)?;
            Some(format!(
                "{:.2}x [{:.2}-{:.2}]",
                t.median / kt.median,
                r.min,
                r.max
            ))
        })
        .flatten()
        .unwrap_or_else(|| "-".into())
}

fn workload_table(name: &str, runs: &WorkloadRuns, host_cpus: u32) -> String {
    let mut out = format!(
        "\n== {name} (native P = {})\n",
        p_native(runs).map_or("?".into(), |p| format!("{p:.3}"))
    );
    out.push_str(&format!(
        "{:<8} {:<9} {:>5}  {:>18} {:>20} {:>8} {:>8} {:>7} {:>7} {:>7}  exits/s\n",
        "irqchip",
        "sync",
        "vCPUs",
        "ms/Mwork ±spread",
        "user/kernel [range]",
        "speedup",
        "eq. 5.1",
        "lapicµs",
        "wakeµs",
        "lock99"
    ));
    let p = p_native(runs);
    for (key, records) in &runs.vm {
        let times: Vec<f64> = records.iter().map(time_per_work).collect();
        let Some(t) = Summary::of(&times) else {
            continue;
        };
        let base_key = Key {
            vcpus: runs
                .vm
                .keys()
                .filter(|k| k.irqchip == key.irqchip && k.sync == key.sync)
                .map(|k| k.vcpus)
                .min()
                .unwrap_or(1),
            ..*key
        };
        let base = runs.vm.get(&base_key);
        let base_t = base
            .and_then(|b| Summary::of(&b.iter().map(time_per_work).collect::<Vec<_>>()))
            .map(|s| s.median);
        let speedup = base_t.map(|b| b / t.median * f64::from(base_key.vcpus));
        let projection = p.and_then(|p| {
            let base = base?;
            Some(
                AmdahlInputs {
                    p_native: p,
                    exit_handling_per_cpu: mean(base.iter().filter_map(exit_handling_per_cpu))?,
                    sync_share: mean(base.iter().map(sync_share))?,
                }
                .projected(f64::from(key.vcpus)),
            )
        });
        let vs_kernel = vs_kernel(runs, key, &times, &t);
        let over = if key.vcpus > host_cpus { "*" } else { "" };
        out.push_str(&format!(
            "{:<8} {:<9} {:>4}{:1}  {:>18} {:>20} {:>8} {:>8} {:>7} {:>7} {:>7}  {}\n",
            key.irqchip.to_string(),
            key.sync.to_string(),
            key.vcpus,
            over,
            fmt_summary(&Summary {
                median: t.median * 1e6,
                min: t.min * 1e6,
                max: t.max * 1e6,
                ..t
            }),
            vs_kernel,
            speedup.map_or("?".into(), |s| format!("{s:.2}x")),
            projection.map_or("?".into(), |s| format!("{s:.2}x")),
            median_us(records, lapic_p50),
            median_us(records, wake_p50),
            median_us(records, lock_p99),
            short_rates(&exit_rates(records)),
        ));
    }
    for (key, reason) in &runs.failed {
        out.push_str(&format!(
            "FAILED {} {} {} vCPUs: {reason}\n",
            key.irqchip, key.sync, key.vcpus,
        ));
    }
    out.push_str(
        "  * overcommitted: more vCPUs than host CPUs. user/kernel: ratio of median times per work \
         (range: per-repetition ratios); speedup: time per work at the fewest vCPUs over this one's, \
         times those vCPUs; eq. 5.1: projection from native P and the exit load at the fewest vCPUs; \
         lapicµs: p50 LAPIC access handling, wakeµs: p50 HLT wake-up, lock99: p99 global-lock wait \
         (medians over repetitions)\n",
    );
    out
}
