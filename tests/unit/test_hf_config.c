/* test_hf_config.c: the config.json reader (src/io/hf_config.c): nested (Gemma 4 / 3 / 3n multimodal) and
 * flat (Gemma4ForCausalLM) configs through every getter and the text view; each malformed config or wrong
 * request fails with its status and a message naming the file and the key. Texts are parsed from
 * exactly-sized heap copies (not NUL-terminated) so ASan sees overreads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/hf_config.h"

#define EXPECT_MSG(e, sub)                                                                                  \
    do {                                                                                                    \
        if (!strstr((e).msg, (sub))) fail_msg("message \"%s\" lacks \"%s\"", (e).msg, (sub));              \
    } while (0)

/* A Gemma 4 E2B-style config, cut to 5 layers (values from gemma-architecture.md §1.1 and §5). */
static const char k_gemma4[] =
    "{\n"
    "  \"architectures\": [\"Gemma4ForConditionalGeneration\"],\n"
    "  \"model_type\": \"gemma4\",\n"
    "  \"audio_config\": null,\n"
    "  \"eos_token_id\": [1, 106],\n"
    "  \"tie_word_embeddings\": true,\n"
    "  \"dtype\": \"bfloat16\",\n"
    "  \"text_config\": {\n"
    "    \"model_type\": \"gemma4_text\",\n"
    "    \"hidden_size\": 1536,\n"
    "    \"num_hidden_layers\": 5,\n"
    "    \"num_attention_heads\": 8,\n"
    "    \"num_key_value_heads\": 1,\n"
    "    \"head_dim\": 256,\n"
    "    \"global_head_dim\": 512,\n"
    "    \"num_global_key_value_heads\": null,\n"
    "    \"intermediate_size\": [6144, 6144, 6144, 12288, 12288],\n"
    "    \"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"sliding_attention\",\n"
    "                    \"sliding_attention\", \"full_attention\"],\n"
    "    \"sliding_window\": 512,\n"
    "    \"rope_parameters\": {\n"
    "      \"full_attention\": {\"partial_rotary_factor\": 0.25, \"rope_theta\": 1000000.0, \"rope_type\": \"proportional\"},\n"
    "      \"sliding_attention\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}\n"
    "    },\n"
    "    \"hidden_size_per_layer_input\": 256,\n"
    "    \"num_kv_shared_layers\": 2,\n"
    "    \"final_logit_softcapping\": 30.0,\n"
    "    \"enable_moe_block\": false,\n"
    "    \"attention_k_eq_v\": false,\n"
    "    \"use_double_wide_mlp\": true,\n"
    "    \"use_bidirectional_attention\": \"vision\",\n"
    "    \"per_layer_config\": {\"4\": {\"head_dim\": 512, \"num_key_value_heads\": 1}},\n"
    "    \"rms_norm_eps\": 1e-06,\n"
    "    \"vocab_size\": 262144,\n"
    "    \"max_position_embeddings\": 131072,\n"
    "    \"caf\\u00e9\": \"caf\\u00e9\"\n"
    "  }\n"
    "}";

static const char k_flat[] =
    "{\"architectures\": [\"Gemma4ForCausalLM\"], \"model_type\": \"gemma4_text\", \"hidden_size\": 2560,"
    " \"num_hidden_layers\": 42, \"intermediate_size\": 10240, \"query_pre_attn_scalar\": 168,"
    " \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}, \"rope_theta\": 1000000,"
    " \"final_logit_softcapping\": null, \"num_experts\": 128, \"top_k_experts\": 8,"
    " \"moe_intermediate_size\": 704, \"use_bidirectional_attention\": false,"
    " \"huge\": 1e400, \"frac\": 1.5, \"big\": 9007199254740993, \"neg\": -3, \"bools\": [true, false, true],"
    " \"mixed\": [1, 2, \"x\"], \"floats\": [0.5, 2, -1e3]}";

static gemmac_status parse_copy(const char *text, size_t n, gm_hf_config **c, gm_error *err) {
    char *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    memcpy(copy, text, n);
    gm_error_clear(err);
    gemmac_status st = gm_hf_config_parse(copy, n, "config.json", c, err);
    free(copy);   /* the handle must not depend on the text */
    return st;
}

static gm_hf_config *parse_ok(const char *text) {
    gm_hf_config *c;
    gm_error err;
    gemmac_status st = parse_copy(text, strlen(text), &c, &err);
    if (st) fail_msg("parse: %s", err.msg);
    return c;
}

static void check_err(gemmac_status got, const gm_error *err, gemmac_status st, const char *sub) {
    if (got != st) fail_msg("status %d (%s), expected %d; message \"%s\"", got, gemmac_status_str(got), st, err->msg);
    assert_int_equal(err->status, st);
    EXPECT_MSG(*err, sub);
    assert_null(strchr(err->msg, '\n'));
}

static void expect_parse_fail(const char *text, gemmac_status st, const char *sub) {
    gm_hf_config *c = (gm_hf_config *)1;
    gm_error err;
    check_err(parse_copy(text, strlen(text), &c, &err), &err, st, sub);
    assert_null(c);
}

static void test_gemma4_nested(void **state) {
    (void)state;
    gm_hf_config *c = parse_ok(k_gemma4);
    gm_error err;
    gm_hf_model_id id;
    assert_int_equal(gm_hf_config_model_id(c, &id, &err), GEMMAC_OK);
    assert_string_equal(id.architecture, "Gemma4ForConditionalGeneration");
    assert_string_equal(id.model_type, "gemma4");
    assert_string_equal(id.text_model_type, "gemma4_text");
    assert_true(gm_hf_config_is_nested(c));
    const gm_hf_config *t = gm_hf_config_text(c);
    assert_ptr_not_equal(t, c);
    assert_ptr_equal(gm_hf_config_text(t), t);

    int64_t v;
    assert_int_equal(gm_hf_get_int(t, "hidden_size", 1, 1 << 20, &v, &err), GEMMAC_OK);
    assert_int_equal(v, 1536);
    assert_int_equal(gm_hf_get_int(c, "text_config.hidden_size", 1, 1 << 20, &v, &err), GEMMAC_OK);
    assert_int_equal(v, 1536);
    assert_int_equal(gm_hf_get_int(t, "per_layer_config.4.head_dim", 1, 1024, &v, &err), GEMMAC_OK);
    assert_int_equal(v, 512);
    /* the top-level hidden_size does not exist: the message names the full path */
    check_err(gm_hf_get_int(c, "hidden_size", 1, 1 << 20, &v, &err), &err, GEMMAC_ERR_NOT_FOUND,
              "config.json: key 'hidden_size' not found");
    check_err(gm_hf_get_int(t, "nope", 1, 2, &v, &err), &err, GEMMAC_ERR_NOT_FOUND,
              "config.json: key 'text_config.nope' not found");
    check_err(gm_hf_get_int(t, "num_global_key_value_heads", 1, 64, &v, &err), &err, GEMMAC_ERR_NOT_FOUND,
              "key 'text_config.num_global_key_value_heads' is null");
    assert_int_equal(gm_hf_kind_of(t, "num_global_key_value_heads"), GM_HF_NULL);
    assert_int_equal(gm_hf_kind_of(c, "audio_config"), GM_HF_NULL);
    assert_int_equal(gm_hf_kind_of(c, "vision_config"), GM_HF_ABSENT);
    assert_int_equal(gm_hf_kind_of(t, "rope_parameters"), GM_HF_OBJECT);
    assert_int_equal(gm_hf_kind_of(t, "layer_types"), GM_HF_ARRAY);
    assert_int_equal(gm_hf_kind_of(t, "layer_types.4"), GM_HF_STRING);
    assert_int_equal(gm_hf_kind_of(t, "layer_types.5"), GM_HF_ABSENT);
    assert_int_equal(gm_hf_kind_of(t, "layer_types.x"), GM_HF_ABSENT);
    assert_int_equal(gm_hf_kind_of(t, "hidden_size.x"), GM_HF_ABSENT);
    assert_int_equal(gm_hf_kind_of(t, "rope_parameters..rope_theta"), GM_HF_ABSENT);
    assert_int_equal(gm_hf_kind_of(t, ""), GM_HF_ABSENT);
    assert_string_equal(gm_hf_kind_name(GM_HF_OBJECT), "object");
    assert_int_equal(gm_hf_count(t, "layer_types"), 5);
    assert_int_equal(gm_hf_count(t, "rope_parameters"), 2);
    assert_int_equal(gm_hf_count(t, "hidden_size"), 0);

    const char *s;
    assert_int_equal(gm_hf_get_str(t, "layer_types.4", &s, &err), GEMMAC_OK);
    assert_string_equal(s, "full_attention");
    assert_int_equal(gm_hf_get_str(t, "caf\xc3\xa9", &s, &err), GEMMAC_OK);
    assert_string_equal(s, "caf\xc3\xa9");

    double d;
    assert_int_equal(gm_hf_get_float(t, "rope_parameters.full_attention.rope_theta", &d, &err), GEMMAC_OK);
    assert_true(d == 1e6);
    assert_int_equal(gm_hf_get_float(t, "rope_parameters.full_attention.partial_rotary_factor", &d, &err), GEMMAC_OK);
    assert_true(d == 0.25);
    assert_int_equal(gm_hf_get_float(t, "rms_norm_eps", &d, &err), GEMMAC_OK);
    assert_true(d == 1e-6);
    assert_int_equal(gm_hf_get_float(t, "sliding_window", &d, &err), GEMMAC_OK);   /* integers are numbers */
    assert_true(d == 512.0);

    bool b;
    assert_int_equal(gm_hf_get_bool(c, "tie_word_embeddings", &b, &err), GEMMAC_OK);
    assert_true(b);
    assert_int_equal(gm_hf_get_bool(t, "use_double_wide_mlp", &b, &err), GEMMAC_OK);
    assert_true(b);
    assert_int_equal(gm_hf_get_bool(t, "attention_k_eq_v", &b, &err), GEMMAC_OK);
    assert_false(b);
    assert_int_equal(gm_hf_get_bool_or_str(t, "use_bidirectional_attention", &b, &s, &err), GEMMAC_OK);
    assert_string_equal(s, "vision");

    const char *types[8];
    size_t n;
    assert_int_equal(gm_hf_get_str_arr(t, "layer_types", types, 8, &n, &err), GEMMAC_OK);
    assert_int_equal(n, 5);
    assert_string_equal(types[0], "sliding_attention");
    assert_string_equal(types[4], "full_attention");
    check_err(gm_hf_get_str_arr(t, "layer_types", types, 4, &n, &err), &err, GEMMAC_ERR_BUFFER_TOO_SMALL,
              "key 'text_config.layer_types': 5 elements, room for 4");
    assert_int_equal(n, 5);

    int64_t inter[5];
    assert_int_equal(gm_hf_get_int_per_layer(t, "intermediate_size", 5, 1, 1 << 20, inter, &err), GEMMAC_OK);
    assert_int_equal(inter[0], 6144);
    assert_int_equal(inter[4], 12288);
    check_err(gm_hf_get_int_per_layer(t, "intermediate_size", 4, 1, 1 << 20, inter, &err), &err, GEMMAC_ERR_BAD_FILE,
              "key 'text_config.intermediate_size': 5 per-layer values for 4 layers");
    check_err(gm_hf_get_int_per_layer(t, "intermediate_size", 5, 1, 10000, inter, &err), &err, GEMMAC_ERR_BAD_FILE,
              "key 'text_config.intermediate_size' element 3: value 12288 is out of range [1, 10000]");
    check_err(gm_hf_get_int_per_layer(t, "layer_types", 5, 1, 10, inter, &err), &err, GEMMAC_ERR_BAD_FILE,
              "element 0: expected an integer, found string");

    int64_t eos[4];
    assert_int_equal(gm_hf_get_int_arr(c, "eos_token_id", 0, 1 << 20, eos, 4, &n, &err), GEMMAC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(eos[1], 106);

    const char *keys[4];
    assert_int_equal(gm_hf_get_keys(t, "rope_parameters", keys, 4, &n, &err), GEMMAC_OK);
    assert_int_equal(n, 2);
    assert_string_equal(keys[0], "full_attention");
    assert_string_equal(keys[1], "sliding_attention");
    assert_int_equal(gm_hf_get_keys(t, "per_layer_config", keys, 4, &n, &err), GEMMAC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(keys[0], "4");
    check_err(gm_hf_get_keys(t, "layer_types", keys, 4, &n, &err), &err, GEMMAC_ERR_BAD_FILE,
              "expected an object, found array");

    /* wrong types name the key and both types */
    check_err(gm_hf_get_int(t, "layer_types", 0, 1, &v, &err), &err, GEMMAC_ERR_BAD_FILE,
              "config.json: key 'text_config.layer_types': expected an integer, found array");
    check_err(gm_hf_get_str(t, "hidden_size", &s, &err), &err, GEMMAC_ERR_BAD_FILE,
              "key 'text_config.hidden_size': expected a string, found number");
    check_err(gm_hf_get_bool(t, "use_bidirectional_attention", &b, &err), &err, GEMMAC_ERR_BAD_FILE,
              "expected a bool, found string");
    check_err(gm_hf_get_float(t, "model_type", &d, &err), &err, GEMMAC_ERR_BAD_FILE, "expected a number, found string");
    check_err(gm_hf_get_int(t, "hidden_size", 1, 1024, &v, &err), &err, GEMMAC_ERR_BAD_FILE,
              "key 'text_config.hidden_size': value 1536 is out of range [1, 1024]");
    check_err(gm_hf_get_int(NULL, "hidden_size", 1, 1024, &v, &err), &err, GEMMAC_ERR_INVALID_ARG, "NULL");
    check_err(gm_hf_get_int(t, "hidden_size", 1, 1024, NULL, &err), &err, GEMMAC_ERR_INVALID_ARG, "NULL");
    gm_hf_config_close(c);
}

static void test_flat(void **state) {
    (void)state;
    gm_hf_config *c = parse_ok(k_flat);
    gm_error err;
    gm_hf_model_id id;
    assert_int_equal(gm_hf_config_model_id(c, &id, &err), GEMMAC_OK);
    assert_string_equal(id.architecture, "Gemma4ForCausalLM");
    assert_string_equal(id.model_type, "gemma4_text");
    assert_string_equal(id.text_model_type, "gemma4_text");
    assert_false(gm_hf_config_is_nested(c));
    assert_ptr_equal(gm_hf_config_text(c), c);

    int64_t v, arr[4];
    double d, fl[4];
    bool b, bs[4];
    const char *s;
    size_t n;
    assert_int_equal(gm_hf_get_int(c, "query_pre_attn_scalar", 1, 4096, &v, &err), GEMMAC_OK);
    assert_int_equal(v, 168);
    int64_t per[3];
    assert_int_equal(gm_hf_get_int_per_layer(c, "intermediate_size", 3, 1, 1 << 20, per, &err), GEMMAC_OK);
    assert_true(per[0] == 10240 && per[2] == 10240);
    assert_int_equal(gm_hf_get_float(c, "rope_scaling.factor", &d, &err), GEMMAC_OK);
    assert_true(d == 8.0);
    assert_int_equal(gm_hf_get_int(c, "rope_theta", 1, INT64_MAX, &v, &err), GEMMAC_OK);
    assert_int_equal(v, 1000000);
    assert_int_equal(gm_hf_kind_of(c, "final_logit_softcapping"), GM_HF_NULL);
    assert_int_equal(gm_hf_get_bool_or_str(c, "use_bidirectional_attention", &b, &s, &err), GEMMAC_OK);
    assert_false(b);
    assert_null(s);
    check_err(gm_hf_get_bool_or_str(c, "num_experts", &b, &s, &err), &err, GEMMAC_ERR_BAD_FILE,
              "expected a bool or a string, found number");
    assert_int_equal(gm_hf_get_int(c, "neg", INT64_MIN, 0, &v, &err), GEMMAC_OK);
    assert_int_equal(v, -3);
    check_err(gm_hf_get_int(c, "neg", 0, 10, &v, &err), &err, GEMMAC_ERR_BAD_FILE, "value -3 is out of range [0, 10]");
    check_err(gm_hf_get_int(c, "frac", 0, 10, &v, &err), &err, GEMMAC_ERR_BAD_FILE,
              "key 'frac': value 1.5 is not an integer below 2^53");
    check_err(gm_hf_get_int(c, "big", 0, INT64_MAX, &v, &err), &err, GEMMAC_ERR_BAD_FILE, "not an integer below 2^53");
    check_err(gm_hf_get_float(c, "huge", &d, &err), &err, GEMMAC_ERR_BAD_FILE, "key 'huge': value is not finite");
    assert_int_equal(gm_hf_get_bool_arr(c, "bools", bs, 4, &n, &err), GEMMAC_OK);
    assert_int_equal(n, 3);
    assert_true(bs[0] && !bs[1] && bs[2]);
    assert_int_equal(gm_hf_get_float_arr(c, "floats", fl, 4, &n, &err), GEMMAC_OK);
    assert_int_equal(n, 3);
    assert_true(fl[0] == 0.5 && fl[1] == 2.0 && fl[2] == -1000.0);
    check_err(gm_hf_get_int_arr(c, "mixed", 0, 10, arr, 4, &n, &err), &err, GEMMAC_ERR_BAD_FILE,
              "key 'mixed' element 2: expected an integer, found string");
    check_err(gm_hf_get_float_arr(c, "mixed", fl, 4, &n, &err), &err, GEMMAC_ERR_BAD_FILE,
              "key 'mixed' element 2: expected a number, found string");
    check_err(gm_hf_get_bool_arr(c, "mixed", bs, 4, &n, &err), &err, GEMMAC_ERR_BAD_FILE,
              "key 'mixed' element 0: expected a bool, found number");
    check_err(gm_hf_get_str_arr(c, "mixed", &s, 1, &n, &err), &err, GEMMAC_ERR_BUFFER_TOO_SMALL, "3 elements, room for 1");
    check_err(gm_hf_get_int_arr(c, "hidden_size", 0, 10, arr, 4, &n, &err), &err, GEMMAC_ERR_BAD_FILE,
              "key 'hidden_size': expected an array, found number");
    check_err(gm_hf_get_int_arr(c, "absent", 0, 10, arr, 4, &n, &err), &err, GEMMAC_ERR_NOT_FOUND, "key 'absent' not found");
    gm_hf_config_close(c);
}

static void test_model_id(void **state) {
    (void)state;
    gm_hf_config *c = parse_ok("{\"model_type\": \"gemma3\", \"text_config\": {\"hidden_size\": 2}}");
    gm_hf_model_id id;
    gm_error err;
    assert_int_equal(gm_hf_config_model_id(c, &id, &err), GEMMAC_OK);
    assert_null(id.architecture);
    assert_string_equal(id.model_type, "gemma3");
    assert_null(id.text_model_type);
    gm_hf_config_close(c);

    c = parse_ok("{\"architectures\": [\"A\"], \"text_config\": null}");
    check_err(gm_hf_config_model_id(c, &id, &err), &err, GEMMAC_ERR_NOT_FOUND, "key 'model_type' not found");
    assert_ptr_equal(gm_hf_config_text(c), c);
    gm_hf_config_close(c);
    c = parse_ok("{\"architectures\": [], \"model_type\": \"x\"}");
    check_err(gm_hf_config_model_id(c, &id, &err), &err, GEMMAC_ERR_BAD_FILE,
              "key 'architectures': expected a non-empty array of strings, found array");
    gm_hf_config_close(c);
    c = parse_ok("{\"architectures\": \"A\", \"model_type\": \"x\"}");
    check_err(gm_hf_config_model_id(c, &id, &err), &err, GEMMAC_ERR_BAD_FILE, "found string");
    gm_hf_config_close(c);
    c = parse_ok("{\"architectures\": [\"A\", 3], \"model_type\": \"x\"}");
    check_err(gm_hf_config_model_id(c, &id, &err), &err, GEMMAC_ERR_BAD_FILE, "key 'architectures' element 1");
    gm_hf_config_close(c);
    c = parse_ok("{\"model_type\": \"x\", \"text_config\": {\"model_type\": 3}}");
    check_err(gm_hf_config_model_id(c, &id, &err), &err, GEMMAC_ERR_BAD_FILE,
              "key 'text_config.model_type': expected a string, found number");
    gm_hf_config_close(c);
    c = parse_ok("{\"model_type\": 7}");
    check_err(gm_hf_config_model_id(c, &id, &err), &err, GEMMAC_ERR_BAD_FILE, "key 'model_type': expected a string");
    gm_hf_config_close(c);
}

static void test_malformed(void **state) {
    (void)state;
    expect_parse_fail("", GEMMAC_ERR_BAD_FILE, "config.json: empty JSON text at offset 0x0");
    expect_parse_fail(" \n", GEMMAC_ERR_BAD_FILE, "empty JSON text");
    expect_parse_fail("{\"a\": 1,}", GEMMAC_ERR_BAD_FILE, "config.json: malformed JSON at offset 0x");
    expect_parse_fail("{\"a\": NaN}", GEMMAC_ERR_BAD_FILE, "malformed JSON");
    expect_parse_fail("{\"a\": 1} {}", GEMMAC_ERR_BAD_FILE, "malformed JSON at offset 0x9");
    expect_parse_fail("{\"a\": \"x\\u0000y\"}", GEMMAC_ERR_BAD_FILE, "escaped NUL");
    expect_parse_fail("[1]", GEMMAC_ERR_BAD_FILE, "config.json: the top level is an array, expected an object");
    expect_parse_fail("3", GEMMAC_ERR_BAD_FILE, "the top level is not an object");
    expect_parse_fail("{\"hidden_size\": 1, \"hidden_size\": 2}", GEMMAC_ERR_BAD_FILE,
                      "config.json: duplicate key 'hidden_size' in the top-level object");
    expect_parse_fail("{\"text_config\": {\"a\": {\"b\": 1, \"b\": 1}}}", GEMMAC_ERR_BAD_FILE,
                      "duplicate key 'b' in object 'text_config.a'");
    expect_parse_fail("{\"x\": [{\"b\": 1, \"b\": 1}]}", GEMMAC_ERR_BAD_FILE, "duplicate key 'b' in object 'x.0'");
    expect_parse_fail("{\"a\\nb\": {\"x\": 1, \"x\": 2}}", GEMMAC_ERR_BAD_FILE,
                      "duplicate key 'x' in object 'a\\x0ab'");   /* names are shown escaped: one line */
    expect_parse_fail("{\"a\": \"x\ny\"}", GEMMAC_ERR_BAD_FILE,
                      "config.json: unescaped control character 0x0a in a string at offset 0x8");
    expect_parse_fail("{\"text_config\": 3}", GEMMAC_ERR_BAD_FILE, "key 'text_config': expected an object or null");
    /* nesting: 32 levels pass, 33 do not */
    char deep[200];
    for (int lv = 32; lv <= 33; lv++) {
        size_t o = 0;
        deep[o++] = '{';
        deep[o++] = '"';
        deep[o++] = 'a';
        deep[o++] = '"';
        deep[o++] = ':';
        for (int i = 1; i < lv; i++) deep[o++] = '[';
        for (int i = 1; i < lv; i++) deep[o++] = ']';
        deep[o++] = '}';
        deep[o] = '\0';
        if (lv == 32) gm_hf_config_close(parse_ok(deep));
        else expect_parse_fail(deep, GEMMAC_ERR_BAD_FILE, "config.json: nesting deeper than 32 levels at offset 0x24");
    }
    /* size cap, checked before any parsing */
    size_t big = GM_HF_MAX_CONFIG + 1;
    char *huge = malloc(big);
    assert_non_null(huge);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    gm_hf_config *c = (gm_hf_config *)1;
    gm_error err;
    gm_error_clear(&err);
    check_err(gm_hf_config_parse(huge, big, NULL, &c, &err), &err, GEMMAC_ERR_BAD_FILE,
              "config.json: 16777217 bytes exceeds the limit of 16777216 bytes");
    assert_null(c);
    free(huge);
    /* too many values */
    size_t nv = GM_HF_MAX_VALUES + 10;
    char *many = malloc(nv * 2 + 16);
    assert_non_null(many);
    size_t o = (size_t)sprintf(many, "{\"a\":[");
    for (size_t i = 0; i < nv; i++) {
        many[o++] = '0';
        many[o++] = ',';
    }
    many[o++] = '0';
    many[o++] = ']';
    many[o++] = '}';
    many[o] = '\0';
    expect_parse_fail(many, GEMMAC_ERR_BAD_FILE, "more than 1048576 JSON values");
    free(many);

    /* every proper prefix of a valid config is refused */
    size_t n = strlen(k_gemma4);
    for (size_t cut = 0; cut < n; cut++) {
        c = (gm_hf_config *)1;
        gemmac_status st = parse_copy(k_gemma4, cut, &c, &err);
        if (st != GEMMAC_ERR_BAD_FILE) fail_msg("prefix of %zu bytes: status %d (%s)", cut, st, err.msg);
        assert_null(c);
    }
}

static void test_open_file(void **state) {
    (void)state;
    char dir[] = "/tmp/gm_hf_test_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(k_gemma4, f);
    assert_int_equal(fclose(f), 0);
    gm_hf_config *c;
    gm_error err;
    gm_error_clear(&err);
    assert_int_equal(gm_hf_config_open(path, &c, &err), GEMMAC_OK);
    int64_t v;
    check_err(gm_hf_get_int(gm_hf_config_text(c), "vocab_size", 1, 100, &v, &err), &err, GEMMAC_ERR_BAD_FILE,
              "/config.json: key 'text_config.vocab_size': value 262144 is out of range [1, 100]");
    gm_hf_config_close(c);
    /* a file over the cap is refused without reading it */
    assert_int_equal(truncate(path, (off_t)GM_HF_MAX_CONFIG + 1), 0);
    c = (gm_hf_config *)1;
    check_err(gm_hf_config_open(path, &c, &err), &err, GEMMAC_ERR_BAD_FILE, "exceeds the limit of 16777216 bytes");
    assert_null(c);
    assert_int_equal(unlink(path), 0);
    check_err(gm_hf_config_open(path, &c, &err), &err, GEMMAC_ERR_IO, "cannot open");
    check_err(gm_hf_config_open(dir, &c, &err), &err, GEMMAC_ERR_IO, "is a directory");
    assert_int_equal(rmdir(dir), 0);
    gm_hf_config_close(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma4_nested),
        cmocka_unit_test(test_flat),
        cmocka_unit_test(test_model_id),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_open_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
