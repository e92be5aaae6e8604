/* bpe.c: Gemma 4's tokenizer ("gemma4"), as llama.cpp's bpe session with PRE_TYPE_GEMMA4: spaces → U+2581,
 * decode/re-encode (invalid UTF-8 → U+FFFD), split into newline runs and the rest ([^\n]+|[\n]+), merges by
 * rank over UTF-8 characters, byte fallback <0xHH>. Special tokens are split off before, in tokenizer.c. */
#include "tok/tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 normalisation exactly as llama.cpp's unicode_cpt_from_utf8 / unicode_cpt_to_utf8 ---- */

/* Decodes one code point at s[*i] (llama.cpp's rules: lead bits only, overlongs and surrogates accepted);
 * returns 0xFFFD and advances one byte on an invalid sequence. */
static uint32_t llama_decode(const uint8_t *s, size_t n, size_t *i) {
    size_t o = *i;
    uint8_t c = s[o];
    if (!(c & 0x80)) {
        *i = o + 1;
        return c;
    }
    if ((c & 0x40) && !(c & 0x20)) {
        if (o + 1 < n && (s[o + 1] & 0xc0) == 0x80) {
            *i = o + 2;
            return ((uint32_t)(c & 0x1f) << 6) | (s[o + 1] & 0x3f);
        }
    } else if ((c & 0x40) && !(c & 0x10)) {
        if (o + 2 < n && (s[o + 1] & 0xc0) == 0x80 && (s[o + 2] & 0xc0) == 0x80) {
            *i = o + 3;
            return ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[o + 1] & 0x3f) << 6) | (s[o + 2] & 0x3f);
        }
    } else if ((c & 0x40) && !(c & 0x08)) {
        if (o + 3 < n && (s[o + 1] & 0xc0) == 0x80 && (s[o + 2] & 0xc0) == 0x80 && (s[o + 3] & 0xc0) == 0x80) {
            *i = o + 4;
            return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[o + 1] & 0x3f) << 12) |
                   ((uint32_t)(s[o + 2] & 0x3f) << 6) | (s[o + 3] & 0x3f);
        }
    }
    *i = o + 1;
    return 0xFFFD;
}

static size_t utf8_encode(uint32_t cp, uint8_t *d) {
    if (cp > 0x10FFFF) cp = 0xFFFD;  /* llama.cpp throws here (F4..F7 leads); we substitute */
    if (cp <= 0x7f) {
        d[0] = (uint8_t)cp;
        return 1;
    }
    if (cp <= 0x7ff) {
        d[0] = (uint8_t)(0xc0 | (cp >> 6));
        d[1] = (uint8_t)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp <= 0xffff) {
        d[0] = (uint8_t)(0xe0 | (cp >> 12));
        d[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        d[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    d[0] = (uint8_t)(0xf0 | (cp >> 18));
    d[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
    d[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
    d[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

/* ---- merges ---- */

typedef struct bpe_sym {
    int32_t prev, next;
    uint32_t off, n;               /* bytes [off, off + n) of the normalised text; n == 0 once merged away */
    int32_t id;                    /* the token with exactly this text, or -1 */
} bpe_sym;

/* Merge rank of the pair (i, j), by token ids when both halves are tokens (a merge whose halves are tokens
 * is only ever matched by those tokens), else by text; *result gets the merged symbol's token. */
static int64_t pair_rank(const gm_tokenizer *t, const char *s, const bpe_sym *syms, int32_t i, int32_t j,
                         int32_t *result) {
    if (syms[i].id >= 0 && syms[j].id >= 0) return gm_tok_merge_ids(t, syms[i].id, syms[j].id, result);
    int64_t rank = gm_tok_merge_rank(t, s + syms[i].off, syms[i].n, s + syms[j].off, syms[j].n);
    if (rank >= 0) *result = gm_tok_lookup(t, s + syms[i].off, (size_t)syms[i].n + syms[j].n);
    return rank;
}

/* The key of the pair (i, next of i): its merge rank (lower first), or empty when it has none. */
static uint64_t pair_key(const gm_tokenizer *t, const char *s, const bpe_sym *syms, int32_t i) {
    int32_t r = syms[i].next, result;
    if (r < 0) return GM_MT_EMPTY;
    int64_t rank = pair_rank(t, s, syms, i, r, &result);
    if (rank < 0) return GM_MT_EMPTY;
    return (uint64_t)rank << 32 | (uint32_t)i;
}

static gemmac_status emit_bytes(const gm_tokenizer *t, const char *s, size_t n, gm_tokvec *out) {
    for (size_t j = 0; j < n; j++) {  /* byte fallback; a byte without a token is dropped, as llama.cpp */
        int32_t b = t->byte_token[(uint8_t)s[j]];
        if (b >= 0 && gm_tokvec_push(out, b)) return GEMMAC_ERR_NO_MEMORY;
    }
    return GEMMAC_OK;
}

/* Tokenizes one word (a run of newlines or a run without any) of the normalised text s[0, n). */
static gemmac_status bpe_word(const gm_tokenizer *t, const char *s, size_t n, bpe_sym *syms, gm_mintree *tree,
                              gm_tokvec *out) {
    if (s[0] == '\n') {  /* llama.cpp PR 21343: a newline run that is a token is emitted whole */
        int32_t id = gm_tok_lookup(t, s, n);
        if (id >= 0) return gm_tokvec_push(out, id);
    }
    int32_t n_sym = 0;
    for (size_t off = 0; off < n;) {
        size_t len = gm_utf8_len((uint8_t)s[off]);
        if (len > n - off) len = n - off;
        syms[n_sym] = (bpe_sym){n_sym - 1, off + len == n ? -1 : n_sym + 1, (uint32_t)off, (uint32_t)len,
                                gm_tok_lookup(t, s + off, len)};
        n_sym++;
        off += len;
    }
    tree->base = 1;
    while (tree->base < (size_t)n_sym) tree->base <<= 1;
    for (size_t i = 0; i < 2 * tree->base; i++) tree->v[i] = GM_MT_EMPTY;
    for (int32_t i = 0; i < n_sym; i++) tree->v[tree->base + (size_t)i] = pair_key(t, s, syms, i);
    gm_mt_build(tree);
    while (tree->v[1] != GM_MT_EMPTY) {  /* merge the best pair: right symbol into the left one */
        int32_t l = (int32_t)(uint32_t)tree->v[1], r = syms[l].next, merged = -1;
        pair_rank(t, s, syms, l, r, &merged);
        syms[l].id = merged;
        syms[l].n += syms[r].n;
        syms[r].n = 0;
        syms[l].next = syms[r].next;
        if (syms[r].next >= 0) syms[syms[r].next].prev = l;
        gm_mt_set(tree, (size_t)r, GM_MT_EMPTY);
        gm_mt_set(tree, (size_t)l, pair_key(t, s, syms, l));
        if (syms[l].prev >= 0) gm_mt_set(tree, (size_t)syms[l].prev, pair_key(t, s, syms, syms[l].prev));
    }
    for (int32_t i = 0; i != -1; i = syms[i].next) {
        gemmac_status st = syms[i].id >= 0 ? gm_tokvec_push(out, syms[i].id)
                                           : emit_bytes(t, s + syms[i].off, syms[i].n, out);
        if (st) return st;
    }
    return GEMMAC_OK;
}

gemmac_status gm_bpe_tokenize(const gm_tokenizer *t, const char *text, size_t len, gm_tokvec *out) {
    /* llama.cpp replaces spaces by ▁ and then decodes; a space, like ▁'s lead byte, is never a continuation
     * byte, so decoding the raw text and mapping U+0020 → U+2581 gives the same code points. */
    const uint8_t *raw = (const uint8_t *)text;
    size_t norm_len = 0, n_cps = 0;
    uint8_t tmp[4];
    for (size_t i = 0; i < len; n_cps++) {
        uint32_t cp = llama_decode(raw, len, &i);
        norm_len += utf8_encode(cp == ' ' ? 0x2581 : cp, tmp);
    }
    if (norm_len == 0) return GEMMAC_OK;
    uint8_t *norm = malloc(norm_len);
    bpe_sym *syms = malloc(n_cps * sizeof *syms);
    gm_mintree tree = {0};
    gemmac_status st = GEMMAC_OK;
    if (!norm || !syms || !gm_mt_init(&tree, n_cps)) {  /* sized for the longest possible word */
        st = GEMMAC_ERR_NO_MEMORY;
        goto done;
    }
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp = llama_decode(raw, len, &i);
        o += utf8_encode(cp == ' ' ? 0x2581 : cp, norm + o);
    }
    const char *s = (const char *)norm;
    for (size_t w = 0; w < norm_len;) {
        bool nl = s[w] == '\n';
        size_t e = w + 1;
        while (e < norm_len && (s[e] == '\n') == nl) e++;
        if ((st = bpe_word(t, s + w, e - w, syms, &tree, out))) goto done;
        w = e;
    }
done:
    free(norm);
    free(syms);
    free(tree.v);
    return st;
}
