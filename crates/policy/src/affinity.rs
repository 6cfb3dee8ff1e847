//! Per-vCPU affinity (Kulkarni & Kulkarni §2.2.2): the pCPUs a vCPU may run on, set at
//! run time by whoever tunes the host (Kulkarni & Kulkarni's tuner, `smplab host`'s
//! `tune = true`). Every policy honours it where it places a vCPU
//! (dispatch, directed yields, gang turns) and where it asks whether someone
//! waits for a pCPU, so a slice never ends for a vCPU that could not take
//! the pCPU. A change takes effect at once for a running vCPU that may no
//! longer stay where it is (it is preempted, [`PreemptCause::Affinity`]) and
//! at the next dispatch for the others. With every vCPU at
//! [`Affinity::Any`] (the start) the decisions are exactly those without
//! affinity.
//!
//! Under `partition` an affinity narrows the VM's share: it must name at
//! least one pCPU of the share, and "pinned" pins inside the share.

use crate::tune::VcpuAffinity;
use crate::{Action, Ns, PcpuId, PolicyError, PreemptCause, Scheduler, VcpuId};

/// The pCPUs one vCPU may run on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Affinity {
    /// Any pCPU the policy allows (floating).
    #[default]
    Any,
    /// Only these (scheduler pCPU numbers, not host CPU ids).
    Pcpus(Vec<PcpuId>),
}

impl Affinity {
    /// Whether a vCPU with this affinity may run on `pcpu`.
    pub fn allows(&self, pcpu: PcpuId) -> bool {
        match self {
            Affinity::Any => true,
            Affinity::Pcpus(set) => set.contains(&pcpu),
        }
    }
}

impl Scheduler {
    /// The affinity of `vcpu` (`Any` for a vCPU that does not exist).
    pub fn affinity(&self, vcpu: VcpuId) -> &Affinity {
        const ANY: &Affinity = &Affinity::Any;
        self.core.affinity.get(vcpu).unwrap_or(ANY)
    }

    /// Whether `vcpu` may run on `pcpu` now: its VM's share under
    /// `partition` and its affinity.
    pub fn may_run_on(&self, vcpu: VcpuId, pcpu: PcpuId) -> bool {
        vcpu < self.vcpus() && pcpu < self.pcpus() && self.core.eligible(vcpu, pcpu)
    }

    /// Set the affinity of `vcpu` at `now`. Returns the actions that carry it
    /// out: a preemption if it runs on a pCPU it may no longer use, runs on
    /// pCPUs it frees for a waiting vCPU (none before [`Scheduler::start`],
    /// which places vCPUs by their affinity). Refused (nothing changes) when
    /// the set is empty, names a pCPU that does not exist, or leaves the vCPU
    /// no pCPU of its VM's share.
    pub fn set_affinity(
        &mut self,
        vcpu: VcpuId,
        affinity: Affinity,
        now: Ns,
    ) -> Result<Vec<Action>, PolicyError> {
        self.check_affinity(vcpu, &affinity)?;
        let mut actions = Vec::new();
        self.core.affinity[vcpu] = affinity;
        self.enforce(vcpu, &mut actions);
        if self.core.started {
            self.dispatch(now, &mut actions);
        }
        Ok(actions)
    }

    /// Kulkarni & Kulkarni's two vCPU affinities for every vCPU of VM `vm`: pinned =
    /// its vCPU `i` on pCPU `lo + i mod (hi - lo)` of its share `[lo, hi)`
    /// (all pCPUs but under `partition`, so vCPU `i` of every VM shares pCPU
    /// `i mod n`), floating = anywhere.
    pub fn set_vm_affinity(
        &mut self,
        vm: usize,
        affinity: VcpuAffinity,
        now: Ns,
    ) -> Result<Vec<Action>, PolicyError> {
        let vms = self.core.vms();
        if vm >= vms {
            return Err(PolicyError::NoSuchVm { vm, vms });
        }
        let (lo, hi) = self.core.share[vm];
        let width = (hi - lo).max(1);
        let mut actions = Vec::new();
        let mine: Vec<VcpuId> = (0..self.vcpus()).filter(|&v| self.vm_of(v) == vm).collect();
        for (i, &v) in mine.iter().enumerate() {
            self.core.affinity[v] = match affinity {
                VcpuAffinity::Floating => Affinity::Any,
                VcpuAffinity::Pinned => Affinity::Pcpus(vec![lo + i % width]),
            };
        }
        for &v in &mine {
            self.enforce(v, &mut actions);
        }
        if self.core.started {
            self.dispatch(now, &mut actions);
        }
        Ok(actions)
    }

    fn check_affinity(&self, vcpu: VcpuId, affinity: &Affinity) -> Result<(), PolicyError> {
        let vcpus = self.vcpus();
        if vcpu >= vcpus {
            return Err(PolicyError::NoSuchVcpu { vcpu, vcpus });
        }
        let Affinity::Pcpus(set) = affinity else {
            return Ok(());
        };
        let bad = |why: String| Err(PolicyError::BadAffinity { vcpu, why });
        if set.is_empty() {
            return bad("names no pCPU (use Any for floating)".into());
        }
        if let Some(&p) = set.iter().find(|&&p| p >= self.pcpus()) {
            return bad(format!(
                "pCPU {p} does not exist: the scheduler has pCPUs 0-{}",
                self.pcpus() - 1
            ));
        }
        let vm = self.vm_of(vcpu);
        if !set.iter().any(|&p| self.allowed(vm, p)) {
            let (lo, hi) = self.share(vm);
            return bad(format!(
                "none of {set:?} is in VM {vm}'s partition share {lo}-{}",
                hi - 1
            ));
        }
        Ok(())
    }

    /// A running `vcpu` on a pCPU its affinity no longer allows leaves it.
    fn enforce(&mut self, vcpu: VcpuId, actions: &mut Vec<Action>) {
        if let Some(pcpu) = self.core.settled_pcpu(vcpu) {
            if !self.core.affinity[vcpu].allows(pcpu) {
                self.core.preempt(vcpu, PreemptCause::Affinity, actions);
            }
        }
    }
}
