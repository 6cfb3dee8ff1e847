//! The [`Scheduler`]: the driver's side of a policy. It takes the driver's
//! events, keeps the shared state in its [`Core`], asks its [`Policy`]
//! where policies differ, and hands back [`Action`]s.

use crate::policies::{self, safepoint::SafePoint};
use crate::shared::{Core, SliceEnd};
use crate::{
    Action, Decider, HostPolicy, Ns, PcpuId, Policy, PolicyError, PreemptCause, Sample, VcpuId,
    VcpuState, VcpuStats, DEFAULT_SLICE_NS,
};

/// A policy's decisions over a fixed set of vCPUs and pCPUs.
#[derive(Debug, Clone)]
pub struct Scheduler {
    setting: HostPolicy,
    pub(crate) core: Core,
    policy: Box<dyn Policy>,
}

/// Refuse what no user-level scheduler can run: a kind a kernel decides,
/// no pCPUs, an empty VM.
fn check_common(
    setting: &HostPolicy,
    vcpus_per_vm: &[u32],
    pcpus: usize,
) -> Result<(), PolicyError> {
    match setting.kind.decider() {
        Decider::HostKernel => return Err(PolicyError::NotUserLevel),
        Decider::SimulatedKernel => return Err(PolicyError::SimulatorOnly),
        Decider::UserLevel => {}
    }
    if pcpus == 0 {
        return Err(PolicyError::NoPcpus);
    }
    if vcpus_per_vm.is_empty() || vcpus_per_vm.contains(&0) {
        return Err(PolicyError::NoVcpus);
    }
    Ok(())
}

/// Whether `setting` can run on `pcpus` host CPUs with VMs of
/// `vcpus_per_vm` vCPUs, as [`Scheduler::new`] would find, and, for a kind
/// a kernel decides, that it asks nothing of a user-level scheduler (no
/// safe points). What a simulator or a host spec checks before it runs.
pub fn check(setting: &HostPolicy, vcpus_per_vm: &[u32], pcpus: usize) -> Result<(), PolicyError> {
    match setting.kind.decider() {
        Decider::HostKernel | Decider::SimulatedKernel => match setting.safe_point_grace_ns {
            Some(_) => Err(PolicyError::SafePointNeedsUserLevel(setting.to_string())),
            None => Ok(()),
        },
        Decider::UserLevel => Scheduler::new(setting, vcpus_per_vm, pcpus).map(|_| ()),
    }
}

impl Scheduler {
    /// A scheduler for VMs with `vcpus_per_vm[i]` vCPUs on `pcpus` host CPUs.
    /// Every vCPU starts runnable; call [`Scheduler::start`] to place them.
    pub fn new(
        setting: &HostPolicy,
        vcpus_per_vm: &[u32],
        pcpus: usize,
    ) -> Result<Scheduler, PolicyError> {
        check_common(setting, vcpus_per_vm, pcpus)?;
        let Some(mut policy) = policies::build(setting.kind, vcpus_per_vm, pcpus)? else {
            return Err(PolicyError::NotUserLevel);
        };
        if let Some(grace_ns) = setting.safe_point_grace_ns {
            policy = Box::new(SafePoint {
                inner: policy,
                grace_ns,
            });
        }
        let slice_ns = setting.time_slice_ns.unwrap_or(DEFAULT_SLICE_NS).max(1);
        let share = policy.shares(vcpus_per_vm, pcpus);
        Ok(Scheduler {
            setting: *setting,
            core: Core::new(vcpus_per_vm, pcpus, slice_ns, share),
            policy,
        })
    }

    pub fn policy(&self) -> &HostPolicy {
        &self.setting
    }
    pub fn slice_ns(&self) -> Ns {
        self.core.slice_ns
    }

    /// Change the slice from now on (Kulkarni & Kulkarni's tuner, [`crate::tune`]):
    /// running vCPUs are measured against the new length at the next tick.
    pub fn set_slice_ns(&mut self, slice_ns: Ns) {
        self.core.slice_ns = slice_ns.max(1);
    }
    pub fn vcpus(&self) -> usize {
        self.core.vcpus()
    }
    pub fn pcpus(&self) -> usize {
        self.core.pcpus()
    }
    pub fn vm_of(&self, vcpu: VcpuId) -> usize {
        self.core.vm_of(vcpu)
    }
    pub fn state(&self, vcpu: VcpuId) -> VcpuState {
        self.core.state(vcpu)
    }
    pub fn occupant(&self, pcpu: PcpuId) -> Option<VcpuId> {
        self.core.occupant(pcpu)
    }
    pub fn stats(&self, vcpu: VcpuId) -> &VcpuStats {
        &self.core.stats[vcpu]
    }
    /// Time each pCPU had an occupant, up to the last event.
    pub fn pcpu_busy_ns(&self) -> &[Ns] {
        &self.core.pcpu_busy_ns
    }

    /// Whether the policy acts on samples that find a vCPU spinning: its
    /// driver should run a software spin detector.
    pub fn acts_on_spin_samples(&self) -> bool {
        self.policy.acts_on_spin_samples()
    }

    /// Whether the driver should sample running `vcpu` for spinning now:
    /// always under a policy that only counts spins (the samples judge the
    /// detector), and under one that acts on them only when a verdict could
    /// lead to an action ([`Policy::spin_sample_can_act`]). A driver that
    /// skips a sample restarts that vCPU's detector streak.
    pub fn wants_spin_sample(&self, vcpu: VcpuId) -> bool {
        !self.policy.acts_on_spin_samples() || self.policy.spin_sample_can_act(&self.core, vcpu)
    }

    /// The pCPUs VM `vm` may run on: all, or its share under `partition`
    /// ([`crate::partition_shares`]).
    pub fn allowed(&self, vm: usize, pcpu: PcpuId) -> bool {
        self.core.allowed(vm, pcpu)
    }

    /// VM `vm`'s pCPUs `[lo, hi)`: all, or its share under `partition`.
    pub fn share(&self, vm: usize) -> (PcpuId, PcpuId) {
        self.core.share[vm]
    }

    /// Whether a runnable vCPU could use `pcpu` were it free.
    pub fn someone_waits_for(&self, pcpu: PcpuId) -> bool {
        self.core.someone_waits_for(pcpu)
    }

    /// Place the first vCPUs on the free pCPUs.
    pub fn start(&mut self, now: Ns) -> Vec<Action> {
        self.core.started = true;
        let mut actions = Vec::new();
        self.dispatch(now, &mut actions);
        actions
    }

    /// When [`Scheduler::tick`] next has something to do (a slice, a turn or
    /// a grace period ends), if anything runs. A deadline at or before the
    /// current time means a slice is over but nobody waits:
    /// [`Scheduler::tick`] acts once someone does.
    pub fn next_deadline(&self) -> Option<Ns> {
        self.deadlines().min()
    }

    /// The first deadline after `now` (for a driver that ticks at every
    /// event anyway and only needs a timer for the next slice end).
    pub fn next_deadline_after(&self, now: Ns) -> Option<Ns> {
        self.deadlines().filter(|&d| d > now).min()
    }

    fn deadlines(&self) -> impl Iterator<Item = Ns> + '_ {
        let core = &self.core;
        let per_vcpu = core
            .states
            .iter()
            .enumerate()
            .filter_map(move |(v, s)| match *s {
                VcpuState::Running {
                    since,
                    preempting: None,
                    ..
                } => self.policy.slice_deadline(core, v, since),
                _ => None,
            });
        self.policy.turn_deadline(core).into_iter().chain(per_vcpu)
    }

    /// The clock reached `now`: end the turn or the slices that are over
    /// when someone waits for the pCPU.
    pub fn tick(&mut self, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.policy.turn_over(&self.core, now) {
            self.policy.end_turn(&mut self.core, now, &mut actions);
        }
        for v in 0..self.vcpus() {
            match self.policy.slice_end(&self.core, v, now) {
                SliceEnd::Keep => {}
                SliceEnd::Defer => self.core.stats[v].safepoint_deferrals += 1,
                SliceEnd::Preempt => self.core.preempt(v, PreemptCause::SliceEnd, &mut actions),
            }
        }
        actions
    }

    /// Whether [`Scheduler::tick`] at `now` would preempt someone (for a
    /// driver that ticks only when needed).
    pub fn tick_due(&self, now: Ns) -> bool {
        self.policy.turn_over(&self.core, now)
            || (0..self.vcpus())
                .any(|v| self.policy.slice_end(&self.core, v, now) == SliceEnd::Preempt)
    }

    /// A sample of running `vcpu` at `now`.
    pub fn sample(&mut self, vcpu: VcpuId, now: Ns, sample: Sample) -> Vec<Action> {
        let _ = now;
        let mut actions = Vec::new();
        let Some(pcpu) = self.core.settled_pcpu(vcpu) else {
            return actions;
        };
        self.core.in_kernel[vcpu] = sample.in_kernel;
        self.core.spinning[vcpu] = sample.spinning;
        if sample.spinning {
            self.core.stats[vcpu].spins_detected += 1;
        }
        if sample.halted {
            self.core.stats[vcpu].halts_detected += 1;
        }
        if sample.halted && self.policy.yields_when_halted() && self.core.someone_waits_for(pcpu) {
            self.core.preempt(vcpu, PreemptCause::Halt, &mut actions);
        } else if sample.spinning {
            self.policy
                .on_spinning(&mut self.core, vcpu, pcpu, &mut actions);
        }
        actions
    }

    /// Running `vcpu` exited because a hardware spin detector (PLE, the SDB)
    /// saw it spin: it yields its pCPU (directed to a preempted sibling, else
    /// to the next in line) unless its policy runs vCPUs together or not at
    /// all (`gang`). Nothing happens when nobody waits.
    pub fn spin_exit(&mut self, vcpu: VcpuId, now: Ns) -> Vec<Action> {
        let _ = now;
        let mut actions = Vec::new();
        let Some(pcpu) = self.core.settled_pcpu(vcpu) else {
            return actions;
        };
        self.core.stats[vcpu].spins_detected += 1;
        self.core.spinning[vcpu] = true;
        self.policy
            .on_spin_exit(&mut self.core, vcpu, pcpu, &mut actions);
        actions
    }

    /// Running (or being preempted) `vcpu` halted in the guest: it leaves its
    /// pCPU and waits for [`Scheduler::wake`], not for a pCPU. Under `gang`
    /// its pCPU stays idle while its VM's turn lasts.
    pub fn block(&mut self, vcpu: VcpuId, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        let core = &mut self.core;
        match core.states[vcpu] {
            VcpuState::Running { pcpu, since, .. } => core.leave(vcpu, pcpu, since, now),
            VcpuState::Runnable { since } => {
                core.stats[vcpu].wait_ns += now.saturating_sub(since);
                core.queue.retain(|&v| v != vcpu);
            }
            VcpuState::Blocked | VcpuState::Finished => return actions,
        }
        core.states[vcpu] = VcpuState::Blocked;
        core.in_kernel[vcpu] = false;
        core.spinning[vcpu] = false;
        for r in &mut core.reserved {
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
        if self.core.states[vcpu] == VcpuState::Blocked {
            self.core.states[vcpu] = VcpuState::Runnable { since: now };
            self.core.queue.push_back(vcpu);
            self.dispatch(now, &mut actions);
        }
        actions
    }

    /// Preempted `vcpu` has left its pCPU.
    pub fn stopped(&mut self, vcpu: VcpuId, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        if let VcpuState::Running { pcpu, since, .. } = self.core.states[vcpu] {
            self.core.leave(vcpu, pcpu, since, now);
            self.core.states[vcpu] = VcpuState::Runnable { since: now };
            self.core.queue.push_back(vcpu);
            self.dispatch(now, &mut actions);
        }
        actions
    }

    /// VM `vm` finished (or crashed): all its vCPUs leave for good. Their
    /// pCPUs are free at once (the driver stops their threads itself).
    pub fn finished(&mut self, vm: usize, now: Ns) -> Vec<Action> {
        let mut actions = Vec::new();
        let core = &mut self.core;
        for v in 0..core.vcpus() {
            if core.vm_of[v] != vm {
                continue;
            }
            match core.states[v] {
                VcpuState::Running { pcpu, since, .. } => core.leave(v, pcpu, since, now),
                VcpuState::Runnable { since } => {
                    core.stats[v].wait_ns += now.saturating_sub(since);
                }
                VcpuState::Blocked | VcpuState::Finished => {}
            }
            core.states[v] = VcpuState::Finished;
        }
        let vm_of = &core.vm_of;
        core.queue.retain(|&v| vm_of[v] != vm);
        for r in &mut core.reserved {
            if r.is_some_and(|v| vm_of[v] == vm) {
                *r = None;
            }
        }
        self.policy.vm_finished(vm);
        self.dispatch(now, &mut actions);
        actions
    }

    /// Close the books at `now` (the end of a run): every vCPU's current
    /// stretch of running or waiting is counted.
    pub fn account_until(&mut self, now: Ns) {
        let core = &mut self.core;
        for v in 0..core.vcpus() {
            match core.states[v] {
                VcpuState::Running { pcpu, since, .. } => {
                    let ran = now.saturating_sub(since);
                    core.stats[v].run_ns += ran;
                    core.pcpu_busy_ns[pcpu] += ran;
                    if let VcpuState::Running { since, .. } = &mut core.states[v] {
                        *since = now;
                    }
                }
                VcpuState::Runnable { since } => {
                    core.stats[v].wait_ns += now.saturating_sub(since);
                    core.states[v] = VcpuState::Runnable { since: now };
                }
                VcpuState::Blocked | VcpuState::Finished => {}
            }
        }
    }

    /// Fill every free pCPU the policy lets someone use.
    pub(crate) fn dispatch(&mut self, now: Ns, actions: &mut Vec<Action>) {
        self.policy.dispatch(&mut self.core, now, actions);
    }
}
