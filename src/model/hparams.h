/* hparams.h: the hyper-parameters of every Gemma generation (3, 3n, 4) in one struct, with per-layer values
 * where a generation varies them (attention type, head counts and dims, K = V, KV sharing, RoPE, MLP width,
 * activation sparsity, mixture of experts). The forward passes read only this struct; nothing branches on a
 * model's size. Reading them from a GGUF or a config.json lives in the arch files (gemma3.c, gemma3n.c,
 * gemma4.c), each of which also writes them back as GGUF metadata (synth, convert). */
#ifndef GM_HPARAMS_H
#define GM_HPARAMS_H

#include <stdbool.h>
#include <stdint.h>

#define GM_MAX_LAYERS 512

typedef enum gm_arch { GM_ARCH_GEMMA3 = 0, GM_ARCH_GEMMA3N, GM_ARCH_GEMMA4 } gm_arch;

typedef struct gm_layer_hparams {
    bool sliding;              /* sliding-window attention (else full) */
    int32_t n_head;            /* query heads */
    int32_t n_head_kv;         /* key/value heads */
    int32_t head_dim;          /* D (keys, values and queries alike) */
    int32_t n_ff;              /* dense MLP intermediate width (0: no dense MLP) */
    int32_t n_rot;             /* leading dims of a head that RoPE rotates (pairs i, i + n_rot/2) */
    float rope_base;           /* theta */
    float rope_freq_scale;     /* positions are multiplied by this (1/factor for linear scaling) */
    bool rope_freq_factors;    /* divide each pair's frequency by the model's rope_freqs vector (Gemma 4 full
                                  layers: proportional RoPE, factor 1e30 = pair not rotated) */
    bool v_from_k;             /* no v_proj: V is the raw K projection (Gemma 4 attention_k_eq_v full layers) */
    int32_t kv_source;         /* layer whose KV cache this layer reads (itself unless KV sharing) */
    float act_sparsity_std;    /* Gemma 3n: gate = relu(gate - (mean + this·std)); 0: no sparsity */
    bool moe;                  /* routed experts in parallel with the dense MLP (Gemma 4 26B-A4B) */
} gm_layer_hparams;

typedef struct gm_hparams {
    gm_arch arch;
    int32_t n_vocab;           /* rows of the embedding (may exceed the tokenizer's size) */
    int32_t n_embd;            /* H */
    int32_t n_layer;
    int32_t n_ctx_train;
    int32_t sliding_window;    /* positions visible to a sliding layer, the query's own included */
    float norm_eps;
    float embed_scale;         /* embeddings are multiplied by this (sqrt(H)) */
    float attn_scale;          /* q is multiplied by this before q·k */
    float final_softcap;       /* 0: none */
    int32_t n_kv_shared;       /* the last n_kv_shared layers read the cache of an earlier layer */
    /* per-layer embeddings (Gemma 3n, Gemma 4 E2B/E4B); n_embd_per_layer 0: none */
    int32_t n_embd_per_layer;  /* P */
    int32_t n_vocab_per_layer; /* rows of the per-layer table; ids at or past it use row 0 */
    /* mixture of experts (layers with moe) */
    int32_t n_expert, n_expert_used, n_ff_expert;
    /* Gemma 3n */
    int32_t altup_num_inputs;  /* residual streams (0: no AltUp) */
    int32_t altup_active_idx;
    float altup_coef_clip;     /* 0: no clipping */
    int32_t laurel_rank;       /* 0: no LAuReL */
    gm_layer_hparams layer[GM_MAX_LAYERS];
} gm_hparams;

/* Sets kv_source for KV sharing: layers at or past n_layer - n_kv_shared read the last earlier layer of
 * their attention type (gemma-architecture.md §2.4); the others their own. */
static inline void gm_hparams_set_kv_sources(gm_hparams *hp) {
    const int first_shared = hp->n_layer - hp->n_kv_shared;
    for (int il = 0; il < hp->n_layer; il++) {
        hp->layer[il].kv_source = il;
        if (il < first_shared) continue;
        for (int j = first_shared - 1; j >= 0; j--)
            if (hp->layer[j].sliding == hp->layer[il].sliding) {
                hp->layer[il].kv_source = j;
                break;
            }
    }
}

#endif
