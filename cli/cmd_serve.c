/* cmd_serve.c: `gemmac serve`: its own options (--host --port -np --api-key ...), then listen at once (/health
 * says 503 while loading), load the model, start the scheduler (src/batch) and serve (server/) until SIGINT or
 * SIGTERM. Built without libmicrohttpd/cJSON it only says so. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#ifdef GEMMAC_HAVE_SERVER
#include "batch/scheduler.h"
#include "server.h"

/* Consecutive failed decode steps after which the backend counts as unusable. */
enum { SERVE_MAX_FAILURES_IN_A_ROW = 8 };

static void serve_usage(void) {
    fprintf(stderr,
            "usage: gemmac serve [-m FILE] [--host 127.0.0.1] [--port 8080] [-np SLOTS] [-c CTX] [--api-key KEY]\n"
            "  -np N             parallel slots (sequences decoded together; default 4)\n"
            "  -c N              context per slot (default: the model's, at most 4096)\n"
            "  --queue N         requests waiting for a slot before 503 (default 4 x slots)\n"
            "  --max-tokens N    max_tokens when a request gives none (default 512)\n"
            "  --time-limit S    per-request time limit in seconds (default 600; 0: none)\n"
            "  --timeout S       idle timeout reading a request (default 30)\n"
            "  --api-key KEY     require Authorization: Bearer KEY on every route but /health\n"
            "  also: -t -b and the sampling defaults of `gemmac run`\n");
}

int cmd_serve(int argc, char **argv) {
    srv_config cfg = srv_default_config();
    int32_t n_slots = 4, queue = 0;
    /* our options out, the common ones to cli_parse */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return 1;
    int nrest = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        double d;
        if (i < 2) {
            rest[nrest++] = argv[i];
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage();
            free(rest);
            return 0;
        }
        bool ours = true, ok = v != NULL;
        if (!strcmp(a, "--host")) cfg.host = v;
        else if (!strcmp(a, "--port")) ok = ok && cli_int(v, 0, 65535, &l) && ((cfg.port = (int)l), true);
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel"))
            ok = ok && cli_int(v, 1, 256, &l) && ((n_slots = (int32_t)l), true);
        else if (!strcmp(a, "--queue")) ok = ok && cli_int(v, 1, 100000, &l) && ((queue = (int32_t)l), true);
        else if (!strcmp(a, "--max-tokens"))
            ok = ok && cli_int(v, 1, 1 << 20, &l) && ((cfg.default_max_tokens = (int32_t)l), true);
        else if (!strcmp(a, "--time-limit"))
            ok = ok && cli_float(v, 0, 1e7, &d) && ((cfg.time_limit_ms = d * 1e3), true);
        else if (!strcmp(a, "--timeout") || !strcmp(a, "-to"))
            ok = ok && cli_int(v, 1, 86400, &l) && ((cfg.conn_timeout_s = (unsigned)l), true);
        else if (!strcmp(a, "--api-key")) ok = ok && *v;
        else ours = false;
        if (!ours) {
            rest[nrest++] = argv[i];
            continue;
        }
        if (!ok) {
            fprintf(stderr, "gemmac serve: %s %s%s%s is not valid (try gemmac serve --help)\n", a, v ? "'" : "",
                    v ? v : "needs a value", v ? "'" : "");
            free(rest);
            return 2;
        }
        if (!strcmp(a, "--api-key")) cfg.api_key = v;
        i++;
    }
    cli_opts o;
    bool parsed = cli_parse("serve", nrest, rest, 2, &o);
    free(rest);
    if (!parsed) return 2;
    if (o.prompt || o.prompt_file || o.tokens) {
        fprintf(stderr, "gemmac serve: prompts come from HTTP requests, not -p/-f/--tokens\n");
        return 2;
    }

    /* signals: blocked in every thread (they inherit the mask), taken by sigwait below */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[600];
    srv_server *srv = srv_start(&cfg, err, sizeof err);
    if (!srv) {
        fprintf(stderr, "gemmac serve: %s\n", err);
        return 1;
    }
    fprintf(stderr, "serve: listening on http://%s:%d (loading the model)\n", cfg.host, srv_port(srv));
    int ret = 1;
    gemmac_ctx *ctx = NULL;
    gm_sched *sched = NULL;
    o.no_progress = true;
    gemmac_model *m = cli_load_model("serve", &o);
    if (!m) goto done;
    gemmac_model_info mi;
    gemmac_model_get_info(m, &mi);
    if (!mi.has_tokenizer) { /* requests carry text: without a tokenizer every one would fail */
        fprintf(stderr, "gemmac serve: this model has no tokenizer (a Hugging Face directory without tokenizer.json): "
                        "the server needs one\n");
        goto done;
    }
    if (!(ctx = cli_new_ctx("serve", m, &o, n_slots))) goto done;
    gm_sched_params sp = gm_sched_default_params();
    sp.n_slots = n_slots;
    sp.queue_max = queue;
    sp.step_tokens = o.n_batch;
    sp.prefill_chunk = o.n_batch / 2 > 0 ? o.n_batch / 2 : 1;
    if (gm_sched_new(m, ctx, &sp, &sched, err, sizeof err) != GEMMAC_OK) {
        fprintf(stderr, "gemmac serve: %s\n", err);
        goto done;
    }
    gemmac_model_info info;
    gemmac_model_get_info(m, &info);
    char model_id[256];
    if (o.model) {
        const char *b = strrchr(o.model, '/');
        snprintf(model_id, sizeof model_id, "%s", b ? b + 1 : o.model);
    } else snprintf(model_id, sizeof model_id, "%s", info.name && *info.name ? info.name : "gemmac");
    srv_attach(srv, m, sched, gemmac_ctx_n_ctx(ctx), model_id);
    fprintf(stderr, "serve: ready: %s, %d slots x %d tokens, queue %d%s\n", model_id, n_slots, gemmac_ctx_n_ctx(ctx),
            queue ? queue : 4 * n_slots, cfg.api_key ? ", API key required" : "");
    /* Serve until a signal; a backend that fails every step is unusable: exit non-zero rather than stay up
     * answering only errors (a supervisor can restart us). */
    for (;;) {
        const struct timespec tick = {1, 0};
        const int sig = sigtimedwait(&set, NULL, &tick);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            ret = 0;
            break;
        }
        gm_sched_stats stats;
        gm_sched_get_stats(sched, &stats);
        if (stats.failures_in_a_row >= SERVE_MAX_FAILURES_IN_A_ROW) {
            fprintf(stderr, "gemmac serve: the backend failed %llu decode steps in a row; exiting\n",
                    (unsigned long long)stats.failures_in_a_row);
            ret = 1;
            break;
        }
    }
done:
    srv_stop(srv);        /* first: connections stop waiting for the scheduler */
    gm_sched_free(sched); /* then: whatever is left is cancelled */
    gemmac_ctx_free(ctx);
    gemmac_model_free(m);
    return ret;
}

#else

int cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "gemmac serve: this gemmac was built without the server (it needs libmicrohttpd and cJSON "
                    "when configuring: apt-get install libmicrohttpd-dev libcjson-dev)\n");
    return 2;
}

#endif
