/* hf_config.h: a validating reader of a Hugging Face config.json (parsed with cJSON) with typed getters that
 * name the key in every error, plus the bounded JSON parse that safetensors.c shares. Mapping keys to
 * hyper-parameters (defaults, per-generation meaning) is left to src/model.
 *
 * Keys are paths: "hidden_size", "text_config.hidden_size", "rope_parameters.full_attention.rope_theta",
 * "layer_types.3" (a numeric segment indexes an array). Keys that themselves contain '.' cannot be named.
 * Gemma 3 / 3n / 4 multimodal configs nest the text model under "text_config"; gm_hf_config_text() gives
 * a view rooted there (or the whole config when it is flat, e.g. Gemma4ForCausalLM), so model code asks
 * for "hidden_size" either way and messages still say "text_config.hidden_size".
 *
 * Absent and null: the getters return GEMMAC_ERR_NOT_FOUND for both (the message says which). Where null
 * means something else than "absent" (transformers: absent = class default, null = None, e.g.
 * final_logit_softcapping), ask gm_hf_kind() first. */
#ifndef GM_HF_CONFIG_H
#define GM_HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define GM_HF_MAX_CONFIG   (16u << 20)   /* bytes of config.json */
#define GM_HF_MAX_DEPTH    32            /* JSON nesting (released configs need 4) */
#define GM_HF_MAX_VALUES   (1u << 20)    /* JSON values in one config */

typedef struct gm_hf_config gm_hf_config;

/* Reads path (must be ≤ GM_HF_MAX_CONFIG bytes). Messages name the path. */
gemmac_status gm_hf_config_open(const char *path, gm_hf_config **out, gm_error *err);
/* The same over len bytes of JSON text (need not be NUL-terminated); name is used in messages. */
gemmac_status gm_hf_config_parse(const char *text, size_t len, const char *name, gm_hf_config **out,
                                 gm_error *err);
/* Closes a handle from open/parse (not a view from gm_hf_config_text); NULL is a no-op. */
void gm_hf_config_close(gm_hf_config *c);

/* The text model's view: rooted at "text_config" when that is an object, else c itself. Owned by c. */
const gm_hf_config *gm_hf_config_text(const gm_hf_config *c);
/* True when the view is nested (gm_hf_config_text(c) != c). */
bool gm_hf_config_is_nested(const gm_hf_config *c);

typedef struct gm_hf_model_id {
    const char *architecture;      /* architectures[0] ("Gemma4ForConditionalGeneration"); NULL if absent */
    const char *model_type;        /* top-level "model_type" ("gemma4") */
    const char *text_model_type;   /* text_config.model_type ("gemma4_text"); model_type when flat; NULL when
                                      text_config has none */
} gm_hf_model_id;

/* The model type and architecture strings (valid while c is open). GEMMAC_ERR_NOT_FOUND without a
 * top-level model_type; GEMMAC_ERR_BAD_FILE when a present key has the wrong type (architectures must be a
 * non-empty array of strings). */
gemmac_status gm_hf_config_model_id(const gm_hf_config *c, gm_hf_model_id *out, gm_error *err);

typedef enum gm_hf_kind {
    GM_HF_ABSENT = 0, GM_HF_NULL, GM_HF_BOOL, GM_HF_NUMBER, GM_HF_STRING, GM_HF_ARRAY, GM_HF_OBJECT
} gm_hf_kind;

/* What is at key (GM_HF_ABSENT when any segment is missing); "absent", "null", "bool", ... */
gm_hf_kind gm_hf_kind_of(const gm_hf_config *c, const char *key);
const char *gm_hf_kind_name(gm_hf_kind k);
/* Elements of an array or members of an object at key; 0 for anything else. */
size_t gm_hf_count(const gm_hf_config *c, const char *key);

/* ---- Typed getters: GEMMAC_ERR_NOT_FOUND (absent or null), GEMMAC_ERR_BAD_FILE (wrong type, or the value
 * is out of range), GEMMAC_ERR_INVALID_ARG (NULL arguments). Out-parameters change only on success. ---- */

/* An integer in [lo, hi]. JSON numbers with a fraction are refused, and so are magnitudes of 2^53 and more
 * (the parser holds numbers as doubles, where such integers are not all exact). */
gemmac_status gm_hf_get_int(const gm_hf_config *c, const char *key, int64_t lo, int64_t hi, int64_t *out,
                            gm_error *err);
/* Any finite number (integers included). */
gemmac_status gm_hf_get_float(const gm_hf_config *c, const char *key, double *out, gm_error *err);
gemmac_status gm_hf_get_bool(const gm_hf_config *c, const char *key, bool *out, gm_error *err);
/* *out points into c (NUL-terminated, NUL-free). */
gemmac_status gm_hf_get_str(const gm_hf_config *c, const char *key, const char **out, gm_error *err);

/* Arrays into caller storage of cap elements: *n gets the array's length whenever key holds an array;
 * GEMMAC_ERR_BUFFER_TOO_SMALL when it exceeds cap (out untouched). Every element must have the type (the
 * message names the index). */
gemmac_status gm_hf_get_int_arr(const gm_hf_config *c, const char *key, int64_t lo, int64_t hi, int64_t *out,
                                size_t cap, size_t *n, gm_error *err);
gemmac_status gm_hf_get_float_arr(const gm_hf_config *c, const char *key, double *out, size_t cap, size_t *n,
                                  gm_error *err);
gemmac_status gm_hf_get_bool_arr(const gm_hf_config *c, const char *key, bool *out, size_t cap, size_t *n,
                                 gm_error *err);
gemmac_status gm_hf_get_str_arr(const gm_hf_config *c, const char *key, const char **out, size_t cap,
                                size_t *n, gm_error *err);
/* Per-layer values written either as one integer (every layer) or as an array of exactly n_layers integers
 * (intermediate_size of Gemma 4 E2B): out[0..n_layers) in [lo, hi]. */
gemmac_status gm_hf_get_int_per_layer(const gm_hf_config *c, const char *key, size_t n_layers, int64_t lo,
                                      int64_t hi, int64_t *out, gm_error *err);
/* A value that is a bool or a string (use_bidirectional_attention: false / "vision"): for a bool *b gets it
 * and *str NULL; for a string *str gets it and *b false. */
gemmac_status gm_hf_get_bool_or_str(const gm_hf_config *c, const char *key, bool *b, const char **str,
                                    gm_error *err);
/* The member names of the object at key, in file order (per_layer_config, rope_parameters): like the
 * array getters, into out[cap]. */
gemmac_status gm_hf_get_keys(const gm_hf_config *c, const char *key, const char **out, size_t cap, size_t *n,
                             gm_error *err);

/* ---- The bounded JSON parse shared by the HF readers (hf_config.c, safetensors.c) ---- */

struct cJSON;

typedef struct gm_json_limits {
    int max_depth;                 /* nesting of arrays/objects (the root object is depth 1) */
    uint64_t max_values;           /* values the tree may hold (bounds the parser's memory) */
} gm_json_limits;

/* Parses len bytes of JSON text after a linear pre-scan that refuses NUL bytes, invalid UTF-8, unescaped
 * control characters in strings (cJSON takes them; JSON and Python's json do not), the escape \u0000
 * (cJSON would silently cut the string there), nesting deeper than lim->max_depth and more than
 * lim->max_values values, then parses with cJSON (whole input, trailing whitespace only) and refuses
 * duplicate member names in every object (cJSON keeps both; Python keeps the last). Messages start with
 * what ("header", "config.json") and give offsets as base + position in text (file offsets).
 * When top_keys is not NULL, *top_keys gets a malloc'd array of the text positions (+ base) of the root
 * object's member names in order, *n_top their count. The caller frees the tree with cJSON_Delete. */
gemmac_status gm_json_parse(const char *text, size_t len, const char *what, uint64_t base,
                            const gm_json_limits *lim, struct cJSON **out, uint64_t **top_keys, size_t *n_top,
                            gm_error *err);

/* An integer-valued JSON number with magnitude below 2^53 (exact in a double); false otherwise. */
bool gm_json_int(const struct cJSON *item, int64_t *out);

#endif
