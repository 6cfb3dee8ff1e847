/* smplab guest, CPL3: the start gate every worker passes before its ops,
 * and the settling of the waiters before the release (docs/guest.md, "The
 * start gate and what wall_ns covers"). */
#include "user.h"

/* The start gate (worker_main): arrivals, the release flag, and what the
 * releasing worker saw. */
static volatile u32 g_arrived;
static volatile u32 g_go;
u64 g_all_arrived_tsc, g_release_ticks, g_gate_reply;

static u64 ticks_now(void)
{
    u64 t = 0;
    for (u32 i = 0; i < g_ncpus; i++)
        t += cpus[i].ticks;
    return t;
}

/* Settling, as the native executor's gate does (crates/native/src/gate.rs):
 * with a vCPU for every worker, the releaser opens the gate only once every
 * waiter has run in SETTLE_SAMPLES consecutive samples of SETTLE_SAMPLE_US,
 * i.e. each vCPU thread runs on its own host CPU, not stacked on one by the
 * host's placement of threads that just started; at most SETTLE_LIMIT_US. */
#define SETTLE_SAMPLE_US 200
#define SETTLE_SAMPLES 3
#define SETTLE_LIMIT_US 50000
static u64 g_beats_seen[MAX_THREADS];
/* What settle_waiters did: TSC cycles it took, and 0 skipped (more workers
 * than vCPUs), 1 settled, 2 gave up at the limit. */
u64 g_settle_tsc, g_settle_outcome;

static void settle_waiters(const struct worker *self)
{
    if (total_threads < 2 || total_threads > g_ncpus || tsc_hz < 1000000)
        return;
    u64 per_us = tsc_hz / 1000000;
    u64 began = rdtsc();
    u64 end = began + per_us * SETTLE_LIMIT_US;
    for (u32 i = 0; i < total_threads; i++)
        g_beats_seen[i] = workers[i].gate_beats;
    u32 runs = 0;
    while (runs < SETTLE_SAMPLES && rdtsc() < end) {
        u64 t0 = rdtsc();
        while (rdtsc() - t0 < per_us * SETTLE_SAMPLE_US)
            cpu_relax();
        u32 all_ran = 1;
        for (u32 i = 0; i < total_threads; i++) {
            if (&workers[i] == self)
                continue;
            u64 b = workers[i].gate_beats;
            if (b == g_beats_seen[i])
                all_ran = 0;
            g_beats_seen[i] = b;
        }
        runs = all_ran ? runs + 1 : 0;
    }
    g_settle_tsc = rdtsc() - began;
    g_settle_outcome = runs >= SETTLE_SAMPLES ? 1 : 2;
}

/* The start gate, at CPL3 where waiting costs nothing on PVM hosts: every
 * worker exists and waits here before any starts, as native threads wait at
 * theirs. The last to arrive lets the waiters settle, tells the VMM "ready",
 * waits for its "go" (the host's gate across VMs), and releases everyone
 * with one store. A waiter that sees queued threads yields now and then so
 * they can arrive even on a tickless guest with more threads than vCPUs. */
void start_gate(struct worker *w)
{
    if (__atomic_add_fetch(&g_arrived, 1, __ATOMIC_SEQ_CST) == total_threads) {
        g_all_arrived_tsc = rdtsc();
        settle_waiters(w);
        g_gate_reply = (u32)sys0(SYS_GATE);
        g_release_ticks = ticks_now();
        g_release_tsc = rdtsc();
        __atomic_store_n(&g_go, 1, __ATOMIC_RELEASE);
        return;
    }
    u64 spins = 0;
    /* A waiter spins: the host's ground truth says so (exec.c's spin_mark). */
    if ((u32)w->ktid < SPIN_PAGE_THREADS)
        spin_page_thread[w->ktid] = rdtsc() | 1;
    while (!__atomic_load_n(&g_go, __ATOMIC_ACQUIRE)) {
        cpu_relax();
        ++spins;
        if ((spins & 63) == 0)
            w->gate_beats++;
        if (g_queued && (spins & 0x3fff) == 0)
            sys0(SYS_YIELD);
    }
    if ((u32)w->ktid < SPIN_PAGE_THREADS)
        spin_page_thread[w->ktid] = 0;
}
