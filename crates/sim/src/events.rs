//! The event queue: a binary min-heap of compact, copyable events ordered by
//! (time, sequence number). The sequence number makes ties deterministic (FIFO
//! among events scheduled for the same instant). No per-event allocation: the
//! heap's buffer grows to the peak number of pending events and stays.
//! Cancelled work is not removed from the heap; events carry a generation that
//! the handler compares with the target's current one (lazy deletion).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What happens. 12 bytes; `Copy`, no heap data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The vCPU's current activity reaches its next decision point.
    Step { vcpu: u32, gen: u32 },
    /// A pCPU's time slice ends.
    Slice { pcpu: u32, gen: u32 },
    /// A halted vCPU's wakeup (kick) reaches the host scheduler.
    Wake { vcpu: u32 },
    /// A shootdown IPI from thread `from` arrives at a vCPU.
    Ipi { vcpu: u32, from: u32 },
    /// A sleeping thread's timer expires.
    Timer { thread: u32 },
    /// Gang scheduling: rotate to the next group of VMs.
    Gang,
    /// Spin Detection Buffer false positive on a pCPU's current dispatch.
    SdbFalse { pcpu: u32, gen: u32 },
}

#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub time: u64,
    seq: u64,
    pub kind: Kind,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    // Reversed: BinaryHeap is a max-heap, we pop the earliest.
    fn cmp(&self, o: &Self) -> Ordering {
        o.time.cmp(&self.time).then(o.seq.cmp(&self.seq))
    }
}

#[derive(Debug, Default)]
pub struct Queue {
    heap: BinaryHeap<Event>,
    seq: u64,
    pub popped: u64,
}

impl Queue {
    pub fn with_capacity(n: usize) -> Queue {
        Queue {
            heap: BinaryHeap::with_capacity(n),
            seq: 0,
            popped: 0,
        }
    }

    #[inline]
    pub fn push(&mut self, time: u64, kind: Kind) {
        self.seq += 1;
        self.heap.push(Event {
            time,
            seq: self.seq,
            kind,
        });
    }

    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        let e = self.heap.pop();
        if e.is_some() {
            self.popped += 1;
        }
        e
    }

    /// Pending events (including stale ones not yet popped).
    #[allow(dead_code)]
    pub fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_fifo() {
        let mut q = Queue::default();
        q.push(5, Kind::Gang);
        q.push(3, Kind::Wake { vcpu: 1 });
        q.push(3, Kind::Wake { vcpu: 2 });
        let order: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|e| (e.time, e.kind))
            .collect();
        assert_eq!(
            order,
            vec![
                (3, Kind::Wake { vcpu: 1 }),
                (3, Kind::Wake { vcpu: 2 }),
                (5, Kind::Gang)
            ]
        );
        assert_eq!(std::mem::size_of::<Kind>(), 12);
    }
}
