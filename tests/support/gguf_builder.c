/* gguf_builder.c: the test-only GGUF writer declared in gguf_builder.h. Keeps kv bytes and tensor infos in
 * growable buffers and lays the file out at gm_gb_write; validates nothing (tests need malformed files). */
#include "gguf_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

typedef struct gb_tensor {
    uint8_t *name;
    uint64_t name_len;
    uint32_t n_dims;
    uint64_t ne[GM_GGUF_MAX_DIMS];
    uint32_t type;
    bool raw;                 /* offset as given, no data */
    uint64_t offset;          /* raw tensors only */
    uint8_t *data;            /* auto tensors: size bytes (NULL: zeros) */
    uint64_t size;
} gb_tensor;

struct gm_gb {
    char magic[4];
    uint32_t version;
    uint64_t alignment;
    uint64_t n_tensors_override, n_kv_override;
    buf kv;                   /* serialized kv pairs */
    uint64_t n_kv;
    gb_tensor *tensors;
    size_t n_tensors, cap_tensors;
    uint64_t data_min;
};

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "gguf_builder: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_zeros(buf *b, uint64_t n) {
    static const uint8_t z[64];
    while (n) {
        size_t k = n < sizeof z ? (size_t)n : sizeof z;
        put(b, z, k);
        n -= k;
    }
}
static void put_str(buf *b, const void *s, uint64_t len) {
    put_u64(b, len);
    put(b, s, (size_t)len);
}

static uint64_t align_up(uint64_t x, uint64_t a) { return a ? (x + a - 1) / a * a : x; }

gm_gb *gm_gb_new(void) {
    gm_gb *b = xrealloc(NULL, sizeof *b);
    memset(b, 0, sizeof *b);
    memcpy(b->magic, "GGUF", 4);
    b->version = 3;
    b->alignment = 32;
    b->n_tensors_override = b->n_kv_override = UINT64_MAX;
    return b;
}

void gm_gb_free(gm_gb *b) {
    if (!b) return;
    for (size_t i = 0; i < b->n_tensors; i++) {
        free(b->tensors[i].name);
        free(b->tensors[i].data);
    }
    free(b->tensors);
    free(b->kv.p);
    free(b);
}

void gm_gb_version(gm_gb *b, uint32_t version) { b->version = version; }
void gm_gb_magic(gm_gb *b, const char magic[4]) { memcpy(b->magic, magic, 4); }
void gm_gb_counts(gm_gb *b, uint64_t n_tensors, uint64_t n_kv) {
    b->n_tensors_override = n_tensors;
    b->n_kv_override = n_kv;
}

void gm_gb_alignment(gm_gb *b, uint32_t alignment) {
    gm_gb_u32(b, "general.alignment", alignment);
    b->alignment = alignment;
}

void gm_gb_kv_raw(gm_gb *b, const void *key, uint64_t key_len, uint32_t vtype, const void *value,
                  size_t value_bytes) {
    put_str(&b->kv, key, key_len);
    put_u32(&b->kv, vtype);
    put(&b->kv, value, value_bytes);
    b->n_kv++;
}

void gm_gb_kv_bytes(gm_gb *b, const void *bytes, size_t n) { put(&b->kv, bytes, n); }

static void scalar(gm_gb *b, const char *key, gm_gguf_vtype t, const void *v, size_t n) {
    gm_gb_kv_raw(b, key, strlen(key), (uint32_t)t, v, n);
}

void gm_gb_u8(gm_gb *b, const char *key, uint8_t v) { scalar(b, key, GM_GGUF_UINT8, &v, 1); }
void gm_gb_i8(gm_gb *b, const char *key, int8_t v) { scalar(b, key, GM_GGUF_INT8, &v, 1); }
void gm_gb_u16(gm_gb *b, const char *key, uint16_t v) { scalar(b, key, GM_GGUF_UINT16, &v, 2); }
void gm_gb_i16(gm_gb *b, const char *key, int16_t v) { scalar(b, key, GM_GGUF_INT16, &v, 2); }
void gm_gb_u32(gm_gb *b, const char *key, uint32_t v) { scalar(b, key, GM_GGUF_UINT32, &v, 4); }
void gm_gb_i32(gm_gb *b, const char *key, int32_t v) { scalar(b, key, GM_GGUF_INT32, &v, 4); }
void gm_gb_u64(gm_gb *b, const char *key, uint64_t v) { scalar(b, key, GM_GGUF_UINT64, &v, 8); }
void gm_gb_i64(gm_gb *b, const char *key, int64_t v) { scalar(b, key, GM_GGUF_INT64, &v, 8); }
void gm_gb_f32(gm_gb *b, const char *key, float v) { scalar(b, key, GM_GGUF_FLOAT32, &v, 4); }
void gm_gb_f64(gm_gb *b, const char *key, double v) { scalar(b, key, GM_GGUF_FLOAT64, &v, 8); }
void gm_gb_bool(gm_gb *b, const char *key, bool v) {
    uint8_t x = v ? 1 : 0;
    scalar(b, key, GM_GGUF_BOOL, &x, 1);
}

void gm_gb_str(gm_gb *b, const char *key, const char *s) {
    put_str(&b->kv, key, strlen(key));
    put_u32(&b->kv, GM_GGUF_STRING);
    put_str(&b->kv, s, strlen(s));
    b->n_kv++;
}

static size_t elem_bytes(gm_gguf_vtype t) {
    switch (t) {
    case GM_GGUF_UINT8: case GM_GGUF_INT8: case GM_GGUF_BOOL: return 1;
    case GM_GGUF_UINT16: case GM_GGUF_INT16: return 2;
    case GM_GGUF_UINT32: case GM_GGUF_INT32: case GM_GGUF_FLOAT32: return 4;
    case GM_GGUF_UINT64: case GM_GGUF_INT64: case GM_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

void gm_gb_arr(gm_gb *b, const char *key, gm_gguf_vtype elem, uint64_t n, const void *data) {
    put_str(&b->kv, key, strlen(key));
    put_u32(&b->kv, GM_GGUF_ARRAY);
    put_u32(&b->kv, (uint32_t)elem);
    put_u64(&b->kv, n);
    put(&b->kv, data, (size_t)(n * elem_bytes(elem)));
    b->n_kv++;
}

void gm_gb_str_arr(gm_gb *b, const char *key, uint64_t n, const char *const *strs) {
    put_str(&b->kv, key, strlen(key));
    put_u32(&b->kv, GM_GGUF_ARRAY);
    put_u32(&b->kv, GM_GGUF_STRING);
    put_u64(&b->kv, n);
    for (uint64_t i = 0; i < n; i++) put_str(&b->kv, strs[i], strlen(strs[i]));
    b->n_kv++;
}

static gb_tensor *new_tensor(gm_gb *b, const void *name, uint64_t name_len) {
    if (b->n_tensors == b->cap_tensors) {
        b->cap_tensors = b->cap_tensors ? 2 * b->cap_tensors : 8;
        b->tensors = xrealloc(b->tensors, b->cap_tensors * sizeof *b->tensors);
    }
    gb_tensor *t = &b->tensors[b->n_tensors++];
    memset(t, 0, sizeof *t);
    t->name = xrealloc(NULL, (size_t)name_len);
    memcpy(t->name, name, (size_t)name_len);
    t->name_len = name_len;
    return t;
}

void gm_gb_tensor(gm_gb *b, const char *name, gm_type type, int n_dims, const int64_t *ne, const void *data) {
    gb_tensor *t = new_tensor(b, name, strlen(name));
    t->n_dims = (uint32_t)n_dims;
    t->type = (uint32_t)type;
    uint64_t rows = 1;
    for (int d = 0; d < n_dims && d < GM_GGUF_MAX_DIMS; d++) {
        t->ne[d] = (uint64_t)ne[d];
        if (d) rows *= (uint64_t)ne[d];
    }
    const gm_type_traits *tr = gm_type_traits_of(type);
    t->size = tr ? gm_row_bytes(tr, ne[0]) * rows : 0;
    if (data && t->size) {
        t->data = xrealloc(NULL, (size_t)t->size);
        memcpy(t->data, data, (size_t)t->size);
    }
}

void gm_gb_tensor_raw(gm_gb *b, const void *name, uint64_t name_len, uint32_t n_dims, const uint64_t *ne,
                      uint32_t type, uint64_t offset) {
    gb_tensor *t = new_tensor(b, name, name_len);
    t->raw = true;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims && d < GM_GGUF_MAX_DIMS; d++) t->ne[d] = ne[d];
    t->type = type;
    t->offset = offset;
}

void gm_gb_data_size(gm_gb *b, uint64_t n) { b->data_min = n; }

uint8_t *gm_gb_write(const gm_gb *b, size_t *size) {
    buf out = {0};
    uint64_t a = b->alignment;
    put(&out, b->magic, 4);
    put_u32(&out, b->version);
    put_u64(&out, b->n_tensors_override != UINT64_MAX ? b->n_tensors_override : (uint64_t)b->n_tensors);
    put_u64(&out, b->n_kv_override != UINT64_MAX ? b->n_kv_override : b->n_kv);
    put(&out, b->kv.p, b->kv.n);

    uint64_t *offs = xrealloc(NULL, (b->n_tensors + 1) * sizeof *offs);
    uint64_t data_end = 0;
    for (size_t i = 0; i < b->n_tensors; i++) {
        const gb_tensor *t = &b->tensors[i];
        if (t->raw) {
            offs[i] = t->offset;
        } else {
            offs[i] = align_up(data_end, a);
            data_end = offs[i] + t->size;
        }
        put_str(&out, t->name, t->name_len);
        put_u32(&out, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&out, d < GM_GGUF_MAX_DIMS ? t->ne[d] : 1);
        put_u32(&out, t->type);
        put_u64(&out, offs[i]);
    }
    put_zeros(&out, align_up(out.n, a) - out.n);

    size_t data_start = out.n;
    for (size_t i = 0; i < b->n_tensors; i++) {
        const gb_tensor *t = &b->tensors[i];
        if (t->raw) continue;
        put_zeros(&out, data_start + offs[i] - out.n);
        if (t->data) put(&out, t->data, (size_t)t->size);
        else put_zeros(&out, t->size);
    }
    if (out.n - data_start < b->data_min) put_zeros(&out, b->data_min - (out.n - data_start));
    free(offs);
    *size = out.n;
    return out.p ? out.p : xrealloc(NULL, 1);
}

bool gm_gb_write_file(const gm_gb *b, const char *path) {
    size_t n;
    uint8_t *p = gm_gb_write(b, &n);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = false;
    free(p);
    return ok;
}
