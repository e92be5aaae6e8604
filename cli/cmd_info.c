/* cmd_info.c: `gemmac info`: what the model file holds and what running it would take. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

int cmd_info(int argc, char **argv) {
    cli_opts o;
    if (!cli_parse("info", argc, argv, 2, &o)) return 2;
    o.no_progress = true;
    gemmac_model *m = cli_load_model("info", &o);
    if (!m) return 1;
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    const int32_t n_ctx = o.n_ctx > 0 ? o.n_ctx : (info.n_ctx_train < 4096 ? info.n_ctx_train : 4096);
    size_t need = gemmac_model_describe(m, n_ctx, NULL, 0);
    char *buf = malloc(need + 1);
    if (!buf) {
        fprintf(stderr, "gemmac info: out of memory\n");
        gemmac_model_free(m);
        return 1;
    }
    gemmac_model_describe(m, n_ctx, buf, need + 1);
    fputs(buf, stdout);
    free(buf);
    gemmac_model_free(m);
    return 0;
}
