/* test_tensor_types.c -- the type table, IEEE half conversions (exhaustive
 * round trip, and against the CPU's own conversions when present: F16C on
 * x86-64, fcvt on arm64), and
 * the Q8_0 / Q4_0 quantizers: ggml's block layouts, scales, rounding (ties
 * away from zero for Q8_0, truncation of x/d + 8.5 for Q4_0) and error
 * bounds of the round trip. */
#include "tensor/tensor.h"
#include "testutil.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#include <math.h>
#include <stddef.h>
#include <string.h>

static int is_nan_half(uint16_t h) {
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hardware_to_half(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c"))) static float hardware_to_float(uint16_t h) {
    return _cvtsh_ss(h);
}

static int have_hardware_halves(void) {
    unsigned int eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((ecx >> 29) & 1);
}
#elif defined(__aarch64__)
/* __fp16 converts with fcvt, which every arm64 CPU has. */
static uint16_t hardware_to_half(float f) {
    __fp16 half = (__fp16)f;
    uint16_t bits;
    memcpy(&bits, &half, sizeof(bits));
    return bits;
}

static float hardware_to_float(uint16_t h) {
    __fp16 half;
    memcpy(&half, &h, sizeof(half));
    return (float)half;
}

static int have_hardware_halves(void) {
    return 1;
}
#else
static uint16_t hardware_to_half(float f) {
    return tensor_fp32_to_fp16(f);
}

static float hardware_to_float(uint16_t h) {
    return tensor_fp16_to_fp32(h);
}

static int have_hardware_halves(void) {
    return 0;
}
#endif

static void test_type_table(void) {
    CHECK(strcmp(tensor_type_name(TENSOR_F32), "f32") == 0);
    CHECK(strcmp(tensor_type_name(TENSOR_F16), "f16") == 0);
    CHECK(strcmp(tensor_type_name(TENSOR_Q8_0), "q8_0") == 0);
    CHECK(strcmp(tensor_type_name(TENSOR_Q4_0), "q4_0") == 0);
    CHECK(tensor_type_name(4) == NULL && tensor_type_name(31) == NULL);
    CHECK(tensor_type_from_name("q4_0") == TENSOR_Q4_0);
    CHECK(tensor_type_from_name("q8_0") == 8);
    CHECK(tensor_type_from_name("q5_9") == -1);
    CHECK(tensor_type_from_name(NULL) == -1);
    CHECK(tensor_type_is_valid(0) && tensor_type_is_valid(1) && tensor_type_is_valid(2) &&
          tensor_type_is_valid(8));
    CHECK(!tensor_type_is_valid(4) && !tensor_type_is_valid(-1) && !tensor_type_is_valid(31));
    /* activation formats only: no weight is stored in them */
    CHECK(!tensor_type_is_valid(TENSOR_Q8_1) && !tensor_type_is_valid(TENSOR_Q8_K));
    CHECK(tensor_type_block_elements(TENSOR_F16) == 1);
    CHECK(tensor_type_block_elements(TENSOR_Q4_0) == 32);
    CHECK(tensor_type_block_bytes(TENSOR_F32) == 4);
    CHECK(tensor_type_block_bytes(TENSOR_F16) == 2);
    CHECK(tensor_type_block_bytes(TENSOR_Q8_0) == 34);
    CHECK(tensor_type_block_bytes(TENSOR_Q4_0) == 18);
    CHECK(tensor_row_bytes(TENSOR_Q4_0, 4096) == 128 * 18);
    CHECK(tensor_row_bytes(TENSOR_Q8_0, 768) == 24 * 34);
    CHECK(tensor_row_bytes(TENSOR_F16, 7) == 14);
    /* ggml's layouts: the fp16 scale first, then the quants */
    CHECK(offsetof(struct tensor_block_q8_0, qs) == 2);
    CHECK(offsetof(struct tensor_block_q4_0, qs) == 2);
    float data[4];
    struct tensor_matrix m = tensor_matrix_make(data, TENSOR_F32, 2, 2);
    CHECK(m.rows == 2 && m.cols == 2 && m.row_stride == 8 && m.data == data);
}

static void test_half(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tensor_fp16_to_fp32((uint16_t)h);
        uint16_t back = tensor_fp32_to_fp16(f);
        if (is_nan_half((uint16_t)h) ? !isnan(f) || !is_nan_half(back) : back != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d halves do not survive the round trip", bad);
    CHECK(tensor_fp16_to_fp32(0x3c00) == 1.0f);
    CHECK(tensor_fp16_to_fp32(0xc000) == -2.0f);
    CHECK(tensor_fp16_to_fp32(0x7bff) == 65504.0f);
    CHECK(tensor_fp16_to_fp32(0x0001) == 0x1p-24f);
    CHECK(isinf(tensor_fp16_to_fp32(0x7c00)));
    CHECK(tensor_fp32_to_fp16(65519.0f) == 0x7bff); /* below the midpoint to infinity */
    CHECK(tensor_fp32_to_fp16(65520.0f) == 0x7c00);
    CHECK(tensor_fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00);     /* tie, to even */
    CHECK(tensor_fp32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02); /* tie, to even */
    CHECK(tensor_fp32_to_fp16(0x1p-25f) == 0x0000);            /* tie to zero */
    CHECK(tensor_fp32_to_fp16(0x1.8p-25f) == 0x0001);          /* above the tie */
    CHECK(tensor_fp32_to_fp16(-0.0f) == 0x8000);
    CHECK(is_nan_half(tensor_fp32_to_fp16(NAN)));

    if (!have_hardware_halves()) {
        printf("no hardware half conversions: skipping the comparison\n");
        return;
    }
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float mine = tensor_fp16_to_fp32((uint16_t)h), cpu = hardware_to_float((uint16_t)h);
        if (isnan(cpu) ? !isnan(mine) : !test_same_bits(&mine, &cpu, 1)) bad++;
    }
    CHECK_MSG(bad == 0, "%d halves convert differently from the CPU", bad);
    /* random float bit patterns, concentrated on the half range */
    uint32_t state = 12345;
    bad = 0;
    for (int i = 0; i < 2000000; i++) {
        state = state * 1664525u + 1013904223u;
        uint32_t bits = state;
        if (i % 2) bits = (bits & 0x87ffffffu) | 0x30000000u; /* exponents around 2^-31..2^32 */
        float f;
        memcpy(&f, &bits, sizeof(f));
        uint16_t mine = tensor_fp32_to_fp16(f), cpu = hardware_to_half(f);
        if (isnan(f) ? !is_nan_half(mine) : mine != cpu) {
            if (bad++ < 3) CHECK_MSG(0, "fp16(%a): 0x%04x, the CPU 0x%04x", f, mine, cpu);
        }
    }
    CHECK_MSG(bad == 0, "%d floats convert differently from the CPU", bad);
}

static void test_q8_0(void) {
    float x[64];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) * 0.25f; /* -4 .. 3.75 */
    /* second block: amax 127 gives d = 1, so halves are exact ties */
    for (int j = 0; j < 32; j++) x[32 + j] = 0.0f;
    x[32] = 127.0f;
    x[33] = 2.5f;
    x[34] = -2.5f;
    x[35] = 0.49999997f;
    x[36] = -126.5f;
    struct tensor_block_q8_0 blocks[2];
    tensor_quantize_q8_0(blocks, x, 64);
    CHECK(blocks[0].d == tensor_fp32_to_fp16(4.0f / 127.0f));
    CHECK(blocks[0].qs[0] == -127);
    CHECK(blocks[0].qs[16] == 0);
    CHECK(blocks[0].qs[31] == 119); /* 3.75 * 127 / 4 = 119.06 */
    CHECK(blocks[0].qs[17] == 8);   /* 0.25 * 31.75 = 7.94 */
    CHECK(blocks[1].d == 0x3c00);
    CHECK(blocks[1].qs[0] == 127);
    CHECK(blocks[1].qs[1] == 3); /* ties go away from zero (roundf) */
    CHECK(blocks[1].qs[2] == -3);
    CHECK(blocks[1].qs[3] == 0);
    CHECK(blocks[1].qs[4] == -127);
    /* the raw bytes: little-endian fp16 scale, then the quants */
    unsigned char bytes[34];
    memcpy(bytes, &blocks[1], 34);
    CHECK(bytes[0] == 0x00 && bytes[1] == 0x3c && bytes[2] == 127 && bytes[3] == 3);

    /* all-zero block: scale 0, quants 0 */
    float zeros[32] = {0};
    tensor_quantize_q8_0(blocks, zeros, 32);
    CHECK(blocks[0].d == 0 && blocks[0].qs[5] == 0);

    /* round trip error at most half a step (plus the fp16 scale's rounding) */
    float y[256], back[256];
    struct tensor_block_q8_0 many[8];
    for (int i = 0; i < 256; i++) y[i] = sinf((float)i * 0.37f) * (float)(1 + i % 7);
    tensor_quantize_q8_0(many, y, 256);
    tensor_dequantize_row(back, many, TENSOR_Q8_0, 256);
    for (int i = 0; i < 256; i++) {
        float d = tensor_fp16_to_fp32(many[i / 32].d);
        CHECK_MSG(fabsf(back[i] - y[i]) <= 0.5f * d + 127.0f * d * 0x1p-10f, "q8_0 element %d", i);
    }
}

static void test_q4_0(void) {
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16); /* -16 .. 15: max magnitude is -16 */
    struct tensor_block_q4_0 block;
    tensor_quantize_q4_0(&block, x, 32);
    CHECK(block.d == tensor_fp32_to_fp16(2.0f)); /* -16 / -8 */
    CHECK(block.qs[0] == 0x80);                  /* element 0 -> 0, element 16 -> 8 */
    CHECK((block.qs[15] & 0x0f) == 8);           /* -1 / 2 + 8.5 = 8 */
    CHECK((block.qs[15] >> 4) == 15);            /* 15 / 2 + 8.5 = 16, clamped to 15 */
    float back[32];
    tensor_dequantize_row(back, &block, TENSOR_Q4_0, 32);
    CHECK(back[0] == -16.0f && back[16] == 0.0f && back[31] == 14.0f && back[15] == 0.0f);

    /* a positive maximum gives a negative scale */
    for (int j = 0; j < 32; j++) x[j] = 0.0f;
    x[3] = 8.0f;
    x[20] = -4.0f;
    tensor_quantize_q4_0(&block, x, 32);
    CHECK(block.d == tensor_fp32_to_fp16(-1.0f));
    tensor_dequantize_row(back, &block, TENSOR_Q4_0, 32);
    CHECK(back[3] == 8.0f && back[20] == -4.0f && back[0] == 0.0f);

    /* round trip within one step of the scale */
    float y[128];
    struct tensor_block_q4_0 many[4];
    for (int i = 0; i < 128; i++) y[i] = cosf((float)i * 0.91f) * (float)(1 + i % 5);
    tensor_quantize_q4_0(many, y, 128);
    float back_many[128];
    tensor_dequantize_row(back_many, many, TENSOR_Q4_0, 128);
    for (int i = 0; i < 128; i++) {
        float d = fabsf(tensor_fp16_to_fp32(many[i / 32].d));
        CHECK_MSG(fabsf(back_many[i] - y[i]) <= 1.01f * d, "q4_0 element %d", i);
    }
}

static void test_dequantize(void) {
    float f[3] = {1.5f, -2.0f, 3.25f}, out[3];
    tensor_dequantize_row(out, f, TENSOR_F32, 3);
    CHECK(test_same_bits(out, f, 3));
    uint16_t h[3] = {0x3c00, 0xc000, 0x3a00};
    tensor_dequantize_row(out, h, TENSOR_F16, 3);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.75f);
}

int main(void) {
    test_type_table();
    test_half();
    test_q8_0();
    test_q4_0();
    test_dequantize();
    return test_status("test_tensor_types");
}
