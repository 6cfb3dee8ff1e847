/* smplab guest kernel: boot. The BSP's entry from entry.S (kmain), each CPU's
 * descriptor tables (GDT, TSS, the shared IDT), %gs base and LAPIC set-up,
 * and SYS_SMP_START: the LAPIC timer's calibration, the idle threads, and the
 * APs started one at a time with INIT + SIPI. Everything else the guest does
 * at start-up (command line, TSC rate, program) runs at CPL3 in init.c. */
static volatile u32 ap_index, ap_ready;
static struct thread idle_threads[MAX_CPUS]; /* CPL3 polling idle threads */
static u8 idle_stacks[MAX_CPUS][4096] __attribute__((aligned(4096))) NOINIT;
static u8 init_stack[65536] __attribute__((aligned(4096))) NOINIT;
static u8 idle_kstacks[MAX_CPUS][KSTACK_SIZE] __attribute__((aligned(64))) NOINIT;

/* ---------- descriptor tables ---------- */

struct idt_entry {
    u16 off0, sel;
    u8 ist, type;
    u16 off1;
    u32 off2, zero;
} __attribute__((packed));

static struct idt_entry idt[256] __attribute__((aligned(16)));
static u64 gdt[MAX_CPUS][8] __attribute__((aligned(16)));

static void set_gate(u32 vec, u64 handler, u8 type)
{
    struct idt_entry *e = &idt[vec];
    e->off0 = handler & 0xffff;
    e->sel = SEL_KCODE;
    e->ist = 0;
    e->type = type;
    e->off1 = (handler >> 16) & 0xffff;
    e->off2 = handler >> 32;
    e->zero = 0;
}

/* Host-indicator words of vCPUs beyond SENSOR_CPUS: counted, never read. */
static u64 sensor_unseen[MAX_CPUS - SENSOR_CPUS][SENSOR_WORDS];

static void cpu_setup(u32 i)
{
    struct cpu *c = &cpus[i];
    c->self = c;
    c->id = i;
    c->sensor = i < SENSOR_CPUS ? (volatile u64 *)SENSOR_BASE + i : sensor_unseen[i - SENSOR_CPUS];
    c->kstack_top = (u64)kstacks + (u64)(i + 1) * KSTACK_SIZE;
    u64 *g = gdt[i];
    g[0] = 0;
    g[1] = 0x00af9a000000ffffUL; /* kernel code 64 */
    g[2] = 0x00cf92000000ffffUL; /* kernel data */
    g[3] = 0x00cff2000000ffffUL; /* user data, DPL3 */
    g[4] = 0x00affa000000ffffUL; /* user code 64, DPL3 */
    u64 base = (u64)&tss[i], limit = sizeof(struct tss) - 1;
    tss[i].rsp0 = c->kstack_top;
    tss[i].iomap = sizeof(struct tss); /* no I/O bitmap: CPL3 port I/O faults */
    g[5] = (limit & 0xffff) | ((base & 0xffffff) << 16) | (0x89UL << 40) | (((limit >> 16) & 0xf) << 48) |
           (((base >> 24) & 0xff) << 56);
    g[6] = base >> 32;
    struct {
        u16 limit;
        u64 base;
    } __attribute__((packed)) gd = {sizeof(gdt[0]) - 1, (u64)g}, id = {sizeof(idt) - 1, (u64)idt};
    __asm__ volatile("lgdt %0" : : "m"(gd));
    __asm__ volatile("ltr %w0" : : "r"(SEL_TSS));
    __asm__ volatile("lidt %0" : : "m"(id));
    wrmsr(0xc0000101, (u64)c); /* GS base: this_cpu() */
    lapic_w(LAPIC_SVR, 0x100 | VEC_SPURIOUS);
    lapic_w(LAPIC_TPR, 0);
    lapic_w(LAPIC_LVT_TIMER, 0x10000 | VEC_TIMER); /* masked until configured */
    /* Firmware (SeaBIOS under QEMU) leaves the 8259 PIC routed through LINT0
     * at vector 8 with the PIT running: mask LINT0/LINT1 so a legacy timer
     * interrupt cannot masquerade as a double fault. */
    lapic_w(LAPIC_LVT_LINT0, 0x10000);
    lapic_w(LAPIC_LVT_LINT1, 0x10000);
}

/* ---------- SMP start ---------- */

static void init_idle_thread(u32 i)
{
    make_thread(&idle_threads[i], MAX_THREADS + i, idle_kstacks[i], (u64)user_idle, (u64)&cpus[i],
                (u64)idle_stacks[i] + sizeof idle_stacks[i] - 8, 1);
    cpus[i].idle = &idle_threads[i];
}

void __attribute__((noreturn)) ap_main(void)
{
    u32 i = ap_index;
    cpu_setup(i);
    struct cpu *c = &cpus[i];
    timer_setup(c);
    __atomic_store_n(&ap_ready, 1, __ATOMIC_SEQ_CST);
    enter_kidle(c);
}

static u64 sys_smp_start(struct cpu *c, const struct boot_params *p)
{
    g_params = *p;
    if (g_params.cpus < 1)
        g_params.cpus = 1;
    if (g_params.cpus > MAX_CPUS)
        g_params.cpus = MAX_CPUS;
    calibrate_lapic();
    if (g_params.watchdog_tsc)
        watchdog_deadline = rdtsc() + g_params.watchdog_tsc;
    for (u32 i = 0; i < g_params.cpus; i++)
        init_idle_thread(i);
    memcpy((void *)0x8000, tramp_start, tramp_end - tramp_start);
    u32 online = 1;
    for (u32 i = 1; i < g_params.cpus; i++) {
        ap_index = i;
        ap_ready = 0;
        ap_stack_top = (u64)kstacks + (u64)(i + 1) * KSTACK_SIZE - 64;
        g_ncpus = i + 1; /* so wakers see the AP once it is up */
        lapic_w(LAPIC_ICR_HI, i << 24);
        lapic_w(LAPIC_ICR_LO, 0x4500); /* INIT */
        /* An AP comes up in ~0.23 ms on PVM, but on a loaded host its vCPU
         * thread may not run for a while: wait up to 3 x 1 s, re-sending SIPI
         * (ignored by an AP that already started). */
        for (int tries = 0; tries < 3 && !ap_ready; tries++) {
            lapic_w(LAPIC_ICR_HI, i << 24);
            lapic_w(LAPIC_ICR_LO, 0x4600 | (0x8000 >> 12)); /* SIPI */
            u64 t0 = rdtsc();
            u64 wait = g_params.tsc_hz ? g_params.tsc_hz : 3000000000UL;
            while (!ap_ready && rdtsc() - t0 < wait)
                cpu_relax();
        }
        if (!ap_ready) {
            g_ncpus = i;
            char buf[96], *q = buf;
            q = kfmt_str(q, "smplab-guest: vCPU ");
            q = kfmt_dec(q, i);
            q = kfmt_str(q, " did not start (INIT/SIPI); continuing with fewer vCPUs\n");
            kputs_n(buf, q - buf);
            break;
        }
        online++;
    }
    g_ncpus = online;
    timer_setup(c);
    if (g_params.io_ntargets)
        io_irq_setup();
    return online;
}

/* BSP entry from entry.S, still at CPL0 on kernel stack 0. */
void __attribute__((noreturn)) kmain(u32 start_info)
{
    g_boot_tsc = rdtsc();
    for (const u64 *e = isr_table; e[0] != 0xffff; e += 2)
        set_gate((u32)e[0], e[1], e[0] == VEC_SYSCALL || e[0] == 3 ? 0xee : 0x8e);
    /* Mask the legacy PIC entirely; this kernel uses only the LAPIC. */
    outb(0x21, 0xff);
    outb(0xa1, 0xff);
    cpu_setup(0);
    struct cpu *c = &cpus[0];
    g_ncpus = 1;
    /* The init thread: CPL3, parses the command line and the program. */
    make_thread(&threads[0], 0, thread_kstacks[0], (u64)user_init, start_info,
                (u64)init_stack + sizeof init_stack - 8, 0);
    g_nthreads = 1;
    rq_push(c, &threads[0]);
    enter_kidle(c);
}
