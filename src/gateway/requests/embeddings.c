/* embeddings.c -- an embeddings request (POST /v1/embeddings) inside the
 * gateway: each input is a choice whose runner request embeds instead of
 * generating (ADD's embed flag); its vector comes back in an EMBEDDING
 * frame before its FINISHED. A restarted or moved runner embeds it again
 * from its input, as any choice resumes (DESIGN.md I4), and the pooling's
 * fixed order makes the vector the same.
 *
 * A request may give 2048 inputs; they go to the runners a window at a
 * time, the next ones (routed as the first were) as each ends. */
#include "gateway/requests/requests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gateway_request_window(const struct gateway_request *r) {
    return r->body.kind == OPENAI_EMBEDDING ? GATEWAY_EMBEDDING_WINDOW : r->n_choices;
}

void gateway_request_on_embedding(struct gateway_choice *c, const struct runner_embedding *e,
                                  struct supervisor *from) {
    struct gateway_request *r = c->request;
    char why[160];
    int status = 0;
    pthread_mutex_lock(&r->lock);
    if (r->done || c->done || c->job.holder != from) {
        pthread_mutex_unlock(&r->lock);
        return;
    }
    float *copy = NULL;
    if (r->body.dimensions > e->n) { /* as OpenAI: the client's error */
        status = 400;
        snprintf(why, sizeof(why),
                 "dimensions is %d; this model's embeddings have %d values (ask for at most "
                 "that many)",
                 r->body.dimensions, e->n);
    } else if (!(copy = malloc((size_t)e->n * sizeof(float)))) {
        status = 500;
        snprintf(why, sizeof(why), "out of memory for an embedding");
    } else {
        memcpy(copy, e->values, (size_t)e->n * sizeof(float));
        free(c->embedding);
        c->embedding = copy;
        c->embedding_size = e->n;
    }
    pthread_mutex_unlock(&r->lock);
    if (!status) return;
    gateway_request_fail(r, status, why);
    r->env->cancel(r->env->context, r, NULL);
}

void gateway_embedding_finished(struct gateway_choice *c, const struct runner_finished *f) {
    struct gateway_request *r = c->request;
    int has_vector = c->embedding != NULL, more = 0;
    if (has_vector) {
        gateway_choice_end(c, OPENAI_FINISH_STOP);
        more = !r->done && r->n_submitted < r->n_choices;
    }
    pthread_mutex_unlock(&r->lock);
    if (!has_vector) {
        char why[160];
        snprintf(why, sizeof(why), "the runner finished embedding input %d (%s) without its vector",
                 c->index, runner_finish_reason_name(f->reason));
        gateway_request_fail(r, 500, why);
        r->env->cancel(r->env->context, r, NULL);
    } else if (more) {
        r->env->submit_more(r->env->context, r);
    }
}

char *gateway_embeddings_whole(struct gateway_request *r) {
    const float **vectors = malloc((size_t)r->n_choices * sizeof(*vectors));
    if (!vectors) return NULL;
    for (int i = 0; i < r->n_choices; i++) vectors[i] = r->choices[i].embedding;
    struct openai_embeddings answer = {.model = r->served->name,
                                       .vectors = vectors,
                                       .n_vectors = r->n_choices,
                                       .size = r->choices[0].embedding_size,
                                       .dimensions = r->body.dimensions,
                                       .base64 = r->body.base64,
                                       .prompt_tokens = r->n_prompt_tokens};
    char *json = openai_embeddings_json(&answer);
    free(vectors);
    return json;
}
