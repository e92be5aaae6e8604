/* fuzz_gguf.c: libFuzzer target for the GGUF reader (src/io/gguf.c): opens the input with
 * gm_gguf_open_memory and, when it is accepted, walks every kv pair and tensor through the accessors,
 * trapping on any broken invariant. Seeds: tests/fuzz/make_seed_corpus.py; dictionary: gguf.dict.
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DGEMMAC_FUZZ=ON -DGEMMAC_TESTS=OFF
 *   cmake --build build-fuzz --target fuzz_gguf && python3 tests/fuzz/make_seed_corpus.py /tmp/gguf_corpus
 *   build-fuzz/fuzz_gguf -dict=tests/fuzz/gguf.dict -max_total_time=180 -max_len=8192 /tmp/gguf_corpus */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"

#define CHECK(c)                                                                                            \
    do {                                                                                                    \
        if (!(c)) __builtin_trap();                                                                         \
    } while (0)

static volatile uint64_t g_sink;   /* keeps the touched bytes from being optimised away */

static void touch(const void *p, uint64_t n, const uint8_t *base, size_t size) {
    const uint8_t *b = p;
    CHECK(n == 0 || (b >= base && b + n <= base + size));
    if (n) g_sink += b[0] + b[n - 1];
}

static void walk_kv(const gm_gguf *g, const gm_gguf_kv *kv, const uint8_t *base, size_t size) {
    gm_error err;
    CHECK(kv->key.len > 0 && !memchr(kv->key.ptr, 0, kv->key.len));
    touch(kv->key.ptr, kv->key.len, base, size);
    char *key = malloc(kv->key.len + 1);
    CHECK(key != NULL);
    memcpy(key, kv->key.ptr, kv->key.len);
    key[kv->key.len] = '\0';
    CHECK(gm_gguf_find_kv(g, key) == kv);

    uint32_t u32;
    int32_t i32;
    float f;
    bool b;
    gm_str s;
    uint64_t n;
    const void *data;
    const gm_str *strs;
    gemmac_status st;
    st = gm_gguf_get_u32(g, key, &u32, &err);
    CHECK(st == GEMMAC_OK || st == GEMMAC_ERR_BAD_FILE);
    st = gm_gguf_get_i32(g, key, &i32, &err);
    CHECK(st == GEMMAC_OK || st == GEMMAC_ERR_BAD_FILE);
    st = gm_gguf_get_f32(g, key, &f, &err);
    CHECK(st == GEMMAC_OK || st == GEMMAC_ERR_BAD_FILE);
    st = gm_gguf_get_bool(g, key, &b, &err);
    CHECK((st == GEMMAC_OK) == (kv->type == GM_GGUF_BOOL));
    st = gm_gguf_get_str(g, key, &s, &err);
    CHECK((st == GEMMAC_OK) == (kv->type == GM_GGUF_STRING));
    if (st == GEMMAC_OK) touch(s.ptr, s.len, base, size);
    for (int t = 0; t < GM_GGUF_VTYPE_COUNT; t++) {
        if (t == GM_GGUF_STRING || t == GM_GGUF_ARRAY) continue;
        st = gm_gguf_get_arr(g, key, (gm_gguf_vtype)t, &n, &data, &err);
        CHECK((st == GEMMAC_OK) == (kv->type == GM_GGUF_ARRAY && kv->arr_type == (gm_gguf_vtype)t));
        if (st == GEMMAC_OK) {
            for (uint64_t i = 0; i < n; i++) {
                int64_t v;
                (void)gm_gguf_kv_int(kv, i, &v);
            }
        }
    }
    st = gm_gguf_get_str_arr(g, key, &n, &strs, &err);
    CHECK((st == GEMMAC_OK) == (kv->type == GM_GGUF_ARRAY && kv->arr_type == GM_GGUF_STRING));
    if (st == GEMMAC_OK)
        for (uint64_t i = 0; i < n; i++) touch(strs[i].ptr, strs[i].len, base, size);
    free(key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gm_gguf *g = NULL;
    gm_error err;
    gm_error_clear(&err);
    gemmac_status st = gm_gguf_open_memory(data, size, &g, &err);
    if (st != GEMMAC_OK) {
        CHECK(g == NULL);
        CHECK(st == GEMMAC_ERR_BAD_FILE || st == GEMMAC_ERR_UNSUPPORTED || st == GEMMAC_ERR_NO_MEMORY);
        CHECK(err.status == st && err.msg[0] != '\0' && !strchr(err.msg, '\n'));
        return 0;
    }
    CHECK(gm_gguf_version(g) == 2 || gm_gguf_version(g) == 3);
    uint64_t align = gm_gguf_alignment(g);
    CHECK(align && (align & (align - 1)) == 0);
    CHECK(gm_gguf_file_size(g) == size && gm_gguf_data_offset(g) <= size);

    for (uint64_t i = 0; i < gm_gguf_n_kv(g); i++) walk_kv(g, gm_gguf_kv_at(g, i), data, size);
    CHECK(gm_gguf_kv_at(g, gm_gguf_n_kv(g)) == NULL);

    for (uint64_t i = 0; i < gm_gguf_n_tensors(g); i++) {
        const gm_gguf_tensor *t = gm_gguf_tensor_at(g, i);
        CHECK(t->name.len > 0 && !memchr(t->name.ptr, 0, t->name.len));
        char *name = malloc(t->name.len + 1);
        CHECK(name != NULL);
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = '\0';
        CHECK(gm_gguf_find_tensor(g, name) == t);
        free(name);
        const gm_type_traits *tr = gm_type_traits_of(t->type);
        CHECK(tr && tr->weight_ok);
        CHECK(t->n_dims >= 1 && t->n_dims <= GM_GGUF_MAX_DIMS);
        uint64_t n_el = 1;
        for (int d = 0; d < GM_GGUF_MAX_DIMS; d++) {
            CHECK(t->ne[d] >= 1);
            n_el *= (uint64_t)t->ne[d];
        }
        CHECK(n_el == t->n_elements && t->ne[0] % tr->block_size == 0);
        CHECK(t->size == gm_row_bytes(tr, t->ne[0]) * (n_el / (uint64_t)t->ne[0]));
        CHECK(t->offset % align == 0);
        CHECK((const uint8_t *)t->data == data + gm_gguf_data_offset(g) + t->offset);
        touch(t->data, t->size, data, size);
    }
    CHECK(gm_gguf_tensor_at(g, gm_gguf_n_tensors(g)) == NULL);
    gm_gguf_close(g);
    return 0;
}
