/* pool.c -- the persistent thread pool every parallel kernel runs on.
 *
 * A job is published by storing a new generation in the pool's state word;
 * workers notice it while spinning (for up to SPIN_NANOSECONDS after their
 * last job, so back-to-back kernels of a forward pass do not pay a wake-up),
 * or are woken from a condition variable once they have gone to sleep. An
 * idle pool therefore sleeps and uses no core.
 *
 * A worker takes part in a job by joining it: a compare-and-swap that adds
 * one to the joined count in the state word, and fails once the job is
 * closed. tensor_pool_run never closes its job (every thread must run fn);
 * tensor_pool_run_chunks hands out chunks from a shared counter and closes
 * the job when the caller finds no chunk left, so a worker the scheduler has
 * not run yet is simply not waited for. In both cases the caller waits only
 * for workers that joined, spinning briefly and then sleeping.
 *
 * The pool also owns the scratch memory matmuls need (quantized activations,
 * repacked weight panels), grown on demand and reused across calls. */
#include "tensor_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
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

/* The longest a caller sleeps before it looks at its workers again. */
#define CALLER_SLEEP_NANOSECONDS 1000000L

/* The state word: generation in the high 32 bits, a closed flag, and the
 * number of workers that joined the job in the low bits. */
#define STATE_CLOSED        ((uint64_t)1 << 31)
#define STATE_JOINED_MASK   (STATE_CLOSED - 1)
#define STATE_GENERATION(s) ((uint32_t)((s) >> 32))

struct pool_worker {
    struct tensor_pool *pool; /* owner */
    int index;                /* thread index, 1 .. n_threads - 1 */
    pthread_t thread;         /* the worker thread */
};

struct tensor_pool {
    int n_threads;               /* threads taking part, caller included */
    struct pool_worker *workers; /* n_threads - 1 workers */
    int n_started;               /* workers whose thread was created */

    /* the current job, written by the caller before it publishes the state */
    tensor_pool_fn fn;             /* what every joined worker calls */
    void *arg;                     /* its argument */
    tensor_pool_chunk_fn chunk_fn; /* chunked jobs: the per-chunk function */
    void *chunk_arg;               /* its argument */
    int n_chunks;                  /* chunks 0 .. n_chunks - 1 */
    atomic_int next_chunk;         /* next chunk to hand out */

    _Atomic uint64_t state;     /* generation | closed | joined, see above */
    atomic_int finished;        /* joined workers done with the current job */
    atomic_int stop;            /* 1 tells workers to exit */
    atomic_int caller_sleeping; /* 1 while the caller waits on done */

    pthread_mutex_t mutex; /* guards the sleeps below */
    pthread_cond_t wake;   /* workers sleep here between jobs */
    pthread_cond_t done;   /* the caller sleeps here until joined workers finish */

    void *scratch;       /* tensor_pool_scratch memory, 64-byte aligned */
    size_t scratch_size; /* its size in bytes */
};

static long long now_nanoseconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int job_published(struct tensor_pool *pool, uint32_t seen) {
    return STATE_GENERATION(atomic_load(&pool->state)) != seen || atomic_load(&pool->stop);
}

/* Waits until a generation other than seen is published, or stop. */
static void wait_for_job(struct tensor_pool *pool, uint32_t seen) {
    long long deadline = now_nanoseconds() + SPIN_NANOSECONDS;
    for (int i = 1; !job_published(pool, seen); i++) {
        cpu_relax();
        if (i % 64 != 0 || now_nanoseconds() < deadline) continue;
        pthread_mutex_lock(&pool->mutex);
        while (!job_published(pool, seen)) pthread_cond_wait(&pool->wake, &pool->mutex);
        pthread_mutex_unlock(&pool->mutex);
        return;
    }
}

/* Joins the job of generation seen unless it is closed; 1 if joined. */
static int join_job(struct tensor_pool *pool, uint32_t seen) {
    uint64_t s = atomic_load(&pool->state);
    while (STATE_GENERATION(s) == seen && !(s & STATE_CLOSED))
        if (atomic_compare_exchange_weak(&pool->state, &s, s + 1)) return 1;
    return 0;
}

static void *worker_main(void *opaque) {
    struct pool_worker *self = opaque;
    struct tensor_pool *pool = self->pool;
    uint32_t seen = 0;
    for (;;) {
        wait_for_job(pool, seen);
        if (atomic_load(&pool->stop)) return NULL;
        seen = STATE_GENERATION(atomic_load(&pool->state));
        if (!join_job(pool, seen)) continue; /* closed before this thread got to it */
        pool->fn(pool->arg, self->index, pool->n_threads);
        atomic_fetch_add(&pool->finished, 1);
        atomic_thread_fence(memory_order_seq_cst); /* see wait_for_workers */
        if (atomic_load(&pool->caller_sleeping)) {
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

/* A condition variable whose timed waits count on CLOCK_MONOTONIC. */
static int init_monotonic_cond(pthread_cond_t *cond) {
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0) return -1;
    int failed = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
                 pthread_cond_init(cond, &attr) != 0;
    pthread_condattr_destroy(&attr);
    return failed ? -1 : 0;
}

struct tensor_pool *tensor_pool_create(int n_threads) {
    if (n_threads < 1) return NULL;
    struct tensor_pool *pool = calloc(1, sizeof(*pool));
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    atomic_init(&pool->next_chunk, 0);
    atomic_init(&pool->state, 0);
    atomic_init(&pool->finished, 0);
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
    if (init_monotonic_cond(&pool->done) != 0) {
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

/* Publishes fn(arg) as a new, open job and wakes sleeping workers. */
static void publish(struct tensor_pool *pool, tensor_pool_fn fn, void *arg) {
    pool->fn = fn;
    pool->arg = arg;
    atomic_store(&pool->finished, 0);
    uint32_t generation = STATE_GENERATION(atomic_load(&pool->state)) + 1;
    pthread_mutex_lock(&pool->mutex);
    atomic_store(&pool->state, (uint64_t)generation << 32);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
}

/* Sleeps on done for at most CALLER_SLEEP_NANOSECONDS (the caller holds
 * the mutex). */
static void sleep_on_done(struct tensor_pool *pool) {
    long long until = now_nanoseconds() + CALLER_SLEEP_NANOSECONDS;
    struct timespec ts = {(time_t)(until / 1000000000LL), (long)(until % 1000000000LL)};
    pthread_cond_timedwait(&pool->done, &pool->mutex, &ts);
}

/* Waits until count workers have finished the current job.
 *
 * The caller stores caller_sleeping and then loads finished; a worker adds
 * to finished and then loads caller_sleeping. One of the two must see the
 * other's store, or the worker does not signal and the caller sleeps on.
 * C11's sequentially consistent accesses promise that. An emulator may
 * keep them less well: test_tensor_pool once hung for 600 s under
 * qemu-aarch64 on x86, where the same test ran 12 times in 5-6 s each, so
 * the cause is not proven. Each side puts a full fence between its store
 * and its load, and the caller's sleep is bounded all the same: a missed
 * signal costs it CALLER_SLEEP_NANOSECONDS, never a hang. */
static void wait_for_workers(struct tensor_pool *pool, int count) {
    long long deadline = now_nanoseconds() + SPIN_NANOSECONDS;
    for (int i = 1; atomic_load(&pool->finished) != count; i++) {
        cpu_relax();
        if (i % 64 != 0 || now_nanoseconds() < deadline) continue;
        pthread_mutex_lock(&pool->mutex);
        atomic_store(&pool->caller_sleeping, 1);
        atomic_thread_fence(memory_order_seq_cst);
        while (atomic_load(&pool->finished) != count) sleep_on_done(pool);
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
    publish(pool, fn, arg);
    fn(arg, 0, pool->n_threads);
    wait_for_workers(pool, pool->n_threads - 1);
}

/* Every joined thread takes chunks until none is left. */
static void run_chunks(void *arg, int thread, int n_threads) {
    struct tensor_pool *pool = arg;
    (void)n_threads;
    for (int chunk; (chunk = atomic_fetch_add(&pool->next_chunk, 1)) < pool->n_chunks;)
        pool->chunk_fn(pool->chunk_arg, chunk, thread);
}

void tensor_pool_run_chunks(struct tensor_pool *pool, tensor_pool_chunk_fn fn, void *arg,
                            int n_chunks) {
    if (pool->n_threads == 1 || n_chunks <= 1) {
        for (int chunk = 0; chunk < n_chunks; chunk++) fn(arg, chunk, 0);
        return;
    }
    pool->chunk_fn = fn;
    pool->chunk_arg = arg;
    pool->n_chunks = n_chunks;
    atomic_store(&pool->next_chunk, 0);
    publish(pool, run_chunks, pool);
    run_chunks(pool, 0, pool->n_threads);
    /* no chunk is left: workers that have not joined yet need not */
    uint64_t state = atomic_fetch_or(&pool->state, STATE_CLOSED);
    wait_for_workers(pool, (int)(state & STATE_JOINED_MASK));
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
