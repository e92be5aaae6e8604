/* cmd_bench.c: `gemmac bench`: prompt processing (ppN: one batch of N tokens) and text generation (tgN: N
 * batches of one token) speed on an empty sequence, repeated -r times after one warm-up, printed as a
 * table like llama-bench's (tokens/s, mean ± standard deviation). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static bool parse_list(const char *s, long *v, int *n, int max) {
    *n = 0;
    char buf[256];
    if (strlen(s) >= sizeof buf) return false;
    strcpy(buf, s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n == max || !cli_int(tok, 0, 1 << 20, &v[*n])) return false;
        (*n)++;
    }
    return *n > 0;
}

/* One run: seconds taken, or a negative number after an error. */
static double run_once(gemmac_ctx *c, const gemmac_token *toks, int32_t n, bool one_by_one) {
    gemmac_ctx_seq_truncate(c, 0, 0);
    int32_t *pos = malloc(sizeof *pos * (size_t)n), *seq = calloc((size_t)n, sizeof *seq);
    if (!pos || !seq) {
        free(pos);
        free(seq);
        return -1;
    }
    for (int32_t i = 0; i < n; i++) pos[i] = i;
    const double t0 = cli_now_ms();
    gemmac_status st = GEMMAC_OK;
    if (one_by_one) {
        for (int32_t i = 0; i < n && st == GEMMAC_OK; i++) {
            gemmac_batch b = {.n_tokens = 1, .token = toks + i, .pos = pos + i, .seq_id = seq};
            st = gemmac_ctx_decode(c, &b);
        }
    } else {
        gemmac_batch b = {.n_tokens = n, .token = toks, .pos = pos, .seq_id = seq};
        st = gemmac_ctx_decode(c, &b);
    }
    const double dt = (cli_now_ms() - t0) / 1e3;
    free(pos);
    free(seq);
    return st == GEMMAC_OK ? dt : -1;
}

int cmd_bench(int argc, char **argv) {
    cli_opts o;
    if (!cli_parse("bench", argc, argv, 2, &o)) return 2;
    long pp[16], tg[16];
    int n_pp, n_tg;
    if (!parse_list(o.bench_p, pp, &n_pp, 16)) {
        fprintf(stderr, "gemmac bench: -p '%s' is not a list of token counts\n", o.bench_p);
        return 2;
    }
    if (!parse_list(o.bench_n, tg, &n_tg, 16)) {
        fprintf(stderr, "gemmac bench: -n '%s' is not a list of token counts\n", o.bench_n);
        return 2;
    }
    long max_tokens = 1;
    for (int i = 0; i < n_pp; i++) max_tokens = pp[i] > max_tokens ? pp[i] : max_tokens;
    for (int i = 0; i < n_tg; i++) max_tokens = tg[i] > max_tokens ? tg[i] : max_tokens;
    o.no_progress = true;
    gemmac_model *m = cli_load_model("bench", &o);
    if (!m) return 1;
    if (o.n_ctx == 0) o.n_ctx = (int32_t)max_tokens;
    if (o.n_batch < max_tokens && o.n_batch == 512) o.n_batch = (int32_t)(max_tokens < 4096 ? max_tokens : 4096);
    gemmac_ctx *c = cli_new_ctx("bench", m, &o, 1);
    if (!c) {
        gemmac_model_free(m);
        return 1;
    }
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    gemmac_token *toks = malloc(sizeof *toks * (size_t)max_tokens);
    uint64_t x = 88172645463325252ull; /* xorshift: fixed pseudo-random ids, like llama-bench's random tokens */
    for (long i = 0; toks && i < max_tokens; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        toks[i] = i == 0 && info.bos >= 0 ? info.bos : (gemmac_token)(x % (uint64_t)info.n_vocab);
    }
    const int threads = o.n_threads > 0 ? o.n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    printf("| model                          |       size |     params | backend | threads |          test |                  t/s |\n");
    printf("| ------------------------------ | ---------: | ---------: | ------- | ------: | ------------: | -------------------: |\n");
    int ret = 0;
    for (int pass = 0; pass < 2 && toks; pass++) {
        const int n_tests = pass == 0 ? n_pp : n_tg;
        for (int ti = 0; ti < n_tests; ti++) {
            const int32_t n = (int32_t)(pass == 0 ? pp[ti] : tg[ti]);
            if (n == 0) continue;
            double sum = 0, sum2 = 0;
            int ok = 0;
            for (int r = 0; r <= o.reps; r++) {
                const double dt = run_once(c, toks, n, pass == 1);
                if (dt < 0) {
                    fprintf(stderr, "gemmac bench: %s\n", gemmac_ctx_last_error(c));
                    ret = 1;
                    break;
                }
                if (r == 0) continue; /* warm-up */
                const double tps = n / dt;
                sum += tps;
                sum2 += tps * tps;
                ok++;
            }
            if (!ok) continue;
            const double mean = sum / ok, sd = ok > 1 ? sqrt(fmax(0, (sum2 - sum * sum / ok) / (ok - 1))) : 0;
            char test[32], label[64];
            snprintf(test, sizeof test, "%s%d", pass == 0 ? "pp" : "tg", n);
            snprintf(label, sizeof label, "%s %s", info.arch, info.name);
            printf("| %-30.30s | %6.2f MiB | %8.2f M | %-7s | %7d | %13s | %12.2f ± %5.2f |\n", label,
                   info.weight_bytes / 1048576.0, info.n_params / 1e6, o.n_gpu_layers ? "cuda" : "cpu", threads,
                   test, mean, sd);
            fflush(stdout);
        }
    }
    free(toks);
    gemmac_ctx_free(c);
    gemmac_model_free(m);
    return ret;
}
