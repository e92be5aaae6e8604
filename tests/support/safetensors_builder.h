/* safetensors_builder.h: a tiny in-memory .safetensors writer for tests: tensors of any dtype and shape with
 * given bytes, __metadata__, and raw escape hatches (verbatim entries, a verbatim header, a forged header
 * length, extra data bytes) for writing malformed files. Test support only: aborts on out-of-memory and
 * trusts its caller; reading files is src/io/safetensors.c.
 *
 * Usage:
 *     gm_sb *b = gm_sb_new();
 *     gm_sb_metadata(b, "format", "pt");
 *     gm_sb_tensor(b, "w", "F32", 2, (int64_t[]){3, 4}, floats);   // HF order: 3 rows of 4
 *     size_t size;
 *     uint8_t *file = gm_sb_write(b, &size);                       // malloc'd; free() it
 *     gm_sb_free(b);
 */
#ifndef GM_SAFETENSORS_BUILDER_H
#define GM_SAFETENSORS_BUILDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gm_sb gm_sb;

gm_sb *gm_sb_new(void);   /* no tensors, no metadata; header padded with spaces to 8 bytes like safetensors */
void gm_sb_free(gm_sb *b);

/* Bytes of n elements of a dtype the format names ("BF16", "F4", ...); 0 for an unknown name. */
uint64_t gm_sb_dtype_bytes(const char *dtype, uint64_t n);

/* A tensor with HF-order shape[0..n_dims) and its bytes (NULL: zeros), appended to the data section; its
 * data_offsets are where the bytes land. name is JSON-escaped. */
void gm_sb_tensor(gm_sb *b, const char *name, const char *dtype, int n_dims, const int64_t *shape,
                  const void *data);
/* An entry written verbatim: "key": value_json, where key_json is the already-escaped key text (without
 * quotes). Adds nothing to the data section. */
void gm_sb_entry_raw(gm_sb *b, const char *key_json, const char *value_json);
void gm_sb_metadata(gm_sb *b, const char *key, const char *value);
/* Appends n bytes (NULL: zeros) to the data section, belonging to no tensor. */
void gm_sb_data(gm_sb *b, const void *bytes, size_t n);

/* The whole JSON header written verbatim instead of the generated one (padding still applies unless off). */
void gm_sb_header_raw(gm_sb *b, const char *json);
/* Writes n as the header length instead of the real one. */
void gm_sb_header_len(gm_sb *b, uint64_t n);
void gm_sb_no_pad(gm_sb *b);

/* The file in a malloc'd buffer (free() it); *size gets its length. */
uint8_t *gm_sb_write(const gm_sb *b, size_t *size);
/* Writes the file to path; false on an I/O error. */
bool gm_sb_write_file(const gm_sb *b, const char *path);

#endif
