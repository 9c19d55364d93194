/* openai_constrain.c -- the request fields that constrain what is sampled:
 * logit_bias, grammar (llama.cpp's field: GBNF text) and response_format
 * (OpenAI's structured outputs: any JSON object, or JSON matching a
 * schema).
 *
 * response_format becomes a grammar here (src/grammar's JSON Schema
 * conversion), so the runner sees one thing: GBNF text. The grammar is
 * compiled here with the same function the runner compiles it with, so a
 * grammar the runner would refuse is a 400 naming the field before any
 * runner is involved (one rule in one place). Token ids of logit_bias are
 * checked against the vocabulary by the runner, which knows it. */
#include "gateway/openai.h"
#include "grammar/grammar.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) static int refuse(struct openai_error *e, const char *param,
                                                        const char *format, ...) {
    va_list args;
    va_start(args, format);
    char message[sizeof(e->message)];
    vsnprintf(message, sizeof(message), format, args);
    va_end(args);
    /* a grammar's or a schema's own text may be quoted: the message stays one line */
    for (char *c = message; *c; c++)
        if ((unsigned char)*c < 0x20) *c = ' ';
    openai_error_set(e, 400, "invalid_request_error", param, NULL, "%s", message);
    return -1;
}

static int out_of_memory(struct openai_error *e) {
    openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory while parsing the request");
    return -1;
}

/* A JSON null is absent, as everywhere in the request. */
static const cJSON *member(const cJSON *object, const char *name) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, name);
    return cJSON_IsNull(item) ? NULL : item;
}

/* logit_bias: {"token id": bias in [-100, 100]}, at most OPENAI_BIASES_MAX. */
static int parse_logit_bias(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    const cJSON *bias = member(root, "logit_bias");
    if (bias == NULL) return 0;
    if (!cJSON_IsObject(bias))
        return refuse(e, "logit_bias", "logit_bias must be an object of token ids to biases");
    int n = cJSON_GetArraySize(bias);
    if (n > OPENAI_BIASES_MAX)
        return refuse(e, "logit_bias", "logit_bias has %d entries; at most %d are allowed", n,
                      OPENAI_BIASES_MAX);
    if (n == 0) return 0;
    out->biases = calloc((size_t)n, sizeof(*out->biases));
    if (!out->biases) return out_of_memory(e);
    const cJSON *item;
    cJSON_ArrayForEach(item, bias) {
        char *end;
        errno = 0;
        long id = strtol(item->string, &end, 10);
        if (errno || end == item->string || *end || id < 0 || id > 0x7fffffffL ||
            item->string[0] == '+' || item->string[0] == ' ')
            return refuse(e, "logit_bias", "logit_bias key '%.40s' is not a token id",
                          item->string);
        if (!cJSON_IsNumber(item) || !(item->valuedouble >= -100 && item->valuedouble <= 100))
            return refuse(e, "logit_bias", "logit_bias['%s'] must be a number in [-100, 100]",
                          item->string);
        out->biases[out->n_biases++] = (struct openai_bias){(int)id, (float)item->valuedouble};
    }
    return 0;
}

/* Compiles text to check it; -1 with a 400 about param. */
static int check_grammar(const char *text, const char *param, struct openai_error *e) {
    char err[200];
    struct grammar *g = NULL;
    if (grammar_compile(&g, text, strlen(text), err, sizeof(err)))
        return refuse(e, param, "%s: %s", param, err);
    grammar_free(g);
    return 0;
}

/* grammar: GBNF text, as llama.cpp's server takes it. */
static int parse_grammar(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    const cJSON *grammar = member(root, "grammar");
    if (grammar == NULL) return 0;
    if (!cJSON_IsString(grammar) || grammar->valuestring[0] == '\0')
        return refuse(e, "grammar", "grammar must be a non-empty string of GBNF");
    if (strlen(grammar->valuestring) > OPENAI_GRAMMAR_MAX)
        return refuse(e, "grammar", "grammar has %zu bytes; at most %d are allowed",
                      strlen(grammar->valuestring), OPENAI_GRAMMAR_MAX);
    if (check_grammar(grammar->valuestring, "grammar", e)) return -1;
    out->grammar = strdup(grammar->valuestring);
    return out->grammar ? 0 : out_of_memory(e);
}

/* Refuses a key of object not among the names (NULL-terminated). */
static int check_keys(const cJSON *object, const char *param, const char *const *names,
                      struct openai_error *e) {
    const cJSON *item;
    cJSON_ArrayForEach(item, object) {
        int known = 0;
        for (int i = 0; names[i] && !known; i++) known = strcmp(item->string, names[i]) == 0;
        if (!known) return refuse(e, param, "%s has an unknown field '%.40s'", param, item->string);
    }
    return 0;
}

/* The json_schema member of response_format: {name, schema, strict,
 * description}; *schema receives the schema (NULL: any JSON object). */
static int read_json_schema(const cJSON *format, const cJSON **schema, struct openai_error *e) {
    static const char *const keys[] = {"name", "schema", "strict", "description", NULL};
    const char *param = "response_format.json_schema";
    const cJSON *spec = member(format, "json_schema");
    if (!cJSON_IsObject(spec))
        return refuse(e, param, "%s is required with type json_schema, as an object", param);
    if (check_keys(spec, param, keys, e)) return -1;
    const cJSON *name = member(spec, "name"), *strict = member(spec, "strict");
    if (!cJSON_IsString(name) || name->valuestring[0] == '\0' || strlen(name->valuestring) > 64)
        return refuse(e, "response_format.json_schema.name",
                      "response_format.json_schema.name must be a string of 1 to 64 characters");
    if (strict && !cJSON_IsBool(strict))
        return refuse(e, "response_format.json_schema.strict",
                      "response_format.json_schema.strict must be a boolean");
    *schema = member(spec, "schema");
    if (*schema && !cJSON_IsObject(*schema))
        return refuse(e, "response_format.json_schema.schema",
                      "response_format.json_schema.schema must be an object");
    return 0;
}

/* response_format: text (nothing), json_object or json_schema, as a
 * grammar. */
static int parse_response_format(const cJSON *root, struct openai_request *out,
                                 struct openai_error *e) {
    static const char *const keys[] = {"type", "json_schema", NULL};
    const cJSON *format = member(root, "response_format");
    if (format == NULL) return 0;
    const cJSON *type = cJSON_IsObject(format) ? member(format, "type") : NULL;
    if (type == NULL || !cJSON_IsString(type))
        return refuse(e, "response_format",
                      "response_format must be an object with a type: text, json_object or "
                      "json_schema");
    if (check_keys(format, "response_format", keys, e)) return -1;
    const char *kind = type->valuestring;
    const cJSON *schema = NULL;
    int wants_schema = strcmp(kind, "json_schema") == 0;
    if (strcmp(kind, "text") == 0) return 0;
    if (strcmp(kind, "json_object") != 0 && !wants_schema)
        return refuse(e, "response_format.type",
                      "response_format.type '%.40s' is not text, json_object or json_schema", kind);
    if (wants_schema && read_json_schema(format, &schema, e)) return -1;
    if (out->grammar)
        return refuse(e, "response_format", "give grammar or response_format, not both");
    /* json_schema without a schema: any JSON object, like json_object */
    char err[200];
    out->grammar = grammar_from_json_schema(schema, err, sizeof(err));
    if (!out->grammar)
        return refuse(e, "response_format.json_schema.schema", "response_format: %s", err);
    return check_grammar(out->grammar, "response_format", e);
}

int openai_parse_constraints(const cJSON *root, struct openai_request *out,
                             struct openai_error *e) {
    return parse_logit_bias(root, out, e) || parse_grammar(root, out, e) ||
           parse_response_format(root, out, e);
}
