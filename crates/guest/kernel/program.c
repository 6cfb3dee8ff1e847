/* smplab guest, CPL3: the program encoding (docs/program-encoding.md),
 * decoded once from PVH module 0 into the tables of synchronization objects,
 * buffers and thread groups the executor uses, with every op list checked
 * once (bounds and indices) so the executor can trust it. */
#include "user.h"

u32 n_spin, n_mutex, n_barrier, n_queue, n_counter, n_buffer, n_group, n_device, n_pool, total_threads;
struct spin *spins;
struct mutex *mutexes;
struct barrier *barriers;
struct queue *queues;
struct counter *counters;
struct pool *pools;
u8 **buffers;
u64 *buffer_bytes;
struct group *groups;
struct worker *workers;

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

void decode_program(const u8 *b, u64 len)
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
