//! The host's run-time actuators (Kulkarni & Kulkarni §2.2): a VM's vCPU affinity and
//! its guest's interrupt routing, changed while the VMs run — by Kulkarni & Kulkarni's
//! tuner (`smplab host` with `tune = true`) or any caller holding the
//! [`HostScheduler`].
//!
//! - vCPU affinity: under a user-level policy it is smplab-policy's
//!   ([`smplab_policy::Scheduler::set_vm_affinity`]): the next grant of each
//!   vCPU honours it, and a vCPU running where it may no longer run is
//!   preempted at once. Under `linux` the host kernel places the threads:
//!   they are re-pinned (`sched_setaffinity` on each vCPU thread), pinned =
//!   vCPU `i` on `cpus[i % n]`, floating = any of `cpus`.
//! - Interrupt routing: the guest's routing page ([`crate::irq_route`]).
//!   A vCPU list or `balanced` is written once; `running` (vBalance, seed
//!   001 ref. [10]) is kept up to date by the scheduler itself: after every
//!   grant or stop the mask is the VM's vCPUs holding a pCPU (unchanged
//!   while none does), so the interrupt after the next goes to a vCPU that
//!   was running a moment ago.

use super::{HostError, HostScheduler, Shared, State};
use crate::irq_route::{mask_of, IrqRoute};
use crate::placement::pin_thread;
use smplab_policy::tune::VcpuAffinity;
use smplab_policy::Affinity;
use smplab_record::config::IrqAffinity;

impl HostScheduler {
    fn check_vm(&self, vm: usize) -> Result<(), HostError> {
        let vms = self.shared.vcpus_per_vm.len();
        if vm < vms {
            Ok(())
        } else {
            Err(HostError::NoSuchVm { vm, vms })
        }
    }

    /// VM `vm`'s routing page handle (bound once its memory exists).
    pub fn irq_route(&self, vm: usize) -> Option<IrqRoute> {
        self.shared.routes.get(vm).cloned()
    }

    /// Bind VM `vm`'s routing page to its memory (`run_vm`, before its
    /// vCPUs run).
    pub(crate) fn bind_vm_memory(&self, vm: usize, memory: &vm_memory::GuestMemoryMmap) {
        if let (Some(route), Some(&vcpus)) =
            (self.shared.routes.get(vm), self.shared.vcpus_per_vm.get(vm))
        {
            route.bind(memory.clone(), vcpus);
        }
    }

    /// Route VM `vm`'s block-device interrupts per `affinity` from the
    /// interrupt after next on (see the module comment for `running`).
    pub fn set_irq_affinity(&self, vm: usize, affinity: &IrqAffinity) -> Result<(), HostError> {
        self.check_vm(vm)?;
        let vcpus = self.shared.vcpus_per_vm[vm];
        let mut st = self.shared.lock();
        if *affinity == IrqAffinity::Running {
            if st.policy.is_none() {
                return Err(HostError::RunningNeedsScheduler);
            }
            st.irq_running[vm] = true;
            st.irq_mask[vm] = 0;
            self.shared.route_to_running(&mut st);
            return Ok(());
        }
        let mask = mask_of(affinity, vcpus).ok_or_else(|| HostError::NoIrqTarget {
            affinity: affinity.to_string(),
            vm,
            last: vcpus.saturating_sub(1),
        })?;
        self.shared.routes[vm].set_mask(mask)?;
        st.irq_running[vm] = false;
        st.irq_mask[vm] = mask;
        Ok(())
    }

    /// Pin or float every vCPU of VM `vm` (see the module comment).
    pub fn set_vm_affinity(&self, vm: usize, affinity: VcpuAffinity) -> Result<(), HostError> {
        self.check_vm(vm)?;
        let n = self.shared.vcpus_per_vm[vm];
        let cpus = &self.shared.host_cpus;
        (0..n).try_for_each(|i| {
            let linux = match affinity {
                VcpuAffinity::Floating => cpus.clone(),
                VcpuAffinity::Pinned => vec![cpus[i as usize % cpus.len()]],
            };
            self.set_linux_cpus(vm, i, linux)
        })?;
        let mut st = self.shared.lock();
        let now = self.shared.now();
        if let Some(p) = st.policy.as_mut() {
            let actions = p.set_vm_affinity(vm, affinity, now)?;
            self.shared.apply(&mut st, actions, None);
        }
        Ok(())
    }

    /// Set the pCPUs vCPU `index` of VM `vm` may use: scheduler pCPU
    /// numbers, i.e. indices into the host's `cpus`.
    pub fn set_vcpu_affinity(
        &self,
        vm: usize,
        index: u32,
        affinity: Affinity,
    ) -> Result<(), HostError> {
        self.check_vm(vm)?;
        let vcpu = self.shared.vm_base[vm] + index as usize;
        let mut st = self.shared.lock();
        let now = self.shared.now();
        match st.policy.as_mut() {
            Some(p) => {
                let actions = p.set_affinity(vcpu, affinity, now)?;
                self.shared.apply(&mut st, actions, None);
                Ok(())
            }
            None => {
                drop(st);
                let cpus = &self.shared.host_cpus;
                let linux = match affinity {
                    Affinity::Any => cpus.clone(),
                    Affinity::Pcpus(set) => {
                        set.iter().filter_map(|&p| cpus.get(p).copied()).collect()
                    }
                };
                if linux.is_empty() || index >= self.shared.vcpus_per_vm[vm] {
                    return Err(smplab_policy::PolicyError::BadAffinity {
                        vcpu,
                        why: format!("names none of the host's {} pCPUs", cpus.len()),
                    }
                    .into());
                }
                self.set_linux_cpus(vm, index, linux)
            }
        }
    }

    /// The affinity vCPU `index` of VM `vm` has under the user-level policy
    /// (`Any` under `linux`).
    pub fn vcpu_affinity(&self, vm: usize, index: u32) -> Affinity {
        let vcpu = self.shared.vm_base.get(vm).copied().unwrap_or(0) + index as usize;
        let st = self.shared.lock();
        st.policy
            .as_ref()
            .map(|p| p.affinity(vcpu).clone())
            .unwrap_or_default()
    }

    /// Under `linux`: re-pin vCPU `index` of VM `vm` now if its thread runs,
    /// else when it attaches. Nothing under a user-level policy (which pins
    /// each thread to the pCPU it grants).
    fn set_linux_cpus(&self, vm: usize, index: u32, cpus: Vec<usize>) -> Result<(), HostError> {
        let vcpu = self.shared.vm_base[vm] + index as usize;
        let mut st = self.shared.lock();
        if st.policy.is_some() {
            return Ok(());
        }
        let Some(slot) = st.slots.get_mut(vcpu) else {
            return Ok(());
        };
        let tid = slot.tid;
        slot.linux_cpus = Some(cpus.clone());
        drop(st);
        match tid {
            Some(tid) => pin_thread(tid, &cpus).map_err(|source| HostError::Pin {
                vm,
                vcpu: index,
                cpus,
                source,
            }),
            None => Ok(()),
        }
    }
}

impl Shared {
    /// Point every `running` VM's routing at its vCPUs holding a pCPU now.
    pub(super) fn route_to_running(&self, st: &mut State) {
        for vm in 0..self.vcpus_per_vm.len() {
            if !st.irq_running[vm] || st.vm_done[vm] {
                continue;
            }
            let base = self.vm_base[vm];
            let n = (self.vcpus_per_vm[vm] as usize).min(64);
            let mask = (0..n)
                .filter(|&i| st.slots[base + i].granted.is_some() && !st.slots[base + i].preempt)
                .fold(0u64, |m, i| m | (1u64 << i));
            // Nobody runs: leave the last running set (0 would mean the
            // boot-time list). A VM not started yet has no page to write.
            if mask != 0 && mask != st.irq_mask[vm] && self.routes[vm].set_mask(mask).is_ok() {
                st.irq_mask[vm] = mask;
            }
        }
    }
}
