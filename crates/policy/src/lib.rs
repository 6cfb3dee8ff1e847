//! smplab-policy: the host's vCPU scheduling policies of seed 002 as pure
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
//! Policies ([`HostPolicy`], the run configuration's one type):
//! - `fair[:SLICE]`: one FIFO of runnable vCPUs; a vCPU runs a slice, then goes
//!   to the back if someone waits.
//! - `gang[:SLICE]`: a VM's vCPUs run together; VMs take turns a slice each.
//! - `partition[:SLICE]`: the pCPUs are split among the VMs; each VM is
//!   time-sliced fairly on its own share (seed 002 §6).
//! - `spin[:SLICE]`: fair, plus spin-triggered preemption: a vCPU sampled
//!   spinning gives its pCPU to a preempted sibling of its VM (directed yield,
//!   the likely lock holder or barrier partner), else to the next in line.
//! - `+safepoint:GRACE`: a vCPU whose slice ended while in the guest kernel
//!   (maybe holding a kernel lock) keeps running until it is back in user mode,
//!   at most GRACE (Uhlig et al., seed 002 §5.1).
//! - `linux` has no user-level decisions; [`Scheduler::new`] refuses it.
//!
//! Per-vCPU affinity ([`Affinity`], [`Scheduler::set_affinity`],
//! [`Scheduler::set_vm_affinity`]: seed 001's pinned or floating vCPUs) can
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
pub mod tune;

pub use affinity::Affinity;
pub use smplab_record::config::{HostPolicy, PolicyKind};
use std::collections::VecDeque;

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

/// What a tick does to a running vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SliceEnd {
    Keep,
    /// Over, but in the guest kernel within the safe-point grace.
    Defer,
    Preempt,
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

/// The policy's decisions over a fixed set of vCPUs and pCPUs.
#[derive(Debug, Clone)]
pub struct Scheduler {
    policy: HostPolicy,
    slice_ns: Ns,
    vm_of: Vec<usize>,
    states: Vec<VcpuState>,
    stats: Vec<VcpuStats>,
    /// The vCPU on each pCPU (a preempting one stays until stopped).
    occupant: Vec<Option<VcpuId>>,
    pcpu_busy_ns: Vec<Ns>,
    /// Runnable vCPUs, oldest first.
    queue: VecDeque<VcpuId>,
    /// A directed-yield target reserved for a pCPU being vacated.
    reserved: Vec<Option<VcpuId>>,
    /// The last sample said "in the guest kernel".
    in_kernel: Vec<bool>,
    /// Each VM's share of pCPUs under `partition`: `[lo, hi)`.
    share: Vec<(PcpuId, PcpuId)>,
    /// gang: the VMs whose turn it is.
    gang_on: Vec<bool>,
    /// gang: when the current turn began (None: no turn).
    gang_since: Option<Ns>,
    /// gang: the current turn is over, its vCPUs are being preempted.
    gang_ending: bool,
    /// vCPUs per VM.
    vm_vcpus: Vec<u32>,
    /// Each vCPU's allowed pCPUs ([`Affinity`], set at run time).
    affinity: Vec<Affinity>,
    /// [`Scheduler::start`] was called: changes may place vCPUs.
    started: bool,
}

/// Split `pcpus` into contiguous shares proportional to each VM's vCPUs, at
/// least one pCPU each (seed 002 §6 gives each VM the pCPUs its size asks
/// for). Needs `vcpus_per_vm.len() <= pcpus`.
pub fn partition_shares(vcpus_per_vm: &[u32], pcpus: usize) -> Vec<(PcpuId, PcpuId)> {
    let total: u64 = vcpus_per_vm.iter().map(|&v| u64::from(v)).sum();
    let n = vcpus_per_vm.len();
    let mut out = Vec::with_capacity(n);
    let (mut lo, mut acc) = (0usize, 0u64);
    for (i, &v) in vcpus_per_vm.iter().enumerate() {
        acc += u64::from(v);
        let prop = usize::try_from(acc * pcpus as u64 / total.max(1)).unwrap_or(pcpus);
        let hi = prop
            .max(lo + 1)
            .min(pcpus.saturating_sub(n - i - 1))
            .max(lo);
        out.push((lo, hi));
        lo = hi;
    }
    out
}

impl Scheduler {
    /// A scheduler for VMs with `vcpus_per_vm[i]` vCPUs on `pcpus` host CPUs.
    /// Every vCPU starts runnable; call [`Scheduler::start`] to place them.
    pub fn new(
        policy: &HostPolicy,
        vcpus_per_vm: &[u32],
        pcpus: usize,
    ) -> Result<Scheduler, PolicyError> {
        if !policy.is_user_level() {
            return Err(PolicyError::NotUserLevel);
        }
        if pcpus == 0 {
            return Err(PolicyError::NoPcpus);
        }
        let vms = vcpus_per_vm.len();
        if vms == 0 || vcpus_per_vm.contains(&0) {
            return Err(PolicyError::NoVcpus);
        }
        if policy.kind == PolicyKind::Partition && vms > pcpus {
            return Err(PolicyError::PartitionTooSmall { vms, pcpus });
        }
        if policy.kind == PolicyKind::Gang {
            if let Some((vm, &vcpus)) = vcpus_per_vm
                .iter()
                .enumerate()
                .find(|(_, &n)| n as usize > pcpus)
            {
                return Err(PolicyError::GangTooLarge { vm, vcpus, pcpus });
            }
        }
        let vm_of: Vec<usize> = vcpus_per_vm
            .iter()
            .enumerate()
            .flat_map(|(vm, &n)| std::iter::repeat_n(vm, n as usize))
            .collect();
        let n = vm_of.len();
        let share = if policy.kind == PolicyKind::Partition {
            partition_shares(vcpus_per_vm, pcpus)
        } else {
            vec![(0, pcpus); vms]
        };
        Ok(Scheduler {
            policy: *policy,
            slice_ns: policy.time_slice_ns.unwrap_or(DEFAULT_SLICE_NS).max(1),
            vm_of,
            states: vec![VcpuState::Runnable { since: 0 }; n],
            stats: vec![VcpuStats::default(); n],
            occupant: vec![None; pcpus],
            pcpu_busy_ns: vec![0; pcpus],
            queue: (0..n).collect(),
            reserved: vec![None; pcpus],
            in_kernel: vec![false; n],
            share,
            gang_on: vec![false; vms],
            gang_since: None,
            gang_ending: false,
            vm_vcpus: vcpus_per_vm.to_vec(),
            affinity: vec![Affinity::Any; n],
            started: false,
        })
    }

    pub fn policy(&self) -> &HostPolicy {
        &self.policy
    }
    pub fn slice_ns(&self) -> Ns {
        self.slice_ns
    }

    /// Change the slice from now on (seed 001's tuner, [`tune`]): running
    /// vCPUs are measured against the new length at the next tick.
    pub fn set_slice_ns(&mut self, slice_ns: Ns) {
        self.slice_ns = slice_ns.max(1);
    }
    pub fn vcpus(&self) -> usize {
        self.vm_of.len()
    }
    pub fn pcpus(&self) -> usize {
        self.occupant.len()
    }
    pub fn vm_of(&self, vcpu: VcpuId) -> usize {
        self.vm_of[vcpu]
    }
    pub fn state(&self, vcpu: VcpuId) -> VcpuState {
        self.states[vcpu]
    }
    pub fn occupant(&self, pcpu: PcpuId) -> Option<VcpuId> {
        self.occupant[pcpu]
    }
    pub fn stats(&self, vcpu: VcpuId) -> &VcpuStats {
        &self.stats[vcpu]
    }
    /// Time each pCPU had an occupant, up to the last event.
    pub fn pcpu_busy_ns(&self) -> &[Ns] {
        &self.pcpu_busy_ns
    }

    /// The pCPUs VM `vm` may run on: all, or its share under `partition`
    /// ([`partition_shares`]).
    pub fn allowed(&self, vm: usize, pcpu: PcpuId) -> bool {
        let (lo, hi) = self.share[vm];
        (lo..hi).contains(&pcpu)
    }

    /// VM `vm`'s pCPUs `[lo, hi)`: all, or its share under `partition`.
    pub fn share(&self, vm: usize) -> (PcpuId, PcpuId) {
        self.share[vm]
    }

    /// Place the first vCPUs on the free pCPUs.
    pub fn start(&mut self, now: Ns) -> Vec<Action> {
        self.started = true;
        let mut actions = Vec::new();
        self.dispatch(now, &mut actions);
        actions
    }

    /// When [`Scheduler::tick`] next has something to do (a slice or a grace
    /// period ends), if anything runs. A deadline at or before the current
    /// time means a slice is over but nobody waits: [`Scheduler::tick`] acts
    /// once someone does.
    pub fn next_deadline(&self) -> Option<Ns> {
        self.deadlines().min()
    }

    /// The first deadline after `now` (for a driver that ticks at every
    /// event anyway and only needs a timer for the next slice end).
    pub fn next_deadline_after(&self, now: Ns) -> Option<Ns> {
        self.deadlines().filter(|&d| d > now).min()
    }

    fn deadlines(&self) -> impl Iterator<Item = Ns> + '_ {
        let gang = (self.policy.kind == PolicyKind::Gang)
            .then(|| self.gang_since.map(|since| since + self.slice_ns))
            .flatten();
        let grace = self.policy.safe_point_grace_ns;
        let per_vcpu = self
            .states
            .iter()
            .enumerate()
            .filter(move |_| self.policy.kind != PolicyKind::Gang)
            .filter_map(move |(v, s)| match s {
                VcpuState::Running {
                    since,
                    preempting: None,
                    ..
                } => Some(match grace {
                    Some(g) if self.in_kernel[v] => since + self.slice_ns + g,
                    _ => since + self.slice_ns,
                }),
                _ => None,
            });
        gang.into_iter().chain(per_vcpu)
    }

    /// The clock reached `now`: end the slices that are over when someone
    /// waits for the pCPU.
    pub fn tick(&mut self, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.policy.kind == PolicyKind::Gang {
            if self.gang_turn_over(now) {
                self.end_gang_turn(&mut actions);
            }
            return actions;
        }
        for v in 0..self.vcpus() {
            match self.slice_end(v, now) {
                SliceEnd::Keep => {}
                SliceEnd::Defer => self.stats[v].safepoint_deferrals += 1,
                SliceEnd::Preempt => self.preempt(v, PreemptCause::SliceEnd, &mut actions),
            }
        }
        actions
    }

    /// Whether [`Scheduler::tick`] at `now` would preempt someone (for a
    /// driver that ticks only when needed).
    pub fn tick_due(&self, now: Ns) -> bool {
        if self.policy.kind == PolicyKind::Gang {
            return self.gang_turn_over(now);
        }
        (0..self.vcpus()).any(|v| self.slice_end(v, now) == SliceEnd::Preempt)
    }

    /// The pCPU `vcpu` runs on, unless it is not running or already being
    /// preempted (then samples, spin exits and affinity changes leave it be).
    fn settled_pcpu(&self, vcpu: VcpuId) -> Option<PcpuId> {
        match self.states[vcpu] {
            VcpuState::Running {
                pcpu,
                preempting: None,
                ..
            } => Some(pcpu),
            _ => None,
        }
    }

    /// What a tick at `now` does to `v`.
    fn slice_end(&self, v: VcpuId, now: Ns) -> SliceEnd {
        let VcpuState::Running {
            pcpu,
            since,
            preempting: None,
        } = self.states[v]
        else {
            return SliceEnd::Keep;
        };
        let ran = now.saturating_sub(since);
        if ran < self.slice_ns || !self.someone_waits_for(pcpu) {
            return SliceEnd::Keep;
        }
        match self.policy.safe_point_grace_ns {
            Some(grace) if self.in_kernel[v] && ran < self.slice_ns + grace => SliceEnd::Defer,
            _ => SliceEnd::Preempt,
        }
    }

    fn gang_turn_over(&self, now: Ns) -> bool {
        let Some(since) = self.gang_since else {
            return false;
        };
        let others_wait = self.queue.iter().any(|&v| !self.gang_on[self.vm_of[v]]);
        now.saturating_sub(since) >= self.slice_ns && others_wait && !self.gang_ending
    }

    fn end_gang_turn(&mut self, actions: &mut Vec<Action>) {
        self.gang_ending = true;
        for v in 0..self.vcpus() {
            if self.gang_on[self.vm_of[v]] {
                if let VcpuState::Running {
                    preempting: None, ..
                } = self.states[v]
                {
                    self.preempt(v, PreemptCause::SliceEnd, actions);
                }
            }
        }
    }

    /// A sample of running `vcpu` at `now`.
    pub fn sample(&mut self, vcpu: VcpuId, now: Ns, sample: Sample) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(pcpu) = self.settled_pcpu(vcpu) else {
            return actions;
        };
        self.in_kernel[vcpu] = sample.in_kernel;
        if sample.spinning {
            self.stats[vcpu].spins_detected += 1;
        }
        if sample.halted {
            self.stats[vcpu].halts_detected += 1;
        }
        let gang = self.policy.kind == PolicyKind::Gang;
        if sample.halted && !gang && self.someone_waits_for(pcpu) {
            self.preempt(vcpu, PreemptCause::Halt, &mut actions);
        } else if sample.spinning && self.policy.kind == PolicyKind::Spin {
            self.directed_yield(vcpu, pcpu, &mut actions);
        }
        let _ = now;
        actions
    }

    /// Running `vcpu` exited because a hardware spin detector (PLE, the SDB)
    /// saw it spin: it yields its pCPU (directed to a preempted sibling, else
    /// to the next in line) under every policy but `gang`, whose vCPUs run
    /// together or not at all. Nothing happens when nobody waits.
    pub fn spin_exit(&mut self, vcpu: VcpuId, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(pcpu) = self.settled_pcpu(vcpu) else {
            return actions;
        };
        self.stats[vcpu].spins_detected += 1;
        if self.policy.kind != PolicyKind::Gang {
            self.directed_yield(vcpu, pcpu, &mut actions);
        }
        let _ = now;
        actions
    }

    fn directed_yield(&mut self, vcpu: VcpuId, pcpu: PcpuId, actions: &mut Vec<Action>) {
        if let Some(target) = self.yield_target(vcpu, pcpu) {
            self.reserved[pcpu] = Some(target);
            self.stats[target].yields_received += 1;
            self.preempt(vcpu, PreemptCause::Spin, actions);
        } else if self.someone_waits_for(pcpu) {
            self.preempt(vcpu, PreemptCause::Spin, actions);
        }
    }

    /// Running (or being preempted) `vcpu` halted in the guest: it leaves its
    /// pCPU and waits for [`Scheduler::wake`], not for a pCPU. Under `gang`
    /// its pCPU stays idle while its VM's turn lasts.
    pub fn block(&mut self, vcpu: VcpuId, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        match self.states[vcpu] {
            VcpuState::Running { pcpu, since, .. } => self.leave(vcpu, pcpu, since, now),
            VcpuState::Runnable { since } => {
                self.stats[vcpu].wait_ns += now.saturating_sub(since);
                self.queue.retain(|&v| v != vcpu);
            }
            VcpuState::Blocked | VcpuState::Finished => return actions,
        }
        self.states[vcpu] = VcpuState::Blocked;
        self.in_kernel[vcpu] = false;
        for r in &mut self.reserved {
            if *r == Some(vcpu) {
                *r = None;
            }
        }
        self.dispatch(now, &mut actions);
        actions
    }

    /// Blocked `vcpu` was woken: it is runnable again.
    pub fn wake(&mut self, vcpu: VcpuId, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.states[vcpu] == VcpuState::Blocked {
            self.states[vcpu] = VcpuState::Runnable { since: now };
            self.queue.push_back(vcpu);
            self.dispatch(now, &mut actions);
        }
        actions
    }

    /// A runnable, not running sibling of `vcpu` that may use `pcpu`, the one
    /// waiting longest (the likeliest lock holder: preempted earliest).
    fn yield_target(&self, vcpu: VcpuId, pcpu: PcpuId) -> Option<VcpuId> {
        let vm = self.vm_of[vcpu];
        self.queue
            .iter()
            .copied()
            .find(|&v| self.vm_of[v] == vm && v != vcpu && self.eligible(v, pcpu))
    }

    /// Preempted `vcpu` has left its pCPU.
    pub fn stopped(&mut self, vcpu: VcpuId, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        if let VcpuState::Running { pcpu, since, .. } = self.states[vcpu] {
            self.leave(vcpu, pcpu, since, now);
            self.states[vcpu] = VcpuState::Runnable { since: now };
            self.queue.push_back(vcpu);
            self.dispatch(now, &mut actions);
        }
        actions
    }

    /// The VM of `vcpu` finished (or crashed): all its vCPUs leave for good.
    /// Their pCPUs are free at once (the driver stops their threads itself).
    pub fn finished(&mut self, vm: usize, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        for v in 0..self.vcpus() {
            if self.vm_of[v] != vm {
                continue;
            }
            match self.states[v] {
                VcpuState::Running { pcpu, since, .. } => self.leave(v, pcpu, since, now),
                VcpuState::Runnable { since } => {
                    self.stats[v].wait_ns += now.saturating_sub(since);
                }
                VcpuState::Blocked | VcpuState::Finished => {}
            }
            self.states[v] = VcpuState::Finished;
        }
        self.queue.retain(|&v| self.vm_of[v] != vm);
        for r in &mut self.reserved {
            if r.is_some_and(|v| self.vm_of[v] == vm) {
                *r = None;
            }
        }
        self.gang_on[vm] = false;
        if !self.gang_on.contains(&true) {
            self.gang_since = None;
        }
        self.dispatch(now, &mut actions);
        actions
    }

    /// Close the books of `vcpu` at `now` (the end of a run): its current
    /// stretch of running or waiting is counted.
    pub fn account_until(&mut self, now: Ns) {
        for v in 0..self.vcpus() {
            match self.states[v] {
                VcpuState::Running { pcpu, since, .. } => {
                    let ran = now.saturating_sub(since);
                    self.stats[v].run_ns += ran;
                    self.pcpu_busy_ns[pcpu] += ran;
                    if let VcpuState::Running { since, .. } = &mut self.states[v] {
                        *since = now;
                    }
                }
                VcpuState::Runnable { since } => {
                    self.stats[v].wait_ns += now.saturating_sub(since);
                    self.states[v] = VcpuState::Runnable { since: now };
                }
                VcpuState::Blocked | VcpuState::Finished => {}
            }
        }
    }

    fn leave(&mut self, vcpu: VcpuId, pcpu: PcpuId, since: Ns, now: Ns) {
        let ran = now.saturating_sub(since);
        self.stats[vcpu].run_ns += ran;
        self.pcpu_busy_ns[pcpu] += ran;
        self.occupant[pcpu] = None;
    }

    fn preempt(&mut self, vcpu: VcpuId, cause: PreemptCause, actions: &mut Vec<Action>) {
        if let VcpuState::Running { preempting, .. } = &mut self.states[vcpu] {
            *preempting = Some(cause);
            self.stats[vcpu].preemptions += 1;
            actions.push(Action::Preempt { vcpu });
        }
    }

    /// Whether a runnable vCPU could use `pcpu` were it free.
    pub fn someone_waits_for(&self, pcpu: PcpuId) -> bool {
        self.queue.iter().any(|&v| self.eligible(v, pcpu))
    }

    fn eligible(&self, vcpu: VcpuId, pcpu: PcpuId) -> bool {
        let vm = self.vm_of[vcpu];
        let policy_allows = match self.policy.kind {
            PolicyKind::Partition => self.allowed(vm, pcpu),
            // Under gang any VM may wait for a pCPU; whether it gets one now
            // is the turn's business (dispatch).
            _ => true,
        };
        policy_allows && self.affinity[vcpu].allows(pcpu)
    }

    /// Fill every free pCPU the policy lets someone use.
    fn dispatch(&mut self, now: Ns, actions: &mut Vec<Action>) {
        if self.policy.kind == PolicyKind::Gang {
            self.gang_dispatch(now, actions);
            return;
        }
        for pcpu in 0..self.pcpus() {
            if self.occupant[pcpu].is_some() {
                continue;
            }
            let reserved = self.reserved[pcpu].take().filter(|&v| {
                matches!(self.states[v], VcpuState::Runnable { .. }) && self.eligible(v, pcpu)
            });
            let next =
                reserved.or_else(|| self.queue.iter().copied().find(|&v| self.eligible(v, pcpu)));
            if let Some(v) = next {
                self.grant(v, pcpu, now, actions);
            }
        }
    }

    /// Gang: while a VM whose turn it is still occupies a pCPU, only its
    /// own vCPUs (woken ones) get free pCPUs. Once all stopped or halted, a
    /// new turn: the VM of the oldest runnable vCPU, plus further VMs in
    /// queue order as long as all their vCPUs fit on the pCPUs left (first
    /// fit, so small VMs share a turn); their runnable vCPUs take pCPUs.
    fn gang_dispatch(&mut self, now: Ns, actions: &mut Vec<Action>) {
        let turn_on = (0..self.vcpus()).any(|v| {
            self.gang_on[self.vm_of[v]] && matches!(self.states[v], VcpuState::Running { .. })
        });
        if turn_on && self.gang_ending {
            return;
        }
        if !turn_on {
            self.gang_on.fill(false);
            self.gang_since = None;
            self.gang_ending = false;
            let mut room = self.pcpus();
            for i in 0..self.queue.len() {
                let vm = self.vm_of[self.queue[i]];
                let need = self.vm_vcpus[vm] as usize;
                if !self.gang_on[vm] && need <= room {
                    self.gang_on[vm] = true;
                    room -= need;
                }
            }
            if self.gang_on.contains(&true) {
                self.gang_since = Some(now);
            }
        }
        let members: Vec<VcpuId> = self
            .queue
            .iter()
            .copied()
            .filter(|&v| self.gang_on[self.vm_of[v]])
            .collect();
        let mut free: Vec<PcpuId> = (0..self.pcpus())
            .filter(|&p| self.occupant[p].is_none())
            .collect();
        // Each member takes the first free pCPU its affinity allows (with no
        // affinity set: member k gets the k-th free pCPU).
        for v in members {
            if let Some(i) = free.iter().position(|&p| self.affinity[v].allows(p)) {
                let p = free.remove(i);
                self.grant(v, p, now, actions);
            }
        }
    }

    fn grant(&mut self, vcpu: VcpuId, pcpu: PcpuId, now: Ns, actions: &mut Vec<Action>) {
        if let VcpuState::Runnable { since } = self.states[vcpu] {
            self.stats[vcpu].wait_ns += now.saturating_sub(since);
        }
        self.queue.retain(|&v| v != vcpu);
        self.states[vcpu] = VcpuState::Running {
            pcpu,
            since: now,
            preempting: None,
        };
        self.occupant[pcpu] = Some(vcpu);
        actions.push(Action::Run { vcpu, pcpu });
    }
}

#[cfg(test)]
mod tests;
