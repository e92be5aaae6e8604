/* quant.c: the type-traits table (block size, bytes, reference kernels) indexed by GGML type number, the
 * names of every GGML type, and gm_pack_rows4 (the four-row layout vec_dot_4xn reads). Kernel bodies live in kernels/ref (scalar) and kernels/cpu (SIMD). */
#include "quant/quant.h"

#include <stdio.h>
#include <string.h>

#include "quant/quant_blocks.h"

/* A weight type with its vec_dot_type, its reference kernels, and its activation quantizer if it is also
 * an activation type (act: NULL otherwise). */
#define GM_WEIGHT(T, t, bs, bytes, vdt, act)                                                           \
    [GM_TYPE_##T] = {.name = #t, .block_size = bs, .block_bytes = bytes, .weight_ok = true,            \
                     .vec_dot_type = GM_TYPE_##vdt, .dequantize = gm_dequantize_##t##_ref,              \
                     .quantize = gm_quantize_##t##_ref, .quantize_act = act, .vec_dot = gm_vec_dot_##t##_ref}
/* An activation-side type: conversions only, no vec_dot of its own. */
#define GM_ACT(T, t, bs, bytes)                                                                        \
    [GM_TYPE_##T] = {.name = #t, .block_size = bs, .block_bytes = bytes, .vec_dot_type = GM_TYPE_##T,  \
                     .dequantize = gm_dequantize_##t##_ref, .quantize = gm_quantize_##t##_ref,              \
                     .quantize_act = gm_quantize_##t##_ref}

static const gm_type_traits k_traits[GM_TYPE_COUNT] = {
    GM_WEIGHT(F32, f32, 1, sizeof(float), F32, gm_quantize_f32_ref),
    /* 16-bit float weights take f32 activations (ggml rounds them to the weight's type; keeping them exact
     * makes a BF16 checkpoint agree with transformers' float32 evaluation of the same weights to ~1e-6) */
    GM_WEIGHT(F16, f16, 1, sizeof(gm_f16), F32, gm_quantize_f16_ref),
    GM_WEIGHT(BF16, bf16, 1, sizeof(gm_bf16), F32, gm_quantize_bf16_ref),
    GM_WEIGHT(Q4_0, q4_0, GM_QK, sizeof(gm_block_q4_0), Q8_0, NULL),
    GM_WEIGHT(Q4_1, q4_1, GM_QK, sizeof(gm_block_q4_1), Q8_1, NULL),
    GM_WEIGHT(Q5_0, q5_0, GM_QK, sizeof(gm_block_q5_0), Q8_0, NULL),
    GM_WEIGHT(Q5_1, q5_1, GM_QK, sizeof(gm_block_q5_1), Q8_1, NULL),
    GM_WEIGHT(Q8_0, q8_0, GM_QK, sizeof(gm_block_q8_0), Q8_0, gm_quantize_q8_0_act_ref),
    GM_WEIGHT(Q4_K, q4_K, GM_QK_K, sizeof(gm_block_q4_K), Q8_K, NULL),
    GM_WEIGHT(Q5_K, q5_K, GM_QK_K, sizeof(gm_block_q5_K), Q8_K, NULL),
    GM_WEIGHT(Q6_K, q6_K, GM_QK_K, sizeof(gm_block_q6_K), Q8_K, NULL),
    GM_ACT(Q8_1, q8_1, GM_QK, sizeof(gm_block_q8_1)),
    GM_ACT(Q8_K, q8_K, GM_QK_K, sizeof(gm_block_q8_K)),
    /* Sizes only, so errors can name them and tensor sizes can be computed; no kernels. */
    [GM_TYPE_Q2_K] = {.name = "q2_K", .block_size = GM_QK_K, .block_bytes = 84, .vec_dot_type = GM_TYPE_Q8_K},
    [GM_TYPE_Q3_K] = {.name = "q3_K", .block_size = GM_QK_K, .block_bytes = 110, .vec_dot_type = GM_TYPE_Q8_K},
};

const gm_type_traits *gm_type_traits_of(int64_t type) {
    if (type < 0 || type >= GM_TYPE_COUNT) return NULL;
    const gm_type_traits *t = &k_traits[type];
    return t->name ? t : NULL;
}

/* Every GGML type number known to gguf-py 0.19, spelled as ggml's type_traits spell them (4 and 5 were
 * q4_2 / q4_3, removed before GGUF; 31..33 and 36..38 are ggml's retired repacked layouts). */
static const char *const k_ggml_names[] = {
    [0] = "f32",        [1] = "f16",         [2] = "q4_0",        [3] = "q4_1",        [4] = "q4_2",
    [5] = "q4_3",       [6] = "q5_0",        [7] = "q5_1",        [8] = "q8_0",        [9] = "q8_1",
    [10] = "q2_K",      [11] = "q3_K",       [12] = "q4_K",       [13] = "q5_K",       [14] = "q6_K",
    [15] = "q8_K",      [16] = "iq2_xxs",    [17] = "iq2_xs",     [18] = "iq3_xxs",    [19] = "iq1_s",
    [20] = "iq4_nl",    [21] = "iq3_s",      [22] = "iq2_s",      [23] = "iq4_xs",     [24] = "i8",
    [25] = "i16",       [26] = "i32",        [27] = "i64",        [28] = "f64",        [29] = "iq1_m",
    [30] = "bf16",      [31] = "q4_0_4_4",   [32] = "q4_0_4_8",   [33] = "q4_0_8_8",   [34] = "tq1_0",
    [35] = "tq2_0",     [36] = "iq4_nl_4_4", [37] = "iq4_nl_4_8", [38] = "iq4_nl_8_8", [39] = "mxfp4",
    [40] = "nvfp4",     [41] = "q1_0",
};

const char *gm_type_name(int64_t type, char buf[32]) {
    if (type >= 0 && type < (int64_t)(sizeof k_ggml_names / sizeof k_ggml_names[0]) && k_ggml_names[type])
        return k_ggml_names[type];
    snprintf(buf, 32, "type %lld", (long long)type);
    return buf;
}

void gm_pack_rows4(void *dst, const void *src, uint64_t rb, int64_t nb, size_t block_bytes) {
    uint8_t *d = dst;
    const uint8_t *s = src;
    for (int64_t j = 0; j + 1 < nb; j += 2)
        for (int r = 0; r < 4; ++r, d += 2 * block_bytes) memcpy(d, s + r * rb + (uint64_t)j * block_bytes, 2 * block_bytes);
    if (nb % 2)
        for (int r = 0; r < 4; ++r, d += block_bytes) memcpy(d, s + r * rb + (uint64_t)(nb - 1) * block_bytes, block_bytes);
}
