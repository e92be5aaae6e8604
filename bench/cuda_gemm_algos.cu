/* cuda_gemm_algos.cu: which cuBLAS algorithm each f16 product of a batched Gemma 4 E4B decoding step should run.
 * For every E4B projection shape (QKV of a sliding and a full layer, o_proj of both, the stacked GeGLU, down, the
 * PLE gate and projection) at n = 16 / 64 / 128 / 256 columns: Y (f32, rows x n) = W (f16, rows x K) · X (f16,
 * K x n) as gemm_cuda.cu calls it (cublasGemmEx, CUBLAS_GEMM_DEFAULT, 32 MB workspace), then every algorithm
 * cuBLASLt's heuristic offers for the same problem (up to 32), each timed. Time per call: cudaEvent over 40
 * back-to-back calls after 3 warm-ups, the weights rotated over enough copies (>= 256 MB) that L2 holds none of
 * them. Prints per shape and n: the default's us and GB/s, the heuristic's first choice, the fastest and its
 * split-K / tile ids. A developer tool (BENCHMARKS.md records its output); no part of libgemmac.
 * Usage: cuda_gemm_algos [max algorithms per problem] */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_check.cuh"

#define BL(call)                                                                                            \
    do {                                                                                                    \
        cublasStatus_t s_ = (call);                                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                  \
            fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #call, (int)s_);                   \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

__global__ void fill_half_kernel(__half *p, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15;
        p[i] = __float2half((float)(h & 0xffff) / 32768.0f - 1.0f);
    }
}

struct Shape {
    const char *name;
    int rows, K;
};
static const Shape SHAPES[] = {
    {"qkv sliding", 3072, 2560}, {"qkv full", 6144, 2560}, {"o_proj sliding", 2560, 2048},
    {"o_proj full", 2560, 4096}, {"geglu (stacked)", 20480, 2560}, {"down", 2560, 10240},
    {"ple gate", 256, 2560},     {"ple proj", 2560, 256},  {"ple model proj", 10752, 2560},
};
static const int NS[] = {16, 64, 128, 256};
enum { WS_BYTES = 32 << 20, REPS = 40, WARM = 3 };

struct Problem {
    __half *W, *X;
    float *Y;
    int copies, rows, K, n;
    size_t w_elems;
};

template <class F>
static float time_us(const Problem &p, F call) {
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    for (int w = 0; w < WARM; w++) call(p.W + (size_t)(w % p.copies) * p.w_elems);
    CU(cudaEventRecord(e0));
    for (int r = 0; r < REPS; r++) call(p.W + (size_t)(r % p.copies) * p.w_elems);
    CU(cudaEventRecord(e1));
    CU(cudaEventSynchronize(e1));
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, e0, e1));
    CU(cudaEventDestroy(e0));
    CU(cudaEventDestroy(e1));
    return ms * 1000.0f / REPS;
}

int main(int argc, char **argv) {
    const int max_algos = argc > 1 ? atoi(argv[1]) : 32;
    cublasHandle_t h;
    cublasLtHandle_t lt;
    BL(cublasCreate(&h));
    BL(cublasLtCreate(&lt));
    void *ws;
    CU(cudaMalloc(&ws, WS_BYTES));
    BL(cublasSetWorkspace(h, ws, WS_BYTES));
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    printf("# cuda_gemm_algos: %s, cuBLAS %d, up to %d cuBLASLt algorithms a problem\n\n", prop.name,
           (int)cublasLtGetVersion(), max_algos);
    printf("| product | rows x K | n | default us | default GB/s | heuristic #0 us | best us | best GB/s | best: "
           "heuristic # / tile / split-K / stages | algos tried |\n|---|---|---:|---:|---:|---:|---:|---:|---|---:|\n");

    for (const Shape &sh : SHAPES) {
        Problem p = {};
        p.rows = sh.rows, p.K = sh.K;
        p.w_elems = (size_t)sh.rows * sh.K;
        const size_t wb = p.w_elems * 2;
        p.copies = (int)((256u << 20) / wb) + 1;
        CU(cudaMalloc(&p.W, wb * p.copies));
        fill_half_kernel<<<1024, 256>>>(p.W, p.w_elems * p.copies, 1u);
        CU(cudaMalloc(&p.X, (size_t)sh.K * 256 * 2));
        fill_half_kernel<<<256, 256>>>(p.X, (size_t)sh.K * 256, 2u);
        CU(cudaMalloc(&p.Y, (size_t)sh.rows * 256 * 4));
        CU(cudaDeviceSynchronize());
        for (int n : NS) {
            p.n = n;
            const float one = 1.0f, zero = 0.0f;
            const float t_def = time_us(p, [&](const __half *W) {
                BL(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, p.rows, n, p.K, &one, W, CUDA_R_16F, p.K, p.X,
                                CUDA_R_16F, p.K, &zero, p.Y, CUDA_R_32F, p.rows, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
            });
            cublasLtMatmulDesc_t op;
            BL(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
            BL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
            BL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
            cublasLtMatrixLayout_t la, lb, lc;
            BL(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, p.K, p.rows, p.K));
            BL(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, p.K, n, p.K));
            BL(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, p.rows, n, p.rows));
            cublasLtMatmulPreference_t pref;
            BL(cublasLtMatmulPreferenceCreate(&pref));
            const size_t wsb = WS_BYTES;
            BL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
            cublasLtMatmulHeuristicResult_t res[64];
            int nres = 0;
            BL(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, max_algos < 64 ? max_algos : 64, res, &nres));
            float best = 1e30f, first = 0;
            int best_i = -1, tried = 0;
            for (int i = 0; i < nres; i++) {
                if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > WS_BYTES) continue;
                bool ok = true;
                const float t = time_us(p, [&](const __half *W) {
                    if (!ok) return;
                    if (cublasLtMatmul(lt, op, &one, W, la, p.X, lb, &zero, p.Y, lc, p.Y, lc, &res[i].algo, ws, WS_BYTES,
                                       0) != CUBLAS_STATUS_SUCCESS)
                        ok = false;
                });
                if (!ok) continue;
                tried++;
                if (i == 0) first = t;
                if (t < best) best = t, best_i = i;
            }
            int tile = -1, splitk = -1, stages = -1;
            if (best_i >= 0) {
                size_t got;
                cublasLtMatmulAlgoConfigGetAttribute(&res[best_i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &got);
                cublasLtMatmulAlgoConfigGetAttribute(&res[best_i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                                     sizeof splitk, &got);
                cublasLtMatmulAlgoConfigGetAttribute(&res[best_i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                                     sizeof stages, &got);
            }
            const double bytes = (double)p.w_elems * 2 + (double)p.K * n * 2 + (double)p.rows * n * 4;
            printf("| %s | %d x %d | %d | %.2f | %.0f | %.2f | %.2f | %.0f | %d / %d / %d / %d | %d |\n", sh.name,
                   p.rows, p.K, n, t_def, bytes / t_def * 1e-3, first, best, bytes / best * 1e-3, best_i, tile, splitk,
                   stages, tried);
            fflush(stdout);
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
            cublasLtMatmulDescDestroy(op);
        }
        CU(cudaFree(p.W));
        CU(cudaFree(p.X));
        CU(cudaFree(p.Y));
    }
    cublasLtDestroy(lt);
    cublasDestroy(h);
    CU(cudaFree(ws));
    return 0;
}
