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
    /// Samples judged against the guest's spin word (`host::truth`), and
    /// the verdicts: detected and spinning, detected but not spinning,
    /// spinning but not detected.
    #[serde(default)]
    pub truth_samples: u64,
    #[serde(default)]
    pub true_positives: u64,
    #[serde(default)]
    pub false_positives: u64,
    #[serde(default)]
    pub false_negatives: u64,
    /// Spin episodes a sample saw, those the detector caught, and the sum of
    /// their detection latencies (episode start to the catching sample).
    #[serde(default)]
    pub episodes_sampled: u64,
    #[serde(default)]
    pub episodes_detected: u64,
    #[serde(default)]
    pub detect_latency_ns: u64,
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
    /// The vCPUs' ground-truth counts summed (see [`VcpuReport`]).
    #[serde(default)]
    pub truth: VcpuReport,
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
        let t = &mut self.truth;
        t.truth_samples += c.truth_samples;
        t.true_positives += c.true_positives;
        t.false_positives += c.false_positives;
        t.false_negatives += c.false_negatives;
        t.episodes_sampled += c.episodes_sampled;
        t.episodes_detected += c.episodes_detected;
        t.detect_latency_ns += c.detect_latency_ns;
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
    /// Against the guest's own spin word: samples judged, true and false
    /// positives, misses; spin episodes seen and caught, and the mean
    /// detection latency of the caught ones (ns).
    #[serde(default)]
    pub truth_samples: u64,
    #[serde(default)]
    pub true_positives: u64,
    #[serde(default)]
    pub false_positives: u64,
    #[serde(default)]
    pub false_negatives: u64,
    #[serde(default)]
    pub episodes_sampled: u64,
    #[serde(default)]
    pub episodes_detected: u64,
    #[serde(default)]
    pub mean_detect_latency_ns: f64,
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
        let sum = |f: fn(&VcpuReport) -> u64| vms.iter().map(|v| f(&v.truth)).sum::<u64>();
        let episodes_detected = sum(|t| t.episodes_detected);
        #[allow(clippy::cast_precision_loss)] // a mean
        let mean_detect_latency_ns = if episodes_detected == 0 {
            0.0
        } else {
            sum(|t| t.detect_latency_ns) as f64 / episodes_detected as f64
        };
        SpinDetection {
            enabled,
            samples,
            spins_detected: vms.iter().map(|v| v.spins_detected).sum(),
            mean_sample_ns,
            truth_samples: sum(|t| t.truth_samples),
            true_positives: sum(|t| t.true_positives),
            false_positives: sum(|t| t.false_positives),
            false_negatives: sum(|t| t.false_negatives),
            episodes_sampled: sum(|t| t.episodes_sampled),
            episodes_detected,
            mean_detect_latency_ns,
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
