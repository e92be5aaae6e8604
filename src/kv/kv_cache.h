/* kv_cache.h: the key/value cache of a context: for each layer that owns a cache (its own kv_source) and
 * each sequence, a block of slots holding K and V rows in f16 or f32, in the memory of the context's backend
 * (host memory for the CPU backend, device memory for CUDA: then only that backend's ops touch the rows). Full-attention layers hold
 * n_ctx slots; sliding layers hold a ring of window + n_batch slots (enough for every query of one batch
 * to see its whole window). Sequence lengths live here too. Attention over it lives in the backend. */
#ifndef GM_KV_CACHE_H
#define GM_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "model/hparams.h"
#include "quant/fp16.h"

struct gm_backend;

typedef struct gm_kv_layer {
    bool owned;                /* false for layers that read another layer's cache (KV sharing) */
    bool ring;                 /* slot = pos % n_slots (sliding layers) */
    int32_t n_slots;           /* slots per sequence */
    int32_t row;               /* values per slot: n_head_kv · head_dim */
    size_t elem;               /* bytes per value: 2 (f16) or 4 (f32) */
    uint8_t *k, *v;            /* [n_seq][n_slots][row] values */
} gm_kv_layer;

typedef struct gm_kv_cache {
    int32_t n_seq;
    int32_t n_ctx;             /* positions per sequence */
    int32_t n_layer;
    bool f32;                  /* values are f32 (else f16) */
    int32_t *seq_len;          /* [n_seq] positions held (= next position) */
    gm_kv_layer *layer;        /* [n_layer]; a shared layer's entry is unused: read layer[kv_source] */
    uint64_t bytes;            /* K and V storage in all */
    struct gm_backend *mem;    /* whose alloc_bytes / free_bytes hold the K and V storage */
} gm_kv_cache;

/* Bytes a cache for these parameters would take (the memory plan). */
uint64_t gm_kv_cache_bytes(const gm_hparams *hp, int32_t n_ctx, int32_t n_seq, int32_t n_batch, bool f32);
/* K and V storage comes from the backend's alloc_bytes (only for layers that own a cache). */
gemmac_status gm_kv_cache_new(const gm_hparams *hp, int32_t n_ctx, int32_t n_seq, int32_t n_batch, bool f32,
                              struct gm_backend *mem, gm_kv_cache **out, gm_error *err);
void gm_kv_cache_free(gm_kv_cache *kv);

static inline int32_t gm_kv_slot(const gm_kv_layer *l, int32_t pos) { return l->ring ? pos % l->n_slots : pos; }
/* K (or V) row of sequence seq at position pos (gm_f16 or float values, as l->elem says; backend memory). */
static inline void *gm_kv_k(const gm_kv_layer *l, int32_t seq, int32_t pos) {
    return l->k + ((size_t)seq * l->n_slots + gm_kv_slot(l, pos)) * l->row * l->elem;
}
static inline void *gm_kv_v(const gm_kv_layer *l, int32_t seq, int32_t pos) {
    return l->v + ((size_t)seq * l->n_slots + gm_kv_slot(l, pos)) * l->row * l->elem;
}

#endif
