/* gemma4.c: Gemma 4 text models (gemma-architecture.md §1.1, §2.2-2.4, §4, §5; architectures gemma4, HF model
 * types gemma4_text / gemma4 / gemma4_unified_text / gemma4_unified): hyper-parameters from GGUF metadata or
 * config.json, the list of its weights (GGUF and Hugging Face names), the derived tensors (tied output, the
 * proportional-RoPE frequency factors), the GGUF metadata llama.cpp's converter writes, and the forward pass
 * over the backend ops for a batch of tokens from any number of sequences. Per layer everything comes from
 * hparams: sliding / full attention with their own head dims and KV heads, K = V full layers, KV sharing,
 * per-layer embeddings (PLE), double-wide MLPs, and routed experts beside the dense MLP. Norms multiply by
 * the raw weight (no +1) in both formats. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf_writer.h"
#include "model/arch_common.h"
#include "model/model.h"

/* Proportional RoPE leaves pairs unrotated with this frequency factor (angle / 1e30 ≈ 0), as llama.cpp's
 * converter writes rope_freqs. */
#define ROPE_FACTOR_UNROTATED 1e30f
/* Gemma4TextConfig's default share of rotated pairs on full layers, for a GGUF without rope_freqs. */
#define DEFAULT_FULL_PARTIAL 0.25

/* ---- hyper-parameters ---- */

/* Checks shared by both readers once every layer is filled; names come from the reader for messages. */
static gemmac_status check_layers(gm_hparams *hp, const char *what, gm_error *err) {
    if (!(hp->norm_eps > 0 && hp->norm_eps < 1))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: rms norm epsilon %g is not in (0, 1)", what, hp->norm_eps);
    if (hp->n_kv_shared < 0 || hp->n_kv_shared >= hp->n_layer)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: %d KV-shared layers of %d", what, hp->n_kv_shared, hp->n_layer);
    gm_hparams_set_kv_sources(hp);
    int32_t freq_dim = 0; /* head dim of the layers reading rope_freqs: one vector serves them all */
    bool any_sliding = false;
    for (int il = 0; il < hp->n_layer; il++) {
        gm_layer_hparams *l = &hp->layer[il];
        any_sliding |= l->sliding;
        if (l->n_head < 1 || l->n_head > 1024 || l->n_head_kv < 1 || l->n_head % l->n_head_kv)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: layer %d has %d KV heads for %d heads", what, il,
                           l->n_head_kv, l->n_head);
        if (l->head_dim < 2 || l->head_dim > 1024 || l->head_dim % 2)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: layer %d head dim %d is not an even size in [2, 1024]", what,
                           il, l->head_dim);
        if (l->n_rot < 2 || l->n_rot > l->head_dim || l->n_rot % 2)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: layer %d rotates %d of %d dims", what, il, l->n_rot,
                           l->head_dim);
        if (!(l->rope_base > 1))
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: layer %d rope base %g is not > 1", what, il, l->rope_base);
        if (l->n_ff < 1)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: layer %d has MLP width %d", what, il, l->n_ff);
        if (l->rope_freq_factors) {
            if (freq_dim && freq_dim != l->n_rot)
                return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                               "%s: layers with proportional RoPE rotate %d and %d dims (one rope_freqs vector)", what,
                               freq_dim, l->n_rot);
            freq_dim = l->n_rot;
        }
        const gm_layer_hparams *src = &hp->layer[l->kv_source];
        if (l->kv_source != il && (src->head_dim != l->head_dim || src->n_head_kv != l->n_head_kv))
            return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                           "%s: layer %d (head dim %d, %d KV heads) shares the cache of layer %d (%d, %d)", what, il,
                           l->head_dim, l->n_head_kv, l->kv_source, src->head_dim, src->n_head_kv);
        if (l->v_from_k && l->kv_source != il) l->v_from_k = false; /* a shared layer computes no K or V */
    }
    if (any_sliding && hp->sliding_window < 1)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: sliding layers without a sliding window", what);
    if (hp->n_expert) {
        if (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert || hp->n_ff_expert < 1)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: %d experts, %d used, width %d", what, hp->n_expert,
                           hp->n_expert_used, hp->n_ff_expert);
    }
    if (hp->n_embd_per_layer && hp->n_vocab_per_layer < 1)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: per-layer embeddings without a vocabulary", what);
    return GEMMAC_OK;
}

static gemmac_status gemma4_hparams_gguf(gm_hparams *hp, const gm_gguf *g, gm_error *err) {
    uint32_t n_embd, n_layer, n_ctx, window, n_shared, n_ple, key_len, val_len, key_swa, val_swa, rot, rot_swa;
    uint32_t n_expert, n_expert_used, n_ff_expert;
    gemmac_status st;
    if ((st = gm_gguf_req_u32(g, "gemma4.embedding_length", 1, 65536, &n_embd, err)) ||
        (st = gm_gguf_req_u32(g, "gemma4.block_count", 1, GM_MAX_LAYERS, &n_layer, err)) ||
        (st = gm_gguf_req_u32(g, "gemma4.context_length", 1, 1u << 24, &n_ctx, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma4.attention.sliding_window", 0, 1u << 24, 0, &window, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma4.attention.shared_kv_layers", 0, n_layer - 1, 0, &n_shared, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma4.embedding_length_per_layer_input", 0, 65536, 0, &n_ple, err)) ||
        (st = gm_gguf_req_u32(g, "gemma4.attention.key_length", 2, 1024, &key_len, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma4.attention.value_length", 2, 1024, key_len, &val_len, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma4.attention.key_length_swa", 2, 1024, key_len, &key_swa, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma4.attention.value_length_swa", 2, 1024, key_swa, &val_swa, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma4.rope.dimension_count", 2, key_len, key_len, &rot, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma4.rope.dimension_count_swa", 2, key_swa, key_swa, &rot_swa, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma4.expert_count", 0, 4096, 0, &n_expert, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma4.expert_used_count", 0, 4096, 0, &n_expert_used, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma4.expert_feed_forward_length", 0, 1u << 20, 0, &n_ff_expert, err)))
        return st;
    if (val_len != key_len || val_swa != key_swa)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "gemma4 value_length %u / %u differs from key_length %u / %u",
                       val_len, val_swa, key_len, key_swa);
    float eps, base, base_swa, softcap;
    if ((st = gm_gguf_opt_f32(g, "gemma4.attention.layer_norm_rms_epsilon", 1e-6f, &eps, err)) ||
        (st = gm_gguf_opt_f32(g, "gemma4.rope.freq_base", 1e6f, &base, err)) ||
        (st = gm_gguf_opt_f32(g, "gemma4.rope.freq_base_swa", 1e4f, &base_swa, err)) ||
        (st = gm_gguf_opt_f32(g, "gemma4.final_logit_softcapping", 0.0f, &softcap, err)))
        return st;

    memset(hp, 0, sizeof *hp);
    hp->arch = GM_ARCH_GEMMA4;
    if ((st = gm_gguf_embd_rows(g, "token_embd.weight", &hp->n_vocab, err))) return st;
    hp->n_embd = (int32_t)n_embd;
    hp->n_layer = (int32_t)n_layer;
    hp->n_ctx_train = (int32_t)n_ctx;
    hp->sliding_window = (int32_t)window;
    hp->norm_eps = eps;
    hp->embed_scale = sqrtf((float)n_embd);
    hp->attn_scale = 1.0f; /* Gemma 4: no query scaling (llama.cpp hard-codes it too) */
    hp->final_softcap = softcap > 0 ? softcap : 0.0f;
    hp->n_kv_shared = (int32_t)n_shared;
    hp->n_embd_per_layer = (int32_t)n_ple;
    if (n_ple && (st = gm_gguf_embd_rows(g, "per_layer_token_embd.weight", &hp->n_vocab_per_layer, err))) return st;
    hp->n_expert = (int32_t)n_expert;
    hp->n_expert_used = (int32_t)n_expert_used;
    hp->n_ff_expert = (int32_t)n_ff_expert;

    bool sliding[GM_MAX_LAYERS];
    int32_t n_head[GM_MAX_LAYERS], n_head_kv[GM_MAX_LAYERS], n_ff[GM_MAX_LAYERS];
    const bool has_rope_freqs = gm_gguf_find_tensor(g, "rope_freqs.weight") != NULL;
    st = gm_gguf_per_layer_bool(g, "gemma4.attention.sliding_window_pattern", (int)n_layer, sliding, err);
    if (st == GEMMAC_ERR_NOT_FOUND)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "required key gemma4.attention.sliding_window_pattern is missing");
    if (st != GEMMAC_OK) return st;
    if ((st = gm_gguf_per_layer_u32(g, "gemma4.attention.head_count", (int)n_layer, 1, 1024, -1, n_head, err)) ||
        (st = gm_gguf_per_layer_u32(g, "gemma4.attention.head_count_kv", (int)n_layer, 1, 1024, -1, n_head_kv, err)) ||
        (st = gm_gguf_per_layer_u32(g, "gemma4.feed_forward_length", (int)n_layer, 1, 1u << 20, -1, n_ff, err)))
        return st;
    for (int il = 0; il < (int)n_layer; il++) {
        gm_layer_hparams *l = &hp->layer[il];
        l->sliding = sliding[il];
        l->n_head = n_head[il];
        l->n_head_kv = n_head_kv[il];
        l->head_dim = (int32_t)(l->sliding ? key_swa : key_len);
        l->n_rot = (int32_t)(l->sliding ? rot_swa : rot);
        l->rope_base = l->sliding ? base_swa : base;
        l->rope_freq_scale = 1.0f;
        /* full layers use proportional RoPE: rope_freqs says which pairs rotate */
        l->rope_freq_factors = !l->sliding && has_rope_freqs;
        l->n_ff = n_ff[il];
        char name[96];
        snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
        l->moe = n_expert > 0 && gm_gguf_find_tensor(g, name) != NULL;
    }
    hp->n_kv_shared = (int32_t)n_shared;
    gm_hparams_set_kv_sources(hp);
    for (int il = 0; il < (int)n_layer; il++) {
        /* K = V full layers (12B, 26B, 31B): the converter writes no attn_v */
        char name[96];
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", il);
        hp->layer[il].v_from_k = hp->layer[il].kv_source == il && !gm_gguf_find_tensor(g, name);
    }
    return check_layers(hp, "gemma4 GGUF", err);
}

/* per_layer_config overrides of one layer (transformers 5.17 save_pretrained): only the attributes that
 * shape a layer's weights are understood; anything else is refused rather than ignored. */
static gemmac_status per_layer_overrides(const gm_hf_config *c, int il, gm_layer_hparams *l, gm_error *err) {
    char base[64], key[128];
    snprintf(base, sizeof base, "per_layer_config.%d", il);
    if (gm_hf_kind_of(c, base) == GM_HF_ABSENT) return GEMMAC_OK;
    if (gm_hf_kind_of(c, base) != GM_HF_OBJECT)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: %s is not an object", base);
    const char *names[32];
    size_t n;
    gemmac_status st = gm_hf_get_keys(c, base, names, 32, &n, err);
    if (st != GEMMAC_OK) return st;
    for (size_t i = 0; i < n; i++) {
        snprintf(key, sizeof key, "%s.%s", base, names[i]);
        int32_t *dst = strcmp(names[i], "head_dim") == 0              ? &l->head_dim
                       : strcmp(names[i], "num_key_value_heads") == 0 ? &l->n_head_kv
                       : strcmp(names[i], "num_attention_heads") == 0 ? &l->n_head
                       : strcmp(names[i], "intermediate_size") == 0   ? &l->n_ff
                                                                      : NULL;
        if (!dst)
            return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "config.json: per-layer override %s is not supported",
                           gm_show(key, strlen(key)).s);
        if ((st = gm_hf_req_int(c, key, 1, 1 << 20, dst, err))) return st;
    }
    return GEMMAC_OK;
}

/* RoPE per layer type from rope_parameters; absent, Gemma4TextConfig's defaults: sliding theta 1e4 (default),
 * full theta 1e6, proportional with a quarter of the pairs rotating. */
static gemmac_status gemma4_rope(const gm_hf_config *c, gm_hf_rope *full, gm_hf_rope *sliding, gm_error *err) {
    const gm_hf_kind kind = gm_hf_kind_of(c, "rope_parameters");
    if (kind == GM_HF_ABSENT || kind == GM_HF_NULL) {
        *full = (gm_hf_rope){.theta = 1e6f, .factor = 1.0f, .partial = (float)DEFAULT_FULL_PARTIAL, .proportional = true};
        *sliding = (gm_hf_rope){.theta = 1e4f, .factor = 1.0f, .partial = 1.0f, .proportional = false};
        return GEMMAC_OK;
    }
    gemmac_status st = gm_hf_rope_of(c, "full_attention", 1e6f, full, err);
    if (st == GEMMAC_OK) st = gm_hf_rope_of(c, "sliding_attention", 1e4f, sliding, err);
    return st;
}

static gemmac_status gemma4_hparams_hf(gm_hparams *hp, const gm_hf_config *c, gm_error *err) {
    memset(hp, 0, sizeof *hp);
    hp->arch = GM_ARCH_GEMMA4;
    const char *model_type = NULL;
    gemmac_status st = gm_hf_get_str(c, "model_type", &model_type, NULL);
    /* gemma4_unified_text has neither per-layer embeddings nor experts (those keys are not attributes) */
    const bool unified = st == GEMMAC_OK && strstr(model_type, "unified") != NULL;
    int32_t n_head, n_head_kv, head_dim, global_head_dim, global_kv, n_shared, ple, ple_vocab, n_expert, top_k, moe_ff;
    bool k_eq_v = false, double_wide = false, moe = false;
    float softcap;
    gm_hf_rope full, sliding;
    if ((st = gm_hf_req_int(c, "vocab_size", 1, 1 << 24, &hp->n_vocab, err)) ||
        (st = gm_hf_req_int(c, "hidden_size", 1, 65536, &hp->n_embd, err)) ||
        (st = gm_hf_req_int(c, "num_hidden_layers", 1, GM_MAX_LAYERS, &hp->n_layer, err)) ||
        (st = gm_hf_opt_int(c, "num_attention_heads", 1, 1024, 8, &n_head, err)) ||
        (st = gm_hf_opt_int(c, "num_key_value_heads", 1, 1024, 4, &n_head_kv, err)) ||
        (st = gm_hf_opt_int(c, "head_dim", 2, 1024, 256, &head_dim, err)) ||
        (st = gm_hf_opt_int(c, "global_head_dim", 2, 1024, 512, &global_head_dim, err)) ||
        (st = gm_hf_opt_int(c, "num_global_key_value_heads", 1, 1024, 0, &global_kv, err)) ||
        (st = gm_hf_opt_int(c, "max_position_embeddings", 1, 1 << 24, unified ? 262144 : 131072, &hp->n_ctx_train,
                            err)) ||
        (st = gm_hf_opt_int(c, "sliding_window", 0, 1 << 24, unified ? 1024 : 512, &hp->sliding_window, err)) ||
        (st = gm_hf_opt_float(c, "rms_norm_eps", 1e-6, &hp->norm_eps, err)) ||
        (st = gm_hf_opt_float(c, "final_logit_softcapping", 0.0, &softcap, err)) ||
        (st = gm_hf_opt_int(c, "num_kv_shared_layers", 0, hp->n_layer - 1, 0, &n_shared, err)) ||
        (st = gm_hf_opt_int(c, "hidden_size_per_layer_input", 0, 65536, unified ? 0 : 256, &ple, err)) ||
        (st = gm_hf_opt_int(c, "vocab_size_per_layer_input", 1, 1 << 24, 262144, &ple_vocab, err)) ||
        (st = gm_hf_opt_int(c, "num_experts", 0, 4096, 0, &n_expert, err)) ||
        (st = gm_hf_opt_int(c, "top_k_experts", 0, 4096, 0, &top_k, err)) ||
        (st = gm_hf_opt_int(c, "moe_intermediate_size", 0, 1 << 20, 0, &moe_ff, err)) ||
        (!moe_ff && (st = gm_hf_opt_int(c, "expert_intermediate_size", 0, 1 << 20, 0, &moe_ff, err))) ||
        (st = gm_hf_layer_types(c, hp, 6, err)) || (st = gemma4_rope(c, &full, &sliding, err)))
        return st;
    struct { const char *key; bool *dst; } flags[] = {
        {"attention_k_eq_v", &k_eq_v}, {"use_double_wide_mlp", &double_wide}, {"enable_moe_block", &moe}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        st = gm_hf_get_bool(c, flags[i].key, flags[i].dst, err);
        if (st != GEMMAC_OK && st != GEMMAC_ERR_NOT_FOUND) return st;
    }
    if (gm_hf_kind_of(c, "hidden_size_per_layer_input") == GM_HF_NULL) ple = 0; /* None: no per-layer inputs */
    if (unified && (ple || moe))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: gemma4_unified with per-layer inputs or experts");
    if (hp->n_layer < 1) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: no layers");
    hp->layer[hp->n_layer - 1].sliding = false; /* the config class forces the last layer to full attention */
    int64_t n_ff[GM_MAX_LAYERS];
    st = gm_hf_get_int_per_layer(c, "intermediate_size", (size_t)hp->n_layer, 1, 1 << 20, n_ff, err);
    if (st == GEMMAC_ERR_NOT_FOUND)
        for (int il = 0; il < hp->n_layer; il++) n_ff[il] = 9216;
    else if (st != GEMMAC_OK) return st;
    if (sliding.proportional && sliding.partial < 1.0f)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "config.json: partial proportional RoPE on sliding layers");
    /* Proportional RoPE scales its frequencies by 1/factor (transformers' _compute_proportional_rope_parameters);
     * gm_hf_rope_of keeps factor for linear scaling only. */
    float full_factor = full.factor;
    if (full.proportional && (st = gm_hf_opt_float(c, "rope_parameters.full_attention.factor", 1.0, &full_factor, err)))
        return st;
    if (!(full_factor >= 1 && full_factor <= 1024))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: full-attention rope factor %g", full_factor);

    hp->embed_scale = sqrtf((float)hp->n_embd);
    hp->attn_scale = 1.0f;
    hp->final_softcap = softcap > 0 ? softcap : 0.0f;
    hp->n_kv_shared = n_shared;
    hp->n_embd_per_layer = ple;
    hp->n_vocab_per_layer = ple ? ple_vocab : 0;
    if (moe) {
        hp->n_expert = n_expert;
        hp->n_expert_used = top_k;
        hp->n_ff_expert = moe_ff;
        if (n_expert < 1)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: enable_moe_block without num_experts");
    }
    const bool per_layer_config = gm_hf_kind_of(c, "per_layer_config") != GM_HF_ABSENT &&
                                  gm_hf_kind_of(c, "per_layer_config") != GM_HF_NULL;
    const int first_shared = hp->n_layer - n_shared;
    for (int il = 0; il < hp->n_layer; il++) {
        gm_layer_hparams *l = &hp->layer[il];
        l->n_head = n_head;
        l->n_head_kv = n_head_kv;
        l->head_dim = head_dim;
        l->n_ff = (int32_t)n_ff[il];
        if (per_layer_config) {
            if ((st = per_layer_overrides(c, il, l, err))) return st;
        } else if (!l->sliding) {
            /* released configs: global_head_dim, and num_global_key_value_heads where K = V gates it
             * (Gemma4TextConfig.__post_init__) */
            l->head_dim = global_head_dim;
            if (k_eq_v && global_kv) l->n_head_kv = global_kv;
        }
        /* E2B: the KV-shared layers get a twice as wide MLP (Gemma4TextMLP) */
        if (double_wide && first_shared > 0 && il >= first_shared) l->n_ff *= 2;
        const gm_hf_rope *r = l->sliding ? &sliding : &full;
        l->rope_base = r->theta;
        l->n_rot = l->head_dim;
        l->rope_freq_scale = l->sliding ? 1.0f / r->factor : 1.0f / full_factor;
        l->rope_freq_factors = r->proportional && r->partial < 1.0f;
        l->v_from_k = k_eq_v && !l->sliding;
        l->moe = moe;
    }
    return check_layers(hp, "config.json", err);
}

/* ---- weights ---- */

/* The head dim of the layers that read rope_freqs (0: none). */
static int32_t rope_freqs_dim(const gm_hparams *hp) {
    for (int il = 0; il < hp->n_layer; il++)
        if (hp->layer[il].rope_freq_factors) return hp->layer[il].n_rot;
    return 0;
}

static gemmac_status gemma4_manifest(const gm_hparams *hp, gm_weights *w, gm_spec_fn fn, void *ud, gm_error *err) {
    const int64_t H = hp->n_embd, V = hp->n_vocab, P = hp->n_embd_per_layer, LP = (int64_t)hp->n_layer * P;
    const int64_t E = hp->n_expert, FE = hp->n_ff_expert;
    gemmac_status st;
#define DECL(idx, dst, gguf, hf, role, opt, nd, ...) \
    if ((st = gm_declare(fn, ud, idx, &(gm_tensor_spec){dst, gguf, hf, nd, {__VA_ARGS__}, role, opt, 0, 0, false}, err))) \
        return st
    DECL(-1, &w->tok_embd, "token_embd.weight", "embed_tokens.weight", GM_ROLE_EMBED, false, 2, H, V);
    DECL(-1, &w->output_norm, "output_norm.weight", "norm.weight", GM_ROLE_NORM, false, 1, H);
    DECL(-1, &w->output, "output.weight", "lm_head.weight", GM_ROLE_MATRIX, true, 2, H, V);
    const int64_t freq_dim = rope_freqs_dim(hp);
    if (freq_dim) DECL(-1, &w->rope_freqs, "rope_freqs.weight", NULL, GM_ROLE_ROPE_FREQS, true, 1, freq_dim / 2);
    if (P) {
        DECL(-1, &w->ple_tok_embd, "per_layer_token_embd.weight", "embed_tokens_per_layer.weight", GM_ROLE_TABLE,
             false, 2, LP, hp->n_vocab_per_layer);
        DECL(-1, &w->ple_model_proj, "per_layer_model_proj.weight", "per_layer_model_projection.weight",
             GM_ROLE_MATRIX, false, 2, H, LP);
        DECL(-1, &w->ple_proj_norm, "per_layer_proj_norm.weight", "per_layer_projection_norm.weight", GM_ROLE_NORM,
             false, 1, P);
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        gm_layer_weights *lw = &w->layer[il];
        if ((st = gm_declare_decoder_layer(fn, ud, hp, il, lw, true, err))) return st;
        /* a buffer in transformers (always saved); optional in llama.cpp: absent = 1 */
        DECL(il, &lw->layer_scalar, "blk.%d.layer_output_scale.weight", "layers.%d.layer_scalar", GM_ROLE_VECTOR, true,
             1, 1);
        if (P) {
            DECL(il, &lw->ple_gate, "blk.%d.inp_gate.weight", "layers.%d.per_layer_input_gate.weight", GM_ROLE_MATRIX,
                 false, 2, H, P);
            DECL(il, &lw->ple_proj, "blk.%d.proj.weight", "layers.%d.per_layer_projection.weight", GM_ROLE_MATRIX,
                 false, 2, P, H);
            DECL(il, &lw->ple_post_norm, "blk.%d.post_norm.weight", "layers.%d.post_per_layer_input_norm.weight",
                 GM_ROLE_NORM, false, 1, H);
        }
        if (l->moe) {
            DECL(il, &lw->moe_router, "blk.%d.ffn_gate_inp.weight", "layers.%d.router.proj.weight", GM_ROLE_MATRIX,
                 false, 2, H, E);
            DECL(il, &lw->moe_router_scale, "blk.%d.ffn_gate_inp.scale", "layers.%d.router.scale", GM_ROLE_VECTOR,
                 false, 1, H);
            DECL(il, &lw->moe_gate_up, "blk.%d.ffn_gate_up_exps.weight", "layers.%d.experts.gate_up_proj",
                 GM_ROLE_MATRIX, false, 3, H, 2 * FE, E);
            DECL(il, &lw->moe_down, "blk.%d.ffn_down_exps.weight", "layers.%d.experts.down_proj", GM_ROLE_MATRIX,
                 false, 3, FE, H, E);
            DECL(il, &lw->moe_expert_scale, "blk.%d.ffn_down_exps.scale", "layers.%d.router.per_expert_scale",
                 GM_ROLE_VECTOR, false, 1, E);
            DECL(il, &lw->moe_pre_norm, "blk.%d.pre_ffw_norm_2.weight", "layers.%d.pre_feedforward_layernorm_2.weight",
                 GM_ROLE_NORM, false, 1, H);
            DECL(il, &lw->moe_post_norm, "blk.%d.post_ffw_norm_2.weight",
                 "layers.%d.post_feedforward_layernorm_2.weight", GM_ROLE_NORM, false, 1, H);
            DECL(il, &lw->ffn_post_norm_1, "blk.%d.post_ffw_norm_1.weight",
                 "layers.%d.post_feedforward_layernorm_1.weight", GM_ROLE_NORM, false, 1, H);
        }
    }
#undef DECL
    return GEMMAC_OK;
}

/* The share of pairs that rotate on proportional-RoPE layers, as the checkpoint's config says; the
 * transformers default for a GGUF that lacks rope_freqs. */
static gemmac_status full_partial(const gemmac_model *m, double *out, gm_error *err) {
    *out = DEFAULT_FULL_PARTIAL;
    if (!m->hf) return GEMMAC_OK;
    gm_hf_rope full, sliding;
    gemmac_status st = gemma4_rope(gm_hf_config_text(m->hf), &full, &sliding, err);
    if (st == GEMMAC_OK) *out = full.partial;
    return st;
}

static gemmac_status gemma4_finish(gemmac_model *m, gm_error *err) {
    if (!m->w.output.data) m->w.output = m->w.tok_embd; /* tied */
    const int32_t D = rope_freqs_dim(&m->hp);
    if (D && !m->w.rope_freqs.data) {
        /* transformers' proportional RoPE: inv_freq_i = base^(-2i/D) for i < int(partial·D // 2), 0 after;
         * llama.cpp: n_rot = D with factor 1 on those pairs and 1e30 on the rest */
        double partial;
        gemmac_status st = full_partial(m, &partial, err);
        if (st != GEMMAC_OK) return st;
        const int32_t half = D / 2, rotated = (int32_t)floor(partial * D / 2);
        float *f = gm_model_alloc(m, sizeof(float) * (size_t)half);
        if (!f) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory for rope_freqs");
        for (int32_t i = 0; i < half; i++) f[i] = i < rotated ? 1.0f : ROPE_FACTOR_UNROTATED;
        gm_tensor *t = &m->w.rope_freqs;
        memset(t, 0, sizeof *t);
        t->name = "rope_freqs.weight";
        t->type = GM_TYPE_F32;
        t->ne[0] = half, t->ne[1] = t->ne[2] = t->ne[3] = 1;
        t->row_bytes = sizeof(float) * (uint64_t)half;
        t->data = f;
    }
    for (int il = 0; il < m->hp.n_layer; il++)
        if (m->w.layer[il].layer_scalar.data && !isfinite(*(const float *)m->w.layer[il].layer_scalar.data))
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "layer %d: layer_scalar is not finite", il);
    return GEMMAC_OK;
}

/* ---- GGUF metadata ---- */

static bool layers_uniform(const gm_hparams *hp, size_t offset) {
    for (int il = 1; il < hp->n_layer; il++)
        if (*(const int32_t *)((const char *)&hp->layer[il] + offset) !=
            *(const int32_t *)((const char *)&hp->layer[0] + offset))
            return false;
    return true;
}

/* A per-layer int field as llama.cpp's converter writes it: one u32 when every layer agrees, else an
 * i32 array (gguf-py's type for a list of ints). */
static void write_per_layer(gm_gguf_writer *w, const gm_hparams *hp, const char *key, size_t offset) {
    if (layers_uniform(hp, offset)) {
        gm_gguf_writer_u32(w, key, (uint32_t)*(const int32_t *)((const char *)&hp->layer[0] + offset));
        return;
    }
    int32_t v[GM_MAX_LAYERS];
    for (int il = 0; il < hp->n_layer; il++) v[il] = *(const int32_t *)((const char *)&hp->layer[il] + offset);
    gm_gguf_writer_arr_i32(w, key, v, (size_t)hp->n_layer);
}

static gemmac_status gemma4_write_hparams(const gm_hparams *hp, gm_gguf_writer *w, gm_error *err) {
    /* the first full and the first sliding layer give the per-type values */
    const gm_layer_hparams *full = NULL, *swa = NULL;
    for (int il = 0; il < hp->n_layer; il++) {
        if (hp->layer[il].sliding && !swa) swa = &hp->layer[il];
        if (!hp->layer[il].sliding && !full) full = &hp->layer[il];
    }
    if (!full) full = swa;
    if (!swa) swa = full;
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il], *ref = l->sliding ? swa : full;
        if (l->head_dim != ref->head_dim || l->n_rot != ref->n_rot || l->rope_base != ref->rope_base ||
            l->rope_freq_scale != 1.0f)
            return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                           "gemma4 GGUF metadata holds one head dim, RoPE size and base per attention type (layer %d "
                           "differs)", il);
    }
    bool sliding[GM_MAX_LAYERS];
    for (int il = 0; il < hp->n_layer; il++) sliding[il] = hp->layer[il].sliding;
    gm_gguf_writer_u32(w, "gemma4.context_length", (uint32_t)hp->n_ctx_train);
    gm_gguf_writer_u32(w, "gemma4.embedding_length", (uint32_t)hp->n_embd);
    gm_gguf_writer_u32(w, "gemma4.block_count", (uint32_t)hp->n_layer);
    write_per_layer(w, hp, "gemma4.feed_forward_length", offsetof(gm_layer_hparams, n_ff));
    write_per_layer(w, hp, "gemma4.attention.head_count", offsetof(gm_layer_hparams, n_head));
    write_per_layer(w, hp, "gemma4.attention.head_count_kv", offsetof(gm_layer_hparams, n_head_kv));
    gm_gguf_writer_f32(w, "gemma4.rope.freq_base", full->rope_base);
    gm_gguf_writer_f32(w, "gemma4.rope.freq_base_swa", swa->rope_base);
    gm_gguf_writer_f32(w, "gemma4.attention.layer_norm_rms_epsilon", hp->norm_eps);
    if (hp->n_expert) {
        gm_gguf_writer_u32(w, "gemma4.expert_count", (uint32_t)hp->n_expert);
        gm_gguf_writer_u32(w, "gemma4.expert_used_count", (uint32_t)hp->n_expert_used);
        gm_gguf_writer_u32(w, "gemma4.expert_feed_forward_length", (uint32_t)hp->n_ff_expert);
    }
    gm_gguf_writer_u32(w, "gemma4.attention.key_length", (uint32_t)full->head_dim);
    gm_gguf_writer_u32(w, "gemma4.attention.value_length", (uint32_t)full->head_dim);
    if (hp->final_softcap > 0) gm_gguf_writer_f32(w, "gemma4.final_logit_softcapping", hp->final_softcap);
    gm_gguf_writer_u32(w, "gemma4.attention.sliding_window", (uint32_t)hp->sliding_window);
    gm_gguf_writer_u32(w, "gemma4.attention.shared_kv_layers", (uint32_t)hp->n_kv_shared);
    gm_gguf_writer_u32(w, "gemma4.embedding_length_per_layer_input", (uint32_t)hp->n_embd_per_layer);
    gm_gguf_writer_arr_bool(w, "gemma4.attention.sliding_window_pattern", sliding, (size_t)hp->n_layer);
    gm_gguf_writer_u32(w, "gemma4.attention.key_length_swa", (uint32_t)swa->head_dim);
    gm_gguf_writer_u32(w, "gemma4.attention.value_length_swa", (uint32_t)swa->head_dim);
    gm_gguf_writer_u32(w, "gemma4.rope.dimension_count", (uint32_t)full->n_rot);
    gm_gguf_writer_u32(w, "gemma4.rope.dimension_count_swa", (uint32_t)swa->n_rot);
    return GEMMAC_OK;
}

/* ---- forward ---- */

static const float *vec(const gm_tensor *t) { return t->data; }

/* The per-layer inputs of every token (gemma-architecture.md §2.2, PLE), left layer-major in s->ple_t
 * ([n_layer][n][P], so layer l's rows are contiguous); s->ple is free afterwards. */
static gemmac_status per_layer_inputs(const gm_forward_args *a, gm_error *err) {
    const gm_hparams *hp = &a->model->hp;
    const gm_weights *w = &a->model->w;
    gm_backend *b = a->backend;
    const gm_backend_ops *op = b->ops;
    gm_scratch *s = a->scratch;
    const int32_t n = a->n_tokens, L = hp->n_layer, P = hp->n_embd_per_layer;
    /* token part: E_ple[id] · sqrt(P) -> ple_t [n][L·P]; ids past the table (n_vocab_per_layer rows) read
     * row 0, which get_rows does itself */
    op->get_rows(b, &w->ple_tok_embd, a->token, n, sqrtf((float)P), s->ple_t);
    /* context part: rmsnorm((W · e) · H^-1/2) per P-vector -> ple [n][L·P] */
    op->matmul(b, &w->ple_model_proj, s->x, n, s->ple);
    op->scale(b, s->ple, (int64_t)n * L * P, 1.0f / sqrtf((float)hp->n_embd));
    op->rmsnorm(b, s->ple, s->ple, (int64_t)n * L, P, vec(&w->ple_proj_norm), hp->norm_eps);
    op->add_scale(b, s->ple, s->ple_t, (int64_t)n * L * P, 1.0f / sqrtf(2.0f));
    /* token-major [n][L][P] -> layer-major [L][n][P] */
    op->transpose(b, s->ple, s->ple_t, n, L, P);
    return GEMMAC_OK;
}

static gemmac_status gemma4_forward(const gm_forward_args *a, gm_error *err) {
    const gm_hparams *hp = &a->model->hp;
    const gm_weights *w = &a->model->w;
    gm_backend *b = a->backend;
    const gm_backend_ops *op = b->ops;
    gm_scratch *s = a->scratch;
    const int32_t n = a->n_tokens, H = hp->n_embd, P = hp->n_embd_per_layer;
    const float eps = hp->norm_eps;

    op->get_rows(b, &w->tok_embd, a->token, n, hp->embed_scale, s->x);
    if (P) {
        gemmac_status st = per_layer_inputs(a, err);
        if (st != GEMMAC_OK) return st;
    }
    /* each residual add, with the layer's scalar where it ends a layer, is left pending for the next project
     * (s->xn, its input, is not written in between); the last one runs before the output head's gather reads x */
    gm_pending_residual res = {.b = b, .x = s->x, .n = n, .d = H, .eps = eps};
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        const gm_layer_weights *lw = &w->layer[il];
        const int32_t D = l->head_dim;
        const bool owns_kv = l->kv_source == il;
        const float *freq_factors = l->rope_freq_factors ? vec(&w->rope_freqs) : NULL;
        const float scalar = lw->layer_scalar.data ? *vec(&lw->layer_scalar) : 1.0f;

        /* attention: x += post_norm(Wo · attn(rope(qnorm(Wq·a)), rope(knorm(Wk·a)), vnorm(Wv·a or Wk·a)));
         * layers reading another layer's cache project only q, K = V layers q and k (V: the raw K projection) */
        const gm_proj_args qkv = {
            .x = s->x, .n = n, .norm = vec(&lw->attn_norm), .eps = eps, .act = GM_PROJ_PLAIN,
            .n_w = !owns_kv ? 1 : l->v_from_k ? 2 : 3, .w = {&lw->wq, &lw->wk, &lw->wv}, .y = {s->q, s->k, s->v},
        };
        gm_residual_project(&res, &qkv);
        const gm_attn_prep prep = {
            .q_norm = vec(&lw->q_norm), .k_norm = vec(&lw->k_norm), .v_norm = true, .v_from_k = l->v_from_k,
            .eps = eps, .n_rot = l->n_rot, .base = l->rope_base, .freq_scale = l->rope_freq_scale,
            .freq_factors = freq_factors, .q_scale = hp->attn_scale,
        };
        gm_attn_args at = {
            .kv = a->kv, .kv_layer = l->kv_source, .write_kv = owns_kv, .n_tokens = n, .pos = a->pos,
            .seq = a->seq, .n_head = l->n_head, .n_head_kv = l->n_head_kv, .head_dim = D,
            .window = l->sliding ? hp->sliding_window : 0, .prep = &prep, .q = s->q, .k = s->k, .v = s->v,
            .out = s->att,
        };
        op->attention(b, &at);
        op->matmul(b, &lw->wo, s->att, n, s->xn);
        gm_residual_defer(&res, s->xn, vec(&lw->post_attn_norm), 1.0f);

        /* feed-forward: m = MLP(pre_norm(x)); MoE layers: m = post_norm_1(m) + post_norm_2(experts(x));
         * x += post_norm(m) */
        const gm_proj_args ffn = {
            .x = s->x, .n = n, .norm = vec(&lw->ffn_norm), .eps = eps, .act = GM_PROJ_GEGLU, .n_w = 2,
            .w = {&lw->ffn_gate, &lw->ffn_up}, .y = {s->g},
        };
        gm_residual_project(&res, &ffn);
        op->matmul(b, &lw->ffn_down, s->g, n, s->xn);
        if (l->moe) { /* reads x: nothing is pending, the project above applied it */
            op->rmsnorm(b, s->xn, s->xn, n, H, vec(&lw->ffn_post_norm_1), eps);
            /* router: scores = W_r · (rmsnorm(x) ⊙ scale · H^-1/2) */
            op->rmsnorm(b, s->x, s->moe_out, n, H, vec(&lw->moe_router_scale), eps);
            op->scale(b, s->moe_out, (int64_t)n * H, 1.0f / sqrtf((float)H));
            op->matmul(b, &lw->moe_router, s->moe_out, n, s->moe_logits);
            op->rmsnorm(b, s->x, s->moe_in, n, H, vec(&lw->moe_pre_norm), eps);
            op->moe(b, s->moe_logits, s->moe_in, n, hp->n_expert_used, vec(&lw->moe_expert_scale), &lw->moe_gate_up,
                    &lw->moe_down, s->moe_out);
            op->rmsnorm(b, s->moe_out, s->moe_out, n, H, vec(&lw->moe_post_norm), eps);
            op->add_scale(b, s->xn, s->moe_out, (int64_t)n * H, 1.0f);
        }
        /* the layer's scalar multiplies the whole residual stream last, after the per-layer input if any */
        gm_residual_defer(&res, s->xn, vec(&lw->post_ffw_norm), P ? 1.0f : scalar);

        /* per-layer input: x += post_norm(W_proj · (gelu(W_gate · x) ⊙ ple[l])) */
        if (P) {
            const gm_proj_args gate = {
                .x = s->x, .n = n, .act = GM_PROJ_GELU_MUL, .mul = s->ple_t + (int64_t)il * n * P, .n_w = 1,
                .w = {&lw->ple_gate}, .y = {s->ple},
            };
            gm_residual_project(&res, &gate);
            op->matmul(b, &lw->ple_proj, s->ple, n, s->xn);
            gm_residual_defer(&res, s->xn, vec(&lw->ple_post_norm), scalar);
        }
    }
    gm_residual_flush(&res);
    /* logits of the wanted rows, s->logits_rows at a time */
    for (int32_t i0 = 0; i0 < a->n_out; i0 += s->logits_rows) {
        const int32_t nc = a->n_out - i0 < s->logits_rows ? a->n_out - i0 : s->logits_rows;
        op->gather(b, s->x, H, a->out_rows + i0, nc, s->xo);
        gm_forward_logits(a, i0, nc, &w->output, vec(&w->output_norm), eps, hp->final_softcap);
    }
    return GEMMAC_OK;
}

static const char *const gemma4_hf_types[] = {"gemma4_text", "gemma4", "gemma4_unified_text", "gemma4_unified", NULL};

const gm_arch_impl gm_arch_gemma4 = {
    .name = "gemma4",
    .hf_model_types = gemma4_hf_types,
    .hf_norm_shift = 0.0f, /* Gemma 4 norms multiply by the raw weight in both formats */
    .chat_format = GM_CHAT_GEMMA4,
    .hparams_gguf = gemma4_hparams_gguf,
    .hparams_hf = gemma4_hparams_hf,
    .manifest = gemma4_manifest,
    .finish = gemma4_finish,
    .write_hparams = gemma4_write_hparams,
    .forward = gemma4_forward,
};
