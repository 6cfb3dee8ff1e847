//! `smplab host bench`: the weighted speedup of two 2-vCPU VMs sharing the
//! host CPUs, for every policy against `linux`, on the spinlock-like,
//! streamcluster-like and dedup-like profiles (docs/host.md), beside the
//! simulator's figure for the same configuration.
//!
//! The points (built-in spec `bench-host` at the default flags: per
//! workload and policy, one VM alone and both VMs together, on smplab-vmm
//! under the policy and in the simulator) run through the one execute path
//! into a results store, so a rerun resumes and `smplab lab report` reads
//! it; the table is the view `smplab_analysis::bench::host` of the store.

use crate::bench::HostCpus;
use clap::Args;
use smplab_analysis::bench::host::{cells, sim_policy, table};
use smplab_experiment::point::Point;
use smplab_experiment::runner::real::RealRunner;
use smplab_experiment::runner::Runner;
use smplab_record::config::{
    GuestSettings, HostPolicy, Placement, RunConfig, SimSettings, SyncMode, Timeout, VmSettings,
};
use smplab_record::{exit, out, outln};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Workloads (built-in names or files).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "spinlock,streamcluster,dedup"
    )]
    pub workloads: Vec<String>,
    /// Policies besides `linux` (always measured: the baseline).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fair:4ms,gang:4ms,partition,spin:4ms,fair:4ms+safepoint:1ms"
    )]
    pub policies: Vec<HostPolicy>,
    /// Workload scale (small: guest runs are slow here).
    #[arg(long, default_value_t = 0.05)]
    pub scale: f64,
    /// Workload threads per VM (default: 2, one per vCPU).
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Repetitions (the spread is their min..max).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub reps: u32,
    /// Host CPUs the VMs share (the simulator's VMs are confined to the same).
    #[arg(long, default_value = "0-1")]
    pub host_cpus: HostCpus,
    /// Simulator platform profile for the `sim` column: a built-in name or a
    /// profile file (e.g. the one `smplab calibrate` wrote for this host).
    #[arg(long, default_value = smplab_record::config::DEFAULT_PLATFORM)]
    pub platform: String,
    /// Time limit of one run (`240s`, `500ms`; a bare number is seconds).
    #[arg(long, default_value = "240s")]
    pub timeout: Timeout,
    /// Write every figure as JSON here.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Results store (resumed when it exists).
    #[arg(long, default_value = "lab-results/bench-host/results.jsonl")]
    pub store: PathBuf,
}

/// vCPUs of each VM.
const VCPUS: u32 = 2;

/// `linux` (the baseline) first, then the others, each once.
fn policies(args: &BenchArgs) -> Vec<HostPolicy> {
    let mut out = vec![HostPolicy::parse("linux").unwrap_or_default()];
    for p in &args.policies {
        if !out.contains(p) {
            out.push(*p);
        }
    }
    out
}

/// The bench's configurations, workload by workload and policy by policy:
/// one VM alone and two together on smplab-vmm under the policy, then the
/// same in the simulator (its `fair` for `linux`).
pub fn configs(args: &BenchArgs) -> Vec<Point> {
    let placement = Placement::Cpus(args.host_cpus.0.clone());
    // The simulator's host has as many pCPUs as vCPUs of one VM unless the
    // list names higher CPUs.
    let max_cpu = args.host_cpus.0.iter().copied().max().unwrap_or(0);
    let pcpus = u32::try_from(max_cpu + 1).ok().filter(|&n| n > VCPUS);
    let mut out: Vec<Point> = Vec::new();
    for w in &args.workloads {
        for policy in policies(args) {
            let mut configs = Vec::new();
            for vms in [1, 2] {
                let guest = GuestSettings {
                    placement: placement.clone(),
                    vms,
                    ..GuestSettings::new(VCPUS)
                };
                configs.push(RunConfig::Vm(VmSettings {
                    host_policy: Some(policy),
                    ..VmSettings::new(guest, SyncMode::default())
                }));
            }
            for vms in [1, 2] {
                let mut s = SimSettings::new(VCPUS, args.platform.clone());
                s.vms = vms;
                s.placement = placement.clone();
                s.pcpus = pcpus;
                s.policy = sim_policy(policy);
                configs.push(RunConfig::Sim(s));
            }
            for config in configs {
                let mut p = Point::new(w.clone(), args.threads, args.scale, config);
                p.timeout_s = args.timeout.duration().as_secs().max(1);
                if !out.iter().any(|q| q.key() == p.key()) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// Run the bench; the process exit status.
pub fn bench(args: &BenchArgs) -> i32 {
    bench_with(args, &RealRunner::default())
}

/// Run the bench's points the store lacks with `runner`, print the view.
pub fn bench_with(args: &BenchArgs, runner: &dyn Runner) -> i32 {
    for w in &args.workloads {
        if let Err(e) = smplab_workload::Source::resolve(w) {
            exit::report_error(&e);
            return exit::BAD_INPUT;
        }
    }
    if let Err(e) = smplab_sim::Platform::resolve(&args.platform) {
        exit::report_error(format!("--platform: {e}"));
        return exit::BAD_INPUT;
    }
    let configs = configs(args);
    for p in &configs {
        if let Err(errs) = p.config.validate(None) {
            for e in errs {
                exit::report_error(format!("{}: {e}", p.label()));
            }
            return exit::BAD_INPUT;
        }
    }
    let points = crate::bench::repeat(&configs, args.reps);
    let (store, summary) = match crate::bench::run_into_store(&points, &args.store, runner, None) {
        Ok(s) => s,
        Err(status) => return status,
    };
    outln!(
        "{} points: {} already done, {} ok, {} failed, {} skipped (store {})",
        summary.total,
        summary.already_done,
        summary.ok,
        summary.failed,
        summary.skipped,
        args.store.display()
    );
    let cells = cells(&crate::bench::entries_of(&store, &configs));
    out!("{}", table(&cells));
    if let Some(path) = &args.output {
        let json = match serde_json::to_string_pretty(&cells) {
            Ok(j) => j,
            Err(e) => {
                exit::report_error(format!("cannot encode the cells: {e}"));
                return exit::INTERNAL;
            }
        };
        if let Err(e) = std::fs::write(path, json) {
            exit::report_error(format!("cannot write {}: {e}", path.display()));
            return exit::RUN_FAILED;
        }
    }
    if summary.failed + summary.skipped > 0 || cells.iter().any(|c| !c.failures.is_empty()) {
        exit::PARTIAL
    } else {
        exit::OK
    }
}
