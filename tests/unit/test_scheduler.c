/* test_scheduler.c: the continuous-batching scheduler (src/batch/scheduler.h) on the tiny random model (always)
 * and the default model (skipped when absent): concurrent greedy requests give exactly the tokens they give
 * alone, steps batch many sequences, cancel/timeout/queue-full/backend failure, stop strings, prefix reuse. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "batch/scheduler.h"
#include "gemmac.h"
#include "test_paths.h"
#include "tiny_model.h"

/* ---- a request's collected output ---- */
typedef struct coll {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gemmac_token tok[512];
    int32_t n_tok;
    char text[8192];
    size_t n_text;
    bool done;
    gm_finish finish;
    int32_t n_prompt, n_cached, n_gen;
    int32_t stop_after;        /* > 0: return false after this many tokens */
    bool gated;                /* an event after gate_after tokens waits (on the scheduler thread) until gate_open */
    int32_t gate_after;        /* 0: the first event waits */
    bool gate_open;
} coll;

/* Opens c's gate: a scheduler held at c's first event goes on. */
static void coll_open_gate(coll *c) {
    pthread_mutex_lock(&c->mu);
    c->gate_open = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void coll_init(coll *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

static void coll_destroy(coll *c) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

static bool on_event(void *user, const gm_sched_event *ev) {
    coll *c = user;
    pthread_mutex_lock(&c->mu);
    while (c->gated && c->n_tok >= c->gate_after && !c->gate_open) pthread_cond_wait(&c->cv, &c->mu);
    if (!ev->done && c->n_tok < 512) c->tok[c->n_tok++] = ev->token;
    if (ev->text_len && c->n_text + ev->text_len < sizeof c->text) {
        memcpy(c->text + c->n_text, ev->text, ev->text_len);
        c->n_text += ev->text_len;
    }
    bool go = !(c->stop_after > 0 && c->n_tok >= c->stop_after);
    if (ev->done) {
        c->done = true;
        c->finish = ev->finish;
        c->n_prompt = ev->n_prompt;
        c->n_cached = ev->n_cached;
        c->n_gen = ev->n_gen;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return go;
}

static void coll_wait_done(coll *c) {
    pthread_mutex_lock(&c->mu);
    while (!c->done) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static void coll_wait_tokens(coll *c, int32_t n) {
    pthread_mutex_lock(&c->mu);
    while (!c->done && c->n_tok < n) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static gm_sched_request greedy_req(const gemmac_token *p, size_t n, int32_t max_tokens, coll *c) {
    gm_sched_request r = {.prompt = p, .n_prompt = n, .sp = gemmac_sampler_default_params(),
                          .max_tokens = max_tokens, .ignore_eos = true, .cb = on_event, .user = c};
    r.sp.temp = 0;
    return r;
}

/* ---- fixtures: a model, a context with n slots, a scheduler ---- */
typedef struct env {
    gemmac_model *m;
    gemmac_ctx *ctx;
    gm_sched *s;
} env;

static char g_tiny_path[256];

static int group_setup(void **state) {
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_tiny_path, sizeof g_tiny_path, "%s/gm_sched_tiny_%d.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    gm_tiny_opts o = gm_tiny_default_opts();
    o.n_ctx_train = 256;
    o.embd_amp = 0.1f; /* lets the layers steer greedy decoding (see tiny_model.h) */
    gm_tiny *t = gm_tiny_new(&o);
    bool ok = gm_tiny_write_file(t, g_tiny_path);
    gm_tiny_free(t);
    return ok ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    unlink(g_tiny_path);
    return 0;
}

static bool env_open(env *e, const char *path, int32_t n_slots, int32_t n_ctx, int32_t queue_max, int32_t n_batch) {
    memset(e, 0, sizeof *e);
    char err[512];
    if (gemmac_model_load(path, NULL, &e->m, err, sizeof err) != GEMMAC_OK) return false;
    gemmac_ctx_params cp = gemmac_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_slots;
    cp.n_batch = n_batch;
    cp.n_threads = 2;
    assert_int_equal(gemmac_ctx_new(e->m, &cp, &e->ctx, err, sizeof err), GEMMAC_OK);
    gm_sched_params sp = gm_sched_default_params();
    sp.n_slots = n_slots;
    sp.queue_max = queue_max;
    sp.prefill_chunk = 16; /* several chunks per prompt: exercises chunked prefill */
    assert_int_equal(gm_sched_new(e->m, e->ctx, &sp, &e->s, err, sizeof err), GEMMAC_OK);
    return true;
}

static void env_close(env *e) {
    gm_sched_free(e->s);
    gemmac_ctx_free(e->ctx);
    gemmac_model_free(e->m);
}

static void make_prompt(gemmac_token *p, int32_t n, int32_t seed, int32_t n_vocab) {
    p[0] = 2; /* <bos> */
    for (int32_t i = 1; i < n; i++) p[i] = 6 + (int32_t)((uint32_t)(seed * 7919 + i * 104729) % (uint32_t)(n_vocab - 6));
}

/* Runs k requests concurrently, then each alone on a fresh scheduler; token lists must match exactly. */
static void concurrent_equals_alone(const char *path, int32_t k, int32_t max_tokens, int32_t n_ctx) {
    env e;
    assert_true(env_open(&e, path, k, n_ctx, 0, 64));
    gemmac_model_info info;
    gemmac_model_get_info(e.m, &info);
    gemmac_token prompts[16][48];
    int32_t lens[16];
    coll *c = calloc((size_t)k, sizeof *c);
    for (int32_t i = 0; i < k; i++) {
        lens[i] = 5 + (i * 7) % 40; /* 5..44 tokens: prefills of different lengths overlap decodes */
        make_prompt(prompts[i], lens[i], i + 1, info.n_vocab < 1000 ? info.n_vocab : 1000);
        coll_init(&c[i]);
    }
    uint64_t id;
    /* The first request's first token holds the scheduler until every request is submitted, so that a busy
     * machine cannot finish it before the last one arrives: all k then share steps. */
    c[0].gated = true;
    for (int32_t i = 0; i < k; i++) {
        gm_sched_request r = greedy_req(prompts[i], (size_t)lens[i], max_tokens, &c[i]);
        assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_OK);
    }
    coll_open_gate(&c[0]);
    for (int32_t i = 0; i < k; i++) coll_wait_done(&c[i]);
    gm_sched_stats st;
    gm_sched_get_stats(e.s, &st);
    /* all k were admitted together: some step carried every sequence */
    assert_true(st.max_step_seqs >= k);
    assert_int_equal(st.finished[GM_FINISH_LENGTH], (uint64_t)k);
    assert_int_equal(st.active, 0);
    assert_int_equal(st.queued, 0);
    env_close(&e);
    for (int32_t i = 0; i < k; i++) {
        assert_int_equal(c[i].finish, GM_FINISH_LENGTH);
        assert_int_equal(c[i].n_tok, max_tokens);
        env e1;
        assert_true(env_open(&e1, path, 1, n_ctx, 0, 512));
        coll a;
        coll_init(&a);
        gm_sched_request r = greedy_req(prompts[i], (size_t)lens[i], max_tokens, &a);
        assert_int_equal(gm_sched_submit(e1.s, &r, &id), GM_SUBMIT_OK);
        coll_wait_done(&a);
        env_close(&e1);
        assert_int_equal(a.n_tok, c[i].n_tok);
        assert_memory_equal(a.tok, c[i].tok, (size_t)a.n_tok * sizeof a.tok[0]);
        coll_destroy(&a);
        coll_destroy(&c[i]);
    }
    free(c);
}

static void test_tiny_concurrent_equals_alone(void **state) {
    (void)state;
    concurrent_equals_alone(g_tiny_path, 8, 12, 128);
}

#if defined(__SANITIZE_ADDRESS__)
#define GM_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GM_SANITIZED 1
#endif
#endif

static void test_default_model_concurrent_equals_alone(void **state) {
    (void)state;
    char buf[1024];
    const char *path = gm_test_model_path(buf, sizeof buf);
    if (!path) skip();
#ifdef GM_SANITIZED
    concurrent_equals_alone(path, 4, 2, 128); /* unoptimised: a smaller run; the full one is in the main pass */
#else
    concurrent_equals_alone(path, 8, 6, 256);
#endif
}

static void test_cancel_frees_slot(void **state) {
    (void)state;
    env e;
    assert_true(env_open(&e, g_tiny_path, 1, 200, 4, 64));
    gemmac_token p[10];
    make_prompt(p, 10, 3, 300);
    coll a, b, q;
    coll_init(&a);
    coll_init(&b);
    coll_init(&q);
    uint64_t ida, idb, idq;
    /* the running request is held at its third token (on the scheduler thread) until both cancels are in, so the
     * test does not race it to its 150 tokens on a busy machine */
    a.gated = true, a.gate_after = 2;
    gm_sched_request ra = greedy_req(p, 10, 150, &a);
    assert_int_equal(gm_sched_submit(e.s, &ra, &ida), GM_SUBMIT_OK);
    coll_wait_tokens(&a, 2);
    /* queued behind the running one, then cancelled while queued: no token ever */
    gm_sched_request rq = greedy_req(p, 10, 5, &q);
    assert_int_equal(gm_sched_submit(e.s, &rq, &idq), GM_SUBMIT_OK);
    gm_sched_cancel(e.s, idq);
    /* cancel the running one: it stops long before 150 and its slot serves the next request */
    gm_sched_cancel(e.s, ida);
    coll_open_gate(&a);
    coll_wait_done(&q);
    assert_int_equal(q.finish, GM_FINISH_CANCELLED);
    assert_int_equal(q.n_tok, 0);
    coll_wait_done(&a);
    assert_int_equal(a.finish, GM_FINISH_CANCELLED);
    assert_true(a.n_tok < 150);
    gm_sched_stats st;
    gm_sched_get_stats(e.s, &st);
    assert_int_equal(st.active, 0);
    assert_int_equal(st.finished[GM_FINISH_CANCELLED], 2);
    /* a callback returning false cancels too */
    b.stop_after = 3;
    gm_sched_request rb = greedy_req(p, 10, 100, &b);
    assert_int_equal(gm_sched_submit(e.s, &rb, &idb), GM_SUBMIT_OK);
    coll_wait_done(&b);
    assert_int_equal(b.finish, GM_FINISH_CANCELLED);
    assert_int_equal(b.n_tok, 3);
    gm_sched_cancel(e.s, idb); /* finished: ignored */
    gm_sched_cancel(e.s, 999999);
    env_close(&e);
    coll_destroy(&a);
    coll_destroy(&b);
    coll_destroy(&q);
}

static void test_queue_full(void **state) {
    (void)state;
    env e;
    assert_true(env_open(&e, g_tiny_path, 1, 200, 1, 64));
    gemmac_token p[8];
    make_prompt(p, 8, 5, 300);
    coll a, b, c;
    coll_init(&a);
    coll_init(&b);
    coll_init(&c);
    uint64_t ida, idb, idc;
    gm_sched_request ra = greedy_req(p, 8, 150, &a), rb = greedy_req(p, 8, 4, &b), rc = greedy_req(p, 8, 4, &c);
    a.gated = true, a.gate_after = 1; /* a holds the only slot, held at its second token until it is cancelled */
    assert_int_equal(gm_sched_submit(e.s, &ra, &ida), GM_SUBMIT_OK);
    coll_wait_tokens(&a, 1);
    assert_int_equal(gm_sched_submit(e.s, &rb, &idb), GM_SUBMIT_OK);
    assert_int_equal(gm_sched_submit(e.s, &rc, &idc), GM_SUBMIT_QUEUE_FULL);
    gm_sched_stats st;
    gm_sched_get_stats(e.s, &st);
    assert_int_equal(st.rejected_full, 1);
    assert_int_equal(st.queued, 1);
    gm_sched_cancel(e.s, ida);
    coll_open_gate(&a);
    coll_wait_done(&b); /* b gets the slot once a is gone */
    assert_int_equal(b.finish, GM_FINISH_LENGTH);
    assert_int_equal(b.n_tok, 4);
    env_close(&e);
    coll_destroy(&a);
    coll_destroy(&b);
    coll_destroy(&c);
}

static void test_invalid_submissions(void **state) {
    (void)state;
    env e;
    assert_true(env_open(&e, g_tiny_path, 1, 32, 0, 32));
    coll a;
    coll_init(&a);
    uint64_t id;
    gemmac_token p[40];
    make_prompt(p, 40, 1, 300);
    gm_sched_request r = greedy_req(p, 0, 4, &a);
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_INVALID); /* empty */
    r.n_prompt = 32;
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_INVALID); /* fills the context */
    r.n_prompt = 4;
    r.max_tokens = 0;
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_INVALID);
    r.max_tokens = 4;
    gemmac_token bad[2] = {2, 1 << 30};
    r.prompt = bad;
    r.n_prompt = 2;
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_INVALID);
    r.prompt = p;
    r.sp.top_p = 7.0f;
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_INVALID);
    const char *empty_stop[] = {""};
    r.sp = gemmac_sampler_default_params();
    r.stop = empty_stop;
    r.n_stop = 1;
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_INVALID);
    /* the context fills: LENGTH before max_tokens */
    r.stop = NULL;
    r.n_stop = 0;
    r.n_prompt = 28;
    r.max_tokens = 100;
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_OK);
    coll_wait_done(&a);
    assert_int_equal(a.finish, GM_FINISH_LENGTH);
    assert_int_equal(a.n_gen, 32 - 28 + 1); /* positions 28..31 evaluated, the last sampled token is not */
    env_close(&e);
    coll_destroy(&a);
}

static void test_stop_string_and_prefix_reuse(void **state) {
    (void)state;
    env e;
    assert_true(env_open(&e, g_tiny_path, 2, 200, 0, 64));
    gemmac_token p[30];
    make_prompt(p, 30, 9, 300);
    coll a, b, c;
    coll_init(&a);
    coll_init(&b);
    coll_init(&c);
    uint64_t id;
    gm_sched_request r = greedy_req(p, 20, 24, &a);
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_OK);
    coll_wait_done(&a);
    assert_true(a.n_text >= 6);
    /* a stop string from the middle of that text: the output is exactly what precedes it */
    char stop[4] = {0};
    size_t at = a.n_text / 2;
    while (at > 0 && ((unsigned char)a.text[at] & 0xC0) == 0x80) at--; /* a character boundary */
    memcpy(stop, a.text + at, 3);
    const char *first = memmem(a.text, a.n_text, stop, strlen(stop));
    assert_non_null(first);
    const char *stops[] = {"\x01never", stop};
    r.user = &b;
    r.stop = stops;
    r.n_stop = 2;
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_OK);
    coll_wait_done(&b);
    assert_int_equal(b.finish, GM_FINISH_STOP);
    assert_int_equal(b.n_text, (size_t)(first - a.text));
    assert_memory_equal(b.text, a.text, b.n_text);
    /* the same prompt plus 10 tokens: the cached 20 are reused, and the output matches a fresh run */
    gm_sched_request r2 = greedy_req(p, 30, 8, &c);
    assert_int_equal(gm_sched_submit(e.s, &r2, &id), GM_SUBMIT_OK);
    coll_wait_done(&c);
    assert_true(c.n_cached >= 20);
    gm_sched_stats st;
    gm_sched_get_stats(e.s, &st);
    assert_true(st.prompt_tokens_cached >= 20);
    env_close(&e);
    env e1;
    assert_true(env_open(&e1, g_tiny_path, 1, 200, 0, 64));
    coll d;
    coll_init(&d);
    r2.user = &d;
    assert_int_equal(gm_sched_submit(e1.s, &r2, &id), GM_SUBMIT_OK);
    coll_wait_done(&d);
    env_close(&e1);
    assert_int_equal(d.n_cached, 0);
    assert_int_equal(d.n_tok, c.n_tok);
    assert_memory_equal(d.tok, c.tok, (size_t)d.n_tok * sizeof d.tok[0]);
    coll_destroy(&a);
    coll_destroy(&b);
    coll_destroy(&c);
    coll_destroy(&d);
}

static void test_backend_failure_and_timeout(void **state) {
    (void)state;
    env e;
    assert_true(env_open(&e, g_tiny_path, 2, 200, 0, 64));
    gemmac_token p[10];
    make_prompt(p, 10, 4, 300);
    coll a, b, c;
    coll_init(&a);
    coll_init(&b);
    coll_init(&c);
    uint64_t id;
    gm_sched_debug_fail_steps(e.s, 1);
    gm_sched_request r = greedy_req(p, 10, 5, &a);
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_OK);
    coll_wait_done(&a);
    assert_int_equal(a.finish, GM_FINISH_ERROR);
    gm_sched_stats st;
    gm_sched_get_stats(e.s, &st);
    assert_int_equal(st.failures_in_a_row, 1); /* what `gemmac serve` watches to give up on a dead backend */
    r.user = &b; /* the scheduler keeps serving */
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_OK);
    coll_wait_done(&b);
    assert_int_equal(b.finish, GM_FINISH_LENGTH);
    assert_int_equal(b.n_tok, 5);
    r.user = &c;
    r.max_tokens = 150;
    r.time_limit_ms = 1;
    assert_int_equal(gm_sched_submit(e.s, &r, &id), GM_SUBMIT_OK);
    coll_wait_done(&c);
    assert_int_equal(c.finish, GM_FINISH_TIMEOUT);
    gm_sched_get_stats(e.s, &st);
    assert_int_equal(st.step_failures, 1);
    assert_int_equal(st.failures_in_a_row, 0); /* reset by the steps that succeeded */
    assert_int_equal(st.finished[GM_FINISH_ERROR], 1);
    env_close(&e);
    coll_destroy(&a);
    coll_destroy(&b);
    coll_destroy(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_concurrent_equals_alone),
        cmocka_unit_test(test_cancel_frees_slot),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_invalid_submissions),
        cmocka_unit_test(test_stop_string_and_prefix_reuse),
        cmocka_unit_test(test_backend_failure_and_timeout),
        cmocka_unit_test(test_default_model_concurrent_equals_alone),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
