//! `smplab bench`: benchmarks on real workloads.

pub mod io;
pub mod irqchip;
