/* scheduler.c: see scheduler.h. One thread owns the context; a step = admit queued requests into free slots
 * (reusing the longest cached prefix), build one batch (each decoding sequence's last token, then prompt chunks
 * first come first served), decode, sample, stream. Sampling, stop strings and UTF-8 hold-back happen here. */
#include "batch/scheduler.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const int32_t gm_sched_seq_bounds[GM_SCHED_SEQ_BUCKETS - 1] = {1, 2, 4, 8, 16, 32, 64};
const int32_t gm_sched_tok_bounds[GM_SCHED_TOK_BUCKETS - 1] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

enum { ST_QUEUED, ST_PREFILL, ST_DECODE };

typedef struct req {
    uint64_t id;
    struct req *next;          /* queue link */
    int state;
    bool cancel;               /* set under s->mu */
    gemmac_token *prompt;      /* [n_prompt] */
    int32_t n_prompt, n_past;  /* prompt tokens in the sequence's cache so far */
    int32_t n_cached, n_gen, max_tokens;
    bool ignore_eos;
    gemmac_sampler *smp;
    gemmac_detok *dt;
    char **stop;
    int32_t n_stop;
    char *held;                /* generated text not yet emitted (may begin a stop string) */
    size_t held_len, held_cap;
    double deadline;           /* 0: none */
    gemmac_token next_tok;     /* ST_DECODE: sampled, to be fed at the next step */
    int32_t bidx;              /* index of this request's logits in the current batch, -1 */
    gm_sched_cb cb;
    void *user;
} req;

typedef struct slot {
    req *r;                    /* NULL: free */
    gemmac_token *cache;       /* [n_ctx] tokens held by the sequence (== its length) */
    int32_t n_cache;
    uint64_t last_used;
} slot;

struct gm_sched {
    const gemmac_model *model;
    gemmac_ctx *ctx;
    gm_sched_params p;
    int32_t n_ctx, n_vocab;
    slot *slots;               /* [n_slots] */
    gemmac_token *b_tok;       /* [step_tokens] batch arrays */
    int32_t *b_pos, *b_seq;
    int8_t *b_logits;
    char piece[4096];

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;        /* guards everything below */
    pthread_cond_t cv;
    bool stopping;
    req *q_head, *q_tail;
    int32_t n_queued;
    uint64_t next_id;
    uint64_t use_clock;
    uint64_t *cancel_ids;      /* ids to cancel that are in a slot (checked each step) */
    int32_t n_cancel, cap_cancel;
    int32_t fail_steps;
    gm_sched_stats st;
};

const char *gm_finish_name(gm_finish f) {
    static const char *names[] = {"stop", "length", "timeout", "cancelled", "error"};
    return (unsigned)f < GM_FINISH_COUNT ? names[f] : "?";
}

double gm_sched_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

gm_sched_params gm_sched_default_params(void) {
    gm_sched_params p = {.n_slots = 4, .queue_max = 0, .step_tokens = 512, .prefill_chunk = 256};
    return p;
}

static void req_free(req *r) {
    if (!r) return;
    free(r->prompt);
    gemmac_sampler_free(r->smp);
    gemmac_detok_free(r->dt);
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->held);
    free(r);
}

/* ---- events ---- */

static bool emit(gm_sched *s, req *r, gemmac_token tok, const char *text, size_t len) {
    (void)s;
    gm_sched_event ev = {.done = false, .token = tok, .text = text, .text_len = len, .n_prompt = r->n_prompt,
                         .n_cached = r->n_cached, .n_gen = r->n_gen};
    return r->cb(r->user, &ev);
}

static bool held_append(req *r, const char *t, size_t n) {
    if (r->held_len + n + 1 > r->held_cap) {
        size_t nc = (r->held_len + n + 1) * 2;
        char *h = realloc(r->held, nc);
        if (!h) return false;
        r->held = h;
        r->held_cap = nc;
    }
    memcpy(r->held + r->held_len, t, n);
    r->held_len += n;
    return true;
}

/* Appends text to what is held; emits what can no longer be part of a stop string. Returns 1 when a stop string
 * matched (text before it emitted), -1 when the callback asked to cancel or memory ran out, 0 otherwise. */
static int push_text(gm_sched *s, req *r, gemmac_token tok, const char *t, size_t n) {
    if (!held_append(r, t, n)) return -1;
    size_t emit_len = r->held_len, drop_from = r->held_len;
    int stopped = 0;
    if (r->n_stop > 0) {
        size_t first = SIZE_MAX;
        for (int32_t i = 0; i < r->n_stop; i++) {
            const char *m = memmem(r->held, r->held_len, r->stop[i], strlen(r->stop[i]));
            if (m && (size_t)(m - r->held) < first) first = (size_t)(m - r->held);
        }
        if (first != SIZE_MAX) {
            emit_len = drop_from = first;
            stopped = 1;
        } else {
            size_t keep = 0; /* longest suffix of held that is a proper prefix of some stop string */
            for (int32_t i = 0; i < r->n_stop; i++) {
                size_t sl = strlen(r->stop[i]);
                for (size_t k = sl - 1 < r->held_len ? sl - 1 : r->held_len; k > keep; k--)
                    if (!memcmp(r->held + r->held_len - k, r->stop[i], k)) {
                        keep = k;
                        break;
                    }
            }
            emit_len = drop_from = r->held_len - keep;
        }
    }
    bool go = emit(s, r, tok, r->held, emit_len);
    if (stopped) r->held_len = 0;
    else {
        memmove(r->held, r->held + drop_from, r->held_len - drop_from);
        r->held_len -= drop_from;
    }
    if (!go) return -1;
    return stopped;
}

/* Frees the slot (keeping its cache for prefix reuse) and sends the done event. */
static void finish(gm_sched *s, req *r, slot *sl, gm_finish why, const char *error) {
    size_t n;
    if (why == GM_FINISH_STOP || why == GM_FINISH_LENGTH || why == GM_FINISH_TIMEOUT) {
        /* the rest of the text: an incomplete UTF-8 tail becomes U+FFFD; held text is no stop string */
        if (r->dt && gemmac_detok_flush(r->dt, s->piece, sizeof s->piece, &n) == GEMMAC_OK && n)
            held_append(r, s->piece, n);
    } else r->held_len = 0;
    if (sl) {
        sl->r = NULL;
        sl->last_used = ++s->use_clock;
    }
    pthread_mutex_lock(&s->mu);
    s->st.finished[why]++;
    if (sl) s->st.active--;
    else s->st.queued--;
    pthread_mutex_unlock(&s->mu);
    gm_sched_event ev = {.done = true, .token = -1, .text = r->held, .text_len = r->held_len, .finish = why,
                         .n_prompt = r->n_prompt, .n_cached = r->n_cached, .n_gen = r->n_gen, .error = error};
    r->cb(r->user, &ev);
    req_free(r);
}

/* ---- admission ---- */

static int32_t common_prefix(const gemmac_token *a, int32_t na, const gemmac_token *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static void admit(gm_sched *s, req *r) {
    int32_t best = -1, best_lcp = -1;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->r) continue;
        int32_t lcp = common_prefix(sl->cache, sl->n_cache, r->prompt, r->n_prompt);
        if (lcp > best_lcp || (lcp == best_lcp && sl->last_used < s->slots[best].last_used)) {
            best = i;
            best_lcp = lcp;
        }
    }
    if (best_lcp < 2 || 2 * best_lcp < r->n_prompt) { /* no real prefix (a shared <bos> is none): keep caches */
        uint64_t oldest = UINT64_MAX;          /* that are worth more, take the least recently used slot */
        for (int32_t i = 0; i < s->p.n_slots; i++)
            if (!s->slots[i].r && s->slots[i].last_used < oldest) {
                oldest = s->slots[i].last_used;
                best = i;
            }
        best_lcp = common_prefix(s->slots[best].cache, s->slots[best].n_cache, r->prompt, r->n_prompt);
    }
    slot *sl = &s->slots[best];
    int32_t reuse = best_lcp < r->n_prompt - 1 ? best_lcp : r->n_prompt - 1; /* the last one gives the logits */
    if (reuse < sl->n_cache) {
        if (gemmac_ctx_seq_truncate(s->ctx, best, reuse) != GEMMAC_OK) {
            reuse = 0; /* a sliding-window ring cannot be cut back that far: start over */
            gemmac_ctx_seq_truncate(s->ctx, best, 0);
        }
        sl->n_cache = reuse;
    }
    sl->r = r;
    sl->last_used = ++s->use_clock;
    r->state = ST_PREFILL;
    r->n_past = reuse;
    r->n_cached = reuse;
    for (int32_t i = 0; i < r->n_prompt; i++) gemmac_sampler_accept(r->smp, r->prompt[i]);
    pthread_mutex_lock(&s->mu);
    s->st.queued--;
    s->st.active++;
    s->st.prompt_tokens += (uint64_t)r->n_prompt;
    s->st.prompt_tokens_cached += (uint64_t)reuse;
    pthread_mutex_unlock(&s->mu);
}

/* ---- the step ---- */

/* Samples from a request's logits (token bidx of the step's batch): ends it (eog, stop string, limits, cancel)
 * or queues the token to feed. */
static void on_logits(gm_sched *s, int32_t si) {
    slot *sl = &s->slots[si];
    req *r = sl->r;
    gemmac_token t = gemmac_ctx_sample(s->ctx, r->bidx, r->smp);
    if (t < 0) {
        finish(s, r, sl, GM_FINISH_ERROR, gemmac_ctx_last_error(s->ctx)[0] ? gemmac_ctx_last_error(s->ctx)
                                                                            : "no logits to sample from");
        return;
    }
    if (gemmac_token_is_eog(s->model, t) && !r->ignore_eos) {
        finish(s, r, sl, GM_FINISH_STOP, NULL);
        return;
    }
    gemmac_sampler_accept(r->smp, t);
    r->n_gen++;
    pthread_mutex_lock(&s->mu);
    s->st.gen_tokens++;
    pthread_mutex_unlock(&s->mu);
    size_t n = 0;
    if (gemmac_detok_push(r->dt, t, s->piece, sizeof s->piece, &n) != GEMMAC_OK) n = 0;
    int rc = push_text(s, r, t, s->piece, n);
    if (rc < 0) finish(s, r, sl, GM_FINISH_CANCELLED, NULL);
    else if (rc > 0) finish(s, r, sl, GM_FINISH_STOP, NULL);
    else if (r->n_gen >= r->max_tokens || sl->n_cache >= s->n_ctx) finish(s, r, sl, GM_FINISH_LENGTH, NULL);
    else {
        r->next_tok = t;
        r->state = ST_DECODE;
    }
}

static void record_step(gm_sched *s, int32_t n_tok, int32_t n_seq, bool ok, double decode_ms) {
    pthread_mutex_lock(&s->mu);
    s->st.steps++;
    s->st.decode_ms_sum += decode_ms;
    if (!ok) s->st.step_failures++;
    s->st.failures_in_a_row = ok ? 0 : s->st.failures_in_a_row + 1;
    int b = 0;
    while (b < GM_SCHED_SEQ_BUCKETS - 1 && n_seq > gm_sched_seq_bounds[b]) b++;
    s->st.seq_hist[b]++;
    b = 0;
    while (b < GM_SCHED_TOK_BUCKETS - 1 && n_tok > gm_sched_tok_bounds[b]) b++;
    s->st.tok_hist[b]++;
    s->st.step_tokens_sum += (uint64_t)n_tok;
    s->st.step_seqs_sum += (uint64_t)n_seq;
    if (n_seq > s->st.max_step_seqs) s->st.max_step_seqs = n_seq;
    if (n_tok > s->st.max_step_tokens) s->st.max_step_tokens = n_tok;
    int64_t used = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++) used += s->slots[i].n_cache;
    s->st.kv_used = used;
    s->st.last_step_ms = gm_sched_now_ms();
    pthread_mutex_unlock(&s->mu);
}

static void run_step(gm_sched *s) {
    int32_t n = 0, n_seq = 0;
    /* 1. every decoding sequence's last sampled token */
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        req *r = s->slots[i].r;
        if (!r) continue;
        r->bidx = -1;
        if (r->state != ST_DECODE) continue;
        s->b_tok[n] = r->next_tok;
        s->b_pos[n] = s->slots[i].n_cache;
        s->b_seq[n] = i;
        s->b_logits[n] = gemmac_ctx_logits_for(s->ctx, r->smp); /* the row's best only, when they decide */
        r->bidx = n++;
        n_seq++;
    }
    /* 2. prompt chunks, oldest request first, within what is left of the step */
    int32_t chunk_of[1024];
    for (;;) {
        int32_t pick = -1;
        for (int32_t i = 0; i < s->p.n_slots; i++) {
            req *r = s->slots[i].r;
            if (r && r->state == ST_PREFILL && r->bidx < 0 && (pick < 0 || r->id < s->slots[pick].r->id)) pick = i;
        }
        if (pick < 0 || n >= s->p.step_tokens) break;
        slot *sl = &s->slots[pick];
        req *r = sl->r;
        int32_t left = r->n_prompt - r->n_past, room = s->p.step_tokens - n;
        int32_t c = left < room ? left : room;
        if (c > s->p.prefill_chunk) c = s->p.prefill_chunk;
        for (int32_t k = 0; k < c; k++) {
            s->b_tok[n + k] = r->prompt[r->n_past + k];
            s->b_pos[n + k] = sl->n_cache + k;
            s->b_seq[n + k] = pick;
            s->b_logits[n + k] = 0;
        }
        if (r->n_past + c == r->n_prompt) s->b_logits[n + c - 1] = gemmac_ctx_logits_for(s->ctx, r->smp);
        r->bidx = n + c - 1; /* marks it as scheduled; its logits only when the prompt ends here */
        chunk_of[pick] = c;
        n += c;
        n_seq++;
    }
    if (n == 0) return;
    bool fail = false;
    pthread_mutex_lock(&s->mu);
    if (s->fail_steps > 0) {
        s->fail_steps--;
        fail = true;
    }
    pthread_mutex_unlock(&s->mu);
    gemmac_batch b = {.n_tokens = n, .token = s->b_tok, .pos = s->b_pos, .seq_id = s->b_seq, .logits = s->b_logits};
    const double t0 = gm_sched_now_ms();
    gemmac_status st = fail ? GEMMAC_ERR_BACKEND : gemmac_ctx_decode(s->ctx, &b);
    const double decode_ms = gm_sched_now_ms() - t0;
    if (st != GEMMAC_OK) {
        /* the batch's sequences may be half written: fail exactly the requests in it, clear their caches */
        char msg[256];
        snprintf(msg, sizeof msg, "decode failed: %s",
                 fail ? "injected failure" : (gemmac_ctx_last_error(s->ctx)[0] ? gemmac_ctx_last_error(s->ctx)
                                                                                : gemmac_status_str(st)));
        record_step(s, n, n_seq, false, decode_ms); /* before the requests hear of it: their clients may read the stats */
        for (int32_t i = 0; i < s->p.n_slots; i++) {
            slot *sl = &s->slots[i];
            if (!sl->r || sl->r->bidx < 0) continue;
            gemmac_ctx_seq_truncate(s->ctx, i, 0);
            sl->n_cache = 0;
            finish(s, sl->r, sl, GM_FINISH_ERROR, msg);
        }
        return;
    }
    uint64_t evaluated = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        slot *sl = &s->slots[i];
        req *r = sl->r;
        if (!r || r->bidx < 0) continue;
        if (r->state == ST_DECODE) {
            sl->cache[sl->n_cache++] = r->next_tok;
            on_logits(s, i);
        } else {
            int32_t c = chunk_of[i];
            memcpy(sl->cache + sl->n_cache, r->prompt + r->n_past, (size_t)c * sizeof(gemmac_token));
            sl->n_cache += c;
            r->n_past += c;
            evaluated += (uint64_t)c;
            if (r->n_past == r->n_prompt) on_logits(s, i);
        }
    }
    pthread_mutex_lock(&s->mu);
    s->st.prompt_tokens_evaluated += evaluated;
    pthread_mutex_unlock(&s->mu);
    record_step(s, n, n_seq, true, decode_ms);
}

static bool in_list(const uint64_t *ids, int32_t n, uint64_t id) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static void *sched_main(void *arg) {
    gm_sched *s = arg;
    for (;;) {
        req *admitted = NULL, *dropped = NULL; /* lists built under the lock, handled after it */
        bool any_active = false;
        for (int32_t i = 0; i < s->p.n_slots; i++) any_active |= s->slots[i].r != NULL;
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && !any_active && !s->q_head) pthread_cond_wait(&s->cv, &s->mu);
        const bool stopping = s->stopping;
        /* cancellations of running requests */
        const double now = gm_sched_now_ms();
        for (int32_t i = 0; i < s->p.n_slots; i++) {
            req *r = s->slots[i].r;
            if (r && (stopping || in_list(s->cancel_ids, s->n_cancel, r->id))) r->cancel = true;
        }
        s->n_cancel = 0;
        /* queued: cancelled or expired ones leave; the rest fill free slots in order */
        int32_t free_slots = 0;
        for (int32_t i = 0; i < s->p.n_slots; i++) free_slots += s->slots[i].r == NULL;
        req **pp = &s->q_head, *tail_adm = NULL;
        while (*pp) {
            req *r = *pp;
            bool drop = stopping || r->cancel || (r->deadline > 0 && now > r->deadline);
            if (!drop && free_slots == 0) {
                pp = &r->next;
                continue;
            }
            *pp = r->next;
            s->n_queued--;
            r->next = NULL;
            if (drop) {
                r->next = dropped;
                dropped = r;
            } else {
                free_slots--;
                if (tail_adm) tail_adm->next = r;
                else admitted = r;
                tail_adm = r;
            }
        }
        s->q_tail = NULL;
        for (req *r = s->q_head; r; r = r->next) s->q_tail = r;
        pthread_mutex_unlock(&s->mu);

        while (dropped) {
            req *r = dropped;
            dropped = r->next;
            finish(s, r, NULL, r->cancel || stopping ? GM_FINISH_CANCELLED : GM_FINISH_TIMEOUT, NULL);
        }
        for (int32_t i = 0; i < s->p.n_slots; i++) {
            slot *sl = &s->slots[i];
            req *r = sl->r;
            if (!r) continue;
            if (r->cancel) finish(s, r, sl, GM_FINISH_CANCELLED, NULL);
            else if (r->deadline > 0 && now > r->deadline) finish(s, r, sl, GM_FINISH_TIMEOUT, NULL);
        }
        while (admitted) {
            req *r = admitted;
            admitted = r->next;
            r->next = NULL;
            admit(s, r);
        }
        if (stopping) break;
        run_step(s);
    }
    return NULL;
}

/* ---- public ---- */

gemmac_status gm_sched_new(const gemmac_model *model, gemmac_ctx *ctx, const gm_sched_params *params,
                           gm_sched **out, char *err, size_t err_size) {
    *out = NULL;
    gm_sched_params p = params ? *params : gm_sched_default_params();
    if (p.queue_max <= 0) p.queue_max = 4 * p.n_slots;
    if (p.step_tokens <= 0) p.step_tokens = 512;
    if (p.prefill_chunk <= 0) p.prefill_chunk = 256;
    if (!model || !ctx || p.n_slots < 1 || p.n_slots > 1024 || p.n_slots > gemmac_ctx_n_seq_max(ctx)) {
        snprintf(err, err_size, "scheduler: %d slots need a context with at least that many sequences", p.n_slots);
        return GEMMAC_ERR_INVALID_ARG;
    }
    if (p.step_tokens < p.n_slots + 1) p.step_tokens = p.n_slots + 1; /* room for every decode plus a chunk */
    gm_sched *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->model = model;
    s->ctx = ctx;
    s->p = p;
    s->n_ctx = gemmac_ctx_n_ctx(ctx);
    gemmac_model_info info;
    gemmac_model_get_info(model, &info);
    s->n_vocab = info.n_vocab;
    s->next_id = 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->slots = calloc((size_t)p.n_slots, sizeof *s->slots);
    s->b_tok = malloc((size_t)p.step_tokens * sizeof *s->b_tok);
    s->b_pos = malloc((size_t)p.step_tokens * sizeof *s->b_pos);
    s->b_seq = malloc((size_t)p.step_tokens * sizeof *s->b_seq);
    s->b_logits = malloc((size_t)p.step_tokens);
    if (!s->slots || !s->b_tok || !s->b_pos || !s->b_seq || !s->b_logits) goto oom;
    for (int32_t i = 0; i < p.n_slots; i++) {
        if (!(s->slots[i].cache = malloc((size_t)s->n_ctx * sizeof(gemmac_token)))) goto oom;
        s->slots[i].n_cache = gemmac_ctx_seq_len(ctx, i);
        if (s->slots[i].n_cache > 0) { /* unknown contents: start empty */
            gemmac_ctx_seq_truncate(ctx, i, 0);
            s->slots[i].n_cache = 0;
        }
    }
    s->st.n_slots = p.n_slots;
    s->st.kv_capacity = (int64_t)p.n_slots * s->n_ctx;
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        snprintf(err, err_size, "scheduler: cannot start its thread");
        gm_sched_free(s);
        return GEMMAC_ERR_NO_MEMORY;
    }
    s->thread_started = true;
    *out = s;
    return GEMMAC_OK;
oom:
    snprintf(err, err_size, "scheduler: out of memory");
    gm_sched_free(s);
    return GEMMAC_ERR_NO_MEMORY;
}

void gm_sched_free(gm_sched *s) {
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    if (s->slots)
        for (int32_t i = 0; i < s->p.n_slots; i++) free(s->slots[i].cache);
    free(s->slots);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_logits);
    free(s->cancel_ids);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

gm_submit_result gm_sched_submit(gm_sched *s, const gm_sched_request *in, uint64_t *id) {
    if (!s || !in || !in->cb || !in->prompt || in->n_prompt < 1 || in->n_prompt >= (size_t)s->n_ctx ||
        in->max_tokens < 1 || in->n_stop < 0 || (in->n_stop > 0 && !in->stop))
        return GM_SUBMIT_INVALID;
    for (size_t i = 0; i < in->n_prompt; i++)
        if (in->prompt[i] < 0 || in->prompt[i] >= s->n_vocab) return GM_SUBMIT_INVALID;
    for (int32_t i = 0; i < in->n_stop; i++)
        if (!in->stop[i] || !in->stop[i][0]) return GM_SUBMIT_INVALID;
    req *r = calloc(1, sizeof *r);
    if (!r) return GM_SUBMIT_NO_MEMORY;
    gm_submit_result res = GM_SUBMIT_NO_MEMORY;
    r->n_prompt = (int32_t)in->n_prompt;
    r->max_tokens = in->max_tokens;
    r->ignore_eos = in->ignore_eos;
    r->cb = in->cb;
    r->user = in->user;
    r->bidx = -1;
    r->state = ST_QUEUED;
    r->deadline = in->time_limit_ms > 0 ? gm_sched_now_ms() + in->time_limit_ms : 0;
    if (!(r->prompt = malloc(in->n_prompt * sizeof *r->prompt))) goto fail;
    memcpy(r->prompt, in->prompt, in->n_prompt * sizeof *r->prompt);
    if (!(r->smp = gemmac_sampler_new(&in->sp, s->n_vocab))) {
        res = GM_SUBMIT_INVALID;
        goto fail;
    }
    if (!(r->dt = gemmac_detok_new(s->model))) goto fail;
    if (in->n_stop > 0) {
        if (!(r->stop = calloc((size_t)in->n_stop, sizeof *r->stop))) goto fail;
        for (int32_t i = 0; i < in->n_stop; i++, r->n_stop++)
            if (!(r->stop[i] = strdup(in->stop[i]))) goto fail;
    }
    pthread_mutex_lock(&s->mu);
    if (s->stopping) res = GM_SUBMIT_STOPPED;
    else if (s->n_queued >= s->p.queue_max) {
        res = GM_SUBMIT_QUEUE_FULL;
        s->st.rejected_full++;
    } else {
        r->id = s->next_id++;
        if (s->q_tail) s->q_tail->next = r;
        else s->q_head = r;
        s->q_tail = r;
        s->n_queued++;
        s->st.queued++;
        *id = r->id;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return GM_SUBMIT_OK;
    }
    pthread_mutex_unlock(&s->mu);
fail:
    req_free(r);
    return res;
}

void gm_sched_cancel(gm_sched *s, uint64_t id) {
    if (!s || id == 0) return;
    pthread_mutex_lock(&s->mu);
    bool queued = false;
    for (req *r = s->q_head; r; r = r->next)
        if (r->id == id) {
            r->cancel = true;
            queued = true;
        }
    if (!queued && id < s->next_id && !in_list(s->cancel_ids, s->n_cancel, id)) {
        if (s->n_cancel == s->cap_cancel) {
            int32_t nc = s->cap_cancel ? s->cap_cancel * 2 : 16;
            uint64_t *p = realloc(s->cancel_ids, (size_t)nc * sizeof *p);
            if (p) {
                s->cancel_ids = p;
                s->cap_cancel = nc;
            }
        }
        if (s->n_cancel < s->cap_cancel) s->cancel_ids[s->n_cancel++] = id;
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void gm_sched_get_stats(gm_sched *s, gm_sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

void gm_sched_debug_fail_steps(gm_sched *s, int32_t n) {
    pthread_mutex_lock(&s->mu);
    s->fail_steps = n;
    pthread_mutex_unlock(&s->mu);
}
