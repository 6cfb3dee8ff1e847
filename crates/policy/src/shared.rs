//! The scheduler's core: what every policy shares and keeps the same way —
//! each vCPU's VM and state, each pCPU's occupant, the queue of runnable
//! vCPUs, per-vCPU affinity and statistics, and the two phases of a
//! preemption (asked, then confirmed by the driver). A [`Policy`](crate::Policy)
//! decides with it; only the core changes it.

use crate::{Action, Affinity, Ns, PcpuId, PreemptCause, VcpuId, VcpuState, VcpuStats};
use std::collections::VecDeque;

/// What a tick does to a running vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceEnd {
    Keep,
    /// Over, but in the guest kernel within the safe-point grace.
    Defer,
    Preempt,
}

/// The state every policy shares, and the operations that change it.
#[derive(Debug, Clone)]
pub struct Core {
    pub(crate) slice_ns: Ns,
    pub(crate) vm_of: Vec<usize>,
    /// vCPUs per VM.
    pub(crate) vm_vcpus: Vec<u32>,
    pub(crate) states: Vec<VcpuState>,
    pub(crate) stats: Vec<VcpuStats>,
    /// The vCPU on each pCPU (a preempting one stays until stopped).
    pub(crate) occupant: Vec<Option<VcpuId>>,
    pub(crate) pcpu_busy_ns: Vec<Ns>,
    /// Runnable vCPUs, oldest first.
    pub(crate) queue: VecDeque<VcpuId>,
    /// A directed-yield target reserved for a pCPU being vacated.
    pub(crate) reserved: Vec<Option<VcpuId>>,
    /// The last sample said "in the guest kernel".
    pub(crate) in_kernel: Vec<bool>,
    /// The last sample (or spin exit) said "spinning": a vCPU preempted in
    /// that state is a waiter, not the lock holder or laggard others wait for.
    pub(crate) spinning: Vec<bool>,
    /// Each VM's pCPUs `[lo, hi)` (the policy's `shares`).
    pub(crate) share: Vec<(PcpuId, PcpuId)>,
    /// Each vCPU's allowed pCPUs ([`Affinity`], set at run time).
    pub(crate) affinity: Vec<Affinity>,
    /// The driver called `start`: changes may place vCPUs.
    pub(crate) started: bool,
}

impl Core {
    pub(crate) fn new(
        vcpus_per_vm: &[u32],
        pcpus: usize,
        slice_ns: Ns,
        share: Vec<(PcpuId, PcpuId)>,
    ) -> Core {
        let vm_of: Vec<usize> = vcpus_per_vm
            .iter()
            .enumerate()
            .flat_map(|(vm, &n)| std::iter::repeat_n(vm, n as usize))
            .collect();
        let n = vm_of.len();
        Core {
            slice_ns,
            vm_of,
            vm_vcpus: vcpus_per_vm.to_vec(),
            states: vec![VcpuState::Runnable { since: 0 }; n],
            stats: vec![VcpuStats::default(); n],
            occupant: vec![None; pcpus],
            pcpu_busy_ns: vec![0; pcpus],
            queue: (0..n).collect(),
            reserved: vec![None; pcpus],
            in_kernel: vec![false; n],
            spinning: vec![false; n],
            share,
            affinity: vec![Affinity::Any; n],
            started: false,
        }
    }

    pub fn slice_ns(&self) -> Ns {
        self.slice_ns
    }
    pub fn vcpus(&self) -> usize {
        self.vm_of.len()
    }
    pub fn pcpus(&self) -> usize {
        self.occupant.len()
    }
    pub fn vms(&self) -> usize {
        self.vm_vcpus.len()
    }
    pub fn vm_of(&self, vcpu: VcpuId) -> usize {
        self.vm_of[vcpu]
    }
    /// VM `vm`'s vCPU count.
    pub fn vm_vcpus(&self, vm: usize) -> u32 {
        self.vm_vcpus[vm]
    }
    pub fn state(&self, vcpu: VcpuId) -> VcpuState {
        self.states[vcpu]
    }
    pub fn occupant(&self, pcpu: PcpuId) -> Option<VcpuId> {
        self.occupant[pcpu]
    }
    /// The last sample of `vcpu` found it in the guest kernel.
    pub fn in_kernel(&self, vcpu: VcpuId) -> bool {
        self.in_kernel[vcpu]
    }
    /// The last sample (or hardware spin exit) of `vcpu` found it spinning.
    pub fn was_spinning(&self, vcpu: VcpuId) -> bool {
        self.spinning[vcpu]
    }
    /// `vcpu`'s counts so far (its run time: how far its work got).
    pub fn stats(&self, vcpu: VcpuId) -> &VcpuStats {
        &self.stats[vcpu]
    }
    /// Runnable vCPUs, the one waiting longest first.
    pub fn queue(&self) -> impl Iterator<Item = VcpuId> + '_ {
        self.queue.iter().copied()
    }
    /// Whether `vcpu`'s affinity lets it use `pcpu` (not its VM's share).
    pub fn affinity_allows(&self, vcpu: VcpuId, pcpu: PcpuId) -> bool {
        self.affinity[vcpu].allows(pcpu)
    }

    /// Whether VM `vm` may run on `pcpu` (its share).
    pub fn allowed(&self, vm: usize, pcpu: PcpuId) -> bool {
        let (lo, hi) = self.share[vm];
        (lo..hi).contains(&pcpu)
    }

    /// Whether runnable `vcpu` may take `pcpu`: its VM's share and its
    /// affinity. (Under gang any VM may wait for any pCPU; whether it gets
    /// one now is the turn's business.)
    pub fn eligible(&self, vcpu: VcpuId, pcpu: PcpuId) -> bool {
        self.allowed(self.vm_of[vcpu], pcpu) && self.affinity[vcpu].allows(pcpu)
    }

    /// Whether a runnable vCPU could use `pcpu` were it free.
    pub fn someone_waits_for(&self, pcpu: PcpuId) -> bool {
        self.queue.iter().any(|&v| self.eligible(v, pcpu))
    }

    /// The pCPU `vcpu` runs on, unless it is not running or already being
    /// preempted (then samples, spin exits and affinity changes leave it be).
    pub fn settled_pcpu(&self, vcpu: VcpuId) -> Option<PcpuId> {
        match self.states[vcpu] {
            VcpuState::Running {
                pcpu,
                preempting: None,
                ..
            } => Some(pcpu),
            _ => None,
        }
    }

    /// How long running `vcpu` has run at `now` (0 if it does not run).
    pub fn ran(&self, vcpu: VcpuId, now: Ns) -> Ns {
        match self.states[vcpu] {
            VcpuState::Running { since, .. } => now.saturating_sub(since),
            _ => 0,
        }
    }

    /// The per-vCPU slice: running `vcpu`'s slice is over at `now` and
    /// someone waits for its pCPU.
    pub fn slice_over(&self, vcpu: VcpuId, now: Ns) -> SliceEnd {
        match self.states[vcpu] {
            VcpuState::Running { since, .. } => {
                self.slice_over_at(vcpu, now, since.saturating_add(self.slice_ns))
            }
            _ => SliceEnd::Keep,
        }
    }

    /// As [`Core::slice_over`], for a slice that ends at `deadline`.
    pub fn slice_over_at(&self, vcpu: VcpuId, now: Ns, deadline: Ns) -> SliceEnd {
        let VcpuState::Running {
            pcpu,
            preempting: None,
            ..
        } = self.states[vcpu]
        else {
            return SliceEnd::Keep;
        };
        if now < deadline || !self.someone_waits_for(pcpu) {
            SliceEnd::Keep
        } else {
            SliceEnd::Preempt
        }
    }

    /// Whether runnable `vcpu` is already promised a pCPU being vacated.
    pub fn is_reserved(&self, vcpu: VcpuId) -> bool {
        self.reserved.contains(&Some(vcpu))
    }

    /// Running `vcpu` spun: it yields `pcpu` to a preempted sibling that may
    /// use it (the likely lock holder or barrier partner, reserved so nobody
    /// else takes the pCPU), else to whoever waits for it.
    pub fn directed_yield(&mut self, vcpu: VcpuId, pcpu: PcpuId, actions: &mut Vec<Action>) {
        if let Some(target) = self.yield_target(vcpu, pcpu) {
            self.reserved[pcpu] = Some(target);
            self.stats[target].yields_received += 1;
            self.preempt(vcpu, PreemptCause::Spin, actions);
        } else if self.someone_waits_for(pcpu) {
            self.preempt(vcpu, PreemptCause::Spin, actions);
        }
    }

    /// Running `vcpu` spun: it yields `pcpu` to runnable `target`, reserved
    /// so nobody else takes the pCPU.
    pub fn yield_to(
        &mut self,
        vcpu: VcpuId,
        pcpu: PcpuId,
        target: VcpuId,
        actions: &mut Vec<Action>,
    ) {
        self.reserved[pcpu] = Some(target);
        self.stats[target].yields_received += 1;
        self.preempt(vcpu, PreemptCause::Spin, actions);
    }

    /// Runnable `target` takes `pcpu` from running `victim` (of another VM),
    /// reserved so nobody else takes it: a spinner's directed swap, which
    /// keeps the spinner on its own pCPU.
    pub fn swap_in(
        &mut self,
        target: VcpuId,
        pcpu: PcpuId,
        victim: VcpuId,
        actions: &mut Vec<Action>,
    ) {
        self.reserved[pcpu] = Some(target);
        self.stats[target].yields_received += 1;
        self.preempt(victim, PreemptCause::Swap, actions);
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

    /// Fill every free pCPU with the vCPU reserved for it, else the oldest
    /// runnable vCPU that may use it.
    pub fn fill_free_pcpus(&mut self, now: Ns, actions: &mut Vec<Action>) {
        self.fill(now, actions, None);
    }

    /// As [`Core::fill_free_pcpus`], but a runnable vCPU for which `first`
    /// holds goes before the others (still oldest first among each).
    pub fn fill_free_pcpus_preferring(
        &mut self,
        now: Ns,
        actions: &mut Vec<Action>,
        first: impl Fn(VcpuId) -> bool,
    ) {
        self.fill(now, actions, Some(&first));
    }

    fn fill(&mut self, now: Ns, actions: &mut Vec<Action>, first: Option<&dyn Fn(VcpuId) -> bool>) {
        for pcpu in 0..self.pcpus() {
            if self.occupant[pcpu].is_some() {
                continue;
            }
            let reserved = self.reserved[pcpu].take().filter(|&v| {
                matches!(self.states[v], VcpuState::Runnable { .. }) && self.eligible(v, pcpu)
            });
            let next = reserved
                .or_else(|| {
                    let first = first?;
                    self.queue
                        .iter()
                        .copied()
                        .find(|&v| first(v) && self.eligible(v, pcpu))
                })
                .or_else(|| self.queue.iter().copied().find(|&v| self.eligible(v, pcpu)));
            if let Some(v) = next {
                self.grant(v, pcpu, now, actions);
            }
        }
    }

    /// Runnable `vcpu` takes free `pcpu`.
    pub fn grant(&mut self, vcpu: VcpuId, pcpu: PcpuId, now: Ns, actions: &mut Vec<Action>) {
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

    /// Ask running `vcpu` to leave its pCPU (the first phase: it keeps the
    /// pCPU until its driver reports it stopped).
    pub fn preempt(&mut self, vcpu: VcpuId, cause: PreemptCause, actions: &mut Vec<Action>) {
        if let VcpuState::Running { preempting, .. } = &mut self.states[vcpu] {
            *preempting = Some(cause);
            self.stats[vcpu].preemptions += 1;
            actions.push(Action::Preempt { vcpu });
        }
    }

    /// `vcpu` leaves `pcpu`, where it ran since `since`.
    pub(crate) fn leave(&mut self, vcpu: VcpuId, pcpu: PcpuId, since: Ns, now: Ns) {
        let ran = now.saturating_sub(since);
        self.stats[vcpu].run_ns += ran;
        self.pcpu_busy_ns[pcpu] += ran;
        self.occupant[pcpu] = None;
    }
}
