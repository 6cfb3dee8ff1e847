//! Load balancing of the fair host (Linux's CFS/PELT, per scheduling
//! domain) and the per-pCPU vruntime clocks a migrating vCPU's lag is kept
//! against. The run queues and dispatching are in `host.rs`.

use super::{HostState, Sim, NONE};
use crate::breakdown as cause;
use crate::events::Kind;

impl Sim {
    /// The host's scheduling domains, smallest first, by the pCPUs each
    /// spans: the SMT siblings of a core (when the platform has SMT), an LLC
    /// domain, the whole host. Levels spanning one pCPU, or no more than the
    /// level below, are left out, as Linux degenerates them.
    pub(super) fn domain_spans(&self) -> DomainSpans {
        let n = u32::try_from(self.pcpus.len()).unwrap_or(u32::MAX);
        let mut spans = DomainSpans {
            spans: [0; 3],
            len: 0,
        };
        let core = self.platform.cache.pcpus_per_core.max(1);
        for span in [core.min(self.per_llc), self.per_llc.min(n), n] {
            if span > spans.last().copied().unwrap_or(1) {
                spans.spans[spans.len] = span;
                spans.len += 1;
            }
        }
        spans
    }

    /// A domain's balance interval grows with its span (Linux `sd_init()`:
    /// `min_interval` = the domain's weight in ms; docs/sim.md).
    pub(super) fn balance_interval(&self, span: u32) -> u64 {
        self.platform
            .defaults
            .balance_ns_per_pcpu
            .saturating_mul(u64::from(span))
    }

    /// A vCPU's PELT-like runnable average as of now: it decays by half every
    /// `load_half_life_ns` toward 1 while runnable (running or queued) and
    /// toward 0 while halted (Linux kernel/sched/pelt.c).
    pub(super) fn load_now(&self, v: u32, runnable: bool) -> f64 {
        let vc = &self.vcpus[v as usize];
        let dt = self.now.saturating_sub(vc.load_at) as f64;
        let keep = (-dt / self.platform.defaults.load_half_life_ns as f64).exp2();
        let target = if runnable { 1.0 } else { 0.0 };
        target + (vc.load_avg - target) * keep
    }

    /// Bring `v`'s runnable average up to now before its runnable state
    /// changes (`runnable`: what it was until now).
    pub(super) fn update_load(&mut self, v: u32, runnable: bool) {
        let l = self.load_now(v, runnable);
        let vc = &mut self.vcpus[v as usize];
        vc.load_avg = l;
        vc.load_at = self.now;
    }

    /// Periodic load balancing (fair policy), as Linux's rebalance_domains:
    /// each scheduling domain of level `level` is balanced every
    /// `balance_interval(span)`. A pCPU's load is the runnable averages of its
    /// running and queued vCPUs plus those of the halted vCPUs that last ran
    /// there (PELT's blocked load, decaying while they stay halted): without
    /// it a pCPU with one never-halting vCPU looks as loaded as one with three
    /// that take turns halting. Wakeup placement and idle stealing alone
    /// never correct a bad placement of vCPUs that do not block. Returns
    /// false when the event was not needed (stale).
    pub(super) fn balance_tick(&mut self, level: u32) -> bool {
        if self.pending_events() == 0 {
            // Nothing else pending: re-arming would hide a stall.
            return false;
        }
        let n = u32::try_from(self.pcpus.len()).unwrap_or(u32::MAX);
        let spans = self.domain_spans();
        let Some(&span) = spans.get(level as usize) else {
            return false;
        };
        // The domain's groups are its child domains (single pCPUs at the
        // lowest level), as in Linux's sched_group.
        let child = level
            .checked_sub(1)
            .and_then(|l| spans.get(l as usize).copied())
            .unwrap_or(1);
        // The scratch arrays are the engine's (no allocation per tick).
        let mut load = std::mem::take(&mut self.balance_scratch.load);
        load.clear();
        load.resize(n as usize, 0.0);
        for v in 0..u32::try_from(self.vcpus.len()).unwrap_or(u32::MAX) {
            let vc = &self.vcpus[v as usize];
            let (p, runnable) = match vc.host {
                HostState::Running | HostState::Queued => (vc.pcpu, true),
                HostState::Halted => {
                    let vm = &self.vms[vc.vm as usize];
                    if vc.last_pcpu == NONE || vm.done_threads == vm.n_threads {
                        continue;
                    }
                    (vc.last_pcpu, false)
                }
                HostState::Parked => continue,
            };
            load[p as usize] += self.load_now(v, runnable);
        }
        let mut lo = 0;
        while lo < n {
            let hi = (lo + span).min(n);
            self.balance_range(level, lo, hi, child, &mut load);
            lo = hi;
        }
        self.balance_scratch.load = load;
        let every = self.balance_interval(span);
        self.push(self.now + every, Kind::Balance { level });
        true
    }

    /// The vruntime of the least-served vCPU on `p` (running or queued).
    pub(super) fn min_vruntime(&self, p: u32) -> Option<u64> {
        let pc = &self.pcpus[p as usize];
        let cur = (pc.cur != NONE)
            .then(|| self.vruntime[pc.cur as usize] + (self.now - pc.dispatched_at));
        pc.rq
            .iter()
            .map(|&u| self.vruntime[u as usize])
            .chain(cur)
            .min()
    }

    /// Advance `p`'s monotonic `min_vr` (CFS's update_min_vruntime): the
    /// least vruntime of its running and queued vCPUs, never going back.
    pub(super) fn update_min_vr(&mut self, p: u32) {
        if let Some(m) = self.min_vruntime(p) {
            let pc = &mut self.pcpus[p as usize];
            pc.min_vr = pc.min_vr.max(m);
        }
    }

    /// Put `v`'s vruntime on `p`'s clock. A vCPU arriving from another pCPU
    /// keeps its lag (vruntime minus the old pCPU's `min_vr`), rebased on
    /// this one's, as CFS does on migration (`migrate_task_rq_fair` and
    /// `enqueue_entity`); then a sleeper or arrival gets at most half a slice
    /// of credit over the least-served vCPU here (`place_entity`), so a long
    /// sleep does not buy a long monopoly. Carrying an absolute vruntime
    /// instead starves a vCPU moved from a pCPU whose clock ran fast (few
    /// vCPUs) to one whose clock ran slow (many), and keeps VMs on the fast
    /// pCPUs apart from the rest (the counter-examples of tests/fairness.rs;
    /// docs/sim.md).
    pub(super) fn place(&mut self, v: u32, p: u32) {
        self.update_min_vr(p);
        let old = self.vcpus[v as usize].vr_pcpu;
        if old != p {
            if old != NONE {
                self.update_min_vr(old);
                let from = self.pcpus[old as usize].min_vr;
                let to = self.pcpus[p as usize].min_vr;
                let vr = &mut self.vruntime[v as usize];
                *vr = (*vr + to).saturating_sub(from);
            }
            self.vcpus[v as usize].vr_pcpu = p;
        }
        let floor = self.pcpus[p as usize]
            .min_vr
            .saturating_sub(self.slice_ns / 2);
        let vr = &mut self.vruntime[v as usize];
        *vr = (*vr).max(floor);
    }

    /// Balance the domain of pCPUs `lo..hi`, made of groups of `child`
    /// pCPUs (Linux's load_balance, for a whole domain at once): while the
    /// busiest group's load per pCPU exceeds the least busy group's by more
    /// than `imbalance_pct`, move a queued vCPU from the busiest pCPU of the
    /// one to the least busy pCPU of the other, if its load is at most what
    /// evens the two groups out (the imbalance), shifted right by the
    /// domain's failed attempts as `detach_tasks` does. So an imbalance no
    /// single move can even out (six busy vCPUs on four pCPUs) is still
    /// corrected after a few intervals, and over time the vCPUs take turns
    /// on the less loaded pCPUs, which is how Linux keeps such loads fair. A
    /// domain that stays imbalanced without a move counts a failure; a move
    /// resets it. Comparing groups (LLC domains at the host level) rather
    /// than single pCPUs sends work to an LLC domain that one VM has to
    /// itself even while other domains have pCPUs whose halting vCPUs make
    /// them look lighter.
    pub(super) fn balance_range(
        &mut self,
        level: u32,
        lo: u32,
        hi: u32,
        child: u32,
        load: &mut [f64],
    ) {
        if hi - lo < 2 {
            return;
        }
        let slot = level as usize * self.pcpus.len() + lo as usize;
        let failed = self.balance_failed.get(slot).copied().unwrap_or(0);
        let shift = f64::from(1u32 << failed.min(16));
        let pct = f64::from(self.platform.defaults.imbalance_pct) / 100.0;
        let child = child.max(1);
        let mut scratch = std::mem::take(&mut self.balance_scratch);
        let BalanceScratch {
            groups,
            sum,
            spent,
            group_spent,
            ..
        } = &mut scratch;
        groups.clear();
        groups.extend(
            (lo..hi)
                .step_by(child as usize)
                .map(|g| (g, (g + child).min(hi))),
        );
        sum.clear();
        sum.extend(
            groups
                .iter()
                .map(|&(a, b)| (a..b).map(|p| load[p as usize]).sum::<f64>()),
        );
        // pCPUs found with nothing to give in this pass.
        spent.clear();
        spent.resize((hi - lo) as usize, false);
        group_spent.clear();
        group_spent.resize(groups.len(), false);
        let (groups, sum, spent, group_spent) = (&*groups, sum, spent, group_spent);
        let (mut moved, mut imbalanced) = (false, false);
        let avg = |k: usize, sum: &[f64]| sum[k] / f64::from(groups[k].1 - groups[k].0);
        // Bounded: each pass moves a vCPU or retires a pCPU.
        for _ in 0..4 * (hi - lo) {
            let Some(local) =
                (0..groups.len()).min_by(|&a, &b| avg(a, sum).total_cmp(&avg(b, sum)))
            else {
                break;
            };
            let Some(busiest) = (0..groups.len())
                .filter(|&k| !group_spent[k] && k != local)
                .max_by(|&a, &b| avg(a, sum).total_cmp(&avg(b, sum)))
            else {
                break;
            };
            let (lb, ll) = (avg(busiest, sum), avg(local, sum));
            if lb <= ll * pct || lb - ll < 1e-9 {
                break;
            }
            imbalanced = true;
            let (nb, nl) = (
                f64::from(groups[busiest].1 - groups[busiest].0),
                f64::from(groups[local].1 - groups[local].0),
            );
            // The load that would even the two groups out.
            let imbalance = (lb - ll) / (1.0 / nb + 1.0 / nl);
            let (b0, b1) = groups[busiest];
            let Some(src) = (b0..b1)
                .filter(|&p| !spent[(p - lo) as usize])
                .max_by(|&a, &b| load[a as usize].total_cmp(&load[b as usize]))
            else {
                group_spent[busiest] = true;
                continue;
            };
            let (l0, l1) = groups[local];
            let dst = (l0..l1)
                .min_by(|&a, &b| load[a as usize].total_cmp(&load[b as usize]))
                .unwrap_or(l0);
            // The vCPU that waited least (the tail) that may run on dst.
            let pos = self.pcpus[src as usize].rq.iter().rposition(|&v| {
                let vc = &self.vcpus[v as usize];
                vc.lo <= dst && dst < vc.hi && self.load_now(v, true) / shift <= imbalance
            });
            let Some(v) = pos.and_then(|pos| self.pcpus[src as usize].rq.remove(pos)) else {
                spent[(src - lo) as usize] = true;
                continue;
            };
            let lv = self.load_now(v, true);
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
            moved = true;
            load[src as usize] -= lv;
            load[dst as usize] += lv;
            sum[busiest] -= lv;
            sum[local] += lv;
        }
        self.balance_scratch = scratch;
        if let Some(f) = self.balance_failed.get_mut(slot) {
            *f = if moved {
                0
            } else if imbalanced {
                f.saturating_add(1)
            } else {
                *f
            };
        }
    }
}

/// The scheduling domains' spans, smallest first (at most three levels:
/// core, LLC, machine), without a heap allocation per balance tick.
#[derive(Debug, Clone, Copy)]
pub(super) struct DomainSpans {
    spans: [u32; 3],
    len: usize,
}

impl std::ops::Deref for DomainSpans {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        &self.spans[..self.len]
    }
}

/// Load balancing's working arrays, kept by the engine between ticks so a
/// tick allocates nothing (the event loop's steady state is
/// allocation-free; `examples/allocs.rs`).
#[derive(Debug, Default)]
pub(crate) struct BalanceScratch {
    /// Per pCPU: the runnable load.
    load: Vec<f64>,
    /// The domain's groups (pCPU ranges) and their summed loads.
    groups: Vec<(u32, u32)>,
    sum: Vec<f64>,
    /// Per pCPU and per group: found with nothing to give in this pass.
    spent: Vec<bool>,
    group_spent: Vec<bool>,
}
