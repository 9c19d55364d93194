/* test_gateway_openai_response.c -- the gateway's OpenAI response bodies.
 *
 * The error object, chat.completion, its chunks, text_completion (whole and
 * streamed), answers of several choices, logprobs and /v1/models: every body parsed back with cJSON
 * and checked field by field, including texts with quotes, newlines, control characters, non-ASCII
 * UTF-8 and bytes that are not UTF-8. The request parser is test_gateway_openai.c's. */
#include "openai/openai.h"
#include "runner/runner.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int parse(const char *body, enum openai_kind kind, struct openai_request *request,
                 struct openai_error *error) {
    return openai_parse_request(body, strlen(body), kind, request, error);
}

static int same_string(const char *a, const char *b) {
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

/* ------------------------------- errors --------------------------------- */

static cJSON *parse_json(const char *text) {
    cJSON *root = text != NULL ? cJSON_Parse(text) : NULL;
    CHECK_MSG(root != NULL, "not JSON: %s", text != NULL ? text : "(null)");
    return root;
}

static const cJSON *get(const cJSON *object, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(object, key);
}

static int is_string(const cJSON *item, const char *want) {
    return cJSON_IsString(item) && strcmp(item->valuestring, want) == 0;
}

static int is_number(const cJSON *item, double want) {
    return cJSON_IsNumber(item) && item->valuedouble == want;
}

static void test_error_json(void) {
    struct openai_error e;
    openai_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                     "the model \"%s\" does not exist", "gpt\"5\n");
    CHECK(e.status == 404);
    char *text = openai_error_json(&e);
    cJSON *root = parse_json(text);
    const cJSON *error = get(root, "error");
    CHECK(cJSON_IsObject(error) && cJSON_GetArraySize(root) == 1);
    CHECK(cJSON_GetArraySize(error) == 4);
    CHECK(is_string(get(error, "message"), "the model \"gpt\"5\n\" does not exist"));
    CHECK(is_string(get(error, "type"), "invalid_request_error"));
    CHECK(is_string(get(error, "param"), "model"));
    CHECK(is_string(get(error, "code"), "model_not_found"));
    cJSON_Delete(root);
    free(text);

    /* A parse error: param and code null; a bad byte in the message is U+FFFD. */
    struct openai_request r;
    CHECK(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"\xff\"}]}", OPENAI_CHAT, &r, &e) == -1);
    text = openai_error_json(&e);
    root = parse_json(text);
    error = get(root, "error");
    CHECK(is_string(get(error, "message"), "messages[0].role must be one of system, developer, "
                                           "user, assistant, tool; got \"\xEF\xBF\xBD\""));
    CHECK(is_string(get(error, "param"), "messages[0].role"));
    CHECK(cJSON_IsNull(get(error, "code")));
    cJSON_Delete(root);
    free(text);

    CHECK(parse("{", OPENAI_CHAT, &r, &e) == -1);
    text = openai_error_json(&e);
    root = parse_json(text);
    error = get(root, "error");
    CHECK(cJSON_IsNull(get(error, "param")) && cJSON_IsNull(get(error, "code")));
    CHECK(is_string(get(error, "type"), "invalid_request_error"));
    cJSON_Delete(root);
    free(text);
}

/* ------------------------------ responses ------------------------------- */

/* Quotes, backslash, newline, tab, a control character, 2-, 3- and 4-byte UTF-8. */
static const char tricky[] = "He said \"hi\\\"\n\tthen \x01\x1f left: \xC3\xA9 \xE6\x97\xA5 "
                             "\xF0\x9F\x98\x80 end";

static const cJSON *first_choice(const cJSON *root) {
    const cJSON *choices = get(root, "choices");
    CHECK(cJSON_IsArray(choices) && cJSON_GetArraySize(choices) == 1);
    const cJSON *choice = cJSON_GetArrayItem(choices, 0);
    CHECK(is_number(get(choice, "index"), 0));
    return choice;
}

static void check_head(const cJSON *root, const char *id, const char *object) {
    CHECK(is_string(get(root, "id"), id));
    CHECK(is_string(get(root, "object"), object));
    CHECK(is_number(get(root, "created"), 1732900000));
    CHECK(is_string(get(root, "model"), "kjv2m"));
}

static void check_usage(const cJSON *usage, int prompt, int completion, int cached) {
    CHECK(cJSON_IsObject(usage) && cJSON_GetArraySize(usage) == 4);
    CHECK(is_number(get(usage, "prompt_tokens"), prompt));
    CHECK(is_number(get(usage, "completion_tokens"), completion));
    CHECK(is_number(get(usage, "total_tokens"), prompt + completion));
    const cJSON *details = get(usage, "prompt_tokens_details");
    CHECK(cJSON_IsObject(details) && cJSON_GetArraySize(details) == 1);
    CHECK(is_number(get(details, "cached_tokens"), cached));
}

/* Escaping checks on the printed text itself: no raw control characters. */
static void check_printed(const char *text) {
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++)
        CHECK_MSG(*p >= 0x20, "raw control byte 0x%02x in %s", *p, text);
}

static struct openai_response chat_response(int logprobs, int include_usage) {
    struct openai_response response = {OPENAI_CHAT, "chatcmpl-0123abcd", "kjv2m", 1732900000,
                                       logprobs,    include_usage};
    return response;
}

static void test_chat_completion(void) {
    struct openai_response response = chat_response(0, 0);
    struct openai_result result = {
        tricky, strlen(tricky), OPENAI_FINISH_STOP, {12, 5, 8}, 0, 0, NULL, NULL};
    char *text = openai_completion_json(&response, &result);
    check_printed(text);
    cJSON *root = parse_json(text);
    check_head(root, "chatcmpl-0123abcd", "chat.completion");
    const cJSON *choice = first_choice(root);
    const cJSON *message = get(choice, "message");
    CHECK(is_string(get(message, "role"), "assistant"));
    CHECK(is_string(get(message, "content"), tricky));
    CHECK(cJSON_IsNull(get(message, "refusal")));
    CHECK(cJSON_IsNull(get(choice, "logprobs")));
    CHECK(is_string(get(choice, "finish_reason"), "stop"));
    check_usage(get(root, "usage"), 12, 5, 8);
    cJSON_Delete(root);
    free(text);

    /* Text that is not UTF-8: each ill-formed part becomes one U+FFFD, NUL too. */
    static const char bad[] = "\xff\xC3(\xE2\x82\xED\xA0\x80ok\0x\xF0\x9F\x98";
    result.text = bad;
    result.length = sizeof(bad) - 1;
    result.finish = OPENAI_FINISH_LENGTH;
    text = openai_completion_json(&response, &result);
    root = parse_json(text);
    choice = first_choice(root);
    CHECK(is_string(get(get(choice, "message"), "content"),
                    "\xEF\xBF\xBD\xEF\xBF\xBD(\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDok"
                    "\xEF\xBF\xBDx\xEF\xBF\xBD"));
    CHECK(is_string(get(choice, "finish_reason"), "length"));
    cJSON_Delete(root);
    free(text);

    /* A long text takes the allocated path of the UTF-8 copy. */
    char *long_text = malloc(3001);
    for (int i = 0; i < 3000; i++) long_text[i] = "ab\"\n\xC3\xA9"[i % 6];
    long_text[3000] = '\0';
    result.text = long_text;
    result.length = 3000;
    text = openai_completion_json(&response, &result);
    root = parse_json(text);
    CHECK(is_string(get(get(first_choice(root), "message"), "content"), long_text));
    cJSON_Delete(root);
    free(text);
    free(long_text);
}

/* Two tokens: "He" with alternatives, then the first two bytes of a
 * three-byte character with a logprob of -inf. */
static void fill_tokens(struct openai_token tokens[2]) {
    memset(tokens, 0, 2 * sizeof(tokens[0]));
    tokens[0].text = "He";
    tokens[0].length = 2;
    tokens[0].logprob = -0.123f;
    tokens[0].n_top = 2;
    tokens[0].top[0] = (struct openai_alternative){"He", 2, -0.123f};
    tokens[0].top[1] = (struct openai_alternative){"\"S\n", 3, -2.5f};
    tokens[1].text = "\xE6\x97";
    tokens[1].length = 2;
    tokens[1].logprob = -INFINITY;
}

static void check_bytes(const cJSON *bytes, const unsigned char *want, int n) {
    CHECK(cJSON_IsArray(bytes) && cJSON_GetArraySize(bytes) == n);
    for (int i = 0; i < n && i < cJSON_GetArraySize(bytes); i++)
        CHECK(is_number(cJSON_GetArrayItem(bytes, i), want[i]));
}

static void check_chat_logprobs(const cJSON *logprobs) {
    CHECK(cJSON_IsObject(logprobs) && cJSON_IsNull(get(logprobs, "refusal")));
    const cJSON *content = get(logprobs, "content");
    CHECK(cJSON_IsArray(content) && cJSON_GetArraySize(content) == 2);
    const cJSON *he = cJSON_GetArrayItem(content, 0), *partial = cJSON_GetArrayItem(content, 1);
    CHECK(is_string(get(he, "token"), "He"));
    CHECK(cJSON_IsNumber(get(he, "logprob")) && (float)get(he, "logprob")->valuedouble == -0.123f);
    check_bytes(get(he, "bytes"), (const unsigned char *)"He", 2);
    const cJSON *top = get(he, "top_logprobs");
    CHECK(cJSON_IsArray(top) && cJSON_GetArraySize(top) == 2);
    const cJSON *second = cJSON_GetArrayItem(top, 1);
    CHECK(is_string(get(second, "token"), "\"S\n"));
    CHECK(is_number(get(second, "logprob"), -2.5));
    check_bytes(get(second, "bytes"), (const unsigned char *)"\"S\n", 3);
    CHECK(cJSON_GetArraySize(cJSON_GetArrayItem(top, 0)) == 3); /* no nested top_logprobs */
    CHECK(is_string(get(partial, "token"), "\xEF\xBF\xBD"));
    CHECK(is_number(get(partial, "logprob"), OPENAI_LOGPROB_FLOOR));
    check_bytes(get(partial, "bytes"), (const unsigned char *)"\xE6\x97", 2);
    CHECK(cJSON_IsArray(get(partial, "top_logprobs")) &&
          cJSON_GetArraySize(get(partial, "top_logprobs")) == 0);
}

static void test_chat_logprobs(void) {
    struct openai_token tokens[2];
    fill_tokens(tokens);
    struct openai_response response = chat_response(1, 0);
    struct openai_result result = {"He\xE6\x97", 4,   OPENAI_FINISH_LENGTH, {3, 2, 0}, 2, 0,
                                   tokens,       NULL};
    char *text = openai_completion_json(&response, &result);
    /* Shortest float form: -0.123f prints as -0.123. */
    CHECK(text != NULL && strstr(text, "\"logprob\":-0.123,") != NULL);
    cJSON *root = parse_json(text);
    check_chat_logprobs(get(first_choice(root), "logprobs"));
    cJSON_Delete(root);
    free(text);
}

static void test_chat_chunks(void) {
    struct openai_token tokens[2];
    fill_tokens(tokens);
    struct openai_response response = chat_response(1, 1);

    struct openai_delta first = {1, "", 0, OPENAI_FINISH_NONE, 0, NULL, 0, NULL};
    char *text = openai_chunk_json(&response, &first);
    cJSON *root = parse_json(text);
    check_head(root, "chatcmpl-0123abcd", "chat.completion.chunk");
    const cJSON *choice = first_choice(root);
    const cJSON *delta = get(choice, "delta");
    CHECK(cJSON_GetArraySize(delta) == 2);
    CHECK(is_string(get(delta, "role"), "assistant") && is_string(get(delta, "content"), ""));
    CHECK(cJSON_IsNull(get(choice, "logprobs")) && cJSON_IsNull(get(choice, "finish_reason")));
    CHECK(cJSON_IsNull(get(root, "usage")));
    cJSON_Delete(root);
    free(text);

    struct openai_delta middle = {0, tricky, strlen(tricky), OPENAI_FINISH_NONE, 2, tokens,
                                  0, NULL};
    text = openai_chunk_json(&response, &middle);
    check_printed(text);
    root = parse_json(text);
    choice = first_choice(root);
    delta = get(choice, "delta");
    CHECK(cJSON_GetArraySize(delta) == 1 && is_string(get(delta, "content"), tricky));
    check_chat_logprobs(get(choice, "logprobs"));
    CHECK(cJSON_IsNull(get(choice, "finish_reason")) && cJSON_IsNull(get(root, "usage")));
    cJSON_Delete(root);
    free(text);

    struct openai_delta last = {0, NULL, 0, OPENAI_FINISH_STOP, 0, NULL, 0, NULL};
    text = openai_chunk_json(&response, &last);
    root = parse_json(text);
    choice = first_choice(root);
    CHECK(cJSON_IsObject(get(choice, "delta")) && cJSON_GetArraySize(get(choice, "delta")) == 0);
    CHECK(is_string(get(choice, "finish_reason"), "stop"));
    CHECK(cJSON_IsNull(get(choice, "logprobs")));
    cJSON_Delete(root);
    free(text);

    struct openai_usage usage = {9, 4, 0};
    text = openai_usage_chunk_json(&response, &usage);
    root = parse_json(text);
    check_head(root, "chatcmpl-0123abcd", "chat.completion.chunk");
    CHECK(cJSON_IsArray(get(root, "choices")) && cJSON_GetArraySize(get(root, "choices")) == 0);
    check_usage(get(root, "usage"), 9, 4, 0);
    cJSON_Delete(root);
    free(text);

    /* Without include_usage there is no "usage" key; without logprobs none either. */
    response = chat_response(0, 0);
    text = openai_chunk_json(&response, &middle);
    root = parse_json(text);
    CHECK(get(root, "usage") == NULL);
    CHECK(cJSON_IsNull(get(first_choice(root), "logprobs")));
    cJSON_Delete(root);
    free(text);
}

/* "Hello" + " w\xC3" + "\xB6rld": the middle token ends inside "ö". */
static void fill_completion_tokens(struct openai_token tokens[3]) {
    memset(tokens, 0, 3 * sizeof(tokens[0]));
    tokens[0] = (struct openai_token){"Hello", 5, -0.25f, 3, {{" Hi", 3, -1.0f}}};
    tokens[0].top[1] = (struct openai_alternative){"Hello", 5, -0.25f};
    tokens[0].top[2] = (struct openai_alternative){"He", 2, -3.0f};
    tokens[1] = (struct openai_token){" w\xC3", 3, -0.5f, 2, {{"\xC3", 1, -0.5f}}};
    tokens[1].top[1] = (struct openai_alternative){"\xC4", 1, -0.75f};
    tokens[2] = (struct openai_token){"\xB6rld", 4, -0.0625f, 0, {{NULL, 0, 0}}};
}

static void check_completion_logprobs(const cJSON *logprobs, int base) {
    const cJSON *texts = get(logprobs, "tokens"), *values = get(logprobs, "token_logprobs");
    const cJSON *tops = get(logprobs, "top_logprobs"), *offsets = get(logprobs, "text_offset");
    CHECK(cJSON_GetArraySize(logprobs) == 4);
    CHECK(cJSON_GetArraySize(texts) == 3 && cJSON_GetArraySize(values) == 3);
    CHECK(cJSON_GetArraySize(tops) == 3 && cJSON_GetArraySize(offsets) == 3);
    CHECK(is_string(cJSON_GetArrayItem(texts, 0), "Hello"));
    CHECK(is_string(cJSON_GetArrayItem(texts, 1), " w\xEF\xBF\xBD"));
    CHECK(is_string(cJSON_GetArrayItem(texts, 2), "\xEF\xBF\xBDrld"));
    CHECK(is_number(cJSON_GetArrayItem(values, 0), -0.25));
    CHECK(is_number(cJSON_GetArrayItem(values, 1), -0.5));
    CHECK(is_number(cJSON_GetArrayItem(values, 2), -0.0625));
    /* Alternatives in order; the sampled token is not added twice. */
    const cJSON *top0 = cJSON_GetArrayItem(tops, 0);
    CHECK(cJSON_GetArraySize(top0) == 3);
    CHECK(is_number(get(top0, " Hi"), -1.0) && is_number(get(top0, "Hello"), -0.25));
    CHECK(is_number(get(top0, "He"), -3.0));
    CHECK(top0->child != NULL && same_string(top0->child->string, " Hi"));
    /* "\xC3" and "\xC4" both print as U+FFFD: the first is kept; the sampled
     * token, absent from the alternatives, is added. */
    const cJSON *top1 = cJSON_GetArrayItem(tops, 1);
    CHECK(cJSON_GetArraySize(top1) == 2);
    CHECK(is_number(get(top1, "\xEF\xBF\xBD"), -0.5));
    CHECK(is_number(get(top1, " w\xEF\xBF\xBD"), -0.5));
    const cJSON *top2 = cJSON_GetArrayItem(tops, 2);
    CHECK(cJSON_GetArraySize(top2) == 1 && is_number(get(top2, "\xEF\xBF\xBDrld"), -0.0625));
    /* Characters before each token: "Hello" is 5, " w\xC3" starts a 3rd. */
    CHECK(is_number(cJSON_GetArrayItem(offsets, 0), base));
    CHECK(is_number(cJSON_GetArrayItem(offsets, 1), base + 5));
    CHECK(is_number(cJSON_GetArrayItem(offsets, 2), base + 8));
}

static void test_text_completion(void) {
    struct openai_token tokens[3];
    fill_completion_tokens(tokens);
    struct openai_response response = {OPENAI_COMPLETION, "cmpl-77", "kjv2m", 1732900000, 1, 0};
    struct openai_result result = {
        "Hello w\xC3\xB6rld", 12, OPENAI_FINISH_LENGTH, {4, 3, 0}, 3, 0, tokens, NULL};
    char *text = openai_completion_json(&response, &result);
    cJSON *root = parse_json(text);
    check_head(root, "cmpl-77", "text_completion");
    const cJSON *choice = first_choice(root);
    CHECK(is_string(get(choice, "text"), "Hello w\xC3\xB6rld"));
    CHECK(is_string(get(choice, "finish_reason"), "length"));
    check_completion_logprobs(get(choice, "logprobs"), 0);
    check_usage(get(root, "usage"), 4, 3, 0);
    cJSON_Delete(root);
    free(text);

    CHECK(openai_text_chars("Hello w\xC3\xB6rld", 12) == 11);
    CHECK(openai_text_chars("\xF0\x9F\x98\x80", 4) == 1 && openai_text_chars("", 0) == 0);

    /* Streamed: logprobs offsets continue from the chunk's text_offset. */
    response.include_usage = 1;
    struct openai_delta delta = {0,  tricky, strlen(tricky), OPENAI_FINISH_NONE, 3, tokens,
                                 40, NULL};
    text = openai_chunk_json(&response, &delta);
    check_printed(text);
    root = parse_json(text);
    check_head(root, "cmpl-77", "text_completion");
    choice = first_choice(root);
    CHECK(is_string(get(choice, "text"), tricky));
    CHECK(cJSON_IsNull(get(choice, "finish_reason")));
    check_completion_logprobs(get(choice, "logprobs"), 40);
    CHECK(cJSON_IsNull(get(root, "usage")));
    cJSON_Delete(root);
    free(text);

    struct openai_delta last = {0, "", 0, OPENAI_FINISH_STOP, 0, NULL, 52, NULL};
    text = openai_chunk_json(&response, &last);
    root = parse_json(text);
    choice = first_choice(root);
    CHECK(is_string(get(choice, "text"), "") && is_string(get(choice, "finish_reason"), "stop"));
    CHECK(cJSON_IsNull(get(choice, "logprobs")));
    cJSON_Delete(root);
    free(text);

    struct openai_usage usage = {4, 3, 0};
    text = openai_usage_chunk_json(&response, &usage);
    root = parse_json(text);
    check_head(root, "cmpl-77", "text_completion");
    CHECK(cJSON_GetArraySize(get(root, "choices")) == 0);
    check_usage(get(root, "usage"), 4, 3, 0);
    cJSON_Delete(root);
    free(text);

    /* Not asked for: "logprobs": null even when tokens are passed. */
    response.logprobs = 0;
    text = openai_completion_json(&response, &result);
    root = parse_json(text);
    CHECK(cJSON_IsNull(get(first_choice(root), "logprobs")));
    cJSON_Delete(root);
    free(text);
}

/* n choices: each its own index, text, finish_reason and logprobs, in
 * order; usage is the request's; a chunk names its choice. */
static void test_choices(void) {
    struct openai_token tokens[3];
    fill_completion_tokens(tokens);
    struct openai_result results[3] = {
        {"Hello w\xC3\xB6rld", 12, OPENAI_FINISH_LENGTH, {4, 3, 0}, 3, 0, tokens, NULL},
        {"", 0, OPENAI_FINISH_STOP, {4, 1, 0}, 0, 0, NULL, NULL},
        {tricky, strlen(tricky), OPENAI_FINISH_STOP, {4, 2, 0}, 1, 0, tokens, NULL},
    };
    struct openai_usage usage = {4, 6, 2};
    for (int chat = 0; chat < 2; chat++) {
        struct openai_response response = {
            chat ? OPENAI_CHAT : OPENAI_COMPLETION, "id-3", "kjv2m", 1732900000, 1, 0};
        char *text = openai_choices_json(&response, results, 3, &usage);
        cJSON *root = parse_json(text);
        check_head(root, "id-3", chat ? "chat.completion" : "text_completion");
        const cJSON *choices = get(root, "choices");
        CHECK(cJSON_IsArray(choices) && cJSON_GetArraySize(choices) == 3);
        for (int i = 0; i < 3; i++) {
            const cJSON *choice = cJSON_GetArrayItem(choices, i);
            const cJSON *content =
                chat ? get(get(choice, "message"), "content") : get(choice, "text");
            const cJSON *logprobs = get(choice, "logprobs");
            const cJSON *entries = chat ? get(logprobs, "content") : get(logprobs, "tokens");
            CHECK_MSG(is_number(get(choice, "index"), i), "chat %d: choice %d's index", chat, i);
            CHECK(is_string(content, i == 0 ? "Hello w\xC3\xB6rld" : i == 1 ? "" : tricky));
            CHECK(is_string(get(choice, "finish_reason"), i == 0 ? "length" : "stop"));
            CHECK(cJSON_GetArraySize(entries) == results[i].n_tokens);
        }
        check_usage(get(root, "usage"), 4, 6, 2);
        cJSON_Delete(root);
        free(text);

        struct openai_delta delta = {1, "x", 1, OPENAI_FINISH_NONE, 0, NULL, 0, NULL};
        text = openai_choice_chunk_json(&response, &delta, 2);
        root = parse_json(text);
        CHECK(cJSON_GetArraySize(get(root, "choices")) == 1);
        CHECK(is_number(get(cJSON_GetArrayItem(get(root, "choices"), 0), "index"), 2));
        cJSON_Delete(root);
        free(text);
    }
}

static void test_response_init(void) {
    struct openai_request r;
    struct openai_error e;
    CHECK(parse("{\"model\":\"kjv2m\",\"prompt\":\"x\",\"stream\":true,\"logprobs\":2,"
                "\"stream_options\":{\"include_usage\":true}}",
                OPENAI_COMPLETION, &r, &e) == 0);
    struct openai_response response;
    openai_response_init(&response, &r, "cmpl-1", 5);
    CHECK(response.kind == OPENAI_COMPLETION && same_string(response.id, "cmpl-1"));
    CHECK(response.model == r.model && response.created == 5);
    CHECK(response.logprobs == 1 && response.include_usage == 1);
    r.stream = 0; /* include_usage only applies to a stream */
    openai_response_init(&response, &r, "cmpl-1", 5);
    CHECK(response.include_usage == 0);
    openai_request_free(&r);
}

static void test_models(void) {
    const char *ids[] = {"kjv2m", "qwen\"3\""};
    const int contexts[] = {256, 131072};
    char *text = openai_models_json(ids, contexts, 2, 1732900000);
    cJSON *root = parse_json(text);
    CHECK(is_string(get(root, "object"), "list"));
    const cJSON *data = get(root, "data");
    CHECK(cJSON_IsArray(data) && cJSON_GetArraySize(data) == 2);
    for (int i = 0; i < 2 && i < cJSON_GetArraySize(data); i++) {
        const cJSON *model = cJSON_GetArrayItem(data, i);
        CHECK(cJSON_GetArraySize(model) == 8);
        CHECK(is_string(get(model, "lockstep_version"), version_string()));
        CHECK(is_string(get(model, "lockstep_commit"), version_commit()));
        CHECK(is_number(get(model, "context_length"), contexts[i]));
        CHECK(is_number(get(model, "max_model_len"), contexts[i]));
        CHECK(is_string(get(model, "id"), ids[i]));
        CHECK(is_string(get(model, "object"), "model"));
        CHECK(is_number(get(model, "created"), 1732900000));
        CHECK(is_string(get(model, "owned_by"), "lockstep"));
    }
    cJSON_Delete(root);
    free(text);

    text = openai_models_json(NULL, NULL, 0, 0);
    CHECK(same_string(text, "{\"object\":\"list\",\"data\":[]}"));
    free(text);

    text = openai_model_json("kjv2m", 0, 7);
    char want[256];
    snprintf(want, sizeof(want),
             "{\"id\":\"kjv2m\",\"object\":\"model\",\"created\":7,\"owned_by\":\"lockstep\","
             "\"lockstep_version\":\"%s\",\"lockstep_commit\":\"%s\"}",
             version_string(), version_commit());
    CHECK(same_string(text, want));
    free(text);
}

/* One call of a message or a delta: {"id"?, "type"?, "function": {"name"?, "arguments"}}. */
static void check_call(const cJSON *call, const char *id, const char *name, const char *arguments) {
    const cJSON *function = get(call, "function");
    CHECK(id ? is_string(get(call, "id"), id) && is_string(get(call, "type"), "function")
             : get(call, "id") == NULL && get(call, "type") == NULL);
    CHECK(name ? is_string(get(function, "name"), name) : get(function, "name") == NULL);
    CHECK(is_string(get(function, "arguments"), arguments));
}

/* Tool calls in a whole answer (content null without text) and in chunks. */
static void test_tool_calls(void) {
    struct openai_response response = {OPENAI_CHAT, "chatcmpl-9", "kjv2m", 1732900000, 0, 0};
    char a0[] = "call_a", n0[] = "get_weather", g0[] = "{\"city\":\"Paris\"}";
    char a1[] = "call_b", n1[] = "now", g1[] = "{}";
    struct openai_tool_call calls[2] = {{a0, n0, g0}, {a1, n1, g1}};
    struct openai_result result = {"", 0, OPENAI_FINISH_TOOL_CALLS, {9, 20, 0}, 0, 2, NULL, calls};
    char *text = openai_completion_json(&response, &result);
    check_printed(text);
    cJSON *root = parse_json(text);
    const cJSON *choice = first_choice(root), *message = get(choice, "message");
    CHECK(is_string(get(choice, "finish_reason"), "tool_calls"));
    CHECK(cJSON_IsNull(get(message, "content")) && is_string(get(message, "role"), "assistant"));
    const cJSON *list = get(message, "tool_calls");
    CHECK(cJSON_GetArraySize(list) == 2);
    check_call(cJSON_GetArrayItem(list, 0), "call_a", "get_weather", "{\"city\":\"Paris\"}");
    check_call(cJSON_GetArrayItem(list, 1), "call_b", "now", "{}");
    cJSON_Delete(root);
    free(text);

    /* content before the calls stays */
    result.text = "Let me check.";
    result.length = 13;
    result.n_tool_calls = 1;
    text = openai_completion_json(&response, &result);
    root = parse_json(text);
    message = get(first_choice(root), "message");
    CHECK(is_string(get(message, "content"), "Let me check."));
    CHECK(cJSON_GetArraySize(get(message, "tool_calls")) == 1);
    cJSON_Delete(root);
    free(text);

    /* a call's first chunk (the choice's first: role, content null), then its arguments */
    struct openai_call_delta head = {1, "call_b", "now", ""}, rest = {1, NULL, NULL, "{\"x\":"};
    struct openai_delta d = {.first = 1, .text = "", .call = &head};
    text = openai_choice_chunk_json(&response, &d, 0);
    check_printed(text);
    root = parse_json(text);
    choice = first_choice(root);
    const cJSON *delta = get(choice, "delta");
    CHECK(is_number(get(choice, "index"), 0) && cJSON_IsNull(get(choice, "finish_reason")));
    CHECK(is_string(get(delta, "role"), "assistant") && cJSON_IsNull(get(delta, "content")));
    const cJSON *item = cJSON_GetArrayItem(get(delta, "tool_calls"), 0);
    CHECK(cJSON_GetArraySize(get(delta, "tool_calls")) == 1 && is_number(get(item, "index"), 1));
    check_call(item, "call_b", "now", "");
    cJSON_Delete(root);
    free(text);
    d = (struct openai_delta){.text = "", .call = &rest};
    text = openai_chunk_json(&response, &d);
    root = parse_json(text);
    delta = get(first_choice(root), "delta");
    item = cJSON_GetArrayItem(get(delta, "tool_calls"), 0);
    CHECK(cJSON_GetArraySize(delta) == 1 && is_number(get(item, "index"), 1));
    check_call(item, NULL, NULL, "{\"x\":");
    cJSON_Delete(root);
    free(text);
    d = (struct openai_delta){.text = "", .finish = OPENAI_FINISH_TOOL_CALLS};
    text = openai_chunk_json(&response, &d);
    root = parse_json(text);
    choice = first_choice(root);
    CHECK(cJSON_GetArraySize(get(choice, "delta")) == 0);
    CHECK(is_string(get(choice, "finish_reason"), "tool_calls"));
    cJSON_Delete(root);
    free(text);
}

int main(void) {
    test_tool_calls();
    test_error_json();
    test_chat_completion();
    test_chat_logprobs();
    test_chat_chunks();
    test_text_completion();
    test_choices();
    test_response_init();
    test_models();
    return test_status("test_gateway_openai_response");
}
