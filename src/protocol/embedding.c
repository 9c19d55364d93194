/* embedding.c -- embeddings on the runner protocol: the EMBEDDING frame an
 * embed request's vector comes back in, the names of the poolings a runner
 * applies, and the one normalization every side uses (the gateway after
 * OpenAI's `dimensions` cut, `lockstep embed` on the whole vector). */
#include "protocol_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const pooling_names[] = {
    [RUNNER_POOLING_NONE] = "none",
    [RUNNER_POOLING_MEAN] = "mean",
    [RUNNER_POOLING_CLS] = "cls",
    [RUNNER_POOLING_LAST] = "last",
};

const char *runner_pooling_name(enum runner_pooling pooling) {
    if ((unsigned)pooling >= sizeof(pooling_names) / sizeof(pooling_names[0])) return "unknown";
    return pooling_names[pooling];
}

int runner_pooling_parse(const char *name, enum runner_pooling *pooling) {
    for (int i = RUNNER_POOLING_MEAN; i <= RUNNER_POOLING_LAST; i++)
        if (!strcmp(name, pooling_names[i])) {
            *pooling = (enum runner_pooling)i;
            return 0;
        }
    return -1;
}

void runner_embedding_normalize(float *v, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)v[i] * v[i];
    if (sum <= 0) return;
    double scale = 1.0 / sqrt(sum);
    for (int i = 0; i < n; i++) v[i] = (float)(v[i] * scale);
}

static int check_embedding(const struct protocol_report *report,
                           const struct runner_embedding *embedding) {
    if (protocol_check_range(report, "n", embedding->n, 1, RUNNER_EMBEDDING_MAX)) return -1;
    for (int i = 0; i < embedding->n; i++)
        if (!isfinite(embedding->values[i]))
            return protocol_fail(report, "values[%d] is not finite", i);
    return 0;
}

int runner_encode_embedding(struct runner_buffer *out, const struct runner_embedding *embedding,
                            char *err, size_t errlen) {
    const struct protocol_report report = {"EMBEDDING", err, errlen};
    if (check_embedding(&report, embedding)) return -1;
    struct protocol_writer writer;
    protocol_writer_begin(&writer, out, RUNNER_MSG_EMBEDDING);
    protocol_writer_put_u64(&writer, embedding->id);
    protocol_writer_put_u32(&writer, (uint32_t)embedding->n);
    for (int i = 0; i < embedding->n; i++) protocol_writer_put_f32(&writer, embedding->values[i]);
    return protocol_writer_end(&writer, &report);
}

int runner_decode_embedding(const struct runner_frame *frame, struct runner_embedding *embedding,
                            char *err, size_t errlen) {
    struct protocol_reader reader;
    struct runner_embedding decoded = {0};
    uint32_t n;
    if (protocol_reader_begin(&reader, frame, RUNNER_MSG_EMBEDDING, err, errlen) ||
        protocol_reader_u64(&reader, "id", &decoded.id) ||
        protocol_reader_count(&reader, "n", 1, RUNNER_EMBEDDING_MAX, 4, &n))
        return -1;
    decoded.n = (int)n;
    decoded.values = malloc((size_t)n * sizeof(float));
    if (!decoded.values) return protocol_fail(&reader.report, "out of memory for %u values", n);
    for (int i = 0; i < decoded.n; i++)
        if (protocol_reader_f32(&reader, "values", &decoded.values[i])) goto fail;
    if (protocol_reader_end(&reader, "values") || check_embedding(&reader.report, &decoded))
        goto fail;
    *embedding = decoded;
    return 0;
fail:
    free(decoded.values);
    return -1;
}
