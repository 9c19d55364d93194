/* entry.c -- read access to vocabulary entries, for tools that write a
 * vocabulary back out (lockstep convert turns a llama2.c tokenizer.bin into
 * GGUF's tokenizer.ggml.tokens/scores/token_type arrays). */
#include "tokenizer_internal.h"

int tokenizer_token_entry(const struct tokenizer *tok, int id, struct tokenizer_entry *entry) {
    if (id < 0 || id >= tok->n_vocab) return -1;
    const struct tokenizer_token *t = &tok->tokens[id];
    entry->text = tok->arena + t->text;
    entry->text_len = t->text_len;
    entry->score = t->score;
    entry->type = t->type;
    return 0;
}
