//! Command-line arguments and entry points for `smplab lab`, `smplab
//! diagnose`, `smplab calibrate` and `smplab demo`. The `smplab` binary (crate
//! smplab-cli) flattens these into its subcommands; each entry point returns a
//! process exit status from `smplab_record::exit`.

use clap::{Args, Subcommand};
use smplab_experiment::runner::real::RealRunner;
use smplab_experiment::slurm;
use smplab_experiment::store::Store;
use smplab_experiment::sweep::{print_summary, run_points_with, run_repeated_with, SweepOptions};
use smplab_record::config::{Timeout, DEFAULT_PLATFORM, DEFAULT_TIMEOUT};
use smplab_record::exit::{self, report_error};
use smplab_record::interference::StealThreshold;
use smplab_record::Executor;
use smplab_record::{out, outln};
use smplab_report::{write_report, ReportOptions};
use std::path::{Path, PathBuf};

pub mod real;

/// `smplab lab ...`: experiment sweeps and reports.
#[derive(Debug, Clone, Args)]
pub struct LabArgs {
    #[command(subcommand)]
    pub command: LabCommand,
}

#[derive(Debug, Clone, Subcommand)]
pub enum LabCommand {
    /// Run an experiment spec (TOML), storing each result as it completes;
    /// rerunning resumes where an interrupted sweep stopped.
    Run(LabRunArgs),
    /// Write the HTML report (inline SVG) and CSV exports of a results store.
    Report(LabReportArgs),
    /// Show how many points of a spec are done, failed, skipped or pending
    /// (and, after `run --slurm`, queued, running or lost in Slurm).
    Status(LabStatusArgs),
    /// Run some points of a spec into per-point result files: what a Slurm
    /// array task of `lab run --slurm` runs.
    RunPoint(RunPointArgs),
    /// Real programs (pigz, xz, zstd, sort) natively, in Linux guests on
    /// smplab-vmm and QEMU, beside their traced models (vm, sim): the real
    /// slowdown next to the model's (docs/lab.md, "Real programs").
    Real(real::LabRealArgs),
}

#[derive(Debug, Clone, Args)]
pub struct LabRunArgs {
    /// The experiment spec (format: docs/lab.md), or a built-in spec's name
    /// (`seed001-matrix`).
    pub spec: PathBuf,
    /// Results store (JSON lines). Default: lab-results/NAME/results.jsonl.
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Also redo points stored as failed.
    #[arg(long)]
    pub retry_failed: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Write the report next to the store when the sweep ends.
    #[arg(long)]
    pub report: bool,
    /// QEMU binary for `qemu` points.
    #[arg(long)]
    pub qemu: Option<PathBuf>,
    /// Steal threshold: a repetition whose hypervisor steal exceeds this
    /// share of its CPU time is flagged, left out and run again (a budget of
    /// one rerun per point); 1 keeps every repetition.
    #[arg(long, default_value_t = StealThreshold::default())]
    pub steal_threshold: StealThreshold,
    #[command(flatten)]
    pub slurm: SlurmArgs,
}

#[derive(Debug, Clone, Args)]
pub struct LabReportArgs {
    /// Results store to report on (a results.jsonl file, or a directory
    /// holding one); give --store again to merge several into one report (a
    /// point in more than one counts once: the last store given wins).
    #[arg(long, required = true)]
    pub store: Vec<PathBuf>,
    /// Output directory. Default: `report/` next to the first store.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Page title.
    #[arg(long)]
    pub title: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct LabStatusArgs {
    pub spec: PathBuf,
    #[arg(long)]
    pub store: Option<PathBuf>,
}

/// Where a diagnosis runs: smplab-vmm (measured) or the simulator.
fn diagnose_executor(s: &str) -> Result<Executor, String> {
    match s.parse::<Executor>().map_err(|e| e.to_string())? {
        e @ (Executor::Vm | Executor::Sim) => Ok(e),
        e => Err(format!(
            "diagnose runs on vm (measured) or sim (modelled), not {e}"
        )),
    }
}

/// Default repetitions of a diagnosis: the fewest pairs whose ratio has a
/// 95% interval (`smplab_stats::MIN_SAMPLES_FOR_95`).
pub const DIAGNOSE_REPS: u32 = 6;

/// `smplab diagnose`: Ding & Shan's remove-one-factor-at-a-time diagnosis.
#[derive(Debug, Clone, Args)]
pub struct DiagnoseArgs {
    /// Built-in profile name or workload file.
    #[arg(long)]
    pub workload: String,
    /// Where to diagnose: `vm` (smplab-vmm, measured) or `sim` (the simulator,
    /// which can also switch PLE and APIC virtualization).
    #[arg(long, default_value = "vm", value_parser = diagnose_executor)]
    pub executor: Executor,
    /// vCPUs (and threads). Default: 2 for vm (this host's cores), 16 for sim.
    #[arg(long)]
    pub vcpus: Option<u32>,
    /// VMs running the workload at once (Ding & Shan §IV-D diagnoses the
    /// overcommitted case, where user-space spinning hurts most).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub vms: u32,
    /// Workload scale.
    #[arg(long, default_value_t = 0.1)]
    pub scale: f64,
    /// Repetitions of every configuration, interleaved (the order reversed
    /// every other repetition). 6 is the fewest whose paired ratios have a 95%
    /// interval: with fewer, nothing is credited and the table warns.
    #[arg(long, default_value_t = DIAGNOSE_REPS)]
    pub reps: u32,
    /// Simulator platform profile (built-in name or file).
    #[arg(long, default_value = DEFAULT_PLATFORM)]
    pub platform: String,
    /// Per-run time limit: 30s, 500ms, or a number of seconds (whole seconds:
    /// the diagnosis's points keep them in the store).
    #[arg(long, default_value_t = DEFAULT_TIMEOUT)]
    pub timeout: Timeout,
    /// Results store. Default: lab-results/diagnose-WORKLOAD-EXECUTOR/results.jsonl.
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Steal threshold: a repetition whose hypervisor steal exceeds this
    /// share of its CPU time is flagged, left out and run again (a budget of
    /// one rerun per point); 1 keeps every repetition.
    #[arg(long, default_value_t = StealThreshold::default())]
    pub steal_threshold: StealThreshold,
}

/// Default most repetitions of a calibration's configuration.
pub const CALIBRATE_MAX_REPS: u32 = 8;

/// `smplab calibrate`: measure this host and write a simulator platform profile.
#[derive(Debug, Clone, Args)]
pub struct CalibrateArgs {
    /// Where to write the profile.
    #[arg(long, short, default_value = "lab-results/calibrated.toml")]
    pub output: PathBuf,
    /// Most repetitions of a micro-run or held-out configuration: each runs
    /// at least 6 times (or this many if fewer) and is repeated until the
    /// 95% interval of its median wall time is within ±5% of the median, or
    /// this many runs.
    #[arg(long = "max-reps", default_value_t = CALIBRATE_MAX_REPS)]
    pub reps: u32,
    /// Workload scale of the micro-runs (the held-out runs use half of it).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Results store for the probe runs.
    #[arg(long, default_value = "lab-results/calibrate/results.jsonl")]
    pub store: PathBuf,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Also predict the held-out set with this profile (a built-in name or
    /// a file, e.g. an earlier calibration) and print its errors.
    #[arg(long)]
    pub compare: Option<String>,
}

/// `smplab demo`: a small study end to end.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Output directory (store, report, calibrated profile).
    #[arg(long, short, default_value = "smplab-demo")]
    pub output: PathBuf,
    /// Most repetitions of a configuration: each runs at least 6 times (or
    /// this many if fewer) and is repeated until the 95% interval of its
    /// median wall time is within ±5% of the median, or this many runs.
    #[arg(long = "max-reps", default_value_t = crate::demo::DEFAULT_MAX_REPS)]
    pub reps: u32,
    /// Workload scale.
    #[arg(long, default_value_t = crate::demo::DEFAULT_SCALE)]
    pub scale: f64,
    /// Start from scratch instead of resuming an earlier demo in --out.
    #[arg(long)]
    pub fresh: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Steal threshold: a repetition whose hypervisor steal exceeds this
    /// share of its CPU time is flagged, left out and run again (a budget of
    /// one rerun per point); 1 keeps every repetition.
    #[arg(long, default_value_t = StealThreshold::default())]
    pub steal_threshold: StealThreshold,
}

/// `lab run` options for submitting to Slurm instead of running here.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SlurmArgs {
    /// Submit the points without a result as a Slurm job array instead of
    /// running them here (docs/slurm.md).
    #[arg(long)]
    pub slurm: bool,
    /// Slurm partition (default: the cluster's default partition).
    #[arg(long, requires = "slurm")]
    pub partition: Option<String>,
    /// At most this many array tasks run at once (`--array=0-N%K`).
    #[arg(long, requires = "slurm", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_parallel: Option<u32>,
    /// Whole nodes per task (`sbatch --exclusive`): quiet hosts for timings.
    #[arg(long, requires = "slurm")]
    pub exclusive: bool,
    /// Simulator points per array task. Default: as many as take
    /// --task-seconds by the measured cost of one point.
    #[arg(long, requires = "slurm", value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: Option<u32>,
    /// Target run time of one array task of simulator points, seconds.
    #[arg(long, requires = "slurm", default_value_t = slurm::DEFAULT_TASK_SECONDS)]
    pub task_seconds: f64,
    /// Time limit of one array task (`sbatch --time`, e.g. `30` or `2:00:00`).
    /// Default: the partition's.
    #[arg(long, requires = "slurm")]
    pub time: Option<String>,
    /// The smplab binary array tasks run (must accept `lab run-point`).
    /// Default: this one.
    #[arg(long, requires = "slurm")]
    pub smplab_bin: Option<PathBuf>,
}

/// `smplab lab run-point`: what one array task runs.
#[derive(Debug, Clone, clap::Args)]
pub struct RunPointArgs {
    /// The experiment spec.
    pub spec: PathBuf,
    /// Indices into the spec's expanded points (0-based, comma-separated).
    #[arg(long, required = true, value_delimiter = ',')]
    pub index: Vec<usize>,
    /// Results store. Default: lab-results/NAME/results.jsonl.
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Refuse to run unless the spec still expands to the points it had at
    /// submission (written by `lab run --slurm`).
    #[arg(long)]
    pub spec_digest: Option<String>,
    /// Also redo points stored as failed.
    #[arg(long)]
    pub retry_failed: bool,
    /// QEMU binary for `qemu` points.
    #[arg(long)]
    pub qemu: Option<PathBuf>,
}

impl SlurmArgs {
    /// The typed options the experiment crate takes.
    pub fn options(&self) -> slurm::SlurmOptions {
        slurm::SlurmOptions {
            slurm: self.slurm,
            partition: self.partition.clone(),
            max_parallel: self.max_parallel,
            exclusive: self.exclusive,
            batch: self.batch,
            task_seconds: self.task_seconds,
            time: self.time.clone(),
            smplab_bin: self.smplab_bin.clone(),
        }
    }
}

impl RunPointArgs {
    /// The typed options the experiment crate takes.
    pub fn options(&self) -> slurm::RunPointOptions {
        slurm::RunPointOptions {
            spec: self.spec.clone(),
            index: self.index.clone(),
            store: self.store.clone(),
            spec_digest: self.spec_digest.clone(),
            retry_failed: self.retry_failed,
            qemu: self.qemu.clone(),
        }
    }
}

fn default_store(name: &str) -> PathBuf {
    Path::new("lab-results").join(name).join("results.jsonl")
}

/// Store path from a `lab report` argument: a file, or a directory holding results.jsonl.
fn store_file(p: &Path) -> PathBuf {
    if p.is_dir() {
        p.join("results.jsonl")
    } else {
        p.to_path_buf()
    }
}

fn report_dir(store: &Path) -> PathBuf {
    store
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join("report")
}

/// `smplab tune`: Kulkarni & Kulkarni's adaptive tuner and matrix (`tune_cli.rs`).
pub use crate::tune::{tune, TuneArgs};

pub fn lab(args: &LabArgs) -> i32 {
    match &args.command {
        LabCommand::Run(a) => lab_run(a),
        LabCommand::Report(a) => lab_report(a),
        LabCommand::Status(a) => lab_status(a),
        LabCommand::Real(a) => real::run(a),
        LabCommand::RunPoint(a) => {
            let path = match &a.store {
                Some(p) => p.clone(),
                None => match smplab_analysis::tune::load_spec(&a.spec) {
                    Ok(s) => default_store(&s.name),
                    Err(e) => {
                        eprintln!("{e}");
                        return exit::BAD_INPUT;
                    }
                },
            };
            let runner = RealRunner {
                qemu_binary: a.qemu.clone(),
            };
            smplab_experiment::slurm::run_point(&a.options(), &path, &runner)
        }
    }
}

fn lab_run(a: &LabRunArgs) -> i32 {
    let spec = match smplab_analysis::tune::load_spec(&a.spec) {
        Ok(s) => s,
        Err(e) => {
            report_error(&e);
            return exit::BAD_INPUT;
        }
    };
    let path = a.store.clone().unwrap_or_else(|| default_store(&spec.name));
    let mut store = match Store::open(&path) {
        Ok(s) => s,
        Err(e) => {
            report_error(&e);
            return exit::RUN_FAILED;
        }
    };
    if store.repaired_bytes > 0 {
        eprintln!(
            "note: cut off a torn last line ({} bytes) left by an interrupted run",
            store.repaired_bytes
        );
    }
    let runner = RealRunner {
        qemu_binary: a.qemu.clone(),
    };
    if a.slurm.slurm {
        return smplab_experiment::slurm::submit(
            &spec,
            &a.spec,
            &mut store,
            &runner,
            &a.slurm.options(),
            &smplab_experiment::slurm::TaskOptions {
                retry_failed: a.retry_failed,
                qemu: a.qemu.clone(),
            },
        );
    }
    let reps = &spec.repetitions;
    let configs = spec.points.len() / (reps.min.max(1) as usize);
    let how = if reps.min == reps.max {
        format!("{} repetitions each", reps.max)
    } else {
        format!(
            "{}–{} repetitions each, until the 95% interval of the median is within ±{:.0}%",
            reps.min,
            reps.max,
            reps.rel_half_width * 100.0
        )
    };
    eprintln!(
        "{}: {configs} configurations, {how}, into {}",
        spec.name,
        path.display()
    );
    let summary = match run_repeated_with(
        &spec.points,
        &mut store,
        &runner,
        &SweepOptions {
            retry_failed: a.retry_failed,
            progress: !a.quiet,
        },
        reps,
        a.steal_threshold,
    ) {
        Ok(s) => s,
        Err(e) => {
            report_error(&e);
            return exit::RUN_FAILED;
        }
    };
    let status = print_summary(&summary);
    out!(
        "{}",
        smplab_report::text_summary(&smplab_analysis::metrics::Results::new(&store), 40)
    );
    if a.report {
        let dir = report_dir(&path);
        match write_report(
            &store,
            &dir,
            &ReportOptions {
                title: format!("smplab lab: {}", spec.name),
                notes: vec![],
                sections: vec![],
                calibration: None,
            },
        ) {
            Ok(f) => outln!("report: {}", f.html.display()),
            Err(e) => {
                report_error(&e);
                return exit::RUN_FAILED;
            }
        }
    }
    status
}

fn lab_report(a: &LabReportArgs) -> i32 {
    let paths: Vec<PathBuf> = a.store.iter().map(|p| store_file(p)).collect();
    let mut entries = Vec::new();
    for p in &paths {
        match Store::read(p) {
            Ok(s) => entries.extend(s.entries().iter().cloned()),
            Err(e) => {
                report_error(&e);
                return exit::BAD_INPUT;
            }
        }
    }
    let path = paths[0].clone();
    let store = Store::from_entries_at(entries, &path);
    let dir = a.output.clone().unwrap_or_else(|| report_dir(&path));
    let title = a.title.clone().unwrap_or_else(|| {
        format!(
            "smplab lab report: {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    match write_report(
        &store,
        &dir,
        &ReportOptions {
            title,
            notes: vec![],
            sections: vec![],
            calibration: None,
        },
    ) {
        Ok(f) => {
            outln!("report: {}", f.html.display());
            for c in f.csv {
                outln!("csv: {}", c.display());
            }
            exit::OK
        }
        Err(e) => {
            report_error(&e);
            exit::RUN_FAILED
        }
    }
}

fn lab_status(a: &LabStatusArgs) -> i32 {
    let spec = match smplab_analysis::tune::load_spec(&a.spec) {
        Ok(s) => s,
        Err(e) => {
            report_error(&e);
            return exit::BAD_INPUT;
        }
    };
    let path = a.store.clone().unwrap_or_else(|| default_store(&spec.name));
    let store = match Store::read(&path) {
        Ok(s) => s,
        Err(smplab_experiment::store::StoreError::Missing { .. }) => {
            Store::from_entries_at(vec![], &path)
        }
        Err(e) => {
            report_error(&e);
            return exit::BAD_INPUT;
        }
    };
    let latest: std::collections::HashMap<&str, &smplab_experiment::store::Entry> = store
        .latest()
        .into_iter()
        .map(|e| (e.key.as_str(), e))
        .collect();
    let (mut ok, mut failed, mut skipped, mut pending) = (0, 0, 0, 0);
    for p in &spec.points {
        match latest.get(p.key().as_str()).map(|e| &e.status) {
            Some(smplab_experiment::store::Status::Ok) => ok += 1,
            Some(smplab_experiment::store::Status::Failed { .. }) => failed += 1,
            Some(smplab_experiment::store::Status::Skipped { .. }) => skipped += 1,
            None => pending += 1,
        }
    }
    outln!(
        "{}: {} points: {ok} ok, {failed} failed, {skipped} skipped, {pending} pending ({})",
        spec.name,
        spec.points.len(),
        path.display()
    );
    smplab_experiment::slurm::print_status(&spec, &store)
}

pub fn diagnose(args: &DiagnoseArgs) -> i32 {
    use smplab_analysis::diagnose::{attribute, baseline, table, Plan};
    if let Err(e) = smplab_workload::Source::resolve(&args.workload) {
        report_error(&e);
        return exit::BAD_INPUT;
    }
    if !(args.scale.is_finite() && args.scale > 0.0) || args.reps == 0 {
        report_error("--scale must be positive and --reps at least 1");
        return exit::BAD_INPUT;
    }
    let executor = args.executor;
    // The points store whole seconds: a shorter limit is refused, not rounded.
    let timeout_s = args.timeout.duration().as_secs();
    if timeout_s == 0 || args.timeout.duration().subsec_nanos() != 0 {
        report_error(format!(
            "--timeout {}: give whole seconds (a diagnosis stores its points' limit in seconds)",
            args.timeout
        ));
        return exit::BAD_INPUT;
    }
    let runner = RealRunner::default();
    if let Err(why) = smplab_experiment::runner::Runner::availability(&runner, executor) {
        report_error(format!("cannot diagnose on {executor}: {why}"));
        return if executor == Executor::Vm {
            exit::KVM_UNAVAILABLE
        } else {
            exit::RUN_FAILED
        };
    }
    let vcpus = args
        .vcpus
        .unwrap_or(if executor == Executor::Sim { 16 } else { 2 });
    let mut base = baseline(executor, &args.workload, vcpus, args.scale, &args.platform);
    base.timeout_s = timeout_s;
    base.config.set_vms(args.vms);
    let plan = Plan::new(base);
    for (f, why) in &plan.not_applicable {
        outln!("{}: not applicable, not run ({why})", f.name);
    }
    if args.reps < DIAGNOSE_REPS {
        outln!(
            "warning: --reps {}: fewer than {DIAGNOSE_REPS} repetitions give no 95% interval of a paired ratio, so no factor can be credited",
            args.reps
        );
    }
    let path = args.store.clone().unwrap_or_else(|| {
        default_store(&format!(
            "diagnose-{}-{}",
            args.workload.replace(['/', '.'], "_"),
            args.executor
        ))
    });
    let mut store = match Store::open(&path) {
        Ok(s) => s,
        Err(e) => {
            report_error(&e);
            return exit::RUN_FAILED;
        }
    };
    let summary = match run_points_with(
        &plan.points(args.reps),
        &mut store,
        &runner,
        &SweepOptions {
            retry_failed: false,
            progress: !args.quiet,
        },
        args.steal_threshold,
    ) {
        Ok(s) => s,
        Err(e) => {
            report_error(&e);
            return exit::RUN_FAILED;
        }
    };
    let status = print_summary(&summary);
    let results = smplab_analysis::metrics::Results::new(&store);
    let Some(a) = attribute(&results, &plan) else {
        report_error("no attribution: the baseline or native runs failed (see above)");
        return exit::RUN_FAILED;
    };
    outln!("{}", table(&a));
    let dir = report_dir(&path);
    match write_report(
        &store,
        &dir,
        &ReportOptions {
            title: format!("smplab diagnose: {} on {}", args.workload, args.executor),
            notes: vec![],
            sections: vec![],
            calibration: None,
        },
    ) {
        Ok(f) => outln!("report: {}", f.html.display()),
        Err(e) => report_error(&e),
    }
    status
}

/// `smplab calibrate`.
pub fn calibrate(args: &CalibrateArgs) -> i32 {
    use smplab_analysis::calibrate::{measure, write_profile};
    if let Some(why) = smplab_experiment::availability::kvm_unavailable() {
        report_error(format!("cannot calibrate: {why}"));
        return exit::KVM_UNAVAILABLE;
    }
    if !(args.scale.is_finite() && args.scale > 0.0) || args.reps == 0 {
        report_error("--scale must be positive and --reps at least 1");
        return exit::BAD_INPUT;
    }
    let mut store = match Store::open(&args.store) {
        Ok(s) => s,
        Err(e) => {
            report_error(&e);
            return exit::RUN_FAILED;
        }
    };
    let started = std::time::Instant::now();
    let rep = match measure(
        &RealRunner::default(),
        &mut store,
        args.scale,
        &smplab_experiment::sweep::Repetitions::adaptive(args.reps),
        !args.quiet,
    ) {
        Ok(r) => r,
        Err(e) => {
            report_error(&e);
            return exit::RUN_FAILED;
        }
    };
    out!("{}", smplab_analysis::calibrate::report_text(&rep));
    if let Some(other) = &args.compare {
        match smplab_sim::Platform::resolve(other) {
            Ok(p) => {
                let (rows, _) = smplab_analysis::calibrate::compare(&store, &p, args.scale);
                out!(
                    "{}",
                    smplab_analysis::calibrate::heldout::table(
                        &format!("Held-out check predicted with {other}:"),
                        &rows
                    )
                );
            }
            Err(e) => report_error(format!("--compare {other}: {e}")),
        }
    }
    outln!("calibrate took {:.1} s", started.elapsed().as_secs_f64());
    let cal = rep.cal;
    match write_profile(&cal, &args.output) {
        Ok(()) => {
            outln!("profile: {}", args.output.display());
            if cal.unmeasured.is_empty() {
                exit::OK
            } else {
                exit::PARTIAL
            }
        }
        Err(e) => {
            report_error(&e);
            exit::RUN_FAILED
        }
    }
}

/// `smplab demo`.
pub fn demo(args: &DemoArgs) -> i32 {
    crate::demo::run(&crate::demo::DemoOptions {
        out: args.output.clone(),
        reps: args.reps,
        scale: args.scale,
        fresh: args.fresh,
        progress: !args.quiet,
        steal: args.steal_threshold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(subcommand)]
        cmd: Cmd,
    }
    #[derive(Debug, Subcommand)]
    enum Cmd {
        Lab(LabArgs),
        Diagnose(DiagnoseArgs),
        Calibrate(CalibrateArgs),
        Demo(DemoArgs),
    }

    #[test]
    fn arguments_parse() {
        let t = Top::parse_from(["smplab", "lab", "run", "x.toml", "--retry-failed"]);
        assert!(
            matches!(t.cmd, Cmd::Lab(LabArgs { command: LabCommand::Run(ref r) }) if r.retry_failed)
        );
        let t = Top::parse_from([
            "smplab",
            "diagnose",
            "--workload",
            "dedup",
            "--executor",
            "sim",
        ]);
        assert!(
            matches!(t.cmd, Cmd::Diagnose(ref d) if d.executor == Executor::Sim && d.reps == DIAGNOSE_REPS)
        );
        assert!(Top::try_parse_from([
            "smplab",
            "diagnose",
            "--workload",
            "d",
            "--executor",
            "qemu"
        ])
        .is_err());
        let t = Top::parse_from(["smplab", "demo", "--max-reps", "1"]);
        assert!(
            matches!(t.cmd, Cmd::Demo(ref d) if d.reps == 1 && d.steal_threshold == StealThreshold::default())
        );
        let t = Top::parse_from(["smplab", "demo", "--steal-threshold", "1"]);
        assert!(matches!(t.cmd, Cmd::Demo(ref d) if d.steal_threshold == StealThreshold::OFF));
        for bad in ["0", "1.5", "x"] {
            let e =
                Top::try_parse_from(["smplab", "lab", "run", "x.toml", "--steal-threshold", bad])
                    .unwrap_err();
            assert!(e.to_string().contains("(0, 1]"), "{e}");
            assert_eq!(e.exit_code(), exit::BAD_INPUT);
        }
        let _ = Top::parse_from(["smplab", "calibrate"]);
    }

    #[test]
    fn report_merges_several_stores() {
        use smplab_experiment::store::{Entry, Status};
        use smplab_experiment::testutil::vm_point;
        let dir = smplab_experiment::testutil::temp_dir("merge");
        for (name, wl) in [("a", "dedup"), ("b", "vips")] {
            let mut s = Store::open(&dir.join(name).join("results.jsonl")).unwrap();
            let r = smplab_experiment::testutil::rec(smplab_record::Executor::Vm, wl, 2, 1_000_000);
            s.append(Entry::new(vm_point(wl, 2, 0), Status::Ok, 0.0, vec![r]))
                .unwrap();
        }
        let code = lab(&LabArgs {
            command: LabCommand::Report(LabReportArgs {
                store: vec![dir.join("a"), dir.join("b").join("results.jsonl")],
                output: Some(dir.join("out")),
                title: None,
            }),
        });
        assert_eq!(code, exit::OK);
        let html = std::fs::read_to_string(dir.join("out/index.html")).unwrap();
        assert!(html.contains("vm dedup") && html.contains("vm vips"));
        let code = lab(&LabArgs {
            command: LabCommand::Report(LabReportArgs {
                store: vec![dir.join("missing")],
                output: None,
                title: None,
            }),
        });
        assert_eq!(code, exit::BAD_INPUT);
    }

    #[test]
    fn bad_spec_exits_with_bad_input() {
        let dir = smplab_experiment::testutil::temp_dir("cli");
        let spec = dir.join("bad.toml");
        std::fs::write(
            &spec,
            "name = \"x\"\n[matrix]\nexecutor = \"vmm\"\nworkload = \"dedup\"\n",
        )
        .unwrap();
        let code = lab(&LabArgs {
            command: LabCommand::Run(LabRunArgs {
                spec,
                store: Some(dir.join("s.jsonl")),
                retry_failed: false,
                quiet: true,
                report: false,
                qemu: None,
                steal_threshold: StealThreshold::default(),
                slurm: Default::default(),
            }),
        });
        assert_eq!(code, exit::BAD_INPUT);
    }
}
