/* arch_common.h: what the arch files (gemma3.c, gemma3n.c, gemma4.c) share when they read hyper-parameters:
 * range-checked GGUF getters, and the config.json conventions common to Gemma 3 / 3n / 4 (layer_types,
 * rope_parameters keyed by layer type, per_layer_config). */
#ifndef GM_ARCH_COMMON_H
#define GM_ARCH_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "io/gguf.h"
#include "io/hf_config.h"
#include "model/hparams.h"

/* ---- GGUF ---- */
/* A required u32 key in [lo, hi] (missing: GEMMAC_ERR_BAD_FILE naming it). */
gemmac_status gm_gguf_req_u32(const gm_gguf *g, const char *key, uint32_t lo, uint32_t hi, uint32_t *out,
                              gm_error *err);
/* An optional u32 key in [lo, hi]; def when absent. */
gemmac_status gm_gguf_opt_u32(const gm_gguf *g, const char *key, uint32_t lo, uint32_t hi, uint32_t def,
                              uint32_t *out, gm_error *err);
/* An optional finite f32 key; def when absent. */
gemmac_status gm_gguf_opt_f32(const gm_gguf *g, const char *key, float def, float *out, gm_error *err);
/* A per-layer u32: either one value for every layer, or an array of n_layer values, each in [lo, hi].
 * Absent: def for every layer (def < 0: GEMMAC_ERR_BAD_FILE naming the key). */
gemmac_status gm_gguf_per_layer_u32(const gm_gguf *g, const char *key, int n_layer, uint32_t lo, uint32_t hi,
                                    int64_t def, int32_t *out, gm_error *err);
/* The rows of token_embd.weight (n_vocab), checked in [1, 2^24]. */
gemmac_status gm_gguf_embd_rows(const gm_gguf *g, const char *name, int32_t *out, gm_error *err);
/* A per-layer bool array of exactly n_layer values (attention.sliding_window_pattern of Gemma 3n / 4).
 * Absent: GEMMAC_ERR_NOT_FOUND; another type or length: GEMMAC_ERR_BAD_FILE naming the key. */
gemmac_status gm_gguf_per_layer_bool(const gm_gguf *g, const char *key, int n_layer, bool *out, gm_error *err);

/* ---- config.json ---- */
/* A required integer in [lo, hi] (missing: GEMMAC_ERR_BAD_FILE "config.json: KEY is missing"). */
gemmac_status gm_hf_req_int(const gm_hf_config *c, const char *key, int64_t lo, int64_t hi, int32_t *out,
                            gm_error *err);
/* Optional integer in [lo, hi], def when absent or null. */
gemmac_status gm_hf_opt_int(const gm_hf_config *c, const char *key, int64_t lo, int64_t hi, int32_t def,
                            int32_t *out, gm_error *err);
/* Optional finite number, def when absent or null. */
gemmac_status gm_hf_opt_float(const gm_hf_config *c, const char *key, double def, float *out, gm_error *err);
/* hp->layer[i].sliding for n_layer layers from layer_types ("sliding_attention" / "full_attention"), else
 * from sliding_window_pattern / _sliding_window_pattern (every pattern-th layer is full), else default_pattern
 * (0: all full). */
gemmac_status gm_hf_layer_types(const gm_hf_config *c, gm_hparams *hp, int default_pattern, gm_error *err);

typedef struct gm_hf_rope {
    float theta;
    float factor;              /* linear scaling factor (1: none) */
    float partial;             /* partial_rotary_factor (1: all pairs) */
    bool proportional;         /* rope_type "proportional" (Gemma 4 full layers) */
} gm_hf_rope;
/* RoPE of one layer type ("full_attention" / "sliding_attention") from rope_parameters (transformers 5),
 * falling back to rope_theta / rope_local_base_freq / rope_scaling (transformers 4) and then def_theta.
 * Types other than default, linear and proportional are GEMMAC_ERR_UNSUPPORTED. */
gemmac_status gm_hf_rope_of(const gm_hf_config *c, const char *layer_type, float def_theta, gm_hf_rope *out,
                            gm_error *err);

#endif
