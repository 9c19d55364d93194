/* rope.c -- the rotary frequencies of a model's pairs, with the file's
 * frequency scaling: the engine computes them once at start and turns
 * every position by them. */
#include "model/model.h"

#include <math.h>

/* Llama 3.1's rule (Meta's reference code, which llama.cpp's converter
 * bakes into rope_freqs.weight): wavelengths shorter than the original
 * context / high_factor keep their frequency, longer than the original
 * context / low_factor are divided by the factor, and those between move
 * smoothly from one to the other. */
#define LLAMA3_LOW_FREQ_FACTOR  1.0f
#define LLAMA3_HIGH_FREQ_FACTOR 4.0f

static float llama3_frequency(float frequency, float factor, int original_context) {
    const float pi = 3.14159265358979f;
    float wavelength = 2.0f * pi / frequency;
    float low_wavelength = (float)original_context / LLAMA3_LOW_FREQ_FACTOR;
    float high_wavelength = (float)original_context / LLAMA3_HIGH_FREQ_FACTOR;
    if (wavelength < high_wavelength) return frequency;
    if (wavelength > low_wavelength) return frequency / factor;
    float smooth = ((float)original_context / wavelength - LLAMA3_LOW_FREQ_FACTOR) /
                   (LLAMA3_HIGH_FREQ_FACTOR - LLAMA3_LOW_FREQ_FACTOR);
    return (1.0f - smooth) * frequency / factor + smooth * frequency;
}

void model_rope_frequencies(const struct model *m, float *out) {
    const struct model_config *c = &m->config;
    for (int j = 0; j < c->rope_dim / 2; j++) {
        float frequency = powf(c->rope_base, -2.0f * (float)j / (float)c->rope_dim);
        if (m->rope_freqs)
            frequency /= m->rope_freqs[j];
        else if (c->rope_scaling == MODEL_ROPE_SCALING_LLAMA3)
            frequency = llama3_frequency(frequency, c->rope_factor, c->rope_original_context);
        if (c->rope_scaling == MODEL_ROPE_SCALING_LINEAR) frequency /= c->rope_factor;
        out[j] = frequency;
    }
}
