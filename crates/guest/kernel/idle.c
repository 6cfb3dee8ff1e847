/* smplab guest, CPL3: the idle thread of the polling idle policies (poll,
 * haltpoll). The kernel runs it on a vCPU with nothing else to run. */
#include "user.h"

void user_idle(struct cpu *c)
{
    /* The polling idle loop of Ding & Shan (Diagnosing Virtualization
     * Overhead for Multi-threaded Computation on Multicore Platforms) §IV.A,
     * at CPL3 so it runs natively: watch this CPU's run queue (and stealable
     * work, and sleeper deadlines) in memory; a waker need not send an IPI.
     * haltpoll: poll for a window, then halt. */
    u64 window = g_params.haltpoll_tsc;
    int haltpoll = g_params.idle == IDLE_HALTPOLL;
    u64 start = rdtsc();
    for (;;) {
        if (c->rq_len || g_queued || g_next_wake <= rdtsc()) {
            sys0(SYS_IDLE_WAKE);
            start = rdtsc();
            continue;
        }
        if (haltpoll && rdtsc() - start >= window) {
            sys0(SYS_IDLE_HALT);
            start = rdtsc();
            continue;
        }
        cpu_relax();
    }
}
