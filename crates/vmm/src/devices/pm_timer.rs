//! ACPI PM timer (port 0x608): a free-running 24-bit counter at 3.579545 MHz,
//! computed from the TSC on every read. It has no mutable state at all, so it is
//! lock-free and thread-safe by construction (QEMU only made its PM timer
//! lock-free in 2025; here it is the reference bypass device).

use super::{fill_le, ConcurrentDevice};

/// The ACPI PM timer frequency in Hz.
pub const PM_TIMER_HZ: u64 = 3_579_545;

pub struct PmTimer {
    tsc_at_start: u64,
    tsc_hz: u64,
}

/// Reads the time-stamp counter.
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no memory effects and is available on every x86-64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

impl PmTimer {
    /// A timer that counts from zero now, converting TSC ticks at `tsc_hz`.
    pub fn new(tsc_hz: u64) -> Self {
        PmTimer {
            tsc_at_start: rdtsc(),
            tsc_hz: tsc_hz.max(1),
        }
    }

    /// The current 24-bit counter value.
    pub fn counter(&self) -> u32 {
        let ticks = u128::from(rdtsc().wrapping_sub(self.tsc_at_start));
        let pm_ticks = ticks * u128::from(PM_TIMER_HZ) / u128::from(self.tsc_hz);
        // Masked to 24 bits, so it always fits.
        u32::try_from(pm_ticks & 0x00ff_ffff).unwrap_or(0)
    }
}

impl ConcurrentDevice for PmTimer {
    fn read(&self, offset: u64, data: &mut [u8]) {
        fill_le(data, u64::from(self.counter()), offset);
    }

    fn write(&self, _offset: u64, _data: &[u8]) {
        // The PM timer is read-only; writes are ignored as on real hardware.
    }
}

/// Measures the TSC frequency against the monotonic clock (used when KVM cannot
/// tell us the guest TSC frequency).
pub fn calibrate_tsc_hz() -> u64 {
    let start = std::time::Instant::now();
    let tsc0 = rdtsc();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let tsc1 = rdtsc();
    let nanos = start.elapsed().as_nanos().max(1);
    u64::try_from(u128::from(tsc1.wrapping_sub(tsc0)) * 1_000_000_000 / nanos).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_up_at_about_the_right_rate_and_stays_24_bit() {
        let hz = calibrate_tsc_hz();
        let timer = PmTimer::new(hz);
        let mut a = [0u8; 4];
        timer.read(0, &mut a);
        std::thread::sleep(std::time::Duration::from_millis(10));
        let mut b = [0u8; 4];
        timer.read(0, &mut b);
        let (a, b) = (u32::from_le_bytes(a), u32::from_le_bytes(b));
        assert!(b < (1 << 24) && a < (1 << 24));
        // 10 ms is ~35795 ticks; allow generous scheduling slack, not a timing test.
        assert!(b.wrapping_sub(a) & 0xff_ffff >= 30_000);
    }

    #[test]
    fn adversarial_accesses_do_not_panic() {
        let timer = PmTimer::new(0);
        for offset in [0, 1, 3, 7, 8, u64::MAX] {
            for len in [0, 1, 2, 4, 8, 16] {
                let mut buf = vec![0u8; len];
                timer.read(offset, &mut buf);
                timer.write(offset, &buf);
            }
        }
        let mut high = [0u8; 1];
        timer.read(3, &mut high);
        assert_eq!(high[0], 0, "bits 24..32 of a 24-bit timer read as zero");
    }
}
