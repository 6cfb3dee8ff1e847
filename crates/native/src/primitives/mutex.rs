//! A futex mutex with an optional spin phase (an adaptive mutex, like glibc's
//! PTHREAD_MUTEX_ADAPTIVE_NP). The three-state algorithm is Drepper's
//! ("Futexes Are Tricky", mutex3): 0 free, 1 locked, 2 locked with possible
//! waiters, so an uncontended lock/unlock is one CAS and one exchange with no
//! system call.

use super::{relax, Aborted, Ctx};
use crate::sys;
use std::sync::atomic::{AtomicU32, Ordering};

const FREE: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

#[derive(Debug)]
#[repr(align(64))]
pub struct FutexMutex {
    state: AtomicU32,
    spin_limit: u32,
}

impl FutexMutex {
    /// `spin_limit` passes of spinning (with PAUSE, as glibc's adaptive mutex
    /// does) before blocking; 0 blocks at once.
    pub fn new(spin_limit: u32) -> Self {
        FutexMutex {
            state: AtomicU32::new(FREE),
            spin_limit,
        }
    }

    #[inline]
    pub fn lock(&self, ctx: &mut Ctx<'_>) -> Result<(), Aborted> {
        if self
            .state
            .compare_exchange(FREE, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Ok(());
        }
        self.lock_slow(ctx)
    }

    #[cold]
    fn lock_slow(&self, ctx: &mut Ctx<'_>) -> Result<(), Aborted> {
        // Spin phase: each pass that finds the lock taken counts one spin
        // iteration, as for spin locks.
        let mut spins = 0u64;
        while spins < u64::from(self.spin_limit) {
            spins += 1;
            relax(true);
            if let Err(e) = ctx.check_spin(spins) {
                ctx.stats.spin_iterations += spins;
                return Err(e);
            }
            // Read first so waiters do not bounce the line with failed CASes.
            if self.state.load(Ordering::Relaxed) == FREE
                && self
                    .state
                    .compare_exchange(FREE, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // This pass found it free: the `spins - 1` before it did not.
                ctx.stats.spin_iterations += spins - 1;
                return Ok(());
            }
        }
        ctx.stats.spin_iterations += spins;
        // Announce a waiter; whoever unlocks will see CONTENDED and wake one.
        // Taking the lock this way leaves it CONTENDED, which may cost one
        // unnecessary wake later but never a lost one.
        let mut c = self.state.swap(CONTENDED, Ordering::Acquire);
        while c != FREE {
            if sys::futex_wait(&self.state, CONTENDED, None) {
                ctx.stats.blocks += 1;
            }
            ctx.check()?;
            c = self.state.swap(CONTENDED, Ordering::Acquire);
        }
        Ok(())
    }

    /// Release. Must only be called by the holder.
    #[inline]
    pub fn unlock(&self, ctx: &mut Ctx<'_>) {
        if self.state.swap(FREE, Ordering::Release) == CONTENDED {
            self.wake_one(ctx);
        }
    }

    #[cold]
    fn wake_one(&self, ctx: &mut Ctx<'_>) {
        ctx.stats.wakeups += u64::from(sys::futex_wake(&self.state, 1));
    }

    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Acquire) != FREE
    }

    /// Wake every waiter (run teardown: they will see the abort flag).
    pub(crate) fn wake_all(&self) {
        sys::futex_wake(&self.state, u32::MAX);
    }
}
