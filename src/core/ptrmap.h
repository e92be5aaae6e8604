/* ptrmap.h: a map from an address to a pointer (open addressing, capacity a power of two, never shrinks): how a
 * backend finds again its own form of a model weight (a packed or device copy) by the weight's host address.
 * Values belong to the caller; gm_ptrmap_free releases the table only. */
#ifndef GM_PTRMAP_H
#define GM_PTRMAP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gm_ptrmap_slot {
    const void *key; /* NULL: empty */
    void *value;
} gm_ptrmap_slot;

typedef struct gm_ptrmap {
    gm_ptrmap_slot *slots; /* iterate: every slot with a key, i < cap */
    size_t cap, count;
} gm_ptrmap;

/* The value stored for key, or NULL. */
void *gm_ptrmap_get(const gm_ptrmap *m, const void *key);
/* Stores (key, value), replacing key's value if present. false: out of memory, the map unchanged. key != NULL. */
bool gm_ptrmap_put(gm_ptrmap *m, const void *key, void *value);
void gm_ptrmap_free(gm_ptrmap *m);

#endif
