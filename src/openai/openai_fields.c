/* openai_fields.c -- what the gateway's JSON readers share: a body parsed
 * as one object with errors that say where (and a nesting too deep for the
 * parser said as such), a 400 about a field, the out-of-memory 500, a
 * member read as absent when null, and the refusal of members an object
 * does not have or has twice. The OpenAI endpoints, the admin API and
 * /tokenize all read their bodies through these. */
#include "openai/openai.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int openai_refuse(struct openai_error *e, const char *param, const char *format, ...) {
    va_list args;
    va_start(args, format);
    char message[sizeof(e->message)];
    vsnprintf(message, sizeof(message), format, args);
    va_end(args);
    /* a client's text (a grammar, a schema, a name) may be quoted: the
     * message stays one line */
    for (char *c = message; *c; c++)
        if ((unsigned char)*c < 0x20) *c = ' ';
    openai_error_set(e, 400, "invalid_request_error", param, NULL, "%s", message);
    return -1;
}

int openai_out_of_memory(struct openai_error *e) {
    openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory while parsing the request");
    return -1;
}

int openai_parse_rewritten(cJSON *chat, const char *const (*renames)[2], int n_renames,
                           struct openai_request *out, struct openai_error *e) {
    char *text = chat ? cJSON_PrintUnformatted(chat) : NULL;
    cJSON_Delete(chat);
    if (chat && !text) openai_out_of_memory(e);
    int rc = text ? openai_parse_request(text, strlen(text), OPENAI_CHAT, out, e) : -1;
    free(text);
    for (int i = 0; rc && text && i < n_renames; i++) {
        size_t n = strlen(renames[i][0]);
        if (strncmp(e->param, renames[i][0], n) != 0) continue;
        char renamed[sizeof(e->param) + 32];
        snprintf(renamed, sizeof(renamed), "%s%s", renames[i][1], e->param + n);
        memcpy(e->param, renamed, sizeof(e->param) - 1); /* cut to fit, as every param is */
        e->param[sizeof(e->param) - 1] = '\0';
        break;
    }
    return rc;
}

int openai_copy_member(cJSON *object, const char *key, const cJSON *value, struct openai_error *e) {
    if (!value) return 0;
    cJSON *copy = cJSON_Duplicate(value, 1);
    if (copy && cJSON_AddItemToObject(object, key, copy)) return 0;
    cJSON_Delete(copy);
    return openai_out_of_memory(e);
}

const cJSON *openai_member(const cJSON *object, const char *name) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, name);
    return cJSON_IsNull(item) ? NULL : item;
}

int openai_check_keys(const cJSON *object, const char *param, const char *const *names,
                      struct openai_error *e) {
    uint64_t seen = 0; /* bit i: names[i] was met (an object has at most 64 names) */
    const cJSON *item;
    cJSON_ArrayForEach(item, object) {
        int known = -1;
        for (int i = 0; i < 64 && names[i] && known < 0; i++)
            if (strcmp(item->string, names[i]) == 0) known = i;
        if (known < 0)
            return openai_refuse(e, param, "%s has an unknown field '%.40s'", param, item->string);
        /* cJSON keeps both of a duplicate, and its readers see the first */
        if (seen & (uint64_t)1 << known)
            return openai_refuse(e, param, "%s has the field '%s' more than once", param,
                                 names[known]);
        seen |= (uint64_t)1 << known;
    }
    return 0;
}

/* Where byte offset lies in text, for an error message: 1-based line and column. */
static void locate(const char *text, size_t offset, int *line, int *column) {
    *line = 1;
    *column = 1;
    for (size_t i = 0; i < offset; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *column = 1;
        } else {
            (*column)++;
        }
    }
}

/* How deep in arrays and objects offset is in text (strings skipped). */
static int depth_at(const char *text, size_t offset) {
    int depth = 0, in_string = 0;
    for (size_t i = 0; i < offset; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '[' || c == '{') {
            depth++;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return depth;
}

cJSON *openai_parse_object(const char *text, size_t len, const char *what, struct openai_error *e) {
    if (text == NULL || len == 0) {
        openai_refuse(e, NULL, "%s is empty; expected a JSON object", what);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    size_t offset = end != NULL && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    const char *problem = "is not valid JSON";
    if (root != NULL) {
        while (offset < len && text[offset] != '\0' && strchr(" \t\r\n", text[offset]) != NULL)
            offset++;
        if (offset == len) {
            if (cJSON_IsObject(root)) return root;
            cJSON_Delete(root);
            openai_refuse(e, NULL, "%s must be a JSON object", what);
            return NULL;
        }
        cJSON_Delete(root);
        problem = "has unexpected data after the JSON value";
    } else if (depth_at(text, offset) >= CJSON_NESTING_LIMIT) {
        problem = "is nested deeper than the " OPENAI_STRINGIFY(
            CJSON_NESTING_LIMIT) " levels of arrays and objects a body may have";
    }
    int line, column;
    locate(text, offset, &line, &column);
    openai_refuse(e, NULL, "%s %s: error at line %d, column %d (byte %zu)", what, problem, line,
                  column, offset);
    return NULL;
}
