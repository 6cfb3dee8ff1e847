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
//!
//! The guest can write anything there at any moment, so every word is
//! checked where it is read ([`GuestSensors::read`]): a counter must not go
//! back and may not grow faster than [`MAX_EVENTS_PER_S`] allows over the
//! time since the last accepted reading (the first reading: since the
//! reader was made, before the guest ran); the latency sum may grow only
//! with completions, each by at most the time the VM has existed. A word
//! that fails is counted ([`GuestSensors::rejected`], the host record's
//! `sensor_values_rejected`) and its last accepted value is reported instead.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// The most events (IPIs sent, completions handled) one vCPU can count per
/// second: each costs at least an interrupt delivery or an APIC write, well
/// over 100 ns on any host, so 10^7/s is a bound no honest guest reaches.
pub const MAX_EVENTS_PER_S: u64 = 10_000_000;
/// Events allowed beyond the rate bound, for the skew between the guest's
/// stores and the host's clock reads.
const EVENT_SLACK: u64 = 1_000;

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

/// The raw words of one reading (latency in TSC cycles).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RawCounters {
    resched_ipis: u64,
    io_completions: u64,
    latency_tsc: u64,
}

/// What a reader accepted last, shared by its clones.
#[derive(Debug)]
struct Accepted {
    /// When the reader was made (before the guest ran): the VM's age bounds
    /// every latency and the first reading's counts.
    since: Instant,
    /// The last accepted words and when they were read.
    last: RawCounters,
    at: Instant,
}

/// One vCPU's reader of the counters. Clones share what was accepted and
/// the count of rejected words.
#[derive(Clone)]
pub struct GuestSensors {
    memory: GuestMemoryMmap,
    index: u64,
    tsc_hz: u64,
    accepted: Arc<Mutex<Accepted>>,
    rejected: Arc<AtomicU64>,
}

impl GuestSensors {
    /// vCPU `index` of the guest in `memory`, whose TSC runs at `tsc_hz`.
    pub fn new(memory: GuestMemoryMmap, index: u32, tsc_hz: u64) -> Self {
        let now = Instant::now();
        GuestSensors {
            memory,
            index: u64::from(index),
            tsc_hz,
            accepted: Arc::new(Mutex::new(Accepted {
                since: now,
                last: RawCounters::default(),
                at: now,
            })),
            rejected: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Words this reader refused so far (a counter that went back or grew
    /// faster than possible, a latency sum no completions explain).
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
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
        // The guest counts a completion, then adds its delay (x86 keeps
        // stores in order): read the sum first, so every delay in it has its
        // completion in the count read after.
        let latency_tsc = word(IO_LATENCY)?;
        let raw = RawCounters {
            resched_ipis: word(RESCHED)?,
            io_completions: word(IO_DONE)?,
            latency_tsc,
        };
        let checked = self.check(raw, Instant::now());
        let irq_latency_ns = if self.tsc_hz > 0 {
            u64::try_from(u128::from(checked.latency_tsc) * 1_000_000_000 / u128::from(self.tsc_hz))
                .unwrap_or(u64::MAX)
        } else {
            0
        };
        Some(GuestCounters {
            resched_ipis: checked.resched_ipis,
            io_completions: checked.io_completions,
            irq_latency_ns,
        })
    }

    /// `raw` read at `now`, word by word: accepted, or the last accepted
    /// value (and counted) where it cannot be true.
    fn check(&self, raw: RawCounters, now: Instant) -> RawCounters {
        let mut accepted = self.accepted.lock().unwrap_or_else(|e| e.into_inner());
        let last = accepted.last;
        let elapsed = now.saturating_duration_since(accepted.at);
        let events_allowed =
            u64::try_from(elapsed.as_nanos() * u128::from(MAX_EVENTS_PER_S) / 1_000_000_000)
                .unwrap_or(u64::MAX)
                .saturating_add(EVENT_SLACK);
        let mut rejected = 0;
        let mut counter = |new: u64, old: u64| -> u64 {
            match new.checked_sub(old) {
                Some(grew) if grew <= events_allowed => new,
                _ => {
                    rejected += 1;
                    old
                }
            }
        };
        let resched_ipis = counter(raw.resched_ipis, last.resched_ipis);
        let io_completions = counter(raw.io_completions, last.io_completions);
        // Each new completion's delay is at most the VM's age (in TSC
        // cycles; without a TSC rate, one cycle per ns at 10 GHz at most).
        let age_ns = now.saturating_duration_since(accepted.since).as_nanos();
        let hz = if self.tsc_hz > 0 {
            u128::from(self.tsc_hz)
        } else {
            10_000_000_000
        };
        let max_delay_tsc = u64::try_from(age_ns * hz / 1_000_000_000)
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let completed = io_completions - last.io_completions;
        let latency_tsc = match raw.latency_tsc.checked_sub(last.latency_tsc) {
            Some(grew) if grew <= completed.saturating_mul(max_delay_tsc) => raw.latency_tsc,
            _ => {
                rejected += 1;
                last.latency_tsc
            }
        };
        let checked = RawCounters {
            resched_ipis,
            io_completions,
            latency_tsc,
        };
        if rejected > 0 {
            self.rejected.fetch_add(rejected, Ordering::Relaxed);
        }
        if checked != last {
            accepted.last = checked;
            accepted.at = now;
        }
        checked
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

    #[test]
    fn impossible_words_are_refused_counted_and_replaced_by_the_last_good_ones() {
        let mem = memory();
        mem.write_obj(SENSOR_MAGIC, GuestAddress(SENSOR_MAGIC_ADDR))
            .expect("in RAM");
        let put = |counter: u64, value: u64| {
            let at = SENSOR_BASE + 8 * (counter * u64::from(SENSOR_VCPUS));
            mem.write_obj(value, GuestAddress(at)).expect("in RAM");
        };
        let v0 = GuestSensors::new(mem.clone(), 0, 1_000_000_000);
        std::thread::sleep(std::time::Duration::from_millis(2));
        put(RESCHED, 10);
        put(IO_DONE, 2);
        put(IO_LATENCY, 1_000);
        let good = v0.read().expect("published");
        assert_eq!(good.resched_ipis, 10);
        assert_eq!(good.irq_latency_ns, 1_000);
        assert_eq!(v0.rejected(), 0);
        // u64::MAX: far beyond what the time since allows.
        put(RESCHED, u64::MAX);
        // Going back.
        put(IO_DONE, 1);
        // A latency sum that grew with no new completion.
        put(IO_LATENCY, 5_000);
        let c = v0.read().expect("published");
        assert_eq!(
            c, good,
            "every impossible word reads as its last good value"
        );
        assert_eq!(v0.rejected(), 3);
        // A clone shares the count and what was accepted.
        let clone = v0.clone();
        put(RESCHED, 11);
        put(IO_DONE, 3);
        put(IO_LATENCY, 1_500);
        assert_eq!(clone.read().expect("published").resched_ipis, 11);
        assert_eq!(v0.rejected(), 3);
        // A latency larger than the VM's age, with one new completion.
        put(IO_DONE, 4);
        put(IO_LATENCY, 1_500 + 3_600_000_000_000);
        assert_eq!(v0.read().expect("published").irq_latency_ns, 1_500);
        assert_eq!(v0.rejected(), 4);
    }
}
