/* hf_reference.c: the ref.bin reader of hf_reference.h. */
#include "hf_reference.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool read_exact(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

bool load_reference(const char *dir, reference *r) {
    char path[4200];
    snprintf(path, sizeof path, "%s/ref.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char magic[8];
    bool ok = read_exact(f, magic, 8) && memcmp(magic, "GMHF01\0\0", 8) == 0 && read_exact(f, &r->n, 4) &&
              r->n > 0 && r->n < 4096;
    if (ok) {
        r->tokens = malloc(sizeof(int32_t) * r->n);
        ok = r->tokens && read_exact(f, r->tokens, sizeof(int32_t) * r->n) && read_exact(f, &r->n_vocab, 4) &&
             r->n_vocab > 0 && r->n_vocab < (1u << 20);
    }
    if (ok) {
        r->logits = malloc(sizeof(float) * (size_t)r->n * r->n_vocab);
        ok = r->logits && read_exact(f, r->logits, sizeof(float) * (size_t)r->n * r->n_vocab) &&
             read_exact(f, &r->n_gen, 4) && r->n_gen < 4096;
    }
    if (ok) {
        r->gen = malloc(sizeof(int32_t) * (r->n_gen ? r->n_gen : 1));
        ok = r->gen && read_exact(f, r->gen, sizeof(int32_t) * r->n_gen);
    }
    fclose(f);
    return ok;
}

void free_reference(reference *r) {
    free(r->tokens);
    free(r->logits);
    free(r->gen);
    memset(r, 0, sizeof *r);
}
