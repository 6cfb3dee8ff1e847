//! The event loop: pop the next event, dispatch it to the model's parts,
//! and hand back the run's outcome.

use super::{exit, io, Acct, Act, RunOutcome, Sim, TState, VmOutcome, NONE};
use crate::breakdown as cause;
use crate::events::Kind;
use crate::SimError;

impl Sim {
    /// Run until every VM finishes or the horizon, partitioned where the
    /// scenario allows it (`partition.rs`; the same results).
    pub fn run(&mut self, horizon: Option<u64>) -> Result<RunOutcome, SimError> {
        self.run_with(horizon, crate::Engine::Partitioned)
    }

    /// `run` with the engine chosen: `Engine::Partitioned` runs the
    /// sequential loop where the scenario cannot be partitioned.
    pub fn run_with(
        &mut self,
        horizon: Option<u64>,
        engine: crate::Engine,
    ) -> Result<RunOutcome, SimError> {
        if engine == crate::Engine::Partitioned {
            if let Some(vm_part) = self.partition_of_vms() {
                // Before `start`, so its pushes go to the partitions' queues.
                self.partition(vm_part);
            }
        }
        self.start();
        self.tune_start();
        let horizon = horizon.unwrap_or(u64::MAX);
        let stopped_at = if self.parts.is_some() {
            match self.run_partitioned(horizon)? {
                super::partition::Stop::Finished => None,
                super::partition::Stop::Horizon => {
                    self.now = horizon;
                    Some(horizon)
                }
            }
        } else {
            self.run_sequential(horizon)?
        };
        self.finish(stopped_at)
    }

    /// The sequential event loop: returns the horizon if it stopped there.
    fn run_sequential(&mut self, horizon: u64) -> Result<Option<u64>, SimError> {
        let prefetch = self.prefetch_pays();
        let mut stopped_at = None;
        while self.vms_done < u32::try_from(self.vms.len()).unwrap_or(u32::MAX) {
            let Some(ev) = self.q.pop() else {
                let (vm, pending) = self
                    .vms
                    .iter()
                    .enumerate()
                    .find(|(_, v)| v.done_threads < v.n_threads)
                    .map(|(i, v)| {
                        (
                            u32::try_from(i).unwrap_or(u32::MAX),
                            v.n_threads - v.done_threads,
                        )
                    })
                    .unwrap_or((0, 0));
                return Err(SimError::Stalled {
                    at_ns: self.now,
                    pending,
                    vm,
                });
            };
            if ev.time > horizon {
                // Popped but never handled: neither processed nor stale.
                self.q.popped -= 1;
                self.now = horizon;
                stopped_at = Some(horizon);
                break;
            }
            debug_assert!(ev.time >= self.now);
            self.now = ev.time;
            if prefetch {
                // Two stages: the event after next gets its first lines
                // asked for; the next one, whose lines were asked for one
                // event ago, has what they point at asked for too.
                if let Some(second) = self.q.peek_current_second() {
                    self.prefetch_for(second);
                }
                if let Some(next) = self.q.peek_current() {
                    self.prefetch_deep(next);
                }
            }
            self.handle(ev.kind);
        }
        Ok(stopped_at)
    }

    /// Close the accounting at the end of the run and hand back its outcome.
    fn finish(&mut self, stopped_at: Option<u64>) -> Result<RunOutcome, SimError> {
        let end = stopped_at.unwrap_or(self.now);
        if self.stats {
            for (i, th) in self
                .threads
                .iter()
                .enumerate()
                .filter(|(_, t)| t.state != TState::Done)
                .take(8)
            {
                let vc = &self.vcpus[th.vcpu as usize];
                eprintln!(
                    "smplab-sim unfinished thread {i} (vm {}): state {:?} wait {:?} pc {} seg_left {} carry {}; vcpu {} host {:?} act {:?} cur {} rq {:?} overhead {} pcpu {}",
                    th.vm, th.state, th.wait, th.pc, th.seg_left, th.carry, th.vcpu, vc.host, vc.act, vc.cur, self.rq_threads(th.vcpu), vc.overhead_left, vc.pcpu
                );
            }
            for (i, pc) in self.pcpus.iter().enumerate().take(8) {
                let vr = |u: u32| (u, self.vruntime[u as usize], self.vcpus[u as usize].act);
                eprintln!(
                    "smplab-sim pcpu {i}: cur {:?} rq {:?} buddy {}",
                    (pc.cur != NONE).then(|| vr(pc.cur)),
                    pc.rq.iter().map(|&u| vr(u)).collect::<Vec<_>>(),
                    pc.buddy
                );
            }
            eprintln!(
                "smplab-sim events by kind [step:stale overhead handler segment spin idlepoll halting haltpoll | slice wake ipi timer policy/balance sdbfalse]: {:?}; pending at end {}",
                self.kind_counts,
                self.pending_events()
            );
            if let Some(p) = &self.parts {
                eprintln!(
                    "smplab-sim partitioned: {} windows, {} partition runs with events, {:.0} events per run",
                    p.windows,
                    p.runs,
                    self.popped_events() as f64 / p.runs.max(1) as f64
                );
            }
        }
        self.now = end;
        for v in 0..u32::try_from(self.vcpus.len()).unwrap_or(u32::MAX) {
            self.set_acct(v, Acct::Off);
        }
        for p in 0..u32::try_from(self.pcpus.len()).unwrap_or(u32::MAX) {
            // Close the idle interval (a busy pCPU's time was charged above).
            if self.pcpus[p as usize].idle_since != u64::MAX {
                self.pcpu_idle_acct(p, false);
                self.pcpu_idle_acct(p, true);
            }
        }
        Ok(self.outcome(end))
    }

    /// Dispatch one popped event. Always inlined into `run`: the kind stays
    /// in registers instead of going through memory to a call with a large
    /// frame (3.4% fewer instructions per processed event,
    /// docs/sim-performance.md, seventh pass).
    #[inline(always)]
    pub(super) fn handle(&mut self, kind: Kind) {
        if self.trace {
            let desc = match kind {
                Kind::Step { vcpu, gen } => {
                    let vc = &self.vcpus[vcpu as usize];
                    format!(
                        "step v{vcpu} gen {gen}/{} act {:?} host {:?} end {} ovh {}",
                        vc.gen, vc.act, vc.host, vc.act_end, vc.overhead_left
                    )
                }
                k => format!("{k:?}"),
            };
            eprintln!("t={} {desc}", self.now);
        }
        if self.stats {
            let i = match kind {
                Kind::Step { vcpu, .. } => match self.vcpus[vcpu as usize].act {
                    Act::Off => 13,
                    Act::Overhead => 1,
                    Act::Handler => 2,
                    Act::Segment => 3,
                    Act::Spin => 4,
                    Act::IdlePoll => 5,
                    Act::Halting => 6,
                    Act::HaltPoll => 7,
                },
                Kind::Slice { .. } => 8,
                Kind::Wake { .. } => 9,
                Kind::Ipi { .. } => 10,
                Kind::Timer { .. } | Kind::WakeThread { .. } => 11,
                Kind::PolicyTick | Kind::PolicySample | Kind::Balance { .. } | Kind::Tune => 12,
                Kind::SdbFalse { .. } => 13,
            };
            self.kind_counts[i] += 1;
        }
        match kind {
            Kind::Step { vcpu, gen } => {
                let vc = &mut self.vcpus[vcpu as usize];
                if vc.gen == gen {
                    vc.step_at = u64::MAX;
                    if vc.act == Act::Off {
                        // A Step of a vCPU with no activity does nothing.
                        self.stale += 1;
                    } else {
                        self.step(vcpu);
                    }
                } else {
                    self.stale += 1;
                    if self.stats {
                        self.kind_counts[0] += 1;
                    }
                }
            }
            Kind::Slice { pcpu, .. } => {
                if !self.slice_event(pcpu) {
                    self.stale += 1;
                }
            }
            Kind::Wake { vcpu } => {
                if !self.wake_arrives(vcpu) {
                    self.stale += 1;
                }
            }
            Kind::Ipi { vcpu, from } => self.ipi_arrives(vcpu, from),
            Kind::Timer { thread } => {
                if !self.timer_fires(thread) {
                    self.stale += 1;
                }
            }
            Kind::WakeThread { thread, waker } => {
                if !self.wake_arrives_thread(thread, waker) {
                    self.stale += 1;
                }
            }
            Kind::PolicyTick => {
                if !self.policy_tick_event() {
                    self.stale += 1;
                }
            }
            Kind::PolicySample => {
                if !self.policy_sample_event() {
                    self.stale += 1;
                }
            }
            Kind::Balance { level } => {
                if !self.balance_tick(level) {
                    self.stale += 1;
                }
            }
            Kind::Tune => self.tune_tick(),
            Kind::SdbFalse { pcpu, gen } => {
                if self.pcpus[pcpu as usize].slice_gen == gen {
                    self.sdb_false_positive(pcpu);
                } else {
                    self.stale += 1;
                }
            }
        }
    }

    /// The vCPU's activity reached `act_end` or one of its check points.
    fn step(&mut self, v: u32) {
        let now = self.now;
        let vc = &self.vcpus[v as usize];
        match vc.act {
            Act::Off => {}
            Act::Overhead => {
                self.vcpus[v as usize].act = Act::Off;
                self.resume(v);
            }
            Act::Handler => self.handler_done(v),
            Act::Segment => {
                if now >= vc.act_end {
                    self.segment_done(v);
                } else if now - vc.seg_start >= vc.next_device_in {
                    self.device_exit(v);
                } else {
                    self.guest_tick(v);
                }
            }
            Act::Spin => {
                let t = vc.cur;
                if now >= self.threads[t as usize].spin_deadline {
                    self.spin_gives_up(v);
                } else if now >= vc.ple_at {
                    self.ple_exit(v);
                } else if now >= vc.sdb_at {
                    self.sdb_detects(v);
                } else {
                    self.guest_tick(v);
                }
            }
            Act::IdlePoll => {
                // Only scheduled for the SDB, which classifies the idle loop as a spin.
                self.sdb_detects(v);
            }
            Act::Halting => self.halting_done(v),
            Act::HaltPoll => self.halt(v),
        }
    }

    fn outcome(&self, end: u64) -> RunOutcome {
        let vms = self
            .vms
            .iter()
            .enumerate()
            .map(|(k, vm)| {
                let mut exits = self.vm_exits[k];
                let by_cause = self.vm_by_cause[k];
                if vm.costs.virtualized {
                    exits[exit::IRQ] += self.host_tick_exits(&by_cause);
                }
                let sum = |cs: &[usize]| cs.iter().map(|&c| by_cause[c]).sum::<u64>();
                let spin = sum(&[
                    cause::SPIN_LOCK,
                    cause::SPIN_MUTEX,
                    cause::SPIN_BARRIER,
                    cause::SPIN_SHOOTDOWN,
                ]);
                let idle = sum(&[
                    cause::IDLE_POLL,
                    cause::IDLE_HALTED,
                    cause::HALT_POLL,
                    cause::EXIT_HLT,
                    cause::WAKE_LATENCY,
                ]);
                let steal = sum(&[cause::STEAL, cause::SPIN_YIELD]);
                let finished = vm.done_threads == vm.n_threads;
                let threads = self.threads
                    [vm.first_thread as usize..(vm.first_thread + vm.n_threads) as usize]
                    .iter()
                    .map(|t| {
                        let e = if t.state == TState::Done {
                            t.end_ns
                        } else {
                            end
                        };
                        (t.group, t.index, e, t.cpu_ns)
                    })
                    .collect();
                VmOutcome {
                    finished,
                    wall_ns: if finished { vm.end_ns } else { end },
                    threads,
                    ops: vm.ops,
                    spin_iterations: crate::units_from_f64(vm.spin_iters.round()),
                    blocks: vm.blocks,
                    wakeups: vm.wakeups,
                    cs_voluntary: vm.cs_voluntary,
                    cs_involuntary: vm.cs_involuntary,
                    exits,
                    spin_ns: spin,
                    idle_ns: idle,
                    steal_ns: steal,
                    ipis: vm.ipis,
                    migrations: vm.migrations,
                    warmup_ns: vm.warmup_ns,
                    device_wait_ns: vm.device_wait_ns,
                    finished_threads: vm.done_threads,
                    by_cause,
                }
            })
            .collect();
        RunOutcome {
            vms,
            pcpu_by_cause: self.pcpu_by_cause,
            pcpu_totals: self
                .pcpus
                .iter()
                .zip(&self.pcpu_busy)
                .map(|(pc, &busy)| (busy, pc.idle_ns))
                .collect(),
            io: self.io.iter().map(io::VmIo::section).collect(),
            stale_events: self.stale,
            events: self.popped_events() - self.stale,
            end_ns: end,
        }
    }
}
