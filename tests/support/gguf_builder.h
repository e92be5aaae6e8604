/* gguf_builder.h: a tiny in-memory GGUF writer for tests: key/values of every type, string arrays, tensors
 * with a given type, shape and bytes, alignment; plus raw escape hatches for writing malformed files.
 * Test support only: it aborts on out-of-memory and trusts its caller; reading files is src/io/gguf.c.
 *
 * Usage:
 *     gm_gb *b = gm_gb_new();                          // GGUF v3, alignment 32
 *     gm_gb_str(b, "general.architecture", "gemma3");
 *     gm_gb_u32(b, "gemma3.block_count", 2);
 *     const char *toks[] = {"<pad>", "<eos>", "a"};
 *     gm_gb_str_arr(b, "tokenizer.ggml.tokens", 3, toks);
 *     gm_gb_tensor(b, "token_embd.weight", GM_TYPE_F32, 2, (int64_t[]){8, 3}, floats);  // ne[0] = 8
 *     size_t size;
 *     uint8_t *file = gm_gb_write(b, &size);           // malloc'd; free() it
 *     gm_gb_free(b);
 */
#ifndef GM_GGUF_BUILDER_H
#define GM_GGUF_BUILDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/gguf.h"
#include "quant/quant.h"

typedef struct gm_gb gm_gb;

gm_gb *gm_gb_new(void);   /* version 3, alignment 32, no kv pairs, no tensors */
void gm_gb_free(gm_gb *b);

/* ---- Header ---- */
void gm_gb_version(gm_gb *b, uint32_t version);
/* Adds the kv general.alignment (u32) at this point of the kv list, and pads the data section and every
 * tensor offset to it. Call at most once (twice writes a duplicate key). */
void gm_gb_alignment(gm_gb *b, uint32_t alignment);
/* Overrides the magic (4 bytes) or the counts written in the header (UINT64_MAX: the real count). */
void gm_gb_magic(gm_gb *b, const char magic[4]);
void gm_gb_counts(gm_gb *b, uint64_t n_tensors, uint64_t n_kv);

/* ---- Key/value pairs, written in the order added ---- */
void gm_gb_u8(gm_gb *b, const char *key, uint8_t v);
void gm_gb_i8(gm_gb *b, const char *key, int8_t v);
void gm_gb_u16(gm_gb *b, const char *key, uint16_t v);
void gm_gb_i16(gm_gb *b, const char *key, int16_t v);
void gm_gb_u32(gm_gb *b, const char *key, uint32_t v);
void gm_gb_i32(gm_gb *b, const char *key, int32_t v);
void gm_gb_u64(gm_gb *b, const char *key, uint64_t v);
void gm_gb_i64(gm_gb *b, const char *key, int64_t v);
void gm_gb_f32(gm_gb *b, const char *key, float v);
void gm_gb_f64(gm_gb *b, const char *key, double v);
void gm_gb_bool(gm_gb *b, const char *key, bool v);
void gm_gb_str(gm_gb *b, const char *key, const char *s);
/* An array of n fixed-size elements of type elem (not STRING or ARRAY), packed little-endian at data. */
void gm_gb_arr(gm_gb *b, const char *key, gm_gguf_vtype elem, uint64_t n, const void *data);
void gm_gb_str_arr(gm_gb *b, const char *key, uint64_t n, const char *const *strs);
/* A kv pair with any key bytes, any value type number and the value's bytes as given (after the u32 type). */
void gm_gb_kv_raw(gm_gb *b, const void *key, uint64_t key_len, uint32_t vtype, const void *value,
                  size_t value_bytes);
/* Appends bytes to the kv section as is (not counted as a kv pair). */
void gm_gb_kv_bytes(gm_gb *b, const void *bytes, size_t n);

/* ---- Tensors, in the order added ---- */
/* A tensor of type with dims ne[0..n_dims) (GGML order: ne[0] is the row length; a multiple of the type's
 * block size) and its bytes (gm_row_bytes × rows; NULL: zeros). Placed at the next aligned offset. */
void gm_gb_tensor(gm_gb *b, const char *name, gm_type type, int n_dims, const int64_t *ne, const void *data);
/* A tensor info written exactly as given (any name bytes, n_dims, dims, type number, offset); it adds no
 * bytes to the data section: size that with gm_gb_data_size. */
void gm_gb_tensor_raw(gm_gb *b, const void *name, uint64_t name_len, uint32_t n_dims, const uint64_t *ne,
                      uint32_t type, uint64_t offset);
/* Makes the data section at least n bytes (zero-filled past the tensors). */
void gm_gb_data_size(gm_gb *b, uint64_t n);

/* ---- Output ---- */
/* The file in a malloc'd buffer (free() it); *size gets its length. */
uint8_t *gm_gb_write(const gm_gb *b, size_t *size);
/* Writes the file to path; false on an I/O error. */
bool gm_gb_write_file(const gm_gb *b, const char *path);

#endif
