/* gemma_ops_cuda.cu: the CUDA kernels of the ops Gemma 4 and Gemma 3n add to the backend table (backend.h):
 * scale, add_scale, mul_rows, transpose, rms_match, sparsity_gate, AltUp predict / correct, and the routed
 * mixture of experts (routing, the chosen experts' matrices through gm_cuda_matmul_id, the weighted sum), all
 * enqueued on a stream with no host synchronisation. Leaves to others: the matvec kernels (matmul_cuda.cu),
 * GeGLU (ops_cuda.cu), which layers call what (src/model).
 *
 * Every op here moves a few KB to a few MB: launch bound. They are written for exactness against kernels/ref:
 * the reference's float operations in its order (__fmul_rn / __fadd_rn where nvcc would fuse a multiply-add),
 * and its double-precision row sums kept in double. */
#include <math.h>

#include "common_cuda.cuh"

static unsigned blocks_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

/* ---- elementwise ---- */
__global__ void scale_kernel(float *x, int64_t n, float s) {
    gmc_pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fmul_rn(x[i], s);
}

__global__ void add_scale_kernel(float *y, const float *x, int64_t n, float s) {
    gmc_pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __fmul_rn(__fadd_rn(y[i], x[i]), s);
}

__global__ void mul_rows_kernel(const float *x, float *y, int64_t total, int d, const float *__restrict__ w) {
    gmc_pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] = __fmul_rn(x[i], w[i % d]);
}

/* dst[j][i][e] = src[i][j][e]: thread per element of dst. */
__global__ void transpose_kernel(const float *__restrict__ src, float *__restrict__ dst, int n0, int n1, int d,
                                 int64_t total) {
    gmc_pdl_wait();
    const int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= total) return;
    const int e = (int)(o % d);
    const int64_t ji = o / d;
    const int i = (int)(ji % n0), j = (int)(ji / n0);
    dst[o] = src[((int64_t)i * n1 + j) * d + e];
}

extern "C" int gm_cuda_scale(float *x, int64_t n, float s, gm_cuda_stream stream) {
    if (!x || n < 0) return gmc_fail(-1, "scale: bad arguments");
    if (n == 0) return 0;
    gmc_launch(scale_kernel, blocks_for(n, 256), 256, 0, stream, x, n, s);
    return gmc_check_launch("scale");
}

extern "C" int gm_cuda_add_scale(float *y, const float *x, int64_t n, float s, gm_cuda_stream stream) {
    if (!x || !y || n < 0) return gmc_fail(-1, "add_scale: bad arguments");
    if (n == 0) return 0;
    gmc_launch(add_scale_kernel, blocks_for(n, 256), 256, 0, stream, y, x, n, s);
    return gmc_check_launch("add_scale");
}

extern "C" int gm_cuda_mul_rows(const float *x, float *y, int64_t n_rows, int32_t d, const float *w,
                                gm_cuda_stream stream) {
    if (!x || !y || !w || n_rows < 0 || d <= 0) return gmc_fail(-1, "mul_rows: bad arguments");
    const int64_t total = n_rows * d;
    if (total == 0) return 0;
    gmc_launch(mul_rows_kernel, blocks_for(total, 256), 256, 0, stream, x, y, total, d, w);
    return gmc_check_launch("mul_rows");
}

extern "C" int gm_cuda_transpose(const float *src, float *dst, int32_t n0, int32_t n1, int32_t d,
                                 gm_cuda_stream stream) {
    if (!src || !dst || n0 < 0 || n1 < 0 || d <= 0) return gmc_fail(-1, "transpose: bad arguments");
    const int64_t total = (int64_t)n0 * n1 * d;
    if (total == 0) return 0;
    gmc_launch(transpose_kernel, blocks_for(total, 256), 256, 0, stream, src, dst, n0, n1, d, total);
    return gmc_check_launch("transpose");
}

/* ---- row reductions in double: one block of 256 threads per row ---- */
__device__ double block_sum_d(double v, double *part) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* part may still be read from a previous call */
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) s += part[i];
    return s;
}

__global__ void rms_match_kernel(float *y, const float *__restrict__ ref, int d, float eps) {
    gmc_pdl_wait();
    __shared__ double part[32];
    float *yr = y + (int64_t)blockIdx.x * d;
    const float *rr = ref + (int64_t)blockIdx.x * d;
    double sr = 0.0, sy = 0.0;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        sr += (double)rr[i] * (double)rr[i];
        sy += (double)yr[i] * (double)yr[i];
    }
    sr = block_sum_d(sr, part);
    sy = block_sum_d(sy, part);
    const float target = sqrtf((float)(sr / d));
    const float mean_y = (float)(sy / d);
    const float current = sqrtf(mean_y > eps ? mean_y : eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) yr[i] = __fdiv_rn(__fmul_rn(yr[i], target), current);
}

__global__ void sparsity_gate_kernel(float *g, int d, float k) {
    gmc_pdl_wait();
    __shared__ double part[32];
    float *gr = g + (int64_t)blockIdx.x * d;
    double s = 0.0;
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += gr[i];
    const double mean = block_sum_d(s, part) / d;
    double v = 0.0;
    for (int i = threadIdx.x; i < d; i += blockDim.x) v += ((double)gr[i] - mean) * ((double)gr[i] - mean);
    const double var = block_sum_d(v, part);
    const float cutoff = __fadd_rn((float)mean, __fmul_rn(sqrtf((float)(var / d)), k));
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const float x = __fsub_rn(gr[i], cutoff);
        gr[i] = x > 0.0f ? x : 0.0f;
    }
}

extern "C" int gm_cuda_rms_match(float *y, const float *ref, int64_t n_rows, int32_t d, float eps,
                                 gm_cuda_stream stream) {
    if (!y || !ref || n_rows < 0 || d <= 0) return gmc_fail(-1, "rms_match: bad arguments");
    if (n_rows == 0) return 0;
    gmc_launch(rms_match_kernel, (unsigned)n_rows, 256, 0, stream, y, ref, d, eps);
    return gmc_check_launch("rms_match");
}

extern "C" int gm_cuda_sparsity_gate(float *g, int64_t n_rows, int32_t d, float k, gm_cuda_stream stream) {
    if (!g || n_rows < 0 || d <= 0) return gmc_fail(-1, "sparsity_gate: bad arguments");
    if (n_rows == 0) return 0;
    gmc_launch(sparsity_gate_kernel, (unsigned)n_rows, 256, 0, stream, g, d, k);
    return gmc_check_launch("sparsity_gate");
}

/* ---- AltUp: thread per output element (i, t, e) of y [K][n][d] ---- */
__global__ void altup_predict_kernel(const float *__restrict__ x, const float *__restrict__ c, float *__restrict__ y,
                                     int K, int n, int d, int64_t total) {
    gmc_pdl_wait();
    const int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= total) return;
    const int64_t stride = (int64_t)n * d;
    const int i = (int)(o / stride);
    const int64_t te = o % stride;
    const int t = (int)(te / d);
    const float *ci = c + (int64_t)t * K * K + (int64_t)i * K;
    float acc = 0.0f;
    for (int j = 0; j < K; j++) acc = __fadd_rn(acc, __fmul_rn(ci[j], x[j * stride + te]));
    y[o] = __fadd_rn(acc, x[i * stride + te]);
}

__global__ void altup_correct_kernel(const float *__restrict__ pred, const float *__restrict__ act,
                                     const float *__restrict__ c, float *__restrict__ y, int K, int active, int n,
                                     int d, int64_t total) {
    gmc_pdl_wait();
    const int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= total) return;
    const int64_t stride = (int64_t)n * d;
    const int i = (int)(o / stride);
    const int64_t te = o % stride;
    const int t = (int)(te / d);
    const float coef = __fadd_rn(c[(int64_t)t * K + i], 1.0f);
    y[o] = __fadd_rn(__fmul_rn(__fsub_rn(act[te], pred[active * stride + te]), coef), pred[o]);
}

extern "C" int gm_cuda_altup_predict(const float *x, const float *c, float *y, int32_t K, int32_t n, int32_t d,
                                     gm_cuda_stream stream) {
    if (!x || !c || !y || K <= 0 || n < 0 || d <= 0) return gmc_fail(-1, "altup_predict: bad arguments");
    const int64_t total = (int64_t)K * n * d;
    if (total == 0) return 0;
    gmc_launch(altup_predict_kernel, blocks_for(total, 256), 256, 0, stream, x, c, y, K, n, d, total);
    return gmc_check_launch("altup_predict");
}

extern "C" int gm_cuda_altup_correct(const float *pred, const float *act, const float *c, float *y, int32_t K,
                                     int32_t active, int32_t n, int32_t d, gm_cuda_stream stream) {
    if (!pred || !act || !c || !y || K <= 0 || active < 0 || active >= K || n < 0 || d <= 0)
        return gmc_fail(-1, "altup_correct: bad arguments");
    const int64_t total = (int64_t)K * n * d;
    if (total == 0) return 0;
    gmc_launch(altup_correct_kernel, blocks_for(total, 256), 256, 0, stream, pred, act, c, y, K, active, n, d, total);
    return gmc_check_launch("altup_correct");
}

/* ---- mixture of experts ---- */
enum { MOE_MAX_EXPERTS = 512, MOE_MAX_USED = 32 };

/* Routing, one warp per token, the operations of gm_ref_moe_route: softmax (sum in double), then n_used passes that
 * each take the largest expert not yet taken, the lower index on ties, renormalised, times expert_scale. Lane l holds
 * experts l, l+32, ... in registers; each pass is a per-lane scan and a warp argmax. (One thread per token spent
 * most of a decoding layer walking its 128 experts through local and global memory.) */
enum { MOE_LANE_EXPERTS = MOE_MAX_EXPERTS / 32, MOE_ROUTE_WARPS = 4 };

__global__ void moe_route_kernel(const float *__restrict__ logits, int n, int E, int k,
                                 const float *__restrict__ escale, int32_t *__restrict__ ids,
                                 float *__restrict__ wts) {
    gmc_pdl_wait();
    const int lane = threadIdx.x & 31, t = blockIdx.x * MOE_ROUTE_WARPS + threadIdx.x / 32;
    if (t >= n) return; /* the whole warp leaves together */
    const float *lg = logits + (int64_t)t * E;
    float p[MOE_LANE_EXPERTS];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < MOE_LANE_EXPERTS; i++) {
        const int e = lane + 32 * i;
        p[i] = e < E ? lg[e] : -INFINITY;
        mx = fmaxf(mx, p[i]);
    }
    mx = gmc_warp_max(mx);
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < MOE_LANE_EXPERTS; i++)
        if (lane + 32 * i < E) {
            p[i] = expf(__fsub_rn(p[i], mx));
            sum += p[i];
        }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = sum > 0 ? (float)(1.0 / sum) : 0.0f;
#pragma unroll
    for (int i = 0; i < MOE_LANE_EXPERTS; i++) p[i] = __fmul_rn(p[i], inv);
    uint32_t taken = 0; /* bit i: expert lane + 32 i is chosen */
    int my_id = 0;      /* lane j keeps slot j */
    float my_w = 0.0f, s = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        float bv = 0.0f;
#pragma unroll
        for (int i = 0; i < MOE_LANE_EXPERTS; i++)
            if (lane + 32 * i < E && !(taken >> i & 1) && (best < 0 || p[i] > bv)) best = lane + 32 * i, bv = p[i];
        for (int o = 16; o > 0; o >>= 1) {
            const int ob = __shfl_xor_sync(0xffffffffu, best, o);
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            if (ob >= 0 && (best < 0 || ov > bv || (ov == bv && ob < best))) best = ob, bv = ov;
        }
        if ((best & 31) == lane) taken |= 1u << (best >> 5);
        if (lane == j) my_id = best, my_w = bv;
        s = __fadd_rn(s, bv);
    }
    if (lane < k) {
        float w = __fdiv_rn(my_w, s);
        if (escale) w = __fmul_rn(w, escale[my_id]);
        ids[(int64_t)t * k + lane] = my_id;
        wts[(int64_t)t * k + lane] = w;
    }
}

/* Groups (a batch with more pairs than experts): the pairs sorted by expert, pair p to slot inv[p] (perm[slot] = p;
 * the order within an expert is the atomics', which changes no value: each column of a group is computed alone),
 * each expert's slots cut into groups of gs (gm_cuda_matmul_id's width), group i = expert geid[i] over slots gcol[2i]
 * .. + gcol[2i + 1] − 1; groups past the last are empty (0 slots). One block. */
__global__ void moe_group_kernel(const int32_t *__restrict__ ids, int pairs, int E, int gs, int n_groups,
                                 int32_t *__restrict__ perm, int32_t *__restrict__ inv, int32_t *__restrict__ geid,
                                 int32_t *__restrict__ gcol) {
    gmc_pdl_wait();
    __shared__ int cnt[MOE_MAX_EXPERTS], start[MOE_MAX_EXPERTS], gfirst[MOE_MAX_EXPERTS + 1];
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&cnt[ids[p]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int sl = 0, gr = 0;
        for (int e = 0; e < E; e++) {
            start[e] = sl, gfirst[e] = gr;
            sl += cnt[e], gr += (cnt[e] + gs - 1) / gs;
        }
        gfirst[E] = gr;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) /* each expert's groups, then its counter for the slots */
        for (int i = gfirst[e]; i < gfirst[e + 1]; i++) {
            const int c0 = (i - gfirst[e]) * gs, left = cnt[e] - c0;
            geid[i] = e, gcol[2 * i] = start[e] + c0, gcol[2 * i + 1] = left < gs ? left : gs;
        }
    for (int i = gfirst[E] + threadIdx.x; i < n_groups; i += blockDim.x) geid[i] = 0, gcol[2 * i] = 0, gcol[2 * i + 1] = 0;
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        const int e = ids[p], slot = start[e] + atomicAdd(&cnt[e], 1);
        perm[slot] = p, inv[p] = slot;
    }
}

/* xs[slot] = x[perm[slot] / k] for the pairs' slots; the MOE_PAD padding rows after them (a last group's unused
 * columns may read them; never stored) zeroed in xs and g. Grid: (columns, slots + padding). */
__global__ void moe_gather_kernel(const float *__restrict__ x, const int32_t *__restrict__ perm, int k, int pairs,
                                  int64_t H, int64_t F, float *__restrict__ xs, float *__restrict__ g) {
    gmc_pdl_wait();
    const int slot = blockIdx.y;
    const int64_t h = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (slot < pairs) {
        if (h < H) xs[(int64_t)slot * H + h] = x[(int64_t)(perm[slot] / k) * H + h];
    } else {
        if (h < H) xs[(int64_t)slot * H + h] = 0.0f;
        if (h < F) g[(int64_t)slot * F + h] = 0.0f;
    }
}

/* out[t][h] = Σ over the token's chosen experts in increasing index of w · y[pair][h] (as the CPU backend); y of pair
 * p at row inv[p] (grouped) or p. */
__global__ void moe_combine_kernel(const float *__restrict__ ys, const int32_t *__restrict__ ids,
                                   const float *__restrict__ wts, const int32_t *__restrict__ inv, int k, int64_t H,
                                   float *__restrict__ out) {
    gmc_pdl_wait();
    const int t = blockIdx.y;
    const int64_t h = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= H) return;
    int order[MOE_MAX_USED];
    for (int j = 0; j < k; j++) order[j] = j;
    for (int a = 1; a < k; a++) /* insertion sort of the k slots by expert id */
        for (int b = a; b > 0 && ids[(int64_t)t * k + order[b]] < ids[(int64_t)t * k + order[b - 1]]; b--) {
            const int tmp = order[b];
            order[b] = order[b - 1];
            order[b - 1] = tmp;
        }
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        const int64_t pr = (int64_t)t * k + order[j], row = inv ? inv[pr] : pr;
        acc = __fadd_rn(acc, __fmul_rn(wts[pr], ys[row * H + h]));
    }
    out[(int64_t)t * H + h] = acc;
}

static size_t al256(size_t v) { return (v + 255) & ~(size_t)255; }

/* Pairs go through the experts in groups when there are more of them than experts (a batch), else one by one. */
static bool moe_grouped(int64_t pairs, int32_t n_expert) { return pairs > n_expert; }
/* Groups at most for groups of gs: each expert's pairs / gs rounded up, summed over the experts any pair chose. */
static int64_t moe_max_groups(int64_t pairs, int32_t n_expert, int gs) {
    return (pairs + gs - 1) / gs + (pairs < n_expert ? pairs : n_expert);
}
/* Pairs an expert on average from which groups go to the int8 kernel (see gm_cuda_moe). */
enum { MOE_MMQ_MIN_FILL = 16 };
/* Padding rows after the slots: a group reads at most its width's columns. */
enum { MOE_PAD = GM_CUDA_MMQ_GROUP > GM_CUDA_MOE_GROUP ? GM_CUDA_MMQ_GROUP : GM_CUDA_MOE_GROUP };

/* Scratch layout (P pairs; grouped: P' = P + MOE_PAD rows, G = moe_max_groups of the narrowest groups; else P' = P,
 * G = 0):
 * ids [P] | wts [P] | perm [P] | inv [P] | geid [G] | gcol [2G] | xs [P'][H] | g [P'][F] | ys [P][H] | matmul scratch,
 * where perm, inv and xs are empty unless grouped. */
struct MoeScratch {
    int32_t *ids, *perm, *inv, *geid, *gcol;
    float *wts, *xs, *g, *ys;
    void *mm;
    size_t bytes, mm_bytes;
};
static MoeScratch moe_scratch(void *base, int32_t n, int32_t k, int32_t E, int64_t H, int64_t F) {
    const int64_t P = (int64_t)n * k;
    const bool grp = moe_grouped(P, E);
    const int64_t rows = grp ? P + MOE_PAD : P, G = grp ? moe_max_groups(P, E, GM_CUDA_MOE_GROUP) : 0, pi = grp ? P : 0;
    MoeScratch m = {};
    size_t off = 0;
    uint8_t *b = (uint8_t *)base;
    auto take = [&](size_t bytes) { void *p = b ? b + off : NULL; off += al256(bytes); return p; };
    m.ids = (int32_t *)take(P * 4), m.wts = (float *)take(P * 4);
    m.perm = (int32_t *)take(pi * 4), m.inv = (int32_t *)take(pi * 4);
    m.geid = (int32_t *)take(G * 4), m.gcol = (int32_t *)take(G * 8);
    m.xs = (float *)take(grp ? rows * H * 4 : 0), m.g = (float *)take(rows * F * 4), m.ys = (float *)take(P * H * 4);
    const size_t mm_a = gm_cuda_matmul_scratch_bytes(H, grp ? (int32_t)rows : n);
    const size_t mm_b = gm_cuda_matmul_scratch_bytes(F, (int32_t)rows);
    m.mm_bytes = mm_a > mm_b ? mm_a : mm_b;
    m.mm = take(m.mm_bytes);
    m.bytes = off;
    return m;
}

extern "C" size_t gm_cuda_moe_scratch_bytes(int32_t n, int32_t n_used, int32_t n_expert, int64_t H, int64_t F) {
    return moe_scratch(NULL, n, n_used, n_expert, H, F).bytes;
}

extern "C" int gm_cuda_moe(const gm_cuda_moe_args *a, void *scratch, size_t scratch_bytes, gm_cuda_stream stream) {
    if (!a || !a->logits || !a->x || !a->out || a->n < 0 || a->n_expert <= 0 || a->n_expert > MOE_MAX_EXPERTS ||
        a->n_used <= 0 || a->n_used > a->n_expert || a->n_used > MOE_MAX_USED || a->gate_up.ne1 % 2)
        return gmc_fail(-1, "moe: bad arguments (%d experts, %d used)", a ? a->n_expert : 0, a ? a->n_used : 0);
    if (a->n == 0) return 0;
    const int64_t H = a->gate_up.ne0, F = a->gate_up.ne1 / 2;
    if (a->down.ne0 != F || a->down.ne1 != H)
        return gmc_fail(-1, "moe: down is %lldx%lld, expected %lldx%lld", (long long)a->down.ne0,
                        (long long)a->down.ne1, (long long)F, (long long)H);
    const int k = a->n_used, n = a->n, E = a->n_expert;
    if ((int64_t)n * k + MOE_PAD > 65535) return gmc_fail(-1, "moe: %d tokens × %d experts is too many pairs", n, k);
    const int pairs = n * k;
    const MoeScratch m = moe_scratch(scratch, n, k, E, H, F);
    if (!scratch || scratch_bytes < m.bytes)
        return gmc_fail(-1, "moe: scratch of %zu bytes, %zu needed", scratch_bytes, m.bytes);

    gmc_launch(moe_route_kernel, blocks_for(n, MOE_ROUTE_WARPS), 32 * MOE_ROUTE_WARPS, 0, stream, a->logits, n, E, k,
               a->expert_scale, m.ids, m.wts);
    int rc = gmc_check_launch("moe routing");
    if (rc) return rc;
    gm_cuda_mat gate = a->gate_up, up = a->gate_up;
    gate.ne1 = up.ne1 = F;
    up.data = (const uint8_t *)a->gate_up.data + (uint64_t)F * a->gate_up.row_bytes;
    const uint64_t gu_bytes = (uint64_t)2 * F * a->gate_up.row_bytes, dn_bytes = (uint64_t)H * a->down.row_bytes;
    const bool grp = moe_grouped(pairs, E);
    if (grp) {
        /* one group width for both products (one group table): the int8 kernel's when it takes both and the groups
         * fill its tiles enough. Its cost is per 64-column tile, the mat-vec's per group of 8: at 32 pairs an
         * expert (pp512 on the 26B-A4B, H200) 1.09 against 2.05 ms a layer; at 4 (64 sequences) 1,837 against
         * 2,512 tokens/s; even at about 16. */
        const bool mmq = gm_cuda_mmq_takes(&gate) && gm_cuda_mmq_takes(&up) && gm_cuda_mmq_takes(&a->down) &&
                         pairs >= MOE_MMQ_MIN_FILL * E;
        const int gs = mmq ? GM_CUDA_MMQ_GROUP : GM_CUDA_MOE_GROUP;
        const int rows = pairs + MOE_PAD, G = (int)moe_max_groups(pairs, E, gs);
        gmc_launch(moe_group_kernel, 1, 1024, 0, stream, (const int32_t *)m.ids, pairs, E, gs, G, m.perm, m.inv,
                   m.geid, m.gcol);
        if ((rc = gmc_check_launch("moe grouping"))) return rc;
        gmc_launch(moe_gather_kernel, dim3(blocks_for(H > F ? H : F, 256), (unsigned)rows), 256, 0, stream, a->x,
                   (const int32_t *)m.perm, k, pairs, H, F, m.xs, m.g);
        if ((rc = gmc_check_launch("moe gather")) ||
            (rc = gm_cuda_matmul_id(&gate, &up, gu_bytes, m.xs, rows, 1, m.geid, m.gcol, gs, G, m.g, m.mm, m.mm_bytes,
                                    stream)) ||
            (rc = gm_cuda_matmul_id(&a->down, NULL, dn_bytes, m.g, rows, 1, m.geid, m.gcol, gs, G, m.ys, m.mm,
                                    m.mm_bytes, stream)))
            return rc;
    } else if ((rc = gm_cuda_matmul_id(&gate, &up, gu_bytes, a->x, n, k, m.ids, NULL, 0, pairs, m.g, m.mm, m.mm_bytes,
                                       stream)) ||
               (rc = gm_cuda_matmul_id(&a->down, NULL, dn_bytes, m.g, pairs, 1, m.ids, NULL, 0, pairs, m.ys, m.mm,
                                       m.mm_bytes, stream))) {
        return rc;
    }
    gmc_launch(moe_combine_kernel, dim3(blocks_for(H, 128), (unsigned)n), 128, 0, stream, (const float *)m.ys,
               (const int32_t *)m.ids, (const float *)m.wts, (const int32_t *)(grp ? m.inv : NULL), k, H, a->out);
    return gmc_check_launch("moe combine");
}
