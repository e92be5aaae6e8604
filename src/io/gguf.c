/* gguf.c: the GGUF v2/v3 parser behind gguf.h: checks everything once at open (reliability.md §1.6), indexes
 * keys and tensor names in hash tables, and serves the typed getters. What keys and tensors mean for a
 * model is left to src/model; bounds-checked reads are reader.h's, mapping is mmap.c's. */
#include "io/gguf.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "io/mmap.h"
#include "io/reader.h"

_Static_assert(sizeof(float) == 4 && sizeof(double) == 8, "GGUF floats are IEEE binary32/binary64");

#define DEFAULT_ALIGNMENT 32u
/* The fewest bytes a kv pair / tensor info can take, used to bound the header counts by the file size:
 * key length + 1 key byte + value type + a 1-byte value; name length + 1 name byte + n_dims + one dim +
 * type + offset. */
#define KV_MIN_BYTES     (8u + 1u + 4u + 1u)
#define TENSOR_MIN_BYTES (8u + 1u + 4u + 8u + 4u + 8u)
#define SHOW_NAME_MAX    GM_SHOW_MAX /* characters shown of a key or tensor name in a message */

/* Bytes of one element of each value type (0: variable size). */
static const uint8_t k_vsize[GM_GGUF_VTYPE_COUNT] = {
    [GM_GGUF_UINT8] = 1, [GM_GGUF_INT8] = 1,    [GM_GGUF_UINT16] = 2,  [GM_GGUF_INT16] = 2,
    [GM_GGUF_UINT32] = 4, [GM_GGUF_INT32] = 4,  [GM_GGUF_FLOAT32] = 4, [GM_GGUF_BOOL] = 1,
    [GM_GGUF_STRING] = 0, [GM_GGUF_ARRAY] = 0,  [GM_GGUF_UINT64] = 8,  [GM_GGUF_INT64] = 8,
    [GM_GGUF_FLOAT64] = 8,
};

static const char *const k_vname[GM_GGUF_VTYPE_COUNT] = {
    [GM_GGUF_UINT8] = "u8",   [GM_GGUF_INT8] = "i8",    [GM_GGUF_UINT16] = "u16",  [GM_GGUF_INT16] = "i16",
    [GM_GGUF_UINT32] = "u32", [GM_GGUF_INT32] = "i32",  [GM_GGUF_FLOAT32] = "f32", [GM_GGUF_BOOL] = "bool",
    [GM_GGUF_STRING] = "string", [GM_GGUF_ARRAY] = "array", [GM_GGUF_UINT64] = "u64",
    [GM_GGUF_INT64] = "i64",  [GM_GGUF_FLOAT64] = "f64",
};

const char *gm_gguf_vtype_name(gm_gguf_vtype t) {
    return (unsigned)t < GM_GGUF_VTYPE_COUNT ? k_vname[t] : "unknown";
}

/* ==== Hash index: open addressing over item indices, keyed SipHash-1-3 ==== */

/* A per-handle random key keeps crafted names from colliding on purpose (quadratic probing time). */
typedef struct name_index {
    uint32_t *slots;        /* item index + 1; 0 = empty */
    uint64_t mask;          /* capacity - 1 (capacity a power of two, >= 2 * items) */
    const char *items;      /* base of the item array */
    size_t stride;          /* bytes per item */
    size_t name_off;        /* offset of the gm_str name inside an item */
    uint64_t key[2];
} name_index;

static inline uint64_t rotl64(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

#define SIPROUND                                                                                            \
    do {                                                                                                    \
        v0 += v1; v1 = rotl64(v1, 13); v1 ^= v0; v0 = rotl64(v0, 32);                                       \
        v2 += v3; v3 = rotl64(v3, 16); v3 ^= v2;                                                             \
        v0 += v3; v3 = rotl64(v3, 21); v3 ^= v0;                                                             \
        v2 += v1; v1 = rotl64(v1, 17); v1 ^= v2; v2 = rotl64(v2, 32);                                       \
    } while (0)

static uint64_t siphash13(const uint64_t k[2], const uint8_t *p, uint64_t n) {
    uint64_t v0 = 0x736f6d6570736575ull ^ k[0], v1 = 0x646f72616e646f6dull ^ k[1];
    uint64_t v2 = 0x6c7967656e657261ull ^ k[0], v3 = 0x7465646279746573ull ^ k[1];
    const uint8_t *end = p + (n & ~(uint64_t)7);
    for (; p != end; p += 8) {
        uint64_t m;
        memcpy(&m, p, 8);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = n << 56, tail = 0;
    memcpy(&tail, p, (size_t)(n & 7));
    b |= tail;
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static void random_key(uint64_t key[2], const void *salt) {
    if (getrandom(key, 2 * sizeof key[0], GRND_NONBLOCK) == (ssize_t)(2 * sizeof key[0])) return;
    /* no entropy source: addresses (ASLR) and clocks still keep the key from being known in advance */
    uint64_t local = 0;
    key[0] = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)salt;
    key[1] = (uint64_t)clock() * 0xc2b2ae3d27d4eb4full ^ (uint64_t)(uintptr_t)&local;
}

static bool index_init(name_index *ix, uint64_t n_items, const void *items, size_t stride, size_t name_off,
                       const uint64_t key[2]) {
    uint64_t cap = 8;
    while (cap < 2 * n_items) cap *= 2;    /* n_items <= 65536: no overflow */
    ix->slots = calloc((size_t)cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    ix->items = items;
    ix->stride = stride;
    ix->name_off = name_off;
    ix->key[0] = key[0];
    ix->key[1] = key[1];
    return ix->slots != NULL;
}

static const gm_str *index_name(const name_index *ix, uint32_t item) {
    return (const gm_str *)(const void *)(ix->items + (size_t)item * ix->stride + ix->name_off);
}

/* The slot holding name, or the empty slot where it would go. */
static uint64_t index_probe(const name_index *ix, const char *s, uint64_t len) {
    uint64_t h = siphash13(ix->key, (const uint8_t *)s, len) & ix->mask;
    for (;; h = (h + 1) & ix->mask) {
        uint32_t v = ix->slots[h];
        if (v == 0) return h;
        const gm_str *o = index_name(ix, v - 1);
        if (o->len == len && memcmp(o->ptr, s, (size_t)len) == 0) return h;
    }
}

/* Inserts item; returns -1, or the index of an earlier item with the same name. */
static int64_t index_insert(name_index *ix, uint32_t item) {
    const gm_str *s = index_name(ix, item);
    uint64_t h = index_probe(ix, s->ptr, s->len);
    if (ix->slots[h]) return (int64_t)ix->slots[h] - 1;
    ix->slots[h] = item + 1;
    return -1;
}

static int64_t index_find(const name_index *ix, const char *s) {
    if (!ix->slots || !s) return -1;
    uint64_t h = index_probe(ix, s, strlen(s));
    return ix->slots[h] ? (int64_t)ix->slots[h] - 1 : -1;
}

/* ==== The handle ==== */

struct gm_gguf {
    gm_map map;                    /* the mapping when opened from a path; zeroed for open_memory */
    const uint8_t *base;           /* the file's bytes */
    uint64_t size;                 /* bytes */
    uint32_t version;
    uint64_t alignment;            /* bytes; power of two */
    uint64_t data_offset;          /* file offset of the data section */
    uint64_t data_size;            /* bytes from data_offset to the end of the file */
    uint64_t n_kv;
    gm_gguf_kv *kvs;               /* [n_kv] */
    uint64_t n_tensors;
    gm_gguf_tensor *tensors;       /* [n_tensors] */
    gm_str *strs;                  /* every STRING value, kv by kv; kvs[i].strs point in here */
    uint64_t n_strs, cap_strs;
    name_index kv_index, tensor_index;
};

/* ==== Parser ==== */

typedef struct parser {
    gm_gguf *g;
    gm_reader r;
    gm_error *err;
    char where[SHOW_NAME_MAX + 64];               /* "header", "kv 3 'general.name'", "tensor blk.0.attn_q.weight" */
    uint64_t *str_first;           /* [n_kv] index in g->strs of a kv's first string (fixed up at the end) */
} parser;

typedef unsigned long long ull;

/* A name as shown in a message (see gm_show). */
typedef gm_shown shown_name;
static shown_name show_name(const char *s, uint64_t len) { return gm_show(s, (size_t)len); }

static gemmac_status pfail(parser *p, gemmac_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static gemmac_status pfail(parser *p, gemmac_status st, const char *fmt, ...) {
    char msg[sizeof p->err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gm_fail(p->err, st, "%s: %s", p->where, msg);
}

/* The file ends inside a fixed-size field. */
static gemmac_status truncated(parser *p, const char *field, uint64_t need) {
    return pfail(p, GEMMAC_ERR_BAD_FILE, "file truncated: %s needs %llu bytes at offset 0x%llx, only %llu left",
                 field, (ull)need, (ull)p->r.pos, (ull)gm_rd_left(&p->r));
}

static gemmac_status read_u32(parser *p, const char *field, uint32_t *v) {
    return gm_rd_u32(&p->r, v) ? GEMMAC_OK : truncated(p, field, 4);
}

static gemmac_status read_u64(parser *p, const char *field, uint64_t *v) {
    return gm_rd_u64(&p->r, v) ? GEMMAC_OK : truncated(p, field, 8);
}

/* Reads a GGUF string (u64 length + bytes). what/idx name it in messages ("key", or "string" 5).
 * Names (keys, tensor names) must also be non-empty and NUL-free. */
static gemmac_status read_str(parser *p, const char *what, uint64_t idx, bool is_name, gm_str *out) {
    char field[64];
    if (idx == UINT64_MAX) snprintf(field, sizeof field, "%s", what);
    else snprintf(field, sizeof field, "%s %llu", what, (ull)idx);

    uint64_t len;
    if (!gm_rd_u64(&p->r, &len)) {
        char f2[80];
        snprintf(f2, sizeof f2, "%s length", field);
        return truncated(p, f2, 8);
    }
    uint64_t at = p->r.pos;
    if (len > GM_GGUF_MAX_STRING)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "%s of %llu bytes at offset 0x%llx exceeds the limit of %u bytes",
                     field, (ull)len, (ull)(at - 8), GM_GGUF_MAX_STRING);
    if (len > gm_rd_left(&p->r))
        return pfail(p, GEMMAC_ERR_BAD_FILE, "%s of %llu bytes exceeds the %llu bytes left at offset 0x%llx",
                     field, (ull)len, (ull)gm_rd_left(&p->r), (ull)at);
    out->ptr = (const char *)gm_rd_ptr(&p->r);
    out->len = len;
    if (is_name) {
        if (len == 0) return pfail(p, GEMMAC_ERR_BAD_FILE, "empty %s at offset 0x%llx", field, (ull)at);
        const char *nul = memchr(out->ptr, 0, (size_t)len);
        if (nul)
            return pfail(p, GEMMAC_ERR_BAD_FILE, "%s contains a NUL byte at offset 0x%llx", field,
                         (ull)(at + (uint64_t)(nul - out->ptr)));
    }
    gm_rd_skip(&p->r, len);
    return GEMMAC_OK;
}

static gemmac_status reserve_strs(parser *p, uint64_t more) {
    gm_gguf *g = p->g;
    uint64_t need = g->n_strs + more;   /* both bounded by file size / 8: no overflow */
    if (need <= g->cap_strs) return GEMMAC_OK;
    uint64_t cap = g->cap_strs ? g->cap_strs * 2 : 16;
    if (cap < need) cap = need;
    uint64_t bytes;
    if (!gm_mul_u64(cap, sizeof(gm_str), &bytes) || bytes > SIZE_MAX)
        return pfail(p, GEMMAC_ERR_NO_MEMORY, "%llu strings do not fit in memory", (ull)cap);
    gm_str *s = realloc(g->strs, (size_t)bytes);
    if (!s) return pfail(p, GEMMAC_ERR_NO_MEMORY, "out of memory for %llu strings", (ull)cap);
    g->strs = s;
    g->cap_strs = cap;
    return GEMMAC_OK;
}

/* Reads n values of type et (not ARRAY) for kv i; arrays say "array of ..." in their messages. */
static gemmac_status read_values(parser *p, uint64_t i, gm_gguf_vtype et, uint64_t n, bool is_array) {
    gm_gguf_kv *kv = &p->g->kvs[i];
    gemmac_status st;
    uint64_t at = p->r.pos, left = gm_rd_left(&p->r);
    kv->data = gm_rd_ptr(&p->r);
    if (et == GM_GGUF_STRING) {
        uint64_t min_bytes;   /* every string has at least its 8-byte length */
        if (!gm_mul_u64(n, 8, &min_bytes) || min_bytes > left) {
            if (!is_array) return truncated(p, "string value length", 8);
            return pfail(p, GEMMAC_ERR_BAD_FILE,
                         "array of %llu strings exceeds the %llu bytes left at offset 0x%llx", (ull)n, (ull)left,
                         (ull)at);
        }
        if ((st = reserve_strs(p, n))) return st;
        p->str_first[i] = p->g->n_strs;
        for (uint64_t j = 0; j < n; j++) {
            if ((st = read_str(p, is_array ? "string" : "string value", is_array ? j : UINT64_MAX, false,
                               &p->g->strs[p->g->n_strs])))
                return st;
            p->g->n_strs++;
        }
        return GEMMAC_OK;
    }
    uint64_t bytes;
    if (!gm_mul_u64(n, k_vsize[et], &bytes))
        return pfail(p, GEMMAC_ERR_BAD_FILE, "array of %llu %s at offset 0x%llx: byte size overflows 64 bits",
                     (ull)n, k_vname[et], (ull)at);
    if (bytes > left) {
        if (!is_array) {
            char field[32];
            snprintf(field, sizeof field, "%s value", k_vname[et]);
            return truncated(p, field, bytes);
        }
        return pfail(p, GEMMAC_ERR_BAD_FILE,
                     "array of %llu %s (%llu bytes) exceeds the %llu bytes left at offset 0x%llx", (ull)n,
                     k_vname[et], (ull)bytes, (ull)left, (ull)at);
    }
    if (et == GM_GGUF_BOOL) {
        const uint8_t *b = gm_rd_ptr(&p->r);
        for (uint64_t j = 0; j < n; j++) {
            if (b[j] > 1) {
                if (is_array)
                    return pfail(p, GEMMAC_ERR_BAD_FILE, "bool %llu is %u at offset 0x%llx (must be 0 or 1)",
                                 (ull)j, b[j], (ull)(at + j));
                return pfail(p, GEMMAC_ERR_BAD_FILE, "bool value is %u at offset 0x%llx (must be 0 or 1)", b[j],
                             (ull)at);
            }
        }
    }
    gm_rd_skip(&p->r, bytes);
    return GEMMAC_OK;
}

static gemmac_status parse_kv(parser *p, uint64_t i) {
    gm_gguf_kv *kv = &p->g->kvs[i];
    gemmac_status st;
    kv->file_offset = p->r.pos;
    snprintf(p->where, sizeof p->where, "kv %llu", (ull)i);
    if ((st = read_str(p, "key", UINT64_MAX, true, &kv->key))) return st;
    snprintf(p->where, sizeof p->where, "kv %llu '%s'", (ull)i, show_name(kv->key.ptr, kv->key.len).s);

    int64_t dup = index_insert(&p->g->kv_index, (uint32_t)i);
    if (dup >= 0)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "duplicate key at offset 0x%llx (first defined by kv %lld at 0x%llx)",
                     (ull)kv->file_offset, (long long)dup, (ull)p->g->kvs[dup].file_offset);

    uint32_t t;
    if ((st = read_u32(p, "value type", &t))) return st;
    if (t >= GM_GGUF_VTYPE_COUNT)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "unknown value type %u at offset 0x%llx", t, (ull)(p->r.pos - 4));
    kv->type = (gm_gguf_vtype)t;
    if (kv->type != GM_GGUF_ARRAY) {
        kv->arr_type = kv->type;
        kv->arr_n = 1;
        return read_values(p, i, kv->type, 1, false);
    }
    uint32_t et;
    uint64_t n;
    if ((st = read_u32(p, "array element type", &et))) return st;
    if (et == GM_GGUF_ARRAY)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "nested array (array of arrays) at offset 0x%llx is not allowed",
                     (ull)(p->r.pos - 4));
    if (et >= GM_GGUF_VTYPE_COUNT)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "unknown array element type %u at offset 0x%llx", et,
                     (ull)(p->r.pos - 4));
    if ((st = read_u64(p, "array length", &n))) return st;
    if (n > GM_GGUF_MAX_ARRAY)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "array of %llu elements at offset 0x%llx exceeds the limit of %u",
                     (ull)n, (ull)(p->r.pos - 8), GM_GGUF_MAX_ARRAY);
    kv->arr_type = (gm_gguf_vtype)et;
    kv->arr_n = n;
    return read_values(p, i, kv->arr_type, n, true);
}

static void format_dims(char *dst, size_t n, const gm_gguf_tensor *t, uint32_t n_dims) {
    size_t o = (size_t)snprintf(dst, n, "[");
    for (uint32_t d = 0; d < n_dims && o < n; d++)
        o += (size_t)snprintf(dst + o, n - o, d ? ", %llu" : "%llu", (ull)(uint64_t)t->ne[d]);
    if (o < n) snprintf(dst + o, n - o, "]");
}

static void where_tensor(parser *p, const gm_gguf_tensor *t) {
    snprintf(p->where, sizeof p->where, "tensor %s", show_name(t->name.ptr, t->name.len).s);
}

static gemmac_status parse_tensor_info(parser *p, uint64_t i) {
    gm_gguf_tensor *t = &p->g->tensors[i];
    gemmac_status st;
    uint64_t start = p->r.pos;
    snprintf(p->where, sizeof p->where, "tensor %llu", (ull)i);
    if ((st = read_str(p, "name", UINT64_MAX, true, &t->name))) return st;
    where_tensor(p, t);

    int64_t dup = index_insert(&p->g->tensor_index, (uint32_t)i);
    if (dup >= 0)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "duplicate tensor name at offset 0x%llx (also tensor %lld)",
                     (ull)start, (long long)dup);

    uint32_t n_dims;
    if ((st = read_u32(p, "n_dims", &n_dims))) return st;
    if (n_dims < 1 || n_dims > GM_GGUF_MAX_DIMS)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "n_dims %u at offset 0x%llx is not in 1..%d", n_dims,
                     (ull)(p->r.pos - 4), GM_GGUF_MAX_DIMS);
    t->n_dims = (int32_t)n_dims;
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < GM_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t v;
        char field[16];
        snprintf(field, sizeof field, "ne[%u]", d);
        if ((st = read_u64(p, field, &v))) return st;
        if (v == 0 || v > (uint64_t)INT64_MAX)
            return pfail(p, GEMMAC_ERR_BAD_FILE, "ne[%u] = %llu at offset 0x%llx is not in 1..2^63-1", d, (ull)v,
                         (ull)(p->r.pos - 8));
        t->ne[d] = (int64_t)v;
        if (!gm_mul_u64(n_el, v, &n_el) || n_el > (uint64_t)INT64_MAX) {
            char dims[128];
            format_dims(dims, sizeof dims, t, d + 1);
            return pfail(p, GEMMAC_ERR_BAD_FILE, "element count of dims %s overflows 63 bits at offset 0x%llx",
                         dims, (ull)(p->r.pos - 8));
        }
    }
    t->n_elements = n_el;

    uint32_t type;
    if ((st = read_u32(p, "type", &type))) return st;
    uint64_t type_at = p->r.pos - 4;
    char nbuf[32];
    const char *tname = gm_type_name((int64_t)type, nbuf);
    const gm_type_traits *tr = gm_type_traits_of((int64_t)type);
    if (!tr && tname == nbuf)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "unknown tensor type %u at offset 0x%llx", type, (ull)type_at);
    if (!tr || !tr->weight_ok || tr->block_size <= 0 || tr->block_bytes == 0)
        return pfail(p, GEMMAC_ERR_UNSUPPORTED, "type %s is not supported", tname);
    t->type = (gm_type)type;

    if ((st = read_u64(p, "offset", &t->offset))) return st;

    if (t->ne[0] % tr->block_size != 0)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "ne[0] = %lld is not a multiple of the block size %d of type %s",
                     (long long)t->ne[0], (int)tr->block_size, tname);
    uint64_t row_bytes, size;
    if (!gm_mul_u64((uint64_t)(t->ne[0] / tr->block_size), tr->block_bytes, &row_bytes) ||
        !gm_mul_u64(row_bytes, n_el / (uint64_t)t->ne[0], &size)) {
        char dims[128];
        format_dims(dims, sizeof dims, t, n_dims);
        return pfail(p, GEMMAC_ERR_BAD_FILE, "byte size of %s %s overflows 64 bits", tname, dims);
    }
    t->size = size;
    return GEMMAC_OK;
}

typedef struct span {
    uint64_t begin, end;  /* [begin, end) within the data section */
    uint32_t idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* general.alignment, then the data section and every tensor's place in it. */
static gemmac_status layout(parser *p) {
    gm_gguf *g = p->g;
    g->alignment = DEFAULT_ALIGNMENT;
    int64_t ai = index_find(&g->kv_index, "general.alignment");
    if (ai >= 0) {
        const gm_gguf_kv *kv = &g->kvs[ai];
        snprintf(p->where, sizeof p->where, "kv %lld 'general.alignment'", (long long)ai);
        if (kv->type != GM_GGUF_UINT32)
            return pfail(p, GEMMAC_ERR_BAD_FILE, "type %s at offset 0x%llx, expected u32",
                         gm_gguf_vtype_name(kv->type), (ull)kv->file_offset);
        uint32_t a;
        memcpy(&a, kv->data, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return pfail(p, GEMMAC_ERR_BAD_FILE, "alignment %u at offset 0x%llx is not a power of two", a,
                         (ull)((const uint8_t *)kv->data - g->base));
        g->alignment = a;
    }

    snprintf(p->where, sizeof p->where, "data section");
    uint64_t info_end = p->r.pos, data_off;
    if (!gm_add_u64(info_end, g->alignment - 1, &data_off))
        return pfail(p, GEMMAC_ERR_BAD_FILE, "offset 0x%llx overflows when padded", (ull)info_end);
    data_off &= ~(g->alignment - 1);
    if (data_off > g->size) {
        if (g->n_tensors > 0)
            return pfail(p, GEMMAC_ERR_BAD_FILE,
                         "file truncated: padding to the alignment of %llu bytes ends at offset 0x%llx, past the "
                         "end of the file (%llu bytes)",
                         (ull)g->alignment, (ull)data_off, (ull)g->size);
        data_off = g->size;   /* a file without tensors may stop without padding */
    }
    g->data_offset = data_off;
    g->data_size = g->size - data_off;

    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gm_gguf_tensor *t = &g->tensors[i];
        uint64_t end;
        if (t->offset % g->alignment != 0) {
            where_tensor(p, t);
            return pfail(p, GEMMAC_ERR_BAD_FILE, "offset 0x%llx is not a multiple of the alignment %llu",
                         (ull)t->offset, (ull)g->alignment);
        }
        if (t->offset >= g->data_size) {
            where_tensor(p, t);
            return pfail(p, GEMMAC_ERR_BAD_FILE,
                         "offset 0x%llx is past the end of the data section (%llu bytes from file offset 0x%llx)",
                         (ull)t->offset, (ull)g->data_size, (ull)data_off);
        }
        if (!gm_add_u64(t->offset, t->size, &end) || end > g->data_size) {
            where_tensor(p, t);
            return pfail(p, GEMMAC_ERR_BAD_FILE,
                         "offset 0x%llx + size %llu ends past the end of the data section (%llu bytes from file "
                         "offset 0x%llx)",
                         (ull)t->offset, (ull)t->size, (ull)g->data_size, (ull)data_off);
        }
        t->data = g->base + data_off + t->offset;
    }

    if (g->n_tensors < 2) return GEMMAC_OK;
    span *s = malloc((size_t)g->n_tensors * sizeof *s);
    if (!s) return pfail(p, GEMMAC_ERR_NO_MEMORY, "out of memory sorting %llu tensors", (ull)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        s[i] = (span){g->tensors[i].offset, g->tensors[i].offset + g->tensors[i].size, (uint32_t)i};
    qsort(s, (size_t)g->n_tensors, sizeof *s, span_cmp);
    gemmac_status st = GEMMAC_OK;
    for (uint64_t k = 1; k < g->n_tensors; k++) {
        if (s[k].begin < s[k - 1].end) {
            const gm_gguf_tensor *a = &g->tensors[s[k].idx], *b = &g->tensors[s[k - 1].idx];
            shown_name other = show_name(b->name.ptr, b->name.len);
            where_tensor(p, a);
            st = pfail(p, GEMMAC_ERR_BAD_FILE, "bytes [0x%llx, 0x%llx) overlap tensor %s at [0x%llx, 0x%llx)",
                       (ull)s[k].begin, (ull)s[k].end, other.s, (ull)s[k - 1].begin, (ull)s[k - 1].end);
            break;
        }
    }
    free(s);
    return st;
}

static gemmac_status parse(parser *p) {
    gm_gguf *g = p->g;
    gemmac_status st;
    snprintf(p->where, sizeof p->where, "header");
    if (g->size < 4)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "file of %llu bytes is too small for a GGUF header", (ull)g->size);
    if (memcmp(g->base, "GGUF", 4) != 0) {
        return pfail(p, GEMMAC_ERR_BAD_FILE, "bad magic '%s' at offset 0 (expected 'GGUF')",
                     show_name((const char *)g->base, 4).s);
    }
    gm_rd_skip(&p->r, 4);
    if ((st = read_u32(p, "version", &g->version))) return st;
    if (g->version == 0) return pfail(p, GEMMAC_ERR_BAD_FILE, "invalid version 0 at offset 0x4");
    if (g->version == 1)
        return pfail(p, GEMMAC_ERR_UNSUPPORTED, "GGUF version 1 is not supported (only versions 2 and 3)");
    if (g->version > 3 && (g->version & 0xffffu) == 0)
        return pfail(p, GEMMAC_ERR_UNSUPPORTED,
                     "version field 0x%08x looks byte-swapped: big-endian GGUF files are not supported", g->version);
    if (g->version > 3)
        return pfail(p, GEMMAC_ERR_UNSUPPORTED, "GGUF version %u is not supported (only versions 2 and 3)",
                     g->version);
    uint64_t n_tensors, n_kv;
    if ((st = read_u64(p, "n_tensors", &n_tensors))) return st;
    if ((st = read_u64(p, "n_kv", &n_kv))) return st;
    if (n_tensors > GM_GGUF_MAX_TENSORS)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "n_tensors %llu at offset 0x8 exceeds the limit of %u", (ull)n_tensors,
                     GM_GGUF_MAX_TENSORS);
    if (n_kv > GM_GGUF_MAX_KV)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "n_kv %llu at offset 0x10 exceeds the limit of %u", (ull)n_kv,
                     GM_GGUF_MAX_KV);
    uint64_t min_bytes = n_kv * KV_MIN_BYTES + n_tensors * TENSOR_MIN_BYTES;   /* < 2^22: no overflow */
    if (min_bytes > gm_rd_left(&p->r))
        return pfail(p, GEMMAC_ERR_BAD_FILE,
                     "%llu kv pairs and %llu tensor infos need at least %llu bytes, only %llu left at offset 0x%llx",
                     (ull)n_kv, (ull)n_tensors, (ull)min_bytes, (ull)gm_rd_left(&p->r), (ull)p->r.pos);

    g->kvs = calloc((size_t)n_kv + 1, sizeof *g->kvs);
    g->tensors = calloc((size_t)n_tensors + 1, sizeof *g->tensors);
    p->str_first = calloc((size_t)n_kv + 1, sizeof *p->str_first);
    if (!g->kvs || !g->tensors || !p->str_first)
        return pfail(p, GEMMAC_ERR_NO_MEMORY, "out of memory for %llu kv pairs and %llu tensors", (ull)n_kv,
                     (ull)n_tensors);
    uint64_t key[2];
    random_key(key, g);
    if (!index_init(&g->kv_index, n_kv, g->kvs, sizeof *g->kvs, offsetof(gm_gguf_kv, key), key) ||
        !index_init(&g->tensor_index, n_tensors, g->tensors, sizeof *g->tensors, offsetof(gm_gguf_tensor, name),
                    key))
        return pfail(p, GEMMAC_ERR_NO_MEMORY, "out of memory for the name index");

    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv = i + 1;   /* so str_first fix-up and close see what was read */
        if ((st = parse_kv(p, i))) return st;
    }
    static const gm_str no_strs[1];   /* for empty string arrays in a file with no strings at all */
    for (uint64_t i = 0; i < n_kv; i++) {
        gm_gguf_kv *kv = &g->kvs[i];
        if (kv->arr_type == GM_GGUF_STRING) kv->strs = g->strs ? g->strs + p->str_first[i] : no_strs;
    }
    g->n_tensors = n_tensors;
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((st = parse_tensor_info(p, i))) return st;
    return layout(p);
}

static gemmac_status open_bytes(const void *data, uint64_t size, gm_map map, gm_gguf **out, gm_error *err) {
    gm_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        gm_map_release(&map);
        return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory opening a GGUF file");
    }
    g->map = map;
    g->base = data;
    g->size = size;
    parser p = {.g = g, .r = gm_reader_make(data, size), .err = err};
    gemmac_status st = parse(&p);
    free(p.str_first);
    if (st) {
        gm_gguf_close(g);
        return st;
    }
    *out = g;
    return GEMMAC_OK;
}

gemmac_status gm_gguf_open(const char *path, gm_gguf **out, gm_error *err) {
    if (!out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_gguf_open: out is NULL");
    *out = NULL;
    gm_map map;
    gemmac_status st = gm_map_file(path, &map, err);
    if (st) return st;
    return open_bytes(map.data, map.size, map, out, err);
}

gemmac_status gm_gguf_open_memory(const void *data, size_t size, gm_gguf **out, gm_error *err) {
    if (!out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_gguf_open_memory: data is NULL");
    gm_map none = {0};
    static const uint8_t empty[1];
    return open_bytes(data ? data : empty, size, none, out, err);
}

void gm_gguf_close(gm_gguf *g) {
    if (!g) return;
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    free(g->strs);
    free(g->kvs);
    free(g->tensors);
    gm_map_release(&g->map);
    free(g);
}

/* ==== Accessors ==== */

uint32_t gm_gguf_version(const gm_gguf *g) { return g->version; }
uint64_t gm_gguf_alignment(const gm_gguf *g) { return g->alignment; }
uint64_t gm_gguf_file_size(const gm_gguf *g) { return g->size; }
uint64_t gm_gguf_data_offset(const gm_gguf *g) { return g->data_offset; }
uint64_t gm_gguf_n_kv(const gm_gguf *g) { return g->n_kv; }
uint64_t gm_gguf_n_tensors(const gm_gguf *g) { return g->n_tensors; }

const gm_gguf_kv *gm_gguf_kv_at(const gm_gguf *g, uint64_t i) { return i < g->n_kv ? &g->kvs[i] : NULL; }

const gm_gguf_tensor *gm_gguf_tensor_at(const gm_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gm_gguf_kv *gm_gguf_find_kv(const gm_gguf *g, const char *key) {
    int64_t i = index_find(&g->kv_index, key);
    return i >= 0 ? &g->kvs[i] : NULL;
}

const gm_gguf_tensor *gm_gguf_find_tensor(const gm_gguf *g, const char *name) {
    int64_t i = index_find(&g->tensor_index, name);
    return i >= 0 ? &g->tensors[i] : NULL;
}

bool gm_str_eq(gm_str s, const char *c) {
    if (!c) return false;
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

/* Integer element i as sign + magnitude: *neg set for negative values (then *mag = -value). */
static bool elem_int(const gm_gguf_kv *kv, uint64_t i, bool *neg, uint64_t *mag) {
    if (!kv || i >= kv->arr_n) return false;
    gm_gguf_vtype t = kv->arr_type;
    if ((unsigned)t >= GM_GGUF_VTYPE_COUNT) return false;
    const uint8_t *p = (const uint8_t *)kv->data + i * k_vsize[t];
    int64_t s = 0;
    *neg = false;
    switch (t) {
    case GM_GGUF_UINT8: *mag = p[0]; return true;
    case GM_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *mag = v; return true; }
    case GM_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *mag = v; return true; }
    case GM_GGUF_UINT64: { uint64_t v; memcpy(&v, p, 8); *mag = v; return true; }
    case GM_GGUF_INT8: { int8_t v; memcpy(&v, p, 1); s = v; break; }
    case GM_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); s = v; break; }
    case GM_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); s = v; break; }
    case GM_GGUF_INT64: { int64_t v; memcpy(&v, p, 8); s = v; break; }
    default: return false;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return true;
}

bool gm_gguf_kv_int(const gm_gguf_kv *kv, uint64_t i, int64_t *out) {
    bool neg;
    uint64_t mag;
    if (!elem_int(kv, i, &neg, &mag)) return false;
    if (!neg && mag > (uint64_t)INT64_MAX) return false;
    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;   /* two's complement: -2^63 round-trips */
    return true;
}

static void describe_type(const gm_gguf_kv *kv, char *buf, size_t n) {
    if (kv->type == GM_GGUF_ARRAY) snprintf(buf, n, "array of %s", gm_gguf_vtype_name(kv->arr_type));
    else snprintf(buf, n, "%s", gm_gguf_vtype_name(kv->type));
}

/* Finds key for a getter: NULL with err filled when absent or arguments are bad. */
static const gm_gguf_kv *getter_find(const gm_gguf *g, const char *key, const void *out, gm_error *err,
                                     gemmac_status *st) {
    if (!g || !key || !out) {
        *st = gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gguf getter: NULL argument");
        return NULL;
    }
    const gm_gguf_kv *kv = gm_gguf_find_kv(g, key);
    if (!kv) *st = gm_fail(err, GEMMAC_ERR_NOT_FOUND, "key '%.200s' not found", key);
    return kv;
}

static gemmac_status wrong_type(const gm_gguf_kv *kv, const char *key, const char *want, gm_error *err) {
    char have[48];
    describe_type(kv, have, sizeof have);
    return gm_fail(err, GEMMAC_ERR_BAD_FILE, "kv '%.200s' at offset 0x%llx: expected %s, found %s", key,
                   (ull)kv->file_offset, want, have);
}

static gemmac_status get_int(const gm_gguf *g, const char *key, int64_t lo, uint64_t hi, const char *want,
                             int64_t *out, gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const gm_gguf_kv *kv = getter_find(g, key, out, err, &st);
    if (!kv) return st;
    bool neg;
    uint64_t mag;
    if (kv->type == GM_GGUF_ARRAY || !elem_int(kv, 0, &neg, &mag)) return wrong_type(kv, key, want, err);
    if (neg ? mag > (uint64_t)0 - (uint64_t)lo : mag > hi)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "kv '%.200s' at offset 0x%llx: value %s%llu does not fit %s", key,
                       (ull)kv->file_offset, neg ? "-" : "", (ull)mag, want);
    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return GEMMAC_OK;
}

gemmac_status gm_gguf_get_u32(const gm_gguf *g, const char *key, uint32_t *out, gm_error *err) {
    int64_t v = 0;
    gemmac_status st = get_int(g, key, 0, UINT32_MAX, "u32", out ? &v : NULL, err);
    if (!st) *out = (uint32_t)v;
    return st;
}

gemmac_status gm_gguf_get_i32(const gm_gguf *g, const char *key, int32_t *out, gm_error *err) {
    int64_t v = 0;
    gemmac_status st = get_int(g, key, INT32_MIN, INT32_MAX, "i32", out ? &v : NULL, err);
    if (!st) *out = (int32_t)v;
    return st;
}

gemmac_status gm_gguf_get_f32(const gm_gguf *g, const char *key, float *out, gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const gm_gguf_kv *kv = getter_find(g, key, out, err, &st);
    if (!kv) return st;
    if (kv->type == GM_GGUF_FLOAT32) {
        memcpy(out, kv->data, 4);
        return GEMMAC_OK;
    }
    if (kv->type != GM_GGUF_FLOAT64) return wrong_type(kv, key, "f32", err);
    double d;
    memcpy(&d, kv->data, 8);
    if (isfinite(d) && fabs(d) > FLT_MAX)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "kv '%.200s' at offset 0x%llx: value %g does not fit f32", key,
                       (ull)kv->file_offset, d);
    *out = (float)d;
    return GEMMAC_OK;
}

gemmac_status gm_gguf_get_bool(const gm_gguf *g, const char *key, bool *out, gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const gm_gguf_kv *kv = getter_find(g, key, out, err, &st);
    if (!kv) return st;
    if (kv->type != GM_GGUF_BOOL) return wrong_type(kv, key, "bool", err);
    *out = *(const uint8_t *)kv->data != 0;
    return GEMMAC_OK;
}

gemmac_status gm_gguf_get_str(const gm_gguf *g, const char *key, gm_str *out, gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const gm_gguf_kv *kv = getter_find(g, key, out, err, &st);
    if (!kv) return st;
    if (kv->type != GM_GGUF_STRING) return wrong_type(kv, key, "string", err);
    *out = kv->strs[0];
    return GEMMAC_OK;
}

gemmac_status gm_gguf_get_arr(const gm_gguf *g, const char *key, gm_gguf_vtype elem, uint64_t *n,
                              const void **data, gm_error *err) {
    if (!n || !data) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_gguf_get_arr: NULL argument");
    if ((unsigned)elem >= GM_GGUF_VTYPE_COUNT || elem == GM_GGUF_ARRAY || elem == GM_GGUF_STRING)
        return gm_fail(err, GEMMAC_ERR_INVALID_ARG,
                       "gm_gguf_get_arr: element type %d is not a fixed-size scalar (strings: gm_gguf_get_str_arr)",
                       (int)elem);
    gemmac_status st = GEMMAC_OK;
    const gm_gguf_kv *kv = getter_find(g, key, n, err, &st);
    if (!kv) return st;
    if (kv->type != GM_GGUF_ARRAY || kv->arr_type != elem) {
        char want[32];
        snprintf(want, sizeof want, "array of %s", k_vname[elem]);
        return wrong_type(kv, key, want, err);
    }
    *n = kv->arr_n;
    *data = kv->data;
    return GEMMAC_OK;
}

gemmac_status gm_gguf_get_str_arr(const gm_gguf *g, const char *key, uint64_t *n, const gm_str **strs,
                                  gm_error *err) {
    if (!n || !strs) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_gguf_get_str_arr: NULL argument");
    gemmac_status st = GEMMAC_OK;
    const gm_gguf_kv *kv = getter_find(g, key, n, err, &st);
    if (!kv) return st;
    if (kv->type != GM_GGUF_ARRAY || kv->arr_type != GM_GGUF_STRING)
        return wrong_type(kv, key, "array of string", err);
    *n = kv->arr_n;
    *strs = kv->strs;
    return GEMMAC_OK;
}
