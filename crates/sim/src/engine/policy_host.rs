//! The user-level host policies (every kind smplab-policy decides: `rr`,
//! `gang`, `partition`, `spin`, ..., each optionally with `+safepoint:GRACE`)
//! driven through smplab-policy's `Scheduler`, the one smplab-vmm's real
//! scheduler drives too: a policy is written once, and `rr:4ms` here is the
//! same code as `rr:4ms` on a real host.
//!
//! The simulator's own host model (`host.rs`: per-pCPU run queues, vruntime,
//! load balancing) is the host kernel's scheduler, `linux` and `fair`
//! (`smplab_record::config::Decider`). Here the simulator is
//! smplab-policy's driver with simulated time and events:
//!
//! - a vCPU that halts leaves its pCPU ([`smplab_policy::Scheduler::block`]),
//!   a kick makes it runnable ([`smplab_policy::Scheduler::wake`]): the
//!   simulator knows both at once, where smplab-vmm finds halts by sampling;
//! - a PLE or SDB exit asks for a directed yield
//!   ([`smplab_policy::Scheduler::spin_exit`]);
//! - slice ends are one pending `PolicyTick` event at the policy's next
//!   deadline (or at once when a slice already over now has a waiter);
//!   before every tick the running vCPUs' safe-point state (no spin lock
//!   held, not in a shootdown or IPI handler) is sampled exactly, and a
//!   vCPU that releases its last spin lock is sampled at once;
//! - under a policy that acts on spin samples (`spin`), the software spin
//!   detector samples every running vCPU the policy could act on
//!   every `DEFAULT_SAMPLE_NS` (a kick exit each, charged at the platform's
//!   exit cost as an SDB exit); the verdict is `spin_detector.rs`'s model of
//!   smplab-vmm's detector (the platform's measured `host_spin`);
//! - `Run` puts the vCPU on its pCPU (`dispatch`), `Preempt` takes it off at
//!   once and reports it stopped.
//!
//! Actions are carried out in order from one queue; an event that arrives
//! while the queue drains (a dispatched vCPU halts at once) appends to it.

use super::{Acct, Act, HostState, Sim, Wait};
use crate::breakdown as cause;
use crate::events::Kind;
use crate::scenario::{Policy, Scenario};
use crate::SimError;
use smplab_policy::{Action, Decider, PreemptCause, Sample, Scheduler, VcpuState};
use std::collections::VecDeque;

/// The driver's state beside the policy's own.
pub(crate) struct PolicyHost {
    pub sched: Scheduler,
    pending: VecDeque<Action>,
    draining: bool,
    /// Time of the pending `PolicyTick` event (u64::MAX: none).
    tick_at: u64,
    /// Time of the pending `PolicySample` event (u64::MAX: none).
    sample_at: u64,
    /// Software sampling interval (0: no sampling).
    sample_ns: u64,
    /// The software spin detector's model.
    detector: super::spin_detector::SpinDetectorModel,
    /// Some VM has the SDB: newly waiting vCPUs arm its detection.
    any_sdb: bool,
}

/// Whether `policy` is decided by smplab-policy rather than by the
/// simulator's model of the host kernel.
pub(crate) fn is_user_level(policy: &Policy) -> bool {
    match policy.kind.decider() {
        Decider::HostKernel | Decider::SimulatedKernel => false,
        Decider::UserLevel => true,
    }
}

impl PolicyHost {
    pub(crate) fn new(s: &Scenario) -> Result<Option<Box<PolicyHost>>, SimError> {
        let vcpus: Vec<u32> = s.vms.iter().map(|v| v.vcpus).collect();
        // A kernel-decided policy with safe points is refused here too.
        smplab_policy::check(&s.policy, &vcpus, s.pcpus as usize)
            .map_err(|e| SimError::Scenario(e.to_string()))?;
        if !is_user_level(&s.policy) {
            return Ok(None);
        }
        let sched = Scheduler::new(&s.policy, &vcpus, s.pcpus as usize)
            .map_err(|e| SimError::Scenario(e.to_string()))?;
        let n = sched.vcpus();
        let sample_ns = if sched.acts_on_spin_samples() {
            smplab_policy::DEFAULT_SAMPLE_NS
        } else {
            0
        };
        Ok(Some(Box::new(PolicyHost {
            sched,
            pending: VecDeque::new(),
            draining: false,
            tick_at: u64::MAX,
            sample_at: u64::MAX,
            sample_ns,
            detector: super::spin_detector::SpinDetectorModel::new(n),
            any_sdb: s.virtualized && s.vms.iter().any(|v| v.sdb.is_some()),
        })))
    }
}

impl Sim {
    fn ph(&mut self) -> &mut PolicyHost {
        self.phost
            .as_deref_mut()
            .unwrap_or_else(|| unreachable!("policy host hooks run only in policy mode"))
    }

    /// Whether someone waits for pCPU `p` (what a non-empty run queue means
    /// under the kernel model).
    #[inline]
    pub(super) fn contended(&self, p: u32) -> bool {
        match &self.phost {
            Some(ph) => ph.sched.someone_waits_for(p as usize),
            None => !self.pcpus[p as usize].rq.is_empty(),
        }
    }

    pub(super) fn policy_start(&mut self) {
        for v in 0..u32::try_from(self.vcpus.len()).unwrap_or(u32::MAX) {
            self.vcpus[v as usize].host = HostState::Parked;
            self.set_acct(v, Acct::Away(cause::id8(cause::STEAL)));
        }
        let a = self.ph().sched.start(0);
        self.policy_do(a);
    }

    /// A halted (or parked) vCPU becomes runnable.
    pub(super) fn policy_make_ready(&mut self, v: u32) {
        self.vcpus[v as usize].host = HostState::Parked;
        self.set_acct(v, Acct::Away(cause::id8(cause::STEAL)));
        let now = self.now;
        let a = self.ph().sched.wake(v as usize, now);
        self.policy_do(a);
    }

    /// `v` left its pCPU without being runnable (halted, VM finished).
    pub(super) fn policy_release(&mut self, v: u32) {
        let p = self.vcpus[v as usize].pcpu;
        self.leave_pcpu(v, p);
        self.set_bit_idle(p, true);
        let now = self.now;
        let ph = self.ph();
        ph.detector.reset(v as usize);
        let a = ph.sched.block(v as usize, now);
        self.policy_do(a);
    }

    /// A PLE or SDB exit: the policy may make `v` yield. True if it did.
    pub(super) fn policy_spin_exit(&mut self, v: u32) -> bool {
        let now = self.now;
        let a = self.ph().sched.spin_exit(v as usize, now);
        let yielded = a.contains(&Action::Preempt { vcpu: v as usize });
        self.policy_do(a);
        yielded
    }

    /// `v` may have reached a safe point: a deferred slice end happens at
    /// once (a tick event at this instant: the policy never takes a pCPU
    /// from a vCPU in the middle of another vCPU's step). Never true: `v`
    /// keeps running until the event.
    pub(super) fn policy_safe_point(&mut self, v: u32) -> bool {
        let now = self.now;
        let sample = Sample {
            in_kernel: !self.vcpu_safe(v),
            ..Sample::default()
        };
        let a = self.ph().sched.sample(v as usize, now, sample);
        self.policy_do(a);
        false
    }

    /// The pending `PolicyTick` fires. False if it was stale.
    pub(super) fn policy_tick_event(&mut self) -> bool {
        let now = self.now;
        let ph = self.ph();
        if ph.tick_at != now {
            return false;
        }
        ph.tick_at = u64::MAX;
        let a = self.policy_slice_ends();
        self.policy_do(a);
        true
    }

    /// The software spin detector samples every running vCPU. False if stale.
    pub(super) fn policy_sample_event(&mut self) -> bool {
        let now = self.now;
        let ph = self.ph();
        if ph.sample_at != now {
            return false;
        }
        ph.sample_at = u64::MAX;
        let sched = &ph.sched;
        let running: Vec<u32> = (0..sched.pcpus())
            .filter_map(|p| sched.occupant(p))
            .filter(|&v| {
                matches!(
                    sched.state(v),
                    VcpuState::Running {
                        preempting: None,
                        ..
                    }
                )
            })
            .filter_map(|v| u32::try_from(v).ok())
            .collect();
        for v in running {
            let vc = &self.vcpus[v as usize];
            // A vCPU on its way to halt is left alone (the simulator tells
            // the policy of the halt itself).
            if vc.host != HostState::Running
                || !matches!(
                    vc.act,
                    Act::Segment | Act::Spin | Act::IdlePoll | Act::Handler
                )
            {
                continue;
            }
            // The policy could not act on this sample (`spin`: no sibling
            // preempted): not taken, as smplab-vmm skips it, and the
            // detector's streak restarts.
            if !self.ph().sched.wants_spin_sample(v as usize) {
                self.ph().detector.reset(v as usize);
                continue;
            }
            let vc = &self.vcpus[v as usize];
            let user_spin = vc.act == Act::Spin
                && vc.cur != super::NONE
                && self.threads[vc.cur as usize].wait != Wait::Shootdown;
            let in_kernel = !self.vcpu_safe(v);
            let model = self.platform.host_spin.clone();
            let draw = (!user_spin && model.false_positive_rate > 0.0).then(|| self.rand_f64());
            let spinning = self
                .ph()
                .detector
                .sample(v as usize, user_spin, &model, || draw.unwrap_or(1.0));
            // The sample is a kick exit on the vCPU.
            let vm = self.vcpus[v as usize].vm as usize;
            let exit_ns = self.vms[vm].costs.exit;
            self.interrupt_act(v);
            self.count_exits(v, super::exit::SDB, 1);
            self.add_overhead(v, cause::EXIT_SDB, exit_ns);
            let sample = Sample {
                spinning,
                halted: false,
                in_kernel,
            };
            let a = self.ph().sched.sample(v as usize, now, sample);
            if a.contains(&Action::Preempt { vcpu: v as usize }) {
                self.vcpus[v as usize].yielded = true;
            } else {
                self.resume(v);
            }
            self.policy_do(a);
        }
        self.policy_do(Vec::new());
        true
    }

    /// Queue `actions` and, unless a drain is under way, carry them out and
    /// arm the next events. Slice ends happen only in `PolicyTick` events:
    /// a vCPU is never taken off its pCPU while another vCPU's step runs
    /// (that step may be the one that woke someone).
    pub(super) fn policy_do(&mut self, actions: Vec<Action>) {
        let ph = self.ph();
        ph.pending.extend(actions);
        if ph.draining {
            return;
        }
        ph.draining = true;
        while let Some(a) = self.ph().pending.pop_front() {
            self.carry_out(a);
        }
        self.ph().draining = false;
        self.arm_policy_events();
    }

    /// Refresh the safe-point state of running vCPUs (exactly, not sampled)
    /// and let the policy end the slices that are over.
    fn policy_slice_ends(&mut self) -> Vec<Action> {
        let now = self.now;
        if self.policy.safe_point_grace_ns.is_some() {
            for p in 0..self.pcpus.len() {
                let Some(v) = self.ph().sched.occupant(p) else {
                    continue;
                };
                let Ok(v32) = u32::try_from(v) else { continue };
                if self.vcpus[v].host != HostState::Running {
                    continue;
                }
                let sample = Sample {
                    in_kernel: !self.vcpu_safe(v32),
                    ..Sample::default()
                };
                let a = self.ph().sched.sample(v, now, sample);
                debug_assert!(a.is_empty(), "a sample without spin or halt acts");
            }
        }
        self.ph().sched.tick(now)
    }

    fn arm_policy_events(&mut self) {
        let now = self.now;
        let ph = self.ph();
        // A slice already over ends as soon as someone waits for its pCPU.
        let next = if ph.sched.tick_due(now) {
            Some(now)
        } else {
            ph.sched.next_deadline_after(now)
        };
        let mut push = Vec::new();
        if let Some(at) = next {
            if at < ph.tick_at {
                ph.tick_at = at;
                push.push((at, Kind::PolicyTick));
            }
        }
        let busy = (0..ph.sched.pcpus()).any(|p| ph.sched.occupant(p).is_some());
        if ph.sample_ns > 0 && busy && ph.sample_at == u64::MAX {
            let at = now + ph.sample_ns;
            ph.sample_at = at;
            push.push((at, Kind::PolicySample));
        }
        let any_sdb = ph.any_sdb;
        for (at, k) in push {
            self.push(at, k);
        }
        if any_sdb {
            // Someone may have started waiting: the SDB of the pCPUs it
            // waits for starts watching their current vCPUs.
            for p in 0..u32::try_from(self.pcpus.len()).unwrap_or(u32::MAX) {
                self.arm_sdb_false_positive(p);
            }
        }
    }

    fn carry_out(&mut self, a: Action) {
        match a {
            Action::Run { vcpu, pcpu } => {
                let on = matches!(self.ph().sched.state(vcpu),
                    VcpuState::Running { pcpu: q, .. } if q == pcpu);
                let (Ok(v), Ok(p)) = (u32::try_from(vcpu), u32::try_from(pcpu)) else {
                    return;
                };
                if on && self.vcpus[vcpu].host != HostState::Running {
                    self.dispatch(p, v);
                }
            }
            Action::Preempt { vcpu } => {
                let VcpuState::Running {
                    preempting: Some(why),
                    ..
                } = self.ph().sched.state(vcpu)
                else {
                    return;
                };
                let Ok(v) = u32::try_from(vcpu) else { return };
                if self.vcpus[vcpu].host != HostState::Running {
                    return;
                }
                self.preempt_now(v, why);
            }
        }
    }

    /// Take running `v` off its pCPU at once and tell the policy.
    fn preempt_now(&mut self, v: u32, why: PreemptCause) {
        let p = self.vcpus[v as usize].pcpu;
        let act = self.vcpus[v as usize].act;
        self.interrupt_act(v);
        let vm = self.vcpus[v as usize].vm;
        if self.vms[vm as usize].costs.virtualized {
            self.count_exits(v, super::exit::PREEMPT, 1);
        }
        self.leave_pcpu(v, p);
        self.set_bit_idle(p, true);
        let now = self.now;
        self.ph().detector.reset(v as usize);
        let vc = &mut self.vcpus[v as usize];
        vc.act = Act::Off;
        let a = if matches!(act, Act::Halting | Act::HaltPoll) {
            // Taken off while halting: it is halted, and waits for a kick.
            vc.host = HostState::Halted;
            vc.yielded = false;
            self.set_acct(v, Acct::Away(cause::id8(cause::IDLE_HALTED)));
            self.ph().sched.block(v as usize, now)
        } else {
            vc.host = HostState::Parked;
            let c = if std::mem::take(&mut vc.yielded) || why == PreemptCause::Spin {
                cause::SPIN_YIELD
            } else {
                cause::STEAL
            };
            self.set_acct(v, Acct::Away(cause::id8(c)));
            self.ph().sched.stopped(v as usize, now)
        };
        self.ph().pending.extend(a);
    }
}

#[cfg(test)]
mod tests {
    use crate::scenario::{Policy, Scenario, VmSpec};
    use crate::{simulate, Platform};
    use smplab_policy::{Decider, PolicyKind};

    /// Every user-level policy of the registry runs here as on a real host,
    /// alone and with safe points: two VMs overcommit two pCPUs, and every
    /// operation of each completes.
    #[test]
    fn every_user_level_policy_runs_in_the_simulator() {
        let platform = Platform::builtin("kvm2015").unwrap();
        let vm = VmSpec::from_workload("dedup", Some(2), 0.05, 2).unwrap();
        for &kind in PolicyKind::ALL {
            if kind.decider() != Decider::UserLevel {
                continue;
            }
            for grace in [None, Some(100_000)] {
                let mut s = Scenario::new(platform.clone(), 2, vec![vm.clone(), vm.clone()]);
                s.policy = Policy {
                    kind,
                    time_slice_ns: Some(200_000),
                    safe_point_grace_ns: grace,
                };
                s.native_reference = false;
                let records = simulate(&s).unwrap_or_else(|e| panic!("{}: {e}", s.policy));
                assert_eq!(records.len(), 2);
                for r in &records {
                    assert!(r.is_ok(), "{}: {:?}", s.policy, r.outcome);
                    assert_eq!(
                        r.sim.as_ref().map(|x| x.policy.as_str()),
                        Some(s.policy.to_string().as_str())
                    );
                }
            }
        }
    }
}
