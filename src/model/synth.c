/* synth.c: GGUF files from an arch's manifest. Owns the preset table (every released Gemma 3 / 3n / 4 text
 * size as its config.json, read by the arch's own hparams_hf), llama.cpp's per-tensor type choice, random
 * weights by role (cheap xoshiro256+ and a sum of four uniforms, rows in parallel, a function of (seed, tensor,
 * row) only), the tokenizer keys (copied from a GGUF and padded, or a placeholder), and `gemmac convert`
 * (every manifest tensor of a loaded Hugging Face checkpoint under its GGUF name, slices concatenated).
 * Metadata of the model itself is the arch's write_hparams; writing the file is gguf_writer.c. */
#include "model/synth.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/threadpool.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/hf_config.h"

/* ==== output types ==== */

typedef struct ftype_info {
    const char *name;
    gm_type base;              /* the converter's type for matrices (llama-quantize's input for the others) */
    gm_type quant;             /* llama-quantize's default type; GM_TYPE_COUNT: the converter's file as is */
    bool k_m;                  /* Q4_K_M's bumps (attn_v, ffn_down on use_more_bits layers) */
    uint32_t file_type;        /* general.file_type (llama_ftype) */
} ftype_info;

static const ftype_info k_ftypes[] = {
    {"f32", GM_TYPE_F32, GM_TYPE_COUNT, false, 0},      {"f16", GM_TYPE_F16, GM_TYPE_COUNT, false, 1},
    {"bf16", GM_TYPE_BF16, GM_TYPE_COUNT, false, 32},   {"q8_0", GM_TYPE_Q8_0, GM_TYPE_COUNT, false, 7},
    {"q4_0", GM_TYPE_F16, GM_TYPE_Q4_0, false, 2},      {"q4_k", GM_TYPE_F16, GM_TYPE_Q4_K, false, 14},
    {"q6_k", GM_TYPE_F16, GM_TYPE_Q6_K, false, 18},     {"q4_k_m", GM_TYPE_F16, GM_TYPE_Q4_K, true, 15},
};
#define N_FTYPES ((int)(sizeof k_ftypes / sizeof k_ftypes[0]))

const char *gm_synth_type_list(void) { return "f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, q4_k_m"; }

int gm_synth_type_index(const char *name) {
    for (int i = 0; name && i < N_FTYPES; i++)
        if (strcmp(name, k_ftypes[i].name) == 0) return i;
    return -1;
}

static bool ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int64_t block_of(gm_type t) { return gm_type_traits_of(t)->block_size; }

/* llama.cpp's use_more_bits (src/llama-quant.cpp): the first and last eighth and every third layer between. */
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

gm_type gm_synth_pick_type(gm_type_rule *rule, const char *name, int n_dims, const int64_t *ne) {
    const ftype_info *f = &k_ftypes[rule->ftype];
    /* the converter (conversion/base.py): vectors and norms f32, routers, AltUp coefficients and anything not
     * named .weight f32; the rest in the output type (q8_0 falls back to f16 on rows it cannot block) */
    gm_type conv = f->base;
    if (n_dims <= 1 || ends_with(name, "_norm.weight") || strstr(name, "ffn_gate_inp.weight") ||
        strstr(name, "altup_correct_coef") || strstr(name, "altup_predict_coef") || !ends_with(name, ".weight"))
        conv = GM_TYPE_F32;
    if (conv == GM_TYPE_Q8_0 && ne[0] % 32) conv = GM_TYPE_F16;
    const bool is_attn_v = strstr(name, "attn_v.weight") != NULL;
    if (f->quant == GM_TYPE_COUNT) {
        if (is_attn_v) rule->i_attn_v++;
        return conv;
    }
    /* llama-quantize: tensor_allows_quantization */
    if (n_dims < 2 || !ends_with(name, "weight") || strstr(name, "_norm.weight") || strstr(name, "ffn_gate_inp.weight") ||
        strstr(name, "altup") || strstr(name, "laurel") || strstr(name, "per_layer_model_proj"))
        return conv;
    gm_type t = f->quant;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight") ||
        !strcmp(name, "output.weight")) {
        /* tied embeddings take the output tensor's rule */
        if (ne[0] % block_of(t)) t = GM_TYPE_Q8_0;
        else if (t != GM_TYPE_Q8_0) t = GM_TYPE_Q6_K;
    } else if (is_attn_v) {
        if (f->k_m && use_more_bits(rule->i_attn_v, rule->n_attn_v)) t = GM_TYPE_Q6_K;
        rule->i_attn_v++;
    } else if (strstr(name, "ffn_down")) {
        int il = 0;
        if (f->k_m && sscanf(name, "blk.%d.", &il) == 1 && use_more_bits(il, rule->n_layer)) t = GM_TYPE_Q6_K;
    }
    /* tensor_type_fallback: rows a 256-block type cannot split */
    if (ne[0] % block_of(t)) {
        if (t == GM_TYPE_Q4_K) t = GM_TYPE_Q5_0;
        else if (t == GM_TYPE_Q6_K) t = GM_TYPE_Q8_0;
        else if (t == GM_TYPE_Q5_K) t = GM_TYPE_Q5_1;
        if (ne[0] % block_of(t)) t = GM_TYPE_F16;
    }
    return t;
}

/* ==== presets: the released text configs (gemma-architecture.md §1) ==== */

typedef struct preset {
    const char *name, *general_name, *size_label;
    gm_arch arch;
    int H, L, n_head, n_kv, head_dim, n_ff, n_ctx, window;
    int full_every;            /* layer il is full attention when (il + 1) % full_every == 0 */
    int n_vocab;               /* rows of token_embd as GGUF files have them */
    /* Gemma 3 */
    int qpas;
    double rope_factor;        /* linear RoPE scaling of full layers (0: none) */
    /* Gemma 3n / 4 */
    int n_kv_global, head_dim_global;
    bool k_eq_v, double_wide;
    int ple, n_kv_shared;
    int n_expert, n_expert_used, n_ff_expert;
} preset;

static const preset k_presets[] = {
    /* name          general name        size    arch            H     L   nh nkv  D     ff     ctx     win  pat vocab */
    {"gemma4-e2b", "Gemma 4 E2B", "E2B", GM_ARCH_GEMMA4, 1536, 35, 8, 1, 256, 6144, 131072, 512, 5, 262144,
     0, 0, 1, 512, false, true, 256, 20, 0, 0, 0},
    {"gemma4-e4b", "Gemma 4 E4B", "E4B", GM_ARCH_GEMMA4, 2560, 42, 8, 2, 256, 10240, 131072, 512, 6, 262144,
     0, 0, 2, 512, false, false, 256, 18, 0, 0, 0},
    {"gemma4-12b", "Gemma 4 12B", "12B", GM_ARCH_GEMMA4, 3840, 48, 16, 8, 256, 15360, 262144, 1024, 6, 262144,
     0, 0, 1, 512, true, false, 0, 0, 0, 0, 0},
    {"gemma4-26b-a4b", "Gemma 4 26B A4B", "26B-A4B", GM_ARCH_GEMMA4, 2816, 30, 16, 8, 256, 2112, 262144, 1024, 6,
     262144, 0, 0, 2, 512, true, false, 0, 0, 128, 8, 704},
    {"gemma4-31b", "Gemma 4 31B", "31B", GM_ARCH_GEMMA4, 5376, 60, 32, 16, 256, 21504, 262144, 1024, 6, 262144,
     0, 0, 4, 512, true, false, 0, 0, 0, 0, 0},
    {"gemma3n-e2b", "Gemma 3n E2B", "E2B", GM_ARCH_GEMMA3N, 2048, 30, 8, 2, 256, 8192, 32768, 512, 5, 262400,
     0, 0, 0, 0, false, false, 256, 10, 0, 0, 0},
    {"gemma3n-e4b", "Gemma 3n E4B", "E4B", GM_ARCH_GEMMA3N, 2048, 35, 8, 2, 256, 16384, 32768, 512, 5, 262400,
     0, 0, 0, 0, false, false, 256, 15, 0, 0, 0},
    {"gemma3-270m", "Gemma 3 270m", "270M", GM_ARCH_GEMMA3, 640, 18, 4, 1, 256, 2048, 32768, 512, 6, 262144,
     256, 0, 0, 0, false, false, 0, 0, 0, 0, 0},
    {"gemma3-1b", "Gemma 3 1b", "1B", GM_ARCH_GEMMA3, 1152, 26, 4, 1, 256, 6912, 32768, 512, 6, 262144,
     256, 0, 0, 0, false, false, 0, 0, 0, 0, 0},
    {"gemma3-4b", "Gemma 3 4b", "4B", GM_ARCH_GEMMA3, 2560, 34, 8, 4, 256, 10240, 131072, 1024, 6, 262144,
     256, 8.0, 0, 0, false, false, 0, 0, 0, 0, 0},
    {"gemma3-12b", "Gemma 3 12b", "12B", GM_ARCH_GEMMA3, 3840, 48, 16, 8, 256, 15360, 131072, 1024, 6, 262144,
     256, 8.0, 0, 0, false, false, 0, 0, 0, 0, 0},
    {"gemma3-27b", "Gemma 3 27b", "27B", GM_ARCH_GEMMA3, 5376, 62, 32, 16, 128, 21504, 131072, 1024, 6, 262144,
     168, 8.0, 0, 0, false, false, 0, 0, 0, 0, 0},
};
#define N_PRESETS ((int)(sizeof k_presets / sizeof k_presets[0]))

const char *gm_synth_preset_list(void) {
    return "gemma4-e2b, gemma4-e4b, gemma4-12b, gemma4-26b-a4b, gemma4-31b, gemma3n-e2b, gemma3n-e4b, gemma3-270m, "
           "gemma3-1b, gemma3-4b, gemma3-12b, gemma3-27b";
}

static const preset *find_preset(const char *name) {
    for (int i = 0; name && i < N_PRESETS; i++)
        if (strcmp(name, k_presets[i].name) == 0) return &k_presets[i];
    return NULL;
}

/* A growing string for the config.json text. */
typedef struct jbuf {
    char buf[32768];
    size_t len;
} jbuf;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void jp(jbuf *j, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const size_t room = sizeof j->buf - j->len;
    const int n = vsnprintf(j->buf + j->len, room, fmt, ap);
    va_end(ap);
    if (n > 0) j->len += (size_t)n < room ? (size_t)n : room - 1;
}

/* The preset's config.json (text part), as the released checkpoints have it. */
static void preset_json(const preset *p, jbuf *j) {
    j->len = 0;
    static const char *const types[] = {"gemma3_text", "gemma3n_text", "gemma4_text"};
    const char *mt = types[p->arch];
    if (p->arch == GM_ARCH_GEMMA4 && !strcmp(p->name, "gemma4-12b")) mt = "gemma4_unified_text";
    jp(j, "{\"model_type\": \"%s\", \"vocab_size\": %d, \"hidden_size\": %d, \"num_hidden_layers\": %d, ", mt,
       p->n_vocab, p->H, p->L);
    jp(j, "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, ", p->n_head, p->n_kv, p->head_dim);
    jp(j, "\"max_position_embeddings\": %d, \"sliding_window\": %d, \"rms_norm_eps\": 1e-06, ", p->n_ctx, p->window);
    jp(j, "\"hidden_activation\": \"gelu_pytorch_tanh\", \"tie_word_embeddings\": true, \"layer_types\": [");
    for (int il = 0; il < p->L; il++)
        jp(j, "%s\"%s\"", il ? ", " : "", (il + 1) % p->full_every == 0 ? "full_attention" : "sliding_attention");
    jp(j, "], ");
    if (p->arch == GM_ARCH_GEMMA3) {
        jp(j, "\"intermediate_size\": %d, \"query_pre_attn_scalar\": %d, \"final_logit_softcapping\": null, ", p->n_ff,
           p->qpas);
        jp(j, "\"attn_logit_softcapping\": null, \"rope_parameters\": {\"full_attention\": {\"rope_theta\": 1000000.0, ");
        if (p->rope_factor > 0) jp(j, "\"rope_type\": \"linear\", \"factor\": %.1f}, ", p->rope_factor);
        else jp(j, "\"rope_type\": \"default\"}, ");
        jp(j, "\"sliding_attention\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}}}");
    } else if (p->arch == GM_ARCH_GEMMA3N) {
        jp(j, "\"intermediate_size\": [");
        for (int il = 0; il < p->L; il++) jp(j, "%s%d", il ? ", " : "", p->n_ff);
        jp(j, "], \"activation_sparsity_pattern\": [");
        for (int il = 0; il < p->L; il++) jp(j, "%s%s", il ? ", " : "", il < 10 ? "0.95" : "0.0");
        jp(j, "], \"altup_active_idx\": 0, \"altup_coef_clip\": 120.0, \"altup_correct_scale\": true, "
              "\"altup_num_inputs\": 4, \"laurel_rank\": 64, \"hidden_size_per_layer_input\": %d, "
              "\"vocab_size_per_layer_input\": 262144, \"num_kv_shared_layers\": %d, \"final_logit_softcapping\": 30.0, ",
           p->ple, p->n_kv_shared);
        jp(j, "\"rope_parameters\": {\"full_attention\": {\"rope_theta\": 1000000.0, \"rope_type\": \"default\"}, "
              "\"sliding_attention\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}}}");
    } else {
        jp(j, "\"intermediate_size\": %d, \"use_double_wide_mlp\": %s, \"attention_k_eq_v\": %s, ", p->n_ff,
           p->double_wide ? "true" : "false", p->k_eq_v ? "true" : "false");
        jp(j, "\"global_head_dim\": %d, \"num_global_key_value_heads\": %d, ", p->head_dim_global, p->n_kv_global);
        jp(j, "\"hidden_size_per_layer_input\": %d, \"vocab_size_per_layer_input\": %d, \"num_kv_shared_layers\": %d, ",
           p->ple, p->ple ? 262144 : p->n_vocab, p->n_kv_shared);
        if (p->n_expert)
            jp(j, "\"enable_moe_block\": true, \"num_experts\": %d, \"top_k_experts\": %d, \"moe_intermediate_size\": %d, ",
               p->n_expert, p->n_expert_used, p->n_ff_expert);
        else jp(j, "\"enable_moe_block\": false, \"num_experts\": null, \"top_k_experts\": null, ");
        jp(j, "\"final_logit_softcapping\": 30.0, \"attention_bias\": false, ");
        jp(j, "\"rope_parameters\": {\"full_attention\": {\"partial_rotary_factor\": 0.25, \"rope_theta\": 1000000.0, "
              "\"rope_type\": \"proportional\"}, \"sliding_attention\": {\"rope_theta\": 10000.0, \"rope_type\": "
              "\"default\"}}}");
    }
}

static const gm_arch_impl *arch_of(gm_arch a) {
    return a == GM_ARCH_GEMMA3 ? &gm_arch_gemma3 : a == GM_ARCH_GEMMA3N ? &gm_arch_gemma3n : &gm_arch_gemma4;
}

gemmac_status gm_synth_preset_hparams(const char *name, gm_hparams *hp, const gm_arch_impl **arch, gm_error *err) {
    *arch = NULL;
    const preset *p = find_preset(name);
    if (!p)
        return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "unknown preset '%s' (presets: %s)", name ? gm_show(name, strlen(name)).s : "",
                       gm_synth_preset_list());
    jbuf *j = malloc(sizeof *j);
    if (!j) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
    preset_json(p, j);
    gm_hf_config *c = NULL;
    gemmac_status st = gm_hf_config_parse(j->buf, j->len, p->name, &c, err);
    free(j);
    if (st != GEMMAC_OK) return st;
    const gm_arch_impl *a = arch_of(p->arch);
    st = a->hparams_hf(hp, gm_hf_config_text(c), err);
    gm_hf_config_close(c);
    if (st != GEMMAC_OK) return gm_fail(err, st, "preset %s: %s", p->name, err ? err->msg : "");
    hp->n_vocab = p->n_vocab;
    *arch = a;
    return GEMMAC_OK;
}

/* ==== the file's tensors, from the manifest ==== */

typedef struct out_tensor {
    char name[64];
    gm_type type;
    int n_dims;                /* with the slice dim for stacked tensors */
    int64_t ne[4];
    gm_tensor_role role;
    uint64_t rows, rows_per_slice;
    uint64_t data_rows;        /* rows with values; rows past them (a padded table) are written as zeros */
    int32_t n_slices;
    const gm_tensor **src;     /* convert: the bound tensor of each slice */
    const float *fixed;        /* rope_freqs: the real values */
} out_tensor;

typedef struct collect {
    out_tensor *t;
    int n, cap;
    bool convert;              /* keep what the checkpoint has (bound data) rather than what real files have */
    int64_t table_rows;        /* > 0: row tables (GM_ROLE_TABLE) are padded to this many rows */
    gemmac_status st;
} collect;

static out_tensor *find_out(collect *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->t[i].name, name)) return &c->t[i];
    return NULL;
}

static gemmac_status collect_one(void *ud, const gm_tensor_spec *s, gm_error *err) {
    collect *c = ud;
    const bool sliced = s->n_slices > 1;
    if (c->convert) {
        if (!s->dst->data) return GEMMAC_OK;   /* not in this checkpoint (optional, or derived and not derived) */
        /* an optional tensor the arch's finish aliased to another (the tied LM head) */
        if (s->optional)
            for (int i = 0; i < c->n; i++)
                for (int k = 0; k < c->t[i].n_slices; k++)
                    if (c->t[i].src[k] && c->t[i].src[k]->data == s->dst->data) return GEMMAC_OK;
    } else if (s->optional && s->role != GM_ROLE_ROPE_FREQS && !s->released) {
        return GEMMAC_OK;                       /* real files leave optional tensors out (tied output, shared KV) */
    }
    if (strlen(s->gguf) >= sizeof c->t[0].name)
        return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tensor name %s is too long", s->gguf);
    out_tensor *t = sliced && s->slice > 0 ? find_out(c, s->gguf) : NULL;
    if (sliced && s->slice > 0) {
        if (!t) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "%s: slice %d before slice 0", s->gguf, s->slice);
        t->src[s->slice] = s->dst;
        return GEMMAC_OK;
    }
    if (find_out(c, s->gguf)) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "the manifest declares %s twice", s->gguf);
    if (c->n == c->cap) {
        const int cap = c->cap ? c->cap * 2 : 512;
        out_tensor *nt = realloc(c->t, (size_t)cap * sizeof *nt);
        if (!nt) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
        c->t = nt;
        c->cap = cap;
    }
    t = &c->t[c->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", s->gguf);
    t->n_dims = s->n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = d < s->n_dims ? s->ne[d] : 1;
    t->rows_per_slice = 1;
    for (int d = 1; d < s->n_dims; d++) t->rows_per_slice *= (uint64_t)s->ne[d];
    t->n_slices = sliced ? s->n_slices : 1;
    if (sliced) {
        if (s->n_dims >= 4) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "%s: 4 dims and slices", s->gguf);
        t->ne[t->n_dims++] = s->n_slices;
    }
    t->rows = t->rows_per_slice * (uint64_t)t->n_slices;
    t->data_rows = t->rows;
    if (s->role == GM_ROLE_TABLE && c->table_rows > s->ne[1] && s->n_dims == 2 && !sliced) {
        t->ne[1] = c->table_rows;
        t->rows = t->rows_per_slice = (uint64_t)c->table_rows;
    }
    t->role = s->role;
    t->src = calloc((size_t)t->n_slices, sizeof *t->src);
    if (!t->src) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
    t->src[sliced ? s->slice : 0] = s->dst;
    c->n++;
    return GEMMAC_OK;
}

static void collect_free(collect *c) {
    for (int i = 0; i < c->n; i++) free(c->t[i].src);
    free(c->t);
}

/* ==== random values ==== */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed, uint64_t tensor, uint64_t row) {
    uint64_t x = seed ^ (tensor * 0xd1b54a32d192ed03ull) ^ (row * 0x8cb92ba72f3d8dd7ull);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng *r) { /* xoshiro256+ */
    const uint64_t res = r->s[0] + r->s[3], t = r->s[1] << 17;
    r->s[2] ^= r->s[0];
    r->s[3] ^= r->s[1];
    r->s[1] ^= r->s[2];
    r->s[0] ^= r->s[3];
    r->s[2] ^= t;
    r->s[3] = rotl(r->s[3], 45);
    return res;
}

/* About N(0, 1): the sum of four 16-bit uniforms, centred and scaled to unit variance (range ±3.46). */
static inline float rng_normal(rng *r) {
    const uint64_t x = rng_next(r);
    const float sum = (float)((x & 0xffff) + ((x >> 16) & 0xffff) + ((x >> 32) & 0xffff) + (x >> 48));
    return (sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

static inline float rng_uniform(rng *r) { return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f); }

/* One row of n values for a tensor of this role and name. */
static void random_row(const out_tensor *t, rng *r, float *dst, int64_t n) {
    switch (t->role) {
    case GM_ROLE_MATRIX: {
        const float s = 0.5f / sqrtf((float)t->ne[0]);
        for (int64_t i = 0; i < n; i++) dst[i] = s * rng_normal(r);
        break;
    }
    case GM_ROLE_EMBED:
    case GM_ROLE_TABLE: {
        const float s = 1.0f / sqrtf((float)t->ne[0]);
        for (int64_t i = 0; i < n; i++) dst[i] = s * rng_normal(r);
        break;
    }
    case GM_ROLE_NORM: /* Gemma 3 stores w + 1, Gemma 3n / 4 the raw weight: both about 1 */
        for (int64_t i = 0; i < n; i++) dst[i] = 1.0f + 0.05f * rng_normal(r);
        break;
    case GM_ROLE_ROPE_FREQS:
        for (int64_t i = 0; i < n; i++) dst[i] = 1.0f;
        break;
    case GM_ROLE_VECTOR:
        if (strstr(t->name, "layer_output_scale"))          /* the layer scalar: 0.5 to 1 */
            for (int64_t i = 0; i < n; i++) dst[i] = 0.5f + 0.5f * rng_uniform(r);
        else if (strstr(t->name, "coef"))                    /* AltUp coefficients: small */
            for (int64_t i = 0; i < n; i++) dst[i] = 0.05f * rng_normal(r);
        else                                                  /* router and expert scales, correct scale: ~1 */
            for (int64_t i = 0; i < n; i++) dst[i] = 1.0f + 0.05f * rng_normal(r);
        break;
    }
}

/* ==== filling the file ==== */

typedef struct fill_ctx {
    out_tensor *t;
    uint64_t seed;
    gm_pool *pool;
    int n_threads;
    float **row_buf;           /* [n_threads] rows of the widest tensor */
    float **src_buf;           /* [n_threads] convert: a source row as f32 */
    /* the chunk being filled */
    uint64_t ti;
    int64_t row0, n_rows;
    uint8_t *out;
    bool convert;
    /* progress */
    uint64_t done_bytes, total_bytes;
    gemmac_progress_fn progress;
    void *progress_ud;
    bool aborted;
} fill_ctx;

static void fill_worker(void *arg, int ith, int nth) {
    fill_ctx *f = arg;
    const out_tensor *t = &f->t[f->ti];
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    const uint64_t rb = gm_row_bytes(tr, t->ne[0]);
    const int64_t per = (f->n_rows + nth - 1) / nth, a = (int64_t)ith * per;
    const int64_t b = a + per < f->n_rows ? a + per : f->n_rows;
    float *row = f->row_buf[ith];
    for (int64_t k = a; k < b; k++) {
        const uint64_t r = (uint64_t)(f->row0 + k);
        if (r >= t->data_rows) {
            memset(row, 0, (size_t)t->ne[0] * sizeof(float));
        } else if (f->convert) {
            const gm_tensor *src = t->src[r / t->rows_per_slice];
            const uint64_t lr = r % t->rows_per_slice;
            const uint8_t *sp = (const uint8_t *)src->data + lr * src->row_bytes;
            if (src->type == GM_TYPE_F32) memcpy(row, sp, (size_t)t->ne[0] * sizeof(float));
            else gm_type_traits_of(src->type)->dequantize(sp, row, t->ne[0]);
        } else if (t->fixed) {
            memcpy(row, t->fixed + r * (uint64_t)t->ne[0], (size_t)t->ne[0] * sizeof(float));
        } else {
            rng g;
            rng_seed(&g, f->seed, f->ti, r);
            random_row(t, &g, row, t->ne[0]);
        }
        uint8_t *dst = f->out + (uint64_t)k * rb;
        if (t->type == GM_TYPE_F32) memcpy(dst, row, (size_t)t->ne[0] * sizeof(float));
        else tr->quantize(row, dst, t->ne[0]);
    }
}

static gemmac_status fill_rows(void *ud, uint64_t i, int64_t row0, int64_t n_rows, void *buf, uint64_t n_bytes,
                               gm_error *err) {
    fill_ctx *f = ud;
    f->ti = i;
    f->row0 = row0;
    f->n_rows = n_rows;
    f->out = buf;
    if (f->pool && n_rows > 1) gm_pool_run(f->pool, fill_worker, f);
    else fill_worker(f, 0, 1);
    f->done_bytes += n_bytes;
    if (f->progress && !f->progress((float)((double)f->done_bytes / (double)f->total_bytes), f->progress_ud)) {
        f->aborted = true;
        return gm_fail(err, GEMMAC_ERR_ABORTED, "aborted by the progress callback");
    }
    return GEMMAC_OK;
}

/* ==== tokenizer keys ==== */

/* Copies every tokenizer.* key of src, the token arrays padded to n_vocab with "[PADi]" tokens (score -1000,
 * type UNUSED) as llama.cpp's converter pads a vocabulary smaller than the embedding. */
static gemmac_status copy_tokenizer(gm_gguf_writer *w, const char *src_path, int32_t n_vocab, gm_error *err) {
    gm_gguf *g;
    gemmac_status st = gm_gguf_open(src_path, &g, err);
    if (st != GEMMAC_OK) return gm_fail(err, st, "tokenizer source %s: %s", src_path, err ? err->msg : "");
    uint64_t n_tok;
    const gm_str *toks;
    if ((st = gm_gguf_get_str_arr(g, "tokenizer.ggml.tokens", &n_tok, &toks, err))) {
        gm_gguf_close(g);
        return gm_fail(err, st, "tokenizer source %s: %s", src_path, err ? err->msg : "");
    }
    if (n_tok > (uint64_t)n_vocab) {
        gm_gguf_close(g);
        return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tokenizer source %s has %llu tokens, more than the %d rows of the embedding",
                       src_path, (unsigned long long)n_tok, n_vocab);
    }
    const size_t n = (size_t)n_vocab;
    char **strs = calloc(n, sizeof *strs);
    float *scores = malloc(n * sizeof *scores);
    int32_t *types = malloc(n * sizeof *types);
    if (!strs || !scores || !types) {
        st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory for the tokenizer");
        goto done;
    }
    const void *sdata = NULL, *tdata = NULL;
    uint64_t ns = 0, nt = 0;
    if (gm_gguf_find_kv(g, "tokenizer.ggml.scores")) gm_gguf_get_arr(g, "tokenizer.ggml.scores", GM_GGUF_FLOAT32, &ns, &sdata, NULL);
    if (gm_gguf_find_kv(g, "tokenizer.ggml.token_type"))
        gm_gguf_get_arr(g, "tokenizer.ggml.token_type", GM_GGUF_INT32, &nt, &tdata, NULL);
    for (size_t i = 0; i < n; i++) {
        if (i < n_tok) {
            strs[i] = malloc((size_t)toks[i].len + 1);
            if (strs[i]) {
                memcpy(strs[i], toks[i].ptr, (size_t)toks[i].len);
                strs[i][toks[i].len] = '\0';
            }
            scores[i] = 0.0f;
            types[i] = 1;
            if (sdata && i < ns) memcpy(&scores[i], (const float *)sdata + i, sizeof(float));
            if (tdata && i < nt) memcpy(&types[i], (const int32_t *)tdata + i, sizeof(int32_t));
        } else {
            strs[i] = malloc(32);
            if (strs[i]) snprintf(strs[i], 32, "[PAD%zu]", i);
            scores[i] = -1000.0f;
            types[i] = 5; /* UNUSED */
        }
        if (!strs[i]) {
            st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory for the tokenizer");
            goto done;
        }
    }
    for (uint64_t k = 0; k < gm_gguf_n_kv(g); k++) {
        const gm_gguf_kv *kv = gm_gguf_kv_at(g, k);
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10) != 0) continue;
        if (gm_str_eq(kv->key, "tokenizer.ggml.tokens"))
            gm_gguf_writer_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)strs, n);
        else if (gm_str_eq(kv->key, "tokenizer.ggml.scores")) gm_gguf_writer_arr_f32(w, "tokenizer.ggml.scores", scores, n);
        else if (gm_str_eq(kv->key, "tokenizer.ggml.token_type"))
            gm_gguf_writer_arr_i32(w, "tokenizer.ggml.token_type", types, n);
        else gm_gguf_writer_kv_copy(w, NULL, kv);
    }
done:
    if (strs)
        for (size_t i = 0; i < n; i++) free(strs[i]);
    free(strs);
    free(scores);
    free(types);
    gm_gguf_close(g);
    return st;
}

/* A vocabulary both gemmac and llama.cpp load, for checkpoints without a tokenizer: SentencePiece ("llama")
 * with <pad> <eos> <bos> <unk> at Gemma's ids 0-3, the 256 byte tokens <0x00>..<0xFF> (when they fit), then
 * "[PADi]" up to n_vocab. Text tokenizes to bytes; ids are what matters for such a model. */
static gemmac_status placeholder_tokenizer(gm_gguf_writer *w, int32_t n_vocab, gm_error *err) {
    if (n_vocab < 4) return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "a vocabulary of %d tokens is too small for a placeholder", n_vocab);
    const size_t n = (size_t)n_vocab;
    char **strs = calloc(n, sizeof *strs);
    float *scores = malloc(n * sizeof *scores);
    int32_t *types = malloc(n * sizeof *types);
    gemmac_status st = GEMMAC_OK;
    if (!strs || !scores || !types) {
        st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory for the tokenizer");
        goto done;
    }
    static const char *const special[4] = {"<pad>", "<eos>", "<bos>", "<unk>"};
    const bool bytes = n >= 260;
    for (size_t i = 0; i < n; i++) {
        strs[i] = malloc(32);
        if (!strs[i]) {
            st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory for the tokenizer");
            goto done;
        }
        if (i < 4) {
            snprintf(strs[i], 32, "%s", special[i]);
            types[i] = i == 3 ? 2 : 3; /* UNKNOWN, CONTROL */
            scores[i] = 0.0f;
        } else if (bytes && i < 260) {
            snprintf(strs[i], 32, "<0x%02X>", (unsigned)(i - 4));
            types[i] = 6; /* BYTE */
            scores[i] = 0.0f;
        } else {
            snprintf(strs[i], 32, "[PAD%zu]", i);
            types[i] = 5; /* UNUSED */
            scores[i] = -1000.0f;
        }
    }
    gm_gguf_writer_str(w, "tokenizer.ggml.model", "llama");
    gm_gguf_writer_str(w, "tokenizer.ggml.pre", "default");
    gm_gguf_writer_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)strs, n);
    gm_gguf_writer_arr_f32(w, "tokenizer.ggml.scores", scores, n);
    gm_gguf_writer_arr_i32(w, "tokenizer.ggml.token_type", types, n);
    gm_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", 2);
    gm_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", 1);
    gm_gguf_writer_u32(w, "tokenizer.ggml.unknown_token_id", 3);
    gm_gguf_writer_u32(w, "tokenizer.ggml.padding_token_id", 0);
    gm_gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", true);
    gm_gguf_writer_bool(w, "tokenizer.ggml.add_eos_token", false);
    gm_gguf_writer_bool(w, "tokenizer.ggml.add_space_prefix", false);
done:
    if (strs)
        for (size_t i = 0; i < n; i++) free(strs[i]);
    free(strs);
    free(scores);
    free(types);
    return st;
}

/* ==== the common writer ==== */

typedef struct write_job {
    const gm_arch_impl *arch;
    const gm_hparams *hp;
    collect *c;
    const char *general_name, *size_label;
    int ftype;
    const gemmac_write_params *p;
    bool convert;
    const gm_tokenizer *tok;    /* convert: the checkpoint's own tokenizer (tokenizer.json), if any */
} write_job;

static gemmac_status write_file(const write_job *job, const char *path, gm_error *err) {
    const ftype_info *ft = &k_ftypes[job->ftype];
    collect *c = job->c;
    if (!job->arch->write_hparams)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "architecture %s cannot write its metadata yet (no write_hparams)",
                       job->arch->name);
    for (int i = 0; i < c->n; i++)
        for (int k = 0; k < c->t[i].n_slices; k++)
            if (job->convert && !c->t[i].src[k])
                return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tensor %s: slice %d is missing", c->t[i].name, k);
    gm_type_rule rule = {.ftype = job->ftype, .n_layer = job->hp->n_layer};
    for (int i = 0; i < c->n; i++)
        if (strstr(c->t[i].name, "attn_v.weight")) rule.n_attn_v++;
    for (int i = 0; i < c->n; i++) c->t[i].type = gm_synth_pick_type(&rule, c->t[i].name, c->t[i].n_dims, c->t[i].ne);

    gm_gguf_writer *w = gm_gguf_writer_new();
    if (!w) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
    gemmac_status st;
    gm_gguf_writer_str(w, "general.architecture", job->arch->name);
    gm_gguf_writer_str(w, "general.type", "model");
    gm_gguf_writer_str(w, "general.name", job->general_name);
    if (job->size_label) gm_gguf_writer_str(w, "general.size_label", job->size_label);
    if ((st = job->arch->write_hparams(job->hp, w, err))) goto done;
    if (job->p->tokenizer_from) st = copy_tokenizer(w, job->p->tokenizer_from, job->hp->n_vocab, err);
    else if (job->tok) st = gm_tokenizer_write_gguf(job->tok, w, job->hp->n_vocab, err);
    else st = placeholder_tokenizer(w, job->hp->n_vocab, err);
    if (st) goto done;
    if (ft->quant != GM_TYPE_COUNT || ft->base == GM_TYPE_Q8_0) gm_gguf_writer_u32(w, "general.quantization_version", 2);
    gm_gguf_writer_u32(w, "general.file_type", ft->file_type);

    int64_t widest = 1;
    for (int i = 0; i < c->n; i++) {
        out_tensor *t = &c->t[i];
        if ((st = gm_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, err))) goto done;
        if (t->ne[0] > widest) widest = t->ne[0];
    }
    fill_ctx f = {.t = c->t, .seed = job->p->seed, .convert = job->convert, .progress = job->p->progress,
                  .progress_ud = job->p->progress_user_data};
    f.total_bytes = gm_gguf_writer_file_size(w);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    f.n_threads = job->p->n_threads > 0 ? job->p->n_threads : (int)(ncpu > 0 ? ncpu : 1);
    if (f.n_threads > 64) f.n_threads = 64;
    if (f.n_threads > 1 && gm_pool_new(f.n_threads, &f.pool, err) != GEMMAC_OK) f.n_threads = 1;
    f.row_buf = calloc((size_t)f.n_threads, sizeof *f.row_buf);
    if (!f.row_buf) st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
    for (int k = 0; !st && k < f.n_threads; k++)
        if (!(f.row_buf[k] = malloc((size_t)widest * sizeof(float))))
            st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
    if (!st) st = gm_gguf_writer_write_rows(w, path, fill_rows, &f, 32ull << 20, err);
    if (!st && f.progress) f.progress(1.0f, f.progress_ud);
    if (f.row_buf)
        for (int k = 0; k < f.n_threads; k++) free(f.row_buf[k]);
    free(f.row_buf);
    gm_pool_free(f.pool);
done:
    gm_gguf_writer_free(w);
    return st;
}

/* ==== public entry points ==== */

gemmac_write_params gemmac_write_default_params(void) {
    gemmac_write_params p = {.type = "f16", .seed = 42, .tokenizer_from = NULL, .n_threads = 0};
    return p;
}

static gemmac_status finish_err(gemmac_status st, const gm_error *e, const char *what, char *errbuf, size_t size) {
    if (st != GEMMAC_OK && errbuf && size)
        snprintf(errbuf, size, "%s: %s", what, e->msg[0] ? e->msg : gemmac_status_str(st));
    return st;
}

static gemmac_status check_type(const gemmac_write_params *p, int *ftype, gm_error *err) {
    *ftype = gm_synth_type_index(p->type);
    if (*ftype < 0)
        return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "unknown type '%s' (types: %s)",
                       p->type ? gm_show(p->type, strlen(p->type)).s : "(none)", gm_synth_type_list());
    return GEMMAC_OK;
}

gemmac_status gemmac_synth(const char *preset_name, const char *path, const gemmac_write_params *params, char *errbuf,
                           size_t err_size) {
    gm_error err = {0};
    gemmac_write_params defaults = gemmac_write_default_params();
    const gemmac_write_params *p = params ? params : &defaults;
    gemmac_status st;
    int ftype;
    gm_hparams *hp = calloc(1, sizeof *hp);
    gemmac_model *m = calloc(1, sizeof *m);
    collect c = {0};
    const gm_arch_impl *arch = NULL;
    if (!hp || !m) {
        st = gm_fail(&err, GEMMAC_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    if (!path || !*path) {
        st = gm_fail(&err, GEMMAC_ERR_INVALID_ARG, "no output path");
        goto done;
    }
    if ((st = check_type(p, &ftype, &err)) || (st = gm_synth_preset_hparams(preset_name, hp, &arch, &err))) goto done;
    const preset *pr = find_preset(preset_name);
    /* the manifest over a model that has only hyper-parameters; the arch's finish derives rope_freqs */
    m->arch = arch;
    m->hp = *hp;
    if (!(m->w.layer = calloc((size_t)hp->n_layer, sizeof *m->w.layer))) {
        st = gm_fail(&err, GEMMAC_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    if (arch->gguf_pads_tables) c.table_rows = hp->n_vocab;
    if ((st = arch->manifest(&m->hp, &m->w, collect_one, &c, &err))) goto done;
    if (arch->finish && (st = arch->finish(m, &err))) goto done;
    for (int i = 0; i < c.n; i++) {
        out_tensor *t = &c.t[i];
        if (t->role != GM_ROLE_ROPE_FREQS) continue;
        const gm_tensor *rf = &m->w.rope_freqs;
        if (rf->data && rf->type == GM_TYPE_F32 && rf->ne[0] == t->ne[0] && t->rows == 1) {
            t->fixed = rf->data;
        } else {
            /* Gemma 4's proportional RoPE: a quarter of the pairs rotate (factor 1), the others 1e30 */
            float *v = gm_model_alloc(m, (size_t)t->ne[0] * t->rows * sizeof(float));
            if (!v) {
                st = gm_fail(&err, GEMMAC_ERR_NO_MEMORY, "out of memory");
                goto done;
            }
            for (int64_t k = 0; k < t->ne[0] * (int64_t)t->rows; k++) v[k] = (k % t->ne[0]) < t->ne[0] / 4 ? 1.0f : 1e30f;
            t->fixed = v;
        }
    }
    char gname[160];
    snprintf(gname, sizeof gname, "%s (gemmac synth, seed %llu)", pr->general_name, (unsigned long long)p->seed);
    write_job job = {arch, hp, &c, gname, pr->size_label, ftype, p, false, NULL};
    st = write_file(&job, path, &err);
done:
    collect_free(&c);
    if (m) {
        for (int32_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
        free(m->owned);
        free(m->w.layer);
        free(m);
    }
    free(hp);
    return finish_err(st, &err, preset_name ? preset_name : "synth", errbuf, err_size);
}

gemmac_status gemmac_convert(const char *hf_dir, const char *path, const gemmac_write_params *params, char *errbuf,
                             size_t err_size) {
    gm_error err = {0};
    gemmac_write_params defaults = gemmac_write_default_params();
    const gemmac_write_params *p = params ? params : &defaults;
    gemmac_status st;
    int ftype;
    collect c = {.convert = true};
    gemmac_model *m = NULL;
    if ((st = check_type(p, &ftype, &err))) return finish_err(st, &err, hf_dir ? hf_dir : "convert", errbuf, err_size);
    if (!path || !*path) {
        st = gm_fail(&err, GEMMAC_ERR_INVALID_ARG, "no output path");
        return finish_err(st, &err, hf_dir ? hf_dir : "convert", errbuf, err_size);
    }
    char lerr[512];
    st = gemmac_model_load(hf_dir, NULL, &m, lerr, sizeof lerr);
    if (st != GEMMAC_OK) {
        if (errbuf && err_size) snprintf(errbuf, err_size, "%s", lerr);
        return st;
    }
    if (m->gguf) {
        st = gm_fail(&err, GEMMAC_ERR_INVALID_ARG, "is a GGUF file; convert reads Hugging Face directories");
        goto done;
    }
    if (m->arch->gguf_pads_tables) c.table_rows = m->hp.n_vocab;
    if ((st = m->arch->manifest(&m->hp, &m->w, collect_one, &c, &err))) goto done;
    write_job job = {m->arch, &m->hp, &c, m->name, NULL, ftype, p, true, m->tok};
    st = write_file(&job, path, &err);
done:
    collect_free(&c);
    gemmac_model_free(m);
    return finish_err(st, &err, hf_dir, errbuf, err_size);
}
