/* gemm_cuda.cu: the tensor-core path of the CUDA backend's projections, for batches of many columns (prefill,
 * batched decoding): the weights of every matrix of a projection dequantized to f16 into one stacked scratch
 * matrix, the activations (optionally rmsnorm'ed first) converted to f16 with a power-of-two scale per column,
 * one cuBLAS f16 x f16 -> f32 GEMM, and an epilogue that undoes the scale, splits the segments and applies the
 * GeGLU / gelu·mul. Owns those kernels and the cuBLAS call; the cuBLAS handle and the scratch belong to the
 * caller (backend_cuda.c). The matvec path for few columns lives in matmul_cuda.cu; q4_0 batches of up to
 * gm_cuda_set_qgemm_max_n columns go to qgemm_cuda.cu's kernel (same activations, no f16 weights, no cuBLAS).
 *
 * Numbers (Gemma 4 E4B, Q4_0, 512 tokens): weights 2.6 GB read, 9.2 GB f16 written and read back by the GEMM:
 * ~21 GB -> ~5 ms at 4.3 TB/s; GEMM 2 · 4.6e9 · 512 = 4.7 TFLOP -> ~6-8 ms at 600-800 TFLOPS. Predicted
 * pp512 ~ 12-15 ms (35-40k tokens/s) against ~260 ms for 64 matvec passes over the weights. Measured 21.1k
 * tokens/s; with f16 copies of the weights made once (gm_cuda_mat.f16: the backend keeps them while memory allows)
 * the dequantization goes and pp512 measured 27.2k, 64 sequences' batched decoding 3.4k -> 4.9k tokens/s.
 *
 * Precision: f16 weights are the dequantized values rounded to 11 significant bits (the values of q4_0 / q8_0 /
 * K-quant blocks carry 12-15); activations keep 11 bits (the matvec path's q8 activations keep ~8), with a
 * power-of-two column scale so that no value overflows f16 (Gemma's residual stream exceeds 65504). */
#include <cublas_v2.h>
#include <math.h>

#include "common_cuda.cuh"
#include "quant_items_cuda.cuh"

/* ---- weights -> f16: one thread per item (16 or 32 weights of one block) ---- */
template <class T>
__global__ void dequant_f16_kernel(const uint8_t *__restrict__ W, uint64_t row_bytes, int64_t M, int K,
                                   __half *__restrict__ out) {
    gmc_pdl_wait();
    const int items = K / T::ELEMS;
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= M * items) return;
    const int64_t row = g / items;
    const int it = (int)(g % items);
    int w[T::SPANS][4];
    float ws[T::SPANS], wm[T::SPANS];
    T::load(W + (uint64_t)row * row_bytes, it, w, ws, wm);
    int off[T::SPANS];
    T::act_off(it, off);
#pragma unroll
    for (int s = 0; s < T::SPANS; s++) {
        __align__(16) __half v[16];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int q = T::MINS ? (int)((w[s][i] >> (8 * b)) & 0xff) : (int)(int8_t)(w[s][i] >> (8 * b));
                v[4 * i + b] = __float2half_rn(T::MINS ? __fsub_rn(__fmul_rn(ws[s], (float)q), wm[s])
                                                       : __fmul_rn(ws[s], (float)q));
            }
        uint4 *dst = (uint4 *)(out + (size_t)row * K + off[s]);
        dst[0] = ((const uint4 *)v)[0];
        dst[1] = ((const uint4 *)v)[1];
    }
}

/* bf16 / f16 / f32 weights -> f16 rows of exactly K values, one thread per value. */
template <int TYPE>
__global__ void convert_f16_kernel(const uint8_t *__restrict__ W, uint64_t row_bytes, int64_t M, int K,
                                   __half *__restrict__ out) {
    gmc_pdl_wait();
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= M * K) return;
    const int64_t row = g / K;
    const int j = (int)(g % K);
    const uint8_t *r = W + (uint64_t)row * row_bytes;
    if (TYPE == GMC_F16) out[g] = ((const __half *)r)[j];
    else out[g] = __float2half_rn(TYPE == GMC_BF16 ? gmc_bf2f(((const uint16_t *)r)[j]) : ((const float *)r)[j]);
}

/* ---- epilogue: Y [n][Mtot] (the GEMM's column-major Mtot x n) times the column's scale, to the outputs
 * (gmc_gemm_epi_value); a grid of (row blocks, columns) ---- */
__global__ void gemm_epilogue_kernel(const __grid_constant__ gm_cuda_gemm_epi e) {
    gmc_pdl_wait();
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t c = blockIdx.y;
    if (g < e.out_rows) gmc_gemm_epi_value(e, c, g, e.col_scale[c]);
}

extern "C" int gm_cuda_gemm_epilogue(const gm_cuda_gemm_epi *e, gm_cuda_stream stream) {
    if (!e || e->n <= 0) return 0;
    gmc_launch(gemm_epilogue_kernel, dim3((unsigned)((e->out_rows + 255) / 256), (unsigned)e->n), 256, 0, stream, *e);
    return gmc_check_launch("gemm epilogue");
}

/* ---- host side ---- */
static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

static int gemm_type_ok(int type) {
    switch (type) {
    case GMC_Q4_0: case GMC_Q5_0: case GMC_Q8_0: case GMC_Q4_K: case GMC_Q5_K: case GMC_Q6_K: case GMC_Q6_K_A16:
    case GMC_Q4_0_G8: case GMC_F16: case GMC_BF16: return 1;
    default: return 0; /* f32 weights (the transformers fixtures) keep the exact f32 matvec */
    }
}

/* Stacked f16 weights of at most 2^28 values (512 MiB; a 31B feed-forward pair is 231M); a single matrix
 * without epilogue beyond that (an LM head over many rows) goes through in chunks of rows of that size. */
static int g_max_weights_log2 = 28;

extern "C" void gm_cuda_set_gemm_chunk_log2(int log2_values) {
    g_max_weights_log2 = log2_values >= 10 && log2_values <= 30 ? log2_values : 28;
}

static int64_t chunk_rows(const gm_cuda_multi *m) {
    /* a multiple of 256 rows: the chunk is the GEMM's leading dimension of Y, and cuBLAS falls back to slow
     * unaligned kernels on odd ones (measured: 370 us instead of ~120 us per LM-head chunk at n = 64) */
    int64_t cap = ((int64_t)1 << g_max_weights_log2) / m->w[0].ne0 / 256 * 256;
    if (cap < 256) cap = 256;
    if (m->n_w != 1 || m->epi != GM_CUDA_EPI_STORE || m->w[0].ne1 <= cap) {
        int64_t mtot = 0;
        for (int i = 0; i < m->n_w; i++) mtot += m->w[i].ne1;
        return mtot;
    }
    return cap;
}

extern "C" int gm_cuda_gemm_eligible(const gm_cuda_multi *m, int32_t n) {
    if (n < GM_CUDA_GEMM_MIN_N || !m || m->n_w < 1 || gm_cuda_mmq_eligible(m, n)) return 0;
    int64_t values = 0;
    for (int i = 0; i < m->n_w; i++) {
        const gm_cuda_mat *w = &m->w[i];
        if (!gemm_type_ok(w->type) || w->ne0 % 8 || w->ne0 != m->w[0].ne0) return 0;

        values += w->ne1 * w->ne0;
    }
    return values <= ((int64_t)1 << g_max_weights_log2) || (m->n_w == 1 && m->epi == GM_CUDA_EPI_STORE);
}

/* w's rows as dense f16 without any work: a copy made once (w->f16), or f16 weights stored densely; else NULL. */
static const __half *dense_f16(const gm_cuda_mat *w) {
    if (w->f16) return (const __half *)w->f16;
    if (w->type == GMC_F16 && w->row_bytes == (uint64_t)w->ne0 * 2 && (uintptr_t)w->data % 16 == 0)
        return (const __half *)w->data;
    return NULL;
}

static bool all_dense_f16(const gm_cuda_multi *m) {
    for (int i = 0; i < m->n_w; i++)
        if (!dense_f16(&m->w[i])) return false;
    return true;
}

/* The dense f16 rows of m's matrices lie one after another (copies made for the group at once): one GEMM. */
static bool stacked_f16(const gm_cuda_multi *m) {
    for (int i = 1; i < m->n_w; i++)
        if (dense_f16(&m->w[i]) != dense_f16(&m->w[i - 1]) + (size_t)m->w[i - 1].ne1 * m->w[i - 1].ne0) return false;
    return true;
}

extern "C" size_t gm_cuda_gemm_scratch_bytes(const gm_cuda_multi *m, int32_t n) {
    if (gm_cuda_qgemm_eligible(m, n)) /* f16 activations and column scales only */
        return align256((size_t)n * m->w[0].ne0 * 2) + align256((size_t)n * sizeof(float));
    const int64_t mtot = chunk_rows(m); /* rows of one GEMM */
    const int64_t K = m->w[0].ne0;
    const size_t wf = all_dense_f16(m) ? 0 : align256((size_t)mtot * K * 2); /* the dequantized stack */
    return wf + align256((size_t)n * K * 2) + align256((size_t)n * sizeof(float)) +
           align256((size_t)n * mtot * sizeof(float));
}

template <class T>
static void launch_dequant(const gm_cuda_mat *w, __half *out, cudaStream_t s) {
    const int64_t items = w->ne1 * (w->ne0 / T::ELEMS);
    gmc_launch(dequant_f16_kernel<T>, (unsigned)((items + 255) / 256), 256, 0, s, (const uint8_t *)w->data,
               w->row_bytes, w->ne1, (int)w->ne0, out);
}

/* w's rows as f16 at out ([ne1][ne0]); dense f16 rows (dense_f16) are used in place (returns their pointer). */
static const __half *weights_f16(const gm_cuda_mat *w, __half *out, cudaStream_t s) {
    const int64_t total = w->ne1 * w->ne0;
    if (w->f16) return (const __half *)w->f16;
    switch (w->type) {
    case GMC_Q4_0: launch_dequant<TQ4_0>(w, out, s); break;
    case GMC_Q4_0_G8: launch_dequant<TQ4_0_G8>(w, out, s); break;
    case GMC_Q5_0: launch_dequant<TQ5_0>(w, out, s); break;
    case GMC_Q8_0: launch_dequant<TQ8_0>(w, out, s); break;
    case GMC_Q4_K: launch_dequant<TQ4_K>(w, out, s); break;
    case GMC_Q5_K: launch_dequant<TQ5_K>(w, out, s); break;
    case GMC_Q6_K: launch_dequant<TQ6_K>(w, out, s); break;
    case GMC_Q6_K_A16: launch_dequant<TQ6_K_A16>(w, out, s); break;
    case GMC_BF16:
        gmc_launch(convert_f16_kernel<GMC_BF16>, (unsigned)((total + 255) / 256), 256, 0, s, (const uint8_t *)w->data,
                   w->row_bytes, w->ne1, (int)w->ne0, out);
        break;
    case GMC_F16:
        if (dense_f16(w)) return dense_f16(w);
        gmc_launch(convert_f16_kernel<GMC_F16>, (unsigned)((total + 255) / 256), 256, 0, s, (const uint8_t *)w->data,
                   w->row_bytes, w->ne1, (int)w->ne0, out);
        break;
    }
    return out;
}

extern "C" int gm_cuda_gemm_weights_f16(const gm_cuda_mat *w, void *out, gm_cuda_stream stream) {
    if (!w || !out || !gemm_type_ok(w->type) || w->ne0 % 8) return gmc_fail(-1, "gemm_weights_f16: bad arguments");
    gm_cuda_mat plain = *w;
    plain.f16 = NULL; /* from the weights themselves */
    const __half *h = weights_f16(&plain, (__half *)out, stream);
    if (h != out && cudaMemcpyAsync(out, h, (size_t)w->ne1 * w->ne0 * 2, cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
        return gmc_fail(-1, "gemm_weights_f16: copying f16 weights failed");
    return gmc_check_launch("gemm_weights_f16");
}

/* Y (column-major, rows x n, leading dimension ldy) = W (rows x K, f16 row-major) · xf (K x n, f16). */
static int gemm_f16(cublasHandle_t h, const __half *W, int64_t rows, int32_t n, int64_t K, const __half *xf, float *Y,
                    int64_t ldy) {
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, n, (int)K, &one, W, CUDA_R_16F,
                                           (int)K, xf, CUDA_R_16F, (int)K, &zero, Y, CUDA_R_32F, (int)ldy,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : gmc_fail(-1, "gemm_multi: cublasGemmEx failed (status %d)", (int)st);
}

extern "C" int gm_cuda_gemm_multi(void *cublas, const gm_cuda_multi *m, const gm_cuda_act_in *in,
                                  const gm_cuda_f16_act *ready, void *scratch, size_t scratch_bytes,
                                  gm_cuda_gemm_epi *held, gm_cuda_stream stream) {
    const int32_t n = in ? in->n : 0;
    if (held) held->n = 0;
    if (!m || !in || (!ready && !in->x) || (ready && (!ready->xh || !ready->col_scale)) ||
        !gm_cuda_gemm_eligible(m, n) || in->K != m->w[0].ne0 ||
        (m->epi == GM_CUDA_EPI_GEGLU && (m->n_w != 2 || m->w[1].ne1 != m->w[0].ne1)) ||
        (m->epi == GM_CUDA_EPI_GELU_MUL && (m->n_w != 1 || !m->mul)))
        return gmc_fail(-1, "gemm_multi: bad arguments");
    if (!scratch || scratch_bytes < gm_cuda_gemm_scratch_bytes(m, n))
        return gmc_fail(-1, "gemm_multi: scratch of %zu bytes, %zu needed", scratch_bytes,
                        gm_cuda_gemm_scratch_bytes(m, n));
    const int64_t K = m->w[0].ne0, rows = chunk_rows(m);
    if (gm_cuda_qgemm_eligible(m, n)) { /* q4_0 blocks straight into the tensor cores (qgemm_cuda.cu) */
        if (ready) return gm_cuda_qgemm(m, ready->xh, ready->col_scale, n, stream);
        __half *xf = (__half *)scratch;
        float *cs = (float *)((uint8_t *)scratch + align256((size_t)n * K * 2));
        const int rc = gm_cuda_prepare_act_f16(in, xf, cs, NULL, gm_cuda_qgemm_act_order(m, n), stream);
        return rc ? rc : gm_cuda_qgemm(m, xf, cs, n, stream);
    }
    if (!cublas) return gmc_fail(-1, "gemm_multi: no cuBLAS handle");
    int64_t mtot = 0;
    gm_cuda_gemm_epi e = {};
    e.n = n, e.n_seg = m->n_w, e.epi = m->epi, e.mul = m->mul;
    for (int i = 0; i < m->n_w; i++) {
        if (m->w[i].ne0 != K) return gmc_fail(-1, "gemm_multi: matrices of different widths");
        mtot += m->w[i].ne1;
        e.y[i] = m->y[i], e.m_end[i] = mtot, e.ldy[i] = m->w[i].ne1;
    }
    const bool dense = all_dense_f16(m); /* every matrix's f16 rows exist: no stack, one GEMM per matrix */
    uint8_t *p = (uint8_t *)scratch;
    __half *wf = (__half *)p;
    if (!dense) p += align256((size_t)rows * K * 2);
    __half *xf = (__half *)p;
    p += align256((size_t)n * K * 2);
    float *cs = (float *)p;
    p += align256((size_t)n * sizeof(float));
    float *Y = (float *)p;
    int rc = 0;
    if (ready) xf = (__half *)ready->xh, cs = (float *)ready->col_scale;
    else if ((rc = gm_cuda_prepare_act_f16(in, xf, cs, NULL, GM_CUDA_ACT_ORDER_NATURAL, stream))) return rc;
    cublasHandle_t h = (cublasHandle_t)cublas;
    if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return gmc_fail(-1, "gemm_multi: cublasSetStream failed");
    /* chunks of rows: the whole stack at once, except a single large matrix (rows < mtot) */
    for (int64_t r0 = 0; r0 < mtot; r0 += rows) {
        const int64_t nr = mtot - r0 < rows ? mtot - r0 : rows;
        const __half *W = wf;
        if (dense && (nr < mtot || stacked_f16(m))) { /* a chunk of one matrix, or the whole stack */
            if ((rc = gemm_f16(h, dense_f16(&m->w[0]) + (size_t)r0 * K, nr, n, K, xf, Y, nr))) return rc;
        } else if (dense) {
            int64_t row0 = 0;
            for (int i = 0; i < m->n_w && !rc; i++) {
                rc = gemm_f16(h, dense_f16(&m->w[i]), m->w[i].ne1, n, K, xf, Y + row0, nr);
                row0 += m->w[i].ne1;
            }
            if (rc) return rc;
        } else if (nr < mtot || m->n_w == 1) { /* one matrix, rows r0 .. r0 + nr */
            gm_cuda_mat part = m->w[0];
            part.data = (const uint8_t *)part.data + (uint64_t)r0 * part.row_bytes;
            part.ne1 = nr;
            W = weights_f16(&part, wf, stream);
        } else {
            int64_t row0 = 0;
            for (int i = 0; i < m->n_w; i++) {
                __half *slot = wf + (size_t)row0 * K;
                const __half *wi = weights_f16(&m->w[i], slot, stream);
                if (wi != slot && /* dense f16 weights: copied into the stack */
                    cudaMemcpyAsync(slot, wi, (size_t)m->w[i].ne1 * K * 2, cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
                    return gmc_fail(-1, "gemm_multi: copying f16 weights failed");
                row0 += m->w[i].ne1;
            }
        }
        if (!dense && (rc = gemm_f16(h, W, nr, n, K, xf, Y, nr))) return rc;
        gm_cuda_gemm_epi ec = e;
        ec.Y = Y, ec.col_scale = cs, ec.Mtot = nr;
        ec.out_rows = m->epi == GM_CUDA_EPI_GEGLU ? m->w[0].ne1 : nr;
        if (nr < mtot) ec.y[0] = e.y[0] + r0, ec.m_end[0] = nr; /* a chunk of the single matrix's rows */
        if (held && nr == mtot) { /* the only chunk: left to the caller */
            *held = ec;
            return 0;
        }
        if ((rc = gm_cuda_gemm_epilogue(&ec, stream))) return rc;
    }
    return 0;
}

extern "C" int gm_cuda_sgemm(void *cublas, const gm_cuda_mat *w, const float *x, int32_t n, float *y,
                              gm_cuda_stream stream) {
    if (!cublas || !w || !w->data || w->type != GMC_F32 || !x || !y || n <= 0 || w->ne0 <= 0 || w->ne1 <= 0 ||
        w->ne0 > INT32_MAX || w->ne1 > INT32_MAX || w->row_bytes % 4 || w->row_bytes / 4 < (uint64_t)w->ne0 ||
        w->row_bytes / 4 > INT32_MAX || (uintptr_t)w->data % 4)
        return gmc_fail(-1, "sgemm: bad arguments");
    cublasHandle_t h = (cublasHandle_t)cublas;
    if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return gmc_fail(-1, "sgemm: cublasSetStream failed");
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->ne1, n, (int)w->ne0, &one,
                                          (const float *)w->data, (int)(w->row_bytes / 4), x, (int)w->ne0, &zero, y,
                                          (int)w->ne1);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : gmc_fail(-1, "sgemm: cublasSgemm failed (status %d)", (int)st);
}

extern "C" int gm_cuda_gemm_create(void **cublas, void *workspace, size_t workspace_bytes) {
    cublasHandle_t h = NULL;
    cublasStatus_t st = cublasCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS) return gmc_fail(-1, "cublasCreate failed (status %d)", (int)st);
    if (workspace && (st = cublasSetWorkspace(h, workspace, workspace_bytes)) != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(h);
        return gmc_fail(-1, "cublasSetWorkspace failed (status %d)", (int)st);
    }
    *cublas = h;
    return 0;
}

extern "C" void gm_cuda_gemm_destroy(void *cublas) {
    if (cublas) cublasDestroy((cublasHandle_t)cublas);
}
