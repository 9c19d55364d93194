/* fetch.c -- memory a thread's products fetch on the side (tensor.h).
 *
 * The fetch belongs to the calling thread: a pool worker running another
 * thread's products does not see it, and two threads fetching different
 * memory never share one. The kernels read it through
 * tensor_side_fetch_active (tensor_internal.h). */
#include "tensor_internal.h"

_Thread_local struct tensor_side_fetch *tensor_side_fetch_active;

void tensor_fetch_on_side(struct tensor_side_fetch *fetch) {
    tensor_side_fetch_active = fetch;
}

int64_t tensor_fetch_steps(const struct tensor_matrix *w, int n_parts) {
    if (w->layout != TENSOR_LAYOUT_PANELS || n_parts < 1) return 0;
    int64_t panels = (w->rows + TENSOR_PANEL_ROWS - 1) / TENSOR_PANEL_ROWS;
    int part_blocks = w->cols / TENSOR_QK / n_parts;
    return panels * n_parts * ((part_blocks + TENSOR_FETCH_BLOCKS - 1) / TENSOR_FETCH_BLOCKS);
}
