/* server.c: see server.h. Each connection has its own MHD thread: a non-streamed request waits there for its
 * done event; a streamed one is an SSE body produced by a content-reader callback that waits for text. Both
 * wake every WAIT_MS to look at the socket, so a client that goes away (queued, prefill, decode) cancels. */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "format.h"

#define WAIT_MS 50

struct srv_server {
    srv_config cfg;
    struct MHD_Daemon *d;
    atomic_bool ready, stopping;
    const gemmac_model *model;
    gm_sched *sched;
    int32_t n_ctx;
    char model_id[256];
    long started;
    atomic_uint_fast64_t next_id;
    pthread_mutex_t mu;        /* counters */
    srv_counters cnt;
};

srv_config srv_default_config(void) {
    srv_config c = {.host = "127.0.0.1", .port = 8080, .api_key = NULL, .model_id = "gemmac",
                    .default_max_tokens = 512, .time_limit_ms = 600000, .conn_timeout_s = 30,
                    .max_connections = 256, .limits = srv_default_limits()};
    return c;
}

/* ---- a generation shared by the connection thread(s) and the scheduler thread ---- */
typedef struct job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    srv_server *srv;
    uint64_t id;               /* the scheduler's */
    srv_kind kind;
    bool stream, include_usage;
    char cid[48];
    long created;
    char *text;                /* stream: not yet sent; otherwise: all of it */
    size_t text_len, text_cap;
    bool done, oom;
    gm_finish finish;
    int32_t n_prompt, n_gen, n_cached;
    char error[256];
    bool gone;                 /* the client went away */
    int fd;
    struct MHD_Connection *conn;
    /* stream state, connection thread only */
    char *out;
    size_t out_len, out_pos, out_cap;
    bool role_sent, final_sent;
} job;

static void job_release(job *j) {
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j->text);
    free(j->out);
    free(j);
}

static bool buf_append(char **p, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t nc = (*len + n + 1) * 2;
        char *q = realloc(*p, nc);
        if (!q) return false;
        *p = q;
        *cap = nc;
    }
    memcpy(*p + *len, s, n);
    *len += n;
    (*p)[*len] = '\0';
    return true;
}

/* the scheduler thread */
static bool on_event(void *user, const gm_sched_event *ev) {
    job *j = user;
    pthread_mutex_lock(&j->mu);
    if (ev->text_len && !buf_append(&j->text, &j->text_len, &j->text_cap, ev->text, ev->text_len)) j->oom = true;
    j->n_prompt = ev->n_prompt;
    j->n_gen = ev->n_gen;
    j->n_cached = ev->n_cached;
    if (ev->done) {
        j->done = true;
        j->finish = ev->finish;
        if (ev->error) snprintf(j->error, sizeof j->error, "%s", ev->error);
    }
    if (ev->done || ev->text_len) pthread_cond_broadcast(&j->cv);
    bool go = !j->gone && !j->oom;
    pthread_mutex_unlock(&j->mu);
    if (ev->done) job_release(j);
    return go;
}

static bool client_closed(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static void timed_wait(job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

static void count(srv_server *s, uint64_t *field) {
    pthread_mutex_lock(&s->mu);
    (*field)++;
    pthread_mutex_unlock(&s->mu);
}

/* MHD restarts a connection's idle timer on socket activity only, and MHD_CONNECTION_OPTION_TIMEOUT restarts it
 * only when the timeout was 0. After a callback has waited (queued, generating) for longer than the idle timeout,
 * MHD would close the connection as idle before sending what the callback returns: restart the timer (0, then
 * the configured value) before returning. */
static void restart_idle_timer(struct MHD_Connection *c, unsigned timeout_s) {
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, timeout_s);
}

/* Called with j->mu held and j not done: the client left or the server stops. */
static bool should_abandon(job *j) {
    if (!atomic_load(&j->srv->stopping) && !client_closed(j->fd)) return false;
    j->gone = true;
    return true;
}

static const char *finish_reason(gm_finish f) { return f == GM_FINISH_STOP ? "stop" : "length"; }

/* ---- per connection ---- */
typedef struct conn_state {
    srv_server *srv;
    char *body;
    size_t len, cap;
    bool too_big, responded;
    int status;
    double t0;
    char method[8], path[96];
    job *job;                  /* a reference, for the log line */
} conn_state;

static enum MHD_Result reply(conn_state *cs, struct MHD_Connection *c, int status, const char *ctype, char *body,
                             int retry_after) {
    if (!body) {
        status = 500;
        ctype = "application/json";
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":500}}");
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after);
        MHD_add_response_header(r, "Retry-After", ra);
    }
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    cs->status = status;
    cs->responded = true;
    srv_server *s = cs->srv;
    count(s, status < 300 ? &s->cnt.http_2xx : status < 500 ? &s->cnt.http_4xx : &s->cnt.http_5xx);
    return ret;
}

static const char *type_for(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static enum MHD_Result reply_err(conn_state *cs, struct MHD_Connection *c, int status, const char *param,
                                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result reply_err(conn_state *cs, struct MHD_Connection *c, int status, const char *param,
                                 const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = type_for(status);
    if (status == 400 && param && !strcmp(param, "exceed_context_size_error")) {
        type = param;
        param = NULL;
    }
    return reply(cs, c, status, "application/json", srv_fmt_error(msg, type, param, status), status == 503 ? 1 : 0);
}

static bool auth_ok(srv_server *s, struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return false;
    const char *k = h + 7, *want = s->cfg.api_key;
    size_t n = strlen(k), m = strlen(want);
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < m; i++) diff |= (unsigned char)want[i] ^ (unsigned char)(i < n ? k[i] : 0);
    return diff == 0;
}

/* ---- streaming: the SSE body ---- */
static bool sse_push(job *j, char *json) {
    if (!json) return false;
    bool ok = buf_append(&j->out, &j->out_len, &j->out_cap, "data: ", 6) &&
              buf_append(&j->out, &j->out_len, &j->out_cap, json, strlen(json)) &&
              buf_append(&j->out, &j->out_len, &j->out_cap, "\n\n", 2);
    free(json);
    return ok;
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    job *j = cls;
    srv_server *s = j->srv;
    const char *model = s->cfg.model_id;
    for (;;) {
        if (j->out_pos < j->out_len) {
            size_t n = j->out_len - j->out_pos < max ? j->out_len - j->out_pos : max;
            memcpy(buf, j->out + j->out_pos, n);
            j->out_pos += n;
            /* we may have waited long in here: count sending as activity for the idle timeout */
            restart_idle_timer(j->conn, s->cfg.conn_timeout_s);
            return (ssize_t)n;
        }
        j->out_len = j->out_pos = 0;
        if (j->final_sent) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!j->role_sent) {
            j->role_sent = true;
            if (j->kind == SRV_CHAT &&
                !sse_push(j, srv_fmt_result(j->kind, true, j->cid, j->created, model, "", 0, true, NULL, NULL, false)))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        pthread_mutex_lock(&j->mu);
        while (!j->done && j->text_len == 0) {
            timed_wait(j);
            if (!j->done && j->text_len == 0 && should_abandon(j)) {
                pthread_mutex_unlock(&j->mu);
                gm_sched_cancel(s->sched, j->id);
                count(s, &s->cnt.disconnects);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        char *text = j->text;
        size_t text_len = j->text_len;
        j->text = NULL;
        j->text_len = j->text_cap = 0;
        const bool done = j->done;
        const gm_finish fin = j->finish;
        srv_usage u = {j->n_prompt, j->n_gen, j->n_cached};
        char error[256];
        snprintf(error, sizeof error, "%s", j->error);
        pthread_mutex_unlock(&j->mu);
        bool ok = true;
        if (text_len)
            ok = sse_push(j, srv_fmt_result(j->kind, true, j->cid, j->created, model, text, text_len, false, NULL,
                                            NULL, false));
        free(text);
        if (ok && done) {
            if (fin == GM_FINISH_ERROR || fin == GM_FINISH_CANCELLED)
                ok = sse_push(j, srv_fmt_error(fin == GM_FINISH_ERROR ? error : "the request was cancelled",
                                               fin == GM_FINISH_ERROR ? "server_error" : "unavailable_error", NULL,
                                               fin == GM_FINISH_ERROR ? 500 : 503));
            else {
                ok = sse_push(j, srv_fmt_result(j->kind, true, j->cid, j->created, model,
                                                j->kind == SRV_CHAT ? NULL : "", 0, false, finish_reason(fin), NULL,
                                                false));
                if (ok && j->include_usage)
                    ok = sse_push(j, srv_fmt_result(j->kind, true, j->cid, j->created, model, NULL, 0, false, NULL, &u,
                                                    true));
            }
            ok = ok && buf_append(&j->out, &j->out_len, &j->out_cap, "data: [DONE]\n\n", 14);
            j->final_sent = true;
        }
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void sse_free(void *cls) {
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    bool cancel = !j->done && !j->gone; /* the reader may have cancelled already */
    if (!j->done) j->gone = true;
    pthread_mutex_unlock(&j->mu);
    if (cancel) {
        gm_sched_cancel(j->srv->sched, j->id);
        count(j->srv, &j->srv->cnt.disconnects);
    }
    job_release(j);
}

/* ---- generation routes ---- */
static gemmac_token *tokenize(srv_server *s, const srv_request *rq, size_t *n) {
    char *text = NULL;
    size_t len = 0;
    int flags = GEMMAC_TOKENIZE_ADD_BOS | GEMMAC_TOKENIZE_PARSE_SPECIAL;
    if (rq->kind == SRV_CHAT) {
        gemmac_chat_msg *m = malloc((size_t)rq->n_msgs * sizeof *m);
        if (!m) return NULL;
        for (int32_t i = 0; i < rq->n_msgs; i++) m[i] = (gemmac_chat_msg){rq->msgs[i].role, rq->msgs[i].content};
        size_t need = 0;
        gemmac_chat_render(s->model, m, (size_t)rq->n_msgs, true, NULL, 0, &need);
        text = malloc(need + 1);
        if (!text || gemmac_chat_render(s->model, m, (size_t)rq->n_msgs, true, text, need + 1, &len) != GEMMAC_OK) {
            free(text);
            free(m);
            return NULL;
        }
        free(m);
        flags = GEMMAC_TOKENIZE_PARSE_SPECIAL; /* the template writes <bos> itself */
    }
    const char *src = text ? text : rq->prompt;
    if (!text) len = rq->prompt_len;
    size_t need = 0;
    gemmac_tokenize(s->model, src, len, flags, NULL, 0, &need);
    gemmac_token *ids = malloc((need ? need : 1) * sizeof *ids);
    if (ids && gemmac_tokenize(s->model, src, len, flags, ids, need, n) != GEMMAC_OK) {
        free(ids);
        ids = NULL;
    }
    free(text);
    return ids;
}

static enum MHD_Result generate(conn_state *cs, struct MHD_Connection *c, srv_kind kind) {
    srv_server *s = cs->srv;
    if (cs->too_big) {
        count(s, &s->cnt.invalid);
        return reply_err(cs, c, 413, NULL, "the request body is larger than %zu bytes", s->cfg.limits.max_body);
    }
    srv_request rq;
    srv_error e;
    if (!srv_parse_request(kind, cs->body, cs->len, &s->cfg.limits, &rq, &e)) {
        count(s, &s->cnt.invalid);
        return reply_err(cs, c, e.status, e.param, "%s", e.message);
    }
    size_t n_prompt = 0;
    gemmac_token *ids = tokenize(s, &rq, &n_prompt);
    enum MHD_Result ret;
    if (!ids) {
        ret = reply_err(cs, c, 500, NULL, "could not render or tokenize the prompt");
        goto done;
    }
    if (n_prompt == 0) {
        count(s, &s->cnt.invalid);
        ret = reply_err(cs, c, 400, "prompt", "the prompt is empty after tokenizing");
        goto done;
    }
    if ((int64_t)n_prompt >= s->n_ctx) {
        count(s, &s->cnt.invalid);
        ret = reply_err(cs, c, 400, "exceed_context_size_error",
                        "the prompt has %zu tokens; the context holds %d (prompt and completion together)", n_prompt,
                        s->n_ctx);
        goto done;
    }
    const int32_t room = s->n_ctx - (int32_t)n_prompt;
    int32_t max_tokens = rq.max_tokens;
    if (max_tokens > room) {
        count(s, &s->cnt.invalid);
        ret = reply_err(cs, c, 400, "exceed_context_size_error",
                        "the prompt (%zu tokens) plus max_tokens (%d) exceed the context of %d tokens", n_prompt,
                        max_tokens, s->n_ctx);
        goto done;
    }
    if (max_tokens < 0) max_tokens = s->cfg.default_max_tokens < room ? s->cfg.default_max_tokens : room;
    job *j = calloc(1, sizeof *j);
    if (!j) {
        ret = reply_err(cs, c, 500, NULL, "out of memory");
        goto done;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = s;
    j->kind = kind;
    j->stream = rq.stream;
    j->include_usage = rq.include_usage;
    j->created = (long)time(NULL);
    j->conn = c;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    snprintf(j->cid, sizeof j->cid, "%s-%llx%llx", kind == SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)j->created, (unsigned long long)atomic_fetch_add(&s->next_id, 1));
    j->refs = rq.stream ? 3 : 2; /* the scheduler, this connection's log, the SSE body */
    gm_sched_request sr = {.prompt = ids, .n_prompt = n_prompt, .sp = rq.sp, .max_tokens = max_tokens,
                           .ignore_eos = rq.ignore_eos, .stop = (const char *const *)rq.stop, .n_stop = rq.n_stop,
                           .time_limit_ms = s->cfg.time_limit_ms, .cb = on_event, .user = j};
    j->n_prompt = (int32_t)n_prompt;
    gm_submit_result sub = gm_sched_submit(s->sched, &sr, &j->id);
    if (sub != GM_SUBMIT_OK) {
        j->refs = 1;
        job_release(j);
        if (sub == GM_SUBMIT_QUEUE_FULL)
            ret = reply_err(cs, c, 503, NULL, "the server is busy (all slots taken and the queue is full); retry later");
        else if (sub == GM_SUBMIT_INVALID) {
            count(s, &s->cnt.invalid);
            ret = reply_err(cs, c, 400, NULL, "invalid sampling parameters");
        } else if (sub == GM_SUBMIT_STOPPED) ret = reply_err(cs, c, 503, NULL, "the server is shutting down");
        else ret = reply_err(cs, c, 500, NULL, "out of memory");
        goto done;
    }
    cs->job = j;
    if (rq.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, j, sse_free);
        if (!r) {
            sse_free(j);
            ret = MHD_NO;
            goto done;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        cs->status = 200;
        cs->responded = true;
        count(s, &s->cnt.http_2xx);
        goto done;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        timed_wait(j);
        if (!j->done && should_abandon(j)) {
            pthread_mutex_unlock(&j->mu);
            gm_sched_cancel(s->sched, j->id);
            count(s, &s->cnt.disconnects);
            cs->status = 499; /* nginx's "client closed request", for the log */
            ret = MHD_NO;
            goto done;
        }
    }
    pthread_mutex_unlock(&j->mu);
    restart_idle_timer(c, s->cfg.conn_timeout_s);
    if (j->finish == GM_FINISH_ERROR) ret = reply_err(cs, c, 500, NULL, "%s", j->error);
    else if (j->finish == GM_FINISH_CANCELLED || j->oom)
        ret = reply_err(cs, c, 503, NULL, "the request was cancelled (the server is shutting down)");
    else {
        srv_usage u = {j->n_prompt, j->n_gen, j->n_cached};
        ret = reply(cs, c, 200, "application/json",
                    srv_fmt_result(kind, false, j->cid, j->created, s->cfg.model_id, j->text ? j->text : "",
                                   j->text_len, false, finish_reason(j->finish), &u, false),
                    0);
    }
done:
    free(ids);
    srv_request_free(&rq);
    return ret;
}

/* ---- MHD callbacks ---- */
static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_server *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        cs->srv = s;
        cs->t0 = gm_sched_now_ms();
        snprintf(cs->method, sizeof cs->method, "%s", method);
        snprintf(cs->path, sizeof cs->path, "%s", url);
        if (s->cfg.api_key && strcmp(url, "/health") != 0 && !auth_ok(s, c)) {
            count(s, &s->cnt.unauthorized);
            return reply_err(cs, c, 401, NULL, "invalid or missing API key (Authorization: Bearer KEY)");
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->cfg.limits.max_body) {
            count(s, &s->cnt.invalid);
            return reply_err(cs, c, 413, NULL, "the request body is larger than %zu bytes", s->cfg.limits.max_body);
        }
        return MHD_YES;
    }
    if (cs->responded) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (cs->len + *upload_size > s->cfg.limits.max_body) cs->too_big = true;
        else if (!buf_append(&cs->body, &cs->len, &cs->cap, upload_data, *upload_size)) cs->too_big = true;
        *upload_size = 0;
        return MHD_YES;
    }
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    const bool ready = atomic_load(&s->ready);
    if (!strcmp(url, "/health")) {
        if (!ready) return reply_err(cs, c, 503, NULL, "Loading model");
        return reply(cs, c, 200, "application/json", strdup("{\"status\":\"ok\"}"), 0);
    }
    if (!strcmp(url, "/metrics")) {
        gm_sched_stats st = {0};
        if (ready) gm_sched_get_stats(s->sched, &st);
        pthread_mutex_lock(&s->mu);
        srv_counters cnt = s->cnt;
        pthread_mutex_unlock(&s->mu);
        return reply(cs, c, 200, "text/plain; version=0.0.4", srv_fmt_metrics(&st, &cnt, ready), 0);
    }
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) {
        if (!get) return reply_err(cs, c, 405, NULL, "use GET for %s", "/v1/models");
        return reply(cs, c, 200, "application/json", srv_fmt_models(s->cfg.model_id, s->started, ready), 0);
    }
    int kind = !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions") ? SRV_CHAT
               : !strcmp(url, "/v1/completions") || !strcmp(url, "/completions")        ? SRV_COMPLETION
                                                                                         : -1;
    if (kind < 0) {
        count(s, &s->cnt.invalid);
        return reply_err(cs, c, 404, NULL, "no route %s %s", method, url);
    }
    if (!post) {
        count(s, &s->cnt.invalid);
        return reply_err(cs, c, 405, NULL, "use POST");
    }
    if (!ready) return reply_err(cs, c, 503, NULL, "Loading model");
    return generate(cs, c, (srv_kind)kind);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    conn_state *cs = *con_cls;
    if (!cs) return;
    *con_cls = NULL;
    char extra[160] = "";
    if (cs->job) {
        job *j = cs->job;
        pthread_mutex_lock(&j->mu);
        snprintf(extra, sizeof extra, " prompt=%d cached=%d gen=%d finish=%s", j->n_prompt, j->n_cached, j->n_gen,
                 j->done ? gm_finish_name(j->finish) : (j->gone ? "client-gone" : "-"));
        pthread_mutex_unlock(&j->mu);
        job_release(j);
    }
    fprintf(stderr, "serve: %s %s %d %.1f ms%s%s\n", cs->method, cs->path, cs->status ? cs->status : 499,
            gm_sched_now_ms() - cs->t0, extra,
            toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" :
            toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? " (timeout)" :
            toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN ? " (shutdown)" : " (connection closed)");
    free(cs->body);
    free(cs);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = '\0';
    fprintf(stderr, "serve: http: %s\n", msg);
}

srv_server *srv_start(const srv_config *cfg, char *err, size_t err_size) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)cfg->port);
    const char *host = !strcmp(cfg->host, "localhost") ? "127.0.0.1" : cfg->host;
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        snprintf(err, err_size, "--host '%s' is not an IPv4 address", cfg->host);
        return NULL;
    }
    if (cfg->port < 0 || cfg->port > 65535) {
        snprintf(err, err_size, "--port %d is outside [0, 65535]", cfg->port);
        return NULL;
    }
    srv_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->started = (long)time(NULL);
    atomic_init(&s->next_id, 1);
    atomic_init(&s->ready, false);
    atomic_init(&s->stopping, false);
    pthread_mutex_init(&s->mu, NULL);
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                            (uint16_t)cfg->port, NULL, NULL, handler, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_SOCK_ADDR, &addr, MHD_OPTION_CONNECTION_TIMEOUT, cfg->conn_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                            cfg->max_connections, MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, err_size, "cannot listen on %s:%d: %s", cfg->host, cfg->port, errno ? strerror(errno) : "failed");
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

int srv_port(const srv_server *s) {
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : s->cfg.port;
}

void srv_attach(srv_server *s, const gemmac_model *model, gm_sched *sched, int32_t n_ctx, const char *model_id) {
    snprintf(s->model_id, sizeof s->model_id, "%s", model_id && *model_id ? model_id : "gemmac");
    s->cfg.model_id = s->model_id;
    s->model = model;
    s->sched = sched;
    s->n_ctx = n_ctx;
    atomic_store(&s->ready, true);
}

void srv_stop(srv_server *s) {
    if (!s) return;
    atomic_store(&s->stopping, true);
    MHD_stop_daemon(s->d); /* joins the connection threads: each waiting one sees stopping within WAIT_MS */
    pthread_mutex_destroy(&s->mu);
    free(s);
}
