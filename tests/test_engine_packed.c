/* test_engine_packed.c -- an engine on packed weights (weights.c) gives the
 * logits of an engine on the file's rows, bit for bit.
 *
 * On a seeded random Q8_0 model (llama and qwen2) written to a file:
 *  - an engine started under AVX2, and one under AVX-512 where the CPU has
 *    it, packs every layer matrix and the classifier (and leaves the
 *    caller's model as it was);
 *  - an engine started under the scalar kernels packs nothing but copies
 *    every layer matrix's rows into its own memory; it starts after the
 *    first one, so it reads the rows that the first released from memory
 *    (they must come back from the file unchanged);
 *  - both, running the packing one's kernels, give the same logits for a prompt
 *    prefilled in chunks of 5 and for 8 generated tokens.
 * Skipped (77) on a CPU without AVX2, where nothing is packed. */
#include "engine/engine.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define PROMPT_LEN 23
#define STEPS      8

/* Logits after a prompt prefilled in chunks of 5, then after each of STEPS
 * greedy tokens: (STEPS + 1, vocab) into out. */
static void run_sequence(struct engine *engine, float *out) {
    char err[256];
    int vocab = engine->model->config.vocab_size;
    int tokens[PROMPT_LEN + STEPS];
    struct kv_sequence seq = {0};
    for (int i = 0; i < PROMPT_LEN; i++) tokens[i] = (i * 29 + 3) % vocab;
    CHECK(kv_sequence_reserve(&engine->kv, &seq, PROMPT_LEN + STEPS) == 0);
    for (int done = 0; done < PROMPT_LEN; done += 5) {
        int n = PROMPT_LEN - done < 5 ? PROMPT_LEN - done : 5;
        CHECK_MSG(engine_run_sequence(engine, &seq, tokens + done, n, done, err, sizeof(err)) == 0,
                  "%s", err);
    }
    for (int step = 0; step <= STEPS; step++) {
        memcpy(out + (size_t)step * vocab, engine->logits, (size_t)vocab * sizeof(float));
        if (step == STEPS) break;
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (engine->logits[v] > engine->logits[best]) best = v;
        tokens[PROMPT_LEN + step] = best;
        CHECK_MSG(engine_run_sequence(engine, &seq, tokens + PROMPT_LEN + step, 1,
                                      PROMPT_LEN + step, err, sizeof(err)) == 0,
                  "%s", err);
    }
    kv_sequence_release(&engine->kv, &seq);
}

/* 1 if every layer matrix of m lies in [begin, begin + bytes). */
static int all_layers_inside(const struct model *m, const void *begin, size_t bytes) {
    const char *first = begin, *end = first + bytes;
    for (int l = 0; l < m->config.n_layers; l++) {
        const struct model_layer *w = &m->layers[l];
        const struct tensor_matrix *all[] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                             &w->w_gate, &w->w_up, &w->w_down};
        for (int i = 0; i < 7; i++) {
            const char *data = all[i]->data;
            if (data < first || data + (size_t)all[i]->rows * all[i]->row_stride > end) return 0;
        }
    }
    return 1;
}

static int all_layers_packed(const struct model *m, enum tensor_layout layout) {
    for (int l = 0; l < m->config.n_layers; l++) {
        const struct model_layer *w = &m->layers[l];
        const struct tensor_matrix *all[] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                             &w->w_gate, &w->w_up, &w->w_down};
        for (int i = 0; i < 7; i++)
            if (all[i]->layout != layout) return 0;
    }
    return 1;
}

static void check_arch(enum model_arch arch, enum tensor_isa isa) {
    char path[512], err[512];
    struct model_random_params params = {arch,        128, 256,           2, 4, 2, 300, 64,
                                         TENSOR_Q8_0, 7,   MODEL_MIX_NONE};
    struct model *model = NULL;
    test_tmp_path(path, sizeof(path), "packed.gguf");
    CHECK_MSG(model_write_random(&params, path, err, sizeof(err)) == 0, "write: %s", err);
    if (model_load(&model, path, err, sizeof(err))) {
        CHECK_MSG(0, "load: %s", err);
        return;
    }
    size_t n = (size_t)(STEPS + 1) * model->config.vocab_size;
    float *packed_logits = malloc(n * sizeof(float)), *row_logits = malloc(n * sizeof(float));
    struct engine_params ep = {.n_threads = 2,
                               .max_tokens = 16,
                               .kv_block_size = 16,
                               .kv_blocks = 4,
                               .kv_type = TENSOR_F16};
    struct engine packed, rows;

    CHECK(tensor_isa_select(isa) == 0);
    CHECK(engine_init(&packed, model, &ep, err, sizeof(err)) == 0);
    CHECK_MSG(packed.packed_weights != NULL &&
                  all_layers_packed(packed.model, TENSOR_LAYOUT_PANELS),
              "%s: %s engine did not pack its layers", model_arch_name(arch),
              tensor_isa_name(tensor_isa_current()));
    CHECK_MSG(packed.model->output.data == model->token_embd.data ||
                  packed.model->output.layout == TENSOR_LAYOUT_PANELS,
              "%s: untied classifier not packed", model_arch_name(arch));
    CHECK_MSG(all_layers_packed(model, TENSOR_LAYOUT_ROWS), "the caller's model was changed");

    CHECK(tensor_isa_select(TENSOR_ISA_SCALAR) == 0);
    CHECK(engine_init(&rows, model, &ep, err, sizeof(err)) == 0);
    CHECK(tensor_isa_select(isa) == 0);
    CHECK_MSG(rows.packed_weights != NULL && rows.model != model &&
                  all_layers_packed(rows.model, TENSOR_LAYOUT_ROWS) &&
                  all_layers_inside(rows.model, rows.packed_weights, rows.packed_bytes),
              "%s: the scalar engine did not copy its layers' rows into its own memory",
              model_arch_name(arch));

    run_sequence(&packed, packed_logits);
    run_sequence(&rows, row_logits);
    CHECK_MSG(memcmp(packed_logits, row_logits, n * sizeof(float)) == 0,
              "%s: packed weights change the logits (max diff %g)", model_arch_name(arch),
              test_max_abs_diff(packed_logits, row_logits, (int)n));
    engine_free(&packed);
    engine_free(&rows);
    free(packed_logits);
    free(row_logits);
    model_free(model);
    remove(path);
}

int main(void) {
    if (!tensor_panels_preferred(TENSOR_Q8_0) && !tensor_panels_preferred(TENSOR_Q4_0)) {
        printf("skip: the kernels of this CPU prefer no panels, so the engine packs nothing\n");
        return 77;
    }
    for (int isa = TENSOR_ISA_SCALAR + 1; isa < TENSOR_ISA_COUNT; isa++) {
        if (!tensor_isa_available((enum tensor_isa)isa)) continue;
        check_arch(MODEL_ARCH_LLAMA, (enum tensor_isa)isa);
        check_arch(MODEL_ARCH_QWEN2, (enum tensor_isa)isa);
    }
    return test_status("test_engine_packed");
}
