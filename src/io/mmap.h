/* mmap.h: read-only mapping of a whole file into memory, and its release.
 * Owns opening, checking (regular, non-empty, fits the address space) and mapping; what the bytes mean
 * is left to the format parsers (gguf.c). The descriptor is closed once the mapping exists. */
#ifndef GM_MMAP_H
#define GM_MMAP_H

#include <stdint.h>

#include "core/error.h"

typedef struct gm_map {
    const void *data;  /* first byte of the file, page aligned; NULL when nothing is mapped */
    uint64_t size;     /* bytes */
} gm_map;

/* Maps path read-only. On failure *out is zeroed and err says why, naming the path:
 * GEMMAC_ERR_IO for open/stat/mmap failures (with strerror), a directory or other non-regular file, and
 * an empty file. The mapping is MAP_PRIVATE: if another process truncates the file while it is mapped,
 * reads past the new end fault (SIGBUS); model files are assumed not to shrink under a running engine. */
gemmac_status gm_map_file(const char *path, gm_map *out, gm_error *err);

/* Advises random access for the pages of n bytes at p inside a mapping (no read-ahead, no fault-around):
 * a table read row by row then keeps only the pages of rows read resident. Best effort. */
void gm_map_advise_random(const void *p, uint64_t n);

/* Advises that the whole pages inside the n bytes at p will not be read for a while: the kernel may reclaim them
 * now (a file's pages are read again from the file when touched, anonymous ones swapped, never lost), so a copy
 * made of them does not count twice in the resident set. Best effort: a no-op where unsupported. */
void gm_map_advise_pageout(const void *p, uint64_t n);

/* Unmaps m (no-op on a zeroed map) and zeroes it. */
void gm_map_release(gm_map *m);

#endif
