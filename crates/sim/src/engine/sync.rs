//! Synchronization objects with the semantics of docs/program-encoding.md.
//!
//! Spinning is a state, not a loop of events: a spinning thread occupies its
//! vCPU until the object changes. On release, a TAS/TTAS lock goes to the
//! first waiter that is actually spinning on a pCPU right now (a preempted
//! waiter cannot see the release; it takes the lock later if still free); a
//! ticket lock goes to the next ticket even if that vCPU is preempted (the
//! classic ticket-lock convoy under overcommit). Spin budgets (spin-then-block
//! barriers, adaptive mutexes) count only time actually spent spinning.
//! Mutexes and queues block with barging: a woken waiter retries the op.

use super::flow::Flow;
use super::{Acct, Act, HostState, Sim, TState, Wait, NONE};
use crate::breakdown as cause;
use crate::code::counter;
use smplab_workload::spec::{BarrierWait, SpinKind};

impl Sim {
    fn actively_spinning(&self, t: u32) -> bool {
        let v = self.threads[t as usize].vcpu;
        let vc = &self.vcpus[v as usize];
        vc.cur == t && vc.host == HostState::Running && vc.act == Act::Spin
    }

    /// Spin cost per iteration, PAUSE, and kernel mode of a thread's wait.
    fn spin_kind(&self, t: u32) -> (f64, bool, bool) {
        let th = &self.threads[t as usize];
        let vm = &self.vms[th.vm as usize];
        let cpu = &self.platform.cpu;
        let iter = |pause: bool| {
            if pause {
                cpu.spin_iter_pause_ns
            } else {
                cpu.spin_iter_nopause_ns
            }
        };
        match th.wait {
            Wait::SpinLock(i) => {
                let p = vm.spin_locks[i as usize].pause;
                (iter(p), p, false)
            }
            Wait::Barrier(i) => {
                let p = vm.barriers[i as usize].pause;
                (iter(p), p, false)
            }
            // glibc's adaptive mutex spins with PAUSE (atomic_spin_nop).
            Wait::Mutex(_) => (iter(true), true, false),
            // smp_call_function_many waits with cpu_relax() in the kernel.
            Wait::Shootdown => (iter(true), true, true),
            Wait::None => (iter(true), true, false),
        }
    }

    /// Start (or continue) spinning; takes the object at once if it is free.
    pub(super) fn start_spin(&mut self, v: u32, t: u32) -> Flow {
        let lt = self.platform.cpu.line_transfer_ns;
        let vm = self.threads[t as usize].vm as usize;
        match self.threads[t as usize].wait {
            Wait::SpinLock(i) => {
                let l = &mut self.vms[vm].spin_locks[i as usize];
                if l.holder == NONE && (l.kind != SpinKind::Ticket || l.waiters.first() == Some(&t))
                {
                    if let Some(pos) = l.waiters.iter().position(|&w| w == t) {
                        l.waiters.remove(pos);
                    }
                    l.holder = t;
                    let th = &mut self.threads[t as usize];
                    th.spin_locks_held += 1;
                    th.state = TState::Running;
                    th.wait = Wait::None;
                    self.add_carry(t, cause::CACHE_LINE_TRANSFER, lt);
                    return Flow::Continue;
                }
            }
            Wait::Mutex(i) => {
                let m = &mut self.vms[vm].mutexes[i as usize];
                if m.holder == NONE {
                    if let Some(pos) = m.spinners.iter().position(|&w| w == t) {
                        m.spinners.remove(pos);
                    }
                    m.holder = t;
                    let th = &mut self.threads[t as usize];
                    th.state = TState::Running;
                    th.wait = Wait::None;
                    th.retry = false;
                    th.pc += 1;
                    self.add_carry(t, cause::CACHE_LINE_TRANSFER, lt);
                    return Flow::Continue;
                }
            }
            _ => {}
        }
        let (iter, pause, kernel) = self.spin_kind(t);
        let now = self.now;
        let costs = self.vms[vm].costs;
        let ple_visible = pause
            && iter <= self.platform.vmm.ple_gap_ns as f64
            && match self.vms[vm].ple {
                crate::scenario::Ple::Off => false,
                crate::scenario::Ple::Intel => kernel,
                crate::scenario::Ple::Amd => true,
            };
        let sdb = self.vms[vm].sdb;
        let budget = self.threads[t as usize].spin_budget;
        self.threads[t as usize].spin_deadline = now.saturating_add(budget);
        let p = self.vcpus[v as usize].pcpu;
        let others_waiting = self.contended(p);
        let window = self.platform.vmm.ple_window_ns;
        let vc = &mut self.vcpus[v as usize];
        vc.act = Act::Spin;
        vc.spin_since = now;
        vc.spin_iter_ns = iter;
        vc.ple_at = if ple_visible {
            now + (window << vc.ple_shift)
        } else {
            u64::MAX
        };
        vc.sdb_at = if sdb && others_waiting {
            now + costs.sdb_detect
        } else {
            u64::MAX
        };
        let c = match self.threads[t as usize].wait {
            Wait::SpinLock(_) => cause::SPIN_LOCK,
            Wait::Mutex(_) => cause::SPIN_MUTEX,
            Wait::Barrier(_) => cause::SPIN_BARRIER,
            Wait::Shootdown => cause::SPIN_SHOOTDOWN,
            Wait::None => cause::UNATTRIBUTED,
        };
        self.set_acct(v, Acct::On(cause::id8(c)));
        self.reschedule(v);
        Flow::Started
    }

    /// A spin budget ran out: block.
    pub(super) fn spin_gives_up(&mut self, v: u32) {
        self.interrupt_act(v);
        let t = self.vcpus[v as usize].cur;
        let vm = self.threads[t as usize].vm as usize;
        self.threads[t as usize].spin_deadline = u64::MAX;
        self.threads[t as usize].spin_budget = u64::MAX;
        match self.threads[t as usize].wait {
            Wait::Mutex(i) => {
                let m = &mut self.vms[vm].mutexes[i as usize];
                if let Some(pos) = m.spinners.iter().position(|&w| w == t) {
                    m.spinners.remove(pos);
                }
                m.blocked.push_back(t);
                let th = &mut self.threads[t as usize];
                th.retry = true;
                th.wait = Wait::None;
                self.block_current(v, t, TState::Blocked);
            }
            Wait::Barrier(_) => {
                self.block_current(v, t, TState::Blocked);
            }
            _ => {}
        }
        self.resume(v);
    }

    pub(super) fn spin_lock(&mut self, v: u32, t: u32, i: u32) -> Flow {
        let vm = self.threads[t as usize].vm as usize;
        self.vms[vm].ops[counter::SPIN_LOCK] += 1;
        self.threads[t as usize].pc += 1;
        let l = &mut self.vms[vm].spin_locks[i as usize];
        if l.holder == NONE && (l.kind != SpinKind::Ticket || l.waiters.is_empty()) {
            l.holder = t;
            let th = &mut self.threads[t as usize];
            th.spin_locks_held += 1;
            self.add_carry(t, cause::USER_SYNC, self.platform.cpu.atomic_ns);
            return Flow::Continue;
        }
        l.waiters.push(t);
        let th = &mut self.threads[t as usize];
        th.state = TState::Spinning;
        th.wait = Wait::SpinLock(i);
        th.spin_budget = u64::MAX;
        self.start_spin(v, t)
    }

    pub(super) fn spin_unlock(&mut self, v: u32, t: u32, i: u32) -> Flow {
        let vm = self.threads[t as usize].vm as usize;
        let lt = self.platform.cpu.line_transfer_ns;
        self.add_carry(t, cause::USER_SYNC, self.platform.cpu.atomic_ns);
        let th = &mut self.threads[t as usize];
        th.pc += 1;
        th.spin_locks_held = th.spin_locks_held.saturating_sub(1);
        let held = th.spin_locks_held;
        let l = &self.vms[vm].spin_locks[i as usize];
        let next = match l.kind {
            SpinKind::Ticket => l.waiters.first().copied(),
            _ => l
                .waiters
                .iter()
                .copied()
                .find(|&w| self.actively_spinning(w)),
        };
        let l = &mut self.vms[vm].spin_locks[i as usize];
        l.holder = NONE;
        if let Some(w) = next {
            if let Some(pos) = l.waiters.iter().position(|&x| x == w) {
                l.waiters.remove(pos);
            }
            l.holder = w;
            self.threads[w as usize].spin_locks_held += 1;
            self.grant(w, lt);
        }
        if held == 0 && self.policy.safe_point_grace_ns.is_some() && self.safe_point_reached(v) {
            return Flow::Stop;
        }
        Flow::Continue
    }

    pub(super) fn mutex_lock(&mut self, v: u32, t: u32, i: u32) -> Flow {
        let vm = self.threads[t as usize].vm as usize;
        let retry = self.threads[t as usize].retry;
        if !retry {
            self.vms[vm].ops[counter::MUTEX_LOCK] += 1;
        }
        let m = &mut self.vms[vm].mutexes[i as usize];
        if m.holder == NONE {
            m.holder = t;
            let th = &mut self.threads[t as usize];
            th.retry = false;
            th.pc += 1;
            self.add_carry(t, cause::USER_SYNC, self.platform.cpu.sync_op_ns);
            return Flow::Continue;
        }
        if !retry && m.spin_limit > 0 {
            m.spinners.push(t);
            let budget =
                crate::units_from_f64(m.spin_limit as f64 * self.platform.cpu.spin_iter_pause_ns);
            let th = &mut self.threads[t as usize];
            th.state = TState::Spinning;
            th.wait = Wait::Mutex(i);
            th.spin_budget = budget;
            return self.start_spin(v, t);
        }
        m.blocked.push_back(t);
        self.threads[t as usize].retry = true;
        self.block_current(v, t, TState::Blocked)
    }

    pub(super) fn mutex_unlock(&mut self, _v: u32, t: u32, i: u32) -> Flow {
        let vm = self.threads[t as usize].vm as usize;
        let lt = self.platform.cpu.line_transfer_ns;
        let th = &mut self.threads[t as usize];
        th.pc += 1;
        self.add_carry(t, cause::USER_SYNC, self.platform.cpu.sync_op_ns);
        let m = &self.vms[vm].mutexes[i as usize];
        let spinner = m
            .spinners
            .iter()
            .copied()
            .find(|&w| self.actively_spinning(w));
        let m = &mut self.vms[vm].mutexes[i as usize];
        m.holder = NONE;
        if let Some(w) = spinner {
            if let Some(pos) = m.spinners.iter().position(|&x| x == w) {
                m.spinners.remove(pos);
            }
            m.holder = w;
            let th = &mut self.threads[w as usize];
            th.pc += 1;
            th.retry = false;
            th.spin_budget = u64::MAX;
            self.grant(w, lt);
        } else if let Some(w) = m.blocked.pop_front() {
            self.wake_thread(w, Some(t));
        }
        Flow::Continue
    }

    pub(super) fn barrier(&mut self, v: u32, t: u32, i: u32) -> Flow {
        let vm = self.threads[t as usize].vm as usize;
        self.vms[vm].ops[counter::BARRIER] += 1;
        let lt = self.platform.cpu.line_transfer_ns;
        let atomic = self.platform.cpu.atomic_ns;
        let th = &mut self.threads[t as usize];
        th.pc += 1;
        self.add_carry(t, cause::USER_SYNC, atomic);
        let b = &mut self.vms[vm].barriers[i as usize];
        b.arrived += 1;
        if b.arrived >= b.parties {
            b.arrived = 0;
            let mut waiters = std::mem::take(&mut b.waiters);
            for &w in &waiters {
                match self.threads[w as usize].state {
                    TState::Spinning => self.grant(w, lt),
                    TState::Blocked => self.wake_thread(w, Some(t)),
                    _ => {}
                }
            }
            waiters.clear();
            self.vms[vm].barriers[i as usize].waiters = waiters;
            return Flow::Continue;
        }
        b.waiters.push(t);
        let (wait, limit, pause) = (b.wait, b.spin_limit, b.pause);
        let th = &mut self.threads[t as usize];
        th.wait = Wait::Barrier(i);
        match wait {
            BarrierWait::Block => self.block_current(v, t, TState::Blocked),
            BarrierWait::Spin | BarrierWait::SpinThenBlock => {
                th.state = TState::Spinning;
                th.spin_budget = if wait == BarrierWait::Spin {
                    u64::MAX
                } else {
                    let cpu = &self.platform.cpu;
                    let iter = if pause {
                        cpu.spin_iter_pause_ns
                    } else {
                        cpu.spin_iter_nopause_ns
                    };
                    crate::units_from_f64(limit as f64 * iter)
                };
                self.start_spin(v, t)
            }
        }
    }

    pub(super) fn push_op(&mut self, v: u32, t: u32, i: u32) -> Flow {
        let vm = self.threads[t as usize].vm as usize;
        if !self.threads[t as usize].retry {
            self.vms[vm].ops[counter::PUSH] += 1;
        }
        let q = &mut self.vms[vm].queues[i as usize];
        if q.count < q.capacity {
            q.count += 1;
            let popper = q.poppers.pop_front();
            let th = &mut self.threads[t as usize];
            th.retry = false;
            th.pc += 1;
            self.add_carry(t, cause::USER_SYNC, self.platform.cpu.sync_op_ns);
            if let Some(w) = popper {
                self.wake_thread(w, Some(t));
            }
            return Flow::Continue;
        }
        q.pushers.push_back(t);
        self.threads[t as usize].retry = true;
        self.block_current(v, t, TState::Blocked)
    }

    pub(super) fn pop_op(&mut self, v: u32, t: u32, i: u32) -> Flow {
        let vm = self.threads[t as usize].vm as usize;
        if !self.threads[t as usize].retry {
            self.vms[vm].ops[counter::POP] += 1;
        }
        let q = &mut self.vms[vm].queues[i as usize];
        if q.count > 0 {
            q.count -= 1;
            let pusher = q.pushers.pop_front();
            let th = &mut self.threads[t as usize];
            th.retry = false;
            th.pc += 1;
            self.add_carry(t, cause::USER_SYNC, self.platform.cpu.sync_op_ns);
            if let Some(w) = pusher {
                self.wake_thread(w, Some(t));
            }
            return Flow::Continue;
        }
        q.poppers.push_back(t);
        self.threads[t as usize].retry = true;
        self.block_current(v, t, TState::Blocked)
    }
}
