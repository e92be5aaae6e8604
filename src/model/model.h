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
    gm_tensor attn_norm;       /* [H] */
    gm_tensor wq;              /* [H, n_head·D] (GGML order: ne0 = H) */
    gm_tensor wk, wv;          /* [H, n_head_kv·D] */
    gm_tensor wo;              /* [n_head·D, H] */
    gm_tensor q_norm, k_norm;  /* [D] */
    gm_tensor post_attn_norm;  /* [H] */
    gm_tensor ffn_norm;        /* [H] */
    gm_tensor ffn_gate, ffn_up;/* [H, n_ff] */
    gm_tensor ffn_down;        /* [n_ff, H] */
    gm_tensor post_ffw_norm;   /* [H] */
} gm_layer_weights;

typedef struct gm_weights {
    gm_tensor tok_embd;        /* [H, n_vocab] */
    gm_tensor output;          /* [H, n_vocab]; the same as tok_embd when tied */
    gm_tensor output_norm;     /* [H] */
    gm_layer_weights *layer;   /* [n_layer] */
} gm_weights;

/* Activation buffers (backend memory) for batches of up to n_batch tokens, sized from the hyper-parameters. */
typedef struct gm_scratch {
    int32_t n_batch;
    float *x;                  /* [n_batch][H] residual stream */
    float *xn;                 /* [n_batch][H] normed input of a block */
    float *q, *att;            /* [n_batch][max n_head·D] */
    float *k, *v;              /* [n_batch][max n_head_kv·D] */
    float *g, *u;              /* [n_batch][max n_ff] */
    float *xo;                 /* [GM_LOGITS_CHUNK][H] rows whose logits are wanted */
    float *logits;             /* [GM_LOGITS_CHUNK][n_vocab] */
} gm_scratch;

/* Logits are computed this many rows at a time (a full batch of 262144-wide rows would not fit). */
#define GM_LOGITS_CHUNK 16

gemmac_status gm_scratch_new(const gemmac_model *m, gm_backend *b, int32_t n_batch, gm_scratch **out, gm_error *err);
void gm_scratch_free(gm_scratch *s, gm_backend *b);
/* Bytes gm_scratch_new allocates for n_batch tokens (the memory plan). */
uint64_t gm_scratch_bytes(const gemmac_model *m, int32_t n_batch);

/* One forward call over a batch already validated and placed in the cache by the context. */
typedef struct gm_forward_args {
    const gemmac_model *model;
    gm_backend *backend;
    gm_kv_cache *kv;
    int32_t n_tokens;
    const int32_t *token, *pos, *seq;   /* [n_tokens] host */
    int32_t n_out;                      /* tokens whose logits are wanted */
    const int32_t *out_rows;            /* [n_out] their indices in the batch */
    float *logits;                      /* [n_out][n_vocab] host, written */
    gm_scratch *scratch;         /* backend buffers sized for the context's n_batch */
} gm_forward_args;

typedef struct gm_arch_impl {
    const char *name;                   /* general.architecture */
    gemmac_status (*load)(gemmac_model *m, gm_error *err); /* hparams + weights from m->gguf */
    gemmac_status (*forward)(const gm_forward_args *a, gm_error *err);
} gm_arch_impl;

struct gemmac_model {
    gm_gguf *gguf;
    const gm_arch_impl *arch;
    gm_hparams hp;
    gm_weights w;
    gm_tokenizer *tok;
    gm_chat_format chat_format;
    char name[128];
    uint64_t n_params, weight_bytes;
    float **owned_vectors;              /* norm weights converted to f32 when stored otherwise */
    int32_t n_owned_vectors;
};

extern const gm_arch_impl gm_arch_gemma3;

/* Binds tensor `name` checking its shape (ne[i] == shape[i] for i < n_dims, trailing dims 1). With
 * optional, an absent tensor leaves t->data NULL; otherwise it is GEMMAC_ERR_BAD_FILE naming it. */
gemmac_status gm_bind_tensor(gemmac_model *m, gm_tensor *t, const char *name, int n_dims, const int64_t *shape,
                             bool optional, gm_error *err);
/* A [d] vector of f32 for a norm weight (converted and owned by the model if stored in another type). */
gemmac_status gm_bind_vector(gemmac_model *m, gm_tensor *t, const char *name, int64_t d, gm_error *err);

#endif
