//! `smplab bench`: benchmarks on real workloads. Each bench is a set of
//! points (the same as its built-in spec, `crates/experiment/specs/bench-*.toml`,
//! at the default flags) run through the one execute path into a results
//! store, and an analysis view of that store (`smplab_analysis::bench`).

pub mod io;
pub mod irqchip;
pub mod sim_scale;

use smplab_experiment::point::Point;
use smplab_experiment::runner::Runner;
use smplab_experiment::store::Store;
use smplab_experiment::sweep::{self, Repetitions, SweepOptions, SweepSummary};
use smplab_record::exit;
use smplab_record::interference::StealThreshold;
use std::path::{Path, PathBuf};

/// Where a bench stores its results unless `--store` says otherwise: the
/// store `smplab lab run bench-NAME` uses too.
pub fn default_store(bench: &str) -> PathBuf {
    Path::new("lab-results").join(bench).join("results.jsonl")
}

/// Run `points` into the store at `path` (`reps` as given: every point's
/// repetition, or adaptively), resuming from what it holds; the store and
/// the sweep's summary, or the exit status of a store that cannot be used.
pub fn run_into_store(
    points: &[Point],
    path: &Path,
    runner: &dyn Runner,
    reps: Option<&Repetitions>,
) -> Result<(Store, SweepSummary), i32> {
    run_into_store_with(points, path, runner, reps, StealThreshold::default())
}

/// [`run_into_store`] with a steal threshold (`--steal-threshold`).
pub fn run_into_store_with(
    points: &[Point],
    path: &Path,
    runner: &dyn Runner,
    reps: Option<&Repetitions>,
    steal: StealThreshold,
) -> Result<(Store, SweepSummary), i32> {
    let mut store = Store::open(path).map_err(|e| {
        exit::report_error(&e);
        exit::BAD_INPUT
    })?;
    let opts = SweepOptions {
        retry_failed: false,
        progress: true,
    };
    let summary = match reps {
        None => sweep::run_points_with(points, &mut store, runner, &opts, steal),
        Some(r) => sweep::run_repeated_with(points, &mut store, runner, &opts, r, steal),
    }
    .map_err(|e| {
        exit::report_error(&e);
        exit::RUN_FAILED
    })?;
    Ok((store, summary))
}

/// The latest stored entries of the configurations of `points` (any
/// repetition): what a bench's view is given.
pub fn entries_of<'a>(
    store: &'a Store,
    points: &[Point],
) -> Vec<&'a smplab_experiment::store::Entry> {
    let keys: std::collections::HashSet<String> = points.iter().map(Point::config_key).collect();
    store
        .latest()
        .into_iter()
        .filter(|e| keys.contains(&e.point.config_key()))
        .collect()
}

/// Every point of `configs` at repetitions `0..reps`, round-robin (all of
/// repetition 0 first), as a spec expands them.
pub fn repeat(configs: &[Point], reps: u32) -> Vec<Point> {
    let mut out = Vec::with_capacity(configs.len() * reps as usize);
    for rep in 0..reps {
        for c in configs {
            let mut p = c.clone();
            p.rep = rep;
            out.push(p);
        }
    }
    out
}
