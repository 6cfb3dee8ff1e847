//! The [`Policy`] trait: one scheduling policy's decisions over the
//! scheduler's [`Core`]. The [`Scheduler`](crate::Scheduler) takes the
//! driver's events, keeps the shared state in its core, and asks its policy
//! at each point where policies differ; every hook has the behaviour of the
//! plain round robin as its default.

use crate::shared::{Core, SliceEnd};
use crate::{Action, Ns, PcpuId, VcpuId};
use std::fmt;

/// One scheduling policy. Written in `crates/policy/src/policies/NAME.rs`
/// and named once in `smplab_record::for_each_host_policy!`; a wrapper (the
/// safe point) forwards every hook to the policy it wraps.
pub trait Policy: PolicyClone + fmt::Debug + Send {
    /// Each VM's pCPUs `[lo, hi)` (`vcpus_per_vm.len()` entries): all of
    /// them unless the policy partitions the host.
    fn shares(&self, vcpus_per_vm: &[u32], pcpus: usize) -> Vec<(PcpuId, PcpuId)> {
        vec![(0, pcpus); vcpus_per_vm.len()]
    }

    /// Fill the free pCPUs: by default the reserved directed-yield target,
    /// else the oldest runnable vCPU that may use each.
    fn dispatch(&mut self, core: &mut Core, now: Ns, actions: &mut Vec<Action>) {
        core.fill_free_pcpus(now, actions);
    }

    /// When running `vcpu`'s slice, begun at `since`, ends; `None` if this
    /// policy ends no single vCPU's slice (its turns end them).
    fn slice_deadline(&self, core: &Core, vcpu: VcpuId, since: Ns) -> Option<Ns> {
        let _ = vcpu;
        Some(since + core.slice_ns())
    }

    /// What a tick at `now` does to running `vcpu`.
    fn slice_end(&self, core: &Core, vcpu: VcpuId, now: Ns) -> SliceEnd {
        core.slice_over(vcpu, now)
    }

    /// When the current turn (of a policy that runs VMs in turns) ends.
    fn turn_deadline(&self, core: &Core) -> Option<Ns> {
        let _ = core;
        None
    }

    /// Whether a tick at `now` ends the current turn.
    fn turn_over(&self, core: &Core, now: Ns) -> bool {
        let _ = (core, now);
        false
    }

    /// End the current turn (called when [`Policy::turn_over`] holds).
    fn end_turn(&mut self, core: &mut Core, now: Ns, actions: &mut Vec<Action>) {
        let _ = (core, now, actions);
    }

    /// A sample found running `vcpu` (on `pcpu`) spinning.
    fn on_spinning(
        &mut self,
        core: &mut Core,
        vcpu: VcpuId,
        pcpu: PcpuId,
        actions: &mut Vec<Action>,
    ) {
        let _ = (core, vcpu, pcpu, actions);
    }

    /// Whether this policy acts on samples that find a vCPU spinning (its
    /// driver then runs a software spin detector).
    fn acts_on_spin_samples(&self) -> bool {
        false
    }

    /// Whether a spin sample of running `vcpu` now could lead to an action.
    /// A driver skips the others' samples (each is an exit: Wells et al.
    /// §5.2 count the SDB's exits as its cost) and restarts their detector's
    /// streak, so a verdict never rests on a sample from before the gap.
    /// Only asked of a policy that [`Policy::acts_on_spin_samples`].
    fn spin_sample_can_act(&self, core: &Core, vcpu: VcpuId) -> bool {
        let _ = (core, vcpu);
        true
    }

    /// A hardware spin detector (PLE, the SDB) made running `vcpu` exit: a
    /// directed yield, as KVM's `kvm_vcpu_on_spin` does.
    fn on_spin_exit(
        &mut self,
        core: &mut Core,
        vcpu: VcpuId,
        pcpu: PcpuId,
        actions: &mut Vec<Action>,
    ) {
        core.directed_yield(vcpu, pcpu, actions);
    }

    /// Whether a vCPU sampled halted gives its pCPU to a waiting vCPU.
    fn yields_when_halted(&self) -> bool {
        true
    }

    /// VM `vm` finished: forget it.
    fn vm_finished(&mut self, vm: usize) {
        let _ = vm;
    }
}

/// A boxed policy's copy (a [`Scheduler`](crate::Scheduler) is `Clone`):
/// every `Clone` policy has it.
pub trait PolicyClone {
    fn clone_box(&self) -> Box<dyn Policy>;
}

impl<T: Policy + Clone + 'static> PolicyClone for T {
    fn clone_box(&self) -> Box<dyn Policy> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn Policy> {
    fn clone(&self) -> Box<dyn Policy> {
        self.clone_box()
    }
}
