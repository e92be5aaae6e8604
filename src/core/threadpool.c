/* threadpool.c: workers wait on a generation counter: they spin briefly (a decode step runs hundreds of
 * short regions, and waking a sleeping thread costs more than the region) and then sleep on a condvar. */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GM_CPU_RELAX() _mm_pause()
#else
#define GM_CPU_RELAX() ((void)0)
#endif

enum { GM_SPIN_ITERS = 20000 };

struct gm_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint generation;   /* bumped by gm_pool_run to start a region */
    atomic_int pending;       /* workers (not the caller) still running the current region */
    atomic_bool stop;
    gm_pool_fn fn;
    void *arg;
};

typedef struct worker_arg {
    gm_pool *pool;
    int ith;
} worker_arg;

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    gm_pool *pool = wa.pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
               !atomic_load(&pool->stop)) {
            if (++spins < GM_SPIN_ITERS) {
                GM_CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&pool->mu);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = gen;
        pool->fn(pool->arg, wa.ith, pool->n_threads);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel);
    }
}

gemmac_status gm_pool_new(int n_threads, gm_pool **out, gm_error *err) {
    *out = NULL;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > 512) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "%d threads is more than 512", n_threads);
    gm_pool *p = calloc(1, sizeof *p);
    if (!p) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        gm_pool_free(p);
        return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->pool = p;
            wa->ith = i;
        }
        if (!wa || pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i; /* join only those started */
            gm_pool_free(p);
            return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "thread pool: could not start thread %d", i);
        }
    }
    *out = p;
    return GEMMAC_OK;
}

void gm_pool_free(gm_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++)
        if (p->threads) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int gm_pool_size(const gm_pool *p) { return p->n_threads; }

void gm_pool_run(gm_pool *p, gm_pool_fn fn, void *arg) {
    if (p->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, p->n_threads - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n_threads);
    /* Spin while the others finish; if they were descheduled (more threads than free cores), give the
     * core away instead of burning it. */
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (spins < GM_SPIN_ITERS) GM_CPU_RELAX();
        else sched_yield();
    }
}
