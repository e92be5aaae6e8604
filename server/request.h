/* request.h: the OpenAI request parser and validator, a pure function of the body's bytes (fuzzed by
 * tests/fuzz/fuzz_request.c): size, UTF-8, JSON depth, types and ranges of every field. Knows no model,
 * socket or scheduler: rendering, tokenizing and context checks are the server's. */
#ifndef GM_SERVER_REQUEST_H
#define GM_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemmac.h"

typedef enum srv_kind { SRV_CHAT = 0, SRV_COMPLETION = 1 } srv_kind;

typedef struct srv_limits {
    size_t max_body;           /* bytes (default 1 MiB) */
    int32_t max_depth;         /* JSON nesting (default 64) */
    int32_t max_tokens_cap;    /* largest max_tokens accepted (default 1 << 20; the server checks the context) */
    int32_t max_messages;      /* default 1024 */
    int32_t max_stop;          /* stop strings (default 8) */
    int32_t max_stop_len;      /* bytes per stop string (default 256) */
} srv_limits;

srv_limits srv_default_limits(void);

typedef struct srv_msg {
    char *role;                /* "system", "user", "assistant" ("developer" becomes "system") */
    char *content;
} srv_msg;

typedef struct srv_request {
    srv_kind kind;
    srv_msg *msgs;             /* chat: [n_msgs], n_msgs >= 1 */
    int32_t n_msgs;
    char *prompt;              /* completion */
    size_t prompt_len;
    char *model;               /* as given, or NULL */
    bool stream, include_usage, ignore_eos;
    int32_t max_tokens;        /* -1: not given */
    gemmac_sampler_params sp;  /* llama.cpp's defaults where not given */
    char **stop;               /* [n_stop] */
    int32_t n_stop;
} srv_request;

typedef struct srv_error {
    int status;                /* HTTP status: 400, 413 */
    char message[256];
    const char *type;          /* "invalid_request_error", ... */
    const char *param;         /* the offending field or NULL */
} srv_error;

/* Parses and validates body[0..len). On success fills *out (free with srv_request_free) and returns true; else
 * fills *err (out is left empty). Never reads past len; body need not be NUL-terminated. */
bool srv_parse_request(srv_kind kind, const char *body, size_t len, const srv_limits *lim, srv_request *out,
                       srv_error *err);
void srv_request_free(srv_request *r);

/* Helpers shared with the server. */
bool srv_utf8_valid(const char *s, size_t n);
/* Deepest nesting of [ and { outside strings (stops counting past limit + 1). */
int32_t srv_json_depth(const char *s, size_t n, int32_t limit);

#endif
