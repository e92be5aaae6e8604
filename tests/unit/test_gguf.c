/* test_gguf.c: the GGUF reader (src/io/gguf.c, mmap.c) against files made by tests/support/gguf_builder:
 * valid files round-trip through every accessor; each malformed file fails with its specific status and a
 * message naming the problem. Every file is opened from an exactly-sized heap copy so ASan sees overreads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf_builder.h"
#include "io/gguf.h"
#include "io/mmap.h"

#define EXPECT_MSG(e, sub)                                                                                  \
    do {                                                                                                    \
        if (!strstr((e).msg, (sub))) fail_msg("message \"%s\" lacks \"%s\"", (e).msg, (sub));              \
    } while (0)

/* Opens n bytes of p from a fresh heap copy of exactly n bytes; the copy is returned in *copy. */
static gemmac_status open_copy(const uint8_t *p, size_t n, gm_gguf **g, uint8_t **copy, gm_error *err) {
    *copy = malloc(n ? n : 1);
    assert_non_null(*copy);
    if (n) memcpy(*copy, p, n);
    gm_error_clear(err);
    return gm_gguf_open_memory(*copy, n, g, err);
}

/* Writes b, expects opening to fail with st and a message containing sub; frees b. */
static void expect_fail(gm_gb *b, gemmac_status st, const char *sub) {
    size_t n;
    uint8_t *file = gm_gb_write(b, &n);
    gm_gb_free(b);
    gm_gguf *g = (gm_gguf *)1;
    uint8_t *copy;
    gm_error err;
    gemmac_status got = open_copy(file, n, &g, &copy, &err);
    if (got != st) fail_msg("status %d (%s), expected %d; message \"%s\"", got, gemmac_status_str(got), st, err.msg);
    assert_null(g);
    assert_int_equal(err.status, st);
    EXPECT_MSG(err, sub);
    assert_true(strlen(err.msg) > 0 && strlen(err.msg) < sizeof err.msg - 1);
    assert_null(strchr(err.msg, '\n'));
    free(copy);
    free(file);
}

/* A builder with just a header (no kv, no tensors). */
static gm_gb *empty(void) { return gm_gb_new(); }

/* A builder whose one tensor info is raw (name t, type f32 unless given) over a data section of data bytes. */
static gm_gb *one_raw_tensor(uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset, uint64_t data) {
    gm_gb *b = gm_gb_new();
    gm_gb_str(b, "general.architecture", "test");
    gm_gb_tensor_raw(b, "t", 1, n_dims, ne, type, offset);
    gm_gb_data_size(b, data);
    return b;
}

/* ==== Round trips ==== */

static float tensor_f32[8 * 3];
static uint8_t tensor_q8[2 * 2 * 34];
static uint8_t tensor_q4k[144];
static uint16_t tensor_f16[4 * 2 * 3];
static float tensor_4d[2 * 3 * 2 * 2];

static void fill_tensors(void) {
    for (size_t i = 0; i < sizeof tensor_f32 / sizeof *tensor_f32; i++) tensor_f32[i] = (float)i * 0.5f - 3.0f;
    for (size_t i = 0; i < sizeof tensor_q8; i++) tensor_q8[i] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < sizeof tensor_q4k; i++) tensor_q4k[i] = (uint8_t)(i * 13 + 5);
    for (size_t i = 0; i < sizeof tensor_f16 / sizeof *tensor_f16; i++) tensor_f16[i] = (uint16_t)(0x3c00 + i);
    for (size_t i = 0; i < sizeof tensor_4d / sizeof *tensor_4d; i++) tensor_4d[i] = (float)i;
}

static const char *const k_tokens[] = {"<pad>", "<eos>", "", "hello", "\xe2\x96\x81world", "<0x00>"};
static const uint8_t k_u8s[] = {0, 1, 255};
static const int8_t k_i8s[] = {-128, 0, 127};
static const uint16_t k_u16s[] = {0, 65535};
static const int16_t k_i16s[] = {-32768, 32767};
static const uint32_t k_u32s[] = {0, 4000000000u};
static const int32_t k_i32s[] = {-2000000000, 1, 2000000000};
static const float k_f32s[] = {0.0f, -1.5f, 1e30f};
static const uint8_t k_bools[] = {1, 0, 1};
static const uint64_t k_u64s[] = {UINT64_MAX, 5};
static const int64_t k_i64s[] = {INT64_MIN, INT64_MAX};
static const double k_f64s[] = {3.141592653589793, -0.0};

static gm_gb *full_builder(uint32_t version, uint32_t alignment) {
    fill_tensors();
    gm_gb *b = gm_gb_new();
    gm_gb_version(b, version);
    gm_gb_str(b, "general.architecture", "gemma3");
    if (alignment) gm_gb_alignment(b, alignment);
    gm_gb_u8(b, "t.u8", 200);
    gm_gb_i8(b, "t.i8", -100);
    gm_gb_u16(b, "t.u16", 60000);
    gm_gb_i16(b, "t.i16", -30000);
    gm_gb_u32(b, "t.u32", 4000000000u);
    gm_gb_i32(b, "t.i32", -2000000000);
    gm_gb_f32(b, "t.f32", 0.25f);
    gm_gb_bool(b, "t.bool", true);
    gm_gb_bool(b, "t.false", false);
    gm_gb_u64(b, "t.u64", UINT64_MAX);
    gm_gb_i64(b, "t.i64", INT64_MIN);
    gm_gb_f64(b, "t.f64", 1e-3);
    gm_gb_f64(b, "t.f64big", 1e300);
    gm_gb_str(b, "t.str", "hello gguf");
    gm_gb_str(b, "t.emptystr", "");
    gm_gb_arr(b, "a.u8", GM_GGUF_UINT8, 3, k_u8s);
    gm_gb_arr(b, "a.i8", GM_GGUF_INT8, 3, k_i8s);
    gm_gb_arr(b, "a.u16", GM_GGUF_UINT16, 2, k_u16s);
    gm_gb_arr(b, "a.i16", GM_GGUF_INT16, 2, k_i16s);
    gm_gb_arr(b, "a.u32", GM_GGUF_UINT32, 2, k_u32s);
    gm_gb_arr(b, "a.i32", GM_GGUF_INT32, 3, k_i32s);
    gm_gb_arr(b, "a.f32", GM_GGUF_FLOAT32, 3, k_f32s);
    gm_gb_arr(b, "a.bool", GM_GGUF_BOOL, 3, k_bools);
    gm_gb_arr(b, "a.u64", GM_GGUF_UINT64, 2, k_u64s);
    gm_gb_arr(b, "a.i64", GM_GGUF_INT64, 2, k_i64s);
    gm_gb_arr(b, "a.f64", GM_GGUF_FLOAT64, 2, k_f64s);
    gm_gb_arr(b, "a.empty", GM_GGUF_INT32, 0, NULL);
    gm_gb_str_arr(b, "tokenizer.ggml.tokens", 6, k_tokens);
    gm_gb_str_arr(b, "a.nostrings", 0, NULL);
    gm_gb_tensor(b, "token_embd.weight", GM_TYPE_F32, 2, (const int64_t[]){8, 3}, tensor_f32);
    gm_gb_tensor(b, "blk.0.attn_q.weight", GM_TYPE_Q8_0, 3, (const int64_t[]){64, 2, 1}, tensor_q8);
    gm_gb_tensor(b, "blk.0.ffn_down.weight", GM_TYPE_Q4_K, 1, (const int64_t[]){256}, tensor_q4k);
    gm_gb_tensor(b, "blk.0.attn_norm.weight", GM_TYPE_F16, 3, (const int64_t[]){4, 2, 3}, tensor_f16);
    gm_gb_tensor(b, "t4d", GM_TYPE_F32, 4, (const int64_t[]){2, 3, 2, 2}, tensor_4d);
    return b;
}

static void check_tensor(const gm_gguf *g, const char *name, gm_type type, int n_dims, const int64_t *ne,
                         const void *data, uint64_t size) {
    const gm_gguf_tensor *t = gm_gguf_find_tensor(g, name);
    assert_non_null(t);
    assert_true(gm_str_eq(t->name, name));
    assert_int_equal(t->type, type);
    assert_int_equal(t->n_dims, n_dims);
    uint64_t n_el = 1;
    for (int d = 0; d < GM_GGUF_MAX_DIMS; d++) {
        int64_t want = d < n_dims ? ne[d] : 1;
        assert_int_equal(t->ne[d], want);
        n_el *= (uint64_t)want;
    }
    assert_int_equal(t->n_elements, n_el);
    assert_int_equal(t->size, size);
    assert_int_equal(t->offset % gm_gguf_alignment(g), 0);
    assert_memory_equal(t->data, data, size);
}

static void check_full(const gm_gguf *g, uint32_t version, uint32_t alignment) {
    gm_error err;
    assert_int_equal(gm_gguf_version(g), version);
    assert_int_equal(gm_gguf_alignment(g), alignment ? alignment : 32);
    assert_int_equal(gm_gguf_data_offset(g) % gm_gguf_alignment(g), 0);
    assert_int_equal(gm_gguf_n_kv(g), alignment ? 31 : 30);
    assert_int_equal(gm_gguf_n_tensors(g), 5);

    /* kv order and offsets */
    const gm_gguf_kv *first = gm_gguf_kv_at(g, 0);
    assert_true(gm_str_eq(first->key, "general.architecture"));
    assert_int_equal(first->file_offset, 24);
    assert_null(gm_gguf_kv_at(g, gm_gguf_n_kv(g)));
    assert_null(gm_gguf_find_kv(g, "absent"));
    assert_null(gm_gguf_find_kv(g, "t.u"));
    assert_null(gm_gguf_find_kv(g, NULL));
    for (uint64_t i = 0; i < gm_gguf_n_kv(g); i++) {
        const gm_gguf_kv *kv = gm_gguf_kv_at(g, i);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        assert_ptr_equal(gm_gguf_find_kv(g, key), kv);
        if (i) assert_true(kv->file_offset > gm_gguf_kv_at(g, i - 1)->file_offset);
    }

    /* typed getters on their own types */
    uint32_t u32;
    int32_t i32;
    float f;
    bool bo;
    gm_str s;
    assert_int_equal(gm_gguf_get_u32(g, "t.u8", &u32, &err), GEMMAC_OK);
    assert_int_equal(u32, 200);
    assert_int_equal(gm_gguf_get_u32(g, "t.u16", &u32, &err), GEMMAC_OK);
    assert_int_equal(u32, 60000);
    assert_int_equal(gm_gguf_get_u32(g, "t.u32", &u32, &err), GEMMAC_OK);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(gm_gguf_get_i32(g, "t.i8", &i32, &err), GEMMAC_OK);
    assert_int_equal(i32, -100);
    assert_int_equal(gm_gguf_get_i32(g, "t.i16", &i32, &err), GEMMAC_OK);
    assert_int_equal(i32, -30000);
    assert_int_equal(gm_gguf_get_i32(g, "t.i32", &i32, &err), GEMMAC_OK);
    assert_int_equal(i32, -2000000000);
    assert_int_equal(gm_gguf_get_i32(g, "t.u16", &i32, &err), GEMMAC_OK);
    assert_int_equal(i32, 60000);
    assert_int_equal(gm_gguf_get_f32(g, "t.f32", &f, &err), GEMMAC_OK);
    assert_true(f == 0.25f);
    assert_int_equal(gm_gguf_get_f32(g, "t.f64", &f, &err), GEMMAC_OK);
    assert_true(f == (float)1e-3);
    assert_int_equal(gm_gguf_get_bool(g, "t.bool", &bo, &err), GEMMAC_OK);
    assert_true(bo);
    assert_int_equal(gm_gguf_get_bool(g, "t.false", &bo, &err), GEMMAC_OK);
    assert_false(bo);
    assert_int_equal(gm_gguf_get_str(g, "t.str", &s, &err), GEMMAC_OK);
    assert_true(gm_str_eq(s, "hello gguf"));
    assert_int_equal(gm_gguf_get_str(g, "t.emptystr", &s, &err), GEMMAC_OK);
    assert_true(gm_str_eq(s, ""));

    /* values that do not fit */
    assert_int_equal(gm_gguf_get_u32(g, "t.i8", &u32, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "kv 't.i8'");
    EXPECT_MSG(err, "value -100 does not fit u32");
    assert_int_equal(gm_gguf_get_u32(g, "t.u64", &u32, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "value 18446744073709551615 does not fit u32");
    assert_int_equal(gm_gguf_get_i32(g, "t.u32", &i32, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "does not fit i32");
    assert_int_equal(gm_gguf_get_i32(g, "t.i64", &i32, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "value -9223372036854775808 does not fit i32");
    assert_int_equal(gm_gguf_get_f32(g, "t.f64big", &f, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "does not fit f32");

    /* absent keys */
    assert_int_equal(gm_gguf_get_u32(g, "gemma3.block_count", &u32, &err), GEMMAC_ERR_NOT_FOUND);
    EXPECT_MSG(err, "key 'gemma3.block_count' not found");

    /* arrays */
    uint64_t n;
    const void *data;
    static const struct {
        const char *key;
        gm_gguf_vtype t;
        uint64_t n;
        const void *v;
        size_t bytes;
    } arrs[] = {
        {"a.u8", GM_GGUF_UINT8, 3, k_u8s, sizeof k_u8s},       {"a.i8", GM_GGUF_INT8, 3, k_i8s, sizeof k_i8s},
        {"a.u16", GM_GGUF_UINT16, 2, k_u16s, sizeof k_u16s},   {"a.i16", GM_GGUF_INT16, 2, k_i16s, sizeof k_i16s},
        {"a.u32", GM_GGUF_UINT32, 2, k_u32s, sizeof k_u32s},   {"a.i32", GM_GGUF_INT32, 3, k_i32s, sizeof k_i32s},
        {"a.f32", GM_GGUF_FLOAT32, 3, k_f32s, sizeof k_f32s},  {"a.bool", GM_GGUF_BOOL, 3, k_bools, sizeof k_bools},
        {"a.u64", GM_GGUF_UINT64, 2, k_u64s, sizeof k_u64s},   {"a.i64", GM_GGUF_INT64, 2, k_i64s, sizeof k_i64s},
        {"a.f64", GM_GGUF_FLOAT64, 2, k_f64s, sizeof k_f64s},
    };
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
        assert_int_equal(gm_gguf_get_arr(g, arrs[i].key, arrs[i].t, &n, &data, &err), GEMMAC_OK);
        assert_int_equal(n, arrs[i].n);
        assert_memory_equal(data, arrs[i].v, arrs[i].bytes);
        const gm_gguf_kv *kv = gm_gguf_find_kv(g, arrs[i].key);
        assert_int_equal(kv->type, GM_GGUF_ARRAY);
        assert_int_equal(kv->arr_type, arrs[i].t);
    }
    assert_int_equal(gm_gguf_get_arr(g, "a.empty", GM_GGUF_INT32, &n, &data, &err), GEMMAC_OK);
    assert_int_equal(n, 0);

    int64_t v;
    const gm_gguf_kv *ai8 = gm_gguf_find_kv(g, "a.i8");
    assert_true(gm_gguf_kv_int(ai8, 0, &v) && v == -128);
    assert_true(gm_gguf_kv_int(ai8, 2, &v) && v == 127);
    assert_false(gm_gguf_kv_int(ai8, 3, &v));
    const gm_gguf_kv *au64 = gm_gguf_find_kv(g, "a.u64");
    assert_false(gm_gguf_kv_int(au64, 0, &v));   /* UINT64_MAX does not fit int64 */
    assert_true(gm_gguf_kv_int(au64, 1, &v) && v == 5);
    assert_true(gm_gguf_kv_int(gm_gguf_find_kv(g, "a.i64"), 0, &v) && v == INT64_MIN);
    assert_true(gm_gguf_kv_int(gm_gguf_find_kv(g, "t.i16"), 0, &v) && v == -30000);
    assert_false(gm_gguf_kv_int(gm_gguf_find_kv(g, "a.f32"), 0, &v));
    assert_false(gm_gguf_kv_int(gm_gguf_find_kv(g, "t.str"), 0, &v));

    const gm_str *strs;
    assert_int_equal(gm_gguf_get_str_arr(g, "tokenizer.ggml.tokens", &n, &strs, &err), GEMMAC_OK);
    assert_int_equal(n, 6);
    for (size_t i = 0; i < 6; i++) assert_true(gm_str_eq(strs[i], k_tokens[i]));
    assert_int_equal(gm_gguf_get_str_arr(g, "a.nostrings", &n, &strs, &err), GEMMAC_OK);
    assert_int_equal(n, 0);
    assert_non_null(strs);

    /* tensors */
    check_tensor(g, "token_embd.weight", GM_TYPE_F32, 2, (const int64_t[]){8, 3}, tensor_f32, sizeof tensor_f32);
    check_tensor(g, "blk.0.attn_q.weight", GM_TYPE_Q8_0, 3, (const int64_t[]){64, 2, 1}, tensor_q8,
                 sizeof tensor_q8);
    check_tensor(g, "blk.0.ffn_down.weight", GM_TYPE_Q4_K, 1, (const int64_t[]){256}, tensor_q4k,
                 sizeof tensor_q4k);
    check_tensor(g, "blk.0.attn_norm.weight", GM_TYPE_F16, 3, (const int64_t[]){4, 2, 3}, tensor_f16,
                 sizeof tensor_f16);
    check_tensor(g, "t4d", GM_TYPE_F32, 4, (const int64_t[]){2, 3, 2, 2}, tensor_4d, sizeof tensor_4d);
    assert_ptr_equal(gm_gguf_tensor_at(g, 0), gm_gguf_find_tensor(g, "token_embd.weight"));
    assert_ptr_equal(gm_gguf_tensor_at(g, 4), gm_gguf_find_tensor(g, "t4d"));
    assert_null(gm_gguf_tensor_at(g, 5));
    assert_null(gm_gguf_find_tensor(g, "token_embd"));
    assert_null(gm_gguf_find_tensor(g, "token_embd.weight2"));
}

static void roundtrip(uint32_t version, uint32_t alignment) {
    gm_gb *b = full_builder(version, alignment);
    size_t n;
    uint8_t *file = gm_gb_write(b, &n);
    gm_gb_free(b);
    gm_gguf *g;
    uint8_t *copy;
    gm_error err;
    if (open_copy(file, n, &g, &copy, &err) != GEMMAC_OK) fail_msg("open failed: %s", err.msg);
    assert_int_equal(gm_gguf_file_size(g), n);
    check_full(g, version, alignment);
    gm_gguf_close(g);
    free(copy);
    free(file);
}

static void test_roundtrip_v3_align32(void **state) { (void)state; roundtrip(3, 32); }
static void test_roundtrip_v3_align64(void **state) { (void)state; roundtrip(3, 64); }
static void test_roundtrip_v2_default(void **state) { (void)state; roundtrip(2, 0); }
static void test_roundtrip_v2_align64(void **state) { (void)state; roundtrip(2, 64); }
static void test_roundtrip_v3_align4096(void **state) { (void)state; roundtrip(3, 4096); }

static void test_open_file(void **state) {
    (void)state;
    char path[] = "/tmp/gm_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    gm_gb *b = full_builder(3, 64);
    assert_true(gm_gb_write_file(b, path));
    gm_gb_free(b);
    gm_gguf *g;
    gm_error err;
    if (gm_gguf_open(path, &g, &err) != GEMMAC_OK) fail_msg("open failed: %s", err.msg);
    check_full(g, 3, 64);
    /* mapped data is page aligned, so tensor data is aligned to the file's alignment */
    for (uint64_t i = 0; i < gm_gguf_n_tensors(g); i++)
        assert_int_equal((uintptr_t)gm_gguf_tensor_at(g, i)->data % 64, 0);
    gm_gguf_close(g);

    /* an empty file */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(gm_gguf_open(path, &g, &err), GEMMAC_ERR_IO);
    assert_null(g);
    EXPECT_MSG(err, path);
    EXPECT_MSG(err, "file is empty");
    unlink(path);
}

static void test_open_errors(void **state) {
    (void)state;
    gm_gguf *g = (gm_gguf *)1;
    gm_error err;
    assert_int_equal(gm_gguf_open("/nonexistent/dir/model.gguf", &g, &err), GEMMAC_ERR_IO);
    assert_null(g);
    EXPECT_MSG(err, "/nonexistent/dir/model.gguf: cannot open: No such file or directory");
    assert_int_equal(gm_gguf_open("/tmp", &g, &err), GEMMAC_ERR_IO);
    EXPECT_MSG(err, "/tmp: is a directory");
    assert_int_equal(gm_gguf_open("/dev/null", &g, &err), GEMMAC_ERR_IO);
    EXPECT_MSG(err, "/dev/null: not a regular file");
    assert_int_equal(gm_gguf_open(NULL, &g, &err), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_gguf_open("x", NULL, &err), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_gguf_open_memory(NULL, 4, &g, &err), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_gguf_open_memory(NULL, 0, &g, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "header: file of 0 bytes is too small");

    if (geteuid() != 0) {   /* root reads anything: EACCES only testable as a normal user */
        char path[] = "/tmp/gm_test_gguf_XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        close(fd);
        chmod(path, 0);
        assert_int_equal(gm_gguf_open(path, &g, &err), GEMMAC_ERR_IO);
        EXPECT_MSG(err, path);
        EXPECT_MSG(err, "Permission denied");
        unlink(path);
    }
}

/* A file without tensors may end right after its kv pairs (no padding). */
static void test_no_tensors_no_padding(void **state) {
    (void)state;
    gm_gb *b = gm_gb_new();
    gm_gb_u8(b, "k", 1);   /* 24 + 8 + 1 + 4 + 1 = 38 bytes, padded to 64 by the builder */
    size_t n;
    uint8_t *file = gm_gb_write(b, &n);
    gm_gb_free(b);
    assert_int_equal(n, 64);
    for (size_t len = 38; len <= 64; len += 26) {
        gm_gguf *g;
        uint8_t *copy;
        gm_error err;
        if (open_copy(file, len, &g, &copy, &err)) fail_msg("open of %zu bytes failed: %s", len, err.msg);
        assert_int_equal(gm_gguf_n_tensors(g), 0);
        gm_gguf_close(g);
        free(copy);
    }
    free(file);
}

/* Many keys and tensors: every one is found by name, absent ones are not. */
static void test_many_names(void **state) {
    (void)state;
    gm_gb *b = gm_gb_new();
    char name[64];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "key.%d", i);
        gm_gb_i32(b, name, i);
    }
    for (int i = 0; i < 500; i++) {
        snprintf(name, sizeof name, "blk.%d.w", i);
        gm_gb_tensor(b, name, GM_TYPE_F32, 1, (const int64_t[]){1}, &(float){(float)i});
    }
    size_t n;
    uint8_t *file = gm_gb_write(b, &n);
    gm_gb_free(b);
    gm_gguf *g;
    uint8_t *copy;
    gm_error err;
    if (open_copy(file, n, &g, &copy, &err)) fail_msg("open failed: %s", err.msg);
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "key.%d", i);
        int32_t v;
        assert_int_equal(gm_gguf_get_i32(g, name, &v, &err), GEMMAC_OK);
        assert_int_equal(v, i);
    }
    for (int i = 0; i < 500; i++) {
        snprintf(name, sizeof name, "blk.%d.w", i);
        const gm_gguf_tensor *t = gm_gguf_find_tensor(g, name);
        assert_non_null(t);
        float f;
        memcpy(&f, t->data, 4);
        assert_true(f == (float)i);
        assert_int_equal(t->offset, (uint64_t)i * 32);
    }
    assert_null(gm_gguf_find_kv(g, "key.3000"));
    assert_null(gm_gguf_find_tensor(g, "blk.500.w"));
    gm_gguf_close(g);
    free(copy);
    free(file);
}

/* ==== Truncation: every prefix of a valid file fails cleanly ==== */

static void test_truncated_everywhere(void **state) {
    (void)state;
    fill_tensors();
    gm_gb *b = gm_gb_new();
    gm_gb_str(b, "general.architecture", "gemma3");
    gm_gb_alignment(b, 64);
    gm_gb_u32(b, "gemma3.block_count", 2);
    gm_gb_bool(b, "b", true);
    gm_gb_f64(b, "f", 1.0);
    gm_gb_arr(b, "a.i32", GM_GGUF_INT32, 3, k_i32s);
    gm_gb_str_arr(b, "tokenizer.ggml.tokens", 6, k_tokens);
    gm_gb_tensor(b, "token_embd.weight", GM_TYPE_F32, 2, (const int64_t[]){8, 3}, tensor_f32);
    gm_gb_tensor(b, "blk.0.attn_q.weight", GM_TYPE_Q8_0, 2, (const int64_t[]){64, 2}, tensor_q8);
    size_t n;
    uint8_t *file = gm_gb_write(b, &n);
    gm_gb_free(b);

    gm_gguf *g;
    uint8_t *copy;
    gm_error err;
    assert_int_equal(open_copy(file, n, &g, &copy, &err), GEMMAC_OK);
    gm_gguf_close(g);
    free(copy);
    for (size_t len = 0; len < n; len++) {
        gemmac_status st = open_copy(file, len, &g, &copy, &err);
        if (st != GEMMAC_ERR_BAD_FILE)
            fail_msg("prefix of %zu/%zu bytes: status %d, message \"%s\"", len, n, st, err.msg);
        assert_null(g);
        assert_true(strlen(err.msg) > 0);
        free(copy);
    }
    free(file);
}

/* ==== Header ==== */

static void test_bad_magic(void **state) {
    (void)state;
    gm_gb *b = empty();
    gm_gb_magic(b, "GGML");
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "header: bad magic 'GGML' at offset 0");
    b = empty();
    gm_gb_magic(b, "\x00\xffGU");
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "bad magic '\\x00\\xffGU'");
    static const uint8_t tiny[] = {'G', 'G', 'U'};
    gm_gguf *g;
    uint8_t *copy;
    gm_error err;
    assert_int_equal(open_copy(tiny, sizeof tiny, &g, &copy, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "file of 3 bytes is too small");
    free(copy);
}

static void test_versions(void **state) {
    (void)state;
    gm_gb *b = empty();
    gm_gb_version(b, 1);
    expect_fail(b, GEMMAC_ERR_UNSUPPORTED, "GGUF version 1 is not supported");
    b = empty();
    gm_gb_version(b, 4);
    expect_fail(b, GEMMAC_ERR_UNSUPPORTED, "GGUF version 4 is not supported");
    b = empty();
    gm_gb_version(b, 0);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "invalid version 0");
    b = empty();
    gm_gb_version(b, 0x03000000u);   /* a big-endian v3 file */
    expect_fail(b, GEMMAC_ERR_UNSUPPORTED, "big-endian GGUF files are not supported");
    static const uint8_t no_version[] = {'G', 'G', 'U', 'F', 3, 0};
    gm_gguf *g;
    uint8_t *copy;
    gm_error err;
    assert_int_equal(open_copy(no_version, sizeof no_version, &g, &copy, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "file truncated: version needs 4 bytes at offset 0x4, only 2 left");
    free(copy);
}

static void test_huge_counts(void **state) {
    (void)state;
    gm_gb *b = empty();
    gm_gb_counts(b, UINT64_MAX - 1, 0);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "n_tensors 18446744073709551614 at offset 0x8 exceeds the limit of 65536");
    b = empty();
    gm_gb_counts(b, 0, 1ull << 40);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "n_kv 1099511627776 at offset 0x10 exceeds the limit of 65536");
    b = empty();
    gm_gb_counts(b, 1000, 60000);   /* within the caps, but the file is far too small for them */
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "60000 kv pairs and 1000 tensor infos need at least 873000 bytes");
    b = empty();
    gm_gb_counts(b, 0, 2);   /* one kv pair present, two declared */
    gm_gb_u32(b, "k", 1);   /* the builder's zero padding is then read as an empty key */
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 1: empty key at offset 0x31");
}

/* ==== Key/value pairs ==== */

static void test_string_past_end(void **state) {
    (void)state;
    gm_gb *b = empty();
    gm_gb_counts(b, 0, 1);
    uint64_t len = 100;
    gm_gb_kv_bytes(b, &len, 8);
    gm_gb_kv_bytes(b, "abc", 3);   /* the builder pads the file to 64 bytes: 32 bytes left after the length */
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0: key of 100 bytes exceeds the 32 bytes left at offset 0x20");

    b = empty();
    uint64_t vlen = 1000;
    uint8_t value[16];
    memcpy(value, &vlen, 8);
    memcpy(value + 8, "12345678", 8);
    gm_gb_kv_raw(b, "general.name", 12, GM_GGUF_STRING, value, sizeof value);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0 'general.name': string value of 1000 bytes exceeds the");

    b = empty();
    uint64_t huge = 1ull << 63;
    gm_gb_kv_raw(b, "general.name", 12, GM_GGUF_STRING, &huge, 8);
    expect_fail(b, GEMMAC_ERR_BAD_FILE,
                "kv 0 'general.name': string value of 9223372036854775808 bytes at offset 0x30 exceeds the limit of "
                "1048576 bytes");

    b = empty();
    uint64_t over = GM_GGUF_MAX_STRING + 1;
    gm_gb_counts(b, 0, 1);
    gm_gb_kv_bytes(b, &over, 8);
    gm_gb_data_size(b, 64);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0: key of 1048577 bytes at offset 0x18 exceeds the limit");

    /* a string inside a string array */
    b = empty();
    uint8_t arr[4 + 8 + 8 + 1 + 8];
    uint32_t et = GM_GGUF_STRING;
    uint64_t n = 2, l0 = 1, l1 = 1u << 20;
    memcpy(arr, &et, 4);
    memcpy(arr + 4, &n, 8);
    memcpy(arr + 12, &l0, 8);
    arr[20] = 'x';
    memcpy(arr + 21, &l1, 8);
    gm_gb_kv_raw(b, "tokenizer.ggml.tokens", 21, GM_GGUF_ARRAY, arr, sizeof arr);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0 'tokenizer.ggml.tokens': string 1 of 1048576 bytes exceeds the");
}

static void test_array_limits(void **state) {
    (void)state;
    struct {
        uint32_t et;
        uint64_t n;
    } __attribute__((packed)) hdr;
    _Static_assert(sizeof hdr == 12, "packed array header");

    /* count × elem size overflows 64 bits; rejected by the element cap before any multiplication */
    gm_gb *b = empty();
    hdr.et = GM_GGUF_UINT64;
    hdr.n = 1ull << 61;
    gm_gb_kv_raw(b, "a", 1, GM_GGUF_ARRAY, &hdr, sizeof hdr);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "array of 2305843009213693952 elements at offset 0x29 exceeds the limit of");

    b = empty();
    hdr.et = GM_GGUF_UINT32;
    hdr.n = 1000;
    gm_gb_kv_raw(b, "a", 1, GM_GGUF_ARRAY, &hdr, sizeof hdr);
    gm_gb_data_size(b, 100);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0 'a': array of 1000 u32 (4000 bytes) exceeds the");

    b = empty();
    hdr.et = GM_GGUF_STRING;
    hdr.n = 4294967295u;
    gm_gb_kv_raw(b, "tokenizer.ggml.tokens", 21, GM_GGUF_ARRAY, &hdr, sizeof hdr);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "array of 4294967295 elements");

    b = empty();
    hdr.et = GM_GGUF_STRING;
    hdr.n = GM_GGUF_MAX_ARRAY;
    gm_gb_kv_raw(b, "tokenizer.ggml.tokens", 21, GM_GGUF_ARRAY, &hdr, sizeof hdr);
    expect_fail(b, GEMMAC_ERR_BAD_FILE,
                "kv 0 'tokenizer.ggml.tokens': array of 67108864 strings exceeds the 27 bytes left at offset 0x45");

    b = empty();
    hdr.et = GM_GGUF_ARRAY;
    hdr.n = 1;
    gm_gb_kv_raw(b, "nest", 4, GM_GGUF_ARRAY, &hdr, sizeof hdr);
    gm_gb_data_size(b, 64);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0 'nest': nested array (array of arrays) at offset 0x28");

    b = empty();
    hdr.et = 99;
    hdr.n = 1;
    gm_gb_kv_raw(b, "a", 1, GM_GGUF_ARRAY, &hdr, sizeof hdr);
    gm_gb_data_size(b, 64);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "unknown array element type 99");
}

static void test_bad_value_type(void **state) {
    (void)state;
    gm_gb *b = empty();
    gm_gb_u32(b, "ok", 1);
    gm_gb_kv_raw(b, "bad", 3, 13, "\0\0\0\0", 4);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 1 'bad': unknown value type 13 at offset");
    b = empty();
    gm_gb_kv_raw(b, "bad", 3, 0xffffffffu, "\0\0\0\0", 4);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "unknown value type 4294967295");
}

static void test_bad_bool(void **state) {
    (void)state;
    gm_gb *b = empty();
    gm_gb_kv_raw(b, "flag", 4, GM_GGUF_BOOL, "\x02", 1);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0 'flag': bool value is 2 at offset 0x28 (must be 0 or 1)");
    b = empty();
    static const uint8_t bools[] = {0, 1, 7};
    gm_gb_arr(b, "flags", GM_GGUF_BOOL, 3, bools);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0 'flags': bool 2 is 7 at offset");
}

static void test_duplicate_key(void **state) {
    (void)state;
    gm_gb *b = empty();
    gm_gb_u32(b, "gemma3.block_count", 1);
    gm_gb_str(b, "other", "x");
    gm_gb_u32(b, "gemma3.block_count", 2);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 2 'gemma3.block_count': duplicate key at offset");
}

static void test_bad_key_bytes(void **state) {
    (void)state;
    gm_gb *b = empty();
    gm_gb_kv_raw(b, "gen\0eral", 8, GM_GGUF_UINT8, "\1", 1);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0: key contains a NUL byte at offset 0x23");
    b = empty();
    gm_gb_kv_raw(b, "", 0, GM_GGUF_UINT8, "\1", 1);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0: empty key at offset 0x20");
    /* odd bytes are escaped, long keys cut short in messages */
    b = empty();
    char key[300];
    memset(key, 'k', sizeof key);
    key[0] = '\xff';
    gm_gb_kv_raw(b, key, sizeof key, 77, "", 0);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0 '\\xffkkkk");
    b = empty();
    gm_gb_kv_raw(b, key, sizeof key, 77, "", 0);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kkk...': unknown value type 77");
}

/* ==== Tensor infos ==== */

static void test_n_dims(void **state) {
    (void)state;
    static const uint64_t ne[5] = {32, 1, 1, 1, 1};
    expect_fail(one_raw_tensor(0, ne, GM_TYPE_F32, 0, 128), GEMMAC_ERR_BAD_FILE, "tensor t: n_dims 0 at offset");
    expect_fail(one_raw_tensor(5, ne, GM_TYPE_F32, 0, 128), GEMMAC_ERR_BAD_FILE, "n_dims 5 at offset");
    /* 4 is fine */
    gm_gb *b = one_raw_tensor(4, ne, GM_TYPE_F32, 0, 128);
    size_t n;
    uint8_t *file = gm_gb_write(b, &n);
    gm_gb_free(b);
    gm_gguf *g;
    uint8_t *copy;
    gm_error err;
    if (open_copy(file, n, &g, &copy, &err)) fail_msg("%s", err.msg);
    gm_gguf_close(g);
    free(copy);
    free(file);
}

static void test_dims(void **state) {
    (void)state;
    expect_fail(one_raw_tensor(2, (const uint64_t[]){32, 0}, GM_TYPE_F32, 0, 128), GEMMAC_ERR_BAD_FILE,
                "tensor t: ne[1] = 0 at offset");
    expect_fail(one_raw_tensor(1, (const uint64_t[]){1ull << 63}, GM_TYPE_F32, 0, 128), GEMMAC_ERR_BAD_FILE,
                "ne[0] = 9223372036854775808 at offset");
    expect_fail(one_raw_tensor(3, (const uint64_t[]){1ull << 32, 1ull << 20, 1ull << 20}, GM_TYPE_F32, 0, 128),
                GEMMAC_ERR_BAD_FILE, "element count of dims [4294967296, 1048576, 1048576] overflows 63 bits");
    /* elements fit, bytes do not (the CVE-2026-33298 shape: a byte count that would wrap) */
    expect_fail(one_raw_tensor(1, (const uint64_t[]){1ull << 62}, GM_TYPE_F32, 0, 128), GEMMAC_ERR_BAD_FILE,
                "byte size of f32 [4611686018427387904] overflows 64 bits");
    /* bytes fit 64 bits but not the file */
    expect_fail(one_raw_tensor(2, (const uint64_t[]){1ull << 21, (1ull << 21) + 1}, GM_TYPE_F32, 0, 128),
                GEMMAC_ERR_BAD_FILE, "ends past the end of the data section");
}

static void test_block_multiple(void **state) {
    (void)state;
    expect_fail(one_raw_tensor(2, (const uint64_t[]){33, 2}, GM_TYPE_Q4_0, 0, 128), GEMMAC_ERR_BAD_FILE,
                "tensor t: ne[0] = 33 is not a multiple of the block size 32 of type q4_0");
    expect_fail(one_raw_tensor(1, (const uint64_t[]){128}, GM_TYPE_Q6_K, 0, 256), GEMMAC_ERR_BAD_FILE,
                "ne[0] = 128 is not a multiple of the block size 256 of type q6_K");
}

static void test_tensor_types(void **state) {
    (void)state;
    expect_fail(one_raw_tensor(1, (const uint64_t[]){32}, 77, 0, 128), GEMMAC_ERR_BAD_FILE,
                "tensor t: unknown tensor type 77 at offset");
    expect_fail(one_raw_tensor(1, (const uint64_t[]){32}, 0xffffffffu, 0, 128), GEMMAC_ERR_BAD_FILE,
                "unknown tensor type 4294967295");
    gm_gb *b = gm_gb_new();
    gm_gb_tensor(b, "blk.0.attn_q.weight", GM_TYPE_Q2_K, 2, (const int64_t[]){256, 2}, NULL);
    expect_fail(b, GEMMAC_ERR_UNSUPPORTED, "tensor blk.0.attn_q.weight: type q2_K is not supported");
    expect_fail(one_raw_tensor(1, (const uint64_t[]){256}, 16, 0, 128), GEMMAC_ERR_UNSUPPORTED,
                "tensor t: type iq2_xxs is not supported");
    expect_fail(one_raw_tensor(1, (const uint64_t[]){256}, GM_TYPE_Q8_K, 0, 512), GEMMAC_ERR_UNSUPPORTED,
                "type q8_K is not supported");
}

static void test_offsets(void **state) {
    (void)state;
    /* f32 [8] is 32 bytes */
    expect_fail(one_raw_tensor(1, (const uint64_t[]){8}, GM_TYPE_F32, 1024, 64), GEMMAC_ERR_BAD_FILE,
                "tensor t: offset 0x400 is past the end of the data section (64 bytes");
    expect_fail(one_raw_tensor(1, (const uint64_t[]){8}, GM_TYPE_F32, 32, 48), GEMMAC_ERR_BAD_FILE,
                "tensor t: offset 0x20 + size 32 ends past the end of the data section (48 bytes");
    expect_fail(one_raw_tensor(1, (const uint64_t[]){8}, GM_TYPE_F32, UINT64_MAX - 31, 64), GEMMAC_ERR_BAD_FILE,
                "offset 0xffffffffffffffe0 is past the end");
    expect_fail(one_raw_tensor(1, (const uint64_t[]){8}, GM_TYPE_F32, 4, 64), GEMMAC_ERR_BAD_FILE,
                "tensor t: offset 0x4 is not a multiple of the alignment 32");
    /* exactly at the end is fine */
    gm_gb *b = one_raw_tensor(1, (const uint64_t[]){8}, GM_TYPE_F32, 32, 64);
    size_t n;
    uint8_t *file = gm_gb_write(b, &n);
    gm_gb_free(b);
    gm_gguf *g;
    uint8_t *copy;
    gm_error err;
    if (open_copy(file, n, &g, &copy, &err)) fail_msg("%s", err.msg);
    assert_ptr_equal(gm_gguf_find_tensor(g, "t")->data, copy + n - 32);
    gm_gguf_close(g);
    free(copy);
    free(file);
}

static void test_overlap(void **state) {
    (void)state;
    gm_gb *b = gm_gb_new();
    gm_gb_tensor_raw(b, "a", 1, 1, (const uint64_t[]){16}, GM_TYPE_F32, 64);   /* [64, 128) */
    gm_gb_tensor_raw(b, "b", 1, 1, (const uint64_t[]){16}, GM_TYPE_F32, 0);    /* [0, 64) */
    gm_gb_tensor_raw(b, "c", 1, 1, (const uint64_t[]){16}, GM_TYPE_F32, 96);   /* [96, 160) */
    gm_gb_data_size(b, 256);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "tensor c: bytes [0x60, 0xa0) overlap tensor a at [0x40, 0x80)");
    b = gm_gb_new();
    gm_gb_tensor_raw(b, "a", 1, 1, (const uint64_t[]){8}, GM_TYPE_F32, 32);
    gm_gb_tensor_raw(b, "b", 1, 1, (const uint64_t[]){16}, GM_TYPE_F32, 32);
    gm_gb_data_size(b, 256);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "tensor b: bytes [0x20, 0x60) overlap tensor a at [0x20, 0x40)");
}

static void test_tensor_names(void **state) {
    (void)state;
    gm_gb *b = gm_gb_new();
    gm_gb_tensor(b, "w", GM_TYPE_F32, 1, (const int64_t[]){8}, NULL);
    gm_gb_tensor(b, "v", GM_TYPE_F32, 1, (const int64_t[]){8}, NULL);
    gm_gb_tensor(b, "w", GM_TYPE_F32, 1, (const int64_t[]){8}, NULL);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "tensor w: duplicate tensor name at offset 0x5a (also tensor 0)");
    b = gm_gb_new();
    gm_gb_tensor_raw(b, "blk\0.w", 6, 1, (const uint64_t[]){8}, GM_TYPE_F32, 0);
    gm_gb_data_size(b, 32);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "tensor 0: name contains a NUL byte at offset 0x23");
    b = gm_gb_new();
    gm_gb_tensor_raw(b, "", 0, 1, (const uint64_t[]){8}, GM_TYPE_F32, 0);
    gm_gb_data_size(b, 32);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "tensor 0: empty name at offset 0x20");
}

/* ==== Alignment ==== */

static void test_alignment(void **state) {
    (void)state;
    gm_gb *b = gm_gb_new();
    gm_gb_alignment(b, 0);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0 'general.alignment': alignment 0 at offset 0x35 is not a power of two");
    b = gm_gb_new();
    gm_gb_alignment(b, 3);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "alignment 3 at offset");
    b = gm_gb_new();
    gm_gb_u64(b, "general.alignment", 32);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 0 'general.alignment': type u64 at offset 0x18, expected u32");
    b = gm_gb_new();
    gm_gb_str(b, "x", "y");
    gm_gb_str(b, "general.alignment", "32");
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "kv 1 'general.alignment': type string");
    /* padding to the alignment runs past the end of a file with tensors */
    b = gm_gb_new();
    gm_gb_tensor_raw(b, "t", 1, 1, (const uint64_t[]){8}, GM_TYPE_F32, 0);
    size_t n;
    uint8_t *file = gm_gb_write(b, &n);
    gm_gb_free(b);
    gm_gguf *g;
    uint8_t *copy;
    gm_error err;
    assert_int_equal(open_copy(file, n - 1, &g, &copy, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "data section: file truncated: padding to the alignment of 32 bytes ends at offset 0x40");
    free(copy);
    free(file);
}

/* ==== Typed getters ==== */

static void test_getter_types(void **state) {
    (void)state;
    gm_gb *b = gm_gb_new();
    gm_gb_str(b, "s", "text");
    gm_gb_u32(b, "u", 7);
    gm_gb_i32(b, "neg", -7);
    gm_gb_f32(b, "f", 1.0f);
    static const uint8_t bytes[] = {1, 2};
    gm_gb_arr(b, "scores", GM_GGUF_UINT8, 2, bytes);
    size_t n;
    uint8_t *file = gm_gb_write(b, &n);
    gm_gb_free(b);
    gm_gguf *g;
    uint8_t *copy;
    gm_error err;
    if (open_copy(file, n, &g, &copy, &err)) fail_msg("%s", err.msg);

    uint32_t u32;
    int32_t i32;
    float f;
    bool bo;
    gm_str s;
    uint64_t cnt;
    const void *data;
    const gm_str *strs;
    assert_int_equal(gm_gguf_get_u32(g, "s", &u32, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "kv 's' at offset 0x18: expected u32, found string");
    assert_int_equal(gm_gguf_get_u32(g, "f", &u32, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "expected u32, found f32");
    assert_int_equal(gm_gguf_get_u32(g, "neg", &u32, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "value -7 does not fit u32");
    assert_int_equal(gm_gguf_get_i32(g, "scores", &i32, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "expected i32, found array of u8");
    assert_int_equal(gm_gguf_get_f32(g, "u", &f, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "expected f32, found u32");
    assert_int_equal(gm_gguf_get_bool(g, "u", &bo, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "expected bool, found u32");
    assert_int_equal(gm_gguf_get_str(g, "u", &s, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "kv 'u'");
    EXPECT_MSG(err, "expected string, found u32");
    /* the #26690 bug class: scores declared as u8 must not be read as f32 */
    assert_int_equal(gm_gguf_get_arr(g, "scores", GM_GGUF_FLOAT32, &cnt, &data, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "kv 'scores'");
    EXPECT_MSG(err, "expected array of f32, found array of u8");
    assert_int_equal(gm_gguf_get_arr(g, "u", GM_GGUF_UINT32, &cnt, &data, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "expected array of u32, found u32");
    assert_int_equal(gm_gguf_get_str_arr(g, "scores", &cnt, &strs, &err), GEMMAC_ERR_BAD_FILE);
    EXPECT_MSG(err, "expected array of string, found array of u8");
    assert_int_equal(gm_gguf_get_arr(g, "scores", GM_GGUF_STRING, &cnt, &data, &err), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_gguf_get_str_arr(g, "absent", &cnt, &strs, &err), GEMMAC_ERR_NOT_FOUND);
    EXPECT_MSG(err, "key 'absent' not found");
    assert_int_equal(gm_gguf_get_u32(g, "u", NULL, &err), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_gguf_get_u32(g, "u", &u32, NULL), GEMMAC_OK);   /* err may be NULL */
    assert_int_equal(u32, 7);
    assert_int_equal(gm_gguf_get_u32(g, "s", &u32, NULL), GEMMAC_ERR_BAD_FILE);
    assert_string_equal(gm_gguf_vtype_name(GM_GGUF_FLOAT64), "f64");
    assert_string_equal(gm_gguf_vtype_name((gm_gguf_vtype)99), "unknown");
    gm_gguf_close(g);
    gm_gguf_close(NULL);
    free(copy);
    free(file);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_v3_align32),
        cmocka_unit_test(test_roundtrip_v3_align64),
        cmocka_unit_test(test_roundtrip_v2_default),
        cmocka_unit_test(test_roundtrip_v2_align64),
        cmocka_unit_test(test_roundtrip_v3_align4096),
        cmocka_unit_test(test_open_file),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_no_tensors_no_padding),
        cmocka_unit_test(test_many_names),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_string_past_end),
        cmocka_unit_test(test_array_limits),
        cmocka_unit_test(test_bad_value_type),
        cmocka_unit_test(test_bad_bool),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_bad_key_bytes),
        cmocka_unit_test(test_n_dims),
        cmocka_unit_test(test_dims),
        cmocka_unit_test(test_block_multiple),
        cmocka_unit_test(test_tensor_types),
        cmocka_unit_test(test_offsets),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_tensor_names),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_getter_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
