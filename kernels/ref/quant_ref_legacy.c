/* quant_ref_legacy.c: the scalar reference (the oracle) of the float types and the 32-element block types:
 * dequantize, quantize (bit-exact with ggml's quantize_row_*_ref), vec_dot with the vec_dot_type as ggml's
 * generic code. K-quants live in quant_ref_k.c, SIMD versions in kernels/cpu. */
#include <math.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_blocks.h"

/* Pointers have the alignment of their element or block struct (2 bytes; 4 for f32); inputs are finite.
 * Dequantizers must give gguf-py's floats exactly, so a*b-c is never fused (clang would under -mfma;
 * gcc does not contract in ISO C mode). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- f32: ggml's vec_dot_f32 sums float products in double ---- */

void gm_dequantize_f32_ref(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
void gm_quantize_f32_ref(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

void gm_vec_dot_f32_ref(int64_t n, float *out, const void *w, const void *a) {
    const float *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (double)(x[i] * y[i]);
    *out = (float)sum;
}

/* ---- f16 / bf16: elementwise conversion; dot of the widened values, summed in double ---- */

void gm_dequantize_f16_ref(const void *src, float *dst, int64_t n) {
    const gm_f16 *x = src;
    for (int64_t i = 0; i < n; ++i) dst[i] = gm_f16_to_f32(x[i]);
}

void gm_quantize_f16_ref(const float *src, void *dst, int64_t n) {
    gm_f16 *y = dst;
    for (int64_t i = 0; i < n; ++i) y[i] = gm_f32_to_f16(src[i]);
}

void gm_vec_dot_f16_ref(int64_t n, float *out, const void *w, const void *a) {
    const gm_f16 *x = w;
    const float *y = a; /* f32 activations */
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (double)(gm_f16_to_f32(x[i]) * y[i]);
    *out = (float)sum;
}

void gm_dequantize_bf16_ref(const void *src, float *dst, int64_t n) {
    const gm_bf16 *x = src;
    for (int64_t i = 0; i < n; ++i) dst[i] = gm_bf16_to_f32(x[i]);
}

void gm_quantize_bf16_ref(const float *src, void *dst, int64_t n) {
    gm_bf16 *y = dst;
    for (int64_t i = 0; i < n; ++i) y[i] = gm_f32_to_bf16(src[i]);
}

void gm_vec_dot_bf16_ref(int64_t n, float *out, const void *w, const void *a) {
    const gm_bf16 *x = w;
    const float *y = a; /* f32 activations */
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (double)(gm_bf16_to_f32(x[i]) * y[i]);
    *out = (float)sum;
}

/* ---- shared pieces of the 32-element quantizers ---- */

/* The value of largest magnitude (the first one on ties), sign kept: q4_0 / q5_0 map it to -8 / -16. */
static float signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; ++j) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static float absmax(const float *x, int n) {
    float amax = 0;
    for (int j = 0; j < n; ++j) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    *mn = x[0];
    *mx = x[0];
    for (int j = 1; j < n; ++j) {
        if (x[j] < *mn) *mn = x[j];
        if (x[j] > *mx) *mx = x[j];
    }
}

static inline int imin(int a, int b) { return a < b ? a : b; }

/* ---- q4_0 ---- */

void gm_dequantize_q4_0_ref(const void *src, float *dst, int64_t n) {
    const gm_block_q4_0 *x = src;
    for (int64_t i = 0; i < n / GM_QK; ++i, dst += GM_QK) {
        const float d = gm_f16_to_f32(x[i].d);
        for (int j = 0; j < GM_QK / 2; ++j) {
            dst[j] = (float)((x[i].qs[j] & 0x0F) - 8) * d;
            dst[j + GM_QK / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void gm_quantize_q4_0_ref(const float *src, void *dst, int64_t n) {
    gm_block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / GM_QK; ++i, src += GM_QK) {
        const float d = signed_absmax(src, GM_QK) / -8;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = gm_f32_to_f16(d);
        for (int j = 0; j < GM_QK / 2; ++j) {
            const int q0 = imin(15, (int)(src[j] * id + 8.5f)); /* truncation, as ggml */
            const int q1 = imin(15, (int)(src[j + GM_QK / 2] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void gm_vec_dot_q4_0_ref(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q4_0 *x = w;
    const gm_block_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / GM_QK; ++i) {
        int sumi = 0;
        for (int j = 0; j < GM_QK / 2; ++j) {
            sumi += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + GM_QK / 2];
        }
        sum += (float)sumi * (gm_f16_to_f32(x[i].d) * gm_f16_to_f32(y[i].d));
    }
    *out = sum;
}

/* ---- q4_1 ---- */

void gm_dequantize_q4_1_ref(const void *src, float *dst, int64_t n) {
    const gm_block_q4_1 *x = src;
    for (int64_t i = 0; i < n / GM_QK; ++i, dst += GM_QK) {
        const float d = gm_f16_to_f32(x[i].d), m = gm_f16_to_f32(x[i].m);
        for (int j = 0; j < GM_QK / 2; ++j) {
            dst[j] = (float)(x[i].qs[j] & 0x0F) * d + m;
            dst[j + GM_QK / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void gm_quantize_q4_1_ref(const float *src, void *dst, int64_t n) {
    gm_block_q4_1 *y = dst;
    for (int64_t i = 0; i < n / GM_QK; ++i, src += GM_QK) {
        float mn, mx;
        min_max(src, GM_QK, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = gm_f32_to_f16(d);
        y[i].m = gm_f32_to_f16(mn);
        for (int j = 0; j < GM_QK / 2; ++j) {
            const int q0 = imin(15, (int)((src[j] - mn) * id + 0.5f));
            const int q1 = imin(15, (int)((src[j + GM_QK / 2] - mn) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void gm_vec_dot_q4_1_ref(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q4_1 *x = w;
    const gm_block_q8_1 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / GM_QK; ++i) {
        int sumi = 0;
        for (int j = 0; j < GM_QK / 2; ++j) {
            sumi += (x[i].qs[j] & 0x0F) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + GM_QK / 2];
        }
        /* the min term: m * sum(a) = m * s, with s = d_a * sum(qs_a) stored by the quantizer */
        sum += (gm_f16_to_f32(x[i].d) * gm_f16_to_f32(y[i].d)) * (float)sumi +
               gm_f16_to_f32(x[i].m) * gm_f16_to_f32(y[i].s);
    }
    *out = sum;
}

/* ---- q5_0 / q5_1: the fifth bits come from qh as a little-endian u32 ---- */

static inline uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static inline void store_qh(uint8_t qh[4], uint32_t h) {
    for (int k = 0; k < 4; ++k) qh[k] = (uint8_t)(h >> (8 * k));
}

/* The 32 unsigned 5-bit values of a q5 block. */
static inline void unpack_q5(const uint8_t qs[16], const uint8_t qh[4], int q[32]) {
    const uint32_t h = load_qh(qh);
    for (int j = 0; j < 16; ++j) {
        q[j] = (int)((qs[j] & 0x0F) | (((h >> j) & 1u) << 4));
        q[j + 16] = (int)((qs[j] >> 4) | (((h >> (j + 16)) & 1u) << 4));
    }
}

static inline void pack_q5(const int q[32], uint8_t qs[16], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
        h |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    store_qh(qh, h);
}

void gm_dequantize_q5_0_ref(const void *src, float *dst, int64_t n) {
    const gm_block_q5_0 *x = src;
    for (int64_t i = 0; i < n / GM_QK; ++i, dst += GM_QK) {
        const float d = gm_f16_to_f32(x[i].d);
        int q[32];
        unpack_q5(x[i].qs, x[i].qh, q);
        for (int j = 0; j < GM_QK; ++j) dst[j] = (float)(q[j] - 16) * d;
    }
}

void gm_quantize_q5_0_ref(const float *src, void *dst, int64_t n) {
    gm_block_q5_0 *y = dst;
    for (int64_t i = 0; i < n / GM_QK; ++i, src += GM_QK) {
        const float d = signed_absmax(src, GM_QK) / -16;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = gm_f32_to_f16(d);
        int q[32];
        for (int j = 0; j < GM_QK; ++j) q[j] = imin(31, (int)(src[j] * id + 16.5f));
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

void gm_vec_dot_q5_0_ref(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q5_0 *x = w;
    const gm_block_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / GM_QK; ++i) {
        int q[32], sumi = 0;
        unpack_q5(x[i].qs, x[i].qh, q);
        for (int j = 0; j < GM_QK; ++j) sumi += (q[j] - 16) * y[i].qs[j];
        sum += (gm_f16_to_f32(x[i].d) * gm_f16_to_f32(y[i].d)) * (float)sumi;
    }
    *out = sum;
}

void gm_dequantize_q5_1_ref(const void *src, float *dst, int64_t n) {
    const gm_block_q5_1 *x = src;
    for (int64_t i = 0; i < n / GM_QK; ++i, dst += GM_QK) {
        const float d = gm_f16_to_f32(x[i].d), m = gm_f16_to_f32(x[i].m);
        int q[32];
        unpack_q5(x[i].qs, x[i].qh, q);
        for (int j = 0; j < GM_QK; ++j) dst[j] = (float)q[j] * d + m;
    }
}

void gm_quantize_q5_1_ref(const float *src, void *dst, int64_t n) {
    gm_block_q5_1 *y = dst;
    for (int64_t i = 0; i < n / GM_QK; ++i, src += GM_QK) {
        float mn, mx;
        min_max(src, GM_QK, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = gm_f32_to_f16(d);
        y[i].m = gm_f32_to_f16(mn);
        int q[32];
        for (int j = 0; j < GM_QK; ++j) q[j] = imin(31, (int)((src[j] - mn) * id + 0.5f));
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

void gm_vec_dot_q5_1_ref(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q5_1 *x = w;
    const gm_block_q8_1 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / GM_QK; ++i) {
        int q[32], sumi = 0;
        unpack_q5(x[i].qs, x[i].qh, q);
        for (int j = 0; j < GM_QK; ++j) sumi += q[j] * y[i].qs[j];
        sum += (gm_f16_to_f32(x[i].d) * gm_f16_to_f32(y[i].d)) * (float)sumi +
               gm_f16_to_f32(x[i].m) * gm_f16_to_f32(y[i].s);
    }
    *out = sum;
}

/* ---- q8_0 / q8_1: d = amax / 127, q = roundf(x / d) (half away from zero), as ggml ---- */

void gm_dequantize_q8_0_ref(const void *src, float *dst, int64_t n) {
    const gm_block_q8_0 *x = src;
    for (int64_t i = 0; i < n / GM_QK; ++i, dst += GM_QK) {
        const float d = gm_f16_to_f32(x[i].d);
        for (int j = 0; j < GM_QK; ++j) dst[j] = (float)x[i].qs[j] * d;
    }
}

void gm_quantize_q8_0_ref(const float *src, void *dst, int64_t n) {
    gm_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / GM_QK; ++i, src += GM_QK) {
        const float d = absmax(src, GM_QK) / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = gm_f32_to_f16(d);
        for (int j = 0; j < GM_QK; ++j) y[i].qs[j] = (int8_t)roundf(src[j] * id);
    }
}

void gm_quantize_q8_0_act_ref(const float *src, void *dst, int64_t n) {
    gm_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / GM_QK; ++i, src += GM_QK) {
        const float amax = absmax(src, GM_QK);
        const float id = amax != 0 ? 127.0f / amax : 0.0f;
        y[i].d = gm_f32_to_f16(amax / 127.0f);
        for (int j = 0; j < GM_QK; ++j) y[i].qs[j] = (int8_t)nearbyintf(src[j] * id); /* half to even */
    }
}

void gm_vec_dot_q8_0_ref(int64_t n, float *out, const void *w, const void *a) {
    const gm_block_q8_0 *x = w;
    const gm_block_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / GM_QK; ++i) {
        int sumi = 0;
        for (int j = 0; j < GM_QK; ++j) sumi += x[i].qs[j] * y[i].qs[j];
        sum += (float)sumi * (gm_f16_to_f32(x[i].d) * gm_f16_to_f32(y[i].d));
    }
    *out = sum;
}

void gm_dequantize_q8_1_ref(const void *src, float *dst, int64_t n) {
    const gm_block_q8_1 *x = src;
    for (int64_t i = 0; i < n / GM_QK; ++i, dst += GM_QK) {
        const float d = gm_f16_to_f32(x[i].d);
        for (int j = 0; j < GM_QK; ++j) dst[j] = (float)x[i].qs[j] * d;
    }
}

void gm_quantize_q8_1_ref(const float *src, void *dst, int64_t n) {
    gm_block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / GM_QK; ++i, src += GM_QK) {
        const float d = absmax(src, GM_QK) / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = gm_f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < GM_QK; ++j) {
            y[i].qs[j] = (int8_t)roundf(src[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = gm_f32_to_f16((float)sum * d);
    }
}
