/* test_backend_matmul.c: the CPU backend's matmul against the per-(row, token) vec_dot it stands for, bit for bit:
 * q8_0 / q4_0 / q5_0 weights (the types whose rows the backend packs four by four for vec_dot_4xn where the CPU
 * has AVX-512 VNNI) and q4_K (never packed), row counts of every remainder mod 4, thread ranges that do not start
 * on a multiple of four, 1 to 9 tokens (four-token groups and every remainder), the same weight again (its packed
 * rows reused), a view of fewer rows at the same address (a shape the packed copy does not match) and a view of
 * every second row (rows with gaps, which the packing must leave alone). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/backend.h"
#include "quant/quant.h"
#include "test_rng.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { return test_frand(&rng_state); } /* uniform in [-1, 1) */

enum { K = 352, MAX_TOKENS = 9 }; /* K: 11 blocks of 32 (odd: the kernels' tail block); q4_K rows take 256 */

/* y[t][r] as the backend must give it: the token quantized by the table's activation quantizer, then vec_dot. */
static void expected(const gm_tensor *w, const float *x, int32_t n, float *y) {
    const gm_type_traits *vt = gm_type_traits_of(gm_type_traits_of(w->type)->vec_dot_type);
    const gm_type_cpu *k = gm_cpu_kernels(w->type), *q = gm_cpu_kernels(vt->vec_dot_type);
    const uint64_t ab = gm_row_bytes(vt, w->ne[0]);
    uint8_t *a = malloc(ab);
    assert_non_null(a);
    for (int32_t t = 0; t < n; t++) {
        q->quantize(x + (int64_t)t * w->ne[0], a, w->ne[0]);
        for (int64_t r = 0; r < w->ne[1]; r++)
            k->vec_dot(w->ne[0], &y[t * w->ne[1] + r], (const uint8_t *)w->data + (uint64_t)r * w->row_bytes, a);
    }
    free(a);
}

static void check(gm_backend *b, const gm_tensor *w, const float *x, int32_t n) {
    const size_t bytes = sizeof(float) * (size_t)n * (size_t)w->ne[1];
    float *got = malloc(bytes), *want = malloc(bytes);
    assert_non_null(got);
    assert_non_null(want);
    memset(got, 0xA5, bytes); /* an output never written cannot match */
    b->ops->matmul(b, w, x, n, got);
    expected(w, x, n, want);
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("%s: %lld rows, %d tokens: token %d row %lld: matmul %a, vec_dot %a",
                     gm_type_traits_of(w->type)->name, (long long)w->ne[1], n, (int)(i / (size_t)w->ne[1]),
                     (long long)(i % (size_t)w->ne[1]), (double)got[i], (double)want[i]);
    free(got);
    free(want);
}

static void test_matmul_equals_vec_dot(void **state) {
    (void)state;
    gm_backend *b;
    gm_error err = {0};
    assert_int_equal(gm_backend_cpu_new(2, &b, &err), GEMMAC_OK);
    assert_int_equal(b->ops->reserve(b, MAX_TOKENS, K, 8, &err), GEMMAC_OK);
    static const gm_type types[] = {GM_TYPE_Q8_0, GM_TYPE_Q4_0, GM_TYPE_Q5_0, GM_TYPE_Q4_K};
    /* rows: 3 (none packed), 4, 5, 18 (one thread), 70 and 131 (two threads, the second from row 35 / 66) */
    static const int64_t row_counts[] = {3, 4, 5, 18, 70, 131};
    static float x[MAX_TOKENS * K], row[K];
    for (int i = 0; i < MAX_TOKENS * K; i++) x[i] = 2.0f * frand();
    int cases = 0;
    uint8_t *datas[sizeof row_counts / sizeof row_counts[0]];
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const gm_type_traits *tt = gm_type_traits_of(types[ti]);
        const int64_t k = types[ti] == GM_TYPE_Q4_K ? 256 : K;
        const uint64_t rb = gm_row_bytes(tt, k);
        for (size_t ri = 0; ri < sizeof row_counts / sizeof row_counts[0]; ri++) {
            const int64_t rows = row_counts[ri];
            uint8_t *data = datas[ri] = malloc(rb * (uint64_t)rows);
            assert_non_null(data);
            for (int64_t r = 0; r < rows; r++) {
                for (int i = 0; i < k; i++) row[i] = frand() * (float)(1 + r % 7);
                tt->quantize(row, data + r * rb, k);
            }
            const gm_tensor w = {.name = "w", .type = types[ti], .ne = {k, rows, 1, 1}, .row_bytes = rb, .data = data};
            for (int32_t n = 1; n <= MAX_TOKENS; n++, cases++) check(b, &w, x, n);
            check(b, &w, x, 4); /* again: the packed rows made by the first call */
            gm_tensor view = w;   /* fewer rows at the same address: must not read the packed copy of w */
            view.ne[1] = rows > 4 ? rows - 4 : rows;
            check(b, &view, x, 5);
            gm_tensor every_other = w; /* rows with gaps (every second row), one past the start: a new address */
            every_other.data = data + rb, every_other.ne[1] = (rows - 1) / 2, every_other.row_bytes = 2 * rb;
            if (every_other.ne[1] > 0) check(b, &every_other, x, 6);
        }
        /* Weights outlive the backend that packed them (as a model outlives its contexts): a new weight must not
         * reuse an address the map knows. */
        b->ops->free(b);
        for (size_t ri = 0; ri < sizeof row_counts / sizeof row_counts[0]; ri++) free(datas[ri]);
        assert_int_equal(gm_backend_cpu_new(2, &b, &err), GEMMAC_OK);
        assert_int_equal(b->ops->reserve(b, MAX_TOKENS, K, 8, &err), GEMMAC_OK);
    }
    printf("  [ INFO ] %d (type, rows, tokens) matmuls bitwise equal to vec_dot\n", cases);
    b->ops->free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_matmul_equals_vec_dot)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
