/* fuzz_safetensors.c: libFuzzer target for the safetensors reader (src/io/safetensors.c): opens the input
 * with gm_st_open_memory and, when it is accepted, walks every tensor and metadata pair through the
 * accessors, trapping on any broken invariant (tiling, shapes, sizes, lookups). Dictionary:
 * safetensors.dict; seeds: tests/golden/st_fixture.safetensors.
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DGEMMAC_FUZZ=ON -DGEMMAC_TESTS=OFF
 *   cmake --build build-fuzz --target fuzz_safetensors && mkdir -p /tmp/st_corpus
 *   cp tests/golden/st_fixture.safetensors /tmp/st_corpus/
 *   build-fuzz/fuzz_safetensors -dict=tests/fuzz/safetensors.dict -max_total_time=120 /tmp/st_corpus */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gm_st *f = NULL;
    gm_error err;
    gm_error_clear(&err);
    gemmac_status st = gm_st_open_memory(data, size, &f, &err);
    if (st != GEMMAC_OK) {
        CHECK(f == NULL);
        CHECK(st == GEMMAC_ERR_BAD_FILE || st == GEMMAC_ERR_NO_MEMORY);
        CHECK(err.status == st && err.msg[0] != '\0' && !strchr(err.msg, '\n'));
        return 0;
    }
    CHECK(gm_st_file_size(f) == size);
    uint64_t data_off = gm_st_data_offset(f);
    CHECK(data_off >= 8 && data_off <= size);
    uint64_t next = 0;
    for (uint64_t i = 0; i < gm_st_n_tensors(f); i++) {
        const gm_st_tensor *t = gm_st_tensor_at(f, i);
        CHECK(t && t->name && t->name[0]);
        CHECK(gm_st_find_tensor(f, t->name) == t);
        CHECK((unsigned)t->dtype < GM_ST_DTYPE_COUNT);
        CHECK(t->n_dims >= 0 && t->n_dims <= GM_ST_MAX_DIMS);
        uint64_t n = 1;
        for (int d = 0; d < GM_ST_MAX_DIMS; d++) {
            CHECK(t->shape[d] >= 0 && t->ne[d] >= 0);
            if (d < t->n_dims) {
                CHECK(t->ne[d] == t->shape[t->n_dims - 1 - d]);
                n *= (uint64_t)t->shape[d];
            } else {
                CHECK(t->shape[d] == 1 && t->ne[d] == 1);
            }
        }
        CHECK(n == t->n_elements);
        CHECK(t->size == n * gm_st_dtype_bits(t->dtype) / 8);
        CHECK(t->offset == next);   /* the tensors tile the data section */
        next = t->offset + t->size;
        CHECK((const uint8_t *)t->data == data + data_off + t->offset);
        CHECK(t->header_offset >= 8 && t->header_offset < data_off);
        touch(t->data, t->size, data, size);
        gm_type ty;
        st = gm_st_weight_type(t, &ty, &err);
        CHECK(st == GEMMAC_OK || st == GEMMAC_ERR_UNSUPPORTED);
    }
    CHECK(next == size - data_off);
    CHECK(gm_st_tensor_at(f, gm_st_n_tensors(f)) == NULL);
    for (uint64_t i = 0; i < gm_st_n_metadata(f); i++) {
        const char *k, *v;
        CHECK(gm_st_metadata_at(f, i, &k, &v));
        CHECK(gm_st_find_metadata(f, k) == v);
        g_sink += strlen(k) + strlen(v);
    }
    CHECK(!gm_st_metadata_at(f, gm_st_n_metadata(f), NULL, NULL));
    gm_st_close(f);
    return 0;
}
