/* ops_avx2.c: AVX2 + FMA + F16C versions of the attention kernel of ops_ref.h: q·k over f16 keys eight
 * lanes at a time, the softmax as the reference computes it, and the weighted sum of f16 values. */
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
