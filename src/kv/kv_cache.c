/* kv_cache.c: sizing and allocation of the KV cache described in kv_cache.h (storage from the backend). */
#include "kv/kv_cache.h"

#include "model/backend.h"

#include <stdlib.h>

static int32_t layer_slots(const gm_hparams *hp, int il, int32_t n_ctx, int32_t n_batch, bool *ring) {
    const gm_layer_hparams *l = &hp->layer[il];
    *ring = false;
    if (l->sliding && hp->sliding_window > 0 && (int64_t)hp->sliding_window + n_batch < n_ctx) {
        *ring = true;
        return hp->sliding_window + n_batch;
    }
    return n_ctx;
}

uint64_t gm_kv_cache_bytes(const gm_hparams *hp, int32_t n_ctx, int32_t n_seq, int32_t n_batch, gm_kv_type type) {
    uint64_t total = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        if (hp->layer[il].kv_source != il) continue;
        bool ring;
        const uint64_t slots = (uint64_t)layer_slots(hp, il, n_ctx, n_batch, &ring);
        total += 2ull * slots * (uint64_t)n_seq * hp->layer[il].n_head_kv * gm_kv_head_bytes(type, hp->layer[il].head_dim);
    }
    return total;
}

gemmac_status gm_kv_cache_new(const gm_hparams *hp, int32_t n_ctx, int32_t n_seq, int32_t n_batch, gm_kv_type type,
                              gm_backend *mem, gm_kv_cache **out, gm_error *err) {
    *out = NULL;
    if (type != GM_KV_F16 && type != GM_KV_F32 && type != GM_KV_Q8_0)
        return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "KV cache type %d is not f16 (0), f32 (1) or q8_0 (2)", (int)type);
    if (type == GM_KV_Q8_0)
        for (int il = 0; il < hp->n_layer; il++)
            if (hp->layer[il].kv_source == il && (hp->layer[il].head_dim % 32 != 0 || hp->layer[il].head_dim > 1024))
                return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                               "a q8_0 KV cache needs head sizes that are multiples of 32 up to 1024; layer %d's is %d",
                               il, hp->layer[il].head_dim);
    gm_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "KV cache: out of memory");
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->n_layer = hp->n_layer;
    kv->type = type;
    kv->mem = mem;
    kv->seq_len = calloc((size_t)n_seq, sizeof *kv->seq_len);
    kv->layer = calloc((size_t)hp->n_layer, sizeof *kv->layer);
    if (!kv->seq_len || !kv->layer) goto oom;
    for (int il = 0; il < hp->n_layer; il++) {
        gm_kv_layer *l = &kv->layer[il];
        if (hp->layer[il].kv_source != il) continue;
        l->owned = true;
        l->n_slots = layer_slots(hp, il, n_ctx, n_batch, &l->ring);
        l->row = hp->layer[il].n_head_kv * hp->layer[il].head_dim;
        l->type = type;
        l->head_bytes = gm_kv_head_bytes(type, hp->layer[il].head_dim);
        l->slot_bytes = (size_t)hp->layer[il].n_head_kv * l->head_bytes;
        const size_t n = (size_t)n_seq * l->n_slots * l->slot_bytes;
        l->k = mem->ops->alloc_bytes(mem, n);
        l->v = mem->ops->alloc_bytes(mem, n);
        if (!l->k || !l->v) goto oom;
        kv->bytes += 2 * n;
    }
    *out = kv;
    return GEMMAC_OK;
oom:
    gm_kv_cache_free(kv);
    return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "KV cache: out of %s memory for %d positions x %d sequences",
                   mem->ops->name, n_ctx, n_seq);
}

void gm_kv_cache_free(gm_kv_cache *kv) {
    if (!kv) return;
    if (kv->layer)
        for (int il = 0; il < kv->n_layer; il++) {
            if (kv->layer[il].k) kv->mem->ops->free_bytes(kv->mem, kv->layer[il].k);
            if (kv->layer[il].v) kv->mem->ops->free_bytes(kv->mem, kv->layer[il].v);
        }
    free(kv->layer);
    free(kv->seq_len);
    free(kv);
}
