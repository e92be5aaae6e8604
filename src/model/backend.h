/* backend.h: the ops a forward pass is written in, as a table a backend fills (CPU: kernels/cpu/backend_cpu.c,
 * CUDA: kernels/cuda/backend_cuda.c). The forward pass (gemma3.c, ...) only calls these and passes activation
 * buffers around; it never reads activation memory itself, so a backend may keep them on a device. Every op
 * takes a batch of n tokens.
 *
 * What lives where (the contract every backend keeps):
 *  - Activation buffers (float *, from alloc) and KV cache storage (from alloc_bytes) are BACKEND memory: on a
 *    device backend, device pointers. Only ops touch them; read() copies one back to the host.
 *  - Weights are HOST pointers into the model (gm_tensor data, and the f32 vectors a forward passes: norm
 *    weights, rope freq_factors, expert scales, mul_rows weights). A device backend keeps its own copy, made
 *    once on first use and found again by the host pointer; model weights never change while a context lives.
 *  - Integer arrays (token ids, positions, sequence ids, output rows) come from one place only: the context
 *    calls begin_batch with the batch's token / pos / seq / out_rows host arrays before each forward, and every
 *    int32_t pointer an op receives during that forward must point into one of those four arrays (any offset
 *    inside it: out_rows + i0 is fine). A device backend uploads the four in one copy at begin_batch and maps
 *    the host pointers an op receives onto its device copies; the CPU backend just reads the host arrays.
 *    A forward that needs other indices derives them inside an op (e.g. get_rows maps ids past its table to
 *    row 0) rather than building host arrays.
 *  - Errors: ops return nothing. A backend that can fail (device out of memory, a failed launch) remembers the
 *    first failure, skips the work of later ops, and reports it from end_batch, which the context calls after
 *    each forward. read() (or top_logits) is the only op that waits for the device (one host synchronisation per
 *    forward). */
#ifndef GM_BACKEND_H
#define GM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "model/tensor.h"

typedef struct gm_backend gm_backend;

/* What the attention op does to its q, k, v before storing and attending (gm_attn_args.prep), in this order
 * (q in place; what the k and v buffers hold afterwards is unspecified: a backend may prepare them in place or
 * straight into the cache):
 *   v_from_k: v = k as projected (before k's own preparation; K = V layers, v's buffer need not hold anything);
 *   v_norm:   v = rmsnorm(v), no weight;
 *   q = rope(rmsnorm(q) · q_norm) · q_scale,   k = rope(rmsnorm(k) · k_norm),
 * each rmsnorm over one head (head_dim values) and only when its weight is not NULL; RoPE as the rope op
 * (NeoX pairs, n_rot, base, freq_scale, freq_factors; none when n_rot = 0). When write_kv is false only q is
 * prepared. One op so a device backend can do all of it, and the cache store, in one pass. */
typedef struct gm_attn_prep {
    const float *q_norm, *k_norm; /* [head_dim] f32 host weights, or NULL */
    bool v_norm, v_from_k;
    float eps;
    int32_t n_rot;
    float base, freq_scale;
    const float *freq_factors;    /* [n_rot / 2] or NULL */
    float q_scale;
} gm_attn_prep;

typedef struct gm_attn_args {
    gm_kv_cache *kv;
    int32_t kv_layer;          /* the layer whose cache is written and read */
    bool write_kv;             /* store this batch's k, v first (false for layers sharing another's cache) */
    int32_t n_tokens;
    const int32_t *pos;        /* [n_tokens] */
    const int32_t *seq;        /* [n_tokens] */
    int32_t n_head, n_head_kv, head_dim;
    int32_t window;            /* 0: full attention; else keys with pos_q - pos_k < window */
    const gm_attn_prep *prep;  /* NULL: q, k, v arrive ready (RoPE and scale applied); else see gm_attn_prep */
    const float *q;            /* [n_tokens][n_head][head_dim] */
    const float *k, *v;        /* [n_tokens][n_head_kv][head_dim] */
    float *out;                /* [n_tokens][n_head][head_dim] */
} gm_attn_args;

/* Projections of one input, the fused form of rmsnorm_add, scale, rmsnorm, matmul and gelu_mul the forward uses for
 * Q/K/V, gate/up and the per-layer-input gate. First, when res_add is not NULL, the residual update the forward
 * left pending: x += rmsnorm(res_add) · res_norm (as rmsnorm_add; res_norm NULL: no weight), then x *= res_scale
 * (as scale, skipped when it is 1); x is written. Then x' = rmsnorm(x) · norm per row of d = w[0]->ne0 (norm
 * NULL: x' = x), then
 *   GM_PROJ_PLAIN:    y[i][n][w[i]->ne1] = x' · W_iᵀ for each i < n_w (1..3);
 *   GM_PROJ_GEGLU:    n_w = 2, equal ne1: y[0] = gelu_tanh(x' · W_0ᵀ) ⊙ (x' · W_1ᵀ);
 *   GM_PROJ_GELU_MUL: n_w = 1: y[0] = gelu_tanh(x' · W_0ᵀ) ⊙ mul, mul [n][w[0]->ne1].
 * Every W_i has ne0 = d; no y may overlap x or res_add. Results equal the unfused ops' (the CPU
 * backend composes them; a device backend normalises, quantizes once and multiplies all W_i in one pass). */
typedef enum gm_proj_act { GM_PROJ_PLAIN = 0, GM_PROJ_GEGLU, GM_PROJ_GELU_MUL } gm_proj_act;
typedef struct gm_proj_args {
    float *x;                  /* [n][d]; written only by a residual update */
    int32_t n;
    const float *res_add;      /* [n][d] backend memory, or NULL: no residual update */
    const float *res_norm;     /* [d] f32 host weight, or NULL */
    float res_scale;           /* set it whenever res_add is set (1: none) */
    const float *norm;         /* [d] f32 host weight, or NULL */
    float eps;
    gm_proj_act act;
    const float *mul;          /* GM_PROJ_GELU_MUL only (backend memory) */
    int32_t n_w;
    const gm_tensor *w[3];
    float *y[3];
} gm_proj_args;

/* The host arrays of one forward's batch (see the top of this file). */
typedef struct gm_batch_ints {
    int32_t n_tokens;
    const int32_t *token, *pos, *seq;  /* [n_tokens] */
    int32_t n_out;
    const int32_t *out_rows;           /* [n_out] */
} gm_batch_ints;

typedef struct gm_backend_ops {
    const char *name;
    void (*free)(gm_backend *b);
    /* Storage of n bytes in backend memory for the KV cache (NULL on failure), and its release. */
    void *(*alloc_bytes)(gm_backend *b, size_t n);
    void (*free_bytes)(gm_backend *b, void *p);
    /* n bytes from src to dst, both storage from alloc_bytes (a sequence's KV cache copied to another), ordered
     * after the ops enqueued before it. */
    void (*copy_bytes)(gm_backend *b, void *dst, const void *src, size_t n);
    /* The measured bandwidth of a copy within the backend's memory, in GB/s of bytes read plus written (0 when it
     * cannot be measured); for benchmarks. Waits for the backend. */
    double (*copy_gbps)(gm_backend *b);
    /* Before a forward: the batch's integer arrays, the only ones ops of this forward may receive. */
    gemmac_status (*begin_batch)(gm_backend *b, const gm_batch_ints *bi, gm_error *err);
    /* After a forward: the first failure of any op since the last end_batch (GEMMAC_OK if none). */
    gemmac_status (*end_batch)(gm_backend *b, gm_error *err);
    /* Sizes scratch for batches of up to n_tokens, rows of up to max_row elements, and attention over up to
     * max_keys keys; called once by a context before any op. */
    gemmac_status (*reserve)(gm_backend *b, int32_t n_tokens, int64_t max_row, int32_t max_keys, gm_error *err);
    /* Activation buffers of n floats (NULL on failure). */
    float *(*alloc)(gm_backend *b, int64_t n);
    void (*release)(gm_backend *b, float *buf);
    /* Copies n floats of a buffer to host memory. */
    void (*read)(gm_backend *b, const float *buf, float *host, int64_t n);
    /* Optional: of each of n_rows rows of n_vocab logits (backend memory), the k best (1 <= k <= min(n_vocab,
     * GM_TOP_LOGITS_MAX)) exactly as gm_top_logits_row selects them (src/sample/top_logits.h), to host ids and vals
     * [n_rows][k]: a device copies k pairs a row instead of the row. Waits like read(). NULL: the context asks for
     * whole rows and selects on the host. */
    void (*top_logits)(gm_backend *b, const float *logits, int32_t n_rows, int32_t n_vocab, int32_t k, int32_t *ids,
                       float *vals);
    /* Optional: host memory that read() fills fastest (page-locked for a GPU), and its release; NULL: malloc /
     * free. A context's logits live there. */
    void *(*host_alloc)(gm_backend *b, size_t n);
    void (*host_free)(gm_backend *b, void *p);
    /* Rows of logits one LM-head product covers (the scratch holds that many; 0: GM_LOGITS_CHUNK). A GPU wants a
     * whole batch of sequences in one product: the LM head is its largest matrix. */
    int32_t logits_rows;
    /* out[i][:] = row ids[i] of table, dequantized, times scale; an id outside [0, rows of table) reads row 0
     * (the per-layer embeddings of Gemma 3n / 4 are narrower than the vocabulary). out: [n][table.ne0] */
    void (*get_rows)(gm_backend *b, const gm_tensor *table, const int32_t *ids, int32_t n, float scale, float *out);
    /* dst[i][:] = src[rows[i]][:], rows of d floats. */
    void (*gather)(gm_backend *b, const float *src, int32_t d, const int32_t *rows, int32_t n, float *dst);
    /* y[n][w.ne1] = x[n][w.ne0] · Wᵀ */
    void (*matmul)(gm_backend *b, const gm_tensor *w, const float *x, int32_t n, float *y);
    /* See gm_proj_args. */
    void (*project)(gm_backend *b, const gm_proj_args *p);
    /* Over n_rows rows of d: y = rmsnorm(x) · w (w NULL: no weight; w is [d] f32). y may be x. */
    void (*rmsnorm)(gm_backend *b, const float *x, float *y, int64_t n_rows, int32_t d, const float *w, float eps);
    /* acc += rmsnorm(x) · w, rows of d. */
    void (*rmsnorm_add)(gm_backend *b, float *acc, const float *x, int64_t n_rows, int32_t d, const float *w,
                        float eps);
    /* x: [n][n_head][head_dim]; RoPE (NeoX pairs) of each head at its token's position, then x *= scale. */
    void (*rope)(gm_backend *b, float *x, int32_t n, int32_t n_head, int32_t head_dim, const int32_t *pos,
                 int32_t n_rot, float base, float freq_scale, const float *freq_factors, float scale);
    /* g = gelu_tanh(g) ⊙ u over n values. */
    void (*gelu_mul)(gm_backend *b, float *g, const float *u, int64_t n);
    /* z = c·tanh(z/c) over n values. */
    void (*softcap)(gm_backend *b, float *z, int64_t n, float c);
    /* a->prep (if any), then store this batch's k, v (a->write_kv), then attend. */
    void (*attention)(gm_backend *b, const gm_attn_args *a);
    /* ---- Gemma 4 ---- */
    /* x *= s over n values. */
    void (*scale)(gm_backend *b, float *x, int64_t n, float s);
    /* y = (y + x) · s over n values. */
    void (*add_scale)(gm_backend *b, float *y, const float *x, int64_t n, float s);
    /* Routed mixture of experts over n tokens (Gemma 4 26B-A4B, gemma-architecture.md §2.3). logits:
     * [n][n_expert] router scores; per token: p = softmax(logits), the n_used largest (ties: lower index),
     * w = p / Σ p over them, w_e *= expert_scale[e] (NULL: 1). x: [n][H]; gate_up: [H, 2F, n_expert] (rows
     * 0..F-1 of an expert are its gate, F..2F-1 its up); down: [F, H, n_expert]. Only the chosen experts run,
     * each over the tokens that chose it: out[t] = Σ_e w_e · down_e(gelu_tanh(gate_e·x[t]) ⊙ up_e·x[t]).
     * out: [n][H], written (not accumulated). */
    void (*moe)(gm_backend *b, const float *logits, const float *x, int32_t n, int32_t n_used,
                const float *expert_scale, const gm_tensor *gate_up, const gm_tensor *down, float *out);
    /* ---- Gemma 3n (also uses scale, add_scale) ---- */
    /* y[i][:] = x[i][:] ⊙ w over n_rows rows of d; w: [d] f32. y may be x. */
    void (*mul_rows)(gm_backend *b, const float *x, float *y, int64_t n_rows, int32_t d, const float *w);
    /* dst[j][i][:] = src[i][j][:]: src [n0][n1][d] to dst [n1][n0][d] (dst must not overlap src). */
    void (*transpose)(gm_backend *b, const float *src, float *dst, int32_t n0, int32_t n1, int32_t d);
    /* Per row of d: y *= rms(ref) / sqrt(max(mean(y²), eps)), rms(ref) = sqrt(mean(ref²)); y, ref: [n_rows][d]
     * (AltUp: a stream rescaled to the magnitude of another). */
    void (*rms_match)(gm_backend *b, float *y, const float *ref, int64_t n_rows, int32_t d, float eps);
    /* Per row of d: g = relu(g − (mean(g) + k·std(g))), std the population standard deviation (activation
     * sparsity; k = Φ⁻¹(target sparsity)). */
    void (*sparsity_gate)(gm_backend *b, float *g, int64_t n_rows, int32_t d, float k);
    /* AltUp predict over K streams x [K][n][d] with per-token coefficients c [n][K·K]:
     * y[i][t][:] = Σ_j c[t][i·K + j] · x[j][t][:] + x[i][t][:]. y: [K][n][d], not overlapping x. */
    void (*altup_predict)(gm_backend *b, const float *x, const float *c, float *y, int32_t K, int32_t n, int32_t d);
    /* AltUp correct of K predicted streams pred [K][n][d] by act [n][d], the layer's output for stream `active`,
     * with per-token coefficients c [n][K]:
     * y[i][t][:] = (act[t][:] − pred[active][t][:]) · (c[t][i] + 1) + pred[i][t][:]. y: [K][n][d], not pred. */
    void (*altup_correct)(gm_backend *b, const float *pred, const float *act, const float *c, float *y, int32_t K,
                          int32_t active, int32_t n, int32_t d);
} gm_backend_ops;

struct gm_backend {
    const gm_backend_ops *ops;
};

/* The CPU backend with n_threads workers (<= 0: all cores). */
gemmac_status gm_backend_cpu_new(int n_threads, gm_backend **out, gm_error *err);
/* The CUDA backend on device `device` (kernels/cuda/backend_cuda.c; only in builds with GEMMAC_HAVE_CUDA).
 * Fails with GEMMAC_ERR_BACKEND and a message naming the reason when there is no usable device. */
gemmac_status gm_backend_cuda_new(int device, gm_backend **out, gm_error *err);

#endif
