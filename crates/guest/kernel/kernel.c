/* smplab guest kernel, CPL0 part. On PVM hosts every instruction here runs in
 * KVM's instruction emulator (~0.7 us each), so this file does the minimum an OS
 * must do in kernel mode: descriptor tables, LAPIC, AP start-up, the scheduler,
 * futex wait/wake, sleep, IPIs, port I/O, block-device requests and their
 * interrupt. Everything else (command-line parsing,
 * program decoding, the executor, result formatting) runs at CPL3 in user.c.
 * Compiled with -mgeneral-regs-only: no SSE in CPL0 (the emulator lacks it). */
#include "guest.h"

struct cpu cpus[MAX_CPUS];
/* Not zeroed at boot (the emulator pays per byte): each slot is cleared when used. */
struct thread threads[MAX_THREADS] __attribute__((section(".noinit")));
volatile u32 g_ncpus = 1;
volatile u32 g_queued;
volatile u64 g_next_wake = ~0UL;
volatile u64 g_sd_acks;
struct boot_params g_params = {.cpus = 1, .console = 1};
u64 g_boot_tsc;
u64 g_lapic_hz;
u32 boot_start_info;
volatile u64 g_last_spawn_tsc;
volatile u64 g_done_tsc;
volatile u64 g_release_tsc;
volatile u64 g_done_ticks;

static volatile u32 g_nthreads;
volatile u32 g_sd_pages; /* read by isr241 (entry.S) */
static volatile u32 sleep_lock;
static struct thread *sleepers;
static u64 watchdog_deadline;
static u64 lapic_q32;  /* LAPIC timer ticks (divide 16) per TSC cycle, 32.32 fixed point */
static volatile u32 ap_index, ap_ready;
static struct thread idle_threads[MAX_CPUS];  /* CPL3 polling idle threads */
static struct thread kidle_threads[MAX_CPUS]; /* in-kernel idle contexts (boot stacks) */
#define NOINIT __attribute__((section(".noinit")))
static u8 idle_stacks[MAX_CPUS][4096] __attribute__((aligned(4096))) NOINIT;
static u8 init_stack[65536] __attribute__((aligned(4096))) NOINIT;
/* Every thread has its own kernel stack: a context switch is a stack switch,
 * not a copy of register frames (the emulator charges 2-4 us per `rep`
 * iteration and ~1 us per instruction). */
static u8 thread_kstacks[MAX_THREADS][KSTACK_SIZE] __attribute__((aligned(64))) NOINIT;
static u8 idle_kstacks[MAX_CPUS][KSTACK_SIZE] __attribute__((aligned(64))) NOINIT;

extern u8 kstacks[];
extern u8 tramp_start[], tramp_end[];
extern u64 ap_stack_top;
extern const u64 isr_table[];
extern struct thread *switch_stack(u64 *save_sp, u64 new_sp, struct thread *prev);
extern void thread_start(void);

#define LAPIC_BASE 0xfee00000UL
#define LAPIC_ID 0x20
#define LAPIC_TPR 0x80
#define LAPIC_EOI 0xb0
#define LAPIC_SVR 0xf0
#define LAPIC_ICR_LO 0x300
#define LAPIC_ICR_HI 0x310
#define LAPIC_LVT_TIMER 0x320
#define LAPIC_LVT_LINT0 0x350
#define LAPIC_LVT_LINT1 0x360
#define LAPIC_TIMER_INIT 0x380
#define LAPIC_TIMER_CUR 0x390
#define LAPIC_TIMER_DIV 0x3e0

#define PORT_UART 0x3f8
#define PORT_EXIT 0x501
#define PORT_RESULT 0x520
#define PORT_PMTMR 0x608
#define PORT_WINDOW 0x540

/* IOAPIC (register window) and the block device (docs/guest-abi.md). */
#define IOAPIC_BASE 0xfec00000UL
#define BLOCK_PIN 16
#define IOREDTBL_LO (0x10 + 2 * BLOCK_PIN)
#define IOREDTBL_HI (IOREDTBL_LO + 1)
#define BLOCK_BASE 0xfed00000UL
#define BLOCK_NONE (~0UL)
#define BLOCK_MORE (1UL << 16)
#define BLOCK_TSC_MASK ((1UL << 40) - 1)

struct idt_entry {
    u16 off0, sel;
    u8 ist, type;
    u16 off1;
    u32 off2, zero;
} __attribute__((packed));

struct tss {
    u32 r0;
    u64 rsp0, rsp1, rsp2, r1;
    u64 ist[7];
    u64 r2;
    u16 r3, iomap;
} __attribute__((packed));

static struct idt_entry idt[256] __attribute__((aligned(16)));
static struct tss tss[MAX_CPUS] __attribute__((aligned(16)));
static u64 gdt[MAX_CPUS][8] __attribute__((aligned(16)));

struct bucket {
    volatile u32 lock;
    struct thread *head;
} __attribute__((aligned(64)));
static struct bucket futex_table[64];

_Static_assert(__builtin_offsetof(struct cpu, ipis_received) == 88, "CPU_IPIS_RECEIVED in entry.S");
_Static_assert(__builtin_offsetof(struct cpu, io_entry_tsc) == 152, "CPU_IO_ENTRY_TSC in entry.S");

/* ---------- small helpers ---------- */

void *memcpy(void *d, const void *s, usize n)
{
    /* One `rep movsb`: a single emulated instruction at CPL0. */
    void *r = d;
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
    return r;
}

void *memset(void *d, int c, usize n)
{
    void *r = d;
    __asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
    return r;
}

static inline void outb(u16 port, u8 v) { __asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outl(u16 port, u32 v) { __asm__ volatile("outl %0, %1" : : "a"(v), "Nd"(port)); }
static inline u32 inl(u16 port)
{
    u32 v;
    __asm__ volatile("inl %1, %0" : "=a"(v) : "Nd"(port));
    return v;
}
static inline void outsb(u16 port, const void *buf, usize n)
{
    __asm__ volatile("rep outsb" : "+S"(buf), "+c"(n) : "d"(port) : "memory");
}

static inline void lapic_w(u32 reg, u32 v) { *(volatile u32 *)(LAPIC_BASE + reg) = v; }
static inline u32 lapic_r(u32 reg) { return *(volatile u32 *)(LAPIC_BASE + reg); }
static inline void lapic_eoi(void) { lapic_w(LAPIC_EOI, 0); }

static void ioapic_w(u32 reg, u32 v)
{
    *(volatile u32 *)IOAPIC_BASE = reg;
    *(volatile u32 *)(IOAPIC_BASE + 0x10) = v;
}

static u32 ioapic_r(u32 reg)
{
    *(volatile u32 *)IOAPIC_BASE = reg;
    return *(volatile u32 *)(IOAPIC_BASE + 0x10);
}

/* Block interrupts taken so far; the handler moves the interrupt to
 * io_targets[io_next % n] (one interrupt each, in io_targets order). */
static volatile u32 io_next;

/* The vCPU the block device's IOAPIC entry names now. */
static volatile u32 io_dest;

/* The vCPU after `cur` in `mask` (ascending, wrapping); mask != 0. One bsf:
 * the handler runs emulated, so no loop over the bits. */
static inline u32 next_in_mask(u64 mask, u32 cur)
{
    u64 above = cur >= 63 ? 0 : mask & (~0ULL << (cur + 1));
    u64 pick = above ? above : mask;
    u64 bit;
    __asm__("bsfq %1, %0" : "=r"(bit) : "rm"(pick) : "cc");
    return (u32)bit;
}

/* Where the block interrupt goes next: the host's routing mask when it set
 * one (restricted to the vCPUs online), else the boot-time list in turn. */
static u32 io_next_target(void)
{
    u64 mask = irq_route_mask;
    if (g_ncpus < 64)
        mask &= (1ULL << g_ncpus) - 1;
    if (mask)
        return next_in_mask(mask, io_dest);
    u32 n = g_params.io_ntargets;
    if (n > 1) {
        /* Two handlers may overlap (edge-triggered): each takes its own
         * turn, though their two IOAPIC writes may land in either order. */
        u32 k = __atomic_add_fetch(&io_next, 1, __ATOMIC_SEQ_CST) % n;
        return g_params.io_targets[k];
    }
    return g_params.io_targets[0];
}

static inline struct cpu *this_cpu(void)
{
    struct cpu *c;
    __asm__ volatile("movq %%gs:0, %0" : "=r"(c));
    return c;
}

static inline void wrmsr(u32 msr, u64 v)
{
    __asm__ volatile("wrmsr" : : "c"(msr), "a"((u32)v), "d"((u32)(v >> 32)));
}

static inline void spin_lock(volatile u32 *l)
{
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
        while (*l)
            cpu_relax();
}

static inline void spin_unlock(volatile u32 *l)
{
    /* xchg, not a plain store: a full barrier, so a waker's queue update is
     * visible before it reads the target CPU's idle state (see kick()). */
    __atomic_exchange_n(l, 0, __ATOMIC_SEQ_CST);
}

static void kputs_n(const char *s, usize n) { outsb(PORT_UART, s, n); }


static char *kfmt_hex(char *p, u64 v)
{
    *p++ = '0';
    *p++ = 'x';
    int started = 0;
    for (int i = 60; i >= 0; i -= 4) {
        u32 d = (v >> i) & 0xf;
        if (d || started || i == 0) {
            *p++ = "0123456789abcdef"[d];
            started = 1;
        }
    }
    return p;
}

static char *kfmt_str(char *p, const char *s)
{
    while (*s)
        *p++ = *s++;
    return p;
}

static char *kfmt_dec(char *p, u64 v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = '0' + v % 10;
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static void __attribute__((noreturn)) poweroff(u32 status)
{
    outb(PORT_EXIT, (u8)status);
    for (;;)
        __asm__ volatile("cli; hlt");
}

static const char *const exc_names[32] = {
    "#DE divide error", "#DB debug", "NMI", "#BP breakpoint", "#OF overflow", "#BR bound range",
    "#UD invalid opcode", "#NM device not available", "#DF double fault", "coprocessor overrun",
    "#TS invalid TSS", "#NP segment not present", "#SS stack fault", "#GP general protection",
    "#PF page fault", "reserved", "#MF x87 error", "#AC alignment check", "#MC machine check",
    "#XM SIMD error", "#VE virtualization", "#CP control protection", "reserved", "reserved",
    "reserved", "reserved", "reserved", "reserved", "#HV hypervisor injection", "#VC VMM communication",
    "#SX security", "reserved"};

/* A guest exception: report it on the console (always, even with console=off)
 * and end the run with status 2. */
static void __attribute__((noreturn, noinline, cold)) fault(struct frame *f)
{
    char buf[256], *p = buf;
    u64 cr2;
    __asm__ volatile("mov %%cr2, %0" : "=r"(cr2));
    p = kfmt_str(p, "\nsmplab-guest: EXCEPTION vector=");
    p = kfmt_dec(p, f->vector);
    p = kfmt_str(p, " (");
    p = kfmt_str(p, exc_names[f->vector & 31]);
    p = kfmt_str(p, ") error=");
    p = kfmt_hex(p, f->err);
    p = kfmt_str(p, " rip=");
    p = kfmt_hex(p, f->rip);
    p = kfmt_str(p, " cpu=");
    p = kfmt_dec(p, this_cpu()->id);
    p = kfmt_str(p, " cpl=");
    p = kfmt_dec(p, f->cs & 3);
    p = kfmt_str(p, " rsp=");
    p = kfmt_hex(p, f->rsp);
    p = kfmt_str(p, " cr2=");
    p = kfmt_hex(p, cr2);
    p = kfmt_str(p, "\n");
    kputs_n(buf, p - buf);
    poweroff(2);
}

static void __attribute__((noreturn)) watchdog_fire(void)
{
    char buf[160], *p = buf;
    p = kfmt_str(p, "\nsmplab-guest: WATCHDOG: the workload did not finish within ");
    p = kfmt_dec(p, g_params.watchdog_tsc / (g_params.tsc_hz / 1000 ? g_params.tsc_hz / 1000 : 1));
    p = kfmt_str(p, " ms; scheduler state:\n");
    kputs_n(buf, p - buf);
    /* Where everything is, so a hang can be diagnosed from the console. */
    for (u32 i = 0; i < g_ncpus; i++) {
        struct cpu *c = &cpus[i];
        p = buf;
        p = kfmt_str(p, "  cpu ");
        p = kfmt_dec(p, i);
        p = kfmt_str(p, " state=");
        p = kfmt_dec(p, c->state);
        p = kfmt_str(p, " cur=");
        p = kfmt_dec(p, c->cur ? (u64)c->cur->id : 9999);
        p = kfmt_str(p, " rq_len=");
        p = kfmt_dec(p, c->rq_len);
        p = kfmt_str(p, "\n");
        kputs_n(buf, p - buf);
    }
    for (u32 i = 0; i < g_nthreads && i < MAX_THREADS; i++) {
        struct thread *t = &threads[i];
        p = buf;
        p = kfmt_str(p, "  thread ");
        p = kfmt_dec(p, i);
        p = kfmt_str(p, " state=");
        p = kfmt_dec(p, (u64)t->state);
        p = kfmt_str(p, " cpu=");
        p = kfmt_dec(p, (u64)t->cpu);
        p = kfmt_str(p, " on_cpu=");
        p = kfmt_dec(p, t->on_cpu);
        p = kfmt_str(p, " futex=");
        p = kfmt_hex(p, t->state == T_BLOCKED ? t->futex_addr : 0);
        p = kfmt_str(p, "\n");
        kputs_n(buf, p - buf);
    }
    poweroff(3);
}

/* ---------- timers ---------- */

static u64 min_u64(u64 a, u64 b) { return a < b ? a : b; }

/* Arm this CPU's LAPIC one-shot for `deadline` (TSC). Only used when there is
 * no periodic tick; sleepers and the BSP's watchdog share it. */
static void arm_oneshot(struct cpu *c, u64 deadline)
{
    if (g_params.timer_hz || !lapic_q32)
        return;
    if (deadline == ~0UL) {
        if (c->timer_deadline) {
            lapic_w(LAPIC_TIMER_INIT, 0);
            c->timer_deadline = 0;
        }
        return;
    }
    if (c->timer_deadline == deadline)
        return;
    u64 now = rdtsc();
    u64 cycles = deadline > now ? deadline - now : 1;
    if (cycles > (1UL << 36))
        cycles = 1UL << 36; /* fires early and re-arms */
    u64 count = (cycles * lapic_q32) >> 32;
    if (count == 0)
        count = 1;
    if (count > 0xffffffffUL)
        count = 0xffffffffUL;
    lapic_w(LAPIC_LVT_TIMER, VEC_TIMER);
    lapic_w(LAPIC_TIMER_INIT, (u32)count);
    c->timer_deadline = deadline;
}

static u64 own_deadline(struct cpu *c)
{
    u64 d = g_next_wake;
    if (c->id == 0 && watchdog_deadline)
        d = min_u64(d, watchdog_deadline);
    return d;
}

/* ---------- run queues ---------- */

static void rq_push(struct cpu *c, struct thread *t)
{
    t->next = 0;
    t->state = T_RUNNABLE;
    spin_lock(&c->rq_lock);
    if (c->rq_tail)
        c->rq_tail->next = t;
    else
        c->rq_head = t;
    c->rq_tail = t;
    c->rq_len++;
    __atomic_fetch_add(&g_queued, 1, __ATOMIC_SEQ_CST);
    spin_unlock(&c->rq_lock);
}

static struct thread *rq_pop(struct cpu *c)
{
    if (!c->rq_len)
        return 0;
    spin_lock(&c->rq_lock);
    struct thread *t = c->rq_head;
    if (t) {
        c->rq_head = t->next;
        if (!c->rq_head)
            c->rq_tail = 0;
        c->rq_len--;
        __atomic_fetch_sub(&g_queued, 1, __ATOMIC_SEQ_CST);
    }
    spin_unlock(&c->rq_lock);
    return t;
}

/* Own queue first, then steal from the others (the load balancing). */
static struct thread *pick_any(struct cpu *c)
{
    struct thread *t = rq_pop(c);
    if (t || !g_queued)
        return t;
    u32 n = g_ncpus;
    for (u32 i = 1; i < n; i++) {
        u32 o = c->id + i;
        if (o >= n)
            o -= n;
        if ((t = rq_pop(&cpus[o])))
            return t;
    }
    return 0;
}

/* A thread to switch to, or none. A thread whose kernel stack is still in use
 * (it was woken while switching out on another CPU) goes back on this CPU's
 * queue instead of being waited for: two CPUs each waiting for the thread the
 * other is leaving would deadlock. The caller idles and retries. */
static struct thread *pick(struct cpu *c)
{
    struct thread *t = pick_any(c);
    if (t && t != c->cur && __atomic_load_n(&t->on_cpu, __ATOMIC_ACQUIRE)) {
        rq_push(c, t);
        return 0;
    }
    return t;
}

/* Every caller sends VEC_WAKE: a rescheduling IPI, counted for the host. */
static void send_ipi(struct cpu *self, u32 target, u32 vec)
{
    lapic_w(LAPIC_ICR_HI, target << 24);
    lapic_w(LAPIC_ICR_LO, vec | 0x4000);
    self->ipis_sent++;
    self->sensor[SENSOR_RESCHED]++;
}

/* Tell `target` it has work. A halted CPU needs an IPI; a polling CPU sees its
 * queue at CPL3 without one (the seed's polling idle loop); a busy CPU picks the
 * work up when its thread blocks, yields or is preempted. */
static void kick(struct cpu *self, struct cpu *target)
{
    if (target != self && target->state == CPU_HALTED)
        send_ipi(self, target->id, VEC_WAKE);
}

static void balance_kick(struct cpu *c);

/* Wake placement: the thread's last CPU if idle, else any idle CPU, else its
 * last CPU's queue (and a halted CPU, if one appeared meanwhile, is woken to
 * steal it). */
static void make_runnable(struct cpu *self, struct thread *t)
{
    struct cpu *target = &cpus[t->cpu];
    if (target->state == CPU_RUNNING || target->rq_len) {
        u32 n = g_ncpus;
        for (u32 i = 0; i < n; i++) {
            struct cpu *o = &cpus[i];
            if (o->state != CPU_RUNNING && !o->rq_len) {
                target = o;
                break;
            }
        }
    }
    self->wakeups++;
    rq_push(target, t);
    kick(self, target);
    if (target->state == CPU_RUNNING)
        balance_kick(self);
}

/* ---------- context switching ---------- */

static void zero_thread(struct thread *t)
{
    usize n = sizeof *t / 8;
    __asm__ volatile("rep stosq" : "+D"(t), "+c"(n) : "a"(0UL) : "memory");
}

/* A new thread: a user frame at the top of its kernel stack and, below it, a
 * switch frame whose return address is thread_start (entry.S), which drops to
 * the user frame through trap_return. */
static void make_thread(struct thread *t, i32 id, u8 *kstack, u64 rip, u64 arg, u64 user_sp, i32 is_idle)
{
    zero_thread(t);
    t->id = id;
    t->is_idle = is_idle;
    t->kstack_top = (u64)kstack + KSTACK_SIZE;
    struct frame *f = (struct frame *)(t->kstack_top - sizeof(struct frame));
    u64 *z = (u64 *)f;
    usize n = FRAME_QWORDS;
    __asm__ volatile("rep stosq" : "+D"(z), "+c"(n) : "a"(0UL) : "memory");
    f->rip = rip;
    f->cs = SEL_UCODE;
    f->rflags = 0x202;
    f->rsp = user_sp;
    f->ss = SEL_UDATA;
    f->rdi = arg;
    u64 *sw = (u64 *)f - 7; /* r15 r14 r13 r12 rbx rbp, return address */
    sw[6] = (u64)thread_start;
    t->ksp = (u64)sw;
}

/* Called by the context that was just switched to: the previous thread's stack
 * is no longer in use, so another CPU may now run it. */
void finish_switch(struct thread *last) { __atomic_store_n(&last->on_cpu, 0, __ATOMIC_RELEASE); }

static u32 last_thread_id[MAX_CPUS];

/* Threads are still queued after this CPU picked one: wake one halted CPU so
 * its idle loop steals one (and, picking, kicks the next: a chain until the
 * queues are empty or no CPU is halted). Without this, threads queued behind
 * a spinning thread (after a yield, say) could wait for ever while other
 * vCPUs sleep. */
static void balance_kick(struct cpu *c)
{
    u32 n = g_ncpus;
    for (u32 i = 0; i < n; i++) {
        struct cpu *o = &cpus[i];
        if (o != c && o->state == CPU_HALTED) {
            send_ipi(c, o->id, VEC_WAKE);
            return;
        }
    }
}

/* Switch this CPU from its current thread to `next`. Returns when the current
 * thread is switched back to, possibly on another CPU: callers must not use
 * their `struct cpu *` afterwards. */
static void context_switch(struct cpu *c, struct thread *next)
{
    struct thread *prev = c->cur;
    u64 now = rdtsc();
    u64 d = now - prev->run_start;
    prev->cpu_tsc += d;
    if (prev->is_idle)
        c->idle_tsc += d;
    /* The CPL3 idle thread (poll, haltpoll) is idle for its whole stay; the
     * in-kernel idle context only while halted (kidle_loop), its scheduling
     * work being kernel time. */
    if (prev->is_idle == 1)
        c->window_idle_tsc += window_part(prev->run_start, now);
    next->run_start = now;
    if (next == prev)
        return;
    while (__atomic_load_n(&next->on_cpu, __ATOMIC_ACQUIRE))
        cpu_relax(); /* not reached: pick() never returns a thread still on a CPU */
    next->on_cpu = 1;
    next->cpu = c->id;
    next->state = T_RUNNING;
    c->cur = next;
    spin_page_cpu[c->id] = next->is_idle ? 0 : (u64)next->id + 1;
    c->state = next->is_idle == 1 ? CPU_POLLING : next->is_idle == 2 ? CPU_IDLE : CPU_RUNNING;
    if (!next->is_idle && last_thread_id[c->id] != (u32)next->id + 1) {
        c->context_switches++;
        last_thread_id[c->id] = next->id + 1;
    }
    if (g_queued && !next->is_idle)
        balance_kick(c);
    tss[c->id].rsp0 = next->kstack_top;
    finish_switch(switch_stack(&prev->ksp, next->ksp, prev));
}

static void wake_sleepers(struct cpu *c);

/* The current thread blocked, yielded or ended: run something else here. */
static void schedule(struct cpu *c)
{
    if (g_next_wake <= rdtsc())
        wake_sleepers(c);
    struct thread *next = pick(c);
    if (!next)
        next = g_params.idle == IDLE_HLT ? c->kidle : c->idle;
    context_switch(c, next);
}

/* The in-kernel idle context of each CPU (its boot stack). With `hlt` it is
 * where an idle CPU halts; with the polling policies it only hands the CPU to
 * the CPL3 idle thread at boot. */
static void __attribute__((noreturn)) kidle_loop(struct cpu *c)
{
    for (;;) {
        c->state = CPU_IDLE;
        if (g_next_wake <= rdtsc())
            wake_sleepers(c);
        struct thread *t = pick(c);
        if (!t && g_params.idle != IDLE_HLT && c->idle)
            t = c->idle;
        if (t) {
            context_switch(c, t);
            continue;
        }
        __atomic_exchange_n(&c->state, CPU_HALTED, __ATOMIC_SEQ_CST);
        if (c->rq_len || g_queued || g_next_wake <= rdtsc())
            continue;
        arm_oneshot(c, own_deadline(c));
        c->halts++; /* counted on entry, like KVM's halt_exits */
        u64 halt_start = rdtsc();
        c->halt_start_tsc = halt_start;
        /* sti's one-instruction shadow: an IPI already pending wakes the hlt. */
        __asm__ volatile("sti; hlt; cli" ::: "memory");
        c->halt_start_tsc = 0;
        c->window_idle_tsc += window_part(halt_start, rdtsc());
    }
}

static void __attribute__((noreturn)) enter_kidle(struct cpu *c)
{
    struct thread *k = &kidle_threads[c->id];
    zero_thread(k);
    k->id = MAX_THREADS + MAX_CPUS + c->id;
    k->is_idle = 2;
    k->on_cpu = 1;
    k->cpu = c->id;
    k->run_start = rdtsc();
    c->kidle = k;
    c->cur = k;
    kidle_loop(c);
}

/* ---------- sleep ---------- */

static void recompute_next_wake(void)
{
    u64 m = ~0UL;
    for (struct thread *t = sleepers; t; t = t->next)
        m = min_u64(m, t->wake_tsc);
    g_next_wake = m;
}

static void wake_sleepers(struct cpu *c)
{
    struct thread *ready = 0;
    spin_lock(&sleep_lock);
    u64 now = rdtsc();
    struct thread **pp = &sleepers;
    while (*pp) {
        struct thread *t = *pp;
        if (t->wake_tsc <= now) {
            *pp = t->next;
            t->next = ready;
            ready = t;
        } else {
            pp = &t->next;
        }
    }
    recompute_next_wake();
    spin_unlock(&sleep_lock);
    while (ready) {
        struct thread *t = ready;
        ready = t->next;
        make_runnable(c, t);
    }
}

/* ---------- futex ---------- */

static struct bucket *bucket_of(u64 addr) { return &futex_table[(addr >> 2) & 63]; }

static void sys_futex_wait(struct cpu *c, struct frame *f)
{
    struct thread *t = c->cur;
    u64 addr = f->rdi;
    struct bucket *b = bucket_of(addr);
    f->rax = 0; /* the result if it sleeps: set before a waker can see it */
    spin_lock(&b->lock);
    if (*(volatile u32 *)addr != (u32)f->rsi) {
        spin_unlock(&b->lock);
        f->rax = 1;
        return;
    }
    t->csw_vol++;
    t->state = T_BLOCKED;
    t->futex_addr = addr;
    t->next = 0;
    struct thread **pp = &b->head;
    while (*pp)
        pp = &(*pp)->next;
    *pp = t;
    spin_unlock(&b->lock);
    schedule(c);
}

static u64 futex_wake_addr(struct cpu *c, u64 addr, u64 max)
{
    u64 n = 0;
    struct bucket *b = bucket_of(addr);
    struct thread *ready = 0, **tail = &ready;
    spin_lock(&b->lock);
    struct thread **pp = &b->head;
    while (*pp && n < max) {
        struct thread *t = *pp;
        if (t->futex_addr == addr) {
            *pp = t->next;
            t->next = 0;
            *tail = t;
            tail = &t->next;
            n++;
        } else {
            pp = &t->next;
        }
    }
    spin_unlock(&b->lock);
    while (ready) {
        struct thread *t = ready;
        ready = t->next;
        make_runnable(c, t);
    }
    return n;
}

/* ---------- CPU set-up ---------- */

static void set_gate(u32 vec, u64 handler, u8 type)
{
    struct idt_entry *e = &idt[vec];
    e->off0 = handler & 0xffff;
    e->sel = SEL_KCODE;
    e->ist = 0;
    e->type = type;
    e->off1 = (handler >> 16) & 0xffff;
    e->off2 = handler >> 32;
    e->zero = 0;
}

/* Host-indicator words of vCPUs beyond SENSOR_CPUS: counted, never read. */
static u64 sensor_unseen[MAX_CPUS - SENSOR_CPUS][SENSOR_WORDS];

static void cpu_setup(u32 i)
{
    struct cpu *c = &cpus[i];
    c->self = c;
    c->id = i;
    c->sensor = i < SENSOR_CPUS ? (volatile u64 *)SENSOR_BASE + i : sensor_unseen[i - SENSOR_CPUS];
    c->kstack_top = (u64)kstacks + (u64)(i + 1) * KSTACK_SIZE;
    u64 *g = gdt[i];
    g[0] = 0;
    g[1] = 0x00af9a000000ffffUL; /* kernel code 64 */
    g[2] = 0x00cf92000000ffffUL; /* kernel data */
    g[3] = 0x00cff2000000ffffUL; /* user data, DPL3 */
    g[4] = 0x00affa000000ffffUL; /* user code 64, DPL3 */
    u64 base = (u64)&tss[i], limit = sizeof(struct tss) - 1;
    tss[i].rsp0 = c->kstack_top;
    tss[i].iomap = sizeof(struct tss); /* no I/O bitmap: CPL3 port I/O faults */
    g[5] = (limit & 0xffff) | ((base & 0xffffff) << 16) | (0x89UL << 40) | (((limit >> 16) & 0xf) << 48) |
           (((base >> 24) & 0xff) << 56);
    g[6] = base >> 32;
    struct {
        u16 limit;
        u64 base;
    } __attribute__((packed)) gd = {sizeof(gdt[0]) - 1, (u64)g}, id = {sizeof(idt) - 1, (u64)idt};
    __asm__ volatile("lgdt %0" : : "m"(gd));
    __asm__ volatile("ltr %w0" : : "r"(SEL_TSS));
    __asm__ volatile("lidt %0" : : "m"(id));
    wrmsr(0xc0000101, (u64)c); /* GS base: this_cpu() */
    lapic_w(LAPIC_SVR, 0x100 | VEC_SPURIOUS);
    lapic_w(LAPIC_TPR, 0);
    lapic_w(LAPIC_LVT_TIMER, 0x10000 | VEC_TIMER); /* masked until configured */
    /* Firmware (SeaBIOS under QEMU) leaves the 8259 PIC routed through LINT0
     * at vector 8 with the PIT running: mask LINT0/LINT1 so a legacy timer
     * interrupt cannot masquerade as a double fault. */
    lapic_w(LAPIC_LVT_LINT0, 0x10000);
    lapic_w(LAPIC_LVT_LINT1, 0x10000);
}

static void timer_setup(struct cpu *c)
{
    lapic_w(LAPIC_TIMER_DIV, 0x3); /* divide by 16 */
    if (g_params.timer_hz && g_lapic_hz) {
        lapic_w(LAPIC_LVT_TIMER, VEC_TIMER | (1 << 17)); /* periodic */
        lapic_w(LAPIC_TIMER_INIT, (u32)(g_lapic_hz / 16 / g_params.timer_hz));
    } else {
        arm_oneshot(c, own_deadline(c));
    }
}

static void init_idle_thread(u32 i)
{
    make_thread(&idle_threads[i], MAX_THREADS + i, idle_kstacks[i], (u64)user_idle, (u64)&cpus[i],
                (u64)idle_stacks[i] + sizeof idle_stacks[i] - 8, 1);
    cpus[i].idle = &idle_threads[i];
}

void __attribute__((noreturn)) ap_main(void)
{
    u32 i = ap_index;
    cpu_setup(i);
    struct cpu *c = &cpus[i];
    timer_setup(c);
    __atomic_store_n(&ap_ready, 1, __ATOMIC_SEQ_CST);
    enter_kidle(c);
}

static void calibrate_lapic(void)
{
    if (!g_params.tsc_hz)
        return;
    lapic_w(LAPIC_TIMER_DIV, 0x3);
    lapic_w(LAPIC_LVT_TIMER, 0x10000 | VEC_TIMER);
    lapic_w(LAPIC_TIMER_INIT, 0xffffffff);
    u64 t0 = rdtsc(), t1;
    while ((t1 = rdtsc()) - t0 < g_params.tsc_hz / 200)
        ;
    u32 cur = lapic_r(LAPIC_TIMER_CUR);
    lapic_w(LAPIC_TIMER_INIT, 0);
    u64 ticks = 0xffffffffUL - cur;
    g_lapic_hz = ticks * 16 * g_params.tsc_hz / (t1 - t0);
    lapic_q32 = ((g_lapic_hz / 16) << 32) / g_params.tsc_hz;
}

static u64 sys_smp_start(struct cpu *c, const struct boot_params *p)
{
    g_params = *p;
    if (g_params.cpus < 1)
        g_params.cpus = 1;
    if (g_params.cpus > MAX_CPUS)
        g_params.cpus = MAX_CPUS;
    calibrate_lapic();
    if (g_params.watchdog_tsc)
        watchdog_deadline = rdtsc() + g_params.watchdog_tsc;
    for (u32 i = 0; i < g_params.cpus; i++)
        init_idle_thread(i);
    memcpy((void *)0x8000, tramp_start, tramp_end - tramp_start);
    u32 online = 1;
    for (u32 i = 1; i < g_params.cpus; i++) {
        ap_index = i;
        ap_ready = 0;
        ap_stack_top = (u64)kstacks + (u64)(i + 1) * KSTACK_SIZE - 64;
        g_ncpus = i + 1; /* so wakers see the AP once it is up */
        lapic_w(LAPIC_ICR_HI, i << 24);
        lapic_w(LAPIC_ICR_LO, 0x4500); /* INIT */
        /* An AP comes up in ~0.23 ms on PVM, but on a loaded host its vCPU
         * thread may not run for a while: wait up to 3 x 1 s, re-sending SIPI
         * (ignored by an AP that already started). */
        for (int tries = 0; tries < 3 && !ap_ready; tries++) {
            lapic_w(LAPIC_ICR_HI, i << 24);
            lapic_w(LAPIC_ICR_LO, 0x4600 | (0x8000 >> 12)); /* SIPI */
            u64 t0 = rdtsc();
            u64 wait = g_params.tsc_hz ? g_params.tsc_hz : 3000000000UL;
            while (!ap_ready && rdtsc() - t0 < wait)
                cpu_relax();
        }
        if (!ap_ready) {
            g_ncpus = i;
            char buf[96], *q = buf;
            q = kfmt_str(q, "smplab-guest: vCPU ");
            q = kfmt_dec(q, i);
            q = kfmt_str(q, " did not start (INIT/SIPI); continuing with fewer vCPUs\n");
            kputs_n(buf, q - buf);
            break;
        }
        online++;
    }
    g_ncpus = online;
    timer_setup(c);
    if (g_params.io_ntargets) {
        if (g_params.io_ntargets > IO_TARGETS)
            g_params.io_ntargets = IO_TARGETS;
        /* Edge-triggered, active high, physical destination, fixed delivery.
         * The device raises its line when its completion FIFO becomes
         * non-empty and lowers it when the handler drains it, so every
         * rising edge is one batch and none is lost. Not level-triggered:
         * KVM's in-kernel IOAPIC on PVM hosts re-delivers a level interrupt
         * once more after its EOI although the line is already low (measured:
         * one spurious interrupt per request), which smplab-vmm's model does
         * not; edge behaves the same on both. */
        io_dest = g_params.io_targets[0];
        irq_route_dest = io_dest + 1;
        ioapic_w(IOREDTBL_HI, (u32)g_params.io_targets[0] << 24);
        ioapic_w(IOREDTBL_LO, VEC_IO);
        /* Read it back: a VMM may post IOAPIC writes (smplab-vmm's `hybrid`
         * and `iothread` queue them to its I/O thread), and an edge raised
         * while the entry is still masked would be lost. The read returns
         * only after the writes took effect. */
        if ((ioapic_r(IOREDTBL_LO) & 0x100ff) != VEC_IO)
            kputs_n("smplab-guest: warning: the IOAPIC did not take the block device's entry\n", 72);
    }
    return online;
}

/* ---------- system calls ---------- */

static void sys_spawn(struct cpu *c, struct frame *f)
{
    u32 i = __atomic_fetch_add(&g_nthreads, 1, __ATOMIC_SEQ_CST);
    if (i >= MAX_THREADS) {
        f->rax = (u64)-1;
        return;
    }
    struct thread *t = &threads[i];
    make_thread(t, (i32)i, thread_kstacks[i], f->rdi, f->rsi, f->rdx, 0);
    u32 hint = (u32)f->r10;
    t->cpu = hint < g_ncpus ? hint : 0;
    /* Before the thread can run: every thread exists by this TSC value. */
    g_last_spawn_tsc = rdtsc();
    rq_push(&cpus[t->cpu], t);
    kick(c, &cpus[t->cpu]);
    f->rax = i;
}

static void idle_run_work(struct cpu *c)
{
    if (g_next_wake <= rdtsc())
        wake_sleepers(c);
    struct thread *n = pick(c);
    if (n)
        context_switch(c, n); /* back here when this CPU is idle again */
}

static void syscall(struct cpu *c, struct frame *f)
{
    struct thread *t = c->cur;
    c->syscalls++;
    switch (f->rax) {
    case SYS_EXIT_THREAD: {
        /* Account the thread's CPU time before anyone can see it finished:
         * the kernel, not the thread, bumps the done counter (rdi) and wakes
         * the waiter when it reaches rsi. */
        u64 now = rdtsc();
        t->cpu_tsc += now - t->run_start;
        t->run_start = now;
        t->state = T_DEAD;
        volatile u32 *done = (volatile u32 *)f->rdi;
        if (done && __atomic_add_fetch(done, 1, __ATOMIC_SEQ_CST) == (u32)f->rsi) {
            /* The last worker: the workload window closes here, before the
             * init thread wakes to write the result stream. */
            u64 ticks = 0;
            for (u32 i = 0; i < g_ncpus; i++)
                ticks += cpus[i].ticks;
            g_done_ticks = ticks;
            g_done_tsc = now;
            outl(PORT_WINDOW, WINDOW_DONE);
            futex_wake_addr(c, (u64)done, 1);
        }
        schedule(c);
        return; /* not reached: nothing switches back to a dead thread */
    }
    case SYS_FUTEX_WAIT:
        sys_futex_wait(c, f);
        return;
    case SYS_FUTEX_WAKE:
        f->rax = futex_wake_addr(c, f->rdi, f->rsi);
        return;
    case SYS_YIELD:
        if (c->rq_len || g_queued) {
            f->rax = 1;
            t->csw_vol++;
            rq_push(c, t);
            schedule(c);
        } else {
            f->rax = 0;
        }
        return;
    case SYS_SHOOTDOWN: {
        u32 pages = (u32)f->rdi;
        g_sd_pages = pages;
        for (u32 p = 0; p < pages && p < 64; p++)
            __asm__ volatile("invlpg (%0)" : : "r"(0x40000000UL - (u64)(p + 1) * 4096) : "memory");
        u32 n = g_ncpus;
        if (n > 1) {
            lapic_w(LAPIC_ICR_LO, VEC_SHOOTDOWN | 0x4000 | (3 << 18)); /* all but self */
            c->ipis_sent += n - 1;
        }
        f->rax = n - 1;
        return;
    }
    case SYS_IDLE_WAKE:
        idle_run_work(c);
        return;
    case SYS_IDLE_HALT:
        __atomic_exchange_n(&c->state, CPU_HALTED, __ATOMIC_SEQ_CST);
        if (!c->rq_len && !g_queued && g_next_wake > rdtsc()) {
            arm_oneshot(c, own_deadline(c));
            c->halts++;
            __asm__ volatile("sti; hlt; cli" ::: "memory");
        }
        c->state = CPU_POLLING;
        idle_run_work(c);
        return;
    case SYS_SLEEP:
        f->rax = 0;
        t->csw_vol++;
        t->state = T_SLEEPING;
        t->wake_tsc = f->rdi;
        spin_lock(&sleep_lock);
        t->next = sleepers;
        sleepers = t;
        if (t->wake_tsc < g_next_wake)
            g_next_wake = t->wake_tsc;
        spin_unlock(&sleep_lock);
        arm_oneshot(c, own_deadline(c));
        schedule(c);
        return;
    case SYS_SPAWN:
        sys_spawn(c, f);
        return;
    case SYS_WRITE:
        if (g_params.console)
            kputs_n((const char *)f->rdi, f->rsi);
        f->rax = f->rsi;
        return;
    case SYS_RESULT:
        if (g_params.result_serial) {
            static const char b[] = "\nSMPLAB-RESULT-BEGIN\n", e[] = "SMPLAB-RESULT-END\n";
            kputs_n(b, sizeof b - 1);
            kputs_n((const char *)f->rdi, f->rsi);
            kputs_n(e, sizeof e - 1);
        } else {
            outsb(PORT_RESULT, (const void *)f->rdi, f->rsi);
        }
        f->rax = 0;
        return;
    case SYS_POWEROFF:
        poweroff((u32)f->rdi);
    case SYS_PMTIMER:
        f->rdx = rdtsc();
        f->rax = inl(PORT_PMTMR) & 0xffffff;
        return;
    case SYS_SMP_START:
        f->rax = sys_smp_start(c, (const struct boot_params *)f->rdi);
        return;
    case SYS_IO: {
        /* Block until the completion interrupt (trap_io) makes it runnable.
         * Everything the handler reads is set before the device sees the
         * request; a handler on another vCPU may wake the thread before it has
         * switched out, which pick() handles as for a futex wake. */
        t->csw_vol++;
        t->io_done_tsc = 0;
        t->io_irq_tsc = 0;
        t->state = T_BLOCKED;
        __atomic_store_n(&t->io_wait, 1, __ATOMIC_SEQ_CST);
        *(volatile u64 *)BLOCK_BASE = (u64)(u32)t->id | (f->rdi & 0xff) << 16 | f->rsi << 24;
        schedule(c);
        f->rax = t->io_done_tsc;
        f->rdx = t->io_irq_tsc;
        return;
    }
    case SYS_GATE: {
        /* READY, then read until the VMM says GO: it answers WAIT while its
         * host-side start gate (other VMs) is closed. All-ones: no device. */
        outl(PORT_WINDOW, WINDOW_READY);
        u32 v;
        while ((v = inl(PORT_WINDOW)) == WINDOW_WAIT)
            ;
        f->rax = v;
        return;
    }
    default:
        f->rax = (u64)-1;
        return;
    }
}

/* ---------- traps ---------- */

/* Each hot vector has its own entry stub and handler (entry.S), so the
 * emulator runs no dispatch code on the way in. */

/* Vector 3, DPL3: the system-call instruction `int3`. KVM PVM cannot deliver a
 * software interrupt `int N` from CPL3 (its emulator handles `int` only in
 * real mode and injects #UD), while the #BP exception path works. */
void trap_syscall(struct frame *f)
{
    if ((f->cs & 3) != 3)
        fault(f); /* a breakpoint in the kernel: a bug */
    syscall(this_cpu(), f);
}

void trap_wake(struct frame *f)
{
    struct cpu *c = this_cpu();
    lapic_eoi();
    c->ipis_received++;
    /* Only reached from CPL3 (isr240 handles CPL0 itself): the CPL3 idle
     * thread, interrupted while polling, is switched to the work. */
    if (c->cur->is_idle)
        idle_run_work(c);
}

/* Block-device completion (vector VEC_IO, entry.S isr64 took the entry TSC):
 * take every completed tag off the device, wake its thread, move the
 * interrupt to its next target vCPU if the affinity names several, EOI. */
void trap_io(struct frame *f)
{
    struct cpu *c = this_cpu();
    u64 entry = c->io_entry_tsc;
    for (u32 taken = 0;; taken++) {
        u64 w = *(volatile u64 *)(BLOCK_BASE + 8);
        if (w == BLOCK_NONE) {
            if (!taken)
                c->io_spurious++;
            break;
        }
        if (!taken)
            c->io_irqs++;
        u32 tag = (u32)(w & 0xffff);
        if (tag < g_nthreads && tag < MAX_THREADS) {
            struct thread *t = &threads[tag];
            if (__atomic_exchange_n(&t->io_wait, 0, __ATOMIC_SEQ_CST)) {
                u64 ago = (entry - (w >> 24)) & BLOCK_TSC_MASK;
                /* Completed after this handler was entered (it was still
                 * draining): taken without an interrupt of its own. */
                if (ago > BLOCK_TSC_MASK / 2)
                    ago = 0;
                t->io_done_tsc = entry - ago;
                t->io_irq_tsc = entry;
                c->sensor[SENSOR_IO_DONE]++;
                c->sensor[SENSOR_IO_LAT] += ago;
                make_runnable(c, t);
            }
        }
        if (!(w & BLOCK_MORE))
            break;
    }
    __atomic_add_fetch(&irq_route_count, 1, __ATOMIC_RELAXED);
    /* Rewrite the destination only when it changes: each IOAPIC write is an
     * exit. Overlapping handlers may race on io_dest; the loser's target
     * holds until the next interrupt. */
    u32 next = io_next_target();
    if (next != io_dest) {
        io_dest = next;
        irq_route_dest = (u64)next + 1;
        ioapic_w(IOREDTBL_HI, next << 24);
    }
    lapic_eoi();
    /* A CPL3 polling idle thread interrupted: switch it to the woken work. */
    if ((f->cs & 3) == 3 && c->cur->is_idle)
        idle_run_work(c);
}

void trap_timer(struct frame *f)
{
    struct cpu *c = this_cpu();
    lapic_eoi();
    c->ticks++;
    u64 now = rdtsc();
    if (c->id == 0 && watchdog_deadline && now >= watchdog_deadline)
        watchdog_fire();
    if (g_next_wake <= now)
        wake_sleepers(c);
    c->timer_deadline = 0;
    arm_oneshot(c, own_deadline(c));
    if ((f->cs & 3) != 3 || !g_params.timer_hz)
        return;
    struct thread *t = c->cur;
    if (t->is_idle) {
        if (g_queued)
            idle_run_work(c);
    } else if (c->rq_len) {
        /* Preemption: round robin within this CPU's queue. */
        t->csw_invol++;
        rq_push(c, t);
        schedule(c);
    }
}

/* Every other vector: exceptions and the spurious vector. */
void trap(struct frame *f)
{
    u64 v = f->vector;
    if (v == 6 && (f->cs & 3) == 3 && *(volatile u16 *)f->rip == (0x00cd | (VEC_SYSCALL << 8))) {
        /* `int $0x81` arriving as #UD (PVM, see trap_syscall): treat it as the
         * system call it was meant to be; on VT-x/AMD-V hosts the DPL3 gate is
         * taken directly (trap_syscall via isr129). */
        f->rip += 2;
        syscall(this_cpu(), f);
        return;
    }
    if (v == VEC_SPURIOUS)
        return;
    fault(f);
}

/* BSP entry from entry.S, still at CPL0 on kernel stack 0. */
void __attribute__((noreturn)) kmain(u32 start_info)
{
    g_boot_tsc = rdtsc();
    for (const u64 *e = isr_table; e[0] != 0xffff; e += 2)
        set_gate((u32)e[0], e[1], e[0] == VEC_SYSCALL || e[0] == 3 ? 0xee : 0x8e);
    /* Mask the legacy PIC entirely; this kernel uses only the LAPIC. */
    outb(0x21, 0xff);
    outb(0xa1, 0xff);
    cpu_setup(0);
    struct cpu *c = &cpus[0];
    g_ncpus = 1;
    /* The init thread: CPL3, parses the command line and the program. */
    make_thread(&threads[0], 0, thread_kstacks[0], (u64)user_init, start_info,
                (u64)init_stack + sizeof init_stack - 8, 0);
    g_nthreads = 1;
    rq_push(c, &threads[0]);
    enter_kidle(c);
}
