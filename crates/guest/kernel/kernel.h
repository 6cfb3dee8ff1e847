/* smplab guest kernel, CPL0: what its parts share and user code never sees
 * (guest.h is what both sides share). Only kernel.c includes this, once,
 * before the parts: hardware access helpers, the descriptor types, and the
 * functions one part calls in another, listed by the part that defines them.
 * Every function is `static`: the kernel is one translation unit (kernel.c). */
#ifndef SMPLAB_KERNEL_H
#define SMPLAB_KERNEL_H

#include "guest.h"

/* Memory the kernel does not zero at boot (the emulator pays per byte): each
 * user clears what it takes. */
#define NOINIT __attribute__((section(".noinit")))

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

struct tss {
    u32 r0;
    u64 rsp0, rsp1, rsp2, r1;
    u64 ist[7];
    u64 r2;
    u16 r3, iomap;
} __attribute__((packed));

/* entry.S */
extern u8 kstacks[];
extern u8 tramp_start[], tramp_end[];
extern u64 ap_stack_top;
extern const u64 isr_table[];
extern struct thread *switch_stack(u64 *save_sp, u64 new_sp, struct thread *prev);
extern void thread_start(void);

_Static_assert(__builtin_offsetof(struct cpu, ipis_received) == 88, "CPU_IPIS_RECEIVED in entry.S");
_Static_assert(__builtin_offsetof(struct cpu, io_entry_tsc) == 152, "CPU_IO_ENTRY_TSC in entry.S");

/* ---------- hardware access ---------- */

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

/* ---------- functions one part calls in another ---------- */

/* klib.c */
static char *kfmt_hex(char *p, u64 v);
static char *kfmt_str(char *p, const char *s);
static char *kfmt_dec(char *p, u64 v);

/* panic.c */
static void __attribute__((noreturn)) poweroff(u32 status);
static void __attribute__((noreturn, noinline, cold)) fault(struct frame *f);
static void __attribute__((noreturn)) watchdog_fire(void);

/* timer.c */
static void arm_oneshot(struct cpu *c, u64 deadline);
static u64 own_deadline(struct cpu *c);
static void calibrate_lapic(void);
static void timer_setup(struct cpu *c);
static void sys_sleep(struct cpu *c, struct frame *f);
static void wake_sleepers(struct cpu *c);

/* sched.c */
static void rq_push(struct cpu *c, struct thread *t);
static struct thread *pick(struct cpu *c);
static void kick(struct cpu *self, struct cpu *target);
static void make_runnable(struct cpu *self, struct thread *t);
static void make_thread(struct thread *t, i32 id, u8 *kstack, u64 rip, u64 arg, u64 user_sp, i32 is_idle);
static void context_switch(struct cpu *c, struct thread *next);
static void schedule(struct cpu *c);
static void idle_run_work(struct cpu *c);
static void __attribute__((noreturn)) enter_kidle(struct cpu *c);

/* futex.c */
static void sys_futex_wait(struct cpu *c, struct frame *f);
static u64 futex_wake_addr(struct cpu *c, u64 addr, u64 max);

/* io.c */
static void io_irq_setup(void);
static void sys_io(struct cpu *c, struct frame *f);

/* boot.c */
static u64 sys_smp_start(struct cpu *c, const struct boot_params *p);

#endif
