/* random.c -- seeded random models (lockstep convert --random).
 *
 * Tests and benchmarks need models of any shape without downloading one.
 * model_write_random writes a GGUF file that llama.cpp loads as well: the
 * architecture's keys, tensors with llama.cpp's names and shapes (laid out
 * by model_writer.c, as model_write_gguf lays them out) filled from a
 * splitmix64 stream, and a byte-level BPE vocabulary (tokenizer.ggml.model
 * "gpt2"): the 256 byte tokens, merges learned from a small embedded English
 * text, then merges that extend word tokens letter by letter until the
 * vocabulary is full, and "<|endoftext|>" as the last id. Same parameters,
 * same bytes. */
#include "model/model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text the first merges are learned from (lowercase, so every learned
 * piece is a word piece). */
static const char random_vocab_text[] =
    "the sun rose over the hills and the river ran down to the sea. in the morning the "
    "people of the town went out to work in the fields, and in the evening they came home "
    "to eat and to rest. there was a man who lived by the water, and he said that he would "
    "build a boat for his children. it is not the first time that we have seen this, and "
    "it will not be the last. she wanted to know what they were thinking when they made "
    "the plan, but no one would tell her. we can only hope that the weather will be good "
    "for the next few days, because there is still much to do before the winter comes. "
    "this is the story of how the world came to be as it is, told by those who were there "
    "from the beginning.";

#define RANDOM_EOT        "<|endoftext|>"
#define RANDOM_MIN_VOCAB  260 /* 256 bytes, a few merges, the end-of-text token */
#define RANDOM_MAX_WORDS  512 /* words of random_vocab_text, with margin */
#define RANDOM_PAIR_SLOTS 4096

/* ---------------------------------------------------------------- PRNG */

/* splitmix64: a full-period 64-bit generator that any seed starts well. */
static uint64_t random_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1), from the top 24 bits (exact in a float). */
static float random_uniform(uint64_t *state) {
    return (float)(random_next(state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* ---------------------------------------------------------- vocabulary */

/* A vocabulary under construction. */
struct random_vocab {
    char **tokens; /* (capacity) token texts in id order, NUL-terminated */
    int n_tokens;
    int capacity;  /* vocab_size */
    char **merges; /* (merge_capacity) "left right" */
    int n_merges;
    int merge_capacity;
    int *index;        /* (index_size) token id + 1 by hash of its text; 0 = empty */
    size_t index_size; /* a power of two, at least twice capacity */
};

static uint64_t random_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
    return h;
}

/* Id of the token with this text, or -1. */
static int vocab_find(const struct random_vocab *v, const char *text) {
    for (size_t i = random_hash(text) & (v->index_size - 1);; i = (i + 1) & (v->index_size - 1)) {
        if (v->index[i] == 0) return -1;
        if (strcmp(v->tokens[v->index[i] - 1], text) == 0) return v->index[i] - 1;
    }
}

/* Appends a token (taking ownership of text); its id, or -1 if full. */
static int vocab_add_token(struct random_vocab *v, char *text) {
    if (v->n_tokens >= v->capacity) {
        free(text);
        return -1;
    }
    int id = v->n_tokens++;
    v->tokens[id] = text;
    size_t i = random_hash(text) & (v->index_size - 1);
    while (v->index[i] != 0) i = (i + 1) & (v->index_size - 1);
    v->index[i] = id + 1;
    return id;
}

/* Records the merge (left, right) and returns the id of its result, which
 * is added as a new token unless that text is a token already; -1 if out of
 * memory. */
static int vocab_add_merge(struct random_vocab *v, int left, int right) {
    const char *a = v->tokens[left], *b = v->tokens[right];
    size_t la = strlen(a), lb = strlen(b);
    if (v->n_merges == v->merge_capacity) {
        int capacity = v->merge_capacity ? 2 * v->merge_capacity : 256;
        char **grown = realloc(v->merges, (size_t)capacity * sizeof(*grown));
        if (!grown) return -1;
        v->merges = grown;
        v->merge_capacity = capacity;
    }
    char *merge = malloc(la + lb + 2), *joined = malloc(la + lb + 1);
    if (!merge || !joined) {
        free(merge);
        free(joined);
        return -1;
    }
    snprintf(merge, la + lb + 2, "%s %s", a, b);
    snprintf(joined, la + lb + 1, "%s%s", a, b);
    v->merges[v->n_merges++] = merge;
    int id = vocab_find(v, joined);
    if (id >= 0) {
        free(joined);
        return id;
    }
    return vocab_add_token(v, joined);
}

/* 1 if byte b stands for itself in GPT-2's byte-to-unicode map. */
static int random_byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

/* The 256 byte tokens, id = byte: printable bytes stand for their own code
 * point, the others for U+0100 onward in byte order (space is U+0120). */
static int vocab_add_bytes(struct random_vocab *v) {
    int shifted = 0;
    for (int b = 0; b < 256; b++) {
        int cp = random_byte_is_printable(b) ? b : 256 + shifted++;
        char *text = malloc(3);
        if (!text) return -1;
        if (cp < 0x80) {
            text[0] = (char)cp;
            text[1] = 0;
        } else {
            text[0] = (char)(0xc0 | (cp >> 6));
            text[1] = (char)(0x80 | (cp & 0x3f));
            text[2] = 0;
        }
        if (vocab_add_token(v, text) < 0) return -1;
    }
    return 0;
}

/* The words of random_vocab_text as GPT-2 splits them: an optional leading
 * space then a run of letters, or one other character. Each word is a run
 * of token ids in symbols; word w spans [starts[w], starts[w + 1]). */
struct random_words {
    int symbols[sizeof(random_vocab_text)];
    int starts[RANDOM_MAX_WORDS + 1];
    int n_words;
};

static void random_split_words(struct random_words *w) {
    const char *s = random_vocab_text;
    int n = 0;
    w->n_words = 0;
    for (size_t i = 0; s[i] && w->n_words < RANDOM_MAX_WORDS;) {
        w->starts[w->n_words++] = n;
        if (s[i] == ' ') w->symbols[n++] = (uint8_t)s[i++];
        if (s[i] >= 'a' && s[i] <= 'z') {
            while (s[i] >= 'a' && s[i] <= 'z') w->symbols[n++] = (uint8_t)s[i++];
        } else if (s[i]) {
            w->symbols[n++] = (uint8_t)s[i++];
        }
    }
    w->starts[w->n_words] = n;
}

/* One distinct adjacent pair and how often it occurs. */
struct random_pair {
    uint64_t key; /* left << 32 | right, + 1 so that 0 marks an empty slot */
    int count;
};

/* The most frequent adjacent pair (ties: the smallest key); its count. */
static int random_best_pair(const struct random_words *w, struct random_pair *slots,
                            uint64_t *best) {
    int best_count = 0;
    memset(slots, 0, RANDOM_PAIR_SLOTS * sizeof(*slots));
    for (int word = 0; word < w->n_words; word++) {
        for (int i = w->starts[word]; i + 1 < w->starts[word + 1]; i++) {
            uint64_t key = ((uint64_t)w->symbols[i] << 32 | (uint64_t)w->symbols[i + 1]) + 1;
            size_t s = (size_t)(key * 0x9e3779b97f4a7c15ULL >> 52) & (RANDOM_PAIR_SLOTS - 1);
            while (slots[s].key != 0 && slots[s].key != key) s = (s + 1) & (RANDOM_PAIR_SLOTS - 1);
            slots[s].key = key;
            int count = ++slots[s].count;
            if (count > best_count || (count == best_count && key < *best)) {
                best_count = count;
                *best = key;
            }
        }
    }
    return best_count;
}

/* Replaces every (left, right) pair inside a word by merged. */
static void random_apply_merge(struct random_words *w, int left, int right, int merged) {
    int out = 0;
    for (int word = 0; word < w->n_words; word++) {
        int start = w->starts[word], end = w->starts[word + 1];
        w->starts[word] = out;
        for (int i = start; i < end; i++) {
            if (i + 1 < end && w->symbols[i] == left && w->symbols[i + 1] == right) {
                w->symbols[out++] = merged;
                i++;
            } else {
                w->symbols[out++] = w->symbols[i];
            }
        }
    }
    w->starts[w->n_words] = out;
}

/* Byte-pair encoding training on random_vocab_text: merges the most
 * frequent pair while there is one and there is room (the last id is kept
 * for end-of-text), until every word of the text is a single token. */
static int vocab_learn_merges(struct random_vocab *v) {
    struct random_words *w = malloc(sizeof(*w));
    struct random_pair *slots = malloc(RANDOM_PAIR_SLOTS * sizeof(*slots));
    int rc = (w && slots) ? 0 : -1;
    if (rc == 0) random_split_words(w);
    while (rc == 0 && v->n_tokens < v->capacity - 1) {
        uint64_t best = 0;
        if (random_best_pair(w, slots, &best) < 1) break;
        int left = (int)((best - 1) >> 32), right = (int)((best - 1) & 0xffffffffu);
        int merged = vocab_add_merge(v, left, right);
        if (merged < 0)
            rc = -1;
        else
            random_apply_merge(w, left, right, merged);
    }
    free(w);
    free(slots);
    return rc;
}

/* 1 if text is lowercase letters, optionally after "Ġ" (a leading space). */
static int random_is_word(const char *text) {
    if ((uint8_t)text[0] == 0xc4 && (uint8_t)text[1] == 0xa0) text += 2;
    for (; *text; text++)
        if (*text < 'a' || *text > 'z') return 0;
    return 1;
}

/* Fills the vocabulary up to one short of capacity with merges of a word
 * token and a letter, in token order and letter-frequency order. */
static int vocab_fill_words(struct random_vocab *v) {
    static const char letters[] = "etaoinshrdlucmfwypvbgkjqxz";
    char joined[256];
    for (int t = 0; t < v->n_tokens && v->n_tokens < v->capacity - 1; t++) {
        if (!random_is_word(v->tokens[t]) || strlen(v->tokens[t]) + 2 > sizeof(joined)) continue;
        for (const char *c = letters; *c && v->n_tokens < v->capacity - 1; c++) {
            snprintf(joined, sizeof(joined), "%s%c", v->tokens[t], *c);
            if (vocab_find(v, joined) >= 0) continue;
            if (vocab_add_merge(v, t, (uint8_t)*c) < 0) return -1;
        }
    }
    return v->n_tokens == v->capacity - 1 ? 0 : -1;
}

static void vocab_free(struct random_vocab *v) {
    for (int i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->merges);
    free(v->index);
}

/* Builds the whole vocabulary of exactly vocab_size tokens. */
static int vocab_build(struct random_vocab *v, int vocab_size) {
    memset(v, 0, sizeof(*v));
    v->capacity = vocab_size;
    v->index_size = 1;
    while (v->index_size < 2 * (size_t)vocab_size) v->index_size *= 2;
    v->tokens = calloc((size_t)vocab_size, sizeof(*v->tokens));
    v->index = calloc(v->index_size, sizeof(*v->index));
    if (!v->tokens || !v->index || vocab_add_bytes(v) || vocab_learn_merges(v) ||
        vocab_fill_words(v))
        return -1;
    char *eot = strdup(RANDOM_EOT);
    return eot && vocab_add_token(v, eot) >= 0 ? 0 : -1;
}

/* -------------------------------------------------------------- tensors */

/* The values of one tensor, drawn from the splitmix64 stream (context) in
 * the order model_writer_add_tensors asks for tensors. Matrices are uniform
 * in +-sqrt(3 / cols), so that a unit-variance input gives unit-variance
 * outputs; the embedding has unit-variance elements, and the classifier
 * gives logits of standard deviation about 2, so greedy choices are clear
 * without being one-hot. Norms are 1 +- 0.1, biases 0 +- 0.1. */
static int random_fill(void *context, const struct model_tensor_spec *spec, float *values,
                       char *err, size_t errlen) {
    uint64_t *state = context;
    size_t n = (size_t)spec->rows * (size_t)spec->cols;
    (void)err;
    (void)errlen;
    if (spec->kind != MODEL_TENSOR_MATRIX) {
        float center = spec->kind == MODEL_TENSOR_NORM ? 1.0f : 0.0f, spread = 0.1f;
        for (size_t i = 0; i < n; i++) values[i] = center + spread * random_uniform(state);
        return 0;
    }
    float scale = sqrtf(3.0f / (float)spec->cols);
    if (spec->layer < 0 && strcmp(spec->suffix, "token_embd.weight") == 0)
        scale = sqrtf(3.0f);
    else if (spec->layer < 0)
        scale = 2.0f * scale;
    for (size_t i = 0; i < n; i++) values[i] = scale * random_uniform(state);
    return 0;
}

/* ------------------------------------------------------------- metadata */

/* The config params describe; qwen models ship with eps 1e-6 and a
 * long-context rope base. */
static struct model_config random_config(const struct model_random_params *p) {
    int qwen = p->arch != MODEL_ARCH_LLAMA;
    struct model_config c = {
        .arch = p->arch,
        .dim = p->dim,
        .hidden_dim = p->hidden_dim,
        .n_layers = p->n_layers,
        .n_heads = p->n_heads,
        .n_kv_heads = p->n_kv_heads,
        .head_dim = p->dim / p->n_heads,
        .vocab_size = p->vocab_size,
        .context_length = p->context_length,
        .rope_dim = p->dim / p->n_heads,
        .rope_base = qwen ? 1000000.0f : 10000.0f,
        .rope_style = qwen ? TENSOR_ROPE_NEOX : TENSOR_ROPE_NORM,
        .norm_eps = qwen ? 1e-6f : 1e-5f,
    };
    return c;
}

/* The tokenizer.ggml.* keys of a byte-level BPE vocabulary; the last token
 * is the control token that serves as bos and eos. */
static int random_set_vocab(struct gguf_writer *w, const struct random_vocab *v) {
    int n = v->n_tokens > v->n_merges ? v->n_tokens : v->n_merges;
    uint64_t *lengths = malloc((size_t)n * sizeof(*lengths));
    int32_t *types = malloc((size_t)v->n_tokens * sizeof(*types));
    if (!lengths || !types) {
        free(lengths);
        free(types);
        return -1;
    }
    gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_string(w, "tokenizer.ggml.pre", "gpt-2");
    for (int i = 0; i < v->n_tokens; i++) lengths[i] = strlen(v->tokens[i]);
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens,
                                 lengths, (uint64_t)v->n_tokens);
    for (int i = 0; i < v->n_tokens; i++)
        types[i] = i == v->n_tokens - 1 ? 3 : 1; /* control, normal */
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types,
                          (uint64_t)v->n_tokens);
    for (int i = 0; i < v->n_merges; i++) lengths[i] = strlen(v->merges[i]);
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", (const char *const *)v->merges,
                                 lengths, (uint64_t)v->n_merges);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)(v->n_tokens - 1));
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(v->n_tokens - 1));
    free(lengths);
    free(types);
    return 0;
}

/* -------------------------------------------------------------- writing */

static int random_check_params(const struct model_random_params *p, const char *path, char *err,
                               size_t errlen) {
    const struct {
        const char *name;
        int value, min, max;
    } fields[] = {
        {"dim", p->dim, 1, MODEL_MAX_WIDTH},
        {"hidden_dim", p->hidden_dim, 1, MODEL_MAX_WIDTH},
        {"n_layers", p->n_layers, 1, MODEL_MAX_LAYERS},
        {"n_heads", p->n_heads, 1, MODEL_MAX_WIDTH},
        {"n_kv_heads", p->n_kv_heads, 1, MODEL_MAX_WIDTH},
        {"vocab_size", p->vocab_size, RANDOM_MIN_VOCAB, MODEL_MAX_VOCAB},
        {"context_length", p->context_length, 1, MODEL_MAX_CONTEXT},
    };
    if ((int)p->arch < MODEL_ARCH_LLAMA || (int)p->arch > MODEL_ARCH_QWEN3)
        return model_fail(err, errlen, path, "random model: unknown architecture %d", (int)p->arch);
    if (!tensor_type_is_valid((int)p->type))
        return model_fail(err, errlen, path, "random model: unsupported weight type %d",
                          (int)p->type);
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (fields[i].value < fields[i].min || fields[i].value > fields[i].max)
            return model_fail(err, errlen, path, "random model: %s is %d, expected %d..%d",
                              fields[i].name, fields[i].value, fields[i].min, fields[i].max);
    if (p->dim % p->n_heads != 0)
        return model_fail(err, errlen, path, "random model: n_heads %d does not divide dim %d",
                          p->n_heads, p->dim);
    if (p->n_heads % p->n_kv_heads != 0)
        return model_fail(err, errlen, path,
                          "random model: n_kv_heads %d does not divide n_heads %d", p->n_kv_heads,
                          p->n_heads);
    if ((p->dim / p->n_heads) % 2 != 0)
        return model_fail(err, errlen, path, "random model: head size dim / n_heads = %d is odd",
                          p->dim / p->n_heads);
    return 0;
}

int model_write_random(const struct model_random_params *params, const char *path, char *err,
                       size_t errlen) {
    if (random_check_params(params, path, err, errlen)) return -1;
    struct random_vocab vocab = {0};
    struct model_writer writer = {0};
    struct model_config config = random_config(params);
    struct model_file_layout layout = {&config, NULL, 1, params->arch == MODEL_ARCH_QWEN2,
                                       params->arch == MODEL_ARCH_QWEN3};
    char name[64];
    uint64_t state = params->seed;
    int rc = -1;
    if (vocab_build(&vocab, params->vocab_size) != 0 ||
        model_writer_init(&writer, params->type, params->mix) != 0) {
        model_fail(err, errlen, path, "random model: out of memory building a %d-token vocabulary",
                   params->vocab_size);
    } else {
        snprintf(name, sizeof(name), "lockstep random %s", model_arch_name(params->arch));
        model_writer_set_config(&writer, &config, name);
        if (random_set_vocab(writer.gguf, &vocab) != 0)
            model_fail(err, errlen, path, "random model: out of memory writing the vocabulary");
        else {
            model_writer_add_tensors(&writer, &layout, random_fill, &state);
            rc = model_writer_write(&writer, path, err, errlen);
        }
    }
    vocab_free(&vocab);
    model_writer_free(&writer);
    return rc;
}
