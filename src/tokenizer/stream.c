/* stream.c -- incremental detokenizing of generated tokens.
 *
 * A token may end in the middle of a UTF-8 character (byte-fallback tokens
 * <0xF0><0x9F>... or GPT-2 byte tokens), and a client must never see half a
 * character. The stream keeps the bytes of an unfinished character in
 * pending[] until the character completes, and writes U+FFFD for bytes that
 * cannot start or continue a well-formed character (so out is always valid
 * UTF-8). For SPM it can also drop the space that the encoder's space prefix
 * put before the first word. */
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */

/* Output cursor over the caller's buffer; bytes past its end are dropped. */
struct stream_out {
    char *data;
    size_t size;
    size_t n;
};

static void out_put(struct stream_out *out, const void *bytes, size_t len) {
    if (out->size - out->n < len) return;
    memcpy(out->data + out->n, bytes, len);
    out->n += len;
}

void tokenizer_stream_init(struct tokenizer_stream *stream, const struct tokenizer *tok,
                           int strip_leading_space) {
    memset(stream, 0, sizeof(*stream));
    stream->tok = tok;
    /* Only SPM adds a space prefix; a GPT-2 leading space is real text. */
    stream->at_start = strip_leading_space && tok->kind == TOKENIZER_SPM;
}

/* Bytes of the well-formed character that lead byte c starts: 1 for ASCII,
 * 2-4 for a valid lead, 0 for a byte that cannot start one. */
static int sequence_length(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* 1 if c may follow the pending bytes (Unicode Table 3-7: the second byte
 * after E0, ED, F0 and F4 has a narrower range). */
static int continues(const struct tokenizer_stream *stream, unsigned char c) {
    if (stream->n_pending == 1) {
        switch (stream->pending[0]) {
        case 0xE0:
            return c >= 0xA0 && c <= 0xBF;
        case 0xED:
            return c >= 0x80 && c <= 0x9F;
        case 0xF0:
            return c >= 0x90 && c <= 0xBF;
        case 0xF4:
            return c >= 0x80 && c <= 0x8F;
        default:
            break;
        }
    }
    return c >= 0x80 && c <= 0xBF;
}

/* Feeds one byte through the UTF-8 state machine. */
static void feed_byte(struct tokenizer_stream *stream, unsigned char c, struct stream_out *out) {
    if (stream->at_start) {
        stream->at_start = 0;
        if (c == ' ') return;
    }
    if (stream->n_pending > 0) {
        if (continues(stream, c)) {
            stream->pending[stream->n_pending++] = c;
            if (stream->n_pending == sequence_length(stream->pending[0])) {
                out_put(out, stream->pending, (size_t)stream->n_pending);
                stream->n_pending = 0;
            }
            return;
        }
        /* The character broke off: replace what came of it, then look at
         * c afresh. */
        out_put(out, replacement, 3);
        stream->n_pending = 0;
    }
    int len = sequence_length(c);
    if (len == 1) {
        out_put(out, &c, 1);
    } else if (len == 0) {
        out_put(out, replacement, 3);
    } else {
        stream->pending[0] = c;
        stream->n_pending = 1;
    }
}

size_t tokenizer_stream_push(struct tokenizer_stream *stream, int id, char *out, size_t out_size) {
    struct stream_out cursor = {out, out_size, 0};
    size_t len;
    const char *bytes = tokenizer_token_bytes(stream->tok, id, &len);
    for (size_t i = 0; bytes && i < len; i++) feed_byte(stream, (unsigned char)bytes[i], &cursor);
    return cursor.n;
}

size_t tokenizer_stream_flush(struct tokenizer_stream *stream, char *out, size_t out_size) {
    struct stream_out cursor = {out, out_size, 0};
    if (stream->n_pending > 0) out_put(&cursor, replacement, 3);
    stream->n_pending = 0;
    return cursor.n;
}
