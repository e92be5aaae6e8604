/* test_hf_fixtures.c: every Gemma 3 / 3n / 4 variant against Hugging Face transformers. Each directory
 * tests/golden/hf/<variant>/ holds a tiny random-weight model saved by transformers (config.json +
 * model.safetensors) and ref.bin, transformers' float32 logits at every position of a fixed sequence and its
 * greedy continuation (made by tests/golden/make_hf_fixtures.py). For each variant, loaded from the directory
 * and from a GGUF of the same weights (`gemmac convert DIR -o F --type f32`), with an f32 KV cache:
 *   - max |logit - reference| <= 1e-4 · max |reference logit| at every position (prefill in one batch);
 *   - the same prefill token by token gives the same logits (batch invariance, bit for bit);
 *   - the greedy continuation, fed back token by token, is identical.
 * The same models rewritten as multimodal checkpoints are published (text_config nested, tensors under
 * model.language_model., a vision tensor, two shards and an index) give the same logits; a converted
 * checkpoint with a tokenizer.json keeps its vocabulary. A checkpoint with a broken config.json or a missing /
 * misshapen tensor is refused with a message naming the problem. GEMMAC_FIXTURE=name runs one variant. */
#include <math.h>
#include <setjmp.h>
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
#include "io/safetensors.h"
#include "safetensors_builder.h"
#include "hf_reference.h"
#include "test_paths.h"

#define REL_TOL 1e-4

static const char *const g_variants[] = {
    "gemma3",       "gemma3_linear_rope", "gemma3n",        "gemma4_ple_kvshare", "gemma4_double_wide",
    "gemma4_k_eq_v", "gemma4_moe",        "gemma4_unified", "gemma4_bf16",
};
#define N_VARIANTS (sizeof g_variants / sizeof g_variants[0])

static gemmac_ctx *new_ctx(gemmac_model *m) {
    gemmac_ctx_params cp = gemmac_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 32;
    cp.n_threads = 2;
    cp.type_kv = GEMMAC_KV_F32;
    gemmac_ctx *c = NULL;
    char err[512];
    if (gemmac_ctx_new(m, &cp, &c, err, sizeof err) != GEMMAC_OK) fail_msg("context: %s", err);
    return c;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Feeds one token at pos and returns its logits. */
static const float *step(gemmac_ctx *c, int32_t token, int32_t pos) {
    const int32_t seq = 0;
    const int8_t want = 1;
    gemmac_batch b = {.n_tokens = 1, .token = &token, .pos = &pos, .seq_id = &seq, .logits = &want};
    if (gemmac_ctx_decode(c, &b) != GEMMAC_OK) fail_msg("decode: %s", gemmac_ctx_last_error(c));
    return gemmac_ctx_logits(c, 0);
}

/* All checks of one model (a directory or a GGUF) against its variant's reference. */
static void check_model(const char *variant, const char *model_path, const reference *r) {
    gemmac_model *m = NULL;
    char err[1024];
    if (gemmac_model_load(model_path, NULL, &m, err, sizeof err) != GEMMAC_OK) fail_msg("%s: %s", variant, err);
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    assert_int_equal(info.n_vocab, (int)r->n_vocab);
    const int V = (int)r->n_vocab, n = (int)r->n;

    /* prefill of the whole sequence in one batch, logits everywhere */
    gemmac_ctx *c = new_ctx(m);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n), *seq = calloc((size_t)n, sizeof(int32_t));
    int8_t *want = malloc((size_t)n);
    float *prefill = malloc(sizeof(float) * (size_t)n * V);
    assert_non_null(pos), assert_non_null(seq), assert_non_null(want), assert_non_null(prefill);
    for (int i = 0; i < n; i++) pos[i] = i, want[i] = 1;
    gemmac_batch b = {.n_tokens = n, .token = r->tokens, .pos = pos, .seq_id = seq, .logits = want};
    if (gemmac_ctx_decode(c, &b) != GEMMAC_OK) fail_msg("%s: decode: %s", variant, gemmac_ctx_last_error(c));
    float ref_max = 0.0f, worst = 0.0f;
    int worst_pos = 0;
    for (int i = 0; i < n; i++) {
        const float *got = gemmac_ctx_logits(c, i), *ref = r->logits + (size_t)i * V;
        assert_non_null(got);
        memcpy(prefill + (size_t)i * V, got, sizeof(float) * (size_t)V);
        for (int j = 0; j < V; j++) {
            if (fabsf(ref[j]) > ref_max) ref_max = fabsf(ref[j]);
            const float d = fabsf(got[j] - ref[j]);
            if (!(d <= worst)) worst = isnan(d) ? INFINITY : d, worst_pos = i; /* NaN never passes */
        }
    }
    printf("  %-20s %-5s max |logit - ref| %.3g = %.3g x max |ref| (%.3f), worst at position %d\n", variant,
           strstr(model_path, ".gguf") ? "gguf" : "hf", worst, worst / ref_max, ref_max, worst_pos);
    if (!(worst <= REL_TOL * ref_max))
        fail_msg("%s (%s): max |logit - ref| = %g > %g x %g at position %d", variant, model_path, worst, REL_TOL,
                 ref_max, worst_pos);

    /* the same sequence token by token: the same logits, bit for bit */
    gemmac_ctx_free(c);
    c = new_ctx(m);
    for (int i = 0; i < n; i++) {
        const float *got = step(c, r->tokens[i], i);
        if (memcmp(got, prefill + (size_t)i * V, sizeof(float) * (size_t)V) != 0)
            fail_msg("%s: position %d: token-by-token logits differ from the prefill's", variant, i);
    }
    /* greedy continuation */
    int32_t next = argmax(prefill + (size_t)(n - 1) * V, V);
    for (uint32_t g = 0; g < r->n_gen; g++) {
        if (next != r->gen[g])
            fail_msg("%s: greedy step %u: token %d, transformers %d", variant, g, next, r->gen[g]);
        next = argmax(step(c, next, n + (int)g), V);
    }
    gemmac_ctx_free(c);
    gemmac_model_free(m);
    free(pos), free(seq), free(want), free(prefill);
}

static bool selected(const char *variant) {
    const char *only = getenv("GEMMAC_FIXTURE");
    return !only || !*only || strcmp(only, variant) == 0;
}

static void test_from_hf_directory(void **state) {
    (void)state;
    for (size_t v = 0; v < N_VARIANTS; v++) {
        if (!selected(g_variants[v])) continue;
        char rel[256], dir[4096];
        snprintf(rel, sizeof rel, "tests/golden/hf/%s", g_variants[v]);
        gm_test_source_path(rel, dir, sizeof dir);
        reference r = {0};
        if (!load_reference(dir, &r)) fail_msg("%s: cannot read %s/ref.bin", g_variants[v], dir);
        check_model(g_variants[v], dir, &r);
        free_reference(&r);
    }
}

/* Runs argv (NULL-terminated) with output to /dev/null unless it fails; returns the exit status. */
static int run_quiet(char *const argv[], const char *log) {
    fflush(stdout); /* or the child's freopen would print our buffered lines again */
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(fileno(stdout), 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_from_converted_gguf(void **state) {
    (void)state;
    const char *cli = getenv("GEMMAC_CLI");
    if (!cli || !*cli) skip();
    char tmpl[] = "/tmp/gemmac_hf_XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    for (size_t v = 0; v < N_VARIANTS; v++) {
        if (!selected(g_variants[v])) continue;
        char rel[256], dir[4096], out[4200], log[4200];
        snprintf(rel, sizeof rel, "tests/golden/hf/%s", g_variants[v]);
        gm_test_source_path(rel, dir, sizeof dir);
        snprintf(out, sizeof out, "%s/%s.gguf", tmpl, g_variants[v]);
        snprintf(log, sizeof log, "%s/%s.log", tmpl, g_variants[v]);
        char *argv[] = {(char *)cli, "convert", dir, "-o", out, "--type", "f32", NULL};
        const int rc = run_quiet(argv, log);
        if (rc != 0) fail_msg("%s: gemmac convert exited %d (log: %s)", g_variants[v], rc, log);
        reference r = {0};
        if (!load_reference(dir, &r)) fail_msg("%s: cannot read ref.bin", g_variants[v]);
        check_model(g_variants[v], out, &r);
        free_reference(&r);
        unlink(out);
        unlink(log);
    }
    rmdir(tmpl);
}

/* ---- broken checkpoints: a copy of the gemma3 fixture, edited ---- */

static bool copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    bool ok = a && b;
    char buf[65536];
    size_t k;
    while (ok && (k = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, k, b) == k;
    if (a) fclose(a);
    if (b && fclose(b) != 0) ok = false;
    return ok;
}

static bool write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    const bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) == (size_t)n) s[n] = '\0';
    else free(s), s = NULL;
    fclose(f);
    return s;
}

/* Replaces the first occurrence of `from` in s (malloc'd) by `to`. */
static char *replace(const char *s, const char *from, const char *to) {
    const char *at = strstr(s, from);
    if (!at) fail_msg("fixture config lacks %s", from);
    const size_t a = (size_t)(at - s), n = strlen(s) + strlen(to) - strlen(from) + 1;
    char *r = malloc(n);
    snprintf(r, n, "%.*s%s%s", (int)a, s, to, at + strlen(from));
    return r;
}

static void expect_refused(const char *dir, gemmac_status want, const char *needle) {
    gemmac_model *m = NULL;
    char err[1024] = "";
    const gemmac_status st = gemmac_model_load(dir, NULL, &m, err, sizeof err);
    if (st == GEMMAC_OK) {
        gemmac_model_free(m);
        fail_msg("loaded a broken checkpoint (expected '%s')", needle);
    }
    if (st != want || !strstr(err, needle))
        fail_msg("status %s, message \"%s\"; expected %s with \"%s\"", gemmac_status_str(st), err,
                 gemmac_status_str(want), needle);
}

static void test_broken_checkpoints(void **state) {
    (void)state;
    char src[4096], cfg_src[4200], st_src[4200];
    gm_test_source_path("tests/golden/hf/gemma3", src, sizeof src);
    snprintf(cfg_src, sizeof cfg_src, "%s/config.json", src);
    snprintf(st_src, sizeof st_src, "%s/model.safetensors", src);
    char dir[] = "/tmp/gemmac_badhf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cfg[256], st[256];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    assert_true(copy_file(st_src, st));
    char *good = read_text(cfg_src);
    assert_non_null(good);

    struct {
        const char *from, *to;
        gemmac_status want;
        const char *needle;
    } cases[] = {
        {"\"hidden_size\": 64", "\"hidden_sizes\": 64", GEMMAC_ERR_BAD_FILE, "hidden_size is missing"},
        {"\"hidden_size\": 64", "\"hidden_size\": 65", GEMMAC_ERR_BAD_FILE, "embed_tokens.weight: shape"},
        {"\"num_hidden_layers\": 7", "\"num_hidden_layers\": 8", GEMMAC_ERR_BAD_FILE, "layer_types has 7 entries"},
        {"\"model_type\": \"gemma3_text\"", "\"model_type\": \"llama\"", GEMMAC_ERR_UNSUPPORTED, "'llama'"},
        {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", GEMMAC_ERR_BAD_FILE, "num_key_value_heads = 3"},
        {"\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": \"small\"", GEMMAC_ERR_BAD_FILE, "rms_norm_eps"},
        {"\"vocab_size\": 512", "\"vocab_size\": 512,", GEMMAC_ERR_BAD_FILE, "config.json"}, /* malformed JSON */
        {"\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"", GEMMAC_ERR_UNSUPPORTED, "'yarn'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *bad = replace(good, cases[i].from, cases[i].to);
        assert_true(write_text(cfg, bad));
        free(bad);
        expect_refused(dir, cases[i].want, cases[i].needle);
    }
    /* no config.json at all */
    unlink(cfg);
    expect_refused(dir, GEMMAC_ERR_IO, "config.json");
    /* a good config with a truncated safetensors file */
    assert_true(write_text(cfg, good));
    assert_int_equal(truncate(st, 1000), 0);
    expect_refused(dir, GEMMAC_ERR_BAD_FILE, "model.safetensors");
    unlink(st);
    unlink(cfg);
    rmdir(dir);
    free(good);
}

/* A checkpoint with a tokenizer.json: the converted GGUF carries the same vocabulary (same ids for the same
 * texts, special tokens included, and the same text back). */
static void test_convert_keeps_tokenizer(void **state) {
    (void)state;
    const char *cli = getenv("GEMMAC_CLI");
    if (!cli || !*cli) skip();
    char src[4096], from[4200], tok_src[4096];
    gm_test_source_path("tests/golden/hf/gemma3", src, sizeof src);
    gm_test_source_path("tests/golden/hf_tiny_tokenizer.json", tok_src, sizeof tok_src);
    char dir[] = "/tmp/gemmac_hftok_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char to[256], gguf[256], log[256];
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/%s", src, files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        assert_true(copy_file(from, to));
    }
    snprintf(to, sizeof to, "%s/tokenizer.json", dir);
    assert_true(copy_file(tok_src, to));
    snprintf(gguf, sizeof gguf, "%s/model.gguf", dir);
    snprintf(log, sizeof log, "%s/convert.log", dir);
    char *argv[] = {(char *)cli, "convert", dir, "-o", gguf, NULL};
    if (run_quiet(argv, log) != 0) fail_msg("gemmac convert failed (log: %s)", log);
    gemmac_model *a = NULL, *b = NULL;
    char err[1024];
    if (gemmac_model_load(dir, NULL, &a, err, sizeof err) != GEMMAC_OK) fail_msg("%s", err);
    if (gemmac_model_load(gguf, NULL, &b, err, sizeof err) != GEMMAC_OK) fail_msg("%s", err);
    const char *texts[] = {"Hello world", "  two  spaces and\nnewlines\n\n", "caf\xc3\xa9 \xe2\x82\xac 42",
                           "<start_of_turn>user\nhi<end_of_turn>", "", "\xf0\x9f\x98\x80 emoji"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (int flags = 0; flags < 4; flags++) {
            gemmac_token ta[256], tb[256];
            size_t na = 0, nb = 0;
            assert_int_equal(gemmac_tokenize(a, texts[i], strlen(texts[i]), flags, ta, 256, &na), GEMMAC_OK);
            assert_int_equal(gemmac_tokenize(b, texts[i], strlen(texts[i]), flags, tb, 256, &nb), GEMMAC_OK);
            if (na != nb || memcmp(ta, tb, na * sizeof *ta) != 0)
                fail_msg("text %zu flags %d: %zu ids from tokenizer.json, %zu from the converted GGUF", i, flags, na, nb);
        }
    gemmac_model_info ia, ib;
    gemmac_model_get_info(a, &ia);
    gemmac_model_get_info(b, &ib);
    assert_int_equal(ia.bos, ib.bos);
    assert_int_equal(ia.eos, ib.eos);
    assert_int_equal(ia.eot, ib.eot);
    gemmac_model_free(a);
    gemmac_model_free(b);
    unlink(gguf), unlink(log), unlink(to);
    for (int i = 0; i < 2; i++) {
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        unlink(to);
    }
    rmdir(dir);
}

/* A fixture rewritten as the multimodal checkpoints are published: config.json with the text model under
 * text_config (architectures *ForConditionalGeneration), tensors under "model.language_model.", a vision
 * tensor to ignore, and the weights split over two shards named by model.safetensors.index.json. */
static void write_multimodal_layout(const char *src_dir, const char *dir, const char *arch, const char *type) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", src_dir);
    gm_st *f = NULL;
    gm_error e = {0};
    if (gm_st_open(path, &f, &e) != GEMMAC_OK) fail_msg("%s", e.msg);
    gm_sb *shard[2] = {gm_sb_new(), gm_sb_new()};
    size_t cap = 1 << 16, len = 0;
    char *index = malloc(cap);
    len += (size_t)snprintf(index + len, cap - len, "{\"metadata\": {}, \"weight_map\": {");
    const uint64_t n = gm_st_n_tensors(f);
    for (uint64_t i = 0; i < n; i++) {
        const gm_st_tensor *t = gm_st_tensor_at(f, i);
        char name[512];
        assert_true(strncmp(t->name, "model.", 6) == 0);
        snprintf(name, sizeof name, "model.language_model.%s", t->name + 6);
        const int k = (int)(i % 2);
        gm_sb_tensor(shard[k], name, gm_st_dtype_name(t->dtype), t->n_dims, t->shape, t->data);
        len += (size_t)snprintf(index + len, cap - len, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                                i ? ", " : "", name, k + 1);
        assert_true(len < cap - 256);
    }
    gm_sb_tensor(shard[0], "model.vision_tower.patch_embedder.input_proj.weight", "F32", 2, (int64_t[]){4, 4}, NULL);
    len += (size_t)snprintf(index + len, cap - len,
                            ", \"model.vision_tower.patch_embedder.input_proj.weight\": \"model-00001-of-00002.safetensors\"}}");
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/model-0000%d-of-00002.safetensors", dir, k + 1);
        assert_true(gm_sb_write_file(shard[k], path));
        gm_sb_free(shard[k]);
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    assert_true(write_text(path, index));
    free(index);
    gm_st_close(f);
    snprintf(path, sizeof path, "%s/config.json", src_dir);
    char *text_cfg = read_text(path);
    assert_non_null(text_cfg);
    const size_t cn = strlen(text_cfg) + 512;
    char *cfg = malloc(cn);
    snprintf(cfg, cn,
             "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"vision_config\": {\"hidden_size\": 4},\n"
             " \"text_config\": %s}\n",
             arch, type, text_cfg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_true(write_text(path, cfg));
    free(cfg);
    free(text_cfg);
}

static void test_multimodal_checkpoint_layout(void **state) {
    (void)state;
    static const struct {
        const char *variant, *arch, *type;
    } cases[] = {
        {"gemma4_ple_kvshare", "Gemma4ForConditionalGeneration", "gemma4"},
        {"gemma4_unified", "Gemma4UnifiedForConditionalGeneration", "gemma4_unified"},
        {"gemma3n", "Gemma3nForConditionalGeneration", "gemma3n"},
        {"gemma3", "Gemma3ForConditionalGeneration", "gemma3"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (!selected(cases[c].variant)) continue;
        char rel[256], src[4096];
        snprintf(rel, sizeof rel, "tests/golden/hf/%s", cases[c].variant);
        gm_test_source_path(rel, src, sizeof src);
        char dir[] = "/tmp/gemmac_mm_XXXXXX";
        assert_non_null(mkdtemp(dir));
        write_multimodal_layout(src, dir, cases[c].arch, cases[c].type);
        reference r = {0};
        if (!load_reference(src, &r)) fail_msg("%s: cannot read ref.bin", cases[c].variant);
        check_model(cases[c].variant, dir, &r);
        free_reference(&r);
        const char *files[] = {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                               "model-00002-of-00002.safetensors"};
        for (size_t i = 0; i < 4; i++) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", dir, files[i]);
            unlink(p);
        }
        rmdir(dir);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_from_hf_directory),
        cmocka_unit_test(test_from_converted_gguf),
        cmocka_unit_test(test_broken_checkpoints),
        cmocka_unit_test(test_convert_keeps_tokenizer),
        cmocka_unit_test(test_multimodal_checkpoint_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
