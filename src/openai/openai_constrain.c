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
#include "openai/openai.h"
#include "grammar/grammar.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* logit_bias: {"token id": bias in [-100, 100]}, at most OPENAI_BIASES_MAX. */
static int parse_logit_bias(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    const cJSON *bias = openai_member(root, "logit_bias");
    if (bias == NULL) return 0;
    if (!cJSON_IsObject(bias))
        return openai_refuse(e, "logit_bias",
                             "logit_bias must be an object of token ids to biases");
    int n = cJSON_GetArraySize(bias);
    if (n > OPENAI_BIASES_MAX)
        return openai_refuse(e, "logit_bias", "logit_bias has %d entries; at most %d are allowed",
                             n, OPENAI_BIASES_MAX);
    if (n == 0) return 0;
    out->biases = calloc((size_t)n, sizeof(*out->biases));
    if (!out->biases) return openai_out_of_memory(e);
    const cJSON *item;
    cJSON_ArrayForEach(item, bias) {
        char *end;
        errno = 0;
        long id = strtol(item->string, &end, 10);
        if (errno || end == item->string || *end || id < 0 || id > 0x7fffffffL ||
            item->string[0] == '+' || item->string[0] == ' ')
            return openai_refuse(e, "logit_bias", "logit_bias key '%.40s' is not a token id",
                                 item->string);
        if (!cJSON_IsNumber(item) || !(item->valuedouble >= -100 && item->valuedouble <= 100))
            return openai_refuse(e, "logit_bias",
                                 "logit_bias['%s'] must be a number in [-100, 100]", item->string);
        out->biases[out->n_biases++] = (struct openai_bias){(int)id, (float)item->valuedouble};
    }
    return 0;
}

/* Compiles text to check it; -1 with a 400 about param. */
static int check_grammar(const char *text, const char *param, struct openai_error *e) {
    char err[200];
    struct grammar *g = NULL;
    if (grammar_compile(&g, text, strlen(text), err, sizeof(err)))
        return openai_refuse(e, param, "%s: %s", param, err);
    grammar_free(g);
    return 0;
}

/* grammar: GBNF text, as llama.cpp's server takes it. */
static int parse_grammar(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    const cJSON *grammar = openai_member(root, "grammar");
    if (grammar == NULL) return 0;
    if (!cJSON_IsString(grammar) || grammar->valuestring[0] == '\0')
        return openai_refuse(e, "grammar", "grammar must be a non-empty string of GBNF");
    if (strlen(grammar->valuestring) > OPENAI_GRAMMAR_MAX)
        return openai_refuse(e, "grammar", "grammar has %zu bytes; at most %d are allowed",
                             strlen(grammar->valuestring), OPENAI_GRAMMAR_MAX);
    if (check_grammar(grammar->valuestring, "grammar", e)) return -1;
    out->grammar = strdup(grammar->valuestring);
    return out->grammar ? 0 : openai_out_of_memory(e);
}

/* The json_schema member of response_format: {name, schema, strict,
 * description}; *schema receives the schema (NULL: any JSON object). */
static int read_json_schema(const cJSON *format, const cJSON **schema, struct openai_error *e) {
    static const char *const keys[] = {"name", "schema", "strict", "description", NULL};
    const char *param = "response_format.json_schema";
    const cJSON *spec = openai_member(format, "json_schema");
    if (!cJSON_IsObject(spec))
        return openai_refuse(e, param, "%s is required with type json_schema, as an object", param);
    if (openai_check_keys(spec, param, keys, e)) return -1;
    const cJSON *name = openai_member(spec, "name"), *strict = openai_member(spec, "strict");
    if (!cJSON_IsString(name) || name->valuestring[0] == '\0' || strlen(name->valuestring) > 64)
        return openai_refuse(
            e, "response_format.json_schema.name",
            "response_format.json_schema.name must be a string of 1 to 64 characters");
    if (strict && !cJSON_IsBool(strict))
        return openai_refuse(e, "response_format.json_schema.strict",
                             "response_format.json_schema.strict must be a boolean");
    *schema = openai_member(spec, "schema");
    if (*schema && !cJSON_IsObject(*schema))
        return openai_refuse(e, "response_format.json_schema.schema",
                             "response_format.json_schema.schema must be an object");
    return 0;
}

/* response_format: text (nothing), json_object or json_schema, as a
 * grammar. */
static int parse_response_format(const cJSON *root, struct openai_request *out,
                                 struct openai_error *e) {
    static const char *const keys[] = {"type", "json_schema", NULL};
    const cJSON *format = openai_member(root, "response_format");
    if (format == NULL) return 0;
    const cJSON *type = cJSON_IsObject(format) ? openai_member(format, "type") : NULL;
    if (type == NULL || !cJSON_IsString(type))
        return openai_refuse(e, "response_format",
                             "response_format must be an object with a type: text, json_object or "
                             "json_schema");
    if (openai_check_keys(format, "response_format", keys, e)) return -1;
    const char *kind = type->valuestring;
    const cJSON *schema = NULL;
    int wants_schema = strcmp(kind, "json_schema") == 0;
    if (strcmp(kind, "text") == 0) return 0;
    if (strcmp(kind, "json_object") != 0 && !wants_schema)
        return openai_refuse(e, "response_format.type",
                             "response_format.type '%.40s' is not text, json_object or json_schema",
                             kind);
    if (wants_schema && read_json_schema(format, &schema, e)) return -1;
    if (out->grammar)
        return openai_refuse(e, "response_format", "give grammar or response_format, not both");
    /* json_schema without a schema: any JSON object, like json_object */
    char err[200];
    out->grammar = grammar_from_json_schema(schema, err, sizeof(err));
    if (!out->grammar)
        return openai_refuse(e, "response_format.json_schema.schema", "response_format: %s", err);
    return check_grammar(out->grammar, "response_format", e);
}

int openai_parse_constraints(const cJSON *root, struct openai_request *out,
                             struct openai_error *e) {
    return parse_logit_bias(root, out, e) || parse_grammar(root, out, e) ||
           parse_response_format(root, out, e);
}
