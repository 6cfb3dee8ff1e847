//! The `sim` section: what the simulator reports beyond the common fields.
//! Filled by `smplab-sim` (docs/sim.md).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Simulator outputs for one workload instance (one VM).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SimSection {
    /// Platform profile name.
    pub platform: String,
    /// Host scheduling policy.
    pub policy: String,
    pub seed: u64,
    pub pcpus: u32,
    pub vms: u32,
    /// Which VM of the scenario this record describes (0-based).
    pub vm_index: u32,
    pub vcpus: u32,
    /// Simulated exits by reason.
    pub exits: BTreeMap<String, u64>,
    /// Simulated time vCPUs spent spinning, idle, and runnable-but-preempted (steal).
    pub spin_ns: u64,
    pub idle_ns: u64,
    pub steal_ns: u64,
    /// Wall time of the same workload in the same model without virtualization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_wall_ns: Option<u64>,
    /// Events processed and host seconds the simulation took.
    pub events: u64,
    pub sim_host_seconds: f64,
    /// Whether the model ran with virtualization (false: the bare-metal reference).
    #[serde(default = "yes")]
    pub virtualized: bool,
    /// Simulated time at which the simulation ended (all VMs, or the horizon).
    #[serde(default)]
    pub simulated_ns: u64,
    /// IPIs sent inside this VM (wakeups of halted vCPUs, shootdowns).
    #[serde(default)]
    pub ipis: u64,
    /// vCPU dispatches on a different pCPU than the previous one.
    #[serde(default)]
    pub migrations: u64,
    /// Time spent refilling caches after placements (cache model).
    #[serde(default)]
    pub warmup_ns: u64,
    /// Time vCPUs waited for the serialized device emulation (the Seoul thesis).
    #[serde(default)]
    pub device_wait_ns: u64,
    /// Exact accounting: the VM's vCPU time by cause, summed over its vCPUs
    /// (the parts sum to `wall_ns × vcpus`). Keys and meanings:
    /// `smplab_sim::breakdown::{NAMES, DESCRIPTIONS}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vcpu_time_ns: BTreeMap<String, u64>,
    /// The same for the bare-metal reference run (sums to
    /// `native_wall_ns × native_cores`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub native_time_ns: BTreeMap<String, u64>,
    /// Cores of the bare-metal reference (the vCPUs, at most the host's pCPUs).
    #[serde(default)]
    pub native_cores: u32,
    /// Host-wide pCPU time by cause over the whole simulation, summed over
    /// pCPUs (the parts, with `pcpu_idle`, sum to `simulated_ns × pcpus`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pcpu_time_ns: BTreeMap<String, u64>,
}

fn yes() -> bool {
    true
}
