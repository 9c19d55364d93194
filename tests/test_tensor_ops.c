/* test_tensor_ops.c -- RMS norm, softmax, SwiGLU, dot, axpy on every
 * instruction set this CPU has, against double-precision references
 * (relative tolerance 1e-5 of the value, or of the sum of |terms| for
 * reductions), for lengths that exercise every vector tail; determinism of
 * dot for a given n; and rotary embedding (NORM and NEOX, partial rotary)
 * against rotations computed here in double, every instruction set's turn
 * bit for bit as the scalar one; the softmax weights of tensor_exp_weights
 * on every instruction set bit for bit as the scalar ones (exponents from
 * the underflow to the overflow, with infinities and NaN), within 4 ulp of
 * expf, 0 below the floor, and the shift and divisor applied. */
#include "tensor/tensor.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 88172645463325252ULL;

static float random_float(float scale) {
    return test_random_float(&rng_state) * scale;
}

static const int lengths[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 768, 2048};
#define LENGTHS (int)(sizeof(lengths) / sizeof(lengths[0]))
#define MAX_N   2048

static int close_to(double got, double want, double scale) {
    return fabs(got - want) <= 1e-5 * scale + 1e-30;
}

static void test_rmsnorm(const char *isa, int n) {
    float x[MAX_N] = {0}, weight[MAX_N] = {0}, out[MAX_N], in_place[MAX_N];
    for (int i = 0; i < n; i++) {
        x[i] = random_float(3.0f);
        weight[i] = random_float(2.0f);
    }
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)x[i] * x[i];
    double scale = 1.0 / sqrt(sum / n + 1e-5);
    tensor_rmsnorm(out, x, weight, n, 1e-5f);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double want = weight[i] * (x[i] * scale);
        if (!close_to(out[i], want, fabs(want))) bad++;
    }
    CHECK_MSG(bad == 0, "%s rmsnorm n=%d: %d elements off", isa, n, bad);
    memcpy(in_place, x, sizeof(float) * n);
    tensor_rmsnorm(in_place, in_place, weight, n, 1e-5f);
    CHECK_MSG(test_same_bits(in_place, out, n), "%s rmsnorm n=%d in place", isa, n);
}

static void test_softmax(const char *isa, int n, float spread) {
    float x[MAX_N] = {0};
    double want[MAX_N] = {0};
    for (int i = 0; i < n; i++) x[i] = random_float(spread);
    double max = x[0], sum = 0;
    for (int i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    for (int i = 0; i < n; i++) sum += want[i] = exp(x[i] - max);
    tensor_softmax(x, n);
    int bad = 0;
    double total = 0;
    for (int i = 0; i < n; i++) {
        total += x[i];
        if (!(fabs(x[i] - want[i] / sum) <= 1e-5 * want[i] / sum + 1e-12)) bad++;
    }
    CHECK_MSG(bad == 0, "%s softmax n=%d spread %g: %d elements off", isa, n, spread, bad);
    CHECK_MSG(fabs(total - 1.0) < 1e-5, "%s softmax n=%d sums to %.8f", isa, n, total);
}

static void test_swiglu(const char *isa, int n) {
    float gate[MAX_N] = {0}, up[MAX_N] = {0}, out[MAX_N];
    for (int i = 0; i < n; i++) {
        gate[i] = random_float(i % 5 == 0 ? 120.0f : 6.0f); /* some saturate the sigmoid */
        up[i] = random_float(2.0f);
    }
    tensor_swiglu(out, gate, up, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double want = gate[i] / (1.0 + exp(-(double)gate[i])) * up[i];
        if (!close_to(out[i], want, fabs(want))) bad++;
    }
    CHECK_MSG(bad == 0, "%s swiglu n=%d: %d elements off", isa, n, bad);
    tensor_swiglu(gate, gate, up, n); /* out may alias gate */
    CHECK_MSG(test_same_bits(gate, out, n), "%s swiglu n=%d aliased", isa, n);
}

static void test_dot_axpy(const char *isa, int n) {
    float a[MAX_N] = {0}, b[MAX_N] = {0}, y[MAX_N] = {0}, y0[MAX_N] = {0};
    double want = 0, magnitude = 0;
    for (int i = 0; i < n; i++) {
        a[i] = random_float(1.0f);
        b[i] = random_float(1.0f);
        want += (double)a[i] * b[i];
        magnitude += fabs((double)a[i] * b[i]);
        y[i] = y0[i] = random_float(1.0f);
    }
    float got = tensor_dot(a, b, n), again = tensor_dot(a, b, n);
    CHECK_MSG(close_to(got, want, magnitude), "%s dot n=%d: %.9g, want %.9g", isa, n, got, want);
    CHECK_MSG(test_same_bits(&got, &again, 1), "%s dot n=%d not repeatable", isa, n);
    tensor_axpy(y, 0.75f, a, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double expect = y0[i] + 0.75 * a[i];
        if (!close_to(y[i], expect, fabs(y0[i]) + fabs(0.75 * a[i]))) bad++;
    }
    CHECK_MSG(bad == 0, "%s axpy n=%d: %d elements off", isa, n, bad);
}

/* Rotates a copy in double the way tensor.h describes. */
static void rope_reference(double *out, const float *x, int n_heads, int head_dim, int rope_dim,
                           int pos, double base, enum tensor_rope_style style) {
    for (int i = 0; i < n_heads * head_dim; i++) out[i] = x[i];
    for (int h = 0; h < n_heads; h++) {
        for (int j = 0; j < rope_dim / 2; j++) {
            double angle = pos * pow(base, -2.0 * j / rope_dim);
            int first = style == TENSOR_ROPE_NEOX ? j : 2 * j;
            int second = style == TENSOR_ROPE_NEOX ? j + rope_dim / 2 : 2 * j + 1;
            double a = x[h * head_dim + first], b = x[h * head_dim + second];
            out[h * head_dim + first] = a * cos(angle) - b * sin(angle);
            out[h * head_dim + second] = a * sin(angle) + b * cos(angle);
        }
    }
}

/* Rotates x in place the engine's way: a position's angles, then the turn. */
static void rope(float *x, int n_heads, int head_dim, int rope_dim, int pos, float base,
                 enum tensor_rope_style style) {
    float cosines[64], sines[64], frequencies[64];
    int pairs = tensor_rope_pairs(head_dim, rope_dim);
    tensor_rope_frequencies(frequencies, pairs, rope_dim, base);
    tensor_rope_angles(cosines, sines, pairs, frequencies, pos);
    tensor_rope_turn(x, n_heads, head_dim, pairs, cosines, sines, style);
}

static void test_rope(void) {
    enum { HEADS = 3, HEAD_DIM = 64 };
    float x[HEADS * HEAD_DIM], rotated[HEADS * HEAD_DIM];
    double want[HEADS * HEAD_DIM];
    for (int i = 0; i < HEADS * HEAD_DIM; i++) x[i] = random_float(1.0f);
    const int rope_dims[] = {64, 32};
    const int positions[] = {0, 1, 7, 300};
    for (int style = 0; style < 2; style++) {
        for (int d = 0; d < 2; d++) {
            for (int p = 0; p < 4; p++) {
                memcpy(rotated, x, sizeof(x));
                rope(rotated, HEADS, HEAD_DIM, rope_dims[d], positions[p], 10000.0f,
                     (enum tensor_rope_style)style);
                rope_reference(want, x, HEADS, HEAD_DIM, rope_dims[d], positions[p], 10000.0,
                               (enum tensor_rope_style)style);
                int bad = 0;
                /* float angles: pos * freq carries ~1e-7 relative error, times |pos| */
                for (int i = 0; i < HEADS * HEAD_DIM; i++)
                    if (!(fabs(rotated[i] - want[i]) <= 2e-6 * (1 + positions[p] * 0.1))) bad++;
                CHECK_MSG(bad == 0, "rope style %d rope_dim %d pos %d: %d elements off", style,
                          rope_dims[d], positions[p], bad);
                if (rope_dims[d] < HEAD_DIM) /* the unrotated tail of each head is untouched */
                    CHECK(test_same_bits(rotated + HEAD_DIM - 1, x + HEAD_DIM - 1, 1));
            }
        }
    }
    /* the NORM layout turns the pair (0, 1) by pos radians */
    float pair[2] = {1.0f, 0.0f};
    rope(pair, 1, 2, 2, 2, 10000.0f, TENSOR_ROPE_NORM);
    CHECK(fabsf(pair[0] - cosf(2.0f)) < 1e-6f && fabsf(pair[1] - sinf(2.0f)) < 1e-6f);
}

/* Every instruction set turns heads of 40, 64 and 80 elements (pairs a
 * vector holds, and tails of 4 and 8 pairs), whole and partial rotary, NORM
 * and NEOX, bit for bit as the scalar kernel does. */
static void test_rope_isas(void) {
    enum { HEADS = 3, MAX_DIM = 80 };
    static const int dims[][2] = {{64, 64}, {64, 32}, {80, 80}, {80, 40}, {40, 40}, {40, 24}};
    float x[HEADS * MAX_DIM], want[HEADS * MAX_DIM], got[HEADS * MAX_DIM];
    float cosines[MAX_DIM / 2], sines[MAX_DIM / 2], frequencies[MAX_DIM / 2];
    for (int i = 0; i < HEADS * MAX_DIM; i++) x[i] = random_float(2.0f);
    for (int style = 0; style < 2; style++)
        for (int k = 0; k < (int)(sizeof(dims) / sizeof(dims[0])); k++) {
            int head_dim = dims[k][0], pairs = tensor_rope_pairs(head_dim, dims[k][1]);
            tensor_rope_frequencies(frequencies, pairs, dims[k][1], 10000.0f);
            tensor_rope_angles(cosines, sines, pairs, frequencies, 37);
            CHECK(tensor_isa_select(TENSOR_ISA_SCALAR) == 0);
            memcpy(want, x, sizeof(x));
            tensor_rope_turn(want, HEADS, head_dim, pairs, cosines, sines,
                             (enum tensor_rope_style)style);
            for (int isa = TENSOR_ISA_SCALAR + 1; isa < TENSOR_ISA_COUNT; isa++) {
                if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
                memcpy(got, x, sizeof(x));
                tensor_rope_turn(got, HEADS, head_dim, pairs, cosines, sines,
                                 (enum tensor_rope_style)style);
                CHECK_MSG(test_same_bits(got, want, HEADS * head_dim),
                          "%s rope style %d, head %d, rope_dim %d: not the scalar turn's bits",
                          tensor_isa_name((enum tensor_isa)isa), style, head_dim, dims[k][1]);
            }
        }
    CHECK(tensor_isa_select(tensor_isa_best()) == 0);
}

/* Distance in units in the last place between two finite floats of one sign. */
static long ulps(float a, float b) {
    int32_t x, y;
    memcpy(&x, &a, sizeof(x));
    memcpy(&y, &b, sizeof(y));
    return labs((long)x - (long)y);
}

/* x: exponents over [-90, 90] in steps of 2^-7 and random ones, then the
 * corners; the weights with shift 0, divisor 1 and no floor against expf,
 * every instruction set against the scalar bits, and a floor, shift and
 * divisor against their definition. */
static void test_exp_weights(void) {
    enum { STEPS = 180 * 128, N = STEPS + 400 + 8 };
    static float x[N], want[N], want_scaled[N], got[N];
    for (int i = 0; i < STEPS; i++) x[i] = -90.0f + (float)i / 128.0f;
    for (int i = STEPS; i < STEPS + 400; i++) x[i] = random_float(100.0f);
    const float corners[8] = {
        -__builtin_inff(), __builtin_inff(), __builtin_nanf(""), -0.0f, 88.0f, 88.001f,
        -87.33f,           -87.34f};
    memcpy(x + STEPS + 400, corners, sizeof(corners));
    CHECK(tensor_isa_select(TENSOR_ISA_SCALAR) == 0);
    tensor_exp_weights(want, x, N, 0.0f, 1.0f, -__builtin_inff());
    long worst = 0;
    int bad_range = 0;
    for (int i = 0; i < N; i++) {
        if (x[i] != x[i]) continue;
        float e = expf(x[i]);
        if (x[i] > 88.0f || x[i] < -87.33f)
            bad_range += want[i] != (x[i] > 88.0f ? __builtin_inff() : 0.0f);
        else if (e >= 0x1p-126f && ulps(want[i], e) > worst)
            worst = ulps(want[i], e);
    }
    CHECK_MSG(worst <= 4, "exp_weights: %ld ulp from expf", worst);
    CHECK_MSG(bad_range == 0, "exp_weights: %d values outside the range not 0 or +inf", bad_range);
    for (int isa = TENSOR_ISA_SCALAR + 1; isa < TENSOR_ISA_COUNT; isa++) {
        if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
        for (int n = 1; n <= 17; n++) { /* every vector tail, and nothing written past it */
            got[n] = 12345.0f;
            tensor_exp_weights(got, x + N - n, n, 0.0f, 1.0f, -__builtin_inff());
            CHECK_MSG(test_same_bits(got, want + N - n, (size_t)n) && got[n] == 12345.0f,
                      "%s: exp_weights of %d elements", tensor_isa_name((enum tensor_isa)isa), n);
        }
        tensor_exp_weights(got, x, N, 0.0f, 1.0f, -__builtin_inff());
        CHECK_MSG(test_same_bits(got, want, N), "%s: exp_weights differs from the scalar bits",
                  tensor_isa_name((enum tensor_isa)isa));
        tensor_exp_weights(got, x, N, 1.5f, 0.7f, -3.0f);
        CHECK(tensor_isa_select(TENSOR_ISA_SCALAR) == 0);
        tensor_exp_weights(want_scaled, x, N, 1.5f, 0.7f, -3.0f);
        CHECK_MSG(test_same_bits(got, want_scaled, N),
                  "%s: exp_weights (shift 1.5, divisor 0.7, floor -3) differs from the scalar bits",
                  tensor_isa_name((enum tensor_isa)isa));
    }
    /* a floor drops what lies below it; shift and divisor apply before e^ */
    for (int isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT; isa++) {
        if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
        float logits[6] = {3.0f, 1.0f, -2.0f, 2.5f, 0.0f, 0.5f}, w[6];
        tensor_exp_weights(w, logits, 6, 3.0f, 2.0f, 0.5f);
        CHECK(w[0] == 1.0f && w[2] == 0.0f && w[4] == 0.0f);
        CHECK(fabsf(w[5] - expf(-1.25f)) < 1e-6f); /* at the floor: kept */
        CHECK(fabsf(w[1] - expf(-1.0f)) < 1e-6f && fabsf(w[3] - expf(-0.25f)) < 1e-6f);
    }
    CHECK(tensor_isa_select(tensor_isa_best()) == 0);
}

int main(void) {
    test_rope_isas();
    test_exp_weights();
    for (int isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT; isa++) {
        if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
        const char *name = tensor_isa_name((enum tensor_isa)isa);
        for (int k = 0; k < LENGTHS; k++) {
            test_rmsnorm(name, lengths[k]);
            test_softmax(name, lengths[k], 5.0f);
            test_softmax(name, lengths[k], 100.0f); /* many terms underflow */
            test_swiglu(name, lengths[k]);
            test_dot_axpy(name, lengths[k]);
        }
        float one = 3.0f, equal[5] = {2, 2, 2, 2, 2};
        tensor_softmax(&one, 1);
        CHECK(one == 1.0f);
        tensor_softmax(equal, 5);
        for (int i = 0; i < 5; i++) CHECK(fabsf(equal[i] - 0.2f) < 1e-7f);
        CHECK(tensor_dot(&one, &one, 0) == 0.0f);
    }
    test_rope();
    return test_status("test_tensor_ops");
}
