/* convert_llama2c.c -- `lockstep convert IN.bin -z tokenizer.bin`: a llama2.c
 * checkpoint and its tokenizer to GGUF, quantizing on the way if asked.
 *
 * The vocabulary is written as llama.cpp's own converter writes it: SPM
 * ("llama") pieces with spaces as "▁", byte tokens "<0xXX>", and ids of the
 * unknown/control tokens named <unk>, <s> and </s>, so llama.cpp reads the
 * result too. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The GGUF text of a token: llama2.c writes BOS/EOS as "\n<s>\n"; GGUF
 * wants the plain control names. */
static const char *gguf_token_text(const struct tokenizer *tok, int id,
                                   const struct tokenizer_entry *e, uint64_t *len) {
    const char *text = e->text;
    if (id == tokenizer_bos(tok))
        text = "<s>";
    else if (id == tokenizer_eos(tok))
        text = "</s>";
    else if (e->type == 2) /* unknown */
        text = "<unk>";
    else {
        *len = e->text_len;
        return text;
    }
    *len = strlen(text);
    return text;
}

/* Builds the vocabulary arrays of tok into vocab (arrays freed by the
 * caller with free_vocab). */
static int build_vocab(const struct tokenizer *tok, struct model_vocab *vocab) {
    int n = tokenizer_vocab_size(tok);
    const char **texts = malloc((size_t)n * sizeof(*texts));
    uint64_t *lengths = malloc((size_t)n * sizeof(*lengths));
    float *scores = malloc((size_t)n * sizeof(*scores));
    int32_t *types = malloc((size_t)n * sizeof(*types));
    *vocab = (struct model_vocab){
        "llama", n, texts, lengths, scores, types, tokenizer_bos(tok), tokenizer_eos(tok), 0, 1};
    if (!texts || !lengths || !scores || !types) return -1;
    for (int id = 0; id < n; id++) {
        struct tokenizer_entry e;
        if (tokenizer_token_entry(tok, id, &e)) return -1;
        texts[id] = gguf_token_text(tok, id, &e, &lengths[id]);
        scores[id] = e.score;
        types[id] = e.type;
        if (e.type == 2) vocab->unk = id;
    }
    return 0;
}

static void free_vocab(struct model_vocab *vocab) {
    free((void *)vocab->texts);
    free((void *)vocab->lengths);
    free((void *)vocab->scores);
    free((void *)vocab->types);
}

int convert_llama2c(const char *input, const char *tokenizer_path, enum tensor_type type,
                    enum model_mix mix, const char *output) {
    char err[512];
    struct cli_model m;
    struct model_vocab vocab;
    if (!tokenizer_path) {
        fprintf(stderr, "lockstep convert: %s: give the checkpoint's tokenizer with -z FILE\n",
                input);
        return -1;
    }
    if (model_is_gguf(input)) {
        fprintf(stderr, "lockstep convert: %s is already GGUF; give a llama2.c checkpoint\n",
                input);
        return -1;
    }
    if (cli_model_load(&m, "convert", input, tokenizer_path)) return -1;
    int rc = build_vocab(m.tokenizer, &vocab);
    if (rc)
        snprintf(err, sizeof(err), "out of memory building the vocabulary");
    else
        rc = model_write_gguf(m.model, type, mix, &vocab, "llama2.c", output, err, sizeof(err));
    if (rc) fprintf(stderr, "lockstep convert: %s\n", err);
    free_vocab(&vocab);
    cli_model_free(&m);
    return rc;
}
