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
//! - Shared writes: a write walk of a shared buffer pays, per line it
//!   writes, `cache.shared_write_ns_per_line` while another running vCPU of
//!   the same VM (or core of the bare-metal reference) has a current thread
//!   whose program writes that buffer. Touches start at offset 0, so
//!   co-writers walk the same lines; one running the same loop walks each
//!   line once between two of this thread's walks, so the line was last
//!   written by another core: a cache-to-cache transfer of a modified line,
//!   overlapped with the walk's other misses. Whether a co-writer runs is one
//!   counter per VM and write slot (`Vm::writers_running`), kept by
//!   [`Sim::note_writer`] at every change of a running vCPU's current thread
//!   and at every dispatch and departure; the walk reads it when its segment
//!   is fused, and segments holding such walks are cut short
//!   (`guest.rs`, `SHARED_WRITE_FUSE_MAX_NS`) so the charge follows
//!   co-writers that start or stop; only for the VM's
//!   `Vm::contended_slots` (two writer threads, two vCPUs), the others
//!   never pay.

use super::{HostState, Sim, NONE};

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
                Some(t) => t,
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

    /// Thread `t` (or NONE) starts (`up`) or stops being the current thread
    /// of a running vCPU: count it among the running writers of the shared
    /// buffers it writes. O(write slots of the thread), usually none.
    #[inline]
    pub(super) fn note_writer(&mut self, t: u32, up: bool) {
        if t == NONE {
            return;
        }
        let th = &self.threads[t as usize];
        let mut mask = th.write_mask;
        if mask == 0 {
            return;
        }
        let counts = &mut self.vms[th.vm as usize].writers_running;
        while mask != 0 {
            let slot = mask.trailing_zeros() as usize;
            if up {
                counts[slot] += 1;
            } else {
                counts[slot] -= 1;
            }
            mask &= mask - 1;
        }
    }

    /// Make `t` (or NONE) the current thread of vCPU `v`, keeping the
    /// running-writer counts when `v` runs on a pCPU.
    #[inline]
    pub(super) fn set_cur(&mut self, v: u32, t: u32) {
        let vc = &mut self.vcpus[v as usize];
        let old = std::mem::replace(&mut vc.cur, t);
        if vc.host == HostState::Running && old != t {
            self.note_writer(old, false);
            self.note_writer(t, true);
        }
    }

    /// What a write walk of write slot `slot` by the current thread of a
    /// running vCPU of VM `vm` pays for line transfers: `transfer_ns` if a
    /// co-writer's vCPU runs too (the walker itself counts as one), else 0.
    #[inline]
    pub(super) fn shared_write_cost(&self, vm: usize, slot: u8, transfer_ns: u32) -> u64 {
        match self.vms[vm].writers_running.get(slot as usize) {
            Some(&n) if n > 1 => u64::from(transfer_ns),
            _ => 0,
        }
    }
}
