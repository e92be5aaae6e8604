/* cmd_bench.c: `gemmac bench`: prompt processing (ppN: one batch of N tokens) and text generation (tgN: N
 * batches of one token) speed, after -d positions already in the cache (llama-bench's -d; default none), and
 * batched decoding (-npl B,..: B sequences, each holding those -d positions, advance together for -n steps, as
 * llama-batched-bench's -npl), each repeated -r times after one warm-up, printed as a table like llama-bench's
 * (tokens/s, mean ± standard deviation; batched: aggregate over the B sequences). Beside decoding rows: the GB/s
 * a step reads (the model's step_weight_bytes once, plus each sequence's K/V at its depth) and that as a share
 * of the measured copy bandwidth of the memory the context computes in. Decoding steps ask for each sequence's
 * best logits (GEMMAC_LOGITS_TOP), as run / chat / serve do with default sampling; --full-logits asks for whole
 * rows, as llama.cpp's benchmarks copy them. */
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

/* Fills the first n positions of sequence seq (untimed setup); false after an error. */
static bool fill(gemmac_ctx *c, const gemmac_token *toks, int32_t seq, int32_t n, int32_t n_batch) {
    if (gemmac_ctx_seq_truncate(c, seq, 0) != GEMMAC_OK) return false;
    int32_t *pos = malloc(sizeof *pos * (size_t)(n_batch > 0 ? n_batch : 1)), *sq = malloc(sizeof *sq * (size_t)(n_batch > 0 ? n_batch : 1));
    bool ok = pos && sq;
    for (int32_t i0 = 0; ok && i0 < n; i0 += n_batch) {
        const int32_t nb = n - i0 < n_batch ? n - i0 : n_batch;
        for (int32_t i = 0; i < nb; i++) pos[i] = i0 + i, sq[i] = seq;
        gemmac_batch b = {.n_tokens = nb, .token = toks + i0, .pos = pos, .seq_id = sq};
        ok = gemmac_ctx_decode(c, &b) == GEMMAC_OK;
    }
    free(pos);
    free(sq);
    return ok;
}

/* One run of B sequences (B = 1: pp or tg) after `depth` cached positions each: seconds taken, or a negative
 * number after an error. steps batches of B tokens (one per sequence), or, one_batch, a single batch of
 * `steps` tokens of sequence 0. */
static double run_once(gemmac_ctx *c, const gemmac_token *toks, int32_t B, int32_t depth, int32_t steps,
                       bool one_batch, int32_t n_batch, int8_t want_logits) {
    if (!fill(c, toks, 0, depth, n_batch)) return -1;
    for (int32_t s = 1; s < B; s++)
        if (gemmac_ctx_seq_copy(c, 0, s) != GEMMAC_OK) return -1;
    const int32_t n = one_batch ? steps : B;
    int32_t *pos = malloc(sizeof *pos * (size_t)n), *seq = malloc(sizeof *seq * (size_t)n);
    gemmac_token *tk = malloc(sizeof *tk * (size_t)n);
    if (!pos || !seq || !tk) {
        free(pos), free(seq), free(tk);
        return -1;
    }
    gemmac_status st = GEMMAC_OK;
    const double t0 = cli_now_ms();
    if (one_batch) {
        for (int32_t i = 0; i < n; i++) pos[i] = depth + i, seq[i] = 0;
        gemmac_batch b = {.n_tokens = n, .token = toks + depth, .pos = pos, .seq_id = seq};
        st = gemmac_ctx_decode(c, &b);
    } else {
        int8_t *want = malloc((size_t)n); /* every sequence's logits, as a server sampling each of them needs */
        if (!want) st = GEMMAC_ERR_NO_MEMORY;
        else memset(want, want_logits, (size_t)n);
        for (int32_t k = 0; k < steps && st == GEMMAC_OK; k++) {
            for (int32_t i = 0; i < n; i++)
                pos[i] = depth + k, seq[i] = i, tk[i] = toks[(depth + k + 7 * i) % (depth + steps)];
            gemmac_batch b = {.n_tokens = n, .token = tk, .pos = pos, .seq_id = seq, .logits = want};
            st = gemmac_ctx_decode(c, &b);
        }
        free(want);
    }
    const double dt = (cli_now_ms() - t0) / 1e3;
    free(pos), free(seq), free(tk);
    return st == GEMMAC_OK ? dt : -1;
}

/* GB/s a decoding step of B sequences at `depth` cached positions reads: the weights once, each sequence's K/V. */
static double step_gbytes(const gemmac_model_info *info, int32_t B, double depth) {
    const double sliding = info->sliding_window > 0 && depth > info->sliding_window ? info->sliding_window : depth;
    return (info->step_weight_bytes + B * (info->kv_pos_bytes_full * depth + info->kv_pos_bytes_sliding * sliding)) / 1e9;
}

int cmd_bench(int argc, char **argv) {
    cli_opts o;
    if (!cli_parse("bench", argc, argv, 2, &o)) return 2;
    long pp[16], tg[16], npl[16];
    int n_pp, n_tg, n_npl = 0;
    if (!parse_list(o.bench_p, pp, &n_pp, 16)) {
        fprintf(stderr, "gemmac bench: -p '%s' is not a list of token counts\n", o.bench_p);
        return 2;
    }
    if (!parse_list(o.bench_n, tg, &n_tg, 16)) {
        fprintf(stderr, "gemmac bench: -n '%s' is not a list of token counts\n", o.bench_n);
        return 2;
    }
    if (o.bench_npl && !parse_list(o.bench_npl, npl, &n_npl, 16)) {
        fprintf(stderr, "gemmac bench: -npl '%s' is not a list of sequence counts\n", o.bench_npl);
        return 2;
    }
    long max_tokens = 1, max_seq = 1;
    for (int i = 0; i < n_pp; i++) max_tokens = pp[i] > max_tokens ? pp[i] : max_tokens;
    for (int i = 0; i < n_tg; i++) max_tokens = tg[i] > max_tokens ? tg[i] : max_tokens;
    for (int i = 0; i < n_npl; i++) {
        if (npl[i] > 4096) {
            fprintf(stderr, "gemmac bench: -npl %ld: at most 4096 sequences\n", npl[i]);
            return 2;
        }
        max_seq = npl[i] > max_seq ? npl[i] : max_seq;
    }
    const long depth = o.bench_depth;
    o.no_progress = true;
    gemmac_model *m = cli_load_model("bench", &o);
    if (!m) return 1;
    if (o.n_ctx == 0) o.n_ctx = (int32_t)(depth + max_tokens);
    if (o.n_batch == 512 && o.n_batch < max_tokens) o.n_batch = (int32_t)(max_tokens < 4096 ? max_tokens : 4096);
    if (o.n_batch < max_seq) o.n_batch = (int32_t)max_seq; /* one step of B sequences is one batch */
    gemmac_ctx *c = cli_new_ctx("bench", m, &o, (int32_t)max_seq);
    if (!c) {
        gemmac_model_free(m);
        return 1;
    }
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    const long n_toks = depth + max_tokens;
    gemmac_token *toks = malloc(sizeof *toks * (size_t)n_toks);
    uint64_t x = 88172645463325252ull; /* xorshift: fixed pseudo-random ids, like llama-bench's random tokens */
    for (long i = 0; toks && i < n_toks; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        toks[i] = i == 0 && info.bos >= 0 ? info.bos : (gemmac_token)(x % (uint64_t)info.n_vocab);
    }
    const bool gpu = o.n_gpu_layers != 0;
    const double copy_gbps = gemmac_ctx_copy_gbps(c);
    const int threads = o.n_threads > 0 ? o.n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    printf("| model                          |       size |     params | backend | threads |          test |                  t/s |   GB/s | %% copy |\n");
    printf("| ------------------------------ | ---------: | ---------: | ------- | ------: | ------------: | -------------------: | -----: | -----: |\n");
    int ret = 0;
    for (int pass = 0; pass < 3 && toks; pass++) {
        const int n_tests = pass == 0 ? n_pp : pass == 1 ? n_tg : n_npl;
        for (int ti = 0; ti < n_tests && !ret; ti++) {
            /* pass 0: ppN; pass 1: tgN; pass 2: -npl B, -n steps (the first -n) */
            const int32_t n = (int32_t)(pass == 0 ? pp[ti] : pass == 1 ? tg[ti] : tg[0]);
            const int32_t B = pass == 2 ? (int32_t)npl[ti] : 1;
            if (n == 0 || B == 0) continue;
            double sum = 0, sum2 = 0;
            int ok = 0;
            for (int r = 0; r <= o.reps; r++) {
                const double dt = run_once(c, toks, B, (int32_t)depth, n, pass == 0, o.n_batch,
                                           o.bench_full_logits ? GEMMAC_LOGITS_FULL : GEMMAC_LOGITS_TOP);
                if (dt < 0) {
                    fprintf(stderr, "gemmac bench: %s\n", gemmac_ctx_last_error(c));
                    ret = 1;
                    break;
                }
                if (r == 0) continue; /* warm-up */
                const double tps = (double)n * B / dt;
                sum += tps;
                sum2 += tps * tps;
                ok++;
            }
            if (!ok) continue;
            const double mean = sum / ok, sd = ok > 1 ? sqrt(fmax(0, (sum2 - sum * sum / ok) / (ok - 1))) : 0;
            char test[48], label[64], gbs[16] = "-", share[16] = "-", at[24] = "";
            if (depth) snprintf(at, sizeof at, " @d%ld", depth);
            if (pass == 2) snprintf(test, sizeof test, "tg%d x%d%s", n, B, at);
            else snprintf(test, sizeof test, "%s%d%s", pass == 0 ? "pp" : "tg", n, at);
            if (pass != 0) { /* decoding: bytes a step reads at the run's mean depth, times steps per second */
                const double g = step_gbytes(&info, B, depth + n / 2.0) * mean / B;
                snprintf(gbs, sizeof gbs, "%.0f", g);
                if (copy_gbps > 0) snprintf(share, sizeof share, "%.0f%%", 100.0 * g / copy_gbps);
            }
            snprintf(label, sizeof label, "%s %s", info.arch, info.name);
            printf("| %-30.30s | %6.2f MiB | %8.2f M | %-7s | %7d | %13s | %12.2f ± %5.2f | %6s | %6s |\n", label,
                   info.weight_bytes / 1048576.0, info.n_params / 1e6, gpu ? "cuda" : "cpu", threads, test, mean, sd,
                   gbs, share);
            fflush(stdout);
        }
    }
    if (copy_gbps > 0)
        printf("\ncopy bandwidth of the %s memory: %.0f GB/s (read + written); GB/s above: a decoding step's "
               "weights (%.2f GB) and K/V, times steps/s\n",
               gpu ? "device" : "host", copy_gbps, info.step_weight_bytes / 1e9);
    free(toks);
    gemmac_ctx_free(c);
    gemmac_model_free(m);
    return ret;
}
