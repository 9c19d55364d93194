/* isa.c -- the instruction sets (TENSOR_ISA_LIST), which one is in use, and
 * the resolved kernel tables.
 *
 * Each architecture's folder (x86/, arm/) detects what the CPU supports
 * (tensor_arch_detect) and defines its sets' tables (tensor_arch_kernels),
 * which name only the kernels a set does better than its parent. Here each
 * table is resolved once: every op and every group of a type's row it
 * leaves out is its parent's, down to the scalar reference. The set in use
 * is the best one detected, capped for the whole process by the
 * environment variable LOCKSTEP_ISA (a name on the best set's chain), so
 * one machine can run and measure every path it has; tensor_isa_select
 * forces one (tests compare paths). The public kernels in ops.c and
 * matmul.c go through it. */
#include "tensor_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define ISA_NAME(id, name, parent)   name,
#define ISA_PARENT(id, name, parent) TENSOR_ISA_##parent,
static const char *const isa_names[TENSOR_ISA_COUNT] = {TENSOR_ISA_LIST(ISA_NAME)};
static const enum tensor_isa isa_parents[TENSOR_ISA_COUNT] = {TENSOR_ISA_LIST(ISA_PARENT)};
#undef ISA_NAME
#undef ISA_PARENT

const char *tensor_isa_name(enum tensor_isa isa) {
    return (int)isa >= 0 && isa < TENSOR_ISA_COUNT ? isa_names[isa] : "unknown";
}

int tensor_isa_parse(const char *name) {
    for (int i = 0; name && i < TENSOR_ISA_COUNT; i++)
        if (strcmp(name, isa_names[i]) == 0) return i;
    return -1;
}

int tensor_isa_built(enum tensor_isa isa) {
    return isa == TENSOR_ISA_SCALAR ||
           ((int)isa > 0 && isa < TENSOR_ISA_COUNT && tensor_arch_kernels(isa) != NULL);
}

/* 1 if isa is best or a set best falls back through. */
static int on_chain(enum tensor_isa best, enum tensor_isa isa) {
    for (enum tensor_isa at = best;; at = isa_parents[at]) {
        if (at == isa) return 1;
        if (at == TENSOR_ISA_SCALAR) return 0;
    }
}

/* ---- resolved tables ---- */

static struct tensor_kernels resolved[TENSOR_ISA_COUNT];
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

/* A type's row: each group from own where own defines it, else from parent. */
static struct tensor_type_kernels resolve_row(struct tensor_type_kernels own,
                                              const struct tensor_type_kernels *parent) {
    struct tensor_type_kernels row = *parent;
    if (own.matmul) {
        row.matmul = own.matmul;
        row.input = own.input;
        row.input_offset = own.input_offset;
        row.scratch = own.scratch;
    }
    if (own.matmul_panels) {
        row.matmul_panels = own.matmul_panels;
        row.matmul_panels_parts = own.matmul_panels_parts;
        row.panels_preferred = own.panels_preferred;
        row.panels_interleaved = own.panels_interleaved;
        row.panels_offset = own.panels_offset;
    }
    if (own.row_dot) {
        row.row_dot = own.row_dot;
        row.row_dots = own.row_dots;
    }
    return row;
}

/* own with every gap filled from parent (already resolved). */
static struct tensor_kernels resolve_table(const struct tensor_kernels *own,
                                           const struct tensor_kernels *parent) {
    struct tensor_kernels k = *own;
#define FILL(op)                                                                                   \
    if (!k.op) k.op = parent->op
    FILL(quantize_x);
    FILL(rmsnorm);
    FILL(softmax);
    FILL(exp_weights);
    FILL(swiglu);
    FILL(rope_turn_vectors);
    FILL(dot);
    FILL(axpy);
    FILL(scale);
    FILL(dot_columns);
    FILL(dot_q8_0_keys);
    FILL(weighted_sum);
    FILL(dot_columns_tile);
    FILL(dot_q8_0_keys_tile);
    FILL(weighted_sum_tile);
    FILL(fp16_from_fp32);
    FILL(quantize_q8_k);
#undef FILL
    for (int t = 0; t < TENSOR_TYPE_COUNT; t++)
        k.types[t] = resolve_row(own->types[t], &parent->types[t]);
    return k;
}

/* Resolves isa's table after its parent's (the list names parents first
 * only by convention, so this recurses). */
static void resolve(enum tensor_isa isa, int *done) {
    if (done[isa]) return;
    if (isa == TENSOR_ISA_SCALAR) {
        resolved[isa] = tensor_kernels_scalar;
    } else {
        const struct tensor_kernels *own = tensor_arch_kernels(isa);
        resolve(isa_parents[isa], done);
        /* a set this build has no table for is its parent's */
        resolved[isa] =
            own ? resolve_table(own, &resolved[isa_parents[isa]]) : resolved[isa_parents[isa]];
    }
    done[isa] = 1;
}

static void resolve_all(void) {
    int done[TENSOR_ISA_COUNT] = {0};
    for (int i = 0; i < TENSOR_ISA_COUNT; i++) resolve((enum tensor_isa)i, done);
}

const struct tensor_kernels *tensor_kernels_for(enum tensor_isa isa) {
    pthread_once(&resolve_once, resolve_all);
    return (int)isa >= 0 && isa < TENSOR_ISA_COUNT ? &resolved[isa] : &resolved[0];
}

/* ---- the set in use ---- */

/* The detected set capped by LOCKSTEP_ISA, when it names one on the chain. */
static enum tensor_isa capped_isa(void) {
    enum tensor_isa isa = tensor_arch_detect();
    int cap = tensor_isa_parse(getenv("LOCKSTEP_ISA"));
    if (cap >= 0 && on_chain(isa, (enum tensor_isa)cap)) isa = (enum tensor_isa)cap;
    return isa;
}

static _Atomic int best_isa = -1;                              /* cached capped_isa() */
static _Atomic(const struct tensor_kernels *) current_kernels; /* NULL until first use */

enum tensor_isa tensor_isa_best(void) {
    int isa = atomic_load_explicit(&best_isa, memory_order_relaxed);
    if (isa < 0) {
        isa = (int)capped_isa();
        atomic_store_explicit(&best_isa, isa, memory_order_relaxed);
    }
    return (enum tensor_isa)isa;
}

int tensor_isa_available(enum tensor_isa isa) {
    return (int)isa >= 0 && isa < TENSOR_ISA_COUNT && on_chain(tensor_isa_best(), isa);
}

const struct tensor_kernels *tensor_kernels_current(void) {
    const struct tensor_kernels *k = atomic_load_explicit(&current_kernels, memory_order_acquire);
    if (!k) {
        k = tensor_kernels_for(tensor_isa_best());
        atomic_store_explicit(&current_kernels, k, memory_order_release);
    }
    return k;
}

int tensor_isa_select(enum tensor_isa isa) {
    if (!tensor_isa_available(isa)) return -1;
    atomic_store_explicit(&current_kernels, tensor_kernels_for(isa), memory_order_release);
    return 0;
}

enum tensor_isa tensor_isa_current(void) {
    return tensor_kernels_current()->isa;
}
