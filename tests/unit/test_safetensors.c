/* test_safetensors.c: the safetensors reader (src/io/safetensors.c): files made by
 * tests/support/safetensors_builder round-trip; the fixture written by the real `safetensors` package
 * (tests/golden/make_safetensors_fixture.py) reads back with its names, dtypes, shapes and bytes; every
 * malformed header fails with its status and a message naming the problem; the index parser and the
 * multi-shard set (directories, shards, path traversal). Files are opened from exactly-sized heap copies so
 * ASan sees overreads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/safetensors.h"
#include "safetensors_builder.h"
#include "test_paths.h"

#define EXPECT_MSG(e, sub)                                                                                  \
    do {                                                                                                    \
        if (!strstr((e).msg, (sub))) fail_msg("message \"%s\" lacks \"%s\"", (e).msg, (sub));              \
    } while (0)

static gemmac_status open_copy(const uint8_t *p, size_t n, gm_st **f, uint8_t **copy, gm_error *err) {
    *copy = malloc(n ? n : 1);
    assert_non_null(*copy);
    if (n) memcpy(*copy, p, n);
    gm_error_clear(err);
    return gm_st_open_memory(*copy, n, f, err);
}

static void check_err(gemmac_status got, const gm_error *err, gemmac_status st, const char *sub) {
    if (got != st) fail_msg("status %d (%s), expected %d; message \"%s\"", got, gemmac_status_str(got), st, err->msg);
    assert_int_equal(err->status, st);
    EXPECT_MSG(*err, sub);
    assert_true(strlen(err->msg) > 0 && strlen(err->msg) < sizeof err->msg - 1);
    assert_null(strchr(err->msg, '\n'));
}

static void expect_fail_bytes(const uint8_t *file, size_t n, gemmac_status st, const char *sub) {
    gm_st *f = (gm_st *)1;
    uint8_t *copy;
    gm_error err;
    gemmac_status got = open_copy(file, n, &f, &copy, &err);
    check_err(got, &err, st, sub);
    assert_null(f);
    free(copy);
}

/* Writes b, expects opening to fail with st and a message containing sub; frees b. */
static void expect_fail(gm_sb *b, gemmac_status st, const char *sub) {
    size_t n;
    uint8_t *file = gm_sb_write(b, &n);
    gm_sb_free(b);
    expect_fail_bytes(file, n, st, sub);
    free(file);
}

/* A file whose whole header is json, over data bytes of zeros. */
static void expect_fail_header(const char *json, size_t data, gemmac_status st, const char *sub) {
    gm_sb *b = gm_sb_new();
    gm_sb_header_raw(b, json);
    gm_sb_data(b, NULL, data);
    expect_fail(b, st, sub);
}

/* One entry "t": value over data bytes. */
static void expect_fail_entry(const char *value, size_t data, gemmac_status st, const char *sub) {
    gm_sb *b = gm_sb_new();
    gm_sb_entry_raw(b, "t", value);
    gm_sb_data(b, NULL, data);
    expect_fail(b, st, sub);
}

static uint8_t pattern[512];

static void fill_pattern(void) {
    for (size_t i = 0; i < sizeof pattern; i++) pattern[i] = (uint8_t)(i * 7 + 3);
}

/* ==== Round trips ==== */

static gm_sb *small_builder(void) {
    fill_pattern();
    gm_sb *b = gm_sb_new();
    gm_sb_metadata(b, "format", "pt");
    gm_sb_metadata(b, "a key", "with \"quotes\"");
    gm_sb_tensor(b, "model.embed_tokens.weight", "BF16", 2, (const int64_t[]){5, 4}, pattern);
    gm_sb_tensor(b, "model.norm.weight", "F32", 1, (const int64_t[]){4}, pattern + 40);
    gm_sb_tensor(b, "layer_scalar", "F32", 0, NULL, pattern + 56);
    gm_sb_tensor(b, "experts.gate_up_proj", "F16", 3, (const int64_t[]){2, 3, 4}, pattern + 60);
    gm_sb_tensor(b, "ids", "I64", 1, (const int64_t[]){2}, pattern + 108);
    gm_sb_tensor(b, "zero", "F32", 2, (const int64_t[]){0, 7}, NULL);
    return b;
}

static void check_st_tensor(const gm_st *f, const char *name, gm_st_dtype dt, int n_dims, const int64_t *shape,
                            const void *bytes, uint64_t size) {
    const gm_st_tensor *t = gm_st_find_tensor(f, name);
    if (!t) fail_msg("tensor %s not found", name);
    assert_string_equal(t->name, name);
    assert_int_equal(t->dtype, dt);
    assert_int_equal(t->n_dims, n_dims);
    uint64_t n = 1;
    for (int d = 0; d < GM_ST_MAX_DIMS; d++) {
        int64_t want = d < n_dims ? shape[d] : 1;
        assert_int_equal(t->shape[d], want);
        /* GGML order reverses HF order */
        int64_t want_ne = d < n_dims ? shape[n_dims - 1 - d] : 1;
        assert_int_equal(t->ne[d], want_ne);
        if (d < n_dims) n *= (uint64_t)shape[d];
    }
    assert_int_equal(t->n_elements, n);
    assert_int_equal(t->size, size);
    assert_int_equal(t->size, n * gm_st_dtype_bits(dt) / 8);
    const uint8_t *base = (const uint8_t *)t->data;
    assert_true(base >= (const uint8_t *)t->data - t->offset);
    if (size) assert_memory_equal(t->data, bytes, size);
}

static void test_round_trip(void **state) {
    (void)state;
    gm_sb *b = small_builder();
    size_t n;
    uint8_t *file = gm_sb_write(b, &n);
    gm_sb_free(b);
    gm_st *f;
    uint8_t *copy;
    gm_error err;
    assert_int_equal(open_copy(file, n, &f, &copy, &err), GEMMAC_OK);
    assert_int_equal(gm_st_n_tensors(f), 6);
    assert_int_equal(gm_st_file_size(f), n);
    uint64_t hlen;
    memcpy(&hlen, file, 8);
    assert_int_equal(gm_st_data_offset(f), 8 + hlen);
    assert_int_equal(gm_st_data_offset(f) % 8, 0);   /* padded like the safetensors library */

    check_st_tensor(f, "model.embed_tokens.weight", GM_ST_BF16, 2, (const int64_t[]){5, 4}, pattern, 40);
    check_st_tensor(f, "model.norm.weight", GM_ST_F32, 1, (const int64_t[]){4}, pattern + 40, 16);
    check_st_tensor(f, "layer_scalar", GM_ST_F32, 0, NULL, pattern + 56, 4);
    check_st_tensor(f, "experts.gate_up_proj", GM_ST_F16, 3, (const int64_t[]){2, 3, 4}, pattern + 60, 48);
    check_st_tensor(f, "ids", GM_ST_I64, 1, (const int64_t[]){2}, pattern + 108, 16);
    check_st_tensor(f, "zero", GM_ST_F32, 2, (const int64_t[]){0, 7}, NULL, 0);
    assert_null(gm_st_find_tensor(f, "model.norm"));
    assert_null(gm_st_find_tensor(f, "__metadata__"));
    assert_null(gm_st_find_tensor(f, ""));

    /* tensor_at walks in data order, every tensor's data inside the copy */
    uint64_t prev_end = 0;
    for (uint64_t i = 0; i < gm_st_n_tensors(f); i++) {
        const gm_st_tensor *t = gm_st_tensor_at(f, i);
        assert_int_equal(t->offset, prev_end);
        assert_ptr_equal(t->data, copy + gm_st_data_offset(f) + t->offset);
        assert_ptr_equal(gm_st_find_tensor(f, t->name), t);
        assert_true(t->header_offset >= 8 && t->header_offset < gm_st_data_offset(f));
        assert_int_equal(copy[t->header_offset], '"');
        assert_memory_equal(copy + t->header_offset + 1, t->name, strlen(t->name));
        prev_end = t->offset + t->size;
    }
    assert_int_equal(prev_end, n - gm_st_data_offset(f));
    assert_null(gm_st_tensor_at(f, gm_st_n_tensors(f)));

    assert_int_equal(gm_st_n_metadata(f), 2);
    assert_string_equal(gm_st_find_metadata(f, "format"), "pt");
    assert_string_equal(gm_st_find_metadata(f, "a key"), "with \"quotes\"");
    assert_null(gm_st_find_metadata(f, "Format"));
    const char *k, *v;
    assert_true(gm_st_metadata_at(f, 0, &k, &v));
    assert_string_equal(k, "a key");   /* sorted by key */
    assert_false(gm_st_metadata_at(f, 2, &k, &v));

    gm_type ty;
    assert_int_equal(gm_st_weight_type(gm_st_find_tensor(f, "model.embed_tokens.weight"), &ty, &err), GEMMAC_OK);
    assert_int_equal(ty, GM_TYPE_BF16);
    assert_int_equal(gm_st_weight_type(gm_st_find_tensor(f, "experts.gate_up_proj"), &ty, &err), GEMMAC_OK);
    assert_int_equal(ty, GM_TYPE_F16);
    assert_int_equal(gm_st_weight_type(gm_st_find_tensor(f, "model.norm.weight"), &ty, &err), GEMMAC_OK);
    assert_int_equal(ty, GM_TYPE_F32);
    gm_error_clear(&err);
    check_err(gm_st_weight_type(gm_st_find_tensor(f, "ids"), &ty, &err), &err, GEMMAC_ERR_UNSUPPORTED,
              "tensor 'ids': dtype I64 is not supported");
    gm_st_close(f);
    free(copy);
    free(file);
}

static void test_dtype_names(void **state) {
    (void)state;
    assert_string_equal(gm_st_dtype_name(GM_ST_BF16), "BF16");
    assert_string_equal(gm_st_dtype_name(GM_ST_F8_E4M3), "F8_E4M3");
    assert_string_equal(gm_st_dtype_name((gm_st_dtype)99), "unknown");
    assert_int_equal(gm_st_dtype_bits(GM_ST_F4), 4);
    assert_int_equal(gm_st_dtype_bits(GM_ST_C64), 64);
    assert_int_equal(gm_st_dtype_bits((gm_st_dtype)-1), 0);
    /* every dtype the format names is listed (and sized like the builder's table) */
    for (int d = 0; d < GM_ST_DTYPE_COUNT; d++)
        assert_int_equal(gm_sb_dtype_bytes(gm_st_dtype_name((gm_st_dtype)d), 8), gm_st_dtype_bits((gm_st_dtype)d));
    /* a sub-byte dtype whose element count makes whole bytes is accepted */
    gm_sb *b = gm_sb_new();
    gm_sb_tensor(b, "fp4", "F4", 2, (const int64_t[]){3, 2}, NULL);
    gm_sb_tensor(b, "fp6", "F6_E2M3", 1, (const int64_t[]){4}, NULL);
    size_t n;
    uint8_t *file = gm_sb_write(b, &n);
    gm_sb_free(b);
    gm_st *f;
    uint8_t *copy;
    gm_error err;
    assert_int_equal(open_copy(file, n, &f, &copy, &err), GEMMAC_OK);
    assert_int_equal(gm_st_find_tensor(f, "fp4")->size, 3);
    assert_int_equal(gm_st_find_tensor(f, "fp6")->size, 3);
    gm_st_close(f);
    free(copy);
    free(file);
}

/* ==== The fixture written by the safetensors package ==== */

typedef struct golden_tensor {
    const char *name;
    gm_st_dtype dtype;
    int n_dims;
    int64_t shape[4];
} golden_tensor;

/* Keep in step with TENSORS in tests/golden/make_safetensors_fixture.py. */
static const golden_tensor k_golden[] = {
    {"model.embed_tokens.weight", GM_ST_F32, 2, {4, 8}},
    {"model.layers.0.self_attn.q_proj.weight", GM_ST_BF16, 2, {6, 8}},
    {"model.norm.weight", GM_ST_F16, 1, {10}},
    {"ids", GM_ST_I64, 1, {3}},
    {"bytes", GM_ST_U8, 3, {2, 3, 5}},
    {"mask", GM_ST_BOOL, 1, {7}},
    {"fp8.scale", GM_ST_F8_E4M3, 2, {4, 2}},
    {"scalar", GM_ST_F32, 0, {0}},
    {"empty", GM_ST_F32, 2, {0, 3}},
    {"conv.weight", GM_ST_F16, 4, {2, 3, 2, 2}},
    {"unicod\xc3\xa9.weight", GM_ST_F32, 1, {2}},
};

/* The byte rule of make_safetensors_fixture.py. */
static void golden_bytes(const golden_tensor *g, uint8_t *out, size_t n) {
    unsigned seed = 0;
    for (const unsigned char *p = (const unsigned char *)g->name; *p; p++) seed += *p;
    seed %= 256;
    for (size_t j = 0; j < n; j++)
        out[j] = g->dtype == GM_ST_BOOL ? (uint8_t)((seed + j) % 2) : (uint8_t)((seed * 37 + j * 11 + 5) % 256);
}

static void test_golden_fixture(void **state) {
    (void)state;
    char path[1024];
    gm_test_source_path("tests/golden/st_fixture.safetensors", path, sizeof path);
    gm_st *f;
    gm_error err;
    gm_error_clear(&err);
    gemmac_status st = gm_st_open(path, &f, &err);
    if (st) fail_msg("%s: %s", path, err.msg);
    size_t n_golden = sizeof k_golden / sizeof *k_golden;
    assert_int_equal(gm_st_n_tensors(f), n_golden);
    for (size_t i = 0; i < n_golden; i++) {
        const golden_tensor *g = &k_golden[i];
        uint64_t n = 1;
        for (int d = 0; d < g->n_dims; d++) n *= (uint64_t)g->shape[d];
        size_t bytes = (size_t)(n * gm_st_dtype_bits(g->dtype) / 8);
        uint8_t *want = malloc(bytes + 1);
        assert_non_null(want);
        golden_bytes(g, want, bytes);
        check_st_tensor(f, g->name, g->dtype, g->n_dims, g->shape, want, bytes);
        free(want);
    }
    assert_int_equal(gm_st_n_metadata(f), 2);
    assert_string_equal(gm_st_find_metadata(f, "format"), "pt");
    assert_string_equal(gm_st_find_metadata(f, "note"), "gemmac fixture");

    /* every proper prefix of the file is refused (the tensors must tile the data section) */
    const uint8_t *base = (const uint8_t *)gm_st_tensor_at(f, 0)->data - gm_st_data_offset(f);
    size_t size = (size_t)gm_st_file_size(f);
    uint8_t *whole = malloc(size);
    assert_non_null(whole);
    memcpy(whole, base, size);
    gm_st_close(f);
    for (size_t cut = 0; cut < size; cut++) {
        gm_st *g = (gm_st *)1;
        uint8_t *copy;
        st = open_copy(whole, cut, &g, &copy, &err);
        if (st != GEMMAC_ERR_BAD_FILE) fail_msg("prefix of %zu bytes: status %d (%s)", cut, st, err.msg);
        assert_null(g);
        free(copy);
    }
    free(whole);
}

static void test_truncated(void **state) {
    (void)state;
    gm_sb *b = small_builder();
    size_t n;
    uint8_t *file = gm_sb_write(b, &n);
    gm_sb_free(b);
    for (size_t cut = 0; cut < n; cut++) {
        gm_st *f = (gm_st *)1;
        uint8_t *copy;
        gm_error err;
        gemmac_status st = open_copy(file, cut, &f, &copy, &err);
        if (st != GEMMAC_ERR_BAD_FILE) fail_msg("prefix of %zu bytes: status %d (%s)", cut, st, err.msg);
        assert_null(f);
        free(copy);
    }
    expect_fail_bytes(file, 0, GEMMAC_ERR_BAD_FILE, "too small");
    expect_fail_bytes(file, 7, GEMMAC_ERR_BAD_FILE, "too small");
    expect_fail_bytes(file, 8, GEMMAC_ERR_BAD_FILE, "runs past the end of the file (0 bytes follow it)");
    expect_fail_bytes(file, n - 1, GEMMAC_ERR_BAD_FILE, "end past the data section");
    free(file);
}

/* ==== Malformed headers ==== */

static void test_header_length(void **state) {
    (void)state;
    gm_sb *b = small_builder();
    gm_sb_header_len(b, 0);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "header length 0 at offset 0x0");
    b = small_builder();
    gm_sb_header_len(b, UINT64_MAX);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "exceeds the limit of 100000000 bytes");
    b = small_builder();
    gm_sb_header_len(b, GM_ST_MAX_HEADER + 1ull);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "header length 100000001 at offset 0x0 exceeds the limit");
    b = small_builder();
    gm_sb_header_len(b, 100000);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "header length 100000 at offset 0x0 runs past the end of the file");
    /* a header length that cuts the JSON short */
    b = small_builder();
    gm_sb_header_len(b, 20);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "malformed JSON");
}

static void test_json_structure(void **state) {
    (void)state;
    expect_fail_header("[1, 2]", 0, GEMMAC_ERR_BAD_FILE, "header: the top level is an array, expected an object");
    expect_fail_header("\"str\"", 0, GEMMAC_ERR_BAD_FILE, "the top level is a string");
    expect_fail_header("{\"t\": {\"dtype\": \"F32\",", 0, GEMMAC_ERR_BAD_FILE, "header: malformed JSON at offset 0x");
    expect_fail_header("{} x", 0, GEMMAC_ERR_BAD_FILE, "malformed JSON at offset 0xb");
    expect_fail_header("{\"a\" 1}", 0, GEMMAC_ERR_BAD_FILE, "malformed JSON");
    expect_fail_header("NaN", 0, GEMMAC_ERR_BAD_FILE, "malformed JSON");
    expect_fail_header("        ", 0, GEMMAC_ERR_BAD_FILE, "empty JSON text at offset 0x8");
    expect_fail_header("{\"a\":[[[[[[[[[]]]]]]]]]}", 0, GEMMAC_ERR_BAD_FILE, "nesting deeper than 8 levels at offset 0x");
    /* deep nesting far past cJSON's own limit is refused by the pre-scan, not by recursion */
    char *deep = malloc(200001);
    assert_non_null(deep);
    memset(deep, '[', 200000);
    deep[200000] = '\0';
    expect_fail_header(deep, 0, GEMMAC_ERR_BAD_FILE, "nesting deeper than 8 levels at offset 0x10");
    free(deep);
    /* NUL bytes, invalid UTF-8, escaped NULs (cJSON would cut the name there) */
    gm_sb *b = gm_sb_new();
    gm_sb_header_raw(b, "{\"a\":{}}");
    size_t n;
    uint8_t *file = gm_sb_write(b, &n);
    gm_sb_free(b);
    file[10] = '\0';
    expect_fail_bytes(file, n, GEMMAC_ERR_BAD_FILE, "NUL byte at offset 0xa");
    file[10] = (char)0xff;
    expect_fail_bytes(file, n, GEMMAC_ERR_BAD_FILE, "invalid UTF-8 byte 0xff at offset 0xa");
    file[10] = (char)0xc0;   /* overlong */
    expect_fail_bytes(file, n, GEMMAC_ERR_BAD_FILE, "invalid UTF-8");
    free(file);
    expect_fail_header("{\"a\\u0000b\":{}}", 0, GEMMAC_ERR_BAD_FILE, "escaped NUL (\\u0000) in a string at offset 0xb");
    expect_fail_header("{\"\\ud800\":{}}", 0, GEMMAC_ERR_BAD_FILE, "malformed JSON");   /* lone surrogate */
}

static void test_entries(void **state) {
    (void)state;
    expect_fail_entry("[1]", 0, GEMMAC_ERR_BAD_FILE, "tensor 't' at offset 0x9: value is an array, expected an object");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}", 4, GEMMAC_ERR_BAD_FILE,
                      "tensor 't' at offset 0x9: unknown field 'extra'");
    expect_fail_entry("{\"shape\":[1],\"data_offsets\":[0,4]}", 4, GEMMAC_ERR_BAD_FILE, "missing field 'dtype'");
    expect_fail_entry("{\"dtype\":\"F32\",\"data_offsets\":[0,4]}", 4, GEMMAC_ERR_BAD_FILE, "missing field 'shape'");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[1]}", 4, GEMMAC_ERR_BAD_FILE, "missing field 'data_offsets'");
    expect_fail_entry("{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
                      GEMMAC_ERR_BAD_FILE, "duplicate key 'dtype' in object 't'");
    expect_fail_entry("{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, GEMMAC_ERR_BAD_FILE,
                      "unknown dtype 'F33'");
    expect_fail_entry("{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, GEMMAC_ERR_BAD_FILE,
                      "unknown dtype 'f32'");
    expect_fail_entry("{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}", 4, GEMMAC_ERR_BAD_FILE,
                      "field 'dtype' is a number, expected a string");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}", 4, GEMMAC_ERR_BAD_FILE,
                      "field 'shape' is a string, expected an array");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{}}", 4, GEMMAC_ERR_BAD_FILE,
                      "field 'data_offsets' is an object, expected an array");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}", 8, GEMMAC_ERR_BAD_FILE,
                      "'data_offsets' must have exactly 2 elements");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}", 4, GEMMAC_ERR_BAD_FILE,
                      "exactly 2 elements");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}", 4, GEMMAC_ERR_BAD_FILE,
                      "data_offsets[1] is a string");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}", 4, GEMMAC_ERR_BAD_FILE,
                      "data_offsets[0] is -4, expected a non-negative integer");
    /* shapes */
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}", 4, GEMMAC_ERR_BAD_FILE,
                      "shape[0] is -1, expected a non-negative integer");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,4]}", 4, GEMMAC_ERR_BAD_FILE,
                      "shape[1] is 1.5");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[1e20],\"data_offsets\":[0,4]}", 4, GEMMAC_ERR_BAD_FILE,
                      "shape[0] is 1e+20, expected a non-negative integer below 2^53");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[9007199254740993],\"data_offsets\":[0,4]}", 4,
                      GEMMAC_ERR_BAD_FILE, "shape[0] is");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,4]}", 4, GEMMAC_ERR_BAD_FILE,
                      "shape[0] is a bool");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}", 4,
                      GEMMAC_ERR_BAD_FILE, "shape has more than 8 dims");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}", 4,
                      GEMMAC_ERR_BAD_FILE, "element count of shape [4294967296, 4294967296] overflows 63 bits");
    expect_fail_entry("{\"dtype\":\"F64\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,4]}", 4,
                      GEMMAC_ERR_BAD_FILE, "byte size of F64 [2147483648, 2147483648] overflows 64 bits");
    /* a huge shape whose byte size wraps must not pass as a small tensor (CVE-2026-33298) */
    expect_fail_entry("{\"dtype\":\"U8\",\"shape\":[4398046511104,4194304],\"data_offsets\":[0,0]}", 0,
                      GEMMAC_ERR_BAD_FILE, "overflows 63 bits");
    expect_fail_entry("{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}", 2, GEMMAC_ERR_BAD_FILE,
                      "3 elements of F4 are not a whole number of bytes");
    /* offsets */
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1000]}", 8, GEMMAC_ERR_BAD_FILE,
                      "data_offsets [0, 1000] end past the data section (8 bytes from file offset 0x");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}", 8, GEMMAC_ERR_BAD_FILE,
                      "data_offsets [8, 0] end before they begin");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}", 12, GEMMAC_ERR_BAD_FILE,
                      "data_offsets [0, 12] hold 12 bytes, but F32 [2] needs 8");
    expect_fail_entry("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[9007199254740000,9007199254740008]}", 8,
                      GEMMAC_ERR_BAD_FILE, "end past the data section");
}

static void test_names(void **state) {
    (void)state;
    gm_sb *b = gm_sb_new();
    gm_sb_entry_raw(b, "", "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}");
    gm_sb_data(b, NULL, 4);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "empty tensor name");
    b = gm_sb_new();
    gm_sb_tensor(b, "w", "F32", 1, (const int64_t[]){1}, NULL);
    gm_sb_entry_raw(b, "w", "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}");
    gm_sb_data(b, NULL, 4);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "header: duplicate key 'w' in the top-level object");
    /* an escaped spelling of the same name is the same name */
    b = gm_sb_new();
    gm_sb_tensor(b, "w", "F32", 1, (const int64_t[]){1}, NULL);
    gm_sb_entry_raw(b, "\\u0077", "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}");
    gm_sb_data(b, NULL, 4);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "duplicate key 'w'");
    b = gm_sb_new();
    gm_sb_metadata(b, "a", "1");
    gm_sb_entry_raw(b, "__metadata__", "{}");
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "duplicate key '__metadata__'");
    /* names with odd bytes are shown escaped */
    b = gm_sb_new();
    gm_sb_entry_raw(b, "a\\nb'c", "{\"dtype\":\"X\",\"shape\":[1],\"data_offsets\":[0,4]}");
    gm_sb_data(b, NULL, 4);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "tensor 'a\\x0ab\\x27c' at offset 0x9: unknown dtype 'X'");
}

static void test_metadata(void **state) {
    (void)state;
    gm_sb *b = gm_sb_new();
    gm_sb_entry_raw(b, "__metadata__", "\"pt\"");
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "header: __metadata__: is a string, expected an object");
    b = gm_sb_new();
    gm_sb_entry_raw(b, "__metadata__", "{\"format\":\"pt\",\"n\":3}");
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "__metadata__: value of 'n' is a number, expected a string");
    b = gm_sb_new();
    gm_sb_entry_raw(b, "__metadata__", "{\"a\":\"1\",\"a\":\"2\"}");
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "duplicate key 'a' in object '__metadata__'");
    /* a file with only metadata and no data is valid */
    b = gm_sb_new();
    gm_sb_metadata(b, "format", "pt");
    size_t n;
    uint8_t *file = gm_sb_write(b, &n);
    gm_sb_free(b);
    gm_st *f;
    uint8_t *copy;
    gm_error err;
    assert_int_equal(open_copy(file, n, &f, &copy, &err), GEMMAC_OK);
    assert_int_equal(gm_st_n_tensors(f), 0);
    assert_null(gm_st_tensor_at(f, 0));
    assert_null(gm_st_find_tensor(f, "x"));
    gm_st_close(f);
    free(copy);
    free(file);
}

static void test_layout(void **state) {
    (void)state;
    /* overlapping tensors */
    gm_sb *b = gm_sb_new();
    gm_sb_entry_raw(b, "a", "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}");
    gm_sb_entry_raw(b, "b", "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}");
    gm_sb_data(b, NULL, 12);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "tensor 'b' at offset 0x3e: data [4, 12) overlaps tensor 'a' at [0, 8)");
    /* two names over the same bytes */
    b = gm_sb_new();
    gm_sb_entry_raw(b, "a", "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}");
    gm_sb_entry_raw(b, "b", "{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}");
    gm_sb_data(b, NULL, 8);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "overlaps tensor");
    /* a zero-size tensor inside another one */
    b = gm_sb_new();
    gm_sb_entry_raw(b, "a", "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}");
    gm_sb_entry_raw(b, "z", "{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}");
    gm_sb_data(b, NULL, 8);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "tensor 'z' at offset 0x3e: data [4, 4) overlaps tensor 'a'");
    /* a gap between tensors */
    b = gm_sb_new();
    gm_sb_entry_raw(b, "a", "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}");
    gm_sb_entry_raw(b, "b", "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}");
    gm_sb_data(b, NULL, 20);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "tensor 'b' at offset 0x3e: data begins at 12, leaving bytes [8, 12)");
    /* bytes after the last tensor */
    b = gm_sb_new();
    gm_sb_tensor(b, "a", "F32", 1, (const int64_t[]){2}, NULL);
    gm_sb_data(b, NULL, 3);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "data section: 3 bytes from file offset 0x");
    /* no tensors but data */
    b = gm_sb_new();
    gm_sb_data(b, NULL, 1);
    expect_fail(b, GEMMAC_ERR_BAD_FILE, "belong to no tensor");
    /* tensors need not be listed in data order, and data need not be aligned */
    b = gm_sb_new();
    gm_sb_no_pad(b);
    gm_sb_entry_raw(b, "late", "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1,5]}");
    gm_sb_entry_raw(b, "early", "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}");
    gm_sb_data(b, "\x01\x02\x03\x04\x05", 5);
    size_t n;
    uint8_t *file = gm_sb_write(b, &n);
    gm_sb_free(b);
    gm_st *f;
    uint8_t *copy;
    gm_error err;
    assert_int_equal(open_copy(file, n, &f, &copy, &err), GEMMAC_OK);
    assert_string_equal(gm_st_tensor_at(f, 0)->name, "early");
    assert_string_equal(gm_st_tensor_at(f, 1)->name, "late");
    assert_memory_equal(gm_st_find_tensor(f, "late")->data, "\x02\x03\x04\x05", 4);
    gm_st_close(f);
    free(copy);
    free(file);
}

/* ==== Index and shards ==== */

static void expect_index_fail(const char *json, gemmac_status st, const char *sub) {
    gm_st_index *ix = (gm_st_index *)1;
    gm_error err;
    gm_error_clear(&err);
    size_t n = strlen(json);
    char *copy = malloc(n + 1);
    assert_non_null(copy);
    memcpy(copy, json, n);
    gemmac_status got = gm_st_index_parse(copy, n, "idx.json", &ix, &err);
    check_err(got, &err, st, sub);
    assert_null(ix);
    free(copy);
}

static void test_index_parse(void **state) {
    (void)state;
    const char *json = "{\"metadata\":{\"total_size\":64},\"weight_map\":{"
                       "\"z\":\"model-00002-of-00002.safetensors\",\"b\":\"model-00001-of-00002.safetensors\","
                       "\"a\":\"model-00002-of-00002.safetensors\"}}";
    gm_st_index *ix;
    gm_error err;
    assert_int_equal(gm_st_index_parse(json, strlen(json), NULL, &ix, &err), GEMMAC_OK);
    assert_int_equal(gm_st_index_n_entries(ix), 3);
    assert_int_equal(gm_st_index_n_files(ix), 2);
    assert_string_equal(gm_st_index_file(ix, 0), "model-00002-of-00002.safetensors");   /* first appearance */
    assert_string_equal(gm_st_index_file(ix, 1), "model-00001-of-00002.safetensors");
    assert_null(gm_st_index_file(ix, 2));
    const char *t;
    uint32_t file;
    assert_true(gm_st_index_entry(ix, 0, &t, &file));
    assert_string_equal(t, "a");
    assert_int_equal(file, 0);
    assert_true(gm_st_index_entry(ix, 1, &t, &file));
    assert_string_equal(t, "b");
    assert_int_equal(file, 1);
    assert_true(gm_st_index_entry(ix, 2, &t, &file));
    assert_string_equal(t, "z");
    assert_int_equal(file, 0);
    assert_false(gm_st_index_entry(ix, 3, &t, &file));
    gm_st_index_free(ix);

    expect_index_fail("{\"weight_map\":{\"a\":\"../model.safetensors\"}}", GEMMAC_ERR_BAD_FILE,
                      "idx.json: weight_map: tensor 'a' maps to shard '../model.safetensors', which is not a plain file name");
    expect_index_fail("{\"weight_map\":{\"a\":\"/etc/passwd\"}}", GEMMAC_ERR_BAD_FILE, "not a plain file name");
    expect_index_fail("{\"weight_map\":{\"a\":\"sub/x.safetensors\"}}", GEMMAC_ERR_BAD_FILE, "not a plain file name");
    expect_index_fail("{\"weight_map\":{\"a\":\"..\\\\x.safetensors\"}}", GEMMAC_ERR_BAD_FILE, "not a plain file name");
    expect_index_fail("{\"weight_map\":{\"a\":\"..\"}}", GEMMAC_ERR_BAD_FILE, "not a plain file name");
    expect_index_fail("{\"weight_map\":{\"a\":\".\"}}", GEMMAC_ERR_BAD_FILE, "not a plain file name");
    expect_index_fail("{\"weight_map\":{\"a\":\"\"}}", GEMMAC_ERR_BAD_FILE, "not a plain file name");
    expect_index_fail("{\"weight_map\":{\"a\":3}}", GEMMAC_ERR_BAD_FILE,
                      "weight_map: tensor 'a' maps to a number, expected a file name");
    expect_index_fail("{\"weight_map\":{\"\":\"x.safetensors\"}}", GEMMAC_ERR_BAD_FILE, "empty tensor name");
    expect_index_fail("{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}", GEMMAC_ERR_BAD_FILE,
                      "duplicate key 'a' in object 'weight_map'");
    expect_index_fail("{\"weight_map\":{}}", GEMMAC_ERR_BAD_FILE, "'weight_map' is empty");
    expect_index_fail("{\"weight_map\":[]}", GEMMAC_ERR_BAD_FILE, "key 'weight_map' is an array, expected an object");
    expect_index_fail("{\"metadata\":{}}", GEMMAC_ERR_BAD_FILE, "idx.json: key 'weight_map' not found");
    expect_index_fail("{\"metadata\":1,\"weight_map\":{\"a\":\"x\"}}", GEMMAC_ERR_BAD_FILE,
                      "key 'metadata' is a number, expected an object");
    expect_index_fail("[]", GEMMAC_ERR_BAD_FILE, "the top level is an array");
    expect_index_fail("{\"weight_map\":{\"a\":\"x\"}", GEMMAC_ERR_BAD_FILE, "idx.json: malformed JSON");
}

static char g_tmp[256];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int tmp_setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/gm_st_test_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int tmp_teardown(void **state) {
    (void)state;
    return nftw(g_tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *tmp_path(const char *rel, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", g_tmp, rel);
    return buf;
}

static void write_text(const char *rel, const char *text) {
    char p[512];
    FILE *f = fopen(tmp_path(rel, p, sizeof p), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static void write_shard(const char *rel, const char *const *names, int n) {
    gm_sb *b = gm_sb_new();
    fill_pattern();
    for (int i = 0; i < n; i++) gm_sb_tensor(b, names[i], "F32", 2, (const int64_t[]){2, 3}, pattern + 24 * i);
    char p[512];
    assert_true(gm_sb_write_file(b, tmp_path(rel, p, sizeof p)));
    gm_sb_free(b);
}

static void expect_set_fail(const char *rel, gemmac_status st, const char *sub) {
    char p[512];
    gm_st_set *s = (gm_st_set *)1;
    gm_error err;
    gm_error_clear(&err);
    check_err(gm_st_set_open(tmp_path(rel, p, sizeof p), &s, &err), &err, st, sub);
    assert_null(s);
}

static void test_set_sharded(void **state) {
    (void)state;
    char p[512];
    assert_int_equal(mkdir(tmp_path("sharded", p, sizeof p), 0700), 0);
    write_shard("sharded/model-00001-of-00002.safetensors", (const char *const[]){"b.weight", "a.weight"}, 2);
    write_shard("sharded/model-00002-of-00002.safetensors", (const char *const[]){"c.weight"}, 1);
    write_text("sharded/model.safetensors.index.json",
               "{\"metadata\": {\"total_size\": 72}, \"weight_map\": {\"a.weight\": \"model-00001-of-00002.safetensors\","
               " \"b.weight\": \"model-00001-of-00002.safetensors\", \"c.weight\": \"model-00002-of-00002.safetensors\"}}");
    const char *opens[] = {"sharded", "sharded/model.safetensors.index.json"};
    for (int k = 0; k < 2; k++) {
        gm_st_set *s;
        gm_error err;
        gm_error_clear(&err);
        gemmac_status st = gm_st_set_open(tmp_path(opens[k], p, sizeof p), &s, &err);
        if (st) fail_msg("%s", err.msg);
        assert_int_equal(gm_st_set_n_files(s), 2);
        assert_string_equal(gm_st_set_file_name(s, 0), "model-00001-of-00002.safetensors");
        assert_string_equal(gm_st_set_file_name(s, 1), "model-00002-of-00002.safetensors");
        assert_null(gm_st_set_file_name(s, 2));
        assert_int_equal(gm_st_set_n_tensors(s), 3);
        uint32_t file = 99;
        const gm_st_tensor *t = gm_st_set_find(s, "c.weight", &file);
        assert_non_null(t);
        assert_int_equal(file, 1);
        assert_ptr_equal(t, gm_st_find_tensor(gm_st_set_file(s, 1), "c.weight"));
        assert_memory_equal(t->data, pattern, 24);
        t = gm_st_set_find(s, "a.weight", &file);
        assert_int_equal(file, 0);
        assert_memory_equal(t->data, pattern + 24, 24);
        assert_null(gm_st_set_find(s, "d.weight", &file));
        const char *order[] = {"a.weight", "b.weight", "c.weight"};
        for (uint64_t i = 0; i < 3; i++) assert_string_equal(gm_st_set_tensor_at(s, i, NULL)->name, order[i]);
        assert_null(gm_st_set_tensor_at(s, 3, NULL));
        gm_st_set_close(s);
    }
    /* a directory with model.safetensors uses it (as transformers does), whatever else is there */
    write_shard("sharded/model.safetensors", (const char *const[]){"only"}, 1);
    gm_st_set *s;
    gm_error err;
    assert_int_equal(gm_st_set_open(tmp_path("sharded", p, sizeof p), &s, &err), GEMMAC_OK);
    assert_int_equal(gm_st_set_n_files(s), 1);
    assert_string_equal(gm_st_set_file_name(s, 0), "model.safetensors");
    assert_non_null(gm_st_set_find(s, "only", NULL));
    gm_st_set_close(s);
    /* one file opened directly */
    assert_int_equal(gm_st_set_open(tmp_path("sharded/model-00002-of-00002.safetensors", p, sizeof p), &s, &err),
                     GEMMAC_OK);
    assert_int_equal(gm_st_set_n_tensors(s), 1);
    gm_st_set_close(s);
}

static void test_set_errors(void **state) {
    (void)state;
    char p[512];
    assert_int_equal(mkdir(tmp_path("bad", p, sizeof p), 0700), 0);
    expect_set_fail("bad", GEMMAC_ERR_NOT_FOUND, "no model.safetensors or model.safetensors.index.json");
    expect_set_fail("nonexistent", GEMMAC_ERR_NOT_FOUND, "cannot stat");
    write_shard("bad/s1.safetensors", (const char *const[]){"a", "b"}, 2);
    write_shard("bad/s2.safetensors", (const char *const[]){"b", "c"}, 2);
    write_text("bad/garbage.safetensors", "not a safetensors file");

    write_text("bad/missing_shard.json", "{\"weight_map\": {\"a\": \"s1.safetensors\", \"x\": \"nope.safetensors\"}}");
    expect_set_fail("bad/missing_shard.json", GEMMAC_ERR_IO, "shard 'nope.safetensors': ");
    expect_set_fail("bad/missing_shard.json", GEMMAC_ERR_IO, "cannot open: No such file");

    write_text("bad/missing_tensor.json", "{\"weight_map\": {\"a\": \"s1.safetensors\", \"c\": \"s1.safetensors\"}}");
    expect_set_fail("bad/missing_tensor.json", GEMMAC_ERR_BAD_FILE,
                    "missing_tensor.json: tensor 'c' is mapped to shard 's1.safetensors', which does not contain it");

    write_text("bad/two_shards.json", "{\"weight_map\": {\"a\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}}");
    expect_set_fail("bad/two_shards.json", GEMMAC_ERR_BAD_FILE,
                    "tensor 'b' is in two shards: 's1.safetensors' and 's2.safetensors'");

    write_text("bad/malformed_shard.json", "{\"weight_map\": {\"a\": \"garbage.safetensors\"}}");
    expect_set_fail("bad/malformed_shard.json", GEMMAC_ERR_BAD_FILE, "shard 'garbage.safetensors': header: header length");

    /* path traversal: the target exists, but the index may not reach it */
    write_shard("outside.safetensors", (const char *const[]){"a"}, 1);
    write_text("bad/traversal.json", "{\"weight_map\": {\"a\": \"../outside.safetensors\"}}");
    expect_set_fail("bad/traversal.json", GEMMAC_ERR_BAD_FILE, "maps to shard '../outside.safetensors', which is not a plain file name");
    char abs[600];
    snprintf(abs, sizeof abs, "{\"weight_map\": {\"a\": \"%s/outside.safetensors\"}}", g_tmp);
    write_text("bad/absolute.json", abs);
    expect_set_fail("bad/absolute.json", GEMMAC_ERR_BAD_FILE, "not a plain file name");

    write_text("bad/notjson.json", "{weight_map}");
    expect_set_fail("bad/notjson.json", GEMMAC_ERR_BAD_FILE, "notjson.json: malformed JSON at offset 0x");

    /* gm_st_open on paths that are not files */
    gm_st *f = (gm_st *)1;
    gm_error err;
    assert_int_equal(gm_st_open(tmp_path("bad", p, sizeof p), &f, &err), GEMMAC_ERR_IO);
    EXPECT_MSG(err, "is a directory");
    assert_null(f);
    assert_int_equal(gm_st_open(tmp_path("bad/none.safetensors", p, sizeof p), &f, &err), GEMMAC_ERR_IO);
    assert_int_equal(gm_st_open_memory(NULL, 0, &f, &err), GEMMAC_ERR_BAD_FILE);
    assert_int_equal(gm_st_open_memory(NULL, 5, &f, &err), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_st_open_memory("x", 1, NULL, &err), GEMMAC_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_dtype_names),
        cmocka_unit_test(test_golden_fixture),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_header_length),
        cmocka_unit_test(test_json_structure),
        cmocka_unit_test(test_entries),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_index_parse),
        cmocka_unit_test_setup_teardown(test_set_sharded, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_set_errors, tmp_setup, tmp_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
