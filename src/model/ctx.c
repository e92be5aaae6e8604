/* ctx.c: the public context: parameters, the KV cache and activation scratch it owns, and decode: a batch is
 * validated whole (tokens, sequence ids, positions continuing each sequence) before anything changes, then
 * evaluated n_batch tokens at a time by the architecture's forward pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "sample/top_logits.h"

struct gemmac_ctx {
    gemmac_model *model;
    gemmac_ctx_params p;
    gm_backend *backend;
    gm_kv_cache *kv;
    gm_scratch *scratch;
    gm_error err;
    int32_t *seq_next;         /* [n_seq_max] scratch for validation */
    int32_t *out_rows;         /* [n_batch] */
    float *logits;             /* [logits_rows][n_vocab] of the last batch */
    int64_t logits_rows_cap;
    int32_t *top_ids;          /* [top_rows_cap][top_k]: rows' best logits (gemmac_ctx_top_logits) */
    float *top_vals;
    int64_t top_rows_cap;
    uint8_t *row_kind;         /* [kind_cap] per row of the last batch: ROW_WHOLE, ROW_WHOLE_TOP or ROW_TOP */
    int64_t kind_cap;
    int32_t *logits_row;       /* [last_n] row in logits of each token of the last batch, -1 if none */
    int32_t last_n, last_cap;
};

/* What the context holds of one row of logits: the whole row (its best not selected yet), the whole row and its
 * best, or only its best (asked for with GEMMAC_LOGITS_TOP from a backend that selects them itself). */
enum { ROW_WHOLE = 0, ROW_WHOLE_TOP = 1, ROW_TOP = 2 };

static int32_t top_k_of(const gemmac_ctx *c) {
    return c->model->hp.n_vocab < GEMMAC_TOP_LOGITS ? c->model->hp.n_vocab : GEMMAC_TOP_LOGITS;
}

/* Room for the best logits of `rows` rows (their old contents are not kept); false when out of memory. */
static bool top_reserve(gemmac_ctx *c, int64_t rows) {
    if (rows <= c->top_rows_cap) return true;
    const size_t n = (size_t)rows * (size_t)top_k_of(c);
    free(c->top_ids);
    free(c->top_vals);
    c->top_ids = malloc(n * sizeof *c->top_ids);
    c->top_vals = malloc(n * sizeof *c->top_vals);
    c->top_rows_cap = c->top_ids && c->top_vals ? rows : 0;
    return c->top_rows_cap > 0;
}

gemmac_ctx_params gemmac_ctx_default_params(void) {
    gemmac_ctx_params p = {.n_ctx = 0, .n_seq_max = 1, .n_batch = 512, .n_threads = 0, .n_gpu_layers = 0};
    return p;
}

gemmac_status gemmac_ctx_new(gemmac_model *model, const gemmac_ctx_params *params, gemmac_ctx **out, char *errbuf,
                             size_t err_size) {
    gm_error err = {0};
    gemmac_status st = GEMMAC_OK;
    gemmac_ctx *c = NULL;
    if (out) *out = NULL;
    if (!model || !out) {
        st = gm_fail(&err, GEMMAC_ERR_INVALID_ARG, "model and output handle are required");
        goto fail;
    }
    *out = NULL;
    gemmac_ctx_params p = params ? *params : gemmac_ctx_default_params();
    const gm_hparams *hp = &model->hp;
    if (p.n_ctx == 0) p.n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p.n_ctx < 1 || p.n_ctx > hp->n_ctx_train) {
        st = gm_fail(&err, GEMMAC_ERR_INVALID_ARG, "context size %d is outside [1, %d] (the model's training context)",
                     p.n_ctx, hp->n_ctx_train);
        goto fail;
    }
    if (p.n_seq_max < 1 || p.n_seq_max > 1024) {
        st = gm_fail(&err, GEMMAC_ERR_INVALID_ARG, "n_seq_max %d is outside [1, 1024]", p.n_seq_max);
        goto fail;
    }
    if (p.n_batch < 1 || p.n_batch > 65536) {
        st = gm_fail(&err, GEMMAC_ERR_INVALID_ARG, "batch size %d is outside [1, 65536]", p.n_batch);
        goto fail;
    }
    if (p.n_batch > p.n_ctx) p.n_batch = p.n_ctx;
    if (p.type_kv != GEMMAC_KV_F16 && p.type_kv != GEMMAC_KV_F32 && p.type_kv != GEMMAC_KV_Q8_0) {
        st = gm_fail(&err, GEMMAC_ERR_INVALID_ARG, "KV cache type %d is not f16 (0), f32 (1) or q8_0 (2)",
                     (int)p.type_kv);
        goto fail;
    }
    if (p.n_threads < 0 || p.n_threads > 512) {
        st = gm_fail(&err, GEMMAC_ERR_INVALID_ARG, "thread count %d is outside [0, 512]", p.n_threads);
        goto fail;
    }
    if (p.n_gpu_layers < -1) {
        st = gm_fail(&err, GEMMAC_ERR_INVALID_ARG, "n_gpu_layers %d is not -1 (all), 0 (CPU) or a layer count",
                     p.n_gpu_layers);
        goto fail;
    }
    const bool gpu = p.n_gpu_layers != 0;
    if (gpu && p.n_gpu_layers != -1 && p.n_gpu_layers < hp->n_layer) {
        st = gm_fail(&err, GEMMAC_ERR_UNSUPPORTED,
                     "partial offload (-ngl %d of %d layers) is not supported yet: use -ngl all or 0",
                     p.n_gpu_layers, hp->n_layer);
        goto fail;
    }
#ifndef GEMMAC_HAVE_CUDA
    if (gpu) {
        st = gm_fail(&err, GEMMAC_ERR_UNSUPPORTED,
                     "-ngl %d asks for the GPU, but this gemmac was built without CUDA: use -ngl 0", p.n_gpu_layers);
        goto fail;
    }
#endif
    c = calloc(1, sizeof *c);
    if (!c) {
        st = gm_fail(&err, GEMMAC_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    c->model = model;
    c->p = p;
#ifdef GEMMAC_HAVE_CUDA
    if (gpu) st = gm_backend_cuda_new(0, &c->backend, &err);
    else
#endif
        st = gm_backend_cpu_new(p.n_threads, &c->backend, &err);
    if (st != GEMMAC_OK) goto fail;
    if ((st = gm_kv_cache_new(hp, p.n_ctx, p.n_seq_max, p.n_batch, (gm_kv_type)p.type_kv, c->backend, &c->kv,
                              &err)) != GEMMAC_OK)
        goto fail;
    if ((st = gm_scratch_new(model, c->backend, p.n_batch, &c->scratch, &err)) != GEMMAC_OK) goto fail;
    int64_t max_row = hp->n_embd;
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        if ((int64_t)l->n_head * l->head_dim > max_row) max_row = (int64_t)l->n_head * l->head_dim;
        if (l->n_ff > max_row) max_row = l->n_ff;
    }
    if ((st = c->backend->ops->reserve(c->backend, p.n_batch, max_row, p.n_ctx, &err)) != GEMMAC_OK) goto fail;
    c->seq_next = calloc((size_t)p.n_seq_max, sizeof *c->seq_next);
    c->out_rows = calloc((size_t)p.n_batch, sizeof *c->out_rows);
    if (!c->seq_next || !c->out_rows) {
        st = gm_fail(&err, GEMMAC_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    *out = c;
    return GEMMAC_OK;
fail:
    gemmac_ctx_free(c);
    if (errbuf && err_size) snprintf(errbuf, err_size, "%s", err.msg[0] ? err.msg : gemmac_status_str(st));
    return st;
}

/* The logits buffer, from the backend's host memory when it has its own (backend.h host_alloc). */
static void logits_free(gemmac_ctx *c) {
    if (c->logits && c->backend && c->backend->ops->host_free) c->backend->ops->host_free(c->backend, c->logits);
    else free(c->logits);
    c->logits = NULL;
    c->logits_rows_cap = 0;
}

void gemmac_ctx_free(gemmac_ctx *c) {
    if (!c) return;
    gm_kv_cache_free(c->kv); /* its storage belongs to the backend: freed first */
    logits_free(c);          /* as may the logits' */
    if (c->backend) {
        gm_scratch_free(c->scratch, c->backend);
        c->backend->ops->free(c->backend);
    }
    free(c->seq_next);
    free(c->out_rows);
    free(c->logits_row);
    free(c->top_ids);
    free(c->top_vals);
    free(c->row_kind);
    free(c);
}

const char *gemmac_ctx_last_error(const gemmac_ctx *c) { return c ? c->err.msg : "no context"; }
int32_t gemmac_ctx_n_ctx(const gemmac_ctx *c) { return c->p.n_ctx; }
int32_t gemmac_ctx_n_seq_max(const gemmac_ctx *c) { return c->p.n_seq_max; }

static gemmac_status validate(gemmac_ctx *c, const gemmac_batch *bt, int32_t *n_out) {
    const int32_t V = c->model->hp.n_vocab;
    if (!bt || bt->n_tokens < 1 || !bt->token || !bt->pos || !bt->seq_id)
        return gm_fail(&c->err, GEMMAC_ERR_INVALID_ARG, "a batch needs at least one token with position and sequence");
    memcpy(c->seq_next, c->kv->seq_len, sizeof(int32_t) * (size_t)c->p.n_seq_max);
    *n_out = 0;
    for (int32_t i = 0; i < bt->n_tokens; i++) {
        const int32_t s = bt->seq_id[i];
        if (bt->token[i] < 0 || bt->token[i] >= V)
            return gm_fail(&c->err, GEMMAC_ERR_INVALID_ARG, "token %d: id %d is outside the vocabulary [0, %d)", i,
                           bt->token[i], V);
        if (s < 0 || s >= c->p.n_seq_max)
            return gm_fail(&c->err, GEMMAC_ERR_INVALID_ARG, "token %d: sequence id %d is outside [0, %d)", i, s,
                           c->p.n_seq_max);
        if (bt->pos[i] != c->seq_next[s])
            return gm_fail(&c->err, GEMMAC_ERR_INVALID_ARG,
                           "token %d: position %d does not continue sequence %d (next position is %d)", i, bt->pos[i],
                           s, c->seq_next[s]);
        if (bt->pos[i] >= c->p.n_ctx)
            return gm_fail(&c->err, GEMMAC_ERR_CONTEXT_FULL, "sequence %d is full: position %d needs a context of %d",
                           s, bt->pos[i], bt->pos[i] + 1);
        c->seq_next[s]++;
        if (bt->logits ? bt->logits[i] != 0 : i == bt->n_tokens - 1) (*n_out)++;
    }
    return GEMMAC_OK;
}

gemmac_status gemmac_ctx_decode(gemmac_ctx *c, const gemmac_batch *bt) {
    if (!c) return GEMMAC_ERR_INVALID_ARG;
    gm_error_clear(&c->err);
    c->last_n = 0; /* the previous batch's logits are gone from here on */
    int32_t n_out = 0;
    gemmac_status st = validate(c, bt, &n_out);
    if (st != GEMMAC_OK) return st;
    const int32_t V = c->model->hp.n_vocab;
    /* only the best of every wanted row, and a backend that selects them: no whole rows at all */
    bool only_top = n_out > 0 && bt->logits && c->backend->ops->top_logits;
    for (int32_t i = 0; i < bt->n_tokens && only_top; i++)
        if (bt->logits[i] != 0 && bt->logits[i] != GEMMAC_LOGITS_TOP) only_top = false;
    if (n_out > c->kind_cap) {
        uint8_t *k = realloc(c->row_kind, (size_t)n_out);
        if (!k) return gm_fail(&c->err, GEMMAC_ERR_NO_MEMORY, "out of memory");
        c->row_kind = k;
        c->kind_cap = n_out;
    }
    if (only_top && !top_reserve(c, n_out))
        return gm_fail(&c->err, GEMMAC_ERR_NO_MEMORY, "no memory for the best logits of %d tokens", n_out);
    if (!only_top && n_out > c->logits_rows_cap) { /* the old logits are gone: nothing to keep */
        logits_free(c);
        const size_t bytes = sizeof(float) * (size_t)n_out * (size_t)V;
        const gm_backend_ops *o = c->backend->ops;
        c->logits = o->host_alloc ? o->host_alloc(c->backend, bytes) : malloc(bytes);
        if (!c->logits) return gm_fail(&c->err, GEMMAC_ERR_NO_MEMORY, "no memory for logits of %d tokens", n_out);
        c->logits_rows_cap = n_out;
    }
    if (bt->n_tokens > c->last_cap) {
        int32_t *r = realloc(c->logits_row, sizeof(int32_t) * (size_t)bt->n_tokens);
        if (!r) return gm_fail(&c->err, GEMMAC_ERR_NO_MEMORY, "out of memory");
        c->logits_row = r;
        c->last_cap = bt->n_tokens;
    }
    int32_t row = 0;
    for (int32_t i0 = 0; i0 < bt->n_tokens; i0 += c->p.n_batch) {
        const int32_t n = bt->n_tokens - i0 < c->p.n_batch ? bt->n_tokens - i0 : c->p.n_batch;
        int32_t nc_out = 0;
        for (int32_t i = 0; i < n; i++) {
            const int32_t t = i0 + i;
            const bool want = bt->logits ? bt->logits[t] != 0 : t == bt->n_tokens - 1;
            c->logits_row[t] = want ? row + nc_out : -1;
            if (want) c->out_rows[nc_out++] = i;
        }
        gm_forward_args fa = {
            .model = c->model, .backend = c->backend, .kv = c->kv, .n_tokens = n,
            .token = bt->token + i0, .pos = bt->pos + i0, .seq = bt->seq_id + i0,
            .n_out = nc_out, .out_rows = c->out_rows,
            .logits = !only_top && c->logits ? c->logits + (int64_t)row * V : NULL,
            .top_k = only_top ? top_k_of(c) : 0,
            .top_ids = only_top ? c->top_ids + (int64_t)row * top_k_of(c) : NULL,
            .top_vals = only_top ? c->top_vals + (int64_t)row * top_k_of(c) : NULL,
            .scratch = c->scratch,
        };
        const gm_batch_ints bi = {.n_tokens = n, .token = fa.token, .pos = fa.pos, .seq = fa.seq,
                                  .n_out = nc_out, .out_rows = c->out_rows};
        gm_backend *be = c->backend;
        if ((st = be->ops->begin_batch(be, &bi, &c->err)) != GEMMAC_OK) return st;
        st = c->model->arch->forward(&fa, &c->err);
        const gemmac_status st_be = be->ops->end_batch(be, st == GEMMAC_OK ? &c->err : NULL);
        if (st == GEMMAC_OK) st = st_be;
        if (st != GEMMAC_OK) return st;
        for (int32_t i = 0; i < n; i++) c->kv->seq_len[bt->seq_id[i0 + i]]++;
        if (nc_out) memset(c->row_kind + row, only_top ? ROW_TOP : ROW_WHOLE, (size_t)nc_out);
        row += nc_out;
    }
    c->last_n = bt->n_tokens;
    return GEMMAC_OK;
}

const float *gemmac_ctx_logits(const gemmac_ctx *c, int32_t i) {
    if (!c || i < 0 || i >= c->last_n || c->logits_row[i] < 0 || c->row_kind[c->logits_row[i]] == ROW_TOP) return NULL;
    return c->logits + (int64_t)c->logits_row[i] * c->model->hp.n_vocab;
}

int32_t gemmac_ctx_top_logits(gemmac_ctx *c, int32_t i, const gemmac_token **ids, const float **logits) {
    if (!c || !ids || !logits || i < 0 || i >= c->last_n || c->logits_row[i] < 0) return -1;
    const int32_t r = c->logits_row[i], k = top_k_of(c);
    if (c->row_kind[r] == ROW_WHOLE) { /* select on the host, once */
        int64_t rows = 0;
        for (int32_t t = 0; t < c->last_n; t++) rows = c->logits_row[t] >= rows ? c->logits_row[t] + 1 : rows;
        if (rows > c->top_rows_cap) { /* the best of other rows, if any were selected, are lost: mark them */
            for (int64_t q = 0; q < rows && q < c->kind_cap; q++)
                if (c->row_kind[q] == ROW_WHOLE_TOP) c->row_kind[q] = ROW_WHOLE;
            if (!top_reserve(c, rows)) {
                gm_fail(&c->err, GEMMAC_ERR_NO_MEMORY, "no memory for the best logits of %lld tokens", (long long)rows);
                return -1;
            }
        }
        gm_top_logits_row(c->logits + (int64_t)r * c->model->hp.n_vocab, c->model->hp.n_vocab, k,
                          c->top_ids + (int64_t)r * k, c->top_vals + (int64_t)r * k);
        c->row_kind[r] = ROW_WHOLE_TOP;
    }
    *ids = c->top_ids + (int64_t)r * k;
    *logits = c->top_vals + (int64_t)r * k;
    return k;
}

int8_t gemmac_ctx_logits_for(const gemmac_ctx *c, const gemmac_sampler *s) {
    return c && s && gemmac_sampler_top_exact(s, top_k_of(c)) ? GEMMAC_LOGITS_TOP : GEMMAC_LOGITS_FULL;
}

gemmac_token gemmac_ctx_sample(gemmac_ctx *c, int32_t i, gemmac_sampler *s) {
    const float *row = gemmac_ctx_logits(c, i);
    if (row) return gemmac_sampler_sample(s, row);
    const gemmac_token *ids;
    const float *vals;
    const int32_t n = gemmac_ctx_top_logits(c, i, &ids, &vals);
    return n > 0 ? gemmac_sampler_sample_top(s, ids, vals, n) : -1;
}

gemmac_status gemmac_ctx_seq_truncate(gemmac_ctx *c, int32_t seq_id, int32_t pos0) {
    if (!c) return GEMMAC_ERR_INVALID_ARG;
    gm_error_clear(&c->err);
    if (seq_id < 0 || seq_id >= c->p.n_seq_max)
        return gm_fail(&c->err, GEMMAC_ERR_INVALID_ARG, "sequence id %d is outside [0, %d)", seq_id, c->p.n_seq_max);
    const int32_t len = c->kv->seq_len[seq_id];
    if (pos0 < 0) return gm_fail(&c->err, GEMMAC_ERR_INVALID_ARG, "position %d is negative", pos0);
    if (pos0 >= len) return GEMMAC_OK;
    /* A sliding layer's ring keeps only window + n_batch positions: cutting back further would leave the next
     * query without the keys of its window. */
    if (pos0 > 0)
        for (int il = 0; il < c->kv->n_layer; il++) {
            const gm_kv_layer *l = &c->kv->layer[il];
            if (l->owned && l->ring && len - pos0 > c->p.n_batch)
                return gm_fail(&c->err, GEMMAC_ERR_UNSUPPORTED,
                               "cannot cut sequence %d back by %d positions: sliding-window layers keep only %d "
                               "positions past the window (clear it with position 0 instead)",
                               seq_id, len - pos0, c->p.n_batch);
        }
    c->kv->seq_len[seq_id] = pos0;
    return GEMMAC_OK;
}

gemmac_status gemmac_ctx_seq_copy(gemmac_ctx *c, int32_t src, int32_t dst) {
    if (!c) return GEMMAC_ERR_INVALID_ARG;
    gm_error_clear(&c->err);
    if (src < 0 || src >= c->p.n_seq_max || dst < 0 || dst >= c->p.n_seq_max)
        return gm_fail(&c->err, GEMMAC_ERR_INVALID_ARG, "sequence ids %d -> %d: outside [0, %d)", src, dst,
                       c->p.n_seq_max);
    if (src == dst) return GEMMAC_OK;
    const gm_kv_cache *kv = c->kv;
    for (int il = 0; il < kv->n_layer; il++) {
        const gm_kv_layer *l = &kv->layer[il];
        if (!l->owned) continue;
        const size_t seq_bytes = (size_t)l->n_slots * l->slot_bytes;
        c->backend->ops->copy_bytes(c->backend, l->k + (size_t)dst * seq_bytes, l->k + (size_t)src * seq_bytes, seq_bytes);
        c->backend->ops->copy_bytes(c->backend, l->v + (size_t)dst * seq_bytes, l->v + (size_t)src * seq_bytes, seq_bytes);
    }
    kv->seq_len[dst] = kv->seq_len[src];
    return GEMMAC_OK;
}

double gemmac_ctx_copy_gbps(gemmac_ctx *c) {
    return c && c->backend->ops->copy_gbps ? c->backend->ops->copy_gbps(c->backend) : 0.0;
}

int32_t gemmac_ctx_seq_len(const gemmac_ctx *c, int32_t seq_id) {
    if (!c || seq_id < 0 || seq_id >= c->p.n_seq_max) return -1;
    return c->kv->seq_len[seq_id];
}
