//! A bounded blocking FIFO of tokens built the way PARSEC dedup builds its
//! stage queues: a mutex around a ring buffer plus two condition variables
//! ("not full", "not empty"). Here the mutex is a [`FutexMutex`] that blocks at
//! once and each condition variable is a futex sequence word, so every block
//! and wakeup is a real futex call the context counts.
//!
//! Condition-variable protocol: a waiter reads the sequence word while holding
//! the mutex, releases the mutex and waits on that value; a signaller bumps the
//! word while holding the mutex before waking. A signal between the waiter's
//! unlock and its futex wait therefore changes the word and the wait returns at
//! once: no lost wakeups. Waiter counts (guarded by the mutex) let a push or pop
//! skip the system call when nobody waits.

use super::{Aborted, Ctx, FutexMutex};
use crate::sys;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Debug)]
struct Ring {
    slots: Vec<u64>,
    head: usize,
    len: usize,
    push_waiters: u32,
    pop_waiters: u32,
}

#[derive(Debug)]
pub struct BoundedQueue {
    lock: FutexMutex,
    ring: UnsafeCell<Ring>,
    not_full: AtomicU32,
    not_empty: AtomicU32,
}

// SAFETY: `ring` is only accessed between `lock.lock()` and `lock.unlock()`
// (see `with_ring`), so at most one thread touches it at a time; every other
// field is atomic.
unsafe impl Sync for BoundedQueue {}

impl BoundedQueue {
    /// A queue holding at most `capacity` tokens (0 is treated as 1: the
    /// workload validator rejects capacity 0).
    pub fn new(capacity: u32) -> Self {
        let cap = capacity.max(1) as usize;
        BoundedQueue {
            lock: FutexMutex::new(0),
            ring: UnsafeCell::new(Ring {
                slots: vec![0; cap],
                head: 0,
                len: 0,
                push_waiters: 0,
                pop_waiters: 0,
            }),
            not_full: AtomicU32::new(0),
            not_empty: AtomicU32::new(0),
        }
    }

    /// Run `f` on the ring. Caller must hold `self.lock`.
    ///
    /// # Safety
    /// The calling thread holds `self.lock`, and `f` does not call back into
    /// the queue.
    unsafe fn with_ring<R>(&self, f: impl FnOnce(&mut Ring) -> R) -> R {
        // SAFETY: the caller holds the mutex, so no other reference to the ring
        // exists while `f` runs.
        f(unsafe { &mut *self.ring.get() })
    }

    /// Wait on condition word `cv` (value `seen`, read under the lock), with
    /// the lock released meanwhile; returns with the lock held again.
    fn cv_wait(&self, cv: &AtomicU32, seen: u32, ctx: &mut Ctx<'_>) -> Result<(), Aborted> {
        self.lock.unlock(ctx);
        if sys::futex_wait(cv, seen, None) {
            ctx.stats.blocks += 1;
        }
        self.lock.lock(ctx)?;
        if ctx.aborted() {
            self.lock.unlock(ctx);
            return Err(Aborted);
        }
        Ok(())
    }

    /// Append `token`, blocking while the queue is full.
    pub fn push(&self, token: u64, ctx: &mut Ctx<'_>) -> Result<(), Aborted> {
        self.lock.lock(ctx)?;
        loop {
            // SAFETY: we hold the lock; the closure does not touch the queue.
            let full = unsafe {
                self.with_ring(|r| {
                    if r.len == r.slots.len() {
                        r.push_waiters += 1;
                        true
                    } else {
                        false
                    }
                })
            };
            if !full {
                break;
            }
            let seen = self.not_full.load(Ordering::Relaxed);
            let waited = self.cv_wait(&self.not_full, seen, ctx);
            if waited.is_ok() {
                // SAFETY: cv_wait returned with the lock held.
                unsafe { self.with_ring(|r| r.push_waiters -= 1) };
            }
            waited?;
        }
        // SAFETY: we hold the lock.
        let wake = unsafe {
            self.with_ring(|r| {
                let cap = r.slots.len();
                let tail = (r.head + r.len) % cap;
                r.slots[tail] = token;
                r.len += 1;
                r.pop_waiters > 0
            })
        };
        if wake {
            self.not_empty.fetch_add(1, Ordering::Relaxed);
            ctx.stats.wakeups += u64::from(sys::futex_wake(&self.not_empty, 1));
        }
        self.lock.unlock(ctx);
        Ok(())
    }

    /// Remove the oldest token, blocking while the queue is empty.
    pub fn pop(&self, ctx: &mut Ctx<'_>) -> Result<u64, Aborted> {
        self.lock.lock(ctx)?;
        loop {
            // SAFETY: we hold the lock.
            let empty = unsafe {
                self.with_ring(|r| {
                    if r.len == 0 {
                        r.pop_waiters += 1;
                        true
                    } else {
                        false
                    }
                })
            };
            if !empty {
                break;
            }
            let seen = self.not_empty.load(Ordering::Relaxed);
            let waited = self.cv_wait(&self.not_empty, seen, ctx);
            if waited.is_ok() {
                // SAFETY: cv_wait returned with the lock held.
                unsafe { self.with_ring(|r| r.pop_waiters -= 1) };
            }
            waited?;
        }
        // SAFETY: we hold the lock.
        let (token, wake) = unsafe {
            self.with_ring(|r| {
                let token = r.slots[r.head];
                r.head = (r.head + 1) % r.slots.len();
                r.len -= 1;
                (token, r.push_waiters > 0)
            })
        };
        if wake {
            self.not_full.fetch_add(1, Ordering::Relaxed);
            ctx.stats.wakeups += u64::from(sys::futex_wake(&self.not_full, 1));
        }
        self.lock.unlock(ctx);
        Ok(token)
    }

    /// Tokens currently queued.
    pub fn len(&self) -> usize {
        let mut ctx = Ctx::new();
        // A never-aborted context cannot fail to lock.
        if self.lock.lock(&mut ctx).is_err() {
            return 0;
        }
        // SAFETY: we hold the lock.
        let n = unsafe { self.with_ring(|r| r.len) };
        self.lock.unlock(&mut ctx);
        n
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wake every waiter (run teardown: they will see the abort flag).
    pub(crate) fn wake_all(&self) {
        self.not_full.fetch_add(1, Ordering::Relaxed);
        self.not_empty.fetch_add(1, Ordering::Relaxed);
        sys::futex_wake(&self.not_full, u32::MAX);
        sys::futex_wake(&self.not_empty, u32::MAX);
        self.lock.wake_all();
    }
}
