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
//! - [`cache`]: the first-order cache model,
//! - [`setup`]: building the state from a scenario,
//! - [`event_loop`]: the event loop and the run's outcome.
//!
//! Time is in integer nanoseconds. Everything is deterministic for a seed: the
//! only randomness (SDB false positives) comes from a seeded generator, and the
//! event queue breaks ties by insertion order.

mod account;
mod balance;
mod bits;
mod cache;
mod event_loop;
mod flow;
mod guest;
mod guest_rq;
mod host;
mod host_rq;
mod idle;
mod io;
mod partition;
mod policy_host;
mod prefetch;
mod setup;
mod spin_detector;
mod sync;
pub(crate) mod tune;
mod vmm;
mod wake;

use crate::code::{GroupCode, Ins};
use crate::events::{Kind, Queue};
use crate::platform::Platform;
use crate::scenario::{Idle, Policy};
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
    /// Host interrupts taking a vCPU out of guest mode, KVM's `irq_exits`:
    /// the host's timer tick (`Sim::host_tick_exits`) and the kick IPI that
    /// delivers a virtual interrupt (`Sim::count_kick_exit`).
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
/// generation, accounting, current thread, run queue ends, interrupt
/// front); spin, PLE and SDB state, load tracking and placement follow.
/// Without `repr(C)` the compiler orders fields by alignment, which
/// scattered the hot 32-bit fields. What only the record or a rare path
/// reads lives elsewhere: exit counters per VM (`Sim::vm_exits`), the
/// interrupt queue (`Sim::irq_queues`), the run queue's links
/// (`Sim::rq_links`). Aligned to a cache line, the whole vCPU is three
/// lines (five before those moved out).
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
    /// Guest run queue of ready threads (linked through `Sim::rq_links`).
    pub rq: guest_rq::GuestRq,
    /// The first of `Sim::irq_queues[v]` (NONE: the queue is empty): read
    /// on every resume, where the queue itself is rarely non-empty and
    /// stays out of the hot lines.
    pub irq_front: u32,
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
}

const _: () = assert!(std::mem::size_of::<Vcpu>() <= 192);

pub(crate) struct Pcpu {
    pub cur: u32,
    /// Queued vCPUs in arrival order, the first few inline (`host_rq.rs`).
    pub rq: host_rq::HostRq,
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

/// Hot fields first (`repr(C)`), in the first cache line: the event loop
/// reads or writes them on most events of the thread's vCPU (segment,
/// carried costs, CPU time, state, spin deadline, its code position). The
/// cache-model footprint and write slots (read per switch) and the cold
/// rest (loop counters, identity, end time, spin budget) follow. Aligned to
/// a cache line: an unaligned 144-byte thread straddled two or three lines,
/// so its hot fields cost two misses instead of one on large hosts.
#[repr(C, align(64))]
pub(crate) struct Thread {
    /// Work left of the current (fused) segment.
    pub seg_left: u64,
    /// Small costs (atomics, syscalls) added to the next segment; the sum
    /// of `ThreadAcct::kcarry`.
    pub carry: u64,
    pub cpu_ns: u64,
    /// Absolute end of the current spin phase (u64::MAX: unlimited).
    pub spin_deadline: u64,
    pub vm: u32,
    pub vcpu: u32,
    /// Index in `Sim::code` of the thread's group's first instruction.
    pub code: u32,
    /// Current instruction, relative to `code`.
    pub pc: u32,
    pub wait: Wait,
    pub state: TState,
    /// `ThreadAcct::seg_k` may hold uncharged costs (false: all zero, so
    /// charging a segment need not read it).
    pub seg_k_live: bool,
    /// A blocking op being retried after a wakeup (not counted again).
    pub retry: bool,
    pub spin_locks_held: u32,

    /// Private-cache lines of private and of shared data this thread needs warm.
    pub private_lines: u64,
    pub shared_lines: u64,
    /// Write slots of the shared buffers this thread's group writes
    /// (`code::GroupCode::write_mask`).
    pub write_mask: u64,
    /// Spinning time left before giving up (spin-then-block, adaptive mutex);
    /// counts only time actually spinning on a pCPU.
    pub spin_budget: u64,
    pub acks_pending: u32,
    pub group: u32,
    pub index: u32,
    pub end_ns: u64,
    pub loops: Vec<(u32, u64)>,
}

const _: () = assert!(std::mem::offset_of!(Thread, spin_locks_held) + 4 <= 64);

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
    /// Per write slot (`code.rs`): running vCPUs whose current thread
    /// writes that shared buffer (`cache.rs`, `Sim::note_writer`).
    pub writers_running: Vec<u32>,
    /// Write slots that can have two writers running at once (at least two
    /// writer threads and two vCPUs): only their walks can pay transfers,
    /// and only their segments are cut short (`guest.rs`).
    pub contended_slots: u64,
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
    /// Exits by reason (`exit`), summed over each VM's vCPUs: the record
    /// and the tuner only read the sums, and one array per VM stays in
    /// cache where a counter array per vCPU took a cache line of its own.
    pub vm_exits: Vec<[u64; exit::N]>,
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
    /// Per thread: its neighbours in its vCPU's guest run queue
    /// (`guest_rq.rs`).
    pub rq_links: Vec<guest_rq::RqLink>,
    /// Per vCPU: initiator threads of shootdowns (and device interrupts,
    /// `io::IO_IRQ`) whose handler must run there, in arrival order; the
    /// front is mirrored in `Vcpu::irq_front`.
    pub irq_queues: Vec<VecDeque<u32>>,
    pub vms: Vec<Vm>,
    /// One bit per pCPU: idle.
    pub idle_bits: bits::HostBits,
    /// One bit per pCPU: run queue not empty.
    pub busy_rq_bits: bits::HostBits,
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
    /// Random streams: one per LLC domain when every VM is confined to one
    /// domain (`Sim::vm_domains`), else one for the whole host. Stream 0 is
    /// also the user-level policies' (`Sim::rand_f64`). Per domain so that
    /// what one domain draws does not depend on how its draws interleave
    /// with another's: the partitioned engine (`partition.rs`) runs the
    /// domains one after another and must draw the same numbers.
    pub rngs: Vec<u64>,
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
    /// Load balancing's working arrays, reused from tick to tick.
    pub balance_scratch: balance::BalanceScratch,
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
    /// Kulkarni & Kulkarni's adaptive tuner, when enabled (`tune.rs`).
    pub tuner: Option<tune::SimTuner>,
    /// The partitioned engine's queues (`partition.rs`; None: sequential).
    pub parts: Option<Box<partition::Partitions>>,
    /// Pushes go to the queue of their partition (`Sim::push_routed`):
    /// set while no single partition runs.
    pub routing: bool,
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
    /// splitmix64 on stream `d`: small, fast, good enough for sampling
    /// jitter and false positives.
    fn rand_u64_in(&mut self, d: usize) -> u64 {
        let r = &mut self.rngs[d];
        *r = r.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *r;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw in [0, 1) from stream 0 (the user-level policies').
    pub fn rand_f64(&mut self) -> f64 {
        (self.rand_u64_in(0) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform draw in [0, 1) from the stream of pCPU `p`'s LLC domain
    /// (the host's one stream when there is one).
    pub fn rand_f64_on(&mut self, p: u32) -> f64 {
        let d = if self.rngs.len() > 1 {
            self.pcpus[p as usize].domain as usize
        } else {
            0
        };
        (self.rand_u64_in(d) >> 11) as f64 / (1u64 << 53) as f64
    }

    #[inline(always)]
    pub fn push(&mut self, at: u64, kind: Kind) {
        if self.routing {
            self.push_routed(at, kind);
        } else {
            self.q.push(at, kind);
        }
    }

    /// Schedule the vCPU's next Step at `at` (making earlier ones stale).
    #[inline(always)]
    pub fn schedule_step(&mut self, v: u32, at: u64) {
        let vc = &mut self.vcpus[v as usize];
        if vc.step_at == at {
            return;
        }
        vc.step_at = at;
        vc.gen = vc.gen.wrapping_add(1);
        let gen = vc.gen;
        self.push(at, Kind::Step { vcpu: v, gen });
    }

    /// Count `n` exits of reason `k` (`exit`) of vCPU `v`.
    #[inline]
    pub fn count_exits(&mut self, v: u32, k: usize, n: u64) {
        let vm = self.vcpus[v as usize].vm;
        self.vm_exits[vm as usize][k] += n;
    }

    #[inline]
    pub fn ins(&self, t: u32) -> Ins {
        let th = &self.threads[t as usize];
        self.code[(th.code + th.pc) as usize]
    }
}
