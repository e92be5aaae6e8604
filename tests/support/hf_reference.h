/* hf_reference.h: reading the transformers reference of a tests/golden/hf/<variant>/ fixture (ref.bin, written by
 * tests/golden/make_hf_fixtures.py): b"GMHF01\0\0", u32 n, i32 tokens[n], u32 n_vocab, f32 logits[n][n_vocab],
 * u32 n_gen, i32 gen[n_gen]. Shared by the CPU (tests/unit/test_hf_fixtures.c) and GPU (tests/cuda) checks. */
#ifndef GM_HF_REFERENCE_H
#define GM_HF_REFERENCE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct reference {
    uint32_t n, n_vocab, n_gen;
    int32_t *tokens;
    float *logits; /* [n][n_vocab] */
    int32_t *gen;
} reference;

/* Reads DIR/ref.bin into r (zeroed by the caller); false if absent, short or malformed. */
bool load_reference(const char *dir, reference *r);
void free_reference(reference *r);

#endif
