/* model.h: the loaded model behind the public gemmac_model handle: the mapped file, hyper-parameters,
 * weight views bound by name, tokenizer, and the architecture's entry points. Loading and describing live
 * in model.c; each architecture (gemma3.c, ...) reads its hyper-parameters, binds its weights and owns its
 * forward pass. */
#ifndef GM_MODEL_H
#define GM_MODEL_H

#include "gemmac.h"
#include "io/gguf.h"
#include "model/backend.h"
#include "model/hparams.h"
#include "model/tensor.h"
#include "tok/tokenizer.h"

typedef struct gm_layer_weights {
    /* every generation */
    gm_tensor attn_norm;       /* [H] */
    gm_tensor wq;              /* [H, n_head·D] (GGML order: ne0 = H) */
    gm_tensor wk, wv;          /* [H, n_head_kv·D]; absent on layers sharing another's cache, wv absent with v_from_k */
    gm_tensor wo;              /* [n_head·D, H] */
    gm_tensor q_norm, k_norm;  /* [D] */
    gm_tensor post_attn_norm;  /* [H] */
    gm_tensor ffn_norm;        /* [H] pre-MLP norm */
    gm_tensor ffn_gate, ffn_up;/* [H, n_ff] */
    gm_tensor ffn_down;        /* [n_ff, H] */
    gm_tensor post_ffw_norm;   /* [H] */
    /* Gemma 4 */
    gm_tensor layer_scalar;    /* [1] f32: the whole residual is multiplied by it at the layer's end */
    /* per-layer embeddings (Gemma 3n, Gemma 4 E2B/E4B) */
    gm_tensor ple_gate;        /* [H, P] */
    gm_tensor ple_proj;        /* [P, H] */
    gm_tensor ple_post_norm;   /* [H] */
    /* mixture of experts (Gemma 4 26B-A4B) */
    gm_tensor moe_router;      /* [H, n_expert] */
    gm_tensor moe_router_scale;/* [H] f32 */
    gm_tensor moe_gate_up;     /* [H, 2·n_ff_expert, n_expert]: rows 0..F-1 gate, F..2F-1 up, per expert */
    gm_tensor moe_down;        /* [n_ff_expert, H, n_expert] */
    gm_tensor moe_expert_scale;/* [n_expert] f32 */
    gm_tensor moe_pre_norm;    /* [H] pre_feedforward_layernorm_2 */
    gm_tensor moe_post_norm;   /* [H] post_feedforward_layernorm_2 */
    gm_tensor ffn_post_norm_1; /* [H] post_feedforward_layernorm_1 (dense path of a MoE layer) */
    /* Gemma 3n */
    gm_tensor altup_correct_coef;  /* [n_in, n_in] f32 */
    gm_tensor altup_correct_scale; /* [H] f32 */
    gm_tensor altup_predict_coef;  /* [n_in, n_in·n_in] f32 */
    gm_tensor altup_router;        /* [H, n_in] */
    gm_tensor altup_router_norm;   /* [H] */
    gm_tensor laurel_l;            /* [H, rank] */
    gm_tensor laurel_r;            /* [rank, H] */
    gm_tensor laurel_post_norm;    /* [H] */
} gm_layer_weights;

#define GM_ALTUP_MAX 8

typedef struct gm_weights {
    gm_tensor tok_embd;        /* [H, n_vocab] */
    gm_tensor output;          /* [H, n_vocab]; the same as tok_embd when tied */
    gm_tensor output_norm;     /* [H] */
    gm_tensor rope_freqs;      /* [n_rot/2] f32 of the layers with rope_freq_factors */
    /* per-layer embeddings */
    gm_tensor ple_tok_embd;    /* [n_layer·P, n_vocab_per_layer] */
    gm_tensor ple_model_proj;  /* [H, n_layer·P] */
    gm_tensor ple_proj_norm;   /* [P] */
    /* Gemma 3n AltUp: altup_num_inputs - 1 matrices each */
    gm_tensor altup_proj[GM_ALTUP_MAX];   /* [H, H] */
    gm_tensor altup_unembd[GM_ALTUP_MAX]; /* [H, H] */
    gm_layer_weights *layer;   /* [n_layer] */
} gm_weights;

/* One weight of a model as its arch declares it: the single list from which loading (GGUF or Hugging Face),
 * `gemmac synth` and `gemmac convert` all work. */
typedef enum gm_tensor_role {
    GM_ROLE_MATRIX,            /* used by matmul; kept in the file's type */
    GM_ROLE_EMBED,             /* a table whose rows are looked up (and, tied, the LM head); file's type */
    GM_ROLE_TABLE,             /* a table that is only ever looked up row by row (the per-layer embeddings):
                                  file's type, left mapped with random-access advice so only rows read become
                                  resident */
    GM_ROLE_NORM,              /* an RMSNorm weight: f32 on load; an arch's hf_norm_shift is added to HF values */
    GM_ROLE_VECTOR,            /* any other small tensor read as f32 (scalars, scales, coefficients) */
    GM_ROLE_ROPE_FREQS,        /* RoPE frequency factors: in GGUF files only; derived from hparams otherwise */
} gm_tensor_role;

typedef struct gm_tensor_spec {
    gm_tensor *dst;
    const char *gguf;          /* GGUF name, "blk.3.attn_q.weight" */
    const char *hf;            /* Hugging Face name after the model prefix, "layers.3.self_attn.q_proj.weight";
                                  NULL when checkpoints do not hold it */
    int n_dims;
    int64_t ne[4];             /* GGML order */
    gm_tensor_role role;
    bool optional;             /* absent: dst->data stays NULL */
    int32_t slice, n_slices;   /* n_slices > 1: slice `slice` of a GGUF tensor of n_dims + 1 dims whose last
                                  dim is n_slices (HF stores the slices as separate tensors) */
    bool released;             /* optional, yet released files have it (and llama.cpp may require it): synth
                                  writes it */
} gm_tensor_spec;

typedef gemmac_status (*gm_spec_fn)(void *ud, const gm_tensor_spec *spec, gm_error *err);

/* Activation buffers (backend memory) for batches of up to n_batch tokens, sized from the hyper-parameters. */
typedef struct gm_scratch {
    int32_t n_batch;
    float *x;                  /* [n_batch][H] residual stream */
    float *xn;                 /* [n_batch][H] normed input of a block */
    float *q, *att;            /* [n_batch][max n_head·D] */
    float *k, *v;              /* [n_batch][max n_head_kv·D] */
    float *g, *u;              /* [n_batch][max n_ff] */
    int32_t logits_rows;       /* rows of logits per LM-head product: gm_logits_rows */
    float *xo;                 /* [logits_rows][H] rows whose logits are wanted */
    float *logits;             /* [logits_rows][n_vocab] */
    /* Gemma 3n (NULL for models without AltUp / per-layer embeddings) */
    float *streams, *pred;     /* [altup_num_inputs][n_batch][H] AltUp streams and their predictions */
    float *aux;                /* [n_batch][H] LAuReL output, unembedded streams */
    float *small;              /* [n_batch][max(laurel_rank, K + K·K)]: LAuReL hidden; router modalities [n][K]
                                  followed by AltUp coefficients [n][K·K] */
    float *ple, *ple_t;        /* [n_batch][n_layer·P] per-layer inputs: token-major, then layer-major */
    /* Gemma 4 mixture of experts (NULL without MoE layers) */
    float *moe_logits;         /* [n_batch][n_expert] router scores */
    float *moe_in, *moe_out;   /* [n_batch][H] the experts' normed input, their weighted sum */
} gm_scratch;

/* Logits are computed this many rows at a time by default (a full batch of 262144-wide rows would not fit);
 * a backend may ask for more (gm_backend_ops.logits_rows), never more than a batch. */
#define GM_LOGITS_CHUNK 16
int32_t gm_logits_rows(const gm_backend *b, int32_t n_batch);

gemmac_status gm_scratch_new(const gemmac_model *m, gm_backend *b, int32_t n_batch, gm_scratch **out, gm_error *err);
void gm_scratch_free(gm_scratch *s, gm_backend *b);
/* Bytes gm_scratch_new allocates for n_batch tokens (the memory plan). */
uint64_t gm_scratch_bytes(const gemmac_model *m, int32_t n_batch, int32_t logits_rows);

/* One forward call over a batch already validated and placed in the cache by the context. */
typedef struct gm_forward_args {
    const gemmac_model *model;
    gm_backend *backend;
    gm_kv_cache *kv;
    int32_t n_tokens;
    const int32_t *token, *pos, *seq;   /* [n_tokens] host */
    int32_t n_out;                      /* tokens whose logits are wanted */
    const int32_t *out_rows;            /* [n_out] their indices in the batch */
    float *logits;                      /* [n_out][n_vocab] host, written (top_k == 0) */
    int32_t top_k;                      /* > 0: instead, each wanted row's top_k best (backend.h top_logits) */
    int32_t *top_ids;                   /* [n_out][top_k] host, written when top_k > 0 */
    float *top_vals;                    /* [n_out][top_k] host, written when top_k > 0 */
    gm_scratch *scratch;         /* backend buffers sized for the context's n_batch */
} gm_forward_args;

/* The end of a forward for wanted rows i0 .. i0 + nc (nc <= scratch->logits_rows), whose final hidden states
 * the forward has put in scratch->xo: the output norm (weight norm, eps), the LM head `output`, the final softcap
 * (none when <= 0), and the result to the host as a asks (whole rows, or each row's top_k best). */
void gm_forward_logits(const gm_forward_args *a, int32_t i0, int32_t nc, const gm_tensor *output, const float *norm,
                       float eps, float softcap);

/* A residual update of a forward's stream x, x += rmsnorm(add) · norm then x *= scale (the rmsnorm_add and scale
 * ops; scale skipped when 1), left pending instead of run at once so that the next project reading x applies it
 * (gm_proj_args.res_*): a device backend then does the add, that project's norm and the activation quantization
 * in one pass. While an update is pending nothing may write x or add, and only gm_residual_project may read x:
 * any other reader of x calls gm_residual_flush first. */
typedef struct gm_pending_residual {
    gm_backend *b;
    float *x;                  /* [n][d] the residual stream */
    int32_t n, d;
    float eps;
    const float *add;          /* [n][d] backend memory; NULL: nothing pending */
    const float *norm;         /* [d] f32 host weight, or NULL */
    float scale;
} gm_pending_residual;

/* Leaves x += rmsnorm(add) · norm, x *= scale pending (an update already pending is run first). */
void gm_residual_defer(gm_pending_residual *r, const float *add, const float *norm, float scale);
/* The project p with the pending update folded in when p reads x (one reading another buffer, or normalising
 * with another eps, gets it run first); p's own res_* are ignored and its y must not be r->add. Nothing is
 * pending afterwards. */
void gm_residual_project(gm_pending_residual *r, const gm_proj_args *p);
/* Runs the pending update, if any, with the plain ops. */
void gm_residual_flush(gm_pending_residual *r);

struct gm_gguf_writer;
struct gm_hf_config;

typedef struct gm_arch_impl {
    const char *name;                   /* general.architecture */
    const char *const *hf_model_types;  /* NULL-terminated config.json (text) model_type values it loads */
    float hf_norm_shift;                /* added to norm weights from HF checkpoints (Gemma 3 stores w - 1) */
    bool gguf_pads_tables;              /* GGUF files pad row tables (GM_ROLE_TABLE) with zero rows to n_vocab rows
                                           (llama.cpp's Gemma 3n converter): synth and convert write them so */
    gm_chat_format chat_format;
    /* Hyper-parameters from GGUF metadata (n_vocab from token_embd's rows) or from a config.json's text part. */
    gemmac_status (*hparams_gguf)(gm_hparams *hp, const gm_gguf *g, gm_error *err);
    gemmac_status (*hparams_hf)(gm_hparams *hp, const struct gm_hf_config *text, gm_error *err);
    /* Calls fn for every weight the model with these hparams has (w->layer is allocated). */
    gemmac_status (*manifest)(const gm_hparams *hp, gm_weights *w, gm_spec_fn fn, void *ud, gm_error *err);
    /* After binding: fills what the files may lack (rope_freqs from hparams, tied output, ...); may be NULL. */
    gemmac_status (*finish)(gemmac_model *m, gm_error *err);
    /* Writes the hyper-parameters as the GGUF metadata llama.cpp's converter writes (synth, convert). */
    gemmac_status (*write_hparams)(const gm_hparams *hp, struct gm_gguf_writer *w, gm_error *err);
    gemmac_status (*forward)(const gm_forward_args *a, gm_error *err);
} gm_arch_impl;

extern const gm_arch_impl gm_arch_gemma3, gm_arch_gemma3n, gm_arch_gemma4;
/* The arch named by general.architecture, or the one loading this config.json model_type; NULL if none. */
const gm_arch_impl *gm_arch_by_name(const char *name, size_t len);
const gm_arch_impl *gm_arch_by_hf_type(const char *model_type);

struct gm_st_set;

struct gemmac_model {
    const gm_arch_impl *arch;
    /* where the weights are: a GGUF file, or a Hugging Face directory (config.json + safetensors) */
    gm_gguf *gguf;
    struct gm_st_set *st;
    struct gm_hf_config *hf;
    char hf_prefix[32];                 /* "model.language_model.", "model." or "" before every HF name */
    gm_hparams hp;
    gm_weights w;
    gm_tokenizer *tok;                  /* NULL for a checkpoint without a tokenizer (token ids only) */
    gm_chat_format chat_format;
    char name[128];
    char source[32];                    /* "gguf v3", "safetensors (2 files)", for describe */
    uint64_t n_params, weight_bytes;    /* over the bound weights */
    uint64_t table_bytes;               /* of them, GM_ROLE_TABLE tensors (looked up row by row only) */
    uint64_t type_bytes[GM_TYPE_COUNT], type_count[GM_TYPE_COUNT];
    void **owned;                       /* buffers the model allocated (f32 vectors, derived tensors) */
    int32_t n_owned;
};

/* A buffer of n bytes owned (and freed) by the model; NULL when out of memory. */
void *gm_model_alloc(gemmac_model *m, size_t n);

/* Calls fn with spec, its gguf and hf names formatted with idx (a layer or slice index; printf "%d"). */
gemmac_status gm_declare(gm_spec_fn fn, void *ud, int idx, const gm_tensor_spec *spec, gm_error *err);

/* Declares the weights every Gemma decoder layer has, under their GGUF and HF names: the attention (q, k, v, o
 * and the q / k norms), its norms and the dense MLP. No V on v_from_k layers. On a layer that reads another's
 * cache, K, V and k_norm are optional (bound when the file has them, so convert keeps them) or, with
 * skip_shared_kv, not declared at all. */
gemmac_status gm_declare_decoder_layer(gm_spec_fn fn, void *ud, const gm_hparams *hp, int il, gm_layer_weights *lw,
                                       bool skip_shared_kv, gm_error *err);

/* Binds every weight of m's manifest from m's file (GGUF or safetensors): names and shapes checked, norms and
 * vectors converted to f32, HF norm shift applied. */
gemmac_status gm_model_bind(gemmac_model *m, gm_error *err);

#endif
