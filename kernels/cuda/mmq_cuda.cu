/* mmq_cuda.cu: y[n][M] = x[n][K] · Wᵀ for q4_0 and q8_0 weights and 16..GM_CUDA_MMQ_MAX_N columns on the int8
 * tensor cores, the weights read straight from their GGUF blocks (never dequantized to f16): the batched-decoding
 * and short-batch path. Owns: the kernel, its eligibility and the knob of its largest batch. The activations come
 * quantized to q8_0 blocks exactly as for the matvec (gm_cuda_prepare_act / gm_cuda_quantize_act: int8 xq[n][K],
 * float xd[n][K/32] at align16(n·K)), so every block's integer dot product is the CPU's and only the float
 * summation order differs. Leaves to others: which batches come here (gm_cuda_matmul_multi), longer batches
 * (gemm_cuda.cu: cuBLAS on f16).
 *
 * The shape: one mma.sync.m16n8k32 (s8 × s8 -> s32) per 32-value block: a block of K is exactly one q4_0 / q8_0
 * weight block and one q8_0 activation block, so its integer sum is scaled by d_w(row) · d_x(column) and added to
 * float accumulators. The q4_0 layout fits the A fragment as it is: lane (g, t) needs k = 4t..4t+3 and 16+4t..
 * of rows g and g+8, i.e. the low and the high nibbles of qs[4t..4t+3], one 32-bit word per row. B (activations,
 * k-contiguous per column) is two aligned words per column. A block of 4 warps owns 16 rows × 64 columns; the
 * warps split K (warp w takes blocks w, w+4, ...) and sum through shared memory, so a 2560-row matrix still
 * gives 160 blocks (640 warps) to the 132 SMs.
 *
 * Cost (E4B, 64 columns): weights read once (2.2 GB of q4_0 matrices per step -> ~0.5 ms at 4.6 TB/s); per
 * k-block and warp ~40 loads (A from HBM, B from L1/L2), 8 mma and ~100 ALU ops: predicted instruction-bound at
 * ~1.3 ms/step, against ~8 ms for dequantize-to-f16 + cuBLAS + epilogue (measured, BENCHMARKS.md).
 * Measured (H200, 2026-12-01, E4B q4_0 at depth 1024): correct (test_fused_proj) but SLOWER than the f16 path:
 * -npl 64 1,858 t/s (f16 path 3,379), -npl 256 3,411 (7,845), pp512 5,189 (21,137). The prediction missed the
 * activation traffic: a block owns only 16 rows, so every 16 rows re-read the whole 64-column activation tile
 * (160 KB at K = 2560, in 16-byte pieces of 32-byte sectors) from L2: ~14x the weight bytes. Next: 64-128 rows
 * per block sharing a shared-memory copy of each activation k-tile (and split-K across blocks for the short
 * matrices). Until then it is off (gm_cuda_set_mmq_max_n, GEMMAC_CUDA_MMQ_MAX_N). */
#include "common_cuda.cuh"

enum { MMQ_BM = 16, MMQ_BN = 64, MMQ_WARPS = 4, MMQ_NF = MMQ_BN / 8, MMQ_MIN_N = GM_CUDA_MMQ_MIN_N };

/* Off by default: measured slower than dequantize + cuBLAS (see the header's "Measured"). */
static int g_mmq_max_n = 0;

extern "C" void gm_cuda_set_mmq_max_n(int n) { g_mmq_max_n = n >= 0 ? n : 0; }

struct MmqArgs {
    const uint8_t *W[3];
    uint64_t row_bytes[3];
    int64_t M[3];
    float *y[3];
    int64_t ldy[3];
    unsigned blk_end[3]; /* cumulative 16-row blocks per segment (GeGLU: one range for both halves) */
    int n_seg;
    const float *mul;
};

__device__ __forceinline__ void mma_s8(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* The A fragment of k-block kb for lane t of group g: rows rg (= g) and rg8 (= g + 8) of the tile; a0/a1: k =
 * 4t..4t+3 of rows g / g+8, a2/a3: k = 16+4t.. of them; d0 / d1 the two rows' block scales. */
template <int TYPE>
__device__ __forceinline__ void load_a(const uint8_t *rg, const uint8_t *rg8, int kb, int t, uint32_t a[4], float &d0,
                                       float &d1) {
    if constexpr (TYPE == GMC_Q4_0) {
        const uint8_t *b0 = rg + (size_t)kb * Q4_0_BYTES, *b1 = rg8 + (size_t)kb * Q4_0_BYTES;
        uint32_t w0[1], w1[1];
        gmc_ld_words_a2<1>(b0 + 2 + 4 * t, w0);
        gmc_ld_words_a2<1>(b1 + 2 + 4 * t, w1);
        a[0] = __vsub4(w0[0] & 0x0F0F0F0Fu, 0x08080808u);
        a[1] = __vsub4(w1[0] & 0x0F0F0F0Fu, 0x08080808u);
        a[2] = __vsub4((w0[0] >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        a[3] = __vsub4((w1[0] >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        d0 = gmc_h2f(gmc_ld16(b0)), d1 = gmc_h2f(gmc_ld16(b1));
    } else { /* q8_0 */
        const uint8_t *b0 = rg + (size_t)kb * Q8_0_BYTES, *b1 = rg8 + (size_t)kb * Q8_0_BYTES;
        uint32_t w0[1], w1[1], w2[1], w3[1];
        gmc_ld_words_a2<1>(b0 + 2 + 4 * t, w0);
        gmc_ld_words_a2<1>(b1 + 2 + 4 * t, w1);
        gmc_ld_words_a2<1>(b0 + 18 + 4 * t, w2);
        gmc_ld_words_a2<1>(b1 + 18 + 4 * t, w3);
        a[0] = w0[0], a[1] = w1[0], a[2] = w2[0], a[3] = w3[0];
        d0 = gmc_h2f(gmc_ld16(b0)), d1 = gmc_h2f(gmc_ld16(b1));
    }
}

/* Grid: (row blocks of all segments, column blocks of 64). */
template <int TYPE, int EPI>
__global__ void __launch_bounds__(MMQ_WARPS * 32) mmq_kernel(const __grid_constant__ MmqArgs a, int K, int n,
                                                             const int8_t *__restrict__ xq,
                                                             const float *__restrict__ xd) {
    constexpr int NA = EPI == GM_CUDA_EPI_GEGLU ? 2 : 1; /* A tiles: the GeGLU's gate and up rows */
    constexpr int NE = NA * MMQ_NF * 4;                 /* accumulators per lane */
    __shared__ float red[MMQ_WARPS - 1][NE][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    unsigned blk = blockIdx.x;
    int s = 0;
    if (EPI != GM_CUDA_EPI_GEGLU)
        while (s + 1 < a.n_seg && blk >= a.blk_end[s]) s++;
    if (s) blk -= a.blk_end[s - 1];
    const int64_t M = a.M[s], m0 = (int64_t)blk * MMQ_BM;
    const uint8_t *rg[NA], *rg8[NA];
#pragma unroll
    for (int i = 0; i < NA; i++) {
        const int sg = EPI == GM_CUDA_EPI_GEGLU ? i : s;
        const int64_t r = m0 + g < M ? m0 + g : M - 1, r8 = m0 + g + 8 < M ? m0 + g + 8 : M - 1;
        rg[i] = a.W[sg] + (uint64_t)r * a.row_bytes[sg];
        rg8[i] = a.W[sg] + (uint64_t)r8 * a.row_bytes[sg];
    }
    gmc_pdl_wait();
    const int nkb = K / 32, n0 = blockIdx.y * MMQ_BN;
    const int8_t *xcol[MMQ_NF];
    const float *dc0[MMQ_NF], *dc1[MMQ_NF];
#pragma unroll
    for (int j = 0; j < MMQ_NF; j++) { /* columns past n read the last one; their results are not stored */
        const int cb = min(n0 + 8 * j + g, n - 1), c0 = min(n0 + 8 * j + 2 * t, n - 1),
                  c1 = min(n0 + 8 * j + 2 * t + 1, n - 1);
        xcol[j] = xq + (size_t)cb * K + 4 * t;
        dc0[j] = xd + (size_t)c0 * nkb, dc1[j] = xd + (size_t)c1 * nkb;
    }
    float acc[NA][MMQ_NF][4];
#pragma unroll
    for (int i = 0; i < NA; i++)
#pragma unroll
        for (int j = 0; j < MMQ_NF; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    for (int kb = warp; kb < nkb; kb += MMQ_WARPS) {
        uint32_t A[NA][4];
        float dA[NA][2];
#pragma unroll
        for (int i = 0; i < NA; i++) load_a<TYPE>(rg[i], rg8[i], kb, t, A[i], dA[i][0], dA[i][1]);
#pragma unroll
        for (int j = 0; j < MMQ_NF; j++) {
            const int *bp = (const int *)(xcol[j] + (size_t)kb * 32);
            const uint32_t b0 = (uint32_t)__ldg(bp), b1 = (uint32_t)__ldg(bp + 4);
            const float x0 = __ldg(dc0[j] + kb), x1 = __ldg(dc1[j] + kb);
#pragma unroll
            for (int i = 0; i < NA; i++) {
                int c[4] = {0, 0, 0, 0};
                mma_s8(c, A[i], b0, b1);
                acc[i][j][0] = fmaf((float)c[0], dA[i][0] * x0, acc[i][j][0]);
                acc[i][j][1] = fmaf((float)c[1], dA[i][0] * x1, acc[i][j][1]);
                acc[i][j][2] = fmaf((float)c[2], dA[i][1] * x0, acc[i][j][2]);
                acc[i][j][3] = fmaf((float)c[3], dA[i][1] * x1, acc[i][j][3]);
            }
        }
    }
    /* the four warps' partial sums, added by warp 0 in a fixed order */
    if (warp > 0) {
#pragma unroll
        for (int i = 0; i < NA; i++)
#pragma unroll
            for (int j = 0; j < MMQ_NF; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) red[warp - 1][(i * MMQ_NF + j) * 4 + e][lane] = acc[i][j][e];
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int w = 0; w < MMQ_WARPS - 1; w++)
#pragma unroll
        for (int i = 0; i < NA; i++)
#pragma unroll
            for (int j = 0; j < MMQ_NF; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[i][j][e] += red[w][(i * MMQ_NF + j) * 4 + e][lane];
    /* lane (g, t) holds rows g (e < 2) and g + 8 (e >= 2), columns 2t and 2t + 1 of each 8-column fragment */
    const int64_t ldy = a.ldy[s];
    float *y = a.y[s];
#pragma unroll
    for (int j = 0; j < MMQ_NF; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int64_t row = m0 + g + (e >= 2 ? 8 : 0);
            const int col = n0 + 8 * j + 2 * t + (e & 1);
            if (row >= M || col >= n) continue;
            float v = acc[0][j][e];
            if (EPI == GM_CUDA_EPI_GEGLU) v = __fmul_rn(gmc_gelu_tanh(v), acc[NA - 1][j][e]);
            if (EPI == GM_CUDA_EPI_GELU_MUL) v = __fmul_rn(gmc_gelu_tanh(v), a.mul[(size_t)col * ldy + row]);
            y[(size_t)col * ldy + row] = v;
        }
}

extern "C" int gm_cuda_mmq_eligible(const gm_cuda_multi *m, int32_t n) {
    if (!m || m->n_w < 1 || m->n_w > 3 || n < MMQ_MIN_N || n > g_mmq_max_n) return 0;
    const int32_t type = m->w[0].type;
    if (type != GMC_Q4_0 && type != GMC_Q8_0) return 0;
    for (int i = 0; i < m->n_w; i++)
        if (m->w[i].type != type || m->w[i].ne0 != m->w[0].ne0 || m->w[i].ne0 % 32 || m->w[i].ne1 < 1) return 0;
    return 1;
}

extern "C" int gm_cuda_mmq_multi(const gm_cuda_multi *m, const void *act, int32_t n, gm_cuda_stream stream) {
    if (!gm_cuda_mmq_eligible(m, n) || !act || (m->epi == GM_CUDA_EPI_GEGLU && (m->n_w != 2 || m->w[1].ne1 != m->w[0].ne1)) ||
        (m->epi == GM_CUDA_EPI_GELU_MUL && (m->n_w != 1 || !m->mul)))
        return gmc_fail(-1, "mmq: bad arguments");
    const int64_t K = m->w[0].ne0;
    MmqArgs a = {};
    a.n_seg = m->epi == GM_CUDA_EPI_GEGLU ? 1 : m->n_w, a.mul = m->mul;
    unsigned blocks = 0;
    for (int i = 0; i < m->n_w; i++) {
        a.W[i] = (const uint8_t *)m->w[i].data, a.row_bytes[i] = m->w[i].row_bytes, a.M[i] = m->w[i].ne1;
        a.y[i] = m->y[i], a.ldy[i] = m->w[i].ne1;
        if (i < a.n_seg) a.blk_end[i] = blocks += (unsigned)((m->w[i].ne1 + MMQ_BM - 1) / MMQ_BM);
    }
    if (m->epi == GM_CUDA_EPI_GEGLU) a.y[1] = m->y[0], a.ldy[1] = a.ldy[0]; /* one output for both halves */
    const int8_t *xq = (const int8_t *)act;
    const float *xd = (const float *)((const uint8_t *)act + (((size_t)n * K + 15) & ~(size_t)15));
    const dim3 grid(blocks, (unsigned)((n + MMQ_BN - 1) / MMQ_BN));
    const cudaStream_t st = (cudaStream_t)stream;
#define GMC_MMQ(T)                                                                                                  \
    switch (m->epi) {                                                                                               \
    case GM_CUDA_EPI_GEGLU: gmc_launch(mmq_kernel<T, GM_CUDA_EPI_GEGLU>, grid, MMQ_WARPS * 32, 0, st, a, (int)K, n, xq, xd); break; \
    case GM_CUDA_EPI_GELU_MUL: gmc_launch(mmq_kernel<T, GM_CUDA_EPI_GELU_MUL>, grid, MMQ_WARPS * 32, 0, st, a, (int)K, n, xq, xd); break; \
    default: gmc_launch(mmq_kernel<T, GM_CUDA_EPI_STORE>, grid, MMQ_WARPS * 32, 0, st, a, (int)K, n, xq, xd); break; \
    }
    if (m->w[0].type == GMC_Q4_0) GMC_MMQ(GMC_Q4_0) else GMC_MMQ(GMC_Q8_0)
#undef GMC_MMQ
    return gmc_check_launch("mmq");
}
