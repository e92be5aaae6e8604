/* hf_config.c: the bounded JSON parse (pre-scan, cJSON, duplicate keys) shared by the HF readers, and the
 * config.json handle behind hf_config.h: path lookup ("text_config.hidden_size") and typed getters whose
 * messages name the file and the key. What the keys mean for a model is left to src/model. */
#include "io/hf_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "io/mmap.h"

typedef unsigned long long ull;
typedef long long ll;

#define JSON_INT_LIMIT 9007199254740992.0   /* 2^53: from here on, integers are not all exact in a double */

/* ==== The bounded parse ==== */

/* Bytes as shown in a message (see gm_show). */
typedef gm_shown shown;
static shown show(const char *p, size_t n) { return gm_show(p, n); }

/* Length of the valid UTF-8 sequence starting at p (first byte >= 0x80), or 0 when it is invalid
 * (overlong forms, surrogates, code points above U+10FFFF, truncated sequences). */
static size_t utf8_seq(const unsigned char *p, size_t left) {
    unsigned char c = p[0];
    size_t n;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) { n = 2; cp = c & 0x1fu; }
    else if (c >= 0xe0 && c <= 0xef) { n = 3; cp = c & 0x0fu; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 4; cp = c & 0x07u; }
    else return 0;
    if (left < n) return 0;
    for (size_t k = 1; k < n; k++) {
        if ((p[k] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3fu);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
    if (cp >= 0xd800 && cp <= 0xdfff) return 0;
    return n;
}

/* The linear pre-scan (see gm_json_parse). Records the root object's member-name positions if asked. */
static gemmac_status json_scan(const char *t, size_t len, const char *what, uint64_t base, const gm_json_limits *lim,
                               uint64_t **top_keys, size_t *n_top, gm_error *err) {
    const unsigned char *u = (const unsigned char *)t;
    int depth = 0;
    uint64_t values = 1;
    bool in_str = false, root_obj = false, expect_key = false, seen_root = false;
    size_t cap = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = u[i];
        if (c == 0)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: NUL byte at offset 0x%llx", what, (ull)(base + i));
        if (c >= 0x80) {
            size_t k = utf8_seq(u + i, len - i);
            if (!k)
                return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: invalid UTF-8 byte 0x%02x at offset 0x%llx", what, c,
                               (ull)(base + i));
            i += k;
            continue;
        }
        if (in_str) {
            if (c == '\\') {
                if (i + 5 < len && u[i + 1] == 'u' && memcmp(t + i + 2, "0000", 4) == 0)
                    return gm_fail(err, GEMMAC_ERR_BAD_FILE,
                                   "%s: escaped NUL (\\u0000) in a string at offset 0x%llx is not allowed", what,
                                   (ull)(base + i));
                i += (i + 1 < len && u[i + 1] > 0 && u[i + 1] < 0x80) ? 2 : 1;
                continue;
            }
            if (c < 0x20)
                return gm_fail(err, GEMMAC_ERR_BAD_FILE,
                               "%s: unescaped control character 0x%02x in a string at offset 0x%llx", what, c,
                               (ull)(base + i));
            if (c == '"') in_str = false;
            i++;
            continue;
        }
        switch (c) {
        case '"':
            in_str = true;
            if (expect_key && depth == 1 && root_obj && top_keys) {
                if (*n_top == cap) {
                    size_t nc = cap ? cap * 2 : 64;
                    uint64_t *nk = realloc(*top_keys, nc * sizeof *nk);
                    if (!nk) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory scanning keys", what);
                    *top_keys = nk;
                    cap = nc;
                }
                (*top_keys)[(*n_top)++] = base + i;
            }
            expect_key = false;
            break;
        case '{':
        case '[':
            if (!seen_root) root_obj = c == '{';
            if (++depth > lim->max_depth)
                return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: nesting deeper than %d levels at offset 0x%llx", what,
                               lim->max_depth, (ull)(base + i));
            values++;
            if (depth == 1 && root_obj) expect_key = true;
            break;
        case '}':
        case ']':
            if (depth > 0) depth--;
            break;
        case ',':
            values++;
            if (depth == 1 && root_obj) expect_key = true;
            break;
        default:
            break;
        }
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n') seen_root = true;
        if (values > lim->max_values)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: more than %llu JSON values (at offset 0x%llx)", what,
                           (ull)lim->max_values, (ull)(base + i));
        i++;
    }
    return GEMMAC_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

typedef struct dup_ctx {
    const char **keys;
    size_t cap;
    const char *what;
    gm_error *err;
} dup_ctx;

/* Refuses duplicate member names in every object of the tree (depth is bounded by the pre-scan). */
static gemmac_status check_dups(dup_ctx *d, const cJSON *node, const char *path) {
    if (!cJSON_IsObject(node) && !cJSON_IsArray(node)) return GEMMAC_OK;
    if (cJSON_IsObject(node)) {
        size_t n = 0;
        for (const cJSON *ch = node->child; ch; ch = ch->next) n++;
        if (n > 1) {
            if (n > d->cap) {
                const char **k = realloc(d->keys, n * sizeof *k);
                if (!k) return gm_fail(d->err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory checking keys", d->what);
                d->keys = k;
                d->cap = n;
            }
            size_t i = 0;
            for (const cJSON *ch = node->child; ch; ch = ch->next) d->keys[i++] = ch->string ? ch->string : "";
            qsort(d->keys, n, sizeof *d->keys, cmp_str);
            for (i = 1; i < n; i++)
                if (strcmp(d->keys[i], d->keys[i - 1]) == 0)
                    return gm_fail(d->err, GEMMAC_ERR_BAD_FILE, "%s: duplicate key '%s' in %s%s%s", d->what,
                                   show(d->keys[i], strlen(d->keys[i])).s, *path ? "object '" : "the top-level object",
                                   show(path, strlen(path)).s, *path ? "'" : "");
        }
    }
    size_t idx = 0;
    for (const cJSON *ch = node->child; ch; ch = ch->next, idx++) {
        char sub[256];
        if (cJSON_IsObject(node))
            snprintf(sub, sizeof sub, "%s%s%.120s", path, *path ? "." : "", ch->string ? ch->string : "");
        else
            snprintf(sub, sizeof sub, "%s%s%zu", path, *path ? "." : "", idx);
        gemmac_status st = check_dups(d, ch, sub);
        if (st) return st;
    }
    return GEMMAC_OK;
}

gemmac_status gm_json_parse(const char *text, size_t len, const char *what, uint64_t base,
                            const gm_json_limits *lim, cJSON **out, uint64_t **top_keys, size_t *n_top,
                            gm_error *err) {
    if (!out || !lim || (!text && len)) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_json_parse: NULL argument");
    *out = NULL;
    if (top_keys) {
        *top_keys = NULL;
        *n_top = 0;
    }
    if (!what) what = "JSON";
    size_t lead = 0;
    while (lead < len && (text[lead] == ' ' || text[lead] == '\t' || text[lead] == '\r' || text[lead] == '\n')) lead++;
    gemmac_status st;
    if (lead == len) {
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: empty JSON text at offset 0x%llx", what, (ull)base);
        goto fail;
    }
    if ((st = json_scan(text, len, what, base, lim, top_keys, n_top, err))) goto fail;

    char *buf = malloc(len + 1);
    if (!buf) {
        st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory for %zu bytes of JSON", what, len);
        goto fail;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(buf, &end, 1);
    if (!root) {
        size_t at = end && end >= buf && end <= buf + len ? (size_t)(end - buf) : 0;
        size_t n = len - at < 16 ? len - at : 16;
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: malformed JSON at offset 0x%llx (near '%s')", what,
                     (ull)(base + at), show(text + at, n).s);
        free(buf);
        goto fail;
    }
    free(buf);
    dup_ctx d = {NULL, 0, what, err};
    st = check_dups(&d, root, "");
    free(d.keys);
    if (st) {
        cJSON_Delete(root);
        goto fail;
    }
    *out = root;
    return GEMMAC_OK;
fail:
    if (top_keys) {
        free(*top_keys);
        *top_keys = NULL;
        *n_top = 0;
    }
    return st;
}

bool gm_json_int(const cJSON *item, int64_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    double d = item->valuedouble;
    if (!isfinite(d) || fabs(d) >= JSON_INT_LIMIT || floor(d) != d) return false;
    *out = (int64_t)d;
    return true;
}

/* ==== The config handle ==== */

struct gm_hf_config {
    cJSON *tree;                   /* owned by the top handle only */
    const cJSON *root;             /* the object keys are looked up in */
    const char *prefix;            /* "" or "text_config." (shown before keys in messages) */
    char name[208];                /* the file, for messages */
    struct gm_hf_config *text;     /* top handle: the nested text view, or NULL when flat */
    bool is_view;
};

static const gm_json_limits k_cfg_limits = {GM_HF_MAX_DEPTH, GM_HF_MAX_VALUES};

gemmac_status gm_hf_config_parse(const char *text, size_t len, const char *name, gm_hf_config **out,
                                 gm_error *err) {
    if (!out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_hf_config_parse: out is NULL");
    *out = NULL;
    if (!text && len) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_hf_config_parse: text is NULL");
    if (!name) name = "config.json";
    if (len > GM_HF_MAX_CONFIG)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%.200s: %zu bytes exceeds the limit of %u bytes for a config",
                       name, len, GM_HF_MAX_CONFIG);
    gm_hf_config *c = calloc(1, sizeof *c);
    if (!c) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%.200s: out of memory", name);
    snprintf(c->name, sizeof c->name, "%.200s", name);
    c->prefix = "";
    gemmac_status st = gm_json_parse(text ? text : "", len, c->name, 0, &k_cfg_limits, &c->tree, NULL, NULL, err);
    if (st) goto fail;
    c->root = c->tree;
    if (!cJSON_IsObject(c->root)) {
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: the top level is %s, expected an object", c->name,
                     cJSON_IsArray(c->root) ? "an array" : "not an object");
        goto fail;
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(c->root, "text_config");
    if (tc && !cJSON_IsNull(tc)) {
        if (!cJSON_IsObject(tc)) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key 'text_config': expected an object or null", c->name);
            goto fail;
        }
        c->text = calloc(1, sizeof *c->text);
        if (!c->text) {
            st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory", c->name);
            goto fail;
        }
        c->text->root = tc;
        c->text->prefix = "text_config.";
        c->text->is_view = true;
        memcpy(c->text->name, c->name, sizeof c->name);
    }
    *out = c;
    return GEMMAC_OK;
fail:
    gm_hf_config_close(c);
    return st;
}

gemmac_status gm_hf_config_open(const char *path, gm_hf_config **out, gm_error *err) {
    if (!out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_hf_config_open: out is NULL");
    *out = NULL;
    gm_map map;
    gemmac_status st = gm_map_file(path, &map, err);
    if (st) return st;
    if (map.size > GM_HF_MAX_CONFIG) {
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%.300s: %llu bytes exceeds the limit of %u bytes for a config", path,
                     (ull)map.size, GM_HF_MAX_CONFIG);
    } else {
        st = gm_hf_config_parse(map.data, (size_t)map.size, path, out, err);
    }
    gm_map_release(&map);
    return st;
}

void gm_hf_config_close(gm_hf_config *c) {
    if (!c || c->is_view) return;
    free(c->text);
    cJSON_Delete(c->tree);
    free(c);
}

const gm_hf_config *gm_hf_config_text(const gm_hf_config *c) { return c && c->text ? c->text : c; }
bool gm_hf_config_is_nested(const gm_hf_config *c) { return c && (c->text || c->is_view); }

/* The item at a dotted path below c->root, or NULL. */
static const cJSON *lookup(const gm_hf_config *c, const char *key) {
    if (!c || !key || !*key) return NULL;
    const cJSON *cur = c->root;
    const char *p = key;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char seg[256];
        if (n == 0 || n >= sizeof seg) return NULL;
        memcpy(seg, p, n);
        seg[n] = '\0';
        if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, seg);
        } else if (cJSON_IsArray(cur)) {
            if (n > 9 || strspn(seg, "0123456789") != n) return NULL;
            long idx = strtol(seg, NULL, 10);
            cur = cJSON_GetArrayItem(cur, (int)idx);
        } else {
            return NULL;
        }
        if (!cur) return NULL;
        if (!dot) return cur;
        p = dot + 1;
    }
}

static gm_hf_kind kind(const cJSON *it) {
    if (!it) return GM_HF_ABSENT;
    if (cJSON_IsNull(it)) return GM_HF_NULL;
    if (cJSON_IsBool(it)) return GM_HF_BOOL;
    if (cJSON_IsNumber(it)) return GM_HF_NUMBER;
    if (cJSON_IsString(it)) return GM_HF_STRING;
    if (cJSON_IsArray(it)) return GM_HF_ARRAY;
    if (cJSON_IsObject(it)) return GM_HF_OBJECT;
    return GM_HF_ABSENT;   /* cJSON_Raw / invalid: never produced by the parser */
}

gm_hf_kind gm_hf_kind_of(const gm_hf_config *c, const char *key) { return kind(lookup(c, key)); }

const char *gm_hf_kind_name(gm_hf_kind k) {
    static const char *const names[] = {"absent", "null", "bool", "number", "string", "array", "object"};
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "unknown";
}

size_t gm_hf_count(const gm_hf_config *c, const char *key) {
    const cJSON *it = lookup(c, key);
    if (!cJSON_IsArray(it) && !cJSON_IsObject(it)) return 0;
    size_t n = 0;
    for (const cJSON *ch = it->child; ch; ch = ch->next) n++;
    return n;
}

/* Finds a present, non-null value for a getter; NULL with err filled otherwise. */
static const cJSON *get(const gm_hf_config *c, const char *key, const void *out, gm_error *err, gemmac_status *st) {
    if (!c || !key || !out) {
        *st = gm_fail(err, GEMMAC_ERR_INVALID_ARG, "hf config getter: NULL argument");
        return NULL;
    }
    const cJSON *it = lookup(c, key);
    if (!it || cJSON_IsNull(it)) {
        *st = gm_fail(err, GEMMAC_ERR_NOT_FOUND, "%s: key '%s%.200s' %s", c->name, c->prefix, key,
                      it ? "is null" : "not found");
        return NULL;
    }
    return it;
}

static gemmac_status wrong(const gm_hf_config *c, const char *key, const cJSON *it, const char *want,
                           gm_error *err) {
    return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key '%s%.200s': expected %s, found %s", c->name, c->prefix, key,
                   want, gm_hf_kind_name(kind(it)));
}

/* An element of an array getter has the wrong type. */
static gemmac_status wrong_elem(const gm_hf_config *c, const char *key, size_t i, const cJSON *it, const char *want,
                                gm_error *err) {
    return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key '%s%.200s' element %zu: expected %s, found %s", c->name,
                   c->prefix, key, i, want, gm_hf_kind_name(kind(it)));
}

/* Checks an integer item against [lo, hi]; i == SIZE_MAX for a scalar. */
static gemmac_status int_item(const gm_hf_config *c, const char *key, size_t i, const cJSON *it, int64_t lo,
                              int64_t hi, int64_t *v, gm_error *err) {
    if (!gm_json_int(it, v)) {
        const char *want = "an integer";
        if (cJSON_IsNumber(it)) {
            char num[64];
            snprintf(num, sizeof num, "%.17g", it->valuedouble);
            if (i == SIZE_MAX)
                return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key '%s%.200s': value %s is not an integer below 2^53",
                               c->name, c->prefix, key, num);
            return gm_fail(err, GEMMAC_ERR_BAD_FILE,
                           "%s: key '%s%.200s' element %zu: value %s is not an integer below 2^53", c->name,
                           c->prefix, key, i, num);
        }
        return i == SIZE_MAX ? wrong(c, key, it, want, err) : wrong_elem(c, key, i, it, want, err);
    }
    if (*v < lo || *v > hi) {
        if (i == SIZE_MAX)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key '%s%.200s': value %lld is out of range [%lld, %lld]",
                           c->name, c->prefix, key, (ll)*v, (ll)lo, (ll)hi);
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key '%s%.200s' element %zu: value %lld is out of range [%lld, %lld]",
                       c->name, c->prefix, key, i, (ll)*v, (ll)lo, (ll)hi);
    }
    return GEMMAC_OK;
}

gemmac_status gm_hf_get_int(const gm_hf_config *c, const char *key, int64_t lo, int64_t hi, int64_t *out,
                            gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const cJSON *it = get(c, key, out, err, &st);
    if (!it) return st;
    int64_t v;
    if ((st = int_item(c, key, SIZE_MAX, it, lo, hi, &v, err))) return st;
    *out = v;
    return GEMMAC_OK;
}

gemmac_status gm_hf_get_float(const gm_hf_config *c, const char *key, double *out, gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const cJSON *it = get(c, key, out, err, &st);
    if (!it) return st;
    if (!cJSON_IsNumber(it)) return wrong(c, key, it, "a number", err);
    if (!isfinite(it->valuedouble))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key '%s%.200s': value is not finite", c->name, c->prefix, key);
    *out = it->valuedouble;
    return GEMMAC_OK;
}

gemmac_status gm_hf_get_bool(const gm_hf_config *c, const char *key, bool *out, gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const cJSON *it = get(c, key, out, err, &st);
    if (!it) return st;
    if (!cJSON_IsBool(it)) return wrong(c, key, it, "a bool", err);
    *out = cJSON_IsTrue(it);
    return GEMMAC_OK;
}

gemmac_status gm_hf_get_str(const gm_hf_config *c, const char *key, const char **out, gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const cJSON *it = get(c, key, out, err, &st);
    if (!it) return st;
    if (!cJSON_IsString(it) || !it->valuestring) return wrong(c, key, it, "a string", err);
    *out = it->valuestring;
    return GEMMAC_OK;
}

gemmac_status gm_hf_get_bool_or_str(const gm_hf_config *c, const char *key, bool *b, const char **str,
                                    gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const cJSON *it = get(c, key, b && str ? b : NULL, err, &st);
    if (!it) return st;
    if (cJSON_IsBool(it)) {
        *b = cJSON_IsTrue(it);
        *str = NULL;
        return GEMMAC_OK;
    }
    if (!cJSON_IsString(it) || !it->valuestring) return wrong(c, key, it, "a bool or a string", err);
    *b = false;
    *str = it->valuestring;
    return GEMMAC_OK;
}

/* The array (or object, for keys) at key with its length checked against cap. */
static const cJSON *get_arr(const gm_hf_config *c, const char *key, const void *out, size_t cap, size_t *n,
                            bool object, gm_error *err, gemmac_status *st) {
    const cJSON *it = get(c, key, out && n ? out : NULL, err, st);
    if (!it) return NULL;
    if (object ? !cJSON_IsObject(it) : !cJSON_IsArray(it)) {
        *st = wrong(c, key, it, object ? "an object" : "an array", err);
        return NULL;
    }
    size_t len = 0;
    for (const cJSON *ch = it->child; ch; ch = ch->next) len++;
    *n = len;
    if (len > cap) {
        *st = gm_fail(err, GEMMAC_ERR_BUFFER_TOO_SMALL, "%s: key '%s%.200s': %zu elements, room for %zu", c->name,
                      c->prefix, key, len, cap);
        return NULL;
    }
    return it;
}

gemmac_status gm_hf_get_int_arr(const gm_hf_config *c, const char *key, int64_t lo, int64_t hi, int64_t *out,
                                size_t cap, size_t *n, gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const cJSON *a = get_arr(c, key, out, cap, n, false, err, &st);
    if (!a) return st;
    size_t i = 0;
    for (const cJSON *ch = a->child; ch; ch = ch->next, i++) {
        int64_t v;
        if ((st = int_item(c, key, i, ch, lo, hi, &v, err))) return st;
    }
    i = 0;
    for (const cJSON *ch = a->child; ch; ch = ch->next, i++) gm_json_int(ch, &out[i]);
    return GEMMAC_OK;
}

gemmac_status gm_hf_get_float_arr(const gm_hf_config *c, const char *key, double *out, size_t cap, size_t *n,
                                  gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const cJSON *a = get_arr(c, key, out, cap, n, false, err, &st);
    if (!a) return st;
    size_t i = 0;
    for (const cJSON *ch = a->child; ch; ch = ch->next, i++) {
        if (!cJSON_IsNumber(ch)) return wrong_elem(c, key, i, ch, "a number", err);
        if (!isfinite(ch->valuedouble))
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key '%s%.200s' element %zu: value is not finite", c->name,
                           c->prefix, key, i);
    }
    i = 0;
    for (const cJSON *ch = a->child; ch; ch = ch->next, i++) out[i] = ch->valuedouble;
    return GEMMAC_OK;
}

gemmac_status gm_hf_get_bool_arr(const gm_hf_config *c, const char *key, bool *out, size_t cap, size_t *n,
                                 gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const cJSON *a = get_arr(c, key, out, cap, n, false, err, &st);
    if (!a) return st;
    size_t i = 0;
    for (const cJSON *ch = a->child; ch; ch = ch->next, i++)
        if (!cJSON_IsBool(ch)) return wrong_elem(c, key, i, ch, "a bool", err);
    i = 0;
    for (const cJSON *ch = a->child; ch; ch = ch->next, i++) out[i] = cJSON_IsTrue(ch);
    return GEMMAC_OK;
}

gemmac_status gm_hf_get_str_arr(const gm_hf_config *c, const char *key, const char **out, size_t cap,
                                size_t *n, gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const cJSON *a = get_arr(c, key, out, cap, n, false, err, &st);
    if (!a) return st;
    size_t i = 0;
    for (const cJSON *ch = a->child; ch; ch = ch->next, i++)
        if (!cJSON_IsString(ch) || !ch->valuestring) return wrong_elem(c, key, i, ch, "a string", err);
    i = 0;
    for (const cJSON *ch = a->child; ch; ch = ch->next, i++) out[i] = ch->valuestring;
    return GEMMAC_OK;
}

gemmac_status gm_hf_get_keys(const gm_hf_config *c, const char *key, const char **out, size_t cap, size_t *n,
                             gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const cJSON *o = get_arr(c, key, out, cap, n, true, err, &st);
    if (!o) return st;
    size_t i = 0;
    for (const cJSON *ch = o->child; ch; ch = ch->next, i++) out[i] = ch->string ? ch->string : "";
    return GEMMAC_OK;
}

gemmac_status gm_hf_get_int_per_layer(const gm_hf_config *c, const char *key, size_t n_layers, int64_t lo,
                                      int64_t hi, int64_t *out, gm_error *err) {
    gemmac_status st = GEMMAC_OK;
    const cJSON *it = get(c, key, out, err, &st);
    if (!it) return st;
    int64_t v;
    if (cJSON_IsNumber(it)) {
        if ((st = int_item(c, key, SIZE_MAX, it, lo, hi, &v, err))) return st;
        for (size_t i = 0; i < n_layers; i++) out[i] = v;
        return GEMMAC_OK;
    }
    if (!cJSON_IsArray(it)) return wrong(c, key, it, "an integer or an array of integers", err);
    size_t len = 0;
    for (const cJSON *ch = it->child; ch; ch = ch->next) len++;
    if (len != n_layers)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: key '%s%.200s': %zu per-layer values for %zu layers", c->name,
                       c->prefix, key, len, n_layers);
    size_t i = 0;
    for (const cJSON *ch = it->child; ch; ch = ch->next, i++)
        if ((st = int_item(c, key, i, ch, lo, hi, &v, err))) return st;
    i = 0;
    for (const cJSON *ch = it->child; ch; ch = ch->next, i++) gm_json_int(ch, &out[i]);
    return GEMMAC_OK;
}

gemmac_status gm_hf_config_model_id(const gm_hf_config *c, gm_hf_model_id *out, gm_error *err) {
    if (!c || !out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_hf_config_model_id: NULL argument");
    gm_hf_model_id id = {NULL, NULL, NULL};
    gemmac_status st;
    if ((st = gm_hf_get_str(c, "model_type", &id.model_type, err))) return st;
    const cJSON *arch = lookup(c, "architectures");
    if (arch && !cJSON_IsNull(arch)) {
        if (!cJSON_IsArray(arch) || !arch->child) return wrong(c, "architectures", arch, "a non-empty array of strings", err);
        size_t i = 0;
        for (const cJSON *ch = arch->child; ch; ch = ch->next, i++)
            if (!cJSON_IsString(ch) || !ch->valuestring) return wrong_elem(c, "architectures", i, ch, "a string", err);
        id.architecture = arch->child->valuestring;
    }
    if (c->text) {
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c->text->root, "model_type");
        if (mt && !cJSON_IsNull(mt)) {
            if (!cJSON_IsString(mt) || !mt->valuestring) return wrong(c->text, "model_type", mt, "a string", err);
            id.text_model_type = mt->valuestring;
        }
    } else {
        id.text_model_type = id.model_type;
    }
    *out = id;
    return GEMMAC_OK;
}
