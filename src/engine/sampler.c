/* sampler.c -- picks the next token from logits.
 *
 * The order of the filters is llama.cpp's default chain: repetition penalty,
 * top-k, top-p, min-p, temperature, then a draw from the remaining
 * distribution. Temperature <= 0 is greedy. The random stream is a seeded
 * xorshift64*, so the same seed and the same logits give the same tokens on
 * every machine. */
#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sampler_params_default(struct sampler_params *params) {
    params->temperature = 0.8f;
    params->top_k = 40;
    params->top_p = 0.95f;
    params->min_p = 0.05f;
    params->repeat_penalty = 1.0f;
    params->repeat_last_n = 64;
    params->seed = 0x5eed;
}

int sampler_init(struct sampler *sampler, const struct sampler_params *params, int vocab_size) {
    sampler->params = *params;
    /* xorshift must not start at zero; mix the seed so nearby seeds differ. */
    sampler->rng = params->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (sampler->rng == 0) sampler->rng = 1;
    sampler->vocab_size = vocab_size;
    sampler->candidates = malloc((size_t)vocab_size * sizeof(*sampler->candidates));
    return sampler->candidates ? 0 : -1;
}

void sampler_free(struct sampler *sampler) {
    free(sampler->candidates);
    sampler->candidates = NULL;
}

/* Uniform float in [0, 1) from the xorshift64* stream. */
static float next_uniform(struct sampler *sampler) {
    uint64_t x = sampler->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    sampler->rng = x;
    return (float)((x * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

void sampler_skip(struct sampler *sampler, int n) {
    /* greedy sampling draws nothing; otherwise each sample draws once */
    if (sampler->params.temperature <= 0.0f) return;
    for (int i = 0; i < n; i++) next_uniform(sampler);
}

/* log p(id) under softmax(logits). */
static float log_probability(const float *logits, int n, int id) {
    float max = logits[0];
    for (int i = 1; i < n; i++)
        if (logits[i] > max) max = logits[i];
    double sum = exp((double)(logits[0] - max));
    for (int i = 1; i < n; i++) sum += exp((double)(logits[i] - max));
    return (float)((double)(logits[id] - max) - log(sum));
}

/* Penalizes each distinct token of the last repeat_last_n of history once;
 * c is still indexed by token id. */
static void apply_repeat_penalty(const struct sampler *sampler, struct sampler_candidate *c,
                                 const int *history, int n_history) {
    float penalty = sampler->params.repeat_penalty;
    int start = n_history - sampler->params.repeat_last_n;
    if (penalty == 1.0f || sampler->params.repeat_last_n <= 0) return;
    if (start < 0) start = 0;
    for (int i = start; i < n_history; i++) {
        int id = history[i];
        int seen = 0;
        if (id < 0 || id >= sampler->vocab_size) continue;
        for (int j = start; j < i && !seen; j++) seen = history[j] == id;
        if (seen) continue;
        c[id].logit = c[id].logit > 0 ? c[id].logit / penalty : c[id].logit * penalty;
    }
}

static int by_logit_descending(const void *a, const void *b) {
    const struct sampler_candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id; /* ties by id keep the order deterministic */
}

/* Softmax of the first n candidates' logits divided by temperature into p. */
static void softmax_candidates(struct sampler_candidate *c, int n, float temperature) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) / temperature);
        sum += c[i].p;
    }
    for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

/* Applies top-k, top-p and min-p to the sorted candidates; returns how many
 * remain (at least one). */
static int filter_candidates(const struct sampler_params *p, struct sampler_candidate *c, int n) {
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    softmax_candidates(c, n, 1.0f);
    if (p->top_p < 1.0f) {
        float mass = 0.0f;
        for (int i = 0; i < n; i++) {
            mass += c[i].p;
            if (mass >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        float floor = p->min_p * c[0].p;
        int keep = 1;
        while (keep < n && c[keep].p >= floor) keep++;
        n = keep;
    }
    return n;
}

int sampler_sample(struct sampler *sampler, const float *logits, const int *history, int n_history,
                   float *logprob) {
    int n = sampler->vocab_size;
    struct sampler_candidate *c = sampler->candidates;
    int chosen = 0;

    for (int i = 0; i < n; i++) c[i] = (struct sampler_candidate){i, logits[i], 0.0f};
    apply_repeat_penalty(sampler, c, history, n_history);
    if (sampler->params.temperature <= 0.0f) {
        /* greedy: the first of the highest logits */
        for (int i = 1; i < n; i++)
            if (c[i].logit > c[chosen].logit) chosen = i;
    } else {
        qsort(c, (size_t)n, sizeof(*c), by_logit_descending);
        int kept = filter_candidates(&sampler->params, c, n);
        softmax_candidates(c, kept, sampler->params.temperature);
        float r = next_uniform(sampler), mass = 0.0f;
        chosen = c[kept - 1].id;
        for (int i = 0; i < kept; i++) {
            mass += c[i].p;
            if (r < mass) {
                chosen = c[i].id;
                break;
            }
        }
    }
    if (logprob) *logprob = log_probability(logits, n, chosen);
    return chosen;
}
