/* reader.h: a bounds-checked little-endian cursor over an in-memory byte range (a mapped file).
 * Owns only "is there room, then read": every read either succeeds whole or leaves the cursor untouched
 * and returns false. Wording errors (which field, which offset) is left to the format parsers. */
#ifndef GM_READER_H
#define GM_READER_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gemmac reads little-endian files by memcpy and needs a little-endian host"
#endif

typedef struct gm_reader {
    const uint8_t *base;  /* first byte of the range */
    uint64_t size;        /* bytes in the range */
    uint64_t pos;         /* offset of the next read; always <= size */
} gm_reader;

static inline gm_reader gm_reader_make(const void *base, uint64_t size) {
    gm_reader r = {(const uint8_t *)base, size, 0};
    return r;
}

/* Bytes between the cursor and the end. */
static inline uint64_t gm_rd_left(const gm_reader *r) { return r->size - r->pos; }

/* The address at the cursor (valid to read gm_rd_left bytes; may be one past the end when none left). */
static inline const uint8_t *gm_rd_ptr(const gm_reader *r) { return r->base + r->pos; }

static inline bool gm_rd_skip(gm_reader *r, uint64_t n) {
    if (n > gm_rd_left(r)) return false;
    r->pos += n;
    return true;
}

static inline bool gm_rd_bytes(gm_reader *r, void *dst, uint64_t n) {
    if (n > gm_rd_left(r)) return false;
    memcpy(dst, r->base + r->pos, (size_t)n);
    r->pos += n;
    return true;
}

static inline bool gm_rd_u32(gm_reader *r, uint32_t *v) { return gm_rd_bytes(r, v, sizeof *v); }
static inline bool gm_rd_u64(gm_reader *r, uint64_t *v) { return gm_rd_bytes(r, v, sizeof *v); }

/* Overflow-checked 64-bit arithmetic: false when the exact result does not fit. */
static inline bool gm_add_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool gm_mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }

#endif
