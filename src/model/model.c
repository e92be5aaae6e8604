/* model.c: loading a model file (open, pick the architecture, bind weights, build the tokenizer), the
 * public model handle's getters and description, and weight binding helpers shared by architectures. */
#include "model/model.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_cache.h"

static const gm_arch_impl *const g_archs[] = {&gm_arch_gemma3};

gemmac_model_params gemmac_model_default_params(void) {
    gemmac_model_params p = {.progress = NULL, .progress_user_data = NULL};
    return p;
}

static gemmac_status bind_check(const gm_gguf_tensor *gt, const char *name, int n_dims, const int64_t *shape,
                                gm_error *err) {
    for (int i = 0; i < GM_GGUF_MAX_DIMS; i++) {
        const int64_t want = i < n_dims ? shape[i] : 1;
        if (gt->ne[i] != want) {
            char got[96], exp[96];
            snprintf(got, sizeof got, "[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", gt->ne[0], gt->ne[1],
                     gt->ne[2], gt->ne[3]);
            snprintf(exp, sizeof exp, "[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", n_dims > 0 ? shape[0] : 1,
                     n_dims > 1 ? shape[1] : 1, n_dims > 2 ? shape[2] : 1, n_dims > 3 ? shape[3] : 1);
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tensor %s: shape %s, expected %s", name, got, exp);
        }
    }
    return GEMMAC_OK;
}

gemmac_status gm_bind_tensor(gemmac_model *m, gm_tensor *t, const char *name, int n_dims, const int64_t *shape,
                             bool optional, gm_error *err) {
    memset(t, 0, sizeof *t);
    const gm_gguf_tensor *gt = gm_gguf_find_tensor(m->gguf, name);
    if (!gt) {
        if (optional) return GEMMAC_OK;
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tensor %s is missing", name);
    }
    gemmac_status st = bind_check(gt, name, n_dims, shape, err);
    if (st != GEMMAC_OK) return st;
    t->name = gt->name.ptr; /* not NUL-terminated; messages use the caller's name */
    t->type = gt->type;
    memcpy(t->ne, gt->ne, sizeof t->ne);
    t->row_bytes = gm_row_bytes(gm_type_traits_of(gt->type), gt->ne[0]);
    t->data = gt->data;
    return GEMMAC_OK;
}

gemmac_status gm_bind_vector(gemmac_model *m, gm_tensor *t, const char *name, int64_t d, gm_error *err) {
    gemmac_status st = gm_bind_tensor(m, t, name, 1, &d, false, err);
    if (st != GEMMAC_OK || t->type == GM_TYPE_F32) return st;
    float **nv = realloc(m->owned_vectors, sizeof *nv * (size_t)(m->n_owned_vectors + 1));
    if (!nv) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory converting %s", name);
    m->owned_vectors = nv;
    float *f = malloc(sizeof(float) * (size_t)d);
    if (!f) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory converting %s", name);
    gm_type_traits_of(t->type)->dequantize(t->data, f, d);
    m->owned_vectors[m->n_owned_vectors++] = f;
    t->data = f;
    t->type = GM_TYPE_F32;
    t->row_bytes = (uint64_t)d * sizeof(float);
    return GEMMAC_OK;
}

static bool report(const gemmac_model_params *p, float v) {
    return !p->progress || p->progress(v, p->progress_user_data);
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
    st = gm_gguf_open(path, &m->gguf, &err);
    if (st != GEMMAC_OK) goto done;
    if (!report(params, 0.3f)) goto aborted;

    gm_str arch;
    st = gm_gguf_get_str(m->gguf, "general.architecture", &arch, &err);
    if (st != GEMMAC_OK) {
        if (st == GEMMAC_ERR_NOT_FOUND) st = gm_fail(&err, GEMMAC_ERR_BAD_FILE, "%s: no general.architecture key", path);
        goto done;
    }
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        if (gm_str_eq(arch, g_archs[i]->name)) m->arch = g_archs[i];
    if (!m->arch) {
        st = gm_fail(&err, GEMMAC_ERR_UNSUPPORTED, "architecture '%.*s' is not supported (supported: gemma3)",
                     (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
        goto done;
    }
    gm_str name;
    if (gm_gguf_get_str(m->gguf, "general.name", &name, NULL) == GEMMAC_OK)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(name.len > 127 ? 127 : name.len), name.ptr);

    st = m->arch->load(m, &err);
    if (st != GEMMAC_OK) goto done;
    if (!report(params, 0.6f)) goto aborted;
    st = gm_tokenizer_from_gguf(m->gguf, &m->tok, &err);
    if (st != GEMMAC_OK) goto done;
    if (gm_tokenizer_n_tokens(m->tok) > (uint32_t)m->hp.n_vocab) {
        st = gm_fail(&err, GEMMAC_ERR_BAD_FILE, "tokenizer has %u tokens but the embedding has %d rows",
                     gm_tokenizer_n_tokens(m->tok), m->hp.n_vocab);
        goto done;
    }
    for (uint64_t i = 0; i < gm_gguf_n_tensors(m->gguf); i++) {
        const gm_gguf_tensor *t = gm_gguf_tensor_at(m->gguf, i);
        m->n_params += t->n_elements;
        m->weight_bytes += t->size;
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
    for (int32_t i = 0; i < m->n_owned_vectors; i++) free(m->owned_vectors[i]);
    free(m->owned_vectors);
    free(m->w.layer);
    gm_gguf_close(m->gguf);
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
    info->bos = gm_tokenizer_bos(m->tok);
    info->eos = gm_tokenizer_eos(m->tok);
    info->eot = gm_tokenizer_eot(m->tok);
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
    sb_printf(&b, "gguf version      %u (alignment %" PRIu64 ", %" PRIu64 " tensors, %" PRIu64 " keys)\n",
              gm_gguf_version(m->gguf), gm_gguf_alignment(m->gguf), gm_gguf_n_tensors(m->gguf), gm_gguf_n_kv(m->gguf));
    sb_printf(&b, "parameters        %.1f M\n", m->n_params / 1e6);
    sb_printf(&b, "vocabulary        %d\n", hp->n_vocab);
    sb_printf(&b, "embedding         %d\n", hp->n_embd);
    sb_printf(&b, "layers            %d\n", hp->n_layer);
    sb_printf(&b, "context (train)   %d\n", hp->n_ctx_train);
    sb_printf(&b, "sliding window    %d\n", hp->sliding_window);
    sb_printf(&b, "rms norm eps      %g\n", hp->norm_eps);
    sb_printf(&b, "attention scale   %g\n", hp->attn_scale);
    sb_printf(&b, "final softcap     %g\n", hp->final_softcap);
    sb_printf(&b, "layer  attn     heads  kv  head_dim  n_ff   rope_base  freq_scale\n");
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        sb_printf(&b, "%5d  %-7s  %5d  %2d  %8d  %5d  %10g  %g\n", il, l->sliding ? "sliding" : "full", l->n_head,
                  l->n_head_kv, l->head_dim, l->n_ff, l->rope_base, l->rope_freq_scale);
    }
    /* Tensor bytes by type. */
    uint64_t bytes[GM_TYPE_COUNT] = {0}, count[GM_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < gm_gguf_n_tensors(m->gguf); i++) {
        const gm_gguf_tensor *t = gm_gguf_tensor_at(m->gguf, i);
        if ((int)t->type < GM_TYPE_COUNT) {
            bytes[t->type] += t->size;
            count[t->type]++;
        }
    }
    sb_printf(&b, "tensors by type\n");
    for (int t = 0; t < GM_TYPE_COUNT; t++)
        if (count[t]) {
            char nb[32];
            sb_printf(&b, "  %-6s %4" PRIu64 " tensors  %9.2f MiB\n", gm_type_name(t, nb), count[t],
                      bytes[t] / 1048576.0);
        }
    sb_printf(&b, "tokenizer         %s, %u tokens, bos %d eos %d eot %d\n",
              gm_tokenizer_kind(m->tok) == GM_TOK_SPM ? "sentencepiece (llama)" : "bpe (gemma4)",
              gm_tokenizer_n_tokens(m->tok), gm_tokenizer_bos(m->tok), gm_tokenizer_eos(m->tok),
              gm_tokenizer_eot(m->tok));
    /* One sequence, batches of 512 (the ring of a sliding layer is window + batch). Sliding layers stop
     * growing at their ring; full-attention layers grow with the context. */
    const uint64_t kv = gm_kv_cache_bytes(hp, n_ctx, 1, 512);
    const uint64_t kv_more = gm_kv_cache_bytes(hp, n_ctx + 1024, 1, 512) - kv;
    sb_printf(&b, "memory plan       weights %.2f MiB (mapped, not copied)\n", m->weight_bytes / 1048576.0);
    sb_printf(&b, "                  KV cache %.2f MiB for %d tokens of one sequence (f16), +%.2f MiB per 1K more\n",
              kv / 1048576.0, n_ctx, kv_more / 1048576.0);
    sb_printf(&b, "                  activations %.2f MiB for batches of 512 tokens\n",
              gm_scratch_bytes(m, 512) / 1048576.0);
    return b.len;
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

uint64_t gm_scratch_bytes(const gemmac_model *m, int32_t n_batch) {
    const gm_hparams *hp = &m->hp;
    int64_t qd, kvd, ff;
    max_widths(hp, &qd, &kvd, &ff);
    const uint64_t per_token = 2 * (uint64_t)hp->n_embd + 2 * (uint64_t)qd + 2 * (uint64_t)kvd + 2 * (uint64_t)ff;
    const uint64_t fixed = (uint64_t)GM_LOGITS_CHUNK * ((uint64_t)hp->n_embd + (uint64_t)hp->n_vocab);
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
    s->xo = b->ops->alloc(b, (int64_t)GM_LOGITS_CHUNK * hp->n_embd);
    s->logits = b->ops->alloc(b, (int64_t)GM_LOGITS_CHUNK * hp->n_vocab);
    if (!s->xo || !s->x || !s->xn || !s->q || !s->att || !s->k || !s->v || !s->g || !s->u || !s->logits) {
        gm_scratch_free(s, b);
        return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory for activations of %d tokens", n_batch);
    }
    *out = s;
    return GEMMAC_OK;
}

void gm_scratch_free(gm_scratch *s, gm_backend *b) {
    if (!s) return;
    float *bufs[] = {s->x, s->xn, s->q, s->att, s->k, s->v, s->g, s->u, s->xo, s->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) b->ops->release(b, bufs[i]);
    free(s);
}
