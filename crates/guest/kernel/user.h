/* smplab guest, CPL3 runtime: what its files share. The init thread
 * (init.c), the program tables (program.c), the executor (exec.c), the start
 * gate (gate.c), the idle thread (idle.c), the result record (result.c) and
 * what they all use (ulib.c) run natively even on PVM hosts, so everything
 * that is not privileged lives at CPL3. They enter the kernel only through
 * the system-call instruction (`int3`) and read kernel counters directly
 * (guest.h). */
#ifndef SMPLAB_USER_H
#define SMPLAB_USER_H

#include "guest.h"

/* The system-call instruction (see syscall.c trap()). */
#ifndef SYSCALL_INSN
#define SYSCALL_INSN "int3"
#endif

/* ---------- system calls ---------- */

/* The kernel preserves every register except rax (result) and r8-r11. */
static inline i64 sys3(u64 nr, u64 a, u64 b, u64 c)
{
    i64 r;
    __asm__ volatile(SYSCALL_INSN : "=a"(r) : "a"(nr), "D"(a), "S"(b), "d"(c) : "memory", "r8", "r9", "r10", "r11");
    return r;
}
static inline i64 sys1(u64 nr, u64 a) { return sys3(nr, a, 0, 0); }
static inline i64 sys0(u64 nr) { return sys3(nr, 0, 0, 0); }

/* Returns 1 if the thread really slept (0 when the value had already changed). */
static inline int futex_wait(volatile u32 *addr, u32 val) { return sys3(SYS_FUTEX_WAIT, (u64)addr, val, 0) == 0; }
static inline i64 futex_wake(volatile u32 *addr, u32 n) { return sys3(SYS_FUTEX_WAKE, (u64)addr, n, 0); }

/* ---------- ulib.c: console output, fatal errors, the heap ---------- */

usize ustrlen(const char *s);
void print(const char *s);
void __attribute__((noreturn)) die(const char *msg, u32 status);
/* The heap is [lo, hi); init.c finds it in the memory map. */
void heap_init(u64 lo, u64 hi);
void *alloc(u64 bytes, u64 align);

/* Set by init.c before it starts any other CPL3 code. */
extern u64 tsc_hz;        /* TSC cycles per second (tsc_hz= or calibrated) */
extern char idle_name[48]; /* the idle= policy as given, for the result */

/* ---------- program.c: the program's objects, decoded once ---------- */

struct spin {
    volatile u32 word;    /* tas/ttas: 0 free; ticket: next ticket */
    volatile u32 serving; /* ticket: now serving */
    u8 kind, pause;
} __attribute__((aligned(64)));

struct mutex {
    volatile u32 state; /* 0 free, 1 locked, 2 locked with waiters */
    u32 spin_limit;
} __attribute__((aligned(64)));

struct barrier {
    volatile u32 count;
    volatile u32 gen;
    volatile u32 waiters;
    u32 parties, spin_limit;
    u8 wait, pause;
} __attribute__((aligned(64)));

struct queue {
    volatile u32 count;
    volatile u32 seq;
    volatile u32 waiters;
    u32 cap;
} __attribute__((aligned(64)));

struct counter {
    volatile u64 v;
} __attribute__((aligned(64)));

/* Units left in a pool; drain claims with a fetch-and-decrement, so it goes
 * below zero by at most one per thread that found it empty. */
struct pool {
    volatile i64 left;
} __attribute__((aligned(64)));

struct group {
    u32 threads;
    u64 private_bytes;
    const u8 *ops;
    u32 ops_len;
};

struct worker {
    u32 group, index, gid;
    i32 ktid;
    const u8 *ops;
    u32 ops_len;
    u8 *private_buf;
    u64 state;
    u64 start, end;
    u64 ops_count[NOPS];
    u64 spins, blocks, wakeups;
    /* Advanced while waiting at the start gate (settle_waiters). */
    volatile u64 gate_beats;
} __attribute__((aligned(64)));


extern u32 n_spin, n_mutex, n_barrier, n_queue, n_counter, n_buffer, n_group, n_device, n_pool, total_threads;
extern struct spin *spins;
extern struct mutex *mutexes;
extern struct barrier *barriers;
extern struct queue *queues;
extern struct counter *counters;
extern struct pool *pools;
extern u8 **buffers;
extern u64 *buffer_bytes;
extern struct group *groups;
extern struct worker *workers;

static inline u64 ld64(const u8 *p)
{
    u64 v;
    __builtin_memcpy(&v, p, 8);
    return v;
}
static inline u32 ld32(const u8 *p)
{
    u32 v;
    __builtin_memcpy(&v, p, 4);
    return v;
}

void decode_program(const u8 *b, u64 len);

/* ---------- exec.c: the workers ---------- */

/* The workers that have ended (the kernel bumps it at SYS_EXIT_THREAD). */
extern volatile u32 g_done;

/* io latency samples (TSC cycles: completion -> handler entry, completion ->
 * the thread running again), the last IO_SAMPLES of them. */
#define IO_SAMPLES 16384
extern u64 io_samples[IO_SAMPLES][2];
extern volatile u64 io_nsamples;

void __attribute__((noreturn)) worker_main(struct worker *w);

/* ---------- gate.c: the start gate ---------- */

/* What the releasing worker saw: every worker arrived, timer ticks and the
 * VMM's answer at the release; how long settling took and its outcome. */
extern u64 g_all_arrived_tsc, g_release_ticks, g_gate_reply;
extern u64 g_settle_tsc, g_settle_outcome;

void start_gate(struct worker *w);

/* ---------- result.c ---------- */

void emit_result(void);

#endif
