/* quant_blocks.h: the block structs of the quantized types, bit-compatible with GGML's GGUF layouts
 * (ggml-common.h), and the small unpack helpers every kernel shares. Kernels live in kernels/ref and
 * kernels/cpu; the traits table in quant.c. All multi-byte fields are little-endian, blocks packed. */
#ifndef GM_QUANT_BLOCKS_H
#define GM_QUANT_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "quant/fp16.h"

#define GM_QK 32    /* elements per block of the legacy types (q4_0 … q8_1) */
#define GM_QK_K 256 /* elements per super-block of the K-quants */

/* q4_0: x[j] = d * (q[j] - 8), q in 0..15.
 *   bytes 0-1   d       f16
 *   bytes 2-17  qs[16]  low nibble of qs[j] = q[j], high nibble = q[j + 16]   (j = 0..15) */
typedef struct {
    gm_f16 d;
    uint8_t qs[GM_QK / 2];
} gm_block_q4_0;
_Static_assert(sizeof(gm_block_q4_0) == 18, "q4_0 block is 18 bytes");

/* q4_1: x[j] = d * q[j] + m, q in 0..15.
 *   bytes 0-1 d f16 | 2-3 m f16 | 4-19 qs[16] nibbles as in q4_0 */
typedef struct {
    gm_f16 d;
    gm_f16 m;
    uint8_t qs[GM_QK / 2];
} gm_block_q4_1;
_Static_assert(sizeof(gm_block_q4_1) == 20, "q4_1 block is 20 bytes");

/* q5_0: x[j] = d * (q[j] - 16), q in 0..31.
 *   bytes 0-1   d       f16
 *   bytes 2-5   qh[4]   as a little-endian u32 h: bit j = bit 4 of q[j]   (j = 0..31)
 *   bytes 6-21  qs[16]  low 4 bits, nibbles as in q4_0 */
typedef struct {
    gm_f16 d;
    uint8_t qh[4];
    uint8_t qs[GM_QK / 2];
} gm_block_q5_0;
_Static_assert(sizeof(gm_block_q5_0) == 22, "q5_0 block is 22 bytes");

/* q5_1: x[j] = d * q[j] + m, q in 0..31.
 *   bytes 0-1 d f16 | 2-3 m f16 | 4-7 qh[4] as q5_0 | 8-23 qs[16] as q5_0 */
typedef struct {
    gm_f16 d;
    gm_f16 m;
    uint8_t qh[4];
    uint8_t qs[GM_QK / 2];
} gm_block_q5_1;
_Static_assert(sizeof(gm_block_q5_1) == 24, "q5_1 block is 24 bytes");

/* q8_0: x[j] = d * qs[j].
 *   bytes 0-1 d f16 | 2-33 qs[32] int8 */
typedef struct {
    gm_f16 d;
    int8_t qs[GM_QK];
} gm_block_q8_0;
_Static_assert(sizeof(gm_block_q8_0) == 34, "q8_0 block is 34 bytes");

/* q8_1 (activations for q4_1 / q5_1): x[j] = d * qs[j]; s = d * sum(qs) (f16), for the min term.
 *   bytes 0-1 d f16 | 2-3 s f16 | 4-35 qs[32] int8 */
typedef struct {
    gm_f16 d;
    gm_f16 s;
    int8_t qs[GM_QK];
} gm_block_q8_1;
_Static_assert(sizeof(gm_block_q8_1) == 36, "q8_1 block is 36 bytes");

/* q4_K: 8 sub-blocks of 32; sub-block b has a 6-bit scale sc[b] and 6-bit min m[b]:
 *   x = d*sc[b] * q - dmin*m[b], q in 0..15.
 *   bytes 0-1     d       f16 (scale of the scales)
 *   bytes 2-3     dmin    f16 (scale of the mins)
 *   bytes 4-15    scales[12], the 6-bit sc[0..7] and m[0..7] (see gm_scale_min_k4):
 *                   byte 0..3   : sc[0..3] in bits 0-5, bits 6-7 = bits 4-5 of sc[4..7]
 *                   byte 4..7   : m[0..3]  in bits 0-5, bits 6-7 = bits 4-5 of m[4..7]
 *                   byte 8..11  : low nibble = bits 0-3 of sc[4..7], high nibble = bits 0-3 of m[4..7]
 *   bytes 16-143  qs[128]: 4 groups of 32 bytes; group g holds sub-block 2g in the low nibbles and
 *                 sub-block 2g+1 in the high nibbles (element 64g + l and 64g + 32 + l in qs[32g + l]) */
typedef struct {
    gm_f16 d;
    gm_f16 dmin;
    uint8_t scales[12];
    uint8_t qs[GM_QK_K / 2];
} gm_block_q4_K;
_Static_assert(sizeof(gm_block_q4_K) == 144, "q4_K block is 144 bytes");

/* q5_K: as q4_K with a fifth bit per element, q in 0..31.
 *   bytes 0-1 d | 2-3 dmin | 4-15 scales[12] as q4_K
 *   bytes 16-47   qh[32]: bit b of qh[l] is bit 4 of element 32b + l (sub-block b, position l)
 *   bytes 48-175  qs[128]: low 4 bits, nibbles as q4_K */
typedef struct {
    gm_f16 d;
    gm_f16 dmin;
    uint8_t scales[12];
    uint8_t qh[GM_QK_K / 8];
    uint8_t qs[GM_QK_K / 2];
} gm_block_q5_K;
_Static_assert(sizeof(gm_block_q5_K) == 176, "q5_K block is 176 bytes");

/* q6_K: 16 sub-blocks of 16 with int8 scales: x = d * scales[b] * (q - 32), q in 0..63.
 *   bytes 0-127    ql[128]: low 4 bits. Two halves of 128 elements, 64 bytes each; in half h,
 *                  ql[64h + l]      low nibble: element 128h + l,      high nibble: element 128h + 64 + l
 *                  ql[64h + 32 + l] low nibble: element 128h + 32 + l, high nibble: element 128h + 96 + l
 *   bytes 128-191  qh[64]: high 2 bits; qh[32h + l] bits 2k..2k+1 belong to element 128h + 32k + l
 *   bytes 192-207  scales[16] int8, one per 16 elements
 *   bytes 208-209  d f16 */
typedef struct {
    uint8_t ql[GM_QK_K / 2];
    uint8_t qh[GM_QK_K / 4];
    int8_t scales[GM_QK_K / 16];
    gm_f16 d;
} gm_block_q6_K;
_Static_assert(sizeof(gm_block_q6_K) == 210, "q6_K block is 210 bytes");

/* q8_K (activations for the K-quants): x[j] = d * qs[j]; bsums[k] = sum of qs[16k .. 16k+15].
 *   bytes 0-3 d f32 | 4-259 qs[256] int8 | 260-291 bsums[16] int16 */
typedef struct {
    float d;
    int8_t qs[GM_QK_K];
    int16_t bsums[GM_QK_K / 16];
} gm_block_q8_K;
_Static_assert(sizeof(gm_block_q8_K) == 292, "q8_K block is 292 bytes");

/* The 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K block (GGML's get_scale_min_k4). */
static inline void gm_scale_min_k4(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* All 8 scales and 8 mins of a q4_K / q5_K block at once, word-parallel: out[0..7] = sc, out[8..15] = m.
 * Same values as gm_scale_min_k4 for j = 0..7 (the tests check it). */
static inline void gm_unpack_scales_k4(const uint8_t s[12], uint8_t out[16]) {
    uint32_t w[3], o[4];
    memcpy(w, s, 12);
    o[0] = w[0] & 0x3f3f3f3fu;                                          /* sc[0..3] */
    o[1] = (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4);  /* sc[4..7] */
    o[2] = w[1] & 0x3f3f3f3fu;                                          /* m[0..3] */
    o[3] = ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4); /* m[4..7] */
    memcpy(out, o, 16);
}

#endif
