/* openai_fields.c -- what the parsers of the request's optional parts
 * (openai_constrain.c, openai_tools.c) share: a 400 about a field, the
 * out-of-memory 500, a member read as absent when null, and the refusal of
 * members a part does not have. */
#include "gateway/openai.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
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

const cJSON *openai_member(const cJSON *object, const char *name) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, name);
    return cJSON_IsNull(item) ? NULL : item;
}

int openai_check_keys(const cJSON *object, const char *param, const char *const *names,
                      struct openai_error *e) {
    const cJSON *item;
    cJSON_ArrayForEach(item, object) {
        int known = 0;
        for (int i = 0; names[i] && !known; i++) known = strcmp(item->string, names[i]) == 0;
        if (!known)
            return openai_refuse(e, param, "%s has an unknown field '%.40s'", param, item->string);
    }
    return 0;
}
