/* model.c: loading a model file (open, pick the architecture, bind weights, build the tokenizer), the
 * public model handle's getters and description, weight binding helpers shared by architectures, and what
 * their forwards share (the scratch buffers, the pending residual update). */
#include "model/model.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "io/hf_config.h"
#include "io/mmap.h"
#include "io/safetensors.h"
#include "kv/kv_cache.h"

static const gm_arch_impl *const g_archs[] = {&gm_arch_gemma3, &gm_arch_gemma3n, &gm_arch_gemma4};

const gm_arch_impl *gm_arch_by_name(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        if (strlen(g_archs[i]->name) == len && memcmp(g_archs[i]->name, name, len) == 0) return g_archs[i];
    return NULL;
}

const gm_arch_impl *gm_arch_by_hf_type(const char *model_type) {
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        for (const char *const *t = g_archs[i]->hf_model_types; t && *t; t++)
            if (strcmp(*t, model_type) == 0) return g_archs[i];
    return NULL;
}

gemmac_model_params gemmac_model_default_params(void) {
    gemmac_model_params p = {.progress = NULL, .progress_user_data = NULL};
    return p;
}

void *gm_model_alloc(gemmac_model *m, size_t n) {
    void **nv = realloc(m->owned, sizeof *nv * (size_t)(m->n_owned + 1));
    if (!nv) return NULL;
    m->owned = nv;
    void *p = malloc(n ? n : 1);
    if (p) m->owned[m->n_owned++] = p;
    return p;
}

/* ---- binding the manifest ---- */

static void shape_str(char *buf, size_t n, const int64_t *ne, int n_dims) {
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < n_dims && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%" PRId64, i ? ", " : "", ne[i]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

/* ne (the file's, 4 or 8 dims, trailing 1) against want[0..n_dims-1]. */
static bool same_shape(const int64_t *ne, int max_dims, const int64_t *want, int n_dims) {
    for (int i = 0; i < max_dims; i++)
        if (ne[i] != (i < n_dims ? want[i] : 1)) return false;
    return true;
}

typedef struct bind_ctx {
    gemmac_model *m;
} bind_ctx;

static gemmac_status bind_one(void *ud, const gm_tensor_spec *s, gm_error *err) {
    gemmac_model *m = ((bind_ctx *)ud)->m;
    gm_tensor *t = s->dst;
    memset(t, 0, sizeof *t);
    const bool sliced = s->n_slices > 1;
    int64_t want[5];
    int want_dims = s->n_dims;
    memcpy(want, s->ne, sizeof s->ne);
    const void *data = NULL;
    gm_type type;
    char full[256];
    const char *shown;
    int64_t file_ne[8];
    int file_dims;
    if (m->gguf) {
        shown = s->gguf;
        const gm_gguf_tensor *gt = gm_gguf_find_tensor(m->gguf, s->gguf);
        if (!gt) {
            if (s->optional) return GEMMAC_OK;
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tensor %s is missing", s->gguf);
        }
        if (sliced) want[want_dims++] = s->n_slices;
        memcpy(file_ne, gt->ne, sizeof gt->ne);
        file_dims = GM_GGUF_MAX_DIMS;
        type = gt->type;
        data = gt->data;
    } else {
        if (!s->hf) return GEMMAC_OK; /* not in checkpoints: the arch's finish derives it */
        snprintf(full, sizeof full, "%s%s", m->hf_prefix, s->hf);
        shown = full;
        const gm_st_tensor *st = gm_st_set_find(m->st, full, NULL);
        if (!st) {
            if (s->optional) return GEMMAC_OK;
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tensor %s (%s) is missing", full, s->gguf);
        }
        gemmac_status ts = gm_st_weight_type(st, &type, err);
        if (ts != GEMMAC_OK) return ts;
        memcpy(file_ne, st->ne, sizeof st->ne);
        file_dims = GM_ST_MAX_DIMS;
        data = st->data;
    }
    if (!same_shape(file_ne, file_dims, want, want_dims)) {
        char got[128], exp[128];
        int nd = file_dims;
        while (nd > 1 && file_ne[nd - 1] == 1) nd--;
        shape_str(got, sizeof got, file_ne, nd);
        shape_str(exp, sizeof exp, want, want_dims);
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tensor %s: shape %s, expected %s", shown, got, exp);
    }
    const gm_type_traits *tr = gm_type_traits_of(type);
    int64_t rows = 1;
    for (int i = 1; i < s->n_dims; i++) rows *= s->ne[i];
    const uint64_t row_bytes = gm_row_bytes(tr, s->ne[0]);
    const uint64_t bytes = row_bytes * (uint64_t)rows;
    if (sliced && m->gguf) data = (const uint8_t *)data + bytes * (uint64_t)s->slice; /* HF: a tensor per slice */
    t->name = m->gguf ? s->gguf : NULL; /* names are the caller's (stack) strings: kept only for GGUF */
    t->type = type;
    for (int i = 0; i < 4; i++) t->ne[i] = i < s->n_dims ? s->ne[i] : 1;
    t->row_bytes = row_bytes;
    t->data = data;
    if (s->role == GM_ROLE_TABLE) gm_map_advise_random(data, bytes); /* stays mapped; rows come in as read */
    m->n_params += (uint64_t)rows * (uint64_t)s->ne[0];
    m->weight_bytes += bytes;
    if (s->role == GM_ROLE_TABLE) m->table_bytes += bytes;
    if ((int)type < GM_TYPE_COUNT) {
        m->type_bytes[type] += bytes;
        m->type_count[type]++;
    }
    const size_t elem = type == GM_TYPE_F32 ? 4 : type == GM_TYPE_F16 || type == GM_TYPE_BF16 ? 2 : 1;
    const bool as_f32 = s->role == GM_ROLE_NORM || s->role == GM_ROLE_VECTOR || s->role == GM_ROLE_ROPE_FREQS;
    const float shift = !m->gguf && s->role == GM_ROLE_NORM ? m->arch->hf_norm_shift : 0.0f;
    const bool misaligned = ((uintptr_t)data % elem) != 0;
    if ((as_f32 && (type != GM_TYPE_F32 || shift != 0.0f)) || misaligned) {
        /* an owned copy: f32 for vectors (shifted norms), or the same type at an aligned address */
        const int64_t n = rows * s->ne[0];
        const bool to_f32 = as_f32;
        void *buf = gm_model_alloc(m, to_f32 ? (size_t)n * sizeof(float) : (size_t)bytes);
        if (!buf) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory converting %s", shown);
        if (to_f32) {
            float *f = buf;
            if (misaligned && type == GM_TYPE_F32) memcpy(f, data, (size_t)n * sizeof(float));
            else if (misaligned) {
                void *tmp = malloc((size_t)bytes);
                if (!tmp) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory converting %s", shown);
                memcpy(tmp, data, (size_t)bytes);
                tr->dequantize(tmp, f, n);
                free(tmp);
            } else if (type == GM_TYPE_F32) memcpy(f, data, (size_t)n * sizeof(float));
            else tr->dequantize(data, f, n);
            for (int64_t i = 0; i < n; i++) f[i] += shift;
            t->type = GM_TYPE_F32;
            t->row_bytes = (uint64_t)s->ne[0] * sizeof(float);
        } else {
            memcpy(buf, data, (size_t)bytes);
        }
        t->data = buf;
    }
    return GEMMAC_OK;
}

gemmac_status gm_model_bind(gemmac_model *m, gm_error *err) {
    if (!m->w.layer) {
        m->w.layer = calloc((size_t)m->hp.n_layer, sizeof *m->w.layer);
        if (!m->w.layer) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
    }
    bind_ctx c = {m};
    gemmac_status st = m->arch->manifest(&m->hp, &m->w, bind_one, &c, err);
    if (st != GEMMAC_OK) return st;
    if (m->arch->finish) st = m->arch->finish(m, err);
    return st;
}

gemmac_status gm_declare(gm_spec_fn fn, void *ud, int idx, const gm_tensor_spec *spec, gm_error *err) {
    char gguf[128], hf[192];
    gm_tensor_spec s = *spec;
    snprintf(gguf, sizeof gguf, spec->gguf, idx);
    s.gguf = gguf;
    if (spec->hf) {
        snprintf(hf, sizeof hf, spec->hf, idx);
        s.hf = hf;
    }
    return fn(ud, &s, err);
}

gemmac_status gm_declare_decoder_layer(gm_spec_fn fn, void *ud, const gm_hparams *hp, int il, gm_layer_weights *lw,
                                       bool skip_shared_kv, gm_error *err) {
    const gm_layer_hparams *l = &hp->layer[il];
    const int64_t H = hp->n_embd, D = l->head_dim, qd = (int64_t)l->n_head * D, kvd = (int64_t)l->n_head_kv * D;
    const int64_t F = l->n_ff;
    const bool shared = l->kv_source != il, kv = !(shared && skip_shared_kv);
    gemmac_status st;
    /* optional K / V of a layer that reads another's cache: released files still have them */
#define DECL(dst, gguf, hf, role, opt, nd, ...) \
    if ((st = gm_declare(fn, ud, il, &(gm_tensor_spec){dst, gguf, hf, nd, {__VA_ARGS__}, role, opt, 0, 0, opt}, err))) \
        return st
    DECL(&lw->attn_norm, "blk.%d.attn_norm.weight", "layers.%d.input_layernorm.weight", GM_ROLE_NORM, false, 1, H);
    DECL(&lw->wq, "blk.%d.attn_q.weight", "layers.%d.self_attn.q_proj.weight", GM_ROLE_MATRIX, false, 2, H, qd);
    if (kv) {
        DECL(&lw->wk, "blk.%d.attn_k.weight", "layers.%d.self_attn.k_proj.weight", GM_ROLE_MATRIX, shared, 2, H, kvd);
        if (!l->v_from_k)
            DECL(&lw->wv, "blk.%d.attn_v.weight", "layers.%d.self_attn.v_proj.weight", GM_ROLE_MATRIX, shared, 2, H,
                 kvd);
        DECL(&lw->k_norm, "blk.%d.attn_k_norm.weight", "layers.%d.self_attn.k_norm.weight", GM_ROLE_NORM, shared, 1, D);
    }
    DECL(&lw->wo, "blk.%d.attn_output.weight", "layers.%d.self_attn.o_proj.weight", GM_ROLE_MATRIX, false, 2, qd, H);
    DECL(&lw->q_norm, "blk.%d.attn_q_norm.weight", "layers.%d.self_attn.q_norm.weight", GM_ROLE_NORM, false, 1, D);
    DECL(&lw->post_attn_norm, "blk.%d.post_attention_norm.weight", "layers.%d.post_attention_layernorm.weight",
         GM_ROLE_NORM, false, 1, H);
    DECL(&lw->ffn_norm, "blk.%d.ffn_norm.weight", "layers.%d.pre_feedforward_layernorm.weight", GM_ROLE_NORM, false,
         1, H);
    DECL(&lw->ffn_gate, "blk.%d.ffn_gate.weight", "layers.%d.mlp.gate_proj.weight", GM_ROLE_MATRIX, false, 2, H, F);
    DECL(&lw->ffn_up, "blk.%d.ffn_up.weight", "layers.%d.mlp.up_proj.weight", GM_ROLE_MATRIX, false, 2, H, F);
    DECL(&lw->ffn_down, "blk.%d.ffn_down.weight", "layers.%d.mlp.down_proj.weight", GM_ROLE_MATRIX, false, 2, F, H);
    DECL(&lw->post_ffw_norm, "blk.%d.post_ffw_norm.weight", "layers.%d.post_feedforward_layernorm.weight",
         GM_ROLE_NORM, false, 1, H);
#undef DECL
    return GEMMAC_OK;
}

static bool report(const gemmac_model_params *p, float v) {
    return !p->progress || p->progress(v, p->progress_user_data);
}

static bool is_directory(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The arch and hyper-parameters of a GGUF file. */
static gemmac_status open_gguf(gemmac_model *m, const char *path, gm_error *err) {
    gemmac_status st = gm_gguf_open(path, &m->gguf, err);
    if (st != GEMMAC_OK) return st;
    gm_str arch;
    st = gm_gguf_get_str(m->gguf, "general.architecture", &arch, err);
    if (st == GEMMAC_ERR_NOT_FOUND) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "no general.architecture key");
    if (st != GEMMAC_OK) return st;
    m->arch = gm_arch_by_name(arch.ptr, arch.len);
    if (!m->arch)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                       "architecture '%.*s' is not supported (supported: gemma3, gemma3n, gemma4)",
                       (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
    gm_str name;
    if (gm_gguf_get_str(m->gguf, "general.name", &name, NULL) == GEMMAC_OK)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(name.len > 127 ? 127 : name.len), name.ptr);
    snprintf(m->source, sizeof m->source, "gguf v%u", gm_gguf_version(m->gguf));
    return m->arch->hparams_gguf(&m->hp, m->gguf, err);
}

/* The arch and hyper-parameters of a Hugging Face checkpoint directory. */
static gemmac_status open_hf(gemmac_model *m, const char *dir, gm_error *err) {
    char cfg_path[4096];
    if (snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir) >= (int)sizeof cfg_path)
        return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "path too long");
    gemmac_status st = gm_hf_config_open(cfg_path, &m->hf, err);
    if (st != GEMMAC_OK) return st;
    gm_hf_model_id id;
    st = gm_hf_config_model_id(m->hf, &id, err);
    if (st == GEMMAC_ERR_NOT_FOUND) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json has no model_type");
    if (st != GEMMAC_OK) return st;
    const char *type = id.text_model_type ? id.text_model_type : id.model_type;
    m->arch = gm_arch_by_hf_type(type);
    if (!m->arch)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                       "config.json model_type '%s' is not supported (supported: gemma3, gemma3n, gemma4, "
                       "gemma4_unified and their _text models)",
                       gm_show(type, strlen(type)).s);
    snprintf(m->name, sizeof m->name, "%s", id.architecture ? id.architecture : type);
    st = m->arch->hparams_hf(&m->hp, gm_hf_config_text(m->hf), err);
    if (st != GEMMAC_OK) return st;
    st = gm_st_set_open(dir, &m->st, err);
    if (st != GEMMAC_OK) return st;
    snprintf(m->source, sizeof m->source, "safetensors (%u file%s)", gm_st_set_n_files(m->st),
             gm_st_set_n_files(m->st) == 1 ? "" : "s");
    static const char *const prefixes[] = {"model.language_model.", "language_model.model.", "model.", ""};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        char probe[96];
        snprintf(probe, sizeof probe, "%sembed_tokens.weight", prefixes[i]);
        if (gm_st_set_find(m->st, probe, NULL)) {
            snprintf(m->hf_prefix, sizeof m->hf_prefix, "%s", prefixes[i]);
            return GEMMAC_OK;
        }
    }
    return gm_fail(err, GEMMAC_ERR_BAD_FILE, "no embed_tokens.weight tensor (tried model.language_model., model.)");
}

gemmac_status gemmac_model_load(const char *path, const gemmac_model_params *params, gemmac_model **out, char *errbuf,
                                size_t err_size) {
    gm_error err = {0};
    gemmac_model_params defaults = gemmac_model_default_params();
    if (!params) params = &defaults;
    gemmac_status st = GEMMAC_OK;
    gemmac_model *m = NULL;
    if (!out || !path) {
        st = gm_fail(&err, GEMMAC_ERR_INVALID_ARG, "model path and output handle are required");
        goto done;
    }
    *out = NULL;
    m = calloc(1, sizeof *m);
    if (!m) {
        st = gm_fail(&err, GEMMAC_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    if (!report(params, 0.0f)) goto aborted;
    const bool hf = is_directory(path);
    st = hf ? open_hf(m, path, &err) : open_gguf(m, path, &err);
    if (st != GEMMAC_OK) goto done;
    if (!report(params, 0.3f)) goto aborted;
    st = gm_model_bind(m, &err);
    if (st != GEMMAC_OK) goto done;
    m->chat_format = m->arch->chat_format;
    if (!report(params, 0.6f)) goto aborted;
    if (m->gguf) {
        st = gm_tokenizer_from_gguf(m->gguf, &m->tok, &err);
        if (st != GEMMAC_OK) goto done;
    } else if (hf) {
        /* DIR/tokenizer.json when present (a broken one is an error); without it, token ids only */
        char tok_path[4200];
        struct stat sb;
        snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", path);
        if (stat(tok_path, &sb) == 0) {
            st = gm_tokenizer_from_hf_json(path, m->chat_format == GM_CHAT_GEMMA4 ? GM_TOK_BPE_GEMMA4 : GM_TOK_SPM,
                                           &m->tok, &err);
            if (st != GEMMAC_OK) goto done;
        }
    }
    if (m->tok && gm_tokenizer_n_tokens(m->tok) > (uint32_t)m->hp.n_vocab) {
        st = gm_fail(&err, GEMMAC_ERR_BAD_FILE, "tokenizer has %u tokens but the embedding has %d rows",
                     gm_tokenizer_n_tokens(m->tok), m->hp.n_vocab);
        goto done;
    }
    /* Touch nothing else now: pages of the mapping come in as the forward pass reads them. */
    if (!report(params, 1.0f)) goto aborted;
    *out = m;
    return GEMMAC_OK;
aborted:
    st = gm_fail(&err, GEMMAC_ERR_ABORTED, "loading aborted by the progress callback");
done:
    gemmac_model_free(m);
    if (errbuf && err_size) {
        const char *msg = err.msg[0] ? err.msg : gemmac_status_str(st);
        const size_t plen = path ? strlen(path) : 0;
        if (path && strncmp(msg, path, plen) != 0) snprintf(errbuf, err_size, "%s: %s", path, msg);
        else snprintf(errbuf, err_size, "%s", msg);
    }
    return st;
}

void gemmac_model_free(gemmac_model *m) {
    if (!m) return;
    gm_tokenizer_free(m->tok);
    for (int32_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->w.layer);
    gm_gguf_close(m->gguf);
    gm_st_set_close(m->st);
    gm_hf_config_close(m->hf);
    free(m);
}

void gemmac_model_get_info(const gemmac_model *m, gemmac_model_info *info) {
    memset(info, 0, sizeof *info);
    const gm_hparams *hp = &m->hp;
    info->arch = m->arch->name;
    info->name = m->name;
    info->n_vocab = hp->n_vocab;
    info->n_embd = hp->n_embd;
    info->n_layer = hp->n_layer;
    info->n_head = hp->layer[0].n_head;
    info->n_head_kv = hp->layer[0].n_head_kv;
    info->head_dim = hp->layer[0].head_dim;
    info->n_ff = hp->layer[0].n_ff;
    info->n_ctx_train = hp->n_ctx_train;
    info->sliding_window = hp->sliding_window;
    info->n_params = m->n_params;
    info->weight_bytes = m->weight_bytes;
    info->step_weight_bytes = m->weight_bytes - m->table_bytes;
    const gm_tensor *emb = &m->w.tok_embd, *out = &m->w.output;
    if (out->data && emb->data && out->data != emb->data) /* an output head of its own: the embedding is looked up */
        info->step_weight_bytes -= emb->row_bytes * (uint64_t)gm_tensor_rows(emb);
    for (int il = 0; il < hp->n_layer && hp->n_expert > 0; il++) { /* a step reads n_expert_used experts of each */
        const gm_tensor *ex[2] = {&m->w.layer[il].moe_gate_up, &m->w.layer[il].moe_down};
        for (int k = 0; k < 2; k++)
            if (ex[k]->data) {
                const uint64_t bytes = ex[k]->row_bytes * (uint64_t)gm_tensor_rows(ex[k]);
                info->step_weight_bytes -= bytes - bytes / (uint64_t)hp->n_expert * (uint64_t)hp->n_expert_used;
            }
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        if (l->kv_source != il) continue; /* reads another layer's cache */
        const uint64_t b = 2u * 2u * (uint64_t)l->n_head_kv * (uint64_t)l->head_dim;
        if (l->sliding) info->kv_pos_bytes_sliding += b;
        else info->kv_pos_bytes_full += b;
    }
    info->has_tokenizer = m->tok != NULL;
    info->bos = m->tok ? gm_tokenizer_bos(m->tok) : -1;
    info->eos = m->tok ? gm_tokenizer_eos(m->tok) : -1;
    info->eot = m->tok ? gm_tokenizer_eot(m->tok) : -1;
}

/* Appends to a buffer like snprintf, tracking the length needed. */
typedef struct sbuf {
    char *buf;
    size_t size, len;
} sbuf;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const size_t room = b->len < b->size ? b->size - b->len : 0;
    const int n = vsnprintf(room ? b->buf + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

size_t gemmac_model_describe(const gemmac_model *m, int32_t n_ctx, char *buf, size_t size) {
    sbuf b = {buf, size, 0};
    if (buf && size) buf[0] = '\0';
    const gm_hparams *hp = &m->hp;
    sb_printf(&b, "architecture      %s\n", m->arch->name);
    sb_printf(&b, "name              %s\n", m->name);
    if (m->gguf)
        sb_printf(&b, "file              gguf v%u (alignment %" PRIu64 ", %" PRIu64 " tensors, %" PRIu64 " keys)\n",
                  gm_gguf_version(m->gguf), gm_gguf_alignment(m->gguf), gm_gguf_n_tensors(m->gguf),
                  gm_gguf_n_kv(m->gguf));
    else
        sb_printf(&b, "file              Hugging Face checkpoint, %s\n", m->source);
    sb_printf(&b, "parameters        %.1f M\n", m->n_params / 1e6);
    sb_printf(&b, "vocabulary        %d\n", hp->n_vocab);
    sb_printf(&b, "embedding         %d\n", hp->n_embd);
    sb_printf(&b, "layers            %d\n", hp->n_layer);
    sb_printf(&b, "context (train)   %d\n", hp->n_ctx_train);
    sb_printf(&b, "sliding window    %d\n", hp->sliding_window);
    sb_printf(&b, "rms norm eps      %g\n", hp->norm_eps);
    sb_printf(&b, "attention scale   %g\n", hp->attn_scale);
    sb_printf(&b, "final softcap     %g\n", hp->final_softcap);
    if (hp->n_embd_per_layer)
        sb_printf(&b, "per-layer embd    %d per layer, table of %d rows\n", hp->n_embd_per_layer, hp->n_vocab_per_layer);
    if (hp->n_expert)
        sb_printf(&b, "experts           %d, %d used per token, width %d\n", hp->n_expert, hp->n_expert_used,
                  hp->n_ff_expert);
    if (hp->altup_num_inputs)
        sb_printf(&b, "altup / laurel    %d streams (active %d) / rank %d\n", hp->altup_num_inputs, hp->altup_active_idx,
                  hp->laurel_rank);
    sb_printf(&b, "layer  attn     heads  kv  head_dim  n_ff   rope_base  freq_scale  n_rot  kv_from  notes\n");
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        sb_printf(&b, "%5d  %-7s  %5d  %2d  %8d  %5d  %10g  %10g  %5d  %7d  %s%s%s%s\n", il,
                  l->sliding ? "sliding" : "full", l->n_head, l->n_head_kv, l->head_dim, l->n_ff, l->rope_base,
                  l->rope_freq_scale, l->n_rot, l->kv_source, l->rope_freq_factors ? "rope_freqs " : "",
                  l->v_from_k ? "v=k " : "", l->moe ? "moe " : "", l->act_sparsity_std != 0 ? "sparse " : "");
    }
    const uint64_t *bytes = m->type_bytes, *count = m->type_count;
    sb_printf(&b, "tensors by type\n");
    for (int t = 0; t < GM_TYPE_COUNT; t++)
        if (count[t]) {
            char nb[32];
            sb_printf(&b, "  %-6s %4" PRIu64 " tensors  %9.2f MiB\n", gm_type_name(t, nb), count[t],
                      bytes[t] / 1048576.0);
        }
    if (!m->tok) sb_printf(&b, "tokenizer         none (token ids only)\n");
    else sb_printf(&b, "tokenizer         %s, %u tokens, bos %d eos %d eot %d\n",
              gm_tokenizer_kind(m->tok) == GM_TOK_SPM ? "sentencepiece (llama)" : "bpe (gemma4)",
              gm_tokenizer_n_tokens(m->tok), gm_tokenizer_bos(m->tok), gm_tokenizer_eos(m->tok),
              gm_tokenizer_eot(m->tok));
    /* One sequence, batches of 512 (the ring of a sliding layer is window + batch). Sliding layers stop
     * growing at their ring; full-attention layers grow with the context. */
    const uint64_t kv = gm_kv_cache_bytes(hp, n_ctx, 1, 512, GM_KV_F16);
    const uint64_t kv_more = gm_kv_cache_bytes(hp, n_ctx + 1024, 1, 512, GM_KV_F16) - kv;
    sb_printf(&b, "memory plan       weights %.2f MiB (mapped, not copied)\n", m->weight_bytes / 1048576.0);
    sb_printf(&b, "                  KV cache %.2f MiB for %d tokens of one sequence (f16), +%.2f MiB per 1K more\n",
              kv / 1048576.0, n_ctx, kv_more / 1048576.0);
    sb_printf(&b, "                  activations %.2f MiB for batches of 512 tokens\n",
              gm_scratch_bytes(m, 512, GM_LOGITS_CHUNK) / 1048576.0);
    sb_printf(&b, "                  resident %.2f MiB planned (weights the forward touches, KV, activations, "
              "tokenizer)\n", gemmac_model_plan_bytes(m, n_ctx, 512) / 1048576.0);
    return b.len;
}

/* The memory plan: what running a context is expected to keep resident. The per-layer embedding table (and an
 * untied input embedding) stays mapped and is read a row per token, so it is left out; the LM head, every
 * layer's weights (all experts: over a few tokens nearly every expert is read), the f16 KV cache of the layers
 * that own one, the activation buffers (the logits chunk as rows that batches of n_batch can ask for), the
 * logits handed out, the metadata the tokenizer was built from and its own copy, and a process baseline. */
uint64_t gemmac_model_plan_bytes(const gemmac_model *m, int32_t n_ctx, int32_t n_batch) {
    const gm_hparams *hp = &m->hp;
    if (n_batch < 1) n_batch = 512;
    if (n_batch > n_ctx) n_batch = n_ctx;
    uint64_t weights = m->weight_bytes;
    const gm_tensor *ple = &m->w.ple_tok_embd;
    if (ple->data) weights -= ple->row_bytes * (uint64_t)gm_tensor_rows(ple);
    const gm_tensor *te = &m->w.tok_embd;
    if (te->data && m->w.output.data && m->w.output.data != te->data) weights -= te->row_bytes * (uint64_t)gm_tensor_rows(te);
    const uint64_t kv = gm_kv_cache_bytes(hp, n_ctx, 1, n_batch, GM_KV_F16);
    const int32_t out_rows = n_batch < GM_LOGITS_CHUNK ? n_batch : GM_LOGITS_CHUNK;
    const uint64_t scratch = gm_scratch_bytes(m, n_batch, GM_LOGITS_CHUNK) -
                             sizeof(float) * (uint64_t)(GM_LOGITS_CHUNK - out_rows) * ((uint64_t)hp->n_embd + (uint64_t)hp->n_vocab);
    const uint64_t logits = sizeof(float) * (uint64_t)hp->n_vocab * (uint64_t)out_rows;
    const uint64_t meta = m->gguf ? 2 * gm_gguf_data_offset(m->gguf) : 0;
    const uint64_t baseline = 8ull << 20;
    return weights + kv + scratch + logits + meta + baseline;
}

/* The widest per-token activation rows over all layers. */
static void max_widths(const gm_hparams *hp, int64_t *qd, int64_t *kvd, int64_t *ff) {
    *qd = *kvd = *ff = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        if ((int64_t)l->n_head * l->head_dim > *qd) *qd = (int64_t)l->n_head * l->head_dim;
        if ((int64_t)l->n_head_kv * l->head_dim > *kvd) *kvd = (int64_t)l->n_head_kv * l->head_dim;
        if (l->n_ff > *ff) *ff = l->n_ff;
    }
}

/* Per-token floats of the Gemma 3n buffers of gm_scratch (0: the model has no AltUp / per-layer embeddings):
 * streams and pred each, aux, small, ple and ple_t each. */
static void altup_widths(const gm_hparams *hp, int64_t *streams, int64_t *aux, int64_t *small, int64_t *ple) {
    const int64_t K = hp->altup_num_inputs;
    *streams = K * hp->n_embd;
    *aux = K ? hp->n_embd : 0;
    *small = K ? K + K * K : 0;
    if (K && hp->laurel_rank > *small) *small = hp->laurel_rank;
    if (K && hp->n_embd_per_layer > *small) *small = hp->n_embd_per_layer;
    *ple = (int64_t)hp->n_layer * hp->n_embd_per_layer;
}

/* Per-token floats of the Gemma 4 MoE buffers (moe_logits, moe_in, moe_out); 0 without MoE layers. */
static int64_t moe_width(const gm_hparams *hp) {
    for (int il = 0; il < hp->n_layer; il++)
        if (hp->layer[il].moe) return (int64_t)hp->n_expert + 2 * (int64_t)hp->n_embd;
    return 0;
}

int32_t gm_logits_rows(const gm_backend *b, int32_t n_batch) {
    int32_t rows = b && b->ops->logits_rows > 0 ? b->ops->logits_rows : GM_LOGITS_CHUNK;
    if (rows > n_batch) rows = n_batch; /* a forward never wants more */
    return rows < GM_LOGITS_CHUNK ? GM_LOGITS_CHUNK : rows;
}

uint64_t gm_scratch_bytes(const gemmac_model *m, int32_t n_batch, int32_t logits_rows) {
    const gm_hparams *hp = &m->hp;
    int64_t qd, kvd, ff;
    max_widths(hp, &qd, &kvd, &ff);
    int64_t a_streams, a_aux, a_small, a_ple;
    altup_widths(hp, &a_streams, &a_aux, &a_small, &a_ple);
    const uint64_t per_token = 2 * (uint64_t)hp->n_embd + 2 * (uint64_t)qd + 2 * (uint64_t)kvd + 2 * (uint64_t)ff +
                               (uint64_t)(2 * a_streams + a_aux + a_small + 2 * a_ple) +
                               (uint64_t)moe_width(hp);
    const uint64_t fixed = (uint64_t)logits_rows * ((uint64_t)hp->n_embd + (uint64_t)hp->n_vocab);
    return sizeof(float) * (per_token * (uint64_t)n_batch + fixed);
}

gemmac_status gm_scratch_new(const gemmac_model *m, gm_backend *b, int32_t n_batch, gm_scratch **out, gm_error *err) {
    *out = NULL;
    const gm_hparams *hp = &m->hp;
    int64_t qd, kvd, ff;
    max_widths(hp, &qd, &kvd, &ff);
    gm_scratch *s = calloc(1, sizeof *s);
    if (!s) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
    s->n_batch = n_batch;
    const int64_t n = n_batch;
    s->x = b->ops->alloc(b, n * hp->n_embd);
    s->xn = b->ops->alloc(b, n * hp->n_embd);
    s->q = b->ops->alloc(b, n * qd);
    s->att = b->ops->alloc(b, n * qd);
    s->k = b->ops->alloc(b, n * kvd);
    s->v = b->ops->alloc(b, n * kvd);
    s->g = b->ops->alloc(b, n * ff);
    s->u = b->ops->alloc(b, n * ff);
    s->logits_rows = gm_logits_rows(b, n_batch);
    s->xo = b->ops->alloc(b, (int64_t)s->logits_rows * hp->n_embd);
    s->logits = b->ops->alloc(b, (int64_t)s->logits_rows * hp->n_vocab);
    int64_t a_streams, a_aux, a_small, a_ple;
    altup_widths(hp, &a_streams, &a_aux, &a_small, &a_ple);
    if (a_streams) {
        s->streams = b->ops->alloc(b, n * a_streams);
        s->pred = b->ops->alloc(b, n * a_streams);
        s->aux = b->ops->alloc(b, n * a_aux);
        s->small = b->ops->alloc(b, n * a_small);
    }
    if (a_ple) {
        s->ple = b->ops->alloc(b, n * a_ple);
        s->ple_t = b->ops->alloc(b, n * a_ple);
    }
    const bool altup_ok = !a_streams || (s->streams && s->pred && s->aux && s->small);
    const bool ple_ok = !a_ple || (s->ple && s->ple_t);
    if (moe_width(hp)) {
        s->moe_logits = b->ops->alloc(b, n * hp->n_expert);
        s->moe_in = b->ops->alloc(b, n * hp->n_embd);
        s->moe_out = b->ops->alloc(b, n * hp->n_embd);
    }
    const bool moe_ok = !moe_width(hp) || (s->moe_logits && s->moe_in && s->moe_out);
    if (!s->xo || !s->x || !s->xn || !s->q || !s->att || !s->k || !s->v || !s->g || !s->u || !s->logits ||
        !altup_ok || !ple_ok || !moe_ok) {
        gm_scratch_free(s, b);
        return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory for activations of %d tokens", n_batch);
    }
    *out = s;
    return GEMMAC_OK;
}

void gm_scratch_free(gm_scratch *s, gm_backend *b) {
    if (!s) return;
    float *bufs[] = {s->x,  s->xn,     s->q,    s->att, s->k,   s->v,     s->g,   s->u,
                     s->xo, s->logits, s->streams, s->pred, s->aux, s->small, s->ple, s->ple_t,
                     s->moe_logits, s->moe_in, s->moe_out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) b->ops->release(b, bufs[i]);
    free(s);
}

void gm_forward_logits(const gm_forward_args *a, int32_t i0, int32_t nc, const gm_tensor *output, const float *norm,
                       float eps, float softcap) {
    gm_backend *b = a->backend;
    const gm_backend_ops *op = b->ops;
    gm_scratch *s = a->scratch;
    const int32_t H = a->model->hp.n_embd, V = a->model->hp.n_vocab;
    op->rmsnorm(b, s->xo, s->xo, nc, H, norm, eps);
    op->matmul(b, output, s->xo, nc, s->logits);
    if (softcap > 0) op->softcap(b, s->logits, (int64_t)nc * V, softcap);
    if (a->top_k > 0)
        op->top_logits(b, s->logits, nc, V, a->top_k, a->top_ids + (int64_t)i0 * a->top_k,
                       a->top_vals + (int64_t)i0 * a->top_k);
    else
        op->read(b, s->logits, a->logits + (int64_t)i0 * V, (int64_t)nc * V);
}

void gm_residual_flush(gm_pending_residual *r) {
    if (!r->add) return;
    r->b->ops->rmsnorm_add(r->b, r->x, r->add, r->n, r->d, r->norm, r->eps);
    if (r->scale != 1.0f) r->b->ops->scale(r->b, r->x, (int64_t)r->n * r->d, r->scale);
    r->add = NULL;
}

void gm_residual_defer(gm_pending_residual *r, const float *add, const float *norm, float scale) {
    gm_residual_flush(r);
    r->add = add, r->norm = norm, r->scale = scale;
}

void gm_residual_project(gm_pending_residual *r, const gm_proj_args *p) {
    /* one eps serves both of project's norms, so a norm of another eps gets the update run first too */
    if (p->x != r->x || (p->norm && p->eps != r->eps)) gm_residual_flush(r);
    gm_proj_args q = *p;
    q.res_add = r->add, q.res_norm = r->norm, q.res_scale = r->scale;
    if (r->add) q.eps = r->eps;
    r->b->ops->project(r->b, &q);
    r->add = NULL;
}
