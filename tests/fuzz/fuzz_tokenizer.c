/* fuzz_tokenizer.c: libFuzzer target for src/tok. Arbitrary bytes are tokenized (the first byte picks the
 * vocabulary and the flags) and the ids streamed back through the detokenizer, which must only ever emit
 * valid UTF-8; valid UTF-8 input tokenized without PARSE_SPECIAL must come back byte for byte.
 * Vocabularies: the Gemma-4-style fixture GGUF ($GEMMAC_FUZZ_VOCAB, else
 * $GEMMAC_SOURCE_DIR/tests/golden/gemma4_vocab.gguf, else ./tests/golden/...) and a small SPM vocabulary
 * built in code (always available).
 *   CC=clang cmake -B build-tok-fuzz -DGEMMAC_FUZZ=ON -DGEMMAC_TESTS=OFF && cmake --build build-tok-fuzz
 *   build-tok-fuzz/fuzz_tokenizer -max_len=4096 -runs=1000000 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "tok/tokenizer.h"

static gm_tokenizer *g_bpe, *g_spm;
static gm_gguf *g_gguf;

static void load_bpe(void) {
    char path[4096];
    const char *env = getenv("GEMMAC_FUZZ_VOCAB");
    const char *root = getenv("GEMMAC_SOURCE_DIR");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        snprintf(path, sizeof path, "%s/tests/golden/gemma4_vocab.gguf", root && *root ? root : ".");
    gm_error err;
    if (gm_gguf_open(path, &g_gguf, &err) != GEMMAC_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s (BPE vocabulary skipped)\n", path, err.msg);
        return;
    }
    if (gm_tokenizer_from_gguf(g_gguf, &g_bpe, &err) != GEMMAC_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        abort();
    }
}

static void build_spm(void) {
    static const char *const texts[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>",
                                        "\n\n", "\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "a",
                                        "\xe2\x96\x81" "ab", "aa", "\xc3\xa9", "</s>", "<", ">", "<s", "s>"};
    static const int32_t types[] = {3, 3, 3, 3, 3, 3, 4, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 1, 1, 1};
    enum { N = sizeof texts / sizeof *texts };
    static char bytes[256][7];
    gm_str toks[N + 256];
    float scores[N + 256];
    int32_t tt[N + 256];
    for (int i = 0; i < N; i++) {
        toks[i] = (gm_str){texts[i], strlen(texts[i])};
        scores[i] = -(float)i;
        tt[i] = types[i];
    }
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[N + b] = (gm_str){bytes[b], 6};
        scores[N + b] = 0;
        tt[N + b] = 6;
    }
    gm_vocab_desc d = {.kind = GM_TOK_SPM, .n_tokens = N + 256, .tokens = toks, .scores = scores,
                       .token_types = tt, .bos = 2, .eos = 1, .eot = 5, .unk = 3, .pad = 0, .add_bos = true,
                       .add_space_prefix = false};
    gm_error err;
    if (gm_tokenizer_new(&d, &g_spm, &err) != GEMMAC_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    load_bpe();
    build_spm();
    return 0;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
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

static int has_lower_block(const char *s, size_t n) {
    for (size_t i = 0; i + 3 <= n; i++)
        if (!memcmp(s + i, "\xe2\x96\x81", 3)) return 1;
    return 0;
}

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "fuzz_tokenizer: check failed: %s (line %d)\n", #cond, __LINE__);                \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    uint8_t sel = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const gm_tokenizer *t = (sel & 4) && g_bpe ? g_bpe : g_spm;
    int flags = sel & (GEMMAC_TOKENIZE_ADD_BOS | GEMMAC_TOKENIZE_PARSE_SPECIAL);

    size_t n = 0;
    gemmac_status st = gm_tokenize(t, text, len, flags, NULL, 0, &n);
    CHECK(st == GEMMAC_OK || st == GEMMAC_ERR_BUFFER_TOO_SMALL);
    CHECK((st == GEMMAC_OK) == (n == 0));
    gemmac_token *ids = malloc((n ? n : 1) * sizeof *ids);
    size_t n2 = 0;
    CHECK(gm_tokenize(t, text, len, flags, ids, n, &n2) == GEMMAC_OK && n2 == n);
    if (n > 1) {  /* a short buffer reports the same count and fills what fits */
        gemmac_token first = -1;
        CHECK(gm_tokenize(t, text, len, flags, &first, 1, &n2) == GEMMAC_ERR_BUFFER_TOO_SMALL && n2 == n);
        CHECK(first == ids[0]);
    }

    gm_detok *d = gm_detok_new(t);
    CHECK(d != NULL);
    size_t cap = GM_DETOK_SLACK + 3 * gm_tokenizer_max_piece(t);
    char *chunk = malloc(cap);
    char *all = malloc(cap * (n + 1));
    size_t total = 0;
    for (size_t i = 0; i <= n; i++) {
        size_t got = 0;
        if (i < n) {
            CHECK(ids[i] >= 0 && (uint32_t)ids[i] < gm_tokenizer_n_tokens(t));
            CHECK(gm_detok_push(d, ids[i], chunk, cap, &got) == GEMMAC_OK);
        } else {
            CHECK(gm_detok_flush(d, chunk, cap, &got) == GEMMAC_OK);
        }
        CHECK(got < cap && chunk[got] == '\0');
        CHECK(valid_utf8((const uint8_t *)chunk, got));
        memcpy(all + total, chunk, got);
        total += got;
    }
    CHECK(valid_utf8((const uint8_t *)all, total));
    /* round trip: without special parsing every input byte comes back, unless the input spells U+2581
     * (which renders as a space) or is not valid UTF-8 (replaced by U+FFFD) */
    if (!(flags & GEMMAC_TOKENIZE_PARSE_SPECIAL) && valid_utf8((const uint8_t *)text, len) &&
        !has_lower_block(text, len)) {
        CHECK(total == len && memcmp(all, text, len) == 0);  /* <bos> renders as nothing */
    }
    gm_detok_free(d);
    free(chunk);
    free(all);
    free(ids);
    return 0;
}
