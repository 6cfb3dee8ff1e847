/* smplab guest, CPL3: the executor. Each worker waits at the start gate
 * (gate.c), then interprets its op list in place (run_ops): compute, memory
 * touches, spin locks, mutexes, barriers, queues, atomics, sleeps, yields,
 * TLB shootdowns, device requests and drained pools, each counted as
 * docs/program-encoding.md defines. The ops' implementations stay in this
 * file so gcc inlines them into the interpreter's loop. */
#include "user.h"

#define LCG_MUL 6364136223846793005UL
#define LCG_ADD 1442695040888963407UL

volatile u32 g_done;
static volatile u32 g_sd_lock;

static inline u64 compute(u64 iters, u64 state)
{
    if (!iters)
        return state;
    /* The shared compute kernel (docs/program-encoding.md), verbatim. */
    __asm__ volatile("1: imul %%rdx, %%rax\n\t"
                     "add %%rsi, %%rax\n\t"
                     "dec %%rcx\n\t"
                     "jnz 1b"
                     : "+a"(state), "+c"(iters)
                     : "d"(LCG_MUL), "S"(LCG_ADD)
                     : "cc");
    return state;
}

/* The thread is spinning from now on / no longer (the host's ground truth). */
static void spin_mark(struct worker *w)
{
    if ((u32)w->ktid < SPIN_PAGE_THREADS)
        spin_page_thread[w->ktid] = rdtsc() | 1;
}

static void spin_clear(struct worker *w)
{
    if ((u32)w->ktid < SPIN_PAGE_THREADS)
        spin_page_thread[w->ktid] = 0;
}

static void spin_acquire(struct worker *w, struct spin *l)
{
    u64 n = 0;
    switch (l->kind) {
    case 0: /* tas */
        while (__atomic_exchange_n(&l->word, 1, __ATOMIC_ACQUIRE)) {
            if (n++ == 0)
                spin_mark(w);
            if (l->pause)
                cpu_relax();
        }
        break;
    case 1: /* ttas */
        for (;;) {
            while (l->word) {
                if (n++ == 0)
                    spin_mark(w);
                if (l->pause)
                    cpu_relax();
            }
            if (!__atomic_exchange_n(&l->word, 1, __ATOMIC_ACQUIRE))
                break;
            n++;
        }
        break;
    default: { /* ticket */
        u32 t = __atomic_fetch_add(&l->word, 1, __ATOMIC_ACQUIRE);
        while (l->serving != t) {
            if (n++ == 0)
                spin_mark(w);
            if (l->pause)
                cpu_relax();
        }
        break;
    }
    }
    if (n)
        spin_clear(w);
    w->spins += n;
}

static void spin_release(struct spin *l)
{
    if (l->kind == 2)
        __atomic_store_n(&l->serving, l->serving + 1, __ATOMIC_RELEASE);
    else
        __atomic_store_n(&l->word, 0, __ATOMIC_RELEASE);
}

static void mutex_lock(struct worker *w, struct mutex *m)
{
    u32 z = 0;
    if (__atomic_compare_exchange_n(&m->state, &z, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    if (m->spin_limit)
        spin_mark(w);
    for (u32 i = 0; i < m->spin_limit; i++) {
        w->spins++;
        cpu_relax();
        z = 0;
        if (m->state == 0 &&
            __atomic_compare_exchange_n(&m->state, &z, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            spin_clear(w);
            return;
        }
    }
    if (m->spin_limit)
        spin_clear(w);
    while (__atomic_exchange_n(&m->state, 2, __ATOMIC_ACQUIRE) != 0) {
        w->blocks += futex_wait(&m->state, 2);
    }
}

static void mutex_unlock(struct worker *w, struct mutex *m)
{
    if (__atomic_exchange_n(&m->state, 0, __ATOMIC_RELEASE) == 2)
        w->wakeups += (u64)futex_wake(&m->state, 1);
}

static void barrier_wait(struct worker *w, struct barrier *b)
{
    u32 gen = b->gen;
    if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == b->parties) {
        b->count = 0;
        __atomic_add_fetch(&b->gen, 1, __ATOMIC_SEQ_CST);
        if (__atomic_exchange_n(&b->waiters, 0, __ATOMIC_SEQ_CST))
            w->wakeups += (u64)futex_wake(&b->gen, 0xffffffffu);
        return;
    }
    u64 limit = b->wait == 0 ? ~0UL : b->wait == 1 ? 0 : b->spin_limit;
    if (limit)
        spin_mark(w);
    for (u64 i = 0; i < limit; i++) {
        if (b->gen != gen) {
            spin_clear(w);
            return;
        }
        w->spins++;
        if (b->pause)
            cpu_relax();
    }
    if (limit)
        spin_clear(w);
    while (b->gen == gen) {
        __atomic_exchange_n(&b->waiters, 1, __ATOMIC_SEQ_CST);
        if (b->gen != gen)
            break;
        w->blocks += futex_wait(&b->gen, gen);
    }
}

static void queue_notify(struct worker *w, struct queue *q)
{
    __atomic_add_fetch(&q->seq, 1, __ATOMIC_SEQ_CST);
    if (__atomic_exchange_n(&q->waiters, 0, __ATOMIC_SEQ_CST))
        w->wakeups += (u64)futex_wake(&q->seq, 0xffffffffu);
}

/* push (dir = +1) blocks while full; pop (dir = -1) blocks while empty. */
static void queue_op(struct worker *w, struct queue *q, int push)
{
    for (;;) {
        u32 c = q->count;
        int ok = push ? c < q->cap : c > 0;
        if (ok) {
            if (__atomic_compare_exchange_n(&q->count, &c, push ? c + 1 : c - 1, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
                queue_notify(w, q);
                return;
            }
            continue;
        }
        u32 s = q->seq;
        __atomic_exchange_n(&q->waiters, 1, __ATOMIC_SEQ_CST);
        if (q->count != c)
            continue;
        w->blocks += futex_wait(&q->seq, s);
    }
}

static void atomic_op(struct worker *w, struct counter *c, u8 rmw)
{
    switch (rmw) {
    case 0:
        __atomic_fetch_add(&c->v, 1, __ATOMIC_SEQ_CST);
        break;
    case 1: {
        u64 old = c->v;
        while (!__atomic_compare_exchange_n(&c->v, &old, old + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            ;
        break;
    }
    default:
        __atomic_exchange_n(&c->v, (u64)w->gid + 1, __ATOMIC_SEQ_CST);
        break;
    }
}

static void touch(struct worker *w, const u8 *a)
{
    u32 idx = ld32(a);
    u8 write = a[4];
    u64 bytes = ld64(a + 5), stride = ld64(a + 13);
    volatile u8 *buf = idx == 0xffffffffu ? w->private_buf : buffers[idx];
    if (!stride)
        stride = 1;
    if (write) {
        for (u64 i = 0; i < bytes; i += stride)
            buf[i] = buf[i] + 1;
    } else {
        u8 acc = 0;
        for (u64 i = 0; i < bytes; i += stride)
            acc += buf[i];
        w->state += acc;
    }
    w->ops_count[2]++;
    w->ops_count[3] += bytes;
}

static void shootdown(struct worker *w, u32 pages)
{
    /* One shootdown at a time, as a kernel serializes its flush requests; the
     * initiator waits for the acknowledgements at CPL3, where spinning is free. */
    while (__atomic_exchange_n(&g_sd_lock, 1, __ATOMIC_ACQUIRE))
        while (g_sd_lock)
            cpu_relax();
    g_sd_acks = 0;
    u64 n = (u64)sys1(SYS_SHOOTDOWN, pages);
    /* Waiting for the acknowledgements is a spin (Wells et al. §2.2.2's
     * cross-call wait): the host's ground truth says so. */
    if (g_sd_acks < n) {
        spin_mark(w);
        while (g_sd_acks < n)
            cpu_relax();
        spin_clear(w);
    }
    __atomic_store_n(&g_sd_lock, 0, __ATOMIC_RELEASE);
    w->ops_count[12]++;
}

/* io latency samples (TSC cycles: completion -> handler entry, completion ->
 * the thread running again), the last IO_SAMPLES of them. */
u64 io_samples[IO_SAMPLES][2] __attribute__((section(".noinit")));
volatile u64 io_nsamples;

static void io_op(struct worker *w, u32 device, u64 service_ns)
{
    u64 done, irq;
    __asm__ volatile(SYSCALL_INSN
                     : "=a"(done), "=d"(irq)
                     : "a"((u64)SYS_IO), "D"((u64)device), "S"(service_ns)
                     : "memory", "r8", "r9", "r10", "r11");
    u64 now = rdtsc();
    if (done && irq >= done && now >= done) {
        u64 k = __atomic_fetch_add(&io_nsamples, 1, __ATOMIC_RELAXED) % IO_SAMPLES;
        io_samples[k][0] = irq - done;
        io_samples[k][1] = now - done;
    }
    w->ops_count[13]++;
}

static void run_ops(struct worker *w, const u8 *b, u64 len)
{
    u64 i = 0;
    while (i < len) {
        u8 op = b[i++];
        const u8 *a = b + i;
        switch (op) {
        case 0x01: {
            u64 it = ld64(a);
            w->state = compute(it, w->state);
            w->ops_count[0]++;
            w->ops_count[1] += it;
            i += 8;
            break;
        }
        case 0x02:
            touch(w, a);
            i += 21;
            break;
        case 0x03:
            spin_acquire(w, &spins[ld32(a)]);
            w->ops_count[4]++;
            i += 4;
            break;
        case 0x04:
            spin_release(&spins[ld32(a)]);
            i += 4;
            break;
        case 0x05:
            mutex_lock(w, &mutexes[ld32(a)]);
            w->ops_count[5]++;
            i += 4;
            break;
        case 0x06:
            mutex_unlock(w, &mutexes[ld32(a)]);
            i += 4;
            break;
        case 0x07:
            barrier_wait(w, &barriers[ld32(a)]);
            w->ops_count[6]++;
            i += 4;
            break;
        case 0x08:
            queue_op(w, &queues[ld32(a)], 1);
            w->ops_count[7]++;
            i += 4;
            break;
        case 0x09:
            queue_op(w, &queues[ld32(a)], 0);
            w->ops_count[8]++;
            i += 4;
            break;
        case 0x0a:
            atomic_op(w, &counters[ld32(a)], a[4]);
            w->ops_count[9]++;
            i += 5;
            break;
        case 0x0b: {
            u64 ns = ld64(a);
            u64 cycles = ns / 1000 * (tsc_hz / 1000000) + (ns % 1000) * (tsc_hz / 1000000) / 1000;
            sys1(SYS_SLEEP, rdtsc() + cycles);
            w->ops_count[10]++;
            i += 8;
            break;
        }
        case 0x0c: {
            u64 k = ld64(a);
            for (u64 j = 0; j < k; j++)
                sys0(SYS_YIELD);
            w->ops_count[11] += k;
            i += 8;
            break;
        }
        case 0x0d:
            shootdown(w, ld32(a));
            i += 4;
            break;
        case 0x0e: {
            u64 count = ld64(a);
            u32 bl = ld32(a + 8);
            for (u64 j = 0; j < count; j++)
                run_ops(w, a + 12, bl);
            i += 12 + bl;
            break;
        }
        case 0x0f:
            io_op(w, ld32(a), ld64(a + 4));
            i += 12;
            break;
        case 0x10: {
            struct pool *p = &pools[ld32(a)];
            u32 bl = ld32(a + 4);
            /* One lock xadd per claim: the unit is ours if there was one. */
            while (__atomic_fetch_sub(&p->left, 1, __ATOMIC_ACQ_REL) > 0)
                run_ops(w, a + 8, bl);
            i += 8 + bl;
            break;
        }
        default:
            return; /* unreachable: check_ops accepted the list */
        }
    }
}

void __attribute__((noreturn)) worker_main(struct worker *w)
{
    start_gate(w);
    w->start = rdtsc();
    run_ops(w, w->ops, w->ops_len);
    w->end = rdtsc();
    sys3(SYS_EXIT_THREAD, (u64)&g_done, total_threads, 0);
    for (;;)
        ;
}
