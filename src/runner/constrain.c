/* constrain.c -- what a request allows the sampler: logit biases and a
 * grammar.
 *
 * Before a constrained sequence samples, its logits row is copied, its
 * biases are added (a bias of -100 bans the token) and, under a grammar,
 * every token whose bytes the grammar cannot take next is masked out
 * (src/grammar: a walk of the vocabulary's trie); the sampler then draws
 * from that row as usual. The random stream advances once per token
 * either way, so a constrained request resumed after a runner restart
 * draws what it would have drawn (DESIGN.md I8). Log-probabilities stay
 * the model's own, from the row before constraints. After a token is
 * taken, the grammar advances over its bytes; a grammar that can take
 * nothing more finishes the sequence. An end token (EOS, end of turn) is
 * allowed exactly when the grammar may end there, and then ends it.
 *
 * A grammar with a trigger (tool calls a model may or may not make) leaves
 * the output free until the trigger's text appears in it; the grammar then
 * starts at the trigger's first byte, reads what was written from there,
 * and constrains every token after. */
#include "runner_internal.h"

#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The vocabulary's trie, from the tokenizer's bytes of every token. */
static int build_vocab(struct runner *runner, char *err, size_t errlen) {
    const struct tokenizer *tok = runner->params.tokenizer;
    int n = runner->vocab_size;
    const char **bytes = calloc((size_t)n, sizeof(*bytes));
    size_t *lengths = calloc((size_t)n, sizeof(*lengths));
    int rc = -1;
    if (!bytes || !lengths) {
        snprintf(err, errlen, "runner: out of memory for the grammar vocabulary");
    } else if (tokenizer_vocab_size(tok) < n) {
        snprintf(err, errlen, "runner: the tokenizer has %d tokens, the model %d",
                 tokenizer_vocab_size(tok), n);
    } else {
        for (int i = 0; i < n; i++) bytes[i] = tokenizer_token_bytes(tok, i, &lengths[i]);
        rc = grammar_vocab_create(&runner->grammar_vocab, n, bytes, lengths, runner->params.eos,
                                  runner->params.n_eos, err, errlen);
    }
    free(bytes);
    free(lengths);
    return rc;
}

int runner_constrain_init(struct runner *runner, char *err, size_t errlen) {
    size_t row = (size_t)runner->n_scratch * (size_t)runner->vocab_size;
    runner->constrained = malloc(row * sizeof(float));
    runner->allowed = malloc(row);
    if (!runner->constrained || !runner->allowed) {
        snprintf(err, errlen, "runner: out of memory");
        return -1;
    }
    return runner->params.tokenizer ? build_vocab(runner, err, errlen) : 0;
}

void runner_constrain_free(struct runner *runner) {
    free(runner->constrained);
    free(runner->allowed);
    grammar_vocab_free(runner->grammar_vocab);
}

const char *runner_constrain_check(const struct runner *runner, const struct runner_request *q,
                                   char *why, size_t size) {
    for (int i = 0; i < q->n_biases; i++)
        if (q->biases[i].token >= runner->vocab_size) {
            snprintf(why, size, "logit_bias token %d is outside the vocabulary (0..%d)",
                     q->biases[i].token, runner->vocab_size - 1);
            return why;
        }
    if (q->grammar && !runner->grammar_vocab) {
        snprintf(why, size, "this runner has no tokenizer, so it cannot apply a grammar");
        return why;
    }
    return NULL;
}

int runner_constrain_start(struct runner *runner, struct runner_sequence *s, char *why,
                           size_t size) {
    char err[160];
    const struct runner_request *q = &s->request;
    if (!q->grammar) return 0;
    if (grammar_compile(&s->grammar, q->grammar, strlen(q->grammar), err, sizeof(err))) {
        snprintf(why, size, "grammar: %s", err);
        return -1;
    }
    if (!q->grammar_trigger && !(s->grammar_state = grammar_state_create(s->grammar))) {
        snprintf(why, size, "out of memory");
        return -1;
    }
    /* a resumed request's generated tokens are the prompt's tail */
    for (int i = q->n_prompt - q->resumed; i < q->n_prompt; i++)
        if (runner_constrain_advance(runner, s, q->prompt[i]) < 0) {
            snprintf(why, size, "resumed token %d (at %d) does not match the grammar", q->prompt[i],
                     i);
            return -1;
        }
    return 0;
}

void runner_constrain_end(struct runner_sequence *s) {
    runner_buffer_free(&s->before_trigger);
    grammar_state_free(s->grammar_state);
    grammar_free(s->grammar);
    s->grammar_state = NULL;
    s->grammar = NULL;
}

const float *runner_constrain_row(struct runner *runner, struct runner_sequence *s, int thread,
                                  const float *logits) {
    const struct runner_request *q = &s->request;
    if (q->n_biases == 0 && !s->grammar_state) return logits;
    size_t n = (size_t)runner->vocab_size;
    float *row = runner->constrained + (size_t)thread * n;
    memcpy(row, logits, n * sizeof(float));
    int bans = 0; /* a ban may leave nothing to sample, which is then an error, not a token */
    for (int i = 0; i < q->n_biases; i++) {
        int ban = q->biases[i].bias <= -RUNNER_BIAS_LIMIT;
        row[q->biases[i].token] = ban ? -INFINITY : row[q->biases[i].token] + q->biases[i].bias;
        bans |= ban;
    }
    if (s->grammar_state) {
        uint8_t *allowed = runner->allowed + (size_t)thread * n;
        if (grammar_mask(s->grammar_state, runner->grammar_vocab, allowed) <= 0) return NULL;
        for (size_t t = 0; t < n; t++)
            if (!allowed[t]) row[t] = -INFINITY;
    }
    for (size_t t = 0; bans && t < n; t++)
        if (row[t] > -INFINITY) return row;
    return bans ? NULL : row;
}

int runner_constrain_is_end(const struct runner *runner, int token) {
    for (int i = 0; i < runner->params.n_eos; i++)
        if (token == runner->params.eos[i]) return 1;
    return 0;
}

/* The first occurrence of needle (n bytes) in text[from..length), or -1. */
static long find_text(const uint8_t *text, size_t length, size_t from, const char *needle,
                      size_t n) {
    for (size_t at = from; at + n <= length; at++)
        if (!memcmp(text + at, needle, n)) return (long)at;
    return -1;
}

/* Before the trigger: adds token's bytes to the output and starts the
 * grammar at the trigger once it is there. 0, 1 (the grammar is already
 * complete) or -1 (out of memory). */
static int watch_for_trigger(const struct runner *runner, struct runner_sequence *s, int token) {
    const char *trigger = s->request.grammar_trigger;
    size_t length, n = strlen(trigger), before = s->before_trigger.length;
    const char *bytes = tokenizer_token_bytes(runner->params.tokenizer, token, &length);
    if (!bytes || runner_buffer_append(&s->before_trigger, bytes, length)) return -1;
    const uint8_t *text = s->before_trigger.data;
    long at =
        find_text(text, s->before_trigger.length, before + 1 > n ? before + 1 - n : 0, trigger, n);
    if (at < 0) return 0;
    struct grammar_state *state = grammar_state_create(s->grammar);
    if (!state) return -1;
    /* what follows the trigger in the same token must fit the grammar too;
     * if it does not, the output stays free and the watch goes on */
    if (grammar_accept(state, (const char *)text + at, s->before_trigger.length - (size_t)at)) {
        grammar_state_free(state);
        return 0;
    }
    s->grammar_state = state;
    runner_buffer_free(&s->before_trigger);
    return grammar_is_done(state);
}

int runner_constrain_advance(const struct runner *runner, struct runner_sequence *s, int token) {
    if (!s->grammar) return 0;
    if (!s->grammar_state) return watch_for_trigger(runner, s, token);
    if (runner_constrain_is_end(runner, token)) return grammar_can_end(s->grammar_state) ? 1 : -1;
    size_t length;
    const char *bytes = tokenizer_token_bytes(runner->params.tokenizer, token, &length);
    if (!bytes || grammar_accept(s->grammar_state, bytes, length)) return -1;
    return grammar_is_done(s->grammar_state);
}
