//! The start gate: every thread waits here, ready, until the controller
//! opens it, so all threads begin together.
//!
//! When there is a CPU for every thread, waiters spin and the controller opens
//! the gate only once they have *settled*: seen running at the same time, each
//! on its own CPU. A blocking gate (a futex) released them all with one wake
//! from the controller's CPU, and Linux's wakeup placement often put two
//! threads on one CPU; the balancer moved one a few milliseconds later, which
//! is a large part of a run of tens of milliseconds. Measured on the 2-CPU
//! development host: unpinned 2-thread blackscholes 30.0–38.2 ms (three of
//! eight runs 15–27% slow) against 29.7–30.5 ms pinned; streamcluster's two threads
//! sometimes shared one CPU for the whole run (26.7 ms against 11.9 ms). The
//! guest kernel's gate spins too (`start_gate` in crates/guest/kernel/gate.c),
//! so both executors now start with their threads running, not waking.
//!
//! With more threads than CPUs, spinning would take CPUs from threads still
//! getting ready, and they cannot all run at once anyway: waiters block.

use crate::primitives::CachePadded;
use crate::sys;
use smplab_record::window::SettleOutcome;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long the controller watches the spinning waiters in one sample.
/// Well under a CFS time slice (0.75–3 ms), so a thread sharing a CPU with
/// another rarely runs in the same sample as it.
const SAMPLE: Duration = Duration::from_micros(200);
/// Consecutive samples in which every waiter must have run.
const SETTLED_SAMPLES: u32 = 3;
/// Open the gate anyway after this long (a loaded host may never give every
/// thread its own CPU); the record's window shows the wait.
const SETTLE_LIMIT: Duration = Duration::from_millis(50);
/// Spins between two heartbeats.
const SPINS_PER_BEAT: u32 = 64;

/// The gate and, in spinning mode, one heartbeat per thread.
pub(crate) struct StartGate {
    /// 0 while closed, 1 once every thread may start.
    open: AtomicU32,
    /// Each spinning waiter's heartbeat, on its own cache line; empty when
    /// waiters block (more threads than CPUs).
    beats: Vec<CachePadded<AtomicU64>>,
}

/// How the gate opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    /// Waiters blocked (more threads than CPUs): opened at once.
    Blocking,
    /// Every waiter ran in each of the last samples.
    Settled,
    /// The settle limit passed first.
    Unsettled,
}

impl From<Opening> for SettleOutcome {
    fn from(o: Opening) -> Self {
        match o {
            Opening::Blocking => SettleOutcome::Skipped,
            Opening::Settled => SettleOutcome::Settled,
            Opening::Unsettled => SettleOutcome::Unsettled,
        }
    }
}

impl StartGate {
    /// A gate for `threads` threads on a host that lets this process use
    /// `cpus` CPUs.
    pub fn new(threads: usize, cpus: usize) -> StartGate {
        StartGate {
            open: AtomicU32::new(0),
            beats: if threads <= cpus {
                (0..threads)
                    .map(|_| CachePadded(AtomicU64::new(0)))
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// The CPUs this process may run on (its affinity mask and cgroup limit).
    pub fn usable_cpus() -> usize {
        std::thread::available_parallelism().map_or(1, usize::from)
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst) != 0
    }

    /// Open the gate and wake blocked waiters (also how an abort gets every
    /// thread past it).
    pub fn open(&self) {
        self.open.store(1, Ordering::SeqCst);
        sys::futex_wake(&self.open, u32::MAX);
    }

    /// Wait, as thread `tid`, until the gate opens.
    pub fn wait(&self, tid: usize) {
        match self.beats.get(tid) {
            Some(beat) => {
                while !self.is_open() {
                    for _ in 0..SPINS_PER_BEAT {
                        std::hint::spin_loop();
                    }
                    beat.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                while !self.is_open() {
                    sys::futex_wait(&self.open, 0, None);
                }
            }
        }
    }

    /// As the controller, once every thread is ready: wait until the
    /// spinning waiters have settled (or the limit passes), then open.
    pub fn settle_and_open(&self) -> Opening {
        let opening = if !self.beats.is_empty() {
            self.settle()
        } else {
            Opening::Blocking
        };
        self.open();
        opening
    }

    fn settle(&self) -> Opening {
        let began = Instant::now();
        let mut watch = Settling::default();
        let mut before = self.heartbeats();
        // An abort opens the gate early: stop watching then.
        while began.elapsed() < SETTLE_LIMIT && !self.is_open() {
            // Sleep, so the controller takes no CPU a waiter needs.
            std::thread::sleep(SAMPLE);
            let now = self.heartbeats();
            if watch.observe(&before, &now) {
                return Opening::Settled;
            }
            before = now;
        }
        Opening::Unsettled
    }

    fn heartbeats(&self) -> Vec<u64> {
        self.beats
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }
}

/// Consecutive samples in which every waiter ran.
#[derive(Debug, Default)]
struct Settling {
    runs: u32,
}

impl Settling {
    /// One sample: heartbeats `before` and `now`. True once every waiter has
    /// run in [`SETTLED_SAMPLES`] samples in a row.
    fn observe(&mut self, before: &[u64], now: &[u64]) -> bool {
        if before.iter().zip(now).all(|(b, n)| n > b) {
            self.runs += 1;
        } else {
            self.runs = 0;
        }
        self.runs >= SETTLED_SAMPLES
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn more_threads_than_cpus_block_and_open_at_once() {
        let g = StartGate::new(3, 2);
        assert!(g.beats.is_empty());
        assert_eq!(g.settle_and_open(), Opening::Blocking);
        g.wait(0);
        assert!(g.is_open());
    }

    #[test]
    fn settled_means_every_waiter_ran_in_consecutive_samples() {
        let mut w = Settling::default();
        assert!(!w.observe(&[0, 0], &[1, 1]));
        assert!(!w.observe(&[1, 1], &[2, 2]));
        // Thread 1 did not run in this sample (it shares a CPU): start over.
        assert!(!w.observe(&[2, 2], &[3, 2]));
        assert!(!w.observe(&[3, 2], &[4, 3]));
        assert!(!w.observe(&[4, 3], &[5, 4]));
        assert!(w.observe(&[5, 4], &[6, 5]));
    }

    #[test]
    fn a_waiter_that_never_runs_leaves_the_gate_unsettled() {
        // Thread 1 never arrives, so its heartbeat never moves.
        let g = Arc::new(StartGate::new(2, 2));
        let w = Arc::clone(&g);
        let h = std::thread::spawn(move || w.wait(0));
        let began = Instant::now();
        assert_eq!(g.settle_and_open(), Opening::Unsettled);
        assert!(began.elapsed() >= SETTLE_LIMIT);
        h.join().unwrap();
    }
}
