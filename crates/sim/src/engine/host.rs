//! Host scheduling of vCPUs on pCPUs.
//!
//! - Proportional fair share, CFS-like: each pCPU runs the queued vCPU with
//!   the least vruntime for a time slice (equal weights, so every runnable
//!   vCPU gets an equal share); a vCPU moving between pCPUs keeps its lag
//!   against the pCPUs' monotonic `min_vr`. A waking vCPU goes to its last
//!   pCPU if idle, else to any idle pCPU it may use (the idle bitmap makes
//!   this O(pCPUs/64)), else to the least loaded pCPU of its LLC domain. A
//!   pCPU that goes idle steals a queued vCPU allowed on it, looking at its
//!   own LLC domain first. Each scheduling domain (core, LLC, host) is
//!   balanced periodically by PELT-like load, as Linux's load_balance.
//! - Affinity restricts a vCPU to a contiguous pCPU range (one pCPU when pinned).
//!
//! This is the model of the host kernel (`linux`, `fair`). The user-level
//! policies (gang, partition, spin, safe points) are smplab-policy's
//! decisions, driven by `policy_host.rs`; the hooks below hand over to it.

use super::{Acct, Act, HostState, Sim, NONE};
use crate::breakdown as cause;
use crate::events::Kind;

impl Sim {
    /// Every vCPU starts runnable at time 0 (the workload's threads start together).
    pub(super) fn start(&mut self) {
        if self.phost.is_some() {
            self.policy_start();
            return;
        }
        for v in 0..u32::try_from(self.vcpus.len()).unwrap_or(u32::MAX) {
            self.make_ready(v);
        }
        if self.pcpus.len() > 1 {
            let spans = self.domain_spans();
            self.balance_failed = vec![0; spans.len() * self.pcpus.len()];
            for (level, &span) in (0u32..).zip(spans.iter()) {
                let every = self.balance_interval(span);
                self.push(every, Kind::Balance { level });
            }
        }
    }

    #[inline]
    pub(super) fn set_bit_idle(&mut self, p: u32, idle: bool) {
        self.pcpu_idle_acct(p, idle);
        self.idle_bits.assign(p, idle);
    }

    /// After a change of `p`'s run queue: its busy bit and its load.
    #[inline]
    pub(super) fn set_bit_busy_rq(&mut self, p: u32) {
        let busy = !self.pcpus[p as usize].rq.is_empty();
        self.busy_rq_bits.assign(p, busy);
        self.note_pcpu_load(p);
    }

    /// After a change of `p`'s run queue or current vCPU: `Sim::pcpu_load`.
    #[inline]
    pub(super) fn note_pcpu_load(&mut self, p: u32) {
        let pc = &self.pcpus[p as usize];
        // A run queue holds at most the vCPUs, fewer than 2^32.
        let load = u32::try_from(pc.rq.len()).unwrap_or(u32::MAX) + u32::from(pc.cur != NONE);
        self.pcpu_load[p as usize] = load;
    }

    /// A vCPU that was halted (or parked) becomes runnable.
    pub(super) fn make_ready(&mut self, v: u32) {
        if self.phost.is_some() {
            self.policy_make_ready(v);
            return;
        }
        self.update_load(v, false);
        let p = self.choose_pcpu(v);
        if self.pcpus[p as usize].cur == NONE {
            self.dispatch(p, v);
        } else {
            self.enqueue(p, v);
        }
    }

    fn choose_pcpu(&self, v: u32) -> u32 {
        let vc = &self.vcpus[v as usize];
        let (lo, hi, last) = (vc.lo, vc.hi, vc.last_pcpu);
        let in_range = last != NONE && last >= lo && last < hi;
        if in_range && self.pcpus[last as usize].cur == NONE {
            return last;
        }
        // Idle pCPU, nearest (same LLC domain first) to where it ran last.
        let from = if in_range {
            // `last / per_llc * per_llc`, without the division.
            self.pcpus[last as usize].domain * self.per_llc
        } else {
            lo + (vc.index % (hi - lo))
        };
        if let Some(p) = self.idle_bits.find(lo, hi, from) {
            return p;
        }
        // No idle pCPU: the shortest run queue in the LLC domain it last ran
        // in (CFS-like wake balancing; bounded to one domain so huge hosts
        // stay cheap), staying put on ties. A vCPU that never ran (or may no
        // longer run where it did) looks at all its pCPUs, as Linux places a
        // new task on the idlest CPU of the machine (sched_balance_fork):
        // placing it by its index would stack a huge host's vCPUs onto its
        // first LLC domains.
        let home = if in_range {
            last
        } else {
            lo + (vc.index % (hi - lo))
        };
        let (d0, d1) = if in_range {
            let d0 = ((home / self.per_llc) * self.per_llc).max(lo);
            (d0, (d0 + self.per_llc).min(hi))
        } else {
            (lo, hi)
        };
        let mut best = home;
        let mut best_len = self.pcpu_load(home);
        for p in d0..d1 {
            let l = self.pcpu_load(p);
            if l < best_len {
                best = p;
                best_len = l;
            }
        }
        best
    }

    /// Take the vCPU to run next on `p`: the directed-yield target if that is
    /// not unfair (its vruntime within a slice of the least-served, as CFS
    /// checks its buddies), else the least-served (smallest vruntime).
    /// Picking by received CPU time rather than by turns keeps vCPUs that
    /// yield early (PLE, SDB) from losing their share to those that never do.
    fn take_next(&mut self, p: u32) -> Option<u32> {
        let buddy = std::mem::replace(&mut self.pcpus[p as usize].buddy, NONE);
        let rq = &self.pcpus[p as usize].rq;
        if rq.is_empty() {
            return None;
        }
        let (mut best, mut best_vr) = (usize::MAX, u64::MAX);
        let mut buddy_pos = None;
        for (i, &u) in rq.iter().enumerate() {
            let vr = self.vruntime[u as usize];
            if vr < best_vr {
                best = i;
                best_vr = vr;
            }
            if u == buddy {
                buddy_pos = Some((i, vr));
            }
        }
        let pos = match buddy_pos {
            Some((i, vr)) if vr <= best_vr.saturating_add(self.slice_ns) => i,
            _ => best,
        };
        let v = self.pcpus[p as usize].rq.remove(pos)?;
        self.set_bit_busy_rq(p);
        Some(v)
    }

    pub(super) fn enqueue(&mut self, p: u32, v: u32) {
        self.place(v, p);
        let vc = &mut self.vcpus[v as usize];
        vc.host = HostState::Queued;
        vc.pcpu = p;
        vc.act = Act::Off;
        let c = if std::mem::take(&mut vc.yielded) {
            cause::SPIN_YIELD
        } else {
            cause::STEAL
        };
        self.pcpus[p as usize].rq.push_back(v);
        self.set_bit_busy_rq(p);
        self.set_acct(v, Acct::Away(cause::id8(c)));
        self.arm_slice(p);
        self.arm_sdb_false_positive(p);
    }

    /// Queued plus running vCPUs of `p`, from the compact copy: the wake
    /// balancing scan reads one array instead of two cache lines per pCPU.
    #[inline]
    fn pcpu_load(&self, p: u32) -> u32 {
        let pc = &self.pcpus[p as usize];
        debug_assert_eq!(
            self.pcpu_load[p as usize] as usize,
            pc.rq.len() + usize::from(pc.cur != NONE)
        );
        self.pcpu_load[p as usize]
    }

    /// Make sure the current dispatch on `p` has a slice end while others wait.
    pub(super) fn arm_slice(&mut self, p: u32) {
        let pc = &self.pcpus[p as usize];
        if pc.cur == NONE || pc.rq.is_empty() {
            return;
        }
        if pc.slice_end == u64::MAX {
            let at = (pc.dispatched_at + self.slice_len(p)).max(self.now);
            self.pcpus[p as usize].slice_end = at;
        }
        let at = self.pcpus[p as usize].slice_end;
        self.ensure_slice_event(p, at);
    }

    /// One pending Slice event per pCPU at most, reused across dispatches: an
    /// earlier event re-arms itself for the current slice end when it fires.
    /// (Pushing one per dispatch would leave tens of thousands of stale events
    /// in the heap of a large overcommitted host.)
    fn ensure_slice_event(&mut self, p: u32, at: u64) {
        let pc = &mut self.pcpus[p as usize];
        if pc.slice_event_at <= at {
            return;
        }
        pc.slice_event_at = at;
        self.push(at, Kind::Slice { pcpu: p, gen: 0 });
    }

    /// A Slice event fires. Returns false if it was stale (nothing to do).
    pub(super) fn slice_event(&mut self, p: u32) -> bool {
        let now = self.now;
        let pc = &mut self.pcpus[p as usize];
        if pc.slice_event_at != now {
            return false;
        }
        pc.slice_event_at = u64::MAX;
        if pc.slice_end == u64::MAX {
            return false;
        }
        if now < pc.slice_end {
            let at = pc.slice_end;
            self.ensure_slice_event(p, at);
            return true;
        }
        pc.slice_end = u64::MAX;
        self.slice_expired(p);
        true
    }

    /// The length of one host slice. Host ticks, wakeups and other load keep
    /// real pCPUs from switching in lockstep; without that, equal slices on all
    /// pCPUs started together would amount to accidental gang scheduling. A
    /// uniform ±25% jitter (seeded) models it.
    fn slice_len(&mut self, p: u32) -> u64 {
        let u = self.rand_f64_on(p);
        crate::units_from_f64(self.slice_ns as f64 * (0.75 + 0.5 * u))
    }

    /// Put `v` on idle pCPU `p` and let it run.
    pub(super) fn dispatch(&mut self, p: u32, v: u32) {
        let vm = self.vcpus[v as usize].vm;
        {
            let vc = &self.vcpus[v as usize];
            if vc.host != HostState::Queued || vc.vr_pcpu != p {
                self.place(v, p);
            }
        }
        // A vCPU preempted before its refill finished continues that refill
        // rather than starting another: the model pays a refill as time
        // before the work while real execution overlaps it, so charging a
        // full refill per dispatch would stall for ever any vCPU whose refill
        // exceeds the host slice (found by the fuzz test).
        let pending_refill = self.pending_overhead(v, cause::CACHE_REFILL);
        let warm = if pending_refill > 0 {
            0
        } else {
            self.warmup_cost(v, p)
        };
        // Likewise a vCPU switched out again before its switch-in was paid
        // pays that one switch-in, not one more per dispatch: otherwise a
        // vCPU preempted every microsecond or two (directed yields of a
        // sibling VM's SDB-detected idle pollers) piles up switch costs
        // faster than it runs them off and never runs again (fuzz seeds
        // 11-14 at 1500 cases).
        let switch = if self.pcpus[p as usize].last_vcpu == v
            || self.pending_overhead(v, cause::HOST_SWITCH) > 0
        {
            0
        } else {
            self.vms[vm as usize].costs.switch
        };
        {
            let vc = &self.vcpus[v as usize];
            if vc.last_pcpu != NONE && vc.last_pcpu != p {
                self.vms[vm as usize].migrations += 1;
            }
        }
        let domain = self.pcpus[p as usize].domain;
        let vmr = &mut self.vms[vm as usize];
        vmr.running += 1;
        vmr.running_per_domain[domain as usize] += 1;
        vmr.warmup_ns += warm;
        self.note_writer(self.vcpus[v as usize].cur, true);
        let vc = &mut self.vcpus[v as usize];
        vc.host = HostState::Running;
        vc.pcpu = p;
        vc.last_pcpu = p;
        vc.act = Act::Off;
        vc.ple_shift = 0;
        vc.overhead_left += switch + warm;
        self.add_overhead_part(v, cause::HOST_SWITCH, switch);
        self.add_overhead_part(v, cause::CACHE_REFILL, warm);
        let pc = &mut self.pcpus[p as usize];
        pc.cur = v;
        pc.last_vcpu = v;
        pc.dispatched_at = self.now;
        pc.slice_gen = pc.slice_gen.wrapping_add(1);
        pc.slice_end = u64::MAX;
        pc.sdb_armed = false;
        self.note_pcpu_load(p);
        self.set_bit_idle(p, false);
        self.set_acct(v, Acct::On(cause::id8(cause::UNATTRIBUTED)));
        self.arm_slice(p);
        self.arm_sdb_false_positive(p);
        self.resume(v);
    }

    /// `v` leaves its pCPU without being runnable (halted, VM finished).
    pub(super) fn release(&mut self, v: u32) {
        if self.phost.is_some() {
            self.policy_release(v);
            return;
        }
        self.update_load(v, true);
        let p = self.vcpus[v as usize].pcpu;
        self.leave_pcpu(v, p);
        self.pcpu_next(p);
    }

    pub(super) fn leave_pcpu(&mut self, v: u32, p: u32) {
        let vm = self.vcpus[v as usize].vm;
        let domain = self.pcpus[p as usize].domain;
        let vmr = &mut self.vms[vm as usize];
        vmr.running -= 1;
        vmr.running_per_domain[domain as usize] -= 1;
        self.note_writer(self.vcpus[v as usize].cur, false);
        // Sample the minimum while `v` still counts as running here.
        self.update_min_vr(p);
        self.vruntime[v as usize] += self.now - self.pcpus[p as usize].dispatched_at;
        let pc = &mut self.pcpus[p as usize];
        pc.cur = NONE;
        pc.slice_gen = pc.slice_gen.wrapping_add(1);
        pc.slice_end = u64::MAX;
        self.note_pcpu_load(p);
    }

    /// `p` has nothing running: take the next queued vCPU, steal one, or idle.
    fn pcpu_next(&mut self, p: u32) {
        if let Some(v) = self.take_next(p) {
            self.dispatch(p, v);
            return;
        }
        if let Some(v) = self.steal(p) {
            self.dispatch(p, v);
            return;
        }
        self.set_bit_idle(p, true);
    }

    /// A queued vCPU from another pCPU that may run on `p`.
    fn steal(&mut self, p: u32) -> Option<u32> {
        if !self.busy_rq_bits.any() {
            // No run queue holds a vCPU (the common case when a pCPU goes
            // idle on a host that is not overcommitted): the scan below
            // would find nothing.
            return None;
        }
        let n = u32::try_from(self.pcpus.len()).unwrap_or(u32::MAX);
        // The first pCPU of `p`'s LLC domain (`Pcpu::domain` is
        // `p / per_llc`: a load instead of a division).
        let start = self.pcpus[p as usize].domain * self.per_llc;
        let mut q = start;
        // Bounded: in huge hosts give up after a few candidate queues rather
        // than scanning them all on every idle transition.
        for _ in 0..64 {
            let c = self.busy_rq_bits.find(0, n, q)?;
            let rq = &self.pcpus[c as usize].rq;
            if let Some(pos) = rq.iter().take(8).position(|&v| {
                let vc = &self.vcpus[v as usize];
                vc.lo <= p && p < vc.hi
            }) {
                let v = self.pcpus[c as usize].rq.remove(pos)?;
                self.set_bit_busy_rq(c);
                return Some(v);
            }
            q = (c + 1) % n;
            if q == start {
                break;
            }
        }
        None
    }

    /// Preempt the vCPU running on `p` and run the next queued one.
    pub(super) fn preempt(&mut self, p: u32) -> bool {
        let v = self.pcpus[p as usize].cur;
        if v == NONE || self.pcpus[p as usize].rq.is_empty() {
            return false;
        }
        self.interrupt_act(v);
        let vm = self.vcpus[v as usize].vm;
        if self.vms[vm as usize].costs.virtualized {
            self.count_exits(v, super::exit::PREEMPT, 1);
        }
        self.leave_pcpu(v, p);
        let next = self.take_next(p);
        self.enqueue(p, v);
        if let Some(n) = next {
            self.dispatch(p, n);
        }
        true
    }

    pub(super) fn slice_expired(&mut self, p: u32) {
        let v = self.pcpus[p as usize].cur;
        if v == NONE || self.pcpus[p as usize].rq.is_empty() {
            return;
        }
        let _ = self.preempt(p);
    }

    /// Safe to preempt: no spin lock held, not inside a shootdown (kernel).
    pub(super) fn vcpu_safe(&self, v: u32) -> bool {
        let vc = &self.vcpus[v as usize];
        if vc.irq_front != NONE || vc.act == Act::Handler {
            return false;
        }
        let t = vc.cur;
        if t == NONE {
            return true;
        }
        let th = &self.threads[t as usize];
        th.spin_locks_held == 0 && th.acks_pending == 0
    }

    /// Called when a vCPU may have become safe: run a deferred preemption
    /// (safe points are a user-level policy: `policy_host.rs`). True if `v`
    /// lost its pCPU.
    pub(super) fn safe_point_reached(&mut self, v: u32) -> bool {
        if self.vcpus[v as usize].host != HostState::Running || self.phost.is_none() {
            return false;
        }
        self.policy_safe_point(v)
    }

    /// A kick (IPI or timer) reaches a halted vCPU's host thread.
    /// Returns false if the kick was stale (nothing to do).
    pub(super) fn wake_arrives(&mut self, v: u32) -> bool {
        let vc = &mut self.vcpus[v as usize];
        vc.wake_pending = false;
        if vc.host != HostState::Halted {
            return false;
        }
        let vm = vc.vm;
        if self.vms[vm as usize].done_threads == self.vms[vm as usize].n_threads {
            return false;
        }
        self.make_ready(v);
        true
    }

    /// Yield the pCPU after a spin was detected (PLE or SDB): to a queued vCPU
    /// of the same VM if there is one (KVM's directed yield), else to the next
    /// queued vCPU. Returns false when there is nobody to yield to.
    pub(super) fn spin_yield(&mut self, v: u32) -> bool {
        if self.phost.is_some() {
            return self.policy_spin_exit(v);
        }
        let p = self.vcpus[v as usize].pcpu;
        let vm = self.vcpus[v as usize].vm;
        let rq = &self.pcpus[p as usize].rq;
        // The target becomes the pCPU's next buddy, which `take_next` honours
        // only while that is fair: siblings of one VM yielding to each other
        // must not starve other VMs.
        if let Some(&u) = rq
            .iter()
            .find(|&&u| self.vcpus[u as usize].vm == vm && self.yield_candidate(u))
        {
            self.pcpus[p as usize].buddy = u;
        } else {
            // Directed yield across pCPUs, as KVM's kvm_vcpu_on_spin ->
            // yield_to: a preempted sibling queued on another pCPU becomes
            // that pCPU's next buddy and its current vCPU is rescheduled; the
            // sibling stays where it is queued. (Pulling it here instead, as
            // before, gathered a VM's vCPUs on one pCPU: its fortune then
            // depended on how many siblings shared that pCPU, Jain 0.81 for
            // 3 dedup VMs of 4 vCPUs on 4 pCPUs; and a pulled vCPU starved
            // behind vCPUs on a slower vruntime clock, fuzz seed 2026 case 403.)
            let first = self.vms[vm as usize].first_vcpu;
            let n = self.vms[vm as usize].n_vcpus;
            let cand = (first..first + n).find(|&u| {
                let uc = &self.vcpus[u as usize];
                u != v && uc.host == HostState::Queued && uc.pcpu != p && self.yield_candidate(u)
            });
            if let Some(u) = cand {
                let q = self.vcpus[u as usize].pcpu;
                // Honoured only if fair there (take_next's buddy check), so
                // siblings cannot starve the other VMs of q.
                let fair = self
                    .min_vruntime(q)
                    .is_some_and(|m| self.vruntime[u as usize] <= m.saturating_add(self.slice_ns));
                if fair {
                    self.pcpus[q as usize].buddy = u;
                    self.preempt(q);
                }
            }
        }
        self.preempt(p)
    }

    /// Worth a directed yield: a preempted vCPU that has work which is not
    /// itself spinning (KVM skips vCPUs that are in a spin loop or idle);
    /// yielding to an idle poller could ping-pong between pollers forever.
    fn yield_candidate(&self, u: u32) -> bool {
        let uc = &self.vcpus[u as usize];
        if uc.irq_front != NONE {
            return true;
        }
        let cur = (uc.cur != NONE).then(|| &self.threads[uc.cur as usize]);
        // A vCPU spinning in the kernel for shootdown acks cannot run its queued
        // threads until the acks arrive: yielding to it only spins again, and two
        // such vCPUs of one VM would take turns forever ahead of the queued vCPU
        // that owes them the acks.
        if cur.is_some_and(|t| t.wait == super::Wait::Shootdown) {
            return false;
        }
        !uc.rq.is_empty() || cur.is_some_and(|t| t.state == super::TState::Running)
    }
}

/// First set bit of `bits` in `a..b`.
#[inline]
pub(super) fn next_bit(bits: &[u64], a: u32, b: u32) -> Option<u32> {
    let mut i = a;
    while i < b {
        let w = bits[(i / 64) as usize] >> (i % 64);
        if w == 0 {
            i = (i / 64 + 1) * 64;
            continue;
        }
        let c = i + w.trailing_zeros();
        return (c < b).then_some(c);
    }
    None
}

/// Set (`on`) or clear bit `i` of the bitmap `bits`.
#[inline]
pub(super) fn assign_bit(bits: &mut [u64], i: u32, on: bool) {
    let (w, b) = ((i / 64) as usize, i % 64);
    if on {
        bits[w] |= 1 << b;
    } else {
        bits[w] &= !(1 << b);
    }
}
