/* smplab guest kernel: the system-call gate (`int3` through a DPL3 gate, or
 * `int $0x81` arriving as #UD on PVM), its dispatcher, and the calls whose
 * kernel side is a few lines: thread exit and spawn, yield, TLB shootdown,
 * the idle thread's wake and halt, console, result, poweroff, PM timer and
 * the VMM's start gate. The calls that block (futex, sleep, io) live with
 * what they wait on. Also the catch-all trap handler for exceptions. */
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

/* SYS_EXIT_THREAD: account the thread's CPU time before anyone can see it
 * finished: the kernel, not the thread, bumps the done counter (rdi) and
 * wakes the waiter when it reaches rsi. */
static void sys_exit_thread(struct cpu *c, struct thread *t, struct frame *f)
{
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
}

/* SYS_SHOOTDOWN: flush rdi pages here and IPI every other CPU to do the same
 * (isr241 acknowledges in g_sd_acks, which the caller waits for at CPL3);
 * rax = IPIs sent. */
static void sys_shootdown(struct cpu *c, struct frame *f)
{
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
}

/* SYS_IDLE_HALT (haltpoll's CPL3 idle thread, its poll window over): halt
 * until an interrupt unless work or a due sleeper appeared, then run it. */
static void sys_idle_halt(struct cpu *c)
{
    __atomic_exchange_n(&c->state, CPU_HALTED, __ATOMIC_SEQ_CST);
    if (!c->rq_len && !g_queued && g_next_wake > rdtsc()) {
        arm_oneshot(c, own_deadline(c));
        c->halts++;
        __asm__ volatile("sti; hlt; cli" ::: "memory");
    }
    c->state = CPU_POLLING;
    idle_run_work(c);
}

/* SYS_RESULT: the result record (rdi, rsi bytes) to port 0x520, or framed on
 * the UART when the VMM has no result port (QEMU). */
static void sys_result(struct frame *f)
{
    if (g_params.result_serial) {
        static const char b[] = "\nSMPLAB-RESULT-BEGIN\n", e[] = "SMPLAB-RESULT-END\n";
        kputs_n(b, sizeof b - 1);
        kputs_n((const char *)f->rdi, f->rsi);
        kputs_n(e, sizeof e - 1);
    } else {
        outsb(PORT_RESULT, (const void *)f->rdi, f->rsi);
    }
    f->rax = 0;
}

/* SYS_GATE: READY, then read until the VMM says GO: it answers WAIT while its
 * host-side start gate (other VMs) is closed. All-ones: no device. */
static void sys_gate(struct frame *f)
{
    outl(PORT_WINDOW, WINDOW_READY);
    u32 v;
    while ((v = inl(PORT_WINDOW)) == WINDOW_WAIT)
        ;
    f->rax = v;
}

static void syscall(struct cpu *c, struct frame *f)
{
    struct thread *t = c->cur;
    c->syscalls++;
    switch (f->rax) {
    case SYS_EXIT_THREAD:
        sys_exit_thread(c, t, f);
        return; /* not reached: nothing switches back to a dead thread */
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
    case SYS_SHOOTDOWN:
        sys_shootdown(c, f);
        return;
    case SYS_IDLE_WAKE:
        idle_run_work(c);
        return;
    case SYS_IDLE_HALT:
        sys_idle_halt(c);
        return;
    case SYS_SLEEP:
        sys_sleep(c, f);
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
        sys_result(f);
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
    case SYS_IO:
        sys_io(c, f);
        return;
    case SYS_GATE:
        sys_gate(f);
        return;
    default:
        f->rax = (u64)-1;
        return;
    }
}

/* ---------- traps ---------- */

/* Each hot vector has its own entry stub and handler (entry.S), so the
 * emulator runs no dispatch code on the way in: trap_syscall here, trap_wake
 * (sched.c), trap_io (io.c), trap_timer (timer.c). */

/* Vector 3, DPL3: the system-call instruction `int3`. KVM PVM cannot deliver a
 * software interrupt `int N` from CPL3 (its emulator handles `int` only in
 * real mode and injects #UD), while the #BP exception path works. */
void trap_syscall(struct frame *f)
{
    if ((f->cs & 3) != 3)
        fault(f); /* a breakpoint in the kernel: a bug */
    syscall(this_cpu(), f);
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
