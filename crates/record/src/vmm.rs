//! The `vmm` section: what smplab-vmm measured (exits, device latencies, locks,
//! the I/O thread, KVM binary stats). Filled by `smplab-vmm`.

use crate::LatencyHistogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// smplab-vmm's measurements for one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct VmmSection {
    /// Device synchronization mode (`global`, `iothread`, `hybrid`, `fine`).
    pub sync: String,
    pub vcpus: u32,
    /// Exits counted by the VMM, per vCPU, by reason (`io_in`, `io_out`, `mmio_read`,
    /// `mmio_write`, `hlt`, `shutdown`, `intr`, ...).
    pub exits_per_vcpu: Vec<BTreeMap<String, u64>>,
    /// Exit-handling latency per `device/mode` key.
    #[serde(default)]
    pub exit_latency: BTreeMap<String, LatencyHistogram>,
    /// Wait time for the global device lock (only in `global` mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_lock_wait: Option<LatencyHistogram>,
    /// I/O thread statistics (only in `iothread` and `hybrid` modes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_thread: Option<IoThreadStats>,
    /// KVM binary stats per vCPU (name -> value).
    #[serde(default)]
    pub kvm_vcpu_stats: Vec<BTreeMap<String, u64>>,
    /// KVM binary stats for the VM.
    #[serde(default)]
    pub kvm_vm_stats: BTreeMap<String, u64>,
    /// Reads from ports/addresses no device claims.
    #[serde(default)]
    pub unclaimed_accesses: u64,
    /// The value the guest wrote to the debug-exit port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u32>,
    /// Wall time from starting the vCPU threads to the stop request, in ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_wall_ns: Option<u64>,
    /// TSC frequency the PM timer converts from (Hz).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tsc_hz: Option<u64>,
    /// Resident set of the VMM process at the end of the run (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Guest RAM pages resident at the end of the run (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_resident_bytes: Option<u64>,
    /// `rss_bytes - guest_resident_bytes`: the VMM's own memory overhead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm_overhead_bytes: Option<u64>,
    /// The workload window as the guest signalled it on the window port
    /// (docs/guest-abi.md), with the exits counted inside it. Absent when the
    /// guest never said "ready" (a guest without the window protocol).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<VmmWindow>,
    /// The VMM's own interrupt controllers and HLT handling (`irqchip = user`
    /// only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_irqchip: Option<UserIrqchipStats>,
    /// Whether smplab-vmm's threads ran under their seccomp-bpf filters
    /// (docs/vmm.md, "Security"; off with `--no-seccomp`). Records from
    /// before the filters existed read as off.
    #[serde(default)]
    pub seccomp: bool,
    /// Words of the guest's routing page (`VmConfig::irq_route`) the VMM
    /// refused as impossible and ignored (docs/guest-abi.md).
    #[serde(default)]
    pub guest_values_rejected: u64,
}

/// What the user-space interrupt controllers did over the whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct UserIrqchipStats {
    /// Vectors injected with KVM_INTERRUPT, all vCPUs.
    pub injected: u64,
    /// NMIs injected with KVM_NMI.
    #[serde(default)]
    pub nmis: u64,
    /// HLT exits that found an interrupt within the VMM's halt-poll window.
    pub halts_polled: u64,
    /// HLT exits that slept until woken.
    pub halts_slept: u64,
    /// The VMM's halt-poll window (ns; 0 = none).
    #[serde(default)]
    pub halt_poll_ns: u64,
    /// From the wake-up call (an interrupt raised for, or a stop of, a halted
    /// vCPU) to that vCPU's thread running again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_latency: Option<LatencyHistogram>,
    /// Guest accesses and deliveries the models ignored, by cause (only causes
    /// seen).
    #[serde(default)]
    pub ignored: BTreeMap<String, u64>,
}

/// What smplab-vmm saw between its "go" to the guest and the guest's "done":
/// the same statistics as the whole-run fields above, restricted to exits
/// handled inside the workload window (so neither boot nor the result stream
/// written after the workload is in them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct VmmWindow {
    /// Host `CLOCK_MONOTONIC` (ns) when the guest said every worker exists.
    pub ready_ns: u64,
    /// Host `CLOCK_MONOTONIC` (ns) when the VMM answered "go".
    pub go_ns: u64,
    /// Host `CLOCK_MONOTONIC` (ns) when the guest said the last worker ended;
    /// absent if the run stopped first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_ns: Option<u64>,
    /// The start gate shared with other VMs, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_gate: Option<crate::window::StartGateRecord>,
    /// Exits handled inside the window, per vCPU, by reason.
    #[serde(default)]
    pub exits_per_vcpu: Vec<BTreeMap<String, u64>>,
    /// Exit-handling latency inside the window, per `device/mode` key.
    #[serde(default)]
    pub exit_latency: BTreeMap<String, LatencyHistogram>,
    /// Global-lock wait inside the window (`global` mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_lock_wait: Option<LatencyHistogram>,
    /// KVM binary stats per vCPU: value at "done" minus value at "go".
    #[serde(default)]
    pub kvm_vcpu_stats: Vec<BTreeMap<String, u64>>,
}

/// The dedicated I/O thread's load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct IoThreadStats {
    pub requests: u64,
    pub posted_writes: u64,
    pub max_queue_depth: u64,
    pub mean_queue_depth: f64,
    /// Busy time / wall time of the I/O thread.
    pub utilization: f64,
    /// Time a request waited in the queue (enqueue to dequeue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_wait: Option<LatencyHistogram>,
    /// Time the I/O thread spent handling a request (device work).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handling: Option<LatencyHistogram>,
}
