//! The event queue: a 4-ary min-heap of compact, copyable events ordered by
//! (time, sequence number). The sequence number makes ties deterministic (FIFO
//! among events scheduled for the same instant). No per-event allocation: the
//! heap's buffer grows to the peak number of pending events and stays.
//! Cancelled work is not removed from the heap; events carry a generation that
//! the handler compares with the target's current one (lazy deletion).

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

/// 24 bytes: the heap moves these around on every push and pop, so size
/// matters. The 32-bit sequence number only orders events of the same
/// instant; it would take 4 billion pushes between two same-instant events
/// for the wrap to matter.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub time: u64,
    seq: u32,
    pub kind: Kind,
}

impl Event {
    #[inline]
    fn before(&self, o: &Event) -> bool {
        (self.time, self.seq) < (o.time, o.seq)
    }
}

/// A 4-ary min-heap on (time, seq). Half the depth of a binary heap and the
/// four children of a node share a cache line or two, which matters because
/// popping is the single hottest operation of the simulator.
#[derive(Debug, Default)]
pub struct Queue {
    heap: Vec<Event>,
    seq: u32,
    pub popped: u64,
}

impl Queue {
    pub fn with_capacity(n: usize) -> Queue {
        Queue {
            heap: Vec::with_capacity(n),
            seq: 0,
            popped: 0,
        }
    }

    #[inline]
    pub fn push(&mut self, time: u64, kind: Kind) {
        self.seq = self.seq.wrapping_add(1);
        let e = Event {
            time,
            seq: self.seq,
            kind,
        };
        // Sift up with a hole.
        let mut i = self.heap.len();
        self.heap.push(e);
        while i > 0 {
            let parent = (i - 1) / 4;
            if !e.before(&self.heap[parent]) {
                break;
            }
            self.heap[i] = self.heap[parent];
            i = parent;
        }
        self.heap[i] = e;
    }

    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        let last = self.heap.pop()?;
        self.popped += 1;
        let n = self.heap.len();
        if n == 0 {
            return Some(last);
        }
        let top = self.heap[0];
        // Sift the last element down from the root with a hole.
        let mut i = 0;
        loop {
            let c = 4 * i + 1;
            if c >= n {
                break;
            }
            let mut m = c;
            let end = (c + 4).min(n);
            for j in c + 1..end {
                if self.heap[j].before(&self.heap[m]) {
                    m = j;
                }
            }
            if !self.heap[m].before(&last) {
                break;
            }
            self.heap[i] = self.heap[m];
            i = m;
        }
        self.heap[i] = last;
        Some(top)
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
        assert_eq!(std::mem::size_of::<Event>(), 24);
    }

    #[test]
    fn heap_order_matches_a_sort() {
        let mut q = Queue::default();
        let mut x = 12345u64;
        let mut expect = Vec::new();
        for i in 0..2000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let t = (x >> 40) % 500;
            q.push(t, Kind::Wake { vcpu: i });
            expect.push((t, i));
            if i % 3 == 0 {
                let e = q.pop().unwrap();
                expect.sort();
                let first = expect.remove(0);
                assert_eq!((e.time, e.kind), (first.0, Kind::Wake { vcpu: first.1 }));
            }
        }
        expect.sort();
        for (t, i) in expect {
            let e = q.pop().unwrap();
            assert_eq!((e.time, e.kind), (t, Kind::Wake { vcpu: i }));
        }
        assert!(q.pop().is_none());
    }
}
