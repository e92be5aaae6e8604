/* bench_sampler.c: time per gemmac_sampler_sample call on full-size (262144) logit rows, for the
 * default chain and its variants, against a sort-everything peer measured in the same run.
 * Leaves the chain's correctness to tests/unit/test_sampler.c.
 *
 * Build and run (not in CMake yet):
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/bench_sampler.c src/sample/sampler.c -lm \
 *       -o build-sample/bench_sampler && ./build-sample/bench_sampler [reps]
 * Rows rotate through 8 different 1 MiB logit vectors, so the row is not always hot in L1/L2. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemmac.h"
#include "sample/sampler_internal.h"

#define N_VOCAB 262144
#define N_ROWS 8

static double clock_us(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}
static double now_us(void) { return clock_us(CLOCK_MONOTONIC); }
/* CPU time of this thread: what the call costs when other processes share the cores. */
static double cpu_us(void) { return clock_us(CLOCK_THREAD_CPUTIME_ID); }

static float gauss(gm_pcg32 *r) {
    double u1 = gm_pcg32_unit(r), u2 = gm_pcg32_unit(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The peer: what a sampler without partial selection does (llama2.c's sample_topp): softmax over
 * the whole row, qsort every candidate, walk to top-p. */
typedef struct peer_cand {
    float p;
    int32_t id;
} peer_cand;

static int peer_cmp(const void *a, const void *b) {
    float x = ((const peer_cand *)a)->p, y = ((const peer_cand *)b)->p;
    return (x < y) - (x > y);
}

static int32_t peer_sample(const float *l, peer_cand *c, float temp, float top_p, gm_pcg32 *rng) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < N_VOCAB; i++) mx = l[i] > mx ? l[i] : mx;
    double z = 0.0;
    for (int32_t i = 0; i < N_VOCAB; i++) {
        c[i] = (peer_cand){expf((l[i] - mx) / temp), i};
        z += c[i].p;
    }
    qsort(c, N_VOCAB, sizeof *c, peer_cmp);
    double cum = 0.0, target;
    int32_t last = N_VOCAB - 1;
    for (int32_t i = 0; i < N_VOCAB; i++) {
        cum += c[i].p / z;
        if (cum >= top_p) { last = i; break; }
    }
    target = gm_pcg32_unit(rng) * cum;
    cum = 0.0;
    for (int32_t i = 0; i <= last; i++) {
        cum += c[i].p / z;
        if (cum > target) return c[i].id;
    }
    return c[last].id;
}

typedef struct bench_case {
    const char *name;
    int32_t top_k;
    float top_p, min_p, temp, repeat_penalty;
} bench_case;

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 400;
    if (reps < 1) reps = 1;
    float *rows = malloc((size_t)N_ROWS * N_VOCAB * sizeof *rows);
    double *t = malloc((size_t)reps * sizeof *t), *tc = malloc((size_t)reps * sizeof *tc);
    if (!rows || !t || !tc) return 1;
    gm_pcg32 rng;
    gm_pcg32_seed(&rng, 1, 1);
    /* LM-like rows: Gaussian bulk with sigma 2..5 and a few strong candidates on top. */
    for (int r = 0; r < N_ROWS; r++) {
        float *l = rows + (size_t)r * N_VOCAB;
        float sigma = 2.0f + 0.4f * (float)r;
        for (int32_t i = 0; i < N_VOCAB; i++) l[i] = sigma * gauss(&rng);
        for (int j = 0; j < 8; j++) l[gm_pcg32_next(&rng) % N_VOCAB] = 6.0f * sigma - (float)j;
    }

    const bench_case cases[] = {
        {"default (k40 p.95 minp.05 t.8)", 40, 0.95f, 0.05f, 0.8f, 1.0f},
        {"default + repeat 1.1 (64 hist)", 40, 0.95f, 0.05f, 0.8f, 1.1f},
        {"greedy (temp 0)", 40, 0.95f, 0.05f, 0.0f, 1.0f},
        {"k=5000 (quickselect path)", 5000, 0.95f, 0.05f, 0.8f, 1.0f},
        {"k off, p.95 minp.05", 0, 0.95f, 0.05f, 0.8f, 1.0f},
        {"k off, p.95 (no min-p)", 0, 0.95f, 0.0f, 0.8f, 1.0f},
        {"k off, minp.05 (no top-p)", 0, 1.0f, 0.05f, 0.8f, 1.0f},
        {"all filters off (full softmax)", 0, 1.0f, 0.0f, 0.8f, 1.0f},
    };
    printf("n_vocab %d, %d reps per case, %d rotating rows\n", N_VOCAB, reps, N_ROWS);
    printf("%-34s %10s %10s %10s %10s\n", "case", "median us", "mean us", "max us", "cpu med us");
    unsigned sink = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gemmac_sampler_params p = gemmac_sampler_default_params();
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.temp = cases[c].temp;
        p.repeat_penalty = cases[c].repeat_penalty;
        p.seed = 42;
        gemmac_sampler *s = gemmac_sampler_new(&p, N_VOCAB);
        if (!s) return 1;
        for (int j = 0; j < 64; j++) gemmac_sampler_accept(s, (gemmac_token)(gm_pcg32_next(&rng) % N_VOCAB));
        for (int i = 0; i < 8; i++) sink += (unsigned)gemmac_sampler_sample(s, rows + (size_t)(i % N_ROWS) * N_VOCAB);
        double sum = 0.0;
        for (int i = 0; i < reps; i++) {
            const float *l = rows + (size_t)(i % N_ROWS) * N_VOCAB;
            double c0 = cpu_us(), t0 = now_us();
            gemmac_token tok = gemmac_sampler_sample(s, l);
            t[i] = now_us() - t0;
            tc[i] = cpu_us() - c0;
            sum += t[i];
            sink += (unsigned)tok;
            if (p.repeat_penalty != 1.0f) gemmac_sampler_accept(s, tok);
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        qsort(tc, (size_t)reps, sizeof *tc, cmp_double);
        printf("%-34s %10.1f %10.1f %10.1f %10.1f\n", cases[c].name, t[reps / 2], sum / reps,
               t[reps - 1], tc[reps / 2]);
        gemmac_sampler_free(s);
    }

    /* The peer, on the same rows. */
    peer_cand *pc = malloc(N_VOCAB * sizeof *pc);
    if (!pc) return 1;
    int peer_reps = reps < 40 ? reps : 40;
    double sum = 0.0;
    for (int i = 0; i < peer_reps; i++) {
        double c0 = cpu_us(), t0 = now_us();
        sink += (unsigned)peer_sample(rows + (size_t)(i % N_ROWS) * N_VOCAB, pc, 0.8f, 0.95f, &rng);
        t[i] = now_us() - t0;
        tc[i] = cpu_us() - c0;
        sum += t[i];
    }
    qsort(t, (size_t)peer_reps, sizeof *t, cmp_double);
    qsort(tc, (size_t)peer_reps, sizeof *tc, cmp_double);
    printf("%-34s %10.1f %10.1f %10.1f %10.1f\n", "peer: softmax + qsort all, p.95", t[peer_reps / 2],
           sum / peer_reps, t[peer_reps - 1], tc[peer_reps / 2]);
    printf("(checksum %u)\n", sink);
    free(pc);
    free(rows);
    free(t);
    free(tc);
    return 0;
}
