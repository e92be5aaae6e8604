/* cli.h: what the gemmac commands share: the parsed options (llama.cpp's flag names and defaults), strict
 * number parsing, default-model discovery, and loading with a progress bar. Each command is one file. */
#ifndef GM_CLI_H
#define GM_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "gemmac.h"

/* What text commands print for a model without a tokenizer (gemmac_tokenize: GEMMAC_ERR_UNSUPPORTED). */
#define CLI_NO_TOKENIZER \
    "this model has no tokenizer (a Hugging Face directory without tokenizer.json): pass token ids (--tokens)"

typedef struct cli_opts {
    const char *model;         /* -m */
    const char *prompt;        /* -p */
    const char *prompt_file;   /* -f */
    const char *tokens;        /* --tokens 2,651,... */
    const char *out;           /* --out FILE */
    const char *system;        /* --system TEXT (chat) */
    int32_t n_predict;         /* -n, -1: until end of generation or context */
    int32_t n_ctx;             /* -c, 0: model's (capped at 4096) */
    int32_t n_batch;           /* -b */
    int32_t n_threads;         /* -t, 0: all cores */
    int32_t n_gpu_layers;      /* -ngl N|all: 0 (default) CPU, -1 (all) or >= the layers: the CUDA backend */
    const char *cache_type_k, *cache_type_v; /* -ctk / -ctv: "f16", "f32" or "q8_0" */
    gemmac_sampler_params sp;  /* --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n
                                  --presence-penalty --frequency-penalty -s */
    bool ignore_eos, chat, ids, no_progress;
    /* bench */
    const char *bench_p, *bench_n; /* -p / -n lists for bench, e.g. "512" or "128,256" */
    const char *bench_npl;     /* -npl 1,8,64: concurrent sequences of the batched-decoding test (NULL: none) */
    int32_t bench_depth;       /* -d: positions already in each sequence's cache when a test starts */
    bool bench_full_logits;    /* --full-logits: decoding steps copy whole rows of logits, not their best */
    int32_t reps;              /* -r */
} cli_opts;

/* Parses argv[first..] into o. On error prints "gemmac CMD: message" and returns false. */
bool cli_parse(const char *cmd, int argc, char **argv, int first, cli_opts *o);
/* Strict parsers: the whole string must be a number within [lo, hi]. */
bool cli_int(const char *s, long lo, long hi, long *out);
bool cli_float(const char *s, double lo, double hi, double *out);
/* Parses "2,651,7" into ids (malloc'd); false with a message in err on bad input. */
bool cli_token_list(const char *s, gemmac_token **ids, size_t *n, char *err, size_t err_size);

/* Loads -m (or the default model) with a progress bar unless no_progress; prints the error and returns NULL. */
gemmac_model *cli_load_model(const char *cmd, const cli_opts *o);
/* Creates a context from the options; prints the error and returns NULL. */
gemmac_ctx *cli_new_ctx(const char *cmd, gemmac_model *m, const cli_opts *o, int32_t n_seq);
/* Reads the prompt from -p or -f (malloc'd, NUL-terminated; *len set); NULL with a message on error. */
char *cli_read_prompt(const char *cmd, const cli_opts *o, size_t *len);

double cli_now_ms(void);

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_synth(int argc, char **argv);   /* gemmac synth: random weights of a released model's shape */
int cmd_convert(int argc, char **argv); /* gemmac convert: a Hugging Face directory to GGUF */ /* built without libmicrohttpd/cJSON: says so, exits 2 */

#endif
