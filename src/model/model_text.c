/* model_text.c: the public text functions (tokenize, pieces, detokenizer, chat rendering) as thin wrappers
 * that route a model handle to its tokenizer and chat format in src/tok. */
#include <stdlib.h>

#include "model/model.h"

gemmac_status gemmac_tokenize(const gemmac_model *m, const char *text, size_t len, int flags, gemmac_token *tokens,
                              size_t cap, size_t *n_out) {
    if (!m || (!text && len) || !n_out || (!tokens && cap)) return GEMMAC_ERR_INVALID_ARG;
    if (!m->tok) {
        *n_out = 0;
        return GEMMAC_ERR_UNSUPPORTED;  /* a Hugging Face directory without tokenizer.json: token ids only */
    }
    return gm_tokenize(m->tok, text ? text : "", len, flags, tokens, cap, n_out);
}

gemmac_status gemmac_token_piece(const gemmac_model *m, gemmac_token token, const char **piece, size_t *len) {
    if (!m || !piece || !len) return GEMMAC_ERR_INVALID_ARG;
    if (!m->tok) {
        *piece = NULL;
        *len = 0;
        return GEMMAC_ERR_UNSUPPORTED;
    }
    *piece = gm_token_piece(m->tok, token, len);
    return *piece ? GEMMAC_OK : GEMMAC_ERR_INVALID_ARG;
}

bool gemmac_token_is_eog(const gemmac_model *m, gemmac_token token) { return m && gm_token_is_eog(m->tok, token); }

struct gemmac_detok {
    gm_detok *d;
};

gemmac_detok *gemmac_detok_new(const gemmac_model *m) {
    if (!m || !m->tok) return NULL;
    gemmac_detok *d = malloc(sizeof *d);
    if (!d) return NULL;
    d->d = gm_detok_new(m->tok);
    if (!d->d) {
        free(d);
        return NULL;
    }
    return d;
}

gemmac_status gemmac_detok_push(gemmac_detok *d, gemmac_token token, char *out, size_t cap, size_t *n_out) {
    if (!d || !out || !n_out) return GEMMAC_ERR_INVALID_ARG;
    return gm_detok_push(d->d, token, out, cap, n_out);
}

gemmac_status gemmac_detok_flush(gemmac_detok *d, char *out, size_t cap, size_t *n_out) {
    if (!d || !out || !n_out) return GEMMAC_ERR_INVALID_ARG;
    return gm_detok_flush(d->d, out, cap, n_out);
}

void gemmac_detok_free(gemmac_detok *d) {
    if (!d) return;
    gm_detok_free(d->d);
    free(d);
}

gemmac_status gemmac_chat_render(const gemmac_model *m, const gemmac_chat_msg *msgs, size_t n_msgs,
                                 bool add_generation_prompt, char *out, size_t cap, size_t *n_out) {
    if (!m || (!msgs && n_msgs) || !n_out) return GEMMAC_ERR_INVALID_ARG;
    return gm_chat_render(m->chat_format, msgs, n_msgs, add_generation_prompt, out, cap, n_out);
}
