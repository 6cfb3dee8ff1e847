//! `rrvm[:SLICE]`: round robin by VM. VMs take turns a slice each on all
//! pCPUs, without co-scheduling: during a VM's turn its runnable vCPUs go
//! first on every pCPU, and the pCPUs it leaves free go to the others (no
//! pCPU idles while someone waits). A turn ends after a slice if another VM
//! has a runnable vCPU, or at once when its VM has nothing to run; the next
//! VM in order with a runnable vCPU takes over, and vCPUs of other VMs give
//! up the pCPUs its waiting vCPUs may use. Inside a turn the VM's own vCPUs
//! take turns a slice each.

use crate::shared::{Core, SliceEnd};
use crate::{Action, Ns, Policy, PolicyError, PreemptCause, VcpuId, VcpuState};

#[derive(Debug, Clone)]
pub struct RoundRobinByVm {
    /// The VM whose turn it is, since when.
    turn: Option<(usize, Ns)>,
}

impl RoundRobinByVm {
    pub fn new(_vcpus_per_vm: &[u32], _pcpus: usize) -> Result<RoundRobinByVm, PolicyError> {
        Ok(RoundRobinByVm { turn: None })
    }

    fn turn_vm(&self) -> Option<usize> {
        self.turn.map(|(vm, _)| vm)
    }

    /// The first VM after `after` (in VM order, wrapping) with a runnable vCPU.
    fn next_vm(core: &Core, after: Option<usize>) -> Option<usize> {
        let vms = core.vms();
        let start = after.map_or(0, |vm| vm + 1);
        (0..vms)
            .map(|i| (start + i) % vms)
            .find(|&vm| core.queue().any(|v| core.vm_of(v) == vm))
    }

    /// Whether VM `vm` runs or wants to run a vCPU.
    fn busy(core: &Core, vm: usize) -> bool {
        (0..core.vcpus()).any(|v| {
            core.vm_of(v) == vm
                && matches!(
                    core.state(v),
                    VcpuState::Running { .. } | VcpuState::Runnable { .. }
                )
        })
    }
}

impl Policy for RoundRobinByVm {
    fn dispatch(&mut self, core: &mut Core, now: Ns, actions: &mut Vec<Action>) {
        if !self.turn_vm().is_some_and(|vm| Self::busy(core, vm)) {
            self.turn = Self::next_vm(core, self.turn_vm()).map(|vm| (vm, now));
        }
        let turn = self.turn_vm();
        let vm_of: Vec<usize> = (0..core.vcpus()).map(|v| core.vm_of(v)).collect();
        core.fill_free_pcpus_preferring(now, actions, |v| Some(vm_of[v]) == turn);
    }

    /// A vCPU of the VM whose turn it is yields at its slice end only to a
    /// sibling that no pCPU being vacated will take; any other vCPU to
    /// whoever waits.
    fn slice_end(&self, core: &Core, vcpu: VcpuId, now: Ns) -> SliceEnd {
        let end = core.slice_over(vcpu, now);
        let (Some(turn), SliceEnd::Preempt) = (self.turn_vm(), end) else {
            return end;
        };
        let Some(pcpu) = core.settled_pcpu(vcpu) else {
            return SliceEnd::Keep;
        };
        if core.vm_of(vcpu) != turn {
            return end;
        }
        let siblings_waiting = core
            .queue()
            .filter(|&v| core.vm_of(v) == turn && core.eligible(v, pcpu))
            .count();
        let vacating = (0..core.pcpus())
            .filter_map(|p| core.occupant(p))
            .filter(|&o| core.settled_pcpu(o).is_none())
            .count();
        if siblings_waiting > vacating {
            SliceEnd::Preempt
        } else {
            SliceEnd::Keep
        }
    }

    fn turn_deadline(&self, core: &Core) -> Option<Ns> {
        self.turn.map(|(_, since)| since + core.slice_ns())
    }

    fn turn_over(&self, core: &Core, now: Ns) -> bool {
        let Some((vm, since)) = self.turn else {
            return false;
        };
        now.saturating_sub(since) >= core.slice_ns() && core.queue().any(|v| core.vm_of(v) != vm)
    }

    fn end_turn(&mut self, core: &mut Core, now: Ns, actions: &mut Vec<Action>) {
        let Some(next) = Self::next_vm(core, self.turn_vm()) else {
            return;
        };
        self.turn = Some((next, now));
        // Each waiting vCPU of the new turn takes a pCPU from another VM's
        // settled vCPU, one each.
        let waiting: Vec<VcpuId> = core.queue().filter(|&v| core.vm_of(v) == next).collect();
        let mut taken = Vec::new();
        for w in waiting {
            let victim = (0..core.pcpus()).find(|&p| {
                !taken.contains(&p)
                    && core.eligible(w, p)
                    && core
                        .occupant(p)
                        .is_some_and(|o| core.vm_of(o) != next && core.settled_pcpu(o) == Some(p))
            });
            if let Some(p) = victim {
                taken.push(p);
                if let Some(o) = core.occupant(p) {
                    core.preempt(o, PreemptCause::SliceEnd, actions);
                }
            }
        }
    }

    fn vm_finished(&mut self, vm: usize) {
        if self.turn_vm() == Some(vm) {
            self.turn = None;
        }
    }
}
