//! What the events bench (`benches/events.rs`) and the CPU-time harness
//! (`examples/benchratio.rs`) share: the bench model (the baseline loop,
//! `smplab_sim::bare_heap`, is the library's). One copy, so the harness
//! times exactly what the bench does. In a directory of its own (`mod.rs`): Cargo would take a file
//! directly under `benches/` for a bench target.

use smplab_sim::{Platform, Scenario, SimError, VmSpec};

/// A representative model: two 16-vCPU VMs on 16 pCPUs, one blocking
/// pipeline (dedup) and one barrier program (streamcluster), HLT idle, PLE.
pub fn model() -> Result<Scenario, SimError> {
    let k = Platform::builtin("kvm2015")?;
    let a = VmSpec::from_workload("dedup", Some(16), 0.5, 16)?;
    let b = VmSpec::from_workload("streamcluster", Some(16), 2.0, 16)?;
    let mut s = Scenario::new(k, 16, vec![a, b]);
    s.native_reference = false;
    Ok(s)
}
