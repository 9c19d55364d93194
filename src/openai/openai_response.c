/* openai_response.c -- builds the JSON bodies the gateway answers with.
 *
 * Each builder assembles a cJSON tree, so cJSON does the escaping, and
 * prints it without whitespace. Texts from the model are bytes that need
 * not be valid UTF-8 (a token can end inside a character), and cJSON copies
 * bytes as they are; so every text is first copied with ill-formed
 * sequences and NUL bytes replaced by U+FFFD, which keeps each body valid
 * JSON for strict parsers. Log-probabilities are printed with the fewest
 * digits that read back as the same float ("-0.123", not
 * "-0.12300000339746475"). */
#include "openai/openai.h"
#include "protocol/protocol.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------- text ----------------------------------- */

/* Copies length bytes of text to out (room for 3 * length + 1 bytes) as
 * NUL-terminated valid UTF-8 without NUL bytes. */
static void utf8_sanitize(const char *text, size_t length, char *out) {
    const unsigned char *s = (const unsigned char *)text;
    size_t used = 0;
    for (size_t i = 0; i < length;) {
        int n = utf8_sequence(s + i, length - i);
        if (n > 0 && s[i] != '\0') {
            memcpy(out + used, s + i, (size_t)n);
            used += (size_t)n;
            i += (size_t)n;
        } else {
            memcpy(out + used, "\xEF\xBF\xBD", 3);
            used += 3;
            i += (size_t)(n > 0 ? n : -n);
        }
    }
    out[used] = '\0';
}

/* Returns make(text made valid UTF-8, context), using a stack buffer for
 * short texts so a streamed token costs no extra allocation; NULL if
 * memory runs out. */
static cJSON *with_sanitized(const char *text, size_t length,
                             cJSON *(*make)(const char *clean, void *context), void *context) {
    char local[512];
    if (text == NULL) length = 0;
    if (length > (SIZE_MAX - 1) / 3) return NULL;
    size_t size = 3 * length + 1;
    char *clean = size <= sizeof(local) ? local : malloc(size);
    if (clean == NULL) return NULL;
    utf8_sanitize(text, length, clean);
    cJSON *item = make(clean, context);
    if (clean != local) free(clean);
    return item;
}

static cJSON *make_string(const char *clean, void *context) {
    (void)context;
    return cJSON_CreateString(clean);
}

/* A JSON string of length bytes of text. */
static cJSON *json_text(const char *text, size_t length) {
    return with_sanitized(text, length, make_string, NULL);
}

cJSON *openai_json_text(const char *text, size_t length) {
    return json_text(text, length);
}

/* A JSON string of a NUL-terminated C string (NULL gives ""). */
static cJSON *json_string(const char *text) {
    return json_text(text, text != NULL ? strlen(text) : 0);
}

long openai_text_chars(const char *text, size_t length) {
    long chars = 0;
    for (size_t i = 0; i < length; i++) chars += ((unsigned char)text[i] & 0xC0) != 0x80;
    return chars;
}

/* ------------------------------ numbers --------------------------------- */

/* A log-probability as a JSON number with the shortest decimal form that
 * reads back as the same float; -inf and NaN become OPENAI_LOGPROB_FLOOR,
 * since JSON has no infinity. The digits go in as raw JSON: printing them
 * through a double again would cost more than the rest of a chunk. */
static cJSON *json_logprob(float logprob) {
    char digits[32];
    if (isnan(logprob) || logprob < OPENAI_LOGPROB_FLOOR) logprob = (float)OPENAI_LOGPROB_FLOOR;
    /* %g drops trailing zeros, so 6 digits already give the shortest form
     * of any float that has one of 6 digits or fewer; 9 always round-trip. */
    for (int precision = 6; precision <= 9; precision++) {
        snprintf(digits, sizeof(digits), "%.*g", precision, (double)logprob);
        if (strtof(digits, NULL) == logprob) break;
    }
    return cJSON_CreateRaw(digits);
}

/* The JSON array of the length bytes of text as numbers 0..255, written
 * directly (raw JSON) for the same reason. */
static cJSON *json_bytes(const char *text, size_t length) {
    char local[256];
    if (text == NULL) length = 0;
    if (length > (SIZE_MAX - 3) / 4) return NULL;
    size_t size = 4 * length + 3; /* "[" + up to "255," per byte + "]" + NUL */
    char *out = size <= sizeof(local) ? local : malloc(size);
    if (out == NULL) return NULL;
    size_t used = 0;
    out[used++] = '[';
    for (size_t i = 0; i < length; i++) {
        unsigned byte = (unsigned char)text[i];
        if (i > 0) out[used++] = ',';
        if (byte >= 100) out[used++] = (char)('0' + byte / 100);
        if (byte >= 10) out[used++] = (char)('0' + byte / 10 % 10);
        out[used++] = (char)('0' + byte % 10);
    }
    out[used++] = ']';
    out[used] = '\0';
    cJSON *item = cJSON_CreateRaw(out);
    if (out != local) free(out);
    return item;
}

/* ------------------------------ building -------------------------------- */

/* Adds item to parent (an object under key, or an array when key is NULL;
 * keys are string literals, not copied) and returns it. If item or parent
 * is NULL, or adding fails, item is deleted, *failed set, NULL returned:
 * so a builder can go on adding after a failed allocation and check once. */
cJSON *openai_json_add(cJSON *parent, const char *key, cJSON *item, int *failed) {
    int added = 0;
    if (item != NULL && parent != NULL)
        added = key != NULL ? cJSON_AddItemToObjectCS(parent, key, item)
                            : cJSON_AddItemToArray(parent, item);
    if (!added) {
        cJSON_Delete(item);
        *failed = 1;
        return NULL;
    }
    return item;
}

/* The printed tree (NULL if anything failed); root is deleted. */
static char *json_print(cJSON *root, int failed) {
    char *text = failed || root == NULL ? NULL : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

static cJSON *json_finish_reason(enum openai_finish finish) {
    switch (finish) {
    case OPENAI_FINISH_STOP:
        return cJSON_CreateString("stop");
    case OPENAI_FINISH_LENGTH:
        return cJSON_CreateString("length");
    case OPENAI_FINISH_TOOL_CALLS:
        return cJSON_CreateString("tool_calls");
    default:
        return cJSON_CreateNull();
    }
}

static int clamp_top(int n_top) {
    if (n_top < 0) return 0;
    return n_top > OPENAI_TOP_LOGPROBS_MAX ? OPENAI_TOP_LOGPROBS_MAX : n_top;
}

/* {"id","object","created","model"}: the head of every response body. */
static cJSON *json_head(const struct openai_response *response, const char *object, int *failed) {
    cJSON *root = cJSON_CreateObject();
    if (root == NULL) *failed = 1;
    openai_json_add(root, "id", json_string(response->id), failed);
    openai_json_add(root, "object", cJSON_CreateString(object), failed);
    openai_json_add(root, "created", cJSON_CreateNumber((double)response->created), failed);
    openai_json_add(root, "model", json_string(response->model), failed);
    return root;
}

static cJSON *json_usage(const struct openai_usage *usage, int *failed) {
    cJSON *object = cJSON_CreateObject();
    openai_json_add(object, "prompt_tokens", cJSON_CreateNumber(usage->prompt_tokens), failed);
    openai_json_add(object, "completion_tokens", cJSON_CreateNumber(usage->completion_tokens),
                    failed);
    openai_json_add(object, "total_tokens",
                    cJSON_CreateNumber((double)usage->prompt_tokens + usage->completion_tokens),
                    failed);
    cJSON *details = cJSON_CreateObject();
    openai_json_add(details, "cached_tokens", cJSON_CreateNumber(usage->cached_tokens), failed);
    openai_json_add(object, "prompt_tokens_details", details, failed);
    return object;
}

/* -------------------------- logprobs: chat shape ------------------------ */

/* {"token","logprob","bytes"}: bytes are the token's exact bytes. */
static cJSON *chat_token_json(const char *text, size_t length, float logprob, int *failed) {
    cJSON *entry = cJSON_CreateObject();
    openai_json_add(entry, "token", json_text(text, length), failed);
    openai_json_add(entry, "logprob", json_logprob(logprob), failed);
    openai_json_add(entry, "bytes", json_bytes(text, length), failed);
    return entry;
}

/* {"content":[{token, logprob, bytes, top_logprobs:[...]}, ...],"refusal":null}. */
static cJSON *chat_logprobs_json(const struct openai_token *tokens, int n_tokens, int *failed) {
    cJSON *logprobs = cJSON_CreateObject();
    cJSON *content = openai_json_add(logprobs, "content", cJSON_CreateArray(), failed);
    for (int i = 0; i < n_tokens; i++) {
        const struct openai_token *token = &tokens[i];
        cJSON *entry = openai_json_add(
            content, NULL, chat_token_json(token->text, token->length, token->logprob, failed),
            failed);
        cJSON *top = openai_json_add(entry, "top_logprobs", cJSON_CreateArray(), failed);
        for (int j = 0; j < clamp_top(token->n_top); j++) {
            const struct openai_alternative *alt = &token->top[j];
            openai_json_add(top, NULL,
                            chat_token_json(alt->text, alt->length, alt->logprob, failed), failed);
        }
    }
    openai_json_add(logprobs, "refusal", cJSON_CreateNull(), failed);
    return logprobs;
}

/* ----------------------- logprobs: completions shape -------------------- */

/* What add_top_entry hands to with_sanitized. */
struct top_entry {
    cJSON *top;    /* the {text: logprob} object */
    float logprob; /* the value to add */
    int *failed;   /* set when memory runs out */
};

/* Adds clean: logprob unless clean is already a key (two tokens can print
 * alike, as U+FFFD; the first, more likely, one is kept). Returns top. */
static cJSON *add_top_key(const char *clean, void *context) {
    struct top_entry *entry = context;
    if (cJSON_GetObjectItemCaseSensitive(entry->top, clean) != NULL) return entry->top;
    cJSON *value = json_logprob(entry->logprob);
    if (value == NULL || !cJSON_AddItemToObject(entry->top, clean, value)) {
        cJSON_Delete(value);
        *entry->failed = 1;
    }
    return entry->top;
}

static void add_top_entry(cJSON *top, const char *text, size_t length, float logprob, int *failed) {
    struct top_entry entry = {top, logprob, failed};
    if (top == NULL || with_sanitized(text, length, add_top_key, &entry) == NULL) *failed = 1;
}

/* {"tokens","token_logprobs","top_logprobs","text_offset"}: one entry per
 * token in each; top_logprobs[i] maps the alternatives' texts to their
 * logprobs and always holds the sampled token too (so up to k+1 keys). */
static cJSON *completion_logprobs_json(const struct openai_token *tokens, int n_tokens,
                                       long text_offset, int *failed) {
    cJSON *logprobs = cJSON_CreateObject();
    cJSON *texts = openai_json_add(logprobs, "tokens", cJSON_CreateArray(), failed);
    cJSON *values = openai_json_add(logprobs, "token_logprobs", cJSON_CreateArray(), failed);
    cJSON *tops = openai_json_add(logprobs, "top_logprobs", cJSON_CreateArray(), failed);
    cJSON *offsets = openai_json_add(logprobs, "text_offset", cJSON_CreateArray(), failed);
    for (int i = 0; i < n_tokens; i++) {
        const struct openai_token *token = &tokens[i];
        openai_json_add(texts, NULL, json_text(token->text, token->length), failed);
        openai_json_add(values, NULL, json_logprob(token->logprob), failed);
        cJSON *top = openai_json_add(tops, NULL, cJSON_CreateObject(), failed);
        for (int j = 0; j < clamp_top(token->n_top); j++)
            add_top_entry(top, token->top[j].text, token->top[j].length, token->top[j].logprob,
                          failed);
        add_top_entry(top, token->text, token->length, token->logprob, failed);
        openai_json_add(offsets, NULL, cJSON_CreateNumber((double)text_offset), failed);
        text_offset += openai_text_chars(token->text, token->length);
    }
    return logprobs;
}

/* ------------------------------- bodies --------------------------------- */

void openai_response_init(struct openai_response *response, const struct openai_request *request,
                          const char *id, int64_t created) {
    response->kind = request->kind;
    response->id = id;
    response->model = request->model;
    response->created = created;
    response->logprobs = request->logprobs;
    response->include_usage = request->stream && request->include_usage;
}

/* {"id", "type": "function", "function": {"name", "arguments"}}: a call
 * whole (id and name NULL: left out, as in a streamed call's later pieces). */
static cJSON *tool_call_json(const char *id, const char *name, const char *arguments, int *failed) {
    cJSON *call = cJSON_CreateObject();
    if (id) openai_json_add(call, "id", json_string(id), failed);
    if (id) openai_json_add(call, "type", cJSON_CreateString("function"), failed);
    cJSON *function = openai_json_add(call, "function", cJSON_CreateObject(), failed);
    if (name) openai_json_add(function, "name", json_string(name), failed);
    openai_json_add(function, "arguments", json_string(arguments ? arguments : ""), failed);
    return call;
}

/* [{"id", "type", "function"}, ...]: an answer's calls. */
static cJSON *tool_calls_json(const struct openai_tool_call *calls, int n, int *failed) {
    cJSON *array = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        openai_json_add(array, NULL,
                        tool_call_json(calls[i].id, calls[i].name, calls[i].arguments, failed),
                        failed);
    return array;
}

/* One choice of a chat.completion: its message (content null when it
 * only calls tools), logprobs and finish_reason. */
static cJSON *chat_choice_json(const struct openai_response *response,
                               const struct openai_result *result, int index, int *failed) {
    cJSON *choice = cJSON_CreateObject();
    openai_json_add(choice, "index", cJSON_CreateNumber(index), failed);
    cJSON *message = openai_json_add(choice, "message", cJSON_CreateObject(), failed);
    openai_json_add(message, "role", cJSON_CreateString("assistant"), failed);
    openai_json_add(message, "content",
                    result->n_tool_calls > 0 && result->length == 0
                        ? cJSON_CreateNull()
                        : json_text(result->text, result->length),
                    failed);
    if (result->n_tool_calls > 0)
        openai_json_add(message, "tool_calls",
                        tool_calls_json(result->tool_calls, result->n_tool_calls, failed), failed);
    openai_json_add(message, "refusal", cJSON_CreateNull(), failed);
    openai_json_add(choice, "logprobs",
                    response->logprobs
                        ? chat_logprobs_json(result->tokens, result->n_tokens, failed)
                        : cJSON_CreateNull(),
                    failed);
    openai_json_add(choice, "finish_reason", json_finish_reason(result->finish), failed);
    return choice;
}

/* One choice of a text_completion: its text, logprobs and finish_reason. */
static cJSON *text_choice_json(const struct openai_response *response,
                               const struct openai_result *result, int index, int *failed) {
    cJSON *choice = cJSON_CreateObject();
    openai_json_add(choice, "text", json_text(result->text, result->length), failed);
    openai_json_add(choice, "index", cJSON_CreateNumber(index), failed);
    openai_json_add(choice, "logprobs",
                    response->logprobs
                        ? completion_logprobs_json(result->tokens, result->n_tokens, 0, failed)
                        : cJSON_CreateNull(),
                    failed);
    openai_json_add(choice, "finish_reason", json_finish_reason(result->finish), failed);
    return choice;
}

char *openai_choices_json(const struct openai_response *response,
                          const struct openai_result *results, int n_results,
                          const struct openai_usage *usage) {
    int failed = 0, chat = response->kind == OPENAI_CHAT;
    cJSON *root = json_head(response, chat ? "chat.completion" : "text_completion", &failed);
    cJSON *choices = openai_json_add(root, "choices", cJSON_CreateArray(), &failed);
    for (int i = 0; i < n_results; i++)
        openai_json_add(choices, NULL,
                        chat ? chat_choice_json(response, &results[i], i, &failed)
                             : text_choice_json(response, &results[i], i, &failed),
                        &failed);
    openai_json_add(root, "usage", json_usage(usage, &failed), &failed);
    return json_print(root, failed);
}

char *openai_completion_json(const struct openai_response *response,
                             const struct openai_result *result) {
    return openai_choices_json(response, result, 1, &result->usage);
}

/* delta.tool_calls of a chunk: [{"index", "id", "type", "function":
 * {"name", "arguments"}}] on a call's first piece, [{"index", "function":
 * {"arguments"}}] on the others. */
static cJSON *call_delta_json(const struct openai_call_delta *call, int *failed) {
    cJSON *array = cJSON_CreateArray();
    cJSON *item = openai_json_add(array, NULL, cJSON_CreateObject(), failed);
    openai_json_add(item, "index", cJSON_CreateNumber(call->index), failed);
    if (call->id) openai_json_add(item, "id", json_string(call->id), failed);
    if (call->id) openai_json_add(item, "type", cJSON_CreateString("function"), failed);
    cJSON *function = openai_json_add(item, "function", cJSON_CreateObject(), failed);
    if (call->name) openai_json_add(function, "name", json_string(call->name), failed);
    openai_json_add(function, "arguments", json_string(call->arguments ? call->arguments : ""),
                    failed);
    return array;
}

/* The delta of a chat chunk: role on the first, content unless this is a
 * final chunk without text (whose delta is {}) or a piece of a tool call
 * (content null on the first chunk, as OpenAI sends it). */
static cJSON *chat_delta_json(const struct openai_delta *delta, int *failed) {
    cJSON *object = cJSON_CreateObject();
    if (delta->first) openai_json_add(object, "role", cJSON_CreateString("assistant"), failed);
    if (delta->call) {
        if (delta->first) openai_json_add(object, "content", cJSON_CreateNull(), failed);
        openai_json_add(object, "tool_calls", call_delta_json(delta->call, failed), failed);
    } else if (delta->first || delta->length > 0 || delta->finish == OPENAI_FINISH_NONE) {
        openai_json_add(object, "content", json_text(delta->text, delta->length), failed);
    }
    return object;
}

char *openai_choice_chunk_json(const struct openai_response *response,
                               const struct openai_delta *delta, int index) {
    int failed = 0;
    int chat = response->kind == OPENAI_CHAT;
    cJSON *root = json_head(response, chat ? "chat.completion.chunk" : "text_completion", &failed);
    cJSON *choices = openai_json_add(root, "choices", cJSON_CreateArray(), &failed);
    cJSON *choice = openai_json_add(choices, NULL, cJSON_CreateObject(), &failed);
    if (chat) {
        openai_json_add(choice, "index", cJSON_CreateNumber(index), &failed);
        openai_json_add(choice, "delta", chat_delta_json(delta, &failed), &failed);
    } else {
        openai_json_add(choice, "text", json_text(delta->text, delta->length), &failed);
        openai_json_add(choice, "index", cJSON_CreateNumber(index), &failed);
    }
    cJSON *logprobs = NULL;
    if (response->logprobs && delta->n_tokens > 0)
        logprobs = chat ? chat_logprobs_json(delta->tokens, delta->n_tokens, &failed)
                        : completion_logprobs_json(delta->tokens, delta->n_tokens,
                                                   delta->text_offset, &failed);
    else
        logprobs = cJSON_CreateNull();
    openai_json_add(choice, "logprobs", logprobs, &failed);
    openai_json_add(choice, "finish_reason", json_finish_reason(delta->finish), &failed);
    if (response->include_usage) openai_json_add(root, "usage", cJSON_CreateNull(), &failed);
    return json_print(root, failed);
}

char *openai_chunk_json(const struct openai_response *response, const struct openai_delta *delta) {
    return openai_choice_chunk_json(response, delta, 0);
}

char *openai_usage_chunk_json(const struct openai_response *response,
                              const struct openai_usage *usage) {
    int failed = 0;
    const char *object =
        response->kind == OPENAI_CHAT ? "chat.completion.chunk" : "text_completion";
    cJSON *root = json_head(response, object, &failed);
    openai_json_add(root, "choices", cJSON_CreateArray(), &failed);
    openai_json_add(root, "usage", json_usage(usage, &failed), &failed);
    return json_print(root, failed);
}

/* {"id","object":"model","created","owned_by":"lockstep"}, and which
 * lockstep serves it ("lockstep_version", "lockstep_commit"). */
static cJSON *model_object(const char *id, int context_length, int64_t created, int *failed) {
    cJSON *model = cJSON_CreateObject();
    openai_json_add(model, "id", json_string(id), failed);
    openai_json_add(model, "object", cJSON_CreateString("model"), failed);
    openai_json_add(model, "created", cJSON_CreateNumber((double)created), failed);
    openai_json_add(model, "owned_by", cJSON_CreateString("lockstep"), failed);
    openai_json_add(model, "lockstep_version", cJSON_CreateString(version_string()), failed);
    openai_json_add(model, "lockstep_commit", cJSON_CreateString(version_commit()), failed);
    if (context_length > 0) {
        openai_json_add(model, "context_length", cJSON_CreateNumber(context_length), failed);
        openai_json_add(model, "max_model_len", cJSON_CreateNumber(context_length), failed);
    }
    return model;
}

char *openai_models_json(const char *const *ids, const int *context_lengths, int n_ids,
                         int64_t created) {
    int failed = 0;
    cJSON *root = cJSON_CreateObject();
    openai_json_add(root, "object", cJSON_CreateString("list"), &failed);
    cJSON *data = openai_json_add(root, "data", cJSON_CreateArray(), &failed);
    for (int i = 0; i < n_ids; i++)
        openai_json_add(
            data, NULL,
            model_object(ids[i], context_lengths ? context_lengths[i] : 0, created, &failed),
            &failed);
    return json_print(root, failed);
}

char *openai_model_json(const char *id, int context_length, int64_t created) {
    int failed = 0;
    return json_print(model_object(id, context_length, created, &failed), failed);
}

char *openai_error_json(const struct openai_error *e) {
    int failed = 0;
    size_t param_length = strnlen(e->param, sizeof(e->param));
    cJSON *root = cJSON_CreateObject();
    cJSON *error = openai_json_add(root, "error", cJSON_CreateObject(), &failed);
    openai_json_add(error, "message",
                    json_text(e->message, strnlen(e->message, sizeof(e->message))), &failed);
    openai_json_add(error, "type",
                    e->type != NULL ? cJSON_CreateString(e->type) : cJSON_CreateNull(), &failed);
    openai_json_add(error, "param",
                    param_length > 0 ? json_text(e->param, param_length) : cJSON_CreateNull(),
                    &failed);
    openai_json_add(error, "code",
                    e->code != NULL ? cJSON_CreateString(e->code) : cJSON_CreateNull(), &failed);
    return json_print(root, failed);
}
