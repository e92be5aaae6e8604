/* gemma3.c: Gemma 3 (gemma-architecture.md §1.2, §2.7): hyper-parameters from GGUF metadata, weight
 * binding, and the forward pass written once over the backend ops for a batch of tokens from any number
 * of sequences. GGUF stores Gemma 3 norm weights with the +1 already added, so norms multiply by w. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

static gemmac_status get_u32_in(const gm_gguf *g, const char *key, uint32_t lo, uint32_t hi, uint32_t *out,
                                gm_error *err) {
    gemmac_status st = gm_gguf_get_u32(g, key, out, err);
    if (st == GEMMAC_ERR_NOT_FOUND) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "required key %s is missing", key);
    if (st != GEMMAC_OK) return st;
    if (*out < lo || *out > hi) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s = %u is outside [%u, %u]", key, *out, lo, hi);
    return GEMMAC_OK;
}

static gemmac_status get_f32_opt(const gm_gguf *g, const char *key, float def, float *out, gm_error *err) {
    gemmac_status st = gm_gguf_get_f32(g, key, out, err);
    if (st == GEMMAC_ERR_NOT_FOUND) {
        *out = def;
        return GEMMAC_OK;
    }
    if (st == GEMMAC_OK && !isfinite(*out)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "%s is not finite", key);
    return st;
}

static gemmac_status gemma3_hparams(gemmac_model *m, gm_error *err) {
    const gm_gguf *g = m->gguf;
    gm_hparams *hp = &m->hp;
    uint32_t n_embd, n_layer, n_ff, n_head, n_head_kv, n_ctx, head_dim, window = 0;
    gemmac_status st;
    if ((st = get_u32_in(g, "gemma3.embedding_length", 1, 65536, &n_embd, err)) ||
        (st = get_u32_in(g, "gemma3.block_count", 1, GM_MAX_LAYERS, &n_layer, err)) ||
        (st = get_u32_in(g, "gemma3.feed_forward_length", 1, 1u << 20, &n_ff, err)) ||
        (st = get_u32_in(g, "gemma3.attention.head_count", 1, 1024, &n_head, err)) ||
        (st = get_u32_in(g, "gemma3.context_length", 1, 1u << 24, &n_ctx, err)))
        return st;
    st = gm_gguf_get_u32(g, "gemma3.attention.head_count_kv", &n_head_kv, err);
    if (st == GEMMAC_ERR_NOT_FOUND) n_head_kv = n_head;
    else if (st != GEMMAC_OK) return st;
    if (n_head_kv < 1 || n_head % n_head_kv)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3.attention.head_count_kv = %u does not divide %u heads",
                       n_head_kv, n_head);
    st = gm_gguf_get_u32(g, "gemma3.attention.key_length", &head_dim, err);
    if (st == GEMMAC_ERR_NOT_FOUND) head_dim = n_embd / n_head;
    else if (st != GEMMAC_OK) return st;
    if (head_dim < 2 || head_dim > 1024 || head_dim % 2)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3.attention.key_length = %u is not an even size in [2, 1024]", head_dim);
    uint32_t value_len;
    st = gm_gguf_get_u32(g, "gemma3.attention.value_length", &value_len, err);
    if (st == GEMMAC_OK && value_len != head_dim)
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "value_length %u differs from key_length %u", value_len, head_dim);
    if (st != GEMMAC_OK && st != GEMMAC_ERR_NOT_FOUND) return st;
    st = gm_gguf_get_u32(g, "gemma3.attention.sliding_window", &window, err);
    if (st != GEMMAC_OK && st != GEMMAC_ERR_NOT_FOUND) return st;
    uint32_t n_rot = head_dim;
    st = gm_gguf_get_u32(g, "gemma3.rope.dimension_count", &n_rot, err);
    if (st == GEMMAC_ERR_NOT_FOUND) n_rot = head_dim;
    else if (st != GEMMAC_OK) return st;
    if (n_rot < 2 || n_rot > head_dim || n_rot % 2)
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3.rope.dimension_count = %u is not even and <= %u", n_rot, head_dim);

    float eps, base, scaling = 1.0f;
    if ((st = get_f32_opt(g, "gemma3.attention.layer_norm_rms_epsilon", 1e-6f, &eps, err)) ||
        (st = get_f32_opt(g, "gemma3.rope.freq_base", 1e6f, &base, err)) ||
        (st = get_f32_opt(g, "gemma3.rope.scaling.factor", 1.0f, &scaling, err)))
        return st;
    gm_str scaling_type;
    if (gm_gguf_get_str(g, "gemma3.rope.scaling.type", &scaling_type, NULL) == GEMMAC_OK &&
        !gm_str_eq(scaling_type, "linear") && !gm_str_eq(scaling_type, "none"))
        return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "gemma3.rope.scaling.type '%.*s' (only linear)",
                       (int)(scaling_type.len > 32 ? 32 : scaling_type.len), scaling_type.ptr);
    if (!(eps > 0 && eps < 1)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "rms norm epsilon %g is not in (0, 1)", eps);
    if (!(base > 1)) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3.rope.freq_base %g is not > 1", base);
    if (!(scaling >= 1 && scaling <= 1024))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "gemma3.rope.scaling.factor %g is not in [1, 1024]", scaling);

    hp->arch = GM_ARCH_GEMMA3;
    hp->n_embd = (int32_t)n_embd;
    hp->n_layer = (int32_t)n_layer;
    hp->n_ctx_train = (int32_t)n_ctx;
    hp->sliding_window = (int32_t)window;
    hp->norm_eps = eps;
    hp->embed_scale = sqrtf((float)n_embd);
    /* The query scale is query_pre_attn_scalar^-1/2, which GGUF does not store: it is head_dim for every
     * released size but the 27B (62 layers), where it is n_embd / n_head (llama.cpp derives it the same way). */
    hp->attn_scale = n_layer == 62 ? 1.0f / sqrtf((float)n_embd / (float)n_head) : 1.0f / sqrtf((float)head_dim);
    hp->final_softcap = 0.0f;
    for (uint32_t il = 0; il < n_layer; il++) {
        gm_layer_hparams *l = &hp->layer[il];
        /* Five sliding layers, then one full layer (llama.cpp's swa pattern 6). */
        l->sliding = window > 0 && (il + 1) % 6 != 0;
        l->n_head = (int32_t)n_head;
        l->n_head_kv = (int32_t)n_head_kv;
        l->head_dim = (int32_t)head_dim;
        l->n_ff = (int32_t)n_ff;
        l->n_rot = (int32_t)n_rot;
        l->rope_base = l->sliding ? 10000.0f : base;
        l->rope_freq_scale = l->sliding ? 1.0f : 1.0f / scaling;
        l->kv_source = (int32_t)il;
    }
    return GEMMAC_OK;
}

static gemmac_status gemma3_load(gemmac_model *m, gm_error *err) {
    gemmac_status st = gemma3_hparams(m, err);
    if (st != GEMMAC_OK) return st;
    gm_hparams *hp = &m->hp;
    const gm_gguf_tensor *emb = gm_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb) return gm_fail(err, GEMMAC_ERR_BAD_FILE, "tensor token_embd.weight is missing");
    if (emb->ne[1] < 1 || emb->ne[1] > (1 << 24))
        return gm_fail(err, GEMMAC_ERR_BAD_FILE, "token_embd.weight has %lld rows", (long long)emb->ne[1]);
    hp->n_vocab = (int32_t)emb->ne[1];

    const int64_t H = hp->n_embd, V = hp->n_vocab;
    gm_weights *w = &m->w;
    if ((st = gm_bind_tensor(m, &w->tok_embd, "token_embd.weight", 2, (int64_t[]){H, V}, false, err)) ||
        (st = gm_bind_vector(m, &w->output_norm, "output_norm.weight", H, err)) ||
        (st = gm_bind_tensor(m, &w->output, "output.weight", 2, (int64_t[]){H, V}, true, err)))
        return st;
    if (!w->output.data) w->output = w->tok_embd; /* tied */
    w->layer = calloc((size_t)hp->n_layer, sizeof *w->layer);
    if (!w->layer) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "out of memory");
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        gm_layer_weights *lw = &w->layer[il];
        const int64_t qd = (int64_t)l->n_head * l->head_dim, kvd = (int64_t)l->n_head_kv * l->head_dim, F = l->n_ff;
        char n[13][64];
        const char *suffix[13] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm",
                                  "attn_k_norm", "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",
                                  "post_ffw_norm"};
        for (int i = 0; i < 13; i++) snprintf(n[i], sizeof n[i], "blk.%d.%s.weight", il, suffix[i]);
        if ((st = gm_bind_vector(m, &lw->attn_norm, n[0], H, err)) ||
            (st = gm_bind_tensor(m, &lw->wq, n[1], 2, (int64_t[]){H, qd}, false, err)) ||
            (st = gm_bind_tensor(m, &lw->wk, n[2], 2, (int64_t[]){H, kvd}, false, err)) ||
            (st = gm_bind_tensor(m, &lw->wv, n[3], 2, (int64_t[]){H, kvd}, false, err)) ||
            (st = gm_bind_tensor(m, &lw->wo, n[4], 2, (int64_t[]){qd, H}, false, err)) ||
            (st = gm_bind_vector(m, &lw->q_norm, n[5], l->head_dim, err)) ||
            (st = gm_bind_vector(m, &lw->k_norm, n[6], l->head_dim, err)) ||
            (st = gm_bind_vector(m, &lw->post_attn_norm, n[7], H, err)) ||
            (st = gm_bind_vector(m, &lw->ffn_norm, n[8], H, err)) ||
            (st = gm_bind_tensor(m, &lw->ffn_gate, n[9], 2, (int64_t[]){H, F}, false, err)) ||
            (st = gm_bind_tensor(m, &lw->ffn_up, n[10], 2, (int64_t[]){H, F}, false, err)) ||
            (st = gm_bind_tensor(m, &lw->ffn_down, n[11], 2, (int64_t[]){F, H}, false, err)) ||
            (st = gm_bind_vector(m, &lw->post_ffw_norm, n[12], H, err)))
            return st;
    }
    m->chat_format = GM_CHAT_GEMMA3;
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
    for (int il = 0; il < hp->n_layer; il++) {
        const gm_layer_hparams *l = &hp->layer[il];
        const gm_layer_weights *lw = &w->layer[il];
        const int32_t D = l->head_dim;

        /* attention block: x += post_norm(Wo · attn(rope(qnorm(Wq·n(x))), rope(knorm(Wk·n(x))), Wv·n(x))) */
        op->rmsnorm(b, s->x, s->xn, n, H, vec(&lw->attn_norm), hp->norm_eps);
        op->matmul(b, &lw->wq, s->xn, n, s->q);
        op->matmul(b, &lw->wk, s->xn, n, s->k);
        op->matmul(b, &lw->wv, s->xn, n, s->v);
        op->rmsnorm(b, s->q, s->q, (int64_t)n * l->n_head, D, vec(&lw->q_norm), hp->norm_eps);
        op->rmsnorm(b, s->k, s->k, (int64_t)n * l->n_head_kv, D, vec(&lw->k_norm), hp->norm_eps);
        op->rope(b, s->q, n, l->n_head, D, a->pos, l->n_rot, l->rope_base, l->rope_freq_scale, NULL, hp->attn_scale);
        op->rope(b, s->k, n, l->n_head_kv, D, a->pos, l->n_rot, l->rope_base, l->rope_freq_scale, NULL, 1.0f);
        gm_attn_args at = {
            .kv = a->kv, .kv_layer = l->kv_source, .write_kv = l->kv_source == il, .n_tokens = n,
            .pos = a->pos, .seq = a->seq, .n_head = l->n_head, .n_head_kv = l->n_head_kv, .head_dim = D,
            .window = l->sliding ? hp->sliding_window : 0, .q = s->q, .k = s->k, .v = s->v, .out = s->att,
        };
        op->attention(b, &at);
        op->matmul(b, &lw->wo, s->att, n, s->xn);
        op->rmsnorm_add(b, s->x, s->xn, n, H, vec(&lw->post_attn_norm), hp->norm_eps);

        /* MLP block: x += post_norm(down(gelu(gate·n(x)) ⊙ up·n(x))) */
        op->rmsnorm(b, s->x, s->xn, n, H, vec(&lw->ffn_norm), hp->norm_eps);
        op->matmul(b, &lw->ffn_gate, s->xn, n, s->g);
        op->matmul(b, &lw->ffn_up, s->xn, n, s->u);
        op->gelu_mul(b, s->g, s->u, (int64_t)n * l->n_ff);
        op->matmul(b, &lw->ffn_down, s->g, n, s->xn);
        op->rmsnorm_add(b, s->x, s->xn, n, H, vec(&lw->post_ffw_norm), hp->norm_eps);
    }
    /* logits of the wanted rows, GM_LOGITS_CHUNK at a time */
    for (int32_t i0 = 0; i0 < a->n_out; i0 += GM_LOGITS_CHUNK) {
        const int32_t nc = a->n_out - i0 < GM_LOGITS_CHUNK ? a->n_out - i0 : GM_LOGITS_CHUNK;
        op->gather(b, s->x, H, a->out_rows + i0, nc, s->xo);
        op->rmsnorm(b, s->xo, s->xo, nc, H, vec(&w->output_norm), hp->norm_eps);
        op->matmul(b, &w->output, s->xo, nc, s->logits);
        if (hp->final_softcap > 0) op->softcap(b, s->logits, (int64_t)nc * hp->n_vocab, hp->final_softcap);
        op->read(b, s->logits, a->logits + (int64_t)i0 * hp->n_vocab, (int64_t)nc * hp->n_vocab);
    }
    return GEMMAC_OK;
}

const gm_arch_impl gm_arch_gemma3 = {.name = "gemma3", .load = gemma3_load, .forward = gemma3_forward};
