//! Kulkarni & Kulkarni's adaptive tuner driven by simulated time (`smplab tune`).
//!
//! Every `TunerConfig::window_ns` a `Kind::Tune` event reads, per VM, what a
//! host could count over the window — rescheduling IPIs sent, cache-refill
//! time per dispatch, device interrupts and their delivery latency, PLE and
//! SDB exits (spin detections) — hands them to that VM's
//! `smplab_policy::tune::Tuner` and applies what it answers:
//!
//! - time slice: the simulator has one host slice (`Sim::slice_ns`), so it
//!   takes the shortest slice any unfinished VM's tuner asks for; dispatches
//!   running on a longer slice are cut to the new one at once;
//! - vCPU affinity: floating = the whole host; pinned = one pCPU each,
//!   spread as placement `pinned` (`Placement::Spread`) spreads them. A
//!   queued vCPU left on a pCPU it may no longer use moves at the next tick
//!   (a running one when it is next preempted or halts);
//! - interrupt affinity: the VM's IOAPIC routing (`io.rs`), from the next
//!   completion on.
//!
//! The tuner assumes the `fair` policy on the whole host (no partitions, no
//! gangs): `smplab tune` checks that before it starts.

use super::{HostState, Sim, TState};
use crate::events::Kind;
use smplab_policy::tune::{Decision, Indicators, Setting, Tuner, TunerConfig, VcpuAffinity};

/// The counters one window's indicators are the difference of.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    ipis: u64,
    refill_ns: u64,
    dispatch_ends: u64,
    irqs: usize,
    spins: u64,
}

/// The tuners of a simulation, one per VM.
pub(crate) struct SimTuner {
    window_ns: u64,
    tuners: Vec<Tuner>,
    last: Vec<Counts>,
}

/// A logged decision and the VM it was for.
#[derive(Debug, Clone, PartialEq)]
pub struct VmDecision {
    pub vm: u32,
    pub decision: Decision,
}

/// What the tuner did in one simulation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TuneLog {
    /// Every decision, in time order.
    pub decisions: Vec<VmDecision>,
    /// Per VM: when its last device request completed (`None`: it made
    /// none). For a workload whose I/O phase comes first, the phase change.
    pub last_io_ns: Vec<Option<u64>>,
}

impl Sim {
    /// Tune this simulation's VMs with `config` (its long slice is the
    /// scenario's slice), starting from each VM's own setting.
    pub(crate) fn enable_tuner(&mut self, config: &TunerConfig) {
        let config = TunerConfig {
            long_slice_ns: self.slice_ns,
            ..config.clone()
        };
        let tuners = (0..self.vms.len())
            .map(|vm| {
                let first = self.vms[vm].first_vcpu as usize;
                let vc = &self.vcpus[first];
                let pinned = vc.hi - vc.lo == 1 && self.pcpus.len() > 1;
                let initial = Setting {
                    slice_ns: self.slice_ns,
                    affinity: if pinned {
                        VcpuAffinity::Pinned
                    } else {
                        VcpuAffinity::Floating
                    },
                    irq: self.io[vm].irq_affinity().clone(),
                };
                Tuner::new(config.clone(), initial)
            })
            .collect();
        self.tuner = Some(SimTuner {
            window_ns: config.window_ns.max(1),
            tuners,
            last: vec![Counts::default(); self.vms.len()],
        });
    }

    /// What the tuner did.
    pub(crate) fn tune_log(&self) -> TuneLog {
        TuneLog {
            decisions: self.tune_decisions(),
            last_io_ns: self
                .io
                .iter()
                .map(super::io::VmIo::last_completion_ns)
                .collect(),
        }
    }

    fn tune_decisions(&self) -> Vec<VmDecision> {
        let Some(t) = &self.tuner else {
            return Vec::new();
        };
        let mut out: Vec<VmDecision> = t
            .tuners
            .iter()
            .enumerate()
            .flat_map(|(vm, tu)| {
                tu.log().iter().map(move |d| VmDecision {
                    vm: u32::try_from(vm).unwrap_or(u32::MAX),
                    decision: d.clone(),
                })
            })
            .collect();
        out.sort_by_key(|d| (d.decision.at_ns, d.vm));
        out
    }

    /// Arm the first window (called once the VMs have started).
    pub(super) fn tune_start(&mut self) {
        if let Some(t) = &self.tuner {
            let at = self.now + t.window_ns;
            self.push(at, Kind::Tune);
        }
    }

    fn tune_counts(&self, vm: usize) -> Counts {
        let v = &self.vms[vm];
        let mut c = Counts {
            ipis: v.ipis,
            refill_ns: v.warmup_ns,
            irqs: self.io[vm].irq_latencies().len(),
            ..Counts::default()
        };
        let exits = &self.vm_exits[vm];
        // Each dispatch ends in a preemption, a halt or a yield.
        c.dispatch_ends = exits[super::exit::PREEMPT] + exits[super::exit::HLT];
        c.spins = exits[super::exit::PLE] + exits[super::exit::SDB];
        c
    }

    /// A window ended: measure, decide, apply, and arm the next one while
    /// anything can still happen.
    pub(super) fn tune_tick(&mut self) {
        let Some(mut t) = self.tuner.take() else {
            return;
        };
        let secs = t.window_ns as f64 / 1e9;
        for vm in 0..self.vms.len() {
            if self.vms[vm].done_threads == self.vms[vm].n_threads {
                continue;
            }
            let now = self.tune_counts(vm);
            let was = std::mem::replace(&mut t.last[vm], now);
            let per_vcpu_s = |d: u64| d as f64 / f64::from(self.vms[vm].n_vcpus.max(1)) / secs;
            let lat = &self.io[vm].irq_latencies()[was.irqs..now.irqs];
            let indicators = Indicators {
                window_ns: t.window_ns,
                resched_ipis_per_s: per_vcpu_s(now.ipis - was.ipis),
                refill_ns_per_dispatch: (now.refill_ns - was.refill_ns) as f64
                    / (now.dispatch_ends - was.dispatch_ends).max(1) as f64,
                irqs_per_s: per_vcpu_s(lat.len() as u64),
                irq_latency_ns: if lat.is_empty() {
                    0.0
                } else {
                    lat.iter().sum::<u64>() as f64 / lat.len() as f64
                },
                spins_per_s: per_vcpu_s(now.spins - was.spins),
            };
            if let Some(s) = t.tuners[vm].observe(self.now, indicators) {
                self.io[vm].set_irq_affinity(s.irq.clone());
                self.set_vm_affinity(vm, s.affinity);
            }
        }
        let slice = (0..self.vms.len())
            .filter(|&vm| self.vms[vm].done_threads < self.vms[vm].n_threads)
            .map(|vm| t.tuners[vm].current().slice_ns)
            .min()
            .unwrap_or(self.slice_ns);
        self.set_slice(slice);
        for vm in 0..self.vms.len() {
            self.move_misplaced(vm);
        }
        let window = t.window_ns;
        self.tuner = Some(t);
        if self.tune_more_to_come() {
            self.push(self.now + window, Kind::Tune);
        }
    }

    /// Something other than this tuner and the load balancer can still
    /// happen: otherwise stop, so that a stalled run is reported as one.
    fn tune_more_to_come(&self) -> bool {
        self.q.len() > 2
            || self
                .vcpus
                .iter()
                .any(|v| v.host != HostState::Halted || v.wake_pending)
            || self
                .threads
                .iter()
                .any(|t| matches!(t.state, TState::Sleeping | TState::IoWait))
    }

    fn set_slice(&mut self, slice_ns: u64) {
        if slice_ns == self.slice_ns {
            return;
        }
        let shorter = slice_ns < self.slice_ns;
        self.slice_ns = slice_ns.max(1);
        if !shorter {
            return;
        }
        // Dispatches armed with the old, longer slice end on the new one.
        for p in 0..u32::try_from(self.pcpus.len()).unwrap_or(u32::MAX) {
            let pc = &self.pcpus[p as usize];
            if pc.slice_end != u64::MAX && pc.slice_end > self.now + self.slice_ns {
                self.pcpus[p as usize].slice_end = u64::MAX;
                self.arm_slice(p);
            }
        }
    }

    fn set_vm_affinity(&mut self, vm: usize, affinity: VcpuAffinity) {
        let n_pcpus = u32::try_from(self.pcpus.len()).unwrap_or(u32::MAX);
        let n_vms = u64::try_from(self.vms.len()).unwrap_or(1).max(1);
        let v = &self.vms[vm];
        let (first, n) = (v.first_vcpu, v.n_vcpus);
        // As placement `pinned` spreads them: VMs start at different offsets.
        let off = u32::try_from(u64::try_from(vm).unwrap_or(0) * u64::from(n) / n_vms).unwrap_or(0);
        for i in 0..n {
            let vc = &mut self.vcpus[(first + i) as usize];
            (vc.lo, vc.hi) = match affinity {
                VcpuAffinity::Floating => (0, n_pcpus),
                VcpuAffinity::Pinned => {
                    let p = (i + off) % n_pcpus.max(1);
                    (p, p + 1)
                }
            };
        }
    }

    /// Queued vCPUs of `vm` waiting on a pCPU outside their affinity move.
    fn move_misplaced(&mut self, vm: usize) {
        let v = &self.vms[vm];
        for u in v.first_vcpu..v.first_vcpu + v.n_vcpus {
            let vc = &self.vcpus[u as usize];
            if vc.host != HostState::Queued || (vc.lo <= vc.pcpu && vc.pcpu < vc.hi) {
                continue;
            }
            let p = vc.pcpu as usize;
            if let Some(pos) = self.pcpus[p].rq.iter().position(|&x| x == u) {
                self.pcpus[p].rq.remove(pos);
                // The busy bit and load of the pCPU (p < pCPUs < 2^32).
                self.set_bit_busy_rq(u32::try_from(p).unwrap_or(u32::MAX));
                self.make_ready(u);
            }
        }
    }
}
