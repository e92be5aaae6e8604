/* bpe.c: the Gemma 4 tokenizer (tokenizer.ggml.model "gemma4"), as llama.cpp's llm_tokenizer_bpe_session
 * with LLAMA_VOCAB_PRE_TYPE_GEMMA4: spaces → U+2581, the text decoded to code points and re-encoded
 * (invalid UTF-8 becomes U+FFFD, as llama.cpp's unicode_regex_split does), split into runs of newlines and
 * runs of everything else ([^\n]+|[\n]+), merges by rank over UTF-8 characters, byte fallback <0xHH>. */
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

/* ---- merge queue ---- */

typedef struct bpe_sym {
    int32_t prev, next;
    uint32_t off, n;               /* bytes [off, off + n) of the normalised text; n == 0 once merged away */
} bpe_sym;

typedef struct bpe_bigram {
    int64_t rank;
    int32_t left, right;
    uint32_t size;
} bpe_bigram;

typedef struct bpe_heap {
    bpe_bigram *v;
    size_t n, cap;
} bpe_heap;

/* a is popped before b: lower rank first, then the leftmost (llama.cpp's llm_bigram_bpe::comparator) */
static bool bpe_before(const bpe_bigram *a, const bpe_bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static bool heap_push(bpe_heap *h, bpe_bigram x) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        bpe_bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return false;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bpe_before(&x, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = x;
    return true;
}

static bpe_bigram heap_pop(bpe_heap *h) {
    bpe_bigram top = h->v[0];
    bpe_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bpe_before(&h->v[c + 1], &h->v[c])) c++;
        if (!bpe_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static bool add_bigram(const gm_tokenizer *t, const char *s, const bpe_sym *syms, int32_t left, int32_t right,
                       bpe_heap *h) {
    if (left < 0 || right < 0) return true;
    const bpe_sym *l = &syms[left], *r = &syms[right];
    int64_t rank = gm_tok_merge_rank(t, s + l->off, l->n, s + r->off, r->n);
    if (rank < 0) return true;
    bpe_bigram b = {rank, left, right, l->n + r->n};
    return heap_push(h, b);
}

static gemmac_status emit_symbol(const gm_tokenizer *t, const char *s, size_t n, gm_tokvec *out) {
    int32_t id = gm_tok_lookup(t, s, n);
    if (id >= 0) return gm_tokvec_push(out, id);
    for (size_t j = 0; j < n; j++) {  /* byte fallback; a byte without a token is dropped, as llama.cpp */
        int32_t b = t->byte_token[(uint8_t)s[j]];
        if (b >= 0 && gm_tokvec_push(out, b)) return GEMMAC_ERR_NO_MEMORY;
    }
    return GEMMAC_OK;
}

/* Tokenizes one word (a run of newlines or a run without any) of the normalised text s[0, n). */
static gemmac_status bpe_word(const gm_tokenizer *t, const char *s, size_t n, bpe_sym *syms, bpe_heap *heap,
                              gm_tokvec *out) {
    if (s[0] == '\n') {  /* llama.cpp PR 21343: a newline run that is a token is emitted whole */
        int32_t id = gm_tok_lookup(t, s, n);
        if (id >= 0) return gm_tokvec_push(out, id);
    }
    int32_t n_sym = 0;
    for (size_t off = 0; off < n;) {
        size_t len = gm_utf8_len((uint8_t)s[off]);
        if (len > n - off) len = n - off;
        syms[n_sym] = (bpe_sym){n_sym - 1, off + len == n ? -1 : n_sym + 1, (uint32_t)off, (uint32_t)len};
        n_sym++;
        off += len;
    }
    heap->n = 0;
    for (int32_t i = 1; i < n_sym; i++)
        if (!add_bigram(t, s, syms, i - 1, i, heap)) return GEMMAC_ERR_NO_MEMORY;
    while (heap->n) {
        bpe_bigram b = heap_pop(heap);
        bpe_sym *l = &syms[b.left], *r = &syms[b.right];
        /* llama.cpp compares texts; the left start never moves and the pair is adjacent, so sizes suffice */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = b.left;
        if (!add_bigram(t, s, syms, l->prev, b.left, heap) || !add_bigram(t, s, syms, b.left, l->next, heap))
            return GEMMAC_ERR_NO_MEMORY;
    }
    for (int32_t i = 0; i != -1; i = syms[i].next) {
        gemmac_status st = emit_symbol(t, s + syms[i].off, syms[i].n, out);
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
    bpe_heap heap = {0};
    gemmac_status st = GEMMAC_OK;
    if (!norm || !syms) {
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
        if ((st = bpe_word(t, s + w, e - w, syms, &heap, out))) goto done;
        w = e;
    }
done:
    free(norm);
    free(syms);
    free(heap.v);
    return st;
}
