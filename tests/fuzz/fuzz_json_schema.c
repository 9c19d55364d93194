/* fuzz_json_schema.c -- libFuzzer harness for the JSON Schema converter
 * (grammar_from_json_schema in src/grammar/json_schema.c).
 *
 * The input is parsed as JSON with cJSON; input that is not JSON is
 * dropped. A schema the converter takes must give GBNF that grammar_compile
 * compiles (the converter must only emit valid GBNF): the grammar's start
 * state is made, a few first bytes of JSON texts are fed to copies of it
 * (a rejected byte must leave the copy as it was), and grammar_is_done must
 * imply grammar_can_end. A schema it refuses must come with a message that
 * is non-empty and one line (no control characters), and no grammar. Built
 * by tests/fuzz/CMakeLists.txt when LOCKSTEP_FUZZ=ON. */
#include "grammar/grammar.h"

#include <cjson/cJSON.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Starts of JSON texts fed to copies of the start state. */
static const char *const fuzz_probes[] = {
    "{", "[", "\"", "1", "-", "null", "true", "false", "{\"", "[]", "{}", " ", "\"\"", "0.5",
};
#define FUZZ_PROBES ((int)(sizeof(fuzz_probes) / sizeof(fuzz_probes[0])))

/* 1 if err is a one-line, non-empty message. */
static int good_message(const char *err) {
    if (err[0] == '\0') return 0;
    for (const unsigned char *p = (const unsigned char *)err; *p; p++)
        if (*p < 0x20 || *p == 0x7f) return 0;
    return 1;
}

/* Compiles gbnf (it must compile) and feeds the probes to copies of its
 * start state. */
static void check_grammar(const char *gbnf) {
    char err[512] = "";
    struct grammar *g = NULL;
    if (grammar_compile(&g, gbnf, strlen(gbnf), err, sizeof(err)) != 0) {
        if (strstr(err, "out of memory")) return;
        abort(); /* the converter wrote GBNF the compiler refuses */
    }
    struct grammar_state *start = grammar_state_create(g);
    if (!start) abort();
    if (grammar_is_done(start) && !grammar_can_end(start)) abort();
    for (int i = 0; i < FUZZ_PROBES; i++) {
        struct grammar_state *c = grammar_state_copy(start);
        if (!c) abort();
        int can_end = grammar_can_end(c), done = grammar_is_done(c);
        if (grammar_accept(c, fuzz_probes[i], strlen(fuzz_probes[i])) != 0 &&
            (grammar_can_end(c) != can_end || grammar_is_done(c) != done))
            abort();
        if (grammar_is_done(c) && !grammar_can_end(c)) abort();
        grammar_state_free(c);
    }
    grammar_state_free(start);
    grammar_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    cJSON *schema = cJSON_ParseWithLength((const char *)data, size);
    if (!schema) return 0;
    char *gbnf = grammar_from_json_schema(schema, err, sizeof(err));
    if (gbnf) {
        check_grammar(gbnf);
        free(gbnf);
    } else if (!strstr(err, "out of memory") && !good_message(err)) {
        abort(); /* a refusal must say why, on one line */
    }
    cJSON_Delete(schema);
    return 0;
}
