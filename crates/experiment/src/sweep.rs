//! Running a spec: every point not yet finished in the store, in order, each
//! stored the moment it completes. A failing point is stored as failed with its
//! reason and the sweep goes on.
//!
//! Two ways to repeat a configuration: [`run_points`] runs exactly the points
//! it is given (a fixed number of repetitions each), [`run_repeated`] repeats
//! each configuration until the 95% interval of its median wall time is within
//! ±5% of the median or a maximum is reached ([`Repetitions`]). Both go
//! round-robin over configurations (all of repetition 0, then all of
//! repetition 1, ...) so a drift of the shared host does not land on one
//! configuration only, and both store every repetition.

use crate::point::Point;
pub use crate::repetitions::{Repetitions, DEFAULT_MAX_REPETITIONS};
use crate::runner::{RunError, Runner};
use crate::store::{Entry, Status, Store, StoreError};
use smplab_record::{exit, outln, RunRecord};
use smplab_stats::{MedianCi, TARGET_REL_HALF_WIDTH};
use std::time::Instant;

#[derive(Debug, Clone, Default)]
pub struct SweepOptions {
    /// Redo points stored as failed.
    pub retry_failed: bool,
    /// Draw a progress bar on stderr (indicatif hides it when stderr is not a terminal).
    pub progress: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepSummary {
    pub total: usize,
    /// Finished in an earlier (interrupted) run and not redone.
    pub already_done: usize,
    pub ok: usize,
    pub failed: usize,
    pub skipped: usize,
    /// `(label, reason)` of failed and skipped points, for the user.
    pub problems: Vec<(String, String)>,
    /// Configurations that reached the maximum of repetitions without a
    /// ±target interval: `(label, wall-time interval in seconds)`. Only
    /// [`run_repeated`] fills it.
    pub wide: Vec<(String, MedianCi)>,
}

fn progress_bar(show: bool, len: usize) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}",
    ) {
        b.set_style(style.progress_chars("=> "));
    }
    b
}

/// Run `points` that the store does not have yet.
pub fn run_points(
    points: &[Point],
    store: &mut Store,
    runner: &dyn Runner,
    opts: &SweepOptions,
) -> Result<SweepSummary, StoreError> {
    let mut summary = SweepSummary {
        total: points.len(),
        ..Default::default()
    };
    let todo: Vec<&Point> = points
        .iter()
        .filter(|p| !store.is_finished(&p.key(), opts.retry_failed))
        .collect();
    summary.already_done = points.len() - todo.len();
    let bar = progress_bar(opts.progress, todo.len());
    for p in todo {
        bar.set_message(p.label());
        run_one(p, store, runner, &mut summary)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(summary)
}

/// Repeat every configuration of `points` (their repetition indices are
/// ignored; a configuration is counted once) as `reps` says, round-robin,
/// resuming from what the store already has.
pub fn run_repeated(
    points: &[Point],
    store: &mut Store,
    runner: &dyn Runner,
    opts: &SweepOptions,
    reps: &Repetitions,
) -> Result<SweepSummary, StoreError> {
    let mut configs: Vec<Point> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in points {
        if seen.insert(p.config_key()) {
            let mut c = p.clone();
            c.rep = 0;
            configs.push(c);
        }
    }
    let mut summary = SweepSummary::default();
    // Per configuration: still repeating?
    let mut active = vec![true; configs.len()];
    let bar = progress_bar(opts.progress, configs.len() * reps.min as usize);
    let mut round = 0u32;
    while active.iter().any(|&a| a) && round < reps.max {
        for (i, c) in configs.iter().enumerate() {
            if !active[i] {
                continue;
            }
            let mut p = c.clone();
            p.rep = round;
            summary.total += 1;
            if store.is_finished(&p.key(), opts.retry_failed) {
                summary.already_done += 1;
            } else {
                bar.set_message(p.label());
                run_one(&p, store, runner, &mut summary)?;
                bar.inc(1);
            }
            let done = round + 1;
            let (ci, stop_early) = wall_interval(store, c, done);
            if stop_early || !reps.wants_more(done, ci.as_ref()) {
                active[i] = false;
                if let Some(ci) = ci.filter(|ci| !ci.is_narrow(reps.rel_half_width)) {
                    if done >= reps.max && !stop_early {
                        summary.wide.push((c.label(), ci));
                    }
                }
            } else if done >= reps.min {
                bar.inc_length(1);
            }
        }
        round += 1;
    }
    bar.finish_and_clear();
    Ok(summary)
}

/// The interval of the median wall time (s) over the first `done`
/// repetitions of configuration `c` in the store, and whether to stop
/// repeating regardless: a repetition was skipped (the executor is not
/// available) or failed (repeating a broken configuration up to the maximum
/// only costs time; its reasons are in the summary).
fn wall_interval(store: &Store, c: &Point, done: u32) -> (Option<MedianCi>, bool) {
    let mut walls = Vec::new();
    let mut broken = false;
    for rep in 0..done {
        let mut p = c.clone();
        p.rep = rep;
        match store.latest_entry(&p.key()) {
            Some(e) if e.is_ok() && !e.records.is_empty() => walls.push(mean_wall_s(&e.records)),
            Some(_) => broken = true,
            None => {}
        }
    }
    (MedianCi::of(&walls), broken)
}

/// Run one point, store its entry, count it in `summary`.
fn run_one(
    p: &Point,
    store: &mut Store,
    runner: &dyn Runner,
    summary: &mut SweepSummary,
) -> Result<(), StoreError> {
    let start = Instant::now();
    // An executor bug must not end the sweep: catch its panic and store
    // the point as failed.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.run(p)))
        .unwrap_or_else(|panic| {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(RunError::Failed(format!("executor panicked: {msg}")))
        });
    let secs = start.elapsed().as_secs_f64();
    let entry = match result {
        Ok(records) => {
            // A record that itself says the run failed (the executor
            // returns failed records for guest crashes) fails the point.
            if let Some(reason) = records.iter().find_map(|r| match &r.outcome {
                smplab_record::Outcome::Failed { reason } => Some(reason.clone()),
                smplab_record::Outcome::Ok => None,
            }) {
                summary.failed += 1;
                summary.problems.push((p.label(), reason.clone()));
                Entry::new(p.clone(), Status::Failed { reason }, secs, records)
            } else if records.is_empty() {
                let reason = "executor returned no record".to_string();
                summary.failed += 1;
                summary.problems.push((p.label(), reason.clone()));
                Entry::new(p.clone(), Status::Failed { reason }, secs, records)
            } else {
                summary.ok += 1;
                Entry::new(p.clone(), Status::Ok, secs, records)
            }
        }
        Err(RunError::Failed(reason)) => {
            summary.failed += 1;
            summary.problems.push((p.label(), reason.clone()));
            Entry::new(p.clone(), Status::Failed { reason }, secs, vec![])
        }
        Err(RunError::Unavailable(reason)) => {
            summary.skipped += 1;
            summary
                .problems
                .push((p.label(), format!("skipped: {reason}")));
            Entry::new(p.clone(), Status::Skipped { reason }, secs, vec![])
        }
    };
    store.append(entry)
}

/// Print a sweep's outcome; the exit status it implies.
pub fn print_summary(s: &SweepSummary) -> i32 {
    outln!(
        "{} points: {} already done, {} ok, {} failed, {} skipped",
        s.total,
        s.already_done,
        s.ok,
        s.failed,
        s.skipped
    );
    for (label, reason) in s.problems.iter().take(20) {
        outln!("  {label}: {}", reason.lines().next().unwrap_or(""));
    }
    if s.problems.len() > 20 {
        outln!("  ... {} more in the store", s.problems.len() - 20);
    }
    if !s.wide.is_empty() {
        outln!(
            "{} configurations reached their maximum of repetitions without a 95% interval within ±{:.0}% of the median:",
            s.wide.len(),
            TARGET_REL_HALF_WIDTH * 100.0
        );
        for (label, ci) in s.wide.iter().take(20) {
            outln!(
                "  {label}: wall {} s (±{:.1}%, {} runs)",
                ci.display(3),
                ci.rel_half_width() * 100.0,
                ci.n
            );
        }
    }
    if s.failed + s.skipped > 0 {
        exit::PARTIAL
    } else {
        exit::OK
    }
}

/// Mean wall time of a point's records, in seconds (NaN for none).
pub fn mean_wall_s(records: &[RunRecord]) -> f64 {
    if records.is_empty() {
        return f64::NAN;
    }
    records.iter().map(|r| r.timing.wall_ns as f64).sum::<f64>() / records.len() as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::fake::FakeRunner;
    use crate::spec::ExperimentSpec;
    use crate::Point;
    use smplab_record::Executor;
    use std::collections::BTreeMap;

    const SPEC: &str = r#"
name = "kill-test"
repetitions = 2
[matrix]
executor = ["native", "vm"]
workload = ["spinlock", "dedup"]
vcpus = [1, 2]
"#;

    #[test]
    fn failing_point_is_recorded_and_sweep_goes_on() {
        let spec = ExperimentSpec::from_text("s.toml", SPEC).unwrap();
        let mut runner = FakeRunner::new();
        runner.fail.push(spec.points[1].key());
        runner.unavailable.push(Executor::Vm);
        let mut store = Store::from_entries(vec![]);
        let s = run_points(&spec.points, &mut store, &runner, &SweepOptions::default()).unwrap();
        assert_eq!(s.total, spec.points.len());
        assert_eq!(s.failed, 1);
        assert_eq!(s.skipped, 8);
        assert_eq!(s.ok + s.failed + s.skipped, s.total);
        // Resume: skipped points are retried, the failed one is not.
        runner.unavailable.clear();
        let s2 = run_points(&spec.points, &mut store, &runner, &SweepOptions::default()).unwrap();
        assert_eq!(s2.already_done, s.ok + s.failed);
        assert_eq!(s2.ok, 8);
        let failed = store
            .latest()
            .into_iter()
            .filter(|e| matches!(e.status, Status::Failed { .. }))
            .count();
        assert_eq!(failed, 1);
    }

    /// Fake runs whose dedup wall times alternate 1.0 s / 1.5 s (never a
    /// narrow interval) while every other workload is steady.
    struct NoisyRunner(FakeRunner);
    impl Runner for NoisyRunner {
        fn availability(&self, e: Executor) -> Result<(), crate::execute::ExecuteError> {
            self.0.availability(e)
        }
        fn run(&self, p: &Point) -> Result<Vec<smplab_record::RunRecord>, RunError> {
            let mut rs = self.0.run(p)?;
            if p.workload == "dedup" && p.rep % 2 == 1 {
                for r in &mut rs {
                    r.timing.wall_ns += r.timing.wall_ns / 2;
                }
            }
            Ok(rs)
        }
    }

    const TWO: &str = r#"
name = "adaptive"
[matrix]
executor = "native"
workload = ["spinlock", "dedup"]
threads = 2
"#;

    #[test]
    fn adaptive_repetition_stops_when_narrow_and_reports_wide_ones() {
        let spec = ExperimentSpec::from_text("s.toml", TWO).unwrap();
        let mut store = Store::from_entries(vec![]);
        let reps = Repetitions {
            max: 10,
            ..Repetitions::default()
        };
        let runner = NoisyRunner(FakeRunner::new());
        let s = run_repeated(
            &spec.points,
            &mut store,
            &runner,
            &SweepOptions::default(),
            &reps,
        )
        .unwrap();
        let count = |w: &str| {
            store
                .entries()
                .iter()
                .filter(|e| e.point.workload == w)
                .count()
        };
        assert_eq!(count("spinlock"), 6, "steady: the minimum, 6");
        assert_eq!(count("dedup"), 10, "noisy: up to the maximum");
        assert_eq!(s.ok, 16);
        assert_eq!(s.wide.len(), 1);
        assert!(s.wide[0].0.contains("dedup"), "{:?}", s.wide);
        assert!(!s.wide[0].1.is_narrow(reps.rel_half_width));
        // Round-robin: both configurations' repetition r before either's r + 1.
        let order: Vec<(String, u32)> = store
            .entries()
            .iter()
            .map(|e| (e.point.workload.clone(), e.point.rep))
            .collect();
        assert_eq!(order[0].1, 0);
        assert_eq!(order[1].1, 0);
        assert_eq!(order[2].1, 1);
        assert_ne!(order[0].0, order[1].0);
        // Every repetition is stored; a rerun resumes and runs nothing new.
        let again = run_repeated(
            &spec.points,
            &mut store,
            &runner,
            &SweepOptions::default(),
            &reps,
        )
        .unwrap();
        assert_eq!(again.ok, 0);
        assert_eq!(again.already_done, 16);
        assert_eq!(again.wide.len(), 1, "still reported on resume");
        // Fixed: exactly n, and fewer than 6 never counts as narrow.
        let mut store = Store::from_entries(vec![]);
        let s = run_repeated(
            &spec.points,
            &mut store,
            &runner,
            &SweepOptions::default(),
            &Repetitions::fixed(3),
        )
        .unwrap();
        assert_eq!(store.entries().len(), 6);
        assert_eq!(s.wide.len(), 2);
    }

    #[test]
    fn adaptive_repetition_stops_a_broken_configuration() {
        let spec = ExperimentSpec::from_text("s.toml", TWO).unwrap();
        let mut runner = FakeRunner::new();
        let mut bad = spec.points[0].clone();
        bad.rep = 0;
        runner.fail.push(bad.key());
        let mut store = Store::from_entries(vec![]);
        let s = run_repeated(
            &spec.points,
            &mut store,
            &runner,
            &SweepOptions::default(),
            &Repetitions::default(),
        )
        .unwrap();
        assert_eq!(s.failed, 1);
        assert_eq!(s.ok, 6, "the other configuration runs its 6");
        assert!(s.wide.is_empty());
        assert_eq!(Repetitions::adaptive(3).min, 3);
        assert!(Repetitions::default().wants_more(5, None));
    }

    /// The child half of `killed_sweep_resumes_with_one_result_per_point`: runs
    /// the sweep slowly into the store named by the environment, to be killed.
    #[test]
    fn child_sweep_for_kill_test() {
        let Ok(path) = std::env::var("SMPLAB_LAB_KILL_CHILD_STORE") else {
            return; // Only does something when launched by the parent test.
        };
        let spec = ExperimentSpec::from_text("s.toml", SPEC).unwrap();
        let mut runner = FakeRunner::new();
        runner.delay = std::time::Duration::from_millis(150);
        let mut store = Store::open(std::path::Path::new(&path)).unwrap();
        run_points(&spec.points, &mut store, &runner, &SweepOptions::default()).unwrap();
    }

    #[test]
    fn killed_sweep_resumes_with_one_result_per_point() {
        let path = crate::testutil::temp_dir("kill").join("results.jsonl");
        let spec = ExperimentSpec::from_text("s.toml", SPEC).unwrap();
        let exe = std::env::current_exe().unwrap();
        let mut child = std::process::Command::new(exe)
            .args([
                "sweep::tests::child_sweep_for_kill_test",
                "--exact",
                "--nocapture",
            ])
            .env("SMPLAB_LAB_KILL_CHILD_STORE", &path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait (by progress, not by time) until a few points are stored, then
        // SIGKILL the child part-way.
        let lines = |p: &std::path::Path| {
            std::fs::read_to_string(p)
                .map(|t| t.matches('\n').count())
                .unwrap_or(0)
        };
        loop {
            if lines(&path) >= 3 {
                break;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("child sweep ended before it could be killed: {status}");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let done_before = lines(&path);
        assert!(done_before < spec.points.len(), "killed part-way");

        let mut store = Store::open(&path).unwrap();
        let s = run_points(
            &spec.points,
            &mut store,
            &FakeRunner::new(),
            &SweepOptions::default(),
        )
        .unwrap();
        assert_eq!(s.already_done, store.entries().len() - s.ok);
        assert!(s.ok >= 1 && s.ok < spec.points.len());
        drop(store);

        // Exactly one result per point, none extra.
        let store = Store::read(&path).unwrap();
        let mut per_key: BTreeMap<String, usize> = BTreeMap::new();
        for e in store.entries() {
            *per_key.entry(e.key.clone()).or_default() += 1;
        }
        assert_eq!(per_key.len(), spec.points.len());
        assert!(per_key.values().all(|&c| c == 1), "{per_key:?}");
        for p in &spec.points {
            assert!(per_key.contains_key(&p.key()));
        }
        assert!(store.entries().iter().all(|e| e.is_ok()));
    }
}
