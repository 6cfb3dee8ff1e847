//! The system calls each thread kind of smplab-vmm may make once its filter
//! is installed (`crate::seccomp`), one list per kind, each call with why.
//!
//! A filter is installed at the end of a thread's own set-up (name, pinning,
//! timer slack, its first allocation, the vCPU's `/proc` files), so these
//! lists hold only what the thread does while the guest runs and when it
//! ends. Found by tracing every run path (`strace -f` of `smplab vmm`,
//! `smplab run --executor vm` in every sync mode with both irqchips,
//! `smplab host` with the tuner) and by reading the code. Firecracker's
//! per-thread filters (vCPU, VMM, API) and Cloud Hypervisor's per-thread
//! rules were the model: the same base of runtime calls, and `ioctl`
//! narrowed to the KVM requests the thread issues.
//!
//! To extend for a new thread or device: add the call to the one list of the
//! kind that makes it, with the reason; `seccomp::tests` builds every list.

/// The kinds of thread smplab-vmm filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadKind {
    /// `smplab-vcpu-N`: KVM_RUN and the devices of its exits.
    Vcpu,
    /// `smplab-io`: queued device accesses (`iothread`, `hybrid`).
    Io,
    /// `smplab-blk`: the block device's completions.
    Block,
    /// `smplab-timer`: the user irqchip's LAPIC timers.
    Timer,
    /// `smplab-sched`: the host scheduler's ticker (`smplab host`).
    Ticker,
}

impl ThreadKind {
    pub const ALL: [ThreadKind; 5] = [
        ThreadKind::Vcpu,
        ThreadKind::Io,
        ThreadKind::Block,
        ThreadKind::Timer,
        ThreadKind::Ticker,
    ];

    /// The kind's name in messages and on the command line of tests.
    pub fn name(self) -> &'static str {
        match self {
            ThreadKind::Vcpu => "vcpu",
            ThreadKind::Io => "io",
            ThreadKind::Block => "block",
            ThreadKind::Timer => "timer",
            ThreadKind::Ticker => "ticker",
        }
    }

    /// The kind named `name` ([`ThreadKind::name`]).
    pub fn parse(name: &str) -> Option<ThreadKind> {
        ThreadKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The thread's name (`smplab-vcpu-` takes the vCPU index after it).
    pub(crate) fn thread_name(self) -> &'static str {
        match self {
            ThreadKind::Vcpu => "smplab-vcpu-",
            ThreadKind::Io => "smplab-io",
            ThreadKind::Block => "smplab-blk",
            ThreadKind::Timer => "smplab-timer",
            ThreadKind::Ticker => "smplab-sched",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// [`ThreadKind::index`] + 1, so 0 can mean "none".
    pub(crate) fn code(self) -> u8 {
        match self {
            ThreadKind::Vcpu => 1,
            ThreadKind::Io => 2,
            ThreadKind::Block => 3,
            ThreadKind::Timer => 4,
            ThreadKind::Ticker => 5,
        }
    }
}

/// What may be passed to an allowed call.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Args {
    /// Any arguments.
    Any,
    /// `ioctl` with one of these requests (argument 1).
    Ioctl(&'static [Request]),
    /// Argument 0 equals this value.
    Arg0(u64),
}

/// An `ioctl` request number and its name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub number: u64,
    pub name: &'static str,
}

/// One allowed system call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Allowed {
    pub nr: i64,
    pub name: &'static str,
    pub args: Args,
    /// Why this thread kind makes it.
    pub why: &'static str,
}

const fn any(nr: i64, name: &'static str, why: &'static str) -> Allowed {
    Allowed {
        nr,
        name,
        args: Args::Any,
        why,
    }
}

const fn ioctl(requests: &'static [Request], why: &'static str) -> Allowed {
    Allowed {
        nr: libc::SYS_ioctl,
        name: "ioctl",
        args: Args::Ioctl(requests),
        why,
    }
}

// KVM's ioctl numbers (linux/kvm.h): _IOC(dir, 0xAE, nr, size).
const KVMIO: u64 = 0xae;
const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (KVMIO << 8) | nr
}
const fn io(nr: u64) -> u64 {
    ioc(0, nr, 0)
}
const fn iow<T>(nr: u64) -> u64 {
    ioc(1, nr, std::mem::size_of::<T>())
}
const fn ior<T>(nr: u64) -> u64 {
    ioc(2, nr, std::mem::size_of::<T>())
}
const fn iowr<T>(nr: u64) -> u64 {
    ioc(3, nr, std::mem::size_of::<T>())
}

use kvm_bindings::{kvm_interrupt, kvm_irq_level, kvm_regs, kvm_sregs, kvm_translation};

pub(crate) const KVM_RUN: Request = Request {
    number: io(0x80),
    name: "KVM_RUN",
};
pub(crate) const KVM_GET_REGS: Request = Request {
    number: ior::<kvm_regs>(0x81),
    name: "KVM_GET_REGS",
};
pub(crate) const KVM_SET_REGS: Request = Request {
    number: iow::<kvm_regs>(0x82),
    name: "KVM_SET_REGS",
};
pub(crate) const KVM_GET_SREGS: Request = Request {
    number: ior::<kvm_sregs>(0x83),
    name: "KVM_GET_SREGS",
};
pub(crate) const KVM_SET_SREGS: Request = Request {
    number: iow::<kvm_sregs>(0x84),
    name: "KVM_SET_SREGS",
};
pub(crate) const KVM_TRANSLATE: Request = Request {
    number: iowr::<kvm_translation>(0x85),
    name: "KVM_TRANSLATE",
};
pub(crate) const KVM_INTERRUPT: Request = Request {
    number: iow::<kvm_interrupt>(0x86),
    name: "KVM_INTERRUPT",
};
pub(crate) const KVM_NMI: Request = Request {
    number: io(0x9a),
    name: "KVM_NMI",
};
pub(crate) const KVM_IRQ_LINE: Request = Request {
    number: iow::<kvm_irq_level>(0x61),
    name: "KVM_IRQ_LINE",
};
pub(crate) const KVM_RESET_DIRTY_RINGS: Request = Request {
    number: io(0xc7),
    name: "KVM_RESET_DIRTY_RINGS",
};

/// What every Rust thread of this process does while it runs and ends:
/// locks, allocation, sleeping, thread exit, and the violation report itself.
const RUNTIME: &[Allowed] = &[
    any(
        libc::SYS_futex,
        "futex",
        "std's Mutex, Condvar, channels and thread join",
    ),
    any(
        libc::SYS_mmap,
        "mmap",
        "malloc: large blocks and new heap arenas",
    ),
    any(
        libc::SYS_munmap,
        "munmap",
        "free of large blocks; the thread's stack and signal stack at exit",
    ),
    any(
        libc::SYS_mremap,
        "mremap",
        "realloc of large blocks (histograms, byte buffers)",
    ),
    any(libc::SYS_mprotect, "mprotect", "malloc grows a heap arena"),
    any(
        libc::SYS_madvise,
        "madvise",
        "malloc trims an arena; glibc releases the stack at thread exit",
    ),
    any(
        libc::SYS_brk,
        "brk",
        "malloc on the main arena, which a thread may share when arenas run out",
    ),
    any(
        libc::SYS_clock_gettime,
        "clock_gettime",
        "Instant::now when the vDSO falls back to the system call",
    ),
    any(
        libc::SYS_clock_nanosleep,
        "clock_nanosleep",
        "thread::sleep (back-offs, the ticker's interval)",
    ),
    any(
        libc::SYS_sched_yield,
        "sched_yield",
        "the bus's poll-before-block loops (bus::POLL_BEFORE_BLOCK)",
    ),
    any(
        libc::SYS_rt_sigprocmask,
        "rt_sigprocmask",
        "glibc blocks signals around thread exit",
    ),
    any(
        libc::SYS_sigaltstack,
        "sigaltstack",
        "std removes the thread's stack-overflow signal stack at exit",
    ),
    any(
        libc::SYS_rt_sigreturn,
        "rt_sigreturn",
        "return from a signal handler (the vCPU kick, SIGRTMIN)",
    ),
    any(
        libc::SYS_write,
        "write",
        "a panic message or this filter's own violation report to stderr",
    ),
    any(libc::SYS_exit, "exit", "the thread ends"),
    any(
        libc::SYS_exit_group,
        "exit_group",
        "the violation report ends the process with status 20",
    ),
];

/// Kicking a vCPU thread out of KVM_RUN (`Kicker::kick`: pthread_kill).
const KICK: &[Allowed] = &[
    any(
        libc::SYS_getpid,
        "getpid",
        "pthread_kill names the process of the vCPU thread it kicks",
    ),
    any(
        libc::SYS_tgkill,
        "tgkill",
        "pthread_kill: the vCPU kick signal (SIGRTMIN)",
    ),
    any(
        libc::SYS_gettid,
        "gettid",
        "pthread_kill of the calling thread itself (glibc asks the kernel for its tid): a vCPU kicking its own thread, as for a Linux guest's self-IPI on the user irqchip",
    ),
];

/// What a guest device access may do on the thread that carries it (a vCPU
/// thread, or the I/O thread in `iothread`/`hybrid`): the UART's console
/// output, KVM's binary stats at the window edges, the block device's line.
const DEVICE_ACCESS: &[Allowed] = &[
    any(
        libc::SYS_write,
        "write",
        "the UART's console to stdout, stderr or a file",
    ),
    any(
        libc::SYS_pread64,
        "pread64",
        "the window device reads KVM's binary stats fds at ready/go/done",
    ),
    ioctl(
        &[KVM_IRQ_LINE],
        "the block device lowers IOAPIC pin 16 after the guest drained it (in-kernel irqchip)",
    ),
];

/// vCPU threads (`smplab-vcpu-N`): KVM_RUN and what an exit needs.
const VCPU: &[Allowed] = &[
    ioctl(
        &[
            KVM_RUN,
            KVM_GET_REGS,
            KVM_SET_REGS,
            KVM_GET_SREGS,
            KVM_SET_SREGS,
            KVM_TRANSLATE,
            KVM_INTERRUPT,
            KVM_NMI,
            KVM_RESET_DIRTY_RINGS,
        ],
        "KVM_RUN; registers for a crash report, the spin sampler (with KVM_TRANSLATE of RIP) \
         and INIT/SIPI (user irqchip); KVM_INTERRUPT/KVM_NMI injection (user irqchip); \
         the host scheduler's dirty rings (its TSC offset is read before the filter)",
    ),
    any(
        libc::SYS_sched_setaffinity,
        "sched_setaffinity",
        "the host scheduler pins a vCPU thread to its granted pCPU",
    ),
    any(
        libc::SYS_pread64,
        "pread64",
        "the host scheduler's /proc schedstat, opened before the filter",
    ),
];

/// The I/O thread (`smplab-io`, `iothread`/`hybrid`): queued device accesses.
const IO: &[Allowed] = &[];

/// The block device's completion thread (`smplab-blk`).
const BLOCK: &[Allowed] = &[
    ioctl(
        &[KVM_IRQ_LINE],
        "raise IOAPIC pin 16 while completions wait (in-kernel irqchip)",
    ),
    Allowed {
        nr: libc::SYS_prctl,
        name: "prctl",
        args: Args::Arg0(libc::PR_SET_TIMERSLACK as u64),
        why: "PR_SET_TIMERSLACK only: the thread sets 1 ns slack as it starts serving",
    },
];

/// The user irqchip's LAPIC timer thread (`smplab-timer`): expiries go
/// through the bus to the LAPIC model (or queue to the I/O thread).
const TIMER: &[Allowed] = &[];

/// The host scheduler's ticker (`smplab-sched`): samples, preempts, reads
/// each vCPU thread's `/proc/self/task/TID/stat` (opened by the vCPU thread).
const TICKER: &[Allowed] = &[any(
    libc::SYS_pread64,
    "pread64",
    "a vCPU thread's /proc stat (is it sleeping in KVM's halt?)",
)];

/// Every call `kind` may make (a call may appear more than once, with
/// different reasons: the filter joins them).
pub(crate) fn allowed(kind: ThreadKind) -> Vec<Allowed> {
    let own: &[&[Allowed]] = match kind {
        ThreadKind::Vcpu => &[KICK, DEVICE_ACCESS, VCPU],
        ThreadKind::Io => &[KICK, DEVICE_ACCESS, IO],
        ThreadKind::Block => &[KICK, BLOCK],
        ThreadKind::Timer => &[KICK, TIMER],
        ThreadKind::Ticker => &[KICK, TICKER],
    };
    RUNTIME
        .iter()
        .chain(own.iter().flat_map(|list| list.iter()))
        .copied()
        .collect()
}
