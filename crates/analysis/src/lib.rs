//! smplab analysis: results in, answers out.
//!
//! - [`metrics`]: results by configuration, slowdown and weighted speedup,
//!   exit counts and rates, latency percentiles, speedup versus vCPUs beside
//!   the Amdahl projection, simulator predictions beside measurements;
//! - [`diagnose`]: the remove-one-factor-at-a-time method of Ding & Shan,
//!   "Diagnosing Virtualization Overhead for Multi-threaded Computation on
//!   Multicore Platforms", and the simulator's own account of its slowdown;
//! - [`calibrate`]: host measurements to a simulator platform profile, and
//!   the held-out check of its predictions;
//! - [`tune`]: the adaptive tuner of Kulkarni & Kulkarni, "Benchmarking
//!   Multiprocessing Parameters in a Virtualized Multi-Core Environment",
//!   against their matrix's static settings.
//!
//! - [`claims`]: the claims ledger (docs/claims.toml): every figure the docs
//!   state, recomputed or re-measured, and the docs' figure tables from it;
//!
//! - [`bench`]: the views of the benches (`smplab bench irqchip`, `bench io`,
//!   `host bench`): each a table from the bench's stored results.
//!
//! Statistics (one median, one interval) are `smplab_stats`'s. See
//! docs/lab.md for definitions and caveats.

pub mod bench;
pub mod calibrate;
pub mod claims;
pub mod diagnose;
pub mod metrics;
pub mod tune;
