//! `smplab host`: K VMs of the smplab guest in one smplab-vmm process under a
//! user-level vCPU scheduler (smplab-vmm's `host` module, smplab-policy's
//! decisions): the host spec, launching its VMs, and Kulkarni & Kulkarni's tuner inside
//! the host (docs/host.md).

pub mod bench_scale;
pub mod indicators;
pub mod launch;
pub mod spec;
pub mod tuned;

pub use launch::{run_host, weighted_speedup, workload_wall_s, HostRun, HostRunError, VmOutcome};
pub use spec::{parse, HostSpec, HostVm};
