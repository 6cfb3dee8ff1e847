//! Running a spec: every point not yet finished in the store, in order, each
//! stored the moment it completes. A failing point is stored as failed with its
//! reason and the sweep goes on.

use crate::point::Point;
use crate::runner::{RunError, Runner};
use crate::store::{Entry, Status, Store, StoreError};
use std::time::Instant;

#[derive(Debug, Clone, Default)]
pub struct SweepOptions {
    /// Redo points stored as failed.
    pub retry_failed: bool,
    /// Draw a progress bar on stderr (indicatif hides it when stderr is not a terminal).
    pub progress: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepSummary {
    pub total: usize,
    /// Finished in an earlier (interrupted) run and not redone.
    pub already_done: usize,
    pub ok: usize,
    pub failed: usize,
    pub skipped: usize,
    /// `(label, reason)` of failed and skipped points, for the user.
    pub problems: Vec<(String, String)>,
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
    let bar = if opts.progress {
        let b = indicatif::ProgressBar::new(todo.len() as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}",
        ) {
            b.set_style(style.progress_chars("=> "));
        }
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    for p in todo {
        bar.set_message(p.label());
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
        store.append(entry)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::fake::FakeRunner;
    use crate::spec::ExperimentSpec;
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
