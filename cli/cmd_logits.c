/* cmd_logits.c: `gemmac logits --tokens IDS --out FILE`: evaluates the ids as one sequence in one batch and
 * writes the float32 little-endian logits of every position (n_tokens rows of n_vocab). For tests and tools. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_logits(int argc, char **argv) {
    cli_opts o;
    if (!cli_parse("logits", argc, argv, 2, &o)) return 2;
    if (!o.tokens || !o.out) {
        fprintf(stderr, "gemmac logits: --tokens IDS and --out FILE are required\n");
        return 2;
    }
    gemmac_token *ids;
    size_t n;
    char err[128];
    if (!cli_token_list(o.tokens, &ids, &n, err, sizeof err)) {
        fprintf(stderr, "gemmac logits: %s\n", err);
        return 2;
    }
    o.no_progress = true;
    int ret = 1;
    int32_t *pos = NULL, *seq = NULL;
    int8_t *want = NULL;
    FILE *f = NULL;
    gemmac_ctx *c = NULL;
    gemmac_model *m = cli_load_model("logits", &o);
    if (!m) goto done;
    if (o.n_ctx == 0 && n > 4096) o.n_ctx = (int32_t)n;
    if (!(c = cli_new_ctx("logits", m, &o, 1))) goto done;
    if ((int64_t)n > gemmac_ctx_n_ctx(c)) {
        fprintf(stderr, "gemmac logits: %zu tokens do not fit the context of %d\n", n, gemmac_ctx_n_ctx(c));
        goto done;
    }
    pos = malloc(n * sizeof *pos);
    seq = calloc(n, sizeof *seq);
    want = malloc(n);
    if (!pos || !seq || !want) {
        fprintf(stderr, "gemmac logits: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        pos[i] = (int32_t)i;
        want[i] = 1;
    }
    gemmac_batch b = {.n_tokens = (int32_t)n, .token = ids, .pos = pos, .seq_id = seq, .logits = want};
    if (gemmac_ctx_decode(c, &b) != GEMMAC_OK) {
        fprintf(stderr, "gemmac logits: %s\n", gemmac_ctx_last_error(c));
        goto done;
    }
    if (!(f = fopen(o.out, "wb"))) {
        fprintf(stderr, "gemmac logits: cannot write %s: %s\n", o.out, strerror(errno));
        goto done;
    }
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    for (size_t i = 0; i < n; i++)
        if (fwrite(gemmac_ctx_logits(c, (int32_t)i), sizeof(float), (size_t)info.n_vocab, f) != (size_t)info.n_vocab) {
            fprintf(stderr, "gemmac logits: writing %s failed: %s\n", o.out, strerror(errno));
            goto done;
        }
    if (fclose(f) != 0) {
        f = NULL;
        fprintf(stderr, "gemmac logits: writing %s failed: %s\n", o.out, strerror(errno));
        goto done;
    }
    f = NULL;
    ret = 0;
done:
    if (f) fclose(f);
    free(pos);
    free(seq);
    free(want);
    free(ids);
    gemmac_ctx_free(c);
    gemmac_model_free(m);
    return ret;
}
