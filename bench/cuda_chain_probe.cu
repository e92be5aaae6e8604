/* cuda_chain_probe.cu: where a chain's time goes (kernels/cuda/chain_cuda.cu). Builds one Gemma 4 layer's one-column
 * products (output, GeGLU, down, per-layer gate and projection, Q/K/V) at a preset's shapes on q4_0 weights, and
 * times, as CUDA graphs of `layers` layers each (the way a decoding step replays them):
 *   - the steps launched one by one (gm_cuda_prepare_act / gm_cuda_quantize_act, then gm_cuda_matmul_multi);
 *   - one chain launch per layer;
 * then the chain's per-step stamps (gm_cuda_chain_set_stamps), averaged over launches.
 * Usage: cuda_chain_probe [g8] [H F P Dq Dk] (default: E4B's 2560 10240 256 2048 512; g8: the weights in the q4_0
 * device layout, GMC_Q4_0_G8). Weights are a byte pattern: the
 * times do not depend on the values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ops_cuda.h"
#include "cuda_check.cuh"

static void *dalloc(size_t n, int byte) {
    void *p;
    CU(cudaMalloc(&p, n + 64));
    CU(cudaMemset(p, byte, n + 64));
    return p;
}

static int g_type = 2; /* q4_0, or its device layout (argument "g8") */
static gm_cuda_mat q4(int64_t K, int64_t M) {
    const uint64_t rb = g_type == 2 ? (uint64_t)K / 32 * 18 : gm_cuda_device_row_bytes(g_type, K);
    return gm_cuda_mat{g_type, K, M, rb, dalloc(rb * M, 0x21), NULL};
}

enum { LAYERS = 42, REPS = 20 };

int main(int argc, char **argv) {
    int64_t H = 2560, F = 10240, P = 256, Dq = 2048, Dk = 512;
    if (argc > 1 && !strcmp(argv[1], "g8")) g_type = gm_cuda_device_type(2), argc--, argv++;
    if (argc == 6) H = atoll(argv[1]), F = atoll(argv[2]), P = atoll(argv[3]), Dq = atoll(argv[4]), Dk = atoll(argv[5]);
    printf("weights: %s\n", g_type == 2 ? "q4_0 (GGUF blocks)" : "q4_0 re-laid in groups of 8 blocks");
    cudaStream_t st;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    /* a layer's weights; LAYERS copies so that L2 does not hold them across layers */
    struct lw { gm_cuda_mat w[9]; } *L = (struct lw *)calloc(LAYERS, sizeof *L);
    for (int l = 0; l < LAYERS; l++) {
        const int64_t shape[9][2] = {{Dq, H}, {H, F}, {H, F}, {F, H}, {H, P}, {P, H}, {H, Dq}, {H, Dk}, {H, Dk}};
        for (int i = 0; i < 9; i++) L[l].w[i] = q4(shape[i][0], shape[i][1]);
    }
    float *x = (float *)dalloc(4 * H, 0), *xn = (float *)dalloc(4 * H, 0), *att = (float *)dalloc(4 * Dq, 0);
    float *g = (float *)dalloc(4 * F, 0), *ple = (float *)dalloc(4 * P, 0), *mul = (float *)dalloc(4 * P, 0);
    float *q = (float *)dalloc(4 * Dq, 0), *k = (float *)dalloc(4 * Dk, 0), *v = (float *)dalloc(4 * Dk, 0);
    float *nw = (float *)dalloc(4 * H, 0);
    void *scratch = dalloc(gm_cuda_matmul_scratch_bytes(F > H ? F : H, 1), 0);
    void *bar = dalloc(8, 0);
    const float eps = 1e-6f;
    gm_cuda_chain_step chains[LAYERS][6];
    for (int l = 0; l < LAYERS; l++) {
        const gm_cuda_mat *w = L[l].w;
        gm_cuda_chain_step *s = chains[l];
        s[0] = gm_cuda_chain_step{{att, Dq, 1, NULL, NULL, 1.0f, 0, NULL, eps}, {1, {w[0]}, {xn}, 0, NULL, {}}};
        s[1] = gm_cuda_chain_step{{x, H, 1, xn, nw, 1.0f, 1, nw, eps}, {2, {w[1], w[2]}, {g}, GM_CUDA_EPI_GEGLU, NULL, {}}};
        s[2] = gm_cuda_chain_step{{g, F, 1, NULL, NULL, 1.0f, 0, NULL, eps}, {1, {w[3]}, {xn}, 0, NULL, {}}};
        s[3] = gm_cuda_chain_step{{x, H, 1, xn, nw, 1.0f, 0, NULL, eps}, {1, {w[4]}, {ple}, GM_CUDA_EPI_GELU_MUL, mul, {}}};
        s[4] = gm_cuda_chain_step{{ple, P, 1, NULL, NULL, 1.0f, 0, NULL, eps}, {1, {w[5]}, {xn}, 0, NULL, {}}};
        s[5] = gm_cuda_chain_step{{x, H, 1, xn, nw, 0.8f, 1, nw, eps}, {3, {w[6], w[7], w[8]}, {q, k, v}, 0, NULL, {}}};
    }
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    for (int mode = 0; mode < 2; mode++) {
        cudaGraph_t gr;
        cudaGraphExec_t ex;
        CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int l = 0; l < LAYERS; l++) {
            if (mode == 1) {
                CK(gm_cuda_chain(chains[l], 6, bar, st));
                continue;
            }
            for (int i = 0; i < 6; i++) {
                const gm_cuda_act_in *in = &chains[l][i].in;
                if (in->res_add || in->norm) CK(gm_cuda_prepare_act(in, 8, scratch, st));
                else CK(gm_cuda_quantize_act(in->x, in->K, 1, 8, scratch, st));
                CK(gm_cuda_matmul_multi(&chains[l][i].m, scratch, 1, st));
            }
        }
        CU(cudaStreamEndCapture(st, &gr));
        CU(cudaGraphInstantiate(&ex, gr, 0));
        CU(cudaGraphLaunch(ex, st));
        CU(cudaStreamSynchronize(st));
        CU(cudaEventRecord(e0, st));
        for (int r = 0; r < REPS; r++) CU(cudaGraphLaunch(ex, st));
        CU(cudaEventRecord(e1, st));
        CU(cudaEventSynchronize(e1));
        float ms;
        CU(cudaEventElapsedTime(&ms, e0, e1));
        printf("%s: %.2f us per layer (%d layers x %d replays)\n", mode ? "chain, one launch a layer" : "step by step",
               1e3 * ms / (REPS * LAYERS), LAYERS, REPS);
        CU(cudaGraphExecDestroy(ex));
        CU(cudaGraphDestroy(gr));
    }
    /* stamps: one layer at a time, eagerly, after a warm-up */
    enum { NS = 4 * GM_CUDA_CHAIN_MAX + 1 };
    unsigned long long *ds = (unsigned long long *)dalloc(sizeof(unsigned long long) * NS * LAYERS, 0);
    unsigned long long *hs = (unsigned long long *)malloc(sizeof(unsigned long long) * NS * LAYERS);
    double sum[NS] = {0};
    for (int l = 0; l < LAYERS; l++) {
        gm_cuda_chain_set_stamps(ds + (size_t)l * NS);
        CK(gm_cuda_chain(chains[l], 6, bar, st));
    }
    gm_cuda_chain_set_stamps(NULL);
    CU(cudaStreamSynchronize(st));
    CU(cudaMemcpy(hs, ds, sizeof(unsigned long long) * NS * LAYERS, cudaMemcpyDeviceToHost));
    int n = 0;
    for (int l = 2; l < LAYERS; l++, n++)
        for (int i = 0; i < 4 * 6; i++) sum[i] += (double)(hs[(size_t)l * NS + i] - hs[(size_t)l * NS + NS - 1]);
    static const char *names[6] = {"output 2560x2048", "GeGLU 2x10240x2560", "down 2560x10240",
                                   "PLE gate 256x2560", "PLE proj 2560x256", "QKV 3072x2560"};
    printf("| step | prep done | products done (block 0) | (last block) | past barrier | step us |\n|---|---:|---:|---:|---:|---:|\n");
    double prev = 0;
    for (int i = 0; i < 6; i++) {
        const double *t = sum + 4 * i;
        printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", names[i], t[0] / n / 1e3, t[1] / n / 1e3, t[2] / n / 1e3,
               t[3] / n / 1e3, (t[3] / n - prev) / 1e3);
        prev = t[3] / n;
    }
    printf("(us since block 0 passed its wait; averaged over %d layers launched one by one)\n", n);
    return 0;
}
