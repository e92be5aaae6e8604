/* server.h: the OpenAI-compatible HTTP server (libmicrohttpd, one thread per connection): routes, API key,
 * request lifecycle (parse, render, tokenize, submit to the scheduler, stream or answer), disconnect detection,
 * a one-line log per request. Model loading and the scheduler's lifetime belong to the caller (cli/cmd_serve.c). */
#ifndef GM_SERVER_SERVER_H
#define GM_SERVER_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "batch/scheduler.h"
#include "gemmac.h"
#include "request.h"

typedef struct srv_config {
    const char *host;          /* IPv4 address to bind ("127.0.0.1"; "localhost" is accepted) */
    int port;                  /* 0: any free port (see srv_port) */
    const char *api_key;       /* NULL: no authentication */
    const char *model_id;      /* the id /v1/models reports */
    int32_t default_max_tokens;/* when a request gives none (capped by what is left of the context) */
    double time_limit_ms;      /* per request, from submission; 0: none */
    unsigned conn_timeout_s;   /* idle timeout while reading headers/body (MHD_OPTION_CONNECTION_TIMEOUT) */
    unsigned max_connections;
    srv_limits limits;
} srv_config;

srv_config srv_default_config(void);

typedef struct srv_server srv_server;

/* Starts listening; until srv_attach, /health answers 503 and generation routes 503. NULL with err on failure. */
srv_server *srv_start(const srv_config *cfg, char *err, size_t err_size);
int srv_port(const srv_server *s);
/* The model is loaded and the scheduler runs: start serving. model_id (copied) names it in responses. */
void srv_attach(srv_server *s, const gemmac_model *model, gm_sched *sched, int32_t n_ctx, const char *model_id);
/* Cancels what is in flight, closes every connection, frees. Call before freeing the scheduler. */
void srv_stop(srv_server *s);

#endif
