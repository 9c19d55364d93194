/* sampler_bench.c -- what sampling one token costs the runner's leader,
 * which samples every sequence of a step between two steps.
 *
 * usage: sampler_bench   for vocabularies of 512, 32000 (llama 2) and
 * 152064 (Qwen 2) tokens, prints the median time of one sampler_sample
 * call with the settings requests use most (greedy; llama.cpp's defaults;
 * the OpenAI API's defaults, which sample from the whole vocabulary; a
 * top-p cut with no top-k; greedy with the log-probability asked for), and
 * each as a ratio to greedy in the same run. The logits are Gaussian, like
 * a model's, from a fixed seed. */
#include "engine/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SAMPLES 31 /* timed calls per setting; the median is printed */

struct setting {
    const char *name;
    float temperature;
    int top_k;
    float top_p, min_p;
    int logprob; /* 1: ask for the chosen token's log-probability */
};

static const struct setting settings[] = {
    {"greedy", 0.0f, 0, 1.0f, 0.0f, 0},
    {"greedy, logprob", 0.0f, 0, 1.0f, 0.0f, 1},
    {"llama.cpp defaults (t 0.8, top-k 40, top-p 0.95, min-p 0.05)", 0.8f, 40, 0.95f, 0.05f, 0},
    {"OpenAI defaults (t 1, whole vocabulary)", 1.0f, 0, 1.0f, 0.0f, 0},
    {"t 1, top-p 0.9", 1.0f, 0, 0.9f, 0.0f, 0},
};
#define N_SETTINGS (sizeof(settings) / sizeof(settings[0]))

/* The last log-probability asked for, stored so that it is computed. */
static volatile float sampled_logprob;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Standard normal logits (Box-Muller on a fixed xorshift stream), scaled
 * by 3 as a model's spread. */
static void make_logits(float *logits, int n) {
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < n; i++) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            u[k] = ((double)(x >> 11) + 1.0) / 9007199254740993.0;
        }
        logits[i] = (float)(3.0 * sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
    }
}

/* Median seconds of one sample with setting s; -1 if the sampler cannot
 * be made. */
static double time_setting(const struct setting *s, const float *logits, int n) {
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = s->temperature;
    p.top_k = s->top_k;
    p.top_p = s->top_p;
    p.min_p = s->min_p;
    struct sampler sampler;
    struct sampler_scratch scratch;
    if (sampler_scratch_init(&scratch, n)) return -1;
    sampler_init(&sampler, &p, n);
    double times[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) {
        double t0 = now();
        int token = sampler_sample(&sampler, &scratch, logits, NULL, 0);
        if (s->logprob) {
            float highest;
            double normalizer = sampler_log_normalizer(&scratch, logits, n, &highest);
            sampled_logprob = sampler_log_probability(logits[token], highest, normalizer);
        }
        times[i] = now() - t0;
    }
    sampler_scratch_free(&scratch);
    qsort(times, SAMPLES, sizeof(double), compare_doubles);
    return times[SAMPLES / 2];
}

int main(void) {
    static const int vocabularies[] = {512, 32000, 152064};
    printf("| vocabulary | setting | us per token | x greedy |\n|---|---|---|---|\n");
    for (size_t v = 0; v < sizeof(vocabularies) / sizeof(vocabularies[0]); v++) {
        int n = vocabularies[v];
        float *logits = malloc((size_t)n * sizeof(float));
        if (!logits) return 1;
        make_logits(logits, n);
        double greedy = 0;
        for (size_t s = 0; s < N_SETTINGS; s++) {
            double t = time_setting(&settings[s], logits, n);
            if (t < 0) {
                fprintf(stderr, "sampler_bench: out of memory\n");
                free(logits);
                return 1;
            }
            if (s == 0) greedy = t;
            printf("| %d | %s | %.1f | %.1f |\n", n, settings[s].name, t * 1e6, t / greedy);
        }
        free(logits);
    }
    return 0;
}
