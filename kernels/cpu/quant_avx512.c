/* quant_avx512.c: AVX-512 (F/BW/VL/DQ) kernels of the tensor element types, only where they beat AVX2:
 * vec_dot of the K-quants, 64 elements per vector. Every other AVX-512 table entry is the AVX2 kernel
 * (quant_dispatch.c fills it first); the specification is kernels/ref. */
#include <immintrin.h>

#include "quant/quant.h"
#include "quant/quant_blocks.h"

/* Measured with bench/bench_quant.c: q4_K / q5_K / q6_K gain 20-80% over AVX2 when compute-bound; the
 * 32-element types lost (two blocks per vector: the per-block f16 scale work dominates), so they stay on
 * AVX2. Same int8 precondition as quant_avx2.c: activations in -127..127. */

static inline float f16(gm_f16 h) { return _cvtsh_ss(h); }

static inline float hsum128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The min term of q4_K / q5_K: sum over the 8 sub-blocks of m[b] * (sum of the 32 activations of b). */
static inline __m128i k4_min_term(const uint8_t sm[16], const int16_t bsums[16]) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    const __m128i s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(sm + 8)));
    return _mm_madd_epi16(mins, s32);
}

/* int16 scales 2g (lower 256 bits) and 2g+1 (upper), from sc holding the 8 scales in each 128-bit lane. */
static inline __m512i k4_scale_pair(__m512i sc, int g) {
    const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi16((short)(((4 * g + 1) << 8) | (4 * g))),
                                           _mm256_set1_epi16((short)(((4 * g + 3) << 8) | (4 * g + 2))), 1);
    return _mm512_shuffle_epi8(sc, sel);
}

/* ---- q4_K with q8_K: one 64-element group (two sub-blocks) per 512-bit vector ---- */

/* Sub-blocks 2g (low nibbles of the 32 bytes at q4) and 2g+1 (high nibbles) times their scales. */
static inline __m512i q4_K_group(const uint8_t *q4, const int8_t *q8, __m512i sc, int g) {
    const __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)q4));
    const __m512i sh = _mm512_maskz_mov_epi16(0xFFFF0000u, _mm512_set1_epi16(4)); /* upper half >> 4 */
    const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(bits, sh), _mm512_set1_epi8(0x0F));
    const __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512((const void *)q8));
    return _mm512_madd_epi16(k4_scale_pair(sc, g), p);
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
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_term(sm, y[i].bsums)), acc_m);
        const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sm)));
        const __m512i s01 = _mm512_add_epi32(q4_K_group(x[i].qs, y[i].qs, sc, 0), q4_K_group(x[i].qs + 32, y[i].qs + 64, sc, 1));
        const __m512i s23 = _mm512_add_epi32(q4_K_group(x[i].qs + 64, y[i].qs + 128, sc, 2), q4_K_group(x[i].qs + 96, y[i].qs + 192, sc, 3));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_add_epi32(s01, s23)), acc);
    }
    *out = _mm512_reduce_add_ps(acc) - hsum128(acc_m);
}

/* ---- q5_K with q8_K: as q4_K, with the fifth bits of qh ---- */

/* Sub-blocks 2g and 2g+1 of a q5_K block times their scales, as int32 lanes. */
static inline __m512i q5_K_group(const uint8_t *q5, __m512i hbits, const int8_t *q8, __m512i sc, int g) {
    const __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)q5));
    const __m512i sh = _mm512_maskz_mov_epi16(0xFFFF0000u, _mm512_set1_epi16(4));
    const __m512i lo4 = _mm512_and_si512(_mm512_srlv_epi16(bits, sh), _mm512_set1_epi8(0x0F));
    /* bit 2g of each qh byte to bit 4 in the lower half, bit 2g+1 in the upper half */
    const __m512i hsh = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)(g < 2 ? 4 - 2 * g : 2 * g - 4)),
                                                _mm512_set1_epi16((short)(g < 2 ? 3 - 2 * g : 2 * g - 3)));
    const __m512i hb = g < 2 ? _mm512_sllv_epi16(hbits, hsh) : _mm512_srlv_epi16(hbits, hsh);
    const __m512i q = _mm512_or_si512(lo4, _mm512_and_si512(hb, _mm512_set1_epi8(0x10)));
    const __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512((const void *)q8));
    return _mm512_madd_epi16(k4_scale_pair(sc, g), p);
}

static void vec_dot_q5_K(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q5_K *x = w;
    const gm_block_q8_K *y = a;
    __m512 acc = _mm512_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        uint8_t sm[16];
        gm_unpack_scales_k4(x[i].scales, sm);
        const float d = f16(x[i].d) * y[i].d, dmin = f16(x[i].dmin) * y[i].d;
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_term(sm, y[i].bsums)), acc_m);
        const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sm)));
        const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[i].qh));
        const __m512i s01 = _mm512_add_epi32(q5_K_group(x[i].qs, hb, y[i].qs, sc, 0), q5_K_group(x[i].qs + 32, hb, y[i].qs + 64, sc, 1));
        const __m512i s23 = _mm512_add_epi32(q5_K_group(x[i].qs + 64, hb, y[i].qs + 128, sc, 2), q5_K_group(x[i].qs + 96, hb, y[i].qs + 192, sc, 3));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_add_epi32(s01, s23)), acc);
    }
    *out = _mm512_reduce_add_ps(acc) - hsum128(acc_m);
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
    const __m512i s42 = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    const __m512i s02 = _mm512_maskz_mov_epi16(0xFFFF0000u, _mm512_set1_epi16(2));
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
        sumi = _mm512_sub_epi32(sumi, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    *out = _mm512_reduce_add_ps(acc);
}

void gm_quant_fill_avx512(gm_type_cpu tab[GM_TYPE_COUNT]) {
    tab[GM_TYPE_Q4_K].vec_dot = vec_dot_q4_K;
    tab[GM_TYPE_Q5_K].vec_dot = vec_dot_q5_K;
    tab[GM_TYPE_Q6_K].vec_dot = vec_dot_q6_K;
}
