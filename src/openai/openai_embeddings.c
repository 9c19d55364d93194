/* openai_embeddings.c -- OpenAI's embeddings API (POST /v1/embeddings): the
 * request body into a struct openai_request whose prompts are the inputs
 * (the gateway embeds each as one choice), and the list of vectors back,
 * cut to `dimensions` and normalized (runner_embedding_normalize, the one
 * rule), as floats or as base64 of their little-endian float32 bytes.
 *
 * The answer is written directly rather than through cJSON: a request of
 * 2048 inputs of a 4096-wide model is 8M numbers. */
#include "openai/openai.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/protocol.h"

/* The fields the endpoint takes; anything else is refused as OpenAI does. */
static const char *const embedding_fields[] = {"model",           "input", "dimensions",
                                               "encoding_format", "user",  NULL};

static int check_fields(const cJSON *root, struct openai_error *e) {
    const cJSON *item;
    uint64_t seen = 0;
    cJSON_ArrayForEach(item, root) {
        int known = -1;
        for (int i = 0; embedding_fields[i] && known < 0; i++)
            if (!strcmp(item->string, embedding_fields[i])) known = i;
        if (known < 0 && cJSON_IsNull(item)) continue;
        if (known < 0)
            return openai_refuse(e, item->string, "Unrecognized request argument supplied: %.60s",
                                 item->string);
        if (seen & (uint64_t)1 << known)
            return openai_refuse(e, item->string, "%s is given more than once", item->string);
        seen |= (uint64_t)1 << known;
    }
    return 0;
}

/* An input that is "" embeds nothing: OpenAI refuses it, and so does lockstep. */
static int check_inputs(const struct openai_request *out, struct openai_error *e) {
    for (int i = 0; i < out->n_prompts; i++)
        if (out->prompts[i].text && !out->prompts[i].text[0])
            return out->n_prompts > 1
                       ? openai_refuse(e, "input", "input[%d] must not be an empty string", i)
                       : openai_refuse(e, "input", "input must not be an empty string");
    return 0;
}

static int parse_options(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    const cJSON *model = openai_member(root, "model"), *format;
    const cJSON *dimensions = openai_member(root, "dimensions"),
                *user = openai_member(root, "user");
    if (model && (!cJSON_IsString(model) || !model->valuestring[0]))
        return openai_refuse(e, "model", "model must be a non-empty string");
    if (model && !(out->model = strdup(model->valuestring))) return openai_out_of_memory(e);
    if (user && !cJSON_IsString(user)) return openai_refuse(e, "user", "user must be a string");
    if (dimensions && (!cJSON_IsNumber(dimensions) || dimensions->valuedouble < 1 ||
                       dimensions->valuedouble > RUNNER_EMBEDDING_MAX ||
                       dimensions->valuedouble != (double)(int)dimensions->valuedouble))
        return openai_refuse(e, "dimensions", "dimensions must be an integer from 1 to %d",
                             RUNNER_EMBEDDING_MAX);
    if (dimensions) out->dimensions = (int)dimensions->valuedouble;
    format = openai_member(root, "encoding_format");
    if (format && !cJSON_IsString(format))
        return openai_refuse(e, "encoding_format",
                             "encoding_format must be \"float\" or \"base64\"");
    if (format && strcmp(format->valuestring, "float") != 0 &&
        strcmp(format->valuestring, "base64") != 0)
        return openai_refuse(e, "encoding_format",
                             "encoding_format must be \"float\" or \"base64\", not \"%.40s\"",
                             format->valuestring);
    out->base64 = format && !strcmp(format->valuestring, "base64");
    return 0;
}

int openai_parse_embeddings(const char *body, size_t len, struct openai_request *out,
                            struct openai_error *e) {
    memset(e, 0, sizeof(*e));
    memset(out, 0, sizeof(*out));
    out->kind = OPENAI_EMBEDDING;
    out->n = 1;
    out->max_tokens = 1;
    out->top_p = 1.0f;
    out->repetition_penalty = 1.0f;
    cJSON *root = openai_parse_object(body, len, "the request body", e);
    if (!root) return -1;
    int failed = check_fields(root, e) ||
                 openai_parse_prompts(openai_member(root, "input"), "input",
                                      OPENAI_EMBEDDING_INPUTS, out, e) ||
                 check_inputs(out, e) || parse_options(root, out, e);
    cJSON_Delete(root);
    if (!failed) return 0;
    openai_request_free(out);
    return -1;
}

/* ---------- the answer ---------- */

/* Appends n bytes' base64 (RFC 4648, padded). */
static int append_base64(struct runner_buffer *out, const uint8_t *bytes, size_t n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char quad[4];
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)bytes[i] << 16;
        if (i + 1 < n) v |= (uint32_t)bytes[i + 1] << 8;
        if (i + 2 < n) v |= bytes[i + 2];
        quad[0] = digits[v >> 18 & 63];
        quad[1] = digits[v >> 12 & 63];
        quad[2] = i + 1 < n ? digits[v >> 6 & 63] : '=';
        quad[3] = i + 2 < n ? digits[v & 63] : '=';
        if (runner_buffer_append(out, quad, 4)) return -1;
    }
    return 0;
}

/* One vector as the answer shows it: a JSON array of numbers, or a base64
 * string of its little-endian float32 bytes. */
static int append_vector(struct runner_buffer *out, const float *v, int n, int base64) {
    char number[32];
    if (base64) {
        uint8_t *bytes = calloc((size_t)(n > 0 ? n : 1), 4);
        if (!bytes) return -1;
        for (int i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, &v[i], 4);
            for (int k = 0; k < 4; k++) bytes[4 * i + k] = (uint8_t)(bits >> (8 * k));
        }
        int rc = runner_buffer_append(out, "\"", 1) || append_base64(out, bytes, (size_t)n * 4) ||
                 runner_buffer_append(out, "\"", 1);
        free(bytes);
        return rc ? -1 : 0;
    }
    if (runner_buffer_append(out, "[", 1)) return -1;
    for (int i = 0; i < n; i++) {
        /* 9 significant digits give the float32 back exactly */
        int length = snprintf(number, sizeof(number), "%s%.9g", i ? "," : "", (double)v[i]);
        if (runner_buffer_append(out, number, (size_t)length)) return -1;
    }
    return runner_buffer_append(out, "]", 1);
}

char *openai_embeddings_json(const struct openai_embeddings *answer) {
    struct runner_buffer out = {0};
    char head[160];
    int n = answer->dimensions > 0 && answer->dimensions < answer->size ? answer->dimensions
                                                                        : answer->size;
    if (n < 0) n = 0;
    float *cut = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cJSON *name = openai_json_text(answer->model, strlen(answer->model));
    char *model = name ? cJSON_PrintUnformatted(name) : NULL;
    cJSON_Delete(name);
    int failed =
        !cut || !model || runner_buffer_append(&out, "{\"object\":\"list\",\"data\":[", 25);
    for (int i = 0; i < answer->n_vectors && !failed; i++) {
        memcpy(cut, answer->vectors[i], (size_t)n * sizeof(float));
        runner_embedding_normalize(cut, n);
        int length = snprintf(head, sizeof(head),
                              "%s{\"object\":\"embedding\",\"index\":%d,"
                              "\"embedding\":",
                              i ? "," : "", i);
        failed = runner_buffer_append(&out, head, (size_t)length) ||
                 append_vector(&out, cut, n, answer->base64) || runner_buffer_append(&out, "}", 1);
    }
    if (!failed) {
        int length = snprintf(head, sizeof(head), "],\"model\":");
        failed = runner_buffer_append(&out, head, (size_t)length) ||
                 runner_buffer_append(&out, model, strlen(model));
        length =
            snprintf(head, sizeof(head), ",\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}",
                     answer->prompt_tokens, answer->prompt_tokens);
        failed = failed || runner_buffer_append(&out, head, (size_t)length + 1);
    }
    free(cut);
    cJSON_free(model);
    if (!failed) return (char *)out.data;
    runner_buffer_free(&out);
    return NULL;
}
