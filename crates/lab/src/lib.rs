//! smplab lab: turns the executors (native, vm, qemu, sim) into answers.
//!
//! - [`spec`]: experiment specs (TOML matrices) expanded into [`point::Point`]s;
//! - [`store`]: the crash-safe JSON-lines results store;
//! - [`sweep`]: running points through a [`runner::Runner`], resumable;
//! - [`slurm`]: sweeps as Slurm job arrays, one result file per point;
//! - [`metrics`]: slowdown, weighted speedup, exit rates, idle/spin fractions,
//!   latency percentiles, speedup vs vCPUs beside the Amdahl projection;
//! - [`diagnose`]: the seed-000 remove-one-factor-at-a-time method;
//! - [`calibrate`]: host measurements → simulator platform profile;
//! - [`report`]: self-contained HTML with inline SVG, and CSV;
//! - [`demo`]: the small end-to-end study `smplab demo` runs;
//! - [`cli`]: clap arguments and entry points for the `smplab` binary.
//!
//! See docs/lab.md for formats, definitions and caveats.

/// `println!` that ignores a closed stdout (`smplab demo | head` must not
/// panic on EPIPE).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}
/// `print!` that ignores a closed stdout.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

pub mod bench_io;
pub mod bench_irqchip;
pub mod calibrate;
pub mod cli;
pub mod demo;
pub mod diagnose;
pub mod diagnose_sim;
pub mod exec;
pub mod execute;
pub mod host;
pub mod metrics;
pub mod point;
pub mod report;
pub mod runner;
pub mod simglue;
pub mod slurm;
pub mod spec;
pub mod stats;
pub mod store;
pub mod svg;
pub mod sweep;
pub mod tune;
pub mod tune_cli;
pub mod tune_host;

#[cfg(test)]
mod browser_test;
#[cfg(test)]
pub(crate) mod testutil;

pub use point::{Point, Variant};
pub use runner::{RunError, Runner};
pub use spec::{ExperimentSpec, SpecError};
pub use store::{Entry, Status, Store, StoreError};
