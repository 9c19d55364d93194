/* responses.c -- a request of the Responses API (POST /v1/responses) on
 * its way out: one choice, shown as a response object whose output is a
 * message item (the text) and a function_call item per call.
 *
 * Streamed, the events come in OpenAI's order: response.created and
 * response.in_progress before anything else; the message item and its
 * text part opened with the first text, then a response.output_text.delta
 * per piece of text released (stop strings held back as for chat); each
 * call, as the model writes it, closes the message and is an item of its
 * own (added, function_call_arguments.delta pieces, then .done and item
 * done when the next call starts); when the choice ends what is still
 * open is closed, and response.completed (or
 * response.incomplete, when max_output_tokens cut it) with the whole
 * response and its usage. Each event is an SSE `event:` line and a
 * `data:` line, numbered by sequence_number. The request's lock is held
 * by every caller. */
#include "gateway/requests/requests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The response as it stands: choice 0's text and calls. */
static void view(struct gateway_request *r, const char *status, struct openai_responses_output *o) {
    const struct gateway_choice *c = &r->choices[0];
    *o = (struct openai_responses_output){
        .id = r->response_id,
        .message_id = r->responses_message_id,
        .model = r->response.model,
        .created = r->response.created,
        .status = status,
        .text = c->text.data ? (const char *)c->text.data : "",
        .length = c->text.length,
        .calls = c->calls,
        .n_calls = c->n_calls,
        .parallel_tool_calls = r->body.parallel_tool_calls,
        .usage = gateway_request_usage(r),
    };
    /* once a call started, the output is fixed: the message (if its text
     * came before) and the calls */
    o->has_message = r->responses_in_calls
                         ? r->responses_calls_base
                         : r->responses_message_open || o->length > 0 || o->n_calls == 0;
}

/* Appends event k's SSE lines: its name, then its data. */
static void send_event(struct gateway_request *r, const struct openai_responses_output *o,
                       enum openai_responses_event event, int k, const char *delta, size_t length) {
    gateway_request_named_event(
        r, openai_responses_event_name(event),
        openai_responses_event_json(o, event, r->responses_sequence++, k, delta, length));
}

/* created and in_progress, once. */
static void start(struct gateway_request *r) {
    struct openai_responses_output o;
    if (r->responses_started) return;
    r->responses_started = 1;
    view(r, "in_progress", &o);
    send_event(r, &o, OPENAI_RESPONSES_CREATED, 0, NULL, 0);
    send_event(r, &o, OPENAI_RESPONSES_IN_PROGRESS, 0, NULL, 0);
}

/* The message item and its text part, once. */
static void open_message(struct gateway_request *r) {
    struct openai_responses_output o;
    if (r->responses_message_open) return;
    r->responses_message_open = 1;
    view(r, "in_progress", &o);
    send_event(r, &o, OPENAI_RESPONSES_ITEM_ADDED, 0, NULL, 0);
    send_event(r, &o, OPENAI_RESPONSES_PART_ADDED, 0, NULL, 0);
}

/* The text part and message item closed. */
static void close_message(struct gateway_request *r, const struct openai_responses_output *o) {
    send_event(r, o, OPENAI_RESPONSES_TEXT_DONE, 0, NULL, 0);
    send_event(r, o, OPENAI_RESPONSES_PART_DONE, 0, NULL, 0);
    send_event(r, o, OPENAI_RESPONSES_ITEM_DONE, 0, NULL, 0);
}

void gateway_responses_call(struct gateway_choice *c, int i, enum gateway_call_event event,
                            const char *piece) {
    struct gateway_request *r = c->request;
    const struct gateway_streamed_call *s = &c->streamed[i];
    struct openai_tool_call calls[GATEWAY_STREAMED_CALLS];
    struct openai_responses_output o;
    start(r);
    if (!r->responses_in_calls) { /* the text before the calls ends */
        view(r, "in_progress", &o);
        if (r->responses_message_open) close_message(r, &o);
        r->responses_calls_base = r->responses_message_open;
        r->responses_in_calls = 1;
    }
    view(r, "in_progress", &o);
    calls[i] = (struct openai_tool_call){
        (char *)s->id, (char *)s->name,
        event == GATEWAY_CALL_STOP && s->arguments.data ? (char *)s->arguments.data : ""};
    o.calls = calls;
    o.n_calls = i + 1;
    int k = r->responses_calls_base + i;
    if (event == GATEWAY_CALL_START) send_event(r, &o, OPENAI_RESPONSES_ITEM_ADDED, k, NULL, 0);
    if (event == GATEWAY_CALL_PIECE)
        send_event(r, &o, OPENAI_RESPONSES_ARGUMENTS_DELTA, k, piece, strlen(piece));
    if (event != GATEWAY_CALL_STOP) return;
    send_event(r, &o, OPENAI_RESPONSES_ARGUMENTS_DONE, k, NULL, 0);
    send_event(r, &o, OPENAI_RESPONSES_ITEM_DONE, k, NULL, 0);
    r->responses_calls_closed = i + 1;
}

void gateway_responses_text(struct gateway_choice *c, const char *text, size_t length) {
    struct gateway_request *r = c->request;
    struct openai_responses_output o;
    runner_buffer_append(&c->text, text, length);
    if (!r->body.stream || length == 0) return;
    start(r);
    open_message(r);
    view(r, "in_progress", &o);
    send_event(r, &o, OPENAI_RESPONSES_TEXT_DELTA, 0, text, length);
}

void gateway_responses_end(struct gateway_request *r) {
    const struct gateway_choice *c = &r->choices[0];
    const char *status = c->finish == OPENAI_FINISH_LENGTH ? "incomplete" : "completed";
    struct openai_responses_output o;
    start(r);
    view(r, status, &o);
    if (o.has_message && !r->responses_in_calls) {
        open_message(r);
        close_message(r, &o);
    }
    /* the calls streamed as written: the last one is still open (whole,
     * or as far as max_output_tokens let it go) */
    for (int i = r->responses_calls_closed; i < c->n_heads; i++)
        gateway_responses_call(&r->choices[0], i, GATEWAY_CALL_STOP, NULL);
    send_event(r, &o,
               c->finish == OPENAI_FINISH_LENGTH ? OPENAI_RESPONSES_INCOMPLETE
                                                 : OPENAI_RESPONSES_COMPLETED,
               0, NULL, 0);
}

char *gateway_responses_whole(struct gateway_request *r) {
    struct openai_responses_output o;
    view(r, r->choices[0].finish == OPENAI_FINISH_LENGTH ? "incomplete" : "completed", &o);
    return openai_responses_json(&o);
}
