/* test_tokenizer.c: the tokenizers (src/tok) against their references and on hostile input.
 *   - Gemma 3: the real 270M GGUF against llama.cpp's ids and detokenization (tests/golden/
 *     gemma3_tokenizer.tsv from make_tokenizer_fixtures.py); skipped when the model file is absent.
 *   - Gemma 4: a small Gemma-4-style GGUF against HF tokenizers (gemma4_vocab.gguf, gemma4_tokenizer.tsv
 *     from make_gemma4_tokenizer.py).
 *   - Hand-built vocabularies for each rule (merge order, byte fallback, special split, invalid UTF-8),
 *     the streaming detokenizer, hostile vocabularies and GGUF files, and the cost of long inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gguf_builder.h"
#include "io/gguf.h"
#include "test_paths.h"
#include "tok/tokenizer.h"

#if defined(__SANITIZE_ADDRESS__)
#define GM_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GM_SANITIZED 1
#endif
#endif
#ifndef GM_SANITIZED
#define GM_SANITIZED 0
#endif

enum { ADD_BOS = GEMMAC_TOKENIZE_ADD_BOS, SPECIAL = GEMMAC_TOKENIZE_PARSE_SPECIAL };

/* ---------------------------------------------------------------------------------------------------- */
/* helpers                                                                                               */

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

static int hexval(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

static size_t unhex(const char *s, size_t n, char *out) {
    for (size_t i = 0; i + 1 < n; i += 2) out[i / 2] = (char)(hexval(s[i]) * 16 + hexval(s[i + 1]));
    return n / 2;
}

/* Tokenizes and returns a malloc'd id array (count in *n). */
static gemmac_token *tok(const gm_tokenizer *t, const char *s, size_t len, int flags, size_t *n) {
    size_t need = 0;
    gemmac_status st = gm_tokenize(t, s, len, flags, NULL, 0, &need);
    assert_true(st == GEMMAC_OK || st == GEMMAC_ERR_BUFFER_TOO_SMALL);
    gemmac_token *ids = malloc((need + 1) * sizeof *ids);
    size_t got = 0;
    assert_int_equal(gm_tokenize(t, s, len, flags, ids, need, &got), GEMMAC_OK);
    assert_int_equal(got, need);
    *n = got;
    return ids;
}

static void expect_ids(const gm_tokenizer *t, const char *s, int flags, const gemmac_token *want, size_t n_want) {
    size_t n;
    gemmac_token *ids = tok(t, s, strlen(s), flags, &n);
    bool ok = n == n_want && memcmp(ids, want, n * sizeof *ids) == 0;
    if (!ok) {
        fprintf(stderr, "text \"%s\" flags %d: got", s, flags);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, ", want");
        for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    assert_true(ok);
}
#define EXPECT_IDS(t, s, flags, ...)                                                                         \
    do {                                                                                                     \
        const gemmac_token want_[] = {__VA_ARGS__};                                                          \
        expect_ids((t), (s), (flags), want_, sizeof want_ / sizeof want_[0]);                                \
    } while (0)

static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; min = 0x10000; }
        else return false;
        if (i + k >= n) return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += k + 1;
    }
    return true;
}

/* Streams ids through a detokenizer, returns the malloc'd text (length in *n); checks each chunk is
 * valid UTF-8 on its own. */
static char *stream_detok(const gm_tokenizer *t, const gemmac_token *ids, size_t n_ids, size_t *n) {
    gm_detok *d = gm_detok_new(t);
    assert_non_null(d);
    size_t cap = 64 + 3 * gm_tokenizer_max_piece(t) + 16, total = 0;
    char *chunk = malloc(cap), *all = malloc(cap * (n_ids + 1) + 1);
    for (size_t i = 0; i <= n_ids; i++) {
        size_t got;
        if (i < n_ids)
            assert_int_equal(gm_detok_push(d, ids[i], chunk, cap, &got), GEMMAC_OK);
        else
            assert_int_equal(gm_detok_flush(d, chunk, cap, &got), GEMMAC_OK);
        assert_int_equal(chunk[got], '\0');
        assert_true(valid_utf8((const uint8_t *)chunk, got));
        memcpy(all + total, chunk, got);
        total += got;
    }
    gm_detok_free(d);
    free(chunk);
    *n = total;
    return all;
}

/* ---------------------------------------------------------------------------------------------------- */
/* fixtures                                                                                              */

typedef struct fixture_result {
    int cases, id_mismatch, piece_mismatch, stream_checked;
} fixture_result;

/* Runs every line of a tsv fixture (hex(text) flags ids hex(detok)) against t. */
static fixture_result run_fixture(const gm_tokenizer *t, const char *rel) {
    char path[4096];
    size_t flen;
    char *data = read_all(gm_test_source_path(rel, path, sizeof path), &flen);
    if (!data) fail_msg("cannot read fixture %s", path);
    fixture_result r = {0};
    for (char *line = data, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (line[0] == '#') continue;
        char *f[4] = {line, NULL, NULL, NULL};
        for (int k = 1; k < 4; k++) {
            f[k] = strchr(f[k - 1], '\t');
            if (!f[k]) fail_msg("bad fixture line in %s", rel);
            *f[k]++ = '\0';
        }
        size_t tlen = strlen(f[0]) / 2, dlen = strlen(f[3]) / 2;
        char *text = malloc(tlen + 1), *det = malloc(dlen + 1);
        unhex(f[0], strlen(f[0]), text);
        unhex(f[3], strlen(f[3]), det);
        int flags = atoi(f[1]);
        gemmac_token *want = malloc((strlen(f[2]) / 2 + 2) * sizeof *want);
        size_t n_want = 0;
        if (strcmp(f[2], "-") != 0)
            for (char *p = f[2]; *p;) {
                want[n_want++] = (gemmac_token)strtol(p, &p, 10);
                if (*p == ',') p++;
            }
        size_t n;
        gemmac_token *ids = tok(t, text, tlen, flags, &n);
        r.cases++;
        if (n != n_want || memcmp(ids, want, n * sizeof *ids) != 0) {
            if (r.id_mismatch++ < 8) {
                fprintf(stderr, "MISMATCH %s flags %d (%zu bytes)\n  want", rel, flags, tlen);
                for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
                fprintf(stderr, "\n  got ");
                for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
                fprintf(stderr, "\n");
            }
        }
        /* the reference's ids, rendered by our pieces, give the reference's text */
        char *cat = malloc(gm_tokenizer_max_piece(t) * n_want + 1);
        size_t clen = 0;
        for (size_t i = 0; i < n_want; i++) {
            size_t pl;
            const char *p = gm_token_piece(t, want[i], &pl);
            assert_non_null(p);
            memcpy(cat + clen, p, pl);
            clen += pl;
        }
        if (clen != dlen || memcmp(cat, det, dlen) != 0) {
            if (r.piece_mismatch++ < 8) fprintf(stderr, "PIECES MISMATCH %s flags %d\n", rel, flags);
        }
        /* streaming gives the same text where it is valid UTF-8 (elsewhere U+FFFD, checked valid) */
        size_t slen;
        char *streamed = stream_detok(t, want, n_want, &slen);
        if (valid_utf8((const uint8_t *)det, dlen)) {
            if (slen != dlen || memcmp(streamed, det, dlen) != 0) {
                if (r.piece_mismatch++ < 8) fprintf(stderr, "STREAM MISMATCH %s flags %d\n", rel, flags);
            }
            r.stream_checked++;
        }
        free(streamed);
        free(cat);
        free(ids);
        free(want);
        free(text);
        free(det);
    }
    free(data);
    return r;
}

static void test_gemma3_matches_llamacpp(void **state) {
    (void)state;
    char mpath[4096];
    if (!gm_test_model_path(mpath, sizeof mpath)) {
        fprintf(stderr, "SKIP: Gemma 3 model not found (set GEMMAC_MODEL)\n");
        skip();
    }
    gm_gguf *g;
    gm_error err;
    assert_int_equal(gm_gguf_open(mpath, &g, &err), GEMMAC_OK);
    gm_tokenizer *t;
    gemmac_status st = gm_tokenizer_from_gguf(g, &t, &err);
    if (st) fail_msg("%s", err.msg);
    assert_int_equal(gm_tokenizer_kind(t), GM_TOK_SPM);
    assert_int_equal(gm_tokenizer_n_tokens(t), 262144);
    assert_int_equal(gm_tokenizer_bos(t), 2);
    assert_int_equal(gm_tokenizer_eos(t), 1);
    assert_int_equal(gm_tokenizer_eot(t), 106);
    assert_true(gm_token_is_eog(t, 1) && gm_token_is_eog(t, 106) && !gm_token_is_eog(t, 2));
    fixture_result r = run_fixture(t, "tests/golden/gemma3_tokenizer.tsv");
    fprintf(stderr, "gemma3 vs llama.cpp: %d cases, %d id mismatches, %d text mismatches, %d streamed\n", r.cases,
            r.id_mismatch, r.piece_mismatch, r.stream_checked);
    assert_true(r.cases > 400);
    assert_int_equal(r.id_mismatch, 0);
    assert_int_equal(r.piece_mismatch, 0);
    gm_tokenizer_free(t);
    gm_gguf_close(g);
}

static gm_tokenizer *load_gemma4_fixture(gm_gguf **g) {
    char path[4096];
    gm_error err;
    gemmac_status st = gm_gguf_open(gm_test_source_path("tests/golden/gemma4_vocab.gguf", path, sizeof path), g, &err);
    if (st) fail_msg("%s: %s", path, err.msg);
    gm_tokenizer *t;
    if ((st = gm_tokenizer_from_gguf(*g, &t, &err))) fail_msg("%s", err.msg);
    return t;
}

static void test_gemma4_matches_hf(void **state) {
    (void)state;
    gm_gguf *g;
    gm_tokenizer *t = load_gemma4_fixture(&g);
    assert_int_equal(gm_tokenizer_kind(t), GM_TOK_BPE_GEMMA4);
    assert_true(gm_tokenizer_add_bos(t));
    assert_int_equal(gm_tokenizer_bos(t), 2);
    assert_int_equal(gm_tokenizer_eot(t), 106);  /* found by text: <turn|> */
    assert_true(gm_token_is_eog(t, 1) && gm_token_is_eog(t, 106) && gm_token_is_eog(t, 50));
    assert_false(gm_token_is_eog(t, 105));
    fixture_result r = run_fixture(t, "tests/golden/gemma4_tokenizer.tsv");
    fprintf(stderr, "gemma4-style vs HF tokenizers: %d cases, %d id mismatches, %d text mismatches\n", r.cases,
            r.id_mismatch, r.piece_mismatch);
    assert_true(r.cases > 150);
    assert_int_equal(r.id_mismatch, 0);
    assert_int_equal(r.piece_mismatch, 0);
    /* user-defined tokens render as written, control tokens (and <|tool_response>, made control) as "" */
    size_t len;
    assert_memory_equal(gm_token_piece(t, 100, &len), "<|channel>", 10);
    assert_int_equal(len, 10);
    gm_token_piece(t, 50, &len);
    assert_int_equal(len, 0);
    gm_token_piece(t, 105, &len);
    assert_int_equal(len, 0);
    /* a rendered chat tokenizes with one BOS and whole turn markers when parsed as the header says */
    const gemmac_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "hi"}};
    char chat[256];
    size_t clen;
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA4, msgs, 2, true, chat, sizeof chat, &clen), GEMMAC_OK);
    size_t n;
    gemmac_token *ids = tok(t, chat, clen, SPECIAL, &n);
    assert_true(n > 8);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 105);
    size_t last_turn = 0, n_bos = 0;
    for (size_t i = 0; i < n; i++) {
        n_bos += ids[i] == 2;
        if (ids[i] == 105) last_turn = i;
    }
    assert_int_equal(n_bos, 1);
    char tail[64];  /* what follows the last <|turn> renders as "model\n" */
    size_t tl = 0;
    for (size_t i = last_turn + 1; i < n && tl < 32; i++) {
        const char *p = gm_token_piece(t, ids[i], &len);
        memcpy(tail + tl, p, len < 16 ? len : 16);
        tl += len < 16 ? len : 16;
    }
    assert_int_equal(tl, 6);
    assert_memory_equal(tail, "model\n", 6);
    free(ids);
    gm_tokenizer_free(t);
    gm_gguf_close(g);
}

/* ---------------------------------------------------------------------------------------------------- */
/* hand-built vocabularies                                                                               */

typedef struct entry {
    const char *text;
    int32_t type;
    float score;
} entry;

/* entries, then the 256 byte tokens <0x00>.. (ids n .. n+255) */
typedef struct vocab {
    gm_str *toks;
    float *scores;
    int32_t *types;
    gm_str *merges;
    char bytes[256][7];
    gm_vocab_desc d;
} vocab;

static vocab *make_vocab(gm_tok_kind kind, const entry *e, uint32_t n, const char *const *merges, uint32_t n_merges) {
    vocab *v = calloc(1, sizeof *v);
    uint32_t total = n + 256;
    v->toks = calloc(total, sizeof *v->toks);
    v->scores = calloc(total, sizeof *v->scores);
    v->types = calloc(total, sizeof *v->types);
    v->merges = calloc(n_merges + 1, sizeof *v->merges);
    for (uint32_t i = 0; i < n; i++) {
        v->toks[i] = (gm_str){e[i].text, strlen(e[i].text)};
        v->scores[i] = e[i].score;
        v->types[i] = e[i].type;
    }
    for (int b = 0; b < 256; b++) {
        snprintf(v->bytes[b], sizeof v->bytes[b], "<0x%02X>", b);
        v->toks[n + (uint32_t)b] = (gm_str){v->bytes[b], 6};
        v->types[n + (uint32_t)b] = GM_TOKTYPE_BYTE;
    }
    for (uint32_t i = 0; i < n_merges; i++) v->merges[i] = (gm_str){merges[i], strlen(merges[i])};
    v->d = (gm_vocab_desc){.kind = kind, .n_tokens = total, .tokens = v->toks, .scores = v->scores,
                           .token_types = v->types, .n_merges = n_merges, .merges = v->merges,
                           .bos = 2, .eos = 1, .eot = 5, .unk = 3, .pad = 0, .add_bos = true};
    return v;
}

static void free_vocab(vocab *v) {
    free(v->toks);
    free(v->scores);
    free(v->types);
    free(v->merges);
    free(v);
}

enum { N_SPM = 16 };
static const entry k_spm[N_SPM] = {
    {"<pad>", 3, 0}, {"<eos>", 3, 0}, {"<bos>", 3, 0}, {"<unk>", 3, 0},                /* 0-3 */
    {"<start_of_turn>", 3, 0}, {"<end_of_turn>", 3, 0}, {"\n\n", 4, 0},                /* 4-6 */
    {"\xe2\x96\x81", 1, -1}, {"a", 1, -2}, {"b", 1, -3}, {"ab", 1, -5},                 /* 7-10 */
    {"\xe2\x96\x81" "a", 1, -6}, {"\xe2\x96\x81" "ab", 1, -0.5f}, {"aa", 1, -10},       /* 11-13 */
    {"\xc3\xa9", 1, -7}, {"</s>", 4, 0},                                                /* 14-15 */
};
#define BYTE(b) (N_SPM + (b))

static gm_tokenizer *spm_tokenizer(bool space_prefix) {
    vocab *v = make_vocab(GM_TOK_SPM, k_spm, N_SPM, NULL, 0);
    v->d.add_space_prefix = space_prefix;
    gm_tokenizer *t;
    gm_error err;
    if (gm_tokenizer_new(&v->d, &t, &err)) fail_msg("%s", err.msg);
    free_vocab(v);  /* the tokenizer copied everything */
    return t;
}

static void test_spm_merges_and_fallback(void **state) {
    (void)state;
    gm_tokenizer *t = spm_tokenizer(false);
    EXPECT_IDS(t, "ab", 0, 10);
    EXPECT_IDS(t, " ab", 0, 12);                 /* "ab" (-5) merges first, then "▁ab" (-0.5) */
    EXPECT_IDS(t, "aab", 0, 8, 10);              /* "ab" (-5) beats "aa" (-10) */
    EXPECT_IDS(t, "aa", 0, 13);
    EXPECT_IDS(t, "z", 0, BYTE('z'));            /* byte fallback */
    EXPECT_IDS(t, "\xe4\xb8\xad", 0, BYTE(0xE4), BYTE(0xB8), BYTE(0xAD));
    EXPECT_IDS(t, "\xc3\xa9", 0, 14);
    EXPECT_IDS(t, "ab", ADD_BOS, 2, 10);
    EXPECT_IDS(t, "a b", 0, 8, 7, 9);            /* neither "a▁" nor "▁b" is a token */
    gm_tokenizer_free(t);
}

static void test_spm_invalid_utf8(void **state) {
    (void)state;
    gm_tokenizer *t = spm_tokenizer(false);
    /* llama.cpp takes a lead byte's announced length whatever follows: 0xFF announces 4 bytes, so
     * "\xff" "ab" is one 3-byte symbol, no token, three byte tokens (the "ab" never merges) */
    EXPECT_IDS(t, "\xff" "ab", 0, BYTE(0xFF), BYTE('a'), BYTE('b'));
    EXPECT_IDS(t, "\x80" "ab", 0, BYTE(0x80), 10); /* a continuation byte stands alone */
    EXPECT_IDS(t, "\xc3", 0, BYTE(0xC3));
    size_t n;
    gemmac_token *ids = tok(t, "a\0b", 3, 0, &n);  /* NUL is an ordinary byte */
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], BYTE(0));
    free(ids);
    gm_tokenizer_free(t);
}

static void test_spm_empty_and_prefix(void **state) {
    (void)state;
    gm_tokenizer *t = spm_tokenizer(false);
    size_t n = 99;
    assert_int_equal(gm_tokenize(t, "", 0, 0, NULL, 0, &n), GEMMAC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(gm_tokenize(t, NULL, 0, 0, NULL, 0, &n), GEMMAC_OK);
    EXPECT_IDS(t, "", ADD_BOS, 2);
    gm_tokenizer_free(t);
    t = spm_tokenizer(true);  /* add_space_prefix: a space before the first fragment and after specials */
    EXPECT_IDS(t, "ab", 0, 12);
    EXPECT_IDS(t, "ab<start_of_turn>ab", SPECIAL, 12, 4, 12);
    gm_tokenizer_free(t);
}

static void test_special_tokens(void **state) {
    (void)state;
    gm_tokenizer *t = spm_tokenizer(false);
    EXPECT_IDS(t, "<start_of_turn>ab<end_of_turn>", SPECIAL, 4, 10, 5);
    EXPECT_IDS(t, "<bos>", SPECIAL, 2);
    EXPECT_IDS(t, "<bos>", SPECIAL | ADD_BOS, 2, 2);  /* as llama.cpp: two BOS */
    /* without parse_special the control text is ordinary text */
    EXPECT_IDS(t, "<bos>", 0, BYTE('<'), 9, BYTE('o'), BYTE('s'), BYTE('>'));
    /* user-defined tokens are matched in both modes */
    EXPECT_IDS(t, "ab\n\nab", 0, 10, 6, 10);
    EXPECT_IDS(t, "ab\n\nab", SPECIAL, 10, 6, 10);
    EXPECT_IDS(t, "\n\n\n\n\n", 0, 6, 6, BYTE('\n'));
    /* llama.cpp makes the user-defined "</s>" a control token (it is on its end-of-generation list) */
    EXPECT_IDS(t, "</s>", SPECIAL, 15);
    EXPECT_IDS(t, "</s>", 0, BYTE('<'), BYTE('/'), BYTE('s'), BYTE('>'));
    size_t len;
    gm_token_piece(t, 15, &len);
    assert_int_equal(len, 0);
    gm_tokenizer_free(t);
}

/* llama.cpp takes special tokens longest first over the whole text, not leftmost first. */
static void test_special_length_priority(void **state) {
    (void)state;
    static const entry e[] = {
        {"<pad>", 3, 0}, {"<eos>", 3, 0}, {"<bos>", 3, 0}, {"<unk>", 3, 0}, {"bcd", 3, 0}, {"ab", 3, 0},
        {"x", 4, 0}, {"xx", 4, 0}, {"xxx", 4, 0}, {"a", 1, 0}, {"c", 1, 0}, {"d", 1, 0},
    };
    vocab *v = make_vocab(GM_TOK_SPM, e, 12, NULL, 0);
    gm_tokenizer *t;
    gm_error err;
    assert_int_equal(gm_tokenizer_new(&v->d, &t, &err), GEMMAC_OK);
    free_vocab(v);
    EXPECT_IDS(t, "abcd", SPECIAL, 9, 4);      /* "bcd" wins over the leftmost "ab" */
    /* without parse_special: as llama.cpp, SPM merges may form any token text, control ones included */
    EXPECT_IDS(t, "abcd", 0, 5, 10, 11);
    EXPECT_IDS(t, "abcdab", SPECIAL, 9, 4, 5);
    EXPECT_IDS(t, "xxxxxxx", 0, 8, 8, 6);      /* 3 + 3 + 1 */
    EXPECT_IDS(t, "xxxxx", 0, 8, 7);
    gm_tokenizer_free(t);
}

enum { N_BPE = 12 };
static const entry k_bpe[N_BPE] = {
    {"<pad>", 3, 0}, {"<eos>", 3, 0}, {"<bos>", 3, 0}, {"<unk>", 3, 0}, {"<|turn>", 3, 0}, {"<turn|>", 3, 0},
    {"\xe2\x96\x81", 1, 0}, {"a", 1, 0}, {"b", 1, 0}, {"ab", 1, 0}, {"\xe2\x96\x81" "ab", 1, 0},
    {"\n\n", 1, 0},
};
#define BBYTE(b) (N_BPE + (b))

static void test_bpe_gemma4_rules(void **state) {
    (void)state;
    static const char *const merges[] = {"a b", "\xe2\x96\x81 ab"};
    vocab *v = make_vocab(GM_TOK_BPE_GEMMA4, k_bpe, N_BPE, merges, 2);
    gm_tokenizer *t;
    gm_error err;
    if (gm_tokenizer_new(&v->d, &t, &err)) fail_msg("%s", err.msg);
    free_vocab(v);
    EXPECT_IDS(t, "ab ab", 0, 9, 10);
    EXPECT_IDS(t, "ab", ADD_BOS, 2, 9);
    EXPECT_IDS(t, "ba", 0, 8, 7);
    EXPECT_IDS(t, "\n\n", 0, 11);                       /* a newline run that is a token stays whole */
    EXPECT_IDS(t, "\n\n\n", 0, BBYTE('\n'), BBYTE('\n'), BBYTE('\n')); /* otherwise by characters */
    EXPECT_IDS(t, "a\n\nb", 0, 7, 11, 8);
    EXPECT_IDS(t, "<|turn>ab", SPECIAL, 4, 9);
    /* invalid UTF-8 is decoded first, as llama.cpp: a bad byte is U+FFFD (EF BF BD), overlongs decode */
    EXPECT_IDS(t, "\xff", 0, BBYTE(0xEF), BBYTE(0xBF), BBYTE(0xBD));
    EXPECT_IDS(t, "\xc0\xaf", 0, BBYTE('/'));
    EXPECT_IDS(t, "\xe4\xb8", 0, BBYTE(0xEF), BBYTE(0xBF), BBYTE(0xBD), BBYTE(0xEF), BBYTE(0xBF), BBYTE(0xBD));
    EXPECT_IDS(t, "\xf4\x90\x80\x80", 0, BBYTE(0xEF), BBYTE(0xBF), BBYTE(0xBD)); /* > U+10FFFF */
    gm_tokenizer_free(t);
}

static void test_buffer_too_small(void **state) {
    (void)state;
    gm_tokenizer *t = spm_tokenizer(false);
    gemmac_token ids[2] = {-7, -7};
    size_t n = 0;
    assert_int_equal(gm_tokenize(t, "ab z ab", 7, ADD_BOS, ids, 1, &n), GEMMAC_ERR_BUFFER_TOO_SMALL);
    assert_true(n > 1);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], -7);              /* nothing past cap */
    gemmac_token *all = malloc(n * sizeof *all);
    size_t n2;
    assert_int_equal(gm_tokenize(t, "ab z ab", 7, ADD_BOS, all, n, &n2), GEMMAC_OK);
    assert_int_equal(n2, n);
    free(all);
    assert_int_equal(gm_tokenize(t, "ab", 2, 0, NULL, 5, &n), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_tokenize(t, NULL, 5, 0, NULL, 0, &n), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_tokenize(t, "ab", 2, 0, NULL, 0, NULL), GEMMAC_ERR_INVALID_ARG);
    gm_tokenizer_free(t);
}

static void test_pieces_and_ids(void **state) {
    (void)state;
    gm_tokenizer *t = spm_tokenizer(false);
    size_t len;
    assert_memory_equal(gm_token_piece(t, 12, &len), " ab", 3);
    assert_int_equal(len, 3);
    assert_memory_equal(gm_token_piece(t, BYTE('A'), &len), "A", 1);
    assert_memory_equal(gm_token_piece(t, BYTE(0), &len), "\0", 1);
    assert_int_equal(len, 1);
    gm_token_piece(t, 2, &len);
    assert_int_equal(len, 0);                  /* control */
    assert_memory_equal(gm_token_piece(t, 6, &len), "\n\n", 2); /* user-defined as written */
    assert_null(gm_token_piece(t, -1, &len));
    assert_null(gm_token_piece(t, (gemmac_token)gm_tokenizer_n_tokens(t), &len));
    assert_null(gm_token_piece(t, INT32_MAX, NULL));
    assert_true(gm_token_is_eog(t, 1) && gm_token_is_eog(t, 5));
    assert_false(gm_token_is_eog(t, 0) || gm_token_is_eog(t, -1) || gm_token_is_eog(t, 1 << 30));
    assert_int_equal(gm_token_find(t, "ab", 2), 10);
    assert_int_equal(gm_token_find(t, "zz", 2), -1);
    gm_tokenizer_free(t);
}

/* ---------------------------------------------------------------------------------------------------- */
/* streaming detokenizer                                                                                 */

static void push_expect(gm_detok *d, gemmac_token id, const char *want, size_t want_len) {
    char out[64];
    size_t n;
    assert_int_equal(gm_detok_push(d, id, out, sizeof out, &n), GEMMAC_OK);
    assert_int_equal(n, want_len);
    assert_memory_equal(out, want, want_len);
    assert_int_equal(out[n], '\0');
}

static void test_detok_split_characters(void **state) {
    (void)state;
    gm_tokenizer *t = spm_tokenizer(false);
    gm_detok *d = gm_detok_new(t);
    push_expect(d, 8, "a", 1);
    push_expect(d, BYTE(0xE4), "", 0);         /* 中 = E4 B8 AD arrives byte by byte */
    push_expect(d, BYTE(0xB8), "", 0);
    push_expect(d, BYTE(0xAD), "\xe4\xb8\xad", 3);
    push_expect(d, BYTE(0xF0), "", 0);         /* 😀 = F0 9F 98 80 */
    push_expect(d, BYTE(0x9F), "", 0);
    push_expect(d, BYTE(0x98), "", 0);
    push_expect(d, BYTE(0x80), "\xf0\x9f\x98\x80", 4);
    push_expect(d, BYTE(0xFF), "\xef\xbf\xbd", 3);                 /* never valid */
    push_expect(d, BYTE(0xE4), "", 0);
    push_expect(d, 8, "\xef\xbf\xbd" "a", 4);                      /* an interrupted sequence */
    push_expect(d, BYTE(0xE0), "", 0);
    push_expect(d, BYTE(0x80), "\xef\xbf\xbd\xef\xbf\xbd", 6);     /* E0 80: overlong, two subparts */
    push_expect(d, BYTE(0xED), "", 0);
    push_expect(d, BYTE(0xA0), "\xef\xbf\xbd\xef\xbf\xbd", 6);     /* surrogate */
    push_expect(d, BYTE(0xC3), "", 0);
    push_expect(d, 12, "\xef\xbf\xbd ab", 6);
    push_expect(d, BYTE(0xF0), "", 0);
    push_expect(d, BYTE(0x9F), "", 0);
    char out[8];
    size_t n;
    assert_int_equal(gm_detok_flush(d, out, sizeof out, &n), GEMMAC_OK);  /* incomplete → one U+FFFD */
    assert_int_equal(n, 3);
    assert_memory_equal(out, "\xef\xbf\xbd", 4);
    assert_int_equal(gm_detok_flush(d, out, sizeof out, &n), GEMMAC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(gm_detok_push(d, -1, out, sizeof out, &n), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_detok_push(d, 1 << 30, out, sizeof out, &n), GEMMAC_ERR_INVALID_ARG);
    gm_detok_free(d);
    gm_tokenizer_free(t);
}

static void test_detok_buffer_too_small(void **state) {
    (void)state;
    gm_tokenizer *t = spm_tokenizer(false);
    gm_detok *d = gm_detok_new(t);
    push_expect(d, BYTE(0xE4), "", 0);
    push_expect(d, BYTE(0xB8), "", 0);
    char out[3];
    size_t n;
    assert_int_equal(gm_detok_push(d, BYTE(0xAD), out, sizeof out, &n), GEMMAC_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 3);
    push_expect(d, BYTE(0xAD), "\xe4\xb8\xad", 3);  /* nothing was consumed by the failed call */
    gm_detok_free(d);
    gm_tokenizer_free(t);
}

/* ---------------------------------------------------------------------------------------------------- */
/* hostile vocabularies                                                                                  */

static gemmac_status build_with(vocab *v, gm_error *err) {
    gm_tokenizer *t = (gm_tokenizer *)1;
    gemmac_status st = gm_tokenizer_new(&v->d, &t, err);
    if (st == GEMMAC_OK) gm_tokenizer_free(t);
    else assert_null(t);
    return st;
}

static void test_hostile_descs(void **state) {
    (void)state;
    gm_error err;
    static const char *const bad_bytes[] = {"<0xZZ>", "<0x4>", "<0x-1>", "<0x411>", "0x41>", "<0x4G>", ""};
    for (size_t i = 0; i < sizeof bad_bytes / sizeof *bad_bytes; i++) {
        vocab *v = make_vocab(GM_TOK_SPM, k_spm, N_SPM, NULL, 0);
        v->toks[5] = (gm_str){bad_bytes[i], strlen(bad_bytes[i])};
        v->types[5] = GM_TOKTYPE_BYTE;
        assert_int_equal(build_with(v, &err), GEMMAC_ERR_BAD_FILE);
        assert_non_null(strstr(err.msg, "byte token"));
        free_vocab(v);
    }
    vocab *v = make_vocab(GM_TOK_SPM, k_spm, N_SPM, NULL, 0);
    v->toks[9] = v->toks[8];                    /* duplicate text */
    assert_int_equal(build_with(v, &err), GEMMAC_ERR_BAD_FILE);
    assert_non_null(strstr(err.msg, "duplicate"));
    free_vocab(v);
    int32_t bad_ids[] = {-2, 1 << 30, N_SPM + 256};
    for (size_t i = 0; i < 3; i++) {
        v = make_vocab(GM_TOK_SPM, k_spm, N_SPM, NULL, 0);
        v->d.eos = bad_ids[i];
        assert_int_equal(build_with(v, &err), GEMMAC_ERR_BAD_FILE);
        free_vocab(v);
    }
    v = make_vocab(GM_TOK_SPM, k_spm, N_SPM, NULL, 0);
    v->d.bos = -1;                              /* add_bos without a bos */
    assert_int_equal(build_with(v, &err), GEMMAC_ERR_BAD_FILE);
    v->d.add_bos = false;
    assert_int_equal(build_with(v, &err), GEMMAC_OK);
    v->d.kind = (gm_tok_kind)7;
    assert_int_equal(build_with(v, &err), GEMMAC_ERR_INVALID_ARG);
    free_vocab(v);
    /* empty texts become "[EMPTY_<id>]" (llama.cpp) and unknown types render as nothing */
    v = make_vocab(GM_TOK_SPM, k_spm, N_SPM, NULL, 0);
    v->toks[9] = (gm_str){"", 0};
    v->types[8] = 77;
    gm_tokenizer *t;
    assert_int_equal(gm_tokenizer_new(&v->d, &t, &err), GEMMAC_OK);
    assert_int_equal(gm_token_find(t, "[EMPTY_9]", 9), 9);
    size_t len;
    gm_token_piece(t, 8, &len);
    assert_int_equal(len, 0);
    EXPECT_IDS(t, "b", 0, BYTE('b'));
    gm_tokenizer_free(t);
    free_vocab(v);
    /* merges without a space, or with odd spacing, are accepted and never match */
    static const char *const odd[] = {"ab", "", " a", "a  b", "\xe2\x96\x81 ab"};
    v = make_vocab(GM_TOK_BPE_GEMMA4, k_bpe, N_BPE, odd, 5);
    assert_int_equal(gm_tokenizer_new(&v->d, &t, &err), GEMMAC_OK);
    EXPECT_IDS(t, "ab", 0, 7, 8);
    gm_tokenizer_free(t);
    free_vocab(v);
    assert_int_equal(gm_tokenizer_new(NULL, &t, &err), GEMMAC_ERR_INVALID_ARG);
}

/* A valid small SPM vocabulary in a GGUF, with the tokenizer keys given by the flags below. */
enum {
    G_SCORES_I32 = 1 << 0, G_SCORES_SHORT = 1 << 1, G_TYPES_U8 = 1 << 2, G_TYPES_SHORT = 1 << 3,
    G_TOKENS_I32 = 1 << 4, G_BOS_OOR = 1 << 5, G_BAD_BYTE = 1 << 6, G_MODEL_GPT2 = 1 << 7,
    G_GEMMA4_NO_MERGES = 1 << 8, G_NO_MODEL = 1 << 9, G_ADD_BOS_U32 = 1 << 10, G_NO_TOKENS = 1 << 11,
    G_SCORES_F64 = 1 << 12,
};

static gemmac_status load_built(unsigned flags, gm_error *err) {
    static const char *const toks[] = {"<pad>", "<eos>", "<bos>", "<unk>", "a", "b", "ab", "<0x41>"};
    const char *toks2[8];
    memcpy(toks2, toks, sizeof toks);
    if (flags & G_BAD_BYTE) toks2[7] = "<0xZZ>";
    float scores[8] = {0, 0, 0, 0, -1, -2, -3, 0};
    double scores64[8] = {0};
    int32_t iscores[8] = {0}, types[8] = {3, 3, 3, 3, 1, 1, 1, 6};
    uint8_t types8[8] = {3, 3, 3, 3, 1, 1, 1, 6};
    gm_gb *b = gm_gb_new();
    gm_gb_str(b, "general.architecture", flags & G_GEMMA4_NO_MERGES ? "gemma4" : "gemma3");
    if (!(flags & G_NO_MODEL))
        gm_gb_str(b, "tokenizer.ggml.model",
                  flags & G_MODEL_GPT2 ? "gpt2" : flags & G_GEMMA4_NO_MERGES ? "gemma4" : "llama");
    if (flags & G_TOKENS_I32)
        gm_gb_arr(b, "tokenizer.ggml.tokens", GM_GGUF_INT32, 8, types);
    else if (!(flags & G_NO_TOKENS))
        gm_gb_str_arr(b, "tokenizer.ggml.tokens", 8, toks2);
    if (flags & G_SCORES_I32)
        gm_gb_arr(b, "tokenizer.ggml.scores", GM_GGUF_INT32, 8, iscores);
    else if (flags & G_SCORES_F64)
        gm_gb_arr(b, "tokenizer.ggml.scores", GM_GGUF_FLOAT64, 8, scores64);
    else
        gm_gb_arr(b, "tokenizer.ggml.scores", GM_GGUF_FLOAT32, flags & G_SCORES_SHORT ? 7 : 8, scores);
    if (flags & G_TYPES_U8)
        gm_gb_arr(b, "tokenizer.ggml.token_type", GM_GGUF_UINT8, 8, types8);
    else
        gm_gb_arr(b, "tokenizer.ggml.token_type", GM_GGUF_INT32, flags & G_TYPES_SHORT ? 3 : 8, types);
    gm_gb_u32(b, "tokenizer.ggml.bos_token_id", flags & G_BOS_OOR ? 8 : 2);
    gm_gb_u32(b, "tokenizer.ggml.eos_token_id", 1);
    if (flags & G_ADD_BOS_U32)
        gm_gb_u32(b, "tokenizer.ggml.add_bos_token", 1);
    else
        gm_gb_bool(b, "tokenizer.ggml.add_bos_token", true);
    gm_gb_bool(b, "tokenizer.ggml.add_space_prefix", false);
    size_t size;
    uint8_t *file = gm_gb_write(b, &size);
    gm_gb_free(b);
    uint8_t *copy = malloc(size);  /* exactly sized, so ASan sees overreads */
    memcpy(copy, file, size);
    free(file);
    gm_gguf *g;
    gemmac_status st = gm_gguf_open_memory(copy, size, &g, err);
    if (st == GEMMAC_OK) {
        gm_tokenizer *t = (gm_tokenizer *)1;
        st = gm_tokenizer_from_gguf(g, &t, err);
        if (st == GEMMAC_OK) {
            size_t n;
            gemmac_token *ids = tok(t, "abA", 3, ADD_BOS, &n);
            assert_int_equal(n, 3);
            assert_int_equal(ids[0], 2);
            assert_int_equal(ids[1], 6);
            assert_int_equal(ids[2], 7);
            free(ids);
            gm_tokenizer_free(t);
        } else {
            assert_null(t);
        }
        gm_gguf_close(g);
    }
    free(copy);
    return st;
}

static void test_hostile_gguf(void **state) {
    (void)state;
    gm_error err;
    assert_int_equal(load_built(0, &err), GEMMAC_OK);
    static const struct { unsigned flags; gemmac_status st; const char *msg; } cases[] = {
        {G_SCORES_I32, GEMMAC_ERR_BAD_FILE, "scores"},
        {G_SCORES_F64, GEMMAC_ERR_BAD_FILE, "scores"},
        {G_SCORES_SHORT, GEMMAC_ERR_BAD_FILE, "scores"},
        {G_TYPES_U8, GEMMAC_ERR_BAD_FILE, "token_type"},
        {G_TYPES_SHORT, GEMMAC_ERR_BAD_FILE, "token_type"},
        {G_TOKENS_I32, GEMMAC_ERR_BAD_FILE, "tokens"},
        {G_NO_TOKENS, GEMMAC_ERR_BAD_FILE, "tokens"},
        {G_BOS_OOR, GEMMAC_ERR_BAD_FILE, "bos_token_id"},
        {G_BAD_BYTE, GEMMAC_ERR_BAD_FILE, "byte token"},
        {G_MODEL_GPT2, GEMMAC_ERR_UNSUPPORTED, "gpt2"},
        {G_GEMMA4_NO_MERGES, GEMMAC_ERR_BAD_FILE, "merges"},
        {G_NO_MODEL, GEMMAC_ERR_BAD_FILE, "tokenizer.ggml.model"},
        {G_ADD_BOS_U32, GEMMAC_ERR_BAD_FILE, "add_bos_token"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gm_error_clear(&err);
        gemmac_status st = load_built(cases[i].flags, &err);
        if (st != cases[i].st || !strstr(err.msg, cases[i].msg))
            fail_msg("case %zu: status %d \"%s\", want %d with \"%s\"", i, st, err.msg, cases[i].st, cases[i].msg);
    }
}

/* ---------------------------------------------------------------------------------------------------- */
/* cost of long inputs                                                                                   */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void time_inputs(const gm_tokenizer *t, const char *name) {
    const size_t n = 1 << 20;
    char *s = malloc(n);
    static const char *const patterns[] = {"a", " ", "\n", "\t", "<unused1", "<start_of_turn", "\xe4\xb8\xad",
                                           "\xff", "ab ", "<|turn>", "<0x", "                              x"};
    const double limit = GM_SANITIZED ? 8.0 : 1.0;  /* seconds; sanitizers make this 3-5x slower */
    for (size_t p = 0; p < sizeof patterns / sizeof *patterns; p++) {
        size_t pl = strlen(patterns[p]);
        for (size_t i = 0; i < n; i++) s[i] = patterns[p][i % pl];
        for (int flags = 0; flags <= 3; flags += 3) {
            double t0 = now_s();
            size_t count;
            gemmac_status st = gm_tokenize(t, s, n, flags, NULL, 0, &count);
            double dt = now_s() - t0;
            assert_true(st == GEMMAC_ERR_BUFFER_TOO_SMALL || st == GEMMAC_OK);
            if (dt > 0.2) fprintf(stderr, "%s: 1 MiB of \"%s\" flags %d: %.3f s, %zu tokens\n", name, patterns[p], flags, dt, count);
            if (dt > limit) fail_msg("%s: 1 MiB of pattern %zu took %.2f s", name, p, dt);
        }
    }
    free(s);
}

static void test_long_inputs(void **state) {
    (void)state;
    gm_gguf *g;
    gm_tokenizer *t = load_gemma4_fixture(&g);
    time_inputs(t, "gemma4-style");
    gm_tokenizer_free(t);
    gm_gguf_close(g);
    t = spm_tokenizer(false);
    time_inputs(t, "small spm");
    gm_tokenizer_free(t);
    char mpath[4096];
    gm_error err;
    if (gm_test_model_path(mpath, sizeof mpath) && gm_gguf_open(mpath, &g, &err) == GEMMAC_OK) {
        assert_int_equal(gm_tokenizer_from_gguf(g, &t, &err), GEMMAC_OK);
        time_inputs(t, "gemma3");
        gm_tokenizer_free(t);
        gm_gguf_close(g);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_merges_and_fallback),
        cmocka_unit_test(test_spm_invalid_utf8),
        cmocka_unit_test(test_spm_empty_and_prefix),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_special_length_priority),
        cmocka_unit_test(test_bpe_gemma4_rules),
        cmocka_unit_test(test_buffer_too_small),
        cmocka_unit_test(test_pieces_and_ids),
        cmocka_unit_test(test_detok_split_characters),
        cmocka_unit_test(test_detok_buffer_too_small),
        cmocka_unit_test(test_hostile_descs),
        cmocka_unit_test(test_hostile_gguf),
        cmocka_unit_test(test_gemma4_matches_hf),
        cmocka_unit_test(test_gemma3_matches_llamacpp),
        cmocka_unit_test(test_long_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
