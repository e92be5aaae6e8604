/* test_cli.c: the gemmac binary ($GEMMAC_CLI; skipped when unset) run as a child process without a shell:
 * every bad input exits non-zero with stdout empty and exactly one stderr line naming the problem; on the
 * tiny model of tests/support/tiny_model.h, run / logits / info agree with the library called directly (logits also
 * with -ctk q8_0, on a variant with head_dim 32). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gemmac.h"
#include "test_paths.h"
#include "tiny_model.h"

extern char **environ;

#define MAX_ARGS 24
#define TIMEOUT_MS 120000 /* generous for sanitizer builds; the tiny model runs in milliseconds */

typedef struct fixture {
    const char *cli;
    char dir[64];
    char tiny[128];       /* the default tiny model */
    char greedy[128];     /* small embeddings: greedy decoding does not just echo the last token */
    char hd32[128];       /* head_dim 32: a q8_0 KV cache fits it */
    char llama[128];      /* general.architecture "llama" */
    char q2k[128];        /* one q2_K tensor */
    char text[128];       /* not a GGUF file */
    char trunc[128];      /* the tiny model cut in half */
    char out[128], err[128], logits[128];
} fixture;

static fixture g;

static bool write_model(const gm_tiny_opts *o, const char *path, size_t cut) {
    gm_tiny *t = gm_tiny_new(o);
    if (cut) t->file_size = cut < t->file_size ? cut : t->file_size;
    const bool ok = gm_tiny_write_file(t, path);
    gm_tiny_free(t);
    return ok;
}

static int group_setup(void **state) {
    (void)state;
    memset(&g, 0, sizeof g);
    g.cli = getenv("GEMMAC_CLI");
    if (!g.cli || !*g.cli) {
        g.cli = NULL;
        return 0;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(g.dir, sizeof g.dir, "%s/gemmac_cli_XXXXXX", tmp && *tmp && strlen(tmp) < 32 ? tmp : "/tmp");
    if (!mkdtemp(g.dir)) return -1;
#define PATH(field, name) snprintf(g.field, sizeof g.field, "%s/" name, g.dir)
    PATH(tiny, "tiny.gguf");
    PATH(greedy, "greedy.gguf");
    PATH(hd32, "hd32.gguf");
    PATH(llama, "llama.gguf");
    PATH(q2k, "q2k.gguf");
    PATH(text, "notes.txt");
    PATH(trunc, "truncated.gguf");
    PATH(out, "stdout.txt");
    PATH(err, "stderr.txt");
    PATH(logits, "logits.f32");
#undef PATH
    gm_tiny_opts o = gm_tiny_default_opts();
    if (!write_model(&o, g.tiny, 0)) return -1;
    gm_tiny *t = gm_tiny_new(&o);
    const size_t half = t->file_size / 2;
    gm_tiny_free(t);
    if (!write_model(&o, g.trunc, half)) return -1;
    o.embd_amp = 0.1f;
    if (!write_model(&o, g.greedy, 0)) return -1;
    o = gm_tiny_default_opts();
    o.head_dim = 32;
    if (!write_model(&o, g.hd32, 0)) return -1;
    o = gm_tiny_default_opts();
    o.arch = "llama";
    if (!write_model(&o, g.llama, 0)) return -1;
    o = gm_tiny_default_opts();
    o.retype_tensor = "blk.0.attn_v.weight";
    o.retype = GM_TYPE_Q2_K;
    if (!write_model(&o, g.q2k, 0)) return -1;
    FILE *f = fopen(g.text, "w");
    if (!f) return -1;
    fputs("hello, this is not a model\n", f);
    fclose(f);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    if (!g.cli) return 0;
    const char *files[] = {g.tiny, g.greedy, g.hd32, g.llama, g.q2k, g.text, g.trunc, g.out, g.err, g.logits};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(files[i]);
    rmdir(g.dir);
    return 0;
}

/* ==== running the binary ==== */

typedef struct result {
    int exit_code;             /* -1 if killed by a signal */
    char *out, *err;           /* NUL-terminated */
    size_t out_len, err_len;
} result;

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t cap = 4096, n = 0, r;
    char *s = malloc(cap);
    assert_non_null(s);
    while ((r = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n - 1 == 0) {
            s = realloc(s, cap *= 2);
            assert_non_null(s);
        }
    }
    fclose(f);
    s[n] = '\0';
    *len = n;
    return s;
}

/* Runs gemmac with args (NULL-terminated), stdin from the file in_path, stdout and stderr to files. */
static result run_cli_in(const char *const *args, const char *in_path) {
    char *argv[MAX_ARGS + 2];
    int n = 0;
    argv[n++] = (char *)g.cli;
    for (; *args; args++) {
        assert_true(n <= MAX_ARGS);
        argv[n++] = (char *)*args;
    }
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 0, in_path, O_RDONLY, 0), 0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 1, g.out, O_WRONLY | O_CREAT | O_TRUNC, 0600), 0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 2, g.err, O_WRONLY | O_CREAT | O_TRUNC, 0600), 0);
    pid_t pid;
    const int rc = posix_spawn(&pid, g.cli, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) fail_msg("cannot start %s: %s", g.cli, strerror(rc));
    int status = 0;
    for (int waited = 0;; waited += 5) {
        const pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) fail_msg("waitpid: %s", strerror(errno));
        if (waited >= TIMEOUT_MS) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fail_msg("%s %s ... did not finish in %d ms", g.cli, argv[1] ? argv[1] : "", TIMEOUT_MS);
        }
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(g.out, &r.out_len);
    r.err = slurp(g.err, &r.err_len);
    if (WIFSIGNALED(status))
        fail_msg("%s %s crashed with signal %d; stderr: %s", g.cli, argv[1] ? argv[1] : "", WTERMSIG(status), r.err);
    return r;
}

static result run_cli(const char *const *args) { return run_cli_in(args, "/dev/null"); }

static void free_result(result *r) {
    free(r->out);
    free(r->err);
}

static void describe(const char *const *args, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "gemmac");
    for (; *args && n < size; args++) n += (size_t)snprintf(buf + n, size - n, " %s", *args);
}

/* Expects a non-zero exit, nothing on stdout, and one stderr line containing every string of subs. */
static void expect_error(const char *const *args, const char *const *subs) {
    char cmd[512];
    describe(args, cmd, sizeof cmd);
    result r = run_cli(args);
    if (r.exit_code == 0) fail_msg("`%s` exited 0; stderr: %s", cmd, r.err);
    if (r.out_len) fail_msg("`%s` wrote to stdout: \"%s\"", cmd, r.out);
    const char *nl = strchr(r.err, '\n');
    if (r.err_len == 0 || !nl || nl != r.err + r.err_len - 1 || strchr(r.err, '\r') || r.err_len == 1)
        fail_msg("`%s`: stderr is not one line: \"%s\"", cmd, r.err);
    if (strncmp(r.err, "gemmac", 6) != 0) fail_msg("`%s`: stderr does not start with \"gemmac\": %s", cmd, r.err);
    for (; *subs; subs++)
        if (!strstr(r.err, *subs)) fail_msg("`%s`: stderr \"%s\" lacks \"%s\"", cmd, r.err, *subs);
    free_result(&r);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define EXPECT_ERROR(args, ...) expect_error(args, ARGS(__VA_ARGS__))
#define NEED_CLI()                                       \
    do {                                                 \
        if (!g.cli) skip(); /* GEMMAC_CLI is not set */ \
    } while (0)

/* ==== errors ==== */

static void test_bad_model_files(void **state) {
    (void)state;
    NEED_CLI();
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no_such_model.gguf", g.dir);
    /* info loads without a progress bar; run shows one on a terminal only */
    const char *cmds[] = {"info", "run"};
    for (int k = 0; k < 2; k++) {
        const char *c = cmds[k];
        EXPECT_ERROR(ARGS(c, "-m", missing, "--tokens", "2"), "no_such_model.gguf", "cannot open");
        EXPECT_ERROR(ARGS(c, "-m", g.dir, "--tokens", "2"), g.dir, "directory");
        EXPECT_ERROR(ARGS(c, "-m", g.text, "--tokens", "2"), "notes.txt", "magic");
        EXPECT_ERROR(ARGS(c, "-m", g.trunc, "--tokens", "2"), "truncated.gguf", "past the end");
        EXPECT_ERROR(ARGS(c, "-m", g.llama, "--tokens", "2"), "llama.gguf", "architecture 'llama'", "not supported");
        EXPECT_ERROR(ARGS(c, "-m", g.q2k, "--tokens", "2"), "blk.0.attn_v.weight", "q2_K", "not supported");
    }
}

/* A Hugging Face directory without tokenizer.json: ids work, text is refused by name, serve does not start. */
static void test_model_without_tokenizer(void **state) {
    (void)state;
    NEED_CLI();
    char dir[4096];
    gm_test_source_path("tests/golden/hf/gemma3", dir, sizeof dir);
    EXPECT_ERROR(ARGS("run", "-m", dir, "-p", "hello", "-n", "2"), "no tokenizer", "--tokens");
    EXPECT_ERROR(ARGS("chat", "-m", dir), "no tokenizer");
    /* serve says where it listens before it loads, then refuses */
    result r = run_cli(ARGS("serve", "-m", dir, "--port", "0"));
    assert_int_not_equal(r.exit_code, 0);
    assert_non_null(strstr(r.err, "gemmac serve: this model has no tokenizer"));
    free_result(&r);
    r = run_cli(ARGS("run", "-m", dir, "--tokens", "2,17,250", "-n", "3", "--temp", "0", "--no-progress"));
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, " ")); /* the ids, space-separated */
    free_result(&r);
}

static void test_bad_arguments(void **state) {
    (void)state;
    NEED_CLI();
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "-c", "4", "--tokens", "2,10,11,12,13,14,15,16,17,18"),
                 "10 tokens", "context of 4");
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "-n", "abc", "--tokens", "2"), "-n", "'abc'");
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "--temp", "x", "--tokens", "2"), "--temp", "'x'");
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "--top-p", "2", "--tokens", "2"), "--top-p", "'2'");
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "-c", "-5", "--tokens", "2"), "-c", "'-5'");
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "-t", "100000", "--tokens", "2"), "-t", "'100000'");
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "--frobnicate", "--tokens", "2"), "unknown option", "'--frobnicate'");
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "-n"), "-n", "needs a value");
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "--tokens", "2,x"), "--tokens", "'x'");
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "--tokens", "2,99999"), "99999", "outside the vocabulary");
    EXPECT_ERROR(ARGS("logits", "-m", g.tiny, "--tokens", "2,99999", "--out", g.logits), "99999",
                 "outside the vocabulary");
    EXPECT_ERROR(ARGS("frobnicate", "-m", g.tiny), "unknown command", "'frobnicate'");
    EXPECT_ERROR(ARGS("logits", "-m", g.tiny, "--tokens", "2,10"), "--out");
    EXPECT_ERROR(ARGS("bench", "-m", g.tiny, "-npl", "1,x"), "-npl", "'1,x'");
    EXPECT_ERROR(ARGS("bench", "-m", g.tiny, "-npl", "5000"), "-npl 5000", "4096");
    EXPECT_ERROR(ARGS("bench", "-m", g.tiny, "-d", "-3"), "-d", "'-3'");
    /* KV cache types: unknown ones by name (listing those there are), keys and values of one type, and q8_0 on head
     * sizes that are not multiples of 32 (the library's message) */
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "-ctk", "q4_1", "--tokens", "2"), "-ctk", "'q4_1'", "f16, f32 or q8_0");
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "-ctv", "q8", "--tokens", "2"), "-ctv", "'q8'");
    EXPECT_ERROR(ARGS("run", "-m", g.hd32, "-ctk", "q8_0", "-ctv", "f16", "--tokens", "2"), "-ctk q8_0", "-ctv f16",
                 "differ");
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "-ctk", "q8_0", "--tokens", "2"), "q8_0", "multiples of 32");
    /* a context larger than the model's: the library's message */
    EXPECT_ERROR(ARGS("run", "-m", g.tiny, "-c", "100000", "--tokens", "2"), "context size 100000");
}

/* ==== success paths against the library ==== */

static gemmac_model *load(const char *path) {
    gemmac_model *m = NULL;
    char err[256];
    if (gemmac_model_load(path, NULL, &m, err, sizeof err) != GEMMAC_OK) fail_msg("%s: %s", path, err);
    return m;
}

static void test_run_greedy_matches_library(void **state) {
    (void)state;
    NEED_CLI();
    const gemmac_token prompt[] = {2, 5, 9};
    const int n_prompt = 3, n_gen = 5;
    /* the library's greedy continuation, as the CLI computes it: prompt in one batch, then one token a call */
    gemmac_model *m = load(g.greedy);
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    gemmac_ctx *c = NULL;
    char err[256];
    assert_int_equal(gemmac_ctx_new(m, NULL, &c, err, sizeof err), GEMMAC_OK);
    gemmac_sampler_params sp = gemmac_sampler_default_params();
    sp.temp = 0;
    gemmac_sampler *s = gemmac_sampler_new(&sp, info.n_vocab);
    assert_non_null(s);
    int32_t pos[3] = {0, 1, 2}, seq[3] = {0, 0, 0};
    for (int i = 0; i < n_prompt; i++) gemmac_sampler_accept(s, prompt[i]);
    gemmac_batch b = {.n_tokens = n_prompt, .token = prompt, .pos = pos, .seq_id = seq, .logits = NULL};
    assert_int_equal(gemmac_ctx_decode(c, &b), GEMMAC_OK);
    const float *logits = gemmac_ctx_logits(c, n_prompt - 1);
    gemmac_token ids[5];
    char expect[128] = "";
    size_t len = 0;
    for (int i = 0; i < n_gen; i++) {
        ids[i] = gemmac_sampler_sample(s, logits);
        assert_false(gemmac_token_is_eog(m, ids[i])); /* the CLI would stop early */
        gemmac_sampler_accept(s, ids[i]);
        len += (size_t)snprintf(expect + len, sizeof expect - len, i ? " %d" : "%d", ids[i]);
        const int32_t p = n_prompt + i, zero = 0;
        gemmac_batch one = {.n_tokens = 1, .token = &ids[i], .pos = &p, .seq_id = &zero, .logits = NULL};
        assert_int_equal(gemmac_ctx_decode(c, &one), GEMMAC_OK);
        logits = gemmac_ctx_logits(c, 0);
    }
    snprintf(expect + len, sizeof expect - len, "\n");
    /* a continuation that is not one id repeated, so feeding back the wrong token would show */
    bool varied = false;
    for (int i = 1; i < n_gen; i++) varied |= ids[i] != ids[0];
    assert_true(varied);
    gemmac_sampler_free(s);
    gemmac_ctx_free(c);
    gemmac_model_free(m);

    result r = run_cli(ARGS("run", "-m", g.greedy, "--tokens", "2,5,9", "-n", "5", "--temp", "0", "--ids"));
    if (r.exit_code != 0) fail_msg("exit %d; stderr: %s", r.exit_code, r.err);
    if (strcmp(r.out, expect) != 0) fail_msg("gemmac run printed \"%s\", the library gives \"%s\"", r.out, expect);
    free_result(&r);
}

/* Greedy reply of the library to a rendered conversation, evaluated from scratch (at most n tokens, stopping
 * before an end-of-generation token), as text; malloc'd. */
static char *library_reply(gemmac_model *m, const gemmac_chat_msg *msgs, size_t n_msgs, int n) {
    char text[4096];
    size_t len = 0, n_ids = 0;
    assert_int_equal(gemmac_chat_render(m, msgs, n_msgs, true, text, sizeof text, &len), GEMMAC_OK);
    gemmac_token ids[1024];
    assert_int_equal(gemmac_tokenize(m, text, len, GEMMAC_TOKENIZE_PARSE_SPECIAL, ids, 1024, &n_ids), GEMMAC_OK);
    gemmac_ctx *c = NULL;
    char err[256];
    assert_int_equal(gemmac_ctx_new(m, NULL, &c, err, sizeof err), GEMMAC_OK);
    int32_t pos[1024], seq[1024] = {0};
    for (size_t i = 0; i < n_ids; i++) pos[i] = (int32_t)i;
    gemmac_batch b = {.n_tokens = (int32_t)n_ids, .token = ids, .pos = pos, .seq_id = seq, .logits = NULL};
    assert_int_equal(gemmac_ctx_decode(c, &b), GEMMAC_OK);
    const float *logits = gemmac_ctx_logits(c, (int32_t)n_ids - 1);
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    gemmac_detok *d = gemmac_detok_new(m);
    char *out = calloc(1, 4096), piece[512];
    size_t used = 0, np;
    for (int i = 0; i < n; i++) {
        gemmac_token t = 0;
        for (int32_t v = 1; v < info.n_vocab; v++)
            if (logits[v] > logits[t]) t = v;
        if (gemmac_token_is_eog(m, t)) break;
        if (gemmac_detok_push(d, t, piece, sizeof piece, &np) == GEMMAC_OK) {
            memcpy(out + used, piece, np);
            used += np;
        }
        if (i + 1 == n) break;
        const int32_t p = (int32_t)n_ids + i, zero = 0;
        gemmac_batch one = {.n_tokens = 1, .token = &t, .pos = &p, .seq_id = &zero, .logits = NULL};
        assert_int_equal(gemmac_ctx_decode(c, &one), GEMMAC_OK);
        logits = gemmac_ctx_logits(c, 0);
    }
    if (gemmac_detok_flush(d, piece, sizeof piece, &np) == GEMMAC_OK) {
        memcpy(out + used, piece, np);
        used += np;
    }
    out[used] = '\0';
    gemmac_detok_free(d);
    gemmac_ctx_free(c);
    return out;
}

/* `gemmac chat` keeps the conversation's KV cache between turns and evaluates only what is new; its second
 * reply must be exactly what the library gives for the whole conversation evaluated from scratch. */
static void test_chat_reuses_cache_exactly(void **state) {
    (void)state;
    NEED_CLI();
    gemmac_model *m = load(g.greedy);
    gemmac_chat_msg conv[3] = {{"user", "hi"}, {"assistant", NULL}, {"user", "ok"}};
    char *r1 = library_reply(m, conv, 1, 6);
    conv[1].content = r1;
    char *r2 = library_reply(m, conv, 3, 6);
    char expect[8192];
    snprintf(expect, sizeof expect, "%s\n%s\n", r1, r2);
    char in_path[160];
    snprintf(in_path, sizeof in_path, "%s/chat_in.txt", g.dir);
    FILE *f = fopen(in_path, "w");
    assert_non_null(f);
    fputs("hi\nok\n", f);
    fclose(f);
    result r = run_cli_in(ARGS("chat", "-m", g.greedy, "--temp", "0", "-n", "6"), in_path);
    unlink(in_path);
    if (r.exit_code != 0) fail_msg("exit %d; stderr: %s", r.exit_code, r.err);
    if (strcmp(r.out, expect) != 0) fail_msg("gemmac chat printed \"%s\", the library gives \"%s\"", r.out, expect);
    free_result(&r);
    free(r1);
    free(r2);
    gemmac_model_free(m);
}

/* `gemmac logits` with the KV cache type ctk (NULL: no -ctk, the default) on the model at path against the library
 * with type_kv: equal bit for bit. */
static void expect_logits_match_library(const char *path, const char *ctk, gemmac_kv_type type_kv) {
    const gemmac_token tok[] = {2, 10, 11, 150, 299, 0, 7, 7, 42, 3, 200, 201};
    const int n = (int)(sizeof tok / sizeof tok[0]);
    const char *const tokens = "2,10,11,150,299,0,7,7,42,3,200,201";
    result r = ctk ? run_cli(ARGS("logits", "-m", path, "--tokens", tokens, "--out", g.logits, "-ctk", ctk))
                   : run_cli(ARGS("logits", "-m", path, "--tokens", tokens, "--out", g.logits));
    if (r.exit_code != 0) fail_msg("exit %d; stderr: %s", r.exit_code, r.err);
    free_result(&r);
    size_t size;
    char *file = slurp(g.logits, &size);

    gemmac_model *m = load(path);
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    assert_int_equal(size, (size_t)n * (size_t)info.n_vocab * sizeof(float));
    gemmac_ctx *c = NULL;
    char err[256];
    gemmac_ctx_params cp = gemmac_ctx_default_params();
    cp.type_kv = type_kv;
    assert_int_equal(gemmac_ctx_new(m, &cp, &c, err, sizeof err), GEMMAC_OK);
    int32_t pos[12], seq[12];
    int8_t want[12];
    for (int i = 0; i < n; i++) pos[i] = i, seq[i] = 0, want[i] = 1;
    gemmac_batch b = {.n_tokens = n, .token = tok, .pos = pos, .seq_id = seq, .logits = want};
    assert_int_equal(gemmac_ctx_decode(c, &b), GEMMAC_OK);
    /* the same computation with the same parameters: equal bit for bit */
    for (int i = 0; i < n; i++) {
        const float *l = gemmac_ctx_logits(c, i);
        float row[512];
        assert_true(info.n_vocab <= 512);
        memcpy(row, file + (size_t)i * info.n_vocab * sizeof(float), sizeof(float) * (size_t)info.n_vocab);
        for (int v = 0; v < info.n_vocab; v++)
            if (row[v] != l[v])
                fail_msg("%s, -ctk %s: position %d, token %d: file %.9g, library %.9g", path, ctk ? ctk : "(none)", i,
                         v, row[v], l[v]);
    }
    free(file);
    gemmac_ctx_free(c);
    gemmac_model_free(m);
}

static void test_logits_match_library(void **state) {
    (void)state;
    NEED_CLI();
    expect_logits_match_library(g.tiny, NULL, GEMMAC_KV_F16);
    expect_logits_match_library(g.tiny, "f32", GEMMAC_KV_F32);
    expect_logits_match_library(g.hd32, "q8_0", GEMMAC_KV_Q8_0);
}

static void test_info(void **state) {
    (void)state;
    NEED_CLI();
    result r = run_cli(ARGS("info", "-m", g.tiny));
    if (r.exit_code != 0) fail_msg("exit %d; stderr: %s", r.exit_code, r.err);
    assert_non_null(strstr(r.out, "gemma3"));
    assert_non_null(strstr(r.out, "tiny-gemma3"));
    assert_int_equal(r.err_len, 0);
    free_result(&r);
}

/* bench: every test it was asked for gets a row (pp, tg, and one batched-decoding row per -npl value, at the
 * depth given), with a GB/s figure beside the decoding rows. */
static void test_bench_rows(void **state) {
    (void)state;
    NEED_CLI();
    result r = run_cli(ARGS("bench", "-m", g.tiny, "-p", "8", "-n", "4", "-npl", "1,3", "-d", "5", "-r", "1", "-t", "1"));
    if (r.exit_code != 0) fail_msg("exit %d; stderr: %s", r.exit_code, r.err);
    static const char *const rows[] = {"pp8 @d5", "tg4 @d5", "tg4 x1 @d5", "tg4 x3 @d5"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (!strstr(r.out, rows[i])) fail_msg("no row \"%s\" in:\n%s", rows[i], r.out);
    assert_non_null(strstr(r.out, "copy bandwidth"));
    free_result(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_rows),
        cmocka_unit_test(test_bad_model_files),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_model_without_tokenizer),
        cmocka_unit_test(test_run_greedy_matches_library),
        cmocka_unit_test(test_logits_match_library),
        cmocka_unit_test(test_chat_reuses_cache_exactly),
        cmocka_unit_test(test_info),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
