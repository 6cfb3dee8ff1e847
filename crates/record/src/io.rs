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

/// The discipline of one device of the workload model (`[devices.NAME]
/// queue_depth`), the same in every executor: at most `depth` requests in
/// service at once, later ones wait in submission order. `R` is what an
/// executor keeps of a request.
#[derive(Debug, Clone)]
pub struct DeviceQueue<R> {
    depth: u32,
    in_service: u32,
    waiting: std::collections::VecDeque<R>,
}

impl<R> DeviceQueue<R> {
    /// A device serving `depth` requests at once (at least 1).
    pub fn new(depth: u32) -> Self {
        DeviceQueue {
            depth: depth.max(1),
            in_service: 0,
            waiting: std::collections::VecDeque::new(),
        }
    }

    /// Submit `request`: it is handed back if it starts service now, kept
    /// (and `None` returned) if it must wait.
    pub fn submit(&mut self, request: R) -> Option<R> {
        if self.in_service < self.depth {
            self.in_service += 1;
            Some(request)
        } else {
            self.waiting.push_back(request);
            None
        }
    }

    /// A request in service completed: the next waiting one, which starts
    /// service now.
    pub fn complete(&mut self) -> Option<R> {
        self.in_service = self.in_service.saturating_sub(1);
        let next = self.waiting.pop_front()?;
        self.in_service += 1;
        Some(next)
    }
}

#[cfg(test)]
mod device_queue_tests {
    use super::DeviceQueue;

    #[test]
    fn serves_depth_at_once_and_the_rest_in_submission_order() {
        let mut q = DeviceQueue::new(2);
        assert_eq!(q.submit(1), Some(1));
        assert_eq!(q.submit(2), Some(2));
        assert_eq!(q.submit(3), None);
        assert_eq!(q.submit(4), None);
        assert_eq!(q.complete(), Some(3));
        assert_eq!(q.complete(), Some(4));
        assert_eq!(q.complete(), None);
        assert_eq!(q.complete(), None);
        assert_eq!(q.submit(5), Some(5), "a free slot serves at once");
        let mut one = DeviceQueue::new(0);
        assert_eq!(one.submit('a'), Some('a'), "depth 0 serves one");
        assert_eq!(one.submit('b'), None);
    }
}
