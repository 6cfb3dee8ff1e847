//! The `guest` section: counters the smplab guest kernel reports about itself.
//! Filled by `smplab-guest` from the guest's result stream.

use serde::{Deserialize, Serialize};

/// Guest-side counters, summed over vCPUs unless the name says otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GuestSection {
    pub vcpus: u32,
    /// Idle policy the guest ran with (`hlt`, `poll`, `haltpoll:NS`).
    pub idle: String,
    pub ipis_sent: u64,
    pub ipis_received: u64,
    pub halts: u64,
    pub wakeups: u64,
    pub context_switches: u64,
    /// Time from VM start to the workload's first thread (boot), nanoseconds.
    #[serde(default)]
    pub boot_ns: u64,
    /// Per-vCPU idle time in nanoseconds.
    #[serde(default)]
    pub idle_ns_per_vcpu: Vec<u64>,
    /// TSC frequency the guest used to convert cycles to time.
    #[serde(default)]
    pub tsc_hz: u64,
}
