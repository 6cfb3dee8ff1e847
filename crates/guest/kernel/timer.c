/* smplab guest kernel: time. The LAPIC timer (calibrated against the TSC,
 * then either a periodic tick at timer_hz or, tickless, a one-shot armed for
 * the earliest deadline), the sleeping threads and their wake-up, the BSP's
 * watchdog, and the timer interrupt that drives them and preempts. */
static u64 lapic_q32; /* LAPIC timer ticks (divide 16) per TSC cycle, 32.32 fixed point */
static volatile u32 sleep_lock;
static struct thread *sleepers;

/* ---------- the LAPIC timer ---------- */

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

/* The earliest TSC deadline this CPU's one-shot must fire for: the next
 * sleeper, and on the BSP the watchdog. */
static u64 own_deadline(struct cpu *c)
{
    u64 d = g_next_wake;
    if (c->id == 0 && watchdog_deadline)
        d = min_u64(d, watchdog_deadline);
    return d;
}

/* One reading of the LAPIC timer's current count, paired with the TSC at
 * the middle of the read: the read is an exit, which takes ~10 us on PVM but
 * up to milliseconds where exits are slow (hardware KVM on an emulated CPU,
 * a busy host, the user-space LAPIC). Of three reads, the narrowest. */
static u32 lapic_cur_sample(u64 *tsc_mid, u64 *width)
{
    u32 best_cur = 0;
    *width = ~0UL;
    *tsc_mid = 0;
    for (int i = 0; i < 3; i++) {
        u64 a = rdtsc();
        u32 cur = lapic_r(LAPIC_TIMER_CUR);
        u64 b = rdtsc();
        if (b - a < *width) {
            *width = b - a;
            *tsc_mid = a + (b - a) / 2;
            best_cur = cur;
        }
    }
    return best_cur;
}

/* The LAPIC timer's rate against the TSC (at SYS_SMP_START), between two
 * paired readings at least 5 ms apart and at least 100 read widths apart
 * (at most 50 ms), so the exits' own time stays within ~1% of the window.
 * Timing the window from the TIMER_INIT write instead counted both exits'
 * full time as LAPIC ticks: 1% too fast on PVM, up to 2.6x under TCG, which
 * made one-shot timers (and the watchdog) fire that much late. */
static void calibrate_lapic(void)
{
    if (!g_params.tsc_hz)
        return;
    lapic_w(LAPIC_TIMER_DIV, 0x3);
    lapic_w(LAPIC_LVT_TIMER, 0x10000 | VEC_TIMER);
    lapic_w(LAPIC_TIMER_INIT, 0xffffffff);
    u64 t0 = 0, w0 = 0, t1 = 0, w1 = 0;
    u32 c0 = lapic_cur_sample(&t0, &w0);
    u64 window = g_params.tsc_hz / 200;
    if (window < 100 * w0)
        window = 100 * w0;
    if (window > g_params.tsc_hz / 20)
        window = g_params.tsc_hz / 20;
    while (rdtsc() - t0 < window)
        ;
    u32 c1 = lapic_cur_sample(&t1, &w1);
    lapic_w(LAPIC_TIMER_INIT, 0);
    u64 ticks = c0 > c1 ? (u64)(c0 - c1) : 1;
    g_lapic_hz = ticks * 16 * g_params.tsc_hz / (t1 > t0 ? t1 - t0 : 1);
    lapic_q32 = ((g_lapic_hz / 16) << 32) / g_params.tsc_hz;
}

/* Each CPU's timer once it is up: the periodic tick, or tickless. */
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

/* ---------- sleep ---------- */

/* SYS_SLEEP: the current thread sleeps until the TSC reaches rdi. */
static void sys_sleep(struct cpu *c, struct frame *f)
{
    struct thread *t = c->cur;
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
}

static void recompute_next_wake(void)
{
    u64 m = ~0UL;
    for (struct thread *t = sleepers; t; t = t->next)
        m = min_u64(m, t->wake_tsc);
    g_next_wake = m;
}

/* Make every sleeper whose deadline has passed runnable. */
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

/* ---------- the timer interrupt ---------- */

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
