//! The host section of `smplab host`: per-VM and per-vCPU scheduling counts,
//! per-pCPU utilisation and the spin detector's figures.

use serde::{Deserialize, Serialize};
use smplab_policy::HostPolicy;

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
        SpinDetection {
            enabled,
            samples,
            spins_detected: vms.iter().map(|v| v.spins_detected).sum(),
            mean_sample_ns,
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
