/* tokenizer_write.c: a loaded tokenizer written back as the tokenizer.ggml.* keys of a GGUF, as llama.cpp's
 * converter writes them (model "llama" for SentencePiece vocabularies, "gemma4" with its merges for Gemma 4),
 * the token list padded to the embedding's rows. Used by `gemmac convert` for a checkpoint that carries a
 * tokenizer.json, so the GGUF keeps the checkpoint's vocabulary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf_writer.h"
#include "tok/tok_internal.h"

/* llama.cpp's token types (llama_token_type) from our attributes. */
static int32_t token_type_of(uint8_t attr) {
    if (attr & GM_TA_BYTE) return 6;
    if (attr & GM_TA_CONTROL) return 3;
    if (attr & GM_TA_USER) return 4;
    if (attr & GM_TA_UNUSED) return 5;
    if (attr & GM_TA_UNKNOWN) return 2;
    return 1;
}

gemmac_status gm_tokenizer_write_gguf(const gm_tokenizer *t, struct gm_gguf_writer *w, int32_t n_vocab,
                                      gm_error *err) {
    if ((int64_t)t->n_tokens > n_vocab)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "the tokenizer has %u tokens, more than the %d embedding rows",
                       t->n_tokens, n_vocab);
    const size_t n = (size_t)n_vocab;
    char **texts = calloc(n, sizeof *texts);
    float *scores = malloc(n * sizeof *scores);
    int32_t *types = malloc(n * sizeof *types);
    char **merges = t->n_merges ? calloc((size_t)t->n_merges, sizeof *merges) : NULL;
    gemmac_status st = GEMMAC_OK;
    if (!texts || !scores || !types || (t->n_merges && !merges)) {
        st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory writing the tokenizer");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *s = NULL;
        char pad[32];
        if (i < t->n_tokens) {
            s = gm_tok_text(t, (int32_t)i, &len);
            scores[i] = t->scores ? t->scores[i] : 0.0f;
            types[i] = token_type_of(t->attr[i]);
        } else { /* rows past the vocabulary, as llama.cpp's converter pads them */
            len = (size_t)snprintf(pad, sizeof pad, "[PAD%zu]", i);
            s = pad;
            scores[i] = -1000.0f;
            types[i] = 5;
        }
        if (!(texts[i] = malloc(len + 1))) {
            st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory writing the tokenizer");
            goto done;
        }
        memcpy(texts[i], s, len);
        texts[i][len] = '\0';
    }
    for (uint64_t i = 0; i < t->n_merges; i++) {
        const gm_merge *mg = &t->merges[i];
        if (!(merges[i] = malloc((size_t)mg->llen + mg->rlen + 2))) {
            st = gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory writing the tokenizer");
            goto done;
        }
        memcpy(merges[i], t->merge_pool + mg->off, mg->llen);
        merges[i][mg->llen] = ' ';
        memcpy(merges[i] + mg->llen + 1, t->merge_pool + mg->off + mg->llen, mg->rlen);
        merges[i][mg->llen + 1 + mg->rlen] = '\0';
    }
    const bool bpe = t->kind == GM_TOK_BPE_GEMMA4;
    gm_gguf_writer_str(w, "tokenizer.ggml.model", bpe ? "gemma4" : "llama");
    gm_gguf_writer_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)texts, n);
    gm_gguf_writer_arr_f32(w, "tokenizer.ggml.scores", scores, n);
    gm_gguf_writer_arr_i32(w, "tokenizer.ggml.token_type", types, n);
    if (t->n_merges) gm_gguf_writer_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, (size_t)t->n_merges);
    if (t->bos >= 0) gm_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
    if (t->eos >= 0) gm_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
    if (t->eot >= 0) gm_gguf_writer_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)t->eot);
    if (t->unk >= 0) gm_gguf_writer_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk);
    if (t->pad >= 0) gm_gguf_writer_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)t->pad);
    gm_gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
    gm_gguf_writer_bool(w, "tokenizer.ggml.add_eos_token", false);
    gm_gguf_writer_bool(w, "tokenizer.ggml.add_space_prefix", t->add_space_prefix);
done:
    if (texts)
        for (size_t i = 0; i < n; i++) free(texts[i]);
    if (merges)
        for (uint64_t i = 0; i < t->n_merges; i++) free(merges[i]);
    free(texts), free(scores), free(types), free(merges);
    return st;
}
