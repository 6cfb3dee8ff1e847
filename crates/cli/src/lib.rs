//! The `smplab` command: every subcommand's arguments (clap lives here and
//! nowhere else in the workspace: library crates take typed arguments) and
//! its output. Holds no measurement logic: each command calls into the crate
//! that owns the work (experiment, analysis, report, vmm, sim, trace).
//! Exit statuses: `smplab_record::exit` (documented in README.md).

pub mod bench;
pub mod check;
pub mod demo;
pub mod doctor;
pub mod host;
pub mod lab;
pub mod run;
pub mod sim;
pub mod tune;
pub mod vmm;
pub mod workloads;
