/* handover.c -- what a move does with an instance's requests (cluster.c
 * drives it): warm-ups that fill the new runner's prefix cache with the
 * moving requests' KV, then the handover itself, which takes every choice
 * out of the old instance's table and gives it to the new one, where it
 * resumes with its tokens so far (DESIGN.md I4, I8); and the outstanding
 * work the router weighs replicas by, and the age of the oldest request. Locks: one instance's
 * lock, then a request's, never two instances' at once. */
#include "gateway_internal.h"

#include <stdlib.h>
#include <string.h>

int gateway_instance_take(struct gateway_instance *in, struct gateway_choice ***out) {
    pthread_mutex_lock(&in->lock);
    int n = in->n_requests;
    struct gateway_choice **taken = malloc((size_t)(n ? n : 1) * sizeof(struct gateway_choice *));
    if (!taken) {
        pthread_mutex_unlock(&in->lock);
        return -1;
    }
    char err[200];
    for (int i = 0; i < n; i++) {
        struct gateway_choice *c = in->requests[i];
        if (in->state == INSTANCE_READY && c->queued_generation == in->generation)
            runner_encode_cancel(&in->outbox, c->id, err, sizeof(err));
        taken[i] = c;
    }
    in->n_requests = 0;
    pthread_mutex_unlock(&in->lock);
    gateway_instance_wake(in);
    *out = taken;
    return n;
}

/* 1 if the choice will produce nothing more (request lock held). */
static int choice_over(const struct gateway_choice *c) {
    return c->done || c->request->done || c->request->abandoned;
}

void gateway_instance_give(struct gateway_instance *in, struct gateway_choice **choices, int n) {
    pthread_mutex_lock(&in->lock);
    if (in->n_requests + n > in->capacity) {
        int capacity = in->capacity ? 2 * in->capacity : 64;
        while (capacity < in->n_requests + n) capacity *= 2;
        struct gateway_choice **grown =
            realloc(in->requests, (size_t)capacity * sizeof(struct gateway_choice *));
        if (grown) {
            in->requests = grown;
            in->capacity = capacity;
        }
    }
    if (in->n_requests == 0) in->progress_us = clock_now_us();
    for (int i = 0; i < n; i++) {
        struct gateway_request *r = choices[i]->request;
        pthread_mutex_lock(&r->lock);
        int over = choice_over(choices[i]), keep = !over && in->n_requests < in->capacity;
        if (keep) {
            choices[i]->holder = in;
            choices[i]->queued_generation = 0;
            in->requests[in->n_requests++] = choices[i];
        }
        pthread_mutex_unlock(&r->lock);
        if (!keep && !over) gateway_request_fail(r, 500, "out of memory for the request table");
        if (!keep) gateway_request_release(r);
    }
    pthread_mutex_unlock(&in->lock);
    gateway_instance_wake(in);
}

/* A copy of a choice's prompt and tokens so far (request lock held). */
static int *copy_tokens(const struct gateway_choice *c, int *n) {
    const struct gateway_request *r = c->request;
    *n = r->n_prompt + c->n_generated;
    int *tokens = malloc((size_t)*n * sizeof(int));
    if (!tokens) return NULL;
    memcpy(tokens, r->prompt, (size_t)r->n_prompt * sizeof(int));
    memcpy(tokens + r->n_prompt, c->generated, (size_t)c->n_generated * sizeof(int));
    return tokens;
}

int gateway_instance_warm(struct gateway_instance *from, struct gateway_instance *to) {
    int n = 0, *lengths = NULL, **prompts = NULL;
    char err[200];
    pthread_mutex_lock(&from->lock);
    if (from->n_requests > 0) {
        prompts = calloc((size_t)from->n_requests, sizeof(int *));
        lengths = calloc((size_t)from->n_requests, sizeof(int));
    }
    for (int i = 0; prompts && lengths && i < from->n_requests; i++) {
        const struct gateway_choice *c = from->requests[i];
        pthread_mutex_lock(&c->request->lock);
        prompts[n] = copy_tokens(c, &lengths[n]);
        pthread_mutex_unlock(&c->request->lock);
        n += prompts[n] != NULL;
    }
    pthread_mutex_unlock(&from->lock);
    uint64_t first = atomic_fetch_add(&from->gateway->next_id, (unsigned long long)(n ? n : 1));
    pthread_mutex_lock(&to->lock);
    to->warm_first = first;
    to->warm_last = first + (uint64_t)n - 1;
    to->warm_pending = n;
    for (int i = 0; i < n; i++) {
        /* greedy, one token: only the prompt's KV matters */
        struct runner_request q = {.id = first + (uint64_t)i,
                                   .max_tokens = 1,
                                   .n_prompt = lengths[i],
                                   .prompt = prompts[i]};
        runner_sampling_default(&q.sampling);
        q.sampling.temperature = 0;
        if (runner_encode_add(&to->outbox, &q, err, sizeof(err))) to->warm_pending--;
        free(prompts[i]);
    }
    pthread_mutex_unlock(&to->lock);
    gateway_instance_wake(to);
    free(prompts);
    free(lengths);
    return n;
}

int64_t gateway_instance_outstanding(struct gateway_instance *in) {
    int64_t tokens = 0;
    pthread_mutex_lock(&in->lock);
    for (int i = 0; i < in->n_requests; i++) {
        const struct gateway_choice *c = in->requests[i];
        pthread_mutex_lock(&c->request->lock);
        tokens += c->request->max_tokens - c->n_generated;
        if (c->n_generated == 0) tokens += c->request->n_prompt;
        pthread_mutex_unlock(&c->request->lock);
    }
    pthread_mutex_unlock(&in->lock);
    return tokens;
}

double gateway_instance_oldest(struct gateway_instance *in, uint64_t now_us) {
    uint64_t oldest = now_us;
    pthread_mutex_lock(&in->lock);
    for (int i = 0; i < in->n_requests; i++) { /* arrival_us is set once, at creation */
        uint64_t arrived = in->requests[i]->request->arrival_us;
        if (arrived < oldest) oldest = arrived;
    }
    pthread_mutex_unlock(&in->lock);
    return (double)(now_us - oldest) * 1e-6;
}
