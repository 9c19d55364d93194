/* merge.c -- the pair-merging loop both encoders share.
 *
 * SentencePiece BPE (scores) and GPT-2 BPE (merge ranks) differ only in how
 * a pair of adjacent symbols is scored, so the loop is written once: a
 * linked list of symbols and a binary max-heap of candidate pairs. Popping
 * the best pair, merging it and scoring the two new pairs it creates costs
 * O(log n), so a prompt of n characters is merged in O(n log n) instead of
 * the O(n^2) rescans of llama2.c. A pair whose symbols changed since it was
 * scored is stale: its recorded length no longer matches and it is skipped
 * (lengths only grow, or drop to 0 when merged away). */
#include "tokenizer/tokenizer_internal.h"

/* 1 if bigram a should merge before b: higher score, then leftmost. */
static int bigram_before(const struct tokenizer_bigram *a, const struct tokenizer_bigram *b) {
    if (a->score != b->score) return a->score > b->score;
    return a->left < b->left;
}

/* Heap state for one merge run. */
struct bigram_heap {
    struct tokenizer_bigram *items; /* (3 * symbols) */
    int n;
};

static void heap_push(struct bigram_heap *heap, struct tokenizer_bigram item) {
    int i = heap->n++;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!bigram_before(&item, &heap->items[parent])) break;
        heap->items[i] = heap->items[parent];
        i = parent;
    }
    heap->items[i] = item;
}

static struct tokenizer_bigram heap_pop(struct bigram_heap *heap) {
    struct tokenizer_bigram top = heap->items[0];
    struct tokenizer_bigram last = heap->items[--heap->n];
    int i = 0;
    for (;;) {
        int child = 2 * i + 1;
        if (child >= heap->n) break;
        if (child + 1 < heap->n && bigram_before(&heap->items[child + 1], &heap->items[child]))
            child++;
        if (!bigram_before(&heap->items[child], &last)) break;
        heap->items[i] = heap->items[child];
        i = child;
    }
    if (heap->n > 0) heap->items[i] = last;
    return top;
}

/* Scores the pair (left, left's next) and queues it if it may merge. */
static void try_pair(struct bigram_heap *heap, const char *text,
                     const struct tokenizer_symbol *symbols, int left, tokenizer_pair_scorer scorer,
                     const void *ctx) {
    if (left < 0 || symbols[left].next < 0) return;
    int right = symbols[left].next;
    float score;
    if (!scorer(ctx, text, symbols[left].start, symbols[left].len, symbols[right].len, &score))
        return;
    struct tokenizer_bigram pair = {left, right, score, symbols[left].len + symbols[right].len};
    heap_push(heap, pair);
}

void tokenizer_merge(const char *text, struct tokenizer_symbol *symbols, int n,
                     struct tokenizer_bigram *heap_items, tokenizer_pair_scorer scorer,
                     const void *ctx) {
    struct bigram_heap heap = {heap_items, 0};
    for (int i = 0; i + 1 < n; i++) try_pair(&heap, text, symbols, i, scorer, ctx);
    while (heap.n > 0) {
        struct tokenizer_bigram best = heap_pop(&heap);
        struct tokenizer_symbol *left = &symbols[best.left];
        struct tokenizer_symbol *right = &symbols[best.right];
        if (left->len == 0 || right->len == 0 || left->len + right->len != best.len) continue;
        left->len += right->len;
        right->len = 0;
        left->next = right->next;
        if (right->next >= 0) symbols[right->next].prev = best.left;
        try_pair(&heap, text, symbols, left->prev, scorer, ctx);
        try_pair(&heap, text, symbols, best.left, scorer, ctx);
    }
}
