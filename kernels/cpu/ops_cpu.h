/* ops_cpu.h: SIMD versions of the non-matmul reference kernels of kernels/ref/ops_ref.h, with the same
 * signatures and contracts; the CPU backend picks them at run time by gm_cpu_isa(). */
#ifndef GM_OPS_CPU_H
#define GM_OPS_CPU_H

#include <stdint.h>

#include "quant/fp16.h"

/* As gm_ref_attention_head (AVX2 + FMA + F16C). */
void gm_avx2_attention_head(const float *q, const gm_f16 *const *k, const gm_f16 *const *v, int n_keys, int D,
                            float *scores, float *out);

/* As gm_ref_attention_group: heads of a group four at a time, so each f16 key and value row is loaded and
 * converted once for all of them. */
void gm_avx2_attention_group(const float *q, int G, const gm_f16 *const *k, const gm_f16 *const *v, int n_keys,
                             int D, float *scores, float *out);

/* g = gelu_tanh(g) ⊙ u over n values (AVX2 + FMA); within a few ulp of gm_ref_gelu_tanh. */
void gm_avx2_gelu_mul(float *g, const float *u, int64_t n);

#endif
