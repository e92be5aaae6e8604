/* ops_ref.c: the scalar reference kernels declared in ops_ref.h. */
#include "ref/ops_ref.h"

#include <math.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_blocks.h"

void gm_ref_rmsnorm(const float *x, float *y, int d, const float *w, float eps) {
    double sum = 0.0;
    for (int i = 0; i < d; i++) sum += (double)x[i] * (double)x[i];
    const float scale = 1.0f / sqrtf((float)(sum / d) + eps);
    for (int i = 0; i < d; i++) y[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void gm_ref_rope_neox(float *x, int n_rot, float pos, float base, float freq_scale, const float *freq_factors) {
    /* Angles advance by a constant ratio per pair, as ggml computes them (theta *= theta_scale), so that
     * our rotations are the ones llama.cpp applies. */
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    const int half = n_rot / 2;
    float theta = pos;
    for (int i = 0; i < half; i++) {
        const float ff = freq_factors ? freq_factors[i] : 1.0f;
        const float angle = freq_scale * (theta / ff);
        const float c = cosf(angle), s = sinf(angle);
        const float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x0 * s + x1 * c;
        theta *= theta_scale;
    }
}

float gm_ref_gelu_tanh(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535588f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + 0.044715f * x * x)));
}

void gm_ref_softcap(float *z, int64_t n, float c) {
    for (int64_t i = 0; i < n; i++) z[i] = c * tanhf(z[i] / c);
}

float gm_ref_softmax_exp(float *scores, int n, float max) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        scores[i] = expf(scores[i] - max);
        sum += scores[i];
    }
    return sum > 0 ? (float)(1.0 / sum) : 0.0f;
}

void gm_ref_attention_head(const float *q, const gm_f16 *const *k, const gm_f16 *const *v, int n_keys, int D,
                           float *scores, float *out) {
    float max = -INFINITY;
    for (int i = 0; i < n_keys; i++) {
        const gm_f16 *ki = k[i];
        float s = 0.0f;
        for (int j = 0; j < D; j++) s += q[j] * gm_f16_to_f32(ki[j]);
        scores[i] = s;
        if (s > max) max = s;
    }
    const float inv = gm_ref_softmax_exp(scores, n_keys, max);
    for (int j = 0; j < D; j++) out[j] = 0.0f;
    for (int i = 0; i < n_keys; i++) {
        const gm_f16 *vi = v[i];
        const float p = scores[i] * inv;
        for (int j = 0; j < D; j++) out[j] += p * gm_f16_to_f32(vi[j]);
    }
}

void gm_ref_attention_group(const float *q, int G, const gm_f16 *const *k, const gm_f16 *const *v, int n_keys,
                            int D, float *scores, float *out) {
    for (int g = 0; g < G; g++)
        gm_ref_attention_head(q + (size_t)g * D, k, v, n_keys, D, scores + (size_t)g * n_keys, out + (size_t)g * D);
}

/* Row i of a key or value list as floats: the row itself (f32 rows), or (q8_0 head rows) loaded into tmp[D]. */
typedef const float *(*attn_row_fn)(const void *row, int D, float *tmp);
static const float *row_f32(const void *row, int D, float *tmp) {
    (void)D, (void)tmp;
    return row;
}
static const float *row_q8(const void *row, int D, float *tmp) {
    gm_ref_kv_q8_load(row, D, tmp);
    return tmp;
}

/* gm_ref_attention_group over rows that row() gives as floats (tmp: D floats of scratch). */
static void attention_group_rows(const float *q, int G, const void *const *k, const void *const *v, int n_keys, int D,
                                 float *scores, float *out, attn_row_fn row, float *tmp) {
    for (int g = 0; g < G; g++) {
        const float *qg = q + (size_t)g * D;
        float *sg = scores + (size_t)g * n_keys, *og = out + (size_t)g * D;
        float max = -INFINITY;
        for (int i = 0; i < n_keys; i++) {
            const float *ki = row(k[i], D, tmp);
            float s = 0.0f;
            for (int j = 0; j < D; j++) s += qg[j] * ki[j];
            sg[i] = s;
            if (s > max) max = s;
        }
        const float inv = gm_ref_softmax_exp(sg, n_keys, max);
        for (int j = 0; j < D; j++) og[j] = 0.0f;
        for (int i = 0; i < n_keys; i++) {
            const float *vi = row(v[i], D, tmp);
            const float p = sg[i] * inv;
            for (int j = 0; j < D; j++) og[j] += p * vi[j];
        }
    }
}

void gm_ref_attention_group_f32(const float *q, int G, const float *const *k, const float *const *v, int n_keys,
                                int D, float *scores, float *out) {
    attention_group_rows(q, G, (const void *const *)k, (const void *const *)v, n_keys, D, scores, out, row_f32, NULL);
}

/* ---- the q8_0 KV cache ---- */
void gm_ref_kv_q8_store(const float *x, int32_t D, uint8_t *head_row) {
    uint8_t *const scales = head_row + D;
    for (int32_t b = 0; b < D / GM_QK; b++) {
        gm_block_q8_0 blk;
        gm_quantize_q8_0_act_ref(x + (size_t)b * GM_QK, &blk, GM_QK);
        memcpy(head_row + (size_t)b * GM_QK, blk.qs, GM_QK);
        memcpy(scales + (size_t)b * sizeof(gm_f16), &blk.d, sizeof(gm_f16));
    }
    const size_t used = (size_t)D + (size_t)(D / GM_QK) * sizeof(gm_f16);
    memset(head_row + used, 0, ((used + 15) & ~(size_t)15) - used); /* pad to 16 bytes, as gm_kv_head_bytes */
}

void gm_ref_kv_q8_load(const uint8_t *head_row, int32_t D, float *x) {
    const int8_t *const qs = (const int8_t *)head_row;
    const gm_f16 *const d = (const gm_f16 *)(head_row + D);
    for (int32_t b = 0; b < D / GM_QK; b++) {
        const float db = gm_f16_to_f32(d[b]);
        for (int32_t j = b * GM_QK; j < (b + 1) * GM_QK; j++) x[j] = (float)qs[j] * db;
    }
}

void gm_ref_attention_group_q8(const float *q, int G, const uint8_t *const *k, const uint8_t *const *v, int n_keys,
                               int D, float *scores, float *out) {
    float tmp[GM_REF_KV_Q8_MAX_D];
    attention_group_rows(q, G, (const void *const *)k, (const void *const *)v, n_keys, D, scores, out, row_q8, tmp);
}

void gm_ref_moe_route(const float *logits, int n_expert, int n_used, const float *expert_scale, float *scratch,
                      int32_t *ids, float *weights) {
    float max = -INFINITY;
    for (int e = 0; e < n_expert; e++) {
        scratch[e] = logits[e];
        if (logits[e] > max) max = logits[e];
    }
    const float inv = gm_ref_softmax_exp(scratch, n_expert, max);
    for (int e = 0; e < n_expert; e++) scratch[e] *= inv;
    /* top-k by selection: each pass takes the largest not yet taken, the lower index on ties */
    float sum = 0.0f;
    for (int j = 0; j < n_used; j++) {
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int i = 0; i < j && !taken; i++) taken = ids[i] == e;
            if (!taken && (best < 0 || scratch[e] > scratch[best])) best = e;
        }
        ids[j] = best;
        weights[j] = scratch[best];
        sum += scratch[best];
    }
    for (int j = 0; j < n_used; j++) {
        weights[j] /= sum;
        if (expert_scale) weights[j] *= expert_scale[ids[j]];
    }
}

/* ---- Gemma 3n ---- */
void gm_ref_rms_match(float *y, const float *ref, int d, float eps) {
    double sum_ref = 0.0, sum_y = 0.0;
    for (int i = 0; i < d; i++) {
        sum_ref += (double)ref[i] * (double)ref[i];
        sum_y += (double)y[i] * (double)y[i];
    }
    const float target = sqrtf((float)(sum_ref / d));
    const float mean_y = (float)(sum_y / d);
    const float current = sqrtf(mean_y > eps ? mean_y : eps);
    for (int i = 0; i < d; i++) y[i] = y[i] * target / current;
}

void gm_ref_sparsity_gate(float *g, int d, float k) {
    double sum = 0.0;
    for (int i = 0; i < d; i++) sum += g[i];
    const double mean = sum / d;
    double var = 0.0;
    for (int i = 0; i < d; i++) var += ((double)g[i] - mean) * ((double)g[i] - mean);
    const float cutoff = (float)mean + sqrtf((float)(var / d)) * k;
    for (int i = 0; i < d; i++) {
        const float v = g[i] - cutoff;
        g[i] = v > 0.0f ? v : 0.0f;
    }
}

void gm_ref_altup_predict(const float *x, int64_t stride, const float *c, float *y, int K, int d) {
    for (int i = 0; i < K; i++) {
        float *yi = y + i * stride;
        const float *ci = c + (int64_t)i * K;
        for (int e = 0; e < d; e++) {
            float acc = 0.0f;
            for (int j = 0; j < K; j++) acc += ci[j] * x[j * stride + e];
            yi[e] = acc + x[i * stride + e];
        }
    }
}

void gm_ref_altup_correct(const float *pred, int64_t stride, const float *act, const float *c, float *y, int K,
                          int active, int d) {
    const float *pa = pred + active * stride;
    for (int i = 0; i < K; i++) {
        const float coef = c[i] + 1.0f;
        const float *pi = pred + i * stride;
        float *yi = y + i * stride;
        for (int e = 0; e < d; e++) yi[e] = (act[e] - pa[e]) * coef + pi[e];
    }
}
