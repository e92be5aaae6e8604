/* arch_common.c: the shared hyper-parameter readers of arch_common.h. */
#include "model/arch_common.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

gemmac_status gm_gguf_req_u32(const gm_gguf *g, const char *key, uint32_t lo, uint32_t hi, uint32_t *out,
                              gm_error *err) {
    gemmac_status st = gm_gguf_get_u32(g, key, out, err);
    if (st == GEMMAC_ERR_NOT_FOUND) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "required key %s is missing", key);
    if (st != GEMMAC_OK) return st;
    if (*out < lo || *out > hi) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s = %u is outside [%u, %u]", key, *out, lo, hi);
    return GEMMAC_OK;
}

gemmac_status gm_gguf_opt_u32(const gm_gguf *g, const char *key, uint32_t lo, uint32_t hi, uint32_t def,
                              uint32_t *out, gm_error *err) {
    gemmac_status st = gm_gguf_get_u32(g, key, out, err);
    if (st == GEMMAC_ERR_NOT_FOUND) {
        *out = def;
        return GEMMAC_OK;
    }
    if (st != GEMMAC_OK) return st;
    if (*out < lo || *out > hi) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s = %u is outside [%u, %u]", key, *out, lo, hi);
    return GEMMAC_OK;
}

gemmac_status gm_gguf_opt_f32(const gm_gguf *g, const char *key, float def, float *out, gm_error *err) {
    gemmac_status st = gm_gguf_get_f32(g, key, out, err);
    if (st == GEMMAC_ERR_NOT_FOUND) {
        *out = def;
        return GEMMAC_OK;
    }
    if (st == GEMMAC_OK && !isfinite(*out)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s is not finite", key);
    return st;
}

gemmac_status gm_gguf_per_layer_u32(const gm_gguf *g, const char *key, int n_layer, uint32_t lo, uint32_t hi,
                                    int64_t def, int32_t *out, gm_error *err) {
    const gm_gguf_kv *kv = gm_gguf_find_kv(g, key);
    if (!kv) {
        if (def < 0) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "required key %s is missing", key);
        for (int i = 0; i < n_layer; i++) out[i] = (int32_t)def;
        return GEMMAC_OK;
    }
    const bool arr = kv->type == GM_GGUF_ARRAY;
    if (arr && kv->arr_n != (uint64_t)n_layer)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s has %llu values for %d layers", key,
                       (unsigned long long)kv->arr_n, n_layer);
    for (int i = 0; i < n_layer; i++) {
        int64_t x;
        if (!gm_gguf_kv_int(kv, arr ? (uint64_t)i : 0, &x))
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s is not an integer or an array of integers", key);
        if (x < (int64_t)lo || x > (int64_t)hi)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s[%d] = %lld is outside [%u, %u]", key, i, (long long)x, lo, hi);
        out[i] = (int32_t)x;
    }
    return GEMMAC_OK;
}

gemmac_status gm_gguf_embd_rows(const gm_gguf *g, const char *name, int32_t *out, gm_error *err) {
    const gm_gguf_tensor *emb = gm_gguf_find_tensor(g, name);
    if (!emb) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tensor %s is missing", name);
    if (emb->ne[1] < 1 || emb->ne[1] > (1 << 24))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s has %lld rows", name, (long long)emb->ne[1]);
    *out = (int32_t)emb->ne[1];
    return GEMMAC_OK;
}

gemmac_status gm_hf_req_int(const gm_hf_config *c, const char *key, int64_t lo, int64_t hi, int32_t *out,
                            gm_error *err) {
    int64_t v;
    gemmac_status st = gm_hf_get_int(c, key, lo, hi, &v, err);
    if (st == GEMMAC_ERR_NOT_FOUND) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: %s is missing", key);
    if (st == GEMMAC_OK) *out = (int32_t)v;
    return st;
}

gemmac_status gm_hf_opt_int(const gm_hf_config *c, const char *key, int64_t lo, int64_t hi, int32_t def,
                            int32_t *out, gm_error *err) {
    int64_t v;
    gemmac_status st = gm_hf_get_int(c, key, lo, hi, &v, err);
    if (st == GEMMAC_ERR_NOT_FOUND) {
        *out = def;
        return GEMMAC_OK;
    }
    if (st == GEMMAC_OK) *out = (int32_t)v;
    return st;
}

gemmac_status gm_hf_opt_float(const gm_hf_config *c, const char *key, double def, float *out, gm_error *err) {
    double v;
    gemmac_status st = gm_hf_get_float(c, key, &v, err);
    if (st == GEMMAC_ERR_NOT_FOUND) v = def;
    else if (st != GEMMAC_OK) return st;
    *out = (float)v;
    return GEMMAC_OK;
}

gemmac_status gm_hf_layer_types(const gm_hf_config *c, gm_hparams *hp, int default_pattern, gm_error *err) {
    const int L = hp->n_layer;
    if (gm_hf_kind_of(c, "layer_types") == GM_HF_ARRAY) {
        const char *types[GM_MAX_LAYERS];
        size_t n;
        gemmac_status st = gm_hf_get_str_arr(c, "layer_types", types, GM_MAX_LAYERS, &n, err);
        if (st != GEMMAC_OK) return st;
        if (n != (size_t)L)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: layer_types has %zu entries for %d layers", n, L);
        for (int i = 0; i < L; i++) {
            if (strcmp(types[i], "sliding_attention") == 0) hp->layer[i].sliding = true;
            else if (strcmp(types[i], "full_attention") == 0) hp->layer[i].sliding = false;
            else
                return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "config.json: layer_types[%d] '%s' is not supported", i,
                               gm_show(types[i], strlen(types[i])).s);
        }
        return GEMMAC_OK;
    }
    int32_t pattern = default_pattern;
    gemmac_status st = gm_hf_opt_int(c, "sliding_window_pattern", 1, 1024, pattern, &pattern, err);
    if (st == GEMMAC_OK) st = gm_hf_opt_int(c, "_sliding_window_pattern", 1, 1024, pattern, &pattern, err);
    if (st != GEMMAC_OK) return st;
    for (int i = 0; i < L; i++) hp->layer[i].sliding = pattern > 0 && (i + 1) % pattern != 0;
    return GEMMAC_OK;
}

gemmac_status gm_hf_rope_of(const gm_hf_config *c, const char *layer_type, float def_theta, gm_hf_rope *out,
                            gm_error *err) {
    gm_hf_rope r = {.theta = def_theta, .factor = 1.0f, .partial = 1.0f, .proportional = false};
    const bool sliding = strcmp(layer_type, "sliding_attention") == 0;
    char base[96];
    snprintf(base, sizeof base, "rope_parameters.%s", layer_type);
    gemmac_status st;
    const char *type = NULL;
    char key[160];
    if (gm_hf_kind_of(c, base) == GM_HF_OBJECT) {
        snprintf(key, sizeof key, "%s.rope_theta", base);
        if ((st = gm_hf_opt_float(c, key, def_theta, &r.theta, err))) return st;
        snprintf(key, sizeof key, "%s.factor", base);
        if ((st = gm_hf_opt_float(c, key, 1.0, &r.factor, err))) return st;
        snprintf(key, sizeof key, "%s.partial_rotary_factor", base);
        if ((st = gm_hf_opt_float(c, key, 1.0, &r.partial, err))) return st;
        snprintf(key, sizeof key, "%s.rope_type", base);
        st = gm_hf_get_str(c, key, &type, err);
        if (st != GEMMAC_OK && st != GEMMAC_ERR_NOT_FOUND) return st;
    } else {
        /* transformers 4: rope_theta (full), rope_local_base_freq (sliding), rope_scaling (full) */
        if ((st = gm_hf_opt_float(c, sliding ? "rope_local_base_freq" : "rope_theta", def_theta, &r.theta, err)))
            return st;
        if (!sliding && gm_hf_kind_of(c, "rope_scaling") == GM_HF_OBJECT) {
            if ((st = gm_hf_opt_float(c, "rope_scaling.factor", 1.0, &r.factor, err))) return st;
            st = gm_hf_get_str(c, "rope_scaling.rope_type", &type, err);
            if (st != GEMMAC_OK && st != GEMMAC_ERR_NOT_FOUND) return st;
        }
    }
    if (type && strcmp(type, "default") != 0 && strcmp(type, "linear") != 0 && strcmp(type, "proportional") != 0)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "config.json: rope_type '%s' of %s is not supported",
                       gm_show(type, strlen(type)).s, layer_type);
    if (type && strcmp(type, "linear") != 0) r.factor = 1.0f;
    r.proportional = type && strcmp(type, "proportional") == 0;
    if (!(r.theta > 1)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: rope_theta %g of %s is not > 1", r.theta, layer_type);
    if (!(r.factor >= 1 && r.factor <= 1024))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: rope factor %g of %s is not in [1, 1024]", r.factor, layer_type);
    if (!(r.partial > 0 && r.partial <= 1))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: partial_rotary_factor %g is not in (0, 1]", r.partial);
    *out = r;
    return GEMMAC_OK;
}

gemmac_status gm_gguf_per_layer_bool(const gm_gguf *g, const char *key, int n_layer, bool *out, gm_error *err) {
    const gm_gguf_kv *kv = gm_gguf_find_kv(g, key);
    if (!kv) return gm_fail(err, GEMMAC_ERR_NOT_FOUND, "key %s is missing", key);
    if (kv->type != GM_GGUF_ARRAY || kv->arr_type != GM_GGUF_BOOL)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s is not an array of bools", key);
    if (kv->arr_n != (uint64_t)n_layer)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s has %llu values for %d layers", key,
                       (unsigned long long)kv->arr_n, n_layer);
    const uint8_t *p = kv->data;
    for (int i = 0; i < n_layer; i++) out[i] = p[i] != 0;
    return GEMMAC_OK;
}
