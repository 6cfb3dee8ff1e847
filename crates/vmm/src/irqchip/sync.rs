//! The one thing the exclusive and the thread-safe form of a controller differ
//! in: the cells its state lives in. Each controller is one model generic over
//! [`Cells`] (the logic exists once); its exclusive form instantiates it with
//! [`Unsynced`] (plain cells: the bus serializes every call, under the global
//! lock, the I/O thread or the device's own lock), its thread-safe form with
//! [`Synced`] (atomics for the bits any thread may set, a mutex per register
//! file). This is crosvm's split of `BusDevice` and `BusDeviceSync`, with the
//! synchronization chosen by a type rather than written twice.
//!
//! Under `--cfg loom` the synchronized cells are loom's, so the model check
//! explores the interleavings of the very code the VMM runs.

use std::cell::{Cell, RefCell};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Lock, ignoring poisoning: a panicking holder cannot leave these models in a
/// state worse than any guest could, and a VMM must not crash on it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A 32-bit word of bits (IRR, TMR, a routing mirror) with the atomic
/// operations the models use; the orderings matter only to [`Synced`].
pub trait Word: Send {
    fn new(value: u32) -> Self;
    fn load(&self, order: Ordering) -> u32;
    fn store(&self, value: u32, order: Ordering);
    /// Set `bits`; returns the value before.
    fn fetch_or(&self, bits: u32, order: Ordering) -> u32;
    /// Keep only `bits`; returns the value before.
    fn fetch_and(&self, bits: u32, order: Ordering) -> u32;
    fn swap(&self, value: u32, order: Ordering) -> u32;
}

/// A register file only one thread changes at a time. `with` must not be
/// re-entered for the same cell (the models never call out while inside it).
pub trait Shelter<T>: Send {
    fn new(value: T) -> Self;
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R;
}

/// How a model's state is kept: [`Unsynced`] or [`Synced`].
pub trait Cells: 'static {
    type Word: Word;
    type Shelter<T: Send>: Shelter<T>;
}

/// The exclusive form: plain cells. A model built on them is `Send` but not
/// `Sync`, so it can only be shared behind a lock.
pub enum Unsynced {}

/// The thread-safe form: atomics and one mutex per register file.
pub enum Synced {}

impl Cells for Unsynced {
    type Word = Cell<u32>;
    type Shelter<T: Send> = RefCell<T>;
}

impl Cells for Synced {
    type Word = AtomicU32;
    type Shelter<T: Send> = Mutex<T>;
}

impl Word for Cell<u32> {
    fn new(value: u32) -> Self {
        Cell::new(value)
    }
    fn load(&self, _: Ordering) -> u32 {
        self.get()
    }
    fn store(&self, value: u32, _: Ordering) {
        self.set(value);
    }
    fn fetch_or(&self, bits: u32, _: Ordering) -> u32 {
        let before = self.get();
        self.set(before | bits);
        before
    }
    fn fetch_and(&self, bits: u32, _: Ordering) -> u32 {
        let before = self.get();
        self.set(before & bits);
        before
    }
    fn swap(&self, value: u32, _: Ordering) -> u32 {
        self.replace(value)
    }
}

impl Word for AtomicU32 {
    fn new(value: u32) -> Self {
        AtomicU32::new(value)
    }
    fn load(&self, order: Ordering) -> u32 {
        AtomicU32::load(self, order)
    }
    fn store(&self, value: u32, order: Ordering) {
        AtomicU32::store(self, value, order);
    }
    fn fetch_or(&self, bits: u32, order: Ordering) -> u32 {
        AtomicU32::fetch_or(self, bits, order)
    }
    fn fetch_and(&self, bits: u32, order: Ordering) -> u32 {
        AtomicU32::fetch_and(self, bits, order)
    }
    fn swap(&self, value: u32, order: Ordering) -> u32 {
        AtomicU32::swap(self, value, order)
    }
}

impl<T: Send> Shelter<T> for RefCell<T> {
    fn new(value: T) -> Self {
        RefCell::new(value)
    }
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.borrow_mut())
    }
}

impl<T: Send> Shelter<T> for Mutex<T> {
    fn new(value: T) -> Self {
        Mutex::new(value)
    }
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut lock(self))
    }
}
