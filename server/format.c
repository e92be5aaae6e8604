/* format.c: see format.h. */
#include "format.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

static cJSON *usage_obj(const srv_usage *u) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt);
    cJSON_AddNumberToObject(o, "completion_tokens", u->completion);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt + u->completion);
    cJSON *d = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    if (d) cJSON_AddNumberToObject(d, "cached_tokens", u->cached);
    return o;
}

static char *print_free(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

char *srv_fmt_result(srv_kind kind, bool chunk, const char *id, long created, const char *model, const char *text,
                     size_t len, bool with_role, const char *finish, const srv_usage *usage, bool usage_only) {
    char *t = NULL;
    if (text) {
        if (!(t = malloc(len + 1))) return NULL;
        memcpy(t, text, len);
        t[len] = '\0';
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", kind == SRV_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                          : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddStringToObject(o, "system_fingerprint", "gemmac");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    if (!usage_only) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", 0);
        if (kind == SRV_CHAT) {
            cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
            if (with_role || !chunk) cJSON_AddStringToObject(m, "role", "assistant");
            if (t) cJSON_AddStringToObject(m, "content", t);
        } else {
            cJSON_AddStringToObject(c, "text", t ? t : "");
        }
        cJSON_AddNullToObject(c, "logprobs");
        if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
        else cJSON_AddNullToObject(c, "finish_reason");
        cJSON_AddItemToArray(choices, c);
    }
    if (usage) cJSON_AddItemToObject(o, "usage", usage_obj(usage));
    free(t);
    return print_free(o);
}

char *srv_fmt_error(const char *message, const char *type, const char *param, int code) {
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", code);
    return print_free(o);
}

char *srv_fmt_models(const char *model_id, long created, bool ready) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)created);
    cJSON_AddStringToObject(m, "owned_by", "gemmac");
    cJSON_AddBoolToObject(m, "ready", ready);
    cJSON_AddItemToArray(d, m);
    return print_free(o);
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) { b->oom = true; return; }
        if ((size_t)k < b->cap - b->n) { b->n += (size_t)k; return; }
        size_t nc = (b->cap + (size_t)k + 1) * 2;
        char *q = realloc(b->p, nc);
        if (!q) { b->oom = true; return; }
        b->p = q;
        b->cap = nc;
    }
}

static void counter(sbuf *b, const char *name, const char *help, uint64_t v) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

static void gauge(sbuf *b, const char *name, const char *help, double v) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

static void histogram(sbuf *b, const char *name, const char *help, const uint64_t *h, const int32_t *bounds,
                      int nb, uint64_t sum) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < nb; i++) {
        cum += h[i];
        if (i < nb - 1) sb_printf(b, "%s_bucket{le=\"%d\"} %llu\n", name, bounds[i], (unsigned long long)cum);
        else sb_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    sb_printf(b, "%s_sum %llu\n%s_count %llu\n", name, (unsigned long long)sum, name, (unsigned long long)cum);
}

char *srv_fmt_metrics(const gm_sched_stats *st, const srv_counters *c, bool ready) {
    sbuf b = {0};
    b.cap = 4096;
    if (!(b.p = malloc(b.cap))) return NULL;
    b.p[0] = '\0';
    sb_printf(&b, "# HELP gemmac_requests_total Requests by outcome.\n# TYPE gemmac_requests_total counter\n");
    for (int f = 0; f < GM_FINISH_COUNT; f++)
        sb_printf(&b, "gemmac_requests_total{outcome=\"%s\"} %llu\n", gm_finish_name((gm_finish)f),
                  (unsigned long long)st->finished[f]);
    sb_printf(&b, "gemmac_requests_total{outcome=\"rejected_queue_full\"} %llu\n",
              (unsigned long long)st->rejected_full);
    sb_printf(&b, "gemmac_requests_total{outcome=\"invalid\"} %llu\n", (unsigned long long)c->invalid);
    sb_printf(&b, "gemmac_requests_total{outcome=\"unauthorized\"} %llu\n", (unsigned long long)c->unauthorized);
    sb_printf(&b, "# HELP gemmac_http_responses_total HTTP responses by status class.\n"
                  "# TYPE gemmac_http_responses_total counter\n"
                  "gemmac_http_responses_total{class=\"2xx\"} %llu\n"
                  "gemmac_http_responses_total{class=\"4xx\"} %llu\n"
                  "gemmac_http_responses_total{class=\"5xx\"} %llu\n",
              (unsigned long long)c->http_2xx, (unsigned long long)c->http_4xx, (unsigned long long)c->http_5xx);
    counter(&b, "gemmac_client_disconnects_total", "Clients that went away before their request finished.",
            c->disconnects);
    counter(&b, "gemmac_prompt_tokens_total", "Prompt tokens of admitted requests.", st->prompt_tokens);
    counter(&b, "gemmac_prompt_tokens_cached_total", "Prompt tokens reused from a slot's cache.",
            st->prompt_tokens_cached);
    counter(&b, "gemmac_prompt_tokens_evaluated_total", "Prompt tokens run through the model.",
            st->prompt_tokens_evaluated);
    counter(&b, "gemmac_generated_tokens_total", "Generated tokens.", st->gen_tokens);
    counter(&b, "gemmac_steps_total", "Scheduler steps (one decode call each).", st->steps);
    gauge(&b, "gemmac_decode_seconds_total", "Time spent in decode calls, seconds.", st->decode_ms_sum / 1e3);
    gauge(&b, "gemmac_generated_tokens_per_second",
          "Generated tokens per second of decoding time, since start (all sequences together).",
          st->decode_ms_sum > 0 ? st->gen_tokens / (st->decode_ms_sum / 1e3) : 0.0);
    counter(&b, "gemmac_step_failures_total", "Decode calls that failed.", st->step_failures);
    histogram(&b, "gemmac_step_sequences", "Sequences per step (batch size in sequences).", st->seq_hist,
              gm_sched_seq_bounds, GM_SCHED_SEQ_BUCKETS, st->step_seqs_sum);
    histogram(&b, "gemmac_step_tokens", "Tokens per step (batch size in tokens).", st->tok_hist, gm_sched_tok_bounds,
              GM_SCHED_TOK_BUCKETS, st->step_tokens_sum);
    gauge(&b, "gemmac_step_sequences_max", "Most sequences seen in one step.", st->max_step_seqs);
    gauge(&b, "gemmac_queue_depth", "Requests waiting for a slot.", st->queued);
    gauge(&b, "gemmac_slots_active", "Slots running a request.", st->active);
    gauge(&b, "gemmac_slots_total", "Slots.", st->n_slots);
    gauge(&b, "gemmac_kv_cache_used_positions", "Positions held in the KV cache by all sequences.", (double)st->kv_used);
    gauge(&b, "gemmac_kv_cache_capacity_positions", "Positions the KV cache can hold (slots x context).",
          (double)st->kv_capacity);
    gauge(&b, "gemmac_kv_cache_usage_ratio", "Used / capacity.",
          st->kv_capacity > 0 ? (double)st->kv_used / (double)st->kv_capacity : 0.0);
    gauge(&b, "gemmac_ready", "1 once the model is loaded.", ready ? 1 : 0);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
