/* generate.c: see generate.h. One sequence (id 0); prefill is one batched decode call, each generated
 * token is a batch of one. */
#include "generate.h"

#include <stdlib.h>
#include <string.h>

static bool push_id(gen_out *go, gemmac_token t) {
    if (go->n == go->cap) {
        size_t nc = go->cap ? go->cap * 2 : 64;
        gemmac_token *p = realloc(go->ids, nc * sizeof *p);
        if (!p) return false;
        go->ids = p;
        go->cap = nc;
    }
    go->ids[go->n++] = t;
    return true;
}

int cli_generate(const char *cmd, gemmac_ctx *c, gemmac_model *m, gemmac_sampler *s, const gemmac_token *prompt,
                 size_t n_prompt, const cli_opts *o, FILE *text_out, gen_stats *st, gen_out *go) {
    const int32_t n_ctx = gemmac_ctx_n_ctx(c);
    const int32_t start = gemmac_ctx_seq_len(c, 0);
    memset(st, 0, sizeof *st);
    go->hit_eog = false;
    if (n_prompt == 0) {
        fprintf(stderr, "gemmac %s: the prompt is empty\n", cmd);
        return 1;
    }
    if ((int64_t)start + (int64_t)n_prompt > n_ctx) {
        fprintf(stderr, "gemmac %s: the prompt (%zu tokens) does not fit the context of %d tokens (%d in use); "
                        "raise -c\n", cmd, n_prompt, n_ctx, start);
        return 1;
    }
    int32_t *pos = malloc(n_prompt * sizeof *pos), *seq = calloc(n_prompt, sizeof *seq);
    if (!pos || !seq) {
        free(pos);
        free(seq);
        fprintf(stderr, "gemmac %s: out of memory\n", cmd);
        return 1;
    }
    for (size_t i = 0; i < n_prompt; i++) {
        pos[i] = start + (int32_t)i;
        gemmac_sampler_accept(s, prompt[i]);
    }
    gemmac_batch b = {.n_tokens = (int32_t)n_prompt, .token = prompt, .pos = pos, .seq_id = seq, .logits = NULL};
    double t0 = cli_now_ms();
    gemmac_status rc = gemmac_ctx_decode(c, &b);
    st->prompt_ms = cli_now_ms() - t0;
    st->n_prompt = (int32_t)n_prompt;
    free(pos);
    free(seq);
    if (rc != GEMMAC_OK) {
        fprintf(stderr, "gemmac %s: %s\n", cmd, gemmac_ctx_last_error(c));
        return 1;
    }
    int32_t row = (int32_t)n_prompt - 1; /* the batch token whose logits the next token is sampled from */
    gemmac_detok *dt = text_out ? gemmac_detok_new(m) : NULL;
    char piece[4096];
    size_t np;
    int ret = 0;
    t0 = cli_now_ms();
    for (int32_t i = 0; o->n_predict < 0 || i < o->n_predict; i++) {
        gemmac_token t = gemmac_ctx_sample(c, row, s);
        if (t < 0) {
            fprintf(stderr, "\ngemmac %s: %s\n", cmd, gemmac_ctx_last_error(c));
            ret = 1;
            break;
        }
        if (!o->ignore_eos && gemmac_token_is_eog(m, t)) {
            go->hit_eog = true;
            break;
        }
        gemmac_sampler_accept(s, t);
        if (!push_id(go, t)) {
            fprintf(stderr, "gemmac %s: out of memory\n", cmd);
            ret = 1;
            break;
        }
        st->n_gen++;
        if (dt && gemmac_detok_push(dt, t, piece, sizeof piece, &np) == GEMMAC_OK && np) {
            fwrite(piece, 1, np, text_out);
            fflush(text_out);
        }
        const int32_t p = gemmac_ctx_seq_len(c, 0);
        if (p >= n_ctx) {
            fprintf(stderr, "\ngemmac %s: context of %d tokens is full; stopping\n", cmd, n_ctx);
            break;
        }
        if (o->n_predict >= 0 && i + 1 >= o->n_predict) break; /* no need to evaluate the last token */
        const int32_t zero = 0;
        const int8_t want = gemmac_ctx_logits_for(c, s); /* only the row's best when they decide the same */
        gemmac_batch one = {.n_tokens = 1, .token = &t, .pos = &p, .seq_id = &zero, .logits = &want};
        if (gemmac_ctx_decode(c, &one) != GEMMAC_OK) {
            fprintf(stderr, "\ngemmac %s: %s\n", cmd, gemmac_ctx_last_error(c));
            ret = 1;
            break;
        }
        st->n_eval++;
        row = 0;
    }
    st->gen_ms = cli_now_ms() - t0;
    if (dt) {
        if (gemmac_detok_flush(dt, piece, sizeof piece, &np) == GEMMAC_OK && np) fwrite(piece, 1, np, text_out);
        fflush(text_out);
        gemmac_detok_free(dt);
    }
    return ret;
}

void cli_print_stats(const gen_stats *st) {
    fprintf(stderr, "prefill: %d tokens in %.1f ms (%.1f tokens/s) | decode: %d tokens, %d evaluated in %.1f ms "
                    "(%.1f tokens/s)\n",
            st->n_prompt, st->prompt_ms, st->prompt_ms > 0 ? st->n_prompt * 1e3 / st->prompt_ms : 0.0, st->n_gen,
            st->n_eval, st->gen_ms, st->gen_ms > 0 ? st->n_eval * 1e3 / st->gen_ms : 0.0);
}
