/* qgemm_cuda.cu: y[n][M] = x[n][K] · Wᵀ for q4_0 weights in their device layout (GMC_Q4_0_G8) and
 * GM_CUDA_GEMM_MIN_N .. gm_cuda_set_qgemm_max_n columns on the f16 tensor cores, the weights dequantized in
 * registers straight from their blocks (no f16 copy read, none needed), m's epilogue in the same launch: the
 * batched-decoding path for 16-64 sequences. Owns two kernels, which batches each takes, their split of K over
 * blocks and their knobs: the warp kernel (mma.sync, sm_80+; below) and the warpgroup kernel (wgmma, sm_90a; "the
 * warpgroup kernel" further down), which by default takes batches of 17-32 columns and, up to 64, the products of
 * 8 MB of weights or more (H100: E4B q4_0, 32 sequences +7.8%, 64 sequences +6.9%; BENCHMARKS.md, twenty-fourth
 * session). Leaves to others: the activations (gm_cuda_prepare_act_f16: f16 [n][K] with a power-of-two scale per
 * column, as for cuBLAS, in the order the kernel reads: gm_cuda_qgemm_act_order), which batches come here
 * (gemm_cuda.cu's gm_cuda_gemm_multi), longer batches (cuBLAS on f16).
 *
 * Why: at 16-64 sequences the cuBLAS path reads the f16 copies of the weights (E4B: 9.2 GB a step, ~2.1 ms at
 * 4.3 TB/s) and writes f32 products that an epilogue launch reads back; the q4_0 blocks are 2.6 GB. The twelfth
 * session's kernel read the GGUF blocks through shared memory (72-byte rows, a funnel shift per word, two warps per
 * 32 rows) and issued ~8 instructions per mma at 0.35 a scheduler cycle: slower than cuBLAS (BENCHMARKS.md).
 *
 * This one (sixteenth session): a warp owns 16 rows (one m16 tile; 8 warps a block of 128 rows) or 32 (two; 4
 * warps: gm_cuda_set_qgemm_warp_rows) × all the block's columns (NT n8 tiles, 16-64 columns), and each of a row's
 * lanes t = 0..3 takes a whole q4_0 block of a 128-value chunk: the 16 quant bytes of block 4c + t of rows g and
 * g + 8 are one aligned 16-byte load each from the re-laid rows (a G8 group is two chunks), its scale one 2-byte
 * load, straight into registers, P chunks ahead (no shared memory, no barrier for the weights). Within a k16 step
 * the order of k is free as long as A and B agree: lane t's four logical k of step (jw, hh) are physical k
 * 32t + 16hh + 4p .. + 3 of the chunk, p = jw ^ (t & 1) (word p of its block: the low nibbles for hh = 0, the high
 * for 1), so an A pair is a masked word byte-permuted under 0x64 into f16 1024 + q, a subtraction of 1032 and a
 * multiplication by d (the value rounded once, as the f16 copies hold it), and the lane's B fragment one 8-byte
 * load of x[col][that k]. The activations go through shared memory by cp.async, QG_STAGES chunks in flight, one
 * barrier a chunk: columns 288 bytes apart, 16-byte units 8-15 of a column stored pairwise swapped, which with the
 * p above makes each half warp's 8-byte B loads hit 16 different bank pairs (checked exhaustively when it was
 * chosen). Products of few row blocks split K over the blocks of a cluster (sm_90, up to 8): each keeps its
 * partial tile in shared memory and, after a cluster barrier, adds up its share of the tile's outputs from all of
 * them (distributed shared memory, in rank order: deterministic) and applies the epilogue: the column scale, the
 * segments, GeGLU or gelu·mul.
 *
 * Per k16 step a warp issues, per m-tile, 2·(1 mask + 2 permutes + 2 subtractions + 2 multiplications) for A, one
 * 8-byte shared load per n-tile for B and MT·NT mma. Predicted (E4B q4_0, H200): GeGLU 2 × 10240 × 2560 at 16
 * columns ~10-12 us (29.5 MB of blocks at ~3 TB/s) against ~39 us through cuBLAS on f16 copies; at 64 columns
 * ~13-15 us against ~32-43. Measured (bench/cuda_mmq_probe, each call with its activation preparation, no graph;
 * BENCHMARKS.md "sixteenth session"): GeGLU at 16 columns 21 us against 38 (1.4 TB/s of blocks), at 32 26 against
 * 40, at 64 42 against 44; the small products at 16 columns 8-10 us against 14; E4B batched decoding at depth
 * 1024: 16 sequences +21%, 32 +4%, 64 -25% (cuBLAS keeps those: the default largest batch is 32). Nsight Compute
 * (first version, 4 warps of 32 rows): 0.36-0.42 instructions issued per scheduler cycle with 2.4 warps resident
 * (the grid is 320 blocks), stalls mostly on the weight loads (long scoreboard), ~580 instructions per warp and
 * chunk at 16 columns where ~330 were counted: selector registers for the byte permutes and 64-bit addressing,
 * since removed. Tried and not kept (BENCHMARKS.md): hinting the rows into L2 first, weights 1 or 6 chunks ahead
 * (the same or slower: the weights' latency is not what binds), 8 activation stages, accumulators split by nibble
 * step, a whole G8 group per row and lane pair of blocks (faster alone, 32 sequences 4% slower end to end). */
#include <cooperative_groups.h>
#include <cuda.h> /* CUtensorMap (the driver itself through cudaGetDriverEntryPointByVersion) */
#include <math.h>
#include <string.h>

#include "common_cuda.cuh"

enum {
    QG_BM = 128,             /* rows per block: 8 warps of one m16 tile each, or 4 of two (QgShape) */
    QG_MAX_NT = 8, QG_BN = 8 * QG_MAX_NT, /* at most 64 columns a block: 8 n-tiles */
    QG_MAX_THREADS = 256,
    QG_KC = 128,             /* values per K chunk: four q4_0 blocks, half a G8 group */
    QG_XS = QG_KC + 16,      /* halves per column of a stage's activations: 288 bytes (see the swizzle above) */
    QG_STAGES = 4, QG_TS = QG_BM + 4, /* floats per column of the output tile */
    QG_MIN_BLOCKS = 264,     /* split K until a product has this many blocks (2 per SM) */
    QG_MAX_SPLITS = 8,       /* ... in at most this many: the blocks of a tile are one cluster (portable size) */
    QG_MIN_CHUNKS = 2,       /* ... but give each split at least this many chunks */
    QG_EPI_UNROLL = 4,
    QG_MAX_N_DEFAULT = 32,   /* the largest batch by default: 32 with the warp kernel only, */
    QG_MAX_N_WG_DEFAULT = 64, /* and where the warpgroup kernel runs, but past 32 columns only for products of at least
                                 QG_WG_BIG_BYTES of weights: H100, E4B q4_0 at depth 1024, every product of 64
                                 sequences on it gave 7,690 t/s against 7,970 through cuBLAS on f16 copies in a CUDA
                                 graph (its launches average 17.4 us of critical path; cuBLAS's small products ~6) */
    QG_WG_BIG_BYTES = 8 << 20, /* (E4B: the GeGLU, 29.5 MB, and the down projection, 14.7 MB, of a layer's seven) */
    QG_WG_MIN_N = 17,        /* by default the warpgroup kernel takes batches from this many columns, the warp kernel
                                smaller ones (H100 probe: at 16 columns the warp kernel is as fast or faster, at 32 the
                                warpgroup kernel: 32 sequences +7.8%) */
    QG_WG_DEFAULT = -1       /* by the batch, as above */
};
static_assert(2 * (QG_KC / 2) == Q4_0_G8_BYTES - 16, "a chunk is half a G8 group's quant bytes");

/* Shared memory of a block of NT n-tiles: the activation stages, reused for the output tile at the end. */
template <int NT>
static constexpr size_t qg_smem_bytes() {
    return (size_t)QG_STAGES * 8 * NT * QG_XS * 2 > (size_t)8 * NT * QG_TS * 4 ? (size_t)QG_STAGES * 8 * NT * QG_XS * 2
                                                                                  : (size_t)8 * NT * QG_TS * 4;
}

static int g_qgemm_wg = QG_WG_DEFAULT; /* gm_cuda_set_qgemm_kernel */
static int g_qgemm_max_n = -1 /* the default: qg_max_n */, g_qgemm_max_splits = QG_MAX_SPLITS, g_qgemm_warp_rows = 0,
           g_qgemm_block_cols = 0;

extern "C" void gm_cuda_set_qgemm_max_n(int n) { g_qgemm_max_n = n >= 0 ? n : -1; }
extern "C" void gm_cuda_set_qgemm_warp_rows(int rows) { g_qgemm_warp_rows = rows == 16 || rows == 32 ? rows : 0; }
extern "C" void gm_cuda_set_qgemm_block_cols(int cols) {
    g_qgemm_block_cols = cols == 16 || cols == 32 || cols == 64 ? cols : 0;
}
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

/* A pair of f16 1024 + q (q: two q4_0 values) as f16 d·(q − 8): the subtraction is exact, the product rounded once. */
__device__ __forceinline__ uint32_t q4_pair(uint32_t biased, __half2 d2, __half2 k1032) {
    const __half2 v = __hmul2(__hsub2(*(const __half2 *)&biased, k1032), d2);
    return *(const uint32_t *)&v;
}

/* One k16 step's A fragment (mma.m16n8k16's, and wgmma's warp by warp) from word w0 of the lane's block in row g and
 * word w1 in row g + 8, with their scales d0 / d1: the low (hh = 0) or high nibbles of bytes 0, 1 (A[0] row g, A[1]
 * row g + 8) and 2, 3 (A[2], A[3]). Both kernels' dequantization. */
__device__ __forceinline__ void q4_a_frag(uint32_t w0, uint32_t w1, int hh, __half2 d0, __half2 d1, uint32_t (&A)[4]) {
    const __half2 k1032 = __halves2half2(__ushort_as_half(0x6408), __ushort_as_half(0x6408)); /* 1032 */
    const uint32_t f16_1024 = 0x64u; /* the high byte of f16 1024 */
    const uint32_t t0 = (hh ? w0 >> 4 : w0) & 0x0F0F0F0Fu, t1 = (hh ? w1 >> 4 : w1) & 0x0F0F0F0Fu;
    /* f16 1024 + q of bytes 0, 1 (selector 0x0504: t's bytes 0 and 1 under 0x64) or 2, 3 (0x0706); the constant byte
     * first so that the selector is the immediate operand */
    A[0] = q4_pair(__byte_perm(f16_1024, t0, 0x0504), d0, k1032);
    A[1] = q4_pair(__byte_perm(f16_1024, t1, 0x0504), d1, k1032);
    A[2] = q4_pair(__byte_perm(f16_1024, t0, 0x0706), d0, k1032);
    A[3] = q4_pair(__byte_perm(f16_1024, t1, 0x0706), d1, k1032);
}

/* Columns c0 .. c1 - 1 of the tile's outputs (all its output rows, or the 64 gate rows of a GeGLU) from the partial
 * tiles part[0 .. gridDim.z - 1] (shared memory, [8·NT][QG_TS]; NP >= gridDim.z; added in that order): as
 * gemm_cuda.cu's epilogue, the column's scale first, by the block's first `threads` threads (a multiple of 128). A
 * thread keeps one output row (its segment and pointers found once) and takes every (threads / rows)-th column,
 * QG_EPI_UNROLL columns at once so that their loads (the other blocks' shared memory, the scales, gelu·mul's factor)
 * are in flight together. (Found per output, the row's segment
 * and 64-bit offsets made this 26% of the warpgroup kernel's instructions: H100, GeGLU at 64 columns, unsplit.) */
template <int NP>
__device__ __forceinline__ void qg_epilogue(const QgArgs &a, int rb, int n0, int c0, int c1, const float *const part[NP],
                                            int threads) {
    const bool geglu = a.epi == GM_CUDA_EPI_GEGLU;
    const int rows = geglu ? QG_BM / 2 : QG_BM, r = threadIdx.x % rows, step = threads / rows;
    int seg;
    int64_t row;
    if ((int)threadIdx.x >= threads || !qg_row(a, rb, r, seg, row)) return;
    const int64_t ldy = a.ldy[seg];
    float *const y = a.y[seg] + row;
    const float *const mul = a.epi == GM_CUDA_EPI_GELU_MUL ? a.mul + row : NULL;
    const int c_end = min(c1, a.n - n0);
    for (int base = c0 + (int)threadIdx.x / rows; base < c_end; base += QG_EPI_UNROLL * step) {
        float v[QG_EPI_UNROLL], f[QG_EPI_UNROLL];
#pragma unroll
        for (int u = 0; u < QG_EPI_UNROLL; u++) {
            const int col = base + u * step;
            if (col >= c_end) break;
            float x = 0.0f, up = 0.0f;
#pragma unroll
            for (int k = 0; k < NP; k++)
                if (k < (int)gridDim.z) {
                    x += part[k][col * QG_TS + r];
                    if (geglu) up += part[k][col * QG_TS + r + QG_BM / 2];
                }
            const float s = a.col_scale[n0 + col];
            v[u] = __fmul_rn(x, s);
            f[u] = geglu ? __fmul_rn(up, s) : mul ? mul[(int64_t)(n0 + col) * ldy] : 1.0f;
        }
#pragma unroll
        for (int u = 0; u < QG_EPI_UNROLL; u++) {
            const int col = base + u * step;
            if (col >= c_end) break;
            y[(int64_t)(n0 + col) * ldy] = a.epi == GM_CUDA_EPI_STORE ? v[u] : __fmul_rn(gmc_gelu_tanh(v[u]), f[u]);
        }
    }
}

/* The end of a block of either kernel, called by all its threads: the accumulators of its first `threads` (acc[mt][j]
 * [e]: rows warp·16·MT + 16mt + g (+ 8 for e >= 2), columns 8j + 2t (+ 1 for odd e); any further threads hold none)
 * into the output tile in shared memory (smem, free now), then the epilogue by those threads: alone, or with the
 * other blocks of its cluster when K is split. */
template <int NT, int MT>
__device__ __forceinline__ void qg_finish(const QgArgs &a, int rb, int n0, const float (&acc)[MT][NT][4], uint8_t *smem,
                                          int threads) {
    constexpr int BN = 8 * NT;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float *ts = (float *)smem; /* [BN][QG_TS]: column-major, so the stores below go along rows */
    if ((int)threadIdx.x < threads) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    ts[(j * 8 + 2 * t + (e & 1)) * QG_TS + warp * 16 * MT + mt * 16 + g + (e >= 2 ? 8 : 0)] = acc[mt][j][e];
    }
    __syncthreads();

    if (gridDim.z == 1) {
        const float *own[1] = {ts};
        qg_epilogue<1>(a, rb, n0, 0, BN, own, threads);
        return;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* split K: the z blocks of a tile are one cluster; each adds up its share of the tile's columns from every
     * block's shared memory (in rank order: deterministic) and stores them */
    cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
    cl.sync(); /* every partial tile is in its block's shared memory */
    const float *peer[QG_MAX_SPLITS];
#pragma unroll
    for (int k = 0; k < QG_MAX_SPLITS; k++) peer[k] = cl.map_shared_rank(ts, k < (int)gridDim.z ? k : 0);
    const int share = (BN + (int)gridDim.z - 1) / (int)gridDim.z, z = (int)blockIdx.z; /* columns a block */
    qg_epilogue<QG_MAX_SPLITS>(a, rb, n0, z * share, min(BN, (z + 1) * share), peer, threads);
    cl.sync(); /* no block leaves while another reads its shared memory */
#endif
}

/* A chunk's weights for one lane: the 16 quant bytes of its block in rows g and g + 8 of each of its MT m-tiles,
 * and the two blocks' scales (row g's in the low half). */
template <int MT>
struct QgW {
    uint4 q[MT][2];
    uint32_t d[MT];
};

/* A lane's weight rows and how it loads a chunk's weights from them (both kernels): m-tile mt's row g (h = 0) or
 * g + 8 (h = 1) of the warp's rows (from row0 of the block's), at the split's first chunk c0 plus its block 16t (the
 * scales: 128 + 2t further); rows past the matrices read row 0 of the first (never stored). */
template <int MT>
struct QgRows {
    const uint8_t *row[MT][2];
    int c0, n_ch, t;
    __device__ __forceinline__ QgRows(const QgArgs &a, int rb, int row0, int g, int t_, int c0_, int n_ch_)
        : c0(c0_), n_ch(n_ch_), t(t_) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int seg;
                int64_t r;
                if (!qg_row(a, rb, row0 + mt * 16 + g + 8 * h, seg, r)) seg = 0, r = 0;
                row[mt][h] = a.W[seg] + (uint64_t)r * a.row_bytes[seg] + (size_t)(c0 >> 1) * Q4_0_G8_BYTES + 16 * t;
            }
    }
    /* chunk ch (of the split) into w: its group's bytes, then 64 bytes (4 blocks) into it for an odd chunk */
    __device__ __forceinline__ void load(int ch, QgW<MT> &w) const {
        if (ch >= n_ch) return;
        const uint32_t half = ((c0 & 1) + ch) & 1;
        const uint32_t oq = (uint32_t)(((c0 & 1) + ch) >> 1) * Q4_0_G8_BYTES + half * 64;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
#pragma unroll
            for (int h = 0; h < 2; h++) w.q[mt][h] = __ldg((const uint4 *)(row[mt][h] + oq));
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            /* the scale of block 4·(chunk & 1) + t: 128 + 2·that from the group, i.e. from the lane's quants
             * (16t + 64·(chunk & 1) on) 128 - 14t - 56·(chunk & 1) further */
            const uint32_t so = oq + 128 - 14 * (uint32_t)t - 56 * half;
            w.d[mt] = (uint32_t)gmc_ld16(row[mt][0] + so) | ((uint32_t)gmc_ld16(row[mt][1] + so) << 16);
        }
    }
};

/* Threads of a block of MT m-tiles a warp (128 rows), and the blocks per SM its registers must allow. */
template <int MT>
struct QgShape {
    enum { WARPS = QG_BM / (16 * MT), THREADS = 32 * WARPS, MIN_BLOCKS = MT == 1 ? 3 : 2 };
};

template <int NT, int MT>
__global__ void __launch_bounds__(QgShape<MT>::THREADS, QgShape<MT>::MIN_BLOCKS)
    qgemm_q4_0_kernel(const __grid_constant__ QgArgs a) {
    extern __shared__ __align__(128) uint8_t qg_smem[]; /* QG_STAGES stages of activations, then the output tile */
    constexpr int BN = 8 * NT, STAGE_BYTES = BN * QG_XS * 2, THREADS = QgShape<MT>::THREADS;
    constexpr int P = NT * MT <= 4 ? 3 : 2; /* chunks of weights in flight */
    constexpr int X_UNITS = BN * 16 / THREADS; /* 16-byte units of a stage each thread copies */
    static_assert(X_UNITS >= 1 && BN * 16 % THREADS == 0, "load_x: whole units a thread");
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int rb = blockIdx.x, n0 = blockIdx.y * BN, z = blockIdx.z;
    const int c0 = z * a.chunks_per_split, n_ch = min(a.n_chunks - c0, a.chunks_per_split);

    const QgRows<MT> wr(a, rb, warp * 16 * MT, g, t, c0, n_ch);
    auto load_w = [&](int ch, QgW<MT> &w) { wr.load(ch, w); };
    /* the activations of chunk ch into its stage: unit u (16 bytes, k 8u .. 8u + 7) of column col at 16-byte unit
     * u ^ (u >> 3 & 1) of the column; columns past n: zeros. Thread i copies unit i % 16 of columns i / 16 +
     * (THREADS / 16)·v. */
    const int x_unit = threadIdx.x & 15, x_col = threadIdx.x >> 4;
    const uint32_t x_dst = x_col * QG_XS * 2 + 16 * (x_unit ^ ((x_unit >> 3) & 1));
    const __half *x_src = a.xh + (size_t)(n0 + x_col) * a.K + (size_t)c0 * QG_KC + x_unit * 8;
    unsigned x_in = 0; /* bit v: column x_col + (THREADS / 16)·v exists */
#pragma unroll
    for (int v = 0; v < X_UNITS; v++) x_in |= (unsigned)(n0 + x_col + v * (THREADS / 16) < a.n) << v;
    const size_t x_stride = (size_t)(THREADS / 16) * a.K;
    auto load_x = [&](int ch) {
        if (ch >= n_ch) return;
        uint8_t *st = qg_smem + (size_t)(ch % QG_STAGES) * STAGE_BYTES + x_dst;
        const __half *src = x_src + (size_t)ch * QG_KC;
#pragma unroll
        for (int v = 0; v < X_UNITS; v++) {
            const bool in = (x_in >> v) & 1;
            cp_async16(st + v * (THREADS / 16) * QG_XS * 2, in ? src + v * x_stride : a.xh, in ? 16 : 0);
        }
    };

    QgW<MT> w[P];
    /* the first chunks' weights before the wait (immutable), the activations after it */
#pragma unroll
    for (int p = 0; p < P; p++) load_w(p, w[p]);
    gmc_pdl_wait();
#pragma unroll
    for (int s = 0; s < QG_STAGES - 1; s++) {
        load_x(s);
        cp_async_commit(); /* group s: stage s */
    }

    float acc[MT][NT][4] = {};
    /* this lane's B offsets in a column for step (jw, hh): physical k 32t + 16hh + 4p, p = jw ^ (t & 1), stored
     * swizzled: byte 64t + 32hh + 8·(jw ^ t) */
    const int boff0 = g * QG_XS * 2 + 64 * t;
    auto chunk = [&](int ch, const QgW<MT> &wc) {
        cp_async_wait<QG_STAGES - 2>();
        __syncthreads(); /* chunk ch is in; every warp is done with the stage loaded next */
        load_x(ch + QG_STAGES - 1);
        cp_async_commit(); /* an empty group past the end keeps the counting uniform */
        const uint8_t *st = qg_smem + (size_t)(ch % QG_STAGES) * STAGE_BYTES + boff0;
        uint32_t wq[MT][2][4];
        __half2 d2[MT][2];
        const bool odd = t & 1; /* word jw ^ 1 at step jw */
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint4 q = wc.q[mt][h];
                wq[mt][h][0] = odd ? q.y : q.x, wq[mt][h][1] = odd ? q.x : q.y;
                wq[mt][h][2] = odd ? q.w : q.z, wq[mt][h][3] = odd ? q.z : q.w;
                const uint32_t dd = __byte_perm(wc.d[mt], 0u, h ? 0x3232 : 0x1010);
                d2[mt][h] = *(const __half2 *)&dd;
            }
        }
#pragma unroll
        for (int jw = 0; jw < 4; jw++) {
            const int boff = 8 * (jw ^ t);
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                uint32_t A[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    q4_a_frag(wq[mt][0][jw], wq[mt][1][jw], hh, d2[mt][0], d2[mt][1], A[mt]);
                }
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const uint2 b = *(const uint2 *)(st + j * 8 * QG_XS * 2 + 32 * hh + boff);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) mma_f16(acc[mt][j], A[mt], b.x, b.y);
                }
            }
        }
    };
    for (int ch0 = 0; ch0 < n_ch; ch0 += P) {
#pragma unroll
        for (int p = 0; p < P; p++)
            if (ch0 + p < n_ch) { /* the same for every thread of the block: the barrier inside is uniform */
                chunk(ch0 + p, w[p]);
                load_w(ch0 + p + P, w[p]);
            }
    }
    cp_async_wait<0>();
    __syncthreads(); /* the stages become the output tile */
    qg_finish<NT, MT>(a, rb, n0, acc, qg_smem, THREADS);
}

/* ---- the warpgroup kernel (sm_90a: wgmma) ----
 * Two consumer warpgroups a block, 64 rows each (QG_BM in all), all the block's BN = 8·NT columns, and one producer
 * warp. Per k16 step a warpgroup issues one wgmma.m64nBNk16 whose A (the weights) comes from registers, dequantized
 * as the warp kernel does (each warp 16 rows: wgmma's A fragment is mma.m16n8k16's, warp by warp), and whose B (the
 * activations) comes straight from shared memory through a descriptor. So the warps issue no mma and no B loads;
 * the tensor cores work on one half chunk while the warps dequantize the next (wgmma is asynchronous: two register
 * sets of A, a commit group a half chunk). The input is in GM_CUDA_ACT_ORDER_QG: a k16 step's 16 values are one
 * contiguous run of the row, so a chunk's two halves of 64 values (128 bytes a column) are two boxes of the tensor
 * memory accelerator (TMA) with the 128-byte swizzle, which lands them in wgmma's K-major layout: column n's 16-byte
 * unit c at n·128 + 16·(c ^ n % 8) of its atom, the atoms BN·128 bytes apart; a descriptor starts at its step's 32
 * bytes of the atom's first column, column groups of 8 SBO = 1024 bytes apart. (Without the swizzle, core matrices
 * of 128 contiguous bytes, Nsight Compute counted 67% of the shared-memory wavefronts excessive.) The chunk's weights
 * come through the same stage, two TMA boxes a 64-row half: its rows' 64 quant bytes of the chunk and the 16 scale
 * bytes of its G8 group; each lane reads its block of its two rows from there. Two blocks an SM (90 registers a
 * thread at NT = 8, 105 KB of stages).
 * The producer warp's one thread issues every copy: the first QG_WG_STAGES chunks' weights before the PDL wait (they
 * are immutable), then each chunk's six boxes once the consumers have released its stage. A stage has two
 * mbarriers: `full` (the copies' bytes: its phase ends when the chunk is in) and `empty` (one arrival a consumer
 * warp once its wgmma that read the stage have completed). So no consumer thread computes an address, issues a copy
 * or waits on a block-wide barrier inside the loop; before (cp.async by every thread, a __syncthreads and a proxy
 * fence a chunk) Nsight Compute found the loop's largest stalls on registers still read by in-flight copies and on
 * the barrier, at 0.37 instructions issued per scheduler cycle (H100, GeGLU at 64 columns). Rows past the matrices
 * and columns past n are filled with zeros by the TMA (boxes out of bounds); a segment must start at a multiple of 64
 * rows (qg_wg_fits), since a box's rows come from one matrix. Measured (H100, bench/cuda_mmq_probe, us with the
 * input's preparation; cuBLAS on f16 copies / warp kernel / this with cp.async stages (thirtieth session) / this):
 * GeGLU 2 x 10240 x 2560 at 32 columns 51 / 27 / 23.3 / 22.8, at 64 53 / 43 / 29.4 / 28.4, at 256 78 / 138 / 84.6 /
 * 69.8; down 2560 x 10240 at 64 35 / 41 / 25.3 / 25.0. E4B q4_0 at depth 1024, 64 sequences +2.2%, 32 the same
 * (BENCHMARKS.md, thirty-first session): the copies and the barrier were not what bound the loop. */
enum {
    QG_WG_STAGES = 4,
    QG_WG_CONSUMERS = 256, /* two warpgroups */
    QG_WG_THREADS = QG_WG_CONSUMERS + 32, /* and the producer warp */
    QG_WG_HALF = QG_BM / 2, /* rows of a weight box: one warpgroup's */
    QG_WG_Q_BYTES = QG_KC / 2, QG_WG_S_BYTES = 16 /* a row's quant bytes of a chunk; its G8 group's scales */
};

/* A stage: the activations (two atoms of BN·128 bytes), then the block's weights: 128 rows' 64 quant bytes, then
 * their group's 16 scale bytes (10 KB). A multiple of 1024 bytes for every NT, so every stage starts at the
 * swizzle's boundary. */
#define QG_WG_STAGE_BYTES(NT) (8 * (NT) * QG_KC * 2 + QG_BM * (QG_WG_Q_BYTES + QG_WG_S_BYTES))
static_assert(QG_WG_STAGE_BYTES(2) % 1024 == 0 && QG_WG_STAGE_BYTES(4) % 1024 == 0 && QG_WG_STAGE_BYTES(8) % 1024 == 0,
              "stages at 1024-byte boundaries");
template <int NT>
static constexpr size_t qg_wg_smem_bytes() { /* + 1024: the stages start at a 1024-byte boundary (the swizzle's) */
    return 1024 + ((size_t)QG_WG_STAGES * QG_WG_STAGE_BYTES(NT) > (size_t)8 * NT * QG_TS * 4
                       ? (size_t)QG_WG_STAGES * QG_WG_STAGE_BYTES(NT)
                       : (size_t)8 * NT * QG_TS * 4);
}

/* The TMA descriptors of a launch (host-encoded, kernel parameters): the input, and per matrix its quants and its
 * scales. */
struct QgMaps {
    CUtensorMap x;       /* f16 [n][K]: box 64 values x BN columns, 128-byte swizzle */
    CUtensorMap q[3];    /* bytes [rows][row_bytes]: box 64 bytes x QG_WG_HALF rows */
    CUtensorMap s[3];    /* the same bytes: box 16 x QG_WG_HALF */
};

/* 1 in the sm_90a image (where the kernel below has a body), 0 in any other; read once by the host. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define QG_WG_BUILT 1
#else
#define QG_WG_BUILT 0
#endif
__device__ int qg_wg_built = QG_WG_BUILT;

#if QG_WG_BUILT
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accumulators across the asynchronous wgmma (they are read and written by it). */
template <int NT>
__device__ __forceinline__ void wg_hold(float (&d)[1][NT][4]) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[0][j][e])::"memory");
}
/* The shared-memory descriptor of a K-major B with the 128-byte swizzle: bits 0-13 the address / 16, 16-29 LBO / 16
 * (unused by this layout: 1), 32-45 SBO / 16 (1024: the next 8 columns), 62-63 the swizzle (1: 128 bytes). */
__device__ __forceinline__ uint64_t wg_desc_sw128(uint32_t smem_addr) {
    return (uint64_t)((smem_addr >> 4) & 0x3FFF) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
#define QG_D4(j) "+f"(d[0][j][0]), "+f"(d[0][j][1]), "+f"(d[0][j][2]), "+f"(d[0][j][3])
/* d += A · B for the warpgroup's 64 rows and 8·NT columns, k16: A this warp's m16k16 fragment, B at desc. */
template <int NT>
__device__ __forceinline__ void wg_mma(float (&d)[1][NT][4], const uint32_t (&A)[4], uint64_t desc);
template <>
__device__ __forceinline__ void wg_mma<2>(float (&d)[1][2][4], const uint32_t (&A)[4], uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
                 "{%8, %9, %10, %11}, %12, 1, 1, 1, 0;"
                 : QG_D4(0), QG_D4(1)
                 : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(desc));
}
template <>
__device__ __forceinline__ void wg_mma<4>(float (&d)[1][4][4], const uint32_t (&A)[4], uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
                 "%11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, 1, 1, 1, 0;"
                 : QG_D4(0), QG_D4(1), QG_D4(2), QG_D4(3)
                 : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(desc));
}
template <>
__device__ __forceinline__ void wg_mma<8>(float (&d)[1][8][4], const uint32_t (&A)[4], uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
                 "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
                 "%31}, {%32, %33, %34, %35}, %36, 1, 1, 1, 0;"
                 : QG_D4(0), QG_D4(1), QG_D4(2), QG_D4(3), QG_D4(4), QG_D4(5), QG_D4(6), QG_D4(7)
                 : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(desc));
}
#undef QG_D4

/* mbarriers (shared-memory addresses) and TMA copies. */
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) { /* one arrival, `bytes` to come */
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) { /* until phase `parity` has completed */
    uint32_t done = 0;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* box (x, y) of the 2-D map m into shared memory at dst; its bytes complete on bar */
__device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap *m, int x, int y, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];"
                 ::"r"(dst), "l"((uint64_t)m), "r"(x), "r"(y), "r"(bar)
                 : "memory");
}
#endif

template <int NT>
__global__ void __launch_bounds__(QG_WG_THREADS, 2)
    qgemm_q4_0_wg_kernel(const __grid_constant__ QgArgs a, const __grid_constant__ QgMaps maps) {
#if QG_WG_BUILT
    extern __shared__ __align__(128) uint8_t qg_smem_raw[]; /* QG_WG_STAGES stages, then the output tile */
    __shared__ __align__(8) uint64_t bars[2 * QG_WG_STAGES]; /* full[s], then empty[s] */
    uint8_t *qg_smem = qg_smem_raw + ((1024 - ((uint32_t)__cvta_generic_to_shared(qg_smem_raw) & 1023)) & 1023);
    constexpr int BN = 8 * NT, X_BYTES = BN * QG_KC * 2, STAGE_BYTES = QG_WG_STAGE_BYTES(NT), S = QG_WG_STAGES;
    constexpr int Q_OFF = X_BYTES, S_OFF = X_BYTES + QG_BM * QG_WG_Q_BYTES; /* a stage's quants, scales */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int rb = blockIdx.x, n0 = blockIdx.y * BN, z = blockIdx.z;
    const int c0 = z * a.chunks_per_split, n_ch = min(a.n_chunks - c0, a.chunks_per_split);
    const uint32_t smem0 = (uint32_t)__cvta_generic_to_shared(qg_smem), bar0 = (uint32_t)__cvta_generic_to_shared(bars);
    auto full = [&](int s) { return bar0 + 8u * (uint32_t)s; };
    auto empty = [&](int s) { return bar0 + 8u * (uint32_t)(S + s); };
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) mbar_init(full(s), 1), mbar_init(empty(s), QG_WG_CONSUMERS / 32);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    float acc[1][NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[0][j][e] = 0.0f;

    if (warp == QG_WG_CONSUMERS / 32) { /* the producer */
        if (lane == 0) {
            /* each 64-row half of the block: its matrix and its first row there (qg_row: rows past the last matrix
             * fall past its end and read out of bounds, i.e. zeros) */
            int hm[2], hy[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int64_t row;
                (void)qg_row(a, rb, h * QG_WG_HALF, hm[h], row);
                hy[h] = (int)row;
            }
            auto copy_w = [&](int ch) { /* chunk ch's weights: quants 64·(chunk & 1) into its group, scales at 128 */
                const int c = c0 + ch, s = ch % S, gx = (c >> 1) * Q4_0_G8_BYTES;
                const uint32_t st = smem0 + (uint32_t)(s * STAGE_BYTES);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    tma_2d(st + Q_OFF + h * QG_WG_HALF * QG_WG_Q_BYTES, &maps.q[hm[h]], gx + QG_WG_Q_BYTES * (c & 1),
                           hy[h], full(s));
                    tma_2d(st + S_OFF + h * QG_WG_HALF * QG_WG_S_BYTES, &maps.s[hm[h]], gx + 2 * QG_WG_Q_BYTES, hy[h],
                           full(s));
                }
            };
            auto copy_x = [&](int ch) { /* chunk ch's activations: its two halves, one atom each */
                const int s = ch % S;
                const uint32_t st = smem0 + (uint32_t)(s * STAGE_BYTES);
                tma_2d(st, &maps.x, (c0 + ch) * QG_KC, n0, full(s));
                tma_2d(st + BN * 128, &maps.x, (c0 + ch) * QG_KC + QG_KC / 2, n0, full(s));
            };
            const int first = min(n_ch, S);
            for (int ch = 0; ch < first; ch++) {
                mbar_expect_tx(full(ch), STAGE_BYTES);
                copy_w(ch); /* immutable: requested before the wait */
            }
            gmc_pdl_wait();
            for (int ch = 0; ch < first; ch++) copy_x(ch);
            for (int ch = S; ch < n_ch; ch++) {
                const int s = ch % S;
                mbar_wait(empty(s), (uint32_t)(ch / S - 1) & 1); /* chunk ch - S has released the stage */
                mbar_expect_tx(full(s), STAGE_BYTES);
                copy_w(ch);
                copy_x(ch);
            }
        } else {
            gmc_pdl_wait();
        }
        __syncwarp();
    } else { /* the consumers */
        gmc_pdl_wait(); /* (the epilogue reads col_scale and mul, and writes y) */
        /* this lane's weights in a stage: block t of rows 16·warp + g and + 8, and their scales */
        const uint32_t wq_off = Q_OFF + (16 * warp + g) * QG_WG_Q_BYTES + 16 * t;
        const uint32_t ws_off = S_OFF + (16 * warp + g) * QG_WG_S_BYTES + 2 * t;
        /* half hc (steps 4hc .. 4hc + 3: words jw = 2hc, 2hc + 1, both nibble halves) of a chunk's A */
        auto dequant = [&](const QgW<1> &wc, int hc, uint32_t (&A)[4][4]) {
            const uint32_t dd0 = __byte_perm(wc.d[0], 0u, 0x1010), dd1 = __byte_perm(wc.d[0], 0u, 0x3232);
            const __half2 d0 = *(const __half2 *)&dd0, d1 = *(const __half2 *)&dd1;
#pragma unroll
            for (int sl = 0; sl < 4; sl++) {
                const int jw = 2 * hc + (sl >> 1), hh = sl & 1;
                const uint32_t w0 = jw == 0 ? wc.q[0][0].x : jw == 1 ? wc.q[0][0].y : jw == 2 ? wc.q[0][0].z : wc.q[0][0].w;
                const uint32_t w1 = jw == 0 ? wc.q[0][1].x : jw == 1 ? wc.q[0][1].y : jw == 2 ? wc.q[0][1].z : wc.q[0][1].w;
                q4_a_frag(w0, w1, hh, d0, d1, A[sl]);
            }
        };
        uint32_t A0[4][4], A1[4][4];
        for (int ch = 0; ch < n_ch; ch++) {
            const int s = ch % S;
            mbar_wait(full(s), (uint32_t)(ch / S) & 1); /* chunk ch is in */
            const uint8_t *stp = qg_smem + (size_t)s * STAGE_BYTES;
            const uint32_t so = ws_off + 8 * ((c0 + ch) & 1); /* the chunk's half of the group's scales */
            QgW<1> wc;
            wc.q[0][0] = *(const uint4 *)(stp + wq_off);
            wc.q[0][1] = *(const uint4 *)(stp + wq_off + 8 * QG_WG_Q_BYTES);
            wc.d[0] = (uint32_t) * (const uint16_t *)(stp + so) |
                      ((uint32_t) * (const uint16_t *)(stp + so + 8 * QG_WG_S_BYTES) << 16);
            const uint64_t desc0 = wg_desc_sw128(smem0 + (uint32_t)(s * STAGE_BYTES));
#pragma unroll
            for (int hc = 0; hc < 2; hc++) {
                uint32_t(&A)[4][4] = hc ? A1 : A0;
                wg_wait<1>(); /* the group that last read this register set (the previous chunk's same half) is done */
                if (hc == 1 && ch > 0 && lane == 0) mbar_arrive(empty((ch - 1) % S)); /* ... so chunk ch - 1's are */
                dequant(wc, hc, A);
                wg_hold<NT>(acc);
                wg_fence();
#pragma unroll
                for (int sl = 0; sl < 4; sl++) {
                    const int k = 4 * hc + sl; /* bytes 32k .. 32k + 31 of each column: atom k / 4, 32·(k % 4) into it */
                    wg_mma<NT>(acc, A[sl], desc0 + (uint64_t)((((k >> 2) * BN * 128) + 32 * (k & 3)) >> 4));
                }
                wg_commit();
                wg_hold<NT>(acc);
            }
        }
        wg_wait<0>();
        wg_hold<NT>(acc);
    }
    __syncthreads(); /* every copy consumed, every wgmma done: the stages become the output tile */
    qg_finish<NT, 1>(a, rb, n0, acc, qg_smem, QG_WG_CONSUMERS);
#endif
}

/* ---- host side ---- */
struct QgPlan {
    unsigned row_blocks, col_blocks, splits;
    int chunks_per_split;
};

/* A warpgroup block's fixed cost (its start, its epilogue) in chunk times, alone and when its cluster adds partial
 * tiles (qg_plan). */
enum { QG_WG_BLOCK_COST = 1, QG_WG_SPLIT_COST = 3 };

static int sm_count(void);

/* The warpgroup kernel of NT n-tiles made ready to launch (its shared memory asked for, once). */
template <int NT>
static void qg_wg_ready(void) {
    static bool opted = false;
    if (!opted) {
        cudaFuncSetAttribute(qgemm_q4_0_wg_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)qg_wg_smem_bytes<NT>());
        opted = true;
    }
}

/* Blocks of the warpgroup kernel of NT n-tiles resident at once on the current device in clusters of s (1: no
 * cluster); 0 when the runtime cannot tell. Cached. */
template <int NT>
static int64_t qg_wg_resident_nt(int s) {
    static int64_t cached[QG_MAX_SPLITS + 1] = {0};
    static int cached_dev[QG_MAX_SPLITS + 1];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || s < 1 || s > QG_MAX_SPLITS) return 0;
    if (cached[s] && cached_dev[s] == dev) return cached[s];
    qg_wg_ready<NT>();
    int n = 0;
    if (s == 1) {
        int per_sm = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, qgemm_q4_0_wg_kernel<NT>, QG_WG_THREADS,
                                                          qg_wg_smem_bytes<NT>()) == cudaSuccess)
            n = per_sm * sm_count();
    } else {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 1, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = (unsigned)s;
        cfg.gridDim = dim3(1, 1, (unsigned)s), cfg.blockDim = dim3(QG_WG_THREADS), cfg.dynamicSmemBytes = qg_wg_smem_bytes<NT>();
        cfg.attrs = attr, cfg.numAttrs = 1;
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, qgemm_q4_0_wg_kernel<NT>, &cfg) == cudaSuccess) n = clusters * s;
    }
    (void)cudaGetLastError(); /* a failed query leaves no error behind */
    cached[s] = n, cached_dev[s] = dev;
    return n;
}
static int64_t qg_wg_resident(int nt, int s) {
    return nt == 2 ? qg_wg_resident_nt<2>(s) : nt == 4 ? qg_wg_resident_nt<4>(s) : qg_wg_resident_nt<8>(s);
}

/* The current device's SMs (1 when unknown). */
static int sm_count(void) {
    static int cached[16] = {0};
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return 1;
    if (dev < 16 && cached[dev]) return cached[dev];
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v < 1) v = 1;
    if (dev < 16) cached[dev] = v;
    return v;
}

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

/* The split of K, at most QG_MAX_SPLITS (or as set), each split at least QG_MIN_CHUNKS chunks. The warp kernel:
 * enough blocks for two per SM of an H200 (QG_MIN_BLOCKS); it fits three an SM, so that is one wave. (Choosing its
 * count by whole waves × chunks per split measured slower: the GeGLU at 64 columns 50 -> 61 us with 3 splits
 * instead of 2.) The warpgroup kernel: the count with the least time in whole waves, waves × (chunks per split + a
 * block's fixed cost in chunk times), the waves counted from the clusters the device keeps resident at once
 * (cudaOccupancyMaxActiveClusters: clusters of 3 pack worse than of 2 or 4) and the fixed cost larger when the
 * blocks add their partial tiles up over the cluster (QG_WG_SPLIT_COST). Fitted to the H100 probe (bench/
 * cuda_mmq_probe, GEMMAC_CUDA_QGEMM_SPLITS 1-8): the GeGLU 2 x 10240 x 2560 at 64 columns took 33.4 us unsplit,
 * 34.1 in 2 splits, 43.3 in 3; the down projection (20 row blocks, K 10240) 27.3 in 8 splits, 37.0 in 4, 72.5 in 1.
 * Nsight Compute on the 3-split GeGLU put 48% of the warps' stall samples after the main loop (the cluster barriers
 * and the partial tiles read through distributed shared memory) and 10% before it. */
static QgPlan qg_plan(const gm_cuda_multi *m, int32_t n, int nt, bool wg) {
    QgPlan p = {};
    int64_t rows = 0;
    for (int i = 0; i < m->n_w; i++) rows += m->w[i].ne1;
    if (m->epi == GM_CUDA_EPI_GEGLU) rows = 2 * ((m->w[0].ne1 + QG_BM / 2 - 1) / (QG_BM / 2)) * (QG_BM / 2);
    p.row_blocks = (unsigned)((rows + QG_BM - 1) / QG_BM);
    p.col_blocks = (unsigned)((n + 8 * nt - 1) / (8 * nt));
    const int n_chunks = (int)(m->w[0].ne0 / QG_KC);
    const int64_t tiles = (int64_t)p.row_blocks * p.col_blocks;
    int splits = 1;
    if (wg && g_qgemm_max_splits > 1 && clusters_ok()) {
        int64_t best = INT64_MAX;
        for (int s = 1; s <= g_qgemm_max_splits && (s == 1 || s <= n_chunks / QG_MIN_CHUNKS); s++) {
            const int64_t tiles_at_once = qg_wg_resident(nt, s) / s; /* clusters of s blocks resident at once */
            const int64_t cost = (tiles + tiles_at_once - 1) / (tiles_at_once > 0 ? tiles_at_once : 1) *
                                 ((n_chunks + s - 1) / s + (s > 1 ? QG_WG_SPLIT_COST : QG_WG_BLOCK_COST));
            if (cost < best) best = cost, splits = s;
        }
    } else if (!wg && tiles < QG_MIN_BLOCKS && g_qgemm_max_splits > 1 && clusters_ok()) {
        splits = (int)((QG_MIN_BLOCKS + tiles - 1) / tiles);
        if (splits > g_qgemm_max_splits) splits = g_qgemm_max_splits;
        if (splits > n_chunks / QG_MIN_CHUNKS) splits = n_chunks / QG_MIN_CHUNKS;
        if (splits < 1) splits = 1;
    }
    p.chunks_per_split = (n_chunks + splits - 1) / splits;
    p.splits = (unsigned)((n_chunks + p.chunks_per_split - 1) / p.chunks_per_split); /* no empty split */
    return p;
}

/* The driver's tensor-map encoder (NULL where the driver has none). */
typedef CUresult (*QgEncodeFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                               const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                               CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static QgEncodeFn qg_encoder(void) {
    static QgEncodeFn fn = NULL;
    static bool asked = false;
    if (!asked) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (QgEncodeFn)p;
        (void)cudaGetLastError();
        asked = true;
    }
    return fn;
}

/* A 2-D map of dim1 rows of dim0 elements (stride1 bytes apart) at base, read in boxes of box0 x box1; false if the
 * driver refuses it. */
static bool qg_map_2d(CUtensorMap *m, CUtensorMapDataType type, const void *base, uint64_t dim0, uint64_t dim1,
                      uint64_t stride1, uint32_t box0, uint32_t box1, CUtensorMapSwizzle swizzle) {
    const QgEncodeFn enc = qg_encoder();
    const cuuint64_t dims[2] = {dim0, dim1}, strides[1] = {stride1};
    const cuuint32_t box[2] = {box0, box1}, elem[2] = {1, 1};
    return enc && enc(m, type, 2, (void *)base, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* Whether the warpgroup kernel takes m: each segment but the GeGLU's halves starts at a multiple of QG_WG_HALF rows
 * (a weight box's rows come from one matrix), and the driver encodes tensor maps. */
static bool qg_wg_fits(const gm_cuda_multi *m) {
    if (!qg_encoder()) return false;
    for (int i = 0; i < m->n_w; i++)
        if (m->w[i].ne1 > INT32_MAX || (m->epi != GM_CUDA_EPI_GEGLU && i + 1 < m->n_w && m->w[i].ne1 % QG_WG_HALF))
            return false;
    return true;
}

/* Whether a product of m at n columns runs on the warpgroup kernel (gm_cuda_set_qgemm_kernel), and the largest batch
 * the q4_0 kernels take (gm_cuda_set_qgemm_max_n). */
static bool qg_use_wg(const gm_cuda_multi *m, int32_t n) {
    return g_qgemm_wg != 0 && (g_qgemm_wg == 1 || n >= QG_WG_MIN_N) && gm_cuda_qgemm_wg_available() && qg_wg_fits(m);
}
static int qg_max_n(void) {
    if (g_qgemm_max_n >= 0) return g_qgemm_max_n;
    return g_qgemm_wg != 0 && gm_cuda_qgemm_wg_available() ? QG_MAX_N_WG_DEFAULT : QG_MAX_N_DEFAULT;
}

extern "C" int gm_cuda_qgemm_eligible(const gm_cuda_multi *m, int32_t n) {
    if (!m || m->n_w < 1 || m->n_w > 3 || n < GM_CUDA_GEMM_MIN_N || n > qg_max_n()) return 0;
    if (g_qgemm_max_n < 0 && n > QG_MAX_N_DEFAULT) { /* the default past 32 columns: large products only */
        uint64_t bytes = 0;
        for (int i = 0; i < m->n_w; i++) bytes += m->w[i].row_bytes * (uint64_t)m->w[i].ne1;
        if (bytes < QG_WG_BIG_BYTES) return 0;
    }
    int64_t rows = 0;
    for (int i = 0; i < m->n_w; i++) {
        const gm_cuda_mat *w = &m->w[i];
        if (w->type != GMC_Q4_0_G8 || w->ne0 != m->w[0].ne0 || w->ne0 % QG_KC || w->ne0 > (1 << 30) || w->ne1 < 1 ||
            w->row_bytes % 16 || (uintptr_t)w->data % 16) /* 16-byte loads of a block's quants */
            return 0;
        rows += w->ne1;
    }
    return (rows + QG_BM - 1) / QG_BM <= INT32_MAX; /* the grid's x */
}

template <int NT, int MT>
static void qg_launch(const QgPlan &p, const QgArgs &a, cudaStream_t st) {
    constexpr size_t smem = qg_smem_bytes<NT>();
    static bool opted = false;
    if (!opted) {
        cudaFuncSetAttribute(qgemm_q4_0_kernel<NT, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        opted = true;
    }
    gmc_launch_cluster(qgemm_q4_0_kernel<NT, MT>, dim3(p.row_blocks, p.col_blocks, p.splits), QgShape<MT>::THREADS, smem, st,
                       dim3(1, 1, p.splits), a);
}

/* The warpgroup kernel's launch, with its tensor maps: the input's (n columns of K values, boxes of 64 values x 8·NT
 * columns) and each matrix's (boxes of QG_WG_HALF rows). */
template <int NT>
static int qg_wg_launch(const QgPlan &p, const QgArgs &a, const gm_cuda_multi *m, cudaStream_t st) {
    constexpr size_t smem = qg_wg_smem_bytes<NT>();
    QgMaps maps;
    memset(&maps, 0, sizeof maps);
    bool ok = qg_map_2d(&maps.x, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, a.xh, (uint64_t)a.K, (uint64_t)a.n, (uint64_t)a.K * 2,
                        QG_KC / 2, 8 * NT, CU_TENSOR_MAP_SWIZZLE_128B);
    for (int i = 0; i < m->n_w && ok; i++) {
        const gm_cuda_mat *w = &m->w[i];
        ok = qg_map_2d(&maps.q[i], CU_TENSOR_MAP_DATA_TYPE_UINT8, w->data, w->row_bytes, (uint64_t)w->ne1, w->row_bytes,
                       QG_WG_Q_BYTES, QG_WG_HALF, CU_TENSOR_MAP_SWIZZLE_NONE) &&
             qg_map_2d(&maps.s[i], CU_TENSOR_MAP_DATA_TYPE_UINT8, w->data, w->row_bytes, (uint64_t)w->ne1, w->row_bytes,
                       QG_WG_S_BYTES, QG_WG_HALF, CU_TENSOR_MAP_SWIZZLE_NONE);
    }
    if (!ok) return gmc_fail(-1, "qgemm: the driver refused a tensor map");
    qg_wg_ready<NT>();
    gmc_launch_cluster(qgemm_q4_0_wg_kernel<NT>, dim3(p.row_blocks, p.col_blocks, p.splits), QG_WG_THREADS, smem, st,
                       dim3(1, 1, p.splits), a, maps);
    return gmc_check_launch("qgemm");
}

extern "C" int gm_cuda_qgemm_wg_available(void) {
    static int cached[16] = {0}; /* 0 unknown, 1 yes, 2 no */
    int dev = 0, major = 0, minor = 0, built = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return 0;
    if (dev < 16 && cached[dev]) return cached[dev] == 1;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
                    major == 9 && minor == 0 && cudaMemcpyFromSymbol(&built, qg_wg_built, sizeof built) == cudaSuccess &&
                    built == 1;
    (void)cudaGetLastError(); /* a failed query leaves no error behind */
    if (dev < 16) cached[dev] = ok ? 1 : 2;
    return ok;
}

extern "C" void gm_cuda_set_qgemm_kernel(int wg) { g_qgemm_wg = wg == 0 || wg == 1 ? wg : QG_WG_DEFAULT; }

extern "C" int gm_cuda_qgemm_act_order(const gm_cuda_multi *m, int32_t n) {
    return gm_cuda_qgemm_eligible(m, n) && qg_use_wg(m, n) ? GM_CUDA_ACT_ORDER_QG : GM_CUDA_ACT_ORDER_NATURAL;
}

extern "C" int gm_cuda_qgemm(const gm_cuda_multi *m, const void *xh, const float *col_scale, int32_t n,
                             gm_cuda_stream stream) {
    if (!gm_cuda_qgemm_eligible(m, n) || !xh || !col_scale || (uintptr_t)xh % 16 ||
        (m->epi == GM_CUDA_EPI_GEGLU && (m->n_w != 2 || m->w[1].ne1 != m->w[0].ne1 || !m->y[0])) ||
        (m->epi == GM_CUDA_EPI_GELU_MUL && (m->n_w != 1 || !m->mul)))
        return gmc_fail(-1, "qgemm: bad arguments");
    /* n-tiles a block: as many as n needs, up to the block's columns (8 n-tiles unless set) */
    const int bn = g_qgemm_block_cols ? g_qgemm_block_cols : QG_BN, need = (n < bn ? n + 7 : bn) / 8;
    const int nt = need <= 2 ? 2 : need <= 4 ? 4 : 8;
    const bool wg = qg_use_wg(m, n);
    const QgPlan p = qg_plan(m, n, nt, wg);
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
    const cudaStream_t st = (cudaStream_t)stream;
    if (wg)
        return nt == 2 ? qg_wg_launch<2>(p, a, m, st) : nt == 4 ? qg_wg_launch<4>(p, a, m, st)
                                                       : qg_wg_launch<8>(p, a, m, st);
    const int warp_rows = g_qgemm_warp_rows ? g_qgemm_warp_rows : 16;
    if (nt == 2) warp_rows == 16 ? qg_launch<2, 1>(p, a, st) : qg_launch<2, 2>(p, a, st);
    else if (nt == 4) warp_rows == 16 ? qg_launch<4, 1>(p, a, st) : qg_launch<4, 2>(p, a, st);
    else warp_rows == 16 ? qg_launch<8, 1>(p, a, st) : qg_launch<8, 2>(p, a, st);
    return gmc_check_launch("qgemm");
}
