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
//! Every policy yields a pCPU whose vCPU is sampled halted (it has nothing to
//! do); only `gang` keeps it, so a gang stays together.

pub mod tune;

pub use smplab_record::config::{HostPolicy, PolicyKind};
use std::collections::VecDeque;

/// Nanoseconds on the driver's clock.
pub type Ns = u64;

/// A slice when the policy names none: Linux's CFS gives two CPU-bound
/// threads sharing a CPU a few ms each (sched_latency 6 ms x (1 + log2 ncpu));
/// a choice, not a measurement.
pub const DEFAULT_SLICE_NS: Ns = 4_000_000;

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
    vms: usize,
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
    /// gang: the VM whose turn it is and when its turn began.
    gang_turn: Option<(usize, Ns)>,
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
        Ok(Scheduler {
            policy: *policy,
            slice_ns: policy.time_slice_ns.unwrap_or(DEFAULT_SLICE_NS).max(1),
            vm_of,
            vms,
            states: vec![VcpuState::Runnable { since: 0 }; n],
            stats: vec![VcpuStats::default(); n],
            occupant: vec![None; pcpus],
            pcpu_busy_ns: vec![0; pcpus],
            queue: (0..n).collect(),
            reserved: vec![None; pcpus],
            in_kernel: vec![false; n],
            gang_turn: None,
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
    /// (VM i gets pCPUs [i*P/K, (i+1)*P/K)).
    pub fn allowed(&self, vm: usize, pcpu: PcpuId) -> bool {
        if self.policy.kind != PolicyKind::Partition {
            return true;
        }
        let p = self.pcpus();
        (vm * p / self.vms..(vm + 1) * p / self.vms).contains(&pcpu)
    }

    /// Place the first vCPUs on the free pCPUs.
    pub fn start(&mut self, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        self.dispatch(now, &mut actions);
        actions
    }

    /// When [`Scheduler::tick`] next has something to do (a slice or a grace
    /// period ends), if anything runs.
    pub fn next_deadline(&self) -> Option<Ns> {
        if let (PolicyKind::Gang, Some((_, since))) = (self.policy.kind, self.gang_turn) {
            return Some(since + self.slice_ns);
        }
        self.states
            .iter()
            .filter_map(|s| match s {
                VcpuState::Running {
                    since,
                    preempting: None,
                    ..
                } => Some(since + self.slice_ns),
                _ => None,
            })
            .min()
    }

    /// The clock reached `now`: end the slices that are over when someone
    /// waits for the pCPU.
    pub fn tick(&mut self, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.policy.kind == PolicyKind::Gang {
            self.gang_tick(now, &mut actions);
            return actions;
        }
        for v in 0..self.vcpus() {
            let VcpuState::Running {
                pcpu,
                since,
                preempting: None,
            } = self.states[v]
            else {
                continue;
            };
            let ran = now.saturating_sub(since);
            if ran < self.slice_ns || !self.someone_waits_for(pcpu) {
                continue;
            }
            if let Some(grace) = self.policy.safe_point_grace_ns {
                if self.in_kernel[v] && ran < self.slice_ns + grace {
                    self.stats[v].safepoint_deferrals += 1;
                    continue;
                }
            }
            self.preempt(v, PreemptCause::SliceEnd, &mut actions);
        }
        actions
    }

    fn gang_tick(&mut self, now: Ns, actions: &mut Vec<Action>) {
        let Some((vm, since)) = self.gang_turn else {
            return;
        };
        let others_wait = self.queue.iter().any(|&v| self.vm_of[v] != vm);
        if now.saturating_sub(since) < self.slice_ns || !others_wait {
            return;
        }
        for v in 0..self.vcpus() {
            if self.vm_of[v] == vm {
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
        let VcpuState::Running {
            pcpu,
            preempting: None,
            ..
        } = self.states[vcpu]
        else {
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
            if let Some(target) = self.yield_target(vcpu, pcpu) {
                self.reserved[pcpu] = Some(target);
                self.stats[target].yields_received += 1;
                self.preempt(vcpu, PreemptCause::Spin, &mut actions);
            } else if self.someone_waits_for(pcpu) {
                self.preempt(vcpu, PreemptCause::Spin, &mut actions);
            }
        }
        let _ = now;
        actions
    }

    /// A runnable, not running sibling of `vcpu` that may use `pcpu`, the one
    /// waiting longest (the likeliest lock holder: preempted earliest).
    fn yield_target(&self, vcpu: VcpuId, pcpu: PcpuId) -> Option<VcpuId> {
        let vm = self.vm_of[vcpu];
        self.queue
            .iter()
            .copied()
            .find(|&v| self.vm_of[v] == vm && v != vcpu && self.allowed(vm, pcpu))
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
                VcpuState::Finished => {}
            }
            self.states[v] = VcpuState::Finished;
        }
        self.queue.retain(|&v| self.vm_of[v] != vm);
        for r in &mut self.reserved {
            if r.is_some_and(|v| self.vm_of[v] == vm) {
                *r = None;
            }
        }
        if self.gang_turn.is_some_and(|(g, _)| g == vm) {
            self.gang_turn = None;
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
                VcpuState::Finished => {}
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
    fn someone_waits_for(&self, pcpu: PcpuId) -> bool {
        self.queue.iter().any(|&v| self.eligible(v, pcpu))
    }

    fn eligible(&self, vcpu: VcpuId, pcpu: PcpuId) -> bool {
        let vm = self.vm_of[vcpu];
        match self.policy.kind {
            PolicyKind::Partition => self.allowed(vm, pcpu),
            // Under gang any VM may wait for a pCPU; whether it gets one now
            // is the turn's business (dispatch).
            _ => true,
        }
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
            let reserved = self.reserved[pcpu]
                .take()
                .filter(|&v| matches!(self.states[v], VcpuState::Runnable { .. }));
            let next =
                reserved.or_else(|| self.queue.iter().copied().find(|&v| self.eligible(v, pcpu)));
            if let Some(v) = next {
                self.grant(v, pcpu, now, actions);
            }
        }
    }

    /// Gang: while the VM whose turn it is still occupies a pCPU, nobody else
    /// gets one; once all its vCPUs stopped, the next VM with a runnable vCPU
    /// (oldest first) takes as many pCPUs as it has runnable vCPUs.
    fn gang_dispatch(&mut self, now: Ns, actions: &mut Vec<Action>) {
        if let Some((vm, _)) = self.gang_turn {
            let still_on = (0..self.vcpus()).any(|v| {
                self.vm_of[v] == vm && matches!(self.states[v], VcpuState::Running { .. })
            });
            if still_on {
                return;
            }
        }
        let Some(&head) = self.queue.front() else {
            self.gang_turn = None;
            return;
        };
        let vm = self.vm_of[head];
        self.gang_turn = Some((vm, now));
        let members: Vec<VcpuId> = self
            .queue
            .iter()
            .copied()
            .filter(|&v| self.vm_of[v] == vm)
            .collect();
        let free: Vec<PcpuId> = (0..self.pcpus())
            .filter(|&p| self.occupant[p].is_none())
            .collect();
        for (v, p) in members.into_iter().zip(free) {
            self.grant(v, p, now, actions);
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
