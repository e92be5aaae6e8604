/* ops_avx2.c: AVX2 + FMA + F16C versions of kernels of ops_ref.h: attention (q·k over f16 keys eight lanes
 * at a time, the reference's softmax, the weighted sum of f16 values) and the GeGLU product (tanh-GELU
 * through a vectorised exp accurate to a few ulp). */
#include <immintrin.h>
#include <math.h>

#include "cpu/ops_cpu.h"
#include "ref/ops_ref.h"

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 load_f16x8(const gm_f16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

void gm_avx2_attention_head(const float *q, const gm_f16 *const *k, const gm_f16 *const *v, int n_keys, int D,
                            float *scores, float *out) {
    const int D8 = D & ~7;
    float max = -INFINITY;
    for (int i = 0; i < n_keys; i++) {
        const gm_f16 *ki = k[i];
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int j = 0;
        for (; j + 16 <= D8; j += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + j), load_f16x8(ki + j), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + j + 8), load_f16x8(ki + j + 8), a1);
        }
        for (; j < D8; j += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + j), load_f16x8(ki + j), a0);
        float s = hsum8(_mm256_add_ps(a0, a1));
        for (; j < D; j++) s += q[j] * gm_f16_to_f32(ki[j]);
        scores[i] = s;
        if (s > max) max = s;
    }
    const float inv = gm_ref_softmax_exp(scores, n_keys, max);
    int j = 0;
    for (; j < D8; j += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int i = 0; i < n_keys; i++) acc = _mm256_fmadd_ps(_mm256_set1_ps(scores[i] * inv), load_f16x8(v[i] + j), acc);
        _mm256_storeu_ps(out + j, acc);
    }
    for (; j < D; j++) {
        float acc = 0.0f;
        for (int i = 0; i < n_keys; i++) acc += scores[i] * inv * gm_f16_to_f32(v[i][j]);
        out[j] = acc;
    }
}

/* Four heads against the same keys and values; D a multiple of 8. */
static void attention4(const float *q, const gm_f16 *const *k, const gm_f16 *const *v, int n_keys, int D,
                       float *scores, float *out) {
    float max[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    const float *q0 = q, *q1 = q + D, *q2 = q + 2 * D, *q3 = q + 3 * D;
    for (int i = 0; i < n_keys; i++) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        const gm_f16 *ki = k[i];
        for (int j = 0; j < D; j += 8) {
            const __m256 kv = load_f16x8(ki + j);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + j), kv, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + j), kv, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + j), kv, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q3 + j), kv, a3);
        }
        const float s[4] = {hsum8(a0), hsum8(a1), hsum8(a2), hsum8(a3)};
        for (int g = 0; g < 4; g++) {
            scores[g * n_keys + i] = s[g];
            if (s[g] > max[g]) max[g] = s[g];
        }
    }
    for (int g = 0; g < 4; g++) {
        float *sg = scores + g * n_keys;
        const float inv = gm_ref_softmax_exp(sg, n_keys, max[g]);
        for (int i = 0; i < n_keys; i++) sg[i] *= inv;
    }
    for (int j = 0; j < D; j += 8) {
        __m256 o0 = _mm256_setzero_ps(), o1 = _mm256_setzero_ps(), o2 = _mm256_setzero_ps(), o3 = _mm256_setzero_ps();
        for (int i = 0; i < n_keys; i++) {
            const __m256 vv = load_f16x8(v[i] + j);
            o0 = _mm256_fmadd_ps(_mm256_set1_ps(scores[i]), vv, o0);
            o1 = _mm256_fmadd_ps(_mm256_set1_ps(scores[n_keys + i]), vv, o1);
            o2 = _mm256_fmadd_ps(_mm256_set1_ps(scores[2 * n_keys + i]), vv, o2);
            o3 = _mm256_fmadd_ps(_mm256_set1_ps(scores[3 * n_keys + i]), vv, o3);
        }
        _mm256_storeu_ps(out + j, o0);
        _mm256_storeu_ps(out + D + j, o1);
        _mm256_storeu_ps(out + 2 * D + j, o2);
        _mm256_storeu_ps(out + 3 * D + j, o3);
    }
}

void gm_avx2_attention_group(const float *q, int G, const gm_f16 *const *k, const gm_f16 *const *v, int n_keys,
                             int D, float *scores, float *out) {
    int g = 0;
    if (D % 8 == 0)
        for (; g + 4 <= G; g += 4)
            attention4(q + (size_t)g * D, k, v, n_keys, D, scores + (size_t)g * n_keys, out + (size_t)g * D);
    for (; g < G; g++)
        gm_avx2_attention_head(q + (size_t)g * D, k, v, n_keys, D, scores + (size_t)g * n_keys, out + (size_t)g * D);
}

/* e^x for x in [-87, 87] (callers clamp): Cody-Waite range reduction by ln 2 and a degree-6 polynomial
 * (the Cephes coefficients), ~2 ulp. */
static inline __m256 exp8(__m256 x) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
    r = _mm256_fnmadd_ps(n, ln2_lo, r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

void gm_avx2_gelu_mul(float *g, const float *u, int64_t n) {
    /* 0.5·x·(1 + tanh(t)) = x / (1 + e^(-2t)), t = sqrt(2/pi)·(x + 0.044715·x³): no cancellation when
     * tanh(t) is near -1. e^(-2t) is clamped to [e^-80, e^80]: beyond, the result is x or 0 in float. */
    const __m256 c = _mm256_set1_ps(-2.0f * 0.79788456080286535588f), a = _mm256_set1_ps(0.044715f);
    const __m256 one = _mm256_set1_ps(1.0f), lo = _mm256_set1_ps(-80.0f), hi = _mm256_set1_ps(80.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        __m256 m2t = _mm256_mul_ps(c, _mm256_mul_ps(x, _mm256_fmadd_ps(_mm256_mul_ps(a, x), x, one)));
        m2t = _mm256_max_ps(_mm256_min_ps(m2t, hi), lo);
        const __m256 y = _mm256_div_ps(x, _mm256_add_ps(one, exp8(m2t)));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(y, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = gm_ref_gelu_tanh(g[i]) * u[i];
}
