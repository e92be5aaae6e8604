/* qgemm_cuda.cu: y[n][M] = x[n][K] · Wᵀ for q4_0 weights and GM_CUDA_GEMM_MIN_N .. gm_cuda_set_qgemm_max_n
 * columns on the f16 tensor cores, the weights dequantized in registers straight from their GGUF blocks (no f16
 * copy read, none needed): a batched-decoding path, off by default. Owns the kernel, its split of K over blocks
 * and its knobs.
 * Leaves to others: the activations (gm_cuda_prepare_act_f16: f16 [n][K] with a power-of-two scale per column,
 * as for cuBLAS), which batches come here (gemm_cuda.cu's gm_cuda_gemm_multi), longer batches (cuBLAS on f16).
 *
 * Why: at 64 sequences the cuBLAS path reads the f16 copies of the weights (E4B: 9.2 GB a step, ~2.1 ms at
 * 4.3 TB/s) and writes f32 products that an epilogue launch reads back; the q4_0 blocks are 2.6 GB. The seventh
 * session's int8 kernel (mmq_cuda.cu) read the blocks but was issue-bound at ~6 instructions per mma (a warp over one
 * 16-row tile: every mma paid its own B loads and block scaling). Here a warp owns 32 rows × up to 64 columns
 * (register blocking: one dequantized A fragment serves 8 n-tiles, one B load 2 m-tiles) and the block scales are
 * applied once to the f16 weights, not to every product.
 *
 * Layout: mma.m16n8k16 (f16 × f16 -> f32). Within a q4_0 block the order of k does not matter as long as A and B
 * agree, so lane (g, t) takes physical k = 4t..4t+3 for its fragment's logical k pairs (2t, 2t+1) and (2t+8, 2t+9):
 * the low nibbles of qs[4t..4t+3] are one k16 step, the high nibbles the next, and the lane's B fragment for a step
 * is one 8-byte load of x[col][4t..4t+3] (16 + 4t.. for the high step). Dequantizing a word of 8 nibbles: two masks,
 * four byte permutes into f16 1024 + q, four subtractions of 1032 (exact) and four multiplications by d: the f16
 * weights are the dequantized values rounded once, as gemm_weights_f16 makes them.
 *
 * Block: 8 warps over 128 rows (GeGLU: 64 gate rows, then the same 64 up rows, so the epilogue pairs them in the
 * block) × 64 columns: warps w and w + 4 share rows 32w .. 32w + 31 and take blocks 0-1 and 2-3 of each K chunk of
 * 128 values (four q4_0 blocks; their sums added in a fixed order at the end). A chunk's weights (72 bytes a row: an
 * odd block's nibbles are 4-byte aligned, an even block's two words shifted) and activations go into a shared
 * memory stage by cp.async, QG_STAGES chunks in flight, one barrier a chunk. Products of few row blocks (o_proj,
 * down: 20 blocks of 128 rows for 132 SMs) split K over the blocks of a cluster (sm_90, up to 8): each keeps its
 * partial tile in shared memory, and after a cluster barrier each block adds up its share of the tile's
 * outputs from all of them (distributed shared memory, in rank order: deterministic) and applies the epilogue: the
 * column scale, the segments, GeGLU or gelu·mul.
 *
 * Predicted (E4B q4_0, 64 columns, one layer's products): 52 MB of blocks (~13 us at 4 TB/s); 11.9 GFLOP, ~0.73M
 * mma at ~3.6 instructions each: ~6 us of issue at 2 per SM cycle; ~20-25 us per layer against ~100 for the cuBLAS
 * path. Measured (H200, 2026-12-03, BENCHMARKS.md "twelfth session"): correct, but slower than cuBLAS on f16 copies
 * (GeGLU 20480 × 2560 at 64 columns 50 us a call against 43; E4B 64 sequences 5.8k t/s against 7.6k). Nsight
 * Compute (the GeGLU): 8 instructions per mma, 0.35 issued per scheduler cycle with 3.6 warps resident and 0.6
 * eligible (latency-bound), and 1.2 waves of blocks (a split count chosen by whole waves measured slower). On the
 * way (each in the raw log): partial tiles handed over through global memory to the tile's last block (a serial
 * sum: 45-110 us a product); weight words loaded into registers one chunk ahead (too little in flight: down at 1
 * split 62 GB/s); 4 warps of 32 rows, chunks of 64 values. What it would take: Marlin's shape (weights repacked at upload so one 16-byte load holds a lane's
 * fragments for several mma, a 2-instruction dequantization, B by ldmatrix, fragments double-buffered across the
 * barrier). Off by default (gm_cuda_set_qgemm_max_n, GEMMAC_CUDA_QGEMM_MAX_N). */
#include <cooperative_groups.h>
#include <math.h>

#include "common_cuda.cuh"

enum {
    QG_ROW_WARPS = 4, QG_WARPS = 2 * QG_ROW_WARPS, /* two warps per 32 rows: one for each q4_0 block of a chunk */
    QG_MT = 2 /* m-tiles (16 rows) per warp */, QG_BM = QG_ROW_WARPS * 16 * QG_MT, QG_BN = 64,
    QG_MIN_RESIDENT = 2,     /* blocks per SM the registers must allow */
    QG_KC = 128,             /* values per K chunk: four q4_0 blocks */
    QG_CHUNK_BYTES = 72,     /* a chunk of one row */
    QG_WS = 80,              /* bytes per row of a stage's weights: 20 words, so the 8 rows × 4 lanes of a
                                fragment load hit different banks */
    QG_XS = QG_KC + 16,      /* halves per column of a stage's activations: 288 bytes, so a B load's 8 columns ×
                                4 lanes hit different banks in each half warp */
    QG_X_BYTES = QG_BN * QG_XS * 2, QG_STAGE_BYTES = QG_X_BYTES + QG_BM * QG_WS, /* 18432 + 10240 */
    QG_STAGES = 3, QG_TS = QG_BM + 4, /* floats per column of the output tile */
    QG_MIN_BLOCKS = 264,     /* split K until a product has this many blocks (2 per SM) */
    QG_MAX_SPLITS = 8,       /* ... in at most this many: the blocks of a tile are one cluster (portable size) */
    QG_MIN_CHUNKS = 2,       /* ... but give each split at least this many chunks */
    QG_EPI_UNROLL = 4,
    QG_MAX_N_DEFAULT = 0     /* off: slower than cuBLAS on f16 copies (above) */
};
static_assert(QG_STAGES * QG_STAGE_BYTES >= QG_BN * QG_TS * 4, "the output tile reuses the stages' memory");
static_assert(QG_BM * 2 == QG_WARPS * 32, "two threads copy a weight row");

static int g_qgemm_max_n = QG_MAX_N_DEFAULT, g_qgemm_max_splits = QG_MAX_SPLITS;

extern "C" void gm_cuda_set_qgemm_max_n(int n) { g_qgemm_max_n = n >= 0 ? n : QG_MAX_N_DEFAULT; }
extern "C" void gm_cuda_set_qgemm_splits(int max_splits) {
    g_qgemm_max_splits = max_splits >= 1 && max_splits <= QG_MAX_SPLITS ? max_splits : QG_MAX_SPLITS;
}

struct QgArgs {
    const uint8_t *W[3];
    uint64_t row_bytes[3];
    int64_t m_end[3]; /* stacked row bounds of the segments (GeGLU: m_end[0] = the height of each half) */
    float *y[3];
    int64_t ldy[3];
    int n_seg, epi;
    const float *mul;
    const __half *xh; /* [n][K] */
    const float *col_scale;
    int K, n, n_chunks, chunks_per_split;
};

/* Row i (0 .. QG_BM - 1) of row block rb: its segment and row there; false past the matrices. */
__device__ __forceinline__ bool qg_row(const QgArgs &a, int rb, int i, int &seg, int64_t &row) {
    if (a.epi == GM_CUDA_EPI_GEGLU) {
        seg = i >= QG_BM / 2;
        row = (int64_t)rb * (QG_BM / 2) + i % (QG_BM / 2);
        return row < a.m_end[0];
    }
    const int64_t v = (int64_t)rb * QG_BM + i;
    seg = 0;
    while (seg + 1 < a.n_seg && v >= a.m_end[seg]) seg++;
    row = v - (seg ? a.m_end[seg - 1] : 0);
    return v < a.m_end[a.n_seg - 1];
}

/* Two q4_0 values (the nibbles in bytes 0 and 1, or 2 and 3, of t: sel 0x4140 or 0x4342) as f16 d·(q − 8). */
__device__ __forceinline__ uint32_t q4_pair(uint32_t t, uint32_t sel, __half2 d2, __half2 k1032) {
    const uint32_t biased = __byte_perm(t, 0x64u, sel); /* f16 1024 + q in each half */
    const __half2 v = __hmul2(__hsub2(*(const __half2 *)&biased, k1032), d2);
    return *(const uint32_t *)&v;
}

/* Outputs e0 .. e1 - 1 of the tile (column-major over its output rows: all of them, or the 64 gate rows of a GeGLU)
 * from the partial tiles part[0 .. gridDim.z - 1] (shared memory, [QG_BN][QG_TS]; NP >= gridDim.z; added in that
 * order): as gemm_cuda.cu's epilogue, the column's scale first. QG_EPI_UNROLL outputs a thread at once, so their
 * loads (the other blocks' shared memory, gelu·mul's factor) are in flight together. */
template <int NP>
__device__ __forceinline__ void qg_epilogue(const QgArgs &a, int rb, int n0, int e0, int e1, const float *const part[NP]) {
    const bool geglu = a.epi == GM_CUDA_EPI_GEGLU;
    const int shift = geglu ? 6 : 7; /* log2 of the output rows: QG_BM / 2 or QG_BM */
    static_assert(QG_BM == 128, "the shifts above");
    for (int base = e0 + threadIdx.x; base < e1; base += QG_EPI_UNROLL * QG_WARPS * 32) {
        float v[QG_EPI_UNROLL], f[QG_EPI_UNROLL];
        float *dst[QG_EPI_UNROLL];
#pragma unroll
        for (int u = 0; u < QG_EPI_UNROLL; u++) {
            const int i = base + u * QG_WARPS * 32, col = i >> shift, r = i & ((1 << shift) - 1);
            int seg;
            int64_t row;
            dst[u] = NULL;
            if (i >= e1 || n0 + col >= a.n || !qg_row(a, rb, r, seg, row)) continue;
            float x = 0.0f, up = 0.0f;
#pragma unroll
            for (int k = 0; k < NP; k++)
                if (k < (int)gridDim.z) {
                    x += part[k][col * QG_TS + r];
                    if (geglu) up += part[k][col * QG_TS + r + QG_BM / 2];
                }
            const float s = a.col_scale[n0 + col];
            const size_t o = (size_t)(n0 + col) * a.ldy[seg] + row;
            v[u] = __fmul_rn(x, s);
            f[u] = geglu ? __fmul_rn(up, s) : a.epi == GM_CUDA_EPI_GELU_MUL ? a.mul[o] : 1.0f;
            dst[u] = a.y[seg] + o;
        }
#pragma unroll
        for (int u = 0; u < QG_EPI_UNROLL; u++)
            if (dst[u]) *dst[u] = a.epi == GM_CUDA_EPI_STORE ? v[u] : __fmul_rn(gmc_gelu_tanh(v[u]), f[u]);
    }
}

template <int NT>
__global__ void __launch_bounds__(QG_WARPS * 32, QG_MIN_RESIDENT) qgemm_q4_0_kernel(const __grid_constant__ QgArgs a) {
    extern __shared__ __align__(16) uint8_t qg_smem[]; /* QG_STAGES stages: activations, then weights */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wr = warp % QG_ROW_WARPS, kh = warp / QG_ROW_WARPS; /* rows 32·wr.., blocks 2kh, 2kh + 1 of a chunk */
    const int rb = blockIdx.x, n0 = blockIdx.y * QG_BN, z = blockIdx.z;
    const int c0 = z * a.chunks_per_split, n_ch = min(a.n_chunks - c0, a.chunks_per_split);

    /* what this thread copies into each stage: 8-byte pieces 0-4 (threads < QG_BM) or 5-8 of weight row
     * threadIdx.x % QG_BM (rows past the matrices: row 0, never stored), and 16-byte piece threadIdx.x % 16 of
     * activation columns threadIdx.x / 16 + 16u (columns past n: zeros) */
    int seg;
    int64_t row;
    const int wrow = threadIdx.x % QG_BM, p0 = threadIdx.x < QG_BM ? 0 : 5, p1 = threadIdx.x < QG_BM ? 5 : 9;
    if (!qg_row(a, rb, wrow, seg, row)) seg = 0, row = 0;
    const uint8_t *wsrc = a.W[seg] + (uint64_t)row * a.row_bytes[seg] + (size_t)c0 * QG_CHUNK_BYTES + 8 * p0;
    const int xcol = threadIdx.x / 16, xpiece = threadIdx.x % 16;
    const __half *xsrc = a.xh + (size_t)(n0 + xcol) * a.K + (size_t)c0 * QG_KC + xpiece * 8;
    const size_t xstride = (size_t)16 * a.K; /* 16 columns */
    unsigned xin = 0; /* bit u: column xcol + 16u exists */
#pragma unroll
    for (int u = 0; u < QG_BN / 16; u++) xin |= (n0 + xcol + 16 * u < a.n) << u;
    const uint32_t w_dst = QG_X_BYTES + wrow * QG_WS + 8 * p0, x_dst = (xcol * QG_XS + xpiece * 8) * 2;
    auto load_stage = [&](int ch, bool weights, bool acts) {
        uint8_t *st = qg_smem + (size_t)(ch % QG_STAGES) * QG_STAGE_BYTES;
        if (ch < n_ch && weights) {
            const uint8_t *src = wsrc + (size_t)ch * QG_CHUNK_BYTES;
#pragma unroll
            for (int i = 0; i < 5; i++)
                if (p0 + i < p1) cp_async8(st + w_dst + 8 * i, src + 8 * i, 8);
        }
        if (ch < n_ch && acts) {
            const __half *src = xsrc + (size_t)ch * QG_KC;
#pragma unroll
            for (int u = 0; u < QG_BN / 16; u++) {
                const bool in = (xin >> u) & 1;
                cp_async16(st + x_dst + u * 16 * QG_XS * 2, in ? src + u * xstride : a.xh, in ? 16 : 0);
            }
        }
    };
    /* the first stages' weights before the wait (immutable), their activations after it */
#pragma unroll
    for (int s = 0; s < QG_STAGES - 1; s++) load_stage(s, true, false);
    gmc_pdl_wait();
#pragma unroll
    for (int s = 0; s < QG_STAGES - 1; s++) {
        load_stage(s, false, true);
        cp_async_commit(); /* group s: stage s complete (group 0 also holds every early weight copy) */
    }

    float acc[QG_MT][NT][4] = {};

    const __half2 k1032 = __halves2half2(__ushort_as_half(0x6408), __ushort_as_half(0x6408)); /* 1032 */
    for (int ch = 0; ch < n_ch; ch++) {
        cp_async_wait<QG_STAGES - 2>();
        __syncthreads(); /* chunk ch is in; every warp is done with the stage loaded next */
        load_stage(ch + QG_STAGES - 1, true, true);
        cp_async_commit(); /* an empty group past the end keeps the counting uniform */
        const uint8_t *st = qg_smem + (size_t)(ch % QG_STAGES) * QG_STAGE_BYTES;
        const __half *xs = (const __half *)st;
        const uint32_t *ws = (const uint32_t *)(st + QG_X_BYTES) + 9 * kh; /* blocks 2kh, 2kh + 1: 36 bytes on */
#pragma unroll
        for (int kb = 0; kb < 2; kb++) {
            uint32_t word[QG_MT][2];
            __half2 d2[QG_MT][2];
#pragma unroll
            for (int mt = 0; mt < QG_MT; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    /* row 32·warp + 16·mt + g + 8·h: 9 words a row (conflict-free: 9g + t differ over a warp) */
                    const uint32_t *r = ws + (wr * 16 * QG_MT + mt * 16 + g + 8 * h) * (QG_WS / 4);
                    word[mt][h] = kb == 0 ? __funnelshift_r(r[t], r[t + 1], 16) : r[5 + t];
                    const uint32_t dd = __byte_perm(kb == 0 ? r[0] : r[4], 0u, kb == 0 ? 0x1010 : 0x3232);
                    d2[mt][h] = *(const __half2 *)&dd;
                }
#pragma unroll
            for (int step = 0; step < 2; step++) {
                uint32_t A[QG_MT][4];
#pragma unroll
                for (int mt = 0; mt < QG_MT; mt++) {
                    const uint32_t t0 = (step ? word[mt][0] >> 4 : word[mt][0]) & 0x0F0F0F0Fu;
                    const uint32_t t1 = (step ? word[mt][1] >> 4 : word[mt][1]) & 0x0F0F0F0Fu;
                    A[mt][0] = q4_pair(t0, 0x4140, d2[mt][0], k1032);
                    A[mt][1] = q4_pair(t1, 0x4140, d2[mt][1], k1032);
                    A[mt][2] = q4_pair(t0, 0x4342, d2[mt][0], k1032);
                    A[mt][3] = q4_pair(t1, 0x4342, d2[mt][1], k1032);
                }
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const uint2 b = *(const uint2 *)(xs + (j * 8 + g) * QG_XS + (2 * kh + kb) * 32 + step * 16 + 4 * t);
#pragma unroll
                    for (int mt = 0; mt < QG_MT; mt++) mma_f16(acc[mt][j], A[mt], b.x, b.y);
                }
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads(); /* the stages become the output tile */

    /* the tile: the odd blocks' sums, then the even blocks' added (a fixed order) */
    float *ts = (float *)qg_smem; /* [QG_BN][QG_TS]: column-major, so the stores below go along rows */
    for (int pass = 1; pass >= 0; pass--) {
        if (kh == pass) {
#pragma unroll
            for (int mt = 0; mt < QG_MT; mt++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float *o = ts + (j * 8 + 2 * t + (e & 1)) * QG_TS + wr * 16 * QG_MT + mt * 16 + g + (e >= 2 ? 8 : 0);
                        *o = pass ? acc[mt][j][e] : acc[mt][j][e] + *o;
                    }
        }
        __syncthreads();
    }

    const int out_rows = a.epi == GM_CUDA_EPI_GEGLU ? QG_BM / 2 : QG_BM, n_out = QG_BN * out_rows;
    if (gridDim.z == 1) {
        const float *own[1] = {ts};
        qg_epilogue<1>(a, rb, n0, 0, n_out, own);
        return;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* split K: the z blocks of a tile are one cluster; each adds up its share of the tile's outputs from every
     * block's shared memory (in rank order: deterministic) and stores them */
    cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
    cl.sync(); /* every partial tile is in its block's shared memory */
    const float *peer[QG_MAX_SPLITS];
#pragma unroll
    for (int k = 0; k < QG_MAX_SPLITS; k++) peer[k] = cl.map_shared_rank(ts, k < (int)gridDim.z ? k : 0);
    const int share = (n_out + (int)gridDim.z - 1) / (int)gridDim.z;
    qg_epilogue<QG_MAX_SPLITS>(a, rb, n0, z * share, min(n_out, (z + 1) * share), peer);
    cl.sync(); /* no block leaves while another reads its shared memory */
#endif
}

/* ---- host side ---- */
struct QgPlan {
    unsigned row_blocks, col_blocks, splits;
    int chunks_per_split;
};

/* Whether the current device launches clusters (sm_90): K is split over blocks only then. */
static bool clusters_ok(void) {
    static int cached[16] = {0}; /* 0 unknown, 1 yes, 2 no */
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return false;
    if (dev < 16 && cached[dev]) return cached[dev] == 1;
    const bool ok = cudaDeviceGetAttribute(&v, cudaDevAttrClusterLaunch, dev) == cudaSuccess && v;
    if (dev < 16) cached[dev] = ok ? 1 : 2;
    return ok;
}

/* The split of K: enough blocks for two per SM of an H200 (QG_MIN_BLOCKS), at most QG_MAX_SPLITS, each split at
 * least QG_MIN_CHUNKS chunks. (Choosing the count by whole waves × chunks per split measured slower: the GeGLU at
 * 64 columns 50 -> 61 us with 3 splits instead of 2.) */
static QgPlan qg_plan(const gm_cuda_multi *m, int32_t n) {
    QgPlan p = {};
    int64_t rows = 0;
    for (int i = 0; i < m->n_w; i++) rows += m->w[i].ne1;
    if (m->epi == GM_CUDA_EPI_GEGLU) rows = 2 * ((m->w[0].ne1 + QG_BM / 2 - 1) / (QG_BM / 2)) * (QG_BM / 2);
    p.row_blocks = (unsigned)((rows + QG_BM - 1) / QG_BM);
    p.col_blocks = (unsigned)((n + QG_BN - 1) / QG_BN);
    const int n_chunks = (int)(m->w[0].ne0 / QG_KC);
    const int64_t tiles = (int64_t)p.row_blocks * p.col_blocks;
    int splits = 1;
    if (tiles < QG_MIN_BLOCKS && g_qgemm_max_splits > 1 && clusters_ok()) {
        splits = (int)((QG_MIN_BLOCKS + tiles - 1) / tiles);
        if (splits > g_qgemm_max_splits) splits = g_qgemm_max_splits;
        if (splits > n_chunks / QG_MIN_CHUNKS) splits = n_chunks / QG_MIN_CHUNKS;
        if (splits < 1) splits = 1;
    }
    p.chunks_per_split = (n_chunks + splits - 1) / splits;
    p.splits = (unsigned)((n_chunks + p.chunks_per_split - 1) / p.chunks_per_split); /* no empty split */
    return p;
}

extern "C" int gm_cuda_qgemm_eligible(const gm_cuda_multi *m, int32_t n) {
    if (!m || m->n_w < 1 || m->n_w > 3 || n < GM_CUDA_GEMM_MIN_N || n > g_qgemm_max_n) return 0;
    int64_t rows = 0;
    for (int i = 0; i < m->n_w; i++) {
        const gm_cuda_mat *w = &m->w[i];
        if (w->type != GMC_Q4_0 || w->ne0 != m->w[0].ne0 || w->ne0 % QG_KC || w->ne0 > (1 << 30) || w->ne1 < 1 ||
            w->row_bytes % 8 || (uintptr_t)w->data % 8) /* 8-byte cp.async pieces */
            return 0;
        rows += w->ne1;
    }
    return (rows + QG_BM - 1) / QG_BM <= INT32_MAX; /* the grid's x */
}

template <int NT>
static void qg_launch(const QgPlan &p, const QgArgs &a, cudaStream_t st) {
    constexpr size_t smem = (size_t)QG_STAGES * QG_STAGE_BYTES;
    static bool opted = false;
    if (!opted) {
        cudaFuncSetAttribute(qgemm_q4_0_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        opted = true;
    }
    gmc_launch_cluster(qgemm_q4_0_kernel<NT>, dim3(p.row_blocks, p.col_blocks, p.splits), QG_WARPS * 32, smem, st,
                       dim3(1, 1, p.splits), a);
}

extern "C" int gm_cuda_qgemm(const gm_cuda_multi *m, const void *xh, const float *col_scale, int32_t n,
                             gm_cuda_stream stream) {
    if (!gm_cuda_qgemm_eligible(m, n) || !xh || !col_scale || (uintptr_t)xh % 16 ||
        (m->epi == GM_CUDA_EPI_GEGLU && (m->n_w != 2 || m->w[1].ne1 != m->w[0].ne1 || !m->y[0])) ||
        (m->epi == GM_CUDA_EPI_GELU_MUL && (m->n_w != 1 || !m->mul)))
        return gmc_fail(-1, "qgemm: bad arguments");
    const QgPlan p = qg_plan(m, n);
    QgArgs a = {};
    int64_t end = 0;
    a.n_seg = m->epi == GM_CUDA_EPI_GEGLU ? 2 : m->n_w;
    for (int i = 0; i < m->n_w; i++) {
        end += m->w[i].ne1;
        a.W[i] = (const uint8_t *)m->w[i].data, a.row_bytes[i] = m->w[i].row_bytes;
        a.m_end[i] = m->epi == GM_CUDA_EPI_GEGLU ? m->w[0].ne1 : end;
        a.y[i] = m->epi == GM_CUDA_EPI_GEGLU ? m->y[0] : m->y[i], a.ldy[i] = m->w[i].ne1;
        if (!a.y[i]) return gmc_fail(-1, "qgemm: no output for matrix %d", i);
    }
    a.epi = m->epi, a.mul = m->mul, a.xh = (const __half *)xh, a.col_scale = col_scale;
    a.K = (int)m->w[0].ne0, a.n = n, a.n_chunks = a.K / QG_KC, a.chunks_per_split = p.chunks_per_split;
    const int nt_needed = (n < QG_BN ? n + 7 : QG_BN) / 8; /* n-tiles holding columns; past 64: all */
    const cudaStream_t st = (cudaStream_t)stream;
    if (nt_needed <= 2) qg_launch<2>(p, a, st);
    else if (nt_needed <= 4) qg_launch<4>(p, a, st);
    else qg_launch<8>(p, a, st);
    return gmc_check_launch("qgemm");
}
