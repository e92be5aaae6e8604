/* gguf_writer.c: the GGUF v3 writer behind gguf_writer.h. Owns serialising metadata (kept in memory: it is
 * small), tensor infos with aligned offsets, and streaming tensor data from the caller's fill callback in
 * chunks to path.tmp, renamed over path only once everything is written and flushed. Every failure names
 * the key, tensor or file concerned. Little-endian hosts only (as the reader). */
#include "io/gguf_writer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/gguf.h"

#define ALIGNMENT        32u
#define MAX_NAME         63u                 /* llama.cpp (GGML_MAX_NAME 64) rejects longer tensor names */
#define DEFAULT_CHUNK    (64ull << 20)

typedef struct wtensor {
    char *name;
    gm_type type;
    int n_dims;
    int64_t ne[4];
    uint64_t rows, row_bytes, size, offset; /* offset within the data section */
} wtensor;

struct gm_gguf_writer {
    uint8_t *kv;                         /* serialised key/value pairs */
    size_t kv_len, kv_cap;
    char **keys;                         /* for duplicate checks */
    uint64_t n_kv, keys_cap;
    wtensor *t;
    uint64_t n_t, t_cap;
    uint64_t data_size;                  /* bytes of the data section so far (padded) */
    gm_error first;                      /* the first failure of a call that returns nothing */
};

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

gm_gguf_writer *gm_gguf_writer_new(void) { return calloc(1, sizeof(gm_gguf_writer)); }

void gm_gguf_writer_free(gm_gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->keys);
    free(w->t);
    free(w->kv);
    free(w);
}

/* Records the first failure (later ones are consequences or repeats). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void remember(gm_gguf_writer *w, gemmac_status st, const char *fmt, ...) {
    if (w->first.status != GEMMAC_OK) return;
    w->first.status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->first.msg, sizeof w->first.msg, fmt, ap);
    va_end(ap);
}

static bool ok(const gm_gguf_writer *w) { return w->first.status == GEMMAC_OK; }

static bool put(gm_gguf_writer *w, const void *p, size_t n) {
    if (!ok(w)) return false;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        uint8_t *nb = realloc(w->kv, cap);
        if (!nb) {
            remember(w, GEMMAC_ERR_NO_MEMORY, "out of memory for GGUF metadata (%zu bytes)", cap);
            return false;
        }
        w->kv = nb;
        w->kv_cap = cap;
    }
    if (n) memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return true;
}

static bool put_u32(gm_gguf_writer *w, uint32_t v) { return put(w, &v, 4); }
static bool put_u64(gm_gguf_writer *w, uint64_t v) { return put(w, &v, 8); }
static bool put_strn(gm_gguf_writer *w, const char *s, uint64_t n) { return put_u64(w, n) && put(w, s, (size_t)n); }

/* Starts a pair: checks and registers the key, writes it and the value type. */
static bool begin_kv(gm_gguf_writer *w, const char *key, gm_gguf_vtype type) {
    if (!ok(w)) return false;
    if (!key || !*key) {
        remember(w, GEMMAC_ERR_INVALID_ARG, "a metadata key is empty");
        return false;
    }
    const size_t klen = strlen(key);
    if (klen > 65535) {
        remember(w, GEMMAC_ERR_INVALID_ARG, "metadata key of %zu bytes is too long", klen);
        return false;
    }
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) {
            remember(w, GEMMAC_ERR_INVALID_ARG, "metadata key '%s' added twice", gm_show(key, klen).s);
            return false;
        }
    if (w->n_kv == w->keys_cap) {
        const uint64_t cap = w->keys_cap ? w->keys_cap * 2 : 64;
        char **nk = realloc(w->keys, (size_t)cap * sizeof *nk);
        if (!nk) {
            remember(w, GEMMAC_ERR_NO_MEMORY, "out of memory adding metadata key '%s'", gm_show(key, klen).s);
            return false;
        }
        w->keys = nk;
        w->keys_cap = cap;
    }
    char *copy = strdup(key);
    if (!copy) {
        remember(w, GEMMAC_ERR_NO_MEMORY, "out of memory adding metadata key '%s'", gm_show(key, klen).s);
        return false;
    }
    w->keys[w->n_kv++] = copy;
    return put_strn(w, key, klen) && put_u32(w, (uint32_t)type);
}

void gm_gguf_writer_u32(gm_gguf_writer *w, const char *key, uint32_t v) {
    if (begin_kv(w, key, GM_GGUF_UINT32)) put_u32(w, v);
}
void gm_gguf_writer_i32(gm_gguf_writer *w, const char *key, int32_t v) {
    if (begin_kv(w, key, GM_GGUF_INT32)) put(w, &v, 4);
}
void gm_gguf_writer_f32(gm_gguf_writer *w, const char *key, float v) {
    if (begin_kv(w, key, GM_GGUF_FLOAT32)) put(w, &v, 4);
}
void gm_gguf_writer_bool(gm_gguf_writer *w, const char *key, bool v) {
    const uint8_t b = v ? 1 : 0;
    if (begin_kv(w, key, GM_GGUF_BOOL)) put(w, &b, 1);
}
void gm_gguf_writer_str(gm_gguf_writer *w, const char *key, const char *v) {
    if (!v) {
        if (ok(w)) remember(w, GEMMAC_ERR_INVALID_ARG, "metadata key '%s': NULL string", key ? key : "(null)");
        return;
    }
    if (begin_kv(w, key, GM_GGUF_STRING)) put_strn(w, v, strlen(v));
}

static bool begin_arr(gm_gguf_writer *w, const char *key, gm_gguf_vtype elem, const void *v, size_t n) {
    if (n && !v) {
        if (ok(w)) remember(w, GEMMAC_ERR_INVALID_ARG, "metadata key '%s': NULL array of %zu", key ? key : "(null)", n);
        return false;
    }
    return begin_kv(w, key, GM_GGUF_ARRAY) && put_u32(w, (uint32_t)elem) && put_u64(w, n);
}

void gm_gguf_writer_arr_u32(gm_gguf_writer *w, const char *key, const uint32_t *v, size_t n) {
    if (begin_arr(w, key, GM_GGUF_UINT32, v, n)) put(w, v, n * 4);
}
void gm_gguf_writer_arr_i32(gm_gguf_writer *w, const char *key, const int32_t *v, size_t n) {
    if (begin_arr(w, key, GM_GGUF_INT32, v, n)) put(w, v, n * 4);
}
void gm_gguf_writer_arr_f32(gm_gguf_writer *w, const char *key, const float *v, size_t n) {
    if (begin_arr(w, key, GM_GGUF_FLOAT32, v, n)) put(w, v, n * 4);
}
void gm_gguf_writer_arr_bool(gm_gguf_writer *w, const char *key, const bool *v, size_t n) {
    if (!begin_arr(w, key, GM_GGUF_BOOL, v, n)) return;
    for (size_t i = 0; i < n; i++) {
        const uint8_t b = v[i] ? 1 : 0;
        if (!put(w, &b, 1)) return;
    }
}
void gm_gguf_writer_arr_str(gm_gguf_writer *w, const char *key, const char *const *v, size_t n) {
    if (!begin_arr(w, key, GM_GGUF_STRING, v, n)) return;
    for (size_t i = 0; i < n; i++) {
        if (!v[i]) {
            remember(w, GEMMAC_ERR_INVALID_ARG, "metadata key '%s': string %zu is NULL", key, i);
            return;
        }
        if (!put_strn(w, v[i], strlen(v[i]))) return;
    }
}

void gm_gguf_writer_kv_copy(gm_gguf_writer *w, const char *key, const struct gm_gguf_kv *kv) {
    if (!ok(w)) return;
    char own[256];
    if (!key) {
        snprintf(own, sizeof own, "%.*s", (int)(kv->key.len < 255 ? kv->key.len : 255), kv->key.ptr);
        key = own;
    }
    static const uint8_t size[GM_GGUF_VTYPE_COUNT] = {
        [GM_GGUF_UINT8] = 1, [GM_GGUF_INT8] = 1,    [GM_GGUF_UINT16] = 2,  [GM_GGUF_INT16] = 2,
        [GM_GGUF_UINT32] = 4, [GM_GGUF_INT32] = 4,  [GM_GGUF_FLOAT32] = 4, [GM_GGUF_BOOL] = 1,
        [GM_GGUF_UINT64] = 8, [GM_GGUF_INT64] = 8,  [GM_GGUF_FLOAT64] = 8,
    };
    if ((unsigned)kv->arr_type >= GM_GGUF_VTYPE_COUNT || kv->arr_type == GM_GGUF_ARRAY) {
        remember(w, GEMMAC_ERR_INVALID_ARG, "metadata key '%s': cannot copy a value of type %s", key,
                 gm_gguf_vtype_name(kv->arr_type));
        return;
    }
    const bool arr = kv->type == GM_GGUF_ARRAY;
    if (!begin_kv(w, key, kv->type)) return;
    if (arr && !(put_u32(w, (uint32_t)kv->arr_type) && put_u64(w, kv->arr_n))) return;
    if (kv->arr_type == GM_GGUF_STRING) {
        for (uint64_t i = 0; i < kv->arr_n; i++)
            if (!put_strn(w, kv->strs[i].ptr, kv->strs[i].len)) return;
    } else {
        put(w, kv->data, (size_t)(kv->arr_n * size[kv->arr_type]));
    }
}

/* ---- tensors ---- */

gemmac_status gm_gguf_writer_add_tensor(gm_gguf_writer *w, const char *name, gm_type type, int n_dims,
                                        const int64_t *ne, gm_error *err) {
    gemmac_status st;
    if (!ok(w)) return gm_fail(err, w->first.status, "%s", w->first.msg);
    const size_t nlen = name ? strlen(name) : 0;
    if (!nlen) {
        st = gm_fail(err, GEMMAC_ERR_INVALID_ARG, "a tensor name is empty");
        goto bad;
    }
    if (nlen > MAX_NAME) {
        st = gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tensor name '%s' is longer than %u bytes", gm_show(name, nlen).s,
                     MAX_NAME);
        goto bad;
    }
    for (uint64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            st = gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tensor '%s' added twice", gm_show(name, nlen).s);
            goto bad;
        }
    const gm_type_traits *tr = gm_type_traits_of(type);
    if (!tr || !tr->weight_ok) {
        char nb[32];
        st = gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "tensor '%s': type %s cannot be written", gm_show(name, nlen).s,
                     gm_type_name(type, nb));
        goto bad;
    }
    if (n_dims < 1 || n_dims > 4) {
        st = gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tensor '%s': %d dimensions (1 to 4)", gm_show(name, nlen).s, n_dims);
        goto bad;
    }
    uint64_t rows = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 1 || ne[d] > (INT64_C(1) << 40)) {
            st = gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tensor '%s': ne[%d] = %lld is not in [1, 2^40]",
                         gm_show(name, nlen).s, d, (long long)ne[d]);
            goto bad;
        }
        if (d) rows *= (uint64_t)ne[d];
    }
    if (ne[0] % tr->block_size) {
        st = gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tensor '%s': ne[0] = %lld is not a multiple of %s's block size %d",
                     gm_show(name, nlen).s, (long long)ne[0], tr->name, tr->block_size);
        goto bad;
    }
    if (w->n_t == w->t_cap) {
        const uint64_t cap = w->t_cap ? w->t_cap * 2 : 256;
        wtensor *nt = realloc(w->t, (size_t)cap * sizeof *nt);
        if (!nt) {
            st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory adding tensor '%s'", gm_show(name, nlen).s);
            goto bad;
        }
        w->t = nt;
        w->t_cap = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) {
        st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory adding tensor '%s'", gm_show(name, nlen).s);
        goto bad;
    }
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->rows = rows;
    t->row_bytes = gm_row_bytes(tr, ne[0]);
    t->size = t->row_bytes * rows;
    t->offset = w->data_size;
    w->data_size = pad_to(w->data_size + t->size, ALIGNMENT);
    w->n_t++;
    return GEMMAC_OK;
bad:
    remember(w, st, "%s", err ? err->msg : "bad tensor");
    return st;
}

uint64_t gm_gguf_writer_n_tensors(const gm_gguf_writer *w) { return w->n_t; }

/* Bytes before the data section: header, metadata, tensor infos, padding. */
static uint64_t header_bytes(const gm_gguf_writer *w) {
    uint64_t n = 4 + 4 + 8 + 8 + w->kv_len;
    for (uint64_t i = 0; i < w->n_t; i++) n += 8 + strlen(w->t[i].name) + 4 + 8 * (uint64_t)w->t[i].n_dims + 4 + 8;
    return pad_to(n, ALIGNMENT);
}

uint64_t gm_gguf_writer_file_size(const gm_gguf_writer *w) { return header_bytes(w) + w->data_size; }

/* ---- writing ---- */

typedef struct out_file {
    FILE *f;
    const char *tmp;
    uint64_t pos;
} out_file;

static gemmac_status out_write(out_file *o, const void *p, size_t n, gm_error *err) {
    if (n && fwrite(p, 1, n, o->f) != n)
        return gm_fail(err, GEMMAC_ERR_IO, "writing %s at offset %llu: %s", o->tmp, (unsigned long long)o->pos,
                       strerror(errno));
    o->pos += n;
    return GEMMAC_OK;
}

static gemmac_status out_zeros(out_file *o, uint64_t n, gm_error *err) {
    static const uint8_t z[ALIGNMENT];
    while (n) {
        const size_t k = n < sizeof z ? (size_t)n : sizeof z;
        gemmac_status st = out_write(o, z, k, err);
        if (st) return st;
        n -= k;
    }
    return GEMMAC_OK;
}

/* The whole-tensor callback of gm_gguf_writer_write, adapted to rows (called with whole tensors only). */
typedef struct whole_ud {
    gm_gguf_fill_fn fill;
    void *ud;
} whole_ud;

static gemmac_status fill_whole(void *ud, uint64_t i, int64_t row0, int64_t n_rows, void *buf, uint64_t n_bytes,
                                gm_error *err) {
    (void)row0;
    (void)n_rows;
    const whole_ud *u = ud;
    return u->fill(u->ud, i, buf, n_bytes, err);
}

static gemmac_status write_all(gm_gguf_writer *w, out_file *o, gm_gguf_fill_rows_fn fill, void *ud,
                               uint64_t chunk_bytes, gm_error *err) {
    gemmac_status st;
    static const char magic[4] = {'G', 'G', 'U', 'F'};
    const uint32_t version = 3;
    if ((st = out_write(o, magic, 4, err)) || (st = out_write(o, &version, 4, err)) ||
        (st = out_write(o, &w->n_t, 8, err)) || (st = out_write(o, &w->n_kv, 8, err)) ||
        (st = out_write(o, w->kv, w->kv_len, err)))
        return st;
    for (uint64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        const uint64_t nlen = strlen(t->name);
        const uint32_t nd = (uint32_t)t->n_dims, type = (uint32_t)t->type;
        if ((st = out_write(o, &nlen, 8, err)) || (st = out_write(o, t->name, nlen, err)) ||
            (st = out_write(o, &nd, 4, err)) || (st = out_write(o, t->ne, 8 * nd, err)) ||
            (st = out_write(o, &type, 4, err)) || (st = out_write(o, &t->offset, 8, err)))
            return st;
    }
    const uint64_t data_start = header_bytes(w);
    if ((st = out_zeros(o, data_start - o->pos, err))) return st;

    uint64_t max_chunk = 0; /* the buffer: the largest chunk any tensor asks for */
    for (uint64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint64_t rows = chunk_bytes / t->row_bytes;
        if (rows < 1) rows = 1;
        if (rows > t->rows) rows = t->rows;
        if (rows * t->row_bytes > max_chunk) max_chunk = rows * t->row_bytes;
    }
    uint8_t *buf = NULL;
    if (max_chunk && !(buf = malloc((size_t)max_chunk)))
        return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory for a %llu-byte tensor chunk",
                       (unsigned long long)max_chunk);
    for (uint64_t i = 0; i < w->n_t && st == GEMMAC_OK; i++) {
        const wtensor *t = &w->t[i];
        if (o->pos != data_start + t->offset) {
            st = gm_fail(err, GEMMAC_ERR_IO, "internal: tensor '%s' at %llu, planned %llu", t->name,
                         (unsigned long long)o->pos, (unsigned long long)(data_start + t->offset));
            break;
        }
        uint64_t rows = chunk_bytes / t->row_bytes;
        if (rows < 1) rows = 1;
        for (uint64_t r0 = 0; r0 < t->rows && st == GEMMAC_OK; r0 += rows) {
            const uint64_t nr = t->rows - r0 < rows ? t->rows - r0 : rows;
            gm_error ferr = {0};
            st = fill(ud, i, (int64_t)r0, (int64_t)nr, buf, nr * t->row_bytes, &ferr);
            if (st != GEMMAC_OK) {
                st = gm_fail(err, st, "tensor '%s': %s", t->name, ferr.msg[0] ? ferr.msg : gemmac_status_str(st));
                break;
            }
            st = out_write(o, buf, (size_t)(nr * t->row_bytes), err);
        }
        if (st == GEMMAC_OK) st = out_zeros(o, pad_to(t->size, ALIGNMENT) - t->size, err);
    }
    free(buf);
    return st;
}

gemmac_status gm_gguf_writer_write_rows(gm_gguf_writer *w, const char *path, gm_gguf_fill_rows_fn fill, void *ud,
                                        uint64_t chunk_bytes, gm_error *err) {
    if (!w || !path || !*path || !fill) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "writer, path and fill are required");
    if (!ok(w)) return gm_fail(err, w->first.status, "%s", w->first.msg);
    if (!chunk_bytes) chunk_bytes = DEFAULT_CHUNK;
    const size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    out_file o = {fopen(tmp, "wb"), tmp, 0};
    if (!o.f) {
        gemmac_status st = gm_fail(err, GEMMAC_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    setvbuf(o.f, NULL, _IOFBF, 1 << 20);
    gemmac_status st = write_all(w, &o, fill, ud, chunk_bytes, err);
    if (st == GEMMAC_OK && fflush(o.f) != 0)
        st = gm_fail(err, GEMMAC_ERR_IO, "writing %s: %s", tmp, strerror(errno));
    if (st == GEMMAC_OK && fsync(fileno(o.f)) != 0 && errno != EINVAL)
        st = gm_fail(err, GEMMAC_ERR_IO, "syncing %s: %s", tmp, strerror(errno));
    if (fclose(o.f) != 0 && st == GEMMAC_OK) st = gm_fail(err, GEMMAC_ERR_IO, "closing %s: %s", tmp, strerror(errno));
    if (st == GEMMAC_OK && rename(tmp, path) != 0)
        st = gm_fail(err, GEMMAC_ERR_IO, "renaming %s to %s: %s", tmp, path, strerror(errno));
    if (st != GEMMAC_OK) unlink(tmp);
    free(tmp);
    return st;
}

gemmac_status gm_gguf_writer_write(gm_gguf_writer *w, const char *path, gm_gguf_fill_fn fill, void *ud,
                                   gm_error *err) {
    if (!fill) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "writer, path and fill are required");
    whole_ud u = {fill, ud};
    return gm_gguf_writer_write_rows(w, path, fill_whole, &u, UINT64_MAX, err);
}
