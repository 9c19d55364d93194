/* pack.c -- packing weights of the panel types (Q8_0, Q4_0: the type
 * table's panel traits) into the panel layout (tensor.h).
 *
 * The engine packs a model's matrices once, when it starts, if the kernels
 * in use prefer panels for the type; the matmul driver then dispatches on
 * the layout. Packing moves bytes only: each quant byte takes its type's
 * xor, and the scales are copied. */
#include "tensor_internal.h"

#include <string.h>

/* Bytes of one panel: every block's quants, then every block's scales,
 * padded so each panel starts 64-byte aligned. */
static size_t panel_bytes(enum tensor_type type, int cols) {
    size_t blocks = (size_t)(cols / TENSOR_QK);
    return (blocks * (tensor_panel_quants(type) + TENSOR_PANEL_SCALES) + 63) & ~(size_t)63;
}

int tensor_panels_preferred(enum tensor_type type) {
    if ((int)type < 0 || (int)type >= TENSOR_TYPE_COUNT) return 0;
    return tensor_kernels_current()->types[type].panels_preferred;
}

size_t tensor_panels_bytes(const struct tensor_matrix *w) {
    if (!tensor_panel_quants(w->type) || w->layout != TENSOR_LAYOUT_ROWS || w->rows <= 0 ||
        w->cols <= 0 || w->cols % TENSOR_QK != 0)
        return 0;
    size_t panels = (size_t)(w->rows + TENSOR_PANEL_ROWS - 1) / TENSOR_PANEL_ROWS;
    return panels * panel_bytes(w->type, w->cols);
}

/* Row r's block j: its scale, and its quant bytes (a panel type's block is
 * an fp16 scale, then the quants); NULL for rows past the end. */
static const uint8_t *block_quants(const struct tensor_matrix *w, int r, int j, uint16_t *d) {
    *d = 0;
    if (r >= w->rows) return NULL;
    const uint8_t *block = (const uint8_t *)w->data + (size_t)r * w->row_stride +
                           (size_t)j * tensor_type_traits((int)w->type)->block_bytes;
    memcpy(d, block, sizeof(*d));
    return block + sizeof(*d);
}

/* Block j of rows 16p .. 16p+15 into its panel: quant bytes in groups of
 * four per row, then the scales (rows past the end: zero bytes, zero
 * scale). */
static void pack_block(uint8_t *panel, const struct tensor_matrix *w, int p, int j) {
    int blocks = w->cols / TENSOR_QK;
    size_t quant_bytes = tensor_panel_quants(w->type);
    int groups = (int)quant_bytes / 64;
    uint32_t flip = tensor_type_traits((int)w->type)->panel_flip * 0x01010101u;
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
