/* test_chat.c: the built-in chat templates (src/tok/chat.c), rendered exactly: system folding (Gemma 3) or
 * system turn (Gemma 4), role mapping, trimming, thought-channel stripping, the generation prompt, errors
 * and buffer sizing. The expected strings follow the HF chat templates (gemma-architecture.md §3). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tok/tokenizer.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void expect_render(gm_chat_format fmt, const gemmac_chat_msg *m, size_t n, bool gen, const char *want) {
    char out[4096];
    size_t len = 0;
    gemmac_status st = gm_chat_render(fmt, m, n, gen, out, sizeof out, &len);
    if (st != GEMMAC_OK || strcmp(out, want) != 0) fail_msg("status %d, got\n[%s]\nwant\n[%s]", st, out, want);
    assert_int_equal(len, strlen(want));
}

static void test_gemma3_basic(void **state) {
    (void)state;
    const gemmac_chat_msg m[] = {{"user", "Hello"}};
    expect_render(GM_CHAT_GEMMA3, m, 1, true, "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n");
    expect_render(GM_CHAT_GEMMA3, m, 1, false, "<bos><start_of_turn>user\nHello<end_of_turn>\n");
    expect_render(GM_CHAT_GEMMA3, NULL, 0, true, "<bos><start_of_turn>model\n");
}

static void test_gemma3_system_and_roles(void **state) {
    (void)state;
    const gemmac_chat_msg m[] = {
        {"system", "Be brief."}, {"user", "  Hi there \n"}, {"assistant", "\nHello!  "}, {"user", "2+2?"},
        {"model", "4"},
    };
    expect_render(GM_CHAT_GEMMA3, m, N(m), true,
                  "<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n"
                  "<start_of_turn>model\nHello!<end_of_turn>\n"
                  "<start_of_turn>user\n2+2?<end_of_turn>\n"
                  "<start_of_turn>model\n4<end_of_turn>\n"
                  "<start_of_turn>model\n");
    /* a later system message folds into the next user turn; one with no user turn after it gets its own */
    const gemmac_chat_msg m2[] = {{"user", "a"}, {"system", "S1"}, {"developer", "S2"}, {"user", "b"}, {"system", "S3"}};
    expect_render(GM_CHAT_GEMMA3, m2, N(m2), false,
                  "<bos><start_of_turn>user\na<end_of_turn>\n"
                  "<start_of_turn>user\nS1\n\nS2\n\nb<end_of_turn>\n"
                  "<start_of_turn>user\nS3<end_of_turn>\n");
    /* system text before a model turn is not folded into it */
    const gemmac_chat_msg m4[] = {{"system", "S"}, {"assistant", "A"}, {"user", "u"}};
    expect_render(GM_CHAT_GEMMA3, m4, N(m4), true,
                  "<bos><start_of_turn>user\nS<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n"
                  "<start_of_turn>user\nu<end_of_turn>\n<start_of_turn>model\n");
    /* the system text itself is not trimmed (HF: messages[0]['content'] + '\n\n') */
    const gemmac_chat_msg m3[] = {{"system", " sys "}, {"user", "u"}};
    expect_render(GM_CHAT_GEMMA3, m3, N(m3), false, "<bos><start_of_turn>user\n sys \n\nu<end_of_turn>\n");
}

static void test_gemma4(void **state) {
    (void)state;
    const gemmac_chat_msg m[] = {{"user", "Hello"}};
    expect_render(GM_CHAT_GEMMA4, m, 1, true, "<bos><|turn>user\nHello<turn|>\n<|turn>model\n");
    const gemmac_chat_msg m2[] = {
        {"system", " You are helpful. "}, {"user", "Hi"}, {"assistant", "Hey."}, {"user", "More"},
    };
    expect_render(GM_CHAT_GEMMA4, m2, N(m2), true,
                  "<bos><|turn>system\nYou are helpful.<turn|>\n"
                  "<|turn>user\nHi<turn|>\n"
                  "<|turn>model\nHey.<turn|>\n"
                  "<|turn>user\nMore<turn|>\n"
                  "<|turn>model\n");
    /* earlier model turns lose their thought channels */
    const gemmac_chat_msg m3[] = {
        {"user", "q"}, {"assistant", "<|channel>thought\nlet me think<channel|>The answer is 4.\n"},
        {"model", "A <|channel>x<channel|>B<|channel>unterminated"},
    };
    expect_render(GM_CHAT_GEMMA4, m3, N(m3), false,
                  "<bos><|turn>user\nq<turn|>\n<|turn>model\nThe answer is 4.<turn|>\n<|turn>model\nA B<turn|>\n");
}

static void test_errors_and_sizes(void **state) {
    (void)state;
    char out[256];
    size_t n = 7;
    const gemmac_chat_msg bad[] = {{"user", "x"}, {"tool", "y"}};
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA3, bad, 2, true, out, sizeof out, &n), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA4, bad, 2, true, out, sizeof out, &n), GEMMAC_ERR_INVALID_ARG);
    const gemmac_chat_msg nul_role[] = {{NULL, "x"}}, nul_content[] = {{"user", NULL}}, upper[] = {{"User", "x"}};
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA3, nul_role, 1, true, out, sizeof out, &n), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA3, nul_content, 1, true, out, sizeof out, &n), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA3, upper, 1, true, out, sizeof out, &n), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA3, NULL, 1, true, out, sizeof out, &n), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_chat_render((gm_chat_format)9, NULL, 0, true, out, sizeof out, &n), GEMMAC_ERR_INVALID_ARG);
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA3, NULL, 0, true, NULL, 5, &n), GEMMAC_ERR_INVALID_ARG);

    const gemmac_chat_msg m[] = {{"user", "Hello"}};
    const char *want = "<bos><|turn>user\nHello<turn|>\n<|turn>model\n";
    size_t len = strlen(want);
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA4, m, 1, true, NULL, 0, &n), GEMMAC_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, len);
    memset(out, 'x', sizeof out);
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA4, m, 1, true, out, len, &n), GEMMAC_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, len);
    assert_int_equal(out[len - 1], '\0');   /* truncated, still terminated */
    assert_int_equal(out[len], 'x');        /* nothing written past cap */
    assert_int_equal(gm_chat_render(GM_CHAT_GEMMA4, m, 1, true, out, len + 1, &n), GEMMAC_OK);
    assert_string_equal(out, want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma3_basic),
        cmocka_unit_test(test_gemma3_system_and_roles),
        cmocka_unit_test(test_gemma4),
        cmocka_unit_test(test_errors_and_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
