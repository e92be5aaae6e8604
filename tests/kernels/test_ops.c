/* test_ops.c: the non-matmul kernels: the scalar references against the formulas of
 * gemma-architecture.md §2.1 evaluated in double, and the SIMD attention against the scalar reference on
 * random inputs of several shapes (including head dims that are not multiples of 8 or 16). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/ops_cpu.h"
#include "quant/quant.h"
#include "ref/ops_ref.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

static void test_rmsnorm_matches_formula(void **state) {
    (void)state;
    for (int d = 1; d <= 640; d += 37) {
        float x[640], w[640], y[640];
        for (int i = 0; i < d; i++) {
            x[i] = frand() * 100.0f;
            w[i] = 1.0f + frand();
        }
        gm_ref_rmsnorm(x, y, d, w, 1e-6f);
        double ss = 0;
        for (int i = 0; i < d; i++) ss += (double)x[i] * x[i];
        const double scale = 1.0 / sqrt(ss / d + 1e-6);
        for (int i = 0; i < d; i++) assert_true(fabs(y[i] - x[i] * scale * w[i]) <= 1e-5 * (fabs(x[i] * scale * w[i]) + 1e-3));
        gm_ref_rmsnorm(x, x, d, NULL, 1e-6f); /* in place, no weight */
        for (int i = 0; i < d; i++) assert_true(fabs(x[i] - y[i] / w[i]) <= 1e-4 * (fabs(y[i] / w[i]) + 1e-3));
    }
}

/* NeoX RoPE: pairs (i, i + n_rot/2), angle = pos · scale · base^(-2i/n_rot) / factor_i; dims past n_rot pass. */
static void test_rope_matches_formula(void **state) {
    (void)state;
    const int D = 256;
    float factors[128];
    for (int i = 0; i < 128; i++) factors[i] = i == 1 ? 2.0f : i == 2 ? 1e30f : 1.0f;
    for (int n_rot = 64; n_rot <= D; n_rot *= 2)
        for (int pi = 0; pi < 5; pi++) {
            const float pos = (float)(pi * 977 % 4096), base = pi % 2 ? 10000.0f : 1e6f, fs = pi == 3 ? 0.125f : 1.0f;
            const float *ff = pi == 4 ? factors : NULL;
            float x[256], y[256];
            for (int i = 0; i < D; i++) x[i] = y[i] = frand();
            gm_ref_rope_neox(y, n_rot, pos, base, fs, ff);
            const int half = n_rot / 2;
            for (int i = 0; i < half; i++) {
                const double ang = pos * fs * pow(base, -2.0 * i / n_rot) / (ff ? ff[i] : 1.0);
                const double c = cos(ang), s = sin(ang);
                /* float angles of up to 4096 rad: ~4096 · 2^-24 rad of error in the argument */
                const double tol = 2e-3 + 1e-6 * fabs(ang);
                assert_true(fabs(y[i] - (x[i] * c - x[i + half] * s)) <= tol);
                assert_true(fabs(y[i + half] - (x[i] * s + x[i + half] * c)) <= tol);
            }
            for (int i = n_rot; i < D; i++) assert_true(y[i] == x[i]);
        }
}

static void test_gelu_and_softcap(void **state) {
    (void)state;
    for (double x = -12; x <= 12; x += 0.173) {
        const double want = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        assert_true(fabs(gm_ref_gelu_tanh((float)x) - want) <= 1e-5 * (1 + fabs(want)));
    }
    float z[5] = {-1000, -30, 0, 29.9f, 1e6f};
    gm_ref_softcap(z, 5, 30.0f);
    assert_true(fabsf(z[0] + 30) < 1e-4f && fabsf(z[4] - 30) < 1e-4f && z[2] == 0.0f);
    assert_true(fabsf(z[1] - 30 * tanhf(-1)) < 1e-4f && z[3] < 30 && z[3] > 20);
}

/* softmax(q·k)·v in double from the same f16 keys and values. */
static void attention_double(const float *q, gm_f16 **k, gm_f16 **v, int n, int D, float *out) {
    double *s = malloc(sizeof(double) * n), max = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) {
        s[i] = 0;
        for (int j = 0; j < D; j++) s[i] += (double)q[j] * gm_f16_to_f32(k[i][j]);
        max = s[i] > max ? s[i] : max;
    }
    for (int i = 0; i < n; i++) sum += (s[i] = exp(s[i] - max));
    for (int j = 0; j < D; j++) {
        double acc = 0;
        for (int i = 0; i < n; i++) acc += s[i] / sum * gm_f16_to_f32(v[i][j]);
        out[j] = (float)acc;
    }
    free(s);
}

static void test_attention_ref_and_avx2(void **state) {
    (void)state;
    const int dims[] = {16, 24, 100, 128, 256, 512};
    const int keys[] = {1, 2, 7, 64, 513};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t ki = 0; ki < sizeof keys / sizeof keys[0]; ki++) {
            const int D = dims[di], n = keys[ki];
            float *q = malloc(sizeof(float) * D), *scores = malloc(sizeof(float) * n);
            float *want = malloc(sizeof(float) * D), *ref = malloc(sizeof(float) * D), *fast = malloc(sizeof(float) * D);
            gm_f16 **k = malloc(sizeof *k * n), **v = malloc(sizeof *v * n);
            for (int j = 0; j < D; j++) q[j] = frand() * 0.5f;
            for (int i = 0; i < n; i++) {
                k[i] = malloc(sizeof(gm_f16) * D);
                v[i] = malloc(sizeof(gm_f16) * D);
                for (int j = 0; j < D; j++) {
                    k[i][j] = gm_f32_to_f16(frand() * 4.0f);
                    v[i][j] = gm_f32_to_f16(frand() * 10.0f);
                }
            }
            attention_double(q, k, v, n, D, want);
            gm_ref_attention_head(q, (const gm_f16 *const *)k, (const gm_f16 *const *)v, n, D, scores, ref);
            /* float sums of up to 512 products give scores a relative error of ~1e-5, which the softmax
             * passes on: 3e-5 of the value scale (10) allows that and still fails on a wrong key, value,
             * window or normalisation (errors of order 1) */
            for (int j = 0; j < D; j++) assert_true(fabsf(ref[j] - want[j]) <= 3e-4f);
            if (gm_cpu_isa() >= GM_ISA_AVX2) {
                for (int j = 0; j < D; j++) fast[j] = NAN; /* unwritten outputs must fail */
                gm_avx2_attention_head(q, (const gm_f16 *const *)k, (const gm_f16 *const *)v, n, D, scores, fast);
                for (int j = 0; j < D; j++) assert_true(fabsf(fast[j] - want[j]) <= 3e-4f);
            }
            /* groups of query heads sharing these keys (GQA): G = 1..6 covers the four-head path and tails */
            for (int G = 1; G <= 6; G++) {
                float *qg = malloc(sizeof(float) * D * G), *og = malloc(sizeof(float) * D * G), *wg = malloc(sizeof(float) * D);
                float *sg = malloc(sizeof(float) * n * G);
                for (int j = 0; j < D * G; j++) qg[j] = frand() * 0.5f;
                for (int impl = 0; impl < 2; impl++) {
                    if (impl == 1 && gm_cpu_isa() < GM_ISA_AVX2) break;
                    for (int j = 0; j < D * G; j++) og[j] = NAN;
                    (impl ? gm_avx2_attention_group : gm_ref_attention_group)(
                        qg, G, (const gm_f16 *const *)k, (const gm_f16 *const *)v, n, D, sg, og);
                    for (int g = 0; g < G; g++) {
                        attention_double(qg + g * D, k, v, n, D, wg);
                        for (int j = 0; j < D; j++)
                            if (!(fabsf(og[g * D + j] - wg[j]) <= 3e-4f))
                                fail_msg("impl %d G %d D %d keys %d head %d dim %d: %g vs %g", impl, G, D, n, g, j, og[g * D + j], wg[j]);
                    }
                }
                free(qg), free(og), free(wg), free(sg);
            }
            for (int i = 0; i < n; i++) {
                free(k[i]);
                free(v[i]);
            }
            free(k), free(v), free(q), free(scores), free(want), free(ref), free(fast);
        }
}

/* The AVX2 GeGLU against the scalar reference over the whole useful range, tails included. */
static void test_gelu_mul_avx2(void **state) {
    (void)state;
    if (gm_cpu_isa() < GM_ISA_AVX2) skip();
    enum { N = 20011 }; /* not a multiple of 8: the scalar tail runs too */
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N), *want = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        g[i] = -15.0f + 30.0f * (float)i / N + frand() * 1e-3f;
        u[i] = frand() * 3.0f;
        want[i] = gm_ref_gelu_tanh(g[i]) * u[i];
    }
    gm_avx2_gelu_mul(g, u, N);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        /* error measured against the size of the inputs' product: where tanh(t) is near -1 the reference's
         * 1 + tanh(t) itself cancels to ~1e-7 · |x|, so relative error to a tiny result means nothing */
        const double x = -15.0 + 30.0 * i / N, scale = fabs(x * u[i]) + fabs(want[i]) + 1e-30;
        const double err = fabs((double)g[i] - want[i]) / scale;
        worst = err > worst ? err : worst;
    }
    /* a few float ulp (2^-23 ≈ 1.2e-7 each) from exp, the division and the products */
    assert_true(worst < 1e-6);
    free(g), free(u), free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_matches_formula),
        cmocka_unit_test(test_rope_matches_formula),
        cmocka_unit_test(test_gelu_and_softcap),
        cmocka_unit_test(test_attention_ref_and_avx2),
        cmocka_unit_test(test_gelu_mul_avx2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
