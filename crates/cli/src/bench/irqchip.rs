//! `smplab bench irqchip`: seed 004's Figure 5.x experiment on real workloads
//! (issue 11, "Measure"). The IPI-heavy shootdown-like and dedup-like profiles
//! and the HLT/wake-heavy ocean_ncp-like one run at 1, 2 and 3 vCPUs (3 is
//! overcommitted on a 2-CPU host) with threads = vCPUs, in every sync mode,
//! with KVM's in-kernel irqchip and with smplab-vmm's own (`--irqchip user`).
//!
//! Per configuration it prints the wall time per unit of work (median and
//! spread over the repetitions), exits per second by reason, the speedup over
//! 1 vCPU next to eq. 5.1's projection (`smplab_record::amdahl`, with P from
//! native runs of the same workload and the exit load measured at 1 vCPU, as
//! `metrics::Results::amdahl_inputs` does), and the ratio of each `user` time
//! to the `kernel` time of the same workload, mode and vCPUs in the same run.
//! Runs are interleaved by repetition so host load drifts hit all alike.

use smplab_analysis::metrics::{
    exit_counts, exit_handling_per_cpu, mean_wall_s, parallel_fraction, sync_share, work,
    AmdahlInputs, Summary,
};
use smplab_experiment::execute::{execute, RunLimits};
use smplab_record::config::{
    GuestSettings, Irqchip, NativeSettings, Placement, RunConfig, SyncMode, VmSettings,
};
use smplab_record::{exit, RunRecord};
use smplab_workload::Source;
use std::collections::BTreeMap;
use std::time::Duration;

/// `smplab bench ...`
#[derive(Debug, clap::Subcommand)]
pub enum BenchCmd {
    /// User-space vs in-kernel interrupt controllers under the four sync modes.
    Irqchip(IrqchipBenchArgs),
    /// Interrupt delivery latency by interrupt affinity under pCPU contention (issue 15).
    Io(crate::bench::io::IoBenchArgs),
}

/// Options of `smplab bench irqchip`.
#[derive(Debug, Clone, clap::Args)]
pub struct IrqchipBenchArgs {
    /// Workloads (built-in names or files).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "shootdown,dedup,ocean_ncp"
    )]
    pub workloads: Vec<String>,
    /// Scale of the workloads' work (small: this host's guest kernel mode is slow).
    #[arg(long, default_value_t = 0.05)]
    pub scale: f64,
    /// vCPU counts (threads = vCPUs); counts above the host's CPUs are marked
    /// overcommitted.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub vcpus: Vec<u32>,
    /// Sync modes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "global,iothread,hybrid,fine"
    )]
    pub sync: Vec<SyncMode>,
    /// Interrupt controllers to compare (`kernel` is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "kernel,user")]
    pub irqchip: Vec<Irqchip>,
    /// Repetitions of every configuration.
    #[arg(long, default_value_t = 3)]
    pub repetitions: u32,
    /// With --irqchip user: the VMM's halt-poll window in ns.
    #[arg(long, default_value_t = 0)]
    pub vmm_halt_poll_ns: u64,
    /// Per-run timeout in seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
}

/// `smplab bench <what>`: an exit status from `smplab_record::exit`.
pub fn bench(cmd: &BenchCmd) -> i32 {
    match cmd {
        BenchCmd::Irqchip(args) => match run_irqchip_bench(args) {
            Ok(table) => {
                print!("{table}");
                exit::OK
            }
            Err(status) => status,
        },
        BenchCmd::Io(args) => crate::bench::io::bench_io(args),
    }
}

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
    /// Per configuration, one record per repetition.
    vm: BTreeMap<Key, Vec<RunRecord>>,
    /// Failed runs by configuration, with the reason.
    failed: BTreeMap<Key, String>,
    /// Native time per work unit by thread count.
    native: BTreeMap<u32, Vec<f64>>,
}

fn time_per_work(r: &RunRecord) -> f64 {
    mean_wall_s(std::slice::from_ref(r)) / work(std::slice::from_ref(r))
}

fn host_cpus() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

fn run_irqchip_bench(args: &IrqchipBenchArgs) -> Result<String, i32> {
    let limits = RunLimits {
        timeout: Duration::from_secs(args.timeout.max(1)),
        ..RunLimits::default()
    };
    let mut out = String::new();
    let cpus = host_cpus();
    out.push_str(&format!(
        "smplab bench irqchip: scale {}, {} repetitions, host CPUs {cpus}, load average {}\n",
        args.scale,
        args.repetitions,
        load_average()
    ));
    for name in &args.workloads {
        let source = Source::resolve(name).map_err(|e| {
            eprintln!("smplab: {e}");
            exit::BAD_INPUT
        })?;
        let mut runs = WorkloadRuns::default();
        for rep in 0..args.repetitions {
            for &vcpus in &args.vcpus {
                let program = source.instantiate(Some(vcpus), args.scale).map_err(|e| {
                    eprintln!("smplab: {e}");
                    exit::BAD_INPUT
                })?;
                let info = source.workload_info(&program);
                let native = RunConfig::Native(NativeSettings {
                    placement: Placement::Float,
                    ..NativeSettings::default()
                });
                if let Ok(recs) = execute(&program, &info, &native, &limits) {
                    runs.native
                        .entry(vcpus)
                        .or_default()
                        .extend(recs.iter().map(time_per_work));
                }
                for &irqchip in &args.irqchip {
                    for &sync in &args.sync {
                        let key = Key {
                            irqchip,
                            sync,
                            vcpus,
                        };
                        let config = RunConfig::Vm(VmSettings {
                            irqchip,
                            vmm_halt_poll_ns: if irqchip == Irqchip::User {
                                args.vmm_halt_poll_ns
                            } else {
                                0
                            },
                            ..VmSettings::new(GuestSettings::new(vcpus), sync)
                        });
                        eprintln!("  {name} rep {}/{}: {}", rep + 1, args.repetitions, config);
                        match execute(&program, &info, &config, &limits) {
                            Ok(recs) => runs.vm.entry(key).or_default().extend(recs),
                            Err(e) => {
                                runs.failed.insert(key, e.to_string());
                            }
                        }
                    }
                }
            }
        }
        out.push_str(&table(name, &runs, cpus));
    }
    Ok(out)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
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
    Summary::of(&v).map_or("-".into(), |s| format!("{:.1}", s.median / 1e3))
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

fn table(name: &str, runs: &WorkloadRuns, host_cpus: u32) -> String {
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
            "FAILED {} {} {} vCPUs: {}\n",
            key.irqchip,
            key.sync,
            key.vcpus,
            reason.lines().next().unwrap_or("")
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(subcommand)]
        bench: BenchCmd,
    }

    #[test]
    fn flags_parse_into_typed_axes() {
        let c = Cmd::try_parse_from([
            "bench",
            "irqchip",
            "--sync",
            "global,hybrid",
            "--irqchip",
            "user",
            "--vcpus",
            "1,2",
        ])
        .expect("parses");
        let BenchCmd::Irqchip(a) = c.bench else {
            panic!("parsed as another bench: {:?}", c.bench)
        };
        assert_eq!(a.sync, vec![SyncMode::Global, SyncMode::Hybrid]);
        assert_eq!(a.irqchip, vec![Irqchip::User]);
        assert_eq!(a.vcpus, vec![1, 2]);
        assert_eq!(a.workloads, vec!["shootdown", "dedup", "ocean_ncp"]);
        assert!(Cmd::try_parse_from(["bench", "irqchip", "--irqchip", "usr"]).is_err());
    }
}
