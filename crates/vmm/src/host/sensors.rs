//! Host indicators the smplab guest publishes for Kulkarni & Kulkarni's tuner
//! (docs/guest-abi.md, "Host indicators"): per-vCPU running counters in
//! guest memory that the host reads while the guest runs, without an exit.
//!
//! Why the guest counts and not the VMM: with the in-kernel irqchip KVM
//! handles the guest's ICR writes itself (no exit reaches smplab-vmm), and
//! the interrupt latency the seed means ends at the guest handler's first
//! instruction, which only the guest can stamp (docs/guest.md, "Device I/O").
//! Cache misses are not here: this host has no hardware PMU for
//! `perf_event_open` (docs/host.md, "Indicators").

use serde::Serialize;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Guest-physical address of the counters: one array of [`SENSOR_VCPUS`]
/// u64 per counter (resched IPIs, I/O completions, latency sum).
pub const SENSOR_BASE: u64 = 0x9c40;
/// vCPUs that publish (higher ones count where the host cannot see).
pub const SENSOR_VCPUS: u32 = 16;
/// Where the guest writes [`SENSOR_MAGIC`] once it publishes.
pub const SENSOR_MAGIC_ADDR: u64 = 0x9dc0;
/// "SMPLSNS1", little-endian.
pub const SENSOR_MAGIC: u64 = u64::from_le_bytes(*b"SMPLSNS1");

const RESCHED: u64 = 0;
const IO_DONE: u64 = 1;
const IO_LATENCY: u64 = 2;

/// One vCPU's counters since its guest booted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GuestCounters {
    /// Rescheduling (wakeup) IPIs this vCPU sent.
    pub resched_ipis: u64,
    /// Device completions its interrupt handler took.
    pub io_completions: u64,
    /// Their completion → handler entry delays, summed, ns.
    pub irq_latency_ns: u64,
}

impl GuestCounters {
    /// Counter by counter, `self` minus `earlier` (0 where a counter went
    /// back: a guest that rebooted).
    #[must_use]
    pub fn since(&self, earlier: &GuestCounters) -> GuestCounters {
        GuestCounters {
            resched_ipis: self.resched_ipis.saturating_sub(earlier.resched_ipis),
            io_completions: self.io_completions.saturating_sub(earlier.io_completions),
            irq_latency_ns: self.irq_latency_ns.saturating_sub(earlier.irq_latency_ns),
        }
    }

    /// Counter by counter, the sum.
    #[must_use]
    pub fn plus(&self, other: &GuestCounters) -> GuestCounters {
        GuestCounters {
            resched_ipis: self.resched_ipis.saturating_add(other.resched_ipis),
            io_completions: self.io_completions.saturating_add(other.io_completions),
            irq_latency_ns: self.irq_latency_ns.saturating_add(other.irq_latency_ns),
        }
    }
}

/// One vCPU's reader of the counters.
#[derive(Clone)]
pub struct GuestSensors {
    memory: GuestMemoryMmap,
    index: u64,
    tsc_hz: u64,
}

impl GuestSensors {
    /// vCPU `index` of the guest in `memory`, whose TSC runs at `tsc_hz`.
    pub fn new(memory: GuestMemoryMmap, index: u32, tsc_hz: u64) -> Self {
        GuestSensors {
            memory,
            index: u64::from(index),
            tsc_hz,
        }
    }

    /// The counters now; `None` before the guest publishes them (it has not
    /// booted far enough, or it is not the smplab guest) or for a vCPU
    /// beyond [`SENSOR_VCPUS`]. Plain reads: each word is written by one
    /// vCPU with aligned 8-byte stores, so a read sees an old or a new
    /// value, never a torn one.
    pub fn read(&self) -> Option<GuestCounters> {
        if self.index >= u64::from(SENSOR_VCPUS) {
            return None;
        }
        let magic: u64 = self.memory.read_obj(GuestAddress(SENSOR_MAGIC_ADDR)).ok()?;
        if magic != SENSOR_MAGIC {
            return None;
        }
        let word = |counter: u64| -> Option<u64> {
            let at = SENSOR_BASE + 8 * (counter * u64::from(SENSOR_VCPUS) + self.index);
            self.memory.read_obj::<u64>(GuestAddress(at)).ok()
        };
        let latency_tsc = word(IO_LATENCY)?;
        let irq_latency_ns = if self.tsc_hz > 0 {
            u64::try_from(u128::from(latency_tsc) * 1_000_000_000 / u128::from(self.tsc_hz))
                .unwrap_or(u64::MAX)
        } else {
            0
        };
        Some(GuestCounters {
            resched_ipis: word(RESCHED)?,
            io_completions: word(IO_DONE)?,
            irq_latency_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("64 KiB of guest memory")
    }

    #[test]
    fn counters_are_read_only_once_the_guest_publishes_them() {
        let mem = memory();
        let v1 = GuestSensors::new(mem.clone(), 1, 2_000_000_000);
        let put = |counter: u64, vcpu: u64, value: u64| {
            let at = SENSOR_BASE + 8 * (counter * u64::from(SENSOR_VCPUS) + vcpu);
            mem.write_obj(value, GuestAddress(at)).expect("in RAM");
        };
        put(RESCHED, 1, 7);
        put(IO_DONE, 1, 3);
        put(IO_LATENCY, 1, 6_000); // 3 us at 2 GHz
        put(RESCHED, 0, 99); // vCPU 0's: not vCPU 1's
        assert_eq!(v1.read(), None, "no magic word yet");
        mem.write_obj(SENSOR_MAGIC, GuestAddress(SENSOR_MAGIC_ADDR))
            .expect("in RAM");
        let c = v1.read().expect("published");
        assert_eq!(
            c,
            GuestCounters {
                resched_ipis: 7,
                io_completions: 3,
                irq_latency_ns: 3_000
            }
        );
        let earlier = GuestCounters {
            resched_ipis: 10,
            io_completions: 1,
            irq_latency_ns: 1_000,
        };
        assert_eq!(
            c.since(&earlier),
            GuestCounters {
                resched_ipis: 0,
                io_completions: 2,
                irq_latency_ns: 2_000
            }
        );
        assert_eq!(GuestSensors::new(mem.clone(), SENSOR_VCPUS, 1).read(), None);
        // The last word of the last array stays below the magic word and
        // clear of 0x9c00-0x9c3f (another runtime word's).
        let last = SENSOR_BASE + 8 * (3 * u64::from(SENSOR_VCPUS) - 1);
        assert!(last < SENSOR_MAGIC_ADDR && SENSOR_MAGIC_ADDR + 8 <= 0x9e00);
        const { assert!(SENSOR_BASE >= 0x9c40) };
    }
}
