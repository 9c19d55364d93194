/* shard.c -- the slice of a model that one tensor-parallel rank holds.
 *
 * Megatron-style split over n ranks: each rank owns n_heads/n query heads
 * and n_kv_heads/n key/value heads (rows of wq, wk, wv and their biases;
 * the matching input columns of wo) and hidden_dim/n feed-forward units
 * (rows of gate and up; input columns of down). After wo and after down the
 * ranks hold partial sums that the engine adds across ranks: two all-reduces
 * per layer, done as all-gathers of fixed column parts added in one order so
 * that the degree does not change the result (see model_shard in model.h).
 * The classifier is split by vocabulary rows and gathered. Slices
 * are views: a row slice moves the data pointer by whole rows, a column
 * slice by whole blocks and keeps the full row stride. */
#include "model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows [begin, begin + count) of w. */
static struct tensor_matrix slice_rows(const struct tensor_matrix *w, int begin, int count) {
    struct tensor_matrix s = *w;
    s.data = (const char *)w->data + (size_t)begin * w->row_stride;
    s.rows = count;
    return s;
}

/* Columns [begin, begin + count) of w; both multiples of the block size. */
static struct tensor_matrix slice_columns(const struct tensor_matrix *w, int begin, int count) {
    struct tensor_matrix s = *w;
    s.data = (const char *)w->data + tensor_row_bytes(w->type, begin);
    s.cols = count;
    return s;
}

/* Why the column-split matrices of the table cannot be cut n ways on
 * whole blocks (every layer: files mix types per layer), into reason. */
static void column_problem(const struct model *m, int n, char *reason, size_t size) {
    for (int i = 0; i < model_tensor_count; i++) {
        const struct model_tensor_info *t = &model_tensors[i];
        if (t->shard != MODEL_SHARD_COLUMNS) continue;
        for (int l = 0; l < m->config.n_layers; l++) {
            const struct tensor_matrix *w = model_tensor_matrix_of(m, t, l);
            int cols = w->cols / n, block = tensor_type_block_elements(w->type);
            if (w->data && cols % block != 0) {
                snprintf(reason, size,
                         "blk.%d.%s slices of %d columns are not whole %d-element %s blocks", l,
                         t->suffix, cols, block, tensor_type_name(w->type));
                return;
            }
        }
    }
}

/* Why the model cannot be split n ways into reason, or "" if it can. */
static void split_problem(const struct model *m, int n, char *reason, size_t size) {
    const struct model_config *c = &m->config;
    reason[0] = '\0';
    if (n < 1 || n > c->vocab_size)
        snprintf(reason, size, "%d ranks is out of range", n);
    else if (c->n_heads % n || c->n_kv_heads % n)
        snprintf(reason, size, "%d query heads and %d key/value heads do not divide by %d",
                 c->n_heads, c->n_kv_heads, n);
    else if (c->hidden_dim % n)
        snprintf(reason, size, "feed-forward length %d does not divide by %d", c->hidden_dim, n);
    else
        column_problem(m, n, reason, size);
}

/* "1, 2, 4": the degrees up to n_heads that the model can take. */
static void possible_degrees(const struct model *m, char *out, size_t size) {
    char reason[160];
    size_t used = 0;
    out[0] = '\0';
    for (int n = 1; n <= m->config.n_heads && used + 16 < size; n++) {
        split_problem(m, n, reason, sizeof(reason));
        if (reason[0] == '\0')
            used += (size_t)snprintf(out + used, size - used, "%s%d", used ? ", " : "", n);
    }
}

int model_reduction_parts(const struct model *whole) {
    char reason[160];
    for (int parts = 4; parts > 1; parts /= 2) {
        split_problem(whole, parts, reason, sizeof(reason));
        if (reason[0] == '\0') return parts;
    }
    return 1;
}

/* Layer l of m becomes its rank's slice, as the table says each tensor
 * splits: rows (and their biases) and columns in n equal parts. */
static void shard_layer(struct model *m, const struct model_config *whole, int l, int rank, int n) {
    for (int i = 0; i < model_tensor_count; i++) {
        const struct model_tensor_info *t = &model_tensors[i];
        if (!t->in_block || t->shard == MODEL_SHARD_REPLICATED) continue;
        if (t->kind != MODEL_TENSOR_MATRIX) { /* a bias: its rows' slice */
            const float **v = model_tensor_vector(m, t, l);
            int count = model_width_of(whole, t->cols) / n;
            if (*v) *v += rank * count;
            continue;
        }
        struct tensor_matrix *w = model_tensor_matrix(m, t, l);
        if (t->shard == MODEL_SHARD_ROWS) {
            int count = model_width_of(whole, t->rows) / n;
            *w = slice_rows(w, rank * count, count);
        } else {
            int count = model_width_of(whole, t->cols) / n;
            *w = slice_columns(w, rank * count, count);
        }
    }
}

/* "<reason>; degrees that work: 1, 2" into out and -1 if the model cannot
 * be split n ways (or rank is not one of n), else 0. */
static int degree_problem(const struct model *m, int n, int rank, char *out, size_t size) {
    char reason[160], degrees[128];
    split_problem(m, n, reason, sizeof(reason));
    if (reason[0] == '\0' && rank >= 0 && rank < n) return 0;
    possible_degrees(m, degrees, sizeof(degrees));
    snprintf(out, size, "%s; degrees that work: %s", reason[0] ? reason : "rank out of range",
             degrees);
    return -1;
}

int model_check_degree(const struct model *whole, int n, char *why, size_t whylen) {
    char problem[320];
    if (degree_problem(whole, n, 0, problem, sizeof(problem)) == 0) return 0;
    snprintf(why, whylen, "%s: cannot split %d ways: %s", whole->path, n, problem);
    return -1;
}

int model_shard(const struct model *whole, int rank, int n, struct model **out, char *err,
                size_t errlen) {
    char problem[320];
    *out = NULL;
    if (degree_problem(whole, n, rank, problem, sizeof(problem))) {
        snprintf(err, errlen, "%s: cannot split %d ways (rank %d): %s", whole->path, n, rank,
                 problem);
        return -1;
    }
    struct model *m = calloc(1, sizeof(*m));
    if (m) *m = *whole;
    if (!m || !(m->layers = malloc((size_t)whole->config.n_layers * sizeof(*m->layers))) ||
        !(m->path = strdup(whole->path))) {
        snprintf(err, errlen, "%s: out of memory", whole->path);
        if (m && m->layers != whole->layers) free(m->layers);
        free(m);
        return -1;
    }
    m->gguf = NULL; /* whole owns the file */
    m->mapping = NULL;
    m->mapping_size = 0;
    for (int l = 0; l < whole->config.n_layers; l++) {
        m->layers[l] = whole->layers[l];
        shard_layer(m, &whole->config, l, rank, n);
    }
    m->config.n_heads = whole->config.n_heads / n;
    m->config.n_kv_heads = whole->config.n_kv_heads / n;
    m->config.hidden_dim = whole->config.hidden_dim / n;
    m->vocab_begin = (int)((int64_t)whole->config.vocab_size * rank / n);
    int vocab_end = (int)((int64_t)whole->config.vocab_size * (rank + 1) / n);
    m->output = slice_rows(&whole->output, m->vocab_begin, vocab_end - m->vocab_begin);
    m->shard_rank = rank;
    m->shard_count = n;
    m->reduce_parts = whole->reduce_parts % n == 0 ? whole->reduce_parts / n : 1;
    m->weight_bytes = model_count_weight_bytes(m);
    *out = m;
    return 0;
}
