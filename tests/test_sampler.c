/* test_sampler.c -- greedy, seeded sampling, and each filter of the sampler
 * on hand-made logits whose right answers are known; and the sampler's
 * partial and radix sorts and its unranked draw against the whole chain run
 * with a comparison sort, token for token. */
#include "engine/engine.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 8

/* the work space every sampler of the test shares (BIG_VOCAB tokens) */
static struct sampler_scratch scratch;

static const float logits[VOCAB] = {1.0f, 3.0f, 2.5f, -1.0f, 0.0f, 2.9f, -2.0f, 0.5f};

static struct sampler_params plain(float temperature, uint64_t seed) {
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = seed;
    return p;
}

static int sample_once(struct sampler_params p, const int *history, int n_history) {
    struct sampler s;
    sampler_init(&s, &p, VOCAB);
    int id = sampler_sample(&s, &scratch, logits, history, n_history);
    return id;
}

/* Frequencies of n draws into counts. */
static void draw(struct sampler_params p, int n, int *counts) {
    struct sampler s;
    memset(counts, 0, VOCAB * sizeof(int));
    sampler_init(&s, &p, VOCAB);
    for (int i = 0; i < n; i++) counts[sampler_sample(&s, &scratch, logits, NULL, 0)]++;
}

static void test_greedy_and_logprob(void) {
    struct sampler s;
    struct sampler_params p = plain(0.0f, 1);
    float highest;
    sampler_init(&s, &p, VOCAB);
    CHECK(sampler_sample(&s, &scratch, logits, NULL, 0) == 1);
    double normalizer = sampler_log_normalizer(&scratch, logits, VOCAB, &highest);
    float logprob = sampler_log_probability(logits[1], highest, normalizer);
    double sum = 0;
    for (int i = 0; i < VOCAB; i++) sum += exp(logits[i]);
    CHECK_MSG(fabsf(logprob - (float)(3.0 - log(sum))) < 1e-5f, "logprob %g", logprob);
}

static void test_seeded_repeatable(void) {
    int a[64], b[64], differs = 0;
    struct sampler s1, s2, s3;
    struct sampler_params p = plain(1.0f, 42), q = plain(1.0f, 43);
    /* the three share one work space, as the sequences of a runner do */
    sampler_init(&s1, &p, VOCAB);
    sampler_init(&s2, &p, VOCAB);
    sampler_init(&s3, &q, VOCAB);
    for (int i = 0; i < 64; i++) {
        a[i] = sampler_sample(&s1, &scratch, logits, NULL, 0);
        b[i] = sampler_sample(&s2, &scratch, logits, NULL, 0);
        differs += sampler_sample(&s3, &scratch, logits, NULL, 0) != a[i];
    }
    CHECK(memcmp(a, b, sizeof(a)) == 0);
    CHECK(differs > 0);
}

static void test_distribution(void) {
    /* temperature 1, no filters: frequencies follow softmax(logits) */
    int counts[VOCAB], n = 40000;
    double sum = 0;
    draw(plain(1.0f, 7), n, counts);
    for (int i = 0; i < VOCAB; i++) sum += exp(logits[i]);
    for (int i = 0; i < VOCAB; i++) {
        double expected = exp(logits[i]) / sum;
        /* 5 standard deviations of a binomial frequency, plus a hair */
        double tolerance = 5 * sqrt(expected * (1 - expected) / n) + 1e-3;
        CHECK_MSG(fabs(counts[i] / (double)n - expected) < tolerance, "token %d: %g vs %g", i,
                  counts[i] / (double)n, expected);
    }
}

static void test_filters(void) {
    int counts[VOCAB];
    struct sampler_params p = plain(1.0f, 3);
    p.top_k = 2; /* only ids 1 (3.0) and 5 (2.9) */
    draw(p, 2000, counts);
    CHECK(counts[1] + counts[5] == 2000 && counts[1] > 0 && counts[5] > 0);

    p = plain(1.0f, 3);
    p.top_p = 0.3f; /* id 1 alone holds more than 0.3 of the mass */
    draw(p, 500, counts);
    CHECK(counts[1] == 500);

    p = plain(1.0f, 3);
    p.min_p = 0.7f; /* keeps ids whose p >= 0.7 p(1): 1 and 5 (e^-0.1), not 2 (e^-0.5) */
    draw(p, 2000, counts);
    CHECK(counts[1] + counts[5] == 2000 && counts[5] > 0);

    p = plain(0.01f, 3); /* near-zero temperature is near-greedy */
    draw(p, 500, counts);
    CHECK(counts[1] == 500);
}

static void test_repeat_penalty(void) {
    struct sampler_params p = plain(0.0f, 1);
    int history[] = {1, 1, 4};
    p.repeat_penalty = 1.5f; /* 3.0 / 1.5 = 2.0 < 2.9: id 5 wins */
    CHECK(sample_once(p, history, 3) == 5);
    p.repeat_last_n = 1; /* only the last token (4) is penalized: id 1 wins */
    CHECK(sample_once(p, history, 3) == 1);
}

/* OpenAI's additive penalties: logit 3.0 of id 1 (seen twice) against 2.9
 * of id 5 (unseen). */
static void test_presence_frequency(void) {
    struct sampler_params p = plain(0.0f, 1);
    int history[] = {1, 1, 4};
    p.presence_penalty = 0.05f; /* 2.95 > 2.9: id 1 still wins */
    CHECK(sample_once(p, history, 3) == 1);
    p.presence_penalty = 0.2f; /* 2.8 < 2.9: id 5 */
    CHECK(sample_once(p, history, 3) == 5);
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.04f; /* 3.0 - 2 x 0.04 = 2.92 > 2.9: id 1 */
    CHECK(sample_once(p, history, 3) == 1);
    p.frequency_penalty = 0.06f; /* 3.0 - 2 x 0.06 = 2.88 < 2.9: counted twice, id 5 */
    CHECK(sample_once(p, history, 3) == 5);
    p.frequency_penalty = -1.0f; /* a negative penalty favours what was seen */
    CHECK(sample_once(p, history, 3) == 1);
}

/* ---- the chain with a comparison sort of the whole vocabulary ---- */

#define BIG_VOCAB 3000

static int reference_order(const void *a, const void *b) {
    const struct sampler_candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

/* The sampler's uniform draw from state *rng (its xorshift64*). */
static float reference_uniform(uint64_t *rng) {
    uint64_t x = *rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    return (float)((x * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

static void reference_softmax(struct sampler_candidate *c, int n, float temperature) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) / temperature);
        sum += c[i].p;
    }
    for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

/* The weights of the ranked candidates c (n) by id (tensor_exp_weights
 * from the highest logit, c[0]'s, at temperature, 0 below floor) into
 * weights, and their sum in eight running sums over id mod 8. */
static double reference_weights(const struct sampler_candidate *c, int n, float temperature,
                                float floor, float *weights) {
    static float logits[BIG_VOCAB];
    for (int i = 0; i < n; i++) logits[c[i].id] = c[i].logit;
    tensor_exp_weights(weights, logits, n, c[0].logit, temperature, floor);
    double sums[8] = {0}, sum = 0.0;
    for (int id = 0; id < n; id++) sums[id < n / 8 * 8 ? id % 8 : 0] += weights[id];
    for (int k = 0; k < 8; k++) sum += sums[k];
    return sum;
}

/* The draw without top-k and top-p from c (n, ranked): min-p on the
 * logits, then the weights and their sum, and a walk in id order to where
 * the weights passed exceed the draw times the sum. */
static int reference_unranked(const struct sampler_params *p, uint64_t *rng,
                              const struct sampler_candidate *c, int n) {
    static float weights[BIG_VOCAB];
    float floor = p->min_p > 0.0f ? c[0].logit + logf(p->min_p) : -INFINITY;
    double target =
        reference_uniform(rng) * reference_weights(c, n, p->temperature, floor, weights);
    double passed = 0.0;
    int last = 0;
    for (int id = 0; id < n; id++)
        if (weights[id] > 0.0f) {
            last = id;
            if (target < (passed += weights[id])) return id;
        }
    return last;
}

/* llama.cpp's chain as engine.h describes it: penalty, a full sort, top-k,
 * top-p, min-p, temperature, a walk from the top (or, with neither top-k
 * nor top-p, reference_unranked); top-p without top-k takes the
 * probabilities from every token's weight. rng is the sampler's state
 * before the draw. */
static int reference_sample(const struct sampler_params *p, uint64_t *rng, const float *logits,
                            const int *history, int n_history, struct sampler_candidate *c) {
    int n = BIG_VOCAB;
    for (int i = 0; i < n; i++) c[i] = (struct sampler_candidate){i, logits[i], 0.0f};
    int start = n_history - p->repeat_last_n < 0 ? 0 : n_history - p->repeat_last_n;
    for (int i = start; p->repeat_penalty != 1.0f && p->repeat_last_n > 0 && i < n_history; i++) {
        int seen = 0;
        for (int j = start; j < i; j++) seen |= history[j] == history[i];
        float *l = &c[history[i]].logit;
        if (!seen) *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
    }
    qsort(c, (size_t)n, sizeof(*c), reference_order);
    if (p->temperature <= 0.0f) return c[0].id;
    if ((p->top_k <= 0 || p->top_k >= n) && p->top_p >= 1.0f)
        return reference_unranked(p, rng, c, n);
    if (p->top_k > 0 && p->top_k < n) {
        n = p->top_k;
        reference_softmax(c, n, 1.0f);
    } else { /* top-p over the whole vocabulary: the weights of every token */
        static float weights[BIG_VOCAB];
        double sum = reference_weights(c, n, 1.0f, -INFINITY, weights);
        for (int i = 0; i < n; i++) c[i].p = (float)(weights[c[i].id] / sum);
    }
    float mass = 0.0f;
    for (int i = 0; p->top_p < 1.0f && i < n; i++)
        if ((mass += c[i].p) >= p->top_p) n = i + 1;
    int keep = 1;
    while (p->min_p > 0.0f && keep < n && c[keep].p >= p->min_p * c[0].p) keep++;
    if (p->min_p > 0.0f) n = keep;
    reference_softmax(c, n, p->temperature);
    float r = reference_uniform(rng);
    mass = 0.0f;
    for (int i = 0; i < n; i++)
        if (r < (mass += c[i].p)) return c[i].id;
    return c[n - 1].id;
}

/* Logits with many ties: values on a grid of quarters, a tenth of them
 * -0.0f or +0.0f (which compare equal). For odd seeds no logit is above
 * zero, so the most likely tokens are the zeros of both signs. */
static void tied_logits(float *out, unsigned seed) {
    srand(seed);
    int top = seed % 2 ? 0 : 36;
    for (int i = 0; i < BIG_VOCAB; i++) {
        int r = rand();
        out[i] = r % 10 == 0 ? (r % 20 == 0 ? -0.0f : 0.0f) : (float)(r % 97 - 96 + top) * 0.25f;
    }
}

static void test_against_full_sort(void) {
    static float big[BIG_VOCAB];
    static struct sampler_candidate work[BIG_VOCAB];
    struct sampler_params sets[13];
    for (int i = 0; i < 13; i++) sets[i] = plain(1.0f, 0);
    sets[1].temperature = 0.7f, sets[1].top_k = 40;
    sets[2].temperature = 1.3f, sets[2].top_p = 0.9f;
    sets[3].temperature = 0.8f, sets[3].top_k = 40, sets[3].top_p = 0.95f, sets[3].min_p = 0.05f;
    sets[4].top_k = BIG_VOCAB - 1;
    sets[5].top_k = BIG_VOCAB;
    sets[6].temperature = 0.0f;
    sets[7].temperature = 0.0f, sets[7].repeat_penalty = 1.3f;
    sets[8].top_k = 3, sets[8].repeat_penalty = 0.8f, sets[8].repeat_last_n = 8;
    sets[9].temperature = 0.9f, sets[9].min_p = 0.05f;           /* unranked, with min-p */
    sets[10].temperature = 1.2f, sets[10].repeat_penalty = 1.3f; /* unranked, penalized */
    sets[11].top_p = 0.5f, sets[11].min_p = 0.02f;               /* a nucleus, min-p in it */
    sets[12].temperature = 0.6f, sets[12].top_p = 0.999f;        /* nearly every token */
    int history[16], mismatches = 0, draws = 0;
    for (int k = 0; k < 16; k++) history[k] = (k * 389) % BIG_VOCAB;
    for (int set = 0; set < 13; set++)
        for (unsigned seed = 1; seed <= 40; seed++) {
            struct sampler s;
            struct sampler_params p = sets[set];
            p.seed = seed;
            tied_logits(big, seed);
            sampler_init(&s, &p, BIG_VOCAB);
            for (int d = 0; d < 4; d++, draws++) {
                uint64_t rng = s.rng;
                int want = reference_sample(&p, &rng, big, history, 16, work);
                int got = sampler_sample(&s, &scratch, big, history, 16);
                if (got != want && mismatches++ < 5)
                    CHECK_MSG(0, "set %d seed %u draw %d: token %d, the full sort gives %d", set,
                              seed, d, got, want);
            }
        }
    CHECK_MSG(mismatches == 0, "%d of %d draws differ from the full sort", mismatches, draws);
}

int main(void) {
    if (sampler_scratch_init(&scratch, BIG_VOCAB)) {
        fprintf(stderr, "test_sampler: out of memory\n");
        return 1;
    }
    test_greedy_and_logprob();
    test_seeded_repeatable();
    test_distribution();
    test_filters();
    test_repeat_penalty();
    test_presence_frequency();
    test_against_full_sort();
    sampler_scratch_free(&scratch);
    return test_status("test_sampler");
}
