//! The wake-up primitive of a halted vCPU under `--irqchip user`: the vCPU
//! thread blocks on its own [`HaltWaiter`] after the VMM's halt-poll window;
//! the irqchip sink's `Kick` and the vCPU's `Kicker` waker call
//! [`HaltWaiter::wake`]. A wake before the wait is never lost (the flag stays set
//! until a wait consumes it), and the wait re-checks the interrupt controller
//! (pull model) before it sleeps, so an interrupt raised between the guest's HLT
//! exit and the sleep is taken at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How a halt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaltEnd {
    /// An interrupt was already pending, or became pending within the poll window.
    Polled,
    /// Woken from sleep by [`HaltWaiter::wake`]; the latency from the wake call
    /// to the waiter running again (the figure the record's histogram wants).
    Woken { latency: Duration },
}

/// One vCPU's halt flag, condition variable and wake time stamp.
pub struct HaltWaiter {
    woken: Mutex<bool>,
    signal: Condvar,
    /// A wake happened since the last wait (read while polling, without the lock).
    pending: AtomicBool,
    /// When the last wake came, in ns since `epoch`.
    woken_at_ns: AtomicU64,
    epoch: Instant,
}

impl Default for HaltWaiter {
    fn default() -> Self {
        Self::new()
    }
}

impl HaltWaiter {
    pub fn new() -> Self {
        HaltWaiter {
            woken: Mutex::new(false),
            signal: Condvar::new(),
            pending: AtomicBool::new(false),
            woken_at_ns: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Wake the vCPU (from any thread; never blocks for long: one uncontended
    /// lock and a notify).
    pub fn wake(&self) {
        self.woken_at_ns.store(self.now_ns(), Ordering::Relaxed);
        self.pending.store(true, Ordering::SeqCst);
        let mut woken = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        *woken = true;
        self.signal.notify_one();
    }

    /// Halt until an interrupt is pending or a wake comes. `deliverable` asks the
    /// interrupt controller (`PENDING` through the bus); it is polled for up to
    /// `poll` (0: no polling) before the thread sleeps, and asked once more
    /// after the wake flag is armed, so nothing raised meanwhile is missed.
    pub fn halt(&self, poll: Duration, mut deliverable: impl FnMut() -> bool) -> HaltEnd {
        let start = Instant::now();
        loop {
            if self.pending.swap(false, Ordering::SeqCst) || deliverable() {
                self.clear();
                return HaltEnd::Polled;
            }
            if start.elapsed() >= poll {
                break;
            }
            std::thread::yield_now();
        }
        let mut woken = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        // A raise after the last poll kicked us: its wake set `woken` (under
        // this lock), so the wait below returns at once.
        while !*woken {
            woken = self.signal.wait(woken).unwrap_or_else(|e| e.into_inner());
        }
        *woken = false;
        self.pending.store(false, Ordering::SeqCst);
        let latency = self
            .now_ns()
            .saturating_sub(self.woken_at_ns.load(Ordering::Relaxed));
        HaltEnd::Woken {
            latency: Duration::from_nanos(latency),
        }
    }

    fn clear(&self) {
        *self.woken.lock().unwrap_or_else(|e| e.into_inner()) = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_wake_before_the_halt_is_not_lost() {
        let waiter = HaltWaiter::new();
        waiter.wake();
        assert_eq!(waiter.halt(Duration::ZERO, || false), HaltEnd::Polled);
    }

    #[test]
    fn a_pending_interrupt_ends_the_halt_at_once() {
        let waiter = HaltWaiter::new();
        assert_eq!(waiter.halt(Duration::ZERO, || true), HaltEnd::Polled);
    }

    #[test]
    fn a_wake_from_another_thread_ends_a_sleeping_halt() {
        let waiter = Arc::new(HaltWaiter::new());
        let waker = {
            let waiter = waiter.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                waiter.wake();
            })
        };
        let end = waiter.halt(Duration::ZERO, || false);
        assert!(matches!(end, HaltEnd::Woken { .. }), "{end:?}");
        waker.join().expect("waker");
        // The wake was consumed: the next halt with something pending polls.
        assert_eq!(waiter.halt(Duration::ZERO, || true), HaltEnd::Polled);
    }

    #[test]
    fn the_poll_window_sees_an_interrupt_raised_during_it() {
        let waiter = HaltWaiter::new();
        let mut asked = 0;
        let end = waiter.halt(Duration::from_secs(5), || {
            asked += 1;
            asked == 3
        });
        assert_eq!(end, HaltEnd::Polled);
        assert_eq!(asked, 3);
    }

    #[test]
    fn many_wakes_and_halts_never_hang() {
        let waiter = Arc::new(HaltWaiter::new());
        let rounds = 10_000;
        let done = Arc::new(AtomicU64::new(0));
        let waker = {
            let (waiter, done) = (waiter.clone(), done.clone());
            std::thread::spawn(move || {
                // One wake per round: the halter's `done` count follows.
                for round in 0..rounds {
                    while done.load(Ordering::SeqCst) < round {
                        std::thread::yield_now();
                    }
                    waiter.wake();
                }
            })
        };
        for round in 0..rounds {
            waiter.halt(Duration::from_micros(10), || false);
            done.store(round + 1, Ordering::SeqCst);
        }
        waker.join().expect("waker");
    }
}
