/* smplab guest, CPL3: the init thread. It reads the PVH start info and the
 * command line, gets the TSC rate, has the kernel start the other vCPUs,
 * carves the heap out of the memory map, decodes the program (program.c),
 * spawns the workers (exec.c), waits for them, and hands the result record
 * (result.c) to the kernel. It calls the other CPL3 files; none calls it
 * (what they share with it is in ulib.c). */
#include "user.h"

#define STACK_BYTES (64 * 1024)

extern u8 _end[];

static i64 sys_spawn(u64 entry, u64 arg, u64 stack, u64 cpu)
{
    i64 r;
    register u64 r10 __asm__("r10") = cpu;
    __asm__ volatile(SYSCALL_INSN : "=a"(r), "+r"(r10) : "a"((u64)SYS_SPAWN), "D"(entry), "S"(arg), "d"(stack) : "memory", "r8", "r9", "r11");
    return r;
}

/* ---------- command line ---------- */

struct hvm_start_info {
    u32 magic, version, flags, nr_modules;
    u64 modlist_paddr, cmdline_paddr, rsdp_paddr, memmap_paddr;
    u32 memmap_entries, reserved;
};
struct hvm_modlist_entry {
    u64 paddr, size, cmdline_paddr, reserved;
};
struct hvm_memmap_entry {
    u64 addr, size;
    u32 type, reserved;
};

static int word_eq(const char *a, usize n, const char *b)
{
    usize m = ustrlen(b);
    if (n != m)
        return 0;
    for (usize i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static int parse_u64(const char *s, usize n, u64 *out)
{
    u64 v = 0;
    if (n == 0 || n > 19)
        return 0;
    for (usize i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (u64)(s[i] - '0');
    }
    *out = v;
    return 1;
}

static u64 haltpoll_ns;
static u64 watchdog_ms;
static u64 tsc_hz_arg;
static int selftest;

static void parse_cmdline(const char *cl, struct boot_params *p)
{
    const char *s = cl;
    while (s && *s) {
        while (*s == ' ')
            s++;
        if (!*s)
            break;
        const char *w = s;
        while (*s && *s != ' ')
            s++;
        usize wn = s - w, kn = 0;
        while (kn < wn && w[kn] != '=')
            kn++;
        const char *v = w + kn + 1;
        usize vn = kn < wn ? wn - kn - 1 : 0;
        u64 x;
        if (word_eq(w, kn, "cpus")) {
            if (!parse_u64(v, vn, &x) || x < 1 || x > MAX_CPUS)
                die("bad cpus= (want 1..64)", 1);
            p->cpus = (u32)x;
        } else if (word_eq(w, kn, "idle")) {
            if (word_eq(v, vn, "hlt")) {
                p->idle = IDLE_HLT;
            } else if (word_eq(v, vn, "poll")) {
                p->idle = IDLE_POLL;
            } else if (vn > 9 && word_eq(v, 9, "haltpoll:") && parse_u64(v + 9, vn - 9, &x)) {
                p->idle = IDLE_HALTPOLL;
                haltpoll_ns = x;
            } else {
                die("bad idle= (want hlt, poll or haltpoll:NS)", 1);
            }
            if (vn >= sizeof idle_name)
                vn = sizeof idle_name - 1;
            for (usize i = 0; i < vn; i++)
                idle_name[i] = v[i];
            idle_name[vn] = 0;
        } else if (word_eq(w, kn, "timer_hz")) {
            if (!parse_u64(v, vn, &x) || x > 5000)
                die("bad timer_hz= (want 0..5000)", 1);
            p->timer_hz = (u32)x;
        } else if (word_eq(w, kn, "result")) {
            if (word_eq(v, vn, "port"))
                p->result_serial = 0;
            else if (word_eq(v, vn, "serial"))
                p->result_serial = 1;
            else
                die("bad result= (want port or serial)", 1);
        } else if (word_eq(w, kn, "console")) {
            if (word_eq(v, vn, "on"))
                p->console = 1;
            else if (word_eq(v, vn, "off"))
                p->console = 0;
            else
                die("bad console= (want on or off)", 1);
        } else if (word_eq(w, kn, "tsc_hz")) {
            if (!parse_u64(v, vn, &x) || x < 1000000)
                die("bad tsc_hz= (want the TSC frequency in Hz)", 1);
            tsc_hz_arg = x;
        } else if (word_eq(w, kn, "selftest")) {
            /* Test hooks for the host's robustness tests (run after boot). */
            if (word_eq(v, vn, "fault"))
                selftest = 1;
            else if (word_eq(v, vn, "hang"))
                selftest = 2;
            else
                die("bad selftest= (want fault or hang)", 1);
        } else if (word_eq(w, kn, "io_irq")) {
            /* vCPUs taking the block device's interrupt, in turn: "0", "0,1". */
            usize j = 0;
            p->io_ntargets = 0;
            while (j < vn) {
                usize k = j;
                while (k < vn && v[k] != ',')
                    k++;
                if (!parse_u64(v + j, k - j, &x) || x >= MAX_CPUS || p->io_ntargets >= IO_TARGETS)
                    die("bad io_irq= (want a comma-separated list of vCPUs)", 1);
                p->io_targets[p->io_ntargets++] = (u8)x;
                j = k + 1;
            }
            if (!p->io_ntargets)
                die("bad io_irq= (want a comma-separated list of vCPUs)", 1);
        } else if (word_eq(w, kn, "watchdog_ms")) {
            if (!parse_u64(v, vn, &x))
                die("bad watchdog_ms= (want milliseconds, 0 = off)", 1);
            watchdog_ms = x;
        } else {
            print("smplab-guest: warning: ignoring unknown command-line word: ");
            char tmp[64];
            usize n = wn < 63 ? wn : 63;
            for (usize i = 0; i < n; i++)
                tmp[i] = w[i];
            tmp[n] = 0;
            print(tmp);
            print("\n");
        }
    }
}

/* TSC frequency against the ACPI PM timer (3.579545 MHz), over ~20 ms. */
static u64 calibrate_tsc(void)
{
    u64 tsc0, tsc1;
    u32 pm0 = (u32)sys3(SYS_PMTIMER, 0, 0, 0), pm1, elapsed = 0;
    __asm__ volatile("" ::: "memory");
    /* rdx of the syscall carries the TSC; re-read with inline asm to get both. */
    {
        u64 a, d;
        __asm__ volatile(SYSCALL_INSN : "=a"(a), "=d"(d) : "a"((u64)SYS_PMTIMER) : "memory", "rdi", "rsi", "r8", "r9", "r10", "r11");
        pm0 = (u32)a;
        tsc0 = d;
    }
    for (;;) {
        u64 a, d;
        __asm__ volatile(SYSCALL_INSN : "=a"(a), "=d"(d) : "a"((u64)SYS_PMTIMER) : "memory", "rdi", "rsi", "r8", "r9", "r10", "r11");
        pm1 = (u32)a;
        tsc1 = d;
        elapsed = (pm1 - pm0) & 0xffffff;
        if (elapsed >= 71591) /* 20 ms */
            break;
        if (tsc1 - tsc0 > 20000000000UL)
            die("no ACPI PM timer at port 0x608: pass tsc_hz= on the command line", 1);
    }
    return (tsc1 - tsc0) * 3579545UL / elapsed;
}

/* ---------- heap ---------- */

static void setup_heap(const struct hvm_start_info *si, u64 mod_lo, u64 mod_hi)
{
    const u64 limit = 1UL << 30; /* identity map covers 1 GiB */
    u64 kend = ((u64)_end + 0xfff) & ~0xfffUL;
    u64 best_lo = 0, best_hi = 0;
    const struct hvm_memmap_entry *m = (const struct hvm_memmap_entry *)si->memmap_paddr;
    u32 n = si->version >= 1 && si->memmap_paddr ? si->memmap_entries : 0;
    for (u32 i = 0; i < n && i < 128; i++) {
        if (m[i].type != 1)
            continue;
        u64 lo = m[i].addr, hi = m[i].addr + m[i].size;
        if (lo < kend)
            lo = kend;
        if (hi > limit)
            hi = limit;
        if (lo >= hi)
            continue;
        /* Cut the module out: keep the larger side. */
        u64 cand[2][2] = {{lo, hi}, {0, 0}};
        if (mod_hi > lo && mod_lo < hi) {
            cand[0][1] = mod_lo > lo ? mod_lo : lo;
            cand[1][0] = mod_hi < hi ? mod_hi : hi;
            cand[1][1] = hi;
        }
        for (int k = 0; k < 2; k++)
            if (cand[k][1] > cand[k][0] && cand[k][1] - cand[k][0] > best_hi - best_lo) {
                best_lo = cand[k][0];
                best_hi = cand[k][1];
            }
    }
    if (best_hi == 0) {
        /* No memory map: assume 64 MiB after the kernel, which every config has. */
        best_lo = kend;
        best_hi = kend + (64UL << 20);
        if (mod_hi > best_lo && mod_lo < best_hi)
            best_lo = (mod_hi + 0xfff) & ~0xfffUL;
    }
    heap_init(best_lo, best_hi);
}

/* ---------- init ---------- */

void __attribute__((noreturn)) user_init(u64 start_info)
{
    const struct hvm_start_info *si = (const struct hvm_start_info *)start_info;
    if (!si || si->magic != 0x336ec578)
        die("no PVH start info (boot this kernel through its PVH entry point)", 1);
    struct boot_params p = {.cpus = 1, .idle = IDLE_HLT, .console = 1};
    /* At CPL3, where a store is free: the host's tuner reads the counters
     * only once it sees this word (docs/guest-abi.md). */
    *(volatile u64 *)SENSOR_MAGIC_ADDR = SENSOR_MAGIC;
    if (si->cmdline_paddr)
        parse_cmdline((const char *)si->cmdline_paddr, &p);
    g_params.console = p.console;
    g_params.result_serial = p.result_serial;
    tsc_hz = tsc_hz_arg ? tsc_hz_arg : calibrate_tsc();
    p.tsc_hz = tsc_hz;
    p.haltpoll_tsc = haltpoll_ns / 1000 * (tsc_hz / 1000000) + (haltpoll_ns % 1000) * (tsc_hz / 1000000) / 1000;
    p.watchdog_tsc = watchdog_ms * (tsc_hz / 1000);
    u32 online = (u32)sys1(SYS_SMP_START, (u64)&p);
    if (online != p.cpus)
        die("not every vCPU came up", 1);
    if (selftest == 1)
        __asm__ volatile("ud2"); /* a CPU exception at CPL3: status 2 */
    while (selftest == 2)
        cpu_relax(); /* never finishes: the watchdog must end the run */

    if (si->nr_modules < 1 || !si->modlist_paddr)
        die("no workload program: pass the encoded program as PVH module 0 (QEMU: -initrd)", 1);
    const struct hvm_modlist_entry *mod = (const struct hvm_modlist_entry *)si->modlist_paddr;
    if (mod->paddr + mod->size > (1UL << 30) || mod->size > (256UL << 20))
        die("the program module lies outside the guest's first GiB", 1);
    setup_heap(si, mod->paddr, mod->paddr + mod->size);
    decode_program((const u8 *)mod->paddr, mod->size);

    workers = alloc(sizeof(struct worker) * (total_threads + 1), 64);
    u32 gid = 0;
    for (u32 g = 0; g < n_group; g++)
        for (u32 i = 0; i < groups[g].threads; i++, gid++) {
            struct worker *w = &workers[gid];
            w->group = g;
            w->index = i;
            w->gid = gid;
            w->ops = groups[g].ops;
            w->ops_len = groups[g].ops_len;
            w->state = gid + 1;
            if (groups[g].private_bytes)
                w->private_buf = alloc(groups[g].private_bytes, 4096);
        }
    for (u32 i = 0; i < total_threads; i++) {
        u8 *stack = alloc(STACK_BYTES, 4096);
        u32 cpu = (i + 1) % online;
        i64 k = sys_spawn((u64)worker_main, (u64)&workers[i], (u64)stack + STACK_BYTES - 8, cpu);
        if (k < 0)
            die("thread table full", 1);
        workers[i].ktid = (i32)k;
    }
    u32 d;
    while ((d = g_done) < total_threads)
        futex_wait(&g_done, d);
    emit_result();
    sys1(SYS_POWEROFF, 0);
    for (;;)
        ;
}
