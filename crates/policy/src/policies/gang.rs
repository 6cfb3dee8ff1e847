//! `gang[:SLICE]`: a VM's vCPUs run together; VMs take turns a slice each.
//! A turn takes the VM of the oldest runnable vCPU, plus further VMs in
//! queue order as long as all their vCPUs fit on the pCPUs left (first fit,
//! so small VMs share a turn). A halted member keeps its pCPU idle while
//! its turn lasts, and no spin makes it yield: a gang stays together.

use crate::shared::{Core, SliceEnd};
use crate::{Action, Ns, PcpuId, Policy, PolicyError, PreemptCause, VcpuId, VcpuState};

#[derive(Debug, Clone)]
pub struct Gang {
    /// The VMs whose turn it is.
    on: Vec<bool>,
    /// When the current turn began (None: no turn).
    since: Option<Ns>,
    /// The current turn is over, its vCPUs are being preempted.
    ending: bool,
}

impl Gang {
    /// Refused when a VM has more vCPUs than there are pCPUs.
    pub fn new(vcpus_per_vm: &[u32], pcpus: usize) -> Result<Gang, PolicyError> {
        if let Some((vm, &vcpus)) = vcpus_per_vm
            .iter()
            .enumerate()
            .find(|(_, &n)| n as usize > pcpus)
        {
            return Err(PolicyError::GangTooLarge { vm, vcpus, pcpus });
        }
        Ok(Gang {
            on: vec![false; vcpus_per_vm.len()],
            since: None,
            ending: false,
        })
    }
}

impl Policy for Gang {
    /// While a VM whose turn it is still occupies a pCPU, only its own vCPUs
    /// (woken ones) get free pCPUs. Once all stopped or halted, a new turn.
    fn dispatch(&mut self, core: &mut Core, now: Ns, actions: &mut Vec<Action>) {
        let turn_on = (0..core.vcpus())
            .any(|v| self.on[core.vm_of(v)] && matches!(core.state(v), VcpuState::Running { .. }));
        if turn_on && self.ending {
            return;
        }
        if !turn_on {
            self.on.fill(false);
            self.since = None;
            self.ending = false;
            let mut room = core.pcpus();
            let queued: Vec<VcpuId> = core.queue().collect();
            for v in queued {
                let vm = core.vm_of(v);
                let need = core.vm_vcpus(vm) as usize;
                if !self.on[vm] && need <= room {
                    self.on[vm] = true;
                    room -= need;
                }
            }
            if self.on.contains(&true) {
                self.since = Some(now);
            }
        }
        let members: Vec<VcpuId> = core.queue().filter(|&v| self.on[core.vm_of(v)]).collect();
        let mut free: Vec<PcpuId> = (0..core.pcpus())
            .filter(|&p| core.occupant(p).is_none())
            .collect();
        // Each member takes the first free pCPU its affinity allows (with no
        // affinity set: member k gets the k-th free pCPU).
        for v in members {
            if let Some(i) = free.iter().position(|&p| core.affinity_allows(v, p)) {
                let p = free.remove(i);
                core.grant(v, p, now, actions);
            }
        }
    }

    fn slice_deadline(&self, _core: &Core, _vcpu: VcpuId, _since: Ns) -> Option<Ns> {
        None
    }

    fn slice_end(&self, _core: &Core, _vcpu: VcpuId, _now: Ns) -> SliceEnd {
        SliceEnd::Keep
    }

    fn turn_deadline(&self, core: &Core) -> Option<Ns> {
        self.since.map(|since| since + core.slice_ns())
    }

    fn turn_over(&self, core: &Core, now: Ns) -> bool {
        let Some(since) = self.since else {
            return false;
        };
        let others_wait = core.queue().any(|v| !self.on[core.vm_of(v)]);
        now.saturating_sub(since) >= core.slice_ns() && others_wait && !self.ending
    }

    fn end_turn(&mut self, core: &mut Core, _now: Ns, actions: &mut Vec<Action>) {
        self.ending = true;
        for v in 0..core.vcpus() {
            if self.on[core.vm_of(v)] && core.settled_pcpu(v).is_some() {
                core.preempt(v, PreemptCause::SliceEnd, actions);
            }
        }
    }

    fn on_spin_exit(&mut self, _core: &mut Core, _vcpu: VcpuId, _pcpu: PcpuId, _actions: &mut Vec<Action>) {}

    fn yields_when_halted(&self) -> bool {
        false
    }

    fn vm_finished(&mut self, vm: usize) {
        self.on[vm] = false;
        if !self.on.contains(&true) {
            self.since = None;
        }
    }
}
