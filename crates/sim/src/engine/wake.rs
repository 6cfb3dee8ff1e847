//! Blocking and waking guest threads: a blocked thread leaves its vCPU; a
//! woken one goes to its last vCPU if idle, else to any idle vCPU, else back
//! to its last vCPU's queue, and an idle target is kicked (an IPI if halted, a
//! flag if polling). The waker pays for the wake and the IPI.

use super::flow::Flow;
use super::{exit, Acct, Act, HostState, Sim, TState, Wait, NONE};
use crate::breakdown as cause;
use crate::events::Kind;

/// Who kicks a vCPU: a timer, or a thread that paid for the IPI when it
/// decided to wake (see `Sim::wake_thread`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sender {
    Timer,
    Paid(u32),
}

impl Sim {
    /// The thread on `v` blocks (or sleeps): the guest switches away.
    ///
    /// A sleep programs the LAPIC timer (the TSC-deadline write): in a VM an
    /// exit with or without APICv, which virtualizes interrupt delivery and
    /// EOI but not the timer (Intel SDM vol. 3, ch. 30 "APIC Virtualization
    /// and Virtual Interrupts": the TSC-deadline MSR is not among the
    /// virtualized registers). Counted as `timer`, charged as an APIC write
    /// that still exits (`exit_apic_icr`).
    pub(super) fn block_current(&mut self, v: u32, t: u32, state: TState) -> Flow {
        let vm = self.threads[t as usize].vm as usize;
        self.threads[t as usize].state = state;
        if state == TState::Blocked {
            self.vms[vm].blocks += 1;
        }
        if state == TState::Sleeping && self.vms[vm].costs.virtualized {
            self.count_exits(v, exit::TIMER, 1);
            let exit_ns = self.vms[vm].costs.exit;
            self.add_overhead(v, cause::EXIT_APIC_ICR, exit_ns);
        }
        self.vms[vm].cs_voluntary += 1;
        let cs = self.vms[vm].costs.kernel.context_switch_ns;
        self.set_cur(v, NONE);
        self.add_overhead(v, cause::KERNEL_SCHED, cs);
        Flow::Again
    }

    /// Make a blocked or sleeping thread runnable. `waker`: the thread that
    /// woke it (pays the wake and any IPI), or None for a timer.
    ///
    /// A waker's wakes are serial, as in the kernel (`futex_wake` runs
    /// `try_to_wake_up` per waiter, each with its IPI): the thread becomes
    /// runnable once the waker has done the wake work carried so far, not at
    /// the instant of the release. Kicking all of a barrier's waiters at one
    /// instant made them leave in lockstep and collide on the next lock, a
    /// convoy that host contention broke up, so K VMs on a shared host
    /// could each finish sooner than one VM alone (weighted speedup > K).
    pub(super) fn wake_thread(&mut self, t: u32, waker: Option<u32>) {
        let th = &mut self.threads[t as usize];
        th.state = TState::Running;
        th.wait = Wait::None;
        th.spin_deadline = u64::MAX;
        let vm = th.vm as usize;
        self.vms[vm].wakeups += 1;
        let Some(w) = waker else {
            self.make_runnable(t, Sender::Timer);
            return;
        };
        let wake = self.vms[vm].costs.kernel.wake_ns;
        self.add_carry(w, cause::KERNEL_FUTEX, wake);
        // The waker decides now whether the target needs an IPI (it looks
        // idle and not polling) and pays the send now; the kick lands when
        // the waker's work up to and including this send is done.
        let target = self.wake_target(t);
        if target != self.threads[w as usize].vcpu && self.vcpu_idle(target) {
            let vc = &self.vcpus[target as usize];
            let halted = match vc.host {
                HostState::Halted => true,
                HostState::Running => matches!(vc.act, Act::Halting | Act::HaltPoll),
                HostState::Queued | HostState::Parked => false,
            };
            if halted && self.vms[vm].costs.virtualized {
                self.send_ipi_cost(Some(w), vm);
            }
        }
        let at = self.now + self.threads[w as usize].carry;
        self.push(
            at,
            Kind::WakeThread {
                thread: t,
                waker: w,
            },
        );
    }

    /// A deferred wake (see [`Sim::wake_thread`]) takes effect.
    /// False when the thread is no longer waiting to be queued (a stale event).
    pub(super) fn wake_arrives_thread(&mut self, t: u32, waker: u32) -> bool {
        let live = self.threads[t as usize].state == TState::Running;
        if live {
            self.make_runnable(t, Sender::Paid(waker));
        }
        live
    }

    /// Queue woken thread `t` on its target vCPU and kick that vCPU if idle.
    fn make_runnable(&mut self, t: u32, sender: Sender) {
        let target = self.wake_target(t);
        let was_idle = self.vcpu_idle(target);
        let rq_was_empty = self.vcpus[target as usize].rq.is_empty();
        self.rq_push_back(target, t);
        self.queued_inc(target);
        if let Sender::Paid(w) = sender {
            if self.threads[w as usize].vcpu == target && self.vcpus[target as usize].cur == w {
                return;
            }
        }
        if was_idle {
            self.kick(target);
        } else if rq_was_empty {
            let vc = &self.vcpus[target as usize];
            if vc.host == HostState::Running && matches!(vc.act, Act::Segment | Act::Spin) {
                self.reschedule(target);
            }
        }
    }

    /// Bring vCPU `v`'s bit in `Sim::vcpu_rq_bits` up to date after its
    /// run queue changed.
    #[inline]
    pub(super) fn vcpu_rq_bit(&mut self, v: u32) {
        let queued = !self.vcpus[v as usize].rq.is_empty();
        super::host::assign_bit(&mut self.vcpu_rq_bits, v, queued);
    }

    /// A thread joined vCPU `v`'s run queue: the VM's count of queued
    /// threads and the vCPU's bit follow.
    #[inline]
    pub(super) fn queued_inc(&mut self, v: u32) {
        let vm = self.vcpus[v as usize].vm;
        self.vms[vm as usize].queued_threads += 1;
        self.vcpu_rq_bit(v);
    }

    /// A thread left vCPU `v`'s run queue.
    #[inline]
    pub(super) fn queued_dec(&mut self, v: u32) {
        let vm = self.vcpus[v as usize].vm;
        self.vms[vm as usize].queued_threads -= 1;
        self.vcpu_rq_bit(v);
    }

    fn vcpu_idle(&self, v: u32) -> bool {
        let vc = &self.vcpus[v as usize];
        vc.cur == NONE && vc.rq.is_empty()
    }

    fn wake_target(&self, t: u32) -> u32 {
        let last = self.threads[t as usize].vcpu;
        if self.vcpu_idle(last) {
            return last;
        }
        let vm = &self.vms[self.threads[t as usize].vm as usize];
        let (first, n) = (vm.first_vcpu, vm.n_vcpus);
        let off = last - first;
        (1..n)
            .map(|i| first + (off + i) % n)
            .find(|&u| self.vcpu_idle(u))
            .unwrap_or(last)
    }

    /// Tell idle vCPU `u` it has work: a flag if it polls, an IPI if halted.
    ///
    /// Whichever way it idled, the vCPU then switches from its idle context
    /// to the woken thread and returns from the thread's blocking call
    /// (`kernel.switch_in_ns`, cause `kernel_sched`): kernel work on the
    /// woken vCPU, not idle. A block straight to a queued thread pays only
    /// its own switch (`block_current`). Before, the switch-in was free, so
    /// the calibration read it as the waker's `wake_ns`, during which the
    /// waiter's vCPU counted as idle (docs/sim-calibration.md, "Switch-in from idle").
    fn kick(&mut self, u: u32) {
        let vm = self.vcpus[u as usize].vm as usize;
        let costs = self.vms[vm].costs;
        let switch_in = costs.kernel.switch_in_ns;
        let vc = &self.vcpus[u as usize];
        match vc.host {
            HostState::Running => match vc.act {
                Act::IdlePoll => {
                    self.interrupt_act(u);
                    self.switch_in(u, switch_in);
                    self.defer(u, cause::WAKE_LATENCY, costs.poll_notice);
                }
                Act::Halting | Act::HaltPoll => {
                    // The waker paid for the send when it decided to wake.
                    if costs.virtualized && !costs.apicv {
                        self.count_exits(u, exit::IPI_RECEIVE, 1);
                    }
                    self.interrupt_act(u);
                    self.switch_in(u, switch_in);
                    self.defer(u, cause::WAKE_LATENCY, costs.halt_poll_wake);
                }
                // Still switching away from the thread that blocked: it
                // picks the woken thread in that same switch.
                _ => {}
            },
            HostState::Queued | HostState::Parked => {
                // Preempted in its idle loop, not in the switch away from
                // a blocked thread (that one is still pending).
                if self.pending_overhead(u, cause::KERNEL_SCHED) == 0 {
                    self.switch_in(u, switch_in);
                }
            }
            HostState::Halted => {
                self.switch_in(u, switch_in);
                if costs.virtualized {
                    // The interrupt is injected (or, with APICv, delivered
                    // as a virtual interrupt) at the next entry; its EOI
                    // exits without APICv only. The halted vCPU's timer
                    // fired in the host: no exit of its own.
                    let c = self.ipi_receive_cause(vm);
                    self.add_overhead(u, c, costs.ipi_receive);
                    if !costs.apicv {
                        self.count_exits(u, exit::IPI_RECEIVE, 1);
                    }
                }
                // Bare metal: the idle loop MWAITs on its need-resched flag
                // (TIF_POLLING_NRFLAG), so a wakeup is a store, not an IPI; it
                // costs only the C-state exit latency.
                self.start_wake(u, costs.wake_latency);
            }
        }
    }

    /// Idle vCPU `u` owes the switch to the thread woken for it (none when
    /// the platform has no switch-in cost: nothing changes then).
    fn switch_in(&mut self, u: u32, ns: u64) {
        if ns > 0 {
            self.add_overhead(u, cause::KERNEL_SCHED, ns);
        }
    }

    /// The waker pays for sending an IPI (an ICR-write exit in a VM).
    fn send_ipi_cost(&mut self, waker: Option<u32>, vm: usize) {
        let Some(w) = waker else { return };
        let costs = self.vms[vm].costs;
        self.vms[vm].ipis += 1;
        let c = self.ipi_send_cause(vm);
        self.add_carry(w, c, costs.ipi_send);
        let wv = self.threads[w as usize].vcpu;
        if costs.virtualized {
            self.count_exits(wv, exit::IPI_SEND, 1);
        }
    }

    /// Let running vCPU `v` continue after `ns` (used to avoid re-entering
    /// another vCPU's interpreter from inside this one's).
    pub(super) fn defer(&mut self, v: u32, c: usize, ns: u64) {
        let now = self.now;
        let vc = &mut self.vcpus[v as usize];
        vc.act = Act::Overhead;
        vc.act_end = now + ns + std::mem::take(&mut vc.overhead_left);
        let at = vc.act_end;
        self.add_overhead_part(v, c, ns);
        self.set_acct(v, Acct::Overhead);
        self.schedule_step(v, at);
    }
}
