/* synth.h: writing GGUF files from a model's manifest: `gemmac synth` (random weights with the exact shapes
 * and metadata of a released Gemma size) and `gemmac convert` (a Hugging Face checkpoint directory to GGUF).
 * Both choose tensor types as llama.cpp's converter and llama-quantize do (gm_synth_pick_type). The public
 * entry points are gemmac_synth / gemmac_convert in gemmac.h; this header is what tests may reach inside. */
#ifndef GM_SYNTH_H
#define GM_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "model/hparams.h"
#include "model/model.h"
#include "quant/quant.h"

/* Preset names, comma-separated ("gemma4-e2b, gemma4-e4b, ..."), and output types ("q4_0, q4_k, ..."). */
const char *gm_synth_preset_list(void);
const char *gm_synth_type_list(void);

/* The hyper-parameters and arch of a preset (NULL arch and GEMMAC_ERR_INVALID_ARG naming the valid presets
 * when unknown). */
gemmac_status gm_synth_preset_hparams(const char *preset, gm_hparams *hp, const gm_arch_impl **arch, gm_error *err);

/* An output type by name ("q4_k_m"); -1 when unknown. */
int gm_synth_type_index(const char *name);

/* State of llama.cpp's type choice over one file: attn_v tensors counted before choosing. */
typedef struct gm_type_rule {
    int ftype;                 /* gm_synth_type_index */
    int n_layer;
    int n_attn_v, i_attn_v;    /* attn_v tensors in the file, and how many were chosen so far */
} gm_type_rule;

/* The type llama.cpp's pipeline (converter, then llama-quantize for the K and 4-bit types) gives a tensor
 * of this name and shape in a file of rule->ftype. Call in file order (attn_v tensors are counted). */
gm_type gm_synth_pick_type(gm_type_rule *rule, const char *name, int n_dims, const int64_t *ne);

#endif
