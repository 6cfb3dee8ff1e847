//! `spin[:SLICE]`: the round robin plus spin-triggered preemption (Wells et
//! al. §5.2, the SDB's policy): a vCPU sampled spinning gets the runnable
//! sibling of its VM it most likely waits for onto a pCPU.
//!
//! The sibling it waits for: one that was preempted while working (its
//! last sample did not find it spinning: the likely lock holder, or the
//! thread a barrier waits for), before one preempted while it spun itself
//! (a fellow waiter); among those, the one that has run least (a barrier's
//! laggard); then the one waiting longest. When every sibling runs, the one
//! it waits for is running and the wait ends soon: giving the pCPU to
//! another VM would only make this vCPU miss the hand-off. The detector
//! calls a sample spinning only when it is sure (smplab-vmm's
//! `host::spin`), so a doubtful sample never preempts.
//!
//! **A directed swap before a directed yield.** Wells et al. give the
//! spinner's pCPU to the vCPU it waits for. When another VM's vCPU runs
//! alone on a second pCPU (its own siblings preempted: its VM gains nothing
//! from running it now), the awaited sibling takes that pCPU instead and
//! the spinner stays: its VM then runs both vCPUs together, and the spinner
//! sees the hand-off at once. The yield sends the spinner behind the other
//! VM's vCPUs; with a barrier in every phase its VM then runs one vCPU at a
//! time, each paying the detection latency at every barrier (measured with
//! `smplab host` on streamcluster: VMs ran both vCPUs together a fifth of
//! the time under `spin`, against more than half under the round robin,
//! docs/host.md). The swapped-in sibling's slice ends with the spinner's,
//! so the two leave together and the other VM's vCPUs come back together:
//! the swap forms co-running pairs where the round robin's slices drifted
//! apart. Only when no such pCPU exists does the spinner yield its own.
//!
//! **A freed pCPU goes to a running vCPU's sibling first.** When a pCPU
//! frees (a slice ends, a vCPU halts at a blocking barrier), a runnable
//! vCPU whose sibling runs takes it before the longest waiting one: its VM
//! then runs together instead of one vCPU of each VM running alone and
//! halting at the next barrier (each halt holding its pCPU until the
//! sampler sees it, 1–2 ms). The vCPU that just left (queued at this
//! instant) is no candidate, so a slice end still hands the pCPU over and
//! no VM keeps the host.
//!
//! Samples are taken only while they can act: while some sibling of the
//! vCPU is preempted and may take a pCPU (Wells et al. §5.2: yielding
//! helps only when the awaited vCPU is descheduled; Ding & Shan §4 on
//! spinning while the partner is preempted). While a VM's vCPUs all run,
//! or the others halted, no sample is taken: each costs the vCPU an exit,
//! and a verdict then could do nothing. The detector's streak restarts
//! after such a gap, so a verdict never rests on a stale sample.

use crate::shared::{Core, SliceEnd};
use crate::{Action, Ns, PcpuId, Policy, PolicyError, VcpuId, VcpuState};

#[derive(Debug, Clone)]
pub struct Spin {
    /// Per vCPU: the slice end it shares with the spinner it was swapped in
    /// beside.
    paired: Vec<Option<Paired>>,
}

/// A swapped-in vCPU's slice end, for the run that follows its swap only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Paired {
    /// When it was queued at the swap: a later run of it is not this one's
    /// (it starts at or after `deadline`, or was granted before the swap).
    queued_since: Ns,
    deadline: Ns,
}

impl Spin {
    pub fn new(vcpus_per_vm: &[u32], _pcpus: usize) -> Result<Spin, PolicyError> {
        let vcpus = vcpus_per_vm.iter().map(|&n| n as usize).sum();
        Ok(Spin {
            paired: vec![None; vcpus],
        })
    }

    /// Running `vcpu`'s slice end shared with a spinner, if it has one.
    fn paired_deadline(&self, core: &Core, vcpu: VcpuId) -> Option<Ns> {
        let paired = self.paired.get(vcpu).copied().flatten()?;
        match core.state(vcpu) {
            VcpuState::Running { since, .. }
                if since >= paired.queued_since && since < paired.deadline =>
            {
                Some(paired.deadline)
            }
            _ => None,
        }
    }
}

/// The runnable sibling `vcpu` most likely waits for, if one may use `pcpu`
/// and no pCPU is promised to it already.
pub fn awaited_sibling(core: &Core, vcpu: VcpuId, pcpu: PcpuId) -> Option<VcpuId> {
    let vm = core.vm_of(vcpu);
    core.queue()
        .filter(|&v| {
            v != vcpu && core.vm_of(v) == vm && core.eligible(v, pcpu) && !core.is_reserved(v)
        })
        .min_by_key(|&v| (core.was_spinning(v), core.stats(v).run_ns))
}

/// A pCPU other than `spinner`'s where `target` (its awaited sibling) may
/// run, and its occupant to displace: a settled vCPU of another VM that
/// runs without any sibling running (taking it splits no co-running VM).
/// One found spinning first, then the one that has run longest.
pub fn swap_victim(core: &Core, spinner: VcpuId, target: VcpuId) -> Option<(PcpuId, VcpuId)> {
    let vm = core.vm_of(spinner);
    let runs_alone = |o: VcpuId| {
        let ovm = core.vm_of(o);
        !(0..core.vcpus()).any(|w| {
            w != o && core.vm_of(w) == ovm && matches!(core.state(w), VcpuState::Running { .. })
        })
    };
    (0..core.pcpus())
        .filter_map(|q| {
            let o = core.occupant(q)?;
            let VcpuState::Running { since, .. } = core.state(o) else {
                return None;
            };
            (core.settled_pcpu(o) == Some(q)
                && core.vm_of(o) != vm
                && core.eligible(target, q)
                && runs_alone(o))
            .then_some((q, o, since))
        })
        .min_by_key(|&(_, o, since)| (!core.was_spinning(o), since))
        .map(|(q, o, _)| (q, o))
}

/// Whether runnable `vcpu`, queued before `now`, has a sibling settled on a
/// pCPU (running, not being preempted).
fn sibling_runs(core: &Core, vcpu: VcpuId, now: Ns) -> bool {
    let VcpuState::Runnable { since } = core.state(vcpu) else {
        return false;
    };
    let vm = core.vm_of(vcpu);
    since < now
        && (0..core.vcpus())
            .any(|w| w != vcpu && core.vm_of(w) == vm && core.settled_pcpu(w).is_some())
}

impl Policy for Spin {
    fn dispatch(&mut self, core: &mut Core, now: Ns, actions: &mut Vec<Action>) {
        let first: Vec<bool> = (0..core.vcpus())
            .map(|v| sibling_runs(core, v, now))
            .collect();
        core.fill_free_pcpus_preferring(now, actions, |v| first[v]);
    }

    fn slice_deadline(&self, core: &Core, vcpu: VcpuId, since: Ns) -> Option<Ns> {
        Some(
            self.paired_deadline(core, vcpu)
                .unwrap_or_else(|| since.saturating_add(core.slice_ns())),
        )
    }

    fn slice_end(&self, core: &Core, vcpu: VcpuId, now: Ns) -> SliceEnd {
        match self.paired_deadline(core, vcpu) {
            Some(deadline) => core.slice_over_at(vcpu, now, deadline),
            None => core.slice_over(vcpu, now),
        }
    }

    fn on_spinning(
        &mut self,
        core: &mut Core,
        vcpu: VcpuId,
        pcpu: PcpuId,
        actions: &mut Vec<Action>,
    ) {
        let Some(target) = awaited_sibling(core, vcpu, pcpu) else {
            return;
        };
        match swap_victim(core, vcpu, target) {
            Some((q, victim)) => {
                if let (VcpuState::Running { since, .. }, VcpuState::Runnable { since: queued }) =
                    (core.state(vcpu), core.state(target))
                {
                    self.paired[target] = Some(Paired {
                        queued_since: queued,
                        deadline: since.saturating_add(core.slice_ns()),
                    });
                }
                core.swap_in(target, q, victim, actions);
            }
            None => core.yield_to(vcpu, pcpu, target, actions),
        }
    }

    fn acts_on_spin_samples(&self) -> bool {
        true
    }

    fn spin_sample_can_act(&self, core: &Core, vcpu: VcpuId) -> bool {
        core.settled_pcpu(vcpu)
            .is_some_and(|pcpu| awaited_sibling(core, vcpu, pcpu).is_some())
    }
}
