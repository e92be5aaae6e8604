/* fp16.h: scalar conversions between float32 and the 16-bit float formats IEEE half and bfloat16.
 * Bit-exact with ggml's reference conversions (round to nearest even; NaN stays NaN). SIMD conversions
 * live with the kernels that need them. */
#ifndef GM_FP16_H
#define GM_FP16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t gm_f16;  /* IEEE 754 binary16 bits */
typedef uint16_t gm_bf16; /* bfloat16 bits */

static inline uint32_t gm_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float gm_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float gm_f16_to_f32(gm_f16 h) {
    /* Exact: every half is a float. Written after the classic branch-free method (exponent rebias,
     * with subnormals normalised through a float multiply). */
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = gm_bits_f32(0x7800000u); /* 2^-112 */
    const float normalized = gm_bits_f32((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = gm_bits_f32((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result = sign | (two_w < denormalized_cutoff ? gm_f32_bits(denormalized) : gm_f32_bits(normalized));
    return gm_bits_f32(result);
}

static inline gm_f16 gm_f32_to_f16(float f) {
    /* Round to nearest even, overflow to inf, NaN preserved (same result as F16C's vcvtps2ph, mode 0). */
    const float scale_to_inf = gm_bits_f32(0x77800000u);  /* 2^112 */
    const float scale_to_zero = gm_bits_f32(0x08800000u); /* 2^-110 */
    float base = (f < 0 ? -f : f) * scale_to_inf;
    base *= scale_to_zero;
    const uint32_t w = gm_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = gm_bits_f32((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = gm_f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (gm_f16)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static inline float gm_bf16_to_f32(gm_bf16 h) { return gm_bits_f32((uint32_t)h << 16); }

static inline gm_bf16 gm_f32_to_bf16(float f) {
    uint32_t u = gm_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (gm_bf16)((u >> 16) | 64); /* quiet NaN */
    return (gm_bf16)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

#endif
