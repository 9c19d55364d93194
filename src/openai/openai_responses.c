/* openai_responses.c -- OpenAI's Responses API (POST /v1/responses) on the
 * chat machinery: a request is rewritten into the chat completions request
 * it amounts to and parsed by openai_parse_request, so every rule of chat
 * (sampling, tools and their grammars, structured outputs) holds as one;
 * the answer is built as a response object and, streamed, as its typed
 * events (response.created ... response.completed).
 *
 * The rewrite: instructions become a system message; input (a string, or
 * items: messages with text parts, function_call and function_call_output)
 * become messages, consecutive function calls one assistant message with
 * tool_calls; max_output_tokens is max_completion_tokens; function tools
 * ({type, name, description, parameters, strict}) and tool_choice take
 * chat's nested shape; text.format is response_format. lockstep keeps no
 * responses: store true and previous_response_id are refused, as are the
 * built-in tools (web search, file search, computer use, ...) it does not
 * have. Errors name the Responses field. */
#include "openai/openai.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------- request -------------------------------- */

/* Fields of a Responses request: read (rewritten), ignored (they label,
 * store or bill), or refused unless they ask for nothing. */
static const char *const read_fields[] = {"model",
                                          "input",
                                          "instructions",
                                          "max_output_tokens",
                                          "temperature",
                                          "top_p",
                                          "tools",
                                          "tool_choice",
                                          "parallel_tool_calls",
                                          "text",
                                          "stream",
                                          "store",
                                          "previous_response_id",
                                          "seed",
                                          "top_k",
                                          "min_p",
                                          "metadata",
                                          "user",
                                          "safety_identifier",
                                          "prompt_cache_key",
                                          "service_tier",
                                          "truncation",
                                          "include",
                                          "reasoning",
                                          NULL};

/* The text of a content list's parts (input_text, output_text, text),
 * concatenated; NULL with e when a part is of another kind. */
static char *content_text(const cJSON *content, const char *param, struct openai_error *e) {
    if (cJSON_IsString(content)) return strdup(content->valuestring);
    if (!cJSON_IsArray(content)) {
        openai_refuse(e, param, "%s must be a string or a list of text parts", param);
        return NULL;
    }
    size_t used = 0, size = 1;
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *text = openai_member(part, "text");
        size += cJSON_IsString(text) ? strlen(text->valuestring) : 0;
    }
    char *out = malloc(size);
    if (!out) {
        openai_out_of_memory(e);
        return NULL;
    }
    int index = 0;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = openai_member(part, "type"), *text = openai_member(part, "text");
        const char *kind = cJSON_IsString(type) ? type->valuestring : "";
        if ((strcmp(kind, "input_text") != 0 && strcmp(kind, "output_text") != 0 &&
             strcmp(kind, "text") != 0) ||
            !cJSON_IsString(text)) {
            openai_refuse(e, param, "%s[%d] must be a text part (input_text or output_text)", param,
                          index);
            free(out);
            return NULL;
        }
        size_t n = strlen(text->valuestring);
        memcpy(out + used, text->valuestring, n);
        used += n;
        index++;
    }
    out[used] = '\0';
    return out;
}

/* A chat message {role, content} appended to messages. */
static int add_message(cJSON *messages, const char *role, const char *content,
                       struct openai_error *e) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddStringToObject(m, "content", content) || !cJSON_AddItemToArray(messages, m)) {
        cJSON_Delete(m);
        return openai_out_of_memory(e);
    }
    return 0;
}

/* A message item: {type?: "message", role, content}. */
static int rewrite_message(const cJSON *item, const char *param, cJSON *messages,
                           struct openai_error *e) {
    static const char *const roles[] = {"user", "assistant", "system", "developer", NULL};
    const cJSON *role = openai_member(item, "role");
    char where[48];
    snprintf(where, sizeof(where), "%s.role", param);
    int known = 0;
    for (int i = 0; cJSON_IsString(role) && roles[i]; i++)
        known |= !strcmp(role->valuestring, roles[i]);
    if (!known)
        return openai_refuse(e, where, "%s must be user, assistant, system or developer", where);
    snprintf(where, sizeof(where), "%s.content", param);
    char *text = content_text(openai_member(item, "content"), where, e);
    if (!text) return -1;
    int rc = add_message(messages, role->valuestring, text, e);
    free(text);
    return rc;
}

/* A function_call item joins the assistant message of the calls just
 * before it, or starts one. */
static int rewrite_call(const cJSON *item, const char *param, cJSON *messages,
                        struct openai_error *e) {
    const cJSON *id = openai_member(item, "call_id"), *name = openai_member(item, "name");
    const cJSON *arguments = openai_member(item, "arguments");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(arguments))
        return openai_refuse(e, param, "%s needs call_id, name and arguments, as strings", param);
    cJSON *last = cJSON_GetArrayItem(messages, cJSON_GetArraySize(messages) - 1);
    cJSON *calls = last ? cJSON_GetObjectItemCaseSensitive(last, "tool_calls") : NULL;
    if (!calls) {
        last = cJSON_CreateObject();
        if (!last || !cJSON_AddStringToObject(last, "role", "assistant") ||
            !cJSON_AddStringToObject(last, "content", "") ||
            !(calls = cJSON_AddArrayToObject(last, "tool_calls")) ||
            !cJSON_AddItemToArray(messages, last)) {
            cJSON_Delete(last);
            return openai_out_of_memory(e);
        }
    }
    cJSON *call = cJSON_CreateObject(), *function = cJSON_CreateObject();
    if (!call || !function || !cJSON_AddStringToObject(call, "id", id->valuestring) ||
        !cJSON_AddStringToObject(call, "type", "function") ||
        !cJSON_AddStringToObject(function, "name", name->valuestring) ||
        !cJSON_AddStringToObject(function, "arguments", arguments->valuestring) ||
        !cJSON_AddItemToObject(call, "function", function)) {
        cJSON_Delete(call);
        cJSON_Delete(function);
        return openai_out_of_memory(e);
    }
    if (!cJSON_AddItemToArray(calls, call)) {
        cJSON_Delete(call);
        return openai_out_of_memory(e);
    }
    return 0;
}

/* A function_call_output item: a tool message. */
static int rewrite_output(const cJSON *item, const char *param, cJSON *messages,
                          struct openai_error *e) {
    const cJSON *id = openai_member(item, "call_id"), *output = openai_member(item, "output");
    if (!cJSON_IsString(id) || !cJSON_IsString(output))
        return openai_refuse(e, param, "%s needs call_id and output, as strings", param);
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", "tool") ||
        !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring) ||
        !cJSON_AddStringToObject(m, "content", output->valuestring) ||
        !cJSON_AddItemToArray(messages, m)) {
        cJSON_Delete(m);
        return openai_out_of_memory(e);
    }
    return 0;
}

/* instructions and input into chat's messages. */
static int rewrite_input(const cJSON *root, cJSON *chat, struct openai_error *e) {
    const cJSON *instructions = openai_member(root, "instructions"),
                *input = openai_member(root, "input");
    cJSON *messages = cJSON_AddArrayToObject(chat, "messages");
    if (!messages) return openai_out_of_memory(e);
    if (instructions && !cJSON_IsString(instructions))
        return openai_refuse(e, "instructions", "instructions must be a string");
    if (instructions && add_message(messages, "system", instructions->valuestring, e)) return -1;
    if (!input) return openai_refuse(e, "input", "input is required");
    if (cJSON_IsString(input)) return add_message(messages, "user", input->valuestring, e);
    if (!cJSON_IsArray(input) || cJSON_GetArraySize(input) == 0)
        return openai_refuse(e, "input", "input must be a string or a non-empty list of items");
    int index = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, input) {
        char param[32];
        snprintf(param, sizeof(param), "input[%d]", index++);
        const cJSON *type = openai_member(item, "type");
        const char *kind = cJSON_IsString(type) ? type->valuestring : "message";
        int rc = !cJSON_IsObject(item)      ? openai_refuse(e, param, "%s must be an object", param)
                 : !strcmp(kind, "message") ? rewrite_message(item, param, messages, e)
                 : !strcmp(kind, "function_call") ? rewrite_call(item, param, messages, e)
                 : !strcmp(kind, "function_call_output")
                     ? rewrite_output(item, param, messages, e)
                     : openai_refuse(e, param,
                                     "%s is a %.40s item; lockstep takes message, function_call "
                                     "and function_call_output items",
                                     param, kind);
        if (rc) return -1;
    }
    return 0;
}

/* tools[i]: a function tool in chat's shape; the built-in tools are refused. */
static int rewrite_tool(const cJSON *tool, int i, cJSON *tools, struct openai_error *e) {
    char param[32];
    snprintf(param, sizeof(param), "tools[%d]", i);
    const cJSON *type = openai_member(tool, "type");
    if (!cJSON_IsObject(tool) || !cJSON_IsString(type))
        return openai_refuse(e, param, "%s must be an object with a type", param);
    if (strcmp(type->valuestring, "function") != 0)
        return openai_refuse(e, param,
                             "%s is a %.40s tool: lockstep has function tools only (no web "
                             "search, file search, computer use or other built-in tools)",
                             param, type->valuestring);
    cJSON *wrapped = cJSON_CreateObject(), *function = cJSON_CreateObject();
    const cJSON *item;
    int failed = !wrapped || !function || !cJSON_AddStringToObject(wrapped, "type", "function");
    cJSON_ArrayForEach(item, tool) {
        if (failed || !strcmp(item->string, "type")) continue;
        cJSON *copy = cJSON_Duplicate(item, 1);
        if (!copy || !cJSON_AddItemToObject(function, item->string, copy)) {
            cJSON_Delete(copy);
            failed = 1;
        }
    }
    if (!failed && cJSON_AddItemToObject(wrapped, "function", function)) function = NULL;
    if (!failed && function == NULL && cJSON_AddItemToArray(tools, wrapped)) return 0;
    cJSON_Delete(function);
    cJSON_Delete(wrapped);
    return openai_out_of_memory(e);
}

/* tools and tool_choice in chat's shape. */
static int rewrite_tools(const cJSON *root, cJSON *chat, struct openai_error *e) {
    const cJSON *tools = openai_member(root, "tools"), *choice = openai_member(root, "tool_choice");
    if (tools) {
        if (!cJSON_IsArray(tools)) return openai_refuse(e, "tools", "tools must be a list");
        cJSON *list = cJSON_AddArrayToObject(chat, "tools");
        if (!list) return openai_out_of_memory(e);
        int i = 0;
        const cJSON *tool;
        cJSON_ArrayForEach(tool, tools) {
            if (rewrite_tool(tool, i++, list, e)) return -1;
        }
    }
    if (!cJSON_IsObject(choice)) return openai_copy_member(chat, "tool_choice", choice, e);
    const cJSON *type = openai_member(choice, "type"), *name = openai_member(choice, "name");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 ||
        !cJSON_IsString(name))
        return openai_refuse(e, "tool_choice",
                             "tool_choice must be \"none\", \"auto\", \"required\" or "
                             "{\"type\": \"function\", \"name\": ...}");
    cJSON *named = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON *function = named ? cJSON_AddObjectToObject(named, "function") : NULL;
    if (!function || !cJSON_AddStringToObject(named, "type", "function") ||
        !cJSON_AddStringToObject(function, "name", name->valuestring))
        return openai_out_of_memory(e);
    return 0;
}

/* text.format into response_format: text, json_object, or json_schema
 * whose name, schema, strict and description sit in the format itself. */
static int rewrite_text(const cJSON *root, cJSON *chat, struct openai_error *e) {
    static const char *const text_keys[] = {"format", "verbosity", NULL};
    const cJSON *text = openai_member(root, "text");
    if (!text) return 0;
    if (!cJSON_IsObject(text)) return openai_refuse(e, "text", "text must be an object");
    if (openai_check_keys(text, "text", text_keys, e)) return -1;
    const cJSON *verbosity = openai_member(text, "verbosity"),
                *format = openai_member(text, "format");
    if (verbosity && !(cJSON_IsString(verbosity) && !strcmp(verbosity->valuestring, "medium")))
        return openai_refuse(e, "text.verbosity", "text.verbosity is not supported (only medium)");
    if (!format) return 0;
    const cJSON *type = openai_member(format, "type");
    if (!cJSON_IsObject(format) || !cJSON_IsString(type))
        return openai_refuse(e, "text.format", "text.format must be an object with a type");
    cJSON *out = cJSON_AddObjectToObject(chat, "response_format");
    if (!out || !cJSON_AddStringToObject(out, "type", type->valuestring))
        return openai_out_of_memory(e);
    if (strcmp(type->valuestring, "json_schema") != 0) return 0;
    cJSON *schema = cJSON_AddObjectToObject(out, "json_schema");
    if (!schema) return openai_out_of_memory(e);
    const cJSON *item;
    cJSON_ArrayForEach(item, format) {
        if (!strcmp(item->string, "type")) continue;
        if (openai_copy_member(schema, item->string, item, e)) return -1;
    }
    return 0;
}

/* What lockstep does not do: keep responses, or reason in a budget. */
static int refuse_unsupported(const cJSON *root, struct openai_error *e) {
    const cJSON *store = openai_member(root, "store"), *include = openai_member(root, "include");
    const cJSON *reasoning = openai_member(root, "reasoning"),
                *truncation = openai_member(root, "truncation");
    if (store && !cJSON_IsBool(store)) return openai_refuse(e, "store", "store must be a boolean");
    if (cJSON_IsTrue(store))
        return openai_refuse(e, "store",
                             "store true is not supported: lockstep keeps no responses (send "
                             "store false, and the whole conversation in input)");
    if (openai_member(root, "previous_response_id"))
        return openai_refuse(e, "previous_response_id",
                             "previous_response_id is not supported: lockstep keeps no responses "
                             "(send the whole conversation in input)");
    if (include && !(cJSON_IsArray(include) && cJSON_GetArraySize(include) == 0))
        return openai_refuse(e, "include", "include is not supported (only [] is accepted)");
    if (reasoning && !(cJSON_IsObject(reasoning) && reasoning->child == NULL))
        return openai_refuse(e, "reasoning", "reasoning is not supported (only {} is accepted)");
    if (truncation && !(cJSON_IsString(truncation) && !strcmp(truncation->valuestring, "disabled")))
        return openai_refuse(e, "truncation",
                             "truncation is not supported (only \"disabled\" is accepted)");
    return 0;
}

/* A field the Responses API does not have (or lockstep does not take), as
 * OpenAI refuses it. */
static int refuse_unknown(const cJSON *root, struct openai_error *e) {
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        int known = 0;
        for (int i = 0; read_fields[i] && !known; i++)
            known = !strcmp(item->string, read_fields[i]);
        if (!known)
            return openai_refuse(e, item->string, "Unrecognized request argument supplied: %.40s",
                                 item->string);
    }
    return 0;
}

/* The chat request root amounts to, or NULL with e. */
static cJSON *rewrite(const cJSON *root, struct openai_error *e) {
    static const char *const same[] = {"model",  "temperature", "top_p", "parallel_tool_calls",
                                       "stream", "seed",        "top_k", "min_p",
                                       NULL};
    cJSON *chat = cJSON_CreateObject();
    if (!chat) {
        openai_out_of_memory(e);
        return NULL;
    }
    int failed = refuse_unknown(root, e) ||
                 openai_check_keys(root, "the request", read_fields, e) ||
                 refuse_unsupported(root, e) || rewrite_input(root, chat, e) ||
                 rewrite_tools(root, chat, e) || rewrite_text(root, chat, e) ||
                 openai_copy_member(chat, "max_completion_tokens",
                                    openai_member(root, "max_output_tokens"), e);
    for (int i = 0; !failed && same[i]; i++)
        failed = openai_copy_member(chat, same[i], openai_member(root, same[i]), e);
    if (!failed) return chat;
    cJSON_Delete(chat);
    return NULL;
}

int openai_parse_responses(const char *body, size_t len, struct openai_request *out,
                           struct openai_error *error) {
    memset(out, 0, sizeof(*out));
    memset(error, 0, sizeof(*error));
    cJSON *root = openai_parse_object(body, len, "the request body", error);
    if (!root) return -1;
    /* chat's refusals name chat's fields; the client sent these */
    static const char *const renames[][2] = {{"max_completion_tokens", "max_output_tokens"},
                                             {"response_format", "text.format"}};
    int rc = openai_parse_rewritten(rewrite(root, error), renames, 2, out, error);
    cJSON_Delete(root);
    if (rc == 0) out->responses = 1;
    return rc;
}

/* ------------------------------- answers -------------------------------- */

/* The usage object: input and output tokens, the cached ones. */
static cJSON *usage_json(const struct openai_usage *u, int *failed) {
    cJSON *usage = cJSON_CreateObject();
    openai_json_add(usage, "input_tokens", cJSON_CreateNumber(u->prompt_tokens), failed);
    cJSON *in = openai_json_add(usage, "input_tokens_details", cJSON_CreateObject(), failed);
    openai_json_add(in, "cached_tokens", cJSON_CreateNumber(u->cached_tokens), failed);
    openai_json_add(usage, "output_tokens", cJSON_CreateNumber(u->completion_tokens), failed);
    cJSON *out = openai_json_add(usage, "output_tokens_details", cJSON_CreateObject(), failed);
    openai_json_add(out, "reasoning_tokens", cJSON_CreateNumber(0), failed);
    openai_json_add(usage, "total_tokens",
                    cJSON_CreateNumber((double)u->prompt_tokens + u->completion_tokens), failed);
    return usage;
}

/* The output_text part of text. */
static cJSON *text_part_json(const char *text, size_t length, int *failed) {
    cJSON *part = cJSON_CreateObject();
    openai_json_add(part, "type", cJSON_CreateString("output_text"), failed);
    openai_json_add(part, "text", openai_json_text(text, length), failed);
    openai_json_add(part, "annotations", cJSON_CreateArray(), failed);
    return part;
}

/* Item k of the output: the message (when it has one) first, then the
 * calls; done: with its whole text or arguments, else as just begun. */
static cJSON *item_json(const struct openai_responses_output *o, int k, int done, int *failed) {
    cJSON *item = cJSON_CreateObject();
    const char *status = done ? "completed" : "in_progress";
    if (o->has_message && k == 0) {
        openai_json_add(item, "type", cJSON_CreateString("message"), failed);
        openai_json_add(item, "id", cJSON_CreateString(o->message_id), failed);
        openai_json_add(item, "status", cJSON_CreateString(status), failed);
        openai_json_add(item, "role", cJSON_CreateString("assistant"), failed);
        cJSON *content = openai_json_add(item, "content", cJSON_CreateArray(), failed);
        if (done)
            openai_json_add(content, NULL, text_part_json(o->text, o->length, failed), failed);
        return item;
    }
    const struct openai_tool_call *call = &o->calls[k - o->has_message];
    char id[80];
    snprintf(id, sizeof(id), "fc_%s", call->id ? call->id : "");
    openai_json_add(item, "type", cJSON_CreateString("function_call"), failed);
    openai_json_add(item, "id", cJSON_CreateString(id), failed);
    openai_json_add(item, "call_id", openai_json_text(call->id, call->id ? strlen(call->id) : 0),
                    failed);
    openai_json_add(item, "name", openai_json_text(call->name, strlen(call->name)), failed);
    const char *arguments = done ? call->arguments : "";
    openai_json_add(item, "arguments", openai_json_text(arguments, strlen(arguments)), failed);
    openai_json_add(item, "status", cJSON_CreateString(status), failed);
    return item;
}

/* The response object: every output item done once the response is. */
static cJSON *response_json(const struct openai_responses_output *o, int *failed) {
    cJSON *root = cJSON_CreateObject();
    int done = strcmp(o->status, "in_progress") != 0;
    openai_json_add(root, "id", cJSON_CreateString(o->id), failed);
    openai_json_add(root, "object", cJSON_CreateString("response"), failed);
    openai_json_add(root, "created_at", cJSON_CreateNumber((double)o->created), failed);
    openai_json_add(root, "status", cJSON_CreateString(o->status), failed);
    openai_json_add(root, "error", cJSON_CreateNull(), failed);
    cJSON *incomplete = cJSON_CreateNull();
    if (!strcmp(o->status, "incomplete")) {
        cJSON_Delete(incomplete);
        incomplete = cJSON_CreateObject();
        openai_json_add(incomplete, "reason", cJSON_CreateString("max_output_tokens"), failed);
    }
    openai_json_add(root, "incomplete_details", incomplete, failed);
    openai_json_add(root, "model", openai_json_text(o->model, o->model ? strlen(o->model) : 0),
                    failed);
    cJSON *output = openai_json_add(root, "output", cJSON_CreateArray(), failed);
    for (int k = 0; done && k < o->has_message + o->n_calls; k++)
        openai_json_add(output, NULL, item_json(o, k, 1, failed), failed);
    openai_json_add(root, "parallel_tool_calls", cJSON_CreateBool(o->parallel_tool_calls), failed);
    openai_json_add(root, "previous_response_id", cJSON_CreateNull(), failed);
    openai_json_add(root, "store", cJSON_CreateFalse(), failed);
    openai_json_add(root, "usage", done ? usage_json(&o->usage, failed) : cJSON_CreateNull(),
                    failed);
    return root;
}

static char *print(cJSON *root, int failed) {
    char *text = failed ? NULL : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

char *openai_responses_json(const struct openai_responses_output *o) {
    int failed = 0;
    cJSON *root = response_json(o, &failed);
    return print(root, failed);
}

static const char *const event_names[] = {
    [OPENAI_RESPONSES_CREATED] = "response.created",
    [OPENAI_RESPONSES_IN_PROGRESS] = "response.in_progress",
    [OPENAI_RESPONSES_ITEM_ADDED] = "response.output_item.added",
    [OPENAI_RESPONSES_PART_ADDED] = "response.content_part.added",
    [OPENAI_RESPONSES_TEXT_DELTA] = "response.output_text.delta",
    [OPENAI_RESPONSES_TEXT_DONE] = "response.output_text.done",
    [OPENAI_RESPONSES_PART_DONE] = "response.content_part.done",
    [OPENAI_RESPONSES_ARGUMENTS_DELTA] = "response.function_call_arguments.delta",
    [OPENAI_RESPONSES_ARGUMENTS_DONE] = "response.function_call_arguments.done",
    [OPENAI_RESPONSES_ITEM_DONE] = "response.output_item.done",
    [OPENAI_RESPONSES_COMPLETED] = "response.completed",
    [OPENAI_RESPONSES_INCOMPLETE] = "response.incomplete",
};

const char *openai_responses_event_name(enum openai_responses_event event) {
    return event_names[event];
}

/* The id of output item k. */
static void item_id(const struct openai_responses_output *o, int k, char *out, size_t size) {
    if (o->has_message && k == 0)
        snprintf(out, size, "%s", o->message_id);
    else
        snprintf(out, size, "fc_%s", o->calls[k - o->has_message].id);
}

char *openai_responses_event_json(const struct openai_responses_output *o,
                                  enum openai_responses_event event, int sequence, int k,
                                  const char *delta, size_t length) {
    int failed = 0;
    char id[96];
    cJSON *root = cJSON_CreateObject();
    openai_json_add(root, "type", cJSON_CreateString(event_names[event]), &failed);
    openai_json_add(root, "sequence_number", cJSON_CreateNumber(sequence), &failed);
    if (event <= OPENAI_RESPONSES_IN_PROGRESS || event >= OPENAI_RESPONSES_COMPLETED) {
        openai_json_add(root, "response", response_json(o, &failed), &failed);
        return print(root, failed);
    }
    item_id(o, k, id, sizeof(id));
    openai_json_add(root, "output_index", cJSON_CreateNumber(k), &failed);
    if (event == OPENAI_RESPONSES_ITEM_ADDED || event == OPENAI_RESPONSES_ITEM_DONE) {
        openai_json_add(root, "item", item_json(o, k, event == OPENAI_RESPONSES_ITEM_DONE, &failed),
                        &failed);
        return print(root, failed);
    }
    openai_json_add(root, "item_id", cJSON_CreateString(id), &failed);
    int text = event == OPENAI_RESPONSES_PART_ADDED || event == OPENAI_RESPONSES_TEXT_DELTA ||
               event == OPENAI_RESPONSES_TEXT_DONE || event == OPENAI_RESPONSES_PART_DONE;
    if (text) openai_json_add(root, "content_index", cJSON_CreateNumber(0), &failed);
    if (event == OPENAI_RESPONSES_TEXT_DELTA || event == OPENAI_RESPONSES_ARGUMENTS_DELTA)
        openai_json_add(root, "delta", openai_json_text(delta, length), &failed);
    if (event == OPENAI_RESPONSES_TEXT_DONE)
        openai_json_add(root, "text", openai_json_text(o->text, o->length), &failed);
    if (event == OPENAI_RESPONSES_ARGUMENTS_DONE) {
        const char *arguments = o->calls[k - o->has_message].arguments;
        openai_json_add(root, "arguments", openai_json_text(arguments, strlen(arguments)), &failed);
    }
    if (event == OPENAI_RESPONSES_PART_ADDED || event == OPENAI_RESPONSES_PART_DONE)
        openai_json_add(root, "part",
                        text_part_json(event == OPENAI_RESPONSES_PART_DONE ? o->text : "",
                                       event == OPENAI_RESPONSES_PART_DONE ? o->length : 0,
                                       &failed),
                        &failed);
    return print(root, failed);
}
