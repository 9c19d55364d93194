/* openai_messages.c -- Anthropic's Messages API (POST /v1/messages and
 * /v1/messages/count_tokens) on the chat machinery, as openai_responses.c
 * does for OpenAI's Responses: a request is rewritten into the chat
 * completions request it amounts to and parsed by openai_parse_request;
 * the answer is built as a message and, streamed, as Anthropic's events
 * (message_start, content_block_start/delta/stop, message_delta,
 * message_stop); errors take Anthropic's shape.
 *
 * The rewrite: system (a string or text blocks) is a system message;
 * each message's text blocks are its content, an assistant's tool_use
 * blocks its tool_calls (input as the arguments' JSON text), a user's
 * tool_result blocks tool messages before its text; max_tokens (required)
 * and stop_sequences keep their meaning; tools ({name, description,
 * input_schema}) and tool_choice (auto, any, tool, none;
 * disable_parallel_tool_use) take chat's shape. Server tools (web search,
 * bash, text editor, computer use, ...), thinking, containers and MCP
 * servers are refused. Errors name the Messages field. */
#include "openai/openai.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------- request -------------------------------- */

static const char *const known_fields[] = {
    "model",        "messages", "system",    "max_tokens",  "stop_sequences", "temperature",
    "top_p",        "top_k",    "stream",    "tools",       "tool_choice",    "metadata",
    "service_tier", "thinking", "container", "mcp_servers", "seed",           NULL};

static int oom(struct openai_error *e) {
    return openai_out_of_memory(e);
}

/* The text of a string or of text blocks (other blocks: skip, or refuse
 * when only_text); NULL with e. */
static char *blocks_text(const cJSON *content, const char *param, int only_text,
                         struct openai_error *e) {
    if (cJSON_IsString(content)) return strdup(content->valuestring);
    if (!cJSON_IsArray(content)) {
        openai_refuse(e, param, "%s must be a string or a list of content blocks", param);
        return NULL;
    }
    size_t size = 1, used = 0;
    const cJSON *block;
    cJSON_ArrayForEach(block, content) {
        const cJSON *text = openai_member(block, "text");
        size += cJSON_IsString(text) ? strlen(text->valuestring) : 0;
    }
    char *out = malloc(size);
    if (!out) {
        oom(e);
        return NULL;
    }
    int index = 0;
    cJSON_ArrayForEach(block, content) {
        const cJSON *type = openai_member(block, "type"), *text = openai_member(block, "text");
        const char *kind = cJSON_IsString(type) ? type->valuestring : "";
        int is_text = !strcmp(kind, "text") && cJSON_IsString(text);
        if (!is_text &&
            (only_text || (strcmp(kind, "tool_use") != 0 && strcmp(kind, "tool_result") != 0))) {
            openai_refuse(e, param,
                          "%s[%d] is a %.32s block; lockstep takes text, tool_use and "
                          "tool_result blocks",
                          param, index, kind[0] ? kind : "typeless");
            free(out);
            return NULL;
        }
        if (is_text) {
            memcpy(out + used, text->valuestring, strlen(text->valuestring));
            used += strlen(text->valuestring);
        }
        index++;
    }
    out[used] = '\0';
    return out;
}

/* {role, content} appended to chat's messages; the new message. */
static cJSON *add_message(cJSON *messages, const char *role, const char *content,
                          struct openai_error *e) {
    cJSON *m = cJSON_CreateObject();
    if (m && cJSON_AddStringToObject(m, "role", role) &&
        cJSON_AddStringToObject(m, "content", content) && cJSON_AddItemToArray(messages, m))
        return m;
    cJSON_Delete(m);
    oom(e);
    return NULL;
}

/* An assistant's tool_use block as a chat tool call of m. */
static int add_tool_use(cJSON *m, const cJSON *block, const char *param, struct openai_error *e) {
    const cJSON *id = openai_member(block, "id"), *name = openai_member(block, "name");
    const cJSON *input = openai_member(block, "input");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input))
        return openai_refuse(e, param, "%s needs an id, a name and an input object", param);
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!calls) calls = cJSON_AddArrayToObject(m, "tool_calls");
    char *arguments = cJSON_PrintUnformatted(input);
    cJSON *call = cJSON_CreateObject(), *function = cJSON_CreateObject();
    int ok = calls && arguments && call && function &&
             cJSON_AddStringToObject(call, "id", id->valuestring) &&
             cJSON_AddStringToObject(call, "type", "function") &&
             cJSON_AddStringToObject(function, "name", name->valuestring) &&
             cJSON_AddStringToObject(function, "arguments", arguments);
    free(arguments);
    if (ok && cJSON_AddItemToObject(call, "function", function)) {
        function = NULL;
        if (cJSON_AddItemToArray(calls, call)) return 0;
    }
    cJSON_Delete(function);
    cJSON_Delete(call);
    return oom(e);
}

/* A user's tool_result block as a tool message. */
static int add_tool_result(cJSON *messages, const cJSON *block, const char *param,
                           struct openai_error *e) {
    const cJSON *id = openai_member(block, "tool_use_id");
    if (!cJSON_IsString(id)) return openai_refuse(e, param, "%s needs a tool_use_id", param);
    const cJSON *content = openai_member(block, "content");
    char where[96];
    snprintf(where, sizeof(where), "%s.content", param);
    char *text = content ? blocks_text(content, where, 1, e) : strdup("");
    if (!text) return content ? -1 : oom(e);
    cJSON *m = add_message(messages, "tool", text, e);
    free(text);
    if (!m) return -1;
    return cJSON_AddStringToObject(m, "tool_call_id", id->valuestring) ? 0 : oom(e);
}

/* messages[i]: a user or assistant turn and its blocks. */
static int rewrite_message(const cJSON *item, int i, cJSON *messages, struct openai_error *e) {
    char param[48];
    snprintf(param, sizeof(param), "messages[%d]", i);
    const cJSON *role = openai_member(item, "role"), *content = openai_member(item, "content"),
                *block;
    const cJSON *blocks = cJSON_IsArray(content) ? content : NULL;
    int user = cJSON_IsString(role) && !strcmp(role->valuestring, "user");
    if (!cJSON_IsObject(item) ||
        !(user || (cJSON_IsString(role) && !strcmp(role->valuestring, "assistant"))))
        return openai_refuse(e, param, "%s.role must be user or assistant", param);
    snprintf(param, sizeof(param), "messages[%d].content", i);
    int index = 0;
    cJSON_ArrayForEach(block, blocks) {
        const cJSON *type = openai_member(block, "type");
        const char *kind = cJSON_IsString(type) ? type->valuestring : "";
        char where[64];
        snprintf(where, sizeof(where), "%s[%d]", param, index++);
        if (!strcmp(kind, "tool_result") && !user)
            return openai_refuse(e, where, "%s: a tool_result block is the user's", where);
        if (!strcmp(kind, "tool_result") && add_tool_result(messages, block, where, e)) return -1;
    }
    char *text = blocks_text(content, param, 0, e);
    if (!text) return -1;
    cJSON *m =
        user && !*text && index > 0 ? NULL : add_message(messages, role->valuestring, text, e);
    free(text);
    if (!m) return user && index > 0 && !e->status ? 0 : -1;
    index = 0;
    cJSON_ArrayForEach(block, blocks) {
        const cJSON *type = openai_member(block, "type");
        char where[64];
        snprintf(where, sizeof(where), "%s[%d]", param, index++);
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "tool_use") != 0) continue;
        if (user) return openai_refuse(e, where, "%s: a tool_use block is the assistant's", where);
        if (add_tool_use(m, block, where, e)) return -1;
    }
    return 0;
}

/* system and messages into chat's messages. */
static int rewrite_messages(const cJSON *root, cJSON *chat, struct openai_error *e) {
    const cJSON *system = openai_member(root, "system"),
                *messages = openai_member(root, "messages"), *item;
    cJSON *out = cJSON_AddArrayToObject(chat, "messages");
    if (!out) return oom(e);
    if (system) {
        char *text = blocks_text(system, "system", 1, e);
        cJSON *m = text ? add_message(out, "system", text, e) : NULL;
        free(text);
        if (!m) return -1;
    }
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0)
        return openai_refuse(e, "messages", "messages must be a non-empty list of messages");
    int i = 0;
    cJSON_ArrayForEach(item, messages) {
        if (rewrite_message(item, i++, out, e)) return -1;
    }
    return 0;
}

/* tools[i]: {name, description, input_schema} as a chat function tool. */
static int rewrite_tool(const cJSON *tool, int i, cJSON *tools, struct openai_error *e) {
    static const char *const keys[] = {"name", "description",   "input_schema",
                                       "type", "cache_control", NULL};
    char param[32];
    snprintf(param, sizeof(param), "tools[%d]", i);
    const cJSON *type = openai_member(tool, "type");
    if (!cJSON_IsObject(tool)) return openai_refuse(e, param, "%s must be an object", param);
    if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "custom")))
        return openai_refuse(e, param,
                             "%s is a %.40s tool: lockstep has client tools only (no web search, "
                             "bash, text editor, computer use or other server tools)",
                             param, cJSON_IsString(type) ? type->valuestring : "typed");
    if (openai_check_keys(tool, param, keys, e)) return -1;
    cJSON *wrapped = cJSON_CreateObject(), *function = cJSON_CreateObject();
    int failed =
        !wrapped || !function || !cJSON_AddStringToObject(wrapped, "type", "function") ||
        openai_copy_member(function, "name", openai_member(tool, "name"), e) ||
        openai_copy_member(function, "description", openai_member(tool, "description"), e) ||
        openai_copy_member(function, "parameters", openai_member(tool, "input_schema"), e);
    if (!failed && cJSON_AddItemToObject(wrapped, "function", function)) {
        function = NULL;
        if (cJSON_AddItemToArray(tools, wrapped)) return 0;
    }
    cJSON_Delete(function);
    cJSON_Delete(wrapped);
    return e->status ? -1 : oom(e);
}

/* tool_choice {type: auto | any | tool | none, name, disable_parallel_tool_use}. */
static int rewrite_choice(const cJSON *choice, cJSON *chat, struct openai_error *e) {
    const cJSON *type = openai_member(choice, "type"), *name = openai_member(choice, "name");
    const cJSON *single = openai_member(choice, "disable_parallel_tool_use");
    const char *kind = cJSON_IsString(type) ? type->valuestring : "";
    if (!cJSON_IsObject(choice))
        return openai_refuse(e, "tool_choice", "tool_choice must be an object with a type");
    if (single && !cJSON_IsBool(single))
        return openai_refuse(e, "tool_choice.disable_parallel_tool_use",
                             "tool_choice.disable_parallel_tool_use must be a boolean");
    if (cJSON_IsTrue(single) && !cJSON_AddFalseToObject(chat, "parallel_tool_calls")) return oom(e);
    if (!strcmp(kind, "auto") || !strcmp(kind, "none"))
        return cJSON_AddStringToObject(chat, "tool_choice", kind) ? 0 : oom(e);
    if (!strcmp(kind, "any"))
        return cJSON_AddStringToObject(chat, "tool_choice", "required") ? 0 : oom(e);
    if (strcmp(kind, "tool") != 0 || !cJSON_IsString(name))
        return openai_refuse(e, "tool_choice",
                             "tool_choice.type must be auto, any, none or tool (with a name)");
    cJSON *named = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON *function = named ? cJSON_AddObjectToObject(named, "function") : NULL;
    if (!function || !cJSON_AddStringToObject(named, "type", "function") ||
        !cJSON_AddStringToObject(function, "name", name->valuestring))
        return oom(e);
    return 0;
}

static int rewrite_tools(const cJSON *root, cJSON *chat, struct openai_error *e) {
    const cJSON *tools = openai_member(root, "tools"), *choice = openai_member(root, "tool_choice"),
                *tool;
    if (tools) {
        if (!cJSON_IsArray(tools)) return openai_refuse(e, "tools", "tools must be a list");
        cJSON *list = cJSON_AddArrayToObject(chat, "tools");
        if (!list) return oom(e);
        int i = 0;
        cJSON_ArrayForEach(tool, tools) {
            if (rewrite_tool(tool, i++, list, e)) return -1;
        }
    }
    return choice ? rewrite_choice(choice, chat, e) : 0;
}

/* What lockstep refuses, and the fields it does not know. */
static int refuse_unsupported(const cJSON *root, struct openai_error *e) {
    const cJSON *item, *thinking = openai_member(root, "thinking"), *type;
    cJSON_ArrayForEach(item, root) {
        int known = 0;
        for (int i = 0; known_fields[i] && !known; i++)
            known = !strcmp(item->string, known_fields[i]);
        if (!known)
            return openai_refuse(e, item->string, "%.40s: Extra inputs are not permitted",
                                 item->string);
    }
    type = thinking ? openai_member(thinking, "type") : NULL;
    if (thinking && !(cJSON_IsString(type) && !strcmp(type->valuestring, "disabled")))
        return openai_refuse(e, "thinking",
                             "thinking is not supported (only {\"type\": \"disabled\"})");
    if (openai_member(root, "container"))
        return openai_refuse(e, "container", "container is not supported (no server tools)");
    if (openai_member(root, "mcp_servers"))
        return openai_refuse(e, "mcp_servers", "mcp_servers is not supported (client tools only)");
    return 0;
}

/* The chat request root amounts to, or NULL with e. */
static cJSON *rewrite(const cJSON *root, int count_only, struct openai_error *e) {
    static const char *const same[] = {"model",  "temperature", "top_p", "top_k",
                                       "stream", "seed",        NULL};
    cJSON *chat = cJSON_CreateObject();
    if (!chat) {
        oom(e);
        return NULL;
    }
    const cJSON *max_tokens = openai_member(root, "max_tokens");
    int failed = refuse_unsupported(root, e) || rewrite_messages(root, chat, e) ||
                 rewrite_tools(root, chat, e) ||
                 openai_copy_member(chat, "stop", openai_member(root, "stop_sequences"), e);
    if (!failed && !count_only && !max_tokens)
        failed = openai_refuse(e, "max_tokens", "max_tokens: Field required");
    if (!failed && !count_only) failed = openai_copy_member(chat, "max_tokens", max_tokens, e);
    for (int i = 0; !failed && same[i]; i++)
        failed = openai_copy_member(chat, same[i], openai_member(root, same[i]), e);
    if (!failed) return chat;
    cJSON_Delete(chat);
    return NULL;
}

int openai_parse_messages(const char *body, size_t len, int count_only, struct openai_request *out,
                          struct openai_error *error) {
    memset(out, 0, sizeof(*out));
    memset(error, 0, sizeof(*error));
    cJSON *root = openai_parse_object(body, len, "the request body", error);
    if (!root) return -1;
    /* chat's refusals name chat's fields; the client sent these */
    static const char *const renames[][2] = {{"stop", "stop_sequences"}};
    int rc = openai_parse_rewritten(rewrite(root, count_only, error), renames, 1, out, error);
    cJSON_Delete(root);
    if (rc == 0) out->anthropic = 1;
    return rc;
}

/* ------------------------------- answers -------------------------------- */

/* A tool_use block: the arguments' JSON text as the input object ({} in
 * progress, or if it does not parse, which a grammar-made call cannot). */
static cJSON *tool_use_json(const struct openai_tool_call *call, int done, int *failed) {
    cJSON *block = cJSON_CreateObject();
    cJSON *input = done ? cJSON_Parse(call->arguments) : NULL;
    if (!cJSON_IsObject(input)) {
        cJSON_Delete(input);
        input = cJSON_CreateObject();
    }
    openai_json_add(block, "type", cJSON_CreateString("tool_use"), failed);
    openai_json_add(block, "id", openai_json_text(call->id, strlen(call->id)), failed);
    openai_json_add(block, "name", openai_json_text(call->name, strlen(call->name)), failed);
    openai_json_add(block, "input", input, failed);
    return block;
}

static cJSON *text_block_json(const char *text, size_t length, int *failed) {
    cJSON *block = cJSON_CreateObject();
    openai_json_add(block, "type", cJSON_CreateString("text"), failed);
    openai_json_add(block, "text", openai_json_text(text, length), failed);
    return block;
}

static cJSON *usage_json(const struct openai_usage *u, int output_only, int *failed) {
    cJSON *usage = cJSON_CreateObject();
    if (!output_only) {
        openai_json_add(usage, "input_tokens",
                        cJSON_CreateNumber(u->prompt_tokens - u->cached_tokens), failed);
        openai_json_add(usage, "cache_creation_input_tokens", cJSON_CreateNumber(0), failed);
        openai_json_add(usage, "cache_read_input_tokens", cJSON_CreateNumber(u->cached_tokens),
                        failed);
    }
    openai_json_add(usage, "output_tokens", cJSON_CreateNumber(u->completion_tokens), failed);
    return usage;
}

static cJSON *nullable(const char *text) {
    return text ? openai_json_text(text, strlen(text)) : cJSON_CreateNull();
}

/* The message object; its content only once it is done. */
static cJSON *message_json(const struct openai_messages_output *o, int done, int *failed) {
    cJSON *root = cJSON_CreateObject();
    openai_json_add(root, "id", cJSON_CreateString(o->id), failed);
    openai_json_add(root, "type", cJSON_CreateString("message"), failed);
    openai_json_add(root, "role", cJSON_CreateString("assistant"), failed);
    openai_json_add(root, "model", nullable(o->model), failed);
    cJSON *content = openai_json_add(root, "content", cJSON_CreateArray(), failed);
    for (int k = 0; done && k < o->has_text + o->n_calls; k++)
        openai_json_add(content, NULL,
                        o->has_text && k == 0
                            ? text_block_json(o->text, o->length, failed)
                            : tool_use_json(&o->calls[k - o->has_text], 1, failed),
                        failed);
    openai_json_add(root, "stop_reason", nullable(done ? o->stop_reason : NULL), failed);
    openai_json_add(root, "stop_sequence", nullable(done ? o->stop_sequence : NULL), failed);
    openai_json_add(root, "usage", usage_json(&o->usage, 0, failed), failed);
    return root;
}

static char *print(cJSON *root, int failed) {
    char *text = failed ? NULL : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

char *openai_messages_json(const struct openai_messages_output *o) {
    int failed = 0;
    return print(message_json(o, 1, &failed), failed);
}

static const char *const event_names[] = {
    [OPENAI_MESSAGES_START] = "message_start",
    [OPENAI_MESSAGES_BLOCK_START] = "content_block_start",
    [OPENAI_MESSAGES_TEXT_DELTA] = "content_block_delta",
    [OPENAI_MESSAGES_JSON_DELTA] = "content_block_delta",
    [OPENAI_MESSAGES_BLOCK_STOP] = "content_block_stop",
    [OPENAI_MESSAGES_DELTA] = "message_delta",
    [OPENAI_MESSAGES_STOP] = "message_stop",
};

const char *openai_messages_event_name(enum openai_messages_event event) {
    return event_names[event];
}

char *openai_messages_event_json(const struct openai_messages_output *o,
                                 enum openai_messages_event event, int k, const char *delta,
                                 size_t length) {
    int failed = 0;
    cJSON *root = cJSON_CreateObject();
    openai_json_add(root, "type", cJSON_CreateString(event_names[event]), &failed);
    if (event == OPENAI_MESSAGES_START) { /* nothing generated yet, as far as it says */
        struct openai_messages_output start = *o;
        start.usage.completion_tokens = 0;
        openai_json_add(root, "message", message_json(&start, 0, &failed), &failed);
    }
    if (event == OPENAI_MESSAGES_BLOCK_START || event == OPENAI_MESSAGES_TEXT_DELTA ||
        event == OPENAI_MESSAGES_JSON_DELTA || event == OPENAI_MESSAGES_BLOCK_STOP)
        openai_json_add(root, "index", cJSON_CreateNumber(k), &failed);
    if (event == OPENAI_MESSAGES_BLOCK_START)
        openai_json_add(root, "content_block",
                        o->has_text && k == 0
                            ? text_block_json("", 0, &failed)
                            : tool_use_json(&o->calls[k - o->has_text], 0, &failed),
                        &failed);
    if (event == OPENAI_MESSAGES_TEXT_DELTA || event == OPENAI_MESSAGES_JSON_DELTA) {
        int text = event == OPENAI_MESSAGES_TEXT_DELTA;
        cJSON *d = openai_json_add(root, "delta", cJSON_CreateObject(), &failed);
        openai_json_add(d, "type", cJSON_CreateString(text ? "text_delta" : "input_json_delta"),
                        &failed);
        openai_json_add(d, text ? "text" : "partial_json", openai_json_text(delta, length),
                        &failed);
    }
    if (event == OPENAI_MESSAGES_DELTA) {
        cJSON *d = openai_json_add(root, "delta", cJSON_CreateObject(), &failed);
        openai_json_add(d, "stop_reason", nullable(o->stop_reason), &failed);
        openai_json_add(d, "stop_sequence", nullable(o->stop_sequence), &failed);
        openai_json_add(root, "usage", usage_json(&o->usage, 1, &failed), &failed);
    }
    return print(root, failed);
}

char *openai_messages_error_json(const struct openai_error *e) {
    int failed = 0;
    const char *type = e->status == 401   ? "authentication_error"
                       : e->status == 403 ? "permission_error"
                       : e->status == 404 ? "not_found_error"
                       : e->status == 413 ? "request_too_large"
                       : e->status == 429 ? "rate_limit_error"
                       : e->status == 503 ? "overloaded_error"
                       : e->status >= 500 ? "api_error"
                                          : "invalid_request_error";
    cJSON *root = cJSON_CreateObject();
    openai_json_add(root, "type", cJSON_CreateString("error"), &failed);
    cJSON *error = openai_json_add(root, "error", cJSON_CreateObject(), &failed);
    openai_json_add(error, "type", cJSON_CreateString(type), &failed);
    openai_json_add(error, "message", openai_json_text(e->message, strlen(e->message)), &failed);
    return print(root, failed);
}
