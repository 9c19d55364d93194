/* test_json_schema.c -- JSON Schema to GBNF (grammar_from_json_schema).
 *
 * 1. Every keyword outside the subset, and every malformed schema, gets
 *    its exact message naming the keyword and where it is.
 * 2. The validator of json_schema_check.c judges hand-made documents right
 *    (so it can judge the grammars).
 * 3. For each of a set of schemas the grammar compiles, accepts byte by
 *    byte the valid documents listed, rejects the invalid ones (which the
 *    validator rejects too) and the valid ones it leaves out by design
 *    (which the validator accepts).
 * 4. From each grammar, 200 random walks (a uniformly chosen allowed byte
 *    at each step, ending when the grammar can end and a coin says so)
 *    produce texts that are strict JSON, valid under the schema, with
 *    whitespace only between tokens and in bounded runs. */
#include "grammar/grammar.h"
#include "json_schema_check.h"
#include "testutil.h"

#include <cjson/cJSON.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WALKS     200   /* random walks per schema */
#define WALK_SOFT 600   /* bytes after which a walk heads for its end */
#define WALK_HARD 20000 /* bytes after which a walk has failed */
#define MAX_CASE  16    /* documents of one kind per schema */

static int grammar_matches(const struct grammar *g, const char *text);

/* ---- 1. errors ---- */

/* A schema the converter refuses and its message. */
struct refusal {
    const char *schema;  /* JSON text */
    const char *message; /* the exact error */
};

static const struct refusal refusals[] = {
    {"{\"type\":\"string\",\"pattern\":\"^a\"}",
     "unsupported JSON Schema keyword \"pattern\" at the root"},
    {"{\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":1}}}",
     "\"minimum\" above 0 or \"maximum\" below 0 is not supported at /properties/age"},
    {"{\"properties\":{\"w\":{\"type\":\"number\",\"maximum\":5}}}",
     "\"minimum\"/\"maximum\" on a number (not an integer) is not supported at /properties/w"},
    {"{\"properties\":{\"age\":{\"type\":\"integer\",\"exclusiveMinimum\":0}}}",
     "unsupported JSON Schema keyword \"exclusiveMinimum\" at /properties/age"},
    {"{\"properties\":{\"age\":{\"type\":\"number\",\"maximum\":9}}}",
     "\"minimum\"/\"maximum\" on a number (not an integer) is not supported at /properties/age"},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0}",
     "unsupported JSON Schema keyword \"exclusiveMinimum\" at the root"},
    {"{\"type\":\"number\",\"multipleOf\":2}",
     "unsupported JSON Schema keyword \"multipleOf\" at the root"},
    {"{\"allOf\":[{\"type\":\"string\"}]}",
     "unsupported JSON Schema keyword \"allOf\" at the root"},
    {"{\"items\":{\"not\":{\"type\":\"null\"}}}",
     "unsupported JSON Schema keyword \"not\" at /items"},
    {"{\"if\":{\"type\":\"string\"},\"then\":{\"maxLength\":3}}",
     "unsupported JSON Schema keyword \"if\" at the root"},
    {"{\"type\":\"object\",\"patternProperties\":{\"^x\":{}}}",
     "unsupported JSON Schema keyword \"patternProperties\" at the root"},
    {"{\"type\":\"object\",\"dependentRequired\":{\"a\":[\"b\"]}}",
     "unsupported JSON Schema keyword \"dependentRequired\" at the root"},
    {"{\"type\":\"object\",\"unevaluatedProperties\":false}",
     "unsupported JSON Schema keyword \"unevaluatedProperties\" at the root"},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"null\"}]}",
     "unsupported JSON Schema keyword \"prefixItems\" at the root"},
    {"{\"type\":\"array\",\"uniqueItems\":true}",
     "unsupported JSON Schema keyword \"uniqueItems\" at the root"},
    {"{\"type\":\"object\",\"minProperties\":1}",
     "unsupported JSON Schema keyword \"minProperties\" at the root"},
    {"{\"properties\":{\"a/b\":{\"properties\":{\"c~d\":{\"contains\":{}}}}}}",
     "unsupported JSON Schema keyword \"contains\" at /properties/a~1b/properties/c~0d"},
    {"{\"$defs\":{\"x\":{\"type\":\"string\",\"pattern\":\"a\"}},\"$ref\":\"#/$defs/x\"}",
     "unsupported JSON Schema keyword \"pattern\" at /$defs/x"},
    {"{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"string\",\"format\":\"email\"}]}",
     "unsupported format \"email\" at /anyOf/1"},
    {"{\"type\":\"string\",\"format\":\"date\",\"maxLength\":3}",
     "\"format\" with sibling keyword \"maxLength\" is not supported at the root"},
    {"{\"items\":{\"$ref\":\"other.json#/x\"}}",
     "\"$ref\" to another document (\"other.json#/x\") is not supported at /items"},
    {"{\"$ref\":\"#/$defs/missing\"}", "\"$ref\" \"#/$defs/missing\" does not resolve at the root"},
    {"{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/b\"},{\"type\":\"null\"}]},"
     "\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}",
     "\"$ref\" cycle that consumes no input through \"#/$defs/a\""},
    {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}",
     "\"$ref\" cycle that consumes no input through \"#\""},
    {"{\"$ref\":\"#/$defs/a\",\"type\":\"object\",\"$defs\":{\"a\":{}}}",
     "\"$ref\" with sibling keyword \"type\" is not supported at the root"},
    {"{\"properties\":{\"x\":{\"anyOf\":[{\"type\":\"null\"}],\"type\":\"null\"}}}",
     "\"anyOf\" with sibling keyword \"type\" is not supported at /properties/x"},
    {"{\"enum\":[\"a\"],\"minLength\":1}",
     "\"enum\" with sibling keyword \"minLength\" is not supported at the root"},
    {"{\"const\":1,\"enum\":[1]}",
     "\"enum\" with sibling keyword \"const\" is not supported at the root"},
    {"{\"type\":\"foo\"}", "unknown type \"foo\" at the root"},
    {"{\"type\":[\"string\",3]}",
     "\"type\" must be a type name or a non-empty array of them at the root"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}",
     "\"required\" names \"b\", which is not in \"properties\", at the root"},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}",
     "\"minItems\" is greater than \"maxItems\" at the root"},
    {"{\"type\":\"array\",\"minItems\":-1}",
     "\"minItems\" must be a non-negative integer at the root"},
    {"{\"type\":\"string\",\"maxLength\":1001}",
     "\"maxLength\" above 1000 is not supported at the root"},
    {"{\"properties\":{\"x\":false}}",
     "the schema false (nothing is valid) is not supported at /properties/x"},
    {"{\"items\":3}", "a schema must be an object or a boolean at /items"},
    {"{\"type\":\"array\",\"items\":[{}]}",
     "\"items\" as an array of schemas (a tuple) is not supported at the root"},
    {"{\"enum\":[]}", "\"enum\" must be a non-empty array at the root"},
    {"{\"type\":\"string\",\"enum\":[1,2]}",
     "no value of \"enum\" has a type the schema allows at the root"},
    {"{\"oneOf\":[]}", "\"oneOf\" must be a non-empty array of schemas at the root"},
    /* control characters in a key or a pointer are escaped: one line (found
     * by tests/fuzz/fuzz_json_schema.c) */
    {"{\"type\":\"array\",\"m\\raxItems\":3}",
     "unsupported JSON Schema keyword \"m\\raxItems\" at the root"},
    {"{\"properties\":{\"a\\nb\\u0001\":{\"pattern\":\"x\"}}}",
     "unsupported JSON Schema keyword \"pattern\" at /properties/a\\nb\\u0001"},
};

static void test_refusals(void) {
    char err[512];
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        cJSON *schema = cJSON_Parse(refusals[i].schema);
        CHECK_MSG(schema != NULL, "refusal %zu does not parse", i);
        if (schema == NULL) continue;
        strcpy(err, "(none)");
        char *g = grammar_from_json_schema(schema, err, sizeof err);
        CHECK_MSG(g == NULL, "%s was converted", refusals[i].schema);
        CHECK_MSG(strcmp(err, refusals[i].message) == 0, "%s: got '%s', want '%s'",
                  refusals[i].schema, err, refusals[i].message);
        free(g);
        cJSON_Delete(schema);
    }
}

/* A 20,000-value enum is refused in words the user can act on; 4,096
 * values still compile. */
static void test_long_enum(void) {
    char err[512];
    for (int n = 4096; n <= 20000; n += 20000 - 4096) {
        cJSON *schema = cJSON_CreateObject(), *values = cJSON_AddArrayToObject(schema, "enum");
        for (int i = 0; i < n; i++) {
            char value[16];
            snprintf(value, sizeof value, "v%d", i);
            cJSON_AddItemToArray(values, cJSON_CreateString(value));
        }
        char *g = grammar_from_json_schema(schema, err, sizeof err);
        if (n == 4096) {
            CHECK_MSG(g != NULL, "a 4096-value enum: %s", err);
        } else {
            CHECK_MSG(g == NULL &&
                          strcmp(err, "\"enum\" at the root has 20000 values; at most 4096 "
                                      "are supported: shorten the list, or describe the "
                                      "values by their type (\"type\": \"string\" with "
                                      "\"maxLength\")") == 0,
                      "a 20000-value enum: %s", err);
        }
        free(g);
        cJSON_Delete(schema);
    }
}

/* A schema nested past the converter's limit (a chain of 400 $defs, each
 * the items of the one before) is refused, not a stack overflow; a long
 * property name (5000 characters, with additional properties allowed, so
 * additional names must differ from it) costs rules, not stack. */
static void test_limits(void) {
    char err[512];
    size_t cap = 64 * 400 + 3 * 5000 + 64;
    char *text = malloc(cap), *name = malloc(5001);
    size_t n = (size_t)snprintf(text, cap, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
    for (int i = 0; i < 400; i++)
        n += (size_t)snprintf(text + n, cap - n, "\"d%d\":{\"items\":{\"$ref\":\"#/$defs/d%d\"}},",
                              i, i + 1);
    snprintf(text + n, cap - n, "\"d400\":{}}}");
    cJSON *schema = cJSON_Parse(text);
    CHECK(schema != NULL);
    char *g = grammar_from_json_schema(schema, err, sizeof err);
    CHECK(g == NULL);
    CHECK_MSG(strncmp(err, "the schema nests deeper than 256 levels at /$defs/d", 51) == 0, "%s",
              err);
    free(g);
    cJSON_Delete(schema);

    memset(name, 'a', 5000);
    name[5000] = '\0';
    snprintf(text, cap, "{\"type\":\"object\",\"properties\":{\"%s\":{\"type\":\"null\"}}}", name);
    schema = cJSON_Parse(text);
    g = grammar_from_json_schema(schema, err, sizeof err);
    CHECK_MSG(g != NULL, "%s", err);
    struct grammar *compiled = NULL;
    CHECK_MSG(g && grammar_compile(&compiled, g, strlen(g), err, sizeof err) == 0, "%s", err);
    if (compiled) {
        snprintf(text, cap, "{\"%s\":null,\"%.4999s\":1,\"%sa\":2}", name, name, name);
        CHECK(grammar_matches(compiled, text));
        snprintf(text, cap, "{\"%s\":null,\"%s\":null}", name, name);
        CHECK(!grammar_matches(compiled, text));
        grammar_free(compiled);
    }
    free(g);
    cJSON_Delete(schema);
    free(name);
    free(text);
}

/* ---- 2. the validator ---- */

/* A document and what the validator must say of it. */
struct judged {
    const char *schema; /* JSON text */
    const char *doc;    /* JSON text */
    int valid;          /* 1 valid, 0 invalid */
};

static const struct judged judgements[] = {
    {"{\"type\":\"integer\"}", "3", 1},
    {"{\"type\":\"integer\"}", "3.0", 1},
    {"{\"type\":\"integer\"}", "3.5", 0},
    {"{\"type\":[\"string\",\"null\"]}", "null", 1},
    {"{\"type\":[\"string\",\"null\"]}", "1", 0},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\\u00e9\\u00e9\"", 1},
    {"{\"type\":\"string\",\"maxLength\":1}", "\"\\ud83d\\ude00\"", 1},
    {"{\"type\":\"string\",\"maxLength\":2}", "\"abc\"", 0},
    {"{\"format\":\"date\"}", "\"2024-02-29\"", 1},
    {"{\"format\":\"date\"}", "\"2000-02-29\"", 1},
    {"{\"format\":\"date\"}", "\"1900-02-29\"", 0},
    {"{\"format\":\"date\"}", "\"2023-02-29\"", 0},
    {"{\"format\":\"date\"}", "\"2023-04-31\"", 0},
    {"{\"format\":\"date\"}", "\"2023-12-31\"", 1},
    {"{\"format\":\"date\"}", "\"2023-13-01\"", 0},
    {"{\"format\":\"time\"}", "\"23:59:59.123+05:30\"", 1},
    {"{\"format\":\"time\"}", "\"24:00:00Z\"", 0},
    {"{\"format\":\"time\"}", "\"12:00:00\"", 0},
    {"{\"format\":\"date-time\"}", "\"2024-01-02t03:04:05z\"", 1},
    {"{\"format\":\"date-time\"}", "\"2024-01-02 03:04:05Z\"", 0},
    {"{\"format\":\"uuid\"}", "\"123e4567-E89B-12d3-a456-426614174000\"", 1},
    {"{\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-42661417400\"", 0},
    {"{\"format\":\"uuid\"}", "7", 1},
    {"{\"enum\":[1,\"a\",{\"x\":[null]}]}", "{\"x\":[null]}", 1},
    {"{\"enum\":[1,\"a\",{\"x\":[null]}]}", "{\"x\":[]}", 0},
    {"{\"const\":{\"a\":1,\"b\":2}}", "{\"b\":2,\"a\":1}", 1},
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "1", 1},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "1", 0},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "1.5", 1},
    {"{\"properties\":{\"a\":{\"type\":\"null\"}},\"required\":[\"a\"]}", "{\"a\":null}", 1},
    {"{\"properties\":{\"a\":{\"type\":\"null\"}},\"required\":[\"a\"]}", "{}", 0},
    {"{\"properties\":{\"a\":{\"type\":\"null\"}},\"required\":[\"a\"]}", "5", 1},
    {"{\"properties\":{\"a\":{}},\"additionalProperties\":false}", "{\"b\":1}", 0},
    {"{\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"null\"}}", "{\"b\":null}", 1},
    {"{\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"null\"}}", "{\"b\":1}", 0},
    {"{\"properties\":{\"a\":{}}}", "{\"a\":1,\"a\":2}", 0},
    {"{\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}", "[1,2]", 1},
    {"{\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}", "[1,2,3]", 0},
    {"{\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}", "[]", 0},
    {"{\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}", "[\"a\"]", 0},
    {"{\"$defs\":{\"n\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},"
     "\"$ref\":\"#/$defs/n\"}",
     "[[],[[]]]", 1},
    {"{\"$defs\":{\"n\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},"
     "\"$ref\":\"#/$defs/n\"}",
     "[[],[1]]", 0},
    {"{\"definitions\":{\"a~b\":{\"type\":\"null\"}},\"$ref\":\"#/definitions/a~0b\"}", "null", 1},
    {"true", "[1]", 1},
    {"false", "[1]", 0},
};

static void test_validator(void) {
    char err[512];
    for (size_t i = 0; i < sizeof judgements / sizeof judgements[0]; i++) {
        const struct judged *j = &judgements[i];
        cJSON *schema = cJSON_Parse(j->schema), *doc = cJSON_Parse(j->doc);
        CHECK_MSG(schema && doc, "judgement %zu does not parse", i);
        int valid = schema && doc && json_schema_check(schema, doc, err, sizeof err) == 0;
        CHECK_MSG(valid == j->valid, "%s under %s: got %s (%s)", j->doc, j->schema,
                  valid ? "valid" : "invalid", valid ? "" : err);
        cJSON_Delete(schema);
        cJSON_Delete(doc);
    }
    static const char *const texts[] = {
        "0", "-0.5e+3", " [1, {\"a\": \"\\u00e9\"}] ", "\"\\ud83d\\ude00\"", "{}", "\"\xc3\xa9\"",
        NULL};
    static const char *const not_texts[] = {"01",      "1.",       "[1,]",     "\"\\ud83d\"",
                                            "\"\\x\"", "\"\x01\"", "\"\xc3\"", "\"\xed\xa0\x80\"",
                                            "tru",     "{\"a\"}",  "1 2",      NULL};
    for (int i = 0; texts[i]; i++)
        CHECK_MSG(json_text_check(texts[i], strlen(texts[i]), err, sizeof err) == 0, "%s: %s",
                  texts[i], err);
    for (int i = 0; not_texts[i]; i++)
        CHECK_MSG(json_text_check(not_texts[i], strlen(not_texts[i]), err, sizeof err) != 0,
                  "%s passed", not_texts[i]);
}

/* ---- 3. schemas and their documents ---- */

/* A schema and documents the grammar must accept or reject. */
struct schema_case {
    const char *name;               /* for messages */
    const char *schema;             /* JSON text, NULL: response_format json_object */
    const char *valid[MAX_CASE];    /* valid; the grammar accepts them */
    const char *invalid[MAX_CASE];  /* invalid (or not JSON); the grammar rejects them */
    const char *left_out[MAX_CASE]; /* valid, but the grammar rejects them by design */
};

static const struct schema_case cases[] = {
    {"flat",
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
     "\"integer\"},\"admin\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\"],"
     "\"additionalProperties\":false}",
     {"{\"name\":\"Ann\",\"age\":31}", "{\"name\":\"\",\"age\":-7,\"admin\":false}",
      "{ \"name\": \"B\\\"o\\u00e9\\ud83d\\ude00\",\n  \"age\": 0\n}",
      "{\"name\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",\"age\":12345678901234567890}"},
     {"{\"name\":\"Ann\"}", "{\"age\":1}", "{\"name\":\"A\",\"age\":1.5}",
      "{\"name\":\"A\",\"age\":1,\"x\":1}", "{\"name\":\"A\",\"age\":01}",
      "{\"name\":\"A\x01\",\"age\":1}", "{\"name\":\"\\ud800\",\"age\":1}",
      "{\"name\":\"A\",\"age\":1,}", "[]"},
     {"{\"age\":1,\"name\":\"A\"}", " {\"name\":\"A\",\"age\":1}", "{\"name\":\"A\",\"age\":1.0}",
      "{\"name\":\"A\",\"age\":1}\n", "{\"name\":\"A\",    \"age\":1}",
      "{\"\\u006eame\":\"A\",\"age\":1}", "{\"name\":\"\\u0000\",\"age\":1}"}},
    {"nested",
     "{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":{\"id\":"
     "{\"type\":\"integer\"},\"email\":{\"type\":\"string\"}},\"required\":[\"id\"],"
     "\"additionalProperties\":false},\"items\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"object\",\"properties\":{\"sku\":{\"type\":\"string\"},\"qty\":{\"type\":\"number\"}},"
     "\"required\":[\"sku\",\"qty\"],\"additionalProperties\":false}}},\"required\":[\"user\","
     "\"items\"],\"additionalProperties\":false}",
     {"{\"user\":{\"id\":1},\"items\":[]}",
      "{\"user\":{\"id\":1,\"email\":\"a@b\"},\"items\":[{\"sku\":\"x\",\"qty\":2.5e-3}]}",
      "{\"user\":{\"id\":-1},\"items\":[{\"sku\":\"\",\"qty\":0},{\"sku\":\"y\",\"qty\":-1E+2}]}"},
     {"{\"user\":{},\"items\":[]}", "{\"user\":{\"id\":1},\"items\":[{\"sku\":\"x\"}]}",
      "{\"user\":{\"id\":1,\"x\":2},\"items\":[]}", "{\"user\":{\"id\":1}}"},
     {NULL}},
    {"array bounds",
     "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":4}",
     {"[1,2]", "[1, 2, 3]", "[\n  1,\n  2,\n  3,\n  4\n]"},
     {"[]", "[1]", "[1,2,3,4,5]", "[1,\"2\"]", "[1,2"},
     {NULL}},
    {"enums",
     "{\"enum\":[\"red\",\"green\",1.5,null,true,{\"a\":[1,\"\\n\"]},[],\"\\u00e9\\\"\"]}",
     {"\"red\"", "\"green\"", "1.5", "null", "true", "{\"a\":[1,\"\\n\"]}",
      "{ \"a\" : [ 1 , \"\\n\" ] }", "[]", "\"\xc3\xa9\\\"\""},
     {"\"blue\"", "false", "1", "{\"a\":[1]}", "[1]", "\"re\""},
     {"15e-1", "\"\\u0072ed\"", "{\"a\":[1,\"\\u000a\"]}"}},
    {"typed enum",
     "{\"type\":[\"string\",\"integer\"],\"enum\":[\"a\",2,2.5,null]}",
     {"\"a\"", "2"},
     {"2.5", "null", "\"b\""},
     {NULL}},
    {"anyOf",
     "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":3},{\"type\":\"array\",\"items\":{\"type\":"
     "\"null\"},\"maxItems\":2},{\"type\":\"number\"},{\"const\":\"long const\"}]}",
     {"\"abc\"", "\"\"", "[]", "[null,null]", "-0.0", "\"long const\"", "\"\\ud83d\\ude00\\n\""},
     {"\"abcd\"", "[null,null,null]", "[1]", "true", "{}"},
     {NULL}},
    {"tree",
     "{\"$defs\":{\"node\":{\"type\":\"object\",\"description\":\"a node\",\"properties\":{"
     "\"value\":{\"type\":\"integer\"},\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/"
     "$defs/node\"},\"maxItems\":3}},\"required\":[\"value\"],\"additionalProperties\":false}},"
     "\"$ref\":\"#/$defs/node\"}",
     {"{\"value\":1}", "{\"value\":1,\"children\":[]}",
      "{\"value\":1,\"children\":[{\"value\":2,\"children\":[{\"value\":3}]},{\"value\":4}]}"},
     {"{\"value\":1,\"children\":[{}]}", "{\"children\":[]}",
      "{\"value\":1,\"children\":[{\"value\":1},{\"value\":1},{\"value\":1},{\"value\":1}]}"},
     {NULL}},
    {"formats",
     "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},\"t\":"
     "{\"type\":\"string\",\"format\":\"time\"},\"dt\":{\"type\":\"string\",\"format\":"
     "\"date-time\"},\"id\":{\"type\":\"string\",\"format\":\"uuid\"}},\"required\":[\"d\","
     "\"t\",\"dt\",\"id\"],\"additionalProperties\":false}",
     {"{\"d\":\"2024-02-29\",\"t\":\"23:59:59Z\",\"dt\":\"2000-02-29T00:00:00.5+14:00\",\"id\":"
      "\"123e4567-e89b-12d3-a456-426614174000\"}",
      "{\"d\":\"1999-12-31\",\"t\":\"00:00:00.000-23:59\",\"dt\":\"1600-02-29t12:30:00z\","
      "\"id\":\"ABCDEF00-0000-0000-0000-000000000000\"}"},
     {"{\"d\":\"2023-02-29\",\"t\":\"23:59:59Z\",\"dt\":\"2000-01-01T00:00:00Z\",\"id\":"
      "\"123e4567-e89b-12d3-a456-426614174000\"}",
      "{\"d\":\"1900-02-29\",\"t\":\"23:59:59Z\",\"dt\":\"2000-01-01T00:00:00Z\",\"id\":"
      "\"123e4567-e89b-12d3-a456-426614174000\"}",
      "{\"d\":\"2023-01-01\",\"t\":\"24:00:00Z\",\"dt\":\"2000-01-01T00:00:00Z\",\"id\":"
      "\"123e4567-e89b-12d3-a456-426614174000\"}",
      "{\"d\":\"2023-01-01\",\"t\":\"12:00:00\",\"dt\":\"2000-01-01T00:00:00Z\",\"id\":"
      "\"123e4567-e89b-12d3-a456-426614174000\"}",
      "{\"d\":\"2023-06-31\",\"t\":\"12:00:00Z\",\"dt\":\"2000-01-01T00:00:00Z\",\"id\":"
      "\"123e4567-e89b-12d3-a456-426614174000\"}",
      "{\"d\":\"2023-01-01\",\"t\":\"12:00:00Z\",\"dt\":\"2000-01-01 00:00:00Z\",\"id\":"
      "\"123e4567-e89b-12d3-a456-426614174000\"}",
      "{\"d\":\"2023-01-01\",\"t\":\"12:00:00Z\",\"dt\":\"2000-01-01T00:00:00Z\",\"id\":"
      "\"123e4567e89b-12d3-a456-426614174000\"}"},
     {NULL}},
    {"strict OpenAI",
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"steps\":{\"type\":"
     "\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"explanation\":{\"type\":"
     "\"string\"},\"output\":{\"type\":\"string\"}},\"required\":[\"explanation\",\"output\"],"
     "\"additionalProperties\":false}},\"final\":{\"type\":[\"string\",\"null\"]}},\"required\":"
     "[\"name\",\"steps\",\"final\"],\"additionalProperties\":false}",
     {"{\"name\":\"n\",\"steps\":[{\"explanation\":\"e\",\"output\":\"o\"}],\"final\":null}",
      "{\"name\":\"n\",\"steps\":[],\"final\":\"x\"}"},
     {"{\"name\":\"n\",\"steps\":[],\"final\":1}", "{\"name\":\"n\",\"steps\":[]}",
      "{\"name\":\"n\",\"steps\":[{\"output\":\"o\"}],\"final\":null}"},
     {NULL}},
    {"lengths and nulls",
     "{\"type\":[\"string\",\"null\"],\"minLength\":2,\"maxLength\":4}",
     {"null", "\"ab\"", "\"abcd\"", "\"\\u00e9\\n\"", "\"\\ud83d\\ude00\\ud83d\\ude00\""},
     {"\"a\"", "\"abcde\"", "1", "\"\\ud83d\""},
     {NULL}},
    {"additional properties",
     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"ab\":{\"type\":"
     "\"string\"},\"\xc3\xa9\":{\"type\":\"null\"}},\"required\":[\"a\"]}",
     {"{\"a\":1}", "{\"a\":1,\"ab\":\"x\",\"abc\":[1,{\"z\":null}]}", "{\"a\":1,\"b\":true,\"\":0}",
      "{\"a\":1,\"\xc3\xa9\":null,\"\xc3\xa9\xc3\xa9\":2}", "{\"a\":1,\"A\":\"\"}"},
     {"{}", "{\"a\":1,\"ab\":2}", "{\"ab\":\"x\"}", "{\"a\":1,\"\xc3\xa9\":0}"},
     {"{\"a\":1,\"a\\u0062c\":0}", "{\"b\":1,\"a\":1}"}},
    {"additional schema",
     "{\"properties\":{\"x\":{\"const\":1}},\"additionalProperties\":{\"type\":\"boolean\"}}",
     {"{}", "{\"x\":1}", "{\"x\":1,\"y\":true}", "{\"y\":false,\"z\":true}", "7", "\"s\"", "[{}]"},
     {"{\"x\":2}", "{\"y\":1}", "{\"x\":1,\"y\":null}"},
     {"{\"y\":true,\"x\":1}"}},
    {"bounded integers (zod's int(), nonnegative)",
     "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":"
     "-9007199254740991,\"maximum\":9007199254740991},\"k\":{\"type\":\"integer\","
     "\"minimum\":0,\"maximum\":100}},\"required\":[\"n\",\"k\"],\"additionalProperties\":false}",
     {"{\"n\":0,\"k\":0}", "{\"n\":-123456789012345,\"k\":99}", "{\"n\":999999999999999,\"k\":7}"},
     {"{\"n\":1,\"k\":-1}", "{\"n\":1,\"k\":101}", "{\"n\":1.5,\"k\":1}"},
     {"{\"n\":9007199254740991,\"k\":100}", "{\"n\":-1000000000000000,\"k\":1}"}},
    {"oneOf",
     "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"format\":\"uuid\"}]}",
     {"42", "\"00000000-0000-0000-0000-000000000000\""},
     {"4.2", "\"x\"", "null"},
     {NULL}},
    {"pydantic",
     "{\"$defs\":{\"Pet\":{\"properties\":{\"kind\":{\"enum\":[\"cat\",\"dog\"],\"title\":"
     "\"Kind\",\"type\":\"string\"},\"age\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":"
     "\"null\"}],\"default\":null,\"title\":\"Age\"}},\"required\":[\"kind\"],\"title\":\"Pet\","
     "\"type\":\"object\"}},\"properties\":{\"owner\":{\"title\":\"Owner\",\"type\":\"string\"},"
     "\"pets\":{\"items\":{\"$ref\":\"#/$defs/Pet\"},\"title\":\"Pets\",\"type\":\"array\"}},"
     "\"required\":[\"owner\",\"pets\"],\"title\":\"Household\",\"type\":\"object\","
     "\"$schema\":\"https://json-schema.org/draft/2020-12/schema\"}",
     {"{\"owner\":\"o\",\"pets\":[{\"kind\":\"cat\"},{\"kind\":\"dog\",\"age\":null},{\"kind\":"
      "\"cat\",\"age\":3,\"name\":\"Tom\"}]}"},
     {"{\"owner\":\"o\",\"pets\":[{\"kind\":\"cow\"}]}", "{\"owner\":\"o\"}"},
     {NULL}},
    {"any value",
     "{\"description\":\"anything\"}",
     {"1", "null", "[1,{\"a\":[]}]", "{\"a\":1,\"a\":2}", "\"\\/\""},
     {"", "[1,]", "01", "nul"},
     {" 1", "1 "}},
    {"json_object",
     NULL,
     {"{}", "{\"a\":[1,2,{\"b\":null}],\"c\":\"d\"}", "{\n\t\"a\": 1\n}",
      "{\n \t \t \t \t \t \t \t \t \t \t\"a\":1}"},
     {"[]", "1", "\"a\"", "{\"a\"}", "{1:2}"},
     {"{\"a\":1,     \"b\":2}", "{\n \t \t \t \t \t \t \t \t \t \t \"a\":1}", "{\"a\" \n:1}",
      "{\"a\":1\n\n}", "{\"a\":1\r\n}"}},
};

/* The grammar matches text whole. */
static int grammar_matches(const struct grammar *g, const char *text) {
    struct grammar_state *s = grammar_state_create(g);
    int ok = s != NULL;
    for (size_t i = 0; ok && text[i]; i++) ok = grammar_accept(s, text + i, 1) == 0;
    ok = ok && grammar_can_end(s);
    grammar_state_free(s);
    return ok;
}

/* The validator's verdict on text: 1 valid, 0 invalid or not JSON. */
static int validator_says(const cJSON *schema, const char *text, char *err, size_t errlen) {
    if (json_text_check(text, strlen(text), err, errlen)) return 0;
    cJSON *doc = cJSON_Parse(text);
    if (doc == NULL) return snprintf(err, errlen, "cJSON does not parse it"), 0;
    /* response_format json_object: any object */
    int valid = schema ? json_schema_check(schema, doc, err, errlen) == 0 : cJSON_IsObject(doc);
    if (!valid && !schema) snprintf(err, errlen, "not an object");
    cJSON_Delete(doc);
    return valid;
}

/* ---- 4. random walks ---- */

static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Reads one allowed byte into s and appends it to text: the first that s
 * takes in a random order of all 256 (so a uniform choice among those
 * allowed); past WALK_SOFT bytes the closing ones are tried first. 0, or
 * -1 when no byte is allowed. */
static int walk_step(struct grammar_state *s, uint64_t *rng, char *text, size_t n) {
    static const char closers[] = "\"}]";
    unsigned char order[256];
    for (int i = 0; i < 256; i++) order[i] = (unsigned char)i;
    for (int i = 255; i > 0; i--) {
        int j = (int)(next_random(rng) % (uint64_t)(i + 1));
        unsigned char t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; n >= WALK_SOFT && closers[i]; i++)
        if (grammar_accept(s, &closers[i], 1) == 0) {
            text[n] = closers[i];
            return 0;
        }
    for (int i = 0; i < 256; i++) {
        char b = (char)order[i];
        if (grammar_accept(s, &b, 1) == 0) {
            text[n] = b;
            return 0;
        }
    }
    return -1;
}

/* A random text of g (NUL-terminated, malloc'd), or NULL if the walk got
 * stuck or ran past WALK_HARD bytes. */
static char *random_walk(const struct grammar *g, uint64_t seed) {
    uint64_t rng = seed * 7919 + 1;
    struct grammar_state *s = grammar_state_create(g);
    char *text = malloc(WALK_HARD + 1);
    size_t n = 0;
    int ok = s && text;
    while (ok) {
        int can_end = grammar_can_end(s);
        if (can_end && (n >= WALK_SOFT || grammar_is_done(s) || next_random(&rng) % 4 == 0)) break;
        ok = n < WALK_HARD && walk_step(s, &rng, text, n) == 0;
        n++;
    }
    grammar_state_free(s);
    if (!ok) {
        free(text);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* Whitespace only between tokens, never first or last, at most 21 bytes
 * in a row (a newline and 20 spaces or tabs). */
static int whitespace_bounded(const char *text) {
    int in_string = 0, run = 0;
    size_t n = strlen(text);
    if (n && (strchr(" \t\n\r", text[0]) || strchr(" \t\n\r", text[n - 1]))) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = 0;
            continue;
        }
        in_string = c == '"';
        run = strchr(" \t\n\r", c) ? run + 1 : 0;
        if (run > 21) return 0;
    }
    return 1;
}

static void test_random_walks(const struct schema_case *c, const struct grammar *g,
                              const cJSON *schema) {
    char err[512];
    int failures = 0, longest = 0;
    for (uint64_t seed = 1; seed <= WALKS && failures < 3; seed++) {
        char *text = random_walk(g, seed);
        if (text == NULL) {
            CHECK_MSG(0, "%s: walk %llu got stuck or ran too long", c->name,
                      (unsigned long long)seed);
            failures++;
            continue;
        }
        if ((int)strlen(text) > longest) longest = (int)strlen(text);
        int valid = validator_says(schema, text, err, sizeof err);
        CHECK_MSG(valid, "%s: walk %llu made %s: %s", c->name, (unsigned long long)seed, text, err);
        CHECK_MSG(whitespace_bounded(text), "%s: walk %llu: whitespace in %s", c->name,
                  (unsigned long long)seed, text);
        failures += !valid;
        free(text);
    }
    printf("  %-22s %d walks, longest %d bytes\n", c->name, WALKS, longest);
}

static void test_documents(const struct schema_case *c, const struct grammar *g,
                           const cJSON *schema) {
    char err[512];
    for (int i = 0; i < MAX_CASE && c->valid[i]; i++) {
        CHECK_MSG(grammar_matches(g, c->valid[i]), "%s: grammar rejects %s", c->name, c->valid[i]);
        CHECK_MSG(validator_says(schema, c->valid[i], err, sizeof err),
                  "%s: validator rejects %s: %s", c->name, c->valid[i], err);
    }
    for (int i = 0; i < MAX_CASE && c->invalid[i]; i++) {
        CHECK_MSG(!grammar_matches(g, c->invalid[i]), "%s: grammar accepts %s", c->name,
                  c->invalid[i]);
        CHECK_MSG(!validator_says(schema, c->invalid[i], err, sizeof err),
                  "%s: validator accepts %s", c->name, c->invalid[i]);
    }
    for (int i = 0; i < MAX_CASE && c->left_out[i]; i++) {
        CHECK_MSG(!grammar_matches(g, c->left_out[i]), "%s: grammar accepts %s", c->name,
                  c->left_out[i]);
        CHECK_MSG(validator_says(schema, c->left_out[i], err, sizeof err),
                  "%s: validator rejects %s: %s", c->name, c->left_out[i], err);
    }
}

static void test_schema(const struct schema_case *c) {
    char err[512];
    cJSON *schema = c->schema ? cJSON_Parse(c->schema) : NULL;
    CHECK_MSG(c->schema == NULL || schema != NULL, "%s: schema does not parse", c->name);
    if (c->schema && schema == NULL) return;
    char *text = grammar_from_json_schema(schema, err, sizeof err);
    CHECK_MSG(text != NULL, "%s: not converted: %s", c->name, err);
    struct grammar *g = NULL;
    if (text && grammar_compile(&g, text, strlen(text), err, sizeof err) != 0) {
        CHECK_MSG(0, "%s: grammar does not compile: %s\n%s", c->name, err, text);
        g = NULL;
    }
    if (g) {
        test_documents(c, g, schema);
        test_random_walks(c, g, schema);
        grammar_free(g);
    }
    free(text);
    cJSON_Delete(schema);
}

int main(void) {
    test_refusals();
    test_long_enum();
    test_limits();
    test_validator();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_schema(&cases[i]);
    return test_status("test_json_schema");
}
