/* quant_ref_k.c: the scalar reference (the oracle) of the K-quants q4_K, q5_K, q6_K and of q8_K, their
 * activation type: dequantize as ggml, quantize, vec_dot in integer block sums scaled once per block like
 * ggml's generic code. The 32-element types live in quant_ref_legacy.c, SIMD versions in kernels/cpu. */
#include <math.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_blocks.h"

/* q8_K's quantizer is bit-exact with ggml's quantize_row_q8_K_ref (except that an all-zero block gets zero
 * bsums, which ggml leaves unwritten). The weight quantizers are plain round-to-nearest with a max-based
 * scale choice, for synthetic models and tests, not ggml's iterative search. No a*b-c is fused (see
 * quant_ref_legacy.c). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Round to nearest, ties to even, for |f| <= 2^22 (ggml's nearest_int: the float add does the rounding). */
static inline int nearest_int(float f) {
    const float v = f + 12582912.f; /* 1.5 * 2^23 */
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- q4_K / q5_K shared: sub-block scales and mins ---- */

static void pack_scales_k4(const int sc[8], const int m[8], uint8_t s[12]) {
    for (int j = 0; j < 4; ++j) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
    }
}

/* Quantizes one 256-element super-block with nmax levels per element (15 or 31) into sub-block 6-bit
 * scales and mins: x ≈ d*sc[b] * q - dmin*m[b]. Each sub-block maps [min(0, lo), hi] onto 0..nmax; the
 * scales and mins are then rounded onto the f16 super-block scales. Writes q[256], sc, m, d, dmin. */
static void quantize_k4_superblock(const float *x, int nmax, int q[GM_QK_K], int sc[8], int m[8], gm_f16 *d_out,
                                   gm_f16 *dmin_out) {
    float scale[8], minv[8], max_scale = 0, max_min = 0;
    for (int b = 0; b < 8; ++b) {
        float lo = 0, hi = x[32 * b];
        for (int l = 0; l < 32; ++l) {
            lo = fminf(lo, x[32 * b + l]);
            hi = fmaxf(hi, x[32 * b + l]);
        }
        scale[b] = (hi - lo) / (float)nmax;
        minv[b] = -lo;
        max_scale = fmaxf(max_scale, scale[b]);
        max_min = fmaxf(max_min, minv[b]);
    }
    *d_out = gm_f32_to_f16(max_scale / 63);
    *dmin_out = gm_f32_to_f16(max_min / 63);
    const float d = gm_f16_to_f32(*d_out), dmin = gm_f16_to_f32(*dmin_out);
    for (int b = 0; b < 8; ++b) {
        sc[b] = d > 0 ? clampi(nearest_int(scale[b] / d), 0, 63) : 0;
        m[b] = dmin > 0 ? clampi(nearest_int(minv[b] / dmin), 0, 63) : 0;
        const float ds = d * (float)sc[b], dm = dmin * (float)m[b];
        for (int l = 0; l < 32; ++l)
            q[32 * b + l] = ds > 0 ? clampi(nearest_int((x[32 * b + l] + dm) / ds), 0, nmax) : 0;
    }
}

/* ---- q4_K ---- */

void gm_dequantize_q4_K_ref(const void *src, float *dst, int64_t n) {
    const gm_block_q4_K *x = src;
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        const float d = gm_f16_to_f32(x[i].d), dmin = gm_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int g = 0; g < 4; ++g, q += 32) {
            uint8_t sc, m;
            gm_scale_min_k4(2 * g, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            gm_scale_min_k4(2 * g + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; ++l) *dst++ = d1 * (float)(q[l] & 0x0F) - m1;
            for (int l = 0; l < 32; ++l) *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void gm_quantize_q4_K_ref(const float *src, void *dst, int64_t n) {
    gm_block_q4_K *y = dst;
    for (int64_t i = 0; i < n / GM_QK_K; ++i, src += GM_QK_K) {
        int q[GM_QK_K], sc[8], m[8];
        quantize_k4_superblock(src, 15, q, sc, m, &y[i].d, &y[i].dmin);
        pack_scales_k4(sc, m, y[i].scales);
        for (int g = 0; g < 4; ++g)
            for (int l = 0; l < 32; ++l) y[i].qs[32 * g + l] = (uint8_t)(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
    }
}

void gm_vec_dot_q4_K_ref(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q4_K *x = w;
    const gm_block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        uint8_t sm[16]; /* scales 0..7, mins 8..15 */
        gm_unpack_scales_k4(x[i].scales, sm);
        const int8_t *a8 = y[i].qs;
        int32_t sumi = 0;
        for (int g = 0; g < 4; ++g) {
            int32_t lo = 0, hi = 0;
            for (int l = 0; l < 32; ++l) {
                lo += (x[i].qs[32 * g + l] & 0x0F) * a8[64 * g + l];
                hi += (x[i].qs[32 * g + l] >> 4) * a8[64 * g + 32 + l];
            }
            sumi += sm[2 * g] * lo + sm[2 * g + 1] * hi;
        }
        /* min term: sum over sub-blocks of m[b] * sum(a in b), from the 16-element bsums */
        int32_t summ = 0;
        for (int k = 0; k < 16; ++k) summ += sm[8 + k / 2] * y[i].bsums[k];
        sum += gm_f16_to_f32(x[i].d) * y[i].d * (float)sumi - gm_f16_to_f32(x[i].dmin) * y[i].d * (float)summ;
    }
    *out = sum;
}

/* ---- q5_K ---- */

void gm_dequantize_q5_K_ref(const void *src, float *dst, int64_t n) {
    const gm_block_q5_K *x = src;
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        const float d = gm_f16_to_f32(x[i].d), dmin = gm_f16_to_f32(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        for (int g = 0; g < 4; ++g, ql += 32) {
            uint8_t sc, m;
            gm_scale_min_k4(2 * g, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            gm_scale_min_k4(2 * g + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            const uint8_t b1 = (uint8_t)(1u << (2 * g)), b2 = (uint8_t)(2u << (2 * g));
            for (int l = 0; l < 32; ++l) *dst++ = d1 * (float)((ql[l] & 0x0F) + (qh[l] & b1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *dst++ = d2 * (float)((ql[l] >> 4) + (qh[l] & b2 ? 16 : 0)) - m2;
        }
    }
}

void gm_quantize_q5_K_ref(const float *src, void *dst, int64_t n) {
    gm_block_q5_K *y = dst;
    for (int64_t i = 0; i < n / GM_QK_K; ++i, src += GM_QK_K) {
        int q[GM_QK_K], sc[8], m[8];
        quantize_k4_superblock(src, 31, q, sc, m, &y[i].d, &y[i].dmin);
        pack_scales_k4(sc, m, y[i].scales);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int g = 0; g < 4; ++g)
            for (int l = 0; l < 32; ++l) {
                const int q0 = q[64 * g + l], q1 = q[64 * g + 32 + l];
                y[i].qs[32 * g + l] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
                y[i].qh[l] |= (uint8_t)(((q0 >> 4) << (2 * g)) | ((q1 >> 4) << (2 * g + 1)));
            }
    }
}

void gm_vec_dot_q5_K_ref(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q5_K *x = w;
    const gm_block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        uint8_t sm[16];
        gm_unpack_scales_k4(x[i].scales, sm);
        const int8_t *a8 = y[i].qs;
        int32_t sumi = 0;
        for (int b = 0; b < 8; ++b) {
            int32_t s = 0;
            for (int l = 0; l < 32; ++l) {
                const uint8_t byte = x[i].qs[32 * (b / 2) + l];
                const int q = ((b & 1) ? byte >> 4 : byte & 0x0F) | (((x[i].qh[l] >> b) & 1) << 4);
                s += q * a8[32 * b + l];
            }
            sumi += sm[b] * s;
        }
        int32_t summ = 0;
        for (int k = 0; k < 16; ++k) summ += sm[8 + k / 2] * y[i].bsums[k];
        sum += gm_f16_to_f32(x[i].d) * y[i].d * (float)sumi - gm_f16_to_f32(x[i].dmin) * y[i].d * (float)summ;
    }
    *out = sum;
}

/* ---- q6_K ---- */

/* The 256 signed values (q - 32, in -32..31) of a q6_K block, in element order. */
static void unpack_q6_K(const gm_block_q6_K *x, int8_t v[GM_QK_K]) {
    for (int h = 0; h < 2; ++h) {
        const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
        int8_t *o = v + 128 * h;
        for (int l = 0; l < 32; ++l) {
            o[l] = (int8_t)(((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32);
            o[l + 32] = (int8_t)(((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

void gm_dequantize_q6_K_ref(const void *src, float *dst, int64_t n) {
    const gm_block_q6_K *x = src;
    for (int64_t i = 0; i < n / GM_QK_K; ++i, dst += GM_QK_K) {
        const float d = gm_f16_to_f32(x[i].d);
        int8_t v[GM_QK_K];
        unpack_q6_K(&x[i], v);
        for (int j = 0; j < GM_QK_K; ++j) dst[j] = (d * (float)x[i].scales[j / 16]) * (float)v[j];
    }
}

void gm_quantize_q6_K_ref(const float *src, void *dst, int64_t n) {
    gm_block_q6_K *y = dst;
    for (int64_t i = 0; i < n / GM_QK_K; ++i, src += GM_QK_K) {
        /* per 16 elements: the value of largest magnitude maps to -32 (as ggml's make_qx_quants starts) */
        float scale[16], max_scale = 0, amax_scale = 0;
        for (int b = 0; b < 16; ++b) {
            float amax = 0, max = 0;
            for (int l = 0; l < 16; ++l)
                if (fabsf(src[16 * b + l]) > amax) {
                    amax = fabsf(src[16 * b + l]);
                    max = src[16 * b + l];
                }
            scale[b] = max / -32;
            if (fabsf(scale[b]) > amax_scale) {
                amax_scale = fabsf(scale[b]);
                max_scale = scale[b];
            }
        }
        int q[GM_QK_K];
        if (max_scale == 0) {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = 0;
            for (int j = 0; j < GM_QK_K; ++j) q[j] = 32;
        } else {
            const float iscale = -128.f / max_scale; /* the largest scale becomes -128 */
            y[i].d = gm_f32_to_f16(1 / iscale);
            const float d = gm_f16_to_f32(y[i].d);
            for (int b = 0; b < 16; ++b) {
                y[i].scales[b] = (int8_t)clampi(nearest_int(iscale * scale[b]), -128, 127);
                const float ds = d * (float)y[i].scales[b];
                for (int l = 0; l < 16; ++l)
                    q[16 * b + l] = ds != 0 ? clampi(nearest_int(src[16 * b + l] / ds), -32, 31) + 32 : 32;
            }
        }
        for (int h = 0; h < 2; ++h) {
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            const int *o = q + 128 * h;
            for (int l = 0; l < 32; ++l) {
                ql[l] = (uint8_t)((o[l] & 0x0F) | ((o[l + 64] & 0x0F) << 4));
                ql[l + 32] = (uint8_t)((o[l + 32] & 0x0F) | ((o[l + 96] & 0x0F) << 4));
                qh[l] = (uint8_t)((o[l] >> 4) | ((o[l + 32] >> 4) << 2) | ((o[l + 64] >> 4) << 4) | ((o[l + 96] >> 4) << 6));
            }
        }
    }
}

void gm_vec_dot_q6_K_ref(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q6_K *x = w;
    const gm_block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / GM_QK_K; ++i) {
        int8_t v[GM_QK_K];
        unpack_q6_K(&x[i], v);
        int32_t sumi = 0;
        for (int b = 0; b < 16; ++b) {
            int32_t s = 0;
            for (int l = 0; l < 16; ++l) s += v[16 * b + l] * y[i].qs[16 * b + l];
            sumi += x[i].scales[b] * s;
        }
        sum += gm_f16_to_f32(x[i].d) * y[i].d * (float)sumi;
    }
    *out = sum;
}

/* ---- q8_K: bit-exact with ggml's quantize_row_q8_K_ref (scale -127/max, ties to even, then bsums) ---- */

void gm_dequantize_q8_K_ref(const void *src, float *dst, int64_t n) {
    const gm_block_q8_K *x = src;
    for (int64_t i = 0; i < n / GM_QK_K; ++i, dst += GM_QK_K)
        for (int j = 0; j < GM_QK_K; ++j) dst[j] = x[i].d * (float)x[i].qs[j];
}

void gm_quantize_q8_K_ref(const float *src, void *dst, int64_t n) {
    gm_block_q8_K *y = dst;
    for (int64_t i = 0; i < n / GM_QK_K; ++i, src += GM_QK_K) {
        float amax = 0, max = 0;
        for (int j = 0; j < GM_QK_K; ++j)
            if (fabsf(src[j]) > amax) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        if (amax == 0) {
            y[i].d = 0;
            memset(y[i].qs, 0, sizeof y[i].qs);
        } else {
            const float iscale = -127.f / max;
            for (int j = 0; j < GM_QK_K; ++j) {
                const int v = nearest_int(iscale * src[j]);
                y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
            }
            y[i].d = 1 / iscale;
        }
        for (int k = 0; k < GM_QK_K / 16; ++k) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += y[i].qs[16 * k + l];
            y[i].bsums[k] = (int16_t)s;
        }
    }
}
