/* spm.c: Gemma 3/3n's SentencePiece-style tokenizer ("llama"), as llama.cpp's llm_tokenizer_spm_session:
 * spaces → U+2581, characters by lead byte, merge the pair spelling the highest-scoring token (leftmost on
 * ties) until none is left, byte fallback <0xHH>. Special tokens are split off before, in tokenizer.c. */
#include "tok/tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct spm_sym {
    int32_t prev, next;
    uint32_t off, n;               /* bytes [off, off + n) of the escaped text; n == 0 once merged away */
} spm_sym;

/* Orders scores so that a higher score gives a smaller key (llama.cpp pops the highest score first);
 * -0 is 0 as for ==. */
static uint32_t score_key(float f) {
    if (f == 0.0f) f = 0.0f;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  /* ascending with the float */
    return ~u;
}

/* The key of the pair (i, next of i): the score of the token their concatenation spells (they are
 * adjacent in esc), or empty when there is no such token. */
static uint64_t pair_key(const gm_tokenizer *t, const char *esc, const spm_sym *syms, int32_t i) {
    int32_t r = syms[i].next;
    if (r < 0) return GM_MT_EMPTY;
    int32_t id = gm_tok_lookup(t, esc + syms[i].off, (size_t)syms[i].n + syms[r].n);
    if (id < 0) return GM_MT_EMPTY;
    return (uint64_t)score_key(t->scores[id]) << 32 | (uint32_t)i;
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
    gm_mintree tree = {0};
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

    if (!gm_mt_init(&tree, n_chars)) {
        st = GEMMAC_ERR_NO_MEMORY;
        goto done;
    }
    for (size_t i = 0; i < n_chars; i++) tree.v[tree.base + i] = pair_key(t, esc, syms, (int32_t)i);
    gm_mt_build(&tree);
    while (tree.v[1] != GM_MT_EMPTY) {  /* merge the best pair: right symbol into the left one */
        int32_t l = (int32_t)(uint32_t)tree.v[1], r = syms[l].next;
        syms[l].n += syms[r].n;
        syms[r].n = 0;
        syms[l].next = syms[r].next;
        if (syms[r].next >= 0) syms[syms[r].next].prev = l;
        gm_mt_set(&tree, (size_t)r, GM_MT_EMPTY);
        gm_mt_set(&tree, (size_t)l, pair_key(t, esc, syms, l));
        if (syms[l].prev >= 0) gm_mt_set(&tree, (size_t)syms[l].prev, pair_key(t, esc, syms, syms[l].prev));
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
    free(tree.v);
    return st;
}
