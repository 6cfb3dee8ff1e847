/* smplab guest, CPL3 part: the init thread (command line, TSC calibration,
 * program decoding, thread creation, result record) and the workload executor.
 * This code runs natively even on PVM hosts, so everything that is not
 * privileged lives here. It enters the kernel only through the system-call instruction (`int3`). */
#include "guest.h"

/* The system-call instruction (see kernel.c trap()). */
#ifndef SYSCALL_INSN
#define SYSCALL_INSN "int3"
#endif
#define LCG_MUL 6364136223846793005UL
#define LCG_ADD 1442695040888963407UL
#define STACK_BYTES (64 * 1024)

extern u8 _end[];

/* ---------- system calls ---------- */

/* The kernel preserves every register except rax (result) and r8-r11. */
static inline i64 sys3(u64 nr, u64 a, u64 b, u64 c)
{
    i64 r;
    __asm__ volatile(SYSCALL_INSN : "=a"(r) : "a"(nr), "D"(a), "S"(b), "d"(c) : "memory", "r8", "r9", "r10", "r11");
    return r;
}
static inline i64 sys1(u64 nr, u64 a) { return sys3(nr, a, 0, 0); }
static inline i64 sys0(u64 nr) { return sys3(nr, 0, 0, 0); }

static i64 sys_spawn(u64 entry, u64 arg, u64 stack, u64 cpu)
{
    i64 r;
    register u64 r10 __asm__("r10") = cpu;
    __asm__ volatile(SYSCALL_INSN : "=a"(r), "+r"(r10) : "a"((u64)SYS_SPAWN), "D"(entry), "S"(arg), "d"(stack) : "memory", "r8", "r9", "r11");
    return r;
}

/* Returns 1 if the thread really slept (0 when the value had already changed). */
static int futex_wait(volatile u32 *addr, u32 val) { return sys3(SYS_FUTEX_WAIT, (u64)addr, val, 0) == 0; }
static i64 futex_wake(volatile u32 *addr, u32 n) { return sys3(SYS_FUTEX_WAKE, (u64)addr, n, 0); }

/* ---------- strings and output ---------- */

static usize ustrlen(const char *s)
{
    usize n = 0;
    while (s[n])
        n++;
    return n;
}

static void print(const char *s) { sys3(SYS_WRITE, (u64)s, ustrlen(s), 0); }

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

static void __attribute__((noreturn)) die(const char *msg, u32 status)
{
    /* Errors are reported even with console=off: the run is over. */
    u32 saved = g_params.console;
    g_params.console = 1;
    print("smplab-guest: error: ");
    print(msg);
    print("\n");
    g_params.console = saved;
    sys1(SYS_POWEROFF, status);
    for (;;)
        ;
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

static char idle_name[48] = "hlt";
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

static u64 heap_cur, heap_end;

static void *alloc(u64 bytes, u64 align)
{
    u64 p = (heap_cur + align - 1) & ~(align - 1);
    if (p + bytes > heap_end || p + bytes < p)
        die("out of guest memory for the program's threads and buffers: give the VM more memory", 1);
    heap_cur = p + bytes;
    /* Fresh RAM from the VMM is zero, but the region may hold boot leftovers. */
    u8 *q = (u8 *)p;
    __asm__ volatile("rep stosb" : "+D"(q), "+c"(bytes) : "a"(0) : "memory");
    return (void *)p;
}

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
    heap_cur = best_lo;
    heap_end = best_hi;
}

/* ---------- program ---------- */

struct spin {
    volatile u32 word;    /* tas/ttas: 0 free; ticket: next ticket */
    volatile u32 serving; /* ticket: now serving */
    u8 kind, pause;
} __attribute__((aligned(64)));

struct mutex {
    volatile u32 state; /* 0 free, 1 locked, 2 locked with waiters */
    u32 spin_limit;
} __attribute__((aligned(64)));

struct barrier {
    volatile u32 count;
    volatile u32 gen;
    volatile u32 waiters;
    u32 parties, spin_limit;
    u8 wait, pause;
} __attribute__((aligned(64)));

struct queue {
    volatile u32 count;
    volatile u32 seq;
    volatile u32 waiters;
    u32 cap;
} __attribute__((aligned(64)));

struct counter {
    volatile u64 v;
} __attribute__((aligned(64)));

/* Units left in a pool; drain claims with a fetch-and-decrement, so it goes
 * below zero by at most one per thread that found it empty. */
struct pool {
    volatile i64 left;
} __attribute__((aligned(64)));

struct group {
    u32 threads;
    u64 private_bytes;
    const u8 *ops;
    u32 ops_len;
};

struct worker {
    u32 group, index, gid;
    i32 ktid;
    const u8 *ops;
    u32 ops_len;
    u8 *private_buf;
    u64 state;
    u64 start, end;
    u64 ops_count[NOPS];
    u64 spins, blocks, wakeups;
    /* Advanced while waiting at the start gate (settle_waiters). */
    volatile u64 gate_beats;
} __attribute__((aligned(64)));

static u32 n_spin, n_mutex, n_barrier, n_queue, n_counter, n_buffer, n_group, n_device, n_pool, total_threads;
static struct spin *spins;
static struct mutex *mutexes;
static struct barrier *barriers;
static struct queue *queues;
static struct counter *counters;
static struct pool *pools;
static u8 **buffers;
static u64 *buffer_bytes;
static struct group *groups;
static struct worker *workers;
static volatile u32 g_done;
static volatile u32 g_sd_lock;
/* The start gate (worker_main): arrivals, the release flag, and what the
 * releasing worker saw. */
static volatile u32 g_arrived;
static volatile u32 g_go;
static u64 g_all_arrived_tsc, g_release_ticks, g_gate_reply;

struct rd {
    const u8 *b;
    u64 pos, len;
};

static int rd_take(struct rd *r, u64 n, const u8 **p)
{
    if (n > r->len - r->pos)
        return 0;
    *p = r->b + r->pos;
    r->pos += n;
    return 1;
}
static u64 le(const u8 *p, int n)
{
    u64 v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static int rd_u(struct rd *r, int n, u64 *v)
{
    const u8 *p;
    if (!rd_take(r, (u64)n, &p))
        return 0;
    *v = le(p, n);
    return 1;
}

static inline u64 ld64(const u8 *p)
{
    u64 v;
    __builtin_memcpy(&v, p, 8);
    return v;
}
static inline u32 ld32(const u8 *p)
{
    u32 v;
    __builtin_memcpy(&v, p, 4);
    return v;
}

/* Check an op list once, so the executor can trust it (bounds and indices). */
static int check_ops(const u8 *b, u64 len, int depth)
{
    u64 i = 0;
    if (depth > 16)
        return 0;
    while (i < len) {
        u8 op = b[i++];
        u64 need;
        switch (op) {
        case 0x01: need = 8; break;
        case 0x02: need = 21; break;
        case 0x03: case 0x04: case 0x05: case 0x06: case 0x07: case 0x08: case 0x09: case 0x0d: need = 4; break;
        case 0x0a: need = 5; break;
        case 0x0b: case 0x0c: need = 8; break;
        case 0x0e: case 0x0f: need = 12; break;
        case 0x10: need = 8; break;
        default: return 0;
        }
        if (need > len - i)
            return 0;
        const u8 *a = b + i;
        u32 idx = ld32(a);
        switch (op) {
        case 0x02:
            if (idx != 0xffffffffu && idx >= n_buffer)
                return 0;
            if (a[4] > 1)
                return 0;
            break;
        case 0x03: case 0x04: if (idx >= n_spin) return 0; break;
        case 0x05: case 0x06: if (idx >= n_mutex) return 0; break;
        case 0x07: if (idx >= n_barrier) return 0; break;
        case 0x08: case 0x09: if (idx >= n_queue) return 0; break;
        case 0x0a: if (idx >= n_counter || a[4] > 2) return 0; break;
        case 0x0f: if (idx >= n_device || idx > 0xff) return 0; break;
        case 0x0e: {
            u64 bl = ld32(a + 8);
            if (bl > len - i - 12 || !check_ops(a + 12, bl, depth + 1))
                return 0;
            i += bl;
            break;
        }
        case 0x10: {
            u64 bl = ld32(a + 4);
            if (idx >= n_pool || bl > len - i - 8 || !check_ops(a + 8, bl, depth + 1))
                return 0;
            i += bl;
            break;
        }
        }
        i += need;
    }
    return 1;
}

static void decode_program(const u8 *b, u64 len)
{
    struct rd r = {b, 0, len};
    const u8 *p;
    u64 v;
    if (!rd_take(&r, 4, &p) || p[0] != 'S' || p[1] != 'M' || p[2] != 'P' || p[3] != 'W')
        die("module 0 is not a smplab program encoding (bad magic)", 1);
    if (!rd_u(&r, 2, &v) || v != 1)
        die("unsupported program encoding version (want 1): rebuild smplab", 1);
    u64 n, tt, c[7];
    if (!rd_u(&r, 2, &v) || !rd_u(&r, 4, &n) || !rd_u(&r, 4, &tt))
        die("program encoding truncated in its header", 1);
    for (int i = 0; i < 7; i++)
        if (!rd_u(&r, 4, &c[i]) || c[i] > 65536)
            die("program encoding truncated or has absurd table sizes", 1);
    n_spin = c[0];
    n_mutex = c[1];
    n_barrier = c[2];
    n_queue = c[3];
    n_counter = c[4];
    n_buffer = c[5];
    n_group = c[6];
    spins = alloc(sizeof(struct spin) * (n_spin + 1), 64);
    mutexes = alloc(sizeof(struct mutex) * (n_mutex + 1), 64);
    barriers = alloc(sizeof(struct barrier) * (n_barrier + 1), 64);
    queues = alloc(sizeof(struct queue) * (n_queue + 1), 64);
    counters = alloc(sizeof(struct counter) * (n_counter + 1), 64);
    buffers = alloc(sizeof(u8 *) * (n_buffer + 1), 8);
    buffer_bytes = alloc(sizeof(u64) * (n_buffer + 1), 8);
    groups = alloc(sizeof(struct group) * (n_group + 1), 8);
    for (u32 i = 0; i < n_spin; i++) {
        if (!rd_take(&r, 2, &p) || p[0] > 2)
            die("bad spin lock table in the program encoding", 1);
        spins[i].kind = p[0];
        spins[i].pause = p[1];
    }
    for (u32 i = 0; i < n_mutex; i++) {
        if (!rd_u(&r, 4, &v))
            die("bad mutex table in the program encoding", 1);
        mutexes[i].spin_limit = (u32)v;
    }
    for (u32 i = 0; i < n_barrier; i++) {
        if (!rd_take(&r, 10, &p) || p[4] > 2 || ld32(p) == 0)
            die("bad barrier table in the program encoding", 1);
        barriers[i].parties = ld32(p);
        barriers[i].wait = p[4];
        barriers[i].pause = p[5];
        barriers[i].spin_limit = ld32(p + 6);
    }
    for (u32 i = 0; i < n_queue; i++) {
        if (!rd_u(&r, 4, &v) || v == 0)
            die("bad queue table in the program encoding", 1);
        queues[i].cap = (u32)v;
    }
    for (u32 i = 0; i < n_buffer; i++) {
        if (!rd_u(&r, 8, &v))
            die("bad buffer table in the program encoding", 1);
        buffer_bytes[i] = v;
        buffers[i] = alloc(v ? v : 1, 4096);
    }
    total_threads = 0;
    for (u32 g = 0; g < n_group; g++) {
        u64 th, pb, ol;
        if (!rd_u(&r, 4, &th) || !rd_u(&r, 8, &pb) || !rd_u(&r, 4, &ol) || !rd_take(&r, ol, &p))
            die("program encoding truncated in a thread group", 1);
        groups[g].threads = (u32)th;
        groups[g].private_bytes = pb;
        groups[g].ops = p;
        groups[g].ops_len = (u32)ol;
        total_threads += (u32)th;
        if (total_threads >= MAX_THREADS)
            die("the program has more threads than the guest supports (511)", 1);
    }
    /* The device table trails the groups (absent from older encodings). The
     * VMM gets the queue depths from the host; the guest only bounds-checks. */
    n_device = 0;
    if (r.pos < r.len) {
        if (!rd_u(&r, 4, &v) || v > 256 || !rd_take(&r, v * 4, &p))
            die("bad device table in the program encoding", 1);
        n_device = (u32)v;
    }
    /* The pool table trails the devices (absent from older encodings). */
    n_pool = 0;
    if (r.pos < r.len) {
        if (!rd_u(&r, 4, &v) || v > 65536)
            die("bad pool table in the program encoding", 1);
        n_pool = (u32)v;
    }
    pools = alloc(sizeof(struct pool) * (n_pool + 1), 64);
    for (u32 i = 0; i < n_pool; i++) {
        if (!rd_u(&r, 8, &v) || v > 0x7fffffffffffffffULL)
            die("bad pool table in the program encoding", 1);
        pools[i].left = (i64)v;
    }
    for (u32 g = 0; g < n_group; g++)
        if (!check_ops(groups[g].ops, groups[g].ops_len, 0))
            die("malformed op list in the program encoding", 1);
    if (total_threads != tt)
        die("program encoding's thread total does not match its groups", 1);
    (void)n;
}

/* ---------- executor ---------- */

static u64 tsc_hz;

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
    while (g_sd_acks < n)
        cpu_relax();
    __atomic_store_n(&g_sd_lock, 0, __ATOMIC_RELEASE);
    w->ops_count[12]++;
}

/* io latency samples (TSC cycles: completion -> handler entry, completion ->
 * the thread running again), the last IO_SAMPLES of them. */
#define IO_SAMPLES 16384
static u64 io_samples[IO_SAMPLES][2] __attribute__((section(".noinit")));
static volatile u64 io_nsamples;

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

static u64 ticks_now(void)
{
    u64 t = 0;
    for (u32 i = 0; i < g_ncpus; i++)
        t += cpus[i].ticks;
    return t;
}

/* Settling, as the native executor's gate does (crates/native/src/gate.rs):
 * with a vCPU for every worker, the releaser opens the gate only once every
 * waiter has run in SETTLE_SAMPLES consecutive samples of SETTLE_SAMPLE_US,
 * i.e. each vCPU thread runs on its own host CPU, not stacked on one by the
 * host's placement of threads that just started; at most SETTLE_LIMIT_US. */
#define SETTLE_SAMPLE_US 200
#define SETTLE_SAMPLES 3
#define SETTLE_LIMIT_US 50000
static u64 g_beats_seen[MAX_THREADS];
/* What settle_waiters did: TSC cycles it took, and 0 skipped (more workers
 * than vCPUs), 1 settled, 2 gave up at the limit. */
static u64 g_settle_tsc, g_settle_outcome;

static void settle_waiters(const struct worker *self)
{
    if (total_threads < 2 || total_threads > g_ncpus || tsc_hz < 1000000)
        return;
    u64 per_us = tsc_hz / 1000000;
    u64 began = rdtsc();
    u64 end = began + per_us * SETTLE_LIMIT_US;
    for (u32 i = 0; i < total_threads; i++)
        g_beats_seen[i] = workers[i].gate_beats;
    u32 runs = 0;
    while (runs < SETTLE_SAMPLES && rdtsc() < end) {
        u64 t0 = rdtsc();
        while (rdtsc() - t0 < per_us * SETTLE_SAMPLE_US)
            cpu_relax();
        u32 all_ran = 1;
        for (u32 i = 0; i < total_threads; i++) {
            if (&workers[i] == self)
                continue;
            u64 b = workers[i].gate_beats;
            if (b == g_beats_seen[i])
                all_ran = 0;
            g_beats_seen[i] = b;
        }
        runs = all_ran ? runs + 1 : 0;
    }
    g_settle_tsc = rdtsc() - began;
    g_settle_outcome = runs >= SETTLE_SAMPLES ? 1 : 2;
}

/* The start gate, at CPL3 where waiting costs nothing on PVM hosts: every
 * worker exists and waits here before any starts, as native threads wait at
 * theirs. The last to arrive lets the waiters settle, tells the VMM "ready",
 * waits for its "go" (the host's gate across VMs), and releases everyone
 * with one store. A waiter that sees queued threads yields now and then so
 * they can arrive even on a tickless guest with more threads than vCPUs. */
static void start_gate(struct worker *w)
{
    if (__atomic_add_fetch(&g_arrived, 1, __ATOMIC_SEQ_CST) == total_threads) {
        g_all_arrived_tsc = rdtsc();
        settle_waiters(w);
        g_gate_reply = (u32)sys0(SYS_GATE);
        g_release_ticks = ticks_now();
        g_release_tsc = rdtsc();
        __atomic_store_n(&g_go, 1, __ATOMIC_RELEASE);
        return;
    }
    u64 spins = 0;
    while (!__atomic_load_n(&g_go, __ATOMIC_ACQUIRE)) {
        cpu_relax();
        ++spins;
        if ((spins & 63) == 0)
            w->gate_beats++;
        if (g_queued && (spins & 0x3fff) == 0)
            sys0(SYS_YIELD);
    }
}

static void __attribute__((noreturn)) worker_main(struct worker *w)
{
    start_gate(w);
    w->start = rdtsc();
    run_ops(w, w->ops, w->ops_len);
    w->end = rdtsc();
    sys3(SYS_EXIT_THREAD, (u64)&g_done, total_threads, 0);
    for (;;)
        ;
}

/* ---------- idle thread (poll, haltpoll) ---------- */

void user_idle(struct cpu *c)
{
    /* The polling idle loop of seed 000, at CPL3 so it runs natively: watch this
     * CPU's run queue (and stealable work, and sleeper deadlines) in memory; a
     * waker need not send an IPI. haltpoll: poll for a window, then halt. */
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

/* ---------- result ---------- */

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

static void emit_result(void)
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
