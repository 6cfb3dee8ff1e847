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
//!
//! Steal: every measured record carries what other tenants took from the host
//! over its run (`RunRecord::interference`). A repetition whose steal exceeds
//! the sweep's [`StealThreshold`] is stored flagged (`Entry::disturbed`), left
//! out of intervals and pairs, and run again at once while the sweep's budget
//! of reruns lasts (one per point on average, [`RERUNS_IN_A_ROW`] at most in a
//! row), so a noisy host cannot keep a sweep going forever.
//!
//! Pairs: [`run_repeated`] runs a VM configuration right beside its native
//! twin (the same workload natively, when the sweep has it), the order of a
//! round reversed every other round, and counts the configuration as narrow
//! when either its own interval or the interval of the paired ratio to its
//! twin (repetition by repetition, `smplab_stats::paired_ratio`) is within
//! the target: the ratio is what a comparison reports, and pairing cancels
//! the host's drift that two independent intervals count twice.

use crate::point::Point;
pub use crate::repetitions::{Repetitions, DEFAULT_MAX_REPETITIONS};
use crate::runner::{RunError, Runner};
use crate::store::{Entry, Status, Store, StoreError};
use smplab_record::interference::StealThreshold;
use smplab_record::{exit, outln, RunRecord};
use smplab_stats::{paired_ratio, MedianCi, TARGET_REL_HALF_WIDTH};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// Most times one point is rerun in a row because the host's steal disturbed it.
pub const RERUNS_IN_A_ROW: u32 = 3;

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
    /// Why each of `wide` stayed wide, in the same order.
    pub wide_why: Vec<WideWhy>,
    /// Repetitions stored as disturbed (steal above the threshold).
    pub disturbed: usize,
    /// Runs repeated because the one before was disturbed.
    pub reruns: usize,
    /// Configurations narrow only through the paired ratio to their native
    /// twin (their own interval stayed wider than the target).
    pub narrow_by_pairs: usize,
    /// Configurations that reached the target, either way.
    pub narrow: usize,
}

/// What the host did while a wide configuration ran: the reasons its
/// interval did not reach the target.
#[derive(Debug, Clone, PartialEq)]
pub struct WideWhy {
    pub label: String,
    /// Its repetitions left out as disturbed.
    pub disturbed: usize,
    /// Median over its repetitions of the share of CPU time other processes
    /// used.
    pub other_cpu: Option<f64>,
    /// Median steal fraction over its repetitions.
    pub steal: Option<f64>,
    /// The paired ratio to its native twin, if it has one.
    pub paired: Option<MedianCi>,
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

/// Run `points` that the store does not have yet, steal filtered at the
/// default threshold.
pub fn run_points(
    points: &[Point],
    store: &mut Store,
    runner: &dyn Runner,
    opts: &SweepOptions,
) -> Result<SweepSummary, StoreError> {
    run_points_with(points, store, runner, opts, StealThreshold::default())
}

/// [`run_points`] with a steal threshold.
pub fn run_points_with(
    points: &[Point],
    store: &mut Store,
    runner: &dyn Runner,
    opts: &SweepOptions,
    steal: StealThreshold,
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
    let mut reruns = Reruns::new(steal, todo.len());
    let bar = progress_bar(opts.progress, todo.len());
    for p in todo {
        bar.set_message(p.label());
        run_steady(p, store, runner, &mut summary, &mut reruns)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(summary)
}

/// The steal filter of one sweep and what is left of its budget of reruns.
struct Reruns {
    steal: StealThreshold,
    left: usize,
}

impl Reruns {
    fn new(steal: StealThreshold, points: usize) -> Reruns {
        Reruns {
            steal,
            left: points.max(1),
        }
    }
}

/// Run one point; while the host's steal disturbed it and the budget lasts,
/// run it again (the new entry supersedes the disturbed one in the store).
fn run_steady(
    p: &Point,
    store: &mut Store,
    runner: &dyn Runner,
    summary: &mut SweepSummary,
    reruns: &mut Reruns,
) -> Result<(), StoreError> {
    let mut in_a_row = 0;
    loop {
        let disturbed = run_one(p, store, runner, summary, reruns.steal)?;
        if !disturbed || reruns.left == 0 || in_a_row >= RERUNS_IN_A_ROW {
            return Ok(());
        }
        reruns.left -= 1;
        in_a_row += 1;
        summary.reruns += 1;
        // The disturbed run was counted ok; its rerun will be counted again.
        summary.ok = summary.ok.saturating_sub(1);
    }
}

/// Repeat every configuration of `points` (their repetition indices are
/// ignored; a configuration is counted once) as `reps` says, round-robin,
/// resuming from what the store already has; steal filtered at the default
/// threshold.
pub fn run_repeated(
    points: &[Point],
    store: &mut Store,
    runner: &dyn Runner,
    opts: &SweepOptions,
    reps: &Repetitions,
) -> Result<SweepSummary, StoreError> {
    run_repeated_with(points, store, runner, opts, reps, StealThreshold::default())
}

/// The configurations of `points`, once each, every native configuration
/// followed at once by the configurations it is the native twin of; and for
/// each configuration the index of its twin, if the sweep has it.
fn paired_order(points: &[Point]) -> (Vec<Point>, Vec<Option<usize>>) {
    let mut configs: Vec<Point> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in points {
        if seen.insert(p.config_key()) {
            let mut c = p.clone();
            c.rep = 0;
            configs.push(c);
        }
    }
    let twin_key = |c: &Point| {
        (c.executor() != smplab_record::Executor::Native).then(|| c.native_twin().config_key())
    };
    let natives: std::collections::HashSet<String> = configs
        .iter()
        .filter(|c| c.executor() == smplab_record::Executor::Native)
        .map(Point::config_key)
        .collect();
    let mut ordered: Vec<Point> = Vec::new();
    let mut placed = std::collections::HashSet::new();
    for c in &configs {
        if placed.contains(&c.config_key()) {
            continue;
        }
        if twin_key(c).is_some_and(|k| natives.contains(&k)) {
            continue; // placed right after its twin
        }
        placed.insert(c.config_key());
        ordered.push(c.clone());
        if c.executor() == smplab_record::Executor::Native {
            for d in &configs {
                if twin_key(d).as_deref() == Some(&c.config_key()) && placed.insert(d.config_key())
                {
                    ordered.push(d.clone());
                }
            }
        }
    }
    let index: HashMap<String, usize> = ordered
        .iter()
        .enumerate()
        .map(|(i, c)| (c.config_key(), i))
        .collect();
    let twins = ordered
        .iter()
        .map(|c| twin_key(c).and_then(|k| index.get(&k).copied()))
        .collect();
    (ordered, twins)
}

/// [`run_repeated`] with a steal threshold.
pub fn run_repeated_with(
    points: &[Point],
    store: &mut Store,
    runner: &dyn Runner,
    opts: &SweepOptions,
    reps: &Repetitions,
    steal: StealThreshold,
) -> Result<SweepSummary, StoreError> {
    let (configs, twins) = paired_order(points);
    let mut summary = SweepSummary::default();
    let mut reruns = Reruns::new(steal, configs.len() * reps.min as usize);
    // Per configuration: still repeating? Narrow by pairs?
    let mut active = vec![true; configs.len()];
    let mut by_pairs = vec![false; configs.len()];
    let bar = progress_bar(opts.progress, configs.len() * reps.min as usize);
    let mut round = 0u32;
    while active.iter().any(|&a| a) && round < reps.max {
        // The order reversed every other round: within a pair, each side runs
        // first half the time.
        let order: Vec<usize> = if round.is_multiple_of(2) {
            (0..configs.len()).collect()
        } else {
            (0..configs.len()).rev().collect()
        };
        for &i in &order {
            if !active[i] {
                continue;
            }
            let mut p = configs[i].clone();
            p.rep = round;
            summary.total += 1;
            if store.is_finished(&p.key(), opts.retry_failed) {
                summary.already_done += 1;
            } else {
                bar.set_message(p.label());
                run_steady(&p, store, runner, &mut summary, &mut reruns)?;
                bar.inc(1);
            }
        }
        let done = round + 1;
        let samples: Vec<Samples> = configs.iter().map(|c| samples(store, c, done)).collect();
        let mut wants = vec![false; configs.len()];
        for (i, c) in configs.iter().enumerate() {
            if !active[i] {
                continue;
            }
            let own = samples[i].ci();
            let paired = twins[i].and_then(|t| samples[t].paired_with(&samples[i]));
            let narrow_own = own.is_some_and(|ci| ci.is_narrow(reps.rel_half_width));
            let narrow_pair = paired.is_some_and(|ci| ci.is_narrow(reps.rel_half_width));
            by_pairs[i] = !narrow_own && narrow_pair;
            let ok = u32::try_from(samples[i].walls.len()).unwrap_or(u32::MAX);
            wants[i] = !samples[i].broken
                && (ok < reps.min || !(narrow_own || narrow_pair))
                && done < reps.max;
            let narrow = narrow_own || narrow_pair;
            if !(wants[i] || samples[i].broken || narrow) {
                if let Some(ci) = own {
                    summary.wide.push((c.label(), ci));
                    summary.wide_why.push(samples[i].why(c.label(), paired));
                }
            }
            if !wants[i] && (narrow_own || narrow_pair) {
                summary.narrow += 1;
                summary.narrow_by_pairs += usize::from(by_pairs[i]);
            }
        }
        // A native twin keeps running while a configuration paired with it does.
        for (i, t) in twins.iter().enumerate() {
            if let Some(t) = *t {
                if wants[i] && active[t] && !wants[t] && !samples[t].broken && done < reps.max {
                    wants[t] = true;
                    // It was counted as finished above; it is not yet.
                    undo_finish(&mut summary, &configs[t], &samples[t]);
                }
            }
        }
        for i in 0..configs.len() {
            if active[i] && wants[i] && done >= reps.min {
                bar.inc_length(1);
            }
            active[i] = active[i] && wants[i];
        }
        round += 1;
    }
    bar.finish_and_clear();
    Ok(summary)
}

/// Take back what the round's evaluation counted for a configuration that
/// keeps running after all (a native twin its pair still needs).
fn undo_finish(summary: &mut SweepSummary, c: &Point, s: &Samples) {
    let label = c.label();
    if let Some(pos) = summary.wide.iter().rposition(|(l, _)| *l == label) {
        summary.wide.remove(pos);
        summary.wide_why.remove(pos);
    } else if !s.broken {
        summary.narrow = summary.narrow.saturating_sub(1);
    }
}

/// The usable repetitions of one configuration in the store.
struct Samples {
    /// Wall time (s, mean over VMs) by repetition, disturbed ones left out.
    walls: BTreeMap<u32, f64>,
    /// Repetitions left out as disturbed.
    disturbed: usize,
    /// Share of CPU time other processes used, per repetition.
    other_cpu: Vec<f64>,
    steal: Vec<f64>,
    /// A repetition failed or was skipped: repeating only costs time.
    broken: bool,
}

impl Samples {
    fn ci(&self) -> Option<MedianCi> {
        MedianCi::of(&self.walls.values().copied().collect::<Vec<_>>())
    }

    /// The paired ratio `other ÷ self`, repetition by repetition.
    fn paired_with(&self, other: &Samples) -> Option<MedianCi> {
        let pairs: Vec<(f64, f64)> = self
            .walls
            .iter()
            .filter_map(|(rep, a)| Some((*a, *other.walls.get(rep)?)))
            .collect();
        paired_ratio(&pairs)
    }

    fn why(&self, label: String, paired: Option<MedianCi>) -> WideWhy {
        WideWhy {
            label,
            disturbed: self.disturbed,
            other_cpu: smplab_stats::median(&self.other_cpu),
            steal: smplab_stats::median(&self.steal),
            paired,
        }
    }
}

/// The first `done` repetitions of configuration `c` in the store.
fn samples(store: &Store, c: &Point, done: u32) -> Samples {
    let mut s = Samples {
        walls: BTreeMap::new(),
        disturbed: 0,
        other_cpu: Vec::new(),
        steal: Vec::new(),
        broken: false,
    };
    for rep in 0..done {
        let mut p = c.clone();
        p.rep = rep;
        match store.latest_entry(&p.key()) {
            Some(e) if e.is_ok() && !e.records.is_empty() => {
                for i in e.records.iter().filter_map(|r| r.interference.as_ref()) {
                    s.steal.push(i.steal_fraction);
                    s.other_cpu.extend(i.other_cpu_fraction);
                }
                if e.disturbed {
                    s.disturbed += 1;
                } else {
                    s.walls.insert(rep, mean_wall_s(&e.records));
                }
            }
            Some(_) => s.broken = true,
            None => {}
        }
    }
    s
}

/// Run one point, store its entry, count it in `summary`; whether the
/// host's steal disturbed it.
fn run_one(
    p: &Point,
    store: &mut Store,
    runner: &dyn Runner,
    summary: &mut SweepSummary,
    steal: StealThreshold,
) -> Result<bool, StoreError> {
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
                let mut e = Entry::new(p.clone(), Status::Ok, secs, records);
                e.disturbed = steal.disturbs(e.records.iter().map(|r| r.interference.as_ref()));
                summary.disturbed += usize::from(e.disturbed);
                e
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
    let disturbed = entry.disturbed;
    store.append(entry)?;
    Ok(disturbed)
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
    if s.disturbed > 0 {
        outln!(
            "{} repetitions ran while the hypervisor stole more than the threshold of their CPU time: left out of intervals ({} rerun)",
            s.disturbed,
            s.reruns
        );
    }
    if s.narrow_by_pairs > 0 {
        outln!(
            "{} of {} configurations reached ±{:.0}% only through the paired ratio to their native twin (run beside it)",
            s.narrow_by_pairs,
            s.narrow,
            TARGET_REL_HALF_WIDTH * 100.0
        );
    }
    if !s.wide.is_empty() {
        outln!(
            "{} configurations reached their maximum of repetitions without a 95% interval within ±{:.0}% of the median:",
            s.wide.len(),
            TARGET_REL_HALF_WIDTH * 100.0
        );
        for (i, (label, ci)) in s.wide.iter().enumerate().take(20) {
            let why = s.wide_why.get(i).map_or_else(String::new, |w| {
                let mut t = String::new();
                if let Some(o) = w.other_cpu {
                    t.push_str(&format!(
                        "; other processes {:.0}% of the CPU time",
                        o * 100.0
                    ));
                }
                if w.disturbed > 0 {
                    t.push_str(&format!("; {} left out as disturbed", w.disturbed));
                }
                if let Some(p) = w.paired {
                    t.push_str(&format!(
                        "; ratio to native {} (±{:.1}%)",
                        p.display(3),
                        p.rel_half_width() * 100.0
                    ));
                }
                t
            });
            outln!(
                "  {label}: wall {} s (±{:.1}%, {} runs{why})",
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

    /// Fake runs on a host whose steal is 20% for the runs `disturbed`
    /// says (by count of runs so far).
    struct StolenRunner {
        inner: FakeRunner,
        runs: std::sync::atomic::AtomicUsize,
        disturbed: fn(usize) -> bool,
    }
    impl Runner for StolenRunner {
        fn availability(&self, e: Executor) -> Result<(), crate::execute::ExecuteError> {
            self.inner.availability(e)
        }
        fn run(&self, p: &Point) -> Result<Vec<smplab_record::RunRecord>, RunError> {
            let n = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut rs = self.inner.run(p)?;
            for r in &mut rs {
                r.interference = Some(smplab_record::interference::Interference {
                    steal_fraction: if (self.disturbed)(n) { 0.2 } else { 0.0 },
                    ..Default::default()
                });
            }
            Ok(rs)
        }
    }

    #[test]
    fn disturbed_repetitions_are_flagged_excluded_and_rerun_within_a_cap() {
        let spec = ExperimentSpec::from_text("s.toml", TWO).unwrap();
        // Every third run is disturbed: each is rerun at once.
        let runner = StolenRunner {
            inner: FakeRunner::new(),
            runs: Default::default(),
            disturbed: |n| n % 3 == 0,
        };
        let mut store = Store::from_entries(vec![]);
        let s = run_repeated(
            &spec.points,
            &mut store,
            &runner,
            &SweepOptions::default(),
            &Repetitions::fixed(6),
        )
        .unwrap();
        assert!(s.disturbed > 0 && s.reruns == s.disturbed, "{s:?}");
        assert_eq!(s.ok, 12, "a rerun replaces its disturbed run");
        assert_eq!(store.entries().len(), 12 + s.reruns);
        assert!(store.latest().iter().all(|e| !e.disturbed));
        assert!(store.entries().iter().any(|e| e.disturbed));
        // A host that is always disturbed: the reruns stop at the budget,
        // the disturbed repetitions stay flagged and out of the intervals.
        let always = StolenRunner {
            inner: FakeRunner::new(),
            runs: Default::default(),
            disturbed: |_| true,
        };
        let mut store = Store::from_entries(vec![]);
        let s = run_repeated(
            &spec.points,
            &mut store,
            &always,
            &SweepOptions::default(),
            &Repetitions::fixed(6),
        )
        .unwrap();
        assert!(s.reruns <= 12, "budget: one rerun per point, {s:?}");
        assert!(store.latest().iter().all(|e| e.disturbed));
        assert!(s.wide.is_empty(), "no undisturbed repetition: no interval");
        // Threshold 1 keeps every repetition.
        let mut store = Store::from_entries(vec![]);
        let s = run_repeated_with(
            &spec.points,
            &mut store,
            &always,
            &SweepOptions::default(),
            &Repetitions::fixed(6),
            StealThreshold::OFF,
        )
        .unwrap();
        assert_eq!((s.disturbed, s.reruns), (0, 0));
        assert_eq!(store.entries().len(), 12);
    }

    /// A host that is 1.5x slower in every other round: neither the native
    /// nor the VM configuration's own interval gets within ±5%, but the VM
    /// ran beside its native twin, so the paired ratio (exactly the fake's
    /// 2.0) is narrow and the VM configuration stops at the minimum.
    #[test]
    fn a_configuration_beside_its_native_twin_is_narrow_by_the_paired_ratio() {
        struct Drifting(FakeRunner);
        impl Runner for Drifting {
            fn availability(&self, e: Executor) -> Result<(), crate::execute::ExecuteError> {
                self.0.availability(e)
            }
            fn run(&self, p: &Point) -> Result<Vec<smplab_record::RunRecord>, RunError> {
                let mut rs = self.0.run(p)?;
                if p.rep % 2 == 1 {
                    for r in &mut rs {
                        r.timing.wall_ns += r.timing.wall_ns / 2;
                    }
                }
                Ok(rs)
            }
        }
        let spec = ExperimentSpec::from_text(
            "s.toml",
            "name = \"pairs\"\n[matrix]\nexecutor = [\"vm\", \"native\"]\nworkload = \"dedup\"\nvcpus = 2\n",
        )
        .unwrap();
        let (order, twins) = paired_order(&spec.points);
        assert_eq!(order[0].executor(), Executor::Native, "the twin first");
        assert_eq!(order[1].executor(), Executor::Vm);
        assert_eq!(twins, vec![None, Some(0)]);
        let mut store = Store::from_entries(vec![]);
        let reps = Repetitions {
            max: 10,
            ..Repetitions::default()
        };
        let s = run_repeated(
            &spec.points,
            &mut store,
            &Drifting(FakeRunner::new()),
            &SweepOptions::default(),
            &reps,
        )
        .unwrap();
        assert_eq!(s.narrow_by_pairs, 1, "{s:?}");
        assert_eq!(s.wide.len(), 1, "native has no pair: {s:?}");
        assert!(s.wide[0].0.starts_with("native"), "{s:?}");
        let count = |e: Executor| {
            store
                .entries()
                .iter()
                .filter(|x| x.point.executor() == e)
                .count()
        };
        assert_eq!(count(Executor::Vm), 6);
        assert_eq!(count(Executor::Native), 10);
        // Rounds alternate: native then VM, then VM then native.
        let order: Vec<Executor> = store.entries().iter().map(|e| e.point.executor()).collect();
        assert_eq!(
            &order[..4],
            &[
                Executor::Native,
                Executor::Vm,
                Executor::Vm,
                Executor::Native
            ]
        );
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
