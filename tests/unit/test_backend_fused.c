/* test_backend_fused.c: the CPU backend's fused ops against the unfused ops they stand for, bit for bit on random
 * input: project (PLAIN, GEGLU, GELU_MUL; with and without its norm; without a residual update and with one, its
 * norm weighted or not, scaled or not; f32, q8_0 and q4_0 weights) against rmsnorm_add, scale, rmsnorm, matmul
 * and gelu_mul, and attention with a gm_attn_prep against rmsnorm and rope followed by attention
 * without one (the per-arch preparations, K = V, a layer reading a cache it does not write, f16 and f32 caches).
 * The forwards rely on this: a fused CPU forward must give the logits the unfused one gave. */
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

/* One layer's cache of two sequences, f16 or f32, built by hand (the cache type's own constructor needs
 * model hyper-parameters); zeroed so that two caches compare equal until written. */
typedef struct test_cache {
    gm_kv_cache kv;
    gm_kv_layer layer;
} test_cache;

static void cache_init(test_cache *c, bool f32) {
    const size_t elem = f32 ? sizeof(float) : sizeof(gm_f16);
    const size_t bytes = 2 * SLOTS * N_HEAD_KV * HD * elem;
    c->layer = (gm_kv_layer){.owned = true, .n_slots = SLOTS, .row = N_HEAD_KV * HD, .elem = elem,
                             .k = calloc(1, bytes), .v = calloc(1, bytes)};
    c->kv = (gm_kv_cache){.n_seq = 2, .n_ctx = SLOTS, .n_layer = 1, .f32 = f32, .layer = &c->layer};
}

static void cache_free(test_cache *c) {
    free(c->layer.k);
    free(c->layer.v);
}

static size_t cache_bytes(const test_cache *c) { return 2 * SLOTS * (size_t)c->layer.row * c->layer.elem; }

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
        bool f32;
        int32_t window;
    } cases[] = {
        {&gemma3, false, 0}, {&gemma3n, true, 3}, {&gemma4_k_eq_v, false, 0}, {&no_norms_no_rope, true, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_cache cf, cu;
        cache_init(&cf, cases[i].f32);
        cache_init(&cu, cases[i].f32);
        check_attention(b, cases[i].prep, true, cases[i].window, &cf, &cu);
        /* a layer that reads this cache without writing it (KV sharing): only q is prepared, k and v untouched */
        check_attention(b, cases[i].prep, false, cases[i].window, &cf, &cu);
        cache_free(&cf);
        cache_free(&cu);
    }
    b->ops->free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_project_equals_unfused_ops),
        cmocka_unit_test(test_attention_prep_equals_unfused_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
