//! `smplab host`: K VMs of the smplab guest in one smplab-vmm process under a
//! user-level vCPU scheduler (smplab-vmm's `host` module, smplab-policy's
//! decisions), and `smplab host bench`, seed 000's weighted speedup for every
//! policy against `linux` (docs/host.md).

pub mod bench;
pub mod cli;
pub mod exec;
pub mod indicators;
pub mod run;
pub mod spec;
pub mod tuned;

pub use run::{run_host, weighted_speedup, HostRun, HostRunError, VmOutcome};
pub use spec::{parse, HostSpec, HostVm};
