/* cuda_trace.c: a CUPTI kernel tracer for any CUDA program (gemmac, cuda_bench, tests), a developer tool that
 * is no part of libgemmac. Loaded with LD_PRELOAD, its constructor enables CUPTI's CONCURRENT_KERNEL activity
 * (kernels launched directly and kernels replayed from CUDA graphs alike: their records carry the graph's id);
 * at process exit it flushes CUPTI and writes a markdown report: per kernel name (mangled; pipe it through
 * c++filt) count, total/mean/min/max duration, mean gap before it on its stream (gaps under 1 ms only), mean
 * end increment (how much later it ends than every kernel before it on its stream ends: its cost on the critical
 * path, the honest per-kernel figure when programmatic dependent launch overlaps kernels, whose durations then
 * include waiting on their predecessor; increments of 1 ms and more are idle time, left out) and share of all
 * kernel time, sorted by total time; then the totals. Built by CMake as libgemmac_cuda_trace.so (the
 * target gemmac_cuda_trace, only when CUPTI is found). Usage:
 *   LD_PRELOAD=build/libgemmac_cuda_trace.so GEMMAC_TRACE_OUT=/tmp/t.md ./build/gemmac bench ...
 *   c++filt < /tmp/t.md
 * Environment: GEMMAC_TRACE_OUT  file the report is appended to (default: stderr)
 *              GEMMAC_TRACE_SKIP_NS  kernels starting less than this many ns after the first kernel are left
 *                                    out of the statistics (warm-up)
 *              GEMMAC_TRACE_GRAPH_ONLY=1  only kernels replayed from CUDA graphs count (e.g. a benchmark's decoding
 *                                    steps without the prefill that fills its cache); the others are left out as
 *                                    the warm-up is
 * A CUPTI failure prints one line and leaves the host program alone (no report then). */
#define _POSIX_C_SOURCE 200809L

#include <cupti.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TR_TAG "gemmac_cuda_trace"
enum { TR_BUF_BYTES = 8 << 20 };          /* one CUPTI activity buffer */
#define TR_MAX_RECORDS ((size_t)20000000) /* kept kernel records; more are counted, not kept */
#define TR_GAP_LIMIT_NS 1000000ull        /* gaps of 1 ms and more are idle time, not launch overhead */

typedef struct {
    uint64_t start, end; /* ns, CUPTI's clock */
    uint32_t ctx, stream;
    uint32_t name_id;
    uint32_t graph_id; /* 0 when not launched through a graph */
} tr_rec;

typedef struct {
    char *name; /* interned copy */
    uint64_t hash;
} tr_name;

/* everything below is guarded by g_lock: CUPTI hands buffers back on its own thread */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tr_rec *g_recs;
static size_t g_n_recs, g_cap_recs;
static size_t g_over_cap;    /* records beyond TR_MAX_RECORDS */
static size_t g_alloc_fail;  /* records lost to a failed allocation of ours */
static size_t g_dropped;     /* records CUPTI dropped (no buffer space) */
static size_t g_buf_fail;    /* buffer requests we could not satisfy */
static size_t g_late;        /* records delivered after the report was written */
static int g_iter_error;     /* cuptiActivityGetNextRecord failed (reported once) */
static tr_name *g_names;     /* by id */
static size_t g_n_names, g_cap_names;
static uint32_t *g_slots; /* open addressing: name id + 1, 0 = empty */
static size_t g_n_slots;  /* power of two */

static int g_reported;      /* the report is being or was written: later records only counted (g_lock) */
static atomic_int g_active; /* CUPTI tracing was enabled */
static atomic_int g_done;   /* tr_finish has run */
static uint32_t g_cupti_version;

static void tr_cupti_fail(const char *what, CUptiResult r) {
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
    fprintf(stderr, TR_TAG ": %s failed: %s (%d); kernel tracing disabled\n", what, s, (int)r);
}

static uint64_t tr_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* rebuilds the slot table at twice the size; returns 0 on failure */
static int tr_grow_slots(void) {
    size_t n = g_n_slots ? g_n_slots * 2 : 1024;
    uint32_t *s = calloc(n, sizeof *s);
    if (!s) return 0;
    for (size_t i = 0; i < g_n_names; i++) {
        size_t j = (size_t)g_names[i].hash & (n - 1);
        while (s[j]) j = (j + 1) & (n - 1);
        s[j] = (uint32_t)i + 1;
    }
    free(g_slots);
    g_slots = s;
    g_n_slots = n;
    return 1;
}

/* the id of name, interning a copy on first sight; UINT32_MAX on allocation failure */
static uint32_t tr_intern(const char *name) {
    if (!name) name = "(unnamed)";
    if (2 * (g_n_names + 1) > g_n_slots && !tr_grow_slots()) return UINT32_MAX;
    uint64_t h = tr_hash(name);
    size_t j = (size_t)h & (g_n_slots - 1);
    while (g_slots[j]) {
        const tr_name *e = &g_names[g_slots[j] - 1];
        if (e->hash == h && strcmp(e->name, name) == 0) return g_slots[j] - 1;
        j = (j + 1) & (g_n_slots - 1);
    }
    if (g_n_names == g_cap_names) {
        size_t cap = g_cap_names ? g_cap_names * 2 : 256;
        tr_name *p = realloc(g_names, cap * sizeof *p);
        if (!p) return UINT32_MAX;
        g_names = p;
        g_cap_names = cap;
    }
    size_t len = strlen(name);
    char *copy = malloc(len + 1);
    if (!copy) return UINT32_MAX;
    memcpy(copy, name, len + 1);
    g_names[g_n_names] = (tr_name){copy, h};
    g_slots[j] = (uint32_t)g_n_names + 1;
    return (uint32_t)g_n_names++;
}

static void tr_add(const CUpti_ActivityKernel10 *k) {
    if (g_n_recs >= TR_MAX_RECORDS) {
        g_over_cap++;
        return;
    }
    if (g_n_recs == g_cap_recs) {
        size_t cap = g_cap_recs ? g_cap_recs * 2 : 65536;
        if (cap > TR_MAX_RECORDS) cap = TR_MAX_RECORDS;
        tr_rec *p = realloc(g_recs, cap * sizeof *p);
        if (!p) {
            g_alloc_fail++;
            return;
        }
        g_recs = p;
        g_cap_recs = cap;
    }
    uint32_t id = tr_intern(k->name);
    if (id == UINT32_MAX) {
        g_alloc_fail++;
        return;
    }
    g_recs[g_n_recs++] = (tr_rec){k->start, k->end, k->contextId, k->streamId, id, k->graphId};
}

static void CUPTIAPI tr_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    uint8_t *b = aligned_alloc(8, TR_BUF_BYTES); /* records are 8-byte aligned (ACTIVITY_RECORD_ALIGNMENT) */
    if (!b) {
        pthread_mutex_lock(&g_lock);
        g_buf_fail++;
        pthread_mutex_unlock(&g_lock);
    }
    *buffer = b; /* NULL declines: CUPTI drops records and counts them */
    *size = b ? TR_BUF_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

static void CUPTIAPI tr_buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                         size_t valid) {
    (void)size;
    if (!buffer) return;
    pthread_mutex_lock(&g_lock);
    CUpti_Activity *rec = NULL;
    for (;;) {
        CUptiResult r = valid ? cuptiActivityGetNextRecord(buffer, valid, &rec) : CUPTI_ERROR_MAX_LIMIT_REACHED;
        if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break; /* end of the buffer */
        if (r != CUPTI_SUCCESS) {
            /* CUPTI_ERROR_INVALID_KIND: an incomplete or invalid record; the rest of the buffer is unreadable */
            if (!g_iter_error) {
                const char *s = NULL;
                if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
                fprintf(stderr, TR_TAG ": cuptiActivityGetNextRecord failed: %s (%d); rest of a buffer skipped\n", s,
                        (int)r);
            }
            g_iter_error++;
            break;
        }
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        if (g_reported) g_late++;
        else tr_add((const CUpti_ActivityKernel10 *)rec);
    }
    size_t dropped = 0;
    CUptiResult r = cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped);
    if (r == CUPTI_SUCCESS) g_dropped += dropped;
    pthread_mutex_unlock(&g_lock);
    free(buffer);
}

/* ---- report ---- */

static int tr_cmp_rec(const void *a, const void *b) {
    const tr_rec *x = a, *y = b;
    if (x->ctx != y->ctx) return x->ctx < y->ctx ? -1 : 1;
    if (x->stream != y->stream) return x->stream < y->stream ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

typedef struct {
    uint32_t id;
    uint64_t count, graph_count;
    uint64_t total, min, max; /* ns */
    uint64_t gap_sum, gap_n;  /* gaps < 1 ms before this kernel on its stream */
    uint64_t incr_sum, incr_n; /* end increments < 1 ms (see the header) */
} tr_stat;

static int tr_cmp_stat(const void *a, const void *b) {
    const tr_stat *x = a, *y = b;
    if (x->total != y->total) return x->total > y->total ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void tr_report(FILE *f) {
    uint64_t skip_ns = 0;
    const char *skip_env = getenv("GEMMAC_TRACE_SKIP_NS");
    if (skip_env && *skip_env) skip_ns = strtoull(skip_env, NULL, 10);
    const char *graph_env = getenv("GEMMAC_TRACE_GRAPH_ONLY");
    const int graph_only = graph_env && atoi(graph_env) == 1;

    char exe[512];
    ssize_t n_exe = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n_exe < 0) n_exe = 0;
    exe[n_exe] = '\0';

    /* keep the records with timestamps (a forced flush may hand back kernels that never completed) */
    size_t n = 0, no_ts = 0;
    for (size_t i = 0; i < g_n_recs; i++) {
        const tr_rec *r = &g_recs[i];
        if (r->start == 0 || r->end < r->start) {
            no_ts++;
            continue;
        }
        g_recs[n++] = *r;
    }
    qsort(g_recs, n, sizeof *g_recs, tr_cmp_rec);
    uint64_t first = UINT64_MAX;
    for (size_t i = 0; i < n; i++)
        if (g_recs[i].start < first) first = g_recs[i].start;
    uint64_t from = n && first <= UINT64_MAX - skip_ns ? first + skip_ns : UINT64_MAX;

    tr_stat *st = calloc(g_n_names ? g_n_names : 1, sizeof *st);
    if (!st) {
        fprintf(f, TR_TAG ": out of memory for the report\n");
        return;
    }
    for (size_t i = 0; i < g_n_names; i++) st[i] = (tr_stat){.id = (uint32_t)i, .min = UINT64_MAX};

    uint64_t kernels = 0, graph_kernels = 0, busy = 0, gap_sum = 0, gap_n = 0, long_gaps = 0, overlaps = 0;
    uint64_t incr_sum = 0, skipped = 0, span_lo = UINT64_MAX, span_hi = 0, streams = 0;
    uint64_t prev_end = 0; /* latest end so far on the current stream */
    for (size_t i = 0; i < n; i++) {
        const tr_rec *r = &g_recs[i];
        int new_stream = i == 0 || r->ctx != g_recs[i - 1].ctx || r->stream != g_recs[i - 1].stream;
        if (new_stream) streams++;
        int has_prev = !new_stream;
        uint64_t p_end = prev_end;
        prev_end = new_stream || r->end > prev_end ? r->end : prev_end;
        const uint64_t incr = has_prev && r->end > p_end ? r->end - p_end : 0;
        if (r->start < from || (graph_only && !r->graph_id)) { /* left out: still the next kernel's predecessor */
            skipped++;
            continue;
        }
        tr_stat *s = &st[r->name_id];
        uint64_t d = r->end - r->start;
        s->count++;
        s->total += d;
        if (d < s->min) s->min = d;
        if (d > s->max) s->max = d;
        if (r->graph_id) {
            s->graph_count++;
            graph_kernels++;
        }
        kernels++;
        busy += d;
        if (r->start < span_lo) span_lo = r->start;
        if (r->end > span_hi) span_hi = r->end;
        if (has_prev && incr < TR_GAP_LIMIT_NS) {
            s->incr_sum += incr;
            s->incr_n++;
            incr_sum += incr;
        }
        if (has_prev) {
            if (r->start < p_end) { /* overlaps its predecessor (concurrent graph branches): gap 0 */
                overlaps++;
                s->gap_n++;
                gap_n++;
            } else if (r->start - p_end < TR_GAP_LIMIT_NS) {
                uint64_t g = r->start - p_end;
                s->gap_sum += g;
                s->gap_n++;
                gap_sum += g;
                gap_n++;
            } else {
                long_gaps++;
            }
        }
    }
    qsort(st, g_n_names, sizeof *st, tr_cmp_stat);

    fprintf(f, "\n## " TR_TAG ": %s (pid %ld, CUPTI %u)\n\n", n_exe ? exe : "?", (long)getpid(),
            (unsigned)g_cupti_version);
    if (skip_ns) fprintf(f, "Warm-up skipped: kernels starting in the first %llu ns.\n\n", (unsigned long long)skip_ns);
    if (graph_only) fprintf(f, "Only kernels replayed from CUDA graphs counted.\n\n");
    fprintf(f, "| # | share %% | count | total ms | mean us | min us | max us | gap us | end incr us | graph %% | kernel |\n");
    fprintf(f, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---|\n");
    size_t rank = 0;
    for (size_t i = 0; i < g_n_names; i++) {
        const tr_stat *s = &st[i];
        if (!s->count) continue;
        char gap[32];
        if (s->gap_n) snprintf(gap, sizeof gap, "%.2f", (double)s->gap_sum / (double)s->gap_n / 1e3);
        else snprintf(gap, sizeof gap, "-");
        char inc[32];
        if (s->incr_n) snprintf(inc, sizeof inc, "%.2f", (double)s->incr_sum / (double)s->incr_n / 1e3);
        else snprintf(inc, sizeof inc, "-");
        fprintf(f, "| %zu | %.2f | %llu | %.3f | %.2f | %.2f | %.2f | %s | %s | %.0f | %s |\n", ++rank,
                busy ? 100.0 * (double)s->total / (double)busy : 0.0, (unsigned long long)s->count,
                (double)s->total / 1e6, (double)s->total / (double)s->count / 1e3, (double)s->min / 1e3,
                (double)s->max / 1e3, gap, inc, 100.0 * (double)s->graph_count / (double)s->count, g_names[s->id].name);
    }
    free(st);

    double span = span_hi > span_lo ? (double)(span_hi - span_lo) : 0.0;
    fprintf(f, "\n| total | value |\n|:---|---:|\n");
    fprintf(f, "| kernels | %llu |\n", (unsigned long long)kernels);
    fprintf(f, "| kernels launched from graphs | %llu |\n", (unsigned long long)graph_kernels);
    fprintf(f, "| distinct kernel names | %zu |\n", rank);
    fprintf(f, "| streams | %llu |\n", (unsigned long long)streams);
    fprintf(f, "| kernel time ms (sum of durations) | %.3f |\n", (double)busy / 1e6);
    fprintf(f, "| gap time ms (sum of gaps < 1 ms) | %.3f |\n", (double)gap_sum / 1e6);
    fprintf(f, "| critical path ms (sum of end increments < 1 ms) | %.3f |\n", (double)incr_sum / 1e6);
    fprintf(f, "| mean gap us | %.2f |\n", gap_n ? (double)gap_sum / (double)gap_n / 1e3 : 0.0);
    fprintf(f, "| gaps >= 1 ms (not counted) | %llu |\n", (unsigned long long)long_gaps);
    fprintf(f, "| kernels overlapping their predecessor (gap 0) | %llu |\n", (unsigned long long)overlaps);
    fprintf(f, "| span ms (first start to last end) | %.3f |\n", span / 1e6);
    fprintf(f, "| kernel time / span %% | %.1f |\n", span > 0 ? 100.0 * (double)busy / span : 0.0);
    fprintf(f, "| left out (warm-up, or not from a graph) | %llu |\n", (unsigned long long)skipped);
    fprintf(f, "| without timestamps | %zu |\n", no_ts);
    fprintf(f, "| dropped by CUPTI | %zu |\n", g_dropped);
    fprintf(f, "| over the %zu-record cap | %zu |\n", TR_MAX_RECORDS, g_over_cap);
    fprintf(f, "| lost (allocation failures) | %zu |\n", g_alloc_fail + g_buf_fail);
    if (g_iter_error) fprintf(f, "| buffers cut short by record errors | %d |\n", g_iter_error);
    if (g_over_cap)
        fprintf(stderr, TR_TAG ": %zu kernel records past the cap of %zu were not kept\n", g_over_cap, TR_MAX_RECORDS);
}

static void tr_finish(void) {
    if (!atomic_load(&g_active)) return;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&g_done, &expected, 1)) return; /* once: atexit, then the destructor */
    /* hand back every buffer, incomplete records included; this calls tr_buffer_completed, so no lock here */
    CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (r != CUPTI_SUCCESS) {
        const char *s = NULL;
        if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
        fprintf(stderr, TR_TAG ": cuptiActivityFlushAll failed: %s (%d); the report may miss kernels\n", s, (int)r);
    }
    /* from here on the completed callback (CUPTI's thread) only counts what comes late */
    pthread_mutex_lock(&g_lock);
    g_reported = 1;
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
    if (g_n_recs == 0 && g_over_cap == 0) {
        fprintf(stderr, TR_TAG ": no kernel records (pid %ld, dropped %zu)\n", (long)getpid(), g_dropped);
        pthread_mutex_unlock(&g_lock);
        return;
    }
    FILE *f = stderr;
    const char *path = getenv("GEMMAC_TRACE_OUT");
    if (path && *path) {
        f = fopen(path, "a");
        if (!f) {
            fprintf(stderr, TR_TAG ": cannot open GEMMAC_TRACE_OUT=%s; writing to stderr\n", path);
            f = stderr;
        }
    }
    tr_report(f);
    if (f != stderr) {
        if (fclose(f) != 0) fprintf(stderr, TR_TAG ": error writing %s\n", path);
        else fprintf(stderr, TR_TAG ": report appended to %s\n", path);
    } else {
        fflush(f);
    }
    pthread_mutex_unlock(&g_lock);
}

__attribute__((destructor)) static void tr_fini(void) {
    tr_finish(); /* normally done already by the atexit handler */
    pthread_mutex_lock(&g_lock);
    if (g_late) fprintf(stderr, TR_TAG ": %zu kernel records arrived after the report\n", g_late);
    pthread_mutex_unlock(&g_lock);
}

__attribute__((constructor)) static void tr_init(void) {
    CUptiResult r = cuptiGetVersion(&g_cupti_version);
    if (r != CUPTI_SUCCESS) {
        tr_cupti_fail("cuptiGetVersion", r);
        return;
    }
    r = cuptiActivityRegisterCallbacks(tr_buffer_requested, tr_buffer_completed);
    if (r != CUPTI_SUCCESS) {
        tr_cupti_fail("cuptiActivityRegisterCallbacks", r);
        return;
    }
    r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r != CUPTI_SUCCESS) {
        tr_cupti_fail("cuptiActivityEnable(CONCURRENT_KERNEL)", r);
        return;
    }
    atomic_store(&g_active, 1);
    /* registered after CUPTI's own set-up, so it runs before any exit handler CUPTI registered there; the
     * destructor is the fallback */
    if (atexit(tr_finish) != 0) fprintf(stderr, TR_TAG ": atexit failed; the report comes from the destructor\n");
}
