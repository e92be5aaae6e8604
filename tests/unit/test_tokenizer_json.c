/* test_tokenizer_json.c: Hugging Face tokenizer.json loading (src/tok/tokenizer_json.c).
 *   - Gemma-3-style tokenizer.json (gemma3_hf_tokenizer.json, make_hf_tokenizer_fixtures.py) against the ids
 *     HF `tokenizers` computes (gemma3_hf_tokenizer.tsv), through the SentencePiece tokenizer with scores
 *     derived from the merge ranks.
 *   - Gemma-4-style tokenizer.json (gemma4_tokenizer.json) against gemma4_tokenizer.tsv (also HF), and
 *     against the same vocabulary loaded from GGUF (gemma4_vocab.gguf).
 *   - Side files (tokenizer_config.json, generation_config.json), merges as strings and as pairs, kind hints,
 *     malformed files (each with its message), a model directory with / without / with a broken
 *     tokenizer.json, and the CLI on a model without a tokenizer ($GEMMAC_CLI).
 *   - A real Gemma 3 tokenizer.json, when $GEMMAC_GEMMA3_TOKENIZER_JSON names one, against llama.cpp's ids
 *     for the real GGUF (gemma3_tokenizer.tsv). */
#include <fcntl.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gemmac.h"
#include "io/gguf.h"
#include "test_paths.h"
#include "tok/tokenizer.h"

extern char **environ;

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

static bool write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

static bool write_text(const char *path, const char *s) { return write_file(path, s, strlen(s)); }

static bool copy_file(const char *from, const char *to) {
    size_t n;
    char *d = read_all(from, &n);
    bool ok = d && write_file(to, d, n);
    free(d);
    return ok;
}

static int hexval(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

static size_t unhex(const char *s, size_t n, char *out) {
    for (size_t i = 0; i + 1 < n; i += 2) out[i / 2] = (char)(hexval(s[i]) * 16 + hexval(s[i + 1]));
    return n / 2;
}

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

/* Streams ids through a detokenizer; returns the malloc'd text (length in *n). */
static char *stream_detok(const gm_tokenizer *t, const gemmac_token *ids, size_t n_ids, size_t *n) {
    gm_detok *d = gm_detok_new(t);
    assert_non_null(d);
    size_t cap = GM_DETOK_SLACK + 3 * gm_tokenizer_max_piece(t) + 16, total = 0;
    char *chunk = malloc(cap), *all = malloc(cap * (n_ids + 1) + 1);
    for (size_t i = 0; i <= n_ids; i++) {
        size_t got;
        if (i < n_ids) assert_int_equal(gm_detok_push(d, ids[i], chunk, cap, &got), GEMMAC_OK);
        else assert_int_equal(gm_detok_flush(d, chunk, cap, &got), GEMMAC_OK);
        memcpy(all + total, chunk, got);
        total += got;
    }
    gm_detok_free(d);
    free(chunk);
    *n = total;
    return all;
}

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

typedef struct fixture_result {
    int cases, id_mismatch, piece_mismatch, roundtrips;
} fixture_result;

/* Every line of a tsv fixture (hex(text) flags ids hex(pieces)) against t: the ids, the pieces of the
 * expected ids, the streaming detokenizer, and (plain text, no specials) the text coming back whole. */
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
                fprintf(stderr, "MISMATCH %s flags %d text '%.*s'\n  want", rel, flags, (int)(tlen > 60 ? 60 : tlen),
                        text);
                for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
                fprintf(stderr, "\n  got ");
                for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
                fprintf(stderr, "\n");
            }
        }
        char *cat = malloc(gm_tokenizer_max_piece(t) * n_want + 1);
        size_t clen = 0;
        for (size_t i = 0; i < n_want; i++) {
            size_t pl;
            const char *p = gm_token_piece(t, want[i], &pl);
            assert_non_null(p);
            memcpy(cat + clen, p, pl);
            clen += pl;
        }
        if (clen != dlen || memcmp(cat, det, dlen) != 0)
            if (r.piece_mismatch++ < 8) fprintf(stderr, "PIECES MISMATCH %s flags %d\n", rel, flags);
        size_t slen;
        char *streamed = stream_detok(t, want, n_want, &slen);
        if (valid_utf8((const uint8_t *)det, dlen) && (slen != dlen || memcmp(streamed, det, dlen) != 0))
            if (r.piece_mismatch++ < 8) fprintf(stderr, "STREAM MISMATCH %s flags %d\n", rel, flags);
        /* without special parsing, valid text comes back as it went in (unless it holds a literal U+2581,
         * which renders as a space) */
        if (flags == 0 && valid_utf8((const uint8_t *)text, tlen) && !memmem(text, tlen, "\xe2\x96\x81", 3)) {
            size_t rl;
            char *back = stream_detok(t, ids, n, &rl);
            if (rl != tlen || memcmp(back, text, tlen) != 0) {
                if (r.piece_mismatch++ < 8) fprintf(stderr, "ROUND TRIP MISMATCH %s '%.*s'\n", rel, (int)tlen, text);
            } else {
                r.roundtrips++;
            }
            free(back);
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

static gm_tokenizer *load_json(const char *rel, int hint) {
    char path[4096];
    gm_tokenizer *t = NULL;
    gm_error err = {0};
    gemmac_status st = gm_tokenizer_from_hf_json(gm_test_source_path(rel, path, sizeof path), hint, &t, &err);
    if (st) fail_msg("%s: %s", path, err.msg);
    return t;
}

/* ---------------------------------------------------------------------------------------------------- */
/* the two Gemma styles against HF tokenizers                                                            */

static void test_gemma3_style_matches_hf(void **state) {
    (void)state;
    gm_tokenizer *t = load_json("tests/golden/gemma3_hf_tokenizer.json", GM_TOK_KIND_AUTO);
    assert_int_equal(gm_tokenizer_kind(t), GM_TOK_SPM);
    assert_int_equal(gm_tokenizer_bos(t), 2);
    assert_int_equal(gm_tokenizer_eos(t), 1);
    assert_int_equal(gm_tokenizer_eot(t), 106);
    assert_true(gm_tokenizer_add_bos(t));  /* the post_processor's "<bos> $A" */
    assert_true(gm_token_is_eog(t, 1) && gm_token_is_eog(t, 106) && !gm_token_is_eog(t, 105));
    fixture_result r = run_fixture(t, "tests/golden/gemma3_hf_tokenizer.tsv");
    fprintf(stderr, "gemma3-style tokenizer.json vs HF tokenizers: %d cases, %d id mismatches, %d text mismatches, "
            "%d round trips\n", r.cases, r.id_mismatch, r.piece_mismatch, r.roundtrips);
    assert_true(r.cases >= 400);
    assert_true(r.roundtrips >= 50);
    assert_int_equal(r.id_mismatch, 0);
    assert_int_equal(r.piece_mismatch, 0);
    /* specials: control tokens render as "", user-defined ones as written, bytes as their byte */
    size_t len;
    gm_token_piece(t, 105, &len);
    assert_int_equal(len, 0);
    const char *p = gm_token_piece(t, 108, &len);
    assert_int_equal(len, 7);
    assert_memory_equal(p, "<table>", 7);
    p = gm_token_piece(t, 238 + 'A', &len);
    assert_int_equal(len, 1);
    assert_int_equal(p[0], 'A');
    /* the chat template tokenizes with one BOS and whole turn markers */
    const gemmac_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "hi"}};
    char chat[256];
    size_t clen, n;
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA3, msgs, 2, true, chat, sizeof chat, &clen), GEMMAC_OK);
    gemmac_token *ids = tok(t, chat, clen, SPECIAL, &n);
    assert_true(n > 6);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 105);
    size_t n_bos = 0, n_eot = 0, last_sot = 0, last_eot = 0;
    for (size_t i = 0; i < n; i++) {
        n_bos += ids[i] == 2;
        n_eot += ids[i] == 106;
        if (ids[i] == 105) last_sot = i;
        if (ids[i] == 106) last_eot = i;
    }
    assert_int_equal(n_bos, 1);
    assert_int_equal(n_eot, 1);
    assert_true(last_sot > last_eot);  /* ... <end_of_turn>\n<start_of_turn>model\n */
    free(ids);
    /* the explicit hint is the same tokenizer */
    gm_tokenizer *t2 = load_json("tests/golden/gemma3_hf_tokenizer.json", GM_TOK_SPM);
    ids = tok(t2, "Hello world, caf\xc3\xa9!", 16, ADD_BOS, &n);
    size_t n1;
    gemmac_token *ids1 = tok(t, "Hello world, caf\xc3\xa9!", 16, ADD_BOS, &n1);
    assert_int_equal(n, n1);
    assert_memory_equal(ids, ids1, n * sizeof *ids);
    free(ids);
    free(ids1);
    gm_tokenizer_free(t2);
    gm_tokenizer_free(t);
}

static void test_gemma4_style_matches_hf_and_gguf(void **state) {
    (void)state;
    gm_tokenizer *t = load_json("tests/golden/gemma4_tokenizer.json", GM_TOK_KIND_AUTO);
    assert_int_equal(gm_tokenizer_kind(t), GM_TOK_BPE_GEMMA4);
    assert_true(gm_tokenizer_add_bos(t));
    assert_int_equal(gm_tokenizer_bos(t), 2);
    assert_int_equal(gm_tokenizer_eos(t), 1);
    assert_int_equal(gm_tokenizer_eot(t), 106);
    assert_true(gm_token_is_eog(t, 1) && gm_token_is_eog(t, 106) && gm_token_is_eog(t, 50));
    fixture_result r = run_fixture(t, "tests/golden/gemma4_tokenizer.tsv");
    fprintf(stderr, "gemma4-style tokenizer.json vs HF tokenizers: %d cases, %d id mismatches, %d text mismatches, "
            "%d round trips\n", r.cases, r.id_mismatch, r.piece_mismatch, r.roundtrips);
    assert_true(r.cases > 150);
    assert_int_equal(r.id_mismatch, 0);
    assert_int_equal(r.piece_mismatch, 0);

    /* the same vocabulary as the converted GGUF: texts, pieces and special ids agree token by token */
    char path[4096];
    gm_gguf *g;
    gm_error err;
    gemmac_status st = gm_gguf_open(gm_test_source_path("tests/golden/gemma4_vocab.gguf", path, sizeof path), &g, &err);
    if (st) fail_msg("%s", err.msg);
    gm_tokenizer *tg;
    if ((st = gm_tokenizer_from_gguf(g, &tg, &err))) fail_msg("%s", err.msg);
    assert_int_equal(gm_tokenizer_n_tokens(t), gm_tokenizer_n_tokens(tg));
    for (gemmac_token id = 0; id < (gemmac_token)gm_tokenizer_n_tokens(t); id++) {
        size_t a, b;
        const char *x = gm_token_text(t, id, &a), *y = gm_token_text(tg, id, &b);
        assert_int_equal(a, b);
        assert_memory_equal(x, y, a);
        x = gm_token_piece(t, id, &a);
        y = gm_token_piece(tg, id, &b);
        assert_int_equal(a, b);
        assert_memory_equal(x, y, a);
        assert_int_equal(gm_token_is_eog(t, id), gm_token_is_eog(tg, id));
    }
    assert_int_equal(gm_tokenizer_max_piece(t), gm_tokenizer_max_piece(tg));
    gm_tokenizer_free(tg);
    gm_gguf_close(g);

    const gemmac_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "hi"}};
    char chat[256];
    size_t clen, n;
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA4, msgs, 2, true, chat, sizeof chat, &clen), GEMMAC_OK);
    gemmac_token *ids = tok(t, chat, clen, SPECIAL, &n);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 105);
    size_t n_turn_end = 0;
    for (size_t i = 0; i < n; i++) n_turn_end += ids[i] == 106;
    assert_int_equal(n_turn_end, 2);
    free(ids);
    gm_tokenizer_free(t);
}

/* ---------------------------------------------------------------------------------------------------- */
/* hand-written files                                                                                    */

/* A small Gemma-3-like tokenizer.json; MERGES is spliced in, ADDED after the fixed added tokens. */
#define HEAD                                                                                                 \
    "{\"version\":\"1.0\",\"added_tokens\":["                                                                \
    "{\"id\":0,\"content\":\"<pad>\",\"special\":true},{\"id\":1,\"content\":\"<eos>\",\"special\":true},"    \
    "{\"id\":2,\"content\":\"<bos>\",\"special\":true},{\"id\":3,\"content\":\"<unk>\",\"special\":true},"    \
    "{\"id\":4,\"content\":\"<end_of_turn>\",\"special\":true,\"lstrip\":false,\"normalized\":false}"
#define NORM "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}"
#define VOCAB                                                                                                \
    "\"vocab\":{\"<pad>\":0,\"<eos>\":1,\"<bos>\":2,\"<unk>\":3,\"<end_of_turn>\":4,\"\xe2\x96\x81\":5,"       \
    "\"a\":6,\"b\":7,\"c\":8,\"ab\":9,\"bc\":10,\"abc\":11,\"\xe2\x96\x81" "a\":12,\"<0x0A>\":13}"
#define SMALL(added, norm, pre, model_extra, merges)                                                          \
    HEAD added "]," norm ",\"pre_tokenizer\":" pre ",\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,"    \
    "\"unk_token\":\"<unk>\"" model_extra "," VOCAB ",\"merges\":" merges "}}"
#define GOOD_MERGES "[\"a b\",\"b c\",\"ab c\",\"\xe2\x96\x81 a\"]"
#define GOOD SMALL("", NORM, "null", "", GOOD_MERGES)

static gm_tokenizer *parse_ok(const char *json, int hint) {
    gm_tokenizer *t = NULL;
    gm_error err = {0};
    gemmac_status st = gm_tokenizer_from_hf_json_text(json, strlen(json), "tokenizer.json", hint, &t, &err);
    if (st) fail_msg("status %s: %s", gemmac_status_str(st), err.msg);
    return t;
}

static void test_small_files(void **state) {
    (void)state;
    /* merges as "a b" strings and as ["a", "b"] pairs give the same tokenizer, for both kinds */
    const char *pairs = SMALL("", NORM, "null", "",
                              "[[\"a\",\"b\"],[\"b\",\"c\"],[\"ab\",\"c\"],[\"\xe2\x96\x81\",\"a\"]]");
    for (int kind = GM_TOK_SPM; kind <= GM_TOK_BPE_GEMMA4; kind++) {
        gm_tokenizer *a = parse_ok(GOOD, kind), *b = parse_ok(pairs, kind);
        const char *text = "abc abcab\nc <end_of_turn>";
        size_t na, nb;
        gemmac_token *ia = tok(a, text, strlen(text), SPECIAL | ADD_BOS, &na);
        gemmac_token *ib = tok(b, text, strlen(text), SPECIAL | ADD_BOS, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(ia, ib, na * sizeof *ia);
        /* <bos> abc ▁ abc ab <0x0A> c ▁ <end_of_turn>: a+b first everywhere, then ab+c; ▁+a never meets an
         * "a" of its own; '\n' by byte fallback */
        const gemmac_token want[] = {2, 11, 5, 11, 9, 13, 8, 5, 4};
        if (na != sizeof want / sizeof *want || memcmp(ia, want, sizeof want) != 0) {
            fprintf(stderr, "kind %d got", kind);
            for (size_t i = 0; i < na; i++) fprintf(stderr, " %d", ia[i]);
            fprintf(stderr, "\n");
            fail();
        }
        free(ia);
        free(ib);
        assert_int_equal(gm_tokenizer_eot(a), 4);
        size_t len;
        gm_token_piece(a, 3, &len);  /* <unk>: UNKNOWN, renders "" */
        assert_int_equal(len, 0);
        assert_int_equal(*gm_token_piece(a, 13, &len), '\n');
        gm_tokenizer_free(a);
        gm_tokenizer_free(b);
    }
    /* the no-op Split(" ") of transformers' Gemma files, and Prepend("▁") before Replace (SPM prefix space) */
    gm_tokenizer *t = parse_ok(SMALL("", NORM,
                                     "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"MergedWithPrevious\","
                                     "\"invert\":false}", "", GOOD_MERGES), GM_TOK_KIND_AUTO);
    assert_int_equal(gm_tokenizer_kind(t), GM_TOK_SPM);
    gm_tokenizer_free(t);
    t = parse_ok(SMALL("", "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":"
                       "\"\xe2\x96\x81\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]}",
                       "null", "", GOOD_MERGES), GM_TOK_KIND_AUTO);
    size_t n;
    gemmac_token *ids = tok(t, "a", 1, 0, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 12);  /* ▁a */
    free(ids);
    gm_tokenizer_free(t);
    /* the newline split infers Gemma 4; user-defined added tokens match in both modes */
    t = parse_ok(SMALL(",{\"id\":14,\"content\":\"<|tool>\",\"special\":false}", NORM,
                       "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[^\\n]+|[\\n]+\"},\"behavior\":\"Isolated\","
                       "\"invert\":false}", "", GOOD_MERGES), GM_TOK_KIND_AUTO);
    assert_int_equal(gm_tokenizer_kind(t), GM_TOK_BPE_GEMMA4);
    ids = tok(t, "a<|tool>", 8, 0, &n);
    assert_int_equal(n, 2);  /* no BOS without GEMMAC_TOKENIZE_ADD_BOS */
    assert_int_equal(ids[0], 6);
    assert_int_equal(ids[1], 14);
    free(ids);
    gm_tokenizer_free(t);
}

typedef struct bad_case {
    const char *json;
    gemmac_status want;
    const char *needle;
} bad_case;

static void test_malformed(void **state) {
    (void)state;
    const bad_case cases[] = {
        {"not json", GEMMAC_ERR_BAD_FILE, "tokenizer.json: malformed JSON"},
        {"", GEMMAC_ERR_BAD_FILE, "empty JSON"},
        {"[1,2]", GEMMAC_ERR_BAD_FILE, "top level is not an object"},
        {"{\"normalizer\":null}", GEMMAC_ERR_BAD_FILE, "tokenizer.json: no model"},
        {"{\"model\":[1]}", GEMMAC_ERR_BAD_FILE, "model is an array"},
        {"{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1.0]]}}", GEMMAC_ERR_UNSUPPORTED, "model type 'Unigram'"},
        {"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}", GEMMAC_ERR_UNSUPPORTED, "model type 'WordPiece'"},
        {"{\"model\":{\"vocab\":{\"a\":0}}}", GEMMAC_ERR_UNSUPPORTED, "no type and no merges"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":[\"a\"]}}", GEMMAC_ERR_BAD_FILE, "model.vocab is an array"},
        {SMALL("", NORM, "null", "", "[\"a b\",\"a x\"]"), GEMMAC_ERR_BAD_FILE,
         "model.merges[1] 'a' + 'x': 'x' is not in the vocabulary"},
        {SMALL("", NORM, "null", "", "[[\"c\",\"a\"]]"), GEMMAC_ERR_BAD_FILE,
         "model.merges[0] 'c' + 'a' makes a token that is not in the vocabulary"},
        {SMALL("", NORM, "null", "", "[\"ab\"]"), GEMMAC_ERR_BAD_FILE, "not two tokens separated by one space"},
        {SMALL("", NORM, "null", "", "[\"a b c\"]"), GEMMAC_ERR_BAD_FILE, "not two tokens separated by one space"},
        {SMALL("", NORM, "null", "", "[7]"), GEMMAC_ERR_BAD_FILE, "model.merges[0] is a number"},
        {SMALL("", NORM, "null", "", "{}"), GEMMAC_ERR_BAD_FILE, "model.merges is an object"},
        {SMALL(",{\"id\":99,\"content\":\"<x>\",\"special\":true}", NORM, "null", "", GOOD_MERGES), GEMMAC_ERR_BAD_FILE,
         "added_tokens[5] '<x>' has id 99, outside [0, 20)"},
        {SMALL(",{\"id\":-1,\"content\":\"<x>\",\"special\":true}", NORM, "null", "", GOOD_MERGES), GEMMAC_ERR_BAD_FILE,
         "has id -1, outside"},
        {SMALL(",{\"id\":6,\"content\":\"<x>\",\"special\":true}", NORM, "null", "", GOOD_MERGES), GEMMAC_ERR_BAD_FILE,
         "added_tokens[5] '<x>' has id 6, which is already 'a'"},
        {SMALL(",{\"id\":14,\"content\":\"a\",\"special\":false}", NORM, "null", "", GOOD_MERGES), GEMMAC_ERR_BAD_FILE,
         "duplicate token 'a' at ids 6 and 14"},
        {SMALL(",{\"id\":15,\"content\":\"<x>\",\"special\":true}", NORM, "null", "", GOOD_MERGES), GEMMAC_ERR_BAD_FILE,
         "no token has id 14"},
        {SMALL(",{\"id\":14,\"content\":\"<x>\",\"rstrip\":true}", NORM, "null", "", GOOD_MERGES),
         GEMMAC_ERR_UNSUPPORTED, "'<x>' has rstrip set"},
        {SMALL(",{\"id\":14}", NORM, "null", "", GOOD_MERGES), GEMMAC_ERR_BAD_FILE,
         "added_tokens[5] needs an integer id and a string content"},
        {SMALL("", NORM, "null", ",\"dropout\":0.1", GOOD_MERGES), GEMMAC_ERR_UNSUPPORTED, "model.dropout"},
        {SMALL("", NORM, "null", ",\"ignore_merges\":true", GOOD_MERGES), GEMMAC_ERR_UNSUPPORTED, "ignore_merges"},
        {SMALL("", NORM, "null", ",\"ignore_merges\":1", GOOD_MERGES), GEMMAC_ERR_BAD_FILE,
         "model.ignore_merges is a number, not a bool"},
        {SMALL("", "\"normalizer\":null", "null", "", GOOD_MERGES), GEMMAC_ERR_UNSUPPORTED, "no normalizer"},
        {SMALL("", "\"normalizer\":{\"type\":\"NFKC\"}", "null", "", GOOD_MERGES), GEMMAC_ERR_UNSUPPORTED,
         "normalizer NFKC is not supported"},
        {SMALL("", NORM, "{\"type\":\"ByteLevel\"}", "", GOOD_MERGES), GEMMAC_ERR_UNSUPPORTED,
         "pre_tokenizer ByteLevel is not supported"},
        {SMALL("", NORM, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"behavior\":\"Isolated\"}", "",
               GOOD_MERGES), GEMMAC_ERR_UNSUPPORTED, "pre_tokenizer Split on"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}," NORM "}", GEMMAC_ERR_BAD_FILE,
         "model.vocab gives id 0 to both 'a' and 'b'"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":2},\"merges\":[]}," NORM "}", GEMMAC_ERR_BAD_FILE,
         "model.vocab 'b' has id 2, outside [0, 2)"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"a\":1},\"merges\":[]}," NORM "}", GEMMAC_ERR_BAD_FILE,
         "duplicate key 'a'"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"0\"},\"merges\":[]}," NORM "}", GEMMAC_ERR_BAD_FILE,
         "model.vocab 'a' has a string, not an integer id"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0.5},\"merges\":[]}," NORM "}", GEMMAC_ERR_BAD_FILE,
         "not an integer id"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}," NORM "}", GEMMAC_ERR_BAD_FILE, "vocabulary is empty"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"unk_token\":\"<unk>\",\"merges\":[]}," NORM "}",
         GEMMAC_ERR_BAD_FILE, "model.unk_token '<unk>' is not in the vocabulary"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"<|turn>\":0}}," NORM "}", GEMMAC_ERR_BAD_FILE,
         "model.merges is missing"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\\u0000\":0},\"merges\":[]}}", GEMMAC_ERR_BAD_FILE, "\\u0000"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xff\":0},\"merges\":[]}}", GEMMAC_ERR_BAD_FILE, "invalid UTF-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gm_tokenizer *t = (gm_tokenizer *)1;
        gm_error err = {0};
        gemmac_status st = gm_tokenizer_from_hf_json_text(cases[i].json, strlen(cases[i].json), "tokenizer.json",
                                                          GM_TOK_KIND_AUTO, &t, &err);
        if (st != cases[i].want || !strstr(err.msg, cases[i].needle) || t != NULL)
            fail_msg("case %zu: status %s, message \"%s\"; expected %s with \"%s\"", i, gemmac_status_str(st), err.msg,
                     gemmac_status_str(cases[i].want), cases[i].needle);
        assert_true(strncmp(err.msg, "tokenizer.json", 14) == 0);
    }
    /* a NUL inside the text */
    gm_tokenizer *t;
    gm_error err = {0};
    assert_int_equal(gm_tokenizer_from_hf_json_text("{\"a\":\0}", 7, "tokenizer.json", -1, &t, &err), GEMMAC_ERR_BAD_FILE);
    assert_non_null(strstr(err.msg, "NUL"));
    /* a missing file */
    assert_int_equal(gm_tokenizer_from_hf_json("/nonexistent/dir/tokenizer.json", -1, &t, &err), GEMMAC_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/dir/tokenizer.json"));
}

/* ---------------------------------------------------------------------------------------------------- */
/* side files and model directories                                                                      */

static void make_dir(char *dir) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, 256, "%s/gemmac_tokjson_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(dir));
}

static void remove_dir(const char *dir) {
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "generation_config.json", "config.json", "model.safetensors", "out", "err"};
    char p[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static void put(const char *dir, const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_true(write_text(p, text));
}

static void test_side_files(void **state) {
    (void)state;
    char dir[256], p[512], src[4096];
    make_dir(dir);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    assert_true(copy_file(gm_test_source_path("tests/golden/gemma3_hf_tokenizer.json", src, sizeof src), p));
    put(dir, "tokenizer_config.json",
        "{\"add_bos_token\": false, \"bos_token\": {\"content\": \"<bos>\", \"special\": true}, \"eos_token\": "
        "\"<end_of_turn>\", \"pad_token\": \"<pad>\", \"chat_template\": \"{{ bos_token }}\"}");
    put(dir, "generation_config.json", "{\"bos_token_id\": 2, \"eos_token_id\": [1, 106], \"pad_token_id\": 0}");
    gm_tokenizer *t = NULL;
    gm_error err = {0};
    if (gm_tokenizer_from_hf_json(dir, GM_TOK_KIND_AUTO, &t, &err)) fail_msg("%s", err.msg);
    assert_false(gm_tokenizer_add_bos(t));
    assert_int_equal(gm_tokenizer_eos(t), 106);
    assert_int_equal(gm_tokenizer_eot(t), 106);
    gm_tokenizer_free(t);
    /* generation_config.json alone: eos from its first id */
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    unlink(p);
    put(dir, "generation_config.json", "{\"eos_token_id\": [106, 1]}");
    if (gm_tokenizer_from_hf_json(dir, GM_TOK_KIND_AUTO, &t, &err)) fail_msg("%s", err.msg);
    assert_int_equal(gm_tokenizer_eos(t), 106);
    assert_true(gm_tokenizer_add_bos(t));
    gm_tokenizer_free(t);
    /* errors name the file */
    struct {
        const char *file, *text, *needle;
    } bad[] = {
        {"generation_config.json", "{\"eos_token_id\": [1, 999999]}", "eos_token_id = 999999 is outside"},
        {"generation_config.json", "{\"eos_token_id\": \"x\"}", "eos_token_id"},
        {"generation_config.json", "{", "generation_config.json"},
        {"tokenizer_config.json", "{\"eos_token\": \"<nope>\"}", "tokenizer_config.json: eos_token '<nope>' is not in"},
        {"tokenizer_config.json", "{\"add_bos_token\": 1}", "add_bos_token"},
        {"special_tokens_map.json", "{\"bos_token\": {\"special\": true}}", "special_tokens_map.json: bos_token has no content"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put(dir, bad[i].file, bad[i].text);
        t = NULL;
        gemmac_status st = gm_tokenizer_from_hf_json(dir, GM_TOK_KIND_AUTO, &t, &err);
        if (st != GEMMAC_ERR_BAD_FILE || !strstr(err.msg, bad[i].needle) || t)
            fail_msg("side case %zu: %s \"%s\"", i, gemmac_status_str(st), err.msg);
        snprintf(p, sizeof p, "%s/%s", dir, bad[i].file);
        unlink(p);
    }
    remove_dir(dir);
}

/* Runs the CLI ($GEMMAC_CLI) with args; returns its exit status, stderr in err_out. */
static int run_cli(const char *dir, const char *const *args, char *err_out, size_t cap) {
    const char *cli = getenv("GEMMAC_CLI");
    char out_path[512], err_path[512];
    snprintf(out_path, sizeof out_path, "%s/out", dir);
    snprintf(err_path, sizeof err_path, "%s/err", dir);
    posix_spawn_file_actions_t fa;
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0), 0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600), 0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600), 0);
    const char *argv[16] = {cli};
    size_t n = 1;
    for (; args[n - 1]; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, cli, &fa, NULL, (char *const *)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    size_t len;
    char *e = read_all(err_path, &len);
    snprintf(err_out, cap, "%s", e ? e : "");
    free(e);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_model_directory(void **state) {
    (void)state;
    static const char *const variants[] = {"gemma3", "gemma4_bf16"};
    for (size_t v = 0; v < 2; v++) {
        char dir[256], src[4096], rel[128], from[4200], to[512];
        make_dir(dir);
        snprintf(rel, sizeof rel, "tests/golden/hf/%s", variants[v]);
        gm_test_source_path(rel, src, sizeof src);
        static const char *const files[] = {"config.json", "model.safetensors", "generation_config.json"};
        for (int f = 0; f < 3; f++) {
            snprintf(from, sizeof from, "%s/%s", src, files[f]);
            snprintf(to, sizeof to, "%s/%s", dir, files[f]);
            assert_true(copy_file(from, to));
        }
        /* no tokenizer.json: token ids only, and the text functions say so */
        gemmac_model *m = NULL;
        char err[600];
        gemmac_status st = gemmac_model_load(dir, NULL, &m, err, sizeof err);
        if (st) fail_msg("%s", err);
        size_t n = 99;
        gemmac_token ids[64];
        assert_int_equal(gemmac_tokenize(m, "hi", 2, ADD_BOS, ids, 64, &n), GEMMAC_ERR_UNSUPPORTED);
        assert_int_equal(n, 0);
        const char *piece;
        size_t len;
        assert_int_equal(gemmac_token_piece(m, 2, &piece, &len), GEMMAC_ERR_UNSUPPORTED);
        assert_null(gemmac_detok_new(m));
        assert_false(gemmac_token_is_eog(m, 1));
        char desc[8192];
        gemmac_model_describe(m, 64, desc, sizeof desc);
        assert_non_null(strstr(desc, "tokenizer         none"));
        gemmac_model_info info;
        gemmac_model_get_info(m, &info);
        assert_int_equal(info.bos, -1);
        gemmac_model_free(m);
        if (getenv("GEMMAC_CLI") && *getenv("GEMMAC_CLI")) {
            char e[2048];
            const char *const a1[] = {"run", "-m", dir, "-p", "hello", "-n", "2", "--no-progress", NULL};
            assert_int_not_equal(run_cli(dir, a1, e, sizeof e), 0);
            if (!strstr(e, "this model has no tokenizer")) fail_msg("stderr: %s", e);
            const char *const a2[] = {"run", "-m", dir, "--tokens", "2,5,6", "-n", "2", "--no-progress", NULL};
            assert_int_equal(run_cli(dir, a2, e, sizeof e), 0);
        }

        /* with tokenizer.json: the model's kind decides (the tiny file has no Gemma 4 tokens) */
        snprintf(to, sizeof to, "%s/tokenizer.json", dir);
        assert_true(copy_file(gm_test_source_path("tests/golden/hf_tiny_tokenizer.json", from, sizeof from), to));
        if ((st = gemmac_model_load(dir, NULL, &m, err, sizeof err))) fail_msg("%s", err);
        assert_int_equal(gemmac_tokenize(m, "hello world", 11, ADD_BOS, ids, 64, &n), GEMMAC_OK);
        assert_true(n >= 2);
        assert_int_equal(ids[0], 2);
        gemmac_model_describe(m, 64, desc, sizeof desc);
        assert_non_null(strstr(desc, v == 0 ? "sentencepiece (llama), 506 tokens" : "bpe (gemma4), 506 tokens"));
        gemmac_detok *d = gemmac_detok_new(m);
        assert_non_null(d);
        char text[256];
        size_t tl = 0, got;
        for (size_t i = 1; i < n; i++) {
            assert_int_equal(gemmac_detok_push(d, ids[i], text + tl, sizeof text - tl, &got), GEMMAC_OK);
            tl += got;
        }
        assert_int_equal(gemmac_detok_flush(d, text + tl, sizeof text - tl, &got), GEMMAC_OK);
        tl += got;
        gemmac_detok_free(d);
        assert_int_equal(tl, 11);
        assert_memory_equal(text, "hello world", 11);
        gemmac_model_free(m);
        if (getenv("GEMMAC_CLI") && *getenv("GEMMAC_CLI")) {
            char e[2048];
            const char *const a1[] = {"run", "-m", dir, "-p", "hello", "-n", "2", "--no-progress", NULL};
            if (run_cli(dir, a1, e, sizeof e) != 0) fail_msg("stderr: %s", e);
        }

        /* a broken tokenizer.json is an error that names it */
        put(dir, "tokenizer.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
        st = gemmac_model_load(dir, NULL, &m, err, sizeof err);
        assert_int_equal(st, GEMMAC_ERR_UNSUPPORTED);
        assert_null(m);
        if (!strstr(err, "tokenizer.json: model type 'Unigram'")) fail_msg("%s", err);
        put(dir, "tokenizer.json", "{");
        st = gemmac_model_load(dir, NULL, &m, err, sizeof err);
        assert_int_equal(st, GEMMAC_ERR_BAD_FILE);
        if (!strstr(err, "tokenizer.json: malformed JSON")) fail_msg("%s", err);
        remove_dir(dir);
    }
}

/* A real Gemma 3 tokenizer.json ($GEMMAC_GEMMA3_TOKENIZER_JSON) against llama.cpp on the real GGUF. */
static void test_real_gemma3_json(void **state) {
    (void)state;
    const char *path = getenv("GEMMAC_GEMMA3_TOKENIZER_JSON");
    if (!path || !*path) {
        fprintf(stderr, "SKIP: set GEMMAC_GEMMA3_TOKENIZER_JSON to a Gemma 3 tokenizer.json\n");
        skip();
    }
    gm_tokenizer *t = NULL;
    gm_error err = {0};
    if (gm_tokenizer_from_hf_json(path, GM_TOK_SPM, &t, &err)) fail_msg("%s", err.msg);
    assert_true(gm_tokenizer_n_tokens(t) >= 262144);
    fixture_result r = run_fixture(t, "tests/golden/gemma3_tokenizer.tsv");
    fprintf(stderr, "real Gemma 3 tokenizer.json vs llama.cpp: %d cases, %d id mismatches, %d text mismatches\n",
            r.cases, r.id_mismatch, r.piece_mismatch);
    assert_int_equal(r.id_mismatch, 0);
    gm_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma3_style_matches_hf),
        cmocka_unit_test(test_gemma4_style_matches_hf_and_gguf),
        cmocka_unit_test(test_small_files),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_side_files),
        cmocka_unit_test(test_model_directory),
        cmocka_unit_test(test_real_gemma3_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
