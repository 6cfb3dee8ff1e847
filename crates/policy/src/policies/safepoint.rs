//! `+safepoint:GRACE`, a wrapper around any user-level policy (Uhlig et al.,
//! Wells et al. §5.1): a vCPU whose slice ended while it was in the guest
//! kernel (maybe holding a kernel lock) keeps running until a sample finds
//! it back in user mode, at most GRACE longer. Policies that end no single
//! vCPU's slice (gang's turns) are unchanged. Every other hook is the
//! wrapped policy's.

use crate::shared::{Core, SliceEnd};
use crate::{Action, Ns, PcpuId, Policy, VcpuId};

#[derive(Debug, Clone)]
pub struct SafePoint {
    pub(crate) inner: Box<dyn Policy>,
    pub(crate) grace_ns: Ns,
}

impl Policy for SafePoint {
    fn shares(&self, vcpus_per_vm: &[u32], pcpus: usize) -> Vec<(PcpuId, PcpuId)> {
        self.inner.shares(vcpus_per_vm, pcpus)
    }

    fn dispatch(&mut self, core: &mut Core, now: Ns, actions: &mut Vec<Action>) {
        self.inner.dispatch(core, now, actions);
    }

    fn slice_deadline(&self, core: &Core, vcpu: VcpuId, since: Ns) -> Option<Ns> {
        let end = self.inner.slice_deadline(core, vcpu, since)?;
        Some(if core.in_kernel(vcpu) {
            end + self.grace_ns
        } else {
            end
        })
    }

    fn slice_end(&self, core: &Core, vcpu: VcpuId, now: Ns) -> SliceEnd {
        match self.inner.slice_end(core, vcpu, now) {
            SliceEnd::Preempt
                if core.in_kernel(vcpu)
                    && core.ran(vcpu, now) < core.slice_ns() + self.grace_ns =>
            {
                SliceEnd::Defer
            }
            end => end,
        }
    }

    fn turn_deadline(&self, core: &Core) -> Option<Ns> {
        self.inner.turn_deadline(core)
    }

    fn turn_over(&self, core: &Core, now: Ns) -> bool {
        self.inner.turn_over(core, now)
    }

    fn end_turn(&mut self, core: &mut Core, now: Ns, actions: &mut Vec<Action>) {
        self.inner.end_turn(core, now, actions);
    }

    fn on_spinning(
        &mut self,
        core: &mut Core,
        vcpu: VcpuId,
        pcpu: PcpuId,
        actions: &mut Vec<Action>,
    ) {
        self.inner.on_spinning(core, vcpu, pcpu, actions);
    }

    fn acts_on_spin_samples(&self) -> bool {
        self.inner.acts_on_spin_samples()
    }

    fn spin_sample_can_act(&self, core: &Core, vcpu: VcpuId) -> bool {
        self.inner.spin_sample_can_act(core, vcpu)
    }

    fn on_spin_exit(
        &mut self,
        core: &mut Core,
        vcpu: VcpuId,
        pcpu: PcpuId,
        actions: &mut Vec<Action>,
    ) {
        self.inner.on_spin_exit(core, vcpu, pcpu, actions);
    }

    fn yields_when_halted(&self) -> bool {
        self.inner.yields_when_halted()
    }

    fn vm_finished(&mut self, vm: usize) {
        self.inner.vm_finished(vm);
    }
}
