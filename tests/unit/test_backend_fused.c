/* test_backend_fused.c: the CPU backend's fused ops against the unfused ops they stand for, bit for bit on random
 * input: project (PLAIN, GEGLU, GELU_MUL; with and without its norm; without a residual update and with one, its
 * norm weighted or not, scaled or not; f32, q8_0 and q4_0 weights) against rmsnorm_add, scale, rmsnorm, matmul
 * and gelu_mul, and attention with a gm_attn_prep against rmsnorm and rope followed by attention
 * without one (the per-arch preparations, K = V, a layer reading a cache it does not write, f16, f32 and q8_0
 * caches). The forwards rely on this: a fused CPU forward must give the logits the unfused one gave. Attention over
 * a q8_0 cache: each head row written where its slot is as gm_ref_kv_q8_store makes it, and the outputs those of
 * gm_ref_attention_group_f32 over the rows loaded back (gm_ref_kv_q8_load). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kv/kv_cache.h"
#include "model/backend.h"
#include "quant/quant.h"
#include "ref/ops_ref.h"
#include "test_rng.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static float frand(void) { return test_frand(&rng_state); } /* uniform in [-1, 1) */

static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = scale * frand();
}

/* Sizes: whole q4_0 / q8_0 blocks per row; output widths multiples of 8 so that a batch split into chunks
 * meets the same AVX2 gelu_mul lanes as the unsplit one. */
enum { RESERVED_TOKENS = 16, MAX_ROW = 96, MAX_KEYS = 32, HID = 96, FF = 72, PLE = 24 };

static gm_backend *new_backend(void) {
    gm_backend *b;
    gm_error err = {0};
    assert_int_equal(gm_backend_cpu_new(2, &b, &err), GEMMAC_OK);
    assert_int_equal(b->ops->reserve(b, RESERVED_TOKENS, MAX_ROW, MAX_KEYS, &err), GEMMAC_OK);
    return b;
}

/* ---- project ---- */

/* A [rows][HID] weight of type t made from random floats by the type's reference quantizer; data is malloc'd. */
static gm_tensor weight(gm_type t, int64_t rows) {
    const gm_type_traits *tt = gm_type_traits_of(t);
    const uint64_t rb = gm_row_bytes(tt, HID);
    uint8_t *data = malloc(rb * (uint64_t)rows);
    float row[HID];
    for (int64_t r = 0; r < rows; r++) {
        fill(row, HID, 1.0f);
        if (t == GM_TYPE_F32) memcpy(data + r * rb, row, sizeof row);
        else tt->quantize(row, data + r * rb, HID);
    }
    return (gm_tensor){.name = "w", .type = t, .ne = {HID, rows, 1, 1}, .row_bytes = rb, .data = data};
}

/* The unfused ops of one projection, as the forwards called them before project existed. */
static void project_unfused(gm_backend *b, const gm_proj_args *p, float *xn, float *up) {
    const gm_backend_ops *op = b->ops;
    const int64_t m = p->w[0]->ne[1];
    if (p->res_add) {
        op->rmsnorm_add(b, p->x, p->res_add, p->n, HID, p->res_norm, p->eps);
        if (p->res_scale != 1.0f) op->scale(b, p->x, (int64_t)p->n * HID, p->res_scale);
    }
    const float *x = p->x;
    if (p->norm) {
        op->rmsnorm(b, x, xn, p->n, HID, p->norm, p->eps);
        x = xn;
    }
    switch (p->act) {
    case GM_PROJ_PLAIN:
        for (int i = 0; i < p->n_w; i++) op->matmul(b, p->w[i], x, p->n, p->y[i]);
        break;
    case GM_PROJ_GEGLU:
        op->matmul(b, p->w[0], x, p->n, p->y[0]);
        op->matmul(b, p->w[1], x, p->n, up);
        op->gelu_mul(b, p->y[0], up, p->n * m);
        break;
    case GM_PROJ_GELU_MUL:
        op->matmul(b, p->w[0], x, p->n, p->y[0]);
        op->gelu_mul(b, p->y[0], p->mul, p->n * m);
        break;
    }
}

/* project and its unfused ops on copies of the same input into separate outputs, compared byte for byte, and the
 * x each leaves (unchanged without a residual update). */
static void check_project(gm_backend *b, gm_proj_args p) {
    enum { MAX_N = 40 };
    static float fused[3][MAX_N * FF], unfused[3][MAX_N * FF], xn[MAX_N * HID], up[MAX_N * FF];
    static float xf[MAX_N * HID], xu[MAX_N * HID];
    assert_true(p.n <= MAX_N);
    const size_t x_bytes = sizeof(float) * (size_t)p.n * HID;
    const float *const x0 = p.x;
    memcpy(xf, p.x, x_bytes);
    memcpy(xu, p.x, x_bytes);
    gm_proj_args q = p;
    p.x = xf, q.x = xu;
    for (int i = 0; i < 3; i++) {
        p.y[i] = fused[i];
        q.y[i] = unfused[i];
    }
    b->ops->project(b, &p);
    project_unfused(b, &q, xn, up);
    const int n_out = p.act == GM_PROJ_PLAIN ? p.n_w : 1;
    for (int i = 0; i < n_out; i++)
        assert_memory_equal(fused[i], unfused[i], sizeof(float) * (size_t)p.n * (size_t)p.w[i]->ne[1]);
    assert_memory_equal(xf, xu, x_bytes);
    if (!p.res_add) assert_memory_equal(xf, x0, x_bytes);
}

/* 13 tokens (four-token groups and a remainder in matmul) and 37 (more than reserve() sized: project then goes
 * through in chunks of tokens); each without a residual update and with the four kinds the forwards leave
 * pending (post-norm weight or none, the layer scalar or none). */
static void test_project_equals_unfused_ops(void **state) {
    (void)state;
    gm_backend *b = new_backend();
    static const gm_type types[] = {GM_TYPE_F32, GM_TYPE_Q8_0, GM_TYPE_Q4_0};
    static const int32_t token_counts[] = {13, 37};
    static float x[40 * HID], res[40 * HID], mul[40 * PLE], norm[HID], res_norm[HID];
    fill(x, 40 * HID, 3.0f);
    fill(res, 40 * HID, 5.0f);
    fill(mul, 40 * PLE, 2.0f);
    for (int i = 0; i < HID; i++) norm[i] = 1.0f + frand(), res_norm[i] = 1.0f + frand();
    const struct {
        const float *add, *norm;
        float scale;
    } updates[] = {{NULL, NULL, 1.0f}, {res, res_norm, 1.0f}, {res, NULL, 1.0f}, {res, res_norm, 0.37f},
                   {res, NULL, 1.75f}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        gm_tensor wq = weight(types[ti], 40), wk = weight(types[ti], 24), wv = weight(types[ti], 24);
        gm_tensor gate = weight(types[ti], FF), upw = weight(types[ti], FF), ple_gate = weight(types[ti], PLE);
        for (size_t ni = 0; ni < sizeof token_counts / sizeof token_counts[0]; ni++)
            for (size_t ui = 0; ui < sizeof updates / sizeof updates[0]; ui++)
                for (int with_norm = 0; with_norm < 2; with_norm++) {
                    const gm_proj_args base = {
                        .x = x, .n = token_counts[ni], .res_add = updates[ui].add, .res_norm = updates[ui].norm,
                        .res_scale = updates[ui].scale, .norm = with_norm ? norm : NULL, .eps = 1e-6f,
                    };
                    for (int n_w = 1; n_w <= 3; n_w++) {
                        gm_proj_args p = base;
                        p.act = GM_PROJ_PLAIN, p.n_w = n_w;
                        p.w[0] = &wq, p.w[1] = &wk, p.w[2] = &wv;
                        check_project(b, p);
                    }
                    gm_proj_args p = base;
                    p.act = GM_PROJ_GEGLU, p.n_w = 2, p.w[0] = &gate, p.w[1] = &upw;
                    check_project(b, p);
                    p = base;
                    p.act = GM_PROJ_GELU_MUL, p.mul = mul, p.n_w = 1, p.w[0] = &ple_gate;
                    check_project(b, p);
                }
        free((void *)wq.data), free((void *)wk.data), free((void *)wv.data);
        free((void *)gate.data), free((void *)upw.data), free((void *)ple_gate.data);
    }
    b->ops->free(b);
}

/* ---- attention with a preparation ---- */

enum { N_TOK = 7, N_HEAD = 4, N_HEAD_KV = 2, HD = 32, SLOTS = 16 };

/* One layer's cache of two sequences of SLOTS slots (a ring or not), N_HEAD_KV heads of head_dim values, of any
 * type, built by hand (the cache type's own constructor needs model hyper-parameters); zeroed so that two caches
 * compare equal until written. */
typedef struct test_cache {
    gm_kv_cache kv;
    gm_kv_layer layer;
} test_cache;

static void cache_init(test_cache *c, gm_kv_type type, int32_t head_dim, bool ring) {
    const size_t head_bytes = gm_kv_head_bytes(type, head_dim), slot_bytes = N_HEAD_KV * head_bytes;
    const size_t bytes = 2 * SLOTS * slot_bytes;
    c->layer = (gm_kv_layer){.owned = true, .ring = ring, .n_slots = SLOTS, .row = N_HEAD_KV * head_dim,
                             .type = type, .head_bytes = head_bytes, .slot_bytes = slot_bytes,
                             .k = calloc(1, bytes), .v = calloc(1, bytes)};
    c->kv = (gm_kv_cache){.n_seq = 2, .n_ctx = SLOTS, .n_layer = 1, .type = type, .layer = &c->layer};
}

static void cache_free(test_cache *c) {
    free(c->layer.k);
    free(c->layer.v);
}

static size_t cache_bytes(const test_cache *c) { return 2 * SLOTS * c->layer.slot_bytes; }

/* The batch: sequence 0 at positions 0..3, sequence 1 at 0..2, interleaved. */
static const int32_t batch_pos[N_TOK] = {0, 0, 1, 1, 2, 2, 3}, batch_seq[N_TOK] = {0, 1, 0, 1, 0, 1, 0};

typedef struct qkv {
    float q[N_TOK * N_HEAD * HD], k[N_TOK * N_HEAD_KV * HD], v[N_TOK * N_HEAD_KV * HD], out[N_TOK * N_HEAD * HD];
} qkv;

/* The preparation as the forwards did it with separate ops before attention took it over. */
static void prep_unfused(gm_backend *b, const gm_attn_prep *p, bool write_kv, qkv *t) {
    const gm_backend_ops *op = b->ops;
    const int64_t kv_rows = (int64_t)N_TOK * N_HEAD_KV;
    if (p->q_norm) op->rmsnorm(b, t->q, t->q, (int64_t)N_TOK * N_HEAD, HD, p->q_norm, p->eps);
    op->rope(b, t->q, N_TOK, N_HEAD, HD, batch_pos, p->n_rot, p->base, p->freq_scale, p->freq_factors, p->q_scale);
    if (!write_kv) return;
    if (p->v_from_k) op->rmsnorm(b, t->k, t->v, kv_rows, HD, NULL, p->eps); /* gemma4's K = V layers */
    else if (p->v_norm) op->rmsnorm(b, t->v, t->v, kv_rows, HD, NULL, p->eps);
    if (p->k_norm) op->rmsnorm(b, t->k, t->k, kv_rows, HD, p->k_norm, p->eps);
    op->rope(b, t->k, N_TOK, N_HEAD_KV, HD, batch_pos, p->n_rot, p->base, p->freq_scale, p->freq_factors, 1.0f);
}

/* Attention with prep on (fused, cf) against the unfused preparation and attention without prep on (unfused,
 * cu), both from the same random q, k, v: outputs, the prepared buffers and the caches compared byte for byte. */
static void check_attention(gm_backend *b, const gm_attn_prep *p, bool write_kv, int32_t window, test_cache *cf,
                            test_cache *cu) {
    static qkv fused, unfused;
    fill(fused.q, N_TOK * N_HEAD * HD, 2.0f);
    fill(fused.k, N_TOK * N_HEAD_KV * HD, 2.0f);
    fill(fused.v, N_TOK * N_HEAD_KV * HD, 2.0f);
    unfused = fused;
    gm_attn_args a = {.kv_layer = 0, .write_kv = write_kv, .n_tokens = N_TOK, .pos = batch_pos, .seq = batch_seq,
                      .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD, .window = window};
    gm_attn_args af = a, au = a;
    af.kv = &cf->kv, af.prep = p, af.q = fused.q, af.k = fused.k, af.v = fused.v, af.out = fused.out;
    au.kv = &cu->kv, au.q = unfused.q, au.k = unfused.k, au.v = unfused.v, au.out = unfused.out;
    b->ops->attention(b, &af);
    prep_unfused(b, p, write_kv, &unfused);
    b->ops->attention(b, &au);
    assert_memory_equal(&fused, &unfused, sizeof fused);
    assert_memory_equal(cf->layer.k, cu->layer.k, cache_bytes(cf));
    assert_memory_equal(cf->layer.v, cu->layer.v, cache_bytes(cf));
}

static void test_attention_prep_equals_unfused_ops(void **state) {
    (void)state;
    gm_backend *b = new_backend();
    static float q_norm[HD], k_norm[HD], freq_factors[HD / 4];
    for (int i = 0; i < HD; i++) q_norm[i] = 1.0f + frand(), k_norm[i] = 1.0f + frand();
    for (int i = 0; i < HD / 4; i++) freq_factors[i] = i % 3 ? 1.0f : 4.0f;
    const gm_attn_prep gemma3 = {.q_norm = q_norm, .k_norm = k_norm, .eps = 1e-6f, .n_rot = HD, .base = 10000.0f,
                                 .freq_scale = 0.125f, .q_scale = 0.17677669f};
    const gm_attn_prep gemma3n = {.q_norm = q_norm, .k_norm = k_norm, .v_norm = true, .eps = 1e-6f, .n_rot = HD,
                                  .base = 1e6f, .freq_scale = 1.0f, .q_scale = 1.0f};
    const gm_attn_prep gemma4_k_eq_v = {.q_norm = q_norm, .k_norm = k_norm, .v_norm = true, .v_from_k = true,
                                        .eps = 1e-6f, .n_rot = HD / 2, .base = 1e6f, .freq_scale = 1.0f,
                                        .freq_factors = freq_factors, .q_scale = 1.0f};
    const gm_attn_prep no_norms_no_rope = {.eps = 1e-6f, .n_rot = 0, .base = 10000.0f, .freq_scale = 1.0f,
                                           .q_scale = 0.5f};
    const struct {
        const gm_attn_prep *prep;
        gm_kv_type type;
        int32_t window;
    } cases[] = {
        {&gemma3, GM_KV_F16, 0},           {&gemma3n, GM_KV_F32, 3},         {&gemma4_k_eq_v, GM_KV_F16, 0},
        {&no_norms_no_rope, GM_KV_F32, 2}, {&gemma3, GM_KV_Q8_0, 3},         {&gemma4_k_eq_v, GM_KV_Q8_0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_cache cf, cu;
        cache_init(&cf, cases[i].type, HD, false);
        cache_init(&cu, cases[i].type, HD, false);
        check_attention(b, cases[i].prep, true, cases[i].window, &cf, &cu);
        /* a layer that reads this cache without writing it (KV sharing): only q is prepared, k and v untouched */
        check_attention(b, cases[i].prep, false, cases[i].window, &cf, &cu);
        cache_free(&cf);
        cache_free(&cu);
    }
    b->ops->free(b);
}

/* ---- attention over a q8_0 cache ---- */

enum { Q8_HD = 64, Q8_ROW = N_HEAD_KV * Q8_HD, Q8_MAX_TOK = 13 };

/* One batch of n tokens: position and sequence of each. */
typedef struct q8_batch {
    int n;
    int32_t pos[Q8_MAX_TOK], seq[Q8_MAX_TOK];
} q8_batch;

/* Attention (no preparation) writing the batch's random K and V into the q8_0 cache c and attending. Each head row
 * it wrote must hold gm_ref_kv_q8_store's bytes at the place its slot has (computed here from the layout, not by
 * gm_kv_k); each output head group must be gm_ref_attention_group_f32's over the rows of its window loaded back,
 * within 1e-5 of the largest output. */
static void check_q8_attention(gm_backend *b, test_cache *c, int32_t window, const q8_batch *bt) {
    static float q[Q8_MAX_TOK * N_HEAD * Q8_HD], k[Q8_MAX_TOK * Q8_ROW], v[Q8_MAX_TOK * Q8_ROW];
    static float out[Q8_MAX_TOK * N_HEAD * Q8_HD], want[Q8_MAX_TOK * N_HEAD * Q8_HD];
    const int n = bt->n, group = N_HEAD / N_HEAD_KV;
    fill(q, (int64_t)n * N_HEAD * Q8_HD, 2.0f);
    fill(k, (int64_t)n * Q8_ROW, 2.0f);
    fill(v, (int64_t)n * Q8_ROW, 2.0f);
    for (int i = 0; i < n * N_HEAD * Q8_HD; i++) out[i] = NAN; /* unwritten outputs must fail */
    const gm_attn_args a = {.kv = &c->kv, .kv_layer = 0, .write_kv = true, .n_tokens = n, .pos = bt->pos,
                            .seq = bt->seq, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = Q8_HD,
                            .window = window, .q = q, .k = k, .v = v, .out = out};
    b->ops->attention(b, &a);

    const gm_kv_layer *l = &c->layer;
    const size_t hb = l->head_bytes;
    uint8_t stored[Q8_HD + Q8_HD / 16 + 16];
    assert_true(hb <= sizeof stored);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < N_HEAD_KV; h++) {
            const size_t slot = (size_t)bt->seq[t] * SLOTS + (size_t)(l->ring ? bt->pos[t] % SLOTS : bt->pos[t]);
            const size_t at = (slot * N_HEAD_KV + (size_t)h) * hb;
            gm_ref_kv_q8_store(k + ((size_t)t * N_HEAD_KV + h) * Q8_HD, Q8_HD, stored);
            assert_memory_equal(l->k + at, stored, hb);
            gm_ref_kv_q8_store(v + ((size_t)t * N_HEAD_KV + h) * Q8_HD, Q8_HD, stored);
            assert_memory_equal(l->v + at, stored, hb);
        }

    static float krows[SLOTS][Q8_HD], vrows[SLOTS][Q8_HD], scores[N_HEAD * SLOTS];
    const float *kr[SLOTS], *vr[SLOTS];
    for (int t = 0; t < n; t++) {
        const int32_t pos = bt->pos[t], lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
        const int n_keys = pos - lo + 1;
        assert_true(n_keys <= SLOTS);
        for (int h = 0; h < N_HEAD_KV; h++) {
            for (int j = 0; j < n_keys; j++) {
                gm_ref_kv_q8_load((const uint8_t *)gm_kv_k(l, bt->seq[t], lo + j) + h * hb, Q8_HD, krows[j]);
                gm_ref_kv_q8_load((const uint8_t *)gm_kv_v(l, bt->seq[t], lo + j) + h * hb, Q8_HD, vrows[j]);
                kr[j] = krows[j], vr[j] = vrows[j];
            }
            const size_t off = ((size_t)t * N_HEAD + (size_t)h * group) * Q8_HD;
            gm_ref_attention_group_f32(q + off, group, kr, vr, n_keys, Q8_HD, scores, want + off);
        }
    }
    float max = 0.0f;
    for (int i = 0; i < n * N_HEAD * Q8_HD; i++) max = fmaxf(max, fabsf(want[i]));
    for (int i = 0; i < n * N_HEAD * Q8_HD; i++)
        if (!(fabsf(out[i] - want[i]) <= 1e-5f * max))
            fail_msg("window %d, token %d (seq %d pos %d), output %d: %.9g, the loaded rows give %.9g", window,
                     i / (N_HEAD * Q8_HD), bt->seq[i / (N_HEAD * Q8_HD)], bt->pos[i / (N_HEAD * Q8_HD)],
                     i % (N_HEAD * Q8_HD), out[i], want[i]);
}

/* Three batches into one q8_0 cache, each sequence's positions continuing from the last batch: two sequences
 * interleaved; without a window (every key up to SLOTS), with one over a ring whose last batch wraps around (positions
 * 16 and 17 in slots 0 and 1), and with one over a plain cache. */
static void test_attention_q8_0_cache(void **state) {
    (void)state;
    gm_backend *b = new_backend();
    static const q8_batch first = {7, {0, 0, 1, 1, 2, 2, 3}, {0, 1, 0, 1, 0, 1, 0}};
    static const q8_batch second = {12, {4, 3, 5, 4, 6, 5, 7, 6, 8, 7, 9, 8}, {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}};
    static const q8_batch third_full = {13, {10, 9, 11, 10, 12, 11, 13, 12, 14, 13, 15, 14, 15},
                                        {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1}};
    static const q8_batch third_ring = {10, {10, 11, 9, 12, 13, 10, 14, 15, 16, 17}, {0, 0, 1, 0, 0, 1, 0, 0, 0, 0}};
    const struct {
        int32_t window;
        bool ring;
        const q8_batch *third;
    } cases[] = {{0, false, &third_full}, {3, true, &third_ring}, {5, false, &third_full}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_cache c;
        cache_init(&c, GM_KV_Q8_0, Q8_HD, cases[i].ring);
        check_q8_attention(b, &c, cases[i].window, &first);
        check_q8_attention(b, &c, cases[i].window, &second);
        check_q8_attention(b, &c, cases[i].window, cases[i].third);
        cache_free(&c);
    }
    b->ops->free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_project_equals_unfused_ops),
        cmocka_unit_test(test_attention_prep_equals_unfused_ops),
        cmocka_unit_test(test_attention_q8_0_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
