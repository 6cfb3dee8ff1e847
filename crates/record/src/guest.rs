//! The `guest` section: counters the smplab guest kernel reports about itself.
//! Filled by `smplab-guest` from the guest's result stream.

use serde::{Deserialize, Serialize};

/// Guest-side counters, summed over vCPUs unless the name says otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GuestSection {
    pub vcpus: u32,
    /// Idle policy the guest ran with (`hlt`, `poll`, `haltpoll:NS`).
    pub idle: String,
    /// IPIs the guest sent (wakeups of halted vCPUs and shootdowns).
    pub ipis_sent: u64,
    pub ipis_received: u64,
    /// `hlt` instructions executed by idle vCPUs.
    pub halts: u64,
    /// Threads the guest scheduler made runnable (futex wakes, sleep expiry).
    pub wakeups: u64,
    /// Switches between different workload threads on a vCPU.
    pub context_switches: u64,
    /// Time from VM start to the workload's first thread start (boot, thread
    /// creation and the start gate), nanoseconds.
    /// Measured from the guest kernel's first instruction (the VMM's own set-up
    /// is in `timing.total_ns`).
    #[serde(default)]
    pub boot_ns: u64,
    /// Per-vCPU idle time in nanoseconds over the whole run (boot and the
    /// result stream included), as the guest's idle context saw it: its
    /// scheduling work on the way in and out is in it.
    #[serde(default)]
    pub idle_ns_per_vcpu: Vec<u64>,
    /// Per-vCPU idle time inside the workload window (gate release to the last
    /// worker's end), nanoseconds: halted (from `hlt` to the instruction after
    /// it) under `hlt`, in the CPL3 idle thread under `poll`/`haltpoll`. The
    /// lab's idle fraction (docs/lab.md). Empty from guests before it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub window_idle_ns_per_vcpu: Vec<u64>,
    /// TSC frequency the guest used to convert cycles to time.
    #[serde(default)]
    pub tsc_hz: u64,
    /// Guest scheduler tick rate (0: tickless; one-shot timers only for sleeps
    /// and the watchdog).
    #[serde(default)]
    pub timer_hz: u32,
    /// LAPIC timer input frequency the guest calibrated against the TSC.
    #[serde(default)]
    pub lapic_hz: u64,
    /// LAPIC timer interrupts the guest took over the whole run, summed over
    /// vCPUs (the guest's own counter, not `timer_hz` × time).
    #[serde(default)]
    pub timer_ticks: u64,
    /// Timer interrupts taken inside the workload window (gate release to the
    /// last worker's end), summed over vCPUs.
    #[serde(default)]
    pub window_timer_ticks: u64,
    /// Guest time from boot until every workload thread existed (the last
    /// spawn), ns. With `release_ns` it shows thread creation is outside
    /// `timing.wall_ns`: `threads_created_ns <= release_ns <= boot_ns`.
    #[serde(default)]
    pub threads_created_ns: u64,
    /// Guest time from boot until the start gate released the workers, ns.
    #[serde(default)]
    pub release_ns: u64,
    /// The same counters per vCPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_vcpu: Vec<GuestVcpuCounters>,
}

/// One vCPU's guest-kernel counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct GuestVcpuCounters {
    pub ipis_sent: u64,
    pub ipis_received: u64,
    pub halts: u64,
    pub wakeups: u64,
    pub context_switches: u64,
    pub idle_ns: u64,
    /// LAPIC timer interrupts taken.
    pub timer_ticks: u64,
    /// System calls the guest kernel handled.
    #[serde(default)]
    pub syscalls: u64,
}
