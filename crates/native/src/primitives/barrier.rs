//! A generation-counting barrier that spins, blocks on a futex, or spins up to a
//! limit and then blocks (PARSEC streamcluster's barrier).
//!
//! Arrivals take a ticket with one `fetch_add`; ticket `t` belongs to
//! generation `t / parties`, and the arrival holding the generation's last
//! ticket opens it by raising `opened` to `generation + 1`. Because tickets are
//! handed out in one total order, every arrival of generation `g` has its
//! ticket before any arrival of `g + 1`, so this stays correct when more threads
//! use a barrier than it has parties and generations overlap (a slow opener of
//! `g` may even run after `g + 1` opened: `opened` only ever grows, via
//! `fetch_max`).
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

#[derive(Debug)]
#[repr(align(64))]
pub struct Barrier {
    /// Tickets handed out so far (total arrivals).
    arrivals: AtomicU64,
    /// Generations opened so far: generation `g` is open once `opened > g`.
    opened: AtomicU64,
    /// Futex word bumped at every opening that may have sleepers.
    seq: AtomicU32,
    /// Threads between announcing they will sleep and waking up.
    sleepers: AtomicU32,
    parties: u64,
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
            arrivals: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            parties: u64::from(parties.max(1)),
            wait,
            spin_limit,
            pause,
        }
    }

    /// Arrive and wait until this arrival's generation has opened.
    #[inline]
    pub fn wait(&self, ctx: &mut Ctx<'_>) -> Result<(), Aborted> {
        let ticket = self.arrivals.fetch_add(1, Ordering::AcqRel);
        let generation = ticket / self.parties;
        if ticket % self.parties == self.parties - 1 {
            self.open(generation, ctx);
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
            if self.opened.load(Ordering::Acquire) > generation {
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
    fn open(&self, generation: u64, ctx: &mut Ctx<'_>) {
        self.opened.fetch_max(generation + 1, Ordering::AcqRel);
        if self.wait != BarrierWait::Spin {
            // SeqCst pairs with the sleeper's SeqCst increment of `sleepers`:
            // either we see the sleeper, or it sees the new `seq`/`opened`.
            self.seq.fetch_add(1, Ordering::SeqCst);
            if self.sleepers.load(Ordering::SeqCst) > 0 {
                ctx.stats.wakeups += u64::from(sys::futex_wake(&self.seq, u32::MAX));
            }
        }
    }

    #[cold]
    fn block_until_open(&self, generation: u64, ctx: &mut Ctx<'_>) -> Result<(), Aborted> {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let r = loop {
            // Read `seq` before checking `opened`: an opening after the check
            // bumps `seq`, so the futex wait below returns at once instead of
            // sleeping through it.
            let s = self.seq.load(Ordering::SeqCst);
            if self.opened.load(Ordering::SeqCst) > generation {
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

    /// Arrivals so far.
    pub fn arrivals(&self) -> u64 {
        self.arrivals.load(Ordering::Acquire)
    }

    /// Generations opened so far.
    pub fn generations(&self) -> u64 {
        self.opened.load(Ordering::Acquire)
    }

    pub fn parties(&self) -> u64 {
        self.parties
    }

    /// Wake every sleeper (run teardown: they will see the abort flag).
    pub(crate) fn wake_all(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        sys::futex_wake(&self.seq, u32::MAX);
    }
}
