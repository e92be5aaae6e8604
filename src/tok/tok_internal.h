/* tok_internal.h: the tokenizer's private layout shared by tokenizer.c (building, special-token split,
 * lookups), spm.c and bpe.c (the two merge algorithms) and detok.c. Not for use outside src/tok. */
#ifndef GM_TOK_INTERNAL_H
#define GM_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tok/tokenizer.h"

/* Token attributes, as llama.cpp's llama_token_attr (a token may gain CONTROL by its text: see
 * tokenizer.c apply_llama_text_rules). */
enum {
    GM_TA_NORMAL = 1u << 0,
    GM_TA_UNKNOWN = 1u << 1,
    GM_TA_CONTROL = 1u << 2,
    GM_TA_USER = 1u << 3,
    GM_TA_UNUSED = 1u << 4,
    GM_TA_BYTE = 1u << 5,
};

/* Open-addressing table of token texts → id (slot value id + 1; 0 = empty). */
typedef struct gm_tok_hash {
    uint32_t *slots;               /* [mask + 1] */
    uint64_t mask;
} gm_tok_hash;

/* Merge ranks (BPE): "left right" split at the first space after byte 0, as llama.cpp; first rank wins. */
typedef struct gm_merge {
    uint64_t off;                  /* left text at pool + off, right at pool + off + llen */
    uint32_t llen, rlen;
} gm_merge;

/* Special-token matcher: a byte trie over the texts of one set of special tokens. */
typedef struct gm_trie_node {
    int32_t first_child, next_sibling;
    int32_t token;                 /* token ending here, or -1 */
    uint8_t byte;
} gm_trie_node;

typedef struct gm_special_set {
    gm_trie_node *nodes;           /* [n_nodes]; node 0 is the root */
    int32_t n_nodes;
    int32_t root_child[256];       /* the root's children, direct */
    uint32_t *lengths;             /* [n_lengths] distinct token lengths, descending */
    uint32_t n_lengths;
    uint32_t max_len;
} gm_special_set;

struct gm_tokenizer {
    gm_tok_kind kind;
    uint32_t n_tokens;
    char *text_pool;               /* token texts, back to back */
    uint64_t *text_off;            /* [n_tokens + 1] */
    char *piece_pool;              /* decoded pieces, back to back */
    uint64_t *piece_off;           /* [n_tokens + 1] */
    float *scores;                 /* [n_tokens] */
    uint8_t *attr;                 /* [n_tokens] GM_TA_* */
    gm_tok_hash hash;
    uint32_t max_token_len;        /* bytes */
    size_t max_piece_len;
    int32_t byte_token[256];       /* fallback token of each byte (<0xHH>, or the 1-byte token for SPM); -1 */

    char *merge_pool;
    gm_merge *merges;              /* [n_merges] */
    uint64_t n_merges;
    gm_tok_hash merge_hash;        /* slot value rank + 1 */
    uint32_t max_merge_llen, max_merge_rlen;

    gm_special_set special_all;    /* control + user-defined + unknown (parse_special) */
    gm_special_set special_user;   /* user-defined only (always matched) */

    int32_t bos, eos, eot, unk, pad, tool_response;
    bool add_bos, add_space_prefix;
};

/* A growable id vector. */
typedef struct gm_tokvec {
    gemmac_token *v;
    size_t n, cap;
} gm_tokvec;

gemmac_status gm_tokvec_push(gm_tokvec *tv, gemmac_token id);

/* Token lookup by exact text; -1 when absent. */
int32_t gm_tok_lookup(const gm_tokenizer *t, const char *s, size_t n);
/* Merge rank of (left, right); -1 when absent. */
int64_t gm_tok_merge_rank(const gm_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn);

static inline const char *gm_tok_text(const gm_tokenizer *t, int32_t id, size_t *len) {
    *len = (size_t)(t->text_off[id + 1] - t->text_off[id]);
    return t->text_pool + t->text_off[id];
}

/* llama.cpp's unicode_len_utf8: the sequence length announced by a lead byte (1 for continuation bytes). */
static inline size_t gm_utf8_len(uint8_t c) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

/* The raw-text tokenizers, each appending the ids of one fragment (no special tokens inside) to out. */
gemmac_status gm_spm_tokenize(const gm_tokenizer *t, const char *text, size_t len, bool prefix_space,
                              gm_tokvec *out);
gemmac_status gm_bpe_tokenize(const gm_tokenizer *t, const char *text, size_t len, gm_tokvec *out);

#endif
