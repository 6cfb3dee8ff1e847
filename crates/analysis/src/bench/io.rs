//! The view of `smplab bench io` (built-in spec `bench-io`): the
//! interrupt-affinity question of Kulkarni & Kulkarni, "Benchmarking
//! Multiprocessing Parameters in a Virtualized Multi-Core Environment", on
//! real KVM. Per vCPU count and interrupt affinity: the guest-measured
//! interrupt latency (device completion → the guest handler's first
//! instruction, the record's `io.irq_latency`) at p50 and p99 and the
//! completion → thread running latency, each as the median over repetitions
//! with its 95% interval, and the ratio to vCPU 0 (the baseline: where a
//! guest without irqbalance routes every interrupt) taken per repetition, so
//! host load drifts hit both sides of a ratio alike.

use super::failure;
use smplab_experiment::store::Entry;
use smplab_record::config::{IrqAffinity, RunConfig};
use smplab_record::RunRecord;
use smplab_stats::MedianCi;
use std::collections::BTreeMap;

/// One configuration: vCPUs and the affinity's printed form.
type Key = (u32, String);

/// Per repetition, the figures of its run (`None`: failed or no interrupts).
type Reps = BTreeMap<u32, Option<Figures>>;

/// The figures one run gives, in µs.
#[derive(Debug, Clone, Copy)]
struct Figures {
    irq_p50: f64,
    irq_p99: f64,
    wake_p50: f64,
}

fn figures(r: &RunRecord) -> Option<Figures> {
    let io = r.io.as_ref()?;
    (io.irq_latency.count > 0).then(|| Figures {
        irq_p50: io.irq_latency.p50_ns as f64 / 1e3,
        irq_p99: io.irq_latency.p99_ns as f64 / 1e3,
        wake_p50: io.wake_latency.p50_ns as f64 / 1e3,
    })
}

fn baseline() -> String {
    IrqAffinity::default().to_string()
}

/// Per repetition, `figure` of `key` over `figure` of the same vCPUs' vCPU 0
/// run of the same repetition.
fn ratios(points: &BTreeMap<Key, Reps>, key: &Key, figure: fn(&Figures) -> f64) -> Vec<f64> {
    let base = points.get(&(key.0, baseline()));
    let (Some(base), Some(these)) = (base, points.get(key)) else {
        return Vec::new();
    };
    these
        .iter()
        .filter_map(|(rep, t)| Some((base.get(rep)?.as_ref()?, t.as_ref()?)))
        .map(|(b, t)| figure(t) / figure(b))
        .filter(|r| r.is_finite())
        .collect()
}

fn irq_p50(p: &Figures) -> f64 {
    p.irq_p50
}
fn irq_p99(p: &Figures) -> f64 {
    p.irq_p99
}
fn wake_p50(p: &Figures) -> f64 {
    p.wake_p50
}

fn ci(values: &[f64], digits: usize) -> String {
    MedianCi::of(values).map_or("-".into(), |c| c.display(digits))
}

/// The bench's table over its stored entries; `target` is the relative
/// half-width of a ratio's 95% interval that counts as narrow.
pub fn table(entries: &[&Entry], target: f64) -> String {
    let mut points: BTreeMap<Key, Reps> = BTreeMap::new();
    let mut last_irqs: BTreeMap<Key, (u32, Vec<u64>)> = BTreeMap::new();
    let mut failures: BTreeMap<Key, (u32, String)> = BTreeMap::new();
    let mut reps = 0;
    for e in entries {
        let RunConfig::Vm(v) = &e.point.config else {
            continue;
        };
        let key = (v.guest.vcpus, v.guest.irq_affinity.to_string());
        let rep = e.point.rep;
        reps = reps.max(rep + 1);
        let first = e.records.first();
        if let Some(io) = first.and_then(|r| r.io.as_ref()) {
            let last = last_irqs.entry(key.clone()).or_default();
            if rep >= last.0 {
                *last = (rep, io.irqs_per_cpu.clone());
            }
        }
        if let Some(why) = failure(e) {
            let f = failures.entry(key.clone()).or_default();
            if rep >= f.0 {
                *f = (rep, why);
            }
        }
        let got = if e.is_ok() {
            first.and_then(figures)
        } else {
            None
        };
        points.entry(key).or_default().insert(rep, got);
    }
    let mut out = match entries.iter().find_map(|e| match &e.point.config {
        RunConfig::Vm(v) => Some((e, v)),
        _ => None,
    }) {
        Some((e, v)) => format!(
            "smplab bench io: {} n={} scale {}, irqchip {}, pin {}, {} busy host threads, \
             io thread CPUs {}, {reps} repetitions (target ±{:.0}%)\n",
            e.point.workload,
            e.point.threads,
            e.point.scale,
            v.irqchip.as_str(),
            v.guest.placement,
            e.point.busy_host_threads,
            v.guest.io_thread_cpus,
            target * 100.0,
        ),
        None => "smplab bench io: no runs stored\n".to_string(),
    };
    out.push_str(
        "latencies in µs: median [95% interval] over repetitions; ratios to vcpu:0 per repetition\n",
    );
    out.push_str(&format!(
        "{:>5} {:>9} {:>26} {:>26} {:>26} {:>22} {:>22} {:>7} irqs/vCPU (last)\n",
        "vcpus", "affinity", "irq p50", "irq p99", "wake p50", "p50 ratio", "p99 ratio", "narrow"
    ));
    for (key, runs) in &points {
        let got: Vec<Figures> = runs.values().flatten().copied().collect();
        let col = |f: fn(&Figures) -> f64| ci(&got.iter().map(f).collect::<Vec<_>>(), 0);
        let is_base = key.1 == baseline();
        let r50 = ratios(&points, key, irq_p50);
        let r99 = ratios(&points, key, irq_p99);
        let narrow = is_base
            || [&r50, &r99]
                .iter()
                .all(|r| MedianCi::of(r).is_some_and(|c| c.is_narrow(target)));
        out.push_str(&format!(
            "{:>5} {:>9} {:>26} {:>26} {:>26} {:>22} {:>22} {:>7} {:?}\n",
            key.0,
            key.1,
            col(irq_p50),
            col(irq_p99),
            col(wake_p50),
            if is_base { "1".into() } else { ci(&r50, 2) },
            if is_base { "1".into() } else { ci(&r99, 2) },
            if narrow { "yes" } else { "no" },
            last_irqs.get(key).map(|l| l.1.clone()).unwrap_or_default(),
        ));
        if let Some((_, e)) = failures.get(key) {
            out.push_str(&format!("      last failure: {e}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_pair_each_repetition_with_its_own_baseline() {
        let p = |us: f64| {
            Some(Figures {
                irq_p50: us,
                irq_p99: 10.0 * us,
                wake_p50: 2.0 * us,
            })
        };
        let reps = |v: Vec<Option<Figures>>| -> Reps { (0..).zip(v).collect() };
        let mut points: BTreeMap<Key, Reps> = BTreeMap::new();
        points.insert((2, "0".into()), reps(vec![p(100.0), p(200.0), None]));
        points.insert((2, "1".into()), reps(vec![p(50.0), p(100.0), p(1.0)]));
        points.insert((3, "1".into()), reps(vec![p(50.0)]));
        assert_eq!(ratios(&points, &(2, "1".into()), irq_p50), vec![0.5, 0.5]);
        assert_eq!(ratios(&points, &(2, "1".into()), irq_p99), vec![0.5, 0.5]);
        // No vCPU-0 run at 3 vCPUs: no ratio.
        assert!(ratios(&points, &(3, "1".into()), irq_p50).is_empty());
        // A repetition missing on one side is not paired with another one.
        points.insert(
            (2, "balanced".into()),
            [(1, p(100.0))].into_iter().collect(),
        );
        assert_eq!(ratios(&points, &(2, "balanced".into()), irq_p50), vec![0.5]);
    }
}
