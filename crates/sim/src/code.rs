//! The program flattened for the simulator: a linear instruction array per
//! thread group with loops as begin/end pairs, so a thread's position is one
//! index plus a small loop-counter stack (no recursion, no allocation while
//! running). Per-op costs that depend only on the platform are precomputed.

use crate::platform::Platform;
use smplab_workload::program::touch_steps;
use smplab_workload::{BufferRef, Op, Program};

/// Index of each op kind in per-op counters (same order as `counter_names::ALL`).
pub mod counter {
    pub const COMPUTE: usize = 0;
    pub const COMPUTE_ITERS: usize = 1;
    pub const TOUCH: usize = 2;
    pub const TOUCH_BYTES: usize = 3;
    pub const SPIN_LOCK: usize = 4;
    pub const MUTEX_LOCK: usize = 5;
    pub const BARRIER: usize = 6;
    pub const PUSH: usize = 7;
    pub const POP: usize = 8;
    pub const ATOMIC: usize = 9;
    pub const SLEEP: usize = 10;
    pub const YIELD: usize = 11;
    pub const SHOOTDOWN: usize = 12;
    pub const IO: usize = 13;
    /// Number of counters.
    pub const N: usize = smplab_workload::program::counter_names::COUNT;
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ins {
    /// Timed user work: `ns` of running; `iters` for counting.
    Compute {
        ns: u64,
        iters: u64,
    },
    /// Timed memory walk; `shared` walks slow down with remote sharing partners.
    Touch {
        ns: u64,
        bytes: u64,
        shared: bool,
    },
    SpinLock(u32),
    SpinUnlock(u32),
    MutexLock(u32),
    MutexUnlock(u32),
    Barrier(u32),
    Push(u32),
    Pop(u32),
    Atomic,
    Sleep(u64),
    Yield(u64),
    Shootdown,
    /// Synchronous device request: device index, service time.
    Io {
        device: u32,
        service_ns: u64,
    },
    /// Start a loop of `count` passes; `end` is the index of its `LoopEnd`.
    LoopBegin {
        count: u64,
        end: u32,
    },
    /// End of a loop body; `begin` is the index of its `LoopBegin`.
    LoopEnd {
        begin: u32,
    },
    /// Claim one unit of pool `pool` (an atomic RMW on the VM's pool
    /// counter): run the body after it if there was one, else jump past
    /// `end`, the index of its `DrainEnd`. Runs only at the simulated time
    /// the thread reaches it, never fused behind earlier work.
    DrainClaim {
        pool: u32,
        end: u32,
    },
    /// End of a drain body: back to the claim at `begin`.
    DrainEnd {
        begin: u32,
    },
    /// Thread finished.
    Exit,
}

/// One group's code and facts the cache model needs.
#[derive(Debug, Clone)]
pub struct GroupCode {
    pub ins: Vec<Ins>,
    /// Deepest loop nesting (size of the loop stack).
    pub depth: usize,
    /// Bytes of private and of shared buffers the thread touches (capped later
    /// by the private cache size): what must be refilled after a migration.
    pub private_bytes: u64,
    pub shared_bytes: u64,
}

pub fn compile(program: &Program, platform: &Platform) -> Vec<GroupCode> {
    program
        .groups
        .iter()
        .map(|g| {
            let mut ins = Vec::new();
            let mut depth = 0;
            let mut footprint = (0u64, 0u64);
            emit(&g.ops, platform, &mut ins, 0, &mut depth, &mut footprint);
            ins.push(Ins::Exit);
            GroupCode {
                ins,
                depth,
                private_bytes: footprint.0,
                shared_bytes: footprint.1,
            }
        })
        .collect()
}

fn emit(
    ops: &[Op],
    p: &Platform,
    out: &mut Vec<Ins>,
    level: usize,
    depth: &mut usize,
    footprint: &mut (u64, u64),
) {
    for op in ops {
        let ins = match op {
            Op::Compute { iters } => Ins::Compute {
                ns: crate::units_from_f64((*iters as f64 * p.cpu.compute_ns_per_iter).round()),
                iters: *iters,
            },
            Op::Touch {
                buffer,
                bytes,
                stride,
                ..
            } => {
                // A strided walk brings in one line per step at most.
                let lines_bytes = (*bytes)
                    .min(touch_steps(*bytes, *stride).saturating_mul(p.cache.line_bytes.max(1)));
                match buffer {
                    BufferRef::Private => footprint.0 = footprint.0.saturating_add(lines_bytes),
                    BufferRef::Shared(_) => footprint.1 = footprint.1.saturating_add(lines_bytes),
                }
                Ins::Touch {
                    ns: crate::units_from_f64(
                        (touch_steps(*bytes, *stride) as f64 * p.cpu.touch_ns_per_access).round(),
                    ),
                    bytes: *bytes,
                    shared: matches!(buffer, BufferRef::Shared(_)),
                }
            }
            Op::SpinLock(i) => Ins::SpinLock(*i),
            Op::SpinUnlock(i) => Ins::SpinUnlock(*i),
            Op::MutexLock(i) => Ins::MutexLock(*i),
            Op::MutexUnlock(i) => Ins::MutexUnlock(*i),
            Op::Barrier(i) => Ins::Barrier(*i),
            Op::Push(i) => Ins::Push(*i),
            Op::Pop(i) => Ins::Pop(*i),
            Op::Atomic { .. } => Ins::Atomic,
            Op::SleepNs(ns) => Ins::Sleep(*ns),
            Op::Yield(k) => Ins::Yield(*k),
            Op::Shootdown { .. } => Ins::Shootdown,
            Op::Io { device, service_ns } => Ins::Io {
                device: *device,
                service_ns: *service_ns,
            },
            Op::Repeat { count, body } => {
                let begin = out.len();
                out.push(Ins::LoopBegin {
                    count: *count,
                    end: 0,
                });
                *depth = (*depth).max(level + 1);
                emit(body, p, out, level + 1, depth, footprint);
                let end = out.len();
                out.push(Ins::LoopEnd {
                    begin: u32::try_from(begin).unwrap_or(u32::MAX),
                });
                out[begin] = Ins::LoopBegin {
                    count: *count,
                    end: u32::try_from(end).unwrap_or(u32::MAX),
                };
                continue;
            }
            Op::Drain { pool, body } => {
                // No loop-stack entry: the pool, not a counter, ends it.
                let begin = out.len();
                out.push(Ins::DrainClaim {
                    pool: *pool,
                    end: 0,
                });
                emit(body, p, out, level, depth, footprint);
                let end = out.len();
                out.push(Ins::DrainEnd {
                    begin: u32::try_from(begin).unwrap_or(u32::MAX),
                });
                out[begin] = Ins::DrainClaim {
                    pool: *pool,
                    end: u32::try_from(end).unwrap_or(u32::MAX),
                };
                continue;
            }
        };
        out.push(ins);
    }
}
