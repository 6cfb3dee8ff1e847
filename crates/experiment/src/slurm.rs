//! Sweeps as Slurm job arrays: `smplab lab run SPEC --slurm` writes a batch
//! script and submits it with `sbatch --array`; array task `i` runs
//! `smplab lab run-point SPEC --index LIST` for its share of the points, and
//! every point's result lands in its own file of the store (see
//! [`crate::store::write_point_file`]), so tasks on many nodes never write one
//! file together. `smplab lab status SPEC` merges the store with `squeue` and,
//! when the cluster keeps accounting, `sacct`.
//!
//! Each submission is remembered in `slurm/jobs.jsonl` beside the store (job
//! id and the point keys of every array task), which is how status and a
//! resubmission know which points are queued or running. Scripts and task
//! logs live in the same `slurm/` directory.

use crate::point::Point;
use crate::runner::Runner;
use crate::spec::ExperimentSpec;
use crate::store::{Store, StoreError};
use crate::sweep::{run_points, SweepOptions};
use serde::{Deserialize, Serialize};
use smplab_record::outln;
use smplab_record::{exit, Executor};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

mod queue;
pub use queue::{parse_squeue, status_of, task_states, SlurmStatus, TaskState};

/// Most simulator points one array task runs, whatever the estimate says: a
/// task that dies loses at most this much work.
pub const MAX_BATCH: usize = 500;

/// `lab run` options for submitting to Slurm instead of running here.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmOptions {
    /// Submit the points without a result as a Slurm job array instead of
    /// running them here (docs/slurm.md).
    pub slurm: bool,
    /// Slurm partition (default: the cluster's default partition).
    pub partition: Option<String>,
    /// At most this many array tasks run at once (`--array=0-N%K`).
    pub max_parallel: Option<u32>,
    /// Whole nodes per task (`sbatch --exclusive`): quiet hosts for timings.
    pub exclusive: bool,
    /// Simulator points per array task. Default: as many as take
    /// --task-seconds by the measured cost of one point.
    pub batch: Option<u32>,
    /// Target run time of one array task of simulator points, seconds.
    pub task_seconds: f64,
    /// Time limit of one array task (`sbatch --time`, e.g. `30` or `2:00:00`).
    /// Default: the partition's.
    pub time: Option<String>,
    /// The smplab binary array tasks run (must accept `lab run-point`).
    /// Default: this one.
    pub smplab_bin: Option<PathBuf>,
}

/// Target run time of one array task of simulator points when none is given.
pub const DEFAULT_TASK_SECONDS: f64 = 60.0;

impl Default for SlurmOptions {
    fn default() -> Self {
        SlurmOptions {
            slurm: false,
            partition: None,
            max_parallel: None,
            exclusive: false,
            batch: None,
            task_seconds: DEFAULT_TASK_SECONDS,
            time: None,
            smplab_bin: None,
        }
    }
}

/// `smplab lab run-point`: what one array task runs.
#[derive(Debug, Clone)]
pub struct RunPointOptions {
    /// The experiment spec.
    pub spec: PathBuf,
    /// Indices into the spec's expanded points (0-based, comma-separated).
    pub index: Vec<usize>,
    /// Results store. Default: lab-results/NAME/results.jsonl.
    pub store: Option<PathBuf>,
    /// Refuse to run unless the spec still expands to the points it had at
    /// submission (written by `lab run --slurm`).
    pub spec_digest: Option<String>,
    /// Also redo points stored as failed.
    pub retry_failed: bool,
    /// QEMU binary for `qemu` points.
    pub qemu: Option<PathBuf>,
}

/// Options of `lab run` that its array tasks pass on to `lab run-point`.
#[derive(Debug, Clone, Default)]
pub struct TaskOptions {
    pub retry_failed: bool,
    pub qemu: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("cannot run `{tool}`: {source}; is Slurm installed here (`smplab doctor`)?")]
    Tool {
        tool: String,
        source: std::io::Error,
    },
    #[error("`{tool}` failed ({status}): {stderr}")]
    ToolFailed {
        tool: String,
        status: String,
        stderr: String,
    },
    #[error("`sbatch --parsable` printed `{0}`, not a job id")]
    JobId(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: corrupt submission record ({detail}); delete that line (status then forgets that job)")]
    Manifest {
        path: String,
        line: usize,
        detail: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One submitted job array, one line of `slurm/jobs.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Submission {
    pub job_id: String,
    pub spec_digest: String,
    pub submitted_unix: u64,
    /// Point keys of every array task, by task index.
    pub tasks: Vec<Vec<String>>,
}

/// A stable digest of a spec's expansion (the keys in order): a task refuses to
/// run when the spec file changed since submission, since its indices would
/// then name other points.
pub fn spec_digest(points: &[Point]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in points {
        for b in p.key().bytes().chain(std::iter::once(b'\n')) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// Simulator points per task so that a task runs about `target_s` when one
/// point costs `point_s` host seconds: at least one, at most [`MAX_BATCH`].
pub fn batch_size(point_s: f64, target_s: f64) -> usize {
    if !(point_s.is_finite() && point_s > 0.0 && target_s.is_finite() && target_s > 0.0) {
        return 1;
    }
    // Casts: the ratio is finite and positive; f64 `as` usize saturates,
    // and the clamp bounds it anyway.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let batch = (target_s / point_s).ceil() as usize;
    batch.clamp(1, MAX_BATCH)
}

/// CPUs one point occupies on a node: the simulator is single-threaded; a VM
/// point runs `vcpus` threads per VM; a native point its workload threads.
fn cpus_of(p: &Point) -> u32 {
    p.config.settings().host_cpus_used(p.threads)
}

/// One job array to submit: the spec indices of each task and the CPUs a task asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayPlan {
    pub tasks: Vec<Vec<usize>>,
    pub cpus_per_task: u32,
}

/// Split the points to run (`todo`, indices into `points`) into job arrays:
/// simulator points `sim_batch` to a task (contiguous in spec order, so a batch
/// mixes configurations as the round-robin order does), measured points one
/// to a task, in their own array since they ask for more CPUs.
pub fn plan(points: &[Point], todo: &[usize], sim_batch: usize) -> Vec<ArrayPlan> {
    let (sim, measured): (Vec<usize>, Vec<usize>) = todo
        .iter()
        .copied()
        .partition(|&i| points[i].executor() == Executor::Sim);
    let mut arrays = Vec::new();
    if !sim.is_empty() {
        arrays.push(ArrayPlan {
            tasks: sim.chunks(sim_batch.max(1)).map(|c| c.to_vec()).collect(),
            cpus_per_task: 1,
        });
    }
    if !measured.is_empty() {
        arrays.push(ArrayPlan {
            cpus_per_task: measured
                .iter()
                .map(|&i| cpus_of(&points[i]))
                .max()
                .unwrap_or(1),
            tasks: measured.into_iter().map(|i| vec![i]).collect(),
        });
    }
    arrays
}

/// Quote for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Where a store keeps its Slurm scripts, logs and submissions.
pub fn slurm_dir(store: &Path) -> PathBuf {
    store
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join("slurm")
}

/// Everything the batch script needs besides the plan.
pub struct ScriptContext<'a> {
    pub name: &'a str,
    pub smplab_bin: &'a Path,
    pub spec: &'a Path,
    pub store: &'a Path,
    pub digest: &'a str,
    pub log_dir: &'a Path,
    pub task: &'a TaskOptions,
}

/// The `sbatch` script of one array: task `i` runs the points in line `i` of
/// the `TASKS` table.
pub fn batch_script(ctx: &ScriptContext, array: &ArrayPlan, args: &SlurmOptions) -> String {
    let mut s = String::from("#!/bin/bash\n");
    s.push_str(&format!(
        "# Written by `smplab lab run --slurm` for spec {}; submitted with sbatch.\n",
        ctx.name
    ));
    s.push_str(&format!("#SBATCH --job-name=smplab-{}\n", ctx.name));
    let last = array.tasks.len().saturating_sub(1);
    match args.max_parallel {
        Some(k) => s.push_str(&format!("#SBATCH --array=0-{last}%{k}\n")),
        None => s.push_str(&format!("#SBATCH --array=0-{last}\n")),
    }
    s.push_str(&format!(
        "#SBATCH --cpus-per-task={}\n",
        array.cpus_per_task
    ));
    s.push_str(&format!(
        "#SBATCH --output={}/%A_%a.out\n",
        ctx.log_dir.display()
    ));
    if let Some(p) = &args.partition {
        s.push_str(&format!("#SBATCH --partition={p}\n"));
    }
    if args.exclusive {
        s.push_str("#SBATCH --exclusive\n");
    }
    if let Some(t) = &args.time {
        s.push_str(&format!("#SBATCH --time={t}\n"));
    }
    s.push_str("set -eu\n# Spec point indices of each array task.\nTASKS=(\n");
    for t in &array.tasks {
        let list: Vec<String> = t.iter().map(|i| i.to_string()).collect();
        s.push_str(&format!("  {}\n", list.join(",")));
    }
    s.push_str(")\n");
    s.push_str(&format!(
        "exec {} lab run-point {} --store {} --spec-digest {}{}{} --index \"${{TASKS[$SLURM_ARRAY_TASK_ID]}}\"\n",
        sh_quote(&ctx.smplab_bin.display().to_string()),
        sh_quote(&ctx.spec.display().to_string()),
        sh_quote(&ctx.store.display().to_string()),
        ctx.digest,
        if ctx.task.retry_failed {
            " --retry-failed"
        } else {
            ""
        },
        ctx.task
            .qemu
            .as_ref()
            .map(|q| format!(" --qemu {}", sh_quote(&q.display().to_string())))
            .unwrap_or_default(),
    ));
    s
}

fn run_tool(cmd: &mut Command) -> Result<String, SlurmError> {
    let tool = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|source| SlurmError::Tool {
        tool: tool.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(SlurmError::ToolFailed {
            tool,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Submit a script; its job id.
fn sbatch(script: &Path) -> Result<String, SlurmError> {
    let out = run_tool(Command::new("sbatch").arg("--parsable").arg(script))?;
    // `--parsable` prints `jobid` or `jobid;cluster`.
    let id = out.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SlurmError::JobId(out.trim().to_string()));
    }
    Ok(id)
}

fn manifest_path(store: &Path) -> PathBuf {
    slurm_dir(store).join("jobs.jsonl")
}

/// The submissions made for a store, oldest first.
pub fn submissions(store: &Path) -> Result<Vec<Submission>, SlurmError> {
    let path = manifest_path(store);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(source) => {
            return Err(SlurmError::Io {
                path: path.display().to_string(),
                source,
            })
        }
    };
    let mut out = Vec::new();
    // A torn last line (killed while recording) is ignored like the store's.
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    for (i, line) in text[..complete].lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(
            serde_json::from_str(line).map_err(|e| SlurmError::Manifest {
                path: path.display().to_string(),
                line: i + 1,
                detail: e.to_string(),
            })?,
        );
    }
    Ok(out)
}

fn record_submission(store: &Path, sub: &Submission) -> Result<(), SlurmError> {
    let path = manifest_path(store);
    let ioerr = |source| SlurmError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut line = serde_json::to_string(sub).map_err(|e| ioerr(std::io::Error::other(e)))?;
    line.push('\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(ioerr)?;
    f.write_all(line.as_bytes()).map_err(ioerr)?;
    f.sync_data().map_err(ioerr)
}

/// Median host seconds of the simulator results already stored, if any.
fn stored_sim_cost(store: &Store) -> Option<(f64, usize)> {
    let mut secs: Vec<f64> = store
        .latest()
        .into_iter()
        .filter(|e| e.is_ok() && e.point.executor() == Executor::Sim)
        .map(|e| e.host_seconds)
        .collect();
    if secs.is_empty() {
        return None;
    }
    secs.sort_by(|a, b| a.total_cmp(b));
    Some((secs[secs.len() / 2], secs.len()))
}

/// `smplab lab run SPEC --slurm`: submit every point without a result that no
/// task is queued for or running. The store is held open (locked) while
/// submitting so a second submission cannot race this one.
pub fn submit(
    spec: &ExperimentSpec,
    spec_path: &Path,
    store: &mut Store,
    runner: &dyn Runner,
    args: &SlurmOptions,
    task: &TaskOptions,
) -> i32 {
    match try_submit(spec, spec_path, store, runner, args, task) {
        Ok(()) => exit::OK,
        Err(
            e @ (SlurmError::Tool { .. } | SlurmError::ToolFailed { .. } | SlurmError::JobId(_)),
        ) => {
            eprintln!("error: {e}");
            exit::EXTERNAL_TOOL
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::RUN_FAILED
        }
    }
}

fn absolute(p: &Path) -> Result<PathBuf, SlurmError> {
    std::path::absolute(p).map_err(|source| SlurmError::Io {
        path: p.display().to_string(),
        source,
    })
}

fn try_submit(
    spec: &ExperimentSpec,
    spec_path: &Path,
    store: &mut Store,
    runner: &dyn Runner,
    args: &SlurmOptions,
    task: &TaskOptions,
) -> Result<(), SlurmError> {
    let store_path = store.path().to_path_buf();
    let subs = submissions(&store_path)?;
    let states = task_states(&subs)?;
    let before = status_of(&spec.points, store, &subs, &states);
    let mut todo: Vec<usize> = (0..spec.points.len())
        .filter(|&i| {
            let key = spec.points[i].key();
            !store.is_finished(&key, task.retry_failed) && !before.in_flight.contains(&key)
        })
        .collect();
    if !before.in_flight.is_empty() {
        outln!(
            "{} points are queued or running in Slurm already; not resubmitted",
            before.in_flight.len()
        );
    }
    let sim_batch = sim_batch_size(spec, store, runner, args, &mut todo)?;
    if todo.is_empty() {
        outln!(
            "{}: nothing to submit ({} done, {} queued or running)",
            spec.name,
            spec.points.len() - before.in_flight.len(),
            before.in_flight.len()
        );
        return Ok(());
    }
    let dir = absolute(&slurm_dir(&store_path))?;
    std::fs::create_dir_all(&dir).map_err(|source| SlurmError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let exe = match &args.smplab_bin {
        Some(b) => absolute(b)?,
        None => std::env::current_exe().map_err(|source| SlurmError::Io {
            path: "this smplab binary".into(),
            source,
        })?,
    };
    // A built-in spec's name stays a name: the tasks find it the same way.
    let spec_abs = match crate::builtin::named(spec_path) {
        Some(_) => spec_path.to_path_buf(),
        None => absolute(spec_path)?,
    };
    let store_abs = absolute(&store_path)?;
    let digest = spec_digest(&spec.points);
    let ctx = ScriptContext {
        name: &spec.name,
        smplab_bin: &exe,
        spec: &spec_abs,
        store: &store_abs,
        digest: &digest,
        log_dir: &dir,
        task,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    for (n, array) in plan(&spec.points, &todo, sim_batch).iter().enumerate() {
        let script = dir.join(format!("submit-{now}-{n}.sh"));
        let text = batch_script(&ctx, array, args);
        std::fs::write(&script, text).map_err(|source| SlurmError::Io {
            path: script.display().to_string(),
            source,
        })?;
        let job_id = sbatch(&script)?;
        let points: usize = array.tasks.iter().map(Vec::len).sum();
        outln!(
            "submitted job {job_id}: {} array tasks, {points} points ({})",
            array.tasks.len(),
            script.display()
        );
        record_submission(
            &store_path,
            &Submission {
                job_id,
                spec_digest: digest.clone(),
                submitted_unix: now,
                tasks: array
                    .tasks
                    .iter()
                    .map(|t| t.iter().map(|&i| spec.points[i].key()).collect())
                    .collect(),
            },
        )?;
    }
    outln!("follow with: smplab lab status {}", spec_path.display());
    Ok(())
}

/// Simulator points per array task: `--batch`, or as many as fill a task of
/// `--task-seconds` at the stored simulator results' median cost (without
/// any, one point of `todo` is run here to measure it, and taken off `todo`).
fn sim_batch_size(
    spec: &ExperimentSpec,
    store: &mut Store,
    runner: &dyn Runner,
    args: &SlurmOptions,
    todo: &mut Vec<usize>,
) -> Result<usize, SlurmError> {
    let first_sim = todo
        .iter()
        .position(|&i| spec.points[i].executor() == Executor::Sim);
    Ok(match (args.batch, first_sim) {
        (Some(b), _) => b as usize,
        (None, None) => 1,
        (None, Some(pos)) => {
            let (cost, how) = match stored_sim_cost(store) {
                Some((c, n)) => (c, format!("median of {n} stored simulator results")),
                None => {
                    // Measure one point here; its result is kept like any other.
                    let first = todo.remove(pos);
                    run_points(
                        &spec.points[first..=first],
                        store,
                        runner,
                        &SweepOptions::default(),
                    )?;
                    let secs = store
                        .latest()
                        .into_iter()
                        .find(|e| e.key == spec.points[first].key())
                        .map_or(0.0, |e| e.host_seconds);
                    (secs, "one point measured here".to_string())
                }
            };
            let b = batch_size(cost, args.task_seconds);
            outln!(
                "simulator points take ~{cost:.3} s each ({how}): {b} per task for ~{:.0} s tasks",
                args.task_seconds
            );
            b
        }
    })
}

/// `smplab lab run-point`: run the given points of a spec into their
/// per-point files. Exit 0 when every result (ok, failed or skipped) was
/// stored, so Slurm's task state says whether the task itself worked.
pub fn run_point(a: &RunPointOptions, store_path: &Path, runner: &dyn Runner) -> i32 {
    let spec = match crate::builtin::load(&a.spec) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return exit::BAD_INPUT;
        }
    };
    if let Some(d) = &a.spec_digest {
        if *d != spec_digest(&spec.points) {
            eprintln!(
                "{}: the spec changed since this job was submitted (its points are no longer the ones submitted); cancel the job and rerun `smplab lab run --slurm`",
                a.spec.display()
            );
            return exit::BAD_INPUT;
        }
    }
    if let Some(&bad) = a.index.iter().find(|&&i| i >= spec.points.len()) {
        eprintln!(
            "--index {bad} is out of range: {} has {} points (indices 0 to {})",
            a.spec.display(),
            spec.points.len(),
            spec.points.len().saturating_sub(1)
        );
        return exit::BAD_INPUT;
    }
    let points: Vec<Point> = a.index.iter().map(|&i| spec.points[i].clone()).collect();
    let mut store = match Store::open_per_point(store_path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::RUN_FAILED;
        }
    };
    let opts = SweepOptions {
        retry_failed: a.retry_failed,
        progress: false,
    };
    match run_points(&points, &mut store, runner, &opts) {
        Ok(s) => {
            crate::sweep::print_summary(&s);
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::RUN_FAILED
        }
    }
}

/// The Slurm part of `smplab lab status`: nothing when the store was never
/// submitted to Slurm.
pub fn print_status(spec: &ExperimentSpec, store: &Store) -> i32 {
    let subs = match submissions(store.path()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    if subs.is_empty() {
        return exit::OK;
    }
    let (states, note) = match task_states(&subs) {
        Ok(s) => (s, String::new()),
        Err(e) => (HashMap::new(), format!(" (Slurm not asked: {e})")),
    };
    let s = status_of(&spec.points, store, &subs, &states);
    outln!(
        "slurm: {} jobs submitted{note}; {} ok, {} failed, {} skipped, {} running, {} queued, {} lost (task ended without a result: cancelled, killed or timed out; `lab run --slurm` resubmits them), {} not submitted",
        subs.len(),
        s.ok,
        s.failed,
        s.skipped,
        s.running,
        s.queued,
        s.lost,
        s.not_submitted
    );
    let mut per_job: BTreeMap<&str, BTreeMap<&'static str, usize>> = BTreeMap::new();
    for sub in &subs {
        let counts = per_job.entry(sub.job_id.as_str()).or_default();
        for i in 0..sub.tasks.len() {
            let name = match states.get(&(sub.job_id.clone(), i)) {
                Some(TaskState::Queued) => "queued",
                Some(TaskState::Running) => "running",
                Some(TaskState::Ended) => "ended",
                None => "unknown to Slurm",
            };
            *counts.entry(name).or_default() += 1;
        }
    }
    for (job, counts) in per_job {
        let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
        outln!("  job {job}: tasks {}", parts.join(", "));
    }
    exit::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small grid of sim and vm points (also used by `queue`'s tests).
    pub(super) const SPEC: &str = r#"
name = "grid"
repetitions = 2
[matrix]
executor = ["sim", "vm"]
workload = ["spinlock"]
vcpus = [2, 4]
"#;

    #[test]
    fn batch_size_targets_the_task_time() {
        assert_eq!(batch_size(0.5, 60.0), 120);
        assert_eq!(batch_size(90.0, 60.0), 1);
        assert_eq!(batch_size(1e-6, 60.0), MAX_BATCH);
        assert_eq!(batch_size(0.0, 60.0), 1);
        assert_eq!(batch_size(f64::NAN, 60.0), 1);
    }

    #[test]
    fn plan_batches_sim_points_and_not_measured_ones() {
        let spec = ExperimentSpec::from_text("s.toml", SPEC).unwrap();
        let todo: Vec<usize> = (0..spec.points.len()).collect();
        let arrays = plan(&spec.points, &todo, 3);
        assert_eq!(arrays.len(), 2);
        let sim: Vec<usize> = arrays[0].tasks.iter().flatten().copied().collect();
        assert!(sim
            .iter()
            .all(|&i| spec.points[i].executor() == Executor::Sim));
        assert_eq!(sim.len(), 4);
        assert_eq!(arrays[0].tasks.len(), 2, "3 + 1");
        assert_eq!(arrays[0].cpus_per_task, 1);
        assert!(arrays[1].tasks.iter().all(|t| t.len() == 1));
        assert_eq!(arrays[1].cpus_per_task, 4, "the largest VM");
        // Every point exactly once.
        let mut all: Vec<usize> = arrays.iter().flat_map(|a| a.tasks.concat()).collect();
        all.sort();
        assert_eq!(all, todo);
    }

    #[test]
    fn script_maps_task_ids_to_point_lists() {
        let array = ArrayPlan {
            tasks: vec![vec![0, 1], vec![5]],
            cpus_per_task: 1,
        };
        let args = SlurmOptions {
            slurm: true,
            partition: Some("batch".into()),
            max_parallel: Some(4),
            exclusive: true,
            ..Default::default()
        };
        let s = batch_script(
            &ScriptContext {
                name: "grid",
                smplab_bin: Path::new("/opt/smplab"),
                spec: Path::new("/home/u/it's.toml"),
                store: Path::new("/shared/r/results.jsonl"),
                digest: "00ff",
                log_dir: Path::new("/shared/r/slurm"),
                task: &TaskOptions {
                    retry_failed: true,
                    qemu: Some("/opt/qemu".into()),
                },
            },
            &array,
            &args,
        );
        assert!(s.contains("#SBATCH --array=0-1%4\n"), "{s}");
        assert!(s.contains("#SBATCH --partition=batch\n"));
        assert!(s.contains("#SBATCH --exclusive\n"));
        assert!(s.contains("TASKS=(\n  0,1\n  5\n)\n"), "{s}");
        assert!(s.contains(r"'/home/u/it'\''s.toml'"), "quoted: {s}");
        assert!(
            s.contains("--spec-digest 00ff --retry-failed --qemu '/opt/qemu' --index"),
            "{s}"
        );
    }

    #[test]
    fn digest_follows_the_expansion() {
        let a = ExperimentSpec::from_text("s.toml", SPEC).unwrap();
        let b = ExperimentSpec::from_text("s.toml", &SPEC.replace("[2, 4]", "[2, 8]")).unwrap();
        assert_eq!(spec_digest(&a.points), spec_digest(&a.points));
        assert_ne!(spec_digest(&a.points), spec_digest(&b.points));
    }
}
