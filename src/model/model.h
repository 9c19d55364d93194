/* model.h -- model files: the GGUF reader and writer, llama2.c checkpoints,
 * and struct model, the weights of one llama-family model as the forward pass
 * sees them.
 *
 * Files are memory-mapped; weights point into the mapping and are never
 * copied. Every length, count, offset, type and shape read from a file is
 * checked against the file size before use: a bad file yields an error that
 * names the file, the field and the bad value, never a crash. Functions that
 * can fail return 0 on success and -1 on failure with a one-line message in
 * err (errlen bytes). */
#ifndef LOCKSTEP_MODEL_H
#define LOCKSTEP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

/* ======================= GGUF (v2 and v3) ======================= */

/* The 13 metadata value types, numbered as in the GGUF specification. */
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
};

/* A string inside the file: not NUL-terminated. */
struct gguf_string {
    const char *data; /* points into the mapping */
    uint64_t len;     /* bytes */
};

/* A metadata value. Scalars are decoded; arrays keep a pointer to their
 * first element in the mapping (elements of a string array or nested array
 * are variable-sized: use gguf_array_string / gguf_array_nested). */
struct gguf_value {
    enum gguf_type type;
    union {
        uint64_t u64; /* UINT8..UINT64 and BOOL, zero-extended */
        int64_t i64;  /* INT8..INT64, sign-extended */
        double f64;   /* FLOAT32 and FLOAT64 */
        struct gguf_string str;
        struct {
            enum gguf_type type;     /* element type */
            uint64_t n;              /* element count */
            const uint8_t *data;     /* first element, in the mapping */
            const uint64_t *offsets; /* string/array elements: byte offset of
                                        each element from data; else NULL */
        } arr;
    } v;
};

/* One key/value pair of the metadata. */
struct gguf_kv {
    struct gguf_string key;
    struct gguf_value value;
};

#define GGUF_MAX_DIMS 4

/* One tensor: its info record and where its data lies in the mapping. */
struct gguf_tensor {
    struct gguf_string name;
    enum tensor_type type;
    int n_dims;                   /* 1..4 */
    uint64_t dims[GGUF_MAX_DIMS]; /* dims[0] is the innermost (row length) */
    uint64_t n_elements;          /* product of dims */
    uint64_t offset;              /* from the start of the data section */
    size_t size;                  /* bytes */
    const void *data;             /* in the mapping */
};

/* An open GGUF file. */
struct gguf_file {
    char *path;          /* for error messages */
    const uint8_t *base; /* the mapping (or the caller's buffer) */
    size_t size;         /* bytes of the file */
    int owns_mapping;    /* 1 if gguf_close must munmap base */
    uint32_t version;    /* 2 or 3 */
    uint64_t n_kv;
    struct gguf_kv *kv; /* (n_kv) */
    uint64_t n_tensors;
    struct gguf_tensor *tensors; /* (n_tensors) */
    uint64_t alignment;          /* general.alignment, default 32 */
    uint64_t data_offset;        /* start of the tensor data section */
};

/* Maps and parses path. */
int gguf_open(struct gguf_file **out, const char *path, char *err, size_t errlen);
/* Parses a GGUF image in memory (not copied; must outlive the file). name is
 * used in error messages. For fuzzing and tests. */
int gguf_open_memory(struct gguf_file **out, const void *data, size_t size, const char *name,
                     char *err, size_t errlen);
void gguf_close(struct gguf_file *file);

/* Metadata lookup: NULL if the key is absent. */
const struct gguf_kv *gguf_find(const struct gguf_file *file, const char *key);
/* Typed getters: 0 if found and convertible, -1 otherwise (err names the key
 * and what was wrong). Integer getters accept any integer type whose value
 * fits; gguf_get_f32 accepts FLOAT32/FLOAT64. */
int gguf_get_u32(const struct gguf_file *file, const char *key, uint32_t *out, char *err,
                 size_t errlen);
int gguf_get_f32(const struct gguf_file *file, const char *key, float *out, char *err,
                 size_t errlen);
int gguf_get_string(const struct gguf_file *file, const char *key, struct gguf_string *out,
                    char *err, size_t errlen);
/* Array element access (i < arr.n, checked by the caller). */
struct gguf_string gguf_array_string(const struct gguf_value *array, uint64_t i);
struct gguf_value gguf_array_nested(const struct gguf_value *array, uint64_t i);
/* 1 if s equals the C string c. */
int gguf_string_equals(struct gguf_string s, const char *c);
/* Element i of any array (i < arr.n, checked by the caller): scalars decoded,
 * strings and arrays as gguf_array_string / gguf_array_nested give them.
 * (Array data in the mapping is unaligned: read it through this or memcpy.) */
struct gguf_value gguf_array_element(const struct gguf_value *array, uint64_t i);
/* Name of a value type ("uint32", "string", ...), or NULL for an unknown id. */
const char *gguf_value_type_name(int type);

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *file, const char *name);

/* ---- writer ---- */

/* Builds a GGUF v3 file in memory-light fashion: metadata and tensor infos
 * are collected, then gguf_writer_write streams everything to disk. Tensor
 * data passed in must stay valid until the write. */
struct gguf_writer;

struct gguf_writer *gguf_writer_create(void);
void gguf_writer_free(struct gguf_writer *writer);
void gguf_writer_set_u32(struct gguf_writer *writer, const char *key, uint32_t value);
void gguf_writer_set_i32(struct gguf_writer *writer, const char *key, int32_t value);
void gguf_writer_set_f32(struct gguf_writer *writer, const char *key, float value);
void gguf_writer_set_bool(struct gguf_writer *writer, const char *key, int value);
void gguf_writer_set_string(struct gguf_writer *writer, const char *key, const char *value);
/* An array of n scalars of type (not STRING/ARRAY), copied. */
void gguf_writer_set_array(struct gguf_writer *writer, const char *key, enum gguf_type type,
                           const void *values, uint64_t n);
/* An array of n strings with lengths, copied. */
void gguf_writer_set_string_array(struct gguf_writer *writer, const char *key,
                                  const char *const *values, const uint64_t *lengths, uint64_t n);
/* Any value as the reader represents it (a scalar, a string, or an array of
 * any element type including nested arrays), copied: e.g. metadata carried
 * over from another file. */
void gguf_writer_set_value(struct gguf_writer *writer, const char *key,
                           const struct gguf_value *value);
/* A tensor of shape dims[0..n_dims) (dims[0] innermost) whose data (size
 * bytes) is referenced, not copied. */
void gguf_writer_add_tensor(struct gguf_writer *writer, const char *name, enum tensor_type type,
                            int n_dims, const uint64_t *dims, const void *data, size_t size);
int gguf_writer_write(struct gguf_writer *writer, const char *path, char *err, size_t errlen);

/* ======================= llama2.c checkpoints ======================= */

/* The 7-int header of a llama2.c .bin file. A negative vocab_size in the
 * file means the classifier is stored separately (not shared). */
struct llama2c_header {
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

/* ======================= the model ======================= */

enum model_arch {
    MODEL_ARCH_LLAMA = 0, /* Llama 2/3, TinyLlama, Mistral-style, llama2.c */
    MODEL_ARCH_QWEN2 = 1, /* + q/k/v biases, NEOX rope */
    MODEL_ARCH_QWEN3 = 2, /* + per-head q/k RMSNorm, NEOX rope */
};

const char *model_arch_name(enum model_arch arch);

/* How rotary frequencies are stretched for contexts beyond training
 * (GGUF rope.scaling.type). */
enum model_rope_scaling {
    MODEL_ROPE_SCALING_NONE = 0,
    MODEL_ROPE_SCALING_LINEAR = 1, /* every frequency divided by the factor */
    MODEL_ROPE_SCALING_LLAMA3 = 2, /* low frequencies divided by the factor, high ones kept,
                                      a smooth ramp between (Llama 3.1's rule) */
};

/* Hyperparameters of a model. */
struct model_config {
    enum model_arch arch;
    int dim;            /* embedding length */
    int hidden_dim;     /* feed-forward length */
    int n_layers;       /* block count */
    int n_heads;        /* query heads */
    int n_kv_heads;     /* key/value heads (grouped-query attention) */
    int head_dim;       /* elements per head (key_length; usually dim / n_heads) */
    int vocab_size;     /* tokens */
    int context_length; /* trained context */
    int rope_dim;       /* rotated elements per head (rope.dimension_count) */
    float rope_base;    /* rope.freq_base, default 10000 */
    enum model_rope_scaling rope_scaling; /* rope.scaling.type */
    float rope_factor;                    /* rope.scaling.factor (1: none) */
    int rope_original_context;            /* rope.scaling.original_context_length */
    enum tensor_rope_style rope_style;
    float norm_eps; /* layer_norm_rms_epsilon */
};

/* One transformer block. Matrices are (out, in) = (rows, cols). */
struct model_layer {
    const float *attn_norm;      /* (dim) */
    struct tensor_matrix wq;     /* (n_heads*head_dim, dim) */
    struct tensor_matrix wk;     /* (n_kv_heads*head_dim, dim) */
    struct tensor_matrix wv;     /* (n_kv_heads*head_dim, dim) */
    const float *bq, *bk, *bv;   /* qwen2 biases, (rows of wq/wk/wv); else NULL */
    const float *q_norm;         /* qwen3 per-head RMSNorm weight (head_dim); else NULL */
    const float *k_norm;         /* qwen3 (head_dim); else NULL */
    struct tensor_matrix wo;     /* (dim, n_heads*head_dim) */
    const float *ffn_norm;       /* (dim) */
    struct tensor_matrix w_gate; /* (hidden_dim, dim), w1 in llama2.c */
    struct tensor_matrix w_up;   /* (hidden_dim, dim), w3 */
    struct tensor_matrix w_down; /* (dim, hidden_dim), w2 */
};

/* A loaded model: config plus weights pointing into the file mapping. */
struct model {
    char *path; /* file it came from */
    struct model_config config;
    struct tensor_matrix token_embd; /* (vocab_size, dim); rows are looked up */
    struct model_layer *layers;      /* (n_layers) */
    const float *output_norm;        /* (dim) */
    const float *rope_freqs;         /* (rope_dim / 2) Llama 3 frequency factors, or NULL */
    struct tensor_matrix output;     /* classifier (vocab_size, dim); may alias token_embd */
    struct gguf_file *gguf;          /* the GGUF file, or NULL for llama2.c */
    void *mapping;                   /* llama2.c: the mapped file */
    size_t mapping_size;
    size_t weight_bytes; /* bytes of all matrices read per token
                            (for bandwidth figures) */
    int shard_rank;      /* tensor parallelism: this slice's rank (0 for a whole model) */
    int shard_count;     /* ranks the model is split over (1 for a whole model) */
    int vocab_begin;     /* first classifier row (token id) this slice computes */
    int reduce_parts;    /* column parts of the attn_output and ffn_down products this
                            model (or slice) computes separately; the engine adds all
                            ranks' parts in one fixed order, so results do not depend
                            on the tensor-parallel degree (see model_shard) */
    /* pipeline parallelism (model_stage): a stage's layers are the whole
     * model's first_layer .. first_layer + n_layers - 1 */
    int first_layer;      /* the whole model's index of layers[0] (0 for a whole model) */
    int skips_embedding;  /* 1: a later stage, its input arrives from the stage before */
    int skips_classifier; /* 1: an earlier stage, its output goes on to the next stage */
};

/* ---- the tensors of a model: one descriptor table ----
 *
 * Every tensor a llama-family file may hold is one row of model_tensors:
 * its name, its shape in terms of the config, which architectures have it,
 * how tensor parallelism splits it, and whether every token multiplies by
 * it. The loader, the GGUF writers, sharding, the engine's packing and the
 * byte count all walk this table, so a new tensor is one row here. */

/* A tensor dimension, in terms of the config. */
enum model_width {
    MODEL_WIDTH_ONE,    /* 1: the rows of a vector */
    MODEL_WIDTH_DIM,    /* dim */
    MODEL_WIDTH_HIDDEN, /* hidden_dim */
    MODEL_WIDTH_Q,      /* n_heads * head_dim */
    MODEL_WIDTH_KV,     /* n_kv_heads * head_dim */
    MODEL_WIDTH_HEAD,   /* head_dim */
    MODEL_WIDTH_VOCAB,  /* vocab_size */
    MODEL_WIDTH_PAIRS,  /* rope_dim / 2: one frequency factor per rotated pair */
};

/* What a tensor holds (and what a writer with no source fills it with). */
enum model_tensor_kind {
    MODEL_TENSOR_MATRIX = 0,  /* 2-D weight, stored in the file's weight type */
    MODEL_TENSOR_NORM = 1,    /* RMSNorm weight (F32) */
    MODEL_TENSOR_BIAS = 2,    /* qwen2 projection bias (F32) */
    MODEL_TENSOR_FACTORS = 3, /* Llama 3 rope frequency factors (F32) */
};

/* Which part of a model a tensor belongs to; each architecture has some
 * (model_tensor_need). */
enum model_tensor_group {
    MODEL_GROUP_ALWAYS,     /* every model */
    MODEL_GROUP_OUTPUT,     /* the classifier, when not tied to token_embd */
    MODEL_GROUP_BIASES,     /* q/k/v biases: qwen2 (required), llama (optional) */
    MODEL_GROUP_QK_NORM,    /* per-head q/k norms: qwen3 */
    MODEL_GROUP_ROPE_FREQS, /* rope frequency factors: llama (Llama 3.1 and later) */
};

/* How tensor parallelism splits a tensor over n ranks. */
enum model_shard {
    MODEL_SHARD_REPLICATED, /* every rank holds it whole */
    MODEL_SHARD_ROWS,       /* rows (heads, feed-forward units) in n equal slices */
    MODEL_SHARD_COLUMNS,    /* input columns in n equal slices of whole blocks */
    MODEL_SHARD_VOCAB,      /* classifier rows, n nearly equal slices */
};

/* Whether a model of an architecture has a tensor. */
enum model_need {
    MODEL_NEED_ABSENT = 0,   /* never read */
    MODEL_NEED_OPTIONAL = 1, /* read if present */
    MODEL_NEED_REQUIRED = 2, /* the file is refused without it */
};

/* One row of the table. */
struct model_tensor_info {
    const char *suffix;          /* llama.cpp's name (after "blk.<l>." in a block) */
    int in_block;                /* 1: one per block (struct model_layer); 0: one per model */
    enum model_tensor_kind kind; /* matrix or F32 vector */
    enum model_width rows, cols; /* a vector: MODEL_WIDTH_ONE and its length */
    enum model_tensor_group group;
    enum model_shard shard;
    int per_token; /* a matrix every token multiplies by: counted in weight_bytes,
                      packed when the kernels prefer panels */
    size_t field;  /* offset of its struct tensor_matrix (a matrix) or const float *
                      (a vector) in struct model, or in struct model_layer */
};

/* The table, in llama.cpp's order within a model and within a block. */
extern const struct model_tensor_info model_tensors[];
extern const int model_tensor_count;

/* Whether models of arch have tensors of group. */
enum model_need model_tensor_need(enum model_arch arch, enum model_tensor_group group);
/* The size of width for config c. */
int model_width_of(const struct model_config *c, enum model_width width);
/* Where tensor t of m lives (layer l for a block's; ignored otherwise). */
struct tensor_matrix *model_tensor_matrix(struct model *m, const struct model_tensor_info *t,
                                          int layer);
const struct tensor_matrix *model_tensor_matrix_of(const struct model *m,
                                                   const struct model_tensor_info *t, int layer);
const float **model_tensor_vector(struct model *m, const struct model_tensor_info *t, int layer);
/* The name of tensor t (in block layer) into buf. */
void model_tensor_name(char *buf, size_t size, const struct model_tensor_info *t, int layer);

/* The rotary frequency of each of the model's pairs (rope_dim / 2 floats
 * into out): rope_base^(-2j / rope_dim), divided by rope_freqs[j] when the
 * file has that tensor, else as the scaling type says. */
void model_rope_frequencies(const struct model *m, float *out);

/* Loads a GGUF file or a llama2.c checkpoint (told apart by magic). */
int model_load(struct model **out, const char *path, char *err, size_t errlen);
void model_free(struct model *model);
/* Tells the kernel that w's pages of the model file will not be read again
 * (the engine runs on a packed copy): they leave the process's resident
 * memory, and come back from the file if something reads them after all.
 * Only whole pages inside w are released; nothing happens for a model
 * parsed from the caller's buffer. */
void model_release_pages(const struct model *model, const struct tensor_matrix *w);
/* 1 if the file at path starts with the GGUF magic. */
int model_is_gguf(const char *path);

/* Tensor parallelism (Megatron style): the weights rank `rank` of n holds.
 * q/k/v and gate/up are split by output rows, o and down by input columns
 * (at whole-block boundaries for quantized types), attention heads and KV
 * heads by head, the classifier by vocabulary rows; norms and the
 * embedding are replicated. The slice's config has the local n_heads,
 * n_kv_heads and hidden_dim; vocab_size stays the whole vocabulary and
 * output.rows is the slice's share. The slice points into whole's memory
 * (nothing is copied; each rank touches only its pages) and must be freed
 * with model_free before whole. A degree the model cannot take is refused
 * with the reason and the degrees that would work.
 *
 * Exactness across degrees: a whole model's column-split products are cut
 * into G parts, G the largest of 4, 2, 1 that the model can be split into;
 * a slice of a degree n dividing G computes G / n of them. Every degree
 * dividing G then adds the same G partial sums in the same order. */
int model_shard(const struct model *whole, int rank, int n, struct model **out, char *err,
                size_t errlen);
/* 0 if whole can be split n ways; else -1 with "<path>: cannot split n ways:
 * <reason>; degrees that work: 1, 2, 4" in why (whylen bytes). The rule
 * model_shard applies, for callers that decide before loading a slice. */
int model_check_degree(const struct model *whole, int n, char *why, size_t whylen);

/* Pipeline parallelism: the layers [first, first + count) of m (a whole
 * model or a tensor-parallel slice), as the model of count layers a stage
 * runs. The first stage keeps the token embeddings, the last the final
 * norm and the classifier; a stage without them has them empty
 * (skips_embedding, skips_classifier). A view like model_shard's: freed
 * with model_free before m. */
int model_stage(const struct model *m, int first, int count, struct model **out, char *err,
                size_t errlen);
/* The layers of each of n_stages stages into counts: given's (n_stages
 * counts, checked: each at least 1, adding up to n_layers) or, given
 * NULL, as even as can be. -1 with the reason in err. */
int model_stage_layers(int n_layers, int n_stages, const int *given, int *counts, char *err,
                       size_t errlen);

/* Upper bounds on hyperparameters that the loaders accept: far above any real
 * model, low enough that no size computed from them can overflow. */
#define MODEL_MAX_WIDTH   (1 << 20) /* dim, hidden_dim, head_dim, n_heads * head_dim */
#define MODEL_MAX_LAYERS  (1 << 14)
#define MODEL_MAX_VOCAB   (1 << 24)
#define MODEL_MAX_CONTEXT (1 << 30)

/* Fills model (zeroed, path set) from the llama2.c checkpoint at path: maps
 * the file into model->mapping and checks that its size is exactly what the
 * header implies. model_load calls it for files without the GGUF magic. */
int llama2c_load(struct model *model, const char *path, char *err, size_t errlen);

/* A vocabulary as GGUF's tokenizer.ggml.* keys hold it. */
struct model_vocab {
    const char *model; /* tokenizer.ggml.model: "llama" (SPM) or "gpt2" */
    int n_tokens;
    const char *const *texts; /* (n_tokens) token texts */
    const uint64_t *lengths;  /* (n_tokens) their byte lengths */
    const float *scores;      /* (n_tokens) merge scores, or NULL */
    const int32_t *types;     /* (n_tokens) llama.cpp token types, or NULL */
    int bos, eos, unk;        /* special ids, -1 if none */
    int add_bos;              /* tokenizer.ggml.add_bos_token */
};

/* How a file's matrices are typed: all in one type, or llama.cpp's "_M"
 * mix of a k-quant (Q4_K_M, Q5_K_M): the classifier, and attn_v and
 * ffn_down in the first and last eighth of the blocks and every third
 * block between, in Q6_K; every other matrix in the k-quant. */
enum model_mix {
    MODEL_MIX_NONE = 0,
    MODEL_MIX_M = 1,
};

/* A file type by name: a tensor type ("q4_k", "q8_0", "bf16", ...) or a
 * mix ("q4_k_m", "q5_k_m"); 0, or -1 for a name that is neither. */
int model_file_type_from_name(const char *name, enum tensor_type *type, enum model_mix *mix);

/* Writes model (loaded from GGUF or llama2.c) as a GGUF v3 file with the
 * architecture's keys, the vocabulary (vocab; NULL: a GGUF model's own
 * tokenizer keys), and its 2-D weights converted to type, or to the mix
 * (as llama.cpp's quantizer falls back, a matrix whose rows are not whole
 * 256-element super-blocks takes a 32-element type, and one whose rows
 * are not whole 32-element blocks stays F32); norms and biases stay F32.
 * name goes to general.name. */
int model_write_gguf(const struct model *model, enum tensor_type type, enum model_mix mix,
                     const struct model_vocab *vocab, const char *name, const char *path, char *err,
                     size_t errlen);

/* Parameters of a seeded random model (lockstep convert --random). */
struct model_random_params {
    enum model_arch arch;
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, context_length;
    enum tensor_type type; /* type of the 2-D weights; norms stay F32 */
    uint64_t seed;
    enum model_mix mix; /* MODEL_MIX_M: llama.cpp's "_M" mix of type and Q6_K */
};

/* Writes a seeded random model with a byte-level BPE (gpt2) vocabulary of
 * vocab_size tokens that llama.cpp can load too. */
int model_write_random(const struct model_random_params *params, const char *path, char *err,
                       size_t errlen);

#endif
