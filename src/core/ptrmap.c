/* ptrmap.c: the address map of ptrmap.h. */
#include "core/ptrmap.h"

#include <stdint.h>
#include <stdlib.h>

static size_t slot_of(const gm_ptrmap_slot *slots, size_t cap, const void *key) {
    uint64_t h = (uint64_t)(uintptr_t)key;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    size_t i = (size_t)h & (cap - 1);
    while (slots[i].key && slots[i].key != key) i = (i + 1) & (cap - 1);
    return i;
}

void *gm_ptrmap_get(const gm_ptrmap *m, const void *key) {
    if (!m->cap) return NULL;
    return m->slots[slot_of(m->slots, m->cap, key)].value;
}

bool gm_ptrmap_put(gm_ptrmap *m, const void *key, void *value) {
    if ((m->count + 1) * 2 > m->cap) { /* keep the load at most one half */
        const size_t cap = m->cap ? m->cap * 2 : 64;
        gm_ptrmap_slot *slots = calloc(cap, sizeof *slots);
        if (!slots) return false;
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key) slots[slot_of(slots, cap, m->slots[i].key)] = m->slots[i];
        free(m->slots);
        m->slots = slots;
        m->cap = cap;
    }
    gm_ptrmap_slot *s = &m->slots[slot_of(m->slots, m->cap, key)];
    if (!s->key) m->count++;
    *s = (gm_ptrmap_slot){key, value};
    return true;
}

void gm_ptrmap_free(gm_ptrmap *m) {
    free(m->slots);
    *m = (gm_ptrmap){0};
}
