//! The per-thread interpreter: walks a group's op list and performs each op
//! for real on the shared primitives, counting what it did.

use crate::primitives::{Aborted, Ctx};
use crate::shared::Shared;
use crate::sys::{self, Mapping};
use smplab_workload::program::{counter_names, OpCounts};
use smplab_workload::{compute, BufferRef, Op, Rmw};
use std::sync::atomic::{AtomicU8, Ordering};

/// Position of `name` in `counter_names::ALL`, computed at compile time so the
/// indices below can never drift from the shared order.
const fn counter_index(name: &str) -> usize {
    let all = counter_names::ALL;
    let mut i = 0;
    while i < all.len() {
        let a = all[i].as_bytes();
        let b = name.as_bytes();
        if a.len() == b.len() {
            let mut j = 0;
            let mut same = true;
            while j < a.len() {
                if a[j] != b[j] {
                    same = false;
                }
                j += 1;
            }
            if same {
                return i;
            }
        }
        i += 1;
    }
    panic!("unknown counter name")
}

const C_COMPUTE: usize = counter_index(counter_names::COMPUTE);
const C_COMPUTE_ITERS: usize = counter_index(counter_names::COMPUTE_ITERS);
const C_TOUCH: usize = counter_index(counter_names::TOUCH);
const C_TOUCH_BYTES: usize = counter_index(counter_names::TOUCH_BYTES);
const C_SPIN_LOCK: usize = counter_index(counter_names::SPIN_LOCK);
const C_MUTEX_LOCK: usize = counter_index(counter_names::MUTEX_LOCK);
const C_BARRIER: usize = counter_index(counter_names::BARRIER);
const C_PUSH: usize = counter_index(counter_names::PUSH);
const C_POP: usize = counter_index(counter_names::POP);
const C_ATOMIC: usize = counter_index(counter_names::ATOMIC);
const C_SLEEP: usize = counter_index(counter_names::SLEEP);
const C_YIELD: usize = counter_index(counter_names::YIELD);
const C_SHOOTDOWN: usize = counter_index(counter_names::SHOOTDOWN);
const C_IO: usize = counter_index(counter_names::IO);

/// Compute iterations between abort checks (about 20-40 ms at ~1-2 ns each).
const COMPUTE_SLICE: u64 = 1 << 24;
/// Longest single nanosleep; longer sleeps are split.
const SLEEP_SLICE_NS: u64 = 100_000_000;

/// Why a thread stopped before finishing its ops.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The run is being torn down; the reason is recorded elsewhere.
    Aborted,
    /// This thread hit a system error.
    Failed(String),
}

impl From<Aborted> for Stop {
    fn from(_: Aborted) -> Self {
        Stop::Aborted
    }
}

/// Per-object tallies a thread keeps so the run can prove conservation
/// (locks balanced, every push popped) without extra shared atomics.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tallies {
    pub spin_acquires: Vec<u64>,
    pub spin_releases: Vec<u64>,
    pub mutex_acquires: Vec<u64>,
    pub mutex_releases: Vec<u64>,
    pub pushes: Vec<u64>,
    pub pops: Vec<u64>,
    /// Wrapping sum of tokens pushed / popped per queue.
    pub push_sum: Vec<u64>,
    pub pop_sum: Vec<u64>,
    /// Units claimed from each pool.
    pub claims: Vec<u64>,
}

impl Tallies {
    pub fn new(s: &Shared) -> Self {
        Tallies {
            spin_acquires: vec![0; s.spin_locks.len()],
            spin_releases: vec![0; s.spin_locks.len()],
            mutex_acquires: vec![0; s.mutexes.len()],
            mutex_releases: vec![0; s.mutexes.len()],
            pushes: vec![0; s.queues.len()],
            pops: vec![0; s.queues.len()],
            push_sum: vec![0; s.queues.len()],
            pop_sum: vec![0; s.queues.len()],
            claims: vec![0; s.pools.len()],
        }
    }

    pub fn add(&mut self, o: &Tallies) {
        fn sum(a: &mut [u64], b: &[u64]) {
            for (x, y) in a.iter_mut().zip(b) {
                *x = x.wrapping_add(*y);
            }
        }
        sum(&mut self.spin_acquires, &o.spin_acquires);
        sum(&mut self.spin_releases, &o.spin_releases);
        sum(&mut self.mutex_acquires, &o.mutex_acquires);
        sum(&mut self.mutex_releases, &o.mutex_releases);
        sum(&mut self.pushes, &o.pushes);
        sum(&mut self.pops, &o.pops);
        sum(&mut self.push_sum, &o.push_sum);
        sum(&mut self.pop_sum, &o.pop_sum);
        sum(&mut self.claims, &o.claims);
    }
}

pub(crate) struct Worker<'a> {
    pub shared: &'a Shared,
    pub ctx: Ctx<'a>,
    pub counts: OpCounts,
    pub tallies: Tallies,
    pub private: Mapping,
    /// Global thread number (start order), for tokens and swap values.
    pub tid: u64,
    /// Compute kernel state, carried across compute ops like `rax` in the guest.
    pub state: u64,
    /// Sum of bytes read by touches, kept observable so reads are not elided.
    pub sink: u64,
    /// Completion → running-again latency of each `io` op, ns.
    pub io_wake_ns: Vec<u64>,
    tokens: u64,
}

impl<'a> Worker<'a> {
    pub fn new(shared: &'a Shared, ctx: Ctx<'a>, private: Mapping, tid: u64) -> Self {
        Worker {
            tallies: Tallies::new(shared),
            shared,
            ctx,
            counts: OpCounts::default(),
            private,
            tid,
            state: tid,
            sink: 0,
            io_wake_ns: Vec::new(),
            tokens: 0,
        }
    }

    #[inline]
    fn bump(&mut self, i: usize, by: u64) {
        self.counts.0[i] = self.counts.0[i].wrapping_add(by);
    }

    pub fn run(&mut self, ops: &[Op]) -> Result<(), Stop> {
        for op in ops {
            self.op(op)?;
        }
        Ok(())
    }

    /// One op. Kept as one function on purpose: split into `#[inline]`
    /// helpers, a pinned one-thread op loop ran 4-7% slower (1.070x
    /// [1.056, 1.080], then 1.041x [1.014, 1.055]; a layout-only control
    /// 1.031x), and this is the loop native figures are measured by.
    fn op(&mut self, op: &Op) -> Result<(), Stop> {
        // Indices were checked against the tables before any thread started
        // (`Shared::check`), so indexing below cannot go out of range.
        let s = self.shared;
        match op {
            Op::Compute { iters } => {
                // In slices of COMPUTE_SLICE iterations (tens of milliseconds)
                // with an abort check between them, so even an absurd count can
                // be torn down. The instruction stream is the same loop; the
                // state carries across slices exactly as across iterations.
                let mut left = *iters;
                while left > 0 {
                    let n = left.min(COMPUTE_SLICE);
                    self.state = std::hint::black_box(compute::compute(n, self.state));
                    left -= n;
                    if left > 0 && self.ctx.aborted() {
                        return Err(Stop::Aborted);
                    }
                }
                self.bump(C_COMPUTE, 1);
                self.bump(C_COMPUTE_ITERS, *iters);
            }
            Op::Touch {
                buffer,
                bytes,
                stride,
                write,
            } => {
                let buf: &[AtomicU8] = match buffer {
                    BufferRef::Private => self.private.bytes(),
                    BufferRef::Shared(i) => s.buffers[*i as usize].bytes(),
                };
                self.sink = self.sink.wrapping_add(touch(buf, *bytes, *stride, *write));
                self.bump(C_TOUCH, 1);
                self.bump(C_TOUCH_BYTES, *bytes);
            }
            Op::SpinLock(i) => {
                s.spin_locks[*i as usize].lock(&mut self.ctx)?;
                self.tallies.spin_acquires[*i as usize] += 1;
                self.bump(C_SPIN_LOCK, 1);
            }
            Op::SpinUnlock(i) => {
                s.spin_locks[*i as usize].unlock();
                self.tallies.spin_releases[*i as usize] += 1;
            }
            Op::MutexLock(i) => {
                s.mutexes[*i as usize].lock(&mut self.ctx)?;
                self.tallies.mutex_acquires[*i as usize] += 1;
                self.bump(C_MUTEX_LOCK, 1);
            }
            Op::MutexUnlock(i) => {
                s.mutexes[*i as usize].unlock(&mut self.ctx);
                self.tallies.mutex_releases[*i as usize] += 1;
            }
            Op::Barrier(i) => {
                s.barriers[*i as usize].wait(&mut self.ctx)?;
                self.bump(C_BARRIER, 1);
            }
            Op::Push(i) => {
                // A token unique in the run: thread number and sequence.
                let token = (self.tid << 40) | (self.tokens & ((1 << 40) - 1));
                self.tokens += 1;
                s.queues[*i as usize].push(token, &mut self.ctx)?;
                let q = *i as usize;
                self.tallies.pushes[q] += 1;
                self.tallies.push_sum[q] = self.tallies.push_sum[q].wrapping_add(token);
                self.bump(C_PUSH, 1);
            }
            Op::Pop(i) => {
                let token = s.queues[*i as usize].pop(&mut self.ctx)?;
                let q = *i as usize;
                self.tallies.pops[q] += 1;
                self.tallies.pop_sum[q] = self.tallies.pop_sum[q].wrapping_add(token);
                self.bump(C_POP, 1);
            }
            Op::Atomic { counter, rmw } => {
                let c = &s.counters[*counter as usize].0;
                match rmw {
                    Rmw::Add => {
                        c.fetch_add(1, Ordering::AcqRel);
                    }
                    Rmw::Cas => {
                        let mut old = c.load(Ordering::Relaxed);
                        while let Err(now) = c.compare_exchange_weak(
                            old,
                            old.wrapping_add(1),
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        ) {
                            old = now;
                        }
                    }
                    Rmw::Swap => {
                        c.swap(self.tid + 1, Ordering::AcqRel);
                    }
                }
                self.bump(C_ATOMIC, 1);
            }
            Op::SleepNs(ns) => {
                // Long sleeps in slices, so a teardown does not wait them out;
                // the total is still at least `ns`.
                let mut left = *ns;
                while left > 0 {
                    let n = left.min(SLEEP_SLICE_NS);
                    sys::sleep_ns(n);
                    left -= n;
                    if left > 0 && self.ctx.aborted() {
                        return Err(Stop::Aborted);
                    }
                }
                self.bump(C_SLEEP, 1);
            }
            Op::Yield(times) => {
                for _ in 0..*times {
                    sys::yield_now();
                    self.bump(C_YIELD, 1);
                    // A system call per pass: the flag check is free.
                    if self.ctx.aborted() {
                        return Err(Stop::Aborted);
                    }
                }
            }
            Op::Shootdown { pages } => {
                // Dropping write permission from pages every thread has mapped
                // forces the kernel to flush their TLB entries on every CPU
                // running one of our threads (IPIs, acknowledged before mprotect
                // returns); restoring it puts things back for the next round.
                let pages = *pages as usize;
                s.shoot
                    .protect(pages, libc::PROT_READ)
                    .and_then(|()| s.shoot.protect(pages, libc::PROT_READ | libc::PROT_WRITE))
                    .map_err(|e| Stop::Failed(format!("shootdown mprotect failed: {e}")))?;
                self.bump(C_SHOOTDOWN, 1);
            }
            Op::Io { device, service_ns } => {
                let tid = usize::try_from(self.tid).unwrap_or(usize::MAX);
                let (wake_ns, slept) = s.devices.io(tid, *device, *service_ns, &self.ctx)?;
                self.io_wake_ns.push(wake_ns);
                if slept {
                    self.ctx.stats.blocks += 1;
                }
                self.bump(C_IO, 1);
            }
            Op::Repeat { count, body } => {
                for _ in 0..*count {
                    self.run(body)?;
                    if self.ctx.aborted() {
                        return Err(Stop::Aborted);
                    }
                }
            }
            Op::Drain { pool, body } => {
                let left = &s.pools[*pool as usize].0;
                // One `lock xadd` per claim: the unit is ours if there was one.
                while left.fetch_sub(1, Ordering::AcqRel) > 0 {
                    self.tallies.claims[*pool as usize] += 1;
                    self.run(body)?;
                    if self.ctx.aborted() {
                        return Err(Stop::Aborted);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Walk `bytes` of `buf` with `stride`: read each byte, write it back plus one
/// if `write`. Relaxed atomic byte accesses compile to plain loads and stores
/// but, unlike plain ones, are neither elided nor merged by the compiler and are
/// not a data race on shared buffers. Returns the sum of bytes read.
fn touch(buf: &[AtomicU8], bytes: u64, stride: u64, write: bool) -> u64 {
    let end = usize::try_from(bytes).unwrap_or(usize::MAX).min(buf.len());
    let stride = usize::try_from(stride.max(1)).unwrap_or(usize::MAX);
    let mut sum = 0u64;
    let mut i = 0usize;
    while i < end {
        let v = buf[i].load(Ordering::Relaxed);
        if write {
            buf[i].store(v.wrapping_add(1), Ordering::Relaxed);
        }
        sum = sum.wrapping_add(u64::from(v));
        i = match i.checked_add(stride) {
            Some(n) => n,
            None => break,
        };
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_indices_follow_the_shared_order() {
        let idx = [
            C_COMPUTE,
            C_COMPUTE_ITERS,
            C_TOUCH,
            C_TOUCH_BYTES,
            C_SPIN_LOCK,
            C_MUTEX_LOCK,
            C_BARRIER,
            C_PUSH,
            C_POP,
            C_ATOMIC,
            C_SLEEP,
            C_YIELD,
            C_SHOOTDOWN,
            C_IO,
        ];
        let mut seen: Vec<usize> = idx.to_vec();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), counter_names::ALL.len(), "every counter, once");
        assert_eq!(counter_names::ALL[C_YIELD], counter_names::YIELD);
        assert_eq!(counter_names::ALL[C_SHOOTDOWN], counter_names::SHOOTDOWN);
    }

    #[test]
    fn touch_reads_and_writes_every_stride_step() {
        let buf: Vec<AtomicU8> = (0..100).map(|_| AtomicU8::new(1)).collect();
        assert_eq!(touch(&buf, 100, 10, true), 10);
        assert_eq!(touch(&buf, 100, 10, false), 20, "written back plus one");
        assert_eq!(
            buf[5].load(Ordering::Relaxed),
            1,
            "off-stride bytes untouched"
        );
        // Larger than the buffer or stride 0: clamped, no panic.
        assert_eq!(touch(&buf, 1 << 40, 0, false), 110);
    }
}
