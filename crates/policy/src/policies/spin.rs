//! `spin[:SLICE]`: the round robin plus spin-triggered preemption (Wells et
//! al. §5.2, the SDB's policy): a vCPU sampled spinning gives its pCPU to
//! the runnable sibling of its VM it most likely waits for, and keeps it
//! when there is none.
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
//! Samples are taken only while they can act: while some sibling of the
//! vCPU is preempted and may take its pCPU (Wells et al. §5.2: yielding
//! helps only when the awaited vCPU is descheduled; Ding & Shan §4 on
//! spinning while the partner is preempted). While a VM's vCPUs all run,
//! or the others halted, no sample is taken: each costs the vCPU an exit,
//! and a verdict then could do nothing. The detector's streak restarts
//! after such a gap, so a verdict never rests on a stale sample.

use crate::shared::Core;
use crate::{Action, PcpuId, Policy, PolicyError, VcpuId};

#[derive(Debug, Clone, Copy)]
pub struct Spin;

impl Spin {
    pub fn new(_vcpus_per_vm: &[u32], _pcpus: usize) -> Result<Spin, PolicyError> {
        Ok(Spin)
    }
}

/// The runnable sibling `vcpu` most likely waits for, if one may use `pcpu`.
pub fn awaited_sibling(core: &Core, vcpu: VcpuId, pcpu: PcpuId) -> Option<VcpuId> {
    let vm = core.vm_of(vcpu);
    core.queue()
        .filter(|&v| v != vcpu && core.vm_of(v) == vm && core.eligible(v, pcpu))
        .min_by_key(|&v| (core.was_spinning(v), core.stats(v).run_ns))
}

impl Policy for Spin {
    fn on_spinning(
        &mut self,
        core: &mut Core,
        vcpu: VcpuId,
        pcpu: PcpuId,
        actions: &mut Vec<Action>,
    ) {
        if let Some(target) = awaited_sibling(core, vcpu, pcpu) {
            core.yield_to(vcpu, pcpu, target, actions);
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
