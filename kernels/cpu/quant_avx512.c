/* quant_avx512.c: AVX-512 (F/BW/VL/DQ) kernels of the tensor element types, only where they beat AVX2:
 * vec_dot and vec_dot_x4 of the K-quants, 64 elements per vector, and (with AVX512-VNNI) vec_dot_x4 of
 * the 32-element types, which must match the AVX2 vec_dot bit for bit. Every other AVX-512 table entry is
 * the AVX2 kernel (quant_dispatch.c fills it first); the specification is kernels/ref. */
#include <immintrin.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_blocks.h"

/* Measured with bench/bench_quant.c: q4_K / q5_K / q6_K gain 20-80% over AVX2 when compute-bound; the
 * 32-element types lost (two blocks per vector: the per-block f16 scale work dominates), so their vec_dot
 * stays on AVX2. Their x4 (four activation rows, two blocks per vector, scales broadcast from the
 * gm_f16_f32 table) gains 10-25% over the AVX2 x4. Same int8 precondition as quant_avx2.c: activations in
 * -127..127. */

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

/* The 64 values of sub-blocks 2g (low nibbles of the 32 bytes at q4, lower 256 bits) and 2g+1 (high). */
static inline __m512i q4_K_values(const uint8_t *q4) {
    const __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)q4));
    const __m512i sh = _mm512_maskz_mov_epi16(0xFFFF0000u, _mm512_set1_epi16(4)); /* upper half >> 4 */
    return _mm512_and_si512(_mm512_srlv_epi16(bits, sh), _mm512_set1_epi8(0x0F));
}

/* Values q (unsigned, < 64) times 64 activations, sums of 4 as int32 lanes, times the int16 scales sp. */
static inline __m512i k_group_dot(__m512i q, __m512i sp, const int8_t *q8) {
    return _mm512_madd_epi16(sp, _mm512_maddubs_epi16(q, _mm512_loadu_si512((const void *)q8)));
}

/* Sub-blocks 2g (low nibbles of the 32 bytes at q4) and 2g+1 (high nibbles) times their scales. */
static inline __m512i q4_K_group(const uint8_t *q4, const int8_t *q8, __m512i sc, int g) {
    return k_group_dot(q4_K_values(q4), k4_scale_pair(sc, g), q8);
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

/* The 64 values of sub-blocks 2g and 2g+1 of a q5_K block. */
static inline __m512i q5_K_values(const uint8_t *q5, __m512i hbits, int g) {
    const __m512i lo4 = q4_K_values(q5);
    /* bit 2g of each qh byte to bit 4 in the lower half, bit 2g+1 in the upper half */
    const __m512i hsh = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)(g < 2 ? 4 - 2 * g : 2 * g - 4)),
                                                _mm512_set1_epi16((short)(g < 2 ? 3 - 2 * g : 2 * g - 3)));
    const __m512i hb = g < 2 ? _mm512_sllv_epi16(hbits, hsh) : _mm512_srlv_epi16(hbits, hsh);
    return _mm512_or_si512(lo4, _mm512_and_si512(hb, _mm512_set1_epi8(0x10)));
}

/* Sub-blocks 2g and 2g+1 of a q5_K block times their scales, as int32 lanes. */
static inline __m512i q5_K_group(const uint8_t *q5, __m512i hbits, const int8_t *q8, __m512i sc, int g) {
    return k_group_dot(q5_K_values(q5, hbits, g), k4_scale_pair(sc, g), q8);
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

/* ---- q4_K / q5_K, one weight row against four activation rows (vec_dot_x4) ----
 * Per column exactly the single kernel: the same int32 lanes of sumi (integer sums are exact, so their
 * order is free), then its float steps in its order. Values and scale pairs are made once per group. */

#define GM_ALWAYS_INLINE static inline __attribute__((always_inline))
/* loops over the four columns unrolled, so that per-column arrays live in registers */
#define GM_UNROLL4 _Pragma("GCC unroll 4")
#define GM_VNNI __attribute__((target("avx512vnni")))

/* s + (sp times the pair sums of q times 64 activations): the same int32 lanes by both routes. */
static inline __m512i k_group_acc(__m512i s, __m512i q, __m512i sp, const int8_t *q8) {
    return _mm512_add_epi32(s, k_group_dot(q, sp, q8));
}
GM_VNNI static inline __m512i k_group_acc_vnni(__m512i s, __m512i q, __m512i sp, const int8_t *q8) {
    return _mm512_dpwssd_epi32(s, sp, _mm512_maddubs_epi16(q, _mm512_loadu_si512((const void *)q8)));
}

GM_ALWAYS_INLINE void k4_col_finish(float xd, float xdmin, const uint8_t sm[16], const gm_block_q8_K *y, __m512i sumi,
                                    __m512 *acc, __m128 *acc_m) {
    const float d = xd * y->d, dmin = xdmin * y->d;
    *acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_term(sm, y->bsums)), *acc_m);
    *acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), *acc);
}

#define GM_K4_DOT_X4(name, ATTR, ACC, BT, HBITS, VALUES)                                               \
    ATTR static void name(int64_t n, float out[4], const void *w, const void *const a[4]) {            \
        const BT *x = w;                                                                               \
        const gm_block_q8_K *const y[4] = {a[0], a[1], a[2], a[3]};                                    \
        __m512 acc[4];                                                                                 \
        __m128 acc_m[4];                                                                               \
        GM_UNROLL4 for (int c = 0; c < 4; ++c) acc[c] = _mm512_setzero_ps(), acc_m[c] = _mm_setzero_ps(); \
        for (int64_t i = 0; i < n / GM_QK_K; ++i) {                                                    \
            uint8_t sm[16];                                                                            \
            gm_unpack_scales_k4(x[i].scales, sm);                                                      \
            const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sm))); \
            HBITS;                                                                                     \
            __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;                            \
            for (int g = 0; g < 4; ++g) {                                                              \
                const __m512i q = VALUES, sp = k4_scale_pair(sc, g);                                   \
                s0 = ACC(s0, q, sp, y[0][i].qs + 64 * g);                                              \
                s1 = ACC(s1, q, sp, y[1][i].qs + 64 * g);                                              \
                s2 = ACC(s2, q, sp, y[2][i].qs + 64 * g);                                              \
                s3 = ACC(s3, q, sp, y[3][i].qs + 64 * g);                                              \
            }                                                                                          \
            const float xd = f16(x[i].d), xdmin = f16(x[i].dmin);                                      \
            k4_col_finish(xd, xdmin, sm, &y[0][i], s0, &acc[0], &acc_m[0]);                            \
            k4_col_finish(xd, xdmin, sm, &y[1][i], s1, &acc[1], &acc_m[1]);                            \
            k4_col_finish(xd, xdmin, sm, &y[2][i], s2, &acc[2], &acc_m[2]);                            \
            k4_col_finish(xd, xdmin, sm, &y[3][i], s3, &acc[3], &acc_m[3]);                            \
        }                                                                                              \
        GM_UNROLL4 for (int c = 0; c < 4; ++c) out[c] = _mm512_reduce_add_ps(acc[c]) - hsum128(acc_m[c]); \
    }

#define GM_Q5_K_HBITS const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[i].qh))
GM_K4_DOT_X4(vec_dot_x4_q4_K, , k_group_acc, gm_block_q4_K, (void)0, q4_K_values(x[i].qs + 32 * g))
GM_K4_DOT_X4(vec_dot_x4_q5_K, , k_group_acc, gm_block_q5_K, GM_Q5_K_HBITS, q5_K_values(x[i].qs + 32 * g, hb, g))
GM_K4_DOT_X4(vec_dot_x4_q4_K_vnni, GM_VNNI, k_group_acc_vnni, gm_block_q4_K, (void)0, q4_K_values(x[i].qs + 32 * g))
GM_K4_DOT_X4(vec_dot_x4_q5_K_vnni, GM_VNNI, k_group_acc_vnni, gm_block_q5_K, GM_Q5_K_HBITS, q5_K_values(x[i].qs + 32 * g, hb, g))
#undef GM_Q5_K_HBITS
#undef GM_K4_DOT_X4

/* ---- q6_K with q8_K: 64 elements (four sub-blocks of 16) per 512-bit vector ---- */

/* The scales of sub-blocks 4k..4k+3 as int16, one per 128-bit lane (8 copies each). t holds the 16 int8
 * scales in both 128-bit lanes. */
static inline __m512i q6_scales(__m256i t, int k) {
    const __m256i sel = _mm256_add_epi8(_mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
                                        _mm256_set1_epi8((char)(4 * k)));
    return _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(t, sel));
}

/* The stored values (q + 32) of one half (128 elements) of a q6_K block: elements 0-63 in q[0], 64-127 in q[1]. */
static inline void q6_K_values(const uint8_t *ql, const uint8_t *qh, __m512i q[2]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i b = _mm512_loadu_si512((const void *)ql);           /* ql[l] | ql[l + 32] */
    const __m512i bh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
    /* high bits to bit 4-5: elements 0-31 take qh bits 0-1 (<< 4), 32-63 bits 2-3 (<< 2),
     * 64-95 bits 4-5 (as they are), 96-127 bits 6-7 (>> 2) */
    const __m512i s42 = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    const __m512i s02 = _mm512_maskz_mov_epi16(0xFFFF0000u, _mm512_set1_epi16(2));
    const __m512i hlo = _mm512_and_si512(_mm512_sllv_epi16(bh, s42), m30);
    const __m512i hhi = _mm512_and_si512(_mm512_srlv_epi16(bh, s02), m30);
    q[0] = _mm512_or_si512(_mm512_and_si512(b, m4), hlo);                          /* elements 0-63 */
    q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b, 4), m4), hhi);    /* 64-127 */
}

/* One half (128 elements) of a q6_K block: sum over its 8 sub-blocks of scale * dot(q + 32, a). */
static inline __m512i q6_K_half(const uint8_t *ql, const uint8_t *qh, const int8_t *q8, __m256i t, int h) {
    __m512i q[2];
    q6_K_values(ql, qh, q);
    return _mm512_add_epi32(k_group_dot(q[0], q6_scales(t, 2 * h), q8), k_group_dot(q[1], q6_scales(t, 2 * h + 1), q8 + 64));
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

/* Four columns of q6_K: values and scales of each half made once; per column the single kernel's int32
 * lanes and float step. */
GM_ALWAYS_INLINE __m512i q6_K_col_offset(__m128i scales, const gm_block_q8_K *y) {
    const __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scales), _mm256_loadu_si256((const __m256i *)y->bsums));
    return _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5));
}

#define GM_Q6_K_DOT_X4(name, ATTR, ACC)                                                                \
    ATTR static void name(int64_t n, float out[4], const void *w, const void *const a[4]) {            \
        const gm_block_q6_K *x = w;                                                                    \
        const gm_block_q8_K *const y[4] = {a[0], a[1], a[2], a[3]};                                    \
        __m512 acc[4];                                                                                 \
        GM_UNROLL4 for (int c = 0; c < 4; ++c) acc[c] = _mm512_setzero_ps();                           \
        for (int64_t i = 0; i < n / GM_QK_K; ++i) {                                                    \
            const __m128i scales = _mm_loadu_si128((const __m128i *)x[i].scales);                      \
            const __m256i t = _mm256_broadcastsi128_si256(scales);                                     \
            __m512i s[4];                                                                              \
            GM_UNROLL4 for (int c = 0; c < 4; ++c)                                                     \
                s[c] = _mm512_sub_epi32(_mm512_setzero_si512(), q6_K_col_offset(scales, &y[c][i]));    \
            for (int h = 0; h < 2; ++h) {                                                              \
                __m512i q[2];                                                                          \
                q6_K_values(x[i].ql + 64 * h, x[i].qh + 32 * h, q);                                    \
                const __m512i sp0 = q6_scales(t, 2 * h), sp1 = q6_scales(t, 2 * h + 1);                \
                GM_UNROLL4 for (int c = 0; c < 4; ++c) {                                               \
                    const int8_t *q8 = y[c][i].qs + 128 * h;                                           \
                    s[c] = ACC(ACC(s[c], q[0], sp0, q8), q[1], sp1, q8 + 64);                          \
                }                                                                                      \
            }                                                                                          \
            const float xd = f16(x[i].d);                                                              \
            GM_UNROLL4 for (int c = 0; c < 4; ++c)                                                     \
                acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(xd * y[c][i].d), _mm512_cvtepi32_ps(s[c]), acc[c]); \
        }                                                                                              \
        GM_UNROLL4 for (int c = 0; c < 4; ++c) out[c] = _mm512_reduce_add_ps(acc[c]);                  \
    }

GM_Q6_K_DOT_X4(vec_dot_x4_q6_K, , k_group_acc)
GM_Q6_K_DOT_X4(vec_dot_x4_q6_K_vnni, GM_VNNI, k_group_acc_vnni)
#undef GM_Q6_K_DOT_X4

/* ---- 32-element types with VNNI, one weight row against four activation rows ----
 * The AVX-512 table's vec_dot of q8_0 / q4_0 / q5_0 / q4_1 / q5_1 is the AVX2 kernel (quant_avx2.c), so
 * these mirror its float steps exactly: block i into accumulator i % 2 (one accumulator for q4_1 / q5_1),
 * scale f16(x.d) * f16(y.d), fma, final hsum. vpdpbusd sums the same 4 byte products per int32 lane as
 * maddubs + madd(1) do (without the int16 step, which never saturates here: |pair sum| <= 2*128*127). */

static inline __m256i unpack_nibbles32(const uint8_t *qs) {
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
}

/* 32 bits (little-endian) as 32 bytes: byte j is 0xFF when bit j is set, else 0. */
static inline __m256i expand_bits32(const uint8_t *p) {
    uint32_t h;
    memcpy(&h, p, 4);
    return _mm256_movm_epi8(h);
}

static inline __m256i q8_0_values(const gm_block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }
static inline __m256i q4_0_values(const gm_block_q4_0 *b) {
    return _mm256_sub_epi8(unpack_nibbles32(b->qs), _mm256_set1_epi8(8));
}
static inline __m256i q5_0_values(const gm_block_q5_0 *b) { /* nibble - 16 where the fifth bit is clear */
    uint32_t h;
    memcpy(&h, b->qh, 4);
    const __m256i nib = unpack_nibbles32(b->qs);
    return _mm256_mask_sub_epi8(nib, (__mmask32)~h, nib, _mm256_set1_epi8(16));
}
static inline __m256i q4_1_values(const gm_block_q4_1 *b) { return unpack_nibbles32(b->qs); }
static inline __m256i q5_1_values(const gm_block_q5_1 *b) {
    return _mm256_or_si256(unpack_nibbles32(b->qs), _mm256_and_si256(expand_bits32(b->qh), _mm256_set1_epi8(0x10)));
}

static inline float hsum256(__m256 v) { /* quant_avx2.c's hsum_ps, the same adds in the same order */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 f16_bcast(gm_f16 h) { return _mm256_broadcast_ss(&gm_f16_f32[h]); }

/* sy = y with x's sign where x < 0 (where x = 0, |x| = 0 makes the product 0 either way, as with sign_epi8). */
GM_VNNI GM_ALWAYS_INLINE void q32_col_vnni(__m256i ax, __mmask32 neg, __m256 dx, const gm_block_q8_0 *y, __m256 *acc) {
    const __m256i yq = _mm256_loadu_si256((const __m256i *)y->qs);
    const __m256i sy = _mm256_mask_sub_epi8(yq, neg, _mm256_setzero_si256(), yq);
    const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy);
    *acc = _mm256_fmadd_ps(_mm256_mul_ps(dx, f16_bcast(y->d)), _mm256_cvtepi32_ps(p), *acc);
}

/* The same with two blocks per 512-bit vector: lanes 0-7 are the single kernel's acc0 (even blocks), lanes
 * 8-15 its acc1 (odd blocks), so each lane sees exactly its float steps; an odd tail block goes to acc0. */
static inline __m512 f16_bcast2(gm_f16 lo, gm_f16 hi) { /* f16(lo) in lanes 0-7, f16(hi) in lanes 8-15 */
    return _mm512_mask_broadcastss_ps(_mm512_set1_ps(gm_f16_f32[lo]), 0xFF00, _mm_load_ss(&gm_f16_f32[hi]));
}

static inline __m512i load2x32(const int8_t *lo, const int8_t *hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

GM_VNNI GM_ALWAYS_INLINE void q32_col2_vnni(__m512i ax, __mmask64 neg, __m512 dx, const gm_block_q8_0 *y, __m512 *acc) {
    const __m512i yq = load2x32(y[0].qs, y[1].qs);
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, _mm512_mask_sub_epi8(yq, neg, _mm512_setzero_si512(), yq));
    *acc = _mm512_fmadd_ps(_mm512_mul_ps(dx, f16_bcast2(y[0].d, y[1].d)), _mm512_cvtepi32_ps(p), *acc);
}

/* The tail block: acc0 (lanes 0-7) only. */
GM_VNNI GM_ALWAYS_INLINE void q32_col_tail_vnni(__m256i ax, __mmask32 neg, __m256 dx, const gm_block_q8_0 *y, __m512 *acc) {
    __m256 lo = _mm512_castps512_ps256(*acc);
    q32_col_vnni(ax, neg, dx, y, &lo);
    *acc = _mm512_insertf32x8(*acc, lo, 0);
}

#define GM_Q32_DOT_X4_512(name, BT, VALUES)                                                            \
    GM_VNNI static void name(int64_t n, float out[4], const void *w, const void *const a[4]) {         \
        const BT *x = w;                                                                               \
        const gm_block_q8_0 *const y[4] = {a[0], a[1], a[2], a[3]};                                    \
        const int64_t nb = n / GM_QK;                                                                  \
        __m512 acc[4];                                                                                 \
        GM_UNROLL4 for (int c = 0; c < 4; ++c) acc[c] = _mm512_setzero_ps();                           \
        int64_t i = 0;                                                                                 \
        for (; i + 1 < nb; i += 2) {                                                                   \
            const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(VALUES(&x[i])), VALUES(&x[i + 1]), 1); \
            const __m512i ax = _mm512_abs_epi8(q);                                                     \
            const __mmask64 neg = _mm512_movepi8_mask(q);                                              \
            const __m512 dx = f16_bcast2(x[i].d, x[i + 1].d);                                          \
            GM_UNROLL4 for (int c = 0; c < 4; ++c) q32_col2_vnni(ax, neg, dx, &y[c][i], &acc[c]);      \
        }                                                                                              \
        if (i < nb) {                                                                                  \
            const __m256i q = VALUES(&x[i]);                                                           \
            const __m256i ax = _mm256_abs_epi8(q);                                                     \
            const __mmask32 neg = _mm256_movepi8_mask(q);                                              \
            const __m256 dx = f16_bcast(x[i].d);                                                       \
            GM_UNROLL4 for (int c = 0; c < 4; ++c) q32_col_tail_vnni(ax, neg, dx, &y[c][i], &acc[c]);  \
        }                                                                                              \
        GM_UNROLL4 for (int c = 0; c < 4; ++c)                                                         \
            out[c] = hsum256(_mm256_add_ps(_mm512_castps512_ps256(acc[c]), _mm512_extractf32x8_ps(acc[c], 1))); \
    }

/* One weight row against one activation row: the x4 kernel's steps for a single column (so bit-identical
 * to it and to the AVX2 vec_dot), two blocks per 512-bit vector: the decode (batch of one) mat-vec. */
#define GM_Q32_DOT_512(name, BT, VALUES)                                                               \
    GM_VNNI static void name(int64_t n, float *out, const void *w, const void *a) {                    \
        const BT *x = w;                                                                               \
        const gm_block_q8_0 *y = a;                                                                    \
        const int64_t nb = n / GM_QK;                                                                  \
        __m512 acc = _mm512_setzero_ps();                                                              \
        int64_t i = 0;                                                                                 \
        for (; i + 1 < nb; i += 2) {                                                                   \
            const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(VALUES(&x[i])), VALUES(&x[i + 1]), 1); \
            q32_col2_vnni(_mm512_abs_epi8(q), _mm512_movepi8_mask(q), f16_bcast2(x[i].d, x[i + 1].d), &y[i], &acc); \
        }                                                                                              \
        if (i < nb) {                                                                                  \
            const __m256i q = VALUES(&x[i]);                                                           \
            q32_col_tail_vnni(_mm256_abs_epi8(q), _mm256_movepi8_mask(q), f16_bcast(x[i].d), &y[i], &acc); \
        }                                                                                              \
        *out = hsum256(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1)));    \
    }

GM_Q32_DOT_512(vec_dot_q8_0_vnni512, gm_block_q8_0, q8_0_values)
GM_Q32_DOT_512(vec_dot_q4_0_vnni512, gm_block_q4_0, q4_0_values)
GM_Q32_DOT_512(vec_dot_q5_0_vnni512, gm_block_q5_0, q5_0_values)
#undef GM_Q32_DOT_512

/* ---- Four weight rows against one to four activation rows (vec_dot_4xn), rows packed by gm_pack_rows4 ----
 * The four rows are one stream (each pair of blocks of the four rows side by side): four rows read in step from
 * their own places run at ~60% of one stream's bandwidth on the development VM, the kernel from memory at under
 * half its in-cache speed. Per (row, column) exactly the single kernel's float steps (the same mul, fma, tail and
 * final sums) on the same integer block sums, computed another way: the weights as unsigned bytes
 * u = value + BIAS (q4_0: the nibble, q5_0: the 5-bit value, q8_0: the byte with its top bit flipped), so
 * vpdpbusd takes them as they are, and each int32 lane starts from -BIAS * (its four activation bytes' sum):
 * exact in int32, so the lane sums equal the sign-transfer kernel's. Per pair of blocks and (row, column):
 * dpbusd, convert, mul, fma; per row: the unpack (4 ops for q4_0, no abs or sign mask) and the scales; per
 * column: the activation load, its scales and the bias term, shared by the four rows. */

/* Two blocks' 16 nibble bytes as 64 unsigned values in the activations' order: block i's low nibbles, its high
 * nibbles, then block i + 1's. */
static inline __m512i nibbles64(const uint8_t *qs0, const uint8_t *qs1) {
    const __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qs0)),
                                              _mm_loadu_si128((const __m128i *)qs1), 1);
    const __m512i z = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0), _mm512_castsi256_si512(t));
    return _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFF00FF00u, z, 4), _mm512_set1_epi8(0x0F));
}
static inline uint64_t qh64(const gm_block_q5_0 *b) { /* the fifth bits of blocks b[0] and b[1] */
    uint32_t h0, h1;
    memcpy(&h0, b[0].qh, 4);
    memcpy(&h1, b[1].qh, 4);
    return (uint64_t)h0 | (uint64_t)h1 << 32;
}
static inline __m512i q8_0_u64(const gm_block_q8_0 *b) {
    return _mm512_xor_si512(load2x32(b[0].qs, b[1].qs), _mm512_set1_epi8((char)0x80));
}
static inline __m512i q4_0_u64(const gm_block_q4_0 *b) { return nibbles64(b[0].qs, b[1].qs); }
static inline __m512i q5_0_u64(const gm_block_q5_0 *b) {
    const __m512i nib = nibbles64(b[0].qs, b[1].qs);
    return _mm512_mask_add_epi8(nib, qh64(b), nib, _mm512_set1_epi8(16));
}
static inline __m256i q8_0_u32(const gm_block_q8_0 *b) {
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b->qs), _mm256_set1_epi8((char)0x80));
}
static inline __m256i q4_0_u32(const gm_block_q4_0 *b) { return unpack_nibbles32(b->qs); }
static inline __m256i q5_0_u32(const gm_block_q5_0 *b) {
    uint32_t h;
    memcpy(&h, b->qh, 4);
    const __m256i nib = unpack_nibbles32(b->qs);
    return _mm256_mask_add_epi8(nib, h, nib, _mm256_set1_epi8(16));
}

/* f16(lo) in lanes 0-7, f16(hi) in lanes 8-15, converted by the F16C unit: the same values as f16_bcast2 without
 * its two lookups in the 256 KiB table, which the weights streaming through evict from L2. */
static inline __m512 f16_bcast2_cvt(gm_f16 lo, gm_f16 hi) {
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)lo | (uint32_t)hi << 16)));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_castps128_ps512(f));
}
/* The body for a constant column count nc (1..4); the wrapper below switches on it so each count is unrolled.
 * Packed group (gm_pack_rows4): pair j of row r at blocks 8j + 2r, 8j + 2r + 1; an odd last block of row r at
 * 8 * (nb / 2) + r. */
#define GM_Q32_DOT_4XN_512(name, BT, U64, U32, BIAS)                                                   \
    GM_VNNI GM_ALWAYS_INLINE void name##_body(int64_t n, float out[16], const BT *g, const gm_block_q8_0 *const y[4], \
                                              const int nc) {                                          \
        const int64_t nb = n / GM_QK;                                                                  \
        const __m512i bias = _mm512_set1_epi8((char)(BIAS)), zero = _mm512_setzero_si512();            \
        __m512 acc[4][4];                                                                              \
        GM_UNROLL4 for (int r = 0; r < 4; ++r) GM_UNROLL4 for (int c = 0; c < nc; ++c) acc[r][c] = _mm512_setzero_ps(); \
        int64_t i = 0;                                                                                 \
        for (; i + 1 < nb; i += 2, g += 8) {                                                           \
            __m512i u[4];                                                                              \
            __m512 dx[4];                                                                              \
            GM_UNROLL4 for (int r = 0; r < 4; ++r) {                                                   \
                u[r] = U64(&g[2 * r]);                                                                 \
                dx[r] = f16_bcast2_cvt(g[2 * r].d, g[2 * r + 1].d);                                    \
            }                                                                                          \
            GM_UNROLL4 for (int c = 0; c < nc; ++c) {                                                  \
                const __m512i yq = load2x32(y[c][i].qs, y[c][i + 1].qs);                               \
                const __m512 dy = f16_bcast2_cvt(y[c][i].d, y[c][i + 1].d);                            \
                const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, yq));     \
                GM_UNROLL4 for (int r = 0; r < 4; ++r) {                                               \
                    const __m512i p = _mm512_dpbusd_epi32(start, u[r], yq);                            \
                    acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(dx[r], dy), _mm512_cvtepi32_ps(p), acc[r][c]); \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
        if (i < nb) { /* the tail block: lanes 0-7 only, as the single kernel */                      \
            const __m256i bias8 = _mm256_set1_epi8((char)(BIAS)), zero8 = _mm256_setzero_si256();      \
            GM_UNROLL4 for (int c = 0; c < nc; ++c) {                                                  \
                const __m256i yq = _mm256_loadu_si256((const __m256i *)y[c][i].qs);                    \
                const __m256 dy = f16_bcast(y[c][i].d);                                                \
                const __m256i start = _mm256_sub_epi32(zero8, _mm256_dpbusd_epi32(zero8, bias8, yq));  \
                GM_UNROLL4 for (int r = 0; r < 4; ++r) {                                               \
                    const __m256i p = _mm256_dpbusd_epi32(start, U32(&g[r]), yq);                      \
                    const __m256 lo = _mm256_fmadd_ps(_mm256_mul_ps(f16_bcast(g[r].d), dy), _mm256_cvtepi32_ps(p), \
                                                      _mm512_castps512_ps256(acc[r][c]));              \
                    acc[r][c] = _mm512_insertf32x8(acc[r][c], lo, 0);                                  \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
        GM_UNROLL4 for (int r = 0; r < 4; ++r) GM_UNROLL4 for (int c = 0; c < nc; ++c)                 \
            out[4 * r + c] = hsum256(_mm256_add_ps(_mm512_castps512_ps256(acc[r][c]), _mm512_extractf32x8_ps(acc[r][c], 1))); \
    }                                                                                                  \
    GM_VNNI static void name(int64_t n, float out[16], const void *w4, const void *const a[4], int nc) { \
        const gm_block_q8_0 *const y[4] = {a[0], a[1], a[2], a[3]};                                    \
        switch (nc) {                                                                                  \
        case 1: name##_body(n, out, w4, y, 1); break;                                                  \
        case 2: name##_body(n, out, w4, y, 2); break;                                                  \
        case 3: name##_body(n, out, w4, y, 3); break;                                                  \
        default: name##_body(n, out, w4, y, 4); break;                                                 \
        }                                                                                              \
    }

GM_Q32_DOT_4XN_512(vec_dot_4xn_q8_0_vnni512, gm_block_q8_0, q8_0_u64, q8_0_u32, 128)
GM_Q32_DOT_4XN_512(vec_dot_4xn_q4_0_vnni512, gm_block_q4_0, q4_0_u64, q4_0_u32, 8)
GM_Q32_DOT_4XN_512(vec_dot_4xn_q5_0_vnni512, gm_block_q5_0, q5_0_u64, q5_0_u32, 16)
#undef GM_Q32_DOT_4XN_512

GM_Q32_DOT_X4_512(vec_dot_x4_q8_0_vnni512, gm_block_q8_0, q8_0_values)
GM_Q32_DOT_X4_512(vec_dot_x4_q4_0_vnni512, gm_block_q4_0, q4_0_values)
GM_Q32_DOT_X4_512(vec_dot_x4_q5_0_vnni512, gm_block_q5_0, q5_0_values)
#undef GM_Q32_DOT_X4_512

/* q4_1 / q5_1: unsigned values times signed activations, plus the min term (as quant_avx2.c writes it). */
GM_VNNI GM_ALWAYS_INLINE void q41_col_vnni(__m256i q, __m256 xd, float xm, const gm_block_q8_1 *y, __m256 *acc, float *summ) {
    const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, _mm256_loadu_si256((const __m256i *)y->qs));
    *acc = _mm256_fmadd_ps(_mm256_mul_ps(xd, f16_bcast(y->d)), _mm256_cvtepi32_ps(p), *acc);
    *summ += xm * f16(y->s);
}

#define GM_Q41_DOT_X4(name, BT, VALUES)                                                                \
    GM_VNNI static void name(int64_t n, float out[4], const void *w, const void *const a[4]) {         \
        const BT *x = w;                                                                               \
        const gm_block_q8_1 *const y[4] = {a[0], a[1], a[2], a[3]};                                    \
        __m256 acc[4];                                                                                 \
        float summ[4] = {0, 0, 0, 0};                                                                  \
        GM_UNROLL4 for (int c = 0; c < 4; ++c) acc[c] = _mm256_setzero_ps();                           \
        for (int64_t i = 0; i < n / GM_QK; ++i) {                                                      \
            const __m256i q = VALUES(&x[i]);                                                           \
            const __m256 xd = f16_bcast(x[i].d);                                                       \
            const float xm = f16(x[i].m);                                                              \
            q41_col_vnni(q, xd, xm, &y[0][i], &acc[0], &summ[0]);                                      \
            q41_col_vnni(q, xd, xm, &y[1][i], &acc[1], &summ[1]);                                      \
            q41_col_vnni(q, xd, xm, &y[2][i], &acc[2], &summ[2]);                                      \
            q41_col_vnni(q, xd, xm, &y[3][i], &acc[3], &summ[3]);                                      \
        }                                                                                              \
        GM_UNROLL4 for (int c = 0; c < 4; ++c) out[c] = hsum256(acc[c]) + summ[c];                     \
    }

GM_Q41_DOT_X4(vec_dot_x4_q4_1_vnni, gm_block_q4_1, q4_1_values)
GM_Q41_DOT_X4(vec_dot_x4_q5_1_vnni, gm_block_q5_1, q5_1_values)
#undef GM_Q41_DOT_X4

/* vec_dot and vec_dot_x4 of a type are always set together: x4 must match this table's vec_dot bit for bit. */
void gm_quant_fill_avx512(gm_type_cpu tab[GM_TYPE_COUNT]) {
    tab[GM_TYPE_Q4_K].vec_dot = vec_dot_q4_K;
    tab[GM_TYPE_Q4_K].vec_dot_x4 = vec_dot_x4_q4_K;
    tab[GM_TYPE_Q5_K].vec_dot = vec_dot_q5_K;
    tab[GM_TYPE_Q5_K].vec_dot_x4 = vec_dot_x4_q5_K;
    tab[GM_TYPE_Q6_K].vec_dot = vec_dot_q6_K;
    tab[GM_TYPE_Q6_K].vec_dot_x4 = vec_dot_x4_q6_K;
}

/* The VNNI kernels: each gives the results of the one it replaces (and so of this table's vec_dot); q8_0 / q4_0 /
 * q5_0 also get a 4xn. */
void gm_quant_fill_avx512_vnni(gm_type_cpu tab[GM_TYPE_COUNT]) {
    tab[GM_TYPE_Q8_0].vec_dot = vec_dot_q8_0_vnni512;
    tab[GM_TYPE_Q8_0].vec_dot_x4 = vec_dot_x4_q8_0_vnni512;
    tab[GM_TYPE_Q8_0].vec_dot_4xn = vec_dot_4xn_q8_0_vnni512;
    tab[GM_TYPE_Q4_0].vec_dot = vec_dot_q4_0_vnni512;
    tab[GM_TYPE_Q4_0].vec_dot_x4 = vec_dot_x4_q4_0_vnni512;
    tab[GM_TYPE_Q4_0].vec_dot_4xn = vec_dot_4xn_q4_0_vnni512;
    tab[GM_TYPE_Q5_0].vec_dot = vec_dot_q5_0_vnni512;
    tab[GM_TYPE_Q5_0].vec_dot_x4 = vec_dot_x4_q5_0_vnni512;
    tab[GM_TYPE_Q5_0].vec_dot_4xn = vec_dot_4xn_q5_0_vnni512;
    tab[GM_TYPE_Q4_1].vec_dot_x4 = vec_dot_x4_q4_1_vnni;
    tab[GM_TYPE_Q5_1].vec_dot_x4 = vec_dot_x4_q5_1_vnni;
    tab[GM_TYPE_Q4_K].vec_dot_x4 = vec_dot_x4_q4_K_vnni;
    tab[GM_TYPE_Q5_K].vec_dot_x4 = vec_dot_x4_q5_K_vnni;
    tab[GM_TYPE_Q6_K].vec_dot_x4 = vec_dot_x4_q6_K_vnni;
}
