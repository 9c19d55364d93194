/* pack.c -- packing Q8_0 and Q4_0 weights into the panel layout (tensor.h).
 *
 * The engine packs a model's matrices once, when it starts, if the kernels
 * in use prefer panels; the matmul driver then dispatches on the layout.
 * Packing moves bytes only: Q8_0 quants gain 128 (so the AVX-512 kernel
 * loads them as vpdpbusd's unsigned operand), Q4_0 bytes keep their two
 * nibbles, and the scales are copied. */
#include "tensor_internal.h"

#include <string.h>

/* Bytes of one panel: every block's quants, then every block's scales,
 * padded so each panel starts 64-byte aligned. */
static size_t panel_bytes(enum tensor_type type, int cols) {
    size_t blocks = (size_t)(cols / TENSOR_QK);
    return (blocks * (tensor_panel_quants(type) + TENSOR_PANEL_SCALES) + 63) & ~(size_t)63;
}

int tensor_panels_preferred(enum tensor_type type) {
    const struct tensor_kernels *k = tensor_kernels_current();
    return (type == TENSOR_Q8_0 && k->panels_preferred) ||
           (type == TENSOR_Q4_0 && k->q4_0_panels_preferred);
}

size_t tensor_panels_bytes(const struct tensor_matrix *w) {
    if ((w->type != TENSOR_Q8_0 && w->type != TENSOR_Q4_0) || w->layout != TENSOR_LAYOUT_ROWS ||
        w->rows <= 0 || w->cols <= 0 || w->cols % TENSOR_QK != 0)
        return 0;
    size_t panels = (size_t)(w->rows + TENSOR_PANEL_ROWS - 1) / TENSOR_PANEL_ROWS;
    return panels * panel_bytes(w->type, w->cols);
}

/* Row r's block j: its scale, and its quant bytes (Q8_0: 32 quants; Q4_0:
 * 16 bytes of two nibbles); NULL for rows past the end. */
static const uint8_t *block_quants(const struct tensor_matrix *w, int r, int j, uint16_t *d) {
    *d = 0;
    if (r >= w->rows) return NULL;
    const char *row = (const char *)w->data + (size_t)r * w->row_stride;
    if (w->type == TENSOR_Q4_0) {
        const struct tensor_block_q4_0 *block = (const struct tensor_block_q4_0 *)row + j;
        *d = block->d;
        return block->qs;
    }
    const struct tensor_block_q8_0 *block = (const struct tensor_block_q8_0 *)row + j;
    *d = block->d;
    return (const uint8_t *)block->qs;
}

/* Block j of rows 16p .. 16p+15 into its panel: quant bytes in groups of
 * four per row, then the scales (rows past the end: zero bytes, zero
 * scale). */
static void pack_block(uint8_t *panel, const struct tensor_matrix *w, int p, int j) {
    int blocks = w->cols / TENSOR_QK;
    size_t quant_bytes = tensor_panel_quants(w->type);
    int groups = (int)quant_bytes / 64;
    /* xor 0x80 in each byte adds 128 to an int8 (Q8_0 only) */
    uint32_t flip = w->type == TENSOR_Q8_0 ? 0x80808080u : 0;
    uint8_t *quants = panel + (size_t)j * quant_bytes;
    uint8_t *scales = panel + (size_t)blocks * quant_bytes + (size_t)j * TENSOR_PANEL_SCALES;
    for (int m = 0; m < TENSOR_PANEL_ROWS; m++) {
        uint16_t d;
        const uint8_t *bytes = block_quants(w, p * TENSOR_PANEL_ROWS + m, j, &d);
        for (int g = 0; g < groups; g++) {
            uint32_t four = 0;
            if (bytes) memcpy(&four, bytes + 4 * g, sizeof(four));
            four ^= flip;
            memcpy(quants + g * 64 + m * 4, &four, sizeof(four));
        }
        memcpy(scales + 2 * m, &d, sizeof(d));
    }
}

struct tensor_matrix tensor_pack_panels(void *out, const struct tensor_matrix *w) {
    int blocks = w->cols / TENSOR_QK;
    int panels = (w->rows + TENSOR_PANEL_ROWS - 1) / TENSOR_PANEL_ROWS;
    size_t stride = panel_bytes(w->type, w->cols);
    memset(out, 0, (size_t)panels * stride);
    for (int p = 0; p < panels; p++)
        for (int j = 0; j < blocks; j++) pack_block((uint8_t *)out + (size_t)p * stride, w, p, j);
    struct tensor_matrix packed = *w;
    packed.data = out;
    packed.row_stride = stride;
    packed.layout = TENSOR_LAYOUT_PANELS;
    packed.scales_offset = (size_t)blocks * tensor_panel_quants(w->type);
    return packed;
}
