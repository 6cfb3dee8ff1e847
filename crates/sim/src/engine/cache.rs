//! First-order cache model.
//!
//! - Warm-up: a vCPU dispatched on a pCPU where something else ran since
//!   pays for refilling its thread's footprint (capped at the private cache):
//!   from the LLC if it ran in the same LLC domain before, from memory or a
//!   remote LLC otherwise. Private and shared-buffer lines alike: threads of
//!   the built-in profiles mostly walk their own part of a shared buffer, so a
//!   sibling that ran on the pCPU in between does not leave them warm.
//! - Remote sharing: a walk of a shared buffer costs `1 + remote_share_factor
//!   × (fraction of the VM's other running vCPUs that run in another LLC
//!   domain)` times its base cost.

use super::{Sim, NONE};

impl Sim {
    pub(super) fn warmup_cost(&self, v: u32, p: u32) -> u64 {
        let vc = &self.vcpus[v as usize];
        let vm = vc.vm;
        if !self.vms[vm as usize].costs.virtualized {
            return 0;
        }
        let pc = &self.pcpus[p as usize];
        if pc.last_vcpu == v {
            return 0;
        }
        let t = if vc.cur != NONE {
            vc.cur
        } else {
            match vc.rq.front() {
                Some(&t) => t,
                None => return 0,
            }
        };
        let th = &self.threads[t as usize];
        let lines = th.private_lines + th.shared_lines;
        let c = &self.platform.cache;
        let per_line =
            if vc.last_pcpu == NONE || self.pcpus[vc.last_pcpu as usize].domain == pc.domain {
                c.refill_llc_ns_per_line
            } else {
                c.refill_remote_ns_per_line
            };
        crate::units_from_f64(lines as f64 * per_line)
    }

    pub(super) fn shared_cost(&self, v: u32, ns: u64) -> u64 {
        let vc = &self.vcpus[v as usize];
        let vm = &self.vms[vc.vm as usize];
        if vm.running <= 1 || vc.pcpu == NONE {
            return ns;
        }
        let d = self.pcpus[vc.pcpu as usize].domain as usize;
        let partners = (vm.running - 1) as f64;
        let remote = (vm.running - vm.running_per_domain[d]) as f64;
        let f = 1.0 + self.platform.cache.remote_share_factor * remote / partners;
        crate::units_from_f64(ns as f64 * f)
    }
}
