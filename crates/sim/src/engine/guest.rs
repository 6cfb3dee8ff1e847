//! The guest OS: runs the program's threads on the VM's vCPUs.
//!
//! Each vCPU has a run queue of ready threads. A vCPU with no thread first
//! steals a waiting thread from the busiest sibling (guest load balancing),
//! else idles by its idle mode (`idle.rs`). Blocking and waking threads, and
//! kicking the vCPU a woken thread goes to, are in `wake.rs`. Threads sharing
//! a vCPU time-share it with the guest slice. Shootdowns IPI every other vCPU
//! and spin in the kernel for the acks.
//!
//! The interpreter runs a thread's ops: consecutive timed ops (compute, touch,
//! atomics, loop control) are fused into one segment, so a thread costs one
//! event per synchronization op rather than one per op; the counters are
//! still per op.

use super::flow::Flow;
use super::{exit, Acct, Act, HostState, Sim, TState, Wait, NONE};
use crate::breakdown as cause;
use crate::code::{counter, Ins, NO_SLOT};
use crate::events::Kind;

/// Fused segments are cut at this length so that the remote-sharing factor of
/// shared touches follows placement changes.
const FUSE_MAX_NS: u64 = 500_000;

/// A fused segment holding a write walk of a shared buffer is cut at this
/// length: its line-transfer charge is decided when it is fused (by whether
/// a co-writer runs then, `cache.rs`), so a co-writer that starts or stops
/// running changes the charge within this much of the walker's work. Short
/// against a barrier-to-barrier step of such programs (canneal at 2 threads:
/// ~0.3 ms), long against one iteration of their loops (~1 µs).
const SHARED_WRITE_FUSE_MAX_NS: u64 = 20_000;

impl Sim {
    /// A running vCPU decides what to do next.
    pub(super) fn resume(&mut self, v: u32) {
        loop {
            let now = self.now;
            let vc = &mut self.vcpus[v as usize];
            debug_assert_eq!(vc.host, HostState::Running);
            if vc.overhead_left > 0
                && vc.irq_front == NONE
                && vc.cur != NONE
                && self.fold_overhead(v)
            {
                continue;
            }
            let vc = &mut self.vcpus[v as usize];
            if vc.overhead_left > 0 {
                let d = vc.overhead_left;
                vc.overhead_left = 0;
                vc.act = Act::Overhead;
                vc.act_end = now + d;
                self.set_acct(v, Acct::Overhead);
                self.schedule_step(v, now + d);
                return;
            }
            if vc.irq_front != NONE {
                let front = vc.irq_front;
                // A handler interrupted by preemption resumes where it was:
                // restarting it could never finish under short host slices.
                let io = front & super::io::IO_IRQ != 0;
                let left = std::mem::take(&mut vc.handler_left);
                let kernel = &self.vms[vc.vm as usize].costs.kernel;
                let d = match left {
                    0 if io => kernel.wake_ns,
                    0 => kernel.shootdown_handler_ns,
                    left => left,
                };
                let vc = &mut self.vcpus[v as usize];
                vc.act = Act::Handler;
                vc.act_end = now + d;
                let c = if io {
                    if left == 0 {
                        self.io_handler_starts(front & !super::io::IO_IRQ);
                    }
                    cause::KERNEL_IO_HANDLER
                } else {
                    cause::KERNEL_SHOOTDOWN_HANDLER
                };
                self.set_acct(v, Acct::On(cause::id8(c)));
                self.schedule_step(v, now + d);
                return;
            }
            if vc.cur == NONE && !self.pick_thread(v) {
                self.go_idle(v);
                return;
            }
            let t = self.vcpus[v as usize].cur;
            match self.run_thread(v, t) {
                Flow::Started | Flow::Stop => return,
                Flow::Again | Flow::Continue => continue,
            }
        }
    }

    /// When the current thread's next step is timed work, pay the pending
    /// overhead as part of that segment: same end time, one event fewer.
    fn fold_overhead(&mut self, v: u32) -> bool {
        let vc = &self.vcpus[v as usize];
        if vc.next_device_in != u64::MAX {
            // Device exits are timed by running time; keep overhead apart.
            return false;
        }
        if self.vms[vc.vm as usize].costs.sdb_fp > 0.0 {
            // SDB false positives preempt guest work only: folded into a
            // segment, the exit and switch costs of a dispatch would count as
            // guest work, and a false positive inside them would preempt the
            // vCPU before any progress, adding another exit each time (a
            // livelock the fuzz test found with short slices and idle pollers).
            return false;
        }
        let t = vc.cur;
        let th = &self.threads[t as usize];
        if th.state != TState::Running {
            return false;
        }
        let timed =
            th.seg_left > 0 || matches!(self.ins(t), Ins::Compute { .. } | Ins::Touch { .. });
        if !timed {
            return false;
        }
        self.charge_acct(v);
        let vc = &mut self.vcpus[v as usize];
        let d = std::mem::take(&mut vc.overhead_left);
        let th = &mut self.threads[t as usize];
        let segment = th.seg_left > 0;
        if segment {
            th.seg_left += d;
            th.seg_k_live = true;
        } else {
            th.carry += d;
        }
        self.overhead_into_thread(v, t, segment);
        true
    }

    /// Take the next ready thread: own queue first, then the busiest sibling's.
    fn pick_thread(&mut self, v: u32) -> bool {
        let t = match self.rq_pop_front(v) {
            Some(t) => {
                self.queued_dec(v);
                t
            }
            None => {
                let vm = &self.vms[self.vcpus[v as usize].vm as usize];
                if vm.queued_threads == 0 {
                    // No sibling has a queued thread: skip the scan (it
                    // touches every vCPU of the VM, one cache miss each).
                    return false;
                }
                let (first, n) = (vm.first_vcpu, vm.n_vcpus);
                let mut best = NONE;
                let mut best_len = 0;
                // Like Linux's idle balance, only pull from a vCPU that is
                // busy running something else (a halted vCPU's queued thread
                // is about to run there). Siblings with an empty queue could
                // never be picked: visit only those with queued threads, in
                // index order (the first of the longest queues wins).
                let mut u = first;
                while let Some(w) = super::host::next_bit(&self.vcpu_rq_bits, u, first + n) {
                    let uc = &self.vcpus[w as usize];
                    let l = uc.rq.len();
                    if w != v && uc.cur != NONE && l > best_len {
                        best = w;
                        best_len = l;
                    }
                    u = w + 1;
                }
                if best == NONE {
                    return false;
                }
                match self.rq_pop_back(best) {
                    Some(t) => {
                        self.queued_dec(best);
                        t
                    }
                    None => return false,
                }
            }
        };
        let slice = self.platform.cpu.guest_slice_ns;
        self.set_cur(v, t);
        let vc = &mut self.vcpus[v as usize];
        vc.slice_end = self.now + slice;
        self.threads[t as usize].vcpu = v;
        true
    }

    /// Interpret thread `t` (current on running vCPU `v`) until it starts an
    /// activity or leaves the vCPU.
    fn run_thread(&mut self, v: u32, t: u32) -> Flow {
        self.io_note_running(t);
        match self.threads[t as usize].state {
            TState::Running => {}
            TState::Spinning => match self.start_spin(v, t) {
                Flow::Continue => {}
                f => return f,
            },
            _ => {
                self.set_cur(v, NONE);
                return Flow::Again;
            }
        }
        let left = self.threads[t as usize].seg_left;
        if left > 0 {
            self.start_segment(v, left);
            return Flow::Started;
        }
        loop {
            // Close the previous segment's accounting before its carried
            // costs become this segment's.
            self.charge_acct(v);
            let th = &mut self.threads[t as usize];
            let acc = std::mem::take(&mut th.carry);
            if acc > 0 {
                th.seg_k_live = true;
                self.carry_into_segment(t);
            } else {
                // `carry` is the sum of `kcarry`: nothing to move.
                debug_assert!(self.carry_is_zero(t));
            }
            let vm = self.threads[t as usize].vm as usize;
            let (ins, mut acc, transfers) = self.fuse_timed_ops(v, t, vm, acc);
            if transfers > 0 {
                // Line transfers of shared write walks, charged by cause.
                self.transfers_into_segment(t, transfers);
                acc += transfers;
            }
            if acc > 0 {
                // Spend the fused work first; the op at `pc` runs afterwards.
                self.threads[t as usize].seg_left = acc;
                self.start_segment(v, acc);
                return Flow::Started;
            }
            match self.untimed_op(v, t, vm, ins) {
                Flow::Continue => continue,
                f => return f,
            }
        }
    }

    /// Run thread `t`'s timed ops (compute, touch, atomics, loop and drain
    /// control) from its `pc` on, adding their time to `acc`, until an
    /// untimed op or the fuse limit. Returns the op that stopped it (`Exit`
    /// at the limit: nothing runs after the segment but the interpreter
    /// again), the time, and the line transfers of shared write walks.
    /// Always inlined: this loop is the interpreter's hot path, and as its
    /// own function the state it keeps in registers would go through
    /// memory.
    #[inline(always)]
    fn fuse_timed_ops(&mut self, v: u32, t: u32, vm: usize, mut acc: u64) -> (Ins, u64, u64) {
        let mut transfers = 0u64;
        let mut fuse_max = FUSE_MAX_NS;
        let ins = loop {
            let ins = self.ins(t);
            let th = &mut self.threads[t as usize];
            match ins {
                Ins::Compute { ns, iters } => {
                    let ops = &mut self.vms[vm].ops;
                    ops[counter::COMPUTE] += 1;
                    ops[counter::COMPUTE_ITERS] += iters;
                    acc += ns;
                    th.pc += 1;
                }
                Ins::Touch {
                    ns,
                    bytes,
                    shared,
                    slot,
                    transfer_ns,
                } => {
                    th.pc += 1;
                    let ops = &mut self.vms[vm].ops;
                    ops[counter::TOUCH] += 1;
                    ops[counter::TOUCH_BYTES] += bytes;
                    acc += if shared { self.shared_cost(v, ns) } else { ns };
                    if slot != NO_SLOT && self.vms[vm].contended_slots >> slot & 1 != 0 {
                        transfers += self.shared_write_cost(vm, slot, transfer_ns);
                        fuse_max = SHARED_WRITE_FUSE_MAX_NS;
                    }
                }
                Ins::Atomic => {
                    self.vms[vm].ops[counter::ATOMIC] += 1;
                    acc += self.platform.cpu.atomic_ns;
                    th.pc += 1;
                }
                Ins::LoopBegin { count, end } => {
                    if count == 0 || end == th.pc + 1 {
                        th.pc = end + 1;
                    } else {
                        th.loops.push((th.pc, count));
                        th.pc += 1;
                    }
                }
                Ins::DrainClaim { pool, end } => {
                    if acc > 0 {
                        // Claim when the thread gets here: after the
                        // work fused ahead of it, not at its start (a
                        // thread would otherwise hold the next unit
                        // while it works on this one).
                        break ins;
                    }
                    // Charged like an `atomic` op: one locked RMW.
                    acc += self.platform.cpu.atomic_ns;
                    match self.vms[vm].pools.get_mut(pool as usize) {
                        Some(left) if *left > 0 => {
                            *left -= 1;
                            th.pc += 1;
                        }
                        _ => th.pc = end + 1,
                    }
                }
                Ins::DrainEnd { begin } => th.pc = begin,
                Ins::LoopEnd { begin } => {
                    let again = match th.loops.last_mut() {
                        Some(top) => {
                            top.1 -= 1;
                            top.1 > 0
                        }
                        None => false,
                    };
                    if again {
                        th.pc = begin + 1;
                    } else {
                        th.loops.pop();
                        th.pc += 1;
                    }
                }
                other => break other,
            }
            if acc + transfers >= fuse_max {
                break Ins::Exit;
            }
        };
        (ins, acc, transfers)
    }

    /// Run thread `t`'s untimed op `ins` (synchronization, sleep, yield,
    /// shootdown, I/O, exit). Inlined into the interpreter like the timed
    /// ops' loop.
    #[inline(always)]
    fn untimed_op(&mut self, v: u32, t: u32, vm: usize, ins: Ins) -> Flow {
        match ins {
            Ins::SpinLock(i) => self.spin_lock(v, t, i),
            Ins::SpinUnlock(i) => self.spin_unlock(v, t, i),
            Ins::MutexLock(i) => self.mutex_lock(v, t, i),
            Ins::MutexUnlock(i) => self.mutex_unlock(v, t, i),
            Ins::Barrier(i) => self.barrier(v, t, i),
            Ins::Push(i) => self.push_op(v, t, i),
            Ins::Pop(i) => self.pop_op(v, t, i),
            Ins::Sleep(ns) => {
                self.vms[vm].ops[counter::SLEEP] += 1;
                self.threads[t as usize].pc += 1;
                self.push(self.now + ns, Kind::Timer { thread: t });
                self.block_current(v, t, TState::Sleeping)
            }
            Ins::Yield(k) => self.yield_op(v, t, k),
            Ins::Shootdown => self.shootdown(v, t),
            Ins::Io { device, service_ns } => self.io_submit(v, t, device, service_ns),
            Ins::Exit => self.thread_exit(v, t),
            // Timed ops are handled in `fuse_timed_ops`.
            _ => Flow::Continue,
        }
    }

    fn start_segment(&mut self, v: u32, d: u64) {
        let now = self.now;
        let vc = &mut self.vcpus[v as usize];
        vc.act = Act::Segment;
        vc.seg_start = now;
        vc.act_end = now + d;
        self.set_acct(v, Acct::Segment);
        self.reschedule(v);
    }

    /// (Re)compute the vCPU's next decision point for a segment or a spin.
    pub(super) fn reschedule(&mut self, v: u32) {
        let now = self.now;
        let vc = &self.vcpus[v as usize];
        let mut at = match vc.act {
            Act::Segment => {
                let dev = vc.seg_start.saturating_add(vc.next_device_in);
                vc.act_end.min(dev)
            }
            Act::Spin => {
                let th = &self.threads[vc.cur as usize];
                th.spin_deadline.min(vc.ple_at).min(vc.sdb_at)
            }
            Act::IdlePoll => vc.sdb_at,
            _ => return,
        };
        let kernel_spin =
            vc.act == Act::Spin && self.threads[vc.cur as usize].wait == Wait::Shootdown;
        if vc.act != Act::IdlePoll && !vc.rq.is_empty() && !kernel_spin {
            at = at.min(vc.slice_end.max(now));
        }
        if at == u64::MAX {
            let vc = &mut self.vcpus[v as usize];
            vc.gen = vc.gen.wrapping_add(1);
            vc.step_at = u64::MAX;
        } else {
            self.schedule_step(v, at.max(now));
        }
    }

    pub(super) fn segment_done(&mut self, v: u32) {
        let now = self.now;
        let vc = &mut self.vcpus[v as usize];
        let elapsed = now - vc.seg_start;
        vc.next_device_in = vc.next_device_in.saturating_sub(elapsed);
        vc.act = Act::Off;
        let t = vc.cur;
        let th = &mut self.threads[t as usize];
        th.cpu_ns += elapsed;
        th.seg_left = 0;
        self.charge_acct(v);
        self.resume(v);
    }

    /// Guest time slice over with other threads waiting: switch threads.
    pub(super) fn guest_tick(&mut self, v: u32) {
        let vc = &self.vcpus[v as usize];
        let t = vc.cur;
        let kernel_spin = self.threads[t as usize].wait == Wait::Shootdown;
        if vc.rq.is_empty() || self.now < vc.slice_end || kernel_spin {
            self.reschedule(v);
            return;
        }
        self.interrupt_act(v);
        let vm = self.vcpus[v as usize].vm;
        self.vms[vm as usize].cs_involuntary += 1;
        let cs = self.vms[vm as usize].costs.kernel.context_switch_ns;
        self.rq_push_back(v, t);
        self.set_cur(v, NONE);
        self.queued_inc(v);
        self.add_overhead(v, cause::KERNEL_SCHED, cs);
        self.resume(v);
    }

    /// Stop the running vCPU's activity, keeping its progress.
    pub(super) fn interrupt_act(&mut self, v: u32) {
        let now = self.now;
        let vc = &mut self.vcpus[v as usize];
        match vc.act {
            Act::Segment => {
                let elapsed = now.saturating_sub(vc.seg_start);
                vc.next_device_in = vc.next_device_in.saturating_sub(elapsed);
                let left = vc.act_end.saturating_sub(now);
                let th = &mut self.threads[vc.cur as usize];
                th.seg_left = left;
                th.cpu_ns += elapsed;
            }
            Act::Spin => self.end_spin(v),
            Act::Overhead => {
                vc.overhead_left += vc.act_end.saturating_sub(now);
            }
            Act::Handler => {
                vc.handler_left = vc.act_end.saturating_sub(now).max(1);
            }
            _ => {}
        }
        let vc = &mut self.vcpus[v as usize];
        vc.act = Act::Off;
        vc.gen = vc.gen.wrapping_add(1);
        vc.step_at = u64::MAX;
        self.set_acct(v, Acct::On(cause::id8(cause::UNATTRIBUTED)));
    }

    /// Close a spin's accounting (time and iterations).
    fn end_spin(&mut self, v: u32) {
        let vc = &self.vcpus[v as usize];
        let elapsed = self.now.saturating_sub(vc.spin_since);
        let iter = vc.spin_iter_ns;
        let t = vc.cur;
        let vm = vc.vm;
        let th = &mut self.threads[t as usize];
        th.cpu_ns += elapsed;
        if th.spin_budget != u64::MAX {
            // Budgets count spinning time only: a preempted spinner resumes
            // with what it has left.
            th.spin_budget = th.spin_budget.saturating_sub(elapsed);
        }
        self.vms[vm as usize].spin_iters += elapsed as f64 / iter;
    }

    /// Start a shootdown from thread `t` on `v`.
    fn shootdown(&mut self, v: u32, t: u32) -> Flow {
        let vm = self.threads[t as usize].vm as usize;
        self.vms[vm].ops[counter::SHOOTDOWN] += 1;
        self.threads[t as usize].pc += 1;
        let (first, n) = (self.vms[vm].first_vcpu, self.vms[vm].n_vcpus);
        let costs = self.vms[vm].costs;
        let handler = costs.kernel.shootdown_handler_ns;
        if n == 1 {
            self.add_carry(t, cause::KERNEL_SHOOTDOWN_HANDLER, handler);
            return Flow::Continue;
        }
        let mut sent = 0u64;
        for u in (first..first + n).filter(|&u| u != v) {
            sent += costs.ipi_send;
            self.push(self.now + sent, Kind::Ipi { vcpu: u, from: t });
        }
        self.vms[vm].ipis += (n - 1) as u64;
        if costs.virtualized {
            self.count_exits(v, exit::IPI_SEND, (n - 1) as u64);
        }
        let th = &mut self.threads[t as usize];
        th.acks_pending = n - 1;
        th.state = TState::Spinning;
        th.wait = Wait::Shootdown;
        th.spin_deadline = u64::MAX;
        // Sending, then the local flush, then spin for the acks.
        let send = self.ipi_send_cause(vm);
        self.add_overhead(v, send, sent);
        self.add_overhead(v, cause::KERNEL_SHOOTDOWN_HANDLER, handler);
        Flow::Again
    }

    fn yield_op(&mut self, v: u32, t: u32, k: u64) -> Flow {
        let vm = self.threads[t as usize].vm as usize;
        self.vms[vm].ops[counter::YIELD] += k;
        self.threads[t as usize].pc += 1;
        let yield_ns = self.vms[vm].costs.kernel.yield_ns;
        self.add_carry(t, cause::KERNEL_SCHED, k * yield_ns);
        if self.vcpus[v as usize].rq.is_empty() {
            return Flow::Continue;
        }
        self.vms[vm].cs_voluntary += 1;
        let cs = self.vms[vm].costs.kernel.context_switch_ns;
        self.rq_push_back(v, t);
        self.set_cur(v, NONE);
        self.queued_inc(v);
        self.add_overhead(v, cause::KERNEL_SCHED, cs);
        Flow::Again
    }

    fn thread_exit(&mut self, v: u32, t: u32) -> Flow {
        let now = self.now;
        let th = &mut self.threads[t as usize];
        th.state = TState::Done;
        th.end_ns = now;
        let vm = th.vm as usize;
        self.vms[vm].done_threads += 1;
        if self.vms[vm].done_threads == self.vms[vm].n_threads {
            self.vms[vm].end_ns = now;
            self.vms_done += 1;
            self.partition_vm_done(u32::try_from(vm).unwrap_or(u32::MAX));
            self.close_vm_acct(u32::try_from(vm).unwrap_or(u32::MAX));
            self.vm_finished(u32::try_from(vm).unwrap_or(u32::MAX));
        }
        self.set_cur(v, NONE);
        Flow::Again
    }

    /// Stop the finished VM's idle vCPUs so they give their pCPUs back.
    fn vm_finished(&mut self, vm: u32) {
        let (first, n) = (
            self.vms[vm as usize].first_vcpu,
            self.vms[vm as usize].n_vcpus,
        );
        for u in first..first + n {
            let vc = &self.vcpus[u as usize];
            if vc.host == HostState::Running
                && matches!(vc.act, Act::IdlePoll | Act::HaltPoll | Act::Halting)
            {
                self.interrupt_act(u);
                let vc = &mut self.vcpus[u as usize];
                vc.host = HostState::Halted;
                self.set_acct(u, Acct::Off);
                self.release(u);
            } else if vc.host == HostState::Halted {
                self.set_acct(u, Acct::Off);
            }
        }
    }

    /// A sleeping thread's timer expired.
    /// False when the thread no longer waits for this timer (a stale event).
    pub(super) fn timer_fires(&mut self, t: u32) -> bool {
        match self.threads[t as usize].state {
            TState::Sleeping => self.wake_thread(t, None),
            TState::IoWait => self.io_complete(t),
            _ => return false,
        }
        true
    }

    /// The thread's spin wait is satisfied (lock granted, barrier open, acks
    /// in): it continues after `extra` ns (the cache-line transfer).
    pub(super) fn grant(&mut self, t: u32, extra: u64) {
        let th = &mut self.threads[t as usize];
        th.state = TState::Running;
        th.wait = Wait::None;
        th.spin_deadline = u64::MAX;
        let v = th.vcpu;
        let vc = &self.vcpus[v as usize];
        if vc.cur == t && vc.host == HostState::Running && vc.act == Act::Spin {
            self.interrupt_act(v);
            self.defer(v, cause::CACHE_LINE_TRANSFER, extra);
        } else {
            self.add_carry(t, cause::CACHE_LINE_TRANSFER, extra);
        }
    }
}
