/* fuzz_tokenizer.c -- libFuzzer harness for the tokenizers (src/tokenizer).
 *
 * The vocabularies are loaded once, before the first input: the llama-spm,
 * phi-3 and gpt-2 GGUF fixtures under ../shared/fixtures/tokenizer, or, when
 * those are absent, a small SPM and a small GPT-2 vocabulary written with the
 * GGUF writer. Each input is then, for every vocabulary:
 *   - encoded with tokenizer_encode and tokenizer_encode_special, without and
 *     with BOS, into room for len + 2 ids as lockstep's callers do (a valid
 *     UTF-8 text must fit tokenizer_encode's ids there); every id must be in
 *     range, BOS must only be put first, the "too small" refusal must report
 *     the count and write exactly the ids that fit, and a text with no
 *     special spelling must give the same ids from both;
 *   - decoded through two streams, one with the documented minimum buffer and
 *     one with room to spare: both must write the same valid UTF-8;
 *   - checked for a round trip: byte fallback (SPM) and byte-level BPE lose
 *     nothing, so a valid UTF-8 input decodes back exactly, except that SPM
 *     decodes its visible space U+2581 as a space; GPT-2's token bytes give
 *     back every input byte, valid UTF-8 or not;
 *   - read as 16-bit token ids (in range or just outside) for a stream to
 *     decode: valid UTF-8 token bytes must come out unchanged, and every
 *     token's text must be found by tokenizer_find.
 * The input is also split at newlines into chat messages for every chat
 * template family; a refusal must be one line (but for a quoted role that
 * holds a newline: messages quote the bad value), and an accepted
 * prompt must be valid UTF-8 when its parts are and encode like any text.
 * Last, it is read as a template text to detect and a template name.
 * Built by tests/fuzz/CMakeLists.txt when LOCKSTEP_FUZZ=ON. */
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef LOCKSTEP_SHARED_DIR
#define LOCKSTEP_SHARED_DIR "../shared"
#endif

#define FUZZ_MAX_VOCABS   3
#define FUZZ_MAX_MESSAGES 8
#define FUZZ_MAX_RAW_IDS  512
#define FUZZ_CANARY       (-7777) /* written where the encoder must not write */

static const char spm_space[] = "\xe2\x96\x81"; /* U+2581, SPM's visible space */

/* A special token: the spelling tokenizer_encode_special matches. */
struct fuzz_special {
    const char *text; /* NUL-terminated, owned by the tokenizer */
    size_t len;
};

/* One loaded vocabulary and what the checks need to know about it. */
struct fuzz_vocab {
    char name[64];                 /* for failure messages */
    struct tokenizer *tok;         /* loaded once, never freed */
    int n_vocab;                   /* ids are 0..n_vocab-1 */
    int spm;                       /* 1 for TOKENIZER_SPM */
    int space_prefix;              /* 1 if the encoder puts a space before the text */
    struct fuzz_special *specials; /* (n_specials) CONTROL, USER_DEFINED, UNKNOWN */
    int n_specials;
    char bos_text[64], eos_text[64]; /* spellings of BOS and EOS for chat templates */
    size_t small_size;               /* the documented minimum stream buffer */
    size_t large_size;               /* a stream buffer no token can fill */
};

static struct fuzz_vocab vocabs[FUZZ_MAX_VOCABS];
static int n_vocabs;

/* A growable byte string. */
struct fuzz_bytes {
    char *data; /* (cap) */
    size_t len; /* bytes used */
    size_t cap; /* bytes allocated */
};

/* Reports a broken property and stops: libFuzzer saves the input. */
static void fail(const struct fuzz_vocab *v, const char *what) {
    fprintf(stderr, "fuzz_tokenizer: %s: %s\n", v ? v->name : "chat", what);
    abort();
}

/* Zeroed, so nothing the harness reads is ever undefined. */
static void *checked_malloc(size_t size) {
    void *p = calloc(size ? size : 1, 1);
    if (!p) fail(NULL, "out of memory in the harness");
    return p;
}

/* An empty byte string (allocated, so its data is never NULL). */
static struct fuzz_bytes bytes_new(void) {
    struct fuzz_bytes b = {checked_malloc(256), 0, 256};
    return b;
}

static void bytes_append(struct fuzz_bytes *b, const void *data, size_t len) {
    if (b->cap - b->len < len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < len) cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown) fail(NULL, "out of memory in the harness");
        b->data = grown;
        b->cap = cap;
    }
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
}

static int bytes_equal(const struct fuzz_bytes *b, const char *data, size_t len) {
    return b->len == len && (len == 0 || memcmp(b->data, data, len) == 0);
}

/* 1 if s[0..n) is well-formed UTF-8: every character decoded and checked
 * for its shortest form, the surrogate gap and the U+10FFFF limit (written
 * here on its own rather than borrowed from the code under test). NUL is a
 * character like any other. */
static int is_valid_utf8(const unsigned char *s, size_t n) {
    static const unsigned shortest[4] = {0, 0x80, 0x800, 0x10000};
    for (size_t i = 0; i < n;) {
        unsigned c = s[i], code;
        size_t more;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0) {
            more = 1;
            code = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            more = 2;
            code = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            more = 3;
            code = c & 0x07;
        } else {
            return 0;
        }
        if (n - i <= more) return 0;
        for (size_t k = 1; k <= more; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            code = (code << 6) | (s[i + k] & 0x3Fu);
        }
        if (code < shortest[more] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
            return 0;
        i += more + 1;
    }
    return 1;
}

/* ---- vocabularies ---- */

static int is_special_type(int type) {
    return type == 2 || type == 3 || type == 4; /* UNKNOWN, CONTROL, USER_DEFINED */
}

static int is_special_id(const struct fuzz_vocab *v, int id) {
    struct tokenizer_entry entry;
    return tokenizer_token_entry(v->tok, id, &entry) == 0 && is_special_type(entry.type);
}

/* A special token's spelling into buf (empty when id is -1). */
static void copy_piece(const struct fuzz_vocab *v, int id, char *buf, size_t size) {
    size_t len = 0;
    const char *piece = id >= 0 ? tokenizer_piece(v->tok, id, &len) : NULL;
    if (!piece || len >= size) len = 0;
    if (len) memcpy(buf, piece, len);
    buf[len] = '\0';
}

/* Fills in everything about v->tok the checks use. */
static void describe_vocab(struct fuzz_vocab *v) {
    char err[256];
    int ids[8], n = 0;
    v->n_vocab = tokenizer_vocab_size(v->tok);
    v->spm = tokenizer_kind(v->tok) == TOKENIZER_SPM;
    /* Whether the SPM space prefix is on shows in how "a" encodes. */
    if (tokenizer_encode(v->tok, "a", 1, 0, ids, 8, &n, err, sizeof(err)) != 0 || n < 1)
        fail(v, "cannot encode \"a\"");
    size_t len;
    const char *bytes = tokenizer_token_bytes(v->tok, ids[0], &len);
    v->space_prefix = v->spm && len > 0 && bytes[0] == ' ';
    v->specials = checked_malloc((size_t)v->n_vocab * sizeof(*v->specials));
    for (int id = 0; id < v->n_vocab; id++) {
        const char *piece = tokenizer_piece(v->tok, id, &len);
        if (is_special_id(v, id) && len > 0)
            v->specials[v->n_specials++] = (struct fuzz_special){piece, len};
    }
    copy_piece(v, tokenizer_bos(v->tok), v->bos_text, sizeof(v->bos_text));
    copy_piece(v, tokenizer_eos(v->tok), v->eos_text, sizeof(v->eos_text));
    v->small_size = 64 + tokenizer_max_token_bytes(v->tok);
    /* Each byte gives at most 3 bytes of output (U+FFFD), plus the held back
     * ones a token can complete or replace. */
    v->large_size = 3 * tokenizer_max_token_bytes(v->tok) + 64;
}

/* Loads the GGUF vocabulary at path into the next slot; a vocabulary that
 * does not load stops the harness, which has nothing to fuzz without it. */
static void load_vocab(const char *path, const char *name) {
    char err[512];
    struct gguf_file *file = NULL;
    struct fuzz_vocab *v = &vocabs[n_vocabs];
    int rc = gguf_open(&file, path, err, sizeof(err));
    if (rc == 0) {
        rc = tokenizer_load_gguf(&v->tok, file, err, sizeof(err));
        gguf_close(file);
    }
    if (rc != 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    snprintf(v->name, sizeof(v->name), "%s", name);
    describe_vocab(v);
    n_vocabs++;
}

/* GPT-2's byte-to-unicode table: the code point standing for byte b. */
static unsigned gpt2_codepoint(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    unsigned k = 0; /* b is the k-th unprintable byte */
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF)))
            k++;
    return 0x100 + k;
}

/* A vocabulary under construction for the fallback GGUF files. */
struct fuzz_vocab_builder {
    char texts[320][16]; /* NUL-terminated token texts */
    const char *pointers[320];
    uint64_t lengths[320];
    float scores[320];
    int32_t types[320];
    int n;
};

static int builder_add(struct fuzz_vocab_builder *b, const char *text, float score, int type) {
    snprintf(b->texts[b->n], sizeof(b->texts[b->n]), "%s", text);
    b->pointers[b->n] = b->texts[b->n];
    b->lengths[b->n] = strlen(text);
    b->scores[b->n] = score;
    b->types[b->n] = type;
    return b->n++;
}

/* A small "llama" vocabulary: unk, bos, eos, the 256 byte tokens, a few
 * merges and special tokens. */
static void build_spm(struct gguf_writer *w, struct fuzz_vocab_builder *b) {
    /* (\u escapes: a \x escape would swallow the hex letters after it.) */
    static const char *const pieces[] = {"\u2581", "t",        "h",       "e",      "a",
                                         "i",      "n",        "\u2581t", "he",     "\u2581the",
                                         "in",     "\u2581in", "\u2581a", "\u00e9", "\u4e2d"};
    builder_add(b, "<unk>", 0, 2);
    builder_add(b, "<s>", 0, 3);
    builder_add(b, "</s>", 0, 3);
    for (int byte = 0; byte < 256; byte++) {
        char text[8];
        snprintf(text, sizeof(text), "<0x%02X>", (unsigned)byte);
        builder_add(b, text, 0, 6);
    }
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
        builder_add(b, pieces[i], -(float)i, 1);
    builder_add(b, "<|im_start|>", 0, 3);
    builder_add(b, "<|im_end|>", 0, 3);
    builder_add(b, "[user]", 0, 4);
    gguf_writer_set_string(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_array(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, b->scores, (uint64_t)b->n);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
}

/* A small "gpt2" vocabulary: the 256 byte symbols, a few merges and
 * <|endoftext|> as BOS and EOS. */
static void build_gpt2(struct gguf_writer *w, struct fuzz_vocab_builder *b) {
    static const char *const merges[] = {"\u0120 t", "h e", "\u0120t he", "i n", "\u0120 a", "e r"};
    static const char *const merged[] = {"\u0120t", "he", "\u0120the", "in", "\u0120a", "er"};
    for (unsigned byte = 0; byte < 256; byte++) {
        unsigned cp = gpt2_codepoint(byte);
        char text[4] = {(char)cp, 0, 0, 0};
        if (cp >= 0x80) {
            text[0] = (char)(0xC0 | (cp >> 6));
            text[1] = (char)(0x80 | (cp & 0x3F));
        }
        builder_add(b, text, 0, 1);
    }
    for (size_t i = 0; i < sizeof(merged) / sizeof(merged[0]); i++) builder_add(b, merged[i], 0, 1);
    int end = builder_add(b, "<|endoftext|>", 0, 3);
    uint64_t merge_lengths[sizeof(merges) / sizeof(merges[0])];
    for (size_t i = 0; i < sizeof(merges) / sizeof(merges[0]); i++)
        merge_lengths[i] = strlen(merges[i]);
    gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_string(w, "tokenizer.ggml.pre", "gpt-2");
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", merges, merge_lengths,
                                 sizeof(merges) / sizeof(merges[0]));
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)end);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)end);
}

/* Writes one fallback vocabulary to a scratch file and loads it. */
static void load_fallback(int spm) {
    static struct fuzz_vocab_builder builder;
    char path[512], err[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof(path), "%s/fuzz_tokenizer_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) fail(NULL, "cannot create a scratch file for the fallback vocabulary");
    close(fd);
    struct gguf_writer *w = gguf_writer_create();
    if (!w) fail(NULL, "out of memory in the harness");
    memset(&builder, 0, sizeof(builder));
    gguf_writer_set_string(w, "general.architecture", spm ? "llama" : "gpt2");
    if (spm)
        build_spm(w, &builder);
    else
        build_gpt2(w, &builder);
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", builder.pointers, builder.lengths,
                                 (uint64_t)builder.n);
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, builder.types,
                          (uint64_t)builder.n);
    int rc = gguf_writer_write(w, path, err, sizeof(err));
    gguf_writer_free(w);
    if (rc != 0) {
        unlink(path);
        fprintf(stderr, "fuzz_tokenizer: fallback vocabulary: %s\n", err);
        abort();
    }
    load_vocab(path, spm ? "fallback spm" : "fallback gpt2");
    unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    static const char *const fixtures[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf",
                                           "ggml-vocab-gpt-2.gguf"};
    (void)argc;
    (void)argv;
    for (int i = 0; i < FUZZ_MAX_VOCABS; i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/fixtures/tokenizer/%s", LOCKSTEP_SHARED_DIR, fixtures[i]);
        if (access(path, R_OK) == 0) load_vocab(path, fixtures[i]);
    }
    if (n_vocabs == 0) {
        fprintf(stderr, "fuzz_tokenizer: no fixtures under %s; using small built vocabularies\n",
                LOCKSTEP_SHARED_DIR);
        load_fallback(1);
        load_fallback(0);
    }
    return 0;
}

/* ---- encoding ---- */

typedef int (*fuzz_encoder)(const struct tokenizer *tok, const char *text, size_t len, int add_bos,
                            int *ids, int max_ids, int *n_ids, char *err, size_t errlen);

/* 1 if err is the refusal for a text of n ids and room for fewer. */
static int is_too_small(const char *err, int n) {
    char want[96];
    snprintf(want, sizeof(want), "tokenizer: the text needs %d tokens", n);
    return strncmp(err, want, strlen(want)) == 0 && strchr(err, '\n') == NULL;
}

/* Asks for the ids of a text into room for one fewer than it needs: the
 * call must refuse, report the full count and write exactly the ids that
 * fit. */
static void check_too_small(const struct fuzz_vocab *v, fuzz_encoder encode, const char *text,
                            size_t len, int add_bos, const int *ids, int n) {
    char err[256] = "";
    int *room = checked_malloc((size_t)n * sizeof(*room));
    int n_ids = -1;
    for (int i = 0; i < n; i++) room[i] = FUZZ_CANARY;
    if (encode(v->tok, text, len, add_bos, room, n - 1, &n_ids, err, sizeof(err)) != -1)
        fail(v, "an encoder accepted room for one id fewer than it needs");
    if (n_ids != n || !is_too_small(err, n)) fail(v, "the \"too small\" refusal is wrong");
    if (room[n - 1] != FUZZ_CANARY) fail(v, "an encoder wrote past max_ids");
    if (n > 1 && memcmp(room, ids, (size_t)(n - 1) * sizeof(*ids)) != 0)
        fail(v, "an encoder refusing for room wrote other ids than it would have");
    free(room);
}

/* Encodes text into room for len + 2 ids, what lockstep's callers give,
 * and checks the result; returns the ids (free() them) and their count in
 * *n_out. A valid UTF-8 text must fit tokenizer_encode's ids in that room.
 * With may_need_more the encoder may instead refuse with the count it
 * needs, which is then given: encode_special's SPM pieces each get a space
 * prefix, and in invalid UTF-8 a lead byte can split the "\u2581" of a
 * space, leaving up to 3 byte tokens per input byte. */
static int *encode_checked(const struct fuzz_vocab *v, fuzz_encoder encode, int may_need_more,
                           const char *text, size_t len, int add_bos, int *n_out) {
    char err[256] = "";
    int room = (int)len + 2, n = -1;
    int *ids = checked_malloc(((size_t)room + 1) * sizeof(*ids));
    ids[room] = FUZZ_CANARY;
    if (encode(v->tok, text, len, add_bos, ids, room, &n, err, sizeof(err)) != 0) {
        if (!may_need_more || n <= room || !is_too_small(err, n)) {
            fprintf(stderr, "fuzz_tokenizer: %s: refused: %s\n", v->name, err);
            fail(v, "an encoder refused a text with room for len + 2 ids");
        }
        free(ids);
        room = n;
        ids = checked_malloc(((size_t)room + 1) * sizeof(*ids));
        ids[room] = FUZZ_CANARY;
        if (encode(v->tok, text, len, add_bos, ids, room, &n, err, sizeof(err)) != 0 || n != room)
            fail(v, "an encoder refused the room it asked for");
    }
    if (ids[room] != FUZZ_CANARY || n < 0 || n > room) fail(v, "an encoder wrote past max_ids");
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= v->n_vocab) fail(v, "an encoder produced an id out of range");
    if (n > 0 && !add_bos) check_too_small(v, encode, text, len, add_bos, ids, n);
    *n_out = n;
    return ids;
}

/* With BOS the ids are BOS and then the ids without it. */
static void check_bos(const struct fuzz_vocab *v, const int *plain, int n_plain, const int *bos,
                      int n_bos) {
    if (n_bos != n_plain + 1 || bos[0] != tokenizer_bos(v->tok) ||
        (n_plain > 0 && memcmp(bos + 1, plain, (size_t)n_plain * sizeof(*plain)) != 0))
        fail(v, "add_bos did more than put BOS first");
}

static int same_ids(const int *a, int n_a, const int *b, int n_b) {
    return n_a == n_b && (n_a == 0 || memcmp(a, b, (size_t)n_a * sizeof(*a)) == 0);
}

static int has_special_spelling(const struct fuzz_vocab *v, const char *text, size_t len) {
    for (int i = 0; i < v->n_specials; i++)
        if (v->specials[i].len <= len && memmem(text, len, v->specials[i].text, v->specials[i].len))
            return 1;
    return 0;
}

/* ---- decoding ---- */

/* Decodes ids[0..n) with two streams, one with the documented minimum
 * buffer and one that no token can fill: they must agree chunk by chunk,
 * and every chunk must be valid UTF-8. The text is appended to out. */
static void decode_ids(const struct fuzz_vocab *v, const int *ids, int n, int strip,
                       struct fuzz_bytes *out) {
    struct tokenizer_stream small, large;
    char *small_buf = checked_malloc(v->small_size);
    char *large_buf = checked_malloc(v->large_size);
    tokenizer_stream_init(&small, v->tok, strip);
    tokenizer_stream_init(&large, v->tok, strip);
    for (int i = 0; i <= n; i++) {
        size_t a, b;
        if (i < n) {
            a = tokenizer_stream_push(&small, ids[i], small_buf, v->small_size);
            b = tokenizer_stream_push(&large, ids[i], large_buf, v->large_size);
        } else {
            a = tokenizer_stream_flush(&small, small_buf, v->small_size);
            b = tokenizer_stream_flush(&large, large_buf, v->large_size);
        }
        if (a != b || (a > 0 && memcmp(small_buf, large_buf, a) != 0))
            fail(v, "a stream with the documented minimum buffer lost output");
        if (!is_valid_utf8((const unsigned char *)large_buf, b))
            fail(v, "a stream wrote invalid UTF-8");
        bytes_append(out, large_buf, b);
    }
    free(small_buf);
    free(large_buf);
}

/* The bytes of ids[0..n) as tokenizer_token_bytes gives them, special
 * tokens spelled out when spell_specials is set. Leading spaces of the SPM
 * pieces encode_special encodes on their own (at the start and after each
 * special token) are dropped when drop_prefix is set; a piece that does
 * not start with one fails. */
static void concat_bytes(const struct fuzz_vocab *v, const int *ids, int n, int spell_specials,
                         int drop_prefix, struct fuzz_bytes *out) {
    int at_piece_start = 1;
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *bytes;
        if (spell_specials && is_special_id(v, ids[i])) {
            bytes = tokenizer_piece(v->tok, ids[i], &len);
            at_piece_start = 1;
        } else {
            bytes = tokenizer_token_bytes(v->tok, ids[i], &len);
            if (!bytes) fail(v, "tokenizer_token_bytes refused an id in range");
            if (drop_prefix && at_piece_start) {
                if (len == 0 || bytes[0] != ' ') fail(v, "an SPM piece lacks its space prefix");
                bytes++;
                len--;
            }
            at_piece_start = 0;
        }
        bytes_append(out, bytes, len);
    }
}

/* What SPM decodes a valid UTF-8 text back to: U+2581 becomes a space. */
static void spm_expected(const char *text, size_t len, struct fuzz_bytes *out) {
    for (size_t i = 0; i < len;) {
        if (len - i >= 3 && memcmp(text + i, spm_space, 3) == 0) {
            bytes_append(out, " ", 1);
            i += 3;
        } else {
            bytes_append(out, text + i, 1);
            i++;
        }
    }
}

/* ---- the checks per vocabulary ---- */

/* The round trips of the ids of text (plain: tokenizer_encode; special:
 * tokenizer_encode_special). */
static void check_round_trip(const struct fuzz_vocab *v, const char *text, size_t len, int valid,
                             const int *plain, int n_plain, const int *special, int n_special) {
    struct fuzz_bytes want = bytes_new(), got = bytes_new();
    if (v->spm)
        spm_expected(text, len, &want);
    else
        bytes_append(&want, text, len);
    if (valid) {
        decode_ids(v, plain, n_plain, v->space_prefix, &got);
        if (!bytes_equal(&got, want.data, want.len)) fail(v, "valid UTF-8 did not round-trip");
    }
    if (valid || !v->spm) {
        got.len = 0;
        concat_bytes(v, special, n_special, 1, v->space_prefix, &got);
        if (!bytes_equal(&got, want.data, want.len))
            fail(v, "encode_special's ids do not spell the text");
    }
    if (!v->spm) {
        got.len = 0;
        concat_bytes(v, plain, n_plain, 0, 0, &got);
        if (!bytes_equal(&got, text, len)) fail(v, "byte-level BPE lost input bytes");
    }
    free(want.data);
    free(got.data);
}

static void check_text(const struct fuzz_vocab *v, const char *text, size_t len, int valid) {
    int n_plain, n_plain_bos, n_special, n_special_bos;
    int *plain = encode_checked(v, tokenizer_encode, !valid, text, len, 0, &n_plain);
    int *special = encode_checked(v, tokenizer_encode_special, 1, text, len, 0, &n_special);
    if (tokenizer_bos(v->tok) >= 0) {
        int *plain_bos = encode_checked(v, tokenizer_encode, !valid, text, len, 1, &n_plain_bos);
        int *special_bos =
            encode_checked(v, tokenizer_encode_special, 1, text, len, 1, &n_special_bos);
        check_bos(v, plain, n_plain, plain_bos, n_plain_bos);
        check_bos(v, special, n_special, special_bos, n_special_bos);
        /* BOS decodes to nothing and leaves the space prefix to strip. */
        struct fuzz_bytes a = bytes_new(), b = bytes_new();
        decode_ids(v, plain, n_plain, 1, &a);
        decode_ids(v, plain_bos, n_plain_bos, 1, &b);
        if (!bytes_equal(&a, b.data, b.len)) fail(v, "a leading BOS changed the decoded text");
        free(a.data);
        free(b.data);
        free(plain_bos);
        free(special_bos);
    }
    if (!has_special_spelling(v, text, len) && !same_ids(plain, n_plain, special, n_special))
        fail(v, "encode_special differs from encode on a text with no special spelling");
    struct fuzz_bytes decoded = bytes_new();
    decode_ids(v, special, n_special, v->space_prefix, &decoded);
    free(decoded.data);
    check_round_trip(v, text, len, valid, plain, n_plain, special, n_special);
    free(plain);
    free(special);
}

/* 1 if tokenizer_find gives a token spelled text[0..len) (with repeated
 * spellings, not necessarily the id the text was taken from). */
static int finds_spelling(const struct fuzz_vocab *v, const char *text, size_t len) {
    struct tokenizer_entry found;
    int id = tokenizer_find(v->tok, text, len);
    return id >= 0 && tokenizer_token_entry(v->tok, id, &found) == 0 && found.text_len == len &&
           (len == 0 || memcmp(found.text, text, len) == 0);
}

/* Decodes ids cut from the input (2 bytes each, mapped onto -1..n_vocab so
 * that both ends are just out of range): chunks valid, both streams equal,
 * and when the tokens' bytes are valid UTF-8 the stream writes them all
 * (less a leading space for SPM). */
static void check_raw_ids(const struct fuzz_vocab *v, const uint8_t *data, size_t size) {
    int ids[FUZZ_MAX_RAW_IDS], n = 0;
    for (size_t i = 0; i + 1 < size && n < FUZZ_MAX_RAW_IDS; i += 2) {
        unsigned value = (unsigned)data[i] | (unsigned)data[i + 1] << 8;
        ids[n++] = (int)(value % (unsigned)(v->n_vocab + 2)) - 1;
    }
    struct fuzz_bytes raw = bytes_new(), decoded = bytes_new();
    for (int i = 0; i < n; i++) {
        size_t len, piece_len;
        const char *bytes = tokenizer_token_bytes(v->tok, ids[i], &len);
        const char *piece = tokenizer_piece(v->tok, ids[i], &piece_len);
        int in_range = ids[i] >= 0 && ids[i] < v->n_vocab;
        if ((bytes != NULL) != in_range || (piece != NULL) != in_range || (!in_range && len))
            fail(v, "token accessors disagree on which ids exist");
        struct tokenizer_entry entry;
        if (in_range && (tokenizer_token_entry(v->tok, ids[i], &entry) != 0 ||
                         !finds_spelling(v, entry.text, entry.text_len)))
            fail(v, "tokenizer_find does not find a token's own text");
        if (bytes) bytes_append(&raw, bytes, len);
    }
    if (tokenizer_find(v->tok, (const char *)data, size) >= 0 &&
        !finds_spelling(v, (const char *)data, size))
        fail(v, "tokenizer_find found a token with another text");
    decode_ids(v, ids, n, 1, &decoded);
    if (is_valid_utf8((const unsigned char *)raw.data, raw.len)) {
        size_t skip = v->spm && raw.len > 0 && raw.data[0] == ' ';
        if (!bytes_equal(&decoded, raw.data + skip, raw.len - skip))
            fail(v, "a stream changed tokens whose bytes are valid UTF-8");
    }
    free(raw.data);
    free(decoded.data);
}

/* ---- chat templates ---- */

/* Messages cut from the input at newlines (the last takes the rest). Each
 * one's first byte picks its role: system, user, assistant, or the rest of
 * the line itself as the role (usually one the templates refuse). */
struct fuzz_chat {
    char *copy; /* the input, NUL-terminated, newlines between messages cut */
    struct tokenizer_chat_message messages[FUZZ_MAX_MESSAGES];
    int n;
    int valid; /* 1 if every role and content is valid UTF-8 */
};

static void split_messages(const uint8_t *data, size_t size, struct fuzz_chat *chat) {
    static const char *const roles[3] = {"system", "user", "assistant"};
    chat->copy = checked_malloc(size + 1);
    memcpy(chat->copy, data, size);
    chat->copy[size] = '\0';
    chat->n = 0;
    chat->valid = 1;
    char *line = chat->copy;
    while (chat->n < FUZZ_MAX_MESSAGES) {
        char *end = chat->n + 1 < FUZZ_MAX_MESSAGES ? strchr(line, '\n') : NULL;
        if (end) *end = '\0';
        const char *content = *line ? line + 1 : line;
        unsigned pick = (unsigned char)line[0] % 4;
        chat->messages[chat->n].role = pick < 3 ? roles[pick] : content;
        chat->messages[chat->n].content = content;
        chat->valid &= is_valid_utf8((const unsigned char *)content, strlen(content));
        chat->n++;
        if (!end) break;
        line = end + 1;
    }
}

/* 1 if err quotes the start of value ('%.64s'), as messages name bad values. */
static int quotes(const char *err, const char *value) {
    char quoted[80];
    snprintf(quoted, sizeof(quoted), "'%.64s'", value);
    return strstr(err, quoted) != NULL;
}

/* A refusal is one line, unless it quotes a role that holds a newline. */
static void check_chat_refusal(const char *err, const struct fuzz_chat *chat) {
    int quoted_newline = 0;
    for (int i = 0; chat && i < chat->n; i++) {
        const char *role = chat->messages[i].role;
        quoted_newline |= role && strchr(role, '\n') && quotes(err, role);
    }
    if (strncmp(err, "chat template", 13) != 0 || (strchr(err, '\n') && !quoted_newline))
        fail(NULL, "a chat template refusal is not a one-line \"chat template\" message");
}

/* Every family formats the messages (or refuses them); the family and
 * vocabulary picked by the first byte also encode and decode the prompt. */
static void check_chat(const uint8_t *data, size_t size) {
    struct fuzz_chat chat;
    split_messages(data, size, &chat);
    unsigned pick = size ? data[0] : 0;
    const struct fuzz_vocab *v = &vocabs[pick % (unsigned)n_vocabs];
    for (int family = -1; family <= TOKENIZER_CHAT_ZEPHYR + 1; family++) {
        char err[256] = "", *text = NULL;
        size_t len = 1;
        int rc = tokenizer_chat_apply((enum tokenizer_chat_template)family, chat.messages, chat.n,
                                      (int)(pick >> 7), v->bos_text, v->eos_text, &text, &len, err,
                                      sizeof(err));
        if (rc != 0) {
            if (text != NULL || len != 0) fail(NULL, "a refused chat left a text");
            check_chat_refusal(err, &chat);
            continue;
        }
        if (!text || strlen(text) != len) fail(NULL, "a chat text's length is wrong");
        if (family < 0 || family > TOKENIZER_CHAT_ZEPHYR) fail(NULL, "an unknown family worked");
        if (chat.valid && !is_valid_utf8((const unsigned char *)text, len))
            fail(NULL, "a chat template made invalid UTF-8 out of valid messages");
        if (family == (int)((pick >> 2) % 6)) {
            int add_bos = tokenizer_adds_bos(v->tok) &&
                          !tokenizer_chat_template_writes_bos((enum tokenizer_chat_template)family);
            int n;
            int *ids = encode_checked(v, tokenizer_encode_special, 1, text, len, add_bos, &n);
            struct fuzz_bytes decoded = bytes_new();
            decode_ids(v, ids, n, v->space_prefix, &decoded);
            free(decoded.data);
            free(ids);
        }
        free(text);
    }
    char err[256] = "", *text = NULL;
    size_t len = 1;
    if (tokenizer_chat_apply(TOKENIZER_CHAT_CHATML, chat.messages, 0, 1, NULL, NULL, &text, &len,
                             err, sizeof(err)) != -1 ||
        text != NULL || len != 0)
        fail(NULL, "a chat of no messages was accepted");
    check_chat_refusal(err, NULL);
    chat.messages[0].role = NULL;
    if (tokenizer_chat_apply(TOKENIZER_CHAT_CHATML, chat.messages, 1, 1, NULL, NULL, &text, &len,
                             err, sizeof(err)) != -1 ||
        text != NULL)
        fail(NULL, "a message without a role was accepted");
    check_chat_refusal(err, NULL);
    free(chat.copy);
}

/* The input as a GGUF chat template text and as a --chat-template name:
 * detection gives a family, a name is refused with a message quoting it or
 * gives the family of that name, and every family's name leads back to it. */
static void check_template_names(const uint8_t *data, size_t size) {
    char *text = checked_malloc(size + 1), err[256] = "";
    memcpy(text, data, size);
    enum tokenizer_chat_template family = tokenizer_chat_template_detect(text);
    if (!tokenizer_chat_template_name(family)) fail(NULL, "detection gave no family");
    if (tokenizer_chat_template_from_name(text, &family, err, sizeof(err)) == 0) {
        if (strcmp(tokenizer_chat_template_name(family), text) != 0)
            fail(NULL, "a template name found another family");
    } else if (strncmp(err, "unknown chat template", 21) != 0 || !quotes(err, text)) {
        fail(NULL, "a template name refusal does not name the name");
    }
    for (int i = TOKENIZER_CHAT_PLAIN; i <= TOKENIZER_CHAT_ZEPHYR; i++) {
        const char *name = tokenizer_chat_template_name((enum tokenizer_chat_template)i);
        if (!name || tokenizer_chat_template_from_name(name, &family, err, sizeof(err)) != 0 ||
            (int)family != i)
            fail(NULL, "a family's name does not lead back to it");
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    int valid = is_valid_utf8(data, size);
    for (int i = 0; i < n_vocabs; i++) {
        check_text(&vocabs[i], text, size, valid);
        check_raw_ids(&vocabs[i], data, size);
    }
    check_chat(data, size);
    check_template_names(data, size);
    return 0;
}
