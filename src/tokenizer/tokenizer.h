/* tokenizer.h -- text to token ids and back.
 *
 * Two schemes, as llama.cpp names them in GGUF's tokenizer.ggml.model:
 *   "llama": SentencePiece-style BPE over pieces with scores, a "▁" space
 *            prefix and <0xXX> byte fallback (also llama2.c's tokenizer.bin);
 *   "gpt2":  byte-level BPE with ranked merges after the GPT-2 pre-tokenizer
 *            split.
 * Decoding is incremental (struct tokenizer_stream) and never emits half a
 * UTF-8 character. Functions that can fail return 0 or -1 with a one-line
 * message in err. */
#ifndef LOCKSTEP_TOKENIZER_H
#define LOCKSTEP_TOKENIZER_H

#include <stddef.h>

#include "model/model.h"

enum tokenizer_kind {
    TOKENIZER_SPM = 0, /* "llama" */
    TOKENIZER_BPE = 1, /* "gpt2" */
};

struct tokenizer;

/* Reads the vocabulary from a GGUF file's tokenizer.ggml.* keys. */
int tokenizer_load_gguf(struct tokenizer **out, const struct gguf_file *file, char *err,
                        size_t errlen);
/* Reads a llama2.c tokenizer.bin for a model of vocab_size tokens. */
int tokenizer_load_llama2c(struct tokenizer **out, const char *path, int vocab_size, char *err,
                           size_t errlen);
void tokenizer_free(struct tokenizer *tok);

enum tokenizer_kind tokenizer_kind(const struct tokenizer *tok);
int tokenizer_vocab_size(const struct tokenizer *tok);
int tokenizer_bos(const struct tokenizer *tok); /* -1 if none */
int tokenizer_eos(const struct tokenizer *tok); /* -1 if none */
/* 1 if the vocabulary asks for a BOS token at the start of a prompt. */
int tokenizer_adds_bos(const struct tokenizer *tok);

/* Encodes len bytes of text (no special-token parsing). add_bos puts the BOS
 * token first. Writes at most max_ids ids to ids and the total count to
 * *n_ids; returns -1 (with err) if max_ids is too small or out of memory. */
int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len, int add_bos,
                     int *ids, int max_ids, int *n_ids, char *err, size_t errlen);
/* Ids that len bytes of any text (even invalid UTF-8, where a space next to
 * a broken character falls back to single bytes) can encode to, BOS
 * included: room enough for tokenizer_encode and tokenizer_encode_special. */
int tokenizer_max_ids(size_t len);

/* The raw bytes a token stands for ("▁" turned into a space, <0xXX> into
 * the byte, gpt2's byte-unicode mapping undone); control tokens give "".
 * *len receives the byte count. NULL for an id out of range. */
const char *tokenizer_token_bytes(const struct tokenizer *tok, int id, size_t *len);
/* The vocabulary's own piece text for a token (as --pieces shows it). */
const char *tokenizer_piece(const struct tokenizer *tok, int id, size_t *len);

/* Bytes of the longest decoded token (for sizing tokenizer_stream buffers). */
size_t tokenizer_max_token_bytes(const struct tokenizer *tok);
/* The id of the token whose text is exactly piece (len bytes, in the
 * vocabulary's own spelling: "▁" for SPM spaces, GPT-2's mapped bytes),
 * e.g. to place a chat template's control tokens; -1 if there is none. */
int tokenizer_find(const struct tokenizer *tok, const char *piece, size_t len);

/* A vocabulary entry as GGUF stores it: the lookup text (SPM spaces as
 * "\xe2\x96\x81"), the merge score and llama.cpp's token type number (1 normal,
 * 2 unknown, 3 control, 6 byte, ...). */
struct tokenizer_entry {
    const char *text; /* NUL-terminated, owned by the tokenizer */
    size_t text_len;
    float score;
    int type;
};

/* Fills entry for token id; -1 if id is out of range. */
int tokenizer_token_entry(const struct tokenizer *tok, int id, struct tokenizer_entry *entry);

/* Incremental decoder for one stream of generated tokens: holds back the
 * bytes of an incomplete UTF-8 character until it completes, and drops the
 * SPM space prefix of the first token when the stream starts a text. */
struct tokenizer_stream {
    const struct tokenizer *tok;
    unsigned char pending[8]; /* bytes of an incomplete UTF-8 sequence */
    int n_pending;
    int at_start; /* 1 until the first text byte is emitted */
};

void tokenizer_stream_init(struct tokenizer_stream *stream, const struct tokenizer *tok,
                           int strip_leading_space);
/* Appends the text of token id; writes the complete UTF-8 bytes now
 * available to out (at most out_size, which must be >= 64 + longest token)
 * and returns their count. */
size_t tokenizer_stream_push(struct tokenizer_stream *stream, int id, char *out, size_t out_size);
/* Flushes held-back bytes at the end of the stream (invalid sequences are
 * replaced by U+FFFD). Returns the byte count written to out. */
size_t tokenizer_stream_flush(struct tokenizer_stream *stream, char *out, size_t out_size);

/* ---- special tokens and chat templates (special.c, chat.c) ---- */

/* Like tokenizer_encode, but the spelling of a special token (type CONTROL,
 * USER_DEFINED or UNKNOWN, e.g. "<s>", "<|im_start|>", "<unk>") anywhere in
 * the text becomes that one token, as llama.cpp's parse_special does:
 * longest spelling first (ties: lower id), leftmost occurrences first. The
 * text between special tokens is encoded with tokenizer_encode's rules and
 * no BOS (for SPM each such piece gets the space prefix, as in llama.cpp).
 * A text without special spellings gives exactly tokenizer_encode's ids.
 * Note that every special spelling in the text counts, including any a
 * client wrote inside a message. */
int tokenizer_encode_special(const struct tokenizer *tok, const char *text, size_t len, int add_bos,
                             int *ids, int max_ids, int *n_ids, char *err, size_t errlen);

/* Chat prompt formats: each gives the exact text its family's reference
 * (Hugging Face) Jinja chat template renders. Below, bos and eos are the
 * bos_text and eos_text given to tokenizer_chat_apply, S, U and A the
 * contents of system, user and assistant messages, ROLE a message's role,
 * C its content, strip() Python's str.strip() (ASCII and Unicode
 * whitespace, as Jinja's trim), and + concatenation: spaces count.
 *   PLAIN    lockstep's fallback when no template is known (no reference):
 *            per message "System: " + S + "\n", "User: " + U + "\n" or
 *            "Assistant: " + A + "\n"; generation prompt "Assistant:".
 *   LLAMA2   meta-llama/Llama-2-*-chat-hf: per user message
 *            bos + "[INST] " + strip(X) + " [/INST]" where X is U, or for
 *            the first user message after a system message
 *            "<<SYS>>\n" + S + "\n<</SYS>>\n\n" + U; per assistant message
 *            " " + strip(A) + " " + eos.
 *   LLAMA3   meta-llama/Meta-Llama-3-*-Instruct: bos, then per message
 *            "<|start_header_id|>" + ROLE + "<|end_header_id|>\n\n" +
 *            strip(C) + "<|eot_id|>"; generation prompt
 *            "<|start_header_id|>assistant<|end_header_id|>\n\n". (Llama 3.1
 *            templates also put a date preamble in the system turn; not here.)
 *   CHATML   ChatML as Qwen2 and many fine-tunes write it: per message
 *            "<|im_start|>" + ROLE + "\n" + C + "<|im_end|>\n"; generation
 *            prompt "<|im_start|>assistant\n". (Qwen's own template also
 *            inserts a default system message when there is none; not here.)
 *   MISTRAL  mistralai/Mistral-7B-Instruct-v0.2: bos, then per user message
 *            " [INST] " + U + " [/INST]", or for the first user message after
 *            a system message " [INST] " + S + "\n\n" + U + " [/INST]"; per
 *            assistant message " " + A + eos.
 *   ZEPHYR   HuggingFaceH4/zephyr-7b-beta: per message
 *            "<|" + ROLE + "|>\n" + C + eos + "\n"; generation prompt
 *            "<|assistant|>\n".
 * BOS is in the text for LLAMA2 (before every [INST]), LLAMA3 and MISTRAL
 * (once, first); not for PLAIN, CHATML and ZEPHYR. LLAMA2 and MISTRAL allow
 * a system message only first, then user and assistant alternating from
 * user (their templates raise an error otherwise), and ignore
 * add_generation_prompt: after a user message the text ends in " [/INST]",
 * which is where the model answers. The other families take roles in any
 * order. */
enum tokenizer_chat_template {
    TOKENIZER_CHAT_PLAIN = 0,
    TOKENIZER_CHAT_LLAMA2 = 1,
    TOKENIZER_CHAT_LLAMA3 = 2,
    TOKENIZER_CHAT_CHATML = 3,
    TOKENIZER_CHAT_MISTRAL = 4,
    TOKENIZER_CHAT_ZEPHYR = 5,
};

/* One call of a function that an assistant message made (OpenAI's
 * tool_calls[i] with its "function"). */
struct tokenizer_tool_call {
    const char *id;        /* the call's id; NULL if it has none */
    const char *name;      /* the function's name (required) */
    const char *arguments; /* JSON text (an object); NULL is taken as "{}" */
};

/* One chat message. tokenizer_chat_apply reads role and content only; the
 * fields after them are for tokenizer_chat_apply_tools (zero them, e.g.
 * with designated initializers, when there are no tool calls). */
struct tokenizer_chat_message {
    const char *role;                             /* "system", "user", "assistant" or "tool" */
    const char *content;                          /* NUL-terminated UTF-8; NULL is taken as "" */
    const struct tokenizer_tool_call *tool_calls; /* assistant: its calls (n_tool_calls) */
    int n_tool_calls;                             /* 0 for a message without calls */
    const char *tool_call_id; /* tool: the id of the call it answers; NULL if unknown */
    const char *name;         /* tool: the function's name; NULL if unknown (no format uses it) */
};

/* The family of a GGUF's tokenizer.chat_template text (NULL allowed),
 * recognised by its distinctive markers as llama.cpp's
 * llm_chat_detect_template does: "<|im_start|>" is CHATML, "[INST]" with
 * "<<SYS>>" LLAMA2 and without it MISTRAL, "<|start_header_id|>" with
 * "<|end_header_id|>" LLAMA3, "<|user|>" with "<|assistant|>" ZEPHYR;
 * PLAIN for NULL and anything else (including Phi-3's "<|end|>", Phi-4's
 * "<|im_sep|>" and ChatGLM's "[gMASK]", which only look similar). */
enum tokenizer_chat_template tokenizer_chat_template_detect(const char *jinja);
/* The family called name ("llama2", "llama3", "chatml", "mistral",
 * "zephyr", "plain"), for --chat-template NAME. -1 with a message listing
 * the valid names if there is none. */
int tokenizer_chat_template_from_name(const char *name, enum tokenizer_chat_template *out,
                                      char *err, size_t errlen);
/* The name of a family (as tokenizer_chat_template_from_name takes it), or
 * NULL for a value outside the enum. */
const char *tokenizer_chat_template_name(enum tokenizer_chat_template family);
/* 1 if the family's text starts with bos_text (LLAMA2, LLAMA3, MISTRAL).
 * The text is meant for tokenizer_encode_special with add_bos = 0; a caller
 * that wants llama.cpp's behaviour (a BOS token first whenever the
 * vocabulary asks for one) passes add_bos = tokenizer_adds_bos(tok) &&
 * !tokenizer_chat_template_writes_bos(family). */
int tokenizer_chat_template_writes_bos(enum tokenizer_chat_template family);
/* Formats n >= 1 messages as the family's prompt text, followed by the
 * generation prompt (the opening of an assistant turn) when
 * add_generation_prompt is set. bos_text and eos_text are the vocabulary's
 * BOS and EOS spellings (e.g. "<s>", "</s>"; NULL is taken as ""). *out
 * receives the NUL-terminated text (free() it) and *out_len its length.
 * Returns -1 with err for an unknown role (naming it and its index), a
 * role order the family's template refuses, or out of memory. */
int tokenizer_chat_apply(enum tokenizer_chat_template family,
                         const struct tokenizer_chat_message *messages, int n,
                         int add_generation_prompt, const char *bos_text, const char *eos_text,
                         char **out, size_t *out_len, char *err, size_t errlen);

/* ---- tool calling (chat_tools.c) ----
 *
 * A function the model may call, as OpenAI's tools[i].function gives it. */
struct tokenizer_chat_tool {
    const char *name;        /* the function's name (required) */
    const char *description; /* what it does; NULL if none (the key is left out) */
    const char *parameters;  /* its arguments' JSON Schema as JSON text; NULL if none
                              * (the key is left out; a grammar takes that as {}) */
};

/* Like tokenizer_chat_apply, with tools and tool calls: the n_tools tools
 * (NULL when 0) are described to the model, assistant messages may carry
 * tool_calls and messages of role "tool" carry results, each in the
 * family's own format. With no tools, no "tool" message and no calls it
 * returns exactly tokenizer_chat_apply's text. JSON that the formats
 * write is re-spaced the way Python's json.dumps writes it (", " and
 * ": ", non-ASCII kept, numbers as written); arguments that are not valid
 * JSON are written as a JSON string. A tool is written as {"type":
 * "function", "function": {"name": ..., "description": ..., "parameters":
 * ...}}; below, CALL(k) is a call as {"name": ..., "k": ARGUMENTS} and the
 * other notations are those of enum tokenizer_chat_template:
 *   LLAMA3   meta-llama/Llama-3.1-8B-Instruct's template (JSON tool
 *            calling, tools in the first user message, its default date):
 *            with tools, the system turn is "Environment: ipython\n"
 *            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul "
 *            "2024\n\n" + strip(S) (also when there is no system message),
 *            and the first user message (which must follow) gets Meta's
 *            instructions and each tool as json.dumps(indent=4) + "\n\n"
 *            before strip(U). An assistant message with calls is
 *            CALL(parameters) alone (its content is dropped, as Meta's
 *            template does); several calls are joined by "; " (Meta's
 *            template allows one; "; " is what vLLM's llama3_json parser
 *            splits on). A tool message is an "ipython" turn holding its
 *            content as a JSON string.
 *   CHATML   Qwen/Qwen2.5-7B-Instruct's template (Hermes style): the
 *            system message + "\n\n" (nothing when there is none: no
 *            default Qwen text) + "# Tools" and the tools one a line
 *            within <tools></tools>, then the call instructions; calls as
 *            "<tool_call>\n" + CALL(arguments) + "\n</tool_call>" joined by
 *            "\n", after the content and "\n" if there is content; a run
 *            of tool messages is one user turn of "<tool_response>\n" + C +
 *            "\n</tool_response>" joined by "\n".
 *   MISTRAL  the tool blocks of mistralai/Mistral-7B-Instruct-v0.3 (v3
 *            tokenizer: [AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS]) in
 *            the family's v0.2 [INST] layout: "[AVAILABLE_TOOLS] [" + the
 *            tools joined by ", " + "][/AVAILABLE_TOOLS]" just before the
 *            last user message's " [INST] "; calls as "[TOOL_CALLS] [" +
 *            CALL(arguments) (with ", \"id\": ID" when the call has one)
 *            joined by ", " + "]" + eos (the content is dropped); a result
 *            as "[TOOL_RESULTS] {\"content\": " + C + ", \"call_id\": " + ID
 *            + "}[/TOOL_RESULTS]" where C is the content's JSON when it is
 *            JSON and a JSON string otherwise (mistral_common's rule).
 *            Roles alternate as v0.3 checks them: tool messages and
 *            assistant messages with calls are skipped. The system message
 *            stays in the first user message (v0.3 moves it to the last).
 *   PLAIN, LLAMA2, ZEPHYR  lockstep's own convention (README "Tool calling
 *            formats"): the system message + "\n\n" + a "# Tools" section
 *            (a system message of its own when there is none); calls as
 *            "<tool_call>" + CALL(arguments) + "</tool_call>" joined by
 *            "\n", after the content and "\n"; a run of tool messages is
 *            one user message of "<tool_response>" + C + "</tool_response>"
 *            joined by "\n" (so Llama 2's turns still alternate).
 * Turns 1..k render as a prefix of turns 1..k+1 (request k's prompt is the
 * start of request k+1's) in every family except MISTRAL with tools once a
 * new user message comes (the tools move before it, as in v0.3).
 * Returns -1 with err as tokenizer_chat_apply does, and for calls on a
 * message that is not an assistant's, a call or tool without a name, tool
 * parameters that are not JSON, LLAMA3 tools without a user message after
 * the system message. */
int tokenizer_chat_apply_tools(enum tokenizer_chat_template family,
                               const struct tokenizer_chat_message *messages, int n,
                               const struct tokenizer_chat_tool *tools, int n_tools,
                               int add_generation_prompt, const char *bos_text,
                               const char *eos_text, char **out, size_t *out_len, char *err,
                               size_t errlen);

/* How a family's model writes tool calls in its answer, for the gateway to
 * constrain generation (a grammar) and for tokenizer_chat_parse_tool_calls.
 * The calls' text is
 *   list_open call_open OBJECT call_close
 *             (call_separator call_open OBJECT call_close)* list_close
 * with OBJECT = {"name": "<function>", "<arguments_key>": <arguments>}
 * (spaced as written here), and the trigger is where it starts: a prefix
 * of list_open + call_open + OBJECT. The trigger may be a control token
 * of the vocabulary (Mistral v3's [TOOL_CALLS]), which
 * tokenizer_token_bytes decodes to "": find its id with tokenizer_find. */
struct tokenizer_tool_format {
    const char *trigger;        /* "<tool_call>", "[TOOL_CALLS]" or "{\"name\"" (LLAMA3) */
    int trigger_at_start;       /* 1: only at the answer's start, after whitespace (LLAMA3) */
    const char *list_open;      /* before the first call ("[TOOL_CALLS] [" for MISTRAL) or "" */
    const char *call_open;      /* before each OBJECT ("<tool_call>\n" for CHATML) or "" */
    const char *call_close;     /* after each OBJECT ("\n</tool_call>" for CHATML) or "" */
    const char *call_separator; /* between two calls ("\n", ", " or "; ") */
    const char *list_close;     /* after the last call ("]" for MISTRAL) or "" */
    const char *arguments_key;  /* "arguments", or "parameters" for LLAMA3 */
};

/* The family's tool-call format (static), or NULL for a value outside the
 * enum. LLAMA3: trigger {"name", at the start, calls separated by "; ".
 * CHATML: <tool_call>\n...\n</tool_call> separated by "\n". MISTRAL:
 * [TOOL_CALLS] [..., ...]. PLAIN, LLAMA2, ZEPHYR: <tool_call>...</tool_call>
 * separated by "\n". */
const struct tokenizer_tool_format *tokenizer_chat_tool_format(enum tokenizer_chat_template family);

/* Where the tool calls start in generated text[0..len). Returns 1 with *at
 * the trigger's offset when it is there (LLAMA3: after whitespace and an
 * optional "<|python_tag|>", at that tag). Returns 0 otherwise, with *at
 * the offset from which the text could still become the trigger as more
 * text comes (len when it cannot): a streaming caller can send
 * text[0..*at) as content and hold back the rest. */
int tokenizer_chat_find_tool_trigger(enum tokenizer_chat_template family, const char *text,
                                     size_t len, size_t *at);

/* One call read from generated text (every string malloc'd, NUL-terminated). */
struct tokenizer_parsed_call {
    char *id;        /* the object's "id" string when it has one (Mistral), else NULL */
    char *name;      /* the function's name */
    char *arguments; /* the arguments object as compact JSON text ({"a":1}) */
};

/* The answer split into content and tool calls. */
struct tokenizer_parsed_calls {
    size_t content_len;  /* the content is text[0..content_len): all of it without calls,
                          * else the text before the trigger minus trailing whitespace */
    size_t calls_offset; /* where the calls' text starts (the trigger); len without calls */
    struct tokenizer_parsed_call *calls; /* n_calls calls; NULL without calls */
    int n_calls;
};

/* Splits the generated text[0..len) (no NUL needed) into content and the
 * family's tool calls. Without the trigger: 0 with no calls. After the
 * trigger the rest must be calls in the format (whitespace may differ, an
 * object may say "parameters" for "arguments" or leave it out for {},
 * other keys are ignored) followed by nothing but whitespace; otherwise -1
 * with err naming the call and what is wrong (out is then empty). Free
 * out with tokenizer_parsed_calls_free. */
int tokenizer_chat_parse_tool_calls(enum tokenizer_chat_template family, const char *text,
                                    size_t len, struct tokenizer_parsed_calls *out, char *err,
                                    size_t errlen);
/* A call as much as it is written so far (tokenizer_chat_scan_tool_calls). */
struct tokenizer_call_progress {
    char name[72];          /* its function's name once its string is closed, else "" */
    size_t name_start;      /* where the name's string starts (inside the quotes) */
    size_t arguments_start; /* the arguments value's first byte (0: not seen yet) */
    size_t arguments_end;   /* the end of what is written of it so far */
    int arguments_done;     /* 1: its value is closed */
    int done;               /* 1: the call's object is closed */
};
/* The calls in text[0..len) from the trigger at offset `at` on, as far as
 * the model wrote them (the text may end anywhere), into calls (max at
 * most); returns how many. Under the calls' grammar their JSON is a
 * prefix of what tokenizer_chat_parse_tool_calls reads, so the bytes of a
 * call's arguments so far, minified (tokenizer_json_minify), are a prefix
 * of the arguments it returns: a stream sends them as they come. */
int tokenizer_chat_scan_tool_calls(enum tokenizer_chat_template family, const char *text,
                                   size_t len, size_t at, struct tokenizer_call_progress *calls,
                                   int max);
/* Copies text[0..len) to out (len bytes at least) without the whitespace
 * between JSON tokens (strings kept as written); returns the length.
 * Minifying a prefix gives a prefix of the whole's. */
size_t tokenizer_json_minify(const char *text, size_t len, char *out);

/* Frees what tokenizer_chat_parse_tool_calls stored and empties calls. */
void tokenizer_parsed_calls_free(struct tokenizer_parsed_calls *calls);

#endif
