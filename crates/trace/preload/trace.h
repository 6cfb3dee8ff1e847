/* The smplab trace file's binary layout, shared by the interposer (trace.c)
 * and mirrored by crates/trace/src/format.rs. Documented in
 * docs/trace-format.md. Little-endian, x86-64. */
#ifndef SMPLAB_TRACE_H
#define SMPLAB_TRACE_H
#include <stdint.h>

/* Every block: type, then payload length in bytes. */
struct smplab_block {
    uint32_t type;
    uint32_t len;
};

enum {
    SMPLAB_BLOCK_HEADER = 1,  /* written by smplab before the program starts */
    SMPLAB_BLOCK_EVENTS = 2,  /* u32 thread, u32 count, count events */
    SMPLAB_BLOCK_LIB_END = 3, /* the interposer saw the program exit normally */
    SMPLAB_BLOCK_EXIT = 4,    /* written by smplab: how the program ended */
};

/* One event, 48 bytes. */
struct smplab_event {
    uint64_t t_ns;    /* CLOCK_MONOTONIC at the call's entry */
    uint64_t wait_ns; /* time inside the call when it blocked/spun (else 0) */
    uint64_t cpu_ns;  /* the thread's CPU clock at the call's entry */
    uint64_t obj;     /* the object's address (thread start routine for CREATE/START) */
    uint64_t arg;     /* kind-specific: see docs/trace-format.md */
    uint8_t kind;
    uint8_t flags;
    uint16_t pad;
    int32_t ret; /* the call's return value (errno for semaphores) */
};
_Static_assert(sizeof(struct smplab_event) == 48, "event layout");

enum {
    SMPLAB_EV_THREAD_START = 1,
    SMPLAB_EV_THREAD_EXIT = 2,
    SMPLAB_EV_CREATE = 3,
    SMPLAB_EV_JOIN = 4,
    SMPLAB_EV_MUTEX_LOCK = 5,
    SMPLAB_EV_MUTEX_TRYLOCK = 6,
    SMPLAB_EV_MUTEX_TIMEDLOCK = 7,
    SMPLAB_EV_MUTEX_UNLOCK = 8,
    SMPLAB_EV_COND_WAIT = 9,
    SMPLAB_EV_COND_TIMEDWAIT = 10,
    SMPLAB_EV_COND_SIGNAL = 11,
    SMPLAB_EV_COND_BROADCAST = 12,
    SMPLAB_EV_RW_RDLOCK = 13,
    SMPLAB_EV_RW_WRLOCK = 14,
    SMPLAB_EV_RW_UNLOCK = 15,
    SMPLAB_EV_BARRIER_INIT = 16,
    SMPLAB_EV_BARRIER_WAIT = 17,
    SMPLAB_EV_SPIN_LOCK = 18,
    SMPLAB_EV_SPIN_UNLOCK = 19,
    SMPLAB_EV_SEM_INIT = 20,
    SMPLAB_EV_SEM_WAIT = 21,
    SMPLAB_EV_SEM_POST = 22,
};

enum {
    SMPLAB_F_CONTENDED = 1, /* it had to wait (or, for a try, found it taken) */
    SMPLAB_F_FAILED = 2,    /* nonzero return: not acquired */
    SMPLAB_F_TIMEOUT = 4,   /* a timed call that timed out */
    SMPLAB_F_SERIAL = 8,    /* barrier: PTHREAD_BARRIER_SERIAL_THREAD (the last arrival) */
    SMPLAB_F_TRY = 16,      /* rwlock/spin/sem: the try variant */
};
#endif
