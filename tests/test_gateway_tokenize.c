/* test_gateway_tokenize.c -- llama.cpp's POST /tokenize and POST /detokenize
 * on `lockstep serve`, over real HTTP on loopback.
 *
 * On ../shared/models/kjv2m-q8_0.gguf (skipped without it), with --api-key,
 * --max-body and --cors-origin:
 *   - the ids of /tokenize are those of tokenizer_encode_special in this
 *     process (tokenizer_encode with parse_special false), for ASCII,
 *     accented text, an emoji, newlines and runs of spaces, and "";
 *   - /detokenize gives the text back: for this SPM vocabulary with its
 *     space prefix, the text after one leading space, as llama.cpp's
 *     server gives it; the pieces of with_pieces concatenate to exactly
 *     that content, a piece that is not UTF-8 (a byte-fallback token of the
 *     emoji) being an array of byte values;
 *   - add_special puts BOS first, shown as its spelling; parse_special
 *     turns "<s>" in the text into BOS, and false keeps it text;
 *   - 400s name the field with exact messages (content missing or not a
 *     string, a flag not a boolean, tokens not an array of integers, an id
 *     outside the vocabulary, a body that is not a JSON object), 404 for an
 *     unknown model, 413 past --max-body, 401 without the key, CORS headers
 *     for an allowed origin, and /metrics counts the answers under the
 *     model's name. */
#include "testutil.h"

#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define DEADLINE 120.0
#define MODEL    "kjv2m-q8_0"
#define KEY      "tok-key"
#define AUTH     "Authorization: Bearer " KEY "\r\n"
#define ORIGIN   "http://tokens.example"

static char model_path[512];
static int port;

/* POSTs body to path with the key; returns the status, the parsed body in
 * *out (the caller deletes it) and the raw body in text. */
static int post(const char *path, const char *body, cJSON **out, char *text, size_t size) {
    struct test_http h = test_http_request(port, "POST", path, AUTH, body, 60);
    if (out) *out = h.body ? cJSON_Parse(h.body) : NULL;
    if (text) snprintf(text, size, "%s", h.body ? h.body : "");
    int status = h.status;
    test_http_free(&h);
    return status;
}

/* A JSON body {"content": text, FIELDS} (fields may be ""). */
static char *tokenize_body(const char *text, const char *fields) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "content", text);
    char *json = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    size_t n = strlen(json) + strlen(fields) + 2;
    char *body = malloc(n);
    json[strlen(json) - 1] = '\0';
    snprintf(body, n, "%s%s%s}", json, *fields ? "," : "", fields);
    free(json);
    return body;
}

/* /tokenize's ids for text (fields added); -1 after a failed check. */
static int tokenize(const char *text, const char *fields, int *ids, int max_ids) {
    char *body = tokenize_body(text, fields);
    cJSON *j = NULL;
    int status = post("/tokenize", body, &j, NULL, 0), n = 0;
    const cJSON *tokens = cJSON_GetObjectItem(j, "tokens"), *item;
    CHECK_MSG(status == 200 && cJSON_IsArray(tokens), "%s: status %d", body, status);
    cJSON_ArrayForEach(item, tokens) {
        CHECK(cJSON_IsNumber(item) && n < max_ids);
        if (n < max_ids) ids[n++] = item->valueint;
    }
    cJSON_Delete(j);
    free(body);
    return status == 200 ? n : -1;
}

/* /detokenize's content for ids (malloc'd), or NULL. */
static char *detokenize(const int *ids, int n) {
    cJSON *j = cJSON_CreateObject(), *answer = NULL;
    cJSON_AddItemToObject(j, "tokens", cJSON_CreateIntArray(ids, n));
    char *body = cJSON_PrintUnformatted(j);
    int status = post("/detokenize", body, &answer, NULL, 0);
    const cJSON *content = cJSON_GetObjectItem(answer, "content");
    CHECK_MSG(status == 200 && cJSON_IsString(content), "detokenize: status %d", status);
    char *text = cJSON_IsString(content) ? strdup(content->valuestring) : NULL;
    cJSON_Delete(answer);
    cJSON_Delete(j);
    free(body);
    return text;
}

/* The in-process ids of text; n or -1. */
static int encode_here(const struct tokenizer *tok, const char *text, int special, int add_bos,
                       int *ids, int max_ids) {
    char err[256];
    int n = 0;
    int rc = special ? tokenizer_encode_special(tok, text, strlen(text), add_bos, ids, max_ids, &n,
                                                err, sizeof(err))
                     : tokenizer_encode(tok, text, strlen(text), add_bos, ids, max_ids, &n, err,
                                        sizeof(err));
    CHECK_MSG(rc == 0, "%s", err);
    return rc == 0 ? n : -1;
}

static int same_ids(const int *a, int na, const int *b, int nb) {
    return na == nb && na >= 0 && (na == 0 || memcmp(a, b, (size_t)na * sizeof(int)) == 0);
}

/* The pieces of with_pieces concatenated (malloc'd); *arrays counts the
 * pieces given as byte arrays. Checks the ids against want. */
static char *pieces(const char *text, const int *want, int n_want, int *arrays) {
    char *body = tokenize_body(text, "\"with_pieces\":true");
    cJSON *j = NULL;
    int status = post("/tokenize", body, &j, NULL, 0), i = 0;
    char *out = calloc(1, strlen(text) * 4 + 64);
    size_t used = 0;
    const cJSON *item;
    *arrays = 0;
    CHECK_MSG(status == 200, "%s: status %d", body, status);
    cJSON_ArrayForEach(item, cJSON_GetObjectItem(j, "tokens")) {
        const cJSON *id = cJSON_GetObjectItem(item, "id"),
                    *piece = cJSON_GetObjectItem(item, "piece");
        CHECK(cJSON_IsNumber(id) && i < n_want && id->valueint == want[i]);
        i++;
        if (cJSON_IsString(piece)) {
            memcpy(out + used, piece->valuestring, strlen(piece->valuestring));
            used += strlen(piece->valuestring);
            continue;
        }
        CHECK_MSG(cJSON_IsArray(piece), "piece %d is neither a string nor an array", i - 1);
        (*arrays)++;
        const cJSON *byte;
        cJSON_ArrayForEach(byte, piece) {
            CHECK(cJSON_IsNumber(byte) && byte->valueint >= 0 && byte->valueint <= 255);
            out[used++] = (char)byte->valueint;
        }
    }
    CHECK(i == n_want);
    cJSON_Delete(j);
    free(body);
    return out;
}

static void test_round_trip(const struct tokenizer *tok) {
    static const char *const texts[] = {
        "In the beginning God created the heaven and the earth.",
        "And God said, Let there be light: and there was light.",
        "na\xc3\xafve caf\xc3\xa9 \xe2\x80\x94 the \xf0\x9f\xa4\x97 emoji",
        "two  spaces,\nthen a newline\tand a tab",
        "",
    };
    int ids[512], here[512], plain[512];
    for (size_t t = 0; t < sizeof(texts) / sizeof(texts[0]); t++) {
        const char *text = texts[t];
        int n = tokenize(text, "", ids, 512);
        int nh = encode_here(tok, text, 1, 0, here, 512);
        int np = encode_here(tok, text, 0, 0, plain, 512);
        CHECK_MSG(same_ids(ids, n, here, nh), "'%s': %d ids, %d in process", text, n, nh);
        CHECK_MSG(same_ids(here, nh, plain, np), "'%s': special parsing changed plain text", text);
        int m = tokenize(text, "\"parse_special\":false", ids, 512);
        CHECK_MSG(same_ids(ids, m, plain, np), "'%s': parse_special false", text);
        /* the SPM space prefix: one leading space, as from llama.cpp's server */
        char want[600];
        snprintf(want, sizeof(want), "%s%s", *text ? " " : "", text);
        char *content = detokenize(ids, n > 0 ? n : 0);
        CHECK_MSG(content && !strcmp(content, want), "'%s' came back as '%s'", text,
                  content ? content : "(none)");
        int arrays;
        char *joined = pieces(text, here, nh, &arrays);
        CHECK_MSG(!strcmp(joined, want), "'%s': pieces give '%s'", text, joined);
        CHECK_MSG(!strstr(text, "\xf0\x9f") || arrays >= 4, "'%s': %d byte arrays", text, arrays);
        free(joined);
        free(content);
    }
}

static void test_special(const struct tokenizer *tok) {
    int ids[64], here[64], n, nh;
    int bos = tokenizer_bos(tok);
    struct tokenizer_entry entry;
    CHECK(bos >= 0 && tokenizer_adds_bos(tok) && tokenizer_token_entry(tok, bos, &entry) == 0);
    n = tokenize("In the beginning", "\"add_special\":true", ids, 64);
    nh = encode_here(tok, "In the beginning", 1, 1, here, 64);
    CHECK(n > 1 && ids[0] == bos && same_ids(ids, n, here, nh));
    int arrays;
    char want[64];
    snprintf(want, sizeof(want), "%s In the beginning", entry.text);
    /* the BOS piece is its spelling, in pieces and in /detokenize */
    char *content = detokenize(ids, n);
    CHECK_MSG(content && !strcmp(content, want), "BOS detokenized as '%s'", content);
    free(content);
    n = tokenize("In the beginning", "\"add_special\":false", ids, 64);
    CHECK(n > 0 && ids[0] != bos);
    /* parse_special: "<s>" in the text is BOS, or text */
    char text[64];
    snprintf(text, sizeof(text), "%sIn", entry.text);
    n = tokenize(text, "", ids, 64);
    nh = encode_here(tok, text, 1, 0, here, 64);
    CHECK(n > 0 && ids[0] == bos && same_ids(ids, n, here, nh));
    char *joined = pieces(text, here, nh, &arrays);
    CHECK_MSG(!strncmp(joined, entry.text, entry.text_len), "pieces '%s'", joined);
    free(joined);
    n = tokenize(text, "\"parse_special\":false", ids, 64);
    nh = encode_here(tok, text, 0, 0, here, 64);
    CHECK(n > 1 && ids[0] != bos && same_ids(ids, n, here, nh));
}

/* POST path body with the key: status want and, for an error, its message
 * exactly and its param (NULL: none). */
static void expect_error(const char *path, const char *body, int want, const char *param,
                         const char *message) {
    char text[1024];
    cJSON *j = NULL;
    int status = post(path, body, &j, text, sizeof(text));
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    const cJSON *p = cJSON_GetObjectItem(e, "param"), *m = cJSON_GetObjectItem(e, "message");
    int param_ok = param ? cJSON_IsString(p) && !strcmp(p->valuestring, param) : cJSON_IsNull(p);
    CHECK_MSG(status == want && param_ok && cJSON_IsString(m) && !strcmp(m->valuestring, message),
              "%s %.80s: status %d, %s (want %d, param %s, '%s')", path, body, status, text, want,
              param ? param : "null", message);
    cJSON_Delete(j);
}

static void test_refusals(const struct tokenizer *tok) {
    const char *t = "/tokenize", *d = "/detokenize";
    char message[128];
    expect_error(t, "{}", 400, "content", "content is required: the text to tokenize");
    expect_error(t, "{\"content\":null}", 400, "content",
                 "content is required: the text to tokenize");
    expect_error(t, "{\"content\":5}", 400, "content", "content must be a string");
    expect_error(t, "{\"content\":[\"a\"]}", 400, "content", "content must be a string");
    expect_error(t, "{\"content\":\"a\",\"add_special\":1}", 400, "add_special",
                 "add_special must be a boolean");
    expect_error(t, "{\"content\":\"a\",\"parse_special\":\"no\"}", 400, "parse_special",
                 "parse_special must be a boolean");
    expect_error(t, "{\"content\":\"a\",\"with_pieces\":[]}", 400, "with_pieces",
                 "with_pieces must be a boolean");
    expect_error(t, "{\"content\":\"a\",\"model\":7}", 400, "model", "model must be a string");
    expect_error(t, "{\"content\":\"a\",\"model\":\"nope\"}", 404, "model",
                 "the model 'nope' does not exist");
    expect_error(t, "", 400, NULL, "the request body is empty; expected a JSON object");
    expect_error(t, "{\"content\":", 400, NULL, "the request body is not valid JSON");
    expect_error(d, "[1,2]", 400, NULL, "the request body must be a JSON object");
    expect_error(d, "{}", 400, "tokens", "tokens is required: an array of token ids");
    expect_error(d, "{\"tokens\":\"1 2\"}", 400, "tokens", "tokens must be an array of token ids");
    expect_error(d, "{\"tokens\":[1,2.5]}", 400, "tokens", "tokens[1] must be an integer token id");
    expect_error(d, "{\"tokens\":[1,\"2\"]}", 400, "tokens",
                 "tokens[1] must be an integer token id");
    expect_error(d, "{\"tokens\":[1e300]}", 400, "tokens", "tokens[0] must be an integer token id");
    int vocab = tokenizer_vocab_size(tok);
    snprintf(message, sizeof(message), "tokens[2] is -1, outside the vocabulary (0..%d)",
             vocab - 1);
    expect_error(d, "{\"tokens\":[1,2,-1]}", 400, "tokens", message);
    char body[64];
    snprintf(body, sizeof(body), "{\"tokens\":[%d]}", vocab);
    snprintf(message, sizeof(message), "tokens[0] is %d, outside the vocabulary (0..%d)", vocab,
             vocab - 1);
    expect_error(d, body, 400, "tokens", message);
    expect_error(d, "{\"tokens\":[1],\"model\":\"nope\"}", 404, "model",
                 "the model 'nope' does not exist");
    /* --max-body 4096 */
    char *large = calloc(1, 5100);
    strcpy(large, "{\"content\":\"");
    memset(large + strlen(large), 'x', 5000);
    strcat(large, "\"}");
    expect_error(t, large, 413, NULL, "the body is larger than the server takes");
    free(large);
}

static void test_access(void) {
    const char *body = "{\"content\":\"In the beginning\"}";
    struct test_http h = test_http_request(port, "POST", "/tokenize", NULL, body, 30);
    CHECK_MSG(h.status == 401, "/tokenize without the key: %d", h.status);
    test_http_free(&h);
    h = test_http_request(port, "POST", "/detokenize", "Authorization: Bearer wrong\r\n",
                          "{\"tokens\":[1]}", 30);
    CHECK_MSG(h.status == 401, "/detokenize with a wrong key: %d", h.status);
    test_http_free(&h);
    h = test_http_request(port, "GET", "/tokenize", AUTH, NULL, 30);
    CHECK_MSG(h.status == 404, "GET /tokenize: %d", h.status);
    test_http_free(&h);
    h = test_http_request(port, "POST", "/tokenize", AUTH "Origin: " ORIGIN "\r\n", body, 30);
    CHECK_MSG(h.status == 200 && h.headers &&
                  strstr(h.headers, "Access-Control-Allow-Origin: " ORIGIN),
              "CORS: %d %s", h.status, h.headers ? h.headers : "");
    test_http_free(&h);
    h = test_http_request(port, "OPTIONS", "/detokenize", "Origin: " ORIGIN "\r\n", NULL, 30);
    CHECK_MSG(h.status == 204, "preflight: %d", h.status);
    test_http_free(&h);
}

/* The value of the series whose line starts with prefix, or -1. */
static double series(const char *text, const char *prefix) {
    const char *at = strstr(text, prefix);
    return at ? strtod(at + strlen(prefix), NULL) : -1;
}

static void test_metrics(void) {
    struct test_http h = test_http_request(port, "GET", "/metrics", AUTH, NULL, 30);
    const char *text = h.body ? h.body : "";
    double ok = series(text, "lockstep_requests_total{model=\"" MODEL "\",status=\"200\"} ");
    double bad = series(text, "lockstep_requests_total{model=\"" MODEL "\",status=\"400\"} ");
    CHECK_MSG(h.status == 200 && ok >= 20 && bad >= 2, "/metrics: 200s %g, 400s %g", ok, bad);
    test_http_free(&h);
}

int main(void) {
    char err[256];
    struct test_service gateway = {0};
    struct model *model = NULL;
    struct tokenizer *tok = NULL;
    if (!test_require_file(
            test_shared_path(model_path, sizeof(model_path), "models/kjv2m-q8_0.gguf")))
        return TEST_SKIP_CODE;
    CHECK_MSG(model_load(&model, model_path, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(model && tokenizer_load_gguf(&tok, model->gguf, err, sizeof(err)) == 0, "%s", err);
    char *extra[] = {"--api-key", KEY, "--max-body", "4096", "--cors-origin", ORIGIN, NULL};
    port = tok ? test_start_gateway(&gateway, model_path, extra, NULL, DEADLINE) : 0;
    if (port > 0) {
        CHECK(tokenizer_kind(tok) == TOKENIZER_SPM);
        test_round_trip(tok);
        test_special(tok);
        test_refusals(tok);
        test_access();
        test_metrics();
    } else {
        CHECK_MSG(0, "the gateway did not start");
    }
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    CHECK(test_kill_children() == 0);
    tokenizer_free(tok);
    model_free(model);
    return test_status("test_gateway_tokenize");
}
