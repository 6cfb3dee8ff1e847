//! Software prefetch of the state the next event will touch.
//!
//! At the 1024-pCPU scale point the model's state (4096 vCPUs, their threads
//! and accounting) is far larger than the L1 data cache, so an event's first
//! read of its vCPU is usually a miss, and it stalls the handler. While one
//! event is handled the next one is known (the queue's current bucket is
//! sorted), so the loop asks for its vCPU's hot lines ahead of time. A hint
//! only: nothing the simulation computes depends on it.

use super::Sim;
use crate::events::Kind;

/// Ask for the cache line holding `p` (a hint: it never faults and changes
/// no program state).
#[inline(always)]
fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` only hints the cache; it does not access memory
    // architecturally, cannot fault even on an invalid address, and SSE (its
    // target feature) is part of the x86_64 baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// vCPU state beyond which prefetching pays: twice the L1 data cache of
/// current x86 cores (32-48 KiB). Below it the vCPUs stay cached and the
/// prefetch is pure overhead (about 25 instructions per event, +4% on the
/// 32-vCPU bench model); at the 1024-pCPU scale point (4096 vCPUs, 1.3 MB)
/// it saved 5% of CPU time (median of 12 interleaved runs, 14% on the
/// minimum).
const PREFETCH_MIN_VCPU_BYTES: usize = 96 << 10;

impl Sim {
    /// Whether the event loop should prefetch (see `PREFETCH_MIN_VCPU_BYTES`).
    pub(super) fn prefetch_pays(&self) -> bool {
        self.vcpus.len() * std::mem::size_of::<super::Vcpu>() > PREFETCH_MIN_VCPU_BYTES
    }

    /// Prefetch what handling `kind` reads first: the vCPU's first two
    /// cache lines (generation, activity, accounting state), the pCPU, or
    /// the thread.
    #[inline]
    pub(super) fn prefetch_for(&self, kind: Kind) {
        match kind {
            Kind::Step { vcpu, .. } | Kind::Wake { vcpu } | Kind::Ipi { vcpu, .. } => {
                if let Some(vc) = self.vcpus.get(vcpu as usize) {
                    let p = (vc as *const super::Vcpu).cast::<u8>();
                    prefetch_line(p);
                    // `Vcpu` is 64-byte aligned and spans at least three lines.
                    prefetch_line(p.wrapping_add(64));
                }
            }
            Kind::Slice { pcpu, .. } | Kind::SdbFalse { pcpu, .. } => {
                if let Some(pc) = self.pcpus.get(pcpu as usize) {
                    prefetch_line((pc as *const super::Pcpu).cast::<u8>());
                }
            }
            Kind::Timer { thread } | Kind::WakeThread { thread, .. } => {
                if let Some(th) = self.threads.get(thread as usize) {
                    prefetch_line((th as *const super::Thread).cast::<u8>());
                }
            }
            _ => {}
        }
    }

    /// Prefetch, for the next event, what its vCPU, pCPU or thread points
    /// at: the vCPU's third line, accounting and vruntime, its current
    /// thread and the thread's accounting, its pCPU (or the pCPU's current
    /// vCPU, or the thread's vCPU). `prefetch_for` asked for the entity
    /// itself an event earlier, so reading its indices here rarely waits.
    /// On hosts of thousands of pCPUs these lines are in neither the L1 nor
    /// the L2 cache (the model's state is tens of MiB), and asking for them
    /// while the current event is handled overlaps the misses.
    #[inline]
    pub(super) fn prefetch_deep(&self, kind: Kind) {
        let vcpu = match kind {
            Kind::Step { vcpu, .. } | Kind::Wake { vcpu } | Kind::Ipi { vcpu, .. } => vcpu,
            Kind::Slice { pcpu, .. } | Kind::SdbFalse { pcpu, .. } => {
                match self.pcpus.get(pcpu as usize) {
                    Some(pc) => pc.cur,
                    None => return,
                }
            }
            Kind::Timer { thread } | Kind::WakeThread { thread, .. } => {
                if let Some(ta) = self.tacct.get(thread as usize) {
                    prefetch_line((ta as *const super::ThreadAcct).cast::<u8>());
                }
                match self.threads.get(thread as usize) {
                    Some(th) => th.vcpu,
                    None => return,
                }
            }
            _ => return,
        };
        let Some(vc) = self.vcpus.get(vcpu as usize) else {
            return;
        };
        let p = (vc as *const super::Vcpu).cast::<u8>();
        prefetch_line(p);
        prefetch_line(p.wrapping_add(64));
        prefetch_line(p.wrapping_add(128));
        if let Some(va) = self.vacct.get(vcpu as usize) {
            prefetch_line((va as *const super::VcpuAcct).cast::<u8>());
        }
        if let Some(vr) = self.vruntime.get(vcpu as usize) {
            prefetch_line((vr as *const u64).cast::<u8>());
        }
        if let Some(th) = self.threads.get(vc.cur as usize) {
            let t = (th as *const super::Thread).cast::<u8>();
            prefetch_line(t);
            prefetch_line(t.wrapping_add(64));
        }
        // The guest run queue's first link: where the guest scheduler
        // takes the next thread from.
        if let Some(link) = vc.rq.front().and_then(|t| self.rq_links.get(t as usize)) {
            prefetch_line((link as *const super::guest_rq::RqLink).cast::<u8>());
        }
        if let Some(ta) = self.tacct.get(vc.cur as usize) {
            let t = (ta as *const super::ThreadAcct).cast::<u8>();
            prefetch_line(t);
            // `seg_k`, the second half.
            prefetch_line(t.wrapping_add(std::mem::size_of::<super::ThreadAcct>() / 2));
        }
        if let Some(pc) = self.pcpus.get(vc.pcpu as usize) {
            prefetch_line((pc as *const super::Pcpu).cast::<u8>());
        }
    }
}
