/* test_cuda_model.c: the CUDA backend end to end, through the public API with n_gpu_layers = -1 (all):
 *   1. every transformers fixture (tests/golden/hf/<variant>, format of tests/unit/test_hf_fixtures.c) from its
 *      directory with an f32 KV cache: max |logit - reference| <= 1e-4 · max |reference| at every position, for
 *      the prefill in one batch and for the same tokens one by one, and the greedy continuation identical;
 *   2. the real Gemma 3 270M (q4_K_M; $GEMMAC_MODEL or the default path, skipped if absent) against the CPU
 *      backend over 64 positions: the same top-1 everywhere (a difference where the CPU's top-2 margin is <= 1e-3
 *      is a near-tie: counted and printed, not failed) and mean KL(cpu || gpu) <= 1e-3, for the GPU's prefill in
 *      one batch and for its token-by-token decode; with an f16 KV cache on both, and with a q8_0 cache on both
 *      (there a near-tie is a margin within the largest logit change that q8_0 itself makes on the CPU: a rounding
 *      that flips between the backends moves logits by that much);
 *   3. batched decoding: 4 different prompts decoded together (one batch per step, 4 sequences) give each
 *      sequence the greedy tokens it gets alone; a difference where the alone run's top-2 margin is <= 1e-3 is
 *      a near-tie (counted, printed, and that sequence no longer compared), any other fails;
 *   4. the best logits selected on the device (GEMMAC_LOGITS_TOP) against the host's selection from whole rows.
 * Exits 77 (skipped) when the context cannot be made on the GPU because no CUDA device is usable. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gemmac.h"
#include "hf_reference.h"
#include "sample/top_logits.h"
#include "test_paths.h"

#define REL_TOL 1e-4

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static gemmac_ctx *new_ctx(gemmac_model *m, int32_t ngl, int32_t n_ctx, int32_t n_batch, int32_t n_seq,
                           gemmac_kv_type kv) {
    gemmac_ctx_params cp = gemmac_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_seq_max = n_seq;
    cp.type_kv = kv;
    cp.n_gpu_layers = ngl;
    gemmac_ctx *c = NULL;
    char err[512];
    if (gemmac_ctx_new(m, &cp, &c, err, sizeof err) != GEMMAC_OK) fail_msg("context (ngl %d): %s", ngl, err);
    return c;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Largest minus second largest logit. */
static float top2_margin(const float *x, int n) {
    const int b = argmax(x, n);
    float second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != b && x[i] > second) second = x[i];
    return x[b] - second;
}

/* Decodes one token of sequence seq at pos with logits; returns them. */
static const float *step(gemmac_ctx *c, int32_t token, int32_t pos, int32_t seq) {
    const int8_t want = 1;
    gemmac_batch b = {.n_tokens = 1, .token = &token, .pos = &pos, .seq_id = &seq, .logits = &want};
    if (gemmac_ctx_decode(c, &b) != GEMMAC_OK) fail_msg("decode: %s", gemmac_ctx_last_error(c));
    return gemmac_ctx_logits(c, 0);
}

/* Prefills n tokens of sequence 0 in one batch with logits everywhere, copied to out [n][V]. */
static void prefill(gemmac_ctx *c, const int32_t *tokens, int n, int V, float *out) {
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n), *seq = calloc((size_t)n, sizeof(int32_t));
    int8_t *want = malloc((size_t)n);
    assert_non_null(pos), assert_non_null(seq), assert_non_null(want);
    for (int i = 0; i < n; i++) pos[i] = i, want[i] = 1;
    gemmac_batch b = {.n_tokens = n, .token = tokens, .pos = pos, .seq_id = seq, .logits = want};
    if (gemmac_ctx_decode(c, &b) != GEMMAC_OK) fail_msg("prefill: %s", gemmac_ctx_last_error(c));
    for (int i = 0; i < n; i++) {
        const float *l = gemmac_ctx_logits(c, i);
        assert_non_null(l);
        memcpy(out + (size_t)i * V, l, sizeof(float) * (size_t)V);
    }
    free(pos), free(seq), free(want);
}

/* ---- 1. transformers fixtures ---- */
static const char *const g_variants[] = {
    "gemma3",       "gemma3_linear_rope", "gemma3n",        "gemma4_ple_kvshare", "gemma4_double_wide",
    "gemma4_k_eq_v", "gemma4_moe",        "gemma4_unified", "gemma4_bf16",
};

/* max |got - ref| over n rows of V; *ref_max gets max |ref|. */
static float max_diff(const float *got, const float *ref, size_t count, float *ref_max) {
    float worst = 0.0f;
    *ref_max = 0.0f;
    for (size_t j = 0; j < count; j++) {
        if (fabsf(ref[j]) > *ref_max) *ref_max = fabsf(ref[j]);
        const float d = fabsf(got[j] - ref[j]);
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

static void test_fixtures(void **state) {
    (void)state;
    const char *only = getenv("GEMMAC_FIXTURE");
    for (size_t v = 0; v < sizeof g_variants / sizeof g_variants[0]; v++) {
        const char *variant = g_variants[v];
        if (only && *only && strcmp(only, variant)) continue;
        char rel[256], dir[4096], err[1024];
        snprintf(rel, sizeof rel, "tests/golden/hf/%s", variant);
        gm_test_source_path(rel, dir, sizeof dir);
        reference r = {0};
        if (!load_reference(dir, &r)) fail_msg("%s: cannot read %s/ref.bin", variant, dir);
        gemmac_model *m = NULL;
        if (gemmac_model_load(dir, NULL, &m, err, sizeof err) != GEMMAC_OK) fail_msg("%s: %s", variant, err);
        const int V = (int)r.n_vocab, n = (int)r.n;
        float *pre = malloc(sizeof(float) * (size_t)n * V), *one = malloc(sizeof(float) * (size_t)n * V);
        assert_non_null(pre), assert_non_null(one);

        gemmac_ctx *c = new_ctx(m, -1, 64, 32, 1, GEMMAC_KV_F32);
        prefill(c, r.tokens, n, V, pre);
        float ref_max, worst = max_diff(pre, r.logits, (size_t)n * V, &ref_max);
        gemmac_ctx_free(c);
        c = new_ctx(m, -1, 64, 32, 1, GEMMAC_KV_F32);
        for (int i = 0; i < n; i++) memcpy(one + (size_t)i * V, step(c, r.tokens[i], i, 0), sizeof(float) * (size_t)V);
        float ref_max1, worst1 = max_diff(one, r.logits, (size_t)n * V, &ref_max1);
        printf("  %-20s gpu prefill max |logit - ref| = %.3g x max |ref|, one by one %.3g x max |ref|\n", variant,
               worst / ref_max, worst1 / ref_max1);
        if (!(worst <= REL_TOL * ref_max))
            fail_msg("%s: GPU prefill: max |logit - ref| = %g > %g x %g", variant, worst, REL_TOL, ref_max);
        if (!(worst1 <= REL_TOL * ref_max1))
            fail_msg("%s: GPU token by token: max |logit - ref| = %g > %g x %g", variant, worst1, REL_TOL, ref_max1);
        int32_t next = argmax(pre + (size_t)(n - 1) * V, V);
        for (uint32_t g = 0; g < r.n_gen; g++) {
            if (next != r.gen[g]) fail_msg("%s: GPU greedy step %u: token %d, transformers %d", variant, g, next, r.gen[g]);
            next = argmax(step(c, next, n + (int)g, 0), V);
        }
        gemmac_ctx_free(c);
        gemmac_model_free(m);
        free(pre), free(one), free(r.tokens), free(r.logits), free(r.gen);
    }
}

/* ---- 2. Gemma 3 270M: GPU against the CPU backend ---- */
static gemmac_model *g_model;

static gemmac_model *model_270m(void) {
    if (g_model) return g_model;
    char path[4096], err[1024];
    if (!gm_test_model_path(path, sizeof path)) return NULL;
    if (gemmac_model_load(path, NULL, &g_model, err, sizeof err) != GEMMAC_OK) fail_msg("%s: %s", path, err);
    return g_model;
}

/* KL(p || q) of the softmaxes of logit rows a (p) and b (q), in double. */
static double kl(const float *a, const float *b, int V) {
    double ma = -INFINITY, mb = -INFINITY;
    for (int i = 0; i < V; i++) ma = fmax(ma, a[i]), mb = fmax(mb, b[i]);
    double za = 0, zb = 0;
    for (int i = 0; i < V; i++) za += exp(a[i] - ma), zb += exp(b[i] - mb);
    double k = 0;
    for (int i = 0; i < V; i++) {
        const double la = a[i] - ma - log(za), lb = b[i] - mb - log(zb);
        k += exp(la) * (la - lb);
    }
    return k;
}

static int tokenize(gemmac_model *m, const char *text, int32_t *out, int cap) {
    size_t n = 0;
    if (gemmac_tokenize(m, text, strlen(text), GEMMAC_TOKENIZE_ADD_BOS, out, (size_t)cap, &n) != GEMMAC_OK)
        fail_msg("cannot tokenize '%s'", text);
    return (int)n;
}

/* Compares n rows of GPU logits with the CPU's: top-1 (a difference where the CPU's top-2 margin is <= tie is a
 * near-tie) and KL. */
static void compare_rows(const char *what, const float *cpu, const float *gpu, int n, int V, float tie) {
    double sum_kl = 0, max_kl = 0;
    int top1_diff = 0, near = 0;
    for (int i = 0; i < n; i++) {
        const float *a = cpu + (size_t)i * V, *b = gpu + (size_t)i * V;
        const double k = kl(a, b, V);
        sum_kl += k;
        if (k > max_kl) max_kl = k;
        if (argmax(a, V) != argmax(b, V)) {
            top1_diff++;
            if (top2_margin(a, V) <= tie) near++;
            printf("    position %d: top-1 cpu %d gpu %d (cpu top-2 margin %.3g)\n", i, argmax(a, V), argmax(b, V),
                   top2_margin(a, V));
        }
    }
    printf("  270M %-30s %d positions: mean KL %.3g, max KL %.3g, top-1 differs at %d (near-ties %d)\n", what, n,
           sum_kl / n, max_kl, top1_diff, near);
    if (top1_diff > near)
        fail_msg("%s: top-1 differs from the CPU backend at %d of %d positions (%d of them near-ties)", what,
                 top1_diff, n, near);
    if (!(sum_kl / n <= 1e-3)) fail_msg("%s: mean KL %g > 1e-3", what, sum_kl / n);
}

static void test_270m_vs_cpu(void **state) {
    (void)state;
    gemmac_model *m = model_270m();
    if (!m) {
        printf("  270M: model not found (set GEMMAC_MODEL): skipped\n");
        skip();
    }
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    const int V = info.n_vocab, N = 64;
    int32_t toks[256];
    const char *text =
        "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
        "movable metal type, oil-based inks and a wooden press adapted from those used for wine. Within fifty "
        "years, presses had spread to more than two hundred cities across Europe, and the number of books grew";
    const int nt = tokenize(m, text, toks, 256);
    if (nt < N) fail_msg("the text gives %d tokens, %d needed", nt, N);
    float *cpu = malloc(sizeof(float) * (size_t)N * V), *gpu = malloc(sizeof(float) * (size_t)N * V);
    float *cpu_f16 = malloc(sizeof(float) * (size_t)N * V);
    assert_non_null(cpu), assert_non_null(gpu), assert_non_null(cpu_f16);
    static const gemmac_kv_type kvs[2] = {GEMMAC_KV_F16, GEMMAC_KV_Q8_0};
    float tie = 1e-3f;
    for (int ki = 0; ki < 2; ki++) {
        const gemmac_kv_type kv = kvs[ki];
        const char *kn = kv == GEMMAC_KV_F16 ? "f16" : "q8_0";
        char what[64];
        double t0 = now_ms();
        gemmac_ctx *c = new_ctx(m, 0, 256, 64, 1, kv);
        prefill(c, toks, N, V, cpu);
        gemmac_ctx_free(c);
        const double t_cpu = now_ms() - t0;
        if (kv == GEMMAC_KV_F16) memcpy(cpu_f16, cpu, sizeof(float) * (size_t)N * V);
        else { /* q8_0's own effect on the CPU's logits */
            double change = 0;
            for (size_t i = 0; i < (size_t)N * V; i++) change = fmax(change, fabs((double)cpu[i] - cpu_f16[i]));
            tie = fmaxf(tie, (float)change);
            printf("  270M q8_0 KV against f16 KV on the CPU: logits change by up to %.3g (the near-tie margin)\n", change);
        }
        t0 = now_ms();
        c = new_ctx(m, -1, 256, 64, 1, kv);
        prefill(c, toks, N, V, gpu);
        const double t_gpu = now_ms() - t0;
        printf("  270M prefill of %d, %s KV: CPU %.0f ms, GPU %.0f ms (first use: weight upload included)\n", N, kn,
               t_cpu, t_gpu);
        snprintf(what, sizeof what, "GPU prefill, %s KV", kn);
        compare_rows(what, cpu, gpu, N, V, tie);
        gemmac_ctx_free(c);
        c = new_ctx(m, -1, 256, 64, 1, kv);
        for (int i = 0; i < N; i++) memcpy(gpu + (size_t)i * V, step(c, toks[i], i, 0), sizeof(float) * (size_t)V);
        snprintf(what, sizeof what, "GPU token by token, %s KV", kn);
        compare_rows(what, cpu, gpu, N, V, tie);
        gemmac_ctx_free(c);
    }
    free(cpu), free(gpu), free(cpu_f16);
}

/* ---- 3. batched decoding = each sequence alone ---- */
enum { B = 4, GEN = 24 };

static void test_batched_decode(void **state) {
    (void)state;
    gemmac_model *m = model_270m();
    if (!m) skip();
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    const int V = info.n_vocab;
    static const char *const prompts[B] = {
        "Once upon a time, in a small village by the sea,",
        "The three primary colors are",
        "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
        "Water boils at a temperature of one hundred degrees Celsius at sea level because",
    };
    int32_t toks[B][128];
    int len[B];
    for (int s = 0; s < B; s++) len[s] = tokenize(m, prompts[s], toks[s], 128);

    /* alone: each prompt in a fresh context, greedy; the top-2 margin of each step kept */
    int32_t alone[B][GEN];
    float margin[B][GEN];
    for (int s = 0; s < B; s++) {
        gemmac_ctx *c = new_ctx(m, -1, 256, 64, 1, GEMMAC_KV_F16);
        const float *l = NULL;
        for (int i = 0; i < len[s]; i++) l = step(c, toks[s][i], i, 0);
        for (int g = 0; g < GEN; g++) {
            alone[s][g] = argmax(l, V);
            margin[s][g] = top2_margin(l, V);
            l = step(c, alone[s][g], len[s] + g, 0);
        }
        gemmac_ctx_free(c);
    }

    /* together: one batch holding every prompt, then one batch of B tokens per step */
    gemmac_ctx *c = new_ctx(m, -1, 256, 512, B, GEMMAC_KV_F16);
    int32_t bt[512], bp[512], bs[512];
    int8_t bw[512];
    int n = 0;
    for (int s = 0; s < B; s++)
        for (int i = 0; i < len[s]; i++) bt[n] = toks[s][i], bp[n] = i, bs[n] = s, bw[n] = i == len[s] - 1, n++;
    gemmac_batch b = {.n_tokens = n, .token = bt, .pos = bp, .seq_id = bs, .logits = bw};
    if (gemmac_ctx_decode(c, &b) != GEMMAC_OK) fail_msg("batched prefill: %s", gemmac_ctx_last_error(c));
    int32_t next[B];
    for (int s = 0, row = 0; s < B; s++) {
        row += len[s];
        next[s] = argmax(gemmac_ctx_logits(c, row - 1), V);
    }
    bool diverged[B] = {false};
    int near_ties = 0, mismatches = 0;
    for (int g = 0; g < GEN; g++) {
        for (int s = 0; s < B; s++) {
            if (diverged[s] || next[s] == alone[s][g]) continue;
            diverged[s] = true;
            if (margin[s][g] <= 1e-3f) {
                near_ties++;
                printf("    sequence %d step %d: batched %d, alone %d (near-tie, margin %.3g)\n", s, g, next[s],
                       alone[s][g], margin[s][g]);
            } else {
                mismatches++;
                printf("    sequence %d step %d: batched %d, alone %d (margin %.3g)\n", s, g, next[s], alone[s][g],
                       margin[s][g]);
            }
        }
        for (int s = 0; s < B; s++) bt[s] = next[s], bp[s] = len[s] + g, bs[s] = s, bw[s] = 1;
        b = (gemmac_batch){.n_tokens = B, .token = bt, .pos = bp, .seq_id = bs, .logits = bw};
        if (gemmac_ctx_decode(c, &b) != GEMMAC_OK) fail_msg("batched step: %s", gemmac_ctx_last_error(c));
        for (int s = 0; s < B; s++) next[s] = argmax(gemmac_ctx_logits(c, s), V);
    }
    gemmac_ctx_free(c);
    printf("  batched decode: %d sequences x %d tokens (prompts of %d, %d, %d, %d): %d mismatches, %d near-ties\n", B,
           GEN, len[0], len[1], len[2], len[3], mismatches, near_ties);
    if (mismatches) fail_msg("%d sequences decode differently batched than alone", mismatches);
}

/* The best logits a GPU context selects on the device (GEMMAC_LOGITS_TOP) equal, id for id and bit for bit, the
 * host's selection (gm_top_logits_row) from the whole rows that a second GPU context, fed the same batches,
 * hands out: the same kernels on the same inputs give the same logits. Over the batched prefill of B prompts
 * and GEN batched steps; whole rows are not handed out for such tokens; gemmac_ctx_sample agrees with
 * gemmac_sampler_sample on the whole row. */
static void test_top_logits(void **state) {
    (void)state;
    gemmac_model *m = model_270m();
    if (!m) skip();
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    const int V = info.n_vocab, K = V < GEMMAC_TOP_LOGITS ? V : GEMMAC_TOP_LOGITS;
    static const char *const prompts[B] = {"The capital of France is", "1, 2, 3, 4,", "Roses are red,",
                                           "In the beginning"};
    int32_t toks[B][64], len[B];
    for (int s = 0; s < B; s++) len[s] = tokenize(m, prompts[s], toks[s], 64);
    gemmac_ctx *whole = new_ctx(m, -1, 256, 512, B, GEMMAC_KV_F16), *top = new_ctx(m, -1, 256, 512, B, GEMMAC_KV_F16);
    int32_t bt[512], bp[512], bs[512], ids[GEMMAC_TOP_LOGITS];
    int8_t bw_whole[512], bw_top[512];
    float vals[GEMMAC_TOP_LOGITS];
    int n = 0, rows = 0;
    for (int s = 0; s < B; s++)
        for (int i = 0; i < len[s]; i++) {
            bt[n] = toks[s][i], bp[n] = i, bs[n] = s;
            bw_whole[n] = i == len[s] - 1 ? GEMMAC_LOGITS_FULL : 0, bw_top[n] = i == len[s] - 1 ? GEMMAC_LOGITS_TOP : 0;
            n++;
        }
    gemmac_sampler_params sp = gemmac_sampler_default_params();
    sp.seed = 7;
    gemmac_sampler *s_whole = gemmac_sampler_new(&sp, V), *s_top = gemmac_sampler_new(&sp, V);
    for (int g = 0; g <= GEN; g++) {
        gemmac_batch b = {.n_tokens = n, .token = bt, .pos = bp, .seq_id = bs, .logits = bw_whole};
        if (gemmac_ctx_decode(whole, &b) != GEMMAC_OK) fail_msg("decode (whole rows): %s", gemmac_ctx_last_error(whole));
        b.logits = bw_top;
        if (gemmac_ctx_decode(top, &b) != GEMMAC_OK) fail_msg("decode (best logits): %s", gemmac_ctx_last_error(top));
        int32_t next[B], m_out = 0;
        for (int i = 0; i < n; i++) {
            if (!bw_top[i]) continue;
            const float *row = gemmac_ctx_logits(whole, i);
            assert_non_null(row);
            assert_null(gemmac_ctx_logits(top, i)); /* only the best were copied */
            const gemmac_token *tid;
            const float *tv;
            assert_int_equal(gemmac_ctx_top_logits(top, i, &tid, &tv), K);
            gm_top_logits_row(row, V, K, ids, vals);
            for (int k = 0; k < K; k++)
                if (tid[k] != ids[k] || memcmp(&tv[k], &vals[k], sizeof(float)))
                    fail_msg("step %d token %d: best logit %d is %d (%.9g) on the device, %d (%.9g) on the host", g, i, k,
                             tid[k], tv[k], ids[k], vals[k]);
            const gemmac_token a = gemmac_sampler_sample(s_whole, row), c = gemmac_ctx_sample(top, i, s_top);
            if (a != c) fail_msg("step %d token %d: sampled %d from the whole row, %d from the best", g, i, a, c);
            gemmac_sampler_accept(s_whole, a), gemmac_sampler_accept(s_top, c);
            next[m_out++] = argmax(row, V);
            rows++;
        }
        n = 0;
        for (int s = 0; s < B; s++) {
            bt[n] = next[s], bp[n] = len[s]++, bs[n] = s, bw_whole[n] = GEMMAC_LOGITS_FULL, bw_top[n] = GEMMAC_LOGITS_TOP;
            n++;
        }
    }
    gemmac_sampler_free(s_whole), gemmac_sampler_free(s_top);
    gemmac_ctx_free(whole), gemmac_ctx_free(top);
    printf("  best logits: %d rows, the device's best %d equal the host's selection from the whole row; the same "
           "samples from both\n", rows, K);
}

static void test_no_device_message(void **state) {
    (void)state; /* a bad n_gpu_layers and partial offload are refused by name, before any device work */
    gemmac_model *m = model_270m();
    if (!m) skip();
    gemmac_ctx_params cp = gemmac_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_gpu_layers = 1; /* partial for any model of two or more layers */
    gemmac_ctx *c = NULL;
    char err[512];
    assert_int_equal(gemmac_ctx_new(m, &cp, &c, err, sizeof err), GEMMAC_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "partial offload"));
}

int main(void) {
    /* a context on the GPU needs a device: probe with the smallest fixture */
    char dir[4096], err[1024];
    gm_test_source_path("tests/golden/hf/gemma3", dir, sizeof dir);
    gemmac_model *m = NULL;
    if (gemmac_model_load(dir, NULL, &m, err, sizeof err) != GEMMAC_OK) {
        printf("test_cuda_model: cannot load %s: %s\n", dir, err);
        return 1;
    }
    gemmac_ctx_params cp = gemmac_ctx_default_params();
    cp.n_ctx = 16;
    cp.n_gpu_layers = -1;
    gemmac_ctx *c = NULL;
    const gemmac_status st = gemmac_ctx_new(m, &cp, &c, err, sizeof err);
    gemmac_ctx_free(c);
    gemmac_model_free(m);
    if (st != GEMMAC_OK) {
        printf("test_cuda_model: skipped: %s\n", err);
        return st == GEMMAC_ERR_BACKEND || st == GEMMAC_ERR_UNSUPPORTED ? 77 : 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_270m_vs_cpu),
        cmocka_unit_test(test_batched_decode),
        cmocka_unit_test(test_top_logits),
        cmocka_unit_test(test_no_device_message),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    gemmac_model_free(g_model);
    return rc;
}
