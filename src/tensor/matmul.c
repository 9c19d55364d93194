/* matmul.c -- tensor_matmul and tensor_matmul_parts: the threaded driver
 * around the per-ISA kernels.
 *
 * A matmul is two pool jobs at most. For quantized weights the activations
 * are first quantized to Q8_0 (in chunks of batch rows when there are
 * many), unless they were quantized ahead (ahead.c); then the weight rows
 * are cut into contiguous chunks of whole TENSOR_ROW_TILE tiles, and the
 * thread that takes a chunk computes all batch rows for it, so each weight
 * row is read by one thread only. Which thread computes an element never
 * changes how it is computed (see tensor_internal.h), so results depend
 * neither on the thread count nor on the batch.
 *
 * tensor_matmul_parts cuts the columns into parts and gives each its own
 * job: a column view of the weights with its own contiguous activations.
 * The kernels see ordinary matmuls, so a part's sums are the same bits as a
 * tensor_matmul over that column slice -- which is what a tensor-parallel
 * rank holding those columns computes. Where the kernel table has a parts
 * kernel (AVX-512 panels), a thread's chunk of every part is one call, which
 * walks the panels once for all parts.
 *
 * Scratch layout in the pool's memory: quantized activations of every part
 * (quants, block scales, block biases; none when quantized ahead) or, for
 * float weights with several parts, the parts' activation copies; then one
 * 64-byte aligned area per thread. */
#include "tensor_internal.h"

#include <stdint.h>
#include <string.h>

/* Below this many activation elements the caller quantizes alone: waking
 * the workers would cost more than the work. */
#define QUANTIZE_PARALLEL_MIN 32768

struct matmul_run {
    int n_parts;                                     /* column parts (1: a plain matmul) */
    int n_matrices;                                  /* matrices sharing the input (else 1) */
    struct tensor_matrix views[TENSOR_MAX_PARTS];    /* each part's columns of the weights */
    struct tensor_matmul_job jobs[TENSOR_MAX_PARTS]; /* what to compute, per part */
    struct tensor_xq xq[TENSOR_MAX_PARTS];           /* quantized activations, per part */
    const struct tensor_kernels *k;                  /* kernel table, fixed for the whole call */
    tensor_matmul_fn kernel;                         /* the kernel for the weight type */
    tensor_matmul_parts_fn parts_kernel;       /* every part at once (several parts), or NULL */
    const float *x;                            /* (batch, cols) float activations, all parts */
    const struct tensor_ahead *ahead;          /* the input quantized ahead, or NULL */
    const struct tensor_type_traits *dot_type; /* row-dot types: the input's format, else NULL */
    tensor_quantize_fn quantize_input;         /* ... and its quantizer in this kernel table */
    int cols;                                  /* columns of the whole product */
    char *thread_scratch;                      /* first thread's scratch area */
    size_t thread_scratch_bytes;               /* bytes per thread, a multiple of 64 */
    int n_chunks;                              /* chunks of the pool job being run */
};

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* Quantizes (or, for float weights split in parts, copies) the batch rows
 * [b0, b1) of every part's activations. */
static void prepare_rows(struct matmul_run *run, int b0, int b1) {
    int part_cols = run->views[0].cols;
    for (int p = 0; p < run->n_parts; p++) {
        const struct tensor_xq *xq = &run->xq[p];
        for (int b = b0; b < b1; b++) {
            const float *x = run->x + (size_t)b * run->cols + (size_t)p * part_cols;
            if (xq->qs)
                tensor_xq_quantize_row(run->k, xq, run->jobs[0].batch, b, x, part_cols);
            else if (run->dot_type)
                run->quantize_input((char *)run->jobs[p].xa + (size_t)b * run->jobs[p].xa_stride, x,
                                    part_cols);
            else if (run->n_parts > 1)
                memcpy((float *)run->jobs[p].x + (size_t)b * part_cols, x,
                       (size_t)part_cols * sizeof(float));
        }
    }
}

/* Chunks per thread of a product: one. Every chunk starts on a tile that
 * nothing prefetched, and a chunk per thread keeps each thread's weight
 * stream unbroken. Token generation measured 10-20% faster so than with
 * more (Q8_0/Q4_0, 2 threads); with the inputs quantized ahead, decode
 * steps of 16 sequences took about 2% less time than with 2 chunks per
 * thread, 4 and 64 sequences about 1% less, and prefill the same (85M Q8_0
 * model, 2 threads, steps alternated in one process). Quantizing the input
 * here (when not done ahead) takes 2 chunks per thread of batch rows. */
#define CHUNKS_PER_THREAD          1
#define QUANTIZE_CHUNKS_PER_THREAD 2

static int chunk_count(int items, int n_threads, int per_thread) {
    return items < per_thread * n_threads ? items : per_thread * n_threads;
}

static void prepare_chunk(void *arg, int chunk, int thread) {
    (void)thread;
    struct matmul_run *run = arg;
    int batch = run->jobs[0].batch;
    prepare_rows(run, (int)((int64_t)batch * chunk / run->n_chunks),
                 (int)((int64_t)batch * (chunk + 1) / run->n_chunks));
}

static int tile_count(int rows) {
    return (rows + TENSOR_ROW_TILE - 1) / TENSOR_ROW_TILE;
}

/* Row tiles of the whole job: of one matrix (every part has them all), or
 * of all the matrices one after the other. */
static int job_tiles(const struct matmul_run *run) {
    int tiles = 0;
    for (int i = 0; i < run->n_matrices; i++) tiles += tile_count(run->views[i].rows);
    return tiles;
}

/* Runs job's kernel over its tiles [first, last) (clipped to its rows). */
static void run_tiles(const struct matmul_run *run, const struct tensor_matmul_job *job, int first,
                      int last, int thread) {
    int rows = job->w->rows;
    int row_begin = first * TENSOR_ROW_TILE;
    int row_end = last * TENSOR_ROW_TILE < rows ? last * TENSOR_ROW_TILE : rows;
    if (row_begin < row_end)
        run->kernel(job, row_begin, row_end,
                    run->thread_scratch + (size_t)thread * run->thread_scratch_bytes);
}

/* Every part's tiles [first, last) (clipped to the rows) in one call. */
static void run_parts_tiles(const struct matmul_run *run, int first, int last, int thread) {
    int rows = run->jobs[0].w->rows;
    int row_begin = first * TENSOR_ROW_TILE;
    int row_end = last * TENSOR_ROW_TILE < rows ? last * TENSOR_ROW_TILE : rows;
    if (row_begin < row_end)
        run->parts_kernel(run->jobs, run->n_parts, row_begin, row_end,
                          run->thread_scratch + (size_t)thread * run->thread_scratch_bytes);
}

/* Chunk c covers a contiguous range of whole row tiles of the job: in every
 * part, or across the matrices that share the input. */
static void matmul_chunk(void *arg, int chunk, int thread) {
    struct matmul_run *run = arg;
    int tiles = job_tiles(run);
    int first = (int)((int64_t)tiles * chunk / run->n_chunks);
    int last = (int)((int64_t)tiles * (chunk + 1) / run->n_chunks);
    if (run->parts_kernel) {
        run_parts_tiles(run, first, last, thread);
        return;
    }
    if (run->n_matrices == 1) {
        for (int p = 0; p < run->n_parts; p++) run_tiles(run, &run->jobs[p], first, last, thread);
        return;
    }
    for (int i = 0, base = 0; i < run->n_matrices && base < last; i++) {
        int own = tile_count(run->views[i].rows);
        int begin = first > base ? first - base : 0;
        int end = last - base < own ? last - base : own;
        if (begin < end) run_tiles(run, &run->jobs[i], begin, end, thread);
        base += own;
    }
}

const struct tensor_type_kernels *tensor_row_for(const struct tensor_kernels *k,
                                                 const struct tensor_matrix *w) {
    static const struct tensor_type_kernels none;
    int type = (int)w->type;
    return type >= 0 && type < TENSOR_TYPE_COUNT ? &k->types[type] : &none;
}

tensor_matmul_fn tensor_kernel_for(const struct tensor_kernels *k, const struct tensor_matrix *w) {
    const struct tensor_type_kernels *row = tensor_row_for(k, w);
    if (w->layout == TENSOR_LAYOUT_PANELS) return row->matmul_panels;
    if (row->matmul) return row->matmul;
    return row->row_dot ? tensor_matmul_row_dots : NULL;
}

enum tensor_input tensor_input_for(const struct tensor_kernels *k, const struct tensor_matrix *w) {
    const struct tensor_type_kernels *row = tensor_row_for(k, w);
    if (w->layout == TENSOR_LAYOUT_PANELS) return TENSOR_INPUT_BLOCKS;
    return row->matmul ? row->input : TENSOR_INPUT_DOT_TYPE;
}

void tensor_xq_layout_for(const struct tensor_kernels *k, const struct tensor_matrix *w,
                          struct tensor_xq *xq) {
    const struct tensor_type_kernels *row = tensor_row_for(k, w);
    int panels = w->layout == TENSOR_LAYOUT_PANELS;
    xq->offset = panels ? row->panels_offset : row->input_offset;
    xq->interleaved = panels && row->panels_interleaved;
}

/* 1 if w's products quantize their input to Q8_0 blocks for a matmul
 * kernel of their own (struct tensor_xq). */
static int quantized_for_kernel(const struct matmul_run *run) {
    return tensor_input_for(run->k, &run->views[0]) == TENSOR_INPUT_BLOCKS;
}

/* Row-dot types: the input's format and the row dot, in every job. */
static void set_row_dots(struct matmul_run *run, int n_jobs) {
    if (run->kernel != tensor_matmul_row_dots) return;
    const struct tensor_type_kernels *row = tensor_row_for(run->k, &run->views[0]);
    run->dot_type = tensor_type_traits(tensor_type_traits((int)run->views[0].type)->dot_type);
    /* Q8_K, the k-quants' input, has vector versions */
    run->quantize_input =
        run->dot_type->type == TENSOR_Q8_K ? run->k->quantize_q8_k : run->dot_type->quantize;
    for (int i = 0; i < n_jobs; i++) {
        run->jobs[i].row_dot = row->row_dot;
        run->jobs[i].row_dots = row->row_dots;
    }
}

/* Lays out the pool's scratch for the parts' activations (unless they were
 * quantized ahead) and the threads; -1 if it cannot be allocated. */
static int place_scratch(struct tensor_pool *pool, struct matmul_run *run) {
    const struct tensor_matrix *w = &run->views[0];
    int batch = run->jobs[0].batch, n_threads = tensor_pool_size(pool);
    int quantized = quantized_for_kernel(run);
    size_t values = (size_t)batch * (size_t)w->cols; /* per part */
    size_t blocks = values / TENSOR_QK;
    size_t qs_bytes = quantized ? align64(values) : 0;
    size_t d_bytes = quantized ? align64(blocks * sizeof(float)) : 0;
    size_t bias_bytes = quantized ? align64(blocks * sizeof(int32_t)) : 0;
    size_t xa_stride = run->dot_type ? tensor_row_bytes(run->dot_type->type, w->cols) : 0;
    size_t xa_bytes = align64((size_t)batch * xa_stride);
    size_t copy_bytes =
        !quantized && !run->dot_type && run->n_parts > 1 ? align64(values * sizeof(float)) : 0;
    size_t part_bytes = run->ahead ? 0 : qs_bytes + d_bytes + bias_bytes + xa_bytes + copy_bytes;
    /* panels need no scratch of their own */
    tensor_scratch_fn thread_scratch = tensor_row_for(run->k, w)->scratch;
    run->thread_scratch_bytes = w->layout == TENSOR_LAYOUT_PANELS || !thread_scratch
                                    ? 0
                                    : align64(thread_scratch(w->type, w->cols, batch));
    char *scratch = tensor_pool_scratch(pool, (size_t)run->n_parts * part_bytes +
                                                  (size_t)n_threads * run->thread_scratch_bytes);
    if (!scratch) return -1;
    run->thread_scratch = scratch + (size_t)run->n_parts * part_bytes;
    for (int p = 0; p < run->n_parts; p++, scratch += part_bytes) {
        if (run->ahead) {
            run->xq[p] = run->ahead->xq[p];
            run->jobs[p].xq = &run->xq[p];
        } else if (quantized) {
            run->xq[p].qs = (void *)scratch;
            run->xq[p].d = (void *)(scratch + qs_bytes);
            run->xq[p].bias = (void *)(scratch + qs_bytes + d_bytes);
            tensor_xq_layout_for(run->k, w, &run->xq[p]);
            run->jobs[p].xq = &run->xq[p];
        } else if (run->dot_type) {
            run->jobs[p].xa = scratch;
            run->jobs[p].xa_stride = xa_stride;
        } else if (run->n_parts > 1) {
            run->jobs[p].x = (const void *)scratch;
        }
    }
    /* matrices that share the input share its quantization */
    for (int i = 1; i < run->n_matrices; i++) {
        run->jobs[i].xq = run->jobs[0].xq;
        run->jobs[i].xa = run->jobs[0].xa;
        run->jobs[i].xa_stride = run->jobs[0].xa_stride;
    }
    return 0;
}

static int run_matmul(struct tensor_pool *pool, struct matmul_run *run) {
    int batch = run->jobs[0].batch, n_threads = tensor_pool_size(pool);
    int prepared = quantized_for_kernel(run) || run->dot_type || run->n_parts > 1;
    if (place_scratch(pool, run)) return -1;
    if (!run->ahead && prepared) {
        if ((size_t)batch * (size_t)run->cols < QUANTIZE_PARALLEL_MIN || n_threads == 1) {
            prepare_rows(run, 0, batch);
        } else {
            run->n_chunks = chunk_count(batch, n_threads, QUANTIZE_CHUNKS_PER_THREAD);
            tensor_pool_run_chunks(pool, prepare_chunk, run, run->n_chunks);
        }
    }
    run->n_chunks = chunk_count(job_tiles(run), n_threads, CHUNKS_PER_THREAD);
    tensor_pool_run_chunks(pool, matmul_chunk, run, run->n_chunks);
    return 0;
}

/* Columns [first, first + cols) of w, as a matrix of its own. */
static struct tensor_matrix column_view(const struct tensor_matrix *w, int first, int cols) {
    struct tensor_matrix view = *w;
    view.cols = cols;
    if (w->layout == TENSOR_LAYOUT_PANELS) {
        /* the view's panels start at its first block; its scales lie as far
         * beyond the whole matrix's scales as its first block is */
        size_t block = (size_t)(first / TENSOR_QK), quants = tensor_panel_quants(w->type);
        view.data = (const char *)w->data + block * quants;
        view.scales_offset = w->scales_offset - block * (quants - TENSOR_PANEL_SCALES);
    } else {
        view.data = (const char *)w->data + tensor_row_bytes(w->type, first);
    }
    return view;
}

int tensor_split_fits(const struct tensor_matrix *w, int n_parts) {
    int block = tensor_type_block_elements(w->type);
    if (block < 1 || n_parts < 1 || n_parts > TENSOR_MAX_PARTS || w->cols % n_parts) return 0;
    return (w->cols / n_parts) % block == 0;
}

/* Fills run for w cut into n_parts column parts, out (n_parts, batch,
 * w->rows); -1 for a bad split or a type without a kernel. */
static int plan_parts(struct matmul_run *run, float *out, const struct tensor_matrix *w,
                      const float *x, int batch, int n_parts) {
    if (!tensor_split_fits(w, n_parts)) return -1;
    int part_cols = w->cols / n_parts;
    run->n_matrices = 1;
    run->k = tensor_kernels_current();
    run->kernel = tensor_kernel_for(run->k, w);
    if (!run->kernel) return -1;
    run->n_parts = n_parts;
    if (n_parts > 1 && w->layout == TENSOR_LAYOUT_PANELS)
        run->parts_kernel = tensor_row_for(run->k, w)->matmul_panels_parts;
    run->x = x;
    run->cols = w->cols;
    for (int p = 0; p < n_parts; p++) {
        run->views[p] = column_view(w, p * part_cols, part_cols);
        run->jobs[p] = (struct tensor_matmul_job){
            .w = &run->views[p], .x = x, .out = out + (size_t)p * batch * w->rows, .batch = batch};
    }
    set_row_dots(run, n_parts);
    return 0;
}

/* Runs run on pool or, without one, on the caller alone with a temporary
 * scratch owner. */
static int run_on(struct tensor_pool *pool, struct matmul_run *run) {
    if (pool) return run_matmul(pool, run);
    struct tensor_pool *own = tensor_pool_create(1);
    if (!own) return -1;
    int status = run_matmul(own, run);
    tensor_pool_free(own);
    return status;
}

int tensor_matmul_parts(struct tensor_pool *pool, float *out, const struct tensor_matrix *w,
                        const float *x, int batch, int n_parts) {
    if (batch <= 0 || w->rows <= 0 || w->cols <= 0) return 0;
    struct matmul_run run = {0};
    if (plan_parts(&run, out, w, x, batch, n_parts)) return -1;
    return run_on(pool, &run);
}

int tensor_matmul(struct tensor_pool *pool, float *out, const struct tensor_matrix *w,
                  const float *x, int batch) {
    return tensor_matmul_parts(pool, out, w, x, batch, 1);
}

int tensor_share_input(const struct tensor_matrix *const *ws, int n) {
    for (int i = 1; i < n; i++)
        if (ws[i]->type != ws[0]->type || ws[i]->layout != ws[0]->layout ||
            ws[i]->cols != ws[0]->cols)
            return 0;
    return 1;
}

/* Fills run for n matrices sharing the input x; -1 for a type without a
 * kernel. */
static int plan_many(struct matmul_run *run, float *const *outs,
                     const struct tensor_matrix *const *ws, int n, const float *x, int batch) {
    run->n_parts = 1;
    run->n_matrices = n;
    run->k = tensor_kernels_current();
    run->kernel = tensor_kernel_for(run->k, ws[0]);
    if (!run->kernel) return -1;
    run->x = x;
    run->cols = ws[0]->cols;
    for (int i = 0; i < n; i++) {
        run->views[i] = *ws[i];
        run->jobs[i] =
            (struct tensor_matmul_job){.w = &run->views[i], .x = x, .out = outs[i], .batch = batch};
    }
    set_row_dots(run, n);
    return 0;
}

int tensor_matmul_many(struct tensor_pool *pool, float *const *outs,
                       const struct tensor_matrix *const *ws, int n, const float *x, int batch) {
    if (n < 1 || n > TENSOR_MAX_PARTS || !pool || !tensor_share_input(ws, n)) {
        for (int i = 0; i < n; i++)
            if (tensor_matmul(pool, outs[i], ws[i], x, batch)) return -1;
        return 0;
    }
    if (batch <= 0 || ws[0]->cols <= 0) return 0;
    struct matmul_run run = {0};
    if (plan_many(&run, outs, ws, n, x, batch)) return -1;
    return run_matmul(pool, &run);
}

/* 1 if ahead was laid out, for the kernels in use, for products with w cut
 * into n_parts. */
static int ahead_fits(const struct tensor_ahead *ahead, const struct tensor_matrix *w,
                      int n_parts) {
    return ahead->batch > 0 && ahead->k == tensor_kernels_current() && ahead->type == w->type &&
           ahead->layout == w->layout && ahead->cols == w->cols && ahead->n_parts == n_parts;
}

int tensor_matmul_many_ahead(struct tensor_pool *pool, float *const *outs,
                             const struct tensor_matrix *const *ws, int n,
                             const struct tensor_ahead *ahead) {
    if (n < 1 || n > TENSOR_MAX_PARTS || !tensor_share_input(ws, n) || !ahead_fits(ahead, ws[0], 1))
        return -1;
    struct matmul_run run = {0};
    if (plan_many(&run, outs, ws, n, NULL, ahead->batch)) return -1;
    run.ahead = ahead;
    return run_on(pool, &run);
}

int tensor_matmul_parts_ahead(struct tensor_pool *pool, float *out, const struct tensor_matrix *w,
                              const struct tensor_ahead *ahead) {
    if (!ahead_fits(ahead, w, ahead->n_parts)) return -1;
    struct matmul_run run = {0};
    if (plan_parts(&run, out, w, NULL, ahead->batch, ahead->n_parts)) return -1;
    run.ahead = ahead;
    return run_on(pool, &run);
}
