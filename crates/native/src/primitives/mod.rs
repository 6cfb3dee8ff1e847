//! The synchronization primitives the native executor runs, public so tests and
//! the criterion bench can drive them directly.
//!
//! Every primitive is built on atomics and raw futexes (never std's Mutex or
//! Condvar, which would hide how often a thread spins, blocks and is woken) and
//! reports that activity into the caller's [`Ctx`]:
//!
//! - `spin_iterations`: loop passes that found the resource busy;
//! - `blocks`: futex waits that really put the thread to sleep (a wait the
//!   kernel refused because the word had already changed is not a block);
//! - `wakeups`: threads actually woken by this thread's futex wakes (the count
//!   the kernel returns, so a wake that found nobody asleep counts zero).
//!
//! Blocking and spinning calls return `Err(Aborted)` once the context's abort
//! flag is set (checked on every wake-up and every [`ABORT_CHECK_SPINS`] spin
//! passes), so a deadlocked or failed run can be torn down instead of hanging.
//! The fast paths never look at the flag.

mod barrier;
mod mutex;
mod queue;
mod spin;

pub use barrier::{Barrier, BarrierWait};
pub use mutex::FutexMutex;
pub use queue::BoundedQueue;
pub use spin::{SpinKind, SpinLock};

use std::sync::atomic::{AtomicBool, Ordering};

/// Spin passes between two looks at the abort flag: rare enough to cost nothing
/// measurable, frequent enough (well under a millisecond) to stop promptly.
pub const ABORT_CHECK_SPINS: u64 = 1024;
const _: () = assert!(ABORT_CHECK_SPINS.is_power_of_two());

/// Spin, block and wake counts of one thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub spin_iterations: u64,
    pub blocks: u64,
    pub wakeups: u64,
}

impl Stats {
    pub fn add(&mut self, other: &Stats) {
        self.spin_iterations = self.spin_iterations.saturating_add(other.spin_iterations);
        self.blocks = self.blocks.saturating_add(other.blocks);
        self.wakeups = self.wakeups.saturating_add(other.wakeups);
    }
}

/// A blocking or spinning call gave up because the run is being torn down
/// (another thread failed, or the run hit its timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aborted;

/// Per-thread context handed to every primitive call: where to count, and the
/// run-wide abort flag.
#[derive(Debug)]
pub struct Ctx<'a> {
    pub stats: Stats,
    abort: &'a AtomicBool,
}

static NEVER_ABORT: AtomicBool = AtomicBool::new(false);

impl Default for Ctx<'static> {
    fn default() -> Self {
        Ctx::new()
    }
}

impl Ctx<'static> {
    /// A context that is never aborted (benches, simple tests).
    pub fn new() -> Self {
        Ctx {
            stats: Stats::default(),
            abort: &NEVER_ABORT,
        }
    }
}

impl<'a> Ctx<'a> {
    /// A context that stops blocking and spinning once `abort` becomes true.
    pub fn with_abort(abort: &'a AtomicBool) -> Self {
        Ctx {
            stats: Stats::default(),
            abort,
        }
    }

    #[inline]
    pub fn aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }

    /// Called from spin loops with the loop's pass count so far.
    #[inline]
    fn check_spin(&self, spins: u64) -> Result<(), Aborted> {
        // A power of two, so this is a mask, not a division.
        if spins & (ABORT_CHECK_SPINS - 1) == 0 && self.aborted() {
            Err(Aborted)
        } else {
            Ok(())
        }
    }

    #[inline]
    fn check(&self) -> Result<(), Aborted> {
        if self.aborted() {
            Err(Aborted)
        } else {
            Ok(())
        }
    }
}

/// One pass of a spin loop: PAUSE if asked (lets the sibling hyperthread run and
/// is what pause-loop exiting in a hypervisor watches for), nothing otherwise.
#[inline(always)]
fn relax(pause: bool) {
    if pause {
        std::hint::spin_loop();
    }
}

/// Pads a value to its own cache line so neighbouring primitives never share
/// one (false sharing would add coherence traffic the workload did not ask for).
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct CachePadded<T>(pub T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
