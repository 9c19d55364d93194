/* sampler.c -- picks the next token from logits.
 *
 * The order of the filters is llama.cpp's default chain: repetition penalty,
 * top-k, top-p, min-p, temperature, then a draw from the remaining
 * distribution, walked from the most likely token down. Temperature <= 0
 * is greedy. Without top-k and top-p (the OpenAI API's defaults) nothing
 * needs a ranking: as llama.cpp's chain does then, min-p keeps the logits
 * within log(min-p) of the highest, and the draw walks the tokens in id
 * order (draw_unranked). The random stream is a seeded xorshift64*, and
 * the draw's exponentials (tensor_exp_weights) and sums have fixed bits,
 * so the same seed and the same logits give the same tokens on every
 * machine.
 *
 * The runner samples every sequence of a step between two steps (on the
 * threads of the leader's pool), and no rank computes while it does, so
 * the cost per token is paid once per sequence per step. A comparison sort
 * of the whole vocabulary took 4 ms for 32000 tokens (22 ms for 152064);
 * instead, top-k picks its k tokens with a heap and sorts only those,
 * top-p alone ranks with a radix sort only the tokens that can make its
 * nucleus (rank_nucleus), and greedy sampling and the unranked draw read
 * the logits without making candidates. Each gives the order the
 * comparison sort gave (logit descending, ties by id). Top-p alone takes
 * its probabilities from every token's weight (tensor_exp_weights). */
#include "engine.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void sampler_params_default(struct sampler_params *params) {
    params->temperature = 0.8f;
    params->top_k = 40;
    params->top_p = 0.95f;
    params->min_p = 0.05f;
    params->repeat_penalty = 1.0f;
    params->presence_penalty = 0.0f;
    params->frequency_penalty = 0.0f;
    params->repeat_last_n = 64;
    params->seed = 0x5eed;
}

void sampler_init(struct sampler *sampler, const struct sampler_params *params, int vocab_size) {
    sampler->params = *params;
    /* xorshift must not start at zero; mix the seed so nearby seeds differ. */
    sampler->rng = params->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (sampler->rng == 0) sampler->rng = 1;
    sampler->vocab_size = vocab_size;
}

int sampler_scratch_init(struct sampler_scratch *scratch, int vocab_size) {
    scratch->vocab_size = vocab_size;
    scratch->logits = malloc((size_t)vocab_size * sizeof(*scratch->logits));
    scratch->weights = malloc((size_t)vocab_size * sizeof(*scratch->weights));
    scratch->candidates = malloc((size_t)vocab_size * sizeof(*scratch->candidates));
    scratch->spare = malloc((size_t)vocab_size * sizeof(*scratch->spare));
    scratch->order = malloc((size_t)vocab_size * sizeof(*scratch->order));
    scratch->order_spare = malloc((size_t)vocab_size * sizeof(*scratch->order_spare));
    if (scratch->logits && scratch->weights && scratch->candidates && scratch->spare &&
        scratch->order && scratch->order_spare)
        return 0;
    sampler_scratch_free(scratch);
    return -1;
}

void sampler_scratch_free(struct sampler_scratch *scratch) {
    free(scratch->logits);
    free(scratch->weights);
    free(scratch->candidates);
    free(scratch->spare);
    free(scratch->order);
    free(scratch->order_spare);
    scratch->logits = NULL;
    scratch->weights = NULL;
    scratch->candidates = NULL;
    scratch->spare = NULL;
    scratch->order = NULL;
    scratch->order_spare = NULL;
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

/* Whether a penalty changes any logit. */
static int penalty_applies(const struct sampler_params *p, int n_history) {
    int any =
        p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    return any && p->repeat_last_n > 0 && n_history > 0;
}

/* Penalizes each distinct token of the last repeat_last_n of history once
 * in logits (indexed by token id): divided (a positive logit) or multiplied
 * by the repetition penalty, then less the presence penalty and the
 * frequency penalty times the token's count in that window (OpenAI's
 * additive penalties, over llama.cpp's window). */
static void apply_penalties(const struct sampler *sampler, float *logits, const int *history,
                            int n_history) {
    const struct sampler_params *p = &sampler->params;
    int start = n_history - p->repeat_last_n;
    if (start < 0) start = 0;
    for (int i = start; i < n_history; i++) {
        int id = history[i], seen = 0, count = 1;
        if (id < 0 || id >= sampler->vocab_size) continue;
        for (int j = start; j < i && !seen; j++) seen = history[j] == id;
        if (seen) continue;
        for (int j = i + 1; j < n_history; j++) count += history[j] == id;
        float logit = logits[id];
        logit = logit > 0 ? logit / p->repeat_penalty : logit * p->repeat_penalty;
        logits[id] = logit - p->presence_penalty - p->frequency_penalty * (float)count;
    }
}

static int by_logit_descending(const void *a, const void *b) {
    const struct sampler_candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id; /* ties by id keep the order deterministic */
}

/* Whether a goes before b in by_logit_descending's order. */
static int goes_before(const struct sampler_candidate *a, const struct sampler_candidate *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* Restores the heap below node i of heap (n nodes), whose every parent
 * goes after its children: the root is the last in order. */
static void sift_down(struct sampler_candidate *heap, int n, int i) {
    for (;;) {
        int last = i, left = 2 * i + 1, right = left + 1;
        if (left < n && goes_before(&heap[last], &heap[left])) last = left;
        if (right < n && goes_before(&heap[last], &heap[right])) last = right;
        if (last == i) return;
        struct sampler_candidate t = heap[i];
        heap[i] = heap[last];
        heap[last] = t;
        i = last;
    }
}

#define SCAN_LANES 16 /* logits compared with the heap's root at once */

/* The k tokens of logits (n) that go first in by_logit_descending's order,
 * sorted into c[0 .. k): a heap of the k best so far, whose root (the worst
 * of them) each later token has to beat. A later token comes after every
 * earlier one of its logit (a higher id), so only a logit above the root's
 * beats it; SCAN_LANES logits are compared at once and passed over
 * together when none is above (a loop the compiler makes vector
 * compares). */
static void select_first(struct sampler_candidate *c, const float *logits, int n, int k) {
    for (int i = 0; i < k; i++) c[i] = (struct sampler_candidate){i, logits[i], 0.0f};
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(c, k, i);
    int i = k;
    for (; i + SCAN_LANES <= n; i += SCAN_LANES) {
        float root = c[0].logit;
        int above = 0;
        for (int j = 0; j < SCAN_LANES; j++) above |= logits[i + j] > root;
        if (!above) continue;
        for (int j = i; j < i + SCAN_LANES; j++)
            if (logits[j] > c[0].logit) {
                c[0] = (struct sampler_candidate){j, logits[j], 0.0f};
                sift_down(c, k, 0);
            }
    }
    for (; i < n; i++)
        if (logits[i] > c[0].logit) {
            c[0] = (struct sampler_candidate){i, logits[i], 0.0f};
            sift_down(c, k, 0);
        }
    qsort(c, (size_t)k, sizeof(*c), by_logit_descending);
}

/* A key whose unsigned order is the logit's descending order (-0 and +0
 * alike, as == has them). */
static uint32_t descending_key(float logit) {
    uint32_t bits;
    if (logit == 0.0f) logit = 0.0f;
    memcpy(&bits, &logit, sizeof(bits));
    uint32_t ascending = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
    return ~ascending;
}

#define RADIX_BITS 11 /* three passes cover the 32-bit key */
#define RADIX_SIZE (1u << RADIX_BITS)

/* The candidates (n, in id order, in scratch->candidates) in
 * by_logit_descending's order, in scratch->spare: a least-significant-digit
 * radix sort of (descending_key, id) pairs in 64-bit words, three passes
 * over the key's digits after one that counts them all. Each pass is
 * stable, so equal logits keep their id order. */
static struct sampler_candidate *sort_all(struct sampler_scratch *scratch, int n) {
    static_assert(3 * RADIX_BITS >= 32, "three passes must cover the key");
    const struct sampler_candidate *c = scratch->candidates;
    uint64_t *from = scratch->order, *to = scratch->order_spare;
    uint32_t counts[3][RADIX_SIZE] = {{0}};
    for (int i = 0; i < n; i++) {
        uint32_t key = descending_key(c[i].logit);
        from[i] = (uint64_t)key << 32 | (uint32_t)i;
        for (int pass = 0; pass < 3; pass++)
            counts[pass][(key >> (RADIX_BITS * pass)) % RADIX_SIZE]++;
    }
    for (int pass = 0; pass < 3; pass++) {
        uint32_t at = 0;
        for (uint32_t d = 0; d < RADIX_SIZE; d++) {
            uint32_t count = counts[pass][d];
            counts[pass][d] = at;
            at += count;
        }
        int shift = 32 + RADIX_BITS * pass;
        for (int i = 0; i < n; i++) to[counts[pass][(from[i] >> shift) % RADIX_SIZE]++] = from[i];
        uint64_t *t = from;
        from = to;
        to = t;
    }
    struct sampler_candidate *sorted = scratch->spare;
    for (int i = 0; i < n; i++) sorted[i] = c[(uint32_t)from[i]];
    return sorted;
}

#define MAX_CHAINS 8 /* independent running maxima: the loop is not one chain of compares */

/* The first of the highest logits: their maximum, then the first logit
 * equal to it (measured: 32000 logits in 5.5 us, against 26 us for one
 * running maximum and its index). Equal to that loop also for ties, signed
 * zeros and a NaN first logit (index 0). */
static int first_highest(const float *logits, int n) {
    float best[MAX_CHAINS];
    for (int k = 0; k < MAX_CHAINS; k++) best[k] = logits[0];
    int i = 0;
    for (; i + MAX_CHAINS <= n; i += MAX_CHAINS)
        for (int k = 0; k < MAX_CHAINS; k++)
            if (logits[i + k] > best[k]) best[k] = logits[i + k];
    for (; i < n; i++)
        if (logits[i] > best[0]) best[0] = logits[i];
    float highest = best[0];
    for (int k = 1; k < MAX_CHAINS; k++)
        if (best[k] > highest) highest = best[k];
    for (i = 0; i < n; i++)
        if (logits[i] == highest) return i;
    return 0;
}

/* e^((logit - top logit) / temperature) of the first n candidates into
 * their p, and the sum of them in order. Candidate i's probability is then
 * probability(c, i, sum): computed only for the candidates the filters and
 * the draw reach, which with a peaked distribution are a few. */
static double exponentiate(struct sampler_candidate *c, int n, float temperature) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) / temperature);
        sum += c[i].p;
    }
    return sum;
}

static float probability(const struct sampler_candidate *c, int i, double sum) {
    return (float)(c[i].p / sum);
}

/* Applies top-p and min-p to the ranked candidates c (n), whose p hold
 * their weights at temperature 1 and of which sum is the total; returns how
 * many remain (at least one). */
static int filter_candidates(const struct sampler_params *p, struct sampler_candidate *c, int n,
                             double sum) {
    if (p->top_p < 1.0f) {
        float mass = 0.0f;
        for (int i = 0; i < n; i++) {
            mass += probability(c, i, sum);
            if (mass >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        float floor = p->min_p * probability(c, 0, sum);
        int keep = 1;
        while (keep < n && probability(c, keep, sum) >= floor) keep++;
        n = keep;
    }
    return n;
}

/* Whether the filters need the candidates ranked: top-k and top-p do. */
static int needs_ranking(const struct sampler_params *p, int n) {
    return (p->top_k > 0 && p->top_k < n) || p->top_p < 1.0f;
}

#define SUM_CHAINS 8 /* running sums of the weights: the adds are not one chain */

/* The sum of w (n), in SUM_CHAINS running sums over i mod SUM_CHAINS
 * added in order: a fixed sequence, the same on every machine. */
static double sum_weights(const float *w, int n) {
    double sums[SUM_CHAINS] = {0.0};
    int i = 0;
    for (; i + SUM_CHAINS <= n; i += SUM_CHAINS)
        for (int k = 0; k < SUM_CHAINS; k++) sums[k] += w[i + k];
    for (; i < n; i++) sums[0] += w[i];
    double sum = 0.0;
    for (int k = 0; k < SUM_CHAINS; k++) sum += sums[k];
    return sum;
}

/* weights[i] = e^((logits[i] - highest) / temperature) for the n logits,
 * 0 for those below the highest plus log_min_p (-INFINITY: none; weights
 * may be logits); returns their sum (sum_weights), highest into *highest. */
static double weigh(const float *logits, float *weights, int n, float temperature, float log_min_p,
                    float *highest) {
    *highest = logits[first_highest(logits, n)];
    float floor = log_min_p > -INFINITY ? *highest + log_min_p : -INFINITY;
    tensor_exp_weights(weights, logits, n, *highest, temperature, floor);
    return sum_weights(weights, n);
}

/* The token drawn without a ranking from logits (n, penalized), each
 * token's weight written to weights (n; it may be logits): min-p drops the
 * logits below the highest plus log(min-p) (llama.cpp's min-p on unsorted
 * candidates), the others weigh e^((logit - highest) / temperature)
 * (tensor_exp_weights), and the draw walks the tokens in id order to where
 * the weights passed make more than the uniform draw times their sum. */
static int draw_unranked(struct sampler *sampler, const float *logits, float *weights, int n) {
    const struct sampler_params *p = &sampler->params;
    float highest;
    float log_min_p = p->min_p > 0.0f ? logf(p->min_p) : -INFINITY;
    double sum = weigh(logits, weights, n, p->temperature, log_min_p, &highest);
    double target = next_uniform(sampler) * sum, passed = 0.0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (weights[i] == 0.0f) continue;
        passed += weights[i];
        last = i;
        if (target < passed) return i;
    }
    return last;
}

#define EXPONENTS      256          /* biased binary exponents of a float */
#define NUCLEUS_MARGIN (1.0 / 32.0) /* of the sum: far more than float sums stray */
#define HISTOGRAMS     4            /* interleaved, so the adds are not one chain */

static int exponent_of(float w) {
    uint32_t bits;
    memcpy(&bits, &w, sizeof(bits));
    return (int)(bits >> 23 & 0xff);
}

/* The candidates that can make the top-p nucleus, ranked (*n_ranked of
 * them, in scratch), each p its weight e^(logit - highest)
 * (tensor_exp_weights), and the sum of every token's weight (*sum): the
 * nucleus is a prefix of the whole ranking, so only the tokens whose
 * weights have the highest binary exponents, enough to make top-p plus a
 * margin of the sum, are ranked. The filter's float sums stray from the
 * exact ones by far less than the margin (at most 2^-24 a token), so the
 * nucleus never reaches past them, and the tokens are those of a ranking
 * of the whole vocabulary. */
static struct sampler_candidate *rank_nucleus(struct sampler_scratch *scratch, const float *logits,
                                              int n, float top_p, int *n_ranked, double *sum) {
    float *w = scratch->weights, highest;
    *sum = weigh(logits, w, n, 1.0f, -INFINITY, &highest);
    double mass[HISTOGRAMS][EXPONENTS] = {{0.0}};
    for (int i = 0; i < n; i++) mass[i % HISTOGRAMS][exponent_of(w[i])] += w[i];
    double need = ((double)top_p + NUCLEUS_MARGIN) * *sum, passed = 0.0;
    int lowest = EXPONENTS;
    while (lowest > 0 && passed < need) {
        lowest--;
        for (int h = 0; h < HISTOGRAMS; h++) passed += mass[h][lowest];
    }
    struct sampler_candidate *c = scratch->candidates;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (exponent_of(w[i]) >= lowest) c[m++] = (struct sampler_candidate){i, logits[i], w[i]};
    *n_ranked = m;
    return sort_all(scratch, m);
}

/* The token drawn from the first n ranked candidates at the temperature,
 * walked from the most likely down. */
static int draw_ranked(struct sampler *sampler, struct sampler_candidate *c, int n) {
    double sum = exponentiate(c, n, sampler->params.temperature);
    float r = next_uniform(sampler), mass = 0.0f;
    for (int i = 0; i < n; i++) {
        mass += probability(c, i, sum);
        if (r < mass) return c[i].id;
    }
    return c[n - 1].id;
}

int sampler_sample(struct sampler *sampler, struct sampler_scratch *scratch, const float *logits,
                   const int *history, int n_history) {
    const struct sampler_params *p = &sampler->params;
    int n = sampler->vocab_size;
    assert(scratch->vocab_size >= n);
    const float *penalized = logits; /* copied only when a penalty changes it */
    if (penalty_applies(p, n_history)) {
        memcpy(scratch->logits, logits, (size_t)n * sizeof(*scratch->logits));
        apply_penalties(sampler, scratch->logits, history, n_history);
        penalized = scratch->logits;
    }
    if (p->temperature <= 0.0f) return first_highest(penalized, n);
    if (!needs_ranking(p, n)) return draw_unranked(sampler, penalized, scratch->logits, n);
    struct sampler_candidate *c = scratch->candidates;
    double sum = 0.0;
    int ranked;
    if (p->top_k > 0 && p->top_k < n) {
        select_first(c, penalized, n, p->top_k);
        ranked = p->top_k;
        if (p->top_p < 1.0f || p->min_p > 0.0f) sum = exponentiate(c, ranked, 1.0f);
    } else {
        c = rank_nucleus(scratch, penalized, n, p->top_p, &ranked, &sum);
    }
    return draw_ranked(sampler, c, filter_candidates(p, c, ranked, sum));
}

double sampler_log_normalizer(struct sampler_scratch *scratch, const float *logits, int n,
                              float *highest) {
    return log(weigh(logits, scratch->logits, n, 1.0f, -INFINITY, highest));
}
