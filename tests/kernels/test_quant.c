/* test_quant.c: the tensor element types: traits and names, the reference kernels against gguf-py's
 * numbers (tests/golden/quant_fixtures.bin) and against their own float definition, quantizer error
 * bounds, and every fast CPU kernel the machine runs against the reference. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "quant/quant.h"
#include "quant/quant_blocks.h"

static const gm_type k_weight_types[] = {GM_TYPE_F32,  GM_TYPE_F16,  GM_TYPE_BF16, GM_TYPE_Q4_0,
                                         GM_TYPE_Q4_1, GM_TYPE_Q5_0, GM_TYPE_Q5_1, GM_TYPE_Q8_0,
                                         GM_TYPE_Q4_K, GM_TYPE_Q5_K, GM_TYPE_Q6_K};
#define N_WEIGHT_TYPES (sizeof k_weight_types / sizeof k_weight_types[0])

/* ---- deterministic random numbers ---- */

typedef struct { uint64_t s; } rng_t;

static uint64_t rng_u64(rng_t *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unit(rng_t *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }
static float rng_normal(rng_t *r) {
    const double u = rng_unit(r) + 1e-300, v = rng_unit(r);
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

/* ---- random weight rows with edge-case blocks ---- */

/* Byte offsets of the f16 scale ("d") and min ("m" / "dmin") fields of a block; -1 where absent. */
static void scale_fields(gm_type t, int *d_off, int *m_off) {
    *d_off = -1;
    *m_off = -1;
    switch (t) {
    case GM_TYPE_Q4_0: case GM_TYPE_Q5_0: case GM_TYPE_Q8_0: *d_off = 0; break;
    case GM_TYPE_Q4_1: case GM_TYPE_Q5_1: case GM_TYPE_Q4_K: case GM_TYPE_Q5_K: *d_off = 0; *m_off = 2; break;
    case GM_TYPE_Q6_K: *d_off = (int)offsetof(gm_block_q6_K, d); break;
    default: break;
    }
}

static void put_f16(uint8_t *p, gm_f16 h) { memcpy(p, &h, 2); }

static gm_f16 random_scale(rng_t *r) {
    const float mag = exp2f((float)(rng_unit(r) * 14 - 12)); /* 2^-12 .. 2^2 */
    return gm_f32_to_f16(rng_u64(r) & 1 ? -mag : mag);
}

/* A random finite f16 (no inf / NaN), sometimes an edge value. */
static gm_f16 random_f16(rng_t *r) {
    static const gm_f16 edges[] = {0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x03FF, 0x0400, 0x0000, 0x8000};
    if (rng_u64(r) % 8 == 0) return edges[rng_u64(r) % 8];
    gm_f16 h;
    do h = (gm_f16)rng_u64(r); while ((h & 0x7C00) == 0x7C00);
    return h;
}

/* Random bf16 of moderate range (|x| < 2^40, so dot products stay finite), sometimes an edge value. */
static gm_bf16 random_bf16(rng_t *r) {
    static const gm_bf16 edges[] = {0x0001, 0x8001, 0x0080, 0x0000, 0x8000, 0x5380, 0xD380};
    if (rng_u64(r) % 8 == 0) return edges[rng_u64(r) % 7];
    gm_bf16 h;
    do h = (gm_bf16)rng_u64(r); while (((h >> 7) & 0xFF) >= 127 + 40);
    return h;
}

enum { N_EDGE_MODES = 10 };

/* Fills nb blocks of type t. Block k gets edge mode (k + mode0) % N_EDGE_MODES:
 * 0 random, 1 zero scale, 2 negative scale, 3 largest f16 scales, 4 smallest (subnormal) scales,
 * 5 every quant byte 0xFF, 6 every quant byte 0x00, 7 all-zero block, 8 every quant byte 0x80, 9 random. */
static void fill_weights(gm_type t, void *dst, int64_t nb, rng_t *r, int mode0) {
    const gm_type_traits *tr = gm_type_traits_of(t);
    uint8_t *p = dst;
    if (tr->block_size == 1) { /* float types: nb elements */
        for (int64_t i = 0; i < nb; ++i) {
            if (t == GM_TYPE_F32) {
                const float v = rng_normal(r) * exp2f((float)(rng_u64(r) % 20) - 10);
                memcpy(p + 4 * i, &v, 4);
            } else if (t == GM_TYPE_F16) {
                const gm_f16 h = random_f16(r);
                memcpy(p + 2 * i, &h, 2);
            } else {
                const gm_bf16 h = random_bf16(r);
                memcpy(p + 2 * i, &h, 2);
            }
        }
        return;
    }
    int d_off, m_off;
    scale_fields(t, &d_off, &m_off);
    for (int64_t k = 0; k < nb; ++k, p += tr->block_bytes) {
        for (uint32_t j = 0; j < tr->block_bytes; ++j) p[j] = (uint8_t)rng_u64(r);
        const int mode = (int)((k + mode0) % N_EDGE_MODES);
        if (mode == 5 || mode == 6 || mode == 8) memset(p, mode == 5 ? 0xFF : mode == 6 ? 0x00 : 0x80, tr->block_bytes);
        gm_f16 d = random_scale(r), m = random_scale(r);
        switch (mode) {
        case 1: d = 0; break;
        case 2: d |= 0x8000; m |= 0x8000; break;
        case 3: d = 0x7BFF; m = 0x7BFF; break;   /* 65504 */
        case 4: d = 0x0001; m = 0x8001; break;   /* ±2^-24 */
        default: break;
        }
        if (mode == 7) {
            memset(p, 0, tr->block_bytes);
            continue;
        }
        put_f16(p + d_off, d);
        if (m_off >= 0) put_f16(p + m_off, m);
    }
}

/* Random activations of n floats: normal values scaled per 32 by 2^-8 .. 2^8, with a zero stretch,
 * a stretch of equal magnitudes of both signs, and a stretch with one outlier. */
static void fill_acts(float *a, int64_t n, rng_t *r) {
    for (int64_t i = 0; i < n; ++i) {
        if (i % 32 == 0) {
            const float s = exp2f((float)(rng_u64(r) % 17) - 8);
            for (int64_t j = i; j < n && j < i + 32; ++j) a[j] = rng_normal(r) * s;
        }
    }
    if (n >= 96) {
        for (int j = 0; j < 32; ++j) a[j] = 0;
        for (int j = 32; j < 64; ++j) a[j] = j & 1 ? 3.0f : -3.0f;
        a[70] = 1e4f;
    }
}

/* The row of the vec_dot_type of w's type, made by the reference quantizer. */
static void *quantize_acts(gm_type t, const float *a, int64_t n) {
    const gm_type_traits *vt = gm_type_traits_of(gm_type_traits_of(t)->vec_dot_type);
    void *q = xmalloc(gm_row_bytes(vt, n));
    vt->quantize(a, q, n);
    return q;
}

/* Rows of n elements the tests use: whole blocks, from one block to many, odd counts included. */
static int64_t row_len(gm_type t, int k) {
    static const int64_t blocks[] = {1, 2, 3, 5, 8, 17, 64};
    static const int64_t floats[] = {1, 7, 8, 33, 100, 1000, 4096};
    const int32_t bs = gm_type_traits_of(t)->block_size;
    return bs == 1 ? floats[k] : blocks[k] * bs;
}
#define N_ROW_LENS 7

/* Magnitude of a dot product for error bounds: sum_i (|w part 1| + |w part 2|) * |a_i|, where the parts
 * are the scale term and the min term of types with a min (each dequantized alone by zeroing the other's
 * f16 field), so that cancellation between them cannot hide rounding. mins_out gets sum |min part|*|a|. */
static double dot_magnitude(gm_type t, const void *w, const void *aq, int64_t n, double *mins_out) {
    const gm_type_traits *tr = gm_type_traits_of(t), *vt = gm_type_traits_of(tr->vec_dot_type);
    float *a = xmalloc((size_t)n * 4), *p1 = xmalloc((size_t)n * 4), *p2 = xmalloc((size_t)n * 4);
    vt->dequantize(aq, a, n);
    int d_off, m_off;
    scale_fields(t, &d_off, &m_off);
    const size_t bytes = gm_row_bytes(tr, n);
    uint8_t *tmp = xmalloc(bytes);
    memcpy(tmp, w, bytes);
    if (m_off >= 0)
        for (size_t o = 0; o < bytes; o += tr->block_bytes) put_f16(tmp + o + m_off, 0);
    tr->dequantize(tmp, p1, n);
    memset(p2, 0, (size_t)n * 4);
    if (m_off >= 0) {
        memcpy(tmp, w, bytes);
        for (size_t o = 0; o < bytes; o += tr->block_bytes) put_f16(tmp + o + d_off, 0);
        tr->dequantize(tmp, p2, n);
    }
    double s = 0, sm = 0;
    for (int64_t i = 0; i < n; ++i) {
        s += (fabs(p1[i]) + fabs(p2[i])) * fabs(a[i]);
        sm += fabs(p2[i]) * fabs(a[i]);
    }
    if (mins_out) *mins_out = sm;
    free(a), free(p1), free(p2), free(tmp);
    return s;
}

/* ---- traits, names, dispatch ---- */

static void test_traits(void **state) {
    (void)state;
    static const struct { gm_type t; int32_t bs; uint32_t bytes; bool ok; gm_type vdt; const char *name; } want[] = {
        {GM_TYPE_F32, 1, 4, true, GM_TYPE_F32, "f32"},        {GM_TYPE_F16, 1, 2, true, GM_TYPE_F32, "f16"},
        {GM_TYPE_BF16, 1, 2, true, GM_TYPE_F32, "bf16"},     {GM_TYPE_Q4_0, 32, 18, true, GM_TYPE_Q8_0, "q4_0"},
        {GM_TYPE_Q4_1, 32, 20, true, GM_TYPE_Q8_1, "q4_1"},   {GM_TYPE_Q5_0, 32, 22, true, GM_TYPE_Q8_0, "q5_0"},
        {GM_TYPE_Q5_1, 32, 24, true, GM_TYPE_Q8_1, "q5_1"},   {GM_TYPE_Q8_0, 32, 34, true, GM_TYPE_Q8_0, "q8_0"},
        {GM_TYPE_Q8_1, 32, 36, false, GM_TYPE_Q8_1, "q8_1"},  {GM_TYPE_Q2_K, 256, 84, false, GM_TYPE_Q8_K, "q2_K"},
        {GM_TYPE_Q3_K, 256, 110, false, GM_TYPE_Q8_K, "q3_K"}, {GM_TYPE_Q4_K, 256, 144, true, GM_TYPE_Q8_K, "q4_K"},
        {GM_TYPE_Q5_K, 256, 176, true, GM_TYPE_Q8_K, "q5_K"}, {GM_TYPE_Q6_K, 256, 210, true, GM_TYPE_Q8_K, "q6_K"},
        {GM_TYPE_Q8_K, 256, 292, false, GM_TYPE_Q8_K, "q8_K"},
    };
    int known = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) {
        const gm_type_traits *t = gm_type_traits_of(want[i].t);
        assert_non_null(t);
        assert_string_equal(t->name, want[i].name);
        assert_int_equal(t->block_size, want[i].bs);
        assert_int_equal(t->block_bytes, want[i].bytes);
        assert_int_equal(t->weight_ok, want[i].ok);
        assert_int_equal(t->vec_dot_type, want[i].vdt);
        const bool has_kernels = want[i].t != GM_TYPE_Q2_K && want[i].t != GM_TYPE_Q3_K;
        assert_int_equal(t->dequantize != NULL, has_kernels);
        assert_int_equal(t->quantize != NULL, has_kernels);
        assert_int_equal(t->vec_dot != NULL, want[i].ok);
    }
    for (int64_t n = -3; n < 100; ++n) known += gm_type_traits_of(n) != NULL;
    assert_int_equal(known, 15);
    assert_null(gm_type_traits_of(4));
    assert_null(gm_type_traits_of(INT64_MIN));
    assert_null(gm_type_traits_of(GM_TYPE_COUNT));
    assert_int_equal(gm_row_bytes(gm_type_traits_of(GM_TYPE_Q4_K), 4096), 16 * 144);
    assert_int_equal(gm_row_bytes(gm_type_traits_of(GM_TYPE_BF16), 5), 10);

    char buf[32];
    assert_string_equal(gm_type_name(16, buf), "iq2_xxs");
    assert_string_equal(gm_type_name(23, buf), "iq4_xs");
    assert_string_equal(gm_type_name(30, buf), "bf16");
    assert_string_equal(gm_type_name(39, buf), "mxfp4");
    assert_string_equal(gm_type_name(14, buf), "q6_K");
    assert_string_equal(gm_type_name(77, buf), "type 77");
    assert_string_equal(gm_type_name(-1, buf), "type -1");
    for (int64_t n = 0; n < 40; ++n) assert_true(strncmp(gm_type_name(n, buf), "type ", 5) != 0);
}

static void test_dispatch(void **state) {
    (void)state;
    const gm_isa best = gm_cpu_isa();
    printf("  [ INFO ] cpu isa: %s\n", gm_isa_name(best));
    assert_string_equal(gm_isa_name(GM_ISA_AVX512), "avx512");
    assert_non_null(gm_cpu_kernels_isa(GM_TYPE_Q4_0, GM_ISA_SCALAR));
    for (size_t i = 0; i < N_WEIGHT_TYPES; ++i) {
        const gm_type_cpu *k = gm_cpu_kernels(k_weight_types[i]);
        assert_non_null(k);
        assert_non_null(k->dequantize);
        assert_non_null(k->quantize);
        assert_non_null(k->vec_dot);
        /* scalar is exactly the reference */
        const gm_type_cpu *s = gm_cpu_kernels_isa(k_weight_types[i], GM_ISA_SCALAR);
        assert_ptr_equal(s->vec_dot, gm_type_traits_of(k_weight_types[i])->vec_dot);
    }
    assert_non_null(gm_cpu_kernels(GM_TYPE_Q8_K)->quantize);
    assert_null(gm_cpu_kernels(GM_TYPE_Q2_K));
    assert_null(gm_cpu_kernels((gm_type)4));
    assert_null(gm_cpu_kernels_isa(GM_TYPE_Q4_0, (gm_isa)7));

    /* GEMMAC_ISA lowers the choice; checked in a child so this process keeps its own choice */
    fflush(NULL);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("GEMMAC_ISA", "scalar", 1);
        /* the once-only detection already ran in the parent's memory image: re-exec to start fresh */
        execl("/proc/self/exe", "test_quant", "--isa-child", (char *)NULL);
        _exit(3);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* The child of test_dispatch: exits 0 when GEMMAC_ISA=scalar took effect. */
static int isa_child(void) {
    return gm_cpu_isa() == GM_ISA_SCALAR && gm_cpu_kernels(GM_TYPE_Q4_K) == gm_cpu_kernels_isa(GM_TYPE_Q4_K, GM_ISA_SCALAR)
               ? 0 : 1;
}

static void test_scale_unpack(void **state) {
    (void)state;
    rng_t r = {1};
    for (int it = 0; it < 20000; ++it) {
        uint8_t s[12], fast[16];
        for (int j = 0; j < 12; ++j) s[j] = (uint8_t)rng_u64(&r);
        if (it == 0) memset(s, 0xFF, 12);
        gm_unpack_scales_k4(s, fast);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            gm_scale_min_k4(j, s, &sc, &m);
            assert_int_equal(fast[j], sc);
            assert_int_equal(fast[8 + j], m);
        }
    }
}

/* ---- (f) layout ground truth from gguf-py ---- */

typedef struct { const uint8_t *p, *end; } cursor;

static bool take(cursor *c, void *dst, size_t n) {
    if ((size_t)(c->end - c->p) < n) return false;
    memcpy(dst, c->p, n);
    c->p += n;
    return true;
}

static void test_golden_gguf_py(void **state) {
    (void)state;
    const char *dir = getenv("GEMMAC_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/golden/quant_fixtures.bin", dir ? dir : ".");
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (set GEMMAC_SOURCE_DIR to the source tree)", path);
    static uint8_t file[1 << 16];
    const size_t size = fread(file, 1, sizeof file, f);
    fclose(f);
    cursor c = {file, file + size};
    char magic[4];
    uint32_t version = 0, count = 0;
    assert_true(take(&c, magic, 4) && take(&c, &version, 4) && take(&c, &count, 4));
    assert_memory_equal(magic, "GMQF", 4);
    assert_int_equal(version, 1);
    int seen_dq = 0, seen_q = 0;
    for (uint32_t rec = 0; rec < count; ++rec) {
        uint32_t hdr[4]; /* kind, type, n_elements, n_bytes */
        assert_true(take(&c, hdr, sizeof hdr));
        const gm_type_traits *t = gm_type_traits_of(hdr[1]);
        assert_non_null(t);
        assert_int_equal(gm_row_bytes(t, hdr[2]), hdr[3]);
        uint8_t *bytes = xmalloc(hdr[3]), *got_bytes = xmalloc(hdr[3]);
        float *floats = xmalloc(hdr[2] * 4u), *got = xmalloc(hdr[2] * 4u);
        if (hdr[0] == 0) {
            assert_true(take(&c, bytes, hdr[3]) && take(&c, floats, hdr[2] * 4u));
            t->dequantize(bytes, got, hdr[2]);
            for (uint32_t i = 0; i < hdr[2]; ++i)
                if (!(got[i] == floats[i])) /* NaN never passes */
                    fail_msg("%s dequantize element %u: got %.9g, gguf-py %.9g", t->name, i, got[i], floats[i]);
            /* every fast dequantizer too */
            for (int isa = GM_ISA_SCALAR; isa <= GM_ISA_AVX512; ++isa) {
                const gm_type_cpu *k = gm_cpu_kernels_isa((gm_type)hdr[1], (gm_isa)isa);
                if (!k) continue;
                k->dequantize(bytes, got, hdr[2]);
                for (uint32_t i = 0; i < hdr[2]; ++i)
                    if (!(got[i] == floats[i])) fail_msg("%s %s dequantize element %u", gm_isa_name((gm_isa)isa), t->name, i);
            }
            ++seen_dq;
        } else {
            assert_int_equal(hdr[0], 1);
            assert_true(take(&c, floats, hdr[2] * 4u) && take(&c, bytes, hdr[3]));
            t->quantize(floats, got_bytes, hdr[2]);
            for (uint32_t i = 0; i < hdr[3]; ++i)
                if (got_bytes[i] != bytes[i]) fail_msg("%s quantize byte %u: got 0x%02x, gguf-py 0x%02x", t->name, i, got_bytes[i], bytes[i]);
            ++seen_q;
        }
        free(bytes), free(got_bytes), free(floats), free(got);
    }
    assert_true(c.p == c.end);
    assert_int_equal(seen_dq, 11); /* every weight type */
    assert_true(seen_q >= 1);     /* at least q8_0 */
}

/* ---- (a) fast dequantize == reference, bit for bit ---- */

static void test_fast_dequantize_exact(void **state) {
    (void)state;
    rng_t r = {2};
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ++ti) {
        const gm_type t = k_weight_types[ti];
        const gm_type_traits *tr = gm_type_traits_of(t);
        for (int li = 0; li < N_ROW_LENS; ++li) {
            const int64_t n = row_len(t, li), nb = n / tr->block_size;
            void *w = xmalloc(gm_row_bytes(tr, n));
            float *want = xmalloc((size_t)n * 4), *got = xmalloc((size_t)n * 4);
            fill_weights(t, w, tr->block_size == 1 ? n : nb, &r, li);
            tr->dequantize(w, want, n);
            for (int isa = GM_ISA_AVX2; isa <= GM_ISA_AVX512; ++isa) {
                const gm_type_cpu *k = gm_cpu_kernels_isa(t, (gm_isa)isa);
                if (!k) continue;
                k->dequantize(w, got, n);
                if (memcmp(want, got, (size_t)n * 4) != 0)
                    fail_msg("%s %s dequantize differs from the reference (n = %lld)", gm_isa_name((gm_isa)isa), tr->name, (long long)n);
            }
            free(w), free(want), free(got);
        }
    }
}

/* ---- (b) fast vec_dot vs reference, (d) reference vec_dot vs the float definition ---- */

/* Both the fast and the reference vec_dot compute the same exact integer sum per block (or the same
 * float products for f32/f16/bf16); they differ only in float rounding: the per-block scaling (a few
 * roundings) and the order of the sum over blocks (ref: serial; fast: 8 lanes then a tree). The error of
 * each is below (blocks + 10) * 2^-24 * magnitude, magnitude = sum |w_i| |a_i|; 2e-5 covers 64 blocks with
 * margin, and a wrong element or block would miss it by orders of magnitude on these sizes. */
#define DOT_REL_TOL 2e-5

static void test_fast_vec_dot(void **state) {
    (void)state;
    rng_t r = {3};
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ++ti) {
        const gm_type t = k_weight_types[ti];
        const gm_type_traits *tr = gm_type_traits_of(t);
        for (int li = 0; li < N_ROW_LENS; ++li) {
            for (int rep = 0; rep < 4; ++rep) {
                const int64_t n = row_len(t, li), nb = n / tr->block_size;
                void *w = xmalloc(gm_row_bytes(tr, n));
                float *a = xmalloc((size_t)n * 4);
                fill_weights(t, w, tr->block_size == 1 ? n : nb, &r, li + 3 * rep);
                fill_acts(a, n, &r);
                void *aq = quantize_acts(t, a, n);
                const double mag = dot_magnitude(t, w, aq, n, NULL);
                assert_true(isfinite(mag));
                float want;
                tr->vec_dot(n, &want, w, aq);
                for (int isa = GM_ISA_AVX2; isa <= GM_ISA_AVX512; ++isa) {
                    const gm_type_cpu *k = gm_cpu_kernels_isa(t, (gm_isa)isa);
                    if (!k) continue;
                    float got = NAN;
                    k->vec_dot(n, &got, w, aq);
                    if (!(fabs((double)got - want) <= DOT_REL_TOL * mag + 1e-30))
                        fail_msg("%s %s vec_dot n=%lld: fast %.9g, ref %.9g, magnitude %.3g", gm_isa_name((gm_isa)isa),
                                 tr->name, (long long)n, got, want, mag);
                }
                free(w), free(a), free(aq);
            }
        }
    }
}

/* vec_dot_x4 and vec_dot_4xn are BIT-IDENTICAL per (row, column) to the same table's vec_dot: the engine relies
 * on it so that a token's logits do not depend on which tokens share its batch. Random blocks with every edge
 * mode (for the 4xn four rows of different modes, packed by gm_pack_rows4, and every column count 1..4, the
 * columns past it checked untouched), four different activation rows (one all zero, sometimes two the same
 * pointer), every row length (odd block counts too); memcmp, no tolerance. Also: every ISA above scalar has an x4 for each
 * weight type (prefill speed depends on it), and AVX-512 with VNNI a 4xn for q8_0 / q4_0 / q5_0. */
static void test_vec_dot_x4_bitwise(void **state) {
    (void)state;
    rng_t r = {7};
    int checked = 0, checked44 = 0;
    const char *vnni_env = getenv("GEMMAC_VNNI");
#if defined(__x86_64__) || defined(__i386__)
    const bool vnni = gm_cpu_isa() >= GM_ISA_AVX512 && __builtin_cpu_supports("avx512vnni") &&
                      !(vnni_env && strcmp(vnni_env, "0") == 0);
#else
    const bool vnni = false;
    (void)vnni_env;
#endif
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ++ti) {
        const gm_type t = k_weight_types[ti];
        const gm_type_traits *tr = gm_type_traits_of(t);
        for (int isa = GM_ISA_AVX2; isa <= GM_ISA_AVX512; ++isa) {
            const gm_type_cpu *k = gm_cpu_kernels_isa(t, (gm_isa)isa);
            if (k) assert_non_null(k->vec_dot_x4);
        }
        if (vnni && (t == GM_TYPE_Q8_0 || t == GM_TYPE_Q4_0 || t == GM_TYPE_Q5_0))
            assert_non_null(gm_cpu_kernels_isa(t, GM_ISA_AVX512)->vec_dot_4xn);
        for (int li = 0; li < N_ROW_LENS; ++li) {
            for (int rep = 0; rep < 6; ++rep) {
                const int64_t n = row_len(t, li), nb = n / tr->block_size;
                const size_t rb = gm_row_bytes(tr, n);
                uint8_t *w4 = xmalloc(4 * rb), *w = w4; /* four rows; the x4 takes the first */
                for (int row = 0; row < 4; ++row)
                    fill_weights(t, w4 + row * rb, tr->block_size == 1 ? n : nb, &r, li + 5 * rep + 7 * row);
                float *act = xmalloc((size_t)n * 4);
                void *aq[4];
                for (int c = 0; c < 4; ++c) {
                    fill_acts(act, n, &r);
                    if (c == 3 && rep % 2 == 1) memset(act, 0, (size_t)n * 4);
                    if (c == 1 && rep % 3 == 2) /* large activations: big int32 block sums */
                        for (int64_t j = 0; j < n; ++j) act[j] = (j & 1 ? 1.0f : -1.0f) * (float)(1 + j % 3);
                    aq[c] = quantize_acts(t, act, n);
                }
                const void *const cols[4] = {aq[0], aq[1], rep == 4 ? aq[1] : aq[2], aq[3]};
                for (int isa = GM_ISA_SCALAR; isa <= GM_ISA_AVX512; ++isa) {
                    const gm_type_cpu *k = gm_cpu_kernels_isa(t, (gm_isa)isa);
                    if (!k || !k->vec_dot_x4) continue;
                    float got[4], want[4];
                    memset(got, 0xA5, sizeof got); /* so an output the kernel never writes cannot match */
                    for (int c = 0; c < 4; ++c) k->vec_dot(n, &want[c], w, cols[c]);
                    k->vec_dot_x4(n, got, w, cols);
                    for (int c = 0; c < 4; ++c)
                        if (memcmp(&got[c], &want[c], sizeof(float)) != 0)
                            fail_msg("%s %s vec_dot_x4 n=%lld rep %d column %d: x4 %a, vec_dot %a", gm_isa_name((gm_isa)isa),
                                     tr->name, (long long)n, rep, c, (double)got[c], (double)want[c]);
                    ++checked;
                    if (!k->vec_dot_4xn) continue;
                    float want16[16], poison;
                    uint8_t *packed = xmalloc(4 * rb);
                    gm_pack_rows4(packed, w4, rb, nb, tr->block_bytes);
                    memset(&poison, 0xA5, sizeof poison);
                    for (int row = 0; row < 4; ++row)
                        for (int c = 0; c < 4; ++c) k->vec_dot(n, &want16[4 * row + c], w4 + row * rb, cols[c]);
                    for (int nc = 1; nc <= 4; ++nc) {
                        float got16[16];
                        memset(got16, 0xA5, sizeof got16);
                        k->vec_dot_4xn(n, got16, packed, cols, nc);
                        for (int i = 0; i < 16; ++i) {
                            const float *expect = i % 4 < nc ? &want16[i] : &poison; /* columns past nc: untouched */
                            if (memcmp(&got16[i], expect, sizeof(float)) != 0)
                                fail_msg("%s %s vec_dot_4xn n=%lld rep %d nc %d row %d column %d: 4xn %a, want %a",
                                         gm_isa_name((gm_isa)isa), tr->name, (long long)n, rep, nc, i / 4, i % 4,
                                         (double)got16[i], (double)*expect);
                        }
                    }
                    free(packed);
                    ++checked44;
                }
                for (int c = 0; c < 4; ++c) free(aq[c]);
                free(w4), free(act);
            }
        }
    }
    printf("  [ INFO ] vec_dot_x4: %d (type, ISA, row) cases bitwise equal, vec_dot_4xn (columns 1..4 each): %d%s\n", checked, checked44,
           getenv("GEMMAC_VNNI") ? " (GEMMAC_VNNI=0)" : "");
    if (gm_cpu_isa() >= GM_ISA_AVX2) assert_true(checked > 0);
    if (vnni) assert_true(checked44 > 0);
}

/* The AVX-512 table holds different x4 kernels with and without VNNI: the ones this CPU does not pick by
 * default are checked in a child started with GEMMAC_VNNI=0 (the choice is made once per process). */
static void test_vec_dot_x4_bitwise_novnni(void **state) {
    (void)state;
    if (gm_cpu_isa() < GM_ISA_AVX512) skip();
    fflush(NULL);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("GEMMAC_VNNI", "0", 1);
        execl("/proc/self/exe", "test_quant", "--x4-child", (char *)NULL);
        _exit(3);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* (d): the reference's integer path agrees with dot(dequantize(w), dequantize(quantize(a))) in double.
 * Same tolerance as above, plus for q4_1 / q5_1 the min term of ggml's q8_1 design: it uses the
 * activation sum s = d * sum(q) stored as f16 (relative error 2^-11) and computed with the unrounded d
 * (another 2^-11), so 2^-10 * sum |min part| |a| is allowed on top. */
static void test_ref_vec_dot_definition(void **state) {
    (void)state;
    rng_t r = {4};
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ++ti) {
        const gm_type t = k_weight_types[ti];
        const gm_type_traits *tr = gm_type_traits_of(t), *vt = gm_type_traits_of(tr->vec_dot_type);
        for (int li = 0; li < N_ROW_LENS; ++li) {
            for (int rep = 0; rep < 4; ++rep) {
                const int64_t n = row_len(t, li), nb = n / tr->block_size;
                void *w = xmalloc(gm_row_bytes(tr, n));
                float *a = xmalloc((size_t)n * 4), *wf = xmalloc((size_t)n * 4), *af = xmalloc((size_t)n * 4);
                fill_weights(t, w, tr->block_size == 1 ? n : nb, &r, li + 5 * rep);
                fill_acts(a, n, &r);
                void *aq = quantize_acts(t, a, n);
                tr->dequantize(w, wf, n);
                vt->dequantize(aq, af, n);
                double def = 0, mins = 0;
                for (int64_t i = 0; i < n; ++i) def += (double)wf[i] * af[i];
                const double mag = dot_magnitude(t, w, aq, n, &mins);
                const double tol = DOT_REL_TOL * mag + (vt == gm_type_traits_of(GM_TYPE_Q8_1) ? 0x1p-10 * mins : 0) + 1e-30;
                float got;
                tr->vec_dot(n, &got, w, aq);
                if (!(fabs(got - def) <= tol))
                    fail_msg("%s ref vec_dot n=%lld: %.9g, definition %.9g, tolerance %.3g", tr->name, (long long)n, got, def, tol);
                free(w), free(a), free(wf), free(af), free(aq);
            }
        }
    }
}

/* ---- (c) fast activation quantizers give the bytes of the traits' quantize_act ---- */

static void test_fast_quantize_exact(void **state) {
    (void)state;
    static const gm_type act_types[] = {GM_TYPE_Q8_0, GM_TYPE_Q8_K, GM_TYPE_Q8_1, GM_TYPE_F16, GM_TYPE_BF16, GM_TYPE_F32};
    rng_t r = {5};
    for (size_t ti = 0; ti < sizeof act_types / sizeof act_types[0]; ++ti) {
        const gm_type t = act_types[ti];
        const gm_type_traits *tr = gm_type_traits_of(t);
        for (int it = 0; it < 40; ++it) {
            const int64_t n = (int64_t)tr->block_size * (tr->block_size == 1 ? 1 + (int64_t)(rng_u64(&r) % 600) : 1 + it % 6);
            float *a = xmalloc((size_t)n * 4);
            fill_acts(a, n, &r);
            /* ties: a block scaled so that quantizing lands exactly on .5 (q8_0: amax 127 -> scale 1;
             * q8_K: the signed max -127 -> scale 1), which roundf and round-to-even treat differently */
            if (it % 3 == 1 && n >= 32) {
                for (int j = 0; j < 32; ++j) a[j] = (float)(j % 7) - 2.5f;
                a[5] = -127;
                a[6] = t == GM_TYPE_Q8_K ? 100.5f : 127;
                a[7] = 126.5f;
                if (t == GM_TYPE_Q8_K) /* keep the -127 the block's largest magnitude */
                    for (int64_t j = 32; j < n && j < 256; ++j) a[j] = fmaxf(fminf(a[j], 120.5f), -120.5f);
            }
            if (it % 5 == 2) /* equal magnitudes of both signs: the first one decides the sign of the scale */
                for (int64_t j = 0; j < n; ++j) a[j] = (j * 7 % 5 == 0) ? ((j & 1) ? 2.0f : -2.0f) : a[j] * 1e-3f;
            const size_t bytes = gm_row_bytes(tr, n);
            uint8_t *want = xmalloc(bytes), *got = xmalloc(bytes);
            tr->quantize_act(a, want, n);
            for (int isa = GM_ISA_AVX2; isa <= GM_ISA_AVX512; ++isa) {
                const gm_type_cpu *k = gm_cpu_kernels_isa(t, (gm_isa)isa);
                if (!k) continue;
                memset(got, 0xAA, bytes);
                k->quantize(a, got, n);
                for (size_t j = 0; j < bytes; ++j)
                    if (want[j] != got[j])
                        fail_msg("%s %s quantize byte %zu of %zu: fast 0x%02x, ref 0x%02x (it %d)", gm_isa_name((gm_isa)isa),
                                 tr->name, j, bytes, got[j], want[j], it);
            }
            free(a), free(want), free(got);
        }
    }
}

/* The q8_0 / q8_K quantizers' contract beside the bytes: values within -127..127 (the fast dot products
 * rely on it), q8_K's bsums are the sums of its values, and the reference matches ggml's rounding rule
 * at ties (q8_0: half away from zero; q8_K: half to even). */
static void test_activation_quantizer_contract(void **state) {
    (void)state;
    rng_t r = {6};
    float a[512];
    fill_acts(a, 512, &r);
    a[300] = -5e3f;
    gm_block_q8_0 q0[16];
    gm_quantize_q8_0_ref(a, q0, 512);
    for (int b = 0; b < 16; ++b)
        for (int j = 0; j < 32; ++j) assert_true(q0[b].qs[j] >= -127);
    gm_block_q8_K qk[2];
    gm_quantize_q8_K_ref(a, qk, 512);
    for (int b = 0; b < 2; ++b)
        for (int k = 0; k < 16; ++k) {
            int s = 0;
            for (int j = 0; j < 16; ++j) {
                assert_true(qk[b].qs[16 * k + j] >= -127);
                s += qk[b].qs[16 * k + j];
            }
            assert_int_equal(qk[b].bsums[k], s);
        }
    /* q8_0 ties: amax 127 -> d = 1 exactly */
    float t[32] = {127, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f};
    gm_quantize_q8_0_ref(t, q0, 32);
    const int8_t want0[7] = {127, 1, -1, 2, -2, 3, -3};
    assert_memory_equal(q0[0].qs, want0, 7);
    /* the activation quantizer (llama.cpp's x86 rule) rounds the same ties half to even */
    gm_quantize_q8_0_act_ref(t, q0, 32);
    const int8_t want0_act[7] = {127, 0, 0, 2, -2, 2, -2};
    assert_memory_equal(q0[0].qs, want0_act, 7);
    /* and takes id = 127/amax, not 1/(amax/127): amax 3 gives id 42.333332, where 1/(3/127) is 42.333336 */
    float u[32] = {3.0f, 0.0f};
    for (int j = 1; j < 32; ++j) u[j] = (float)j * 0.09375f - 1.5f;
    gm_quantize_q8_0_act_ref(u, q0, 32);
    for (int j = 0; j < 32; ++j) assert_int_equal(q0[0].qs[j], (int8_t)nearbyintf(u[j] * (127.0f / 3.0f)));
    /* q8_K ties: signed max -127 -> iscale = 1 exactly; the first largest magnitude wins the sign */
    float tk[256] = {-127, 127, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f};
    gm_quantize_q8_K_ref(tk, qk, 256);
    const int8_t wantk[8] = {-127, 127, 0, 0, 2, -2, 2, -2};
    assert_memory_equal(qk[0].qs, wantk, 8);
    assert_true(qk[0].d == 1.0f);
}

/* ---- (e) quantizer round-trip error bounds ---- */

/* Gaussian data in 256-element rows whose scale varies by 2^±6 per row: quantize, dequantize, measure
 * the largest error relative to each block's absmax and the RMS error relative to the RMS of the data. */
static void test_round_trip(void **state) {
    (void)state;
    static const struct {
        gm_type t;
        double max_rel; /* max |x - x'| / absmax of the x's block (32, or 256 for K-quants) */
        double rms_rel; /* rms(x - x') / rms(x) */
    } bounds[] = {
        /* q4_0: step amax/8, error up to half a step, but the value opposite the max clips at +7: one step */
        {GM_TYPE_Q4_0, 1.0 / 8 + 1e-3, 0.12},
        /* q4_1: step (max - min)/15 <= 2 amax/15, half a step, plus the f16 rounding of d and m */
        {GM_TYPE_Q4_1, 1.0 / 15 + 1e-2, 0.09},
        {GM_TYPE_Q5_0, 1.0 / 16 + 1e-3, 0.06},
        {GM_TYPE_Q5_1, 1.0 / 31 + 1e-2, 0.045},
        /* q8_0: half a step of amax/127, plus 127 times the f16 rounding of d (2^-11 relative) */
        {GM_TYPE_Q8_0, 0.5 / 127 + 127.0 / 127 * 0x1p-11 + 1e-6, 0.008},
        /* K-quants, round-to-nearest with 6-bit (8-bit for q6_K) sub-block scales: bounds measured on this
         * data with ~1.5x margin. A sub-block scale rounded down can clip its extremes, hence max_rel. */
        {GM_TYPE_Q4_K, 0.1, 0.1},
        {GM_TYPE_Q5_K, 0.05, 0.05},
        {GM_TYPE_Q6_K, 0.03, 0.025},
        /* float types: half an ulp relative (round to nearest even); below f16's smallest normal 2^-14 the
         * error is half a subnormal step, 2^-25, i.e. 2^-11 relative to 2^-14 */
        {GM_TYPE_F16, 0x1p-11, 0x1p-11},
        {GM_TYPE_BF16, 0x1p-8, 0x1p-8},
        {GM_TYPE_F32, 0, 0},
    };
    rng_t r = {7};
    const int64_t n = 256 * 64;
    float *x = xmalloc((size_t)n * 4), *y = xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; ++i) {
        if (i % 256 == 0) {
            const float s = exp2f((float)(rng_u64(&r) % 13) - 6);
            for (int64_t j = i; j < i + 256; ++j) x[j] = rng_normal(&r) * s;
        }
    }
    for (size_t bi = 0; bi < sizeof bounds / sizeof bounds[0]; ++bi) {
        const gm_type_traits *tr = gm_type_traits_of(bounds[bi].t);
        const int64_t blk = tr->block_size == 1 ? 1 : tr->block_size;
        void *q = xmalloc(gm_row_bytes(tr, n));
        tr->quantize(x, q, n);
        tr->dequantize(q, y, n);
        double se = 0, sx = 0, worst = 0;
        for (int64_t b = 0; b < n; b += blk) {
            double amax = 0;
            for (int64_t j = b; j < b + blk; ++j) amax = fmax(amax, fabs(x[j]));
            for (int64_t j = b; j < b + blk; ++j) {
                const double e = fabs((double)x[j] - y[j]);
                se += e * e;
                sx += (double)x[j] * x[j];
                const double rel = blk == 1 ? e / fmax(fabs(x[j]), 0x1p-14) : e / amax;
                if (rel > worst) worst = rel;
            }
        }
        const double rms = sqrt(se / sx);
        printf("  [ INFO ] %-5s round trip: max err %.4g (bound %.4g), rms err %.4g (bound %.4g)\n", tr->name, worst,
               bounds[bi].max_rel, rms, bounds[bi].rms_rel);
        assert_true(worst <= bounds[bi].max_rel);
        assert_true(rms <= bounds[bi].rms_rel);
        free(q);
    }
    /* all-zero input stays zero, with zero scales */
    memset(x, 0, 256 * 4);
    for (size_t bi = 0; bi < sizeof bounds / sizeof bounds[0]; ++bi) {
        const gm_type_traits *tr = gm_type_traits_of(bounds[bi].t);
        void *q = xmalloc(gm_row_bytes(tr, 256));
        tr->quantize(x, q, 256);
        tr->dequantize(q, y, 256);
        for (int j = 0; j < 256; ++j) assert_true(y[j] == 0);
        free(q);
    }
    free(x), free(y);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--isa-child") == 0) return isa_child();
    if (argc > 1 && strcmp(argv[1], "--x4-child") == 0) {
        const struct CMUnitTest child[] = {cmocka_unit_test(test_vec_dot_x4_bitwise)};
        return cmocka_run_group_tests_name("x4 child", child, NULL, NULL) ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits),
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_scale_unpack),
        cmocka_unit_test(test_golden_gguf_py),
        cmocka_unit_test(test_fast_dequantize_exact),
        cmocka_unit_test(test_fast_vec_dot),
        cmocka_unit_test(test_vec_dot_x4_bitwise),
        cmocka_unit_test(test_vec_dot_x4_bitwise_novnni),
        cmocka_unit_test(test_ref_vec_dot_definition),
        cmocka_unit_test(test_fast_quantize_exact),
        cmocka_unit_test(test_activation_quantizer_contract),
        cmocka_unit_test(test_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
