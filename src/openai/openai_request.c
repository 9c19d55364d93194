/* openai_request.c -- parses and validates OpenAI request bodies.
 *
 * The body is parsed with cJSON, then every field the gateway uses is read
 * with a type and a range check; the first problem found becomes a 400 error
 * in the OpenAI shape whose param names the field ("messages[2].role"), so a
 * bad request is refused without touching the runner (DESIGN.md I6). JSON
 * null counts as absent everywhere, because clients send "max_tokens": null
 * to mean "not set". Before any field is read, every top-level field is
 * looked up in request_fields: a client must never get a 200 that quietly
 * ignored something it asked for, so a field the endpoint does not have is
 * refused as OpenAI refuses it, and one lockstep does not implement is
 * refused unless its value asks for nothing. */
#include "openai/openai.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID_REQUEST "invalid_request_error"

/* Roles a chat message may have: what chat templates render. */
static const char *const openai_roles[] = {"system", "developer", "user", "assistant", "tool"};

static void set_error_v(struct openai_error *e, int status, const char *type, const char *param,
                        const char *code, const char *format, va_list args) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof(e->param), "%s", param != NULL ? param : "");
    vsnprintf(e->message, sizeof(e->message), format, args);
}

void openai_error_set(struct openai_error *e, int status, const char *type, const char *param,
                      const char *code, const char *format, ...) {
    va_list args;
    va_start(args, format);
    set_error_v(e, status, type, param, code, format, args);
    va_end(args);
}

/* A 400 invalid_request_error about param; returns -1 for the caller to pass on. */
__attribute__((format(printf, 3, 4))) static int invalid(struct openai_error *e, const char *param,
                                                         const char *format, ...) {
    va_list args;
    va_start(args, format);
    set_error_v(e, 400, INVALID_REQUEST, param, NULL, format, args);
    va_end(args);
    return -1;
}

static int out_of_memory(struct openai_error *e) {
    openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory while parsing the request");
    return -1;
}

/* Writes a client's string into out for an error message: about its first
 * 40 bytes, cut between characters, with quotes, backslashes and control
 * characters escaped as in JSON so that the message stays one line. */
static const char *printable(const char *value, char *out, size_t size) {
    const unsigned char *s = (const unsigned char *)value;
    size_t used = 0;
    for (size_t i = 0; s[i] != '\0'; i++) {
        int continuation = (s[i] & 0xC0) == 0x80;
        /* Room is kept so that a character already begun is never cut. */
        if (continuation ? used + 8 >= size : i >= 40 || used + 12 >= size) {
            snprintf(out + used, size - used, "...");
            return out;
        }
        if (s[i] == '"' || s[i] == '\\')
            used += (size_t)snprintf(out + used, size - used, "\\%c", s[i]);
        else if (s[i] < 0x20 || s[i] == 0x7F)
            used += (size_t)snprintf(out + used, size - used, "\\u%04x", s[i]);
        else
            out[used++] = (char)s[i];
    }
    out[used] = '\0';
    return out;
}

/* The value of key in object, or NULL when it is absent or null. */
static const cJSON *field(const cJSON *object, const char *key) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
    return cJSON_IsNull(item) ? NULL : item;
}

/* The checks below read one value, item (NULL: absent, *out keeps its
 * default), and name it param in errors. Each returns 0 or -1. */

static int check_bool(const cJSON *item, const char *param, int *out, struct openai_error *e) {
    if (item == NULL) return 0;
    if (!cJSON_IsBool(item)) return invalid(e, param, "%s must be a boolean", param);
    *out = cJSON_IsTrue(item) ? 1 : 0;
    return 0;
}

/* A number in [lo, hi]. */
static int check_number(const cJSON *item, const char *param, double lo, double hi, float *out,
                        struct openai_error *e) {
    if (item == NULL) return 0;
    if (!cJSON_IsNumber(item)) return invalid(e, param, "%s must be a number", param);
    double value = item->valuedouble;
    if (!(value >= lo && value <= hi))
        return invalid(e, param, "%s must be between %g and %g, got %g", param, lo, hi, value);
    *out = (float)value;
    return 0;
}

/* A whole number in [lo, hi], as a double (cJSON keeps numbers as doubles). */
static int check_integer(const cJSON *item, const char *param, double lo, double hi, double *out,
                         struct openai_error *e) {
    if (item == NULL) return 0;
    if (!cJSON_IsNumber(item) || item->valuedouble != floor(item->valuedouble))
        return invalid(e, param, "%s must be an integer", param);
    double value = item->valuedouble;
    if (!(value >= lo && value <= hi))
        return invalid(e, param, "%s must be between %.15g and %.15g, got %.15g", param, lo, hi,
                       value);
    *out = value;
    return 0;
}

static int check_int(const cJSON *item, const char *param, int lo, int hi, int *out,
                     struct openai_error *e) {
    double value = 0;
    if (item == NULL) return 0;
    if (check_integer(item, param, lo, hi, &value, e) != 0) return -1;
    *out = (int)value;
    return 0;
}

static char *copy_string(const char *text, struct openai_error *e) {
    char *copy = strdup(text);
    if (copy == NULL) out_of_memory(e);
    return copy;
}

/* A string, copied to *out. */
static int check_string(const cJSON *item, const char *param, char **out, struct openai_error *e) {
    if (item == NULL) return 0;
    if (!cJSON_IsString(item)) return invalid(e, param, "%s must be a string", param);
    *out = copy_string(item->valuestring, e);
    return *out != NULL ? 0 : -1;
}

/* ----------------------------- the JSON body ----------------------------- */

/* ------------------------------ the fields ------------------------------ */

/* What the parser does with a top-level field. */
enum field_use {
    FIELD_READ,   /* read and honoured by a parse_* function below */
    FIELD_IGNORE, /* accepted and ignored: it cannot change the answer */
    FIELD_REFUSE, /* not implemented: refused unless nothing(value) */
};

/* One top-level field of a request body. */
struct request_field {
    const char *name;
    int kinds; /* the endpoints that have it: a mask of enum openai_kind */
    enum field_use use;
    int (*nothing)(const cJSON *value); /* FIELD_REFUSE: 1 if value asks for nothing */
    const char *refusal;                /* FIELD_REFUSE: the error message after the name */
};

static int is_string_value(const cJSON *value, const char *want) {
    return cJSON_IsString(value) && strcmp(value->valuestring, want) == 0;
}

static int is_empty_array(const cJSON *value) {
    return cJSON_IsArray(value) && value->child == NULL;
}

static int is_empty_string(const cJSON *value) {
    return is_string_value(value, "");
}

static int is_one(const cJSON *value) {
    return cJSON_IsNumber(value) && value->valuedouble == 1;
}

/* "none", or "auto" with no functions to choose from (functions are refused). */
static int is_no_call(const cJSON *value) {
    return is_string_value(value, "none") || is_string_value(value, "auto");
}

/* ["text"]: the one output modality there is. */
static int is_text_modality(const cJSON *value) {
    return cJSON_IsArray(value) && cJSON_GetArraySize(value) == 1 &&
           is_string_value(value->child, "text");
}

static int never(const cJSON *value) {
    (void)value;
    return 0;
}

#define CHAT OPENAI_CHAT
#define CMPL OPENAI_COMPLETION
#define BOTH (OPENAI_CHAT | OPENAI_COMPLETION)

/* Every field either endpoint accepts. A field missing here is refused as
 * unrecognized, so a new parse_* function must add its field. The ignored
 * ones are OpenAI's fields that only label, store, bill or route a request;
 * the refused ones are OpenAI's fields
 * that would change the answer. */
static const struct request_field request_fields[] = {
    {"model", BOTH, FIELD_READ, NULL, NULL},
    {"messages", CHAT, FIELD_READ, NULL, NULL},
    {"prompt", CMPL, FIELD_READ, NULL, NULL},
    {"stream", BOTH, FIELD_READ, NULL, NULL},
    {"stream_options", BOTH, FIELD_READ, NULL, NULL},
    {"max_tokens", BOTH, FIELD_READ, NULL, NULL},
    {"max_completion_tokens", CHAT, FIELD_READ, NULL, NULL},
    {"temperature", BOTH, FIELD_READ, NULL, NULL},
    {"top_p", BOTH, FIELD_READ, NULL, NULL},
    {"top_k", BOTH, FIELD_READ, NULL, NULL},
    {"min_p", BOTH, FIELD_READ, NULL, NULL},
    {"presence_penalty", BOTH, FIELD_READ, NULL, NULL},
    {"frequency_penalty", BOTH, FIELD_READ, NULL, NULL},
    {"repetition_penalty", BOTH, FIELD_READ, NULL, NULL},
    {"ignore_eos", BOTH, FIELD_READ, NULL, NULL},
    {"seed", BOTH, FIELD_READ, NULL, NULL},
    {"stop", BOTH, FIELD_READ, NULL, NULL},
    {"logprobs", BOTH, FIELD_READ, NULL, NULL},
    {"top_logprobs", CHAT, FIELD_READ, NULL, NULL},
    {"n", BOTH, FIELD_READ, NULL, NULL},
    {"echo", CMPL, FIELD_READ, NULL, NULL},
    {"logit_bias", BOTH, FIELD_READ, NULL, NULL},
    {"grammar", BOTH, FIELD_READ, NULL, NULL},
    {"response_format", BOTH, FIELD_READ, NULL, NULL},
    {"tools", CHAT, FIELD_READ, NULL, NULL},
    {"tool_choice", CHAT, FIELD_READ, NULL, NULL},
    {"parallel_tool_calls", CHAT, FIELD_READ, NULL, NULL},

    {"user", BOTH, FIELD_IGNORE, NULL, NULL},
    {"safety_identifier", CHAT, FIELD_IGNORE, NULL, NULL},
    {"metadata", CHAT, FIELD_IGNORE, NULL, NULL},
    {"store", CHAT, FIELD_IGNORE, NULL, NULL},
    {"service_tier", CHAT, FIELD_IGNORE, NULL, NULL},
    {"prompt_cache_key", CHAT, FIELD_IGNORE, NULL, NULL},

    {"functions", CHAT, FIELD_REFUSE, is_empty_array,
     "is not supported: lockstep does not call functions (omit it, or send [])"},
    {"function_call", CHAT, FIELD_REFUSE, is_no_call,
     "is not supported: lockstep does not call functions (only \"none\" and \"auto\" are "
     "accepted)"},
    {"best_of", CMPL, FIELD_REFUSE, is_one, "is not supported (only best_of=1 is accepted)"},
    {"suffix", CMPL, FIELD_REFUSE, is_empty_string,
     "is not supported: text is only appended, never inserted (only \"\" is accepted)"},
    {"modalities", CHAT, FIELD_REFUSE, is_text_modality,
     "is not supported: answers are text (only [\"text\"] is accepted)"},
    {"audio", CHAT, FIELD_REFUSE, never, "is not supported: answers are text"},
    {"prediction", CHAT, FIELD_REFUSE, never, "is not supported (no predicted outputs)"},
    {"web_search_options", CHAT, FIELD_REFUSE, never,
     "is not supported: lockstep does not search the web"},
    {"reasoning_effort", CHAT, FIELD_REFUSE, never,
     "is not supported: lockstep does not steer reasoning"},
    {"verbosity", CHAT, FIELD_REFUSE, never, "is not supported: lockstep does not steer verbosity"},
};

#define N_REQUEST_FIELDS ((int)(sizeof(request_fields) / sizeof(request_fields[0])))
_Static_assert(N_REQUEST_FIELDS <= 64, "check_fields marks the fields seen in 64 bits");

/* The row of name among the fields of the kind endpoint, or NULL. */
static const struct request_field *find_field(const char *name, int kind) {
    for (int i = 0; i < N_REQUEST_FIELDS; i++)
        if ((request_fields[i].kinds & kind) && strcmp(request_fields[i].name, name) == 0)
            return &request_fields[i];
    return NULL;
}

/* OpenAI's refusal of a field it does not know, and where the field belongs
 * when it belongs to the other endpoint. */
static int unrecognized(const char *name, enum openai_kind kind, struct openai_error *e) {
    int other = kind == OPENAI_CHAT ? OPENAI_COMPLETION : OPENAI_CHAT;
    char got[96];
    printable(name, got, sizeof(got));
    if (find_field(name, other) != NULL)
        return invalid(e, name, "Unrecognized request argument supplied: %s (it is a field of %s)",
                       got, other == OPENAI_CHAT ? "/v1/chat/completions" : "/v1/completions");
    return invalid(e, name, "Unrecognized request argument supplied: %s", got);
}

/* Every top-level field must belong to the endpoint, appear once (the
 * readers below would see only the first), and, if lockstep does not
 * implement it, ask for nothing. A null value is absent, so an unknown
 * field set to null passes. */
static int check_fields(const cJSON *root, enum openai_kind kind, struct openai_error *e) {
    uint64_t seen = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        const struct request_field *f = find_field(item->string, (int)kind);
        if (f == NULL) {
            if (cJSON_IsNull(item)) continue;
            return unrecognized(item->string, kind, e);
        }
        uint64_t bit = (uint64_t)1 << (f - request_fields);
        if (seen & bit) return invalid(e, f->name, "%s is given more than once", f->name);
        seen |= bit;
        if (f->use == FIELD_REFUSE && !cJSON_IsNull(item) && !f->nothing(item))
            return invalid(e, f->name, "%s %s", f->name, f->refusal);
    }
    return 0;
}

/* ------------------------------- messages ------------------------------- */

/* Concatenates the text of a content array: [{"type":"text","text":...}, ...]. */
static int parse_content_parts(const cJSON *parts, int index, char **out, struct openai_error *e) {
    char param[64];
    size_t total = 0;
    int j = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, parts) {
        snprintf(param, sizeof(param), "messages[%d].content[%d]", index, j);
        if (!cJSON_IsObject(part)) return invalid(e, param, "%s must be an object", param);
        const cJSON *type = field(part, "type"), *text = field(part, "text");
        snprintf(param, sizeof(param), "messages[%d].content[%d].type", index, j);
        if (!cJSON_IsString(type)) return invalid(e, param, "%s must be a string", param);
        if (strcmp(type->valuestring, "text") != 0) {
            char got[96];
            return invalid(e, param,
                           "%s must be \"text\" (only text content is supported), got \"%s\"",
                           param, printable(type->valuestring, got, sizeof(got)));
        }
        snprintf(param, sizeof(param), "messages[%d].content[%d].text", index, j);
        if (!cJSON_IsString(text)) return invalid(e, param, "%s must be a string", param);
        total += strlen(text->valuestring);
        j++;
    }
    char *content = malloc(total + 1);
    if (content == NULL) return out_of_memory(e);
    size_t used = 0;
    cJSON_ArrayForEach(part, parts) {
        const char *text = field(part, "text")->valuestring;
        size_t length = strlen(text);
        memcpy(content + used, text, length);
        used += length;
    }
    content[used] = '\0';
    *out = content;
    return 0;
}

/* Copies the role to out->role; returns its index in openai_roles, or -1. */
static int parse_role(const cJSON *message, int index, struct openai_message *out,
                      struct openai_error *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].role", index);
    const cJSON *role = field(message, "role");
    if (role == NULL) return invalid(e, param, "%s is required", param);
    if (!cJSON_IsString(role)) return invalid(e, param, "%s must be a string", param);
    for (int i = 0; i < (int)(sizeof(openai_roles) / sizeof(openai_roles[0])); i++)
        if (strcmp(role->valuestring, openai_roles[i]) == 0) {
            out->role = copy_string(openai_roles[i], e);
            return out->role != NULL ? i : -1;
        }
    char got[96];
    return invalid(e, param,
                   "%s must be one of system, developer, user, assistant, tool; got \"%s\"", param,
                   printable(role->valuestring, got, sizeof(got)));
}

static int parse_message_content(const cJSON *message, int index, struct openai_message *out,
                                 struct openai_error *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d]", index);
    if (!cJSON_IsObject(message)) return invalid(e, param, "%s must be an object", param);
    int role = parse_role(message, index, out, e);
    if (role < 0) return -1;
    snprintf(param, sizeof(param), "messages[%d].content", index);
    const cJSON *content = field(message, "content");
    if (content == NULL) {
        /* An assistant turn that only called tools has null content. */
        if (strcmp(openai_roles[role], "assistant") != 0)
            return invalid(e, param, "%s is required", param);
        out->content = copy_string("", e);
        return out->content != NULL ? 0 : -1;
    }
    if (cJSON_IsArray(content)) return parse_content_parts(content, index, &out->content, e);
    if (!cJSON_IsString(content))
        return invalid(e, param, "%s must be a string or an array of text parts", param);
    return check_string(content, param, &out->content, e);
}

/* A message: its role and content, then its tool-call fields (openai_tools.c). */
static int parse_message(const cJSON *message, int index, struct openai_message *out,
                         struct openai_error *e) {
    return parse_message_content(message, index, out, e) ||
           openai_parse_message_tools(message, index, out, e);
}

static int parse_messages(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    const cJSON *messages = field(root, "messages");
    if (messages == NULL) return invalid(e, "messages", "messages is required");
    if (!cJSON_IsArray(messages))
        return invalid(e, "messages", "messages must be an array of message objects");
    int n = cJSON_GetArraySize(messages);
    if (n == 0) return invalid(e, "messages", "messages must not be empty");
    out->messages = calloc((size_t)n, sizeof(*out->messages));
    if (out->messages == NULL) return out_of_memory(e);
    out->n_messages = n;
    int index = 0;
    const cJSON *message;
    cJSON_ArrayForEach(message, messages) {
        if (parse_message(message, index, &out->messages[index], e) != 0) return -1;
        index++;
    }
    return 0;
}

/* -------------------------------- prompt -------------------------------- */

static int parse_token_ids(const cJSON *ids, const char *param, struct openai_prompt *out,
                           struct openai_error *e) {
    int n = cJSON_GetArraySize(ids);
    if (n == 0) return invalid(e, param, "%s must not be empty", param);
    out->tokens = malloc((size_t)n * sizeof(*out->tokens));
    if (out->tokens == NULL) return out_of_memory(e);
    out->n_tokens = n;
    int index = 0;
    const cJSON *id;
    cJSON_ArrayForEach(id, ids) {
        char name[64];
        snprintf(name, sizeof(name), "%s[%d]", param, index);
        /* An explicit null element is a wrong type here, not an absent value. */
        if (cJSON_IsNull(id)) return invalid(e, name, "%s must be an integer", name);
        if (check_int(id, name, 0, INT_MAX, &out->tokens[index], e) != 0) return -1;
        index++;
    }
    return 0;
}

/* One prompt into out->prompts[0]. */
static int one_prompt(struct openai_request *out, struct openai_error *e) {
    out->prompts = calloc(1, sizeof(*out->prompts));
    if (out->prompts == NULL) return out_of_memory(e);
    out->n_prompts = 1;
    return 0;
}

int openai_parse_prompts(const cJSON *prompt, const char *param, int max,
                         struct openai_request *out, struct openai_error *e) {
    const cJSON *item;
    if (prompt == NULL) return invalid(e, param, "%s is required", param);
    if (cJSON_IsString(prompt))
        return one_prompt(out, e) || check_string(prompt, param, &out->prompts[0].text, e) ? -1 : 0;
    if (!cJSON_IsArray(prompt))
        return invalid(e, param, "%s must be a string or an array of token ids", param);
    int n = cJSON_GetArraySize(prompt);
    if (n == 0) return invalid(e, param, "%s must not be empty", param);
    const cJSON *first = prompt->child;
    int strings = cJSON_IsString(first);
    if (!strings && !cJSON_IsArray(first))
        return one_prompt(out, e) || parse_token_ids(prompt, param, &out->prompts[0], e) ? -1 : 0;
    if (n > max) return invalid(e, param, "%s may hold at most %d prompts, got %d", param, max, n);
    out->prompts = calloc((size_t)n, sizeof(*out->prompts));
    if (out->prompts == NULL) return out_of_memory(e);
    out->n_prompts = n;
    int index = 0;
    cJSON_ArrayForEach(item, prompt) {
        char name[48];
        snprintf(name, sizeof(name), "%s[%d]", param, index);
        if (strings ? !cJSON_IsString(item) : !cJSON_IsArray(item))
            return invalid(e, name, "%s must be %s, as %s[0] is", name,
                           strings ? "a string" : "an array of token ids", param);
        if (strings ? check_string(item, name, &out->prompts[index].text, e)
                    : parse_token_ids(item, name, &out->prompts[index], e))
            return -1;
        index++;
    }
    return 0;
}

/* A completions request's prompt: one or several (openai_parse_prompts). */
static int parse_prompt(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    return openai_parse_prompts(field(root, "prompt"), "prompt", OPENAI_REQUEST_CHOICES_MAX, out,
                                e);
}

/* ------------------------------- options -------------------------------- */

static int parse_stop(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    const cJSON *stop = field(root, "stop");
    if (stop == NULL) return 0;
    if (cJSON_IsString(stop)) {
        if (stop->valuestring[0] == '\0') return invalid(e, "stop", "stop must not be empty");
        out->n_stops = 1;
        return check_string(stop, "stop", &out->stops[0], e);
    }
    if (!cJSON_IsArray(stop))
        return invalid(e, "stop", "stop must be a string or an array of strings");
    int n = cJSON_GetArraySize(stop);
    if (n > OPENAI_STOPS_MAX)
        return invalid(e, "stop", "stop may hold at most %d strings, got %d", OPENAI_STOPS_MAX, n);
    const cJSON *item;
    cJSON_ArrayForEach(item, stop) {
        char param[64];
        snprintf(param, sizeof(param), "stop[%d]", out->n_stops);
        if (!cJSON_IsString(item)) return invalid(e, param, "%s must be a string", param);
        if (item->valuestring[0] == '\0') return invalid(e, param, "%s must not be empty", param);
        if (check_string(item, param, &out->stops[out->n_stops], e) != 0) return -1;
        out->n_stops++;
    }
    return 0;
}

/* The seed as given, kept as the 64 bits the sampler takes. A seed beyond
 * a double's 53 bits was already rounded by the JSON parser, the same way
 * every time, so equal seeds still give equal tokens; 2^64 - 1 reads as
 * 2^64, hence the clamp. */
static int parse_seed(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    const cJSON *seed = field(root, "seed");
    double value = 0;
    if (seed == NULL) return 0;
    if (!cJSON_IsNumber(seed) || seed->valuedouble != floor(seed->valuedouble))
        return invalid(e, "seed", "seed must be an integer");
    value = seed->valuedouble;
    if (!(value >= -9223372036854775808.0 && value <= 18446744073709551616.0))
        return invalid(e, "seed",
                       "seed must be between -9223372036854775808 and 18446744073709551615, got %g",
                       value);
    out->has_seed = 1;
    if (value < 0)
        out->seed = (uint64_t)(int64_t)value;
    else
        out->seed = value < 18446744073709551616.0 ? (uint64_t)value : UINT64_MAX;
    return 0;
}

static int parse_logprobs(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    if (out->kind == OPENAI_COMPLETION) {
        /* Completions: logprobs is the number of alternatives, 0..20. */
        int alternatives = -1;
        if (check_int(field(root, "logprobs"), "logprobs", 0, OPENAI_TOP_LOGPROBS_MAX,
                      &alternatives, e) != 0)
            return -1;
        out->logprobs = alternatives >= 0;
        out->top_logprobs = alternatives >= 0 ? alternatives : 0;
        return 0;
    }
    const cJSON *top = field(root, "top_logprobs");
    if (check_bool(field(root, "logprobs"), "logprobs", &out->logprobs, e) != 0 ||
        check_int(top, "top_logprobs", 0, OPENAI_TOP_LOGPROBS_MAX, &out->top_logprobs, e) != 0)
        return -1;
    if (top != NULL && !out->logprobs)
        return invalid(e, "top_logprobs", "top_logprobs requires logprobs to be true");
    return 0;
}

static int parse_sampling(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    if (check_number(field(root, "temperature"), "temperature", 0, 2, &out->temperature, e) ||
        check_number(field(root, "top_p"), "top_p", 0, 1, &out->top_p, e) ||
        check_int(field(root, "top_k"), "top_k", -1, INT_MAX, &out->top_k, e) ||
        check_number(field(root, "min_p"), "min_p", 0, 1, &out->min_p, e) ||
        check_number(field(root, "presence_penalty"), "presence_penalty", -2, 2,
                     &out->presence_penalty, e) ||
        check_number(field(root, "frequency_penalty"), "frequency_penalty", -2, 2,
                     &out->frequency_penalty, e) ||
        check_number(field(root, "repetition_penalty"), "repetition_penalty", -FLT_MAX, FLT_MAX,
                     &out->repetition_penalty, e) ||
        check_bool(field(root, "ignore_eos"), "ignore_eos", &out->ignore_eos, e))
        return -1;
    if (out->top_k < 0) out->top_k = 0; /* -1 is another common spelling of "off" */
    if (!(out->repetition_penalty > 0))
        return invalid(e, "repetition_penalty", "repetition_penalty must be greater than 0, got %g",
                       (double)out->repetition_penalty);
    return parse_seed(root, out, e);
}

/* max_tokens, or for chat its newer name max_completion_tokens, which wins. */
static int parse_max_tokens(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    if (check_int(field(root, "max_tokens"), "max_tokens", 1, INT_MAX, &out->max_tokens, e) != 0)
        return -1;
    if (out->kind != OPENAI_CHAT) return 0;
    return check_int(field(root, "max_completion_tokens"), "max_completion_tokens", 1, INT_MAX,
                     &out->max_tokens, e);
}

/* n: the choices to generate for each prompt, each sampled on its own
 * (src/gateway/requests/request.c). */
static int parse_choices(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    if (check_int(field(root, "n"), "n", 1, OPENAI_CHOICES_MAX, &out->n, e) != 0) return -1;
    if (out->n_prompts * out->n <= OPENAI_REQUEST_CHOICES_MAX) return 0;
    return invalid(e, "n", "%d prompts with n %d make %d choices; a request may ask for %d",
                   out->n_prompts, out->n, out->n_prompts * out->n, OPENAI_REQUEST_CHOICES_MAX);
}

/* echo (completions): the prompt is never repeated in the answer. */
static int parse_echo(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    int echo = 0;
    if (out->kind != OPENAI_COMPLETION) return 0;
    if (check_bool(field(root, "echo"), "echo", &echo, e) != 0) return -1;
    if (echo) return invalid(e, "echo", "echo=true is not supported");
    return 0;
}

static int parse_stream(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    if (check_bool(field(root, "stream"), "stream", &out->stream, e) != 0) return -1;
    const cJSON *options = field(root, "stream_options");
    if (options == NULL) return 0;
    if (!cJSON_IsObject(options))
        return invalid(e, "stream_options", "stream_options must be an object");
    if (check_bool(field(options, "include_usage"), "stream_options.include_usage",
                   &out->include_usage, e) != 0)
        return -1;
    /* As OpenAI: options for a stream that will not be sent are a mistake. */
    if (!out->stream)
        return invalid(e, "stream_options", "stream_options requires stream to be true");
    return 0;
}

/* An omitted model stays NULL: the HTTP layer chooses (the only model served). */
static int parse_model(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    const cJSON *model = field(root, "model");
    if (cJSON_IsString(model) && model->valuestring[0] == '\0')
        return invalid(e, "model", "model must not be empty");
    return check_string(model, "model", &out->model, e);
}

static void set_defaults(struct openai_request *out, enum openai_kind kind) {
    memset(out, 0, sizeof(*out));
    out->kind = kind;
    out->max_tokens = -1;
    out->temperature = 1.0f;
    out->top_p = 1.0f;
    out->repetition_penalty = 1.0f;
    out->n = 1;
}

int openai_parse_request(const char *body, size_t len, enum openai_kind kind,
                         struct openai_request *out, struct openai_error *error) {
    memset(error, 0, sizeof(*error));
    set_defaults(out, kind);
    if (kind != OPENAI_CHAT && kind != OPENAI_COMPLETION) {
        openai_error_set(error, 500, "server_error", NULL, NULL, "unknown endpoint kind %d",
                         (int)kind);
        return -1;
    }
    cJSON *root = openai_parse_object(body, len, "the request body", error);
    if (root == NULL) return -1;
    int failed =
        check_fields(root, kind, error) || parse_model(root, out, error) ||
        (kind == OPENAI_CHAT ? parse_messages(root, out, error) : parse_prompt(root, out, error)) ||
        parse_stream(root, out, error) || parse_max_tokens(root, out, error) ||
        parse_sampling(root, out, error) || parse_stop(root, out, error) ||
        parse_logprobs(root, out, error) || parse_choices(root, out, error) ||
        parse_echo(root, out, error) || openai_parse_constraints(root, out, error) ||
        openai_parse_tools(root, out, error);
    cJSON_Delete(root);
    if (!failed) return 0;
    openai_request_free(out);
    return -1;
}

void openai_request_free(struct openai_request *request) {
    if (request == NULL) return;
    openai_tools_free(request);
    free(request->model);
    for (int i = 0; i < request->n_messages; i++) {
        free(request->messages[i].role);
        free(request->messages[i].content);
    }
    free(request->messages);
    for (int i = 0; i < request->n_prompts; i++) {
        free(request->prompts[i].text);
        free(request->prompts[i].tokens);
    }
    free(request->prompts);
    for (int i = 0; i < request->n_stops; i++) free(request->stops[i]);
    free(request->biases);
    free(request->grammar);
    free(request->grammar_trigger);
    memset(request, 0, sizeof(*request));
}
