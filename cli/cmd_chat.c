/* cmd_chat.c: `gemmac chat`: an interactive multi-turn chat on stdin/stdout with the model's built-in
 * template. Each turn renders the whole conversation, keeps the cached prefix it shares with what the
 * sequence already holds, and evaluates only the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"

typedef struct conv {
    gemmac_chat_msg *msgs;
    char **owned;              /* text copies, freed at the end */
    size_t n, cap;
} conv;

static bool conv_add(conv *c, const char *role, const char *text, size_t len) {
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 16;
        gemmac_chat_msg *m = realloc(c->msgs, nc * sizeof *m);
        if (!m) return false;
        c->msgs = m;
        char **o = realloc(c->owned, nc * sizeof *o);
        if (!o) return false;
        c->owned = o;
        c->cap = nc;
    }
    char *copy = malloc(len + 1);
    if (!copy) return false;
    memcpy(copy, text, len);
    copy[len] = '\0';
    c->owned[c->n] = copy;
    c->msgs[c->n] = (gemmac_chat_msg){role, copy};
    c->n++;
    return true;
}

/* Text of ids, whole UTF-8 only (malloc'd). */
static char *detokenize(gemmac_model *m, const gemmac_token *ids, size_t n, size_t *len) {
    gemmac_detok *d = gemmac_detok_new(m);
    size_t cap = 256, used = 0;
    char *s = malloc(cap);
    char piece[4096];
    size_t np;
    for (size_t i = 0; d && s && i <= n; i++) {
        gemmac_status st = i < n ? gemmac_detok_push(d, ids[i], piece, sizeof piece, &np)
                                 : gemmac_detok_flush(d, piece, sizeof piece, &np);
        if (st != GEMMAC_OK) continue;
        if (used + np + 1 > cap) {
            while (used + np + 1 > cap) cap *= 2;
            char *t = realloc(s, cap);
            if (!t) { free(s); s = NULL; break; }
            s = t;
        }
        memcpy(s + used, piece, np);
        used += np;
    }
    gemmac_detok_free(d);
    if (s) s[used] = '\0';
    *len = used;
    return s;
}

int cmd_chat(int argc, char **argv) {
    cli_opts o;
    if (!cli_parse("chat", argc, argv, 2, &o)) return 2;
    gemmac_model *m = cli_load_model("chat", &o);
    if (!m) return 1;
    int ret = 1;
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    if (!info.has_tokenizer) {
        fprintf(stderr, "gemmac chat: " CLI_NO_TOKENIZER "\n");
        gemmac_model_free(m);
        return 1;
    }
    gemmac_ctx *c = cli_new_ctx("chat", m, &o, 1);
    gemmac_sampler *s = c ? gemmac_sampler_new(&o.sp, info.n_vocab) : NULL;
    conv cv = {0};
    gemmac_token *hist = NULL, *ids = NULL;
    size_t n_hist = 0;
    char *line = NULL;
    size_t line_cap = 0;
    if (!c) goto done;
    if (!s) {
        fprintf(stderr, "gemmac chat: invalid sampling parameters\n");
        goto done;
    }
    if (o.system && !conv_add(&cv, "system", o.system, strlen(o.system))) goto oom;
    hist = malloc(sizeof *hist * (size_t)gemmac_ctx_n_ctx(c));
    if (!hist) goto oom;
    fprintf(stderr, "chatting with %s (%s); end with Ctrl-D\n", info.name[0] ? info.name : "the model", info.arch);
    for (;;) {
        fprintf(stderr, "> ");
        ssize_t len = getline(&line, &line_cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        if (!conv_add(&cv, "user", line, (size_t)len)) goto oom;
        size_t need = 0;
        gemmac_chat_render(m, cv.msgs, cv.n, true, NULL, 0, &need);
        char *text = malloc(need + 1);
        if (!text) goto oom;
        gemmac_chat_render(m, cv.msgs, cv.n, true, text, need + 1, &need);
        size_t n_ids = 0;
        gemmac_tokenize(m, text, need, GEMMAC_TOKENIZE_PARSE_SPECIAL, NULL, 0, &n_ids);
        free(ids);
        ids = malloc((n_ids ? n_ids : 1) * sizeof *ids);
        if (!ids) { free(text); goto oom; }
        gemmac_tokenize(m, text, need, GEMMAC_TOKENIZE_PARSE_SPECIAL, ids, n_ids, &n_ids);
        free(text);
        /* Reuse the cached prefix; a sliding-window cache that cannot be cut back is cleared instead. */
        size_t keep = 0;
        while (keep < n_hist && keep < n_ids && hist[keep] == ids[keep]) keep++;
        if (keep == n_ids) keep--; /* at least one token must be evaluated to get logits */
        if (gemmac_ctx_seq_truncate(c, 0, (int32_t)keep) != GEMMAC_OK) {
            keep = 0;
            gemmac_ctx_seq_truncate(c, 0, 0);
        }
        gen_stats st;
        gen_out go = {0};
        if (cli_generate("chat", c, m, s, ids + keep, n_ids - keep, &o, stdout, &st, &go) != 0) {
            free(go.ids);
            gemmac_ctx_seq_truncate(c, 0, 0);
            n_hist = 0;
            cv.n--; /* drop the turn that failed */
            free(cv.owned[cv.n]);
            continue;
        }
        printf("\n");
        fflush(stdout);
        /* What the cache now holds: the prompt, then the generated tokens that were evaluated. */
        const int32_t held = gemmac_ctx_seq_len(c, 0);
        n_hist = 0;
        for (size_t i = 0; i < n_ids && n_hist < (size_t)held; i++) hist[n_hist++] = ids[i];
        for (size_t i = 0; i < go.n && n_hist < (size_t)held; i++) hist[n_hist++] = go.ids[i];
        size_t tlen;
        char *reply = detokenize(m, go.ids, go.n, &tlen);
        free(go.ids);
        if (!reply || !conv_add(&cv, "assistant", reply, tlen)) {
            free(reply);
            goto oom;
        }
        free(reply);
    }
    ret = 0;
    goto done;
oom:
    fprintf(stderr, "gemmac chat: out of memory\n");
done:
    for (size_t i = 0; i < cv.n; i++) free(cv.owned[i]);
    free(cv.owned);
    free(cv.msgs);
    free(line);
    free(hist);
    free(ids);
    gemmac_sampler_free(s);
    gemmac_ctx_free(c);
    gemmac_model_free(m);
    return ret;
}
