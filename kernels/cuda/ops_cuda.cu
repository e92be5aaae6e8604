/* ops_cuda.cu: the element- and row-wise ops of the CUDA backend (get_rows with dequantize and scale fused,
 * gather, rmsnorm, rmsnorm fused with the residual add, NeoX RoPE with freq_factors, GeGLU, softcap), the
 * device query and the error recording of ops_cuda.h. Matmul lives in matmul_cuda.cu, attention in
 * attention_cuda.cu. All of these move a few KB to a few MB per call: they are launch bound (~2-3 us each in
 * a stream, less in a graph), so they are written for clarity and exactness against kernels/ref, with the
 * reference's float operation order kept (explicit __fmul_rn etc. where nvcc would otherwise fuse). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common_cuda.cuh"

/* ---- errors ---- */
static thread_local char g_err[256];

int gmc_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return code;
}

int gmc_check_launch(const char *what) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return gmc_fail((int)e, "%s: %s", what, cudaGetErrorString(e));
    return 0;
}

extern "C" const char *gm_cuda_last_error(void) { return g_err; }

/* ---- programmatic dependent launch: -1 unknown (decided on first use), 0 off, 1 on ---- */
static int g_pdl = -1;

extern "C" void gm_cuda_set_pdl(int on) { g_pdl = on < 0 ? -1 : on ? 1 : 0; }

int gmc_pdl_enabled(void) {
    if (g_pdl < 0) {
        const char *e = getenv("GEMMAC_CUDA_PDL");
        int dev = 0, major = 0;
        const bool capable = cudaGetDevice(&dev) == cudaSuccess &&
                             cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                             major >= 9;
        g_pdl = capable && !(e && e[0] == '0') ? 1 : 0;
    }
    return g_pdl;
}

extern "C" int gm_cuda_device_count(void) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        gmc_fail((int)e, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return 0;
    }
    if (n == 0) gmc_fail(-1, "no CUDA device");
    return n;
}

/* ---- get_rows: one thread per output element; the element's block fields are re-read per thread (from L1).
 * Bytes: n rows of the table (5 KB at q8_0, d = 2560) + 4·n·d out: launch bound. */
__device__ __forceinline__ float dq_elem(int type, const uint8_t *row, int64_t j) {
    switch (type) {
    case GMC_F32: return ((const float *)row)[j];
    case GMC_F16: return gmc_h2f(((const uint16_t *)row)[j]);
    case GMC_BF16: return gmc_bf2f(((const uint16_t *)row)[j]);
    case GMC_Q4_0: {
        const uint8_t *b = row + (j / 32) * Q4_0_BYTES;
        const int e = (int)(j % 32);
        const int q = e < 16 ? (b[2 + e] & 0x0F) : (b[2 + e - 16] >> 4);
        return __fmul_rn((float)(q - 8), gmc_h2f(gmc_ld16(b)));
    }
    case GMC_Q4_0_G8: {
        const uint8_t *g = row + (j / 256) * Q4_0_G8_BYTES;
        const int blk = (int)((j / 32) % 8), e = (int)(j % 32);
        const uint8_t qb = g[16 * blk + (e & 15)];
        const int q = e < 16 ? (qb & 0x0F) : (qb >> 4);
        return __fmul_rn((float)(q - 8), gmc_h2f(gmc_ld16(g + 128 + 2 * blk)));
    }
    case GMC_Q5_0: {
        const uint8_t *b = row + (j / 32) * Q5_0_BYTES;
        const int e = (int)(j % 32);
        const uint32_t qh = (uint32_t)gmc_ld16(b + 2) | ((uint32_t)gmc_ld16(b + 4) << 16);
        const int q = (e < 16 ? (b[6 + e] & 0x0F) : (b[6 + e - 16] >> 4)) | (int)(((qh >> e) & 1u) << 4);
        return __fmul_rn((float)(q - 16), gmc_h2f(gmc_ld16(b)));
    }
    case GMC_Q8_0: {
        const uint8_t *b = row + (j / 32) * Q8_0_BYTES;
        return __fmul_rn((float)(int8_t)b[2 + j % 32], gmc_h2f(gmc_ld16(b)));
    }
    case GMC_Q4_K:
    case GMC_Q5_K: {
        const int bytes = type == GMC_Q4_K ? Q4_K_BYTES : Q5_K_BYTES;
        const uint8_t *b = row + (j / 256) * bytes;
        const int e = (int)(j % 256), g = e / 64, hi = (e % 64) >= 32, l = e % 32, sub = 2 * g + hi;
        const uint8_t *s = b + 4;
        int sc, m;
        if (sub < 4) {
            sc = s[sub] & 63, m = s[sub + 4] & 63;
        } else {
            sc = (s[sub + 4] & 0x0F) | ((s[sub - 4] >> 6) << 4);
            m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
        }
        const uint8_t *qs = b + (type == GMC_Q4_K ? 16 : 48);
        int q = (qs[32 * g + l] >> (4 * hi)) & 0x0F;
        if (type == GMC_Q5_K) q += ((b[16 + l] >> sub) & 1) << 4;
        const float d = gmc_h2f(gmc_ld16(b)), dmin = gmc_h2f(gmc_ld16(b + 2));
        return __fsub_rn(__fmul_rn(__fmul_rn(d, (float)sc), (float)q), __fmul_rn(dmin, (float)m));
    }
    case GMC_Q6_K:
    case GMC_Q6_K_A16: {
        const uint8_t *b = row + (j / 256) * (type == GMC_Q6_K ? Q6_K_BYTES : Q6_K_A16_BYTES);
        const int e = (int)(j % 256), hh = e / 128, r = e % 128, k = r / 32, l = r % 32;
        const uint8_t qlb = b[64 * hh + l + 32 * (k & 1)];
        const int q = ((k >= 2 ? qlb >> 4 : qlb) & 0x0F) | (((b[128 + 32 * hh + l] >> (2 * k)) & 3) << 4);
        const float d = gmc_h2f(gmc_ld16(b + 208));
        return __fmul_rn(__fmul_rn(d, (float)(int8_t)b[192 + e / 16]), (float)(q - 32));
    }
    }
    return __int_as_float(0x7fc00000);
}

__global__ void get_rows_kernel(int type, const uint8_t *__restrict__ table, uint64_t row_bytes, int64_t d,
                                int64_t n_rows, const int32_t *__restrict__ ids, float scale, float *__restrict__ out) {
    gmc_pdl_wait();
    const int64_t i = blockIdx.y;
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d) return;
    const int64_t id = ids[i] >= 0 && ids[i] < n_rows ? ids[i] : 0; /* ids past the table read row 0 */
    const uint8_t *row = table + (uint64_t)id * row_bytes;
    out[i * d + j] = __fmul_rn(dq_elem(type, row, j), scale);
}

extern "C" int gm_cuda_get_rows(const gm_cuda_mat *t, const int32_t *ids, int32_t n, float scale, float *out,
                                gm_cuda_stream stream) {
    if (!t || !t->data || !ids || !out || n < 0 || t->ne0 <= 0) return gmc_fail(-1, "get_rows: bad arguments");
    if (!gm_cuda_type_supported(t->type)) return gmc_fail(-1, "get_rows: type %d not supported", t->type);
    if (n == 0) return 0;
    const dim3 grid((unsigned)((t->ne0 + 255) / 256), (unsigned)n);
    gmc_launch(get_rows_kernel, grid, 256, 0, stream, t->type, (const uint8_t *)t->data, t->row_bytes, t->ne0, t->ne1, ids,
                                              scale, out);
    return gmc_check_launch("get_rows");
}

/* ---- gather ---- */
__global__ void gather_kernel(const float *__restrict__ src, int d, const int32_t *__restrict__ rows,
                              float *__restrict__ dst) {
    gmc_pdl_wait();
    const int64_t i = blockIdx.y;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < d) dst[i * d + j] = src[(int64_t)rows[i] * d + j];
}

extern "C" int gm_cuda_gather(const float *src, int32_t d, const int32_t *rows, int32_t n, float *dst,
                              gm_cuda_stream stream) {
    if (!src || !rows || !dst || d <= 0 || n < 0) return gmc_fail(-1, "gather: bad arguments");
    if (n == 0) return 0;
    gmc_launch(gather_kernel, dim3((unsigned)((d + 255) / 256), (unsigned)n), 256, 0, stream, src, d, rows, dst);
    return gmc_check_launch("gather");
}

/* ---- rmsnorm / rmsnorm_add: one block of 256 threads per row; sum of squares in float (the reference sums
 * in double: relative difference ~1e-7 for rows of a few thousand). Bytes 8·d per row (12·d with add). */
template <bool ADD>
__global__ void rmsnorm_kernel(const float *x, float *y, int d, const float *__restrict__ w, float eps) {
    gmc_pdl_wait();
    const int64_t r = blockIdx.x;
    const float *xr = x + r * d;
    float *yr = y + r * d;
    const float scale = gmc_row_rms_scale(xr, d, eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = __fmul_rn(xr[i], scale);
        if (w) v = __fmul_rn(v, w[i]);
        if (ADD) yr[i] += v;
        else yr[i] = v;
    }
}

/* The same with the row in registers, for rows of at most 1024 · VPL: thread t holds values t, t + T, ... (T
 * threads, up to 1024), the weights loaded before the wait, x read once, one block reduction. A decoding step's
 * norm is a serial chain (wait, load, reduce, store) and more threads shorten it: 256 threads looping over a
 * 2816-value row took 7.8 µs of the step's critical path (26B-A4B, H200). */
template <bool ADD, int VPL>
__global__ void __launch_bounds__(1024) rmsnorm_reg_kernel(const float *x, float *y, int d, const float *__restrict__ w,
                                                           float eps) {
    __shared__ float part[32];
    const int T = blockDim.x;
    float wv[VPL];
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int j = threadIdx.x + i * T;
        wv[i] = w && j < d ? __ldg(w + j) : 1.0f;
    }
    gmc_pdl_wait();
    const int64_t r = blockIdx.x;
    const float *xr = x + r * d;
    float *yr = y + r * d;
    float v[VPL], ss = 0.0f;
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int j = threadIdx.x + i * T;
        v[i] = j < d ? xr[j] : 0.0f;
        ss = fmaf(v[i], v[i], ss);
    }
    const float scale = 1.0f / sqrtf(gmc_block_sum(ss, part) / (float)d + eps);
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int j = threadIdx.x + i * T;
        if (j >= d) continue;
        float t = __fmul_rn(v[i], scale);
        if (w) t = __fmul_rn(t, wv[i]);
        if (ADD) yr[j] += t;
        else yr[j] = t;
    }
}

enum { RMSNORM_REG_MAX_VPL = 8 };

template <bool ADD>
static int rmsnorm_launch(const float *x, float *y, int64_t n_rows, int32_t d, const float *w, float eps,
                          cudaStream_t stream) {
    const int vpl = (d + 1023) / 1024;
    if (vpl > RMSNORM_REG_MAX_VPL) {
        gmc_launch(rmsnorm_kernel<ADD>, (unsigned)n_rows, 256, 0, stream, x, y, d, w, eps);
        return 0;
    }
    const unsigned threads = (unsigned)(((d + vpl - 1) / vpl + 31) / 32 * 32);
    switch (vpl) {
#define GMC_CASE(V) \
    case V: gmc_launch(rmsnorm_reg_kernel<ADD, V>, (unsigned)n_rows, threads, 0, stream, x, y, d, w, eps); break;
        GMC_CASE(1) GMC_CASE(2) GMC_CASE(3) GMC_CASE(4) GMC_CASE(5) GMC_CASE(6) GMC_CASE(7) GMC_CASE(8)
#undef GMC_CASE
    }
    return 0;
}

extern "C" int gm_cuda_rmsnorm(const float *x, float *y, int64_t n_rows, int32_t d, const float *w, float eps,
                               gm_cuda_stream stream) {
    if (!x || !y || d <= 0 || n_rows < 0) return gmc_fail(-1, "rmsnorm: bad arguments");
    if (n_rows == 0) return 0;
    rmsnorm_launch<false>(x, y, n_rows, d, w, eps, stream);
    return gmc_check_launch("rmsnorm");
}

extern "C" int gm_cuda_rmsnorm_add(float *acc, const float *x, int64_t n_rows, int32_t d, const float *w, float eps,
                                   gm_cuda_stream stream) {
    if (!x || !acc || d <= 0 || n_rows < 0) return gmc_fail(-1, "rmsnorm_add: bad arguments");
    if (n_rows == 0) return 0;
    rmsnorm_launch<true>(x, acc, n_rows, d, w, eps, stream);
    return gmc_check_launch("rmsnorm_add");
}

/* ---- RoPE: one thread per pair slot i < head_dim/2 of a head. Pairs i < n_rot/2 rotate (i, i + n_rot/2) by
 * angle = freq_scale · (theta_i / factor_i), theta_i = pos · theta_scale^i formed by repeated multiplication
 * exactly as gm_ref_rope_neox (theta_scale computed once on the host with the same powf); the others carry the
 * pass-through dims n_rot + 2(i - n_rot/2) and +1. Then everything times scale. */
__global__ void rope_kernel(float *x, int n_head, int head_dim, const int32_t *__restrict__ pos, int n_rot,
                            float theta_scale, float freq_scale, const float *__restrict__ ff, float scale,
                            int64_t n_pairs) {
    gmc_pdl_wait();
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= n_pairs) return;
    const int hp = head_dim / 2;
    const int64_t head = g / hp;
    gmc_rope_slot(x + head * head_dim, (int)(g % hp), head_dim, n_rot, (float)pos[head / n_head], theta_scale,
                  freq_scale, ff, scale);
}

extern "C" int gm_cuda_rope(float *x, int32_t n, int32_t n_head, int32_t head_dim, const int32_t *pos, int32_t n_rot,
                            float base, float freq_scale, const float *freq_factors, float scale,
                            gm_cuda_stream stream) {
    if (!x || !pos || n < 0 || n_head <= 0 || head_dim <= 0 || head_dim % 2 || n_rot <= 0 || n_rot % 2 ||
        n_rot > head_dim)
        return gmc_fail(-1, "rope: bad arguments");
    if (n == 0) return 0;
    const float theta_scale = powf(base, -2.0f / (float)n_rot); /* the host's powf, as the reference */
    const int64_t n_pairs = (int64_t)n * n_head * (head_dim / 2);
    gmc_launch(rope_kernel, (unsigned)((n_pairs + 255) / 256), 256, 0, stream, x, n_head, head_dim, pos, n_rot, theta_scale,
                                                                       freq_scale, freq_factors, scale, n_pairs);
    return gmc_check_launch("rope");
}

/* ---- GeGLU and softcap: elementwise, 8-12 bytes per value. */
__global__ void gelu_mul_kernel(float *g, const float *__restrict__ u, int64_t n) {
    gmc_pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    g[i] = __fmul_rn(gmc_gelu_tanh(g[i]), u[i]);
}

extern "C" int gm_cuda_gelu_mul(float *g, const float *u, int64_t n, gm_cuda_stream stream) {
    if (!g || !u || n < 0) return gmc_fail(-1, "gelu_mul: bad arguments");
    if (n == 0) return 0;
    gmc_launch(gelu_mul_kernel, (unsigned)((n + 255) / 256), 256, 0, stream, g, u, n);
    return gmc_check_launch("gelu_mul");
}

/* Softcap in place, c · tanh(z / c), the same operations per value as before: a grid-stride loop over float4 (the LM
 * head's logits: up to 256 rows x 262144 a step, 268 MB read and written), the values before the first 16-byte
 * boundary and after the last whole float4 one a thread. One value per thread in 262144 blocks of 256 took 318 us
 * for 256 rows (H200, 2026-12-04, ~1.7 TB/s: block scheduling, not bytes); predicted ~140 us at ~3.8 TB/s. */
__device__ __forceinline__ float softcap_value(float x, float c) { return __fmul_rn(c, tanhf(__fdiv_rn(x, c))); }

enum { SOFTCAP_THREADS = 256, SOFTCAP_MAX_BLOCKS = 2048 };

__global__ void softcap_kernel(float *z, int64_t n, float c) {
    gmc_pdl_wait();
    const int64_t head = min((int64_t)(((16u - ((uintptr_t)z & 15u)) & 15u) / 4u), n); /* values before alignment */
    const int64_t n4 = (n - head) / 4, tail = head + 4 * n4;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    if (t < head) z[t] = softcap_value(z[t], c);
    if (t < n - tail) z[tail + t] = softcap_value(z[tail + t], c);
    float4 *z4 = (float4 *)(z + head);
    for (int64_t i = t; i < n4; i += stride) {
        float4 v = z4[i];
        v.x = softcap_value(v.x, c), v.y = softcap_value(v.y, c), v.z = softcap_value(v.z, c);
        v.w = softcap_value(v.w, c);
        z4[i] = v;
    }
}

extern "C" int gm_cuda_softcap(float *z, int64_t n, float c, gm_cuda_stream stream) {
    if (!z || n < 0 || !(c > 0)) return gmc_fail(-1, "softcap: bad arguments");
    if (n == 0) return 0;
    const int64_t max_blocks = SOFTCAP_MAX_BLOCKS, blocks = (n / 4 + SOFTCAP_THREADS - 1) / SOFTCAP_THREADS;
    gmc_launch(softcap_kernel, (unsigned)(blocks < 1 ? 1 : blocks > max_blocks ? max_blocks : blocks),
               SOFTCAP_THREADS, 0, stream, z, n, c);
    return gmc_check_launch("softcap");
}
