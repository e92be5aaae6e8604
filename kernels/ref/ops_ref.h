/* ops_ref.h: scalar reference kernels of the non-matmul ops, written to read like the math of
 * gemma-architecture.md §2.1. They are the oracle fast versions are tested against, and the CPU backend
 * calls them directly where they are not the bottleneck. One row / one head at a time; threading is the
 * caller's business. */
#ifndef GM_OPS_REF_H
#define GM_OPS_REF_H

#include <stdint.h>

#include "quant/fp16.h"

/* y = x / sqrt(mean(x²) + eps) · w   (w NULL: no weight). y may alias x. Sum of squares in double. */
void gm_ref_rmsnorm(const float *x, float *y, int d, const float *w, float eps);

/* NeoX-layout RoPE of one head of D floats in place: dim i pairs with i + n_rot/2 for i < n_rot/2;
 * angle_i = pos · freq_scale · base^(-2i/n_rot) / freq_factor_i (factors NULL: 1). Dims >= n_rot pass. */
void gm_ref_rope_neox(float *x, int n_rot, float pos, float base, float freq_scale, const float *freq_factors);

/* gelu with the tanh approximation. */
float gm_ref_gelu_tanh(float x);

/* z = c·tanh(z/c) over n values. */
void gm_ref_softcap(float *z, int64_t n, float c);

/* The softmax's middle step, shared by every attention kernel: scores[i] = exp(scores[i] - max) in place;
 * returns 1 / sum (sum in double; 0 when the sum is 0). */
float gm_ref_softmax_exp(float *scores, int n, float max);

/* One query head against n_keys cached keys/values (f16 rows of D values; k[i], v[i] point at them):
 * out = softmax(q·k_i) · v_i, with the softmax in float (q is already scaled). scores: scratch [n_keys]. */
void gm_ref_attention_head(const float *q, const gm_f16 *const *k, const gm_f16 *const *v, int n_keys, int D,
                           float *scores, float *out);

/* G query heads that share one KV head (GQA): q and out hold the G heads one after another ([G][D]);
 * scores is scratch [G][n_keys]. The same as G calls of gm_ref_attention_head. */
void gm_ref_attention_group(const float *q, int G, const gm_f16 *const *k, const gm_f16 *const *v, int n_keys,
                            int D, float *scores, float *out);

/* gm_ref_attention_group over f32 keys and values (the f32 KV cache). */
void gm_ref_attention_group_f32(const float *q, int G, const float *const *k, const float *const *v, int n_keys,
                                int D, float *scores, float *out);

/* ---- the q8_0 KV cache (kv_cache.h's GM_KV_Q8_0) ----
 * A head row holds one KV head's D values of one slot (D a multiple of 32): D int8 values q, then D / 32 f16 scales
 * d (value i = q[i] · d[i / 32]), then zero bytes up to a multiple of 16 (gm_kv_head_bytes(GM_KV_Q8_0, D) bytes in
 * all). Each 32 values are quantized as gm_quantize_q8_0_act_ref does, so every backend stores the same bytes. */

/* Quantizes D floats into the head row at head_row, padding zeroed. */
void gm_ref_kv_q8_store(const float *x, int32_t D, uint8_t *head_row);

/* Dequantizes a head row of D values into x: x[i] = (float)q[i] · f16_to_f32(d[i / 32]). */
void gm_ref_kv_q8_load(const uint8_t *head_row, int32_t D, float *x);

/* gm_ref_attention_group_f32 over q8_0 head rows (k[i], v[i] point at them), each row loaded as gm_ref_kv_q8_load
 * does: the f32 kernel's result on the loaded rows. D <= GM_REF_KV_Q8_MAX_D. */
enum { GM_REF_KV_Q8_MAX_D = 1024 };
void gm_ref_attention_group_q8(const float *q, int G, const uint8_t *const *k, const uint8_t *const *v, int n_keys,
                               int D, float *scores, float *out);

/* Mixture-of-experts routing of one token (Gemma 4, gemma-architecture.md §2.3): p = softmax(logits) over
 * n_expert scores (float, sum in double); ids[0..n_used) get the n_used largest p in descending order (ties:
 * the lower index first, as torch.topk); weights[j] = p[ids[j]] / Σ_j p[ids[j]] · expert_scale[ids[j]]
 * (expert_scale NULL: 1). scratch: [n_expert]. */
void gm_ref_moe_route(const float *logits, int n_expert, int n_used, const float *expert_scale, float *scratch,
                      int32_t *ids, float *weights);

/* ---- Gemma 3n ---- */
/* One row of d: y *= sqrt(mean(ref²)) / sqrt(max(mean(y²), eps)) (sums in double). */
void gm_ref_rms_match(float *y, const float *ref, int d, float eps);

/* One row of d: g = relu(g − (mean(g) + k·std(g))), std over the d values with divisor d (population),
 * mean and variance in double. */
void gm_ref_sparsity_gate(float *g, int d, float k);

/* One token of AltUp predict: K stream rows of d, row i at x + i·stride (y alike, not overlapping x);
 * c: [K·K]. y_i = Σ_j c[i·K + j]·x_j + x_i (sum over j in order, in float). */
void gm_ref_altup_predict(const float *x, int64_t stride, const float *c, float *y, int K, int d);

/* One token of AltUp correct: K predicted rows of d at pred + i·stride (y alike, not overlapping pred), act:
 * the layer's output for stream `active`; c: [K]. y_i = (act − pred_active)·(c[i] + 1) + pred_i. */
void gm_ref_altup_correct(const float *pred, int64_t stride, const float *act, const float *c, float *y, int K,
                          int active, int d);

#endif
