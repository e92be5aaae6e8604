/* fuzz_tokenizer_json.c: libFuzzer target for src/tok/tokenizer_json.c. The input is a tokenizer.json; the
 * first byte picks the kind hint (auto, SPM, Gemma 4 BPE). A refused input must come back with a one-line
 * message that names the file, no tokenizer and a BAD_FILE / UNSUPPORTED / NO_MEMORY status; an accepted
 * one is then used: a few texts (and the input itself) are tokenized in every flag combination, every id
 * must be in range, and the ids are streamed back through the detokenizer, which must emit valid UTF-8.
 * Seeds: tests/fuzz/make_tokenizer_json_seeds.py; dictionary: tests/fuzz/tokenizer_json.dict.
 *   CC=clang cmake -B build-fuzz -DGEMMAC_FUZZ=ON -DGEMMAC_TESTS=OFF && cmake --build build-fuzz
 *   build-fuzz/fuzz_tokenizer_json -dict=tests/fuzz/tokenizer_json.dict -max_len=8192 CORPUS */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tokenizer.h"

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "fuzz_tokenizer_json: check failed: %s (line %d)\n", #cond, __LINE__);           \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

static int valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (i + k >= n) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

static void exercise(const gm_tokenizer *t, const char *text, size_t len) {
    uint32_t n_tok = gm_tokenizer_n_tokens(t);
    CHECK(n_tok > 0);
    size_t cap = GM_DETOK_SLACK + 3 * gm_tokenizer_max_piece(t) + 1;
    char *out = malloc(cap);
    CHECK(out);
    for (int flags = 0; flags < 4; flags++) {
        size_t need = 0;
        gemmac_status st = gm_tokenize(t, text, len, flags, NULL, 0, &need);
        CHECK(st == GEMMAC_OK || st == GEMMAC_ERR_BUFFER_TOO_SMALL || st == GEMMAC_ERR_NO_MEMORY);
        if (st == GEMMAC_ERR_NO_MEMORY) continue;
        gemmac_token *ids = malloc((need ? need : 1) * sizeof *ids);
        CHECK(ids);
        size_t got = 0;
        CHECK(gm_tokenize(t, text, len, flags, ids, need, &got) == GEMMAC_OK && got == need);
        gm_detok *d = gm_detok_new(t);
        CHECK(d);
        for (size_t i = 0; i <= got; i++) {
            size_t n;
            if (i < got) {
                CHECK(ids[i] >= 0 && (uint32_t)ids[i] < n_tok);
                size_t pl;
                CHECK(gm_token_piece(t, ids[i], &pl) != NULL && pl <= gm_tokenizer_max_piece(t));
                CHECK(gm_detok_push(d, ids[i], out, cap, &n) == GEMMAC_OK);
            } else {
                CHECK(gm_detok_flush(d, out, cap, &n) == GEMMAC_OK);
            }
            CHECK(n < cap && valid_utf8((const uint8_t *)out, n));
        }
        gm_detok_free(d);
        free(ids);
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    static const int hints[4] = {GM_TOK_KIND_AUTO, GM_TOK_SPM, GM_TOK_BPE_GEMMA4, GM_TOK_KIND_AUTO};
    int hint = hints[data[0] & 3];
    const char *json = (const char *)data + 1;
    size_t len = size - 1;
    gm_tokenizer *t = (gm_tokenizer *)&hint;  /* must come back NULL on failure */
    gm_error err;
    gm_error_clear(&err);
    gemmac_status st = gm_tokenizer_from_hf_json_text(json, len, "tokenizer.json", hint, &t, &err);
    if (st != GEMMAC_OK) {
        CHECK(t == NULL);
        CHECK(st == GEMMAC_ERR_BAD_FILE || st == GEMMAC_ERR_UNSUPPORTED || st == GEMMAC_ERR_NO_MEMORY);
        CHECK(err.msg[0] != '\0' && !strchr(err.msg, '\n'));
        CHECK(strncmp(err.msg, "tokenizer.json", 14) == 0);
        return 0;
    }
    CHECK(t != NULL);
    CHECK(hint < 0 || gm_tokenizer_kind(t) == (gm_tok_kind)hint);
    static const char *const texts[] = {"", "Hello world", " a  b\n\n\nc\t", "<bos><start_of_turn>user\nhi<end_of_turn>",
                                        "<|turn>model\n<|channel>x<channel|><turn|>", "\xe2\x96\x81\xc3\xa9\xff\x00z",
                                        "abcabcabc ab c"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) exercise(t, texts[i], strlen(texts[i]) + (i == 5));
    exercise(t, json, len < 512 ? len : 512);
    gm_tokenizer_free(t);
    return 0;
}
