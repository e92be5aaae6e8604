/* gemma3n.c: Gemma 3n text models (gemma-architecture.md §1.3, §2.8; transformers' modeling_gemma3n.py is the
 * reference it follows): hyper-parameters from GGUF metadata (llama.cpp's keys) or from config.json, the list of
 * its weights (GGUF and Hugging Face names), the GGUF metadata it writes back, and the forward pass over the
 * backend ops: AltUp residual streams (predict / correct), LAuReL, per-layer embeddings (PLE) added into the
 * streams, activation sparsity on the first layers, KV sharing, the final unembedding of the streams and the
 * logit softcap. Norms multiply by the raw weight (no +1), attention scale is 1, V gets a weightless RMSNorm. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf_writer.h"
#include "model/arch_common.h"
#include "model/model.h"

/* The magnitude rescale of AltUp streams clamps the mean square at this (transformers' epsilon_tensor). */
#define ALTUP_MAGNITUDE_EPS 1e-5f
/* llama.cpp hard-codes these when a GGUF lacks the keys: layers with KV (n_layer_kv_from_start), sparse layers
 * and their multiplier (float32 torch.distributions.Normal(0, 1).icdf(0.95)). */
#define LLAMA_CPP_LAYERS_WITH_KV 20
#define LLAMA_CPP_SPARSE_LAYERS 10
#define LLAMA_CPP_SPARSITY_STD 1.6448533535003662f

/* Φ⁻¹(p), the standard normal quantile, for p in (0, 1): Acklam's rational approximation refined by one Halley
 * step against erfc (about 1e-15 relative), as torch.distributions.Normal(0, 1).icdf computes it (in float32
 * there: the two agree to about 1e-7). */
static double normal_quantile(double p) {
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                               1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                               6.680131188771972e+01,  -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                               -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                               3.754408661907416e+00};
    const double lo = 0.02425;
    double x;
    if (p < lo) {
        const double q = sqrt(-2 * log(p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    } else if (p <= 1 - lo) {
        const double q = p - 0.5, r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
    } else {
        const double q = sqrt(-2 * log(1 - p));
        x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    const double e = 0.5 * erfc(-x / sqrt(2.0)) - p;
    const double u = e * 2.5066282746310002 * exp(x * x / 2);
    return x - u / (1 + x * u / 2);
}

/* act_sparsity_std of a layer from its target sparsity p (config.json's activation_sparsity_pattern): 0 for
 * p = 0 (transformers applies sparsity only for p > 0). */
static gemmac_status sparsity_std_of(double p, int il, float *out, gm_error *err) {
    if (p == 0.0) {
        *out = 0.0f;
        return GEMMAC_OK;
    }
    if (!(p > 0.0 && p < 1.0))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: activation_sparsity_pattern[%d] = %g is not in [0, 1)",
                       il, p);
    /* transformers evaluates the quantile of p as a float32 */
    const float k = (float)normal_quantile((double)(float)p);
    if (k == 0.0f) /* p = 0.5: a cutoff at the mean, which act_sparsity_std = 0 cannot express */
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "config.json: activation_sparsity_pattern[%d] = 0.5 is not supported",
                       il);
    *out = k;
    return GEMMAC_OK;
}

/* Fills every layer once n_layer, the sliding flags, n_ff and act_sparsity_std are in place, then the KV
 * sources. Fails when a KV-shared layer has no earlier non-shared layer of its attention type. */
static gemmac_status gemma3n_layers(gm_hparams *hp, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                    float base_full, float base_sliding, float scale_full, float scale_sliding,
                                    gm_error *err) {
    for (int il = 0; il < hp->n_layer; il++) {
        gm_layer_hparams *l = &hp->layer[il];
        l->n_head = n_head;
        l->n_head_kv = n_head_kv;
        l->head_dim = head_dim;
        l->n_rot = head_dim;
        l->rope_base = l->sliding ? base_sliding : base_full;
        l->rope_freq_scale = l->sliding ? scale_sliding : scale_full;
    }
    gm_hparams_set_kv_sources(hp);
    for (int il = hp->n_layer - hp->n_kv_shared; il < hp->n_layer; il++)
        if (hp->layer[il].kv_source == il)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE,
                           "layer %d shares the KV cache but no earlier non-shared layer has its attention type", il);
    return GEMMAC_OK;
}

static gemmac_status check_sizes(const gm_hparams *hp, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                 gm_error *err) {
    if (n_head_kv < 1 || n_head % n_head_kv)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%d KV heads do not divide %d heads", n_head_kv, n_head);
    if (head_dim < 2 || head_dim > 1024 || head_dim % 2)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "head dim %d is not an even size in [2, 1024]", head_dim);
    if (hp->altup_num_inputs < 1 || hp->altup_num_inputs > GM_ALTUP_MAX + 1)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "altup_num_inputs %d is outside [1, %d]", hp->altup_num_inputs,
                       GM_ALTUP_MAX + 1);
    if (hp->altup_active_idx < 0 || hp->altup_active_idx >= hp->altup_num_inputs)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "altup_active_idx %d is not one of %d streams", hp->altup_active_idx,
                       hp->altup_num_inputs);
    if (hp->n_kv_shared < 0 || hp->n_kv_shared >= hp->n_layer)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%d KV-shared layers of %d layers", hp->n_kv_shared, hp->n_layer);
    if (!(hp->norm_eps > 0 && hp->norm_eps < 1))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "rms norm epsilon %g is not in (0, 1)", hp->norm_eps);
    return GEMMAC_OK;
}

/* ---- GGUF ---- */

/* The rows (ne[dim]) of a tensor, or def when the file lacks it. */
static int64_t tensor_dim(const gm_gguf *g, const char *name, int dim, int64_t def) {
    const gm_gguf_tensor *t = gm_gguf_find_tensor(g, name);
    return t ? t->ne[dim] : def;
}

static gemmac_status gemma3n_hparams_gguf(gm_hparams *hp, const gm_gguf *g, gm_error *err) {
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ctx, head_dim, value_len, window, n_rot, active, n_in, n_ple,
        n_shared;
    gemmac_status st;
    memset(hp, 0, sizeof *hp);
    hp->arch = GM_ARCH_GEMMA3N;
    if ((st = gm_gguf_req_u32(g, "gemma3n.embedding_length", 1, 65536, &n_embd, err)) ||
        (st = gm_gguf_req_u32(g, "gemma3n.block_count", 1, GM_MAX_LAYERS, &n_layer, err)) ||
        (st = gm_gguf_req_u32(g, "gemma3n.attention.head_count", 1, 1024, &n_head, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3n.context_length", 1, 1u << 24, 32768, &n_ctx, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3n.attention.head_count_kv", 1, 1024, n_head, &n_head_kv, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3n.attention.key_length", 2, 1024, n_embd / n_head, &head_dim, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3n.attention.value_length", 2, 1024, head_dim, &value_len, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3n.attention.sliding_window", 0, 1u << 24, 512, &window, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3n.rope.dimension_count", 2, head_dim, head_dim, &n_rot, err)))
        return st;
    hp->n_embd = (int32_t)n_embd;
    hp->n_layer = (int32_t)n_layer;
    hp->n_ctx_train = (int32_t)n_ctx;
    hp->sliding_window = (int32_t)window;
    if (value_len != head_dim)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "gemma3n.attention.value_length %u differs from key_length %u",
                       value_len, head_dim);
    if (n_rot != head_dim)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "gemma3n.rope.dimension_count %u: Gemma 3n rotates all %u dims",
                       n_rot, head_dim);
    int32_t n_ff[GM_MAX_LAYERS];
    if ((st = gm_gguf_per_layer_u32(g, "gemma3n.feed_forward_length", (int)n_layer, 1, 1u << 20, -1, n_ff, err)))
        return st;
    for (uint32_t il = 0; il < n_layer; il++) hp->layer[il].n_ff = n_ff[il];

    /* Keys llama.cpp's converter writes; where a file lacks them, what llama.cpp assumes or the tensors say. */
    const int64_t router_cols = tensor_dim(g, "blk.0.altup_router.weight", 1, 4);
    const int64_t ple_width = tensor_dim(g, "per_layer_proj_norm.weight", 0, 256);
    if ((st = gm_gguf_opt_u32(g, "gemma3n.altup.num_inputs", 1, GM_ALTUP_MAX + 1,
                              (uint32_t)(router_cols > 0 && router_cols <= GM_ALTUP_MAX + 1 ? router_cols : 4), &n_in,
                              err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3n.altup.active_idx", 0, GM_ALTUP_MAX, 0, &active, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3n.embedding_length_per_layer_input", 1, 65536,
                              (uint32_t)(ple_width > 0 && ple_width <= 65536 ? ple_width : 256), &n_ple, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3n.attention.shared_kv_layers", 0, n_layer - 1,
                              n_layer > LLAMA_CPP_LAYERS_WITH_KV ? n_layer - LLAMA_CPP_LAYERS_WITH_KV : 0, &n_shared,
                              err)))
        return st;
    hp->altup_num_inputs = (int32_t)n_in;
    hp->altup_active_idx = (int32_t)active;
    hp->altup_coef_clip = 120.0f; /* not stored; transformers clips only in training */
    hp->n_embd_per_layer = (int32_t)n_ple;
    hp->n_kv_shared = (int32_t)n_shared;
    /* not stored: the tensors' shapes */
    const int64_t rank = tensor_dim(g, "blk.0.laurel_l.weight", 1, 0);
    if (rank < 1 || rank > 65536) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tensor blk.0.laurel_l.weight is missing");
    hp->laurel_rank = (int32_t)rank;
    if ((st = gm_gguf_embd_rows(g, "token_embd.weight", &hp->n_vocab, err)) ||
        (st = gm_gguf_embd_rows(g, "per_layer_token_embd.weight", &hp->n_vocab_per_layer, err)))
        return st;

    /* sliding layers: a bool per layer, or a pattern (every n-th layer full; llama.cpp's default 5) */
    const gm_gguf_kv *swa = gm_gguf_find_kv(g, "gemma3n.attention.sliding_window_pattern");
    if (swa && swa->type == GM_GGUF_ARRAY) {
        uint64_t n;
        const void *data;
        if ((st = gm_gguf_get_arr(g, "gemma3n.attention.sliding_window_pattern", GM_GGUF_BOOL, &n, &data, err)))
            return st;
        if (n != n_layer)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3n.attention.sliding_window_pattern has %llu values for %u layers",
                           (unsigned long long)n, n_layer);
        for (uint32_t il = 0; il < n_layer; il++) hp->layer[il].sliding = ((const uint8_t *)data)[il] != 0;
    } else {
        uint32_t pattern;
        if ((st = gm_gguf_opt_u32(g, "gemma3n.attention.sliding_window_pattern", 0, 1u << 20, 5, &pattern, err)))
            return st;
        for (uint32_t il = 0; il < n_layer; il++) hp->layer[il].sliding = pattern == 0 || il % pattern < pattern - 1;
    }

    /* activation sparsity: Φ⁻¹(p) per layer, -inf where p = 0; absent: llama.cpp's first 10 layers */
    const gm_gguf_kv *sp = gm_gguf_find_kv(g, "gemma3n.activation_sparsity_scale");
    if (sp) {
        uint64_t n;
        const void *data;
        if ((st = gm_gguf_get_arr(g, "gemma3n.activation_sparsity_scale", GM_GGUF_FLOAT32, &n, &data, err))) return st;
        if (n != n_layer)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3n.activation_sparsity_scale has %llu values for %u layers",
                           (unsigned long long)n, n_layer);
        for (uint32_t il = 0; il < n_layer; il++) {
            float k;
            memcpy(&k, (const uint8_t *)data + 4 * il, 4);
            hp->layer[il].act_sparsity_std = isfinite(k) ? k : 0.0f;
        }
    } else {
        for (uint32_t il = 0; il < n_layer && il < LLAMA_CPP_SPARSE_LAYERS; il++)
            hp->layer[il].act_sparsity_std = LLAMA_CPP_SPARSITY_STD;
    }

    float base, base_swa, scaling;
    if ((st = gm_gguf_opt_f32(g, "gemma3n.attention.layer_norm_rms_epsilon", 1e-6f, &hp->norm_eps, err)) ||
        (st = gm_gguf_opt_f32(g, "gemma3n.rope.freq_base", 1e6f, &base, err)) ||
        (st = gm_gguf_opt_f32(g, "gemma3n.rope.freq_base_swa", 1e4f, &base_swa, err)) ||
        (st = gm_gguf_opt_f32(g, "gemma3n.rope.scaling.factor", 1.0f, &scaling, err)) ||
        (st = gm_gguf_opt_f32(g, "gemma3n.final_logit_softcapping", 30.0f, &hp->final_softcap, err)))
        return st;
    if (!(base > 1) || !(base_swa > 1))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3n.rope.freq_base %g / freq_base_swa %g is not > 1", base, base_swa);
    if (!(scaling >= 1 && scaling <= 1024))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3n.rope.scaling.factor %g is not in [1, 1024]", scaling);
    if (hp->final_softcap < 0) hp->final_softcap = 0;
    hp->embed_scale = sqrtf((float)n_embd);
    hp->attn_scale = 1.0f;
    if ((st = check_sizes(hp, (int32_t)n_head, (int32_t)n_head_kv, (int32_t)head_dim, err))) return st;
    return gemma3n_layers(hp, (int32_t)n_head, (int32_t)n_head_kv, (int32_t)head_dim, base, base_swa, 1.0f / scaling,
                          1.0f, err);
}

static gemmac_status gemma3n_write_hparams(const gm_hparams *hp, gm_gguf_writer *w, gm_error *err) {
    (void)err;
    const int L = hp->n_layer;
    const gm_layer_hparams *l0 = &hp->layer[0];
    float base = 1e6f, base_swa = 1e4f, freq_scale = 1.0f;
    for (int il = L - 1; il >= 0; il--) {
        if (hp->layer[il].sliding) base_swa = hp->layer[il].rope_base;
        else base = hp->layer[il].rope_base, freq_scale = hp->layer[il].rope_freq_scale;
    }
    int32_t n_ff[GM_MAX_LAYERS];
    float sparsity[GM_MAX_LAYERS];
    bool sliding[GM_MAX_LAYERS];
    for (int il = 0; il < L; il++) {
        n_ff[il] = hp->layer[il].n_ff;
        sparsity[il] = hp->layer[il].act_sparsity_std != 0.0f ? hp->layer[il].act_sparsity_std : -INFINITY;
        sliding[il] = hp->layer[il].sliding;
    }
    /* in the order llama.cpp's converter (TextModel, Gemma3Model, Gemma3NModel) writes them */
    gm_gguf_writer_u32(w, "gemma3n.block_count", (uint32_t)L);
    gm_gguf_writer_u32(w, "gemma3n.context_length", (uint32_t)hp->n_ctx_train);
    gm_gguf_writer_u32(w, "gemma3n.embedding_length", (uint32_t)hp->n_embd);
    gm_gguf_writer_arr_i32(w, "gemma3n.feed_forward_length", n_ff, (size_t)L);
    gm_gguf_writer_u32(w, "gemma3n.attention.head_count", (uint32_t)l0->n_head);
    gm_gguf_writer_u32(w, "gemma3n.attention.head_count_kv", (uint32_t)l0->n_head_kv);
    if (freq_scale != 1.0f) {
        gm_gguf_writer_str(w, "gemma3n.rope.scaling.type", "linear");
        gm_gguf_writer_f32(w, "gemma3n.rope.scaling.factor", 1.0f / freq_scale);
    }
    gm_gguf_writer_f32(w, "gemma3n.rope.freq_base", base);
    gm_gguf_writer_f32(w, "gemma3n.rope.freq_base_swa", base_swa);
    gm_gguf_writer_f32(w, "gemma3n.attention.layer_norm_rms_epsilon", hp->norm_eps);
    gm_gguf_writer_u32(w, "gemma3n.attention.key_length", (uint32_t)l0->head_dim);
    gm_gguf_writer_u32(w, "gemma3n.attention.value_length", (uint32_t)l0->head_dim);
    if (hp->final_softcap > 0) gm_gguf_writer_f32(w, "gemma3n.final_logit_softcapping", hp->final_softcap);
    gm_gguf_writer_u32(w, "gemma3n.attention.sliding_window", (uint32_t)hp->sliding_window);
    gm_gguf_writer_u32(w, "gemma3n.altup.active_idx", (uint32_t)hp->altup_active_idx);
    gm_gguf_writer_u32(w, "gemma3n.altup.num_inputs", (uint32_t)hp->altup_num_inputs);
    gm_gguf_writer_u32(w, "gemma3n.embedding_length_per_layer_input", (uint32_t)hp->n_embd_per_layer);
    gm_gguf_writer_u32(w, "gemma3n.attention.shared_kv_layers", (uint32_t)hp->n_kv_shared);
    gm_gguf_writer_arr_f32(w, "gemma3n.activation_sparsity_scale", sparsity, (size_t)L);
    gm_gguf_writer_arr_bool(w, "gemma3n.attention.sliding_window_pattern", sliding, (size_t)L);
    return GEMMAC_OK;
}

/* ---- config.json ---- */

static gemmac_status gemma3n_hparams_hf(gm_hparams *hp, const gm_hf_config *c, gm_error *err) {
    memset(hp, 0, sizeof *hp);
    hp->arch = GM_ARCH_GEMMA3N;
    int32_t n_head, n_head_kv, head_dim;
    float softcap = 30.0f;
    gm_hf_rope full, sliding;
    gemmac_status st;
    if ((st = gm_hf_opt_int(c, "vocab_size", 1, 1 << 24, 262400, &hp->n_vocab, err)) ||
        (st = gm_hf_req_int(c, "hidden_size", 1, 65536, &hp->n_embd, err)) ||
        (st = gm_hf_req_int(c, "num_hidden_layers", 1, GM_MAX_LAYERS, &hp->n_layer, err)) ||
        (st = gm_hf_req_int(c, "num_attention_heads", 1, 1024, &n_head, err)) ||
        (st = gm_hf_opt_int(c, "num_key_value_heads", 1, 1024, 2, &n_head_kv, err)) ||
        (st = gm_hf_opt_int(c, "head_dim", 2, 1024, 256, &head_dim, err)) ||
        (st = gm_hf_opt_int(c, "max_position_embeddings", 1, 1 << 24, 32768, &hp->n_ctx_train, err)) ||
        (st = gm_hf_opt_int(c, "sliding_window", 0, 1 << 24, 512, &hp->sliding_window, err)) ||
        (st = gm_hf_opt_float(c, "rms_norm_eps", 1e-6, &hp->norm_eps, err)) ||
        (st = gm_hf_opt_int(c, "vocab_size_per_layer_input", 1, 1 << 24, 262144, &hp->n_vocab_per_layer, err)) ||
        (st = gm_hf_opt_int(c, "hidden_size_per_layer_input", 1, 65536, 256, &hp->n_embd_per_layer, err)) ||
        (st = gm_hf_opt_int(c, "altup_active_idx", 0, GM_ALTUP_MAX, 0, &hp->altup_active_idx, err)) ||
        (st = gm_hf_opt_int(c, "altup_num_inputs", 1, GM_ALTUP_MAX + 1, 4, &hp->altup_num_inputs, err)) ||
        (st = gm_hf_opt_float(c, "altup_coef_clip", 120.0, &hp->altup_coef_clip, err)) ||
        (st = gm_hf_opt_int(c, "laurel_rank", 1, 65536, 64, &hp->laurel_rank, err)) ||
        (st = gm_hf_opt_int(c, "num_kv_shared_layers", 0, GM_MAX_LAYERS, 15, &hp->n_kv_shared, err)) ||
        (st = gm_hf_layer_types(c, hp, 5, err)) ||
        (st = gm_hf_rope_of(c, "full_attention", 1e6f, &full, err)) ||
        (st = gm_hf_rope_of(c, "sliding_attention", 1e4f, &sliding, err)))
        return st;
    /* absent: the class default 30; null: none */
    const gm_hf_kind sk = gm_hf_kind_of(c, "final_logit_softcapping");
    if (sk == GM_HF_NULL) softcap = 0.0f;
    else if ((st = gm_hf_opt_float(c, "final_logit_softcapping", 30.0, &softcap, err))) return st;
    hp->final_softcap = softcap > 0 ? softcap : 0.0f;
    if (gm_hf_kind_of(c, "altup_correct_scale") == GM_HF_BOOL) {
        bool correct_scale;
        if ((st = gm_hf_get_bool(c, "altup_correct_scale", &correct_scale, err))) return st;
        if (!correct_scale)
            return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "config.json: altup_correct_scale false is not supported");
    }
    if (full.partial != 1.0f || sliding.partial != 1.0f || full.proportional || sliding.proportional)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "config.json: partial or proportional RoPE on a Gemma 3n model");

    /* intermediate_size: one value or one per layer */
    int64_t ff[GM_MAX_LAYERS];
    if ((st = gm_hf_get_int_per_layer(c, "intermediate_size", (size_t)hp->n_layer, 1, 1 << 20, ff, err))) {
        if (st == GEMMAC_ERR_NOT_FOUND)
            for (int il = 0; il < hp->n_layer; il++) ff[il] = 16384;
        else return st;
    }
    for (int il = 0; il < hp->n_layer; il++) hp->layer[il].n_ff = (int32_t)ff[il];

    /* activation_sparsity_pattern: one p per layer (absent: 0.95 on the first 10 layers when there are more) */
    double pattern[GM_MAX_LAYERS];
    const gm_hf_kind pk = gm_hf_kind_of(c, "activation_sparsity_pattern");
    if (pk == GM_HF_ARRAY) {
        size_t n;
        if ((st = gm_hf_get_float_arr(c, "activation_sparsity_pattern", pattern, GM_MAX_LAYERS, &n, err))) return st;
        if (n != (size_t)hp->n_layer)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: activation_sparsity_pattern has %zu values for %d layers",
                           n, hp->n_layer);
    } else if (pk == GM_HF_NUMBER) {
        double p;
        if ((st = gm_hf_get_float(c, "activation_sparsity_pattern", &p, err))) return st;
        for (int il = 0; il < hp->n_layer; il++) pattern[il] = p;
    } else {
        for (int il = 0; il < hp->n_layer; il++) pattern[il] = hp->n_layer > 10 && il < 10 ? 0.95 : 0.0;
    }
    for (int il = 0; il < hp->n_layer; il++)
        if ((st = sparsity_std_of(pattern[il], il, &hp->layer[il].act_sparsity_std, err))) return st;

    hp->embed_scale = sqrtf((float)hp->n_embd);
    hp->attn_scale = 1.0f;
    if ((st = check_sizes(hp, n_head, n_head_kv, head_dim, err))) return st;
    return gemma3n_layers(hp, n_head, n_head_kv, head_dim, full.theta, sliding.theta, 1.0f / full.factor,
                          1.0f / sliding.factor, err);
}

/* ---- weights ---- */

static gemmac_status gemma3n_manifest(const gm_hparams *hp, gm_weights *w, gm_spec_fn fn, void *ud, gm_error *err) {
    const int64_t H = hp->n_embd, V = hp->n_vocab, L = hp->n_layer, P = hp->n_embd_per_layer;
    const int64_t K = hp->altup_num_inputs, R = hp->laurel_rank;
    gemmac_status st;
#define DECL_SLICE(idx, dst, gguf, hf, role, opt, slice, n_slices, nd, ...)                                          \
    if ((st = gm_declare(fn, ud, idx,                                                                            \
                         &(gm_tensor_spec){dst, gguf, hf, nd, {__VA_ARGS__}, role, opt, slice, n_slices, false}, err)))   \
        return st
#define DECL(idx, dst, gguf, hf, role, opt, nd, ...) DECL_SLICE(idx, dst, gguf, hf, role, opt, 0, 0, nd, __VA_ARGS__)
    DECL(-1, &w->tok_embd, "token_embd.weight", "embed_tokens.weight", GM_ROLE_EMBED, false, 2, H, V);
    DECL(-1, &w->output_norm, "output_norm.weight", "norm.weight", GM_ROLE_NORM, false, 1, H);
    DECL(-1, &w->output, "output.weight", "lm_head.weight", GM_ROLE_MATRIX, true, 2, H, V);
    DECL(-1, &w->ple_tok_embd, "per_layer_token_embd.weight", "embed_tokens_per_layer.weight", GM_ROLE_TABLE, false,
         2, L * P, (int64_t)hp->n_vocab_per_layer);
    DECL(-1, &w->ple_model_proj, "per_layer_model_proj.weight", "per_layer_model_projection.weight", GM_ROLE_MATRIX,
         false, 2, H, L * P);
    DECL(-1, &w->ple_proj_norm, "per_layer_proj_norm.weight", "per_layer_projection_norm.weight", GM_ROLE_NORM, false,
         1, P);
    /* GGUF stacks the K-1 matrices as [H, H, K-1]; HF keeps them apart */
    for (int k = 0; k + 1 < K; k++) {
        DECL_SLICE(k, &w->altup_proj[k], "altup_proj.weight", "altup_projections.%d.weight", GM_ROLE_MATRIX, false, k,
                   (int32_t)(K - 1), 2, H, H);
        DECL_SLICE(k, &w->altup_unembd[k], "altup_unembd_proj.weight", "altup_unembed_projections.%d.weight",
                   GM_ROLE_MATRIX, false, k, (int32_t)(K - 1), 2, H, H);
    }
    for (int il = 0; il < hp->n_layer; il++) {
        gm_layer_weights *lw = &w->layer[il];
        if ((st = gm_declare_decoder_layer(fn, ud, hp, il, lw, false, err))) return st;
        /* AltUp */
        DECL(il, &lw->altup_correct_coef, "blk.%d.altup_correct_coef.weight", "layers.%d.altup.correction_coefs.weight",
             GM_ROLE_VECTOR, false, 2, K, K);
        DECL(il, &lw->altup_correct_scale, "blk.%d.altup_correct_scale.weight", "layers.%d.altup.correct_output_scale",
             GM_ROLE_VECTOR, false, 1, H);
        DECL(il, &lw->altup_predict_coef, "blk.%d.altup_predict_coef.weight", "layers.%d.altup.prediction_coefs.weight",
             GM_ROLE_VECTOR, false, 2, K, K * K);
        DECL(il, &lw->altup_router, "blk.%d.altup_router.weight", "layers.%d.altup.modality_router.weight",
             GM_ROLE_MATRIX, false, 2, H, K);
        DECL(il, &lw->altup_router_norm, "blk.%d.altup_router_norm.weight", "layers.%d.altup.router_norm.weight",
             GM_ROLE_NORM, false, 1, H);
        /* LAuReL */
        DECL(il, &lw->laurel_l, "blk.%d.laurel_l.weight", "layers.%d.laurel.linear_left.weight", GM_ROLE_MATRIX, false,
             2, H, R);
        DECL(il, &lw->laurel_r, "blk.%d.laurel_r.weight", "layers.%d.laurel.linear_right.weight", GM_ROLE_MATRIX, false,
             2, R, H);
        DECL(il, &lw->laurel_post_norm, "blk.%d.laurel_post_norm.weight", "layers.%d.laurel.post_laurel_norm.weight",
             GM_ROLE_NORM, false, 1, H);
        /* per-layer embeddings */
        DECL(il, &lw->ple_gate, "blk.%d.inp_gate.weight", "layers.%d.per_layer_input_gate.weight", GM_ROLE_MATRIX, false,
             2, H, P);
        DECL(il, &lw->ple_proj, "blk.%d.proj.weight", "layers.%d.per_layer_projection.weight", GM_ROLE_MATRIX, false, 2,
             P, H);
        DECL(il, &lw->ple_post_norm, "blk.%d.post_norm.weight", "layers.%d.post_per_layer_input_norm.weight",
             GM_ROLE_NORM, false, 1, H);
    }
#undef DECL
#undef DECL_SLICE
    return GEMMAC_OK;
}

static gemmac_status gemma3n_finish(gemmac_model *m, gm_error *err) {
    (void)err;
    /* tied; transformers clamps the AltUp coefficients only while training, so nothing else is derived */
    if (!m->w.output.data) m->w.output = m->w.tok_embd;
    return GEMMAC_OK;
}

/* ---- forward ---- */

static const float *vec(const gm_tensor *t) { return t->data; }

/* AltUp router modalities of n rows x: mod [n][K] = tanh(router · (rmsnorm(x; router_norm) / H)). tmp: [n][H]. */
static void router_modalities(const gm_forward_args *a, const gm_layer_weights *lw, const float *x, float *tmp,
                              float *mod) {
    const gm_hparams *hp = &a->model->hp;
    gm_backend *b = a->backend;
    const int32_t n = a->n_tokens, H = hp->n_embd;
    b->ops->rmsnorm(b, x, tmp, n, H, vec(&lw->altup_router_norm), hp->norm_eps);
    b->ops->scale(b, tmp, (int64_t)n * H, (float)(1.0 / H));
    b->ops->matmul(b, &lw->altup_router, tmp, n, mod);
    b->ops->softcap(b, mod, (int64_t)n * hp->altup_num_inputs, 1.0f); /* tanh */
}

static gemmac_status gemma3n_forward(const gm_forward_args *a, gm_error *err) {
    const gm_hparams *hp = &a->model->hp;
    const gm_weights *w = &a->model->w;
    gm_backend *b = a->backend;
    const gm_backend_ops *op = b->ops;
    gm_scratch *s = a->scratch;
    const int32_t n = a->n_tokens, H = hp->n_embd, L = hp->n_layer, P = hp->n_embd_per_layer;
    const int32_t K = hp->altup_num_inputs, active = hp->altup_active_idx;
    const int64_t nH = (int64_t)n * H, nLP = (int64_t)n * L * P;
    float *const streams = s->streams, *const pred = s->pred;
    float *const mod = s->small, *const coef = s->small + (int64_t)n * K;
    const float rsqrt2 = (float)(1.0 / sqrt(2.0));

    /* stream 0: the scaled token embeddings */
    op->get_rows(b, &w->tok_embd, a->token, n, hp->embed_scale, streams);

    /* per-layer inputs: (rmsnorm(W_ple·e / sqrt(H)) + E_ple[tok]·sqrt(P)) / sqrt(2), ids past the table use
     * row 0 (get_rows does that: the table has n_vocab_per_layer rows); then made layer-major so that each
     * layer's [n][P] block is contiguous */
    op->get_rows(b, &w->ple_tok_embd, a->token, n, sqrtf((float)P), s->ple);
    op->matmul(b, &w->ple_model_proj, streams, n, s->ple_t);
    op->scale(b, s->ple_t, nLP, (float)(1.0 / sqrt((double)H)));
    op->rmsnorm(b, s->ple_t, s->ple_t, (int64_t)n * L, P, vec(&w->ple_proj_norm), hp->norm_eps);
    op->add_scale(b, s->ple_t, s->ple, nLP, rsqrt2);
    op->transpose(b, s->ple_t, s->ple, n, L, P); /* s->ple: [L][n][P] */

    /* streams 1..K-1: projections of stream 0 rescaled to its magnitude */
    for (int k = 1; k < K; k++) {
        op->matmul(b, &w->altup_proj[k - 1], streams, n, streams + k * nH);
        op->rms_match(b, streams + k * nH, streams, n, H, ALTUP_MAGNITUDE_EPS);
    }

    for (int il = 0; il < L; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        const gm_layer_weights *lw = &w->layer[il];
        const int32_t D = l->head_dim;

        /* AltUp predict: pred_i = s_i + Σ_j C[i][j]·s_j, C from the router of the active stream */
        router_modalities(a, lw, streams + active * nH, s->xn, mod);
        op->matmul(b, &lw->altup_predict_coef, mod, n, coef);
        op->altup_predict(b, streams, coef, pred, K, n, H);
        const float *act = pred + active * nH;
        op->rmsnorm(b, act, s->xn, n, H, vec(&lw->attn_norm), hp->norm_eps);

        /* LAuReL: aux = a + rmsnorm(R·(Lf·a)) */
        op->matmul(b, &lw->laurel_l, s->xn, n, s->small);
        op->matmul(b, &lw->laurel_r, s->small, n, s->aux);
        op->rmsnorm(b, s->aux, s->aux, n, H, vec(&lw->laurel_post_norm), hp->norm_eps);
        op->add_scale(b, s->aux, s->xn, nH, 1.0f);

        /* attention: q, k norms with weights, v without, RoPE, scale 1; shared layers read their source's cache,
         * so they project only q. The normalised input stays in s->xn for LAuReL, hence no norm here. */
        const bool own_kv = l->kv_source == il;
        const gm_proj_args qkv = {
            .x = s->xn, .n = n, .act = GM_PROJ_PLAIN, .n_w = own_kv ? 3 : 1,
            .w = {&lw->wq, &lw->wk, &lw->wv}, .y = {s->q, s->k, s->v},
        };
        op->project(b, &qkv);
        const gm_attn_prep prep = {
            .q_norm = vec(&lw->q_norm), .k_norm = vec(&lw->k_norm), .v_norm = true, .eps = hp->norm_eps,
            .n_rot = l->n_rot, .base = l->rope_base, .freq_scale = l->rope_freq_scale, .q_scale = hp->attn_scale,
        };
        gm_attn_args at = {
            .kv = a->kv, .kv_layer = l->kv_source, .write_kv = own_kv, .n_tokens = n, .pos = a->pos, .seq = a->seq,
            .n_head = l->n_head, .n_head_kv = l->n_head_kv, .head_dim = D,
            .window = l->sliding ? hp->sliding_window : 0, .prep = &prep, .q = s->q, .k = s->k, .v = s->v,
            .out = s->att,
        };
        op->attention(b, &at);
        op->matmul(b, &lw->wo, s->att, n, s->x);
        op->rmsnorm(b, s->x, s->x, n, H, vec(&lw->post_attn_norm), hp->norm_eps);
        op->add_scale(b, s->x, act, nH, 1.0f);      /* act + attn */
        op->add_scale(b, s->x, s->aux, nH, rsqrt2); /* (· + laurel) / sqrt(2) */

        /* MLP, with activation sparsity on the gate where the layer has it: there the gate is cut between its
         * projection and the GELU, so gate and up come out plain and the rest runs as separate ops */
        const bool sparse = l->act_sparsity_std != 0.0f;
        const gm_proj_args ffn = {
            .x = s->x, .n = n, .norm = vec(&lw->ffn_norm), .eps = hp->norm_eps,
            .act = sparse ? GM_PROJ_PLAIN : GM_PROJ_GEGLU, .n_w = 2, .w = {&lw->ffn_gate, &lw->ffn_up},
            .y = {s->g, sparse ? s->u : NULL},
        };
        op->project(b, &ffn);
        if (sparse) {
            op->sparsity_gate(b, s->g, n, l->n_ff, l->act_sparsity_std);
            op->gelu_mul(b, s->g, s->u, (int64_t)n * l->n_ff);
        }
        op->matmul(b, &lw->ffn_down, s->g, n, s->xn);
        /* run at once rather than left pending for a project (gm_pending_residual): the AltUp router reads x next */
        op->rmsnorm_add(b, s->x, s->xn, n, H, vec(&lw->post_ffw_norm), hp->norm_eps);

        /* AltUp correct: s_i = pred_i + (c_i + 1)·(x − pred_active), c from the router of x */
        router_modalities(a, lw, s->x, s->xn, mod);
        op->matmul(b, &lw->altup_correct_coef, mod, n, coef);
        op->altup_correct(b, pred, s->x, coef, streams, K, active, n, H);

        /* per-layer input: p = rmsnorm(W_proj·(gelu(W_gate·(s_active ⊙ scale)) ⊙ ple[il])), added to streams 1.. */
        op->mul_rows(b, streams + active * nH, s->xn, n, H, vec(&lw->altup_correct_scale));
        const gm_proj_args gate = {
            .x = s->xn, .n = n, .act = GM_PROJ_GELU_MUL, .mul = s->ple + (int64_t)il * n * P, .n_w = 1,
            .w = {&lw->ple_gate}, .y = {s->small},
        };
        op->project(b, &gate);
        op->matmul(b, &lw->ple_proj, s->small, n, s->xn);
        op->rmsnorm(b, s->xn, s->xn, n, H, vec(&lw->ple_post_norm), hp->norm_eps);
        for (int k = 1; k < K; k++) op->add_scale(b, streams + k * nH, s->xn, nH, 1.0f);
    }

    /* logits of the wanted rows, s->logits_rows at a time: streams 1.. unembedded and rescaled to the magnitude
     * of stream 0, the mean of all streams, final norm, tied head, softcap */
    for (int32_t i0 = 0; i0 < a->n_out; i0 += s->logits_rows) {
        const int32_t nc = a->n_out - i0 < s->logits_rows ? a->n_out - i0 : s->logits_rows;
        const int32_t *rows = a->out_rows + i0;
        op->gather(b, streams, H, rows, nc, s->x);
        op->gather(b, streams, H, rows, nc, s->xo);
        for (int k = 1; k < K; k++) {
            op->gather(b, streams + k * nH, H, rows, nc, s->xn);
            op->matmul(b, &w->altup_unembd[k - 1], s->xn, nc, s->aux);
            op->rms_match(b, s->aux, s->x, nc, H, ALTUP_MAGNITUDE_EPS);
            op->add_scale(b, s->xo, s->aux, (int64_t)nc * H, 1.0f);
        }
        if (K > 1) op->scale(b, s->xo, (int64_t)nc * H, 1.0f / (float)K);
        gm_forward_logits(a, i0, nc, &w->output, vec(&w->output_norm), hp->norm_eps, hp->final_softcap);
    }
    return GEMMAC_OK;
}

static const char *const gemma3n_hf_types[] = {"gemma3n_text", "gemma3n", NULL};

const gm_arch_impl gm_arch_gemma3n = {
    .gguf_pads_tables = true,
    .name = "gemma3n",
    .hf_model_types = gemma3n_hf_types,
    .hf_norm_shift = 0.0f, /* Gemma 3n norms multiply by the raw weight, in HF and GGUF alike */
    .chat_format = GM_CHAT_GEMMA3,
    .hparams_gguf = gemma3n_hparams_gguf,
    .hparams_hf = gemma3n_hparams_hf,
    .manifest = gemma3n_manifest,
    .finish = gemma3n_finish,
    .write_hparams = gemma3n_write_hparams,
    .forward = gemma3n_forward,
};
