//! The event queue: a calendar of time buckets (with a 4-ary heap for far
//! events) holding compact, copyable events ordered by
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
    /// A thread woken by `waker` is made runnable (its vCPU kicked) once the
    /// waker has done the wake work before it (wakes of one burst are serial).
    WakeThread { thread: u32, waker: u32 },
    /// A user-level policy's next deadline (slice end, grace end).
    PolicyTick,
    /// A user-level policy's software spin detector samples running vCPUs.
    PolicySample,
    /// Spin Detection Buffer false positive on a pCPU's current dispatch.
    SdbFalse { pcpu: u32, gen: u32 },
    /// Fair policy: periodic load balance (level 0: inside each LLC domain,
    /// 1: across domains).
    Balance { level: u32 },
    /// The adaptive tuner's window ends (`engine/tune.rs`).
    Tune,
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

/// A 4-ary min-heap on (time, seq): the calendar's overflow for far events.
#[derive(Debug, Default)]
struct Heap {
    heap: Vec<Event>,
}

impl Heap {
    fn peek(&self) -> Option<&Event> {
        self.heap.first()
    }

    fn push(&mut self, e: Event) {
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

    fn pop(&mut self) -> Option<Event> {
        let last = self.heap.pop()?;
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
}

/// End of a bucket's list.
const NIL: u32 = u32::MAX;

/// A pending event in a bucket's singly linked list.
#[derive(Debug, Clone, Copy)]
struct Node {
    ev: Event,
    next: u32,
}

/// The event queue: a calendar of time buckets for the near future plus a
/// heap for the rest. Pushing is O(1); reaching a bucket sorts its events (a
/// handful) once. Order is exactly (time, seq), as with a heap.
///
/// Memory layout is what makes it fast: a bucket is the head of a linked
/// list (4 bytes; all 4096 heads fit in 16 KiB) of nodes in one slab whose
/// free list is LIFO, so a push writes a recently freed, cached node instead
/// of appending to a cold per-bucket buffer milliseconds ahead (which cost a
/// cache miss or two per push in the calendar of `Vec` buckets it replaced).
#[derive(Debug)]
pub struct Queue {
    /// log2 of the bucket width in ns.
    width_log2: u32,
    /// Number of buckets (a power of two) minus one.
    mask: u64,
    heads: Vec<u32>,
    nodes: Vec<Node>,
    /// First free node (NIL: none; the slab grows).
    free: u32,
    /// Absolute index (time >> self.width_log2) of the current bucket. Its events
    /// are in `current`, never in a list.
    cur: u64,
    /// The current bucket's events, sorted in descending order (popped from
    /// the end) once `cur_sorted`.
    current: Vec<Event>,
    cur_sorted: bool,
    near: usize,
    far: Heap,
    seq: u32,
    pub popped: u64,
}

impl Default for Queue {
    fn default() -> Self {
        Queue::with_capacity(0)
    }
}

impl Queue {
    pub fn with_capacity(n: usize) -> Queue {
        Queue::with_shape(n, 12, 10)
    }

    /// A queue shaped for a model of `vcpus` vCPUs. Events per simulated
    /// microsecond grow with the vCPUs (about 0.1-0.3 per vCPU), and a
    /// bucket's events are sorted when it is reached and kept sorted on
    /// insertion, so buckets narrow as the model grows: 1.024 µs up to 511
    /// vCPUs, halving per doubling down to 64 ns from 4096 vCPUs (about 25
    /// events per bucket at the 1024-pCPU scale point instead of 400: -10%
    /// CPU there, measured). The window stays 4.2 ms (2^22 ns).
    pub fn for_vcpus(vcpus: u64) -> Queue {
        let halvings = (vcpus / 256).max(1).ilog2().min(4);
        let width_log2 = 10 - halvings;
        Queue::with_shape(1024, 22 - width_log2, width_log2)
    }

    /// 2^`buckets_log2` buckets of 2^`width_log2` ns; `n` pending events
    /// expected.
    pub fn with_shape(n: usize, buckets_log2: u32, width_log2: u32) -> Queue {
        Queue {
            width_log2,
            mask: (1u64 << buckets_log2) - 1,
            heads: vec![NIL; 1 << buckets_log2],
            nodes: Vec::with_capacity(n),
            free: NIL,
            cur: 0,
            current: Vec::with_capacity(64),
            cur_sorted: false,
            near: 0,
            far: Heap {
                heap: Vec::with_capacity(n),
            },
            seq: 0,
            popped: 0,
        }
    }

    #[inline]
    fn slot(&self, idx: u64) -> usize {
        // At most the bucket count, a usize (free on 64-bit targets).
        usize::try_from(idx & self.mask).unwrap_or(0)
    }

    #[inline]
    fn place(&mut self, e: Event) {
        let idx = e.time >> self.width_log2;
        // Events are never scheduled in the past, so idx >= cur, except for
        // the very first pushes before anything was popped (cur = 0).
        if idx < self.cur + self.mask + 1 {
            if idx <= self.cur {
                if self.cur_sorted {
                    // Keep the current bucket sorted (descending).
                    let pos = self.current.partition_point(|x| e.before(x));
                    self.current.insert(pos, e);
                } else {
                    self.current.push(e);
                }
            } else {
                let slot = self.slot(idx);
                let node = Node {
                    ev: e,
                    next: self.heads[slot],
                };
                let n = if self.free == NIL {
                    self.nodes.push(node);
                    // The slab holds at most the pending events, far fewer than 2^32.
                    u32::try_from(self.nodes.len() - 1).unwrap_or(NIL)
                } else {
                    let n = self.free;
                    self.free = self.nodes[n as usize].next;
                    self.nodes[n as usize] = node;
                    n
                };
                self.heads[slot] = n;
            }
            self.near += 1;
        } else {
            self.far.push(e);
        }
    }

    #[inline]
    pub fn push(&mut self, time: u64, kind: Kind) {
        self.seq = self.seq.wrapping_add(1);
        self.place(Event {
            time,
            seq: self.seq,
            kind,
        });
    }

    /// The next event of the current bucket as things stand (events pushed
    /// before it is popped may come first): a hint for prefetching.
    #[inline]
    pub fn peek_current(&self) -> Option<&Event> {
        if self.cur_sorted {
            self.current.last()
        } else {
            None
        }
    }

    /// Move far events that now fall inside the calendar window.
    fn pull_far(&mut self) {
        while let Some(e) = self.far.peek() {
            if (e.time >> self.width_log2) > self.cur + self.mask {
                break;
            }
            if let Some(e) = self.far.pop() {
                self.place(e);
            }
        }
    }

    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        loop {
            if !self.cur_sorted {
                if self.current.len() > 1 {
                    self.current
                        .sort_unstable_by_key(|e| std::cmp::Reverse((e.time, e.seq)));
                }
                self.cur_sorted = true;
            }
            if let Some(e) = self.current.pop() {
                self.near -= 1;
                self.popped += 1;
                return Some(e);
            }
            self.advance()?;
        }
    }

    /// The current bucket is empty: move to the next bucket (or straight to
    /// the next far event) and gather its events (`pop` sorts them).
    fn advance(&mut self) -> Option<()> {
        if self.near == 0 {
            let t = self.far.peek()?.time;
            self.cur = t >> self.width_log2;
        } else {
            self.cur += 1;
        }
        self.cur_sorted = false;
        let slot = self.slot(self.cur);
        let mut n = std::mem::replace(&mut self.heads[slot], NIL);
        while n != NIL {
            let node = self.nodes[n as usize];
            self.current.push(node.ev);
            self.nodes[n as usize].next = self.free;
            self.free = n;
            n = node.next;
        }
        self.pull_far();
        Some(())
    }

    /// Pending events (including stale ones not yet popped).
    #[allow(dead_code)]
    pub fn len(&self) -> usize {
        self.near + self.far.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_fifo() {
        let mut q = Queue::default();
        q.push(5, Kind::PolicyTick);
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
                (5, Kind::PolicyTick)
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
                // Interleaved pops: later pushes land in the current bucket too.
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

    #[test]
    fn calendar_handles_far_events_and_gaps() {
        // Like the simulator: never push into the past; times from the same
        // instant up to seconds ahead (beyond the calendar window); with the
        // default buckets and the narrowest ones.
        for q in [Queue::default(), Queue::for_vcpus(4096)] {
            far_events_and_gaps(q);
        }
    }

    fn far_events_and_gaps(mut q: Queue) {
        let mut x = 99u64;
        let mut now = 0u64;
        let mut pending: Vec<(u64, u32)> = Vec::new();
        for i in 0..4_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let delta = match x >> 61 {
                0 => 0,
                1 => (x >> 20) % 1_000,
                2 | 3 => (x >> 20) % 100_000,
                4 => (x >> 20) % 10_000_000,
                _ => (x >> 20) % 2_000_000_000,
            };
            q.push(now + delta, Kind::Timer { thread: i });
            pending.push((now + delta, i));
            if x.is_multiple_of(2) {
                pending.sort();
                let (t, id) = pending.remove(0);
                let e = q.pop().unwrap();
                assert_eq!((e.time, e.kind), (t, Kind::Timer { thread: id }));
                now = t;
            }
        }
        pending.sort();
        for (t, id) in pending {
            let e = q.pop().unwrap();
            assert_eq!((e.time, e.kind), (t, Kind::Timer { thread: id }));
        }
        assert!(q.pop().is_none());
    }
}
