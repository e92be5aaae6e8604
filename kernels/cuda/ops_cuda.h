/* ops_cuda.h: the CUDA backend's ops as plain C functions (usable from C11 files), one per op of
 * src/model/backend.h plus the pieces a graph of ops needs (activation quantization, KV store). Every pointer
 * is DEVICE memory unless said otherwise; every call only enqueues work on `stream` (NULL: the legacy default
 * stream) and returns 0, or a non-zero code (a cudaError_t, or -1 for bad arguments) with a one-line message
 * in gm_cuda_last_error(). The backend table (gm_backend_ops) that calls these lives elsewhere. */
#ifndef GM_OPS_CUDA_H
#define GM_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;                        /* cudaStream_t is a struct CUstream_st * */
typedef struct CUstream_st *gm_cuda_stream;

/* A weight matrix (or table) as uploaded verbatim from the GGUF file: ne0 elements per row (the input dim
 * of a matmul), ne1 rows, rows row_bytes apart. type is the GGML type number (src/quant/quant.h). Supported:
 * F32 0, F16 1, Q4_0 2, Q5_0 6, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, BF16 30. The allocation must be readable for
 * 16 bytes past the last row (the unaligned-block loads of q4_0 / q5_0 / q8_0 / q6_K may read up to 3 bytes
 * beyond). */
typedef struct gm_cuda_mat {
    int32_t type;
    int64_t ne0, ne1;
    uint64_t row_bytes;
    const void *data;
    const void *f16;  /* optional: the rows as dense f16 [ne1][ne0] (gm_cuda_gemm_weights_f16), read by the
                         tensor-core path instead of dequantizing data again; NULL: none */
} gm_cuda_mat;

/* ---- device and errors ---- */
/* Number of CUDA devices (0 when none or when the runtime fails; the reason is in gm_cuda_last_error()). */
int gm_cuda_device_count(void);
/* The last error of this thread's calls into this API ("" if none). */
const char *gm_cuda_last_error(void);
/* 1 when the matmul / get_rows kernels handle this GGML type (or device layout, below). */
int gm_cuda_type_supported(int32_t type);

/* ---- device layouts ----
 * A weight of some GGUF types is uploaded re-laid, so that the kernels read it with aligned wide loads: q6_K (14)
 * becomes GMC_Q6_K_A16 (0x10e): each 210-byte block at a 224-byte stride (16-byte aligned; the same fields at
 * the same offsets, then 14 zero bytes). The q6_K GGUF blocks are only 2-byte aligned, so their loads go in
 * 16-bit pieces: the LM head (the largest q6_K matrix) is instruction-bound on them. q4_0 (2) becomes GMC_Q4_0_G8
 * (0x102): each group of 8 blocks as their 8 × 16 quant bytes, then their 8 f16 scales (144 bytes, as many as the
 * GGUF's; a row's last partial group padded to whole size), so that a block's quants are one aligned 16-byte load
 * instead of five 4-byte loads and shifts. Expert matrices (3-D) stay q4_0 (the backend's choice: the int8 kernel of
 * MoE batches reads GGUF blocks only). The int8 and f16 tensor-core kernels of q4_0 products (mmq, qgemm, both off by
 * default) do not take GMC_Q4_0_G8. Every other kernel that takes q6_K or q4_0 takes the re-laid type too, with the
 * same results. gm_cuda_device_type: the type a weight of `type` is
 * stored as (type itself when it is not re-laid, or when gm_cuda_set_device_layouts(0) switched re-laying off);
 * gm_cuda_device_row_bytes: a re-laid row's bytes (0 for a type that is not a device layout or a row of partial
 * blocks); gm_cuda_relayout: n_rows host rows (src_row_bytes apart) into dst (host memory,
 * gm_cuda_device_row_bytes per row). */
int32_t gm_cuda_device_type(int32_t type);
uint64_t gm_cuda_device_row_bytes(int32_t dtype, int64_t ne0);
int gm_cuda_relayout(int32_t dtype, int64_t ne0, int64_t n_rows, const void *src, uint64_t src_row_bytes, void *dst);
void gm_cuda_set_device_layouts(int on);

/* ---- matmul: y[n][ne1] = x[n][ne0] · Wᵀ ----
 * Quantized weights: activations are first quantized on the GPU exactly as the CPU backend quantizes them
 * (the weight type's vec_dot_type, src/quant/quant.h; bit-identical to kernels/ref's quantize_act): q8_0
 * (blocks of 32, d = f16(amax/127), q = round-half-even(x·127/amax)) for q4_0 / q5_0 / q8_0 weights, q8_K
 * (blocks of 256, d = max/-127 of the signed value of largest |x|, q = round-half-even(x·(-127/max))) for
 * q4_K / q5_K / q6_K; weight blocks are consumed with integer dot products (dp4a) straight from the GGUF
 * layout, so every integer block sum equals the CPU's and only the float summation order differs.
 * F32/F16/BF16 weights: f32 activations, f32 FMA.
 * Columns are processed 8 at a time (n > 8 re-reads the weights once per 8 columns; the backend sends batches
 * of GM_CUDA_GEMM_MIN_N or more columns to the tensor-core path, gm_cuda_gemm_multi, instead).
 * scratch: gm_cuda_matmul_scratch_bytes(ne0, n) bytes (may be NULL when 0). */
size_t gm_cuda_matmul_scratch_bytes(int64_t ne0, int32_t n);
int gm_cuda_matmul(const gm_cuda_mat *w, const float *x, int32_t n, float *y, void *scratch, size_t scratch_bytes,
                   gm_cuda_stream stream);
/* The activation type (GGML number: 8 = q8_0, 15 = q8_K) a quantized weight type takes; -1 for the others. */
int gm_cuda_act_type(int32_t wtype);
/* The two halves of gm_cuda_matmul for quantized weights, so one quantized activation can feed several
 * matrices of the same input and activation type (Q, K, V; gate, up). act_type: gm_cuda_act_type of the
 * weights that will read it. xq: gm_cuda_matmul_scratch_bytes(K, n) bytes, laid out as int8 q[n][K], then at
 * byte (n·K + 15) / 16 · 16 the f32 block scales d[n][K / QK] (QK 32 for q8_0, 256 for q8_K; a q8_0 d is the
 * f16 value widened). The CPU block's q8_K bsums are not stored (the kernels sum the q themselves). */
int gm_cuda_quantize_act(const float *x, int64_t K, int32_t n, int32_t act_type, void *xq, gm_cuda_stream stream);
int gm_cuda_matmul_q(const gm_cuda_mat *w, const void *xq, int32_t n, float *y, gm_cuda_stream stream);
/* The input of a projection, prepared in one launch (one block per row of K): first, when res_add is not NULL,
 * the residual update x += rmsnorm(res_add) · res_w (as gm_cuda_rmsnorm_add; res_w NULL: no weight), then
 * x *= res_scale unless it is 1 (as gm_cuda_scale), x written back; then x' = rmsnorm(x) · w when norm (w NULL:
 * no weight; as gm_cuda_rmsnorm), else x' = x (w unused); then x' quantized as gm_cuda_quantize_act into out (act_type 8 or
 * 15), or, act_type -1, stored as f32 [n][K] in out. Both rmsnorms use eps. res_w and w are weights: the launch may
 * read them before the kernel before it in the stream has finished (programmatic dependent launch), so that kernel
 * must not write them. */
typedef struct gm_cuda_act_in {
    float *x;
    int64_t K;
    int32_t n;
    const float *res_add, *res_w;
    float res_scale;
    int32_t norm;
    const float *w;
    float eps;
} gm_cuda_act_in;
int gm_cuda_prepare_act(const gm_cuda_act_in *in, int32_t act_type, void *out, gm_cuda_stream stream);
/* A tensor-core product's epilogue not yet run (gm_cuda_gemm_multi's `held`): Y, the GEMM's output ([n][Mtot]
 * f32), each column times col_scale[c], to the outputs y[s] ([n][ldy[s]]: rows m_end[s-1] .. m_end[s] of Y) as epi
 * says (GM_CUDA_EPI_*; GEGLU: out_rows = m_end[0] values gelu_tanh(gate) · up to y[0]; GELU_MUL: times mul
 * [n][ldy[0]]). n = 0: nothing held. Y and col_scale lie in the scratch of the product that held it. */
typedef struct gm_cuda_gemm_epi {
    const float *Y, *col_scale, *mul;
    float *y[3];
    int64_t m_end[3], ldy[3];
    int64_t Mtot, out_rows;
    int32_t n, n_seg, epi;
} gm_cuda_gemm_epi;
/* The same preparation for the tensor-core path (gemm_cuda.cu): each prepared row times 2^-e as f16 into xh
 * [n][K], e = the exponent of the row's max |value| minus 15 (no f16 overflow), and 2^e into col_scale[n].
 * first (NULL or n = 0: none; else first->n = in->n): a held epilogue, run row by row in the same launch before
 * row c is prepared: row c of every output of first is written, then row c of in->x / in->res_add is read, so
 * either may be one of first's outputs (with ldy = K) and the results are those of gm_cuda_gemm_epilogue(first)
 * followed by this preparation, to the bit. Neither in->x nor in->res_add may otherwise overlap first's outputs
 * or mul, and xh / col_scale must not be first's Y / col_scale. order: how a row's values lie in xh, as the product
 * that reads it wants (gm_cuda_qgemm_act_order): GM_CUDA_ACT_ORDER_NATURAL (value k at k, what cuBLAS reads) or
 * GM_CUDA_ACT_ORDER_QG (K a multiple of 128; each 128-value chunk permuted onto itself, common_cuda.cuh's
 * gmc_qg_act_pos). */
enum { GM_CUDA_ACT_ORDER_NATURAL = 0, GM_CUDA_ACT_ORDER_QG = 1 };
int gm_cuda_prepare_act_f16(const gm_cuda_act_in *in, void *xh, float *col_scale, const gm_cuda_gemm_epi *first,
                            int32_t order, gm_cuda_stream stream);
/* A held epilogue run on its own (one launch). */
int gm_cuda_gemm_epilogue(const gm_cuda_gemm_epi *e, gm_cuda_stream stream);
/* Up to three matrices of ONE type and width multiplied against the same activations in one launch per 8
 * columns: y[i][n][w[i].ne1] = x · W_iᵀ (GM_CUDA_EPI_STORE); GM_CUDA_EPI_GEGLU (n_w 2, equal heights):
 * y[0] = gelu_tanh(x · W_0ᵀ) ⊙ (x · W_1ᵀ), y[1] unused (may be NULL); GM_CUDA_EPI_GELU_MUL (n_w 1): y[0] = gelu_tanh(x · W_0ᵀ) ⊙ mul
 * (mul [n][w[0].ne1]). act: quantized activations of the type's gm_cuda_act_type (gm_cuda_quantize_act or
 * gm_cuda_rmsnorm_quantize layout) for quantized weights, f32 x [n][ne0] otherwise. */
enum { GM_CUDA_EPI_STORE = 0, GM_CUDA_EPI_GEGLU = 1, GM_CUDA_EPI_GELU_MUL = 2 };
/* What a matrix launch also prepares for the op after it (next.kind; 0: nothing). GM_CUDA_NEXT_QUANT: its output
 * y[0] ([n][w[0].ne1], w[0].ne1 a multiple of act_type's block) quantized into out exactly as
 * gm_cuda_quantize_act(y[0], w[0].ne1, n, act_type, out) makes it. A matvec launch (n <= 8; one matrix or a
 * GeGLU) does it in its own blocks, the last block of each activation block's rows quantizing them, with one of
 * `counters` per 32 rows (n_counters device unsigned ints, zero before, left zero); anything else quantizes in a
 * launch after the product. */
enum { GM_CUDA_NEXT_NONE = 0, GM_CUDA_NEXT_QUANT = 1 };
typedef struct gm_cuda_next {
    int32_t kind, act_type;
    void *out;
    unsigned *counters;
    int64_t n_counters;
} gm_cuda_next;
typedef struct gm_cuda_multi {
    int32_t n_w;
    gm_cuda_mat w[3];
    float *y[3];
    int32_t epi;
    const float *mul;
    gm_cuda_next next;
} gm_cuda_multi;
int gm_cuda_matmul_multi(const gm_cuda_multi *m, const void *act, int32_t n, gm_cuda_stream stream);
/* A chain of one-column projections in one persistent launch (chain_cuda.cu): step i is exactly
 * gm_cuda_prepare_act(&steps[i].in, 8, buf) (or gm_cuda_quantize_act of in.x when neither res_add nor norm is set)
 * followed by gm_cuda_matmul_multi(&steps[i].m, buf, 1), the steps in order, with the same results to the bit (the
 * same arithmetic in the same order), but without a launch between them: one block per SM prepares each step's
 * input itself and the blocks meet at a grid barrier between steps. A step must be one gm_cuda_chain_takes accepts:
 * one column (in.n 1), q4_0 / q5_0 / q8_0 matrices of one type and width K = in.K (a multiple of 32; at most 16384,
 * 8192 with a residual update or rmsnorm), x and res_add 16-byte aligned, no next-op quantization.
 * barrier: 8 bytes of device memory (8-aligned), zero before the first chain and then left to the chains (one per
 * stream, every chain of the stream counts on it). */
enum { GM_CUDA_CHAIN_MAX = 8 };
typedef struct gm_cuda_chain_step {
    gm_cuda_act_in in;
    gm_cuda_multi m;
} gm_cuda_chain_step;
int gm_cuda_chain_takes(const gm_cuda_act_in *in, const gm_cuda_multi *m);
int gm_cuda_chain(const gm_cuda_chain_step *steps, int32_t n_steps, void *barrier, gm_cuda_stream stream);
/* Blocks of a chain launch (one per SM), 0 when it cannot run here; each barrier of a chain adds that many to the
 * barrier's count (a u64). */
int gm_cuda_chain_blocks(void);
/* For benchmarks: later chains record, into stamps (4 · GM_CUDA_CHAIN_MAX + 1 device u64, zeroed by the caller), the
 * global timer (ns) at: [4·GM_CUDA_CHAIN_MAX] block 0 past its wait for the kernel before; for each step i: [4i]
 * input prepared, [4i+1] products done (block 0), [4i+2] products done (the last block), [4i+3] past the barrier
 * (block 0). NULL (the default) records nothing. */
void gm_cuda_chain_set_stamps(void *stamps);
/* The int8 tensor-core path (mmq_cuda.cu), taken by gm_cuda_matmul_multi for GM_CUDA_MMQ_MIN_N ..
 * gm_cuda_set_mmq_max_n columns of q4_0 or q8_0 matrices (one type): the quantized activations as for the matvec,
 * no f16 copy of the weights. gm_cuda_gemm_eligible leaves such batches to it. */
enum { GM_CUDA_MMQ_MIN_N = 16 };
int gm_cuda_mmq_eligible(const gm_cuda_multi *m, int32_t n);
int gm_cuda_mmq_multi(const gm_cuda_multi *m, const void *act, int32_t n, gm_cuda_stream stream);
/* The same kernel over MoE groups (gm_cuda_matmul_id's): m holds ONE expert's matrices (expert e's rows at
 * data + e·expert_bytes), group i multiplies columns gcol[2i] .. + gcol[2i+1] − 1 (at most GM_CUDA_MMQ_GROUP) of
 * act (n columns in all) through expert eid[i]; groups of 0 columns do nothing. Any batch size; q4_0 / q8_0. */
enum { GM_CUDA_MMQ_GROUP = 64 };
/* Whether the int8 kernel takes w (q4_0 / q8_0, rows of 4-byte words). */
int gm_cuda_mmq_takes(const gm_cuda_mat *w);
int gm_cuda_mmq_id(const gm_cuda_multi *m, uint64_t expert_bytes, const int32_t *eid, const int32_t *gcol,
                   int32_t n_groups, const void *act, int32_t n, gm_cuda_stream stream);
/* Largest batch for the int8 path (beyond it: the f16 cuBLAS path; -1: the default, 0 = off, as it is still slower
 * than the f16 path: mmq_cuda.cu). Process-wide; GEMMAC_CUDA_MMQ_MAX_N sets it when a CUDA backend is created. */
void gm_cuda_set_mmq_max_n(int n);
/* Rows per block of the int8 path: 32 or 64 (anything else: the default). GEMMAC_CUDA_MMQ_ROWS. */
void gm_cuda_set_mmq_rows(int rows);
/* The tensor-core path (gemm_cuda.cu) for n >= GM_CUDA_GEMM_MIN_N columns: the matrices of m dequantized to f16
 * into the scratch (or, when every matrix has its f16 rows already, those: one GEMM per matrix), the input prepared as gm_cuda_prepare_act says and converted to f16 with a power-of-two
 * scale per column, one cuBLAS GEMM (f32 accumulation), and m's epilogue. Eligible:
 * quantized, bf16 and f16 matrices of one width, at most 2^28 weights in all (a single matrix without
 * epilogue of any size: it goes through in chunks of rows); f32 weights never.
 * cublas: a handle from gm_cuda_gemm_create (its workspace given there, so the call allocates nothing). */
enum { GM_CUDA_GEMM_MIN_N = 16 };
int gm_cuda_gemm_eligible(const gm_cuda_multi *m, int32_t n);
size_t gm_cuda_gemm_scratch_bytes(const gm_cuda_multi *m, int32_t n);
/* ready (NULL: none): the input already prepared (gm_cuda_prepare_act_f16 of in, perhaps with a held epilogue
 * first) at ready->xh / ready->col_scale; in then only gives K and n. held (NULL: none): when the product's
 * epilogue would be one launch after its GEMM (cuBLAS, rows not split in chunks), it is not launched but described
 * in *held, to be run by gm_cuda_gemm_epilogue or inside the next preparation, before the scratch is used again;
 * held->n = 0 when the product left nothing held. */
typedef struct gm_cuda_f16_act {
    const void *xh;
    const float *col_scale;
} gm_cuda_f16_act;
int gm_cuda_gemm_multi(void *cublas, const gm_cuda_multi *m, const gm_cuda_act_in *in, const gm_cuda_f16_act *ready,
                       void *scratch, size_t scratch_bytes, gm_cuda_gemm_epi *held, gm_cuda_stream stream);
/* The q4_0 part of that path (qgemm_cuda.cu), taken by gm_cuda_gemm_multi for GM_CUDA_GEMM_MIN_N ..
 * gm_cuda_set_qgemm_max_n columns of re-laid q4_0 matrices (GMC_Q4_0_G8, K a multiple of 128, rows at 16-byte
 * boundaries): the blocks dequantized in registers into f16 tensor-core products, m's epilogue in the same launch.
 * xh / col_scale: gm_cuda_prepare_act_f16's (xh 16-byte aligned). Products of few rows split K over the blocks of
 * a cluster. */
int gm_cuda_qgemm_eligible(const gm_cuda_multi *m, int32_t n);
/* The order of the f16 input gm_cuda_qgemm reads for m at n columns (GM_CUDA_ACT_ORDER_*; its kernel decides). */
int gm_cuda_qgemm_act_order(const gm_cuda_multi *m, int32_t n);
int gm_cuda_qgemm(const gm_cuda_multi *m, const void *xh, const float *col_scale, int32_t n, gm_cuda_stream stream);
/* Which kernel gm_cuda_qgemm runs: 1 the warpgroup kernel (wgmma, sm_90a builds on a compute-capability 9.0
 * device: H100, H200; the input in GM_CUDA_ACT_ORDER_QG), 0 the warp kernel (mma.sync, any sm_80+; the natural
 * order); anything else: the default, the warpgroup kernel from 17 columns where it runs and the warp kernel below.
 * The warpgroup kernel takes only products whose matrices (but the last, and a GeGLU's halves) are multiples of 64
 * rows (its weights come in TMA boxes of 64 rows of one matrix); the warp kernel takes the others.
 * Process-wide; GEMMAC_CUDA_QGEMM_WG sets it when a CUDA backend is created.
 * gm_cuda_qgemm_wg_available: 1 when the warpgroup kernel can run on the current device. */
void gm_cuda_set_qgemm_kernel(int wg);
int gm_cuda_qgemm_wg_available(void);
/* Largest batch for it (beyond: cuBLAS; -1: the default, 64 where the warpgroup kernel runs, else 32; 0 = off).
 * Process-wide; GEMMAC_CUDA_QGEMM_MAX_N sets it when a CUDA backend is created. */
void gm_cuda_set_qgemm_max_n(int n);
/* Most blocks a product's K is split over (1: none; anything outside 1..8: the default, 8). For tests and
 * benchmarks; GEMMAC_CUDA_QGEMM_SPLITS. */
void gm_cuda_set_qgemm_splits(int max_splits);
/* Rows a warp of it takes: 16 (one m16 tile; 8 warps a block) or 32 (two; 4 warps); anything else: the default,
 * 16. Columns a block takes at most: 16, 32 or 64; anything else: the default, 64. For tests and benchmarks;
 * GEMMAC_CUDA_QGEMM_WARP_ROWS, GEMMAC_CUDA_QGEMM_BLOCK_COLS. */
void gm_cuda_set_qgemm_warp_rows(int rows);
void gm_cuda_set_qgemm_block_cols(int cols);
int gm_cuda_gemm_create(void **cublas, void *workspace, size_t workspace_bytes);
/* y[n][ne1] = x[n][ne0] · Wᵀ for f32 weights in f32 (cublasSgemm; no TF32, so as exact as the mat-vec up to the
 * order of the sums): f32 matrices over n >= GM_CUDA_GEMM_MIN_N columns, e.g. a GGUF's MoE router in a prefill,
 * which the mat-vec takes 8 columns a launch. Rows 4-byte aligned. */
int gm_cuda_sgemm(void *cublas, const gm_cuda_mat *w, const float *x, int32_t n, float *y, gm_cuda_stream stream);
/* w's rows dequantized to dense f16 at out (ne1 · ne0 · 2 bytes), exactly as the tensor-core path makes them for
 * each product: a copy made once and set as w->f16 gives that path the same weights without the dequantization. */
int gm_cuda_gemm_weights_f16(const gm_cuda_mat *w, void *out, gm_cuda_stream stream);
/* The stack limit (log2 of f16 values, default 28; a single matrix past it goes in chunks of rows); for tests. */
void gm_cuda_set_gemm_chunk_log2(int log2_values);
void gm_cuda_gemm_destroy(void *cublas);
/* Rows per warp of the matvec kernels (1, 2 or 4); 0: the built-in choice. Process-wide; for benchmarks and
 * tests. */
void gm_cuda_set_mmv_rows(int rows);
/* Mat-vec rows of f32 or quantized weights with min_k or more values split over ks warps of a block (1, 2, 4; ks 0:
 * the defaults of matmul_cuda.cu's mv_split_rows). Process-wide; GEMMAC_CUDA_MMV_SPLIT=ks[,min_k] (min_k default
 * 8192) sets it when a CUDA backend is created. For tests and benchmarks. */
void gm_cuda_set_mmv_split(int ks, int min_k);
/* The mat-vec's blocks hint their weight rows into L2 before they wait for the kernel before them (PDL); by
 * default only the first wave of blocks does (the blocks resident at once), 1 here makes every block do it (as
 * before 2026-12-03). GEMMAC_CUDA_PREFETCH_ALL=1. */
void gm_cuda_set_mmv_prefetch_all(int on);
/* Programmatic dependent launch (kernels start while the one before them finishes; sm_90): on by default on
 * devices that have it, unless GEMMAC_CUDA_PDL=0; 0/1 forces it, -1 goes back to that default (benchmarks). */
void gm_cuda_set_pdl(int on);
/* Blocks per SM the attention splits aim for (1..64; anything else: back to the defaults, the split kernel's 16 and
 * the staged decode kernel's rule: one round of resident blocks when the batch fits it, else two). Process-wide;
 * GEMMAC_CUDA_ATTN_FILL sets it when a CUDA backend is created. For benchmarks and tests. */
void gm_cuda_set_attn_fill(int blocks_per_sm);
/* The decode attention's kernel (one token per block): 0 the split kernel adding values by threads, 1 by warps
 * (16-byte loads, a chunk's rows in flight), 2 the staged kernel (K/V tiles copied into shared memory ahead of use,
 * tensor cores; f16 caches, up to 8 query heads per KV head, the preparation not fused), where the launch allows;
 * -1 (default): staged wherever it applies, else warps for launches of at most a block per SM, else threads.
 * Process-wide; GEMMAC_CUDA_ATTN_DECODE sets it when a CUDA backend is created. For benchmarks and tests. */
void gm_cuda_set_attn_decode(int mode);
/* Most threads per row of the projection-input preparation (a multiple of 32, 32 .. 1024; 0: the built-in choice). Process-wide; GEMMAC_CUDA_PREP_THREADS sets it when a CUDA backend is created. For benchmarks. */
void gm_cuda_set_prep_threads(int threads);

/* Expert-indexed matmul (MoE): w describes ONE expert's matrix (ne0 × ne1, rows row_bytes apart) at w->data,
 * expert e's at w->data + e·expert_bytes. x: [n_x][ne0] f32, y: [·][ne1]; eid and gcol on the device.
 *   pairs (gcol NULL): for each p < n_y: y[p][:] = x[p / x_div] · W_{eid[p]}ᵀ;
 *   groups (gcol [n_y][2], x_div 1, width gw): group i multiplies x rows gcol[2i] .. gcol[2i] + gcol[2i+1] − 1
 *     (at most gw; 0: nothing) through expert eid[i] into the same rows of y: gw GM_CUDA_MOE_GROUP on the mat-vec,
 *     GM_CUDA_MMQ_GROUP on the int8 tensor cores (q4_0 / q8_0: gm_cuda_mmq_takes). A group's unused columns may
 *     be read, never stored: x has gw − 1 rows after the last any group uses.
 * up: NULL, or a second matrix of w's shape and type (experts expert_bytes apart too) read in the same pass:
 * then y = gelu_tanh(x · W_eᵀ) · (x · UP_eᵀ), the GeGLU of gate w and up.
 * Quantized weights quantize x first, as gm_cuda_matmul: scratch gm_cuda_matmul_scratch_bytes(ne0, n_x).
 * n_y <= 65535. */
#define GM_CUDA_MOE_GROUP 8
int gm_cuda_matmul_id(const gm_cuda_mat *w, const gm_cuda_mat *up, uint64_t expert_bytes, const float *x,
                      int32_t n_x, int32_t x_div, const int32_t *eid, const int32_t *gcol, int32_t gw, int32_t n_y,
                      float *y, void *scratch, size_t scratch_bytes, gm_cuda_stream stream);

/* ---- row ops ---- */
/* out[i][:] = row ids[i] of table, dequantized, times scale; an id outside [0, ne1) reads row 0. ids: [n]
 * (device). out: [n][ne0]. */
int gm_cuda_get_rows(const gm_cuda_mat *table, const int32_t *ids, int32_t n, float scale, float *out,
                     gm_cuda_stream stream);
/* dst[i][:] = src[rows[i]][:], rows of d floats. rows: [n] (device). */
int gm_cuda_gather(const float *src, int32_t d, const int32_t *rows, int32_t n, float *dst, gm_cuda_stream stream);
/* y = rmsnorm(x) · w over n_rows rows of d (w NULL: no weight). y may be x. */
int gm_cuda_rmsnorm(const float *x, float *y, int64_t n_rows, int32_t d, const float *w, float eps,
                    gm_cuda_stream stream);
/* acc += rmsnorm(x) · w over n_rows rows of d. */
int gm_cuda_rmsnorm_add(float *acc, const float *x, int64_t n_rows, int32_t d, const float *w, float eps,
                        gm_cuda_stream stream);
/* x: [n][n_head][head_dim]; NeoX RoPE of each head at pos[token] (device), then x *= scale. freq_factors:
 * NULL or [n_rot/2] (device); a factor of 1e30 leaves its pair unrotated. Angles as gm_ref_rope_neox. */
int gm_cuda_rope(float *x, int32_t n, int32_t n_head, int32_t head_dim, const int32_t *pos, int32_t n_rot,
                 float base, float freq_scale, const float *freq_factors, float scale, gm_cuda_stream stream);
/* g = gelu_tanh(g) ⊙ u over n values. */
int gm_cuda_gelu_mul(float *g, const float *u, int64_t n, gm_cuda_stream stream);
/* z = c·tanh(z/c) over n values. */
int gm_cuda_softcap(float *z, int64_t n, float c, gm_cuda_stream stream);

/* ---- Gemma 4 / Gemma 3n ops (gemma_ops_cuda.cu); semantics as src/model/backend.h and kernels/ref ---- */
/* x *= s over n values. */
int gm_cuda_scale(float *x, int64_t n, float s, gm_cuda_stream stream);
/* y = (y + x) · s over n values. */
int gm_cuda_add_scale(float *y, const float *x, int64_t n, float s, gm_cuda_stream stream);
/* y[i][:] = x[i][:] ⊙ w over n_rows rows of d (w: [d]). y may be x. */
int gm_cuda_mul_rows(const float *x, float *y, int64_t n_rows, int32_t d, const float *w, gm_cuda_stream stream);
/* dst[j][i][:] = src[i][j][:]: [n0][n1][d] -> [n1][n0][d]. */
int gm_cuda_transpose(const float *src, float *dst, int32_t n0, int32_t n1, int32_t d, gm_cuda_stream stream);
/* Per row of d: y *= rms(ref) / sqrt(max(mean(y²), eps)) (sums in double, as gm_ref_rms_match). */
int gm_cuda_rms_match(float *y, const float *ref, int64_t n_rows, int32_t d, float eps, gm_cuda_stream stream);
/* Per row of d: g = relu(g − (mean + k·std)) (mean and variance in double, as gm_ref_sparsity_gate). */
int gm_cuda_sparsity_gate(float *g, int64_t n_rows, int32_t d, float k, gm_cuda_stream stream);
/* AltUp predict / correct over K streams of [n][d] (backend.h). */
int gm_cuda_altup_predict(const float *x, const float *c, float *y, int32_t K, int32_t n, int32_t d,
                          gm_cuda_stream stream);
int gm_cuda_altup_correct(const float *pred, const float *act, const float *c, float *y, int32_t K, int32_t active,
                          int32_t n, int32_t d, gm_cuda_stream stream);

/* Routed mixture of experts over n tokens, entirely on the device (no host synchronisation): per token the
 * routing of gm_ref_moe_route (softmax, top n_used with ties to the lower index, renormalised, times
 * expert_scale[e] when not NULL), then for every (token, chosen expert) pair gate/up (gate_up: one expert's
 * [H][2F] matrix, experts 2F·row_bytes apart), GeGLU, down ([F][H], experts H·row_bytes apart), and
 * out[t] = Σ_e w_e · y_e summed in increasing expert index. logits [n][n_expert], x [n][H], out [n][H].
 * A batch with more pairs than experts goes through them in groups (pairs sorted by expert, each expert's
 * weights read once per group): of up to GM_CUDA_MMQ_GROUP pairs on the int8 tensor cores when they take the
 * experts (q4_0 / q8_0) and the batch has 16 pairs an expert or more, else of GM_CUDA_MOE_GROUP on the mat-vec;
 * the values agree up to the order of float sums. n · n_used <= 65471.
 * scratch: gm_cuda_moe_scratch_bytes. */
typedef struct gm_cuda_moe_args {
    const float *logits, *x, *expert_scale;
    int32_t n, n_used, n_expert;
    gm_cuda_mat gate_up;       /* one expert: ne0 = H, ne1 = 2F */
    gm_cuda_mat down;          /* one expert: ne0 = F, ne1 = H */
    float *out;
} gm_cuda_moe_args;
size_t gm_cuda_moe_scratch_bytes(int32_t n, int32_t n_used, int32_t n_expert, int64_t H, int64_t F);
int gm_cuda_moe(const gm_cuda_moe_args *a, void *scratch, size_t scratch_bytes, gm_cuda_stream stream);

/* ---- KV cache and attention ----
 * One layer's cache: k, v: [n_seq][n_slots][n_head_kv] head rows of head_dim values, f16, f32 or q8_0 (src/kv's
 * q8_0 head row: head_dim int8, then head_dim / 32 f16 scales, padded to 16 bytes: gm_kv_head_bytes).
 * ring: slot = pos % n_slots (sliding layers), else slot = pos. */
enum { GMC_KV_F32 = 0, GMC_KV_F16 = 1, GMC_KV_Q8_0 = 8 }; /* gm_cuda_kv.type: the ggml type numbers */
typedef struct gm_cuda_kv {
    int32_t type;
    int32_t n_slots;
    int32_t ring;
    int32_t n_head_kv, head_dim;
    void *k, *v;
} gm_cuda_kv;

/* Stores k, v ([n_tokens][n_head_kv][head_dim] f32) at each token's (seq, slot(pos)). */
int gm_cuda_kv_store(const gm_cuda_kv *kv, const float *k, const float *v, int32_t n_tokens, const int32_t *pos,
                     const int32_t *seq, gm_cuda_stream stream);

struct gm_cuda_prep;
typedef struct gm_cuda_attn {
    const gm_cuda_kv *kv;      /* host struct describing device buffers */
    int32_t n_tokens;
    const int32_t *pos;        /* [n_tokens] device */
    const int32_t *seq;        /* [n_tokens] device */
    int32_t n_head;            /* fast path: n_head / kv->n_head_kv in {1, 2, 4, 8, 16} and head_dim in {128, 256,
                                  512}; any other even head_dim <= 1024 and grouping: a one-warp-per-head kernel */
    int32_t window;            /* 0: full; else key k visible iff pos_k <= pos_q and pos_q - pos_k < window */
    int32_t max_keys;          /* host-side upper bound of the keys one block's queries see together (sizes the
                                  split): gm_cuda_attention_plan */
    int32_t tile_tokens;       /* 0 / 1: one token per block; else gm_cuda_attention_plan's tile (its tokens share
                                  one sequence and their K/V reads) */
    const float *q;            /* [n_tokens][n_head][head_dim], RoPE and scale applied */
    float *out;                /* [n_tokens][n_head][head_dim] */
    int32_t out_act_type;      /* 0: no quantized output; 8 (q8_0) or 15 (q8_K; n_head·head_dim a multiple of
                                  256): out is also written quantized into out_q */
    void *out_q;               /* 16-byte aligned, gm_cuda_matmul_scratch_bytes(n_head·head_dim, n_tokens) bytes:
                                  exactly the bytes gm_cuda_quantize_act(out, n_head·head_dim, n_tokens,
                                  out_act_type, out_q) would write (same layout, same f32 values, same quantizer) */
    const struct gm_cuda_prep *prep; /* NULL: q is prepared and the tokens' K/V are in the cache. Else the
                                  preparation gm_cuda_attn_prep(prep) makes (same n_tokens, pos, seq, n_head,
                                  head_dim; prep->kv NULL or a->kv's buffers), done first; q's contents are
                                  unspecified afterwards. With fuse_prep and one_per_seq it is done inside the
                                  attention launch where that runs one token per block: every block prepares its
                                  query heads, and the block whose split holds the token's own key prepares and
                                  stores its KV head's K/V (the same values, bit for bit) */
    int32_t one_per_seq;       /* the caller's promise: no two tokens of the batch share a sequence (a decode step),
                                  so a token's own key is the only one of the batch it sees. The staged kernel then
                                  requests the older keys of its first tiles before waiting on the launch before */
    int32_t fuse_prep;         /* allows prep inside the launch (with one_per_seq) */
} gm_cuda_attn;

/* The attention op's preparation (src/model/backend.h gm_attn_prep) fused with the KV store, one launch: per
 * token, each query head q = rope(rmsnorm(q) · q_norm) · q_scale in place; when kv is not NULL each KV head:
 * v' = rmsnorm(v_from_k ? k : v) if v_norm (else v, or k when v_from_k), k' = rope(rmsnorm(k) · k_norm), both
 * stored in the cache at (seq, slot(pos)) (k and v buffers are left as they were). q_norm / k_norm NULL: no
 * norm; n_rot 0: no RoPE. freq_factors: NULL or [n_rot/2] (device). */
typedef struct gm_cuda_prep {
    int32_t n_tokens, n_head, head_dim;
    const int32_t *pos, *seq;  /* device */
    float *q;
    const float *k, *v;        /* [n_tokens][n_head_kv][head_dim]; unused when kv is NULL */
    const gm_cuda_kv *kv;      /* NULL: only q */
    const float *q_norm, *k_norm;
    int32_t v_norm, v_from_k;
    float eps;
    int32_t n_rot;
    float base, freq_scale;
    const float *freq_factors;
    float q_scale;
} gm_cuda_prep;
int gm_cuda_attn_prep(const gm_cuda_prep *p, gm_cuda_stream stream);

/* Split-K (flash-decoding) attention: the visible keys of each query (or of a tile of consecutive batch tokens
 * of one sequence) are cut into splits processed by separate blocks, each with an online softmax; the last block
 * of each (tile, KV head) to finish merges them, in the same launch. One launch in all (a second, the activation
 * quantizer, only for a quantized output the kernel cannot write itself: head dims outside 128 / 256 / 512,
 * groupings outside 1..16, and q8_K with head_dim 128 and one query head per KV head).
 * The plan, from the host copies of pos / seq: tile_tokens (1, or the tile when every tile of that many
 * consecutive tokens holds one sequence and the batch is long enough) and max_keys for it.
 * scratch: gm_cuda_attention_scratch_bytes with the plan's values (0: none needed, scratch may be NULL); it holds
 * the splits' partials and, at its start, one completion counter per (tile, KV head). The counters must be zero
 * when the scratch is first used: zero the whole buffer once when it is allocated (cudaMemset(scratch, 0, bytes);
 * again after every reallocation). Every launch leaves them zero (graph replays find them so), and no call, of
 * any shape, writes anything else over them, so one scratch serves every layer and batch; but two attention calls
 * must not run on one scratch at the same time. */
void gm_cuda_attention_plan(int32_t n_tokens, const int32_t *pos, const int32_t *seq, int32_t window, int32_t n_head,
                            int32_t n_head_kv, int32_t head_dim, int32_t *tile_tokens, int32_t *max_keys);
size_t gm_cuda_attention_scratch_bytes(int32_t n_tokens, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                       int32_t max_keys, int32_t tile_tokens);
int gm_cuda_attention(const gm_cuda_attn *a, void *scratch, size_t scratch_bytes, gm_cuda_stream stream);

/* ---- top logits (sample_cuda.cu): the k best logits of each row, for the sampler ----
 * logits: [n_rows][n_vocab] f32; ids, vals: [n_rows][k]. Row r's ids / vals are exactly gm_top_logits_row's
 * (src/sample/top_logits.h), bit for bit: each logit reads as gm_logit_read (NaN -> -inf, +inf -> FLT_MAX,
 * -0 -> +0), candidates are ordered by (value desc, id asc), and the first k in that order are written in that
 * order, vals holding the values as read. 1 <= k <= GM_CUDA_TOP_LOGITS_MAX, k <= n_vocab <= 2^24,
 * 1 <= n_rows <= 65535. Each block radix-selects the best k of a slice of 8192 logits of a row (the row is read
 * once), then one block per row selects and sorts the best k of the slices' candidates (more merge levels when
 * they exceed 8192: n_vocab > 2^18 for k = 256); one launch when n_vocab <= 8192.
 * scratch: gm_cuda_top_logits_scratch_bytes(n_rows, n_vocab, k) bytes, 8-byte aligned (0 when n_vocab <= 8192:
 * scratch may then be NULL; 64 KiB per row for n_vocab 262144 and k 256; 0 for bad arguments). */
#define GM_CUDA_TOP_LOGITS_MAX 256
size_t gm_cuda_top_logits_scratch_bytes(int32_t n_rows, int32_t n_vocab, int32_t k);
int gm_cuda_top_logits(const float *logits, int32_t n_rows, int32_t n_vocab, int32_t k, int32_t *ids, float *vals,
                       void *scratch, size_t scratch_bytes, gm_cuda_stream stream);

#ifdef __cplusplus
}
#endif

#endif
