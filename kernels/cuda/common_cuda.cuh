/* common_cuda.cuh: what every .cu file of the CUDA backend shares: the GGUF block layouts (mirrors of
 * src/quant/quant_blocks.h, which is C11-only), unaligned word loads, warp reductions, cp.async into shared memory,
 * the mma.sync and ldmatrix wrappers, and the error recording behind gm_cuda_last_error(). No kernels live here. */
#ifndef GM_COMMON_CUDA_CUH
#define GM_COMMON_CUDA_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "ops_cuda.h"

/* GGML type numbers (src/quant/quant.h). */
enum {
    GMC_F32 = 0, GMC_F16 = 1, GMC_Q4_0 = 2, GMC_Q5_0 = 6, GMC_Q8_0 = 8, GMC_Q4_K = 12, GMC_Q5_K = 13, GMC_Q6_K = 14,
    GMC_Q8_K = 15 /* activations only */, GMC_BF16 = 30,
    /* device layouts (gm_cuda_device_type): a GGUF type's blocks re-laid at upload; 0x100 | the GGUF type */
    GMC_Q6_K_A16 = 0x100 | GMC_Q6_K, GMC_Q4_0_G8 = 0x100 | GMC_Q4_0
};

/* Block byte sizes and offsets of the GGUF layouts (see quant_blocks.h for the meaning of each field). */
#define GMC_QK 32
#define GMC_QK_K 256
enum { Q4_0_BYTES = 18, Q5_0_BYTES = 22, Q8_0_BYTES = 34, Q4_K_BYTES = 144, Q5_K_BYTES = 176, Q6_K_BYTES = 210,
       Q6_K_A16_BYTES = 224 /* GMC_Q6_K_A16: a q6_K block's 210 bytes at the same offsets, then 14 zero bytes */,
       Q4_0_G8_BYTES = 144 /* GMC_Q4_0_G8: 8 q4_0 blocks: their 16 quant bytes each (128), then their 8 f16 scales */ };
/* q5_0: d 0, qh 2..5 (bit j: the fifth bit of element j), qs 6..21 (element j < 16: low nibble of qs[j],
 * element j + 16: high nibble).
 * q4_K: d 0, dmin 2, scales 4..15, qs 16..143.  q5_K: d 0, dmin 2, scales 4..15, qh 16..47, qs 48..175.
 * q6_K: ql 0..127, qh 128..191, scales 192..207 (int8), d 208. */

/* Records a failure for gm_cuda_last_error(); returns code. */
int gmc_fail(int code, const char *fmt, ...);
/* Checks the launch just made (cudaGetLastError); 0 or the recorded error. */
int gmc_check_launch(const char *what);
/* The warps of act_prep_reg_kernel's launch on a row of K values, 0 when it does not take K (matmul_cuda.cu). */
int gmc_prep_reg_warps(int64_t K);

__device__ __forceinline__ float gmc_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float gmc_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* 16-bit little-endian field at p (2-byte aligned). */
__device__ __forceinline__ uint16_t gmc_ld16(const uint8_t *p) { return __ldg((const unsigned short *)p); }

/* NW consecutive 32-bit words of the byte stream starting at p, for p only 2-byte aligned: loads NW + 1
 * aligned words and shifts (reads at most 3 bytes before p and after p + 4·NW, inside the same 4-byte words
 * when p is 2-aligned: at most 2 bytes past p + 4·NW). */
template <int NW>
__device__ __forceinline__ void gmc_ld_words_a2(const uint8_t *p, uint32_t out[NW]) {
    const uintptr_t a = (uintptr_t)p;
    const uint32_t *w = (const uint32_t *)(a & ~(uintptr_t)3);
    const uint32_t sh = (uint32_t)(a & 3) * 8;
    uint32_t raw[NW + 1];
#pragma unroll
    for (int i = 0; i < NW + 1; i++) raw[i] = (sh == 0 && i == NW) ? 0u : __ldg(w + i);
#pragma unroll
    for (int i = 0; i < NW; i++) out[i] = __funnelshift_r(raw[i], raw[i + 1], sh);
}

__device__ __forceinline__ float gmc_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float gmc_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* op(v) over a block (every thread must call it; part: 32 floats of shared memory, free again on return; op
 * associative with identity 0 on the values given): warp reductions, then the warps' results in order. */
template <class Op>
__device__ __forceinline__ float gmc_block_reduce(float v, float *part, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) t = op(t, part[i]);
    __syncthreads(); /* part is reused by the next call */
    return t;
}
__device__ __forceinline__ float gmc_block_sum(float v, float *part) {
    return gmc_block_reduce(v, part, [](float a, float b) { return a + b; });
}
__device__ __forceinline__ float gmc_block_max(float v, float *part) { /* of values >= 0 */
    return gmc_block_reduce(v, part, [](float a, float b) { return fmaxf(a, b); });
}

/* 1 / sqrt(mean(x²) + eps) of a row of d floats, for a whole block (blockDim a multiple of 32, <= 1024; every
 * thread must call it): per-thread fmaf sums over a stride of blockDim, warp sums, then the sum of the warps. */
__device__ __forceinline__ float gmc_row_rms_scale(const float *xr, int d, float eps) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    __shared__ float part[32];
    ss = gmc_warp_sum(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        v = gmc_warp_sum(v);
        if (threadIdx.x == 0) part[0] = v;
    }
    __syncthreads();
    const float total = part[0];
    __syncthreads(); /* part may be reused by the next call */
    return 1.0f / sqrtf(total / (float)d + eps);
}

/* The residual update of a prepared projection input (gm_cuda_act_in), for a whole block on one row:
 * xr += rmsnorm(add) · w (w NULL: no weight), then xr *= s unless s is 1; the arithmetic of rmsnorm_add and scale,
 * written back and visible to the whole block on return. */
__device__ __forceinline__ void gmc_residual_update(float *xr, const float *add, const float *w, float s, int d,
                                                    float eps) {
    const float rs = gmc_row_rms_scale(add, d, eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = __fmul_rn(add[i], rs);
        if (w) v = __fmul_rn(v, w[i]);
        float y = __fadd_rn(xr[i], v);
        if (s != 1.0f) y = __fmul_rn(y, s);
        xr[i] = y;
    }
    __syncthreads();
}

/* NeoX RoPE of pair slot i (< head_dim / 2) of one head h at position pos, then everything times scale: slots
 * i < n_rot / 2 rotate (i, i + n_rot/2) by freq_scale · (pos · theta_scale^i / ff[i]) (theta by repeated
 * multiplication, as gm_ref_rope_neox; ff NULL: 1), the others scale the pass-through dims n_rot + 2(i - n_rot/2)
 * and +1. Each slot touches its own elements, so the slots of a head may run in parallel. In three parts so that
 * heads at one position can share a slot's sine and cosine (gmc_rope_sincos, then gmc_rope_rotate per head). */
__device__ __forceinline__ void gmc_rope_sincos_of(float theta, int i, float freq_scale, const float *ff, float &s,
                                                   float &c) { /* slot i's, from its theta */
    const float f = ff ? ff[i] : 1.0f;
    const float angle = __fmul_rn(freq_scale, __fdiv_rn(theta, f));
    sincosf(angle, &s, &c);
}
__device__ __forceinline__ void gmc_rope_sincos(int i, float pos, float theta_scale, float freq_scale, const float *ff,
                                                float &s, float &c) {
    float theta = pos;
    for (int k = 0; k < i; k++) theta = __fmul_rn(theta, theta_scale);
    gmc_rope_sincos_of(theta, i, freq_scale, ff, s, c);
}
__device__ __forceinline__ void gmc_rope_rotate(float *h, int i, int half, float s, float c, float scale) {
    const float x0 = h[i], x1 = h[i + half];
    float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    float y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    if (scale != 1.0f) y0 = __fmul_rn(y0, scale), y1 = __fmul_rn(y1, scale);
    h[i] = y0, h[i + half] = y1;
}
__device__ __forceinline__ void gmc_rope_pass(float *h, int i, int head_dim, int n_rot, float scale) {
    const int j = n_rot + 2 * (i - n_rot / 2);
    h[j] = __fmul_rn(h[j], scale);
    if (j + 1 < head_dim) h[j + 1] = __fmul_rn(h[j + 1], scale);
}
__device__ __forceinline__ void gmc_rope_slot(float *h, int i, int head_dim, int n_rot, float pos, float theta_scale,
                                              float freq_scale, const float *ff, float scale) {
    const int half = n_rot / 2;
    if (i < half) {
        float s, c;
        gmc_rope_sincos(i, pos, theta_scale, freq_scale, ff, s, c);
        gmc_rope_rotate(h, i, half, s, c, scale);
    } else if (scale != 1.0f) {
        gmc_rope_pass(h, i, head_dim, n_rot, scale);
    }
}

/* gelu_tanh(x) with the reference's operation order (kernels/ref). */
__device__ __forceinline__ float gmc_gelu_tanh(float x) {
    const float k = 0.79788456080286535588f;
    const float inner = __fmul_rn(__fmul_rn(k, x), __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, x), x)));
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
}

/* Output row g (< e.out_rows) of column c of a tensor-core product's epilogue (gm_cuda_gemm_epi; s = e.col_scale[c]):
 * Y's value times s to its segment's output, or a GeGLU / gelu·mul of it. The one definition of that epilogue's
 * arithmetic: its own launch (gemm_cuda.cu) and the preparations that run it first (matmul_cuda.cu) both call it. */
__device__ __forceinline__ void gmc_gemm_epi_value(const gm_cuda_gemm_epi &e, int64_t c, int64_t g, float s) {
    const float *yc = e.Y + c * e.Mtot;
    if (e.epi == GM_CUDA_EPI_GEGLU) {
        const int64_t F = e.m_end[0];
        const float gate = __fmul_rn(yc[g], s), up = __fmul_rn(yc[F + g], s);
        e.y[0][c * e.ldy[0] + g] = __fmul_rn(gmc_gelu_tanh(gate), up);
        return;
    }
    int sg = 0;
    while (sg + 1 < e.n_seg && g >= e.m_end[sg]) sg++;
    const int64_t m0 = sg ? e.m_end[sg - 1] : 0, ld = e.ldy[sg];
    float v = __fmul_rn(yc[g], s);
    if (e.epi == GM_CUDA_EPI_GELU_MUL) v = __fmul_rn(gmc_gelu_tanh(v), e.mul[c * ld + (g - m0)]);
    e.y[sg][c * ld + (g - m0)] = v;
}

/* Every output row of column c of a held epilogue, by the threads of one block, visible to the block on return. */
__device__ __forceinline__ void gmc_gemm_epi_column(const gm_cuda_gemm_epi &e, int64_t c) {
    const float s = e.col_scale[c];
    for (int64_t g = threadIdx.x; g < e.out_rows; g += blockDim.x) gmc_gemm_epi_value(e, c, g, s);
    __syncthreads();
}

/* ---- programmatic dependent launch (PDL, sm_90) ----
 * A kernel launched with gmc_launch may start while the kernel before it on the stream is still finishing. Rule
 * that keeps this safe: every such kernel calls gmc_pdl_wait() before it reads anything another kernel writes
 * (activations, the KV cache, integer arrays staged per batch) and before it writes anything; only immutable
 * data (weights) may be touched before it. gmc_pdl_wait() also lets the next kernel launch (its blocks then
 * run up to their own wait: weight prefetches overlap this kernel's tail). Without PDL both are no-ops.
 * Since every kernel lets the next one launch only after its own wait has returned, a kernel that has started
 * knows that every launch two or more back on the stream has finished: it may read before its wait what only
 * those wrote (the staged decode attention's older keys, attention_cuda.cu), never what the launch just before
 * it writes. */
__device__ __forceinline__ void gmc_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Hints bytes at p (immutable data: weights) into L2, spread over the lanes of a warp: one prefetch per
 * 128-byte line. */
__device__ __forceinline__ void gmc_prefetch_l2(const void *p, uint64_t bytes, int lane) {
    const uintptr_t a0 = (uintptr_t)p & ~(uintptr_t)127, a1 = (uintptr_t)p + bytes;
    for (uintptr_t a = a0 + (uintptr_t)lane * 128; a < a1; a += 32 * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
}

/* Where value k of a row lies in an f16 input of order GM_CUDA_ACT_ORDER_QG (ops_cuda.h): the order in which
 * qgemm_cuda.cu's warpgroup kernel reads a 128-value chunk, so that its k16 steps are contiguous 16-value runs of
 * the row and go into shared memory as they lie. Step s = 2·jw + hh of a chunk holds, at 2t + e and 8 + 2t + e
 * (e = 0, 1: lane t's two f16 pairs), the chunk's values 32t + 16hh + 4jw + e and + 2 + e: the low (hh = 0) or
 * high nibbles of bytes 4jw .. 4jw + 3 of q4_0 block t, i.e. one 32-bit word of that block. A bijection of each
 * chunk onto itself. */
__device__ __forceinline__ int gmc_qg_act_pos(int k) {
    const int t = (k >> 5) & 3, hh = (k >> 4) & 1, jw = (k >> 2) & 3, e = k & 3;
    return (k & ~127) | (jw << 5) | (hh << 4) | ((e & 2) << 2) | (t << 1) | (e & 1);
}

/* cp.async of 16 (through L2 only), 8 or 4 bytes into shared memory; src_bytes 0 fills zeros (tiles past K). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "r"(src_bytes) : "memory");
#endif
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(src), "r"(src_bytes) : "memory");
#endif
}
__device__ __forceinline__ void cp_async8(void *dst, const void *src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(s), "l"(src), "r"(src_bytes) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

/* One tensor-core mma.sync (sm_80+) accumulating into c: m16n8k32 s8 × s8 -> s32 (mmq_cuda.cu), m16n8k16
 * f16 × f16 -> f32 (qgemm_cuda.cu); a: the A fragment, b0 / b1: the B fragment. */
__device__ __forceinline__ void mma_s8(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
__device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* ldmatrix (sm_75+): four 8×8 matrices of 16-bit values from shared memory, lanes 8i .. 8i + 7 giving the
 * addresses of matrix i's eight 16-byte rows; r[i] gets this lane's pair of matrix i (row lane / 4, columns
 * 2·(lane % 4) and + 1), of the transposed matrix with TRANS: A and B fragments of mma_f16. */
template <bool TRANS = false>
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    const unsigned s = (unsigned)__cvta_generic_to_shared(row);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
#endif
}

/* Whether launches carry the PDL attribute (process-wide; GEMMAC_CUDA_PDL=0 turns it off; set by
 * gm_cuda_set_pdl). */
int gmc_pdl_enabled(void);

/* Launches kernel k<<<grid, block, smem, stream>>>(args...) with the PDL attribute when enabled, in clusters of
 * `cluster` blocks when that is more than one (sm_90; grid a multiple of it). The kernel must follow the rule
 * above. */
template <typename... KArgs, typename... Args>
static inline void gmc_launch_cluster(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                      dim3 cluster, Args... args) {
    cudaLaunchAttribute attr[2];
    unsigned na = 0;
    if (gmc_pdl_enabled()) {
        attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster.x * cluster.y * cluster.z > 1) {
        attr[na].id = cudaLaunchAttributeClusterDimension;
        attr[na].val.clusterDim.x = cluster.x, attr[na].val.clusterDim.y = cluster.y;
        attr[na++].val.clusterDim.z = cluster.z;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
    cfg.attrs = attr, cfg.numAttrs = na;
    cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
}

template <typename... KArgs, typename... Args>
static inline void gmc_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                              Args... args) {
    gmc_launch_cluster(k, grid, block, smem, stream, dim3(1, 1, 1), args...);
}

#endif
