/* tiny_model.h: a tiny random Gemma 3 model for tests: seeded weights (kept, so a test can run its own oracle)
 * written as a GGUF file (F32 tensors, an SPM vocabulary), with options that break it one way at a time.
 * Test support only: aborts on out-of-memory; loading and running the file is the library's job.
 *
 * Usage:
 *     gm_tiny_opts o = gm_tiny_default_opts();        // H 64, D 16, 7 layers (6th is full), window 5, V 300
 *     o.omit_tensor = "blk.3.attn_k.weight";          // optional breakage
 *     gm_tiny *t = gm_tiny_new(&o);
 *     gm_tiny_write_file(t, "/tmp/x/tiny.gguf");
 *     ... t->layer[il].wq[o * t->n_embd + i] is W_q[o][i] (the rows of the GGML [H, n_head·D] tensor) ...
 *     gm_tiny_free(t);
 */
#ifndef GM_TINY_MODEL_H
#define GM_TINY_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"

#define GM_TINY_MAX_OVERRIDES 4

/* Replaces (or, with remove, deletes) one hyper-parameter key such as "gemma3.block_count". A u32 key not
 * otherwise written (e.g. "gemma3.rope.dimension_count") is added; float keys can only be removed. */
typedef struct gm_tiny_kv {
    const char *key;           /* NULL: unused slot */
    uint32_t value;
    bool remove;               /* leave the key out of the file */
} gm_tiny_kv;

typedef struct gm_tiny_opts {
    uint64_t seed;             /* weights are a function of the seed alone */
    int32_t n_layer;           /* 7: layers 0-4 and 6 sliding, 5 full */
    int32_t n_ctx_train;       /* gemma3.context_length (64) */
    int32_t window;            /* gemma3.attention.sliding_window (5); 0: key absent (all layers full) */
    float rope_base;           /* gemma3.rope.freq_base of the full layers (1e6) */
    float rope_scale;          /* linear rope scaling factor of the full layers; <= 1: no scaling keys */
    int32_t head_dim;          /* gemma3.attention.key_length / value_length (16); 0: 16 */
    float embd_amp;            /* embeddings are uniform in [-amp, amp] (1). Tied embeddings make a random
                                  model echo its last token; 0.1 lets the layers steer greedy decoding */
    const char *arch;          /* general.architecture ("gemma3"); the keys stay gemma3.* */
    const char *omit_tensor;   /* a tensor name to leave out, or NULL */
    const char *reshape_tensor;/* a tensor name stored with ne[0] + 32 (a wrong shape), or NULL */
    const char *retype_tensor; /* a tensor name stored as retype (e.g. GM_TYPE_Q8_0, GM_TYPE_Q2_K), or NULL */
    gm_type retype;
    gm_tiny_kv kv[GM_TINY_MAX_OVERRIDES];
} gm_tiny_opts;

/* The weights of one layer, f32, row-major [rows][ne0] exactly as the engine reads them (a tensor stored as
 * a quantized type holds its dequantized values here). */
typedef struct gm_tiny_layer {
    float *attn_norm;          /* [H] */
    float *wq;                 /* [n_head·D][H] */
    float *wk, *wv;            /* [n_head_kv·D][H] */
    float *wo;                 /* [H][n_head·D] */
    float *q_norm, *k_norm;    /* [D] */
    float *post_attn_norm;     /* [H] */
    float *ffn_norm;           /* [H] */
    float *ffn_gate, *ffn_up;  /* [n_ff][H] */
    float *ffn_down;           /* [H][n_ff] */
    float *post_ffw_norm;      /* [H] */
} gm_tiny_layer;

typedef struct gm_tiny {
    /* hyper-parameters as written (before any kv override) */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train, window;
    float norm_eps, rope_base, rope_scale; /* rope_scale 1: none */
    /* special tokens */
    int32_t pad, eos, bos, unk, start_of_turn, end_of_turn;
    float *tok_embd;           /* [V][H] (tied output) */
    float *output_norm;        /* [H] */
    gm_tiny_layer *layer;      /* [n_layer] */
    uint8_t *file;             /* the GGUF bytes */
    size_t file_size;
} gm_tiny;

gm_tiny_opts gm_tiny_default_opts(void);
/* Builds the weights and the file (NULL opts: the defaults). */
gm_tiny *gm_tiny_new(const gm_tiny_opts *o);
void gm_tiny_free(gm_tiny *t);
/* Writes the file to path; false on an I/O error. */
bool gm_tiny_write_file(const gm_tiny *t, const char *path);
/* Whether layer il uses sliding-window attention (Gemma 3: all but every sixth layer, when a window is set). */
bool gm_tiny_layer_sliding(const gm_tiny *t, int32_t il);

#endif
