//! Property: random VALID workloads terminate and conserve counts.
//!
//! Programs are generated structurally so they are valid — and deadlock-free —
//! by construction, not filtered:
//! - locked sections take at most two locks in one global order and hold no
//!   blocking op, so locks cannot deadlock;
//! - barriers are either local to a group (parties = one, or that group's
//!   thread count) or global (parties = all threads) and then reached exactly
//!   once at the start and/or end of every group, so every generation fills up;
//! - queues form pipelines (producer group → optional middle stage → consumer
//!   group, one queue per hop, each hop balanced: threads × iterations equal on
//!   both sides), so a blocked push implies a consumer that can pop, and a
//!   blocked pop a producer that can push;
//! - a pipeline stage or worker group may take its items from a pool until it
//!   is drained instead of a fixed count per thread (pool units = the stage's
//!   items, so hops stay balanced in total); drain bodies hold no barriers.
//!
//! A seed drives the generator (shrinking a seed is meaningless, but failures
//! print it and are reproducible). Each run has a generous timeout, so a
//! deadlock fails the test with a Timeout error instead of hanging it.

use proptest::prelude::*;
use smplab_native::{execute, NativeOptions};
use smplab_workload::program::{
    BarrierDef, BufferDef, CounterDef, MutexDef, PoolDef, QueueDef, SpinLockDef,
};
use smplab_workload::{BarrierWait, BufferRef, Group, Op, Program, Rmw, SpinKind};
use std::time::Duration;

/// splitmix64: small, fast, good enough to pick shapes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    fn wait(&mut self) -> BarrierWait {
        match self.below(3) {
            0 => BarrierWait::Spin,
            1 => BarrierWait::Block,
            _ => BarrierWait::SpinThenBlock,
        }
    }
}

struct Gen {
    rng: Rng,
    p: Program,
}

impl Gen {
    // Casts: test code: the values come from small fixed or generator-bounded ranges.
    #[allow(clippy::cast_possible_truncation)]
    fn new(seed: u64) -> Self {
        let mut rng = Rng(seed);
        let mut p = Program {
            name: format!("random-{seed}"),
            description: String::new(),
            imitates: String::new(),
            n: 1,
            scale: 1.0,
            spin_locks: Vec::new(),
            mutexes: Vec::new(),
            barriers: Vec::new(),
            queues: Vec::new(),
            counters: Vec::new(),
            buffers: Vec::new(),
            devices: Vec::new(),
            pools: Vec::new(),
            groups: Vec::new(),
        };
        for i in 0..rng.below(3) {
            let kind = match rng.below(3) {
                0 => SpinKind::Tas,
                1 => SpinKind::Ttas,
                _ => SpinKind::Ticket,
            };
            let pause = rng.coin();
            p.spin_locks.push(SpinLockDef {
                name: format!("s{i}"),
                kind,
                pause,
            });
        }
        for i in 0..rng.below(3) {
            let spin_limit = [0, 0, 50, 1000][rng.below(4) as usize];
            p.mutexes.push(MutexDef {
                name: format!("m{i}"),
                spin_limit,
            });
        }
        for i in 0..rng.below(3) {
            p.counters.push(CounterDef {
                name: format!("c{i}"),
            });
        }
        for i in 0..rng.below(3) {
            let bytes = rng.range(256, 16384);
            p.buffers.push(BufferDef {
                name: format!("b{i}"),
                bytes,
            });
        }
        Gen { rng, p }
    }

    // Casts: test code: the values come from small fixed or generator-bounded ranges.
    #[allow(clippy::cast_possible_truncation)]
    fn barrier(&mut self, parties: u32) -> u32 {
        let wait = self.rng.wait();
        let spin_limit = self.rng.below(2000) as u32;
        let pause = self.rng.coin();
        let i = self.p.barriers.len();
        self.p.barriers.push(BarrierDef {
            name: format!("bar{i}"),
            parties,
            wait,
            spin_limit,
            pause,
        });
        u32::try_from(i).unwrap_or(u32::MAX)
    }

    // Casts: test code: the values come from small fixed or generator-bounded ranges.
    #[allow(clippy::cast_possible_truncation)]
    fn queue(&mut self) -> u32 {
        let capacity = self.rng.range(1, 4) as u32;
        let i = self.p.queues.len();
        self.p.queues.push(QueueDef {
            name: format!("q{i}"),
            capacity,
        });
        u32::try_from(i).unwrap_or(u32::MAX)
    }

    /// An op that never waits for another thread.
    // Casts: test code: the values come from small fixed or generator-bounded ranges.
    #[allow(clippy::cast_possible_truncation)]
    fn plain(&mut self) -> Op {
        let r = &mut self.rng;
        match r.below(7) {
            0 | 1 => Op::Compute {
                iters: r.below(3000),
            },
            2 => Op::Touch {
                buffer: BufferRef::Private,
                bytes: r.range(1, 8192),
                stride: r.range(1, 128),
                write: r.coin(),
            },
            3 if !self.p.buffers.is_empty() => {
                let b = r.below(self.p.buffers.len() as u64) as usize;
                let bytes = r.range(1, self.p.buffers[b].bytes);
                Op::Touch {
                    buffer: BufferRef::Shared(u32::try_from(b).unwrap_or(u32::MAX)),
                    bytes,
                    stride: r.range(1, 256),
                    write: r.coin(),
                }
            }
            4 if !self.p.counters.is_empty() => Op::Atomic {
                counter: r.below(self.p.counters.len() as u64) as u32,
                rmw: match r.below(3) {
                    0 => Rmw::Add,
                    1 => Rmw::Cas,
                    _ => Rmw::Swap,
                },
            },
            5 => Op::Yield(r.below(3)),
            _ => Op::Compute {
                iters: r.below(500),
            },
        }
    }

    /// A segment: plain ops, sleeps, shootdowns, locked sections, small loops.
    // Casts: test code: the values come from small fixed or generator-bounded ranges.
    #[allow(clippy::cast_possible_truncation)]
    fn segment(&mut self, depth: u32) -> Vec<Op> {
        match self.rng.below(8) {
            0 => vec![Op::SleepNs(self.rng.below(20_000))],
            1 => vec![Op::Shootdown {
                pages: self.rng.range(1, 2) as u32,
            }],
            2 | 3 => {
                // Locks in one global order: spin locks by index, then mutexes.
                let ns = self.p.spin_locks.len() as u64;
                let nm = self.p.mutexes.len() as u64;
                if ns + nm == 0 {
                    return vec![self.plain()];
                }
                let a = self.rng.below(ns + nm);
                let b = self.rng.below(ns + nm);
                let mut held = vec![a.min(b)];
                if a != b {
                    held.push(a.max(b));
                }
                let lock = |i: u64| {
                    if i < ns {
                        (
                            Op::SpinLock(u32::try_from(i).unwrap_or(u32::MAX)),
                            Op::SpinUnlock(u32::try_from(i).unwrap_or(u32::MAX)),
                        )
                    } else {
                        (
                            Op::MutexLock((i - ns) as u32),
                            Op::MutexUnlock((i - ns) as u32),
                        )
                    }
                };
                let mut ops: Vec<Op> = held.iter().map(|&i| lock(i).0).collect();
                for _ in 0..self.rng.range(1, 2) {
                    let op = self.plain();
                    ops.push(op);
                }
                ops.extend(held.iter().rev().map(|&i| lock(i).1));
                ops
            }
            4 if depth < 2 => {
                let count = self.rng.below(4);
                let mut body = Vec::new();
                for _ in 0..self.rng.range(1, 2) {
                    body.extend(self.segment(depth + 1));
                }
                vec![Op::Repeat { count, body }]
            }
            _ => vec![self.plain()],
        }
    }

    /// Plain segments with optional local barriers (`local` = its index).
    fn body(&mut self, local: Option<u32>, extra: Vec<Op>) -> Vec<Op> {
        let mut ops = Vec::new();
        for _ in 0..self.rng.range(0, 2) {
            ops.extend(self.segment(0));
        }
        ops.extend(extra);
        for _ in 0..self.rng.range(0, 2) {
            ops.extend(self.segment(0));
        }
        if let Some(b) = local {
            if self.rng.coin() {
                ops.push(Op::Barrier(b));
            }
        }
        ops
    }

    /// `count` passes of `body` per thread, or (sometimes, when `body` has
    /// no barrier) `total` passes in all from a new pool that the group's
    /// threads drain.
    fn fixed_or_drained(&mut self, count: u64, total: u64, body: Vec<Op>) -> Op {
        let has_barrier = body.iter().any(|op| matches!(op, Op::Barrier(_)));
        if has_barrier || !self.rng.coin() {
            return Op::Repeat { count, body };
        }
        let pool = u32::try_from(self.p.pools.len()).unwrap_or(u32::MAX);
        self.p.pools.push(PoolDef {
            name: format!("p{pool}"),
            units: total,
        });
        Op::Drain { pool, body }
    }

    fn local_barrier(&mut self, threads: u32) -> Option<u32> {
        if self.rng.below(3) == 0 {
            return None;
        }
        // Every thread of the group arrives equally often, so parties equal to
        // the group's size (or 1) always fill up.
        let parties = if self.rng.below(4) == 0 { 1 } else { threads };
        Some(self.barrier(parties))
    }

    // Casts: test code: the values come from small fixed or generator-bounded ranges.
    #[allow(clippy::cast_possible_truncation)]
    fn build(mut self) -> Program {
        // Plain worker groups.
        for g in 0..self.rng.range(1, 2) {
            let threads = self.rng.range(1, 2) as u32;
            let local = self.local_barrier(threads);
            let count = self.rng.range(1, 4);
            let body = self.body(local, Vec::new());
            let op = self.fixed_or_drained(count, count * u64::from(threads), body);
            self.p.groups.push(Group {
                name: format!("worker{g}"),
                threads,
                ops: vec![op],
            });
        }
        // A pipeline: producer → (middle →) consumer.
        if self.rng.coin() {
            let stages = self.rng.range(2, 3) as usize;
            let threads: Vec<u32> = (0..stages).map(|_| self.rng.range(1, 2) as u32).collect();
            let queues: Vec<u32> = (0..stages - 1).map(|_| self.queue()).collect();
            // Every stage moves the same number of items in all: `items`,
            // divisible by every stage's thread count.
            let items =
                self.rng.range(1, 6) * threads.iter().map(|&t| u64::from(t)).product::<u64>();
            for s in 0..stages {
                let mut hop = Vec::new();
                if s > 0 {
                    hop.push(Op::Pop(queues[s - 1]));
                }
                if s + 1 < stages {
                    hop.push(Op::Push(queues[s]));
                }
                let local = self.local_barrier(threads[s]);
                let body = self.body(local, hop);
                let op = self.fixed_or_drained(items / u64::from(threads[s]), items, body);
                self.p.groups.push(Group {
                    name: format!("stage{s}"),
                    threads: threads[s],
                    ops: vec![op],
                });
            }
        }
        // Optional global barriers, reached once at the start and/or the end
        // of every group.
        let total = self.p.total_threads();
        let at_start = self.rng.below(3) == 0;
        let at_end = self.rng.below(3) == 0;
        if at_start || at_end {
            let b = self.barrier(total);
            for g in &mut self.p.groups {
                if at_start {
                    g.ops.insert(0, Op::Barrier(b));
                }
                if at_end {
                    g.ops.push(Op::Barrier(b));
                }
            }
        }
        self.p
    }
}

/// Run `f`, but if it has not returned after `limit` (which only a bug in the
/// executor's own timeout/teardown could cause), report the seed and abort the
/// test process instead of hanging it.
fn watchdog<T>(limit: Duration, seed: u64, f: impl FnOnce() -> T) -> T {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
            eprintln!("watchdog: seed {seed} still running after {limit:?}; aborting");
            std::process::abort();
        }
    });
    let r = f();
    let _ = done.send(());
    let _ = dog.join();
    r
}

proptest! {
    // 48 cases by default (a few seconds in a debug build); PROPTEST_CASES
    // raises it for a soak run.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
    ))]

    #[test]
    fn random_valid_workloads_terminate_and_conserve(seed in any::<u64>()) {
        let p = Gen::new(seed).build();
        let opts = NativeOptions {
            pin: None,
            // Generous: these programs take milliseconds; only a deadlock
            // gets anywhere near this.
            timeout: Some(Duration::from_secs(60)),
            io_thread_cpus: Vec::new(),
        };
        let ex = watchdog(Duration::from_secs(180), seed, || execute(&p, &opts))
            .map_err(|e| TestCaseError::fail(format!("seed {seed}: {e}\n{p:#?}")))?;
        prop_assert_eq!(ex.counts.to_map(), p.expected_counts(), "seed {}", seed);
        prop_assert_eq!(u32::try_from(ex.threads.len()).unwrap_or(u32::MAX), p.total_threads());
        prop_assert_eq!(&ex.spin_lock_acquires, &ex.spin_lock_releases);
        prop_assert_eq!(&ex.mutex_acquires, &ex.mutex_releases);
        prop_assert!(ex.spin_lock_held.iter().chain(&ex.mutex_held).all(|h| !h));
        prop_assert_eq!(&ex.queue_pushes, &ex.queue_pops, "every push popped");
        prop_assert_eq!(&ex.queue_push_sums, &ex.queue_pop_sums, "the same tokens");
        prop_assert!(ex.queue_left.iter().all(|&l| l == 0));
        let units: Vec<u64> = p.pools.iter().map(|q| q.units).collect();
        prop_assert_eq!(&ex.pool_claims, &units, "every unit claimed once");
        prop_assert!(ex.pool_left.iter().all(|&l| l == 0));
        for (i, b) in p.barriers.iter().enumerate() {
            prop_assert_eq!(
                ex.barrier_arrivals[i],
                ex.barrier_generations[i] * u64::from(b.parties),
                "barrier {}: every generation completed by all parties", &b.name
            );
        }
    }
}

#[test]
fn the_generator_covers_every_op_kind() {
    // Guard against a generator that silently stops producing some op.
    let mut seen = std::collections::BTreeSet::new();
    fn walk(ops: &[Op], seen: &mut std::collections::BTreeSet<&'static str>) {
        for op in ops {
            let kind = match op {
                Op::Compute { .. } => "compute",
                Op::Touch {
                    buffer: BufferRef::Private,
                    ..
                } => "touch-private",
                Op::Touch { .. } => "touch-shared",
                Op::SpinLock(_) | Op::SpinUnlock(_) => "spin",
                Op::MutexLock(_) | Op::MutexUnlock(_) => "mutex",
                Op::Barrier(_) => "barrier",
                Op::Push(_) | Op::Pop(_) => "queue",
                Op::Atomic { .. } => "atomic",
                Op::SleepNs(_) => "sleep",
                Op::Yield(_) => "yield",
                Op::Shootdown { .. } => "shootdown",
                Op::Io { .. } => "io",
                Op::Repeat { body, .. } => {
                    walk(body, seen);
                    "repeat"
                }
                Op::Drain { body, .. } => {
                    walk(body, seen);
                    "drain"
                }
            };
            seen.insert(kind);
        }
    }
    for seed in 0..200 {
        let p = Gen::new(seed).build();
        for g in &p.groups {
            walk(&g.ops, &mut seen);
        }
    }
    assert_eq!(seen.len(), 13, "{seen:?}");
}
