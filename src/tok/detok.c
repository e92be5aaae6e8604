/* detok.c: the streaming detokenizer: concatenates token pieces and emits only whole, valid UTF-8; an
 * incomplete trailing sequence (a character split over byte tokens) waits for the next token, invalid
 * bytes become U+FFFD (one per maximal invalid subpart). Pieces come from tokenizer.c. */
#include "tok/tok_internal.h"

#include <stdlib.h>
#include <string.h>

struct gm_detok {
    const gm_tokenizer *t;
    uint8_t pending[4];            /* a valid but incomplete prefix of one sequence (at most 3 bytes) */
    size_t n_pending;
};

gm_detok *gm_detok_new(const gm_tokenizer *t) {
    if (!t) return NULL;
    gm_detok *d = calloc(1, sizeof *d);
    if (d) d->t = t;
    return d;
}

void gm_detok_free(gm_detok *d) { free(d); }

/* The concatenation pending + piece, read by index. */
typedef struct stream {
    const uint8_t *a;
    size_t na;
    const uint8_t *b;
    size_t nb;
} stream;

static uint8_t at(const stream *s, size_t i) { return i < s->na ? s->a[i] : s->b[i - s->na]; }

/* How many continuation bytes a lead byte needs and the range of the first one; 0 when c cannot lead. */
static int lead_info(uint8_t c, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) return 1;
    if (c == 0xE0) { *lo = 0xA0; return 2; }
    if (c == 0xED) { *hi = 0x9F; return 2; }
    if (c >= 0xE1 && c <= 0xEF) return 2;
    if (c == 0xF0) { *lo = 0x90; return 3; }
    if (c == 0xF4) { *hi = 0x8F; return 3; }
    if (c >= 0xF1 && c <= 0xF3) return 3;
    return 0;
}

static void put(uint8_t *out, size_t *n, const void *src, size_t len) {
    if (out) memcpy(out + *n, src, len);
    *n += len;
}

/* Decodes the stream: writes (or, with out == NULL, only counts) the complete text; the incomplete tail is
 * copied to tail (at most 3 bytes). Returns the output length. */
static size_t decode(const stream *s, uint8_t *out, uint8_t *tail, size_t *n_tail) {
    size_t n = s->na + s->nb, o = 0, i = 0;
    *n_tail = 0;
    while (i < n) {
        uint8_t c = at(s, i), lo, hi;
        if (c < 0x80) {
            put(out, &o, &c, 1);
            i++;
            continue;
        }
        int need = lead_info(c, &lo, &hi);
        if (need == 0) {
            put(out, &o, "\xEF\xBF\xBD", 3);
            i++;
            continue;
        }
        int k = 1;
        bool bad = false;
        for (; k <= need; k++) {
            if (i + (size_t)k >= n) break;  /* ran out: incomplete so far */
            uint8_t x = at(s, i + (size_t)k);
            if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) {
                bad = true;
                break;
            }
        }
        if (bad) {  /* bytes i .. i+k-1 are a maximal invalid subpart */
            put(out, &o, "\xEF\xBF\xBD", 3);
            i += (size_t)k;
        } else if (k <= need) {  /* valid prefix cut by the end of the stream */
            for (size_t j = i; j < n; j++) tail[(*n_tail)++] = at(s, j);
            break;
        } else {
            for (int j = 0; j <= need; j++) {
                uint8_t x = at(s, i + (size_t)j);
                put(out, &o, &x, 1);
            }
            i += (size_t)need + 1;
        }
    }
    return o;
}

gemmac_status gm_detok_push(gm_detok *d, gemmac_token id, char *out, size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!d || !n_out || (cap && !out)) return GEMMAC_ERR_INVALID_ARG;
    size_t plen;
    const char *piece = gm_token_piece(d->t, id, &plen);
    if (!piece) return GEMMAC_ERR_INVALID_ARG;
    stream s = {d->pending, d->n_pending, (const uint8_t *)piece, plen};
    uint8_t tail[4];
    size_t n_tail;
    size_t need = decode(&s, NULL, tail, &n_tail);
    *n_out = need;
    if (cap < need + 1) return GEMMAC_ERR_BUFFER_TOO_SMALL;
    decode(&s, (uint8_t *)out, tail, &n_tail);
    out[need] = '\0';
    memcpy(d->pending, tail, n_tail);
    d->n_pending = n_tail;
    return GEMMAC_OK;
}

gemmac_status gm_detok_flush(gm_detok *d, char *out, size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!d || !n_out || (cap && !out)) return GEMMAC_ERR_INVALID_ARG;
    size_t need = d->n_pending ? 3 : 0;
    *n_out = need;
    if (cap < need + 1) return GEMMAC_ERR_BUFFER_TOO_SMALL;
    memcpy(out, "\xEF\xBF\xBD", need);
    out[need] = '\0';
    d->n_pending = 0;
    return GEMMAC_OK;
}
