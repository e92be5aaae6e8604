/* test_cuda_ops.c: every op of kernels/cuda (ops_cuda.h) against the scalar oracle of kernels/ref on fresh
 * random inputs of several shapes (every supported weight type; n = 1, 3, 8, 64 columns; head dims 128, 256,
 * 512; 8/2, 8/1, 4/1 heads; full and sliding-window ring caches of f16 and f32). Outputs are poisoned with NaN
 * before each run, so an unwritten element fails, and NaN never passes. Also the Gemma 4 / 3n ops (scale,
 * add_scale, mul_rows, transpose, rms_match, sparsity_gate, AltUp, mixture of experts) and the one-warp
 * attention of head dims 16-64, and the activation quantizers (q8_0 / q8_K bytes identical to the CPU
 * reference's, edge values included). Exits 77 (skipped) with the reason
 * when there is no CUDA device; CI builds it but only a GPU machine runs it. Tolerances are stated per check. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "cuda/ops_cuda.h"
#include "kv/kv_cache.h"
#include "quant/fp16.h"
#include "quant/quant.h"
#include "quant/quant_blocks.h"
#include "ref/ops_ref.h"
#include "test_rng.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static float frand(void) { return test_frand(&rng_state); } /* uniform in [-1, 1) */
static uint32_t urand(uint32_t n) { return (uint32_t)(((frand() + 1.0f) * 0.5f) * (float)n) % n; }

#define CK(call)                                                                                            \
    do {                                                                                                    \
        const int rc_ = (call);                                                                             \
        if (rc_ != 0) fail_msg("%s -> %d: %s", #call, rc_, gm_cuda_last_error());                           \
    } while (0)
#define CU(call)                                                                                            \
    do {                                                                                                    \
        const cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(e_));                           \
    } while (0)

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CU(cudaMalloc(&p, bytes + 16)); /* +16: ops_cuda.h asks for readable padding past weights */
    CU(cudaMemset(p, 0, bytes + 16));
    return p;
}
static void *dev_upload(const void *host, size_t bytes) {
    void *p = dev_alloc(bytes);
    CU(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
    return p;
}
static void dev_poison(void *p, size_t bytes) { CU(cudaMemset(p, 0xFF, bytes)); } /* 0xFFFFFFFF is a NaN */
static void dev_download(void *host, const void *p, size_t bytes) {
    CU(cudaDeviceSynchronize());
    CU(cudaGetLastError());
    CU(cudaMemcpy(host, p, bytes, cudaMemcpyDeviceToHost));
}

/* Asserts |got - want| <= tol[i] for every element, NaN never passing; prints the first offender. */
static void expect_close(const char *what, const float *got, const double *want, const double *tol, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= tol[i]))
            fail_msg("%s: element %zu: got %.9g, want %.9g (tolerance %.3g)", what, i, got[i], want[i], tol[i]);
}

static const int k_types[] = {GM_TYPE_F32, GM_TYPE_F16, GM_TYPE_BF16, GM_TYPE_Q4_0, GM_TYPE_Q5_0,
                              GM_TYPE_Q8_0, GM_TYPE_Q4_K, GM_TYPE_Q5_K, GM_TYPE_Q6_K};
enum { N_TYPES = sizeof k_types / sizeof k_types[0] };

static bool is_quant(int t) { return t != GM_TYPE_F32 && t != GM_TYPE_F16 && t != GM_TYPE_BF16; }

/* A random matrix of rows of K values quantized with the reference quantizer, and its reference dequantization. */
typedef struct host_mat {
    uint8_t *q;
    float *deq; /* [M][K] */
    uint64_t row_bytes;
} host_mat;

static host_mat make_mat(int type, int64_t K, int64_t M, float amp) {
    const gm_type_traits *tt = gm_type_traits_of(type);
    host_mat h = {.row_bytes = gm_row_bytes(tt, K)};
    h.q = malloc(h.row_bytes * M);
    h.deq = malloc(sizeof(float) * K * M);
    float *row = malloc(sizeof(float) * K);
    for (int64_t m = 0; m < M; m++) {
        const float rowamp = amp * (0.25f + 0.75f * fabsf(frand()));
        for (int64_t j = 0; j < K; j++) row[j] = frand() * rowamp;
        tt->quantize(row, h.q + m * h.row_bytes, K);
        tt->dequantize(h.q + m * h.row_bytes, h.deq + m * K, K);
    }
    free(row);
    return h;
}
static void free_mat(host_mat *h) { free(h->q), free(h->deq); }

/* ---- activation quantization: the GPU's bytes are the CPU reference's (quantize_act of the vec_dot_type) ---- */

/* Fills a row of K values (K a multiple of 256) with random values and, per 256-value stretch, one edge case:
 * zeros, exact .5 ties after scaling (amax 127 / max ±127, so the scale is ±1), opposite-signed ties for the
 * largest |x| (the first one must win), huge (the q8_0 d overflows f16 to inf) and tiny magnitudes, -0.0. */
static void fill_edge_row(float *x, int64_t K, int variant) {
    for (int64_t j = 0; j < K; j++) x[j] = frand() * (j % 7 == 0 ? 4.0f : 1.0f);
    for (int64_t b = 0; b < K / 256; b++) {
        float *v = x + 256 * b;
        switch ((b + variant) % 9) {
        case 0: for (int j = 0; j < 256; j++) v[j] = 0.0f; break;            /* all zero */
        case 1: for (int j = 0; j < 32; j++) v[j] = 0.0f; break;             /* one zero q8_0 block */
        case 2:                                                               /* ties: scale exactly 1 */
            for (int j = 0; j < 256; j++) v[j] = (float)((int)urand(253) - 126) + 0.5f;
            for (int q = 0; q < 8; q++) v[32 * q + urand(32)] = 127.0f;       /* amax 127 in every 32 */
            break;
        case 3:                                                               /* ties, max -127 first */
            for (int j = 0; j < 256; j++) v[j] = (float)((int)urand(253) - 126) + 0.5f;
            v[5] = -127.0f, v[200] = 127.0f;
            for (int q = 0; q < 8; q++) v[32 * q + 7] = q & 1 ? 127.0f : -127.0f;
            break;
        case 4: v[9] = 3.0f, v[3] = -3.0f; for (int j = 0; j < 256; j++) if (j != 3 && j != 9) v[j] *= 0.5f; break;
        case 5: for (int j = 0; j < 256; j++) v[j] *= 5.0e37f; break;         /* huge: q8_0's f16 d is inf */
        case 6: for (int j = 0; j < 256; j++) v[j] *= 1.0e6f; break;
        case 7: for (int j = 0; j < 256; j++) v[j] *= 1.0e-30f; break;        /* tiny, still normal */
        default: for (int j = 0; j < 256; j += 3) v[j] = -0.0f; break;
        }
    }
}

static void run_act_quant(int act_type, int64_t K, int n, int variant) {
    const gm_type_traits *vt = gm_type_traits_of(act_type);
    const int64_t qk = vt->block_size, nb = K / qk;
    float *x = malloc(sizeof(float) * K * n);
    for (int c = 0; c < n; c++) fill_edge_row(x + (int64_t)c * K, K, variant + c);
    float *dx = dev_upload(x, sizeof(float) * K * n);
    const size_t sb = gm_cuda_matmul_scratch_bytes(K, n);
    uint8_t *dq = dev_alloc(sb), *hq = malloc(sb);
    dev_poison(dq, sb);
    CK(gm_cuda_quantize_act(dx, K, n, act_type, dq, NULL));
    dev_download(hq, dq, sb);
    const int8_t *gq = (const int8_t *)hq;
    const float *gd = (const float *)(hq + ((size_t)n * K + 15) / 16 * 16);
    uint8_t *cq = malloc(gm_row_bytes(vt, K));
    for (int c = 0; c < n; c++) {
        vt->quantize_act(x + (int64_t)c * K, cq, K);
        for (int64_t b = 0; b < nb; b++) {
            const int8_t *cqs;
            float cd;
            if (act_type == GM_TYPE_Q8_0) {
                const gm_block_q8_0 *blk = (const gm_block_q8_0 *)cq + b;
                cqs = blk->qs, cd = gm_f16_to_f32(blk->d);
            } else {
                const gm_block_q8_K *blk = (const gm_block_q8_K *)cq + b;
                cqs = blk->qs, cd = blk->d;
                for (int k = 0; k < 16; k++) { /* the CPU's bsums follow from the same q */
                    int s16 = 0;
                    for (int l = 0; l < 16; l++) s16 += gq[(int64_t)c * K + b * qk + 16 * k + l];
                    if (s16 != blk->bsums[k]) fail_msg("q8_K column %d block %lld: bsum %d: %d vs CPU %d", c, (long long)b, k, s16, blk->bsums[k]);
                }
            }
            const float g = gd[(int64_t)c * nb + b];
            uint32_t gbits, cbits;
            memcpy(&gbits, &g, 4), memcpy(&cbits, &cd, 4);
            if (gbits != cbits)
                fail_msg("%s K=%lld column %d block %lld: d %.9g (0x%08x) vs CPU %.9g (0x%08x)", vt->name, (long long)K,
                         c, (long long)b, g, gbits, cd, cbits);
            if (memcmp(gq + (int64_t)c * K + b * qk, cqs, (size_t)qk) != 0)
                for (int j = 0; j < qk; j++)
                    if (gq[(int64_t)c * K + b * qk + j] != cqs[j])
                        fail_msg("%s K=%lld column %d block %lld element %d: q %d vs CPU %d (x = %.9g)", vt->name,
                                 (long long)K, c, (long long)b, j, gq[(int64_t)c * K + b * qk + j], cqs[j],
                                 x[(int64_t)c * K + b * qk + j]);
        }
    }
    free(x), free(hq), free(cq);
    CU(cudaFree(dx)); CU(cudaFree(dq));
}

static void test_act_quant(void **state) {
    (void)state;
    static const int64_t Ks[] = {256, 2560, 10240};
    static const int ns[] = {1, 3, 8};
    int cases = 0;
    for (int t = 0; t < 2; t++)
        for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++)
            for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
                for (int v = 0; v < 9; v += (Ks[k] >= 2560 ? 9 : 1))
                    run_act_quant(t ? GM_TYPE_Q8_K : GM_TYPE_Q8_0, Ks[k], ns[i], v), cases++;
    /* the activation type each weight type gets is the CPU's vec_dot_type */
    for (int ti = 0; ti < N_TYPES; ti++) {
        const gm_type_traits *tt = gm_type_traits_of(k_types[ti]);
        const int want = is_quant(k_types[ti]) ? (int)tt->vec_dot_type : -1;
        if (gm_cuda_act_type(k_types[ti]) != want)
            fail_msg("act type of %s: %d, CPU vec_dot_type %d", tt->name, gm_cuda_act_type(k_types[ti]), want);
    }
    printf("[ cuda     ] activation quantization: %d cases, q8_0 and q8_K bytes identical to the CPU reference\n", cases);
}

/* ---- matmul ---- */

static double g_mm_err_exact[GM_TYPE_COUNT]; /* max over runs of ‖y_gpu - y_exact‖ / ‖y_exact‖ */
static double g_mm_err_cpu[GM_TYPE_COUNT];   /* the same for the CPU reference path (ref vec_dot) */
static double g_mm_err_gc[GM_TYPE_COUNT];    /* max ‖y_gpu - y_cpu‖ / ‖y_cpu‖ */

static void run_matmul(int type, int64_t K, int64_t M, int n) {
    const gm_type_traits *tt = gm_type_traits_of(type);
    host_mat h = make_mat(type, K, M, 1.0f);
    float *x = malloc(sizeof(float) * K * n);
    for (int64_t i = 0; i < K * n; i++) x[i] = frand() * (i % 7 == 0 ? 4.0f : 1.0f);
    void *dw = dev_upload(h.q, h.row_bytes * M);
    float *dx = dev_upload(x, sizeof(float) * K * n);
    float *dy = dev_alloc(sizeof(float) * M * n);
    const size_t sb = gm_cuda_matmul_scratch_bytes(K, n);
    void *ds = sb ? dev_alloc(sb) : NULL;
    const gm_cuda_mat w = {.type = type, .ne0 = K, .ne1 = M, .row_bytes = h.row_bytes, .data = dw};
    dev_poison(dy, sizeof(float) * M * n);
    CK(gm_cuda_matmul(&w, dx, n, dy, ds, sb, NULL));
    float *y = malloc(sizeof(float) * M * n);
    dev_download(y, dy, sizeof(float) * M * n);

    /* 1. Tight: the same function in double. Quantized types: dequantized weights (reference) times the CPU's
     *    own quantized activations (quantize_act of the vec_dot_type, dequantized: the GPU's are the same bytes,
     *    test_act_quant); float types: times x. Only float rounding of the sums differs: tolerance
     *    2e-5 · Σ|w·x̂| + 1e-6 (2560-term f32 sums stay under 1e-5 relative to that). The GPU result must also
     *    match the CPU reference path (the ref vec_dot on the same quantized activations) to that tolerance;
     *    before the GPU quantized as the CPU does, the two differed by ~1% (8-bit rounding of other blocks). */
    double *xh = malloc(sizeof(double) * K), *want = malloc(sizeof(double) * M), *tol = malloc(sizeof(double) * M);
    double *exact = malloc(sizeof(double) * M), *cpu_d = malloc(sizeof(double) * M);
    float *cpu = malloc(sizeof(float) * M), *xdq = malloc(sizeof(float) * K);
    const gm_type_traits *vt = gm_type_traits_of(tt->vec_dot_type);
    uint8_t *xq = malloc(gm_row_bytes(vt, K));
    double e2 = 0, c2 = 0, r2 = 0, g2 = 0, p2 = 0;
    for (int c = 0; c < n; c++) {
        const float *xc = x + (int64_t)c * K;
        (vt->quantize_act ? vt->quantize_act : vt->quantize)(xc, xq, K);
        if (is_quant(type)) {
            vt->dequantize(xq, xdq, K);
            for (int64_t j = 0; j < K; j++) xh[j] = xdq[j];
        } else {
            for (int64_t j = 0; j < K; j++) xh[j] = xc[j];
        }
        for (int64_t m = 0; m < M; m++) {
            const float *wr = h.deq + m * K;
            double s = 0, a = 0, ex = 0;
            for (int64_t j = 0; j < K; j++) {
                s += (double)wr[j] * xh[j];
                a += fabs((double)wr[j] * xh[j]);
                ex += (double)wr[j] * xc[j];
            }
            want[m] = s, tol[m] = 2e-5 * a + 1e-6, exact[m] = ex;
            tt->vec_dot(K, &cpu[m], h.q + m * h.row_bytes, xq);
            cpu_d[m] = cpu[m];
        }
        char what[112];
        snprintf(what, sizeof what, "matmul %s K=%lld M=%lld n=%d column %d", tt->name, (long long)K, (long long)M, n, c);
        expect_close(what, y + (int64_t)c * M, want, tol, (size_t)M);
        snprintf(what, sizeof what, "matmul %s K=%lld M=%lld n=%d column %d vs CPU vec_dot", tt->name, (long long)K,
                 (long long)M, n, c);
        if (is_quant(type)) expect_close(what, y + (int64_t)c * M, cpu_d, tol, (size_t)M);
        for (int64_t m = 0; m < M; m++) {
            const double g = y[(int64_t)c * M + m];
            e2 += (g - exact[m]) * (g - exact[m]);
            c2 += (cpu[m] - exact[m]) * (cpu[m] - exact[m]);
            r2 += exact[m] * exact[m];
            g2 += (g - cpu[m]) * (g - cpu[m]);
            p2 += (double)cpu[m] * cpu[m];
        }
    }
    /* 2. Loose, against the exact product of the f32 activations: the 8-bit activations cost ~0.5-1% (rms),
     *    the same on both backends. Bound: 3% (float types 1e-5). And GPU vs CPU reference path, in norm:
     *    1e-5 for quantized types (they share every integer; float types: the CPU rounds bf16 activations). */
    const double rel = sqrt(e2 / r2), rel_cpu = sqrt(c2 / r2), rel_gc = p2 > 0 ? sqrt(g2 / p2) : sqrt(g2);
    if (rel > g_mm_err_exact[type]) g_mm_err_exact[type] = rel;
    if (rel_cpu > g_mm_err_cpu[type]) g_mm_err_cpu[type] = rel_cpu;
    if (rel_gc > g_mm_err_gc[type]) g_mm_err_gc[type] = rel_gc;
    if (!(rel <= (is_quant(type) ? 3e-2 : 1e-5)))
        fail_msg("matmul %s K=%lld M=%lld n=%d: relative error vs exact %.3g", tt->name, (long long)K, (long long)M, n, rel);
    if (is_quant(type) && !(rel_gc <= 1e-5))
        fail_msg("matmul %s K=%lld M=%lld n=%d: relative difference GPU vs CPU path %.3g", tt->name, (long long)K,
                 (long long)M, n, rel_gc);
    free(xh), free(want), free(tol), free(exact), free(cpu_d), free(cpu), free(xdq), free(xq), free(x), free(y);
    free_mat(&h);
    CU(cudaFree(dw)); CU(cudaFree(dx)); CU(cudaFree(dy));
    if (ds) CU(cudaFree(ds));
}

static void test_matmul(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{256, 7}, {1024, 130}, {2560, 257}, {512, 1000}};
    static const int ns[] = {1, 3, 8, 64};
    int cases = 0;
    for (int ti = 0; ti < N_TYPES; ti++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                run_matmul(k_types[ti], shapes[s][0], shapes[s][1], ns[ni]);
                cases++;
            }
        if (!is_quant(k_types[ti])) { /* rows not a multiple of 8: the scalar-load kernel */
            run_matmul(k_types[ti], 100, 33, 1), run_matmul(k_types[ti], 100, 33, 5);
            /* f32: a row split over a block's warps from K = 1024 (the MoE router's 2816 x 128), aligned or not */
            run_matmul(k_types[ti], 2816, 128, 1), run_matmul(k_types[ti], 1030, 33, 3);
            cases += 4;
        }
    }
    /* every rows-per-warp variant, with and without programmatic dependent launch, on one shape per type (K =
     * 1280: 40 or 80 items per row) */
    for (int r = 1; r <= 4; r *= 2)
        for (int pdl = 0; pdl <= 1; pdl++) {
            gm_cuda_set_mmv_rows(r);
            gm_cuda_set_pdl(pdl);
            for (int ti = 0; ti < N_TYPES; ti++) run_matmul(k_types[ti], 1280, 37, 1 + urand(8)), cases++;
        }
    gm_cuda_set_mmv_rows(0);
    gm_cuda_set_pdl(-1);
    /* rows split over 2 or 4 warps of a block (f32 and quantized weights; the others ignore it) */
    for (int ks = 2; ks <= 4; ks += 2) {
        gm_cuda_set_mmv_split(ks, 0);
        for (int ti = 0; ti < N_TYPES; ti++)
            for (int nn = 1; nn <= 8; nn += 7)
                run_matmul(k_types[ti], 1280, 37, nn), run_matmul(k_types[ti], 256, 7, nn), cases += 2;
    }
    gm_cuda_set_mmv_split(0, 0);
    printf("[ cuda     ] matmul: %d cases pass; relative error vs exact f32 product (GPU / CPU reference path), "
           "GPU vs CPU reference path:\n", cases);
    for (int ti = 0; ti < N_TYPES; ti++)
        printf("[ cuda     ]   %-5s %.2e / %.2e   %.2e\n", gm_type_traits_of(k_types[ti])->name,
               g_mm_err_exact[k_types[ti]], g_mm_err_cpu[k_types[ti]], g_mm_err_gc[k_types[ti]]);
}

/* ---- get_rows, gather ---- */
static void test_get_rows_gather(void **state) {
    (void)state;
    int cases = 0;
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int di = 0; di < 2; di++) {
            const int type = k_types[ti];
            const int64_t d = di ? 2560 : 256, rows = 50;
            const int n = 7;
            host_mat h = make_mat(type, d, rows, 3.0f);
            int32_t ids[7];
            for (int i = 0; i < n; i++) ids[i] = (int32_t)urand((uint32_t)rows);
            ids[0] = (int32_t)rows - 1;
            ids[1] = (int32_t)rows + 5, ids[2] = -1; /* outside the table: row 0 */
            const float scale = di ? sqrtf(2560.0f) : 0.7f;
            void *dt = dev_upload(h.q, h.row_bytes * rows);
            int32_t *dids = dev_upload(ids, sizeof ids);
            float *dout = dev_alloc(sizeof(float) * n * d);
            dev_poison(dout, sizeof(float) * n * d);
            const gm_cuda_mat t = {.type = type, .ne0 = d, .ne1 = rows, .row_bytes = h.row_bytes, .data = dt};
            CK(gm_cuda_get_rows(&t, dids, n, scale, dout, NULL));
            float *out = malloc(sizeof(float) * n * d);
            dev_download(out, dout, sizeof(float) * n * d);
            /* The same float operations as the reference dequantizer, then × scale: equal up to 1e-6 relative. */
            double *want = malloc(sizeof(double) * n * d), *tol = malloc(sizeof(double) * n * d);
            for (int i = 0; i < n; i++)
                for (int64_t j = 0; j < d; j++) {
                    const int64_t id = ids[i] >= 0 && ids[i] < rows ? ids[i] : 0;
                    const float v = h.deq[id * d + j] * scale;
                    want[i * d + j] = v, tol[i * d + j] = 1e-6 * fabs(v) + 1e-30;
                }
            expect_close(gm_type_traits_of(type)->name, out, want, tol, (size_t)(n * d));

            /* gather: rows of the dequantized output, exact */
            int32_t rws[5] = {6, 0, 3, 3, 1};
            int32_t *drws = dev_upload(rws, sizeof rws);
            float *dg = dev_alloc(sizeof(float) * 5 * d);
            dev_poison(dg, sizeof(float) * 5 * d);
            CK(gm_cuda_gather(dout, (int32_t)d, drws, 5, dg, NULL));
            float *g = malloc(sizeof(float) * 5 * d);
            dev_download(g, dg, sizeof(float) * 5 * d);
            for (int i = 0; i < 5; i++) assert_memory_equal(g + i * d, out + rws[i] * d, sizeof(float) * d);
            free(out), free(want), free(tol), free(g);
            free_mat(&h);
            CU(cudaFree(dt)); CU(cudaFree(dids)); CU(cudaFree(dout)); CU(cudaFree(drws)); CU(cudaFree(dg));
            cases++;
        }
    printf("[ cuda     ] get_rows + gather: %d cases pass (tolerance 1e-6 relative; gather exact)\n", cases);
}

/* ---- rmsnorm, rmsnorm_add ---- */
static void test_rmsnorm(void **state) {
    (void)state;
    /* rows in registers (up to 1024 threads × 8 values: 2816 is 3 a thread on 939 → 960 threads, 8192 the
     * largest) and the looping kernel past that (8193, 10240) */
    static const int ds[] = {7, 256, 1000, 1025, 2560, 2816, 5376, 8192, 8193, 10240};
    int cases = 0;
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
        for (int variant = 0; variant < 4; variant++) { /* 0 weight, 1 no weight, 2 in place, 3 add */
            const int d = ds[di], rows = 1 + (int)urand(5);
            const size_t nb = sizeof(float) * d * rows;
            float *x = malloc(nb), *w = malloc(sizeof(float) * d), *acc = malloc(nb), *y = malloc(nb);
            for (int i = 0; i < d * rows; i++) x[i] = frand() * 50.0f, acc[i] = frand();
            for (int i = 0; i < d; i++) w[i] = 1.0f + frand();
            float *dx = dev_upload(x, nb), *dw = dev_upload(w, sizeof(float) * d), *dacc = dev_upload(acc, nb);
            float *dy = dev_alloc(nb);
            if (variant == 3) {
                CK(gm_cuda_rmsnorm_add(dacc, dx, rows, d, dw, 1e-6f, NULL));
                dev_download(y, dacc, nb);
            } else if (variant == 2) {
                CK(gm_cuda_rmsnorm(dx, dx, rows, d, dw, 1e-6f, NULL));
                dev_download(y, dx, nb);
            } else {
                dev_poison(dy, nb);
                CK(gm_cuda_rmsnorm(dx, dy, rows, d, variant == 1 ? NULL : dw, 1e-6f, NULL));
                dev_download(y, dy, nb);
            }
            /* tolerance: f32 sum of squares vs the reference's double: 1e-5 relative (+1e-6 absolute) */
            double *want = malloc(sizeof(double) * d * rows), *tol = malloc(sizeof(double) * d * rows);
            float *ref = malloc(sizeof(float) * d);
            for (int r = 0; r < rows; r++) {
                gm_ref_rmsnorm(x + r * d, ref, d, variant == 1 ? NULL : w, 1e-6f);
                for (int i = 0; i < d; i++) {
                    const double v = variant == 3 ? (double)acc[r * d + i] + ref[i] : ref[i];
                    want[r * d + i] = v, tol[r * d + i] = 1e-5 * fabs(ref[i]) + 1e-6;
                }
            }
            expect_close(variant == 3 ? "rmsnorm_add" : "rmsnorm", y, want, tol, (size_t)d * rows);
            free(x), free(w), free(acc), free(y), free(want), free(tol), free(ref);
            CU(cudaFree(dx)); CU(cudaFree(dw)); CU(cudaFree(dacc)); CU(cudaFree(dy));
            cases++;
        }
    printf("[ cuda     ] rmsnorm / rmsnorm_add: %d cases pass (tolerance 1e-5 relative)\n", cases);
}

/* ---- RoPE ---- */
static void test_rope(void **state) {
    (void)state;
    int cases = 0;
    for (int hd = 128; hd <= 512; hd *= 2)
        for (int variant = 0; variant < 5; variant++) {
            /* 0: full rotation; 1: n_rot = hd/2 (partial); 2: proportional (freq_factors, 1e30 = none); 3: freq_scale
             * and output scale; 4: factors and scale */
            const int n = 3, n_head = variant % 2 ? 2 : 8, n_rot = variant == 1 ? hd / 2 : hd;
            const float base = variant >= 2 ? 1e6f : 10000.0f, fs = variant == 3 ? 0.125f : 1.0f;
            const float scale = variant >= 3 ? 0.0625f : 1.0f;
            float *ff = NULL;
            if (variant == 2 || variant == 4) {
                ff = malloc(sizeof(float) * n_rot / 2);
                for (int i = 0; i < n_rot / 2; i++) ff[i] = i < n_rot / 8 ? 1.0f : i < n_rot / 4 ? 1.5f : 1e30f;
            }
            int32_t pos[3] = {0, 17 + (int32_t)urand(100), 4000 + (int32_t)urand(1000)};
            const size_t nv = (size_t)n * n_head * hd;
            float *x = malloc(sizeof(float) * nv), *y = malloc(sizeof(float) * nv);
            for (size_t i = 0; i < nv; i++) x[i] = frand();
            float *dx = dev_upload(x, sizeof(float) * nv);
            int32_t *dpos = dev_upload(pos, sizeof pos);
            float *dff = ff ? dev_upload(ff, sizeof(float) * n_rot / 2) : NULL;
            CK(gm_cuda_rope(dx, n, n_head, hd, dpos, n_rot, base, fs, dff, scale, NULL));
            dev_download(y, dx, sizeof(float) * nv);
            /* Same angles as the reference (same float products); sin/cos within a few ulp: 2e-5 absolute on
             * values of magnitude <= 1.5. */
            double *want = malloc(sizeof(double) * nv), *tol = malloc(sizeof(double) * nv);
            for (int t = 0; t < n; t++)
                for (int h = 0; h < n_head; h++) {
                    float r[512];
                    const size_t off = ((size_t)t * n_head + h) * hd;
                    memcpy(r, x + off, sizeof(float) * hd);
                    gm_ref_rope_neox(r, n_rot, (float)pos[t], base, fs, ff);
                    for (int i = 0; i < hd; i++) want[off + i] = (double)(r[i] * scale), tol[off + i] = 2e-5;
                }
            expect_close("rope", y, want, tol, nv);
            free(x), free(y), free(want), free(tol), free(ff);
            CU(cudaFree(dx)); CU(cudaFree(dpos));
            if (dff) CU(cudaFree(dff));
            cases++;
        }
    printf("[ cuda     ] rope: %d cases pass (tolerance 2e-5 absolute)\n", cases);
}

/* ---- GeGLU, softcap ---- */
static void test_gelu_softcap(void **state) {
    (void)state;
    const int64_t n = 40000 + urand(1000);
    float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n), *o = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) g[i] = frand() * (i % 5 ? 4.0f : 40.0f), u[i] = frand() * 3.0f;
    float *dg = dev_upload(g, sizeof(float) * n), *du = dev_upload(u, sizeof(float) * n);
    CK(gm_cuda_gelu_mul(dg, du, n, NULL));
    dev_download(o, dg, sizeof(float) * n);
    /* tanhf on the GPU is within 2 ulp of the host's: 1e-5 relative + 1e-6 absolute */
    double *want = malloc(sizeof(double) * n), *tol = malloc(sizeof(double) * n);
    for (int64_t i = 0; i < n; i++) {
        const float v = gm_ref_gelu_tanh(g[i]) * u[i];
        want[i] = v, tol[i] = 1e-5 * fabs(v) + 1e-6;
    }
    expect_close("gelu_mul", o, want, tol, (size_t)n);
    for (int64_t i = 0; i < n; i++) g[i] = frand() * (i % 3 ? 30.0f : 3000.0f);
    CU(cudaMemcpy(dg, g, sizeof(float) * n, cudaMemcpyHostToDevice));
    CK(gm_cuda_softcap(dg, n, 30.0f, NULL));
    dev_download(o, dg, sizeof(float) * n);
    memcpy(u, g, sizeof(float) * n);
    gm_ref_softcap(u, n, 30.0f);
    for (int64_t i = 0; i < n; i++) want[i] = u[i], tol[i] = 1e-5 * fabs(u[i]) + 1e-6;
    expect_close("softcap", o, want, tol, (size_t)n);
    /* again from one float past a 16-byte boundary (values before it and after the last float4 one by one) */
    CU(cudaMemcpy(dg, g, sizeof(float) * n, cudaMemcpyHostToDevice));
    CK(gm_cuda_softcap(dg + 1, n - 1, 30.0f, NULL));
    dev_download(o, dg, sizeof(float) * n);
    want[0] = g[0], tol[0] = 0;
    expect_close("softcap (unaligned)", o, want, tol, (size_t)n);
    free(g), free(u), free(o), free(want), free(tol);
    CU(cudaFree(dg)); CU(cudaFree(du));
    printf("[ cuda     ] gelu_mul, softcap (aligned and not): pass on %lld values (tolerance 1e-5 relative)\n",
           (long long)n);
}

/* ---- KV store + attention ---- */
typedef struct attn_case {
    int n_head, n_head_kv, hd, kv_type, window, n_tokens, same_seq, two_runs, over_keys;
    int out_act; /* 0, or the quantized output asked for (GM_TYPE_Q8_0 / GM_TYPE_Q8_K) */
    int staged;  /* gm_cuda_set_attn_decode(2): decode launches of an f16 cache with G <= 8 take the staged kernel */
} attn_case;

static double g_staged_max_err;    /* the staged kernel's largest |error| over test_attention's f16 cases */
static double g_staged_q8_max_err; /* and over its q8_0 cases */

/* Asserts n bytes equal, naming the first that differs. */
static void expect_bytes_equal(const char *what, const uint8_t *got, const uint8_t *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("%s: byte %zu of %zu: 0x%02x, want 0x%02x", what, i, n, got[i], want[i]);
}

/* The cache's element type as src/kv names it, from a GM_TYPE (f16, f32, q8_0). */
static gm_kv_type kv_type_of(int type) {
    return type == GM_TYPE_F16 ? GM_KV_F16 : type == GM_TYPE_F32 ? GM_KV_F32 : GM_KV_Q8_0;
}
static const char *kv_type_name(int type) {
    return type == GM_TYPE_F16 ? "f16" : type == GM_TYPE_F32 ? "f32" : "q8_0";
}

/* D values into a head row of the cache as the host stores them (the oracle of gm_cuda_kv_store's bytes). */
static void host_put_row(int type, uint8_t *dst, const float *x, int D) {
    if (type == GM_TYPE_Q8_0) gm_ref_kv_q8_store(x, D, dst);
    else if (type == GM_TYPE_F16)
        for (int j = 0; j < D; j++) ((gm_f16 *)dst)[j] = gm_f32_to_f16(x[j]);
    else memcpy(dst, x, sizeof(float) * (size_t)D);
}

static void run_attention(const attn_case *c) {
    enum { MAX_T = 64 };
    const int n_seq = 2, n_batch = MAX_T, D = c->hd, hkv = c->n_head_kv, nh = c->n_head, G = nh / hkv;
    const int ring = c->window > 0, n_slots = ring ? c->window + n_batch : 1100;
    const size_t row = (size_t)hkv * D, hb = gm_kv_head_bytes(kv_type_of(c->kv_type), D);
    const size_t cache_rows = (size_t)n_seq * n_slots * hkv, cache_bytes = cache_rows * hb;
    /* the cache before the batch: random everywhere (as if earlier tokens were stored) */
    uint8_t *kc = malloc(cache_bytes), *vc = malloc(cache_bytes);
    {
        float *a = malloc(sizeof(float) * 2 * (size_t)D), *b = a + D;
        for (size_t r = 0; r < cache_rows; r++) {
            for (int j = 0; j < D; j++) a[j] = frand(), b[j] = frand();
            host_put_row(c->kv_type, kc + r * hb, a, D);
            host_put_row(c->kv_type, vc + r * hb, b, D);
        }
        free(a);
    }
    /* the batch: decode (one token per sequence), a run of consecutive positions in one sequence, or two runs
     * (sequence 0 then 1: tiles of the split kernel must not mix them) */
    const int T = c->n_tokens;
    assert_true(T <= MAX_T);
    int32_t pos[MAX_T], seq[MAX_T];
    /* positions of one sequence in a batch are distinct (t mod 4 differs), so no two tokens share a slot */
    const int p0 = ring ? 4 * (175 + (int)urand(75)) : 4 * (10 + (int)urand(250));
    const int p1 = ring ? 4 * (175 + (int)urand(75)) : 4 * (10 + (int)urand(250));
    for (int t = 0; t < T; t++) {
        if (c->two_runs) {
            seq[t] = t < 20 ? 0 : 1;
            pos[t] = t < 20 ? p0 + t : p1 + t - 20;
        } else {
            seq[t] = c->same_seq ? 1 : t % n_seq;
            pos[t] = c->same_seq ? p0 + t : t == 0 ? p0 : 4 * (int)urand(ring ? 500 : 250) + t;
        }
    }
    int32_t tile = 0, max_keys = 0;
    gm_cuda_attention_plan(T, pos, seq, c->window, nh, hkv, D, &tile, &max_keys);
    const bool split_shape = (D == 128 || D == 256 || D == 512) && (G == 1 || G == 2 || G == 4 || G == 8 || G == 16);
    if (split_shape && G < 16 && T >= 8 && (c->same_seq || (c->two_runs && 20 % (16 / G) == 0)))
        assert_int_equal(tile, 16 / G); /* the tiled kernel is what this case tests */
    if (c->over_keys) max_keys = 4096;
    const size_t qn = (size_t)T * nh * D;
    float *q = malloc(sizeof(float) * qn), *k = malloc(sizeof(float) * T * row), *v = malloc(sizeof(float) * T * row);
    for (size_t i = 0; i < qn; i++) q[i] = frand() * 0.2f;
    for (size_t i = 0; i < T * row; i++) k[i] = frand(), v[i] = frand();

    void *dk = dev_upload(kc, cache_bytes), *dv = dev_upload(vc, cache_bytes);
    float *dq = dev_upload(q, sizeof(float) * qn), *dkn = dev_upload(k, sizeof(float) * T * row);
    float *dvn = dev_upload(v, sizeof(float) * T * row), *dout = dev_alloc(sizeof(float) * qn);
    int32_t *dpos = dev_upload(pos, sizeof(int32_t) * T), *dseq = dev_upload(seq, sizeof(int32_t) * T);
    const gm_cuda_kv kv = {.type = c->kv_type, .n_slots = n_slots, .ring = ring, .n_head_kv = hkv, .head_dim = D,
                           .k = dk, .v = dv};
    const size_t sb = gm_cuda_attention_scratch_bytes(T, nh, hkv, D, max_keys, tile);
    void *dscr = sb ? dev_alloc(sb) : NULL; /* zeroed once, as ops_cuda.h asks (its counters) */
    const int64_t K = (int64_t)nh * D;      /* output values per token */
    const size_t qb = c->out_act ? gm_cuda_matmul_scratch_bytes(K, T) : 0;
    uint8_t *dqo = qb ? dev_alloc(qb) : NULL, *dqref = qb ? dev_alloc(qb) : NULL;
    CK(gm_cuda_kv_store(&kv, dkn, dvn, T, dpos, dseq, NULL));
    const gm_cuda_attn a = {.kv = &kv, .n_tokens = T, .pos = dpos, .seq = dseq, .n_head = nh, .window = c->window,
                            .max_keys = max_keys, .tile_tokens = tile, .q = dq, .out = dout,
                            .out_act_type = c->out_act, .out_q = dqo};
    /* twice on the same scratch: the first launch must leave its counters zero for the second, which must then
     * produce the same bytes */
    float *out = malloc(sizeof(float) * qn), *out2 = malloc(sizeof(float) * qn);
    uint8_t *hq = qb ? malloc(qb) : NULL, *hq2 = qb ? malloc(qb) : NULL, *hqref = qb ? malloc(qb) : NULL;
    for (int run = 0; run < 2; run++) {
        dev_poison(dout, sizeof(float) * qn);
        if (qb) dev_poison(dqo, qb);
        CK(gm_cuda_attention(&a, dscr, sb, NULL));
        dev_download(run ? out2 : out, dout, sizeof(float) * qn);
        if (qb) dev_download(run ? hq2 : hq, dqo, qb);
    }
    char what[160];
    snprintf(what, sizeof what, "attention %d/%d D=%d %s window=%d T=%d tile=%d%s%s", nh, hkv, D,
             kv_type_name(c->kv_type), c->window, T, tile, c->two_runs ? " (two runs)" : "",
             c->over_keys ? " (max_keys 4096)" : "");
    char what2[200];
    snprintf(what2, sizeof what2, "%s: second launch's output", what);
    expect_bytes_equal(what2, (const uint8_t *)out2, (const uint8_t *)out, sizeof(float) * qn);
    if (qb) { /* the quantized output: gm_cuda_quantize_act's bytes on the f32 output (both buffers poisoned alike) */
        dev_poison(dqref, qb);
        CK(gm_cuda_quantize_act(dout, K, T, c->out_act, dqref, NULL));
        dev_download(hqref, dqref, qb);
        snprintf(what2, sizeof what2, "%s: %s output", what, c->out_act == GM_TYPE_Q8_K ? "q8_K" : "q8_0");
        expect_bytes_equal(what2, hq, hqref, qb);
        snprintf(what2, sizeof what2, "%s: second launch's %s output", what, c->out_act == GM_TYPE_Q8_K ? "q8_K" : "q8_0");
        expect_bytes_equal(what2, hq2, hqref, qb);
    }

    /* the store on the host, then the cache must be byte-identical */
    for (int t = 0; t < T; t++) {
        const size_t r0 = ((size_t)seq[t] * n_slots + (ring ? pos[t] % n_slots : pos[t])) * hkv;
        for (int h = 0; h < hkv; h++) {
            host_put_row(c->kv_type, kc + (r0 + h) * hb, k + t * row + (size_t)h * D, D);
            host_put_row(c->kv_type, vc + (r0 + h) * hb, v + t * row + (size_t)h * D, D);
        }
    }
    uint8_t *back = malloc(cache_bytes);
    dev_download(back, dk, cache_bytes);
    expect_bytes_equal("kv_store: K cache", back, kc, cache_bytes);
    dev_download(back, dv, cache_bytes);
    expect_bytes_equal("kv_store: V cache", back, vc, cache_bytes);

    /* the oracle: gm_ref_attention_group (f16 cache) / _f32 / _q8. Tolerance 5e-5 absolute (values in [-1, 1];
     * float softmax and sums in a different order). */
    double *want = malloc(sizeof(double) * qn), *tol = calloc(qn, sizeof(double)); /* calloc: gcc's -O3 otherwise
                                                                                       warns of reads it cannot see written */
    const int cap = 4096;
    const void **kr = malloc(sizeof(void *) * cap), **vr = malloc(sizeof(void *) * cap);
    float *scores = malloc(sizeof(float) * G * cap), *o = malloc(sizeof(float) * G * D);
    for (int t = 0; t < T; t++) {
        const int lo = ring && pos[t] - c->window + 1 > 0 ? pos[t] - c->window + 1 : 0, nk = pos[t] - lo + 1;
        for (int h = 0; h < hkv; h++) {
            for (int j = 0; j < nk; j++) {
                const int p = lo + j;
                const size_t at = (((size_t)seq[t] * n_slots + (ring ? p % n_slots : p)) * hkv + h) * hb;
                kr[j] = kc + at, vr[j] = vc + at;
            }
            const size_t qo = ((size_t)t * nh + (size_t)h * G) * D;
            if (c->kv_type == GM_TYPE_F16)
                gm_ref_attention_group(q + qo, G, (const gm_f16 *const *)kr, (const gm_f16 *const *)vr, nk, D, scores, o);
            else if (c->kv_type == GM_TYPE_Q8_0)
                gm_ref_attention_group_q8(q + qo, G, (const uint8_t *const *)kr, (const uint8_t *const *)vr, nk, D,
                                          scores, o);
            else
                gm_ref_attention_group_f32(q + qo, G, (const float *const *)kr, (const float *const *)vr, nk, D, scores, o);
            for (int i = 0; i < G * D; i++) want[qo + i] = o[i];
        }
    }
    /* the staged kernel multiplies q and the softmax weights as two f16 parts each (to ~2^-22): the same
     * tolerance; its largest error is printed */
    const bool staged = c->staged && c->kv_type != GM_TYPE_F32 && tile <= 1 && split_shape && G <= 8;
    const bool staged_q8 = staged && c->kv_type == GM_TYPE_Q8_0;
    for (size_t i = 0; i < qn; i++) tol[i] = 5e-5;
    expect_close(what, out, want, tol, qn);
    double *max_err = staged_q8 ? &g_staged_q8_max_err : staged ? &g_staged_max_err : NULL;
    if (max_err)
        for (size_t i = 0; i < qn; i++)
            if (fabs(out[i] - want[i]) > *max_err) *max_err = fabs(out[i] - want[i]);
    free(kc), free(vc), free(q), free(k), free(v), free(out), free(out2), free(back), free(want), free(tol), free(kr);
    free(vr), free(scores), free(o), free(hq), free(hq2), free(hqref);
    CU(cudaFree(dk)); CU(cudaFree(dv)); CU(cudaFree(dq)); CU(cudaFree(dkn)); CU(cudaFree(dvn)); CU(cudaFree(dout));
    CU(cudaFree(dpos)); CU(cudaFree(dseq));
    if (dscr) CU(cudaFree(dscr));
    if (qb) {
        CU(cudaFree(dqo));
        CU(cudaFree(dqref));
    }
}

static void test_attention(void **state) {
    (void)state;
    /* the last four go to the one-warp-per-head kernel (head dims and groupings the split kernel lacks) */
    static const int heads[][3] = {{8, 2, 256}, {8, 1, 512}, {8, 2, 512}, {8, 1, 256}, {4, 1, 128}, {8, 8, 256},
                                   {16, 1, 256}, {8, 8, 128}, {4, 2, 16}, {2, 1, 32}, {6, 2, 64}, {3, 1, 256}};
    /* quantized outputs, in turn over the cases: in the kernel (after one split or the merge of several), and by the
     * separate quantizer (q8_K blocks spanning two KV heads' output: 8/8 D=128; the one-warp kernel) */
    static const int acts[3] = {0, GM_TYPE_Q8_0, GM_TYPE_Q8_K};
    int cases = 0, quantized = 0;
    /* decode launches take the split kernel adding values by threads or by warps, or the staged kernel
     * (gm_cuda_set_attn_decode; the default picks by batch and block count): every case each way; the staged
     * kernel a second time with one block per SM asked for (gm_cuda_set_attn_fill(1): one split where a batch has
     * many groups, the unmerged output path) */
    for (int mode = 0; mode < 4; mode++)
    for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++)
        for (int kt = 0; kt < 3; kt++)
            for (int variant = 0; variant < 7; variant++) {
                gm_cuda_set_attn_decode(mode < 3 ? mode : 2);
                gm_cuda_set_attn_fill(mode == 3 ? 1 : 0);
                /* 0: decode of 2 sequences, full; 1: decode, sliding window 512 in a ring; 2: 5 consecutive tokens of
                 * one sequence, window 64; 3: 4 tokens, full, with a generous max_keys; 4: 37 consecutive tokens,
                 * full (tiles, the last one partial); 5: 37 tokens, window 64 (tiles in a ring; one split); 6: runs
                 * of 20 and 17 tokens of two sequences (tiles where 20 is a multiple of the tile, else one token per
                 * block) */
                static const int n_tok[7] = {2, 2, 5, 4, 37, 37, 37}, win[7] = {0, 512, 64, 0, 0, 64, 0};
                const int K = heads[hi][0] * heads[hi][2];
                int act = acts[(variant + kt + (int)hi) % 3];
                if (act == GM_TYPE_Q8_K && K % 256) act = GM_TYPE_Q8_0;
                if (act == GM_TYPE_Q8_0 && K % 32) act = 0;
                if (kt == 2 && heads[hi][2] % 32) continue; /* a q8_0 cache needs whole blocks of 32 per head */
                const attn_case c = {.n_head = heads[hi][0], .n_head_kv = heads[hi][1], .hd = heads[hi][2],
                                     .kv_type = kt == 0 ? GM_TYPE_F16 : kt == 1 ? GM_TYPE_F32 : GM_TYPE_Q8_0,
                                     .window = win[variant],
                                     .n_tokens = n_tok[variant], .same_seq = variant == 2 || variant == 4 || variant == 5,
                                     .two_runs = variant == 6, .over_keys = variant == 3, .out_act = act,
                                     .staged = mode >= 2};
                run_attention(&c);
                cases++, quantized += act != 0;
            }
    gm_cuda_set_attn_decode(-1);
    gm_cuda_set_attn_fill(0);
    printf("[ cuda     ] kv_store + attention: %d cases pass (decode by threads, by warps, staged, staged with one block per SM), each launched twice "
           "on one scratch (cache bytes exact; output tolerance 5e-5; second launch identical); %d with a quantized "
           "output, bytes equal to gm_cuda_quantize_act's; the staged kernel's largest error %.2g (f16 cache), %.2g (q8_0 "
           "cache)\n", cases, quantized, g_staged_max_err, g_staged_q8_max_err);
}


/* ---- Gemma 4 / 3n ops: each against its kernels/ref oracle (or the backend.h formula), outputs NaN-poisoned ---- */
static float *rand_vec(size_t n, float amp) {
    float *v = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) v[i] = frand() * amp;
    return v;
}

/* got vs want (float), |diff| <= rel · |want| + abs, NaN never passing. */
static void expect_vec(const char *what, const float *got, const float *want, size_t n, double rel, double abs_tol) {
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= rel * fabs(want[i]) + abs_tol))
            fail_msg("%s: element %zu: got %.9g, want %.9g", what, i, got[i], want[i]);
}

static float *dev_out(size_t n) {
    float *d = dev_alloc(sizeof(float) * n);
    dev_poison(d, sizeof(float) * n);
    return d;
}

static void test_gemma_ops(void **state) {
    (void)state;
    int cases = 0;
    static const int shapes[][2] = {{1, 64}, {5, 2048}, {33, 1000}};
    for (size_t si = 0; si < 3; si++) {
        const int rows = shapes[si][0], d = shapes[si][1];
        const size_t n = (size_t)rows * d;
        float *x = rand_vec(n, 2.0f), *y0 = rand_vec(n, 2.0f), *w = rand_vec((size_t)d, 1.5f);
        float *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
        float *dx = dev_upload(x, sizeof(float) * n), *dw = dev_upload(w, sizeof(float) * d);

        /* scale (in place) */
        float *dy = dev_upload(y0, sizeof(float) * n);
        CK(gm_cuda_scale(dy, (int64_t)n, 0.37f, NULL));
        dev_download(got, dy, sizeof(float) * n);
        for (size_t i = 0; i < n; i++) want[i] = y0[i] * 0.37f;
        expect_vec("scale", got, want, n, 0, 0), cases++;
        /* add_scale */
        CU(cudaMemcpy(dy, y0, sizeof(float) * n, cudaMemcpyHostToDevice));
        CK(gm_cuda_add_scale(dy, dx, (int64_t)n, 0.70710678f, NULL));
        dev_download(got, dy, sizeof(float) * n);
        for (size_t i = 0; i < n; i++) want[i] = (y0[i] + x[i]) * 0.70710678f;
        expect_vec("add_scale", got, want, n, 0, 0), cases++;
        /* mul_rows into a poisoned output */
        float *dz = dev_out(n);
        CK(gm_cuda_mul_rows(dx, dz, rows, d, dw, NULL));
        dev_download(got, dz, sizeof(float) * n);
        for (size_t i = 0; i < n; i++) want[i] = x[i] * w[i % d];
        expect_vec("mul_rows", got, want, n, 0, 0), cases++;
        /* rms_match: y rescaled to the rms of x */
        CU(cudaMemcpy(dy, y0, sizeof(float) * n, cudaMemcpyHostToDevice));
        CK(gm_cuda_rms_match(dy, dx, rows, d, 1e-6f, NULL));
        dev_download(got, dy, sizeof(float) * n);
        memcpy(want, y0, sizeof(float) * n);
        for (int r = 0; r < rows; r++) gm_ref_rms_match(want + (size_t)r * d, x + (size_t)r * d, d, 1e-6f);
        expect_vec("rms_match", got, want, n, 1e-6, 1e-30), cases++;
        /* sparsity_gate, k = Φ⁻¹(0.95) */
        CU(cudaMemcpy(dy, y0, sizeof(float) * n, cudaMemcpyHostToDevice));
        CK(gm_cuda_sparsity_gate(dy, rows, d, 1.6448536f, NULL));
        dev_download(got, dy, sizeof(float) * n);
        memcpy(want, y0, sizeof(float) * n);
        for (int r = 0; r < rows; r++) gm_ref_sparsity_gate(want + (size_t)r * d, d, 1.6448536f);
        expect_vec("sparsity_gate", got, want, n, 1e-6, 1e-6), cases++;
        CU(cudaFree(dy)); CU(cudaFree(dz)); CU(cudaFree(dx)); CU(cudaFree(dw));
        free(x), free(y0), free(w), free(want), free(got);
    }
    /* transpose [n0][n1][d] -> [n1][n0][d]: exact */
    {
        const int n0 = 7, n1 = 5, d = 48;
        const size_t n = (size_t)n0 * n1 * d;
        float *src = rand_vec(n, 1.0f), *got = malloc(sizeof(float) * n);
        float *ds = dev_upload(src, sizeof(float) * n), *dd = dev_out(n);
        CK(gm_cuda_transpose(ds, dd, n0, n1, d, NULL));
        dev_download(got, dd, sizeof(float) * n);
        for (int i = 0; i < n0; i++)
            for (int j = 0; j < n1; j++)
                assert_memory_equal(got + ((size_t)j * n0 + i) * d, src + ((size_t)i * n1 + j) * d, sizeof(float) * d);
        cases++;
        CU(cudaFree(ds)); CU(cudaFree(dd));
        free(src), free(got);
    }
    /* AltUp predict and correct, K = 4 streams */
    for (int ni = 0; ni < 2; ni++) {
        const int K = 4, nt = ni ? 9 : 1, d = 320;
        const size_t sn = (size_t)K * nt * d;
        float *x = rand_vec(sn, 1.0f), *c = rand_vec((size_t)nt * K * K, 0.5f), *act = rand_vec((size_t)nt * d, 1.0f);
        float *cc = rand_vec((size_t)nt * K, 0.5f), *want = malloc(sizeof(float) * sn), *got = malloc(sizeof(float) * sn);
        float *dx = dev_upload(x, sizeof(float) * sn), *dc = dev_upload(c, sizeof(float) * nt * K * K);
        float *dact = dev_upload(act, sizeof(float) * nt * d), *dcc = dev_upload(cc, sizeof(float) * nt * K);
        float *dy = dev_out(sn);
        CK(gm_cuda_altup_predict(dx, dc, dy, K, nt, d, NULL));
        dev_download(got, dy, sizeof(float) * sn);
        for (int t = 0; t < nt; t++)
            gm_ref_altup_predict(x + (size_t)t * d, (int64_t)nt * d, c + (size_t)t * K * K, want + (size_t)t * d, K, d);
        expect_vec("altup_predict", got, want, sn, 0, 0), cases++;
        dev_poison(dy, sizeof(float) * sn);
        CK(gm_cuda_altup_correct(dx, dact, dcc, dy, K, 1, nt, d, NULL));
        dev_download(got, dy, sizeof(float) * sn);
        for (int t = 0; t < nt; t++)
            gm_ref_altup_correct(x + (size_t)t * d, (int64_t)nt * d, act + (size_t)t * d, cc + (size_t)t * K,
                                 want + (size_t)t * d, K, 1, d);
        expect_vec("altup_correct", got, want, sn, 0, 0), cases++;
        CU(cudaFree(dx)); CU(cudaFree(dc)); CU(cudaFree(dact)); CU(cudaFree(dcc)); CU(cudaFree(dy));
        free(x), free(c), free(act), free(cc), free(want), free(got);
    }
    printf("[ cuda     ] scale, add_scale, mul_rows, rms_match, sparsity_gate, transpose, altup: %d cases pass "
           "(elementwise bit-exact; row reductions 1e-6 relative)\n", cases);
}

/* ---- mixture of experts: routing + chosen experts + weighted sum against gm_ref_moe_route and the dequantized
 * experts in double (f32 weights: 1e-5 relative to the output's norm; q8_0 / q4_K: 3e-2, activation rounding).
 * With ties, the logits are rounded to whole numbers, so many experts share a probability and only the
 * lower-index rule picks the reference's experts. */
static void run_moe(int type, int n, int E, int k, int64_t H, int64_t F, bool with_scale, bool ties) {
    host_mat gu = make_mat(type, H, 2 * F * E, 1.0f), dn = make_mat(type, F, H * E, 1.0f);
    float *logits = rand_vec((size_t)n * E, 3.0f), *x = rand_vec((size_t)n * H, 1.0f);
    if (ties)
        for (size_t i = 0; i < (size_t)n * E; i++) logits[i] = roundf(logits[i]);
    float *es = with_scale ? rand_vec((size_t)E, 1.0f) : NULL;
    void *dgu = dev_upload(gu.q, gu.row_bytes * 2 * F * E), *ddn = dev_upload(dn.q, dn.row_bytes * H * E);
    float *dl = dev_upload(logits, sizeof(float) * n * E), *dx = dev_upload(x, sizeof(float) * n * H);
    float *des = es ? dev_upload(es, sizeof(float) * E) : NULL;
    float *dout = dev_out((size_t)n * H);
    const size_t sb = gm_cuda_moe_scratch_bytes(n, k, E, H, F);
    void *dscr = dev_alloc(sb);
    const gm_cuda_moe_args a = {
        .logits = dl, .x = dx, .expert_scale = des, .n = n, .n_used = k, .n_expert = E,
        .gate_up = {.type = type, .ne0 = H, .ne1 = 2 * F, .row_bytes = gu.row_bytes, .data = dgu},
        .down = {.type = type, .ne0 = F, .ne1 = H, .row_bytes = dn.row_bytes, .data = ddn}, .out = dout};
    CK(gm_cuda_moe(&a, dscr, sb, NULL));
    float *got = malloc(sizeof(float) * n * H);
    dev_download(got, dout, sizeof(float) * n * H);
    double err2 = 0, ref2 = 0;
    float *scratch = malloc(sizeof(float) * E), *wts = malloc(sizeof(float) * k);
    int32_t *ids = malloc(sizeof(int32_t) * k);
    double *hid = malloc(sizeof(double) * F), *o = malloc(sizeof(double) * H);
    for (int t = 0; t < n; t++) {
        gm_ref_moe_route(logits + (size_t)t * E, E, k, es, scratch, ids, wts);
        for (int64_t h = 0; h < H; h++) o[h] = 0;
        for (int j = 0; j < k; j++) {
            const int e = ids[j];
            for (int64_t f = 0; f < F; f++) {
                double g = 0, u = 0;
                const float *gr = gu.deq + ((size_t)e * 2 * F + f) * H, *ur = gu.deq + ((size_t)e * 2 * F + F + f) * H;
                for (int64_t i = 0; i < H; i++) g += (double)gr[i] * x[t * H + i], u += (double)ur[i] * x[t * H + i];
                hid[f] = gm_ref_gelu_tanh((float)g) * u;
            }
            for (int64_t h = 0; h < H; h++) {
                double acc = 0;
                const float *dr = dn.deq + ((size_t)e * H + h) * F;
                for (int64_t f = 0; f < F; f++) acc += (double)dr[f] * hid[f];
                o[h] += wts[j] * acc;
            }
        }
        for (int64_t h = 0; h < H; h++) {
            const double dlt = (double)got[t * H + h] - o[h];
            if (isnan(got[t * H + h])) fail_msg("moe: NaN at token %d element %lld", t, (long long)h);
            err2 += dlt * dlt, ref2 += o[h] * o[h];
        }
    }
    const double rel = sqrt(err2 / (ref2 > 0 ? ref2 : 1)), tol = is_quant(type) ? 3e-2 : 1e-5;
    if (!(rel <= tol))
        fail_msg("moe %s n=%d E=%d k=%d: relative error %.3g > %.3g", gm_type_traits_of(type)->name, n, E, k, rel, tol);
    free_mat(&gu), free_mat(&dn);
    free(logits), free(x), free(es), free(got), free(scratch), free(wts), free(ids), free(hid), free(o);
    CU(cudaFree(dgu)); CU(cudaFree(ddn)); CU(cudaFree(dl)); CU(cudaFree(dx)); CU(cudaFree(dout)); CU(cudaFree(dscr));
    if (des) CU(cudaFree(des));
}

static void test_moe(void **state) {
    (void)state;
    /* one by one (pairs <= experts: decoding) */
    run_moe(GM_TYPE_F32, 1, 4, 2, 64, 32, false, false);
    run_moe(GM_TYPE_F32, 9, 128, 8, 64, 32, true, false);  /* Gemma 4 26B-A4B routing; 3 blocks of 4 warps */
    run_moe(GM_TYPE_F32, 9, 128, 8, 64, 32, true, true);
    run_moe(GM_TYPE_F32, 3, 40, 5, 64, 32, false, true);   /* experts not a multiple of the warp */
    run_moe(GM_TYPE_F32, 2, 512, 32, 32, 32, true, true);  /* the routing kernel's limits */
    run_moe(GM_TYPE_Q8_0, 1, 8, 2, 256, 64, true, false);
    run_moe(GM_TYPE_Q4_0, 1, 128, 8, 256, 64, true, false);
    /* in groups (pairs > experts: prefill, batches): groups of 1 .. GM_CUDA_MOE_GROUP, several per expert */
    run_moe(GM_TYPE_F32, 7, 8, 2, 64, 32, true, false);
    run_moe(GM_TYPE_F32, 5, 16, 4, 96, 64, true, false);
    run_moe(GM_TYPE_F32, 40, 16, 4, 64, 32, true, false);
    run_moe(GM_TYPE_F32, 24, 8, 2, 72, 40, true, false);   /* rows not a multiple of a block's */
    run_moe(GM_TYPE_F32, 20, 128, 8, 64, 32, true, true);
    run_moe(GM_TYPE_Q8_0, 30, 8, 2, 256, 64, true, false);
    run_moe(GM_TYPE_Q4_0, 30, 16, 4, 128, 64, true, false);  /* q4_0, under 16 pairs an expert: the mat-vec */
    run_moe(GM_TYPE_Q4_0, 64, 16, 4, 128, 64, true, false);  /* 16 or more: int8 tensor cores, up to 64 a group */
    run_moe(GM_TYPE_Q4_0, 200, 4, 2, 256, 128, true, false); /* 100 pairs an expert: groups of 64 and 36 */
    run_moe(GM_TYPE_Q8_0, 100, 8, 3, 256, 64, false, true);
    run_moe(GM_TYPE_Q4_0, 200, 4, 2, 256, 96, true, false);  /* down rows of 54 bytes: the mat-vec, groups of 8 */
    run_moe(GM_TYPE_Q8_0, 100, 8, 3, 288, 64, false, true);  /* gate/up rows of 306 bytes: likewise */
    run_moe(GM_TYPE_Q4_K, 25, 8, 3, 256, 256, false, false);
    printf("[ cuda     ] moe (routing, chosen experts one by one and in groups, weighted sum): 20 cases pass\n");
}

/* ---- fused projections: rmsnorm + quantize in one launch, up to three matrices / GeGLU / gelu·mul in one ----
 * Against the CPU reference path of the unfused ops: x' = gm_ref_rmsnorm(x)·w, the CPU's quantize_act of x'
 * (dequantized), times the dequantized weights in double, then gelu_tanh. Norm of the difference relative to
 * the norm of the reference, per column: 2e-5 without the norm (only float summation order differs); with it
 * 2.5e-3, because the GPU's f32 sum of squares (the reference sums in double) can move an activation of a
 * column across a rounding step of its 8-bit quantization, ~4e-4 of the column's norm each time: up to six such
 * steps in one column (three were met at K = 512 among 70 columns of three matrices: 1.2e-3). */
static double ref_proj_rows(const host_mat *h, int type, int64_t K, int64_t M, const float *xn, double *y) {
    const gm_type_traits *vt = gm_type_traits_of(gm_type_traits_of(type)->vec_dot_type);
    float *xdq = malloc(sizeof(float) * K);
    uint8_t *xq = malloc(gm_row_bytes(vt, K));
    if (is_quant(type)) {
        vt->quantize_act(xn, xq, K);
        vt->dequantize(xq, xdq, K);
    } else {
        memcpy(xdq, xn, sizeof(float) * K);
    }
    for (int64_t m = 0; m < M; m++) {
        double s = 0;
        for (int64_t j = 0; j < K; j++) s += (double)h->deq[m * K + j] * xdq[j];
        y[m] = s;
    }
    free(xdq), free(xq);
    return 0;
}

static void expect_rel_norm(const char *what, const float *got, const double *want, size_t n, double bound) {
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(fabs((double)got[i]) < 1e30)) fail_msg("%s: element %zu is %g", what, i, got[i]);
        e2 += ((double)got[i] - want[i]) * ((double)got[i] - want[i]), r2 += want[i] * want[i];
    }
    const double rel = sqrt(e2 / (r2 > 0 ? r2 : 1));
    if (!(rel <= bound)) fail_msg("%s: relative difference %.3g > %.1g", what, rel, bound);
}

/* The residual update of a prepared input (gm_cuda_act_in) on the host, with the reference rmsnorm: x = (x +
 * rmsnorm(add) · w) · s per column; returns the device copies of add and w (to free). */
static void host_residual(float *x, int64_t K, int n, float s, float **dadd, float **dw) {
    float *add = rand_vec((size_t)K * n, 3.0f), *w = rand_vec((size_t)K, 1.5f), *t = malloc(sizeof(float) * K);
    *dadd = dev_upload(add, sizeof(float) * K * n), *dw = dev_upload(w, sizeof(float) * K);
    for (int c = 0; c < n; c++) {
        gm_ref_rmsnorm(add + (int64_t)c * K, t, (int)K, w, 1e-6f);
        for (int64_t j = 0; j < K; j++) x[(int64_t)c * K + j] = (x[(int64_t)c * K + j] + t[j]) * s;
    }
    free(add), free(w), free(t);
}

/* The updated x the device holds equals the host's (1e-5 relative + 1e-6). */
static void expect_x_updated(const float *dx, const float *x, int64_t K, int n) {
    float *g = malloc(sizeof(float) * K * n);
    double *want = malloc(sizeof(double) * K * n), *tol = malloc(sizeof(double) * K * n);
    dev_download(g, dx, sizeof(float) * K * n);
    for (int64_t i = 0; i < K * n; i++) want[i] = x[i], tol[i] = 1e-5 * fabs(x[i]) + 1e-6;
    expect_close("residual update of x", g, want, tol, (size_t)(K * n));
    free(g), free(want), free(tol);
}

static void run_fused_proj(int type, int64_t K, int n, int epi, bool norm, bool res) {
    const int64_t Ms[3] = {epi == GM_CUDA_EPI_STORE ? 100 : 96, epi == GM_CUDA_EPI_STORE ? 37 : 96, 64};
    const int nw = epi == GM_CUDA_EPI_STORE ? 3 : epi == GM_CUDA_EPI_GEGLU ? 2 : 1;
    host_mat h[3];
    gm_cuda_multi m = {.n_w = nw, .epi = epi};
    float *dy[3] = {0};
    for (int i = 0; i < nw; i++) {
        h[i] = make_mat(type, K, Ms[i], 1.0f);
        m.w[i] = (gm_cuda_mat){.type = type, .ne0 = K, .ne1 = Ms[i], .row_bytes = h[i].row_bytes,
                               .data = dev_upload(h[i].q, h[i].row_bytes * Ms[i])};
        dy[i] = dev_alloc(sizeof(float) * Ms[i] * n);
        dev_poison(dy[i], sizeof(float) * Ms[i] * n);
        m.y[i] = epi == GM_CUDA_EPI_GEGLU && i == 1 ? NULL : dy[i]; /* a GeGLU has one output, as the forward passes */
    }
    float *x = rand_vec((size_t)K * n, 2.0f), *nwt = rand_vec((size_t)K, 1.5f), *mul = rand_vec((size_t)Ms[0] * n, 2.0f);
    float *dx = dev_upload(x, sizeof(float) * K * n), *dnw = dev_upload(nwt, sizeof(float) * K);
    float *dmul = dev_upload(mul, sizeof(float) * Ms[0] * n);
    if (epi == GM_CUDA_EPI_GELU_MUL) m.mul = dmul;
    const int act_type = gm_cuda_act_type(type);
    const size_t sb = act_type >= 0 ? gm_cuda_matmul_scratch_bytes(K, n) : sizeof(float) * K * n;
    void *dact = dev_alloc(sb);
    float *dadd = NULL, *drw = NULL;
    if (res) host_residual(x, K, n, 0.75f, &dadd, &drw);
    const gm_cuda_act_in in = {.x = dx, .K = K, .n = n, .res_add = dadd, .res_w = drw, .res_scale = 0.75f,
                               .norm = norm, .w = dnw, .eps = 1e-6f};
    if (norm || res || act_type >= 0) CK(gm_cuda_prepare_act(&in, act_type, dact, NULL));
    CK(gm_cuda_matmul_multi(&m, norm || res || act_type >= 0 ? dact : (const void *)dx, n, NULL));
    if (res) expect_x_updated(dx, x, K, n);
    float *xn = malloc(sizeof(float) * K);
    char what[128];
    for (int i = 0; i < (epi == GM_CUDA_EPI_STORE ? nw : 1); i++) {
        float *y = malloc(sizeof(float) * Ms[i] * n);
        double *want = malloc(sizeof(double) * Ms[i] * n), *up = malloc(sizeof(double) * Ms[i]);
        dev_download(y, dy[i], sizeof(float) * Ms[i] * n);
        for (int c = 0; c < n; c++) {
            if (norm) gm_ref_rmsnorm(x + (int64_t)c * K, xn, (int)K, nwt, 1e-6f);
            else memcpy(xn, x + (int64_t)c * K, sizeof(float) * K);
            double *wc = want + (int64_t)c * Ms[i];
            ref_proj_rows(&h[i], type, K, Ms[i], xn, wc);
            if (epi == GM_CUDA_EPI_GEGLU) ref_proj_rows(&h[1], type, K, Ms[1], xn, up);
            for (int64_t r = 0; r < Ms[i] && epi != GM_CUDA_EPI_STORE; r++)
                wc[r] = (double)gm_ref_gelu_tanh((float)wc[r]) *
                        (epi == GM_CUDA_EPI_GEGLU ? up[r] : (double)mul[(int64_t)c * Ms[0] + r]);
        }
        for (int c = 0; c < n; c++) {
            snprintf(what, sizeof what, "fused projection %s K=%lld n=%d epilogue %d norm %d res %d matrix %d column %d",
                     gm_type_traits_of(type)->name, (long long)K, n, epi, norm, res, i, c);
            expect_rel_norm(what, y + (int64_t)c * Ms[i], want + (int64_t)c * Ms[i], (size_t)Ms[i],
                            (norm || res) && is_quant(type) ? 2.5e-3 : 2e-5);
        }
        free(y), free(want), free(up);
    }
    for (int i = 0; i < nw; i++) {
        free_mat(&h[i]);
        CU(cudaFree((void *)m.w[i].data)); CU(cudaFree(dy[i]));
    }
    free(x), free(nwt), free(mul), free(xn);
    CU(cudaFree(dx)); CU(cudaFree(dnw)); CU(cudaFree(dmul)); CU(cudaFree(dact));
    if (dadd) {
        CU(cudaFree(dadd));
        CU(cudaFree(drw));
    }
}

static void test_fused_proj(void **state) {
    (void)state;
    static const int types[] = {GM_TYPE_F32, GM_TYPE_BF16, GM_TYPE_Q4_0, GM_TYPE_Q8_0, GM_TYPE_Q4_K, GM_TYPE_Q6_K};
    static const int ns[] = {1, 3, 11, 37, 70}; /* 37, 70: for q4_0 / q8_0 also on the int8 tensor cores (mmq),
                                                 two column blocks of 64, the second partial */
    int cases = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (int mmq = 0; mmq < 2; mmq++) {
                const bool q = types[t] == GM_TYPE_Q4_0 || types[t] == GM_TYPE_Q8_0;
                if (mmq && (!q || ns[i] < GM_CUDA_MMQ_MIN_N)) continue;
                gm_cuda_set_mmq_max_n(mmq ? 256 : 0);
                for (int epi = 0; epi < 3; epi++)
                    for (int v = 0; v < 4; v++) run_fused_proj(types[t], 512, ns[i], epi, v & 1, v >> 1), cases++;
            }
    /* the int8 path's tiles of 8 weight blocks: K of one partial tile (128) or a partial last one (640), both with
     * rows not 16-byte aligned (4-byte weight copies), and an odd number of whole tiles (1280, 16-byte copies; 512
     * above: two); both block heights (the 100- and 37-row matrices end inside a block); 1 to 3 column blocks */
    static const int64_t mk[] = {128, 640, 1280};
    static const int mn[] = {16, 64, 130};
    gm_cuda_set_mmq_max_n(256);
    for (int rows = 32; rows <= 64; rows *= 2) {
        gm_cuda_set_mmq_rows(rows);
        for (int t = 0; t < 2; t++)
            for (size_t k = 0; k < sizeof mk / sizeof mk[0]; k++)
                for (size_t i = 0; i < sizeof mn / sizeof mn[0]; i++)
                    for (int epi = 0; epi < 3; epi++)
                        for (int v = 0; v < 2; v++)
                            run_fused_proj(t ? GM_TYPE_Q8_0 : GM_TYPE_Q4_0, mk[k], mn[i], epi, true, v), cases++;
    }
    gm_cuda_set_mmq_rows(-1);
    gm_cuda_set_mmq_max_n(-1);
    /* the preparation's block at every width it takes for a 2560-wide row (80 warps of values: 3 to 10 a lane,
     * both kernel builds) and beyond the 256-thread build's reach (8192) */
    static const int prep_threads[] = {64, 256, 512, 640, 1024};
    for (size_t p = 0; p < sizeof prep_threads / sizeof prep_threads[0]; p++) {
        gm_cuda_set_prep_threads(prep_threads[p]);
        for (int t = 0; t < 3; t++)
            for (int K = 2560; K <= 8192; K += 8192 - 2560)
                run_fused_proj(t == 0 ? GM_TYPE_Q4_0 : t == 1 ? GM_TYPE_Q4_K : GM_TYPE_BF16, K, 2, GM_CUDA_EPI_STORE,
                               true, true), cases++;
    }
    gm_cuda_set_prep_threads(0);
    printf("[ cuda     ] fused residual + rmsnorm + quantize and multi-matrix / GeGLU / gelu-mul matvec: %d cases "
           "pass (per column, relative in norm vs the CPU reference path: 2e-5; 2.5e-3 with a norm or residual)\n",
           cases);
}

/* ---- a product that quantizes its own output for the next op (gm_cuda_next): the bytes equal those of the
 * quantize launch it replaces (gm_cuda_quantize_act on the product's output), the output itself is unchanged,
 * and a second run on the same counters gives the same (the counters were left zero). ---- */
static void run_next_quant(int type, int64_t K, int64_t M, int n, int epi, int act_type) {
    const int nw = epi == GM_CUDA_EPI_GEGLU ? 2 : 1;
    host_mat h[2];
    gm_cuda_multi m = {.n_w = nw, .epi = epi};
    for (int i = 0; i < nw; i++) {
        h[i] = make_mat(type, K, M, 1.0f);
        m.w[i] = (gm_cuda_mat){.type = type, .ne0 = K, .ne1 = M, .row_bytes = h[i].row_bytes,
                               .data = dev_upload(h[i].q, h[i].row_bytes * M)};
    }
    float *x = rand_vec((size_t)K * n, 2.0f), *mul = rand_vec((size_t)M * n, 2.0f);
    float *dx = dev_upload(x, sizeof(float) * K * n), *dmul = dev_upload(mul, sizeof(float) * M * n);
    if (epi == GM_CUDA_EPI_GELU_MUL) m.mul = dmul;
    const int in_type = gm_cuda_act_type(type);
    void *dact = in_type >= 0 ? dev_alloc(gm_cuda_matmul_scratch_bytes(K, n)) : NULL;
    if (dact) CK(gm_cuda_quantize_act(dx, K, n, in_type, dact, NULL));
    const void *act = dact ? dact : (const void *)dx;
    const size_t yb = sizeof(float) * M * n, qb = gm_cuda_matmul_scratch_bytes(M, n);
    float *y_plain = dev_alloc(yb), *y_next = dev_alloc(yb);
    void *q_want = dev_alloc(qb), *q_got = dev_alloc(qb);
    enum { NC = 1024 };
    unsigned *counters = dev_alloc(sizeof(unsigned) * NC);
    m.y[0] = y_plain;
    CK(gm_cuda_matmul_multi(&m, act, n, NULL));
    CK(gm_cuda_quantize_act(y_plain, M, n, act_type, q_want, NULL));
    uint8_t *want = malloc(qb), *got = malloc(qb);
    float *yp = malloc(yb), *yn = malloc(yb);
    dev_download(want, q_want, qb);
    dev_download(yp, y_plain, yb);
    m.y[0] = y_next;
    m.next = (gm_cuda_next){.kind = GM_CUDA_NEXT_QUANT, .act_type = act_type, .out = q_got, .counters = counters,
                            .n_counters = NC};
    for (int run = 0; run < 2; run++) {
        dev_poison(y_next, yb);
        dev_poison(q_got, qb);
        CK(gm_cuda_matmul_multi(&m, act, n, NULL));
        dev_download(got, q_got, qb);
        dev_download(yn, y_next, yb);
        /* the bytes written: int8 [n][M], then from align16(n·M) one float per activation block */
        const size_t nq = (size_t)n * M, s0 = (nq + 15) / 16 * 16;
        const size_t ns = (size_t)n * (M / (act_type == GM_TYPE_Q8_K ? 256 : 32)) * 4, used = nq + ns;
        size_t diff = 0, first = 0;
        for (size_t i = 0; i < s0 + ns; i++)
            if ((i < nq || i >= s0) && want[i] != got[i] && !diff++) first = i;
        if (diff || memcmp(yp, yn, yb))
            fail_msg("next-op quantization %s K=%lld M=%lld n=%d epilogue %d act %d run %d: %zu of %zu bytes differ "
                     "(first at %zu), output %s", gm_type_traits_of(type)->name, (long long)K, (long long)M, n, epi,
                     act_type, run, diff, used, first, memcmp(yp, yn, yb) ? "changed" : "the same");
    }
    for (int i = 0; i < nw; i++) {
        free_mat(&h[i]);
        CU(cudaFree((void *)m.w[i].data));
    }
    free(x), free(mul), free(want), free(got), free(yp), free(yn);
    CU(cudaFree(dx)); CU(cudaFree(dmul)); CU(cudaFree(y_plain)); CU(cudaFree(y_next)); CU(cudaFree(q_want));
    CU(cudaFree(q_got)); CU(cudaFree(counters));
    if (dact) CU(cudaFree(dact));
}

static void test_next_quant(void **state) {
    (void)state;
    static const int types[] = {GM_TYPE_Q4_0, GM_TYPE_Q8_0, GM_TYPE_Q4_K, GM_TYPE_Q6_K, GM_TYPE_BF16};
    static const int ns[] = {1, 2, 5, 8, 12}; /* 12: past the matvec (quantized after it) */
    int cases = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (int epi = 0; epi < 3; epi++) {
                run_next_quant(types[t], 512, 1024, ns[i], epi, GM_TYPE_Q8_0), cases++;
                run_next_quant(types[t], 256, 768, ns[i], epi, GM_TYPE_Q8_K), cases++;
                run_next_quant(types[t], 512, 96, ns[i], epi, GM_TYPE_Q8_0), cases++;
            }
    for (int rows = 1; rows <= 4; rows *= 2) { /* every rows-per-warp choice of the matvec */
        gm_cuda_set_mmv_rows(rows);
        for (int epi = 0; epi < 3; epi++) {
            run_next_quant(GM_TYPE_Q4_0, 512, 1024, 3, epi, GM_TYPE_Q8_0), cases++;
            run_next_quant(GM_TYPE_Q4_K, 256, 512, 1, epi, GM_TYPE_Q8_K), cases++;
        }
    }
    gm_cuda_set_mmv_rows(0);
    printf("[ cuda     ] products quantizing their output for the next op: %d cases pass (bytes identical to a "
           "quantize launch after the product, twice on the same counters; output unchanged)\n", cases);
}

/* ---- the tensor-core path (n >= GM_CUDA_GEMM_MIN_N): against the exact product of the dequantized weights and
 * the f32 activations (the path keeps 11 significant bits of both): 1e-3 relative in norm, 1.5e-3 through the
 * GeGLU / gelu·mul epilogues (two rounded products in one output; 1.07e-3 was met); the epilogues, the
 * fused rmsnorm and a column of huge values (the power-of-two column scale keeps f16 from overflowing). ---- */
/* Which kernel run_gemm expects to take the product: 1 qgemm_cuda.cu's, 0 cuBLAS, -1 either. */
static int g_want_qgemm = -1;
/* run_gemm uploads the weights in their device layout (gm_cuda_relayout; q4_0 -> GMC_Q4_0_G8), as the backend does */
static bool g_gemm_relaid = false;
/* Where set (test_qgemm), the heights of the three matrices of a STORE product, and which of qgemm_cuda.cu's kernels
 * must take it: 1 the warpgroup kernel, 0 the warp kernel, -1 either (told by the input order it asks for). */
static const int64_t *g_gemm_store_rows = NULL;
static int g_want_qgemm_wg = -1;

/* m_single > 0: one matrix of that many rows (epilogue STORE) */
static void run_gemm(void *cublas, int type, int64_t K, int n, int epi, bool norm, bool res, int64_t m_single) {
    const int64_t *sr = g_gemm_store_rows;
    const int64_t Ms[3] = {m_single ? m_single : epi == GM_CUDA_EPI_STORE ? (sr ? sr[0] : 100) : 96,
                           epi == GM_CUDA_EPI_STORE ? (sr ? sr[1] : 37) : 96, sr && epi == GM_CUDA_EPI_STORE ? sr[2] : 64};
    const int nw = m_single ? 1 : epi == GM_CUDA_EPI_STORE ? 3 : epi == GM_CUDA_EPI_GEGLU ? 2 : 1;
    host_mat h[3];
    gm_cuda_multi m = {.n_w = nw, .epi = epi};
    for (int i = 0; i < nw; i++) {
        h[i] = make_mat(type, K, Ms[i], 1.0f);
        m.w[i] = (gm_cuda_mat){.type = type, .ne0 = K, .ne1 = Ms[i], .row_bytes = h[i].row_bytes,
                               .data = dev_upload(h[i].q, h[i].row_bytes * Ms[i])};
        if (g_gemm_relaid) {
            const int32_t dt = gm_cuda_device_type(type);
            const uint64_t drow = gm_cuda_device_row_bytes(dt, K);
            assert_int_not_equal(drow, 0);
            uint8_t *relaid = malloc(drow * Ms[i]);
            CK(gm_cuda_relayout(dt, K, Ms[i], h[i].q, h[i].row_bytes, relaid));
            CU(cudaFree((void *)m.w[i].data));
            m.w[i].type = dt, m.w[i].row_bytes = drow, m.w[i].data = dev_upload(relaid, drow * Ms[i]);
            free(relaid);
        }
        m.y[i] = dev_alloc(sizeof(float) * Ms[i] * n);
        dev_poison(m.y[i], sizeof(float) * Ms[i] * n);
    }
    float *y1 = m.y[1];
    if (epi == GM_CUDA_EPI_GEGLU) m.y[1] = NULL; /* a GeGLU has one output, as the forward passes */
    float *x = rand_vec((size_t)K * n, 2.0f), *nwt = rand_vec((size_t)K, 1.5f), *mul = rand_vec((size_t)Ms[0] * n, 2.0f);
    for (int64_t j = 0; j < K; j++) x[K + j] *= 3.0e5f; /* column 1: beyond f16's range */
    float *dx = dev_upload(x, sizeof(float) * K * n), *dnw = dev_upload(nwt, sizeof(float) * K);
    float *x_in = malloc(sizeof(float) * K * n); /* x as uploaded (host_residual updates the host's) */
    memcpy(x_in, x, sizeof(float) * K * n);
    float *dmul = dev_upload(mul, sizeof(float) * Ms[0] * n);
    if (epi == GM_CUDA_EPI_GELU_MUL) m.mul = dmul;
    if (!gm_cuda_gemm_eligible(&m, n)) fail_msg("gemm: %s n=%d not eligible", gm_type_traits_of(type)->name, n);
    if (g_want_qgemm >= 0 && gm_cuda_qgemm_eligible(&m, n) != g_want_qgemm)
        fail_msg("gemm: %s K=%lld n=%d %s the q4_0 kernel", gm_type_traits_of(type)->name, (long long)K, n,
                 g_want_qgemm ? "not taken by" : "taken by");
    if (g_want_qgemm_wg >= 0 &&
        (gm_cuda_qgemm_act_order(&m, n) == GM_CUDA_ACT_ORDER_QG) != (g_want_qgemm_wg == 1))
        fail_msg("gemm: q4_0 K=%lld n=%d epilogue %d %s the warpgroup kernel", (long long)K, n, epi,
                 g_want_qgemm_wg ? "not taken by" : "taken by");
    const size_t sb = gm_cuda_gemm_scratch_bytes(&m, n);
    void *scr = dev_alloc(sb);
    float *dadd = NULL, *drw = NULL;
    if (res) host_residual(x, K, n, 0.75f, &dadd, &drw);
    const gm_cuda_act_in in = {.x = dx, .K = K, .n = n, .res_add = dadd, .res_w = drw, .res_scale = 0.75f,
                               .norm = norm, .w = norm ? dnw : NULL, .eps = 1e-6f};
    float *xn = malloc(sizeof(float) * K);
    void *f16[3] = {NULL, NULL, NULL}, *stack = NULL;
    /* pass 0 dequantizes per product; passes 1 and 2 read f16 copies made once (the backend's f16_copies): 1 one
     * allocation per matrix (a GEMM each), 2 the matrices one after another in one allocation (one GEMM) */
    for (int pass = 0; pass < 3; pass++) {
        if (pass > 0) {
            int64_t rows = 0;
            for (int i = 0; i < nw; i++) rows += Ms[i];
            if (pass == 2) stack = dev_alloc((size_t)K * rows * 2);
            for (int i = 0, row0 = 0; i < nw; row0 += (int)Ms[i], i++) {
                if (pass == 1) f16[i] = dev_alloc((size_t)K * Ms[i] * 2);
                void *dst = pass == 1 ? f16[i] : (uint8_t *)stack + (size_t)row0 * K * 2;
                m.w[i].f16 = NULL;
                CK(gm_cuda_gemm_weights_f16(&m.w[i], dst, NULL));
                m.w[i].f16 = dst;
                if (m.y[i]) dev_poison(m.y[i], sizeof(float) * Ms[i] * n);
            }
            if (gm_cuda_gemm_scratch_bytes(&m, n) > sb) fail_msg("gemm: f16 copies need more scratch than none");
            CU(cudaMemcpy(dx, x_in, sizeof(float) * K * n, cudaMemcpyHostToDevice)); /* before the residual update */
        }
        CK(gm_cuda_gemm_multi(cublas, &m, &in, NULL, scr, sb, NULL, NULL));
        if (res) expect_x_updated(dx, x, K, n);
        for (int i = 0; i < (epi == GM_CUDA_EPI_STORE ? nw : 1); i++) {
            float *y = malloc(sizeof(float) * Ms[i] * n);
            double *want = malloc(sizeof(double) * Ms[i] * n);
            dev_download(y, m.y[i], sizeof(float) * Ms[i] * n);
            for (int c = 0; c < n; c++) {
                if (norm) gm_ref_rmsnorm(x + (int64_t)c * K, xn, (int)K, nwt, 1e-6f);
                else memcpy(xn, x + (int64_t)c * K, sizeof(float) * K);
                for (int64_t r = 0; r < Ms[i]; r++) {
                    double a = 0, u = 0;
                    for (int64_t j = 0; j < K; j++) {
                        a += (double)h[i].deq[r * K + j] * xn[j];
                        if (epi == GM_CUDA_EPI_GEGLU) u += (double)h[1].deq[r * K + j] * xn[j];
                    }
                    if (epi == GM_CUDA_EPI_GEGLU) a = gm_ref_gelu_tanh((float)a) * u;
                    if (epi == GM_CUDA_EPI_GELU_MUL) a = gm_ref_gelu_tanh((float)a) * (double)mul[(int64_t)c * Ms[0] + r];
                    want[(int64_t)c * Ms[i] + r] = a;
                }
                char what[160];
                snprintf(what, sizeof what, "gemm %s K=%lld n=%d epilogue %d norm %d matrix %d column %d%s",
                         gm_type_traits_of(type)->name, (long long)K, n, epi, norm, i, c, pass == 1 ? " (f16 copies)" : pass == 2 ? " (stacked f16 copies)" : "");
                expect_rel_norm(what, y + (int64_t)c * Ms[i], want + (int64_t)c * Ms[i], (size_t)Ms[i],
                                epi == GM_CUDA_EPI_STORE ? 1e-3 : 1.5e-3);
            }
            free(y), free(want);
        }
    }
    if (stack) CU(cudaFree(stack));
    for (int i = 0; i < nw; i++) {
        if (f16[i]) CU(cudaFree(f16[i]));
        free_mat(&h[i]);
        CU(cudaFree((void *)m.w[i].data));
        CU(cudaFree(i == 1 ? y1 : m.y[i]));
    }
    free(x), free(x_in), free(nwt), free(mul), free(xn);
    CU(cudaFree(dx)); CU(cudaFree(dnw)); CU(cudaFree(dmul)); CU(cudaFree(scr));
    if (dadd) {
        CU(cudaFree(dadd));
        CU(cudaFree(drw));
    }
}

static void test_gemm(void **state) {
    (void)state;
    static const int types[] = {GM_TYPE_F16, GM_TYPE_BF16, GM_TYPE_Q4_0, GM_TYPE_Q5_0, GM_TYPE_Q8_0,
                                GM_TYPE_Q4_K, GM_TYPE_Q5_K, GM_TYPE_Q6_K};
    void *cublas = NULL;
    CK(gm_cuda_gemm_create(&cublas, NULL, 0));
    gm_cuda_set_mmq_max_n(0); /* q4_0 / q8_0 batches here too, not on the int8 path (test_fused_proj has those) */
    gm_cuda_set_qgemm_max_n(0); /* ... nor on the q4_0 kernel (test_qgemm has those) */
    g_want_qgemm = 0;
    int cases = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int epi = 0; epi < 3; epi++)
            for (int v = 0; v < 3; v++) {
                run_gemm(cublas, types[t], 512, GM_CUDA_GEMM_MIN_N + (int)urand(40), epi, v >= 1, v == 2, 0);
                cases++;
            }
    /* a single matrix larger than the stack limit goes through in chunks of rows (limit 2^16 values: 128 rows,
     * raised to the 256-row minimum chunk) */
    gm_cuda_set_gemm_chunk_log2(16);
    run_gemm(cublas, GM_TYPE_Q4_0, 512, 20, GM_CUDA_EPI_STORE, true, false, 300), cases++;
    run_gemm(cublas, GM_TYPE_F16, 512, 17, GM_CUDA_EPI_STORE, false, true, 333), cases++;
    gm_cuda_set_gemm_chunk_log2(0);
    gm_cuda_set_mmq_max_n(-1);
    gm_cuda_set_qgemm_max_n(-1);
    g_want_qgemm = -1;
    gm_cuda_gemm_destroy(cublas);
    printf("[ cuda     ] tensor-core path (f16 GEMM, epilogues, fused residual + rmsnorm), each with the weights "
           "dequantized per product, from f16 copies and from stacked f16 copies: %d cases pass (1e-3 relative in norm vs the exact product, "
           "1.5e-3 through an epilogue)\n", cases);
}

/* ---- held epilogues (gm_cuda_gemm_multi's held, gm_cuda_prepare_act_f16's first, gm_cuda_gemm_epilogue): a
 * product whose epilogue is held must leave its outputs unwritten; the next preparation running the held epilogue
 * first must give what the epilogue launched after the product and then the preparation give, to the bit: every
 * output, the next input's x (residual update), its f16 values and column scales; and the held epilogue launched
 * alone must equal the epilogue launched by the product. ---- */
static void *download_new(const void *dev, size_t bytes) {
    void *h = malloc(bytes);
    dev_download(h, dev, bytes);
    return h;
}

/* expect_bytes_equal of device bytes against host bytes */
static void expect_same_bytes(const char *what, const void *got_dev, const void *want_host, size_t bytes) {
    uint8_t *g = download_new(got_dev, bytes);
    expect_bytes_equal(what, g, want_host, bytes);
    free(g);
}

/* epi with nseg segments (STORE), M0 rows in segment 0 (the next input's K); the next input reads segment 0 as x
 * (as_res false: no norm) or as the residual to add (as_res: update with a weight and scale 0.75, then rmsnorm). */
static void run_held_epilogue(void *cublas, int epi, int nseg, int64_t M0, bool as_res, int n) {
    const int64_t K = 256;
    const int nw = epi == GM_CUDA_EPI_GEGLU ? 2 : epi == GM_CUDA_EPI_STORE ? nseg : 1;
    const int64_t Ms[3] = {M0, epi == GM_CUDA_EPI_GEGLU ? M0 : 37, 64};
    host_mat h[3];
    gm_cuda_multi m = {.n_w = nw, .epi = epi};
    size_t ybytes[3] = {0, 0, 0};
    for (int i = 0; i < nw; i++) {
        h[i] = make_mat(GM_TYPE_Q8_0, K, Ms[i], 1.0f);
        m.w[i] = (gm_cuda_mat){.type = GM_TYPE_Q8_0, .ne0 = K, .ne1 = Ms[i], .row_bytes = h[i].row_bytes,
                               .data = dev_upload(h[i].q, h[i].row_bytes * Ms[i])};
        if (epi != GM_CUDA_EPI_GEGLU || i == 0) {
            ybytes[i] = sizeof(float) * Ms[i] * n;
            m.y[i] = dev_alloc(ybytes[i]);
        }
    }
    float *x = rand_vec((size_t)K * n, 2.0f), *nwt = rand_vec((size_t)K, 1.5f), *mul = rand_vec((size_t)M0 * n, 2.0f);
    float *dx = dev_upload(x, sizeof(float) * K * n), *dnw = dev_upload(nwt, sizeof(float) * K);
    float *dmul = dev_upload(mul, sizeof(float) * M0 * n);
    if (epi == GM_CUDA_EPI_GELU_MUL) m.mul = dmul;
    const gm_cuda_act_in in = {.x = dx, .K = K, .n = n, .res_scale = 1.0f, .norm = 1, .w = dnw, .eps = 1e-6f};
    /* the next input */
    float *x2 = rand_vec((size_t)M0 * n, 3.0f), *w2 = rand_vec((size_t)M0, 1.5f), *rw2 = rand_vec((size_t)M0, 1.5f);
    for (int64_t j = 0; j < M0; j++) x2[j] *= 1.0e5f; /* column 0: a scale other than the rest */
    float *dx2 = dev_upload(x2, sizeof(float) * M0 * n), *dw2 = dev_upload(w2, sizeof(float) * M0);
    float *drw2 = dev_upload(rw2, sizeof(float) * M0);
    const gm_cuda_act_in in2 = as_res ? (gm_cuda_act_in){.x = dx2, .K = M0, .n = n, .res_add = m.y[0], .res_w = drw2,
                                                         .res_scale = 0.75f, .norm = 1, .w = dw2, .eps = 1e-6f}
                                      : (gm_cuda_act_in){.x = m.y[0], .K = M0, .n = n, .res_scale = 1.0f};
    const size_t sb = gm_cuda_gemm_scratch_bytes(&m, n), xh_bytes = (size_t)M0 * n * 2, cs_bytes = sizeof(float) * n;
    void *scr = dev_alloc(sb), *xh = dev_alloc(xh_bytes);
    float *cs = dev_alloc(cs_bytes);
    void *want_y[3] = {NULL, NULL, NULL}, *want_x2 = NULL, *want_xh = NULL, *want_cs = NULL;
    char what[200];
    for (int pass = 0; pass < 3; pass++) { /* 0: nothing held; 1: held, run by the preparation; 2: held, run alone */
        for (int i = 0; i < nw; i++)
            if (m.y[i]) dev_poison(m.y[i], ybytes[i]);
        CU(cudaMemcpy(dx2, x2, sizeof(float) * M0 * n, cudaMemcpyHostToDevice));
        dev_poison(xh, xh_bytes), dev_poison(cs, cs_bytes);
        gm_cuda_gemm_epi held = {.n = -1};
        CK(gm_cuda_gemm_multi(cublas, &m, &in, NULL, scr, sb, pass ? &held : NULL, NULL));
        snprintf(what, sizeof what, "held epilogue %d (%d segments), M0 %lld, %s, n %d, pass %d", epi, nseg,
                 (long long)M0, as_res ? "the residual" : "x", n, pass);
        if (pass) {
            if (held.n != n) fail_msg("%s: held %d columns", what, held.n);
            uint8_t *y0 = download_new(m.y[0], ybytes[0]);
            for (size_t b = 0; b < ybytes[0]; b++)
                if (y0[b] != 0xFF) fail_msg("%s: the held epilogue wrote its output (byte %zu)", what, b);
            free(y0);
        }
        if (pass == 2) CK(gm_cuda_gemm_epilogue(&held, NULL));
        CK(gm_cuda_prepare_act_f16(&in2, xh, cs, pass == 1 ? &held : NULL, GM_CUDA_ACT_ORDER_NATURAL, NULL));
        if (pass == 0) {
            for (int i = 0; i < nw; i++)
                if (m.y[i]) want_y[i] = download_new(m.y[i], ybytes[i]);
            want_x2 = download_new(dx2, sizeof(float) * M0 * n);
            want_xh = download_new(xh, xh_bytes), want_cs = download_new(cs, cs_bytes);
            continue;
        }
        for (int i = 0; i < nw; i++)
            if (m.y[i]) expect_same_bytes(what, m.y[i], want_y[i], ybytes[i]);
        expect_same_bytes(what, dx2, want_x2, sizeof(float) * M0 * n);
        expect_same_bytes(what, xh, want_xh, xh_bytes);
        expect_same_bytes(what, cs, want_cs, cs_bytes);
    }
    for (int i = 0; i < nw; i++) {
        free_mat(&h[i]);
        free(want_y[i]);
        CU(cudaFree((void *)m.w[i].data));
        if (m.y[i]) CU(cudaFree(m.y[i]));
    }
    free(x), free(nwt), free(mul), free(x2), free(w2), free(rw2), free(want_x2), free(want_xh), free(want_cs);
    CU(cudaFree(dx)); CU(cudaFree(dnw)); CU(cudaFree(dmul)); CU(cudaFree(dx2)); CU(cudaFree(dw2)); CU(cudaFree(drw2));
    CU(cudaFree(scr)); CU(cudaFree(xh)); CU(cudaFree(cs));
}

static void test_gemm_held_epilogue(void **state) {
    (void)state;
    void *cublas = NULL;
    CK(gm_cuda_gemm_create(&cublas, NULL, 0));
    gm_cuda_set_mmq_max_n(0);
    gm_cuda_set_qgemm_max_n(0);
    /* rows of the next input: 64 and 2560 the register preparation takes (256 and 1024 threads), 100 (not whole
     * 32-value blocks) and 10240 (past 8192) the one-block-per-row kernel */
    static const int64_t M0s[] = {64, 100, 2560, 10240};
    int cases = 0;
    for (int e = 0; e < 4; e++) /* STORE of one segment, STORE of three, GEGLU, GELU_MUL */
        for (size_t k = 0; k < sizeof M0s / sizeof M0s[0]; k++)
            for (int r = 0; r < 2; r++) {
                const int epi = e <= 1 ? GM_CUDA_EPI_STORE : e == 2 ? GM_CUDA_EPI_GEGLU : GM_CUDA_EPI_GELU_MUL;
                run_held_epilogue(cublas, epi, e == 1 ? 3 : 1, M0s[k], r == 1, GM_CUDA_GEMM_MIN_N + (int)urand(241));
                cases++;
            }
    gm_cuda_set_mmq_max_n(-1);
    gm_cuda_set_qgemm_max_n(-1);
    gm_cuda_gemm_destroy(cublas);
    printf("[ cuda     ] held tensor-core epilogues: %d cases, the product's outputs left unwritten while held, the "
           "epilogue run inside the next preparation or alone equal to the bit to it launched by the product\n", cases);
}

/* ---- the f16 input in the warpgroup q4_0 kernel's order (GM_CUDA_ACT_ORDER_QG): the same bytes as the natural
 * order, each value at common_cuda.cuh's position (restated here from its definition: step s = 2jw + hh of a
 * 128-value chunk holds at 2t + e and 8 + 2t + e the chunk's values 32t + 16hh + 4jw + e and + 2 + e), from both
 * preparation kernels (rows up to 8192 values in registers, longer ones by act_f16_kernel), with and without the
 * residual update and the norm. ---- */
static int64_t qg_pos_ref(int64_t k) {
    const int64_t c = k / 128, r = k % 128, t = r / 32, hh = r % 32 / 16, jw = r % 16 / 4, e = r % 4;
    return 128 * c + 16 * (2 * jw + hh) + (e >= 2 ? 8 : 0) + 2 * t + e % 2;
}

static void test_act_order(void **state) {
    (void)state;
    static const int64_t Ks[] = {128, 384, 2560, 10240};
    for (int k = 0; k < 4; k++)
        for (int res = 0; res < 2; res++) {
            const int64_t K = Ks[k];
            const int n = 3 + (int)urand(20);
            float *x = rand_vec((size_t)K * n, 2.0f), *ra = rand_vec((size_t)K * n, 2.0f), *w = rand_vec((size_t)K, 1.5f);
            float *dx = dev_upload(x, sizeof(float) * K * n), *dra = dev_upload(ra, sizeof(float) * K * n);
            float *dw = dev_upload(w, sizeof(float) * K);
            const gm_cuda_act_in in = {.x = dx, .K = K, .n = n, .res_add = res ? dra : NULL, .res_scale = 1.0f,
                                       .norm = res, .w = res ? dw : NULL, .eps = 1e-6f};
            const size_t xb = (size_t)K * n * 2;
            void *xh[2] = {dev_alloc(xb), dev_alloc(xb)};
            float *cs[2] = {dev_alloc(sizeof(float) * n), dev_alloc(sizeof(float) * n)};
            uint16_t *h[2];
            float *hc[2];
            for (int o = 0; o < 2; o++) {
                CU(cudaMemcpy(dx, x, sizeof(float) * K * n, cudaMemcpyHostToDevice)); /* the residual updates x */
                dev_poison(xh[o], xb), dev_poison(cs[o], sizeof(float) * n);
                CK(gm_cuda_prepare_act_f16(&in, xh[o], cs[o], NULL, o ? GM_CUDA_ACT_ORDER_QG : GM_CUDA_ACT_ORDER_NATURAL,
                                           NULL));
                h[o] = download_new(xh[o], xb), hc[o] = download_new(cs[o], sizeof(float) * n);
            }
            for (int c = 0; c < n; c++)
                for (int64_t i = 0; i < K; i++)
                    if (h[1][c * K + qg_pos_ref(i)] != h[0][c * K + i])
                        fail_msg("act order: K %lld, residual %d, column %d, value %lld: %04x in the QG order, %04x",
                                 (long long)K, res, c, (long long)i, h[1][c * K + qg_pos_ref(i)], h[0][c * K + i]);
            if (memcmp(hc[0], hc[1], sizeof(float) * n)) fail_msg("act order: K %lld: column scales differ", (long long)K);
            for (int o = 0; o < 2; o++) {
                free(h[o]), free(hc[o]);
                CU(cudaFree(xh[o]));
                CU(cudaFree(cs[o]));
            }
            CU(cudaFree(dx));
            CU(cudaFree(dra));
            CU(cudaFree(dw));
            free(x), free(ra), free(w);
        }
    /* K not a multiple of 128: refused */
    const gm_cuda_act_in bad = {.x = (float *)16, .K = 96, .n = 1, .res_scale = 1.0f};
    assert_int_not_equal(gm_cuda_prepare_act_f16(&bad, (void *)16, (float *)16, NULL, GM_CUDA_ACT_ORDER_QG, NULL), 0);
}

/* ---- q4_0 batches (re-laid: GMC_Q4_0_G8) on qgemm_cuda.cu's kernels (the blocks dequantized in registers; the
 * warp kernel's mma.sync, then, where the device runs it (sm_90a build on an H100 / H200), the warpgroup kernel's
 * wgmma with its input in GM_CUDA_ACT_ORDER_QG): run_gemm's tolerances (the same roundings as the f16 copies + cuBLAS). Cases: the three epilogues with and
 * without the fused residual + rmsnorm; K of one chunk (128: never split), of three (384: a G8 group and a padded
 * half one), of four (512: at most 2 splits) and of many (2560: up to 8); 16..64 columns (2, 4 or 8 n-tiles, a
 * partial last one), 65..256 (several column blocks); segments that straddle warps and blocks (100 + 37 + 64
 * rows; the warpgroup kernel takes segments that start at multiples of 64 rows: 128 + 64 + 37 there, and leaves
 * 100 + 37 + 64 to the warp kernel), GeGLU halves of 96 rows (a partial second block), a matrix of 1000 rows (8 row
 * blocks); K split over a cluster's blocks and not split; warps of one m16 tile and of two; blocks of at most 64, 32
 * or 16 columns. ---- */
static void test_qgemm(void **state) {
    (void)state;
    gm_cuda_set_mmq_max_n(0);
    gm_cuda_set_qgemm_max_n(256);
    g_want_qgemm = 1;
    g_gemm_relaid = true;
    static const int64_t Ks[] = {128, 384, 512, 2560};
    int cases = 0;
    const int kernels = gm_cuda_qgemm_wg_available() ? 2 : 1; /* the warp kernel, then the warpgroup one */
    static const int64_t wg_rows[3] = {128, 64, 37};
    for (int split = 0; split < 4 * kernels; split++) { /* K split or not, warps of 16 or 32 rows */
        gm_cuda_set_qgemm_kernel(split >= 4);
        gm_cuda_set_qgemm_splits(split & 1 ? -1 : 1);
        gm_cuda_set_qgemm_warp_rows(split & 2 ? 32 : 16);
        gm_cuda_set_qgemm_block_cols(split % 4 == 1 ? 32 : split % 4 == 3 ? 16 : 64);
        for (int layout = 0; layout < (split >= 4 ? 2 : 1); layout++) { /* the warpgroup kernel: both heights */
            g_gemm_store_rows = layout ? wg_rows : NULL;
            for (int k = 0; k < 4; k++)
                for (int epi = 0; epi < 3; epi++) {
                    if (layout && epi != GM_CUDA_EPI_STORE) continue;
                    g_want_qgemm_wg = split >= 4 && !(epi == GM_CUDA_EPI_STORE && !layout);
                    for (int v = 0; v < 3; v++) {
                        const int n = v == 0 ? GM_CUDA_GEMM_MIN_N + (int)urand(49) : v == 1 ? 16 : 65 + (int)urand(192);
                        run_gemm(NULL, GM_TYPE_Q4_0, Ks[k], n, epi, v >= 1, v == 2, 0);
                        cases++;
                    }
                }
        }
        g_gemm_store_rows = NULL;
        g_want_qgemm_wg = split >= 4;
        run_gemm(NULL, GM_TYPE_Q4_0, 2560, 64, GM_CUDA_EPI_STORE, true, false, 1000), cases++;
        run_gemm(NULL, GM_TYPE_Q4_0, 512, 256, GM_CUDA_EPI_STORE, false, true, 1000), cases++;
    }
    g_want_qgemm_wg = -1;
    print_message("qgemm: %d cases, %s\n", cases, kernels == 2 ? "warp and warpgroup kernels" : "warp kernel only");
    { /* the default largest batch: 64 where the warpgroup kernel runs, past 32 columns for 8 MB of weights or more */
        gm_cuda_set_qgemm_max_n(-1), gm_cuda_set_qgemm_kernel(-1);
        const int32_t type = gm_cuda_device_type(GM_TYPE_Q4_0);
        gm_cuda_multi m = {.n_w = 1, .epi = GM_CUDA_EPI_STORE};
        m.w[0] = (gm_cuda_mat){.type = type, .ne0 = 2560, .ne1 = 2048, .row_bytes = gm_cuda_device_row_bytes(type, 2560),
                               .data = (void *)256};
        assert_int_equal(gm_cuda_qgemm_eligible(&m, 32), 1);
        assert_int_equal(gm_cuda_qgemm_eligible(&m, 48), 0); /* 2.9 MB */
        m.w[0].ne1 = 10240;                                   /* 14.7 MB */
        assert_int_equal(gm_cuda_qgemm_eligible(&m, 48), kernels == 2);
        assert_int_equal(gm_cuda_qgemm_eligible(&m, 65), 0);
        assert_int_equal(gm_cuda_qgemm_act_order(&m, 16), GM_CUDA_ACT_ORDER_NATURAL); /* the warp kernel below 17 */
        assert_int_equal(gm_cuda_qgemm_act_order(&m, 17), kernels == 2 ? GM_CUDA_ACT_ORDER_QG : GM_CUDA_ACT_ORDER_NATURAL);
    }
    g_want_qgemm = -1;
    g_gemm_relaid = false;
    gm_cuda_set_qgemm_kernel(-1);
    gm_cuda_set_qgemm_splits(-1);
    gm_cuda_set_qgemm_warp_rows(0);
    gm_cuda_set_qgemm_block_cols(0);
    gm_cuda_set_qgemm_max_n(-1);
    gm_cuda_set_mmq_max_n(-1);
    printf("[ cuda     ] q4_0 tensor-core kernel (re-laid blocks dequantized in registers, epilogues, fused residual + "
           "rmsnorm), K split over a cluster and not, warps of 16 and 32 rows, blocks of 16-64 columns: %d cases pass (1e-3 relative in norm vs the exact product, "
           "1.5e-3 through an epilogue)\n", cases);
}

/* ---- f32 weights over many columns (cublasSgemm, no TF32) against the product in double: 1e-5 relative to each
 * output's sum of |terms| (TF32's 10-bit mantissa would miss it by ~100×), rows padded past ne0 ---- */
static void run_sgemm(void *cublas, int64_t K, int64_t M, int n, int64_t pad) {
    const int64_t ld = K + pad;
    float *w = rand_vec((size_t)(M * ld), 1.0f), *x = rand_vec((size_t)n * K, 2.0f), *y = malloc(sizeof(float) * n * M);
    float *dw = dev_upload(w, sizeof(float) * M * ld), *dx = dev_upload(x, sizeof(float) * n * K), *dy = dev_out((size_t)n * M);
    const gm_cuda_mat m = {.type = GM_TYPE_F32, .ne0 = K, .ne1 = M, .row_bytes = (uint64_t)ld * 4, .data = dw};
    CK(gm_cuda_sgemm(cublas, &m, dx, n, dy, NULL));
    dev_download(y, dy, sizeof(float) * n * M);
    double *want = malloc(sizeof(double) * M), *tol = malloc(sizeof(double) * M);
    for (int c = 0; c < n; c++) {
        for (int64_t r = 0; r < M; r++) {
            double acc = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                const double t = (double)w[r * ld + k] * x[(int64_t)c * K + k];
                acc += t, mag += fabs(t);
            }
            want[r] = acc, tol[r] = 1e-5 * mag;
        }
        expect_close("sgemm", y + (int64_t)c * M, want, tol, (size_t)M);
    }
    free(w), free(x), free(y), free(want), free(tol);
    CU(cudaFree(dw)); CU(cudaFree(dx)); CU(cudaFree(dy));
}

static void test_sgemm(void **state) {
    (void)state;
    void *cublas = NULL;
    CK(gm_cuda_gemm_create(&cublas, NULL, 0));
    run_sgemm(cublas, 2816, 128, 40, 0); /* a Gemma 4 26B-A4B router over 40 tokens */
    run_sgemm(cublas, 100, 37, GM_CUDA_GEMM_MIN_N, 3);
    run_sgemm(cublas, 513, 300, 17, 1);
    const gm_cuda_mat bad = {.type = GM_TYPE_Q4_0, .ne0 = 32, .ne1 = 1, .row_bytes = 18, .data = (void *)16};
    float one = 0;
    assert_int_not_equal(gm_cuda_sgemm(cublas, &bad, &one, 1, &one, NULL), 0); /* f32 weights only */
    gm_cuda_gemm_destroy(cublas);
    printf("[ cuda     ] sgemm (f32 weights, many columns): 3 cases pass, a quantized matrix refused\n");
}

/* ---- attention preparation (q/k/v norms, RoPE, cache store in one launch) against gm_ref_rmsnorm and
 * gm_ref_rope_neox: q 5e-5 absolute (values of magnitude ~ a few), cached k/v the same plus the cache type's
 * rounding (f16: 1e-3 relative; q8_0: 0.6 of a quantization step, amax / 127 of the value's block of 32); cache
 * slots of other tokens untouched (still the poison). ---- */
static void run_attn_prep(int D, int nh, int hkv, int kv_type, bool v_from_k, bool v_norm, bool with_kv, bool ff_on) {
    const int T = 3, n_seq = 2, n_slots = 64, n_rot = D;
    const size_t row = (size_t)hkv * D, hb = gm_kv_head_bytes(kv_type_of(kv_type), D);
    const size_t cache_bytes = (size_t)n_seq * n_slots * hkv * hb;
    int32_t pos[3] = {5, 40, 63}, seq[3] = {0, 1, 1};
    float *q = rand_vec((size_t)T * nh * D, 3.0f), *k = rand_vec((size_t)T * row, 3.0f), *v = rand_vec((size_t)T * row, 3.0f);
    float *qn = rand_vec((size_t)D, 1.5f), *kn = rand_vec((size_t)D, 1.5f), *ff = malloc(sizeof(float) * D / 2);
    for (int i = 0; i < D / 2; i++) ff[i] = i < D / 8 ? 1.0f : i < D / 4 ? 1.5f : 1e30f;
    float *dq = dev_upload(q, sizeof(float) * T * nh * D), *dk = dev_upload(k, sizeof(float) * T * row);
    float *dv = dev_upload(v, sizeof(float) * T * row), *dqn = dev_upload(qn, sizeof(float) * D);
    float *dkn = dev_upload(kn, sizeof(float) * D), *dff = dev_upload(ff, sizeof(float) * D / 2);
    int32_t *dpos = dev_upload(pos, sizeof pos), *dseq = dev_upload(seq, sizeof seq);
    void *kc = dev_alloc(cache_bytes), *vc = dev_alloc(cache_bytes);
    dev_poison(kc, cache_bytes), dev_poison(vc, cache_bytes);
    const gm_cuda_kv kv = {.type = kv_type, .n_slots = n_slots, .ring = 0, .n_head_kv = hkv, .head_dim = D, .k = kc,
                           .v = vc};
    const float base = 1e6f, fs = 1.0f, qs = 0.5f, eps = 1e-6f;
    const gm_cuda_prep p = {.n_tokens = T, .n_head = nh, .head_dim = D, .pos = dpos, .seq = dseq, .q = dq, .k = dk,
                            .v = v_from_k ? NULL : dv, .kv = with_kv ? &kv : NULL, .q_norm = dqn, .k_norm = dkn,
                            .v_norm = v_norm, .v_from_k = v_from_k, .eps = eps, .n_rot = n_rot, .base = base,
                            .freq_scale = fs, .freq_factors = ff_on ? dff : NULL, .q_scale = qs};
    CK(gm_cuda_attn_prep(&p, NULL));
    float *gq = malloc(sizeof(float) * T * nh * D);
    uint8_t *gk = malloc(cache_bytes), *gv = malloc(cache_bytes);
    dev_download(gq, dq, sizeof(float) * T * nh * D);
    dev_download(gk, kc, cache_bytes), dev_download(gv, vc, cache_bytes);
    float r[1024];
    double want[1024], tol[1024];
    for (int t = 0; t < T; t++) {
        for (int hh = 0; hh < nh; hh++) {
            const size_t off = ((size_t)t * nh + hh) * D;
            gm_ref_rmsnorm(q + off, r, D, qn, eps);
            gm_ref_rope_neox(r, n_rot, (float)pos[t], base, fs, ff_on ? ff : NULL);
            for (int i = 0; i < D; i++) want[i] = (double)(r[i] * qs), tol[i] = 5e-5;
            expect_close("attn_prep q", gq + off, want, tol, (size_t)D);
        }
        for (int hh = 0; hh < hkv && with_kv; hh++) {
            const size_t src = ((size_t)t * hkv + hh) * D, dst = (((size_t)seq[t] * n_slots + pos[t]) * hkv + hh) * hb;
            float got[1024];
            for (int kind = 0; kind < 2; kind++) { /* 0: k, 1: v */
                if (kind == 0) {
                    gm_ref_rmsnorm(k + src, r, D, kn, eps);
                    gm_ref_rope_neox(r, n_rot, (float)pos[t], base, fs, ff_on ? ff : NULL);
                } else {
                    const float *vs = (v_from_k ? k : v) + src;
                    if (v_norm) gm_ref_rmsnorm(vs, r, D, NULL, eps);
                    else memcpy(r, vs, sizeof(float) * D);
                }
                const uint8_t *cache = (kind ? gv : gk) + dst;
                if (kv_type == GM_TYPE_Q8_0) gm_ref_kv_q8_load(cache, D, got);
                for (int i = 0; i < D; i++) {
                    double step = 0; /* q8_0: the quantization step of element i's block */
                    for (int j = i / 32 * 32; j < i / 32 * 32 + 32 && kv_type == GM_TYPE_Q8_0; j++)
                        step = fmax(step, fabs(r[j]) / 127.0);
                    if (kv_type == GM_TYPE_F16) got[i] = gm_f16_to_f32(((const gm_f16 *)cache)[i]);
                    else if (kv_type == GM_TYPE_F32) got[i] = ((const float *)cache)[i];
                    want[i] = r[i], tol[i] = 5e-5 + (kv_type == GM_TYPE_F16 ? 1e-3 * fabs(r[i]) : 0.6 * step);
                }
                expect_close(kind ? "attn_prep cached v" : "attn_prep cached k", got, want, tol, (size_t)D);
            }
        }
    }
    /* slots no token of the batch owns keep the poison */
    for (int sq = 0; sq < n_seq; sq++)
        for (int sl = 0; sl < n_slots; sl++) {
            bool owned = false;
            for (int t = 0; t < T; t++) owned = owned || (with_kv && seq[t] == sq && pos[t] == sl);
            if (owned) continue;
            const size_t off = ((size_t)sq * n_slots + sl) * hkv * hb;
            for (size_t b = 0; b < hkv * hb; b++)
                if (gk[off + b] != 0xFF || gv[off + b] != 0xFF) fail_msg("attn_prep wrote slot %d of sequence %d", sl, sq);
        }
    free(q), free(k), free(v), free(qn), free(kn), free(ff), free(gq), free(gk), free(gv);
    CU(cudaFree(dq)); CU(cudaFree(dk)); CU(cudaFree(dv)); CU(cudaFree(dqn)); CU(cudaFree(dkn)); CU(cudaFree(dff));
    CU(cudaFree(dpos)); CU(cudaFree(dseq)); CU(cudaFree(kc)); CU(cudaFree(vc));
}

static void test_attn_prep(void **state) {
    (void)state;
    int cases = 0;
    for (int D = 128; D <= 512; D *= 2)
        for (int variant = 0; variant < 5; variant++) {
            run_attn_prep(D, 8, variant % 2 ? 1 : 2, variant < 2 ? GM_TYPE_F16 : variant < 3 ? GM_TYPE_Q8_0 : GM_TYPE_F32,
                          variant == 1, variant != 2, variant != 4, variant >= 2);
            cases++;
        }
    printf("[ cuda     ] attention preparation (norms, RoPE, cache store to f16, q8_0, f32): %d cases pass\n", cases);
}

/* ---- the preparation fused into a decode step's attention (gm_cuda_attn.prep with one_per_seq and fuse_prep), and
 * the launch told of one token per sequence without it (one_per_seq: the staged kernel's early loads), against the
 * same preparation launched first (one_per_seq 0): output, quantized output and both caches byte-identical, the cache
 * filled with earlier keys beforehand; batches of one token per sequence at positions that put the token's own
 * key in the first, a middle or the last split, in a ring past its wrap, with max_keys exact and rounded up to
 * 256 (as graphs plan it: empty splits), for a layer that stores its K/V and one that reads another's. ---- */
static void run_attn_prep_fused(int D, int nh, int hkv, int kv_type, int window, bool ring, bool write_kv,
                                bool v_from_k, bool round_keys, int out_act) {
    enum { B = 4, NSEQ = 5 };
    const int n_slots = ring ? window : 2048;
    const size_t esz = kv_type == GM_TYPE_F16 ? 2 : 4, row = (size_t)hkv * D;
    const size_t cache_bytes = (size_t)NSEQ * n_slots * row * esz, qn = (size_t)B * nh * D;
    int32_t pos[B] = {0, 37, ring ? 3 * window + 17 : 700, ring ? window - 1 : 1999}, seq[B] = {3, 0, 4, 1};
    uint8_t *cache0 = malloc(2 * cache_bytes); /* k then v: earlier keys, finite */
    for (size_t i = 0; i < 2 * cache_bytes / esz; i++) {
        if (esz == 2) ((gm_f16 *)cache0)[i] = gm_f32_to_f16(frand());
        else ((float *)cache0)[i] = frand();
    }
    float *q = rand_vec(qn, 3.0f), *k = rand_vec((size_t)B * row, 3.0f), *v = rand_vec((size_t)B * row, 3.0f);
    float *qnw = rand_vec((size_t)D, 1.5f), *knw = rand_vec((size_t)D, 1.5f), *ff = malloc(sizeof(float) * D / 2);
    for (int i = 0; i < D / 2; i++) ff[i] = i < D / 8 ? 1.0f : i < D / 4 ? 1.5f : 1e30f;
    float *dk = dev_upload(k, sizeof(float) * B * row), *dv = dev_upload(v, sizeof(float) * B * row);
    float *dqn = dev_upload(qnw, sizeof(float) * D), *dkn = dev_upload(knw, sizeof(float) * D);
    float *dff = dev_upload(ff, sizeof(float) * D / 2);
    int32_t *dpos = dev_upload(pos, sizeof pos), *dseq = dev_upload(seq, sizeof seq);
    int32_t tile = 0, max_keys = 0;
    gm_cuda_attention_plan(B, pos, seq, window, nh, hkv, D, &tile, &max_keys);
    assert_int_equal(tile, 1);
    if (round_keys) max_keys = (max_keys + 255) / 256 * 256;
    const size_t sb = gm_cuda_attention_scratch_bytes(B, nh, hkv, D, max_keys, tile);
    const int64_t K = (int64_t)nh * D;
    const size_t qb = out_act ? gm_cuda_matmul_scratch_bytes(K, B) : 0;
    uint8_t *got[3][4]; /* [unfused, one_per_seq, fused][out, k cache, v cache, quantized out] */
    for (int way = 0; way < 3; way++) {
        void *kc = dev_upload(cache0, cache_bytes), *vc = dev_upload(cache0 + cache_bytes, cache_bytes);
        float *dq = dev_upload(q, sizeof(float) * qn), *dout = dev_alloc(sizeof(float) * qn);
        void *dscr = sb ? dev_alloc(sb) : NULL;
        uint8_t *dqo = qb ? dev_alloc(qb) : NULL;
        dev_poison(dout, sizeof(float) * qn);
        if (qb) dev_poison(dqo, qb);
        const gm_cuda_kv kv = {.type = kv_type == GM_TYPE_F16 ? 1 : 0, .n_slots = n_slots, .ring = ring,
                               .n_head_kv = hkv, .head_dim = D, .k = kc, .v = vc};
        const gm_cuda_prep p = {.n_tokens = B, .n_head = nh, .head_dim = D, .pos = dpos, .seq = dseq, .q = dq,
                                .k = dk, .v = v_from_k ? NULL : dv, .kv = write_kv ? &kv : NULL, .q_norm = dqn,
                                .k_norm = dkn, .v_norm = 1, .v_from_k = v_from_k, .eps = 1e-6f, .n_rot = D / 2,
                                .base = 1e4f, .freq_scale = 1.0f, .freq_factors = dff, .q_scale = 0.0625f};
        const gm_cuda_attn a = {.kv = &kv, .n_tokens = B, .pos = dpos, .seq = dseq, .n_head = nh, .window = window,
                                .max_keys = max_keys, .tile_tokens = tile, .q = dq, .out = dout,
                                .out_act_type = out_act, .out_q = dqo, .prep = &p, .one_per_seq = way >= 1,
                                .fuse_prep = way == 2};
        CK(gm_cuda_attention(&a, dscr, sb, NULL));
        got[way][0] = malloc(sizeof(float) * qn), got[way][1] = malloc(cache_bytes);
        got[way][2] = malloc(cache_bytes), got[way][3] = qb ? malloc(qb) : NULL;
        dev_download(got[way][0], dout, sizeof(float) * qn);
        dev_download(got[way][1], kc, cache_bytes), dev_download(got[way][2], vc, cache_bytes);
        if (qb) dev_download(got[way][3], dqo, qb);
        CU(cudaFree(kc)); CU(cudaFree(vc)); CU(cudaFree(dq)); CU(cudaFree(dout));
        if (dscr) CU(cudaFree(dscr));
        if (dqo) CU(cudaFree(dqo));
    }
    char what[200];
    const char *names[4] = {"output", "k cache", "v cache", "quantized output"};
    const size_t sizes[4] = {sizeof(float) * qn, cache_bytes, cache_bytes, qb};
    for (int i = 0; i < 4; i++) {
        if (!sizes[i]) continue;
        for (int way = 1; way < 3; way++) {
            snprintf(what, sizeof what, "%s attention prep %d/%d D=%d %s window=%d%s%s%s%s: %s",
                     way == 2 ? "fused" : "one-per-sequence", nh, hkv, D, esz == 2 ? "f16" : "f32", window,
                     ring ? " ring" : "", write_kv ? "" : " (reads another layer's cache)", v_from_k ? " v=k" : "",
                     round_keys ? " (max_keys rounded)" : "", names[i]);
            expect_bytes_equal(what, got[way][i], got[0][i], sizes[i]);
        }
    }
    if (write_kv) /* the keys were stored: the cache changed where the batch's tokens are */
        assert_true(memcmp(got[2][1], cache0, cache_bytes) != 0);
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < 4; i++) free(got[f][i]);
    free(cache0), free(q), free(k), free(v), free(qnw), free(knw), free(ff);
    CU(cudaFree(dk)); CU(cudaFree(dv)); CU(cudaFree(dqn)); CU(cudaFree(dkn)); CU(cudaFree(dff));
    CU(cudaFree(dpos)); CU(cudaFree(dseq));
}

static void test_attn_prep_fused(void **state) {
    (void)state;
    int cases = 0;
    /* each decode kernel (values by threads, by warps, staged), its fused preparation against its own launch first:
     * the split kernel prepares in shared memory, the staged one a row per warp (f16 caches; f32 caches under the
     * staged mode take the split kernel) */
    for (int mode = 0; mode < 3; mode++)
    for (int D = 128; D <= 512; D *= 2)
        for (int variant = 0; variant < 6; variant++) {
            gm_cuda_set_attn_decode(mode);
            const int G = variant < 2 ? 4 : variant < 4 ? 2 : variant == 4 ? 8 : 1;
            const int hkv = G == 8 ? 1 : 2;
            run_attn_prep_fused(D, G * hkv, hkv, variant % 3 == 2 ? GM_TYPE_F32 : GM_TYPE_F16,
                                variant % 2 ? 512 : 0, variant % 2 == 1, variant != 3, variant == 4, variant >= 2,
                                variant == 0 ? GM_TYPE_Q8_0 : variant == 5 && D >= 256 ? GM_TYPE_Q8_K : 0);
            cases++;
        }
    gm_cuda_set_attn_decode(-1);
    printf("[ cuda     ] attention preparation fused into decode attention: %d cases byte-identical to its own launch "
           "(values by threads, by warps, staged)\n", cases);
}

/* ---- top logits: each row's k best, ids and values bit-identical to the host selection (gm_top_logits_row,
 * linked in from src/sample/top_logits.c: CMakeLists.txt) ---- */
#include <float.h>

#include "sample/top_logits.h"

static float nrand(void) { /* standard normal (Box-Muller) */
    float u1 = (frand() + 1.0f) * 0.5f;
    if (u1 < 1e-7f) u1 = 1e-7f;
    const float u2 = (frand() + 1.0f) * 0.5f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318531f * u2);
}
static float f_of_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}
static uint32_t bits_of_f(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* Row kinds: 0 normals; 1 four levels (-1, -0.0, +0.0, 0.5: massive ties, the zeros' signs must not matter) and
 * ~1/1000 of 2.0; 2 normals with 1/24 each of NaN (payloads of both signs), +inf, -inf, FLT_MAX (ties with +inf as
 * read), -FLT_MAX, -0.0, +0.0 and denormals; 3 all -inf; 4 all NaN; 5 NaN and -inf but 10 normals (the selection
 * runs into -inf ties, across slices); 6 only -0.0 and +0.0 (all tied). */
enum { TL_KINDS = 7 };
static void fill_top_logits_row(float *x, int32_t n, int kind) {
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffffffffu, 0x7fbfffffu};
    static const float levels[] = {-1.0f, -0.0f, 0.0f, 0.5f};
    for (int32_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = 4.0f * nrand(); break;
        case 1: x[i] = urand(1000) == 0 ? 2.0f : levels[urand(4)]; break;
        case 2:
            switch (urand(24)) {
            case 0: x[i] = f_of_bits(nans[urand(5)]); break;
            case 1: x[i] = INFINITY; break;
            case 2: x[i] = -INFINITY; break;
            case 3: x[i] = FLT_MAX; break;
            case 4: x[i] = -FLT_MAX; break;
            case 5: x[i] = -0.0f; break;
            case 6: x[i] = 0.0f; break;
            case 7: x[i] = f_of_bits(urand(2) ? 0x00000005u : 0x80000005u); break;
            default: x[i] = nrand(); break;
            }
            break;
        case 3: x[i] = -INFINITY; break;
        case 4: x[i] = f_of_bits(nans[urand(5)]); break;
        case 5: x[i] = urand(2) ? -INFINITY : f_of_bits(nans[urand(5)]); break;
        default: x[i] = urand(2) ? -0.0f : 0.0f; break;
        }
    }
    if (kind == 5)
        for (int c = 0; c < 10; c++) x[urand((uint32_t)n)] = nrand();
}

/* n_rows rows of n_vocab (row r of kind (r + shift) % TL_KINDS) for k = 1, 40, 256 (at most n_vocab); returns the
 * number of calls checked. Outputs and scratch are poisoned before each call (a scratch candidate left unwritten
 * reads as the largest key, an output left unwritten as id -1 / NaN). */
static int run_top_logits(int32_t n_vocab, int32_t n_rows, int shift) {
    static const int32_t ks[] = {1, 40, 256};
    const size_t n = (size_t)n_vocab * (size_t)n_rows, n_out = (size_t)GM_CUDA_TOP_LOGITS_MAX * (size_t)n_rows;
    float *x = malloc(sizeof(float) * n);
    for (int32_t r = 0; r < n_rows; r++) fill_top_logits_row(x + (size_t)r * n_vocab, n_vocab, (r + shift) % TL_KINDS);
    float *dx = dev_upload(x, sizeof(float) * n);
    int32_t *di = dev_alloc(sizeof(int32_t) * n_out), *gi = malloc(sizeof(int32_t) * n_out);
    float *dv = dev_alloc(sizeof(float) * n_out), *gv = malloc(sizeof(float) * n_out);
    int32_t wi[GM_CUDA_TOP_LOGITS_MAX];
    float wv[GM_CUDA_TOP_LOGITS_MAX];
    int cases = 0;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const int32_t k = ks[ki] < n_vocab ? ks[ki] : n_vocab;
        if (ki > 0 && k <= ks[ki - 1]) continue; /* clamped to one already run */
        const size_t sb = gm_cuda_top_logits_scratch_bytes(n_rows, n_vocab, k);
        void *ds = NULL;
        if (sb > 0) ds = dev_alloc(sb), dev_poison(ds, sb);
        dev_poison(di, sizeof(int32_t) * n_out), dev_poison(dv, sizeof(float) * n_out);
        CK(gm_cuda_top_logits(dx, n_rows, n_vocab, k, di, dv, ds, sb, NULL));
        dev_download(gi, di, sizeof(int32_t) * (size_t)k * n_rows);
        dev_download(gv, dv, sizeof(float) * (size_t)k * n_rows);
        for (int32_t r = 0; r < n_rows; r++) {
            gm_top_logits_row(x + (size_t)r * n_vocab, n_vocab, k, wi, wv);
            for (int32_t j = 0; j < k; j++) {
                const int32_t id = gi[(size_t)r * k + j];
                const float v = gv[(size_t)r * k + j];
                if (id != wi[j] || bits_of_f(v) != bits_of_f(wv[j]))
                    fail_msg("top_logits n_vocab %d n_rows %d k %d: row %d (kind %d) rank %d: id %d value %.9g (0x%08x), "
                             "host id %d value %.9g (0x%08x)", n_vocab, n_rows, k, r, (r + shift) % TL_KINDS, j, id, v,
                             bits_of_f(v), wi[j], wv[j], bits_of_f(wv[j]));
            }
        }
        if (ds) CU(cudaFree(ds));
        cases++;
    }
    free(x), free(gi), free(gv);
    CU(cudaFree(dx)); CU(cudaFree(di)); CU(cudaFree(dv));
    return cases;
}

static void test_top_logits(void **state) {
    (void)state;
    /* one slice (n_vocab <= 8192: one launch), two with a last slice of one logit, Gemma's 262144 (32 slices: one
     * merge), 262147 (33 slices: two merge levels for k = 256) */
    static const int32_t vocabs[] = {1, 200, 1000, 8192, 16385, 262144, 262147};
    static const int32_t rows[] = {1, 3, 64};
    int cases = 0;
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++)
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            /* every kind alone, in threes, and all mixed in 64 rows */
            const int runs = rows[r] == 1 ? TL_KINDS : rows[r] == 3 ? 3 : 1;
            for (int s = 0; s < runs; s++) cases += run_top_logits(vocabs[v], rows[r], s * rows[r]);
        }
    /* 2^24 - 3 logits (2048 slices, the last one short): three merge levels for k = 256 */
    cases += run_top_logits((1 << 24) - 3, 2, 0);
    cases += run_top_logits((1 << 24) - 3, 1, 5);
    /* bad arguments are refused */
    {
        float *dx = dev_alloc(sizeof(float) * 16385);
        int32_t *di = dev_alloc(sizeof(int32_t) * 512);
        float *dv = dev_alloc(sizeof(float) * 512);
        const size_t sb = gm_cuda_top_logits_scratch_bytes(1, 16385, 256);
        void *ds = dev_alloc(sb);
        if (sb == 0 || gm_cuda_top_logits_scratch_bytes(1, 8192, 256) != 0)
            fail_msg("top_logits scratch: %zu bytes for 16385 logits, %zu for 8192", sb,
                     gm_cuda_top_logits_scratch_bytes(1, 8192, 256));
        const struct { int32_t n_rows, n_vocab, k; size_t sb; } bad[] = {
            {1, 16385, 0, sb}, {1, 16385, GM_CUDA_TOP_LOGITS_MAX + 1, sb}, {1, 100, 101, sb}, {0, 16385, 40, sb},
            {1, 16385, 256, sb - 8}, {1, (1 << 24) + 1, 40, sb}};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            if (gm_cuda_top_logits(dx, bad[i].n_rows, bad[i].n_vocab, bad[i].k, di, dv, ds, bad[i].sb, NULL) == 0)
                fail_msg("top_logits accepted n_rows %d n_vocab %d k %d scratch %zu", bad[i].n_rows, bad[i].n_vocab,
                         bad[i].k, bad[i].sb);
        if (gm_cuda_top_logits(NULL, 1, 16385, 40, di, dv, ds, sb, NULL) == 0) fail_msg("top_logits accepted NULL logits");
        CU(cudaDeviceSynchronize());
        CU(cudaFree(dx)); CU(cudaFree(di)); CU(cudaFree(dv)); CU(cudaFree(ds));
    }
    printf("[ cuda     ] top_logits: %d cases pass (ids and values bit-identical to gm_top_logits_row; ties, "
           "NaN / inf / -0 rows, 1..2^24-3 logits, 1..64 rows)\n", cases);
}

/* ---- device layouts: q6_K re-laid into 16-byte aligned blocks (gm_cuda_relayout) reads as the GGUF layout ----
 * The same values through the same arithmetic, so every output must be bit-identical to the GGUF layout's, whose
 * results test_matmul / test_get_rows_gather / test_gemm hold against the oracle: the mat-vec (every rows-per-warp
 * variant; 1 to 64 columns), get_rows and the tensor-core path's dequantization to f16. */
static void expect_same_floats(const char *what, const void *dev_a, const void *dev_b, size_t bytes) {
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    dev_download(a, dev_a, bytes);
    dev_download(b, dev_b, bytes);
    if (memcmp(a, b, bytes) != 0) fail_msg("%s: the re-laid weights differ from the GGUF layout", what);
    free(a), free(b);
}

static void run_relaid(int type, int64_t K, int64_t M, int n) {
    host_mat h = make_mat(type, K, M, 1.0f);
    const int32_t dt = gm_cuda_device_type(type);
    const uint64_t drow = gm_cuda_device_row_bytes(dt, K);
    const char *tn = type == GM_TYPE_Q6_K ? "q6_K" : "q4_0";
    assert_int_not_equal(dt, type);
    /* q6_K: 224-byte blocks; q4_0: the same bytes in groups of 8 blocks, a last partial group padded */
    assert_true(drow % 16 == 0 && (type == GM_TYPE_Q6_K ? drow > h.row_bytes : drow == (uint64_t)(K / 32 + 7) / 8 * 144));
    uint8_t *relaid = malloc(drow * M);
    CK(gm_cuda_relayout(dt, K, M, h.q, h.row_bytes, relaid));
    void *dw = dev_upload(h.q, h.row_bytes * M), *dr = dev_upload(relaid, drow * M);
    const gm_cuda_mat wg = {.type = type, .ne0 = K, .ne1 = M, .row_bytes = h.row_bytes, .data = dw};
    const gm_cuda_mat wr = {.type = dt, .ne0 = K, .ne1 = M, .row_bytes = drow, .data = dr};
    char what[96];
    /* mat-vec */
    float *x = rand_vec((size_t)K * n, 2.0f);
    float *dx = dev_upload(x, sizeof(float) * K * n), *yg = dev_out((size_t)M * n), *yr = dev_out((size_t)M * n);
    const size_t sb = gm_cuda_matmul_scratch_bytes(K, n);
    void *ds = dev_alloc(sb);
    for (int r = 0; r <= 4; r = r ? 2 * r : 1) {
        gm_cuda_set_mmv_rows(r);
        CK(gm_cuda_matmul(&wg, dx, n, yg, ds, sb, NULL));
        CK(gm_cuda_matmul(&wr, dx, n, yr, ds, sb, NULL));
        snprintf(what, sizeof what, "matmul %s K=%lld M=%lld n=%d rows/warp %d", tn, (long long)K, (long long)M, n, r);
        expect_same_floats(what, yg, yr, sizeof(float) * M * n);
    }
    gm_cuda_set_mmv_rows(0);
    /* get_rows (the tied embedding) */
    int32_t ids[4] = {0, (int32_t)(M - 1), (int32_t)(M / 2), (int32_t)M /* outside: row 0 */};
    int32_t *dids = dev_upload(ids, sizeof ids);
    float *gg = dev_out((size_t)4 * K), *gr = dev_out((size_t)4 * K);
    CK(gm_cuda_get_rows(&wg, dids, 4, 1.5f, gg, NULL));
    CK(gm_cuda_get_rows(&wr, dids, 4, 1.5f, gr, NULL));
    snprintf(what, sizeof what, "get_rows %s K=%lld", tn, (long long)K);
    expect_same_floats(what, gg, gr, sizeof(float) * 4 * K);
    /* f16 rows for the tensor-core path */
    void *hg = dev_alloc((size_t)M * K * 2), *hr = dev_alloc((size_t)M * K * 2);
    dev_poison(hg, (size_t)M * K * 2), dev_poison(hr, (size_t)M * K * 2);
    CK(gm_cuda_gemm_weights_f16(&wg, hg, NULL));
    CK(gm_cuda_gemm_weights_f16(&wr, hr, NULL));
    snprintf(what, sizeof what, "f16 weights %s K=%lld M=%lld", tn, (long long)K, (long long)M);
    expect_same_floats(what, hg, hr, (size_t)M * K * 2);
    free(x), free(relaid);
    free_mat(&h);
    CU(cudaFree(dw)); CU(cudaFree(dr)); CU(cudaFree(dx)); CU(cudaFree(yg)); CU(cudaFree(yr)); CU(cudaFree(ds));
    CU(cudaFree(dids)); CU(cudaFree(gg)); CU(cudaFree(gr)); CU(cudaFree(hg)); CU(cudaFree(hr));
}

static void test_device_layouts(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{256, 7}, {2560, 257}, {2816, 1000}, {1536, 4099}};
    static const int ns[] = {1, 3, 8, 64};
    int cases = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int t = 0; t < 2; t++)
                run_relaid(t ? GM_TYPE_Q4_0 : GM_TYPE_Q6_K, shapes[s][0], shapes[s][1], ns[ni]), cases++;
    /* q4_0 rows that end in a partial group of blocks (640: 20 blocks; 96: 3) */
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        run_relaid(GM_TYPE_Q4_0, 640, 33, ns[ni]), run_relaid(GM_TYPE_Q4_0, 96, 70, ns[ni]), cases += 2;
    /* what is not re-laid, and bad arguments */
    assert_int_equal(gm_cuda_device_type(GM_TYPE_Q8_0), GM_TYPE_Q8_0);
    assert_int_equal(gm_cuda_device_row_bytes(gm_cuda_device_type(GM_TYPE_Q4_0), 100), 0);
    assert_int_equal(gm_cuda_device_row_bytes(gm_cuda_device_type(GM_TYPE_Q6_K), 300), 0);
    uint8_t b[256];
    assert_int_not_equal(gm_cuda_relayout(gm_cuda_device_type(GM_TYPE_Q6_K), 300, 1, b, 256, b), 0);
    assert_int_not_equal(gm_cuda_relayout(GM_TYPE_Q4_0, 256, 1, b, 256, b), 0);
    assert_int_not_equal(gm_cuda_relayout(gm_cuda_device_type(GM_TYPE_Q4_0), 256, 1, b, 100, b), 0); /* short rows */
    gm_cuda_set_device_layouts(0);
    assert_int_equal(gm_cuda_device_type(GM_TYPE_Q6_K), GM_TYPE_Q6_K);
    assert_int_equal(gm_cuda_device_type(GM_TYPE_Q4_0), GM_TYPE_Q4_0);
    gm_cuda_set_device_layouts(1);
    printf("[ cuda     ] device layouts: %d re-laid q6_K / q4_0 cases bit-identical to the GGUF layout (matmul, get_rows, "
           "f16 rows)\n", cases);
}

/* ---- a chain of one-column projections in one persistent launch (gm_cuda_chain): every output and the residual
 * stream equal, byte for byte, those of the same steps launched one by one (gm_cuda_prepare_act or
 * gm_cuda_quantize_act, then gm_cuda_matmul_multi), which test_matmul and test_fused_proj hold to the CPU
 * reference. The steps are a Gemma 4 layer's (output, GeGLU, down, per-layer gate and projection, the next Q/K/V),
 * twice over in two launches (the barrier is reused), optionally with a step that reads the row the step before it
 * writes back. ---- */
typedef struct chain_dims {
    int64_t H, F, P, Dq, Dk;
} chain_dims;
enum { CB_X, CB_XN, CB_ATT, CB_G, CB_PLE, CB_MUL, CB_Q, CB_K, CB_V, CB_N };

static int chain_layer(gm_cuda_chain_step *st, float *const *b, const gm_cuda_mat *w, const float *const *nv,
                       chain_dims d, bool kv_own, bool reread) {
    const float eps = 1e-6f;
    int n = 0;
    st[n++] = (gm_cuda_chain_step){.in = {.x = b[CB_ATT], .K = d.Dq, .n = 1, .res_scale = 1.0f},
                                   .m = {.n_w = 1, .w = {w[0]}, .y = {b[CB_XN]}, .epi = GM_CUDA_EPI_STORE}};
    st[n++] = (gm_cuda_chain_step){.in = {.x = b[CB_X], .K = d.H, .n = 1, .res_add = b[CB_XN], .res_w = nv[0],
                                          .res_scale = 1.0f, .norm = 1, .w = nv[1], .eps = eps},
                                   .m = {.n_w = 2, .w = {w[1], w[2]}, .y = {b[CB_G]}, .epi = GM_CUDA_EPI_GEGLU}};
    st[n++] = (gm_cuda_chain_step){.in = {.x = b[CB_G], .K = d.F, .n = 1, .res_scale = 1.0f},
                                   .m = {.n_w = 1, .w = {w[3]}, .y = {b[CB_XN]}, .epi = GM_CUDA_EPI_STORE}};
    st[n++] = (gm_cuda_chain_step){.in = {.x = b[CB_X], .K = d.H, .n = 1, .res_add = b[CB_XN], .res_w = nv[2],
                                          .res_scale = 1.0f, .eps = eps},
                                   .m = {.n_w = 1, .w = {w[4]}, .y = {b[CB_PLE]}, .mul = b[CB_MUL],
                                         .epi = GM_CUDA_EPI_GELU_MUL}};
    st[n++] = (gm_cuda_chain_step){.in = {.x = b[CB_PLE], .K = d.P, .n = 1, .res_scale = 1.0f},
                                   .m = {.n_w = 1, .w = {w[5]}, .y = {b[CB_XN]}, .epi = GM_CUDA_EPI_STORE}};
    st[n++] = (gm_cuda_chain_step){.in = {.x = b[CB_X], .K = d.H, .n = 1, .res_add = b[CB_XN], .res_w = nv[3],
                                          .res_scale = 0.8125f, .norm = 1, .w = nv[4], .eps = eps},
                                   .m = {.n_w = kv_own ? 3 : 1, .w = {w[6], w[7], w[8]},
                                         .y = {b[CB_Q], b[CB_K], b[CB_V]}, .epi = GM_CUDA_EPI_STORE}};
    if (reread) /* reads x, which the step before writes back: the chain must wait for that write */
        st[n++] = (gm_cuda_chain_step){.in = {.x = b[CB_X], .K = d.H, .n = 1, .res_add = b[CB_XN], .res_w = NULL,
                                              .res_scale = 1.0f, .norm = 1, .w = NULL, .eps = eps},
                                       .m = {.n_w = 1, .w = {w[4]}, .y = {b[CB_PLE]}, .epi = GM_CUDA_EPI_STORE}};
    return n;
}

static void run_chain(int type, chain_dims d, bool kv_own, bool reread) {
    const int64_t len[CB_N] = {d.H, d.H, d.Dq, d.F, d.P, d.P, d.Dq, d.Dk, d.Dk};
    const struct { int64_t K, M; } shape[9] = {{d.Dq, d.H}, {d.H, d.F}, {d.H, d.F}, {d.F, d.H}, {d.H, d.P},
                                               {d.P, d.H}, {d.H, d.Dq}, {d.H, d.Dk}, {d.H, d.Dk}};
    gm_cuda_mat w[9];
    const bool relaid = type != GM_TYPE_Q4_0 && type == gm_cuda_device_type(GM_TYPE_Q4_0); /* q4_0 in groups of 8 */
    for (int i = 0; i < 9; i++) {
        const int64_t K = shape[i].K, M = shape[i].M;
        host_mat h = make_mat(relaid ? GM_TYPE_Q4_0 : type, K, M, 1.0f);
        const uint64_t rb = relaid ? gm_cuda_device_row_bytes(type, K) : h.row_bytes;
        uint8_t *bytes = h.q;
        if (relaid) {
            bytes = malloc(rb * M);
            CK(gm_cuda_relayout(type, K, M, h.q, h.row_bytes, bytes));
        }
        w[i] = (gm_cuda_mat){.type = type, .ne0 = K, .ne1 = M, .row_bytes = rb, .data = dev_upload(bytes, rb * M)};
        if (relaid) free(bytes);
        free_mat(&h);
    }
    const float *nv[5];
    for (int i = 0; i < 5; i++) {
        float *v = rand_vec((size_t)d.H, 0.5f);
        for (int64_t j = 0; j < d.H; j++) v[j] += 1.0f;
        nv[i] = dev_upload(v, sizeof(float) * d.H);
        free(v);
    }
    float *init[CB_N], *buf[2][CB_N]; /* [0] step by step, [1] chained */
    for (int i = 0; i < CB_N; i++) {
        init[i] = rand_vec((size_t)len[i], i == CB_X ? 4.0f : 2.0f);
        for (int r = 0; r < 2; r++) {
            buf[r][i] = dev_upload(init[i], sizeof(float) * len[i]);
            if (i == CB_G || i == CB_PLE || i >= CB_Q) dev_poison(buf[r][i], sizeof(float) * len[i]);
        }
    }
    int64_t kmax = d.F > d.H ? d.F : d.H;
    if (d.Dq > kmax) kmax = d.Dq;
    void *scratch = dev_alloc(gm_cuda_matmul_scratch_bytes(kmax, 1));
    void *bar = dev_alloc(sizeof(unsigned long long));
    gm_cuda_chain_step st[2][GM_CUDA_CHAIN_MAX];
    for (int rep = 0; rep < 2; rep++) { /* two layers: two launches on one barrier */
        const int n = chain_layer(st[0], buf[0], w, nv, d, kv_own, reread);
        chain_layer(st[1], buf[1], w, nv, d, kv_own, reread);
        for (int i = 0; i < n; i++) {
            assert_true(gm_cuda_chain_takes(&st[0][i].in, &st[0][i].m));
            const gm_cuda_act_in *in = &st[0][i].in;
            if (in->res_add || in->norm) CK(gm_cuda_prepare_act(in, GM_TYPE_Q8_0, scratch, NULL));
            else CK(gm_cuda_quantize_act(in->x, in->K, 1, GM_TYPE_Q8_0, scratch, NULL));
            CK(gm_cuda_matmul_multi(&st[0][i].m, scratch, 1, NULL));
        }
        CK(gm_cuda_chain(st[1], n, bar, NULL));
    }
    for (int i = 0; i < CB_N; i++) {
        const size_t nb = sizeof(float) * len[i];
        float *want = malloc(nb), *got = malloc(nb);
        dev_download(want, buf[0][i], nb);
        dev_download(got, buf[1][i], nb);
        for (int64_t j = 0; j < len[i] && (kv_own || (i != CB_K && i != CB_V)); j++)
            if (memcmp(&want[j], &got[j], sizeof(float)) != 0 || isnan(got[j]))
                fail_msg("chain type %d H %lld F %lld P %lld Dq %lld Dk %lld kv %d reread %d: buffer %d element %lld: "
                         "chained %.9g, step by step %.9g", type, (long long)d.H, (long long)d.F, (long long)d.P,
                         (long long)d.Dq, (long long)d.Dk, kv_own, reread, i, (long long)j, got[j], want[j]);
        free(want), free(got);
        for (int r = 0; r < 2; r++) CU(cudaFree(buf[r][i]));
        free(init[i]);
    }
    unsigned long long arrivals = 0;
    dev_download(&arrivals, bar, sizeof arrivals);
    /* a barrier between steps, one before the step that rereads x, one before the last write-back: per launch */
    const int barriers = chain_layer(st[0], buf[0], w, nv, d, kv_own, reread) + (reread ? 1 : 0);
    if (arrivals != 2ull * barriers * (unsigned long long)gm_cuda_chain_blocks())
        fail_msg("chain barrier count %llu, want 2 launches x %d barriers x %d blocks", arrivals, barriers,
                 gm_cuda_chain_blocks());
    for (int i = 0; i < 9; i++) CU(cudaFree((void *)w[i].data));
    for (int i = 0; i < 5; i++) CU(cudaFree((void *)nv[i]));
    CU(cudaFree(scratch));
    CU(cudaFree(bar));
}

static void test_chain(void **state) {
    (void)state;
    int cases = 0;
    static const chain_dims dims[] = {
        {256, 1024, 64, 512, 128},    /* small */
        {2560, 10240, 256, 2048, 512}, /* Gemma 4 E4B */
        {800, 1600, 96, 320, 96},     /* 25 warps of prep sums, rows of 50 / 100 items */
        {8192, 256, 32, 256, 64},     /* the widest row with a residual update and rmsnorm */
        {256, 16384, 32, 256, 64},    /* the widest input (the down projection's) */
    };
    const int types[] = {GM_TYPE_Q4_0, GM_TYPE_Q8_0, GM_TYPE_Q5_0, gm_cuda_device_type(GM_TYPE_Q4_0)};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (size_t t = 0; t < 4; t++)
            for (int v = 0; v < 3; v++) {
                if (i > 0 && t >= 2 && v) continue;
                run_chain(types[t], dims[i], v != 1, v == 2), cases++;
            }
    /* what the chain leaves to other paths */
    const gm_cuda_mat q4 = {.type = GM_TYPE_Q4_0, .ne0 = 512, .ne1 = 64, .row_bytes = 288, .data = (void *)256};
    gm_cuda_multi m = {.n_w = 1, .w = {q4}, .y = {(float *)256}};
    gm_cuda_act_in in = {.x = (float *)256, .K = 512, .n = 1, .res_scale = 1.0f};
    assert_true(gm_cuda_chain_takes(&in, &m));
    in.n = 2;
    assert_false(gm_cuda_chain_takes(&in, &m)); /* two columns */
    in.n = 1, in.x = (float *)260;
    assert_false(gm_cuda_chain_takes(&in, &m)); /* x not 16-byte aligned */
    in.x = (float *)256, m.w[0].type = GM_TYPE_Q4_K;
    assert_false(gm_cuda_chain_takes(&in, &m)); /* q8_K activations */
    m.w[0] = q4, m.w[0].ne0 = in.K = 8224, in.norm = 1;
    assert_false(gm_cuda_chain_takes(&in, &m)); /* rmsnorm past 8192 */
    in.norm = 0, m.w[0].ne0 = in.K = 16416;
    assert_false(gm_cuda_chain_takes(&in, &m)); /* input past 16384 */
    printf("[ cuda     ] chains of one-column projections in one launch: %d chains equal to their steps launched one "
           "by one, byte for byte\n", cases);
}

int main(void) {
    const int n = gm_cuda_device_count();
    if (n <= 0) {
        printf("test_cuda_ops: skipped: %s\n", gm_cuda_last_error());
        return 77;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("test_cuda_ops: %s, %d SMs, compute %d.%d\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_act_quant),    cmocka_unit_test(test_matmul),       cmocka_unit_test(test_get_rows_gather), cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),         cmocka_unit_test(test_gelu_softcap),    cmocka_unit_test(test_attention),
        cmocka_unit_test(test_gemma_ops),    cmocka_unit_test(test_moe),
        cmocka_unit_test(test_fused_proj),   cmocka_unit_test(test_attn_prep),    cmocka_unit_test(test_attn_prep_fused),    cmocka_unit_test(test_gemm), cmocka_unit_test(test_gemm_held_epilogue), cmocka_unit_test(test_act_order), cmocka_unit_test(test_qgemm), cmocka_unit_test(test_sgemm),
        cmocka_unit_test(test_top_logits),   cmocka_unit_test(test_next_quant),   cmocka_unit_test(test_device_layouts), cmocka_unit_test(test_chain),
    };
    const char *only = getenv("GEMMAC_TEST_FILTER"); /* e.g. test_qgemm, or a pattern with * */
    if (only && *only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
