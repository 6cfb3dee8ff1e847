//! Host scheduling of vCPUs on pCPUs.
//!
//! - Proportional fair share: each pCPU round-robins the vCPUs in its run queue
//!   with a time slice (equal weights, so every runnable vCPU gets an equal
//!   share, as with CFS or Xen's credit scheduler). A waking vCPU goes to its
//!   last pCPU if idle, else to any idle pCPU it may use (the idle bitmap makes
//!   this O(pCPUs/64)), else back to its last pCPU's queue. A pCPU that goes
//!   idle steals a queued vCPU allowed on it, looking at its own LLC domain first.
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
        let d = &self.platform.defaults;
        let (llc, host) = (d.balance_llc_ns, d.balance_host_ns);
        if self.pcpus.len() > 1 {
            self.push(llc, Kind::Balance { level: 0 });
            if self.domains > 1 {
                self.push(host, Kind::Balance { level: 1 });
            }
        }
    }

    /// Periodic load balancing (fair policy), as Linux's rebalance_domains:
    /// every `balance_llc_ns` inside each LLC domain, every
    /// `balance_host_ns` across the host, queued vCPUs move from the busiest
    /// pCPUs (running + queued) to the least busy ones until no two differ by
    /// more than one (affinity permitting). Wakeup placement and idle
    /// stealing alone never correct a bad placement of vCPUs that do not
    /// block. Returns false when the event was not needed (stale).
    pub(super) fn balance_tick(&mut self, level: u32) -> bool {
        if self.q.len() == 0 {
            // Nothing else pending: re-arming would hide a stall.
            return false;
        }
        let n = u32::try_from(self.pcpus.len()).unwrap_or(u32::MAX);
        // Linux's load average keeps a blocked task's load on its CPU (PELT
        // "blocked load"), so a pCPU whose vCPUs halt briefly still counts
        // them; without that, a pCPU with one never-halting vCPU looks as
        // loaded as one with three that take turns halting.
        let mut blocked = std::mem::take(&mut self.blocked_load);
        blocked.clear();
        blocked.resize(n as usize, 0);
        for vc in &self.vcpus {
            let vm = &self.vms[vc.vm as usize];
            if vc.host == HostState::Halted
                && vc.last_pcpu != NONE
                && vm.done_threads < vm.n_threads
            {
                blocked[vc.last_pcpu as usize] += 1;
            }
        }
        if level == 0 {
            let per = self.per_llc;
            let mut lo = 0;
            while lo < n {
                let hi = (lo + per).min(n);
                self.balance_range(lo, hi, &blocked);
                lo = hi;
            }
        } else {
            self.balance_range(0, n, &blocked);
        }
        self.blocked_load = blocked;
        let d = &self.platform.defaults;
        let every = if level == 0 {
            d.balance_llc_ns
        } else {
            d.balance_host_ns
        };
        self.push(self.now + every, Kind::Balance { level });
        true
    }

    #[inline]
    pub(super) fn set_bit_idle(&mut self, p: u32, idle: bool) {
        self.pcpu_idle_acct(p, idle);
        let (w, b) = ((p / 64) as usize, p % 64);
        if idle {
            self.idle_bits[w] |= 1 << b;
        } else {
            self.idle_bits[w] &= !(1 << b);
        }
    }

    #[inline]
    fn set_bit_busy_rq(&mut self, p: u32) {
        let (w, b) = ((p / 64) as usize, p % 64);
        if self.pcpus[p as usize].rq.is_empty() {
            self.busy_rq_bits[w] &= !(1 << b);
        } else {
            self.busy_rq_bits[w] |= 1 << b;
        }
    }

    /// First set bit of `bits` in `lo..hi`, searching from `from` and wrapping.
    fn find_bit(bits: &[u64], lo: u32, hi: u32, from: u32) -> Option<u32> {
        let scan = |a: u32, b: u32| -> Option<u32> {
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
        };
        let from = from.clamp(lo, hi.saturating_sub(1));
        scan(from, hi).or_else(|| scan(lo, from))
    }

    /// A vCPU that was halted (or parked) becomes runnable.
    pub(super) fn make_ready(&mut self, v: u32) {
        if self.phost.is_some() {
            self.policy_make_ready(v);
            return;
        }
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
            (last / self.per_llc) * self.per_llc
        } else {
            lo + (vc.index % (hi - lo))
        };
        if let Some(p) = Self::find_bit(&self.idle_bits, lo, hi, from) {
            return p;
        }
        // No idle pCPU: the shortest run queue in the LLC domain it last ran
        // in (CFS-like wake balancing; bounded to one domain so huge hosts
        // stay cheap), staying put on ties.
        let home = if in_range {
            last
        } else {
            lo + (vc.index % (hi - lo))
        };
        let d0 = ((home / self.per_llc) * self.per_llc).max(lo);
        let d1 = (d0 + self.per_llc).min(hi);
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

    /// The vruntime of the least-served vCPU on `p` (running or queued).
    fn min_vruntime(&self, p: u32) -> Option<u64> {
        let pc = &self.pcpus[p as usize];
        let cur = (pc.cur != NONE)
            .then(|| self.vcpus[pc.cur as usize].vruntime + (self.now - pc.dispatched_at));
        pc.rq
            .iter()
            .map(|&u| self.vcpus[u as usize].vruntime)
            .chain(cur)
            .min()
    }

    /// Take the vCPU to run next on `p`: the directed-yield target if that is
    /// not unfair (its vruntime within a slice of the least-served, as CFS
    /// checks its buddies), else the least-served (smallest vruntime).
    /// Picking by received CPU time rather than by turns keeps vCPUs that
    /// yield early (PLE, SDB) from losing their share to those that never do.
    fn take_next(&mut self, p: u32) -> Option<u32> {
        let buddy = std::mem::replace(&mut self.pcpus[p as usize].buddy, NONE);
        let rq = &self.pcpus[p as usize].rq;
        let (mut best, mut best_vr) = (usize::MAX, u64::MAX);
        let mut buddy_pos = None;
        for (i, &u) in rq.iter().enumerate() {
            let vr = self.vcpus[u as usize].vruntime;
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

    fn enqueue(&mut self, p: u32, v: u32) {
        // CFS's place_entity: a vCPU that slept (or comes from another
        // pCPU) gets at most half a slice of credit over the least-served
        // one here, so a long sleep does not buy a long monopoly. (A vCPU
        // from another pCPU keeps its absolute vruntime: rebasing it against
        // the two pCPUs' current minimum, which unlike CFS's min_vruntime is
        // not monotonic, on balancing moves, wakeups or directed-yield pulls
        // cost blocking pipelines fairness; docs/sim.md.)
        if let Some(floor) = self.min_vruntime(p) {
            let credit = floor.saturating_sub(self.slice_ns / 2);
            let vc = &mut self.vcpus[v as usize];
            vc.vruntime = vc.vruntime.max(credit);
        }
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

    fn pcpu_load(&self, p: u32) -> usize {
        let pc = &self.pcpus[p as usize];
        pc.rq.len() + usize::from(pc.cur != NONE)
    }

    /// Even out the load of pCPUs `lo..hi`: sort once by load, then move
    /// queued vCPUs from the busiest end to the least busy end until the two
    /// ends differ by at most one (O(n log n) per call, so huge hosts stay cheap).
    fn balance_range(&mut self, lo: u32, hi: u32, blocked: &[u32]) {
        if hi - lo < 2 {
            return;
        }
        let mut order: Vec<(usize, u32)> = (lo..hi)
            .map(|p| (self.pcpu_load(p) + blocked[p as usize] as usize, p))
            .collect();
        order.sort_unstable();
        let (mut i, mut j) = (0usize, order.len() - 1);
        while i < j && order[j].0 >= order[i].0 + 2 {
            let (src, dst) = (order[j].1, order[i].1);
            // The vCPU that waited least (the tail) and may run on dst.
            let pos = self.pcpus[src as usize].rq.iter().rposition(|&v| {
                let vc = &self.vcpus[v as usize];
                vc.lo <= dst && dst < vc.hi
            });
            let Some(v) = pos.and_then(|pos| self.pcpus[src as usize].rq.remove(pos)) else {
                j -= 1;
                continue;
            };
            self.set_bit_busy_rq(src);
            if self.pcpus[dst as usize].cur == NONE {
                self.dispatch(dst, v);
            } else {
                // Keep the accounting cause (steal, or waiting after a yield).
                let c = match self.vcpus[v as usize].acct {
                    super::Acct::Away(c) => c,
                    _ => cause::id8(cause::STEAL),
                };
                self.enqueue(dst, v);
                self.vcpus[v as usize].acct = super::Acct::Away(c);
            }
            order[j].0 -= 1;
            order[i].0 += 1;
            if i + 1 < j && order[i].0 > order[i + 1].0 {
                i += 1;
            }
            if j > i + 1 && order[j].0 < order[j - 1].0 {
                j -= 1;
            }
        }
    }

    /// Make sure the current dispatch on `p` has a slice end while others wait.
    pub(super) fn arm_slice(&mut self, p: u32) {
        let pc = &self.pcpus[p as usize];
        if pc.cur == NONE || pc.rq.is_empty() {
            return;
        }
        if pc.slice_end == u64::MAX {
            let at = (pc.dispatched_at + self.slice_len()).max(self.now);
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
    fn slice_len(&mut self) -> u64 {
        let u = self.rand_f64();
        crate::units_from_f64(self.slice_ns as f64 * (0.75 + 0.5 * u))
    }

    /// Put `v` on idle pCPU `p` and let it run.
    pub(super) fn dispatch(&mut self, p: u32, v: u32) {
        let vm = self.vcpus[v as usize].vm;
        let switch = if self.pcpus[p as usize].last_vcpu == v {
            0
        } else {
            self.vms[vm as usize].costs.switch
        };
        // A vCPU preempted before its refill finished continues that refill
        // rather than starting another: the model pays a refill as time
        // before the work while real execution overlaps it, so charging a
        // full refill per dispatch would stall for ever any vCPU whose refill
        // exceeds the host slice (found by the fuzz test).
        let pending_refill = self.vacct[v as usize].ovh[cause::CACHE_REFILL];
        let warm = if pending_refill > 0 {
            0
        } else {
            self.warmup_cost(v, p)
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
        let vc = &mut self.vcpus[v as usize];
        vc.host = HostState::Running;
        vc.pcpu = p;
        vc.last_pcpu = p;
        vc.act = Act::Off;
        vc.ple_shift = 0;
        vc.overhead_left += switch + warm;
        let ovh = &mut self.vacct[v as usize].ovh;
        ovh[cause::HOST_SWITCH] += switch;
        ovh[cause::CACHE_REFILL] += warm;
        let pc = &mut self.pcpus[p as usize];
        pc.cur = v;
        pc.last_vcpu = v;
        pc.dispatched_at = self.now;
        pc.slice_gen = pc.slice_gen.wrapping_add(1);
        pc.slice_end = u64::MAX;
        pc.sdb_armed = false;
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
        self.vcpus[v as usize].vruntime += self.now - self.pcpus[p as usize].dispatched_at;
        let pc = &mut self.pcpus[p as usize];
        pc.cur = NONE;
        pc.slice_gen = pc.slice_gen.wrapping_add(1);
        pc.slice_end = u64::MAX;
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
        let n = u32::try_from(self.pcpus.len()).unwrap_or(u32::MAX);
        let start = (p / self.per_llc) * self.per_llc;
        let mut q = start;
        // Bounded: in huge hosts give up after a few candidate queues rather
        // than scanning them all on every idle transition.
        for _ in 0..64 {
            let c = Self::find_bit(&self.busy_rq_bits, 0, n, q)?;
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
            self.vcpus[v as usize].exits[super::exit::PREEMPT] += 1;
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
        if !vc.irqs.is_empty() || vc.act == Act::Handler {
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
            // Directed yield across pCPUs: pull a preempted sibling here.
            let first = self.vms[vm as usize].first_vcpu;
            let n = self.vms[vm as usize].n_vcpus;
            let cand = (first..first + n).find(|&u| {
                let uc = &self.vcpus[u as usize];
                u != v
                    && uc.host == HostState::Queued
                    && uc.lo <= p
                    && p < uc.hi
                    && self.yield_candidate(u)
            });
            if let Some(u) = cand {
                let q = self.vcpus[u as usize].pcpu;
                let qrq = &mut self.pcpus[q as usize].rq;
                if let Some(pos) = qrq.iter().position(|&x| x == u) {
                    qrq.remove(pos);
                    self.set_bit_busy_rq(q);
                    self.pcpus[p as usize].rq.push_back(u);
                    self.pcpus[p as usize].buddy = u;
                    self.set_bit_busy_rq(p);
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
        if !uc.irqs.is_empty() {
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
