/* sampler.c: the token sampler behind gemmac_sampler_*: penalty history, the llama.cpp filter chain
 * (penalties -> top-k -> top-p -> min-p -> temperature -> draw) and its seeded PCG32 generator.
 * Leaves producing logits to the model, and grammar or stop-word handling to its callers.
 *
 * Semantics (llama.cpp's common sampler with min_keep = 1; src/llama-sampling.cpp):
 *   - NaN logits read as -inf, +inf as FLT_MAX (so softmax stays defined). Candidates are ordered by
 *     (logit desc, id asc); every tie in this file is broken by that order.
 *   - penalties, for a token seen count > 0 times among the last repeat_last_n accepted tokens (-1: all
 *     since reset, 0: off): logit > 0 ? logit / repeat : logit * repeat, then
 *     logit -= count * frequency + presence. Skipped when neutral (1, 0, 0).
 *   - top-k: k <= 0 or k >= n_vocab keeps all; else the k best.
 *   - top-p (p < 1): the shortest prefix, by the order above, whose cumulative softmax probability
 *     (over the top-k survivors, temperature 1) reaches p; at least one token.
 *   - min-p (p > 0): keeps logit >= max_logit + logf(min_p), i.e. prob >= min_p * p_max; the best
 *     token always stays. Computed in logit space, as llama.cpp does.
 *   - temperature: survivors weigh expf((logit - max) / temp); temp <= 0 is the greedy argmax of
 *     the penalised logits (the filters can never remove it).
 *   - the draw: u in [0, 1) from PCG32, first survivor whose running weight exceeds u * sum.
 *   - every logit -inf (or NaN): the lowest id among the survivors, so token 0 for an all -inf row.
 *
 * From a row's best logits only (gemmac_sampler_sample_top, fed by gemmac_ctx_top_logits): the same chain over
 * the candidates, sorted by the order above and cut to top-k, then the same top-p / min-p, weights and draw code
 * as the whole row's. gemmac_sampler_top_exact says when that is the whole row's result, token and generator both
 * (the argument is at the function).
 *
 * Speed (n_vocab = 262144, once per token; bench/bench_sampler.c): top-k (k <= GM_HEAP_MAX_K) and
 * greedy read the row once, in 64-logit blocks whose vectorised max is checked against the running
 * threshold first, keeping a k-element heap and never copying the row; penalised tokens are fed in
 * afterwards. Without top-k the row is copied once, and top-p / min-p sort only the candidates above
 * a threshold that widens until the prefix ends inside it (llama.cpp's bucket pre-filter, simpler). */
#include "sample/sampler_internal.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Largest k served by the heap; above it the row is copied and partitioned by quickselect. */
#define GM_HEAP_MAX_K 4096
/* PCG32 stream used for every sampler: seed s runs pcg32_srandom_r(s, GM_PCG_STREAM). */
#define GM_PCG_STREAM 54u
/* First window (logit units below the max) that top-p sorts without top-k; doubles until it fits. */
#define GM_TOP_P_FIRST_WINDOW 8.0f
/* ... up to this one, after which everything left is taken: expf(-104) is already 0 in float. */
#define GM_TOP_P_LAST_WINDOW 128.0f

/* ==== PCG32 ==== */

uint32_t gm_pcg32_next(gm_pcg32 *rng) {
    uint64_t old = rng->state;
    rng->state = old * 6364136223846793005ULL + rng->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
}

void gm_pcg32_seed(gm_pcg32 *rng, uint64_t initstate, uint64_t initseq) {
    rng->state = 0;
    rng->inc = (initseq << 1u) | 1u;
    gm_pcg32_next(rng);
    rng->state += initstate;
    gm_pcg32_next(rng);
}

double gm_pcg32_unit(gm_pcg32 *rng) {
    uint64_t hi = gm_pcg32_next(rng) >> 5;    /* 27 bits */
    uint64_t lo = gm_pcg32_next(rng) >> 6;    /* 26 bits */
    return (double)((hi << 26) | lo) * (1.0 / 9007199254740992.0);   /* / 2^53 */
}

/* ==== The handle ==== */

typedef struct gm_cand {
    float logit;
    int32_t id;
} gm_cand;

struct gemmac_sampler {
    gemmac_sampler_params params;
    int32_t n_vocab;
    bool penalize;                   /* false when the penalties are neutral or repeat_last_n == 0 */
    uint64_t seed;                   /* the seed in use (the clock's for GEMMAC_SEED_RANDOM) */
    gm_pcg32 rng;

    /* penalty history (only when penalize) */
    int32_t *count;                  /* [n_vocab] occurrences of each token in the window */
    int32_t *where;                  /* [n_vocab] index in present[] of a token with count > 0 */
    int32_t *present;                /* [n_present] distinct tokens with count > 0 */
    int32_t n_present;
    gemmac_token *ring;              /* [ring_cap] the window, oldest at ring_head (repeat_last_n > 0) */
    int32_t ring_cap, ring_len, ring_head;
    bool ring_fixed;                 /* growth failed: the window stays ring_cap tokens long */

    /* scratch for one call */
    gm_cand *cand;                   /* [n_vocab] candidates */
    float *w;                        /* [n_vocab] draw weights */
};

gemmac_sampler_params gemmac_sampler_default_params(void) {
    gemmac_sampler_params p = {
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .seed = GEMMAC_SEED_RANDOM,
    };
    return p;
}

static bool params_valid(const gemmac_sampler_params *p) {
    if (!isfinite(p->temp) || !isfinite(p->repeat_penalty) || !isfinite(p->presence_penalty) ||
        !isfinite(p->frequency_penalty))
        return false;
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f)) return false;     /* also rejects NaN */
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return false;
    if (!(p->repeat_penalty > 0.0f)) return false;
    if (p->repeat_last_n < -1) return false;
    return true;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* A seed from the wall clock (ns) mixed with the handle's address, so two samplers made in the same
 * nanosecond still differ. */
static uint64_t clock_seed(const void *salt) {
    struct timespec ts = {0};
    timespec_get(&ts, TIME_UTC);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    return splitmix64(x ^ splitmix64((uint64_t)(uintptr_t)salt));
}

static void reseed(gemmac_sampler *s) {
    s->seed = s->params.seed == GEMMAC_SEED_RANDOM ? clock_seed(s) : s->params.seed;
    gm_pcg32_seed(&s->rng, s->seed, GM_PCG_STREAM);
}

gemmac_sampler *gemmac_sampler_new(const gemmac_sampler_params *params, int32_t n_vocab) {
    if (!params || n_vocab <= 0 || !params_valid(params)) return NULL;
    gemmac_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->params = *params;
    s->n_vocab = n_vocab;
    s->penalize = params->repeat_last_n != 0 &&
                  (params->repeat_penalty != 1.0f || params->frequency_penalty != 0.0f ||
                   params->presence_penalty != 0.0f);
    size_t n = (size_t)n_vocab;
    s->cand = malloc(n * sizeof *s->cand);
    s->w = malloc(n * sizeof *s->w);
    if (!s->cand || !s->w) goto fail;
    if (s->penalize) {
        s->count = calloc(n, sizeof *s->count);
        s->where = malloc(n * sizeof *s->where);
        s->present = malloc(n * sizeof *s->present);
        if (!s->count || !s->where || !s->present) goto fail;
        if (params->repeat_last_n > 0) {
            /* The window grows on demand up to repeat_last_n, so a huge one costs nothing up front. */
            s->ring_cap = params->repeat_last_n < 256 ? params->repeat_last_n : 256;
            s->ring = malloc((size_t)s->ring_cap * sizeof *s->ring);
            if (!s->ring) goto fail;
        }
    }
    reseed(s);
    return s;
fail:
    gemmac_sampler_free(s);
    return NULL;
}

void gemmac_sampler_free(gemmac_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->w);
    free(s->count);
    free(s->where);
    free(s->present);
    free(s->ring);
    free(s);
}

uint64_t gm_sampler_seed(const gemmac_sampler *s) {
    return s ? s->seed : 0;
}

uint64_t gm_sampler_rng_state(const gemmac_sampler *s) {
    return s ? s->rng.state : 0;
}

/* ==== Penalty history ==== */

static void count_up(gemmac_sampler *s, gemmac_token t) {
    if (s->count[t] == INT32_MAX) return;      /* saturates (repeat_last_n == -1 only) */
    if (s->count[t]++ == 0) {
        s->where[t] = s->n_present;
        s->present[s->n_present++] = t;
    }
}

static void count_down(gemmac_sampler *s, gemmac_token t) {
    if (--s->count[t] == 0) {
        int32_t i = s->where[t];
        gemmac_token last = s->present[--s->n_present];
        s->present[i] = last;
        s->where[last] = i;
    }
}

/* Tokens outside [0, n_vocab) are ignored: they have no logit to penalise. */
void gemmac_sampler_accept(gemmac_sampler *s, gemmac_token token) {
    if (!s || !s->penalize || token < 0 || token >= s->n_vocab) return;
    int32_t last_n = s->params.repeat_last_n;
    if (last_n > 0) {
        if (s->ring_len == s->ring_cap && s->ring_cap < last_n && !s->ring_fixed) {
            /* Still filling, so ring_head == 0 and the layout is linear: realloc keeps it. */
            int32_t cap = s->ring_cap <= last_n / 2 ? s->ring_cap * 2 : last_n;
            gemmac_token *r = realloc(s->ring, (size_t)cap * sizeof *r);
            if (r) {
                s->ring = r;
                s->ring_cap = cap;
            } else {
                s->ring_fixed = true;          /* out of memory: the window stops growing */
            }
        }
        if (s->ring_len < s->ring_cap) {
            s->ring[(s->ring_head + s->ring_len) % s->ring_cap] = token;
            s->ring_len++;
        } else {
            count_down(s, s->ring[s->ring_head]);
            s->ring[s->ring_head] = token;
            s->ring_head = (s->ring_head + 1) % s->ring_cap;
        }
    }
    count_up(s, token);
}

/* Forgets the history and re-seeds the generator (a fixed seed replays the same sequence; the random
 * seed draws a new one from the clock). */
void gemmac_sampler_reset(gemmac_sampler *s) {
    if (!s) return;
    if (s->penalize) {
        for (int32_t i = 0; i < s->n_present; i++) s->count[s->present[i]] = 0;
        s->n_present = 0;
        s->ring_len = 0;
        s->ring_head = 0;
    }
    reseed(s);
}

/* ==== Candidate order and the sorts over it ==== */

static inline float sanitize(float v) {
    if (v != v) return -INFINITY;
    return v > FLT_MAX ? FLT_MAX : v;
}

/* The logit of token t after the repetition, frequency and presence penalties (count > 0). */
static float penalised(const gemmac_sampler *s, float v, int32_t count) {
    v = sanitize(v);
    if (v <= 0.0f) v *= s->params.repeat_penalty;
    else v /= s->params.repeat_penalty;
    v -= (float)count * s->params.frequency_penalty + s->params.presence_penalty;
    return sanitize(v);
}

/* a comes before b: higher logit, then lower id. A strict total order (ids are unique). */
static inline bool better(gm_cand a, gm_cand b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

static inline void swap_cand(gm_cand *a, gm_cand *b) {
    gm_cand t = *a;
    *a = *b;
    *b = t;
}

/* Heaps here keep the worst candidate at the root: every parent is worse than its children. */
static void sift_down(gm_cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1;
        if (l >= n) return;
        int32_t c = (l + 1 < n && better(h[l], h[l + 1])) ? l + 1 : l;   /* the worse child */
        if (!better(h[i], h[c])) return;
        swap_cand(&h[i], &h[c]);
        i = c;
    }
}

static void sift_up(gm_cand *h, int32_t i) {
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!better(h[p], h[i])) return;
        swap_cand(&h[p], &h[i]);
        i = p;
    }
}

static void heapify(gm_cand *h, int32_t n) {
    for (int32_t i = n / 2 - 1; i >= 0; i--) sift_down(h, n, i);
}

/* Sorts best first: the worst goes to the end each round. */
static void heap_sort(gm_cand *c, int32_t n) {
    heapify(c, n);
    for (int32_t end = n - 1; end > 0; end--) {
        swap_cand(&c[0], &c[end]);
        sift_down(c, end, 0);
    }
}

static void insertion_sort(gm_cand *c, int32_t n) {
    for (int32_t i = 1; i < n; i++) {
        gm_cand x = c[i];
        int32_t j = i;
        for (; j > 0 && better(x, c[j - 1]); j--) c[j] = c[j - 1];
        c[j] = x;
    }
}

/* Median-of-three Lomuto partition (n >= 3): returns p with c[0..p) better than c[p], the rest worse. */
static int32_t partition(gm_cand *c, int32_t n) {
    int32_t m = n / 2;
    if (better(c[m], c[0])) swap_cand(&c[m], &c[0]);
    if (better(c[n - 1], c[0])) swap_cand(&c[n - 1], &c[0]);
    if (better(c[m], c[n - 1])) swap_cand(&c[m], &c[n - 1]);   /* c[n-1] is now the median */
    gm_cand pivot = c[n - 1];
    int32_t s = 0;
    for (int32_t i = 0; i < n - 1; i++) {
        /* Branch-free: always swap, advance s only for the better ones (c[s..i] are all worse). */
        gm_cand x = c[i];
        c[i] = c[s];
        c[s] = x;
        s += better(x, pivot);
    }
    swap_cand(&c[s], &c[n - 1]);
    return s;
}

static int depth_limit(int32_t n) {
    int d = 0;
    while (n > 1) { n >>= 1; d += 2; }
    return d;
}

/* Introsort, best first. */
static void sort_cands(gm_cand *c, int32_t n) {
    int depth = depth_limit(n);
    while (n > 16) {
        if (depth-- == 0) { heap_sort(c, n); return; }
        int32_t p = partition(c, n);
        if (p < n - p - 1) {
            sort_cands(c, p);
            c += p + 1;
            n -= p + 1;
        } else {
            sort_cands(c + p + 1, n - p - 1);
            n = p;
        }
    }
    insertion_sort(c, n);
}

/* Quickselect (0 < k < n): afterwards c[0..k) are the k best, in no order. */
static void select_best(gm_cand *c, int32_t n, int32_t k) {
    int depth = depth_limit(n);
    while (n > 16) {
        if (depth-- == 0) { heap_sort(c, n); return; }
        int32_t p = partition(c, n);
        if (p == k || p + 1 == k) return;
        if (p > k) {
            n = p;
        } else {
            c += p + 1;
            n -= p + 1;
            k -= p + 1;
        }
    }
    insertion_sort(c, n);
}

/* Moves the candidates with logit >= t to the front; returns how many. */
static int32_t partition_ge(gm_cand *c, int32_t n, float t) {
    int32_t s = 0;
    for (int32_t i = 0; i < n; i++)            /* few pass: a branch beats partition()'s swaps */
        if (c[i].logit >= t) swap_cand(&c[i], &c[s++]);
    return s;
}

/* ==== The chain ==== */

/* Logits are scanned in blocks whose max is taken first: most blocks cannot beat the running
 * threshold and are skipped after 64 compares the compiler vectorises (8 lanes -> maxps). NaN never
 * wins a compare, so a NaN lane cannot hide a larger value. */
#define GM_BLOCK 64

static inline float block_max(const float *x) {
    float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int j = 0; j < GM_BLOCK; j += 8)
        for (int k = 0; k < 8; k++) m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
    float r = m[0];
    for (int k = 1; k < 8; k++) r = m[k] > r ? m[k] : r;
    return r;
}

/* temp <= 0: argmax of the penalised logits, lowest id on ties, 0 when all are -inf. */
static gemmac_token greedy(const gemmac_sampler *s, const float *logits, float *logit_out) {
    const int32_t *count = s->penalize ? s->count : NULL;
    float best = -INFINITY;
    gemmac_token arg = 0;
    const int32_t n = s->n_vocab;
    for (int32_t i = 0; i < n;) {
        if (n - i >= GM_BLOCK && !(block_max(logits + i) > best)) {
            i += GM_BLOCK;
            continue;
        }
        for (int32_t end = n - i > GM_BLOCK ? i + GM_BLOCK : n; i < end; i++) {
            float v = logits[i];
            if (v > best) {
                v = sanitize(v);
                if (!(v > best) || (count && count[i])) continue;
                best = v;
                arg = i;
            }
        }
    }
    for (int32_t j = 0; j < s->n_present; j++) {
        gemmac_token t = s->present[j];
        float v = penalised(s, logits[t], s->count[t]);
        if (v > best || (v == best && t < arg)) {
            best = v;
            arg = t;
        }
    }
    if (logit_out) {
        *logit_out = (s->penalize && s->count[arg]) ? penalised(s, logits[arg], s->count[arg])
                                                    : sanitize(logits[arg]);
    }
    return arg;
}

/* Top-k for small k: one pass over the row keeping a k-element heap (worst at the root), so only
 * logits that beat the current k-th best cost more than a compare. Penalised tokens are skipped in
 * the pass and offered afterwards with their penalised logits. Leaves the k best in s->cand, sorted. */
static int32_t top_k_heap(gemmac_sampler *s, const float *logits, int32_t k) {
    const int32_t *count = s->penalize ? s->count : NULL;
    const int32_t n = s->n_vocab;
    gm_cand *h = s->cand;
    int32_t m = 0, i = 0;
    for (; i < n && m < k; i++) {
        if (count && count[i]) continue;
        h[m++] = (gm_cand){sanitize(logits[i]), i};
    }
    heapify(h, m);
    if (m == k) {
        /* Later ids lose ties, so only a strictly larger logit enters. */
        float thr = h[0].logit;
        while (i < n) {
            if (n - i >= GM_BLOCK && !(block_max(logits + i) > thr)) {
                i += GM_BLOCK;
                continue;
            }
            for (int32_t end = n - i > GM_BLOCK ? i + GM_BLOCK : n; i < end; i++) {
                float v = logits[i];
                if (v > thr) {
                    v = sanitize(v);
                    if (!(v > thr) || (count && count[i])) continue;
                    h[0] = (gm_cand){v, i};
                    sift_down(h, k, 0);
                    thr = h[0].logit;
                }
            }
        }
    }
    for (int32_t j = 0; j < s->n_present; j++) {
        gemmac_token t = s->present[j];
        gm_cand c = {penalised(s, logits[t], s->count[t]), t};
        if (m < k) {
            h[m] = c;
            sift_up(h, m++);
        } else if (better(c, h[0])) {
            h[0] = c;
            sift_down(h, k, 0);
        }
    }
    sort_cands(h, m);
    return m;
}

/* The whole row as candidates, sanitized and penalised, in id order. */
static int32_t load_all(gemmac_sampler *s, const float *logits) {
    gm_cand *c = s->cand;
    for (int32_t i = 0; i < s->n_vocab; i++) c[i] = (gm_cand){sanitize(logits[i]), i};
    for (int32_t j = 0; j < s->n_present; j++) {
        gemmac_token t = s->present[j];
        c[t].logit = penalised(s, logits[t], s->count[t]);
    }
    return s->n_vocab;
}

/* Moves the best of c[0..m) to c[0]. */
static void best_first(gm_cand *c, int32_t m) {
    int32_t b = 0;
    for (int32_t i = 1; i < m; i++)
        if (better(c[i], c[b])) b = i;
    swap_cand(&c[0], &c[b]);
}

/* Top-p then min-p over c[0..m) (sorted best first when *sorted). Both keep a prefix of the
 * candidate order and min-p's cut does not depend on top-p's normalisation, so the survivors are the
 * shorter of the two prefixes: the walk stops at whichever comes first. Unsorted input is sorted only
 * above a threshold that starts GM_TOP_P_FIRST_WINDOW below the max and widens until the prefix ends
 * inside it. On return c[0..r) are the survivors (sorted unless only min-p ran). */
static int32_t top_p_min_p(const gemmac_sampler *s, gm_cand *c, int32_t m, bool *sorted) {
    const bool use_top_p = s->params.top_p < 1.0f;
    const bool use_min_p = s->params.min_p > 0.0f;
    if (!use_top_p && !use_min_p) return m;

    if (!*sorted) best_first(c, m);
    const float lmax = c[0].logit;
    if (lmax == -INFINITY) return 1;          /* nothing has any probability: keep the lowest id */
    const float tmin = use_min_p ? lmax + logf(s->params.min_p) : -INFINITY;

    if (!use_top_p) {                         /* min-p alone: a filter, no order needed */
        if (*sorted) {
            int32_t r = 1;
            while (r < m && c[r].logit >= tmin) r++;
            return r;
        }
        return 1 + partition_ge(c + 1, m - 1, tmin);
    }

    double z = 0.0;                           /* the softmax normaliser over all m, temperature 1 */
    for (int32_t i = 0; i < m; i++) z += expf(c[i].logit - lmax);
    const double p = s->params.top_p;

    double cum = 0.0;
    int32_t done = 0;                         /* c[0..done) sorted and walked */
    float window = GM_TOP_P_FIRST_WINDOW;
    const bool was_sorted = *sorted;
    *sorted = true;                           /* every exit below leaves a sorted prefix */
    for (;;) {
        int32_t end = m;
        bool last = true;
        if (!was_sorted) {
            float t = lmax - window;
            last = window >= GM_TOP_P_LAST_WINDOW || !(t > tmin);
            if (last) t = tmin;
            end = done + partition_ge(c + done, m - done, t);
            sort_cands(c + done, end - done);
        }
        for (int32_t i = done; i < end; i++) {
            if (i > 0 && c[i].logit < tmin) return i;                  /* min-p cut */
            cum += expf(c[i].logit - lmax) / z;
            if (cum >= p) return i + 1;                                /* top-p cut */
        }
        if (last) {
            return end;                       /* rounding kept cum below p: keep everything left */
        }
        done = end;
        window *= 2.0f;
    }
}

/* Runs penalties -> top-k -> top-p -> min-p; survivors in s->cand[0..r). */
static int32_t run_filters(gemmac_sampler *s, const float *logits, bool *sorted) {
    const int32_t n = s->n_vocab;
    int32_t k = s->params.top_k;
    if (k <= 0 || k >= n) k = n;
    int32_t m;
    if (k < n && k <= GM_HEAP_MAX_K) {
        m = top_k_heap(s, logits, k);
        *sorted = true;
    } else {
        m = load_all(s, logits);
        if (k < n) {
            select_best(s->cand, m, k);
            m = k;
        }
        *sorted = false;
    }
    return top_p_min_p(s, s->cand, m, sorted);
}

/* Temperature: w[i] = expf((logit - max) / temp) for c[0..r); returns their sum. When every logit is
 * -inf the best candidate (the lowest id) gets weight 1 and the rest 0. */
static double weigh(gemmac_sampler *s, const gm_cand *c, int32_t r) {
    int32_t b = 0;
    for (int32_t i = 1; i < r; i++)
        if (better(c[i], c[b])) b = i;
    const float lmax = c[b].logit;
    const float temp = s->params.temp;
    float *w = s->w;
    if (lmax == -INFINITY) {
        memset(w, 0, (size_t)r * sizeof *w);
        w[b] = 1.0f;
        return 1.0;
    }
    double sum = 0.0;
    for (int32_t i = 0; i < r; i++) {
        w[i] = expf((c[i].logit - lmax) / temp);
        sum += w[i];
    }
    return sum;
}

/* The draw over the survivors s->cand[0..r) (r >= 1), in their order: temperature, then the first
 * survivor whose running weight exceeds u * sum. One draw of the generator (two 32-bit outputs), none
 * when a single candidate survives. */
static gemmac_token draw(gemmac_sampler *s, int32_t r) {
    gm_cand *c = s->cand;
    if (r == 1) return c[0].id;
    double sum = weigh(s, c, r);
    double target = gm_pcg32_unit(&s->rng) * sum;
    double cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < r; i++) {
        if (s->w[i] > 0.0f) {
            cum += s->w[i];
            last = i;
            if (cum > target) return c[i].id;
        }
    }
    return c[last].id;                        /* u * sum rounded up to sum */
}

/* Does not accept the token (the caller does, as for prompt tokens). One draw of the generator (two
 * 32-bit outputs) per call, none when a single candidate survives or temp <= 0. NULL arguments give
 * token 0. */
gemmac_token gemmac_sampler_sample(gemmac_sampler *s, const float *logits) {
    if (!s || !logits) return 0;
    if (s->params.temp <= 0.0f) return greedy(s, logits, NULL);
    bool sorted;
    int32_t r = run_filters(s, logits, &sorted);
    return draw(s, r);
}

/* ==== From a row's best logits ==== */

/* Exactness (sampling from the row's n best == sampling from the row). Write r(t) for token t's logit as
 * read (sanitize), q(t) for it after the penalties, and compare tokens by (value desc, id asc), a strict
 * total order, so "the n best" is one well-defined set T, and the n best are what the caller passes.
 *  1. The penalties only lower: for repeat >= 1, v <= 0 gives v * repeat <= v and v > 0 gives
 *     v / repeat <= v (rounding is monotone and v is representable); then count * frequency + presence
 *     >= 0 is subtracted, again <= v; -inf stays -inf, nothing becomes NaN (frequency and presence are
 *     finite). The id does not change, so (q(t), t) never comes before (r(t), t), and q(t) = r(t) for
 *     every token outside the P distinct ones in the window.
 *  2. Let k be the count top-k keeps (1 for greedy). Since n >= k + P, T holds at least k unpenalised
 *     tokens u, with q(u) = r(u). Every t outside T comes after each of them: (q(t), t) is at best
 *     (r(t), t), which comes after (r(u), u) = (q(u), u) since u is in T and t is not. So at least k
 *     tokens beat t after the penalties: t is not among the k best of the row by q. Hence the
 *     k best by q of the row are the k best by q of T, the same tokens with the same values (bit for
 *     bit, except that a zero's sign may differ, which no later step can see: it only adds, subtracts,
 *     compares, exponentiates) in the same order.
 *  3. The whole row's path (k <= GM_HEAP_MAX_K: top_k_heap) hands those k, sorted, to top_p_min_p and
 *     draw; sample_top hands the same array to the same functions, so the survivors, the float sums
 *     (same terms in the same order), the number of generator draws and the token are identical.
 *     Greedy is the best candidate by q, k = 1 above; the whole row's greedy() is also the best by that
 *     order (0 for an all -inf row is the best: every value ties, the lowest id wins).
 * Not exact: top_k <= 0 or >= n_vocab (top-p's normaliser and the draw's weights need every token),
 * top_k > GM_HEAP_MAX_K (the row's path keeps quickselect's order, which the draw's running sum sees),
 * or a penalty that can raise a logit (a token outside T could climb into the k best). */
bool gemmac_sampler_top_exact(const gemmac_sampler *s, int32_t n) {
    if (!s || n < 1) return false;
    const int32_t p = s->penalize ? s->n_present : 0;      /* distinct tokens the penalties touch */
    if (p > 0 && !(s->params.repeat_penalty >= 1.0f && s->params.frequency_penalty >= 0.0f &&
                   s->params.presence_penalty >= 0.0f))
        return false;
    int32_t k = 1;
    if (s->params.temp > 0.0f) {
        k = s->params.top_k;
        if (k < 1 || k >= s->n_vocab || k > GM_HEAP_MAX_K) return false;
    }
    return (int64_t)k + p <= n;
}

/* The candidates into s->cand, read and penalised as load_all does; skips ids outside the vocabulary and
 * takes at most n_vocab (the scratch's size). Returns how many. */
static int32_t load_top(gemmac_sampler *s, const gemmac_token *ids, const float *logits, int32_t n) {
    gm_cand *c = s->cand;
    int32_t m = 0;
    for (int32_t i = 0; i < n && m < s->n_vocab; i++) {
        gemmac_token t = ids[i];
        if (t < 0 || t >= s->n_vocab) continue;
        float v = (s->penalize && s->count[t]) ? penalised(s, logits[i], s->count[t]) : sanitize(logits[i]);
        c[m++] = (gm_cand){v, t};
    }
    return m;
}

gemmac_token gemmac_sampler_sample_top(gemmac_sampler *s, const gemmac_token *ids, const float *logits,
                                       int32_t n) {
    if (!s || !ids || !logits || n < 1) return 0;
    int32_t m = load_top(s, ids, logits, n);
    if (m == 0) return 0;
    gm_cand *c = s->cand;
    if (s->params.temp <= 0.0f) {
        best_first(c, m);                     /* greedy: the best by (logit desc, id asc) */
        return c[0].id;
    }
    int32_t k = s->params.top_k;
    if (k > 0 && k < m) {
        select_best(c, m, k);                 /* top-k, then sorted as top_k_heap leaves them */
        m = k;
    }
    sort_cands(c, m);
    bool sorted = true;
    int32_t r = top_p_min_p(s, c, m, &sorted);
    return draw(s, r);
}

int32_t gm_sampler_candidates(gemmac_sampler *s, const float *logits, gm_sample_cand *out, int32_t cap) {
    if (!s || !logits || (!out && cap > 0)) return -1;
    if (s->params.temp <= 0.0f) {
        float v;
        gemmac_token t = greedy(s, logits, &v);
        if (cap > 0) out[0] = (gm_sample_cand){t, v, 1.0f};
        return 1;
    }
    bool sorted;
    int32_t r = run_filters(s, logits, &sorted);
    gm_cand *c = s->cand;
    if (!sorted) sort_cands(c, r);
    double sum = weigh(s, c, r);
    for (int32_t i = 0; i < r && i < cap; i++)
        out[i] = (gm_sample_cand){c[i].id, c[i].logit, (float)(s->w[i] / sum)};
    return r;
}
