/* smplab guest kernel, CPL0 part. On PVM hosts every instruction here runs in
 * KVM's instruction emulator (~0.7 us each), so the kernel does the minimum an
 * OS must do in kernel mode: descriptor tables, LAPIC, AP start-up, the
 * scheduler, futex wait/wake, sleep, IPIs, port I/O, block-device requests and
 * their interrupt. Everything else (command-line parsing, program decoding,
 * the executor, result formatting) runs at CPL3 (init.c, program.c, exec.c,
 * gate.c, result.c). Compiled with -mgeneral-regs-only: no SSE in CPL0 (the
 * emulator lacks it).
 *
 * This file is the kernel's one translation unit: its state shared between
 * parts, then the parts, each a file of its own idea, included in order. One
 * unit because calls between the parts are the hot paths (a system call
 * blocks in a futex and switches threads; an interrupt wakes one): in one
 * unit gcc inlines them and allocates registers across them. Compiled as
 * separate objects, the same code gained a save/restore of two or three
 * registers on each wake (wake_sleepers, futex_wake_addr, trap_io), each
 * instruction ~0.7 us emulated. */
#include "kernel.h"

/* ---------- state the parts share ---------- */

struct cpu cpus[MAX_CPUS];
/* Not zeroed at boot (the emulator pays per byte): each slot is cleared when used. */
struct thread threads[MAX_THREADS] NOINIT;
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
static u64 watchdog_deadline;
/* Every thread has its own kernel stack: a context switch is a stack switch,
 * not a copy of register frames (the emulator charges 2-4 us per `rep`
 * iteration and ~1 us per instruction). */
static u8 thread_kstacks[MAX_THREADS][KSTACK_SIZE] __attribute__((aligned(64))) NOINIT;
/* The task-state segment of each CPU: rsp0 is the kernel stack of the thread it runs. */
static struct tss tss[MAX_CPUS] __attribute__((aligned(16)));

/* ---------- the parts ---------- */

#include "klib.c"    /* memcpy, memset, console number formatting */
#include "panic.c"   /* poweroff, the exception report, the watchdog's dump */
#include "timer.c"   /* LAPIC timer, sleepers, the timer interrupt */
#include "sched.c"   /* run queues, wakeups and IPIs, context switch, idle */
#include "futex.c"   /* futex wait/wake */
#include "io.c"      /* the block device, its interrupt and its routing */
#include "boot.c"    /* descriptor tables, CPU set-up, SMP start, kmain */
#include "syscall.c" /* the system-call gate and dispatcher, the trap handler */
