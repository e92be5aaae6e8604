/* safetensors_builder.c: the test-only .safetensors writer declared in safetensors_builder.h (a growing
 * text buffer for the JSON header, a growing byte buffer for the data section). */
#include "safetensors_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

struct gm_sb {
    buf entries;          /* ,"k":{...} pieces (leading comma) */
    buf meta;             /* ,"k":"v" pieces */
    buf data;
    char *raw_header;
    bool forged_len, no_pad;
    uint64_t header_len;
};

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) abort();
    return q;
}

static void put(buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    if (s) memcpy(b->p + b->n, s, n);
    else memset(b->p + b->n, 0, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

static void put_json_str(buf *b, const char *s) {
    puts_(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[3] = {'\\', (char)c, 0};
            puts_(b, e);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            puts_(b, e);
        } else {
            put(b, s, 1);
        }
    }
    puts_(b, "\"");
}

gm_sb *gm_sb_new(void) {
    gm_sb *b = calloc(1, sizeof *b);
    if (!b) abort();
    return b;
}

void gm_sb_free(gm_sb *b) {
    if (!b) return;
    free(b->entries.p);
    free(b->meta.p);
    free(b->data.p);
    free(b->raw_header);
    free(b);
}

uint64_t gm_sb_dtype_bytes(const char *dtype, uint64_t n) {
    static const struct {
        const char *name;
        unsigned bits;
    } t[] = {{"BOOL", 8},    {"U8", 8},          {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8},
             {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"F8_E8M0", 8}, {"I16", 16},   {"U16", 16},
             {"F16", 16},    {"BF16", 16},       {"I32", 32},        {"U32", 32},    {"F32", 32},
             {"F64", 64},    {"I64", 64},        {"U64", 64},        {"C64", 64},    {"F4", 4},
             {"F6_E2M3", 6}, {"F6_E3M2", 6}};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (strcmp(t[i].name, dtype) == 0) return n * t[i].bits / 8;
    return 0;
}

void gm_sb_tensor(gm_sb *b, const char *name, const char *dtype, int n_dims, const int64_t *shape,
                  const void *data) {
    uint64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= (uint64_t)shape[d];
    uint64_t bytes = gm_sb_dtype_bytes(dtype, n);
    uint64_t begin = b->data.n;
    put(&b->data, data, (size_t)bytes);
    puts_(&b->entries, ",");
    put_json_str(&b->entries, name);
    puts_(&b->entries, ":{\"dtype\":");
    put_json_str(&b->entries, dtype);
    puts_(&b->entries, ",\"shape\":[");
    for (int d = 0; d < n_dims; d++) {
        char num[32];
        snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)shape[d]);
        puts_(&b->entries, num);
    }
    char offs[80];
    snprintf(offs, sizeof offs, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin,
             (unsigned long long)(begin + bytes));
    puts_(&b->entries, offs);
}

void gm_sb_entry_raw(gm_sb *b, const char *key_json, const char *value_json) {
    puts_(&b->entries, ",\"");
    puts_(&b->entries, key_json);
    puts_(&b->entries, "\":");
    puts_(&b->entries, value_json);
}

void gm_sb_metadata(gm_sb *b, const char *key, const char *value) {
    puts_(&b->meta, ",");
    put_json_str(&b->meta, key);
    puts_(&b->meta, ":");
    put_json_str(&b->meta, value);
}

void gm_sb_data(gm_sb *b, const void *bytes, size_t n) { put(&b->data, bytes, n); }

void gm_sb_header_raw(gm_sb *b, const char *json) {
    free(b->raw_header);
    size_t n = strlen(json) + 1;
    b->raw_header = xrealloc(NULL, n);
    memcpy(b->raw_header, json, n);
}

void gm_sb_header_len(gm_sb *b, uint64_t n) {
    b->forged_len = true;
    b->header_len = n;
}

void gm_sb_no_pad(gm_sb *b) { b->no_pad = true; }

uint8_t *gm_sb_write(const gm_sb *b, size_t *size) {
    buf h = {0};
    if (b->raw_header) {
        puts_(&h, b->raw_header);
    } else {
        puts_(&h, "{");
        bool any = false;
        if (b->meta.n) {
            puts_(&h, "\"__metadata__\":{");
            put(&h, b->meta.p + 1, b->meta.n - 1);
            puts_(&h, "}");
            any = true;
        }
        if (b->entries.n) {
            if (any) puts_(&h, ",");
            put(&h, b->entries.p + 1, b->entries.n - 1);
        }
        puts_(&h, "}");
    }
    while (!b->no_pad && (8 + h.n) % 8 != 0) puts_(&h, " ");
    uint64_t len = b->forged_len ? b->header_len : h.n;
    size_t total = 8 + h.n + b->data.n;
    uint8_t *out = xrealloc(NULL, total);
    memcpy(out, &len, 8);   /* little-endian host (reader.h checks) */
    if (h.n) memcpy(out + 8, h.p, h.n);
    if (b->data.n) memcpy(out + 8 + h.n, b->data.p, b->data.n);
    free(h.p);
    *size = total;
    return out;
}

bool gm_sb_write_file(const gm_sb *b, const char *path) {
    size_t n;
    uint8_t *p = gm_sb_write(b, &n);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = false;
    free(p);
    return ok;
}
