/* bench_quant.c: throughput of each vec_dot kernel over a 64 MiB weight matrix (a matvec: every row
 * dotted with one quantized activation row), in GB/s of weight bytes, per ISA, 1 and 2 threads; predicts
 * matvec speed. The x4 columns run vec_dot_x4 (every row against four activation rows, as prefill does)
 * and count each weight byte four times, so they compare directly with the single-column numbers; 4x4a512 runs
 * vec_dot_4xn on the matrix packed four rows by four (gm_pack_rows4) against the same four activation rows,
 * counted the same way; 4x1a512 runs vec_dot_4xn with one column (the decode mat-vec), counted once.
 * Not built by CMake; the kernels themselves live in kernels/. Usage: bench_quant [MiB]
 *   cmake --build build-quant --target gemmac && gcc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude \
 *       bench/bench_quant.c build-quant/libgemmac.a -lpthread -lm -o build-quant/bench_quant */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/quant.h"

enum { K = 4096, REPS = 9 };

typedef struct {
    const gm_type_cpu *k;
    const uint8_t *w, *w4;     /* the matrix, and packed four rows by four */
    const void *const *a;      /* four activation rows; vec_dot uses a[0] */
    int x4;                    /* 1: run vec_dot_x4 instead of vec_dot; 2: vec_dot_4xn, 4 columns; 3: 1 column */
    size_t row_bytes;
    int64_t r0, r1;
    float *out;
} job;

static void *run_rows(void *p) {
    const job *j = p;
    if (j->x4 >= 2) {
        float o[16];
        for (int64_t r = j->r0; r + 4 <= j->r1; r += 4) {
            j->k->vec_dot_4xn(K, o, j->w4 + (size_t)r * j->row_bytes, j->a, j->x4 == 2 ? 4 : 1);
            j->out[r] = o[0] + o[4] + o[8] + o[12];
        }
    } else if (j->x4) {
        float o[4];
        for (int64_t r = j->r0; r < j->r1; ++r) {
            j->k->vec_dot_x4(K, o, j->w + (size_t)r * j->row_bytes, j->a);
            j->out[r] = o[0] + o[1] + o[2] + o[3];
        }
    } else {
        for (int64_t r = j->r0; r < j->r1; ++r) j->k->vec_dot(K, &j->out[r], j->w + (size_t)r * j->row_bytes, j->a[0]);
    }
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best of REPS matvecs with n_threads threads; returns GB/s of weight bytes (times 4 for x4). */
static double bench(const gm_type_cpu *k, const uint8_t *w, const uint8_t *w4, const void *const *a, int x4, size_t row_bytes, int64_t rows,
                    float *out, int n_threads) {
    if ((x4 == 1 && !k->vec_dot_x4) || (x4 >= 2 && !k->vec_dot_4xn)) return 0.0;
    double best = 1e30;
    for (int rep = 0; rep < REPS; ++rep) {
        job jobs[2];
        pthread_t th[2];
        const double t0 = now();
        for (int t = 0; t < n_threads; ++t) {
            jobs[t] = (job){k, w, w4, a, x4, row_bytes, rows * t / n_threads, rows * (t + 1) / n_threads, out};
            if (t) pthread_create(&th[t], NULL, run_rows, &jobs[t]);
        }
        run_rows(&jobs[0]);
        for (int t = 1; t < n_threads; ++t) pthread_join(th[t], NULL);
        const double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return (x4 == 1 || x4 == 2 ? 4.0 : 1.0) * (double)rows * (double)row_bytes / best / 1e9;
}

int main(int argc, char **argv) {
    /* argv[1]: matrix size in MiB (64 by default: past L2; 1 fits L2 and shows compute speed) */
    const int64_t matrix_bytes = (argc > 1 ? atoll(argv[1]) : 64) << 20;
    static const gm_type types[] = {GM_TYPE_Q4_K, GM_TYPE_Q6_K, GM_TYPE_Q8_0, GM_TYPE_Q4_0, GM_TYPE_Q5_K, GM_TYPE_Q5_0,
                                    GM_TYPE_F16,  GM_TYPE_BF16, GM_TYPE_F32,  GM_TYPE_Q4_1, GM_TYPE_Q5_1};
    printf("vec_dot over a %d MiB weight matrix, rows of %d, GB/s of weight bytes (best of %d)\n", (int)(matrix_bytes >> 20), K, REPS);
    printf("%-6s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "type", "scalar", "avx2", "avx512", "avx2x2t",
           "avx512x2t", "x4avx2", "x4avx512", "x4a512x2t", "4x4a512", "4x4a5x2t", "4x1a512", "4x1a5x2t");
    float *x = malloc(sizeof(float) * K);
    for (int i = 0; i < K; ++i) x[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ++ti) {
        const gm_type_traits *tr = gm_type_traits_of(types[ti]), *vt = gm_type_traits_of(tr->vec_dot_type);
        const size_t row_bytes = gm_row_bytes(tr, K);
        const int64_t rows = matrix_bytes / (int64_t)row_bytes;
        uint8_t *w = malloc((size_t)rows * row_bytes);
        float *row = malloc(sizeof(float) * K), *out = malloc(sizeof(float) * (size_t)rows);
        const size_t a_bytes = gm_row_bytes(vt, K);
        uint8_t *a = malloc(4 * a_bytes);
        const void *const cols[4] = {a, a + a_bytes, a + 2 * a_bytes, a + 3 * a_bytes};
        for (int64_t r = 0; r < rows; ++r) { /* real quantized rows, so the data is representative */
            for (int i = 0; i < K; ++i) row[i] = x[(i + r) % K] * (float)(1 + r % 5);
            tr->quantize(row, w + (size_t)r * row_bytes, K);
        }
        uint8_t *w4 = malloc((size_t)rows * row_bytes);
        for (int64_t r = 0; r + 4 <= rows; r += 4)
            gm_pack_rows4(w4 + (size_t)r * row_bytes, w + (size_t)r * row_bytes, row_bytes,
                          (int64_t)(row_bytes / tr->block_bytes), tr->block_bytes);
        for (int c = 0; c < 4; ++c) { /* four different activation rows */
            for (int i = 0; i < K; ++i) row[i] = x[(i + 17 * c) % K];
            vt->quantize(row, a + c * a_bytes, K);
        }
        printf("%-6s", tr->name);
        for (int isa = GM_ISA_SCALAR; isa <= GM_ISA_AVX512; ++isa) {
            const gm_type_cpu *k = gm_cpu_kernels_isa(types[ti], (gm_isa)isa);
            printf(" %8.2f", k ? bench(k, w, w4, cols, 0, row_bytes, rows, out, 1) : 0.0);
        }
        for (int isa = GM_ISA_AVX2; isa <= GM_ISA_AVX512; ++isa) {
            const gm_type_cpu *k = gm_cpu_kernels_isa(types[ti], (gm_isa)isa);
            printf(" %8.2f", k ? bench(k, w, w4, cols, 0, row_bytes, rows, out, 2) : 0.0);
        }
        for (int isa = GM_ISA_AVX2; isa <= GM_ISA_AVX512; ++isa) {
            const gm_type_cpu *k = gm_cpu_kernels_isa(types[ti], (gm_isa)isa);
            printf(" %8.2f", k ? bench(k, w, w4, cols, 1, row_bytes, rows, out, 1) : 0.0);
        }
        {
            const gm_type_cpu *k = gm_cpu_kernels_isa(types[ti], GM_ISA_AVX512);
            printf(" %8.2f", k ? bench(k, w, w4, cols, 1, row_bytes, rows, out, 2) : 0.0);
            printf(" %8.2f", k ? bench(k, w, w4, cols, 2, row_bytes, rows, out, 1) : 0.0);
            printf(" %8.2f", k ? bench(k, w, w4, cols, 2, row_bytes, rows, out, 2) : 0.0);
            printf(" %8.2f", k ? bench(k, w, w4, cols, 3, row_bytes, rows, out, 1) : 0.0);
            printf(" %8.2f", k ? bench(k, w, w4, cols, 3, row_bytes, rows, out, 2) : 0.0);
        }
        printf("\n");
        fflush(stdout);
        free(w), free(w4), free(row), free(out), free(a);
    }
    free(x);
    return 0;
}
