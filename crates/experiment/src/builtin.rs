//! The experiment specs smplab ships (`crates/experiment/specs/`), for the
//! commands that run them.

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
