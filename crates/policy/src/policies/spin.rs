//! `spin[:SLICE]`: the round robin plus spin-triggered preemption (Wells et al.
//! §5.2, the SDB's policy): a vCPU sampled spinning gives its pCPU to a
//! preempted sibling of its VM (a directed yield to the likely lock holder
//! or barrier partner), else to the next in line.

use crate::shared::Core;
use crate::{Action, PcpuId, Policy, PolicyError, VcpuId};

#[derive(Debug, Clone, Copy)]
pub struct Spin;

impl Spin {
    pub fn new(_vcpus_per_vm: &[u32], _pcpus: usize) -> Result<Spin, PolicyError> {
        Ok(Spin)
    }
}

impl Policy for Spin {
    fn on_spinning(&mut self, core: &mut Core, vcpu: VcpuId, pcpu: PcpuId, actions: &mut Vec<Action>) {
        core.directed_yield(vcpu, pcpu, actions);
    }

    fn acts_on_spin_samples(&self) -> bool {
        true
    }
}
