//! The program flattened for the simulator: a linear instruction array per
//! thread group with loops as begin/end pairs, so a thread's position is one
//! index plus a small loop-counter stack (no recursion, no allocation while
//! running). Per-op costs that depend only on the platform are precomputed.
//!
//! Shared buffers that a group writes get a *write slot* (a small per-program
//! index, at most [`WRITE_SLOTS`]): the engine counts, per VM and slot, the
//! running vCPUs whose current thread writes that buffer, so a write touch
//! learns in O(1) whether a co-writer runs on another pCPU (`engine/cache.rs`).

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
    /// Timed memory walk; `shared` walks slow down with remote sharing
    /// partners. A write walk of a shared buffer has that buffer's write
    /// `slot` (else [`NO_SLOT`]) and, in `transfer_ns`, what its lines cost
    /// when a co-writer runs on another pCPU (lines × the platform's
    /// `cache.shared_write_ns_per_line`).
    Touch {
        ns: u64,
        bytes: u64,
        shared: bool,
        slot: u8,
        transfer_ns: u32,
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

/// Write slots a program can have: one bit each in [`GroupCode::write_mask`].
/// Write touches of further shared buffers get no slot (and no transfer
/// charge); the built-in profiles write at most one.
pub const WRITE_SLOTS: usize = 64;

/// `Ins::Touch::slot` of a walk that writes no shared buffer.
pub const NO_SLOT: u8 = u8::MAX;

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
    /// Write slots of the shared buffers the group writes (bit i: slot i).
    pub write_mask: u64,
}

/// The program's code per group.
pub fn compile(program: &Program, platform: &Platform) -> Vec<GroupCode> {
    // Shared buffer index -> write slot, given in order of first write.
    let mut slots: Vec<u32> = Vec::new();
    program
        .groups
        .iter()
        .map(|g| {
            let mut ins = Vec::new();
            let mut depth = 0;
            let mut facts = Facts::default();
            let mut cx = Emit {
                p: platform,
                out: &mut ins,
                depth: &mut depth,
                facts: &mut facts,
                slots: &mut slots,
            };
            cx.emit(&g.ops, 0);
            ins.push(Ins::Exit);
            GroupCode {
                ins,
                depth,
                private_bytes: facts.private_bytes,
                shared_bytes: facts.shared_bytes,
                write_mask: facts.write_mask,
            }
        })
        .collect()
}

/// Write slots a program's groups use (one past the highest).
pub fn write_slots(groups: &[GroupCode]) -> usize {
    groups
        .iter()
        .map(|g| (u64::BITS - g.write_mask.leading_zeros()) as usize)
        .max()
        .unwrap_or(0)
}

/// What a group's code tells the cache model, gathered while emitting.
#[derive(Default)]
struct Facts {
    private_bytes: u64,
    shared_bytes: u64,
    write_mask: u64,
}

/// The emitter's state for one group.
struct Emit<'a> {
    p: &'a Platform,
    out: &'a mut Vec<Ins>,
    depth: &'a mut usize,
    facts: &'a mut Facts,
    /// The program's write slots so far (shared across its groups).
    slots: &'a mut Vec<u32>,
}

impl Emit<'_> {
    /// The write slot of shared buffer `b`, made on its first write.
    fn slot(&mut self, b: u32) -> u8 {
        if let Some(i) = self.slots.iter().position(|&x| x == b) {
            return u8::try_from(i).unwrap_or(NO_SLOT);
        }
        if self.slots.len() >= WRITE_SLOTS {
            return NO_SLOT;
        }
        self.slots.push(b);
        u8::try_from(self.slots.len() - 1).unwrap_or(NO_SLOT)
    }

    fn touch(&mut self, buffer: &BufferRef, bytes: u64, stride: u64, write: bool) -> Ins {
        let p = self.p;
        let line = p.cache.line_bytes.max(1);
        let steps = touch_steps(bytes, stride);
        // A strided walk brings in one line per step at most.
        let lines_bytes = bytes.min(steps.saturating_mul(line));
        let (slot, transfer_ns) = match buffer {
            BufferRef::Private => {
                self.facts.private_bytes = self.facts.private_bytes.saturating_add(lines_bytes);
                (NO_SLOT, 0)
            }
            BufferRef::Shared(b) => {
                self.facts.shared_bytes = self.facts.shared_bytes.saturating_add(lines_bytes);
                let slot = if write { self.slot(*b) } else { NO_SLOT };
                if slot == NO_SLOT {
                    (NO_SLOT, 0)
                } else {
                    self.facts.write_mask |= 1u64 << slot;
                    // Lines the walk writes: one per step, or every line of
                    // the walked bytes when steps are shorter than a line.
                    let lines = lines_bytes.div_ceil(line);
                    let ns = (lines as f64 * p.cache.shared_write_ns_per_line).round();
                    (
                        slot,
                        u32::try_from(crate::units_from_f64(ns)).unwrap_or(u32::MAX),
                    )
                }
            }
        };
        Ins::Touch {
            ns: crate::units_from_f64((steps as f64 * p.cpu.touch_ns_per_access).round()),
            bytes,
            shared: matches!(buffer, BufferRef::Shared(_)),
            slot,
            transfer_ns,
        }
    }

    fn emit(&mut self, ops: &[Op], level: usize) {
        for op in ops {
            let ins = match op {
                Op::Compute { iters } => Ins::Compute {
                    ns: crate::units_from_f64(
                        (*iters as f64 * self.p.cpu.compute_ns_per_iter).round(),
                    ),
                    iters: *iters,
                },
                Op::Touch {
                    buffer,
                    bytes,
                    stride,
                    write,
                } => self.touch(buffer, *bytes, *stride, *write),
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
                    let begin = self.out.len();
                    self.out.push(Ins::LoopBegin {
                        count: *count,
                        end: 0,
                    });
                    *self.depth = (*self.depth).max(level + 1);
                    self.emit(body, level + 1);
                    let end = self.out.len();
                    self.out.push(Ins::LoopEnd {
                        begin: u32::try_from(begin).unwrap_or(u32::MAX),
                    });
                    self.out[begin] = Ins::LoopBegin {
                        count: *count,
                        end: u32::try_from(end).unwrap_or(u32::MAX),
                    };
                    continue;
                }
                Op::Drain { pool, body } => {
                    // No loop-stack entry: the pool, not a counter, ends it.
                    let begin = self.out.len();
                    self.out.push(Ins::DrainClaim {
                        pool: *pool,
                        end: 0,
                    });
                    self.emit(body, level);
                    let end = self.out.len();
                    self.out.push(Ins::DrainEnd {
                        begin: u32::try_from(begin).unwrap_or(u32::MAX),
                    });
                    self.out[begin] = Ins::DrainClaim {
                        pool: *pool,
                        end: u32::try_from(end).unwrap_or(u32::MAX),
                    };
                    continue;
                }
            };
            self.out.push(ins);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_stay_three_words() {
        // The interpreter fetches one `Ins` per op from one array: the write
        // slot and transfer charge live in the touch's padding.
        assert!(std::mem::size_of::<Ins>() <= 24);
    }

    #[test]
    fn shared_write_walks_get_slots_and_charges() {
        let text = "name = \"w\"\n[buffers.a]\nbytes = 8192\n[buffers.b]\nbytes = 8192\n[[groups]]\nname = \"r\"\nthreads = 1\nops = [ { touch = { buffer = \"a\", bytes = 4096, stride = 64, write = false } }, { touch = { buffer = \"b\", bytes = 256, stride = 16 } } ]\n[[groups]]\nname = \"w\"\nthreads = 1\nops = [ { touch = { buffer = \"b\", bytes = 8192, stride = 4096 } }, { touch = { bytes = 64 } } ]\n";
        let src = smplab_workload::Source::from_text("t", text).unwrap();
        let prog = src.instantiate(None, 1.0).unwrap();
        let mut p = Platform::builtin("pvm-here").unwrap();
        p.cache.shared_write_ns_per_line = 10.0;
        let code = compile(&prog, &p);
        let touches = |g: usize| -> Vec<(u8, u32)> {
            code[g]
                .ins
                .iter()
                .filter_map(|i| match i {
                    Ins::Touch {
                        slot, transfer_ns, ..
                    } => Some((*slot, *transfer_ns)),
                    _ => None,
                })
                .collect()
        };
        // Read-only shared walk: no slot. 256 bytes in 16-byte steps write
        // 4 lines: 40 ns. Page-strided 8 KiB: 2 lines, 20 ns. Private: none.
        assert_eq!(touches(0), vec![(NO_SLOT, 0), (0, 40)]);
        assert_eq!(touches(1), vec![(0, 20), (NO_SLOT, 0)]);
        assert_eq!((code[0].write_mask, code[1].write_mask), (1, 1));
        assert_eq!(write_slots(&code), 1);
    }
}
