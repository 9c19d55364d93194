/* test_tensor_parts.c -- tensor_matmul_parts: part p of the product is bit
 * for bit a tensor_matmul over the p-th column slice (what a
 * tensor-parallel rank holding those columns computes), for every weight
 * type, instruction set, part count and batch size; the parts add up to
 * the whole product within float rounding; bad splits are refused. */
#include "tensor/tensor.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROWS      40
#define COLS      256
#define MAX_BATCH 9

/* A (ROWS, COLS) matrix of type with deterministic values. */
static void *make_weights(enum tensor_type type) {
    size_t row_bytes = tensor_row_bytes(type, COLS);
    char *data = malloc(ROWS * row_bytes);
    float row[COLS];
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < COLS; i++) row[i] = (float)((r * 131 + i * 29) % 97 - 48) / 37.0f;
        void *out = data + r * row_bytes;
        if (type == TENSOR_F32) memcpy(out, row, sizeof(row));
        if (type == TENSOR_F16)
            for (int i = 0; i < COLS; i++) ((uint16_t *)out)[i] = tensor_fp32_to_fp16(row[i]);
        if (type == TENSOR_Q8_0) tensor_quantize_q8_0(out, row, COLS);
        if (type == TENSOR_Q4_0) tensor_quantize_q4_0(out, row, COLS);
    }
    return data;
}

static void check_type(struct tensor_pool *pool, enum tensor_type type) {
    void *data = make_weights(type);
    struct tensor_matrix w = tensor_matrix_make(data, type, ROWS, COLS);
    float x[MAX_BATCH * COLS], slice_x[MAX_BATCH * COLS];
    float parts[8 * MAX_BATCH * ROWS], slice_out[MAX_BATCH * ROWS], whole[MAX_BATCH * ROWS];
    for (int i = 0; i < MAX_BATCH * COLS; i++) x[i] = (float)((i * 17) % 23 - 11) / 7.0f;
    for (int n_parts = 1; n_parts <= 8; n_parts *= 2) {
        for (int batch = 1; batch <= MAX_BATCH; batch += 4) {
            int pc = COLS / n_parts;
            CHECK(tensor_matmul_parts(pool, parts, &w, x, batch, n_parts) == 0);
            CHECK(tensor_matmul(pool, whole, &w, x, batch) == 0);
            for (int p = 0; p < n_parts; p++) {
                struct tensor_matrix slice = w;
                slice.data = (const char *)data + tensor_row_bytes(type, (int64_t)p * pc);
                slice.cols = pc;
                for (int b = 0; b < batch; b++)
                    memcpy(slice_x + b * pc, x + b * COLS + p * pc, sizeof(float) * pc);
                CHECK(tensor_matmul(pool, slice_out, &slice, slice_x, batch) == 0);
                CHECK_MSG(memcmp(parts + (size_t)p * batch * ROWS, slice_out,
                                 sizeof(float) * batch * ROWS) == 0,
                          "%s %s: part %d of %d, batch %d differs from the slice's matmul",
                          tensor_isa_name(tensor_isa_current()), tensor_type_name(type), p, n_parts,
                          batch);
            }
            for (int i = 0; i < batch * ROWS; i++) {
                float sum = 0;
                for (int p = 0; p < n_parts; p++) sum += parts[p * batch * ROWS + i];
                CHECK_MSG(fabsf(sum - whole[i]) <= 1e-4f * (1 + fabsf(whole[i])),
                          "%s: parts add to %g, whole is %g", tensor_type_name(type), sum,
                          whole[i]);
            }
        }
    }
    /* a part that is not whole blocks (quantized) or not an equal split */
    CHECK(tensor_matmul_parts(pool, parts, &w, x, 1, 3) == -1);
    if (type == TENSOR_Q8_0 || type == TENSOR_Q4_0)
        CHECK(tensor_matmul_parts(pool, parts, &w, x, 1, 16) == -1);
    free(data);
}

int main(void) {
    static const enum tensor_type types[] = {TENSOR_F32, TENSOR_F16, TENSOR_Q8_0, TENSOR_Q4_0};
    struct tensor_pool *pool = tensor_pool_create(2);
    for (int isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT; isa++) {
        if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) check_type(pool, types[t]);
    }
    tensor_pool_free(pool);
    return test_status("test_tensor_parts");
}
