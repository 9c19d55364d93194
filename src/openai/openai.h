/* openai.h -- the OpenAI JSON layer (src/openai, a leaf the gateway calls).
 *
 * Parses the bodies of POST /v1/chat/completions and POST /v1/completions
 * into a struct openai_request, validating every field the gateway uses
 * and refusing every field it does not honour, and builds every response
 * body the official OpenAI clients read: chat.completion,
 * chat.completion.chunk, text_completion (whole and streamed), the
 * usage-only chunk, GET /v1/models and the error object. The HTTP server,
 * SSE framing and routing live in the rest of the module; this layer only
 * turns JSON into structs and structs into JSON.
 *
 * Every builder returns a NUL-terminated, malloc'ed JSON text (free it with
 * free()) or NULL when memory runs out. Builders never emit invalid UTF-8:
 * a byte sequence that is not UTF-8 becomes U+FFFD, and so does a NUL byte.
 * Builders are reentrant; a streaming gateway calls openai_chunk_json once
 * per token with one small struct openai_delta. */
#ifndef LOCKSTEP_GATEWAY_OPENAI_H
#define LOCKSTEP_GATEWAY_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#define OPENAI_STOPS_MAX           16        /* stop strings a request may give */
#define OPENAI_CHOICES_MAX         8         /* choices (n) a request may ask for per prompt */
#define OPENAI_REQUEST_CHOICES_MAX 64        /* choices in all: prompts x n */
#define OPENAI_BIASES_MAX          300       /* logit_bias entries (OpenAI's limit) */
#define OPENAI_GRAMMAR_MAX         (1 << 20) /* bytes of a grammar (the runner protocol's limit) */
#define OPENAI_TOP_LOGPROBS_MAX    20        /* alternatives per token a request may ask for */
#define OPENAI_LOGPROB_FLOOR       (-9999.0) /* what a logprob of -inf (or NaN) is reported as */
#define OPENAI_TOOLS_MAX           128       /* tools a request may give (OpenAI's limit) */
#define OPENAI_TOOL_NAME_MAX       64        /* bytes of a function's name: [a-zA-Z0-9_-] */
#define OPENAI_EMBEDDING_INPUTS    2048      /* inputs an embeddings request may give (OpenAI's) */

/* Which endpoint a body was sent to. */
enum openai_kind {
    OPENAI_CHAT = 1,       /* POST /v1/chat/completions */
    OPENAI_COMPLETION = 2, /* POST /v1/completions */
    OPENAI_EMBEDDING = 4,  /* POST /v1/embeddings (openai_parse_embeddings) */
};

/* ======================= errors ======================= */

/* An error in the shape OpenAI returns: {"error":{"message","type","param","code"}}. */
struct openai_error {
    int status;        /* HTTP status: 400 for every parse error */
    char message[256]; /* one line for the client, naming the field and the bad value */
    const char *type;  /* static string: "invalid_request_error", "server_error", ... */
    char param[64];   /* the offending parameter ("temperature", "messages[1].role"); "" for none */
    const char *code; /* static string such as "model_not_found", or NULL */
};

/* Fills e: status, type (static), param (NULL or "" for none), code
 * (static or NULL) and a printf-style message (truncated to fit). */
void openai_error_set(struct openai_error *e, int status, const char *type, const char *param,
                      const char *code, const char *format, ...)
    __attribute__((format(printf, 6, 7)));

/* {"error":{"message":...,"type":...,"param":... or null,"code":... or null}}. */
char *openai_error_json(const struct openai_error *e);

/* ======================= requests (openai_request.c) ======================= */

/* One call of a function: in an assistant message of the conversation
 * (owned by it) or in an answer (openai_result, borrowed). */
struct openai_tool_call {
    char *id;        /* the call's id ("call_..."); NULL if it has none */
    char *name;      /* the function's name */
    char *arguments; /* its arguments: JSON text as the client or the model wrote it */
};

/* One chat message. */
struct openai_message {
    char *role;    /* "system", "developer", "user", "assistant" or "tool" */
    char *content; /* its text; a content array's text parts concatenated; "" for none */
    struct openai_tool_call *tool_calls; /* assistant: the calls it made (n_tool_calls) */
    int n_tool_calls;                    /* 0 for a message without calls */
    char *tool_call_id;                  /* tool: the id of the call whose result it is */
    char *name;                          /* tool: the function's name, if given; else NULL */
};

/* One function the model may call (tools[i].function). */
struct openai_tool {
    char *name;        /* [a-zA-Z0-9_-]{1,64} */
    char *description; /* what it does, or NULL */
    char *parameters;  /* its arguments' JSON Schema as compact JSON text, or NULL */
    char *grammar;     /* GBNF of JSON valid under parameters (any object without them),
                          from grammar_from_json_schema: root is the arguments' rule */
};

/* What tool_choice asks for. */
enum openai_tool_choice {
    OPENAI_TOOLS_NONE = 0,     /* "none" (the default without tools): no call, tools unrendered */
    OPENAI_TOOLS_AUTO = 1,     /* "auto" (the default with tools): text or calls */
    OPENAI_TOOLS_REQUIRED = 2, /* "required": one or more calls of any tool */
    OPENAI_TOOLS_FUNCTION = 3, /* {"type":"function","function":{"name"}}: calls of that one */
};

/* One prompt of a completions request: text or token ids, never both. */
struct openai_prompt {
    char *text;   /* the prompt text (may be ""), or NULL when ids were given */
    int n_tokens; /* >= 1 when tokens is set, else 0 */
    int *tokens;  /* (n_tokens) token ids >= 0, or NULL */
};

/* A parsed request body. Fields the endpoint does not have keep their
 * defaults (for example messages for a completion). */
struct openai_request {
    enum openai_kind kind; /* the endpoint it was parsed for */
    char *model;           /* requested model name, non-empty; NULL when the body has none
                              (then the only model served answers, and with several
                              served the request is a 400) */

    /* chat only */
    int n_messages;                  /* >= 1 */
    struct openai_message *messages; /* (n_messages) in conversation order */

    /* completions only: one prompt or several (each answered with n choices) */
    int n_prompts;                 /* 1..OPENAI_REQUEST_CHOICES_MAX / n */
    struct openai_prompt *prompts; /* (n_prompts) in the order given */

    int stream;                    /* 1: answer with server-sent chunks */
    int include_usage;             /* stream_options.include_usage: 1 adds a usage-only chunk
                                      (stream_options is refused unless stream is true) */
    int max_tokens;                /* max_completion_tokens, else max_tokens: >= 1; -1 when absent
                                      (generate until end-of-sequence or the context is full) */
    float temperature;             /* 0..2, default 1 (as OpenAI); 0 is greedy */
    float top_p;                   /* 0..1, default 1 (off) */
    int top_k;                     /* extension: >= 0, default 0 (off); -1 is read as 0 */
    float min_p;                   /* extension: 0..1, default 0 (off) */
    int has_seed;                  /* 1 if seed was given */
    uint64_t seed;                 /* the seed as given; a negative seed is its two's complement */
    int n_stops;                   /* 0..OPENAI_STOPS_MAX */
    char *stops[OPENAI_STOPS_MAX]; /* (n_stops) non-empty stop strings */
    float presence_penalty;        /* -2..2, default 0 */
    float frequency_penalty;       /* -2..2, default 0 */
    float repetition_penalty;      /* extension: > 0, default 1 (off) */
    int ignore_eos;                /* extension (vLLM's): 1: end-of-sequence does not stop */
    int logprobs;                  /* 1: report each generated token's log-probability */
    int top_logprobs;              /* 0..OPENAI_TOP_LOGPROBS_MAX alternatives per token (chat:
                                      top_logprobs; completions: the integer logprobs) */
    int n;                         /* choices to generate: 1..OPENAI_CHOICES_MAX, default 1 */
    int n_biases;                  /* 0..OPENAI_BIASES_MAX */
    struct openai_bias *biases;    /* (n_biases) logit_bias, in the order given */
    char *grammar; /* GBNF the answer must match: the grammar field, or response_format's JSON
                      (schema) as a grammar, or (set by the gateway) the tool calls'; NULL:
                      free text */
    char *grammar_trigger; /* set by the gateway for tool_choice auto: grammar applies from
                              where this text appears in the answer on; NULL: from the start */

    /* chat only: tool calling (openai_tools.c) */
    int n_tools;                         /* 0..OPENAI_TOOLS_MAX */
    struct openai_tool *tools;           /* (n_tools) in the order given */
    enum openai_tool_choice tool_choice; /* what the answer may or must call */
    int tool_choice_index;               /* OPENAI_TOOLS_FUNCTION: the tool named */
    int parallel_tool_calls;             /* 1 (default): an answer may make several calls */

    int responses; /* 1: sent to POST /v1/responses (openai_parse_responses): a chat request
                      whose answer is a response object and its events */
    int anthropic; /* 1: sent to POST /v1/messages (openai_parse_messages): a chat request
                      whose answer is an Anthropic message and its events */

    /* embeddings only: the inputs are prompts (each one choice) */
    int dimensions; /* 0: the model's whole vector; else 1..RUNNER_EMBEDDING_MAX, the first
                       this many values, normalized after the cut */
    int base64;     /* 1: encoding_format "base64" (little-endian float32 bytes) */
};

/* A logit_bias entry. */
struct openai_bias {
    int token;  /* token id >= 0 (the runner checks it against the vocabulary) */
    float bias; /* -100..100, added to the logit; -100 bans the token */
};

struct cJSON;

/* openai_fields.c: for the parsers of a request's optional parts. A 400
 * invalid_request_error about param (control characters in the message
 * become spaces); returns -1. */
int openai_refuse(struct openai_error *e, const char *param, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
/* A 500 for memory that ran out; returns -1. */
int openai_out_of_memory(struct openai_error *e);
/* The chat completions body another API's body was rewritten into
 * (Responses, Messages), parsed as one into out; chat is deleted (NULL:
 * the rewrite failed, e says why). A refusal naming one of chat's fields
 * renames[i][0] (or a member of it) names the client's renames[i][1]
 * instead. 0, or -1 with e. */
int openai_parse_rewritten(struct cJSON *chat, const char *const (*renames)[2], int n_renames,
                           struct openai_request *out, struct openai_error *e);
/* A copy of value added to object under key (value NULL: nothing); 0, or
 * -1 with a 500 in e. For the rewrites of other APIs' bodies. */
int openai_copy_member(struct cJSON *object, const char *key, const struct cJSON *value,
                       struct openai_error *e);
/* object's member name, or NULL if it is absent or null. */
const struct cJSON *openai_member(const struct cJSON *object, const char *name);
/* A 400 about param for a member of object not among names (NULL-
 * terminated, at most 64), or among them twice; 0 if there is none. */
int openai_check_keys(const struct cJSON *object, const char *param, const char *const *names,
                      struct openai_error *e);
/* Parses text (len bytes) as one JSON object with nothing but whitespace
 * after it (cJSON_Delete it); NULL with a 400 in e that names what (say
 * "the request body"), the line and column, and a nesting deeper than the
 * parser takes as such. */
struct cJSON *openai_parse_object(const char *text, size_t len, const char *what,
                                  struct openai_error *e);
/* openai_response.c, for the builders: a JSON string of length bytes of
 * text made valid UTF-8 (NULL when memory runs out); item added to parent
 * (under key, a literal, or to an array when key is NULL) and returned, or
 * deleted with *failed set when either is NULL or adding fails. */
struct cJSON *openai_json_text(const char *text, size_t length);
struct cJSON *openai_json_add(struct cJSON *parent, const char *key, struct cJSON *item,
                              int *failed);
#define OPENAI_STRINGIFY(x)  OPENAI_STRINGIFY_(x)
#define OPENAI_STRINGIFY_(x) #x

/* openai_request.c: value (NULL: absent) as prompts into out: a string,
 * [id, ...], or a list of up to max strings or of [id, ...] lists, one
 * prompt each, all of one kind (as OpenAI takes completions' prompt and
 * embeddings' input); errors name param. -1 with e. */
int openai_parse_prompts(const struct cJSON *value, const char *param, int max,
                         struct openai_request *out, struct openai_error *e);

/* openai_constrain.c: reads logit_bias, grammar and response_format of a
 * parsed body into out (compiling the grammar to check it); -1 with e. */
int openai_parse_constraints(const struct cJSON *root, struct openai_request *out,
                             struct openai_error *e);

/* openai_tools.c: reads tools, tool_choice and parallel_tool_calls into out
 * (converting each tool's parameters to a grammar, so that a schema
 * outside src/grammar's subset is a 400 naming its keyword); -1 with e.
 * Call after openai_parse_constraints (tools cannot be combined with a
 * grammar). */
int openai_parse_tools(const struct cJSON *root, struct openai_request *out,
                       struct openai_error *e);

/* openai_tools.c: the tool-call fields of messages[index] (JSON object
 * message) into out, whose role is already set: an assistant's tool_calls,
 * a tool message's tool_call_id and name; -1 with e. */
int openai_parse_message_tools(const struct cJSON *message, int index, struct openai_message *out,
                               struct openai_error *e);

/* Frees the tools and the messages' tool-call fields of request. */
void openai_tools_free(struct openai_request *request);

struct tokenizer_tool_format;
/* openai_tools.c: the GBNF of the tool calls request may make, written in
 * format (tokenizer_chat_tool_format of the model's chat family): every
 * tool (REQUIRED, AUTO) or the one named (FUNCTION), one call or, with
 * parallel_tool_calls, one or more; its root starts with format->trigger.
 * Compiled to check it. 0 with *out (malloc'd), -1 with e (500: a bug). */
int openai_tools_grammar(const struct openai_request *request,
                         const struct tokenizer_tool_format *format, char **out,
                         struct openai_error *e);

/* Parses and validates len bytes of body (need not be NUL-terminated) as a
 * request for the kind endpoint. 0 on success: out owns its strings, free
 * with openai_request_free. -1 with error filled (status 400, type
 * "invalid_request_error", param naming the field; 500 "server_error" when
 * memory runs out) and out left empty (freeing it is harmless).
 *
 * No field is silently ignored (the table request_fields in
 * openai_request.c lists them all). A JSON null is read as absent. A field
 * the endpoint does not have is refused as OpenAI refuses it:
 * "Unrecognized request argument supplied: X". Accepted and ignored, since
 * they cannot change the answer: user, and for chat safety_identifier,
 * metadata, store, service_tier, prompt_cache_key. Refused unless their
 * value asks for nothing (the value accepted in parentheses): functions
 * ([]), function_call ("none" or "auto"), response_format
 * ({"type":"text"}), modalities (["text"]), logit_bias ({}), and for
 * completions best_of (1) and suffix (""); always refused: audio,
 * prediction, web_search_options, reasoning_effort, verbosity. A field
 * given twice is refused. */
int openai_parse_request(const char *body, size_t len, enum openai_kind kind,
                         struct openai_request *out, struct openai_error *error);

/* Frees what a request owns and empties it. */
void openai_request_free(struct openai_request *request);

/* ======================= responses (openai_response.c) ======================= */

/* Why generation ended, as finish_reason reports it. */
enum openai_finish {
    OPENAI_FINISH_NONE = 0,       /* not finished: finish_reason is null */
    OPENAI_FINISH_STOP = 1,       /* "stop": end-of-sequence or a stop string */
    OPENAI_FINISH_LENGTH = 2,     /* "length": max_tokens or the context length */
    OPENAI_FINISH_TOOL_CALLS = 3, /* "tool_calls": the answer ends with calls */
};

/* One of a token's most likely alternatives. */
struct openai_alternative {
    const char *text; /* its bytes (length of them, not NUL-terminated), caller-owned */
    size_t length;
    float logprob; /* natural log of its probability */
};

/* One generated token for a logprobs report. Texts point to the caller's
 * storage (vocabulary pieces, say) and may hold part of a UTF-8 character:
 * the "bytes" arrays carry them exactly, the "token" strings as U+FFFD. */
struct openai_token {
    const char *text; /* its bytes (length of them, not NUL-terminated) */
    size_t length;
    float logprob; /* natural log of its probability */
    int n_top;     /* 0..OPENAI_TOP_LOGPROBS_MAX alternatives that follow */
    struct openai_alternative top[OPENAI_TOP_LOGPROBS_MAX]; /* most likely first */
};

/* Token counts of one request. */
struct openai_usage {
    int prompt_tokens;     /* tokens the prompt was encoded to */
    int completion_tokens; /* tokens generated */
    int cached_tokens;     /* of the prompt's, found in the runner's prefix cache
                              (prompt_tokens_details.cached_tokens) */
};

/* What every response body of one request shares. */
struct openai_response {
    enum openai_kind kind; /* chat.completion[.chunk] or text_completion */
    const char *id;        /* "chatcmpl-<hex>" or "cmpl-<hex>", the same in every chunk */
    const char *model;     /* model name reported back */
    int64_t created;       /* unix time in seconds, the same in every chunk */
    int logprobs;          /* 1: the request asked for logprobs */
    int include_usage;     /* 1: streaming with include_usage: every chunk has
                              "usage": null, then a usage-only chunk */
};

/* Fills response from a parsed request (kind, model, logprobs,
 * include_usage when streaming); id and model are borrowed, not copied. */
void openai_response_init(struct openai_response *response, const struct openai_request *request,
                          const char *id, int64_t created);

/* A whole, non-streamed answer (one choice of it). */
struct openai_result {
    const char *text; /* generated text (length bytes) */
    size_t length;
    enum openai_finish finish;
    struct openai_usage usage;         /* openai_completion_json's; openai_choices_json
                                          takes the request's apart */
    int n_tokens;                      /* entries in tokens */
    int n_tool_calls;                  /* chat: calls the answer made (then text may be empty:
                                          content is null) */
    const struct openai_token *tokens; /* logprobs of the generated tokens, if asked for */
    const struct openai_tool_call *tool_calls; /* (n_tool_calls), ids set */
};

/* A chat chunk's piece of one tool call (delta.tool_calls[0]). */
struct openai_call_delta {
    int index;             /* the call's place among the choice's calls: 0.. */
    const char *id;        /* its id on its first chunk (with type and name), else NULL */
    const char *name;      /* its function's name on its first chunk, else NULL */
    const char *arguments; /* a fragment of its arguments' text (NUL-terminated; "" on the
                              first chunk) */
};

/* One streamed chunk of an answer. */
struct openai_delta {
    int first;        /* chat: 1 on the first chunk, whose delta carries role "assistant" */
    const char *text; /* new text (length bytes, may be 0) */
    size_t length;
    enum openai_finish finish;         /* set on the last chunk only (chat: its delta is {}
                                          unless it carries text) */
    int n_tokens;                      /* tokens whose text this chunk carries */
    const struct openai_token *tokens; /* their logprobs, if asked for */
    long text_offset; /* completions logprobs: characters generated before this chunk
                         (sum of openai_text_chars over the earlier chunks' text) */
    const struct openai_call_delta *call; /* chat: a piece of a tool call (then the delta
                                             has no content), or NULL */
};

/* chat.completion or text_completion body, as response->kind says: one
 * choice (index 0) and result->usage. */
char *openai_completion_json(const struct openai_response *response,
                             const struct openai_result *result);

/* The same body with n_results choices (n from the request): results[i] is
 * choice i, and usage is the whole request's (the prompt counted once, the
 * completion tokens of every choice). */
char *openai_choices_json(const struct openai_response *response,
                          const struct openai_result *results, int n_results,
                          const struct openai_usage *usage);

/* chat.completion.chunk or streamed text_completion body for one delta of
 * the only choice (index 0). */
char *openai_chunk_json(const struct openai_response *response, const struct openai_delta *delta);

/* The same for a delta of choice `index` (0..n-1): the chunks of a
 * request's choices interleave, each naming its own. */
char *openai_choice_chunk_json(const struct openai_response *response,
                               const struct openai_delta *delta, int index);

/* The usage-only chunk that ends a stream with include_usage ("choices": []). */
char *openai_usage_chunk_json(const struct openai_response *response,
                              const struct openai_usage *usage);

/* GET /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by",
 * "context_length","max_model_len"}]}; context_lengths (n_ids, or NULL) are
 * the models' contexts in tokens, omitted where 0 (max_model_len is vLLM's
 * name for it). */
char *openai_models_json(const char *const *ids, const int *context_lengths, int n_ids,
                         int64_t created);

/* GET /v1/models/{id}: one model object. */
char *openai_model_json(const char *id, int context_length, int64_t created);

/* Characters (code points) in length bytes of UTF-8, counted so that sums
 * over pieces split inside a character still add up: the unit of the
 * completions text_offset. */
long openai_text_chars(const char *text, size_t length);

/* ======================= the Responses API (openai_responses.c) ======================= */

/* Parses a POST /v1/responses body into the chat request it amounts to
 * (kind OPENAI_CHAT, responses 1): instructions and input as messages,
 * max_output_tokens, function tools, tool_choice, text.format as
 * response_format. store true, previous_response_id and built-in tools
 * are refused. 0, or -1 with error naming the Responses field. */
int openai_parse_responses(const char *body, size_t len, struct openai_request *out,
                           struct openai_error *error);

/* A response as the Responses API shows it: a message item (when there is
 * text or no call) and a function_call item per call. */
struct openai_responses_output {
    const char *id;         /* "resp_..." */
    const char *message_id; /* "msg_...": its message item's */
    const char *model;
    int64_t created;
    const char *status; /* "in_progress", "completed" or "incomplete" (max_output_tokens) */
    int has_message;    /* 1: output[0] is the message */
    const char *text;   /* the message's text (length bytes) */
    size_t length;
    const struct openai_tool_call *calls; /* (n_calls) ids set; items after the message */
    int n_calls;
    int parallel_tool_calls;
    struct openai_usage usage; /* shown once it is no longer in progress */
};

/* The events of a streamed response, in the order they come. */
enum openai_responses_event {
    OPENAI_RESPONSES_CREATED,
    OPENAI_RESPONSES_IN_PROGRESS,
    OPENAI_RESPONSES_ITEM_ADDED,
    OPENAI_RESPONSES_PART_ADDED,
    OPENAI_RESPONSES_TEXT_DELTA,
    OPENAI_RESPONSES_TEXT_DONE,
    OPENAI_RESPONSES_PART_DONE,
    OPENAI_RESPONSES_ARGUMENTS_DELTA,
    OPENAI_RESPONSES_ARGUMENTS_DONE,
    OPENAI_RESPONSES_ITEM_DONE,
    OPENAI_RESPONSES_COMPLETED,
    OPENAI_RESPONSES_INCOMPLETE,
};

/* The response object (POST /v1/responses' body, and what created,
 * in_progress, completed and incomplete events carry). */
char *openai_responses_json(const struct openai_responses_output *output);
/* "response.output_text.delta" and the like. */
const char *openai_responses_event_name(enum openai_responses_event event);
/* One event's data: its type and sequence number, then what it carries:
 * the response; output item k (added, done); or item k's id with the
 * delta (length bytes), its whole text or arguments, or its text part. */
char *openai_responses_event_json(const struct openai_responses_output *output,
                                  enum openai_responses_event event, int sequence, int k,
                                  const char *delta, size_t length);

/* ======================= Anthropic's Messages API (openai_messages.c) ======================= */

/* Parses a POST /v1/messages body (count_only: /v1/messages/count_tokens,
 * where max_tokens is not asked for) into the chat request it amounts to
 * (kind OPENAI_CHAT, anthropic 1): system and messages with text,
 * tool_use and tool_result blocks, max_tokens, stop_sequences, tools
 * with input_schema, tool_choice. 0, or -1 with error naming the field. */
int openai_parse_messages(const char *body, size_t len, int count_only, struct openai_request *out,
                          struct openai_error *error);

/* An answer as the Messages API shows it: a text block (when there is
 * text or no call), then a tool_use block per call. */
struct openai_messages_output {
    const char *id; /* "msg_..." */
    const char *model;
    int has_text; /* 1: content[0] is the text block */
    const char *text;
    size_t length;
    const struct openai_tool_call *calls; /* (n_calls) ids set */
    int n_calls;
    const char *stop_reason;   /* end_turn, max_tokens, stop_sequence or tool_use */
    const char *stop_sequence; /* the stop string that ended it, or NULL */
    struct openai_usage usage;
};

/* The events of a streamed message, in the order they come. */
enum openai_messages_event {
    OPENAI_MESSAGES_START,
    OPENAI_MESSAGES_BLOCK_START,
    OPENAI_MESSAGES_TEXT_DELTA,
    OPENAI_MESSAGES_JSON_DELTA,
    OPENAI_MESSAGES_BLOCK_STOP,
    OPENAI_MESSAGES_DELTA,
    OPENAI_MESSAGES_STOP,
};

/* ======================= embeddings (openai_embeddings.c) ======================= */

/* Parses a POST /v1/embeddings body: input (a string, a list of up to
 * OPENAI_EMBEDDING_INPUTS strings, token ids, or lists of token ids; no
 * empty string) into out->prompts, model, dimensions, encoding_format
 * ("float" or "base64") and user (ignored); any other field is refused. 0,
 * or -1 with a 400 in e (out left empty). */
int openai_parse_embeddings(const char *body, size_t len, struct openai_request *out,
                            struct openai_error *e);

/* What an embeddings answer shows. */
struct openai_embeddings {
    const char *model;           /* the model's name */
    const float *const *vectors; /* (n_vectors) each of size values, pooled, not normalized */
    int n_vectors;
    int size;          /* values of each vector: the model's dim */
    int dimensions;    /* 0: all of them; else the first this many (before normalizing) */
    int base64;        /* 1: each vector as base64 of its little-endian float32 bytes */
    int prompt_tokens; /* usage: the inputs' tokens */
};

/* {"object":"list","data":[{"object":"embedding","index","embedding"}...],
 * "model","usage":{"prompt_tokens","total_tokens"}}: each vector cut to
 * dimensions and L2-normalized. */
char *openai_embeddings_json(const struct openai_embeddings *answer);

/* The message object (POST /v1/messages' body). */
char *openai_messages_json(const struct openai_messages_output *output);
/* "content_block_delta" and the like. */
const char *openai_messages_event_name(enum openai_messages_event event);
/* One event's data: message_start's message (no content yet), block k's
 * start, a text_delta or input_json_delta of length bytes, block k's
 * stop, message_delta's stop reason and output tokens, message_stop. */
char *openai_messages_event_json(const struct openai_messages_output *output,
                                 enum openai_messages_event event, int k, const char *delta,
                                 size_t length);
/* {"type":"error","error":{"type":...,"message":...}}: Anthropic's shape,
 * the type from the status. */
char *openai_messages_error_json(const struct openai_error *e);

#endif
