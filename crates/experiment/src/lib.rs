//! smplab experiments: what runs, where, and where its results go.
//!
//! - [`spec`]: experiment specs (TOML matrices) expanded into [`point::Point`]s;
//! - [`execute`]: the one execute path, `execute(program, info, config,
//!   limits)`, to every executor (native, smplab-vmm, QEMU, the simulator,
//!   host runs of K VMs under one policy);
//! - [`runner`]: what sweeps run points with (the real executors or a fake);
//! - [`store`]: the crash-safe JSON-lines results store;
//! - [`sweep`]: running points through a [`runner::Runner`], resumable, with
//!   adaptive repetitions;
//! - [`slurm`]: sweeps as Slurm job arrays, one result file per point;
//! - [`host`]: `smplab host`'s K VMs under one user-level vCPU scheduler;
//! - [`builtin`]: the specs smplab ships.
//!
//! See docs/lab.md for formats, definitions and caveats.

pub mod availability;
pub mod builtin;
pub mod execute;
pub mod host;
pub mod point;
pub mod repetitions;
pub mod runner;
pub mod slurm;
pub mod spec;
pub mod store;
pub mod sweep;

/// Helpers for tests of this crate and the crates above it.
#[doc(hidden)]
pub mod testutil;

pub use point::{Point, Variant};
pub use runner::{RunError, Runner};
pub use spec::{ExperimentSpec, SpecError};
pub use store::{Entry, Status, Store, StoreError};
