/* types.c -- element types: the type table (ggml's type traits: block
 * sizes, the dot type a product quantizes its input to, converters), IEEE
 * half precision, and ggml's Q8_0 / Q4_0 reference quantizers. The other
 * types' converters and row dots live in quants_*.c.
 *
 * The quantizers reproduce ggml's reference code value for value, so a
 * matrix quantized here equals one quantized by llama.cpp, and activations
 * quantized for a matmul (matmul.c) equal what llama.cpp feeds its dot
 * products. */
#include "canon.h"
#include "tensor_internal.h"

#include <math.h>
#include <string.h>
#include <strings.h>

static void dequantize_f32(float *out, const void *blocks, int64_t n) {
    memcpy(out, blocks, (size_t)n * sizeof(float));
}

static void quantize_f32(void *out, const float *x, int64_t n) {
    memcpy(out, x, (size_t)n * sizeof(float));
}

static void dequantize_f16(float *out, const void *blocks, int64_t n) {
    const uint16_t *h = blocks;
    for (int64_t i = 0; i < n; i++) out[i] = tensor_fp16_to_fp32(h[i]);
}

static void quantize_f16(void *out, const float *x, int64_t n) {
    uint16_t *h = out;
    for (int64_t i = 0; i < n; i++) h[i] = tensor_fp32_to_fp16(x[i]);
}

static void dequantize_q8_0(float *out, const void *row, int64_t n) {
    const struct tensor_block_q8_0 *blocks = row;
    for (int64_t block = 0; block < n / TENSOR_QK; block++) {
        float d = tensor_fp16_to_fp32(blocks[block].d);
        for (int j = 0; j < TENSOR_QK; j++)
            out[block * TENSOR_QK + j] = d * (float)blocks[block].qs[j];
    }
}

static void quantize_q8_0(void *out, const float *x, int64_t n) {
    tensor_quantize_q8_0(out, x, n);
}

static void dequantize_q4_0(float *out, const void *row, int64_t n) {
    const struct tensor_block_q4_0 *blocks = row;
    for (int64_t block = 0; block < n / TENSOR_QK; block++) {
        float d = tensor_fp16_to_fp32(blocks[block].d);
        float *o = out + block * TENSOR_QK;
        for (int j = 0; j < TENSOR_QK / 2; j++) {
            o[j] = d * (float)((blocks[block].qs[j] & 0x0f) - 8);
            o[j + TENSOR_QK / 2] = d * (float)((blocks[block].qs[j] >> 4) - 8);
        }
    }
}

static void quantize_q4_0(void *out, const float *x, int64_t n) {
    tensor_quantize_q4_0(out, x, n);
}

/* A row of the type table: ggml's name, id, block elements and bytes, the
 * dot type, whether weights may have the type, and its converters. */
#define TYPE_ROW(name, id, elements, bytes, dot, weight, dequantize, quantize)                     \
    [id] = {name, bytes, dequantize, quantize, id, elements, dot, weight, 0, 0}
/* ... for a type that packs into panels (tensor.h): quant bytes per block
 * of a panel, and the xor each quant byte takes on the way in. */
#define PANEL_TYPE_ROW(name, id, bytes, dequantize, quantize, panel_quants, panel_flip)            \
    [id] = {name,      bytes,       dequantize, quantize,     id,                                  \
            TENSOR_QK, TENSOR_Q8_0, 1,          panel_quants, panel_flip}
/* ... for a type whose converters are tensor_dequantize_<t> and
 * tensor_quantize_<t>. */
#define TYPE_ROW_OF(t, name, id, elements, bytes, dot, weight)                                     \
    TYPE_ROW(name, id, elements, bytes, dot, weight, tensor_dequantize_##t, tensor_quantize_##t)

/* Indexed by type id; rows left empty (name NULL) are ids ggml has and
 * lockstep does not. The legacy types and IQ4_NL take their input as
 * Q8_0 (Q4_1, Q5_1: Q8_1), the k-quants and IQ4_XS as Q8_K, as ggml does. */
static const struct tensor_type_traits type_table[TENSOR_TYPE_COUNT] = {
    TYPE_ROW("f32", TENSOR_F32, 1, sizeof(float), TENSOR_F32, 1, dequantize_f32, quantize_f32),
    TYPE_ROW("f16", TENSOR_F16, 1, sizeof(uint16_t), TENSOR_F32, 1, dequantize_f16, quantize_f16),
    /* Q4_0 bytes keep their two nibbles; Q8_0 quants gain 128 (xor 0x80),
     * so the AVX-512 kernel loads them as vpdpbusd's unsigned operand */
    PANEL_TYPE_ROW("q4_0", TENSOR_Q4_0, sizeof(struct tensor_block_q4_0), dequantize_q4_0,
                   quantize_q4_0, TENSOR_PANEL_QUANTS_Q4_0, 0x00),
    PANEL_TYPE_ROW("q8_0", TENSOR_Q8_0, sizeof(struct tensor_block_q8_0), dequantize_q8_0,
                   quantize_q8_0, TENSOR_PANEL_QUANTS, 0x80),
    TYPE_ROW_OF(q8_1, "q8_1", TENSOR_Q8_1, TENSOR_QK, sizeof(struct tensor_block_q8_1), TENSOR_Q8_1,
                0),
    TYPE_ROW_OF(q8_k, "q8_K", TENSOR_Q8_K, TENSOR_QK_K, sizeof(struct tensor_block_q8_k),
                TENSOR_Q8_K, 0),
    TYPE_ROW_OF(q4_1, "q4_1", TENSOR_Q4_1, TENSOR_QK, sizeof(struct tensor_block_q4_1), TENSOR_Q8_1,
                1),
    TYPE_ROW_OF(q5_0, "q5_0", TENSOR_Q5_0, TENSOR_QK, sizeof(struct tensor_block_q5_0), TENSOR_Q8_0,
                1),
    TYPE_ROW_OF(q5_1, "q5_1", TENSOR_Q5_1, TENSOR_QK, sizeof(struct tensor_block_q5_1), TENSOR_Q8_1,
                1),
    TYPE_ROW_OF(iq4_nl, "iq4_nl", TENSOR_IQ4_NL, TENSOR_QK, sizeof(struct tensor_block_iq4_nl),
                TENSOR_Q8_0, 1),
    TYPE_ROW_OF(q2_k, "q2_K", TENSOR_Q2_K, TENSOR_QK_K, sizeof(struct tensor_block_q2_k),
                TENSOR_Q8_K, 1),
    TYPE_ROW_OF(q3_k, "q3_K", TENSOR_Q3_K, TENSOR_QK_K, sizeof(struct tensor_block_q3_k),
                TENSOR_Q8_K, 1),
    TYPE_ROW_OF(q4_k, "q4_K", TENSOR_Q4_K, TENSOR_QK_K, sizeof(struct tensor_block_q4_k),
                TENSOR_Q8_K, 1),
    TYPE_ROW_OF(q5_k, "q5_K", TENSOR_Q5_K, TENSOR_QK_K, sizeof(struct tensor_block_q5_k),
                TENSOR_Q8_K, 1),
    TYPE_ROW_OF(q6_k, "q6_K", TENSOR_Q6_K, TENSOR_QK_K, sizeof(struct tensor_block_q6_k),
                TENSOR_Q8_K, 1),
    TYPE_ROW_OF(iq4_xs, "iq4_xs", TENSOR_IQ4_XS, TENSOR_QK_K, sizeof(struct tensor_block_iq4_xs),
                TENSOR_Q8_K, 1),
    TYPE_ROW_OF(bf16, "bf16", TENSOR_BF16, 1, sizeof(uint16_t), TENSOR_BF16, 1),
};

_Static_assert(sizeof(struct tensor_block_q8_0) == 34, "block_q8_0 must match ggml");
_Static_assert(sizeof(struct tensor_block_q4_0) == 18, "block_q4_0 must match ggml");
_Static_assert(sizeof(struct tensor_block_q4_1) == 20, "block_q4_1 must match ggml");
_Static_assert(sizeof(struct tensor_block_q5_0) == 22, "block_q5_0 must match ggml");
_Static_assert(sizeof(struct tensor_block_q5_1) == 24, "block_q5_1 must match ggml");
_Static_assert(sizeof(struct tensor_block_q8_1) == 36, "block_q8_1 must match ggml");
_Static_assert(sizeof(struct tensor_block_iq4_nl) == 18, "block_iq4_nl must match ggml");
_Static_assert(sizeof(struct tensor_block_q2_k) == 84, "block_q2_K must match ggml");
_Static_assert(sizeof(struct tensor_block_q3_k) == 110, "block_q3_K must match ggml");
_Static_assert(sizeof(struct tensor_block_q4_k) == 144, "block_q4_K must match ggml");
_Static_assert(sizeof(struct tensor_block_q5_k) == 176, "block_q5_K must match ggml");
_Static_assert(sizeof(struct tensor_block_q6_k) == 210, "block_q6_K must match ggml");
_Static_assert(sizeof(struct tensor_block_iq4_xs) == 136, "block_iq4_xs must match ggml");
_Static_assert(sizeof(struct tensor_block_q8_k) == 292, "block_q8_K must match ggml");

const struct tensor_type_traits *tensor_type_traits(int type) {
    if (type < 0 || type >= TENSOR_TYPE_COUNT || !type_table[type].name) return NULL;
    return &type_table[type];
}

size_t tensor_panel_quants(enum tensor_type type) {
    const struct tensor_type_traits *traits = tensor_type_traits((int)type);
    return traits ? traits->panel_quants : 0;
}

static const struct tensor_type_traits *find_type(int type) {
    return tensor_type_traits(type);
}

const char *tensor_type_name(int type) {
    const struct tensor_type_traits *info = find_type(type);
    return info ? info->name : NULL;
}

int tensor_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < TENSOR_TYPE_COUNT; i++)
        if (type_table[i].name && strcasecmp(type_table[i].name, name) == 0) return i;
    return -1;
}

int tensor_type_is_valid(int type) {
    const struct tensor_type_traits *info = find_type(type);
    return info && info->weights;
}

int tensor_type_block_elements(enum tensor_type type) {
    const struct tensor_type_traits *info = find_type((int)type);
    return info ? info->block_elements : 0;
}

size_t tensor_type_block_bytes(enum tensor_type type) {
    const struct tensor_type_traits *info = find_type((int)type);
    return info ? info->block_bytes : 0;
}

size_t tensor_row_bytes(enum tensor_type type, int64_t n) {
    const struct tensor_type_traits *info = find_type((int)type);
    if (!info || n < 0) return 0;
    return (size_t)(n / info->block_elements) * info->block_bytes;
}

struct tensor_matrix tensor_matrix_make(const void *data, enum tensor_type type, int rows,
                                        int cols) {
    struct tensor_matrix m;
    m.data = data;
    m.type = type;
    m.rows = rows;
    m.cols = cols;
    m.row_stride = tensor_row_bytes(type, cols);
    m.layout = TENSOR_LAYOUT_ROWS;
    m.scales_offset = 0;
    return m;
}

/* ---- IEEE half precision ---- */

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float tensor_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        /* zero or subnormal: mantissa * 2^-24 is exact in float */
        float magnitude = (float)mantissa * 0x1p-24f;
        return sign ? -magnitude : magnitude;
    }
    return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/* Shifts value right by shift bits, rounding to nearest, ties to even. */
static uint32_t shift_round_even(uint32_t value, int shift) {
    uint32_t kept = value >> shift;
    uint32_t rest = value & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1u))) kept++;
    return kept;
}

uint16_t tensor_fp32_to_fp16(float f) {
    uint32_t bits = float_bits(f);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
        return (uint16_t)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
    if (magnitude >= 0x477ff000u) /* 65520 and above round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (magnitude >= 0x38800000u) /* normal half: rebias the exponent (carry may bump it) */
        return (uint16_t)(sign | shift_round_even(magnitude - 0x38000000u, 13));
    uint32_t exponent = magnitude >> 23;
    if (exponent < 102) return sign; /* below half the smallest subnormal */
    /* subnormal half: the value is mantissa * 2^(exponent - 150), in units of 2^-24 */
    uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | shift_round_even(mantissa, 126 - (int)exponent));
}

/* ---- quantizers (ggml's reference formulas) ---- */

float tensor_canon_quantize_block_q8_0(int8_t qs[TENSOR_QK], int32_t *sum, const float *x) {
    float amax[CANON_LANES] = {0};
    for (int i = 0; i < TENSOR_QK; i++)
        amax[i % CANON_LANES] = canon_max(amax[i % CANON_LANES], fabsf(x[i]));
    float d = canon_max_lanes(amax) / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t total = 0;
    for (int i = 0; i < TENSOR_QK; i++) {
        int32_t q = canon_truncate(roundf(x[i] * id));
        qs[i] = (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
        total += (uint32_t)q;
    }
    *sum = (int32_t)total;
    return d;
}

/* ggml's quantize_row_q8_0_ref, value for value on finite rows: amax /
 * 127 and roundf(x / scale). Written in the canonical order
 * (tensor_canon_quantize_block_q8_0), so its NaN, infinity and subnormal
 * corners are those of the activation quantizers too. */
void tensor_quantize_q8_0(struct tensor_block_q8_0 *out, const float *x, int64_t n) {
    for (int64_t block = 0; block < n / TENSOR_QK; block++) {
        int32_t sum;
        float d = tensor_canon_quantize_block_q8_0(out[block].qs, &sum, x + block * TENSOR_QK);
        out[block].d = tensor_fp32_to_fp16(d);
    }
}

void tensor_quantize_q4_0(struct tensor_block_q4_0 *out, const float *x, int64_t n) {
    for (int64_t block = 0; block < n / TENSOR_QK; block++) {
        const float *v = x + block * TENSOR_QK;
        float amax = 0.0f, max = 0.0f; /* largest magnitude, and that element with its sign */
        for (int j = 0; j < TENSOR_QK; j++) {
            if (amax < fabsf(v[j])) {
                amax = fabsf(v[j]);
                max = v[j];
            }
        }
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        out[block].d = tensor_fp32_to_fp16(d);
        for (int j = 0; j < TENSOR_QK / 2; j++) {
            int low = (int)(v[j] * id + 8.5f);
            int high = (int)(v[j + TENSOR_QK / 2] * id + 8.5f);
            if (low > 15) low = 15;
            if (high > 15) high = 15;
            out[block].qs[j] = (uint8_t)(low | (high << 4));
        }
    }
}

void tensor_dequantize_row(float *out, const void *row, enum tensor_type type, int64_t n) {
    const struct tensor_type_traits *info = find_type((int)type);
    if (info) info->dequantize(out, row, n);
}

int tensor_quantize_row(enum tensor_type type, void *out, const float *x, int64_t n) {
    const struct tensor_type_traits *info = find_type((int)type);
    if (!info || !info->weights) return -1;
    info->quantize(out, x, n);
    return 0;
}
