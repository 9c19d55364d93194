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

/* Buffers of tensor-parallel execution: this rank's classifier slice and,
 * on the leader, the gathered slices of all ranks. */
static int engine_init_parallel(struct engine *engine, char *err, size_t errlen) {
    const struct model *m = engine->model;
    int n = comm_size(engine->comm);
    size_t t = (size_t)engine->max_tokens;
    engine->logits_slice = malloc(t * (size_t)m->output.rows * sizeof(float));
    engine->logits_gathered = malloc(t * (size_t)m->config.vocab_size * sizeof(float));
    engine->gather_bytes = malloc((size_t)n * sizeof(size_t));
    engine->plan = engine_plan_create(engine->max_tokens);
    if (!engine->logits_slice || !engine->logits_gathered || !engine->gather_bytes ||
        !engine->plan) {
        snprintf(err, errlen, "engine: cannot allocate tensor-parallel buffers");
        return -1;
    }
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
        return -1;
    }
    int kv_blocks = params->kv_blocks > 0 ? params->kv_blocks
                                          : (engine->context_length + block_size - 1) / block_size;
    if (kv_cache_init(&engine->kv, c->n_layers, c->n_kv_heads, c->head_dim, block_size, kv_blocks,
                      err, errlen)) {
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
    engine->scores =
        malloc((size_t)tensor_pool_size(engine->pool) * engine->context_length * sizeof(float));
    engine->logits = malloc(t * c->vocab_size * sizeof(float));
    size_t parts =
        (size_t)model->reduce_parts * (size_t)(params->comm ? comm_size(params->comm) : 1);
    engine->partials = malloc(parts * t * c->dim * sizeof(float));
    engine->attention_rows = malloc((size_t)tensor_pool_size(engine->pool) *
                                    engine->context_length * sizeof(const float *));
    engine->comm = params->comm;
    engine->fault = params->fault;
    if (engine->comm && engine_init_parallel(engine, err, errlen)) {
        engine_free(engine);
        return -1;
    }
    engine->chunk_positions = malloc(t * sizeof(int));
    engine->chunk_sequences = malloc(t * sizeof(struct kv_sequence *));
    engine->chunk_want = malloc(t);
    if (!engine->x || !engine->xb || !engine->q || !engine->k || !engine->v || !engine->attn ||
        !engine->gate || !engine->up || !engine->scores || !engine->logits ||
        !engine->attention_rows || !engine->partials || !engine->chunk_positions ||
        !engine->chunk_sequences || !engine->chunk_want) {
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
    free(engine->logits);
    free((void *)engine->attention_rows);
    free(engine->partials);
    free(engine->chunk_positions);
    free(engine->chunk_sequences);
    free(engine->chunk_want);
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

/* Adds a bias vector (n) to each of n_tokens rows. */
static void add_bias(float *rows, const float *bias, int n_tokens, int n) {
    if (!bias) return;
    for (int t = 0; t < n_tokens; t++)
        for (int i = 0; i < n; i++) rows[(size_t)t * n + i] += bias[i];
}

/* RMSNorm of each head of each row (qwen3's q/k norms). */
static void norm_heads(float *rows, const float *weight, int n_rows_heads, int head_dim,
                       float eps) {
    if (!weight) return;
    for (int h = 0; h < n_rows_heads; h++) {
        float *head = rows + (size_t)h * head_dim;
        tensor_rmsnorm(head, head, weight, head_dim, eps);
    }
}

/* x += w in for a matrix whose columns are split over the ranks (attn_output,
 * ffn_down). Each rank computes its parts of the product (model.reduce_parts
 * column ranges) straight into its own slots of `partials`; rank r's slots
 * are [r * parts, (r + 1) * parts), so the all-gather, which concatenates
 * the ranks' slots in rank order, gives every rank every part. The parts
 * are then added in slot order -- the same operations at every
 * tensor-parallel degree. */
static int add_column_products(struct engine *engine, const struct tensor_matrix *w,
                               const float *in, int n, uint32_t tag_index) {
    int local = engine->model->reduce_parts;
    int ranks = engine->comm ? comm_size(engine->comm) : 1;
    int rank = engine->comm ? comm_rank(engine->comm) : 0;
    size_t plane = (size_t)n * engine->model->config.dim, total = (size_t)local * ranks;
    float *mine = engine->partials + (size_t)rank * local * plane;
    if (tensor_matmul_parts(engine->pool, mine, w, in, n, local) ||
        engine_allgather(engine, mine, (size_t)local * plane * sizeof(float), engine->partials,
                         tag_index))
        return -1;
    for (size_t i = 0; i < plane; i++) {
        float sum = engine->partials[i];
        for (size_t part = 1; part < total; part++) sum += engine->partials[part * plane + i];
        engine->x[i] += sum;
    }
    return 0;
}

/* What the attention threads share for one layer. */
struct attention_job {
    struct engine *engine;
    const struct engine_batch *batch;
    int layer;
};

/* One (token, head): softmax(q k^T / sqrt(d)) v over the token's causal
 * past. scores and rows are this thread's work space (context_length each). */
static void attend(struct engine *engine, const struct engine_batch *batch, int layer, int token,
                   int head, float *scores, const float **rows) {
    const struct model_config *c = &engine->model->config;
    int d = c->head_dim;
    int kv_head = head / (c->n_heads / c->n_kv_heads);
    int pos = batch->positions[token];
    const struct kv_sequence *seq = batch->seqs[token];
    const float *q = engine->q + ((size_t)token * c->n_heads + head) * d;
    float *out = engine->attn + ((size_t)token * c->n_heads + head) * d;
    float scale = 1.0f / sqrtf((float)d);

    for (int p = 0; p <= pos; p++) rows[p] = kv_key(&engine->kv, seq, layer, p, kv_head);
    tensor_dot_rows(scores, q, rows, pos + 1, d);
    for (int p = 0; p <= pos; p++) scores[p] *= scale;
    tensor_softmax(scores, pos + 1);
    for (int p = 0; p <= pos; p++) rows[p] = kv_value(&engine->kv, seq, layer, p, kv_head);
    tensor_weighted_sum(out, scores, rows, pos + 1, d);
}

/* Items go head by head, so one head's cached keys and values stay in the
 * cache while the batch's tokens use them. */
static void attention_worker(void *arg, int thread, int n_threads) {
    struct attention_job *job = arg;
    struct engine *engine = job->engine;
    int n_tokens = job->batch->n_tokens;
    int n_items = n_tokens * engine->model->config.n_heads;
    float *scores = engine->scores + (size_t)thread * engine->context_length;
    const float **rows = engine->attention_rows + (size_t)thread * engine->context_length;
    for (int i = thread; i < n_items; i += n_threads)
        attend(engine, job->batch, job->layer, i % n_tokens, i / n_tokens, scores, rows);
}

/* x += attention(norm(x)) for one layer. */
static int attention_block(struct engine *engine, const struct engine_batch *batch, int layer) {
    const struct model_config *c = &engine->model->config;
    const struct model_layer *w = &engine->model->layers[layer];
    int n = batch->n_tokens;
    int q_dim = c->n_heads * c->head_dim;
    int kv_dim = c->n_kv_heads * c->head_dim;
    struct attention_job job = {engine, batch, layer};

    for (int t = 0; t < n; t++)
        tensor_rmsnorm(engine->xb + (size_t)t * c->dim, engine->x + (size_t)t * c->dim,
                       w->attn_norm, c->dim, c->norm_eps);
    /* q, k, v projections of the whole batch */
    float *const qkv[] = {engine->q, engine->k, engine->v};
    const struct tensor_matrix *const qkv_weights[] = {&w->wq, &w->wk, &w->wv};
    if (tensor_matmul_many(engine->pool, qkv, qkv_weights, 3, engine->xb, n)) return -1;
    add_bias(engine->q, w->bq, n, q_dim);
    add_bias(engine->k, w->bk, n, kv_dim);
    add_bias(engine->v, w->bv, n, kv_dim);
    norm_heads(engine->q, w->q_norm, n * c->n_heads, c->head_dim, c->norm_eps);
    norm_heads(engine->k, w->k_norm, n * c->n_kv_heads, c->head_dim, c->norm_eps);
    /* rotate q and k by position, then store k and v in the cache */
    for (int t = 0; t < n; t++) {
        int pos = batch->positions[t];
        float *k = engine->k + (size_t)t * kv_dim;
        tensor_rope(engine->q + (size_t)t * q_dim, c->n_heads, c->head_dim, c->rope_dim, pos,
                    c->rope_base, c->rope_style);
        tensor_rope(k, c->n_kv_heads, c->head_dim, c->rope_dim, pos, c->rope_base, c->rope_style);
        kv_store(&engine->kv, batch->seqs[t], layer, pos, k, engine->v + (size_t)t * kv_dim);
    }
    tensor_pool_run(engine->pool, attention_worker, &job);
    /* output projection over every rank's heads, and residual */
    return add_column_products(engine, &w->wo, engine->attn, n, ENGINE_TAG_LAYER(layer, 0));
}

/* x += w_down(silu(w_gate norm(x)) * w_up norm(x)) for one layer. */
static int mlp_block(struct engine *engine, int n, int layer) {
    const struct model_config *c = &engine->model->config;
    const struct model_layer *w = &engine->model->layers[layer];

    for (int t = 0; t < n; t++)
        tensor_rmsnorm(engine->xb + (size_t)t * c->dim, engine->x + (size_t)t * c->dim, w->ffn_norm,
                       c->dim, c->norm_eps);
    float *const gate_up[] = {engine->gate, engine->up};
    const struct tensor_matrix *const gate_up_weights[] = {&w->w_gate, &w->w_up};
    if (tensor_matmul_many(engine->pool, gate_up, gate_up_weights, 2, engine->xb, n)) return -1;
    tensor_swiglu(engine->gate, engine->gate, engine->up, n * c->hidden_dim);
    return add_column_products(engine, &w->w_down, engine->gate, n, ENGINE_TAG_LAYER(layer, 1));
}

/* Final norm of the wanted tokens, gathered into xb, then the classifier:
 * with several ranks each computes its vocabulary rows and the leader
 * gathers them. */
static int classify(struct engine *engine, const struct engine_batch *batch) {
    const struct model *m = engine->model;
    int dim = m->config.dim;
    int n_wanted = 0;
    for (int t = 0; t < batch->n_tokens; t++) {
        if (!batch->want_logits[t]) continue;
        tensor_rmsnorm(engine->xb + (size_t)n_wanted * dim, engine->x + (size_t)t * dim,
                       m->output_norm, dim, m->config.norm_eps);
        n_wanted++;
    }
    if (n_wanted == 0) return 0;
    float *out = engine->comm ? engine->logits_slice : engine->logits;
    if (tensor_matmul(engine->pool, out, &m->output, engine->xb, n_wanted)) return -1;
    if (engine->comm && engine_gather_logits(engine, n_wanted)) return -1;
    return n_wanted;
}

int engine_forward(struct engine *engine, const struct engine_batch *batch, char *err,
                   size_t errlen) {
    const struct model *m = engine->model;
    int dim = m->config.dim;
    int n_wanted = 0;

    if (engine_check_batch(engine, batch, err, errlen)) return -1;
    engine->comm_error = COMM_OK;
    /* token embeddings */
    for (int t = 0; t < batch->n_tokens; t++) {
        const char *row =
            (const char *)m->token_embd.data + (size_t)batch->tokens[t] * m->token_embd.row_stride;
        tensor_dequantize_row(engine->x + (size_t)t * dim, row, m->token_embd.type, dim);
    }
    for (int layer = 0; layer < m->config.n_layers && n_wanted >= 0; layer++)
        if (attention_block(engine, batch, layer) || mlp_block(engine, batch->n_tokens, layer))
            n_wanted = -1;
    if (n_wanted == 0) n_wanted = classify(engine, batch);
    if (n_wanted < 0 && engine->comm_error != COMM_OK)
        snprintf(err, errlen, "%s", engine->comm_message);
    else if (n_wanted < 0)
        snprintf(err, errlen, "engine: out of memory for a batch of %d tokens", batch->n_tokens);
    return n_wanted;
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
