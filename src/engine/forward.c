/* forward.c -- the transformer forward pass over a token batch.
 *
 * One pass takes tokens from any number of sequences at their positions,
 * writes their keys and values into the paged cache, and produces logits for
 * the tokens that ask for them. Matrix products run over the whole batch
 * (tensor_matmul), so a prefill chunk of n tokens reads each weight once.
 * Every per-token computation is independent of the rest of the batch, and
 * tensor_matmul is batch invariant, so a sequence's logits do not depend on
 * what else shares its pass. */
#include "engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Buffers of parallel execution: the step plan; with tensor parallelism
 * this rank's classifier slice and, on the leader, the gathered slices of
 * all ranks; in a pipeline, where this rank is. */
static int engine_init_parallel(struct engine *engine, char *err, size_t errlen) {
    const struct model *m = engine->model;
    size_t t = (size_t)engine->max_tokens;
    engine->plan = engine_plan_create(engine->max_tokens);
    if (engine->comm) {
        int n = comm_size(engine->comm);
        /* + 1: a stage without the classifier has no rows */
        engine->logits_slice = malloc(t * (size_t)m->output.rows * sizeof(float) + 1);
        engine->logits_gathered = malloc(t * (size_t)m->config.vocab_size * sizeof(float));
        engine->gather_bytes = malloc((size_t)n * sizeof(size_t));
    }
    if (!engine->plan || (engine->comm && (!engine->logits_slice || !engine->logits_gathered ||
                                           !engine->gather_bytes))) {
        snprintf(err, errlen, "engine: cannot allocate tensor-parallel buffers");
        return -1;
    }
    engine->stage_ranks = engine->comm ? comm_size(engine->comm) : 1;
    engine->n_stages = engine->pipe ? comm_size(engine->pipe) / engine->stage_ranks : 1;
    engine->stage = engine->pipe ? comm_rank(engine->pipe) / engine->stage_ranks : 0;
    return 0;
}

int engine_init(struct engine *engine, const struct model *model,
                const struct engine_params *params, char *err, size_t errlen) {
    const struct model_config *c = &model->config;
    int q_dim = c->n_heads * c->head_dim;
    int kv_dim = c->n_kv_heads * c->head_dim;
    int block_size = params->kv_block_size > 0 ? params->kv_block_size : 16;
    size_t t;

    memset(engine, 0, sizeof(*engine));
    engine->model = model;
    if (engine_pack_weights(engine, model, err, errlen)) {
        engine_free(engine);
        return -1;
    }
    engine->max_tokens = params->max_tokens > 0 ? params->max_tokens : 1;
    engine->context_length =
        params->context_length > 0 ? params->context_length : c->context_length;
    engine->pool = tensor_pool_create(params->n_threads > 0 ? params->n_threads : 1);
    if (!engine->pool) {
        snprintf(err, errlen, "engine: cannot start %d threads", params->n_threads);
        engine_free(engine);
        return -1;
    }
    int kv_blocks = params->kv_blocks > 0 ? params->kv_blocks
                                          : (engine->context_length + block_size - 1) / block_size;
    if (kv_cache_init(&engine->kv, params->kv_type, c->n_layers, c->n_kv_heads, c->head_dim,
                      block_size, kv_blocks, err, errlen)) {
        engine_free(engine);
        return -1;
    }
    t = (size_t)engine->max_tokens;
    engine->x = malloc(t * c->dim * sizeof(float));
    engine->xb = malloc(t * c->dim * sizeof(float));
    engine->q = malloc(t * q_dim * sizeof(float));
    engine->k = malloc(t * kv_dim * sizeof(float));
    engine->v = malloc(t * kv_dim * sizeof(float));
    engine->attn = malloc(t * q_dim * sizeof(float));
    engine->gate = malloc(t * c->hidden_dim * sizeof(float));
    engine->up = malloc(t * c->hidden_dim * sizeof(float));
    engine->scores = malloc((size_t)tensor_pool_size(engine->pool) *
                            engine_attention_space(c, engine->context_length) * sizeof(float));
    engine->attention_units = malloc(t * (size_t)c->n_heads * sizeof(struct attention_unit));
    /* logits rows: where the classifier runs, and on the leader, which a
     * pipeline's last stage sends them to; a middle stage has none */
    int has_logits = !model->skips_classifier || !params->pipe || comm_rank(params->pipe) == 0;
    engine->logits = malloc(has_logits ? t * c->vocab_size * sizeof(float) : 1);
    engine->hidden = malloc(t * c->dim * sizeof(float));
    engine->rope_pairs = tensor_rope_pairs(c->head_dim, c->rope_dim);
    /* + 1: a buffer even for a model without rotary pairs */
    engine->rope_cosines = malloc(t * (size_t)engine->rope_pairs * sizeof(float) + 1);
    engine->rope_sines = malloc(t * (size_t)engine->rope_pairs * sizeof(float) + 1);
    engine->rope_frequencies = malloc((size_t)(c->rope_dim / 2) * sizeof(float) + 1);
    if (engine->rope_frequencies) model_rope_frequencies(model, engine->rope_frequencies);
    size_t parts =
        (size_t)model->reduce_parts * (size_t)(params->comm ? comm_size(params->comm) : 1);
    engine->partials = malloc(parts * t * c->dim * sizeof(float));
    engine->comm = params->comm;
    engine->pipe = params->pipe;
    engine->n_stages = 1;
    engine->stage_ranks = 1;
    engine->fault = params->fault;
    if ((engine->comm || engine->pipe) && engine_init_parallel(engine, err, errlen)) {
        engine_free(engine);
        return -1;
    }
    engine->chunk_positions = malloc(t * sizeof(int));
    engine->chunk_sequences = malloc(t * sizeof(struct kv_sequence *));
    engine->chunk_want = malloc(t);
    engine->ahead = tensor_ahead_create();
    if (engine_init_slices(engine, err, errlen)) {
        engine_free(engine);
        return -1;
    }
    if (!engine->x || !engine->xb || !engine->q || !engine->k || !engine->v || !engine->attn ||
        !engine->gate || !engine->up || !engine->scores || !engine->attention_units ||
        !engine->logits || !engine->hidden || !engine->rope_cosines || !engine->rope_sines ||
        !engine->rope_frequencies || !engine->partials || !engine->chunk_positions ||
        !engine->chunk_sequences || !engine->chunk_want || !engine->ahead) {
        snprintf(err, errlen, "engine: cannot allocate buffers for %d tokens", engine->max_tokens);
        engine_free(engine);
        return -1;
    }
    return 0;
}

void engine_free(struct engine *engine) {
    if (engine->pool) tensor_pool_free(engine->pool);
    engine_free_weights(engine);
    kv_cache_free(&engine->kv);
    free(engine->x);
    free(engine->xb);
    free(engine->q);
    free(engine->k);
    free(engine->v);
    free(engine->attn);
    free(engine->gate);
    free(engine->up);
    free(engine->scores);
    free(engine->attention_units);
    free(engine->logits);
    free(engine->hidden);
    free(engine->rope_cosines);
    free(engine->rope_sines);
    free(engine->rope_frequencies);
    free(engine->partials);
    free(engine->chunk_positions);
    free(engine->chunk_sequences);
    free(engine->chunk_want);
    tensor_ahead_free(engine->ahead);
    engine_free_slices(engine);
    free(engine->logits_slice);
    free(engine->logits_gathered);
    free(engine->gather_bytes);
    engine_plan_free(engine->plan);
    memset(engine, 0, sizeof(*engine));
}

int engine_check_batch(const struct engine *engine, const struct engine_batch *batch, char *err,
                       size_t errlen) {
    const struct model_config *c = &engine->model->config;
    if (batch->n_tokens < 1 || batch->n_tokens > engine->max_tokens) {
        snprintf(err, errlen, "engine: batch of %d tokens (limit %d)", batch->n_tokens,
                 engine->max_tokens);
        return -1;
    }
    for (int i = 0; i < batch->n_tokens; i++) {
        int pos = batch->positions[i];
        if (batch->tokens[i] < 0 || batch->tokens[i] >= c->vocab_size) {
            snprintf(err, errlen, "engine: token %d of the batch has id %d (vocabulary %d)", i,
                     batch->tokens[i], c->vocab_size);
            return -1;
        }
        if (pos < 0 || pos >= engine->context_length ||
            kv_blocks_for(&engine->kv, pos + 1) > batch->seqs[i]->n_blocks) {
            snprintf(err, errlen, "engine: token %d of the batch at position %d has no cache slot",
                     i, pos);
            return -1;
        }
    }
    return 0;
}

/* The monotonic clock in seconds when the engine is profiling, else 0
 * without reading it. */
static double profile_start(const struct engine *engine) {
    if (!engine->profile.on) return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Adds the time since start (from profile_start) to a kind of work. */
static void profile_stop(struct engine *engine, enum engine_work kind, double start) {
    if (engine->profile.on) engine->profile.seconds[kind] += profile_start(engine) - start;
}

/* Before a job that makes the input of the products with the n matrices
 * ws (or ws[0] cut into n_parts): whether that job quantizes its rows as
 * it makes them, in the layout the products read (tensor_ahead_begin). */
static void expect_products(struct engine *engine, const struct tensor_matrix *const *ws, int n,
                            int n_parts, int n_tokens) {
    engine->quantize_ahead = tensor_ahead_begin(engine->ahead, ws, n, n_parts, n_tokens);
}

/* Row t of a product's input (at row), quantized now if the job making it
 * was asked to (expect_products). */
static void quantize_row_ahead(struct engine *engine, int t, const float *row) {
    if (engine->quantize_ahead) tensor_ahead_row(engine->ahead, t, row);
}

/* The products of n matrices that take the block input xb, timed as
 * products; 0 or -1 as tensor_matmul_many. */
static int products_of_input(struct engine *engine, float *const *outs,
                             const struct tensor_matrix *const *ws, int n, int n_tokens) {
    double start = profile_start(engine);
    int failed = engine->quantize_ahead
                     ? tensor_matmul_many_ahead(engine->pool, outs, ws, n, engine->ahead)
                     : tensor_matmul_many(engine->pool, outs, ws, n, engine->xb, n_tokens);
    engine->quantize_ahead = 0;
    profile_stop(engine, ENGINE_WORK_PRODUCTS, start);
    return failed;
}

/* A block's input: the norm that makes it from x, and the matrices that
 * take it. */
struct block_input {
    const float *norm;                 /* norm weight (dim); NULL: no block follows */
    const struct tensor_matrix *ws[3]; /* the matrices taking norm(x) */
    int n;                             /* how many (0: no block follows) */
};

/* Layer l's attention input: attn_norm, for q, k and v. */
static struct block_input attention_input(const struct model *m, int l) {
    const struct model_layer *w = &m->layers[l];
    return (struct block_input){w->attn_norm, {&w->wq, &w->wk, &w->wv}, 3};
}

/* Layer l's MLP input: ffn_norm, for gate and up. */
static struct block_input mlp_input(const struct model *m, int l) {
    const struct model_layer *w = &m->layers[l];
    return (struct block_input){w->ffn_norm, {&w->w_gate, &w->w_up}, 2};
}

/* Adds a bias vector (n) to a row. */
static void add_bias(float *row, const float *bias, int n) {
    if (!bias) return;
    for (int i = 0; i < n; i++) row[i] += bias[i];
}

/* RMSNorm of each of n_heads heads of a row (qwen3's q/k norms). */
static void norm_heads(float *row, const float *weight, int n_heads, int head_dim, float eps) {
    if (!weight) return;
    for (int h = 0; h < n_heads; h++) {
        float *head = row + (size_t)h * head_dim;
        tensor_rmsnorm(head, head, weight, head_dim, eps);
    }
}

/* Work that is independent for each token of the batch (norms, rotations,
 * residual adds), spread over the pool's threads so that no core idles
 * while another does it alone. A token's result does not depend on which
 * thread computes it. */
struct token_job {
    struct engine *engine;
    const struct engine_batch *batch;
    int layer;
    const float *norm; /* norm weight (dim) of the block input made, or NULL */
    void (*run)(const struct token_job *job, int token);
};

/* Each thread takes a contiguous range of tokens: rows quantized ahead lie
 * in groups of neighbouring tokens (tensor_internal.h), and a group one
 * thread writes alone is not passed between the cores' caches. */
static void token_worker(void *arg, int thread, int n_threads) {
    const struct token_job *job = arg;
    int n = job->batch->n_tokens;
    int first = (int)((int64_t)n * thread / n_threads);
    int end = (int)((int64_t)n * (thread + 1) / n_threads);
    for (int t = first; t < end; t++) job->run(job, t);
}

/* job->run for every token, timed as kind; a single token runs on the
 * caller (waking the pool would cost more than the work). */
static void for_each_token(const struct token_job *job, enum engine_work kind) {
    double start = profile_start(job->engine);
    if (job->batch->n_tokens == 1)
        job->run(job, 0);
    else
        tensor_pool_run(job->engine->pool, token_worker, (void *)job);
    profile_stop(job->engine, kind, start);
}

/* xb = norm(x) for a token: the input of the next block, quantized for
 * its product when asked. */
static void norm_token(const struct token_job *job, int t) {
    struct engine *e = job->engine;
    const struct model_config *c = &e->model->config;
    size_t row = (size_t)t * c->dim;
    tensor_rmsnorm(e->xb + row, e->x + row, job->norm, c->dim, c->norm_eps);
    quantize_row_ahead(e, t, e->xb + row);
}

/* A token's start once x holds its input (the embedding, or in a later
 * pipeline stage the stage before's output): the rotary angles of its
 * position (every layer turns q and k by them), and the first block's
 * input. */
static void start_token(const struct token_job *job, int t) {
    struct engine *e = job->engine;
    size_t angles = (size_t)t * e->rope_pairs;
    tensor_rope_angles(e->rope_cosines + angles, e->rope_sines + angles, e->rope_pairs,
                       e->rope_frequencies, job->batch->positions[t]);
    if (job->norm) norm_token(job, t);
}

/* A token's start in the first stage: x = its embedding, then as above. */
static void embed_token(const struct token_job *job, int t) {
    struct engine *e = job->engine;
    const struct model *m = e->model;
    const struct model_config *c = &m->config;
    const char *embedding =
        (const char *)m->token_embd.data + (size_t)job->batch->tokens[t] * m->token_embd.row_stride;
    tensor_dequantize_row(e->x + (size_t)t * c->dim, embedding, m->token_embd.type, c->dim);
    start_token(job, t);
}

/* A token's q, k and v after the projections: biases and head norms where
 * the model has them, rotation by position, then k and v into the cache. */
static void position_token(const struct token_job *job, int t) {
    struct engine *e = job->engine;
    const struct model_config *c = &e->model->config;
    const struct model_layer *w = &e->model->layers[job->layer];
    int q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    int pos = job->batch->positions[t];
    float *q = e->q + (size_t)t * q_dim, *k = e->k + (size_t)t * kv_dim;
    float *v = e->v + (size_t)t * kv_dim;
    const float *cosines = e->rope_cosines + (size_t)t * e->rope_pairs;
    const float *sines = e->rope_sines + (size_t)t * e->rope_pairs;
    add_bias(q, w->bq, q_dim);
    add_bias(k, w->bk, kv_dim);
    add_bias(v, w->bv, kv_dim);
    norm_heads(q, w->q_norm, c->n_heads, c->head_dim, c->norm_eps);
    norm_heads(k, w->k_norm, c->n_kv_heads, c->head_dim, c->norm_eps);
    tensor_rope_turn(q, c->n_heads, c->head_dim, e->rope_pairs, cosines, sines, c->rope_style);
    tensor_rope_turn(k, c->n_kv_heads, c->head_dim, e->rope_pairs, cosines, sines, c->rope_style);
    kv_store(&e->kv, job->batch->seqs[t], job->layer, pos, k, v);
}

/* x += the sum of every part of a column-split product for a token (parts
 * added in slot order, into slot 0's row), then the next block's input norm
 * if there is one. tensor_axpy with a = 1 adds exactly as + does, in
 * vector registers. */
static void residual_token(const struct token_job *job, int t) {
    struct engine *e = job->engine;
    int dim = e->model->config.dim;
    size_t plane = (size_t)job->batch->n_tokens * dim;
    size_t parts = (size_t)e->model->reduce_parts * (e->comm ? comm_size(e->comm) : 1);
    float *sum = e->partials + (size_t)t * dim;
    for (size_t part = 1; part < parts; part++) tensor_axpy(sum, 1.0f, sum + part * plane, dim);
    tensor_axpy(e->x + (size_t)t * dim, 1.0f, sum, dim);
    if (job->norm) norm_token(job, t);
}

/* gate = silu(gate) * up for a token, quantized for ffn_down when asked. */
static void swiglu_token(const struct token_job *job, int t) {
    struct engine *e = job->engine;
    size_t row = (size_t)t * e->model->config.hidden_dim;
    tensor_swiglu(e->gate + row, e->gate + row, e->up + row, e->model->config.hidden_dim);
    quantize_row_ahead(e, t, e->gate + row);
}

/* x += w in for a matrix whose columns are split over the ranks (attn_output,
 * ffn_down), then xb = next->norm(x), quantized for its products, if a
 * block follows. Each rank computes its parts of the product
 * (model.reduce_parts column ranges) straight into its own slots of
 * `partials`; rank r's slots are [r * parts, (r + 1) * parts),
 * so the all-gather, which concatenates the ranks' slots in rank order,
 * gives every rank every part. The parts are then added in slot order --
 * the same operations at every tensor-parallel degree. */
static int add_column_products(struct engine *engine, const struct engine_batch *batch, int layer,
                               const struct tensor_matrix *w, const float *in, uint32_t tag_index,
                               const struct block_input *next) {
    int n = batch->n_tokens, local = engine->model->reduce_parts;
    int rank = engine->comm ? comm_rank(engine->comm) : 0;
    size_t plane = (size_t)n * engine->model->config.dim;
    float *mine = engine->partials + (size_t)rank * local * plane;
    double start = profile_start(engine);
    int failed = engine->quantize_ahead
                     ? tensor_matmul_parts_ahead(engine->pool, mine, w, engine->ahead)
                     : tensor_matmul_parts(engine->pool, mine, w, in, n, local);
    engine->quantize_ahead = 0;
    profile_stop(engine, ENGINE_WORK_PRODUCTS, start);
    if (failed || engine_allgather(engine, mine, (size_t)local * plane * sizeof(float),
                                   engine->partials, tag_index))
        return -1;
    if (next->n) expect_products(engine, next->ws, next->n, 1, n);
    struct token_job job = {engine, batch, layer, next->norm, residual_token};
    for_each_token(&job, ENGINE_WORK_TOKENS);
    return 0;
}

/* What the attention threads share for one layer. */
struct attention_job {
    struct engine *engine;
    const struct engine_batch *batch;
    int layer;
};

/* Positions of the cache block that starts at position p, of n_positions. */
static int block_rows(const struct kv_cache *kv, int p, int n_positions) {
    return n_positions - p < kv->block_size ? n_positions - p : kv->block_size;
}

/* Bytes of cache attend() asks for before it reads them. A unit's cache
 * blocks lie scattered over the pool, and the hardware prefetchers stop at
 * each 4 KiB page, so without help every few KiB of a stream starts with a
 * full memory latency. Reading a steady 8 KiB ahead, one segment at a time,
 * keeps enough lines in flight (measured: attention 9-13% shorter, decode
 * steps of 16 sequences 2-3% shorter, 85M Q8_0 model, steps alternated in
 * one process; 4-16 KiB ahead measured alike, 24 KiB less well). Fetching a whole block, or all of
 * a unit's blocks, at once was slower: the bursts crowd out the reads
 * being made. */
#define KV_PREFETCH_BYTES 8192

/* The order attend() reads one token's cache in: a segment is one head's
 * rows of one block; keys of every block (heads in turn), then values the
 * same way. */
struct kv_reads {
    const struct kv_cache *kv;
    const struct kv_sequence *seq;
    int layer;
    int head_begin, n_heads; /* query heads read */
    int group;               /* query heads per key/value head */
    int n_blocks;            /* blocks holding the token's past */
    size_t segment;          /* bytes of a segment */
    int ahead;               /* segments prefetched ahead of the one read (0: none) */
};

/* Before reading segment k: into L2 (locality 2) the segment `ahead` later. */
static void prefetch_ahead(const struct kv_reads *r, int k) {
    int per_side = r->n_blocks * r->n_heads, next = k + r->ahead;
    if (r->ahead == 0 || next >= 2 * per_side) return;
    int values = next >= per_side;
    int at = values ? next - per_side : next;
    int block = at / r->n_heads, head = (r->head_begin + at % r->n_heads) / r->group;
    const char *p = values ? kv_block_values(r->kv, r->seq, r->layer, block, head)
                           : kv_block_keys(r->kv, r->seq, r->layer, block, head);
    for (size_t offset = 0; offset < r->segment; offset += 64) __builtin_prefetch(p + offset, 0, 2);
}

/* A thread's room for n query elements quantized, after its scores:
 * scales, bias, then quants (n / 4 floats of them). */
static struct tensor_q8_0_query query_space(float *after_scores, int n) {
    size_t blocks = (size_t)n / TENSOR_QK;
    void *bias = after_scores + blocks, *quants = after_scores + 2 * blocks;
    return (struct tensor_q8_0_query){quants, after_scores, bias};
}

/* Head h's part of queries quantized d elements a head. */
static struct tensor_q8_0_query query_head(const struct tensor_q8_0_query *all, int h, int d) {
    size_t blocks = (size_t)h * d / TENSOR_QK;
    return (struct tensor_q8_0_query){all->quants + (size_t)h * d, all->scales + blocks,
                                      all->bias + blocks};
}

/* A token alone in its sequence's run (a decode token) is one unit over
 * all heads: within a cache block the heads lie side by side, so its thread
 * streams each block whole (measured: 2.7% shorter decode steps with 16
 * sequences than head-major items, 85M Q8_0 model, steps alternated within
 * one process). A run of several tokens of one sequence (a prefill chunk)
 * gives units of one head and up to ATTENTION_PIECE tokens, so that head's
 * cached keys and values stay in cache while the run's tokens use them,
 * and even one long prompt has work for every thread. */
#define ATTENTION_PIECE 16

/* Rows of scores a thread's work space holds: a token's heads, or a
 * prefill piece's tokens. */
static size_t score_rows(const struct model_config *c) {
    return c->n_heads > ATTENTION_PIECE ? (size_t)c->n_heads : ATTENTION_PIECE;
}

size_t engine_attention_space(const struct model_config *c, int context_length) {
    size_t q_dim = score_rows(c) * c->head_dim;
    return score_rows(c) * context_length + 2 * (q_dim / TENSOR_QK) + (q_dim + 3) / 4;
}

/* The end of the run of heads from h (of n_heads counted from head_begin)
 * that share h's key/value head: grouped-query attention's query heads of
 * one key head, which one tile serves. */
static int shared_heads_end(int h, int head_begin, int n_heads, int group) {
    int end = ((head_begin + h) / group + 1) * group - head_begin;
    return end < n_heads ? end : n_heads;
}

/* Heads [head_begin, head_end) of one token: softmax(q k^T / sqrt(d)) v
 * over the token's causal past. The cache is walked block by block, every
 * head of a block before the next block, so a decode token's keys (then
 * values) are read as one stream of whole blocks (measured: attention 6%
 * shorter than head by head, 16 sequences on the 85M Q8_0 model); each
 * head's sums are the same as alone, and the heads sharing a key head
 * read each block as one tile. With prefetch, the reads run
 * KV_PREFETCH_BYTES ahead. scores is this thread's work space
 * (engine_attention_space floats: the scores, then the queries quantized
 * for a Q8_0 cache). */
static void attend(struct engine *engine, const struct engine_batch *batch, int layer, int token,
                   int head_begin, int head_end, int prefetch, float *scores) {
    const struct model_config *c = &engine->model->config;
    const struct kv_cache *kv = &engine->kv;
    int d = c->head_dim, group = c->n_heads / c->n_kv_heads;
    int n_positions = batch->positions[token] + 1;
    size_t stride = (size_t)engine->context_length;
    const struct kv_sequence *seq = batch->seqs[token];
    const float *q = engine->q + ((size_t)token * c->n_heads + head_begin) * d;
    float *out = engine->attn + ((size_t)token * c->n_heads + head_begin) * d;
    int n_heads = head_end - head_begin;
    float scale = 1.0f / sqrtf((float)d);
    struct kv_reads reads = {.kv = kv,
                             .seq = seq,
                             .layer = layer,
                             .head_begin = head_begin,
                             .n_heads = n_heads,
                             .group = group,
                             .n_blocks = kv_blocks_for(kv, n_positions),
                             .segment = (size_t)kv->block_size * kv->row_bytes};
    if (prefetch)
        reads.ahead =
            reads.segment < KV_PREFETCH_BYTES ? (int)(KV_PREFETCH_BYTES / reads.segment) : 1;
    for (int k = -reads.ahead; k < 0; k++) prefetch_ahead(&reads, k); /* the first segments */
    /* a Q8_0 cache's scores are integer dots with the queries quantized */
    struct tensor_q8_0_query query = query_space(scores + (size_t)c->n_heads * stride, n_heads * d);
    if (kv->type == TENSOR_Q8_0) tensor_quantize_query(&query, q, n_heads * d);

    /* scores = q k^T / sqrt(d), then softmax, per head; the heads that share
     * a key head (h to next) as one tile */
    for (int b = 0, p = 0; p < n_positions; b++, p += kv->block_size) {
        int rows = block_rows(kv, p, n_positions);
        for (int h = 0, next; h < n_heads; h = next) {
            next = shared_heads_end(h, head_begin, n_heads, group);
            for (int k = h; k < next; k++) prefetch_ahead(&reads, b * n_heads + k);
            const void *keys = kv_block_keys(kv, seq, layer, b, (head_begin + h) / group);
            if (kv->type == TENSOR_Q8_0) {
                for (int k = h; k < next; k++) {
                    struct tensor_q8_0_query head_query = query_head(&query, k, d);
                    tensor_dot_q8_0_keys(scores + k * stride + p, &head_query, keys, rows, d,
                                         kv->block_size);
                }
            } else {
                struct tensor_tile tile = {next - h, q + (size_t)h * d, (size_t)d,
                                           scores + h * stride + p, stride};
                tensor_dot_columns_tile(&tile, keys, kv->type, rows, d, kv->block_size);
            }
        }
    }
    for (int h = 0; h < n_heads; h++) {
        float *head_scores = scores + h * stride;
        tensor_scale(head_scores, scale, n_positions);
        tensor_softmax(head_scores, n_positions);
    }
    /* out = scores v, per head */
    memset(out, 0, (size_t)n_heads * d * sizeof(float));
    for (int b = 0, p = 0; p < n_positions; b++, p += kv->block_size) {
        int rows = block_rows(kv, p, n_positions);
        for (int h = 0, next; h < n_heads; h = next) {
            next = shared_heads_end(h, head_begin, n_heads, group);
            for (int k = h; k < next; k++)
                prefetch_ahead(&reads, (reads.n_blocks + b) * n_heads + k);
            struct tensor_tile tile = {next - h, scores + h * stride + p, stride,
                                       out + (size_t)h * d, (size_t)d};
            tensor_weighted_sum_tile(&tile,
                                     kv_block_values(kv, seq, layer, b, (head_begin + h) / group),
                                     kv->type, rows, d);
        }
    }
}

/* Rows of the cache block at position p that a past of n_positions
 * reaches (0 when it ends before the block). */
static int rows_reached(const struct kv_cache *kv, int p, int n_positions) {
    return n_positions <= p ? 0 : block_rows(kv, p, n_positions);
}

/* A prefill piece (tokens [token_begin, token_end) of one sequence, one
 * head) attends as one tile: each block of the head's keys, then of its
 * values, is converted once for every query of the piece
 * (tensor_dot_columns_tile or, over a Q8_0 cache with the queries
 * quantized, tensor_dot_q8_0_keys_tile; tensor_weighted_sum_tile) instead
 * of once per query (85M model, 32 tokens after 896 cached: attention 1.4
 * times as fast over F16 and over Q8_0, medians of 3 alternating runs).
 * Each query's scores, softmax and sums are attend()'s, bit for bit: a
 * score past a query's own position is computed and never used, and the
 * values a query reaches beyond the rows every query of the piece reaches
 * are added for it alone, in order. scores is the thread's work space, a
 * row of context_length floats a query. */
static void attend_piece(struct engine *engine, const struct engine_batch *batch, int layer,
                         const struct attention_unit *unit, float *scores) {
    const struct model_config *c = &engine->model->config;
    const struct kv_cache *kv = &engine->kv;
    int d = c->head_dim, head = unit->head_begin, kv_head = head / (c->n_heads / c->n_kv_heads);
    int first = unit->token_begin, n = unit->token_end - unit->token_begin, longest = 0;
    size_t stride = (size_t)engine->context_length, q_stride = (size_t)c->n_heads * d;
    const struct kv_sequence *seq = batch->seqs[first];
    for (int t = first; t < unit->token_end; t++)
        if (batch->positions[t] + 1 > longest) longest = batch->positions[t] + 1;
    float *out = engine->attn + (size_t)first * q_stride + (size_t)head * d;
    struct tensor_tile tile = {n, engine->q + (size_t)first * q_stride + (size_t)head * d, q_stride,
                               scores, stride};
    /* a Q8_0 cache's scores are integer dots with the queries quantized */
    struct tensor_q8_0_query queries[ATTENTION_PIECE];
    if (kv->type == TENSOR_Q8_0) {
        struct tensor_q8_0_query space = query_space(scores + score_rows(c) * stride, n * d);
        for (int t = 0; t < n; t++) {
            queries[t] = query_head(&space, t, d);
            tensor_quantize_query(&queries[t], tile.in + t * q_stride, d);
        }
    }

    /* scores = q k^T / sqrt(d) for every query, up to the longest past */
    for (int b = 0, p = 0; p < longest; b++, p += kv->block_size) {
        const void *keys = kv_block_keys(kv, seq, layer, b, kv_head);
        int rows = block_rows(kv, p, longest);
        tile.out = scores + p;
        if (kv->type == TENSOR_Q8_0)
            tensor_dot_q8_0_keys_tile(tile.out, stride, queries, n, keys, rows, d, kv->block_size);
        else
            tensor_dot_columns_tile(&tile, keys, kv->type, rows, d, kv->block_size);
    }
    float scale = 1.0f / sqrtf((float)d);
    for (int t = 0; t < n; t++) {
        float *query_scores = scores + t * stride;
        int n_positions = batch->positions[first + t] + 1;
        tensor_scale(query_scores, scale, n_positions);
        tensor_softmax(query_scores, n_positions);
        memset(out + t * q_stride, 0, (size_t)d * sizeof(float));
    }
    /* out = scores v: the rows every query reaches as a tile, then each
     * query's own rest */
    tile = (struct tensor_tile){n, scores, stride, out, q_stride};
    for (int b = 0, p = 0; p < longest; b++, p += kv->block_size) {
        const char *values = kv_block_values(kv, seq, layer, b, kv_head);
        int common = kv->block_size;
        for (int t = first; t < unit->token_end; t++) {
            int rows = rows_reached(kv, p, batch->positions[t] + 1);
            if (rows < common) common = rows;
        }
        tile.in = scores + p;
        if (common > 0) tensor_weighted_sum_tile(&tile, values, kv->type, common, d);
        for (int t = 0; t < n; t++) {
            int rows = rows_reached(kv, p, batch->positions[first + t] + 1);
            if (rows > common)
                tensor_weighted_sum(out + t * q_stride, scores + t * stride + p + common,
                                    values + (size_t)common * kv->row_bytes, kv->type,
                                    rows - common, d);
        }
    }
}

/* Quadratic in the tokens, which the pass over them outweighs by far. */
int engine_batch_is_decode(const struct engine_batch *batch) {
    for (int i = 1; i < batch->n_tokens; i++)
        for (int j = 0; j < i; j++)
            if (batch->seqs[i] == batch->seqs[j]) return 0;
    return 1;
}

static void plan_attention(struct engine *engine, const struct engine_batch *batch) {
    int n_heads = engine->model->config.n_heads, n = 0;
    struct attention_unit *units = engine->attention_units;
    for (int begin = 0, end; begin < batch->n_tokens; begin = end) {
        for (end = begin + 1; end < batch->n_tokens && batch->seqs[end] == batch->seqs[begin];)
            end++;
        if (end - begin == 1) {
            units[n++] = (struct attention_unit){begin, end, 0, n_heads};
            continue;
        }
        for (int head = 0; head < n_heads; head++)
            for (int t = begin; t < end; t += ATTENTION_PIECE)
                units[n++] = (struct attention_unit){
                    t, end - t < ATTENTION_PIECE ? end : t + ATTENTION_PIECE, head, head + 1};
    }
    engine->n_attention_units = n;
    /* When no other token reads a token's keys and values in this pass,
     * its unit rotates and stores them itself just before attending: one
     * pool job less a layer, and the cache lines it writes are the ones it
     * reads next, on the same core (measured: 0.5-1% shorter 16-sequence
     * decode steps, alternated in one process). */
    engine->attention_whole_tokens = engine_batch_is_decode(batch);
    engine->attention_stores = batch->n_tokens > 1 && engine->attention_whole_tokens;
}

/* Unit u of a layer's attention (job: a struct attention_job), with scores
 * as work space ((n_heads, context_length) floats of the thread running
 * it). Slices run each other's units (slice.c). */
void engine_attention_unit(void *job_arg, int u, float *scores) {
    const struct attention_job *job = job_arg;
    struct engine *engine = job->engine;
    const struct attention_unit *unit = &engine->attention_units[u];
    if (engine->attention_stores) {
        struct token_job positions = {engine, job->batch, job->layer, NULL, position_token};
        position_token(&positions, unit->token_begin);
    }
    /* a decode token (a unit of one token) reads its past from memory, so
     * ahead; a prefill piece mostly reads what this pass has just stored,
     * which is in cache (prefetching it measured 1-3% slower prefill) */
    int prefetch = unit->token_end - unit->token_begin == 1;
    if (unit->head_end - unit->head_begin == 1)
        attend_piece(engine, job->batch, job->layer, unit, scores);
    else
        for (int t = unit->token_begin; t < unit->token_end; t++)
            attend(engine, job->batch, job->layer, t, unit->head_begin, unit->head_end, prefetch,
                   scores);
    if (engine->attention_whole_tokens) {
        const struct model_config *c = &engine->model->config;
        size_t row = (size_t)unit->token_begin * c->n_heads * c->head_dim;
        quantize_row_ahead(engine, unit->token_begin, engine->attn + row);
    }
}

static void attention_chunk(void *arg, int chunk, int thread) {
    const struct attention_job *job = arg;
    const struct engine *engine = job->engine;
    engine_attention_unit(arg, chunk,
                          engine->scores +
                              (size_t)thread * engine_attention_space(&engine->model->config,
                                                                      engine->context_length));
}

/* x += attention(xb) for one layer, xb = norm(x) made by the block before;
 * ends with xb = ffn_norm(x) for the MLP. */
static int attention_block(struct engine *engine, const struct engine_batch *batch, int layer) {
    const struct model *m = engine->model;
    const struct model_layer *w = &m->layers[layer];
    int n = batch->n_tokens;
    struct attention_job job = {engine, batch, layer};
    struct block_input input = attention_input(m, layer), next = mlp_input(m, layer);

    /* q, k, v projections of the whole batch */
    float *const qkv[] = {engine->q, engine->k, engine->v};
    if (products_of_input(engine, qkv, input.ws, input.n, n)) return -1;
    /* rotate q and k by position, then store k and v in the cache (in the
     * attention units when they can) */
    struct token_job positions = {engine, batch, layer, NULL, position_token};
    if (!engine->attention_stores) for_each_token(&positions, ENGINE_WORK_ATTENTION);
    /* units of whole tokens quantize their output for attn_output */
    if (engine->attention_whole_tokens) {
        const struct tensor_matrix *wo = &w->wo;
        expect_products(engine, &wo, 1, m->reduce_parts, n);
    }
    double start = profile_start(engine);
    if (engine->slice)
        engine_slice_attend(engine, &job, engine->n_attention_units);
    else
        tensor_pool_run_chunks(engine->pool, attention_chunk, &job, engine->n_attention_units);
    profile_stop(engine, ENGINE_WORK_ATTENTION, start);
    /* output projection over every rank's heads, and residual */
    return add_column_products(engine, batch, layer, &w->wo, engine->attn,
                               ENGINE_TAG_LAYER(layer, 0), &next);
}

/* x += w_down(silu(w_gate xb) * w_up xb) for one layer, xb = ffn_norm(x);
 * ends with xb = the next layer's attn_norm(x), if there is a next layer. */
static int mlp_block(struct engine *engine, const struct engine_batch *batch, int layer) {
    const struct model *m = engine->model;
    const struct model_layer *w = &m->layers[layer];
    int n = batch->n_tokens;

    struct block_input input = mlp_input(m, layer), next = {NULL, {NULL}, 0};
    if (layer + 1 < m->config.n_layers) next = attention_input(m, layer + 1);

    float *const gate_up[] = {engine->gate, engine->up};
    if (products_of_input(engine, gate_up, input.ws, input.n, n)) return -1;
    const struct tensor_matrix *down = &w->w_down;
    expect_products(engine, &down, 1, m->reduce_parts, n);
    struct token_job swiglu = {engine, batch, layer, NULL, swiglu_token};
    for_each_token(&swiglu, ENGINE_WORK_TOKENS);
    return add_column_products(engine, batch, layer, &w->w_down, engine->gate,
                               ENGINE_TAG_LAYER(layer, 1), &next);
}

/* Final norm of the wanted tokens, gathered into xb (logits) or hidden
 * (hidden states, which go no further), then the classifier: with several
 * ranks each computes its vocabulary rows and the leader gathers them. */
static int classify(struct engine *engine, const struct engine_batch *batch) {
    const struct model *m = engine->model;
    int dim = m->config.dim;
    int n_wanted = 0;
    double start = profile_start(engine);
    engine->n_hidden = 0;
    for (int t = 0; t < batch->n_tokens; t++) {
        int hidden = batch->want_logits[t] == ENGINE_WANT_HIDDEN;
        if (!batch->want_logits[t]) continue;
        float *out = hidden ? engine->hidden + (size_t)engine->n_hidden++ * dim
                            : engine->xb + (size_t)n_wanted++ * dim;
        tensor_rmsnorm(out, engine->x + (size_t)t * dim, m->output_norm, dim, m->config.norm_eps);
    }
    profile_stop(engine, ENGINE_WORK_TOKENS, start);
    if (n_wanted == 0) return 0;
    float *out = engine->comm ? engine->logits_slice : engine->logits;
    start = profile_start(engine);
    int failed = tensor_matmul(engine->pool, out, &m->output, engine->xb, n_wanted);
    profile_stop(engine, ENGINE_WORK_PRODUCTS, start);
    if (failed) return -1;
    if (engine->comm && engine_gather_logits(engine, n_wanted)) return -1;
    return n_wanted;
}

int engine_forward_tokens(struct engine *engine, const struct engine_batch *batch) {
    const struct model *m = engine->model;
    int n_wanted = 0;
    /* token embeddings (a later pipeline stage has x from the one before),
     * rotary angles and the first block's input; every block then norms
     * the next one's */
    struct block_input first = {NULL, {NULL}, 0};
    if (m->config.n_layers > 0) first = attention_input(m, 0);
    if (first.n) expect_products(engine, first.ws, first.n, 1, batch->n_tokens);
    struct token_job embed = {engine, batch, 0, first.norm,
                              m->skips_embedding ? start_token : embed_token};
    for_each_token(&embed, ENGINE_WORK_TOKENS);
    plan_attention(engine, batch);
    for (int layer = 0; layer < m->config.n_layers && n_wanted >= 0; layer++)
        if (attention_block(engine, batch, layer) || mlp_block(engine, batch, layer)) n_wanted = -1;
    /* a stage before the last hands x on instead (pipeline.c) */
    if (n_wanted == 0 && !m->skips_classifier) n_wanted = classify(engine, batch);
    return n_wanted;
}

int engine_forward(struct engine *engine, const struct engine_batch *batch, char *err,
                   size_t errlen) {
    if (engine_check_batch(engine, batch, err, errlen)) return -1;
    engine->comm_error = COMM_OK;
    engine->profile.passes += engine->profile.on;
    int n_wanted = engine_can_slice(engine, batch) && !engine_batch_wants_hidden(batch)
                       ? engine_forward_slices(engine, batch)
                       : engine_forward_tokens(engine, batch);
    if (n_wanted < 0 && engine->comm_error != COMM_OK)
        snprintf(err, errlen, "%s", engine->comm_message);
    else if (n_wanted < 0)
        snprintf(err, errlen, "engine: out of memory for a batch of %d tokens", batch->n_tokens);
    return n_wanted;
}

int engine_batch_wants_hidden(const struct engine_batch *batch) {
    for (int t = 0; t < batch->n_tokens; t++)
        if (batch->want_logits[t] == ENGINE_WANT_HIDDEN) return 1;
    return 0;
}

int engine_embed_sequence(struct engine *engine, struct kv_sequence *seq, const int *tokens, int n,
                          float *hidden, char *err, size_t errlen) {
    int dim = engine->model->config.dim;
    if (engine->n_stages > 1) {
        snprintf(err, errlen, "engine: hidden states stay on a pipeline's last stage (pp 1 only)");
        return -1;
    }
    for (int done = 0; done < n; done += engine->max_tokens) {
        int len = n - done < engine->max_tokens ? n - done : engine->max_tokens;
        for (int i = 0; i < len; i++) {
            engine->chunk_positions[i] = done + i;
            engine->chunk_sequences[i] = seq;
            engine->chunk_want[i] = ENGINE_WANT_HIDDEN;
        }
        struct engine_batch batch = {len, tokens + done, engine->chunk_positions,
                                     engine->chunk_sequences, engine->chunk_want};
        if (engine_lead_step(engine, &batch, err, errlen) < 0) return -1;
        memcpy(hidden + (size_t)done * dim, engine->hidden, (size_t)len * dim * sizeof(float));
    }
    return 0;
}

int engine_run_sequence(struct engine *engine, struct kv_sequence *seq, const int *tokens, int n,
                        int start, char *err, size_t errlen) {
    for (int done = 0; done < n; done += engine->max_tokens) {
        int len = n - done < engine->max_tokens ? n - done : engine->max_tokens;
        for (int i = 0; i < len; i++) {
            engine->chunk_positions[i] = start + done + i;
            engine->chunk_sequences[i] = seq;
            engine->chunk_want[i] = done + i == n - 1;
        }
        struct engine_batch batch = {len, tokens + done, engine->chunk_positions,
                                     engine->chunk_sequences, engine->chunk_want};
        if (engine_lead_step(engine, &batch, err, errlen) < 0) return -1;
    }
    return 0;
}
