//! Software spin detection: Wells et al.'s Spin Detection Buffer in software.
//!
//! The SDB calls a vCPU spinning when it commits fewer than 8 unique stores
//! (and, in user mode, loads) in 1024 instructions. Software cannot count
//! stores; it can look at where a vCPU is. At every sample the vCPU's own
//! thread reads its registers (`KVM_GET_REGS`, outside KVM_RUN after the
//! sampling kick); a vCPU whose instruction pointer stayed inside a small code
//! window (`window_bytes`) for `samples` samples in a row is classified
//! spinning — if, with a dirty ring ([`DirtyRing`]), it also wrote at most
//! `max_pages` pages since the previous sample. Without the ring a
//! register-only compute loop looks the same as a spin loop to this test (and
//! to the SDB, which sees no stores or loads in it); with it, a compute loop
//! that writes its results between samples does not.

use super::DirtyRing;
use smplab_policy::Sample;
use std::collections::VecDeque;

/// The classifier's thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinSettings {
    /// Largest code range (bytes) a spin loop's samples fall in.
    pub window_bytes: u64,
    /// Consecutive samples inside the window before "spinning".
    pub samples: usize,
    /// Most pages a spinning vCPU may write between two samples.
    pub max_pages: u64,
    /// Count written pages with per-vCPU dirty rings (when KVM offers them).
    pub use_dirty_ring: bool,
    /// Only user mode (CPL 3) can spin: the guest kernel's idle HLT and its
    /// short run-queue locks are not what the policies are for (and PLE
    /// covers kernel PAUSE loops on hardware).
    pub user_only: bool,
}

impl Default for SpinSettings {
    fn default() -> Self {
        // The guest's lock and barrier wait loops are a few dozen bytes; two
        // samples (one interval apart) keep the detection latency at about
        // one interval.
        // A spin loop writes nothing while it waits; one page of slack for a
        // spin counter kept in memory.
        SpinSettings {
            window_bytes: 128,
            samples: 2,
            max_pages: 1,
            use_dirty_ring: true,
            user_only: true,
        }
    }
}

/// One vCPU's recent instruction pointers and its dirty ring.
pub struct SpinDetector {
    settings: SpinSettings,
    rips: VecDeque<u64>,
    ring: Option<DirtyRing>,
    last_pages: Option<u64>,
}

impl SpinDetector {
    pub fn new(settings: SpinSettings, ring: Option<DirtyRing>) -> Self {
        SpinDetector {
            settings: SpinSettings {
                samples: settings.samples.max(1),
                ..settings
            },
            rips: VecDeque::new(),
            ring,
            last_pages: None,
        }
    }

    /// Pages the vCPU wrote between its last two samples (with a ring).
    pub fn last_pages(&self) -> Option<u64> {
        self.last_pages
    }

    /// Add one instruction pointer; true if the last `samples` of them lie in
    /// one `window_bytes` window.
    pub fn push(&mut self, rip: u64) -> bool {
        self.rips.push_back(rip);
        while self.rips.len() > self.settings.samples {
            self.rips.pop_front();
        }
        if self.rips.len() < self.settings.samples {
            return false;
        }
        let lo = self.rips.iter().copied().min().unwrap_or(0);
        let hi = self.rips.iter().copied().max().unwrap_or(0);
        hi - lo <= self.settings.window_bytes
    }

    /// Forget the history (the vCPU was descheduled: its next sample starts
    /// a new run).
    pub fn reset(&mut self) {
        self.rips.clear();
        if let Some(ring) = &mut self.ring {
            ring.harvest();
        }
    }

    /// Sample the vCPU of `fd` (on its own thread, outside KVM_RUN). A failed
    /// register read counts as "not spinning".
    pub fn observe(&mut self, fd: &kvm_ioctls::VcpuFd) -> Sample {
        let in_window = match fd.get_regs() {
            Ok(regs) => self.push(regs.rip),
            Err(_) => false,
        };
        self.last_pages = self.ring.as_mut().map(DirtyRing::harvest);
        let quiet = self.last_pages.is_none_or(|p| p <= self.settings.max_pages);
        let spinning = in_window && quiet;
        let in_kernel = fd.get_sregs().is_ok_and(|s| s.cs.dpl == 0);
        Sample {
            spinning: spinning && !(self.settings.user_only && in_kernel),
            halted: false,
            in_kernel,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tight_loop_is_spinning_after_enough_samples() {
        let mut d = SpinDetector::new(
            SpinSettings {
                window_bytes: 64,
                samples: 3,
                ..SpinSettings::default()
            },
            None,
        );
        assert!(!d.push(0x1000));
        assert!(!d.push(0x1010));
        assert!(d.push(0x1030));
        assert!(!d.push(0x5000), "left the window");
        d.reset();
        assert!(!d.push(0x5000));
    }
}
