/* openai_tools.c -- OpenAI tool calling, request side: the tools,
 * tool_choice and parallel_tool_calls fields, the tool-call fields of
 * messages (an assistant's tool_calls, a tool message's tool_call_id), and
 * the grammar that makes a model write calls.
 *
 * Each tool's parameters schema is converted to a grammar when the body is
 * parsed (src/grammar's grammar_from_json_schema), so a schema outside the
 * subset is a 400 naming its keyword before any runner is involved. The
 * calls' grammar depends on the model's chat family (how it writes calls,
 * struct tokenizer_tool_format), so the gateway builds it when the request
 * meets its instance (openai_tools_grammar): the converted grammars are
 * embedded with their rule names prefixed ("t<i>-", renamed here), under
 * rules of its own named "tc-*" and root. */
#include "openai/openai.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------- errors --------------------------------- */

/* A string member copied to *out (NULL when absent and not required). */
static int copy_member(const cJSON *object, const char *key, const char *param, int required,
                       char **out, struct openai_error *e) {
    const cJSON *item = openai_member(object, key);
    if (item == NULL && !required) return 0;
    if (item == NULL) return openai_refuse(e, param, "%s is required", param);
    if (!cJSON_IsString(item)) return openai_refuse(e, param, "%s must be a string", param);
    *out = strdup(item->valuestring);
    return *out ? 0 : openai_out_of_memory(e);
}

/* 1 if value is "function" (the one tool type). */
static int is_function_type(const cJSON *value) {
    return cJSON_IsString(value) && strcmp(value->valuestring, "function") == 0;
}

/* -------------------------------- tools --------------------------------- */

/* 1 if a and b are the same name (NULL is no name). */
static int same_name(const char *a, const char *b) {
    return a && b && strcmp(a, b) == 0;
}

/* 1 if name is a function name OpenAI accepts: [a-zA-Z0-9_-]{1,64}. */
static int valid_name(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > OPENAI_TOOL_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* tools[i].function.parameters: kept as compact JSON text and converted to
 * the arguments' grammar ({} or absent: any JSON object). */
static int parse_parameters(const cJSON *function, int i, struct openai_tool *tool,
                            struct openai_error *e) {
    char param[64], err[200];
    snprintf(param, sizeof(param), "tools[%d].function.parameters", i);
    const cJSON *schema = openai_member(function, "parameters");
    if (schema && !cJSON_IsObject(schema))
        return openai_refuse(e, param, "%s must be a JSON Schema object", param);
    const cJSON *type = schema ? openai_member(schema, "type") : NULL;
    if (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "object") == 0))
        return openai_refuse(e, param, "%s must describe an object (\"type\": \"object\")", param);
    if (schema) {
        tool->parameters = cJSON_PrintUnformatted(schema);
        if (!tool->parameters) return openai_out_of_memory(e);
    }
    tool->grammar =
        grammar_from_json_schema(schema && schema->child ? schema : NULL, err, sizeof(err));
    if (!tool->grammar) return openai_refuse(e, param, "%s: %s", param, err);
    return 0;
}

/* tools[i]: {"type": "function", "function": {name, description,
 * parameters, strict}}. */
static int parse_tool(const cJSON *item, int i, struct openai_tool *tool, struct openai_error *e) {
    static const char *const tool_keys[] = {"type", "function", NULL};
    static const char *const function_keys[] = {"name", "description", "parameters", "strict",
                                                NULL};
    char param[64];
    snprintf(param, sizeof(param), "tools[%d]", i);
    if (!cJSON_IsObject(item)) return openai_refuse(e, param, "%s must be an object", param);
    if (openai_check_keys(item, param, tool_keys, e)) return -1;
    snprintf(param, sizeof(param), "tools[%d].type", i);
    if (!is_function_type(openai_member(item, "type")))
        return openai_refuse(e, param, "%s must be \"function\"", param);
    const cJSON *function = openai_member(item, "function");
    snprintf(param, sizeof(param), "tools[%d].function", i);
    if (!cJSON_IsObject(function)) return openai_refuse(e, param, "%s must be an object", param);
    if (openai_check_keys(function, param, function_keys, e)) return -1;
    snprintf(param, sizeof(param), "tools[%d].function.name", i);
    if (copy_member(function, "name", param, 1, &tool->name, e)) return -1;
    if (!valid_name(tool->name))
        return openai_refuse(
            e, param, "%s must be 1 to %d letters, digits, underscores or dashes, got \"%.64s\"",
            param, OPENAI_TOOL_NAME_MAX, tool->name);
    snprintf(param, sizeof(param), "tools[%d].function.description", i);
    if (copy_member(function, "description", param, 0, &tool->description, e)) return -1;
    const cJSON *strict = openai_member(function, "strict");
    snprintf(param, sizeof(param), "tools[%d].function.strict", i);
    if (strict && !cJSON_IsBool(strict))
        return openai_refuse(e, param, "%s must be a boolean", param);
    return parse_parameters(function, i, tool, e);
}

static int parse_tool_list(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    const cJSON *tools = openai_member(root, "tools");
    if (tools == NULL) return 0;
    if (!cJSON_IsArray(tools)) return openai_refuse(e, "tools", "tools must be an array of tools");
    int n = cJSON_GetArraySize(tools);
    if (n > OPENAI_TOOLS_MAX)
        return openai_refuse(e, "tools", "tools may hold at most %d tools, got %d",
                             OPENAI_TOOLS_MAX, n);
    if (n == 0) return 0;
    out->tools = calloc((size_t)n, sizeof(*out->tools));
    if (!out->tools) return openai_out_of_memory(e);
    const cJSON *item;
    cJSON_ArrayForEach(item, tools) {
        int i = out->n_tools++;
        if (parse_tool(item, i, &out->tools[i], e)) return -1;
        for (int j = 0; j < i; j++)
            if (same_name(out->tools[j].name, out->tools[i].name)) {
                char param[64];
                snprintf(param, sizeof(param), "tools[%d].function.name", i);
                return openai_refuse(e, param, "%s \"%s\" is the name of tools[%d] too", param,
                                     out->tools[i].name, j);
            }
    }
    return 0;
}

/* The index of the tool called name, or -1. */
static int find_tool(const struct openai_request *r, const char *name) {
    for (int i = 0; i < r->n_tools; i++)
        if (same_name(r->tools[i].name, name)) return i;
    return -1;
}

/* {"type": "function", "function": {"name": ...}}: a tool given. */
static int parse_named_choice(const cJSON *choice, struct openai_request *out,
                              struct openai_error *e) {
    static const char *const keys[] = {"type", "function", NULL};
    static const char *const function_keys[] = {"name", NULL};
    if (openai_check_keys(choice, "tool_choice", keys, e)) return -1;
    if (!is_function_type(openai_member(choice, "type")))
        return openai_refuse(e, "tool_choice.type", "tool_choice.type must be \"function\"");
    const cJSON *function = openai_member(choice, "function");
    if (!cJSON_IsObject(function))
        return openai_refuse(e, "tool_choice.function", "tool_choice.function must be an object");
    if (openai_check_keys(function, "tool_choice.function", function_keys, e)) return -1;
    const cJSON *name = openai_member(function, "name");
    if (!cJSON_IsString(name))
        return openai_refuse(e, "tool_choice.function.name",
                             "tool_choice.function.name must be a string");
    out->tool_choice = OPENAI_TOOLS_FUNCTION;
    out->tool_choice_index = find_tool(out, name->valuestring);
    if (out->tool_choice_index < 0)
        return openai_refuse(
            e, "tool_choice.function.name",
            "tool_choice.function.name \"%.64s\" is not the name of any of the tools",
            name->valuestring);
    return 0;
}

/* tool_choice: "none", "auto", "required" or a tool named; the default is
 * "auto" with tools and "none" without. */
static int parse_tool_choice(const cJSON *root, struct openai_request *out,
                             struct openai_error *e) {
    static const char *const names[] = {"none", "auto", "required"};
    const cJSON *choice = openai_member(root, "tool_choice");
    out->tool_choice = out->n_tools > 0 ? OPENAI_TOOLS_AUTO : OPENAI_TOOLS_NONE;
    if (choice == NULL) return 0;
    if (cJSON_IsObject(choice)) {
        if (out->n_tools == 0)
            return openai_refuse(e, "tool_choice",
                                 "tool_choice names a function but no tools are given");
        return parse_named_choice(choice, out, e);
    }
    for (int i = 0; cJSON_IsString(choice) && i < 3; i++)
        if (strcmp(choice->valuestring, names[i]) == 0) {
            if (i == 2 && out->n_tools == 0)
                return openai_refuse(e, "tool_choice", "tool_choice \"required\" needs tools");
            /* "auto" without tools: nothing to call */
            out->tool_choice = i == 0 || out->n_tools == 0 ? OPENAI_TOOLS_NONE
                               : i == 1                    ? OPENAI_TOOLS_AUTO
                                                           : OPENAI_TOOLS_REQUIRED;
            return 0;
        }
    return openai_refuse(e, "tool_choice",
                         "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": "
                         "\"function\", \"function\": {\"name\": ...}}");
}

int openai_parse_tools(const cJSON *root, struct openai_request *out, struct openai_error *e) {
    const cJSON *parallel = openai_member(root, "parallel_tool_calls");
    out->parallel_tool_calls = 1;
    if (out->kind != OPENAI_CHAT) return 0;
    if (parallel && !cJSON_IsBool(parallel))
        return openai_refuse(e, "parallel_tool_calls", "parallel_tool_calls must be a boolean");
    if (parallel) out->parallel_tool_calls = cJSON_IsTrue(parallel);
    if (parse_tool_list(root, out, e) || parse_tool_choice(root, out, e)) return -1;
    if (out->tool_choice != OPENAI_TOOLS_NONE && out->grammar)
        return openai_refuse(e, "tools",
                             "tools cannot be combined with response_format or grammar (unless "
                             "tool_choice is \"none\")");
    return 0;
}

/* ------------------------------- messages ------------------------------- */

/* messages[index].tool_calls[j]: {"id", "type": "function", "function":
 * {"name", "arguments"}}. */
static int parse_message_call(const cJSON *item, int index, int j, struct openai_tool_call *call,
                              struct openai_error *e) {
    char param[96];
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d]", index, j);
    if (!cJSON_IsObject(item)) return openai_refuse(e, param, "%s must be an object", param);
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d].id", index, j);
    if (copy_member(item, "id", param, 1, &call->id, e)) return -1;
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d].type", index, j);
    const cJSON *type = openai_member(item, "type");
    if (type && !is_function_type(type))
        return openai_refuse(e, param, "%s must be \"function\"", param);
    const cJSON *function = openai_member(item, "function");
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d].function", index, j);
    if (!cJSON_IsObject(function)) return openai_refuse(e, param, "%s must be an object", param);
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d].function.name", index, j);
    if (copy_member(function, "name", param, 1, &call->name, e)) return -1;
    snprintf(param, sizeof(param), "messages[%d].tool_calls[%d].function.arguments", index, j);
    return copy_member(function, "arguments", param, 1, &call->arguments, e);
}

static int parse_message_calls(const cJSON *calls, int index, struct openai_message *out,
                               struct openai_error *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].tool_calls", index);
    if (strcmp(out->role, "assistant") != 0)
        return openai_refuse(e, param, "%s is only allowed in assistant messages", param);
    if (!cJSON_IsArray(calls)) return openai_refuse(e, param, "%s must be an array", param);
    int n = cJSON_GetArraySize(calls);
    if (n == 0) return 0;
    out->tool_calls = calloc((size_t)n, sizeof(*out->tool_calls));
    if (!out->tool_calls) return openai_out_of_memory(e);
    const cJSON *item;
    cJSON_ArrayForEach(item, calls) {
        int j = out->n_tool_calls++;
        if (parse_message_call(item, index, j, &out->tool_calls[j], e)) return -1;
    }
    return 0;
}

int openai_parse_message_tools(const cJSON *message, int index, struct openai_message *out,
                               struct openai_error *e) {
    char param[64];
    const cJSON *calls = openai_member(message, "tool_calls");
    if (calls && parse_message_calls(calls, index, out, e)) return -1;
    snprintf(param, sizeof(param), "messages[%d].tool_call_id", index);
    int tool = strcmp(out->role, "tool") == 0;
    if (!tool) {
        if (openai_member(message, "tool_call_id"))
            return openai_refuse(e, param, "%s is only allowed in tool messages", param);
        return 0;
    }
    if (copy_member(message, "tool_call_id", param, 1, &out->tool_call_id, e)) return -1;
    snprintf(param, sizeof(param), "messages[%d].name", index);
    return copy_member(message, "name", param, 0, &out->name, e);
}

void openai_tools_free(struct openai_request *request) {
    for (int i = 0; i < request->n_tools; i++) {
        free(request->tools[i].name);
        free(request->tools[i].description);
        free(request->tools[i].parameters);
        free(request->tools[i].grammar);
    }
    free(request->tools);
    request->tools = NULL;
    request->n_tools = 0;
    for (int i = 0; i < request->n_messages && request->messages; i++) {
        struct openai_message *m = &request->messages[i];
        for (int j = 0; j < m->n_tool_calls; j++) {
            free(m->tool_calls[j].id);
            free(m->tool_calls[j].name);
            free(m->tool_calls[j].arguments);
        }
        free(m->tool_calls);
        free(m->tool_call_id);
        free(m->name);
        m->tool_calls = NULL;
        m->n_tool_calls = 0;
        m->tool_call_id = m->name = NULL;
    }
}

/* ------------------------------- grammar -------------------------------- */

/* A growing string; oom set once an allocation failed. */
struct tools_text {
    char *p;        /* NUL-terminated text, or NULL */
    size_t n, size; /* bytes used (without the NUL) and allocated */
    int oom;        /* 1: an append failed (p holds what came before) */
};

static void put_bytes(struct tools_text *t, const char *s, size_t n) {
    if (t->oom) return;
    if (t->n + n + 1 > t->size) {
        size_t size = 2 * (t->n + n + 1) + 256;
        char *grown = realloc(t->p, size);
        if (!grown) {
            t->oom = 1;
            return;
        }
        t->p = grown;
        t->size = size;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = '\0';
}

static void put(struct tools_text *t, const char *s) {
    put_bytes(t, s, strlen(s));
}

/* s as a GBNF literal "..." (nothing when s is empty). */
static void put_literal(struct tools_text *t, const char *s) {
    if (!*s) return;
    put(t, " \"");
    for (; *s; s++) {
        char c = *s;
        const char *escape = c == '"'    ? "\\\""
                             : c == '\\' ? "\\\\"
                             : c == '\n' ? "\\n"
                             : c == '\r' ? "\\r"
                             : c == '\t' ? "\\t"
                                         : NULL;
        if (escape)
            put(t, escape);
        else
            put_bytes(t, &c, 1);
    }
    put(t, "\"");
}

static int word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Length of the span at s that ends with close (its first unescaped one
 * after s[0]), escapes skipped; up to the end if there is none. */
static size_t span(const char *s, char close) {
    size_t i = 1;
    while (s[i] && s[i] != close) i += s[i] == '\\' && s[i + 1] ? 2 : 1;
    return s[i] ? i + 1 : i;
}

/* Appends GBNF text with every rule name prefixed: names are the words
 * ([a-zA-Z0-9_-]+) outside literals "...", classes [...], repetition
 * counts {m,n} and comments. */
static void rename_rules(struct tools_text *t, const char *gbnf, const char *prefix) {
    const char *s = gbnf;
    while (*s) {
        size_t n = 1;
        if (*s == '"')
            n = span(s, '"');
        else if (*s == '[')
            n = span(s, ']');
        else if (*s == '{')
            n = span(s, '}');
        else if (*s == '#')
            n = strcspn(s, "\r\n");
        else if (word_char(*s)) {
            while (word_char(s[n])) n++;
            put(t, prefix);
        }
        put_bytes(t, s, n);
        s += n;
    }
}

/* tc-f<i> ::= the call of tool i after {"name": -- its name, the
 * arguments' key and its grammar's root, renamed t<i>-root. */
static void put_function_rule(struct tools_text *t, const struct openai_tool *tool, int i,
                              const char *arguments_key) {
    char head[48], quoted[OPENAI_TOOL_NAME_MAX + 8], key[48], prefix[16];
    snprintf(head, sizeof(head), "tc-f%d ::=", i);
    snprintf(quoted, sizeof(quoted), "\"%s\",", tool->name);
    snprintf(key, sizeof(key), "\"%s\":", arguments_key);
    snprintf(prefix, sizeof(prefix), "t%d-", i);
    put(t, head);
    put_literal(t, quoted);
    put(t, " tc-ws");
    put_literal(t, key);
    put(t, " tc-ws ");
    put(t, prefix);
    put(t, "root\n");
    rename_rules(t, tool->grammar, prefix);
}

/* root, tc-call and tc-ws for the calls in format, over the tools in [first, end). */
static void put_call_rules(struct tools_text *t, const struct openai_request *r,
                           const struct tokenizer_tool_format *f, int first, int end) {
    char start[128];
    snprintf(start, sizeof(start), "%s%s{\"name\"", f->list_open, f->call_open);
    put(t, "root ::=");
    if (strncmp(start, f->trigger, strlen(f->trigger)) != 0) put_literal(t, f->trigger);
    put_literal(t, f->list_open);
    put(t, " tc-call");
    if (r->parallel_tool_calls) {
        put(t, " (");
        put_literal(t, f->call_separator);
        put(t, " tc-call )*");
    }
    put_literal(t, f->list_close);
    put(t, "\ntc-call ::=");
    put_literal(t, f->call_open);
    put_literal(t, "{\"name\":");
    put(t, " tc-ws (");
    for (int i = first; i < end; i++) {
        char name[24];
        snprintf(name, sizeof(name), "%s tc-f%d", i > first ? " |" : "", i);
        put(t, name);
    }
    put(t, " ) tc-ws");
    put_literal(t, "}");
    put_literal(t, f->call_close);
    put(t, "\ntc-ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n");
}

int openai_tools_grammar(const struct openai_request *r, const struct tokenizer_tool_format *f,
                         char **out, struct openai_error *e) {
    struct tools_text t = {0};
    int named = r->tool_choice == OPENAI_TOOLS_FUNCTION;
    int first = named ? r->tool_choice_index : 0, end = named ? first + 1 : r->n_tools;
    char err[200];
    *out = NULL;
    put_call_rules(&t, r, f, first, end);
    for (int i = first; i < end; i++) put_function_rule(&t, &r->tools[i], i, f->arguments_key);
    if (t.oom) {
        free(t.p);
        openai_error_set(e, 500, "server_error", NULL, NULL,
                         "out of memory for the tools' grammar");
        return -1;
    }
    if (t.n > OPENAI_GRAMMAR_MAX) {
        free(t.p);
        return openai_refuse(e, "tools", "the tools' grammar has %zu bytes; at most %d are allowed",
                             t.n, OPENAI_GRAMMAR_MAX);
    }
    struct grammar *g = NULL;
    if (grammar_compile(&g, t.p, t.n, err, sizeof(err))) {
        free(t.p);
        openai_error_set(e, 500, "server_error", "tools", NULL,
                         "the tools' grammar does not compile (a bug): %s", err);
        return -1;
    }
    grammar_free(g);
    *out = t.p;
    return 0;
}
