/* smplab guest kernel: futexes, the blocking behind the CPL3 mutexes,
 * barriers and queues (their fast paths stay at CPL3). Waiters hang in 64
 * hashed buckets, each with its own lock; a wake moves them to a run queue
 * through the scheduler's wake placement. */
struct bucket {
    volatile u32 lock;
    struct thread *head;
} __attribute__((aligned(64)));
static struct bucket futex_table[64];

static struct bucket *bucket_of(u64 addr) { return &futex_table[(addr >> 2) & 63]; }

/* SYS_FUTEX_WAIT: block the current thread while the u32 at rdi equals rsi
 * (rax = 0 woken, 1 the value had already changed). */
static void sys_futex_wait(struct cpu *c, struct frame *f)
{
    struct thread *t = c->cur;
    u64 addr = f->rdi;
    struct bucket *b = bucket_of(addr);
    f->rax = 0; /* the result if it sleeps: set before a waker can see it */
    spin_lock(&b->lock);
    if (*(volatile u32 *)addr != (u32)f->rsi) {
        spin_unlock(&b->lock);
        f->rax = 1;
        return;
    }
    t->csw_vol++;
    t->state = T_BLOCKED;
    t->futex_addr = addr;
    t->next = 0;
    struct thread **pp = &b->head;
    while (*pp)
        pp = &(*pp)->next;
    *pp = t;
    spin_unlock(&b->lock);
    schedule(c);
}

/* Wake at most `max` threads waiting on `addr`, in the order they blocked;
 * returns how many. */
static u64 futex_wake_addr(struct cpu *c, u64 addr, u64 max)
{
    u64 n = 0;
    struct bucket *b = bucket_of(addr);
    struct thread *ready = 0, **tail = &ready;
    spin_lock(&b->lock);
    struct thread **pp = &b->head;
    while (*pp && n < max) {
        struct thread *t = *pp;
        if (t->futex_addr == addr) {
            *pp = t->next;
            t->next = 0;
            *tail = t;
            tail = &t->next;
            n++;
        } else {
            pp = &t->next;
        }
    }
    spin_unlock(&b->lock);
    while (ready) {
        struct thread *t = ready;
        ready = t->next;
        make_runnable(c, t);
    }
    return n;
}
