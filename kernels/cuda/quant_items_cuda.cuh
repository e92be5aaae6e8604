/* quant_items_cuda.cuh: how a kernel reads the GGUF blocks of each quantized weight type, as "items" of 16 or 32
 * weights (load: the int8 values, scale and min of each 16-weight span; act_off: where each span sits in the
 * row). Shared by the matvec (matmul_cuda.cu) and the dequantizer of the tensor-core path (gemm_cuda.cu). */
#ifndef GM_QUANT_ITEMS_CUDA_CUH
#define GM_QUANT_ITEMS_CUDA_CUH

#include "common_cuda.cuh"

/* Weight items. Each type says: ELEMS (weights per item), SPANS (16-weight spans per item), MINS (whether a
 * span has a min term), ACT_SHIFT (log2 of its activation blocks: 5 = q8_0 per 32, 8 = q8_K per 256), load() -> per span 4 words of 16 int8 weights (signed, or unsigned when MINS), the
 * span's scale ws and min wm (value = ws·q - wm), and act_off() -> each span's first element in the row.
 * Contribution of a span against activations (da, qa): da · (ws · Σ q·qa - wm · Σ qa).
 * Signed values of fewer than 8 bits (q4_0 q - 8, q5_0 q - 16, q6_K q - 32) are handed over times 2^(8 - bits),
 * with ws divided by the same power of two: x ^ 2^(bits-1) shifted to the top of its byte is 2^(8-bits)·(x -
 * 2^(bits-1)) as a signed byte, two bitwise operations a word instead of a byte-wise subtraction (__vsub4, several
 * instructions on sm_90). Every product and sum is the same real number as with the plain values, and the integer
 * sums stay below 2^24, so the floats (ws · Σ, ws · q) are bit-identical. */

/* A q4_0 block's 16 quant bytes (as 4 words) and scale as an item's two spans: low nibbles (elements 0..15) and
 * high (16..31), each 16 · (q - 8). */
__device__ __forceinline__ void q4_0_spans(const uint32_t qs[4], float d, int w[2][4], float ws[2], float wm[2]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        w[0][i] = (int)(((qs[i] << 4) & 0xf0f0f0f0u) ^ 0x80808080u);
        w[1][i] = (int)((qs[i] & 0xf0f0f0f0u) ^ 0x80808080u);
    }
    ws[0] = ws[1] = d * 0.0625f;
    wm[0] = wm[1] = 0.0f;
}

struct TQ4_0 { /* item = one block: span 0 = low nibbles (elements 0..15), span 1 = high (16..31) */
    enum { ELEMS = 32, SPANS = 2, MINS = 0, ACT_SHIFT = 5 };
    static __device__ __forceinline__ void load(const uint8_t *row, int it, int w[2][4], float ws[2], float wm[2]) {
        const uint8_t *b = row + (size_t)it * Q4_0_BYTES;
        uint32_t qs[4];
        gmc_ld_words_a2<4>(b + 2, qs);
        q4_0_spans(qs, gmc_h2f(gmc_ld16(b)), w, ws, wm);
    }
    static __device__ __forceinline__ void act_off(int it, int off[2]) { off[0] = 32 * it, off[1] = 32 * it + 16; }
};

/* q4_0 re-laid in groups of 8 blocks (GMC_Q4_0_G8, a device layout: Q4_0_G8_BYTES = the 8 blocks' quant bytes,
 * 16 each, then their 8 scales; a row's last group padded to whole size): an item's quants are one aligned 16-byte
 * load and its scale one 2-byte load, where TQ4_0 takes five 4-byte loads, funnel shifts and a 2-byte load from the
 * 2-aligned GGUF block. The same values as TQ4_0. */
struct TQ4_0_G8 {
    enum { ELEMS = 32, SPANS = 2, MINS = 0, ACT_SHIFT = 5 };
    static __device__ __forceinline__ void load(const uint8_t *row, int it, int w[2][4], float ws[2], float wm[2]) {
        const uint8_t *g = row + (size_t)(it >> 3) * Q4_0_G8_BYTES;
        const uint4 q = __ldg((const uint4 *)(g + 16 * (it & 7)));
        const uint32_t qs[4] = {q.x, q.y, q.z, q.w};
        q4_0_spans(qs, gmc_h2f(gmc_ld16(g + 128 + 2 * (it & 7))), w, ws, wm);
    }
    static __device__ __forceinline__ void act_off(int it, int off[2]) { off[0] = 32 * it, off[1] = 32 * it + 16; }
};

/* q5_0 item = one block, spans as q4_0; the fifth bit of element j is bit j of the 32-bit qh (2-aligned). */
struct TQ5_0 {
    enum { ELEMS = 32, SPANS = 2, MINS = 0, ACT_SHIFT = 5 };
    static __device__ __forceinline__ void load(const uint8_t *row, int it, int w[2][4], float ws[2], float wm[2]) {
        const uint8_t *b = row + (size_t)it * Q5_0_BYTES;
        uint32_t qs[4];
        gmc_ld_words_a2<4>(b + 6, qs);
        const uint32_t qh = (uint32_t)gmc_ld16(b + 2) | ((uint32_t)gmc_ld16(b + 4) << 16);
        const float d = gmc_h2f(gmc_ld16(b));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t h0 = 0, h1 = 0; /* bit 4 of byte k <- qh bit 4i + k (low span), 16 + 4i + k (high span) */
#pragma unroll
            for (int k = 0; k < 4; k++) {
                h0 |= ((qh >> (4 * i + k)) & 1u) << (8 * k + 4);
                h1 |= ((qh >> (16 + 4 * i + k)) & 1u) << (8 * k + 4);
            }
            /* 8 · (q - 16) */
            w[0][i] = (int)((((qs[i] & 0x0f0f0f0fu) | h0) << 3) ^ 0x80808080u);
            w[1][i] = (int)(((((qs[i] >> 4) & 0x0f0f0f0fu) | h1) << 3) ^ 0x80808080u);
        }
        ws[0] = ws[1] = d * 0.125f;
        wm[0] = wm[1] = 0.0f;
    }
    static __device__ __forceinline__ void act_off(int it, int off[2]) { off[0] = 32 * it, off[1] = 32 * it + 16; }
};

struct TQ8_0 { /* item = half a block (16 weights) */
    enum { ELEMS = 16, SPANS = 1, MINS = 0, ACT_SHIFT = 5 };
    static __device__ __forceinline__ void load(const uint8_t *row, int it, int w[1][4], float ws[1], float wm[1]) {
        const uint8_t *b = row + (size_t)(it >> 1) * Q8_0_BYTES;
        uint32_t qs[4];
        gmc_ld_words_a2<4>(b + 2 + 16 * (it & 1), qs);
#pragma unroll
        for (int i = 0; i < 4; i++) w[0][i] = (int)qs[i];
        ws[0] = gmc_h2f(gmc_ld16(b));
        wm[0] = 0.0f;
    }
    static __device__ __forceinline__ void act_off(int it, int off[1]) { off[0] = 16 * it; }
};

/* q4_K / q5_K: the scale and min (6 bits each) of sub-blocks j = 2g and 2g + 1, from the 12 scale bytes as 3
 * words, unpacked word-parallel as gm_unpack_scales_k4 (no byte array, so nothing goes to local memory). */
__device__ __forceinline__ void k4_scale_min2(const uint32_t s[3], int g, float d, float dmin, float ws[2],
                                              float wm[2]) {
    const uint32_t sc_lo = s[0] & 0x3f3f3f3fu;
    const uint32_t sc_hi = (s[2] & 0x0f0f0f0fu) | (((s[0] >> 6) & 0x03030303u) << 4);
    const uint32_t m_lo = s[1] & 0x3f3f3f3fu;
    const uint32_t m_hi = ((s[2] >> 4) & 0x0f0f0f0fu) | (((s[1] >> 6) & 0x03030303u) << 4);
    const uint32_t scw = g < 2 ? sc_lo : sc_hi, mw = g < 2 ? m_lo : m_hi;
    const int sh = 16 * (g & 1); /* sub-blocks 2g, 2g+1 are bytes 2(g&1), 2(g&1)+1 of their word */
    ws[0] = __fmul_rn(d, (float)((scw >> sh) & 0xff));
    ws[1] = __fmul_rn(d, (float)((scw >> (sh + 8)) & 0xff));
    wm[0] = __fmul_rn(dmin, (float)((mw >> sh) & 0xff));
    wm[1] = __fmul_rn(dmin, (float)((mw >> (sh + 8)) & 0xff));
}

/* q4_K item (g, h) of a super-block (8 items): qs bytes 32g + 16h .. +15; span 0 = low nibbles = sub-block 2g
 * positions 16h..16h+15, span 1 = high nibbles = sub-block 2g+1, same positions. */
struct TQ4_K {
    enum { ELEMS = 32, SPANS = 2, MINS = 1, ACT_SHIFT = 8 };
    static __device__ __forceinline__ void load(const uint8_t *row, int it, int w[2][4], float ws[2], float wm[2]) {
        const uint8_t *b = row + (size_t)(it >> 3) * Q4_K_BYTES;
        const int g = (it & 7) >> 1, h = it & 1;
        const uint4 q = __ldg((const uint4 *)(b + 16 + 32 * g + 16 * h));
        const uint32_t dd = __ldg((const uint32_t *)b);
        uint32_t s[3];
        s[0] = __ldg((const uint32_t *)(b + 4)), s[1] = __ldg((const uint32_t *)(b + 8));
        s[2] = __ldg((const uint32_t *)(b + 12));
        const float d = gmc_h2f((uint16_t)dd), dmin = gmc_h2f((uint16_t)(dd >> 16));
        const uint32_t qv[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[0][i] = (int)(qv[i] & 0x0f0f0f0fu);
            w[1][i] = (int)((qv[i] >> 4) & 0x0f0f0f0fu);
        }
        k4_scale_min2(s, g, d, dmin, ws, wm);
    }
    static __device__ __forceinline__ void act_off(int it, int off[2]) {
        const int base = (it >> 3) * 256 + ((it & 7) >> 1) * 64 + (it & 1) * 16;
        off[0] = base, off[1] = base + 32;
    }
};

/* q5_K: as q4_K, the fifth bit of position l of sub-block j is bit j of qh[l]. */
struct TQ5_K {
    enum { ELEMS = 32, SPANS = 2, MINS = 1, ACT_SHIFT = 8 };
    static __device__ __forceinline__ void load(const uint8_t *row, int it, int w[2][4], float ws[2], float wm[2]) {
        const uint8_t *b = row + (size_t)(it >> 3) * Q5_K_BYTES;
        const int g = (it & 7) >> 1, h = it & 1;
        const uint4 q = __ldg((const uint4 *)(b + 48 + 32 * g + 16 * h));
        const uint4 qh = __ldg((const uint4 *)(b + 16 + 16 * h));
        const uint32_t dd = __ldg((const uint32_t *)b);
        uint32_t s[3];
        s[0] = __ldg((const uint32_t *)(b + 4)), s[1] = __ldg((const uint32_t *)(b + 8));
        s[2] = __ldg((const uint32_t *)(b + 12));
        const float d = gmc_h2f((uint16_t)dd), dmin = gmc_h2f((uint16_t)(dd >> 16));
        const uint32_t qv[4] = {q.x, q.y, q.z, q.w}, hv[4] = {qh.x, qh.y, qh.z, qh.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[0][i] = (int)((qv[i] & 0x0f0f0f0fu) | (((hv[i] >> (2 * g)) & 0x01010101u) << 4));
            w[1][i] = (int)(((qv[i] >> 4) & 0x0f0f0f0fu) | (((hv[i] >> (2 * g + 1)) & 0x01010101u) << 4));
        }
        k4_scale_min2(s, g, d, dmin, ws, wm);
    }
    static __device__ __forceinline__ void act_off(int it, int off[2]) { TQ4_K::act_off(it, off); }
};

/* q6_K item (hh, p) of a super-block (8 items): ql bytes 64hh + 16p .. +15, qh bytes 32hh + 16(p%2) .. +15;
 * span 0 = low nibbles = elements 128hh + 16p + i (high bits: qh bits 2·(p/2)), span 1 = high nibbles =
 * elements 128hh + 64 + 16p + i (qh bits 2·(2 + p/2)); q - 32 as signed bytes; scales 8hh + p, 8hh + 4 + p.
 * BYTES: the block stride, Q6_K_BYTES (the GGUF layout: blocks 2-byte aligned, read in 16-bit pieces) or
 * Q6_K_A16_BYTES (GMC_Q6_K_A16, the same fields in 16-byte aligned blocks: ql and qh one 16-byte load each, the
 * item's two scales one 8-byte load). */
template <int BYTES>
struct TQ6_KB {
    enum { ELEMS = 32, SPANS = 2, MINS = 0, ACT_SHIFT = 8 };
    static __device__ __forceinline__ void load(const uint8_t *row, int it, int w[2][4], float ws[2], float wm[2]) {
        const uint8_t *b = row + (size_t)(it >> 3) * BYTES;
        const int hh = (it & 7) >> 2, p = it & 3;
        uint32_t ql[4], qh[4];
        int sc0, sc1;
        if constexpr (BYTES % 16 == 0) {
            const uint4 l = __ldg((const uint4 *)(b + 64 * hh + 16 * p));
            const uint4 h = __ldg((const uint4 *)(b + 128 + 32 * hh + 16 * (p & 1)));
            const uint2 sc = __ldg((const uint2 *)(b + 192 + 8 * hh));
            ql[0] = l.x, ql[1] = l.y, ql[2] = l.z, ql[3] = l.w;
            qh[0] = h.x, qh[1] = h.y, qh[2] = h.z, qh[3] = h.w;
            sc0 = (int)(int8_t)(sc.x >> (8 * p)), sc1 = (int)(int8_t)(sc.y >> (8 * p));
        } else {
            gmc_ld_words_a2<4>(b + 64 * hh + 16 * p, ql);
            gmc_ld_words_a2<4>(b + 128 + 32 * hh + 16 * (p & 1), qh);
            const int8_t *sc = (const int8_t *)(b + 192 + 8 * hh + p);
            sc0 = sc[0], sc1 = sc[4];
        }
        const int s0 = 2 * (p >> 1), s1 = s0 + 4;
#pragma unroll
        for (int i = 0; i < 4; i++) { /* 4 · (q - 32) */
            w[0][i] = (int)((((ql[i] & 0x0f0f0f0fu) << 2) | (((qh[i] >> s0) & 0x03030303u) << 6)) ^ 0x80808080u);
            w[1][i] = (int)((((ql[i] >> 2) & 0x3c3c3c3cu) | (((qh[i] >> s1) & 0x03030303u) << 6)) ^ 0x80808080u);
        }
        const float d = gmc_h2f(gmc_ld16(b + 208));
        ws[0] = __fmul_rn(d, (float)sc0) * 0.25f;
        ws[1] = __fmul_rn(d, (float)sc1) * 0.25f;
        wm[0] = wm[1] = 0.0f;
    }
    static __device__ __forceinline__ void act_off(int it, int off[2]) {
        const int base = (it >> 3) * 256 + ((it & 7) >> 2) * 128 + (it & 3) * 16;
        off[0] = base, off[1] = base + 64;
    }
};
using TQ6_K = TQ6_KB<Q6_K_BYTES>;
using TQ6_K_A16 = TQ6_KB<Q6_K_A16_BYTES>;

#endif
