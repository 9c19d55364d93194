/* requests.h -- a client request inside the gateway, from its parsed body
 * to the bytes its client reads: prompt tokens, choices, incremental
 * decoding, stop strings, tool calls, logprobs and the server-sent events.
 *
 * The layer above the supervisors: a request's choices are supervisor
 * jobs, and what their runners produce comes back through the events of
 * gateway_request_events. What a request needs from the layers above it
 * (the router that can cancel its choices wherever they are now, the
 * reader of its output) it is given as callbacks. */
#ifndef LOCKSTEP_GATEWAY_REQUESTS_H
#define LOCKSTEP_GATEWAY_REQUESTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "gateway/core/core.h"
#include "gateway/supervisor/supervisor.h"
#include "openai/openai.h"

struct cJSON;
struct gateway_request;
struct gateway_choice;

/* What requests are created with: the gateway's, for their whole life. */
struct requests_env {
    const struct gateway_params *params;
    atomic_ullong *next_id;          /* runner ids: a request takes one per choice */
    struct gateway_metrics *metrics; /* the gateway's, for the layers that serve requests */
    /* Drops the request's choices (only `only`, if not NULL) from the
     * supervisors that hold them now, which tell their runners (no lock
     * held). The router's: it knows which holders are still alive. */
    void (*cancel)(void *context, struct gateway_request *request, struct gateway_choice *only);
    /* Routes the request's choices not yet handed to a supervisor (an
     * embeddings request's next inputs) as its first ones were. */
    void (*submit_more)(void *context, struct gateway_request *request);
    void *context;
};

/* One choice of a client request (OpenAI's `n`): a runner request of its
 * own, with the request's prompt and the request's seed plus its index, so
 * that each choice resumes alone after a runner restart (DESIGN.md I4).
 * Its fields are guarded by its request's lock, except those set at
 * creation (index, request, sampling) and job's (supervisor.h says). */
/* Calls of one answer whose arguments a chat stream sends as they are
 * written; later ones go out whole when the answer ends. */
#define GATEWAY_STREAMED_CALLS 64

/* What a stream has sent of one call. */
struct gateway_streamed_call {
    char id[48];
    char name[72];
    struct runner_buffer arguments; /* its arguments sent so far (minified JSON), followed by a
                                       NUL that length does not count */
};

/* What happens to a streamed call, for the APIs' events. */
enum gateway_call_event {
    GATEWAY_CALL_START, /* its id and name are known */
    GATEWAY_CALL_PIECE, /* more of its arguments (the piece) */
    GATEWAY_CALL_STOP,  /* its arguments are whole */
};

/* One prompt of a request (a completions request may give several, each
 * answered by n choices). */
struct gateway_prompt {
    int *tokens; /* (n_tokens) */
    int n_tokens;
    int n_cached; /* request lock: its tokens a choice's runner found in its prefix cache (the
                     most of any of its choices) */
};

struct gateway_choice {
    struct supervisor_job job;       /* what the supervisor carries: its runner id, its holder */
    int index;                       /* its place in the answer: prompt * n + its number */
    struct gateway_request *request; /* the client request it belongs to */
    struct gateway_prompt *prompt;   /* the request's prompt it continues */
    int max_tokens;                  /* tokens to generate at most */
    struct runner_sampling sampling; /* the request's, with the seed + its number */
    int *generated;                  /* (max_tokens) tokens received so far */
    int n_generated;
    struct openai_token *token_reports; /* (max_tokens) logprobs, if asked for */
    struct tokenizer_stream decoder;    /* bytes of complete UTF-8 characters */
    char *held;                         /* decoded text not yet sent: it may start a stop string */
    size_t n_held, held_capacity;
    struct runner_buffer text; /* not streaming: the whole answer so far */
    size_t *token_start;       /* (max_tokens) decoded bytes before each token's */
    size_t decoded;            /* bytes the decoder gave so far */
    size_t released;           /* of them, sent (or cut): held starts there */
    int n_shown;               /* tokens the answer shows (a stop string may hide
                                  the last ones, in logprobs too) */
    int n_reported;            /* streaming: tokens whose logprobs were sent */
    long text_chars;           /* characters sent (completions text_offset) */
    int first_sent;            /* chat: the role chunk went out */
    enum openai_finish finish; /* why it ended */
    int stop_matched;          /* the stop string that ended it (index in body.stops), or -1 */
    int done;                  /* 1: it ended (its last chunk went out) */
    uint64_t last_token_us;    /* when its latest token arrived */
    /* tool calling (tool_calls.c), when the request's tool_choice is not "none" */
    struct runner_buffer all;       /* every byte decoded, to find and parse the calls */
    int in_calls;                   /* 1: the trigger was seen: the rest is calls */
    struct openai_tool_call *calls; /* (n_calls) the calls parsed when it ended */
    int n_calls;
    /* streams: the calls sent as the model writes them */
    int n_heads;                            /* calls whose start (id, name) went out */
    struct gateway_streamed_call *streamed; /* (GATEWAY_STREAMED_CALLS) what went out of each */
    /* embeddings (embeddings.c) */
    float *embedding;   /* (embedding_size) its input's vector as the runner pooled it, or NULL */
    int embedding_size; /* values in it: the model's dim */
};

/* One client request. The HTTP side and the supervisors (one reference per
 * choice in a table) each hold references; the last release frees it.
 * Everything below `lock`, and its choices, are guarded by it. Its choices
 * live and die together: the request is over when every choice ended, or
 * at the first error (the other choices are cancelled then), or when the
 * client leaves. */
struct gateway_request {
    uint64_t id;                         /* its first choice's runner id (choice i has id + i) */
    atomic_int references;               /* holders: HTTP connection, instance table entries */
    const struct requests_env *env;      /* the gateway's, for the request's life */
    const struct gateway_served *served; /* its model: vocabulary, chat template, context */
    char instance_id[160];      /* the instance it was first routed to (metric labels; where its
                                   choices are now is their job's holder) */
    struct openai_request body; /* the parsed request */
    struct openai_response response; /* what every chunk repeats */
    char response_id[48];            /* "chatcmpl-...", "cmpl-..." or "resp_..." */
    char responses_message_id[48];   /* Responses API: its message item's id; Messages API: the
                                        message's ("msg_...") */
    int responses_sequence;          /* lock: Responses events sent so far */
    int responses_started;           /* lock: 1: response.created went out */
    int responses_message_open;      /* lock: 1: the message item was added */
    int responses_in_calls;          /* lock: 1: a call's item or block was started */
    int responses_calls_base;        /* lock: the output index of call 0 (1 after a message) */
    int responses_calls_closed;      /* lock: streamed calls whose item or block is done */
    struct gateway_prompt *prompts;  /* (n_prompts) its prompts' tokens: chat's one, or
                                        completions' one or more */
    int n_prompts;
    int n_prompt_tokens;            /* the prompts' tokens, summed (usage) */
    uint64_t arrival_us;            /* when it was accepted */
    struct gateway_choice *choices; /* (n_choices) body.n for each prompt, prompt by prompt */
    int n_choices;
    int n_submitted; /* lock: choices handed to a supervisor so far (an embeddings request
                        hands them GATEWAY_EMBEDDING_WINDOW at a time; others all at once) */

    pthread_mutex_t lock;
    int n_ended;                       /* choices that ended */
    int done;                          /* 1: nothing more will be produced */
    int failed;                        /* 1: ended with an error (error_json) */
    char *error_json;                  /* the error body when failed */
    int abandoned;                     /* 1: the client went away */
    struct runner_buffer out;          /* streaming: SSE bytes not yet sent */
    void (*wake_reader)(void *reader); /* wakes its reader when there is output */
    void *reader;                      /* its reader (the HTTP connection), NULL once gone */
    int suspended;                     /* 1: the reader waits for output */
    uint64_t first_token_us, last_output_us;
    uint64_t unsent_since_us; /* streaming: when the oldest unsent token arrived (0: none) */
};

/* request.c */
/* A request of body (taken: *body is emptied) for served's model, first
 * routed to the instance called instance_id; NULL with error (a 400 for
 * what the model refuses: its prompt's length, max_tokens, sampling). */
struct gateway_request *gateway_request_create(const struct requests_env *env,
                                               const struct gateway_served *served,
                                               const char *instance_id, struct openai_request *body,
                                               struct openai_error *error);
void gateway_request_release(struct gateway_request *request);
/* The choice of a supervisor's job. */
struct gateway_choice *gateway_choice_of(struct supervisor_job *job);
/* The events a supervisor tells requests' choices by (context unused:
 * the instance events are the caller's to fill in). */
void gateway_request_events(struct supervisor_events *events);
/* Called by the supervisor `from` for each frame about a choice (no lock
 * held); ignored unless the choice is still that supervisor's (a move hands
 * it to another). A token fills *latency: seconds to the request's first
 * token and since the choice's last (< 0: not this time). */
struct gateway_latency {
    double ttft, itl;
};
void gateway_request_on_token(struct gateway_choice *choice, const struct runner_token *token,
                              struct supervisor *from, struct gateway_latency *latency);
void gateway_request_on_finished(struct gateway_choice *choice,
                                 const struct runner_finished *finished, struct supervisor *from);
/* Submits the request's choices not yet submitted to s (a reference
 * each), as many as its window allows; never waits. */
void gateway_request_submit(struct gateway_request *request, struct supervisor *s);
/* Ends it with an error (status, message) if it is not done; its choices
 * still in the instance's table are the caller's to drop. */
void gateway_request_fail(struct gateway_request *request, int status, const char *message);
/* Ends a choice (lock held): streaming, its last chunk with its
 * finish_reason; the request ends with its last choice. */
void gateway_choice_end(struct gateway_choice *choice, enum openai_finish finish);
/* Its usage: the prompt once, the tokens generated over all its choices
 * (lock held). */
struct openai_usage gateway_request_usage(const struct gateway_request *request);
/* Adds an SSE comment if the stream has been quiet; wakes its connection. */
void gateway_request_keep_alive(struct gateway_request *request, uint64_t now_us);
/* Wakes its reader if it waits (lock held). */
void gateway_request_wake(struct gateway_request *request);
/* Appends "data: JSON\n\n" to the stream and frees json (lock held). */
void gateway_request_event(struct gateway_request *request, char *json);
/* The same with an "event: NAME" line first, as the Responses and
 * Messages APIs name their events (json NULL: nothing). */
void gateway_request_named_event(struct gateway_request *request, const char *name, char *json);

/* tool_calls.c: tool calling around a request (lock held where it has one) */
/* 1 if the request's answer may hold tool calls (tools given, tool_choice
 * not "none"). */
int gateway_tools_active(const struct gateway_request *request);
/* The tools as the chat template takes them ((*out)[n_tools], free() it;
 * NULL with 0 when the request renders none); -1 with error. */
int gateway_tools_render(const struct gateway_request *request, struct tokenizer_chat_tool **out,
                         int *n, struct openai_error *error);
/* The messages as the chat template takes them, tool calls included
 * ((*out)[n_messages] and the calls they point to: free() *out and
 * *calls); -1 with error. */
int gateway_tools_messages(const struct gateway_request *request,
                           struct tokenizer_chat_message **out, struct tokenizer_tool_call **calls,
                           struct openai_error *error);
/* Sets the request's grammar (and trigger, for "auto") to its tool calls'
 * in the instance's family; 0 when it calls none; -1 with error. */
int gateway_tools_constrain(struct gateway_request *request, struct openai_error *error);
/* How many of the choice's held bytes may go out as content: *limit (at
 * most n_held). Returns 1 when the trigger was found (the calls start after
 * *limit bytes of held and its content ends there), else 0 (the bytes
 * after *limit could still become the trigger; all of them when final). */
int gateway_tools_limit(const struct gateway_choice *choice, int final, size_t *limit);
/* A chat stream in its calls: sends each call's first chunk (id, name)
 * once its name is written, then its arguments as they grow. */
void gateway_tools_stream(struct gateway_choice *choice);
/* The choice ended with its calls' text after the trigger: parses them
 * into choice->calls. 0: *finish is OPENAI_FINISH_TOOL_CALLS, and a stream
 * got what it had not of the calls' chunks; or, cut by max_tokens, the
 * calls written whole are its calls and *finish stays LENGTH. 1: the text
 * stays content (no call was written whole before max_tokens, or they do
 * not parse with "auto"); 2: the same, but a stream already sent a call's
 * chunks, so nothing more goes out; -1: they do not parse under a grammar
 * that forced them (a bug), message in err. */
int gateway_tools_finish(struct gateway_choice *choice, enum openai_finish *finish, char *err,
                         size_t errlen);
/* Frees the choice's tool-call state. */
void gateway_tools_free_choice(struct gateway_choice *choice);

/* embeddings.c: an embeddings request's inputs, each a choice that
 * generates nothing. They go to the runners GATEWAY_EMBEDDING_WINDOW at a
 * time, the next as each ends, so that a request of 2048 inputs never
 * fills a runner's queue (and gets a 429) on its own. */
#define GATEWAY_EMBEDDING_WINDOW 32
/* Choices of the request to have with runners at once. */
int gateway_request_window(const struct gateway_request *request);
/* Called by the supervisor `from` with a choice's vector (no lock held). */
void gateway_request_on_embedding(struct gateway_choice *choice,
                                  const struct runner_embedding *embedding,
                                  struct supervisor *from);
/* An embedding choice's runner request finished (request lock held, and
 * released): its vector was kept, so it ends; else the request fails. */
void gateway_embedding_finished(struct gateway_choice *choice, const struct runner_finished *f);
/* The answer of a finished embeddings request (lock held); NULL when
 * memory runs out. */
char *gateway_embeddings_whole(struct gateway_request *request);

/* tokenize.c: llama.cpp's POST /tokenize and POST /detokenize, answered in
 * the HTTP thread with a served model's tokenizer (no runner is asked). */
struct gateway_tokens_body {
    struct cJSON *root;         /* the parsed body: owns model and content */
    int detokenize;             /* 1: /detokenize, 0: /tokenize */
    const char *model;          /* "model", or NULL when absent */
    const char *content;        /* /tokenize: the text */
    int add_special;            /* /tokenize: a BOS first if the vocabulary asks for one */
    int parse_special;          /* /tokenize: special tokens' spellings become those tokens */
    int with_pieces;            /* /tokenize: {"id", "piece"} objects instead of ids */
    const struct cJSON *tokens; /* /detokenize: the array of integer ids (range not checked) */
};
/* Parses a body of /tokenize (detokenize 0) or /detokenize (1); -1 with a
 * 400 in e. Free it with gateway_tokens_free. */
int gateway_tokens_parse(const char *body, size_t length, int detokenize,
                         struct gateway_tokens_body *out, struct openai_error *e);
/* The answer's JSON text with the model's tokenizer (free() it), or
 * NULL with e: a 400 for an id outside the vocabulary, a 500 when memory
 * runs out. */
char *gateway_tokens_answer(const struct gateway_served *served,
                            const struct gateway_tokens_body *body, struct openai_error *e);
void gateway_tokens_free(struct gateway_tokens_body *body);

/* responses.c: a Responses API request's output (request lock held). */
/* Text released by choice c: kept for the answer; streamed as a delta
 * event (after the events that open the response and its message). */
void gateway_responses_text(struct gateway_choice *c, const char *text, size_t length);
/* The events that end a streamed response: the message and calls closed,
 * then response.completed or response.incomplete. */
void gateway_responses_end(struct gateway_request *request);
/* Call i of a streamed response: its item added, a piece of its arguments,
 * or its arguments whole and its item done (choice->streamed[i]). */
void gateway_responses_call(struct gateway_choice *choice, int i, enum gateway_call_event event,
                            const char *piece);
/* The whole response object (malloc'd), or NULL when memory runs out. */
char *gateway_responses_whole(struct gateway_request *request);

/* messages.c: an Anthropic Messages API request's output (request lock
 * held), as responses.c's for the Responses API. */
void gateway_messages_text(struct gateway_choice *c, const char *text, size_t length);
void gateway_messages_end(struct gateway_request *request);
void gateway_messages_call(struct gateway_choice *choice, int i, enum gateway_call_event event,
                           const char *piece);
char *gateway_messages_whole(struct gateway_request *request);

#endif
