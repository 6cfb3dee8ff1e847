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

/// A popped event.
#[derive(Debug, Clone, Copy)]
pub struct Popped {
    pub time: u64,
    pub kind: Kind,
}

/// A pending event, 24 bytes: the queue moves these around on every push
/// and pop, so size matters. The 32-bit sequence number only orders events
/// of the same instant; it would take 4 billion pushes between two
/// same-instant events for the wrap to matter.
///
/// The kind is kept as plain integers (`Kind::encode`), not as the enum:
/// the compiler keeps a struct of integers in registers from the push to
/// the store into the queue, where it built the enum on the stack field by
/// field and copied it with wider loads, which the CPU cannot forward from
/// the narrower stores (a stall of a dozen cycles on most pushes, 40% of
/// the queue's insertion time).
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub time: u64,
    seq: u32,
    tag: u32,
    a: u32,
    b: u32,
}

impl Kind {
    /// (variant, first field, second field); `decode` inverts it.
    #[inline(always)]
    fn encode(self) -> (u32, u32, u32) {
        match self {
            Kind::Step { vcpu, gen } => (0, vcpu, gen),
            Kind::Slice { pcpu, gen } => (1, pcpu, gen),
            Kind::Wake { vcpu } => (2, vcpu, 0),
            Kind::Ipi { vcpu, from } => (3, vcpu, from),
            Kind::Timer { thread } => (4, thread, 0),
            Kind::WakeThread { thread, waker } => (5, thread, waker),
            Kind::PolicyTick => (6, 0, 0),
            Kind::PolicySample => (7, 0, 0),
            Kind::SdbFalse { pcpu, gen } => (8, pcpu, gen),
            Kind::Balance { level } => (9, level, 0),
            Kind::Tune => (10, 0, 0),
        }
    }

    #[inline(always)]
    fn decode(tag: u32, a: u32, b: u32) -> Kind {
        match tag {
            0 => Kind::Step { vcpu: a, gen: b },
            1 => Kind::Slice { pcpu: a, gen: b },
            2 => Kind::Wake { vcpu: a },
            3 => Kind::Ipi { vcpu: a, from: b },
            4 => Kind::Timer { thread: a },
            5 => Kind::WakeThread {
                thread: a,
                waker: b,
            },
            6 => Kind::PolicyTick,
            7 => Kind::PolicySample,
            8 => Kind::SdbFalse { pcpu: a, gen: b },
            9 => Kind::Balance { level: a },
            _ => Kind::Tune,
        }
    }
}

impl Event {
    #[inline(always)]
    fn new(time: u64, seq: u32, kind: Kind) -> Event {
        let (tag, a, b) = kind.encode();
        Event {
            time,
            seq,
            tag,
            a,
            b,
        }
    }

    #[inline(always)]
    pub fn kind(&self) -> Kind {
        Kind::decode(self.tag, self.a, self.b)
    }

    /// (time, seq) as one integer: comparing two keys is branch-free,
    /// where comparing the tuples branches on equal times (sorting a
    /// bucket's events mispredicted those branches).
    #[inline(always)]
    fn key(&self) -> u128 {
        (u128::from(self.time) << 32) | u128::from(self.seq)
    }

    #[inline(always)]
    fn before(&self, o: &Event) -> bool {
        self.key() < o.key()
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

    /// A queue for one partition of the partitioned engine
    /// (`engine/partition.rs`): a few hundred thousand events per simulated
    /// second, so 1,024 buckets of 4.1 µs (a 4.2 ms window, as
    /// `for_vcpus`) hold one or two events each and the heads take 4 KiB.
    pub fn for_partition() -> Queue {
        Queue::with_shape(64, 10, 12)
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

    /// Place `e` anywhere (the slow paths of `push`, and `pull_far`).
    #[inline(never)]
    fn place(&mut self, e: Event) {
        let idx = e.time >> self.width_log2;
        // Events are never scheduled in the past, so idx >= cur, except for
        // the very first pushes before anything was popped (cur = 0).
        if idx < self.cur + self.mask + 1 {
            if idx <= self.cur {
                if self.cur_sorted {
                    insert_descending(&mut self.current, e);
                } else {
                    self.current.push(e);
                }
            } else {
                self.link(idx, e);
            }
            self.near += 1;
        } else {
            self.far.push(e);
        }
    }

    /// Put `e` at the head of bucket `idx`'s list (`idx` within the window,
    /// after the current bucket). The caller counts it in `near`.
    #[inline(always)]
    fn link(&mut self, idx: u64, e: Event) {
        let slot = self.slot(idx);
        let n = if self.free == NIL {
            self.grow_slab()
        } else {
            let n = self.free;
            self.free = self.nodes[n as usize].next;
            n
        };
        // Written in place, field by field from registers (a `Node` value
        // built first went through the stack, as in `push`).
        let node = &mut self.nodes[n as usize];
        node.ev = e;
        node.next = self.heads[slot];
        self.heads[slot] = n;
    }

    /// A new (blank) node at the end of the slab (no free node left).
    #[inline(never)]
    fn grow_slab(&mut self) -> u32 {
        self.nodes.push(Node {
            ev: Event::new(0, 0, Kind::Tune),
            next: NIL,
        });
        // The slab holds at most the pending events, far fewer than 2^32.
        u32::try_from(self.nodes.len() - 1).unwrap_or(NIL)
    }

    /// Schedule `kind` at `time` (never before the last popped event).
    ///
    /// The two common cases, a later bucket of the window and the end of the
    /// current bucket (an event earlier than every other of it), are inlined
    /// into the caller: the event's fields go from registers to the node.
    /// Passed to an outlined `place` instead, the event was written to the
    /// stack field by field and read back with wider loads, which the CPU
    /// cannot forward from the narrower stores (a stall of a dozen cycles on
    /// most pushes: 40% of `place`'s time). Same result as `place`: the end
    /// of the sorted (descending) current bucket is where its insertion
    /// point would be. Always inlined: outlined, the event reaches it
    /// through memory again (an enum argument is passed by reference).
    #[inline(always)]
    pub fn push(&mut self, time: u64, kind: Kind) {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        // Each branch builds its own event: one built before the branches
        // lives on the stack (the outlined `place` takes its address), and
        // the fast paths then copy it from there, stalling as above.
        let idx = time >> self.width_log2;
        if idx > self.cur && idx <= self.cur + self.mask {
            self.link(idx, Event::new(time, seq, kind));
            self.near += 1;
        } else if idx <= self.cur
            && (!self.cur_sorted || self.current.last().is_none_or(|l| time < l.time))
        {
            // `time < l.time` is `before` here: `seq` is the newest.
            self.current.push(Event::new(time, seq, kind));
            self.near += 1;
        } else {
            self.place(Event::new(time, seq, kind));
        }
    }

    /// The next event of the current bucket as things stand (events pushed
    /// before it is popped may come first): a hint for prefetching.
    #[inline]
    pub fn peek_current(&self) -> Option<Kind> {
        if self.cur_sorted {
            self.current.last().map(Event::kind)
        } else {
            None
        }
    }

    /// The event after the next one of the current bucket as things stand
    /// (a hint, as `peek_current`).
    #[inline]
    pub fn peek_current_second(&self) -> Option<Kind> {
        if self.cur_sorted {
            let n = self.current.len();
            n.checked_sub(2).map(|i| self.current[i].kind())
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
    pub fn pop(&mut self) -> Option<Popped> {
        // The sequential engine's hot path pops directly: through `front`
        // it measured about 2% slower (examples/benchratio).
        loop {
            if !self.cur_sorted {
                // Only the first bucket: pushes before the first pop.
                self.current
                    .sort_unstable_by_key(|e| std::cmp::Reverse(e.key()));
                self.cur_sorted = true;
            }
            if let Some(e) = self.current.pop() {
                self.near -= 1;
                self.popped += 1;
                return Some(Popped {
                    time: e.time,
                    kind: e.kind(),
                });
            }
            self.advance()?;
        }
    }

    /// The next event, moving to the bucket that holds it (sorting the first
    /// bucket on the first look: pushes before the first pop); `None` when
    /// nothing is pending.
    #[inline(always)]
    fn front(&mut self) -> Option<Event> {
        loop {
            if !self.cur_sorted {
                self.current
                    .sort_unstable_by_key(|e| std::cmp::Reverse(e.key()));
                self.cur_sorted = true;
            }
            if let Some(&e) = self.current.last() {
                return Some(e);
            }
            self.advance()?;
        }
    }

    /// The current bucket is empty: move to the next bucket (or straight to
    /// the next far event) and gather its events, sorted.
    fn advance(&mut self) -> Option<()> {
        if self.near == 0 {
            let t = self.far.peek()?.time;
            self.cur = t >> self.width_log2;
        } else {
            self.cur += 1;
        }
        // Sorted as it is gathered: the events come from nodes written
        // long ago, where sorting after gathering moved events just written
        // (reloading them with other widths than they were stored with
        // stalls the CPU).
        self.cur_sorted = true;
        let slot = self.slot(self.cur);
        let mut n = std::mem::replace(&mut self.heads[slot], NIL);
        while n != NIL {
            let node = self.nodes[n as usize];
            insert_descending(&mut self.current, node.ev);
            self.nodes[n as usize].next = self.free;
            self.free = n;
            n = node.next;
        }
        self.pull_far();
        Some(())
    }

    /// The last sequence number handed out. Queues that share one count
    /// (`set_seq` before pushing, `seq` after) order the events of all of
    /// them as one queue would: the partitioned engine's queues do.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// Continue the sequence numbers from `seq` (see `seq`).
    pub fn set_seq(&mut self, seq: u32) {
        self.seq = seq;
    }

    /// The (time, sequence number) of the next event, if any; moves to the
    /// bucket holding it as `pop` would.
    pub fn head_key(&mut self) -> Option<(u64, u32)> {
        self.front().map(|e| (e.time, e.seq))
    }

    /// Pop the next event if it comes before `limit` (time, sequence
    /// number) and no later than `horizon`; otherwise leave it pending.
    #[inline]
    pub fn pop_before(&mut self, limit: (u64, u32), horizon: u64) -> Option<Popped> {
        let limit = (u128::from(limit.0) << 32) | u128::from(limit.1);
        let e = self.front()?;
        if e.key() >= limit || e.time > horizon {
            return None;
        }
        self.current.pop();
        self.near -= 1;
        self.popped += 1;
        Some(Popped {
            time: e.time,
            kind: e.kind(),
        })
    }

    /// Pending events (including stale ones not yet popped).
    #[allow(dead_code)]
    pub fn len(&self) -> usize {
        self.near + self.far.heap.len()
    }
}

/// The baseline the simulator's speed is compared with: `entities` that each
/// reschedule themselves at a pseudo-random delay (1 to 10,000 ns) in a
/// `std` binary heap; nothing else. Runs `events` pops and returns a
/// checksum (so the loop cannot be optimized away). One copy for the events
/// bench, `examples/benchratio` and `smplab bench sim-scale`.
pub fn bare_heap(entities: u32, events: u64) -> u64 {
    use std::cmp::Reverse;
    let mut heap = std::collections::BinaryHeap::with_capacity(entities as usize);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for e in 0..entities {
        heap.push(Reverse((u64::from(e), e)));
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

/// Events in the current bucket beyond which `insert_descending` searches
/// instead of shifting.
const LONG_BUCKET: usize = 32;

/// Insert `e` into `v`, sorted by descending (time, seq): after the events
/// it comes before. Buckets hold a handful of events, so shifting the
/// later ones by hand beats a binary search and `Vec::insert` (a `memmove`
/// call), and the general sort of a gathered bucket (3% of the
/// simulator's time with its tuple comparisons). The order is total
/// (sequence numbers are unique), so the result is the same.
///
/// A bucket can hold thousands of events at once, though: every vCPU of a
/// large host starts at time 0, and shifting one by one made the start
/// quadratic in the vCPUs (a third of the first 10 ms at 4096 pCPUs). Past
/// `LONG_BUCKET` events a binary search and one `memmove` find the same
/// place.
#[inline]
fn insert_descending(v: &mut Vec<Event>, e: Event) {
    if v.len() > LONG_BUCKET {
        let at = v.partition_point(|x| e.before(x));
        v.insert(at, e);
        return;
    }
    v.push(e);
    let mut j = v.len() - 1;
    while j > 0 && v[j - 1].before(&e) {
        v[j] = v[j - 1];
        j -= 1;
    }
    v[j] = e;
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
        let kinds = [
            Kind::Step { vcpu: 1, gen: 2 },
            Kind::Slice { pcpu: 3, gen: 4 },
            Kind::Wake { vcpu: 5 },
            Kind::Ipi { vcpu: 6, from: 7 },
            Kind::Timer { thread: 8 },
            Kind::WakeThread {
                thread: 9,
                waker: 10,
            },
            Kind::PolicyTick,
            Kind::PolicySample,
            Kind::SdbFalse { pcpu: 11, gen: 12 },
            Kind::Balance { level: 13 },
            Kind::Tune,
        ];
        for k in kinds {
            assert_eq!(Event::new(1, 2, k).kind(), k);
        }
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
