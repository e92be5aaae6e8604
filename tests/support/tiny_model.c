/* tiny_model.c: the tiny random Gemma 3 of tiny_model.h: seeded weights, an SPM vocabulary, and the GGUF file
 * written with gguf_builder, with one breakage at a time applied while writing. Weights are drawn in a fixed
 * order before any option is looked at, so a broken file differs from the good one only where it was broken. */
#include "tiny_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_builder.h"

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "tiny_model: out of memory\n");
        abort();
    }
    return p;
}

/* splitmix64: a small, well-mixed, deterministic generator */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* uniform in [-1, 1) */
static float uniform(uint64_t *s) { return (float)((double)(next_u64(s) >> 11) * 0x1.0p-52 - 1.0); }

static float *rand_vec(uint64_t *s, size_t n, float center, float amp) {
    float *v = xcalloc(n, sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = center + amp * uniform(s);
    return v;
}
/* A [rows][in] matrix with entries of standard deviation 1/sqrt(in): outputs keep the inputs' magnitude. */
static float *rand_mat(uint64_t *s, int64_t rows, int64_t in) {
    return rand_vec(s, (size_t)(rows * in), 0.0f, sqrtf(3.0f / (float)in));
}
/* Norm weights around 1 (GGUF stores Gemma 3's 1 + w). */
static float *rand_norm(uint64_t *s, int64_t n) { return rand_vec(s, (size_t)n, 1.0f, 0.25f); }

gm_tiny_opts gm_tiny_default_opts(void) {
    gm_tiny_opts o;
    memset(&o, 0, sizeof o);
    o.seed = 0x6d6d6167ull;
    o.n_layer = 7;
    o.n_ctx_train = 64;
    o.window = 5;
    o.rope_base = 1e6f;
    o.rope_scale = 1.0f;
    o.arch = "gemma3";
    o.retype = GM_TYPE_F32;
    o.embd_amp = 1.0f;
    o.head_dim = 16;
    return o;
}

/* ---- vocabulary: 6 specials, 256 byte tokens, a few words ---- */
#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */
static const char *const k_specials[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"};
static const int32_t k_special_types[] = {3, 3, 3, 2, 3, 3}; /* control, unknown */
static const char *const k_words[] = {
    SP,       SP "the", SP "a",  SP "cat", SP "dog", SP "sat", SP "on", SP "mat", SP "hello", SP "world",
    "the",    "he",     "at",    "on",     "or",     "ld",     "og",    "ca",     "sa",       "do",
    "ma",     "wo",     "rl",    SP "t",   SP "th",  SP "c",   SP "s",  SP "d",   SP "m",     SP "w",
    "e",      "t",      "h",     "o",      "n",      "s",      "!",     "\n\n",
};
#define N_SPECIAL ((int32_t)(sizeof k_specials / sizeof k_specials[0]))
#define N_WORDS ((int32_t)(sizeof k_words / sizeof k_words[0]))

static void add_vocab(gm_gb *b, const gm_tiny *t) {
    const int32_t V = t->n_vocab;
    char **toks = xcalloc((size_t)V, sizeof *toks);
    float *scores = xcalloc((size_t)V, sizeof *scores);
    int32_t *types = xcalloc((size_t)V, sizeof *types);
    int32_t id = 0;
    for (int32_t i = 0; i < N_SPECIAL; i++, id++) {
        toks[id] = xcalloc(strlen(k_specials[i]) + 1, 1);
        strcpy(toks[id], k_specials[i]);
        types[id] = k_special_types[i];
    }
    for (int32_t i = 0; i < 256; i++, id++) {
        toks[id] = xcalloc(8, 1);
        snprintf(toks[id], 8, "<0x%02X>", (unsigned)i);
        types[id] = 6; /* byte */
    }
    for (int32_t i = 0; i < N_WORDS; i++, id++) {
        toks[id] = xcalloc(strlen(k_words[i]) + 1, 1);
        strcpy(toks[id], k_words[i]);
        types[id] = !strcmp(k_words[i], "\n\n") ? 4 : 1; /* user-defined, normal */
        scores[id] = -(float)i;
    }
    gm_gb_str(b, "tokenizer.ggml.model", "llama");
    gm_gb_str_arr(b, "tokenizer.ggml.tokens", (uint64_t)V, (const char *const *)toks);
    gm_gb_arr(b, "tokenizer.ggml.scores", GM_GGUF_FLOAT32, (uint64_t)V, scores);
    gm_gb_arr(b, "tokenizer.ggml.token_type", GM_GGUF_INT32, (uint64_t)V, types);
    gm_gb_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
    gm_gb_u32(b, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
    gm_gb_u32(b, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk);
    gm_gb_u32(b, "tokenizer.ggml.padding_token_id", (uint32_t)t->pad);
    gm_gb_bool(b, "tokenizer.ggml.add_bos_token", true);
    gm_gb_bool(b, "tokenizer.ggml.add_space_prefix", false);
    for (int32_t i = 0; i < V; i++) free(toks[i]);
    free(toks);
    free(scores);
    free(types);
}

/* ---- hyper-parameter keys with overrides ---- */
static const gm_tiny_kv *find_override(const gm_tiny_opts *o, const char *key) {
    for (int i = 0; i < GM_TINY_MAX_OVERRIDES; i++)
        if (o->kv[i].key && !strcmp(o->kv[i].key, key)) return &o->kv[i];
    return NULL;
}

static void put_u32(gm_gb *b, const gm_tiny_opts *o, const char *key, uint32_t v) {
    const gm_tiny_kv *ov = find_override(o, key);
    if (ov && ov->remove) return;
    gm_gb_u32(b, key, ov ? ov->value : v);
}

static void put_f32(gm_gb *b, const gm_tiny_opts *o, const char *key, float v) {
    const gm_tiny_kv *ov = find_override(o, key);
    if (ov && ov->remove) return;
    gm_gb_f32(b, key, v);
}

static bool is_written_key(const char *key) {
    static const char *const keys[] = {
        "gemma3.context_length", "gemma3.embedding_length", "gemma3.block_count", "gemma3.feed_forward_length",
        "gemma3.attention.head_count", "gemma3.attention.head_count_kv", "gemma3.attention.key_length",
        "gemma3.attention.value_length", "gemma3.attention.sliding_window", "gemma3.attention.layer_norm_rms_epsilon",
        "gemma3.rope.freq_base", "gemma3.rope.scaling.factor"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(keys[i], key)) return true;
    return false;
}

/* ---- tensors with breakage ---- */
/* Writes tensor name of shape [ne0, ne1] (ne1 = 1: a vector) from f32 data, applying the options; a retyped
 * tensor's data is replaced by its dequantized values so callers see what the engine sees. */
static void put_tensor(gm_gb *b, const gm_tiny_opts *o, const char *name, int64_t ne0, int64_t ne1, float *data) {
    if (o->omit_tensor && !strcmp(o->omit_tensor, name)) return;
    const int n_dims = ne1 > 1 ? 2 : 1;
    if (o->reshape_tensor && !strcmp(o->reshape_tensor, name)) {
        gm_gb_tensor(b, name, GM_TYPE_F32, n_dims, (int64_t[]){ne0 + 32, ne1}, NULL);
        return;
    }
    if (o->retype_tensor && !strcmp(o->retype_tensor, name) && o->retype != GM_TYPE_F32) {
        const gm_type_traits *tr = gm_type_traits_of(o->retype);
        if (tr && tr->quantize && tr->dequantize && ne0 % tr->block_size == 0) {
            const uint64_t row = gm_row_bytes(tr, ne0);
            uint8_t *q = xcalloc((size_t)(row * (uint64_t)ne1), 1);
            for (int64_t r = 0; r < ne1; r++) {
                tr->quantize(data + r * ne0, q + (uint64_t)r * row, ne0);
                tr->dequantize(q + (uint64_t)r * row, data + r * ne0, ne0);
            }
            gm_gb_tensor(b, name, o->retype, n_dims, (int64_t[]){ne0, ne1}, q);
            free(q);
        } else {
            gm_gb_tensor(b, name, o->retype, n_dims, (int64_t[]){ne0, ne1}, NULL); /* no kernels: zeros */
        }
        return;
    }
    gm_gb_tensor(b, name, GM_TYPE_F32, n_dims, (int64_t[]){ne0, ne1}, data);
}

gm_tiny *gm_tiny_new(const gm_tiny_opts *opts) {
    const gm_tiny_opts o = opts ? *opts : gm_tiny_default_opts();
    gm_tiny *t = xcalloc(1, sizeof *t);
    t->n_embd = 64;
    t->n_layer = o.n_layer;
    t->n_head = 4;
    t->n_head_kv = 2;
    t->head_dim = o.head_dim > 0 ? o.head_dim : 16;
    t->n_ff = 96;
    t->n_ctx_train = o.n_ctx_train;
    t->window = o.window;
    t->norm_eps = 1e-6f;
    t->rope_base = o.rope_base;
    t->rope_scale = o.rope_scale > 1.0f ? o.rope_scale : 1.0f;
    t->n_vocab = N_SPECIAL + 256 + N_WORDS;
    t->pad = 0;
    t->eos = 1;
    t->bos = 2;
    t->unk = 3;
    t->start_of_turn = 4;
    t->end_of_turn = 5;

    const int64_t H = t->n_embd, V = t->n_vocab, D = t->head_dim, F = t->n_ff;
    const int64_t qd = (int64_t)t->n_head * D, kvd = (int64_t)t->n_head_kv * D;
    uint64_t s = o.seed;
    t->tok_embd = rand_vec(&s, (size_t)(V * H), 0.0f, o.embd_amp > 0 ? o.embd_amp : 1.0f);
    t->output_norm = rand_norm(&s, H);
    t->layer = xcalloc((size_t)(t->n_layer > 0 ? t->n_layer : 1), sizeof *t->layer);
    for (int32_t il = 0; il < t->n_layer; il++) {
        gm_tiny_layer *l = &t->layer[il];
        l->attn_norm = rand_norm(&s, H);
        l->wq = rand_mat(&s, qd, H);
        l->wk = rand_mat(&s, kvd, H);
        l->wv = rand_mat(&s, kvd, H);
        l->wo = rand_mat(&s, H, qd);
        l->q_norm = rand_norm(&s, D);
        l->k_norm = rand_norm(&s, D);
        l->post_attn_norm = rand_norm(&s, H);
        l->ffn_norm = rand_norm(&s, H);
        l->ffn_gate = rand_mat(&s, F, H);
        l->ffn_up = rand_mat(&s, F, H);
        l->ffn_down = rand_mat(&s, H, F);
        l->post_ffw_norm = rand_norm(&s, H);
    }

    gm_gb *b = gm_gb_new();
    gm_gb_str(b, "general.architecture", o.arch ? o.arch : "gemma3");
    gm_gb_str(b, "general.name", "tiny-gemma3");
    put_u32(b, &o, "gemma3.context_length", (uint32_t)t->n_ctx_train);
    put_u32(b, &o, "gemma3.embedding_length", (uint32_t)H);
    put_u32(b, &o, "gemma3.block_count", (uint32_t)t->n_layer);
    put_u32(b, &o, "gemma3.feed_forward_length", (uint32_t)F);
    put_u32(b, &o, "gemma3.attention.head_count", (uint32_t)t->n_head);
    put_u32(b, &o, "gemma3.attention.head_count_kv", (uint32_t)t->n_head_kv);
    put_u32(b, &o, "gemma3.attention.key_length", (uint32_t)D);
    put_u32(b, &o, "gemma3.attention.value_length", (uint32_t)D);
    if (t->window > 0) put_u32(b, &o, "gemma3.attention.sliding_window", (uint32_t)t->window);
    put_f32(b, &o, "gemma3.attention.layer_norm_rms_epsilon", t->norm_eps);
    put_f32(b, &o, "gemma3.rope.freq_base", t->rope_base);
    if (t->rope_scale > 1.0f) {
        gm_gb_str(b, "gemma3.rope.scaling.type", "linear");
        put_f32(b, &o, "gemma3.rope.scaling.factor", t->rope_scale);
    }
    for (int i = 0; i < GM_TINY_MAX_OVERRIDES; i++) /* overrides of keys not written above */
        if (o.kv[i].key && !o.kv[i].remove && !is_written_key(o.kv[i].key)) gm_gb_u32(b, o.kv[i].key, o.kv[i].value);
    add_vocab(b, t);

    put_tensor(b, &o, "token_embd.weight", H, V, t->tok_embd);
    put_tensor(b, &o, "output_norm.weight", H, 1, t->output_norm);
    for (int32_t il = 0; il < t->n_layer; il++) {
        gm_tiny_layer *l = &t->layer[il];
        struct {
            const char *suffix;
            int64_t ne0, ne1;
            float *data;
        } ts[] = {
            {"attn_norm", H, 1, l->attn_norm},       {"attn_q", H, qd, l->wq},
            {"attn_k", H, kvd, l->wk},               {"attn_v", H, kvd, l->wv},
            {"attn_output", qd, H, l->wo},           {"attn_q_norm", D, 1, l->q_norm},
            {"attn_k_norm", D, 1, l->k_norm},        {"post_attention_norm", H, 1, l->post_attn_norm},
            {"ffn_norm", H, 1, l->ffn_norm},         {"ffn_gate", H, F, l->ffn_gate},
            {"ffn_up", H, F, l->ffn_up},             {"ffn_down", F, H, l->ffn_down},
            {"post_ffw_norm", H, 1, l->post_ffw_norm},
        };
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", (int)il, ts[i].suffix);
            put_tensor(b, &o, name, ts[i].ne0, ts[i].ne1, ts[i].data);
        }
    }
    t->file = gm_gb_write(b, &t->file_size);
    gm_gb_free(b);
    return t;
}

void gm_tiny_free(gm_tiny *t) {
    if (!t) return;
    free(t->tok_embd);
    free(t->output_norm);
    for (int32_t il = 0; il < t->n_layer; il++) {
        gm_tiny_layer *l = &t->layer[il];
        float *v[] = {l->attn_norm, l->wq, l->wk, l->wv, l->wo, l->q_norm, l->k_norm, l->post_attn_norm,
                      l->ffn_norm, l->ffn_gate, l->ffn_up, l->ffn_down, l->post_ffw_norm};
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) free(v[i]);
    }
    free(t->layer);
    free(t->file);
    free(t);
}

bool gm_tiny_write_file(const gm_tiny *t, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    const bool ok = fwrite(t->file, 1, t->file_size, f) == t->file_size;
    return fclose(f) == 0 && ok;
}

bool gm_tiny_layer_sliding(const gm_tiny *t, int32_t il) { return t->window > 0 && (il + 1) % 6 != 0; }
