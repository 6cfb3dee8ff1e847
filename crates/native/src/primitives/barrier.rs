//! A generation-counting barrier that spins, blocks on a futex, or spins up to a
//! limit and then blocks (PARSEC streamcluster's barrier).
//!
//! One 64-bit word holds `opened` (generations opened so far, high half) and
//! `count` (arrivals not yet consumed by an opening, low half). An arrival is
//! one `fetch_add(1)`; arrival number `T` (in the word's total order) belongs to
//! generation `T / parties`, which it reads off the old word as
//! `opened + count / parties` (just `opened` in the usual case `count <
//! parties`: no division), and it is the generation's last arrival if
//! `(count + 1) % parties == 0`. The last arrival opens the generation with one
//! `fetch_add((1 << 32) - parties)`: `opened + 1` and `count - parties` at once,
//! so arrivals that already belong to later generations stay counted. A
//! waiter of generation `g` leaves once `opened > g` (wrapping compare). That is
//! exact even when more threads use a barrier than it has parties and
//! generations overlap, so openers may run out of order: `opened > g` means some
//! generation `>= g` has opened, and a generation opens only after all of its
//! arrivals, which come after all arrivals of earlier generations.
//!
//! Blocking uses a separate 32-bit futex word `seq` that the opener bumps
//! before waking; `sleepers` lets the opener skip the system call when nobody
//! sleeps, so a spinning barrier never enters the kernel.

use super::{relax, Aborted, Ctx};
use crate::sys;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How a non-last arrival waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierWait {
    Spin,
    Block,
    SpinThenBlock,
}

impl From<smplab_workload::BarrierWait> for BarrierWait {
    fn from(w: smplab_workload::BarrierWait) -> Self {
        match w {
            smplab_workload::BarrierWait::Spin => BarrierWait::Spin,
            smplab_workload::BarrierWait::Block => BarrierWait::Block,
            smplab_workload::BarrierWait::SpinThenBlock => BarrierWait::SpinThenBlock,
        }
    }
}

/// `opened` lives in the high half of the state word.
const OPENED_ONE: u64 = 1 << 32;

#[inline]
fn opened_of(state: u64) -> u32 {
    (state >> 32) as u32
}

/// Whether generation `g` is open given `opened`, robust to wrap-around
/// (waiters are never 2^31 generations behind).
#[inline]
fn is_open(opened: u32, g: u32) -> bool {
    opened.wrapping_sub(g).cast_signed() > 0
}

#[derive(Debug)]
#[repr(align(64))]
pub struct Barrier {
    /// `opened << 32 | count`, see the module comment.
    state: AtomicU64,
    /// Futex word bumped at every opening that may have sleepers.
    seq: AtomicU32,
    /// Threads between announcing they will sleep and waking up.
    sleepers: AtomicU32,
    parties: u32,
    wait: BarrierWait,
    spin_limit: u32,
    pause: bool,
}

impl Barrier {
    /// `parties` arrivals open a generation. `spin_limit` only matters for
    /// `SpinThenBlock`; `pause` puts PAUSE in the spin loop.
    ///
    /// A barrier with 0 parties would never open; it is treated as 1 (each
    /// arrival opens its own generation). The workload validator rejects 0.
    pub fn new(parties: u32, wait: BarrierWait, spin_limit: u32, pause: bool) -> Self {
        Barrier {
            state: AtomicU64::new(0),
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            parties: parties.max(1),
            wait,
            spin_limit,
            pause,
        }
    }

    /// Arrive and wait until this arrival's generation has opened.
    #[inline]
    pub fn wait(&self, ctx: &mut Ctx<'_>) -> Result<(), Aborted> {
        let old = self.state.fetch_add(1, Ordering::AcqRel);
        let opened = opened_of(old);
        // The low 32 bits of the state are the arrival count.
        let count = u32::try_from(old & u64::from(u32::MAX)).unwrap_or(u32::MAX);
        let (generation, last) = if count < self.parties {
            (opened, count + 1 == self.parties)
        } else {
            // Generations overlap (more users than parties): rare, so the
            // division is off the common path.
            (
                opened.wrapping_add(count / self.parties),
                count % self.parties == self.parties - 1,
            )
        };
        if last {
            self.open(ctx);
            return Ok(());
        }
        // Spin phase.
        let spin_budget = match self.wait {
            BarrierWait::Spin => u64::MAX,
            BarrierWait::Block => 0,
            BarrierWait::SpinThenBlock => u64::from(self.spin_limit),
        };
        let mut spins = 0u64;
        while spins < spin_budget {
            if is_open(opened_of(self.state.load(Ordering::Acquire)), generation) {
                ctx.stats.spin_iterations += spins;
                return Ok(());
            }
            spins += 1;
            if let Err(e) = ctx.check_spin(spins) {
                ctx.stats.spin_iterations += spins;
                return Err(e);
            }
            relax(self.pause);
        }
        ctx.stats.spin_iterations += spins;
        self.block_until_open(generation, ctx)
    }

    #[inline]
    fn open(&self, ctx: &mut Ctx<'_>) {
        // opened += 1 and count -= parties in one atomic add (count >= parties
        // here, so nothing borrows from the high half).
        self.state
            .fetch_add(OPENED_ONE - u64::from(self.parties), Ordering::AcqRel);
        if self.wait != BarrierWait::Spin {
            // SeqCst pairs with the sleeper's SeqCst increment of `sleepers`:
            // either we see the sleeper, or it sees the new `seq`/`state`.
            self.seq.fetch_add(1, Ordering::SeqCst);
            if self.sleepers.load(Ordering::SeqCst) > 0 {
                ctx.stats.wakeups += u64::from(sys::futex_wake(&self.seq, u32::MAX));
            }
        }
    }

    #[cold]
    fn block_until_open(&self, generation: u32, ctx: &mut Ctx<'_>) -> Result<(), Aborted> {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let r = loop {
            // Read `seq` before checking `state`: an opening after the check
            // bumps `seq`, so the futex wait below returns at once instead of
            // sleeping through it.
            let s = self.seq.load(Ordering::SeqCst);
            if is_open(opened_of(self.state.load(Ordering::SeqCst)), generation) {
                break Ok(());
            }
            if let Err(e) = ctx.check() {
                break Err(e);
            }
            if sys::futex_wait(&self.seq, s, None) {
                ctx.stats.blocks += 1;
            }
        };
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Arrivals so far (exact below 2^32 generations).
    pub fn arrivals(&self) -> u64 {
        let s = self.state.load(Ordering::Acquire);
        u64::from(opened_of(s)) * u64::from(self.parties) + (s & 0xffff_ffff)
    }

    /// Generations opened so far (exact below 2^32).
    pub fn generations(&self) -> u64 {
        u64::from(opened_of(self.state.load(Ordering::Acquire)))
    }

    pub fn parties(&self) -> u64 {
        u64::from(self.parties)
    }

    /// Wake every sleeper (run teardown: they will see the abort flag).
    pub(crate) fn wake_all(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        sys::futex_wake(&self.seq, u32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_survive_wrap_around_of_the_opened_counter() {
        for wait in [BarrierWait::Spin, BarrierWait::Block] {
            let b = Barrier::new(2, wait, 0, true);
            // Start 3 generations before `opened` wraps.
            b.state
                .store(u64::from(u32::MAX - 2) << 32, Ordering::SeqCst);
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        let mut ctx = Ctx::new();
                        for _ in 0..50 {
                            b.wait(&mut ctx).expect("never aborted");
                        }
                    });
                }
            });
            assert_eq!(opened_of(b.state.load(Ordering::SeqCst)), 47, "{wait:?}");
            assert_eq!(b.state.load(Ordering::SeqCst) & 0xffff_ffff, 0);
        }
    }

    #[test]
    fn is_open_compares_with_wrap_around() {
        assert!(is_open(1, 0));
        assert!(!is_open(0, 0));
        assert!(is_open(0, u32::MAX));
        assert!(!is_open(u32::MAX, 0));
    }
}
