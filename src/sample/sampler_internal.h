/* sampler_internal.h: the sampler's internals that tests and benchmarks look at: the PCG32 generator
 * and the filter chain's surviving candidates. Owns nothing the public header promises; the chain's
 * semantics are documented once, at the top of sampler.c. */
#ifndef GM_SAMPLER_INTERNAL_H
#define GM_SAMPLER_INTERNAL_H

#include "gemmac.h"

/* ==== PCG32 (M. O'Neill, pcg-random.org: the XSH-RR output of a 64-bit LCG, "pcg32_random_r") ==== */
typedef struct gm_pcg32 {
    uint64_t state;
    uint64_t inc;                    /* stream selector, always odd */
} gm_pcg32;

/* pcg32_srandom_r: (initstate 42, initseq 54) gives 0xa15c02b7 0x7b47f409 ... as in pcg32-demo.c. */
void gm_pcg32_seed(gm_pcg32 *rng, uint64_t initstate, uint64_t initseq);
uint32_t gm_pcg32_next(gm_pcg32 *rng);
/* Uniform in [0, 1) with 53 random bits (two draws). */
double gm_pcg32_unit(gm_pcg32 *rng);

/* ==== The filter chain, observable ==== */
typedef struct gm_sample_cand {
    gemmac_token id;
    float logit;                     /* after penalties, before temperature (NaN already read as -inf) */
    float p;                         /* probability the final draw gives it: softmax of logit/temp over
                                        the survivors; 1 for the single greedy survivor */
} gm_sample_cand;

/* Runs penalties -> top-k -> top-p -> min-p -> temperature on logits [n_vocab] exactly as
 * gemmac_sampler_sample does, without drawing (the generator is not advanced). Writes the survivors,
 * ordered by (logit desc, id asc), to out[0 .. min(count, cap)) and returns their count (which may
 * exceed cap). With temp <= 0 the one survivor is the greedy argmax. Returns -1 on NULL arguments. */
int32_t gm_sampler_candidates(gemmac_sampler *s, const float *logits, gm_sample_cand *out, int32_t cap);

/* The seed the generator was last seeded with (the clock's, for GEMMAC_SEED_RANDOM). */
uint64_t gm_sampler_seed(const gemmac_sampler *s);
/* The generator's current state (it advances by two outputs per draw): equal states after equal
 * seeds mean equally many draws. 0 for NULL. */
uint64_t gm_sampler_rng_state(const gemmac_sampler *s);

#endif
