/* tok_internal.h: the tokenizer's private layout shared by tokenizer.c (building, special-token split,
 * lookups), spm.c and bpe.c (the two merge algorithms) and detok.c. Not for use outside src/tok. */
#ifndef GM_TOK_INTERNAL_H
#define GM_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

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

/* A merge keyed by the token ids of its halves; result is the id of their concatenation (-1: none). */
typedef struct gm_id_merge {
    int32_t rank;                  /* -1: empty slot */
    int32_t left, right, result;
} gm_id_merge;

/* Special-token matcher: a byte trie over the texts of one set of special tokens. Node 0 is the root; its
 * children are direct, deeper edges live in a hash table keyed by (node, byte). */
typedef struct gm_special_set {
    int32_t *token;                /* [n_nodes] token ending at the node, or -1 */
    int32_t *first_child;          /* [n_nodes] the node's first child (most nodes have one), or -1 */
    uint8_t *first_byte;           /* [n_nodes] its byte */
    uint8_t *more_children;        /* [n_nodes] 1 when further children are in the edge table */
    int32_t n_nodes;
    int32_t root_child[256];
    uint64_t *edge_key;            /* [edge_mask + 1] (node << 8 | byte) + 1; 0 = empty */
    int32_t *edge_child;
    uint64_t edge_mask;
    uint32_t *lengths;             /* [n_lengths] distinct token lengths, descending */
    uint32_t n_lengths;
    uint32_t max_len;
    uint8_t *group_of_len;         /* [max_len + 1] index into lengths; NULL when n_lengths > 64 */
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
    gm_id_merge *id_merges;        /* open addressing over (left id, right id) */
    uint64_t id_merge_mask;

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
/* The same for two token ids (both >= 0); *result gets the id of the merged text (-1 if not a token). */
int64_t gm_tok_merge_ids(const gm_tokenizer *t, int32_t lid, int32_t rid, int32_t *result);

static inline const char *gm_tok_text(const gm_tokenizer *t, int32_t id, size_t *len) {
    *len = (size_t)(t->text_off[id + 1] - t->text_off[id]);
    return t->text_pool + t->text_off[id];
}

/* llama.cpp's unicode_len_utf8: the sequence length announced by a lead byte (1 for continuation bytes). */
static inline size_t gm_utf8_len(uint8_t c) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

/* A min tournament tree over n slots (one per symbol: the key of the pair starting there), used by both
 * merge loops instead of llama.cpp's priority queue. llama.cpp pops the best queued pair and skips stale
 * ones; every current adjacent pair is queued and valid, so the best valid entry is exactly the best
 * current pair, which the tree's root holds. Keys are (priority << 32 | left index): the low half breaks
 * ties towards the leftmost pair, as llama.cpp's comparators do. Updates touch neighbouring leaves, so
 * they stay in cache where a heap's pops do not (3-10x faster on 1 MiB single-line inputs). */
#define GM_MT_EMPTY UINT64_MAX

typedef struct gm_mintree {
    uint64_t *v;                   /* [2 * base]; leaves at base + i, node k's children 2k and 2k + 1 */
    size_t base;
} gm_mintree;

static inline bool gm_mt_init(gm_mintree *t, size_t n) {
    t->base = 1;
    while (t->base < n) t->base <<= 1;
    t->v = malloc(2 * t->base * sizeof *t->v);
    if (!t->v) return false;
    for (size_t i = 0; i < 2 * t->base; i++) t->v[i] = GM_MT_EMPTY;
    return true;
}

/* After the leaves are written directly (t->v[t->base + i]), computes every inner node. */
static inline void gm_mt_build(gm_mintree *t) {
    for (size_t k = t->base - 1; k >= 1; k--) {
        uint64_t a = t->v[2 * k], b = t->v[2 * k + 1];
        t->v[k] = a < b ? a : b;
    }
}

static inline void gm_mt_set(gm_mintree *t, size_t i, uint64_t key) {
    size_t k = t->base + i;
    t->v[k] = key;
    for (k >>= 1; k >= 1; k >>= 1) {
        uint64_t a = t->v[2 * k], b = t->v[2 * k + 1], m = a < b ? a : b;
        if (t->v[k] == m) break;   /* the ancestors depend on this node only through its value */
        t->v[k] = m;
    }
}

/* The raw-text tokenizers, each appending the ids of one fragment (no special tokens inside) to out. */
gemmac_status gm_spm_tokenize(const gm_tokenizer *t, const char *text, size_t len, bool prefix_space,
                              gm_tokvec *out);
gemmac_status gm_bpe_tokenize(const gm_tokenizer *t, const char *text, size_t len, gm_tokvec *out);

#endif
