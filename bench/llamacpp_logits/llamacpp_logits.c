/* llamacpp_logits.c -- llama.cpp's logits on the quantization fixtures,
 * for tests/data/llamacpp_logits.json (bench/llamacpp_logits/run builds
 * this against a llama.cpp the user built, and test_llamacpp_logits
 * compares lockstep's logits with what it writes).
 *
 * For one GGUF file and one prompt: the prompt tokenized by llama.cpp (BOS
 * as the file says), then the given continuation ids fed one at a time;
 * at each of the first POSITIONS positions after the prompt, the TOP
 * largest logits with their ids. It runs twice, with flash attention off
 * (the reference) and on: the largest difference between the two over
 * the whole vocabulary is llama.cpp's own spread on this file, which
 * float order alone makes (activation quantization turns a last-bit
 * difference into a different int8 now and then).
 *
 * usage: llamacpp_logits MODEL PROMPT POSITIONS TOP ID...   (one JSON object out) */
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 512

/* Logits at each of n_positions positions: (n_positions, vocab), malloc'd. */
static float *run(struct llama_model *model, const int *ids, int n_prompt, int n_positions,
                  int flash) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = MAX_IDS;
    cp.n_batch = MAX_IDS;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.flash_attn = flash;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    float *out = malloc(sizeof(float) * (size_t)vocab * (size_t)n_positions);
    if (!ctx || !out || llama_decode(ctx, llama_batch_get_one((int *)ids, n_prompt))) exit(1);
    for (int p = 0; p < n_positions; p++) {
        if (p > 0 && llama_decode(ctx, llama_batch_get_one((int *)ids + n_prompt + p - 1, 1)))
            exit(1);
        memcpy(out + (size_t)p * vocab, llama_get_logits_ith(ctx, -1), sizeof(float) * vocab);
    }
    llama_free(ctx);
    return out;
}

/* qsort's order: the row's logits, largest first (ties by id). */
static const float *sorted_row;
static int by_logit(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (sorted_row[i] != sorted_row[j]) return sorted_row[i] > sorted_row[j] ? -1 : 1;
    return i - j;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: llamacpp_logits MODEL PROMPT POSITIONS TOP ID...\n");
        return 2;
    }
    int positions = atoi(argv[3]), top = atoi(argv[4]), ids[MAX_IDS];
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return 1;
    const struct llama_vocab *v = llama_model_get_vocab(model);
    int vocab = llama_vocab_n_tokens(v);
    int n_prompt = llama_tokenize(v, argv[2], (int)strlen(argv[2]), ids, MAX_IDS,
                                  llama_vocab_get_add_bos(v), 0);
    if (n_prompt < 1 || argc - 5 < positions - 1) return 1;
    for (int i = 0; i < positions - 1; i++) ids[n_prompt + i] = atoi(argv[5 + i]);
    float *off = run(model, ids, n_prompt, positions, 0),
          *on = run(model, ids, n_prompt, positions, 1);
    double spread = 0;
    for (size_t i = 0; i < (size_t)positions * vocab; i++)
        if (fabs(off[i] - on[i]) > spread) spread = fabs(off[i] - on[i]);
    printf("{\"prompt_ids\":[");
    for (int i = 0; i < n_prompt; i++) printf("%s%d", i ? "," : "", ids[i]);
    printf("],\"spread\":%.6g,\"positions\":[", spread);
    int *order = malloc(sizeof(int) * (size_t)vocab);
    for (int p = 0; p < positions && order; p++) {
        sorted_row = off + (size_t)p * vocab;
        for (int i = 0; i < vocab; i++) order[i] = i;
        qsort(order, (size_t)vocab, sizeof(int), by_logit);
        printf("%s[", p ? "," : "");
        for (int k = 0; k < top && k < vocab; k++)
            printf("%s[%d,%.9g]", k ? "," : "", order[k], (double)sorted_row[order[k]]);
        printf("]");
    }
    printf("]}\n");
    free(order);
    free(off);
    free(on);
    llama_model_free(model);
    return 0;
}
