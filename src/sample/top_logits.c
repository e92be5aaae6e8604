/* top_logits.c: the host selection of a row's k best logits (top_logits.h): one pass with a k-entry heap whose
 * root is the worst kept candidate, then the heap sorted. O(n_vocab log k); ~1 ms for Gemma's 262144 logits. */
#include "sample/top_logits.h"

typedef struct cand {
    float v;
    int32_t id;
} cand;

/* a comes before b: the higher value, then the lower id. */
static inline int before(cand a, cand b) { return a.v > b.v || (a.v == b.v && a.id < b.id); }

/* Min-heap by `before`: every parent comes after its children (the root is the worst kept). */
static void sift_down(cand *h, int32_t n, int32_t i) {
    for (;;) {
        const int32_t l = 2 * i + 1;
        if (l >= n) return;
        const int32_t c = l + 1 < n && before(h[l], h[l + 1]) ? l + 1 : l; /* the later child */
        if (!before(h[i], h[c])) return;
        const cand t = h[i];
        h[i] = h[c], h[c] = t;
        i = c;
    }
}

void gm_top_logits_row(const float *row, int32_t n_vocab, int32_t k, int32_t *ids, float *vals) {
    cand h[GM_TOP_LOGITS_MAX];
    if (k > GM_TOP_LOGITS_MAX) k = GM_TOP_LOGITS_MAX;
    if (k > n_vocab) k = n_vocab;
    if (k < 1) return;
    for (int32_t i = 0; i < k; i++) h[i] = (cand){gm_logit_read(row[i]), i};
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i);
    for (int32_t i = k; i < n_vocab; i++) {
        const cand c = {gm_logit_read(row[i]), i};
        if (before(c, h[0])) {
            h[0] = c;
            sift_down(h, k, 0);
        }
    }
    /* heap sort: the worst to the back, one at a time */
    for (int32_t n = k; n > 1; n--) {
        const cand t = h[0];
        h[0] = h[n - 1], h[n - 1] = t;
        sift_down(h, n - 1, 0);
    }
    for (int32_t i = 0; i < k; i++) ids[i] = h[i].id, vals[i] = h[i].v;
}
