//! The instantiated, validated program every executor runs: counts evaluated,
//! names resolved to indices. Produced by `validate::instantiate`; never built
//! from unchecked input elsewhere, so executors may trust its invariants
//! (indices in range, locks balanced, barriers reachable, queues balanced).

use crate::spec::{BarrierWait, Rmw, SpinKind};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpinLockDef {
    pub name: String,
    pub kind: SpinKind,
    pub pause: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MutexDef {
    pub name: String,
    pub spin_limit: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BarrierDef {
    pub name: String,
    pub parties: u32,
    pub wait: BarrierWait,
    pub spin_limit: u32,
    pub pause: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueDef {
    pub name: String,
    pub capacity: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterDef {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BufferDef {
    pub name: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceDef {
    pub name: String,
    /// Requests in service at once; at least 1.
    pub queue_depth: u32,
}

/// A shared pool of work units, taken one at a time by `Op::Drain`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolDef {
    pub name: String,
    /// Units in the pool when the run starts; at most `i64::MAX` (executors
    /// claim with a signed fetch-and-decrement).
    pub units: u64,
}

/// Which buffer a touch walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BufferRef {
    /// The thread's own buffer (sized to the largest private touch of the thread).
    Private,
    /// Index into `Program::buffers`.
    Shared(u32),
}

/// One operation with names resolved to indices into the program's tables.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Op {
    /// Run the compute kernel for this many iterations.
    Compute {
        iters: u64,
    },
    /// Walk `bytes` of a buffer with `stride`, reading or read-modify-writing one
    /// byte per step (`touch_steps` accesses); counted as `bytes` in `touch_bytes`.
    Touch {
        buffer: BufferRef,
        bytes: u64,
        stride: u64,
        write: bool,
    },
    SpinLock(u32),
    SpinUnlock(u32),
    MutexLock(u32),
    MutexUnlock(u32),
    Barrier(u32),
    Push(u32),
    Pop(u32),
    Atomic {
        counter: u32,
        rmw: Rmw,
    },
    SleepNs(u64),
    Yield(u64),
    Shootdown {
        pages: u32,
    },
    /// Submit a request to device `device` (index into `Program::devices`)
    /// that keeps one of its `queue_depth` slots busy for `service_ns`, and
    /// block until its completion interrupt wakes the thread.
    Io {
        device: u32,
        service_ns: u64,
    },
    Repeat {
        count: u64,
        body: Vec<Op>,
    },
    /// Claim one unit of pool `pool` (index into `Program::pools`) with an
    /// atomic fetch-and-decrement and run `body` for it; repeat until a claim
    /// finds the pool empty. How many units each thread runs is decided at
    /// run time; the total over all threads is the pool's `units`. Validation
    /// keeps drains at the top level of a group's op list, one drain per pool,
    /// and no barriers in the body.
    Drain {
        pool: u32,
        body: Vec<Op>,
    },
}

/// A group of identical threads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    pub name: String,
    pub threads: u32,
    pub ops: Vec<Op>,
}

/// A program ready to run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Program {
    pub name: String,
    pub description: String,
    pub imitates: String,
    /// The thread parameter it was instantiated with.
    pub n: u32,
    /// The scale factor it was instantiated with.
    pub scale: f64,
    pub spin_locks: Vec<SpinLockDef>,
    pub mutexes: Vec<MutexDef>,
    pub barriers: Vec<BarrierDef>,
    pub queues: Vec<QueueDef>,
    pub counters: Vec<CounterDef>,
    pub buffers: Vec<BufferDef>,
    pub devices: Vec<DeviceDef>,
    pub pools: Vec<PoolDef>,
    pub groups: Vec<Group>,
}

/// Names of per-operation counters, as used in `RunRecord::counters.ops`.
pub mod counter_names {
    pub const COMPUTE: &str = "compute";
    pub const COMPUTE_ITERS: &str = "compute_iters";
    pub const TOUCH: &str = "touch";
    pub const TOUCH_BYTES: &str = "touch_bytes";
    pub const SPIN_LOCK: &str = "spin_lock";
    pub const MUTEX_LOCK: &str = "mutex_lock";
    pub const BARRIER: &str = "barrier";
    pub const PUSH: &str = "push";
    pub const POP: &str = "pop";
    pub const ATOMIC: &str = "atomic";
    pub const SLEEP: &str = "sleep";
    pub const YIELD: &str = "yield";
    pub const SHOOTDOWN: &str = "shootdown";
    /// Completed device requests (`io` ops).
    pub const IO: &str = "io";
    /// Every name, in a fixed order (encodings and tables use this order).
    pub const ALL: &[&str] = &[
        COMPUTE,
        COMPUTE_ITERS,
        TOUCH,
        TOUCH_BYTES,
        SPIN_LOCK,
        MUTEX_LOCK,
        BARRIER,
        PUSH,
        POP,
        ATOMIC,
        SLEEP,
        YIELD,
        SHOOTDOWN,
        IO,
    ];
    /// How many counters there are.
    pub const COUNT: usize = ALL.len();
}

/// Per-operation counts of one thread or a whole program, indexed like
/// [`counter_names::ALL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpCounts(pub [u64; counter_names::COUNT]);

impl OpCounts {
    fn add_op(&mut self, op: &Op, times: u64) {
        // Saturating: absurd counts in a file must not overflow-panic here.
        let c = &mut self.0;
        let mut bump = |i: usize, by: u64| c[i] = c[i].saturating_add(by);
        match op {
            Op::Compute { iters } => {
                bump(0, times);
                bump(1, times.saturating_mul(*iters));
            }
            Op::Touch { bytes, .. } => {
                bump(2, times);
                bump(3, times.saturating_mul(*bytes));
            }
            Op::SpinLock(_) => bump(4, times),
            Op::MutexLock(_) => bump(5, times),
            Op::Barrier(_) => bump(6, times),
            Op::Push(_) => bump(7, times),
            Op::Pop(_) => bump(8, times),
            Op::Atomic { .. } => bump(9, times),
            Op::SleepNs(_) => bump(10, times),
            Op::Yield(k) => bump(11, times.saturating_mul(*k)),
            Op::Shootdown { .. } => bump(12, times),
            Op::Io { .. } => bump(13, times),
            Op::SpinUnlock(_) | Op::MutexUnlock(_) => {}
            Op::Repeat { count, body } => {
                for inner in body {
                    self.add_op(inner, times.saturating_mul(*count));
                }
            }
            // Run-time distribution: not part of any one thread's fixed
            // counts (see `of_drained`).
            Op::Drain { .. } => {}
        }
    }

    /// Counts of one thread running `ops` once, *without* the bodies of
    /// drains: how many units of a pool one thread takes is decided at run
    /// time, so only this part is fixed per thread. `Program::group_counts`
    /// and `Program::expected_counts` give the totals, drains included.
    pub fn fixed_per_thread(ops: &[Op]) -> Self {
        let mut c = OpCounts::default();
        for op in ops {
            c.add_op(op, 1);
        }
        c
    }

    /// Counts of the drain bodies in `ops`, each run once per unit of its
    /// pool: a total over all the threads that run `ops`, not per thread.
    pub fn of_drained(ops: &[Op], pools: &[PoolDef]) -> Self {
        let mut c = OpCounts::default();
        visit_drains(ops, &mut |pool, body| {
            let units = pools.get(pool as usize).map_or(0, |p| p.units);
            for op in body {
                c.add_op(op, units);
            }
        });
        c
    }

    pub fn scaled(mut self, k: u64) -> Self {
        for v in &mut self.0 {
            *v = v.saturating_mul(k);
        }
        self
    }

    pub fn add(&mut self, other: &OpCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_add(b);
        }
    }

    pub fn to_map(&self) -> BTreeMap<String, u64> {
        counter_names::ALL
            .iter()
            .zip(self.0)
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }
}

/// Call `f(pool, body)` for every drain in `ops`, at any depth.
fn visit_drains(ops: &[Op], f: &mut dyn FnMut(u32, &[Op])) {
    for op in ops {
        match op {
            Op::Repeat { body, .. } => visit_drains(body, f),
            Op::Drain { pool, body } => {
                f(*pool, body);
                visit_drains(body, f);
            }
            _ => {}
        }
    }
}

/// Number of accesses a touch makes.
pub fn touch_steps(bytes: u64, stride: u64) -> u64 {
    bytes.div_ceil(stride.max(1))
}

impl Program {
    /// Total threads over all groups.
    pub fn total_threads(&self) -> u32 {
        self.groups.iter().map(|g| g.threads).sum()
    }

    /// The per-operation counts of all of group `group`'s threads together:
    /// each thread's fixed counts times its threads, plus each pool it drains
    /// times the drain's body. Per-thread counts are not fixed when the group
    /// drains a pool (the threads share its units at run time).
    pub fn group_counts(&self, group: usize) -> OpCounts {
        let Some(g) = self.groups.get(group) else {
            return OpCounts::default();
        };
        let mut c = OpCounts::fixed_per_thread(&g.ops).scaled(u64::from(g.threads));
        c.add(&OpCounts::of_drained(&g.ops, &self.pools));
        c
    }

    /// The per-operation counts any correct executor must report.
    pub fn expected_counts(&self) -> BTreeMap<String, u64> {
        let mut total = OpCounts::default();
        for gi in 0..self.groups.len() {
            total.add(&self.group_counts(gi));
        }
        total.to_map()
    }

    /// Visit every op of the program (loop bodies included) with how many
    /// times it runs in the whole run, over all threads: `f(group, op, times)`.
    /// Ops inside a drain run once per unit of its pool in all, whichever
    /// threads claim them. Loops are visited too (with the times they start).
    pub fn visit_totals(&self, mut f: impl FnMut(usize, &Op, u64)) {
        fn walk(
            p: &Program,
            gi: usize,
            ops: &[Op],
            times: u64,
            f: &mut dyn FnMut(usize, &Op, u64),
        ) {
            for op in ops {
                f(gi, op, times);
                match op {
                    Op::Repeat { count, body } => {
                        walk(p, gi, body, times.saturating_mul(*count), f)
                    }
                    Op::Drain { pool, body } => {
                        let units = p.pools.get(*pool as usize).map_or(0, |q| q.units);
                        walk(p, gi, body, units, f)
                    }
                    _ => {}
                }
            }
        }
        for (gi, g) in self.groups.iter().enumerate() {
            walk(self, gi, &g.ops, u64::from(g.threads), &mut f);
        }
    }

    /// Whether any group drains a pool (per-thread op counts then vary from
    /// run to run; totals do not).
    pub fn uses_drain(&self) -> bool {
        self.groups.iter().any(|g| {
            let mut any = false;
            visit_drains(&g.ops, &mut |_, _| any = true);
            any
        })
    }

    /// Whether any thread runs an `io` op (executors without a device model
    /// refuse such programs).
    pub fn uses_io(&self) -> bool {
        fn walk(ops: &[Op]) -> bool {
            ops.iter().any(|op| match op {
                Op::Io { .. } => true,
                Op::Repeat { body, .. } | Op::Drain { body, .. } => walk(body),
                _ => false,
            })
        }
        self.groups.iter().any(|g| walk(&g.ops))
    }

    /// Largest private buffer any thread of `group` needs.
    pub fn private_bytes(&self, group: usize) -> u64 {
        fn walk(ops: &[Op]) -> u64 {
            ops.iter()
                .map(|op| match op {
                    Op::Touch {
                        buffer: BufferRef::Private,
                        bytes,
                        ..
                    } => *bytes,
                    Op::Repeat { body, .. } | Op::Drain { body, .. } => walk(body),
                    _ => 0,
                })
                .max()
                .unwrap_or(0)
        }
        self.groups.get(group).map(|g| walk(&g.ops)).unwrap_or(0)
    }

    /// The spin → block variant (Ding & Shan's "remove user-space spinning"):
    /// spinning and spin-then-block barriers block at once, adaptive mutexes
    /// block at once. Spin locks stay (they have no blocking form in the program),
    /// so a profile whose spinning lives in spin locks is unaffected.
    pub fn spin_to_block(&self) -> Program {
        let mut p = self.clone();
        for b in &mut p.barriers {
            b.wait = BarrierWait::Block;
            b.spin_limit = 0;
        }
        for m in &mut p.mutexes {
            m.spin_limit = 0;
        }
        p.name = format!("{}+block", self.name);
        p
    }

    /// The groups and thread indices in start order: `(group index, index in group)`.
    pub fn threads(&self) -> Vec<(usize, u32)> {
        self.groups
            .iter()
            .enumerate()
            .flat_map(|(gi, g)| (0..g.threads).map(move |t| (gi, t)))
            .collect()
    }
}
