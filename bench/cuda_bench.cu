/* cuda_bench.cu: the CUDA kernels' benchmark: measured device bandwidth (cudaMemcpy device-to-device, a copy
 * kernel, a read-only kernel), then each quantized / float matvec of kernels/cuda on Gemma 4 E4B shapes
 * (2560->10240, 10240->2560, 2560->2048, the 262144x2560 LM head) at n = 1 and 8 columns: time per call from
 * CUDA-graph replays (cudaEvent, after warm-up, median of 10 replays of many calls), weight GB/s and % of the
 * measured bandwidths. Weights are random bytes (never zeros), rotated over enough copies to defeat the 60 MB
 * L2. Prints a markdown table; BENCHMARKS.md records it.
 * Then decode attention: one token on E4B-like layers, and batches of B sequences at depth 1024 (E4B's sliding and
 * global layers) with each decode kernel (gm_cuda_set_attn_decode) and split fill, caches rotated over >= 256 MB.
 * Usage: cuda_bench [--quick] [--types q4_0,q8_0,...] [--attn]   (q6_K_a16, the re-laid q6_K, only when named;
 * --attn: bandwidth and attention only) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "ops_cuda.h"
#include "cuda_check.cuh"

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
        p[i] = h;
    }
}
__global__ void fill_float_kernel(float *p, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15;
        p[i] = (float)(h & 0xffff) / 32768.0f - 1.0f;
    }
}
/* Copy: 16 bytes per thread per step, grid-stride. Bytes: 2 · size. */
__global__ void copy_kernel(const int4 *__restrict__ s, int4 *__restrict__ d, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) d[i] = s[i];
}
/* Read-only: 4 independent 16-byte loads per step, xor-reduced, one store per thread. Bytes: size. */
__global__ void read_kernel(const int4 *__restrict__ s, size_t n, int *out) {
    int acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const int4 a = __ldg(s + i), b = __ldg(s + i + stride), c = __ldg(s + i + 2 * stride), d = __ldg(s + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const int4 a = __ldg(s + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x12345678) out[0] = acc;
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* Median over 10 runs (after 3 warm-ups) of fn's time in ms, timed with events. */
template <class F>
static float time_ms(F fn, cudaStream_t st) {
    cudaEvent_t a, b;
    CU(cudaEventCreate(&a)); CU(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) fn();
    CU(cudaStreamSynchronize(st));
    std::vector<float> t;
    for (int i = 0; i < 10; i++) {
        CU(cudaEventRecord(a, st));
        fn();
        CU(cudaEventRecord(b, st));
        CU(cudaEventSynchronize(b));
        float ms;
        CU(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CU(cudaEventDestroy(a)); CU(cudaEventDestroy(b));
    return median(t);
}

struct type_info {
    const char *name;
    int type;
    int block;
    int bytes;
};
static const type_info k_types[] = {{"q4_0", 2, 32, 18}, {"q8_0", 8, 32, 34}, {"q4_K", 12, 256, 144},
                                    {"q5_K", 13, 256, 176}, {"q6_K", 14, 256, 210},
                                    {"q6_K_a16", 0x10e, 256, 224} /* q6_K re-laid at upload (ops_cuda.h) */,
                                    {"bf16", 30, 1, 2},
                                    {"f16", 1, 1, 2}, {"f32", 0, 1, 4}};

int main(int argc, char **argv) {
    bool quick = false, attn_only = false;
    const char *types = "q4_0,q8_0,q4_K,q5_K,q6_K,bf16,f16";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "--attn")) attn_only = true;
    }
    const char *pa = getenv("GEMMAC_CUDA_PREFETCH_ALL"); /* as the backend: every mat-vec block hints its rows */
    if (pa && *pa) gm_cuda_set_mmv_prefetch_all(pa[0] == '1');
    if (gm_cuda_device_count() <= 0) {
        fprintf(stderr, "cuda_bench: %s\n", gm_cuda_last_error());
        return 77;
    }
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv), cudaRuntimeGetVersion(&rt);
    printf("# %s, %d SMs, L2 %d MB, compute %d.%d, driver %d, runtime %d\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, prop.major, prop.minor, drv, rt);
    cudaStream_t st;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    /* ---- bandwidth: 2 GiB buffers ---- */
    const size_t bw_bytes = (size_t)2 << 30;
    void *src, *dst;
    int *sink;
    CU(cudaMalloc(&src, bw_bytes)); CU(cudaMalloc(&dst, bw_bytes)); CU(cudaMalloc(&sink, 64));
    fill_kernel<<<4096, 256, 0, st>>>((uint32_t *)src, bw_bytes / 4, 1);
    fill_kernel<<<4096, 256, 0, st>>>((uint32_t *)dst, bw_bytes / 4, 2);
    const size_t n16 = bw_bytes / 16;
    const int grid = prop.multiProcessorCount * 8;
    const float t_memcpy = time_ms([&] { CU(cudaMemcpyAsync(dst, src, bw_bytes, cudaMemcpyDeviceToDevice, st)); }, st);
    const float t_copy = time_ms([&] { copy_kernel<<<grid, 256, 0, st>>>((const int4 *)src, (int4 *)dst, n16); }, st);
    const float t_read = time_ms([&] { read_kernel<<<grid, 512, 0, st>>>((const int4 *)src, n16, sink); }, st);
    CU(cudaGetLastError());
    const double bw_memcpy = 2.0 * bw_bytes / (t_memcpy * 1e-3) / 1e9;
    const double bw_copy = 2.0 * bw_bytes / (t_copy * 1e-3) / 1e9;
    const double bw_read = (double)bw_bytes / (t_read * 1e-3) / 1e9;
    printf("\n| bandwidth (2 GiB buffers) | ms | GB/s |\n|---|---:|---:|\n");
    printf("| cudaMemcpy D2D (read + write counted) | %.3f | %.0f |\n", t_memcpy, bw_memcpy);
    printf("| copy kernel, 16 B/thread (read + write) | %.3f | %.0f |\n", t_copy, bw_copy);
    printf("| read-only kernel, 4x16 B in flight/thread | %.3f | %.0f |\n", t_read, bw_read);
    CU(cudaFree(src)); CU(cudaFree(dst));
    const double bw_ref = bw_memcpy > bw_copy ? bw_memcpy : bw_copy;

    /* ---- matvecs ---- */
    static const long shapes[][2] = {{2560, 10240}, {10240, 2560}, {2560, 2048}, {2560, 262144}};
    const int n_shapes = quick ? 2 : 4;
    printf("\n| type | K -> M | n | rows/warp | PDL | us/call (graph) | weight GB/s | %% of copy BW | %% of read BW | us/call incl. act. quantize |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    float *x, *y;
    const long max_k = 10240, max_m = 262144;
    CU(cudaMalloc(&x, sizeof(float) * max_k * 8)); CU(cudaMalloc(&y, sizeof(float) * max_m * 8));
    fill_float_kernel<<<256, 256, 0, st>>>(x, max_k * 8, 7);
    void *xq;
    const size_t xq_bytes = gm_cuda_matmul_scratch_bytes(max_k, 8);
    CU(cudaMalloc(&xq, xq_bytes));
    for (const type_info &ti : k_types) {
        if (attn_only || !strstr(types, ti.name)) continue;
        for (int si = 0; si < n_shapes; si++) {
            const long K = shapes[si][0], M = shapes[si][1];
            const size_t row_bytes = (size_t)(K / ti.block) * ti.bytes;
            const size_t wbytes = row_bytes * M;
            int copies = (int)((256ull << 20) / wbytes) + 1; /* >= 256 MB in rotation: 4x the L2 */
            if (copies > 64) copies = 64;
            const size_t stride = (wbytes + 255) & ~(size_t)255;
            uint8_t *w;
            CU(cudaMalloc(&w, stride * copies + 256));
            fill_kernel<<<4096, 256, 0, st>>>((uint32_t *)w, (stride * copies + 256) / 4, 11u + (uint32_t)si);
            std::vector<gm_cuda_mat> mats(copies);
            for (int c = 0; c < copies; c++) mats[c] = gm_cuda_mat{ti.type, K, M, row_bytes, w + stride * c};
            const bool quant = ti.block > 1;
            for (int n : {1, 8}) {
                if (quant) CK(gm_cuda_quantize_act(x, K, n, gm_cuda_act_type(ti.type), xq, st));
                int reps = (int)(4e9 / (double)wbytes);
                reps = reps < 20 ? 20 : reps > 400 ? 400 : reps;
                float best = 1e30f;
                for (int cfg = 0; cfg < 6; cfg++) {
                    const int rows = cfg / 2 == 0 ? 1 : cfg / 2 == 1 ? 2 : 4, pdl = cfg % 2;
                    if (n > 1 && rows == 1) continue;
                    gm_cuda_set_mmv_rows(rows);
                    gm_cuda_set_pdl(pdl);
                    cudaGraph_t g;
                    cudaGraphExec_t ge;
                    CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                    for (int r = 0; r < reps; r++) {
                        if (quant) CK(gm_cuda_matmul_q(&mats[r % copies], xq, n, y, st));
                        else CK(gm_cuda_matmul(&mats[r % copies], x, n, y, NULL, 0, st));
                    }
                    CU(cudaStreamEndCapture(st, &g));
                    CU(cudaGraphInstantiate(&ge, g, 0));
                    const float ms = time_ms([&] { CU(cudaGraphLaunch(ge, st)); }, st);
                    CU(cudaGraphExecDestroy(ge)); CU(cudaGraphDestroy(g));
                    const double us = ms * 1e3 / reps;
                    best = us < best ? (float)us : best;
                    const double gbs = wbytes / (us * 1e-6) / 1e9;
                    float us_q = 0;
                    if (quant) { /* the full op: quantize + matvec, as gm_cuda_matmul */
                        CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                        for (int r = 0; r < reps; r++)
                            CK(gm_cuda_matmul(&mats[r % copies], x, n, y, xq, xq_bytes, st));
                        CU(cudaStreamEndCapture(st, &g));
                        CU(cudaGraphInstantiate(&ge, g, 0));
                        us_q = time_ms([&] { CU(cudaGraphLaunch(ge, st)); }, st) * 1e3f / reps;
                        CU(cudaGraphExecDestroy(ge)); CU(cudaGraphDestroy(g));
                    }
                    printf("| %s | %ld -> %ld | %d | %d | %d | %.2f | %.0f | %.0f%% | %.0f%% | %s%.2f |\n", ti.name, K, M, n,
                           rows, pdl, us, gbs, 100.0 * gbs / bw_ref, 100.0 * gbs / bw_read, quant ? "" : "(f32 in) ",
                           quant ? us_q : us);
                    fflush(stdout);
                }
                gm_cuda_set_mmv_rows(0);
                gm_cuda_set_pdl(-1);
            }
            CU(cudaFree(w));
        }
    }
    /* ---- decode attention: one token, E4B-like layers ---- */
    printf("\n| attention (1 token, f16 KV) | keys | us/call (graph) | KV GB/s |\n|---|---:|---:|---:|\n");
    struct { int nh, nkv, D, window, pos; const char *name; } acfg[] = {
        {8, 2, 512, 0, 4095, "global 8/2, D=512"}, {8, 2, 512, 0, 32767, "global 8/2, D=512"},
        {8, 2, 256, 512, 4095, "sliding 8/2, D=256, window 512"}, {8, 1, 512, 0, 4095, "global 8/1, D=512"}};
    for (auto &c : acfg) {
        const int n_slots = c.window ? c.window + 8 : c.pos + 1;
        const size_t kv_vals = (size_t)n_slots * c.nkv * c.D;
        void *kc, *vc, *scr = NULL;
        float *q, *o;
        int32_t *dp, *ds_;
        CU(cudaMalloc(&kc, kv_vals * 2)); CU(cudaMalloc(&vc, kv_vals * 2));
        CU(cudaMalloc(&q, sizeof(float) * c.nh * c.D)); CU(cudaMalloc(&o, sizeof(float) * c.nh * c.D));
        CU(cudaMalloc(&dp, 4)); CU(cudaMalloc(&ds_, 4));
        fill_kernel<<<1024, 256, 0, st>>>((uint32_t *)kc, kv_vals / 2, 5);
        fill_kernel<<<1024, 256, 0, st>>>((uint32_t *)vc, kv_vals / 2, 6);
        fill_float_kernel<<<16, 256, 0, st>>>(q, (size_t)c.nh * c.D, 9);
        const int32_t zero = 0;
        CU(cudaMemcpy(dp, &c.pos, 4, cudaMemcpyHostToDevice)); CU(cudaMemcpy(ds_, &zero, 4, cudaMemcpyHostToDevice));
        const int keys = c.window ? c.window : c.pos + 1;
        const size_t sb = gm_cuda_attention_scratch_bytes(1, c.nh, c.nkv, c.D, keys, 1);
        if (sb) {
            CU(cudaMalloc(&scr, sb));
            CU(cudaMemset(scr, 0, sb)); /* block counters at its front start at zero */
        }
        const gm_cuda_kv kv = {1, n_slots, c.window ? 1 : 0, c.nkv, c.D, kc, vc};
        const gm_cuda_attn a = {&kv, 1, dp, ds_, c.nh, c.window, keys, 1, q, o};
        const int reps = 50;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int r = 0; r < reps; r++) CK(gm_cuda_attention(&a, scr, sb, st));
        CU(cudaStreamEndCapture(st, &g));
        CU(cudaGraphInstantiate(&ge, g, 0));
        const float us = time_ms([&] { CU(cudaGraphLaunch(ge, st)); }, st) * 1e3f / reps;
        CU(cudaGraphExecDestroy(ge)); CU(cudaGraphDestroy(g));
        const double bytes = 2.0 * keys * c.nkv * c.D * 2;
        printf("| %s | %d | %.2f | %.0f |\n", c.name, keys, us, bytes / (us * 1e-6) / 1e9);
        CU(cudaFree(kc)); CU(cudaFree(vc)); CU(cudaFree(q)); CU(cudaFree(o)); CU(cudaFree(dp)); CU(cudaFree(ds_));
        if (scr) CU(cudaFree(scr));
    }
    /* ---- decode attention: B sequences at depth 1024, E4B's layers, each kernel ---- */
    printf("\n| attention, B sequences at depth 1024 (f16 KV) | B | kernel | fill | us/call (graph) | KV GB/s | %% of read BW |\n"
           "|---|---:|---|---:|---:|---:|---:|\n");
    struct { int D, window; const char *name; } bcfg[] = {{256, 512, "sliding 8/2, D=256, window 512"},
                                                          {512, 0, "global 8/2, D=512"}};
    for (auto &c : bcfg) {
        for (int B : {1, 4, 16, 64, 256}) {
            const int nh = 8, nkv = 2, depth = 1024, pos = depth - 1;
            const int n_slots = c.window ? c.window : depth;
            const int keys = c.window ? c.window : depth;
            const size_t kv_vals = (size_t)B * n_slots * nkv * c.D;
            const double bytes = 2.0 * B * keys * nkv * c.D * 2;
            int copies = (int)((256ull << 20) / (2 * kv_vals * 2)) + 1;
            if (copies > 16) copies = 16;
            std::vector<void *> kcs(copies), vcs(copies);
            for (int i = 0; i < copies; i++) {
                CU(cudaMalloc(&kcs[i], kv_vals * 2)); CU(cudaMalloc(&vcs[i], kv_vals * 2));
                fill_kernel<<<1024, 256, 0, st>>>((uint32_t *)kcs[i], kv_vals / 2, 5 + i);
                fill_kernel<<<1024, 256, 0, st>>>((uint32_t *)vcs[i], kv_vals / 2, 50 + i);
            }
            float *q, *o;
            int32_t *dp, *ds_;
            CU(cudaMalloc(&q, sizeof(float) * B * nh * c.D)); CU(cudaMalloc(&o, sizeof(float) * B * nh * c.D));
            CU(cudaMalloc(&dp, 4 * B)); CU(cudaMalloc(&ds_, 4 * B));
            fill_float_kernel<<<64, 256, 0, st>>>(q, (size_t)B * nh * c.D, 9);
            std::vector<int32_t> hp(B, pos), hs(B);
            for (int i = 0; i < B; i++) hs[i] = i;
            CU(cudaMemcpy(dp, hp.data(), 4 * B, cudaMemcpyHostToDevice));
            CU(cudaMemcpy(ds_, hs.data(), 4 * B, cudaMemcpyHostToDevice));
            struct { int mode, fill; const char *name; } kcfg[] = {
                {-1, 0, "auto"}, {0, 0, "threads"}, {1, 0, "warps"}, {2, 0, "staged"}, {2, 3, "staged"},
                {2, 6, "staged"}, {2, 12, "staged"}, {2, 24, "staged"}};
            for (auto &k : kcfg) {
                gm_cuda_set_attn_decode(k.mode);
                gm_cuda_set_attn_fill(k.fill);
                const size_t sb = gm_cuda_attention_scratch_bytes(B, nh, nkv, c.D, keys, 1);
                void *scr = NULL;
                if (sb) {
                    CU(cudaMalloc(&scr, sb));
                    CU(cudaMemset(scr, 0, sb));
                }
                const int reps = 40;
                std::vector<gm_cuda_kv> kvs(copies);
                std::vector<gm_cuda_attn> as(copies);
                for (int i = 0; i < copies; i++) {
                    kvs[i] = gm_cuda_kv{1, n_slots, c.window ? 1 : 0, nkv, c.D, kcs[i], vcs[i]};
                    as[i] = gm_cuda_attn{&kvs[i], B, dp, ds_, nh, c.window, keys, 1, q, o};
                }
                cudaGraph_t g;
                cudaGraphExec_t ge;
                CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                for (int r = 0; r < reps; r++) CK(gm_cuda_attention(&as[r % copies], scr, sb, st));
                CU(cudaStreamEndCapture(st, &g));
                CU(cudaGraphInstantiate(&ge, g, 0));
                const float us = time_ms([&] { CU(cudaGraphLaunch(ge, st)); }, st) * 1e3f / reps;
                CU(cudaGraphExecDestroy(ge)); CU(cudaGraphDestroy(g));
                const double gbs = bytes / (us * 1e-6) / 1e9;
                printf("| %s | %d | %s | %d | %.2f | %.0f | %.0f%% |\n", c.name, B, k.name, k.fill, us, gbs,
                       100.0 * gbs / bw_read);
                fflush(stdout);
                if (scr) CU(cudaFree(scr));
            }
            gm_cuda_set_attn_decode(-1);
            gm_cuda_set_attn_fill(0);
            for (int i = 0; i < copies; i++) { CU(cudaFree(kcs[i])); CU(cudaFree(vcs[i])); }
            CU(cudaFree(q)); CU(cudaFree(o)); CU(cudaFree(dp)); CU(cudaFree(ds_));
        }
    }
    CU(cudaGetLastError());
    printf("\n(copy BW = the larger of the two copy measurements, %.0f GB/s; read BW %.0f GB/s)\n", bw_ref, bw_read);
    return 0;
}
