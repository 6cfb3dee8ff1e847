//! Everything the threads of one run share: the program's primitives, buffers,
//! the shootdown mapping, and the start gate / finish / abort machinery.

use crate::device::Devices;
use crate::gate::StartGate;
use crate::primitives::{Barrier, BoundedQueue, CachePadded, FutexMutex, SpinLock};
use crate::sys::{Mapping, PAGE};
use crate::NativeError;
use smplab_workload::{BufferRef, Op, Program};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

pub(crate) struct Shared {
    pub spin_locks: Vec<SpinLock>,
    pub mutexes: Vec<FutexMutex>,
    pub barriers: Vec<Barrier>,
    pub queues: Vec<BoundedQueue>,
    pub counters: Vec<CachePadded<AtomicU64>>,
    /// Units left in each pool; `drain` claims with a fetch-and-decrement,
    /// so it goes below zero by at most one per thread that found it empty.
    pub pools: Vec<CachePadded<AtomicI64>>,
    pub buffers: Vec<Mapping>,
    /// The devices `io` ops submit to (and their completion slots).
    pub devices: Devices,
    /// Pages every thread writes once before the start gate; shootdowns
    /// mprotect a prefix of it.
    pub shoot: Mapping,
    /// Read by every thread once per loop iteration: its own cache line, so
    /// the writes to `ready`/`finished` never invalidate it.
    pub abort: CachePadded<AtomicBool>,
    /// Where every thread waits, ready, for the others (`gate.rs`).
    pub gate: StartGate,
    /// Threads that reached the gate or gave up before it.
    pub ready: AtomicU32,
    /// Threads that are done (finished, failed, aborted or panicked).
    pub finished: AtomicU32,
    /// The first failure; later ones are usually consequences of it.
    pub failure: Mutex<Option<NativeError>>,
}

impl Shared {
    /// The state of one run of `p` whose threads can use `cpus` CPUs.
    pub fn new(p: &Program, cpus: usize) -> Result<Self, NativeError> {
        check(p)?;
        let mut buffers = Vec::with_capacity(p.buffers.len());
        for b in &p.buffers {
            let bytes = usize::try_from(b.bytes).unwrap_or(usize::MAX);
            buffers.push(Mapping::new(bytes).map_err(|e| NativeError::Memory {
                what: format!("shared buffer `{}` ({} bytes)", b.name, b.bytes),
                source: e,
            })?);
        }
        let pages = max_shootdown_pages(p);
        let shoot = Mapping::new(pages.saturating_mul(PAGE)).map_err(|e| NativeError::Memory {
            what: format!("shootdown region ({pages} pages)"),
            source: e,
        })?;
        Ok(Shared {
            spin_locks: p
                .spin_locks
                .iter()
                .map(|l| SpinLock::new(l.kind.into(), l.pause))
                .collect(),
            mutexes: p
                .mutexes
                .iter()
                .map(|m| FutexMutex::new(m.spin_limit))
                .collect(),
            barriers: p
                .barriers
                .iter()
                .map(|b| Barrier::new(b.parties, b.wait.into(), b.spin_limit, b.pause))
                .collect(),
            queues: p
                .queues
                .iter()
                .map(|q| BoundedQueue::new(q.capacity))
                .collect(),
            counters: p
                .counters
                .iter()
                .map(|_| CachePadded(AtomicU64::new(0)))
                .collect(),
            pools: p
                .pools
                .iter()
                // `check` refused units beyond i64::MAX.
                .map(|q| CachePadded(AtomicI64::new(i64::try_from(q.units).unwrap_or(i64::MAX))))
                .collect(),
            buffers,
            devices: Devices::new(p),
            shoot,
            abort: CachePadded(AtomicBool::new(false)),
            gate: StartGate::new(p.threads().len(), cpus),
            ready: AtomicU32::new(0),
            finished: AtomicU32::new(0),
            failure: Mutex::new(None),
        })
    }

    /// Record `err` if it is the first failure, and tear the run down.
    pub fn fail(&self, err: NativeError) {
        if let Ok(mut slot) = self.failure.lock() {
            if slot.is_none() {
                *slot = Some(err);
            }
        }
        self.abort.store(true, Ordering::SeqCst);
        self.wake_everyone();
    }

    pub fn take_failure(&self) -> Option<NativeError> {
        self.failure.lock().ok().and_then(|mut s| s.take())
    }

    /// Wake every thread that might be asleep anywhere, so it sees `abort`.
    /// Called repeatedly while aborting: a thread that checked the flag just
    /// before it was set and then went to sleep is caught by the next round.
    pub fn wake_everyone(&self) {
        self.gate.open();
        for m in &self.mutexes {
            m.wake_all();
        }
        for b in &self.barriers {
            b.wake_all();
        }
        for q in &self.queues {
            q.wake_all();
        }
        self.devices.wake_all();
    }
}

/// Reject programs whose indices point outside their tables. `instantiate`
/// never produces one, but a hand-built `Program` could, and the interpreter
/// indexes without checks.
fn check(p: &Program) -> Result<(), NativeError> {
    fn walk(p: &Program, group: &str, ops: &[Op]) -> Result<(), NativeError> {
        for op in ops {
            let (kind, i, len) = match op {
                Op::SpinLock(i) | Op::SpinUnlock(i) => ("spin lock", *i, p.spin_locks.len()),
                Op::MutexLock(i) | Op::MutexUnlock(i) => ("mutex", *i, p.mutexes.len()),
                Op::Barrier(i) => ("barrier", *i, p.barriers.len()),
                Op::Push(i) | Op::Pop(i) => ("queue", *i, p.queues.len()),
                Op::Atomic { counter, .. } => ("counter", *counter, p.counters.len()),
                Op::Io { device, .. } => ("device", *device, p.devices.len()),
                Op::Drain { pool, body } => {
                    walk(p, group, body)?;
                    ("pool", *pool, p.pools.len())
                }
                Op::Touch {
                    buffer: BufferRef::Shared(i),
                    ..
                } => ("buffer", *i, p.buffers.len()),
                Op::Repeat { body, .. } => {
                    walk(p, group, body)?;
                    continue;
                }
                _ => continue,
            };
            if i as usize >= len {
                return Err(NativeError::BadProgram(format!(
                    "group `{group}` uses {kind} #{i} but the program defines {len}; build programs with smplab_workload::Source::instantiate"
                )));
            }
        }
        Ok(())
    }
    if p.total_threads() == 0 {
        return Err(NativeError::BadProgram(
            "the program has no threads; every group needs at least one".into(),
        ));
    }
    for g in &p.groups {
        walk(p, &g.name, &g.ops)?;
    }
    if let Some(b) = p.barriers.iter().find(|b| b.parties == 0) {
        return Err(NativeError::BadProgram(format!(
            "barrier `{}` has 0 parties; it needs at least 1",
            b.name
        )));
    }
    if let Some(d) = p.devices.iter().find(|d| d.queue_depth == 0) {
        return Err(NativeError::BadProgram(format!(
            "device `{}` has queue_depth 0; it needs at least 1",
            d.name
        )));
    }
    if let Some(q) = p.pools.iter().find(|q| i64::try_from(q.units).is_err()) {
        return Err(NativeError::BadProgram(format!(
            "pool `{}` has {} units; at most {} fit",
            q.name,
            q.units,
            i64::MAX
        )));
    }
    if let Some(q) = p.queues.iter().find(|q| q.capacity == 0) {
        return Err(NativeError::BadProgram(format!(
            "queue `{}` has capacity 0; it needs at least 1",
            q.name
        )));
    }
    Ok(())
}

fn max_shootdown_pages(p: &Program) -> usize {
    fn walk(ops: &[Op]) -> usize {
        ops.iter()
            .map(|op| match op {
                Op::Shootdown { pages } => *pages as usize,
                Op::Repeat { body, .. } | Op::Drain { body, .. } => walk(body),
                _ => 0,
            })
            .max()
            .unwrap_or(0)
    }
    p.groups.iter().map(|g| walk(&g.ops)).max().unwrap_or(0)
}
