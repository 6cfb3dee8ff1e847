//! The synchronization primitives of the thread-safe models: `loom`'s under
//! `--cfg loom` (so the model check explores their interleavings), std's otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU16, AtomicU32, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Lock, ignoring poisoning: a panicking holder cannot leave these models in a
/// state worse than any guest could, and a VMM must not crash on it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
