//! Spin ground truth: the smplab guest's own word on when it spins
//! (docs/guest-abi.md, "Spin ground truth"), read at every sample and set
//! against the detector's verdict. Gives true and false positives, misses,
//! and the detection latency of each spin episode the detector caught (time
//! from the episode's start, the guest's TSC stamp, to the sample that
//! caught it; the guest reads the host's TSC, so the two clocks agree).

use super::report::VcpuReport;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Guest-physical address of the spin page.
pub const SPIN_PAGE: u64 = 0x9000;
/// vCPU words (the running thread's id + 1) come first, one per possible vCPU.
const CPU_WORDS: u64 = 64;
/// Then one word per thread id (the TSC its current spin began at).
const THREAD_WORDS: u64 = 320;

/// One vCPU's reader of the spin page.
pub struct SpinTruth {
    memory: GuestMemoryMmap,
    index: u64,
    tsc_hz: u64,
    /// The start stamp of the last episode a sample saw, and whether the
    /// detector caught it.
    episode: Option<(u64, bool)>,
}

impl SpinTruth {
    pub fn new(memory: GuestMemoryMmap, index: u32, tsc_hz: u64) -> Self {
        SpinTruth {
            memory,
            index: u64::from(index),
            tsc_hz,
            episode: None,
        }
    }

    /// A reader of the same vCPU's published counters (`super::sensors`).
    pub fn sensors(&self) -> super::sensors::GuestSensors {
        super::sensors::GuestSensors::new(
            self.memory.clone(),
            u32::try_from(self.index).unwrap_or(u32::MAX),
            self.tsc_hz,
        )
    }

    /// The TSC at which the thread this vCPU runs began spinning, if it spins.
    fn spinning_since(&self) -> Option<u64> {
        if self.index >= CPU_WORDS {
            return None;
        }
        let word = |slot: u64| -> Option<u64> {
            self.memory
                .read_obj::<u64>(GuestAddress(SPIN_PAGE + 8 * slot))
                .ok()
        };
        let tid = word(self.index)?;
        if tid == 0 || tid > THREAD_WORDS {
            return None;
        }
        word(CPU_WORDS + tid - 1).filter(|&since| since != 0)
    }

    /// Judge the detector's verdict of this sample against the guest's word.
    pub fn judge(&mut self, detected: bool, counts: &mut VcpuReport) {
        let since = self.spinning_since();
        counts.truth.samples += 1;
        match (since, detected) {
            (Some(_), true) => counts.truth.true_positives += 1,
            (None, true) => counts.truth.false_positives += 1,
            (Some(_), false) => counts.truth.false_negatives += 1,
            (None, false) => {}
        }
        let Some(since) = since else {
            return;
        };
        if self.episode.map(|(s, _)| s) != Some(since) {
            counts.truth.episodes_sampled += 1;
            self.episode = Some((since, false));
        }
        if detected && self.episode == Some((since, false)) {
            self.episode = Some((since, true));
            counts.truth.episodes_detected += 1;
            let now = host_tsc();
            if now > since && self.tsc_hz > 0 {
                let ns = u128::from(now - since) * 1_000_000_000 / u128::from(self.tsc_hz);
                counts.truth.detect_latency_ns += u64::try_from(ns).unwrap_or(u64::MAX);
            }
        }
    }
}

fn host_tsc() -> u64 {
    // SAFETY: RDTSC has no memory effects; every x86-64 CPU KVM runs on has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}
