/* test_gateway_tools.c -- OpenAI tool calling over HTTP.
 *
 * On ../shared/models/kjv2m-q8_0.gguf (skipped without it), a model that
 * knows nothing of tools, rewritten with a context of 2048 positions (its
 * 256 cannot hold the tools' description; RoPE computes any position),
 * with the plain chat family (calls written as
 * <tool_call>{"name": ..., "arguments": ...}</tool_call>):
 *   - tool_choice "required" with two tools, temperature 1, 50 seeds (10
 *     requests of n=5): every answer ends with finish_reason "tool_calls",
 *     each call names one of the tools and its arguments are JSON valid
 *     under that tool's parameters (tests/json_schema_check.c, written
 *     apart from the converter), with an id of its own;
 *   - a named tool_choice: every call is of that tool;
 *   - streamed, the tool-call deltas assemble into the calls the whole
 *     answer of the same seed has;
 *   - "auto": the answer is content (the model never writes the trigger)
 *     ending with stop or length, without calls;
 *   - a conversation with an assistant's tool_calls and a tool message is
 *     answered, and usage.prompt_tokens is the token count of
 *     tokenizer_chat_apply_tools' text for it;
 *   - refusals with 400 naming the field: a bad tool name, a tool_choice
 *     naming no tool, a schema keyword outside the subset, a tool message
 *     without tool_call_id.
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

static char model_path[640];
static int port;

static int start_gateway(struct test_service *s) {
    char *extra[] = {"--chat-template", "plain", NULL};
    port = test_start_gateway(s, model_path, extra, NULL, DEADLINE);
    return port > 0;
}

/* The tools' parameters (names and schemas in the same order). */
static const char *const tool_names[2] = {"get_weather", "count_verses"};
static const char *const tool_schemas[2] = {
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\"],"
    "\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"book\":{\"type\":\"string\",\"maxLength\":10},"
    "\"chapter\":{\"type\":\"boolean\"}},\"required\":[\"book\",\"chapter\"],"
    "\"additionalProperties\":false}"};

/* "tools":[...] of both. */
static void tools_field(char *out, size_t size) {
    snprintf(out, size,
             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"%s\",\"description\":"
             "\"The weather in a city\",\"parameters\":%s}},{\"type\":\"function\",\"function\":"
             "{\"name\":\"%s\",\"description\":\"Verses of a chapter\",\"parameters\":%s}}]",
             tool_names[0], tool_schemas[0], tool_names[1], tool_schemas[1]);
}

/* POSTs body to path; the parsed answer (NULL unless 200) and *status. */
static cJSON *post(const char *body, int *status, char *error, size_t size) {
    struct test_http h = test_http_request(port, "POST", "/v1/chat/completions", NULL, body, 60);
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

static int finished_with(const cJSON *choice, const char *reason) {
    const cJSON *r = cJSON_GetObjectItem(choice, "finish_reason");
    return cJSON_IsString(r) && !strcmp(r->valuestring, reason);
}

static const char *string_of(const cJSON *object, const char *key) {
    const cJSON *item = cJSON_GetObjectItem(object, key);
    return cJSON_IsString(item) ? item->valuestring : NULL;
}

/* A call {"id","type","function":{"name","arguments"}}: a tool's (want,
 * or any of them when NULL), with arguments valid under its schema. */
static void check_call(const cJSON *call, const char *want, const char *what) {
    const cJSON *function = cJSON_GetObjectItem(call, "function");
    const char *id = string_of(call, "id"), *name = string_of(function, "name");
    const char *arguments = string_of(function, "arguments");
    CHECK_MSG(id && !strncmp(id, "call_", 5), "%s: id %s", what, id ? id : "(none)");
    CHECK_MSG(string_of(call, "type") && !strcmp(string_of(call, "type"), "function"), "%s: type",
              what);
    int tool = -1;
    for (int i = 0; name && i < 2; i++)
        if (!strcmp(name, tool_names[i])) tool = i;
    CHECK_MSG(tool >= 0 && (!want || !strcmp(name, want)), "%s: name %s", what,
              name ? name : "(none)");
    char err[256];
    int is_json = arguments && json_text_check(arguments, strlen(arguments), err, sizeof(err)) == 0;
    CHECK_MSG(is_json, "%s: arguments '%s' are not JSON", what, arguments ? arguments : "(none)");
    if (!is_json || tool < 0) return;
    cJSON *schema = cJSON_Parse(tool_schemas[tool]), *doc = cJSON_Parse(arguments);
    CHECK_MSG(json_schema_check(schema, doc, err, sizeof(err)) == 0, "%s: '%s': %s", what,
              arguments, err);
    cJSON_Delete(schema);
    cJSON_Delete(doc);
}

/* n choices of seed, each with calls of want (any tool when NULL). */
static int check_calls_answer(int seed, int n, const char *choice_field, const char *want) {
    char body[4096], tools[2048], what[64];
    int calls = 0, status;
    tools_field(tools, sizeof(tools));
    snprintf(body, sizeof(body),
             "{\"model\":\"" MODEL "\",\"temperature\":1,\"seed\":%d,\"n\":%d,\"max_tokens\":300,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Jericho?\"}],%s,"
             "\"tool_choice\":%s}",
             seed, n, tools, choice_field);
    cJSON *j = post(body, &status, NULL, 0);
    CHECK_MSG(status == 200, "seed %d: status %d", seed, status);
    const cJSON *choice;
    cJSON_ArrayForEach(choice, cJSON_GetObjectItem(j, "choices")) {
        int index = cJSON_GetObjectItem(choice, "index")->valueint;
        snprintf(what, sizeof(what), "seed %d", seed + index);
        const cJSON *message = cJSON_GetObjectItem(choice, "message");
        const cJSON *list = cJSON_GetObjectItem(message, "tool_calls");
        CHECK_MSG(finished_with(choice, "tool_calls"), "%s: finish_reason", what);
        CHECK_MSG(cJSON_GetArraySize(list) >= 1, "%s: no calls", what);
        const cJSON *call;
        cJSON_ArrayForEach(call, list) check_call(call, want, what);
        calls += cJSON_GetArraySize(list) >= 1;
    }
    cJSON_Delete(j);
    return calls;
}

static void test_required(void) {
    int answered = 0;
    for (int k = 0; k < 10; k++)
        answered += check_calls_answer(100 + 5 * k, 5, "\"required\"", NULL);
    CHECK_MSG(answered == 50, "%d answers of 50 with calls", answered);
}

static void test_named(void) {
    const char *named = "{\"type\":\"function\",\"function\":{\"name\":\"count_verses\"}}";
    int answered = 0;
    for (int k = 0; k < 2; k++)
        answered += check_calls_answer(500 + 5 * k, 5, named, "count_verses");
    CHECK_MSG(answered == 10, "%d answers of 10 with calls", answered);
}

/* The calls of a whole answer as "name(arguments)" lines. */
static void whole_calls(int seed, char *out, size_t size) {
    char body[4096], tools[2048];
    int status;
    tools_field(tools, sizeof(tools));
    snprintf(body, sizeof(body),
             "{\"model\":\"" MODEL "\",\"temperature\":1,\"seed\":%d,\"max_tokens\":300,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Jericho?\"}],%s,"
             "\"tool_choice\":\"required\"}",
             seed, tools);
    cJSON *j = post(body, &status, NULL, 0);
    const cJSON *message =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message");
    const cJSON *call;
    size_t used = 0;
    out[0] = '\0';
    cJSON_ArrayForEach(call, cJSON_GetObjectItem(message, "tool_calls")) {
        const cJSON *f = cJSON_GetObjectItem(call, "function");
        used += (size_t)snprintf(out + used, size - used, "%s(%s)\n", string_of(f, "name"),
                                 string_of(f, "arguments"));
    }
    cJSON_Delete(j);
}

/* The same seed streamed: the tool-call deltas assemble into the same calls. */
static void test_streamed(void) {
    for (int seed = 7; seed < 10; seed++) {
        char body[4096], tools[2048], want[4096], names[8][80] = {{0}}, args[8][1024] = {{0}};
        tools_field(tools, sizeof(tools));
        whole_calls(seed, want, sizeof(want));
        snprintf(body, sizeof(body),
                 "{\"model\":\"" MODEL "\",\"temperature\":1,\"seed\":%d,\"max_tokens\":300,"
                 "\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Weather in "
                 "Jericho?\"}],%s,\"tool_choice\":\"required\"}",
                 seed, tools);
        struct test_http h =
            test_http_request(port, "POST", "/v1/chat/completions", NULL, body, 60);
        CHECK_MSG(h.status == 200, "streamed: status %d", h.status);
        int n = 0, finished = 0;
        for (const char *line = h.body; line && (line = strstr(line, "data: ")); line += 6) {
            cJSON *chunk = cJSON_Parse(line + 6);
            const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(chunk, "choices"), 0);
            const cJSON *delta = cJSON_GetObjectItem(choice, "delta"), *item;
            finished += finished_with(choice, "tool_calls");
            cJSON_ArrayForEach(item, cJSON_GetObjectItem(delta, "tool_calls")) {
                int i = cJSON_GetObjectItem(item, "index")->valueint;
                const cJSON *f = cJSON_GetObjectItem(item, "function");
                if (i < 0 || i >= 8) continue;
                if (string_of(f, "name"))
                    snprintf(names[i], sizeof(names[i]), "%s", string_of(f, "name"));
                if (string_of(f, "arguments"))
                    strncat(args[i], string_of(f, "arguments"),
                            sizeof(args[i]) - strlen(args[i]) - 1);
                if (i + 1 > n) n = i + 1;
            }
            cJSON_Delete(chunk);
        }
        char got[sizeof(names) + sizeof(args) + 8 * 3 + 1] = "";
        for (int i = 0; i < n; i++)
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s(%s)\n", names[i], args[i]);
        CHECK_MSG(finished == 1, "seed %d: %d tool_calls finishes", seed, finished);
        CHECK_MSG(want[0] && !strcmp(got, want), "seed %d: streamed '%s', whole '%s'", seed, got,
                  want);
        test_http_free(&h);
    }
}

/* "auto": the model does not write the trigger, so the answer is content. */
static void test_auto(void) {
    char body[4096], tools[2048];
    int status;
    tools_field(tools, sizeof(tools));
    snprintf(body, sizeof(body),
             "{\"model\":\"" MODEL "\",\"temperature\":1,\"seed\":3,\"n\":4,\"max_tokens\":40,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"And God said\"}],%s}",
             tools);
    cJSON *j = post(body, &status, NULL, 0);
    CHECK_MSG(status == 200, "auto: status %d", status);
    const cJSON *choice;
    int n = 0;
    cJSON_ArrayForEach(choice, cJSON_GetObjectItem(j, "choices")) {
        const cJSON *message = cJSON_GetObjectItem(choice, "message");
        CHECK(string_of(message, "content") != NULL);
        CHECK(cJSON_GetObjectItem(message, "tool_calls") == NULL);
        CHECK(finished_with(choice, "stop") || finished_with(choice, "length"));
        n++;
    }
    CHECK(n == 4);
    cJSON_Delete(j);
}

/* A conversation with a call and its result: the prompt is the template's text. */
static void test_conversation(const struct tokenizer *tok) {
    char body[4096], tools[2048], err[256], bos[64], eos[64];
    int status;
    tools_field(tools, sizeof(tools));
    snprintf(body, sizeof(body),
             "{\"model\":\"" MODEL "\",\"max_tokens\":2,\"messages\":["
             "{\"role\":\"system\",\"content\":\"Be brief.\"},"
             "{\"role\":\"user\",\"content\":\"Weather in Jericho?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
             "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
             "\"{\\\"city\\\": \\\"Jericho\\\"}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"hot\"}],%s}",
             tools);
    cJSON *j = post(body, &status, err, sizeof(err));
    CHECK_MSG(status == 200, "conversation: status %d: %s", status, err);
    const cJSON *usage = cJSON_GetObjectItem(j, "usage");
    int prompt_tokens = cJSON_GetObjectItem(usage, "prompt_tokens")->valueint;

    const struct tokenizer_tool_call call = {"call_1", "get_weather", "{\"city\": \"Jericho\"}"};
    const struct tokenizer_chat_message m[4] = {
        {.role = "system", .content = "Be brief."},
        {.role = "user", .content = "Weather in Jericho?"},
        {.role = "assistant", .content = "", .tool_calls = &call, .n_tool_calls = 1},
        {.role = "tool", .content = "hot", .tool_call_id = "call_1"}};
    const struct tokenizer_chat_tool t[2] = {
        {tool_names[0], "The weather in a city", tool_schemas[0]},
        {tool_names[1], "Verses of a chapter", tool_schemas[1]}};
    size_t length = 0, piece_length = 0;
    const char *piece = tokenizer_piece(tok, tokenizer_bos(tok), &piece_length);
    snprintf(bos, sizeof(bos), "%.*s", piece ? (int)piece_length : 0, piece ? piece : "");
    piece = tokenizer_piece(tok, tokenizer_eos(tok), &piece_length);
    snprintf(eos, sizeof(eos), "%.*s", piece ? (int)piece_length : 0, piece ? piece : "");
    char *text = NULL;
    CHECK(tokenizer_chat_apply_tools(TOKENIZER_CHAT_PLAIN, m, 4, t, 2, 1, bos, eos, &text, &length,
                                     err, sizeof(err)) == 0);
    int max_ids = tokenizer_max_ids(length), n = 0;
    int *ids = malloc((size_t)max_ids * sizeof(int));
    int add_bos =
        tokenizer_adds_bos(tok) && !tokenizer_chat_template_writes_bos(TOKENIZER_CHAT_PLAIN);
    CHECK(text && tokenizer_encode_special(tok, text, length, add_bos, ids, max_ids, &n, err,
                                           sizeof(err)) == 0);
    CHECK_MSG(prompt_tokens == n && n > 0, "prompt_tokens %d, the template's text has %d",
              prompt_tokens, n);
    CHECK(text && strstr(text, "<tool_call>") &&
          strstr(text, "<tool_response>hot</tool_response>"));
    free(ids);
    free(text);
    cJSON_Delete(j);
}

/* A request refused with 400 whose error names param and says want. */
static void expect_refused(const char *fields, const char *param, const char *want) {
    char body[8192], error[1024];
    int status;
    snprintf(body, sizeof(body), "{\"model\":\"" MODEL "\",\"max_tokens\":4,%s}", fields);
    cJSON *j = post(body, &status, error, sizeof(error));
    cJSON_Delete(j);
    cJSON *e = cJSON_Parse(error);
    const cJSON *err = cJSON_GetObjectItem(e, "error");
    const cJSON *p = cJSON_GetObjectItem(err, "param"), *m = cJSON_GetObjectItem(err, "message");
    CHECK_MSG(status == 400 && cJSON_IsString(p) && !strcmp(p->valuestring, param) &&
                  cJSON_IsString(m) && strstr(m->valuestring, want),
              "%s: status %d, %s (want param %s, '%s')", fields, status, error, param, want);
    cJSON_Delete(e);
}

#define HI "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"

static void test_refusals(void) {
    expect_refused(HI "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get weather\"}}]",
                   "tools[0].function.name", "letters, digits, underscores or dashes");
    expect_refused(HI "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                      "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}",
                   "tool_choice.function.name", "is not the name of any of the tools");
    expect_refused(
        HI "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":"
           "\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"type\":"
           "\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"exclusiveMinimum\":0}}}}}]",
        "tools[1].function.parameters",
        "unsupported JSON Schema keyword \"exclusiveMinimum\" at /properties/n");
    expect_refused("\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"tool\","
                   "\"content\":\"x\"}]",
                   "messages[1].tool_call_id", "messages[1].tool_call_id is required");
}

/* kjv2m as path with a context of 2048 positions (same weights and vocabulary). */
static int write_long_context(struct model *kjv, const struct tokenizer *tok, const char *path) {
    char err[256];
    int n = tokenizer_vocab_size(tok), rc = -1;
    const char **texts = calloc((size_t)n, sizeof(*texts));
    uint64_t *lengths = calloc((size_t)n, sizeof(*lengths));
    float *scores = calloc((size_t)n, sizeof(*scores));
    int32_t *types = calloc((size_t)n, sizeof(*types));
    struct tokenizer_entry e;
    for (int id = 0; texts && lengths && scores && types && id < n; id++) {
        if (tokenizer_token_entry(tok, id, &e)) break;
        texts[id] = e.text;
        lengths[id] = e.text_len;
        scores[id] = e.score;
        types[id] = e.type;
        if (id == n - 1) rc = 0;
    }
    struct model_vocab vocab = {
        "llama", n, texts, lengths, scores, types, tokenizer_bos(tok), tokenizer_eos(tok), 0, 1};
    kjv->config.context_length = 2048;
    if (rc == 0)
        rc = model_write_gguf(kjv, TENSOR_Q8_0, MODEL_MIX_NONE, &vocab, "kjv2m", path, err,
                              sizeof(err));
    CHECK_MSG(rc == 0, "writing %s: %s", path, rc ? err : "");
    free(texts);
    free(lengths);
    free(scores);
    free(types);
    return rc == 0;
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
    char long_path[600];
    snprintf(long_path, sizeof(long_path), "%s/kjv2m-q8_0.gguf", LOCKSTEP_TEST_TMP);
    if (tok && write_long_context(model, tok, long_path))
        snprintf(model_path, sizeof(model_path), "%s", long_path);
    if (tok && !strcmp(model_path, long_path) && start_gateway(&gateway)) {
        test_required();
        test_named();
        test_streamed();
        test_auto();
        test_conversation(tok);
        test_refusals();
    } else {
        CHECK_MSG(0, "the gateway did not start");
    }
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    CHECK(test_kill_children() == 0);
    tokenizer_free(tok);
    model_free(model);
    return test_status("test_gateway_tools");
}
