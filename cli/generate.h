/* generate.h: the prompt-then-sample loop shared by `run` and `chat`: feeds tokens after what a sequence
 * already holds, samples until end of generation / -n / the context's end, streams text or collects ids. */
#ifndef GM_CLI_GENERATE_H
#define GM_CLI_GENERATE_H

#include <stdio.h>

#include "cli.h"

typedef struct gen_stats {
    int32_t n_prompt;
    double prompt_ms;
    int32_t n_gen;             /* tokens sampled */
    int32_t n_eval;            /* of them, evaluated by a decode call (the last one need not be) */
    double gen_ms;
} gen_stats;

typedef struct gen_out {
    gemmac_token *ids;         /* generated ids (malloc'd, grown as needed) */
    size_t n, cap;
    bool hit_eog;              /* stopped on an end-of-generation token (not fed to the model) */
} gen_out;

/* Returns 0 on success, 1 after printing an error. Text goes to text_out unless NULL. */
int cli_generate(const char *cmd, gemmac_ctx *c, gemmac_model *m, gemmac_sampler *s, const gemmac_token *prompt,
                 size_t n_prompt, const cli_opts *o, FILE *text_out, gen_stats *st, gen_out *go);
void cli_print_stats(const gen_stats *st);

#endif
