/* mmq_cuda.cu: y[n][M] = x[n][K] · Wᵀ for q4_0 and q8_0 weights and 16..GM_CUDA_MMQ_MAX_N columns on the int8
 * tensor cores, the weights read straight from their GGUF blocks (never dequantized to f16): the batched-decoding
 * and short-batch path. Owns: the kernel, its eligibility and its knobs (largest batch, rows per block). The
 * activations come quantized to q8_0 blocks exactly as for the matvec (gm_cuda_prepare_act / gm_cuda_quantize_act:
 * int8 xq[n][K], float xd[n][K/32] at align16(n·K)), so every block's integer dot product is the CPU's and only the
 * float summation order differs. Also the MoE groups of q4_0 / q8_0 experts (gm_cuda_mmq_id, for
 * gm_cuda_matmul_id): a block's expert and columns from the group table, its weights at the expert's offset.
 * Leaves to others: which batches come here (gm_cuda_matmul_multi, gm_cuda_moe), longer dense batches
 * (gemm_cuda.cu: cuBLAS on f16).
 *
 * The shape: one mma.sync.m16n8k32 (s8 × s8 -> s32) per 32-value block: a block of K is exactly one q4_0 / q8_0
 * weight block and one q8_0 activation block, so its integer sum is scaled by d_w(row) · d_x(column) and added to
 * float accumulators. The q4_0 layout fits the A fragment as it is: lane (g, t) needs k = 4t..4t+3 and 16+4t..
 * of rows g and g+8, i.e. the low and the high nibbles of qs[4t..4t+3], one 32-bit word per row. A block of 8
 * warps owns 32 or 64 rows (16 per row warp; GEMMAC_CUDA_MMQ_ROWS) × 64 columns. Each K tile of 8 weight blocks
 * (256 values): the block's weight rows and the activations of its columns are copied into shared memory with
 * cp.async (coalesced, 2-4 tiles in flight), so the activations come from L2 once per block, not once per 16 rows;
 * the warps of a row group split the tile's blocks and add their sums at the end in a fixed order (deterministic).
 *
 * Cost (E4B q4_0, 64 columns, a decoding step): weights 2.2 GB read once -> ~0.5 ms at 4.6 TB/s; activations from
 * L2 once per row block (4× the weight bytes at 32 rows, 2× at 64: L2, not HBM); per mma (16 rows × 8 columns × 32
 * values) ~16 instructions: two B loads and a scale load, the mma, 4 int -> float conversions, 4 multiplies and 4
 * adds for the scales.
 * Measured (H200, 2026-12-02, BENCHMARKS.md "int8 tensor cores, second try"): correct (test_fused_proj: partial
 * tiles, unaligned rows, 1-3 column blocks) but still slower than dequantized f16 weights + cuBLAS except at 16
 * columns (o_proj 2560 × 2048: 11.7 us against 22.1 incl. the f16 conversion and epilogue; at 64 columns 19.7 against
 * 21.0; the GeGLU 85 against 44, down 91 against 41), and -npl 64 decodes 4.2k t/s against 7.25k. Nsight Compute
 * (the same pipeline on f16 activations): 1.6 instructions issued per SM cycle, 2 warps per scheduler (168
 * registers, 150 KB of shared memory), 61% of cycles with no eligible warp, mostly fixed-latency dependencies: a warp
 * owns one 16-row m-tile, so every mma pays its own B loads and scaling, ~6 instructions per mma. What it needs:
 * register blocking (a warp over 32-64 rows × 32-64 columns, ldmatrix), so that loads and scales are shared by
 * several mmas, as the fast GEMMs do. Off by default (gm_cuda_set_mmq_max_n, GEMMAC_CUDA_MMQ_MAX_N); for q4_0 /
 * q8_0 it is the path whose activations are the CPU's (q8_0), e.g. for prefill compared with the CPU backend.
 * History: the first version (2026-12-01; 16 rows per block, each warp loading its activations from L2 itself) read
 * ~14× the weight bytes from L2 (-npl 64: 1,858 t/s). */
#include "common_cuda.cuh"

/* Block: MMQ_WARPS warps over a tile of WR·16 rows × MMQ_BN columns (WR: the template's row warps, 2 or 4):
 * WK = MMQ_WARPS / WR warps split each K tile of MMQ_KT blocks (warp wk takes blocks wk, wk + WK, ...). */
enum {
    MMQ_WARPS = 8, MMQ_BN = 64, MMQ_NF = MMQ_BN / 8, MMQ_KT = 8,
    MMQ_XS = MMQ_KT * 32 + 16, /* bytes per column in the tile (padded) */
    MMQ_MIN_N = GM_CUDA_MMQ_MIN_N, MMQ_MAX_N_DEFAULT = 0, MMQ_ROWS_DEFAULT = 32,
    MMQ_SMEM_MAX = 220 * 1024 /* shared memory of a block's pipeline stages */
};

static int g_mmq_max_n = MMQ_MAX_N_DEFAULT, g_mmq_rows = MMQ_ROWS_DEFAULT;

extern "C" void gm_cuda_set_mmq_max_n(int n) { g_mmq_max_n = n >= 0 ? n : MMQ_MAX_N_DEFAULT; }
extern "C" void gm_cuda_set_mmq_rows(int rows) { g_mmq_rows = rows == 32 || rows == 64 ? rows : MMQ_ROWS_DEFAULT; }

struct MmqArgs {
    const uint8_t *W[3];
    uint64_t row_bytes[3];
    int64_t M[3];
    float *y[3];
    int64_t ldy[3];
    unsigned blk_end[3]; /* cumulative row blocks per segment (GeGLU: one range for both halves) */
    int n_seg;
    const float *mul;
    /* MoE groups (gm_cuda_mmq_id): blockIdx.x is group i = columns gcol[2i] .. + gcol[2i+1] - 1 through expert
     * eid[i], whose rows are e_bytes · eid[i] after W's; gcol NULL: blockIdx.x is 64 columns from 64 · blockIdx.x */
    const int32_t *eid, *gcol;
    uint64_t e_bytes;
};

/* The 32-bit word at p in shared memory, p only 2-byte aligned (two 16-bit loads). */
__device__ __forceinline__ uint32_t lds_word_a2(const uint8_t *p) {
    return (uint32_t)*(const uint16_t *)p | (uint32_t)*(const uint16_t *)(p + 2) << 16;
}

/* The A fragment of the weight block at b (rows g) and b8 (rows g + 8) in the block's weight tile, for lane t:
 * a0/a1: k = 4t..4t+3 of rows g / g+8, a2/a3: k = 16+4t.. of them; d0 / d1 the two rows' block scales. The q4_0
 * nibbles fit the fragment as stored: the low nibbles of qs[4t..4t+3] are k = 4t.., the high ones 16+4t.. */
template <int TYPE>
__device__ __forceinline__ void frag_a(const uint8_t *b, const uint8_t *b8, int t, uint32_t a[4], float &d0, float &d1) {
    if constexpr (TYPE == GMC_Q4_0) {
        const uint32_t w0 = lds_word_a2(b + 2 + 4 * t), w1 = lds_word_a2(b8 + 2 + 4 * t);
        a[0] = __vsub4(w0 & 0x0F0F0F0Fu, 0x08080808u);
        a[1] = __vsub4(w1 & 0x0F0F0F0Fu, 0x08080808u);
        a[2] = __vsub4((w0 >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        a[3] = __vsub4((w1 >> 4) & 0x0F0F0F0Fu, 0x08080808u);
    } else { /* q8_0 */
        a[0] = lds_word_a2(b + 2 + 4 * t), a[1] = lds_word_a2(b8 + 2 + 4 * t);
        a[2] = lds_word_a2(b + 18 + 4 * t), a[3] = lds_word_a2(b8 + 18 + 4 * t);
    }
    d0 = __half2float(*(const __half *)b), d1 = __half2float(*(const __half *)b8);
}

/* One K tile of activations in shared memory: the int8 values of MMQ_BN columns (column c at xs[c], MMQ_XS
 * bytes apart: 68 words, so the 8 columns × 4 lanes of a B fragment load hit 32 different banks) and their block
 * scales (ds[kb][c]). */
struct MmqTile {
    int8_t xs[MMQ_BN][MMQ_XS];
    float ds[MMQ_KT][MMQ_BN];
};
/* The partial sums warps hand over in the reduction across the MMQ_WARPS / WR warps of a row group. */
template <int NE, int WR>
struct MmqRed {
    float v[MMQ_WARPS / WR / 2][WR][NE][32];
};

/* Tile kt of the block's nv columns (n0 .., nv <= MMQ_BN; the tile's other columns keep whatever they held: an
 * output column reads only its own activations, and those columns are never stored; blocks past nkb read zeros)
 * into tl, by every thread of the block: 16-byte pieces of the values, 4-byte scales, all cp.async. */
__device__ __forceinline__ void mmq_load_tile(MmqTile *tl, const int8_t *__restrict__ xq, const float *__restrict__ xd,
                                              int K, int nkb, int nv, int n0, int kt) {
    constexpr int PIECES = MMQ_KT * 2; /* 16-byte pieces per column */
    const int kb0 = kt * MMQ_KT;
    for (int i = threadIdx.x; i < nv * PIECES; i += MMQ_WARPS * 32) {
        const int c = i / PIECES, p = i % PIECES, kb = kb0 + p / 2;
        const bool in = kb < nkb;
        cp_async16(&tl->xs[c][16 * p], in ? xq + (size_t)(n0 + c) * K + (size_t)kb0 * 32 + 16 * p : xq, in ? 16 : 0);
    }
    for (int i = threadIdx.x; i < MMQ_KT * MMQ_BN; i += MMQ_WARPS * 32) {
        const int kb = i / MMQ_BN, c = i % MMQ_BN;
        const bool in = kb0 + kb < nkb;
        if (c < nv) cp_async4(&tl->ds[kb][c], in ? xd + (size_t)(n0 + c) * nkb + kb0 + kb : xd, in ? 4 : 0);
    }
}

/* The weights of tile kt for rows mb .. mb + BM - 1 of the NA matrices W[i] (rows of rb[i] bytes; rows past M repeat
 * row M - 1) into at[i][r][0 .. MMQ_KT · BB) (BB: bytes per weight block), by every thread of the block: 16-byte cp.async pieces when
 * every row starts 16-byte aligned (a16), else 4-byte ones; bytes past the row's nkb blocks are zero-filled, never
 * read. */
template <int BB, int NA, int BM>
__device__ __forceinline__ void mmq_load_w(uint8_t *at, const uint8_t *const (&W)[NA], const uint64_t (&rb)[NA],
                                           int64_t mb, int64_t M, int nkb, int kt, bool a16) {
    constexpr int RB = MMQ_KT * BB; /* bytes per row in a tile */
    const int valid = min(MMQ_KT, nkb - kt * MMQ_KT) * BB;
    const size_t off = (size_t)kt * RB;
    auto row = [&](int r) { /* no indexing of W / rb by a variable: they stay in registers */
        const bool hi = NA > 1 && r >= BM;
        return (hi ? W[NA - 1] : W[0]) + (uint64_t)min(mb + (hi ? r - BM : r), M - 1) * (hi ? rb[NA - 1] : rb[0]) + off;
    };
    if (a16) {
        constexpr int P = RB / 16;
        static_assert(RB % 16 == 0, "16-byte pieces");
        for (int i = threadIdx.x; i < NA * BM * P; i += MMQ_WARPS * 32) {
            const int r = i / P, p = i % P, nb = min(16, max(0, valid - 16 * p));
            cp_async16(at + (size_t)r * RB + 16 * p, nb ? row(r) + 16 * p : W[0], nb);
        }
    } else {
        constexpr int P = RB / 4;
        for (int i = threadIdx.x; i < NA * BM * P; i += MMQ_WARPS * 32) {
            const int r = i / P, p = i % P, nb = min(4, max(0, valid - 4 * p));
            cp_async4(at + (size_t)r * RB + 4 * p, nb ? row(r) + 4 * p : W[0], nb);
        }
    }
}

/* Weight block kl of the tile (w: its row g in the weight tile, rows RB bytes apart, the NA matrices BM rows
 * apart) times the tile's first nf fragments of 8 columns, added to acc: one mma per (matrix, fragment), its integer
 * sums scaled by d_w · d_x; the B fragments and scales of all nf fragments are loaded first, then the products. */
template <int TYPE, int NA, int BM, int RB>
__device__ __forceinline__ void mmq_block(float (&acc)[NA][MMQ_NF][4], const MmqTile &tl, const uint8_t *w, int kl,
                                          int g, int t, int nf) {
    constexpr int BB = TYPE == GMC_Q4_0 ? Q4_0_BYTES : Q8_0_BYTES;
    uint32_t A[NA][4];
    float dA[NA][2];
#pragma unroll
    for (int i = 0; i < NA; i++) {
        const uint8_t *b = w + (size_t)i * BM * RB + BB * kl;
        frag_a<TYPE>(b, b + 8 * RB, t, A[i], dA[i][0], dA[i][1]);
    }
    uint32_t B[MMQ_NF][2];
    float2 xs[MMQ_NF];
#pragma unroll
    for (int j = 0; j < MMQ_NF; j++) {
        if (j >= nf) break;
        const uint32_t *xw = (const uint32_t *)&tl.xs[8 * j + g][32 * kl];
        B[j][0] = xw[t], B[j][1] = xw[4 + t];
        xs[j] = *(const float2 *)&tl.ds[kl][8 * j + 2 * t];
    }
#pragma unroll
    for (int j = 0; j < MMQ_NF; j++) {
        if (j >= nf) break;
#pragma unroll
        for (int i = 0; i < NA; i++) {
            int c[4] = {0, 0, 0, 0};
            mma_s8(c, A[i], B[j][0], B[j][1]);
            acc[i][j][0] = fmaf((float)c[0], dA[i][0] * xs[j].x, acc[i][j][0]);
            acc[i][j][1] = fmaf((float)c[1], dA[i][0] * xs[j].y, acc[i][j][1]);
            acc[i][j][2] = fmaf((float)c[2], dA[i][1] * xs[j].x, acc[i][j][2]);
            acc[i][j][3] = fmaf((float)c[3], dA[i][1] * xs[j].y, acc[i][j][3]);
        }
    }
}

/* Shared memory of one pipeline stage (an activation tile, then the tile's NA × 16·WR weight rows, 16-byte aligned)
 * and the stages a block keeps: as many as fit in MMQ_SMEM_MAX, 2 to 4. */
template <int TYPE, int NA, int WR>
__host__ __device__ constexpr size_t mmq_stage_bytes() {
    return (sizeof(MmqTile) + (size_t)NA * 16 * WR * MMQ_KT * (TYPE == GMC_Q4_0 ? Q4_0_BYTES : Q8_0_BYTES) + 15) / 16 * 16;
}
template <int TYPE, int NA, int WR>
__host__ __device__ constexpr int mmq_stages() {
    return MMQ_SMEM_MAX / mmq_stage_bytes<TYPE, NA, WR>() >= 4   ? 4
           : MMQ_SMEM_MAX / mmq_stage_bytes<TYPE, NA, WR>() >= 3 ? 3
                                                                 : 2;
}

/* Grid: (column blocks of MMQ_BN, row blocks of all segments): the blocks of one row block run side by side, so
 * their weights come from L2 after the first. Block: MMQ_WARPS warps, warp (wr = warp % WR, wk = warp / WR):
 * rows wr·16 .. +15 of the block, tile blocks wk, wk + WK, ... of every K tile. Each K tile's activations and
 * weights are copied into shared memory with cp.async (coalesced), STAGES tiles deep: while tile kt is multiplied,
 * tiles kt + 1 .. kt + STAGES - 1 are in flight (nothing else is in flight across the barrier, so it never waits for
 * a load); one barrier per tile. At the end the WK partial sums of each row group are added pairwise in a fixed
 * order (deterministic) through the tiles' space, then warps wk = 0 apply the epilogue and store: lane (g, t) holds
 * rows g (e < 2) and g + 8 (e >= 2), columns 2t and 2t + 1 of each 8-column fragment. a16: every row of every
 * matrix starts 16-byte aligned. */
template <int TYPE, int EPI, int WR>
__global__ void __launch_bounds__(MMQ_WARPS * 32, 1) mmq_kernel(const __grid_constant__ MmqArgs a, int K, int n,
                                                             const int8_t *__restrict__ xq,
                                                             const float *__restrict__ xd, int a16) {
    constexpr int NA = EPI == GM_CUDA_EPI_GEGLU ? 2 : 1; /* weight tiles: the GeGLU's gate and up rows */
    constexpr int NE = NA * MMQ_NF * 4;                 /* accumulators per lane */
    constexpr int WK = MMQ_WARPS / WR, KPW = MMQ_KT / WK, BM = 16 * WR;
    constexpr int BB = TYPE == GMC_Q4_0 ? Q4_0_BYTES : Q8_0_BYTES, RB = MMQ_KT * BB;
    constexpr size_t SB = mmq_stage_bytes<TYPE, NA, WR>();
    constexpr int STAGES = mmq_stages<TYPE, NA, WR>();
    static_assert(sizeof(MmqRed<NE, WR>) <= STAGES * SB && MMQ_KT % WK == 0, "tile shape");
    extern __shared__ __align__(16) uint8_t mmq_smem[];
    auto tile = [&](int st) { return (MmqTile *)(mmq_smem + st * SB); };
    auto wtile = [&](int st) { return mmq_smem + st * SB + sizeof(MmqTile); }; /* [NA][BM][RB] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wr = warp % WR, wk = warp / WR;
    unsigned blk = blockIdx.y;
    int s = 0;
    if (EPI != GM_CUDA_EPI_GEGLU)
        while (s + 1 < a.n_seg && blk >= a.blk_end[s]) s++;
    if (s) blk -= a.blk_end[s - 1];
    const int64_t M = a.M[s], mb = (int64_t)blk * BM;
    const uint8_t *W[NA];
    uint64_t rb[NA];
#pragma unroll
    for (int i = 0; i < NA; i++) {
        const int sg = EPI == GM_CUDA_EPI_GEGLU ? i : s;
        W[i] = a.W[sg], rb[i] = a.row_bytes[sg];
    }
    const int nkb = K / 32, n_tiles = (nkb + MMQ_KT - 1) / MMQ_KT;
    int n0 = blockIdx.x * MMQ_BN, nv = min(MMQ_BN, n - n0); /* the block's columns */
    if (a.gcol) { /* a MoE group: its expert and columns are the previous kernel's output, read after the wait */
        gmc_pdl_wait();
        n0 = a.gcol[2 * blockIdx.x], nv = a.gcol[2 * blockIdx.x + 1];
        if (nv <= 0) return;
        const uint64_t off = (uint64_t)a.eid[blockIdx.x] * a.e_bytes;
#pragma unroll
        for (int i = 0; i < NA; i++) W[i] += off;
    }
    const int nf = (nv + 7) / 8; /* 8-column fragments */

    float acc[NA][MMQ_NF][4];
#pragma unroll
    for (int i = 0; i < NA; i++)
#pragma unroll
        for (int j = 0; j < MMQ_NF; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    /* the first STAGES - 1 tiles: weights before the wait (immutable), activations after it; a copy group each
     * (the weights all in the first) */
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++)
        if (st < n_tiles) mmq_load_w<BB, NA, BM>(wtile(st), W, rb, mb, M, nkb, st, a16);
    gmc_pdl_wait();
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < n_tiles) mmq_load_tile(tile(st), xq, xd, K, nkb, nv, n0, st);
        cp_async_commit();
    }
    for (int kt = 0; kt < n_tiles; kt++) {
        cp_async_wait<STAGES - 2>(); /* tile kt's group is done (this thread's copies) */
        __syncthreads();             /* everyone's copies of tile kt visible; everyone done with tile kt - 1 */
        const int nt = kt + STAGES - 1, ns = nt % STAGES; /* into the stage tile kt - 1 used */
        if (nt < n_tiles) {
            mmq_load_w<BB, NA, BM>(wtile(ns), W, rb, mb, M, nkb, nt, a16);
            mmq_load_tile(tile(ns), xq, xd, K, nkb, nv, n0, nt);
        }
        cp_async_commit(); /* possibly empty: the wait count above stays right */
        const int cs = kt % STAGES;
        const uint8_t *w0 = wtile(cs) + (size_t)(16 * wr + g) * RB;
#pragma unroll
        for (int u = 0; u < KPW; u++) {
            const int kl = wk + WK * u; /* block within the tile */
            if (kt * MMQ_KT + kl >= nkb) break;
            mmq_block<TYPE, NA, BM, RB>(acc, *tile(cs), w0, kl, g, t, nf);
        }
    }
    cp_async_wait<0>();
    __syncthreads(); /* every warp done with the tiles: the reduction reuses their space */

    MmqRed<NE, WR> *red = (MmqRed<NE, WR> *)mmq_smem;
    for (int half = WK / 2; half >= 1; half /= 2) {
        if (wk >= half && wk < 2 * half) {
#pragma unroll
            for (int i = 0; i < NA; i++)
#pragma unroll
                for (int j = 0; j < MMQ_NF; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) red->v[wk - half][wr][(i * MMQ_NF + j) * 4 + e][lane] = acc[i][j][e];
        }
        __syncthreads();
        if (wk < half) {
#pragma unroll
            for (int i = 0; i < NA; i++)
#pragma unroll
                for (int j = 0; j < MMQ_NF; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[i][j][e] += red->v[wk][wr][(i * MMQ_NF + j) * 4 + e][lane];
        }
        __syncthreads();
    }
    if (wk != 0) return;
    const int64_t ldy = a.ldy[s];
    float *y = a.y[s];
#pragma unroll
    for (int j = 0; j < MMQ_NF; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int64_t row = mb + 16 * wr + g + (e >= 2 ? 8 : 0);
            const int col = n0 + 8 * j + 2 * t + (e & 1);
            if (row >= M || col - n0 >= nv) continue;
            float v = acc[0][j][e];
            if (EPI == GM_CUDA_EPI_GEGLU) v = __fmul_rn(gmc_gelu_tanh(v), acc[NA - 1][j][e]);
            if (EPI == GM_CUDA_EPI_GELU_MUL) v = __fmul_rn(gmc_gelu_tanh(v), a.mul[(size_t)col * ldy + row]);
            y[(size_t)col * ldy + row] = v;
        }
}

extern "C" int gm_cuda_mmq_takes(const gm_cuda_mat *w) {
    return w && (w->type == GMC_Q4_0 || w->type == GMC_Q8_0) && w->ne0 % 32 == 0 && w->ne1 >= 1 &&
           w->row_bytes % 4 == 0 && (uintptr_t)w->data % 4 == 0;
}

/* The matrices the kernel takes: q4_0 or q8_0, one type and width, rows of 4-byte words. */
static int mmq_shape_ok(const gm_cuda_multi *m) {
    if (!m || m->n_w < 1 || m->n_w > 3) return 0;
    const int32_t type = m->w[0].type;
    if (type != GMC_Q4_0 && type != GMC_Q8_0) return 0;
    for (int i = 0; i < m->n_w; i++)
        if (m->w[i].type != type || m->w[i].ne0 != m->w[0].ne0 || m->w[i].ne0 % 32 || m->w[i].ne1 < 1 ||
            m->w[i].row_bytes % 4 || (uintptr_t)m->w[i].data % 4) /* the weight tiles' cp.async takes 4-byte words */
            return 0;
    return 1;
}

extern "C" int gm_cuda_mmq_eligible(const gm_cuda_multi *m, int32_t n) {
    return n >= MMQ_MIN_N && n <= g_mmq_max_n && mmq_shape_ok(m);
}

/* One launch of the (TYPE, EPI, WR) kernel with its shared memory (above the 48 KiB default: opted into once). */
template <int TYPE, int EPI, int WR>
static void mmq_launch(dim3 grid, cudaStream_t st, const MmqArgs &a, int K, int n, const int8_t *xq, const float *xd,
                       int a16) {
    constexpr int NA = EPI == GM_CUDA_EPI_GEGLU ? 2 : 1;
    constexpr size_t smem = mmq_stages<TYPE, NA, WR>() * mmq_stage_bytes<TYPE, NA, WR>();
    static bool opted = false;
    if (!opted) {
        cudaFuncSetAttribute(mmq_kernel<TYPE, EPI, WR>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        opted = true;
    }
    gmc_launch(mmq_kernel<TYPE, EPI, WR>, grid, MMQ_WARPS * 32, smem, st, a, K, n, xq, xd, a16);
}

/* The launch of m over n columns of act: 64-column blocks, or MoE groups when moe (eid, gcol, e_bytes set). */
static int mmq_run(const gm_cuda_multi *m, const void *act, int32_t n, const MmqArgs *moe, int32_t n_groups,
                   cudaStream_t st) {
    const int K = (int)m->w[0].ne0, bm = g_mmq_rows;
    MmqArgs a = {};
    if (moe) a.eid = moe->eid, a.gcol = moe->gcol, a.e_bytes = moe->e_bytes;
    a.n_seg = m->epi == GM_CUDA_EPI_GEGLU ? 1 : m->n_w, a.mul = m->mul;
    unsigned blocks = 0;
    int a16 = !moe || moe->e_bytes % 16 == 0;
    for (int i = 0; i < m->n_w; i++) {
        a16 = a16 && m->w[i].row_bytes % 16 == 0 && (uintptr_t)m->w[i].data % 16 == 0;
        a.W[i] = (const uint8_t *)m->w[i].data, a.row_bytes[i] = m->w[i].row_bytes, a.M[i] = m->w[i].ne1;
        a.y[i] = m->y[i], a.ldy[i] = m->w[i].ne1;
        if (i < a.n_seg) a.blk_end[i] = blocks += (unsigned)((m->w[i].ne1 + bm - 1) / bm);
    }
    if (blocks > 65535) return gmc_fail(-1, "mmq: %u row blocks (65535 at most)", blocks);
    if (m->epi == GM_CUDA_EPI_GEGLU) a.y[1] = m->y[0], a.ldy[1] = a.ldy[0]; /* one output for both halves */
    const int8_t *xq = (const int8_t *)act;
    const float *xd = (const float *)((const uint8_t *)act + (((size_t)n * K + 15) & ~(size_t)15));
    const dim3 grid(moe ? (unsigned)n_groups : (unsigned)((n + MMQ_BN - 1) / MMQ_BN), blocks);
#define GMC_MMQ_WR(T, E)                                                                                        \
    if (bm == 32) mmq_launch<T, E, 2>(grid, st, a, K, n, xq, xd, a16);                                          \
    else mmq_launch<T, E, 4>(grid, st, a, K, n, xq, xd, a16);
#define GMC_MMQ(T)                                                                                              \
    switch (m->epi) {                                                                                           \
    case GM_CUDA_EPI_GEGLU: GMC_MMQ_WR(T, GM_CUDA_EPI_GEGLU) break;                                          \
    case GM_CUDA_EPI_GELU_MUL: GMC_MMQ_WR(T, GM_CUDA_EPI_GELU_MUL) break;                                    \
    default: GMC_MMQ_WR(T, GM_CUDA_EPI_STORE) break;                                                         \
    }
    if (m->w[0].type == GMC_Q4_0) GMC_MMQ(GMC_Q4_0) else GMC_MMQ(GMC_Q8_0)
#undef GMC_MMQ
#undef GMC_MMQ_WR
    return gmc_check_launch("mmq");
}

static bool mmq_args_ok(const gm_cuda_multi *m, const void *act) {
    return act && !((uintptr_t)act & 15) && !(m->epi == GM_CUDA_EPI_GEGLU && (m->n_w != 2 || m->w[1].ne1 != m->w[0].ne1)) &&
           !(m->epi == GM_CUDA_EPI_GELU_MUL && (m->n_w != 1 || !m->mul));
}

extern "C" int gm_cuda_mmq_multi(const gm_cuda_multi *m, const void *act, int32_t n, gm_cuda_stream stream) {
    if (!gm_cuda_mmq_eligible(m, n) || !mmq_args_ok(m, act)) return gmc_fail(-1, "mmq: bad arguments");
    return mmq_run(m, act, n, NULL, 0, (cudaStream_t)stream);
}

extern "C" int gm_cuda_mmq_id(const gm_cuda_multi *m, uint64_t expert_bytes, const int32_t *eid, const int32_t *gcol,
                              int32_t n_groups, const void *act, int32_t n, gm_cuda_stream stream) {
    if (!mmq_shape_ok(m) || !mmq_args_ok(m, act) || !eid || !gcol || n <= 0 || n_groups <= 0 || n_groups > 65535 ||
        expert_bytes % 4 || m->epi == GM_CUDA_EPI_GELU_MUL)
        return gmc_fail(-1, "mmq_id: bad arguments");
    MmqArgs moe = {};
    moe.eid = eid, moe.gcol = gcol, moe.e_bytes = expert_bytes;
    return mmq_run(m, act, n, &moe, n_groups, (cudaStream_t)stream);
}
