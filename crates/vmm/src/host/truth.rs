//! Spin ground truth: the smplab guest's own word on when it spins
//! (docs/guest-abi.md, "Spin ground truth"), read at every sample and set
//! against the detector's verdict. Gives true and false positives, misses,
//! and the detection latency of each spin episode the detector caught (time
//! from the episode's start, the guest's TSC stamp, to the sample that
//! caught it). The episode stamp is the guest's TSC, which is the host's
//! plus KVM's per-vCPU TSC offset: 0 on PVM (the guest reads the raw host
//! TSC), not 0 under VT-x/AMD-V. [`vcpu_tsc_offset`] reads it and the
//! latency is taken on the guest's clock.

use super::report::VcpuReport;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Guest-physical address of the spin page.
pub const SPIN_PAGE: u64 = 0x9000;
/// vCPU words (the running thread's id + 1) come first, one per possible vCPU.
const CPU_WORDS: u64 = 64;
/// Then one word per thread id (the TSC its current spin began at).
const THREAD_WORDS: u64 = 320;

/// A spin episode as the samples see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Episode {
    /// Its start stamp (guest TSC).
    since: u64,
    /// Samples that found it.
    samples: u64,
    detected: bool,
}

/// Samples that make an episode "longer than two sampling intervals".
const LONG_EPISODE_SAMPLES: u64 = 3;

/// One vCPU's reader of the spin page.
pub struct SpinTruth {
    memory: GuestMemoryMmap,
    index: u64,
    tsc_hz: u64,
    /// Guest TSC minus host TSC for this vCPU (wrapping), [`vcpu_tsc_offset`].
    tsc_offset: u64,
    /// The sampling interval, for latencies in intervals.
    interval_ns: u64,
    /// The last episode a sample saw.
    episode: Option<Episode>,
}

impl SpinTruth {
    pub fn new(memory: GuestMemoryMmap, index: u32, tsc_hz: u64) -> Self {
        SpinTruth {
            memory,
            index: u64::from(index),
            tsc_hz,
            tsc_offset: 0,
            interval_ns: 0,
            episode: None,
        }
    }

    /// Set this vCPU's TSC offset (guest minus host, wrapping), read with
    /// [`vcpu_tsc_offset`] on its own fd.
    pub fn set_tsc_offset(&mut self, offset: u64) {
        self.tsc_offset = offset;
    }

    /// Set the sampling interval (latencies are also counted in intervals).
    pub fn set_interval_ns(&mut self, interval_ns: u64) {
        self.interval_ns = interval_ns;
    }

    /// The guest memory it reads (the spin detector reads code from it too).
    pub fn memory(&self) -> &GuestMemoryMmap {
        &self.memory
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
        self.judge_at(detected, host_tsc(), counts);
    }

    /// [`SpinTruth::judge`] with the host's TSC read at the sample.
    fn judge_at(&mut self, detected: bool, host_now: u64, counts: &mut VcpuReport) {
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
        let episode = match self.episode {
            Some(e) if e.since == since => self.episode.insert(Episode {
                samples: e.samples + 1,
                ..e
            }),
            _ => {
                counts.truth.episodes_sampled += 1;
                self.episode.insert(Episode {
                    since,
                    samples: 1,
                    detected: false,
                })
            }
        };
        if episode.samples == LONG_EPISODE_SAMPLES {
            counts.truth.episodes_long += 1;
            if episode.detected {
                counts.truth.episodes_long_detected += 1;
            }
        }
        if detected && !episode.detected {
            episode.detected = true;
            counts.truth.episodes_detected += 1;
            if episode.samples >= LONG_EPISODE_SAMPLES {
                counts.truth.episodes_long_detected += 1;
            }
            // On the guest's clock, where `since` was stamped.
            let now = host_now.wrapping_add(self.tsc_offset);
            if now > since && self.tsc_hz > 0 {
                let ns = u128::from(now - since) * 1_000_000_000 / u128::from(self.tsc_hz);
                let wall = u64::try_from(ns).unwrap_or(u64::MAX);
                // The detector's own latency: at most the samples it took
                // (an episode also lasts while its vCPU waits for a pCPU or
                // boots, when nothing can sample it).
                let sampled = episode.samples.saturating_mul(self.interval_ns);
                counts.truth.detect_latency_ns += wall;
                counts
                    .truth
                    .add_latency_in_intervals(wall.min(sampled), self.interval_ns);
            }
        }
    }
}

/// `_IOW(KVMIO, 0xe2, struct kvm_device_attr)`, on a vCPU fd.
const KVM_GET_DEVICE_ATTR: libc::c_ulong = 0x4018_aee2;

/// vCPU `fd`'s TSC offset, guest minus host (wrapping): KVM's own value
/// (`KVM_GET_DEVICE_ATTR`, group `KVM_VCPU_TSC_CTRL`, attribute
/// `KVM_VCPU_TSC_OFFSET`) where the kernel offers it, else the vCPU's
/// IA32_TSC read next to the host's TSC (off by the read's few µs), else 0.
pub fn vcpu_tsc_offset(fd: &kvm_ioctls::VcpuFd) -> u64 {
    use std::os::fd::AsRawFd;
    let mut offset: u64 = 0;
    let attr = kvm_bindings::kvm_device_attr {
        flags: 0,
        group: kvm_bindings::KVM_VCPU_TSC_CTRL,
        attr: u64::from(kvm_bindings::KVM_VCPU_TSC_OFFSET),
        addr: std::ptr::addr_of_mut!(offset) as u64,
    };
    // SAFETY: KVM_GET_DEVICE_ATTR on a live vCPU fd with a valid
    // kvm_device_attr whose `addr` points at a u64 that outlives the call
    // (KVM writes exactly 8 bytes there for this attribute).
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), KVM_GET_DEVICE_ATTR, &attr) };
    if rc == 0 {
        return offset;
    }
    msr_tsc_offset(fd).unwrap_or(0)
}

/// The vCPU's IA32_TSC minus the host's TSC read just before it.
fn msr_tsc_offset(fd: &kvm_ioctls::VcpuFd) -> Option<u64> {
    const IA32_TSC: u32 = 0x10;
    let mut msrs = kvm_bindings::Msrs::from_entries(&[kvm_bindings::kvm_msr_entry {
        index: IA32_TSC,
        ..Default::default()
    }])
    .ok()?;
    let host = host_tsc();
    match fd.get_msrs(&mut msrs) {
        Ok(1) => Some(msrs.as_slice()[0].data.wrapping_sub(host)),
        _ => None,
    }
}

fn host_tsc() -> u64 {
    // SAFETY: RDTSC has no memory effects; every x86-64 CPU KVM runs on has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spinning_guest(since: u64) -> GuestMemoryMmap {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("64 KiB");
        // vCPU 0 runs thread 0 (word: id + 1), which spins since `since`.
        mem.write_obj(1u64, GuestAddress(SPIN_PAGE))
            .expect("in RAM");
        mem.write_obj(since, GuestAddress(SPIN_PAGE + 8 * CPU_WORDS))
            .expect("in RAM");
        mem
    }

    /// The guest stamped its episode on its own clock, 4e9 cycles ahead of
    /// the host's (a VT-x/AMD-V offset): the latency is 1 ms of guest time,
    /// which a host-clock subtraction would miss altogether (host now <
    /// guest stamp) or overstate (with a negative offset).
    #[test]
    fn latency_is_taken_on_the_guest_clock() {
        let hz = 1_000_000_000;
        let mut truth = SpinTruth::new(spinning_guest(5_000_000_000), 0, hz);
        truth.set_tsc_offset(4_000_000_000);
        let mut counts = VcpuReport::default();
        truth.judge_at(true, 1_001_000_000, &mut counts);
        assert_eq!(counts.truth.episodes_detected, 1);
        assert_eq!(counts.truth.detect_latency_ns, 1_000_000);

        // A guest clock behind the host's (offset -3e9, wrapping).
        let mut truth = SpinTruth::new(spinning_guest(1_000_000_000), 0, hz);
        truth.set_tsc_offset(3_000_000_000u64.wrapping_neg());
        let mut counts = VcpuReport::default();
        truth.judge_at(true, 4_002_000_000, &mut counts);
        assert_eq!(counts.truth.detect_latency_ns, 2_000_000);
    }

    /// An episode seen by three samples is long; caught at its second, 1.5
    /// intervals late; a second, short one is missed.
    #[test]
    fn long_episodes_and_latency_in_intervals() {
        let hz = 1_000_000_000;
        let mem = spinning_guest(1_000_000);
        let mut truth = SpinTruth::new(mem.clone(), 0, hz);
        truth.set_interval_ns(1_000_000);
        let mut c = VcpuReport::default();
        truth.judge_at(false, 1_600_000, &mut c);
        truth.judge_at(true, 2_500_000, &mut c);
        truth.judge_at(true, 3_500_000, &mut c);
        mem.write_obj(9_000_000u64, GuestAddress(SPIN_PAGE + 8 * CPU_WORDS))
            .expect("in RAM");
        truth.judge_at(false, 9_500_000, &mut c);
        let t = c.truth;
        assert_eq!((t.true_positives, t.false_negatives), (2, 2));
        assert_eq!((t.episodes_sampled, t.episodes_detected), (2, 1));
        assert_eq!((t.episodes_long, t.episodes_long_detected), (1, 1));
        assert_eq!(t.median_latency_intervals(), Some(2.0));
        assert_eq!(t.detect_latency_ns, 1_500_000);
        // Caught at its first sample 5 ms after it began (the vCPU waited
        // for a pCPU): one interval of the detector's latency.
        let mem = spinning_guest(1_000_000);
        let mut truth = SpinTruth::new(mem, 0, hz);
        truth.set_interval_ns(1_000_000);
        let mut c = VcpuReport::default();
        truth.judge_at(true, 6_000_000, &mut c);
        assert_eq!(c.truth.detect_latency_ns, 5_000_000);
        assert_eq!(c.truth.median_latency_intervals(), Some(1.5));
    }
}
