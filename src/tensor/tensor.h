/* tensor.h -- the kernels every forward pass is made of, and the thread pool
 * that runs them.
 *
 * This is the bottom module: it knows nothing of models or files. Weights are
 * described by struct tensor_matrix, a (rows, cols) row-major view of memory
 * that may be memory-mapped from a model file; quantized types use ggml's
 * block layouts byte for byte so GGUF tensors are used in place.
 *
 * Every kernel has a scalar reference; x86 (AVX2, AVX-512) and arm64 (NEON,
 * dotprod, i8mm) versions are chosen at run time from what the CPU reports
 * (tensor_isa_select forces one for tests), and all give the reference's
 * bits. Batch
 * invariance: the value of each output element of tensor_matmul is computed
 * by the same sequence of floating-point operations whatever the batch size
 * and whichever thread computes it, so a request's logits do not depend on
 * which other requests share its step. */
#ifndef LOCKSTEP_TENSOR_H
#define LOCKSTEP_TENSOR_H

#include <stddef.h>
#include <stdint.h>

/* Element types, numbered as ggml numbers them (GGUF stores these ids).
 * Q8_1 and Q8_K are activation formats only: products quantize their input
 * to them (as ggml does), no weight is stored in them. */
enum tensor_type {
    TENSOR_F32 = 0,
    TENSOR_F16 = 1,
    TENSOR_Q4_0 = 2,
    TENSOR_Q4_1 = 3,
    TENSOR_Q5_0 = 6,
    TENSOR_Q5_1 = 7,
    TENSOR_Q8_0 = 8,
    TENSOR_Q8_1 = 9,
    TENSOR_Q2_K = 10,
    TENSOR_Q3_K = 11,
    TENSOR_Q4_K = 12,
    TENSOR_Q5_K = 13,
    TENSOR_Q6_K = 14,
    TENSOR_Q8_K = 15,
    TENSOR_IQ4_NL = 20,
    TENSOR_IQ4_XS = 23,
    TENSOR_BF16 = 30,
};

/* One more than the largest type id. */
#define TENSOR_TYPE_COUNT 31

#define TENSOR_QK 32 /* elements per Q8_0 / Q4_0 block */

/* ggml's block_q8_0: 32 int8 values times one fp16 scale (34 bytes). */
struct tensor_block_q8_0 {
    uint16_t d;           /* scale, IEEE fp16 bits */
    int8_t qs[TENSOR_QK]; /* value i is d * qs[i] */
};

/* ggml's block_q4_0: 32 4-bit values times one fp16 scale (18 bytes).
 * Byte j holds element j in its low nibble and element j+16 in its high
 * nibble; element value is d * (nibble - 8). */
struct tensor_block_q4_0 {
    uint16_t d;                /* scale, IEEE fp16 bits */
    uint8_t qs[TENSOR_QK / 2]; /* packed nibbles, see above */
};

/* Name of a type as ggml prints it ("f32", "q8_0", "q4_K", ...), or NULL
 * for an unknown id. */
const char *tensor_type_name(int type);
/* Type id from a name as above, in any case ("q4_k" too); -1 if unknown. */
int tensor_type_from_name(const char *name);
/* 1 if weights may be of type: every id of enum tensor_type but the
 * activation formats Q8_1 and Q8_K. */
int tensor_type_is_valid(int type);
/* Elements per block (1 for F32/F16/BF16, 32 for the legacy quants and
 * IQ4_NL, 256 for the k-quants and IQ4_XS). */
int tensor_type_block_elements(enum tensor_type type);
/* Bytes per block (4 for F32, 34 for Q8_0, 144 for Q4_K, ...). */
size_t tensor_type_block_bytes(enum tensor_type type);
/* Bytes of a row of n elements; n must be a multiple of the block size. */
size_t tensor_row_bytes(enum tensor_type type, int64_t n);

/* IEEE half precision conversions (round to nearest even). */
float tensor_fp16_to_fp32(uint16_t h);
uint16_t tensor_fp32_to_fp16(float f);

/* How a matrix's bytes are arranged. */
enum tensor_layout {
    TENSOR_LAYOUT_ROWS = 0,   /* row after row, each in the type's blocks (GGUF's layout) */
    TENSOR_LAYOUT_PANELS = 1, /* Q8_0, Q4_0: panels of 16 rows, see tensor_pack_panels */
};

/* A weight matrix W of shape (rows, cols). Row layout: row r starts at
 * (const char *)data + r * row_stride and holds cols elements of type
 * (cols / block elements blocks of its type); row_stride may exceed the row's
 * size: a column slice of a larger matrix (tensor parallelism) is a view.
 * Panel layout: row_stride is the distance between panels, and a column
 * slice is a view too (see tensor_pack_panels). */
struct tensor_matrix {
    const void *data;          /* first byte of row 0 (panels: of panel 0's quants) */
    enum tensor_type type;     /* element type */
    int rows;                  /* output features */
    int cols;                  /* input features; a multiple of the type's block */
    size_t row_stride;         /* bytes from one row (panels: one panel) to the next */
    enum tensor_layout layout; /* rows unless packed by tensor_pack_panels */
    size_t scales_offset;      /* panels: bytes from a panel's quants to its scales */
};

/* A view of a contiguous (rows, cols) matrix. */
struct tensor_matrix tensor_matrix_make(const void *data, enum tensor_type type, int rows,
                                        int cols);

/* Quantize n floats (n a multiple of 32) into n/32 blocks, as ggml does
 * (scale = max|x| / 127 for Q8_0; max-magnitude / -8 for Q4_0). */
void tensor_quantize_q8_0(struct tensor_block_q8_0 *out, const float *x, int64_t n);
void tensor_quantize_q4_0(struct tensor_block_q4_0 *out, const float *x, int64_t n);
/* Convert one row of n elements of any type to floats. */
void tensor_dequantize_row(float *out, const void *row, enum tensor_type type, int64_t n);
/* Quantize n floats (a multiple of the type's block) into type's blocks at
 * out: ggml's reference quantizers for the legacy types, simpler searches
 * than llama.cpp's for the k-quants and IQ4 (see quants_*.c). Returns 0, or
 * -1 if type has no quantizer (an activation format). */
int tensor_quantize_row(enum tensor_type type, void *out, const float *x, int64_t n);
/* BF16 (the upper half of an IEEE single) conversions; to bf16 rounds to
 * nearest even, as ggml does. */
float tensor_bf16_to_fp32(uint16_t h);
uint16_t tensor_fp32_to_bf16(float f);

/* ---- panel layout ----
 *
 * A Q8_0 matrix packed for the AVX-512 and AVX2 kernels (a Q4_0 one for
 * AVX2): with rows as stored, a product of a few tokens must transpose
 * every 16 rows before it can use them (vpdpbusd adds 4 products into each
 * of 16 row lanes, vpmaddubsw with vpmaddwd into each of 8), and paid that
 * on every call. Packed once at load, the weights are read as they are
 * used, in one sequential stream per 16 rows.
 *
 * Panel p holds rows 16p .. 16p+15 (rows past the end: zero weights) and
 * starts at data + p * row_stride. Its first part holds the quants, 512
 * bytes per 32-column block j: 8 groups of 64 bytes, group g holding
 * quants 4g .. 4g+3 of each of the 16 rows (row m at bytes 4m .. 4m+3),
 * each plus 128 (unsigned, as vpdpbusd wants it). At scales_offset follow
 * the scales, 32 bytes per block: the 16 rows' fp16 scales in row order.
 * Q4_0 is laid out the same way with 256 bytes of quants per block: 4
 * groups of 64 bytes, group g holding bytes 4g .. 4g+3 of each row's
 * block as stored (low nibbles: elements 4g .. 4g+3, high nibbles:
 * elements 4g+16 .. 4g+19), unchanged.
 * Packing moves bytes and changes no value, so a product gives the same
 * bits in either layout. */

/* 1 if the instruction set in use multiplies type faster from panels. */
int tensor_panels_preferred(enum tensor_type type);
/* Bytes the panel layout of w takes; 0 if w cannot be packed (w must be a
 * Q8_0 or Q4_0 matrix in row layout). */
size_t tensor_panels_bytes(const struct tensor_matrix *w);
/* Packs w into out (64-byte aligned, tensor_panels_bytes(w) bytes) and
 * returns the matrix it now is. */
struct tensor_matrix tensor_pack_panels(void *out, const struct tensor_matrix *w);

/* ---- instruction-set dispatch ---- */

/* The instruction sets, in one place: X(ID, name, parent). Each one's
 * kernels fall back to its parent's (and so on down to the scalar
 * reference) for anything it has no kernel of its own for, and a CPU that
 * has one has its parent too. Every set gives the scalar reference's bits
 * (tensor_internal.h), so the choice changes speed, never a result. */
#define TENSOR_ISA_LIST(X)                                                                         \
    X(SCALAR, "scalar", SCALAR) /* the portable C reference, any architecture */                   \
    X(AVX2, "avx2", SCALAR)     /* x86-64: AVX2 + FMA + F16C */                                    \
    X(AVX512, "avx512", AVX2)   /* x86-64: AVX-512 F/BW/VL/DQ + VNNI */                            \
    X(NEON, "neon", SCALAR)     /* arm64: Advanced SIMD (armv8-a, every arm64 CPU) */              \
    X(DOTPROD, "dotprod", NEON) /* arm64: + sdot/udot (armv8.2-a dotprod) */                       \
    X(I8MM, "i8mm", DOTPROD)    /* arm64: + smmla (armv8.6-a i8mm) */

enum tensor_isa {
#define TENSOR_ISA_ENUM(id, name, parent) TENSOR_ISA_##id,
    TENSOR_ISA_LIST(TENSOR_ISA_ENUM)
#undef TENSOR_ISA_ENUM
        TENSOR_ISA_COUNT
};

/* Best instruction set this CPU supports (capped by LOCKSTEP_ISA). */
enum tensor_isa tensor_isa_best(void);
/* 1 if this build has kernels of isa (the sets of its architecture). */
int tensor_isa_built(enum tensor_isa isa);
/* 1 if isa can run here: the best set or one it falls back through. */
int tensor_isa_available(enum tensor_isa isa);
/* Use isa from now on (tests compare paths); returns -1 if unavailable. */
int tensor_isa_select(enum tensor_isa isa);
/* The instruction set in use: the best one, or the one the environment
 * variable LOCKSTEP_ISA names if it is on the best one's chain (scalar,
 * avx2, neon, ...), until tensor_isa_select. */
enum tensor_isa tensor_isa_current(void);
/* The set's name ("avx2"); "unknown" out of range. */
const char *tensor_isa_name(enum tensor_isa isa);
/* The set a name names; -1 for none. */
int tensor_isa_parse(const char *name);
/* The architecture this build runs on, as uname names it ("x86_64",
 * "aarch64"), or "unknown". */
const char *tensor_arch_name(void);

/* ---- thread pool ---- */

/* A persistent pool of worker threads. The calling thread takes part as
 * thread 0. Idle workers spin briefly, then sleep on a condition variable, so
 * an idle pool uses no core. */
struct tensor_pool;

/* fn is called once on every thread with (arg, thread index, thread count). */
typedef void (*tensor_pool_fn)(void *arg, int thread, int n_threads);

/* A pool of n_threads threads (including the caller); NULL on failure. */
struct tensor_pool *tensor_pool_create(int n_threads);
void tensor_pool_free(struct tensor_pool *pool);
int tensor_pool_size(const struct tensor_pool *pool);
/* Runs fn on every thread and returns when all have finished. */
void tensor_pool_run(struct tensor_pool *pool, tensor_pool_fn fn, void *arg);

/* fn(arg, chunk, thread) for one chunk of a chunked job; thread is the index
 * of the thread running it (0 = the caller), e.g. for per-thread scratch. */
typedef void (*tensor_pool_chunk_fn)(void *arg, int chunk, int thread);

/* Runs fn once for each chunk 0 .. n_chunks - 1, on the caller and whichever
 * workers are free: a worker the scheduler has not run yet is not waited
 * for, so a busy core does not stall the job. Returns when all are done. */
void tensor_pool_run_chunks(struct tensor_pool *pool, tensor_pool_chunk_fn fn, void *arg,
                            int n_chunks);

/* ---- kernels ---- */

/* out (batch, w->rows) = x (batch, w->cols) times W transposed:
 * out[b][r] = sum_i W[r][i] * x[b][i]. Quantized weights take x quantized to
 * Q8_0 blocks (as llama.cpp does). Work is split over the pool's threads.
 * Returns 0, or -1 if scratch memory could not be allocated. */
int tensor_matmul(struct tensor_pool *pool, float *out, const struct tensor_matrix *w,
                  const float *x, int batch);

/* The product of tensor_matmul cut into n_parts equal column ranges (each a
 * whole number of blocks for quantized weights; n_parts <= 16): out is
 * (n_parts, batch, w->rows) and part p holds the sums over columns
 * [p * cols / n_parts, (p + 1) * cols / n_parts) only -- the same bits as a
 * tensor_matmul over that column slice. Tensor parallelism adds the parts
 * in a fixed order on every rank, so the degree does not change the result.
 * Returns 0, or -1 for a bad split or when scratch memory runs out. */
int tensor_matmul_parts(struct tensor_pool *pool, float *out, const struct tensor_matrix *w,
                        const float *x, int batch, int n_parts);

/* out[i] (batch, ws[i]->rows) = x times W_i transposed for n matrices
 * (n <= 16) that take the same input, such as a layer's q, k and v: the
 * same bits as n tensor_matmul calls, but the input is quantized once and
 * the threads share out all the matrices' rows in one job. Matrices of
 * different types, layouts or widths fall back to one call each. Returns 0,
 * or -1 as tensor_matmul. */
int tensor_matmul_many(struct tensor_pool *pool, float *const *outs,
                       const struct tensor_matrix *const *ws, int n, const float *x, int batch);

/* Activations quantized ahead of a product. tensor_matmul quantizes its
 * whole input on the calling thread before any thread multiplies; a
 * forward pass instead has the thread that has just computed a row (a
 * norm, a head's attention, a SwiGLU) quantize it while it is in that
 * core's cache, and the product then starts at once. Rows are quantized
 * exactly as tensor_matmul quantizes them, so the products give the same
 * bits. Usage: tensor_ahead_begin for the product's weights, then
 * tensor_ahead_row for every row of the batch (from any threads, each row
 * once), then tensor_matmul_many_ahead or tensor_matmul_parts_ahead. */
struct tensor_ahead;

/* An empty set of quantized activations; NULL if out of memory. */
struct tensor_ahead *tensor_ahead_create(void);
void tensor_ahead_free(struct tensor_ahead *ahead);

/* Lays ahead out for a batch of `batch` rows of the products with the n
 * matrices ws (as tensor_matmul_many), or with ws[0] cut into n_parts
 * column parts (as tensor_matmul_parts; n must then be 1). Returns 1 if
 * the rows are to be quantized ahead; 0 if those products take their input
 * as floats (float weights, matrices that cannot share an input, a bad
 * split, or no memory): then rows need not be given, and the plain calls
 * are the ones to make. */
int tensor_ahead_begin(struct tensor_ahead *ahead, const struct tensor_matrix *const *ws, int n,
                       int n_parts, int batch);

/* Quantizes row b of the batch (cols of ws[0] floats at x) into ahead. Rows
 * may be given from any threads at once, each row by one. */
void tensor_ahead_row(struct tensor_ahead *ahead, int b, const float *x);

/* tensor_matmul_many and tensor_matmul_parts on an input quantized ahead:
 * the same bits, without quantizing. The matrices must have the type,
 * layout and width of those tensor_ahead_begin was given (and for parts,
 * the same split), with the kernels then in use; returns -1 if they do not,
 * or as tensor_matmul. */
int tensor_matmul_many_ahead(struct tensor_pool *pool, float *const *outs,
                             const struct tensor_matrix *const *ws, int n,
                             const struct tensor_ahead *ahead);
int tensor_matmul_parts_ahead(struct tensor_pool *pool, float *out, const struct tensor_matrix *w,
                              const struct tensor_ahead *ahead);

/* out = x / sqrt(mean(x^2) + eps) * weight, over n elements (out may be x). */
void tensor_rmsnorm(float *out, const float *x, const float *weight, int n, float eps);

/* Rotary position embedding layouts. */
enum tensor_rope_style {
    TENSOR_ROPE_NORM = 0, /* rotate adjacent pairs (2j, 2j+1): llama, llama2.c */
    TENSOR_ROPE_NEOX = 1, /* rotate (j, j + rope_dim/2): qwen2, qwen3 */
};

/* Rotary position embedding in two steps: a position's angles, computed
 * once for every head and layer, then the turn of each head's first
 * rope_dim elements by them. Pair j at position pos turns by
 * pos * frequencies[j]; without frequency scaling frequencies[j] is
 * theta_base^(-2j/rope_dim) (tensor_rope_frequencies). */

/* Pairs of each head that turn: rope_dim / 2, at most head_dim / 2. */
int tensor_rope_pairs(int head_dim, int rope_dim);

/* frequencies[j] = theta_base^(-2j/rope_dim) for j < pairs. */
void tensor_rope_frequencies(float *frequencies, int pairs, int rope_dim, float theta_base);

/* cosines[j] and sines[j] of pair j's angle at position pos, j < pairs. */
void tensor_rope_angles(float *cosines, float *sines, int pairs, const float *frequencies, int pos);

/* Rotates, in place, each of n_heads heads of head_dim elements in x by a
 * position's angles. */
void tensor_rope_turn(float *x, int n_heads, int head_dim, int pairs, const float *cosines,
                      const float *sines, enum tensor_rope_style style);

/* out[i] = e^((x[i] - shift) / divisor) where x[i] >= floor, else 0, for
 * i < n: the weights of a softmax at a temperature (the sampler's). The
 * exponential is the vector kernels' own (range reduction to
 * [-ln2/2, ln2/2], a degree-7 polynomial, the scale 2^k; 0 below -87.33,
 * +inf above 88), taken one IEEE operation at a time in the scalar path
 * too, so every instruction set gives the same bits: a seeded draw picks
 * the same token on every machine. */
void tensor_exp_weights(float *out, const float *x, int n, float shift, float divisor, float floor);

/* x = softmax(x) over n elements, in place (max-subtracted). */
void tensor_softmax(float *x, int n);

/* out[i] = silu(gate[i]) * up[i], silu(v) = v / (1 + exp(-v)) (out may alias). */
void tensor_swiglu(float *out, const float *gate, const float *up, int n);

/* Dot product of two float vectors, in a fixed order for a given n. */
float tensor_dot(const float *a, const float *b, int n);

/* y[i] += a * x[i], one fused multiply-add per element. */
void tensor_axpy(float *y, float a, const float *x, int n);

/* x[i] *= a for i < n (attention's scores by 1 / sqrt(head_dim)). */
void tensor_scale(float *x, float a, int n);

/* out[r] = q . column r for r < n_rows (<= stride), over a block stored
 * dimension by dimension: element i of column r is columns[i * stride + r],
 * of type TENSOR_F32 or TENSOR_F16, for i < n (attention scores over a
 * block of cached keys kept that way: the vector kernels then take one
 * column per lane and need no reduction across lanes). Each column is
 * summed in four running sums over i mod 4, added as (0 + 1) + (2 + 3); a
 * column's value depends on nothing but q and that column. */
void tensor_dot_columns(float *out, const float *q, const void *columns, enum tensor_type type,
                        int n_rows, int n, int stride);

/* A tile of attention queries of one sequence against one key/value head:
 * n rows of input (queries for tensor_dot_columns_tile, a query's weights
 * for tensor_weighted_sum_tile) and n rows of output. One block of keys or
 * values then serves every query of the tile while it is in registers,
 * converted once; each row's bits are those of the one-query kernel. */
struct tensor_tile {
    int n;             /* queries */
    const float *in;   /* (n, in_stride) */
    size_t in_stride;  /* floats from one query's input to the next */
    float *out;        /* (n, out_stride) */
    size_t out_stride; /* floats from one query's output to the next */
};

/* tensor_dot_columns(tile->out + t * out_stride, tile->in + t * in_stride,
 * ...) for every query t of the tile, bit for bit. */
void tensor_dot_columns_tile(const struct tensor_tile *tile, const void *columns,
                             enum tensor_type type, int n_rows, int n, int stride);

/* A block of stride keys of n elements (n a multiple of 32) quantized to
 * Q8_0, laid out for integer dot products with one key a vector lane (a
 * key/value cache's Q8_0 keys): first the quants, four dimensions at a
 * time (dimension i of key r at byte ((i / 4) * stride + r) * 4 + i % 4),
 * then the block scales as halves (block j of key r at half
 * (n * stride) / 2 + j * stride + r). It takes
 * stride * tensor_row_bytes(TENSOR_Q8_0, n) bytes, as stride rows would. */

/* Quantizes key (n floats) as tensor_quantize_q8_0 does into key r of such
 * a block. */
void tensor_store_q8_0_key(void *keys, int r, const float *key, int n, int stride);

/* A query quantized for tensor_dot_q8_0_keys: n quants and n / 32 scales,
 * tensor_quantize_q8_0's values, and each block's quant sum times -128 (the
 * starting value of the AVX-512 kernel's unsigned products). */
struct tensor_q8_0_query {
    int8_t *quants; /* (n) */
    float *scales;  /* (n / 32) block scales, fp16 values */
    int32_t *bias;  /* (n / 32) -128 * sum of the block's quants */
};

/* Quantizes q (n floats, a multiple of 32) into query. */
void tensor_quantize_query(const struct tensor_q8_0_query *query, const float *q, int n);

/* out[r] = query . key r for r < n_rows (<= stride) over a block of Q8_0
 * keys, the quantized matmul's sequence: for each 32-block j in order, the
 * exact integer dot s_j of the quants, then acc = acc + (float)s_j *
 * (d_key * d_query), from 0, so every instruction set gives the same bits.
 * llama.cpp quantizes its queries to Q8_0 over a Q8_0 cache too. */
void tensor_dot_q8_0_keys(float *out, const struct tensor_q8_0_query *query, const void *keys,
                          int n_rows, int n, int stride);

/* tensor_dot_q8_0_keys(out + t * out_stride, &queries[t], ...) for each of
 * n_queries queries, bit for bit, the block of keys read once for all. */
void tensor_dot_q8_0_keys_tile(float *out, size_t out_stride,
                               const struct tensor_q8_0_query *queries, int n_queries,
                               const void *keys, int n_rows, int n, int stride);

/* out[i] += weights[p] * row p[i] for p < n_rows in order, n_rows
 * contiguous rows of n elements of type TENSOR_F32, TENSOR_F16 or
 * TENSOR_Q8_0 (then n a multiple of 32), with the sums kept in registers
 * (attention's weighted values, a block of cached values at a time). F32
 * and F16: the same bits as one tensor_axpy(out, weights[p], row p, n) per
 * row. Q8_0: per block of a row, weights[p] times its scale is rounded once,
 * then each quant adds (weight * scale) * quant in one fused multiply-add. */
void tensor_weighted_sum(float *out, const float *weights, const void *rows, enum tensor_type type,
                         int n_rows, int n);

/* tensor_weighted_sum(tile->out + t * out_stride, tile->in + t *
 * in_stride, rows, ...) for every query t of the tile, bit for bit: every
 * query takes the same n_rows rows (F32, F16 or Q8_0). */
void tensor_weighted_sum_tile(const struct tensor_tile *tile, const void *rows,
                              enum tensor_type type, int n_rows, int n);

/* out[i] = tensor_fp32_to_fp16(x[i]) for i < n (a key/value cache's
 * stores). */
void tensor_fp16_from_fp32(uint16_t *out, const float *x, int n);

/* tensor_quantize_q8_0 of n floats (a multiple of 32), the same bits, with
 * the instruction set in use (a key/value cache's stores). */
void tensor_quantize_row_q8_0(struct tensor_block_q8_0 *out, const float *x, int n);

#endif
