//! The native executor's primitives against plain equivalents written here:
//!
//! - uncontended lock/unlock: `FutexMutex` vs a minimal futex mutex (and
//!   `std::sync::Mutex` for reference); spin locks vs a bare `swap` lock;
//! - one round of a 2-thread spinning barrier: `Barrier` (spin, PAUSE) vs a
//!   minimal hand-written sense-reversing spin barrier.
//!
//! Targets: both within 1.2x of the plain version. Compare the
//! numbers of one run with each other, never across runs or machines. After
//! the criterion benchmarks, the binary prints *paired* ratios: the two
//! versions timed in alternating chunks, median of the per-pair ratios, which
//! stays meaningful on a machine busy with other work.
//! Run: `cargo bench -p smplab-native --bench primitives` (about a minute and
//! a half).

use criterion::{black_box, criterion_group, Criterion};
use smplab_native::primitives::{Barrier, BarrierWait, Ctx, FutexMutex, SpinKind, SpinLock};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The plainest futex mutex: 0 free, 1 locked, 2 contended; no counting, no
/// spin phase, no abort flag.
struct PlainFutexMutex(AtomicU32);

impl PlainFutexMutex {
    #[inline]
    fn lock(&self) {
        if self
            .0
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
    }
    #[cold]
    fn lock_contended(&self) {
        while self.0.swap(2, Ordering::Acquire) != 0 {
            // SAFETY: futex wait on a live AtomicU32 we borrow; null timeout.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.0.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    2u32,
                    std::ptr::null::<libc::timespec>(),
                );
            }
        }
    }
    #[inline]
    fn unlock(&self) {
        if self.0.swap(0, Ordering::Release) == 2 {
            // SAFETY: futex wake on a live AtomicU32 we borrow.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.0.as_ptr(),
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    1i32,
                );
            }
        }
    }
}

/// A minimal 2-thread sense-reversing spin barrier with PAUSE.
struct PlainSpinBarrier {
    count: AtomicU32,
    sense: AtomicBool,
    parties: u32,
}

impl PlainSpinBarrier {
    fn new(parties: u32) -> Self {
        PlainSpinBarrier {
            count: AtomicU32::new(parties),
            sense: AtomicBool::new(false),
            parties,
        }
    }
    #[inline]
    fn wait(&self, local_sense: &mut bool) {
        *local_sense = !*local_sense;
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.count.store(self.parties, Ordering::Relaxed);
            self.sense.store(*local_sense, Ordering::Release);
        } else {
            while self.sense.load(Ordering::Acquire) != *local_sense {
                std::hint::spin_loop();
            }
        }
    }
}

fn uncontended_locks(c: &mut Criterion) {
    let mut g = c.benchmark_group("uncontended_lock_unlock");
    let plain = PlainFutexMutex(AtomicU32::new(0));
    g.bench_function("plain_futex_mutex", |b| {
        b.iter(|| {
            plain.lock();
            black_box(&plain);
            plain.unlock();
        })
    });
    let mine = FutexMutex::new(0);
    let mut ctx = Ctx::new();
    g.bench_function("smplab_futex_mutex", |b| {
        b.iter(|| {
            // Never aborted: the Err arm is unreachable here.
            let _ = mine.lock(&mut ctx);
            black_box(&mine);
            mine.unlock(&mut ctx);
        })
    });
    let adaptive = FutexMutex::new(1000);
    g.bench_function("smplab_adaptive_mutex", |b| {
        b.iter(|| {
            let _ = adaptive.lock(&mut ctx);
            black_box(&adaptive);
            adaptive.unlock(&mut ctx);
        })
    });
    let std_mutex = std::sync::Mutex::new(());
    g.bench_function("std_mutex", |b| {
        b.iter(|| {
            let guard = std_mutex.lock();
            black_box(&guard);
            drop(guard);
        })
    });
    let bare = AtomicBool::new(false);
    g.bench_function("plain_swap_spinlock", |b| {
        b.iter(|| {
            while bare.swap(true, Ordering::Acquire) {
                std::hint::spin_loop();
            }
            black_box(&bare);
            bare.store(false, Ordering::Release);
        })
    });
    for (name, kind) in [
        ("smplab_tas", SpinKind::Tas),
        ("smplab_ttas", SpinKind::Ttas),
        ("smplab_ticket", SpinKind::Ticket),
    ] {
        let l = SpinLock::new(kind, true);
        g.bench_function(name, |b| {
            b.iter(|| {
                let _ = l.lock(&mut ctx);
                black_box(&l);
                l.unlock();
            })
        });
    }
    g.finish();
}

/// Time `iters` rounds of a 2-thread barrier: a partner thread does the same
/// number of rounds; timing starts after one synchronizing round.
fn two_thread_rounds(iters: u64, wait: &(dyn Fn(&mut bool) + Sync)) -> Duration {
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut sense = false;
            for _ in 0..=iters {
                wait(&mut sense);
            }
        });
        let mut sense = false;
        wait(&mut sense);
        let t0 = Instant::now();
        for _ in 0..iters {
            wait(&mut sense);
        }
        t0.elapsed()
    })
}

fn spin_barrier_round(c: &mut Criterion) {
    let mut g = c.benchmark_group("spin_barrier_2_threads_round");
    // Two spinning threads need both CPUs of a 2-core machine; any other
    // runnable process turns a round of ~150 ns into a time slice. Many short,
    // equal samples let the undisturbed ones show (compare the fastest samples
    // in target/criterion/*/new/sample.json when the machine is busy).
    g.sampling_mode(criterion::SamplingMode::Flat);
    g.sample_size(100);
    g.bench_function("plain_sense_reversing", |b| {
        b.iter_custom(|iters| {
            let bar = PlainSpinBarrier::new(2);
            two_thread_rounds(iters, &|sense| bar.wait(sense))
        })
    });
    g.bench_function("smplab_barrier_spin", |b| {
        b.iter_custom(|iters| {
            let bar = Barrier::new(2, BarrierWait::Spin, 0, true);
            two_thread_rounds(iters, &|_| {
                let mut ctx = Ctx::new();
                let _ = bar.wait(&mut ctx);
                black_box(ctx.stats.spin_iterations);
            })
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(40)
}

/// Median of the ratios `a_i / b_i` of adjacent chunk timings, and the ratio
/// of the fastest chunks. On a machine shared with other work, a chunk that
/// got preempted is an outlier in one pair only, and adjacent chunks see the
/// same frequency and load: this is the ratio to trust when criterion's
/// absolute numbers wander between benchmarks.
fn paired_ratio(a: &[Duration], b: &[Duration]) -> (f64, f64) {
    let mut ratios: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(x, y)| x.as_secs_f64() / y.as_secs_f64().max(1e-12))
        .collect();
    ratios.sort_by(f64::total_cmp);
    let min = |v: &[Duration]| v.iter().min().copied().unwrap_or_default().as_secs_f64();
    (ratios[ratios.len() / 2], min(a) / min(b).max(1e-12))
}

const PAIRS: usize = 400;

fn paired_mutex() {
    const N: u64 = 20_000;
    let plain = PlainFutexMutex(AtomicU32::new(0));
    let mine = FutexMutex::new(0);
    let mut ctx = Ctx::new();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut time_mine = || {
        let t = Instant::now();
        for _ in 0..N {
            let _ = mine.lock(&mut ctx);
            black_box(&mine);
            mine.unlock(&mut ctx);
        }
        t.elapsed()
    };
    let time_plain = || {
        let t = Instant::now();
        for _ in 0..N {
            plain.lock();
            black_box(&plain);
            plain.unlock();
        }
        t.elapsed()
    };
    for i in 0..PAIRS {
        // Alternate which goes first, so neither always follows the other.
        if i % 2 == 0 {
            a.push(time_mine());
            b.push(time_plain());
        } else {
            b.push(time_plain());
            a.push(time_mine());
        }
    }
    let (median, best) = paired_ratio(&a, &b);
    println!(
        "paired: uncontended lock/unlock smplab FutexMutex / plain futex mutex: median {median:.3}x, fastest chunks {best:.3}x ({PAIRS} pairs of {N})"
    );
}

fn paired_barrier() {
    const N: u64 = 1_000;
    let plain = PlainSpinBarrier::new(2);
    let mine = Barrier::new(2, BarrierWait::Spin, 0, true);
    // Both threads walk the same schedule: pairs of N-round chunks, one on
    // each barrier, the smplab one first in even pairs and second in odd ones.
    let is_mine = |chunk: usize| (chunk & 1 == 0) == (chunk & 2 == 0);
    let run = |times: Option<&mut Vec<Duration>>| {
        let mut ctx = Ctx::new();
        let mut sense = false;
        let mut times = times;
        for chunk in 0..2 * PAIRS {
            let t = Instant::now();
            for _ in 0..N {
                if is_mine(chunk) {
                    let _ = mine.wait(&mut ctx);
                } else {
                    plain.wait(&mut sense);
                }
            }
            if let Some(v) = times.as_deref_mut() {
                v.push(t.elapsed());
            }
        }
    };
    let mut times = Vec::with_capacity(2 * PAIRS);
    std::thread::scope(|s| {
        s.spawn(|| run(None));
        run(Some(&mut times));
    });
    let pick = |mine_side: bool| -> Vec<Duration> {
        (0..times.len())
            .filter(|&c| is_mine(c) == mine_side)
            .map(|c| times[c])
            .collect()
    };
    let (a, b) = (pick(true), pick(false));
    let (median, best) = paired_ratio(&a, &b);
    println!(
        "paired: 2-thread spin barrier round smplab Barrier / plain sense-reversing: median {median:.3}x, fastest chunks {best:.3}x ({PAIRS} pairs of {N} rounds)"
    );
}

criterion_group! {
    name = benches;
    config = config();
    targets = uncontended_locks, spin_barrier_round
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo test --benches` runs this binary in test mode: skip the extra
    // measurements there.
    if std::env::args().any(|a| a == "--bench") {
        paired_mutex();
        paired_barrier();
    }
}
