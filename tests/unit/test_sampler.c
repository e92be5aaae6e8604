/* test_sampler.c: the sampler chain (src/sample) against hand-derived survivors, a brute-force
 * reference on full-size vocabularies, empirical draw distributions under fixed seeds, and sampling from a
 * row's best logits (gemmac_sampler_sample_top) against sampling from the whole row.
 * Leaves the speed of the chain to bench/bench_sampler.c. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gemmac.h"
#include "sample/sampler_internal.h"
#include "sample/top_logits.h"

#define N_ELEMS(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))
#define BIG_VOCAB 262144            /* Gemma 3's vocabulary */

/* Probabilities the sampler reports are floats from a float softmax: 1e-6 absolute is ~10 ulp at
 * p ~ 0.5, loose enough for expf's rounding and the double-vs-float normaliser. */
#define P_TOL 1e-6

/* Chi-square critical value, 3 degrees of freedom, alpha = 0.001 (tables: 16.266). With a fixed seed
 * the test is deterministic; the bound says a correct sampler fails it for 1 seed in 1000. */
#define CHI2_DF3_999 16.27

/* ---- helpers ---- */

/* Every filter off: only temperature and the draw. */
static gemmac_sampler_params plain_params(void) {
    gemmac_sampler_params p = gemmac_sampler_default_params();
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

static gemmac_sampler *make(const gemmac_sampler_params *p, int32_t n) {
    gemmac_sampler *s = gemmac_sampler_new(p, n);
    assert_non_null(s);
    return s;
}

/* Asserts the survivors are exactly want[0..n_want), in (logit desc, id asc) order. */
static void expect_survivors(gemmac_sampler *s, const float *logits, const gemmac_token *want,
                             int32_t n_want) {
    gm_sample_cand out[64];
    int32_t n = gm_sampler_candidates(s, logits, out, N_ELEMS(out));
    assert_int_equal(n, n_want);
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        assert_int_equal(out[i].id, want[i]);
        sum += out[i].p;
    }
    assert_true(fabs(sum - 1.0) < 1e-5);
}

/* The same filters through both code paths: top_k = 0 (whole row, threshold sort) and
 * top_k = n - 1 (heap, sorted). Rows used with this end in a -inf token, which top_k = n - 1 drops
 * and which has no probability mass, so both must agree. */
static void expect_survivors_both_paths(gemmac_sampler_params p, const float *logits, int32_t n,
                                        const gemmac_token *want, int32_t n_want) {
    assert_true(logits[n - 1] == -INFINITY);
    p.top_k = 0;
    gemmac_sampler *s = make(&p, n);
    expect_survivors(s, logits, want, n_want);
    gemmac_sampler_free(s);
    p.top_k = n - 1;
    s = make(&p, n);
    expect_survivors(s, logits, want, n_want);
    gemmac_sampler_free(s);
}

static double chi2(const int *counts, const double *probs, int k, int n) {
    double x = 0.0;
    for (int i = 0; i < k; i++) {
        double e = probs[i] * n;
        x += (counts[i] - e) * (counts[i] - e) / e;
    }
    return x;
}

/* Normal-ish test data from the project's own generator (Box-Muller). */
static float gauss(gm_pcg32 *r) {
    double u1 = gm_pcg32_unit(r), u2 = gm_pcg32_unit(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- brute-force reference: sort the whole row, then walk it ---- */

typedef struct ref_cand {
    float logit;
    int32_t id;
} ref_cand;

static int ref_cmp(const void *pa, const void *pb) {
    const ref_cand *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return a->id < b->id ? -1 : (a->id > b->id);
}

/* logits are already penalised; returns the survivor count, survivors in c[0..), probs in p[0..). */
static int32_t ref_chain(const gemmac_sampler_params *sp, const float *logits, int32_t n, ref_cand *c,
                         double *p) {
    for (int32_t i = 0; i < n; i++) {
        float v = logits[i];
        c[i] = (ref_cand){v != v ? -INFINITY : (v > FLT_MAX ? FLT_MAX : v), i};
    }
    qsort(c, (size_t)n, sizeof *c, ref_cmp);
    int32_t m = (sp->top_k <= 0 || sp->top_k > n) ? n : sp->top_k;
    float lmax = c[0].logit;
    if (sp->top_p < 1.0f) {
        double z = 0.0, cum = 0.0;
        for (int32_t i = 0; i < m; i++) z += expf(c[i].logit - lmax);
        for (int32_t i = 0; i < m; i++) {
            cum += expf(c[i].logit - lmax) / z;
            if (cum >= sp->top_p) { m = i + 1; break; }
        }
    }
    if (sp->min_p > 0.0f) {
        float tmin = lmax + logf(sp->min_p);
        int32_t r = 1;
        while (r < m && c[r].logit >= tmin) r++;
        m = r;
    }
    double z = 0.0;
    for (int32_t i = 0; i < m; i++) z += (p[i] = exp(((double)c[i].logit - lmax) / sp->temp));
    for (int32_t i = 0; i < m; i++) p[i] /= z;
    return m;
}

/* Compares the sampler's survivors with the reference on one row (logits as the sampler sees them,
 * penalised = the row after penalties, computed independently by the caller). */
static void check_against_ref(gemmac_sampler *s, const gemmac_sampler_params *sp, const float *logits,
                              const float *penalised, int32_t n) {
    ref_cand *rc = malloc((size_t)n * sizeof *rc);
    double *rp = malloc((size_t)n * sizeof *rp);
    gm_sample_cand *out = malloc((size_t)n * sizeof *out);
    assert_non_null(rc);
    assert_non_null(rp);
    assert_non_null(out);
    int32_t want = ref_chain(sp, penalised, n, rc, rp);
    int32_t got = gm_sampler_candidates(s, logits, out, n);
    assert_int_equal(got, want);
    for (int32_t i = 0; i < got; i++) {
        assert_int_equal(out[i].id, rc[i].id);
        assert_true(out[i].logit == rc[i].logit);
        assert_true(fabs(out[i].p - rp[i]) < P_TOL);
    }
    free(rc);
    free(rp);
    free(out);
}

/* ---- generator and parameters ---- */

static void test_pcg32_reference_vector(void **state) {
    (void)state;
    /* pcg32-demo.c (pcg-random.org), pcg32_srandom_r(&rng, 42, 54), round 1. */
    const uint32_t want[] = {0xa15c02b7u, 0x7b47f409u, 0xba1d3330u, 0x83d2f293u, 0xbfa4784bu, 0xcbed606eu};
    gm_pcg32 r;
    gm_pcg32_seed(&r, 42, 54);
    for (int i = 0; i < N_ELEMS(want); i++) assert_int_equal(gm_pcg32_next(&r), want[i]);
    for (int i = 0; i < 10000; i++) {
        double u = gm_pcg32_unit(&r);
        assert_true(u >= 0.0 && u < 1.0);
    }
}

static void test_default_params(void **state) {
    (void)state;
    gemmac_sampler_params p = gemmac_sampler_default_params();     /* llama.cpp common.h */
    assert_true(p.temp == 0.8f);
    assert_int_equal(p.top_k, 40);
    assert_true(p.top_p == 0.95f);
    assert_true(p.min_p == 0.05f);
    assert_true(p.repeat_penalty == 1.0f);
    assert_int_equal(p.repeat_last_n, 64);
    assert_true(p.presence_penalty == 0.0f);
    assert_true(p.frequency_penalty == 0.0f);
    assert_true(p.seed == GEMMAC_SEED_RANDOM);
}

static void test_invalid_params(void **state) {
    (void)state;
    const gemmac_sampler_params d = gemmac_sampler_default_params();
    gemmac_sampler_params p;
    assert_null(gemmac_sampler_new(NULL, 10));
    assert_null(gemmac_sampler_new(&d, 0));
    assert_null(gemmac_sampler_new(&d, -5));
#define BAD(field, value)                              \
    do {                                               \
        p = d;                                         \
        p.field = (value);                             \
        assert_null(gemmac_sampler_new(&p, 10));       \
    } while (0)
    BAD(temp, NAN);
    BAD(temp, INFINITY);
    BAD(top_p, NAN);
    BAD(top_p, -0.01f);
    BAD(top_p, 1.01f);
    BAD(min_p, NAN);
    BAD(min_p, -0.01f);
    BAD(min_p, 1.01f);
    BAD(repeat_penalty, NAN);
    BAD(repeat_penalty, 0.0f);
    BAD(repeat_penalty, -1.0f);
    BAD(repeat_penalty, INFINITY);
    BAD(repeat_last_n, -2);
    BAD(presence_penalty, NAN);
    BAD(frequency_penalty, NAN);
    BAD(frequency_penalty, -INFINITY);
#undef BAD
    /* The edges of every range are valid; negative temp means greedy. */
#define GOOD(field, value)                             \
    do {                                               \
        p = d;                                         \
        p.field = (value);                             \
        gemmac_sampler *s_ = gemmac_sampler_new(&p, 10); \
        assert_non_null(s_);                           \
        gemmac_sampler_free(s_);                       \
    } while (0)
    GOOD(temp, -1.0f);
    GOOD(temp, 0.0f);
    GOOD(top_p, 0.0f);
    GOOD(top_p, 1.0f);
    GOOD(min_p, 0.0f);
    GOOD(min_p, 1.0f);
    GOOD(repeat_last_n, -1);
    GOOD(repeat_last_n, 0);
    GOOD(repeat_last_n, INT32_MAX);    /* the window grows on demand, nothing huge up front */
    GOOD(top_k, -3);
    GOOD(top_k, 1000);
    GOOD(presence_penalty, -2.0f);
#undef GOOD
    p = d;                                 /* a huge window with the penalties on */
    p.repeat_penalty = 1.1f;
    p.repeat_last_n = INT32_MAX;
    gemmac_sampler *s = gemmac_sampler_new(&p, 10);
    assert_non_null(s);
    for (int i = 0; i < 5000; i++) gemmac_sampler_accept(s, i % 10);
    gemmac_sampler_free(s);
    gemmac_sampler_free(NULL);
    gemmac_sampler_accept(NULL, 1);
    gemmac_sampler_reset(NULL);
}

/* ---- seeds ---- */

static void test_seed_gives_fixed_sequence(void **state) {
    (void)state;
    enum { N = 1000, DRAWS = 300 };
    static float flat[N];                      /* all 0: every token 1/1000 */
    gemmac_sampler_params p = plain_params();
    p.seed = 1234;
    gemmac_sampler *a = make(&p, N), *b = make(&p, N);
    p.seed = 1235;
    gemmac_sampler *c = make(&p, N);
    gemmac_token sa[DRAWS], sc[DRAWS];
    int differ = 0;
    for (int i = 0; i < DRAWS; i++) {
        sa[i] = gemmac_sampler_sample(a, flat);
        assert_int_equal(gemmac_sampler_sample(b, flat), sa[i]);
        sc[i] = gemmac_sampler_sample(c, flat);
        differ += sa[i] != sc[i];
    }
    /* Two independent uniform draws over 1000 agree with probability 1/1000: expect ~0.3 matches. */
    assert_true(differ >= DRAWS - 5);

    /* The draw is the inverse CDF of u = gm_pcg32_unit(seed 1234, stream 54): on the flat row the
     * running weight after token i is i + 1 (exact in double), so the token is floor(u * 1000). */
    gm_pcg32 r;
    gm_pcg32_seed(&r, 1234, 54);
    for (int i = 0; i < DRAWS; i++) assert_int_equal(sa[i], (gemmac_token)(gm_pcg32_unit(&r) * N));

    /* reset re-seeds: the same sequence again. */
    gemmac_sampler_reset(a);
    for (int i = 0; i < DRAWS; i++) assert_int_equal(gemmac_sampler_sample(a, flat), sa[i]);
    gemmac_sampler_free(a);
    gemmac_sampler_free(b);
    gemmac_sampler_free(c);
}

static void test_random_seed_differs(void **state) {
    (void)state;
    gemmac_sampler_params p = gemmac_sampler_default_params();     /* GEMMAC_SEED_RANDOM */
    gemmac_sampler *a = make(&p, 10), *b = make(&p, 10);
    assert_true(gm_sampler_seed(a) != gm_sampler_seed(b));         /* same clock, different handles */
    gemmac_sampler_free(a);
    gemmac_sampler_free(b);
}

/* ---- greedy ---- */

static void test_greedy_argmax(void **state) {
    (void)state;
    const float logits[] = {1.0f, 5.0f, 3.0f, 5.0f, -2.0f};
    gemmac_sampler_params p = gemmac_sampler_default_params();
    p.seed = 1;
    for (int t = 0; t < 2; t++) {
        p.temp = t == 0 ? 0.0f : -1.0f;
        gemmac_sampler *s = make(&p, N_ELEMS(logits));
        for (int i = 0; i < 10; i++)
            assert_int_equal(gemmac_sampler_sample(s, logits), 1);   /* 5.0 at 1 and 3: lowest id */
        gm_sample_cand out[4];
        assert_int_equal(gm_sampler_candidates(s, logits, out, 4), 1);
        assert_int_equal(out[0].id, 1);
        assert_true(out[0].p == 1.0f && out[0].logit == 5.0f);
        gemmac_sampler_free(s);
    }
}

static void test_greedy_big_vocab(void **state) {
    (void)state;
    float *l = malloc(BIG_VOCAB * sizeof *l);
    assert_non_null(l);
    gm_pcg32 r;
    gm_pcg32_seed(&r, 5, 5);
    for (int32_t i = 0; i < BIG_VOCAB; i++) l[i] = gauss(&r);
    l[200000] = 9.0f;
    l[250000] = 9.0f;                          /* tie: 200000 wins */
    gemmac_sampler_params p = gemmac_sampler_default_params();
    p.temp = 0.0f;
    gemmac_sampler *s = make(&p, BIG_VOCAB);
    assert_int_equal(gemmac_sampler_sample(s, l), 200000);
    gemmac_sampler_free(s);
    free(l);
}

/* Greedy against a brute-force argmax on rows where the runner-up is close (the block scan must
 * not skip it) and, quantised, ties are common (lowest id wins). */
static void test_greedy_vs_brute_force(void **state) {
    (void)state;
    float *l = malloc(BIG_VOCAB * sizeof *l);
    assert_non_null(l);
    gm_pcg32 r;
    gm_pcg32_seed(&r, 6, 6);
    gemmac_sampler_params p = gemmac_sampler_default_params();
    p.temp = 0.0f;
    const int32_t odd = BIG_VOCAB - 37;        /* ends in a partial block of 27 */
    gemmac_sampler *s = make(&p, BIG_VOCAB), *s_odd = make(&p, odd);
    for (int row = 0; row < 12; row++) {
        float q = row % 2 ? 4.0f : 4096.0f;   /* coarse (many ties) or fine quantisation */
        for (int32_t i = 0; i < BIG_VOCAB; i++) l[i] = roundf(gauss(&r) * q) / q;
        if (row == 10) l[odd - 1] = 100.0f;    /* the last element of the partial block */
        int32_t best = 0, best_odd = 0;
        for (int32_t i = 1; i < BIG_VOCAB; i++) {
            if (l[i] > l[best]) best = i;
            if (i < odd && l[i] > l[best_odd]) best_odd = i;
        }
        assert_int_equal(gemmac_sampler_sample(s, l), best);
        assert_int_equal(gemmac_sampler_sample(s_odd, l), best_odd);
    }
    gemmac_sampler_free(s);
    gemmac_sampler_free(s_odd);
    free(l);
}

/* ---- top-k ---- */

static void test_top_k_exact(void **state) {
    (void)state;
    /* id:                 0     1      2     3     4     5     6     7 */
    const float l[] = {0.5f, 3.0f, -1.0f, 2.0f, 3.0f, 1.0f, -2.0f, 2.5f};
    /* Order (logit desc, id asc): 1(3.0) 4(3.0) 7(2.5) 3(2.0) 5(1.0) 0(0.5) 2(-1) 6(-2). */
    const gemmac_token order[] = {1, 4, 7, 3, 5, 0, 2, 6};
    gemmac_sampler_params p = plain_params();
    const int32_t ks[] = {1, 2, 3, 7, 8, 100, 0, -5};
    const int32_t kept[] = {1, 2, 3, 7, 8, 8, 8, 8};   /* k >= n clamps; k <= 0 keeps all */
    for (int i = 0; i < N_ELEMS(ks); i++) {
        p.top_k = ks[i];
        gemmac_sampler *s = make(&p, N_ELEMS(l));
        expect_survivors(s, l, order, kept[i]);   /* k = 1: the 3.0 tie goes to id 1 */
        gemmac_sampler_free(s);
    }
    /* Survivors {1, 4, 7} renormalise at temp 1: p1 = p4 = e^3 / (2 e^3 + e^2.5) = 1 / (2 + e^-0.5). */
    p.top_k = 3;
    gemmac_sampler *s = make(&p, N_ELEMS(l));
    gm_sample_cand out[8];
    assert_int_equal(gm_sampler_candidates(s, l, out, 8), 3);
    double p1 = 1.0 / (2.0 + exp(-0.5));
    assert_true(fabs(out[0].p - p1) < P_TOL);
    assert_true(fabs(out[1].p - p1) < P_TOL);
    assert_true(fabs(out[2].p - (1.0 - 2.0 * p1)) < P_TOL);
    /* Draws never leave the survivors. */
    for (int i = 0; i < 2000; i++) {
        gemmac_token t = gemmac_sampler_sample(s, l);
        assert_true(t == 1 || t == 4 || t == 7);
    }
    gemmac_sampler_free(s);
}

/* The heap (k <= 4096) and quickselect (k > 4096) paths against sort-everything, on a full-size row
 * quantised to 1/8 so that ties are everywhere. */
static void test_top_k_big_vocab_vs_reference(void **state) {
    (void)state;
    float *l = malloc(BIG_VOCAB * sizeof *l);
    assert_non_null(l);
    gm_pcg32 r;
    gm_pcg32_seed(&r, 99, 1);
    for (int32_t i = 0; i < BIG_VOCAB; i++) l[i] = roundf(gauss(&r) * 3.0f * 8.0f) / 8.0f;
    const int32_t ks[] = {1, 40, 4096, 5000, 100000, BIG_VOCAB - 1};
    gemmac_sampler_params p = plain_params();
    for (int i = 0; i < N_ELEMS(ks); i++) {
        p.top_k = ks[i];
        gemmac_sampler *s = make(&p, BIG_VOCAB);
        check_against_ref(s, &p, l, l, BIG_VOCAB);
        gemmac_sampler_free(s);
    }
    /* A row that ends in a partial scan block, its best tokens in that tail. */
    const int32_t odd = BIG_VOCAB - 37;
    for (int32_t i = odd - 20; i < odd; i++) l[i] = 50.0f + (float)(i % 3);
    p.top_k = 40;
    gemmac_sampler *s = make(&p, odd);
    check_against_ref(s, &p, l, l, odd);
    gemmac_sampler_free(s);
    free(l);
}

/* ---- top-p ---- */

static void test_top_p_exact_boundary(void **state) {
    (void)state;
    /* Four equal logits: expf(0) = 1 and z = 4 are exact, so every probability is exactly 0.25 and
     * the running sums 0.25, 0.5, 0.75, 1 are exact. Ties go by id. Token 4 is -inf (no mass). */
    const float l[] = {0.0f, 0.0f, 0.0f, 0.0f, -INFINITY};
    const gemmac_token order[] = {0, 1, 2, 3};
    gemmac_sampler_params p = plain_params();
    p.top_p = 0.5f;                            /* 0.25 < 0.5, 0.5 >= 0.5: exactly hits p, keep 2 */
    expect_survivors_both_paths(p, l, N_ELEMS(l), order, 2);
    p.top_p = nextafterf(0.5f, 1.0f);          /* 0.5 falls short by one ulp: keep 3 */
    expect_survivors_both_paths(p, l, N_ELEMS(l), order, 3);
    p.top_p = 0.25f;                           /* the first token alone hits p */
    expect_survivors_both_paths(p, l, N_ELEMS(l), order, 1);
    p.top_p = 0.0f;                            /* min_keep = 1 */
    expect_survivors_both_paths(p, l, N_ELEMS(l), order, 1);
    p.top_p = 0.99f;                           /* 0.75 < 0.99 <= 1: all four finite ones */
    expect_survivors_both_paths(p, l, N_ELEMS(l), order, 4);
    p.top_p = 1.0f;                            /* off: even the -inf token stays (with p = 0) */
    p.top_k = 0;
    gemmac_sampler *s = make(&p, N_ELEMS(l));
    const gemmac_token all[] = {0, 1, 2, 3, 4};
    expect_survivors(s, l, all, 5);
    gemmac_sampler_free(s);
}

static void test_top_p_uneven(void **state) {
    (void)state;
    /* Probabilities 0.15 0.5 0.05 0.3 (+ a -inf token). Sorted: 1 (.5), 3 (.3), 0 (.15), 2 (.05);
     * running sums .5 .8 .95 1. Every p below is >= 0.05 away from a running sum, far beyond the
     * ~1e-7 rounding of logf/expf. */
    const float l[] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f), -INFINITY};
    const gemmac_token order[] = {1, 3, 0, 2};
    gemmac_sampler_params p = plain_params();
    p.top_p = 0.45f;                           /* .5 >= .45 */
    expect_survivors_both_paths(p, l, N_ELEMS(l), order, 1);
    p.top_p = 0.7f;                            /* .5 < .7 <= .8 */
    expect_survivors_both_paths(p, l, N_ELEMS(l), order, 2);
    p.top_p = 0.85f;                           /* .8 < .85 <= .95 */
    expect_survivors_both_paths(p, l, N_ELEMS(l), order, 3);

    /* top-k runs first and top-p renormalises over its survivors: with k = 2 the probabilities are
     * .5/.8 = .625 and .375, so p = 0.6 keeps only token 1, where without top-k it keeps {1, 3}. */
    p.top_p = 0.6f;
    p.top_k = 2;
    gemmac_sampler *s = make(&p, N_ELEMS(l));
    expect_survivors(s, l, order, 1);
    gemmac_sampler_free(s);
    p.top_k = 0;
    s = make(&p, N_ELEMS(l));
    expect_survivors(s, l, order, 2);
    gm_sample_cand out[8];
    assert_int_equal(gm_sampler_candidates(s, l, out, 8), 2);
    assert_true(fabs(out[0].p - 0.625) < P_TOL);   /* renormalised after the cut */
    assert_true(fabs(out[1].p - 0.375) < P_TOL);
    gemmac_sampler_free(s);
}

/* Without top-k the row is sorted only above a widening threshold. This row needs the second
 * window: one token at 10 holds ~5% (e^10 against 262143 e^(N(0,1)) ~ 262143 e^0.5), so top-p 0.95
 * has to reach deep into the bulk around 0, more than 8 below the max. */
static void test_top_p_big_vocab_vs_reference(void **state) {
    (void)state;
    float *l = malloc(BIG_VOCAB * sizeof *l);
    assert_non_null(l);
    gm_pcg32 r;
    gm_pcg32_seed(&r, 3, 3);
    for (int32_t i = 0; i < BIG_VOCAB; i++) l[i] = gauss(&r);
    l[777] = 10.0f;
    l[778] = NAN;
    l[779] = -INFINITY;
    const float ps[] = {0.03f, 0.5f, 0.95f, 0.999f};
    gemmac_sampler_params p = plain_params();
    for (int i = 0; i < N_ELEMS(ps); i++) {
        p.top_p = ps[i];
        gemmac_sampler *s = make(&p, BIG_VOCAB);
        check_against_ref(s, &p, l, l, BIG_VOCAB);
        gemmac_sampler_free(s);
    }
    /* A peaked row, as real logits are: everything inside the first window. */
    for (int32_t i = 0; i < BIG_VOCAB; i++) l[i] = gauss(&r) * 4.0f;
    p.top_p = 0.95f;
    p.temp = 0.7f;
    gemmac_sampler *s = make(&p, BIG_VOCAB);
    check_against_ref(s, &p, l, l, BIG_VOCAB);
    gemmac_sampler_free(s);
    free(l);
}

/* ---- min-p ---- */

static void test_min_p_exact(void **state) {
    (void)state;
    /* min-p keeps logit >= max + logf(min_p) (prob >= min_p * p_max). The max is 0, so with
     * min_p = 0.25 the cut is logf(0.25f) itself: token 1 sits exactly on it (kept), token 2 one ulp
     * below (dropped). Token 3: e^-0.5 = .61 >= .25 kept; token 4: e^-2 = .14 < .25 dropped; token 5
     * ties the max. Order of the kept: 0 (0), 5 (0), 3 (-.5), 1 (logf .25). */
    const float cut = logf(0.25f);
    const float l[] = {0.0f, cut, nextafterf(cut, -INFINITY), -0.5f, -2.0f, 0.0f, -INFINITY};
    gemmac_sampler_params p = plain_params();
    p.min_p = 0.25f;
    const gemmac_token kept[] = {0, 5, 3, 1};
    expect_survivors_both_paths(p, l, N_ELEMS(l), kept, 4);
    p.min_p = 1.0f;                            /* only the ties of the max */
    expect_survivors_both_paths(p, l, N_ELEMS(l), kept, 2);
    p.min_p = 0.1f;                            /* e^-2 = .135 >= .1: token 4 joins; -inf never */
    const gemmac_token kept01[] = {0, 5, 3, 1, 2, 4};
    expect_survivors_both_paths(p, l, N_ELEMS(l), kept01, 6);
    /* min_p = 0 is off: all 7, the -inf token last. */
    p.min_p = 0.0f;
    gemmac_sampler *s = make(&p, N_ELEMS(l));
    const gemmac_token all[] = {0, 5, 3, 1, 2, 4, 6};
    expect_survivors(s, l, all, 7);
    gemmac_sampler_free(s);
}

static void test_top_p_then_min_p(void **state) {
    (void)state;
    /* The uneven row again: probabilities 1:.5 3:.3 0:.15 2:.05. */
    const float l[] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f), -INFINITY};
    const gemmac_token order[] = {1, 3, 0, 2};
    gemmac_sampler_params p = plain_params();
    /* top-p .9 keeps {1,3,0} (.95 >= .9); min-p .4 needs p >= .2: drops 0 (.15). */
    p.top_p = 0.9f;
    p.min_p = 0.4f;
    expect_survivors_both_paths(p, l, N_ELEMS(l), order, 2);
    /* top-p .7 keeps {1,3}; min-p .2 (p >= .1) would keep {1,3,0}: top-p's cut wins. */
    p.top_p = 0.7f;
    p.min_p = 0.2f;
    expect_survivors_both_paths(p, l, N_ELEMS(l), order, 2);
    /* Everything at once with the temperature: {1, 3} at temp 0.5 weigh .5^2 : .3^2 = 25 : 9. */
    p.temp = 0.5f;
    p.top_k = 3;
    gemmac_sampler *s = make(&p, N_ELEMS(l));
    gm_sample_cand out[8];
    assert_int_equal(gm_sampler_candidates(s, l, out, 8), 2);
    assert_true(fabs(out[0].p - 25.0 / 34.0) < P_TOL);
    assert_true(fabs(out[1].p - 9.0 / 34.0) < P_TOL);
    gemmac_sampler_free(s);
}

static void test_min_p_big_vocab_vs_reference(void **state) {
    (void)state;
    float *l = malloc(BIG_VOCAB * sizeof *l);
    assert_non_null(l);
    gm_pcg32 r;
    gm_pcg32_seed(&r, 8, 8);
    for (int32_t i = 0; i < BIG_VOCAB; i++) l[i] = roundf(gauss(&r) * 2.0f * 16.0f) / 16.0f;
    gemmac_sampler_params p = plain_params();
    const float mps[] = {0.05f, 0.3f, 1.0f, 1e-4f};
    for (int i = 0; i < N_ELEMS(mps); i++) {
        p.min_p = mps[i];
        gemmac_sampler *s = make(&p, BIG_VOCAB);
        check_against_ref(s, &p, l, l, BIG_VOCAB);
        gemmac_sampler_free(s);
    }
    free(l);
}

/* The default chain (k 40, top-p .95, min-p .05, temp .8) on full-size rows, several shapes. */
static void test_default_chain_big_vocab_vs_reference(void **state) {
    (void)state;
    float *l = malloc(BIG_VOCAB * sizeof *l);
    assert_non_null(l);
    gm_pcg32 r;
    gm_pcg32_seed(&r, 11, 11);
    gemmac_sampler_params p = gemmac_sampler_default_params();
    p.seed = 5;
    gemmac_sampler *s = make(&p, BIG_VOCAB);
    const float scales[] = {0.1f, 1.0f, 3.0f, 8.0f};
    for (int i = 0; i < N_ELEMS(scales); i++) {
        for (int32_t j = 0; j < BIG_VOCAB; j++) l[j] = gauss(&r) * scales[i];
        check_against_ref(s, &p, l, l, BIG_VOCAB);
    }
    gemmac_sampler_free(s);
    free(l);
}

/* ---- penalties ---- */

static void test_repeat_penalty_window(void **state) {
    (void)state;
    /* id:                  0      1     2      3     4     5 */
    const float l[] = {2.0f, -1.0f, 3.0f, -2.0f, 0.0f, 1.0f};
    gemmac_sampler_params p = plain_params();
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 3;
    gemmac_sampler *s = make(&p, N_ELEMS(l));
    gm_sample_cand out[8];
    float got[6] = {0};
#define LOGITS_NOW()                                                        \
    do {                                                                    \
        assert_int_equal(gm_sampler_candidates(s, l, out, 8), 6);          \
        for (int i_ = 0; i_ < 6; i_++) got[out[i_].id] = out[i_].logit;     \
    } while (0)
    gemmac_sampler_accept(s, 0);
    gemmac_sampler_accept(s, 1);
    gemmac_sampler_accept(s, 1);               /* counted twice, penalised once */
    /* window {0, 1, 1}: 2.0 > 0 divided, -1.0 multiplied; the rest untouched */
    LOGITS_NOW();
    assert_true(got[0] == 1.0f && got[1] == -2.0f && got[2] == 3.0f && got[3] == -2.0f &&
                got[4] == 0.0f && got[5] == 1.0f);
    gemmac_sampler_accept(s, 5);               /* window {1, 1, 5}: 0 falls out */
    LOGITS_NOW();
    assert_true(got[0] == 2.0f && got[1] == -2.0f && got[5] == 0.5f);
    gemmac_sampler_accept(s, 3);               /* {1, 5, 3} */
    gemmac_sampler_accept(s, 4);               /* {5, 3, 4}: 1 falls out, 0 * 2 stays 0 */
    LOGITS_NOW();
    assert_true(got[0] == 2.0f && got[1] == -1.0f && got[2] == 3.0f && got[3] == -4.0f &&
                got[4] == 0.0f && got[5] == 0.5f);
    gemmac_sampler_accept(s, -1);              /* out of range: ignored */
    gemmac_sampler_accept(s, 6);
    LOGITS_NOW();
    assert_true(got[3] == -4.0f && got[5] == 0.5f);
    gemmac_sampler_reset(s);                   /* history gone */
    LOGITS_NOW();
    for (int i = 0; i < 6; i++) assert_true(got[i] == l[i]);
#undef LOGITS_NOW
    gemmac_sampler_free(s);
}

static void test_frequency_presence(void **state) {
    (void)state;
    const float l[] = {2.0f, -1.0f, 3.0f, -2.0f, 0.0f, 1.0f};
    gemmac_sampler_params p = plain_params();
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 1.0f;
    p.repeat_last_n = -1;                      /* every accepted token */
    gemmac_sampler *s = make(&p, N_ELEMS(l));
    const gemmac_token hist[] = {2, 2, 2, 4, 5};
    for (int i = 0; i < N_ELEMS(hist); i++) gemmac_sampler_accept(s, hist[i]);
    for (int i = 0; i < 200; i++) gemmac_sampler_accept(s, 1);   /* far past 64 */
    /* logit -= count * 0.5 + 1 (all exact in binary):
     * 2: 3 - (1.5 + 1) = .5;  4: 0 - 1.5 = -1.5;  5: 1 - 1.5 = -.5;  1: -1 - (100 + 1) = -102;
     * 0 and 3 unseen. With repeat_last_n = -1 token 2 still counts after 200 more tokens. */
    gm_sample_cand out[8];
    float got[6] = {0};
    assert_int_equal(gm_sampler_candidates(s, l, out, 8), 6);
    for (int i = 0; i < 6; i++) got[out[i].id] = out[i].logit;
    assert_true(got[0] == 2.0f && got[1] == -102.0f && got[2] == 0.5f && got[3] == -2.0f &&
                got[4] == -1.5f && got[5] == -0.5f);
    gemmac_sampler_free(s);

    /* The same history with the default window of 64: only token 1 (64 times) is left in it. */
    p.repeat_last_n = 64;
    s = make(&p, N_ELEMS(l));
    for (int i = 0; i < N_ELEMS(hist); i++) gemmac_sampler_accept(s, hist[i]);
    for (int i = 0; i < 200; i++) gemmac_sampler_accept(s, 1);
    assert_int_equal(gm_sampler_candidates(s, l, out, 8), 6);
    for (int i = 0; i < 6; i++) got[out[i].id] = out[i].logit;
    assert_true(got[0] == 2.0f && got[1] == -1.0f - (64 * 0.5f + 1.0f) && got[2] == 3.0f &&
                got[3] == -2.0f && got[4] == 0.0f && got[5] == 1.0f);
    gemmac_sampler_free(s);

    /* repeat_last_n = 0: penalties off whatever their values. */
    p.repeat_last_n = 0;
    p.repeat_penalty = 3.0f;
    s = make(&p, N_ELEMS(l));
    for (int i = 0; i < N_ELEMS(hist); i++) gemmac_sampler_accept(s, hist[i]);
    assert_int_equal(gm_sampler_candidates(s, l, out, 8), 6);
    for (int i = 0; i < 6; i++) assert_true(out[i].logit == l[out[i].id]);
    gemmac_sampler_free(s);
}

static void test_penalty_moves_greedy(void **state) {
    (void)state;
    gemmac_sampler_params p = gemmac_sampler_default_params();
    p.temp = 0.0f;
    p.repeat_penalty = 1.1f;
    const float pos[] = {3.0f, 2.9f, 0.0f};   /* 3 / 1.1 = 2.73 < 2.9 */
    const float neg[] = {-1.0f, -1.05f, -9.0f};   /* -1 * 1.1 = -1.1 < -1.05 */
    gemmac_sampler *s = make(&p, 3);
    assert_int_equal(gemmac_sampler_sample(s, pos), 0);
    assert_int_equal(gemmac_sampler_sample(s, neg), 0);
    gemmac_sampler_accept(s, 0);
    assert_int_equal(gemmac_sampler_sample(s, pos), 1);
    assert_int_equal(gemmac_sampler_sample(s, neg), 1);
    gemmac_sampler_free(s);
}

static void test_penalised_tie_goes_to_lowest_id(void **state) {
    (void)state;
    /* Token 0 is penalised from 2.0 down to 1.0 and then ties tokens 1 and 2: lowest id, 0. */
    const float l[] = {2.0f, 1.0f, 1.0f};
    gemmac_sampler_params p = gemmac_sampler_default_params();
    p.temp = 0.0f;
    p.repeat_penalty = 2.0f;
    gemmac_sampler *s = make(&p, 3);
    gemmac_sampler_accept(s, 0);
    assert_int_equal(gemmac_sampler_sample(s, l), 0);
    gemmac_sampler_free(s);
    /* The same tie, seen by top-k = 1 (heap path). */
    p.temp = 1.0f;
    p.top_k = 1;
    s = make(&p, 3);
    gemmac_sampler_accept(s, 0);
    const gemmac_token want[] = {0};
    expect_survivors(s, l, want, 1);
    gemmac_sampler_free(s);
}

/* Top-k when most tokens are penalised: the pass over the row finds fewer than k unpenalised ones
 * and the penalised tokens fill the heap. Repeat 2, history {0, 2, 3, 5}:
 *   0: 2 -> 1.0   1: -1 (free)   2: 3 -> 1.5   3: -2 -> -4   4: 0 (free)   5: 1 -> 0.5
 * Order: 2 (1.5), 0 (1.0), 5 (0.5), 4 (0), 1 (-1), 3 (-4). */
static void test_top_k_mostly_penalised(void **state) {
    (void)state;
    const float l[] = {2.0f, -1.0f, 3.0f, -2.0f, 0.0f, 1.0f};
    const gemmac_token order[] = {2, 0, 5, 4, 1, 3};
    const int32_t ks[] = {1, 2, 4, 5, 0};
    const int32_t kept[] = {1, 2, 4, 5, 6};
    for (int i = 0; i < N_ELEMS(ks); i++) {
        gemmac_sampler_params p = plain_params();
        p.repeat_penalty = 2.0f;
        p.top_k = ks[i];
        gemmac_sampler *s = make(&p, N_ELEMS(l));
        const gemmac_token hist[] = {0, 2, 3, 5};
        for (int j = 0; j < N_ELEMS(hist); j++) gemmac_sampler_accept(s, hist[j]);
        expect_survivors(s, l, order, kept[i]);
        gemmac_sampler_free(s);
    }
}

/* After reset a used sampler behaves exactly like a fresh one: same survivors and logits on every
 * path (heap, whole row, greedy) through a new history that wraps the window, and the same draws. */
static void test_reset_equals_fresh(void **state) {
    (void)state;
    const float l[] = {2.0f, -1.0f, 3.0f, -2.0f, 0.0f, 1.0f, 0.5f, -0.5f};
    const int32_t n = N_ELEMS(l);
    const int32_t ks[] = {5, 0, 40};
    for (int v = 0; v < 4; v++) {
        gemmac_sampler_params p = plain_params();
        p.repeat_penalty = 1.5f;
        p.frequency_penalty = 0.25f;
        p.presence_penalty = 0.125f;
        p.repeat_last_n = 3;
        p.top_k = ks[v % 3];
        if (v == 3) p.temp = 0.0f;
        gemmac_sampler *used = make(&p, n);
        for (int i = 0; i < 10; i++) gemmac_sampler_accept(used, (i * 5) % n);
        (void)gemmac_sampler_sample(used, l);
        gemmac_sampler_reset(used);
        gemmac_sampler *fresh = make(&p, n);
        const gemmac_token hist[] = {2, 2, 5, 5, 7, 0, 2};
        for (int j = 0; j <= N_ELEMS(hist); j++) {
            gm_sample_cand a[8], b[8];
            int32_t na = gm_sampler_candidates(used, l, a, 8), nb = gm_sampler_candidates(fresh, l, b, 8);
            assert_int_equal(na, nb);
            for (int32_t i = 0; i < na; i++) {
                assert_int_equal(a[i].id, b[i].id);
                assert_true(a[i].logit == b[i].logit && a[i].p == b[i].p);
            }
            assert_int_equal(gemmac_sampler_sample(used, l), gemmac_sampler_sample(fresh, l));
            if (j < N_ELEMS(hist)) {
                gemmac_sampler_accept(used, hist[j]);
                gemmac_sampler_accept(fresh, hist[j]);
            }
        }
        gemmac_sampler_free(used);
        gemmac_sampler_free(fresh);
    }
}

/* Penalties on a full-size row under the default chain (heap path): the penalised tokens are the
 * current best ones, so the penalty decides who survives. Reference penalises independently. */
static void test_penalties_big_vocab_vs_reference(void **state) {
    (void)state;
    float *l = malloc(BIG_VOCAB * sizeof *l), *pl = malloc(BIG_VOCAB * sizeof *pl);
    assert_non_null(l);
    assert_non_null(pl);
    gm_pcg32 r;
    gm_pcg32_seed(&r, 21, 21);
    for (int32_t i = 0; i < BIG_VOCAB; i++) l[i] = gauss(&r);
    l[10] = 12.0f;
    l[20] = 11.5f;
    l[30] = -3.0f;
    l[40] = NAN;
    const gemmac_token hist[] = {10, 10, 20, 30, 40, 10, 262143};
    gemmac_sampler_params variants[3];
    for (int v = 0; v < 3; v++) {
        variants[v] = gemmac_sampler_default_params();
        variants[v].repeat_penalty = 1.3f;
        variants[v].presence_penalty = 0.5f;
        variants[v].frequency_penalty = 0.25f;
        variants[v].seed = 1;
    }
    variants[1].top_k = 0;                     /* whole-row path */
    variants[2].temp = 0.0f;                   /* greedy */
    for (int v = 0; v < 3; v++) {
        gemmac_sampler_params p = variants[v];
        gemmac_sampler *s = make(&p, BIG_VOCAB);
        for (int i = 0; i < N_ELEMS(hist); i++) gemmac_sampler_accept(s, hist[i]);
        memcpy(pl, l, BIG_VOCAB * sizeof *pl);
        for (int32_t t = 0; t < BIG_VOCAB; t++) {
            int c = 0;
            for (int i = 0; i < N_ELEMS(hist); i++) c += hist[i] == t;
            if (!c) continue;
            float x = pl[t] != pl[t] ? -INFINITY : pl[t];
            x = x <= 0.0f ? x * p.repeat_penalty : x / p.repeat_penalty;
            pl[t] = x - ((float)c * p.frequency_penalty + p.presence_penalty);
        }
        if (p.temp > 0.0f) {
            check_against_ref(s, &p, l, pl, BIG_VOCAB);
        } else {
            int32_t best = 0;
            for (int32_t t = 1; t < BIG_VOCAB; t++)
                if (pl[t] > pl[best]) best = t;
            assert_int_equal(gemmac_sampler_sample(s, l), best);
            assert_int_not_equal(best, 10);    /* 12/1.3 - 1.25 = 7.98: pushed off the top */
            assert_int_equal(best, 20);        /* 11.5/1.3 - .75 = 8.1 beats N(0,1) (max ~5) */
        }
        gemmac_sampler_free(s);
    }
    free(l);
    free(pl);
}

/* ---- temperature and the draw ---- */

static void test_temperature_empirical(void **state) {
    (void)state;
    enum { DRAWS = 20000 };
    const double base[] = {0.4, 0.3, 0.2, 0.1};
    const float l[] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    const float temps[] = {0.5f, 1.0f, 2.0f};
    for (int t = 0; t < N_ELEMS(temps); t++) {
        /* q_i ~ base_i^(1/T): T = .5 sharpens to .533 .3 .133 .033, T = 2 flattens to
         * .325 .282 .230 .163. */
        double q[4], z = 0.0;
        for (int i = 0; i < 4; i++) z += (q[i] = pow(base[i], 1.0 / temps[t]));
        for (int i = 0; i < 4; i++) q[i] /= z;
        gemmac_sampler_params p = plain_params();
        p.temp = temps[t];
        p.seed = 2024;
        gemmac_sampler *s = make(&p, 4);
        gm_sample_cand out[4];
        assert_int_equal(gm_sampler_candidates(s, l, out, 4), 4);
        for (int i = 0; i < 4; i++) {
            assert_int_equal(out[i].id, i);
            assert_true(fabs(out[i].p - q[i]) < P_TOL);
        }
        int counts[4] = {0};
        for (int i = 0; i < DRAWS; i++) counts[gemmac_sampler_sample(s, l)]++;
        double fit = chi2(counts, q, 4, DRAWS), vs_base = chi2(counts, base, 4, DRAWS);
        assert_true(fit < CHI2_DF3_999);
        /* And it is not the untempered distribution: expected chi2 against base is ~2200 (T = .5)
         * and ~1200 (T = 2) at 20000 draws; 100 leaves a wide margin. */
        if (temps[t] != 1.0f) assert_true(vs_base > 100.0);
        if (temps[t] < 1.0f) assert_true(counts[0] > 0.5 * DRAWS);
        if (temps[t] > 1.0f) assert_true(counts[0] < 0.35 * DRAWS);
        gemmac_sampler_free(s);
    }
}

/* Default chain on a 1000-token row: survivors derived by hand, then the draws follow their
 * probabilities. */
static void test_default_chain_draws(void **state) {
    (void)state;
    enum { N = 1000, DRAWS = 20000 };
    float l[N];
    gm_pcg32 r;
    gm_pcg32_seed(&r, 77, 77);
    for (int i = 0; i < N; i++) l[i] = -5.0f + 5.0f * (float)gm_pcg32_unit(&r);   /* [-5, 0) */
    l[10] = 5.0f;
    l[20] = 4.5f;
    l[30] = 4.0f;
    l[40] = 3.0f;
    l[50] = 1.5f;
    /* top-k 40: the five above plus 35 of the bulk (each < 0). top-p .95: e^5, e^4.5, e^4, e^3, e^1.5
     * sum to 317.7 against z <= 317.7 + 35 = 352.7, so the five hold >= .90 and the cut lands in the
     * bulk or at 50. min-p .05: logit >= 5 + ln .05 = 2.004 keeps 10, 20, 30, 40 (3.0) and drops 50
     * (1.5) and the bulk. Temperature .8 then weighs e^((l - 5) / .8): 1, e^-.625, e^-1.25, e^-2.5. */
    gemmac_sampler_params p = gemmac_sampler_default_params();
    p.seed = 31337;
    gemmac_sampler *s = make(&p, N);
    const gemmac_token want[] = {10, 20, 30, 40};
    expect_survivors(s, l, want, 4);
    double q[4], z = 0.0;
    const double lw[] = {5.0, 4.5, 4.0, 3.0};
    for (int i = 0; i < 4; i++) z += (q[i] = exp((lw[i] - 5.0) / 0.8));
    for (int i = 0; i < 4; i++) q[i] /= z;
    int counts[4] = {0};
    for (int i = 0; i < DRAWS; i++) {
        gemmac_token t = gemmac_sampler_sample(s, l);
        int k = t == 10 ? 0 : t == 20 ? 1 : t == 30 ? 2 : t == 40 ? 3 : -1;
        assert_true(k >= 0);
        counts[k]++;
    }
    assert_true(chi2(counts, q, 4, DRAWS) < CHI2_DF3_999);
    gemmac_sampler_free(s);
}

/* ---- NaN and infinities ---- */

static void test_nan_inf_logits(void **state) {
    (void)state;
    gemmac_sampler_params filt = gemmac_sampler_default_params(), plain = plain_params(),
                          greedy = gemmac_sampler_default_params();
    filt.seed = 3;
    greedy.temp = 0.0f;
    const gemmac_sampler_params *all_params[] = {&filt, &plain, &greedy};

    /* NaN reads as -inf: never drawn, whatever the filters. */
    const float some_nan[] = {NAN, 1.0f, NAN, 0.5f};
    for (int v = 0; v < 3; v++) {
        gemmac_sampler *s = make(all_params[v], 4);
        for (int i = 0; i < 2000; i++) {
            gemmac_token t = gemmac_sampler_sample(s, some_nan);
            assert_true(t == 1 || t == 3);
        }
        gemmac_sampler_free(s);
    }

    /* Nothing finite: token 0, deterministically, on every path. */
    const float all_nan[] = {NAN, NAN, NAN, NAN};
    const float all_ninf[] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    const float mixed[] = {-INFINITY, NAN, -INFINITY, NAN};
    const float *rows[] = {all_nan, all_ninf, mixed};
    for (int v = 0; v < 3; v++) {
        for (int k = 0; k < 3; k++) {
            gemmac_sampler *s = make(all_params[v], 4);
            for (int i = 0; i < 50; i++) assert_int_equal(gemmac_sampler_sample(s, rows[k]), 0);
            gm_sample_cand out[4];
            int32_t n = gm_sampler_candidates(s, rows[k], out, 4);
            assert_true(n >= 1);
            assert_int_equal(out[0].id, 0);
            assert_true(out[0].p == 1.0f);
            gemmac_sampler_free(s);
        }
    }

    /* +inf: the +inf tokens share all the probability, equally. */
    const float pinf[] = {1.0f, INFINITY, 2.0f, INFINITY};
    gemmac_sampler *s = make(&filt, 4);
    const gemmac_token two[] = {1, 3};
    expect_survivors(s, pinf, two, 2);
    int hits[4] = {0};
    for (int i = 0; i < 4000; i++) hits[gemmac_sampler_sample(s, pinf)]++;
    assert_int_equal(hits[0] + hits[2], 0);
    assert_true(hits[1] > 1800 && hits[3] > 1800);   /* Binomial(4000, .5): sd 32 */
    gemmac_sampler_free(s);
    s = make(&plain, 4);
    for (int i = 0; i < 1000; i++) {
        gemmac_token t = gemmac_sampler_sample(s, pinf);
        assert_true(t == 1 || t == 3);
    }
    gemmac_sampler_free(s);

    /* A single finite token among -inf: always it. */
    const float one[] = {-INFINITY, -INFINITY, 5.0f, -INFINITY};
    for (int v = 0; v < 3; v++) {
        s = make(all_params[v], 4);
        for (int i = 0; i < 100; i++) assert_int_equal(gemmac_sampler_sample(s, one), 2);
        gemmac_sampler_free(s);
    }

    /* Extreme finite logits and a huge negative presence penalty must not produce NaN. */
    gemmac_sampler_params ext = gemmac_sampler_default_params();
    ext.presence_penalty = -1e38f;
    ext.repeat_penalty = 0.5f;
    ext.seed = 9;
    const float big[] = {FLT_MAX, -FLT_MAX, FLT_MAX, 0.0f};
    s = make(&ext, 4);
    gemmac_sampler_accept(s, 0);
    gemmac_sampler_accept(s, 1);
    for (int i = 0; i < 200; i++) {
        gemmac_token t = gemmac_sampler_sample(s, big);
        assert_true(t == 0 || t == 2);
    }
    gemmac_sampler_free(s);
}

/* ---- sampling from a row's best logits ---- */

enum { TOP_N = GEMMAC_TOP_LOGITS, TOP_DRAWS = 50 };

typedef struct top_case {
    gemmac_sampler_params p;
    int want;                        /* draws gemmac_sampler_top_exact allows: 1 all, 0 none, -1 any */
} top_case;

static top_case top_case_of(float temp, int32_t top_k, float top_p, float min_p, float repeat, float freq,
                            float presence, int32_t last_n, int want) {
    gemmac_sampler_params p = gemmac_sampler_default_params();
    p.temp = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repeat_penalty = repeat;
    p.frequency_penalty = freq;
    p.presence_penalty = presence;
    p.repeat_last_n = last_n;
    return (top_case){p, want};
}

/* Greedy, top-k 1 / 40 / 256 with various top-p, min-p and temperatures, and the penalties (repeat 1.3,
 * frequency .2, presence .5) with windows whose distinct tokens (P) always, sometimes or never leave room
 * for k + P <= 256. */
static int top_cases(top_case *c) {
    int n = 0;
    c[n++] = top_case_of(0.0f, 40, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f, 64, 1);
    c[n++] = top_case_of(-1.0f, 0, 1.0f, 0.0f, 1.3f, 0.2f, 0.5f, 64, 1);      /* greedy: k = 1 */
    c[n++] = top_case_of(0.8f, 1, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f, 64, 1);
    c[n++] = top_case_of(0.8f, 40, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f, 64, 1);    /* the defaults */
    c[n++] = top_case_of(1.5f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 1);
    c[n++] = top_case_of(1.0f, 256, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 1);
    c[n++] = top_case_of(0.7f, 256, 1.0f, 0.01f, 1.0f, 0.0f, 0.0f, 64, 1);
    c[n++] = top_case_of(3.0f, 256, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 1);
    c[n++] = top_case_of(3.0f, 255, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 1);    /* cuts the 256th */
    c[n++] = top_case_of(1.2f, 40, 0.95f, 0.05f, 1.3f, 0.2f, 0.5f, 64, 1);
    c[n++] = top_case_of(2.0f, 40, 0.99f, 0.0f, 1.3f, 0.2f, 0.5f, -1, 1);     /* P <= 10 + 50 */
    c[n++] = top_case_of(1.0f, 200, 1.0f, 0.0f, 1.3f, 0.0f, 0.0f, 32, 1);     /* P <= 32 */
    c[n++] = top_case_of(0.5f, 100, 0.5f, 0.2f, 1.3f, 0.2f, 0.5f, 64, 1);
    c[n++] = top_case_of(4.0f, 200, 1.0f, 0.0f, 1.3f, 0.2f, 0.5f, -1, -1);    /* P grows past 56 */
    c[n++] = top_case_of(1.0f, 256, 0.95f, 0.0f, 1.0f, 0.2f, 0.0f, 64, 0);    /* history: P >= 1 */
    c[n++] = top_case_of(1.0f, 0, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f, 64, 0);     /* keeps all */
    c[n++] = top_case_of(1.0f, 40, 0.95f, 0.05f, 1.0f, 0.0f, -0.5f, 64, 0);   /* presence raises */
    return n;
}

/* One row under one parameter set: two samplers of the same seed and history, one sampling the whole row
 * and one its TOP_N best (gm_top_logits_row) whenever gemmac_sampler_top_exact allows it (else the whole
 * row too, as a context falls back); each drawn token is accepted into both so the penalties evolve.
 * Tokens and generator states must match after every draw. Returns how many draws used the best logits;
 * *advanced counts draws that advanced the generator. */
static int top_vs_full(const gemmac_sampler_params *p, const float *row, int32_t n_vocab, int *advanced) {
    gemmac_sampler *full = make(p, n_vocab), *top = make(p, n_vocab);
    gemmac_token ids[TOP_N];
    float vals[TOP_N];
    const int32_t n = n_vocab < TOP_N ? n_vocab : TOP_N;
    gm_top_logits_row(row, n_vocab, n, ids, vals);
    /* A history that penalises the row's current favourites (ids[0] three times) and some others. */
    const gemmac_token hist[] = {ids[0], ids[1], ids[0], ids[3], ids[7], 5, n_vocab - 1, ids[0], ids[20], 17};
    for (int i = 0; i < N_ELEMS(hist); i++) {
        gemmac_sampler_accept(full, hist[i]);
        gemmac_sampler_accept(top, hist[i]);
    }
    int exact = 0;
    for (int d = 0; d < TOP_DRAWS; d++) {
        const uint64_t before = gm_sampler_rng_state(full);
        const gemmac_token a = gemmac_sampler_sample(full, row);
        gemmac_token b;
        if (gemmac_sampler_top_exact(top, n)) {
            b = gemmac_sampler_sample_top(top, ids, vals, n);
            exact++;
        } else {
            b = gemmac_sampler_sample(top, row);
        }
        assert_int_equal(b, a);
        assert_true(gm_sampler_rng_state(top) == gm_sampler_rng_state(full));
        *advanced += gm_sampler_rng_state(full) != before;
        gemmac_sampler_accept(full, a);
        gemmac_sampler_accept(top, b);
    }
    gemmac_sampler_free(full);
    gemmac_sampler_free(top);
    return exact;
}

/* Rows with what the reading has to agree on: coarse quantisation (ties everywhere, also across the
 * 256th place), NaN, +inf (read as FLT_MAX), -inf, -0.0 beside 0.0, a plateau of 300 equal maxima, a
 * row of almost nothing finite and one of nothing finite. */
static void fill_top_row(float *l, int32_t n, int kind, gm_pcg32 *r) {
    for (int32_t i = 0; i < n; i++) {
        float g = gauss(r);
        switch (kind) {
        case 0: l[i] = g * 3.0f; break;
        case 1: l[i] = roundf(g * 2.0f) / 2.0f; break;
        case 2: l[i] = roundf(g * 4.0f) / 2.0f; break;
        case 3: l[i] = g - 4.0f; break;
        case 4: l[i] = -INFINITY; break;
        case 5: l[i] = i % 2 ? NAN : -INFINITY; break;
        default: l[i] = g * 8.0f; break;
        }
    }
    if (kind == 2) {
        int32_t zeros = 0;
        for (int32_t i = 0; i < n; i++)
            if (l[i] == 0.0f && zeros++ % 2) l[i] = -0.0f;
        assert_true(zeros > 10);
        l[n / 3] = INFINITY;
        l[n / 2] = INFINITY;
        l[n / 5] = NAN;
        l[n / 7] = -INFINITY;
        for (int32_t i = 0; i < 40; i++) l[(i * 7919) % n] = NAN;
    }
    if (kind == 3)
        for (int32_t i = 0; i < 300; i++) l[(i * 4099 + 11) % n] = 1.0f;
    if (kind == 4)
        for (int32_t i = 0; i < 10; i++) l[(i * 613 + 3) % n] = (float)(i % 4) - 1.5f;
}

static void test_sample_top_matches_full_row(void **state) {
    (void)state;
    enum { N = 5000, KINDS = 7 };
    float *l = malloc(N * sizeof *l);
    assert_non_null(l);
    top_case cases[32];
    const int n_cases = top_cases(cases);
    gm_pcg32 r;
    gm_pcg32_seed(&r, 404, 1);
    int exact = 0, advanced = 0, mixed = 0;
    for (int kind = 0; kind < KINDS; kind++) {
        fill_top_row(l, N, kind, &r);
        for (int c = 0; c < n_cases; c++) {
            gemmac_sampler_params p = cases[c].p;
            p.seed = 1000u + (uint64_t)(kind * 100 + c);
            int e = top_vs_full(&p, l, N, &advanced);
            if (cases[c].want == 1) assert_int_equal(e, TOP_DRAWS);
            if (cases[c].want == 0) assert_int_equal(e, 0);
            if (cases[c].want == -1) mixed += e > 0 && e < TOP_DRAWS;
            exact += e;
        }
    }
    /* The comparison has teeth: most draws went through the best logits and many consumed the generator;
     * the growing window really crossed k + P = 256 in the mixed case. */
    assert_true(exact >= KINDS * (n_cases - 4) * TOP_DRAWS);
    assert_true(advanced > exact / 2);
    assert_true(mixed >= 1);
    free(l);
}

static void test_sample_top_matches_full_row_big_vocab(void **state) {
    (void)state;
    float *l = malloc(BIG_VOCAB * sizeof *l);
    assert_non_null(l);
    top_case cases[32];
    const int n_cases = top_cases(cases);
    gm_pcg32 r;
    gm_pcg32_seed(&r, 405, 1);
    const int kinds[] = {2, 3};
    int advanced = 0;
    for (int k = 0; k < N_ELEMS(kinds); k++) {
        fill_top_row(l, BIG_VOCAB, kinds[k], &r);
        for (int c = 0; c < n_cases; c++) {
            if (cases[c].want == 0) continue;  /* the whole row twice: nothing new */
            gemmac_sampler_params p = cases[c].p;
            p.seed = 77u + (uint64_t)c;
            int e = top_vs_full(&p, l, BIG_VOCAB, &advanced);
            if (cases[c].want == 1) assert_int_equal(e, TOP_DRAWS);
        }
    }
    assert_true(advanced > 100);
    free(l);
}

static void test_top_exact_conditions(void **state) {
    (void)state;
    enum { N = 5000 };
    gemmac_sampler_params p = gemmac_sampler_default_params();     /* top_k 40, penalties neutral */
    gemmac_sampler *s = make(&p, N);
    assert_false(gemmac_sampler_top_exact(NULL, 256));
    assert_false(gemmac_sampler_top_exact(s, 0));
    assert_false(gemmac_sampler_top_exact(s, -1));
    assert_true(gemmac_sampler_top_exact(s, 256));
    assert_true(gemmac_sampler_top_exact(s, 40));
    assert_false(gemmac_sampler_top_exact(s, 39));
    for (int i = 0; i < 100; i++) gemmac_sampler_accept(s, i);     /* neutral penalties: P = 0 */
    assert_true(gemmac_sampler_top_exact(s, 40));
    gemmac_sampler_free(s);

    /* top_k <= 0 or >= n_vocab keeps every token: top-p needs the whole row, whatever n. */
    const int32_t keep_all[] = {0, -1, N, N + 5};
    for (int i = 0; i < N_ELEMS(keep_all); i++) {
        p.top_k = keep_all[i];
        s = make(&p, N);
        assert_false(gemmac_sampler_top_exact(s, 256));
        assert_false(gemmac_sampler_top_exact(s, N));
        gemmac_sampler_free(s);
    }
    /* ... but greedy needs one token, whatever top_k. */
    p.temp = 0.0f;
    s = make(&p, N);
    assert_true(gemmac_sampler_top_exact(s, 1));
    gemmac_sampler_free(s);
    p.temp = 0.8f;

    /* top_k above n; top_k above the heap's 4096 (the whole row's order is quickselect's then). */
    p.top_k = 300;
    s = make(&p, N);
    assert_false(gemmac_sampler_top_exact(s, 256));
    assert_true(gemmac_sampler_top_exact(s, 300));
    gemmac_sampler_free(s);
    p.top_k = 4097;
    s = make(&p, N);
    assert_false(gemmac_sampler_top_exact(s, N - 1));
    gemmac_sampler_free(s);
    p.top_k = 4096;
    s = make(&p, N);
    assert_true(gemmac_sampler_top_exact(s, 4096));
    gemmac_sampler_free(s);

    /* Penalties that can raise a logit: not exact once they touch a token; nothing to touch yet, or
     * repeat_last_n = 0, is exact. */
    gemmac_sampler_params raise[3] = {p, p, p};
    raise[0].presence_penalty = -0.5f;
    raise[1].frequency_penalty = -0.1f;
    raise[2].repeat_penalty = 0.9f;
    for (int i = 0; i < 3; i++) {
        raise[i].top_k = 40;
        s = make(&raise[i], N);
        assert_true(gemmac_sampler_top_exact(s, 256));
        gemmac_sampler_accept(s, 7);
        assert_false(gemmac_sampler_top_exact(s, 256));
        assert_false(gemmac_sampler_top_exact(s, N));
        gemmac_sampler_reset(s);
        assert_true(gemmac_sampler_top_exact(s, 256));
        gemmac_sampler_free(s);
        raise[i].repeat_last_n = 0;
        s = make(&raise[i], N);
        gemmac_sampler_accept(s, 7);
        assert_true(gemmac_sampler_top_exact(s, 256));
        gemmac_sampler_free(s);
    }

    /* k + P <= n with P the distinct tokens in the window: repeats do not count, tokens leaving the
     * window stop counting, reset forgets them. */
    p.top_k = 40;
    p.repeat_penalty = 1.3f;
    p.frequency_penalty = 0.2f;
    p.presence_penalty = 0.5f;
    p.repeat_last_n = 300;
    s = make(&p, N);
    for (int i = 0; i < 216; i++) gemmac_sampler_accept(s, 1000 + i);
    assert_true(gemmac_sampler_top_exact(s, 256));                 /* 40 + 216 */
    for (int i = 0; i < 50; i++) gemmac_sampler_accept(s, 1000 + i % 7);
    assert_true(gemmac_sampler_top_exact(s, 256));                 /* still 216 distinct */
    gemmac_sampler_accept(s, 3);
    assert_false(gemmac_sampler_top_exact(s, 256));                /* 217 */
    assert_true(gemmac_sampler_top_exact(s, 257));
    /* 267 tokens so far; 33 more of token 3 fill the window of 300 (still 217 distinct). The next 7 push
     * out 1000..1006, which stay in the window through their repeats; the 13 after them push out
     * 1007..1019, gone: 217 - 13 = 204. */
    for (int i = 0; i < 33 + 7; i++) gemmac_sampler_accept(s, 3);
    assert_false(gemmac_sampler_top_exact(s, 256));
    assert_true(gemmac_sampler_top_exact(s, 257));
    for (int i = 0; i < 13; i++) gemmac_sampler_accept(s, 3);
    assert_true(gemmac_sampler_top_exact(s, 256));
    assert_false(gemmac_sampler_top_exact(s, 243));
    assert_true(gemmac_sampler_top_exact(s, 244));                 /* 40 + 204 */
    gemmac_sampler_reset(s);
    assert_true(gemmac_sampler_top_exact(s, 40));
    gemmac_sampler_free(s);

    /* Greedy with penalties: k = 1. */
    p.temp = 0.0f;
    p.top_k = 0;
    s = make(&p, N);
    for (int i = 0; i < 255; i++) gemmac_sampler_accept(s, i);
    assert_true(gemmac_sampler_top_exact(s, 256));
    gemmac_sampler_accept(s, 255);
    assert_false(gemmac_sampler_top_exact(s, 256));
    gemmac_sampler_free(s);
}

/* The candidates' order does not matter: shuffled or reversed, the same tokens and generator states, in
 * the exact cases and in the approximate ones. */
static void test_sample_top_any_order(void **state) {
    (void)state;
    enum { N = 5000 };
    float *l = malloc(N * sizeof *l);
    assert_non_null(l);
    gm_pcg32 r;
    gm_pcg32_seed(&r, 406, 1);
    fill_top_row(l, N, 2, &r);                 /* ties, NaN, +-inf, -0 */
    gemmac_token ids[TOP_N], sh_ids[TOP_N], rev_ids[TOP_N];
    float vals[TOP_N], sh_vals[TOP_N], rev_vals[TOP_N];
    gm_top_logits_row(l, N, TOP_N, ids, vals);
    for (int i = 0; i < TOP_N; i++) {
        sh_ids[i] = ids[i];
        sh_vals[i] = vals[i];
        rev_ids[i] = ids[TOP_N - 1 - i];
        rev_vals[i] = vals[TOP_N - 1 - i];
    }
    for (int i = TOP_N - 1; i > 0; i--) {       /* Fisher-Yates */
        int j = (int)(gm_pcg32_next(&r) % (uint32_t)(i + 1));
        gemmac_token t = sh_ids[i];
        sh_ids[i] = sh_ids[j];
        sh_ids[j] = t;
        float v = sh_vals[i];
        sh_vals[i] = sh_vals[j];
        sh_vals[j] = v;
    }
    int moved = 0;
    for (int i = 0; i < TOP_N; i++) moved += sh_ids[i] != ids[i];
    assert_true(moved > TOP_N / 2);
    top_case cases[32];
    const int n_cases = top_cases(cases);
    int advanced = 0;
    for (int c = 0; c < n_cases; c++) {
        gemmac_sampler_params p = cases[c].p;
        p.seed = 9u + (uint64_t)c;
        gemmac_sampler *a = make(&p, N), *b = make(&p, N), *rv = make(&p, N);
        for (int i = 0; i < 5; i++) {
            gemmac_sampler_accept(a, ids[i * 2]);
            gemmac_sampler_accept(b, ids[i * 2]);
            gemmac_sampler_accept(rv, ids[i * 2]);
        }
        for (int d = 0; d < TOP_DRAWS; d++) {
            const uint64_t before = gm_sampler_rng_state(a);
            gemmac_token ta = gemmac_sampler_sample_top(a, ids, vals, TOP_N);
            assert_int_equal(gemmac_sampler_sample_top(b, sh_ids, sh_vals, TOP_N), ta);
            assert_int_equal(gemmac_sampler_sample_top(rv, rev_ids, rev_vals, TOP_N), ta);
            assert_true(gm_sampler_rng_state(a) == gm_sampler_rng_state(b));
            assert_true(gm_sampler_rng_state(a) == gm_sampler_rng_state(rv));
            advanced += gm_sampler_rng_state(a) != before;
            gemmac_sampler_accept(a, ta);
            gemmac_sampler_accept(b, ta);
            gemmac_sampler_accept(rv, ta);
        }
        gemmac_sampler_free(a);
        gemmac_sampler_free(b);
        gemmac_sampler_free(rv);
    }
    assert_true(advanced > 200);
    free(l);
}

/* Hand-checked candidates: NULL and empty input, ids outside the vocabulary, greedy over penalised
 * candidates (ties to the lower id), nothing finite, and the approximation (top_k 0) as a distribution. */
static void test_sample_top_edges(void **state) {
    (void)state;
    gemmac_sampler_params p = gemmac_sampler_default_params();
    p.seed = 5;
    gemmac_sampler *s = make(&p, 10);
    const gemmac_token ids[] = {4, 6};
    const float vals[] = {1.0f, 2.0f};
    assert_int_equal(gemmac_sampler_sample_top(NULL, ids, vals, 2), 0);
    assert_int_equal(gemmac_sampler_sample_top(s, NULL, vals, 2), 0);
    assert_int_equal(gemmac_sampler_sample_top(s, ids, NULL, 2), 0);
    assert_int_equal(gemmac_sampler_sample_top(s, ids, vals, 0), 0);
    assert_int_equal(gemmac_sampler_sample_top(s, ids, vals, -3), 0);
    const gemmac_token bad[] = {-1, 10, 1000};
    const float bad_vals[] = {5.0f, 6.0f, 7.0f};
    assert_int_equal(gemmac_sampler_sample_top(s, bad, bad_vals, 3), 0);
    const gemmac_token some_bad[] = {-1, 7, 10};
    for (int i = 0; i < 20; i++) assert_int_equal(gemmac_sampler_sample_top(s, some_bad, bad_vals, 3), 7);
    gemmac_sampler_free(s);

    /* Greedy: the best penalised candidate; repeat 2 turns 4.0 into exactly 2.0. */
    p.temp = 0.0f;
    p.repeat_penalty = 2.0f;
    s = make(&p, 10);
    const gemmac_token g_ids[] = {6, 3, 8, 1};
    const float g_vals[] = {2.0f, 4.0f, 1.0f, NAN};
    assert_int_equal(gemmac_sampler_sample_top(s, g_ids, g_vals, 4), 3);
    gemmac_sampler_accept(s, 3);
    assert_int_equal(gemmac_sampler_sample_top(s, g_ids, g_vals, 4), 3);     /* 2.0 ties 6's: lower id */
    gemmac_sampler_accept(s, 1);
    const gemmac_token g2_ids[] = {6, 3, 2};
    const float g2_vals[] = {2.0f, 4.0f, 2.0f};
    assert_int_equal(gemmac_sampler_sample_top(s, g2_ids, g2_vals, 3), 2);   /* 2 < 3 < 6 at 2.0 */
    const gemmac_token g3_ids[] = {6, 3};
    const float g3_vals[] = {2.5f, 4.0f};
    assert_int_equal(gemmac_sampler_sample_top(s, g3_ids, g3_vals, 2), 6);   /* 4 / 2 < 2.5 */
    const gemmac_token none_ids[] = {9, 5, 7};
    const float none_vals[] = {NAN, -INFINITY, NAN};
    assert_int_equal(gemmac_sampler_sample_top(s, none_ids, none_vals, 3), 5);
    gemmac_sampler_free(s);
    p = gemmac_sampler_default_params();
    p.seed = 6;
    s = make(&p, 10);
    for (int i = 0; i < 20; i++) assert_int_equal(gemmac_sampler_sample_top(s, none_ids, none_vals, 3), 5);
    gemmac_sampler_free(s);

    /* Not exact (top_k 0), so the chain runs over the candidates alone: p(2) = .75, p(9) = .25. */
    enum { DRAWS = 4000 };
    p = plain_params();
    p.seed = 8;
    s = make(&p, 10);
    assert_false(gemmac_sampler_top_exact(s, 2));
    const gemmac_token a_ids[] = {9, 2};
    const float a_vals[] = {logf(0.25f), logf(0.75f)};
    int twos = 0;
    for (int i = 0; i < DRAWS; i++) {
        gemmac_token t = gemmac_sampler_sample_top(s, a_ids, a_vals, 2);
        assert_true(t == 2 || t == 9);
        twos += t == 2;
    }
    assert_true(abs(twos - 3 * DRAWS / 4) < 150);   /* Binomial(4000, .75): sd 27 */
    gemmac_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pcg32_reference_vector),
        cmocka_unit_test(test_default_params),
        cmocka_unit_test(test_invalid_params),
        cmocka_unit_test(test_seed_gives_fixed_sequence),
        cmocka_unit_test(test_random_seed_differs),
        cmocka_unit_test(test_greedy_argmax),
        cmocka_unit_test(test_greedy_big_vocab),
        cmocka_unit_test(test_greedy_vs_brute_force),
        cmocka_unit_test(test_top_k_exact),
        cmocka_unit_test(test_top_k_big_vocab_vs_reference),
        cmocka_unit_test(test_top_p_exact_boundary),
        cmocka_unit_test(test_top_p_uneven),
        cmocka_unit_test(test_top_p_big_vocab_vs_reference),
        cmocka_unit_test(test_min_p_exact),
        cmocka_unit_test(test_top_p_then_min_p),
        cmocka_unit_test(test_min_p_big_vocab_vs_reference),
        cmocka_unit_test(test_default_chain_big_vocab_vs_reference),
        cmocka_unit_test(test_repeat_penalty_window),
        cmocka_unit_test(test_frequency_presence),
        cmocka_unit_test(test_penalty_moves_greedy),
        cmocka_unit_test(test_penalised_tie_goes_to_lowest_id),
        cmocka_unit_test(test_top_k_mostly_penalised),
        cmocka_unit_test(test_reset_equals_fresh),
        cmocka_unit_test(test_penalties_big_vocab_vs_reference),
        cmocka_unit_test(test_temperature_empirical),
        cmocka_unit_test(test_default_chain_draws),
        cmocka_unit_test(test_nan_inf_logits),
        cmocka_unit_test(test_top_exact_conditions),
        cmocka_unit_test(test_sample_top_matches_full_row),
        cmocka_unit_test(test_sample_top_matches_full_row_big_vocab),
        cmocka_unit_test(test_sample_top_any_order),
        cmocka_unit_test(test_sample_top_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
