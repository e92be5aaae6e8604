/* gguf_writer.h: writing GGUF v3 files (metadata, tensor infos, aligned tensor data) as llama.cpp's gguf-py
 * writes them, streaming tensor data so a file of many gigabytes never sits in memory. Used by `gemmac synth`
 * (random weights of a real model's shape) and `gemmac convert` (a Hugging Face checkpoint to GGUF). Knows
 * nothing of models: which keys and tensors a model has belongs to its arch file. */
#ifndef GM_GGUF_WRITER_H
#define GM_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "quant/quant.h"

typedef struct gm_gguf_writer gm_gguf_writer;

/* NULL when out of memory. Alignment 32 (general.alignment is not written). */
gm_gguf_writer *gm_gguf_writer_new(void);
void gm_gguf_writer_free(gm_gguf_writer *w);

/* Metadata, written in the order added. Failures (out of memory, a key added twice) are remembered and
 * reported by gm_gguf_writer_write. Strings are copied. */
void gm_gguf_writer_u32(gm_gguf_writer *w, const char *key, uint32_t v);
void gm_gguf_writer_i32(gm_gguf_writer *w, const char *key, int32_t v);
void gm_gguf_writer_f32(gm_gguf_writer *w, const char *key, float v);
void gm_gguf_writer_bool(gm_gguf_writer *w, const char *key, bool v);
void gm_gguf_writer_str(gm_gguf_writer *w, const char *key, const char *v);
void gm_gguf_writer_arr_u32(gm_gguf_writer *w, const char *key, const uint32_t *v, size_t n);
void gm_gguf_writer_arr_i32(gm_gguf_writer *w, const char *key, const int32_t *v, size_t n);
void gm_gguf_writer_arr_f32(gm_gguf_writer *w, const char *key, const float *v, size_t n);
void gm_gguf_writer_arr_bool(gm_gguf_writer *w, const char *key, const bool *v, size_t n);
void gm_gguf_writer_arr_str(gm_gguf_writer *w, const char *key, const char *const *v, size_t n);

/* Declares the next tensor: name, type, n_dims and ne (GGML order). ne[0] must be a multiple of the type's
 * block size. Data comes later, in declaration order, from gm_gguf_writer_write's fill callback. */
gemmac_status gm_gguf_writer_add_tensor(gm_gguf_writer *w, const char *name, gm_type type, int n_dims,
                                        const int64_t *ne, gm_error *err);

/* Produces tensor i's bytes (exactly gm_row_bytes(type, ne[0]) · rows) into buf. */
typedef gemmac_status (*gm_gguf_fill_fn)(void *ud, uint64_t i, void *buf, uint64_t n_bytes, gm_error *err);

/* Writes the file at path (to path + ".tmp", renamed at the end, so a failure leaves no partial file). */
gemmac_status gm_gguf_writer_write(gm_gguf_writer *w, const char *path, gm_gguf_fill_fn fill, void *ud,
                                   gm_error *err);

/* ---- additions (streaming tensors larger than memory, copying metadata from a read file) ---- */

/* Produces rows [row0, row0 + n_rows) of tensor i (rows counted over ne[1]·ne[2]·ne[3]) into buf: exactly
 * n_bytes = gm_row_bytes(type, ne[0]) · n_rows bytes. */
typedef gemmac_status (*gm_gguf_fill_rows_fn)(void *ud, uint64_t i, int64_t row0, int64_t n_rows, void *buf,
                                              uint64_t n_bytes, gm_error *err);
/* As gm_gguf_writer_write, but asks for every tensor in chunks of whole rows of at most chunk_bytes (at least
 * one row; 0: 64 MiB), so that one tensor of many gigabytes never sits in memory either. */
gemmac_status gm_gguf_writer_write_rows(gm_gguf_writer *w, const char *path, gm_gguf_fill_rows_fn fill, void *ud,
                                        uint64_t chunk_bytes, gm_error *err);

struct gm_gguf_kv;
/* Adds a key/value pair of any type (scalars, strings, arrays of either) with the value of kv, a pair of a
 * file opened by the reader; key NULL: kv's own key. */
void gm_gguf_writer_kv_copy(gm_gguf_writer *w, const char *key, const struct gm_gguf_kv *kv);
/* Number of tensors declared so far, and the total bytes the file will have (header, padding, data). */
uint64_t gm_gguf_writer_n_tensors(const gm_gguf_writer *w);
uint64_t gm_gguf_writer_file_size(const gm_gguf_writer *w);

#endif
