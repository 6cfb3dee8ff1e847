//! The user-level vCPU scheduler of `smplab host`: several VMs in one
//! smplab-vmm process, their vCPU threads running KVM_RUN only while the
//! scheduler grants them a host CPU (docs/host.md).
//!
//! The decisions are smplab-policy's [`Scheduler`] (every user-level policy
//! behind its `Policy` trait), the same one the simulator drives; this
//! module is its real-time driver:
//! - A vCPU thread calls [`EntryGate::before_entry`](crate::vcpu::EntryGate::before_entry) (implemented by [`VcpuGrant`]) before every KVM_RUN. It
//!   blocks there until granted a pCPU, pins itself to that host CPU, serves a
//!   pending sample (its own `KVM_GET_REGS`, see [`spin`]) and gives up its
//!   pCPU when a preemption is pending.
//! - The ticker thread (`smplab-sched`) wakes every sampling interval: it ends
//!   slices ([`Scheduler::tick`]), reads each running vCPU thread's scheduler
//!   state (`/proc/self/task/TID/stat`: sleeping at two ticks in a row
//!   while granted means halted in the guest — its CPU clock cannot tell: on
//!   this PVM host guest time is not charged to the vCPU thread) and asks the
//!   others for a sample by kicking them out of KVM_RUN ([`Kicker`]: `immediate_exit` then a
//!   signal, so no kick is lost).
//! - A preemption is a kick too: the preempted thread leaves KVM_RUN, reports
//!   [`Scheduler::stopped`] and waits for its next grant; only then is its pCPU
//!   given away, so two granted vCPUs never share a host CPU.
//!
//! With policy `linux` there is no scheduler: the hook never blocks and only
//! collects the kernel's view (per-thread run and run-queue wait from
//! `/proc/thread-self/schedstat`). `fair` is the simulator's model of such a
//! kernel, and is refused here ([`PolicyError::SimulatorOnly`]).
//!
//! Lock order: the scheduler's state, then a vCPU's [`Kicker`] target (kicks
//! are sent under the state lock; a vCPU thread never takes the state lock
//! while holding its kicker's).

mod actuate;
pub mod dirty;
pub mod report;
pub mod sensors;
pub mod spin;
pub mod spin_loop;
pub mod truth;

pub use dirty::DirtyRing;

use crate::control::RunControl;
use crate::irq_route::IrqRoute;
use crate::placement::pin_current_thread;
use crate::vcpu::{EntryGate, ExitAction, Kicker};
use kvm_ioctls::VcpuFd;
pub use report::{HostReport, PcpuReport, SpinDetection, VcpuReport, VmReport};
pub use sensors::{GuestCounters, GuestSensors};
use smplab_policy::{Action, Decider, HostPolicy, PolicyError, Sample, Scheduler};
use spin::{SpinDetector, SpinSettings};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a vCPU thread waiting for a grant sleeps before it looks at its
/// VM's stop request again (a stop does not notify the scheduler).
const STOP_POLL: Duration = Duration::from_millis(2);

/// Ticks in a row a granted vCPU thread must be found sleeping (in KVM's
/// halt) before it counts as halted.
const HALTED_TICKS: u32 = 2;

/// A host set-up the scheduler cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("host CPU {cpu} is not among the CPUs this process may use {allowed:?}; pick `cpus` from those")]
    CpuUnavailable { cpu: usize, allowed: Vec<usize> },
    #[error("no host CPUs given: name at least one in `cpus`")]
    NoCpus,
    #[error("{vcpus} vCPUs in all but this VMM serves at most {max} per host (one thread each); use fewer VMs or vCPUs")]
    TooManyVcpus { vcpus: u32, max: u32 },
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("cannot start the scheduler thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("VM {vm} does not exist: this host runs {vms} VMs")]
    NoSuchVm { vm: usize, vms: usize },
    #[error(transparent)]
    IrqRoute(#[from] crate::irq_route::IrqRouteError),
    #[error("interrupt affinity `running` needs a user-level policy: under `linux` the host does not know which vCPU runs; use a vCPU list or balanced")]
    RunningNeedsScheduler,
    #[error("interrupt affinity `{affinity}` names no vCPU of VM {vm} (vCPUs 0-{last})")]
    NoIrqTarget {
        affinity: String,
        vm: usize,
        last: u32,
    },
    #[error("cannot pin vCPU {vcpu} of VM {vm} to host CPUs {cpus:?}: {source}")]
    Pin {
        vm: usize,
        vcpu: u32,
        cpus: Vec<usize>,
        #[source]
        source: std::io::Error,
    },
}

/// Most vCPU threads one host process runs (a thread and a KVM vCPU each).
pub const MAX_HOST_VCPUS: u32 = 256;

/// How the scheduler samples running vCPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    pub interval: Duration,
    /// Ask running vCPUs for their registers (spin detection); without it,
    /// only the CPU clock is read (halt detection), which needs no exit.
    pub detect_spin: bool,
    pub spin: SpinSettings,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            interval: Duration::from_micros(1000),
            detect_spin: true,
            spin: SpinSettings::default(),
        }
    }
}

/// One vCPU as the scheduler keeps it.
#[derive(Default)]
struct Slot {
    kicker: Option<Kicker>,
    /// The vCPU thread's `/proc/self/task/TID/stat`, while it runs.
    proc_stat: Option<std::fs::File>,
    /// Ticks in a row it was found sleeping while granted.
    asleep_ticks: u32,
    granted: Option<usize>,
    /// Granted since the ticker last looked: its CPU clock has no baseline.
    fresh: bool,
    preempt: bool,
    want_sample: bool,
    /// A spin sample was skipped since its last one (the policy could not
    /// have acted on it): its detector's streak restarts at the next.
    sample_gap: bool,
    counts: VcpuReport,
    /// The vCPU thread's id, once it ran (to re-pin it under `linux`).
    tid: Option<libc::pid_t>,
    /// Under `linux`: the host CPUs it was last told to use, applied when
    /// its thread attaches if it did not exist yet.
    linux_cpus: Option<Vec<usize>>,
    /// The guest's published counters (Kulkarni & Kulkarni's indicators), while its VM runs.
    sensors: Option<GuestSensors>,
    /// Words its reader refused, kept when the reader goes with the VM.
    sensors_rejected: u64,
}

struct State {
    policy: Option<Scheduler>,
    slots: Vec<Slot>,
    vm_done: Vec<bool>,
    vm_finished_ns: Vec<Option<u64>>,
    /// Per VM: its interrupts follow its running vCPUs (affinity `running`).
    irq_running: Vec<bool>,
    /// Per VM: the routing mask written last (0: none).
    irq_mask: Vec<u64>,
    /// The `/proc` stat files of vCPU threads that left, closed with the
    /// scheduler: a vCPU thread's seccomp filter has no `close`.
    retired_files: Vec<std::fs::File>,
}

struct Shared {
    state: Mutex<State>,
    granted: Condvar,
    epoch: Instant,
    host_cpus: Vec<usize>,
    vm_base: Vec<usize>,
    sampling: Sampling,
    policy: HostPolicy,
    stop: AtomicBool,
    /// Per VM: its guest's routing page (bound when the VM's memory exists).
    routes: Vec<crate::irq_route::IrqRoute>,
    vcpus_per_vm: Vec<u32>,
}

/// The user-level scheduler of one host: cheap to clone, shared by every VM.
#[derive(Clone)]
pub struct HostScheduler {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for HostScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostScheduler")
            .field("policy", &self.shared.policy)
            .field("host_cpus", &self.shared.host_cpus)
            .finish_non_exhaustive()
    }
}

/// Two handles are equal when they are the same scheduler.
impl PartialEq for HostScheduler {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}
impl Eq for HostScheduler {}

/// Where one VM's vCPUs attach ([`crate::VmConfig::host`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSlot {
    pub scheduler: HostScheduler,
    pub vm: usize,
}

impl HostScheduler {
    /// A scheduler for VMs with `vcpus_per_vm` vCPUs on `host_cpus`.
    pub fn new(
        policy: &HostPolicy,
        vcpus_per_vm: &[u32],
        host_cpus: &[usize],
        sampling: Sampling,
    ) -> Result<HostScheduler, HostError> {
        if host_cpus.is_empty() {
            return Err(HostError::NoCpus);
        }
        let allowed = crate::placement::allowed_cpus();
        if let Some(&cpu) = host_cpus.iter().find(|c| !allowed.contains(c)) {
            return Err(HostError::CpuUnavailable { cpu, allowed });
        }
        let total: u32 = vcpus_per_vm.iter().sum();
        if total > MAX_HOST_VCPUS {
            return Err(HostError::TooManyVcpus {
                vcpus: total,
                max: MAX_HOST_VCPUS,
            });
        }
        let policy_engine = match policy.kind.decider() {
            // The kernel schedules the vCPU threads; safe points need a
            // user-level scheduler and are refused.
            Decider::HostKernel => {
                smplab_policy::check(policy, vcpus_per_vm, host_cpus.len())?;
                None
            }
            // Refused with the names to use instead.
            Decider::SimulatedKernel | Decider::UserLevel => {
                Some(Scheduler::new(policy, vcpus_per_vm, host_cpus.len())?)
            }
        };
        let mut vm_base = Vec::new();
        let mut base = 0;
        for &n in vcpus_per_vm {
            vm_base.push(base);
            base += n as usize;
        }
        let slots = (0..base).map(|_| Slot::default()).collect();
        Ok(HostScheduler {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    policy: policy_engine,
                    slots,
                    vm_done: vec![false; vcpus_per_vm.len()],
                    vm_finished_ns: vec![None; vcpus_per_vm.len()],
                    irq_running: vec![false; vcpus_per_vm.len()],
                    irq_mask: vec![0; vcpus_per_vm.len()],
                    retired_files: Vec::new(),
                }),
                granted: Condvar::new(),
                epoch: Instant::now(),
                host_cpus: host_cpus.to_vec(),
                vm_base,
                sampling,
                policy: *policy,
                stop: AtomicBool::new(false),
                routes: vcpus_per_vm
                    .iter()
                    .map(|_| crate::irq_route::IrqRoute::new())
                    .collect(),
                vcpus_per_vm: vcpus_per_vm.to_vec(),
            }),
        })
    }

    /// Place the first vCPUs and start the ticker thread; stop it with
    /// [`HostScheduler::finish`].
    pub fn start(&self) -> Result<JoinHandle<()>, HostError> {
        {
            let mut st = self.shared.lock();
            let now = self.shared.now();
            if let Some(p) = st.policy.as_mut() {
                let actions = p.start(now);
                self.shared.apply(&mut st, actions, None);
            }
        }
        let shared = self.shared.clone();
        let filter = crate::seccomp::ThreadFilter::for_spawn(crate::seccomp::ThreadKind::Ticker);
        std::thread::Builder::new()
            .name("smplab-sched".into())
            .spawn(move || {
                filter.install_or_exit(0);
                shared.ticker()
            })
            .map_err(HostError::Thread)
    }

    /// Set up `vm` for sampling before its vCPUs exist: dirty rings when spin
    /// detection is on (their entry count), else `None` (the detector then
    /// judges by the instruction pointer alone).
    pub fn prepare_vm(&self, vm: &crate::vm::Vm) -> Option<u32> {
        let sampling = &self.shared.sampling;
        if !(sampling.detect_spin
            && sampling.spin.use_dirty_ring
            && self.shared.policy.is_user_level())
        {
            return None;
        }
        dirty::enable(vm)
    }

    /// The hook vCPU `index` of VM `vm` runs before every KVM_RUN; `ring`:
    /// its dirty ring, if [`HostScheduler::prepare_vm`] enabled them.
    pub fn attach(
        &self,
        vm: usize,
        index: u32,
        kicker: Kicker,
        ring: Option<DirtyRing>,
        truth: Option<truth::SpinTruth>,
    ) -> VcpuGrant {
        let vcpu = self.shared.vm_base.get(vm).copied().unwrap_or(0) + index as usize;
        if let Some(slot) = self.shared.lock().slots.get_mut(vcpu) {
            slot.kicker = Some(kicker);
            slot.sensors = truth.as_ref().map(|t| t.sensors());
        }
        VcpuGrant {
            shared: self.shared.clone(),
            vm,
            vcpu,
            pinned_to: None,
            detector: SpinDetector::new(
                self.shared.sampling.spin,
                ring,
                truth.as_ref().map(|t| t.memory().clone()),
            ),
            truth,
            attached: false,
            schedstat: None,
        }
    }

    /// The host policy this scheduler runs.
    pub fn policy(&self) -> &HostPolicy {
        &self.shared.policy
    }

    /// The user-level policy's counts per vCPU so far (VM 0's vCPUs first);
    /// empty under `linux`.
    pub fn vcpu_stats(&self) -> Vec<smplab_policy::VcpuStats> {
        let st = self.shared.lock();
        st.policy
            .as_ref()
            .map(|p| (0..p.vcpus()).map(|v| *p.stats(v)).collect())
            .unwrap_or_default()
    }

    /// The counters each vCPU's guest publishes (VM 0's vCPUs first), read
    /// from guest memory now, without an exit; `None` for a vCPU whose guest
    /// has not published them yet (or no longer runs). Under every policy,
    /// `linux` included.
    pub fn guest_counters(&self) -> Vec<Option<GuestCounters>> {
        let readers: Vec<Option<GuestSensors>> = self
            .shared
            .lock()
            .slots
            .iter()
            .map(|s| s.sensors.clone())
            .collect();
        readers
            .iter()
            .map(|r| r.as_ref().and_then(GuestSensors::read))
            .collect()
    }

    /// Change the user-level policy's slice from now on (Kulkarni & Kulkarni's tuner);
    /// no effect under `linux`.
    pub fn set_slice_ns(&self, slice_ns: u64) {
        if let Some(p) = self.shared.lock().policy.as_mut() {
            p.set_slice_ns(slice_ns);
        }
    }

    /// VM `vm` is over (it exited, crashed or timed out): its pCPUs go to the
    /// others at once. Idempotent.
    pub fn vm_finished(&self, vm: usize) {
        let mut st = self.shared.lock();
        self.shared.finish_vm(&mut st, vm);
    }

    /// Stop the ticker and build the host section.
    pub fn finish(&self, ticker: Option<JoinHandle<()>>) -> HostReport {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.granted.notify_all();
        if let Some(t) = ticker {
            let _ = t.join();
        }
        let mut st = self.shared.lock();
        let now = self.shared.now();
        if let Some(p) = st.policy.as_mut() {
            p.account_until(now);
        }
        self.shared.report(&st, now)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Carry out the policy's actions; `me` is the vCPU whose thread applies
    /// them (it needs no kick to see its own preemption).
    fn apply(&self, st: &mut State, actions: Vec<Action>, me: Option<usize>) {
        let mut granted = false;
        for action in actions {
            match action {
                Action::Run { vcpu, pcpu } => {
                    st.slots[vcpu].granted = Some(pcpu);
                    st.slots[vcpu].fresh = true;
                    granted = true;
                }
                Action::Preempt { vcpu } => {
                    let slot = &mut st.slots[vcpu];
                    slot.preempt = true;
                    if me != Some(vcpu) {
                        if let Some(k) = &slot.kicker {
                            k.kick();
                        }
                    }
                }
            }
        }
        if granted {
            self.granted.notify_all();
        }
        self.route_to_running(st);
    }

    fn finish_vm(&self, st: &mut State, vm: usize) {
        if st.vm_done.get(vm).copied().unwrap_or(true) {
            return;
        }
        st.vm_done[vm] = true;
        let now = self.now();
        st.vm_finished_ns[vm] = Some(now);
        let base = self.vm_base[vm];
        let end = self.vm_base.get(vm + 1).copied().unwrap_or(st.slots.len());
        let State {
            slots,
            retired_files,
            ..
        } = &mut *st;
        for slot in &mut slots[base..end] {
            slot.granted = None;
            slot.preempt = false;
            retired_files.extend(slot.proc_stat.take());
            // Its memory goes with its run.
            if let Some(sensors) = slot.sensors.take() {
                slot.sensors_rejected += sensors.rejected();
            }
        }
        if let Some(p) = st.policy.as_mut() {
            let actions = p.finished(vm, now);
            self.apply(st, actions, None);
        }
    }

    fn ticker(&self) {
        let interval = self.sampling.interval;
        while !self.stop.load(Ordering::Acquire) {
            std::thread::sleep(interval);
            let mut st = self.lock();
            if st.policy.is_none() || st.vm_done.iter().all(|&d| d) {
                continue;
            }
            let now = self.now();
            let actions = st.policy.as_mut().map(|p| p.tick(now)).unwrap_or_default();
            self.apply(&mut st, actions, None);
            for v in 0..st.slots.len() {
                let slot = &mut st.slots[v];
                if slot.granted.is_none() || slot.preempt {
                    continue;
                }
                let Some(stat) = &slot.proc_stat else {
                    continue;
                };
                let asleep = thread_sleeping(stat);
                if std::mem::take(&mut slot.fresh) || !asleep {
                    slot.asleep_ticks = 0;
                } else {
                    slot.asleep_ticks += 1;
                }
                if slot.asleep_ticks >= HALTED_TICKS {
                    slot.asleep_ticks = 0;
                    let actions = st.policy.as_mut().map(|p| {
                        p.sample(
                            v,
                            now,
                            Sample {
                                halted: true,
                                ..Sample::default()
                            },
                        )
                    });
                    self.apply(&mut st, actions.unwrap_or_default(), None);
                } else if self.sampling.detect_spin {
                    let wanted = st.policy.as_ref().is_none_or(|p| p.wants_spin_sample(v));
                    let slot = &mut st.slots[v];
                    if wanted {
                        slot.want_sample = true;
                        if let Some(k) = &slot.kicker {
                            k.kick();
                        }
                    } else {
                        slot.sample_gap = true;
                        slot.counts.samples_skipped += 1;
                    }
                }
            }
        }
    }

    fn report(&self, st: &State, now: u64) -> HostReport {
        let mut vms = Vec::new();
        for (vm, &base) in self.vm_base.iter().enumerate() {
            let end = self.vm_base.get(vm + 1).copied().unwrap_or(st.slots.len());
            let mut r = VmReport {
                vm,
                wall_ns: st.vm_finished_ns[vm].unwrap_or(now),
                ..VmReport::default()
            };
            for v in base..end {
                let mut c = st.slots[v].counts.clone();
                if let Some(p) = &st.policy {
                    let s = p.stats(v);
                    c.run_ns = s.run_ns;
                    c.steal_ns = s.wait_ns;
                    c.preemptions = s.preemptions;
                    c.yields_received = s.yields_received;
                    c.halts_detected = s.halts_detected;
                    c.safepoint_deferrals = s.safepoint_deferrals;
                }
                r.add(&c);
                r.vcpus.push(c);
                let slot = &st.slots[v];
                r.sensor_values_rejected +=
                    slot.sensors_rejected + slot.sensors.as_ref().map_or(0, GuestSensors::rejected);
            }
            r.route_values_rejected = self.routes.get(vm).map_or(0, IrqRoute::rejected);
            vms.push(r);
        }
        let pcpus = match &st.policy {
            Some(p) => self
                .host_cpus
                .iter()
                .zip(p.pcpu_busy_ns())
                .map(|(&cpu, &busy)| PcpuReport::new(cpu, busy, now))
                .collect(),
            None => Vec::new(),
        };
        HostReport {
            policy: self.policy,
            host_cpus: self.host_cpus.clone(),
            wall_ns: now,
            sample_interval_ns: u64::try_from(self.sampling.interval.as_nanos())
                .unwrap_or(u64::MAX),
            spin_detection: SpinDetection::from_vms(&vms, self.sampling.detect_spin),
            vms,
            pcpus,
        }
    }
}

/// Whether the thread of `stat` (its open `/proc/.../stat`) is sleeping
/// (state `S` or `D`: for a granted vCPU thread, blocked in KVM's halt).
fn thread_sleeping(stat: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 512];
    let Ok(n) = stat.read_at(&mut buf, 0) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may
    // itself hold spaces or parentheses: look after the last ')'.
    let text = &buf[..n];
    let Some(close) = text.iter().rposition(|&b| b == b')') else {
        return false;
    };
    matches!(text.get(close + 2), Some(b'S' | b'D'))
}

fn own_proc_stat() -> Option<std::fs::File> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    std::fs::File::open(format!("/proc/self/task/{tid}/stat")).ok()
}

/// The kernel's view of a thread: time on a CPU and time waiting on a run
/// queue (`schedstat`: its open `/proc/thread-self/schedstat`, ns).
fn read_schedstat(schedstat: &std::fs::File) -> Option<(u64, u64)> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 128];
    let n = schedstat.read_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(buf.get(..n)?).ok()?;
    let mut words = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some((words.next()??, words.next()??))
}

/// One vCPU's hold on the host: see the module comment.
pub struct VcpuGrant {
    shared: Arc<Shared>,
    vm: usize,
    vcpu: usize,
    pinned_to: Option<usize>,
    detector: SpinDetector,
    /// The guest's own word on when it spins, to judge the detector by.
    truth: Option<truth::SpinTruth>,
    attached: bool,
    /// This thread's `/proc/thread-self/schedstat`, opened by `attach_thread`.
    schedstat: Option<std::fs::File>,
}

impl EntryGate for VcpuGrant {
    fn before_entry(&mut self, fd: &mut VcpuFd, control: &RunControl) -> ExitAction {
        self.grant_entry(fd, control)
    }

    fn finished(&mut self) {
        self.leave();
    }

    fn thread_started(&mut self, fd: &mut VcpuFd) {
        self.attach_thread(fd);
    }
}

impl VcpuGrant {
    /// Once per thread, before its seccomp filter: the TSC offset, the
    /// thread's `/proc` files (read later without opening anything), its id
    /// and a `linux` affinity set before it existed.
    fn attach_thread(&mut self, fd: &mut VcpuFd) {
        if self.attached {
            return;
        }
        self.attached = true;
        let shared = self.shared.clone();
        if let Some(truth) = &mut self.truth {
            // Per vCPU: KVM may offset each one's TSC differently.
            truth.set_tsc_offset(truth::vcpu_tsc_offset(fd));
            truth.set_interval_ns(
                u64::try_from(shared.sampling.interval.as_nanos()).unwrap_or(u64::MAX),
            );
        }
        self.schedstat = std::fs::File::open("/proc/thread-self/schedstat").ok();
        let mut st = shared.lock();
        if let Some(slot) = st.slots.get_mut(self.vcpu) {
            slot.proc_stat = own_proc_stat();
            // SAFETY: gettid has no preconditions.
            slot.tid = Some(unsafe { libc::gettid() });
            // An affinity set under `linux` before this thread existed.
            if let Some(cpus) = &slot.linux_cpus {
                if pin_current_thread(cpus).is_ok() {
                    self.pinned_to = None;
                }
            }
        }
    }

    /// Before every KVM_RUN, on the vCPU's thread: wait for a grant, serve a
    /// sample, give the pCPU up when preempted. `Stop` once the VM stops.
    fn grant_entry(&mut self, fd: &mut VcpuFd, control: &RunControl) -> ExitAction {
        self.attach_thread(fd);
        let shared = self.shared.clone();
        let mut st = shared.lock();
        if st.policy.is_none() {
            return ExitAction::Resume;
        }
        loop {
            if control.should_stop() || st.vm_done[self.vm] {
                return ExitAction::Stop;
            }
            let slot = &mut st.slots[self.vcpu];
            if slot.preempt {
                slot.preempt = false;
                slot.granted = None;
                slot.want_sample = false;
                self.detector.reset();
                let now = shared.now();
                let actions = st.policy.as_mut().map(|p| p.stopped(self.vcpu, now));
                shared.apply(&mut st, actions.unwrap_or_default(), Some(self.vcpu));
                continue;
            }
            if slot.want_sample && slot.granted.is_some() {
                slot.want_sample = false;
                if std::mem::take(&mut slot.sample_gap) {
                    self.detector.restart_streak();
                }
                drop(st);
                let started = Instant::now();
                let observed = self.detector.observe(fd);
                let cost = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                st = shared.lock();
                let counts = &mut st.slots[self.vcpu].counts;
                counts.samples += 1;
                counts.sample_ns += cost;
                counts.pages_written += self.detector.last_pages().unwrap_or(0);
                if self.detector.last_pages().is_some() {
                    counts.dirty_samples += 1;
                }
                if observed.spinning {
                    counts.spins_detected += 1;
                }
                if let Some(truth) = &mut self.truth {
                    truth.judge(observed.spinning, counts);
                }
                let now = shared.now();
                let actions = st
                    .policy
                    .as_mut()
                    .map(|p| p.sample(self.vcpu, now, observed));
                shared.apply(&mut st, actions.unwrap_or_default(), Some(self.vcpu));
                continue;
            }
            if let Some(pcpu) = slot.granted {
                let cpu = shared.host_cpus[pcpu];
                if self.pinned_to != Some(cpu) {
                    // A failed pin leaves the thread where it was: the grant
                    // still serializes it, only the CPU is not the named one.
                    if pin_current_thread(&[cpu]).is_ok() {
                        self.pinned_to = Some(cpu);
                        slot.counts.migrations += 1;
                    }
                }
                return ExitAction::Resume;
            }
            st = shared
                .granted
                .wait_timeout(st, STOP_POLL)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// The vCPU thread leaves its run loop: the VM is stopping. Records the
    /// kernel's view of the thread and frees the VM's pCPUs.
    fn leave(&mut self) {
        let sched = self.schedstat.as_ref().and_then(read_schedstat);
        let mut st = self.shared.lock();
        let linux = st.policy.is_none();
        let mut retired = None;
        if let Some(slot) = st.slots.get_mut(self.vcpu) {
            if let Some((run, wait)) = sched {
                slot.counts.thread_run_ns = run;
                slot.counts.thread_runqueue_wait_ns = wait;
                if linux {
                    // linux: the kernel's run-queue wait is the steal time.
                    slot.counts.run_ns = run;
                    slot.counts.steal_ns = wait;
                }
            }
            retired = slot.proc_stat.take();
        }
        st.retired_files.extend(retired);
        self.shared.finish_vm(&mut st, self.vm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_policy::PolicyKind;

    /// Every policy of the registry either builds its user-level scheduler
    /// here (the same as the simulator's), leaves the threads to the kernel
    /// (`linux`), or is refused with the names to use (`fair`).
    #[test]
    fn every_policy_is_built_or_refused_by_its_decider() {
        let cpu = crate::placement::allowed_cpus()[0];
        for &kind in PolicyKind::ALL {
            let policy = HostPolicy {
                kind,
                time_slice_ns: Some(1_000_000),
                safe_point_grace_ns: None,
            };
            let built = HostScheduler::new(&policy, &[1], &[cpu], Sampling::default());
            match kind.decider() {
                Decider::HostKernel => {
                    assert!(built.expect("linux").shared.lock().policy.is_none());
                }
                Decider::SimulatedKernel => assert!(matches!(
                    built,
                    Err(HostError::Policy(PolicyError::SimulatorOnly))
                )),
                Decider::UserLevel => {
                    let sched = built.unwrap_or_else(|e| panic!("{policy}: {e}"));
                    assert_eq!(sched.policy(), &policy);
                    assert!(sched.shared.lock().policy.is_some());
                }
            }
        }
        let mut linux_with_grace = HostPolicy::parse("linux").expect("linux");
        linux_with_grace.safe_point_grace_ns = Some(1_000_000);
        assert!(matches!(
            HostScheduler::new(&linux_with_grace, &[1], &[cpu], Sampling::default()),
            Err(HostError::Policy(PolicyError::SafePointNeedsUserLevel(_)))
        ));
    }
}
