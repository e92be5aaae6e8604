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

uint64_t gm_kv_cache_bytes(const gm_hparams *hp, int32_t n_ctx, int32_t n_seq, int32_t n_batch, bool f32) {
    uint64_t total = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        if (hp->layer[il].kv_source != il) continue;
        bool ring;
        const uint64_t slots = (uint64_t)layer_slots(hp, il, n_ctx, n_batch, &ring);
        total += 2ull * slots * (uint64_t)n_seq * hp->layer[il].n_head_kv * hp->layer[il].head_dim * (f32 ? 4u : 2u);
    }
    return total;
}

gemmac_status gm_kv_cache_new(const gm_hparams *hp, int32_t n_ctx, int32_t n_seq, int32_t n_batch, bool f32,
                              gm_backend *mem, gm_kv_cache **out, gm_error *err) {
    *out = NULL;
    gm_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "KV cache: out of memory");
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->n_layer = hp->n_layer;
    kv->f32 = f32;
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
        l->elem = f32 ? sizeof(float) : sizeof(gm_f16);
        const size_t n = (size_t)n_seq * l->n_slots * l->row;
        l->k = mem->ops->alloc_bytes(mem, n * l->elem);
        l->v = mem->ops->alloc_bytes(mem, n * l->elem);
        if (!l->k || !l->v) goto oom;
        kv->bytes += 2 * n * l->elem;
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
