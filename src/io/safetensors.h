/* safetensors.h: a validating reader of .safetensors files (memory-mapped, or a caller's buffer), and of a
 * checkpoint directory of shards named by model.safetensors.index.json. Everything is checked once at open
 * (reliability.md §1.6 point 9); after a successful open every accessor is safe. Knows nothing of models:
 * binding tensors by name, checking shapes and converting dtypes belong to src/model.
 *
 * The format: u64 little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "BF16", "shape": [2560, 10240], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"format": "pt"}}
 * then the data section; offsets are relative to it. As the safetensors library itself requires, the
 * tensors must tile the data section exactly: no overlap, no gap, nothing after the last tensor. */
#ifndef GM_SAFETENSORS_H
#define GM_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "quant/quant.h"

#define GM_ST_MAX_HEADER   100000000u     /* bytes of JSON header (the safetensors library's own limit) */
#define GM_ST_MAX_DIMS     8
#define GM_ST_MAX_DEPTH    8              /* JSON nesting of a header (the format needs 3) */
#define GM_ST_MAX_VALUES   (1u << 22)     /* JSON values in one header or index (bounds the parser's memory) */
#define GM_ST_MAX_INDEX    (64u << 20)    /* bytes of model.safetensors.index.json */
#define GM_ST_MAX_SHARDS   4096u

/* Every dtype the format names (safetensors 0.8). Only F32, F16 and BF16 are accepted as weights. */
typedef enum gm_st_dtype {
    GM_ST_BOOL, GM_ST_U8, GM_ST_I8, GM_ST_F8_E5M2, GM_ST_F8_E4M3, GM_ST_F8_E4M3FNUZ, GM_ST_F8_E5M2FNUZ,
    GM_ST_F8_E8M0, GM_ST_I16, GM_ST_U16, GM_ST_F16, GM_ST_BF16, GM_ST_I32, GM_ST_U32, GM_ST_F32, GM_ST_F64,
    GM_ST_I64, GM_ST_U64, GM_ST_C64, GM_ST_F4, GM_ST_F6_E2M3, GM_ST_F6_E3M2,
    GM_ST_DTYPE_COUNT
} gm_st_dtype;

/* "BF16" as the format spells it ("unknown" outside the enum). */
const char *gm_st_dtype_name(gm_st_dtype d);
/* Bits per element (4 for F4, 6 for F6_*, 8 .. 64 for the rest); 0 outside the enum. */
uint32_t gm_st_dtype_bits(gm_st_dtype d);

typedef struct gm_st_tensor {
    const char *name;              /* NUL-terminated, non-empty, NUL-free; owned by the handle */
    gm_st_dtype dtype;
    int32_t n_dims;                /* 0 (a scalar) .. GM_ST_MAX_DIMS */
    int64_t shape[GM_ST_MAX_DIMS]; /* HF order: shape[0] slowest, shape[n_dims-1] contiguous; unused are 1 */
    int64_t ne[GM_ST_MAX_DIMS];    /* GGML order: ne[0] = shape[n_dims-1] (contiguous); unused are 1 */
    uint64_t n_elements;           /* product of shape (1 for a scalar; 0 when a dim is 0) */
    uint64_t offset;               /* data_offsets[0], bytes within the data section */
    uint64_t size;                 /* bytes: data_offsets[1] - data_offsets[0] */
    const void *data;              /* the mapped bytes; NOT necessarily aligned to the element size */
    uint64_t header_offset;        /* file offset of the tensor's name in the JSON header (for messages) */
} gm_st_tensor;

typedef struct gm_st gm_st;

/* Opens and validates one file (mapped read-only). */
gemmac_status gm_st_open(const char *path, gm_st **out, gm_error *err);
/* The same over a caller's buffer, which must outlive the handle (tests, fuzzing). */
gemmac_status gm_st_open_memory(const void *data, size_t size, gm_st **out, gm_error *err);
void gm_st_close(gm_st *f);

uint64_t gm_st_file_size(const gm_st *f);
/* File offset of the data section (8 + header length). */
uint64_t gm_st_data_offset(const gm_st *f);

/* Tensors in the order of their data (ascending offset). */
uint64_t gm_st_n_tensors(const gm_st *f);
const gm_st_tensor *gm_st_tensor_at(const gm_st *f, uint64_t i);            /* NULL past the end */
const gm_st_tensor *gm_st_find_tensor(const gm_st *f, const char *name);    /* NULL if absent */

/* "__metadata__": string keys to string values, sorted by key. */
uint64_t gm_st_n_metadata(const gm_st *f);
bool gm_st_metadata_at(const gm_st *f, uint64_t i, const char **key, const char **value);
const char *gm_st_find_metadata(const gm_st *f, const char *key);           /* NULL if absent */

/* The gm_type of a weight tensor: F32, F16 and BF16; GEMMAC_ERR_UNSUPPORTED naming the tensor and its dtype
 * for every other dtype. */
gemmac_status gm_st_weight_type(const gm_st_tensor *t, gm_type *out, gm_error *err);

/* ==== model.safetensors.index.json ==== */

typedef struct gm_st_index gm_st_index;

/* Parses and validates an index: an object with "weight_map" (tensor name -> shard file name) and optional
 * "metadata" (an object). Shard names must be plain file names: no '/', '\\' or "..", not "." or empty.
 * name is used in messages. */
gemmac_status gm_st_index_parse(const char *text, size_t len, const char *name, gm_st_index **out,
                                gm_error *err);
void gm_st_index_free(gm_st_index *ix);
uint64_t gm_st_index_n_entries(const gm_st_index *ix);
/* Entry i (sorted by tensor name): its tensor name and shard number (< gm_st_index_n_files). */
bool gm_st_index_entry(const gm_st_index *ix, uint64_t i, const char **tensor, uint32_t *file);
/* The distinct shard file names, in order of first appearance. */
uint32_t gm_st_index_n_files(const gm_st_index *ix);
const char *gm_st_index_file(const gm_st_index *ix, uint32_t i);

/* ==== A checkpoint: one file, or the shards of an index, with one lookup across them ==== */

typedef struct gm_st_set gm_st_set;

/* path is a directory (model.safetensors if present, as transformers prefers, else
 * model.safetensors.index.json), an index file (*.json), or one .safetensors file. With an index, every
 * shard it names is opened from the index's directory, every tensor it lists must be in its shard, and no
 * tensor name may be in two shards. Messages name the shard. */
gemmac_status gm_st_set_open(const char *path, gm_st_set **out, gm_error *err);
void gm_st_set_close(gm_st_set *s);

uint32_t gm_st_set_n_files(const gm_st_set *s);
const gm_st *gm_st_set_file(const gm_st_set *s, uint32_t i);
/* The shard's name as the index gives it; "model.safetensors" for a directory without an index; the path
 * as given for a single file. */
const char *gm_st_set_file_name(const gm_st_set *s, uint32_t i);

/* All tensors of all shards, sorted by name; *file (may be NULL) gets the shard number. */
uint64_t gm_st_set_n_tensors(const gm_st_set *s);
const gm_st_tensor *gm_st_set_tensor_at(const gm_st_set *s, uint64_t i, uint32_t *file);
const gm_st_tensor *gm_st_set_find(const gm_st_set *s, const char *name, uint32_t *file);  /* NULL if absent */

#endif
