/* matmul.c -- tensor_matmul: the threaded driver around the per-ISA kernels.
 *
 * A matmul is two pool jobs at most. For quantized weights the activations
 * are first quantized to Q8_0 (in chunks of batch rows when there are
 * many); then the weight rows are cut into contiguous chunks of whole
 * TENSOR_ROW_TILE tiles, and the thread that takes a chunk computes all
 * batch rows for it, so each weight row is read by one thread only. Which
 * thread computes an element never changes how it is computed (see
 * tensor_internal.h), so results depend neither on the thread count nor on
 * the batch.
 *
 * Scratch layout in the pool's memory: quantized activations (quants, block
 * scales, block biases), then one 64-byte aligned area per thread. */
#include "tensor_internal.h"

#include <stdint.h>

/* Below this many activation elements the caller quantizes alone: waking
 * the workers would cost more than the work. */
#define QUANTIZE_PARALLEL_MIN 32768

struct matmul_run {
    struct tensor_matmul_job job;   /* what to compute */
    const struct tensor_kernels *k; /* kernel table, fixed for the whole call */
    tensor_matmul_fn kernel;        /* the kernel for the weight type */
    const float *x;                 /* float activations, for quantizing */
    struct tensor_xq xq;            /* quantized activations */
    char *thread_scratch;           /* first thread's scratch area */
    size_t thread_scratch_bytes;    /* bytes per thread, a multiple of 64 */
    int n_chunks;                   /* chunks of the pool job being run */
};

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* Quantizes the batch rows [b0, b1). */
static void quantize_rows(struct matmul_run *run, int b0, int b1) {
    int cols = run->job.w->cols, blocks = cols / TENSOR_QK;
    for (int b = b0; b < b1; b++)
        run->k->quantize_x(run->xq.qs + (size_t)b * cols, run->xq.d + (size_t)b * blocks,
                           run->xq.bias + (size_t)b * blocks, run->x + (size_t)b * cols, cols,
                           run->xq.offset);
}

/* Chunks per thread: more balance on a busy machine, fewer breaks in the
 * weight streams. */
#define CHUNKS_PER_THREAD 4

static int chunk_count(int items, int n_threads) {
    return items < CHUNKS_PER_THREAD * n_threads ? items : CHUNKS_PER_THREAD * n_threads;
}

static void quantize_chunk(void *arg, int chunk, int thread) {
    struct matmul_run *run = arg;
    (void)thread;
    int batch = run->job.batch;
    quantize_rows(run, (int)((int64_t)batch * chunk / run->n_chunks),
                  (int)((int64_t)batch * (chunk + 1) / run->n_chunks));
}

/* Chunk c covers a contiguous range of whole row tiles. */
static void matmul_chunk(void *arg, int chunk, int thread) {
    struct matmul_run *run = arg;
    int rows = run->job.w->rows;
    int tiles = (rows + TENSOR_ROW_TILE - 1) / TENSOR_ROW_TILE;
    int first = (int)((int64_t)tiles * chunk / run->n_chunks);
    int last = (int)((int64_t)tiles * (chunk + 1) / run->n_chunks);
    int row_begin = first * TENSOR_ROW_TILE;
    int row_end = last * TENSOR_ROW_TILE < rows ? last * TENSOR_ROW_TILE : rows;
    if (row_begin >= row_end) return;
    run->kernel(&run->job, row_begin, row_end,
                run->thread_scratch + (size_t)thread * run->thread_scratch_bytes);
}

static tensor_matmul_fn kernel_for(const struct tensor_kernels *k, enum tensor_type type) {
    switch (type) {
    case TENSOR_F32:
        return k->matmul_f32;
    case TENSOR_F16:
        return k->matmul_f16;
    case TENSOR_Q8_0:
        return k->matmul_q8_0;
    case TENSOR_Q4_0:
        return k->matmul_q4_0;
    }
    return NULL;
}

static int run_matmul(struct tensor_pool *pool, struct matmul_run *run) {
    const struct tensor_matrix *w = run->job.w;
    int batch = run->job.batch, n_threads = tensor_pool_size(pool);
    int quantized = w->type == TENSOR_Q8_0 || w->type == TENSOR_Q4_0;
    size_t blocks = (size_t)batch * (size_t)(w->cols / TENSOR_QK);
    size_t qs_bytes = quantized ? align64((size_t)batch * (size_t)w->cols) : 0;
    size_t d_bytes = quantized ? align64(blocks * sizeof(float)) : 0;
    size_t bias_bytes = quantized ? align64(blocks * sizeof(int32_t)) : 0;
    run->thread_scratch_bytes = align64(run->k->matmul_scratch(w->type, w->cols, batch));
    char *scratch = tensor_pool_scratch(pool, qs_bytes + d_bytes + bias_bytes +
                                                  (size_t)n_threads * run->thread_scratch_bytes);
    if (!scratch) return -1;
    run->thread_scratch = scratch + qs_bytes + d_bytes + bias_bytes;
    if (quantized) {
        run->xq.qs = (void *)scratch;
        run->xq.d = (void *)(scratch + qs_bytes);
        run->xq.bias = (void *)(scratch + qs_bytes + d_bytes);
        run->xq.offset = w->type == TENSOR_Q8_0 ? run->k->q8_0_offset : run->k->q4_0_offset;
        run->job.xq = &run->xq;
        if ((size_t)batch * (size_t)w->cols < QUANTIZE_PARALLEL_MIN || n_threads == 1) {
            quantize_rows(run, 0, batch);
        } else {
            run->n_chunks = chunk_count(batch, n_threads);
            tensor_pool_run_chunks(pool, quantize_chunk, run, run->n_chunks);
        }
    }
    run->n_chunks = chunk_count((w->rows + TENSOR_ROW_TILE - 1) / TENSOR_ROW_TILE, n_threads);
    tensor_pool_run_chunks(pool, matmul_chunk, run, run->n_chunks);
    return 0;
}

int tensor_matmul(struct tensor_pool *pool, float *out, const struct tensor_matrix *w,
                  const float *x, int batch) {
    if (batch <= 0 || w->rows <= 0 || w->cols <= 0) return 0;
    struct matmul_run run = {0};
    run.k = tensor_kernels_current();
    run.kernel = kernel_for(run.k, w->type);
    if (!run.kernel) return -1;
    if ((w->type == TENSOR_Q8_0 || w->type == TENSOR_Q4_0) && w->cols % TENSOR_QK != 0) return -1;
    run.job.w = w;
    run.job.x = x;
    run.job.out = out;
    run.job.batch = batch;
    run.x = x;
    if (pool) return run_matmul(pool, &run);
    /* no pool: run on the caller alone, with a temporary scratch owner */
    struct tensor_pool *own = tensor_pool_create(1);
    if (!own) return -1;
    int status = run_matmul(own, &run);
    tensor_pool_free(own);
    return status;
}
