//! The partitioned engine: the same model as the sequential event loop
//! (`event_loop.rs`), run one LLC domain at a time, so that on a large host
//! the state an event touches is a few kilobytes that stay in cache for
//! thousands of events instead of megabytes visited in simulated-time
//! order (docs/sim-performance.md, "Host size").
//!
//! A partition is one LLC domain: its pCPUs, the VMs confined to it and
//! their vCPUs and threads, and a queue of their events. It applies when
//! every VM's vCPUs are confined to one LLC domain (placement), and so are
//! the host threads of its devices if it has any (`io_thread_cpus`), the
//! host runs the kernel model (`linux`, `fair`) without the adaptive tuner,
//! and there is more than one domain. Then the only events that touch more
//! than one partition are the periodic load balances (`Kind::Balance`):
//! wake placement and idle stealing look only at pCPUs a vCPU may use
//! (all in its domain; idle stealing scans its own domain first and finds
//! nothing it may take in others), guest wakeups, IPIs and interrupts stay
//! inside a VM, and the random streams are per domain (`Sim::rngs`). The
//! balances go to a global queue; between two of them (the window, 8 ms on
//! `kvm2015`: the LLC domain's balance interval) every partition runs on
//! its own, one after another.
//!
//! Same results as the sequential engine: all queues share one sequence
//! count (`Queue::set_seq`), so a partition's events are ordered among
//! themselves and against the global events exactly as in the one queue
//! (events of one partition are pushed in the same order in both engines,
//! and a global event comes after every event pushed before it); the
//! window runs each partition's events up to the next global event's
//! (time, sequence number). A partition whose VMs have all finished waits
//! at its finish until the others reach the window's end, since the run
//! stops when the last VM finishes: its events up to that instant (not
//! at it) are then run. tests/partitioned.rs compares the two engines.

use super::{Sim, NONE};
use crate::events::{Kind, Queue};
use crate::SimError;

/// The partitions' queues and bookkeeping (`Sim::parts`).
pub(crate) struct Partitions {
    /// One queue per LLC domain, all numbered from one sequence count.
    queues: Vec<Queue>,
    /// The shared sequence count while no queue holds it.
    seq: u32,
    /// Per partition: its VMs still running.
    left: Vec<u32>,
    /// Per VM: its partition.
    vm_part: Vec<u32>,
    /// Per partition: stopped at its last VM's finish, not yet caught up.
    parked: Vec<bool>,
    /// Time of the latest VM finish.
    finish_at: u64,
    /// Windows run and partition runs with at least one event (statistics).
    pub windows: u64,
    pub runs: u64,
}

/// How the run ended.
pub(super) enum Stop {
    /// Every VM finished; the run ends at this time.
    Finished,
    /// The horizon came first.
    Horizon,
}

impl Sim {
    /// The LLC domain of each VM when every VM's vCPUs are confined to one
    /// domain and there are several; `None` otherwise.
    pub(super) fn vm_domains(&self) -> Option<Vec<u32>> {
        if self.domains < 2 {
            return None;
        }
        self.vms
            .iter()
            .map(|vm| {
                let vcpus = &self.vcpus[vm.first_vcpu as usize..][..vm.n_vcpus as usize];
                let d = self.pcpus.get(vcpus.first()?.lo as usize)?.domain;
                vcpus
                    .iter()
                    .all(|vc| {
                        vc.hi > vc.lo
                            && self.pcpus[vc.lo as usize].domain == d
                            && self.pcpus[vc.hi as usize - 1].domain == d
                    })
                    .then_some(d)
            })
            .collect()
    }

    /// The partition (LLC domain) of each VM, when the scenario can run
    /// partitioned (see the module comment); `None` otherwise.
    pub(super) fn partition_of_vms(&self) -> Option<Vec<u32>> {
        // Idle stealing gives up after 64 candidate run queues, starting
        // with its own domain's: with more pCPUs per domain it could give
        // up before it has seen its own domain, depending on the others.
        if self.phost.is_some() || self.tuner.is_some() || self.per_llc > 64 {
            return None;
        }
        if self.rngs.len() != self.domains as usize {
            return None;
        }
        let domains = self.vm_domains()?;
        // A device completion's host thread looks for an idle pCPU among
        // its allowed ones (all the host's when none are given,
        // `io.rs`): only a set inside the VM's own domain keeps it there.
        let io_inside = domains.iter().enumerate().all(|(vm, &d)| {
            !self.io_active[vm] || self.io[vm].cpus_within(|p| self.pcpus[p as usize].domain == d)
        });
        io_inside.then_some(domains)
    }

    /// The partitions the partitioned engine would run (`None`: sequential).
    pub(crate) fn partition_count(&self) -> Option<u32> {
        self.partition_of_vms().map(|_| self.domains)
    }

    /// Set up the partitions (the engine then routes every push, until the
    /// first window, to the queue of its target).
    pub(super) fn partition(&mut self, vm_part: Vec<u32>) {
        let n = self.domains as usize;
        let mut left = vec![0u32; n];
        for &k in &vm_part {
            left[k as usize] += 1;
        }
        self.parts = Some(Box::new(Partitions {
            queues: (0..n).map(|_| Queue::for_partition()).collect(),
            seq: self.q.seq(),
            left,
            vm_part,
            parked: vec![false; n],
            finish_at: 0,
            windows: 0,
            runs: 0,
        }));
        self.routing = true;
    }

    /// VM `vm` finished: count it off its partition.
    #[inline]
    pub(super) fn partition_vm_done(&mut self, vm: u32) {
        if let Some(p) = self.parts.as_mut() {
            let k = p.vm_part[vm as usize] as usize;
            p.left[k] -= 1;
            p.finish_at = p.finish_at.max(self.now);
        }
    }

    /// The partition an event belongs to (`None`: global).
    fn partition_of(&self, kind: Kind) -> Option<usize> {
        let of_vcpu = |v: u32| self.pcpus[self.vcpus[v as usize].lo as usize].domain as usize;
        match kind {
            Kind::Step { vcpu, .. } | Kind::Wake { vcpu } | Kind::Ipi { vcpu, .. } => {
                Some(of_vcpu(vcpu))
            }
            Kind::Slice { pcpu, .. } | Kind::SdbFalse { pcpu, .. } => {
                Some(self.pcpus[pcpu as usize].domain as usize)
            }
            Kind::Timer { thread } | Kind::WakeThread { thread, .. } => {
                Some(of_vcpu(self.threads[thread as usize].vcpu))
            }
            Kind::PolicyTick | Kind::PolicySample | Kind::Balance { .. } | Kind::Tune => None,
        }
    }

    /// A push while no partition runs (start, global events): to the
    /// queue of the event's partition, numbered from the shared count.
    #[inline(never)]
    pub(super) fn push_routed(&mut self, at: u64, kind: Kind) {
        let k = self.partition_of(kind);
        let Some(p) = self.parts.as_mut() else {
            self.q.push(at, kind);
            return;
        };
        let q = match k {
            Some(k) => &mut p.queues[k],
            None => &mut self.q,
        };
        q.set_seq(p.seq);
        q.push(at, kind);
        p.seq = q.seq();
    }

    /// Pending events of all queues (a balance tick with nothing else
    /// pending is not re-armed: it would hide a stall).
    pub(super) fn pending_events(&self) -> usize {
        self.q.len()
            + self
                .parts
                .as_ref()
                .map_or(0, |p| p.queues.iter().map(Queue::len).sum())
    }

    /// Events popped from all queues.
    pub(super) fn popped_events(&self) -> u64 {
        self.q.popped
            + self
                .parts
                .as_ref()
                .map_or(0, |p| p.queues.iter().map(|q| q.popped).sum())
    }

    /// Run partition `k`'s events before `limit` (time, sequence number)
    /// and up to `horizon`; with `park`, stop at the finish of its last VM.
    fn run_partition(&mut self, k: usize, limit: (u64, u32), horizon: u64, park: bool) {
        let Some(p) = self.parts.as_mut() else {
            return;
        };
        let seq = p.seq;
        std::mem::swap(&mut self.q, &mut p.queues[k]);
        self.q.set_seq(seq);
        let prefetch = self.prefetch_pays();
        let mut ran = false;
        while let Some(ev) = self.q.pop_before(limit, horizon) {
            ran = true;
            self.now = ev.time;
            if prefetch {
                if let Some(second) = self.q.peek_current_second() {
                    self.prefetch_for(second);
                }
                if let Some(next) = self.q.peek_current() {
                    self.prefetch_deep(next);
                }
            }
            self.handle(ev.kind);
            if park {
                if let Some(p) = self.parts.as_mut() {
                    if p.left[k] == 0 {
                        p.parked[k] = true;
                        break;
                    }
                }
            }
        }
        if let Some(p) = self.parts.as_mut() {
            p.seq = self.q.seq();
            std::mem::swap(&mut self.q, &mut p.queues[k]);
            p.runs += u64::from(ran);
        }
    }

    /// The event loop of the partitioned engine (the sequential one's
    /// contract: `Sim::run`); `self.now` ends at the last processed event.
    pub(super) fn run_partitioned(&mut self, horizon: u64) -> Result<Stop, SimError> {
        let n = self.parts.as_ref().map_or(0, |p| p.queues.len());
        let n_vms = u32::try_from(self.vms.len()).unwrap_or(u32::MAX);
        let mut last = self.now;
        loop {
            let limit = self.q.head_key().unwrap_or((u64::MAX, u32::MAX));
            self.routing = false;
            if let Some(p) = self.parts.as_mut() {
                p.windows += 1;
                // Partitions finished in earlier windows wait too.
                for k in 0..n {
                    p.parked[k] = p.left[k] == 0;
                }
            }
            for k in 0..n {
                if self.parts.as_ref().is_some_and(|p| !p.parked[k]) {
                    self.run_partition(k, limit, horizon, true);
                    last = last.max(self.now);
                }
            }
            // Parked partitions catch up: to the window's end, or to the
            // instant the last VM finished.
            let done = self.vms_done >= n_vms;
            let finish_at = self.parts.as_ref().map_or(0, |p| p.finish_at);
            let catch_up = if done { (finish_at, 0) } else { limit };
            for k in 0..n {
                if self.parts.as_ref().is_some_and(|p| p.parked[k]) {
                    self.run_partition(k, catch_up, horizon, false);
                    last = last.max(self.now);
                }
            }
            self.routing = true;
            if done {
                self.now = finish_at;
                return Ok(Stop::Finished);
            }
            match self.q.pop_before((u64::MAX, u32::MAX), horizon) {
                Some(ev) => {
                    self.now = ev.time;
                    last = ev.time;
                    self.handle(ev.kind);
                }
                None if self.pending_events() == 0 => {
                    self.now = last;
                    let (vm, pending) = self
                        .vms
                        .iter()
                        .enumerate()
                        .find(|(_, v)| v.done_threads < v.n_threads)
                        .map(|(i, v)| {
                            (
                                u32::try_from(i).unwrap_or(NONE),
                                v.n_threads - v.done_threads,
                            )
                        })
                        .unwrap_or((0, 0));
                    return Err(SimError::Stalled {
                        at_ns: last,
                        pending,
                        vm,
                    });
                }
                None => return Ok(Stop::Horizon),
            }
        }
    }
}
