/* tool_calls.c -- OpenAI tool calling around one gateway request: the
 * tools and the conversation's calls as the chat template renders them,
 * the grammar sent to the runner, and the calls read back from a choice's
 * text.
 *
 * A choice of a request with tools keeps every byte it decoded (`all`).
 * Its content streams as usual except for a tail that could still become
 * the family's trigger (tokenizer_chat_find_tool_trigger) and whitespace
 * before it. Once the trigger is seen, a chat stream gets the calls as
 * they are written (tokenizer_chat_scan_tool_calls): per call a chunk with
 * its id, type, name and empty arguments once its name is written, then
 * its arguments as they grow, minified as the final parse gives them, so
 * that the pieces join to the answer's arguments. When the choice ends its
 * text is parsed (tokenizer_chat_parse_tool_calls) into the answer's
 * calls, and a stream gets what it has not had of them; cut by max_tokens,
 * the calls written whole are its calls. Stop strings are matched in the
 * content only: text from the trigger on is never cut by one. */
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

/* Call i's id: the same whenever it is asked. */
static void call_id(const struct gateway_choice *c, int i, char *id, size_t size) {
    snprintf(id, size, "call_%llx%06llx%02x", (unsigned long long)c->request->arrival_us,
             (unsigned long long)c->job.id, (unsigned)i);
}

/* 1 if the choice's calls stream (a chat stream's chunks, a Responses
 * stream's items, a Messages stream's blocks). */
static int streams_calls(const struct gateway_request *r) {
    return r->body.stream;
}

/* Tells the request's API that call i started, grew by piece, or stopped. */
static void call_event(struct gateway_choice *c, int i, enum gateway_call_event event,
                       const char *piece) {
    struct gateway_request *r = c->request;
    const struct gateway_streamed_call *s = &c->streamed[i];
    if (r->body.responses) {
        gateway_responses_call(c, i, event, piece);
    } else if (r->body.anthropic) {
        gateway_messages_call(c, i, event, piece);
    } else if (event != GATEWAY_CALL_STOP) { /* a chat chunk: the head, or a piece */
        struct openai_call_delta delta = {i, event == GATEWAY_CALL_START ? s->id : NULL,
                                          event == GATEWAY_CALL_START ? s->name : NULL,
                                          event == GATEWAY_CALL_START ? "" : piece};
        struct openai_delta d = {.first = !c->first_sent, .text = "", .call = &delta};
        gateway_request_event(r, openai_choice_chunk_json(&r->response, &d, c->index));
        c->first_sent = 1;
    }
}

/* Sends call i's start if it has not gone out (stopping call i - 1), then
 * its arguments past what was sent (arguments: its minified text so far,
 * length bytes). */
static int send_call(struct gateway_choice *c, int i, const char *name, const char *arguments,
                     size_t length) {
    if (!c->streamed && !(c->streamed = calloc(GATEWAY_STREAMED_CALLS, sizeof(*c->streamed))))
        return -1;
    if (i >= GATEWAY_STREAMED_CALLS) return 0;
    struct gateway_streamed_call *s = &c->streamed[i];
    if (i == c->n_heads) {
        if (i > 0) call_event(c, i - 1, GATEWAY_CALL_STOP, NULL);
        call_id(c, i, s->id, sizeof(s->id));
        snprintf(s->name, sizeof(s->name), "%s", name);
        c->n_heads++;
        call_event(c, i, GATEWAY_CALL_START, NULL);
    }
    if (length <= s->arguments.length) return 0;
    char *piece = strndup(arguments + s->arguments.length, length - s->arguments.length);
    /* kept NUL-terminated (the NUL is not counted): the APIs read it as text */
    if (!piece || runner_buffer_append(&s->arguments, piece, strlen(piece) + 1)) {
        free(piece);
        return -1;
    }
    s->arguments.length--;
    call_event(c, i, GATEWAY_CALL_PIECE, piece);
    free(piece);
    return 0;
}

/* Scans the calls written so far (max of them) into calls; how many. */
static int scan_calls(const struct gateway_choice *c, struct tokenizer_call_progress *calls,
                      int max) {
    enum tokenizer_chat_template family = c->request->served->chat_template;
    const char *all = c->all.data ? (const char *)c->all.data : "";
    size_t at = 0;
    if (!tokenizer_chat_find_tool_trigger(family, all, c->all.length, &at)) return 0;
    return tokenizer_chat_scan_tool_calls(family, all, c->all.length, at, calls, max);
}

void gateway_tools_stream(struct gateway_choice *c) {
    struct tokenizer_call_progress calls[GATEWAY_STREAMED_CALLS];
    const char *all = (const char *)c->all.data;
    if (!streams_calls(c->request) || !all) return;
    int n = scan_calls(c, calls, GATEWAY_STREAMED_CALLS);
    char *minified = malloc(c->all.length + 1);
    for (int i = 0; minified && i < n && i <= c->n_heads && calls[i].name[0]; i++) {
        size_t length = 0;
        if (calls[i].arguments_start && calls[i].arguments_end > calls[i].arguments_start)
            length =
                tokenizer_json_minify(all + calls[i].arguments_start,
                                      calls[i].arguments_end - calls[i].arguments_start, minified);
        if (send_call(c, i, calls[i].name, minified, length)) break;
    }
    free(minified);
}

/* Moves the parsed calls into the choice with ids of their own. */
static int take_calls(struct gateway_choice *c, struct tokenizer_parsed_calls *parsed) {
    c->calls = calloc((size_t)parsed->n_calls, sizeof(*c->calls));
    if (!c->calls) return -1;
    for (int i = 0; i < parsed->n_calls; i++) {
        char id[64];
        call_id(c, i, id, sizeof(id));
        c->calls[i].id = strdup(id);
        c->calls[i].name = parsed->calls[i].name;
        c->calls[i].arguments = parsed->calls[i].arguments;
        parsed->calls[i].name = parsed->calls[i].arguments = NULL;
        c->n_calls++;
        if (!c->calls[i].id) return -1;
    }
    return 0;
}

/* The calls written whole before max_tokens cut the answer, as parsed
 * calls (their arguments minified as a parse gives them). */
static int complete_calls(const struct gateway_choice *c, struct tokenizer_parsed_calls *out) {
    struct tokenizer_call_progress calls[GATEWAY_STREAMED_CALLS];
    const char *all = (const char *)c->all.data;
    int n = all ? scan_calls(c, calls, GATEWAY_STREAMED_CALLS) : 0;
    memset(out, 0, sizeof(*out));
    while (n > 0 && !calls[n - 1].done) n--;
    if (n <= 0) return 0;
    out->calls = calloc((size_t)n, sizeof(*out->calls));
    if (!out->calls) return -1;
    for (int i = 0; i < n; i++) {
        size_t length = calls[i].arguments_end > calls[i].arguments_start
                            ? calls[i].arguments_end - calls[i].arguments_start
                            : 0;
        char *arguments = calls[i].arguments_start ? malloc(length + 1) : strdup("{}");
        if (arguments && calls[i].arguments_start)
            arguments[tokenizer_json_minify(all + calls[i].arguments_start, length, arguments)] =
                '\0';
        out->calls[i] = (struct tokenizer_parsed_call){NULL, strdup(calls[i].name), arguments};
        out->n_calls++;
        if (!out->calls[i].name || !arguments) return -1;
    }
    return 0;
}

/* Frees the choice's parsed calls. */
static void free_calls(struct gateway_choice *c) {
    for (int i = 0; i < c->n_calls; i++) {
        free(c->calls[i].id);
        free(c->calls[i].name);
        free(c->calls[i].arguments);
    }
    free(c->calls);
    c->calls = NULL;
    c->n_calls = 0;
}

int gateway_tools_finish(struct gateway_choice *c, enum openai_finish *finish, char *err,
                         size_t errlen) {
    struct gateway_request *r = c->request;
    struct tokenizer_parsed_calls parsed = {0};
    char why[200] = "out of memory";
    const char *all = c->all.data ? (const char *)c->all.data : "";
    int cut = *finish == OPENAI_FINISH_LENGTH;
    int rc = cut ? complete_calls(c, &parsed)
                 : tokenizer_chat_parse_tool_calls(r->served->chat_template, all, c->all.length,
                                                   &parsed, why, sizeof(why));
    if (rc == 0 && parsed.n_calls > 0 && take_calls(c, &parsed)) {
        rc = -1;
        snprintf(why, sizeof(why), "out of memory");
    }
    int n_calls = parsed.n_calls;
    tokenizer_parsed_calls_free(&parsed);
    if (rc == 0 && n_calls > 0) {
        /* what a stream has not had of them (its API closes the last when
         * the request ends) */
        for (int i = 0; streams_calls(r) && i < c->n_calls; i++) {
            const char *arguments = c->calls[i].arguments ? c->calls[i].arguments : "{}";
            if (send_call(c, i, c->calls[i].name, arguments, strlen(arguments))) break;
        }
        if (!cut) *finish = OPENAI_FINISH_TOOL_CALLS;
        return 0;
    }
    if (rc == 0) snprintf(why, sizeof(why), "no call after the trigger");
    free_calls(c); /* what a stream sent of them stays for its API to close */
    /* cut by max_tokens, or free text under "auto": it stays content,
     * unless a stream sent a call's chunks already */
    if (cut || r->body.tool_choice == OPENAI_TOOLS_AUTO) return c->n_heads > 0 ? 2 : 1;
    snprintf(err, errlen, "the model's tool calls do not parse: %s", why);
    return -1;
}

void gateway_tools_free_choice(struct gateway_choice *c) {
    free_calls(c);
    for (int i = 0; c->streamed && i < GATEWAY_STREAMED_CALLS; i++)
        runner_buffer_free(&c->streamed[i].arguments);
    free(c->streamed);
    c->streamed = NULL;
}
