/* tensor_internal.h -- private interface between the files of the tensor module.
 *
 * tensor.h is the public contract; this header is what its pieces share: the
 * per-instruction-set kernel table that isa.c picks from, the job a matmul
 * hands to each thread, and the pool's scratch memory. Nothing outside
 * src/tensor includes it.
 *
 * Reduction orders (batch invariance). Every output element of a matmul is
 * reduced by a fixed sequence of floating-point operations chosen by the
 * instruction set alone, never by the batch size or the thread:
 *  - Q8_0 / Q4_0: for each 32-block j in order, the exact integer dot
 *    product s_j of the weight and activation quants, then
 *    acc = acc + (float)s_j * (d_w * d_x), starting from acc = 0. Integer
 *    sums are exact, so every instruction set gives the same bits.
 *  - F32 / F16: each instruction set keeps L lane sums (L = 8 scalar and
 *    AVX2, 16 AVX-512), lane l accumulating elements i = l (mod L) in order
 *    of i with fused multiply-adds, then adds the lanes with a fixed tree.
 *  - every other type: one row dot (quants.h) per output element, on the
 *    input quantized to the type's dot type; fixed per instruction set. A
 *    multi-column row dot gives each column the single dot's bits.
 * The scalar kernels spell out the AVX2 kernels' operations (canon.h), so
 * the two give the same bits for every op and type: that order is the
 * canonical one. AVX-512 gives them too except for F32 / F16 products,
 * dot, rmsnorm, softmax (16 lanes), BF16, Q2_K, Q3_K and IQ4_XS, and the
 * activation quantizer on blocks with NaN, infinite or subnormal values. */
#ifndef LOCKSTEP_TENSOR_INTERNAL_H
#define LOCKSTEP_TENSOR_INTERNAL_H

#include "quants.h"
#include "tensor.h"

/* Activations quantized to Q8_0 for a quantized matmul: row b of the batch
 * has cols int8 values and cols / 32 block scales and block sums. Block j
 * of row b is block number b * blocks + j (by rows), or, interleaved (the
 * kernel table's panels_interleaved says whether a panel kernel reads
 * that), tensor_xq_number: rows go in groups of TENSOR_XQ_GROUP, and
 * within a group the rows' blocks j lie side by side, so one kernel tile
 * (a group) reads one stream, and threads quantizing different groups
 * write different cache lines. Its quants start at qs + 32 * number, its
 * scale and sum are d[number] and bias[number]. */
struct tensor_xq {
    int8_t *qs;      /* (batch * cols) quants */
    float *d;        /* (batch * cols / 32) block scales, fp16-rounded as ggml stores them */
    int32_t *bias;   /* (batch * cols / 32) -offset * sum of the block's quants */
    int32_t offset;  /* weight-quant offset the bias was made for (8 or 128), see kernels */
    int interleaved; /* 1: blocks numbered by tensor_xq_number, else b * blocks + j */
};

/* Rows of a group of interleaved activations. */
#define TENSOR_XQ_GROUP 8

/* The number of block j of row b in interleaved activations of batch rows
 * of `blocks` blocks: the group's rows before it, then j times the group's
 * rows, then b's place in its group. */
static inline size_t tensor_xq_number(int batch, int blocks, int b, int j) {
    int first = b - b % TENSOR_XQ_GROUP;
    int rows = batch - first < TENSOR_XQ_GROUP ? batch - first : TENSOR_XQ_GROUP;
    return (size_t)first * (size_t)blocks + (size_t)j * (size_t)rows + (size_t)(b - first);
}

/* Adds one quantized block's integer dot product to acc in the order
 * every kernel uses (the reduction order above). */
static inline float tensor_add_block(float acc, int32_t dot, float d_w, float d_x) {
    float scale = d_w * d_x;
    float term = (float)dot * scale;
    return acc + term;
}

/* The block of a Q8_0 row holding element i, and element i's quant. */
static inline const struct tensor_block_q8_0 *tensor_q8_0_block(const void *row, int i) {
    return (const struct tensor_block_q8_0 *)row + i / TENSOR_QK;
}
static inline const int8_t *tensor_q8_0_quant(const void *row, int i) {
    return tensor_q8_0_block(row, i)->qs + i % TENSOR_QK;
}

/* A type's traits: the type table's row (types.c). */
struct tensor_type_traits {
    const char *name;                /* as ggml names it ("q4_K"); parsed in any case */
    size_t block_bytes;              /* bytes per block */
    tensor_dequantize_fn dequantize; /* blocks to floats */
    tensor_quantize_fn quantize;     /* floats to blocks */
    enum tensor_type type;           /* ggml's id */
    int block_elements;              /* elements per block */
    enum tensor_type dot_type;       /* format a product quantizes its input to */
    int weights;                     /* 1 if weights may have the type */
    /* Panel types (an fp16 scale, then the quant bytes, in every block):
     * bytes of a block's quants in a panel (16 rows' worth), 0 for a type
     * that does not pack; and the xor each quant byte takes when packed. */
    size_t panel_quants;
    uint8_t panel_flip;
};

/* Bytes of a panel's quants per block for type; 0: it does not pack. */
size_t tensor_panel_quants(enum tensor_type type);

/* The row of type in the type table; NULL for an unknown id. */
const struct tensor_type_traits *tensor_type_traits(int type);

/* What one tensor_matmul asks of every thread. */
struct tensor_matmul_job {
    const struct tensor_matrix *w; /* weights, (rows, cols) */
    const float *x;                /* (batch, cols) float activations (F32/F16 weights) */
    const struct tensor_xq *xq;    /* quantized activations (Q8_0/Q4_0 weights) */
    const char *xa;                /* other types: (batch) rows of the input in the dot type */
    size_t xa_stride;              /* bytes from one row of xa to the next */
    tensor_row_dot_fn row_dot;     /* other types: the row dot of w's type */
    tensor_row_dots_fn row_dots;   /* ... and its multi-column version, or NULL */
    float *out;                    /* (batch, rows) results */
    int batch;                     /* activation rows */
};

/* Computes out[b][r] for every b and for rows [row_begin, row_end); scratch
 * is this thread's share of the pool's scratch (matmul_scratch bytes). */
typedef void (*tensor_matmul_fn)(const struct tensor_matmul_job *job, int row_begin, int row_end,
                                 void *scratch);

/* tensor_matmul_fn for every part of a column-split product at once: jobs
 * (n_parts) are the parts' column views of one matrix, each with its own
 * activations and output. Each part's results are those of the part alone. */
typedef void (*tensor_matmul_parts_fn)(const struct tensor_matmul_job *jobs, int n_parts,
                                       int row_begin, int row_end, void *scratch);

/* Quantizes one activation row of n floats (n a multiple of 32): quants,
 * block scales and -offset * block sums, the same values as
 * tensor_quantize_q8_0 gives. */
typedef void (*tensor_quantize_x_fn)(int8_t *qs, float *d, int32_t *bias, const float *x, int n,
                                     int32_t offset);

/* What a row's matmul kernel takes as its input. */
enum tensor_input {
    TENSOR_INPUT_FLOAT,    /* the float activations as they are (F32, F16 weights) */
    TENSOR_INPUT_BLOCKS,   /* Q8_0 blocks with scales and sums (struct tensor_xq) */
    TENSOR_INPUT_DOT_TYPE, /* rows in the weight type's dot type, for its row dots */
};

/* Per-thread scratch bytes a product of this type and width needs. */
typedef size_t (*tensor_scratch_fn)(enum tensor_type type, int cols, int batch);

/* One weight type's kernels in one instruction set: a row of its table.
 * Each group (the product, the panel product, the row dots) is taken as a
 * whole from the nearest set on the chain to the scalar reference that
 * defines its first field (TENSOR_ISA_LIST), so a set defines only what it
 * does better. */
struct tensor_type_kernels {
    /* the product in row layout; NULL: a row dot per output element */
    tensor_matmul_fn matmul;
    enum tensor_input input;   /* what matmul takes */
    int32_t input_offset;      /* TENSOR_INPUT_BLOCKS: the bias offset matmul wants (0: none) */
    tensor_scratch_fn scratch; /* matmul's per-thread scratch; NULL: none */
    /* the product in panel layout (types with panel traits, types.c) */
    tensor_matmul_fn matmul_panels;
    tensor_matmul_parts_fn matmul_panels_parts; /* every column part at once, or NULL */
    int panels_preferred;                       /* 1: packing makes products faster */
    int panels_interleaved;                     /* 1: it reads interleaved activations */
    int32_t panels_offset;                      /* the bias offset it wants (0: none) */
    /* the row dots (types with a dot type other than F32) */
    tensor_row_dot_fn row_dot;
    tensor_row_dots_fn row_dots; /* its multi-column version, or NULL: single dots */
};

/* The kernels of one instruction set: the per-row ops, then one row per
 * weight type. A NULL op or group is the parent set's (isa.c resolves
 * each table once). */
struct tensor_kernels {
    enum tensor_isa isa;
    tensor_quantize_x_fn quantize_x;
    void (*rmsnorm)(float *out, const float *x, const float *weight, int n, float eps);
    void (*softmax)(float *x, int n);
    void (*exp_weights)(float *out, const float *x, int n, float shift, float divisor, float floor);
    void (*swiglu)(float *out, const float *gate, const float *up, int n);
    /* Turns the leading pairs of one head that fill whole vectors; returns
     * the first pair left for the scalar tail (tensor_rope_turn_head). */
    int (*rope_turn_vectors)(float *head, int pairs, const float *cosines, const float *sines,
                             enum tensor_rope_style style);
    float (*dot)(const float *a, const float *b, int n);
    void (*axpy)(float *y, float a, const float *x, int n);
    void (*scale)(float *x, float a, int n);
    void (*dot_columns)(float *out, const float *q, const void *columns, enum tensor_type type,
                        int n_rows, int n, int stride);
    void (*dot_q8_0_keys)(float *out, const struct tensor_q8_0_query *query, const void *keys,
                          int n_rows, int n, int stride);
    void (*weighted_sum)(float *out, const float *weights, const void *rows, enum tensor_type type,
                         int n_rows, int n);
    /* the tile forms (NULL: one query at a time) */
    void (*dot_q8_0_keys_tile)(float *out, size_t out_stride,
                               const struct tensor_q8_0_query *queries, int n_queries,
                               const void *keys, int n_rows, int n, int stride);
    void (*dot_columns_tile)(const struct tensor_tile *tile, const void *columns,
                             enum tensor_type type, int n_rows, int n, int stride);
    void (*weighted_sum_tile)(const struct tensor_tile *tile, const void *rows,
                              enum tensor_type type, int n_rows, int n);
    void (*fp16_from_fp32)(uint16_t *out, const float *x, int n);
    /* a k-quant product's input: tensor_quantize_q8_k's bytes */
    void (*quantize_q8_k)(void *out, const float *x, int64_t n);
    /* by type id; a row with nothing in it is a type no product takes */
    struct tensor_type_kernels types[TENSOR_TYPE_COUNT];
};

/* The scalar reference's table (scalar.c), and the other sets' tables as
 * the architecture's folder defines them (NULL: a set not built for this
 * architecture), before isa.c fills their gaps from the parents. */
extern const struct tensor_kernels tensor_kernels_scalar;
const struct tensor_kernels *tensor_arch_kernels(enum tensor_isa isa);
/* The best set this CPU and operating system support (the architecture's
 * detect.c); TENSOR_ISA_SCALAR elsewhere. */
enum tensor_isa tensor_arch_detect(void);

/* The resolved table of isa (every gap filled from the parents), whether
 * or not this CPU can run it; tests read a type's row from it. */
const struct tensor_kernels *tensor_kernels_for(enum tensor_isa isa);

/* The kernel table of the instruction set in use (chosen on first use). */
const struct tensor_kernels *tensor_kernels_current(void);

/* The row of w's type in k (a row of zeros for an unknown id). */
const struct tensor_type_kernels *tensor_row_for(const struct tensor_kernels *k,
                                                 const struct tensor_matrix *w);
/* The kernel k has for a product with w in w's layout (NULL: none), and
 * what it takes as input. */
tensor_matmul_fn tensor_kernel_for(const struct tensor_kernels *k, const struct tensor_matrix *w);
enum tensor_input tensor_input_for(const struct tensor_kernels *k, const struct tensor_matrix *w);
/* The layout of the quantized input (struct tensor_xq) a product with w
 * takes from k's kernel: the bias offset and whether it is interleaved. */
void tensor_xq_layout_for(const struct tensor_kernels *k, const struct tensor_matrix *w,
                          struct tensor_xq *xq);

/* Column parts a product may be cut into (tensor_matmul_parts). */
#define TENSOR_MAX_PARTS 16

/* 1 if the n matrices can share one quantized input and one kernel: the
 * same type, layout and width (matmul.c). */
int tensor_share_input(const struct tensor_matrix *const *ws, int n);
/* 1 if w's columns cut into n_parts parts of whole blocks, at most
 * TENSOR_MAX_PARTS (matmul.c). */
int tensor_split_fits(const struct tensor_matrix *w, int n_parts);

/* Row b of a batch of `batch` rows into xq: the cols floats at x quantized
 * as kernels k quantize them. */
void tensor_xq_quantize_row(const struct tensor_kernels *k, const struct tensor_xq *xq, int batch,
                            int b, const float *x, int cols);

/* Activations quantized ahead (tensor.h): every part's rows, laid out by
 * tensor_ahead_begin for one product. */
struct tensor_ahead {
    char *memory;                          /* the parts' quants, scales and sums */
    size_t capacity;                       /* bytes of memory */
    const struct tensor_kernels *k;        /* kernel table the layout is for */
    enum tensor_type type;                 /* weight type the layout is for */
    enum tensor_layout layout;             /* and their layout */
    int batch;                             /* rows of the product */
    int cols;                              /* columns of the whole input */
    int n_parts;                           /* column parts, each quantized on its own */
    struct tensor_xq xq[TENSOR_MAX_PARTS]; /* part p's quantized activations */
};

/* Rows a matmul kernel handles together; threads get multiples of it. */
#define TENSOR_ROW_TILE 16

/* The panel layout (tensor.h): rows per panel, and bytes per 32-column
 * block of a panel's quants (Q8_0, Q4_0) and of its scales. */
#define TENSOR_PANEL_ROWS        16
#define TENSOR_PANEL_QUANTS      512
#define TENSOR_PANEL_QUANTS_Q4_0 256
#define TENSOR_PANEL_SCALES      32

/* Scratch memory owned by the pool, at least size bytes, 64-byte aligned;
 * NULL if it could not be grown. Valid until the next call. */
void *tensor_pool_scratch(struct tensor_pool *pool, size_t size);

/* Scalar kernels, also the building blocks the SIMD tables fall back to. */
void tensor_matmul_f32_scalar(const struct tensor_matmul_job *job, int row_begin, int row_end,
                              void *scratch);
void tensor_matmul_f16_scalar(const struct tensor_matmul_job *job, int row_begin, int row_end,
                              void *scratch);
void tensor_matmul_q8_0_scalar(const struct tensor_matmul_job *job, int row_begin, int row_end,
                               void *scratch);
void tensor_matmul_q4_0_scalar(const struct tensor_matmul_job *job, int row_begin, int row_end,
                               void *scratch);
void tensor_matmul_q8_0_panels_scalar(const struct tensor_matmul_job *job, int row_begin,
                                      int row_end, void *scratch);
void tensor_matmul_q4_0_panels_scalar(const struct tensor_matmul_job *job, int row_begin,
                                      int row_end, void *scratch);
size_t tensor_matmul_scratch_f16_scalar(enum tensor_type type, int cols, int batch);
/* Any type with a row dot: every output element one job->row_dot call
 * (matmul_rows.c); the same for every instruction set. */
void tensor_matmul_row_dots(const struct tensor_matmul_job *job, int row_begin, int row_end,
                            void *scratch);
void tensor_quantize_x_scalar(int8_t *qs, float *d, int32_t *bias, const float *x, int n,
                              int32_t offset);
void tensor_rmsnorm_scalar(float *out, const float *x, const float *weight, int n, float eps);
void tensor_softmax_scalar(float *x, int n);
void tensor_exp_weights_scalar(float *out, const float *x, int n, float shift, float divisor,
                               float floor);
void tensor_swiglu_scalar(float *out, const float *gate, const float *up, int n);
/* Turns pairs [first_pair, pairs) of one head: the scalar reference, also
 * the vector kernels' tail. */
void tensor_rope_turn_head(float *head, int first_pair, int pairs, const float *cosines,
                           const float *sines, enum tensor_rope_style style);
int tensor_rope_turn_vectors_none(float *head, int pairs, const float *cosines, const float *sines,
                                  enum tensor_rope_style style);
float tensor_dot_scalar(const float *a, const float *b, int n);
void tensor_axpy_scalar(float *y, float a, const float *x, int n);
void tensor_scale_scalar(float *x, float a, int n);
void tensor_dot_columns_scalar(float *out, const float *q, const void *columns,
                               enum tensor_type type, int n_rows, int n, int stride);
void tensor_dot_q8_0_keys_scalar(float *out, const struct tensor_q8_0_query *query,
                                 const void *keys, int n_rows, int n, int stride);
void tensor_weighted_sum_scalar(float *out, const float *weights, const void *rows,
                                enum tensor_type type, int n_rows, int n);
void tensor_fp16_from_fp32_scalar(uint16_t *out, const float *x, int n);

#endif
