/* types.c -- element types: the type table, IEEE half precision, and ggml's
 * Q8_0 / Q4_0 reference quantizers and dequantizers.
 *
 * The quantizers reproduce ggml's reference code value for value, so a
 * matrix quantized here equals one quantized by llama.cpp, and activations
 * quantized for a matmul (matmul.c) equal what llama.cpp feeds its dot
 * products. */
#include "tensor.h"

#include <math.h>
#include <string.h>

struct type_info {
    const char *name;      /* as GGUF tools print it */
    size_t block_bytes;    /* bytes per block */
    enum tensor_type type; /* ggml's id */
    int block_elements;    /* elements per block */
};

static const struct type_info type_table[] = {
    {"f32", sizeof(float), TENSOR_F32, 1},
    {"f16", sizeof(uint16_t), TENSOR_F16, 1},
    {"q4_0", sizeof(struct tensor_block_q4_0), TENSOR_Q4_0, TENSOR_QK},
    {"q8_0", sizeof(struct tensor_block_q8_0), TENSOR_Q8_0, TENSOR_QK},
};

#define TYPE_COUNT (sizeof(type_table) / sizeof(type_table[0]))

_Static_assert(sizeof(struct tensor_block_q8_0) == 34, "block_q8_0 must match ggml");
_Static_assert(sizeof(struct tensor_block_q4_0) == 18, "block_q4_0 must match ggml");

static const struct type_info *find_type(int type) {
    for (size_t i = 0; i < TYPE_COUNT; i++)
        if ((int)type_table[i].type == type) return &type_table[i];
    return NULL;
}

const char *tensor_type_name(int type) {
    const struct type_info *info = find_type(type);
    return info ? info->name : NULL;
}

int tensor_type_from_name(const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < TYPE_COUNT; i++)
        if (strcmp(type_table[i].name, name) == 0) return (int)type_table[i].type;
    return -1;
}

int tensor_type_is_valid(int type) {
    return find_type(type) != NULL;
}

int tensor_type_block_elements(enum tensor_type type) {
    const struct type_info *info = find_type((int)type);
    return info ? info->block_elements : 0;
}

size_t tensor_type_block_bytes(enum tensor_type type) {
    const struct type_info *info = find_type((int)type);
    return info ? info->block_bytes : 0;
}

size_t tensor_row_bytes(enum tensor_type type, int64_t n) {
    const struct type_info *info = find_type((int)type);
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

void tensor_quantize_q8_0(struct tensor_block_q8_0 *out, const float *x, int64_t n) {
    for (int64_t block = 0; block < n / TENSOR_QK; block++) {
        const float *v = x + block * TENSOR_QK;
        float amax = 0.0f;
        for (int j = 0; j < TENSOR_QK; j++) amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        out[block].d = tensor_fp32_to_fp16(d);
        for (int j = 0; j < TENSOR_QK; j++) out[block].qs[j] = (int8_t)roundf(v[j] * id);
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
    switch (type) {
    case TENSOR_F32:
        memcpy(out, row, (size_t)n * sizeof(float));
        break;
    case TENSOR_F16: {
        const uint16_t *h = row;
        for (int64_t i = 0; i < n; i++) out[i] = tensor_fp16_to_fp32(h[i]);
        break;
    }
    case TENSOR_Q8_0: {
        const struct tensor_block_q8_0 *blocks = row;
        for (int64_t block = 0; block < n / TENSOR_QK; block++) {
            float d = tensor_fp16_to_fp32(blocks[block].d);
            for (int j = 0; j < TENSOR_QK; j++)
                out[block * TENSOR_QK + j] = d * (float)blocks[block].qs[j];
        }
        break;
    }
    case TENSOR_Q4_0: {
        const struct tensor_block_q4_0 *blocks = row;
        for (int64_t block = 0; block < n / TENSOR_QK; block++) {
            float d = tensor_fp16_to_fp32(blocks[block].d);
            float *o = out + block * TENSOR_QK;
            for (int j = 0; j < TENSOR_QK / 2; j++) {
                o[j] = d * (float)((blocks[block].qs[j] & 0x0f) - 8);
                o[j + TENSOR_QK / 2] = d * (float)((blocks[block].qs[j] >> 4) - 8);
            }
        }
        break;
    }
    }
}
