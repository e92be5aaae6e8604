/* gguf.h: a validating reader of GGUF v2/v3 files (memory-mapped, or a caller's buffer). Everything in
 * the file is checked once at open (reliability.md §1.6); after a successful open every accessor is safe.
 * Knows nothing of models: binding tensors by name and checking their shapes belongs to src/model. */
#ifndef GM_GGUF_H
#define GM_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "quant/quant.h"

/* Limits on what a file may declare (checked before anything is allocated). */
#define GM_GGUF_MAX_TENSORS     65536u
#define GM_GGUF_MAX_KV          65536u
#define GM_GGUF_MAX_STRING      (1u << 20)      /* bytes in one string (keys, names, values) */
#define GM_GGUF_MAX_ARRAY       (1u << 26)      /* elements in one array */
#define GM_GGUF_MAX_DIMS        4

typedef enum gm_gguf_vtype {
    GM_GGUF_UINT8 = 0, GM_GGUF_INT8 = 1, GM_GGUF_UINT16 = 2, GM_GGUF_INT16 = 3,
    GM_GGUF_UINT32 = 4, GM_GGUF_INT32 = 5, GM_GGUF_FLOAT32 = 6, GM_GGUF_BOOL = 7,
    GM_GGUF_STRING = 8, GM_GGUF_ARRAY = 9, GM_GGUF_UINT64 = 10, GM_GGUF_INT64 = 11,
    GM_GGUF_FLOAT64 = 12, GM_GGUF_VTYPE_COUNT
} gm_gguf_vtype;

/* A string inside the file: not NUL-terminated; len bytes at ptr (valid while the gguf is open). */
typedef struct gm_str {
    const char *ptr;
    uint64_t len;
} gm_str;

typedef struct gm_gguf_kv {
    gm_str key;
    gm_gguf_vtype type;
    gm_gguf_vtype arr_type;        /* element type when type == ARRAY (never ARRAY itself); == type for scalars */
    uint64_t arr_n;                /* element count when type == ARRAY; 1 for scalars */
    const void *data;              /* the value (scalar types), or the first element (arrays of scalars);
                                      may be unaligned: read with memcpy. For strings: the raw length
                                      prefix in the file; use strs instead */
    const gm_str *strs;            /* STRING: one entry; ARRAY of STRING: arr_n entries */
    uint64_t file_offset;          /* where the key/value pair starts, for messages */
} gm_gguf_kv;

typedef struct gm_gguf_tensor {
    gm_str name;
    gm_type type;
    int32_t n_dims;
    int64_t ne[GM_GGUF_MAX_DIMS];  /* GGML order: ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint64_t n_elements;
    uint64_t offset;               /* within the data section */
    uint64_t size;                 /* bytes */
    const void *data;              /* mapped bytes (aligned as the file's alignment) */
} gm_gguf_tensor;

typedef struct gm_gguf gm_gguf;

/* Opens and validates a file (mapped read-only). */
gemmac_status gm_gguf_open(const char *path, gm_gguf **out, gm_error *err);
/* The same over a caller's buffer, which must outlive the handle (tests, fuzzing). */
gemmac_status gm_gguf_open_memory(const void *data, size_t size, gm_gguf **out, gm_error *err);
void gm_gguf_close(gm_gguf *g);

uint32_t gm_gguf_version(const gm_gguf *g);
uint64_t gm_gguf_alignment(const gm_gguf *g);
uint64_t gm_gguf_file_size(const gm_gguf *g);
/* File offset of the data section (tensor offsets are relative to it). */
uint64_t gm_gguf_data_offset(const gm_gguf *g);

uint64_t gm_gguf_n_kv(const gm_gguf *g);
const gm_gguf_kv *gm_gguf_kv_at(const gm_gguf *g, uint64_t i);
const gm_gguf_kv *gm_gguf_find_kv(const gm_gguf *g, const char *key); /* NULL if absent */

uint64_t gm_gguf_n_tensors(const gm_gguf *g);
const gm_gguf_tensor *gm_gguf_tensor_at(const gm_gguf *g, uint64_t i);
const gm_gguf_tensor *gm_gguf_find_tensor(const gm_gguf *g, const char *name); /* NULL if absent */

/* Typed getters. Each returns GEMMAC_ERR_NOT_FOUND (message names the key) when the key is absent, and
 * GEMMAC_ERR_BAD_FILE when it has another type or its value does not fit. Integers accept any integer
 * type whose value fits; floats accept FLOAT32 and FLOAT64. */
gemmac_status gm_gguf_get_u32(const gm_gguf *g, const char *key, uint32_t *out, gm_error *err);
gemmac_status gm_gguf_get_i32(const gm_gguf *g, const char *key, int32_t *out, gm_error *err);
gemmac_status gm_gguf_get_f32(const gm_gguf *g, const char *key, float *out, gm_error *err);
gemmac_status gm_gguf_get_bool(const gm_gguf *g, const char *key, bool *out, gm_error *err);
gemmac_status gm_gguf_get_str(const gm_gguf *g, const char *key, gm_str *out, gm_error *err);
/* An array whose elements have exactly type elem (e.g. FLOAT32 scores, INT32 token types). *data points at
 * arr_n packed little-endian elements; may be unaligned: read with memcpy. */
gemmac_status gm_gguf_get_arr(const gm_gguf *g, const char *key, gm_gguf_vtype elem, uint64_t *n,
                              const void **data, gm_error *err);
gemmac_status gm_gguf_get_str_arr(const gm_gguf *g, const char *key, uint64_t *n, const gm_str **strs,
                                  gm_error *err);

/* Reads element i of an integer-typed array (or a scalar when i == 0) as int64; false if not integer. */
bool gm_gguf_kv_int(const gm_gguf_kv *kv, uint64_t i, int64_t *out);
/* "u8", "string", "array", ... ("unknown" for numbers outside the enum). */
const char *gm_gguf_vtype_name(gm_gguf_vtype t);
/* Compares a gm_str to a C string. */
bool gm_str_eq(gm_str s, const char *c);

#endif
