/* gemma3.c: Gemma 3 (gemma-architecture.md §1.2, §2.7): hyper-parameters from GGUF metadata or config.json,
 * the list of its weights (GGUF and Hugging Face names), and the forward pass written once over the backend ops for a batch of tokens from any number
 * of sequences. GGUF stores Gemma 3 norm weights with the +1 already added, so norms multiply by w. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf_writer.h"
#include "model/arch_common.h"
#include "model/model.h"

/* Fills what every layer shares once n_layer, the sliding flags and the per-model values are known. */
static void gemma3_layers(gm_hparams *hp, int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t n_ff,
                          int32_t n_rot, float base_full, float base_sliding, float scaling) {
    for (int il = 0; il < hp->n_layer; il++) {
        gm_layer_hparams *l = &hp->layer[il];
        l->n_head = n_head;
        l->n_head_kv = n_head_kv;
        l->head_dim = head_dim;
        l->n_ff = n_ff;
        l->n_rot = n_rot;
        l->rope_base = l->sliding ? base_sliding : base_full;
        l->rope_freq_scale = l->sliding ? 1.0f : 1.0f / scaling;
        l->kv_source = il;
    }
}

/* kv_key, dim_key: the keys as the file names them, for messages. */
static gemmac_status check_heads(int32_t n_head, int32_t n_head_kv, int32_t head_dim, const char *kv_key,
                                 const char *dim_key, gm_error *err) {
    if (n_head_kv < 1 || n_head % n_head_kv)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s = %d does not divide %d heads", kv_key, n_head_kv, n_head);
    if (head_dim < 2 || head_dim > 1024 || head_dim % 2)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s = %d is not an even size in [2, 1024]", dim_key, head_dim);
    return GEMMAC_OK;
}

static gemmac_status gemma3_hparams_gguf(gm_hparams *hp, const gm_gguf *g, gm_error *err) {
    uint32_t n_embd, n_layer, n_ff, n_head, n_head_kv, n_ctx, head_dim, window, n_rot, value_len;
    gemmac_status st;
    if ((st = gm_gguf_req_u32(g, "gemma3.embedding_length", 1, 65536, &n_embd, err)) ||
        (st = gm_gguf_req_u32(g, "gemma3.block_count", 1, GM_MAX_LAYERS, &n_layer, err)) ||
        (st = gm_gguf_req_u32(g, "gemma3.feed_forward_length", 1, 1u << 20, &n_ff, err)) ||
        (st = gm_gguf_req_u32(g, "gemma3.attention.head_count", 1, 1024, &n_head, err)) ||
        (st = gm_gguf_req_u32(g, "gemma3.context_length", 1, 1u << 24, &n_ctx, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3.attention.head_count_kv", 1, 1024, n_head, &n_head_kv, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3.attention.key_length", 2, 1024, n_embd / n_head, &head_dim, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3.attention.value_length", 2, 1024, head_dim, &value_len, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3.attention.sliding_window", 0, 1u << 24, 0, &window, err)) ||
        (st = gm_gguf_opt_u32(g, "gemma3.rope.dimension_count", 2, head_dim, head_dim, &n_rot, err)))
        return st;
    if ((st = check_heads((int32_t)n_head, (int32_t)n_head_kv, (int32_t)head_dim, "gemma3.attention.head_count_kv",
                          "gemma3.attention.key_length", err)))
        return st;
    if (value_len != head_dim)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "value_length %u differs from key_length %u", value_len, head_dim);
    if (n_rot % 2) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3.rope.dimension_count = %u is not even", n_rot);

    float eps, base, base_swa, scaling, softcap;
    if ((st = gm_gguf_opt_f32(g, "gemma3.attention.layer_norm_rms_epsilon", 1e-6f, &eps, err)) ||
        (st = gm_gguf_opt_f32(g, "gemma3.rope.freq_base", 1e6f, &base, err)) ||
        (st = gm_gguf_opt_f32(g, "gemma3.rope.freq_base_swa", 10000.0f, &base_swa, err)) ||
        (st = gm_gguf_opt_f32(g, "gemma3.final_logit_softcapping", 0.0f, &softcap, err)) ||
        (st = gm_gguf_opt_f32(g, "gemma3.rope.scaling.factor", 1.0f, &scaling, err)))
        return st;
    gm_str scaling_type;
    if (gm_gguf_get_str(g, "gemma3.rope.scaling.type", &scaling_type, NULL) == GEMMAC_OK &&
        !gm_str_eq(scaling_type, "linear") && !gm_str_eq(scaling_type, "none"))
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "gemma3.rope.scaling.type '%.*s' (only linear)",
                       (int)(scaling_type.len > 32 ? 32 : scaling_type.len), scaling_type.ptr);
    if (!(eps > 0 && eps < 1)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "rms norm epsilon %g is not in (0, 1)", eps);
    if (!(base > 1)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3.rope.freq_base %g is not > 1", base);
    if (!(base_swa > 1)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3.rope.freq_base_swa %g is not > 1", base_swa);
    if (!(softcap >= 0)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3.final_logit_softcapping %g is negative", softcap);
    if (!(scaling >= 1 && scaling <= 1024))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3.rope.scaling.factor %g is not in [1, 1024]", scaling);

    memset(hp, 0, sizeof *hp);
    hp->arch = GM_ARCH_GEMMA3;
    if ((st = gm_gguf_embd_rows(g, "token_embd.weight", &hp->n_vocab, err))) return st;
    hp->n_embd = (int32_t)n_embd;
    hp->n_layer = (int32_t)n_layer;
    hp->n_ctx_train = (int32_t)n_ctx;
    hp->sliding_window = (int32_t)window;
    hp->norm_eps = eps;
    hp->embed_scale = sqrtf((float)n_embd);
    /* The query scale is query_pre_attn_scalar^-1/2, which GGUF does not store: it is head_dim for every
     * released size but the 27B (62 layers), where it is n_embd / n_head (llama.cpp derives it the same way). */
    hp->attn_scale = n_layer == 62 ? 1.0f / sqrtf((float)n_embd / (float)n_head) : 1.0f / sqrtf((float)head_dim);
    /* Five sliding layers, then one full layer (llama.cpp's swa pattern 6). */
    for (uint32_t il = 0; il < n_layer; il++) hp->layer[il].sliding = window > 0 && (il + 1) % 6 != 0;
    hp->final_softcap = softcap;
    gemma3_layers(hp, (int32_t)n_head, (int32_t)n_head_kv, (int32_t)head_dim, (int32_t)n_ff, (int32_t)n_rot, base,
                  base_swa, scaling);
    return GEMMAC_OK;
}

static gemmac_status gemma3_hparams_hf(gm_hparams *hp, const gm_hf_config *c, gm_error *err) {
    memset(hp, 0, sizeof *hp);
    hp->arch = GM_ARCH_GEMMA3;
    int32_t n_head, n_head_kv, head_dim, n_ff, qpas;
    float softcap;
    gm_hf_rope full, sliding;
    gemmac_status st;
    if ((st = gm_hf_req_int(c, "vocab_size", 1, 1 << 24, &hp->n_vocab, err)) ||
        (st = gm_hf_req_int(c, "hidden_size", 1, 65536, &hp->n_embd, err)) ||
        (st = gm_hf_req_int(c, "num_hidden_layers", 1, GM_MAX_LAYERS, &hp->n_layer, err)) ||
        (st = gm_hf_req_int(c, "intermediate_size", 1, 1 << 20, &n_ff, err)) ||
        (st = gm_hf_req_int(c, "num_attention_heads", 1, 1024, &n_head, err)) ||
        (st = gm_hf_opt_int(c, "num_key_value_heads", 1, 1024, n_head, &n_head_kv, err)) ||
        (st = gm_hf_opt_int(c, "head_dim", 2, 1024, 256, &head_dim, err)) ||
        (st = gm_hf_opt_int(c, "query_pre_attn_scalar", 1, 1 << 20, head_dim, &qpas, err)) ||
        (st = gm_hf_opt_int(c, "max_position_embeddings", 1, 1 << 24, 131072, &hp->n_ctx_train, err)) ||
        (st = gm_hf_opt_int(c, "sliding_window", 0, 1 << 24, 0, &hp->sliding_window, err)) ||
        (st = gm_hf_opt_float(c, "rms_norm_eps", 1e-6, &hp->norm_eps, err)) ||
        (st = gm_hf_opt_float(c, "final_logit_softcapping", 0.0, &softcap, err)) ||
        (st = gm_hf_layer_types(c, hp, 6, err)) ||
        (st = gm_hf_rope_of(c, "full_attention", 1e6f, &full, err)) ||
        (st = gm_hf_rope_of(c, "sliding_attention", 1e4f, &sliding, err)))
        return st;
    if ((st = check_heads(n_head, n_head_kv, head_dim, "config.json: num_key_value_heads", "config.json: head_dim", err)))
        return st;
    if (!(hp->norm_eps > 0 && hp->norm_eps < 1))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "config.json: rms_norm_eps %g is not in (0, 1)", hp->norm_eps);
    if (gm_hf_kind_of(c, "attn_logit_softcapping") == GM_HF_NUMBER)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "config.json: attn_logit_softcapping is not supported");
    if (full.partial != 1.0f || sliding.partial != 1.0f || full.proportional || sliding.proportional)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "config.json: partial or proportional RoPE on a Gemma 3 model");
    hp->final_softcap = softcap > 0 ? softcap : 0.0f;
    hp->embed_scale = sqrtf((float)hp->n_embd);
    hp->attn_scale = 1.0f / sqrtf((float)qpas);
    gemma3_layers(hp, n_head, n_head_kv, head_dim, n_ff, head_dim, full.theta, sliding.theta, full.factor);
    for (int il = 0; il < hp->n_layer; il++)
        if (hp->layer[il].sliding) hp->layer[il].rope_freq_scale = 1.0f / sliding.factor;
    return GEMMAC_OK;
}

static gemmac_status gemma3_manifest(const gm_hparams *hp, gm_weights *w, gm_spec_fn fn, void *ud, gm_error *err) {
    const int64_t H = hp->n_embd, V = hp->n_vocab;
    gemmac_status st;
#define DECL(idx, dst, gguf, hf, role, opt, nd, ...) \
    if ((st = gm_declare(fn, ud, idx, &(gm_tensor_spec){dst, gguf, hf, nd, {__VA_ARGS__}, role, opt, 0, 0, false}, err))) \
        return st
    DECL(-1, &w->tok_embd, "token_embd.weight", "embed_tokens.weight", GM_ROLE_EMBED, false, 2, H, V);
    DECL(-1, &w->output_norm, "output_norm.weight", "norm.weight", GM_ROLE_NORM, false, 1, H);
    DECL(-1, &w->output, "output.weight", "lm_head.weight", GM_ROLE_MATRIX, true, 2, H, V);
    for (int il = 0; il < hp->n_layer; il++)
        if ((st = gm_declare_decoder_layer(fn, ud, hp, il, &w->layer[il], false, err))) return st;
#undef DECL
    return GEMMAC_OK;
}

static gemmac_status gemma3_finish(gemmac_model *m, gm_error *err) {
    (void)err;
    if (!m->w.output.data) m->w.output = m->w.tok_embd; /* tied */
    return GEMMAC_OK;
}

static const float *vec(const gm_tensor *t) { return t->data; }

static gemmac_status gemma3_forward(const gm_forward_args *a, gm_error *err) {
    (void)err;
    const gm_hparams *hp = &a->model->hp;
    const gm_weights *w = &a->model->w;
    gm_backend *b = a->backend;
    const gm_backend_ops *op = b->ops;
    gm_scratch *s = a->scratch;
    const int32_t n = a->n_tokens, H = hp->n_embd;

    op->get_rows(b, &w->tok_embd, a->token, n, hp->embed_scale, s->x);
    /* each block's residual add is left pending for the project of the block after it (s->xn, its input, is
     * not written in between); the last one runs before the output head's gather reads x */
    gm_pending_residual res = {.b = b, .x = s->x, .n = n, .d = H, .eps = hp->norm_eps};
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        const gm_layer_weights *lw = &w->layer[il];
        const int32_t D = l->head_dim;

        /* attention block: x += post_norm(Wo · attn(rope(qnorm(Wq·n(x))), rope(knorm(Wk·n(x))), Wv·n(x))) */
        const gm_proj_args qkv = {
            .x = s->x, .n = n, .norm = vec(&lw->attn_norm), .eps = hp->norm_eps, .act = GM_PROJ_PLAIN, .n_w = 3,
            .w = {&lw->wq, &lw->wk, &lw->wv}, .y = {s->q, s->k, s->v},
        };
        gm_residual_project(&res, &qkv);
        const gm_attn_prep prep = {
            .q_norm = vec(&lw->q_norm), .k_norm = vec(&lw->k_norm), .eps = hp->norm_eps, .n_rot = l->n_rot,
            .base = l->rope_base, .freq_scale = l->rope_freq_scale, .q_scale = hp->attn_scale,
        };
        gm_attn_args at = {
            .kv = a->kv, .kv_layer = l->kv_source, .write_kv = l->kv_source == il, .n_tokens = n,
            .pos = a->pos, .seq = a->seq, .n_head = l->n_head, .n_head_kv = l->n_head_kv, .head_dim = D,
            .window = l->sliding ? hp->sliding_window : 0, .prep = &prep, .q = s->q, .k = s->k, .v = s->v,
            .out = s->att,
        };
        op->attention(b, &at);
        op->matmul(b, &lw->wo, s->att, n, s->xn);
        gm_residual_defer(&res, s->xn, vec(&lw->post_attn_norm), 1.0f);

        /* MLP block: x += post_norm(down(gelu(gate·n(x)) ⊙ up·n(x))) */
        const gm_proj_args ffn = {
            .x = s->x, .n = n, .norm = vec(&lw->ffn_norm), .eps = hp->norm_eps, .act = GM_PROJ_GEGLU, .n_w = 2,
            .w = {&lw->ffn_gate, &lw->ffn_up}, .y = {s->g},
        };
        gm_residual_project(&res, &ffn);
        op->matmul(b, &lw->ffn_down, s->g, n, s->xn);
        gm_residual_defer(&res, s->xn, vec(&lw->post_ffw_norm), 1.0f);
    }
    gm_residual_flush(&res);
    /* logits of the wanted rows, s->logits_rows at a time */
    for (int32_t i0 = 0; i0 < a->n_out; i0 += s->logits_rows) {
        const int32_t nc = a->n_out - i0 < s->logits_rows ? a->n_out - i0 : s->logits_rows;
        op->gather(b, s->x, H, a->out_rows + i0, nc, s->xo);
        gm_forward_logits(a, i0, nc, &w->output, vec(&w->output_norm), hp->norm_eps, hp->final_softcap);
    }
    return GEMMAC_OK;
}

/* The inverse of gemma3_hparams_gguf: the keys llama.cpp's converter writes for Gemma 3 (conversion/gemma.py
 * Gemma3Model over the generic TextModel keys), in its order. Layouts GGUF cannot express (the sliding
 * pattern is fixed at 6, heads and widths are one value for every layer) are refused by name. */
static gemmac_status gemma3_write_hparams(const gm_hparams *hp, gm_gguf_writer *w, gm_error *err) {
    const gm_layer_hparams *l0 = &hp->layer[0];
    int full = -1, sliding = -1;
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        const bool want_sliding = hp->sliding_window > 0 && (il + 1) % 6 != 0;
        if (l->sliding != want_sliding)
            return gm_fail(err, GEMMAC_ERR_UNSUPPORTED,
                           "gemma3: layer %d is %s, but GGUF Gemma 3 files fix the pattern at 5 sliding : 1 full", il,
                           l->sliding ? "sliding" : "full");
        if (l->n_head != l0->n_head || l->n_head_kv != l0->n_head_kv || l->head_dim != l0->head_dim ||
            l->n_ff != l0->n_ff || l->n_rot != l0->n_rot)
            return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "gemma3: layer %d differs from layer 0 in heads or widths", il);
        if (l->sliding && sliding < 0) sliding = il;
        if (!l->sliding && full < 0) full = il;
    }
    if (hp->n_kv_shared || hp->n_embd_per_layer || hp->altup_num_inputs || hp->laurel_rank || hp->n_expert)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "gemma3: the hyper-parameters have Gemma 3n / 4 features");
    const gm_layer_hparams *lf = full >= 0 ? &hp->layer[full] : l0;
    const float factor = lf->rope_freq_scale > 0 ? 1.0f / lf->rope_freq_scale : 1.0f;
    if (sliding >= 0 && hp->layer[sliding].rope_freq_scale != 1.0f)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "gemma3: RoPE scaling on sliding layers cannot be written to GGUF");
    gm_gguf_writer_u32(w, "gemma3.block_count", (uint32_t)hp->n_layer);
    gm_gguf_writer_u32(w, "gemma3.context_length", (uint32_t)hp->n_ctx_train);
    gm_gguf_writer_u32(w, "gemma3.embedding_length", (uint32_t)hp->n_embd);
    gm_gguf_writer_u32(w, "gemma3.feed_forward_length", (uint32_t)l0->n_ff);
    gm_gguf_writer_u32(w, "gemma3.attention.head_count", (uint32_t)l0->n_head);
    gm_gguf_writer_u32(w, "gemma3.attention.head_count_kv", (uint32_t)l0->n_head_kv);
    if (factor != 1.0f) {
        gm_gguf_writer_str(w, "gemma3.rope.scaling.type", "linear");
        gm_gguf_writer_f32(w, "gemma3.rope.scaling.factor", factor);
    }
    gm_gguf_writer_f32(w, "gemma3.rope.freq_base", lf->rope_base);
    if (sliding >= 0) gm_gguf_writer_f32(w, "gemma3.rope.freq_base_swa", hp->layer[sliding].rope_base);
    gm_gguf_writer_f32(w, "gemma3.attention.layer_norm_rms_epsilon", hp->norm_eps);
    gm_gguf_writer_u32(w, "gemma3.attention.key_length", (uint32_t)l0->head_dim);
    gm_gguf_writer_u32(w, "gemma3.attention.value_length", (uint32_t)l0->head_dim);
    if (l0->n_rot != l0->head_dim) gm_gguf_writer_u32(w, "gemma3.rope.dimension_count", (uint32_t)l0->n_rot);
    if (hp->final_softcap > 0) gm_gguf_writer_f32(w, "gemma3.final_logit_softcapping", hp->final_softcap);
    if (hp->sliding_window > 0) gm_gguf_writer_u32(w, "gemma3.attention.sliding_window", (uint32_t)hp->sliding_window);
    return GEMMAC_OK;
}

static const char *const gemma3_hf_types[] = {"gemma3_text", "gemma3", NULL};

const gm_arch_impl gm_arch_gemma3 = {
    .name = "gemma3",
    .hf_model_types = gemma3_hf_types,
    .hf_norm_shift = 1.0f, /* HF Gemma 3 norms multiply by (1 + w); GGUF stores the sum */
    .chat_format = GM_CHAT_GEMMA3,
    .hparams_gguf = gemma3_hparams_gguf,
    .hparams_hf = gemma3_hparams_hf,
    .manifest = gemma3_manifest,
    .finish = gemma3_finish,
    .write_hparams = gemma3_write_hparams,
    .forward = gemma3_forward,
};
