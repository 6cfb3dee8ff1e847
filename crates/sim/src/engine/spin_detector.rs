//! The software spin detector of `smplab host` as the simulator models it,
//! for the `spin` policy (policy_host.rs samples every running vCPU at
//! smplab-vmm's sampling interval and asks this model for the verdict).
//!
//! smplab-vmm's detector (crates/vmm/src/host/spin.rs) reads the code
//! around a vCPU's instruction pointer and calls a sample spinning when it
//! sits in a spin-wait loop in user mode: from the first sample in a PAUSE
//! loop, from the second in one without. The simulator knows when a thread
//! spins; the model turns that into the detector's verdict with the
//! platform's measured figures ([`HostSpinDetector`]): how many samples in a
//! row a spin must be seen before it is called, and how often a sample of a
//! vCPU that does not spin is called spinning anyway.

use crate::platform::HostSpinDetector;

/// Per-vCPU state of the model.
#[derive(Debug, Clone)]
pub(crate) struct SpinDetectorModel {
    /// Samples in a row that found each vCPU spinning.
    streak: Vec<u32>,
}

impl SpinDetectorModel {
    pub(crate) fn new(vcpus: usize) -> Self {
        SpinDetectorModel {
            streak: vec![0; vcpus],
        }
    }

    /// The verdict on a sample of `vcpu`, which spins in user mode or not;
    /// `draw` gives a uniform number in [0, 1) when the model needs one (only
    /// for a false positive at a non-zero rate, so a detector without false
    /// positives leaves the simulation's random stream as it was).
    pub(crate) fn sample(
        &mut self,
        vcpu: usize,
        spinning: bool,
        detector: &HostSpinDetector,
        draw: impl FnOnce() -> f64,
    ) -> bool {
        let Some(streak) = self.streak.get_mut(vcpu) else {
            return false;
        };
        if spinning {
            *streak = streak.saturating_add(1);
            *streak >= detector.confirm_samples.max(1)
        } else {
            *streak = 0;
            detector.false_positive_rate > 0.0 && draw() < detector.false_positive_rate
        }
    }

    /// `vcpu` left its pCPU: its next sample starts a new streak.
    pub(crate) fn reset(&mut self, vcpu: usize) {
        if let Some(s) = self.streak.get_mut(vcpu) {
            *s = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirmation_and_false_positives() {
        let two = HostSpinDetector {
            confirm_samples: 2,
            false_positive_rate: 0.0,
        };
        let mut m = SpinDetectorModel::new(2);
        let never = || panic!("no draw without false positives");
        assert!(!m.sample(0, true, &two, never));
        assert!(m.sample(0, true, &two, never));
        assert!(!m.sample(0, false, &two, never));
        assert!(!m.sample(0, true, &two, never));
        m.reset(0);
        assert!(!m.sample(0, true, &two, never));
        let measured = HostSpinDetector::default();
        assert!(m.sample(1, true, &measured, never), "caught at once");
        let noisy = HostSpinDetector {
            confirm_samples: 1,
            false_positive_rate: 0.25,
        };
        assert!(m.sample(1, false, &noisy, || 0.1));
        assert!(!m.sample(1, false, &noisy, || 0.3));
        assert!(!m.sample(9, true, &noisy, || 0.0), "no such vCPU");
    }
}
