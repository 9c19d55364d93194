/* messages.c -- a request of Anthropic's Messages API (POST /v1/messages)
 * on its way out: one choice, shown as a message whose content is a text
 * block and a tool_use block per call.
 *
 * Streamed, the events come in Anthropic's order: message_start before
 * anything else; the text block started with the first text, then a
 * text_delta per piece of text released (stop sequences held back as for
 * chat); each call, as the model writes it, stops the text block and is a
 * tool_use block of its own (started, its input in input_json_delta
 * pieces, stopped when the next starts); when the choice ends what is
 * still open is stopped, then message_delta
 * (stop_reason: end_turn, max_tokens, stop_sequence with the sequence, or
 * tool_use; the output tokens) and message_stop. Each event is an SSE
 * `event:` line and a `data:` line. The request's lock is held by every
 * caller. */
#include "gateway/requests/requests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The message as it stands: choice 0's text and calls, why it ended. */
static void view(struct gateway_request *r, struct openai_messages_output *o) {
    const struct gateway_choice *c = &r->choices[0];
    *o = (struct openai_messages_output){
        .id = r->responses_message_id,
        .model = r->response.model,
        .text = c->text.data ? (const char *)c->text.data : "",
        .length = c->text.length,
        .calls = c->calls,
        .n_calls = c->n_calls,
        .usage = gateway_request_usage(r),
    };
    /* once a call started, the content is fixed: the text block (if its
     * text came before) and the calls */
    o->has_text = r->responses_in_calls
                      ? r->responses_calls_base
                      : r->responses_message_open || o->length > 0 || o->n_calls == 0;
    if (!c->done) return;
    o->stop_reason = c->finish == OPENAI_FINISH_LENGTH       ? "max_tokens"
                     : c->finish == OPENAI_FINISH_TOOL_CALLS ? "tool_use"
                     : c->stop_matched >= 0                  ? "stop_sequence"
                                                             : "end_turn";
    if (c->stop_matched >= 0) o->stop_sequence = r->body.stops[c->stop_matched];
}

/* Appends an event's SSE lines: its name, then its data. */
static void send_event(struct gateway_request *r, const struct openai_messages_output *o,
                       enum openai_messages_event event, int k, const char *delta, size_t length) {
    gateway_request_named_event(r, openai_messages_event_name(event),
                                openai_messages_event_json(o, event, k, delta, length));
}

/* message_start, once. */
static void start(struct gateway_request *r) {
    struct openai_messages_output o;
    if (r->responses_started) return;
    r->responses_started = 1;
    view(r, &o);
    send_event(r, &o, OPENAI_MESSAGES_START, 0, NULL, 0);
}

/* The text block's start, once. */
static void open_text(struct gateway_request *r) {
    struct openai_messages_output o;
    if (r->responses_message_open) return;
    r->responses_message_open = 1;
    view(r, &o);
    send_event(r, &o, OPENAI_MESSAGES_BLOCK_START, 0, NULL, 0);
}

void gateway_messages_call(struct gateway_choice *c, int i, enum gateway_call_event event,
                           const char *piece) {
    struct gateway_request *r = c->request;
    const struct gateway_streamed_call *s = &c->streamed[i];
    struct openai_tool_call calls[GATEWAY_STREAMED_CALLS];
    struct openai_messages_output o;
    start(r);
    if (!r->responses_in_calls) { /* the text before the calls ends */
        view(r, &o);
        if (r->responses_message_open) send_event(r, &o, OPENAI_MESSAGES_BLOCK_STOP, 0, NULL, 0);
        r->responses_calls_base = r->responses_message_open;
        r->responses_in_calls = 1;
    }
    view(r, &o);
    calls[i] = (struct openai_tool_call){(char *)s->id, (char *)s->name, ""};
    o.calls = calls;
    o.n_calls = i + 1;
    int k = r->responses_calls_base + i;
    if (event == GATEWAY_CALL_START) send_event(r, &o, OPENAI_MESSAGES_BLOCK_START, k, NULL, 0);
    if (event == GATEWAY_CALL_PIECE)
        send_event(r, &o, OPENAI_MESSAGES_JSON_DELTA, k, piece, strlen(piece));
    if (event != GATEWAY_CALL_STOP) return;
    send_event(r, &o, OPENAI_MESSAGES_BLOCK_STOP, k, NULL, 0);
    r->responses_calls_closed = i + 1;
}

void gateway_messages_text(struct gateway_choice *c, const char *text, size_t length) {
    struct gateway_request *r = c->request;
    struct openai_messages_output o;
    runner_buffer_append(&c->text, text, length);
    if (!r->body.stream || length == 0) return;
    start(r);
    open_text(r);
    view(r, &o);
    send_event(r, &o, OPENAI_MESSAGES_TEXT_DELTA, 0, text, length);
}

void gateway_messages_end(struct gateway_request *r) {
    struct openai_messages_output o;
    start(r);
    view(r, &o);
    if (o.has_text && !r->responses_in_calls) {
        open_text(r);
        send_event(r, &o, OPENAI_MESSAGES_BLOCK_STOP, 0, NULL, 0);
    }
    /* the calls streamed as written: the last one is still open (whole,
     * or as far as max_tokens let it go) */
    for (int i = r->responses_calls_closed; i < r->choices[0].n_heads; i++)
        gateway_messages_call(&r->choices[0], i, GATEWAY_CALL_STOP, NULL);
    send_event(r, &o, OPENAI_MESSAGES_DELTA, 0, NULL, 0);
    send_event(r, &o, OPENAI_MESSAGES_STOP, 0, NULL, 0);
}

char *gateway_messages_whole(struct gateway_request *r) {
    struct openai_messages_output o;
    view(r, &o);
    return openai_messages_json(&o);
}
