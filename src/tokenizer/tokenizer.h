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

/* One chat message. */
struct tokenizer_chat_message {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* NUL-terminated UTF-8; NULL is taken as "" */
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

#endif
