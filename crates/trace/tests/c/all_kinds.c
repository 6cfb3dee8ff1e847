/* Every primitive the interposer sees, in a small deterministic pattern:
 * a producer/consumer over a mutex + condition variable, a semaphore
 * hand-off, a barrier, a spin lock, an rwlock, trylock and timedlock.
 * Usage: all_kinds [rounds] [exit-mode]; exit-mode: 0 normal, 1 SIGSEGV
 * in main after the joins, 2 SIGKILL itself, 3 exit status 3. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define WORKERS 3
static int rounds = 200, mode;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int slots, done;
static sem_t sem;
static pthread_barrier_t bar;
static pthread_spinlock_t spin;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static volatile unsigned long sink;

static void work(int n)
{
    for (int i = 0; i < n; i++)
        sink += (unsigned long)i * 2654435761u;
}

static void *worker(void *arg)
{
    long id = (long)arg;
    for (int r = 0; r < rounds; r++) {
        pthread_mutex_lock(&m);
        while (slots == 0 && !done)
            pthread_cond_wait(&cv, &m);
        if (slots > 0)
            slots--;
        pthread_mutex_unlock(&m);
        work(20000);
        pthread_spin_lock(&spin);
        sink++;
        pthread_spin_unlock(&spin);
        pthread_rwlock_rdlock(&rw);
        work(100);
        pthread_rwlock_unlock(&rw);
        /* Post before the barrier: main hands out one slot per post, and
         * the other workers need slots to reach the barrier. */
        sem_post(&sem);
        if (r % 10 == 0)
            pthread_barrier_wait(&bar);
    }
    (void)id;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        rounds = atoi(argv[1]);
    if (argc > 2)
        mode = atoi(argv[2]);
    sem_init(&sem, 0, 0);
    pthread_barrier_init(&bar, NULL, WORKERS);
    pthread_spin_init(&spin, 0);
    pthread_t t[WORKERS];
    for (long i = 0; i < WORKERS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int r = 0; r < rounds * WORKERS; r++) {
        work(5000);
        pthread_mutex_lock(&m);
        slots++;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&m);
        sem_wait(&sem);
        if (r % 50 == 0) {
            pthread_rwlock_wrlock(&rw);
            pthread_rwlock_unlock(&rw);
            if (pthread_mutex_trylock(&m) == 0)
                pthread_mutex_unlock(&m);
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            if (pthread_mutex_timedlock(&m, &ts) == 0)
                pthread_mutex_unlock(&m);
        }
        if (mode == 2 && r == rounds * WORKERS / 2)
            raise(SIGKILL);
    }
    pthread_mutex_lock(&m);
    done = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&m);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(t[i], NULL);
    if (mode == 1) {
        /* Crash with main's events still in its buffer. */
        volatile int *p = NULL;
        *p = 1;
    }
    printf("all_kinds done %d\n", rounds);
    return mode == 3 ? 3 : 0;
}
