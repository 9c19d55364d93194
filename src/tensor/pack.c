/* pack.c -- packing Q8_0 weights into the panel layout (tensor.h).
 *
 * The engine packs a model's matrices once, when it starts, if the kernels
 * in use prefer panels; the matmul driver then dispatches on the layout.
 * Packing moves bytes only: the quants gain 128 (so the AVX-512 kernel
 * loads them as vpdpbusd's unsigned operand) and the scales are copied. */
#include "tensor_internal.h"

#include <string.h>

/* Bytes of one panel: every block's quants, then every block's scales,
 * padded so each panel starts 64-byte aligned. */
static size_t panel_bytes(int cols) {
    size_t blocks = (size_t)(cols / TENSOR_QK);
    return (blocks * (TENSOR_PANEL_QUANTS + TENSOR_PANEL_SCALES) + 63) & ~(size_t)63;
}

int tensor_panels_preferred(enum tensor_type type) {
    return type == TENSOR_Q8_0 && tensor_kernels_current()->panels_preferred;
}

size_t tensor_panels_bytes(const struct tensor_matrix *w) {
    if (w->type != TENSOR_Q8_0 || w->layout != TENSOR_LAYOUT_ROWS || w->rows <= 0 || w->cols <= 0 ||
        w->cols % TENSOR_QK != 0)
        return 0;
    size_t panels = (size_t)(w->rows + TENSOR_PANEL_ROWS - 1) / TENSOR_PANEL_ROWS;
    return panels * panel_bytes(w->cols);
}

/* Block j of rows 16p .. 16p+15 into its panel: quants in groups of four
 * per row, then the scales (rows past the end: zero weights, zero scale). */
static void pack_block(uint8_t *panel, const struct tensor_matrix *w, int p, int j) {
    int blocks = w->cols / TENSOR_QK;
    uint8_t *quants = panel + (size_t)j * TENSOR_PANEL_QUANTS;
    uint8_t *scales =
        panel + (size_t)blocks * TENSOR_PANEL_QUANTS + (size_t)j * TENSOR_PANEL_SCALES;
    for (int m = 0; m < TENSOR_PANEL_ROWS; m++) {
        int r = p * TENSOR_PANEL_ROWS + m;
        uint16_t d = 0;
        const struct tensor_block_q8_0 *block = NULL;
        if (r < w->rows) {
            block = (const struct tensor_block_q8_0 *)((const char *)w->data +
                                                       (size_t)r * w->row_stride) +
                    j;
            d = block->d;
        }
        /* four quants at a time; xor 0x80 in each byte adds 128 to an int8 */
        for (int g = 0; g < TENSOR_QK / 4; g++) {
            uint32_t four = 0;
            if (block) memcpy(&four, block->qs + 4 * g, sizeof(four));
            four ^= 0x80808080u;
            memcpy(quants + g * 64 + m * 4, &four, sizeof(four));
        }
        memcpy(scales + 2 * m, &d, sizeof(d));
    }
}

struct tensor_matrix tensor_pack_panels(void *out, const struct tensor_matrix *w) {
    int blocks = w->cols / TENSOR_QK;
    int panels = (w->rows + TENSOR_PANEL_ROWS - 1) / TENSOR_PANEL_ROWS;
    size_t stride = panel_bytes(w->cols);
    memset(out, 0, (size_t)panels * stride);
    for (int p = 0; p < panels; p++)
        for (int j = 0; j < blocks; j++) pack_block((uint8_t *)out + (size_t)p * stride, w, p, j);
    struct tensor_matrix packed = *w;
    packed.data = out;
    packed.row_stride = stride;
    packed.layout = TENSOR_LAYOUT_PANELS;
    packed.scales_offset = (size_t)blocks * TENSOR_PANEL_QUANTS;
    return packed;
}
