//! What the events bench (`benches/events.rs`) and the CPU-time harness
//! (`examples/benchratio.rs`) share: the bench model and the issue's
//! baseline loop. One copy, so the harness times exactly what the bench
//! does. In a directory of its own (`mod.rs`): Cargo would take a file
//! directly under `benches/` for a bench target.

use smplab_sim::{Platform, Scenario, SimError, VmSpec};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The baseline: entities that each reschedule themselves at a pseudo-random
/// delay; nothing else. Same heap size as the model (one pending event per
/// vCPU, give or take).
pub fn bare_heap(entities: u32, events: u64) -> u64 {
    let mut heap = BinaryHeap::with_capacity(entities as usize);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for e in 0..entities {
        heap.push(Reverse((e as u64, e)));
    }
    let mut sum = 0u64;
    for _ in 0..events {
        let Some(Reverse((t, e))) = heap.pop() else {
            break;
        };
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        sum = sum.wrapping_add(t);
        heap.push(Reverse((t + 1 + (x % 10_000), e)));
    }
    sum
}

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
