/* pool.c -- the persistent thread pool every parallel kernel runs on.
 *
 * tensor_pool_run publishes a job by bumping a generation counter; workers
 * notice it while spinning (for up to SPIN_NANOSECONDS after their last job,
 * so back-to-back kernels of a forward pass do not pay a wake-up), or are
 * woken from a condition variable once they have gone to sleep. The caller
 * runs its own share as thread 0 and then waits for the workers the same
 * way: a short spin, then the condition variable. An idle pool therefore
 * sleeps and uses no core.
 *
 * The pool also owns the scratch memory matmuls need (quantized activations,
 * repacked weight panels), grown on demand and reused across calls. */
#include "tensor_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long an idle thread polls before sleeping. */
#define SPIN_NANOSECONDS 100000

struct pool_worker {
    struct tensor_pool *pool; /* owner */
    int index;                /* thread index, 1 .. n_threads - 1 */
    pthread_t thread;         /* the worker thread */
};

struct tensor_pool {
    int n_threads;              /* threads taking part, caller included */
    struct pool_worker *workers; /* n_threads - 1 workers */
    int n_started;              /* workers whose thread was created */

    tensor_pool_fn fn;          /* current job; written before generation is bumped */
    void *arg;                  /* its argument */
    atomic_uint generation;     /* bumped once per tensor_pool_run */
    atomic_int pending;         /* workers still running the current job */
    atomic_int stop;            /* 1 tells workers to exit */
    atomic_int caller_sleeping; /* 1 while the caller waits on done */

    pthread_mutex_t mutex; /* guards the sleeps below */
    pthread_cond_t wake;   /* workers sleep here between jobs */
    pthread_cond_t done;   /* the caller sleeps here until pending is 0 */

    void *scratch;       /* tensor_pool_scratch memory, 64-byte aligned */
    size_t scratch_size; /* its size in bytes */
};

static long long now_nanoseconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Spins until generation differs from seen or stop is set, for at most
 * SPIN_NANOSECONDS; returns 1 if it did. */
static int spin_for_job(struct tensor_pool *pool, unsigned seen) {
    long long deadline = now_nanoseconds() + SPIN_NANOSECONDS;
    for (int i = 1;; i++) {
        if (atomic_load_explicit(&pool->generation, memory_order_acquire) != seen ||
            atomic_load_explicit(&pool->stop, memory_order_acquire))
            return 1;
        cpu_relax();
        if (i % 64 == 0 && now_nanoseconds() > deadline) return 0;
    }
}

static void *worker_main(void *opaque) {
    struct pool_worker *self = opaque;
    struct tensor_pool *pool = self->pool;
    unsigned seen = 0;
    for (;;) {
        if (!spin_for_job(pool, seen)) {
            pthread_mutex_lock(&pool->mutex);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->wake, &pool->mutex);
            pthread_mutex_unlock(&pool->mutex);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = atomic_load(&pool->generation);
        pool->fn(pool->arg, self->index, pool->n_threads);
        if (atomic_fetch_sub(&pool->pending, 1) == 1 && atomic_load(&pool->caller_sleeping)) {
            /* the last worker wakes a caller that gave up spinning */
            pthread_mutex_lock(&pool->mutex);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mutex);
        }
    }
}

static void stop_workers(struct tensor_pool *pool) {
    pthread_mutex_lock(&pool->mutex);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (int i = 0; i < pool->n_started; i++) pthread_join(pool->workers[i].thread, NULL);
    pool->n_started = 0;
}

struct tensor_pool *tensor_pool_create(int n_threads) {
    if (n_threads < 1) return NULL;
    struct tensor_pool *pool = calloc(1, sizeof(*pool));
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->stop, 0);
    atomic_init(&pool->caller_sleeping, 0);
    if (pthread_mutex_init(&pool->mutex, NULL) != 0) {
        free(pool);
        return NULL;
    }
    if (pthread_cond_init(&pool->wake, NULL) != 0) {
        pthread_mutex_destroy(&pool->mutex);
        free(pool);
        return NULL;
    }
    if (pthread_cond_init(&pool->done, NULL) != 0) {
        pthread_cond_destroy(&pool->wake);
        pthread_mutex_destroy(&pool->mutex);
        free(pool);
        return NULL;
    }
    if (n_threads > 1) {
        pool->workers = calloc((size_t)(n_threads - 1), sizeof(*pool->workers));
        if (!pool->workers) {
            tensor_pool_free(pool);
            return NULL;
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].index = i + 1;
        if (pthread_create(&pool->workers[i].thread, NULL, worker_main, &pool->workers[i]) != 0) {
            tensor_pool_free(pool);
            return NULL;
        }
        pool->n_started++;
    }
    return pool;
}

void tensor_pool_free(struct tensor_pool *pool) {
    if (!pool) return;
    stop_workers(pool);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mutex);
    free(pool->workers);
    free(pool->scratch);
    free(pool);
}

int tensor_pool_size(const struct tensor_pool *pool) {
    return pool ? pool->n_threads : 0;
}

/* Waits until every worker has finished the current job. */
static void wait_for_workers(struct tensor_pool *pool) {
    long long deadline = now_nanoseconds() + SPIN_NANOSECONDS;
    for (int i = 1; atomic_load_explicit(&pool->pending, memory_order_acquire) != 0; i++) {
        cpu_relax();
        if (i % 64 != 0 || now_nanoseconds() < deadline) continue;
        pthread_mutex_lock(&pool->mutex);
        atomic_store(&pool->caller_sleeping, 1);
        while (atomic_load(&pool->pending) != 0) pthread_cond_wait(&pool->done, &pool->mutex);
        atomic_store(&pool->caller_sleeping, 0);
        pthread_mutex_unlock(&pool->mutex);
        return;
    }
}

void tensor_pool_run(struct tensor_pool *pool, tensor_pool_fn fn, void *arg) {
    if (pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store(&pool->pending, pool->n_threads - 1);
    pthread_mutex_lock(&pool->mutex);
    atomic_fetch_add(&pool->generation, 1);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    fn(arg, 0, pool->n_threads);
    wait_for_workers(pool);
}

void *tensor_pool_scratch(struct tensor_pool *pool, size_t size) {
    if (size <= pool->scratch_size && pool->scratch) return pool->scratch;
    size_t rounded = (size + 4096) & ~(size_t)4095; /* never 0 bytes */
    void *memory = aligned_alloc(64, rounded);
    if (!memory) return NULL;
    free(pool->scratch);
    pool->scratch = memory;
    pool->scratch_size = rounded;
    return memory;
}
