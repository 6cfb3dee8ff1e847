//! Idle vCPUs and the interrupts that reach them: a vCPU with nothing to run
//! idles by its idle mode (HLT: an exit, then the host blocks it, maybe after
//! halt-polling; or a polling loop that keeps the pCPU), and a shootdown IPI
//! wakes, interrupts or waits for its target.

use super::{exit, Acct, Act, HostState, Sim, Wait, NONE};
use crate::breakdown as cause;
use crate::events::Kind;
use crate::scenario::Idle;

impl Sim {
    /// Nothing to run on `v`.
    pub(super) fn go_idle(&mut self, v: u32) {
        let vm = self.vcpus[v as usize].vm as usize;
        if self.vms[vm].done_threads == self.vms[vm].n_threads {
            // The VM has finished: its vCPUs stop for good.
            let vc = &mut self.vcpus[v as usize];
            vc.act = Act::Off;
            vc.host = HostState::Halted;
            vc.gen = vc.gen.wrapping_add(1);
            vc.step_at = u64::MAX;
            self.set_acct(v, Acct::Off);
            self.release(v);
            return;
        }
        let costs = self.vms[vm].costs;
        match self.vms[vm].spec_idle {
            Idle::Poll => {
                let vc = &mut self.vcpus[v as usize];
                vc.act = Act::IdlePoll;
                vc.sdb_at = u64::MAX;
                self.set_acct(v, Acct::On(cause::id8(cause::IDLE_POLL)));
                let p = self.vcpus[v as usize].pcpu;
                if self.vms[vm].sdb && self.contended(p) {
                    self.vcpus[v as usize].sdb_at = self.now + costs.sdb_detect;
                }
                self.reschedule(v);
            }
            Idle::Hlt | Idle::HaltPoll(_) => {
                if costs.virtualized {
                    let now = self.now;
                    let vc = &mut self.vcpus[v as usize];
                    self.vm_exits[vc.vm as usize][exit::HLT] += 1;
                    vc.act = Act::Halting;
                    vc.act_end = now + costs.hlt_exit;
                    self.set_acct(v, Acct::On(cause::id8(cause::EXIT_HLT)));
                    self.schedule_step(v, now + costs.hlt_exit);
                } else if costs.native_idle_poll > 0 {
                    // Bare metal: poll first, then C1 (see halting_done).
                    let now = self.now;
                    let vc = &mut self.vcpus[v as usize];
                    vc.act = Act::HaltPoll;
                    vc.act_end = now + costs.native_idle_poll;
                    self.set_acct(v, Acct::On(cause::id8(cause::HALT_POLL)));
                    self.schedule_step(v, now + costs.native_idle_poll);
                } else {
                    self.halt(v);
                }
            }
        }
    }

    /// The HLT exit has been handled: halt-poll or block.
    pub(super) fn halting_done(&mut self, v: u32) {
        let vm = self.vcpus[v as usize].vm as usize;
        let p = self.vcpus[v as usize].pcpu;
        if let Idle::HaltPoll(w) = self.vms[vm].spec_idle {
            // KVM polls only when nothing else wants the pCPU.
            if w > 0 && !self.contended(p) {
                let now = self.now;
                let vc = &mut self.vcpus[v as usize];
                vc.act = Act::HaltPoll;
                vc.act_end = now + w;
                self.set_acct(v, Acct::On(cause::id8(cause::HALT_POLL)));
                self.schedule_step(v, now + w);
                return;
            }
        }
        self.halt(v);
    }

    /// Block the vCPU in the host: it leaves its pCPU until kicked.
    pub(super) fn halt(&mut self, v: u32) {
        let vc = &mut self.vcpus[v as usize];
        vc.act = Act::Off;
        vc.host = HostState::Halted;
        vc.gen = vc.gen.wrapping_add(1);
        vc.step_at = u64::MAX;
        self.set_acct(v, Acct::Away(cause::id8(cause::IDLE_HALTED)));
        self.release(v);
    }

    /// A shootdown IPI from thread `from` reaches vCPU `u`.
    pub(super) fn ipi_arrives(&mut self, u: u32, from: u32) {
        let vm = self.vcpus[u as usize].vm as usize;
        let costs = self.vms[vm].costs;
        let recv = self.ipi_receive_cause(vm);
        let q = &mut self.irq_queues[u as usize];
        q.push_back(from);
        let vc = &mut self.vcpus[u as usize];
        if vc.irq_front == NONE {
            vc.irq_front = from;
        }
        if costs.virtualized && !costs.apicv {
            self.vm_exits[vc.vm as usize][exit::IPI_RECEIVE] += 1;
            if vc.host == HostState::Running {
                self.count_kick_exit(u);
            }
        }
        match self.vcpus[u as usize].host {
            HostState::Running => match self.vcpus[u as usize].act {
                Act::Handler => {}
                Act::Halting | Act::HaltPoll => {
                    self.interrupt_act(u);
                    self.add_overhead(u, cause::WAKE_LATENCY, costs.halt_poll_wake);
                    self.resume(u);
                }
                _ => {
                    self.interrupt_act(u);
                    self.add_overhead(u, recv, costs.ipi_receive);
                    self.resume(u);
                }
            },
            HostState::Queued | HostState::Parked => {
                self.add_overhead(u, recv, costs.ipi_receive);
            }
            HostState::Halted => {
                self.add_overhead(u, recv, costs.ipi_receive);
                self.start_wake(u, costs.wake_latency);
            }
        }
    }

    /// A halted vCPU was kicked: its host thread wakes after `latency`, which
    /// the accounting charges as block-to-wake latency.
    pub(super) fn start_wake(&mut self, u: u32, latency: u64) {
        let vc = &mut self.vcpus[u as usize];
        if !vc.wake_pending {
            vc.wake_pending = true;
            self.set_acct(u, Acct::Away(cause::id8(cause::WAKE_LATENCY)));
            self.push(self.now + latency, Kind::Wake { vcpu: u });
        }
    }

    /// A shootdown handler finished on `u`: acknowledge.
    pub(super) fn handler_done(&mut self, u: u32) {
        let vc = &mut self.vcpus[u as usize];
        vc.act = Act::Off;
        let q = &mut self.irq_queues[u as usize];
        let front = q.pop_front();
        vc.irq_front = q.front().copied().unwrap_or(NONE);
        if let Some(t) = front.filter(|f| f & super::io::IO_IRQ != 0) {
            self.io_handler_done(t & !super::io::IO_IRQ);
        } else if let Some(from) = front {
            let th = &mut self.threads[from as usize];
            th.acks_pending = th.acks_pending.saturating_sub(1);
            if th.acks_pending == 0 && th.wait == Wait::Shootdown {
                let lt = self.platform.cpu.line_transfer_ns;
                self.grant(from, lt);
            }
        }
        if self.vcpus[u as usize].host == HostState::Running
            && self.vcpus[u as usize].act == Act::Off
        {
            self.resume(u);
        }
    }
}
