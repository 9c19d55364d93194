/* test_gateway_structured.c -- structured outputs over HTTP:
 * response_format, grammar and logit_bias.
 *
 * On ../shared/models/kjv2m-q8_0.gguf (skipped without it), a model that
 * knows nothing of JSON:
 *   - response_format json_schema (an object with a bounded string, an
 *     integer, an enum, an optional array of at most 3 booleans, no other
 *     properties): 200 seeds at temperature 1 (25 requests of n=8) give
 *     200 answers that are JSON, valid under the schema
 *     (tests/json_schema_check.c, written apart from the converter), each
 *     with finish_reason "stop"; streamed, the deltas join into valid JSON;
 *   - json_object: every answer is a JSON object;
 *   - grammar (completions): every answer is one of the grammar's words;
 *   - a grammar plus a logit_bias that bans every token it allows: 400 "no
 *     token is allowed", not a banned token;
 *   - logit_bias: +100 on a token makes greedy write only it; -100 on the
 *     token greedy writes first makes it write another;
 *   - refusals with 400 naming the field: a grammar that does not compile,
 *     a schema keyword outside the subset, a bad logit_bias key, value or
 *     size, a token outside the vocabulary (the runner's check), grammar
 *     and response_format together.
 * ctest-labels: concurrency */
#include "json_schema_check.h"
#include "model/model.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEADLINE 120.0
#define MODEL    "kjv2m-q8_0"

static char model_path[512];
static int port;

static int start_gateway(struct test_service *s) {
    port = test_start_gateway(s, model_path, NULL, NULL, DEADLINE);
    return port > 0;
}

static const char schema_text[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\"},"
    "\"mood\":{\"enum\":[\"calm\",\"wroth\",null]},"
    "\"flags\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"maxItems\":3}},"
    "\"required\":[\"name\",\"age\",\"mood\"],\"additionalProperties\":false}";

/* POSTs body to path; the parsed answer (NULL unless 200) and *status. */
static cJSON *post(const char *path, const char *body, int *status, char *error, size_t size) {
    struct test_http h = test_http_request(port, "POST", path, NULL, body, 60);
    *status = h.status;
    cJSON *j = h.body ? cJSON_Parse(h.body) : NULL;
    if (error) snprintf(error, size, "%s", h.body ? h.body : "");
    test_http_free(&h);
    if (*status != 200) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static const char *content_of(const cJSON *choice) {
    const cJSON *message = cJSON_GetObjectItem(choice, "message");
    const cJSON *text =
        cJSON_GetObjectItem(message ? message : choice, message ? "content" : "text");
    return cJSON_IsString(text) ? text->valuestring : NULL;
}

static int index_of(const cJSON *choice) {
    const cJSON *index = cJSON_GetObjectItem(choice, "index");
    return cJSON_IsNumber(index) ? index->valueint : -1;
}

static int finished_with(const cJSON *choice, const char *reason) {
    const cJSON *r = cJSON_GetObjectItem(choice, "finish_reason");
    return cJSON_IsString(r) && !strcmp(r->valuestring, reason);
}

/* Checks text: strict JSON, valid under schema (NULL: an object). */
static void check_document(const char *text, const cJSON *schema, const char *what) {
    char err[256];
    size_t n = text ? strlen(text) : 0;
    int is_json = text && json_text_check(text, n, err, sizeof(err)) == 0;
    CHECK_MSG(is_json, "%s: '%s': %s", what, text ? text : "(none)", is_json ? "" : err);
    if (!is_json) return;
    cJSON *doc = cJSON_Parse(text);
    if (schema)
        CHECK_MSG(json_schema_check(schema, doc, err, sizeof(err)) == 0, "%s: '%s': %s", what, text,
                  err);
    else
        CHECK_MSG(cJSON_IsObject(doc), "%s: '%s' is not an object", what, text);
    cJSON_Delete(doc);
}

static void test_json_schema(void) {
    char body[4096], what[64];
    cJSON *schema = cJSON_Parse(schema_text);
    int valid = 0;
    for (int k = 0; k < 25; k++) {
        snprintf(body, sizeof(body),
                 "{\"model\":\"" MODEL "\",\"temperature\":1,\"seed\":%d,\"n\":8,"
                 "\"max_tokens\":200,\"messages\":[{\"role\":\"user\",\"content\":\"Who?\"}],"
                 "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
                 "\"person\",\"strict\":true,\"schema\":%s}}}",
                 1000 + 8 * k, schema_text);
        int status;
        cJSON *j = post("/v1/chat/completions", body, &status, NULL, 0);
        CHECK_MSG(status == 200, "json_schema request %d: status %d", k, status);
        const cJSON *choice;
        cJSON_ArrayForEach(choice, cJSON_GetObjectItem(j, "choices")) {
            snprintf(what, sizeof(what), "seed %d", 1000 + 8 * k + index_of(choice));
            check_document(content_of(choice), schema, what);
            CHECK_MSG(finished_with(choice, "stop"), "%s: not finished with stop", what);
            valid++;
        }
        cJSON_Delete(j);
    }
    CHECK_MSG(valid == 200, "%d answers of 200", valid);
    cJSON_Delete(schema);
}

/* Streamed, the deltas of a json_schema answer join into a valid document. */
static void test_streamed_schema(void) {
    char body[4096];
    cJSON *schema = cJSON_Parse(schema_text);
    snprintf(body, sizeof(body),
             "{\"model\":\"" MODEL "\",\"temperature\":1,\"seed\":7,\"stream\":true,"
             "\"max_tokens\":200,\"messages\":[{\"role\":\"user\",\"content\":\"Who?\"}],"
             "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
             "\"person\",\"schema\":%s}}}",
             schema_text);
    struct test_http h = test_http_request(port, "POST", "/v1/chat/completions", NULL, body, 60);
    CHECK_MSG(h.status == 200, "streamed json_schema: status %d", h.status);
    char text[8192] = "";
    size_t n = 0;
    for (const char *line = h.body; line && (line = strstr(line, "data: ")); line += 6) {
        cJSON *chunk = cJSON_Parse(line + 6);
        const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(chunk, "choices"), 0);
        const cJSON *delta = cJSON_GetObjectItem(cJSON_GetObjectItem(choice, "delta"), "content");
        if (cJSON_IsString(delta) && n + strlen(delta->valuestring) < sizeof(text))
            n += (size_t)snprintf(text + n, sizeof(text) - n, "%s", delta->valuestring);
        cJSON_Delete(chunk);
    }
    check_document(text, schema, "streamed");
    test_http_free(&h);
    cJSON_Delete(schema);
}

/* json_object: any JSON object; 16 seeds. */
static void test_json_object(void) {
    char body[1024];
    for (int k = 0; k < 2; k++) {
        snprintf(body, sizeof(body),
                 "{\"model\":\"" MODEL "\",\"temperature\":1,\"seed\":%d,\"n\":8,"
                 "\"max_tokens\":200,\"messages\":[{\"role\":\"user\",\"content\":\"JSON?\"}],"
                 "\"response_format\":{\"type\":\"json_object\"}}",
                 5 + 8 * k);
        int status;
        cJSON *j = post("/v1/chat/completions", body, &status, NULL, 0);
        CHECK_MSG(status == 200, "json_object: status %d", status);
        const cJSON *choice;
        cJSON_ArrayForEach(choice, cJSON_GetObjectItem(j, "choices")) {
            /* an answer cut by max_tokens is not whole JSON: only finished ones are judged */
            if (finished_with(choice, "stop"))
                check_document(content_of(choice), NULL, "json_object");
        }
        cJSON_Delete(j);
    }
}

/* grammar (llama.cpp's field) on completions. */
static void test_grammar_field(void) {
    const char *body = "{\"model\":\"" MODEL "\",\"prompt\":\"And God said\",\"temperature\":1,"
                       "\"seed\":3,\"n\":8,\"max_tokens\":20,"
                       "\"grammar\":\"root ::= (\\\"yea\\\" | \\\"nay\\\") \\\".\\\"\"}";
    int status;
    char error[512];
    cJSON *j = post("/v1/completions", body, &status, error, sizeof(error));
    CHECK_MSG(status == 200, "grammar: status %d: %s", status, error);
    const cJSON *choice;
    int n = 0;
    cJSON_ArrayForEach(choice, cJSON_GetObjectItem(j, "choices")) {
        const char *text = content_of(choice);
        CHECK_MSG(text && (!strcmp(text, "yea.") || !strcmp(text, "nay.")),
                  "grammar: the answer is '%s'", text ? text : "(none)");
        CHECK(finished_with(choice, "stop"));
        n++;
    }
    CHECK(n == 8);
    cJSON_Delete(j);
}

/* The id of the token whose text is text (SPM vocabulary: a space is
 * spelled U+2581), or -1. */
static int token_of(const struct tokenizer *tok, const char *text) {
    char piece[64];
    size_t n = 0;
    for (const char *c = text; *c && n + 4 < sizeof(piece); c++) {
        if (*c == ' ') {
            memcpy(piece + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            piece[n++] = *c;
        }
    }
    return tokenizer_find(tok, piece, n);
}

static char *complete(const char *bias, int max_tokens) {
    char body[512];
    int status;
    snprintf(body, sizeof(body),
             "{\"model\":\"" MODEL "\",\"prompt\":\"In the beginning God\",\"temperature\":0,"
             "\"max_tokens\":%d,\"logit_bias\":%s}",
             max_tokens, bias);
    cJSON *j = post("/v1/completions", body, &status, NULL, 0);
    CHECK_MSG(status == 200, "logit_bias %s: status %d", bias, status);
    const char *text = content_of(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0));
    char *copy = strdup(text ? text : "");
    cJSON_Delete(j);
    return copy;
}

static void test_logit_bias(const struct tokenizer *tok) {
    char bias[64];
    char *greedy = complete("{}", 1);
    int first = token_of(tok, greedy), lord = token_of(tok, " LORD");
    CHECK_MSG(first >= 0 && lord >= 0, "'%s' and ' LORD' are not single tokens", greedy);
    snprintf(bias, sizeof(bias), "{\"%d\":-100}", first);
    char *banned = complete(bias, 1);
    CHECK_MSG(strcmp(banned, greedy) != 0, "-100 on '%s' (%d): greedy still wrote it", greedy,
              first);
    snprintf(bias, sizeof(bias), "{\"%d\":100}", lord);
    char *favoured = complete(bias, 4);
    CHECK_MSG(!strcmp(favoured, " LORD LORD LORD LORD"), "+100 on ' LORD': '%s'", favoured);
    free(greedy);
    free(banned);
    free(favoured);
}

/* A grammar whose only first character is "Q", with logit_bias banning
 * every token that writes just it (the piece and its byte token): no token
 * is allowed, which is the request's error, never a banned token. */
static void test_bias_bans_grammar(const struct tokenizer *tok) {
    char body[512], error[1024], bias[96] = "";
    int q = tokenizer_find(tok, "Q", 1), byte = tokenizer_find(tok, "<0x51>", 6), status;
    CHECK_MSG(q >= 0 || byte >= 0, "the vocabulary has no token for Q");
    if (q >= 0) snprintf(bias, sizeof(bias), "\"%d\":-100", q);
    if (byte >= 0)
        snprintf(bias + strlen(bias), sizeof(bias) - strlen(bias), "%s\"%d\":-100",
                 q >= 0 ? "," : "", byte);
    snprintf(body, sizeof(body),
             "{\"model\":\"" MODEL "\",\"prompt\":\"And God said\",\"max_tokens\":4,"
             "\"temperature\":0,\"grammar\":\"root ::= \\\"Q\\\"\",\"logit_bias\":{%s}}",
             bias);
    cJSON *j = post("/v1/completions", body, &status, error, sizeof(error));
    CHECK_MSG(status == 400 && strstr(error, "no token is allowed"),
              "a grammar whose every token is banned: status %d, %s %s", status, error, body);
    cJSON_Delete(j);
}

/* A request refused with 400 whose error names param and says want. */
static void expect_refused(const char *path, const char *fields, const char *param,
                           const char *want) {
    char body[8192], error[1024];
    int status;
    snprintf(body, sizeof(body), "{\"model\":\"" MODEL "\",\"max_tokens\":4,%s,%s}",
             strstr(path, "chat") ? "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]"
                                  : "\"prompt\":\"Hi\"",
             fields);
    cJSON *j = post(path, body, &status, error, sizeof(error));
    cJSON_Delete(j);
    cJSON *e = cJSON_Parse(error);
    const cJSON *err = cJSON_GetObjectItem(e, "error");
    const cJSON *p = cJSON_GetObjectItem(err, "param"), *m = cJSON_GetObjectItem(err, "message");
    CHECK_MSG(status == 400 && (!param || (cJSON_IsString(p) && !strcmp(p->valuestring, param))) &&
                  cJSON_IsString(m) && strstr(m->valuestring, want),
              "%s: status %d, %s (want param %s, '%s')", fields, status, error, param ? param : "-",
              want);
    cJSON_Delete(e);
}

static void test_refusals(void) {
    const char *chat = "/v1/chat/completions", *cmpl = "/v1/completions";
    expect_refused(cmpl, "\"grammar\":\"root ::= valu\"", "grammar", "grammar: 1:10: ");
    expect_refused(chat, "\"grammar\":\"\"", "grammar", "non-empty string");
    expect_refused(chat,
                   "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
                   "\"schema\":{\"type\":\"string\",\"pattern\":\"a+\"}}}",
                   "response_format.json_schema.schema", "pattern");
    expect_refused(chat, "\"response_format\":{\"type\":\"xml\"}", "response_format.type",
                   "is not text, json_object or json_schema");
    expect_refused(chat, "\"response_format\":{\"type\":\"json_schema\"}",
                   "response_format.json_schema", "required");
    expect_refused(chat,
                   "\"grammar\":\"root ::= \\\"a\\\"\",\"response_format\":{\"type\":"
                   "\"json_object\"}",
                   "response_format", "not both");
    expect_refused(cmpl, "\"logit_bias\":{\"abc\":1}", "logit_bias", "is not a token id");
    expect_refused(cmpl, "\"logit_bias\":{\"5\":150}", "logit_bias", "[-100, 100]");
    expect_refused(cmpl, "\"logit_bias\":[1]", "logit_bias", "must be an object");
    expect_refused(cmpl, "\"logit_bias\":{\"99999999\":1}", NULL,
                   "logit_bias token 99999999 is outside the vocabulary");
    char many[8192] = "\"logit_bias\":{";
    for (int i = 0; i <= 300; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%s\"%d\":1", i ? "," : "", i);
    strcat(many, "}");
    expect_refused(cmpl, many, "logit_bias", "301 entries; at most 300");
}

int main(void) {
    char err[256];
    struct test_service gateway;
    struct model *model = NULL;
    struct tokenizer *tok = NULL;
    if (!test_require_file(
            test_shared_path(model_path, sizeof(model_path), "models/kjv2m-q8_0.gguf")))
        return TEST_SKIP_CODE;
    CHECK_MSG(model_load(&model, model_path, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(model && tokenizer_load_gguf(&tok, model->gguf, err, sizeof(err)) == 0, "%s", err);
    if (tok && start_gateway(&gateway)) {
        test_json_schema();
        test_streamed_schema();
        test_json_object();
        test_grammar_field();
        test_logit_bias(tok);
        test_bias_bans_grammar(tok);
        test_refusals();
    } else {
        CHECK_MSG(0, "the gateway did not start");
    }
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    CHECK(test_kill_children() == 0);
    tokenizer_free(tok);
    model_free(model);
    return test_status("test_gateway_structured");
}
