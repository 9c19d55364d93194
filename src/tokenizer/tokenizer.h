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

#endif
