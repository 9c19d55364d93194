/* bpe.c -- byte-level BPE ("gpt2" vocabularies), following llama.cpp's
 * llm_tokenizer_bpe.
 *
 * The text is first split into words by the pre-tokenizer regex (PCRE2,
 * compiled once per tokenizer; GPT-2's unless tokenizer.ggml.pre names
 * Llama 3's or Qwen2's). Each byte of a word becomes one symbol, spelled
 * through GPT-2's byte-to-unicode table so that every byte is a printable
 * character. Adjacent symbols merge by merge rank (lowest first, leftmost
 * on ties): the ranks come from tokenizer.ggml.merges, held in a hash map
 * keyed by the merge's own text "left right". No space prefix is added. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

struct tokenizer_pretokenizer {
    pcre2_code *code; /* the compiled split regex */
};

/* Pre-tokenizers known by their tokenizer.ggml.pre name. */
static const struct {
    const char *names[4]; /* names llama.cpp's converter writes; NULL ends */
    const char *regex;
    int ignore_merges; /* Llama 3 takes a word that is a token whole */
} pretokenizers[] = {
    {{"gpt-2", "default", NULL},
     "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
     0},
    {{"llama-bpe", "llama3", "llama-v3"},
     "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
     "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     1},
    {{"qwen2", NULL, NULL},
     "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
     "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     0},
};

/* GPT-2 maps the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF to the
 * code points of the same value and the other 68 bytes, in order, to
 * U+0100..U+0143. */
static int byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

unsigned tokenizer_bpe_byte_codepoint(unsigned char b) {
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 0x100 + b;                       /* 33 control bytes and space */
    if (b >= 0x7F && b <= 0xA0) return 0x121 + (b - 0x7F); /* DEL, C1 controls, NBSP */
    return 0x143;                                          /* 0xAD, the soft hyphen */
}

int tokenizer_bpe_codepoint_byte(unsigned cp) {
    if (cp < 0x100) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp <= 0x120) return (int)(cp - 0x100);
    if (cp <= 0x142) return (int)(0x7F + (cp - 0x121));
    if (cp == 0x143) return 0xAD;
    return -1;
}

int tokenizer_bpe_init(struct tokenizer *tok, const char *pre, size_t pre_len, const char *name,
                       char *err, size_t errlen) {
    size_t n_known = sizeof(pretokenizers) / sizeof(pretokenizers[0]);
    size_t which = n_known;
    for (size_t i = 0; i < n_known && which == n_known; i++) {
        for (int j = 0; pretokenizers[i].names[j]; j++) {
            const char *known = pretokenizers[i].names[j];
            if (!pre || (strlen(known) == pre_len && memcmp(known, pre, pre_len) == 0)) which = i;
        }
    }
    if (which == n_known) {
        snprintf(err, errlen,
                 "%s: tokenizer.ggml.pre '%.*s' is not supported (known: gpt-2, llama-bpe, qwen2)",
                 name, (int)(pre_len > 64 ? 64 : pre_len), pre);
        return -1;
    }
    tok->pretokenizer = calloc(1, sizeof(*tok->pretokenizer));
    if (!tok->pretokenizer) {
        snprintf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    int code;
    PCRE2_SIZE offset;
    tok->pretokenizer->code =
        pcre2_compile((PCRE2_SPTR)pretokenizers[which].regex, PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &offset, NULL);
    if (!tok->pretokenizer->code) {
        PCRE2_UCHAR message[128];
        pcre2_get_error_message(code, message, sizeof(message));
        snprintf(err, errlen, "tokenizer: pre-tokenizer regex: %s at offset %zu",
                 (const char *)message, (size_t)offset);
        return -1;
    }
    /* JIT is only a speed-up: without it pcre2_match interprets. */
    (void)pcre2_jit_compile(tok->pretokenizer->code, PCRE2_JIT_COMPLETE);
    tok->ignore_merges = pretokenizers[which].ignore_merges;
    return 0;
}

void tokenizer_bpe_free(struct tokenizer *tok) {
    if (tok->pretokenizer) pcre2_code_free(tok->pretokenizer->code);
    free(tok->pretokenizer);
    tok->pretokenizer = NULL;
    tokenizer_map_free(&tok->merges);
    free(tok->merge_arena);
    tok->merge_arena = NULL;
}

int tokenizer_bpe_add_merges(struct tokenizer *tok, const char *const *merges,
                             const size_t *lengths, size_t n, const char *name, char *err,
                             size_t errlen) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *space = lengths[i] > 1 ? memchr(merges[i] + 1, ' ', lengths[i] - 1) : NULL;
        if (!space || space == merges[i] + lengths[i] - 1) {
            snprintf(err, errlen, "%s: tokenizer.ggml.merges[%zu] '%.*s' is not 'left right'", name,
                     i, (int)(lengths[i] > 64 ? 64 : lengths[i]), merges[i]);
            return -1;
        }
        total += lengths[i] + 1;
    }
    tok->merge_arena = malloc(total ? total : 1);
    if (!tok->merge_arena || tokenizer_map_init(&tok->merges, n) != 0) {
        snprintf(err, errlen, "%s: out of memory reading %zu merges", name, n);
        return -1;
    }
    char *at = tok->merge_arena;
    for (size_t i = 0; i < n; i++) {
        memcpy(at, merges[i], lengths[i]);
        at[lengths[i]] = '\0';
        /* A repeated merge keeps its first (best) rank, as in llama.cpp. */
        if (tokenizer_map_get(&tok->merges, at, lengths[i]) < 0)
            tokenizer_map_put(&tok->merges, at, lengths[i], (int)i);
        at += lengths[i] + 1;
    }
    return 0;
}

/* Scratch space of one encode call, grown to the longest word. */
struct bpe_scratch {
    char *mapped;                     /* the word in mapped characters (2 per byte) */
    char *key;                        /* "left right" of the pair being scored */
    struct tokenizer_symbol *symbols; /* one per byte of the word */
    struct tokenizer_bigram *heap;    /* 3 per byte of the word */
    size_t capacity;                  /* bytes of word the arrays are sized for */
};

static int scratch_reserve(struct bpe_scratch *s, size_t word_len) {
    if (word_len <= s->capacity) return 0;
    size_t cap = s->capacity < 32 ? 64 : 2 * s->capacity;
    if (cap < word_len) cap = word_len;
    char *mapped = realloc(s->mapped, 2 * cap);
    if (mapped) s->mapped = mapped;
    char *key = realloc(s->key, 2 * cap + 1);
    if (key) s->key = key;
    struct tokenizer_symbol *symbols = realloc(s->symbols, cap * sizeof(*symbols));
    if (symbols) s->symbols = symbols;
    struct tokenizer_bigram *heap = realloc(s->heap, 3 * cap * sizeof(*heap));
    if (heap) s->heap = heap;
    if (!mapped || !key || !symbols || !heap) return -1;
    s->capacity = cap;
    return 0;
}

/* Context of score_pair: the tokenizer and where to build the key. */
struct bpe_pair_context {
    const struct tokenizer *tok;
    char *key;
};

/* A pair's score is minus its merge rank, so the lowest rank wins. */
static int score_pair(const void *ctx, const char *text, size_t start, size_t left_len,
                      size_t right_len, float *score) {
    const struct bpe_pair_context *pc = ctx;
    memcpy(pc->key, text + start, left_len);
    pc->key[left_len] = ' ';
    memcpy(pc->key + left_len + 1, text + start + left_len, right_len);
    int rank = tokenizer_map_get(&pc->tok->merges, pc->key, left_len + 1 + right_len);
    if (rank < 0) return 0;
    *score = -(float)rank;
    return 1;
}

/* Emits a merged symbol: its token, or (when the merges built something
 * that is not in the vocabulary) one token per byte it stands for; a byte
 * with no token and no unknown token is dropped, as llama.cpp does. */
static void emit_symbol(const struct tokenizer *tok, const char *text, size_t len,
                        struct tokenizer_output *out) {
    int id = tokenizer_map_get(&tok->lookup, text, len);
    if (id >= 0) {
        tokenizer_output_push(out, id);
        return;
    }
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        /* Mapped characters are below U+0800: one or two UTF-8 bytes. */
        unsigned cp = s[i++];
        if (cp >= 0xC0 && i < len) cp = ((cp & 0x1F) << 6) | (s[i++] & 0x3F);
        int byte = tokenizer_bpe_codepoint_byte(cp);
        int byte_id = byte >= 0 ? tok->byte_token[byte] : -1;
        if (byte_id < 0) byte_id = tok->unk;
        if (byte_id >= 0) tokenizer_output_push(out, byte_id);
    }
}

/* Encodes one pre-tokenized word. */
static int encode_word(const struct tokenizer *tok, const char *word, size_t len,
                       struct bpe_scratch *s, struct tokenizer_output *out) {
    if (scratch_reserve(s, len) != 0) return -1;
    size_t n_mapped = 0;
    for (size_t i = 0; i < len; i++) {
        size_t n = tokenizer_utf8_encode(tokenizer_bpe_byte_codepoint((unsigned char)word[i]),
                                         s->mapped + n_mapped);
        s->symbols[i] = (struct tokenizer_symbol){(int)i - 1, -1, n_mapped, n};
        if (i > 0) s->symbols[i - 1].next = (int)i;
        n_mapped += n;
    }
    if (tok->ignore_merges) {
        int id = tokenizer_map_get(&tok->lookup, s->mapped, n_mapped);
        if (id >= 0) {
            tokenizer_output_push(out, id);
            return 0;
        }
    }
    struct bpe_pair_context ctx = {tok, s->key};
    tokenizer_merge(s->mapped, s->symbols, (int)len, s->heap, score_pair, &ctx);
    for (int i = 0; i >= 0; i = s->symbols[i].next)
        emit_symbol(tok, s->mapped + s->symbols[i].start, s->symbols[i].len, out);
    return 0;
}

/* Splits text with the pre-tokenizer and encodes every word. Bytes no
 * alternative matches (only invalid UTF-8 can do that) form words too. */
static int split_and_encode(const struct tokenizer *tok, const char *text, size_t len,
                            pcre2_match_data *match, struct bpe_scratch *s,
                            struct tokenizer_output *out, char *err, size_t errlen) {
    size_t pos = 0;
    while (pos < len) {
        int rc = pcre2_match(tok->pretokenizer->code, (PCRE2_SPTR)text, len, pos, 0, match, NULL);
        size_t start = len, end = len;
        if (rc >= 0) {
            const PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(match);
            start = ovector[0];
            end = ovector[1] > start ? ovector[1] : start + 1; /* never stall on "" */
            if (end > len) end = len;
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR message[128];
            pcre2_get_error_message(rc, message, sizeof(message));
            snprintf(err, errlen, "tokenizer: pre-tokenizer failed at byte %zu: %s", pos,
                     (const char *)message);
            return -1;
        }
        if ((start > pos && encode_word(tok, text + pos, start - pos, s, out) != 0) ||
            (end > start && encode_word(tok, text + start, end - start, s, out) != 0)) {
            snprintf(err, errlen, "tokenizer: out of memory encoding %zu bytes", len);
            return -1;
        }
        pos = end;
    }
    return 0;
}

int tokenizer_encode_bpe(const struct tokenizer *tok, const char *text, size_t len,
                         struct tokenizer_output *out, char *err, size_t errlen) {
    if (len == 0) return 0;
    if (len > ((size_t)1 << 28)) {
        snprintf(err, errlen, "tokenizer: text of %zu bytes is too long to encode", len);
        return -1;
    }
    pcre2_match_data *match = pcre2_match_data_create_from_pattern(tok->pretokenizer->code, NULL);
    if (!match) {
        snprintf(err, errlen, "tokenizer: out of memory encoding %zu bytes", len);
        return -1;
    }
    struct bpe_scratch scratch = {0};
    int rc = split_and_encode(tok, text, len, match, &scratch, out, err, errlen);
    free(scratch.mapped);
    free(scratch.key);
    free(scratch.symbols);
    free(scratch.heap);
    pcre2_match_data_free(match);
    return rc;
}
