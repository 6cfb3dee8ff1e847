//! The experiment specs smplab ships (`crates/experiment/specs/`), for the
//! commands that run them, found by name where no file of that name exists
//! (`smplab lab run bench-io`, and the Slurm tasks it submits).

use crate::spec::{ExperimentSpec, SpecError};
use std::path::Path;

/// Seed 001's parameter matrix (Kulkarni & Kulkarni, "Benchmarking
/// Multiprocessing Parameters in a Virtualized Multi-Core Environment"), at
/// its own scale, for the simulator.
pub const SEED001_MATRIX: &str = include_str!("../specs/seed001-matrix.toml");
/// The same matrix sized for this host (two CPUs), for real runs.
pub const SEED001_MATRIX_HERE: &str = include_str!("../specs/seed001-matrix-here.toml");
/// `smplab bench irqchip`'s points at its default flags.
pub const BENCH_IRQCHIP: &str = include_str!("../specs/bench-irqchip.toml");
/// `smplab bench io`'s points at its default flags.
pub const BENCH_IO: &str = include_str!("../specs/bench-io.toml");
/// `smplab host bench`'s points at its default flags.
pub const BENCH_HOST: &str = include_str!("../specs/bench-host.toml");

/// Every built-in spec, by name.
pub const SPECS: &[(&str, &str)] = &[
    ("seed001-matrix", SEED001_MATRIX),
    ("seed001-matrix-here", SEED001_MATRIX_HERE),
    ("bench-irqchip", BENCH_IRQCHIP),
    ("bench-io", BENCH_IO),
    ("bench-host", BENCH_HOST),
];

/// The built-in spec `path` names, when no file of that name exists.
pub fn named(path: &Path) -> Option<(&'static str, &'static str)> {
    if path.exists() {
        return None;
    }
    let name = path.to_str()?;
    SPECS.iter().find(|(n, _)| *n == name).copied()
}

/// A spec file, or a built-in spec when `path` names one and no such file exists.
pub fn load(path: &Path) -> Result<ExperimentSpec, SpecError> {
    match named(path) {
        Some((n, text)) => ExperimentSpec::from_text(&format!("(built-in spec {n})"), text),
        None => ExperimentSpec::from_file(path),
    }
}
