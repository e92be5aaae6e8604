/* tokenizer_json.c: builds a tokenizer from a Hugging Face tokenizer.json (plus, when they sit next to it,
 * tokenizer_config.json, special_tokens_map.json and generation_config.json, read only for the bos / eos /
 * eot / pad ids and add_bos) into the same gm_vocab_desc that gm_tokenizer_from_gguf fills, so tokenizing,
 * special tokens, pieces and chat templates behave as for the converted GGUF. Owns the mapping of the
 * JSON's model / normalizer / pre_tokenizer / added_tokens onto our two tokenizer kinds and its messages;
 * the JSON parse itself is gm_json_parse (src/io/hf_config.c), the algorithms are spm.c and bpe.c.
 *
 * Both Gemma tokenizer.json files are model.type "BPE" with vocab + merges, the normalizer Replace(" ",
 * "▁") and a pre-tokenizer that is a no-op after it (Split(" ", merged_with_previous)) or Gemma 4's split
 * into newline runs. Gemma 4 maps onto GM_TOK_BPE_GEMMA4 with the merges as they are. Gemma 3 / 3n map onto
 * the SentencePiece-style GM_TOK_SPM, which merges by token score: a token's score is -(1 + the rank of
 * the first merge that makes it), tokens no merge makes score below every merge. With merges listing
 * every split of every piece in score order (what transformers writes for a SentencePiece BPE model),
 * merging by those scores is merging by rank, i.e. what HF and sentencepiece do (checked against llama.cpp
 * on the real 262144-token vocabulary in test_tokenizer_json.c). For a BPE whose merges are not complete
 * in that sense (a multi-character token no listed merge makes, or no merges at all), SPM still forms such
 * tokens, last, where HF never does: such files load but may tokenize differently from HF. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include <cJSON.h>

#include "io/hf_config.h"
#include "io/mmap.h"
#include "tok/tok_internal.h"

typedef unsigned long long ull;

static const gm_json_limits k_tokjson_limits = {GM_TOKJSON_MAX_DEPTH, GM_TOKJSON_MAX_VALUES};

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 ▁ */

/* ---------------------------------------------------------------------------------------------------- */
/* small helpers                                                                                         */

static gm_shown show(const char *s) { return gm_show(s, strlen(s)); }

/* Prefixes err's message with "name: " (for failures reported by gm_tokenizer_new). */
static gemmac_status prefix_err(gemmac_status st, gm_error *err, const char *name) {
    if (!err || !err->msg[0]) return st;
    char tmp[sizeof err->msg];
    const char *m = err->msg;
    if (strncmp(m, "tokenizer: ", 11) == 0) m += 11;
    size_t nl = strlen(name) < 200 ? strlen(name) : 200, ml = strlen(m);
    if (nl + 2 + ml >= sizeof tmp) ml = sizeof tmp - nl - 3;
    memcpy(tmp, name, nl);
    memcpy(tmp + nl, ": ", 2);
    memcpy(tmp + nl + 2, m, ml);
    tmp[nl + 2 + ml] = '\0';
    memcpy(err->msg, tmp, sizeof tmp);
    err->status = st;
    return st;
}

static const cJSON *member(const cJSON *obj, const char *key) {
    return cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}

static bool absent(const cJSON *v) { return !v || cJSON_IsNull(v); }

static const char *kind_name(const cJSON *v) {
    if (absent(v)) return "null";
    if (cJSON_IsBool(v)) return "a bool";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    return "an object";
}

/* An optional bool member: absent/null leaves *out. */
static gemmac_status opt_bool(const cJSON *obj, const char *key, const char *name, const char *where, bool *out,
                              gm_error *err) {
    const cJSON *v = member(obj, key);
    if (absent(v)) return GEMMAC_OK;
    if (!cJSON_IsBool(v))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: %s%s is %s, not a bool", name, where, key, kind_name(v));
    *out = cJSON_IsTrue(v);
    return GEMMAC_OK;
}

static const char *type_of(const cJSON *obj) {
    const cJSON *t = member(obj, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* ---- a text → id table over the vocabulary (the tokenizer's own is built later, by gm_tokenizer_new) ---- */

typedef struct text_table {
    const gm_str *toks;
    uint32_t *slots;               /* id + 1; 0 = empty */
    uint64_t mask;
} text_table;

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

/* Builds the table; *dup_a / *dup_b get the ids of a repeated text (then returns false with both >= 0). */
static bool table_build(text_table *t, const gm_str *toks, uint32_t n, int64_t *dup_a, int64_t *dup_b) {
    uint64_t size = 16;
    while (size < (uint64_t)n * 2) size <<= 1;
    t->toks = toks;
    t->mask = size - 1;
    *dup_a = *dup_b = -1;
    if (!(t->slots = calloc((size_t)size, sizeof *t->slots))) return false;
    for (uint32_t id = 0; id < n; id++) {
        uint64_t i = fnv(toks[id].ptr, toks[id].len) & t->mask;
        for (; t->slots[i]; i = (i + 1) & t->mask) {
            const gm_str *o = &toks[t->slots[i] - 1];
            if (o->len == toks[id].len && memcmp(o->ptr, toks[id].ptr, o->len) == 0) {
                *dup_a = t->slots[i] - 1;
                *dup_b = id;
                return false;
            }
        }
        t->slots[i] = id + 1;
    }
    return true;
}

static int32_t table_find(const text_table *t, const char *s, size_t n) {
    for (uint64_t i = fnv(s, n) & t->mask;; i = (i + 1) & t->mask) {
        uint32_t v = t->slots[i];
        if (!v) return -1;
        const gm_str *o = &t->toks[v - 1];
        if (o->len == n && memcmp(o->ptr, s, n) == 0) return (int32_t)(v - 1);
    }
}

/* ---------------------------------------------------------------------------------------------------- */
/* side files: tokenizer_config.json, special_tokens_map.json, generation_config.json                     */

typedef struct side_info {
    char bos[256], eos[256], pad[256];   /* token texts ("" when not given) */
    const char *bos_from, *eos_from, *pad_from;
    int add_bos;                         /* -1 not given, else 0/1 */
    int64_t gen_bos, gen_pad;            /* generation_config ids, -1 when absent */
    int64_t gen_eos[8];
    size_t n_gen_eos;
} side_info;

static void side_init(side_info *s) {
    memset(s, 0, sizeof *s);
    s->add_bos = -1;
    s->gen_bos = s->gen_pad = -1;
}

/* "bos_token": "<bos>" or {"content": "<bos>", ...} (transformers writes both); absent/null: nothing. */
static gemmac_status side_token(const gm_hf_config *c, const char *file, const char *key, char *dst, size_t cap,
                                const char **from, gm_error *err) {
    if (dst[0]) return GEMMAC_OK;  /* an earlier file said it */
    gm_hf_kind k = gm_hf_kind_of(c, key);
    if (k == GM_HF_ABSENT || k == GM_HF_NULL) return GEMMAC_OK;
    const char *s = NULL;
    gemmac_status st;
    if (k == GM_HF_OBJECT) {
        char sub[64];
        snprintf(sub, sizeof sub, "%s.content", key);
        st = gm_hf_get_str(c, sub, &s, err);
    } else {
        st = gm_hf_get_str(c, key, &s, err);
    }
    if (st == GEMMAC_ERR_NOT_FOUND) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: %s has no content", file, key);
    if (st) return st;
    if (strlen(s) >= cap) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: %s is too long", file, key);
    memcpy(dst, s, strlen(s) + 1);
    *from = file;
    return GEMMAC_OK;
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Reads whichever of the side files exist in dir; a present file that cannot be read or parsed, or has a
 * key of the wrong type, is an error naming it. */
static gemmac_status read_side_files(const char *dir, side_info *s, gm_error *err) {
    static const char *const names[] = {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json"};
    for (int f = 0; f < 3; f++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[f]) >= (int)sizeof path)
            return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tokenizer: path too long");
        if (!file_exists(path)) continue;
        gm_hf_config *c = NULL;
        gemmac_status st = gm_hf_config_open(path, &c, err);
        if (st) return st;
        const char *file = names[f];
        if (f < 2) {
            if ((st = side_token(c, file, "bos_token", s->bos, sizeof s->bos, &s->bos_from, err)) ||
                (st = side_token(c, file, "eos_token", s->eos, sizeof s->eos, &s->eos_from, err)) ||
                (st = side_token(c, file, "pad_token", s->pad, sizeof s->pad, &s->pad_from, err)))
                goto next;
            if (f == 0 && s->add_bos < 0) {
                bool b;
                st = gm_hf_get_bool(c, "add_bos_token", &b, err);
                if (st == GEMMAC_OK) s->add_bos = b;
                else if (st == GEMMAC_ERR_NOT_FOUND) st = GEMMAC_OK;
            }
        } else {
            int64_t v;
            st = gm_hf_get_int(c, "bos_token_id", 0, INT32_MAX, &v, err);
            if (st == GEMMAC_OK) s->gen_bos = v;
            if (st && st != GEMMAC_ERR_NOT_FOUND) goto next;
            st = gm_hf_get_int(c, "pad_token_id", 0, INT32_MAX, &v, err);
            if (st == GEMMAC_OK) s->gen_pad = v;
            if (st && st != GEMMAC_ERR_NOT_FOUND) goto next;
            st = GEMMAC_OK;
            gm_hf_kind k = gm_hf_kind_of(c, "eos_token_id");
            if (k == GM_HF_ARRAY) {
                size_t n = 0;
                st = gm_hf_get_int_arr(c, "eos_token_id", 0, INT32_MAX, s->gen_eos, 8, &n, err);
                if (st == GEMMAC_ERR_BUFFER_TOO_SMALL) {  /* more than 8 stop ids: keep the first 8 */
                    int64_t *all = malloc(n * sizeof *all);
                    if (!all) {
                        st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory", file);
                        goto next;
                    }
                    st = gm_hf_get_int_arr(c, "eos_token_id", 0, INT32_MAX, all, n, &n, err);
                    if (!st) memcpy(s->gen_eos, all, sizeof s->gen_eos);
                    free(all);
                    n = 8;
                }
                if (!st) s->n_gen_eos = n;
            } else if (k != GM_HF_ABSENT && k != GM_HF_NULL) {
                st = gm_hf_get_int(c, "eos_token_id", 0, INT32_MAX, &v, err);
                if (!st) {
                    s->gen_eos[0] = v;
                    s->n_gen_eos = 1;
                }
            }
        }
    next:
        gm_hf_config_close(c);
        if (st) return st;
    }
    return GEMMAC_OK;
}

/* ---------------------------------------------------------------------------------------------------- */
/* tokenizer.json                                                                                        */

typedef struct shape {
    bool replace_space;            /* normalizer Replace(" ", "▁") */
    bool prepend_space;            /* normalizer Prepend("▁") before it (older SentencePiece style) */
    bool newline_split;            /* pre_tokenizer Split("[^\n]+|[\n]+") (Gemma 4) */
} shape;

static bool is_replace_space(const cJSON *n) {
    const cJSON *pat = member(member(n, "pattern"), "String"), *content = member(n, "content");
    return cJSON_IsString(pat) && strcmp(pat->valuestring, " ") == 0 && cJSON_IsString(content) &&
           strcmp(content->valuestring, SPACE_MARK) == 0;
}

static gemmac_status check_normalizer(const cJSON *n, const char *name, shape *sh, gm_error *err) {
    if (absent(n))
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                       "%s: no normalizer; Gemma's tokenizers replace spaces by U+2581 (Replace \" \" -> \"\\xe2\\x96\\x81\")",
                       name);
    const char *type = type_of(n);
    if (!type) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: normalizer has no type", name);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = member(n, "normalizers");
        if (!cJSON_IsArray(list)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: normalizer Sequence has no normalizers array", name);
        for (const cJSON *it = list->child; it; it = it->next) {
            const char *t = type_of(it);
            const cJSON *pre = member(it, "prepend");
            if (t && strcmp(t, "Prepend") == 0 && cJSON_IsString(pre) && strcmp(pre->valuestring, SPACE_MARK) == 0 &&
                !sh->replace_space) {
                sh->prepend_space = true;
            } else if (t && strcmp(t, "Replace") == 0 && is_replace_space(it) && !sh->replace_space) {
                sh->replace_space = true;
            } else {
                return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                               "%s: normalizer %s in the Sequence is not supported (Gemma: Replace \" \" -> U+2581)",
                               name, t ? show(t).s : "without a type");
            }
        }
    } else if (strcmp(type, "Replace") == 0 && is_replace_space(n)) {
        sh->replace_space = true;
    } else {
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                       "%s: normalizer %s is not supported (Gemma: Replace \" \" -> U+2581)", name, show(type).s);
    }
    if (!sh->replace_space)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "%s: the normalizer does not replace spaces by U+2581", name);
    return GEMMAC_OK;
}

/* One pre-tokenizer: Split on " " (a no-op once the normalizer has replaced every space) or Split into
 * runs of newlines and runs of everything else (Gemma 4). */
static gemmac_status check_pre_one(const cJSON *p, const char *name, shape *sh, gm_error *err) {
    const char *type = type_of(p);
    if (!type) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: pre_tokenizer has no type", name);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = member(p, "pretokenizers");
        if (!cJSON_IsArray(list))
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: pre_tokenizer Sequence has no pretokenizers array", name);
        for (const cJSON *it = list->child; it; it = it->next) {
            gemmac_status st = check_pre_one(it, name, sh, err);
            if (st) return st;
        }
        return GEMMAC_OK;
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *pat = member(p, "pattern"), *inv = member(p, "invert"), *beh = member(p, "behavior");
        const cJSON *str = member(pat, "String"), *re = member(pat, "Regex");
        bool inverted = cJSON_IsTrue(inv);
        if (cJSON_IsString(str) && strcmp(str->valuestring, " ") == 0 && !inverted) return GEMMAC_OK;
        if (cJSON_IsString(re) && !inverted && cJSON_IsString(beh) && strcmp(beh->valuestring, "Isolated") == 0 &&
            (strcmp(re->valuestring, "[^\n]+|[\n]+") == 0 || strcmp(re->valuestring, "[\n]+|[^\n]+") == 0)) {
            sh->newline_split = true;
            return GEMMAC_OK;
        }
        const char *what = cJSON_IsString(str) ? str->valuestring : cJSON_IsString(re) ? re->valuestring : "?";
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                       "%s: pre_tokenizer Split on '%s' is not supported (Gemma: \" \" or \"[^\\n]+|[\\n]+\")", name,
                       show(what).s);
    }
    return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "%s: pre_tokenizer %s is not supported (Gemma: none, or Split)", name,
                   show(type).s);
}

/* Added tokens: the HF flags that change matching are refused unless they are no-ops here. */
static gemmac_status check_added_flags(const cJSON *a, const char *content, size_t idx, const char *name,
                                       gm_error *err) {
    static const char *const flags[] = {"lstrip", "rstrip", "single_word"};
    for (int f = 0; f < 3; f++) {
        bool v = false;
        gemmac_status st = opt_bool(a, flags[f], name, "an added token's ", &v, err);
        if (st) return st;
        if (v)
            return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "%s: added_tokens[%zu] '%s' has %s set, which is not supported",
                           name, idx, show(content).s, flags[f]);
    }
    bool normalized = false;
    gemmac_status st = opt_bool(a, "normalized", name, "an added token's ", &normalized, err);
    if (st) return st;
    /* matched in the normalized text; the same as in the raw text unless it holds a space or a U+2581 */
    if (normalized && (strchr(content, ' ') || strstr(content, SPACE_MARK)))
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                       "%s: added_tokens[%zu] '%s' is normalized and holds a space, which is not supported", name, idx,
                       show(content).s);
    return GEMMAC_OK;
}

/* Whether the post-processor's "single" template starts with the special token bos_text. -1: no
 * TemplateProcessing (unknown). */
static int template_adds_bos(const cJSON *pp, const char *bos_text) {
    const char *type = type_of(pp);
    if (!type || strcmp(type, "TemplateProcessing") != 0) return -1;
    const cJSON *single = member(pp, "single");
    if (!cJSON_IsArray(single)) return -1;
    const cJSON *first = single->child;
    const cJSON *id = member(member(first, "SpecialToken"), "id");
    return cJSON_IsString(id) && bos_text && strcmp(id->valuestring, bos_text) == 0;
}

/* A token id for a text, or an error naming where the text came from. */
static gemmac_status id_of_text(const text_table *tt, const char *text, const char *from, const char *key,
                                int32_t *id, gm_error *err) {
    int32_t v = table_find(tt, text, strlen(text));
    if (v < 0)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: %s '%s' is not in the vocabulary", from, key, show(text).s);
    *id = v;
    return GEMMAC_OK;
}

static gemmac_status gen_id(int64_t v, uint32_t n, const char *key, int32_t *id, gm_error *err) {
    if (v >= (int64_t)n)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "generation_config.json: %s = %lld is outside the vocabulary of %u tokens",
                       key, (long long)v, n);
    *id = (int32_t)v;
    return GEMMAC_OK;
}

typedef struct build_state {
    gm_str *toks;                  /* [cap] views into the cJSON tree */
    int32_t *types;
    float *scores;
    gm_str *merges;
    char *merge_pool;
    text_table tt;
} build_state;

static void build_free(build_state *b) {
    free(b->toks);
    free(b->types);
    free(b->scores);
    free(b->merges);
    free(b->merge_pool);
    free(b->tt.slots);
}

/* Reads the merges: "a b" strings or [a, b] pairs; each half and their concatenation must be tokens.
 * For BPE they become desc merges; for SPM they only give scores. */
static gemmac_status read_merges(const cJSON *list, const char *name, gm_tok_kind kind, uint32_t n_tokens,
                                 build_state *b, gm_vocab_desc *d, gm_error *err) {
    size_t n = (size_t)cJSON_GetArraySize(list);
    if (n > INT32_MAX) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: too many merges", name);
    uint64_t pool = 0;
    for (const cJSON *m = list->child; m; m = m->next)
        if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next))
            pool += strlen(m->child->valuestring) + strlen(m->child->next->valuestring) + 1;
    b->merges = malloc((n ? n : 1) * sizeof *b->merges);
    b->merge_pool = malloc((size_t)pool + 1);
    if (!b->merges || !b->merge_pool) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory for merges", name);
    if (kind == GM_TOK_SPM) {
        /* tokens no merge makes (single characters, specials) score below every merge */
        for (uint32_t i = 0; i < n_tokens; i++) b->scores[i] = -(float)((double)n + 1.0);
    }
    uint64_t off = 0;
    size_t r = 0;
    char cat_buf[512];
    for (const cJSON *m = list->child; m; m = m->next, r++) {
        const char *l, *rt;
        size_t ln, rn;
        if (cJSON_IsString(m)) {
            const char *s = m->valuestring;
            const char *sp = strchr(s, ' ');
            if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' '))
                return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.merges[%zu] '%s' is not two tokens separated by one space",
                               name, r, show(s).s);
            l = s;
            ln = (size_t)(sp - s);
            rt = sp + 1;
            rn = strlen(rt);
            b->merges[r] = (gm_str){s, strlen(s)};
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            l = m->child->valuestring;
            rt = m->child->next->valuestring;
            ln = strlen(l);
            rn = strlen(rt);
            if (ln == 0 || rn == 0)
                return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.merges[%zu] has an empty half", name, r);
            /* our merge table splits "left right" at the first space after byte 0 */
            if (kind == GM_TOK_BPE_GEMMA4 && ln > 1 && memchr(l + 1, ' ', ln - 1))
                return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "%s: model.merges[%zu]: left half '%s' holds a space",
                               name, r, show(l).s);
            char *dst = b->merge_pool + off;
            memcpy(dst, l, ln);
            dst[ln] = ' ';
            memcpy(dst + ln + 1, rt, rn);
            b->merges[r] = (gm_str){dst, ln + 1 + rn};
            off += ln + 1 + rn;
        } else {
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.merges[%zu] is %s, not \"a b\" or [\"a\", \"b\"]", name,
                           r, kind_name(m));
        }
        int32_t lid = table_find(&b->tt, l, ln), rid = table_find(&b->tt, rt, rn);
        if (lid < 0 || rid < 0)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.merges[%zu] '%s' + '%s': '%s' is not in the vocabulary",
                           name, r, gm_show(l, ln).s, gm_show(rt, rn).s, lid < 0 ? gm_show(l, ln).s : gm_show(rt, rn).s);
        int32_t res;
        if (ln + rn <= sizeof cat_buf) {
            memcpy(cat_buf, l, ln);
            memcpy(cat_buf + ln, rt, rn);
            res = table_find(&b->tt, cat_buf, ln + rn);
        } else {
            char *cat = malloc(ln + rn);
            if (!cat) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory", name);
            memcpy(cat, l, ln);
            memcpy(cat + ln, rt, rn);
            res = table_find(&b->tt, cat, ln + rn);
            free(cat);
        }
        if (res < 0)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE,
                           "%s: model.merges[%zu] '%s' + '%s' makes a token that is not in the vocabulary", name, r,
                           gm_show(l, ln).s, gm_show(rt, rn).s);
        if (kind == GM_TOK_SPM) {
            float s = -(float)((double)r + 1.0);
            if (b->scores[res] < s) b->scores[res] = s;  /* the first (lowest-rank) merge that makes it */
        }
    }
    if (kind == GM_TOK_BPE_GEMMA4) {
        d->merges = b->merges;
        d->n_merges = n;
    }
    return GEMMAC_OK;
}

static gemmac_status from_tree(const cJSON *root, const char *name, int kind_hint, const side_info *side,
                               gm_tokenizer **out, gm_error *err) {
    if (!cJSON_IsObject(root)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: the top level is not an object", name);
    const cJSON *model = member(root, "model");
    if (absent(model)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: no model", name);
    if (!cJSON_IsObject(model)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model is %s, not an object", name, kind_name(model));
    const cJSON *mtype = member(model, "type");
    if (!absent(mtype) && !cJSON_IsString(mtype))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.type is %s, not a string", name, kind_name(mtype));
    if (cJSON_IsString(mtype) && strcmp(mtype->valuestring, "BPE") != 0)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                       "%s: model type '%s' is not supported (Gemma's tokenizer.json has a BPE model)", name,
                       show(mtype->valuestring).s);
    const cJSON *vocab = member(model, "vocab"), *merges = member(model, "merges");
    if (absent(mtype) && absent(merges))  /* HF tells untyped models apart by their fields */
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "%s: model has no type and no merges (only BPE is supported)", name);
    if (!cJSON_IsObject(vocab))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.vocab is %s, not an object of token -> id", name,
                       kind_name(vocab));
    if (!absent(merges) && !cJSON_IsArray(merges))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.merges is %s, not an array", name, kind_name(merges));

    /* BPE options that change the algorithm */
    bool byte_fallback = false, ignore_merges = false;
    gemmac_status st;
    if ((st = opt_bool(model, "byte_fallback", name, "model.", &byte_fallback, err)) ||
        (st = opt_bool(model, "ignore_merges", name, "model.", &ignore_merges, err)))
        return st;
    if (ignore_merges) return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "%s: model.ignore_merges = true is not supported", name);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *a = member(model, affixes[i]);
        if (!absent(a) && !(cJSON_IsString(a) && a->valuestring[0] == '\0'))
            return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "%s: model.%s is not supported", name, affixes[i]);
    }
    const cJSON *dropout = member(model, "dropout");
    if (!absent(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "%s: model.dropout is not supported", name);
    const cJSON *unk = member(model, "unk_token");
    if (!absent(unk) && !cJSON_IsString(unk))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.unk_token is %s, not a string", name, kind_name(unk));

    /* normalizer and pre-tokenizer */
    shape sh = {0};
    if ((st = check_normalizer(member(root, "normalizer"), name, &sh, err))) return st;
    const cJSON *pre = member(root, "pre_tokenizer");
    if (!absent(pre) && (st = check_pre_one(pre, name, &sh, err))) return st;

    const cJSON *added = member(root, "added_tokens");
    if (!absent(added) && !cJSON_IsArray(added))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: added_tokens is %s, not an array", name, kind_name(added));

    /* ids: every vocab entry and added token; together they must number 0 .. n-1 */
    size_t n_vocab = (size_t)cJSON_GetArraySize(vocab), n_added = absent(added) ? 0 : (size_t)cJSON_GetArraySize(added);
    if (n_vocab + n_added == 0) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: the vocabulary is empty", name);
    if (n_vocab + n_added > INT32_MAX) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: too many tokens", name);
    const uint32_t cap = (uint32_t)(n_vocab + n_added);
    build_state b = {0};
    b.toks = calloc(cap, sizeof *b.toks);
    b.types = calloc(cap, sizeof *b.types);
    b.scores = calloc(cap, sizeof *b.scores);
    gm_vocab_desc d;
    memset(&d, 0, sizeof d);
    if (!b.toks || !b.types || !b.scores) {
        st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory for %u tokens", name, cap);
        goto done;
    }
    uint32_t n_tokens = 0;
    for (const cJSON *v = vocab->child; v; v = v->next) {
        int64_t id;
        if (!gm_json_int(v, &id)) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.vocab '%s' has %s, not an integer id", name,
                         show(v->string).s, kind_name(v));
            goto done;
        }
        if (id < 0 || id >= (int64_t)cap) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.vocab '%s' has id %lld, outside [0, %u)", name,
                         show(v->string).s, (long long)id, cap);
            goto done;
        }
        if (b.toks[id].ptr) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.vocab gives id %lld to both '%s' and '%s'", name,
                         (long long)id, show(b.toks[id].ptr).s, show(v->string).s);
            goto done;
        }
        b.toks[id] = (gm_str){v->string, strlen(v->string)};
        b.types[id] = GM_TOKTYPE_NORMAL;
        if ((uint32_t)id + 1 > n_tokens) n_tokens = (uint32_t)id + 1;
    }
    size_t idx = 0;
    for (const cJSON *a = absent(added) ? NULL : added->child; a; a = a->next, idx++) {
        const cJSON *jid = member(a, "id"), *content = member(a, "content");
        int64_t id;
        if (!cJSON_IsObject(a) || !cJSON_IsString(content) || !gm_json_int(jid, &id)) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: added_tokens[%zu] needs an integer id and a string content",
                         name, idx);
            goto done;
        }
        if (id < 0 || id >= (int64_t)cap) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: added_tokens[%zu] '%s' has id %lld, outside [0, %u)", name, idx,
                         show(content->valuestring).s, (long long)id, cap);
            goto done;
        }
        if ((st = check_added_flags(a, content->valuestring, idx, name, err))) goto done;
        bool special = false;
        if ((st = opt_bool(a, "special", name, "an added token's ", &special, err))) goto done;
        if (b.toks[id].ptr && strcmp(b.toks[id].ptr, content->valuestring) != 0) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: added_tokens[%zu] '%s' has id %lld, which is already '%s'", name,
                         idx, show(content->valuestring).s, (long long)id, show(b.toks[id].ptr).s);
            goto done;
        }
        b.toks[id] = (gm_str){content->valuestring, strlen(content->valuestring)};
        /* as the GGUF converter: special → control, others (<|channel>, "\n\n") → user-defined */
        b.types[id] = special ? GM_TOKTYPE_CONTROL : GM_TOKTYPE_USER_DEFINED;
        if ((uint32_t)id + 1 > n_tokens) n_tokens = (uint32_t)id + 1;
    }
    for (uint32_t i = 0; i < n_tokens; i++)
        if (!b.toks[i].ptr) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: no token has id %u (ids must run from 0 to %u without gaps)",
                         name, i, n_tokens - 1);
            goto done;
        }
    int64_t dup_a, dup_b;
    if (!table_build(&b.tt, b.toks, n_tokens, &dup_a, &dup_b)) {
        if (dup_a < 0) st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "%s: out of memory", name);
        else
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: duplicate token '%s' at ids %lld and %lld", name,
                         gm_show(b.toks[dup_b].ptr, b.toks[dup_b].len).s, (long long)dup_a, (long long)dup_b);
        goto done;
    }
    /* byte-fallback tokens "<0xHH>" render as their byte (only when the model falls back to bytes) */
    if (byte_fallback)
        for (int v = 0; v < 256; v++) {
            char t[8];
            snprintf(t, sizeof t, "<0x%02X>", v);
            int32_t id = table_find(&b.tt, t, 6);
            if (id >= 0 && b.types[id] == GM_TOKTYPE_NORMAL) b.types[id] = GM_TOKTYPE_BYTE;
        }

    /* which of our tokenizers */
    gm_tok_kind kind;
    if (kind_hint == GM_TOK_SPM || kind_hint == GM_TOK_BPE_GEMMA4) kind = (gm_tok_kind)kind_hint;
    else if (sh.newline_split || table_find(&b.tt, "<|turn>", 7) >= 0 || table_find(&b.tt, "<turn|>", 7) >= 0)
        kind = GM_TOK_BPE_GEMMA4;
    else kind = GM_TOK_SPM;
    if (kind == GM_TOK_SPM && sh.newline_split) {
        st = gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                     "%s: the pre_tokenizer splits newline runs, which the Gemma 3 (SentencePiece) tokenizer does not",
                     name);
        goto done;
    }
    if (kind == GM_TOK_BPE_GEMMA4 && sh.prepend_space) {
        st = gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "%s: a Prepend normalizer is not supported for Gemma 4", name);
        goto done;
    }
    if (kind == GM_TOK_BPE_GEMMA4 && absent(merges)) {
        st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: model.merges is missing", name);
        goto done;
    }
    if (!absent(merges) && (st = read_merges(merges, name, kind, n_tokens, &b, &d, err))) goto done;

    d.kind = kind;
    d.n_tokens = n_tokens;
    d.tokens = b.toks;
    d.token_types = b.types;
    d.scores = kind == GM_TOK_SPM ? b.scores : NULL;
    d.bos = d.eos = d.eot = d.unk = d.pad = -1;
    d.add_space_prefix = sh.prepend_space;
    if (!absent(unk)) {
        if ((st = id_of_text(&b.tt, unk->valuestring, name, "model.unk_token", &d.unk, err))) goto done;
        b.types[d.unk] = GM_TOKTYPE_UNKNOWN;
    }

    /* special ids: the tokenizer config's texts, then generation_config.json's ids, then Gemma's texts */
    if (side->bos[0]) {
        if ((st = id_of_text(&b.tt, side->bos, side->bos_from, "bos_token", &d.bos, err))) goto done;
    } else if (side->gen_bos >= 0) {
        if ((st = gen_id(side->gen_bos, n_tokens, "bos_token_id", &d.bos, err))) goto done;
    } else {
        d.bos = table_find(&b.tt, "<bos>", 5);
    }
    if (side->eos[0]) {
        if ((st = id_of_text(&b.tt, side->eos, side->eos_from, "eos_token", &d.eos, err))) goto done;
    } else if (side->n_gen_eos) {
        if ((st = gen_id(side->gen_eos[0], n_tokens, "eos_token_id", &d.eos, err))) goto done;
    } else {
        d.eos = table_find(&b.tt, "<eos>", 5);
    }
    if (side->pad[0]) {
        if ((st = id_of_text(&b.tt, side->pad, side->pad_from, "pad_token", &d.pad, err))) goto done;
    } else if (side->gen_pad >= 0) {
        if ((st = gen_id(side->gen_pad, n_tokens, "pad_token_id", &d.pad, err))) goto done;
    } else {
        d.pad = table_find(&b.tt, "<pad>", 5);
    }
    d.eot = table_find(&b.tt, "<end_of_turn>", 13);
    if (d.eot < 0) d.eot = table_find(&b.tt, "<turn|>", 7);
    int32_t tool_response = table_find(&b.tt, "<|tool_response>", 16);
    for (size_t i = 0; i < side->n_gen_eos; i++) {
        int32_t id = -1;
        if ((st = gen_id(side->gen_eos[i], n_tokens, "eos_token_id", &id, err))) goto done;
        if (d.eot < 0 && id != d.eos && id != tool_response) d.eot = id;
    }

    /* BOS: llama.cpp always adds it for Gemma 4; SentencePiece vocabularies add it unless told otherwise */
    if (kind == GM_TOK_BPE_GEMMA4) {
        d.add_bos = true;
    } else if (side->add_bos >= 0) {
        d.add_bos = side->add_bos;
    } else {
        int t = template_adds_bos(member(root, "post_processor"), d.bos >= 0 ? b.toks[d.bos].ptr : NULL);
        d.add_bos = t != 0;
    }
    if (d.bos < 0) d.add_bos = false;

    st = gm_tokenizer_new(&d, out, err);
    if (st) prefix_err(st, err, name);
done:
    build_free(&b);
    return st;
}

/* ---------------------------------------------------------------------------------------------------- */
/* entry points                                                                                          */

static gemmac_status from_text(const char *text, size_t len, const char *name, int kind_hint, const side_info *side,
                               gm_tokenizer **out, gm_error *err) {
    if (len > GM_TOKJSON_MAX_BYTES)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s: %zu bytes exceeds the limit of %u bytes for a tokenizer.json",
                       name, len, GM_TOKJSON_MAX_BYTES);
    cJSON *root = NULL;
    gemmac_status st = gm_json_parse(text, len, name, 0, &k_tokjson_limits, &root, NULL, NULL, err);
    if (st) return st;
    st = from_tree(root, name, kind_hint, side, out, err);
    cJSON_Delete(root);
    return st;
}

gemmac_status gm_tokenizer_from_hf_json_text(const char *text, size_t len, const char *name, int kind_hint,
                                             gm_tokenizer **out, gm_error *err) {
    if (out) *out = NULL;
    if (!out || (!text && len)) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tokenizer: NULL argument");
    side_info side;
    side_init(&side);
    return from_text(text ? text : "", len, name ? name : "tokenizer.json", kind_hint, &side, out, err);
}

gemmac_status gm_tokenizer_from_hf_json(const char *path, int kind_hint, gm_tokenizer **out, gm_error *err) {
    if (out) *out = NULL;
    if (!path || !out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tokenizer: NULL argument");
    char dir[4096], file[4200];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
            return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tokenizer: path too long");
        snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    } else {
        if (snprintf(file, sizeof file, "%s", path) >= (int)sizeof dir)
            return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tokenizer: path too long");
        const char *slash = strrchr(path, '/');
        if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash == path ? 1 : slash - path), path);
        else snprintf(dir, sizeof dir, ".");
    }
    side_info side;
    side_init(&side);
    gemmac_status st = read_side_files(dir, &side, err);
    if (st) return st;
    gm_map map;
    if ((st = gm_map_file(file, &map, err))) return st;
    const char *base = strrchr(file, '/');
    st = from_text(map.data, (size_t)map.size, base ? base + 1 : file, kind_hint, &side, out, err);
    gm_map_release(&map);
    return st;
}
