//! Unit tests of the primitives on their own: mutual exclusion under
//! contention, barrier generations (including overlapping ones), queue FIFO
//! order and blocking. No timing assertions: where a test sleeps, it only gives
//! a blocked thread the chance to misbehave.

use smplab_native::primitives::{
    Barrier, BarrierWait, BoundedQueue, Ctx, FutexMutex, SpinKind, SpinLock, Stats,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const THREADS: usize = 4;
const ROUNDS: u64 = 2_000;

/// Run `body(thread index, ctx)` on THREADS threads and sum their stats.
fn on_threads(body: impl Fn(usize, &mut Ctx<'static>) + Sync) -> Stats {
    on_n_threads(THREADS, body)
}

/// Like `on_threads` with `n` threads. Pure spinning with more threads than
/// CPUs makes every barrier round wait for preemptions, so spinning tests use
/// no more threads than this 2-core machine has.
fn on_n_threads(n: usize, body: impl Fn(usize, &mut Ctx<'static>) + Sync) -> Stats {
    let mut total = Stats::default();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|t| {
                let body = &body;
                s.spawn(move || {
                    let mut ctx = Ctx::new();
                    body(t, &mut ctx);
                    ctx.stats
                })
            })
            .collect();
        for h in hs {
            total.add(&h.join().expect("worker thread"));
        }
    });
    total
}

/// A critical section that detects overlap: a flag no two holders may see set,
/// and a non-atomic increment (load then store) that loses updates if two
/// threads interleave.
struct Section {
    inside: AtomicBool,
    count: AtomicU64,
}

impl Section {
    fn new() -> Self {
        Section {
            inside: AtomicBool::new(false),
            count: AtomicU64::new(0),
        }
    }
    fn enter(&self) {
        assert!(
            !self.inside.swap(true, Ordering::Relaxed),
            "two threads inside the critical section"
        );
        let v = self.count.load(Ordering::Relaxed);
        std::hint::spin_loop();
        self.count.store(v + 1, Ordering::Relaxed);
        self.inside.store(false, Ordering::Relaxed);
    }
}

#[test]
fn spin_locks_exclude_under_contention() {
    for kind in [SpinKind::Tas, SpinKind::Ttas, SpinKind::Ticket] {
        for pause in [false, true] {
            let lock = SpinLock::new(kind, pause);
            let cs = Section::new();
            on_threads(|_, ctx| {
                for _ in 0..ROUNDS {
                    lock.lock(ctx).expect("never aborted");
                    cs.enter();
                    lock.unlock();
                }
            });
            assert_eq!(
                cs.count.load(Ordering::SeqCst),
                THREADS as u64 * ROUNDS,
                "{kind:?} pause={pause}"
            );
            assert!(!lock.is_locked());
        }
    }
}

#[test]
fn futex_mutex_excludes_under_contention_blocking_and_adaptive() {
    for spin_limit in [0, 100] {
        let m = FutexMutex::new(spin_limit);
        let cs = Section::new();
        let stats = on_threads(|_, ctx| {
            for _ in 0..ROUNDS {
                m.lock(ctx).expect("never aborted");
                cs.enter();
                m.unlock(ctx);
            }
        });
        assert_eq!(cs.count.load(Ordering::SeqCst), THREADS as u64 * ROUNDS);
        assert!(!m.is_locked());
        if spin_limit == 0 {
            assert_eq!(stats.spin_iterations, 0, "spin_limit 0 never spins");
        }
        // Every sleeper was woken by someone, no wake went to a non-sleeper.
        assert!(stats.wakeups <= stats.blocks + THREADS as u64 * ROUNDS);
    }
}

#[test]
fn uncontended_mutex_neither_blocks_nor_wakes() {
    let m = FutexMutex::new(0);
    let mut ctx = Ctx::new();
    for _ in 0..1000 {
        m.lock(&mut ctx).expect("never aborted");
        m.unlock(&mut ctx);
    }
    assert_eq!(ctx.stats, Stats::default());
}

#[test]
fn barrier_generations_hold_every_mode() {
    for wait in [
        BarrierWait::Spin,
        BarrierWait::Block,
        BarrierWait::SpinThenBlock,
    ] {
        for pause in [false, true] {
            let n = if wait == BarrierWait::Block {
                THREADS
            } else {
                2
            };
            let b = Barrier::new(u32::try_from(n).unwrap_or(u32::MAX), wait, 500, pause);
            let rounds = 200u64;
            // Each thread records the round it reached; after the barrier every
            // thread must have reached at least this round.
            let reached: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
            let stats = on_n_threads(n, |t, ctx| {
                for r in 1..=rounds {
                    reached[t].store(r, Ordering::SeqCst);
                    b.wait(ctx).expect("never aborted");
                    for other in &reached {
                        assert!(other.load(Ordering::SeqCst) >= r, "{wait:?}: passed early");
                    }
                }
            });
            assert_eq!(b.generations(), rounds, "{wait:?}");
            assert_eq!(b.arrivals(), rounds * n as u64);
            match wait {
                BarrierWait::Spin => assert_eq!(stats.blocks, 0, "a spin barrier never blocks"),
                BarrierWait::Block => assert_eq!(stats.spin_iterations, 0),
                BarrierWait::SpinThenBlock => {}
            }
        }
    }
}

#[test]
// Casts: test code: the values come from small fixed or generator-bounded ranges.
#[allow(clippy::cast_possible_truncation)]
fn barrier_with_fewer_parties_than_users_completes_every_generation() {
    // 4 threads on a 2-party barrier: two generations per round overlap and may
    // open out of order; every one must complete with exactly 2 arrivals. A
    // full 4-party barrier ends each round: without it a fast thread could run
    // ahead and leave the last thread with no partner (a real deadlock of the
    // program, not of the barrier).
    // Spinning with 4 threads on 2 CPUs waits for preemptions: few rounds.
    const ROUNDS_OVERLAP: u64 = 40;
    for wait in [
        BarrierWait::Spin,
        BarrierWait::Block,
        BarrierWait::SpinThenBlock,
    ] {
        let pairs = Barrier::new(2, wait, 100, true);
        let all = Barrier::new(THREADS as u32, wait, 100, true);
        on_threads(|_, ctx| {
            for _ in 0..ROUNDS_OVERLAP {
                pairs.wait(ctx).expect("never aborted");
                all.wait(ctx).expect("never aborted");
            }
        });
        assert_eq!(pairs.arrivals(), ROUNDS_OVERLAP * 4);
        assert_eq!(pairs.generations(), ROUNDS_OVERLAP * 2, "{wait:?}");
        assert_eq!(all.generations(), ROUNDS_OVERLAP, "{wait:?}");
    }
}

#[test]
fn queue_is_fifo() {
    let q = BoundedQueue::new(8);
    let mut ctx = Ctx::new();
    for round in 0..3u64 {
        for i in 0..8 {
            q.push(round * 100 + i, &mut ctx).expect("not full");
        }
        for i in 0..8 {
            assert_eq!(q.pop(&mut ctx).expect("not empty"), round * 100 + i);
        }
    }
    assert!(q.is_empty());
    assert_eq!(ctx.stats, Stats::default(), "no waiting without contention");
}

#[test]
fn push_blocks_while_full_and_pop_while_empty() {
    let q = Arc::new(BoundedQueue::new(2));
    let mut ctx = Ctx::new();
    q.push(1, &mut ctx).expect("room");
    q.push(2, &mut ctx).expect("room");
    let done = Arc::new(AtomicBool::new(false));
    let (q2, d2) = (Arc::clone(&q), Arc::clone(&done));
    let pusher = std::thread::spawn(move || {
        let mut ctx = Ctx::new();
        q2.push(3, &mut ctx).expect("never aborted");
        d2.store(true, Ordering::SeqCst);
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !done.load(Ordering::SeqCst),
        "push into a full queue returned"
    );
    assert_eq!(q.pop(&mut ctx).expect("item"), 1);
    pusher.join().expect("pusher");
    assert!(done.load(Ordering::SeqCst));
    assert_eq!(q.pop(&mut ctx).expect("item"), 2);
    assert_eq!(q.pop(&mut ctx).expect("item"), 3);

    let got = Arc::new(AtomicU64::new(0));
    let (q3, g3) = (Arc::clone(&q), Arc::clone(&got));
    let popper = std::thread::spawn(move || {
        let mut ctx = Ctx::new();
        g3.store(q3.pop(&mut ctx).expect("never aborted"), Ordering::SeqCst);
    });
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        got.load(Ordering::SeqCst),
        0,
        "pop from an empty queue returned"
    );
    q.push(42, &mut ctx).expect("room");
    popper.join().expect("popper");
    assert_eq!(got.load(Ordering::SeqCst), 42);
}

#[test]
fn queue_many_producers_many_consumers_keep_every_token_and_order() {
    let q = BoundedQueue::new(3);
    let per = 3_000u64;
    let producers = 2;
    let popped: Vec<std::sync::Mutex<Vec<u64>>> =
        (0..THREADS).map(|_| Default::default()).collect();
    on_threads(|t, ctx| {
        if t < producers {
            for i in 0..per {
                q.push(((t as u64) << 32) | i, ctx).expect("never aborted");
            }
        } else {
            let mut mine = Vec::new();
            for _ in 0..per {
                mine.push(q.pop(ctx).expect("never aborted"));
            }
            *popped[t].lock().expect("not poisoned") = mine;
        }
    });
    let mut all = Vec::new();
    for p in &popped {
        let mine = p.lock().expect("not poisoned").clone();
        // FIFO: one consumer sees each producer's tokens in push order.
        for prod in 0..producers as u64 {
            let seq: Vec<u64> = mine.iter().filter(|v| *v >> 32 == prod).copied().collect();
            assert!(seq.windows(2).all(|w| w[0] < w[1]), "out of order");
        }
        all.extend(mine);
    }
    all.sort_unstable();
    let mut want: Vec<u64> = (0..producers as u64)
        .flat_map(|p| (0..per).map(move |i| (p << 32) | i))
        .collect();
    want.sort_unstable();
    assert_eq!(all, want, "every token popped exactly once");
    assert!(q.is_empty());
}

#[test]
fn aborted_waiters_return_instead_of_hanging() {
    let abort = AtomicBool::new(false);
    let m = FutexMutex::new(0);
    let b = Barrier::new(2, BarrierWait::Spin, 0, true);
    let mut holder = Ctx::new();
    m.lock(&mut holder).expect("free");
    std::thread::scope(|s| {
        let lock_waiter = s.spawn(|| {
            let mut ctx = Ctx::with_abort(&abort);
            // Holder never releases: this blocks until aborted.
            m.lock(&mut ctx)
        });
        let spinner = s.spawn(|| {
            let mut ctx = Ctx::with_abort(&abort);
            // Only one party ever arrives: this spins until aborted.
            b.wait(&mut ctx)
        });
        std::thread::sleep(Duration::from_millis(30));
        abort.store(true, Ordering::SeqCst);
        // The mutex waiter sleeps in the kernel: unlocking wakes it, and it
        // must then notice the abort rather than take the lock.
        let _ = lock_waiter.is_finished();
        m.unlock(&mut holder);
        let _ = spinner.join().expect("spinner").unwrap_err();
        // It may have taken the lock if it won the race before seeing the flag;
        // either way it returned.
        let _ = lock_waiter.join().expect("lock waiter");
    });
}
