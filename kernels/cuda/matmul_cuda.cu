/* matmul_cuda.cu: y[n][M] = x[n][K] · Wᵀ on the GPU for n = 1..8 columns per launch (more columns: one
 * launch per 8), weights read straight from their GGUF blocks. Owns: the activation quantizers (f32 -> q8_0
 * or q8_K, bit-identical to the CPU's), the integer-dot matvec for q4_0 / q5_0 / q8_0 / q4_K / q5_K / q6_K,
 * and the f32-FMA matvec for f32 / f16 / bf16. Leaves to others: choosing which matrices share a quantized input (the forward pass).
 *
 * Shape of the work (both kernels): a block of 4 warps; each warp owns R consecutive rows and walks their K
 * dimension in "items" (32 weights of one block: two spans of 16 for the 4-bit types, one span of 16 for
 * q8_0), lane l taking items l, l+32, ...; an item's weights are loaded once into registers and used for all N
 * columns, each column's activations once for all R rows; a warp reduction ends the row.
 *
 * Cost model (E4B shapes, n = 1): bytes = the weight bytes (K·M·bpw/8) + K·n·1.25 (activations, from L2) +
 * 4·M·n (output); FLOPs 2·K·M·n. At n = 1 every shape is memory bound by ~2 orders of magnitude
 * (q4_0 2560x10240: 14.7 MB, 52 MFLOP -> 3.2 us at 4.6 TB/s; the dp4a work per byte of q4_0 is ~1 integer op
 * per 1.1 weight per column). Prediction before measuring: large matrices (LM head 262144x2560, 377 MB at q4_0)
 * reach ~85-90% of the read bandwidth (~90 us); 3-15 MB ones are dominated by ~3-5 us of launch + ramp.
 * At n = 8 the dp4a count grows 8x: still under the integer rate, so near the n = 1 time is the goal.
 * Measured (H200, 2026-12-01, BENCHMARKS.md "CUDA kernels (H200)"): LM head n = 1 at q8_0 163 us (95% of the
 * 4.6 TB/s read stream), f16/bf16 292 us (99%), q4_0 107-113 us (72-76%, instruction-bound: 2x the weights per
 * byte of q8_0); 2560x10240 q4_0 6.5 us, 2560x2048 3.3 us (launch/ramp-bound, as predicted). n = 8 costs 2-3x
 * n = 1 for the 4-bit types (dp4a issue-bound), so the "near n = 1" goal is missed: int8 MMA is the next step. */
#include <stdarg.h>
#include <stdio.h>

#include "common_cuda.cuh"

/* ---------------------------------------------------------------------------------------------------------
 * Activation quantizers: the CPU's, bit for bit (kernels/ref: gm_quantize_q8_0_act_ref, gm_quantize_q8_K_ref),
 * so that every integer block sum of a GPU matvec is the CPU's and only the float summation order differs.
 * Every float operation is one IEEE-rounded op spelled out (__fdiv_rn, __fmul_rn, no contraction), as the C
 * reference performs it. Output layout (both): int8 xq[n][K], then at align16(n·K) float xd[n][K/QK].
 *
 * q8_0 (for q4_0 / q5_0 / q8_0 weights), one thread per 32-value block: amax = max |x|, d = f16(amax/127)
 * (stored widened back to f32: the CPU keeps the f16), q = round-half-even(x · (127/amax)) (llama.cpp's x86
 * quantize_row_q8_0; 0 when amax = 0).
 * Bytes: 4·K·n in, 1.125·K·n out; negligible (10 KB at K = 2560, n = 1): launch bound (~2 us). */
__global__ void quantize_q8_0_act_kernel(const float *__restrict__ x, int64_t n_blocks, int8_t *__restrict__ xq,
                                         float *__restrict__ xd) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_blocks) return;
    const float4 *src = (const float4 *)(x + b * 32);
    float v[32];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float4 f = src[i];
        v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(v[i]));
    const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    uint32_t packed[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint32_t p = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int q = __float2int_rn(__fmul_rn(v[4 * i + j], id));
            p |= (uint32_t)(q & 0xff) << (8 * j);
        }
        packed[i] = p;
    }
    int4 *dst = (int4 *)(xq + b * 32);
    dst[0] = make_int4((int)packed[0], (int)packed[1], (int)packed[2], (int)packed[3]);
    dst[1] = make_int4((int)packed[4], (int)packed[5], (int)packed[6], (int)packed[7]);
    xd[b] = __half2float(__float2half_rn(__fdiv_rn(amax, 127.0f)));
}

/* q8_K (for q4_K / q5_K / q6_K weights), one warp per 256-value block, 8 consecutive values per lane: max = the
 * value of largest |x| (the FIRST one on ties, as the reference's strict '>' scan), iscale = -127/max,
 * q = min(round-half-even(iscale · x), 127), d = 1/iscale; an all-zero block gets d = 0 and q = 0. The bsums
 * of the CPU block (sums of 16) are not stored: the dot kernels form the same integer sums with dp4a. */
__global__ void quantize_q8_K_act_kernel(const float *__restrict__ x, int64_t n_blocks, int8_t *__restrict__ xq,
                                         float *__restrict__ xd) {
    const int64_t b = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (b >= n_blocks) return; /* whole warps leave together: blockDim is a multiple of 32 */
    const float4 *src = (const float4 *)(x + b * 256 + 8 * lane);
    const float4 f0 = src[0], f1 = src[1];
    const float v[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
    float amax = 0.0f, mx = 0.0f;
    int idx = 0x7fffffff; /* element index of mx within the block; none yet */
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (fabsf(v[i]) > amax) amax = fabsf(v[i]), mx = v[i], idx = 8 * lane + i;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, amax, o), om = __shfl_xor_sync(0xffffffffu, mx, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oa > amax || (oa == amax && oi < idx)) amax = oa, mx = om, idx = oi;
    }
    uint32_t p0 = 0, p1 = 0;
    float d = 0.0f;
    if (amax != 0.0f) {
        const float iscale = __fdiv_rn(-127.0f, mx);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = __float2int_rn(__fmul_rn(iscale, v[i]));
            q = q < 127 ? q : 127;
            if (i < 4) p0 |= (uint32_t)(q & 0xff) << (8 * i);
            else p1 |= (uint32_t)(q & 0xff) << (8 * (i - 4));
        }
        d = __fdiv_rn(1.0f, iscale);
    }
    *(uint2 *)(xq + b * 256 + 8 * lane) = make_uint2(p0, p1);
    if (lane == 0) xd[b] = d;
}

/* ---------------------------------------------------------------------------------------------------------
 * Weight items. Each type says: ELEMS (weights per item), SPANS (16-weight spans per item), MINS (whether a
 * span has a min term), ACT_SHIFT (log2 of its activation blocks: 5 = q8_0 per 32, 8 = q8_K per 256), load() -> per span 4 words of 16 int8 weights (signed, or unsigned when MINS), the
 * span's scale ws and min wm (value = ws·q - wm), and act_off() -> each span's first element in the row.
 * Contribution of a span against activations (da, qa): da · (ws · Σ q·qa - wm · Σ qa). */

struct TQ4_0 { /* item = one block: span 0 = low nibbles (elements 0..15), span 1 = high (16..31) */
    enum { ELEMS = 32, SPANS = 2, MINS = 0, ACT_SHIFT = 5 };
    static __device__ __forceinline__ void load(const uint8_t *row, int it, int w[2][4], float ws[2], float wm[2]) {
        const uint8_t *b = row + (size_t)it * Q4_0_BYTES;
        uint32_t qs[4];
        gmc_ld_words_a2<4>(b + 2, qs);
        const float d = gmc_h2f(gmc_ld16(b));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[0][i] = (int)__vsub4(qs[i] & 0x0f0f0f0fu, 0x08080808u);
            w[1][i] = (int)__vsub4((qs[i] >> 4) & 0x0f0f0f0fu, 0x08080808u);
        }
        ws[0] = ws[1] = d;
        wm[0] = wm[1] = 0.0f;
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
            w[0][i] = (int)__vsub4((qs[i] & 0x0f0f0f0fu) | h0, 0x10101010u);
            w[1][i] = (int)__vsub4(((qs[i] >> 4) & 0x0f0f0f0fu) | h1, 0x10101010u);
        }
        ws[0] = ws[1] = d;
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
 * elements 128hh + 64 + 16p + i (qh bits 2·(2 + p/2)); q - 32 as signed bytes; scales 8hh + p, 8hh + 4 + p. */
struct TQ6_K {
    enum { ELEMS = 32, SPANS = 2, MINS = 0, ACT_SHIFT = 8 };
    static __device__ __forceinline__ void load(const uint8_t *row, int it, int w[2][4], float ws[2], float wm[2]) {
        const uint8_t *b = row + (size_t)(it >> 3) * Q6_K_BYTES;
        const int hh = (it & 7) >> 2, p = it & 3;
        uint32_t ql[4], qh[4];
        gmc_ld_words_a2<4>(b + 64 * hh + 16 * p, ql);
        gmc_ld_words_a2<4>(b + 128 + 32 * hh + 16 * (p & 1), qh);
        const int s0 = 2 * (p >> 1), s1 = s0 + 4;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t lo = (ql[i] & 0x0f0f0f0fu) | (((qh[i] >> s0) & 0x03030303u) << 4);
            const uint32_t hi = ((ql[i] >> 4) & 0x0f0f0f0fu) | (((qh[i] >> s1) & 0x03030303u) << 4);
            w[0][i] = (int)__vsub4(lo, 0x20202020u);
            w[1][i] = (int)__vsub4(hi, 0x20202020u);
        }
        const float d = gmc_h2f(gmc_ld16(b + 208));
        const int8_t *sc = (const int8_t *)(b + 192 + 8 * hh + p);
        ws[0] = __fmul_rn(d, (float)sc[0]);
        ws[1] = __fmul_rn(d, (float)sc[4]);
        wm[0] = wm[1] = 0.0f;
    }
    static __device__ __forceinline__ void act_off(int it, int off[2]) {
        const int base = (it >> 3) * 256 + ((it & 7) >> 2) * 128 + (it & 3) * 16;
        off[0] = base, off[1] = base + 64;
    }
};

/* ---------------------------------------------------------------------------------------------------------
 * Quantized matvec. Grid: ceil(M / (4R)) blocks of 128 threads. y is [N][ldy]. */
template <class T, int R, int N, int U>
__global__ void __launch_bounds__(128) mmvq_kernel(const uint8_t *__restrict__ W, uint64_t row_bytes, int64_t M,
                                                   int K, const int8_t *__restrict__ xq,
                                                   const float *__restrict__ xds, float *__restrict__ y,
                                                   int64_t ldy, const int32_t *__restrict__ eid, uint64_t e_bytes,
                                                   int x_div) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row0 = ((int64_t)blockIdx.x * 4 + warp) * R;
    if (row0 >= M) return;
    const int n_items = K / T::ELEMS;
    const int kb = K >> T::ACT_SHIFT; /* activation scales per column */
    if (eid) { /* expert-indexed (MoE): pair blockIdx.y = one column through expert eid[pair] */
        const int p = blockIdx.y;
        W += (uint64_t)eid[p] * e_bytes;
        xq += (size_t)(p / x_div) * K;
        xds += (size_t)(p / x_div) * kb;
        y += (size_t)p * ldy;
    }
    const uint8_t *rows[R];
#pragma unroll
    for (int r = 0; r < R; r++) rows[r] = W + (uint64_t)(row0 + r < M ? row0 + r : M - 1) * row_bytes;
    float acc[R][N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < N; c++) acc[r][c] = 0.0f;

    /* U items per lane per step: all their weight loads are issued before the first is used */
    for (int it0 = lane; it0 < n_items; it0 += 32 * U) {
        int w[U][R][T::SPANS][4];
        float ws[U][R][T::SPANS], wm[U][R][T::SPANS];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (it0 + 32 * u < n_items)
#pragma unroll
                for (int r = 0; r < R; r++) T::load(rows[r], it0 + 32 * u, w[u][r], ws[u][r], wm[u][r]);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (it0 + 32 * u >= n_items) break;
            int off[T::SPANS];
            T::act_off(it0 + 32 * u, off);
#pragma unroll
            for (int c = 0; c < N; c++) {
#pragma unroll
                for (int s = 0; s < T::SPANS; s++) {
                    const int4 a = __ldg((const int4 *)(xq + (size_t)c * K + off[s]));
                    const float da = __ldg(&xds[(size_t)c * kb + (off[s] >> T::ACT_SHIFT)]);
                    float fa = 0.0f;
                    if (T::MINS) {
                        int sa = __dp4a(a.x, 0x01010101, 0);
                        sa = __dp4a(a.y, 0x01010101, sa);
                        sa = __dp4a(a.z, 0x01010101, sa);
                        sa = __dp4a(a.w, 0x01010101, sa);
                        fa = (float)sa;
                    }
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        int d = __dp4a(w[u][r][s][0], a.x, 0);
                        d = __dp4a(w[u][r][s][1], a.y, d);
                        d = __dp4a(w[u][r][s][2], a.z, d);
                        d = __dp4a(w[u][r][s][3], a.w, d);
                        const float v = T::MINS ? ws[u][r][s] * (float)d - wm[u][r][s] * fa : ws[u][r][s] * (float)d;
                        acc[r][c] = fmaf(da, v, acc[r][c]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < N; c++) {
            const float v = gmc_warp_sum(acc[r][c]);
            if (lane == ((r * N + c) & 31) && row0 + r < M) y[(size_t)c * ldy + row0 + r] = v;
        }
}

/* ---------------------------------------------------------------------------------------------------------
 * Float-weight matvec (f32 / f16 / bf16): items of VEC weights (8 when rows are 16-byte aligned, else 1),
 * activations in f32 straight from x. Bytes: weights K·M·2 (f16) + x from L1/L2; FLOPs 2·K·M·n. */
template <int TYPE, int VEC>
__device__ __forceinline__ void load_fw(const uint8_t *row, int it, float w[VEC]) {
    if constexpr (VEC == 8) {
        if constexpr (TYPE == GMC_F32) {
            const float4 a = __ldg((const float4 *)row + 2 * it), b = __ldg((const float4 *)row + 2 * it + 1);
            w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
        } else {
            const uint4 u = __ldg((const uint4 *)row + it);
            const uint32_t v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if constexpr (TYPE == GMC_F16) {
                    w[2 * i] = gmc_h2f((uint16_t)v[i]), w[2 * i + 1] = gmc_h2f((uint16_t)(v[i] >> 16));
                } else {
                    w[2 * i] = __uint_as_float(v[i] << 16), w[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
                }
            }
        }
    } else {
        if (TYPE == GMC_F32) w[0] = __ldg((const float *)row + it);
        else if (TYPE == GMC_F16) w[0] = gmc_h2f(__ldg((const unsigned short *)row + it));
        else w[0] = gmc_bf2f(__ldg((const unsigned short *)row + it));
    }
}

template <int TYPE, int VEC, int R, int N, int U>
__global__ void __launch_bounds__(128) mmvf_kernel(const uint8_t *__restrict__ W, uint64_t row_bytes, int64_t M,
                                                   int K, const float *__restrict__ x, float *__restrict__ y,
                                                   int64_t ldy, const int32_t *__restrict__ eid, uint64_t e_bytes,
                                                   int x_div) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row0 = ((int64_t)blockIdx.x * 4 + warp) * R;
    if (row0 >= M) return;
    if (eid) { /* expert-indexed (MoE), as mmvq_kernel */
        const int p = blockIdx.y;
        W += (uint64_t)eid[p] * e_bytes;
        x += (size_t)(p / x_div) * K;
        y += (size_t)p * ldy;
    }
    const uint8_t *rows[R];
#pragma unroll
    for (int r = 0; r < R; r++) rows[r] = W + (uint64_t)(row0 + r < M ? row0 + r : M - 1) * row_bytes;
    float acc[R][N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < N; c++) acc[r][c] = 0.0f;
    const int n_items = K / VEC;
    for (int it0 = lane; it0 < n_items; it0 += 32 * U) {
        float w[U][R][VEC];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (it0 + 32 * u < n_items)
#pragma unroll
                for (int r = 0; r < R; r++) load_fw<TYPE, VEC>(rows[r], it0 + 32 * u, w[u][r]);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int it = it0 + 32 * u;
            if (it >= n_items) break;
#pragma unroll
            for (int c = 0; c < N; c++) {
                float a[8];
                if constexpr (VEC == 8) {
                    const float4 a0 = __ldg((const float4 *)(x + (size_t)c * K) + 2 * it);
                    const float4 a1 = __ldg((const float4 *)(x + (size_t)c * K) + 2 * it + 1);
                    a[0] = a0.x, a[1] = a0.y, a[2] = a0.z, a[3] = a0.w;
                    a[4] = a1.x, a[5] = a1.y, a[6] = a1.z, a[7] = a1.w;
                } else {
                    a[0] = __ldg(x + (size_t)c * K + it);
                }
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int i = 0; i < VEC; i++) acc[r][c] = fmaf(w[u][r][i], a[i], acc[r][c]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < N; c++) {
            const float v = gmc_warp_sum(acc[r][c]);
            if (lane == ((r * N + c) & 31) && row0 + r < M) y[(size_t)c * ldy + row0 + r] = v;
        }
}

/* ---------------------------------------------------------------------------------------------------------
 * Host side. */
static int g_mmv_rows = 0;   /* 0: default choice */
static int g_mmv_unroll = 0; /* 0: default choice */

extern "C" void gm_cuda_set_mmv_rows(int rows) { g_mmv_rows = rows == 1 || rows == 2 || rows == 4 ? rows : 0; }
extern "C" void gm_cuda_set_mmv_unroll(int items) { g_mmv_unroll = items == 1 || items == 2 ? items : 0; }

/* Two items ahead per lane measured slower than one in almost every case on the H200 (more registers, fewer
 * resident warps; the loads of one item already fill the memory pipe): 1 by default. */
static int default_unroll(int type, int n) {
    if (g_mmv_unroll) return g_mmv_unroll;
    return 1;
}

/* Rows per warp, from the H200 sweep (bench/cuda_bench.cu, BENCHMARKS.md): at n = 1, 2 rows pay only on short,
 * tall matrices of the densest types (K <= 4096, M >= 8192: q4_0 / q4_K / float 2560->10240 and the LM head:
 * -10..15%); everything else is fastest with 1. More columns reuse each activation load over more rows: 2 rows
 * for n <= 4, 4 rows above. */
static int default_rows(int type, int n, int64_t K, int64_t M) {
    if (g_mmv_rows) return g_mmv_rows;
    const int dense = type == GMC_F32 || type == GMC_F16 || type == GMC_BF16 || type == GMC_Q4_0 || type == GMC_Q4_K;
    if (n == 1) return dense && K <= 4096 && M >= 8192 ? 2 : 1;
    return n <= 4 ? 2 : 4;
}

static size_t align16(size_t v) { return (v + 15) & ~(size_t)15; }

extern "C" size_t gm_cuda_matmul_scratch_bytes(int64_t ne0, int32_t n) {
    if (ne0 % 32 != 0 || n <= 0) return 0;
    return align16((size_t)n * ne0) + (size_t)n * (ne0 / 32) * sizeof(float); /* q8_0's scales: the most */
}

extern "C" int gm_cuda_type_supported(int32_t type) {
    switch (type) {
    case GMC_F32: case GMC_F16: case GMC_BF16: case GMC_Q4_0: case GMC_Q5_0: case GMC_Q8_0: case GMC_Q4_K: case GMC_Q5_K:
    case GMC_Q6_K: return 1;
    default: return 0;
    }
}

static int is_quant(int type) {
    return type == GMC_Q4_0 || type == GMC_Q5_0 || type == GMC_Q8_0 || (type >= GMC_Q4_K && type <= GMC_Q6_K);
}

extern "C" int gm_cuda_act_type(int32_t wtype) {
    switch (wtype) {
    case GMC_Q4_0: case GMC_Q5_0: case GMC_Q8_0: return GMC_Q8_0;
    case GMC_Q4_K: case GMC_Q5_K: case GMC_Q6_K: return GMC_Q8_K;
    default: return -1;
    }
}

extern "C" int gm_cuda_quantize_act(const float *x, int64_t K, int32_t n, int32_t act_type, void *xq,
                                    gm_cuda_stream stream) {
    const int64_t qk = act_type == GMC_Q8_K ? 256 : 32;
    if ((act_type != GMC_Q8_0 && act_type != GMC_Q8_K) || K % qk != 0 || n <= 0 || !x || !xq)
        return gmc_fail(-1, "quantize_act: bad arguments (type %d, K=%lld n=%d)", act_type, (long long)K, n);
    const int64_t nb = (int64_t)n * K / qk;
    int8_t *q = (int8_t *)xq;
    float *ds = (float *)((uint8_t *)xq + align16((size_t)n * K));
    if (act_type == GMC_Q8_0)
        quantize_q8_0_act_kernel<<<(unsigned)((nb + 127) / 128), 128, 0, stream>>>(x, nb, q, ds);
    else
        quantize_q8_K_act_kernel<<<(unsigned)((nb + 3) / 4), 128, 0, stream>>>(x, nb, q, ds);
    return gmc_check_launch("quantize_act");
}

template <class T, int R, int U>
static void launch_q_ru(const gm_cuda_mat *w, const int8_t *q, const float *ds, int n, float *y, int64_t ldy,
                       cudaStream_t s) {
    const int64_t M = w->ne1;
    const unsigned grid = (unsigned)((M + 4 * R - 1) / (4 * R));
    const uint8_t *W = (const uint8_t *)w->data;
    const int K = (int)w->ne0;
    switch (n) {
#define GMC_CASE(NN) \
    case NN: mmvq_kernel<T, R, NN, U><<<grid, 128, 0, s>>>(W, w->row_bytes, M, K, q, ds, y, ldy, NULL, 0, 1); break;
        GMC_CASE(1) GMC_CASE(2) GMC_CASE(3) GMC_CASE(4) GMC_CASE(5) GMC_CASE(6) GMC_CASE(7) GMC_CASE(8)
#undef GMC_CASE
    }
}

template <class T, int R>
static void launch_q_r(const gm_cuda_mat *w, const int8_t *q, const float *ds, int n, float *y, int64_t ldy,
                       cudaStream_t s) {
    if (default_unroll(w->type, n) == 2) launch_q_ru<T, R, 2>(w, q, ds, n, y, ldy, s);
    else launch_q_ru<T, R, 1>(w, q, ds, n, y, ldy, s);
}

template <class T>
static void launch_q(const gm_cuda_mat *w, const int8_t *q, const float *ds, int n, float *y, int64_t ldy,
                     cudaStream_t s) {
    switch (default_rows(w->type, n, w->ne0, w->ne1)) {
    case 1: launch_q_r<T, 1>(w, q, ds, n, y, ldy, s); break;
    case 2: launch_q_r<T, 2>(w, q, ds, n, y, ldy, s); break;
    default: launch_q_r<T, 4>(w, q, ds, n, y, ldy, s); break;
    }
}

template <int TYPE, int VEC, int R, int U>
static void launch_f_ru(const gm_cuda_mat *w, const float *x, int n, float *y, int64_t ldy, cudaStream_t s) {
    const int64_t M = w->ne1;
    const unsigned grid = (unsigned)((M + 4 * R - 1) / (4 * R));
    const uint8_t *W = (const uint8_t *)w->data;
    const int K = (int)w->ne0;
    switch (n) {
#define GMC_CASE(NN) \
    case NN: mmvf_kernel<TYPE, VEC, R, NN, U><<<grid, 128, 0, s>>>(W, w->row_bytes, M, K, x, y, ldy, NULL, 0, 1); break;
        GMC_CASE(1) GMC_CASE(2) GMC_CASE(3) GMC_CASE(4) GMC_CASE(5) GMC_CASE(6) GMC_CASE(7) GMC_CASE(8)
#undef GMC_CASE
    }
}

template <int TYPE, int VEC, int R>
static void launch_f_r(const gm_cuda_mat *w, const float *x, int n, float *y, int64_t ldy, cudaStream_t s) {
    if (default_unroll(w->type, n) == 2) launch_f_ru<TYPE, VEC, R, 2>(w, x, n, y, ldy, s);
    else launch_f_ru<TYPE, VEC, R, 1>(w, x, n, y, ldy, s);
}

template <int TYPE, int VEC>
static void launch_f_v(const gm_cuda_mat *w, const float *x, int n, float *y, int64_t ldy, cudaStream_t s) {
    switch (default_rows(w->type, n, w->ne0, w->ne1)) {
    case 1: launch_f_r<TYPE, VEC, 1>(w, x, n, y, ldy, s); break;
    case 2: launch_f_r<TYPE, VEC, 2>(w, x, n, y, ldy, s); break;
    default: launch_f_r<TYPE, VEC, 4>(w, x, n, y, ldy, s); break;
    }
}

template <int TYPE>
static void launch_f(const gm_cuda_mat *w, const float *x, int n, float *y, int64_t ldy, cudaStream_t s) {
    const size_t esz = TYPE == GMC_F32 ? 4 : 2;
    const int vec_ok = w->ne0 % 8 == 0 && w->row_bytes % 16 == 0 && (uintptr_t)w->data % 16 == 0 &&
                       (uintptr_t)x % 16 == 0 && w->row_bytes == (uint64_t)w->ne0 * esz;
    if (vec_ok) launch_f_v<TYPE, 8>(w, x, n, y, ldy, s);
    else launch_f_v<TYPE, 1>(w, x, n, y, ldy, s);
}

static int check_mat(const gm_cuda_mat *w, const char *op) {
    if (!w || !w->data || w->ne0 <= 0 || w->ne1 <= 0 || w->ne0 > (1 << 30))
        return gmc_fail(-1, "%s: bad matrix", op);
    if (!gm_cuda_type_supported(w->type)) return gmc_fail(-1, "%s: type %d not supported on CUDA", op, w->type);
    const int64_t bs = w->type == GMC_Q4_0 || w->type == GMC_Q5_0 || w->type == GMC_Q8_0 ? 32 : is_quant(w->type) ? 256 : 1;
    if (w->ne0 % bs != 0) return gmc_fail(-1, "%s: row of %lld is not whole blocks", op, (long long)w->ne0);
    if ((w->type == GMC_Q4_K || w->type == GMC_Q5_K) && ((uintptr_t)w->data % 16 || w->row_bytes % 16))
        return gmc_fail(-1, "%s: q4_K/q5_K rows must be 16-byte aligned", op);
    if (is_quant(w->type) && (uintptr_t)w->data % 2) return gmc_fail(-1, "%s: weights must be 2-byte aligned", op);
    return 0;
}

extern "C" int gm_cuda_matmul_q(const gm_cuda_mat *w, const void *xq, int32_t n, float *y, gm_cuda_stream stream) {
    int rc = check_mat(w, "matmul");
    if (rc) return rc;
    if (!is_quant(w->type)) return gmc_fail(-1, "matmul_q: type %d takes f32 activations", w->type);
    if (n <= 0 || !xq || !y) return gmc_fail(-1, "matmul_q: bad arguments");
    const int64_t K = w->ne0;
    const int8_t *q = (const int8_t *)xq;
    const float *ds = (const float *)((const uint8_t *)xq + align16((size_t)n * K));
    for (int c0 = 0; c0 < n; c0 += 8) {
        const int nc = n - c0 < 8 ? n - c0 : 8;
        const int8_t *qc = q + (size_t)c0 * K;
        const float *dc = ds + (size_t)c0 * (K / (gm_cuda_act_type(w->type) == GMC_Q8_K ? 256 : 32));
        float *yc = y + (size_t)c0 * w->ne1;
        switch (w->type) {
        case GMC_Q4_0: launch_q<TQ4_0>(w, qc, dc, nc, yc, w->ne1, stream); break;
        case GMC_Q5_0: launch_q<TQ5_0>(w, qc, dc, nc, yc, w->ne1, stream); break;
        case GMC_Q8_0: launch_q<TQ8_0>(w, qc, dc, nc, yc, w->ne1, stream); break;
        case GMC_Q4_K: launch_q<TQ4_K>(w, qc, dc, nc, yc, w->ne1, stream); break;
        case GMC_Q5_K: launch_q<TQ5_K>(w, qc, dc, nc, yc, w->ne1, stream); break;
        case GMC_Q6_K: launch_q<TQ6_K>(w, qc, dc, nc, yc, w->ne1, stream); break;
        }
        rc = gmc_check_launch("matmul_q");
        if (rc) return rc;
    }
    return 0;
}

extern "C" int gm_cuda_matmul(const gm_cuda_mat *w, const float *x, int32_t n, float *y, void *scratch,
                              size_t scratch_bytes, gm_cuda_stream stream) {
    int rc = check_mat(w, "matmul");
    if (rc) return rc;
    if (n <= 0 || !x || !y) return gmc_fail(-1, "matmul: bad arguments");
    if (is_quant(w->type)) {
        if (!scratch || scratch_bytes < gm_cuda_matmul_scratch_bytes(w->ne0, n))
            return gmc_fail(-1, "matmul: scratch of %zu bytes, %zu needed", scratch_bytes,
                            gm_cuda_matmul_scratch_bytes(w->ne0, n));
        rc = gm_cuda_quantize_act(x, w->ne0, n, gm_cuda_act_type(w->type), scratch, stream);
        return rc ? rc : gm_cuda_matmul_q(w, scratch, n, y, stream);
    }
    const int64_t K = w->ne0;
    for (int c0 = 0; c0 < n; c0 += 8) {
        const int nc = n - c0 < 8 ? n - c0 : 8;
        const float *xc = x + (size_t)c0 * K;
        float *yc = y + (size_t)c0 * w->ne1;
        switch (w->type) {
        case GMC_F32: launch_f<GMC_F32>(w, xc, nc, yc, w->ne1, stream); break;
        case GMC_F16: launch_f<GMC_F16>(w, xc, nc, yc, w->ne1, stream); break;
        case GMC_BF16: launch_f<GMC_BF16>(w, xc, nc, yc, w->ne1, stream); break;
        }
        rc = gmc_check_launch("matmul");
        if (rc) return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------
 * Expert-indexed matmul (MoE): one launch for every (token, chosen expert) pair, grid.y = pairs, one column
 * each (R = N = U = 1): only the chosen experts' weights are read. */
template <class T>
static void launch_q_id(const gm_cuda_mat *w, const int8_t *q, const float *ds, const int32_t *eid,
                        uint64_t e_bytes, int x_div, int n_pairs, float *y, cudaStream_t s) {
    const dim3 grid((unsigned)((w->ne1 + 3) / 4), (unsigned)n_pairs);
    mmvq_kernel<T, 1, 1, 1><<<grid, 128, 0, s>>>((const uint8_t *)w->data, w->row_bytes, w->ne1, (int)w->ne0, q, ds, y,
                                                  w->ne1, eid, e_bytes, x_div);
}

template <int TYPE>
static void launch_f_id(const gm_cuda_mat *w, const float *x, const int32_t *eid, uint64_t e_bytes, int x_div,
                        int n_pairs, float *y, cudaStream_t s) {
    const dim3 grid((unsigned)((w->ne1 + 3) / 4), (unsigned)n_pairs);
    mmvf_kernel<TYPE, 1, 1, 1, 1><<<grid, 128, 0, s>>>((const uint8_t *)w->data, w->row_bytes, w->ne1, (int)w->ne0, x,
                                                        y, w->ne1, eid, e_bytes, x_div);
}

extern "C" int gm_cuda_matmul_id(const gm_cuda_mat *w, uint64_t expert_bytes, const float *x, int32_t n_x,
                                 int32_t x_div, const int32_t *eid, int32_t n_pairs, float *y, void *scratch,
                                 size_t scratch_bytes, gm_cuda_stream stream) {
    int rc = check_mat(w, "matmul_id");
    if (rc) return rc;
    if (!x || !eid || !y || n_x <= 0 || x_div <= 0 || n_pairs <= 0 || (int64_t)n_pairs > (int64_t)n_x * x_div ||
        n_pairs > 65535)
        return gmc_fail(-1, "matmul_id: bad arguments (n_x %d, x_div %d, pairs %d)", n_x, x_div, n_pairs);
    if (is_quant(w->type)) {
        if (!scratch || scratch_bytes < gm_cuda_matmul_scratch_bytes(w->ne0, n_x))
            return gmc_fail(-1, "matmul_id: scratch of %zu bytes, %zu needed", scratch_bytes,
                            gm_cuda_matmul_scratch_bytes(w->ne0, n_x));
        rc = gm_cuda_quantize_act(x, w->ne0, n_x, gm_cuda_act_type(w->type), scratch, stream);
        if (rc) return rc;
        const int8_t *q = (const int8_t *)scratch;
        const float *ds = (const float *)((const uint8_t *)scratch + align16((size_t)n_x * w->ne0));
        switch (w->type) {
        case GMC_Q4_0: launch_q_id<TQ4_0>(w, q, ds, eid, expert_bytes, x_div, n_pairs, y, stream); break;
        case GMC_Q5_0: launch_q_id<TQ5_0>(w, q, ds, eid, expert_bytes, x_div, n_pairs, y, stream); break;
        case GMC_Q8_0: launch_q_id<TQ8_0>(w, q, ds, eid, expert_bytes, x_div, n_pairs, y, stream); break;
        case GMC_Q4_K: launch_q_id<TQ4_K>(w, q, ds, eid, expert_bytes, x_div, n_pairs, y, stream); break;
        case GMC_Q5_K: launch_q_id<TQ5_K>(w, q, ds, eid, expert_bytes, x_div, n_pairs, y, stream); break;
        case GMC_Q6_K: launch_q_id<TQ6_K>(w, q, ds, eid, expert_bytes, x_div, n_pairs, y, stream); break;
        }
    } else {
        switch (w->type) {
        case GMC_F32: launch_f_id<GMC_F32>(w, x, eid, expert_bytes, x_div, n_pairs, y, stream); break;
        case GMC_F16: launch_f_id<GMC_F16>(w, x, eid, expert_bytes, x_div, n_pairs, y, stream); break;
        case GMC_BF16: launch_f_id<GMC_BF16>(w, x, eid, expert_bytes, x_div, n_pairs, y, stream); break;
        }
    }
    return gmc_check_launch("matmul_id");
}
