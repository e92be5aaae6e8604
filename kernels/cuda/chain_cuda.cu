/* chain_cuda.cu: a chain of one-column projections (the products of a decoding step between two attentions: output,
 * gate/up, down, per-layer input gate and projection, the next layer's Q/K/V) in ONE persistent launch. Owns the
 * chain kernel, its grid barrier and its host entry gm_cuda_chain. Leaves to others: which ops form a chain (the
 * backend), the arithmetic (it is the mat-vec's and act_prep_reg's, matmul_cuda.cu: the results are theirs to
 * the bit).
 *
 * Why: a decoding step of E4B was a chain of ~500 dependent launches, each adding 3-6 us to the critical path for
 * 1-15 MB of weights (BENCHMARKS.md, tenth session: act_prep 5.8 us x 126, quantize 3.7 us x 126, products 3.5 us x
 * 168). Here one block per SM runs every step of the chain: each block prepares the step's input itself (residual
 * update, rmsnorm, q8_0) into shared memory, its warps take rows of the step's matrices, and the blocks meet at a
 * grid barrier (one counter that only grows) before the next step. Right after a step's input is prepared, its warps
 * hint the next step's weight rows into L2 and stage its norm weights (cp.async), so DRAM keeps streaming across
 * the step boundary.
 *
 * Work per step (E4B, q4_0): the weights (2.9 / 29.5 / 14.7 / 0.4 / 0.4 / 4.4 MB) once, from DRAM; the input (K
 * floats, ≤ 40 KB) read by every block from L2 (132 blocks: ≤ 5.3 MB of L2 reads); FLOPs 2·K·M (dp4a). Predicted
 * per layer: ~12 us of weight streaming + 6 barriers and preparations at ~1.5 us, against ~55 us for the same
 * products as 12 launches.
 * Measured (H200, bench/cuda_chain_probe, BENCHMARKS.md thirteenth session): 58.5 us a layer against 44.5 us for
 * the launches one by one (both as CUDA graphs), so the backend leaves it off by default (GEMMAC_CUDA_CHAIN=1). Per
 * step: barriers 1.1-1.4 us after the last block arrives; input preparation 1.3-4 us (two block reductions in
 * act_prep_reg's order, then the quantization); products at half the bandwidth (GeGLU 29.5 MB in 10.5 us, down 14.7
 * MB in 6.3 us): one block of 16 warps per SM, 128 registers each, keeps about 40 KB of loads in flight per SM, and
 * each warp's rows are a chain of dependent round trips. What would change that: weights streamed into shared memory
 * (cp.async / TMA rings, no registers held), and rows split over more warps (not the mat-vec's order, so not its
 * results to the bit). */
#include <stdio.h>
#include <string.h>

#include "act_quant_cuda.cuh"
#include "common_cuda.cuh"
#include "quant_items_cuda.cuh"

enum {
    CH_THREADS = 512,
    CH_WARPS = CH_THREADS / 32,
    CH_MAX_K = 16384,  /* input width of a step (its q8_0 blocks in shared memory) */
    CH_MAX_KN = 8192,  /* ... of a step with a residual update or rmsnorm (its row and the residual's staged as f32) */
    CH_IPL = 3,        /* q4_0 items per lane of a row loaded before the first is used, two rows at a time (the GeGLU's
                          four rows: 1; other types: 1); more spills registers */
};

struct ChainStep {
    float *x;                    /* [K] input; with res: the residual stream, updated and written back */
    const float *res_add, *res_w, *norm_w, *mul;
    float res_scale, eps;
    int K, res, norm, W;         /* W: the warps whose order act_prep_reg sums the rms in (gmc_prep_reg_warps) */
    int type, epi, n_seg, units; /* units: rows (store: of all segments), or row pairs (GeGLU) */
    int sync_before;             /* a barrier before this step: it touches the row the step before writes back */
    const uint8_t *w[3];
    uint64_t row_bytes[3];
    int M[3];
    float *y[3];
};
struct ChainArgs {
    ChainStep st[GM_CUDA_CHAIN_MAX];
    int n;
    unsigned long long *bar; /* arrivals at grid barriers since the first chain (a multiple of nblocks between them) */
    unsigned nblocks;
    unsigned long long *stamps; /* NULL, or gm_cuda_chain_set_stamps' record of where the time goes */
};

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
/* Stamp k of the launch (the global timer, ns): block 0's (max_all false) or the latest block's. */
__device__ __forceinline__ void stamp(const ChainArgs &a, int k, bool max_all) {
    if (!a.stamps || threadIdx.x != 0 || (!max_all && blockIdx.x != 0)) return;
    const unsigned long long t = global_ns();
    if (max_all) atomicMax(a.stamps + k, t);
    else a.stamps[k] = t;
}

__device__ __forceinline__ unsigned long long ld_acquire64(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* All blocks of the grid (co-resident: the launch has at most as many blocks as fit at once) meet here; writes before
 * it are visible to every block after it. bar counts arrivals and never goes back, so no block resets anything: a
 * barrier is passed when the count reaches the next multiple of nblocks (target, thread 0's; 0 before the launch's
 * first barrier, whose arrival learns where the count stands). Later arrivals are fire-and-forget reductions, so a
 * block's arrival costs no round trip. A wait of ~10 s (a block that never arrives) traps: a broken launch fails
 * instead of hanging the device. */
__device__ __forceinline__ void grid_barrier(unsigned long long *bar, unsigned nblocks, unsigned long long &target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (!target) {
            target = (atomicAdd(bar, 1ull) / nblocks + 1) * nblocks;
        } else {
            target += nblocks;
            asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(bar) : "memory");
        }
        const long long t0 = clock64();
        while (ld_acquire64(bar) < target)
            if (clock64() - t0 > (1ll << 34)) __trap();
        __threadfence();
    }
    __syncthreads();
}

/* The rms sum of v[0..32·nb) in act_prep_reg_kernel's order: W warps, warp w summing the 32-value blocks w, w + W,
 * ... lane by lane with fmaf, then a warp sum, then the W warp sums in order. This block's warps play those W. */
__device__ __forceinline__ float prep_sum(const float *v, int nb, int W, float *part, int warp, int lane) {
    for (int vw = warp; vw < W; vw += CH_WARPS) {
        float ss = 0.0f;
        for (int b = vw; b < nb; b += W) ss = fmaf(v[32 * b + lane], v[32 * b + lane], ss);
        ss = gmc_warp_sum(ss);
        if (lane == 0) part[vw] = ss;
    }
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < W; i++) t += part[i];
    __syncthreads(); /* part is reused */
    return t;
}

/* The norms' weights of step s into shared memory by cp.async (immutable: issued a step ahead, before the barrier;
 * chain_prep waits for them). */
__device__ __forceinline__ void chain_stage_weights(const ChainStep &s, float *ws_res, float *ws_norm) {
    for (int i = threadIdx.x; i < s.K / 4; i += CH_THREADS) {
        if (s.res_w) cp_async16(ws_res + 4 * i, s.res_w + 4 * i, 16);
        if (s.norm_w) cp_async16(ws_norm + 4 * i, s.norm_w + 4 * i, 16);
    }
    cp_async_commit();
}

/* Four values of a q8_0 block, whose 32 values lie in 8 consecutive lanes (4 each, in order), quantized as
 * quant_q8_0_block does (the block's amax by 3 shuffles: a max in any order is the same max): the 4 bytes at q and,
 * from the group's first lane, the scale at *d. Every lane of the warp must call it. */
__device__ __forceinline__ void quant_q8_0_lanes8(float4 v, int lane, uint32_t *q, float *d, bool store) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (!store) return;
    const float id = q8_0_inv_scale(amax);
    const float f[4] = {v.x, v.y, v.z, v.w};
    uint32_t p = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) p |= (uint32_t)(__float2int_rn(__fmul_rn(f[j], id)) & 0xff) << (8 * j);
    *q = p;
    if ((lane & 7) == 0) *d = q8_0_scale(amax);
}

/* The step's input into shared memory as act_prep_reg_kernel / quantize_q8_0_act_kernel make it: xq / xd its q8_0
 * blocks (of the normalised row when norm); with a residual update, xs the updated row (what the step writes back).
 * Every pass goes a float4 a thread in warp-uniform loops (4 values a lane, 8 lanes a q8_0 block); the rms sums in
 * act_prep_reg's order (prep_sum). ws_res / ws_norm: the norms' weights, staged by chain_stage_weights. */
__device__ __forceinline__ void chain_prep(const ChainStep &s, float *xs, float *xn, const float *ws_res,
                                           const float *ws_norm, int8_t *xq, float *xd, float *part, int warp,
                                           int lane) {
    const int K = s.K, nb = K / 32, K4 = K / 4;
    uint32_t *xq4 = (uint32_t *)xq;
    if (!s.res && !s.norm) { /* a plain quantize: straight from global memory */
#pragma unroll 8
        for (int i0 = warp * 32; i0 < K4; i0 += CH_THREADS) {
            const int i = i0 + lane;
            const bool in = i < K4;
            const float4 v = in ? __ldcg((const float4 *)s.x + i) : make_float4(0.f, 0.f, 0.f, 0.f);
            quant_q8_0_lanes8(v, lane, xq4 + i, xd + (i >> 3), in);
        }
        __syncthreads();
        return;
    }
    float4 *xs4 = (float4 *)xs, *xn4 = (float4 *)xn;
    const float4 *wr4 = (const float4 *)ws_res, *wn4 = (const float4 *)ws_norm;
#pragma unroll 4
    for (int i = threadIdx.x; i < K4; i += CH_THREADS) {
        xs4[i] = __ldcg((const float4 *)s.x + i);
        if (s.res) xn4[i] = __ldcg((const float4 *)s.res_add + i);
    }
    cp_async_wait<0>(); /* the norms' weights */
    __syncthreads();
    if (s.res) {
        const float rs = 1.0f / sqrtf(prep_sum(xn, nb, s.W, part, warp, lane) / (float)K + s.eps);
        for (int i = threadIdx.x; i < K4; i += CH_THREADS) {
            const float4 a = xn4[i], x = xs4[i];
            float4 w = s.res_w ? wr4[i] : make_float4(1.f, 1.f, 1.f, 1.f);
            float t[4] = {__fmul_rn(a.x, rs), __fmul_rn(a.y, rs), __fmul_rn(a.z, rs), __fmul_rn(a.w, rs)};
            if (s.res_w) t[0] = __fmul_rn(t[0], w.x), t[1] = __fmul_rn(t[1], w.y), t[2] = __fmul_rn(t[2], w.z),
                         t[3] = __fmul_rn(t[3], w.w);
            float y[4] = {__fadd_rn(x.x, t[0]), __fadd_rn(x.y, t[1]), __fadd_rn(x.z, t[2]), __fadd_rn(x.w, t[3])};
            if (s.res_scale != 1.0f)
#pragma unroll
                for (int j = 0; j < 4; j++) y[j] = __fmul_rn(y[j], s.res_scale);
            xs4[i] = make_float4(y[0], y[1], y[2], y[3]);
        }
        __syncthreads();
    }
    const float sc = s.norm ? 1.0f / sqrtf(prep_sum(xs, nb, s.W, part, warp, lane) / (float)K + s.eps) : 1.0f;
    for (int i0 = warp * 32; i0 < K4; i0 += CH_THREADS) {
        const int i = i0 + lane;
        const bool in = i < K4;
        float4 v = in ? xs4[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        if (s.norm && in) {
            v = make_float4(__fmul_rn(v.x, sc), __fmul_rn(v.y, sc), __fmul_rn(v.z, sc), __fmul_rn(v.w, sc));
            if (s.norm_w) {
                const float4 w = wn4[i];
                v = make_float4(__fmul_rn(v.x, w.x), __fmul_rn(v.y, w.y), __fmul_rn(v.z, w.z), __fmul_rn(v.w, w.w));
            }
        }
        quant_q8_0_lanes8(v, lane, xq4 + i, xd + (i >> 3), in);
    }
    __syncthreads();
}

/* The weight rows of unit u: a GeGLU's gate and up row (2), else one row of one segment (1). */
__device__ __forceinline__ int unit_rows(const ChainStep &s, int u, const uint8_t *rows[2], int &seg, int &row) {
    if (s.epi == GM_CUDA_EPI_GEGLU) {
        rows[0] = s.w[0] + (uint64_t)u * s.row_bytes[0], rows[1] = s.w[1] + (uint64_t)u * s.row_bytes[1];
        seg = 0, row = u;
        return 2;
    }
    seg = 0, row = u;
    while (seg + 1 < s.n_seg && row >= s.M[seg]) row -= s.M[seg++];
    rows[0] = s.w[seg] + (uint64_t)row * s.row_bytes[seg];
    return 1;
}

/* NR rows' dot products with the staged input, each lane's items in increasing order with mmvq_kernel's arithmetic
 * (the same float sums per lane, so the same warp sums). */
template <class T>
struct IS_Q4_0 { static constexpr bool value = false; };
template <>
struct IS_Q4_0<TQ4_0> { static constexpr bool value = true; };

template <class T, int NR, int IPL>
__device__ __forceinline__ void chain_dot(const uint8_t *const rows[NR], int n_items, const int8_t *xq,
                                          const float *xd, int lane, float acc[NR]) {
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    for (int it0 = lane; it0 < n_items; it0 += 32 * IPL) {
        int w[IPL][NR][T::SPANS][4];
        float ws[IPL][NR][T::SPANS], wm[IPL][NR][T::SPANS];
#pragma unroll
        for (int k = 0; k < IPL; k++)
            if (it0 + 32 * k < n_items)
#pragma unroll
                for (int r = 0; r < NR; r++) T::load(rows[r], it0 + 32 * k, w[k][r], ws[k][r], wm[k][r]);
#pragma unroll
        for (int k = 0; k < IPL; k++) {
            const int it = it0 + 32 * k;
            if (it >= n_items) break;
            int off[T::SPANS];
            T::act_off(it, off);
#pragma unroll
            for (int sp = 0; sp < T::SPANS; sp++) {
                const int4 a = *(const int4 *)(xq + off[sp]);
                const float da = xd[off[sp] >> 5];
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    int d = __dp4a(w[k][r][sp][0], a.x, 0);
                    d = __dp4a(w[k][r][sp][1], a.y, d);
                    d = __dp4a(w[k][r][sp][2], a.z, d);
                    d = __dp4a(w[k][r][sp][3], a.w, d);
                    const float v = ws[k][r][sp] * (float)d;
                    acc[r] = fmaf(da, v, acc[r]);
                }
            }
        }
    }
}

/* q4_0 items as they come from memory: the five aligned words around the 16 quant bytes and the scale's 16 bits, 6
 * registers an item instead of TQ4_0::load's 10 (its values made only when used), so a lane has twice the items in
 * flight. q4_0_decode gives TQ4_0::load's values exactly (the same shifts, xors and scale). */
__device__ __forceinline__ void q4_0_raw(const uint8_t *row, int it, uint32_t raw[6]) {
    const uintptr_t a = (uintptr_t)(row + (size_t)it * Q4_0_BYTES + 2);
    const uint32_t *w = (const uint32_t *)(a & ~(uintptr_t)3);
#pragma unroll
    for (int i = 0; i < 4; i++) raw[i] = __ldg(w + i);
    raw[4] = (a & 3) ? __ldg(w + 4) : 0u;
    raw[5] = gmc_ld16((const uint8_t *)(a - 2));
}
__device__ __forceinline__ void q4_0_decode(const uint8_t *row, int it, const uint32_t raw[6], int w[2][4],
                                            float &ws) {
    const uint32_t sh = (uint32_t)(((uintptr_t)(row + (size_t)it * Q4_0_BYTES + 2)) & 3) * 8;
    uint32_t qs[4];
#pragma unroll
    for (int i = 0; i < 4; i++) qs[i] = __funnelshift_r(raw[i], raw[i + 1], sh);
    float ws2[2], wm2[2];
    q4_0_spans(qs, gmc_h2f((uint16_t)raw[5]), w, ws2, wm2);
    ws = ws2[0];
}

/* chain_dot for q4_0 through q4_0_raw: the same per-lane order and arithmetic. */
template <int NR, int IPL>
__device__ __forceinline__ void chain_dot_q4_0(const uint8_t *const rows[NR], int n_items, const int8_t *xq,
                                               const float *xd, int lane, float acc[NR]) {
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    for (int it0 = lane; it0 < n_items; it0 += 32 * IPL) {
        uint32_t raw[IPL][NR][6];
#pragma unroll
        for (int k = 0; k < IPL; k++)
            if (it0 + 32 * k < n_items)
#pragma unroll
                for (int r = 0; r < NR; r++) q4_0_raw(rows[r], it0 + 32 * k, raw[k][r]);
#pragma unroll
        for (int k = 0; k < IPL; k++) {
            const int it = it0 + 32 * k;
            if (it >= n_items) break;
#pragma unroll
            for (int r = 0; r < NR; r++) {
                int w[2][4];
                float ws;
                q4_0_decode(rows[r], it, raw[k][r], w, ws);
#pragma unroll
                for (int sp = 0; sp < 2; sp++) {
                    const int4 a = *(const int4 *)(xq + 32 * it + 16 * sp);
                    const float da = xd[it];
                    int d = __dp4a(w[sp][0], a.x, 0);
                    d = __dp4a(w[sp][1], a.y, d);
                    d = __dp4a(w[sp][2], a.z, d);
                    d = __dp4a(w[sp][3], a.w, d);
                    const float v = ws * (float)d;
                    acc[r] = fmaf(da, v, acc[r]);
                }
            }
        }
    }
}

/* The dot products of NR rows: q4_0 through its raw items (IPL items a row in flight per lane), other types through
 * their item loaders (fewer: their items take more registers). */
template <class T, int NR, int IPL>
__device__ __forceinline__ void chain_rows(const uint8_t *const rows[NR], int n_items, const int8_t *xq,
                                           const float *xd, int lane, float acc[NR]) {
    if constexpr (IS_Q4_0<T>::value)
        chain_dot_q4_0<NR, IPL>(rows, n_items, xq, xd, lane, acc);
    else
        chain_dot<T, NR, 1>(rows, n_items, xq, xd, lane, acc);
}

/* One step's products: global warp gw of G takes units gw, gw + G, ...; two units at a time unless GeGLU (whose
 * unit is already two rows). Stores as mv_store does. */
template <class T>
__device__ __forceinline__ void chain_products(const ChainStep &s, const int8_t *xq, const float *xd, int gw, int G,
                                               int lane) {
    const int n_items = s.K / T::ELEMS;
    if (s.epi == GM_CUDA_EPI_GEGLU) { /* two units (four rows) at a time */
        for (int u = gw; u < s.units; u += 2 * G) {
            const int u1 = u + G < s.units ? u + G : u;
            const uint8_t *rows[4];
            int seg, row;
            unit_rows(s, u, rows, seg, row);
            unit_rows(s, u1, rows + 2, seg, row);
            float acc[4];
            chain_rows<T, 4, 1>(rows, n_items, xq, xd, lane, acc);
            const float v0 = __fmul_rn(gmc_gelu_tanh(gmc_warp_sum(acc[0])), gmc_warp_sum(acc[1]));
            const float v1 = __fmul_rn(gmc_gelu_tanh(gmc_warp_sum(acc[2])), gmc_warp_sum(acc[3]));
            if (lane == 0) s.y[0][u] = v0;
            if (lane == 1 && u1 != u) s.y[0][u1] = v1;
        }
        return;
    }
    for (int u = gw; u < s.units; u += 2 * G) {
        const uint8_t *rows[2];
        int seg[2], row[2];
        unit_rows(s, u, rows, seg[0], row[0]);
        const bool two = u + G < s.units;
        if (two) {
            const uint8_t *r1[2];
            unit_rows(s, u + G, r1, seg[1], row[1]);
            rows[1] = r1[0];
        } else {
            rows[1] = rows[0];
        }
        float acc[2];
        chain_rows<T, 2, CH_IPL>(rows, n_items, xq, xd, lane, acc);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float v = gmc_warp_sum(acc[r]);
            if (lane != 0 || (r == 1 && !two)) continue;
            if (s.epi == GM_CUDA_EPI_GELU_MUL) v = __fmul_rn(gmc_gelu_tanh(v), __ldcg(s.mul + row[r]));
            s.y[seg[r]][row[r]] = v;
        }
    }
}

/* Hints this warp's rows of step s into L2 (immutable weights: before any wait). */
__device__ __forceinline__ void chain_prefetch(const ChainStep &s, int gw, int G, int lane) {
    for (int u = gw; u < s.units; u += G) {
        const uint8_t *rows[2];
        int seg, row;
        const int nr = unit_rows(s, u, rows, seg, row);
        for (int r = 0; r < nr; r++) gmc_prefetch_l2(rows[r], s.row_bytes[s.epi == GM_CUDA_EPI_GEGLU ? r : seg], lane);
    }
}

__global__ void __launch_bounds__(CH_THREADS, 1) chain_kernel(const __grid_constant__ ChainArgs a) {
    extern __shared__ float4 ch_smem[];
    float *xs = (float *)ch_smem;                 /* [CH_MAX_K]; only CH_MAX_KN used since plain steps quantize
                                                     straight from global memory (v3): 32 KB to spare */
    float *xn = xs + CH_MAX_K;                    /* [CH_MAX_KN] */
    float *ws_res = xn + CH_MAX_KN;               /* [CH_MAX_KN] */
    float *ws_norm = ws_res + CH_MAX_KN;          /* [CH_MAX_KN] */
    float *xd = ws_norm + CH_MAX_KN;              /* [CH_MAX_K / 32] */
    int8_t *xq = (int8_t *)(xd + CH_MAX_K / 32);  /* [CH_MAX_K] */
    __shared__ float part[32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int G = (int)a.nblocks * CH_WARPS, gw = (int)blockIdx.x * CH_WARPS + warp;
    chain_prefetch(a.st[0], gw, G, lane);
    chain_stage_weights(a.st[0], ws_res, ws_norm);
    gmc_pdl_wait();
    stamp(a, 4 * GM_CUDA_CHAIN_MAX, false);
    unsigned long long target = 0;   /* grid_barrier's */
    const ChainStep *written = NULL; /* the step whose updated row block 0 still has to write back (in xs) */
    for (int i = 0; i < a.n; i++) {
        const ChainStep &s = a.st[i];
        if (written) {
            if (blockIdx.x == 0)
                for (int j = threadIdx.x; j < written->K / 4; j += CH_THREADS)
                    ((float4 *)written->x)[j] = ((const float4 *)xs)[j];
            written = NULL;
            if (s.sync_before) grid_barrier(a.bar, a.nblocks, target);
            else __syncthreads(); /* xs is staged again below */
        }
        chain_prep(s, xs, xn, ws_res, ws_norm, xq, xd, part, warp, lane);
        stamp(a, 4 * i, false);
        if (i + 1 < a.n) { /* the next step's weights on their way while this one multiplies */
            chain_stage_weights(a.st[i + 1], ws_res, ws_norm);
            chain_prefetch(a.st[i + 1], gw, G, lane);
        }
        switch (s.type) {
        case GMC_Q4_0: chain_products<TQ4_0>(s, xq, xd, gw, G, lane); break;
        case GMC_Q4_0_G8: chain_products<TQ4_0_G8>(s, xq, xd, gw, G, lane); break;
        case GMC_Q5_0: chain_products<TQ5_0>(s, xq, xd, gw, G, lane); break;
        default: chain_products<TQ8_0>(s, xq, xd, gw, G, lane); break;
        }
        stamp(a, 4 * i + 1, false);
        stamp(a, 4 * i + 2, true);
        if (s.res) written = &s;
        if (i + 1 < a.n || written) grid_barrier(a.bar, a.nblocks, target);
        stamp(a, 4 * i + 3, false);
    }
    if (written && blockIdx.x == 0)
        for (int j = threadIdx.x; j < written->K / 4; j += CH_THREADS)
            ((float4 *)written->x)[j] = ((const float4 *)xs)[j];
}

static size_t chain_smem_bytes(void) {
    return sizeof(float) * (CH_MAX_K + 3 * CH_MAX_KN + CH_MAX_K / 32) + CH_MAX_K;
}

/* One block per SM of the current device (the barrier needs every block resident; one per SM even where two would
 * fit), found once per device. */
extern "C" int gm_cuda_chain_blocks(void) {
    enum { MAX_DEV = 64 };
    static int blocks[MAX_DEV];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEV) return 0;
    if (!blocks[dev]) {
        const size_t smem = chain_smem_bytes();
        int sms = 0, per_sm = 0;
        if (cudaFuncSetAttribute(chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, chain_kernel, CH_THREADS, smem) != cudaSuccess ||
            per_sm < 1 || sms < 1) {
            cudaGetLastError();
            return 0;
        }
        blocks[dev] = sms;
    }
    return blocks[dev];
}

static unsigned long long *g_stamps = NULL;
extern "C" void gm_cuda_chain_set_stamps(void *stamps) { g_stamps = (unsigned long long *)stamps; }

extern "C" int gm_cuda_chain_takes(const gm_cuda_act_in *in, const gm_cuda_multi *m) {
    if (!in || !m || in->n != 1 || !in->x || m->next.kind != GM_CUDA_NEXT_NONE || m->n_w < 1 || m->n_w > 3) return 0;
    const int32_t t = m->w[0].type;
    if (t != GMC_Q4_0 && t != GMC_Q4_0_G8 && t != GMC_Q5_0 && t != GMC_Q8_0) return 0;
    const int64_t K = in->K;
    const bool prep = in->res_add || in->norm;
    if (K % 32 != 0 || K <= 0 || K > (prep ? CH_MAX_KN : CH_MAX_K)) return 0;
    if (prep && gmc_prep_reg_warps(K) <= 0) return 0;
    if (m->epi == GM_CUDA_EPI_GEGLU && (m->n_w != 2 || m->w[1].ne1 != m->w[0].ne1)) return 0;
    if (m->epi == GM_CUDA_EPI_GELU_MUL && (m->n_w != 1 || !m->mul)) return 0;
    if (m->epi != GM_CUDA_EPI_STORE && m->epi != GM_CUDA_EPI_GEGLU && m->epi != GM_CUDA_EPI_GELU_MUL) return 0;
    int64_t rows = 0;
    for (int i = 0; i < m->n_w; i++) {
        if (m->w[i].type != t || m->w[i].ne0 != K || !m->w[i].data || m->w[i].ne1 <= 0) return 0;
        if (!m->y[i] && !(m->epi == GM_CUDA_EPI_GEGLU && i == 1)) return 0;
        rows += m->w[i].ne1;
    }
    /* float4 staging of x, res_add and the norms' weights */
    if (((uintptr_t)in->x & 15) || ((uintptr_t)in->res_add & 15) || ((uintptr_t)in->res_w & 15) || ((uintptr_t)in->w & 15))
        return 0;
    return rows < (1 << 30);
}

static bool ranges_overlap(const void *a, int64_t an, const void *b, int64_t bn) {
    if (!a || !b) return false;
    const uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return a0 < b0 + (uintptr_t)bn * 4 && b0 < a0 + (uintptr_t)an * 4;
}

/* Whether step s reads or writes the row step p writes back (x, K floats). */
static bool touches_row(const gm_cuda_chain_step *s, const float *x, int64_t K) {
    const gm_cuda_multi *m = &s->m;
    if (ranges_overlap(s->in.x, s->in.K, x, K) || ranges_overlap(s->in.res_add, s->in.K, x, K) ||
        ranges_overlap(m->mul, m->w[0].ne1, x, K))
        return true;
    for (int i = 0; i < m->n_w; i++)
        if (ranges_overlap(m->y[i], m->w[i].ne1, x, K)) return true;
    return false;
}

extern "C" int gm_cuda_chain(const gm_cuda_chain_step *steps, int32_t n_steps, void *barrier, gm_cuda_stream stream) {
    if (!steps || n_steps < 1 || n_steps > GM_CUDA_CHAIN_MAX || !barrier)
        return gmc_fail(-1, "chain: bad arguments (%d steps)", (int)n_steps);
    const int nblocks = gm_cuda_chain_blocks();
    if (!nblocks) return gmc_fail(-1, "chain: no room for its blocks on this device");
    ChainArgs a;
    memset(&a, 0, sizeof a);
    a.n = n_steps, a.bar = (unsigned long long *)barrier, a.nblocks = (unsigned)nblocks, a.stamps = g_stamps;
    for (int i = 0; i < n_steps; i++) {
        const gm_cuda_chain_step *c = &steps[i];
        if (!gm_cuda_chain_takes(&c->in, &c->m)) return gmc_fail(-1, "chain: step %d is not a chain step", i);
        ChainStep *s = &a.st[i];
        s->x = c->in.x, s->res_add = c->in.res_add, s->res_w = c->in.res_w, s->norm_w = c->in.w, s->mul = c->m.mul;
        s->res_scale = c->in.res_scale, s->eps = c->in.eps;
        s->K = (int)c->in.K, s->res = c->in.res_add != NULL, s->norm = c->in.norm != 0;
        s->W = s->res || s->norm ? gmc_prep_reg_warps(c->in.K) : 0;
        s->type = c->m.w[0].type, s->epi = c->m.epi, s->n_seg = c->m.n_w;
        s->units = 0;
        for (int k = 0; k < c->m.n_w; k++) {
            s->w[k] = (const uint8_t *)c->m.w[k].data, s->row_bytes[k] = c->m.w[k].row_bytes;
            s->M[k] = (int)c->m.w[k].ne1, s->y[k] = c->m.y[k];
            if (c->m.epi != GM_CUDA_EPI_GEGLU || k == 0) s->units += s->M[k];
        }
        s->sync_before = i > 0 && steps[i - 1].in.res_add && touches_row(c, steps[i - 1].in.x, steps[i - 1].in.K);
    }
    gmc_launch(chain_kernel, dim3((unsigned)nblocks), dim3(CH_THREADS), chain_smem_bytes(), stream, a);
    return gmc_check_launch("chain");
}
