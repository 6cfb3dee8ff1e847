//! `smplab bench io`: seed 001's interrupt-affinity question on real KVM
//! (issue 15, "Measure"). An I/O-heavy profile (`oltp` by default) runs on
//! smplab-vmm at 2 and 3 vCPUs (3 is overcommitted on a 2-CPU host), vCPU i
//! pinned to host CPU i mod 2, with extra busy host threads for pCPU
//! contention, under each interrupt affinity (`0`, `1`, `balanced`, ...).
//!
//! Per vCPU count and affinity it prints the guest-measured interrupt
//! latency (device completion → the guest handler's first instruction, the
//! record's `io.irq_latency`) at p50 and p99 and the completion → thread
//! running latency, each as the median over repetitions with its 95%
//! interval, and the ratio to `vcpu:0` (the baseline: where a guest without
//! irqbalance routes every interrupt) taken per repetition, so host load
//! drifts hit both sides of a ratio alike. Repetitions interleave every
//! configuration and continue until every ratio's interval is within
//! `--target` of its median or `--max-repetitions` is reached; the table says
//! which.

use smplab_experiment::execute::{execute, RunLimits};
use smplab_record::config::{
    GuestSettings, IoThreadCpus, IrqAffinity, Irqchip, Placement, RunConfig, SyncMode, VmSettings,
};
use smplab_record::{exit, RunRecord};
use smplab_stats::MedianCi;
use smplab_workload::Source;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Options of `smplab bench io`.
#[derive(Debug, Clone, clap::Args)]
pub struct IoBenchArgs {
    /// Workload (a built-in name or a file) with `io` ops.
    #[arg(long, default_value = "oltp")]
    pub workload: String,
    /// Workload threads (`n`).
    #[arg(long, default_value_t = 4)]
    pub threads: u32,
    /// Scale of the workload's work.
    #[arg(long, default_value_t = 0.3)]
    pub scale: f64,
    /// vCPU counts.
    #[arg(long, value_delimiter = ',', default_value = "2,3")]
    pub vcpus: Vec<u32>,
    /// Interrupt affinities, `;`-separated (`0` is the baseline and always run).
    #[arg(long, value_delimiter = ';', default_value = "0;1;balanced")]
    pub affinity: Vec<IrqAffinity>,
    /// Interrupt controllers: KVM's (`kernel`) or smplab-vmm's (`user`).
    #[arg(long, default_value = "kernel")]
    pub irqchip: Irqchip,
    /// Host CPUs of the block device's completion thread (`none`: floating).
    #[arg(long, default_value = "none")]
    pub io_thread_cpus: IoThreadCpus,
    /// Busy host threads (floating) competing with the vCPUs for the pCPUs.
    #[arg(long, default_value_t = 1)]
    pub hogs: u32,
    /// Repetitions before the intervals are looked at.
    #[arg(long, default_value_t = 6)]
    pub min_repetitions: u32,
    /// Most repetitions.
    #[arg(long, default_value_t = 20)]
    pub max_repetitions: u32,
    /// Stop once every ratio's 95% interval is within ± this fraction of its median.
    #[arg(long, default_value_t = 0.1)]
    pub target: f64,
    /// Per-run timeout in seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
}

/// One configuration: vCPUs and the affinity's printed form.
type Key = (u32, String);

/// The figures one run gives, in µs.
#[derive(Debug, Clone, Copy)]
struct Point {
    irq_p50: f64,
    irq_p99: f64,
    wake_p50: f64,
}

fn point(r: &RunRecord) -> Option<Point> {
    let io = r.io.as_ref()?;
    (io.irq_latency.count > 0).then(|| Point {
        irq_p50: io.irq_latency.p50_ns as f64 / 1e3,
        irq_p99: io.irq_latency.p99_ns as f64 / 1e3,
        wake_p50: io.wake_latency.p50_ns as f64 / 1e3,
    })
}

/// Busy host threads, stopped on drop.
struct Hogs {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hogs {
    fn start(n: u32) -> Hogs {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .filter_map(|i| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("smplab-hog-{i}"))
                    .spawn(move || {
                        let mut x = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            x = std::hint::black_box(x.wrapping_mul(6364136223846793005) + 1);
                        }
                    })
                    .ok()
            })
            .collect();
        Hogs { stop, threads }
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// `smplab bench io`: prints the table; an exit status from `smplab_record::exit`.
pub fn bench_io(args: &IoBenchArgs) -> i32 {
    match run(args) {
        Ok(table) => {
            print!("{table}");
            exit::OK
        }
        Err(status) => status,
    }
}

fn config(args: &IoBenchArgs, vcpus: u32, affinity: &IrqAffinity) -> RunConfig {
    let guest = GuestSettings {
        placement: Placement::Spread,
        irq_affinity: affinity.clone(),
        io_thread_cpus: args.io_thread_cpus.clone(),
        ..GuestSettings::new(vcpus)
    };
    RunConfig::Vm(VmSettings {
        irqchip: args.irqchip,
        ..VmSettings::new(guest, SyncMode::Fine)
    })
}

fn run(args: &IoBenchArgs) -> Result<String, i32> {
    let source = Source::resolve(&args.workload).map_err(|e| {
        eprintln!("smplab: {e}");
        exit::BAD_INPUT
    })?;
    let program = source
        .instantiate(Some(args.threads), args.scale)
        .map_err(|e| {
            eprintln!("smplab: {e}");
            exit::BAD_INPUT
        })?;
    if !program.uses_io() {
        eprintln!(
            "smplab: {} has no io ops: nothing to measure",
            args.workload
        );
        return Err(exit::BAD_INPUT);
    }
    let info = source.workload_info(&program);
    let limits = RunLimits {
        timeout: Duration::from_secs(args.timeout.max(1)),
        ..RunLimits::default()
    };
    let baseline = IrqAffinity::default();
    let mut affinities = vec![baseline.clone()];
    affinities.extend(args.affinity.iter().filter(|a| **a != baseline).cloned());
    let mut points: BTreeMap<Key, Vec<Option<Point>>> = BTreeMap::new();
    let mut last_irqs: BTreeMap<Key, Vec<u64>> = BTreeMap::new();
    let mut failures: BTreeMap<Key, String> = BTreeMap::new();
    let hogs = Hogs::start(args.hogs);
    let mut reps = 0;
    while reps < args.max_repetitions.max(1) {
        for &vcpus in &args.vcpus {
            for affinity in &affinities {
                let key = (vcpus, affinity.to_string());
                let cfg = config(args, vcpus, affinity);
                eprintln!("  rep {}: {cfg}", reps + 1);
                let p = match execute(&program, &info, &cfg, &limits) {
                    Ok(recs) => {
                        if let Some(io) = recs.first().and_then(|r| r.io.as_ref()) {
                            last_irqs.insert(key.clone(), io.irqs_per_cpu.clone());
                        }
                        recs.first().and_then(point)
                    }
                    Err(e) => {
                        failures.insert(key.clone(), e.to_string());
                        None
                    }
                };
                points.entry(key).or_default().push(p);
            }
        }
        reps += 1;
        if reps >= args.min_repetitions && all_narrow(&points, args.target) {
            break;
        }
    }
    drop(hogs);
    Ok(table(
        args,
        &program.name,
        reps,
        &points,
        &last_irqs,
        &failures,
    ))
}

/// Per repetition, `figure` of `key` over `figure` of the same vCPUs' vCPU 0 run.
fn ratios(
    points: &BTreeMap<Key, Vec<Option<Point>>>,
    key: &Key,
    figure: fn(&Point) -> f64,
) -> Vec<f64> {
    let base = points.get(&(key.0, IrqAffinity::default().to_string()));
    let (Some(base), Some(these)) = (base, points.get(key)) else {
        return Vec::new();
    };
    base.iter()
        .zip(these)
        .filter_map(|(b, t)| Some((b.as_ref()?, t.as_ref()?)))
        .map(|(b, t)| figure(t) / figure(b))
        .filter(|r| r.is_finite())
        .collect()
}

fn all_narrow(points: &BTreeMap<Key, Vec<Option<Point>>>, target: f64) -> bool {
    points
        .keys()
        .filter(|k| k.1 != IrqAffinity::default().to_string())
        .all(|k| {
            [irq_p50 as fn(&Point) -> f64, irq_p99]
                .iter()
                .all(|f| MedianCi::of(&ratios(points, k, *f)).is_some_and(|c| c.is_narrow(target)))
        })
}

fn irq_p50(p: &Point) -> f64 {
    p.irq_p50
}
fn irq_p99(p: &Point) -> f64 {
    p.irq_p99
}
fn wake_p50(p: &Point) -> f64 {
    p.wake_p50
}

fn ci(values: &[f64], digits: usize) -> String {
    MedianCi::of(values).map_or("-".into(), |c| c.display(digits))
}

fn table(
    args: &IoBenchArgs,
    name: &str,
    reps: u32,
    points: &BTreeMap<Key, Vec<Option<Point>>>,
    last_irqs: &BTreeMap<Key, Vec<u64>>,
    failures: &BTreeMap<Key, String>,
) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = format!(
        "smplab bench io: {name} n={} scale {}, irqchip {}, vCPU i on host CPU i mod {cores}, \
         {} busy host threads, io thread CPUs {}, {reps} repetitions (target ±{:.0}%)\n\
         latencies in µs: median [95% interval] over repetitions; ratios to vcpu:0 per repetition\n",
        args.threads,
        args.scale,
        args.irqchip.as_str(),
        args.hogs,
        args.io_thread_cpus,
        args.target * 100.0,
    );
    out.push_str(&format!(
        "{:>5} {:>9} {:>26} {:>26} {:>26} {:>22} {:>22} {:>7} irqs/vCPU (last)\n",
        "vcpus", "affinity", "irq p50", "irq p99", "wake p50", "p50 ratio", "p99 ratio", "narrow"
    ));
    for (key, runs) in points {
        let got: Vec<Point> = runs.iter().flatten().copied().collect();
        let col = |f: fn(&Point) -> f64| ci(&got.iter().map(f).collect::<Vec<_>>(), 0);
        let is_base = key.1 == IrqAffinity::default().to_string();
        let r50 = ratios(points, key, irq_p50);
        let r99 = ratios(points, key, irq_p99);
        let narrow = is_base
            || [&r50, &r99]
                .iter()
                .all(|r| MedianCi::of(r).is_some_and(|c| c.is_narrow(args.target)));
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
            last_irqs.get(key).cloned().unwrap_or_default(),
        ));
        if let Some(e) = failures.get(key) {
            out.push_str(&format!("      last failure: {e}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cmd {
        #[command(subcommand)]
        bench: crate::bench::irqchip::BenchCmd,
    }

    #[test]
    fn flags_parse_into_typed_settings() {
        let c = Cmd::try_parse_from([
            "bench",
            "io",
            "--affinity",
            "1;0,2;balanced",
            "--vcpus",
            "3",
            "--irqchip",
            "user",
            "--io-thread-cpus",
            "1",
        ])
        .expect("parses");
        let crate::bench::irqchip::BenchCmd::Io(a) = c.bench else {
            panic!("parsed as another bench: {:?}", c.bench)
        };
        assert_eq!(
            a.affinity,
            vec![
                IrqAffinity::Vcpus(vec![1]),
                IrqAffinity::Vcpus(vec![0, 2]),
                IrqAffinity::Balanced
            ]
        );
        assert_eq!((&a.vcpus, a.irqchip), (&vec![3], Irqchip::User));
        assert_eq!(a.io_thread_cpus, IoThreadCpus(vec![1]));
        assert!(Cmd::try_parse_from(["bench", "io", "--affinity", "everywhere"]).is_err());
        let cfg = config(&a, 3, &IrqAffinity::Balanced);
        assert_eq!(cfg.irq_affinity(), Some(&IrqAffinity::Balanced));
        assert!(cfg.validate(Some(4)).is_ok(), "{cfg}");
    }

    #[test]
    fn ratios_pair_each_repetition_with_its_own_baseline() {
        let p = |us: f64| {
            Some(Point {
                irq_p50: us,
                irq_p99: 10.0 * us,
                wake_p50: 2.0 * us,
            })
        };
        let mut points: BTreeMap<Key, Vec<Option<Point>>> = BTreeMap::new();
        points.insert((2, "0".into()), vec![p(100.0), p(200.0), None]);
        points.insert((2, "1".into()), vec![p(50.0), p(100.0), p(1.0)]);
        points.insert((3, "1".into()), vec![p(50.0)]);
        assert_eq!(ratios(&points, &(2, "1".into()), irq_p50), vec![0.5, 0.5]);
        assert_eq!(ratios(&points, &(2, "1".into()), irq_p99), vec![0.5, 0.5]);
        // No vCPU-0 run at 3 vCPUs: no ratio.
        assert!(ratios(&points, &(3, "1".into()), irq_p50).is_empty());
        // Two samples never reach 95% coverage.
        assert!(!all_narrow(&points, 0.5));
    }
}
