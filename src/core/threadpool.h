/* threadpool.h: a fixed pool of worker threads that run one parallel region at a time.
 * The caller's thread takes part as worker 0, so a pool of n threads starts n-1. Owns only scheduling;
 * how work is split (rows, heads) is decided by the op that calls gm_pool_run. */
#ifndef GM_THREADPOOL_H
#define GM_THREADPOOL_H

#include "core/error.h"

typedef struct gm_pool gm_pool;

/* fn is called once per thread with its index ith in [0, nth). */
typedef void (*gm_pool_fn)(void *arg, int ith, int nth);

/* n_threads <= 0: one per online CPU. */
gemmac_status gm_pool_new(int n_threads, gm_pool **out, gm_error *err);
void gm_pool_free(gm_pool *p);
int gm_pool_size(const gm_pool *p);
/* Runs fn on every thread and returns when all have finished. Not reentrant. */
void gm_pool_run(gm_pool *p, gm_pool_fn fn, void *arg);

/* Splits [0, n) into nth near-equal ranges; thread ith gets [*begin, *end). */
static inline void gm_split_range(long n, int ith, int nth, long *begin, long *end) {
    long per = n / nth, extra = n % nth;
    *begin = ith * per + (ith < extra ? ith : extra);
    *end = *begin + per + (ith < extra ? 1 : 0);
}

#endif
