/* safetensors.c: the .safetensors parser behind safetensors.h (length, JSON header through the bounded
 * gm_json_parse of hf_config.c, every entry and the tiling of the data section, all checked at open), the
 * index.json parser and the multi-shard set. Mapping is mmap.c's; what tensors mean is src/model's. */
#include "io/safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "io/hf_config.h"
#include "io/mmap.h"
#include "io/reader.h"

typedef unsigned long long ull;

#define SHOW_NAME_MAX GM_SHOW_MAX /* characters shown of a name in a message */
#define PATH_MAX_LEN 4096   /* bytes of a path we build */

static const struct {
    const char *name;
    uint32_t bits;
} k_dtypes[GM_ST_DTYPE_COUNT] = {
    [GM_ST_BOOL] = {"BOOL", 8},       [GM_ST_U8] = {"U8", 8},           [GM_ST_I8] = {"I8", 8},
    [GM_ST_F8_E5M2] = {"F8_E5M2", 8}, [GM_ST_F8_E4M3] = {"F8_E4M3", 8}, [GM_ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [GM_ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8}, [GM_ST_F8_E8M0] = {"F8_E8M0", 8},
    [GM_ST_I16] = {"I16", 16},        [GM_ST_U16] = {"U16", 16},        [GM_ST_F16] = {"F16", 16},
    [GM_ST_BF16] = {"BF16", 16},      [GM_ST_I32] = {"I32", 32},        [GM_ST_U32] = {"U32", 32},
    [GM_ST_F32] = {"F32", 32},        [GM_ST_F64] = {"F64", 64},        [GM_ST_I64] = {"I64", 64},
    [GM_ST_U64] = {"U64", 64},        [GM_ST_C64] = {"C64", 64},        [GM_ST_F4] = {"F4", 4},
    [GM_ST_F6_E2M3] = {"F6_E2M3", 6}, [GM_ST_F6_E3M2] = {"F6_E3M2", 6},
};

const char *gm_st_dtype_name(gm_st_dtype d) {
    return (unsigned)d < GM_ST_DTYPE_COUNT ? k_dtypes[d].name : "unknown";
}

uint32_t gm_st_dtype_bits(gm_st_dtype d) { return (unsigned)d < GM_ST_DTYPE_COUNT ? k_dtypes[d].bits : 0; }

/* A NUL-terminated name as shown in a message (see gm_show). */
typedef gm_shown shown_name;
static shown_name show_name(const char *s) { return gm_show(s, strlen(s)); }

static const char *json_kind(const cJSON *it) {
    if (cJSON_IsNull(it)) return "null";
    if (cJSON_IsBool(it)) return "a bool";
    if (cJSON_IsNumber(it)) return "a number";
    if (cJSON_IsString(it)) return "a string";
    if (cJSON_IsArray(it)) return "an array";
    if (cJSON_IsObject(it)) return "an object";
    return "invalid";
}

static void format_shape(char *dst, size_t n, const int64_t *shape, int n_dims) {
    size_t o = (size_t)snprintf(dst, n, "[");
    for (int d = 0; d < n_dims && o < n; d++)
        o += (size_t)snprintf(dst + o, n - o, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (o < n) snprintf(dst + o, n - o, "]");
}

/* ==== One file ==== */

typedef struct meta_kv {
    const char *key, *value;
} meta_kv;

struct gm_st {
    gm_map map;                    /* the mapping when opened from a path; zeroed for open_memory */
    const uint8_t *base;           /* the file's bytes */
    uint64_t size;                 /* bytes */
    uint64_t data_offset;          /* 8 + header length */
    uint64_t data_size;            /* bytes from data_offset to the end of the file */
    uint64_t n_tensors;
    gm_st_tensor *tensors;         /* [n_tensors], by data offset */
    const gm_st_tensor **by_name;  /* [n_tensors], by strcmp of name */
    uint64_t n_meta;
    meta_kv *meta;                 /* [n_meta], by key */
    char *arena;                   /* names, metadata keys and values */
};

typedef struct parser {
    gm_st *f;
    gm_error *err;
    char where[SHOW_NAME_MAX + 64];   /* "header", "tensor 'x' at offset 0x4a" */
    char *arena_pos;
} parser;

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

static const char *arena_copy(parser *p, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = p->arena_pos;
    memcpy(d, s, n);
    p->arena_pos += n;
    return d;
}

static bool json_u53(const cJSON *it, uint64_t *out) {
    int64_t v;
    if (!gm_json_int(it, &v) || v < 0) return false;
    *out = (uint64_t)v;
    return true;
}

/* Describes a JSON value that is not a non-negative integer below 2^53. */
static void describe_bad_uint(const cJSON *it, char *buf, size_t n) {
    if (cJSON_IsNumber(it)) snprintf(buf, n, "%.17g", it->valuedouble);
    else snprintf(buf, n, "%s", json_kind(it));
}

static gemmac_status parse_tensor(parser *p, const cJSON *entry, gm_st_tensor *t) {
    if (!cJSON_IsObject(entry)) return pfail(p, GEMMAC_ERR_BAD_FILE, "value is %s, expected an object", json_kind(entry));
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *fl = entry->child; fl; fl = fl->next) {
        const char *k = fl->string ? fl->string : "";
        if (strcmp(k, "dtype") == 0) dtype = fl;
        else if (strcmp(k, "shape") == 0) shape = fl;
        else if (strcmp(k, "data_offsets") == 0) offs = fl;
        else return pfail(p, GEMMAC_ERR_BAD_FILE, "unknown field '%s'", show_name(k).s);
    }
    if (!dtype) return pfail(p, GEMMAC_ERR_BAD_FILE, "missing field 'dtype'");
    if (!shape) return pfail(p, GEMMAC_ERR_BAD_FILE, "missing field 'shape'");
    if (!offs) return pfail(p, GEMMAC_ERR_BAD_FILE, "missing field 'data_offsets'");

    if (!cJSON_IsString(dtype) || !dtype->valuestring)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "field 'dtype' is %s, expected a string", json_kind(dtype));
    int d = 0;
    while (d < GM_ST_DTYPE_COUNT && strcmp(k_dtypes[d].name, dtype->valuestring) != 0) d++;
    if (d == GM_ST_DTYPE_COUNT)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "unknown dtype '%s'", show_name(dtype->valuestring).s);
    t->dtype = (gm_st_dtype)d;

    if (!cJSON_IsArray(shape))
        return pfail(p, GEMMAC_ERR_BAD_FILE, "field 'shape' is %s, expected an array", json_kind(shape));
    int n_dims = 0;
    for (const cJSON *e = shape->child; e; e = e->next) {
        if (n_dims == GM_ST_MAX_DIMS)
            return pfail(p, GEMMAC_ERR_BAD_FILE, "shape has more than %d dims", GM_ST_MAX_DIMS);
        uint64_t v;
        if (!json_u53(e, &v)) {
            char what[64];
            describe_bad_uint(e, what, sizeof what);
            return pfail(p, GEMMAC_ERR_BAD_FILE, "shape[%d] is %s, expected a non-negative integer below 2^53",
                         n_dims, what);
        }
        t->shape[n_dims++] = (int64_t)v;
    }
    t->n_dims = n_dims;
    for (int k = n_dims; k < GM_ST_MAX_DIMS; k++) t->shape[k] = 1;
    for (int k = 0; k < GM_ST_MAX_DIMS; k++) t->ne[k] = k < n_dims ? t->shape[n_dims - 1 - k] : 1;
    uint64_t n_el = 1, bits;
    for (int k = 0; k < n_dims; k++) {
        if (!gm_mul_u64(n_el, (uint64_t)t->shape[k], &n_el) || n_el > (uint64_t)INT64_MAX) {
            char dims[160];
            format_shape(dims, sizeof dims, t->shape, n_dims);
            return pfail(p, GEMMAC_ERR_BAD_FILE, "element count of shape %s overflows 63 bits", dims);
        }
    }
    t->n_elements = n_el;
    if (!gm_mul_u64(n_el, k_dtypes[d].bits, &bits)) {
        char dims[160];
        format_shape(dims, sizeof dims, t->shape, n_dims);
        return pfail(p, GEMMAC_ERR_BAD_FILE, "byte size of %s %s overflows 64 bits", k_dtypes[d].name, dims);
    }
    if (bits % 8 != 0)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "%llu elements of %s are not a whole number of bytes", (ull)n_el,
                     k_dtypes[d].name);

    if (!cJSON_IsArray(offs))
        return pfail(p, GEMMAC_ERR_BAD_FILE, "field 'data_offsets' is %s, expected an array", json_kind(offs));
    const cJSON *b = offs->child, *e = b ? b->next : NULL;
    if (!b || !e || e->next) return pfail(p, GEMMAC_ERR_BAD_FILE, "field 'data_offsets' must have exactly 2 elements");
    uint64_t off[2];
    const cJSON *oe[2] = {b, e};
    for (int k = 0; k < 2; k++) {
        if (!json_u53(oe[k], &off[k])) {
            char what[64];
            describe_bad_uint(oe[k], what, sizeof what);
            return pfail(p, GEMMAC_ERR_BAD_FILE,
                         "data_offsets[%d] is %s, expected a non-negative integer below 2^53", k, what);
        }
    }
    uint64_t begin = off[0], end = off[1];
    if (begin > end)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "data_offsets [%llu, %llu] end before they begin", (ull)begin, (ull)end);
    if (end > p->f->data_size)
        return pfail(p, GEMMAC_ERR_BAD_FILE,
                     "data_offsets [%llu, %llu] end past the data section (%llu bytes from file offset 0x%llx)",
                     (ull)begin, (ull)end, (ull)p->f->data_size, (ull)p->f->data_offset);
    if (end - begin != bits / 8) {
        char dims[160];
        format_shape(dims, sizeof dims, t->shape, n_dims);
        return pfail(p, GEMMAC_ERR_BAD_FILE, "data_offsets [%llu, %llu] hold %llu bytes, but %s %s needs %llu",
                     (ull)begin, (ull)end, (ull)(end - begin), k_dtypes[d].name, dims, (ull)(bits / 8));
    }
    t->offset = begin;
    t->size = end - begin;
    t->data = p->f->base + p->f->data_offset + begin;
    return GEMMAC_OK;
}

static gemmac_status parse_metadata(parser *p, const cJSON *m) {
    snprintf(p->where, sizeof p->where, "header: __metadata__");
    if (!cJSON_IsObject(m)) return pfail(p, GEMMAC_ERR_BAD_FILE, "is %s, expected an object", json_kind(m));
    uint64_t n = 0;
    for (const cJSON *e = m->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !e->valuestring)
            return pfail(p, GEMMAC_ERR_BAD_FILE, "value of '%s' is %s, expected a string",
                         show_name(e->string ? e->string : "").s, json_kind(e));
        n++;
    }
    p->f->meta = calloc((size_t)n + 1, sizeof *p->f->meta);
    if (!p->f->meta) return pfail(p, GEMMAC_ERR_NO_MEMORY, "out of memory for %llu entries", (ull)n);
    for (const cJSON *e = m->child; e; e = e->next) {
        meta_kv *kv = &p->f->meta[p->f->n_meta++];
        kv->key = arena_copy(p, e->string ? e->string : "");
        kv->value = arena_copy(p, e->valuestring);
    }
    return GEMMAC_OK;
}

static int cmp_meta(const void *a, const void *b) {
    return strcmp(((const meta_kv *)a)->key, ((const meta_kv *)b)->key);
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const gm_st_tensor *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->size != y->size) return x->size < y->size ? -1 : 1;
    return 0;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const gm_st_tensor *const *)a)->name, (*(const gm_st_tensor *const *)b)->name);
}

static const gm_json_limits k_st_limits = {GM_ST_MAX_DEPTH, GM_ST_MAX_VALUES};

static gemmac_status parse(parser *p) {
    gm_st *f = p->f;
    snprintf(p->where, sizeof p->where, "header");
    if (f->size < 8)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "file of %llu bytes is too small for the 8-byte header length",
                     (ull)f->size);
    uint64_t n;
    memcpy(&n, f->base, 8);
    if (n == 0) return pfail(p, GEMMAC_ERR_BAD_FILE, "header length 0 at offset 0x0");
    if (n > GM_ST_MAX_HEADER)
        return pfail(p, GEMMAC_ERR_BAD_FILE, "header length %llu at offset 0x0 exceeds the limit of %u bytes", (ull)n,
                     GM_ST_MAX_HEADER);
    if (n > f->size - 8)
        return pfail(p, GEMMAC_ERR_BAD_FILE,
                     "header length %llu at offset 0x0 runs past the end of the file (%llu bytes follow it)", (ull)n,
                     (ull)(f->size - 8));
    f->data_offset = 8 + n;
    f->data_size = f->size - f->data_offset;

    cJSON *root = NULL;
    uint64_t *keys = NULL;
    size_t n_keys = 0;
    gemmac_status st = gm_json_parse((const char *)f->base + 8, (size_t)n, "header", 8, &k_st_limits, &root, &keys,
                                     &n_keys, p->err);
    if (st) return st;
    if (!cJSON_IsObject(root)) {
        st = pfail(p, GEMMAC_ERR_BAD_FILE, "the top level is %s, expected an object", json_kind(root));
        goto done;
    }

    /* Sizes: entries, and arena bytes for every name and metadata string. */
    uint64_t n_entries = 0, arena = 1;
    const cJSON *meta = NULL;
    for (const cJSON *ch = root->child; ch; ch = ch->next) {
        const char *name = ch->string ? ch->string : "";
        if (strcmp(name, "__metadata__") == 0) {
            meta = ch;
            for (const cJSON *e = ch->child; cJSON_IsObject(ch) && e; e = e->next)
                arena += strlen(e->string ? e->string : "") + 1 + (e->valuestring ? strlen(e->valuestring) : 0) + 1;
        } else {
            n_entries++;
            arena += strlen(name) + 1;
        }
    }
    f->arena = malloc((size_t)arena);
    f->tensors = calloc((size_t)n_entries + 1, sizeof *f->tensors);
    f->by_name = calloc((size_t)n_entries + 1, sizeof *f->by_name);
    if (!f->arena || !f->tensors || !f->by_name) {
        st = pfail(p, GEMMAC_ERR_NO_MEMORY, "out of memory for %llu tensors", (ull)n_entries);
        goto done;
    }
    p->arena_pos = f->arena;
    if (meta && (st = parse_metadata(p, meta))) goto done;

    size_t k = 0;
    for (const cJSON *ch = root->child; ch; ch = ch->next, k++) {
        const char *name = ch->string ? ch->string : "";
        if (ch == meta) continue;
        gm_st_tensor *t = &f->tensors[f->n_tensors];
        t->header_offset = k < n_keys ? keys[k] : 8;
        snprintf(p->where, sizeof p->where, "tensor '%s' at offset 0x%llx", show_name(name).s, (ull)t->header_offset);
        if (!*name) {
            st = pfail(p, GEMMAC_ERR_BAD_FILE, "empty tensor name");
            goto done;
        }
        if ((st = parse_tensor(p, ch, t))) goto done;
        t->name = arena_copy(p, name);
        f->n_tensors++;
    }

    /* The tensors must tile the data section: sorted by offset, each begins where the previous ended. */
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_tensor_offset);
    uint64_t expect = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gm_st_tensor *t = &f->tensors[i];
        snprintf(p->where, sizeof p->where, "tensor '%s' at offset 0x%llx", show_name(t->name).s, (ull)t->header_offset);
        if (t->offset < expect) {
            const gm_st_tensor *prev = &f->tensors[i - 1];
            st = pfail(p, GEMMAC_ERR_BAD_FILE, "data [%llu, %llu) overlaps tensor '%s' at [%llu, %llu)", (ull)t->offset,
                       (ull)(t->offset + t->size), show_name(prev->name).s, (ull)prev->offset,
                       (ull)(prev->offset + prev->size));
            goto done;
        }
        if (t->offset > expect) {
            st = pfail(p, GEMMAC_ERR_BAD_FILE,
                       "data begins at %llu, leaving bytes [%llu, %llu) of the data section to no tensor",
                       (ull)t->offset, (ull)expect, (ull)t->offset);
            goto done;
        }
        expect = t->offset + t->size;
    }
    if (expect != f->data_size) {
        snprintf(p->where, sizeof p->where, "data section");
        st = pfail(p, GEMMAC_ERR_BAD_FILE,
                   "%llu bytes from file offset 0x%llx belong to no tensor (the tensors end at data offset %llu of %llu)",
                   (ull)(f->data_size - expect), (ull)(f->data_offset + expect), (ull)expect, (ull)f->data_size);
        goto done;
    }

    for (uint64_t i = 0; i < f->n_tensors; i++) f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, (size_t)f->n_tensors, sizeof *f->by_name, cmp_tensor_name);
    if (f->n_meta > 1) qsort(f->meta, (size_t)f->n_meta, sizeof *f->meta, cmp_meta);
done:
    cJSON_Delete(root);
    free(keys);
    return st;
}

static gemmac_status open_bytes(const void *data, uint64_t size, gm_map map, gm_st **out, gm_error *err) {
    gm_st *f = calloc(1, sizeof *f);
    if (!f) {
        gm_map_release(&map);
        return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory opening a safetensors file");
    }
    f->map = map;
    f->base = data;
    f->size = size;
    parser p = {.f = f, .err = err};
    gemmac_status st = parse(&p);
    if (st) {
        gm_st_close(f);
        return st;
    }
    *out = f;
    return GEMMAC_OK;
}

gemmac_status gm_st_open(const char *path, gm_st **out, gm_error *err) {
    if (!out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_st_open: out is NULL");
    *out = NULL;
    gm_map map;
    gemmac_status st = gm_map_file(path, &map, err);
    if (st) return st;
    return open_bytes(map.data, map.size, map, out, err);
}

gemmac_status gm_st_open_memory(const void *data, size_t size, gm_st **out, gm_error *err) {
    if (!out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_st_open_memory: out is NULL");
    *out = NULL;
    if (!data && size) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_st_open_memory: data is NULL");
    gm_map none = {0};
    static const uint8_t empty[1];
    return open_bytes(data ? data : empty, size, none, out, err);
}

void gm_st_close(gm_st *f) {
    if (!f) return;
    free(f->tensors);
    free(f->by_name);
    free(f->meta);
    free(f->arena);
    gm_map_release(&f->map);
    free(f);
}

uint64_t gm_st_file_size(const gm_st *f) { return f->size; }
uint64_t gm_st_data_offset(const gm_st *f) { return f->data_offset; }
uint64_t gm_st_n_tensors(const gm_st *f) { return f->n_tensors; }

const gm_st_tensor *gm_st_tensor_at(const gm_st *f, uint64_t i) { return i < f->n_tensors ? &f->tensors[i] : NULL; }

const gm_st_tensor *gm_st_find_tensor(const gm_st *f, const char *name) {
    if (!f || !name) return NULL;
    uint64_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->by_name[mid]->name, name);
        if (c == 0) return f->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

uint64_t gm_st_n_metadata(const gm_st *f) { return f->n_meta; }

bool gm_st_metadata_at(const gm_st *f, uint64_t i, const char **key, const char **value) {
    if (!f || i >= f->n_meta) return false;
    if (key) *key = f->meta[i].key;
    if (value) *value = f->meta[i].value;
    return true;
}

const char *gm_st_find_metadata(const gm_st *f, const char *key) {
    if (!f || !key || !f->n_meta) return NULL;
    meta_kv probe = {key, NULL};
    const meta_kv *kv = bsearch(&probe, f->meta, (size_t)f->n_meta, sizeof *f->meta, cmp_meta);
    return kv ? kv->value : NULL;
}

gemmac_status gm_st_weight_type(const gm_st_tensor *t, gm_type *out, gm_error *err) {
    if (!t || !out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_st_weight_type: NULL argument");
    switch (t->dtype) {
    case GM_ST_F32: *out = GM_TYPE_F32; return GEMMAC_OK;
    case GM_ST_F16: *out = GM_TYPE_F16; return GEMMAC_OK;
    case GM_ST_BF16: *out = GM_TYPE_BF16; return GEMMAC_OK;
    default: break;
    }
    return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "tensor '%s': dtype %s is not supported as a weight (F32, F16, BF16 are)",
                   show_name(t->name).s, gm_st_dtype_name(t->dtype));
}

/* ==== model.safetensors.index.json ==== */

typedef struct index_entry {
    const char *tensor;            /* points into the cJSON tree */
    const char *file;
    uint32_t file_id;
    uint64_t order;                /* position in weight_map */
} index_entry;

struct gm_st_index {
    cJSON *tree;
    uint64_t n;
    index_entry *entries;          /* [n], by tensor name */
    uint32_t n_files;
    const char **files;            /* [n_files], in order of first appearance */
};

static const gm_json_limits k_ix_limits = {GM_ST_MAX_DEPTH, GM_ST_MAX_VALUES};

/* A shard name must be a plain file name in the index's directory. */
static bool plain_file_name(const char *s) {
    size_t n = strlen(s);
    return n > 0 && n <= 255 && !strchr(s, '/') && !strchr(s, '\\') && !strstr(s, "..") && strcmp(s, ".") != 0;
}

static int cmp_entry_file(const void *a, const void *b) {
    const index_entry *x = *(const index_entry *const *)a, *y = *(const index_entry *const *)b;
    int c = strcmp(x->file, y->file);
    if (c) return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_entry_tensor(const void *a, const void *b) {
    return strcmp(((const index_entry *)a)->tensor, ((const index_entry *)b)->tensor);
}

typedef struct file_first {
    const char *file;
    uint64_t first;                /* order of the first entry naming it */
    uint64_t start, count;         /* its run in the by-file array */
} file_first;

static int cmp_file_first(const void *a, const void *b) {
    const file_first *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

gemmac_status gm_st_index_parse(const char *text, size_t len, const char *name, gm_st_index **out,
                                gm_error *err) {
    if (!out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_st_index_parse: out is NULL");
    *out = NULL;
    if (!text && len) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_st_index_parse: text is NULL");
    char what[224];
    snprintf(what, sizeof what, "%.200s", name ? name : "model.safetensors.index.json");
    if (len > GM_ST_MAX_INDEX)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: %zu bytes exceeds the limit of %u bytes", what, len,
                       GM_ST_MAX_INDEX);
    gm_st_index *ix = calloc(1, sizeof *ix);
    if (!ix) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory", what);
    index_entry **by_file = NULL;
    file_first *ff = NULL;
    gemmac_status st = gm_json_parse(text ? text : "", len, what, 0, &k_ix_limits, &ix->tree, NULL, NULL, err);
    if (st) goto fail;
    if (!cJSON_IsObject(ix->tree)) {
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: the top level is %s, expected an object", what,
                     json_kind(ix->tree));
        goto fail;
    }
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(ix->tree, "metadata");
    if (meta && !cJSON_IsNull(meta) && !cJSON_IsObject(meta)) {
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key 'metadata' is %s, expected an object", what, json_kind(meta));
        goto fail;
    }
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(ix->tree, "weight_map");
    if (!wm) {
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key 'weight_map' not found", what);
        goto fail;
    }
    if (!cJSON_IsObject(wm)) {
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key 'weight_map' is %s, expected an object", what, json_kind(wm));
        goto fail;
    }
    for (const cJSON *e = wm->child; e; e = e->next) ix->n++;
    if (ix->n == 0) {
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: 'weight_map' is empty", what);
        goto fail;
    }
    ix->entries = calloc((size_t)ix->n, sizeof *ix->entries);
    by_file = calloc((size_t)ix->n, sizeof *by_file);
    if (!ix->entries || !by_file) {
        st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory for %llu entries", what, (ull)ix->n);
        goto fail;
    }
    uint64_t i = 0;
    for (const cJSON *e = wm->child; e; e = e->next, i++) {
        const char *tn = e->string ? e->string : "";
        if (!*tn) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: weight_map entry %llu has an empty tensor name", what, (ull)i);
            goto fail;
        }
        if (!cJSON_IsString(e) || !e->valuestring) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: weight_map: tensor '%s' maps to %s, expected a file name", what,
                         show_name(tn).s, json_kind(e));
            goto fail;
        }
        if (!plain_file_name(e->valuestring)) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE,
                         "%s: weight_map: tensor '%s' maps to shard '%s', which is not a plain file name", what,
                         show_name(tn).s, show_name(e->valuestring).s);
            goto fail;
        }
        ix->entries[i] = (index_entry){tn, e->valuestring, 0, i};
        by_file[i] = &ix->entries[i];
    }

    /* Distinct shard names, numbered in order of first appearance. */
    qsort(by_file, (size_t)ix->n, sizeof *by_file, cmp_entry_file);
    uint64_t n_files = 0;
    for (i = 0; i < ix->n; i++)
        if (i == 0 || strcmp(by_file[i]->file, by_file[i - 1]->file) != 0) n_files++;
    if (n_files > GM_ST_MAX_SHARDS) {
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: %llu shards exceed the limit of %u", what, (ull)n_files,
                     GM_ST_MAX_SHARDS);
        goto fail;
    }
    ff = calloc((size_t)n_files, sizeof *ff);
    ix->files = calloc((size_t)n_files, sizeof *ix->files);
    if (!ff || !ix->files) {
        st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory for %llu shards", what, (ull)n_files);
        goto fail;
    }
    uint64_t g = 0;
    for (i = 0; i < ix->n; i++) {
        if (i == 0 || strcmp(by_file[i]->file, by_file[i - 1]->file) != 0)
            ff[g++] = (file_first){by_file[i]->file, by_file[i]->order, i, 0};
        ff[g - 1].count++;
    }
    qsort(ff, (size_t)n_files, sizeof *ff, cmp_file_first);
    for (uint64_t f = 0; f < n_files; f++) {
        ix->files[f] = ff[f].file;
        for (uint64_t k = 0; k < ff[f].count; k++) by_file[ff[f].start + k]->file_id = (uint32_t)f;
    }
    ix->n_files = (uint32_t)n_files;

    /* By tensor name; cJSON kept no duplicate member names (gm_json_parse refuses them). */
    qsort(ix->entries, (size_t)ix->n, sizeof *ix->entries, cmp_entry_tensor);
    free(by_file);
    free(ff);
    *out = ix;
    return GEMMAC_OK;
fail:
    free(by_file);
    free(ff);
    gm_st_index_free(ix);
    return st;
}

void gm_st_index_free(gm_st_index *ix) {
    if (!ix) return;
    free(ix->entries);
    free(ix->files);
    cJSON_Delete(ix->tree);
    free(ix);
}

uint64_t gm_st_index_n_entries(const gm_st_index *ix) { return ix ? ix->n : 0; }

bool gm_st_index_entry(const gm_st_index *ix, uint64_t i, const char **tensor, uint32_t *file) {
    if (!ix || i >= ix->n) return false;
    if (tensor) *tensor = ix->entries[i].tensor;
    if (file) *file = ix->entries[i].file_id;
    return true;
}

uint32_t gm_st_index_n_files(const gm_st_index *ix) { return ix ? ix->n_files : 0; }

const char *gm_st_index_file(const gm_st_index *ix, uint32_t i) {
    return ix && i < ix->n_files ? ix->files[i] : NULL;
}

/* ==== The set ==== */

typedef struct set_entry {
    const gm_st_tensor *t;
    uint32_t file;
} set_entry;

struct gm_st_set {
    uint32_t n_files;
    gm_st **files;                 /* [n_files] */
    char **names;                  /* [n_files] */
    uint64_t n;
    set_entry *entries;            /* [n], by name */
};

static int cmp_set_entry(const void *a, const void *b) {
    return strcmp(((const set_entry *)a)->t->name, ((const set_entry *)b)->t->name);
}

/* strerror is not guaranteed thread-safe (as in mmap.c). */
static const char *errno_str(int e, char *buf, size_t n) {
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
    return strerror_r(e, buf, n);
#else
    return strerror_r(e, buf, n) == 0 ? buf : "unknown error";
#endif
}

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Opens the shard list (n names; dir joined in front) into s. */
static gemmac_status set_open_files(gm_st_set *s, const char *dir, const char *const *names, uint32_t n,
                                    gm_error *err) {
    s->files = calloc(n, sizeof *s->files);
    s->names = calloc(n, sizeof *s->names);
    if (!s->files || !s->names) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory for %u shards", n);
    for (uint32_t i = 0; i < n; i++) {
        s->names[i] = strdup(names[i]);
        if (!s->names[i]) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory for %u shards", n);
        s->n_files = i + 1;
        char path[PATH_MAX_LEN];
        int k = dir ? snprintf(path, sizeof path, "%s/%s", dir, names[i]) : snprintf(path, sizeof path, "%s", names[i]);
        if (k < 0 || (size_t)k >= sizeof path)
            return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "shard '%s': path longer than %d bytes",
                           show_name(names[i]).s, PATH_MAX_LEN - 1);
        gm_error inner;
        gm_error_clear(&inner);
        gemmac_status st = gm_st_open(path, &s->files[i], &inner);
        if (st) return gm_fail(err, st, "shard '%s': %s", show_name(names[i]).s, inner.msg);
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += gm_st_n_tensors(s->files[i]);
    s->entries = calloc((size_t)total + 1, sizeof *s->entries);
    if (!s->entries) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory for %llu tensors", (ull)total);
    for (uint32_t i = 0; i < n; i++)
        for (uint64_t j = 0; j < gm_st_n_tensors(s->files[i]); j++)
            s->entries[s->n++] = (set_entry){gm_st_tensor_at(s->files[i], j), i};
    qsort(s->entries, (size_t)s->n, sizeof *s->entries, cmp_set_entry);
    for (uint64_t j = 1; j < s->n; j++)
        if (strcmp(s->entries[j].t->name, s->entries[j - 1].t->name) == 0) {
            uint32_t a = s->entries[j - 1].file, b = s->entries[j].file;
            if (a > b) { uint32_t t = a; a = b; b = t; }
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tensor '%s' is in two shards: '%s' and '%s'",
                           show_name(s->entries[j].t->name).s, show_name(s->names[a]).s, show_name(s->names[b]).s);
        }
    return GEMMAC_OK;
}

static gemmac_status set_open_index(gm_st_set *s, const char *index_path, gm_error *err) {
    char dir[PATH_MAX_LEN];
    snprintf(dir, sizeof dir, "%s", index_path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = '\0';
    else if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    const char *base = strrchr(index_path, '/') ? strrchr(index_path, '/') + 1 : index_path;

    gm_map map;
    gemmac_status st = gm_map_file(index_path, &map, err);
    if (st) return st;
    gm_st_index *ix = NULL;
    if (map.size > GM_ST_MAX_INDEX)
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%.300s: %llu bytes exceeds the limit of %u bytes for an index",
                     index_path, (ull)map.size, GM_ST_MAX_INDEX);
    else
        st = gm_st_index_parse(map.data, (size_t)map.size, base, &ix, err);
    gm_map_release(&map);
    if (st) return st;

    st = set_open_files(s, dir, ix->files, ix->n_files, err);
    for (uint64_t i = 0; !st && i < ix->n; i++) {
        const index_entry *e = &ix->entries[i];
        if (!gm_st_find_tensor(s->files[e->file_id], e->tensor))
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%.200s: tensor '%s' is mapped to shard '%s', which does not contain it",
                         base, show_name(e->tensor).s, show_name(e->file).s);
    }
    gm_st_index_free(ix);
    return st;
}

gemmac_status gm_st_set_open(const char *path, gm_st_set **out, gm_error *err) {
    if (!out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_st_set_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_st_set_open: empty path");
    if (strlen(path) > PATH_MAX_LEN - 64)
        return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_st_set_open: path longer than %d bytes", PATH_MAX_LEN - 64);
    gm_st_set *s = calloc(1, sizeof *s);
    if (!s) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory opening %.300s", path);
    gemmac_status st;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        char eb[128];
        st = gm_fail(err, e == ENOENT ? GEMMAC_ERR_NOT_FOUND : GEMMAC_ERR_IO, "%.300s: cannot stat: %s", path,
                     errno_str(e, eb, sizeof eb));
    } else if (S_ISDIR(sb.st_mode)) {
        char single[PATH_MAX_LEN], index[PATH_MAX_LEN];
        snprintf(single, sizeof single, "%s/model.safetensors", path);
        snprintf(index, sizeof index, "%s/model.safetensors.index.json", path);
        if (is_file(single)) {
            const char *name = "model.safetensors";
            st = set_open_files(s, path, &name, 1, err);
        } else if (is_file(index)) {
            st = set_open_index(s, index, err);
        } else {
            st = gm_fail(err, GEMMAC_ERR_NOT_FOUND, "%.300s: no model.safetensors or model.safetensors.index.json",
                         path);
        }
    } else if (ends_with(path, ".json")) {
        st = set_open_index(s, path, err);
    } else {
        st = set_open_files(s, NULL, &path, 1, err);
    }
    if (st) {
        gm_st_set_close(s);
        return st;
    }
    *out = s;
    return GEMMAC_OK;
}

void gm_st_set_close(gm_st_set *s) {
    if (!s) return;
    for (uint32_t i = 0; i < s->n_files; i++) {
        gm_st_close(s->files[i]);
        free(s->names[i]);
    }
    free(s->files);
    free(s->names);
    free(s->entries);
    free(s);
}

uint32_t gm_st_set_n_files(const gm_st_set *s) { return s->n_files; }
const gm_st *gm_st_set_file(const gm_st_set *s, uint32_t i) { return i < s->n_files ? s->files[i] : NULL; }
const char *gm_st_set_file_name(const gm_st_set *s, uint32_t i) { return i < s->n_files ? s->names[i] : NULL; }
uint64_t gm_st_set_n_tensors(const gm_st_set *s) { return s->n; }

const gm_st_tensor *gm_st_set_tensor_at(const gm_st_set *s, uint64_t i, uint32_t *file) {
    if (i >= s->n) return NULL;
    if (file) *file = s->entries[i].file;
    return s->entries[i].t;
}

const gm_st_tensor *gm_st_set_find(const gm_st_set *s, const char *name, uint32_t *file) {
    if (!s || !name) return NULL;
    uint64_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->entries[mid].t->name, name);
        if (c == 0) {
            if (file) *file = s->entries[mid].file;
            return s->entries[mid].t;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}
