/* test_rng.h: the tests' pseudo-random floats (xorshift64): each test file keeps its own state and seed, so every
 * run draws the same values. */
#ifndef GM_TEST_RNG_H
#define GM_TEST_RNG_H

#include <stdint.h>

/* Uniform in [-1, 1); advances *state. */
static inline float test_frand(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (float)((*state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

#endif
