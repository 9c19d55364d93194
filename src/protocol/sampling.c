/* sampling.c -- a request's sampling parameters: their defaults and the one
 * rule for their ranges.
 *
 * The gateway checks a client's values with runner_check_sampling before it
 * accepts a request, and the protocol's encoder and decoder refuse exactly
 * what it refuses, so a value one side takes can never be dropped by the
 * other (a top_p of 0 once passed the gateway, failed to encode and left
 * its client waiting). */
#include "protocol/protocol.h"

#include <math.h>
#include <stdio.h>

void runner_sampling_default(struct runner_sampling *s) {
    *s = (struct runner_sampling){.temperature = 0.8f,
                                  .top_k = 40,
                                  .top_p = 0.95f,
                                  .min_p = 0.05f,
                                  .repeat_penalty = 1.0f,
                                  .repeat_last_n = 64,
                                  .seed = 0x5eed};
}

/* Fills field and err; returns -1. */
static int out_of_range(char *field, size_t field_size, const char *name, char *err, size_t errlen,
                        double value, const char *range) {
    snprintf(field, field_size, "%s", name);
    snprintf(err, errlen, "%s %g %s", name, value, range);
    return -1;
}

int runner_check_sampling(const struct runner_sampling *s, char *field, size_t field_size,
                          char *err, size_t errlen) {
    if (!(isfinite(s->temperature) && s->temperature >= 0.0f))
        return out_of_range(field, field_size, "temperature", err, errlen, s->temperature,
                            "must be finite and >= 0");
    if (s->top_k < 0)
        return out_of_range(field, field_size, "top_k", err, errlen, s->top_k, "must be >= 0");
    if (!(s->top_p >= 0.0f && s->top_p <= 1.0f))
        return out_of_range(field, field_size, "top_p", err, errlen, s->top_p,
                            "out of range [0, 1]");
    if (!(s->min_p >= 0.0f && s->min_p <= 1.0f))
        return out_of_range(field, field_size, "min_p", err, errlen, s->min_p,
                            "out of range [0, 1]");
    if (!(isfinite(s->repeat_penalty) && s->repeat_penalty > 0.0f))
        return out_of_range(field, field_size, "repeat_penalty", err, errlen, s->repeat_penalty,
                            "must be finite and > 0");
    if (s->repeat_last_n < 0)
        return out_of_range(field, field_size, "repeat_last_n", err, errlen, s->repeat_last_n,
                            "must be >= 0");
    if (!(s->presence_penalty >= -2.0f && s->presence_penalty <= 2.0f))
        return out_of_range(field, field_size, "presence_penalty", err, errlen, s->presence_penalty,
                            "out of range [-2, 2]");
    if (!(s->frequency_penalty >= -2.0f && s->frequency_penalty <= 2.0f))
        return out_of_range(field, field_size, "frequency_penalty", err, errlen,
                            s->frequency_penalty, "out of range [-2, 2]");
    return 0;
}
