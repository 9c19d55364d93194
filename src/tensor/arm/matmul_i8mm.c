/* matmul_i8mm.c -- Q8_0 and Q4_0 products for batches with the armv8.6-a
 * int8 matrix multiply (smmla: a 2x8 by 8x2 product of bytes added to a
 * 2x2 tile of 32-bit sums). Each smmla takes 8 quants of two weight rows
 * and of two input rows, so a block's four exact dots (two rows by two
 * inputs) take four of them; each dot then takes the scalar reference's
 * float step (tensor_add_block), blocks in order, so every element has
 * the bits of the scalar and dotprod kernels. An odd last row or input
 * pairs with itself. A batch of one would leave half of every smmla idle:
 * it goes to the dotprod kernel. */
#include "matmul_neon.h"

/* A block's 32 quants as two halves: elements 0-15 and 16-31. */
typedef void (*block_halves_fn)(const uint8_t *quants, int8x16_t *low, int8x16_t *high);

static ALWAYS_INLINE void q8_0_halves(const uint8_t *quants, int8x16_t *low, int8x16_t *high) {
    *low = vld1q_s8((const int8_t *)quants);
    *high = vld1q_s8((const int8_t *)quants + 16);
}

/* The 8-byte rows of smmla's operands out of two sets of halves: operand
 * c holds elements 8c .. 8c + 7 of a, then the same of b. */
static ALWAYS_INLINE void pair_rows(int8x16_t out[4], int8x16_t a_low, int8x16_t a_high,
                                    int8x16_t b_low, int8x16_t b_high) {
    int64x2_t al = vreinterpretq_s64_s8(a_low), ah = vreinterpretq_s64_s8(a_high);
    int64x2_t bl = vreinterpretq_s64_s8(b_low), bh = vreinterpretq_s64_s8(b_high);
    out[0] = vreinterpretq_s8_s64(vzip1q_s64(al, bl));
    out[1] = vreinterpretq_s8_s64(vzip2q_s64(al, bl));
    out[2] = vreinterpretq_s8_s64(vzip1q_s64(ah, bh));
    out[3] = vreinterpretq_s8_s64(vzip2q_s64(ah, bh));
}

/* Rows [row_begin, row_end) of a product with blocks of block_bytes (an
 * fp16 scale, then the quants halves reads), two rows and two inputs at
 * a time. The tile's lanes are (row r, input b), (r, b + 1), (r + 1, b),
 * (r + 1, b + 1). */
static ALWAYS_INLINE void pair_matmul(const struct tensor_matmul_job *job, int row_begin,
                                      int row_end, size_t block_bytes, block_halves_fn halves) {
    const struct tensor_matrix *w = job->w;
    int blocks = w->cols / TENSOR_QK;
    for (int r0 = row_begin; r0 < row_end; r0 += 2) {
        int r1 = r0 + 1 < row_end ? r0 + 1 : r0;
        const uint8_t *row0 = (const uint8_t *)w->data + (size_t)r0 * w->row_stride;
        const uint8_t *row1 = (const uint8_t *)w->data + (size_t)r1 * w->row_stride;
        for (int b0 = 0; b0 < job->batch; b0 += 2) {
            int b1 = b0 + 1 < job->batch ? b0 + 1 : b0;
            const int8_t *x0 = job->xq->qs + (size_t)b0 * w->cols;
            const int8_t *x1 = job->xq->qs + (size_t)b1 * w->cols;
            const float *xd0 = job->xq->d + (size_t)b0 * blocks;
            const float *xd1 = job->xq->d + (size_t)b1 * blocks;
            float32x4_t acc = vdupq_n_f32(0.0f);
            for (int j = 0; j < blocks; j++) {
                const uint8_t *block0 = row0 + (size_t)j * block_bytes;
                const uint8_t *block1 = row1 + (size_t)j * block_bytes;
                int8x16_t w0_low, w0_high, w1_low, w1_high, wp[4], xp[4];
                halves(block0 + 2, &w0_low, &w0_high);
                halves(block1 + 2, &w1_low, &w1_high);
                pair_rows(wp, w0_low, w0_high, w1_low, w1_high);
                const int8_t *xj0 = x0 + (size_t)j * TENSOR_QK, *xj1 = x1 + (size_t)j * TENSOR_QK;
                pair_rows(xp, vld1q_s8(xj0), vld1q_s8(xj0 + 16), vld1q_s8(xj1), vld1q_s8(xj1 + 16));
                int32x4_t dots = vdupq_n_s32(0);
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) dots = vmmlaq_s32(dots, wp[c], xp[c]);
                /* tensor_add_block per lane: scale = d_w * d_x, then
                 * acc + dot * scale */
                uint16_t d0, d1;
                memcpy(&d0, block0, sizeof(d0));
                memcpy(&d1, block1, sizeof(d1));
                float32x4_t dw =
                    vcvt_f32_f16(vreinterpret_f16_u16(vcreate_u16(d0 | (uint32_t)d1 << 16)));
                dw = vzip1q_f32(dw, dw); /* d_w of rows r, r, r + 1, r + 1 */
                float32x4_t dx = vzip1q_f32(vdupq_n_f32(xd0[j]), vdupq_n_f32(xd1[j]));
                acc = vaddq_f32(acc, vmulq_f32(vcvtq_f32_s32(dots), vmulq_f32(dw, dx)));
            }
            job->out[(size_t)b0 * w->rows + r0] = vgetq_lane_f32(acc, 0);
            job->out[(size_t)b1 * w->rows + r0] = vgetq_lane_f32(acc, 1);
            job->out[(size_t)b0 * w->rows + r1] = vgetq_lane_f32(acc, 2);
            job->out[(size_t)b1 * w->rows + r1] = vgetq_lane_f32(acc, 3);
        }
    }
}

void tensor_matmul_q8_0_i8mm(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch) {
    if (job->batch == 1) {
        tensor_matmul_q8_0_dotprod(job, row_begin, row_end, scratch);
        return;
    }
    pair_matmul(job, row_begin, row_end, sizeof(struct tensor_block_q8_0), q8_0_halves);
}

void tensor_matmul_q4_0_i8mm(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch) {
    if (job->batch == 1) {
        tensor_matmul_q4_0_dotprod(job, row_begin, row_end, scratch);
        return;
    }
    pair_matmul(job, row_begin, row_end, sizeof(struct tensor_block_q4_0), unpack_q4_0);
}
