//! The host section of `smplab host` (and of every record of a host run,
//! `RunRecord::host_run`): per-VM and per-vCPU scheduling counts, per-pCPU
//! utilisation and the spin detector's figures. Filled by smplab-vmm's
//! `host` module.

use crate::config::HostPolicy;
use serde::{Deserialize, Serialize};

/// One vCPU's counts. Run and steal are the scheduler's view (the kernel's,
/// from schedstat, under `linux`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VcpuReport {
    pub run_ns: u64,
    /// Runnable without a pCPU.
    pub steal_ns: u64,
    pub preemptions: u64,
    pub samples: u64,
    /// Time the vCPU threads spent taking samples (register reads).
    pub sample_ns: u64,
    pub spins_detected: u64,
    pub halts_detected: u64,
    /// Samples with a dirty-ring count, and the pages those counted.
    pub dirty_samples: u64,
    pub pages_written: u64,
    /// Directed yields this vCPU received.
    pub yields_received: u64,
    pub safepoint_deferrals: u64,
    /// Times the thread moved to another host CPU for a grant.
    pub migrations: u64,
    /// The kernel's view of the vCPU thread (schedstat).
    pub thread_run_ns: u64,
    pub thread_runqueue_wait_ns: u64,
    /// Samples judged against the guest's spin word (`host::truth`).
    #[serde(default)]
    pub truth: SpinTruth,
    /// Spin samples not taken because the policy could not have acted on
    /// them (`spin`: no sibling preempted), each an exit saved.
    #[serde(default)]
    pub samples_skipped: u64,
}

/// The spin detector judged against the guest's own knowledge (its spin
/// word): samples judged; detected and spinning, detected but not spinning,
/// spinning but not detected; spin episodes a sample saw, those the detector
/// caught, and the sum of their detection latencies (episode start to the
/// catching sample).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SpinTruth {
    pub samples: u64,
    pub true_positives: u64,
    pub false_positives: u64,
    pub false_negatives: u64,
    pub episodes_sampled: u64,
    pub episodes_detected: u64,
    pub detect_latency_ns: u64,
    /// Episodes seen by at least three samples (longer than two sampling
    /// intervals of running), and how many of them the detector caught.
    pub episodes_long: u64,
    pub episodes_long_detected: u64,
    /// Detection latencies of the caught episodes in half sampling
    /// intervals: bucket `i` holds latencies in `[i/2, (i+1)/2)` intervals,
    /// the last one everything longer. Counted while the vCPU could be
    /// sampled (at most the samples the episode had before it was caught);
    /// `detect_latency_ns` sums the wall-clock latencies.
    pub latency_half_intervals: [u64; LATENCY_BUCKETS],
}

/// Buckets of [`SpinTruth::latency_half_intervals`] (8 intervals).
pub const LATENCY_BUCKETS: usize = 16;

impl SpinTruth {
    pub fn add(&mut self, o: &SpinTruth) {
        self.samples += o.samples;
        self.true_positives += o.true_positives;
        self.false_positives += o.false_positives;
        self.false_negatives += o.false_negatives;
        self.episodes_sampled += o.episodes_sampled;
        self.episodes_detected += o.episodes_detected;
        self.detect_latency_ns += o.detect_latency_ns;
        self.episodes_long += o.episodes_long;
        self.episodes_long_detected += o.episodes_long_detected;
        for (a, b) in self
            .latency_half_intervals
            .iter_mut()
            .zip(o.latency_half_intervals)
        {
            *a += b;
        }
    }

    /// Detected samples that were spinning (`None` without detections).
    #[allow(clippy::cast_precision_loss)] // a ratio of counts
    pub fn precision(&self) -> Option<f64> {
        let detected = self.true_positives + self.false_positives;
        (detected > 0).then(|| self.true_positives as f64 / detected as f64)
    }

    /// Spinning samples that were detected (`None` without spinning ones).
    #[allow(clippy::cast_precision_loss)] // a ratio of counts
    pub fn recall(&self) -> Option<f64> {
        let spinning = self.true_positives + self.false_negatives;
        (spinning > 0).then(|| self.true_positives as f64 / spinning as f64)
    }

    /// False detections per judged sample (`None` without samples).
    #[allow(clippy::cast_precision_loss)] // a ratio of counts
    pub fn false_positive_rate(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.false_positives as f64 / self.samples as f64)
    }

    /// Episodes longer than two sampling intervals that were caught.
    #[allow(clippy::cast_precision_loss)] // a ratio of counts
    pub fn long_episodes_caught(&self) -> Option<f64> {
        (self.episodes_long > 0)
            .then(|| self.episodes_long_detected as f64 / self.episodes_long as f64)
    }

    /// Median detection latency in sampling intervals, to half an interval
    /// (the upper edge of the median's bucket); `None` when none was caught.
    #[allow(clippy::cast_precision_loss)] // a bucket index
    pub fn median_latency_intervals(&self) -> Option<f64> {
        let total: u64 = self.latency_half_intervals.iter().sum();
        let mut seen = 0;
        for (i, &n) in self.latency_half_intervals.iter().enumerate() {
            seen += n;
            if n > 0 && 2 * seen >= total {
                return Some((i + 1) as f64 / 2.0);
            }
        }
        None
    }

    /// Count a caught episode's latency of `ns` at sampling interval
    /// `interval_ns` in [`SpinTruth::latency_half_intervals`].
    pub fn add_latency_in_intervals(&mut self, ns: u64, interval_ns: u64) {
        if let Some(halves) = ns.saturating_mul(2).checked_div(interval_ns) {
            let bucket = usize::try_from(halves).unwrap_or(usize::MAX);
            self.latency_half_intervals[bucket.min(LATENCY_BUCKETS - 1)] += 1;
        }
    }

    /// Mean detection latency of the caught episodes, ns (0 when none).
    #[allow(clippy::cast_precision_loss)] // a mean
    pub fn mean_detect_latency_ns(&self) -> f64 {
        if self.episodes_detected == 0 {
            0.0
        } else {
            self.detect_latency_ns as f64 / self.episodes_detected as f64
        }
    }
}

/// One VM: its vCPUs' counts summed, and when it finished.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmReport {
    pub vm: usize,
    /// From the scheduler's start to the VM's end.
    pub wall_ns: u64,
    pub run_ns: u64,
    pub steal_ns: u64,
    pub preemptions: u64,
    pub samples: u64,
    pub sample_ns: u64,
    pub spins_detected: u64,
    pub halts_detected: u64,
    pub yields: u64,
    pub vcpus: Vec<VcpuReport>,
    /// The vCPUs' ground-truth counts summed.
    #[serde(default)]
    pub truth: SpinTruth,
    /// Words of the guest's host indicators (docs/guest-abi.md) the host
    /// refused as impossible (a counter going back or growing faster than
    /// time allows, a latency sum no completions explain) and ignored.
    #[serde(default)]
    pub sensor_values_rejected: u64,
    /// Words of the guest's routing page the host refused (a mask with
    /// bits beyond the VM's vCPUs, a destination that is none of them, a
    /// handler count going back or growing too fast) and ignored.
    #[serde(default)]
    pub route_values_rejected: u64,
}

impl VmReport {
    pub fn add(&mut self, c: &VcpuReport) {
        self.run_ns += c.run_ns;
        self.steal_ns += c.steal_ns;
        self.preemptions += c.preemptions;
        self.samples += c.samples;
        self.sample_ns += c.sample_ns;
        self.spins_detected += c.spins_detected;
        self.halts_detected += c.halts_detected;
        self.yields += c.yields_received;
        self.truth.add(&c.truth);
    }
}

/// One host CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PcpuReport {
    pub cpu: usize,
    pub busy_ns: u64,
    /// busy / the scheduler's wall time.
    pub utilisation: f64,
}

impl PcpuReport {
    pub fn new(cpu: usize, busy_ns: u64, wall_ns: u64) -> Self {
        #[allow(clippy::cast_precision_loss)] // a ratio
        let utilisation = if wall_ns == 0 {
            0.0
        } else {
            busy_ns as f64 / wall_ns as f64
        };
        PcpuReport {
            cpu,
            busy_ns,
            utilisation,
        }
    }
}

/// The spin detector over the whole host.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpinDetection {
    pub enabled: bool,
    pub samples: u64,
    pub spins_detected: u64,
    /// Mean cost of one sample on the vCPU thread (register reads), ns.
    pub mean_sample_ns: f64,
    /// Against the guest's own spin word, over all vCPUs.
    #[serde(default)]
    pub truth: SpinTruth,
    /// Samples not taken because the policy could not have acted on them
    /// (`VcpuReport::samples_skipped`, over all vCPUs).
    #[serde(default)]
    pub samples_skipped: u64,
}

impl SpinDetection {
    pub fn from_vms(vms: &[VmReport], enabled: bool) -> Self {
        let samples: u64 = vms.iter().map(|v| v.samples).sum();
        let cost: u64 = vms.iter().map(|v| v.sample_ns).sum();
        #[allow(clippy::cast_precision_loss)] // a mean
        let mean_sample_ns = if samples == 0 {
            0.0
        } else {
            cost as f64 / samples as f64
        };
        let mut truth = SpinTruth::default();
        for v in vms {
            truth.add(&v.truth);
        }
        SpinDetection {
            enabled,
            samples,
            spins_detected: vms.iter().map(|v| v.spins_detected).sum(),
            mean_sample_ns,
            truth,
            samples_skipped: vms
                .iter()
                .flat_map(|v| &v.vcpus)
                .map(|c| c.samples_skipped)
                .sum(),
        }
    }
}

/// The host section: one per `smplab host` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    pub policy: HostPolicy,
    pub host_cpus: Vec<usize>,
    pub wall_ns: u64,
    pub sample_interval_ns: u64,
    pub spin_detection: SpinDetection,
    pub vms: Vec<VmReport>,
    /// Per host CPU (empty under `linux`: the kernel does not say).
    pub pcpus: Vec<PcpuReport>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_the_median_latency() {
        let mut t = SpinTruth {
            samples: 100,
            true_positives: 9,
            false_positives: 1,
            false_negatives: 3,
            episodes_long: 4,
            episodes_long_detected: 3,
            ..SpinTruth::default()
        };
        assert_eq!(t.precision(), Some(0.9));
        assert_eq!(t.recall(), Some(0.75));
        assert_eq!(t.false_positive_rate(), Some(0.01));
        assert_eq!(t.long_episodes_caught(), Some(0.75));
        assert_eq!(t.median_latency_intervals(), None);
        // 1 ms interval: 0.7, 1.2, 1.4 and 9 ms late.
        for ns in [700_000, 1_200_000, 1_400_000, 9_000_000] {
            t.add_latency_in_intervals(ns, 1_000_000);
        }
        assert_eq!(t.latency_half_intervals[1], 1);
        assert_eq!(t.latency_half_intervals[2], 2);
        assert_eq!(t.latency_half_intervals[LATENCY_BUCKETS - 1], 1);
        assert_eq!(t.median_latency_intervals(), Some(1.5));
        let old: SpinTruth = serde_json::from_str(r#"{"samples":3}"#).expect("old record");
        assert_eq!(old.episodes_long, 0);
    }
}
