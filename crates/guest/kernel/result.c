/* smplab guest, CPL3: the result record (docs/guest-abi.md), formatted at
 * CPL3 from the workers' counts and the kernel's per-CPU counters, and handed
 * to the kernel in one system call, which writes it to port 0x520 or framed
 * on the serial console. crates/guest/src/result.rs parses it. */
#include "user.h"

struct out {
    char *buf;
    usize len, cap;
};

static void out_str(struct out *o, const char *s)
{
    while (*s && o->len < o->cap)
        o->buf[o->len++] = *s++;
}

static void out_u64(struct out *o, u64 v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = '0' + v % 10;
        v /= 10;
    } while (v);
    while (n && o->len < o->cap)
        o->buf[o->len++] = tmp[--n];
}

static void out_sp_u64(struct out *o, u64 v)
{
    out_str(o, " ");
    out_u64(o, v);
}

/* A vCPU's idle time inside the workload window, with a halt or a CPL3 idle
 * period still running now (window_part clips it at the last worker's end).
 * A racy read of another CPU's fields, good to a few us. */
static u64 window_idle_now(struct cpu *c, u64 now)
{
    u64 idle = c->window_idle_tsc;
    u64 halt_start = c->halt_start_tsc;
    struct thread *cur = c->cur;
    if (halt_start)
        idle += window_part(halt_start, now);
    else if (cur && cur->is_idle == 1)
        idle += window_part(cur->run_start, now);
    return idle;
}

static char result_buf[1 << 20] __attribute__((section(".noinit")));

void emit_result(void)
{
    struct out o = {result_buf, 0, sizeof result_buf};
    u64 total[NOPS] = {0};
    out_str(&o, "smplab-guest-result 1\n");
    out_str(&o, "tsc_hz");
    out_sp_u64(&o, tsc_hz);
    out_str(&o, "\ncpus");
    out_sp_u64(&o, g_ncpus);
    out_str(&o, "\nidle ");
    out_str(&o, idle_name);
    out_str(&o, "\ntimer_hz");
    out_sp_u64(&o, g_params.timer_hz);
    out_str(&o, "\nlapic_hz");
    out_sp_u64(&o, g_lapic_hz);
    out_str(&o, "\nboot_tsc");
    out_sp_u64(&o, g_boot_tsc);
    out_str(&o, "\ngate");
    out_sp_u64(&o, g_last_spawn_tsc);
    out_sp_u64(&o, g_all_arrived_tsc);
    out_sp_u64(&o, g_release_tsc);
    out_sp_u64(&o, g_release_ticks);
    out_sp_u64(&o, g_done_tsc);
    out_sp_u64(&o, g_done_ticks);
    out_sp_u64(&o, g_gate_reply);
    out_str(&o, "\nsettle");
    out_sp_u64(&o, g_settle_tsc);
    out_sp_u64(&o, g_settle_outcome);
    out_str(&o, "\n");
    for (u32 i = 0; i < total_threads; i++) {
        struct worker *w = &workers[i];
        struct thread *t = &threads[w->ktid];
        for (int k = 0; k < NOPS; k++)
            total[k] += w->ops_count[k];
        out_str(&o, "thread");
        out_sp_u64(&o, w->group);
        out_sp_u64(&o, w->index);
        out_sp_u64(&o, w->start);
        out_sp_u64(&o, w->end);
        out_sp_u64(&o, t->cpu_tsc);
        out_sp_u64(&o, w->spins);
        out_sp_u64(&o, w->blocks);
        out_sp_u64(&o, w->wakeups);
        out_sp_u64(&o, t->csw_vol);
        out_sp_u64(&o, t->csw_invol);
        out_str(&o, "\n");
    }
    out_str(&o, "ops");
    for (int k = 0; k < NOPS; k++)
        out_sp_u64(&o, total[k]);
    out_str(&o, "\n");
    u64 now = rdtsc();
    for (u32 i = 0; i < g_ncpus; i++) {
        struct cpu *c = &cpus[i];
        /* Idle time is accounted when a CPU leaves its idle context; add the
         * idle period still running now (e.g. a vCPU halted since its thread
         * ended). A racy read of another CPU's fields, good to a few us. */
        struct thread *cur = c->cur;
        u64 idle = c->idle_tsc;
        if (cur && cur->is_idle && now > cur->run_start)
            idle += now - cur->run_start;
        out_str(&o, "cpu");
        out_sp_u64(&o, i);
        out_sp_u64(&o, c->ipis_sent);
        out_sp_u64(&o, c->ipis_received);
        out_sp_u64(&o, c->halts);
        out_sp_u64(&o, c->wakeups);
        out_sp_u64(&o, c->context_switches);
        out_sp_u64(&o, idle);
        out_sp_u64(&o, c->ticks);
        out_sp_u64(&o, c->syscalls);
        out_str(&o, "\n");
    }
    out_str(&o, "window_idle");
    for (u32 i = 0; i < g_ncpus; i++)
        out_sp_u64(&o, window_idle_now(&cpus[i], now));
    out_str(&o, "\n");
    if (g_params.io_ntargets) {
        out_str(&o, "io_irqs");
        for (u32 i = 0; i < g_ncpus; i++)
            out_sp_u64(&o, cpus[i].io_irqs);
        out_str(&o, "\nio_spurious");
        for (u32 i = 0; i < g_ncpus; i++)
            out_sp_u64(&o, cpus[i].io_spurious);
        out_str(&o, "\nio_samples");
        u64 n = io_nsamples;
        out_sp_u64(&o, n);
        out_str(&o, "\n");
        if (n > IO_SAMPLES)
            n = IO_SAMPLES;
        for (u64 i = 0; i < n; i++) {
            out_str(&o, "io_lat");
            out_sp_u64(&o, io_samples[i][0]);
            out_sp_u64(&o, io_samples[i][1]);
            out_str(&o, "\n");
        }
    }
    out_str(&o, "end\n");
    sys3(SYS_RESULT, (u64)o.buf, o.len, 0);
}
