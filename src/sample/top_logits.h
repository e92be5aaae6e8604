/* top_logits.h: the k best logits of a row: the selection a context hands out instead of a whole row
 * (gemmac_ctx_top_logits; a GPU context makes it on the device, kernels/cuda/sample_cuda.cu, and copies k pairs
 * instead of n_vocab floats), with this file's host version as the oracle both are tested against.
 *
 * Semantics, shared with the sampler (sampler.c): a logit reads as gm_logit_read(v) (NaN -> -inf, +inf ->
 * FLT_MAX, and -0 as +0 so that the order below is a function of the values read); candidates are ordered by
 * (value desc, id asc), and the k first in that order are taken, in that order. */
#ifndef GM_TOP_LOGITS_H
#define GM_TOP_LOGITS_H

#include <float.h>
#include <math.h>
#include <stdint.h>

static inline float gm_logit_read(float v) {
    if (v != v) return -INFINITY;
    if (v == 0.0f) return 0.0f;
    return v > FLT_MAX ? FLT_MAX : v;
}

/* Largest k the selection serves (the library asks for GEMMAC_TOP_LOGITS, 256). */
#define GM_TOP_LOGITS_MAX 1024

/* ids[0..k), vals[0..k): the k best of row[0..n_vocab), values as gm_logit_read gives them; k is clamped to
 * [.., min(n_vocab, GM_TOP_LOGITS_MAX)] and nothing is written for k < 1. */
void gm_top_logits_row(const float *row, int32_t n_vocab, int32_t k, int32_t *ids, float *vals);

#endif
