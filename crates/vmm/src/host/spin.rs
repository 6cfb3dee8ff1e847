//! Software spin detection: seed 002's Spin Detection Buffer in software.
//!
//! The SDB calls a vCPU spinning when it commits fewer than 8 unique stores
//! (and, in user mode, loads) in 1024 instructions. Software cannot count
//! stores; it can look at where a vCPU is. At every sample the vCPU's own
//! thread reads its registers (`KVM_GET_REGS`, outside KVM_RUN after the
//! sampling kick); a vCPU whose instruction pointer stayed inside a small code
//! window (`window_bytes`) for `samples` samples in a row is classified
//! spinning. A register-only compute loop looks the same to this test (and to
//! the SDB, which sees no stores or loads in it): docs/host.md measures how
//! often that happens against the guest's own spin counters.

use smplab_policy::Sample;
use std::collections::VecDeque;

/// The classifier's thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinSettings {
    /// Largest code range (bytes) a spin loop's samples fall in.
    pub window_bytes: u64,
    /// Consecutive samples inside the window before "spinning".
    pub samples: usize,
}

impl Default for SpinSettings {
    fn default() -> Self {
        // The guest's lock and barrier wait loops are a few dozen bytes; two
        // samples (one interval apart) keep the detection latency at about
        // one interval.
        SpinSettings {
            window_bytes: 128,
            samples: 2,
        }
    }
}

/// One vCPU's recent instruction pointers.
#[derive(Debug, Clone)]
pub struct SpinDetector {
    settings: SpinSettings,
    rips: VecDeque<u64>,
}

impl SpinDetector {
    pub fn new(settings: SpinSettings) -> Self {
        SpinDetector {
            settings: SpinSettings {
                samples: settings.samples.max(1),
                ..settings
            },
            rips: VecDeque::new(),
        }
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
    }

    /// Sample the vCPU of `fd` (on its own thread, outside KVM_RUN). A failed
    /// register read counts as "not spinning".
    pub fn observe(&mut self, fd: &kvm_ioctls::VcpuFd, need_cpl: bool) -> Sample {
        let spinning = match fd.get_regs() {
            Ok(regs) => self.push(regs.rip),
            Err(_) => false,
        };
        let in_kernel = need_cpl && fd.get_sregs().is_ok_and(|s| s.cs.dpl == 0);
        Sample {
            spinning,
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
        let mut d = SpinDetector::new(SpinSettings {
            window_bytes: 64,
            samples: 3,
        });
        assert!(!d.push(0x1000));
        assert!(!d.push(0x1010));
        assert!(d.push(0x1030));
        assert!(!d.push(0x5000), "left the window");
        d.reset();
        assert!(!d.push(0x5000));
    }
}
