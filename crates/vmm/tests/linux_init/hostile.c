/* The hostile init of crates/vmm/tests/linux_hostile.rs: PID 1 of a Linux
 * guest on smplab-vmm that, as root with iopl(3) and /dev/mem, issues random
 * port and MMIO reads and writes on every CPU (one thread pinned to each) for
 * a while (smplab.hostile_s=SECONDS on the command line, default 10), then
 * reports how many it made and ends the VM with status 0 on the debug-exit
 * port.
 *
 * Targets: every port 0..0xffff (widths 1, 2, 4); MMIO through /dev/mem
 * (the kernel needs iomem=relaxed to map the claimed LAPIC and IOAPIC pages)
 * in the LAPIC page, the IOAPIC page and unclaimed holes below and above
 * 4 GiB (widths 1, 2, 4, 8).
 *
 * What it never does (AVOID below, and no other exception):
 *  - accesses that stop the VM: writes to the debug-exit port 0x501-0x502,
 *    the ACPI sleep control register 0x600 (S5 powers off), the reset
 *    control port 0xcf9 and the i8042 command port 0x64 (0xfe resets);
 *  - writes that take CPUs or interrupts away from the guest kernel that
 *    has to come back and report: the 8259s' command/data ports 0x20, 0x21,
 *    0xa0, 0xa1 (a random ICW2 puts device IRQs on exception vectors, and
 *    KVM's BSP LINT0 takes ExtINT), the LAPIC's ID, TPR, LDR, DFR, SVR, ICR
 *    low word (INIT, SIPI, NMI, IPI storms), LVTs and timer registers, and
 *    the IOAPIC's data window (a random redirection entry can deliver INIT
 *    or NMI). Reads of all of them, and writes to the LAPIC's read-only and
 *    reserved registers, EOI, ESR and ICR high word, the IOAPIC's select and
 *    EOI registers, stay in. The interrupt-controller models' own fuzzers
 *    (crates/vmm/src/irqchip/fuzz.rs) cover every register with random
 *    writes.
 *
 * The report goes straight to the UART's ports (re-initialized first: the
 * storm may have set its divisor latch or loopback), not through the
 * kernel's tty, so a kernel whose interrupts the storm disturbed still gets
 * it out:
 *   @@SMPLAB-HOSTILE-START cpus=N online=LIST
 *   @@SMPLAB-HOSTILE {"cpus":N,"seconds":S,"port_reads":..,"port_writes":..,
 *                     "mmio_reads":..,"mmio_writes":..,"mmio_regions":R}
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define DEBUG_EXIT_PORT 0x501
#define UART 0x3f8
#define MAX_CPUS 64
#define PAGE 4096UL

struct region {
    uint64_t phys;
    unsigned long len;
    int kind; /* 0 hole, 1 LAPIC, 2 IOAPIC */
    volatile uint8_t *map;
};

static struct region regions[] = {
    {0xfee00000, PAGE, 1, 0},         /* LAPIC */
    {0xfec00000, PAGE, 2, 0},         /* IOAPIC */
    {0xfec01000, 4 * PAGE, 0, 0},     /* after the IOAPIC */
    {0xfed00000, 4 * PAGE, 0, 0},     /* the block device's page when unset */
    {0xfee01000, 4 * PAGE, 0, 0},     /* after the LAPIC */
    {0xc0000000, 16 * PAGE, 0, 0},    /* below 4 GiB, above RAM */
    {0xe0000000, 16 * PAGE, 0, 0},    /* where PCI MMCONFIG would be */
    {0x100000000, 16 * PAGE, 0, 0},   /* 4 GiB */
    {0x4000000000, 16 * PAGE, 0, 0},  /* 256 GiB */
};
#define REGIONS (sizeof regions / sizeof regions[0])
static int mapped[REGIONS];
static int nmapped;

struct counts {
    uint64_t port_reads, port_writes, mmio_reads, mmio_writes;
} __attribute__((aligned(64)));

static struct counts counts[MAX_CPUS];
static struct timespec deadline;

static int avoid_port_write(unsigned port, unsigned width)
{
    unsigned last = port + width - 1;
#define HITS(lo, hi) (port <= (hi) && last >= (lo))
    return HITS(0x501, 0x502) || HITS(0x600, 0x600) || HITS(0xcf9, 0xcf9) ||
           HITS(0x64, 0x64) || HITS(0x20, 0x21) || HITS(0xa0, 0xa1);
#undef HITS
}

static int avoid_mmio_write(int kind, unsigned long offset)
{
    unsigned long reg = offset & 0xff0;
    if (kind == 1) {
        switch (reg) {
        case 0x20: case 0x80: case 0xd0: case 0xe0: case 0xf0: case 0x300:
        case 0x320: case 0x330: case 0x340: case 0x350: case 0x360: case 0x370:
        case 0x380: case 0x3e0:
            return 1;
        }
        return 0;
    }
    if (kind == 2)
        return reg == 0x10;
    return 0;
}

static uint64_t next(uint64_t *s)
{
    /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static int before_deadline(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec < deadline.tv_sec ||
           (now.tv_sec == deadline.tv_sec && now.tv_nsec < deadline.tv_nsec);
}

static void port_access(uint64_t r, struct counts *c)
{
    static const unsigned widths[] = {1, 2, 4};
    unsigned width = widths[(r >> 20) % 3];
    unsigned port = (unsigned)(r & 0xffff);
    uint32_t value = (uint32_t)(r >> 32);
    if (port + width > 0x10000)
        port = 0x10000 - width;
    if ((r >> 16) & 1) {
        if (avoid_port_write(port, width))
            return;
        if (width == 1)
            outb((uint8_t)value, port);
        else if (width == 2)
            outw((uint16_t)value, port);
        else
            outl(value, port);
        c->port_writes++;
    } else {
        if (width == 1)
            (void)inb(port);
        else if (width == 2)
            (void)inw(port);
        else
            (void)inl(port);
        c->port_reads++;
    }
}

static void mmio_access(uint64_t r, uint64_t value, struct counts *c)
{
    struct region *g = &regions[mapped[(r >> 8) % nmapped]];
    static const unsigned widths[] = {1, 2, 4, 8};
    unsigned width = widths[(r >> 4) & 3];
    unsigned long offset = ((r >> 24) % g->len) & ~(unsigned long)(width - 1);
    volatile uint8_t *p = g->map + offset;
    if ((r >> 6) & 1) {
        if (avoid_mmio_write(g->kind, offset))
            return;
        switch (width) {
        case 1: *(volatile uint8_t *)p = (uint8_t)value; break;
        case 2: *(volatile uint16_t *)p = (uint16_t)value; break;
        case 4: *(volatile uint32_t *)p = (uint32_t)value; break;
        default: *(volatile uint64_t *)p = value; break;
        }
        c->mmio_writes++;
    } else {
        switch (width) {
        case 1: (void)*(volatile uint8_t *)p; break;
        case 2: (void)*(volatile uint16_t *)p; break;
        case 4: (void)*(volatile uint32_t *)p; break;
        default: (void)*(volatile uint64_t *)p; break;
        }
        c->mmio_reads++;
    }
}

static void *storm(void *arg)
{
    long cpu = (long)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    /* iopl is per thread (it lives in the thread's flags). */
    if (iopl(3) != 0)
        return NULL;
    uint64_t s = 0x9e3779b97f4a7c15ULL * (uint64_t)(cpu + 1);
    struct counts *c = &counts[cpu];
    while (before_deadline()) {
        for (int i = 0; i < 64; i++) {
            uint64_t r = next(&s);
            if (nmapped == 0 || (r & 1))
                port_access(r >> 1, c);
            else
                mmio_access(r >> 1, next(&s), c);
        }
    }
    return NULL;
}

static void uart_putc(char ch)
{
    for (int spin = 0; spin < 100000 && !(inb(UART + 5) & 0x20); spin++)
        ;
    outb((uint8_t)ch, UART);
}

static void uart_puts(const char *s)
{
    /* 8N1, divisor latch off, no loopback, interrupts off, FIFOs on. */
    outb(0x03, UART + 3);
    outb(0x00, UART + 1);
    outb(0x03, UART + 4);
    outb(0x07, UART + 2);
    for (; *s; s++) {
        if (*s == '\n')
            uart_putc('\r');
        uart_putc(*s);
    }
}

static long arg_seconds(void)
{
    char cmdline[4096] = "";
    FILE *f = fopen("/proc/cmdline", "r");
    if (f) {
        if (!fgets(cmdline, sizeof cmdline, f))
            cmdline[0] = 0;
        fclose(f);
    }
    const char *key = strstr(cmdline, "smplab.hostile_s=");
    long s = key ? strtol(key + strlen("smplab.hostile_s="), NULL, 10) : 10;
    return s > 0 ? s : 10;
}

/* The kernel symbol at or below `want` from /proc/kallsyms (0: _text). */
static void symbol_at(unsigned long long want, char *out, size_t len, unsigned long long *text)
{
    char line[512];
    unsigned long long at = 0;
    out[0] = 0;
    FILE *f = fopen("/proc/kallsyms", "r");
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long addr = strtoull(line, NULL, 16);
        if (text && strstr(line, " _text\n"))
            *text = addr;
        if (want && addr <= want && addr >= at) {
            at = addr;
            snprintf(out, len, "%s", line);
        }
    }
    if (f)
        fclose(f);
}

/* smplab.sym=LOW:DELTA on the command line (a diagnosis aid for a hung
 * guest's instruction pointer, seen as LOW + DELTA from a known one whose
 * low 21 bits, KASLR keeps, are LOW): for each 2 MiB step of the kernel
 * text, the symbols at _text + step + LOW and DELTA above it. */
static void print_symbols(void)
{
    char cmdline[4096] = "", a[512], b[512], line[1200];
    FILE *f = fopen("/proc/cmdline", "r");
    if (!f)
        return;
    if (!fgets(cmdline, sizeof cmdline, f))
        cmdline[0] = 0;
    fclose(f);
    const char *key = strstr(cmdline, "smplab.sym=");
    if (!key)
        return;
    char *rest;
    unsigned long long low = strtoull(key + strlen("smplab.sym="), &rest, 16);
    unsigned long long delta = *rest == ':' ? strtoull(rest + 1, NULL, 16) : 0, text = 0;
    symbol_at(0, a, sizeof a, &text);
    for (unsigned step = 0; step < 24; step++) {
        unsigned long long w = text + step * 0x200000ULL + low;
        symbol_at(w, a, sizeof a, NULL);
        symbol_at(w + delta, b, sizeof b, NULL);
        a[strcspn(a, "\n")] = 0;
        snprintf(line, sizeof line, "@@SMPLAB-HOSTILE-SYMBOL %llx %s | %llx %s", w, a, w + delta, b);
        uart_puts(line);
    }
}

int main(void)
{
    char line[512], online[128] = "";
    if (iopl(3) != 0)
        return 1;
    mount("proc", "/proc", "proc", 0, NULL);
    mount("sysfs", "/sys", "sysfs", 0, NULL);
    /* Keep the kernel's own console lines from interleaving with ours. */
    FILE *printk = fopen("/proc/sys/kernel/printk", "w");
    if (printk) {
        fputs("1", printk);
        fclose(printk);
    }
    FILE *f = fopen("/sys/devices/system/cpu/online", "r");
    if (f) {
        if (!fgets(online, sizeof online, f))
            online[0] = 0;
        fclose(f);
        online[strcspn(online, "\n")] = 0;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1)
        cpus = 1;
    if (cpus > MAX_CPUS)
        cpus = MAX_CPUS;
    long seconds = arg_seconds();
    snprintf(line, sizeof line, "@@SMPLAB-HOSTILE-START cpus=%ld online=%s\n", cpus, online);
    uart_puts(line);
    print_symbols();

    mkdir("/dev", 0755);
    mknod("/dev/mem", S_IFCHR | 0600, makedev(1, 1));
    int mem = open("/dev/mem", O_RDWR | O_SYNC);
    for (unsigned i = 0; mem >= 0 && i < REGIONS; i++) {
        void *p = mmap(NULL, regions[i].len, PROT_READ | PROT_WRITE, MAP_SHARED, mem,
                       (off_t)regions[i].phys);
        if (p == MAP_FAILED) {
            snprintf(line, sizeof line, "@@SMPLAB-HOSTILE-NOMAP %#llx\n",
                     (unsigned long long)regions[i].phys);
            uart_puts(line);
            continue;
        }
        regions[i].map = p;
        mapped[nmapped++] = (int)i;
    }

    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += seconds;
    pthread_t threads[MAX_CPUS];
    for (long cpu = 0; cpu < cpus; cpu++)
        pthread_create(&threads[cpu], NULL, storm, (void *)cpu);
    for (long cpu = 0; cpu < cpus; cpu++)
        pthread_join(threads[cpu], NULL);

    struct counts total = {0, 0, 0, 0};
    for (long cpu = 0; cpu < cpus; cpu++) {
        total.port_reads += counts[cpu].port_reads;
        total.port_writes += counts[cpu].port_writes;
        total.mmio_reads += counts[cpu].mmio_reads;
        total.mmio_writes += counts[cpu].mmio_writes;
    }
    snprintf(line, sizeof line,
             "@@SMPLAB-HOSTILE {\"cpus\":%ld,\"seconds\":%ld,\"port_reads\":%llu,"
             "\"port_writes\":%llu,\"mmio_reads\":%llu,\"mmio_writes\":%llu,"
             "\"mmio_regions\":%d}\n",
             cpus, seconds, (unsigned long long)total.port_reads,
             (unsigned long long)total.port_writes, (unsigned long long)total.mmio_reads,
             (unsigned long long)total.mmio_writes, nmapped);
    uart_puts(line);
    outl(0, DEBUG_EXIT_PORT);
    reboot(RB_POWER_OFF);
    for (;;)
        pause();
}
