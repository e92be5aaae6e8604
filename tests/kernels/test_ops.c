/* test_ops.c: the non-matmul kernels: the scalar references against the formulas of
 * gemma-architecture.md §2.1 evaluated in double, and the SIMD attention against the scalar reference on
 * random inputs of several shapes (including head dims that are not multiples of 8 or 16), and the q8_0 KV cache's
 * head rows: stored as gm_quantize_q8_0_act_ref's blocks, loaded back within the quantization step, and attended
 * over as the f32 kernel attends over the loaded rows. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/ops_cpu.h"
#include "kv/kv_cache.h"
#include "model/backend.h"
#include "quant/quant.h"
#include "quant/quant_blocks.h"
#include "ref/ops_ref.h"
#include "test_rng.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { return test_frand(&rng_state); } /* uniform in [-1, 1) */

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

/* ---- the q8_0 KV cache's head rows ---- */

enum { KV_Q8_MAX_D = 512 };

/* D floats for a q8_0 head row: each block of 32 at its own scale (1e-3 to 1e3; block 1 all zero when there is one),
 * but the first: values under 100 and ties (its amax 127 makes x · 127 / amax = x exactly: 2.5 rounds to 2
 * half-to-even, to 3 half-away), so a quantizer rounding differently from gm_quantize_q8_0_act_ref shows. */
static void kv_q8_fill(float *x, int D) {
    for (int b = 0; b < D / GM_QK; b++) {
        const float scale = b == 0 ? 100.0f : b == 1 ? 0.0f : powf(10.0f, 3.0f * frand());
        for (int j = 0; j < GM_QK; j++) x[b * GM_QK + j] = scale * frand();
    }
    static const float ties[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 126.5f, -1.5f};
    memcpy(x, ties, sizeof ties);
}

/* gm_ref_kv_q8_store writes, per block, the bytes gm_quantize_q8_0_act_ref gives (qs first, the D / 32 scales after
 * all of them), zero padding up to gm_kv_head_bytes and nothing past it; gm_ref_kv_q8_load gives exactly the
 * block's dequantized values, within amax/254 (the rounding of x · 127 / amax) + 127 · d's rounding to f16 (2^-11
 * relative, 2^-25 absolute below f16's normal range, which blocks of amax < 2^-14 · 127 meet) of the input. A row of
 * zeros is stored as zero bytes and loads as zeros. */
static void test_kv_q8_store_and_load(void **state) {
    (void)state;
    static const int dims[] = {32, 64, 96, 128, 256, 512};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        const int D = dims[di];
        const size_t hb = gm_kv_head_bytes(GM_KV_Q8_0, D), used = (size_t)D + (size_t)D / 16;
        assert_true(hb % 16 == 0 && hb >= used && hb < used + 16);
        static uint8_t row[KV_Q8_MAX_D + KV_Q8_MAX_D / 16 + 32];
        static float x[KV_Q8_MAX_D], y[KV_Q8_MAX_D];
        for (int trial = 0; trial < 9; trial++) {
            if (trial < 8) kv_q8_fill(x, D);
            else memset(x, 0, sizeof(float) * (size_t)D);
            memset(row, 0xA5, sizeof row);
            gm_ref_kv_q8_store(x, D, row);
            for (size_t i = used; i < hb; i++) assert_int_equal(row[i], 0);
            for (size_t i = hb; i < hb + 16; i++) assert_int_equal(row[i], 0xA5);
            for (int j = 0; j < D; j++) y[j] = NAN;
            gm_ref_kv_q8_load(row, D, y);
            for (int b = 0; b < D / GM_QK; b++) {
                gm_block_q8_0 blk;
                gm_quantize_q8_0_act_ref(x + b * GM_QK, &blk, GM_QK);
                assert_memory_equal(row + b * GM_QK, blk.qs, GM_QK);
                assert_memory_equal(row + D + 2 * b, &blk.d, 2);
                float want[GM_QK], amax = 0.0f;
                gm_dequantize_q8_0_ref(&blk, want, GM_QK);
                assert_memory_equal(y + b * GM_QK, want, sizeof want);
                for (int j = 0; j < GM_QK; j++) amax = fmaxf(amax, fabsf(x[b * GM_QK + j]));
                const float bound = amax / 254.0f + 127.0f * fmaxf(amax / 127.0f * 0x1p-11f, 0x1p-25f);
                for (int j = 0; j < GM_QK; j++)
                    if (!(fabsf(y[b * GM_QK + j] - x[b * GM_QK + j]) <= bound))
                        fail_msg("D %d block %d value %d: %g loads as %g (bound %g)", D, b, j, x[b * GM_QK + j],
                                 y[b * GM_QK + j], bound);
            }
            if (trial < 8) { /* the first block's ties: 127 → 127, 2.5 → 2, -3.5 → -4, ±0.5 → 0, 126.5 → 126 */
                static const int8_t tie_q[] = {127, 2, -4, 0, 0, 126, -2};
                assert_memory_equal(row, tie_q, sizeof tie_q);
            }
            if (trial == 8) {
                for (size_t i = 0; i < hb; i++) assert_int_equal(row[i], 0);
                for (int j = 0; j < D; j++) assert_true(y[j] == 0.0f);
            }
        }
    }
}

/* gm_ref_attention_group_q8 over stored head rows gives what gm_ref_attention_group_f32 gives over the same rows
 * loaded (the same operations in the same order: equal but for the compiler's freedom to fuse multiply-adds). */
static void test_attention_group_q8_equals_f32_on_loaded_rows(void **state) {
    (void)state;
    static const int dims[] = {32, 64, 256};
    static const int keys[] = {1, 7, 70};
    enum { MAX_KEYS = 70, MAX_G = 3 };
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t ki = 0; ki < sizeof keys / sizeof keys[0]; ki++)
            for (int G = 1; G <= MAX_G; G += 2) {
                const int D = dims[di], n = keys[ki];
                const size_t hb = gm_kv_head_bytes(GM_KV_Q8_0, D);
                uint8_t *kq = malloc(hb * n), *vq = malloc(hb * n);
                float *kf = malloc(sizeof(float) * D * n), *vf = malloc(sizeof(float) * D * n), x[256];
                const uint8_t *krow[MAX_KEYS], *vrow[MAX_KEYS];
                const float *kfrow[MAX_KEYS], *vfrow[MAX_KEYS];
                for (int i = 0; i < n; i++) {
                    for (int j = 0; j < D; j++) x[j] = frand() * 3.0f;
                    gm_ref_kv_q8_store(x, D, kq + hb * i);
                    for (int j = 0; j < D; j++) x[j] = frand() * 10.0f;
                    gm_ref_kv_q8_store(x, D, vq + hb * i);
                    gm_ref_kv_q8_load(kq + hb * i, D, kf + (size_t)D * i);
                    gm_ref_kv_q8_load(vq + hb * i, D, vf + (size_t)D * i);
                    krow[i] = kq + hb * i, vrow[i] = vq + hb * i;
                    kfrow[i] = kf + (size_t)D * i, vfrow[i] = vf + (size_t)D * i;
                }
                float q[MAX_G * 256], got[MAX_G * 256], want[MAX_G * 256], scores[MAX_G * MAX_KEYS];
                for (int j = 0; j < G * D; j++) q[j] = frand() * 0.5f, got[j] = NAN;
                gm_ref_attention_group_f32(q, G, kfrow, vfrow, n, D, scores, want);
                gm_ref_attention_group_q8(q, G, krow, vrow, n, D, scores, got);
                float max = 0.0f;
                for (int j = 0; j < G * D; j++) max = fmaxf(max, fabsf(want[j]));
                for (int j = 0; j < G * D; j++)
                    if (!(fabsf(got[j] - want[j]) <= 1e-6f * max))
                        fail_msg("D %d keys %d G %d out %d: q8 %.9g, f32 on loaded rows %.9g", D, n, G, j, got[j],
                                 want[j]);
                free(kq), free(vq), free(kf), free(vf);
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

/* ---- Gemma 4 ops ---- */

/* Routing by hand: softmax of (0, ln 2, ln 4, 0) is (1, 2, 4, 1) / 8; the top two are experts 2 and 1 with
 * renormalised weights 2/3 and 1/3, then times their per-expert scales. Equal scores pick the lower ids. */
static void test_moe_route_by_hand(void **state) {
    (void)state;
    const float logits[4] = {0.0f, logf(2.0f), logf(4.0f), 0.0f}, scale[4] = {1.0f, 3.0f, 0.5f, 1.0f};
    float scratch[5], wts[2]; /* scratch: one per expert (the second case has 5) */
    int32_t ids[2];
    gm_ref_moe_route(logits, 4, 2, scale, scratch, ids, wts);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 1);
    assert_true(fabsf(wts[0] - 2.0f / 3.0f * 0.5f) < 1e-6f && fabsf(wts[1] - 1.0f / 3.0f * 3.0f) < 1e-6f);
    const float flat[5] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    int32_t ids3[3];
    float wts3[3];
    gm_ref_moe_route(flat, 5, 3, NULL, scratch, ids3, wts3);
    assert_true(ids3[0] == 0 && ids3[1] == 1 && ids3[2] == 2);
    for (int j = 0; j < 3; j++) assert_true(fabsf(wts3[j] - 1.0f / 3.0f) < 1e-6f);
}

/* The CPU backend's scale, add_scale and moe against plain loops in double (f32 weights). */
static void test_backend_gemma4_ops(void **state) {
    (void)state;
    gm_backend *b;
    gm_error err = {0};
    assert_int_equal(gm_backend_cpu_new(2, &b, &err), GEMMAC_OK);
    assert_int_equal(b->ops->reserve(b, 16, 64, 16, &err), GEMMAC_OK);
    enum { N = 7, H = 12, F = 5, E = 4, K = 2 };
    float x[N * H], y[N * H], x0[N * H], y0[N * H];
    for (int i = 0; i < N * H; i++) x[i] = x0[i] = frand(), y[i] = y0[i] = frand();
    b->ops->scale(b, x, N * H, -1.5f);
    b->ops->add_scale(b, y, x0, N * H, 0.25f);
    for (int i = 0; i < N * H; i++) {
        assert_true(x[i] == x0[i] * -1.5f);
        assert_true(fabsf(y[i] - (y0[i] + x0[i]) * 0.25f) < 1e-6f);
    }
    static float gate_up[E][2 * F][H], down[E][H][F];
    float logits[N * E], escale[E], out[N * H];
    for (int e = 0; e < E; e++) {
        escale[e] = 0.5f + (float)e;
        for (int r = 0; r < 2 * F; r++)
            for (int j = 0; j < H; j++) gate_up[e][r][j] = frand();
        for (int r = 0; r < H; r++)
            for (int j = 0; j < F; j++) down[e][r][j] = frand();
    }
    for (int i = 0; i < N * E; i++) logits[i] = 3.0f * frand();
    const gm_tensor tgu = {.type = GM_TYPE_F32, .ne = {H, 2 * F, E, 1}, .row_bytes = H * sizeof(float), .data = gate_up};
    const gm_tensor tdn = {.type = GM_TYPE_F32, .ne = {F, H, E, 1}, .row_bytes = F * sizeof(float), .data = down};
    b->ops->moe(b, logits, x0, N, K, escale, &tgu, &tdn, out);
    for (int t = 0; t < N; t++) {
        float scratch[E], wts[K];
        int32_t ids[K];
        gm_ref_moe_route(logits + t * E, E, K, escale, scratch, ids, wts);
        for (int o = 0; o < H; o++) {
            double want = 0;
            for (int k = 0; k < K; k++) {
                const int e = ids[k];
                double acc = 0;
                for (int f = 0; f < F; f++) {
                    double g = 0, u = 0;
                    for (int j = 0; j < H; j++) {
                        g += (double)gate_up[e][f][j] * x0[t * H + j];
                        u += (double)gate_up[e][F + f][j] * x0[t * H + j];
                    }
                    const double act = 0.5 * g * (1 + tanh(sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
                    acc += down[e][o][f] * act * u;
                }
                want += wts[k] * acc;
            }
            assert_true(fabs(out[t * H + o] - want) <= 1e-5 * (1 + fabs(want)));
        }
    }
    b->ops->free(b);
}

/* ---- Gemma 3n ops ---- */

/* rms_match, sparsity_gate, altup_predict and altup_correct by hand on tiny cases, then the CPU backend
 * (threaded over rows / tokens) bit for bit against the scalar references on random input; mul_rows and
 * transpose against plain loops. */
static void test_gemma3n_ops_by_hand(void **state) {
    (void)state;
    /* rms_match: y = (3, 4) has mean square 12.5, ref = (1, 1, ...) rms 1: y / sqrt(12.5) */
    float y[2] = {3.0f, 4.0f};
    const float ref[2] = {1.0f, -1.0f};
    gm_ref_rms_match(y, ref, 2, 1e-5f);
    assert_true(fabsf(y[0] - 3.0f / sqrtf(12.5f)) < 1e-6f && fabsf(y[1] - 4.0f / sqrtf(12.5f)) < 1e-6f);
    /* a zero row is clamped at eps instead of dividing by 0 */
    float z[2] = {0.0f, 0.0f};
    gm_ref_rms_match(z, ref, 2, 1e-5f);
    assert_true(z[0] == 0.0f && z[1] == 0.0f);
    /* sparsity_gate: (1, 2, 3, 4, 5) has mean 3 and population std sqrt(2); k = 1/sqrt(2) cuts at 4 */
    float g[5] = {1, 2, 3, 4, 5};
    gm_ref_sparsity_gate(g, 5, 1.0f / sqrtf(2.0f));
    assert_true(g[0] == 0 && g[1] == 0 && g[2] == 0 && fabsf(g[3]) < 1e-6f && fabsf(g[4] - 1.0f) < 1e-6f);
    /* altup_predict, K = 2, d = 2: y_i = Σ_j c[i][j] x_j + x_i */
    const float x[2][2] = {{1, 2}, {3, 5}}, c[4] = {0.5f, -1.0f, 2.0f, 0.25f};
    float p[2][2];
    gm_ref_altup_predict(&x[0][0], 2, c, &p[0][0], 2, 2);
    assert_true(p[0][0] == 0.5f * 1 - 1.0f * 3 + 1 && p[0][1] == 0.5f * 2 - 1.0f * 5 + 2);
    assert_true(p[1][0] == 2.0f * 1 + 0.25f * 3 + 3 && p[1][1] == 2.0f * 2 + 0.25f * 5 + 5);
    /* altup_correct, active stream 1: y_i = (act - pred_1)·(c_i + 1) + pred_i */
    const float act[2] = {10, 20}, cc[2] = {1.0f, -0.5f};
    float q[2][2];
    gm_ref_altup_correct(&x[0][0], 2, act, cc, &q[0][0], 2, 1, 2);
    assert_true(q[0][0] == (10 - 3) * 2.0f + 1 && q[0][1] == (20 - 5) * 2.0f + 2);
    assert_true(q[1][0] == (10 - 3) * 0.5f + 3 && q[1][1] == (20 - 5) * 0.5f + 5);
}

static void test_backend_gemma3n_ops(void **state) {
    (void)state;
    gm_backend *b;
    gm_error err = {0};
    assert_int_equal(gm_backend_cpu_new(2, &b, &err), GEMMAC_OK);
    assert_int_equal(b->ops->reserve(b, 16, 64, 16, &err), GEMMAC_OK);
    enum { K = 4, N = 37, D = 29 }; /* more tokens than one thread's share, rows not a multiple of 8 */
    static float xs[K][N][D], ys[K][N][D], want[K][N][D], act[N][D], coef[N][K * K], w[D];
    for (int i = 0; i < K; i++)
        for (int t = 0; t < N; t++)
            for (int e = 0; e < D; e++) xs[i][t][e] = 4.0f * frand();
    for (int t = 0; t < N; t++) {
        for (int e = 0; e < D; e++) act[t][e] = frand();
        for (int j = 0; j < K * K; j++) coef[t][j] = frand();
    }
    for (int e = 0; e < D; e++) w[e] = frand();
    const int64_t stride = (int64_t)N * D;

    b->ops->altup_predict(b, &xs[0][0][0], &coef[0][0], &ys[0][0][0], K, N, D);
    for (int t = 0; t < N; t++) gm_ref_altup_predict(&xs[0][t][0], stride, coef[t], &want[0][t][0], K, D);
    assert_memory_equal(ys, want, sizeof ys);

    b->ops->altup_correct(b, &xs[0][0][0], &act[0][0], &coef[0][0], &ys[0][0][0], K, 2, N, D);
    for (int t = 0; t < N; t++) /* correct's coefficients are [N][K]: token t's at coef + t·K */
        gm_ref_altup_correct(&xs[0][t][0], stride, act[t], &coef[0][0] + t * K, &want[0][t][0], K, 2, D);
    assert_memory_equal(ys, want, sizeof ys);

    memcpy(ys, xs, sizeof ys);
    memcpy(want, xs, sizeof want);
    b->ops->rms_match(b, &ys[1][0][0], &xs[0][0][0], N, D, 1e-5f);
    for (int t = 0; t < N; t++) gm_ref_rms_match(want[1][t], xs[0][t], D, 1e-5f);
    assert_memory_equal(ys, want, sizeof ys);

    b->ops->sparsity_gate(b, &ys[2][0][0], N, D, 1.6448536f);
    for (int t = 0; t < N; t++) gm_ref_sparsity_gate(want[2][t], D, 1.6448536f);
    assert_memory_equal(ys, want, sizeof ys);

    b->ops->mul_rows(b, &xs[3][0][0], &ys[3][0][0], N, D, w);
    for (int t = 0; t < N; t++)
        for (int e = 0; e < D; e++) assert_true(ys[3][t][e] == xs[3][t][e] * w[e]);

    /* transpose [K][N][D] -> [N][K][D] */
    b->ops->transpose(b, &xs[0][0][0], &ys[0][0][0], K, N, D);
    const float *tr = &ys[0][0][0];
    for (int i = 0; i < K; i++)
        for (int t = 0; t < N; t++)
            for (int e = 0; e < D; e++) assert_true(tr[((int64_t)t * K + i) * D + e] == xs[i][t][e]);
    b->ops->free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_route_by_hand),
        cmocka_unit_test(test_backend_gemma4_ops),
        cmocka_unit_test(test_gemma3n_ops_by_hand),
        cmocka_unit_test(test_backend_gemma3n_ops),
        cmocka_unit_test(test_rmsnorm_matches_formula),
        cmocka_unit_test(test_rope_matches_formula),
        cmocka_unit_test(test_gelu_and_softcap),
        cmocka_unit_test(test_attention_ref_and_avx2),
        cmocka_unit_test(test_kv_q8_store_and_load),
        cmocka_unit_test(test_attention_group_q8_equals_f32_on_loaded_rows),
        cmocka_unit_test(test_gelu_mul_avx2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
