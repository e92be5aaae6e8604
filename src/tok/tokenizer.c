/* tokenizer.c: builds a tokenizer from a vocabulary (desc or GGUF) as llama.cpp's llama_vocab::load does;
 * owns lookups, pieces, end-of-generation ids and the special-token split (tokenizer_st_partition) that
 * precedes the merges. The merge algorithms themselves are spm.c (Gemma 3) and bpe.c (Gemma 4). */
#include "tok/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------------- */
/* small helpers                                                                                         */

gemmac_status gm_tokvec_push(gm_tokvec *tv, gemmac_token id) {
    if (tv->n == tv->cap) {
        size_t cap = tv->cap ? tv->cap * 2 : 64;
        gemmac_token *v = realloc(tv->v, cap * sizeof *v);
        if (!v) return GEMMAC_ERR_NO_MEMORY;
        tv->v = v;
        tv->cap = cap;
    }
    tv->v[tv->n++] = id;
    return GEMMAC_OK;
}

/* A word-at-a-time hash (the tables hold at most 2^31 entries of attacker-chosen text, but collisions only
 * cost probes, never correctness). */
static uint64_t hash_bytes(const void *p, size_t n, uint64_t h) {
    const uint8_t *s = p;
    h ^= (uint64_t)n * 0x9e3779b97f4a7c15ULL;
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    if (n) memcpy(&w, s, n);
    h = (h ^ w) * 0x94d049bb133111ebULL;
    return h ^ (h >> 29);
}

#define HASH_SEED 0xcbf29ce484222325ULL

static uint64_t hash_text(const char *s, size_t n) { return hash_bytes(s, n, HASH_SEED); }

static uint64_t hash_pair(const char *l, size_t ln, const char *r, size_t rn) {
    return hash_bytes(r, rn, hash_bytes(l, ln, HASH_SEED) + 0x632be59bd9b4e019ULL);
}

static uint64_t hash_ids(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 32);
}

static bool hash_alloc(gm_tok_hash *h, uint64_t n_items) {
    uint64_t size = 16;
    while (size < n_items * 2) size <<= 1;
    h->slots = calloc((size_t)size, sizeof *h->slots);
    h->mask = size - 1;
    return h->slots != NULL;
}

int32_t gm_tok_lookup(const gm_tokenizer *t, const char *s, size_t n) {
    if (n > t->max_token_len) return -1;
    for (uint64_t i = hash_text(s, n) & t->hash.mask;; i = (i + 1) & t->hash.mask) {
        uint32_t v = t->hash.slots[i];
        if (v == 0) return -1;
        size_t len;
        const char *txt = gm_tok_text(t, (int32_t)(v - 1), &len);
        if (len == n && memcmp(txt, s, n) == 0) return (int32_t)(v - 1);
    }
}

int64_t gm_tok_merge_rank(const gm_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn) {
    if (t->n_merges == 0 || ln > t->max_merge_llen || rn > t->max_merge_rlen) return -1;
    for (uint64_t i = hash_pair(l, ln, r, rn) & t->merge_hash.mask;; i = (i + 1) & t->merge_hash.mask) {
        uint32_t v = t->merge_hash.slots[i];
        if (v == 0) return -1;
        const gm_merge *m = &t->merges[v - 1];
        const char *ml = t->merge_pool + m->off;
        if (m->llen == ln && m->rlen == rn && memcmp(ml, l, ln) == 0 && memcmp(ml + ln, r, rn) == 0)
            return (int64_t)(v - 1);
    }
}

int64_t gm_tok_merge_ids(const gm_tokenizer *t, int32_t lid, int32_t rid, int32_t *result) {
    if (!t->id_merges) return -1;
    for (uint64_t i = hash_ids((uint32_t)lid, (uint32_t)rid) & t->id_merge_mask;; i = (i + 1) & t->id_merge_mask) {
        const gm_id_merge *m = &t->id_merges[i];
        if (m->rank < 0) return -1;
        if (m->left == lid && m->right == rid) {
            *result = m->result;
            return m->rank;
        }
    }
}

/* ---------------------------------------------------------------------------------------------------- */
/* special-token tries                                                                                   */

static int32_t trie_child(const gm_special_set *s, int32_t node, uint8_t b) {
    if (node == 0) return s->root_child[b];
    if (s->first_byte[node] == b && s->first_child[node] >= 0) return s->first_child[node];
    if (!s->more_children[node]) return -1;
    uint64_t key = ((uint64_t)node << 8 | b) + 1;
    for (uint64_t i = hash_ids((uint32_t)node, b) & s->edge_mask;; i = (i + 1) & s->edge_mask) {
        if (s->edge_key[i] == key) return s->edge_child[i];
        if (s->edge_key[i] == 0) return -1;
    }
}

static int cmp_u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Builds the trie over the tokens whose attributes match want (and none of reject). */
static gemmac_status special_set_build(gm_tokenizer *t, gm_special_set *s, uint8_t want, uint8_t reject) {
    uint64_t n_nodes = 1, n_tok = 0;
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        if (!(t->attr[id] & want) || (t->attr[id] & reject)) continue;
        n_nodes += t->text_off[id + 1] - t->text_off[id];
        n_tok++;
    }
    for (int i = 0; i < 256; i++) s->root_child[i] = -1;
    if (n_nodes > INT32_MAX / 2) return GEMMAC_ERR_BAD_FILE;
    uint64_t size = 16;
    while (size < n_nodes * 2) size <<= 1;
    s->token = malloc((size_t)n_nodes * sizeof *s->token);
    s->first_child = malloc((size_t)n_nodes * sizeof *s->first_child);
    s->first_byte = malloc((size_t)n_nodes);
    s->more_children = malloc((size_t)n_nodes);
    s->edge_key = calloc((size_t)size, sizeof *s->edge_key);
    s->edge_child = malloc((size_t)size * sizeof *s->edge_child);
    s->lengths = malloc((size_t)(n_tok ? n_tok : 1) * sizeof *s->lengths);
    if (!s->token || !s->first_child || !s->first_byte || !s->more_children || !s->edge_key || !s->edge_child ||
        !s->lengths)
        return GEMMAC_ERR_NO_MEMORY;
    s->edge_mask = size - 1;
    s->token[0] = -1;
    s->n_nodes = 1;
    uint32_t n_len = 0;
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        if (!(t->attr[id] & want) || (t->attr[id] & reject)) continue;
        size_t len;
        const char *txt = gm_tok_text(t, (int32_t)id, &len);
        int32_t node = 0;
        for (size_t i = 0; i < len; i++) {
            uint8_t b = (uint8_t)txt[i];
            int32_t c = trie_child(s, node, b);
            if (c < 0) {
                c = s->n_nodes++;
                s->token[c] = -1;
                s->first_child[c] = -1;
                s->first_byte[c] = 0;
                s->more_children[c] = 0;
                if (node == 0) {
                    s->root_child[b] = c;
                } else if (s->first_child[node] < 0) {
                    s->first_child[node] = c;
                    s->first_byte[node] = b;
                } else {
                    s->more_children[node] = 1;
                    uint64_t k = hash_ids((uint32_t)node, b) & s->edge_mask;
                    while (s->edge_key[k]) k = (k + 1) & s->edge_mask;
                    s->edge_key[k] = ((uint64_t)node << 8 | b) + 1;
                    s->edge_child[k] = c;
                }
            }
            node = c;
        }
        s->token[node] = (int32_t)id;  /* texts are unique, so each end node has one token */
        s->lengths[n_len++] = (uint32_t)len;
        if (len > s->max_len) s->max_len = (uint32_t)len;
    }
    if (n_len) qsort(s->lengths, n_len, sizeof *s->lengths, cmp_u32_desc);
    uint32_t k = 0;
    for (uint32_t i = 0; i < n_len; i++)
        if (k == 0 || s->lengths[k - 1] != s->lengths[i]) s->lengths[k++] = s->lengths[i];
    s->n_lengths = k;
    if (k > 0 && k <= 64) {
        if (!(s->group_of_len = malloc((size_t)s->max_len + 1))) return GEMMAC_ERR_NO_MEMORY;
        for (uint32_t g = 0; g < k; g++) s->group_of_len[s->lengths[g]] = (uint8_t)g;
    }
    return GEMMAC_OK;
}

static void special_set_free(gm_special_set *s) {
    free(s->token);
    free(s->first_child);
    free(s->first_byte);
    free(s->more_children);
    free(s->edge_key);
    free(s->edge_child);
    free(s->lengths);
    free(s->group_of_len);
}

/* ---------------------------------------------------------------------------------------------------- */
/* building                                                                                              */

/* llama.cpp marks tokens with these texts as end-of-generation and, if they are not CONTROL, adds CONTROL
 * (llama-vocab.cpp load(), "control-looking token"). That changes how they tokenize (not matched without
 * parse_special) and render (empty piece), so we reproduce it. Gemma 3's user-defined "</s>" (an HTML tag)
 * is caught by it; in a vocabulary that has <|tool_response> (Gemma 4), "</s>" is made NORMAL instead. */
static const char *const k_llama_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>", "[e~[",
};

static void apply_llama_text_rules(gm_tokenizer *t) {
    for (size_t i = 0; i < sizeof k_llama_eog_texts / sizeof k_llama_eog_texts[0]; i++) {
        int32_t id = gm_tok_lookup(t, k_llama_eog_texts[i], strlen(k_llama_eog_texts[i]));
        if (id >= 0) t->attr[id] |= GM_TA_CONTROL;
    }
    int32_t s_id = gm_tok_lookup(t, "</s>", 4);
    if (t->tool_response >= 0 && s_id >= 0) t->attr[s_id] = GM_TA_NORMAL;
}

static bool is_hex(uint8_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int hex_val(uint8_t c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

/* The piece of a token as llama.cpp's token_to_piece(special = false). */
static size_t make_piece(const gm_tokenizer *t, uint32_t id, char *dst) {
    uint8_t a = t->attr[id];
    size_t len;
    const char *txt = gm_tok_text(t, (int32_t)id, &len);
    if (a & (GM_TA_CONTROL | GM_TA_UNKNOWN)) return 0;
    if (a & GM_TA_USER) {
        memcpy(dst, txt, len);
        return len;
    }
    if (a & GM_TA_NORMAL) {
        size_t n = 0;
        for (size_t i = 0; i < len; i++) {
            if (i + 3 <= len && memcmp(txt + i, "\xe2\x96\x81", 3) == 0) {
                dst[n++] = ' ';
                i += 2;
            } else {
                dst[n++] = txt[i];
            }
        }
        return n;
    }
    if (a & GM_TA_BYTE) {  /* validated "<0xHH>" */
        dst[0] = (char)(hex_val((uint8_t)txt[3]) * 16 + hex_val((uint8_t)txt[4]));
        return 1;
    }
    return 0;  /* unused / undefined types render as nothing */
}

static uint8_t attr_of_type(int32_t type) {
    switch (type) {
    case GM_TOKTYPE_NORMAL: return GM_TA_NORMAL;
    case GM_TOKTYPE_UNKNOWN: return GM_TA_UNKNOWN;
    case GM_TOKTYPE_CONTROL: return GM_TA_CONTROL;
    case GM_TOKTYPE_USER_DEFINED: return GM_TA_USER;
    case GM_TOKTYPE_UNUSED: return GM_TA_UNUSED;
    case GM_TOKTYPE_BYTE: return GM_TA_BYTE;
    default: return 0;  /* llama.cpp: LLAMA_TOKEN_ATTR_UNDEFINED */
    }
}

#define EMPTY_NAME_MAX 24  /* "[EMPTY_4294967295]" */

static gemmac_status build_texts(gm_tokenizer *t, const gm_vocab_desc *d, gm_error *err) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < d->n_tokens; i++) {
        uint64_t len = d->tokens[i].len;
        if (len == 0) len = EMPTY_NAME_MAX;
        if (len > UINT32_MAX / 2 || (d->tokens[i].len && !d->tokens[i].ptr))
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer: token %u has an invalid text", i);
        total += len;
    }
    t->text_pool = malloc((size_t)total + 1);
    t->text_off = malloc(((size_t)d->n_tokens + 1) * sizeof *t->text_off);
    if (!t->text_pool || !t->text_off) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "tokenizer: out of memory");
    uint64_t off = 0;
    for (uint32_t i = 0; i < d->n_tokens; i++) {
        t->text_off[i] = off;
        uint64_t len = d->tokens[i].len;
        if (len == 0) {
            len = (uint64_t)snprintf(t->text_pool + off, EMPTY_NAME_MAX + 1, "[EMPTY_%u]", i);
        } else {
            memcpy(t->text_pool + off, d->tokens[i].ptr, (size_t)len);
        }
        if (len > t->max_token_len) t->max_token_len = (uint32_t)len;
        off += len;
    }
    t->text_off[d->n_tokens] = off;
    return GEMMAC_OK;
}

static gemmac_status build_hash(gm_tokenizer *t, gm_error *err) {
    if (!hash_alloc(&t->hash, t->n_tokens)) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "tokenizer: out of memory");
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        size_t len;
        const char *txt = gm_tok_text(t, (int32_t)id, &len);
        uint64_t i = hash_text(txt, len) & t->hash.mask;
        for (; t->hash.slots[i]; i = (i + 1) & t->hash.mask) {
            size_t l2;
            const char *t2 = gm_tok_text(t, (int32_t)(t->hash.slots[i] - 1), &l2);
            if (l2 == len && memcmp(t2, txt, len) == 0)
                return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer: duplicate token text at ids %u and %u",
                               t->hash.slots[i] - 1, id);
        }
        t->hash.slots[i] = id + 1;
    }
    return GEMMAC_OK;
}

static gemmac_status build_merges(gm_tokenizer *t, const gm_vocab_desc *d, gm_error *err) {
    if (d->n_merges == 0) return GEMMAC_OK;
    if (!d->merges) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tokenizer: merges is NULL");
    if (d->n_merges > INT32_MAX) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer: too many merges");
    uint64_t total = 0;
    for (uint64_t i = 0; i < d->n_merges; i++) {
        if (d->merges[i].len > UINT32_MAX / 2 || (d->merges[i].len && !d->merges[i].ptr))
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer: merge %llu has an invalid text",
                           (unsigned long long)i);
        total += d->merges[i].len;
    }
    t->merge_pool = malloc((size_t)total + 1);
    t->merges = malloc((size_t)d->n_merges * sizeof *t->merges);
    if (!t->merge_pool || !t->merges || !hash_alloc(&t->merge_hash, d->n_merges))
        return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "tokenizer: out of memory");
    uint64_t off = 0;
    for (uint64_t r = 0; r < d->n_merges; r++) {
        const char *s = d->merges[r].ptr;
        size_t n = (size_t)d->merges[r].len;
        /* llama.cpp: pos = word.find(' ', 1); without one both halves are empty (never looked up). */
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        gm_merge *m = &t->merges[r];
        m->off = off;
        if (sp) {
            m->llen = (uint32_t)(sp - s);
            m->rlen = (uint32_t)(n - m->llen - 1);
            memcpy(t->merge_pool + off, s, m->llen);
            memcpy(t->merge_pool + off + m->llen, sp + 1, m->rlen);
            off += (uint64_t)m->llen + m->rlen;
        } else {
            m->llen = m->rlen = 0;
        }
        if (m->llen > t->max_merge_llen) t->max_merge_llen = m->llen;
        if (m->rlen > t->max_merge_rlen) t->max_merge_rlen = m->rlen;
        /* insert unless the pair is already there (std::unordered_map::emplace keeps the first rank) */
        const char *ml = t->merge_pool + m->off;
        uint64_t i = hash_pair(ml, m->llen, ml + m->llen, m->rlen) & t->merge_hash.mask;
        bool dup = false;
        for (; t->merge_hash.slots[i]; i = (i + 1) & t->merge_hash.mask) {
            const gm_merge *o = &t->merges[t->merge_hash.slots[i] - 1];
            if (o->llen == m->llen && o->rlen == m->rlen &&
                memcmp(t->merge_pool + o->off, ml, (size_t)m->llen + m->rlen) == 0) {
                dup = true;
                break;
            }
        }
        if (!dup) t->merge_hash.slots[i] = (uint32_t)(r + 1);
    }
    t->n_merges = d->n_merges;

    /* the same ranks keyed by token ids, for pairs whose both halves are tokens (bpe.c's fast path) */
    uint64_t size = 16;
    while (size < d->n_merges * 2) size <<= 1;
    t->id_merges = malloc((size_t)size * sizeof *t->id_merges);
    if (!t->id_merges) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "tokenizer: out of memory");
    t->id_merge_mask = size - 1;
    for (uint64_t i = 0; i < size; i++) t->id_merges[i].rank = -1;
    for (uint64_t r = 0; r < d->n_merges; r++) {
        const gm_merge *m = &t->merges[r];
        const char *ml = t->merge_pool + m->off;
        if (m->llen == 0 || m->rlen == 0) continue;
        int32_t lid = gm_tok_lookup(t, ml, m->llen), rid = gm_tok_lookup(t, ml + m->llen, m->rlen);
        if (lid < 0 || rid < 0) continue;
        uint64_t i = hash_ids((uint32_t)lid, (uint32_t)rid) & t->id_merge_mask;
        for (; t->id_merges[i].rank >= 0; i = (i + 1) & t->id_merge_mask)
            if (t->id_merges[i].left == lid && t->id_merges[i].right == rid) break;
        if (t->id_merges[i].rank >= 0) continue;  /* first rank wins */
        t->id_merges[i] = (gm_id_merge){(int32_t)r, lid, rid, gm_tok_lookup(t, ml, (size_t)m->llen + m->rlen)};
    }
    return GEMMAC_OK;
}

static gemmac_status check_special(const gm_vocab_desc *d, int32_t id, const char *name, gm_error *err) {
    if (id == -1 || (id >= 0 && (uint32_t)id < d->n_tokens)) return GEMMAC_OK;
    return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer: %s id %d outside the vocabulary of %u tokens", name, id,
                   d->n_tokens);
}

gemmac_status gm_tokenizer_new(const gm_vocab_desc *d, gm_tokenizer **out, gm_error *err) {
    if (out) *out = NULL;
    if (!d || !out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tokenizer: NULL argument");
    if (d->kind != GM_TOK_SPM && d->kind != GM_TOK_BPE_GEMMA4)
        return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tokenizer: unknown kind %d", (int)d->kind);
    if (d->n_tokens == 0 || !d->tokens) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer: empty vocabulary");
    if (d->n_tokens > INT32_MAX) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer: %u tokens is too many", d->n_tokens);
    gemmac_status st;
    if ((st = check_special(d, d->bos, "bos", err)) || (st = check_special(d, d->eos, "eos", err)) ||
        (st = check_special(d, d->eot, "eot", err)) || (st = check_special(d, d->unk, "unknown", err)) ||
        (st = check_special(d, d->pad, "padding", err)))
        return st;
    if (d->add_bos && d->bos < 0) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer: add_bos is set but there is no bos id");

    gm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "tokenizer: out of memory");
    t->kind = d->kind;
    t->n_tokens = d->n_tokens;
    t->bos = d->bos;
    t->eos = d->eos;
    t->eot = d->eot;
    t->unk = d->unk;
    t->pad = d->pad;
    t->add_bos = d->add_bos;
    t->add_space_prefix = d->add_space_prefix;

    if ((st = build_texts(t, d, err))) goto fail;
    t->scores = malloc((size_t)t->n_tokens * sizeof *t->scores);
    t->attr = malloc(t->n_tokens);
    if (!t->scores || !t->attr) {
        st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "tokenizer: out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < t->n_tokens; i++) {
        t->scores[i] = d->scores ? d->scores[i] : 0.0f;
        t->attr[i] = d->token_types ? attr_of_type(d->token_types[i]) : GM_TA_NORMAL;
        if (t->attr[i] & GM_TA_BYTE) {  /* the plamo2 "<0x-1>" lesson: byte tokens must parse exactly */
            size_t len;
            const uint8_t *s = (const uint8_t *)gm_tok_text(t, (int32_t)i, &len);
            if (len != 6 || memcmp(s, "<0x", 3) != 0 || !is_hex(s[3]) || !is_hex(s[4]) || s[5] != '>') {
                st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer: byte token %u is not of the form <0xHH>", i);
                goto fail;
            }
        }
    }
    if ((st = build_hash(t, err))) goto fail;
    if (t->kind == GM_TOK_BPE_GEMMA4 && (st = build_merges(t, d, err))) goto fail;

    t->tool_response = gm_tok_lookup(t, "<|tool_response>", 16);
    apply_llama_text_rules(t);

    /* byte fallback ids, as llama.cpp's byte_to_token: "<0xHH>" by text; for SPM the 1-byte token next */
    for (int b = 0; b < 256; b++) {
        char buf[7];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        t->byte_token[b] = gm_tok_lookup(t, buf, 6);
        if (t->byte_token[b] < 0 && t->kind == GM_TOK_SPM) {
            char c = (char)b;
            t->byte_token[b] = gm_tok_lookup(t, &c, 1);
        }
    }

    /* pieces: never longer than the text */
    t->piece_pool = malloc((size_t)t->text_off[t->n_tokens] + 1);
    t->piece_off = malloc(((size_t)t->n_tokens + 1) * sizeof *t->piece_off);
    if (!t->piece_pool || !t->piece_off) {
        st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "tokenizer: out of memory");
        goto fail;
    }
    uint64_t off = 0;
    for (uint32_t i = 0; i < t->n_tokens; i++) {
        t->piece_off[i] = off;
        size_t n = make_piece(t, i, t->piece_pool + off);
        if (n > t->max_piece_len) t->max_piece_len = n;
        off += n;
    }
    t->piece_off[t->n_tokens] = off;

    if ((st = special_set_build(t, &t->special_all, GM_TA_CONTROL | GM_TA_USER | GM_TA_UNKNOWN, 0)) ||
        (st = special_set_build(t, &t->special_user, GM_TA_USER, GM_TA_CONTROL | GM_TA_UNKNOWN))) {
        gm_fail(err, st, "tokenizer: cannot index the special tokens");
        goto fail;
    }
    *out = t;
    return GEMMAC_OK;
fail:
    gm_tokenizer_free(t);
    return st;
}

void gm_tokenizer_free(gm_tokenizer *t) {
    if (!t) return;
    free(t->text_pool);
    free(t->text_off);
    free(t->piece_pool);
    free(t->piece_off);
    free(t->scores);
    free(t->attr);
    free(t->hash.slots);
    free(t->merge_pool);
    free(t->merges);
    free(t->merge_hash.slots);
    free(t->id_merges);
    special_set_free(&t->special_all);
    special_set_free(&t->special_user);
    free(t);
}

/* ---------------------------------------------------------------------------------------------------- */
/* from GGUF                                                                                             */

/* An optional token id key: absent leaves *id alone; present must be an integer < n_tokens. */
static gemmac_status gguf_token_id(const gm_gguf *g, const char *key, uint32_t n_tokens, int32_t *id, gm_error *err) {
    if (!gm_gguf_find_kv(g, key)) return GEMMAC_OK;
    uint32_t v;
    gemmac_status st = gm_gguf_get_u32(g, key, &v, err);
    if (st) return st;
    if (v >= n_tokens) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s = %u is outside the vocabulary of %u tokens", key, v, n_tokens);
    *id = (int32_t)v;
    return GEMMAC_OK;
}

static gemmac_status gguf_opt_bool(const gm_gguf *g, const char *key, bool *v, gm_error *err) {
    if (!gm_gguf_find_kv(g, key)) return GEMMAC_OK;
    return gm_gguf_get_bool(g, key, v, err);
}

/* A required key that is absent makes the file malformed (the getter's message names the key). */
static gemmac_status required(gemmac_status st, gm_error *err) {
    if (st == GEMMAC_ERR_NOT_FOUND) {
        if (err) err->status = GEMMAC_ERR_BAD_FILE;
        return GEMMAC_ERR_BAD_FILE;
    }
    return st;
}

static int32_t find_text(const gm_str *toks, uint32_t n, const char *s) {
    size_t len = strlen(s);
    for (uint32_t i = 0; i < n; i++)
        if (toks[i].len == len && memcmp(toks[i].ptr, s, len) == 0) return (int32_t)i;
    return -1;
}

gemmac_status gm_tokenizer_from_gguf(const gm_gguf *g, gm_tokenizer **out, gm_error *err) {
    if (out) *out = NULL;
    if (!g || !out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "tokenizer: NULL argument");
    gm_vocab_desc d;
    memset(&d, 0, sizeof d);
    float *scores = NULL;
    int32_t *types = NULL;
    gemmac_status st;

    gm_str model;
    if ((st = gm_gguf_get_str(g, "tokenizer.ggml.model", &model, err))) return required(st, err);
    if (gm_str_eq(model, "llama")) {
        d.kind = GM_TOK_SPM;
    } else if (gm_str_eq(model, "gemma4")) {
        d.kind = GM_TOK_BPE_GEMMA4;
    } else {
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "tokenizer.ggml.model '%.*s' is not supported (llama, gemma4)",
                       (int)(model.len > 64 ? 64 : model.len), model.ptr);
    }

    uint64_t n;
    const gm_str *toks;
    if ((st = gm_gguf_get_str_arr(g, "tokenizer.ggml.tokens", &n, &toks, err))) return required(st, err);
    if (n == 0 || n > INT32_MAX)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer.ggml.tokens has %llu entries", (unsigned long long)n);
    d.n_tokens = (uint32_t)n;
    d.tokens = toks;

    if (gm_gguf_find_kv(g, "tokenizer.ggml.scores")) {
        uint64_t ns;
        const void *data;
        if ((st = gm_gguf_get_arr(g, "tokenizer.ggml.scores", GM_GGUF_FLOAT32, &ns, &data, err))) return st;
        if (ns != n)
            return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer.ggml.scores has %llu entries for %llu tokens",
                           (unsigned long long)ns, (unsigned long long)n);
        if (!(scores = malloc((size_t)n * sizeof *scores))) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
        memcpy(scores, data, (size_t)n * sizeof *scores);  /* may be unaligned in the file */
        d.scores = scores;
    }
    if (gm_gguf_find_kv(g, "tokenizer.ggml.token_type")) {
        uint64_t nt;
        const void *data;
        if ((st = gm_gguf_get_arr(g, "tokenizer.ggml.token_type", GM_GGUF_INT32, &nt, &data, err))) goto done;
        if (nt != n) {
            st = gm_fail(err, GEMMAC_ERR_BAD_FILE, "tokenizer.ggml.token_type has %llu entries for %llu tokens",
                         (unsigned long long)nt, (unsigned long long)n);
            goto done;
        }
        if (!(types = malloc((size_t)n * sizeof *types))) {
            st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        memcpy(types, data, (size_t)n * sizeof *types);
        d.token_types = types;
    }
    if (d.kind == GM_TOK_BPE_GEMMA4) {
        if ((st = gm_gguf_get_str_arr(g, "tokenizer.ggml.merges", &d.n_merges, &d.merges, err))) {
            st = required(st, err);
            goto done;
        }
    }

    /* llama.cpp defaults: SPM bos 1, eos 2, unk 0 (dropped when outside the vocabulary); gemma4 none */
    if (d.kind == GM_TOK_SPM) {
        d.bos = n > 1 ? 1 : -1;
        d.eos = n > 2 ? 2 : -1;
        d.unk = 0;
        d.add_bos = true;
        d.add_space_prefix = true;
    } else {
        d.bos = d.eos = d.unk = -1;
    }
    d.eot = d.pad = -1;
    if ((st = gguf_token_id(g, "tokenizer.ggml.bos_token_id", d.n_tokens, &d.bos, err)) ||
        (st = gguf_token_id(g, "tokenizer.ggml.eos_token_id", d.n_tokens, &d.eos, err)) ||
        (st = gguf_token_id(g, "tokenizer.ggml.eot_token_id", d.n_tokens, &d.eot, err)) ||
        (st = gguf_token_id(g, "tokenizer.ggml.unknown_token_id", d.n_tokens, &d.unk, err)) ||
        (st = gguf_token_id(g, "tokenizer.ggml.padding_token_id", d.n_tokens, &d.pad, err)) ||
        (st = gguf_opt_bool(g, "tokenizer.ggml.add_bos_token", &d.add_bos, err)) ||
        (st = gguf_opt_bool(g, "tokenizer.ggml.add_space_prefix", &d.add_space_prefix, err)))
        goto done;
    if (d.kind == GM_TOK_BPE_GEMMA4) d.add_bos = true;  /* llama.cpp overrides it for Gemma 4 (PR 21500) */
    if (d.eot < 0) d.eot = find_text(toks, d.n_tokens, "<end_of_turn>");
    if (d.eot < 0) d.eot = find_text(toks, d.n_tokens, "<turn|>");

    st = gm_tokenizer_new(&d, out, err);
done:
    free(scores);
    free(types);
    return st;
}

/* ---------------------------------------------------------------------------------------------------- */
/* special-token split                                                                                   */

typedef struct special_hit {
    size_t pos;
    uint32_t len;
    int32_t id;
} special_hit;

static int cmp_hit_pos(const void *a, const void *b) {
    const special_hit *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The token whose text is exactly text[p, p + L), or -1. */
static int32_t trie_exact(const gm_special_set *s, const uint8_t *text, size_t p, uint32_t L) {
    int32_t node = 0;
    for (uint32_t i = 0; i < L && node >= 0; i++) node = trie_child(s, node, text[p + i]);
    return node > 0 ? s->token[node] : -1;
}

static bool hits_push(special_hit **hits, size_t *n, size_t *cap, special_hit h) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        special_hit *nh = realloc(*hits, nc * sizeof *nh);
        if (!nh) return false;
        *hits = nh;
        *cap = nc;
    }
    (*hits)[(*n)++] = h;
    return true;
}

typedef struct candidate {
    size_t pos;
    uint64_t groups;               /* bit g: a token of length lengths[g] starts here */
} candidate;

/* Finds where special tokens split the text, as llama.cpp's tokenizer_st_partition: tokens are taken by
 * length, longest first; for each length every occurrence left to right that overlaps nothing taken so far
 * is taken. (llama.cpp orders tokens of equal length by an unstable sort; we take them in text order,
 * which differs only when two different equal-length tokens overlap.) One trie walk per position lists
 * the lengths that match there; then per length, a span is free iff both its ends are free, because
 * everything taken before it is at least as long. Sets with more than 64 lengths (no real vocabulary)
 * take the slower path that walks again per length. */
static gemmac_status find_specials(const gm_special_set *s, const uint8_t *text, size_t len, special_hit **hits_out,
                                   size_t *n_hits_out) {
    *hits_out = NULL;
    *n_hits_out = 0;
    if (s->n_lengths == 0 || len == 0) return GEMMAC_OK;
    uint8_t *taken = calloc(len, 1);
    candidate *cand = NULL;
    size_t n_cand = 0, cap_cand = 0;
    special_hit *hits = NULL;
    size_t n_hits = 0, cap_hits = 0;
    gemmac_status st = GEMMAC_ERR_NO_MEMORY;
    if (!taken) goto done;
    for (size_t p = 0; p < len; p++) {
        if (s->root_child[text[p]] < 0) continue;
        uint64_t groups = 0;
        int32_t node = 0;
        for (size_t d = 0; p + d < len; d++) {
            node = trie_child(s, node, text[p + d]);
            if (node < 0) break;
            if (s->token[node] >= 0) groups |= s->group_of_len ? 1ull << s->group_of_len[d + 1] : 1;
        }
        if (!groups) continue;
        if (n_cand == cap_cand) {
            size_t nc = cap_cand ? cap_cand * 2 : 64;
            candidate *c = realloc(cand, nc * sizeof *c);
            if (!c) goto done;
            cand = c;
            cap_cand = nc;
        }
        cand[n_cand++] = (candidate){p, groups};
    }
    for (uint32_t g = 0; g < s->n_lengths && n_cand; g++) {
        uint32_t L = s->lengths[g];
        uint64_t bit = s->group_of_len ? 1ull << g : 1;
        size_t kept = 0;
        for (size_t c = 0; c < n_cand; c++) {
            size_t p = cand[c].pos;
            if (taken[p]) continue;  /* nothing can start inside a taken span any more: drop it */
            if ((cand[c].groups & bit) && p + L <= len && !taken[p + L - 1]) {
                int32_t id = trie_exact(s, text, p, L);  /* one walk per taken token (per try, >64 lengths) */
                if (id >= 0) {
                    if (!hits_push(&hits, &n_hits, &cap_hits, (special_hit){p, L, id})) goto done;
                    memset(taken + p, 1, L);
                    continue;
                }
            }
            if (s->group_of_len) cand[c].groups &= ~bit;
            if (cand[c].groups) cand[kept++] = cand[c];  /* keep what may still match a shorter length */
        }
        n_cand = kept;
    }
    if (n_hits) qsort(hits, n_hits, sizeof *hits, cmp_hit_pos);
    st = GEMMAC_OK;
done:
    free(taken);
    free(cand);
    if (st) {
        free(hits);
        return st;
    }
    *hits_out = hits;
    *n_hits_out = n_hits;
    return GEMMAC_OK;
}

static gemmac_status tokenize_raw(const gm_tokenizer *t, const char *text, size_t len, bool prev_special, gm_tokvec *tv) {
    if (t->kind == GM_TOK_SPM) return gm_spm_tokenize(t, text, len, t->add_space_prefix && prev_special, tv);
    return gm_bpe_tokenize(t, text, len, tv);
}

gemmac_status gm_tokenize(const gm_tokenizer *t, const char *text, size_t len, int flags, gemmac_token *out,
                          size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!t || !n_out || (len && !text) || (cap && !out)) return GEMMAC_ERR_INVALID_ARG;
    if (len > GM_TOK_MAX_TEXT) return GEMMAC_ERR_INVALID_ARG;
    gm_tokvec tv = {0};
    special_hit *hits = NULL;
    size_t n_hits = 0;
    gemmac_status st = GEMMAC_OK;

    if ((flags & GEMMAC_TOKENIZE_ADD_BOS) && t->add_bos && t->bos >= 0) {
        if ((st = gm_tokvec_push(&tv, t->bos))) goto done;
    }
    const gm_special_set *set = (flags & GEMMAC_TOKENIZE_PARSE_SPECIAL) ? &t->special_all : &t->special_user;
    if ((st = find_specials(set, (const uint8_t *)text, len, &hits, &n_hits))) goto done;

    size_t cur = 0;
    bool prev_special = true;  /* llama.cpp: a leading fragment counts as following a special token */
    for (size_t h = 0; h <= n_hits; h++) {
        size_t end = h < n_hits ? hits[h].pos : len;
        if (end > cur) {
            if ((st = tokenize_raw(t, text + cur, end - cur, prev_special, &tv))) goto done;
            prev_special = false;
        }
        if (h < n_hits) {
            if ((st = gm_tokvec_push(&tv, hits[h].id))) goto done;
            prev_special = true;
            cur = hits[h].pos + hits[h].len;
        }
    }

    *n_out = tv.n;
    if (cap && tv.n) memcpy(out, tv.v, (tv.n < cap ? tv.n : cap) * sizeof *out);
    if (tv.n > cap) st = GEMMAC_ERR_BUFFER_TOO_SMALL;
done:
    free(tv.v);
    free(hits);
    return st;
}

/* ---------------------------------------------------------------------------------------------------- */
/* accessors                                                                                             */

const char *gm_token_piece(const gm_tokenizer *t, gemmac_token id, size_t *len) {
    if (!t || id < 0 || (uint32_t)id >= t->n_tokens) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = (size_t)(t->piece_off[id + 1] - t->piece_off[id]);
    return t->piece_pool + t->piece_off[id];
}

const char *gm_token_text(const gm_tokenizer *t, gemmac_token id, size_t *len) {
    size_t l = 0;
    const char *s = NULL;
    if (t && id >= 0 && (uint32_t)id < t->n_tokens) s = gm_tok_text(t, id, &l);
    if (len) *len = l;
    return s;
}

gemmac_token gm_token_find(const gm_tokenizer *t, const char *text, size_t len) {
    if (!t || (len && !text)) return -1;
    return gm_tok_lookup(t, text, len);
}

bool gm_token_is_eog(const gm_tokenizer *t, gemmac_token id) {
    if (!t || id < 0 || (uint32_t)id >= t->n_tokens) return false;
    return id == t->eos || id == t->eot || id == t->tool_response;
}

uint32_t gm_tokenizer_n_tokens(const gm_tokenizer *t) { return t ? t->n_tokens : 0; }
gm_tok_kind gm_tokenizer_kind(const gm_tokenizer *t) { return t ? t->kind : GM_TOK_SPM; }
gemmac_token gm_tokenizer_bos(const gm_tokenizer *t) { return t ? t->bos : -1; }
gemmac_token gm_tokenizer_eos(const gm_tokenizer *t) { return t ? t->eos : -1; }
gemmac_token gm_tokenizer_eot(const gm_tokenizer *t) { return t ? t->eot : -1; }
bool gm_tokenizer_add_bos(const gm_tokenizer *t) { return t && t->add_bos; }
size_t gm_tokenizer_max_piece(const gm_tokenizer *t) { return t ? t->max_piece_len : 0; }
