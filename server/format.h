/* format.h: the JSON the server sends: OpenAI responses and stream chunks (chat.completion[.chunk],
 * text_completion), error bodies, the model list, and the Prometheus text of /metrics. All JSON is built with
 * cJSON, so model and user text is always escaped. Returned strings are malloc'd; NULL on out of memory. */
#ifndef GM_SERVER_FORMAT_H
#define GM_SERVER_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch/scheduler.h"
#include "request.h"

typedef struct srv_usage {
    int32_t prompt, completion, cached;
} srv_usage;

/* A whole response (chunk false) or one stream chunk. text may be NULL (no content field in a chunk); finish NULL
 * is JSON null; usage NULL leaves it out. usage_only: a chunk with empty choices and the usage (stream_options). */
char *srv_fmt_result(srv_kind kind, bool chunk, const char *id, long created, const char *model, const char *text,
                     size_t len, bool with_role, const char *finish, const srv_usage *usage, bool usage_only);
/* {"error":{"message":..,"type":..,"param":..,"code":..}} */
char *srv_fmt_error(const char *message, const char *type, const char *param, int code);
char *srv_fmt_models(const char *model_id, long created, bool ready);

/* Counters the HTTP side keeps (the scheduler keeps the rest). */
typedef struct srv_counters {
    uint64_t http_2xx, http_4xx, http_5xx;
    uint64_t invalid;          /* rejected with 4xx before reaching the scheduler */
    uint64_t unauthorized;
    uint64_t disconnects;      /* clients gone before their request finished */
} srv_counters;

char *srv_fmt_metrics(const gm_sched_stats *st, const srv_counters *c, bool ready);

#endif
