/* attention_cuda.cu: the KV store and the attention of the CUDA backend. Owns: writing a batch's K/V rows
 * into a layer's cache (f16, f32 or q8_0 head rows, ring slots for sliding layers) and split-K ("flash decoding") attention
 * with GQA: one block per (split of the visible keys, KV head, tile of batch tokens) attends the G query heads of
 * that KV head for every token of the tile (16 / G consecutive tokens of one sequence when the batch is long
 * enough, gm_cuda_attention_plan; else one token) with an online softmax over chunks of keys; the last block of
 * each (tile, KV head) to finish merges the splits in the same launch, and optionally writes the output quantized
 * (q8_0 / q8_K, the bytes of gm_cuda_quantize_act) for the projection that reads it. Decode launches (one token per
 * block, f16 cache) take the staged kernel instead: K/V tiles copied into shared memory two tiles ahead, scores and
 * values on the tensor cores, the same splits, merge and output (a q8_0 cache: its rows copied as they are, then
 * converted to f16 tiles in shared memory, tile by tile); in a decode step (one_per_seq) it requests its
 * first tiles' older keys before waiting on the launch before. Also the attention op's preparation (q/k/v norms,
 * RoPE) fused with the KV store: its own launch, or (gm_cuda_attn.prep with one_per_seq and fuse_prep, a decode
 * step) inside the attention's blocks: the split kernel's through shared memory and block barriers (measured slower
 * than the launch it saves, H200, E4B q4_0, 2026-12-03: +5.7 us per attention against ~5.6 us), the staged
 * kernel's a row per warp in registers (prep_row_warp; faster from an empty cache, slower at depth, where every one
 * of many split blocks prepares its q heads: H200, 2026-12-06, so the backend leaves it off). The early loads gave
 * +1.0% (tg128) to +1.7% (64 sequences at depth 1024), E4B q4_0. Leaves to others: cache allocation and which layer reads
 * which cache (src/kv, src/model).
 *
 * Cost (Gemma 4 E4B global layer, decode, 4096 keys, D = 512, 2 KV heads, f16): K+V read once per KV head:
 * 2 · 4096 · 2 · 512 · 2 B = 16.8 MB -> 3.6 us at 4.6 TB/s; FLOPs 4 · 8 · 4096 · 512 = 67 MFLOP (noise).
 * Prefill (512 tokens, sliding layer, D = 256, G = 4): ~1.07 GFLOP on the FMA pipes, K/V read once per tile of
 * 4 tokens: predicted compute-bound at ~45 us per layer.
 * Measured (H200, 2026-12-01, BENCHMARKS.md): one query token per block with a thread per key took 295 us per
 * E4B layer at pp512; tiles took it to 98 us (pp512 16.4k -> 21.0k t/s). Decode with four threads per key (a
 * key row in one round trip): 8.5 us per sliding layer at short context (PDL off), 102 us at 256 sequences x
 * 1024 keys (~2.6 TB/s of K/V); the staged kernel (2026-12-04): 8.2 / 11.8 us for one sequence's sliding / global
 * layer at depth 1024, 25.5 / 84.6 us at 64 sequences, 76 / 309 us at 256 (3.5 TB/s of K/V). Head sizes and groupings the split kernel is
 * not built for go to a simple one-warp-per-head kernel (the tiny models of the transformers fixtures). */
#include <math.h>

#include <algorithm>

#include "act_quant_cuda.cuh"
#include "common_cuda.cuh"

enum { ATT_THREADS = 128 };

/* ---- the cache's element types ----
 * __half (f16), float (f32), or KvQ8: src/kv's q8_0 head rows (D int8 values, then D / 32 f16 scales, padded to
 * 16 bytes; value i = q[i] · d[i / 32]). Head row hr (= (seq · n_slots + slot) · n_head_kv + kvh) starts at
 * kv_head<KV>(base, hr, D). A q8_0 row is written by whole warps, lane l value 32·b + l of each block b, quantized
 * as gm_quantize_q8_0_act_ref (act_quant_cuda.cuh's scales: the CPU backend's bytes). */
struct KvQ8 {
    int8_t q;
};
static_assert((int)GMC_KV_F16 == (int)GMC_F16 && (int)GMC_KV_F32 == (int)GMC_F32 && (int)GMC_KV_Q8_0 == (int)GMC_Q8_0,
              "gm_cuda_kv.type values");

template <typename KV>
__host__ __device__ constexpr size_t kv_head_bytes(int D) {
    if constexpr (sizeof(KV) == 1) return ((size_t)D + (size_t)D / 16 + 15) & ~(size_t)15;
    else return (size_t)D * sizeof(KV);
}
template <typename KV>
__device__ __forceinline__ unsigned char *kv_head(void *base, size_t hr, int D) {
    return (unsigned char *)base + hr * kv_head_bytes<KV>(D);
}
template <typename KV>
__device__ __forceinline__ const unsigned char *kv_head(const void *base, size_t hr, int D) {
    return (const unsigned char *)base + hr * kv_head_bytes<KV>(D);
}

/* Value e of a head row h of D values: one warp per 32 (e = 32·b + lane, every lane of the warp) for q8_0. */
template <typename KV>
__device__ __forceinline__ void kv_put(unsigned char *h, int D, int e, float x) {
    if constexpr (sizeof(KV) == 1) {
        const float amax = gmc_warp_max(fabsf(x));
        h[e] = (unsigned char)(int8_t)__float2int_rn(__fmul_rn(x, q8_0_inv_scale(amax)));
        const int lane = e & 31, pad = (int)kv_head_bytes<KvQ8>(D) - D - D / 16;
        if (lane == 0) ((__half *)(h + D))[e / 32] = __float2half_rn(q8_0_scale(amax));
        if (e - lane == D - 32 && lane < pad) h[D + D / 16 + lane] = 0; /* the padding, by the last block's warp */
    } else if constexpr (sizeof(KV) == 2) {
        ((__half *)h)[e] = __float2half_rn(x);
    } else {
        ((float *)h)[e] = x;
    }
}

/* Value e of a head row as a float (q8_0: q · d, exact in f32). */
template <typename KV>
__device__ __forceinline__ float kv_get(const unsigned char *h, int D, int e) {
    if constexpr (sizeof(KV) == 1) return (float)(int8_t)h[e] * __half2float(((const __half *)(h + D))[e / 32]);
    else if constexpr (sizeof(KV) == 2) return __half2float(((const __half *)h)[e]);
    else return ((const float *)h)[e];
}

/* ---- KV store: thread j of a token's row of n_head_kv · D values (q8_0: warps of 32 in one head, as D % 32 = 0) */
template <typename KV>
__global__ void kv_store_kernel(void *__restrict__ kc, void *__restrict__ vc, const float *__restrict__ k,
                                const float *__restrict__ v, int D, int n_head_kv, int n_slots, int ring,
                                const int32_t *__restrict__ pos, const int32_t *__restrict__ seq) {
    gmc_pdl_wait();
    const int t = blockIdx.y, row = n_head_kv * D;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= row) return;
    const int p = pos[t];
    const int slot = ring ? p % n_slots : p;
    const size_t hr = ((size_t)seq[t] * n_slots + slot) * n_head_kv + j / D;
    const size_t src = (size_t)t * row + j;
    kv_put<KV>(kv_head<KV>(kc, hr, D), D, j % D, k[src]);
    kv_put<KV>(kv_head<KV>(vc, hr, D), D, j % D, v[src]);
}

static bool kv_type_ok(const gm_cuda_kv *kv) {
    return kv->type == GMC_F16 || kv->type == GMC_F32 || (kv->type == GMC_Q8_0 && kv->head_dim % 32 == 0);
}

extern "C" int gm_cuda_kv_store(const gm_cuda_kv *kv, const float *k, const float *v, int32_t n_tokens,
                                const int32_t *pos, const int32_t *seq, gm_cuda_stream stream) {
    if (!kv || !kv->k || !kv->v || !k || !v || !pos || !seq || n_tokens < 0 || !kv_type_ok(kv))
        return gmc_fail(-1, "kv_store: bad arguments");
    if (n_tokens == 0) return 0;
    const int row = kv->n_head_kv * kv->head_dim;
    const dim3 grid((unsigned)((row + 255) / 256), (unsigned)n_tokens);
#define GMC_KV_STORE(KV)                                                                                            \
    gmc_launch(kv_store_kernel<KV>, grid, 256, 0, stream, kv->k, kv->v, k, v, kv->head_dim, kv->n_head_kv, kv->n_slots, \
               kv->ring, pos, seq)
    if (kv->type == GMC_F16) GMC_KV_STORE(__half);
    else if (kv->type == GMC_F32) GMC_KV_STORE(float);
    else GMC_KV_STORE(KvQ8);
#undef GMC_KV_STORE
    return gmc_check_launch("kv_store");
}

/* ---- the attention op's preparation fused with the KV store: one block of 128 threads per (head, token);
 * blocks x < n_head prepare query heads in place, the rest one KV head each (V first, from the raw K when
 * v_from_k, then K), written to the cache. The arithmetic is rmsnorm_kernel's and rope_kernel's (ops_cuda.cu),
 * operation for operation. Bytes ~ 3 · 4 · (n_head + 2 n_head_kv) · D per token: launch bound. */
enum { PREP_THREADS = 128 };

/* out[0..D) = rope(rmsnorm(src) · w) · scale, through shared memory sh[D]; norm only when do_norm (w may be
 * NULL: no weight), RoPE only when n_rot > 0. Every thread of the block calls it. */
__device__ void prep_head(const float *src, int D, bool do_norm, const float *__restrict__ w, float eps, int n_rot,
                          float pos, float theta_scale, float freq_scale, const float *__restrict__ ff, float scale,
                          float *sh) {
    const float rs = do_norm ? gmc_row_rms_scale(src, D, eps) : 1.0f;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float v = do_norm ? __fmul_rn(src[i], rs) : src[i];
        if (w) v = __fmul_rn(v, w[i]);
        sh[i] = v;
    }
    __syncthreads();
    if (n_rot > 0 || scale != 1.0f)
        for (int i = threadIdx.x; i < D / 2; i += blockDim.x)
            gmc_rope_slot(sh, i, D, n_rot, pos, theta_scale, freq_scale, ff, scale);
    __syncthreads();
}

/* A head row from shared memory, by the whole block (blockDim.x a multiple of 32: q8_0's warps of 32). */
template <typename KV>
__device__ __forceinline__ void store_row(unsigned char *dst, const float *sh, int D) {
    for (int i = threadIdx.x; i < D; i += blockDim.x) kv_put<KV>(dst, D, i, sh[i]);
}

struct PrepArgs {
    gm_cuda_prep p;
    int n_head_kv, n_slots, ring;
    void *kc, *vc;
    float theta_scale;
};

template <typename KV>
__global__ void __launch_bounds__(PREP_THREADS) attn_prep_kernel(const __grid_constant__ PrepArgs a) {
    extern __shared__ float sh[];
    gmc_pdl_wait();
    const gm_cuda_prep &p = a.p;
    const int t = blockIdx.y, h = blockIdx.x, D = p.head_dim;
    const float pos = (float)p.pos[t];
    if (h < p.n_head) {
        float *q = p.q + ((size_t)t * p.n_head + h) * D;
        prep_head(q, D, p.q_norm != NULL, p.q_norm, p.eps, p.n_rot, pos, a.theta_scale, p.freq_scale,
                  p.freq_factors, p.q_scale, sh);
        for (int i = threadIdx.x; i < D; i += blockDim.x) q[i] = sh[i];
        return;
    }
    const int kh = h - p.n_head;
    const size_t src = ((size_t)t * a.n_head_kv + kh) * D;
    const int slot = a.ring ? p.pos[t] % a.n_slots : p.pos[t];
    const size_t hr = ((size_t)p.seq[t] * a.n_slots + slot) * a.n_head_kv + kh;
    prep_head((p.v_from_k ? p.k : p.v) + src, D, p.v_norm != 0, NULL, p.eps, 0, 0.0f, 1.0f, 1.0f, NULL, 1.0f, sh);
    store_row<KV>(kv_head<KV>(a.vc, hr, D), sh, D);
    __syncthreads();
    prep_head(p.k + src, D, p.k_norm != NULL, p.k_norm, p.eps, p.n_rot, pos, a.theta_scale, p.freq_scale,
              p.freq_factors, 1.0f, sh);
    store_row<KV>(kv_head<KV>(a.kc, hr, D), sh, D);
}

static bool prep_args_ok(const gm_cuda_prep *p) {
    return p && p->q && p->pos && p->n_tokens >= 0 && p->n_head > 0 && p->head_dim > 0 && p->head_dim % 2 == 0 &&
           p->head_dim <= 1024 && p->n_rot >= 0 && p->n_rot % 2 == 0 && p->n_rot <= p->head_dim &&
           (!p->kv || (p->k && (p->v || p->v_from_k) && p->seq && p->kv->k && p->kv->v &&
                       p->kv->head_dim == p->head_dim && kv_type_ok(p->kv)));
}

/* RoPE's theta step as rope_kernel's host code computes it (powf of the host). */
static float rope_theta_scale(const gm_cuda_prep *p) { return p->n_rot ? powf(p->base, -2.0f / (float)p->n_rot) : 1.0f; }

extern "C" int gm_cuda_attn_prep(const gm_cuda_prep *p, gm_cuda_stream stream) {
    if (!prep_args_ok(p)) return gmc_fail(-1, "attn_prep: bad arguments");
    if (p->n_tokens == 0) return 0;
    PrepArgs a = {};
    a.p = *p;
    a.n_head_kv = p->kv ? p->kv->n_head_kv : 0;
    a.n_slots = p->kv ? p->kv->n_slots : 0, a.ring = p->kv ? p->kv->ring : 0;
    a.kc = p->kv ? p->kv->k : NULL, a.vc = p->kv ? p->kv->v : NULL;
    a.theta_scale = rope_theta_scale(p);
    const dim3 grid((unsigned)(p->n_head + a.n_head_kv), (unsigned)p->n_tokens);
    const size_t smem = (size_t)p->head_dim * sizeof(float);
    if (!p->kv || p->kv->type == GMC_F16) gmc_launch(attn_prep_kernel<__half>, grid, PREP_THREADS, smem, stream, a);
    else if (p->kv->type == GMC_F32) gmc_launch(attn_prep_kernel<float>, grid, PREP_THREADS, smem, stream, a);
    else gmc_launch(attn_prep_kernel<KvQ8>, grid, PREP_THREADS, smem, stream, a);
    return gmc_check_launch("attn_prep");
}

/* ---- loads of a KV row segment as floats ----
 * CG: through L2 (ld.global.cg) instead of the read-only path, for a launch that stores cache rows itself (the
 * fused preparation): the read-only path may only read what no thread of the launch writes. */
template <bool CG, typename T>
__device__ __forceinline__ T ld_ro(const T *p) {
    if constexpr (CG) return __ldcg(p);
    else return __ldg(p);
}

/* Values e0 .. e0 + VE - 1 of head row h (D values; e0 a multiple of VE, VE <= 32 dividing 32: one q8_0 block). */
template <typename KV, int VE, bool CG = false>
__device__ __forceinline__ void ld_kv(const unsigned char *h, int D, int e0, float out[VE]) {
    if constexpr (sizeof(KV) == 1) {
        const float d = __half2float(ld_ro<CG>((const __half *)(h + D) + e0 / 32));
        int8_t qv[VE];
        if constexpr (VE == 16) *(uint4 *)qv = ld_ro<CG>((const uint4 *)(h + e0));
        else if constexpr (VE == 8) *(uint2 *)qv = ld_ro<CG>((const uint2 *)(h + e0));
        else if constexpr (VE == 4) *(unsigned int *)qv = ld_ro<CG>((const unsigned int *)(h + e0));
        else if constexpr (VE == 2) *(unsigned short *)qv = ld_ro<CG>((const unsigned short *)(h + e0));
        else {
#pragma unroll
            for (int i = 0; i < VE; i++) qv[i] = (int8_t)ld_ro<CG>(h + e0 + i);
        }
#pragma unroll
        for (int i = 0; i < VE; i++) out[i] = (float)qv[i] * d;
    } else if constexpr (sizeof(KV) == 2) {
        const __half *p = (const __half *)h + e0;
        if constexpr (VE == 8) {
            const uint4 u = ld_ro<CG>((const uint4 *)p);
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float2 f = __half22float2(*(const __half2 *)&w[i]);
                out[2 * i] = f.x, out[2 * i + 1] = f.y;
            }
        } else if constexpr (VE == 4) {
            const uint2 u = ld_ro<CG>((const uint2 *)p);
            const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
            out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
        } else if constexpr (VE == 2) {
            const uint32_t u = ld_ro<CG>((const unsigned int *)p);
            const float2 a = __half22float2(*(const __half2 *)&u);
            out[0] = a.x, out[1] = a.y;
        } else {
#pragma unroll
            for (int i = 0; i < VE; i++) out[i] = __half2float(ld_ro<CG>(p + i));
        }
    } else {
        const float *p = (const float *)h + e0;
        if constexpr (VE % 4 == 0) {
#pragma unroll
            for (int i = 0; i < VE / 4; i++) {
                const float4 f = ld_ro<CG>((const float4 *)p + i);
                out[4 * i] = f.x, out[4 * i + 1] = f.y, out[4 * i + 2] = f.z, out[4 * i + 3] = f.w;
            }
        } else if constexpr (VE == 2) {
            const float2 f = ld_ro<CG>((const float2 *)p);
            out[0] = f.x, out[1] = f.y;
        } else {
#pragma unroll
            for (int i = 0; i < VE; i++) out[i] = ld_ro<CG>(p + i);
        }
    }
}

/* Row r's running softmax after a chunk of keys: the max m_old -> m_new, the chunk's exponentials (against m_new)
 * summing to sum; the factor alpha that rescales what was added before (0 when nothing was) into a_s. Lane 0 of
 * the row's warp writes. */
__device__ __forceinline__ void softmax_advance(int r, float m_old, float m_new, float sum, int lane, float *m_s,
                                                float *l_s, float *a_s) {
    if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
        a_s[r] = alpha;
    }
}

/* ---- split attention ----
 * Block (split, kvh, tile): R = TQ·G query rows, row r = i·G + g being query head kvh·G + g of batch token
 * t0 + i (t0 = tile·TQ; the caller guarantees a tile's tokens share one sequence), against the split's share of
 * the keys the tile sees together (positions LO .. HI, the union of its tokens' ranges; each row masks the keys
 * outside its own), in chunks of CHUNK = 128 / TPK keys.
 * Scores: TPK threads per key, each reading every TPK-th 16-byte piece of the key row once for all R rows (q
 * from shared memory, broadcast), summed over the TPK lanes with shuffles. TPK = 4 (one token per block:
 * decode) keeps a key row to one round trip per thread; TPK = 1 (tiles: prefill) needs no shuffles.
 * Softmax: warp w updates rows w, w + 4, ... Values: thread t owns output dims t·DPT .. +DPT-1 of every row.
 * Cost per key and block: 2·R·D FMAs against 2·D·sizeof(KV) bytes, so a tile of TQ tokens reads K/V once for
 * TQ tokens (16 query rows: ~8 FMA per byte at f16, compute-bound on the FMA pipes).
 * Splits (n_splits > 1): each block stores its rows' partials (acc, m, l) in the scratch and counts itself on its
 * (tile, kvh) group's counter; the group's last block merges the n_splits partials (merge_splits) and writes the
 * output, then sets the counter back to 0 (the scratch's counters are zero between launches: graph replays).
 * The block that writes a row's final values (n_splits = 1: every block; else the last) also quantizes them when
 * asked (quant_out), from a copy in shared memory. */
template <int R>
__device__ __forceinline__ void load_p_row(const float *p, float out[R]) {
    if constexpr (R % 4 == 0) {
#pragma unroll
        for (int r = 0; r < R; r += 4) {
            const float4 f = *(const float4 *)(p + r);
            out[r] = f.x, out[r + 1] = f.y, out[r + 2] = f.z, out[r + 3] = f.w;
        }
    } else {
#pragma unroll
        for (int r = 0; r < R; r++) out[r] = p[r];
    }
}

/* VW consecutive floats at p (VW·4-byte aligned) through L2 (ld.global.cg): partials other blocks of the same
 * launch wrote. Never the L1 / non-coherent path: another group's last block on this SM may have pulled the line
 * into L1 before they were written. */
template <int VW>
__device__ __forceinline__ void ld_cg(const float *p, float *out) {
    if constexpr (VW == 4) {
        const float4 f = __ldcg((const float4 *)p);
        out[0] = f.x, out[1] = f.y, out[2] = f.z, out[3] = f.w;
    } else if constexpr (VW == 2) {
        const float2 f = __ldcg((const float2 *)p);
        out[0] = f.x, out[1] = f.y;
    } else {
        out[0] = __ldcg(p);
    }
}

/* NU consecutive splits j .. j + NU - 1 of a 32-split chunk into one lane's merge sums (merge_splits): their
 * partials (this lane's DPL dims of each, in pieces of VW every 32·VW floats, split j's at p) all loaded first,
 * then added in split order with the weights and l of lanes j, j + 1, ... (wl -1: split skipped). */
template <int NU, int DPL, int VW, int D>
__device__ __forceinline__ void merge_step(const float *p, int j, float wl, float ll, float &L, float (&v)[DPL]) {
    float a[NU][DPL];
#pragma unroll
    for (int u = 0; u < NU; u++)
#pragma unroll
        for (int k = 0; k < DPL / VW; k++) ld_cg<VW>(p + u * D + 32 * VW * k, &a[u][VW * k]);
#pragma unroll
    for (int u = 0; u < NU; u++) {
        const float w = __shfl_sync(0xffffffffu, wl, j + u), l = __shfl_sync(0xffffffffu, ll, j + u);
        if (w >= 0.0f) {
            L = fmaf(w, l, L);
#pragma unroll
            for (int i = 0; i < DPL; i++) v[i] = fmaf(w, a[u][i], v[i]);
        }
    }
}

/* The last block of a group merges the n_splits partials of its R rows (r < n_rows in the batch): row r is head
 * row hr0 + (r / G)·n_head + r % G (token · n_head + head), its split s's (m, l) at part_ml[row · n_splits + s] and
 * acc at that index times D. Splits are added in order s = 0, 1, ...: M = max_s m_s, w_s = e^(m_s - M),
 * L = Σ_{l_s > 0} w_s·l_s, out = (Σ_{l_s > 0} w_s·acc_s) · (1 / L) (0 when L = 0); written to out[row] and, when
 * stage is not NULL, to stage[r][D]. Warps take rows (R < 4: 4 / R warps per row, each a slice of its dims), lane
 * l the VW-float pieces l, l + 32, ... of its slice (coalesced), each warp with its own M, weights (lane j: split
 * s0 + j of each 32) and L (the same operations in every lane, so the same values); U splits' partials in flight
 * per lane (16 floats or more). No shared memory, no barrier. Every thread calls it. */
template <int R, int G, int D>
__device__ __forceinline__ void merge_splits(const float *part_acc, const float2 *part_ml, int n_splits, int n_head,
                                             size_t hr0, int n_rows, float *__restrict__ out, float *stage) {
    constexpr int NW = ATT_THREADS / 32;
    constexpr int WPR = R >= NW ? 1 : NW / R;     /* warps per row */
    constexpr int DPL = D / (32 * WPR);           /* dims per lane */
    constexpr int VW = DPL >= 4 ? 4 : DPL;
    constexpr int U = DPL >= 16 ? 1 : 16 / DPL;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int dl = (warp % WPR) * (D / WPR) + VW * lane; /* the lane's first dim; then every 32·VW */
    for (int r = warp / WPR; r < n_rows; r += NW / WPR) {
        const size_t row = hr0 + (size_t)(r / G) * n_head + r % G;
        const float2 *ml = part_ml + row * n_splits;
        const float *pa = part_acc + row * n_splits * D + dl;
        float M = -INFINITY;
        for (int s = lane; s < n_splits; s += 32) M = fmaxf(M, __ldcg(ml + s).x);
        M = gmc_warp_max(M);
        float L = 0.0f, v[DPL];
#pragma unroll
        for (int i = 0; i < DPL; i++) v[i] = 0.0f;
        for (int s0 = 0; s0 < n_splits; s0 += 32) {
            const float2 m = s0 + lane < n_splits ? __ldcg(ml + s0 + lane) : make_float2(-INFINITY, 0.0f);
            const float wl = m.y > 0.0f ? expf(m.x - M) : -1.0f; /* -1: no keys, skipped */
            const int nj = min(32, n_splits - s0); /* the same for the whole warp: the shuffles stay converged */
            int j = 0;
            for (; j + U <= nj; j += U) merge_step<U, DPL, VW, D>(pa + (size_t)(s0 + j) * D, j, wl, m.y, L, v);
            for (; j < nj; j++) merge_step<1, DPL, VW, D>(pa + (size_t)(s0 + j) * D, j, wl, m.y, L, v);
        }
        const float inv = L > 0.0f ? 1.0f / L : 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = dl + 32 * VW * (i / VW) + i % VW;
            const float y = v[i] * inv;
            out[row * D + d] = y;
            if (stage) stage[(size_t)r * D + d] = y;
        }
    }
}

/* The final output of n_tok tokens of a block, staged in shared memory at x (token i's G·D values at x + i·G·D:
 * heads kvh·G .. kvh·G + G - 1, consecutive as in out), quantized into the gm_cuda_quantize_act layout (oq
 * [n_tokens][K] int8, od [n_tokens][K / QK] f32 scales, K = n_head·D) with the same quantizer arithmetic
 * (act_quant_cuda.cuh), so the bytes are gm_cuda_quantize_act's on out. One warp per block: q8_0 lane l value l
 * (amax one warp max, then q8_0_inv_scale / q8_0_scale as quant_q8_0_block; as act_prep_reg_kernel in
 * matmul_cuda.cu), q8_K (only when G·D is a multiple of 256: a block then lies in this block's heads)
 * quant_q8_K_block_warp. Every thread calls it. */
template <int D, int G>
__device__ __forceinline__ void quant_out(const float *x, int n_tok, int t0, int kvh, size_t K, int qt,
                                          int8_t *__restrict__ oq, float *__restrict__ od) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (qt == GMC_Q8_0) {
        constexpr int NB = G * D / 32;
        for (int b = warp; b < n_tok * NB; b += ATT_THREADS / 32) {
            const int i = b / NB, bb = b % NB;
            const float v = x[(size_t)i * G * D + 32 * bb + lane];
            const float amax = gmc_warp_max(fabsf(v));
            const size_t t = (size_t)(t0 + i);
            oq[t * K + (size_t)kvh * G * D + 32 * bb + lane] = (int8_t)__float2int_rn(__fmul_rn(v, q8_0_inv_scale(amax)));
            if (lane == 0) od[t * (K / 32) + (size_t)kvh * NB + bb] = q8_0_scale(amax);
        }
    } else if constexpr (G * D % 256 == 0) {
        constexpr int NB = G * D / 256;
        for (int b = warp; b < n_tok * NB; b += ATT_THREADS / 32) {
            const int i = b / NB, bb = b % NB;
            const float4 *src = (const float4 *)(x + (size_t)i * G * D + 256 * bb + 8 * lane);
            const float4 f0 = src[0], f1 = src[1];
            const float v[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
            const size_t t = (size_t)(t0 + i);
            quant_q8_K_block_warp(v, lane, oq + t * K + (size_t)kvh * G * D + 256 * bb,
                                  od + t * (K / 256) + (size_t)kvh * NB + bb);
        }
    }
}

/* Where the split kernel puts its results: the f32 output; when n_splits > 1 the partials and the group
 * counters in the scratch (gm_cuda_attention_scratch_bytes's layout), else NULL; qt (0: none, GMC_Q8_0,
 * GMC_Q8_K) with oq / od: the quantized output. */
struct AttnOut {
    float *out;
    float *pacc;
    float2 *pml;
    unsigned int *cnt;
    int qt;
    int8_t *oq;
    float *od;
};

/* The attention op's preparation fused into a decode launch (gm_cuda_attn.prep with one_per_seq): gm_cuda_prep's
 * values, theta_scale as the host computes it; write_kv: the tokens' K/V are prepared and stored (prep->kv). */
struct AttnPrep {
    const float *k, *v, *q_norm, *k_norm, *ff;
    int v_norm, v_from_k, write_kv, n_rot;
    float eps, theta_scale, freq_scale, q_scale;
};

/* A fused decode block's preparation: its G query rows q_s (raw on entry) and, when own, its KV head's raw V and K
 * rows kv_s[0] / kv_s[1], prepared in place with attn_prep_kernel's arithmetic to the bit (prep_head per row: the
 * sums of gmc_row_rms_scale in the same order, gmc_rope_slot's rotation), but all rows at once: one reduction
 * pass, and each RoPE slot's sine and cosine computed once for the G + 1 rows that rotate. Every thread calls it. */
template <int D, int G>
__device__ void prep_fused(float (*q_s)[D], float (*kv_s)[D], bool own, const AttnPrep &pr, float pos) {
    constexpr int NW = ATT_THREADS / 32;
    __shared__ float part[G + 2][NW];
    __shared__ float rs_s[G + 2];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nr = own ? G + 2 : G; /* rows: q heads, then V, then K */
    auto row = [&](int r) -> float * { return r < G ? q_s[r] : kv_s[r - G]; };
    auto normed = [&](int r) { return r < G ? pr.q_norm != NULL : r == G ? pr.v_norm != 0 : pr.k_norm != NULL; };
    for (int r = 0; r < nr; r++) {
        if (!normed(r)) continue; /* the same for the whole block */
        const float *x = row(r);
        float ss = 0.0f;
        for (int i = threadIdx.x; i < D; i += ATT_THREADS) ss = fmaf(x[i], x[i], ss);
        ss = gmc_warp_sum(ss);
        if (lane == 0) part[r][warp] = ss;
    }
    __syncthreads();
    if (warp == 0)
        for (int r = 0; r < nr; r++) {
            if (!normed(r)) continue;
            const float v = gmc_warp_sum(lane < NW ? part[r][lane] : 0.0f);
            if (lane == 0) rs_s[r] = 1.0f / sqrtf(v / (float)D + pr.eps);
        }
    __syncthreads();
    for (int r = 0; r < nr; r++) {
        float *x = row(r);
        const bool nm = normed(r);
        const float *w = r < G ? pr.q_norm : r == G ? NULL : pr.k_norm;
        const float rs = rs_s[r];
        for (int i = threadIdx.x; i < D; i += ATT_THREADS) {
            float v = nm ? __fmul_rn(x[i], rs) : x[i];
            if (w) v = __fmul_rn(v, w[i]);
            x[i] = v;
        }
    }
    __syncthreads();
    const int half = pr.n_rot / 2;
    for (int i = threadIdx.x; i < D / 2; i += ATT_THREADS) {
        if (i < half) {
            float sn, cs;
            gmc_rope_sincos(i, pos, pr.theta_scale, pr.freq_scale, pr.ff, sn, cs);
#pragma unroll
            for (int r = 0; r < G; r++) gmc_rope_rotate(q_s[r], i, half, sn, cs, pr.q_scale);
            if (own) gmc_rope_rotate(kv_s[1], i, half, sn, cs, 1.0f);
        } else if (pr.q_scale != 1.0f) {
#pragma unroll
            for (int r = 0; r < G; r++) gmc_rope_pass(q_s[r], i, D, pr.n_rot, pr.q_scale);
        }
    }
    __syncthreads();
}

/* A block's results, once its keys are done: acc[r][e] (output dim threadIdx.x·DPT + e of row r, not yet divided
 * by l), m_s / l_s its rows' softmax max and sum. One split (n_splits = 1): the rows' outputs; else the partials,
 * counted on the group's counter, and the group's last block merges them (merge_splits). The block that writes
 * final values quantizes them when asked (quant_out), from a copy at stage (R·D floats of shared memory no thread
 * reads any more). Rows past the batch are skipped. Every thread calls it. */
template <int R, int G, int D>
__device__ __forceinline__ void attn_finish(const float (&acc)[R][D / ATT_THREADS], const float *m_s,
                                            const float *l_s, float *stage, int split, int n_splits, int t0, int kvh,
                                            int n_tokens, int n_head, const AttnOut &res) {
    constexpr int DPT = D / ATT_THREADS;
    __shared__ bool last; /* this block is its group's last to finish */
    const int n_rows = min(R, (n_tokens - t0) * G); /* rows of tokens inside the batch: rows are in token order */
    const size_t hr0 = (size_t)t0 * n_head + (size_t)kvh * G; /* row 0's head row (token · n_head + head) */
    const int d0 = threadIdx.x * DPT;
    if (n_splits == 1) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= n_rows) break;
            const float l = l_s[r];
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            float *dst = res.out + (hr0 + (size_t)(r / G) * n_head + r % G) * D + d0;
#pragma unroll
            for (int e = 0; e < DPT; e++) {
                const float y = acc[r][e] * inv;
                dst[e] = y;
                if (res.qt) stage[(size_t)r * D + d0 + e] = y;
            }
        }
    } else {
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= n_rows) break;
            const size_t idx = (hr0 + (size_t)(r / G) * n_head + r % G) * n_splits + split;
            float *pa = res.pacc + idx * D + d0;
#pragma unroll
            for (int e = 0; e < DPT; e++) pa[e] = acc[r][e];
            if (threadIdx.x == 0) res.pml[idx] = make_float2(m_s[r], l_s[r]);
        }
        __threadfence(); /* the partials visible device-wide before this block counts itself */
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned int *c = res.cnt + (size_t)blockIdx.z * gridDim.y + kvh;
            last = atomicAdd(c, 1u) == (unsigned int)n_splits - 1;
            if (last) *c = 0u; /* the whole group has counted: zero again for the next launch */
        }
        __syncthreads();
        if (!last) return;
        __threadfence();
        merge_splits<R, G, D>(res.pacc, res.pml, n_splits, n_head, hr0, n_rows, res.out, res.qt ? stage : NULL);
    }
    if (res.qt) {
        __syncthreads();
        quant_out<D, G>(stage, n_rows / G, t0, kvh, (size_t)n_head * D, res.qt, res.oq, res.od);
    }
}

/* PREP: the preparation fused (AttnPrep; TQ = 1 and one token per sequence): q read raw and prepared in shared
 * memory, the token's own K/V prepared and stored by the block whose split holds its key, before any key is read;
 * K/V then read through L2 (ld_kv's CG), as this launch writes cache rows. */
template <typename KV, int D, int G, int TQ, int TPK, bool PREP = false, bool WVP = false>
__global__ void __launch_bounds__(ATT_THREADS) attn_split_kernel(
    const void *kc, const void *vc, int n_slots, int ring, int n_head_kv,
    const int32_t *__restrict__ pos, const int32_t *__restrict__ seq, int n_tokens, int n_head, int window, int ks,
    int n_splits, const float *__restrict__ q, const AttnOut res, const __grid_constant__ AttnPrep pr) {
    static_assert(!PREP || TQ == 1, "the fused preparation is for one token per block");
    gmc_pdl_wait();
    constexpr int R = TQ * G;
    constexpr int CHUNK = ATT_THREADS / TPK;
    constexpr int VE = 16 / sizeof(KV);          /* values per 16-byte load */
    constexpr int NV = D / VE;                   /* 16-byte pieces per key row */
    constexpr int VPT = NV / TPK;                /* of them per thread in the score phase */
    constexpr int DPT = D / ATT_THREADS;         /* output dims per thread */
    constexpr int PS = R % 4 == 0 ? R + 4 : R;   /* p_s row stride: 16-byte rows, fewer bank conflicts */
    static_assert(D % VE == 0 && NV % TPK == 0 && D % ATT_THREADS == 0 && CHUNK % 32 == 0, "head dim");
    __shared__ __align__(16) float q_s[R][D];
    __shared__ __align__(16) float p_s[CHUNK][PS];
    __shared__ float m_s[R], l_s[R], a_s[R];

    const int split = blockIdx.x, kvh = blockIdx.y, t0 = blockIdx.z * TQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int sq = seq[t0];
    int lo_i[TQ], hi_i[TQ]; /* each token's visible key positions; empty (1, 0) past the batch */
    int LO = 0x7fffffff, HI = -1;
#pragma unroll
    for (int i = 0; i < TQ; i++) {
        lo_i[i] = 1, hi_i[i] = 0;
        if (t0 + i < n_tokens) {
            const int p = pos[t0 + i];
            lo_i[i] = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0, hi_i[i] = p;
            LO = min(LO, lo_i[i]), HI = max(HI, p);
        }
    }
    const int n_keys = HI - LO + 1;
    const int j0 = split * ks;
    const int j1 = split == n_splits - 1 ? n_keys : min(j0 + ks, n_keys);

    for (int i4 = threadIdx.x; i4 < R * D / 4; i4 += ATT_THREADS) {
        const int r = i4 / (D / 4), e4 = i4 % (D / 4), i = r / G, g = r % G;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t0 + i < n_tokens) v = ((const float4 *)(q + ((size_t)(t0 + i) * n_head + (size_t)kvh * G + g) * D))[e4];
        ((float4 *)&q_s[r][0])[e4] = v;
    }
    if constexpr (PREP) {
        __shared__ __align__(16) float kv_s[2][D]; /* the token's V and K rows of this KV head */
        const bool own = pr.write_kv && split == min((n_keys - 1) / ks, n_splits - 1); /* its split holds key HI */
        const size_t src = ((size_t)t0 * n_head_kv + kvh) * D;
        if (own)
            for (int i = threadIdx.x; i < D; i += ATT_THREADS)
                kv_s[0][i] = (pr.v_from_k ? pr.k : pr.v)[src + i], kv_s[1][i] = pr.k[src + i];
        __syncthreads();
        prep_fused<D, G>(q_s, kv_s, own, pr, (float)HI);
        if (own) {
            const size_t hr = ((size_t)sq * n_slots + (ring ? HI % n_slots : HI)) * n_head_kv + kvh;
            store_row<KV>(kv_head<KV>((void *)vc, hr, D), kv_s[0], D);
            store_row<KV>(kv_head<KV>((void *)kc, hr, D), kv_s[1], D);
        }
    }
    if (threadIdx.x < R) m_s[threadIdx.x] = -INFINITY, l_s[threadIdx.x] = 0.0f;
    float acc[R][DPT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int e = 0; e < DPT; e++) acc[r][e] = 0.0f;
    /* The value phase by warps (WV, asked for by WVP: launches of at most a block per SM, attn_values_by_warps):
     * warp w adds keys w, w + 4, ... of a chunk, lane l dims of the 16-byte pieces l, l + 32, ... (a key row in one
     * coalesced round of 16-byte loads, CHUNK / 4 rows in flight per warp); the four warps' sums are added at the
     * end (wv_reduce). Else thread t adds every key of the chunk for dims t·DPT .. +DPT-1 (4-byte loads at D = 256
     * f16, a row after another), with fewer registers: more blocks per SM when there are many. */
    constexpr int DPL = D / 32;
    constexpr bool WV = WVP && R * DPL <= 64 && DPL % VE == 0;
    float accw[WV ? R : 1][WV ? DPL : 1];
#pragma unroll
    for (int r = 0; r < (WV ? R : 1); r++)
#pragma unroll
        for (int e = 0; e < (WV ? DPL : 1); e++) accw[r][e] = 0.0f;
    __syncthreads();

    const size_t seq_base = (size_t)sq * n_slots;
    const int kj = threadIdx.x / TPK, part = threadIdx.x % TPK;
    for (int c0 = j0; c0 < j1; c0 += CHUNK) {
        const int cn = min(CHUNK, j1 - c0);
        const int kp = LO + c0 + kj;
        float s[R];
#pragma unroll
        for (int r = 0; r < R; r++) s[r] = 0.0f;
        if (kj < cn) {
            const int slot = ring ? kp % n_slots : kp;
            const unsigned char *krow = kv_head<KV>(kc, (seq_base + slot) * n_head_kv + kvh, D);
#pragma unroll(VPT < 8 ? VPT : 8)
            for (int v = 0; v < VPT; v++) {
                const int e0 = (v * TPK + part) * VE;
                float kv[VE];
                ld_kv<KV, VE, PREP>(krow, D, e0, kv);
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int e = 0; e < VE; e++) s[r] = fmaf(q_s[r][e0 + e], kv[e], s[r]);
            }
        }
#pragma unroll
        for (int o = 1; o < TPK; o <<= 1)
#pragma unroll
            for (int r = 0; r < R; r++) s[r] += __shfl_xor_sync(0xffffffffu, s[r], o);
        if (kj < cn)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r % TPK == part) p_s[kj][r] = kp >= lo_i[r / G] && kp <= hi_i[r / G] ? s[r] : -INFINITY;
        __syncthreads();
        for (int r = warp; r < R; r += ATT_THREADS / 32) {
            float v[CHUNK / 32], mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < CHUNK / 32; i++) {
                v[i] = lane + 32 * i < cn ? p_s[lane + 32 * i][r] : -INFINITY;
                mx = fmaxf(mx, v[i]);
            }
            const float m_old = m_s[r];
            const float m_new = fmaxf(m_old, gmc_warp_max(mx));
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < CHUNK / 32; i++) {
                const float e = v[i] == -INFINITY ? 0.0f : expf(v[i] - m_new); /* masked: 0, never NaN */
                p_s[lane + 32 * i][r] = e;
                sum += e;
            }
            softmax_advance(r, m_old, m_new, gmc_warp_sum(sum), lane, m_s, l_s, a_s);
        }
        __syncthreads();
        if constexpr (WV) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float a = a_s[r];
#pragma unroll
                for (int e = 0; e < DPL; e++) accw[r][e] *= a;
            }
            constexpr int NW = ATT_THREADS / 32;
#pragma unroll
            for (int u = 0; u < CHUNK / NW; u++) {
                const int jj = warp + NW * u;
                if (jj >= cn) break;
                const int vp = LO + c0 + jj;
                const int slot = ring ? vp % n_slots : vp;
                const unsigned char *vrow = kv_head<KV>(vc, (seq_base + slot) * n_head_kv + kvh, D);
                float vv[DPL], pr[R];
#pragma unroll
                for (int i = 0; i < DPL / VE; i++) ld_kv<KV, VE, PREP>(vrow, D, (lane + 32 * i) * VE, &vv[i * VE]);
                load_p_row<R>(&p_s[jj][0], pr);
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int e = 0; e < DPL; e++) accw[r][e] = fmaf(pr[r], vv[e], accw[r][e]);
            }
        } else {
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float a = a_s[r];
#pragma unroll
                for (int e = 0; e < DPT; e++) acc[r][e] *= a;
            }
            const int d0 = threadIdx.x * DPT;
#pragma unroll 8
            for (int jj = 0; jj < cn; jj++) {
                const int vp = LO + c0 + jj;
                const int slot = ring ? vp % n_slots : vp;
                const unsigned char *vrow = kv_head<KV>(vc, (seq_base + slot) * n_head_kv + kvh, D);
                float vv[DPT], pr[R];
                ld_kv<KV, DPT, PREP>(vrow, D, d0, vv);
                load_p_row<R>(&p_s[jj][0], pr);
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int e = 0; e < DPT; e++) acc[r][e] = fmaf(pr[r], vv[e], acc[r][e]);
            }
        }
        __syncthreads();
    }

    if constexpr (WV) { /* wv_reduce: the warps' sums added in warp order through q_s (free since the last chunk) */
        constexpr int NW = ATT_THREADS / 32;
#pragma unroll
        for (int w = 0; w < NW; w++) {
            if (warp == w)
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int i = 0; i < DPL / VE; i++)
#pragma unroll
                        for (int e = 0; e < VE; e++) {
                            float *d = &q_s[r][(lane + 32 * i) * VE + e];
                            *d = w == 0 ? accw[r][i * VE + e] : *d + accw[r][i * VE + e];
                        }
            __syncthreads();
        }
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int e = 0; e < DPT; e++) acc[r][e] = q_s[r][threadIdx.x * DPT + e];
        __syncthreads(); /* every sum read before q_s is written again (the quantized output's staging) */
    }
    attn_finish<R, G, D>(acc, m_s, l_s, &q_s[0][0], split, n_splits, t0, kvh, n_tokens, n_head, res);
}

/* ---- the preparation by warps (the staged kernel's fused preparation) ----
 * One warp prepares one head row of D floats held in its registers, x[j] = element lane + 32·j, with
 * attn_prep_kernel's arithmetic to the bit: the RMS sums in gmc_row_rms_scale's order under PREP_THREADS threads
 * (thread τ = 32·w + lane adds elements τ, τ + 128, ...; each of the four virtual warps' sums by the same
 * shuffles; their four sums as gmc_warp_sum adds them: (w0 + w2) + (w1 + w3)), the norm, then RoPE slot by slot
 * (gmc_rope_rotate; the pass-through elements times scale as gmc_rope_pass). No barrier: the rows of a block go
 * to its warps side by side. RoPE pairs must lie in one lane: half = n_rot / 2 a multiple of
 * 32 (rope_by_warps). */
static_assert(PREP_THREADS == 128, "prep_row_warp replays 128 threads' sums");
static bool rope_by_warps(int n_rot) { return n_rot % 64 == 0; }

/* Slot lane + 32·j's sine and cosine for j < hj = half / 32: gmc_rope_sincos's values, its theta chain walked once
 * per lane (slot i's theta is pos times theta_scale i times, rounded after each step). */
template <int NS>
__device__ __forceinline__ void rope_angles_warp(float (&sn)[NS], float (&cs)[NS], int hj, float pos, float theta_scale,
                                                 float freq_scale, const float *__restrict__ ff, int lane) {
    float theta = pos;
    for (int k = 0; k < lane; k++) theta = __fmul_rn(theta, theta_scale);
#pragma unroll
    for (int j = 0; j < NS; j++) {
        if (j >= hj) break;
        if (j)
            for (int k = 0; k < 32; k++) theta = __fmul_rn(theta, theta_scale);
        gmc_rope_sincos_of(theta, lane + 32 * j, freq_scale, ff, sn[j], cs[j]);
    }
}

template <int D>
__device__ __forceinline__ void prep_row_warp(float (&x)[D / 32], bool norm, const float *__restrict__ w, float eps,
                                              int hj, const float (&sn)[D / 64], const float (&cs)[D / 64],
                                              float scale, int lane) {
    constexpr int NJ = D / 32, NVW = PREP_THREADS / 32;
    static_assert(NJ % NVW == 0, "whole virtual warps");
    if (norm) {
        float T[NVW];
#pragma unroll
        for (int vw = 0; vw < NVW; vw++) {
            float ss = 0.0f;
#pragma unroll
            for (int j = vw; j < NJ; j += NVW) ss = fmaf(x[j], x[j], ss);
            T[vw] = gmc_warp_sum(ss);
        }
        const float total = (T[0] + T[2]) + (T[1] + T[3]);
        const float rs = 1.0f / sqrtf(total / (float)D + eps);
#pragma unroll
        for (int j = 0; j < NJ; j++) x[j] = __fmul_rn(x[j], rs);
    }
    if (w)
#pragma unroll
        for (int j = 0; j < NJ; j++) x[j] = __fmul_rn(x[j], w[lane + 32 * j]);
    /* slot lane + 32·j (j < hj) pairs x[j] with x[j + hj]: hj is uniform, the indices compile-time */
#pragma unroll
    for (int d = 1; d <= NJ / 2; d++) {
        if (d != hj) continue;
#pragma unroll
        for (int j = 0; j < d; j++) {
            float pair[2] = {x[j], x[j + d]};
            gmc_rope_rotate(pair, 0, 1, sn[j], cs[j], scale);
            x[j] = pair[0], x[j + d] = pair[1];
        }
    }
    if (scale != 1.0f)
#pragma unroll
        for (int j = 0; j < NJ; j++)
            if (j >= 2 * hj) x[j] = __fmul_rn(x[j], scale);
}

/* ---- staged decode attention on the tensor cores ----
 * One token per block, as attn_split_kernel with TQ = 1 (block (split, kvh, token); f16 or q8_0 cache; G <= 8), for decode
 * steps: the split's keys go in tiles of KT keys whose K and V rows cp.async copies into shared memory, the next
 * two tiles' while the block computes on this one, so that a block has two tiles (2 · 2·KT·D·2 bytes) in flight.
 * The products run on the tensor cores (mma m16n8k16, f16 in, f32 sums), the G query heads padded to the 8
 * columns of an n-tile. K and V are f16 already; q and the softmax weights P are f32, so each is split into two
 * f16 parts (x = hi + lo, hi = f16(x), lo = f16(x - hi): x to ~2^-22) and multiplied twice, which keeps the
 * results within float rounding of attn_split_kernel's (f16 alone measured errors of 2.5e-4 on the test's
 * values; the second product costs one mma per fragment, not another load):
 *   scores  Sᵀ[key][g] = K[key][:] · q[g][:]   (m = 16 keys, k = 16 dims; A = K rows by ldmatrix, B = q's parts,
 *           held in registers); warp w takes m-tile w % MT and the share w / MT of the dims, the KS shares added
 *           through shared memory;
 *   softmax as attn_split_kernel's (a warp per head row, f32), the tile's weights stored as P's two parts;
 *   values  Oᵀ[d][g] += Vᵀ[d][keys] · Pᵀ[keys][g]   (m = 16 dims, k = 16 keys; A = V rows by ldmatrix.trans);
 *           warp w owns dims D/4 · w .. (its accumulators rescaled by each column's alpha).
 * Then Oᵀ through shared memory into attn_split_kernel's layout (thread t: dims t·DPT ..) and attn_finish. q must
 * be finite in f16 (|q| < 65504). Tile rows sit at piece index pc ^ (j mod 8) (16-byte pieces, an XOR swizzle):
 * each 8×8 matrix that ldmatrix reads spans eight different bank groups. Tiles of 16 keys (8 KB of K, 32 at
 * D = 128), three stages: shared memory ~51 KB at D = 256, 4 blocks per SM; ~99 KB at D = 512, 2 blocks per SM.
 * Measured against two stages of 16 KB K tiles (3 blocks per SM; H200, 2026-12-04): 256 sequences at depth 1024
 * 89 -> 86 us (sliding), 319 -> 310 us (global); 16 sequences 19.8 -> 14.2 / 36.6 -> 33.8 us; three stages of
 * 16 KB tiles (2 blocks per SM at D = 256): sliding 101 us.
 * Why (H200, 2026-12-04, BENCHMARKS.md "fifteenth session"): the same staging with f32 FMAs from shared memory
 * read ~2.2 TB/s at 256 sequences, issue-bound by an estimate (~1200 instructions a thread per 32-key tile); a
 * tile here issues KT·D/64 mma (both parts) for the block.
 * Cost (E4B sliding layer, 256 sequences at depth 1024, 2 KV heads, D = 256, 512 keys): K/V 268 MB -> 60 us at
 * 4.46 TB/s (the measured read bandwidth).
 * A q8_0 cache (KV = KvQ8): the stages hold the head rows as copied (D int8, then the scales: HB bytes a row,
 * [stage][K, V][KT][HB]), and the products take their A fragments from them with 32-bit loads, each int8 pair made
 * an exact f16 pair (i8x2_half2). The dims (k of the scores, m of the values) are taken in a permuted order so that
 * one word of a row serves a fragment: in the scores, k-step columns 2·t4, 2·t4 + 1, 2·t4 + 8, 2·t4 + 9 are dims
 * 4·t4 .. 4·t4 + 3 of its 16 (q's B fragments follow), and each block of 32 dims is summed apart and times the key's
 * scale after (exact); in the values, a block of 32 dims is two m-tiles, rows g, g + 8 of the first dims 4g, 4g + 1,
 * of the second 4g + 2, 4g + 3, the pairs of keys gathered from two rows' words by __byte_perm, and the value scale
 * folded into the weights: B = P · d_v · 64 as two f16 parts (64: the small weights' low parts clear of f16's
 * subnormals; divided out at the end). So no conversion pass and no f16 copy: the same barriers as f16 and results
 * within float rounding of gm_ref_attention_group_q8. Bytes 17/32 of f16's (HB = 272 at D = 256): the 60 us above ->
 * ~32 us if still bound by the reads. Tiles of ~8 KB of K as f16's (32 keys at D = 256, 16 at 512): shared memory
 * ~55 KB, 4 blocks per SM. Measured (H100, 2026-12-07, E4B q4_0, 256 sequences at depth 1024; BENCHMARKS.md): f16
 * 16.3k t/s (sliding / global launch 114 / 430 us); a first version that converted each tile to an f16 stage 16.0k;
 * this one with 16-key tiles 17.1k (113 / 240 us), with the tiles above 19.1k (78 / 228 us: 1.97 TB/s, bound by its
 * ~15 warps an SM walking their tiles in series, not by the reads); eight warps a block 18.4k. */
enum { STAGED_TILE_BYTES = 8192, STAGED_STAGES = 3, STAGED_MAX_G = 8 };

template <typename KV, int D, int G>
struct StagedShape {
    static constexpr bool Q8 = sizeof(KV) == 1;
    /* keys per tile: STAGED_TILE_BYTES of K, at least an m-tile (f16: 32, 16, 16 at D = 128, 256, 512; q8_0, about a
     * byte a value: 64, 32, 16) */
    static constexpr int KT_BYTES = STAGED_TILE_BYTES / (Q8 ? D : 2 * D);
    static constexpr int KT = KT_BYTES > 16 ? KT_BYTES : 16;
    static constexpr int MT = KT / 16;                     /* m-tiles of keys in the score phase */
    static constexpr int KS = (ATT_THREADS / 32) / MT;     /* warps sharing an m-tile, each a share of the dims */
    static constexpr int KSTEPS = D / 16 / KS;             /* a warp's k-steps in the score phase (8) */
    static constexpr int PV_MT = D / 16 / (ATT_THREADS / 32); /* a warp's m-tiles of dims in the value phase */
    static constexpr int PV_KS = KT / 16;                  /* k-steps of 16 keys in the value phase */
    static constexpr int PH = KT + 8;                      /* P row stride in halves: rows in different banks */
    static constexpr size_t HB = kv_head_bytes<KV>(D);    /* a head row's bytes in the cache */
    /* the stages: f16 rows [K, V][stage][KT][D] (swizzled), or q8_0 rows as copied [stage][K, V][KT][HB] */
    static constexpr size_t KV_BYTES = Q8 ? (size_t)2 * STAGED_STAGES * KT * HB : (size_t)2 * STAGED_STAGES * KT * D * sizeof(__half);
    static constexpr size_t QH_BYTES = (size_t)2 * 8 * D * sizeof(__half); /* q's f16 parts, over the last stage */
    static constexpr size_t SP_BYTES = (size_t)KS * KT * 8 * sizeof(float);
    static constexpr int PF = KT + 4; /* q8_0: the f32 weights' row stride */
    /* P's two f16 parts [2][8][PH], or (q8_0) P in f32 [8][PF] */
    static constexpr size_t PH_BYTES = ((Q8 ? (size_t)8 * PF * sizeof(float) : (size_t)2 * 8 * PH * sizeof(__half)) + 15) & ~(size_t)15;
    static constexpr size_t SMEM = KV_BYTES + SP_BYTES + PH_BYTES; /* the output staged over K/V at the end */
    /* q's parts over the last stage: f16 its K rows, q8_0 its K and V rows */
    static constexpr size_t QH_ROOM = Q8 ? (size_t)2 * KT * HB : (size_t)KT * D * sizeof(__half);
    static_assert(D / 8 >= 8 && MT >= 1 && MT <= 4 && KS * MT == 4 && G <= STAGED_MAX_G &&
                  (size_t)G * D * sizeof(float) <= KV_BYTES && QH_BYTES <= QH_ROOM && HB % 16 == 0 &&
                  (!Q8 || (KSTEPS % 2 == 0 && PV_MT % 2 == 0)), "staged shape");
};

/* Where piece pc (8 halves) of tile row j sits, in halves from the row's start. */
__device__ __forceinline__ int staged_at(int j, int pc) { return (pc ^ (j & 7)) * 8; }

/* Two int8 values of w as an f16 pair, exactly: bytes 0, 1 (HI false) or 2, 3 (HI true), low half first. Each byte
 * biased by 128 (^ 0x80) is placed under 0x64: the half 1024 + byte; minus 1152 leaves the int8 value. */
template <bool HI>
__device__ __forceinline__ uint32_t i8x2_half2(uint32_t w) {
    const uint32_t hw = __byte_perm(w ^ 0x80808080u, 0x64646464u, HI ? 0x5342u : 0x5140u);
    const __half2 h = __hsub2(*(const __half2 *)&hw, __float2half2_rn(1152.0f));
    return *(const uint32_t *)&h;
}

/* x, y as two f16 pairs: hi = f16(x, y), lo = f16 of what hi leaves out (x = hi + lo to ~2^-22). */
__device__ __forceinline__ void split_half2(float x, float y, uint32_t &hi, uint32_t &lo) {
    const __half2 h = __floats2half2_rn(x, y);
    const float2 hf = __half22float2(h);
    const __half2 l = __floats2half2_rn(x - hf.x, y - hf.y);
    hi = *(const uint32_t *)&h, lo = *(const uint32_t *)&l;
}

template <typename KV, int D, int G, bool PREP>
__global__ void __launch_bounds__(ATT_THREADS) attn_staged_kernel(
    const void *kc, const void *vc, int n_slots, int ring, int n_head_kv, const int32_t *__restrict__ pos,
    const int32_t *__restrict__ seq, int n_tokens, int n_head, int window, int ks, int n_splits,
    const float *__restrict__ q, const AttnOut res, const __grid_constant__ AttnPrep pr, int early) {
    using S = StagedShape<KV, D, G>;
    constexpr bool Q8 = S::Q8;
    static_assert(!(PREP && Q8), "the fused preparation is built for an f16 cache");
    constexpr int KT = S::KT, MT = S::MT, NST = STAGED_STAGES, PH = S::PH;
    constexpr int HB = (int)S::HB, PPR = Q8 ? HB / 16 : D / 8; /* 16-byte pieces a row copies */
    /* The copies of a tile: TPR threads a row (a quarter warp: 128 contiguous bytes an instruction, in shared memory
     * one pass over the 32 banks), a thread its rows j, j + ATT_THREADS / TPR, ... and of each the pieces p0,
     * p0 + TPR, ...; so a row's address (a modulo of the ring and 64-bit products) is computed once a tile, not once
     * a piece (that was ~55 of the ~930 instructions a warp issued a q8_0 tile at D = 256, for each of its ~4 pieces).
     * Measured (H100, E4B q4_0, sliding layers at 256 sequences, depth 1024; BENCHMARKS.md, twenty-ninth session):
     * 30.5 -> 28.3 M instructions a launch at q8_0 (74.7 -> 73.5 us), 36.2 -> 24.9 M at f16 (102.3 -> 100.4 us); one
     * sequence +2%. Four threads a row (64-byte runs, two passes over the banks at q8_0's 272-byte rows) issued fewer,
     * 24.8 M, but took 84.6 us. */
    constexpr int TPR = 8;
    static_assert(KT % (ATT_THREADS / TPR) == 0, "whole rows a pass");
    constexpr int DPT = D / ATT_THREADS; /* output dims per thread in attn_finish's layout */
    extern __shared__ __align__(16) unsigned char staged_smem[];
    __half *k_s = (__half *)staged_smem; /* f16: [NST][KT][D], then V the same */
    __half *v_s = k_s + (size_t)NST * KT * D;
    unsigned char *raw = staged_smem;    /* q8_0: [NST][K, V][KT][HB] */
    /* q's parts [2][8][D] in the last stage (f16: its K rows; q8_0: its K and V rows), which the loads before the loop
     * (tiles 0 .. NST - 2) leave alone: read into registers before the loop, whose first barrier comes before that
     * stage's loads */
    __half(*q_h)[8][D] = (__half(*)[8][D])(Q8 ? (void *)(raw + (size_t)(NST - 1) * 2 * KT * HB)
                                              : (void *)(k_s + (size_t)(NST - 1) * KT * D));
    float(*s_part)[KT][8] = (float(*)[KT][8])(staged_smem + S::KV_BYTES);                   /* [KS][KT][8] */
    __half(*p_h)[8][PH] = (__half(*)[8][PH])(staged_smem + S::KV_BYTES + S::SP_BYTES);      /* [2][8][PH] */
    float(*p_f)[S::PF] = (float(*)[S::PF])(staged_smem + S::KV_BYTES + S::SP_BYTES);       /* q8_0: [8][PF] */
    float(*o_s)[D] = (float(*)[D])staged_smem; /* [G][D] over the K/V stages, once every tile is done */
    __shared__ float m_s[G], l_s[G], a_s[G];
    __shared__ __align__(16) __half kv_own[PREP ? 2 : 1][PREP ? D : 8]; /* PREP: the token's own V and K rows */

    const int split = blockIdx.x, kvh = blockIdx.y, t = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int j0 = split * ks;
    int p = 0, LO = 0, n_keys = 0, j1 = 0, n_tiles = 0;
    size_t seq_base = 0;
    auto locate = [&] {
        p = pos[t];
        LO = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
        n_keys = p - LO + 1;
        j1 = split == n_splits - 1 ? n_keys : min(j0 + ks, n_keys);
        n_tiles = j1 > j0 ? (j1 - j0 + KT - 1) / KT : 0;
        seq_base = (size_t)seq[t] * n_slots;
    };
    bool own = false; /* PREP: this block prepares and stores the token's own K/V (its split holds key p) */
    /* q's value x at (row r, dim e) as its two f16 parts */
    auto put_q = [&](int r, int e, float x) {
        const __half hi = __float2half_rn(x);
        q_h[0][r][e] = hi, q_h[1][r][e] = __float2half_rn(x - __half2float(hi));
    };

    /* Rows of tile i into stage i % NST, by part: ROWS_OLD the keys before the token's own (stored by launches
     * that finished before this one's predecessor: safe to read before gmc_pdl_wait) and the rows past the split,
     * zero-filled (their P is 0; a stale NaN there would still reach the sums); ROWS_NEW the token's own key;
     * ROWS_ALL both. The own key's rows come from kv_own when this block prepared them, else by cp.async. */
    enum { ROWS_OLD, ROWS_NEW, ROWS_ALL };
    auto load_rows = [&](int i, int part) {
        if (i >= n_tiles) return;
        const int st = i % NST, c0 = j0 + i * KT, cn = min(KT, j1 - c0);
        const int p0 = threadIdx.x % TPR; /* this thread's first piece of each of its rows */
#pragma unroll
        for (int j = threadIdx.x / TPR; j < KT; j += ATT_THREADS / TPR) {
            const int kp = LO + c0 + min(j, cn - 1);
            const bool is_new = j < cn && kp == p;
            if (part == ROWS_OLD ? is_new : part == ROWS_NEW ? !is_new : false) continue;
            __half *kd = k_s + (size_t)st * KT * D + j * D, *vd = v_s + (size_t)st * KT * D + j * D;
            if constexpr (PREP)
                if (is_new && own) {
                    for (int pc = p0; pc < PPR; pc += TPR) {
                        *(uint4 *)(kd + staged_at(j, pc)) = *(const uint4 *)&kv_own[1][pc * 8];
                        *(uint4 *)(vd + staged_at(j, pc)) = *(const uint4 *)&kv_own[0][pc * 8];
                    }
                    continue;
                }
            const size_t hr = (seq_base + (ring ? kp % n_slots : kp)) * n_head_kv + kvh;
            const int nb = j < cn ? 16 : 0;
            if constexpr (Q8) {
                unsigned char *kr = raw + (size_t)st * 2 * KT * HB + j * HB, *vr = kr + (size_t)KT * HB;
                const unsigned char *ks = kv_head<KV>(kc, hr, D), *vs = kv_head<KV>(vc, hr, D);
#pragma unroll
                for (int pc = p0; pc < PPR; pc += TPR) {
                    cp_async16(kr + pc * 16, ks + pc * 16, nb);
                    cp_async16(vr + pc * 16, vs + pc * 16, nb);
                }
            } else {
                const __half *ks = (const __half *)kc + hr * D, *vs = (const __half *)vc + hr * D;
#pragma unroll
                for (int pc = p0; pc < PPR; pc += TPR) {
                    cp_async16(kd + staged_at(j, pc), ks + pc * 8, nb);
                    cp_async16(vd + staged_at(j, pc), vs + pc * 8, nb);
                }
            }
        }
    };
    /* tile i whole, one commit per call, empty or not, so that cp_async_wait counts tiles */
    auto load_tile = [&](int i) {
        load_rows(i, ROWS_ALL);
        cp_async_commit();
    };

    /* early (a decode launch: one token per sequence, so the token's own key is the only one this step stores):
     * the first tiles' older rows are requested before the wait, overlapping the launch before; they join the first
     * tile's group. PREP (early is set): also what the preparation needs of immutable data and of the positions:
     * the RoPE angles in registers (warps with rows), the norm weights in shared memory (w_s: q's, then K's) */
    constexpr int NJ = D / 32;
    float sn[PREP ? NJ / 2 : 1], cs[PREP ? NJ / 2 : 1];
    __shared__ __align__(16) float w_s[PREP ? 2 : 1][PREP ? D : 4];
    const int hj = pr.n_rot / 64;
    if (early) {
        locate();
#pragma unroll
        for (int i = 0; i < NST - 1; i++) load_rows(i, ROWS_OLD);
        if constexpr (PREP) {
            own = pr.write_kv && j0 < n_keys && n_keys - 1 < j1;
            if (warp < G + (own ? 2 : 0))
                rope_angles_warp<NJ / 2>(sn, cs, hj, (float)p, pr.theta_scale, pr.freq_scale, pr.ff, lane);
            for (int i = threadIdx.x; i < D; i += ATT_THREADS) {
                if (pr.q_norm) w_s[0][i] = pr.q_norm[i];
                if (own && pr.k_norm) w_s[1][i] = pr.k_norm[i];
            }
            __syncthreads();
        }
    }
    gmc_pdl_wait();
    if (!early) locate();
    if constexpr (!PREP) {
#pragma unroll
        for (int i = 0; i < NST - 1; i++) {
            load_rows(i, early ? ROWS_NEW : ROWS_ALL);
            cp_async_commit();
        }
        for (int i = threadIdx.x; i < 8 * D; i += ATT_THREADS) {
            const int r = i / D, e = i % D;
            put_q(r, e, r < G ? q[((size_t)t * n_head + (size_t)kvh * G + r) * D + e] : 0.0f);
        }
    } else {
        /* the preparation (early is set): warp w prepares rows w, w + 4, ... of the G query heads, then, in the block
         * whose split holds key p, V and K, stored in the cache and kept in kv_own for the tile that holds key p */
        const size_t src = ((size_t)t * n_head_kv + kvh) * D;
        const size_t dst = ((seq_base + (ring ? p % n_slots : p)) * n_head_kv + kvh) * D;
        const int nr = G + (own ? 2 : 0);
        auto row_in = [&](int r) -> const float * {
            return r < G ? q + ((size_t)t * n_head + (size_t)kvh * G + r) * D
                   : r == G ? (pr.v_from_k ? pr.k : pr.v) + src : pr.k + src;
        };
        float x[NJ], xn[NJ]; /* this row, and the warp's next, loaded before this one is worked on */
        if (warp < nr)
#pragma unroll
            for (int j = 0; j < NJ; j++) x[j] = row_in(warp)[lane + 32 * j];
        for (int r = warp; r < nr; r += ATT_THREADS / 32) {
            const bool more = r + ATT_THREADS / 32 < nr;
            if (more)
#pragma unroll
                for (int j = 0; j < NJ; j++) xn[j] = row_in(r + ATT_THREADS / 32)[lane + 32 * j];
            if (r < G) {
                prep_row_warp<D>(x, pr.q_norm != NULL, pr.q_norm ? w_s[0] : NULL, pr.eps, hj, sn, cs, pr.q_scale, lane);
#pragma unroll
                for (int j = 0; j < NJ; j++) put_q(r, lane + 32 * j, x[j]);
            } else {
                if (r == G) prep_row_warp<D>(x, pr.v_norm != 0, NULL, pr.eps, 0, sn, cs, 1.0f, lane);
                else prep_row_warp<D>(x, pr.k_norm != NULL, pr.k_norm ? w_s[1] : NULL, pr.eps, hj, sn, cs, 1.0f, lane);
                __half *c = (__half *)(r == G ? vc : kc) + dst;
#pragma unroll
                for (int j = 0; j < NJ; j++) {
                    const __half h = __float2half_rn(x[j]);
                    c[lane + 32 * j] = h, kv_own[r - G][lane + 32 * j] = h;
                }
            }
            if (more)
#pragma unroll
                for (int j = 0; j < NJ; j++) x[j] = xn[j];
        }
        for (int i = threadIdx.x; i < (8 - G) * D; i += ATT_THREADS) put_q(G + i / D, i % D, 0.0f);
    }
    if constexpr (Q8)
        for (int i = threadIdx.x; i < 8 * S::PF; i += ATT_THREADS) (&p_f[0][0])[i] = 0.0f;
    else
        for (int i = threadIdx.x; i < 2 * 8 * PH; i += ATT_THREADS) (&p_h[0][0][0])[i] = __float2half_rn(0.0f);
    if (threadIdx.x < G) m_s[threadIdx.x] = -INFINITY, l_s[threadIdx.x] = 0.0f;
    __syncthreads();
    if constexpr (PREP) { /* the first tiles' own-key rows, from kv_own now that it is written */
#pragma unroll
        for (int i = 0; i < NST - 1; i++) {
            load_rows(i, ROWS_NEW);
            cp_async_commit();
        }
    }

    const int mt = warp % MT, kshare = warp / MT;
    uint32_t qb[2][S::KSTEPS][2]; /* B fragments of q's two parts for this warp's k-steps: (k = dims 2·t4.., n = head g;
                                     q8_0: k 2·t4, 2·t4 + 1 / + 8, + 9 are dims 4·t4, 4·t4 + 1 / + 2, + 3) */
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int kk = 0; kk < S::KSTEPS; kk++) {
            const int k0 = kshare * (D / S::KS) + 16 * kk;
            qb[h][kk][0] = *(const uint32_t *)&q_h[h][g][k0 + (Q8 ? 4 : 2) * t4];
            qb[h][kk][1] = *(const uint32_t *)&q_h[h][g][k0 + (Q8 ? 4 * t4 + 2 : 2 * t4 + 8)];
        }
    float acc[S::PV_MT][4]; /* Oᵀ fragments: (dim m0 + g (+8), heads 2·t4, 2·t4 + 1) */
#pragma unroll
    for (int m = 0; m < S::PV_MT; m++) acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.0f;

    for (int i = 0; i < n_tiles; i++) {
        cp_async_wait<NST - 2>();
        __syncthreads(); /* tile i landed for every thread; every thread is done with tile i - 1's stage */
        load_tile(i + NST - 1);
        const int st = i % NST, cn = min(KT, j1 - (j0 + i * KT));
        const __half *kt = k_s + (size_t)st * KT * D, *vt = v_s + (size_t)st * KT * D;
        const unsigned char *kq = raw + (size_t)st * 2 * KT * HB, *vq = kq + (size_t)KT * HB; /* q8_0 */
        {   /* scores of keys mt·16 .. + 15 over this warp's share of the dims */
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if constexpr (Q8) { /* rows r0, r0 + 8, a block of 32 dims at a time, times each row's scale after */
                const unsigned char *row0 = kq + (size_t)(mt * 16 + g) * HB, *row1 = row0 + 8 * (size_t)HB;
#pragma unroll
                for (int bb = 0; bb < S::KSTEPS / 2; bb++) {
                    const int e0 = kshare * (D / S::KS) + 32 * bb;
                    float cb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                    for (int h2 = 0; h2 < 2; h2++) {
                        const uint32_t w0 = *(const uint32_t *)(row0 + e0 + 16 * h2 + 4 * t4);
                        const uint32_t w1 = *(const uint32_t *)(row1 + e0 + 16 * h2 + 4 * t4);
                        const uint32_t a[4] = {i8x2_half2<false>(w0), i8x2_half2<false>(w1), i8x2_half2<true>(w0),
                                               i8x2_half2<true>(w1)};
                        mma_f16(cb, a, qb[0][2 * bb + h2][0], qb[0][2 * bb + h2][1]);
                        mma_f16(cb, a, qb[1][2 * bb + h2][0], qb[1][2 * bb + h2][1]);
                    }
                    const float d0 = __half2float(((const __half *)(row0 + D))[e0 / 32]);
                    const float d1 = __half2float(((const __half *)(row1 + D))[e0 / 32]);
                    c[0] = fmaf(d0, cb[0], c[0]), c[1] = fmaf(d0, cb[1], c[1]);
                    c[2] = fmaf(d1, cb[2], c[2]), c[3] = fmaf(d1, cb[3], c[3]);
                }
            } else {
                const int key = mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
                for (int kk = 0; kk < S::KSTEPS; kk++) {
                    const int pc = (kshare * (D / S::KS) + 16 * kk) / 8 + (lane >> 4);
                    uint32_t a[4];
                    ldmatrix_x4(a, kt + key * D + staged_at(key, pc));
                    mma_f16(c, a, qb[0][kk][0], qb[0][kk][1]);
                    mma_f16(c, a, qb[1][kk][0], qb[1][kk][1]);
                }
            }
            *(float2 *)&s_part[kshare][mt * 16 + g][2 * t4] = make_float2(c[0], c[1]);
            *(float2 *)&s_part[kshare][mt * 16 + g + 8][2 * t4] = make_float2(c[2], c[3]);
        }
        __syncthreads();
        constexpr int NPL = (KT + 31) / 32; /* a tile's keys per lane */
        for (int r = warp; r < G; r += ATT_THREADS / 32) {
            float v[NPL], mx = -INFINITY;
#pragma unroll
            for (int i2 = 0; i2 < NPL; i2++) {
                const int j = lane + 32 * i2;
                float sc = -INFINITY;
                if (j < cn) {
                    sc = s_part[0][j][r];
#pragma unroll
                    for (int k2 = 1; k2 < S::KS; k2++) sc += s_part[k2][j][r];
                }
                v[i2] = sc;
                mx = fmaxf(mx, sc);
            }
            const float m_old = m_s[r];
            const float m_new = fmaxf(m_old, gmc_warp_max(mx));
            float sum = 0.0f;
#pragma unroll
            for (int i2 = 0; i2 < NPL; i2++) {
                const int j = lane + 32 * i2;
                const float e = v[i2] == -INFINITY ? 0.0f : expf(v[i2] - m_new); /* past cn: 0 */
                if (j < KT) {
                    if constexpr (Q8) {
                        p_f[r][j] = e;
                    } else {
                        const __half hi = __float2half_rn(e);
                        p_h[0][r][j] = hi, p_h[1][r][j] = __float2half_rn(e - __half2float(hi));
                    }
                }
                sum += e;
            }
            softmax_advance(r, m_old, m_new, gmc_warp_sum(sum), lane, m_s, l_s, a_s);
        }
        __syncthreads();
        {   /* values: this warp's dims, the tile's keys 16 at a time */
            const float al0 = 2 * t4 < G ? a_s[2 * t4] : 0.0f, al1 = 2 * t4 + 1 < G ? a_s[2 * t4 + 1] : 0.0f;
#pragma unroll
            for (int m = 0; m < S::PV_MT; m++) acc[m][0] *= al0, acc[m][1] *= al1, acc[m][2] *= al0, acc[m][3] *= al1;
#pragma unroll
            for (int kk = 0; kk < S::PV_KS && Q8; kk++) {
                /* keys ka, ka + 1 (k 2·t4, 2·t4 + 1) and ka + 8, ka + 9; this warp's blocks of 32 dims */
                const int ka = 16 * kk + 2 * t4;
                const float pa = p_f[g][ka] * 64.0f, pb = p_f[g][ka + 1] * 64.0f, pc = p_f[g][ka + 8] * 64.0f,
                            pd = p_f[g][ka + 9] * 64.0f;
                const unsigned char *ra = vq + (size_t)ka * HB, *rb = ra + HB, *rc = ra + 8 * (size_t)HB,
                                    *rd = rc + HB;
#pragma unroll
                for (int bl = 0; bl < S::PV_MT / 2; bl++) {
                    const int blk = warp * (S::PV_MT / 2) + bl, e0 = 32 * blk + 4 * g;
                    auto dv = [&](const unsigned char *r) { return __half2float(((const __half *)(r + D))[blk]); };
                    uint32_t b[2][2];
                    split_half2(pa * dv(ra), pb * dv(rb), b[0][0], b[1][0]);
                    split_half2(pc * dv(rc), pd * dv(rd), b[0][1], b[1][1]);
                    const uint32_t wa = *(const uint32_t *)(ra + e0), wb = *(const uint32_t *)(rb + e0);
                    const uint32_t wc = *(const uint32_t *)(rc + e0), wd = *(const uint32_t *)(rd + e0);
                    /* dims e0, e0 + 1 of keys (ka, ka + 1) and (ka + 8, ka + 9): the first m-tile; e0 + 2, + 3 the second */
                    const uint32_t ab01 = __byte_perm(wa, wb, 0x5140u), ab23 = __byte_perm(wa, wb, 0x7362u);
                    const uint32_t cd01 = __byte_perm(wc, wd, 0x5140u), cd23 = __byte_perm(wc, wd, 0x7362u);
                    const uint32_t a0[4] = {i8x2_half2<false>(ab01), i8x2_half2<true>(ab01), i8x2_half2<false>(cd01),
                                            i8x2_half2<true>(cd01)};
                    const uint32_t a1[4] = {i8x2_half2<false>(ab23), i8x2_half2<true>(ab23), i8x2_half2<false>(cd23),
                                            i8x2_half2<true>(cd23)};
                    mma_f16(acc[2 * bl], a0, b[0][0], b[0][1]);
                    mma_f16(acc[2 * bl], a0, b[1][0], b[1][1]);
                    mma_f16(acc[2 * bl + 1], a1, b[0][0], b[0][1]);
                    mma_f16(acc[2 * bl + 1], a1, b[1][0], b[1][1]);
                }
            }
#pragma unroll
            for (int kk = 0; kk < S::PV_KS && !Q8; kk++) {
                uint32_t b[2][2];
#pragma unroll
                for (int h = 0; h < 2; h++)
                    b[h][0] = *(const uint32_t *)&p_h[h][g][16 * kk + 2 * t4],
                    b[h][1] = *(const uint32_t *)&p_h[h][g][16 * kk + 2 * t4 + 8];
                const int key = 16 * kk + (lane & 7) + ((lane >> 4) << 3);
#pragma unroll
                for (int m = 0; m < S::PV_MT; m++) {
                    const int pc = (warp * S::PV_MT + m) * 2 + ((lane >> 3) & 1);
                    uint32_t a[4];
                    ldmatrix_x4<true>(a, vt + key * D + staged_at(key, pc));
                    mma_f16(acc[m], a, b[0][0], b[0][1]);
                    mma_f16(acc[m], a, b[1][0], b[1][1]);
                }
            }
        }
    }
    /* Oᵀ fragments into o_s[head][dim] (over the stages: every warp done with its last tile, no copy in flight),
     * then attn_split_kernel's layout */
    __syncthreads();
#pragma unroll
    for (int m = 0; m < S::PV_MT; m++) {
        /* rows g and g + 8 of m-tile m: dims d0, d1 (q8_0: the permuted order of the value phase, weights times 64) */
        const int mm = warp * S::PV_MT + m;
        const int d0 = Q8 ? 32 * (mm / 2) + 4 * g + 2 * (mm % 2) : mm * 16 + g, d1 = Q8 ? d0 + 1 : d0 + 8;
        const float f = Q8 ? 1.0f / 64.0f : 1.0f;
        if (2 * t4 < G) o_s[2 * t4][d0] = acc[m][0] * f, o_s[2 * t4][d1] = acc[m][2] * f;
        if (2 * t4 + 1 < G) o_s[2 * t4 + 1][d0] = acc[m][1] * f, o_s[2 * t4 + 1][d1] = acc[m][3] * f;
    }
    __syncthreads();
    float out[G][DPT];
#pragma unroll
    for (int r = 0; r < G; r++)
#pragma unroll
        for (int e = 0; e < DPT; e++) out[r][e] = o_s[r][threadIdx.x * DPT + e];
    /* o_s as attn_finish's staging: each thread writes there only the values it just read */
    attn_finish<G, G, D>(out, m_s, l_s, &o_s[0][0], split, n_splits, t, kvh, n_tokens, n_head, res);
}

static int sm_count(void) {
    static int n = 0;
    if (n == 0) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
            n = 100;
    }
    return n;
}

/* The split kernel's shapes: head dims and query heads per KV head it is built for. */
static bool split_shape(int D, int G) {
    return (D == 128 || D == 256 || D == 512) && (G == 1 || G == 2 || G == 4 || G == 8 || G == 16);
}

/* Tokens per block: a tile of 16 query rows (16 / G tokens) when the batch is long enough to fill tiles; one
 * token per block otherwise (and when G = 16). */
static int tile_for(int32_t n_tokens, int G) { return n_tokens >= 8 && G < 16 ? 16 / G : 1; }

/* Blocks per SM the splits aim for (gm_cuda_set_attn_fill): 16 blocks of 128 threads fill an SM's 2048 threads,
 * enough loads in flight to hide the latency of K/V reads. Measured on E4B Q4_0 at depth 1024 (H200, 2026-12-01):
 * 2 / 4 / 8 / 16 gave 5.16k / 5.57k / 5.68k / 5.67k tokens/s at 64 sequences, 9.8k / 11.2k / 10.8k / 11.1k at
 * 256; pp512 and single-sequence decoding did not move (their splits are set by the keys, not the fill). */
enum { ATTN_FILL_DEFAULT = 16, ATTN_FILL_MAX = 64 };
static int g_attn_fill = ATTN_FILL_DEFAULT;
static bool g_attn_fill_set = false; /* asked for: the staged kernel's splits follow it too */
extern "C" void gm_cuda_set_attn_fill(int blocks_per_sm) {
    g_attn_fill_set = blocks_per_sm >= 1 && blocks_per_sm <= ATTN_FILL_MAX;
    g_attn_fill = g_attn_fill_set ? blocks_per_sm : ATTN_FILL_DEFAULT;
}

/* Keys per block at least: one chunk (TPK = 4: 32 keys, tiles: 128). Splits: enough blocks to give every SM
 * g_attn_fill, never a split of less than a chunk. */
static int n_splits_for(int32_t n_tokens, int32_t n_head_kv, int32_t max_keys, int tq) {
    const int min_split = tq > 1 ? ATT_THREADS : ATT_THREADS / 4;
    const int by_keys = (max_keys + min_split - 1) / min_split;
    const long blocks = (long)((n_tokens + tq - 1) / tq) * n_head_kv;
    int by_fill = (int)(((long)g_attn_fill * sm_count() + blocks - 1) / blocks);
    if (by_fill < 1) by_fill = 1;
    int s = by_keys < by_fill ? by_keys : by_fill;
    return s < 1 ? 1 : s;
}

extern "C" void gm_cuda_attention_plan(int32_t n_tokens, const int32_t *pos, const int32_t *seq, int32_t window,
                                       int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t *tile_tokens,
                                       int32_t *max_keys) {
    int tq = n_head_kv > 0 && n_head % n_head_kv == 0 && split_shape(head_dim, n_head / n_head_kv)
                 ? tile_for(n_tokens, n_head / n_head_kv) : 1;
    for (int32_t t = 0; t < n_tokens && tq > 1; t++)
        if (t % tq && seq[t] != seq[t - 1]) tq = 1; /* a tile would mix sequences */
    int32_t mk = 1;
    for (int32_t t0 = 0; t0 < n_tokens; t0 += tq) {
        int32_t lo_min = 0x7fffffff, hi = -1;
        for (int32_t t = t0; t < t0 + tq && t < n_tokens; t++) {
            const int32_t p = pos[t], lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            if (lo < lo_min) lo_min = lo;
            if (p > hi) hi = p;
        }
        if (hi - lo_min + 1 > mk) mk = hi - lo_min + 1;
    }
    *tile_tokens = tq, *max_keys = mk;
}

/* The scratch (n_splits > 1): first the group counters, ATTN_FILL_MAX · sm_count() words, then part_acc
 * [n_tokens][n_head][n_splits][D] f32, then part_ml [n_tokens][n_head][n_splits] (m, l). A launch with splits has
 * fewer groups (tiles x KV heads) than g_attn_fill · sm_count() (n_splits_for), so the counters fit; their place
 * and size do not depend on the call, so calls of other shapes sharing one scratch (sliding and global layers,
 * prefill and decode) never write partials over them and they stay zero between launches. */
static size_t counter_bytes(void) { return ((size_t)ATTN_FILL_MAX * sm_count() * sizeof(unsigned int) + 15) & ~(size_t)15; }
static size_t partial_bytes(int32_t n_tokens, int32_t n_head, int n_splits, int32_t D) {
    return (size_t)n_tokens * n_head * n_splits * ((size_t)D * sizeof(float) + sizeof(float2));
}

extern "C" size_t gm_cuda_attention_scratch_bytes(int32_t n_tokens, int32_t n_head, int32_t n_head_kv,
                                                  int32_t head_dim, int32_t max_keys, int32_t tile_tokens) {
    if (n_head_kv <= 0 || n_head % n_head_kv || !split_shape(head_dim, n_head / n_head_kv)) return 0;
    const int s = n_splits_for(n_tokens, n_head_kv, max_keys, tile_tokens > 1 ? tile_tokens : 1);
    if (s <= 1) return 0;
    return counter_bytes() + partial_bytes(n_tokens, n_head, s, head_dim);
}

/* Which kernel a decode launch takes (one token per block): GMC_DECODE_STAGED (attn_staged_kernel) wherever it
 * applies (an f16 cache, G <= 8, the preparation not fused into the launch): faster at every batch measured
 * (H200, 2026-12-04, cuda_bench --attn: 1 to 256 sequences at depth 1024, E4B's sliding and global layers).
 * Else attn_split_kernel adding values by warps (GMC_DECODE_WARPS: 16-byte loads, a chunk's rows in flight at once)
 * when the launch has at most a block per SM, where each block's latency is the launch's, else by threads
 * (GMC_DECODE_THREADS: fewer registers, more blocks per SM; H200, E4B q4_0, 2026-12-03: 64 sequences at depth 1024
 * with WV in every launch: the global layers' attention 67 -> 88 us).
 * GEMMAC_CUDA_ATTN_DECODE / gm_cuda_set_attn_decode: 0 threads, 1 warps, 2 staged (where the launch allows), -1
 * the rule above. */
enum { GMC_DECODE_THREADS = 0, GMC_DECODE_WARPS = 1, GMC_DECODE_STAGED = 2 };
static int g_attn_decode = -1;
extern "C" void gm_cuda_set_attn_decode(int mode) { g_attn_decode = mode >= 0 && mode <= 2 ? mode : -1; }
static bool attn_values_by_warps(long blocks) {
    return g_attn_decode >= 0 ? g_attn_decode == GMC_DECODE_WARPS : blocks <= sm_count();
}
static bool attn_staged(void) { return g_attn_decode < 0 || g_attn_decode == GMC_DECODE_STAGED; }

template <typename KV, int D, int G, int TQ, int TPK, bool PREP>
static void launch_attn(const gm_cuda_attn *a, int n_splits, int ks, const AttnOut &o, const AttnPrep &pr,
                        cudaStream_t st) {
    const gm_cuda_kv *kv = a->kv;
    const dim3 grid((unsigned)n_splits, (unsigned)kv->n_head_kv, (unsigned)((a->n_tokens + TQ - 1) / TQ));
    if (TQ == 1 && attn_values_by_warps((long)grid.x * grid.y * grid.z)) {
        gmc_launch(attn_split_kernel<KV, D, G, TQ, TPK, PREP, TQ == 1>, grid, ATT_THREADS, 0, st, (const void *)kv->k,
                   (const void *)kv->v, kv->n_slots, kv->ring, kv->n_head_kv, a->pos, a->seq, a->n_tokens, a->n_head,
                   a->window, ks, n_splits, a->q, o, pr);
        return;
    }
    gmc_launch(attn_split_kernel<KV, D, G, TQ, TPK, PREP>, grid, ATT_THREADS, 0, st, (const void *)kv->k,
               (const void *)kv->v, kv->n_slots, kv->ring, kv->n_head_kv, a->pos, a->seq, a->n_tokens, a->n_head,
               a->window, ks, n_splits, a->q, o, pr);
}

/* G query heads per KV head: one token per block (four threads per key; the preparation fused when pr is given),
 * or tiles of 16 / G tokens (G < 16). */
template <typename KV, int D, int G>
static void launch_attn_t(const gm_cuda_attn *a, int tq, int n_splits, int ks, const AttnOut &o, const AttnPrep *pr,
                          cudaStream_t st) {
    if constexpr (G < 16)
        if (tq > 1) return launch_attn<KV, D, G, 16 / G, 1, false>(a, n_splits, ks, o, AttnPrep{}, st);
    if (pr) return launch_attn<KV, D, G, 1, 4, true>(a, n_splits, ks, o, *pr, st);
    launch_attn<KV, D, G, 1, 4, false>(a, n_splits, ks, o, AttnPrep{}, st);
}

template <typename KV, int D>
static int launch_attn_g(const gm_cuda_attn *a, int G, int tq, int n_splits, int ks, const AttnOut &o,
                         const AttnPrep *pr, cudaStream_t st) {
    switch (G) {
    case 1: launch_attn_t<KV, D, 1>(a, tq, n_splits, ks, o, pr, st); return 0;
    case 2: launch_attn_t<KV, D, 2>(a, tq, n_splits, ks, o, pr, st); return 0;
    case 4: launch_attn_t<KV, D, 4>(a, tq, n_splits, ks, o, pr, st); return 0;
    case 8: launch_attn_t<KV, D, 8>(a, tq, n_splits, ks, o, pr, st); return 0;
    case 16: launch_attn_t<KV, D, 16>(a, tq, n_splits, ks, o, pr, st); return 0;
    }
    return -1;
}

template <typename KV>
static int launch_attn_d(const gm_cuda_attn *a, int G, int tq, int n_splits, int ks, const AttnOut &o,
                         const AttnPrep *pr, cudaStream_t st) {
    switch (a->kv->head_dim) {
    case 128: return launch_attn_g<KV, 128>(a, G, tq, n_splits, ks, o, pr, st);
    case 256: return launch_attn_g<KV, 256>(a, G, tq, n_splits, ks, o, pr, st);
    case 512: return launch_attn_g<KV, 512>(a, G, tq, n_splits, ks, o, pr, st);
    }
    return -1;
}

/* The staged kernel's launch: its shared memory allowed once per shape, blocks per SM from the occupancy
 * calculator. Splits of whole tiles, never more than n_splits_for's (the scratch is sized by those): when the
 * (token, KV head) groups fit the resident blocks of one round (slots = blocks per SM · SMs), as many splits as
 * keep every block of the launch resident at once: each block starts its loads at once and pays its start (q,
 * positions, first tiles) and its merge once; else two rounds of blocks; or g_attn_fill blocks per SM when it was
 * set. Measured (H200, 2026-12-04, cuda_bench --attn, fill 3 against two rounds): 64 sequences at depth 1024
 * 34.2 -> 25.5 us (sliding, 4 splits of 128 keys), 256 sequences 85.7 -> 76.5 us (one split). */
template <typename KV, int D, int G, bool PREP>
static void launch_staged(const gm_cuda_attn *a, const AttnOut &o0, const AttnPrep &pr, int early, cudaStream_t st) {
    using S = StagedShape<KV, D, G>;
    static int per_sm = 0;
    if (per_sm == 0) {
        cudaFuncSetAttribute(attn_staged_kernel<KV, D, G, PREP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::SMEM);
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attn_staged_kernel<KV, D, G, PREP>, ATT_THREADS,
                                                          S::SMEM) != cudaSuccess || per_sm < 1)
            per_sm = 1;
    }
    const gm_cuda_kv *kv = a->kv;
    const long groups = (long)a->n_tokens * kv->n_head_kv;
    const long slots = (long)per_sm * sm_count();
    int s = g_attn_fill_set ? (int)(((long)g_attn_fill * sm_count() + groups - 1) / groups)
            : groups <= slots ? (int)(slots / groups) : (int)((2 * slots + groups - 1) / groups);
    s = std::min(s, std::min((a->max_keys + S::KT - 1) / S::KT, n_splits_for(a->n_tokens, kv->n_head_kv, a->max_keys, 1)));
    s = std::max(s, 1);
    const int ks = ((a->max_keys + s - 1) / s + S::KT - 1) / S::KT * S::KT; /* whole tiles */
    s = (a->max_keys + ks - 1) / ks;
    AttnOut o = o0;
    if (s == 1) o.pacc = NULL, o.pml = NULL, o.cnt = NULL;
    const dim3 grid((unsigned)s, (unsigned)kv->n_head_kv, (unsigned)a->n_tokens);
    gmc_launch(attn_staged_kernel<KV, D, G, PREP>, grid, ATT_THREADS, S::SMEM, st, (const void *)kv->k,
               (const void *)kv->v, kv->n_slots, kv->ring, kv->n_head_kv, a->pos, a->seq, a->n_tokens, a->n_head,
               a->window, ks, s, a->q, o, pr, early);
}

/* pp: the preparation fused (AttnPrep; an f16 cache), else NULL; early: a decode launch (one token per sequence) */
template <typename KV, int D, int G>
static void launch_staged_p(const gm_cuda_attn *a, const AttnOut &o, const AttnPrep *pp, int early, cudaStream_t st) {
    if constexpr (sizeof(KV) == 2)
        if (pp) return launch_staged<KV, D, G, true>(a, o, *pp, 1, st);
    launch_staged<KV, D, G, false>(a, o, AttnPrep{}, early, st);
}

template <typename KV, int D>
static int launch_staged_g(const gm_cuda_attn *a, int G, const AttnOut &o, const AttnPrep *pp, int early,
                           cudaStream_t st) {
    switch (G) {
    case 1: launch_staged_p<KV, D, 1>(a, o, pp, early, st); return 0;
    case 2: launch_staged_p<KV, D, 2>(a, o, pp, early, st); return 0;
    case 4: launch_staged_p<KV, D, 4>(a, o, pp, early, st); return 0;
    case 8: launch_staged_p<KV, D, 8>(a, o, pp, early, st); return 0;
    }
    return -1;
}

template <typename KV>
static int launch_staged_d(const gm_cuda_attn *a, int G, const AttnOut &o, const AttnPrep *pp, int early,
                           cudaStream_t st) {
    switch (a->kv->head_dim) {
    case 128: return launch_staged_g<KV, 128>(a, G, o, pp, early, st);
    case 256: return launch_staged_g<KV, 256>(a, G, o, pp, early, st);
    case 512: return launch_staged_g<KV, 512>(a, G, o, pp, early, st);
    }
    return -1;
}

/* ---- any head size and grouping: one warp per (query head, token), keys one after another with an online
 * softmax; lane l holds dims l, l + 32, ... (NPL of them). For the shapes the split kernel is not built for
 * (the tiny test models' head dims of 16-64, odd groupings); slow on long contexts, exact to float rounding. */
template <typename KV, int NPL>
__global__ void __launch_bounds__(32) attn_warp_kernel(const void *__restrict__ kc, const void *__restrict__ vc,
                                                       int n_slots, int ring, int n_head_kv,
                                                       const int32_t *__restrict__ pos,
                                                       const int32_t *__restrict__ seq, int n_head, int D,
                                                       int window, const float *__restrict__ q,
                                                       float *__restrict__ out) {
    gmc_pdl_wait();
    const int h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x;
    const int kvh = h / (n_head / n_head_kv);
    const int p = pos[t], sq = seq[t];
    const int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    const float *qh = q + ((size_t)t * n_head + h) * D;
    float qr[NPL], acc[NPL];
#pragma unroll
    for (int i = 0; i < NPL; i++) {
        const int d = lane + 32 * i;
        qr[i] = d < D ? qh[d] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int kp = lo; kp <= p; kp++) {
        const int slot = ring ? kp % n_slots : kp;
        const size_t hr = ((size_t)sq * n_slots + slot) * n_head_kv + kvh;
        const unsigned char *krow = kv_head<KV>(kc, hr, D), *vrow = kv_head<KV>(vc, hr, D);
        float sc = 0.0f;
#pragma unroll
        for (int i = 0; i < NPL; i++) {
            const int d = lane + 32 * i;
            if (d < D) sc = fmaf(qr[i], kv_get<KV>(krow, D, d), sc);
        }
        sc = gmc_warp_sum(sc);
        const float m_new = fmaxf(m, sc);
        const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
        const float e = expf(sc - m_new);
        l = l * alpha + e;
#pragma unroll
        for (int i = 0; i < NPL; i++) {
            const int d = lane + 32 * i;
            if (d < D) acc[i] = fmaf(e, kv_get<KV>(vrow, D, d), acc[i] * alpha);
        }
        m = m_new;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float *o = out + ((size_t)t * n_head + h) * D;
#pragma unroll
    for (int i = 0; i < NPL; i++) {
        const int d = lane + 32 * i;
        if (d < D) o[d] = acc[i] * inv;
    }
}

template <typename KV>
static int launch_attn_warp(const gm_cuda_attn *a, cudaStream_t st) {
    const gm_cuda_kv *kv = a->kv;
    const int D = kv->head_dim;
    const dim3 grid((unsigned)a->n_head, (unsigned)a->n_tokens);
#define GMC_WARP_CASE(NPL)                                                                                          \
    gmc_launch(attn_warp_kernel<KV, NPL>, grid, 32, 0, st, (const void *)kv->k, (const void *)kv->v, kv->n_slots, kv->ring,    \
                                                   kv->n_head_kv, a->pos, a->seq, a->n_head, D, a->window, a->q,    \
                                                   a->out)
    if (D <= 32) GMC_WARP_CASE(1);
    else if (D <= 64) GMC_WARP_CASE(2);
    else if (D <= 128) GMC_WARP_CASE(4);
    else if (D <= 256) GMC_WARP_CASE(8);
    else if (D <= 512) GMC_WARP_CASE(16);
    else if (D <= 1024) GMC_WARP_CASE(32);
    else return -1;
#undef GMC_WARP_CASE
    return 0;
}

/* The attention, then the quantized output (a->out_act_type) where the kernel does not write it: the one-warp
 * kernel, and q8_K when a block of 256 spans the heads of two KV heads (D = 128, G = 1). */
extern "C" int gm_cuda_attention(const gm_cuda_attn *a, void *scratch, size_t scratch_bytes, gm_cuda_stream stream) {
    if (!a || !a->kv || !a->q || !a->out || !a->pos || !a->seq || a->n_tokens < 0 || a->kv->n_head_kv <= 0 ||
        a->n_head % a->kv->n_head_kv != 0 || a->max_keys <= 0 || a->window < 0)
        return gmc_fail(-1, "attention: bad arguments");
    if (!kv_type_ok(a->kv)) return gmc_fail(-1, "attention: KV type %d with head_dim %d", a->kv->type, a->kv->head_dim);
    const int qt = a->out_act_type;
    const int64_t K = (int64_t)a->n_head * a->kv->head_dim; /* output values per token */
    if (qt && ((qt != GMC_Q8_0 && qt != GMC_Q8_K) || !a->out_q || K % (qt == GMC_Q8_K ? GMC_QK_K : GMC_QK)))
        return gmc_fail(-1, "attention: quantized output of type %d for %lld values per token", qt, (long long)K);
    const gm_cuda_prep *p = a->prep;
    if (p && (!prep_args_ok(p) || p->n_tokens != a->n_tokens || p->pos != a->pos || p->q != a->q ||
              p->n_head != a->n_head || p->head_dim != a->kv->head_dim ||
              (p->kv && (p->kv->k != a->kv->k || p->kv->v != a->kv->v || p->seq != a->seq))))
        return gmc_fail(-1, "attention: a preparation that does not match the attention");
    if (a->n_tokens == 0) return 0;
    const int G = a->n_head / a->kv->n_head_kv;
    const int D = a->kv->head_dim;
    const int tq = split_shape(D, G) && a->tile_tokens > 1 ? tile_for(a->n_tokens, G) : 1;
    const bool staged = tq == 1 && a->kv->type != GMC_F32 && G <= STAGED_MAX_G && split_shape(D, G) && attn_staged();
    /* the preparation inside the launch: asked for, a decode launch, and a kernel that can (the staged kernel only
     * where RoPE's pairs lie in one lane, with an f16 cache) */
    const bool fuse = p && a->fuse_prep && a->one_per_seq && split_shape(D, G) && tq == 1 &&
                      (!staged || (rope_by_warps(p->n_rot) && a->kv->type == GMC_F16));
    if (p && !fuse) { /* the preparation's own launch first */
        const int rc = gm_cuda_attn_prep(p, stream);
        if (rc) return rc;
    }
    AttnPrep pr = {};
    if (fuse)
        pr = AttnPrep{p->k, p->v, p->q_norm, p->k_norm, p->freq_factors, p->v_norm, p->v_from_k, p->kv != NULL,
                      p->n_rot, p->eps, rope_theta_scale(p), p->freq_scale, p->q_scale};
    if (!split_shape(D, G)) {
        const int rc = a->kv->type == GMC_F16   ? launch_attn_warp<__half>(a, stream)
                       : a->kv->type == GMC_F32 ? launch_attn_warp<float>(a, stream)
                                                : launch_attn_warp<KvQ8>(a, stream);
        if (rc) return gmc_fail(-1, "attention: head_dim %d is over 1024", D);
        const int e = gmc_check_launch("attention (one warp per head)");
        return e || !qt ? e : gm_cuda_quantize_act(a->out, K, a->n_tokens, qt, a->out_q, stream);
    }
    if (a->tile_tokens > 1 && a->tile_tokens != tq)
        return gmc_fail(-1, "attention: tiles of %d tokens planned, %d built", a->tile_tokens, tq);
    const int n_splits = n_splits_for(a->n_tokens, a->kv->n_head_kv, a->max_keys, tq);
    const int ks = (a->max_keys + n_splits - 1) / n_splits;
    const bool q_in_kernel = qt == GMC_Q8_0 || (qt == GMC_Q8_K && G * D % GMC_QK_K == 0);
    AttnOut o = {};
    o.out = a->out;
    if (q_in_kernel) {
        o.qt = qt, o.oq = (int8_t *)a->out_q;
        o.od = (float *)((uint8_t *)a->out_q + (((size_t)a->n_tokens * K + 15) & ~(size_t)15));
    }
    if (n_splits > 1) {
        const size_t need = counter_bytes() + partial_bytes(a->n_tokens, a->n_head, n_splits, D);
        if (!scratch || scratch_bytes < need) return gmc_fail(-1, "attention: scratch of %zu bytes, %zu needed", scratch_bytes, need);
        o.cnt = (unsigned int *)scratch;
        o.pacc = (float *)((uint8_t *)scratch + counter_bytes());
        o.pml = (float2 *)(o.pacc + (size_t)a->n_tokens * a->n_head * n_splits * D);
    }
    const AttnPrep *pp = fuse ? &pr : NULL;
    const int early = a->one_per_seq != 0;
    const int rc = staged ? (a->kv->type == GMC_F16 ? launch_staged_d<__half>(a, G, o, pp, early, stream)
                                                    : launch_staged_d<KvQ8>(a, G, o, pp, early, stream))
                   : a->kv->type == GMC_F16 ? launch_attn_d<__half>(a, G, tq, n_splits, ks, o, pp, stream)
                   : a->kv->type == GMC_F32 ? launch_attn_d<float>(a, G, tq, n_splits, ks, o, pp, stream)
                                            : launch_attn_d<KvQ8>(a, G, tq, n_splits, ks, o, pp, stream);
    if (rc) return gmc_fail(-1, "attention: head_dim %d with %d query heads per KV head is not built", D, G);
    const int e = gmc_check_launch("attention");
    return e || !qt || q_in_kernel ? e : gm_cuda_quantize_act(a->out, K, a->n_tokens, qt, a->out_q, stream);
}
