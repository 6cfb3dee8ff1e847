//! Exact time accounting (see `crate::breakdown` for the causes).
//!
//! Each vCPU is in exactly one accounting state at a time ([`Acct`]); moving
//! it to another state charges the interval since the last move. Two states
//! are composite, because the model pays several costs in one activity:
//!
//! - `Overhead`: the vCPU pays its pending costs (`VcpuAcct::ovh`, by cause,
//!   whose sum is the activity's length); elapsed time consumes them in cause
//!   order, so an interrupted overhead keeps exactly what is left.
//! - `Segment`: the thread runs a fused segment; its first part is the
//!   carried costs folded into it (`ThreadAcct::seg_k`, by cause), the rest is
//!   user work.
//!
//! Intervals in an on-pCPU state are charged to that pCPU as well; a pCPU's
//! remaining time is idle (`Pcpu::idle_ns`). A VM's vCPUs stop being charged
//! when the VM finishes, so their parts sum to `wall × vCPUs`.

use super::{Sim, NONE};
use crate::breakdown::{self as cause, CARRIED};

/// Accounting state of a vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acct {
    /// Not charged (before start, after the VM finished).
    Off,
    /// On a pCPU, paying `VcpuAcct::ovh`.
    Overhead,
    /// On a pCPU, running a segment of its current thread.
    Segment,
    /// On a pCPU, charged to one cause.
    On(u8),
    /// Off any pCPU, charged to one cause.
    Away(u8),
}

/// Pending costs by cause, with one bit per cause that may be non-zero:
/// charging visits only the pending causes (one to three of 17, usually)
/// instead of testing every cause, and moving parts adds only those.
/// Private to this module, so every write goes through `Parts::add`,
/// which keeps the bits a superset of the non-zero parts. The bits come
/// first (`repr(C)`), in the cache line of the first causes (`USER_SYNC`,
/// the most common carried cost): a charge touches one or two lines of the
/// array, not all five.
#[derive(Clone, Copy, Default)]
#[repr(C)]
pub(crate) struct Parts {
    live: u32,
    ns: [u64; CARRIED],
}

impl Parts {
    #[inline]
    fn add(&mut self, c: usize, ns: u64) {
        self.ns[c] += ns;
        self.live |= 1 << c;
    }

    /// Move every part into `into`, leaving these all zero. Only the live
    /// bits are visited (a zero part changes nothing), in place: no copy of
    /// the whole array.
    #[inline]
    fn drain_into(&mut self, into: &mut Parts) {
        let mut live = self.live;
        while live != 0 {
            let c = live.trailing_zeros() as usize;
            into.ns[c] += std::mem::take(&mut self.ns[c]);
            live &= live - 1;
        }
        into.live |= std::mem::take(&mut self.live);
    }

    fn is_zero(&self) -> bool {
        self.ns.iter().all(|&x| x == 0)
    }

    /// The cause being paid now: charging consumes the parts in cause
    /// order, so the first non-zero one (`None` when all are zero).
    fn current(&self) -> Option<usize> {
        let mut live = self.live;
        while live != 0 {
            let c = live.trailing_zeros() as usize;
            if self.ns[c] > 0 {
                return Some(c);
            }
            live &= live - 1;
        }
        None
    }
}

/// Accounting arrays of a vCPU, kept apart from `Vcpu` so the hot state
/// stays compact. Its time by cause is summed per VM (`Sim::vm_by_cause`):
/// nothing reads it per vCPU, and one array per VM stays in cache.
#[derive(Clone, Default)]
pub(crate) struct VcpuAcct {
    /// Pending overhead by cause; sums to `Vcpu::overhead_left` plus what is
    /// left of a current `Act::Overhead`.
    ovh: Parts,
}

/// Accounting arrays of a thread.
#[derive(Clone, Default)]
pub(crate) struct ThreadAcct {
    /// `Thread::carry` by cause.
    kcarry: Parts,
    /// Carried costs by cause at the start of the current segment, not yet charged.
    seg_k: Parts,
}

/// Charge `d` ns against the pending costs `parts` in cause order; what
/// exceeds them goes to `rest`. Calls `f(cause, ns)` per non-empty part.
/// Returns true when `parts` are all zero afterwards.
#[inline]
fn consume(parts: &mut Parts, mut d: u64, rest: usize, mut f: impl FnMut(usize, u64)) -> bool {
    let mut live = parts.live;
    while live != 0 && d > 0 {
        let c = live.trailing_zeros() as usize;
        let p = &mut parts.ns[c];
        if *p > 0 {
            let x = (*p).min(d);
            *p -= x;
            d -= x;
            f(c, x);
        }
        if *p == 0 {
            live &= live - 1;
        }
    }
    parts.live = live;
    if d > 0 {
        f(rest, d);
    }
    live == 0
}

impl Sim {
    /// Move vCPU `v`'s accounting into state `a` from now on.
    #[inline]
    pub fn set_acct(&mut self, v: u32, a: Acct) {
        self.charge_acct(v);
        let vc = &mut self.vcpus[v as usize];
        vc.acct = a;
        vc.acct_pcpu = if matches!(a, Acct::Away(_) | Acct::Off) {
            NONE
        } else {
            vc.pcpu
        };
        vc.acct_thread = vc.cur;
    }

    /// Charge the interval since the last accounting move (state unchanged).
    /// Inlined: most calls find nothing to charge (a second move at the
    /// same instant) and return before the call to `charge_interval`.
    #[inline]
    pub(super) fn charge_acct(&mut self, v: u32) {
        let now = self.now;
        let vc = &mut self.vcpus[v as usize];
        let d = now - vc.acct_since;
        if d != 0 {
            vc.acct_since = now;
            self.charge_interval(v, d);
        }
    }

    /// Charge `d` ns (> 0) of vCPU `v`'s current accounting state.
    #[inline(never)]
    fn charge_interval(&mut self, v: u32, d: u64) {
        let vc = &self.vcpus[v as usize];
        let vm = vc.vm as usize;
        let counted = !vc.acct_closed;
        let p = vc.acct_pcpu;
        let on_pcpu = p != NONE;
        if on_pcpu {
            // The parts below sum to `d`.
            self.pcpu_busy[p as usize] += d;
        }
        let va = &mut self.vacct[v as usize];
        let vm_parts = &mut self.vm_by_cause[vm];
        let pcpu_parts = &mut self.pcpu_by_cause;
        let mut add = |c: usize, x: u64| {
            if counted {
                vm_parts[c] += x;
            }
            if on_pcpu {
                pcpu_parts[c] += x;
            }
        };
        match vc.acct {
            Acct::Off => {}
            Acct::On(c) | Acct::Away(c) => add(c as usize, d),
            Acct::Overhead => {
                consume(&mut va.ovh, d, cause::UNATTRIBUTED, add);
            }
            Acct::Segment => {
                let t = vc.acct_thread;
                if t == NONE {
                    add(cause::UNATTRIBUTED, d);
                } else if !self.threads[t as usize].seg_k_live {
                    // Nothing carried: all user work, without touching the
                    // thread's (cold) cause arrays.
                    add(cause::USER, d);
                } else if consume(&mut self.tacct[t as usize].seg_k, d, cause::USER, add) {
                    self.threads[t as usize].seg_k_live = false;
                }
            }
        }
    }

    /// The cause vCPU `v`'s time is charged to at this instant (after
    /// charging the interval up to now); `None` off a pCPU or when nothing
    /// is pending (the rest of a segment is user work, of an overhead
    /// unattributed).
    pub(super) fn current_cause(&mut self, v: u32) -> Option<usize> {
        self.charge_acct(v);
        let vc = &self.vcpus[v as usize];
        match vc.acct {
            Acct::Off | Acct::Away(_) => None,
            Acct::On(c) => Some(c as usize),
            Acct::Overhead => self.vacct[v as usize].ovh.current(),
            Acct::Segment => {
                let t = vc.acct_thread;
                if t == NONE || !self.threads[t as usize].seg_k_live {
                    Some(cause::USER)
                } else {
                    Some(
                        self.tacct[t as usize]
                            .seg_k
                            .current()
                            .unwrap_or(cause::USER),
                    )
                }
            }
        }
    }

    /// Add a pending cost `ns` of cause `c` to the vCPU's overhead.
    #[inline]
    pub(super) fn add_overhead(&mut self, v: u32, c: usize, ns: u64) {
        self.vcpus[v as usize].overhead_left += ns;
        self.vacct[v as usize].ovh.add(c, ns);
    }

    /// Add `ns` of cause `c` to the vCPU's overhead by cause only: the
    /// caller adds the time itself (to `Vcpu::overhead_left` or to the end
    /// of a current `Act::Overhead`).
    #[inline]
    pub(super) fn add_overhead_part(&mut self, v: u32, c: usize, ns: u64) {
        self.vacct[v as usize].ovh.add(c, ns);
    }

    /// The vCPU's pending overhead of cause `c`.
    #[inline]
    pub(super) fn pending_overhead(&self, v: u32, c: usize) -> u64 {
        self.vacct[v as usize].ovh.ns[c]
    }

    /// Add a small cost `ns` of cause `c` to the thread's next segment.
    #[inline]
    pub(super) fn add_carry(&mut self, t: u32, c: usize, ns: u64) {
        self.threads[t as usize].carry += ns;
        self.tacct[t as usize].kcarry.add(c, ns);
    }

    /// The thread's carried costs become the current segment's (by cause;
    /// `Thread::carry` and `Thread::seg_left` are the caller's).
    #[inline]
    pub(super) fn carry_into_segment(&mut self, t: u32) {
        let ta = &mut self.tacct[t as usize];
        ta.kcarry.drain_into(&mut ta.seg_k);
    }

    /// The line transfers of the shared write walks fused into the segment
    /// being started (`guest.rs`): part of its time, charged to
    /// `cache_line_transfer` like the carried costs before its user work.
    #[inline]
    pub(super) fn transfers_into_segment(&mut self, t: u32, ns: u64) {
        self.tacct[t as usize]
            .seg_k
            .add(cause::CACHE_LINE_TRANSFER, ns);
        self.threads[t as usize].seg_k_live = true;
    }

    /// No carried cost by cause (`Thread::carry` is their sum).
    pub(super) fn carry_is_zero(&self, t: u32) -> bool {
        self.tacct[t as usize].kcarry.is_zero()
    }

    /// The vCPU's pending overhead by cause moves to thread `t`: into its
    /// current segment's carried costs (`segment`) or its next segment's.
    #[inline]
    pub(super) fn overhead_into_thread(&mut self, v: u32, t: u32, segment: bool) {
        let ta = &mut self.tacct[t as usize];
        let into = if segment {
            &mut ta.seg_k
        } else {
            &mut ta.kcarry
        };
        self.vacct[v as usize].ovh.drain_into(into);
    }

    /// The VM finished: charge its vCPUs up to now and stop charging them.
    pub(super) fn close_vm_acct(&mut self, vm: u32) {
        let (first, n) = (
            self.vms[vm as usize].first_vcpu,
            self.vms[vm as usize].n_vcpus,
        );
        for u in first..first + n {
            self.charge_acct(u);
            self.vcpus[u as usize].acct_closed = true;
        }
    }

    /// Mark pCPU `p` idle or busy for the accounting of its idle time.
    #[inline]
    pub(super) fn pcpu_idle_acct(&mut self, p: u32, idle: bool) {
        let now = self.now;
        let pc = &mut self.pcpus[p as usize];
        match (pc.idle_since, idle) {
            (u64::MAX, true) => pc.idle_since = now,
            (since, false) if since != u64::MAX => {
                pc.idle_ns += now - since;
                pc.idle_since = u64::MAX;
            }
            _ => {}
        }
    }

    /// Cause of the ipi-receive cost on this VM: an exit without APICv.
    pub(super) fn ipi_receive_cause(&self, vm: usize) -> usize {
        let c = &self.vms[vm].costs;
        if c.virtualized && !c.apicv {
            cause::EXIT_APIC_EOI
        } else {
            cause::KERNEL_IPI_HANDLER
        }
    }

    /// Cause of the ipi-send cost on this VM: an ICR-write exit in a VM.
    pub(super) fn ipi_send_cause(&self, vm: usize) -> usize {
        if self.vms[vm].costs.virtualized {
            cause::EXIT_APIC_ICR
        } else {
            cause::KERNEL_IPI_SEND
        }
    }
}
