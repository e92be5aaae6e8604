/* kv_cache.h: the key/value cache of a context: for each layer that owns a cache (its own kv_source) and
 * each sequence, a block of slots holding K and V rows in f16, f32 or q8_0, in the memory of the context's backend
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

/* The element type of cached keys and values (gemmac_kv_type's values). A q8_0 head row (one KV head's D values
 * of one slot) is D int8 values, then D / 32 f16 scales (value i = q[i] · d[i / 32]), padded to 16 bytes; the
 * values of each 32 quantized as gm_quantize_q8_0_act_ref does (d = amax / 127, q = round-half-even(x · 127 / amax)),
 * on either backend. D must be a multiple of 32. */
typedef enum gm_kv_type { GM_KV_F16 = 0, GM_KV_F32 = 1, GM_KV_Q8_0 = 2 } gm_kv_type;

/* Bytes of one head row of D values: a slot holds n_head_kv of them, one after another. */
static inline size_t gm_kv_head_bytes(gm_kv_type t, int32_t D) {
    return t == GM_KV_F32 ? 4 * (size_t)D : t == GM_KV_F16 ? 2 * (size_t)D : ((size_t)D + (size_t)D / 16 + 15) & ~(size_t)15;
}

typedef struct gm_kv_layer {
    bool owned;                /* false for layers that read another layer's cache (KV sharing) */
    bool ring;                 /* slot = pos % n_slots (sliding layers) */
    int32_t n_slots;           /* slots per sequence */
    int32_t row;               /* values per slot: n_head_kv · head_dim */
    gm_kv_type type;
    size_t head_bytes;         /* bytes per head row: gm_kv_head_bytes(type, head_dim) */
    size_t slot_bytes;         /* bytes per slot: n_head_kv · head_bytes */
    uint8_t *k, *v;            /* [n_seq][n_slots][n_head_kv] head rows */
} gm_kv_layer;

typedef struct gm_kv_cache {
    int32_t n_seq;
    int32_t n_ctx;             /* positions per sequence */
    int32_t n_layer;
    gm_kv_type type;
    int32_t *seq_len;          /* [n_seq] positions held (= next position) */
    gm_kv_layer *layer;        /* [n_layer]; a shared layer's entry is unused: read layer[kv_source] */
    uint64_t bytes;            /* K and V storage in all */
    struct gm_backend *mem;    /* whose alloc_bytes / free_bytes hold the K and V storage */
} gm_kv_cache;

/* Bytes a cache for these parameters would take (the memory plan). */
uint64_t gm_kv_cache_bytes(const gm_hparams *hp, int32_t n_ctx, int32_t n_seq, int32_t n_batch, gm_kv_type type);
/* K and V storage comes from the backend's alloc_bytes (only for layers that own a cache). q8_0 needs every owning
 * layer's head_dim to be a multiple of 32, at most 1024 (else GEMMAC_ERR_UNSUPPORTED naming the layer). */
gemmac_status gm_kv_cache_new(const gm_hparams *hp, int32_t n_ctx, int32_t n_seq, int32_t n_batch, gm_kv_type type,
                              struct gm_backend *mem, gm_kv_cache **out, gm_error *err);
void gm_kv_cache_free(gm_kv_cache *kv);

static inline int32_t gm_kv_slot(const gm_kv_layer *l, int32_t pos) { return l->ring ? pos % l->n_slots : pos; }
/* K (or V) slot of sequence seq at position pos: n_head_kv head rows of head_bytes each, in l->type (backend
 * memory). */
static inline void *gm_kv_k(const gm_kv_layer *l, int32_t seq, int32_t pos) {
    return l->k + ((size_t)seq * l->n_slots + gm_kv_slot(l, pos)) * l->slot_bytes;
}
static inline void *gm_kv_v(const gm_kv_layer *l, int32_t seq, int32_t pos) {
    return l->v + ((size_t)seq * l->n_slots + gm_kv_slot(l, pos)) * l->slot_bytes;
}

#endif
