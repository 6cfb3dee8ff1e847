//! The simulation engine: state of pCPUs, vCPUs, threads and synchronization
//! objects, and the event loop. The model's parts live in submodules that each
//! add `impl Sim` methods:
//!
//! - [`host`]: the host kernel's scheduling (`linux`, `fair`: per-pCPU run
//!   queues, vruntime, affinity, time slices, load balancing, idle stealing),
//! - [`policy_host`]: the user-level policies (gang, partition, spin, safe
//!   points) as smplab-policy decides them, driven with simulated events,
//! - [`guest`]: the guest OS (threads on vCPUs, guest scheduler, idle, wakeups,
//!   shootdowns) and the interpreter of the program,
//! - [`sync`]: spin locks, mutexes, barriers and queues,
//! - [`vmm`]: exits, PLE, the Spin Detection Buffer, device-emulation sync,
//! - [`cache`]: the first-order cache model.
//!
//! Time is in integer nanoseconds. Everything is deterministic for a seed: the
//! only randomness (SDB false positives) comes from a seeded generator, and the
//! event queue breaks ties by insertion order.

mod account;
mod balance;
mod cache;
mod guest;
mod host;
mod io;
mod policy_host;
mod prefetch;
mod sync;
pub(crate) mod tune;
mod vmm;

use crate::code::{compile, GroupCode, Ins};
use crate::events::{Kind, Queue};
use crate::platform::Platform;
use crate::scenario::{Affinity, Idle, Policy, Scenario, VmSpec};
use crate::SimError;
use smplab_workload::spec::{BarrierWait, SpinKind};
use std::collections::VecDeque;
use std::sync::Arc;

pub(crate) const NONE: u32 = u32::MAX;

/// Where a vCPU is as far as the host scheduler knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostState {
    /// On pCPU `Vcpu::pcpu`.
    Running,
    /// Runnable, waiting in `Pcpu::rq` of `Vcpu::pcpu`.
    Queued,
    /// Runnable, waiting for the user-level policy (`policy_host`) to grant
    /// it a pCPU.
    Parked,
    /// Blocked in the host after HLT (or the VM has finished).
    Halted,
}

/// What a running vCPU is doing; only meaningful while `HostState::Running`
/// (otherwise `Off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    Off,
    /// Paying a cost (exit, switch, warm-up) until `act_end`.
    Overhead,
    /// Running the handler of the first queued shootdown IPI.
    Handler,
    /// The current thread runs user work until `act_end`.
    Segment,
    /// The current thread spins (see `Thread::wait`).
    Spin,
    /// Guest idle loop polling.
    IdlePoll,
    /// HLT exit in progress.
    Halting,
    /// Host halt-polling after HLT.
    HaltPoll,
}

use crate::breakdown::{self as cause};
pub(crate) use account::{Acct, ThreadAcct, VcpuAcct};

/// Exit reasons counted per vCPU; names are the record's keys.
pub(crate) mod exit {
    pub const HLT: usize = 0;
    pub const IPI_SEND: usize = 1;
    pub const IPI_RECEIVE: usize = 2;
    pub const PLE: usize = 3;
    pub const SDB: usize = 4;
    pub const PREEMPT: usize = 5;
    pub const DEVICE: usize = 6;
    pub const TIMER: usize = 7;
    /// Host interrupts (the host's timer tick) taking a vCPU out of guest
    /// mode: KVM's `irq_exits` (`Sim::host_tick_exits`).
    pub const IRQ: usize = 8;
    pub const N: usize = 9;
    /// `apic_eoi` counts the exits of interrupt receipt (EOI write, kick):
    /// none with APICv, which handles them in hardware.
    pub const NAMES: [&str; N] = [
        "hlt",
        "apic_icr",
        "apic_eoi",
        "ple",
        "sdb",
        "preemption",
        "io",
        "timer",
        "irq",
    ];
}

/// Hot fields first (`repr(C)`): the event loop reads or writes the first
/// two cache lines on almost every event of the vCPU (activity, step
/// generation, accounting, current thread, run queue); spin, PLE and SDB
/// state, load tracking, placement and the exit counters follow. Without
/// `repr(C)` the compiler orders fields by alignment, which scattered the
/// hot 32-bit fields after the exit counters, five cache lines in. Aligned
/// to a cache line, the hot part spans three lines (with the spin fields).
#[repr(C, align(64))]
pub(crate) struct Vcpu {
    /// Time of the pending Step event of the current generation (u64::MAX:
    /// none), so rescheduling to the same instant pushes nothing.
    pub step_at: u64,
    pub act_end: u64,
    pub seg_start: u64,
    pub overhead_left: u64,
    pub acct_since: u64,
    /// Running time left until the next device exit.
    pub next_device_in: u64,
    /// End of the current thread's guest time slice.
    pub slice_end: u64,
    /// Generation: bumped whenever the pending Step event becomes stale.
    pub gen: u32,
    /// Current thread or NONE.
    pub cur: u32,
    pub vm: u32,
    pub pcpu: u32,
    /// pCPU charged along with the current accounting state (NONE: off-pCPU).
    pub acct_pcpu: u32,
    /// Thread whose segment the current `Acct::Segment` state charges.
    pub acct_thread: u32,
    pub host: HostState,
    pub act: Act,
    pub acct: Acct,
    pub wake_pending: bool,
    /// The vCPU is being preempted by its own PLE/SDB yield.
    pub yielded: bool,
    /// Its VM finished and its accounting is closed (nothing more is
    /// charged to the VM): here rather than in `Vm`, whose cache line
    /// charging would otherwise read for every interval.
    pub acct_closed: bool,
    /// Guest run queue of ready threads.
    pub rq: VecDeque<u32>,
    /// Initiator threads of shootdowns whose handler must run here.
    pub irqs: VecDeque<u32>,
    pub spin_since: u64,
    pub spin_iter_ns: f64,
    pub ple_at: u64,
    pub sdb_at: u64,
    /// What is left of an interrupted shootdown handler (0: none).
    pub handler_left: u64,
    /// PLE window growth (KVM grows the window when a PLE exit finds nobody to yield to).
    pub ple_shift: u32,
    pub last_pcpu: u32,
    /// Allowed pCPUs: `lo .. hi`.
    pub lo: u32,
    pub hi: u32,
    /// The pCPU whose `min_vr` `vruntime` is measured against (NONE: none yet).
    pub vr_pcpu: u32,
    pub index: u32,
    /// PELT-like runnable average (0..1) as of `load_at` (load balancing).
    pub load_avg: f64,
    pub load_at: u64,
    pub exits: [u64; exit::N],
}

const _: () = assert!(std::mem::offset_of!(Vcpu, handler_left) + 8 <= 192);

pub(crate) struct Pcpu {
    pub cur: u32,
    pub rq: VecDeque<u32>,
    /// Bumped per dispatch (SDB false-positive events check it).
    pub slice_gen: u32,
    /// When the current dispatch's slice ends (u64::MAX: not armed).
    pub slice_end: u64,
    /// Time of the pending Slice event (u64::MAX: none).
    pub slice_event_at: u64,
    pub sdb_armed: bool,
    pub dispatched_at: u64,
    pub last_vcpu: u32,
    /// A directed-yield target to run next (CFS's next buddy), or NONE.
    pub buddy: u32,
    /// CFS's `cfs_rq->min_vruntime`: monotonic floor of the vruntimes here.
    pub min_vr: u64,
    pub domain: u32,
    pub idle_ns: u64,
    /// Idle since (u64::MAX: busy).
    pub idle_since: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TState {
    /// Runnable: current on a vCPU or in a guest run queue.
    Running,
    Spinning,
    Blocked,
    Sleeping,
    /// Blocked in an `io` op until its completion interrupt's handler wakes it.
    IoWait,
    Done,
}

/// What a spinning thread waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    None,
    SpinLock(u32),
    /// Adaptive mutex spin phase.
    Mutex(u32),
    Barrier(u32),
    Shootdown,
}

pub(crate) struct Thread {
    pub vm: u32,
    pub group: u32,
    pub index: u32,
    pub vcpu: u32,
    /// Index in `Sim::code` of the thread's group's first instruction.
    pub code: u32,
    /// Current instruction, relative to `code`.
    pub pc: u32,
    pub loops: Vec<(u32, u64)>,
    pub state: TState,
    pub wait: Wait,
    /// A blocking op being retried after a wakeup (not counted again).
    pub retry: bool,
    /// Work left of the current (fused) segment.
    pub seg_left: u64,
    /// Small costs (atomics, syscalls) added to the next segment; the sum
    /// of `ThreadAcct::kcarry`.
    pub carry: u64,
    /// `ThreadAcct::seg_k` may hold uncharged costs (false: all zero, so
    /// charging a segment need not read it).
    pub seg_k_live: bool,

    /// Absolute end of the current spin phase (u64::MAX: unlimited).
    pub spin_deadline: u64,
    /// Spinning time left before giving up (spin-then-block, adaptive mutex);
    /// counts only time actually spinning on a pCPU.
    pub spin_budget: u64,
    pub spin_locks_held: u32,
    pub acks_pending: u32,
    pub end_ns: u64,
    pub cpu_ns: u64,
    /// Private-cache lines of private and of shared data this thread needs warm.
    pub private_lines: u64,
    pub shared_lines: u64,
}

pub(crate) struct SpinLockSt {
    pub holder: u32,
    pub waiters: Vec<u32>,
    pub kind: SpinKind,
    pub pause: bool,
}

pub(crate) struct MutexSt {
    pub holder: u32,
    pub spinners: Vec<u32>,
    pub blocked: VecDeque<u32>,
    pub spin_limit: u32,
}

pub(crate) struct BarrierSt {
    pub parties: u32,
    pub arrived: u32,
    pub waiters: Vec<u32>,
    pub wait: BarrierWait,
    pub spin_limit: u32,
    pub pause: bool,
}

pub(crate) struct QueueSt {
    pub count: u32,
    pub capacity: u32,
    pub pushers: VecDeque<u32>,
    pub poppers: VecDeque<u32>,
}

/// Effective costs of one VM (virtualized or native), resolved once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Costs {
    pub virtualized: bool,
    /// APIC virtualization: EOIs and interrupt acceptance need no exit.
    pub apicv: bool,
    pub ipi_send: u64,
    pub ipi_receive: u64,
    pub hlt_exit: u64,
    pub wake_latency: u64,
    pub halt_poll_wake: u64,
    pub poll_notice: u64,
    pub switch: u64,
    pub exit: u64,
    pub user_exit: u64,
    pub sdb_detect: u64,
    pub sdb_fp: f64,
    /// Bare metal: the idle governor's polling window before C1.
    pub native_idle_poll: u64,
    /// Guest (or bare-metal) kernel paths: `Platform::kernel`.
    pub kernel: crate::platform::KernelCosts,
}

pub(crate) struct Vm {
    pub spec_idle: Idle,
    pub ple: crate::scenario::Ple,
    pub sdb: bool,
    pub devices: Option<crate::scenario::Devices>,
    pub costs: Costs,
    pub first_thread: u32,
    pub n_threads: u32,
    pub first_vcpu: u32,
    pub n_vcpus: u32,
    pub spin_locks: Vec<SpinLockSt>,
    pub mutexes: Vec<MutexSt>,
    pub barriers: Vec<BarrierSt>,
    pub queues: Vec<QueueSt>,
    /// Units left in each pool of the program (`drain` ops).
    pub pools: Vec<u64>,
    pub ops: [u64; crate::code::counter::N],
    pub spin_iters: f64,
    pub blocks: u64,
    pub wakeups: u64,
    pub cs_voluntary: u64,
    pub cs_involuntary: u64,
    pub done_threads: u32,
    pub end_ns: u64,
    pub running: u32,
    /// Threads waiting in the run queues of this VM's vCPUs (lets an idle
    /// vCPU skip scanning its siblings when there is nothing to steal).
    pub queued_threads: u32,
    pub running_per_domain: Vec<u32>,
    pub ipis: u64,
    pub migrations: u64,
    pub warmup_ns: u64,
    pub device_busy_until: u64,
    pub device_sync_acc: f64,
    pub device_bypass_acc: f64,
    pub device_wait_ns: u64,
}

pub(crate) struct Sim {
    pub now: u64,
    /// Exact accounting, per vCPU, thread and pCPU (see `account.rs`).
    pub vacct: Vec<VcpuAcct>,
    pub tacct: Vec<ThreadAcct>,
    /// vCPU time by cause (`crate::breakdown`), summed over each VM's vCPUs.
    pub vm_by_cause: Vec<[u64; cause::N]>,
    /// pCPU busy time by cause, summed over pCPUs, and busy time per pCPU:
    /// all the record needs, in two arrays that stay in cache instead of
    /// one cause array per pCPU.
    pub pcpu_by_cause: [u64; cause::N],
    pub pcpu_busy: Vec<u64>,
    pub q: Queue,
    pub platform: Platform,
    pub policy: Policy,
    pub slice_ns: u64,
    pub pcpus: Vec<Pcpu>,
    pub vcpus: Vec<Vcpu>,
    /// Per vCPU: host CPU time received (CFS's vruntime, equal weights), on
    /// the clock of pCPU `Vcpu::vr_pcpu`'s `min_vr`. Apart from `Vcpu`
    /// because picking and placing read it for every vCPU of a run queue:
    /// one compact array instead of a cache line per vCPU.
    pub vruntime: Vec<u64>,
    pub threads: Vec<Thread>,
    pub vms: Vec<Vm>,
    /// One bit per pCPU: idle.
    pub idle_bits: Vec<u64>,
    /// One bit per pCPU: run queue not empty.
    pub busy_rq_bits: Vec<u64>,
    /// Per pCPU: queued vCPUs plus one if one runs (`Sim::note_pcpu_load`
    /// keeps it with `Pcpu::rq` and `Pcpu::cur`). Wake balancing compares
    /// the pCPUs of a domain: one compact array instead of two cache lines
    /// of `Pcpu` each.
    pub pcpu_load: Vec<u32>,
    /// One bit per vCPU: guest run queue (`Vcpu::rq`) not empty. An idle
    /// vCPU looking for a thread to steal visits only these siblings.
    pub vcpu_rq_bits: Vec<u64>,
    pub domains: u32,
    pub per_llc: u32,
    pub rng: u64,
    pub vms_done: u32,
    /// The user-level policy's driver (None: the kernel model decides).
    pub phost: Option<Box<policy_host::PolicyHost>>,
    /// SMPLAB_SIM_STATS set: count events by kind (printed to stderr at the end).
    pub stats: bool,
    /// SMPLAB_SIM_TRACE set: print every event to stderr (debugging).
    pub trace: bool,
    pub kind_counts: [u64; 14],
    /// Stale events popped and discarded.
    pub stale: u64,
    /// Load balancing: failed attempts per scheduling domain (Linux's
    /// `nr_balance_failed`), indexed by level × pCPUs + the domain's first pCPU.
    pub balance_failed: Vec<u32>,
    /// Compiled programs by program (see `add_vm`), with the index in
    /// `code` of each group's first instruction.
    pub code_cache: Vec<(smplab_workload::Program, Arc<Vec<GroupCode>>, Vec<u32>)>,
    /// Every compiled group's instructions, one after the other: a thread
    /// fetches `code[Thread::code + pc]`, one load away from the thread
    /// instead of four (VM, program, group, instructions).
    pub code: Vec<Ins>,
    /// Devices and interrupt routing of each VM (`io.rs`).
    pub io: Vec<io::VmIo>,
    /// Per VM: it has devices (`io` ops). Read on every thread switch, so
    /// kept apart from the large `io` entries, which VMs without devices
    /// never need in cache.
    pub io_active: Vec<bool>,
    /// Seed 001's adaptive tuner, when enabled (`tune.rs`).
    pub tuner: Option<tune::SimTuner>,
}

/// What the engine hands back per VM.
pub(crate) struct VmOutcome {
    pub finished: bool,
    pub wall_ns: u64,
    pub threads: Vec<(u32, u32, u64, u64)>,
    pub ops: [u64; crate::code::counter::N],
    pub spin_iterations: u64,
    pub blocks: u64,
    pub wakeups: u64,
    pub cs_voluntary: u64,
    pub cs_involuntary: u64,
    pub exits: [u64; exit::N],
    pub spin_ns: u64,
    pub idle_ns: u64,
    pub steal_ns: u64,
    pub ipis: u64,
    pub migrations: u64,
    pub warmup_ns: u64,
    pub device_wait_ns: u64,
    pub finished_threads: u32,
    /// vCPU time by cause, summed over the VM's vCPUs.
    pub by_cause: [u64; cause::N],
}

pub(crate) struct RunOutcome {
    pub vms: Vec<VmOutcome>,
    /// pCPU busy time by cause, summed over pCPUs.
    pub pcpu_by_cause: [u64; cause::N],
    /// Per pCPU: (busy time by cause summed, idle time), for conservation checks.
    pub pcpu_totals: Vec<(u64, u64)>,
    /// Per VM: device-request latencies, when it ran `io` ops.
    pub io: Vec<Option<smplab_record::io::IoSection>>,
    /// Stale events popped and discarded (not counted in `events`).
    pub stale_events: u64,
    pub events: u64,
    pub end_ns: u64,
}

impl Sim {
    pub fn new(s: &Scenario) -> Result<Sim, SimError> {
        s.check()?;
        let p = &s.platform;
        let per_llc = s
            .topology
            .pcpus_per_llc
            .unwrap_or(p.cache.pcpus_per_llc)
            .max(1);
        let domains = s.pcpus.div_ceil(per_llc);
        let slice_ns = s.policy.time_slice_ns.unwrap_or(p.defaults.time_slice_ns);
        let words = (s.pcpus as usize).div_ceil(64);
        let mut sim = Sim {
            now: 0,
            vacct: Vec::new(),
            tacct: Vec::new(),
            vm_by_cause: Vec::new(),
            pcpu_by_cause: [0; cause::N],
            pcpu_busy: vec![0; s.pcpus as usize],
            q: Queue::for_vcpus(s.vms.iter().map(|v| u64::from(v.vcpus)).sum()),
            platform: p.clone(),
            policy: s.policy,
            slice_ns,
            pcpus: (0..s.pcpus)
                .map(|i| Pcpu {
                    cur: NONE,
                    rq: VecDeque::new(),
                    slice_gen: 0,
                    slice_end: u64::MAX,
                    slice_event_at: u64::MAX,
                    sdb_armed: false,
                    dispatched_at: 0,
                    last_vcpu: NONE,
                    buddy: NONE,
                    min_vr: 0,
                    domain: i / per_llc,
                    idle_ns: 0,
                    idle_since: u64::MAX,
                })
                .collect(),
            vcpus: Vec::new(),
            vruntime: Vec::new(),
            threads: Vec::new(),
            vms: Vec::new(),
            idle_bits: vec![0; words],
            busy_rq_bits: vec![0; words],
            pcpu_load: vec![0; s.pcpus as usize],
            vcpu_rq_bits: Vec::new(),
            domains,
            per_llc,
            rng: s.seed ^ 0x9E37_79B9_7F4A_7C15,
            vms_done: 0,
            phost: policy_host::PolicyHost::new(s)?,
            stats: std::env::var_os("SMPLAB_SIM_STATS").is_some(),
            trace: std::env::var_os("SMPLAB_SIM_TRACE").is_some(),
            kind_counts: [0; 14],
            stale: 0,
            balance_failed: Vec::new(),
            code_cache: Vec::new(),
            code: Vec::new(),
            io: Vec::new(),
            io_active: Vec::new(),
            tuner: None,
        };
        for i in 0..s.pcpus {
            sim.set_bit_idle(i, true);
        }
        let ranges = sim.vm_ranges(s);
        for (k, spec) in s.vms.iter().enumerate() {
            sim.add_vm(
                u32::try_from(k).unwrap_or(u32::MAX),
                spec,
                s.virtualized,
                ranges[k],
                u32::try_from(s.vms.len()).unwrap_or(u32::MAX),
            )?;
        }
        Ok(sim)
    }

    /// Allowed pCPU range of each VM: the whole host, or its share under
    /// `partition` (the policy's decision, `smplab_policy::partition_shares`).
    fn vm_ranges(&self, s: &Scenario) -> Vec<(u32, u32)> {
        let pc = s.pcpus;
        match &self.phost {
            Some(ph) => (0..s.vms.len())
                .map(|k| {
                    let (lo, hi) = ph.sched.share(k);
                    let to32 = |x: usize| u32::try_from(x).unwrap_or(pc);
                    (to32(lo), to32(hi))
                })
                .collect(),
            None => vec![(0, pc); s.vms.len()],
        }
    }

    fn add_vm(
        &mut self,
        k: u32,
        spec: &VmSpec,
        virtualized: bool,
        (plo, phi): (u32, u32),
        n_vms: u32,
    ) -> Result<(), SimError> {
        let p = &self.platform;
        // Identical programs share one compiled copy: with hundreds of VMs
        // running a few profiles this keeps the interpreter's code in cache.
        let (code, bases) = match self
            .code_cache
            .iter()
            .find(|(prog, _, _)| prog == &spec.program)
        {
            Some((_, c, b)) => (Arc::clone(c), b.clone()),
            None => {
                let c = Arc::new(compile(&spec.program, p));
                let mut bases = Vec::with_capacity(c.len());
                for g in c.iter() {
                    bases.push(u32::try_from(self.code.len()).map_err(|_| {
                        SimError::Scenario(
                            "the programs have over 4 billion instructions in total".into(),
                        )
                    })?);
                    self.code.extend_from_slice(&g.ins);
                }
                self.code_cache
                    .push((spec.program.clone(), Arc::clone(&c), bases.clone()));
                (c, bases)
            }
        };
        let p = &self.platform;
        let prog = &spec.program;
        let costs = if virtualized {
            Costs {
                virtualized,
                apicv: spec.apicv,
                ipi_send: if spec.apicv {
                    p.vmm.ipi_send_apicv_ns
                } else {
                    p.vmm.ipi_send_ns
                },
                ipi_receive: if spec.apicv {
                    p.vmm.ipi_receive_apicv_ns
                } else {
                    p.vmm.ipi_receive_ns
                },
                hlt_exit: p.vmm.hlt_exit_ns,
                wake_latency: p.vmm.hlt_wake_ns,
                halt_poll_wake: p.vmm.halt_poll_wake_ns,
                poll_notice: p.vmm.poll_notice_ns,
                switch: p.vmm.vcpu_switch_ns,
                exit: p.vmm.exit_ns,
                user_exit: p.vmm.user_exit_ns,
                sdb_detect: spec
                    .sdb
                    .and_then(|s| s.detect_ns)
                    .unwrap_or(p.sdb.detect_ns),
                sdb_fp: spec
                    .sdb
                    .and_then(|s| s.false_positive_rate)
                    .unwrap_or(p.sdb.false_positive_rate),
                native_idle_poll: 0,
                kernel: p.kernel(true),
            }
        } else {
            Costs {
                virtualized,
                apicv: false,
                ipi_send: p.native.ipi_send_ns,
                ipi_receive: p.native.ipi_receive_ns,
                hlt_exit: 0,
                wake_latency: p.native.idle_wake_ns,
                halt_poll_wake: p.native.poll_notice_ns,
                poll_notice: p.native.poll_notice_ns,
                switch: 0,
                exit: 0,
                user_exit: 0,
                sdb_detect: 0,
                sdb_fp: 0.0,
                native_idle_poll: p.native.idle_poll_ns,
                kernel: p.kernel(false),
            }
        };
        let first_thread = u32::try_from(self.threads.len()).unwrap_or(u32::MAX);
        let first_vcpu = u32::try_from(self.vcpus.len()).unwrap_or(u32::MAX);
        let n_threads = prog.total_threads();
        let line = p.cache.line_bytes.max(1);
        let cap = p.cache.private_bytes;
        for (ti, (g, idx)) in prog.threads().into_iter().enumerate() {
            let gc = &code[g];
            self.tacct.push(ThreadAcct::default());
            self.threads.push(Thread {
                vm: k,
                group: u32::try_from(g).unwrap_or(u32::MAX),
                code: bases[g],
                index: idx,
                vcpu: first_vcpu + (u32::try_from(ti).unwrap_or(u32::MAX) % spec.vcpus),
                pc: 0,
                loops: Vec::with_capacity(gc.depth),
                state: TState::Running,
                wait: Wait::None,
                retry: false,
                seg_left: 0,
                carry: 0,
                seg_k_live: false,
                spin_deadline: u64::MAX,
                spin_budget: u64::MAX,
                spin_locks_held: 0,
                acks_pending: 0,
                end_ns: 0,
                cpu_ns: 0,
                private_lines: gc.private_bytes.min(cap) / line,
                shared_lines: gc.shared_bytes.min(cap.saturating_sub(gc.private_bytes)) / line,
            });
        }
        let len = phi - plo;
        for i in 0..spec.vcpus {
            let (lo, hi) = if !virtualized {
                // Bare metal: CPU i is core i.
                (i, i + 1)
            } else {
                match spec.affinity {
                    Affinity::Float => (plo, phi),
                    Affinity::Pin => {
                        // Spread evenly; different VMs start at different offsets
                        // so pinned VMs do not all pile onto pCPU 0.
                        // k < n_vms, so the offset is below spec.vcpus and fits.
                        let off = u32::try_from(
                            u64::from(k) * u64::from(spec.vcpus) / u64::from(n_vms.max(1)),
                        )
                        .unwrap_or(0);
                        let p = plo + (i + off) % len;
                        (p, p + 1)
                    }
                    Affinity::Range { first, count } => (first, first + count),
                }
            };
            let mut rq = VecDeque::new();
            for t in (first_thread..first_thread + n_threads)
                .skip(i as usize)
                .step_by(spec.vcpus as usize)
            {
                rq.push_back(t);
            }
            self.vacct.push(VcpuAcct::default());
            self.vruntime.push(0);
            self.vcpus.push(Vcpu {
                vm: k,
                index: i,
                host: HostState::Halted,
                pcpu: NONE,
                last_pcpu: NONE,
                act: Act::Off,
                gen: 0,
                step_at: u64::MAX,
                act_end: 0,
                seg_start: 0,
                overhead_left: 0,
                handler_left: 0,
                cur: NONE,
                rq,
                irqs: VecDeque::new(),
                slice_end: 0,
                spin_since: 0,
                spin_iter_ns: 1.0,
                ple_at: u64::MAX,
                ple_shift: 0,
                sdb_at: u64::MAX,
                acct: Acct::Off,
                acct_since: 0,
                acct_pcpu: NONE,
                acct_thread: NONE,
                yielded: false,
                acct_closed: false,
                exits: [0; exit::N],
                lo,
                hi,
                next_device_in: 0,
                wake_pending: false,
                vr_pcpu: NONE,
                // Linux starts a new task's load average full
                // (init_entity_runnable_average).
                load_avg: 1.0,
                load_at: 0,
            });
        }
        let dev_period = spec
            .devices
            .filter(|d| d.exits_per_ms > 0.0 && virtualized)
            .map(|d| crate::units_from_f64(1e6 / d.exits_per_ms));
        self.vcpu_rq_bits.resize(self.vcpus.len().div_ceil(64), 0);
        for v in first_vcpu..first_vcpu + spec.vcpus {
            self.vcpus[v as usize].next_device_in = dev_period.unwrap_or(u64::MAX);
            self.vcpu_rq_bit(v);
        }
        let vm_io = io::VmIo::new(spec, first_thread, virtualized, self.pcpus.len());
        self.io_active.push(vm_io.has_devices());
        self.io.push(vm_io);
        self.vm_by_cause.push([0; cause::N]);
        self.vms.push(Vm {
            spec_idle: if virtualized { spec.idle } else { Idle::Hlt },
            ple: if virtualized {
                spec.ple
            } else {
                crate::scenario::Ple::Off
            },
            sdb: virtualized && spec.sdb.is_some(),
            devices: if virtualized { spec.devices } else { None },
            costs,
            first_thread,
            n_threads,
            first_vcpu,
            n_vcpus: spec.vcpus,
            spin_locks: prog
                .spin_locks
                .iter()
                .map(|d| SpinLockSt {
                    holder: NONE,
                    waiters: Vec::new(),
                    kind: d.kind,
                    pause: d.pause,
                })
                .collect(),
            mutexes: prog
                .mutexes
                .iter()
                .map(|d| MutexSt {
                    holder: NONE,
                    spinners: Vec::new(),
                    blocked: VecDeque::new(),
                    spin_limit: d.spin_limit,
                })
                .collect(),
            barriers: prog
                .barriers
                .iter()
                .map(|d| BarrierSt {
                    parties: d.parties,
                    arrived: 0,
                    waiters: Vec::new(),
                    wait: d.wait,
                    spin_limit: d.spin_limit,
                    pause: d.pause,
                })
                .collect(),
            queues: prog
                .queues
                .iter()
                .map(|d| QueueSt {
                    count: 0,
                    capacity: d.capacity,
                    pushers: VecDeque::new(),
                    poppers: VecDeque::new(),
                })
                .collect(),
            pools: prog.pools.iter().map(|q| q.units).collect(),
            ops: [0; crate::code::counter::N],
            spin_iters: 0.0,
            blocks: 0,
            wakeups: 0,
            cs_voluntary: 0,
            cs_involuntary: 0,
            done_threads: 0,
            end_ns: 0,
            running: 0,
            // Every thread starts in a vCPU run queue (above).
            queued_threads: n_threads,
            running_per_domain: vec![0; self.domains as usize],
            ipis: 0,
            migrations: 0,
            warmup_ns: 0,
            device_busy_until: 0,
            device_sync_acc: 0.0,
            device_bypass_acc: 0.0,
            device_wait_ns: 0,
        });
        Ok(())
    }

    /// splitmix64: small, fast, good enough for sampling false positives.
    pub fn rand_u64(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn rand_f64(&mut self) -> f64 {
        (self.rand_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    #[inline]
    pub fn push(&mut self, at: u64, kind: Kind) {
        self.q.push(at, kind);
    }

    /// Schedule the vCPU's next Step at `at` (making earlier ones stale).
    #[inline]
    pub fn schedule_step(&mut self, v: u32, at: u64) {
        let vc = &mut self.vcpus[v as usize];
        if vc.step_at == at {
            return;
        }
        vc.step_at = at;
        vc.gen = vc.gen.wrapping_add(1);
        let gen = vc.gen;
        self.q.push(at, Kind::Step { vcpu: v, gen });
    }

    #[inline]
    pub fn ins(&self, t: u32) -> Ins {
        let th = &self.threads[t as usize];
        self.code[(th.code + th.pc) as usize]
    }

    /// Run until every VM finishes or the horizon.
    pub fn run(&mut self, horizon: Option<u64>) -> Result<RunOutcome, SimError> {
        self.start();
        self.tune_start();
        let horizon = horizon.unwrap_or(u64::MAX);
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
                if let Some(next) = self.q.peek_current() {
                    self.prefetch_for(next);
                }
            }
            self.handle(ev.kind);
        }
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
                    th.vm, th.state, th.wait, th.pc, th.seg_left, th.carry, th.vcpu, vc.host, vc.act, vc.cur, vc.rq, vc.overhead_left, vc.pcpu
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
                self.q.len()
            );
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

    fn handle(&mut self, kind: Kind) {
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
                let mut exits = [0u64; exit::N];
                let by_cause = self.vm_by_cause[k];
                let vcpus = vm.first_vcpu as usize..(vm.first_vcpu + vm.n_vcpus) as usize;
                for v in &self.vcpus[vcpus] {
                    for (a, b) in exits.iter_mut().zip(v.exits) {
                        *a += b;
                    }
                }
                if vm.costs.virtualized {
                    exits[exit::IRQ] = self.host_tick_exits(&by_cause);
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
            events: self.q.popped - self.stale,
            end_ns: end,
        }
    }
}
