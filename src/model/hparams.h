/* hparams.h: the hyper-parameters of every Gemma generation in one struct, with per-layer values where a
 * generation varies them (attention type, head counts, window, RoPE, MLP width). The forward pass reads
 * only this struct; nothing branches on a model's size. Reading them from a file lives in the arch files. */
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
    int32_t head_dim;          /* D */
    int32_t n_ff;              /* MLP intermediate width */
    int32_t n_rot;             /* leading dims of a head that RoPE rotates (pairs i, i + n_rot/2) */
    float rope_base;           /* theta */
    float rope_freq_scale;     /* positions are multiplied by this (1/factor for linear scaling) */
    int32_t kv_source;         /* layer whose KV cache this layer reads (itself unless KV sharing) */
} gm_layer_hparams;

typedef struct gm_hparams {
    gm_arch arch;
    int32_t n_vocab;
    int32_t n_embd;            /* H */
    int32_t n_layer;
    int32_t n_ctx_train;
    int32_t sliding_window;    /* positions visible to a sliding layer, the query's own included */
    float norm_eps;
    float embed_scale;         /* embeddings are multiplied by this (sqrt(H)) */
    float attn_scale;          /* q is multiplied by this before q·k */
    float final_softcap;       /* 0: none */
    gm_layer_hparams layer[GM_MAX_LAYERS];
} gm_hparams;

#endif
