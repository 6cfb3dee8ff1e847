//! The `io` section: what device requests (`io` ops) cost to wake their
//! waiters. Every executor that runs `io` ops fills it the same way, so
//! interrupt affinity settings compare across native, vm and sim.

use crate::LatencyHistogram;
use serde::{Deserialize, Serialize};

/// Device-request latencies. Every latency starts at a request's completion
/// (the moment its service time ran out on the device).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct IoSection {
    /// Requests completed.
    pub requests: u64,
    /// Completion → the interrupt handler runs (native: the completion
    /// thread runs; vm: the guest's handler is entered; sim: the handler
    /// starts on the routed vCPU).
    pub irq_latency: LatencyHistogram,
    /// Completion → the thread that waited runs again.
    pub wake_latency: LatencyHistogram,
    /// Submission → completion: queueing behind `queue_depth` plus service.
    pub device_latency: LatencyHistogram,
    /// Interrupts taken per CPU (vCPU index in a VM, host CPU natively),
    /// index = CPU.
    #[serde(default)]
    pub irqs_per_cpu: Vec<u64>,
}
