//! Work device (0x530): every access busy-works on the host for a configured time,
//! so exit-heavy I/O patterns with a known handling cost can be studied. Reads
//! return the number of accesses so far. Its state is one atomic counter, so it is
//! thread-safe: in `hybrid` and `fine` modes it runs on the vCPU threads in parallel.

use super::{fill_le, ConcurrentDevice, ExclusiveDevice};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct WorkDevice {
    busy: Duration,
    accesses: AtomicU64,
}

impl WorkDevice {
    pub fn new(busy_ns: u64) -> Self {
        WorkDevice {
            busy: Duration::from_nanos(busy_ns),
            accesses: AtomicU64::new(0),
        }
    }

    pub fn accesses(&self) -> u64 {
        self.accesses.load(Ordering::Relaxed)
    }

    fn work(&self) -> u64 {
        if !self.busy.is_zero() {
            let start = Instant::now();
            while start.elapsed() < self.busy {
                std::hint::spin_loop();
            }
        }
        self.accesses.fetch_add(1, Ordering::Relaxed) + 1
    }
}

impl ConcurrentDevice for WorkDevice {
    fn read(&self, offset: u64, data: &mut [u8]) {
        let count = self.work();
        fill_le(data, count, offset);
    }

    fn write(&self, _offset: u64, _data: &[u8]) {
        self.work();
    }
}

/// The same work device as a not-thread-safe type (plain `&mut` counter), for
/// studying what a device that cannot bypass costs: in `hybrid` mode it goes
/// through the I/O thread, in `fine` mode under its own lock.
pub struct ExclusiveWorkDevice {
    busy: Duration,
    accesses: u64,
}

impl ExclusiveWorkDevice {
    pub fn new(busy_ns: u64) -> Self {
        ExclusiveWorkDevice {
            busy: Duration::from_nanos(busy_ns),
            accesses: 0,
        }
    }

    pub fn accesses(&self) -> u64 {
        self.accesses
    }

    fn work(&mut self) -> u64 {
        if !self.busy.is_zero() {
            let start = Instant::now();
            while start.elapsed() < self.busy {
                std::hint::spin_loop();
            }
        }
        self.accesses += 1;
        self.accesses
    }
}

impl ExclusiveDevice for ExclusiveWorkDevice {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        let count = self.work();
        fill_le(data, count, offset);
    }

    fn write(&mut self, _offset: u64, _data: &[u8]) {
        self.work();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_access_of_any_shape() {
        let dev = WorkDevice::new(0);
        dev.write(0, &[]);
        dev.write(u64::MAX, &[1; 16]);
        let mut buf = [0u8; 4];
        dev.read(0, &mut buf);
        assert_eq!(u32::from_le_bytes(buf), 3);
        let mut wide = [0u8; 16];
        dev.read(9, &mut wide);
        assert_eq!(wide, [0; 16]);
        assert_eq!(dev.accesses(), 4);
    }

    #[test]
    fn exclusive_flavour_counts_the_same_way() {
        let mut dev = ExclusiveWorkDevice::new(0);
        dev.write(0, &[]);
        let mut buf = [0u8; 2];
        dev.read(0, &mut buf);
        assert_eq!(u16::from_le_bytes(buf), 2);
        assert_eq!(dev.accesses(), 2);
    }

    #[test]
    fn busy_time_is_spent() {
        let dev = WorkDevice::new(200_000);
        let start = Instant::now();
        dev.write(0, &[0]);
        assert!(start.elapsed() >= Duration::from_micros(200));
    }
}
