/* fuzz_openai.c -- libFuzzer harness for the gateway's OpenAI JSON layer
 * (src/openai/openai_*.c). The input is parsed as a body for both
 * endpoints. A refusal must be a 400 with a one-line message, and its error
 * body must parse back. An accepted request must hold what openai.h
 * promises (every range, every string present, model non-empty or NULL
 * when omitted), its body must hold only fields the endpoint accepts, once
 * each, with the values that ask for nothing where lockstep does not
 * implement the field (a list kept here apart from the parser's own), and
 * every body built from
 * it -- the whole response, the first, a middle and the last chunk, the
 * usage chunk -- must parse back with cJSON, be valid UTF-8 with no raw
 * control byte, and carry a text that was valid UTF-8 unchanged. Token
 * texts and logprobs for the builders are cut from the input, so they hold
 * split characters, NUL bytes, -inf and NaN. Built by
 * tests/fuzz/CMakeLists.txt when LOCKSTEP_FUZZ=ON. */
#include "openai/openai.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_TOKENS 8 /* tokens cut from the input for logprobs */

/* 1 if s[0..n) is UTF-8 with no NUL (decoded and range-checked here on
 * its own, not with the code under test). */
static int valid_utf8(const unsigned char *s, size_t n) {
    static const unsigned smallest[4] = {0, 0x80, 0x800, 0x10000}; /* no overlong forms */
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        int more = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
        if (c == 0 || more < 0 || (size_t)more >= n - i) return 0;
        unsigned code = c & (more == 0 ? 0x7Fu : 0x7Fu >> (more + 1));
        for (int k = 1; k <= more; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            code = (code << 6) | (s[i + k] & 0x3Fu);
        }
        if (code < smallest[more] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
            return 0;
        i += (size_t)more + 1;
    }
    return 1;
}

/* Checks a built body and returns it parsed (the caller deletes it). */
static cJSON *check_body(char *text) {
    if (text == NULL) abort();
    size_t length = strlen(text);
    if (!valid_utf8((const unsigned char *)text, length)) abort();
    for (size_t i = 0; i < length; i++)
        if ((unsigned char)text[i] < 0x20) abort();
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) abort();
    return root;
}

static void check_refusal(const struct openai_error *e) {
    if (e->status != 400 || e->type == NULL || strcmp(e->type, "invalid_request_error") != 0)
        abort();
    if (e->message[0] == '\0' || memchr(e->message, '\n', sizeof(e->message)) != NULL) abort();
    cJSON *root = check_body(openai_error_json(e));
    cJSON *error = cJSON_GetObjectItemCaseSensitive(root, "error");
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(error, "message"))) abort();
    cJSON_Delete(root);
}

/* The top-level fields an accepted body may hold (not null), as " name "
 * lists kept here apart from the parser's own table: for both endpoints,
 * then for chat and for completions alone. */
static const char both_fields[] =
    " model stream stream_options max_tokens temperature top_p top_k min_p presence_penalty "
    "frequency_penalty repetition_penalty ignore_eos seed stop logprobs n user logit_bias "
    "grammar response_format ";
static const char chat_fields[] =
    " messages max_completion_tokens top_logprobs safety_identifier metadata store service_tier "
    "prompt_cache_key parallel_tool_calls tools functions tool_choice function_call "
    "modalities ";
static const char completion_fields[] = " prompt echo best_of suffix ";

/* Fields lockstep does not implement, each with a JSON value that asks for
 * nothing: the only values an accepted body may give them. Others, such as
 * audio, are never accepted and are in no list above. */
static const char *const nothing[] = {"functions",     "[]",       "function_call", "\"none\"",
                                      "function_call", "\"auto\"", "modalities",    "[\"text\"]",
                                      "best_of",       "1",        "suffix",        "\"\""};

/* 1 if " name " is in list. */
static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    if (n == 0 || strchr(name, ' ') != NULL) return 0;
    for (const char *p = strstr(list, name); p != NULL; p = strstr(p + 1, name))
        if (p[-1] == ' ' && p[n] == ' ') return 1;
    return 0;
}

/* 1 if name is not in nothing[], or value is one of its values there. */
static int asks_for_nothing(const char *name, const cJSON *value) {
    int limited = 0;
    for (size_t i = 0; i < sizeof(nothing) / sizeof(nothing[0]); i += 2) {
        if (strcmp(nothing[i], name) != 0) continue;
        limited = 1;
        cJSON *want = cJSON_Parse(nothing[i + 1]);
        int same = cJSON_Compare(want, value, 1);
        cJSON_Delete(want);
        if (same) return 1;
    }
    return !limited;
}

/* An accepted body: each field known to the endpoint, given once, and
 * asking for nothing where lockstep does not implement it; unknown fields
 * only as null. */
static void check_fields(const uint8_t *data, size_t size, enum openai_kind kind) {
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    if (!cJSON_IsObject(root)) abort();
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        const char *name = item->string;
        if (!listed(both_fields, name) &&
            !listed(kind == OPENAI_CHAT ? chat_fields : completion_fields, name)) {
            if (!cJSON_IsNull(item)) abort();
            continue;
        }
        for (const cJSON *later = item->next; later != NULL; later = later->next)
            if (strcmp(later->string, name) == 0) abort();
        if (!cJSON_IsNull(item) && !asks_for_nothing(name, item)) abort();
    }
    cJSON_Delete(root);
}

static int in(double value, double lo, double hi) {
    return value >= lo && value <= hi;
}

/* Accepted tools: 0..128, each named [a-zA-Z0-9_-]{1,64} once, with a
 * grammar; a tool_choice that calls needs tools, a named one a tool. */
static void check_tools(const struct openai_request *r) {
    if (!in(r->n_tools, 0, OPENAI_TOOLS_MAX) || !in(r->parallel_tool_calls, 0, 1)) abort();
    for (int i = 0; i < r->n_tools; i++) {
        const char *name = r->tools[i].name;
        size_t n = strlen(name);
        if (n < 1 || n > OPENAI_TOOL_NAME_MAX ||
            strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
                         "KLMNOPQRSTUVWXYZ0123456789_-") != n)
            abort();
        if (r->tools[i].grammar == NULL) abort();
        for (int j = 0; j < i; j++)
            if (!strcmp(r->tools[j].name, name)) abort();
    }
    if (r->tool_choice != OPENAI_TOOLS_NONE && (r->n_tools == 0 || r->grammar != NULL)) abort();
    if (r->tool_choice == OPENAI_TOOLS_FUNCTION && !in(r->tool_choice_index, 0, r->n_tools - 1))
        abort();
}

static void check_request(const struct openai_request *r, enum openai_kind kind) {
    if (r->kind != kind || (r->model != NULL && r->model[0] == '\0')) abort();
    if (kind == OPENAI_CHAT) {
        if (r->n_messages < 1 || r->prompts != NULL || r->n_prompts != 0) abort();
        for (int i = 0; i < r->n_messages; i++)
            if (r->messages[i].role == NULL || r->messages[i].content == NULL ||
                (r->messages[i].n_tool_calls > 0 && strcmp(r->messages[i].role, "assistant")) ||
                (!strcmp(r->messages[i].role, "tool") && !r->messages[i].tool_call_id))
                abort();
        check_tools(r);
    } else {
        if (r->n_messages != 0 || r->n_prompts < 1 ||
            r->n_prompts * r->n > OPENAI_REQUEST_CHOICES_MAX)
            abort();
        for (int p = 0; p < r->n_prompts; p++) {
            const struct openai_prompt *q = &r->prompts[p];
            if ((q->text == NULL) == (q->tokens == NULL)) abort();
            if ((q->tokens != NULL) != (q->n_tokens >= 1)) abort();
            for (int i = 0; q->tokens != NULL && i < q->n_tokens; i++)
                if (q->tokens[i] < 0) abort();
        }
    }
    if (!in(r->n_stops, 0, OPENAI_STOPS_MAX)) abort();
    for (int i = 0; i < r->n_stops; i++)
        if (r->stops[i] == NULL || r->stops[i][0] == '\0') abort();
    if (r->max_tokens != -1 && r->max_tokens < 1) abort();
    if (!in(r->temperature, 0, 2) || !in(r->top_p, 0, 1) || r->top_k < 0 || !in(r->min_p, 0, 1) ||
        !in(r->presence_penalty, -2, 2) || !in(r->frequency_penalty, -2, 2) ||
        !(r->repetition_penalty > 0) || !in(r->logprobs, 0, 1) ||
        !in(r->top_logprobs, 0, OPENAI_TOP_LOGPROBS_MAX) || !in(r->stream, 0, 1) ||
        !in(r->include_usage, 0, 1) || !in(r->has_seed, 0, 1))
        abort();
    if (r->include_usage && !r->stream) abort(); /* stream_options needs a stream */
}

/* A logprob from one input byte, including the values JSON cannot hold. */
static float logprob_of(uint8_t byte) {
    if (byte == 0) return -INFINITY;
    if (byte == 1) return NAN;
    return -(float)byte / 16.0f;
}

/* Cuts up to FUZZ_TOKENS tokens, each with n_top alternatives, from data. */
static int cut_tokens(const uint8_t *data, size_t size, int n_top, struct openai_token *tokens) {
    int n = 0;
    size_t at = 0;
    while (n < FUZZ_TOKENS && at < size) {
        struct openai_token *token = &tokens[n++];
        size_t length = data[at] % 5;
        if (length > size - at) length = size - at;
        token->text = (const char *)data + at;
        token->length = length;
        token->logprob = logprob_of(data[at]);
        token->n_top = n_top;
        for (int j = 0; j < n_top; j++) {
            size_t start = (at + (size_t)j * 3) % size, alt_length = (size - start) % 4;
            token->top[j] = (struct openai_alternative){(const char *)data + start, alt_length,
                                                        logprob_of(data[start])};
        }
        at += length + 1;
    }
    return n;
}

/* The text a response will carry: the first message or the first prompt. */
static const char *sample_text(const struct openai_request *r) {
    if (r->n_messages > 0) return r->messages[0].content;
    return r->n_prompts > 0 && r->prompts[0].text != NULL ? r->prompts[0].text : "";
}

/* A string member's value equals want (when want was valid UTF-8). */
static void check_text(const cJSON *holder, const char *key, const char *want) {
    if (!valid_utf8((const unsigned char *)want, strlen(want))) return;
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(holder, key);
    if (!cJSON_IsString(item) || strcmp(item->valuestring, want) != 0) abort();
}

static void build_responses(const struct openai_request *r, const uint8_t *data, size_t size) {
    struct openai_token tokens[FUZZ_TOKENS];
    int n_tokens = cut_tokens(data, size, r->top_logprobs, tokens);
    const char *text = sample_text(r);
    /* Without a model in the body the HTTP layer answers with the one it serves. */
    const char *model = r->model != NULL ? r->model : "served";
    struct openai_response response;
    openai_response_init(&response, r, r->kind == OPENAI_CHAT ? "chatcmpl-f0" : "cmpl-f0", 1);
    response.model = model;
    response.include_usage = r->include_usage;

    struct openai_result result = {
        text, strlen(text), OPENAI_FINISH_STOP, {7, n_tokens, 0}, n_tokens, 0, tokens, NULL};
    cJSON *root = check_body(openai_completion_json(&response, &result));
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    if (r->kind == OPENAI_CHAT)
        check_text(cJSON_GetObjectItemCaseSensitive(choice, "message"), "content", text);
    else
        check_text(choice, "text", text);
    check_text(root, "model", model);
    cJSON_Delete(root);

    struct openai_delta deltas[3] = {
        {1, "", 0, OPENAI_FINISH_NONE, 0, NULL, 0, NULL},
        {0, text, strlen(text), OPENAI_FINISH_NONE, n_tokens, tokens, 0, NULL},
        {0, NULL, 0, OPENAI_FINISH_LENGTH, 0, NULL, openai_text_chars(text, strlen(text)), NULL},
    };
    for (int i = 0; i < 3; i++) cJSON_Delete(check_body(openai_chunk_json(&response, &deltas[i])));
    struct openai_usage usage = {1, n_tokens, 0};
    cJSON_Delete(check_body(openai_usage_chunk_json(&response, &usage)));
    const char *ids[2] = {model, text};
    const int contexts[2] = {n_tokens, 0};
    cJSON_Delete(check_body(openai_models_json(ids, contexts, 2, 1)));
}

/* A Responses API body: refused with a one-line message and nothing owned,
 * or the chat request it amounts to, whose response object and events
 * build as valid JSON. */
static void check_responses_api(const uint8_t *data, size_t size) {
    struct openai_request request;
    struct openai_error error;
    if (openai_parse_responses((const char *)data, size, &request, &error) != 0) {
        if (request.model != NULL || request.messages != NULL || request.tools != NULL) abort();
        check_refusal(&error);
        return;
    }
    check_request(&request, OPENAI_CHAT);
    if (!request.responses) abort();
    struct openai_tool_call call = {"call_1", "f", "{\"a\":1}"};
    struct openai_responses_output o = {.id = "resp_1",
                                        .message_id = "msg_1",
                                        .model = request.model,
                                        .status = "completed",
                                        .has_message = 1,
                                        .text = sample_text(&request),
                                        .length = strlen(sample_text(&request)),
                                        .calls = &call,
                                        .n_calls = 1};
    for (int event = OPENAI_RESPONSES_CREATED; event <= OPENAI_RESPONSES_INCOMPLETE; event++) {
        char *json = openai_responses_event_json(&o, (enum openai_responses_event)event, event,
                                                 event == OPENAI_RESPONSES_ARGUMENTS_DONE, "d", 1);
        cJSON *back = json ? cJSON_Parse(json) : NULL;
        if (!back) abort();
        cJSON_Delete(back);
        free(json);
    }
    openai_request_free(&request);
}

/* A Messages API body (and a count_tokens one): refused with a one-line
 * message and nothing owned, or the chat request it amounts to, whose
 * message, events and error build as valid JSON. */
static void check_messages_api(const uint8_t *data, size_t size, int count_only) {
    struct openai_request request;
    struct openai_error error;
    if (openai_parse_messages((const char *)data, size, count_only, &request, &error) != 0) {
        if (request.model != NULL || request.messages != NULL || request.tools != NULL) abort();
        check_refusal(&error);
        char *json = openai_messages_error_json(&error);
        cJSON *back = json ? cJSON_Parse(json) : NULL;
        if (!back) abort();
        cJSON_Delete(back);
        free(json);
        return;
    }
    check_request(&request, OPENAI_CHAT);
    if (!request.anthropic || (!count_only && request.max_tokens < 1)) abort();
    struct openai_tool_call call = {"toolu_1", "f", "{\"a\":1}"};
    struct openai_messages_output o = {.id = "msg_1",
                                       .model = request.model,
                                       .has_text = 1,
                                       .text = sample_text(&request),
                                       .length = strlen(sample_text(&request)),
                                       .calls = &call,
                                       .n_calls = 1,
                                       .stop_reason = "tool_use"};
    for (int event = OPENAI_MESSAGES_START; event <= OPENAI_MESSAGES_STOP; event++) {
        char *json = openai_messages_event_json(&o, (enum openai_messages_event)event,
                                                event == OPENAI_MESSAGES_JSON_DELTA, "d", 1);
        cJSON *back = json ? cJSON_Parse(json) : NULL;
        if (!back) abort();
        cJSON_Delete(back);
        free(json);
    }
    openai_request_free(&request);
}

/* An embeddings body: refused with a one-line message and nothing owned,
 * or inputs within the limits, whose answer (vectors of 8 values, cut to
 * dimensions, as floats or base64) builds as valid JSON of one item each. */
static void check_embeddings_api(const uint8_t *data, size_t size) {
    struct openai_request request;
    struct openai_error error;
    if (openai_parse_embeddings((const char *)data, size, &request, &error) != 0) {
        if (request.model != NULL || request.prompts != NULL) abort();
        check_refusal(&error);
        return;
    }
    if (request.kind != OPENAI_EMBEDDING || request.n_prompts < 1 ||
        request.n_prompts > OPENAI_EMBEDDING_INPUTS || request.dimensions < 0)
        abort();
    for (int i = 0; i < request.n_prompts; i++) {
        const struct openai_prompt *p = &request.prompts[i];
        if (p->text ? !p->text[0] : p->n_tokens < 1) abort();
    }
    static const float values[8] = {1, -2, 0.5f, 0, 3e-8f, -1e9f, 7, 8};
    const float **vectors = malloc((size_t)request.n_prompts * sizeof(*vectors));
    if (!vectors) abort();
    for (int i = 0; i < request.n_prompts; i++) vectors[i] = values;
    struct openai_embeddings answer = {request.model ? request.model : "m",
                                       vectors,
                                       request.n_prompts,
                                       8,
                                       request.dimensions,
                                       request.base64,
                                       3};
    char *json = openai_embeddings_json(&answer);
    cJSON *back = json ? cJSON_Parse(json) : NULL;
    if (!back || cJSON_GetArraySize(cJSON_GetObjectItem(back, "data")) != request.n_prompts)
        abort();
    cJSON_Delete(back);
    free(json);
    free(vectors);
    openai_request_free(&request);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const enum openai_kind kinds[2] = {OPENAI_CHAT, OPENAI_COMPLETION};
    for (int k = 0; k < 2; k++) {
        struct openai_request request;
        struct openai_error error;
        if (openai_parse_request((const char *)data, size, kinds[k], &request, &error) != 0) {
            if (request.model != NULL || request.messages != NULL || request.prompts != NULL)
                abort();
            check_refusal(&error);
            continue;
        }
        check_request(&request, kinds[k]);
        check_fields(data, size, kinds[k]);
        build_responses(&request, data, size);
        openai_request_free(&request);
    }
    check_responses_api(data, size);
    check_messages_api(data, size, 0);
    check_messages_api(data, size, 1);
    check_embeddings_api(data, size);
    return 0;
}
