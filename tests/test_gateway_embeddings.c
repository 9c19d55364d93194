/* test_gateway_embeddings.c -- POST /v1/embeddings on `lockstep serve`, over
 * real HTTP on loopback.
 *
 * ../shared/models/kjv2m-f32.gguf served twice, as kjv-mean (--pooling
 * mean) and kjv-last (--pooling last), and kjv2m-q8_0.gguf as kjv-none
 * (no pooling: the file names none); skipped without ../shared:
 *   - llama.cpp's vectors (../shared/fixtures/embeddings/reference.json,
 *     four texts, mean and last) are matched to a cosine of 0.99999, each
 *     answer of unit length, with OpenAI's shape and usage.prompt_tokens
 *     the input's tokens (BOS included);
 *   - the four texts in one request, the same text as token ids, and 100
 *     inputs in one request (which go to the runner 32 at a time) give
 *     each input's vector of a request of its own, bit for bit, in order;
 *   - dimensions cuts and then normalizes; base64 is the little-endian
 *     float32 bytes of the float answer;
 *   - the runner killed while it embeds 100 inputs (each step delayed):
 *     the answer still comes, with every vector bit for bit as before, and
 *     the instance counts one restart (DESIGN.md I4);
 *   - 400s with exact messages: a model without pooling, dimensions past
 *     the model's, "", [], an unknown field, encoding_format, more than
 *     2048 inputs, an input longer than the context; and a completion is
 *     still answered after them.
 * ctest-labels: concurrency */
#include "testutil.h"

#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define DEADLINE 180.0
#define DIM      192

static int port;

/* POSTs body to /v1/embeddings; the status, and the parsed body in *out. */
static int post(const char *body, cJSON **out) {
    struct test_http h = test_http_request(port, "POST", "/v1/embeddings", "", body, 120);
    *out = h.body ? cJSON_Parse(h.body) : NULL;
    int status = h.status;
    test_http_free(&h);
    return status;
}

/* data[index].embedding as floats (n of them); 0, or -1 after a failed check. */
static int vector_of(const cJSON *answer, int index, float *out, int n) {
    const cJSON *item = cJSON_GetArrayItem(cJSON_GetObjectItem(answer, "data"), index);
    const cJSON *v = cJSON_GetObjectItem(item, "embedding"), *x;
    CHECK_MSG(cJSON_GetArraySize(v) == n, "data[%d]: %d values, expected %d", index,
              cJSON_GetArraySize(v), n);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(item, "index")) == index);
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(item, "object")), "embedding"));
    int i = 0;
    cJSON_ArrayForEach(x, v) if (i < n) out[i++] = (float)x->valuedouble;
    return i == n ? 0 : -1;
}

/* The one vector of {"model", "input": input_json, EXTRA}; its usage in *tokens. */
static int embed(const char *model, const char *input_json, const char *extra, float *out, int n,
                 int *tokens) {
    char *body = malloc(strlen(input_json) + 512);
    sprintf(body, "{\"model\":\"%s\",\"input\":%s%s}", model, input_json, extra);
    cJSON *j = NULL;
    int status = post(body, &j);
    CHECK_MSG(status == 200, "%s: status %d", body, status);
    int rc = status == 200 ? vector_of(j, 0, out, n) : -1;
    const cJSON *usage = cJSON_GetObjectItem(j, "usage");
    if (tokens) *tokens = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(usage, "prompt_tokens"));
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(usage, "total_tokens")) ==
          cJSON_GetNumberValue(cJSON_GetObjectItem(usage, "prompt_tokens")));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "object")), "list"));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "model")), model));
    cJSON_Delete(j);
    free(body);
    return rc;
}

static double norm(const float *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s);
}

static double cosine(const float *v, const cJSON *want) {
    double dot = 0, b = 0;
    for (int d = 0; d < DIM; d++) {
        double w = cJSON_GetArrayItem(want, d)->valuedouble;
        dot += v[d] * w;
        b += w * w;
    }
    return dot / norm(v, DIM) / sqrt(b);
}

static char *quoted(const char *text) {
    cJSON *s = cJSON_CreateString(text);
    char *json = cJSON_PrintUnformatted(s);
    cJSON_Delete(s);
    return json;
}

/* The fixtures' texts and their vectors from this server (mean pooling). */
static const char *texts[4];
static float mean_vectors[4][DIM];

static void test_fixtures(const cJSON *cases, const struct tokenizer *tok) {
    const cJSON *c;
    int checked = 0, n_texts = 0;
    double worst = 1;
    cJSON_ArrayForEach(c, cases) {
        const char *model = cJSON_GetStringValue(cJSON_GetObjectItem(c, "model"));
        const char *pooling = cJSON_GetStringValue(cJSON_GetObjectItem(c, "pooling"));
        const char *input = cJSON_GetStringValue(cJSON_GetObjectItem(c, "input"));
        if (!model || strcmp(model, "kjv2m-f32.gguf") || !pooling || !input) continue;
        float v[DIM];
        int tokens = 0, ids[512], n_ids = 0;
        char *json = quoted(input), err[256];
        int mean = !strcmp(pooling, "mean");
        if (embed(mean ? "kjv-mean" : "kjv-last", json, "", v, DIM, &tokens) == 0) {
            double cos = cosine(v, cJSON_GetObjectItem(c, "embedding"));
            CHECK_MSG(cos >= 0.99999, "%s '%s': cosine %.7f", pooling, input, cos);
            CHECK_MSG(fabs(norm(v, DIM) - 1) < 1e-5, "norm %.7f", norm(v, DIM));
            CHECK(tokenizer_encode(tok, input, strlen(input), tokenizer_adds_bos(tok), ids, 512,
                                   &n_ids, err, sizeof(err)) == 0);
            CHECK_MSG(tokens == n_ids, "usage %d tokens, the input has %d", tokens, n_ids);
            if (cos < worst) worst = cos;
            checked++;
            if (mean && n_texts < 4) {
                texts[n_texts] = input;
                memcpy(mean_vectors[n_texts++], v, sizeof(v));
            }
        }
        free(json);
    }
    CHECK_MSG(checked == 8 && n_texts == 4, "%d cases checked, %d texts", checked, n_texts);
    printf("llama.cpp's vectors: %d cases, worst cosine %.7f (bound 0.99999)\n", checked, worst);
}

/* Several inputs in one request: each is its own request's vector. */
static void test_batches(const struct tokenizer *tok) {
    char *body = malloc(1 << 16), err[256];
    float v[DIM];
    cJSON *j = NULL;
    /* the four texts together */
    int at = sprintf(body, "{\"model\":\"kjv-mean\",\"input\":[");
    for (int i = 0; i < 4; i++) {
        char *json = quoted(texts[i]);
        at += sprintf(body + at, "%s%s", i ? "," : "", json);
        free(json);
    }
    sprintf(body + at, "]}");
    CHECK(post(body, &j) == 200);
    for (int i = 0; i < 4; i++)
        CHECK_MSG(vector_of(j, i, v, DIM) == 0 && !memcmp(v, mean_vectors[i], sizeof(v)),
                  "input %d of 4 differs from its request alone", i);
    cJSON_Delete(j);

    /* token ids: [ids] and [[ids], [ids]] */
    int ids[512], n_ids = 0;
    CHECK(tokenizer_encode(tok, texts[1], strlen(texts[1]), tokenizer_adds_bos(tok), ids, 512,
                           &n_ids, err, sizeof(err)) == 0);
    at = 0;
    for (int i = 0; i < n_ids; i++) at += sprintf(body + at, "%s%d", i ? "," : "[", ids[i]);
    sprintf(body + at, "]");
    char *one = strdup(body);
    CHECK(embed("kjv-mean", one, "", v, DIM, NULL) == 0 && !memcmp(v, mean_vectors[1], sizeof(v)));
    sprintf(body, "{\"model\":\"kjv-mean\",\"input\":[%s,%s]}", one, one);
    CHECK(post(body, &j) == 200);
    for (int i = 0; i < 2; i++)
        CHECK(vector_of(j, i, v, DIM) == 0 && !memcmp(v, mean_vectors[1], sizeof(v)));
    cJSON_Delete(j);
    free(one);

    /* 100 inputs: more than the window the gateway keeps with the runner */
    at = sprintf(body, "{\"model\":\"kjv-mean\",\"input\":[");
    for (int i = 0; i < 100; i++) {
        char *json = quoted(texts[i % 4]);
        at += sprintf(body + at, "%s%s", i ? "," : "", json);
        free(json);
    }
    sprintf(body + at, "]}");
    CHECK(post(body, &j) == 200);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(j, "data")) == 100);
    for (int i = 0; i < 100; i++)
        CHECK_MSG(vector_of(j, i, v, DIM) == 0 && !memcmp(v, mean_vectors[i % 4], sizeof(v)),
                  "input %d of 100 differs from its request alone", i);
    cJSON_Delete(j);
    free(body);
}

/* dimensions and base64. */
static void test_formats(void) {
    char *json = quoted(texts[2]);
    float cut[64], back[DIM];
    CHECK(embed("kjv-mean", json, ",\"dimensions\":64", cut, 64, NULL) == 0);
    double dot = 0, n = norm(mean_vectors[2], 64);
    for (int i = 0; i < 64; i++) dot += cut[i] * mean_vectors[2][i] / n;
    CHECK_MSG(fabs(norm(cut, 64) - 1) < 1e-5 && dot > 0.999999,
              "dimensions 64: norm %.7f, cosine with the cut %.7f", norm(cut, 64), dot);

    char body[4096];
    cJSON *j = NULL;
    snprintf(body, sizeof(body),
             "{\"model\":\"kjv-mean\",\"input\":%s,\"encoding_format\":\"base64\"}", json);
    CHECK(post(body, &j) == 200);
    const char *b64 = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0), "embedding"));
    CHECK_MSG(b64 && strlen(b64) == (DIM * 4 + 2) / 3 * 4, "base64 of %zu chars",
              b64 ? strlen(b64) : 0);
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint8_t bytes[DIM * 4 + 3];
    size_t n_bytes = 0;
    for (size_t i = 0; b64 && b64[i] && b64[i + 1] && b64[i + 2] && b64[i + 3]; i += 4) {
        uint32_t q = 0;
        for (int k = 0; k < 4; k++) {
            const char *d = b64[i + k] == '=' ? digits : strchr(digits, b64[i + k]);
            q = q << 6 | (uint32_t)(d - digits);
        }
        for (int k = 0; k < 3; k++) bytes[n_bytes++] = (uint8_t)(q >> (16 - 8 * k));
    }
    CHECK(n_bytes >= DIM * 4);
    for (int i = 0; i < DIM; i++) {
        uint32_t bits = 0;
        for (int k = 0; k < 4; k++) bits |= (uint32_t)bytes[4 * i + k] << (8 * k);
        memcpy(&back[i], &bits, 4);
    }
    CHECK_MSG(!memcmp(back, mean_vectors[2], sizeof(back)), "base64 is not the float answer");
    cJSON_Delete(j);
    free(json);
}

/* The prompt tokens /metrics counted for kjv-mean so far. */
static double prompt_tokens_seen(void) {
    static const char name[] = "lockstep_prompt_tokens_total{model=\"kjv-mean\"";
    struct test_http h = test_http_request(port, "GET", "/metrics", "", NULL, 10);
    double total = 0;
    for (const char *at = h.body; at && (at = strstr(at, name)); at += sizeof(name) - 1) {
        const char *space = strchr(at, ' ');
        if (space) total += strtod(space + 1, NULL);
    }
    test_http_free(&h);
    return total;
}

/* The restarts GET /v1/cluster counts for kjv-mean's instance. */
static int restarts(void) {
    struct test_http h = test_http_request(port, "GET", "/v1/cluster", "", NULL, 10);
    cJSON *j = h.body ? cJSON_Parse(h.body) : NULL, *in;
    int n = -1;
    cJSON_ArrayForEach(in, cJSON_GetObjectItem(j, "instances")) {
        const char *model = cJSON_GetStringValue(cJSON_GetObjectItem(in, "model"));
        if (model && !strcmp(model, "kjv-mean"))
            n = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(in, "restarts"));
    }
    cJSON_Delete(j);
    test_http_free(&h);
    return n;
}

struct exchange {
    const char *body;
    struct test_http answer;
    atomic_int answered; /* 1: the answer came */
};

static void *exchange_thread(void *arg) {
    struct exchange *x = arg;
    x->answer = test_http_request(port, "POST", "/v1/embeddings", "", x->body, 120);
    atomic_store(&x->answered, 1);
    return NULL;
}

/* The runner killed in the middle of 100 inputs: they are embedded again. */
static void test_resume(void) {
    char *body = malloc(1 << 16);
    int at = sprintf(body, "{\"model\":\"kjv-mean\",\"input\":[");
    for (int i = 0; i < 100; i++) {
        char *json = quoted(texts[i % 4]);
        at += sprintf(body + at, "%s%s", i ? "," : "", json);
        free(json);
    }
    sprintf(body + at, "]}");
    struct test_http h = test_http_request(
        port, "POST", "/debug/fault", "",
        "{\"model\":\"kjv-mean\",\"kind\":\"delay\",\"delay_ms\":40,\"steps\":1000}", 10);
    CHECK_MSG(h.status == 200, "the delay fault: status %d", h.status);
    test_http_free(&h);
    double before = prompt_tokens_seen(), deadline = test_now() + 30;
    struct exchange x = {body, {0}, 0};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, exchange_thread, &x) == 0);
    while (prompt_tokens_seen() <= before && test_now() < deadline) continue;
    /* the kill must land while the runner has the inputs, or nothing resumes */
    CHECK_MSG(!atomic_load(&x.answered), "the answer came before the runner was killed");
    h = test_http_request(port, "POST", "/debug/fault", "",
                          "{\"model\":\"kjv-mean\",\"kind\":\"kill\"}", 10);
    CHECK_MSG(h.status == 200, "the kill fault: status %d", h.status);
    test_http_free(&h);
    pthread_join(thread, NULL);
    cJSON *j = x.answer.body ? cJSON_Parse(x.answer.body) : NULL;
    float v[DIM];
    CHECK_MSG(x.answer.status == 200 && cJSON_GetArraySize(cJSON_GetObjectItem(j, "data")) == 100,
              "status %d after the kill", x.answer.status);
    for (int i = 0; i < 100 && x.answer.status == 200; i++)
        CHECK_MSG(vector_of(j, i, v, DIM) == 0 && !memcmp(v, mean_vectors[i % 4], sizeof(v)),
                  "input %d of 100 differs after the runner was killed", i);
    CHECK_MSG(restarts() == 1, "%d restarts", restarts());
    cJSON_Delete(j);
    test_http_free(&x.answer);
    free(body);
}

/* Refusals name the field; the server goes on serving. */
static void test_refusals(void) {
    static char big[80000];
    struct {
        const char *body, *message;
    } cases[] = {
        {"{\"model\":\"kjv-none\",\"input\":\"In the beginning\"}",
         "this model's file names no pooling ({arch}.pooling_type) for embeddings: serve it with "
         "--pooling mean, last or cls"},
        {"{\"model\":\"kjv-mean\",\"input\":\"In the beginning\",\"dimensions\":1000}",
         "dimensions is 1000; this model's embeddings have 192 values (ask for at most that "
         "many)"},
        {"{\"model\":\"kjv-mean\",\"input\":\"\"}", "input must not be an empty string"},
        {"{\"model\":\"kjv-mean\",\"input\":[\"a\",\"\"]}", "input[1] must not be an empty string"},
        {"{\"model\":\"kjv-mean\",\"input\":[]}", "input must not be empty"},
        {"{\"model\":\"kjv-mean\"}", "input is required"},
        {"{\"model\":\"kjv-mean\",\"input\":\"a\",\"foo\":1}",
         "Unrecognized request argument supplied: foo"},
        {"{\"model\":\"kjv-mean\",\"input\":\"a\",\"encoding_format\":\"int8\"}",
         "encoding_format must be \"float\" or \"base64\", not \"int8\""},
        {"{\"model\":\"kjv-mean\",\"input\":\"a\",\"dimensions\":0}",
         "dimensions must be an integer from 1 to 65536"},
        {big, "input may hold at most 2048 prompts, got 2049"},
    };
    int at = sprintf(big, "{\"model\":\"kjv-mean\",\"input\":[");
    for (int i = 0; i < 2049; i++) at += sprintf(big + at, "%s\"a\"", i ? "," : "");
    sprintf(big + at, "]}");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cJSON *j = NULL;
        int status = post(cases[i].body, &j);
        const char *message =
            cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message"));
        CHECK_MSG(status == 400 && message && !strcmp(message, cases[i].message),
                  "case %zu: status %d, message '%s'", i, status, message ? message : "(none)");
        cJSON_Delete(j);
    }
    /* longer than the context (the model's 256 tokens) */
    at = sprintf(big, "{\"model\":\"kjv-mean\",\"input\":[");
    for (int i = 0; i < 600; i++) at += sprintf(big + at, "%s5", i ? "," : "");
    sprintf(big + at, "]}");
    cJSON *j = NULL;
    CHECK(post(big, &j) == 400);
    const cJSON *error = cJSON_GetObjectItem(j, "error");
    CHECK_MSG(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(error, "code")),
                      "context_length_exceeded"),
              "an input past the context");
    cJSON_Delete(j);

    struct test_http h = test_http_request(
        port, "POST", "/v1/completions", "",
        "{\"model\":\"kjv-mean\",\"prompt\":\"In the beginning\",\"max_tokens\":4}", 60);
    CHECK_MSG(h.status == 200 && h.body && strstr(h.body, "\"text_completion\""),
              "a completion after the refusals: status %d", h.status);
    test_http_free(&h);
}

int main(void) {
    char f32[512], q8[512], path[512], err[256];
    struct test_service gateway = {0};
    struct model *model = NULL;
    struct tokenizer *tok = NULL;
    test_shared_path(f32, sizeof(f32), "models/kjv2m-f32.gguf");
    test_shared_path(q8, sizeof(q8), "models/kjv2m-q8_0.gguf");
    test_shared_path(path, sizeof(path), "fixtures/embeddings/reference.json");
    if (!test_require_file(f32) || !test_require_file(q8) || !test_require_file(path))
        return TEST_SKIP_CODE;
    size_t length = 0;
    char *text = test_read_file(path, &length);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    const cJSON *cases = cJSON_GetObjectItem(root, "cases");
    CHECK_MSG(cJSON_IsArray(cases), "%s: no cases", path);
    CHECK_MSG(model_load(&model, f32, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(model && tokenizer_load_gguf(&tok, model->gguf, err, sizeof(err)) == 0, "%s", err);
    CHECK(model && model->config.dim == DIM);
    char *extra[] = {
        "--enable-faults", "--name",   "kjv-mean",  "--pooling", "mean", "-m", f32,
        "--name",          "kjv-last", "--pooling", "last",      "-m",   q8,   "--name",
        "kjv-none",        NULL};
    port =
        tok && cJSON_IsArray(cases) ? test_start_gateway(&gateway, f32, extra, NULL, DEADLINE) : 0;
    if (port > 0) {
        test_fixtures(cases, tok);
        test_batches(tok);
        test_formats();
        test_resume();
        test_refusals();
    } else {
        CHECK_MSG(0, "the gateway did not start");
    }
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    CHECK(test_kill_children() == 0);
    cJSON_Delete(root);
    free(text);
    tokenizer_free(tok);
    model_free(model);
    return test_status("test_gateway_embeddings");
}
