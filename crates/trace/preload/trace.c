/* smplab trace interposer: an LD_PRELOAD library that records every pthread
 * synchronization call of an unmodified program into the trace file named by
 * SMPLAB_TRACE_FILE. Format: docs/trace-format.md (keep both in step).
 *
 * Hot path: each thread appends fixed-size events to its own buffer (no lock,
 * no shared atomic); a full buffer is written to the file with one write() on
 * an O_APPEND descriptor, which the kernel serializes, so chunks of different
 * threads never interleave. Buffers stay registered until process exit so the
 * exit-time flush and the fatal-signal flush can reach threads still running.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "trace.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_THREADS 4096
#define BUF_EVENTS 1024

struct tbuf {
    uint32_t thread;
    uint32_t count;
    struct smplab_event ev[BUF_EVENTS];
};

static int trace_fd = -1;
static struct tbuf *buffers[MAX_THREADS];
static uint32_t next_thread; /* atomic */
static __thread struct tbuf *my_buf;
static __thread int in_hook;
static pthread_key_t exit_key;

/* The real functions, resolved once. */
static int (*real_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
static int (*real_join)(pthread_t, void **);
static void (*real_exit)(void *) __attribute__((noreturn));
static int (*real_mutex_lock)(pthread_mutex_t *);
static int (*real_mutex_trylock)(pthread_mutex_t *);
static int (*real_mutex_timedlock)(pthread_mutex_t *, const struct timespec *);
static int (*real_mutex_unlock)(pthread_mutex_t *);
static int (*real_cond_wait)(pthread_cond_t *, pthread_mutex_t *);
static int (*real_cond_timedwait)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
static int (*real_cond_signal)(pthread_cond_t *);
static int (*real_cond_broadcast)(pthread_cond_t *);
static int (*real_rw_rdlock)(pthread_rwlock_t *);
static int (*real_rw_wrlock)(pthread_rwlock_t *);
static int (*real_rw_tryrdlock)(pthread_rwlock_t *);
static int (*real_rw_trywrlock)(pthread_rwlock_t *);
static int (*real_rw_timedrdlock)(pthread_rwlock_t *, const struct timespec *);
static int (*real_rw_timedwrlock)(pthread_rwlock_t *, const struct timespec *);
static int (*real_rw_unlock)(pthread_rwlock_t *);
static int (*real_barrier_init)(pthread_barrier_t *, const pthread_barrierattr_t *, unsigned);
static int (*real_barrier_wait)(pthread_barrier_t *);
static int (*real_spin_lock)(pthread_spinlock_t *);
static int (*real_spin_trylock)(pthread_spinlock_t *);
static int (*real_spin_unlock)(pthread_spinlock_t *);
static int (*real_sem_init)(sem_t *, int, unsigned);
static int (*real_sem_wait)(sem_t *);
static int (*real_sem_trywait)(sem_t *);
static int (*real_sem_timedwait)(sem_t *, const struct timespec *);
static int (*real_sem_post)(sem_t *);

static void *sym(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

/* Condition variables exist in two symbol versions; programs built since glibc
 * 2.3.2 use the new one, which RTLD_NEXT alone might not pick. */
static void *cond_sym(const char *name)
{
    void *p = dlvsym(RTLD_NEXT, name, "GLIBC_2.3.2");
    return p ? p : dlsym(RTLD_NEXT, name);
}

static void resolve(void)
{
    real_create = sym("pthread_create");
    real_join = sym("pthread_join");
    real_exit = sym("pthread_exit");
    real_mutex_lock = sym("pthread_mutex_lock");
    real_mutex_trylock = sym("pthread_mutex_trylock");
    real_mutex_timedlock = sym("pthread_mutex_timedlock");
    real_mutex_unlock = sym("pthread_mutex_unlock");
    real_cond_wait = cond_sym("pthread_cond_wait");
    real_cond_timedwait = cond_sym("pthread_cond_timedwait");
    real_cond_signal = cond_sym("pthread_cond_signal");
    real_cond_broadcast = cond_sym("pthread_cond_broadcast");
    real_rw_rdlock = sym("pthread_rwlock_rdlock");
    real_rw_wrlock = sym("pthread_rwlock_wrlock");
    real_rw_tryrdlock = sym("pthread_rwlock_tryrdlock");
    real_rw_trywrlock = sym("pthread_rwlock_trywrlock");
    real_rw_timedrdlock = sym("pthread_rwlock_timedrdlock");
    real_rw_timedwrlock = sym("pthread_rwlock_timedwrlock");
    real_rw_unlock = sym("pthread_rwlock_unlock");
    real_barrier_init = sym("pthread_barrier_init");
    real_barrier_wait = sym("pthread_barrier_wait");
    real_spin_lock = sym("pthread_spin_lock");
    real_spin_trylock = sym("pthread_spin_trylock");
    real_spin_unlock = sym("pthread_spin_unlock");
    real_sem_init = sym("sem_init");
    real_sem_wait = sym("sem_wait");
    real_sem_trywait = sym("sem_trywait");
    real_sem_timedwait = sym("sem_timedwait");
    real_sem_post = sym("sem_post");
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* write() all of it, retrying on EINTR and short writes. */
static void write_all(const void *p, size_t len)
{
    const char *c = p;
    while (len > 0) {
        ssize_t w = write(trace_fd, c, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        c += w;
        len -= (size_t)w;
    }
}

/* One chunk: block header + events header + events, in one writev() so that
 * O_APPEND keeps it contiguous (no big stack buffer: threads may have small
 * stacks). Called by the owner thread, or at exit and on a fatal signal. */
static void flush_buf(struct tbuf *b)
{
    uint32_t n = __atomic_load_n(&b->count, __ATOMIC_ACQUIRE);
    if (trace_fd < 0 || n == 0)
        return;
    struct {
        struct smplab_block block;
        uint32_t thread;
        uint32_t count;
    } hdr = {{SMPLAB_BLOCK_EVENTS, 8 + n * (uint32_t)sizeof(struct smplab_event)}, b->thread, n};
    struct iovec iov[2] = {{&hdr, sizeof hdr}, {b->ev, n * sizeof(struct smplab_event)}};
    int saved = errno;
    size_t want = iov[0].iov_len + iov[1].iov_len;
    ssize_t w;
    do {
        w = writev(trace_fd, iov, 2);
    } while (w < 0 && errno == EINTR);
    if (w >= 0 && (size_t)w < want) {
        /* A short write (disk full): the reader sees a truncated block. */
    }
    errno = saved;
    __atomic_store_n(&b->count, 0, __ATOMIC_RELEASE);
}

static struct tbuf *new_buf(uint32_t thread)
{
    struct tbuf *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->thread = thread;
    if (thread < MAX_THREADS)
        __atomic_store_n(&buffers[thread], b, __ATOMIC_RELEASE);
    return b;
}

static struct tbuf *self_buf(void)
{
    if (!my_buf && trace_fd >= 0) {
        /* A thread we did not see created (another library's): number it now. */
        my_buf = new_buf(__atomic_fetch_add(&next_thread, 1, __ATOMIC_RELAXED));
        if (my_buf)
            pthread_setspecific(exit_key, my_buf);
    }
    return my_buf;
}

static void emit(uint8_t kind, uint8_t flags, const void *obj, uint64_t arg, uint64_t t0,
                 uint64_t cpu0, uint64_t t1, int32_t ret)
{
    struct tbuf *b = self_buf();
    if (!b)
        return;
    if (b->count >= BUF_EVENTS) {
        /* Only after the file is closed (exit ran while this thread goes on). */
        flush_buf(b);
        if (b->count >= BUF_EVENTS)
            return;
    }
    struct smplab_event *e = &b->ev[b->count];
    e->t_ns = t0;
    e->wait_ns = t1 > t0 ? t1 - t0 : 0;
    e->cpu_ns = cpu0;
    e->obj = (uint64_t)(uintptr_t)obj;
    e->arg = arg;
    e->kind = kind;
    e->flags = flags;
    e->pad = 0;
    e->ret = ret;
    __atomic_store_n(&b->count, b->count + 1, __ATOMIC_RELEASE);
    if (b->count == BUF_EVENTS)
        flush_buf(b);
}

#define ACTIVE() (trace_fd >= 0 && !in_hook)

/* ---- threads ---------------------------------------------------------- */

struct start {
    void *(*fn)(void *);
    void *arg;
    uint32_t thread;
};

static void *thread_main(void *p)
{
    struct start s = *(struct start *)p;
    free(p);
    my_buf = new_buf(s.thread);
    if (my_buf)
        pthread_setspecific(exit_key, my_buf);
    /* arg = pthread_self(), so a JOIN (which names a pthread_t) finds us. */
    emit(SMPLAB_EV_THREAD_START, 0, (void *)(uintptr_t)s.fn, (uint64_t)pthread_self(), now_ns(),
         cpu_ns(), 0, 0);
    void *r = s.fn(s.arg);
    emit(SMPLAB_EV_THREAD_EXIT, 0, NULL, 0, now_ns(), cpu_ns(), 0, 0);
    return r;
}

EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg)
{
    if (!real_create)
        resolve();
    if (!ACTIVE())
        return real_create(t, attr, fn, arg);
    struct start *s = malloc(sizeof *s);
    if (!s)
        return real_create(t, attr, fn, arg);
    s->fn = fn;
    s->arg = arg;
    s->thread = __atomic_fetch_add(&next_thread, 1, __ATOMIC_RELAXED);
    uint32_t child = s->thread;
    uint64_t t0 = now_ns(), c0 = cpu_ns();
    int r = real_create(t, attr, thread_main, s);
    if (r != 0)
        free(s);
    emit(SMPLAB_EV_CREATE, r ? SMPLAB_F_FAILED : 0, (void *)(uintptr_t)fn, child, t0, c0,
         now_ns(), r);
    return r;
}

EXPORT int pthread_join(pthread_t t, void **ret)
{
    if (!real_join)
        resolve();
    if (!ACTIVE())
        return real_join(t, ret);
    uint64_t t0 = now_ns(), c0 = cpu_ns();
    int r = real_join(t, ret);
    /* The joined thread's number is in its THREAD_EXIT; match by pthread_t. */
    emit(SMPLAB_EV_JOIN, r ? SMPLAB_F_FAILED : 0, (void *)(uintptr_t)t, 0, t0, c0, now_ns(), r);
    return r;
}

EXPORT void pthread_exit(void *ret)
{
    if (!real_exit)
        resolve();
    if (ACTIVE())
        emit(SMPLAB_EV_THREAD_EXIT, 0, NULL, 0, now_ns(), cpu_ns(), 0, 0);
    real_exit(ret);
}

/* Runs at every thread's end (return, pthread_exit, cancellation). */
static void thread_gone(void *p)
{
    struct tbuf *b = p;
    if (b) {
        struct smplab_event *e = b->count ? &b->ev[b->count - 1] : NULL;
        /* A thread that ended by cancellation has no THREAD_EXIT yet. */
        if (!e || e->kind != SMPLAB_EV_THREAD_EXIT) {
            my_buf = b;
            emit(SMPLAB_EV_THREAD_EXIT, 0, NULL, 0, now_ns(), cpu_ns(), 0, 0);
        }
        flush_buf(b);
    }
}

/* ---- mutexes ---------------------------------------------------------- */

/* A lock is contended when trylock fails first: then the real lock's wait is
 * the time blocked. Uncontended locks cost one trylock and two clock reads. */
EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
    if (!real_mutex_lock)
        resolve();
    if (!ACTIVE())
        return real_mutex_lock(m);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_mutex_trylock(m);
    if (r == 0) {
        emit(SMPLAB_EV_MUTEX_LOCK, 0, m, 0, t0, c0, t0, 0);
        return 0;
    }
    r = real_mutex_lock(m);
    emit(SMPLAB_EV_MUTEX_LOCK, SMPLAB_F_CONTENDED | (r ? SMPLAB_F_FAILED : 0), m, 0, t0, c0,
         now_ns(), r);
    return r;
}

EXPORT int pthread_mutex_trylock(pthread_mutex_t *m)
{
    if (!real_mutex_trylock)
        resolve();
    if (!ACTIVE())
        return real_mutex_trylock(m);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_mutex_trylock(m);
    emit(SMPLAB_EV_MUTEX_TRYLOCK, r ? (SMPLAB_F_FAILED | SMPLAB_F_CONTENDED) : 0, m, 0, t0, c0,
         t0, r);
    return r;
}

EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *abs)
{
    if (!real_mutex_timedlock)
        resolve();
    if (!ACTIVE())
        return real_mutex_timedlock(m, abs);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_mutex_trylock(m);
    if (r == 0) {
        emit(SMPLAB_EV_MUTEX_TIMEDLOCK, 0, m, 0, t0, c0, t0, 0);
        return 0;
    }
    r = real_mutex_timedlock(m, abs);
    emit(SMPLAB_EV_MUTEX_TIMEDLOCK, SMPLAB_F_CONTENDED | (r ? SMPLAB_F_FAILED : 0), m, 0, t0, c0,
         now_ns(), r);
    return r;
}

EXPORT int pthread_mutex_unlock(pthread_mutex_t *m)
{
    if (!real_mutex_unlock)
        resolve();
    if (!ACTIVE())
        return real_mutex_unlock(m);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_mutex_unlock(m);
    emit(SMPLAB_EV_MUTEX_UNLOCK, r ? SMPLAB_F_FAILED : 0, m, 0, t0, c0, t0, r);
    return r;
}

/* ---- condition variables ---------------------------------------------- */

EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    if (!real_cond_wait)
        resolve();
    if (!ACTIVE())
        return real_cond_wait(c, m);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_cond_wait(c, m);
    emit(SMPLAB_EV_COND_WAIT, SMPLAB_F_CONTENDED | (r ? SMPLAB_F_FAILED : 0), c,
         (uint64_t)(uintptr_t)m, t0, c0, now_ns(), r);
    return r;
}

EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                  const struct timespec *abs)
{
    if (!real_cond_timedwait)
        resolve();
    if (!ACTIVE())
        return real_cond_timedwait(c, m, abs);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_cond_timedwait(c, m, abs);
    emit(SMPLAB_EV_COND_TIMEDWAIT,
         SMPLAB_F_CONTENDED | (r == ETIMEDOUT ? SMPLAB_F_TIMEOUT : r ? SMPLAB_F_FAILED : 0), c,
         (uint64_t)(uintptr_t)m, t0, c0, now_ns(), r);
    return r;
}

EXPORT int pthread_cond_signal(pthread_cond_t *c)
{
    if (!real_cond_signal)
        resolve();
    if (!ACTIVE())
        return real_cond_signal(c);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_cond_signal(c);
    emit(SMPLAB_EV_COND_SIGNAL, 0, c, 0, t0, c0, t0, r);
    return r;
}

EXPORT int pthread_cond_broadcast(pthread_cond_t *c)
{
    if (!real_cond_broadcast)
        resolve();
    if (!ACTIVE())
        return real_cond_broadcast(c);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_cond_broadcast(c);
    emit(SMPLAB_EV_COND_BROADCAST, 0, c, 0, t0, c0, t0, r);
    return r;
}

/* ---- rwlocks ---------------------------------------------------------- */

#define RW_BLOCKING(name, real, trylock, kind)                                            \
    EXPORT int name(pthread_rwlock_t *l)                                                  \
    {                                                                                     \
        if (!real)                                                                        \
            resolve();                                                                    \
        if (!ACTIVE())                                                                    \
            return real(l);                                                               \
        uint64_t c0 = cpu_ns(), t0 = now_ns();                                            \
        int r = trylock(l);                                                               \
        if (r == 0) {                                                                     \
            emit(kind, 0, l, 0, t0, c0, t0, 0);                                           \
            return 0;                                                                     \
        }                                                                                 \
        r = real(l);                                                                      \
        emit(kind, SMPLAB_F_CONTENDED | (r ? SMPLAB_F_FAILED : 0), l, 0, t0, c0, now_ns(), \
             r);                                                                          \
        return r;                                                                         \
    }
RW_BLOCKING(pthread_rwlock_rdlock, real_rw_rdlock, real_rw_tryrdlock, SMPLAB_EV_RW_RDLOCK)
RW_BLOCKING(pthread_rwlock_wrlock, real_rw_wrlock, real_rw_trywrlock, SMPLAB_EV_RW_WRLOCK)

#define RW_TRY(name, real, kind)                                                         \
    EXPORT int name(pthread_rwlock_t *l)                                                 \
    {                                                                                    \
        if (!real)                                                                       \
            resolve();                                                                   \
        if (!ACTIVE())                                                                   \
            return real(l);                                                              \
        uint64_t c0 = cpu_ns(), t0 = now_ns();                                           \
        int r = real(l);                                                                 \
        emit(kind, SMPLAB_F_TRY | (r ? SMPLAB_F_FAILED | SMPLAB_F_CONTENDED : 0), l, 0, t0, \
             c0, t0, r);                                                                 \
        return r;                                                                        \
    }
RW_TRY(pthread_rwlock_tryrdlock, real_rw_tryrdlock, SMPLAB_EV_RW_RDLOCK)
RW_TRY(pthread_rwlock_trywrlock, real_rw_trywrlock, SMPLAB_EV_RW_WRLOCK)

#define RW_TIMED(name, real, trylock, kind)                                                \
    EXPORT int name(pthread_rwlock_t *l, const struct timespec *abs)                       \
    {                                                                                      \
        if (!real)                                                                         \
            resolve();                                                                     \
        if (!ACTIVE())                                                                     \
            return real(l, abs);                                                           \
        uint64_t c0 = cpu_ns(), t0 = now_ns();                                             \
        int r = trylock(l);                                                                \
        if (r == 0) {                                                                      \
            emit(kind, 0, l, 0, t0, c0, t0, 0);                                            \
            return 0;                                                                      \
        }                                                                                  \
        r = real(l, abs);                                                                  \
        emit(kind, SMPLAB_F_CONTENDED | (r ? SMPLAB_F_FAILED : 0), l, 0, t0, c0, now_ns(), \
             r);                                                                           \
        return r;                                                                          \
    }
RW_TIMED(pthread_rwlock_timedrdlock, real_rw_timedrdlock, real_rw_tryrdlock,
         SMPLAB_EV_RW_RDLOCK)
RW_TIMED(pthread_rwlock_timedwrlock, real_rw_timedwrlock, real_rw_trywrlock,
         SMPLAB_EV_RW_WRLOCK)

EXPORT int pthread_rwlock_unlock(pthread_rwlock_t *l)
{
    if (!real_rw_unlock)
        resolve();
    if (!ACTIVE())
        return real_rw_unlock(l);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_rw_unlock(l);
    emit(SMPLAB_EV_RW_UNLOCK, r ? SMPLAB_F_FAILED : 0, l, 0, t0, c0, t0, r);
    return r;
}

/* ---- barriers, spin locks, semaphores --------------------------------- */

EXPORT int pthread_barrier_init(pthread_barrier_t *b, const pthread_barrierattr_t *a,
                                unsigned count)
{
    if (!real_barrier_init)
        resolve();
    if (!ACTIVE())
        return real_barrier_init(b, a, count);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_barrier_init(b, a, count);
    emit(SMPLAB_EV_BARRIER_INIT, r ? SMPLAB_F_FAILED : 0, b, count, t0, c0, t0, r);
    return r;
}

EXPORT int pthread_barrier_wait(pthread_barrier_t *b)
{
    if (!real_barrier_wait)
        resolve();
    if (!ACTIVE())
        return real_barrier_wait(b);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_barrier_wait(b);
    uint64_t t1 = now_ns();
    uint8_t f = r == PTHREAD_BARRIER_SERIAL_THREAD ? SMPLAB_F_SERIAL
                : r                                ? SMPLAB_F_FAILED
                                                   : 0;
    /* Every arrival but the last waits; the serial thread is the last. */
    if (r == 0)
        f |= SMPLAB_F_CONTENDED;
    emit(SMPLAB_EV_BARRIER_WAIT, f, b, 0, t0, c0, t1, r);
    return r;
}

EXPORT int pthread_spin_lock(pthread_spinlock_t *l)
{
    if (!real_spin_lock)
        resolve();
    if (!ACTIVE())
        return real_spin_lock(l);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_spin_trylock(l);
    if (r == 0) {
        emit(SMPLAB_EV_SPIN_LOCK, 0, (void *)l, 0, t0, c0, t0, 0);
        return 0;
    }
    r = real_spin_lock(l);
    emit(SMPLAB_EV_SPIN_LOCK, SMPLAB_F_CONTENDED, (void *)l, 0, t0, c0, now_ns(), r);
    return r;
}

EXPORT int pthread_spin_trylock(pthread_spinlock_t *l)
{
    if (!real_spin_trylock)
        resolve();
    if (!ACTIVE())
        return real_spin_trylock(l);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_spin_trylock(l);
    emit(SMPLAB_EV_SPIN_LOCK, SMPLAB_F_TRY | (r ? SMPLAB_F_FAILED | SMPLAB_F_CONTENDED : 0),
         (void *)l, 0, t0, c0, t0, r);
    return r;
}

EXPORT int pthread_spin_unlock(pthread_spinlock_t *l)
{
    if (!real_spin_unlock)
        resolve();
    if (!ACTIVE())
        return real_spin_unlock(l);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_spin_unlock(l);
    emit(SMPLAB_EV_SPIN_UNLOCK, 0, (void *)l, 0, t0, c0, t0, r);
    return r;
}

EXPORT int sem_init(sem_t *s, int pshared, unsigned value)
{
    if (!real_sem_init)
        resolve();
    if (!ACTIVE())
        return real_sem_init(s, pshared, value);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_sem_init(s, pshared, value);
    emit(SMPLAB_EV_SEM_INIT, r ? SMPLAB_F_FAILED : 0, s, value, t0, c0, t0, r);
    return r;
}

EXPORT int sem_wait(sem_t *s)
{
    if (!real_sem_wait)
        resolve();
    if (!ACTIVE())
        return real_sem_wait(s);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_sem_trywait(s);
    if (r == 0) {
        emit(SMPLAB_EV_SEM_WAIT, 0, s, 0, t0, c0, t0, 0);
        return 0;
    }
    r = real_sem_wait(s);
    int err = r ? errno : 0;
    emit(SMPLAB_EV_SEM_WAIT, SMPLAB_F_CONTENDED | (r ? SMPLAB_F_FAILED : 0), s, 0, t0, c0,
         now_ns(), err);
    if (r)
        errno = err;
    return r;
}

EXPORT int sem_trywait(sem_t *s)
{
    if (!real_sem_trywait)
        resolve();
    if (!ACTIVE())
        return real_sem_trywait(s);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_sem_trywait(s);
    int err = r ? errno : 0;
    emit(SMPLAB_EV_SEM_WAIT, SMPLAB_F_TRY | (r ? SMPLAB_F_FAILED | SMPLAB_F_CONTENDED : 0), s,
         0, t0, c0, t0, err);
    if (r)
        errno = err;
    return r;
}

EXPORT int sem_timedwait(sem_t *s, const struct timespec *abs)
{
    if (!real_sem_timedwait)
        resolve();
    if (!ACTIVE())
        return real_sem_timedwait(s, abs);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_sem_trywait(s);
    if (r == 0) {
        emit(SMPLAB_EV_SEM_WAIT, 0, s, 0, t0, c0, t0, 0);
        return 0;
    }
    r = real_sem_timedwait(s, abs);
    int err = r ? errno : 0;
    emit(SMPLAB_EV_SEM_WAIT,
         SMPLAB_F_CONTENDED |
             (r ? (err == ETIMEDOUT ? SMPLAB_F_TIMEOUT : 0) | SMPLAB_F_FAILED : 0),
         s, 0, t0, c0, now_ns(), err);
    if (r)
        errno = err;
    return r;
}

EXPORT int sem_post(sem_t *s)
{
    if (!real_sem_post)
        resolve();
    if (!ACTIVE())
        return real_sem_post(s);
    uint64_t c0 = cpu_ns(), t0 = now_ns();
    int r = real_sem_post(s);
    emit(SMPLAB_EV_SEM_POST, r ? SMPLAB_F_FAILED : 0, s, 0, t0, c0, t0, r);
    return r;
}

/* ---- start, exit, fatal signals ----------------------------------------- */

static void flush_all(void)
{
    uint32_t n = __atomic_load_n(&next_thread, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n && i < MAX_THREADS; i++) {
        struct tbuf *b = __atomic_load_n(&buffers[i], __ATOMIC_ACQUIRE);
        if (b)
            flush_buf(b);
    }
}

/* A crash loses no more than it must: flush what every thread has, then die
 * of the same signal. Installed only where the program left the default. */
static void on_fatal(int sig)
{
    flush_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((constructor)) static void trace_init(void)
{
    resolve();
    const char *path = getenv("SMPLAB_TRACE_FILE");
    if (!path || !*path)
        return;
    trace_fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    /* Children of the program (a shell script's commands) are not traced. */
    unsetenv("SMPLAB_TRACE_FILE");
    if (trace_fd < 0)
        return;
    pthread_key_create(&exit_key, thread_gone);
    next_thread = 1;
    my_buf = new_buf(0);
    emit(SMPLAB_EV_THREAD_START, 0, NULL, (uint64_t)pthread_self(), now_ns(), cpu_ns(), 0, 0);
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTERM, SIGINT};
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) {
        struct sigaction old;
        if (sigaction(fatal[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_fatal;
            sa.sa_flags = SA_RESETHAND | SA_NODEFER;
            sigaction(fatal[i], &sa, NULL);
        }
    }
}

__attribute__((destructor)) static void trace_fini(void)
{
    if (trace_fd < 0)
        return;
    in_hook = 1;
    if (my_buf)
        emit(SMPLAB_EV_THREAD_EXIT, 0, NULL, 0, now_ns(), cpu_ns(), 0, 0);
    flush_all();
    struct {
        struct smplab_block block;
        uint32_t threads;
        uint32_t pad;
        uint64_t t_ns;
    } end = {{SMPLAB_BLOCK_LIB_END, 16}, __atomic_load_n(&next_thread, __ATOMIC_ACQUIRE), 0,
             now_ns()};
    write_all(&end, sizeof end);
    close(trace_fd);
    trace_fd = -1;
}
