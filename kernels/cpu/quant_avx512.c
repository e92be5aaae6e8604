/* quant_avx512.c: AVX-512 (F/BW/VL/DQ) kernels of the tensor element types, only where they beat the
 * AVX2 ones (measured with bench/bench_quant.c): vec_dot of q4_K, q6_K, q8_0 and q4_0. The dispatcher
 * fills the AVX-512 table with the AVX2 kernels first, so every other entry runs the AVX2 kernel. The
 * specification is kernels/ref; the int8 precondition of quant_avx2.c (activations in -127..127) holds. */
#include <immintrin.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_blocks.h"

static inline float f16(gm_f16 h) { return _cvtsh_ss(h); }

static inline __m512i sum_pairs_i16(__m512i v) { return _mm512_madd_epi16(v, _mm512_set1_epi16(1)); }

/* Products of signed bytes x*y summed by 4 into 16 int32 lanes (y must not hold -128 where x < 0).
 * AVX-512 has no vpsignb: |x| times y negated where x is negative. */
static inline __m512i dot_i8(__m512i x, __m512i y) {
    const __mmask64 neg = _mm512_movepi8_mask(x);
    const __m512i sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    return sum_pairs_i16(_mm512_maddubs_epi16(_mm512_abs_epi8(x), sy));
}

/* 256-bit version for a last odd block. */
static inline __m256i dot_i8_256(__m256i x, __m256i y) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* 8 lanes of a and 8 of b. */
static inline __m512 two_scales(float a, float b) {
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

/* 32 bytes at p and 32 at q as one vector. */
static inline __m512i load_2x256(const void *p, const void *q) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)),
                              _mm256_loadu_si256((const __m256i *)q), 1);
}

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- q8_0 / q4_0 with q8_0: two blocks per 512-bit vector ---- */

static void vec_dot_q8_0(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q8_0 *x = w;
    const gm_block_q8_0 *y = a;
    const int64_t nb = n / GM_QK;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        const __m512i p0 = dot_i8(load_2x256(x[i].qs, x[i + 1].qs), load_2x256(y[i].qs, y[i + 1].qs));
        const __m512i p1 = dot_i8(load_2x256(x[i + 2].qs, x[i + 3].qs), load_2x256(y[i + 2].qs, y[i + 3].qs));
        acc0 = _mm512_fmadd_ps(two_scales(f16(x[i].d) * f16(y[i].d), f16(x[i + 1].d) * f16(y[i + 1].d)), _mm512_cvtepi32_ps(p0), acc0);
        acc1 = _mm512_fmadd_ps(two_scales(f16(x[i + 2].d) * f16(y[i + 2].d), f16(x[i + 3].d) * f16(y[i + 3].d)), _mm512_cvtepi32_ps(p1), acc1);
    }
    __m256 acc = _mm256_setzero_ps();
    for (; i < nb; ++i) {
        const __m256i p = dot_i8_256(_mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    *out = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + hsum256(acc);
}

/* The 64 values - 8 of two q4_0 blocks: [low nibbles of a | high of a | low of b | high of b]. */
static inline __m512i q4_0_pair(const gm_block_q4_0 *a, const gm_block_q4_0 *b) {
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)a->qs))),
                                         _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b->qs)), 1);
    const __m512i shift = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0) ; /* per 16-bit lane: 0 or 4 */
    const __m512i sh16 = _mm512_or_si512(shift, _mm512_slli_epi64(shift, 16));
    const __m512i sh = _mm512_or_si512(sh16, _mm512_slli_epi64(sh16, 32));
    const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(0x0F));
    return _mm512_sub_epi8(q, _mm512_set1_epi8(8));
}

static void vec_dot_q4_0(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q4_0 *x = w;
    const gm_block_q8_0 *y = a;
    const int64_t nb = n / GM_QK;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        const __m512i p0 = dot_i8(q4_0_pair(&x[i], &x[i + 1]), load_2x256(y[i].qs, y[i + 1].qs));
        const __m512i p1 = dot_i8(q4_0_pair(&x[i + 2], &x[i + 3]), load_2x256(y[i + 2].qs, y[i + 3].qs));
        acc0 = _mm512_fmadd_ps(two_scales(f16(x[i].d) * f16(y[i].d), f16(x[i + 1].d) * f16(y[i + 1].d)), _mm512_cvtepi32_ps(p0), acc0);
        acc1 = _mm512_fmadd_ps(two_scales(f16(x[i + 2].d) * f16(y[i + 2].d), f16(x[i + 3].d) * f16(y[i + 3].d)), _mm512_cvtepi32_ps(p1), acc1);
    }
    __m256 acc = _mm256_setzero_ps();
    for (; i < nb; ++i) {
        const __m128i b = _mm_loadu_si128((const __m128i *)x[i].qs);
        const __m256i q = _mm256_sub_epi8(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F)),
                                          _mm256_set1_epi8(8));
        const __m256i p = dot_i8_256(q, _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    *out = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + hsum256(acc);
}

/* ---- q4_K with q8_K: one 64-element group (two sub-blocks) per 512-bit vector ---- */

/* Sub-blocks 2g (low nibbles of 32 bytes) and 2g+1 (high nibbles), times their scales, as int32 lanes.
 * sc holds the 8 int16 scales in every 128-bit lane. */
static inline __m512i q4_K_group(const uint8_t *q4, const int8_t *q8, __m512i sc, int g) {
    const __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)q4));
    const __m512i sh = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(bits, sh), _mm512_set1_epi8(0x0F));
    const __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512((const void *)q8));
    /* lanes 0-1 take int16 scale 2g, lanes 2-3 scale 2g+1 */
    const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi16((short)(((4 * g + 1) << 8) | (4 * g))),
                                           _mm256_set1_epi16((short)(((4 * g + 3) << 8) | (4 * g + 2))), 1);
    return _mm512_madd_epi16(_mm512_shuffle_epi8(sc, sel), p);
}

static void vec_dot_q4_K(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q4_K *x = w;
    const gm_block_q8_K *y = a;
    __m512 acc = _mm512_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        uint8_t sm[16];
        gm_unpack_scales_k4(x[i].scales, sm);
        const float d = f16(x[i].d) * y[i].d, dmin = f16(x[i].dmin) * y[i].d;
        /* min term: sum over sub-blocks of m[b] * (sum of its 32 activations), from the bsums */
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        const __m128i s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(sm + 8)));
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_madd_epi16(mins, s32)), acc_m);

        const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sm)));
        const __m512i s01 = _mm512_add_epi32(q4_K_group(x[i].qs, y[i].qs, sc, 0), q4_K_group(x[i].qs + 32, y[i].qs + 64, sc, 1));
        const __m512i s23 = _mm512_add_epi32(q4_K_group(x[i].qs + 64, y[i].qs + 128, sc, 2), q4_K_group(x[i].qs + 96, y[i].qs + 192, sc, 3));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_add_epi32(s01, s23)), acc);
    }
    __m128 m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    *out = _mm512_reduce_add_ps(acc) - _mm_cvtss_f32(m);
}

/* ---- q6_K with q8_K: 64 elements (four sub-blocks of 16) per 512-bit vector ---- */

/* The scales of sub-blocks 4k..4k+3 as int16, one per 128-bit lane (8 copies each). t holds the 16 int8
 * scales in both 128-bit lanes. */
static inline __m512i q6_scales(__m256i t, int k) {
    const __m256i sel = _mm256_add_epi8(_mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
                                        _mm256_set1_epi8((char)(4 * k)));
    return _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(t, sel));
}

/* One half (128 elements) of a q6_K block: sum over its 8 sub-blocks of scale * dot(q + 32, a). */
static inline __m512i q6_K_half(const uint8_t *ql, const uint8_t *qh, const int8_t *q8, __m256i t, int h) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i b = _mm512_loadu_si512((const void *)ql);           /* ql[l] | ql[l + 32] */
    const __m512i bh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
    /* high bits to bit 4-5: elements 0-31 take qh bits 0-1 (<< 4), 32-63 bits 2-3 (<< 2),
     * 64-95 bits 4-5 (as they are), 96-127 bits 6-7 (>> 2) */
    const __m512i s42 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i s02 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i hlo = _mm512_and_si512(_mm512_sllv_epi16(bh, s42), m30);
    const __m512i hhi = _mm512_and_si512(_mm512_srlv_epi16(bh, s02), m30);
    const __m512i qlo = _mm512_or_si512(_mm512_and_si512(b, m4), hlo);                          /* elements 0-63 */
    const __m512i qhi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b, 4), m4), hhi);    /* 64-127 */
    const __m512i plo = _mm512_maddubs_epi16(qlo, _mm512_loadu_si512((const void *)q8));
    const __m512i phi = _mm512_maddubs_epi16(qhi, _mm512_loadu_si512((const void *)(q8 + 64)));
    return _mm512_add_epi32(_mm512_madd_epi16(q6_scales(t, 2 * h), plo), _mm512_madd_epi16(q6_scales(t, 2 * h + 1), phi));
}

static void vec_dot_q6_K(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q6_K *x = w;
    const gm_block_q8_K *y = a;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        const __m128i scales = _mm_loadu_si128((const __m128i *)x[i].scales);
        /* stored values are q + 32: subtract 32 * sum over sub-blocks of scale * (sum of its activations) */
        const __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scales), _mm256_loadu_si256((const __m256i *)y[i].bsums));
        const __m256i t = _mm256_broadcastsi128_si256(scales);
        __m512i sumi = _mm512_add_epi32(q6_K_half(x[i].ql, x[i].qh, y[i].qs, t, 0),
                                        q6_K_half(x[i].ql + 64, x[i].qh + 32, y[i].qs + 128, t, 1));
        sumi = _mm512_sub_epi32(sumi, _mm512_castsi256_si512(_mm256_slli_epi32(off, 5)));
        /* the cast leaves the upper 256 bits undefined: keep only the lower half of the offset */
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    *out = _mm512_reduce_add_ps(acc);
}

void gm_quant_fill_avx512(gm_type_cpu tab[GM_TYPE_COUNT]) {
    tab[GM_TYPE_Q8_0].vec_dot = vec_dot_q8_0;
    tab[GM_TYPE_Q4_0].vec_dot = vec_dot_q4_0;
    tab[GM_TYPE_Q4_K].vec_dot = vec_dot_q4_K;
    tab[GM_TYPE_Q6_K].vec_dot = vec_dot_q6_K;
}
