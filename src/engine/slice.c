/* slice.c -- a decode batch run in slices: each thread of the pool carries
 * its own contiguous range of the tokens through the whole forward pass.
 *
 * Split by matrix rows (forward.c), every product, attention and per-token
 * job of a pass is a pool job of its own: about eight a layer, each ending
 * when the slower thread ends, and each per-token job reading rows the
 * other core has just written. Split by tokens, a thread computes every
 * row of every product for its tokens only, then their attention, norms
 * and adds, in one pool job for the whole pass. Every thread reads all the
 * weights; when the threads go at the same pace the second read of each
 * panel finds it in the shared cache.
 *
 * Only attention is shared: its cost follows each sequence's context, so
 * slices of equal token counts may hold very unequal attention (measured:
 * 8 sequences of 16 positions in one slice and 8 of 1500 in the other took
 * 26% longer steps than split by rows without sharing, 1% shorter with).
 * Each layer, a slice publishes its attention units once its q, k and v
 * are made, runs them, then runs units of the other slices that are
 * published and not yet taken; it goes on once all of its own are done.
 * No slice ever waits for another to be ready, so a slice that fails (out
 * of memory) stops no one.
 *
 * That pays only when each thread has a kernel tile of tokens or more
 * (SLICE_MIN_TOKENS). Measured on the 85M Q8_0 model with 2 threads, decode
 * steps alternated in one process: 16 sequences of 16-64 positions took
 * 3-4% less time in slices with the vCPUs close together and 6% less far
 * apart, 64 sequences 3% less, 16 of 16-1500 positions 5% less; without
 * sharing, 12 sequences took 2% more, 8 took 12% more and 4 took 24% more
 * (the products, bound by memory there, read twice the weights). Prefill
 * chunks stay whole: a token attends to the keys of earlier tokens of its
 * sequence in the same batch, which another thread may be storing.
 *
 * Every slice reads all the weights, and the second read of a panel is
 * cheap only while the first is still in the cache the cores share: the
 * threads run up to a layer apart, so a pass is cut in slices only when a
 * layer's weights fit in a share of that cache (SLICE_MAX_LAYER_BYTES).
 * Measured with 16 sequences decoding, 2 threads, alternated: on the 1B
 * shape's Q8_0 file (65 MB a layer) whole steps took 56-64 ms against
 * 70-72 ms in slices; on its Q4_K_M file (37 MB a layer, products bound
 * by the multi-column dots) 163-172 against 149-176 ms, no difference;
 * on the 85M file (7.5 MB a layer) 5.2-5.5 against 4.5-5.9 ms.
 *
 * Which thread computes a token never changes its bits (the kernels'
 * results depend neither on the batch nor on the rows a thread takes,
 * tensor_internal.h), so a pass in slices gives the logits of the same
 * pass run whole. */
#include "engine_internal.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Tokens each thread needs before a batch is cut in slices: the batch
 * columns of one tile of the matrix kernels (TENSOR_XQ_GROUP). */
#define SLICE_MIN_TOKENS 8

/* A layer's weights above which a pass stays whole: half the 32 MiB L3
 * that a Zen 4 core complex (the measurements above) shares. The OS of a
 * virtual machine often does not report the cache, so it is not asked. */
#define SLICE_MAX_LAYER_BYTES ((size_t)16 << 20)

/* One thread's own state for passes in slices. */
struct engine_slice {
    struct engine view;                     /* the engine as its thread sees it (make_view) */
    struct engine_batch batch;              /* its tokens of the batch */
    struct tensor_pool *pool;               /* one thread: the slice's own, for its products */
    struct tensor_ahead *ahead;             /* its products' inputs, quantized ahead */
    struct attention_unit *attention_units; /* (max_tokens * n_heads) its attention work */
    int result;                             /* its pass's logits rows, or -1 */
    struct engine *whole;                   /* the engine it is a slice of */
    /* the layer's attention, shared with the other slices (engine_slice_attend) */
    uint32_t epoch;         /* attention phases this slice has begun; every slice
                             * starts each pass at the same value */
    void *attention;        /* its forward.c struct attention_job */
    atomic_int n_units;     /* units of it */
    _Atomic uint64_t claim; /* epoch << 32 | the next unit to run */
    atomic_int done;        /* units of it run to the end, by any thread */
};

/* The weight bytes of one layer (the layers' mean): those a token reads,
 * less the classifier's. */
static size_t layer_weight_bytes(const struct model *m) {
    const struct tensor_matrix *out = &m->output;
    size_t classifier = (size_t)out->rows * tensor_row_bytes(out->type, out->cols);
    size_t layers = m->weight_bytes > classifier ? m->weight_bytes - classifier : 0;
    return m->config.n_layers > 0 ? layers / (size_t)m->config.n_layers : 0;
}

int engine_init_slices(struct engine *engine, char *err, size_t errlen) {
    int n = tensor_pool_size(engine->pool);
    if (n < 2 || layer_weight_bytes(engine->model) > SLICE_MAX_LAYER_BYTES) return 0;
    engine->slices = calloc((size_t)n, sizeof(*engine->slices));
    if (!engine->slices) goto fail;
    engine->n_slices = n;
    size_t units = (size_t)engine->max_tokens * (size_t)engine->model->config.n_heads;
    for (int i = 0; i < n; i++) {
        struct engine_slice *slice = &engine->slices[i];
        slice->pool = tensor_pool_create(1);
        slice->ahead = tensor_ahead_create();
        slice->attention_units = malloc(units * sizeof(struct attention_unit));
        slice->whole = engine;
        atomic_init(&slice->n_units, 0);
        atomic_init(&slice->claim, 0);
        atomic_init(&slice->done, 0);
        if (!slice->pool || !slice->ahead || !slice->attention_units) goto fail;
    }
    return 0;
fail:
    snprintf(err, errlen, "engine: cannot allocate the state of %d threads", n);
    return -1;
}

void engine_free_slices(struct engine *engine) {
    for (int i = 0; i < engine->n_slices; i++) {
        struct engine_slice *slice = &engine->slices[i];
        tensor_pool_free(slice->pool);
        tensor_ahead_free(slice->ahead);
        free(slice->attention_units);
    }
    free(engine->slices);
    engine->slices = NULL;
    engine->n_slices = 0;
}

int engine_can_slice(const struct engine *engine, const struct engine_batch *batch) {
    return engine->n_slices > 1 && !engine->comm &&
           batch->n_tokens >= SLICE_MIN_TOKENS * engine->n_slices && engine_batch_is_decode(batch);
}

/* Slice i's view of the engine: the same model, cache and buffers, with
 * every per-token buffer starting at the slice's first token (the
 * column-split products' partials too: a slice's parts lie in its own
 * stretch), its logits after those of the wanted tokens before it, and its
 * own pool, quantized inputs, attention units and score rows. Only slice 0
 * profiles. */
static void make_view(struct engine *engine, int i, int first, int wanted_before) {
    const struct model_config *c = &engine->model->config;
    struct engine_slice *slice = &engine->slices[i];
    struct engine *view = &slice->view;
    size_t t = (size_t)first, q_dim = (size_t)c->n_heads * c->head_dim;
    size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim, dim = (size_t)c->dim;
    *view = *engine;
    view->x += t * dim;
    view->xb += t * dim;
    view->q += t * q_dim;
    view->k += t * kv_dim;
    view->v += t * kv_dim;
    view->attn += t * q_dim;
    view->gate += t * (size_t)c->hidden_dim;
    view->up += t * (size_t)c->hidden_dim;
    view->rope_cosines += t * (size_t)engine->rope_pairs;
    view->rope_sines += t * (size_t)engine->rope_pairs;
    view->partials += t * dim * (size_t)engine->model->reduce_parts;
    view->logits += (size_t)wanted_before * (size_t)c->vocab_size;
    view->scores += (size_t)i * engine_attention_space(c, engine->context_length);
    view->pool = slice->pool;
    view->ahead = slice->ahead;
    view->quantize_ahead = 0;
    view->attention_units = slice->attention_units;
    view->slices = NULL;
    view->n_slices = 0;
    view->slice = slice;
    view->profile.on = i == 0 && engine->profile.on;
}

static void run_slice(void *arg, int thread, int n_threads) {
    (void)n_threads;
    struct engine_slice *slice = &((struct engine *)arg)->slices[thread];
    slice->result = engine_forward_tokens(&slice->view, &slice->batch);
}

/* Runs units of slice s while its attention of this epoch has some left
 * untaken. A unit is taken by moving the claim word on, which fails once
 * the owner has begun another epoch; the unit count and job read after a
 * successful claim are therefore this epoch's. */
static void run_units(struct engine_slice *s, uint32_t epoch, float *scores) {
    for (;;) {
        uint64_t claim = atomic_load_explicit(&s->claim, memory_order_acquire);
        if ((uint32_t)(claim >> 32) != epoch) return;
        if ((int)(uint32_t)claim >= atomic_load_explicit(&s->n_units, memory_order_relaxed)) return;
        if (!atomic_compare_exchange_weak_explicit(&s->claim, &claim, claim + 1,
                                                   memory_order_acquire, memory_order_relaxed))
            continue;
        engine_attention_unit(s->attention, (int)(uint32_t)claim, scores);
        atomic_fetch_add_explicit(&s->done, 1, memory_order_release);
    }
}

void engine_slice_attend(struct engine *view, void *job, int n_units) {
    struct engine_slice *own = view->slice;
    struct engine *whole = own->whole;
    uint32_t epoch = ++own->epoch;
    own->attention = job;
    atomic_store_explicit(&own->n_units, n_units, memory_order_relaxed);
    atomic_store_explicit(&own->done, 0, memory_order_relaxed);
    atomic_store_explicit(&own->claim, (uint64_t)epoch << 32, memory_order_release);
    int index = (int)(own - whole->slices);
    for (int k = 0; k < whole->n_slices; k++)
        run_units(&whole->slices[(index + k) % whole->n_slices], epoch, view->scores);
    /* units another slice took are being run: they end without waiting on
     * anything */
    for (int spins = 1; atomic_load_explicit(&own->done, memory_order_acquire) < n_units; spins++) {
        cpu_relax();
        if (spins % 1024 == 0) sched_yield();
    }
}

int engine_forward_slices(struct engine *engine, const struct engine_batch *batch) {
    int n = engine->n_slices, wanted = 0;
    /* epochs of this pass: past every epoch any slice reached before */
    uint32_t epoch = engine->slices[0].epoch;
    for (int i = 1; i < n; i++)
        if ((int32_t)(engine->slices[i].epoch - epoch) > 0) epoch = engine->slices[i].epoch;
    for (int i = 0; i < n; i++) engine->slices[i].epoch = epoch;
    for (int i = 0; i < n; i++) {
        int first = (int)((int64_t)batch->n_tokens * i / n);
        int end = (int)((int64_t)batch->n_tokens * (i + 1) / n);
        engine->slices[i].batch =
            (struct engine_batch){end - first, batch->tokens + first, batch->positions + first,
                                  batch->seqs + first, batch->want_logits + first};
        make_view(engine, i, first, wanted);
        for (int t = first; t < end; t++) wanted += batch->want_logits[t] == ENGINE_WANT_LOGITS;
    }
    tensor_pool_run(engine->pool, run_slice, engine);
    engine->profile = engine->slices[0].view.profile;
    int rows = 0;
    for (int i = 0; i < n && rows >= 0; i++)
        rows = engine->slices[i].result < 0 ? -1 : rows + engine->slices[i].result;
    return rows;
}
