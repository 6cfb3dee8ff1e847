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
}

impl SpinTruth {
    pub fn add(&mut self, o: &SpinTruth) {
        self.samples += o.samples;
        self.true_positives += o.true_positives;
        self.false_positives += o.false_positives;
        self.false_negatives += o.false_negatives;
        self.episodes_sampled += o.episodes_sampled;
        self.episodes_detected += o.episodes_detected;
        self.detect_latency_ns += o.detect_latency_ns;
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
