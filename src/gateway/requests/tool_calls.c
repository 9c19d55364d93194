/* tool_calls.c -- OpenAI tool calling around one gateway request: the
 * tools and the conversation's calls as the chat template renders them,
 * the grammar sent to the runner, and the calls read back from a choice's
 * text.
 *
 * A choice of a request with tools keeps every byte it decoded (`all`).
 * Its content streams as usual except for a tail that could still become
 * the family's trigger (tokenizer_chat_find_tool_trigger) and whitespace
 * before it; once the trigger is seen, nothing more streams until the
 * choice ends, when its text is parsed (tokenizer_chat_parse_tool_calls)
 * and the calls go out whole: in the body's message.tool_calls, or in a
 * stream as OpenAI sends them (per call a chunk with its id, type, name and
 * empty arguments, then one with the arguments). Stop strings are matched
 * in the content only: text from the trigger on is never cut by one. */
#include "gateway/requests/requests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gateway_tools_active(const struct gateway_request *r) {
    return r->body.kind == OPENAI_CHAT && r->body.n_tools > 0 &&
           r->body.tool_choice != OPENAI_TOOLS_NONE;
}

/* ---------- the prompt ---------- */

int gateway_tools_render(const struct gateway_request *r, struct tokenizer_chat_tool **out, int *n,
                         struct openai_error *error) {
    *out = NULL;
    *n = 0;
    if (!gateway_tools_active(r)) return 0; /* "none": rendered without tools, as OpenAI */
    *out = calloc((size_t)r->body.n_tools, sizeof(**out));
    if (!*out) {
        openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory for the tools");
        return -1;
    }
    for (int i = 0; i < r->body.n_tools; i++)
        (*out)[i] = (struct tokenizer_chat_tool){.name = r->body.tools[i].name,
                                                 .description = r->body.tools[i].description,
                                                 .parameters = r->body.tools[i].parameters};
    *n = r->body.n_tools;
    return 0;
}

int gateway_tools_messages(const struct gateway_request *r, struct tokenizer_chat_message **out,
                           struct tokenizer_tool_call **calls, struct openai_error *error) {
    int n = r->body.n_messages, total = 0, used = 0;
    for (int i = 0; i < n; i++) total += r->body.messages[i].n_tool_calls;
    *out = calloc((size_t)n, sizeof(**out));
    *calls = calloc((size_t)(total > 0 ? total : 1), sizeof(**calls));
    if (!*out || !*calls) {
        free(*out);
        free(*calls);
        *out = NULL;
        *calls = NULL;
        openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory for the prompt");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const struct openai_message *m = &r->body.messages[i];
        /* "developer" is OpenAI's newer name for the system role */
        (*out)[i] = (struct tokenizer_chat_message){.role = strcmp(m->role, "developer") ? m->role
                                                                                         : "system",
                                                    .content = m->content,
                                                    .tool_calls = *calls + used,
                                                    .n_tool_calls = m->n_tool_calls,
                                                    .tool_call_id = m->tool_call_id,
                                                    .name = m->name};
        for (int j = 0; j < m->n_tool_calls; j++)
            (*calls)[used++] =
                (struct tokenizer_tool_call){.id = m->tool_calls[j].id,
                                             .name = m->tool_calls[j].name,
                                             .arguments = m->tool_calls[j].arguments};
    }
    return 0;
}

int gateway_tools_constrain(struct gateway_request *r, struct openai_error *error) {
    if (!gateway_tools_active(r)) return 0;
    const struct tokenizer_tool_format *format =
        tokenizer_chat_tool_format(r->served->chat_template);
    if (!format) {
        openai_error_set(error, 500, "server_error", NULL, NULL,
                         "the chat template has no tool-call format");
        return -1;
    }
    if (openai_tools_grammar(&r->body, format, &r->body.grammar, error)) return -1;
    if (r->body.tool_choice != OPENAI_TOOLS_AUTO) return 0;
    r->body.grammar_trigger = strdup(format->trigger);
    if (r->body.grammar_trigger) return 0;
    openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory for the tools");
    return -1;
}

/* ---------- the answer ---------- */

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int gateway_tools_limit(const struct gateway_choice *c, int final, size_t *limit) {
    const char *all = c->all.data ? (const char *)c->all.data : "";
    size_t length = c->all.length, at = length;
    int found =
        tokenizer_chat_find_tool_trigger(c->request->served->chat_template, all, length, &at);
    if (!found && final) {
        *limit = c->n_held;
        return 0;
    }
    /* the content ends before the trigger and the whitespace before it */
    while (at > c->released && is_space(all[at - 1])) at--;
    size_t keep = at > c->released ? at - c->released : 0;
    *limit = keep < c->n_held ? keep : c->n_held;
    return found;
}

/* Chunks of one call for a stream: its head (id, type, name, "") and its
 * arguments. */
static void stream_call(struct gateway_choice *c, int index) {
    struct gateway_request *r = c->request;
    const struct openai_tool_call *call = &c->calls[index];
    struct openai_call_delta head = {index, call->id, call->name, ""};
    struct openai_call_delta arguments = {index, NULL, NULL, call->arguments};
    struct openai_delta d = {.first = !c->first_sent, .text = "", .call = &head};
    gateway_request_event(r, openai_choice_chunk_json(&r->response, &d, c->index));
    c->first_sent = 1;
    d.first = 0;
    d.call = &arguments;
    gateway_request_event(r, openai_choice_chunk_json(&r->response, &d, c->index));
}

/* Moves the parsed calls into the choice with ids of their own. */
static int take_calls(struct gateway_choice *c, struct tokenizer_parsed_calls *parsed) {
    c->calls = calloc((size_t)parsed->n_calls, sizeof(*c->calls));
    if (!c->calls) return -1;
    for (int i = 0; i < parsed->n_calls; i++) {
        char id[64];
        snprintf(id, sizeof(id), "call_%llx%06llx%02x", (unsigned long long)c->request->arrival_us,
                 (unsigned long long)c->job.id, (unsigned)i);
        c->calls[i].id = strdup(id);
        c->calls[i].name = parsed->calls[i].name;
        c->calls[i].arguments = parsed->calls[i].arguments;
        parsed->calls[i].name = parsed->calls[i].arguments = NULL;
        c->n_calls++;
        if (!c->calls[i].id) return -1;
    }
    return 0;
}

int gateway_tools_finish(struct gateway_choice *c, enum openai_finish *finish, char *err,
                         size_t errlen) {
    struct gateway_request *r = c->request;
    struct tokenizer_parsed_calls parsed = {0};
    char why[200];
    const char *all = c->all.data ? (const char *)c->all.data : "";
    int rc = tokenizer_chat_parse_tool_calls(r->served->chat_template, all, c->all.length, &parsed,
                                             why, sizeof(why));
    if (rc == 0 && parsed.n_calls > 0 && take_calls(c, &parsed)) {
        rc = -1;
        snprintf(why, sizeof(why), "out of memory");
    }
    int n_calls = parsed.n_calls;
    tokenizer_parsed_calls_free(&parsed);
    if (rc == 0 && n_calls > 0) {
        /* a Responses stream sends its calls as items when it ends */
        for (int i = 0;
             r->body.stream && !r->body.responses && !r->body.anthropic && i < c->n_calls; i++)
            stream_call(c, i);
        *finish = OPENAI_FINISH_TOOL_CALLS;
        return 0;
    }
    if (rc == 0) snprintf(why, sizeof(why), "no call after the trigger");
    gateway_tools_free_choice(c);
    /* cut by max_tokens, or free text under "auto": it stays content */
    if (*finish == OPENAI_FINISH_LENGTH || r->body.tool_choice == OPENAI_TOOLS_AUTO) return 1;
    snprintf(err, errlen, "the model's tool calls do not parse: %s", why);
    return -1;
}

void gateway_tools_free_choice(struct gateway_choice *c) {
    for (int i = 0; i < c->n_calls; i++) {
        free(c->calls[i].id);
        free(c->calls[i].name);
        free(c->calls[i].arguments);
    }
    free(c->calls);
    c->calls = NULL;
    c->n_calls = 0;
}
