//! What Slurm says about submitted array tasks (`squeue`, and `sacct` when the
//! cluster keeps accounting), combined with the store into where every point
//! of a spec stands.

use super::{run_tool, SlurmError, Submission};
use crate::point::Point;
use crate::store::{Entry, Status, Store};
use std::collections::{HashMap, HashSet};
use std::process::Command;

/// A Slurm job state as `squeue`/`sacct` print it, reduced to what the lab needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Queued,
    Running,
    /// Ended (completed, failed, cancelled, timed out, node failure, ...).
    Ended,
}

impl TaskState {
    fn parse(s: &str) -> TaskState {
        // sacct prints `CANCELLED by 0`; squeue `CANCELLED`.
        match s.split_whitespace().next().unwrap_or("") {
            "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "SUSPENDED"
            | "RESV_DEL_HOLD" | "SPECIAL_EXIT" | "STOPPED" => TaskState::Queued,
            "RUNNING" | "CONFIGURING" | "COMPLETING" | "RESIZING" | "SIGNALING" | "STAGE_OUT" => {
                TaskState::Running
            }
            _ => TaskState::Ended,
        }
    }
}

/// `(job id, array task index) → state` from `squeue` lines `JOB|TASK|STATE`;
/// a still-unsplit pending range (`4-9%2`) counts for every index in it.
pub fn parse_squeue(text: &str) -> HashMap<(String, usize), TaskState> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let mut f = line.trim().split('|');
        let (Some(job), Some(task), Some(state)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let state = TaskState::parse(state);
        for i in expand_task_ids(task) {
            out.insert((job.to_string(), i), state);
        }
    }
    out
}

/// `3`, `4-9%2`, `[1,3-5]` → the task indices.
fn expand_task_ids(s: &str) -> Vec<usize> {
    let s = s.trim().trim_start_matches('[').trim_end_matches(']');
    let s = s.split('%').next().unwrap_or("");
    let mut out = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b.min(a + 1_000_000));
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

/// `sacct` lines `JOB_TASK|STATE` (also `JOB_[4-9]|PENDING`).
fn parse_sacct(text: &str) -> HashMap<(String, usize), TaskState> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some((id, state)) = line.trim().split_once('|') else {
            continue;
        };
        let Some((job, task)) = id.split_once('_') else {
            continue;
        };
        let state = TaskState::parse(state);
        for i in expand_task_ids(task) {
            out.insert((job.to_string(), i), state);
        }
    }
    out
}

/// The states of the tasks of `subs` Slurm still knows: `squeue` (which keeps
/// ended jobs for `MinJobAge`), then `sacct` for the rest when the cluster
/// keeps accounting. Errors from the tools are returned for `squeue` only.
pub fn task_states(subs: &[Submission]) -> Result<HashMap<(String, usize), TaskState>, SlurmError> {
    if subs.is_empty() {
        return Ok(HashMap::new());
    }
    let ids: Vec<&str> = subs.iter().map(|s| s.job_id.as_str()).collect();
    let ids = ids.join(",");
    // `squeue -j` with a purged id fails; ask for all of this user's jobs and
    // filter instead.
    let text = run_tool(Command::new("squeue").args([
        "--me",
        "-h",
        "-r",
        "--states=all",
        "-o",
        "%F|%K|%T",
    ]))?;
    let wanted: HashSet<&str> = subs.iter().map(|s| s.job_id.as_str()).collect();
    let mut states: HashMap<(String, usize), TaskState> = parse_squeue(&text)
        .into_iter()
        .filter(|((j, _), _)| wanted.contains(j.as_str()))
        .collect();
    // Accounting off ("Slurm accounting storage is disabled") is not an error.
    if let Ok(text) =
        run_tool(Command::new("sacct").args(["-n", "-P", "-X", "-o", "JobID,State", "-j", &ids]))
    {
        for (k, v) in parse_sacct(&text) {
            states.entry(k).or_insert(v);
        }
    }
    Ok(states)
}

/// Where every point of a spec stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmStatus {
    pub ok: usize,
    pub failed: usize,
    pub skipped: usize,
    pub queued: usize,
    pub running: usize,
    /// Submitted, but the task ended without storing a result (cancelled,
    /// killed, node failure, time limit): `lab run --slurm` resubmits them.
    pub lost: usize,
    /// Never submitted (or submitted so long ago that Slurm forgot the job).
    pub not_submitted: usize,
    /// Keys of points a task is queued for or running now.
    pub in_flight: HashSet<String>,
}

/// Combine the store, the submissions and the task states.
pub fn status_of(
    points: &[Point],
    store: &Store,
    subs: &[Submission],
    states: &HashMap<(String, usize), TaskState>,
) -> SlurmStatus {
    let latest: HashMap<&str, &Entry> = store
        .latest()
        .into_iter()
        .map(|e| (e.key.as_str(), e))
        .collect();
    // The newest submission of a key decides (a resubmission supersedes a
    // cancelled task).
    let mut task_of: HashMap<&str, Option<TaskState>> = HashMap::new();
    for s in subs {
        for (i, keys) in s.tasks.iter().enumerate() {
            let st = states.get(&(s.job_id.clone(), i)).copied();
            for k in keys {
                let prev = task_of.get(k.as_str()).copied().flatten();
                // A later submission of a key still in flight in an earlier
                // one cannot happen (in-flight points are not resubmitted),
                // but prefer an in-flight state if it does.
                let keep_prev = matches!(prev, Some(TaskState::Queued | TaskState::Running));
                if !keep_prev {
                    task_of.insert(k, st);
                }
            }
        }
    }
    let mut out = SlurmStatus::default();
    for p in points {
        let key = p.key();
        match latest.get(key.as_str()).map(|e| &e.status) {
            Some(Status::Ok) => out.ok += 1,
            Some(Status::Failed { .. }) => out.failed += 1,
            Some(Status::Skipped { .. }) => match task_of.get(key.as_str()) {
                Some(Some(TaskState::Queued)) => {
                    out.queued += 1;
                    out.in_flight.insert(key);
                }
                Some(Some(TaskState::Running)) => {
                    out.running += 1;
                    out.in_flight.insert(key);
                }
                _ => out.skipped += 1,
            },
            None => match task_of.get(key.as_str()) {
                Some(Some(TaskState::Queued)) => {
                    out.queued += 1;
                    out.in_flight.insert(key);
                }
                Some(Some(TaskState::Running)) => {
                    out.running += 1;
                    out.in_flight.insert(key);
                }
                Some(Some(TaskState::Ended)) | Some(None) => out.lost += 1,
                None => out.not_submitted += 1,
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::tests::SPEC;
    use crate::spec::ExperimentSpec;

    #[test]
    fn squeue_and_sacct_lines_parse() {
        let q = parse_squeue("12|0|RUNNING\n12|1|CANCELLED\n12|4-6%2|PENDING\nbad\n");
        assert_eq!(q[&("12".into(), 0)], TaskState::Running);
        assert_eq!(q[&("12".into(), 1)], TaskState::Ended);
        assert_eq!(q[&("12".into(), 5)], TaskState::Queued);
        assert_eq!(q.len(), 5);
        let a = parse_sacct("12_3|CANCELLED by 0\n12_[7-8]|PENDING\n12.batch|COMPLETED\n");
        assert_eq!(a[&("12".into(), 3)], TaskState::Ended);
        assert_eq!(a[&("12".into(), 8)], TaskState::Queued);
        assert_eq!(a.len(), 3);
    }

    #[test]
    fn status_separates_done_in_flight_lost_and_unsubmitted() {
        let spec = ExperimentSpec::from_text("s.toml", SPEC).unwrap();
        let p = &spec.points;
        let store = Store::from_entries(vec![Entry::new(p[0].clone(), Status::Ok, 1.0, vec![])]);
        let key = |i: usize| p[i].key();
        let subs = vec![Submission {
            job_id: "7".into(),
            spec_digest: super::super::spec_digest(p),
            submitted_unix: 0,
            tasks: vec![vec![key(0), key(1)], vec![key(2)], vec![key(3)]],
        }];
        let mut states = HashMap::new();
        states.insert(("7".to_string(), 0), TaskState::Running);
        states.insert(("7".to_string(), 1), TaskState::Ended);
        // Task 2 is unknown to Slurm (purged): submitted, no result: lost.
        let s = status_of(p, &store, &subs, &states);
        assert_eq!(s.ok, 1);
        assert_eq!(s.running, 1);
        assert_eq!(s.lost, 2);
        assert_eq!(s.not_submitted, p.len() - 4);
        assert_eq!(s.in_flight, HashSet::from([key(1)]));
    }
}
