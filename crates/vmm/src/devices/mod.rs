//! Device models and the two device traits that make thread safety a property of
//! a device's type.
//!
//! * [`ExclusiveDevice`] handlers take `&mut self`: the device is not thread-safe,
//!   so the bus only ever calls it under a lock or from the single I/O thread.
//! * [`ConcurrentDevice`] handlers take `&self` and the type must be `Sync`: the
//!   device synchronizes itself (atomics, its own fine-grained locks), so the bus
//!   may call it from any vCPU thread at once. Only these can be registered on a
//!   bypass path; a non-`Sync` device or one needing `&mut self` does not compile
//!   there.

pub mod block;
pub mod debug_exit;
pub mod pm_timer;
pub mod power;
pub mod result_port;
pub mod uart;
pub mod window;
pub mod work;

pub use block::{BlockDevice, BlockStats, IrqLine, KvmIrqLine};
pub use debug_exit::DebugExit;
pub use pm_timer::PmTimer;
pub use power::{ResetControl, SleepControl, I8042};
pub use result_port::ResultPort;
pub use uart::{ConsoleWriter, Uart};
pub use window::WindowDevice;
pub use work::{ExclusiveWorkDevice, WorkDevice};

use std::sync::{Arc, Mutex};

/// A device model that is not thread-safe: each access needs exclusive access.
pub trait ExclusiveDevice: Send {
    /// Guest read of `data.len()` bytes at `offset` from the device's base.
    fn read(&mut self, offset: u64, data: &mut [u8]);
    /// Guest write of `data` at `offset` from the device's base.
    fn write(&mut self, offset: u64, data: &[u8]);
}

/// A device model that is safe to call from several threads at once.
///
/// A type with unsynchronized interior mutability cannot implement it, so it can
/// never reach a bypass path:
///
/// ```compile_fail
/// use smplab_vmm::devices::ConcurrentDevice;
/// struct Racy(std::cell::Cell<u64>); // Cell is not Sync
/// impl ConcurrentDevice for Racy {
///     fn read(&self, _: u64, _: &mut [u8]) {}
///     fn write(&self, _: u64, data: &[u8]) { self.0.set(data.len() as u64) }
/// }
/// ```
///
/// and an [`ExclusiveDevice`] cannot be registered as a concurrent one:
///
/// ```compile_fail
/// use smplab_vmm::{AddressSpace, BusBuilder};
/// use smplab_vmm::devices::ResultPort;
/// let mut bus = BusBuilder::new();
/// bus.add_concurrent(AddressSpace::Pio, 0x520, 1, "result", std::sync::Arc::new(ResultPort::new()));
/// ```
pub trait ConcurrentDevice: Send + Sync {
    /// Guest read of `data.len()` bytes at `offset` from the device's base.
    fn read(&self, offset: u64, data: &mut [u8]);
    /// Guest write of `data` at `offset` from the device's base.
    fn write(&self, offset: u64, data: &[u8]);
}

/// Where a device lives on the bus (`crate::bus`, and its I/O thread). An
/// exclusive device can only be reached through its lock.
#[derive(Clone)]
pub enum DeviceSlot {
    Exclusive(Arc<Mutex<dyn ExclusiveDevice>>),
    Concurrent(Arc<dyn ConcurrentDevice>),
}

impl DeviceSlot {
    pub(crate) fn read(&self, offset: u64, data: &mut [u8]) {
        match self {
            DeviceSlot::Exclusive(dev) => dev
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .read(offset, data),
            DeviceSlot::Concurrent(dev) => dev.read(offset, data),
        }
    }

    pub(crate) fn write(&self, offset: u64, data: &[u8]) {
        match self {
            DeviceSlot::Exclusive(dev) => dev
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .write(offset, data),
            DeviceSlot::Concurrent(dev) => dev.write(offset, data),
        }
    }
}

/// Little-endian value of up to 8 guest bytes (wider accesses are truncated).
pub fn le_value(data: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = data.len().min(8);
    bytes[..n].copy_from_slice(&data[..n]);
    u64::from_le_bytes(bytes)
}

/// Fill `data` with the little-endian bytes of `value`, starting at byte `offset`
/// of the value (so a 1-byte read at offset 2 of a 32-bit register sees bits 16..24).
/// Bytes past the value's 8 bytes read as zero.
pub fn fill_le(data: &mut [u8], value: u64, offset: u64) {
    let bytes = value.to_le_bytes();
    // An offset past the value's bytes reads as zero, like one past usize.
    let offset = usize::try_from(offset).unwrap_or(usize::MAX);
    for (i, out) in data.iter_mut().enumerate() {
        let index = offset.saturating_add(i);
        *out = bytes.get(index).copied().unwrap_or(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn le_helpers_round_trip_and_clip() {
        assert_eq!(le_value(&[0x78, 0x56, 0x34, 0x12]), 0x1234_5678);
        assert_eq!(le_value(&[]), 0);
        assert_eq!(le_value(&[1; 12]), u64::from_le_bytes([1; 8]));
        let mut out = [0u8; 2];
        fill_le(&mut out, 0x1234_5678, 1);
        assert_eq!(out, [0x56, 0x34]);
        let mut out = [0xaa; 4];
        fill_le(&mut out, u64::MAX, 7);
        assert_eq!(out, [0xff, 0, 0, 0]);
        fill_le(&mut out, 1, u64::MAX);
        assert_eq!(out, [0; 4]);
    }
}
