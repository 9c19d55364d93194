/* test_tensor_pool.c -- the thread pool: every thread runs every job exactly
 * once with the right index and count, for pools of 1..4 threads and many
 * back-to-back jobs; every chunk of a chunked job runs exactly once (also
 * when interleaved with whole jobs, and with workers arriving after the job
 * closed); jobs still run after the workers have gone to sleep and
 * when the caller has to sleep waiting for a slow worker; an idle pool uses
 * (almost) no CPU time; create/free cycles do not leak or hang. */
#include "tensor/tensor.h"
#include "testutil.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 4

struct count_job {
    int calls[MAX_THREADS];         /* calls seen per thread index, this job */
    atomic_int bad_count;           /* calls that reported a wrong n_threads */
    int expected_threads;           /* the pool's size */
    atomic_int total;               /* calls over all threads */
    long long partial[MAX_THREADS]; /* each thread's share of a sum */
    int sleep_thread;               /* this thread sleeps 3 ms in the job (-1: none) */
};

static void sleep_milliseconds(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void count_fn(void *arg, int thread, int n_threads) {
    struct count_job *job = arg;
    if (n_threads != job->expected_threads || thread < 0 || thread >= n_threads) {
        atomic_fetch_add(&job->bad_count, 1);
        return;
    }
    job->calls[thread]++;
    atomic_fetch_add(&job->total, 1);
    /* thread t sums i over its contiguous share of [0, 100000) */
    long long first = 100000LL * thread / n_threads, last = 100000LL * (thread + 1) / n_threads;
    long long sum = 0;
    for (long long i = first; i < last; i++) sum += i;
    job->partial[thread] = sum;
    if (thread == job->sleep_thread) sleep_milliseconds(3);
}

/* Runs one job and checks every thread took part once and the sum is right. */
static int run_and_check(struct tensor_pool *pool, int sleep_thread) {
    struct count_job job;
    memset(&job, 0, sizeof(job));
    job.expected_threads = tensor_pool_size(pool);
    job.sleep_thread = sleep_thread;
    atomic_init(&job.total, 0);
    atomic_init(&job.bad_count, 0);
    tensor_pool_run(pool, count_fn, &job);
    int ok = atomic_load(&job.bad_count) == 0 && atomic_load(&job.total) == job.expected_threads;
    long long sum = 0;
    for (int t = 0; t < job.expected_threads; t++) {
        ok = ok && job.calls[t] == 1;
        sum += job.partial[t];
    }
    return ok && sum == 100000LL * 99999 / 2;
}

#define MAX_CHUNKS 300

struct chunk_job {
    atomic_int calls[MAX_CHUNKS]; /* times each chunk ran */
    atomic_int bad_thread;        /* calls with an out-of-range thread index */
    int n_threads;                /* the pool's size */
    int slow_chunk;               /* this chunk sleeps 2 ms (-1: none) */
};

static void chunk_fn(void *arg, int chunk, int thread) {
    struct chunk_job *job = arg;
    if (thread < 0 || thread >= job->n_threads) atomic_fetch_add(&job->bad_thread, 1);
    atomic_fetch_add(&job->calls[chunk], 1);
    if (chunk == job->slow_chunk) sleep_milliseconds(2);
}

/* Runs n_chunks chunks and checks each ran exactly once. */
static int run_chunks_and_check(struct tensor_pool *pool, int n_chunks, int slow_chunk) {
    static struct chunk_job job;
    for (int c = 0; c < MAX_CHUNKS; c++) atomic_init(&job.calls[c], 0);
    atomic_init(&job.bad_thread, 0);
    job.n_threads = tensor_pool_size(pool);
    job.slow_chunk = slow_chunk;
    tensor_pool_run_chunks(pool, chunk_fn, &job, n_chunks);
    int ok = atomic_load(&job.bad_thread) == 0;
    for (int c = 0; c < MAX_CHUNKS; c++) ok = ok && atomic_load(&job.calls[c]) == (c < n_chunks);
    return ok;
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
    CHECK(tensor_pool_create(0) == NULL);
    CHECK(tensor_pool_size(NULL) == 0);

    for (int n = 1; n <= MAX_THREADS; n++) {
        struct tensor_pool *pool = tensor_pool_create(n);
        CHECK(pool != NULL);
        if (!pool) continue;
        CHECK(tensor_pool_size(pool) == n);
        int failures = 0;
        for (int i = 0; i < 2000; i++) failures += !run_and_check(pool, -1);
        CHECK_MSG(failures == 0, "%d threads: %d of 2000 back-to-back jobs went wrong", n,
                  failures);

        /* chunked jobs, many of them tiny (workers often arrive after the caller
         * has done every chunk and closed the job), interleaved with whole jobs */
        failures = 0;
        for (int i = 0; i < 3000; i++) {
            failures += !run_chunks_and_check(pool, 1 + (i * 7) % MAX_CHUNKS, -1);
            if (i % 3 == 0) failures += !run_and_check(pool, -1);
        }
        CHECK_MSG(failures == 0, "%d threads: %d chunked jobs went wrong", n, failures);
        CHECK_MSG(run_chunks_and_check(pool, 0, -1), "%d threads: zero chunks", n);
        CHECK_MSG(run_chunks_and_check(pool, 40, 0), "%d threads: slow first chunk", n);
        CHECK_MSG(run_chunks_and_check(pool, 40, 39), "%d threads: slow last chunk", n);

        /* workers asleep (idle well past their spin), then woken by a job */
        sleep_milliseconds(5);
        CHECK_MSG(run_and_check(pool, -1), "%d threads: job after idle sleep", n);
        sleep_milliseconds(5);
        CHECK_MSG(run_chunks_and_check(pool, 64, -1), "%d threads: chunks after idle sleep", n);
        /* the caller gives up spinning while the last thread works 3 ms */
        CHECK_MSG(run_and_check(pool, n - 1), "%d threads: job with a slow thread", n);
        CHECK_MSG(run_and_check(pool, 0), "%d threads: job with a slow caller", n);

        /* idle: 200 ms of waiting costs the workers well under 200 ms of CPU */
        double before = cpu_seconds();
        sleep_milliseconds(200);
        double used = cpu_seconds() - before;
        CHECK_MSG(used < 0.05, "%d threads: idle pool used %.3f s of CPU in 0.2 s", n, used);
        CHECK(run_and_check(pool, -1));
        tensor_pool_free(pool);
    }

    /* create and free repeatedly, with and without having run a job */
    for (int i = 0; i < 50; i++) {
        struct tensor_pool *pool = tensor_pool_create(1 + i % MAX_THREADS);
        CHECK(pool != NULL);
        if (i % 2) CHECK(run_and_check(pool, -1));
        tensor_pool_free(pool);
    }
    tensor_pool_free(NULL);
    return test_status("test_tensor_pool");
}
