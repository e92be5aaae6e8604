/* matmul_cuda.cu: y[n][M] = x[n][K] · Wᵀ on the GPU for n = 1..8 columns per launch (more columns: one
 * launch per 8), weights read straight from their GGUF blocks. Owns: the activation quantizers (f32 -> q8_0
 * or q8_K, bit-identical to the CPU's) and the one-launch preparation of a projection's input (residual add,
 * rmsnorm, quantize), the integer-dot matvec for q4_0 / q5_0 / q8_0 / q4_K / q5_K / q6_K and the f32-FMA matvec
 * for f32 / f16 / bf16, each over up to three matrices per launch with a store / GeGLU / gelu·mul epilogue.
 * Leaves to others: which matrices share an input (the forward pass), long batches (gemm_cuda.cu).
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
#include <string.h>

#include "act_quant_cuda.cuh"
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
    gmc_pdl_wait();
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_blocks) return;
    const float4 *src = (const float4 *)(x + b * 32);
    float v[32];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float4 f = src[i];
        v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
    quant_q8_0_block(v, xq + b * 32, xd + b);
}

/* q8_K (for q4_K / q5_K / q6_K weights), one warp per 256-value block, 8 consecutive values per lane: max = the
 * value of largest |x| (the FIRST one on ties, as the reference's strict '>' scan), iscale = -127/max,
 * q = min(round-half-even(iscale · x), 127), d = 1/iscale; an all-zero block gets d = 0 and q = 0. The bsums
 * of the CPU block (sums of 16) are not stored: the dot kernels form the same integer sums with dp4a. */
__global__ void quantize_q8_K_act_kernel(const float *__restrict__ x, int64_t n_blocks, int8_t *__restrict__ xq,
                                         float *__restrict__ xd) {
    gmc_pdl_wait();
    const int64_t b = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (b >= n_blocks) return; /* whole warps leave together: blockDim is a multiple of 32 */
    const float4 *src = (const float4 *)(x + b * 256 + 8 * lane);
    const float4 f0 = src[0], f1 = src[1];
    const float v[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
    quant_q8_K_block_warp(v, lane, xq + b * 256, xd + b);
}

/* A projection's input prepared in one launch (gm_cuda_act_in): one block of 256 threads per row of K; the
 * residual update, the rmsnorm (its scale exactly as rmsnorm_kernel in ops_cuda.cu computes it, v = (x · scale)
 * · w), then the quantizer of act_type over v, or (act_type < 0) v itself stored as f32 to xf. One launch
 * instead of up to four (rmsnorm_add, scale, rmsnorm, quantize). */
__global__ void __launch_bounds__(256) act_prep_kernel(const gm_cuda_act_in in, int act_type, int8_t *__restrict__ xq,
                                                       float *__restrict__ xd, float *__restrict__ xf) {
    gmc_pdl_wait();
    const int64_t r = blockIdx.x;
    const int K = (int)in.K;
    float *xr = in.x + r * K;
    if (in.res_add) gmc_residual_update(xr, in.res_add + r * K, in.res_w, in.res_scale, K, in.eps);
    const float scale = in.norm ? gmc_row_rms_scale(xr, K, in.eps) : 1.0f;
    const float *w = in.norm ? in.w : NULL; /* the norm's weight: none without the norm */
    if (act_type == GMC_Q8_0) {
        for (int b = threadIdx.x; b < K / 32; b += blockDim.x) {
            float v[32];
#pragma unroll
            for (int i = 0; i < 32; i++) {
                v[i] = in.norm ? __fmul_rn(xr[32 * b + i], scale) : xr[32 * b + i];
                if (w) v[i] = __fmul_rn(v[i], w[32 * b + i]);
            }
            quant_q8_0_block(v, xq + r * K + 32 * b, xd + r * (K / 32) + b);
        }
    } else if (act_type == GMC_Q8_K) {
        const int lane = threadIdx.x & 31;
        for (int b = threadIdx.x >> 5; b < K / 256; b += blockDim.x >> 5) {
            float v[8];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int j = 256 * b + 8 * lane + i;
                v[i] = in.norm ? __fmul_rn(xr[j], scale) : xr[j];
                if (w) v[i] = __fmul_rn(v[i], w[j]);
            }
            quant_q8_K_block_warp(v, lane, xq + r * K + 256 * b, xd + r * (K / 256) + b);
        }
    } else {
        for (int i = threadIdx.x; i < K; i += blockDim.x) {
            float v = in.norm ? __fmul_rn(xr[i], scale) : xr[i];
            if (w) v = __fmul_rn(v, w[i]);
            xf[r * K + i] = v;
        }
    }
}

/* The f16 form of a prepared row for the tensor-core path (act_type GMC_F16): the row times 2^-e, e = the
 * exponent of its max |v| minus 15 (so every |v| · 2^-e < 2^15 fits f16: Gemma's residual stream exceeds 65504),
 * and 2^e kept as the column's scale for the GEMM's epilogue. */
__device__ __forceinline__ int f16_row_exponent(float amax) {
    int e = 0;
    if (amax > 0.0f && isfinite(amax)) {
        frexpf(amax, &e); /* amax = f · 2^e, f in [0.5, 1) */
        e -= 15;
    }
    return e;
}

/* The same preparation with the row held in registers (q8_0, q8_K, f32 or scaled f16 output, K a multiple of 32
 * (of 256 for q8_K), at most 32 · 32 · VPL): warp w of W owns the 32-value blocks w, w + W, ..., lane l value l of
 * each, so x and the residual are read once, coalesced, every reduction is shuffles plus one pass through shared
 * memory, and a q8_0 block's amax is one warp max (a q8_K block, 8 warps' values, is regrouped through shared
 * memory and quantized by quant_q8_K_block_warp). The norms' weights are loaded before the wait. The quantizers'
 * arithmetic is quant_q8_0_block's / quant_q8_K_block_warp's (the same bytes for the same v); the rms sums are
 * added in another order than gmc_row_rms_scale's. One block of 32 · W threads per row: a decoding step's rows
 * are short serial chains, and this one is the shortest. */
template <int VPL, int MAXT, bool FIRST>
__global__ void __launch_bounds__(MAXT) act_prep_reg_kernel(const gm_cuda_act_in in, int act_type,
                                                            int8_t *__restrict__ xq, float *__restrict__ xd,
                                                            float *__restrict__ xf, __half *__restrict__ xh,
                                                            int xh_order,
                                                            const __grid_constant__ gm_cuda_gemm_epi first) {
    __shared__ float part[32];
    const int64_t r = blockIdx.x;
    const int K = (int)in.K, nb = K / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
    /* the norms' weights (immutable) into registers before the wait: two fewer L2 round trips after it */
    float rw[VPL], nw[VPL];
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int b = warp + i * W;
        rw[i] = in.res_add && in.res_w && b < nb ? __ldg(in.res_w + 32 * b + lane) : 1.0f;
        nw[i] = in.norm && in.w && b < nb ? __ldg(in.w + 32 * b + lane) : 1.0f;
    }
    gmc_pdl_wait();
    if (FIRST) gmc_gemm_epi_column(first, r); /* a held epilogue's row r first (gm_cuda_prepare_act_f16) */
    float *xr = in.x + r * K;
    float v[VPL];
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int b = warp + i * W;
        v[i] = b < nb ? xr[32 * b + lane] : 0.0f;
    }
    if (in.res_add) {
        const float *ar = in.res_add + r * K;
        float a[VPL], ss = 0.0f;
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            const int b = warp + i * W;
            a[i] = b < nb ? ar[32 * b + lane] : 0.0f;
            ss = fmaf(a[i], a[i], ss);
        }
        const float rs = 1.0f / sqrtf(gmc_block_sum(ss, part) / (float)K + in.eps);
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            const int b = warp + i * W;
            if (b >= nb) continue;
            float t = __fmul_rn(a[i], rs);
            if (in.res_w) t = __fmul_rn(t, rw[i]);
            float y = __fadd_rn(v[i], t);
            if (in.res_scale != 1.0f) y = __fmul_rn(y, in.res_scale);
            v[i] = y;
            xr[32 * b + lane] = y;
        }
    }
    if (in.norm) {
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < VPL; i++) ss = fmaf(v[i], v[i], ss);
        const float scale = 1.0f / sqrtf(gmc_block_sum(ss, part) / (float)K + in.eps);
#pragma unroll
        for (int i = 0; i < VPL; i++) { /* the normalised row, in place: what every branch below quantizes */
            if (warp + i * W >= nb) continue;
            float t = __fmul_rn(v[i], scale);
            if (in.w) t = __fmul_rn(t, nw[i]);
            v[i] = t;
        }
    }
    if (act_type == GMC_F16) { /* xd: the column scales */
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            const int b = warp + i * W;
            if (b >= nb) continue;
            amax = fmaxf(amax, fabsf(v[i]));
        }
        const int e = f16_row_exponent(gmc_block_max(amax, part));
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            const int b = warp + i * W;
            if (b >= nb) continue;
            const int k = 32 * b + lane;
            xh[r * K + (xh_order == GM_CUDA_ACT_ORDER_QG ? gmc_qg_act_pos(k) : k)] = __float2half_rn(ldexpf(v[i], -e));
        }
        if (threadIdx.x == 0) xd[r] = ldexpf(1.0f, e);
        return;
    }
    if (act_type == GMC_Q8_K) { /* a 256-value block spans 8 warps' values: through shared memory, a warp a block */
        extern __shared__ float prep_row[]; /* K floats (launch_prep_reg) */
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            const int b = warp + i * W;
            if (b < nb) prep_row[32 * b + lane] = v[i];
        }
        __syncthreads();
        for (int qb = warp; qb < K / 256; qb += W) {
            const float4 f0 = *(const float4 *)(prep_row + 256 * qb + 8 * lane);
            const float4 f1 = *(const float4 *)(prep_row + 256 * qb + 8 * lane + 4);
            const float q[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
            quant_q8_K_block_warp(q, lane, xq + r * K + 256 * qb, xd + r * (K / 256) + qb);
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int b = warp + i * W;
        if (b >= nb) continue; /* whole warps skip together: b depends on the warp only */
        const int j = 32 * b + lane;
        const float t = v[i];
        if (act_type == GMC_Q8_0) {
            const float amax = gmc_warp_max(fabsf(t));
            xq[r * K + j] = (int8_t)__float2int_rn(__fmul_rn(t, q8_0_inv_scale(amax)));
            if (lane == 0) xd[r * nb + b] = q8_0_scale(amax);
        } else {
            xf[r * K + j] = t;
        }
    }
}

#include "quant_items_cuda.cuh"

/* ---------------------------------------------------------------------------------------------------------
 * What one matvec launch multiplies: up to three matrices of one type and K ("segments", each with its own
 * output y[N][ldy]) read against the same activations; blocks [blk_end[s-1], blk_end[s]) work on segment s.
 * The epilogue: EPI_STORE writes each row; EPI_GEGLU (two segments of equal M) gives a warp the same rows of
 * both and writes gelu_tanh(row of W_0) · (row of W_1) to segment 0's y; EPI_GELU_MUL writes
 * gelu_tanh(row) · mul[c][row]. eid (MoE): every segment's rows offset by eid[blockIdx.y] · e_bytes (one segment,
 * or the two of a GeGLU); without gcol blockIdx.y is a (token, expert) pair: x column blockIdx.y / x_div, y column
 * blockIdx.y; with gcol it is a group of columns through one expert: x and y columns gcol[2y] .. + gcol[2y+1] − 1
 * (at most N; the kernel reads N columns from gcol[2y], so x has N − 1 rows of padding at its end). */
enum { EPI_STORE = 0, EPI_GEGLU = 1, EPI_GELU_MUL = 2 };
struct MvArgs {
    const uint8_t *W[3];
    uint64_t row_bytes[3];
    int64_t M[3];
    float *y[3];
    int64_t ldy[3];
    unsigned blk_end[3];
    int n_seg;
    const float *mul;
    const int32_t *eid;
    const int32_t *gcol;
    uint64_t e_bytes;
    int x_div;
    /* the next op's input quantized from y[0] (gm_cuda_next, kind GM_CUDA_NEXT_QUANT); q NULL: none */
    int8_t *nq;
    float *nd;
    unsigned *ncount;
    int n_act; /* GMC_Q8_0 or GMC_Q8_K */
    /* blocks [0, pf_blocks) hint their rows into L2 before the wait: the launch's first wave (first_wave), the
     * blocks that can start while the kernel before still runs; a later block would only request its rows twice */
    unsigned pf_blocks;
};

/* A warp's rows: R row pointers, its segment s and first row row0 (per matrix); false when it has none.
 * Weights are immutable, so their rows are hinted into L2 before gmc_pdl_wait (overlapping the kernel before) and
 * pre() (the kernel's first weight loads into registers) runs before it too, unless the rows depend on MoE expert
 * ids: those are activations, read after the wait, and pre() is then not called. Returns with gmc_pdl_wait done. */
template <int R, int EPI, class Pre, int KS = 1>
__device__ __forceinline__ bool mv_rows(const MvArgs &a, int warp, int lane, int &s, int64_t &row0,
                                        const uint8_t *rows[R], Pre pre) {
    constexpr int RS = EPI == EPI_GEGLU ? R / 2 : R; /* rows of each matrix per warp (KS warps share them) */
    unsigned blk = blockIdx.x;
    s = 0;
    if (EPI != EPI_GEGLU)
        while (s + 1 < a.n_seg && blk >= a.blk_end[s]) s++;
    if (s) blk -= a.blk_end[s - 1];
    const int64_t M = a.M[s];
    row0 = ((int64_t)blk * (4 / KS) + warp / KS) * RS;
    if (row0 >= M) {
        gmc_pdl_wait();
        return false;
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int sg = EPI == EPI_GEGLU && r >= RS ? 1 : s;
        const int64_t row = row0 + r % RS;
        rows[r] = a.W[sg] + (uint64_t)(row < M ? row : M - 1) * a.row_bytes[sg];
    }
    if (a.eid) {
        gmc_pdl_wait();
        const uint64_t off = (uint64_t)a.eid[blockIdx.y] * a.e_bytes;
#pragma unroll
        for (int r = 0; r < R; r++) rows[r] += off;
    } else {
#pragma unroll
        for (int r = 0; r < R; r++)
            if (blockIdx.x < a.pf_blocks && row0 + r % RS < M)
                gmc_prefetch_l2(rows[r], a.row_bytes[EPI == EPI_GEGLU && r >= RS ? 1 : s], lane);
        pre();
        gmc_pdl_wait();
    }
    return true;
}

/* Reduces each row's per-lane sums over the warp and writes the row as the epilogue says. */
/* The columns of x and y a block works on (MvArgs): N from column 0, a MoE pair's one, or a MoE group's. */
struct MvCols {
    int64_t x, y;
    int n;
};
template <int N>
__device__ __forceinline__ MvCols mv_cols(const MvArgs &a) {
    if (!a.eid) return MvCols{0, 0, N};
    if (!a.gcol) return MvCols{(int64_t)(blockIdx.y / a.x_div), (int64_t)blockIdx.y, 1};
    const int64_t c0 = a.gcol[2 * blockIdx.y];
    return MvCols{c0, c0, a.gcol[2 * blockIdx.y + 1]};
}

/* A row split over KS warps of a block (KS > 1: R = 1, one matrix; 4 / KS rows a block, warps w .. w + KS - 1 on
 * one row): each warp summed every KS-th step of the row's items; their warp sums are added in warp order through
 * shared memory and left in lane 0 of the row's first warp (its other lanes 0), so that mv_store's warp sum gives
 * the row. false for the warps that store nothing. Every thread of the block calls it. */
template <int N, int KS>
__device__ __forceinline__ bool mv_split_sum(float (&acc)[1][N], int warp, int lane) {
    __shared__ float part[4][N];
#pragma unroll
    for (int c = 0; c < N; c++) {
        const float v = gmc_warp_sum(acc[0][c]);
        if (lane == 0) part[warp][c] = v;
    }
    __syncthreads();
    if (warp % KS) return false;
#pragma unroll
    for (int c = 0; c < N; c++) {
        float t = part[warp][c];
#pragma unroll
        for (int k = 1; k < KS; k++) t += part[warp + k][c];
        acc[0][c] = lane == 0 ? t : 0.0f;
    }
    return true;
}

template <int R, int N, int EPI>
__device__ __forceinline__ void mv_store(const MvArgs &a, int s, int64_t row0, int lane, float acc[R][N],
                                         const MvCols &cols) {
    constexpr int RS = EPI == EPI_GEGLU ? R / 2 : R;
    const int64_t M = a.M[s], ldy = a.ldy[s];
    float *y = a.y[s] + (size_t)cols.y * ldy;
#pragma unroll
    for (int r = 0; r < RS; r++)
#pragma unroll
        for (int c = 0; c < N; c++) {
            float v = gmc_warp_sum(acc[r][c]);
            if (EPI == EPI_GEGLU) v = __fmul_rn(gmc_gelu_tanh(v), gmc_warp_sum(acc[r + RS][c]));
            if (lane == ((r * N + c) & 31) && row0 + r < M && c < cols.n) {
                if (EPI == EPI_GELU_MUL) v = __fmul_rn(gmc_gelu_tanh(v), a.mul[(size_t)c * ldy + row0 + r]);
                y[(size_t)c * ldy + row0 + r] = v;
            }
        }
}

/* The next op's input quantized from this launch's output y[0] (one segment, or a GeGLU's), by the blocks
 * themselves instead of a quantize launch after them: a group is the rows of one activation block (32 for q8_0,
 * 256 for q8_K), written by QB / (4·RS) consecutive blocks; each block, once its rows are stored, counts itself
 * into its group's counter (after a fence, so its stores are visible), and the block that completes the group
 * resets the counter and quantizes the group's rows of every column (warp c: column c, c + 4, ...), exactly as
 * quantize_q8_0_act_kernel / quantize_q8_K_act_kernel would (the same values through the same arithmetic).
 * Every thread of every block must call it (it synchronises the block). */
template <int R, int N, int EPI>
__device__ __forceinline__ void mv_quant_next(const MvArgs &a) {
    constexpr int RB = 4 * (EPI == EPI_GEGLU ? R / 2 : R); /* rows of y[0] per block */
    __shared__ unsigned last;
    const int qb = a.n_act == GMC_Q8_K ? 256 : 32;
    const unsigned g = blockIdx.x * RB / qb;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(&a.ncount[g], 1u) == (unsigned)(qb / RB) - 1;
        if (last) a.ncount[g] = 0; /* every block of the group has counted: nobody reads it again this launch */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t K = a.M[0], nb = K / qb;
    for (int c = warp; c < N; c += 4) {
        const float *yr = a.y[0] + (size_t)c * a.ldy[0] + (size_t)g * qb;
        if (qb == 32) {
            const float v = __ldcg(yr + lane);
            const float amax = gmc_warp_max(fabsf(v));
            a.nq[c * K + (int64_t)g * 32 + lane] = (int8_t)__float2int_rn(__fmul_rn(v, q8_0_inv_scale(amax)));
            if (lane == 0) a.nd[c * nb + g] = q8_0_scale(amax);
        } else {
            const float4 f0 = __ldcg((const float4 *)(yr + 8 * lane)), f1 = __ldcg((const float4 *)(yr + 8 * lane) + 1);
            const float v[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
            quant_q8_K_block_warp(v, lane, a.nq + c * K + (int64_t)g * 256, a.nd + c * nb + g);
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------
 * Quantized matvec. Grid: ceil(M / (4R)) blocks of 128 threads. y is [N][ldy]. */
template <class T, int R, int N, int EPI, int KS = 1>
__global__ void __launch_bounds__(128) mmvq_kernel(const __grid_constant__ MvArgs a, int K,
                                                   const int8_t *__restrict__ xq, const float *__restrict__ xds) {
    static_assert(KS == 1 || KS == 2 || KS == 4, "a block's 4 warps split rows evenly");
    static_assert(KS == 1 || (R == 1 && EPI != EPI_GEGLU), "a split row is one row of one matrix");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kl = (warp % KS) * 32 + lane; /* the lane's first item: KS warps split a row's items */
    const uint8_t *rows[R];
    int s;
    int64_t row0;
    const int n_items = K / T::ELEMS;
    /* U items per lane per step, all their weight loads issued before the first is used (U = 2 measured slower
     * on the H200 in almost every case: more registers, fewer resident warps) */
    constexpr int U = 1;
    int w[U][R][T::SPANS][4];
    float ws[U][R][T::SPANS], wm[U][R][T::SPANS];
    bool first_loaded = false; /* the first step's weights, loaded before the wait (a 2560-wide q4_0 row has 2.5
                                  steps per lane: 40% of a small product's weights are in registers when it starts) */
    auto pre = [&] {
        if (kl < n_items) {
#pragma unroll
            for (int r = 0; r < R; r++) T::load(rows[r], kl, w[0][r], ws[0][r], wm[0][r]);
            first_loaded = true;
        }
    };
    if (!mv_rows<R, EPI, decltype(pre), KS>(a, warp, lane, s, row0, rows, pre)) {
        if (KS == 1 && a.nq) mv_quant_next<R, N, EPI>(a);
        return;
    }
    const int kb = K >> T::ACT_SHIFT; /* activation scales per column */
    const MvCols cols = mv_cols<N>(a);
    if (cols.n <= 0) return; /* an empty MoE group */
    xq += (size_t)cols.x * K;
    xds += (size_t)cols.x * kb;
    float acc[R][N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < N; c++) acc[r][c] = 0.0f;

    for (int it0 = kl; it0 < n_items; it0 += 32 * KS * U) {
#pragma unroll
        for (int u = 0; u < U; u++)
            if (it0 + 32 * KS * u < n_items && !(first_loaded && it0 + 32 * KS * u == kl))
#pragma unroll
                for (int r = 0; r < R; r++) T::load(rows[r], it0 + 32 * KS * u, w[u][r], ws[u][r], wm[u][r]);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (it0 + 32 * KS * u >= n_items) break;
            int off[T::SPANS];
            T::act_off(it0 + 32 * KS * u, off);
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
    if constexpr (KS > 1) {
        if (!mv_split_sum<N, KS>(acc, warp, lane)) return;
    }
    mv_store<R, N, EPI>(a, s, row0, lane, acc, cols);
    if (KS == 1 && a.nq) mv_quant_next<R, N, EPI>(a);
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

template <int TYPE, int VEC, int R, int N, int EPI, int KS = 1>
__global__ void __launch_bounds__(128) mmvf_kernel(const __grid_constant__ MvArgs a, int K,
                                                   const float *__restrict__ x) {
    static_assert(KS == 1 || (R == 1 && EPI != EPI_GEGLU), "a split row is one row of one matrix");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kl = (warp % KS) * 32 + lane; /* the lane's first item: KS warps split a row's items */
    const uint8_t *rows[R];
    int s;
    int64_t row0;
    const int n_items = K / VEC;
    constexpr int U = 1; /* as mmvq_kernel, and as there the first step's weights before the wait */
    float w[U][R][VEC];
    bool first_loaded = false;
    auto pre = [&] {
        if (kl < n_items) {
#pragma unroll
            for (int r = 0; r < R; r++) load_fw<TYPE, VEC>(rows[r], kl, w[0][r]);
            first_loaded = true;
        }
    };
    if (!mv_rows<R, EPI, decltype(pre), KS>(a, warp, lane, s, row0, rows, pre)) {
        if (KS == 1 && a.nq) mv_quant_next<R, N, EPI>(a);
        return;
    }
    const MvCols cols = mv_cols<N>(a); /* as mmvq_kernel */
    if (cols.n <= 0) return;
    x += (size_t)cols.x * K;
    float acc[R][N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < N; c++) acc[r][c] = 0.0f;
    for (int it0 = kl; it0 < n_items; it0 += 32 * KS * U) {
#pragma unroll
        for (int u = 0; u < U; u++)
            if (it0 + 32 * KS * u < n_items && !(first_loaded && it0 + 32 * KS * u == kl))
#pragma unroll
                for (int r = 0; r < R; r++) load_fw<TYPE, VEC>(rows[r], it0 + 32 * KS * u, w[u][r]);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int it = it0 + 32 * KS * u;
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
    if constexpr (KS > 1) {
        if (!mv_split_sum<N, KS>(acc, warp, lane)) return;
    }
    mv_store<R, N, EPI>(a, s, row0, lane, acc, cols);
    if (KS == 1 && a.nq) mv_quant_next<R, N, EPI>(a);
}

/* ---------------------------------------------------------------------------------------------------------
 * Host side. */
static int g_mmv_rows = 0;   /* 0: default choice */

extern "C" void gm_cuda_set_mmv_rows(int rows) { g_mmv_rows = rows == 1 || rows == 2 || rows == 4 ? rows : 0; }
static int g_mmv_split_ks = 0, g_mmv_split_min_k = 0; /* 0: mv_split_rows' defaults */
extern "C" void gm_cuda_set_mmv_split(int ks, int min_k) {
    g_mmv_split_ks = ks == 1 || ks == 2 || ks == 4 ? ks : 0;
    g_mmv_split_min_k = min_k >= 0 ? min_k : 0;
}

/* Rows per warp, from the H200 sweep (bench/cuda_bench.cu, BENCHMARKS.md): at n = 1, 2 rows pay only on short,
 * tall matrices of the densest types (K <= 4096, M >= 8192: q4_0 / q4_K / float 2560->10240 and the LM head:
 * -10..15%); everything else is fastest with 1. More columns reuse each activation load over more rows: 2 rows
 * for n <= 4, 4 rows above. */
static int default_rows(int type, int n, int64_t K, int64_t M) {
    if (g_mmv_rows) return g_mmv_rows;
    const int dense = type == GMC_F32 || type == GMC_F16 || type == GMC_BF16 || type == GMC_Q4_0 ||
                      type == GMC_Q4_0_G8 || type == GMC_Q4_K;
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
    case GMC_Q6_K: case GMC_Q6_K_A16: case GMC_Q4_0_G8: return 1;
    default: return 0;
    }
}

/* ---- device layouts: what a GGUF type is re-laid as at upload (GMC_Q6_K_A16, GMC_Q4_0_G8), and the re-laying ---- */
static int g_device_layouts = 1;
extern "C" void gm_cuda_set_device_layouts(int on) { g_device_layouts = on != 0; }

extern "C" int32_t gm_cuda_device_type(int32_t type) {
    if (!g_device_layouts) return type;
    return type == GMC_Q6_K ? GMC_Q6_K_A16 : type == GMC_Q4_0 ? GMC_Q4_0_G8 : type;
}

extern "C" uint64_t gm_cuda_device_row_bytes(int32_t dtype, int64_t ne0) {
    if (dtype == GMC_Q6_K_A16 && ne0 > 0 && ne0 % GMC_QK_K == 0) return (uint64_t)(ne0 / GMC_QK_K) * Q6_K_A16_BYTES;
    if (dtype == GMC_Q4_0_G8 && ne0 > 0 && ne0 % GMC_QK == 0) return (uint64_t)((ne0 / GMC_QK + 7) / 8) * Q4_0_G8_BYTES;
    return 0;
}

extern "C" int gm_cuda_relayout(int32_t dtype, int64_t ne0, int64_t n_rows, const void *src, uint64_t src_row_bytes,
                                void *dst) {
    const uint64_t drow = gm_cuda_device_row_bytes(dtype, ne0);
    const bool q4 = dtype == GMC_Q4_0_G8;
    const int64_t nb = ne0 / (q4 ? GMC_QK : GMC_QK_K);
    if (!drow || n_rows < 0 || !src || !dst || src_row_bytes < (uint64_t)nb * (q4 ? Q4_0_BYTES : Q6_K_BYTES))
        return gmc_fail(-1, "relayout: bad arguments (type %d, %lld x %lld)", dtype, (long long)ne0, (long long)n_rows);
    if (q4) {
        for (int64_t r = 0; r < n_rows; r++) {
            const uint8_t *sr = (const uint8_t *)src + (uint64_t)r * src_row_bytes;
            uint8_t *dr = (uint8_t *)dst + (uint64_t)r * drow;
            memset(dr, 0, drow); /* the padding of a last partial group */
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *g = dr + (b / 8) * Q4_0_G8_BYTES;
                memcpy(g + 16 * (b % 8), sr + b * Q4_0_BYTES + 2, 16);
                memcpy(g + 128 + 2 * (b % 8), sr + b * Q4_0_BYTES, 2);
            }
        }
        return 0;
    }
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *sr = (const uint8_t *)src + (uint64_t)r * src_row_bytes;
        uint8_t *dr = (uint8_t *)dst + (uint64_t)r * drow;
        for (int64_t b = 0; b < nb; b++) {
            memcpy(dr + b * Q6_K_A16_BYTES, sr + b * Q6_K_BYTES, Q6_K_BYTES);
            memset(dr + b * Q6_K_A16_BYTES + Q6_K_BYTES, 0, Q6_K_A16_BYTES - Q6_K_BYTES);
        }
    }
    return 0;
}

static int is_quant(int type) {
    return type == GMC_Q4_0 || type == GMC_Q5_0 || type == GMC_Q8_0 || (type >= GMC_Q4_K && type <= GMC_Q6_K) ||
           type == GMC_Q6_K_A16 || type == GMC_Q4_0_G8;
}

extern "C" int gm_cuda_act_type(int32_t wtype) {
    switch (wtype) {
    case GMC_Q4_0: case GMC_Q4_0_G8: case GMC_Q5_0: case GMC_Q8_0: return GMC_Q8_0;
    case GMC_Q4_K: case GMC_Q5_K: case GMC_Q6_K: case GMC_Q6_K_A16: return GMC_Q8_K;
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
        gmc_launch(quantize_q8_0_act_kernel, (unsigned)((nb + 127) / 128), 128, 0, stream, x, nb, q, ds);
    else
        gmc_launch(quantize_q8_K_act_kernel, (unsigned)((nb + 3) / 4), 128, 0, stream, x, nb, q, ds);
    return gmc_check_launch("quantize_act");
}

/* ---- launching: segments -> MvArgs, then the template for (type, rows per warp, columns, epilogue) ---- */
static bool g_prefetch_all = false; /* gm_cuda_set_mmv_prefetch_all: every block hints (before the first wave) */
extern "C" void gm_cuda_set_mmv_prefetch_all(int on) { g_prefetch_all = on != 0; }

/* a with pf_blocks set to kernel k's first wave: its 128-thread blocks resident at once on the device, asked of
 * the occupancy calculator once per kernel (cache: that kernel's own; every block when the query fails). */
template <class Kern>
static MvArgs first_wave(const MvArgs &a, Kern k, unsigned *cache) {
    if (!*cache) {
        int dev = 0, sms = 0, per_sm = 0;
        const bool ok = cudaGetDevice(&dev) == cudaSuccess &&
                        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
                        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, 128, 0) == cudaSuccess;
        *cache = ok && sms > 0 && per_sm > 0 ? (unsigned)(sms * per_sm) : ~0u;
    }
    MvArgs b = a;
    b.pf_blocks = g_prefetch_all ? ~0u : *cache;
    return b;
}

template <class T, int R, int EPI, int KS = 1>
static void launch_q_re(const MvArgs &a, dim3 grid, int K, const int8_t *q, const float *ds, int n, cudaStream_t s) {
    static unsigned wave[9];
    switch (n) {
#define GMC_CASE(NN) \
    case NN: \
        gmc_launch(mmvq_kernel<T, R, NN, EPI, KS>, grid, 128, 0, s, \
                   first_wave(a, mmvq_kernel<T, R, NN, EPI, KS>, &wave[NN]), K, q, ds); \
        break;
        GMC_CASE(1) GMC_CASE(2) GMC_CASE(3) GMC_CASE(4) GMC_CASE(5) GMC_CASE(6) GMC_CASE(7) GMC_CASE(8)
#undef GMC_CASE
    }
}

template <int TYPE, int VEC, int R, int EPI, int KS = 1>
static void launch_f_re(const MvArgs &a, dim3 grid, int K, const float *x, int n, cudaStream_t s) {
    static unsigned wave[9];
    switch (n) {
#define GMC_CASE(NN) \
    case NN: \
        gmc_launch(mmvf_kernel<TYPE, VEC, R, NN, EPI, KS>, grid, 128, 0, s, \
                   first_wave(a, mmvf_kernel<TYPE, VEC, R, NN, EPI, KS>, &wave[NN]), K, x); \
        break;
        GMC_CASE(1) GMC_CASE(2) GMC_CASE(3) GMC_CASE(4) GMC_CASE(5) GMC_CASE(6) GMC_CASE(7) GMC_CASE(8)
#undef GMC_CASE
    }
}

/* One launch of n <= 8 columns. act: quantized activations (gm_cuda_quantize_act layout, column 0 at q / ds)
 * for quantized types, else f32 x. rs: rows of each matrix per warp (1, 2, 4; GEGLU 1, 2). */
struct MvAct {
    const int8_t *q;
    const float *ds;
    const float *x;
};

template <class T, int EPI>
static void launch_q_e(const MvArgs &a, int rs, dim3 g, int K, const MvAct &x, int n, cudaStream_t s) {
    if constexpr (EPI == EPI_STORE) {
        if (rs == -2) return launch_q_re<T, 1, EPI, 2>(a, g, K, x.q, x.ds, n, s); /* split rows (mv_run) */
        if (rs == -4) return launch_q_re<T, 1, EPI, 4>(a, g, K, x.q, x.ds, n, s);
    }
    if constexpr (EPI == EPI_GEGLU) { /* rows of both halves per warp: 2 or 4 */
        if (rs == 1) launch_q_re<T, 2, EPI>(a, g, K, x.q, x.ds, n, s);
        else launch_q_re<T, 4, EPI>(a, g, K, x.q, x.ds, n, s);
    } else {
        if (rs == 1) launch_q_re<T, 1, EPI>(a, g, K, x.q, x.ds, n, s);
        else if (rs == 2) launch_q_re<T, 2, EPI>(a, g, K, x.q, x.ds, n, s);
        else launch_q_re<T, 4, EPI>(a, g, K, x.q, x.ds, n, s);
    }
}

template <int TYPE, int VEC, int EPI>
static void launch_f_e(const MvArgs &a, int rs, dim3 g, int K, const MvAct &x, int n, cudaStream_t s) {
    if constexpr (TYPE == GMC_F32 && EPI == EPI_STORE) {
        if (rs == -2) return launch_f_re<TYPE, VEC, 1, EPI, 2>(a, g, K, x.x, n, s); /* split rows (mv_run) */
        if (rs == -4) return launch_f_re<TYPE, VEC, 1, EPI, 4>(a, g, K, x.x, n, s);
    }
    if constexpr (EPI == EPI_GEGLU) {
        if (rs == 1) launch_f_re<TYPE, VEC, 2, EPI>(a, g, K, x.x, n, s);
        else launch_f_re<TYPE, VEC, 4, EPI>(a, g, K, x.x, n, s);
    } else {
        if (rs == 1) launch_f_re<TYPE, VEC, 1, EPI>(a, g, K, x.x, n, s);
        else if (rs == 2) launch_f_re<TYPE, VEC, 2, EPI>(a, g, K, x.x, n, s);
        else launch_f_re<TYPE, VEC, 4, EPI>(a, g, K, x.x, n, s);
    }
}

template <class T>
static void launch_q(const MvArgs &a, int epi, int rs, dim3 g, int K, const MvAct &x, int n, cudaStream_t s) {
    if (epi == EPI_GEGLU) launch_q_e<T, EPI_GEGLU>(a, rs, g, K, x, n, s);
    else if (epi == EPI_GELU_MUL) launch_q_e<T, EPI_GELU_MUL>(a, rs, g, K, x, n, s);
    else launch_q_e<T, EPI_STORE>(a, rs, g, K, x, n, s);
}

template <int TYPE, int VEC>
static void launch_f(const MvArgs &a, int epi, int rs, dim3 g, int K, const MvAct &x, int n, cudaStream_t s) {
    if (epi == EPI_GEGLU) launch_f_e<TYPE, VEC, EPI_GEGLU>(a, rs, g, K, x, n, s);
    else if (epi == EPI_GELU_MUL) launch_f_e<TYPE, VEC, EPI_GELU_MUL>(a, rs, g, K, x, n, s);
    else launch_f_e<TYPE, VEC, EPI_STORE>(a, rs, g, K, x, n, s);
}

/* The 16-byte vector path of the float kernel: rows of exactly ne0 elements, all 16-byte aligned. */
static int float_vec_ok(const gm_cuda_mat *w, const float *x) {
    const size_t esz = w->type == GMC_F32 ? 4 : 2;
    return w->ne0 % 8 == 0 && w->row_bytes % 16 == 0 && (uintptr_t)w->data % 16 == 0 && (uintptr_t)x % 16 == 0 &&
           w->row_bytes == (uint64_t)w->ne0 * esz;
}

/* How many warps of a block share a row (1, 2 or 4: 4 / KS rows a block, each warp every KS-th step of a row's
 * items) instead of a warp a row: for long rows on few rows, where a warp a row leaves too few warps to hide the
 * latency of its dependent steps. Default: f32 matrices of at most 4096 rows of 1024+ values, 4 (a MoE router:
 * 128 x 2816 took 11 steps a lane on 32 blocks, 10 us of the H200's critical path; split, 4.8 us); quantized rows
 * 1 (E4B's down projection, 2560 x 10240 q4_0, runs at 29% occupancy and 1 TB/s under Nsight Compute, yet split 4
 * ways it made tg128 slower: BENCHMARKS.md). gm_cuda_set_mmv_split(ks, min_k) splits quantized and f32 rows of
 * min_k+ values ks ways instead. Plain stores only (no GeGLU / gelu-mul epilogue, no next-op quantization, no MoE
 * indexing); the choice does not depend on the number of columns, so a column's sums are added in the same order
 * at every batch size. */
static int mv_split_rows(int type, int epi, int64_t K, int64_t m_max, bool moe, bool next) {
    if (epi != EPI_STORE || moe || next || !(type == GMC_F32 || is_quant(type))) return 1; /* no such build */
    if (g_mmv_split_ks) return K >= g_mmv_split_min_k ? g_mmv_split_ks : 1;
    return type == GMC_F32 && m_max <= 4096 && K >= 1024 ? 4 : 1;
}

/* Expert indexing of a launch (MvArgs' eid, gcol, e_bytes, x_div): n_y blocks in grid.y, pairs or groups. */
struct MvMoe {
    const int32_t *eid, *gcol;
    uint64_t e_bytes;
    int x_div, n_y;
};
enum { MV_GROUP = GM_CUDA_MOE_GROUP }; /* columns of a MoE group: the widest mat-vec */
static_assert(MV_GROUP == 8, "a MoE group is one launch of the widest mat-vec");

/* The matvec of n_seg matrices w (one type, one K) against n columns of activations (8 per launch), with an
 * epilogue; MoE when moe: grid.y = moe->n_y pairs (one column each) or groups (MV_GROUP columns). Checked
 * arguments only. */
static int mv_run(const gm_cuda_mat *const *w, float *const *y, int n_seg, int epi, const float *mul,
                  const MvAct &act, int n, const MvMoe *moe, cudaStream_t s, const gm_cuda_next *nx = NULL,
                  bool *nx_done = NULL) {
    const int32_t *eid = moe ? moe->eid : NULL;
    const int type = w[0]->type;
    const int64_t K = w[0]->ne0;
    int64_t m_max = 0;
    for (int i = 0; i < n_seg; i++) m_max = w[i]->ne1 > m_max ? w[i]->ne1 : m_max;
    /* rows per warp: a MoE group reads its N columns once for rs rows, as a batch of N */
    int rs = eid && !moe->gcol ? 1 : default_rows(type, moe ? MV_GROUP : n < 8 ? n : 8, K, m_max);
    if (epi == EPI_GEGLU && rs > 2) rs = 2;
    const int ks = mv_split_rows(type, epi, K, m_max, eid != NULL, nx && nx->kind);
    if (ks > 1) rs = 1;
    const int rsl = ks > 1 ? -ks : rs; /* what the launchers take: rows per warp, or -KS for a row split KS ways */
    MvArgs a = {};
    a.n_seg = n_seg, a.mul = mul;
    if (moe) a.eid = moe->eid, a.gcol = moe->gcol, a.e_bytes = moe->e_bytes, a.x_div = moe->x_div;
    unsigned blocks = 0;
    for (int i = 0; i < n_seg; i++) {
        a.W[i] = (const uint8_t *)w[i]->data, a.row_bytes[i] = w[i]->row_bytes, a.M[i] = w[i]->ne1;
        a.y[i] = y[i], a.ldy[i] = w[i]->ne1;
        if (epi != EPI_GEGLU || i == 0) blocks += (unsigned)((w[i]->ne1 * ks + 4 * rs - 1) / (4 * rs));
        a.blk_end[i] = blocks;
    }
    const dim3 grid(blocks, moe ? (unsigned)moe->n_y : 1u);
    if (nx && nx->kind == GM_CUDA_NEXT_QUANT && n <= 8 && !eid && (n_seg == 1 || epi == EPI_GEGLU)) {
        const int64_t qk = nx->act_type == GMC_Q8_K ? 256 : 32, M = w[0]->ne1;
        if (M % qk == 0 && qk % (4 * rs) == 0 && nx->counters && nx->n_counters >= M / 32) {
            a.nq = (int8_t *)nx->out, a.nd = (float *)((uint8_t *)nx->out + align16((size_t)n * M));
            a.ncount = nx->counters, a.n_act = nx->act_type;
            *nx_done = true;
        }
    }
    const int kb = (int)(K >> (gm_cuda_act_type(type) == GMC_Q8_K ? 8 : 5));
    int vec = 0;
    if (!is_quant(type)) {
        vec = 1;
        for (int i = 0; i < n_seg; i++) vec = vec && float_vec_ok(w[i], act.x);
        if (moe && moe->e_bytes % 16) vec = 0;
    }
    for (int c0 = 0; c0 < (eid ? 1 : n); c0 += 8) {
        const int nc = moe ? (moe->gcol ? MV_GROUP : 1) : (n - c0 < 8 ? n - c0 : 8);
        MvArgs ac = a;
        for (int i = 0; i < n_seg; i++) ac.y[i] = a.y[i] + (size_t)c0 * a.ldy[i];
        if (mul) ac.mul = mul + (size_t)c0 * a.ldy[0];
        MvAct xc = {act.q ? act.q + (size_t)c0 * K : NULL, act.ds ? act.ds + (size_t)c0 * kb : NULL,
                    act.x ? act.x + (size_t)c0 * K : NULL};
        switch (type) {
        case GMC_Q4_0: launch_q<TQ4_0>(ac, epi, rsl, grid, (int)K, xc, nc, s); break;
        case GMC_Q4_0_G8: launch_q<TQ4_0_G8>(ac, epi, rsl, grid, (int)K, xc, nc, s); break;
        case GMC_Q5_0: launch_q<TQ5_0>(ac, epi, rsl, grid, (int)K, xc, nc, s); break;
        case GMC_Q8_0: launch_q<TQ8_0>(ac, epi, rsl, grid, (int)K, xc, nc, s); break;
        case GMC_Q4_K: launch_q<TQ4_K>(ac, epi, rsl, grid, (int)K, xc, nc, s); break;
        case GMC_Q5_K: launch_q<TQ5_K>(ac, epi, rsl, grid, (int)K, xc, nc, s); break;
        case GMC_Q6_K: launch_q<TQ6_K>(ac, epi, rsl, grid, (int)K, xc, nc, s); break;
        case GMC_Q6_K_A16: launch_q<TQ6_K_A16>(ac, epi, rsl, grid, (int)K, xc, nc, s); break;
        case GMC_F32:
            if (vec) launch_f<GMC_F32, 8>(ac, epi, rsl, grid, (int)K, xc, nc, s);
            else launch_f<GMC_F32, 1>(ac, epi, rsl, grid, (int)K, xc, nc, s);
            break;
        case GMC_F16:
            if (vec) launch_f<GMC_F16, 8>(ac, epi, rs, grid, (int)K, xc, nc, s);
            else launch_f<GMC_F16, 1>(ac, epi, rs, grid, (int)K, xc, nc, s);
            break;
        case GMC_BF16:
            if (vec) launch_f<GMC_BF16, 8>(ac, epi, rs, grid, (int)K, xc, nc, s);
            else launch_f<GMC_BF16, 1>(ac, epi, rs, grid, (int)K, xc, nc, s);
            break;
        }
        const int rc = gmc_check_launch("matmul");
        if (rc) return rc;
    }
    return 0;
}

static int check_mat(const gm_cuda_mat *w, const char *op) {
    if (!w || !w->data || w->ne0 <= 0 || w->ne1 <= 0 || w->ne0 > (1 << 30))
        return gmc_fail(-1, "%s: bad matrix", op);
    if (!gm_cuda_type_supported(w->type)) return gmc_fail(-1, "%s: type %d not supported on CUDA", op, w->type);
    const int64_t bs = gm_cuda_act_type(w->type) == GMC_Q8_0 ? 32 : is_quant(w->type) ? 256 : 1;
    if (w->ne0 % bs != 0) return gmc_fail(-1, "%s: row of %lld is not whole blocks", op, (long long)w->ne0);
    if ((w->type == GMC_Q4_K || w->type == GMC_Q5_K || w->type == GMC_Q6_K_A16 || w->type == GMC_Q4_0_G8) &&
        ((uintptr_t)w->data % 16 || w->row_bytes % 16))
        return gmc_fail(-1, "%s: q4_K / q5_K / re-laid q6_K and q4_0 rows must be 16-byte aligned", op);
    if (is_quant(w->type) && (uintptr_t)w->data % 2) return gmc_fail(-1, "%s: weights must be 2-byte aligned", op);
    return 0;
}

static MvAct act_of(const void *xq, int64_t K, int32_t n) {
    return MvAct{(const int8_t *)xq, (const float *)((const uint8_t *)xq + align16((size_t)n * K)), NULL};
}

extern "C" int gm_cuda_matmul_q(const gm_cuda_mat *w, const void *xq, int32_t n, float *y, gm_cuda_stream stream) {
    int rc = check_mat(w, "matmul");
    if (rc) return rc;
    if (!is_quant(w->type)) return gmc_fail(-1, "matmul_q: type %d takes f32 activations", w->type);
    if (n <= 0 || !xq || !y) return gmc_fail(-1, "matmul_q: bad arguments");
    gm_cuda_multi one = {};
    one.n_w = 1, one.w[0] = *w, one.y[0] = y, one.epi = GM_CUDA_EPI_STORE;
    if (gm_cuda_mmq_eligible(&one, n)) return gm_cuda_mmq_multi(&one, xq, n, stream); /* int8 tensor cores */
    return mv_run(&w, &y, 1, EPI_STORE, NULL, act_of(xq, w->ne0, n), n, NULL, stream);
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
    return mv_run(&w, &y, 1, EPI_STORE, NULL, MvAct{NULL, NULL, x}, n, NULL, stream);
}

/* The f16 form (f16_row_exponent) for rows act_prep_reg_kernel does not take: one block per row (256 or 1024
 * threads: gm_cuda_prepare_act_f16), the input prepared as act_prep_kernel does (residual update, rmsnorm). */
__global__ void __launch_bounds__(1024) act_f16_kernel(const gm_cuda_act_in in, __half *__restrict__ out,
                                                      float *__restrict__ col_scale, int out_order,
                                                      const __grid_constant__ gm_cuda_gemm_epi first) {
    gmc_pdl_wait();
    const int64_t c = blockIdx.x;
    if (first.n) gmc_gemm_epi_column(first, c); /* a held epilogue's row c first (gm_cuda_prepare_act_f16) */
    const int K = (int)in.K;
    float *xr = in.x + c * K;
    if (in.res_add) gmc_residual_update(xr, in.res_add + c * K, in.res_w, in.res_scale, K, in.eps);
    const float rs = in.norm ? gmc_row_rms_scale(xr, K, in.eps) : 1.0f;
    const float *w = in.norm ? in.w : NULL; /* the norm's weight: none without the norm */
    float amax = 0.0f;
    for (int i = threadIdx.x; i < K; i += blockDim.x) {
        float v = in.norm ? __fmul_rn(xr[i], rs) : xr[i];
        if (w) v = __fmul_rn(v, w[i]);
        amax = fmaxf(amax, fabsf(v));
    }
    __shared__ float part[32];
    amax = gmc_warp_max(amax);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = amax;
    __syncthreads();
    float m = 0.0f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) m = fmaxf(m, part[i]);
    const int e = f16_row_exponent(m);
    for (int i = threadIdx.x; i < K; i += blockDim.x) {
        float v = in.norm ? __fmul_rn(xr[i], rs) : xr[i];
        if (w) v = __fmul_rn(v, w[i]);
        out[c * K + (out_order == GM_CUDA_ACT_ORDER_QG ? gmc_qg_act_pos(i) : i)] = __float2half_rn(ldexpf(v, -e));
    }
    if (threadIdx.x == 0) col_scale[c] = ldexpf(1.0f, e);
}

/* Most threads in act_prep_reg_kernel's block (a multiple of 32, 32 .. 1024): a warp per 32-value block up to
 * that many warps. 1024 (32 warps) keeps the values a lane holds small but needs most of an SM's registers, so under
 * PDL it cannot start until an SM has drained; 256 fits beside the blocks of the kernel before it, but its one block
 * per row then runs 4x the values a lane: measured on the H200 (E4B q4_0 tg128), 256 threads 238.7 t/s against
 * 290.4 with 1024. 0: the built-in choice (gm_cuda_set_prep_threads). */
static int g_prep_threads = 0;
extern "C" void gm_cuda_set_prep_threads(int threads) {
    g_prep_threads = threads >= 32 && threads <= 1024 && threads % 32 == 0 ? threads : 0;
}

/* The warps act_prep_reg_kernel runs with on rows of K (so the order its rms sums are added in, which the chain
 * kernel repeats: chain_cuda.cu); 0 for rows it does not take: K not a multiple of 32 or past 32 · 32 · 8 values (at
 * 16 values a lane the 1024-thread kernel spills: 664 bytes of stack; the 256-thread one has the registers for 16). */
int gmc_prep_reg_warps(int64_t K) {
    const int64_t nb = K / 32;
    if (K % 32 != 0 || nb < 1 || nb > 32 * 8) return 0;
    const int max_warps = (g_prep_threads ? g_prep_threads : 1024) / 32;
    int warps = nb < max_warps ? (int)nb : max_warps;
    const int vpl = (int)((nb + warps - 1) / warps);
    if (!(warps <= 8 && vpl <= 16) && vpl > 8) warps = nb < 32 ? (int)nb : 32; /* too few warps asked */
    return warps;
}

/* act_prep_reg_kernel where it takes the rows; false (nothing launched) for other rows. first: a held epilogue
 * to run first (f16 output only), or NULL. */
static bool launch_prep_reg(const gm_cuda_act_in *in, int act_type, int8_t *q, float *ds, float *xf, __half *xh,
                            int xh_order, const gm_cuda_gemm_epi *first, cudaStream_t stream) {
    const int64_t nb = in->K / 32;
    const int warps = gmc_prep_reg_warps(in->K);
    if (!warps) return false;
    const dim3 grid((unsigned)in->n);
    const size_t smem = act_type == GMC_Q8_K ? (size_t)in->K * sizeof(float) : 0; /* the row, at most 32 KB */
    const int vpl = (int)((nb + warps - 1) / warps);
    const gm_cuda_gemm_epi none = {};
    const gm_cuda_gemm_epi &e = first ? *first : none;
#define GMC_PREP1(V, T, F) gmc_launch(act_prep_reg_kernel<V, T, F>, grid, 32 * warps, smem, stream, *in, act_type, q, ds, \
                                      xf, xh, xh_order, e)
#define GMC_PREP(V, T)                                                                                                \
    do {                                                                                                              \
        if (first) GMC_PREP1(V, T, true);                                                                             \
        else GMC_PREP1(V, T, false);                                                                                  \
    } while (0)
    if (warps <= 8 && vpl <= 16) { /* the 256-thread build: registers for up to 16 values a lane */
        if (vpl <= 1) GMC_PREP(1, 256);
        else if (vpl <= 2) GMC_PREP(2, 256);
        else if (vpl <= 4) GMC_PREP(4, 256);
        else if (vpl <= 8) GMC_PREP(8, 256);
        else GMC_PREP(16, 256);
        return true;
    }
    if (vpl <= 1) GMC_PREP(1, 1024);
    else if (vpl <= 2) GMC_PREP(2, 1024);
    else if (vpl <= 4) GMC_PREP(4, 1024);
    else GMC_PREP(8, 1024);
#undef GMC_PREP
#undef GMC_PREP1
    return true;
}

extern "C" int gm_cuda_prepare_act(const gm_cuda_act_in *in, int32_t act_type, void *out, gm_cuda_stream stream) {
    const int64_t qk = act_type == GMC_Q8_K ? 256 : act_type == GMC_Q8_0 ? 32 : 1;
    if (!in || (act_type != GMC_Q8_0 && act_type != GMC_Q8_K && act_type != -1) || in->K % qk != 0 ||
        in->K > (1 << 30) || in->n <= 0 || !in->x || !out)
        return gmc_fail(-1, "prepare_act: bad arguments (type %d)", act_type);
    int8_t *q = (int8_t *)out;
    float *ds = (float *)((uint8_t *)out + align16((size_t)in->n * in->K));
    if (!launch_prep_reg(in, act_type, q, ds, (float *)out, NULL, GM_CUDA_ACT_ORDER_NATURAL, NULL, stream))
        gmc_launch(act_prep_kernel, (unsigned)in->n, 256, 0, stream, *in, (int)act_type, q, ds, (float *)out);
    return gmc_check_launch("prepare_act");
}

extern "C" int gm_cuda_prepare_act_f16(const gm_cuda_act_in *in, void *xh, float *col_scale,
                                       const gm_cuda_gemm_epi *first, int32_t order, gm_cuda_stream stream) {
    if (!in || in->K > (1 << 30) || in->n <= 0 || !in->x || !xh || !col_scale ||
        (order != GM_CUDA_ACT_ORDER_NATURAL && (order != GM_CUDA_ACT_ORDER_QG || in->K % 128)))
        return gmc_fail(-1, "prepare_act_f16: bad arguments");
    if (first && first->n == 0) first = NULL;
    if (first && (first->n != in->n || !first->Y || !first->col_scale || first->out_rows <= 0))
        return gmc_fail(-1, "prepare_act_f16: a held epilogue of %d columns before %d", first->n, in->n);
    /* rows act_prep_reg does not take (past 8192 values: the down projection's input) get 1024 threads: with
     * 256, a 10240-value row was 40 dependent loads a thread per pass, 12 us for 64 rows (H200, E4B) */
    if (!launch_prep_reg(in, GMC_F16, NULL, col_scale, NULL, (__half *)xh, order, first, stream)) {
        const gm_cuda_gemm_epi none = {};
        gmc_launch(act_f16_kernel, (unsigned)in->n, in->K >= 8192 || first ? 1024 : 256, 0, stream, *in, (__half *)xh,
                   col_scale, (int)order, first ? *first : none);
    }
    return gmc_check_launch("prepare_act_f16");
}

extern "C" int gm_cuda_matmul_multi(const gm_cuda_multi *m, const void *act, int32_t n, gm_cuda_stream stream) {
    if (!m || m->n_w < 1 || m->n_w > 3 || n <= 0 || !act || (m->epi == GM_CUDA_EPI_GEGLU && m->n_w != 2) ||
        (m->epi == GM_CUDA_EPI_GELU_MUL && (m->n_w != 1 || !m->mul)))
        return gmc_fail(-1, "matmul_multi: bad arguments");
    const gm_cuda_mat *ws[3];
    for (int i = 0; i < m->n_w; i++) {
        const int rc = check_mat(&m->w[i], "matmul_multi");
        if (rc) return rc;
        if (m->w[i].type != m->w[0].type || m->w[i].ne0 != m->w[0].ne0 ||
            (!m->y[i] && (i == 0 || m->epi != GM_CUDA_EPI_GEGLU))) /* a GeGLU writes y[0] only */
            return gmc_fail(-1, "matmul_multi: matrices of different types or widths");
        ws[i] = &m->w[i];
    }
    if (m->epi == GM_CUDA_EPI_GEGLU && m->w[1].ne1 != m->w[0].ne1)
        return gmc_fail(-1, "matmul_multi: GeGLU halves of different heights");
    const gm_cuda_next *nx = m->next.kind ? &m->next : NULL;
    if (nx && (nx->kind != GM_CUDA_NEXT_QUANT || (nx->act_type != GMC_Q8_0 && nx->act_type != GMC_Q8_K) || !nx->out ||
               m->w[0].ne1 % (nx->act_type == GMC_Q8_K ? 256 : 32)))
        return gmc_fail(-1, "matmul_multi: bad next-op preparation");
    int rc;
    bool nx_done = false;
    if (gm_cuda_mmq_eligible(m, n)) { /* int8 tensor cores */
        rc = gm_cuda_mmq_multi(m, act, n, stream);
    } else {
        const int epi = m->epi == GM_CUDA_EPI_GEGLU ? EPI_GEGLU : m->epi == GM_CUDA_EPI_GELU_MUL ? EPI_GELU_MUL : EPI_STORE;
        const MvAct x = is_quant(m->w[0].type) ? act_of(act, m->w[0].ne0, n) : MvAct{NULL, NULL, (const float *)act};
        rc = mv_run(ws, m->y, m->n_w, epi, m->mul, x, n, NULL, stream, nx, &nx_done);
    }
    if (rc || !nx || nx_done) return rc;
    return gm_cuda_quantize_act(m->y[0], m->w[0].ne1, n, nx->act_type, nx->out, stream);
}

extern "C" int gm_cuda_matmul_id(const gm_cuda_mat *w, const gm_cuda_mat *up, uint64_t expert_bytes,
                                 const float *x, int32_t n_x, int32_t x_div, const int32_t *eid, const int32_t *gcol,
                                 int32_t gw, int32_t n_y, float *y, void *scratch, size_t scratch_bytes,
                                 gm_cuda_stream stream) {
    int rc = check_mat(w, "matmul_id");
    if (!rc && up) rc = check_mat(up, "matmul_id");
    if (rc) return rc;
    if (up && (up->type != w->type || up->ne0 != w->ne0 || up->ne1 != w->ne1 || up->row_bytes != w->row_bytes))
        return gmc_fail(-1, "matmul_id: up is not gate's shape and type");
    const bool mmq = gcol && gw == GM_CUDA_MMQ_GROUP;
    const bool bad_groups = gcol && (x_div != 1 || n_x < gw || (gw != GM_CUDA_MOE_GROUP && !mmq) ||
                                     (mmq && !(gm_cuda_mmq_takes(w) && (!up || gm_cuda_mmq_takes(up)))));
    const bool bad_shape = gcol ? bad_groups : (int64_t)n_y > (int64_t)n_x * x_div;
    if (!x || !eid || !y || n_x <= 0 || x_div <= 0 || n_y <= 0 || n_y > 65535 || bad_shape)
        return gmc_fail(-1, "matmul_id: bad arguments (n_x %d, x_div %d, %d %s)", n_x, x_div, n_y,
                        gcol ? "groups" : "pairs");
    const gm_cuda_mat *ws[2] = {w, up};
    float *ys[2] = {y, y};
    const int n_seg = up ? 2 : 1, epi = up ? EPI_GEGLU : EPI_STORE;
    const MvMoe moe = {eid, gcol, expert_bytes, x_div, n_y};
    if (!is_quant(w->type)) return mv_run(ws, ys, n_seg, epi, NULL, MvAct{NULL, NULL, x}, 1, &moe, stream);
    if (!scratch || scratch_bytes < gm_cuda_matmul_scratch_bytes(w->ne0, n_x))
        return gmc_fail(-1, "matmul_id: scratch of %zu bytes, %zu needed", scratch_bytes,
                        gm_cuda_matmul_scratch_bytes(w->ne0, n_x));
    rc = gm_cuda_quantize_act(x, w->ne0, n_x, gm_cuda_act_type(w->type), scratch, stream);
    if (rc) return rc;
    if (mmq) { /* groups on the int8 tensor cores */
        gm_cuda_multi m = {};
        m.n_w = n_seg, m.w[0] = *w, m.y[0] = y, m.epi = up ? GM_CUDA_EPI_GEGLU : GM_CUDA_EPI_STORE;
        if (up) m.w[1] = *up, m.y[1] = y;
        return gm_cuda_mmq_id(&m, expert_bytes, eid, gcol, n_y, scratch, n_x, stream);
    }
    return mv_run(ws, ys, n_seg, epi, NULL, act_of(scratch, w->ne0, n_x), 1, &moe, stream);
}
