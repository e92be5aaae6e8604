/* spm.c: the SentencePiece-style tokenizer of Gemma 3 / 3n GGUFs (tokenizer.ggml.model "llama"), as
 * llama.cpp's llm_tokenizer_spm_session: spaces → U+2581, split into UTF-8 characters by lead byte, merge
 * the adjacent pair whose concatenation is the highest-scoring token (ties: leftmost) until none is left,
 * then byte fallback <0xHH> for what is not a token. Special tokens are split off before (tokenizer.c). */
#include "tok/tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct spm_sym {
    int32_t prev, next;
    uint32_t off, n;               /* bytes [off, off + n) of the escaped text; n == 0 once merged away */
} spm_sym;

typedef struct spm_bigram {
    float score;
    int32_t left, right;
    uint32_t size;                 /* bytes of both symbols when queued; stale if that changed */
} spm_bigram;

typedef struct spm_heap {
    spm_bigram *v;
    size_t n, cap;
} spm_heap;

/* a is popped before b: higher score first, then the leftmost (llama.cpp's llm_bigram_spm::comparator) */
static bool spm_before(const spm_bigram *a, const spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static bool heap_push(spm_heap *h, spm_bigram x) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        spm_bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return false;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!spm_before(&x, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = x;
    return true;
}

static spm_bigram heap_pop(spm_heap *h) {
    spm_bigram top = h->v[0];
    spm_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && spm_before(&h->v[c + 1], &h->v[c])) c++;
        if (!spm_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static bool try_add_bigram(const gm_tokenizer *t, const char *esc, const spm_sym *syms, int32_t left, int32_t right,
                           spm_heap *h) {
    if (left < 0 || right < 0) return true;
    uint32_t size = syms[left].n + syms[right].n;  /* the two symbols are adjacent in esc */
    int32_t id = gm_tok_lookup(t, esc + syms[left].off, size);
    if (id < 0) return true;
    spm_bigram b = {t->scores[id], left, right, size};
    return heap_push(h, b);
}

static gemmac_status emit_bytes(const gm_tokenizer *t, const char *s, size_t n, gm_tokvec *out) {
    for (size_t j = 0; j < n; j++) {
        /* llama.cpp throws when a byte has no token; we fall back to <unk>, or drop the byte */
        int32_t id = t->byte_token[(uint8_t)s[j]];
        if (id < 0) id = t->unk;
        if (id >= 0 && gm_tokvec_push(out, id)) return GEMMAC_ERR_NO_MEMORY;
    }
    return GEMMAC_OK;
}

gemmac_status gm_spm_tokenize(const gm_tokenizer *t, const char *text, size_t len, bool prefix_space, gm_tokvec *out) {
    size_t esc_len = prefix_space ? 3 : 0, n_chars = 0;
    for (size_t i = 0; i < len; i++) esc_len += text[i] == ' ' ? 3 : 1;
    if (esc_len == 0) return GEMMAC_OK;
    char *esc = malloc(esc_len);
    spm_sym *syms = NULL;
    spm_heap heap = {0};
    gemmac_status st = GEMMAC_OK;
    if (!esc) return GEMMAC_ERR_NO_MEMORY;

    size_t e = 0;
    if (prefix_space) {
        memcpy(esc, "\xe2\x96\x81", 3);
        e = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + e, "\xe2\x96\x81", 3);
            e += 3;
        } else {
            esc[e++] = text[i];
        }
    }

    /* one symbol per UTF-8 character, as announced by its lead byte (cut short at the end) */
    for (size_t off = 0; off < esc_len; n_chars++) off += gm_utf8_len((uint8_t)esc[off]);
    syms = malloc(n_chars * sizeof *syms);
    if (!syms) {
        st = GEMMAC_ERR_NO_MEMORY;
        goto done;
    }
    n_chars = 0;
    for (size_t off = 0; off < esc_len;) {
        size_t n = gm_utf8_len((uint8_t)esc[off]);
        if (n > esc_len - off) n = esc_len - off;
        syms[n_chars] = (spm_sym){(int32_t)n_chars - 1, off + n == esc_len ? -1 : (int32_t)n_chars + 1,
                                  (uint32_t)off, (uint32_t)n};
        n_chars++;
        off += n;
    }

    for (size_t i = 1; i < n_chars; i++) {
        if (!try_add_bigram(t, esc, syms, (int32_t)i - 1, (int32_t)i, &heap)) {
            st = GEMMAC_ERR_NO_MEMORY;
            goto done;
        }
    }
    while (heap.n) {
        spm_bigram b = heap_pop(&heap);
        spm_sym *l = &syms[b.left], *r = &syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;  /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = b.left;
        if (!try_add_bigram(t, esc, syms, l->prev, b.left, &heap) ||
            !try_add_bigram(t, esc, syms, b.left, l->next, &heap)) {
            st = GEMMAC_ERR_NO_MEMORY;
            goto done;
        }
    }

    /* every merged symbol is a token; what is left unmerged and unknown becomes bytes (llama.cpp's
     * resegment: its rev_merge branch cannot be reached, since only token texts are recorded there) */
    for (int32_t i = 0; i != -1; i = syms[i].next) {
        const char *s = esc + syms[i].off;
        int32_t id = gm_tok_lookup(t, s, syms[i].n);
        if (id >= 0) {
            if (gm_tokvec_push(out, id)) {
                st = GEMMAC_ERR_NO_MEMORY;
                goto done;
            }
        } else if ((st = emit_bytes(t, s, syms[i].n, out))) {
            goto done;
        }
    }
done:
    free(esc);
    free(syms);
    free(heap.v);
    return st;
}
