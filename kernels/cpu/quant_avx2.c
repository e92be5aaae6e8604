/* quant_avx2.c: AVX2 + FMA + F16C kernels of the tensor element types: vec_dot of every weight type with
 * its vec_dot_type and its four-column form vec_dot_x4 (bit-identical per column), the activation
 * quantizers and the row dequantizers. Which one runs is decided in
 * quant_dispatch.c; the specification is kernels/ref. */
#include <immintrin.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_blocks.h"

/* Contracts with the reference: quantizers give its bytes, dequantizers its floats (one multiply, then one
 * subtract, never fused); vec_dot computes the same integer block sums and differs only in float rounding.
 * Precondition of every int8 dot (as in ggml): activation int8 values lie in -127..127, which the
 * quantizers guarantee; a -128 activation could overflow the sign trick of dot_i8. */

/* ---- helpers ---- */

static inline float f16(gm_f16 h) { return _cvtsh_ss(h); }

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hsum_ps128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Sums of adjacent int16 pairs, as int32 lanes. */
static inline __m256i sum_pairs_i16(__m256i v) { return _mm256_madd_epi16(v, _mm256_set1_epi16(1)); }

/* Products of signed bytes x*y, summed by 4 into 8 int32 lanes. y must not hold -128 where x < 0. */
static inline __m256i dot_i8(__m256i x, __m256i y) {
    const __m256i ax = _mm256_sign_epi8(x, x); /* |x|, read as unsigned */
    const __m256i sy = _mm256_sign_epi8(y, x); /* y with x's sign */
    return sum_pairs_i16(_mm256_maddubs_epi16(ax, sy));
}

/* 32 nibbles of 16 bytes as 32 bytes: bytes 0..15 the low nibbles, 16..31 the high ones. */
static inline __m256i unpack_nibbles32(const uint8_t *qs) {
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* 32 bits (little-endian) as 32 bytes: byte j is 0xFF when bit j is set, else 0. */
static inline __m256i expand_bits32(const uint8_t *p) {
    uint32_t h;
    memcpy(&h, p, 4);
    const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                            _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                              0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(rep, bit), bit);
}

/* ---- q8_0 / q4_0 / q5_0 with q8_0 ---- */

static void vec_dot_q8_0(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q8_0 *x = w;
    const gm_block_q8_0 *y = a;
    const int64_t nb = n / GM_QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i p0 = dot_i8(_mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p1 = dot_i8(_mm256_loadu_si256((const __m256i *)x[i + 1].qs), _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i + 1].d) * f16(y[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; ++i) {
        const __m256i p = dot_i8(_mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
}

static void vec_dot_q4_0(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q4_0 *x = w;
    const gm_block_q8_0 *y = a;
    const int64_t nb = n / GM_QK;
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i q0 = _mm256_sub_epi8(unpack_nibbles32(x[i].qs), eight);
        const __m256i q1 = _mm256_sub_epi8(unpack_nibbles32(x[i + 1].qs), eight);
        const __m256i p0 = dot_i8(q0, _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p1 = dot_i8(q1, _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i + 1].d) * f16(y[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; ++i) {
        const __m256i q = _mm256_sub_epi8(unpack_nibbles32(x[i].qs), eight);
        const __m256i p = dot_i8(q, _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* q5_0 values minus 16 as signed bytes: the low nibble, or the nibble - 16 (= nibble | 0xF0) where the
 * fifth bit is clear. */
static inline __m256i q5_0_values(const gm_block_q5_0 *b) {
    const __m256i hi = expand_bits32(b->qh);
    return _mm256_or_si256(unpack_nibbles32(b->qs), _mm256_andnot_si256(hi, _mm256_set1_epi8((char)0xF0)));
}

static void vec_dot_q5_0(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q5_0 *x = w;
    const gm_block_q8_0 *y = a;
    const int64_t nb = n / GM_QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i p0 = dot_i8(q5_0_values(&x[i]), _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p1 = dot_i8(q5_0_values(&x[i + 1]), _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i + 1].d) * f16(y[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; ++i) {
        const __m256i p = dot_i8(q5_0_values(&x[i]), _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* ---- the same three, one weight row against four activation rows (vec_dot_x4) ----
 * Per column exactly the single kernel: block i goes to accumulator i % 2 (the pairs loop puts even blocks
 * in acc0, odd ones in acc1, an odd tail block in acc0), scale f16(x.d) * f16(y.d), then fma; the final
 * hsum of acc0 + acc1. Only the weight unpacking and |x| are shared. */

#define GM_ALWAYS_INLINE static inline __attribute__((always_inline))
/* loops over the four columns unrolled, so that per-column arrays live in registers */
#define GM_UNROLL4 _Pragma("GCC unroll 4")

float gm_f16_f32[1 << 16];

/* f16(h) in all 8 lanes, by one broadcast load (the single kernels' set1(f16(x.d) * f16(y.d)) is the
 * product of two of these: the same float multiply in every lane). */
static inline __m256 f16_bcast(gm_f16 h) { return _mm256_broadcast_ss(&gm_f16_f32[h]); }

/* One column's step for block i: acc += (f16(x.d) * f16(y.d)) * (int32 lanes of dot_i8(q, y.qs)). */
GM_ALWAYS_INLINE void q32_col(__m256i ax, __m256i q, __m256 dx, const gm_block_q8_0 *y, __m256 *acc) {
    const __m256i p = sum_pairs_i16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y->qs), q)));
    *acc = _mm256_fmadd_ps(_mm256_mul_ps(dx, f16_bcast(y->d)), _mm256_cvtepi32_ps(p), *acc);
}

GM_ALWAYS_INLINE void q32_step(__m256i q, __m256 dx, const gm_block_q8_0 *const y[4], int64_t i, __m256 acc[4]) {
    const __m256i ax = _mm256_sign_epi8(q, q);
    q32_col(ax, q, dx, &y[0][i], &acc[0]);
    q32_col(ax, q, dx, &y[1][i], &acc[1]);
    q32_col(ax, q, dx, &y[2][i], &acc[2]);
    q32_col(ax, q, dx, &y[3][i], &acc[3]);
}

static inline __m256i q8_0_values(const gm_block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }
static inline __m256i q4_0_values(const gm_block_q4_0 *b) {
    return _mm256_sub_epi8(unpack_nibbles32(b->qs), _mm256_set1_epi8(8));
}

#define GM_Q32_DOT_X4(name, BT, VALUES)                                                                \
    static void name(int64_t n, float out[4], const void *w, const void *const a[4]) {                 \
        const BT *x = w;                                                                               \
        const gm_block_q8_0 *const y[4] = {a[0], a[1], a[2], a[3]};                                    \
        const int64_t nb = n / GM_QK;                                                                  \
        __m256 acc0[4], acc1[4];                                                                       \
        GM_UNROLL4 for (int c = 0; c < 4; ++c) acc0[c] = acc1[c] = _mm256_setzero_ps();                \
        int64_t i = 0;                                                                                 \
        for (; i + 1 < nb; i += 2) {                                                                   \
            q32_step(VALUES(&x[i]), f16_bcast(x[i].d), y, i, acc0);                                    \
            q32_step(VALUES(&x[i + 1]), f16_bcast(x[i + 1].d), y, i + 1, acc1);                        \
        }                                                                                              \
        for (; i < nb; ++i) q32_step(VALUES(&x[i]), f16_bcast(x[i].d), y, i, acc0);                    \
        GM_UNROLL4 for (int c = 0; c < 4; ++c) out[c] = hsum_ps(_mm256_add_ps(acc0[c], acc1[c]));      \
    }

GM_Q32_DOT_X4(vec_dot_x4_q8_0, gm_block_q8_0, q8_0_values)
GM_Q32_DOT_X4(vec_dot_x4_q4_0, gm_block_q4_0, q4_0_values)
GM_Q32_DOT_X4(vec_dot_x4_q5_0, gm_block_q5_0, q5_0_values)
#undef GM_Q32_DOT_X4

/* ---- q4_1 / q5_1 with q8_1: unsigned values times signed activations, plus the min term m * s ---- */

static void vec_dot_q4_1(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q4_1 *x = w;
    const gm_block_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0;
    for (int64_t i = 0; i < n / GM_QK; ++i) {
        const __m256i p = sum_pairs_i16(_mm256_maddubs_epi16(unpack_nibbles32(x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
        summ += f16(x[i].m) * f16(y[i].s);
    }
    *out = hsum_ps(acc) + summ;
}

static void vec_dot_q5_1(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q5_1 *x = w;
    const gm_block_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0;
    for (int64_t i = 0; i < n / GM_QK; ++i) {
        const __m256i hi = _mm256_and_si256(expand_bits32(x[i].qh), _mm256_set1_epi8(0x10));
        const __m256i q = _mm256_or_si256(unpack_nibbles32(x[i].qs), hi);
        const __m256i p = sum_pairs_i16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)y[i].qs)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
        summ += f16(x[i].m) * f16(y[i].s);
    }
    *out = hsum_ps(acc) + summ;
}

/* Four columns of q4_1 / q5_1: per column acc (fma of f16(x.d) * f16(y.d)) and summ (+= f16(x.m) * f16(y.s),
 * written as the single kernel writes it, so any contraction the compiler applies is the same). */
GM_ALWAYS_INLINE void q41_col(__m256i q, float xd, float xm, const gm_block_q8_1 *y, __m256 *acc, float *summ) {
    const __m256i p = sum_pairs_i16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)y->qs)));
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(xd * f16(y->d)), _mm256_cvtepi32_ps(p), *acc);
    *summ += xm * f16(y->s);
}

static inline __m256i q4_1_values(const gm_block_q4_1 *b) { return unpack_nibbles32(b->qs); }
static inline __m256i q5_1_values(const gm_block_q5_1 *b) {
    return _mm256_or_si256(unpack_nibbles32(b->qs), _mm256_and_si256(expand_bits32(b->qh), _mm256_set1_epi8(0x10)));
}

#define GM_Q41_DOT_X4(name, BT, VALUES)                                                                \
    static void name(int64_t n, float out[4], const void *w, const void *const a[4]) {                 \
        const BT *x = w;                                                                               \
        const gm_block_q8_1 *const y[4] = {a[0], a[1], a[2], a[3]};                                    \
        __m256 acc[4];                                                                                 \
        float summ[4] = {0, 0, 0, 0};                                                                  \
        GM_UNROLL4 for (int c = 0; c < 4; ++c) acc[c] = _mm256_setzero_ps();                           \
        for (int64_t i = 0; i < n / GM_QK; ++i) {                                                      \
            const __m256i q = VALUES(&x[i]);                                                           \
            const float xd = f16(x[i].d), xm = f16(x[i].m);                                            \
            q41_col(q, xd, xm, &y[0][i], &acc[0], &summ[0]);                                           \
            q41_col(q, xd, xm, &y[1][i], &acc[1], &summ[1]);                                           \
            q41_col(q, xd, xm, &y[2][i], &acc[2], &summ[2]);                                           \
            q41_col(q, xd, xm, &y[3][i], &acc[3], &summ[3]);                                           \
        }                                                                                              \
        GM_UNROLL4 for (int c = 0; c < 4; ++c) out[c] = hsum_ps(acc[c]) + summ[c];                     \
    }

GM_Q41_DOT_X4(vec_dot_x4_q4_1, gm_block_q4_1, q4_1_values)
GM_Q41_DOT_X4(vec_dot_x4_q5_1, gm_block_q5_1, q5_1_values)
#undef GM_Q41_DOT_X4

/* ---- K-quants with q8_K ---- */

/* int16 lane k of v (k = 0..7, same in both 128-bit halves) broadcast to all 16 lanes. */
static inline __m256i bcast_i16(__m256i v, int k) {
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)(((2 * k + 1) << 8) | (2 * k))));
}

/* The min term of q4_K / q5_K: sum over the 8 sub-blocks of m[b] * (sum of the 32 activations of b). */
static inline __m128i k4_min_term(const uint8_t sm[16], const int16_t bsums[16]) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    const __m128i s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(sm + 8)));
    return _mm_madd_epi16(mins, s32);
}

static void vec_dot_q4_K(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q4_K *x = w;
    const gm_block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        uint8_t sm[16];
        gm_unpack_scales_k4(x[i].scales, sm);
        const float d = f16(x[i].d) * y[i].d, dmin = f16(x[i].dmin) * y[i].d;
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_term(sm, y[i].bsums)), acc_m);

        const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sm)));
        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int g = 0; g < 4; ++g, q4 += 32, q8 += 64) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)q4);
            const __m256i lo = _mm256_and_si256(bits, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q8));
            __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            pl = _mm256_madd_epi16(bcast_i16(sc, 2 * g), pl);
            ph = _mm256_madd_epi16(bcast_i16(sc, 2 * g + 1), ph);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(acc) - hsum_ps128(acc_m);
}

static void vec_dot_q5_K(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q5_K *x = w;
    const gm_block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1), m2 = _mm256_set1_epi8(2);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        uint8_t sm[16];
        gm_unpack_scales_k4(x[i].scales, sm);
        const float d = f16(x[i].d) * y[i].d, dmin = f16(x[i].dmin) * y[i].d;
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_term(sm, y[i].bsums)), acc_m);

        const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sm)));
        __m256i hbits = _mm256_loadu_si256((const __m256i *)x[i].qh);
        const uint8_t *q5 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int g = 0; g < 4; ++g, q5 += 32, q8 += 64) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)q5);
            /* bits 2g and 2g+1 of each qh byte sit in bits 0 and 1 after g shifts by 2 */
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_slli_epi16(_mm256_and_si256(hbits, m1), 4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(hbits, m2), 3));
            hbits = _mm256_srli_epi16(hbits, 2);
            __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q8));
            __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            pl = _mm256_madd_epi16(bcast_i16(sc, 2 * g), pl);
            ph = _mm256_madd_epi16(bcast_i16(sc, 2 * g + 1), ph);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(acc) - hsum_ps128(acc_m);
}

/* Four columns of q4_K: per column the single kernel's acc / acc_m and its block sum sumi (the same int32
 * lanes: integer sums are exact, so only the float steps need the single kernel's order). */
GM_ALWAYS_INLINE void q4_K_col_group(__m256i lo, __m256i hi, __m256i sl, __m256i sh, const int8_t *q8, __m256i *sumi) {
    const __m256i pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q8)));
    const __m256i ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 32))));
    *sumi = _mm256_add_epi32(*sumi, _mm256_add_epi32(pl, ph));
}

/* The float steps of one q4_K / q5_K block for one column, as the single kernels do them. */
GM_ALWAYS_INLINE void k4_col_finish(float xd, float xdmin, const uint8_t sm[16], const gm_block_q8_K *y, __m256i sumi,
                                    __m256 *acc, __m128 *acc_m) {
    const float d = xd * y->d, dmin = xdmin * y->d;
    *acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_term(sm, y->bsums)), *acc_m);
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), *acc);
}

static void vec_dot_x4_q4_K(int64_t n, float out[4], const void *w, const void *const a[4]) {
    const gm_block_q4_K *x = w;
    const gm_block_q8_K *const y[4] = {a[0], a[1], a[2], a[3]};
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4];
    __m128 acc_m[4];
    GM_UNROLL4 for (int c = 0; c < 4; ++c) acc[c] = _mm256_setzero_ps(), acc_m[c] = _mm_setzero_ps();
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        uint8_t sm[16];
        gm_unpack_scales_k4(x[i].scales, sm);
        const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sm)));
        __m256i sumi[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int g = 0; g < 4; ++g) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * g));
            const __m256i lo = _mm256_and_si256(bits, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            const __m256i sl = bcast_i16(sc, 2 * g), sh = bcast_i16(sc, 2 * g + 1);
            q4_K_col_group(lo, hi, sl, sh, y[0][i].qs + 64 * g, &sumi[0]);
            q4_K_col_group(lo, hi, sl, sh, y[1][i].qs + 64 * g, &sumi[1]);
            q4_K_col_group(lo, hi, sl, sh, y[2][i].qs + 64 * g, &sumi[2]);
            q4_K_col_group(lo, hi, sl, sh, y[3][i].qs + 64 * g, &sumi[3]);
        }
        const float xd = f16(x[i].d), xdmin = f16(x[i].dmin);
        k4_col_finish(xd, xdmin, sm, &y[0][i], sumi[0], &acc[0], &acc_m[0]);
        k4_col_finish(xd, xdmin, sm, &y[1][i], sumi[1], &acc[1], &acc_m[1]);
        k4_col_finish(xd, xdmin, sm, &y[2][i], sumi[2], &acc[2], &acc_m[2]);
        k4_col_finish(xd, xdmin, sm, &y[3][i], sumi[3], &acc[3], &acc_m[3]);
    }
    GM_UNROLL4 for (int c = 0; c < 4; ++c) out[c] = hsum_ps(acc[c]) - hsum_ps128(acc_m[c]);
}

static void vec_dot_x4_q5_K(int64_t n, float out[4], const void *w, const void *const a[4]) {
    const gm_block_q5_K *x = w;
    const gm_block_q8_K *const y[4] = {a[0], a[1], a[2], a[3]};
    const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1), m2 = _mm256_set1_epi8(2);
    __m256 acc[4];
    __m128 acc_m[4];
    GM_UNROLL4 for (int c = 0; c < 4; ++c) acc[c] = _mm256_setzero_ps(), acc_m[c] = _mm_setzero_ps();
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        uint8_t sm[16];
        gm_unpack_scales_k4(x[i].scales, sm);
        const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sm)));
        __m256i hbits = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int g = 0; g < 4; ++g) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * g));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_slli_epi16(_mm256_and_si256(hbits, m1), 4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(hbits, m2), 3));
            hbits = _mm256_srli_epi16(hbits, 2);
            const __m256i sl = bcast_i16(sc, 2 * g), sh = bcast_i16(sc, 2 * g + 1);
            q4_K_col_group(lo, hi, sl, sh, y[0][i].qs + 64 * g, &sumi[0]);
            q4_K_col_group(lo, hi, sl, sh, y[1][i].qs + 64 * g, &sumi[1]);
            q4_K_col_group(lo, hi, sl, sh, y[2][i].qs + 64 * g, &sumi[2]);
            q4_K_col_group(lo, hi, sl, sh, y[3][i].qs + 64 * g, &sumi[3]);
        }
        const float xd = f16(x[i].d), xdmin = f16(x[i].dmin);
        k4_col_finish(xd, xdmin, sm, &y[0][i], sumi[0], &acc[0], &acc_m[0]);
        k4_col_finish(xd, xdmin, sm, &y[1][i], sumi[1], &acc[1], &acc_m[1]);
        k4_col_finish(xd, xdmin, sm, &y[2][i], sumi[2], &acc[2], &acc_m[2]);
        k4_col_finish(xd, xdmin, sm, &y[3][i], sumi[3], &acc[3], &acc_m[3]);
    }
    GM_UNROLL4 for (int c = 0; c < 4; ++c) out[c] = hsum_ps(acc[c]) - hsum_ps128(acc_m[c]);
}

/* Scales of sub-blocks b and b+1 as 16 int16 lanes: 8 of scales[b], then 8 of scales[b+1]. */
static inline __m256i q6_scale_pair(__m128i scales, int b) {
    const __m128i sel = _mm_set_epi64x((long long)(0x0101010101010101ULL * (uint64_t)(b + 1)),
                                       (long long)(0x0101010101010101ULL * (uint64_t)b));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, sel));
}

static void vec_dot_q6_K(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q6_K *x = w;
    const gm_block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    const __m256i m3_2 = _mm256_set1_epi8(3 << 2), m3_4 = _mm256_set1_epi8(3 << 4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        const __m128i scales = _mm_loadu_si128((const __m128i *)x[i].scales);
        /* The stored values are q + 32 (0..63): dot(q, a) = dot(q + 32, a) - 32 * sum(a), per sub-block. */
        const __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scales), _mm256_loadu_si256((const __m256i *)y[i].bsums));
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
        for (int h = 0; h < 2; ++h) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *q8 = y[i].qs + 128 * h;
            const __m256i b1 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i b2 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i bh = _mm256_loadu_si256((const __m256i *)qh);
            const __m256i q0 = _mm256_or_si256(_mm256_and_si256(b1, m4), _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4));
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(b2, m4), _mm256_slli_epi16(_mm256_and_si256(bh, m3_2), 2));
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4), _mm256_and_si256(bh, m3_4));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
                                               _mm256_and_si256(_mm256_srli_epi16(bh, 2), m3_4));
            const __m256i p0 = _mm256_maddubs_epi16(q0, _mm256_loadu_si256((const __m256i *)q8));
            const __m256i p1 = _mm256_maddubs_epi16(q1, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            const __m256i p2 = _mm256_maddubs_epi16(q2, _mm256_loadu_si256((const __m256i *)(q8 + 64)));
            const __m256i p3 = _mm256_maddubs_epi16(q3, _mm256_loadu_si256((const __m256i *)(q8 + 96)));
            const __m256i s01 = _mm256_add_epi32(_mm256_madd_epi16(q6_scale_pair(scales, 8 * h + 0), p0),
                                                 _mm256_madd_epi16(q6_scale_pair(scales, 8 * h + 2), p1));
            const __m256i s23 = _mm256_add_epi32(_mm256_madd_epi16(q6_scale_pair(scales, 8 * h + 4), p2),
                                                 _mm256_madd_epi16(q6_scale_pair(scales, 8 * h + 6), p3));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(s01, s23));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(acc);
}

/* Four columns of q6_K: the weight values and scale pairs of each half made once, the block sums per
 * column as the single kernel makes them (same int32 lanes), then its float step. */
GM_ALWAYS_INLINE void q6_K_col_half(const __m256i q[4], const __m256i sp[4], const int8_t *q8, __m256i *sumi) {
    const __m256i p0 = _mm256_maddubs_epi16(q[0], _mm256_loadu_si256((const __m256i *)q8));
    const __m256i p1 = _mm256_maddubs_epi16(q[1], _mm256_loadu_si256((const __m256i *)(q8 + 32)));
    const __m256i p2 = _mm256_maddubs_epi16(q[2], _mm256_loadu_si256((const __m256i *)(q8 + 64)));
    const __m256i p3 = _mm256_maddubs_epi16(q[3], _mm256_loadu_si256((const __m256i *)(q8 + 96)));
    const __m256i s01 = _mm256_add_epi32(_mm256_madd_epi16(sp[0], p0), _mm256_madd_epi16(sp[1], p1));
    const __m256i s23 = _mm256_add_epi32(_mm256_madd_epi16(sp[2], p2), _mm256_madd_epi16(sp[3], p3));
    *sumi = _mm256_add_epi32(*sumi, _mm256_add_epi32(s01, s23));
}

GM_ALWAYS_INLINE __m256i q6_K_col_offset(__m256i scales16, const gm_block_q8_K *y) {
    const __m256i off = _mm256_madd_epi16(scales16, _mm256_loadu_si256((const __m256i *)y->bsums));
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
}

static void vec_dot_x4_q6_K(int64_t n, float out[4], const void *w, const void *const a[4]) {
    const gm_block_q6_K *x = w;
    const gm_block_q8_K *const y[4] = {a[0], a[1], a[2], a[3]};
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    const __m256i m3_2 = _mm256_set1_epi8(3 << 2), m3_4 = _mm256_set1_epi8(3 << 4);
    __m256 acc[4];
    GM_UNROLL4 for (int c = 0; c < 4; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        const __m128i scales = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i scales16 = _mm256_cvtepi8_epi16(scales);
        __m256i sumi[4];
        GM_UNROLL4 for (int c = 0; c < 4; ++c) sumi[c] = q6_K_col_offset(scales16, &y[c][i]);
        for (int h = 0; h < 2; ++h) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const __m256i b1 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i b2 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i bh = _mm256_loadu_si256((const __m256i *)qh);
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(b1, m4), _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4)),
                _mm256_or_si256(_mm256_and_si256(b2, m4), _mm256_slli_epi16(_mm256_and_si256(bh, m3_2), 2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4), _mm256_and_si256(bh, m3_4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4), _mm256_and_si256(_mm256_srli_epi16(bh, 2), m3_4))};
            const __m256i sp[4] = {q6_scale_pair(scales, 8 * h + 0), q6_scale_pair(scales, 8 * h + 2),
                                   q6_scale_pair(scales, 8 * h + 4), q6_scale_pair(scales, 8 * h + 6)};
            q6_K_col_half(q, sp, y[0][i].qs + 128 * h, &sumi[0]);
            q6_K_col_half(q, sp, y[1][i].qs + 128 * h, &sumi[1]);
            q6_K_col_half(q, sp, y[2][i].qs + 128 * h, &sumi[2]);
            q6_K_col_half(q, sp, y[3][i].qs + 128 * h, &sumi[3]);
        }
        const float xd = f16(x[i].d);
        GM_UNROLL4 for (int c = 0; c < 4; ++c) acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(xd * y[c][i].d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
    }
    GM_UNROLL4 for (int c = 0; c < 4; ++c) out[c] = hsum_ps(acc[c]);
}

/* ---- float types: four accumulators of 8, scalar tail ---- */

static inline __m256 load_bf16x8(const gm_bf16 *p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static inline __m256 load_f16x8(const gm_f16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* Weights of type T (LOAD / SCALAR convert them), f32 activations. */
#define GM_FLOAT_DOT(name, T, LOAD, SCALAR)                                                       \
    static void name(int64_t n, float *out, const void *w, const void *a) {                       \
        const T *x = w;                                                                           \
        const float *y = a;                                                                       \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                               \
        int64_t i = 0;                                                                            \
        for (; i + 32 <= n; i += 32) {                                                            \
            s0 = _mm256_fmadd_ps(LOAD(x + i), _mm256_loadu_ps(y + i), s0);                        \
            s1 = _mm256_fmadd_ps(LOAD(x + i + 8), _mm256_loadu_ps(y + i + 8), s1);                \
            s2 = _mm256_fmadd_ps(LOAD(x + i + 16), _mm256_loadu_ps(y + i + 16), s2);              \
            s3 = _mm256_fmadd_ps(LOAD(x + i + 24), _mm256_loadu_ps(y + i + 24), s3);              \
        }                                                                                         \
        for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(LOAD(x + i), _mm256_loadu_ps(y + i), s0); \
        float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));         \
        for (; i < n; ++i) sum += SCALAR(x[i]) * y[i];                                            \
        *out = sum;                                                                               \
    }

/* Four columns, two at a time (eight accumulators fit the 16 registers): per column the single kernel's
 * four accumulators, tail and scalar tail, the weights loaded and converted once per pair of columns. */
#define GM_FLOAT_DOT_X4(name, T, LOAD, SCALAR)                                                    \
    static void name(int64_t n, float out[4], const void *w, const void *const a[4]) {            \
        const T *x = w;                                                                           \
        for (int c = 0; c < 4; c += 2) {                                                          \
            const float *y0 = a[c], *y1 = a[c + 1];                                               \
            __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                           \
            __m256 t0 = s0, t1 = s0, t2 = s0, t3 = s0;                                            \
            int64_t i = 0;                                                                        \
            for (; i + 32 <= n; i += 32) {                                                        \
                const __m256 w0 = LOAD(x + i), w1 = LOAD(x + i + 8);                              \
                const __m256 w2 = LOAD(x + i + 16), w3 = LOAD(x + i + 24);                        \
                s0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y0 + i), s0);                            \
                s1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(y0 + i + 8), s1);                        \
                s2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(y0 + i + 16), s2);                       \
                s3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(y0 + i + 24), s3);                       \
                t0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y1 + i), t0);                            \
                t1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(y1 + i + 8), t1);                        \
                t2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(y1 + i + 16), t2);                       \
                t3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(y1 + i + 24), t3);                       \
            }                                                                                     \
            for (; i + 8 <= n; i += 8) {                                                          \
                const __m256 w0 = LOAD(x + i);                                                    \
                s0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y0 + i), s0);                            \
                t0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y1 + i), t0);                            \
            }                                                                                     \
            float sum0 = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));    \
            float sum1 = hsum_ps(_mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3)));    \
            for (; i < n; ++i) {                                                                  \
                sum0 += SCALAR(x[i]) * y0[i];                                                     \
                sum1 += SCALAR(x[i]) * y1[i];                                                     \
            }                                                                                     \
            out[c] = sum0;                                                                        \
            out[c + 1] = sum1;                                                                    \
        }                                                                                         \
    }

static inline float f32_id(float v) { return v; }
GM_FLOAT_DOT(vec_dot_f32, float, _mm256_loadu_ps, f32_id)
GM_FLOAT_DOT(vec_dot_f16, gm_f16, load_f16x8, f16)
GM_FLOAT_DOT(vec_dot_bf16, gm_bf16, load_bf16x8, gm_bf16_to_f32)
GM_FLOAT_DOT_X4(vec_dot_x4_f32, float, _mm256_loadu_ps, f32_id)
GM_FLOAT_DOT_X4(vec_dot_x4_f16, gm_f16, load_f16x8, f16)
GM_FLOAT_DOT_X4(vec_dot_x4_bf16, gm_bf16, load_bf16x8, gm_bf16_to_f32)
#undef GM_FLOAT_DOT
#undef GM_FLOAT_DOT_X4

/* ---- activation quantizers, byte-identical to the reference ---- */

/* Four vectors of 8 int32 as 32 int8 in order (signed saturation). */
static inline __m256i pack_i32x32_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    const __m256i abcd = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

static inline float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static void quantize_q8_0(const float *src, void *dst, int64_t n) {
    gm_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / GM_QK; ++i, src += GM_QK) {
        __m256 v[4];
        for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(src + 8 * k);
        const __m256 mx = _mm256_max_ps(_mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])), _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3])));
        /* gm_quantize_q8_0_act_ref: id = 127/amax, round half to even (llama.cpp's x86 quantizer) */
        const float amax = hmax_ps(mx);
        const float id = amax != 0 ? 127.0f / amax : 0.0f;
        y[i].d = gm_f32_to_f16(amax / 127.0f);
        const __m256 vid = _mm256_set1_ps(id);
#define GM_RNE(x) _mm256_cvtps_epi32(_mm256_round_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
        const __m256i q = pack_i32x32_i8(GM_RNE(_mm256_mul_ps(v[0], vid)), GM_RNE(_mm256_mul_ps(v[1], vid)),
                                         GM_RNE(_mm256_mul_ps(v[2], vid)), GM_RNE(_mm256_mul_ps(v[3], vid)));
#undef GM_RNE
        _mm256_storeu_si256((__m256i *)y[i].qs, q);
    }
}

static void quantize_q8_K(const float *src, void *dst, int64_t n) {
    gm_block_q8_K *y = dst;
    for (int64_t i = 0; i < n / GM_QK_K; ++i, src += GM_QK_K) {
        __m256 mx = _mm256_setzero_ps();
        for (int k = 0; k < GM_QK_K; k += 8) mx = _mm256_max_ps(mx, abs_ps(_mm256_loadu_ps(src + k)));
        const float amax = hmax_ps(mx);
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the first element of largest magnitude, with its sign (the reference's choice on ties) */
        float max = amax;
        const __m256 vamax = _mm256_set1_ps(amax);
        for (int k = 0; k < GM_QK_K; k += 8) {
            const __m256 v = _mm256_loadu_ps(src + k);
            const int m = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(v), vamax, _CMP_EQ_OQ));
            if (m) {
                max = src[k + __builtin_ctz((unsigned)m)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 vis = _mm256_set1_ps(iscale);
        for (int k = 0; k < GM_QK_K; k += 32) {
            __m256i q[4];
            for (int j = 0; j < 4; ++j) /* cvtps rounds to nearest even, like the reference's nearest_int */
                q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(vis, _mm256_loadu_ps(src + k + 8 * j)));
            const __m256i q8 = pack_i32x32_i8(q[0], q[1], q[2], q[3]); /* saturation = the reference's min(127) */
            _mm256_storeu_si256((__m256i *)(y[i].qs + k), q8);
            /* bsums of the two 16-byte halves: sad of (q ^ 0x80) sums q + 128 per 8 bytes */
            const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q8, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
            uint64_t s[4];
            _mm256_storeu_si256((__m256i *)s, sad);
            y[i].bsums[k / 16] = (int16_t)((int)(s[0] + s[1]) - 16 * 128);
            y[i].bsums[k / 16 + 1] = (int16_t)((int)(s[2] + s[3]) - 16 * 128);
        }
        y[i].d = 1 / iscale;
    }
}

static void quantize_f16(const float *src, void *dst, int64_t n) {
    gm_f16 *y = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) y[i] = gm_f32_to_f16(src[i]);
}

/* ---- dequantizers, float-identical to the reference (one multiply, then one subtract, per value) ---- */

static void dequantize_q8_0(const void *src, float *dst, int64_t n) {
    const gm_block_q8_0 *x = src;
    for (int64_t i = 0; i < n / GM_QK; ++i, dst += GM_QK) {
        const __m256 d = _mm256_set1_ps(f16(x[i].d));
        for (int k = 0; k < GM_QK; k += 8) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + k)));
            _mm256_storeu_ps(dst + k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

static void dequantize_q4_0(const void *src, float *dst, int64_t n) {
    const gm_block_q4_0 *x = src;
    const __m256i m4 = _mm256_set1_epi32(0x0F), eight = _mm256_set1_epi32(8);
    for (int64_t i = 0; i < n / GM_QK; ++i, dst += GM_QK) {
        const __m256 d = _mm256_set1_ps(f16(x[i].d));
        for (int k = 0; k < 16; k += 8) {
            const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + k)));
            const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(b, m4), eight);
            const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(b, 4), eight);
            _mm256_storeu_ps(dst + k, _mm256_mul_ps(_mm256_cvtepi32_ps(lo), d));
            _mm256_storeu_ps(dst + k + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(hi), d));
        }
    }
}

static void dequantize_q4_K(const void *src, float *dst, int64_t n) {
    const gm_block_q4_K *x = src;
    const __m256i m4 = _mm256_set1_epi32(0x0F);
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        uint8_t sm[16];
        gm_unpack_scales_k4(x[i].scales, sm);
        const float d = f16(x[i].d), dmin = f16(x[i].dmin);
        for (int g = 0; g < 4; ++g, dst += 64) {
            const __m256 d1 = _mm256_set1_ps(d * sm[2 * g]), m1 = _mm256_set1_ps(dmin * sm[8 + 2 * g]);
            const __m256 d2 = _mm256_set1_ps(d * sm[2 * g + 1]), m2 = _mm256_set1_ps(dmin * sm[8 + 2 * g + 1]);
            for (int k = 0; k < 32; k += 8) {
                const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + 32 * g + k)));
                const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(b, m4));
                const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
                _mm256_storeu_ps(dst + k, _mm256_sub_ps(_mm256_mul_ps(d1, lo), m1));
                _mm256_storeu_ps(dst + 32 + k, _mm256_sub_ps(_mm256_mul_ps(d2, hi), m2));
            }
        }
    }
}

static void dequantize_q6_K(const void *src, float *dst, int64_t n) {
    const gm_block_q6_K *x = src;
    const __m256i m4 = _mm256_set1_epi32(0x0F), m3 = _mm256_set1_epi32(3), off = _mm256_set1_epi32(32);
    for (int64_t i = 0; i < n / GM_QK_K; ++i, dst += GM_QK_K) {
        const float d = f16(x[i].d);
        for (int h = 0; h < 2; ++h) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            float *o = dst + 128 * h;
            for (int l = 0; l < 32; l += 8) {
                const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l)));
                const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + 32 + l)));
                const __m256i hb = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + l)));
                __m256i q[4];
                q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi32(_mm256_and_si256(hb, m3), 4));
                q[1] = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 2), m3), 4));
                q[2] = _mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 4), m3), 4));
                q[3] = _mm256_or_si256(_mm256_srli_epi32(b, 4), _mm256_slli_epi32(_mm256_srli_epi32(hb, 6), 4));
                for (int k = 0; k < 4; ++k) {
                    const int sub = 8 * h + 2 * k + l / 16; /* 16-element sub-block of element 128h + 32k + l */
                    const __m256 ds = _mm256_set1_ps(d * (float)x[i].scales[sub]);
                    const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(q[k], off));
                    _mm256_storeu_ps(o + 32 * k + l, _mm256_mul_ps(ds, v));
                }
            }
        }
    }
}

static void dequantize_f16(const void *src, float *dst, int64_t n) {
    const gm_f16 *x = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16x8(x + i));
    for (; i < n; ++i) dst[i] = gm_f16_to_f32(x[i]);
}

static void dequantize_bf16(const void *src, float *dst, int64_t n) {
    const gm_bf16 *x = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_bf16x8(x + i));
    for (; i < n; ++i) dst[i] = gm_bf16_to_f32(x[i]);
}

void gm_quant_fill_avx2(gm_type_cpu tab[GM_TYPE_COUNT]) {
    for (uint32_t h = 0; h < (1u << 16); ++h) gm_f16_f32[h] = f16((gm_f16)h);
    tab[GM_TYPE_F32].vec_dot = vec_dot_f32;
    tab[GM_TYPE_F16] = (gm_type_cpu){.dequantize = dequantize_f16, .quantize = quantize_f16, .vec_dot = vec_dot_f16};
    tab[GM_TYPE_BF16].dequantize = dequantize_bf16;
    tab[GM_TYPE_BF16].vec_dot = vec_dot_bf16;
    tab[GM_TYPE_Q4_0].dequantize = dequantize_q4_0;
    tab[GM_TYPE_Q4_0].vec_dot = vec_dot_q4_0;
    tab[GM_TYPE_Q4_1].vec_dot = vec_dot_q4_1;
    tab[GM_TYPE_Q5_0].vec_dot = vec_dot_q5_0;
    tab[GM_TYPE_Q5_1].vec_dot = vec_dot_q5_1;
    tab[GM_TYPE_Q8_0] = (gm_type_cpu){.dequantize = dequantize_q8_0, .quantize = quantize_q8_0, .vec_dot = vec_dot_q8_0};
    tab[GM_TYPE_Q4_K].dequantize = dequantize_q4_K;
    tab[GM_TYPE_Q4_K].vec_dot = vec_dot_q4_K;
    tab[GM_TYPE_Q5_K].vec_dot = vec_dot_q5_K;
    tab[GM_TYPE_Q6_K].dequantize = dequantize_q6_K;
    tab[GM_TYPE_Q6_K].vec_dot = vec_dot_q6_K;
    tab[GM_TYPE_Q8_K].quantize = quantize_q8_K;
    /* after the struct assignments above, which would clear them */
    tab[GM_TYPE_F32].vec_dot_x4 = vec_dot_x4_f32;
    tab[GM_TYPE_F16].vec_dot_x4 = vec_dot_x4_f16;
    tab[GM_TYPE_BF16].vec_dot_x4 = vec_dot_x4_bf16;
    tab[GM_TYPE_Q4_0].vec_dot_x4 = vec_dot_x4_q4_0;
    tab[GM_TYPE_Q4_1].vec_dot_x4 = vec_dot_x4_q4_1;
    tab[GM_TYPE_Q5_0].vec_dot_x4 = vec_dot_x4_q5_0;
    tab[GM_TYPE_Q5_1].vec_dot_x4 = vec_dot_x4_q5_1;
    tab[GM_TYPE_Q8_0].vec_dot_x4 = vec_dot_x4_q8_0;
    tab[GM_TYPE_Q4_K].vec_dot_x4 = vec_dot_x4_q4_K;
    tab[GM_TYPE_Q5_K].vec_dot_x4 = vec_dot_x4_q5_K;
    tab[GM_TYPE_Q6_K].vec_dot_x4 = vec_dot_x4_q6_K;
}
