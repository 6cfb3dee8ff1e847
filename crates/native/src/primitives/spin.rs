//! User-space spin locks: test-and-set, test-and-test-and-set and ticket, each
//! with or without PAUSE in the spin loop (docs/program-encoding.md).

use super::{relax, Aborted, Ctx};
use std::sync::atomic::{AtomicU32, Ordering};

/// Spin-lock algorithm (same meaning as the workload model's `SpinKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpinKind {
    Tas,
    Ttas,
    Ticket,
}

impl From<smplab_workload::SpinKind> for SpinKind {
    fn from(k: smplab_workload::SpinKind) -> Self {
        match k {
            smplab_workload::SpinKind::Tas => SpinKind::Tas,
            smplab_workload::SpinKind::Ttas => SpinKind::Ttas,
            smplab_workload::SpinKind::Ticket => SpinKind::Ticket,
        }
    }
}

/// A spin lock. `word` is the lock bit for tas/ttas and the next ticket for
/// ticket locks; `serving` is the ticket being served. Both live on one cache
/// line, as in Linux's ticket spinlock: a release and the next acquire touch
/// one line.
#[derive(Debug)]
#[repr(align(64))]
pub struct SpinLock {
    kind: SpinKind,
    pause: bool,
    word: AtomicU32,
    serving: AtomicU32,
}

impl SpinLock {
    pub fn new(kind: SpinKind, pause: bool) -> Self {
        SpinLock {
            kind,
            pause,
            word: AtomicU32::new(0),
            serving: AtomicU32::new(0),
        }
    }

    pub fn kind(&self) -> SpinKind {
        self.kind
    }

    /// Acquire, spinning; every pass that found the lock taken counts one
    /// spin iteration.
    #[inline]
    pub fn lock(&self, ctx: &mut Ctx<'_>) -> Result<(), Aborted> {
        // Fast path: one atomic op and no bookkeeping when the lock is free,
        // so an uncontended acquire costs what a bare lock costs.
        let ticket = match self.kind {
            SpinKind::Tas => {
                if self.word.swap(1, Ordering::Acquire) == 0 {
                    return Ok(());
                }
                0
            }
            SpinKind::Ttas => {
                if self.word.load(Ordering::Relaxed) == 0
                    && self.word.swap(1, Ordering::Acquire) == 0
                {
                    return Ok(());
                }
                0
            }
            SpinKind::Ticket => {
                // lock xadd a ticket; free if it is already being served.
                let t = self.word.fetch_add(1, Ordering::Relaxed);
                if self.serving.load(Ordering::Acquire) == t {
                    return Ok(());
                }
                t
            }
        };
        self.lock_slow(ticket, ctx)
    }

    /// The spin loops. The fast path's failed attempt is the first pass that
    /// found the lock taken.
    #[cold]
    fn lock_slow(&self, ticket: u32, ctx: &mut Ctx<'_>) -> Result<(), Aborted> {
        let mut spins = 1u64;
        relax(self.pause);
        let r = match self.kind {
            SpinKind::Tas => loop {
                // xchg until it returns 0.
                if self.word.swap(1, Ordering::Acquire) == 0 {
                    break Ok(());
                }
                spins += 1;
                if let Err(e) = ctx.check_spin(spins) {
                    break Err(e);
                }
                relax(self.pause);
            },
            SpinKind::Ttas => 'outer: loop {
                // Spin reading (the line stays shared in every waiter's cache),
                // exchange only when the lock looks free.
                while self.word.load(Ordering::Relaxed) != 0 {
                    spins += 1;
                    if let Err(e) = ctx.check_spin(spins) {
                        break 'outer Err(e);
                    }
                    relax(self.pause);
                }
                if self.word.swap(1, Ordering::Acquire) == 0 {
                    break Ok(());
                }
                // Lost the race for a free-looking lock: that pass found it taken.
                spins += 1;
                if let Err(e) = ctx.check_spin(spins) {
                    break Err(e);
                }
                relax(self.pause);
            },
            SpinKind::Ticket => {
                // Wait for our ticket (taken with lock xadd in `lock`) to be
                // served. An aborted waiter cannot hand its ticket back, but
                // after an abort nobody takes the lock again.
                loop {
                    if self.serving.load(Ordering::Acquire) == ticket {
                        break Ok(());
                    }
                    spins += 1;
                    if let Err(e) = ctx.check_spin(spins) {
                        break Err(e);
                    }
                    relax(self.pause);
                }
            }
        };
        ctx.stats.spin_iterations += spins;
        r
    }

    /// Release. Must only be called by the holder.
    #[inline]
    pub fn unlock(&self) {
        match self.kind {
            SpinKind::Tas | SpinKind::Ttas => self.word.store(0, Ordering::Release),
            SpinKind::Ticket => {
                // Only the holder writes `serving`, so load+store is enough (no
                // locked instruction needed), exactly like Linux's ticket unlock.
                let s = self.serving.load(Ordering::Relaxed);
                self.serving.store(s.wrapping_add(1), Ordering::Release);
            }
        }
    }

    /// Whether the lock is currently held (for end-of-run checks).
    pub fn is_locked(&self) -> bool {
        match self.kind {
            SpinKind::Tas | SpinKind::Ttas => self.word.load(Ordering::Acquire) != 0,
            SpinKind::Ticket => {
                self.word.load(Ordering::Acquire) != self.serving.load(Ordering::Acquire)
            }
        }
    }
}
