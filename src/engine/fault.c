/* fault.c -- fault injection for tests and benchmarks (off by default).
 *
 * A fault is "KIND:RANK:STEP": when rank RANK enters the collectives of
 * step STEP it
 *   tag   uses a wrong collective index (its peers must report a tag
 *         mismatch, never wait),
 *   kill  raises SIGKILL (its peers must give up within their deadline),
 *   stop  raises SIGSTOP (paused: its peers must time out),
 *   stall stops making progress inside the collective, sleeping (its peers
 *         must time out; for ranks that are threads of one process).
 * The lockstep command reads it from the LOCKSTEP_FAULT environment
 * variable. */
#include "engine_internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const fault_names[] = {"none", "tag", "kill", "stop", "stall"};

int engine_fault_parse(struct engine_fault *fault, const char *spec, char *err, size_t errlen) {
    char kind[16];
    int rank, consumed = 0;
    unsigned long long step;
    memset(fault, 0, sizeof(*fault));
    if (!spec || !*spec) return 0;
    if (sscanf(spec, "%15[a-z]:%d:%llu%n", kind, &rank, &step, &consumed) == 3 &&
        spec[consumed] == '\0' && rank >= 0) {
        for (int k = ENGINE_FAULT_TAG; k <= ENGINE_FAULT_STALL; k++)
            if (!strcmp(kind, fault_names[k])) {
                *fault = (struct engine_fault){(enum engine_fault_kind)k, rank, step};
                return 0;
            }
    }
    snprintf(err, errlen, "fault '%s': expected KIND:RANK:STEP with KIND tag, kill, stop or stall",
             spec);
    return -1;
}

/* DELAY: a sleep of 0..delay_ms, drawn from the step and index (no state,
 * so every rank and run can reproduce it). */
static void delay_collective(const struct engine *engine, uint32_t index) {
    uint64_t x = (engine->step * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)index * 0xBF58476D1CE4E5B9ull);
    x ^= x >> 31;
    long ns = (long)(x % ((uint64_t)engine->delay_ms * 1000000u + 1u));
    struct timespec nap = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&nap, NULL);
}

uint32_t engine_fault_apply(const struct engine *engine, uint32_t index) {
    const struct engine_fault *f = &engine->fault;
    int rank = engine_rank(engine);
    if (engine->delay_ms > 0 && engine->step < engine->delay_until) delay_collective(engine, index);
    if (f->kind == ENGINE_FAULT_NONE || f->step != engine->step || rank != f->rank) return index;
    switch (f->kind) {
    case ENGINE_FAULT_TAG:
        return index + 1000;
    case ENGINE_FAULT_KILL:
        raise(SIGKILL);
        break;
    case ENGINE_FAULT_STOP:
        raise(SIGSTOP);
        break;
    case ENGINE_FAULT_STALL:
        for (;;) {
            struct timespec nap = {1, 0};
            nanosleep(&nap, NULL);
        }
    default:
        break;
    }
    return index;
}
