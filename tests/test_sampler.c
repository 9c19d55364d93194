/* test_sampler.c -- greedy, seeded sampling, and each filter of the sampler
 * on hand-made logits whose right answers are known. */
#include "engine/engine.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

#define VOCAB 8

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
    CHECK(sampler_init(&s, &p, VOCAB) == 0);
    int id = sampler_sample(&s, logits, history, n_history, NULL);
    sampler_free(&s);
    return id;
}

/* Frequencies of n draws into counts. */
static void draw(struct sampler_params p, int n, int *counts) {
    struct sampler s;
    memset(counts, 0, VOCAB * sizeof(int));
    CHECK(sampler_init(&s, &p, VOCAB) == 0);
    for (int i = 0; i < n; i++) counts[sampler_sample(&s, logits, NULL, 0, NULL)]++;
    sampler_free(&s);
}

static void test_greedy_and_logprob(void) {
    struct sampler s;
    struct sampler_params p = plain(0.0f, 1);
    float logprob;
    CHECK(sampler_init(&s, &p, VOCAB) == 0);
    CHECK(sampler_sample(&s, logits, NULL, 0, &logprob) == 1);
    double sum = 0;
    for (int i = 0; i < VOCAB; i++) sum += exp(logits[i]);
    CHECK_MSG(fabsf(logprob - (float)(3.0 - log(sum))) < 1e-5f, "logprob %g", logprob);
    sampler_free(&s);
}

static void test_seeded_repeatable(void) {
    int a[64], b[64], differs = 0;
    struct sampler s1, s2, s3;
    struct sampler_params p = plain(1.0f, 42), q = plain(1.0f, 43);
    CHECK(sampler_init(&s1, &p, VOCAB) == 0 && sampler_init(&s2, &p, VOCAB) == 0 &&
          sampler_init(&s3, &q, VOCAB) == 0);
    for (int i = 0; i < 64; i++) {
        a[i] = sampler_sample(&s1, logits, NULL, 0, NULL);
        b[i] = sampler_sample(&s2, logits, NULL, 0, NULL);
        differs += sampler_sample(&s3, logits, NULL, 0, NULL) != a[i];
    }
    CHECK(memcmp(a, b, sizeof(a)) == 0);
    CHECK(differs > 0);
    sampler_free(&s1);
    sampler_free(&s2);
    sampler_free(&s3);
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

int main(void) {
    test_greedy_and_logprob();
    test_seeded_repeatable();
    test_distribution();
    test_filters();
    test_repeat_penalty();
    return test_status("test_sampler");
}
