/* smplab guest kernel: the scheduler. Per-CPU run queues with stealing, wake
 * placement and the rescheduling IPI, the context switch (a kernel-stack
 * switch), thread creation, and each CPU's in-kernel idle context, where an
 * idle CPU halts under `idle=hlt`. Everything here runs at CPL0, emulated on
 * PVM hosts: each path is as short as it can be (docs/guest.md). */
static struct thread kidle_threads[MAX_CPUS]; /* in-kernel idle contexts (boot stacks) */
/* The user thread each CPU ran last, id + 1: context_switches counts changes. */
static u32 last_thread_id[MAX_CPUS];

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

/* ---------- wakeups ---------- */

static void balance_kick(struct cpu *c);

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

/* The rescheduling IPI (VEC_WAKE) taken at CPL3 (isr240 handles CPL0 itself):
 * the CPL3 idle thread, interrupted while polling, is switched to the work. */
void trap_wake(struct frame *f)
{
    struct cpu *c = this_cpu();
    lapic_eoi();
    c->ipis_received++;
    if (c->cur->is_idle)
        idle_run_work(c);
}

/* ---------- threads and context switching ---------- */

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

/* ---------- idle ---------- */

/* An idle context (the CPL3 polling idle thread, through a system call or an
 * interrupt) was told there may be work: wake due sleepers and switch to the
 * next thread, if any. */
static void idle_run_work(struct cpu *c)
{
    if (g_next_wake <= rdtsc())
        wake_sleepers(c);
    struct thread *n = pick(c);
    if (n)
        context_switch(c, n); /* back here when this CPU is idle again */
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
