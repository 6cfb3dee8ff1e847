/* smplab guest kernel: the ways a run ends from CPL0, and the little console
 * formatting they need. `poweroff` writes the exit status the VMM reports;
 * `fault` reports a CPU exception, `watchdog_fire` a workload that did not
 * finish in time, with the scheduler's state so a hang can be diagnosed from
 * the console. All of it is cold: none runs while a workload runs well. */
static void __attribute__((noreturn)) poweroff(u32 status)
{
    outb(PORT_EXIT, (u8)status);
    for (;;)
        __asm__ volatile("cli; hlt");
}

static const char *const exc_names[32] = {
    "#DE divide error", "#DB debug", "NMI", "#BP breakpoint", "#OF overflow", "#BR bound range",
    "#UD invalid opcode", "#NM device not available", "#DF double fault", "coprocessor overrun",
    "#TS invalid TSS", "#NP segment not present", "#SS stack fault", "#GP general protection",
    "#PF page fault", "reserved", "#MF x87 error", "#AC alignment check", "#MC machine check",
    "#XM SIMD error", "#VE virtualization", "#CP control protection", "reserved", "reserved",
    "reserved", "reserved", "reserved", "reserved", "#HV hypervisor injection", "#VC VMM communication",
    "#SX security", "reserved"};

/* A guest exception: report it on the console (always, even with console=off)
 * and end the run with status 2. */
static void __attribute__((noreturn, noinline, cold)) fault(struct frame *f)
{
    char buf[256], *p = buf;
    u64 cr2;
    __asm__ volatile("mov %%cr2, %0" : "=r"(cr2));
    p = kfmt_str(p, "\nsmplab-guest: EXCEPTION vector=");
    p = kfmt_dec(p, f->vector);
    p = kfmt_str(p, " (");
    p = kfmt_str(p, exc_names[f->vector & 31]);
    p = kfmt_str(p, ") error=");
    p = kfmt_hex(p, f->err);
    p = kfmt_str(p, " rip=");
    p = kfmt_hex(p, f->rip);
    p = kfmt_str(p, " cpu=");
    p = kfmt_dec(p, this_cpu()->id);
    p = kfmt_str(p, " cpl=");
    p = kfmt_dec(p, f->cs & 3);
    p = kfmt_str(p, " rsp=");
    p = kfmt_hex(p, f->rsp);
    p = kfmt_str(p, " cr2=");
    p = kfmt_hex(p, cr2);
    p = kfmt_str(p, "\n");
    kputs_n(buf, p - buf);
    poweroff(2);
}

/* The BSP's watchdog deadline passed (trap_timer): end the run with status 3. */
static void __attribute__((noreturn)) watchdog_fire(void)
{
    char buf[160], *p = buf;
    p = kfmt_str(p, "\nsmplab-guest: WATCHDOG: the workload did not finish within ");
    p = kfmt_dec(p, g_params.watchdog_tsc / (g_params.tsc_hz / 1000 ? g_params.tsc_hz / 1000 : 1));
    p = kfmt_str(p, " ms; scheduler state:\n");
    kputs_n(buf, p - buf);
    /* Where everything is, so a hang can be diagnosed from the console. */
    for (u32 i = 0; i < g_ncpus; i++) {
        struct cpu *c = &cpus[i];
        p = buf;
        p = kfmt_str(p, "  cpu ");
        p = kfmt_dec(p, i);
        p = kfmt_str(p, " state=");
        p = kfmt_dec(p, c->state);
        p = kfmt_str(p, " cur=");
        p = kfmt_dec(p, c->cur ? (u64)c->cur->id : 9999);
        p = kfmt_str(p, " rq_len=");
        p = kfmt_dec(p, c->rq_len);
        p = kfmt_str(p, "\n");
        kputs_n(buf, p - buf);
    }
    for (u32 i = 0; i < g_nthreads && i < MAX_THREADS; i++) {
        struct thread *t = &threads[i];
        p = buf;
        p = kfmt_str(p, "  thread ");
        p = kfmt_dec(p, i);
        p = kfmt_str(p, " state=");
        p = kfmt_dec(p, (u64)t->state);
        p = kfmt_str(p, " cpu=");
        p = kfmt_dec(p, (u64)t->cpu);
        p = kfmt_str(p, " on_cpu=");
        p = kfmt_dec(p, t->on_cpu);
        p = kfmt_str(p, " futex=");
        p = kfmt_hex(p, t->state == T_BLOCKED ? t->futex_addr : 0);
        p = kfmt_str(p, "\n");
        kputs_n(buf, p - buf);
    }
    poweroff(3);
}
