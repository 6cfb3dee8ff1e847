/* smplab guest kernel: declarations shared by the CPL0 kernel (kernel.c and the
 * parts it includes; kernel.h) and the CPL3 runtime/executor (user.h). Both
 * live in one ELF; every RAM page is mapped user-accessible, so user code reads
 * kernel counters directly (the guest runs a single trusted program; there is
 * nothing to protect). */
#ifndef SMPLAB_GUEST_H
#define SMPLAB_GUEST_H

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long u64;
typedef long i64;
typedef int i32;
typedef unsigned long usize;

#define MAX_CPUS 64
#define MAX_THREADS 512
#define KSTACK_SIZE 8192
#define NOPS 14
#define IO_TARGETS 64 /* most vCPUs an io_irq= list names */

/* Spin ground truth for the host's spin detector (docs/guest-abi.md): at
 * guest-physical SPIN_PAGE, one u64 per vCPU with the id + 1 of the user
 * thread it runs (0: idle), then one u64 per thread with the TSC at which
 * that thread began its current spin wait (0: not spinning). Low RAM, below
 * the VMM's 0x9fc00 limit; identity-mapped and user-accessible. */
#define SPIN_PAGE 0x9000UL
#define SPIN_PAGE_THREADS 320
#define spin_page_cpu ((volatile u64 *)SPIN_PAGE)
#define spin_page_thread ((volatile u64 *)(SPIN_PAGE + 8 * MAX_CPUS))

/* Run-time interrupt routing (docs/guest-abi.md, "The routing page"): the
 * host writes a vCPU mask at IRQ_ROUTE (0: the boot-time io_irq= list); the
 * block-device handler reads it at every interrupt and moves the IOAPIC
 * entry to the next vCPU of the mask. The guest writes the destination it
 * programmed last (vCPU + 1) and its count of handler entries beside it.
 * 0x9c40-0x9dff belong to the host's indicator counters, not to this. */
#define IRQ_ROUTE 0x9c00UL
#define irq_route_mask (*(volatile u64 *)IRQ_ROUTE)
#define irq_route_dest (*(volatile u64 *)(IRQ_ROUTE + 8))
#define irq_route_count (*(volatile u64 *)(IRQ_ROUTE + 16))

/* Host indicators (docs/guest-abi.md, "Host indicators"): per-vCPU running
 * counters the host's tuner reads while the guest runs, at guest-physical
 * SENSOR_BASE, one array of SENSOR_CPUS u64 per counter, each word written
 * with plain stores by the vCPU that owns it; SENSOR_MAGIC at SENSOR_MAGIC_ADDR
 * says the guest publishes them. vCPUs >= SENSOR_CPUS count into a private
 * array the host never sees. The kernel reaches its own words through
 * `struct cpu.sensor` (one load, one add: CPL0 runs emulated on PVM). */
#define SENSOR_BASE 0x9c40UL
#define SENSOR_CPUS 16
#define SENSOR_RESCHED 0                  /* wakeup (rescheduling) IPIs sent */
#define SENSOR_IO_DONE (1 * SENSOR_CPUS)  /* device completions its io handler took */
#define SENSOR_IO_LAT (2 * SENSOR_CPUS)   /* their completion -> handler entry, TSC cycles summed */
#define SENSOR_WORDS (3 * SENSOR_CPUS)
#define SENSOR_MAGIC_ADDR 0x9dc0UL
#define SENSOR_MAGIC 0x31534e534c504d53UL /* "SMPLSNS1" little-endian */

/* Segment selectors of the per-CPU GDT. */
#define SEL_KCODE 0x08
#define SEL_KDATA 0x10
#define SEL_UDATA 0x1b
#define SEL_UCODE 0x23
#define SEL_TSS 0x28

/* Interrupt vectors. */
#define VEC_TIMER 0x20
#define VEC_SYSCALL 0x81
#define VEC_IO 0x40 /* the block device's IOAPIC pin (docs/guest-abi.md) */
#define VEC_WAKE 0xf0
#define VEC_SHOOTDOWN 0xf1
#define VEC_SPURIOUS 0xff

/* System calls: `int3` (see syscall.c trap()), rax = number, args in rdi, rsi, rdx; result in rax. */
enum {
    SYS_EXIT_THREAD = 0, /* () */
    SYS_FUTEX_WAIT = 1,  /* (addr, expected u32) -> 0 woken, 1 value changed */
    SYS_FUTEX_WAKE = 2,  /* (addr, max) -> threads woken */
    SYS_YIELD = 3,       /* () -> 1 if another thread ran */
    SYS_SHOOTDOWN = 4,   /* (pages) -> IPIs sent */
    SYS_IDLE_WAKE = 5,   /* idle thread: run queued work if any */
    SYS_IDLE_HALT = 6,   /* idle thread (haltpoll): halt until an interrupt */
    SYS_SLEEP = 7,       /* (deadline tsc) */
    SYS_SPAWN = 8,       /* (entry, arg, stack_top, r10 = cpu hint) see init.c */
    SYS_WRITE = 9,       /* (buf, len): console */
    SYS_RESULT = 10,     /* (buf, len): result record to port 0x520 or framed on serial */
    SYS_POWEROFF = 11,   /* (status): write status to port 0x501 */
    SYS_PMTIMER = 12,    /* () -> rax = ACPI PM timer, rdx = tsc */
    SYS_SMP_START = 13,  /* (struct boot_params *) -> CPUs online */
    SYS_GATE = 14,       /* () -> the VMM's answer: tell it "ready", wait for "go" (port 0x540) */
    SYS_IO = 15,         /* (device, service_ns) -> rax = completion tsc, rdx = handler-entry tsc */
};

/* Workload-window port (docs/guest-abi.md): written READY when every worker
 * exists and waits at the start gate, read while it answers WAIT (anything
 * else, GO or the all-ones of a port no device claims, as under QEMU, means
 * go), written DONE when the last worker has ended. */
#define WINDOW_READY 1
#define WINDOW_DONE 2
#define WINDOW_WAIT 0x54494157u /* "WAIT" */
#define WINDOW_GO 0x21204f47u   /* "GO !" */

/* Idle policies. */
enum { IDLE_HLT = 0, IDLE_POLL = 1, IDLE_HALTPOLL = 2 };

/* CPU states as wakers see them. */
enum { CPU_RUNNING = 0, CPU_POLLING = 1, CPU_HALTED = 2, CPU_IDLE = 3 };

/* Register frame built by the interrupt stubs (entry.S), lowest address first. */
struct frame {
    u64 r15, r14, r13, r12, r11, r10, r9, r8;
    u64 rbp, rdi, rsi, rdx, rcx, rbx, rax;
    u64 vector, err;
    u64 rip, cs, rflags, rsp, ss;
};
#define FRAME_QWORDS 22

enum { T_FREE = 0, T_RUNNABLE, T_RUNNING, T_BLOCKED, T_SLEEPING, T_DEAD };

struct thread {
    u64 ksp;          /* saved kernel stack pointer while switched out */
    u64 kstack_top;   /* TSS.rsp0 while it runs */
    struct thread *next;
    u64 futex_addr;
    u64 wake_tsc;
    u64 run_start;
    u64 cpu_tsc;      /* TSC cycles spent running on a vCPU */
    u64 csw_vol, csw_invol;
    i32 state;
    i32 cpu;          /* last CPU */
    i32 id;
    i32 is_idle;      /* 0 workload/init, 1 CPL3 polling idle, 2 in-kernel idle */
    volatile u32 on_cpu; /* its kernel stack is in use on some CPU */
    volatile u32 io_wait; /* 1 from an io submission until its completion is taken */
    u64 io_done_tsc;      /* guest TSC when its request completed on the device */
    u64 io_irq_tsc;       /* guest TSC when the completion's handler was entered */
};

_Static_assert(sizeof(struct thread) % 8 == 0, "threads are cleared with rep stosq");

/* Per-CPU data; %gs base points here while in the kernel. 64-byte aligned so
 * CPUs do not share cache lines for their hot fields. */
struct cpu {
    struct cpu *self;
    u32 id;
    volatile u32 state;
    struct thread *cur;
    struct thread *idle;  /* CPL3 polling idle thread (poll, haltpoll) */
    struct thread *kidle; /* in-kernel idle context (boot stack) */
    /* run queue */
    volatile u32 rq_lock;
    volatile u32 rq_len;
    struct thread *rq_head, *rq_tail;
    u64 kstack_top;
    u64 timer_deadline; /* tsc of the armed one-shot, 0 = none */
    /* counters (read by result.c at the end) */
    u64 ipis_sent, ipis_received, halts, wakeups, context_switches, idle_tsc, ticks;
    u64 syscalls;
    u64 io_irqs;      /* block-device interrupts that found a completion */
    u64 io_entry_tsc; /* TSC at the io handler's first instructions (entry.S) */
    u64 io_spurious;  /* block-device interrupts that found none */
    volatile u64 *sensor; /* this vCPU's host-indicator words (SENSOR_*) */
    /* Idle time inside the workload window (release to the last worker's
     * end): halted (`hlt` to the instruction after it) under `hlt`, in the
     * CPL3 idle thread under poll/haltpoll. docs/guest-abi.md. */
    u64 window_idle_tsc;
    u64 halt_start_tsc; /* TSC before the `hlt` now in progress, 0 = none */
    u8 pad[64];
} __attribute__((aligned(64)));

/* Parameters the CPL3 init hands to SYS_SMP_START. */
struct boot_params {
    u32 cpus;
    u32 idle;
    u64 haltpoll_tsc;  /* poll window in TSC cycles (haltpoll) */
    u32 timer_hz;      /* 0 = tickless */
    u32 result_serial; /* 1: result goes to the UART framed */
    u32 console;       /* 0: console off */
    u32 pad;
    u64 tsc_hz;
    u64 watchdog_tsc;  /* 0 = none */
    u32 io_ntargets;   /* 0: no block device interrupts (no io ops) */
    u32 pad2;
    u8 io_targets[IO_TARGETS]; /* vCPUs taking the block interrupt, in turn */
};

/* Kernel globals user code reads. */
extern struct cpu cpus[MAX_CPUS];
extern struct thread threads[MAX_THREADS];
extern volatile u32 g_ncpus;
extern volatile u32 g_queued;         /* threads sitting in any run queue */
extern volatile u64 g_next_wake;      /* earliest sleeper deadline (tsc), ~0 = none */
extern volatile u64 g_sd_acks;        /* shootdown acknowledgements */
extern struct boot_params g_params;
extern u64 g_boot_tsc;
extern u64 g_lapic_hz;
extern volatile u64 g_last_spawn_tsc; /* TSC just before the last thread became runnable */
extern volatile u64 g_done_tsc;       /* TSC when the last worker ended (kernel side) */
extern volatile u64 g_release_tsc;    /* TSC when the start gate released the workers, 0 = not yet */

/* The part of the interval [start, end) (TSC) inside the workload window, from
 * the gate's release to the last worker's end: what the idle counters the
 * host compares with the simulator cover (docs/guest-abi.md). A period that
 * ends before the release contributes nothing: had the release come first,
 * g_release_tsc would be set by now. Inline: it runs after every `hlt`, in
 * emulated CPL0 on PVM hosts, where each instruction costs ~0.7 us. */
static inline u64 window_part(u64 start, u64 end)
{
    u64 open = g_release_tsc, close = g_done_tsc;
    if (!open)
        return 0;
    if (start < open)
        start = open;
    if (close && end > close)
        end = close;
    return end > start ? end - start : 0;
}
extern volatile u64 g_done_ticks;     /* timer ticks of all vCPUs at that moment */
extern u32 boot_start_info;

void user_init(u64 start_info); /* CPL3 entry of the init thread */
void user_idle(struct cpu *c);  /* CPL3 idle thread for poll / haltpoll */

void *memcpy(void *d, const void *s, usize n);
void *memset(void *d, int c, usize n);

static inline u64 rdtsc(void)
{
    u32 lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((u64)hi << 32) | lo;
}

static inline void cpu_relax(void) { __asm__ volatile("pause" ::: "memory"); }

#endif
