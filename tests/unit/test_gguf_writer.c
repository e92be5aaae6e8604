/* test_gguf_writer.c: the GGUF writer (src/io/gguf_writer.c) through our reader: every key type and array
 * round-trips, tensors of several types (quantized included) come back with their bytes at aligned offsets,
 * chunked filling gives the same file as whole-tensor filling, a copied kv equals its source; and every
 * error is named: a key added twice, a bad ne[0] for a block type, a long or duplicate tensor name, an
 * unwritable path, a failing fill callback (no file and no .tmp left behind). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/gguf.h"
#include "io/gguf_writer.h"

#define EXPECT_MSG(e, sub)                                                                                  \
    do {                                                                                                    \
        if (!strstr((e).msg, (sub))) fail_msg("message \"%s\" lacks \"%s\"", (e).msg, (sub));              \
    } while (0)

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/gm_writer_test_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *path_of(const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

static bool exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Tensors: a deterministic byte pattern per tensor (any bytes are a valid tensor for the reader). */
typedef struct tspec {
    const char *name;
    gm_type type;
    int n_dims;
    int64_t ne[4];
} tspec;

static const tspec k_tensors[] = {
    {"token_embd.weight", GM_TYPE_F32, 2, {8, 3, 1, 1}},
    {"blk.0.attn_q.weight", GM_TYPE_Q8_0, 2, {64, 5, 1, 1}},
    {"blk.0.ffn_down.weight", GM_TYPE_Q4_K, 3, {512, 3, 2, 1}},
    {"blk.0.attn_v.weight", GM_TYPE_Q6_K, 2, {256, 7, 1, 1}},
    {"blk.0.attn_k.weight", GM_TYPE_Q4_0, 2, {32, 9, 1, 1}},
    {"blk.0.attn_norm.weight", GM_TYPE_F16, 1, {6, 1, 1, 1}}, /* 12 bytes: 20 bytes of padding follow */
    {"blk.0.ffn_up.weight", GM_TYPE_BF16, 4, {2, 3, 2, 2}},
    {"scalar", GM_TYPE_F32, 1, {1, 1, 1, 1}},
};
#define N_TENSORS (sizeof k_tensors / sizeof k_tensors[0])

static uint8_t pattern(uint64_t i, uint64_t byte) { return (uint8_t)(byte * 31u + i * 7u + (byte >> 8) + 1u); }

static uint64_t tensor_bytes(const tspec *t) {
    uint64_t rows = 1;
    for (int d = 1; d < t->n_dims; d++) rows *= (uint64_t)t->ne[d];
    return gm_row_bytes(gm_type_traits_of(t->type), t->ne[0]) * rows;
}

static int g_fill_calls;

static gemmac_status fill_whole(void *ud, uint64_t i, void *buf, uint64_t n, gm_error *err) {
    (void)ud;
    (void)err;
    assert_int_equal(n, tensor_bytes(&k_tensors[i]));
    for (uint64_t b = 0; b < n; b++) ((uint8_t *)buf)[b] = pattern(i, b);
    g_fill_calls++;
    return GEMMAC_OK;
}

static gemmac_status fill_rows(void *ud, uint64_t i, int64_t row0, int64_t n_rows, void *buf, uint64_t n,
                               gm_error *err) {
    (void)ud;
    (void)err;
    const uint64_t rb = gm_row_bytes(gm_type_traits_of(k_tensors[i].type), k_tensors[i].ne[0]);
    assert_int_equal(n, rb * (uint64_t)n_rows);
    for (uint64_t b = 0; b < n; b++) ((uint8_t *)buf)[b] = pattern(i, (uint64_t)row0 * rb + b);
    g_fill_calls++;
    return GEMMAC_OK;
}

static const char *const k_strs[] = {"<pad>", "", "\xe2\x96\x81world", "<0x00>"};
static const uint32_t k_u32s[] = {0, 7, 4000000000u};
static const int32_t k_i32s[] = {-2000000000, 0, 5};
static const float k_f32s[] = {0.0f, -1.5f, 1e30f};
static const bool k_bools[] = {true, false, true, true};

static gm_gguf_writer *full_writer(void) {
    gm_gguf_writer *w = gm_gguf_writer_new();
    assert_non_null(w);
    gm_gguf_writer_str(w, "general.architecture", "gemma3");
    gm_gguf_writer_u32(w, "t.u32", 4000000000u);
    gm_gguf_writer_i32(w, "t.i32", -123456);
    gm_gguf_writer_f32(w, "t.f32", 0.25f);
    gm_gguf_writer_bool(w, "t.true", true);
    gm_gguf_writer_bool(w, "t.false", false);
    gm_gguf_writer_str(w, "t.empty", "");
    gm_gguf_writer_arr_u32(w, "a.u32", k_u32s, 3);
    gm_gguf_writer_arr_i32(w, "a.i32", k_i32s, 3);
    gm_gguf_writer_arr_f32(w, "a.f32", k_f32s, 3);
    gm_gguf_writer_arr_bool(w, "a.bool", k_bools, 4);
    gm_gguf_writer_arr_str(w, "a.str", k_strs, 4);
    gm_gguf_writer_arr_i32(w, "a.none", NULL, 0);
    gm_error err = {0};
    for (size_t i = 0; i < N_TENSORS; i++)
        assert_int_equal(gm_gguf_writer_add_tensor(w, k_tensors[i].name, k_tensors[i].type, k_tensors[i].n_dims,
                                                   k_tensors[i].ne, &err),
                         GEMMAC_OK);
    assert_int_equal(gm_gguf_writer_n_tensors(w), N_TENSORS);
    return w;
}

static void check_file(const char *path, uint64_t planned_size) {
    gm_gguf *g;
    gm_error err = {0};
    gemmac_status st = gm_gguf_open(path, &g, &err);
    if (st) fail_msg("open: %s", err.msg);
    assert_int_equal(gm_gguf_version(g), 3);
    assert_int_equal(gm_gguf_alignment(g), 32);
    assert_int_equal(gm_gguf_file_size(g), planned_size);
    assert_int_equal(gm_gguf_data_offset(g) % 32, 0);
    assert_int_equal(gm_gguf_n_kv(g), 13);
    assert_true(gm_str_eq(gm_gguf_kv_at(g, 0)->key, "general.architecture"));
    assert_true(gm_str_eq(gm_gguf_kv_at(g, 12)->key, "a.none"));

    uint32_t u32;
    int32_t i32;
    float f;
    bool b;
    gm_str s;
    assert_int_equal(gm_gguf_get_u32(g, "t.u32", &u32, &err), GEMMAC_OK);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(gm_gguf_find_kv(g, "t.u32")->type, GM_GGUF_UINT32);
    assert_int_equal(gm_gguf_get_i32(g, "t.i32", &i32, &err), GEMMAC_OK);
    assert_int_equal(i32, -123456);
    assert_int_equal(gm_gguf_find_kv(g, "t.i32")->type, GM_GGUF_INT32);
    assert_int_equal(gm_gguf_get_f32(g, "t.f32", &f, &err), GEMMAC_OK);
    assert_true(f == 0.25f);
    assert_int_equal(gm_gguf_get_bool(g, "t.true", &b, &err), GEMMAC_OK);
    assert_true(b);
    assert_int_equal(gm_gguf_get_bool(g, "t.false", &b, &err), GEMMAC_OK);
    assert_false(b);
    assert_int_equal(gm_gguf_get_str(g, "general.architecture", &s, &err), GEMMAC_OK);
    assert_true(gm_str_eq(s, "gemma3"));
    assert_int_equal(gm_gguf_get_str(g, "t.empty", &s, &err), GEMMAC_OK);
    assert_int_equal(s.len, 0);

    uint64_t n;
    const void *data;
    assert_int_equal(gm_gguf_get_arr(g, "a.u32", GM_GGUF_UINT32, &n, &data, &err), GEMMAC_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(data, k_u32s, sizeof k_u32s);
    assert_int_equal(gm_gguf_get_arr(g, "a.i32", GM_GGUF_INT32, &n, &data, &err), GEMMAC_OK);
    assert_memory_equal(data, k_i32s, sizeof k_i32s);
    assert_int_equal(gm_gguf_get_arr(g, "a.f32", GM_GGUF_FLOAT32, &n, &data, &err), GEMMAC_OK);
    assert_memory_equal(data, k_f32s, sizeof k_f32s);
    assert_int_equal(gm_gguf_get_arr(g, "a.bool", GM_GGUF_BOOL, &n, &data, &err), GEMMAC_OK);
    assert_int_equal(n, 4);
    const uint8_t want_bools[] = {1, 0, 1, 1};
    assert_memory_equal(data, want_bools, 4);
    assert_int_equal(gm_gguf_get_arr(g, "a.none", GM_GGUF_INT32, &n, &data, &err), GEMMAC_OK);
    assert_int_equal(n, 0);
    const gm_str *strs;
    assert_int_equal(gm_gguf_get_str_arr(g, "a.str", &n, &strs, &err), GEMMAC_OK);
    assert_int_equal(n, 4);
    for (int i = 0; i < 4; i++) assert_true(gm_str_eq(strs[i], k_strs[i]));

    assert_int_equal(gm_gguf_n_tensors(g), N_TENSORS);
    uint64_t prev_end = 0;
    for (size_t i = 0; i < N_TENSORS; i++) {
        const tspec *ts = &k_tensors[i];
        const gm_gguf_tensor *t = gm_gguf_tensor_at(g, i);
        assert_true(gm_str_eq(t->name, ts->name));
        assert_int_equal(t->type, ts->type);
        assert_int_equal(t->n_dims, ts->n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], ts->ne[d]);
        assert_int_equal(t->size, tensor_bytes(ts));
        assert_int_equal(t->offset % 32, 0);
        assert_true(t->offset >= prev_end);
        assert_true(t->offset - prev_end < 32); /* padded to the alignment, no more */
        prev_end = t->offset + t->size;
        for (uint64_t by = 0; by < t->size; by++)
            if (((const uint8_t *)t->data)[by] != pattern(i, by)) fail_msg("tensor %s byte %llu", ts->name, (unsigned long long)by);
    }
    gm_gguf_close(g);
}

static void test_round_trip(void **state) {
    (void)state;
    char p[300], tmp[310];
    gm_gguf_writer *w = full_writer();
    const uint64_t planned = gm_gguf_writer_file_size(w);
    gm_error err = {0};
    g_fill_calls = 0;
    gemmac_status st = gm_gguf_writer_write(w, path_of("whole.gguf", p, sizeof p), fill_whole, NULL, &err);
    if (st) fail_msg("write: %s", err.msg);
    assert_int_equal(g_fill_calls, N_TENSORS);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    assert_false(exists(tmp));
    check_file(p, planned);
    gm_gguf_writer_free(w);
}

/* Chunks of one row (chunk_bytes 1) and of a few rows give the same file as whole tensors. */
static void test_chunked(void **state) {
    (void)state;
    char p1[300], p2[300], p3[300];
    gm_error err = {0};
    gm_gguf_writer *w = full_writer();
    assert_int_equal(gm_gguf_writer_write(w, path_of("a.gguf", p1, sizeof p1), fill_whole, NULL, &err), GEMMAC_OK);
    g_fill_calls = 0;
    assert_int_equal(gm_gguf_writer_write_rows(w, path_of("b.gguf", p2, sizeof p2), fill_rows, NULL, 1, &err),
                     GEMMAC_OK);
    int rows = 0;
    for (size_t i = 0; i < N_TENSORS; i++) rows += (int)(tensor_bytes(&k_tensors[i]) /
                                                        gm_row_bytes(gm_type_traits_of(k_tensors[i].type), k_tensors[i].ne[0]));
    assert_int_equal(g_fill_calls, rows);
    assert_int_equal(gm_gguf_writer_write_rows(w, path_of("c.gguf", p3, sizeof p3), fill_rows, NULL, 700, &err),
                     GEMMAC_OK);
    check_file(p2, gm_gguf_writer_file_size(w));
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s && cmp -s %s %s", p1, p2, p1, p3);
    assert_int_equal(system(cmd), 0);
    /* writing over an existing file replaces it */
    assert_int_equal(gm_gguf_writer_write(w, p2, fill_whole, NULL, &err), GEMMAC_OK);
    check_file(p2, gm_gguf_writer_file_size(w));
    gm_gguf_writer_free(w);
}

/* kv_copy reproduces every pair of a file, under its own key or a new one. */
static void test_kv_copy(void **state) {
    (void)state;
    char p1[300], p2[300];
    gm_error err = {0};
    gm_gguf_writer *w = full_writer();
    assert_int_equal(gm_gguf_writer_write(w, path_of("src.gguf", p1, sizeof p1), fill_whole, NULL, &err), GEMMAC_OK);
    gm_gguf_writer_free(w);
    gm_gguf *g;
    assert_int_equal(gm_gguf_open(p1, &g, &err), GEMMAC_OK);
    w = gm_gguf_writer_new();
    for (uint64_t i = 0; i < gm_gguf_n_kv(g); i++) gm_gguf_writer_kv_copy(w, NULL, gm_gguf_kv_at(g, i));
    gm_gguf_writer_kv_copy(w, "renamed.str", gm_gguf_find_kv(g, "a.str"));
    for (size_t i = 0; i < N_TENSORS; i++)
        assert_int_equal(gm_gguf_writer_add_tensor(w, k_tensors[i].name, k_tensors[i].type, k_tensors[i].n_dims,
                                                   k_tensors[i].ne, &err),
                         GEMMAC_OK);
    assert_int_equal(gm_gguf_writer_write(w, path_of("copy.gguf", p2, sizeof p2), fill_whole, NULL, &err), GEMMAC_OK);
    gm_gguf_writer_free(w);
    gm_gguf *c;
    assert_int_equal(gm_gguf_open(p2, &c, &err), GEMMAC_OK);
    assert_int_equal(gm_gguf_n_kv(c), gm_gguf_n_kv(g) + 1);
    for (uint64_t i = 0; i < gm_gguf_n_kv(g); i++) {
        const gm_gguf_kv *a = gm_gguf_kv_at(g, i), *b = gm_gguf_kv_at(c, i);
        assert_int_equal(a->key.len, b->key.len);
        assert_memory_equal(a->key.ptr, b->key.ptr, a->key.len);
        assert_int_equal(a->type, b->type);
        assert_int_equal(a->arr_type, b->arr_type);
        assert_int_equal(a->arr_n, b->arr_n);
        if (a->arr_type == GM_GGUF_STRING) {
            for (uint64_t k = 0; k < a->arr_n; k++) assert_int_equal(a->strs[k].len, b->strs[k].len);
        }
    }
    uint64_t n;
    const gm_str *strs;
    assert_int_equal(gm_gguf_get_str_arr(c, "renamed.str", &n, &strs, &err), GEMMAC_OK);
    assert_int_equal(n, 4);
    assert_true(gm_str_eq(strs[2], k_strs[2]));
    gm_gguf_close(c);
    gm_gguf_close(g);
}

/* A failed write leaves neither the file nor path.tmp. */
static void expect_write_fail(gm_gguf_writer *w, const char *name, gemmac_status want, const char *sub) {
    char p[300], tmp[310];
    gm_error err = {0};
    path_of(name, p, sizeof p);
    gemmac_status st = gm_gguf_writer_write(w, p, fill_whole, NULL, &err);
    if (st != want) fail_msg("status %d, expected %d: %s", st, want, err.msg);
    EXPECT_MSG(err, sub);
    assert_null(strchr(err.msg, '\n'));
    assert_false(exists(p));
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    assert_false(exists(tmp));
}

static void test_duplicate_key(void **state) {
    (void)state;
    gm_gguf_writer *w = gm_gguf_writer_new();
    gm_gguf_writer_u32(w, "gemma3.block_count", 2);
    gm_gguf_writer_str(w, "general.name", "x");
    gm_gguf_writer_u32(w, "gemma3.block_count", 3);
    gm_gguf_writer_str(w, "later", "ok"); /* after a failure: ignored, the first error stays */
    expect_write_fail(w, "dup.gguf", GEMMAC_ERR_INVALID_ARG, "metadata key 'gemma3.block_count' added twice");
    gm_gguf_writer_free(w);
}

static void test_bad_tensors(void **state) {
    (void)state;
    gm_error err = {0};
    gm_gguf_writer *w = gm_gguf_writer_new();
    assert_int_equal(gm_gguf_writer_add_tensor(w, "q", GM_TYPE_Q4_K, 2, (const int64_t[]){128, 4}, &err),
                     GEMMAC_ERR_INVALID_ARG);
    EXPECT_MSG(err, "tensor 'q': ne[0] = 128 is not a multiple of q4_K's block size 256");
    gm_gguf_writer_free(w);

    w = gm_gguf_writer_new();
    assert_int_equal(gm_gguf_writer_add_tensor(w, "q", GM_TYPE_Q8_0, 1, (const int64_t[]){33}, &err),
                     GEMMAC_ERR_INVALID_ARG);
    EXPECT_MSG(err, "block size 32");
    /* remembered: the write fails with the same message */
    expect_write_fail(w, "badne.gguf", GEMMAC_ERR_INVALID_ARG, "ne[0] = 33");
    gm_gguf_writer_free(w);

    w = gm_gguf_writer_new();
    assert_int_equal(gm_gguf_writer_add_tensor(w, "t", GM_TYPE_F32, 1, (const int64_t[]){4}, &err), GEMMAC_OK);
    assert_int_equal(gm_gguf_writer_add_tensor(w, "t", GM_TYPE_F32, 1, (const int64_t[]){4}, &err),
                     GEMMAC_ERR_INVALID_ARG);
    EXPECT_MSG(err, "tensor 't' added twice");
    gm_gguf_writer_free(w);

    w = gm_gguf_writer_new();
    char long_name[80];
    memset(long_name, 'x', 70);
    long_name[70] = '\0';
    assert_int_equal(gm_gguf_writer_add_tensor(w, long_name, GM_TYPE_F32, 1, (const int64_t[]){4}, &err),
                     GEMMAC_ERR_INVALID_ARG);
    EXPECT_MSG(err, "longer than 63 bytes");
    gm_gguf_writer_free(w);

    w = gm_gguf_writer_new();
    assert_int_equal(gm_gguf_writer_add_tensor(w, "t", GM_TYPE_Q8_K, 1, (const int64_t[]){256}, &err),
                     GEMMAC_ERR_UNSUPPORTED);
    EXPECT_MSG(err, "type q8_K cannot be written");
    gm_gguf_writer_free(w);

    w = gm_gguf_writer_new();
    assert_int_equal(gm_gguf_writer_add_tensor(w, "t", GM_TYPE_F32, 5, (const int64_t[]){1, 1, 1, 1, 1}, &err),
                     GEMMAC_ERR_INVALID_ARG);
    EXPECT_MSG(err, "5 dimensions");
    assert_int_equal(gm_gguf_writer_add_tensor(w, "u", GM_TYPE_F32, 2, (const int64_t[]){4, 0}, &err),
                     GEMMAC_ERR_INVALID_ARG);
    gm_gguf_writer_free(w);
}

static void test_unwritable(void **state) {
    (void)state;
    gm_error err = {0};
    gm_gguf_writer *w = full_writer();
    gemmac_status st = gm_gguf_writer_write(w, "/nonexistent-dir/x/model.gguf", fill_whole, NULL, &err);
    assert_int_equal(st, GEMMAC_ERR_IO);
    EXPECT_MSG(err, "cannot create /nonexistent-dir/x/model.gguf.tmp");
    EXPECT_MSG(err, "No such file or directory");
    gm_gguf_writer_free(w);
}

static gemmac_status fill_fails(void *ud, uint64_t i, void *buf, uint64_t n, gm_error *err) {
    (void)ud;
    memset(buf, 0, (size_t)n);
    if (i == 2) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "generator ran dry");
    return GEMMAC_OK;
}

static void test_fill_failure(void **state) {
    (void)state;
    char p[300], tmp[310];
    gm_error err = {0};
    gm_gguf_writer *w = full_writer();
    path_of("fillfail.gguf", p, sizeof p);
    assert_int_equal(gm_gguf_writer_write(w, p, fill_fails, NULL, &err), GEMMAC_ERR_NO_MEMORY);
    EXPECT_MSG(err, "tensor 'blk.0.ffn_down.weight': generator ran dry");
    assert_false(exists(p));
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    assert_false(exists(tmp));
    gm_gguf_writer_free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_chunked),      cmocka_unit_test(test_kv_copy),
        cmocka_unit_test(test_duplicate_key), cmocka_unit_test(test_bad_tensors), cmocka_unit_test(test_unwritable),
        cmocka_unit_test(test_fill_failure),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
