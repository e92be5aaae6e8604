/* cuda_mmq_probe.cu: one projection of a batched decoding step on Gemma 4 E4B shapes (the PLE gate, o_proj, a QKV-sized
 * matrix, the GeGLU, down) at q4_0 (re-laid as the backend uploads it: GMC_Q4_0_G8) and n = 16 / 32 / 64 / 128 / 256
 * columns, through each tensor-core path: cuBLAS (the activations converted to f16, cuBLAS on f16 copies of the
 * weights made once, the epilogue launch) and the f16 kernel of qgemm_cuda.cu on the q4_0 blocks (the same f16
 * activations + the kernel, epilogue inside) with blocks of up to 64 columns and of up to 32 (warps of 16 rows), and
 * where the device runs it its warpgroup kernel (wgmma) the same two ways (0 where it cannot run).
 * Time per product: cudaEvent over 100 back-to-back calls after 5 warm-ups (no graph, no PDL: each call's launches
 * are separate). Weights are constant bytes (timing only). Prints one line per product and path; BENCHMARKS.md
 * records it. Usage: [GEMMAC_CUDA_QGEMM_SPLITS=S] [PROBE_M=rows] cuda_mmq_probe [shape n] (one product only: shape 0-4
 * as listed, e.g. for a profiler) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops_cuda.h"

struct Ctx {
    void *cublas;
    gm_cuda_multi m;
    gm_cuda_act_in in;
    void *scratch;
    size_t scratch_bytes;
    int n;
};

static void die(const char *what) {
    fprintf(stderr, "cuda_mmq_probe: %s: %s\n", what, gm_cuda_last_error());
    exit(1);
}
static void run_f16(Ctx *c) {
    if (gm_cuda_gemm_multi(c->cublas, &c->m, &c->in, NULL, c->scratch, c->scratch_bytes, NULL, NULL)) die("gemm_multi");
}
static float time_us(void (*f)(Ctx *), Ctx *c) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    for (int w = 0; w < 5; w++) f(c);
    enum { R = 100 };
    cudaEventRecord(e0);
    for (int r = 0; r < R; r++) f(c);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return ms * 1000.0f / R;
}

int main(int argc, char **argv) {
    static const struct { const char *name; int K, M, n_w, epi; } shapes[] = {
        {"PLE gate 256 x 2560, gelu-mul", 2560, 256, 1, GM_CUDA_EPI_GELU_MUL},
        {"o_proj 2560 x 2048", 2048, 2560, 1, GM_CUDA_EPI_STORE},
        {"3072 x 2560 (QKV-sized)", 2560, 3072, 1, GM_CUDA_EPI_STORE},
        {"GeGLU 2 x 10240 x 2560", 2560, 10240, 2, GM_CUDA_EPI_GEGLU},
        {"down 2560 x 10240", 10240, 2560, 1, GM_CUDA_EPI_STORE}};
    static const int ns[] = {16, 32, 64, 128, 256};
    void *cublas = NULL, *ws = NULL;
    const char *qs = getenv("GEMMAC_CUDA_QGEMM_SPLITS"); /* as the backend reads it */
    /* PROBE_ROW_BYTES=16: every row of a matrix 16 bytes after the previous (overlapping: wrong products, timing only),
     * so that a product's weights (a few hundred KB) stay in L2: how fast the kernels are when DRAM costs nothing */
    const char *pr = getenv("PROBE_ROW_BYTES");
    const size_t row_stride = pr && *pr ? (size_t)atoi(pr) : 0;
    /* PROBE_M=rows: every matrix of the product that many rows instead (e.g. the GeGLU's blocks one or two an SM) */
    const char *pm = getenv("PROBE_M");
    const int probe_m = pm && *pm ? atoi(pm) : 0;
    if (qs && *qs) gm_cuda_set_qgemm_splits(atoi(qs));
    if (cudaMalloc(&ws, 32 << 20) != cudaSuccess || gm_cuda_gemm_create(&cublas, ws, 32 << 20)) die("setup");
    const int wg = gm_cuda_qgemm_wg_available(); /* the warpgroup kernel too (sm_90a build, H100 / H200) */
    printf("| product (q4_0) | n | f16 weights + cuBLAS us | qgemm warp kernel, 64-column blocks us | 32-column blocks us |"
           " qgemm warpgroup kernel, 64-column blocks us | 32-column blocks us | q4_0 GB/s (best qgemm) |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    const int only_shape = argc > 2 ? atoi(argv[1]) : -1, only_n = argc > 2 ? atoi(argv[2]) : 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            if (only_shape >= 0 && ((int)si != only_shape || ns[ni] != only_n)) continue;
            const int K = shapes[si].K, M = probe_m > 0 ? probe_m : shapes[si].M, n = ns[ni];
            const int32_t type = gm_cuda_device_type(2 /* q4_0 */);
            const size_t rb = gm_cuda_device_row_bytes(type, K);
            Ctx c = {};
            c.cublas = cublas, c.n = n;
            float *y, *mul, *x;
            cudaMalloc((void **)&y, sizeof(float) * M * n), cudaMalloc((void **)&mul, sizeof(float) * M * n);
            cudaMalloc((void **)&x, sizeof(float) * K * n);
            cudaMemset(x, 0, sizeof(float) * K * n), cudaMemset(mul, 0, sizeof(float) * M * n);
            c.m.n_w = shapes[si].n_w, c.m.epi = shapes[si].epi, c.m.mul = mul;
            for (int i = 0; i < c.m.n_w; i++) {
                void *w = NULL, *f16 = NULL;
                cudaMalloc(&w, rb * M), cudaMemset(w, 0x11, rb * M);
                c.m.w[i] = (gm_cuda_mat){.type = type, .ne0 = K, .ne1 = M, .row_bytes = rb, .data = w};
                cudaMalloc(&f16, (size_t)K * M * 2);
                if (gm_cuda_gemm_weights_f16(&c.m.w[i], f16, NULL)) die("f16 copy");
                if (row_stride) c.m.w[i].row_bytes = row_stride;
                c.m.w[i].f16 = f16;
                c.m.y[i] = i ? NULL : y;
            }
            c.in = (gm_cuda_act_in){.x = x, .K = K, .n = n, .res_scale = 1.0f};
            gm_cuda_set_mmq_max_n(0), gm_cuda_set_qgemm_max_n(256);
            c.scratch_bytes = gm_cuda_gemm_scratch_bytes(&c.m, n);
            gm_cuda_set_qgemm_max_n(0);
            const size_t sb = gm_cuda_gemm_scratch_bytes(&c.m, n);
            if (sb > c.scratch_bytes) c.scratch_bytes = sb;
            cudaMalloc(&c.scratch, c.scratch_bytes);
            const float t16 = time_us(run_f16, &c);
            gm_cuda_set_qgemm_max_n(256), gm_cuda_set_qgemm_kernel(0);
            const float tq16 = time_us(run_f16, &c);
            gm_cuda_set_qgemm_block_cols(32);
            const float tq32 = time_us(run_f16, &c);
            float tw64 = 0.0f, tw32 = 0.0f, best = tq16 < tq32 ? tq16 : tq32;
            if (wg) {
                gm_cuda_set_qgemm_kernel(1), gm_cuda_set_qgemm_block_cols(0);
                tw64 = time_us(run_f16, &c);
                gm_cuda_set_qgemm_block_cols(32);
                tw32 = time_us(run_f16, &c);
                best = best < tw64 ? best : tw64, best = best < tw32 ? best : tw32;
            }
            gm_cuda_set_qgemm_kernel(-1);
            gm_cuda_set_qgemm_block_cols(0), gm_cuda_set_qgemm_max_n(-1), gm_cuda_set_mmq_max_n(-1);
            printf("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f |\n", shapes[si].name, n, t16, tq16, tq32, tw64,
                   tw32, (double)rb * M * c.m.n_w / (best * 1e3));
            for (int i = 0; i < c.m.n_w; i++) cudaFree((void *)c.m.w[i].data), cudaFree((void *)c.m.w[i].f16);
            cudaFree(y), cudaFree(mul), cudaFree(x), cudaFree(c.scratch);
        }
    gm_cuda_gemm_destroy(cublas);
    cudaFree(ws);
    return 0;
}
