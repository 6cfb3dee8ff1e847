//! smplab-policy: the host's vCPU scheduling policies of Wells et al. as pure
//! decisions, written once and driven by whoever owns the clock — the real
//! scheduler of `smplab host` (smplab-vmm, real time and real KVM exits) or the
//! simulator (simulated time and events).
//!
//! A [`Scheduler`] knows each vCPU's VM and state (runnable, running on a pCPU,
//! being preempted, finished) and each pCPU's occupant. Its driver reports
//! events — the clock passed a deadline ([`Scheduler::tick`]), a running vCPU
//! was sampled ([`Scheduler::sample`]: spinning? halted? in the guest kernel?),
//! a preempted vCPU has left its pCPU ([`Scheduler::stopped`]), a VM finished
//! ([`Scheduler::finished`]) — and gets back [`Action`]s: run this vCPU on that
//! pCPU, preempt that one. Preemption has two phases, as on real hardware: a
//! preempted vCPU keeps its pCPU until its driver confirms it stopped, so one
//! pCPU never has two occupants.
//!
//! Each policy is a [`Policy`] in a file of its own under `policies/`
//! (the modules of [`policies`] document what each does: `rr`, the round
//! robin; `gang`; `partition`; `spin`, ...), named once in
//! `smplab_record::for_each_host_policy!`, from which [`policies`] builds
//! them exhaustively. The scheduler's [`shared::Core`] keeps the state they
//! share (vCPU states, pCPU occupants, affinity, the two-phase preemption)
//! and the [`Scheduler`] asks its policy where policies differ.
//! `+safepoint:GRACE` wraps any of them ([`policies::safepoint`]): a vCPU
//! whose slice ended while in the guest kernel (maybe holding a kernel lock)
//! keeps running until it is back in user mode, at most GRACE (Uhlig et al.,
//! Wells et al. §5.1). `linux` and `fair` are decided by a host kernel (a real
//! one, or the simulator's model of one: [`Decider`]); [`Scheduler::new`]
//! refuses them.
//!
//! Per-vCPU affinity ([`Affinity`], [`Scheduler::set_affinity`],
//! [`Scheduler::set_vm_affinity`]: Kulkarni & Kulkarni's pinned or floating vCPUs) can
//! be changed at run time; every policy honours it when it places a vCPU.
//!
//! Every policy yields a pCPU whose vCPU is sampled halted (it has nothing to
//! do); only `gang` keeps it, so a gang stays together.
//!
//! Two drivers, two ways of learning about halts and spins:
//! - smplab-vmm (real time) finds a halted or spinning vCPU by sampling it
//!   ([`Scheduler::sample`]) and never reports the events below.
//! - The simulator knows when a vCPU halts and wakes ([`Scheduler::block`],
//!   [`Scheduler::wake`]: a blocked vCPU waits for no pCPU) and when a
//!   hardware spin detector (PLE, the SDB) made it exit
//!   ([`Scheduler::spin_exit`]: a directed yield under every policy but
//!   `gang`, as KVM's `kvm_vcpu_on_spin` does); it samples for the `spin`
//!   policy's software detector and for safe points.

pub mod affinity;
pub mod policies;
mod policy;
mod scheduler;
pub mod shared;
pub mod tune;

pub use affinity::Affinity;
pub use policies::partition::partition_shares;
pub use policy::{Policy, PolicyClone};
pub use scheduler::{check, Scheduler};
pub use smplab_record::config::{Decider, HostPolicy, PolicyKind};

/// Nanoseconds on the driver's clock.
pub type Ns = u64;

/// A slice when the policy names none: Linux's CFS gives two CPU-bound
/// threads sharing a CPU a few ms each (sched_latency 6 ms x (1 + log2 ncpu));
/// a choice, not a measurement.
pub const DEFAULT_SLICE_NS: Ns = 4_000_000;

/// The software spin detector's sampling interval when the driver is given
/// none: smplab-vmm's default, where one sample costs 15–30 µs on this host
/// (docs/host.md), 2–3 % of a vCPU at this interval.
pub const DEFAULT_SAMPLE_NS: Ns = 1_000_000;

/// A vCPU, numbered across all VMs (VM 0's vCPUs first).
pub type VcpuId = usize;
/// A host CPU, numbered 0.. among the scheduler's pCPUs (not the host's ids).
pub type PcpuId = usize;

/// What the driver must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Let `vcpu` run on `pcpu` (it was runnable and `pcpu` free).
    Run { vcpu: VcpuId, pcpu: PcpuId },
    /// Make `vcpu` leave its pCPU; call [`Scheduler::stopped`] once it has.
    Preempt { vcpu: VcpuId },
}

/// Why a vCPU was preempted (for the statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreemptCause {
    SliceEnd,
    Spin,
    /// Displaced from its pCPU so the vCPU a spinner of another VM waits for
    /// could run beside it (`spin`'s directed swap).
    Swap,
    Halt,
    /// Its affinity changed and no longer holds the pCPU it runs on.
    Affinity,
}

/// What the driver observed of a running vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    /// Stayed in a small code range and wrote (almost) nothing new.
    pub spinning: bool,
    /// Used (almost) no CPU since the last sample: halted in the guest.
    pub halted: bool,
    /// In the guest kernel (CPL 0): not a safe point.
    pub in_kernel: bool,
}

/// The state of one vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VcpuState {
    /// Wants a pCPU and has none.
    Runnable { since: Ns },
    /// On `pcpu` since `since`; `preempting` once a preemption was asked.
    Running {
        pcpu: PcpuId,
        since: Ns,
        preempting: Option<PreemptCause>,
    },
    /// Halted in the guest, as its driver reported ([`Scheduler::block`]):
    /// waits for a wake-up, not for a pCPU.
    Blocked,
    /// Its VM finished: never scheduled again.
    Finished,
}

/// A policy setting this scheduler cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("policy `linux` has no user-level scheduler: run the vCPU threads unscheduled")]
    NotUserLevel,
    #[error("policy `fair` is the simulator's model of a fair-share host kernel: on a real host use `linux` (its kernel's scheduler) or `rr[:SLICE]` (smplab-policy's round robin)")]
    SimulatorOnly,
    #[error("safe points are a user-level policy's: write `rr+safepoint:GRACE`, not `{0}`")]
    SafePointNeedsUserLevel(String),
    #[error("no host CPUs to schedule on")]
    NoPcpus,
    #[error("no vCPUs to schedule (a VM needs at least one)")]
    NoVcpus,
    #[error(
        "policy `partition` needs at least one host CPU per VM: {vms} VMs on {pcpus} host CPUs"
    )]
    PartitionTooSmall { vms: usize, pcpus: usize },
    #[error("policy `gang` co-schedules a VM's vCPUs: VM {vm} has {vcpus} vCPUs but there are only {pcpus} host CPUs")]
    GangTooLarge { vm: usize, vcpus: u32, pcpus: usize },
    #[error("vCPU {vcpu} does not exist: there are {vcpus} vCPUs")]
    NoSuchVcpu { vcpu: usize, vcpus: usize },
    #[error("VM {vm} does not exist: there are {vms} VMs")]
    NoSuchVm { vm: usize, vms: usize },
    #[error("affinity of vCPU {vcpu}: {why}")]
    BadAffinity { vcpu: usize, why: String },
}

/// Per-vCPU counts the driver reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VcpuStats {
    pub run_ns: Ns,
    /// Runnable without a pCPU (steal time).
    pub wait_ns: Ns,
    pub preemptions: u64,
    pub spins_detected: u64,
    pub halts_detected: u64,
    /// Times this vCPU was the target of a directed yield.
    pub yields_received: u64,
    /// Slice ends deferred because it was in the guest kernel.
    pub safepoint_deferrals: u64,
}

#[cfg(test)]
mod tests;
