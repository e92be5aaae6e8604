/* backend_cuda.c: the CUDA backend: every op of src/model/backend.h on one GPU, enqueued on one stream
 * through the kernels of ops_cuda.h. Owns: device memory for activations and the KV cache, the device copies
 * of the model's weights (made once, on first use, found again by their host pointer in a hash map; types the
 * kernels do not read are dequantized to f32 on the way, q6_K re-laid into aligned blocks: ops_cuda.h's device
 * layouts), the staging of each batch's integer arrays (begin_batch: one pinned copy per forward; ops map the
 * host pointers they receive onto it), scratch sized on demand, the choice between the mat-vec and the
 * tensor-core (cuBLAS, handle made on first use) paths of a projection, chains of one-column products (one
 * persistent launch for several, off by default), CUDA graphs of decode forwards, the
 * per-op profile (GEMMAC_CUDA_PROFILE=1), and error capture: the first failure is remembered with its message,
 * later ops do nothing, and end_batch reports it. read() is the one host synchronisation of a forward. Leaves
 * to others: the kernels (the .cu files beside it), what a forward computes (src/model), when contexts choose
 * this backend (ctx.c). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/ptrmap.h"
#include "cuda/ops_cuda.h"
#include "model/backend.h"
#include "quant/quant.h"

/* A device copy of a weight: host_bytes of the host data it mirrors; type / row_bytes as uploaded (f32 when
 * the host type was dequantized). */
typedef struct wentry {
    const void *host;
    void *dev;
    size_t host_bytes;
    int32_t type;
    uint64_t row_bytes;
    void *f16;                 /* its rows as dense f16 for the tensor-core path (see f16_copies; the memory is
                                  the backend's f16_bufs), or NULL */
    bool f16_refused;          /* no room was left for that copy: not asked again */
} wentry;

typedef struct cuda_backend {
    gm_backend base;
    int device;
    cudaStream_t stream;
    gm_ptrmap wmap;            /* host pointer -> its wentry (malloc'd) */
    uint64_t weight_bytes;     /* device bytes of weights */
    void *mm, *attn, *moe;     /* scratch: quantized activations, attention splits, experts */
    size_t mm_bytes, attn_bytes, moe_bytes;
    void *mm2;                 /* a matmul's quantized input when mm is the held product's (see "lookahead") */
    size_t mm2_bytes;
    unsigned *counters;        /* zeroed once; kernels that count their blocks leave them zero (gm_cuda_next) */
    struct pend {              /* the op held back until the next op (see "lookahead") */
        int kind;              /* PEND_NONE, PEND_MATMUL (m, act, n, what) or PEND_ATTN (at, kv) */
        gm_cuda_multi m;
        const void *act;
        int32_t n;
        const char *what;
        gm_cuda_attn at;       /* at.kv points at kv, at.prep (when set) at prep, when launched */
        gm_cuda_kv kv;
        gm_cuda_prep prep;     /* prep.kv, when set, points at kv */
        int32_t n_chain;       /* PEND_CHAIN: steps held for one chain launch (see "chains") */
        gm_cuda_chain_step chain[GM_CUDA_CHAIN_MAX];
        gm_cuda_gemm_epi epi;  /* PEND_EPI: a tensor-core product's epilogue (see "held epilogues") */
    } pend;
    bool chains;               /* one-column products chained into persistent launches (GEMMAC_CUDA_CHAIN=1) */
    double chain_max_bytes;    /* ... of at most this many weight bytes each (GEMMAC_CUDA_CHAIN_MAX_MB; 0: any) */
    void *chain_bar;           /* the chain kernels' grid barrier (a u64, zeroed once) */
    bool attn_prep_fused;      /* decode steps' attention preparation inside the attention launch
                                  (GEMMAC_CUDA_ATTN_PREP_FUSED=0/1; ATTN_PREP_FUSED_DEFAULT). In the split kernel
                                  it measured slower (H200, E4B q4_0, BENCHMARKS.md eleventh session: tg128 at depth
                                  512 336 -> 310 t/s): every split block paid the q heads' norms and RoPE angles
                                  through three block barriers (+5.7 us per attention on the critical path) for
                                  the one launch (~5.6 us) it saved. In the staged kernel (a row per warp) it is
                                  faster from an empty cache but slower at depth (H200, E4B q4_0, BENCHMARKS.md
                                  twenty-third session: tg128 +0.7%, one sequence at depth 1024 -2%, against the
                                  early loads alone): every split block prepares its q heads, and a global layer at
                                  depth 1024 has 64 splits of one tile each (+5 us a global layer on the critical
                                  path). So it stays off */
    bool attn_one_per_seq;     /* decode attention told when its batch holds one token per sequence: the staged
                                  kernel's early loads (the same H200 call: tg128 +1.0%, one sequence at depth 1024
                                  +1.6%, 64 sequences +1.7%), and needed by attn_prep_fused.
                                  GEMMAC_CUDA_ATTN_ONE_PER_SEQ=0: never */
    int lookahead;             /* ops held back (see "lookahead"), bits: LOOKAHEAD_PRODUCTS, LOOKAHEAD_ATTENTION */
    void *top;                 /* top_logits: the selected ids and values, then the selection's scratch */
    size_t top_bytes;
    void *proj;                /* scratch of project: its normalised / quantized input (+ a GeGLU's up half) */
    size_t proj_bytes;
    void *cublas, *cublas_ws;  /* the tensor-core path of long batches (gemm_cuda.cu): made on first use */
    void *gemm;                /* its scratch: f16 weights, f16 activations, the GEMM's output */
    size_t gemm_bytes;
    bool hold_epi;             /* epilogues held for the next preparation (GEMMAC_CUDA_HOLD_EPI=0: never) */
    void *gemm_act[2];         /* f16 inputs prepared with a held epilogue, the two in turn (see "held epilogues") */
    size_t gemm_act_bytes[2];
    int gemm_act_i;
    int f16_mode;              /* f16 copies of weights: 0 never, 1 always, 2 while a reserve stays free */
    void **f16_bufs;           /* their allocations (one per group of matrices copied together) */
    size_t n_f16_bufs;
    uint64_t f16_bytes;        /* device bytes of those copies */
    struct prof *prof;         /* GEMMAC_CUDA_PROFILE=1: time per op (see "profile" below); NULL otherwise */
    int32_t *h_ints, *d_ints;  /* the batch's integer arrays: pinned host staging and the device copy */
    size_t ints_cap;           /* int32 values each holds */
    cudaEvent_t ints_copied;   /* the last staging copy has left h_ints */
    bool ints_pending;
    gm_batch_ints batch;       /* host pointers of the current forward */
    const int32_t *d_token, *d_pos, *d_seq, *d_out;
    bool failed;
    gemmac_status fail_status;
    char msg[400];
    /* CUDA graphs of decode forwards (see "graphs" below) */
    bool graphs;               /* enabled (GEMMAC_CUDA_GRAPHS=0 turns them off) */
    uint64_t gen;              /* bumped whenever device memory a graph may point at is freed or moved */
    struct gentry {
        int32_t n_tokens, n_out, bucket;
        uint64_t gen, sig;     /* sig: hash of the ops and arguments of the forward first seen eagerly */
        int32_t state;         /* 0 empty, 1 seen eagerly (sig valid), 2 exec ready */
        cudaGraphExec_t exec;
    } gcache[8];
    int32_t gnext;             /* next slot to reuse */
    int32_t gmode;             /* this forward: G_EAGER, G_RECORD, G_CAPTURE, G_REPLAY */
    struct gentry *gcur;
    uint64_t gsig;             /* running hash of this forward's ops */
    int32_t gbucket;           /* attention key bound of this forward when graph-eligible, else 0 */
    bool glaunched;
} cuda_backend;

enum { G_EAGER = 0, G_RECORD, G_CAPTURE, G_REPLAY };

static cuda_backend *cb(gm_backend *b) { return (cuda_backend *)b; }

/* ---- errors: the first one sticks ---- */
static void fail(cuda_backend *c, gemmac_status st, const char *fmt, ...) {
    if (c->failed) return;
    c->failed = true;
    c->fail_status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
}

/* A CUDA runtime result: true when it succeeded. */
static bool cu_ok(cuda_backend *c, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return true;
    fail(c, e == cudaErrorMemoryAllocation ? GEMMAC_ERR_NO_MEMORY : GEMMAC_ERR_BACKEND, "CUDA backend: %s: %s", what,
         cudaGetErrorString(e));
    return false;
}

/* A kernel wrapper's result (ops_cuda.h): true when it succeeded. */
static bool k_ok(cuda_backend *c, int rc, const char *op) {
    if (rc == 0) return true;
    fail(c, rc == (int)cudaErrorMemoryAllocation ? GEMMAC_ERR_NO_MEMORY : GEMMAC_ERR_BACKEND, "CUDA backend: %s: %s",
         op, gm_cuda_last_error());
    return false;
}

/* Grows a device scratch buffer to at least need bytes (waits for the stream before freeing the old one). */
static void graph_abort(cuda_backend *c);

static bool grow(cuda_backend *c, void **buf, size_t *cap, size_t need, const char *what) {
    if (need <= *cap) return true;
    graph_abort(c); /* an allocation cannot be captured: run what was captured, go on eagerly */
    c->gen++;
    if (*buf) {
        cudaStreamSynchronize(c->stream);
        cudaFree(*buf);
        *buf = NULL;
        *cap = 0;
    }
    if (!cu_ok(c, cudaMalloc(buf, need), what)) {
        *buf = NULL;
        return false;
    }
    *cap = need;
    return true;
}

/* ---- weights ---- */
/* The device copy of host_bytes at host: rows of ne0 elements of `type`, row_bytes apart (n_rows rows). Made
 * on first use, with 16 readable bytes past the end (ops_cuda.h); a type the kernels do not read is
 * dequantized to f32 on the host first. NULL after a failure (recorded). */
static const wentry *weight(cuda_backend *c, const void *host, int32_t type, int64_t ne0, int64_t n_rows,
                            uint64_t row_bytes, bool experts, const char *name) {
    if (c->failed || !host) return NULL;
    const size_t host_bytes = (size_t)row_bytes * (size_t)n_rows;
    wentry *e = gm_ptrmap_get(&c->wmap, host);
    if (e && e->dev && e->host_bytes >= host_bytes) return e;
    graph_abort(c); /* uploads synchronise: not capturable */
    c->gen++;
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e || !gm_ptrmap_put(&c->wmap, host, e)) {
            free(e);
            fail(c, GEMMAC_ERR_NO_MEMORY, "CUDA backend: out of host memory for the weight map");
            return NULL;
        }
    } else if (e->dev) { /* seen before, smaller: replace */
        cudaStreamSynchronize(c->stream);
        cudaFree(e->dev); /* its f16 copy, if any, stays in f16_bufs until the backend goes */
        c->weight_bytes -= e->host_bytes;
        memset(e, 0, sizeof *e); /* no device copy until the upload below succeeds */
    }
    const void *src = host;
    void *conv = NULL;
    int32_t dtype = type;
    uint64_t drow = row_bytes;
    /* re-laid for aligned loads (ops_cuda.h, device layouts); q4_0 experts stay as they are, for the int8 kernel of
     * MoE batches (gm_cuda_mmq_takes), which reads the GGUF blocks */
    const int32_t laid = experts && type == GM_TYPE_Q4_0 ? type : gm_cuda_device_type(type);
    const uint64_t laid_row = laid != type ? gm_cuda_device_row_bytes(laid, ne0) : 0;
    if (!gm_cuda_type_supported(type)) {
        const gm_type_traits *tt = gm_type_traits_of((gm_type)type);
        if (!tt || !tt->dequantize) {
            fail(c, GEMMAC_ERR_UNSUPPORTED, "CUDA backend: weight %s: type %d cannot be read", name ? name : "?", type);
            return NULL;
        }
        drow = (uint64_t)ne0 * sizeof(float);
        conv = malloc((size_t)drow * (size_t)n_rows);
        if (!conv) {
            fail(c, GEMMAC_ERR_NO_MEMORY, "CUDA backend: weight %s: no host memory to convert it", name ? name : "?");
            return NULL;
        }
        for (int64_t r = 0; r < n_rows; r++)
            tt->dequantize((const uint8_t *)host + (uint64_t)r * row_bytes, (float *)conv + r * ne0, ne0);
        src = conv;
        dtype = 0; /* f32 */
    } else if (laid_row) {
        dtype = laid, drow = laid_row;
        conv = malloc((size_t)drow * (size_t)n_rows);
        if (!conv) {
            fail(c, GEMMAC_ERR_NO_MEMORY, "CUDA backend: weight %s: no host memory to re-lay it", name ? name : "?");
            return NULL;
        }
        if (gm_cuda_relayout(dtype, ne0, n_rows, host, row_bytes, conv)) {
            free(conv);
            fail(c, GEMMAC_ERR_BACKEND, "CUDA backend: weight %s: %s", name ? name : "?", gm_cuda_last_error());
            return NULL;
        }
        src = conv;
    }
    const size_t dbytes = (size_t)drow * (size_t)n_rows;
    void *dev = NULL;
    char what[160];
    snprintf(what, sizeof what, "uploading weight %s (%.1f MiB)", name ? name : "?", dbytes / 1048576.0);
    /* On the backend's own stream, then waited for: the stream does not synchronise with the legacy default
     * stream (cudaStreamNonBlocking), and a plain cudaMemcpy from pageable memory may return before its DMA
     * has landed, so kernels already enqueued here could otherwise read a half-copied weight. */
    bool ok = cu_ok(c, cudaMalloc(&dev, dbytes + 16), what);
    ok = ok && cu_ok(c, cudaMemsetAsync((uint8_t *)dev + dbytes, 0, 16, c->stream), what);
    ok = ok && cu_ok(c, cudaMemcpyAsync(dev, src, dbytes, cudaMemcpyHostToDevice, c->stream), what);
    ok = ok && cu_ok(c, cudaStreamSynchronize(c->stream), what);
    free(conv);
    if (!ok) {
        if (dev) cudaFree(dev);
        return NULL;
    }
    *e = (wentry){.host = host, .dev = dev, .host_bytes = host_bytes, .type = dtype, .row_bytes = drow};
    c->weight_bytes += dbytes;
    return e;
}

/* A weight matrix as the kernels take it (rows = every row of the tensor). */
static bool wmat(cuda_backend *c, const gm_tensor *t, gm_cuda_mat *m) {
    const wentry *e = weight(c, t->data, (int32_t)t->type, t->ne[0], gm_tensor_rows(t), t->row_bytes, t->ne[2] > 1,
                             t->name);
    if (!e) {
        if (!t->data) fail(c, GEMMAC_ERR_BACKEND, "CUDA backend: weight %s has no data", t->name ? t->name : "?");
        return false;
    }
    *m = (gm_cuda_mat){.type = e->type, .ne0 = t->ne[0], .ne1 = gm_tensor_rows(t), .row_bytes = e->row_bytes,
                       .data = e->dev, .f16 = e->f16};
    return true;
}

/* f16 copies of the weights for the tensor-core path, made on a matrix's first product there and kept: every
 * later batch reads its 2-byte weights instead of dequantizing the matrix again (Gemma 4 E4B Q4_0: 5.8 ms of a
 * ~24 ms pp512, and 5.6 ms of every batched decoding step, half of it the q6_K LM head). The matrices of one
 * projection (Q/K/V, gate/up) are copied together into one allocation, one after another, so that they stay one
 * GEMM. They cost device memory: 2 bytes per weight beside the quantized copy (E4B Q4_0: +9.7 GB), so by
 * default (f16_mode 2) copies are made only while the device keeps 1/F16_RESERVE_SHARE of its memory (and at
 * least F16_RESERVE_MIN bytes) free after them, for scratch that grows later; GEMMAC_CUDA_F16_WEIGHTS=0 never
 * makes them, =1 always. Matrices refused once are dequantized per product from then on. */
enum { F16_RESERVE_SHARE = 8 };
#define F16_RESERVE_MIN ((size_t)4 << 30)
static void f16_copies(cuda_backend *c, gm_cuda_multi *m, const gm_tensor *const *ts) {
    if (c->f16_mode == 0) return;
    wentry *e[3] = {NULL, NULL, NULL};
    size_t need = 0;
    for (int i = 0; i < m->n_w; i++) {
        const gm_cuda_mat *w = &m->w[i];
        if (w->f16 || (w->type == GM_TYPE_F16 && w->row_bytes == (uint64_t)w->ne0 * 2)) continue; /* used as is */
        wentry *ei = gm_ptrmap_get(&c->wmap, ts[i]->data);
        if (!ei || !ei->dev || ei->f16_refused) continue;
        e[i] = ei;
        need += (size_t)w->ne0 * (size_t)w->ne1 * 2;
    }
    if (!need) return;
    void *buf = NULL;
    bool room = true;
    if (c->f16_mode == 2) {
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError(), free_b = 0;
        const size_t reserve = total_b / F16_RESERVE_SHARE > F16_RESERVE_MIN ? total_b / F16_RESERVE_SHARE
                                                                             : F16_RESERVE_MIN;
        room = free_b >= need + reserve;
    }
    void **bufs = room ? realloc(c->f16_bufs, (c->n_f16_bufs + 1) * sizeof *bufs) : NULL;
    if (bufs) c->f16_bufs = bufs;
    if (bufs) graph_abort(c); /* an allocation: not capturable */
    if (!bufs || cudaMalloc(&buf, need) != cudaSuccess) {
        cudaGetLastError(); /* not the forward's failure: these matrices are dequantized per product instead */
        for (int i = 0; i < m->n_w; i++)
            if (e[i]) e[i]->f16_refused = true;
        return;
    }
    c->f16_bufs[c->n_f16_bufs++] = buf;
    c->f16_bytes += need;
    size_t off = 0;
    for (int i = 0; i < m->n_w; i++) {
        if (!e[i]) continue;
        e[i]->f16 = (uint8_t *)buf + off;
        if (!k_ok(c, gm_cuda_gemm_weights_f16(&m->w[i], e[i]->f16, c->stream), "f16 copy of a weight")) return;
        m->w[i].f16 = e[i]->f16;
        off += (size_t)m->w[i].ne0 * (size_t)m->w[i].ne1 * 2;
    }
}

/* An f32 weight vector of n values (norm weights, freq factors, expert scales); NULL for NULL. */
static const float *wvec(cuda_backend *c, const float *host, int64_t n) {
    if (!host) return NULL;
    const wentry *e = weight(c, host, 0, n, 1, (uint64_t)n * sizeof(float), false, "f32 vector");
    return e ? e->dev : NULL;
}

/* Whether no two of n tokens share a sequence (a decode step); false for sequence ids of ONE_PER_SEQ_MAX and more
 * (the check's bitmap), which only costs such batches a fast path. */
enum { ONE_PER_SEQ_MAX = 4096 };
static bool one_token_per_seq(int32_t n, const int32_t *seq) {
    if (n > ONE_PER_SEQ_MAX) return false;
    uint64_t seen[ONE_PER_SEQ_MAX / 64] = {0};
    for (int32_t t = 0; t < n; t++) {
        const int32_t s = seq[t];
        if (s < 0 || s >= ONE_PER_SEQ_MAX || (seen[s >> 6] >> (s & 63) & 1)) return false;
        seen[s >> 6] |= 1ull << (s & 63);
    }
    return true;
}

/* ---- graphs ----
 * A decode forward (one token of each of its sequences: graph_eligible) launches the same ~470 kernels with the
 * same arguments every time, except for what the positions decide: the attention split, made a function of a key bound
 * rounded up to 256 (gbucket) in such forwards, and the positions themselves, which the kernels read from the
 * batch's device int buffer (refreshed by begin_batch's copy, enqueued before the graph). So such forwards are
 * keyed by (n_tokens, n_out, gbucket) and, per key: the first is run eagerly while hashing every op and its
 * arguments (G_RECORD); the second is captured into a CUDA graph (G_CAPTURE), launched, and kept when its hash
 * equals the first's; later ones launch the graph at begin_batch, before the host walks the forward, and then
 * skip every op on the host, only hashing it (G_REPLAY): the walk (~70-200 us of host time for E4B) overlaps the
 * graph instead of leaving the device idle between steps. A replay whose hash differs from the captured forward's
 * cannot be redone (its ops were skipped, and the graph already ran): the forward fails with a message, and graphs
 * are off from then on. Anything
 * that cannot be captured (an allocation, a weight upload: both only in warm-up forwards) ends a capture
 * early: what was captured is launched and the rest of that forward runs eagerly. Whenever device memory a
 * graph may point at is freed or moved, gen changes and every graph is dropped. GEMMAC_CUDA_GRAPHS=0: off. */
static uint64_t hmix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 32);
}
static uint64_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
#define PB(p) ((uint64_t)(uintptr_t)(p))
#define IB(i) ((uint64_t)(int64_t)(i))

/* Hashes one op (id and arguments); true when the op must not run now (replay). */
static bool graph_skip(cuda_backend *c, const uint64_t *v, size_t n) {
    if (c->gmode == G_EAGER) return false;
    for (size_t i = 0; i < n; i++) c->gsig = hmix(c->gsig, v[i]);
    c->gsig = hmix(c->gsig, 0x5bd1e995u + n);
    return c->gmode == G_REPLAY;
}
/* ---- profile (GEMMAC_CUDA_PROFILE=1, for finding where a forward's time goes) ----
 * An event is recorded on the stream as each op starts (CUDA graphs are off, so every op is launched); the time
 * from one op's event to the next is that op's, including launch gaps (with PDL, the overlap goes to the op
 * before). Ops are labelled by name, matrix ops by their weight (layer number dropped), forwards of one token
 * ("tg") apart from longer ones ("pp"). When the backend is freed the table goes to stderr: per label the
 * calls per forward, microseconds per call, milliseconds per forward and, for weights, GB/s of weight bytes.
 * Forwards that upload weights or grow scratch (warm-ups) are left out. */
enum { PROF_EVENTS = 16384, PROF_LABELS = 128 };
struct prof {
    cudaEvent_t ev[PROF_EVENTS];
    int16_t lab[PROF_EVENTS];
    int n_ev;
    bool single;                             /* the forward in flight has one token */
    uint64_t gen;                            /* c->gen when it began: a forward that uploaded weights or grew
                                                scratch (a warm-up) is left out */
    struct { char name[64]; double ms; long calls; uint64_t bytes; } l[PROF_LABELS];
    int n_lab;
    long forwards[2];                        /* tg, pp */
};

static const char *const k_op_names[] = {"?", "get_rows", "gather", "matmul", "rmsnorm", "rmsnorm_add", "rope",
                                         "gelu_mul", "softcap", "attention", "scale", "add_scale", "moe",
                                         "mul_rows", "transpose", "rms_match", "sparsity_gate", "altup_predict",
                                         "altup_correct", "project", "end", "top_logits"};

static int prof_label(struct prof *p, const char *op, const char *weight, uint64_t bytes) {
    char name[64];
    const char *w = weight;
    if (w && strncmp(w, "blk.", 4) == 0 && (w = strchr(w + 4, '.'))) w++; /* drop the layer number */
    snprintf(name, sizeof name, "%s %s%s%s", p->single ? "tg" : "pp", op, w ? " " : "", w ? w : "");
    for (int i = 0; i < p->n_lab; i++)
        if (!strcmp(p->l[i].name, name)) return i;
    if (p->n_lab == PROF_LABELS) return PROF_LABELS - 1;
    snprintf(p->l[p->n_lab].name, sizeof p->l[0].name, "%s", name);
    p->l[p->n_lab].bytes = bytes;
    return p->n_lab++;
}

/* Marks the start of an op (its GRAPH_OP id); weight: the name of the matrix a matrix op reads (bytes: how many
 * bytes of weights it reads), or NULL. */
static void prof_mark(cuda_backend *c, uint64_t id, const char *weight, uint64_t bytes) {
    struct prof *p = c->prof;
    if (!p || c->failed || p->n_ev >= PROF_EVENTS) return;
    const uint64_t nid = sizeof k_op_names / sizeof k_op_names[0];
    p->lab[p->n_ev] = (int16_t)prof_label(p, k_op_names[id < nid ? id : 0], weight, bytes);
    cudaEventRecord(p->ev[p->n_ev++], c->stream);
}

static uint64_t tensor_bytes(const gm_tensor *t) { return (uint64_t)t->row_bytes * (uint64_t)gm_tensor_rows(t); }

/* At the end of a forward: waits for it and adds its op times to the table. */
static void prof_collect(cuda_backend *c) {
    struct prof *p = c->prof;
    if (!p || p->n_ev == 0) return;
    prof_mark(c, sizeof k_op_names / sizeof k_op_names[0] - 1, NULL, 0);
    cudaEventSynchronize(p->ev[p->n_ev - 1]);
    if (p->gen != c->gen) { /* a warm-up forward */
        p->n_ev = 0;
        return;
    }
    for (int i = 0; i + 1 < p->n_ev; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, p->ev[i], p->ev[i + 1]) == cudaSuccess) {
            p->l[p->lab[i]].ms += ms;
            p->l[p->lab[i]].calls++;
        }
    }
    p->forwards[p->single ? 0 : 1]++;
    p->n_ev = 0;
}

static int prof_cmp(const void *a, const void *b) {
    const double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return x < y ? 1 : x > y ? -1 : 0;
}

static void prof_print(struct prof *p) {
    for (int kind = 0; kind < 2; kind++) {
        const long nf = p->forwards[kind];
        if (!nf) continue;
        double order[PROF_LABELS][2], total = 0;
        int n = 0;
        for (int i = 0; i < p->n_lab; i++)
            if (strncmp(p->l[i].name, kind ? "pp" : "tg", 2) == 0 && p->l[i].calls) {
                order[n][0] = p->l[i].ms, order[n][1] = i, n++;
                total += p->l[i].ms;
            }
        qsort(order, (size_t)n, sizeof order[0], prof_cmp);
        fprintf(stderr, "\nCUDA profile, %s forwards: %ld, %.3f ms each\n", kind ? "batch" : "one-token", nf, total / nf);
        fprintf(stderr, "| op | calls/forward | us/call | ms/forward | %% | weight GB/s |\n|---|---:|---:|---:|---:|---:|\n");
        for (int k = 0; k < n; k++) {
            const int i = (int)order[k][1];
            const double us = 1e3 * p->l[i].ms / p->l[i].calls;
            fprintf(stderr, "| %s | %.1f | %.2f | %.3f | %.1f |", p->l[i].name + 3, (double)p->l[i].calls / nf, us,
                    p->l[i].ms / nf, 100.0 * p->l[i].ms / total);
            if (p->l[i].bytes) fprintf(stderr, " %.0f |\n", p->l[i].bytes / (us * 1e3));
            else fprintf(stderr, " |\n");
        }
    }
}

/* ---- lookahead ----
 * An op whose output the next op only quantizes (a matmul's input: the down projection after the GeGLU, the
 * PLE projection after its gate, the output projection after attention) can quantize it in its own blocks
 * (gm_cuda_next, gm_cuda_attn.out_q) and save that op a launch and its dependent-launch latency. So a product
 * that goes through gm_cuda_matmul_multi, and the attention kernel, are held back (c->pend) until the next op: a
 * matmul of the held op's output takes it with the quantization added (cuda_matmul); every other op, a read, the
 * end of a batch and any free launch it as it was first (pend_flush: GRAPH_OP does it for every op but matmul),
 * so the stream's order is the ops' order. A held op's buffers are never grown or reused before it is launched
 * (a matmul quantizes into the one of mm / mm2 the held product does not read; only attention grows its
 * scratch, and it flushes first). GEMMAC_CUDA_LOOKAHEAD picks what is held, as bits: 1 products, 2 attention (0
 * nothing, the default; 3 both). Off by default because it measured slower (H200, E4B q4_0 tg128, BENCHMARKS.md
 * fifth session: nothing / products / both = 299 / 293 / 289 t/s): each saved quantize launch costs ~3.6 us of the
 * step, but the quantizing tail (fence, count, last block of a group) added ~3 us to each GeGLU and PLE product and
 * ~7 us to each attention launch of that time's split kernel. The attention alone, on the staged kernel (its last
 * block quantizes the output it merged), still measured slower (H100, E4B q4_0 tg128, twenty-fifth session: 279 t/s
 * against 284 with that session's other changes on). */
enum { N_COUNTERS = 4096, PEND_NONE = 0, PEND_MATMUL = 1, PEND_ATTN = 2, PEND_CHAIN = 3, PEND_EPI = 4,
       LOOKAHEAD_PRODUCTS = 1, LOOKAHEAD_ATTENTION = 2, LOOKAHEAD_DEFAULT = 0, ATTN_PREP_FUSED_DEFAULT = 0 };

static void pend_flush(cuda_backend *c) {
    const int kind = c->pend.kind;
    if (kind == PEND_NONE) return;
    c->pend.kind = PEND_NONE;
    if (c->failed) return;
    if (kind == PEND_CHAIN) {
        k_ok(c, gm_cuda_chain(c->pend.chain, c->pend.n_chain, c->chain_bar, c->stream), "chain of products");
    } else if (kind == PEND_EPI) {
        k_ok(c, gm_cuda_gemm_epilogue(&c->pend.epi, c->stream), "GEMM epilogue");
    } else if (kind == PEND_ATTN) {
        c->pend.at.kv = &c->pend.kv;
        if (c->pend.at.prep) {
            if (c->pend.prep.kv) c->pend.prep.kv = &c->pend.kv;
            c->pend.at.prep = &c->pend.prep;
        }
        k_ok(c, gm_cuda_attention(&c->pend.at, c->attn, c->attn_bytes, c->stream), "attention");
    } else {
        k_ok(c, gm_cuda_matmul_multi(&c->pend.m, c->pend.act, c->pend.n, c->stream), c->pend.what);
    }
}

static void pend_hold(cuda_backend *c, const gm_cuda_multi *m, const void *act, int32_t n, const char *what) {
    pend_flush(c);
    if (c->failed) return;
    c->pend = (struct pend){.kind = PEND_MATMUL, .m = *m, .act = act, .n = n, .what = what};
    if (c->prof || !(c->lookahead & LOOKAHEAD_PRODUCTS)) pend_flush(c); /* the profile times each op by its own launches */
}

static void pend_hold_attention(cuda_backend *c, const gm_cuda_attn *at) {
    pend_flush(c);
    if (c->failed) return;
    c->pend = (struct pend){.kind = PEND_ATTN, .at = *at, .kv = *at->kv};
    if (at->prep) c->pend.prep = *at->prep;
    if (c->prof || !(c->lookahead & LOOKAHEAD_ATTENTION)) pend_flush(c);
}

/* ---- chains ----
 * The one-column products of a decoding step between two attentions (output, gate/up, down, the per-layer input's
 * gate and projection, the next layer's Q/K/V: matmul and project ops of n = 1 on q4_0 / q5_0 / q8_0 weights,
 * gm_cuda_chain_takes) are held as steps of one chain (c->pend, PEND_CHAIN) and launched together by pend_flush,
 * at the first op that is not such a product, or when GM_CUDA_CHAIN_MAX are held: one persistent launch instead
 * of two launches (input preparation, product) per op, with the same results to the bit (chain_cuda.cu).
 * GEMMAC_CUDA_CHAIN=1 turns it on, GEMMAC_CUDA_CHAIN_MAX_MB=m chains only products of at most m MB of weights (the
 * big ones then run as their own launches, at full occupancy). Off by default, as it measured slower (H200, E4B
 * q4_0 tg128, BENCHMARKS.md thirteenth session: 355 t/s without, 293 with every product chained, 336-346 with only
 * those of at most 5 / 3 / 0.5 MB): the products run at about half the bandwidth with one block of 16 warps per SM,
 * and each step's input preparation and barrier cost 2.5-5 us, about what the launches they replace cost. The
 * profile (GEMMAC_CUDA_PROFILE=1) times ops one by one, so it never chains. */
static bool chain_add(cuda_backend *c, const gm_cuda_act_in *in, const gm_cuda_multi *m) {
    if (!c->chains || c->prof || !gm_cuda_chain_takes(in, m)) return false;
    double bytes = 0;
    for (int32_t i = 0; i < m->n_w; i++) bytes += (double)m->w[i].ne1 * (double)m->w[i].row_bytes;
    if (c->chain_max_bytes > 0 && bytes > c->chain_max_bytes) return false;
    if (!c->chain_bar) {
        graph_abort(c);
        if (!cu_ok(c, cudaMalloc(&c->chain_bar, sizeof(unsigned long long)), "chain barrier") ||
            !cu_ok(c, cudaMemsetAsync(c->chain_bar, 0, sizeof(unsigned long long), c->stream), "chain barrier"))
            return true;
    }
    struct pend *h = &c->pend;
    if (h->kind != PEND_CHAIN || h->n_chain == GM_CUDA_CHAIN_MAX) {
        pend_flush(c);
        if (c->failed) return true;
        h->kind = PEND_CHAIN, h->n_chain = 0;
    }
    h->chain[h->n_chain++] = (gm_cuda_chain_step){.in = *in, .m = *m};
    return true;
}

/* Every op but matmul and project flushes what is held first (those two decide themselves: lookahead, chains). */
#define GRAPH_OP(c, ...)                                                                                     \
    do {                                                                                                     \
        const uint64_t gv_[] = {__VA_ARGS__};                                                                \
        if (gv_[0] != 3 && gv_[0] != 19) pend_flush(c);                                                      \
        if (graph_skip((c), gv_, sizeof gv_ / sizeof gv_[0])) return;                                        \
        if ((c)->prof && gv_[0] != 3 && gv_[0] != 19) prof_mark((c), gv_[0], NULL, 0);                      \
    } while (0)

static void graph_drop_all(cuda_backend *c) {
    for (int i = 0; i < 8; i++) {
        if (c->gcache[i].exec) cudaGraphExecDestroy(c->gcache[i].exec);
        memset(&c->gcache[i], 0, sizeof c->gcache[i]);
    }
}

/* Ends a capture: instantiates and launches what was captured (the forward's work so far). NULL exec on
 * failure (recorded). */
static cudaGraphExec_t graph_end_capture(cuda_backend *c) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t ex = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e == cudaSuccess && g) e = cudaGraphInstantiate(&ex, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e == cudaSuccess && ex) e = cudaGraphLaunch(ex, c->stream);
    if (e != cudaSuccess || !ex) {
        if (ex) cudaGraphExecDestroy(ex);
        ex = NULL;
        cudaGetLastError();
        c->graphs = false;
        fail(c, GEMMAC_ERR_BACKEND, "CUDA backend: capturing the forward into a CUDA graph failed: %s "
             "(GEMMAC_CUDA_GRAPHS=0 runs without graphs)", cudaGetErrorString(e));
    }
    c->glaunched = true;
    return ex;
}

/* Before an allocation or upload: a capture in progress is ended and launched; the forward goes on eagerly. */
static void graph_abort(cuda_backend *c) {
    if (c->gmode != G_CAPTURE) return;
    cudaGraphExec_t ex = graph_end_capture(c);
    if (ex) {
        cudaStreamSynchronize(c->stream);
        cudaGraphExecDestroy(ex);
    }
    if (c->gcur) c->gcur->state = 0;
    c->gmode = G_EAGER;
}

/* A decode step: every token of the batch from a different sequence (one_token_per_seq), so that the host plans
 * nothing from the batch but its size, its output rows and its key bound (the attention's tiles are single tokens:
 * gm_cuda_attention_plan). Prefill chunks and mixed batches, whose plans depend on how their tokens group into
 * sequences, run eagerly. */
static bool graph_eligible(const gm_batch_ints *bi) {
    return bi->n_tokens >= 1 && bi->n_out <= bi->n_tokens && one_token_per_seq(bi->n_tokens, bi->seq);
}

static void graph_begin(cuda_backend *c, const gm_batch_ints *bi) {
    c->gmode = G_EAGER, c->gcur = NULL, c->gsig = 0x243f6a8885a308d3ull, c->gbucket = 0, c->glaunched = false;
    if (!c->graphs || c->failed || !graph_eligible(bi)) return;
    int32_t mp = 1;
    for (int32_t t = 0; t < bi->n_tokens; t++)
        if (bi->pos[t] + 1 > mp) mp = bi->pos[t] + 1;
    c->gbucket = (int32_t)(((int64_t)mp + 255) / 256 * 256);
    struct gentry *e = NULL;
    for (int i = 0; i < 8 && !e; i++) {
        struct gentry *x = &c->gcache[i];
        if (x->state && x->gen == c->gen && x->n_tokens == bi->n_tokens && x->n_out == bi->n_out &&
            x->bucket == c->gbucket)
            e = x;
    }
    if (!e) {
        e = &c->gcache[c->gnext];
        c->gnext = (c->gnext + 1) % 8;
        if (e->exec) cudaGraphExecDestroy(e->exec);
        *e = (struct gentry){.n_tokens = bi->n_tokens, .n_out = bi->n_out, .bucket = c->gbucket, .gen = c->gen};
        c->gcur = e, c->gmode = G_RECORD;
        return;
    }
    c->gcur = e;
    if (e->state == 2) {
        c->gmode = G_REPLAY; /* launched now; graph_finish checks that the forward was the captured one */
        if (cu_ok(c, cudaGraphLaunch(e->exec, c->stream), "launching the forward's CUDA graph")) c->glaunched = true;
    } else if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        c->gmode = G_CAPTURE;
    } else {
        cudaGetLastError();
        c->gmode = G_RECORD;
    }
}

/* At read() or end_batch: what the graph covers ends here; later ops of the forward run eagerly. */
static void graph_finish(cuda_backend *c) {
    struct gentry *e = c->gcur;
    switch (c->gmode) {
    case G_RECORD:
        e->sig = c->gsig, e->gen = c->gen, e->state = 1;
        break;
    case G_CAPTURE: {
        cudaGraphExec_t ex = graph_end_capture(c);
        if (ex && e->sig == c->gsig && e->gen == c->gen) {
            e->exec = ex, e->state = 2;
        } else {
            if (ex) {
                cudaStreamSynchronize(c->stream);
                cudaGraphExecDestroy(ex);
            }
            e->sig = c->gsig, e->gen = c->gen, e->state = 1; /* not the same as the recorded one: record again */
        }
        break;
    }
    case G_REPLAY: /* launched at graph_begin */
        if ((e->sig != c->gsig || e->gen != c->gen) && !c->failed) {
            c->graphs = false;
            fail(c, GEMMAC_ERR_BACKEND, "CUDA backend: a decode forward differed from the CUDA graph captured for it "
                 "(ops or arguments); graphs are now off (GEMMAC_CUDA_GRAPHS=0 avoids them)");
        }
        break;
    default: break;
    }
    c->gmode = G_EAGER;
}

/* ---- the batch's integer arrays ---- */
static const int32_t *dev_ints(cuda_backend *c, const int32_t *host, int64_t n, const char *op) {
    if (c->failed) return NULL;
    const gm_batch_ints *bt = &c->batch;
    const struct { const int32_t *h; int64_t len; const int32_t *d; } arr[4] = {
        {bt->token, bt->n_tokens, c->d_token}, {bt->pos, bt->n_tokens, c->d_pos},
        {bt->seq, bt->n_tokens, c->d_seq},     {bt->out_rows, bt->n_out, c->d_out},
    };
    const uintptr_t p = (uintptr_t)host;
    for (int i = 0; i < 4; i++) {
        const uintptr_t lo = (uintptr_t)arr[i].h;
        if (arr[i].h && p >= lo && p + (uintptr_t)n * sizeof(int32_t) <= lo + (uintptr_t)arr[i].len * sizeof(int32_t))
            return arr[i].d + (p - lo) / sizeof(int32_t);
    }
    fail(c, GEMMAC_ERR_BACKEND,
         "CUDA backend: %s got an integer array that is not part of the batch given to begin_batch (backend.h)", op);
    return NULL;
}

static bool ints_reserve(cuda_backend *c, size_t n) {
    if (n <= c->ints_cap) return true;
    c->gen++;
    if (c->ints_pending) cudaEventSynchronize(c->ints_copied);
    c->ints_pending = false;
    cudaStreamSynchronize(c->stream);
    if (c->h_ints) cudaFreeHost(c->h_ints);
    if (c->d_ints) cudaFree(c->d_ints);
    c->h_ints = NULL, c->d_ints = NULL, c->ints_cap = 0;
    if (!cu_ok(c, cudaMallocHost((void **)&c->h_ints, n * sizeof(int32_t)), "pinned staging for the batch") ||
        !cu_ok(c, cudaMalloc((void **)&c->d_ints, n * sizeof(int32_t)), "device copy of the batch"))
        return false;
    c->ints_cap = n;
    return true;
}

static gemmac_status cuda_begin_batch(gm_backend *b, const gm_batch_ints *bi, gm_error *err) {
    cuda_backend *c = cb(b);
    if (!c->failed) cu_ok(c, cudaSetDevice(c->device), "cudaSetDevice");
    const size_t nt = (size_t)bi->n_tokens, no = (size_t)bi->n_out, need = 3 * nt + no;
    if (c->prof) c->prof->single = bi->n_tokens == 1, c->prof->gen = c->gen;
    if (!c->failed && ints_reserve(c, need)) {
        /* the previous copy must have left the staging area before it is overwritten */
        if (c->ints_pending && cu_ok(c, cudaEventSynchronize(c->ints_copied), "waiting for the last batch copy"))
            c->ints_pending = false;
        if (!c->failed) {
            memcpy(c->h_ints, bi->token, nt * sizeof(int32_t));
            memcpy(c->h_ints + nt, bi->pos, nt * sizeof(int32_t));
            memcpy(c->h_ints + 2 * nt, bi->seq, nt * sizeof(int32_t));
            if (no) memcpy(c->h_ints + 3 * nt, bi->out_rows, no * sizeof(int32_t));
            if (cu_ok(c, cudaMemcpyAsync(c->d_ints, c->h_ints, need * sizeof(int32_t), cudaMemcpyHostToDevice,
                                         c->stream), "copying the batch") &&
                cu_ok(c, cudaEventRecord(c->ints_copied, c->stream), "cudaEventRecord"))
                c->ints_pending = true;
        }
    }
    c->batch = *bi;
    c->d_token = c->d_ints, c->d_pos = c->d_ints + nt, c->d_seq = c->d_ints + 2 * nt, c->d_out = c->d_ints + 3 * nt;
    graph_begin(c, bi); /* after the copy: a captured or replayed graph reads the refreshed ints */
    if (c->failed) return gm_fail(err, c->fail_status, "%s", c->msg);
    return GEMMAC_OK;
}

static gemmac_status cuda_end_batch(gm_backend *b, gm_error *err) {
    cuda_backend *c = cb(b);
    pend_flush(c);
    graph_finish(c);
    prof_collect(c);
    if (c->failed) return gm_fail(err, c->fail_status, "%s", c->msg);
    return GEMMAC_OK;
}

/* ---- memory ---- */
static float *cuda_alloc(gm_backend *b, int64_t n) {
    (void)b;
    void *p = NULL;
    if (n <= 0 || cudaMalloc(&p, (size_t)n * sizeof(float)) != cudaSuccess) return NULL;
    return p;
}
static void cuda_release(gm_backend *b, float *buf) {
    pend_flush(cb(b));
    cb(b)->gen++;
    if (buf) cudaFree(buf);
}
/* KV storage, zeroed on the backend's stream (a legacy-stream memset would not be ordered before our kernels). */
static void *cuda_alloc_bytes(gm_backend *b, size_t n) {
    cuda_backend *c = cb(b);
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) return NULL;
    if (cudaMemsetAsync(p, 0, n ? n : 1, c->stream) != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    return p;
}
static void cuda_free_bytes(gm_backend *b, void *p) {
    pend_flush(cb(b));
    cb(b)->gen++;
    if (p) cudaFree(p);
}

/* Page-locked host memory for the logits: the device-to-host copy of a batch's logits (67 MB for 64 rows of a
 * 262144-word vocabulary) then runs at the link's speed instead of through the driver's pageable staging. */
static void *cuda_host_alloc(gm_backend *b, size_t n) {
    (void)b;
    void *p = NULL;
    return cudaMallocHost(&p, n ? n : 1) == cudaSuccess ? p : NULL;
}
static void cuda_host_free(gm_backend *b, void *p) {
    (void)b;
    if (p) cudaFreeHost(p);
}

static void cuda_copy_bytes(gm_backend *b, void *dst, const void *src, size_t n) {
    cuda_backend *c = cb(b);
    pend_flush(c);
    graph_abort(c);
    if (!c->failed && n)
        cu_ok(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->stream), "copying a KV cache");
}

/* A device-to-device copy of 1 GiB, best of 5 (bytes read + written per second). */
static double cuda_copy_gbps(gm_backend *b) {
    cuda_backend *c = cb(b);
    const size_t n = (size_t)1 << 30;
    void *src = NULL, *dst = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double best = 0;
    if (!c->failed && cudaMalloc(&src, n) == cudaSuccess && cudaMalloc(&dst, n) == cudaSuccess &&
        cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
        cudaMemsetAsync(src, 1, n, c->stream);
        for (int r = 0; r < 6; r++) {
            cudaEventRecord(e0, c->stream);
            cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->stream);
            cudaEventRecord(e1, c->stream);
            float ms = 0;
            if (cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && r > 0 &&
                ms > 0 && 2.0 * n / (ms * 1e6) > best)
                best = 2.0 * n / (ms * 1e6);
        }
    }
    cudaGetLastError(); /* a failed allocation here is not the forward's failure */
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(src);
    cudaFree(dst);
    return best;
}

/* The one synchronisation of a forward: the copy, then the stream (errors of earlier kernels surface here). */
static void cuda_read(gm_backend *b, const float *buf, float *host, int64_t n) {
    cuda_backend *c = cb(b);
    pend_flush(c);
    if (c->gmode != G_EAGER) graph_finish(c); /* ends a capture (and launches it), or checks a replay */
    if (c->failed) return;
    if (cu_ok(c, cudaMemcpyAsync(host, buf, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, c->stream),
              "copying results to the host"))
        cu_ok(c, cudaStreamSynchronize(c->stream), "running the forward pass");
}

/* The best k logits of each row, selected on the device (sample_cuda.cu) into c->top: ids [n_rows][k], then
 * values, then the selection's scratch. Part of the forward's graph. */
static size_t top_pairs_bytes(int32_t n_rows, int32_t k) { return ((size_t)n_rows * k * 4 + 255) / 256 * 256; }

static void top_select(cuda_backend *c, const float *logits, int32_t n_rows, int32_t n_vocab, int32_t k) {
    GRAPH_OP(c, 21, PB(logits), IB(n_rows), IB(n_vocab), IB(k));
    if (c->failed) return;
    const size_t pairs = top_pairs_bytes(n_rows, k), scratch = gm_cuda_top_logits_scratch_bytes(n_rows, n_vocab, k);
    if (!grow(c, &c->top, &c->top_bytes, 2 * pairs + scratch, "top logits")) return;
    uint8_t *t = (uint8_t *)c->top;
    k_ok(c, gm_cuda_top_logits(logits, n_rows, n_vocab, k, (int32_t *)t, (float *)(t + pairs), t + 2 * pairs, scratch,
                               c->stream),
         "top logits");
}

/* The one synchronisation of a forward that wants only its rows' best logits: 8 bytes a candidate cross. */
static void cuda_top_logits(gm_backend *b, const float *logits, int32_t n_rows, int32_t n_vocab, int32_t k,
                            int32_t *ids, float *vals) {
    cuda_backend *c = cb(b);
    top_select(c, logits, n_rows, n_vocab, k);
    if (c->gmode != G_EAGER) graph_finish(c); /* ends a capture (and launches it), or checks a replay */
    if (c->failed) return;
    const size_t n = (size_t)n_rows * k * 4, pairs = top_pairs_bytes(n_rows, k);
    if (cu_ok(c, cudaMemcpyAsync(ids, c->top, n, cudaMemcpyDeviceToHost, c->stream), "copying the best logits") &&
        cu_ok(c, cudaMemcpyAsync(vals, (uint8_t *)c->top + pairs, n, cudaMemcpyDeviceToHost, c->stream),
              "copying the best logits"))
        cu_ok(c, cudaStreamSynchronize(c->stream), "running the forward pass");
}

/* ---- ops ---- */
static void cuda_get_rows(gm_backend *b, const gm_tensor *table, const int32_t *ids, int32_t n, float scale,
                          float *out) {
    cuda_backend *c = cb(b);
    gm_cuda_mat m;
    const int32_t *d = dev_ints(c, ids, n, "get_rows");
    GRAPH_OP(c, 1, PB(table->data), IB(table->type), PB(d), IB(n), fbits(scale), PB(out));
    if (d && wmat(c, table, &m)) k_ok(c, gm_cuda_get_rows(&m, d, n, scale, out, c->stream), "get_rows");
}

static void cuda_gather(gm_backend *b, const float *src, int32_t d, const int32_t *rows, int32_t n, float *dst) {
    cuda_backend *c = cb(b);
    const int32_t *dr = dev_ints(c, rows, n, "gather");
    GRAPH_OP(c, 2, PB(src), IB(d), PB(dr), IB(n), PB(dst));
    if (dr) k_ok(c, gm_cuda_gather(src, d, dr, n, dst, c->stream), "gather");
}

/* The tensor-core path for m over n >= GM_CUDA_GEMM_MIN_N columns (see ops_cuda.h): true when it ran (or
 * failed, recorded); false when m is not eligible and the caller should take the matvec path. */
/* The cuBLAS handle, made on first use; false when that failed (recorded). */
static bool have_cublas(cuda_backend *c) {
    if (c->cublas) return true;
    graph_abort(c);
    enum { WS_BYTES = 32 << 20 };
    return cu_ok(c, cudaMalloc(&c->cublas_ws, WS_BYTES), "cuBLAS workspace") &&
           k_ok(c, gm_cuda_gemm_create(&c->cublas, c->cublas_ws, WS_BYTES), "cuBLAS");
}

/* ---- held epilogues ----
 * A tensor-core product's epilogue (column scale, segments, GeGLU / gelu·mul: a launch after its cuBLAS GEMM) is
 * held (PEND_EPI) until the next op. When that op is another tensor-core product of the same batch whose input
 * reads the held outputs only row for row (held_epi_fits), the epilogue runs inside that input's preparation
 * (gm_cuda_prepare_act_f16's `first`): in a Gemma 4 layer of a long batch, five of the seven products follow another
 * product, so five launches fewer. The preparation writes one of two buffers in turn (gemm_act), never the one the
 * held product read its input and column scales from. Any other op launches the epilogue alone first (pend_flush),
 * so the stream's order stays the ops' order. */
static bool spans_overlap(const float *a, int64_t na, const float *b, int64_t nb) { return a < b + nb && b < a + na; }

/* p ([n][K], read by the preparation, perhaps written by its residual update) is one of e's outputs with rows of K,
 * or touches none of them nor e's mul. */
static bool held_epi_row_safe(const gm_cuda_gemm_epi *e, const float *p, int64_t K) {
    if (!p) return true;
    const int64_t n = e->n;
    if (e->mul && spans_overlap(p, n * K, e->mul, n * e->ldy[0])) return false;
    for (int s = 0; s < (e->epi == GM_CUDA_EPI_GEGLU ? 1 : e->n_seg); s++) {
        if (!e->y[s]) continue;
        if (p == e->y[s] && e->ldy[s] == K) continue;
        if (spans_overlap(p, n * K, e->y[s], n * e->ldy[s])) return false;
    }
    return true;
}

static bool held_epi_fits(const cuda_backend *c, const gm_cuda_act_in *in) {
    const gm_cuda_gemm_epi *e = &c->pend.epi;
    return c->pend.kind == PEND_EPI && e->n == in->n && held_epi_row_safe(e, in->x, in->K) &&
           held_epi_row_safe(e, in->res_add, in->K);
}

/* The tensor-core path when it takes m at in->n columns (false: not taken, nothing done, nothing flushed). */
static bool gemm_path(cuda_backend *c, gm_cuda_multi *m, const gm_cuda_act_in *in, const gm_tensor *const *ts) {
    if (!gm_cuda_gemm_eligible(m, in->n)) return false;
    const bool q = gm_cuda_qgemm_eligible(m, in->n); /* q4_0 straight from the blocks: no f16 copies, no cuBLAS */
    if (!q) f16_copies(c, m, ts);
    if (!c->failed && !q) have_cublas(c);
    gm_cuda_f16_act ready = {0};
    if (!c->failed && held_epi_fits(c, in)) {
        const int i = c->gemm_act_i ^= 1;
        const size_t xh_bytes = ((size_t)in->n * in->K * 2 + 255) / 256 * 256;
        if (grow(c, &c->gemm_act[i], &c->gemm_act_bytes[i], xh_bytes + (size_t)in->n * sizeof(float), "GEMM input")) {
            void *xh = c->gemm_act[i];
            float *cs = (float *)((uint8_t *)xh + xh_bytes);
            c->pend.kind = PEND_NONE;
            const int order = q ? gm_cuda_qgemm_act_order(m, in->n) : GM_CUDA_ACT_ORDER_NATURAL;
            if (k_ok(c, gm_cuda_prepare_act_f16(in, xh, cs, &c->pend.epi, order, c->stream), "GEMM input"))
                ready = (gm_cuda_f16_act){.xh = xh, .col_scale = cs};
        }
    }
    pend_flush(c);
    if (c->failed) return true;
    if (grow(c, &c->gemm, &c->gemm_bytes, gm_cuda_gemm_scratch_bytes(m, in->n), "GEMM scratch")) {
        gm_cuda_gemm_epi held = {0};
        const bool hold = c->hold_epi && !c->prof; /* the profile times each op by its own launches */
        if (k_ok(c, gm_cuda_gemm_multi(c->cublas, m, in, ready.xh ? &ready : NULL, c->gemm, c->gemm_bytes,
                                       hold ? &held : NULL, c->stream), "GEMM") && held.n)
            c->pend = (struct pend){.kind = PEND_EPI, .epi = held};
    }
    return true;
}

/* The product goes through gm_cuda_matmul_multi and is held (see "lookahead"); its input, quantized for quantized
 * weights, either by the held product before it (when that product's output is x) or by a launch here. */
static void cuda_matmul(gm_backend *b, const gm_tensor *w, const float *x, int32_t n, float *y) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 3, PB(w->data), IB(w->type), IB(w->ne[0]), IB(gm_tensor_rows(w)), PB(x), IB(n), PB(y));
    prof_mark(c, 3, w->name, tensor_bytes(w));
    gm_cuda_mat m;
    if (c->failed || !wmat(c, w, &m)) {
        pend_flush(c);
        return;
    }
    gm_cuda_multi one = {.n_w = 1, .w = {m}, .y = {y}, .epi = GM_CUDA_EPI_STORE};
    const gm_cuda_act_in in = {.x = (float *)x, .K = m.ne0, .n = n, .res_scale = 1.0f}; /* read only: no update */
    if (chain_add(c, &in, &one)) return;
    const int32_t act_type = gm_cuda_act_type(m.type);
    if (m.type == GM_TYPE_F32 && n >= GM_CUDA_GEMM_MIN_N) { /* f32 weights over many columns: one f32 GEMM */
        pend_flush(c);
        if (have_cublas(c)) k_ok(c, gm_cuda_sgemm(c->cublas, &m, x, n, y, c->stream), "f32 GEMM");
        return;
    }
    if (gm_cuda_gemm_eligible(&one, n) || act_type < 0) {
        if (!gemm_path(c, &one, &in, &w)) pend_hold(c, &one, x, n, "matmul"); /* pend_hold flushes first */
        return;
    }
    if ((c->lookahead & LOOKAHEAD_PRODUCTS) && !c->counters) {
        graph_abort(c);
        if (!cu_ok(c, cudaMalloc((void **)&c->counters, N_COUNTERS * sizeof(unsigned)), "block counters") ||
            !cu_ok(c, cudaMemsetAsync(c->counters, 0, N_COUNTERS * sizeof(unsigned), c->stream), "block counters"))
            return;
    }
    struct pend *h = &c->pend;
    const bool use2 = h->kind == PEND_MATMUL && h->act == c->mm; /* the held product reads mm: quantize into mm2 */
    void **buf = use2 ? &c->mm2 : &c->mm;
    size_t *cap = use2 ? &c->mm2_bytes : &c->mm_bytes;
    if (!grow(c, buf, cap, gm_cuda_matmul_scratch_bytes(m.ne0, n), "matmul scratch")) return;
    bool fused = false;
    if (h->kind == PEND_MATMUL && h->n == n && h->m.y[0] == x && h->m.w[0].ne1 == m.ne0 &&
        (h->m.n_w == 1 || h->m.epi == GM_CUDA_EPI_GEGLU)) {
        h->m.next = (gm_cuda_next){.kind = GM_CUDA_NEXT_QUANT, .act_type = act_type, .out = *buf,
                                   .counters = c->counters, .n_counters = N_COUNTERS};
        fused = true;
    } else if (h->kind == PEND_ATTN && h->at.out == x && h->at.n_tokens == n &&
               (int64_t)h->at.n_head * h->kv.head_dim == m.ne0 && (act_type != 15 || m.ne0 % 256 == 0)) {
        h->at.out_act_type = act_type;
        h->at.out_q = *buf;
        fused = true;
    }
    pend_flush(c);
    if (!fused && !k_ok(c, gm_cuda_quantize_act(x, m.ne0, n, act_type, *buf, c->stream), "matmul input")) return;
    pend_hold(c, &one, *buf, n, w->name ? w->name : "matmul");
}

/* See gm_proj_args. The input is normalised and quantized once (one launch: q8 blocks for quantized weights,
 * f32 for float ones), then all matrices go in one launch when they share a type (the epilogue does the
 * GeGLU / gelu·mul). Matrices of different types on one activation type (Q4_K_M mixes q4_K and q6_K) get one
 * launch each on that shared input; different activation types (a float and a quantized matrix) each quantize
 * the f32 input themselves. A GeGLU split that way puts its up half in the scratch and adds a gelu_mul. */
static void cuda_project(gm_backend *b, const gm_proj_args *p) {
    cuda_backend *c = cb(b);
    const int32_t nw = p->n_w;
    GRAPH_OP(c, 19, PB(p->x), IB(p->n), PB(p->res_add), PB(p->res_norm), fbits(p->res_scale), PB(p->norm),
             fbits(p->eps), IB(p->act), PB(p->mul), IB(nw),
             PB(nw > 0 ? p->w[0]->data : NULL), PB(nw > 1 ? p->w[1]->data : NULL), PB(nw > 2 ? p->w[2]->data : NULL),
             PB(p->y[0]), PB(nw > 1 ? p->y[1] : NULL), PB(nw > 2 ? p->y[2] : NULL));
    /* what is held goes before this op's uploads, unless it may chain or be a held epilogue this op's input takes */
    if ((!c->chains || p->n != 1) && c->pend.kind != PEND_EPI) pend_flush(c);
    if (c->prof && nw > 0) {
        uint64_t bytes = 0;
        for (int32_t i = 0; i < nw && i < 3; i++) bytes += tensor_bytes(p->w[i]);
        prof_mark(c, 19, p->w[0]->name, bytes);
    }
    if (c->failed) return;
    if (nw < 1 || nw > 3 || (p->act == GM_PROJ_GEGLU && nw != 2) || (p->act == GM_PROJ_GELU_MUL && (nw != 1 || !p->mul))) {
        pend_flush(c);
        fail(c, GEMMAC_ERR_BACKEND, "CUDA backend: project: bad arguments");
        return;
    }
    gm_cuda_multi m = {.n_w = nw, .mul = p->mul,
                       .epi = p->act == GM_PROJ_GEGLU ? GM_CUDA_EPI_GEGLU
                              : p->act == GM_PROJ_GELU_MUL ? GM_CUDA_EPI_GELU_MUL : GM_CUDA_EPI_STORE};
    for (int32_t i = 0; i < nw; i++) {
        if (!wmat(c, p->w[i], &m.w[i])) {
            pend_flush(c);
            return;
        }
        m.y[i] = p->y[i];
    }
    const int64_t K = m.w[0].ne0;
    const gm_cuda_act_in in = {.x = p->x, .K = K, .n = p->n, .res_add = p->res_add,
                               .res_w = p->res_add ? wvec(c, p->res_norm, K) : NULL, .res_scale = p->res_scale,
                               .norm = p->norm != NULL, .w = wvec(c, p->norm, K), .eps = p->eps};
    if (c->failed || chain_add(c, &in, &m) || gemm_path(c, &m, &in, p->w)) return;
    pend_flush(c);
    if (c->failed) return;
    const int32_t act_type = gm_cuda_act_type(m.w[0].type);
    bool same = true, one_act = true;
    for (int32_t i = 1; i < nw; i++) {
        same = same && m.w[i].type == m.w[0].type && m.w[i].ne0 == K;
        one_act = one_act && gm_cuda_act_type(m.w[i].type) == act_type;
    }
    /* scratch: the prepared input, then (split GeGLU) the up half, then (mixed activation types) quantized input */
    const size_t in_bytes = one_act && act_type >= 0 ? gm_cuda_matmul_scratch_bytes(K, p->n)
                                                     : (size_t)p->n * K * sizeof(float);
    const size_t up_off = (in_bytes + 255) / 256 * 256;
    const size_t up_bytes = !same && p->act == GM_PROJ_GEGLU ? (size_t)p->n * m.w[1].ne1 * sizeof(float) : 0;
    const size_t q_off = (up_off + up_bytes + 255) / 256 * 256;
    const size_t q_bytes = one_act ? 0 : gm_cuda_matmul_scratch_bytes(K, p->n);
    if (!grow(c, &c->proj, &c->proj_bytes, q_off + q_bytes, "project scratch")) return;
    const void *act = p->x;
    if (p->norm || p->res_add || (one_act && act_type >= 0)) { /* else the f32 x as it is */
        if (!k_ok(c, gm_cuda_prepare_act(&in, one_act ? act_type : -1, c->proj, c->stream), "project input")) return;
        act = c->proj;
    }
    if (same) {
        pend_hold(c, &m, act, p->n, "project");
        return;
    }
    float *up = up_bytes ? (float *)((uint8_t *)c->proj + up_off) : NULL;
    void *xq = (uint8_t *)c->proj + q_off;
    for (int32_t i = 0; i < nw; i++) {
        gm_cuda_multi one = {.n_w = 1, .w = {m.w[i]}, .y = {i == 1 && up ? up : m.y[i]},
                             .epi = p->act == GM_PROJ_GELU_MUL ? GM_CUDA_EPI_GELU_MUL : GM_CUDA_EPI_STORE,
                             .mul = p->mul};
        const void *a = act;
        const int32_t ti = gm_cuda_act_type(m.w[i].type);
        if (!one_act && ti >= 0) { /* act is f32 here: quantize it for this matrix */
            if (!k_ok(c, gm_cuda_quantize_act((const float *)act, K, p->n, ti, xq, c->stream), "project input")) return;
            a = xq;
        }
        if (!k_ok(c, gm_cuda_matmul_multi(&one, a, p->n, c->stream), "project")) return;
    }
    if (up) k_ok(c, gm_cuda_gelu_mul(p->y[0], up, (int64_t)p->n * m.w[0].ne1, c->stream), "project gelu_mul");
}

static void cuda_rmsnorm(gm_backend *b, const float *x, float *y, int64_t n_rows, int32_t d, const float *w, float eps) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 4, PB(x), PB(y), IB(n_rows), IB(d), PB(w), fbits(eps));
    const float *dw = wvec(c, w, d);
    if (!c->failed) k_ok(c, gm_cuda_rmsnorm(x, y, n_rows, d, dw, eps, c->stream), "rmsnorm");
}

static void cuda_rmsnorm_add(gm_backend *b, float *acc, const float *x, int64_t n_rows, int32_t d, const float *w,
                             float eps) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 5, PB(acc), PB(x), IB(n_rows), IB(d), PB(w), fbits(eps));
    const float *dw = wvec(c, w, d);
    if (!c->failed) k_ok(c, gm_cuda_rmsnorm_add(acc, x, n_rows, d, dw, eps, c->stream), "rmsnorm_add");
}

static void cuda_rope(gm_backend *b, float *x, int32_t n, int32_t n_head, int32_t head_dim, const int32_t *pos,
                      int32_t n_rot, float base, float freq_scale, const float *freq_factors, float scale) {
    cuda_backend *c = cb(b);
    const int32_t *dp = dev_ints(c, pos, n, "rope");
    GRAPH_OP(c, 6, PB(x), IB(n), IB(n_head), IB(head_dim), PB(dp), IB(n_rot), fbits(base), fbits(freq_scale),
             PB(freq_factors), fbits(scale));
    const float *ff = wvec(c, freq_factors, n_rot / 2);
    if (dp && !c->failed)
        k_ok(c, gm_cuda_rope(x, n, n_head, head_dim, dp, n_rot, base, freq_scale, ff, scale, c->stream), "rope");
}

static void cuda_gelu_mul(gm_backend *b, float *g, const float *u, int64_t n) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 7, PB(g), PB(u), IB(n));
    if (!c->failed) k_ok(c, gm_cuda_gelu_mul(g, u, n, c->stream), "gelu_mul");
}

static void cuda_softcap(gm_backend *b, float *z, int64_t n, float cap) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 8, PB(z), IB(n), fbits(cap));
    if (!c->failed) k_ok(c, gm_cuda_softcap(z, n, cap, c->stream), "softcap");
}

static void cuda_attention(gm_backend *b, const gm_attn_args *a) {
    cuda_backend *c = cb(b);
    pend_flush(c); /* before dev_ints: a held attention reads its position buffers */
    if (c->failed) return;
    const gm_kv_layer *l = &a->kv->layer[a->kv_layer];
    if (!l->owned || l->row != a->n_head_kv * a->head_dim) {
        fail(c, GEMMAC_ERR_BACKEND, "CUDA backend: attention: layer %d's cache does not hold %d x %d values per slot",
             a->kv_layer, a->n_head_kv, a->head_dim);
        return;
    }
    const int32_t *dpos = dev_ints(c, a->pos, a->n_tokens, "attention"), *dseq = dev_ints(c, a->seq, a->n_tokens, "attention");
    if (!dpos || !dseq) return;
    /* the tiling and the most keys one block's queries see, from the host positions; in a graph-eligible forward
     * max_keys is rounded up to 256, so one graph serves every position of its bucket (the kernels find each
     * query's real key range from the device positions; extra splits are empty) */
    int32_t tile = 1, max_keys = 1;
    gm_cuda_attention_plan(a->n_tokens, a->pos, a->seq, a->window, a->n_head, a->n_head_kv, a->head_dim, &tile,
                           &max_keys);
    if (c->gbucket) max_keys = (int32_t)(((int64_t)max_keys + 255) / 256 * 256);
    const gm_attn_prep *pp = a->prep; /* one GRAPH_OP per op: a replay returns at the first */
    GRAPH_OP(c, 9, PB(l->k), PB(l->v), IB(l->n_slots), IB(l->ring), IB(l->type), IB(a->write_kv), IB(a->n_tokens),
             PB(dpos), PB(dseq), IB(a->n_head), IB(a->n_head_kv), IB(a->head_dim), IB(a->window), PB(a->q), PB(a->k),
             PB(a->v), PB(a->out), IB(max_keys), IB(tile), IB(pp != NULL), PB(pp ? pp->q_norm : NULL), PB(pp ? pp->k_norm : NULL),
             IB(pp && pp->v_norm), IB(pp && pp->v_from_k), fbits(pp ? pp->eps : 0), IB(pp ? pp->n_rot : 0),
             fbits(pp ? pp->base : 0), fbits(pp ? pp->freq_scale : 0), PB(pp ? pp->freq_factors : NULL),
             fbits(pp ? pp->q_scale : 0));
    const gm_cuda_kv kv = {.type = l->type == GM_KV_F32 ? GMC_KV_F32 : l->type == GM_KV_F16 ? GMC_KV_F16 : GMC_KV_Q8_0,
                           .n_slots = l->n_slots, .ring = l->ring,
                           .n_head_kv = a->n_head_kv, .head_dim = a->head_dim, .k = l->k, .v = l->v};
    gm_cuda_prep cp = {0};
    if (pp) { /* norms, RoPE and the cache store: one launch, or part of the attention's (gm_cuda_attn.prep) */
        cp = (gm_cuda_prep){
            .n_tokens = a->n_tokens, .n_head = a->n_head, .head_dim = a->head_dim, .pos = dpos, .seq = dseq,
            .q = (float *)a->q, .k = a->k, .v = a->v, .kv = a->write_kv ? &kv : NULL,
            .q_norm = wvec(c, pp->q_norm, a->head_dim), .k_norm = wvec(c, pp->k_norm, a->head_dim),
            .v_norm = pp->v_norm, .v_from_k = pp->v_from_k, .eps = pp->eps, .n_rot = pp->n_rot, .base = pp->base,
            .freq_scale = pp->freq_scale, .freq_factors = wvec(c, pp->freq_factors, pp->n_rot / 2),
            .q_scale = pp->q_scale};
        if (c->failed) return;
    } else if (a->write_kv &&
               !k_ok(c, gm_cuda_kv_store(&kv, a->k, a->v, a->n_tokens, dpos, dseq, c->stream), "kv_store")) {
        return;
    }
    const size_t need = gm_cuda_attention_scratch_bytes(a->n_tokens, a->n_head, a->n_head_kv, a->head_dim, max_keys, tile);
    const size_t cap0 = c->attn_bytes; /* the scratch starts with block counters that must start at zero */
    if (need && !grow(c, &c->attn, &c->attn_bytes, need, "attention scratch")) return;
    if (c->attn_bytes != cap0 && !cu_ok(c, cudaMemsetAsync(c->attn, 0, c->attn_bytes, c->stream), "attention scratch"))
        return;
    const gm_cuda_attn at = {.kv = &kv, .n_tokens = a->n_tokens, .pos = dpos, .seq = dseq, .n_head = a->n_head,
                             .window = a->window, .max_keys = max_keys, .tile_tokens = tile, .q = a->q,
                             .out = a->out, .prep = pp ? &cp : NULL,
                             .one_per_seq = c->attn_one_per_seq && one_token_per_seq(a->n_tokens, a->seq),
                             .fuse_prep = c->attn_prep_fused};
    pend_hold_attention(c, &at); /* launched by the next op, with the output quantized when that is a matmul of it */
}

static void cuda_scale(gm_backend *b, float *x, int64_t n, float s) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 10, PB(x), IB(n), fbits(s));
    if (!c->failed) k_ok(c, gm_cuda_scale(x, n, s, c->stream), "scale");
}

static void cuda_add_scale(gm_backend *b, float *y, const float *x, int64_t n, float s) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 11, PB(y), PB(x), IB(n), fbits(s));
    if (!c->failed) k_ok(c, gm_cuda_add_scale(y, x, n, s, c->stream), "add_scale");
}

static void cuda_moe(gm_backend *b, const float *logits, const float *x, int32_t n, int32_t n_used,
                     const float *expert_scale, const gm_tensor *gate_up, const gm_tensor *down, float *out) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 12, PB(logits), PB(x), IB(n), IB(n_used), PB(expert_scale), PB(gate_up->data), IB(gate_up->type),
             PB(down->data), IB(down->type), PB(out));
    gm_cuda_mat gu, dn;
    if (c->failed || !wmat(c, gate_up, &gu) || !wmat(c, down, &dn)) return;
    const int32_t E = (int32_t)gate_up->ne[2];
    const float *es = wvec(c, expert_scale, E);
    if (c->failed) return;
    gu.ne1 = gate_up->ne[1]; /* one expert's matrix; experts follow each other */
    dn.ne1 = down->ne[1];
    const size_t need = gm_cuda_moe_scratch_bytes(n, n_used, E, gu.ne0, gu.ne1 / 2);
    if (!grow(c, &c->moe, &c->moe_bytes, need, "mixture-of-experts scratch")) return;
    const gm_cuda_moe_args ma = {.logits = logits, .x = x, .expert_scale = es, .n = n, .n_used = n_used,
                                 .n_expert = E, .gate_up = gu, .down = dn, .out = out};
    k_ok(c, gm_cuda_moe(&ma, c->moe, c->moe_bytes, c->stream), "moe");
}

static void cuda_mul_rows(gm_backend *b, const float *x, float *y, int64_t n_rows, int32_t d, const float *w) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 13, PB(x), PB(y), IB(n_rows), IB(d), PB(w));
    const float *dw = wvec(c, w, d);
    if (!c->failed) k_ok(c, gm_cuda_mul_rows(x, y, n_rows, d, dw, c->stream), "mul_rows");
}

static void cuda_transpose(gm_backend *b, const float *src, float *dst, int32_t n0, int32_t n1, int32_t d) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 14, PB(src), PB(dst), IB(n0), IB(n1), IB(d));
    if (!c->failed) k_ok(c, gm_cuda_transpose(src, dst, n0, n1, d, c->stream), "transpose");
}

static void cuda_rms_match(gm_backend *b, float *y, const float *ref, int64_t n_rows, int32_t d, float eps) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 15, PB(y), PB(ref), IB(n_rows), IB(d), fbits(eps));
    if (!c->failed) k_ok(c, gm_cuda_rms_match(y, ref, n_rows, d, eps, c->stream), "rms_match");
}

static void cuda_sparsity_gate(gm_backend *b, float *g, int64_t n_rows, int32_t d, float k) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 16, PB(g), IB(n_rows), IB(d), fbits(k));
    if (!c->failed) k_ok(c, gm_cuda_sparsity_gate(g, n_rows, d, k, c->stream), "sparsity_gate");
}

static void cuda_altup_predict(gm_backend *b, const float *x, const float *coef, float *y, int32_t K, int32_t n,
                               int32_t d) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 17, PB(x), PB(coef), PB(y), IB(K), IB(n), IB(d));
    if (!c->failed) k_ok(c, gm_cuda_altup_predict(x, coef, y, K, n, d, c->stream), "altup_predict");
}

static void cuda_altup_correct(gm_backend *b, const float *pred, const float *act, const float *coef, float *y,
                               int32_t K, int32_t active, int32_t n, int32_t d) {
    cuda_backend *c = cb(b);
    GRAPH_OP(c, 18, PB(pred), PB(act), PB(coef), PB(y), IB(K), IB(active), IB(n), IB(d));
    if (!c->failed) k_ok(c, gm_cuda_altup_correct(pred, act, coef, y, K, active, n, d, c->stream), "altup_correct");
}

/* ---- lifetime ---- */
static gemmac_status cuda_reserve(gm_backend *b, int32_t n_tokens, int64_t max_row, int32_t max_keys, gm_error *err) {
    cuda_backend *c = cb(b);
    (void)max_keys; /* attention scratch follows the keys a batch actually sees */
    const int64_t row32 = (max_row + 31) / 32 * 32;
    grow(c, &c->mm, &c->mm_bytes, gm_cuda_matmul_scratch_bytes(row32, n_tokens), "matmul scratch");
    ints_reserve(c, 4 * (size_t)n_tokens);
    if (c->failed) return gm_fail(err, c->fail_status, "%s", c->msg);
    return GEMMAC_OK;
}

static void cuda_free(gm_backend *b) {
    cuda_backend *c = cb(b);
    if (!c) return;
    cudaSetDevice(c->device);
    pend_flush(c);
    if (c->gmode == G_CAPTURE) graph_abort(c);
    if (c->stream) cudaStreamSynchronize(c->stream);
    graph_drop_all(c);
    for (size_t i = 0; i < c->wmap.cap; i++)
        if (c->wmap.slots[i].key) {
            wentry *e = c->wmap.slots[i].value;
            cudaFree(e->dev);
            free(e);
        }
    for (size_t i = 0; i < c->n_f16_bufs; i++) cudaFree(c->f16_bufs[i]);
    free(c->f16_bufs);
    gm_ptrmap_free(&c->wmap);
    if (c->mm) cudaFree(c->mm);
    if (c->mm2) cudaFree(c->mm2);
    if (c->counters) cudaFree(c->counters);
    if (c->chain_bar) cudaFree(c->chain_bar);
    if (c->prof) {
        prof_print(c->prof);
        for (int i = 0; i < PROF_EVENTS; i++) cudaEventDestroy(c->prof->ev[i]);
        free(c->prof);
    }
    if (c->proj) cudaFree(c->proj);
    if (c->gemm) cudaFree(c->gemm);
    for (int i = 0; i < 2; i++)
        if (c->gemm_act[i]) cudaFree(c->gemm_act[i]);
    gm_cuda_gemm_destroy(c->cublas);
    if (c->cublas_ws) cudaFree(c->cublas_ws);
    if (c->attn) cudaFree(c->attn);
    if (c->moe) cudaFree(c->moe);
    if (c->top) cudaFree(c->top);
    if (c->h_ints) cudaFreeHost(c->h_ints);
    if (c->d_ints) cudaFree(c->d_ints);
    if (c->ints_copied) cudaEventDestroy(c->ints_copied);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

static const gm_backend_ops cuda_ops = {
    .name = "cuda",
    .free = cuda_free,
    .alloc_bytes = cuda_alloc_bytes,
    .free_bytes = cuda_free_bytes,
    .begin_batch = cuda_begin_batch,
    .end_batch = cuda_end_batch,
    .reserve = cuda_reserve,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .read = cuda_read,
    .top_logits = cuda_top_logits,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .logits_rows = 256, /* a batch of up to 256 sequences through the LM head at once (its weights read once) */
    .get_rows = cuda_get_rows,
    .gather = cuda_gather,
    .matmul = cuda_matmul,
    .rmsnorm = cuda_rmsnorm,
    .rmsnorm_add = cuda_rmsnorm_add,
    .project = cuda_project,
    .copy_bytes = cuda_copy_bytes,
    .copy_gbps = cuda_copy_gbps,
    .rope = cuda_rope,
    .gelu_mul = cuda_gelu_mul,
    .softcap = cuda_softcap,
    .attention = cuda_attention,
    .scale = cuda_scale,
    .add_scale = cuda_add_scale,
    .moe = cuda_moe,
    .mul_rows = cuda_mul_rows,
    .transpose = cuda_transpose,
    .rms_match = cuda_rms_match,
    .sparsity_gate = cuda_sparsity_gate,
    .altup_predict = cuda_altup_predict,
    .altup_correct = cuda_altup_correct,
};

gemmac_status gm_backend_cuda_new(int device, gm_backend **out, gm_error *err) {
    *out = NULL;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return gm_fail(err, GEMMAC_ERR_BACKEND, "no usable CUDA device (%s): run with -ngl 0 for the CPU backend",
                       cudaGetErrorString(e));
    if (n == 0) return gm_fail(err, GEMMAC_ERR_BACKEND, "no CUDA device found: run with -ngl 0 for the CPU backend");
    if (device < 0 || device >= n)
        return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "CUDA device %d does not exist (%d found)", device, n);
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "CUDA backend: out of memory");
    c->base.ops = &cuda_ops;
    c->device = device;
    const char *ge = getenv("GEMMAC_CUDA_GRAPHS"), *pe = getenv("GEMMAC_CUDA_PROFILE");
    c->graphs = !(ge && ge[0] == '0');
    const char *mq = getenv("GEMMAC_CUDA_MMQ_MAX_N"); /* largest batch on the int8 tensor-core path */
    if (mq && *mq) gm_cuda_set_mmq_max_n(atoi(mq));
    const char *qm = getenv("GEMMAC_CUDA_QGEMM_MAX_N"); /* largest batch of q4_0 products from the blocks */
    if (qm && *qm) gm_cuda_set_qgemm_max_n(atoi(qm));
    const char *qk = getenv("GEMMAC_CUDA_QGEMM_WG"); /* such products on the warpgroup (wgmma) kernel: 1 all, 0 none */
    if (qk && *qk) gm_cuda_set_qgemm_kernel(atoi(qk));
    const char *qs = getenv("GEMMAC_CUDA_QGEMM_SPLITS"); /* most blocks such a product's K is split over */
    if (qs && *qs) gm_cuda_set_qgemm_splits(atoi(qs));
    const char *qw = getenv("GEMMAC_CUDA_QGEMM_WARP_ROWS"); /* rows a warp of such a product takes: 16 or 32 */
    if (qw && *qw) gm_cuda_set_qgemm_warp_rows(atoi(qw));
    const char *qc = getenv("GEMMAC_CUDA_QGEMM_BLOCK_COLS"); /* columns a block of such a product takes at most */
    if (qc && *qc) gm_cuda_set_qgemm_block_cols(atoi(qc));
    const char *mr = getenv("GEMMAC_CUDA_MMQ_ROWS"); /* rows per block of that path: 32 or 64 */
    if (mr && *mr) gm_cuda_set_mmq_rows(atoi(mr));
    const char *af = getenv("GEMMAC_CUDA_ATTN_FILL"); /* attention blocks per SM */
    if (af && *af) gm_cuda_set_attn_fill(atoi(af));
    const char *ad = getenv("GEMMAC_CUDA_ATTN_DECODE"); /* decode attention: 0 threads, 1 warps, 2 staged */
    if (ad && *ad) gm_cuda_set_attn_decode(atoi(ad));
    const char *ms = getenv("GEMMAC_CUDA_MMV_SPLIT"); /* mat-vec rows split over warps: ks[,min_k] */
    if (ms && *ms) gm_cuda_set_mmv_split(atoi(ms), strchr(ms, ',') ? atoi(strchr(ms, ',') + 1) : 8192);
    const char *pt = getenv("GEMMAC_CUDA_PREP_THREADS"); /* threads of a projection input's preparation */
    if (pt && *pt) gm_cuda_set_prep_threads(atoi(pt));
    const char *pa = getenv("GEMMAC_CUDA_PREFETCH_ALL"); /* 1: every mat-vec block hints its rows into L2 */
    if (pa && *pa) gm_cuda_set_mmv_prefetch_all(pa[0] == '1');
    const char *dl = getenv("GEMMAC_CUDA_DEVICE_LAYOUTS"); /* 0: weights uploaded in their GGUF layout only */
    if (dl && *dl) gm_cuda_set_device_layouts(dl[0] != '0');
    const char *la = getenv("GEMMAC_CUDA_LOOKAHEAD"); /* ops held back (see "lookahead"): bits 1 products, 2 attention */
    c->lookahead = la && la[0] >= '0' && la[0] <= '3' ? la[0] - '0' : LOOKAHEAD_DEFAULT;
    const char *he = getenv("GEMMAC_CUDA_HOLD_EPI"); /* 0: tensor-core epilogues never held (see "held epilogues") */
    c->hold_epi = !(he && he[0] == '0');
    const char *ap = getenv("GEMMAC_CUDA_ATTN_PREP_FUSED"); /* 1: the preparation inside decode attention */
    c->attn_prep_fused = ap ? ap[0] == '1' : ATTN_PREP_FUSED_DEFAULT;
    const char *ae = getenv("GEMMAC_CUDA_ATTN_ONE_PER_SEQ"); /* 0: decode attention told nothing of its batch */
    c->attn_one_per_seq = !(ae && ae[0] == '0');
    const char *ch = getenv("GEMMAC_CUDA_CHAIN"); /* 1: chains of one-column products (see "chains") */
    c->chains = ch && ch[0] == '1';
    const char *cm = getenv("GEMMAC_CUDA_CHAIN_MAX_MB"); /* chain only products of at most this many MB */
    c->chain_max_bytes = cm && *cm ? atof(cm) * 1e6 : 0;
    const char *fw = getenv("GEMMAC_CUDA_F16_WEIGHTS"); /* f16 copies of weights (f16_copies): 0, 1, unset auto */
    c->f16_mode = fw && fw[0] == '0' ? 0 : fw && fw[0] == '1' ? 1 : 2;
    if (!cu_ok(c, cudaSetDevice(device), "cudaSetDevice") ||
        !cu_ok(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "creating a stream") ||
        !cu_ok(c, cudaEventCreateWithFlags(&c->ints_copied, cudaEventDisableTiming), "creating an event")) {
        const gemmac_status st = gm_fail(err, c->fail_status, "%s", c->msg);
        cuda_free(&c->base);
        return st;
    }
    /* asked now, outside any stream capture: the answer is cached, and asking copies from the device */
    (void)gm_cuda_qgemm_wg_available();
    if (pe && pe[0] == '1' && (c->prof = calloc(1, sizeof *c->prof))) {
        c->graphs = false; /* every op is launched, so each can be timed */
        for (int i = 0; i < PROF_EVENTS; i++) cudaEventCreate(&c->prof->ev[i]);
    }
    *out = &c->base;
    return GEMMAC_OK;
}
