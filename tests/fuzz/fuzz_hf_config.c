/* fuzz_hf_config.c: libFuzzer target for the JSON readers of src/io/hf_config.c and the index parser of
 * src/io/safetensors.c: parses the input as config.json and asks every getter for the keys of
 * gemma-architecture.md §5 (flat, nested, dotted paths), then parses it as model.safetensors.index.json
 * and walks the entries, trapping on any broken invariant.
 *   cmake --build build-fuzz --target fuzz_hf_config
 *   build-fuzz/fuzz_hf_config -dict=tests/fuzz/hf_config.dict -max_total_time=120 -max_len=4096 /tmp/cfg_corpus */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_config.h"
#include "io/safetensors.h"

#define CHECK(c)                                                                                            \
    do {                                                                                                    \
        if (!(c)) __builtin_trap();                                                                         \
    } while (0)

static volatile uint64_t g_sink;

static const char *const k_keys[] = {
    "architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "global_head_dim", "num_global_key_value_heads", "layer_types",
    "sliding_window", "rope_parameters", "rope_parameters.full_attention.rope_theta",
    "rope_parameters.sliding_attention.rope_type", "rope_theta", "rope_scaling", "rope_scaling.factor",
    "intermediate_size", "vocab_size", "hidden_size_per_layer_input", "num_kv_shared_layers",
    "final_logit_softcapping", "enable_moe_block", "num_experts", "top_k_experts", "moe_intermediate_size",
    "attention_k_eq_v", "use_double_wide_mlp", "per_layer_config", "per_layer_config.0.head_dim",
    "tie_word_embeddings", "rms_norm_eps", "query_pre_attn_scalar", "max_position_embeddings",
    "use_bidirectional_attention", "eos_token_id", "layer_types.0", "a", "a.b", "a.0", "0", "text_config",
};

static void ok_or(gemmac_status st) {
    CHECK(st == GEMMAC_OK || st == GEMMAC_ERR_NOT_FOUND || st == GEMMAC_ERR_BAD_FILE ||
          st == GEMMAC_ERR_BUFFER_TOO_SMALL);
}

static void walk(const gm_hf_config *c) {
    gm_error err;
    for (size_t k = 0; k < sizeof k_keys / sizeof *k_keys; k++) {
        const char *key = k_keys[k];
        gm_hf_kind kind = gm_hf_kind_of(c, key);
        int64_t v, arr[8];
        double d, fa[8];
        bool b, ba[8];
        const char *s, *sa[8];
        size_t n;
        gemmac_status st = gm_hf_get_int(c, key, INT64_MIN, INT64_MAX, &v, &err);
        ok_or(st);
        CHECK((st == GEMMAC_ERR_NOT_FOUND) == (kind == GM_HF_ABSENT || kind == GM_HF_NULL));
        ok_or(gm_hf_get_float(c, key, &d, &err));
        st = gm_hf_get_bool(c, key, &b, &err);
        CHECK((st == GEMMAC_OK) == (kind == GM_HF_BOOL));
        st = gm_hf_get_str(c, key, &s, &err);
        CHECK((st == GEMMAC_OK) == (kind == GM_HF_STRING));
        if (st == GEMMAC_OK) g_sink += strlen(s);
        ok_or(gm_hf_get_bool_or_str(c, key, &b, &s, &err));
        st = gm_hf_get_int_arr(c, key, -5, 1 << 20, arr, 8, &n, &err);
        ok_or(st);
        if (st == GEMMAC_OK) CHECK(n <= 8 && n == gm_hf_count(c, key));
        ok_or(gm_hf_get_float_arr(c, key, fa, 8, &n, &err));
        ok_or(gm_hf_get_bool_arr(c, key, ba, 8, &n, &err));
        st = gm_hf_get_str_arr(c, key, sa, 8, &n, &err);
        ok_or(st);
        for (size_t i = 0; st == GEMMAC_OK && i < n; i++) g_sink += strlen(sa[i]);
        st = gm_hf_get_keys(c, key, sa, 8, &n, &err);
        ok_or(st);
        for (size_t i = 0; st == GEMMAC_OK && i < n; i++) g_sink += strlen(sa[i]);
        ok_or(gm_hf_get_int_per_layer(c, key, 4, 0, 1 << 20, arr, &err));
        CHECK(err.msg[0] == '\0' || !strchr(err.msg, '\n'));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gm_hf_config *c = NULL;
    gm_error err;
    gm_error_clear(&err);
    gemmac_status st = gm_hf_config_parse((const char *)data, size, "fuzz.json", &c, &err);
    if (st != GEMMAC_OK) {
        CHECK(c == NULL);
        CHECK(st == GEMMAC_ERR_BAD_FILE || st == GEMMAC_ERR_NO_MEMORY);
        CHECK(err.msg[0] != '\0' && !strchr(err.msg, '\n'));
    } else {
        gm_hf_model_id id;
        st = gm_hf_config_model_id(c, &id, &err);
        CHECK(st == GEMMAC_OK || st == GEMMAC_ERR_NOT_FOUND || st == GEMMAC_ERR_BAD_FILE);
        if (st == GEMMAC_OK) CHECK(id.model_type != NULL);
        walk(c);
        const gm_hf_config *t = gm_hf_config_text(c);
        CHECK(t != NULL);
        if (t != c) walk(t);
        gm_hf_config_close(c);
    }

    gm_st_index *ix = NULL;
    st = gm_st_index_parse((const char *)data, size, "fuzz.index.json", &ix, &err);
    if (st != GEMMAC_OK) {
        CHECK(ix == NULL && (st == GEMMAC_ERR_BAD_FILE || st == GEMMAC_ERR_NO_MEMORY));
        return 0;
    }
    uint32_t n_files = gm_st_index_n_files(ix);
    CHECK(n_files >= 1 && n_files <= gm_st_index_n_entries(ix));
    for (uint32_t i = 0; i < n_files; i++) {
        const char *name = gm_st_index_file(ix, i);
        CHECK(name && name[0] && !strchr(name, '/') && !strstr(name, ".."));
    }
    const char *prev = NULL;
    for (uint64_t i = 0; i < gm_st_index_n_entries(ix); i++) {
        const char *tn;
        uint32_t file;
        CHECK(gm_st_index_entry(ix, i, &tn, &file));
        CHECK(tn[0] && file < n_files);
        CHECK(!prev || strcmp(prev, tn) < 0);
        prev = tn;
    }
    gm_st_index_free(ix);
    return 0;
}
