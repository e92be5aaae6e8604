/* scheduler.h: continuous batching over one gemmac_ctx: a bounded queue of requests, n_slots sequences, and one
 * thread that owns the context and runs steps (every running sequence's next token plus chunks of waiting prompts
 * in ONE decode call), streaming token ids and whole-UTF-8 text to a callback. No HTTP, JSON or prompt rendering:
 * those belong to its clients (server/). Internal module (gm_ prefix), not part of the public header. */
#ifndef GM_BATCH_SCHEDULER_H
#define GM_BATCH_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemmac.h"

typedef struct gm_sched gm_sched;

typedef enum gm_finish {
    GM_FINISH_STOP = 0,        /* end-of-generation token or a stop string */
    GM_FINISH_LENGTH,          /* max_tokens reached, or the sequence's context is full */
    GM_FINISH_TIMEOUT,         /* the request's time limit passed */
    GM_FINISH_CANCELLED,       /* gm_sched_cancel, the callback returned false, or the scheduler stopped */
    GM_FINISH_ERROR,           /* the backend failed while evaluating this request */
    GM_FINISH_COUNT
} gm_finish;

const char *gm_finish_name(gm_finish f); /* "stop", "length", "timeout", "cancelled", "error" */

/* One event for one request. Text events (done == false) carry one generated token and the text it completed
 * (possibly empty: an incomplete UTF-8 sequence, or text held back because it may begin a stop string). The done
 * event comes exactly once, last; after it the scheduler never touches user again. */
typedef struct gm_sched_event {
    bool done;
    gemmac_token token;        /* the generated token (-1 in the done event) */
    const char *text;          /* newly completed text, not NUL-terminated; the done event carries the rest */
    size_t text_len;
    gm_finish finish;          /* done only */
    int32_t n_prompt;          /* prompt tokens */
    int32_t n_cached;          /* of them, reused from the slot's cache (not evaluated again) */
    int32_t n_gen;             /* tokens generated so far (an end-of-generation token is not counted) */
    const char *error;         /* GM_FINISH_ERROR: what failed */
} gm_sched_event;

/* Called on the scheduler thread, without its lock held (it may call gm_sched_cancel/stats). Return false to
 * cancel the request (ignored for the done event). Keep it short: every running request waits for it. */
typedef bool (*gm_sched_cb)(void *user, const gm_sched_event *ev);

typedef struct gm_sched_request {
    const gemmac_token *prompt;        /* [n_prompt], copied; n_prompt >= 1 and < the context size */
    size_t n_prompt;
    gemmac_sampler_params sp;
    int32_t max_tokens;                /* >= 1 */
    bool ignore_eos;
    const char *const *stop;           /* [n_stop] stop strings (copied, non-empty); their text is not emitted */
    int32_t n_stop;
    double time_limit_ms;              /* 0: none; counted from submission */
    gm_sched_cb cb;
    void *user;
} gm_sched_request;

typedef struct gm_sched_params {
    int32_t n_slots;                   /* sequences run at once, <= the context's n_seq_max (default 4) */
    int32_t queue_max;                 /* requests waiting for a slot (default 4 * n_slots); more are rejected */
    int32_t step_tokens;               /* most tokens in one step: decodes + prefill chunks (default 512) */
    int32_t prefill_chunk;             /* most prompt tokens of one request in one step (default 256) */
} gm_sched_params;

gm_sched_params gm_sched_default_params(void);

typedef enum gm_submit_result {
    GM_SUBMIT_OK = 0,
    GM_SUBMIT_QUEUE_FULL,              /* all slots busy and queue_max requests waiting: try again later */
    GM_SUBMIT_INVALID,                 /* empty or too long prompt, bad token id, max_tokens < 1, bad sampler */
    GM_SUBMIT_NO_MEMORY,
    GM_SUBMIT_STOPPED,                 /* the scheduler is shutting down */
} gm_submit_result;

#define GM_SCHED_SEQ_BUCKETS 8          /* sequences per step: <= 1, 2, 4, 8, 16, 32, 64, +Inf */
#define GM_SCHED_TOK_BUCKETS 12         /* tokens per step: <= 1, 2, 4, ..., 1024, +Inf */

typedef struct gm_sched_stats {
    uint64_t finished[GM_FINISH_COUNT]; /* requests by outcome */
    uint64_t rejected_full;             /* submissions refused because the queue was full */
    uint64_t prompt_tokens;             /* prompt tokens of admitted requests */
    uint64_t prompt_tokens_cached;      /* of them, reused from a slot's cache */
    uint64_t prompt_tokens_evaluated;   /* prompt tokens run through the model */
    uint64_t gen_tokens;                /* generated tokens */
    uint64_t steps;                     /* decode calls */
    uint64_t step_failures;             /* decode calls that failed */
    uint64_t failures_in_a_row;         /* failed decode calls since the last one that succeeded */
    uint64_t seq_hist[GM_SCHED_SEQ_BUCKETS]; /* steps by sequences in the batch (not cumulative) */
    uint64_t tok_hist[GM_SCHED_TOK_BUCKETS]; /* steps by tokens in the batch (not cumulative) */
    uint64_t step_tokens_sum, step_seqs_sum;
    int32_t max_step_seqs, max_step_tokens;
    int32_t queued;                     /* waiting for a slot */
    int32_t active;                     /* holding a slot (prefill or decode) */
    int32_t n_slots;
    int64_t kv_used;                    /* positions held by all sequences */
    int64_t kv_capacity;                /* n_slots * n_ctx */
    double last_step_ms;                /* monotonic time of the last step's end (0: none yet) */
    double decode_ms_sum;               /* time spent in decode calls, ms */
} gm_sched_stats;

/* Starts the scheduler thread. The scheduler uses ctx exclusively until gm_sched_free (no other thread may touch
 * it); model must outlive it. On failure writes a message to err. */
gemmac_status gm_sched_new(const gemmac_model *model, gemmac_ctx *ctx, const gm_sched_params *params,
                           gm_sched **out, char *err, size_t err_size);
/* Cancels every request (each gets its done event), stops the thread, frees. ctx is left to the caller. */
void gm_sched_free(gm_sched *s);

/* Queues a request; on GM_SUBMIT_OK *id identifies it and its done event will come. Thread-safe. */
gm_submit_result gm_sched_submit(gm_sched *s, const gm_sched_request *r, uint64_t *id);
/* Cancels a request wherever it is (queued, prefill, decode); its slot is freed at the next step. A finished or
 * unknown id is ignored. Thread-safe. */
void gm_sched_cancel(gm_sched *s, uint64_t id);
void gm_sched_get_stats(gm_sched *s, gm_sched_stats *out);
/* Bucket upper bounds for the histograms (the last bucket is +Inf). */
extern const int32_t gm_sched_seq_bounds[GM_SCHED_SEQ_BUCKETS - 1];
extern const int32_t gm_sched_tok_bounds[GM_SCHED_TOK_BUCKETS - 1];

/* Testing: the next n decode steps fail as if the backend had failed. */
void gm_sched_debug_fail_steps(gm_sched *s, int32_t n);

double gm_sched_now_ms(void);

#endif
