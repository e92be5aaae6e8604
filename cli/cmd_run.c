/* cmd_run.c: `gemmac run`: one prompt (text, chat-wrapped text, or token ids), one generation, streamed to
 * stdout (or the ids alone with --ids); timings on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"

/* Tokenizes text (with the chat template when o->chat); returns malloc'd ids or NULL after an error. */
static gemmac_token *prompt_tokens(gemmac_model *m, const cli_opts *o, size_t *n) {
    size_t len;
    char *text = cli_read_prompt("run", o, &len);
    if (!text) return NULL;
    int flags = GEMMAC_TOKENIZE_ADD_BOS | GEMMAC_TOKENIZE_PARSE_SPECIAL;
    if (o->chat) {
        gemmac_chat_msg msgs[2];
        size_t nm = 0;
        if (o->system) msgs[nm++] = (gemmac_chat_msg){"system", o->system};
        msgs[nm++] = (gemmac_chat_msg){"user", text};
        size_t need = 0;
        gemmac_chat_render(m, msgs, nm, true, NULL, 0, &need);
        char *rendered = malloc(need + 1);
        if (!rendered || gemmac_chat_render(m, msgs, nm, true, rendered, need + 1, &need) != GEMMAC_OK) {
            fprintf(stderr, "gemmac run: could not render the chat template\n");
            free(rendered);
            free(text);
            return NULL;
        }
        free(text);
        text = rendered;
        len = need;
        flags = GEMMAC_TOKENIZE_PARSE_SPECIAL; /* the template writes <bos> itself */
    }
    size_t need = 0;
    if (gemmac_tokenize(m, text, len, flags, NULL, 0, &need) == GEMMAC_ERR_UNSUPPORTED) {
        fprintf(stderr, "gemmac run: " CLI_NO_TOKENIZER "\n");
        free(text);
        return NULL;
    }
    gemmac_token *ids = malloc((need ? need : 1) * sizeof *ids);
    if (!ids || gemmac_tokenize(m, text, len, flags, ids, need, n) != GEMMAC_OK) {
        fprintf(stderr, "gemmac run: could not tokenize the prompt\n");
        free(ids);
        ids = NULL;
    }
    free(text);
    return ids;
}

int cmd_run(int argc, char **argv) {
    cli_opts o;
    if (!cli_parse("run", argc, argv, 2, &o)) return 2;
    gemmac_token *prompt = NULL;
    size_t n_prompt = 0;
    if (o.tokens) {
        char err[128];
        if (!cli_token_list(o.tokens, &prompt, &n_prompt, err, sizeof err)) {
            fprintf(stderr, "gemmac run: %s\n", err);
            return 2;
        }
    } else if (!o.prompt && !o.prompt_file) {
        fprintf(stderr, "gemmac run: no prompt (use -p TEXT, -f FILE or --tokens IDS)\n");
        return 2;
    }
    int ret = 1;
    gemmac_model *m = cli_load_model("run", &o);
    gemmac_ctx *c = NULL;
    gemmac_sampler *s = NULL;
    gen_out go = {0};
    if (!m) goto done;
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    if (!info.has_tokenizer) o.ids = true; /* no text to show */
    if (prompt) {
        for (size_t i = 0; i < n_prompt; i++)
            if (prompt[i] >= info.n_vocab) {
                fprintf(stderr, "gemmac run: --tokens: id %d is outside the vocabulary [0, %d)\n", prompt[i],
                        info.n_vocab);
                goto done;
            }
    } else if (!(prompt = prompt_tokens(m, &o, &n_prompt))) goto done;
    if (!(c = cli_new_ctx("run", m, &o, 1))) goto done;
    if (!(s = gemmac_sampler_new(&o.sp, info.n_vocab))) {
        fprintf(stderr, "gemmac run: invalid sampling parameters\n");
        goto done;
    }
    gen_stats st;
    ret = cli_generate("run", c, m, s, prompt, n_prompt, &o, o.ids ? NULL : stdout, &st, &go);
    if (ret == 0 || go.n > 0) { /* end the text (or the ids) that was produced */
        if (o.ids)
            for (size_t i = 0; i < go.n; i++) printf(i ? " %d" : "%d", go.ids[i]);
        printf("\n");
        fflush(stdout);
    }
    if (ret == 0) cli_print_stats(&st); /* after an error, its one line is the last word on stderr */
done:
    free(go.ids);
    gemmac_sampler_free(s);
    gemmac_ctx_free(c);
    gemmac_model_free(m);
    free(prompt);
    return ret;
}
