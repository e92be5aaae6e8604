/* backend_cpu.c: the CPU backend: the ops of backend.h on host memory, spread over a thread pool.
 * Matmuls quantize activations to the weight type's vec_dot type once, then run the run-time chosen SIMD
 * dot kernels (quant.h) over row blocks; the other ops call the scalar reference kernels per row/head (attention
 * over an f16 cache the SIMD kernels; over f32 and q8_0 caches the references). The fused ops (project, attention's
 * preparation) are compositions of the unfused ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/ptrmap.h"
#include "core/threadpool.h"
#include "io/mmap.h"
#include "model/backend.h"
#include "quant/quant.h"
#include "cpu/ops_cpu.h"
#include "ref/ops_ref.h"

typedef void (*attention_group_fn)(const float *q, int G, const gm_f16 *const *k, const gm_f16 *const *v,
                                   int n_keys, int D, float *scores, float *out);

/* Query heads of one KV head are attended together, at most this many per work item. */
enum { ATTN_MAX_GROUP = 16 };

typedef struct cpu_backend {
    gm_backend base;
    attention_group_fn attention_group; /* the best kernels this CPU runs */
    void (*gelu_mul)(float *g, const float *u, int64_t n);
    gm_pool *pool;
    uint8_t *wdata;            /* quantized activations of the current matmul */
    size_t wdata_size;
    float *proj;               /* project's normalised input and up projection, token-major */
    size_t proj_floats;
    int32_t attn_cap;          /* keys the per-thread attention scratch can hold */
    float *attn_scores;        /* [n_threads][ATTN_MAX_GROUP][attn_cap] */
    const void **attn_rows;  /* [n_threads][2][attn_cap]: key rows then value rows */
    gm_ptrmap packed;          /* weight data -> packed_weight: its rows packed four by four (gm_pack_rows4) */
} cpu_backend;

static cpu_backend *cpu(gm_backend *b) { return (cpu_backend *)b; }

/* ---- generic parallel loop over [0, n) ---- */
typedef void (*range_fn)(void *ctx, long begin, long end, int ith);
typedef struct range_task {
    range_fn fn;
    void *ctx;
    long n;
} range_task;

static void range_worker(void *arg, int ith, int nth) {
    range_task *t = arg;
    long b, e;
    gm_split_range(t->n, ith, nth, &b, &e);
    if (b < e) t->fn(t->ctx, b, e, ith);
}

static void parallel_for(cpu_backend *c, long n, long min_per_thread, range_fn fn, void *ctx) {
    if (n <= min_per_thread || gm_pool_size(c->pool) == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    range_task t = {fn, ctx, n};
    gm_pool_run(c->pool, range_worker, &t);
}

/* ---- buffers ---- */
static float *cpu_alloc(gm_backend *b, int64_t n) {
    (void)b;
    return n > 0 ? malloc((size_t)n * sizeof(float)) : NULL;
}
static void cpu_release(gm_backend *b, float *buf) {
    (void)b;
    free(buf);
}
static void cpu_read(gm_backend *b, const float *buf, float *host, int64_t n) {
    (void)b;
    memcpy(host, buf, (size_t)n * sizeof(float));
}

static void *cpu_alloc_bytes(gm_backend *b, size_t n) {
    (void)b;
    return malloc(n ? n : 1);
}
static void cpu_free_bytes(gm_backend *b, void *p) {
    (void)b;
    free(p);
}
/* Host arrays are read where they are: nothing to stage, and no op of this backend fails after reserve. */
static gemmac_status cpu_begin_batch(gm_backend *b, const gm_batch_ints *bi, gm_error *err) {
    (void)b, (void)bi, (void)err;
    return GEMMAC_OK;
}
static gemmac_status cpu_end_batch(gm_backend *b, gm_error *err) {
    (void)b, (void)err;
    return GEMMAC_OK;
}

static void cpu_gather(gm_backend *b, const float *src, int32_t d, const int32_t *rows, int32_t n, float *dst) {
    (void)b;
    for (int32_t i = 0; i < n; i++) memcpy(dst + (int64_t)i * d, src + (int64_t)rows[i] * d, sizeof(float) * d);
}

/* ---- get_rows ---- */
static void cpu_get_rows(gm_backend *b, const gm_tensor *table, const int32_t *ids, int32_t n, float scale,
                         float *out) {
    (void)b;
    const gm_type_cpu *k = gm_cpu_kernels(table->type);
    const int64_t d = table->ne[0], rows = gm_tensor_rows(table);
    for (int32_t i = 0; i < n; i++) {
        float *row = out + (int64_t)i * d;
        const int64_t id = ids[i] >= 0 && ids[i] < rows ? ids[i] : 0;
        k->dequantize((const uint8_t *)table->data + (uint64_t)id * table->row_bytes, row, d);
        for (int64_t j = 0; j < d; j++) row[j] *= scale;
    }
}

/* ---- matmul ---- */
enum { MM_ROW_BLOCK = 16 };

typedef struct mm_ctx {
    const gm_tensor *w;
    const float *x;
    uint8_t *xq;
    uint64_t xq_row;           /* bytes per quantized activation row */
    int32_t n;
    float *y;
    gm_vec_dot_fn dot;
    gm_quantize_fn quantize;
    const uint8_t *w4;         /* the weight's rows [0, M / 4 * 4) packed four by four, or NULL */
} mm_ctx;

static void mm_quantize_range(void *p, long b, long e, int ith) {
    (void)ith;
    mm_ctx *m = p;
    const int64_t K = m->w->ne[0];
    for (long t = b; t < e; t++) m->quantize(m->x + t * K, m->xq + t * m->xq_row, K);
}

/* Rows [b, e) of y for every token: per block of MM_ROW_BLOCK weight rows (kept in L1 while every token
 * passes; blocks aligned to multiples of MM_ROW_BLOCK), tokens four at a time (fewer at the end; one when
 * decoding): where the weight has packed rows, four rows at once through vec_dot_4xn (each activation block
 * loaded once for the four rows, each weight block unpacked once for the tokens); other rows through vec_dot_x4
 * (four tokens) or vec_dot. All are bit-identical per (row, column) to vec_dot, so neither grouping nor packing
 * ever changes a result. */
static void mm_dot_range(void *p, long b, long e, int ith) {
    (void)ith;
    mm_ctx *m = p;
    const int64_t K = m->w->ne[0], M = m->w->ne[1];
    const uint8_t *w = m->w->data;
    const uint64_t rb = m->w->row_bytes;
    const gm_vec_dot_nc_fn dot4 = gm_cpu_kernels(m->w->type)->vec_dot_x4;
    const gm_vec_dot_4xn_fn dot4n = gm_cpu_kernels(m->w->type)->vec_dot_4xn;
    const long m4 = m->w4 ? (long)(M / 4 * 4) : 0; /* rows [0, m4) are packed */
    for (long r0 = b; r0 < e;) {
        const long r1 = (r0 / MM_ROW_BLOCK + 1) * MM_ROW_BLOCK < e ? (r0 / MM_ROW_BLOCK + 1) * MM_ROW_BLOCK : e;
        for (int32_t t = 0; t < m->n; t += 4) {
            const int nc = m->n - t < 4 ? m->n - t : 4;
            const uint8_t *xt = m->xq + t * m->xq_row;
            const void *a[4];
            for (int c = 0; c < 4; c++) a[c] = xt + (c < nc ? c : 0) * m->xq_row;
            float *yt = m->y + (int64_t)t * M;
            for (long r = r0; r < r1;) {
                if (r % 4 == 0 && r + 4 <= r1 && r + 4 <= m4) {
                    float o[16];
                    dot4n(K, o, m->w4 + (uint64_t)r * rb, a, nc);
                    for (int i = 0; i < 4; i++)
                        for (int c = 0; c < nc; c++) yt[c * M + r + i] = o[4 * i + c];
                    r += 4;
                } else if (nc == 4 && dot4) {
                    float o[4];
                    dot4(K, o, w + (uint64_t)r * rb, a);
                    for (int c = 0; c < 4; c++) yt[c * M + r] = o[c];
                    r++;
                } else {
                    for (int c = 0; c < nc; c++) m->dot(K, &yt[c * M + r], w + (uint64_t)r * rb, a[c]);
                    r++;
                }
            }
        }
        r0 = r1;
    }
}

/* The weight's rows packed four by four for vec_dot_4xn, made on the first matmul with it and kept by the
 * backend (weights never change while a context lives): one stream instead of four rows read side by side, which
 * the development VM's memory serves at ~60% of the rate (BENCHMARKS.md). The packed rows' pages in the model are
 * then offered back to the kernel (gm_map_advise_pageout), so the resident set stays the plan's. NULL where the type
 * has no vec_dot_4xn, the weight has fewer than four rows or rows with gaps between them, or memory is short (the
 * unpacked kernels then run: the same results). */
typedef struct packed_weight {
    int64_t rows;              /* the weight's rows and row bytes when packed: a view of other shape at the */
    uint64_t row_bytes;        /* same address runs unpacked */
    uint8_t *data;             /* rows [0, rows / 4 * 4), or NULL: stays unpacked */
} packed_weight;
typedef struct pack_job {
    const gm_tensor *w;
    uint8_t *dst;
} pack_job;
static void pack_range(void *p, long b, long e, int ith) {
    (void)ith;
    const pack_job *j = p;
    const uint64_t rb = j->w->row_bytes, bb = gm_type_traits_of(j->w->type)->block_bytes;
    for (long g = b; g < e; g++)
        gm_pack_rows4(j->dst + (uint64_t)g * 4 * rb, (const uint8_t *)j->w->data + (uint64_t)g * 4 * rb, rb,
                      (int64_t)(rb / bb), bb);
}
static const uint8_t *packed_rows(cpu_backend *c, const gm_tensor *w) {
    if (!gm_cpu_kernels(w->type)->vec_dot_4xn || w->ne[1] < 4 ||
        w->row_bytes != gm_row_bytes(gm_type_traits_of(w->type), w->ne[0])) /* rows apart: the kernel reads K's blocks */
        return NULL;
    packed_weight *pw = gm_ptrmap_get(&c->packed, w->data);
    if (!pw) {
        pw = malloc(sizeof *pw);
        if (!pw) return NULL;
        const long groups = (long)(w->ne[1] / 4);
        const size_t bytes = (size_t)groups * 4 * w->row_bytes;
        *pw = (packed_weight){w->ne[1], w->row_bytes, aligned_alloc(64, (bytes + 63) / 64 * 64)};
        if (pw->data) {
            parallel_for(c, groups, 16, pack_range, &(pack_job){w, pw->data});
            gm_map_advise_pageout(w->data, bytes); /* RSS: the copy replaces them */
        }
        if (!gm_ptrmap_put(&c->packed, w->data, pw)) { /* out of memory for the map: run unpacked */
            free(pw->data);
            free(pw);
            return NULL;
        }
    }
    return pw->rows == w->ne[1] && pw->row_bytes == w->row_bytes ? pw->data : NULL;
}

/* y = x · wᵀ for n tokens. packable: the weight is a model tensor that stays (a MoE expert's slice does not: its
 * views come and go, and packing every expert would copy the whole table). */
static void matmul(cpu_backend *c, const gm_tensor *w, const float *x, int32_t n, float *y, bool packable) {
    const gm_type_traits *tt = gm_type_traits_of(w->type);
    const gm_type_traits *vt = gm_type_traits_of(tt->vec_dot_type);
    const int64_t K = w->ne[0];
    mm_ctx m = {.w = w, .x = x, .n = n, .y = y, .dot = gm_cpu_kernels(w->type)->vec_dot};
    if (tt->vec_dot_type == GM_TYPE_F32) {
        m.xq = (uint8_t *)x;
        m.xq_row = (uint64_t)K * sizeof(float);
    } else {
        m.w4 = packable ? packed_rows(c, w) : NULL;
        m.xq_row = gm_row_bytes(vt, K);
        m.xq = c->wdata;
        m.quantize = gm_cpu_kernels(tt->vec_dot_type)->quantize;
        /* reserve() sized wdata for a full batch of the widest row; chunking keeps this safe regardless. */
        const int32_t per_chunk = (int32_t)(c->wdata_size / m.xq_row);
        for (int32_t t0 = 0; t0 < n && per_chunk > 0; t0 += per_chunk) {
            m.n = n - t0 < per_chunk ? n - t0 : per_chunk;
            m.x = x + (int64_t)t0 * K;
            m.y = y + (int64_t)t0 * w->ne[1];
            parallel_for(c, m.n, 1, mm_quantize_range, &m);
            parallel_for(c, w->ne[1], MM_ROW_BLOCK, mm_dot_range, &m);
        }
        return;
    }
    parallel_for(c, w->ne[1], MM_ROW_BLOCK, mm_dot_range, &m);
}

static void cpu_matmul(gm_backend *b, const gm_tensor *w, const float *x, int32_t n, float *y) {
    matmul(cpu(b), w, x, n, y, true);
}

/* ---- row-wise ops ---- */
typedef struct rows_ctx {
    float *x;
    const float *src;
    int32_t d;
    const float *w;
    float eps;
} rows_ctx;

static void rmsnorm_range(void *p, long b, long e, int ith) {
    (void)ith;
    rows_ctx *r = p;
    for (long i = b; i < e; i++) gm_ref_rmsnorm(r->src + i * r->d, r->x + i * r->d, r->d, r->w, r->eps);
}

static void cpu_rmsnorm(gm_backend *b, const float *x, float *y, int64_t n_rows, int32_t d, const float *w, float eps) {
    rows_ctx r = {.x = y, .src = x, .d = d, .w = w, .eps = eps};
    parallel_for(cpu(b), n_rows, 64, rmsnorm_range, &r);
}

static void rmsnorm_add_range(void *p, long b, long e, int ith) {
    (void)ith;
    rows_ctx *r = p;
    float tmp[r->d];
    for (long i = b; i < e; i++) {
        gm_ref_rmsnorm(r->src + i * r->d, tmp, r->d, r->w, r->eps);
        float *acc = r->x + i * r->d;
        for (int32_t j = 0; j < r->d; j++) acc[j] += tmp[j];
    }
}

static void cpu_rmsnorm_add(gm_backend *b, float *acc, const float *x, int64_t n_rows, int32_t d, const float *w,
                            float eps) {
    rows_ctx r = {.x = acc, .src = x, .d = d, .w = w, .eps = eps};
    parallel_for(cpu(b), n_rows, 64, rmsnorm_add_range, &r);
}

typedef struct rope_ctx {
    float *x;
    int32_t n_head, head_dim, n_rot;
    const int32_t *pos;
    float base, freq_scale, scale;
    const float *freq_factors;
} rope_ctx;

static void rope_range(void *p, long b, long e, int ith) {
    (void)ith;
    rope_ctx *r = p;
    for (long i = b; i < e; i++) { /* i = token · n_head + head */
        float *h = r->x + i * r->head_dim;
        gm_ref_rope_neox(h, r->n_rot, (float)r->pos[i / r->n_head], r->base, r->freq_scale, r->freq_factors);
        if (r->scale != 1.0f)
            for (int32_t j = 0; j < r->head_dim; j++) h[j] *= r->scale;
    }
}

static void cpu_rope(gm_backend *b, float *x, int32_t n, int32_t n_head, int32_t head_dim, const int32_t *pos,
                     int32_t n_rot, float base, float freq_scale, const float *freq_factors, float scale) {
    rope_ctx r = {x, n_head, head_dim, n_rot, pos, base, freq_scale, scale, freq_factors};
    parallel_for(cpu(b), (long)n * n_head, 64, rope_range, &r);
}

typedef struct ew_ctx {
    float *g;
    const float *u;
    float c;
    void (*c_fn)(float *g, const float *u, int64_t n);
} ew_ctx;

static void gelu_mul_ref(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = gm_ref_gelu_tanh(g[i]) * u[i];
}

static void gelu_mul_range(void *p, long b, long e, int ith) {
    (void)ith;
    ew_ctx *r = p;
    r->c_fn(r->g + b, r->u + b, e - b);
}

static void cpu_gelu_mul(gm_backend *b, float *g, const float *u, int64_t n) {
    ew_ctx r = {.g = g, .u = u, .c_fn = cpu(b)->gelu_mul};
    parallel_for(cpu(b), n, 4096, gelu_mul_range, &r);
}

static void softcap_range(void *p, long b, long e, int ith) {
    (void)ith;
    ew_ctx *r = p;
    gm_ref_softcap(r->g + b, e - b, r->c);
}

static void cpu_softcap(gm_backend *b, float *z, int64_t n, float c) {
    ew_ctx r = {.g = z, .c = c};
    parallel_for(cpu(b), n, 4096, softcap_range, &r);
}

/* ---- scale, add_scale (Gemma 4, Gemma 3n) ---- */
typedef struct scale_ctx {
    float *y;
    const float *x;
    float s;
} scale_ctx;

static void scale_range(void *p, long b, long e, int ith) {
    (void)ith;
    scale_ctx *r = p;
    for (long i = b; i < e; i++) r->y[i] *= r->s;
}

static void cpu_scale(gm_backend *b, float *x, int64_t n, float s) {
    scale_ctx r = {.y = x, .s = s};
    parallel_for(cpu(b), n, 16384, scale_range, &r);
}

static void add_scale_range(void *p, long b, long e, int ith) {
    (void)ith;
    scale_ctx *r = p;
    for (long i = b; i < e; i++) r->y[i] = (r->y[i] + r->x[i]) * r->s;
}

static void cpu_add_scale(gm_backend *b, float *y, const float *x, int64_t n, float s) {
    scale_ctx r = {.y = y, .x = x, .s = s};
    parallel_for(cpu(b), n, 16384, add_scale_range, &r);
}

/* ---- project ---- */
/* The ops above in the order the unfused forward called them, so results are its own bit for bit. Every step
 * is per token, so a batch wider than the scratch reserve() sized goes through in chunks of tokens. */
static void cpu_project(gm_backend *b, const gm_proj_args *p) {
    cpu_backend *c = cpu(b);
    const int64_t d = p->w[0]->ne[0], m = p->w[0]->ne[1];
    if (p->res_add) {
        cpu_rmsnorm_add(b, p->x, p->res_add, p->n, (int32_t)d, p->res_norm, p->eps);
        if (p->res_scale != 1.0f) cpu_scale(b, p->x, p->n * d, p->res_scale);
    }
    const int64_t xn_row = p->norm ? d : 0, up_row = p->act == GM_PROJ_GEGLU ? p->w[1]->ne[1] : 0;
    const int64_t per_chunk = (xn_row + up_row) ? (int64_t)c->proj_floats / (xn_row + up_row) : p->n;
    for (int32_t t0 = 0; t0 < p->n && per_chunk > 0; t0 += (int32_t)per_chunk) {
        const int32_t nc = p->n - t0 < per_chunk ? p->n - t0 : (int32_t)per_chunk;
        const float *x = p->x + t0 * d;
        float *const xn = c->proj, *const up = c->proj + nc * xn_row;
        if (p->norm) {
            cpu_rmsnorm(b, x, xn, nc, (int32_t)d, p->norm, p->eps);
            x = xn;
        }
        switch (p->act) {
        case GM_PROJ_PLAIN:
            for (int i = 0; i < p->n_w; i++) cpu_matmul(b, p->w[i], x, nc, p->y[i] + t0 * p->w[i]->ne[1]);
            break;
        case GM_PROJ_GEGLU:
            cpu_matmul(b, p->w[0], x, nc, p->y[0] + t0 * m);
            cpu_matmul(b, p->w[1], x, nc, up);
            cpu_gelu_mul(b, p->y[0] + t0 * m, up, nc * m);
            break;
        case GM_PROJ_GELU_MUL:
            cpu_matmul(b, p->w[0], x, nc, p->y[0] + t0 * m);
            cpu_gelu_mul(b, p->y[0] + t0 * m, p->mul + t0 * m, nc * m);
            break;
        }
    }
}

/* ---- attention ---- */
typedef struct attn_ctx {
    cpu_backend *c;
    const gm_attn_args *a;
    const gm_kv_layer *l;
} attn_ctx;

static void attn_range(void *p, long b, long e, int ith) {
    attn_ctx *x = p;
    const gm_attn_args *a = x->a;
    const int32_t D = a->head_dim, group = a->n_head / a->n_head_kv;
    const int32_t chunks = (group + ATTN_MAX_GROUP - 1) / ATTN_MAX_GROUP;
    float *scores = x->c->attn_scores + (size_t)ith * ATTN_MAX_GROUP * x->c->attn_cap;
    const void **krows = x->c->attn_rows + (size_t)ith * 2 * x->c->attn_cap;
    const void **vrows = krows + x->c->attn_cap;
    int32_t rows_for = -1; /* the (token, kv head) whose rows krows/vrows hold */
    for (long i = b; i < e; i++) { /* i = (token · n_head_kv + kv head) · chunks + chunk */
        const int32_t chunk = (int32_t)(i % chunks), tk = (int32_t)(i / chunks);
        const int32_t t = tk / a->n_head_kv, kvh = tk % a->n_head_kv;
        const int32_t pos = a->pos[t], seq = a->seq[t];
        const int32_t lo = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
        const int n_keys = pos - lo + 1;
        if (rows_for != tk) { /* head row kvh of each slot in the window */
            const size_t head_off = (size_t)kvh * x->l->head_bytes;
            for (int j = 0; j < n_keys; j++) {
                krows[j] = (const uint8_t *)gm_kv_k(x->l, seq, lo + j) + head_off;
                vrows[j] = (const uint8_t *)gm_kv_v(x->l, seq, lo + j) + head_off;
            }
            rows_for = tk;
        }
        const int32_t h0 = kvh * group + chunk * ATTN_MAX_GROUP;
        const int32_t G = group - chunk * ATTN_MAX_GROUP < ATTN_MAX_GROUP ? group - chunk * ATTN_MAX_GROUP : ATTN_MAX_GROUP;
        const size_t off = ((size_t)t * a->n_head + h0) * D;
        switch (x->l->type) {
        case GM_KV_F32:
            gm_ref_attention_group_f32(a->q + off, G, (const float *const *)krows, (const float *const *)vrows,
                                       n_keys, D, scores, a->out + off);
            break;
        case GM_KV_Q8_0:
            gm_ref_attention_group_q8(a->q + off, G, (const uint8_t *const *)krows, (const uint8_t *const *)vrows,
                                      n_keys, D, scores, a->out + off);
            break;
        case GM_KV_F16:
            x->c->attention_group(a->q + off, G, (const gm_f16 *const *)krows, (const gm_f16 *const *)vrows, n_keys,
                                  D, scores, a->out + off);
            break;
        }
    }
}

/* gm_attn_prep through the rmsnorm and rope ops, so a prepared attention is the unfused forward's bit for bit.
 * The buffers are the caller's to be prepared in place (backend.h), hence the casts. */
static void attn_prep(gm_backend *b, const gm_attn_args *a) {
    const gm_attn_prep *p = a->prep;
    const int32_t n = a->n_tokens, D = a->head_dim;
    float *const q = (float *)a->q, *const k = (float *)a->k, *const v = (float *)a->v;
    const int64_t kv_rows = (int64_t)n * a->n_head_kv;
    if (a->write_kv) {
        if (p->v_from_k) memcpy(v, k, sizeof(float) * (size_t)kv_rows * (size_t)D);
        if (p->v_norm) cpu_rmsnorm(b, v, v, kv_rows, D, NULL, p->eps);
    }
    if (p->q_norm) cpu_rmsnorm(b, q, q, (int64_t)n * a->n_head, D, p->q_norm, p->eps);
    cpu_rope(b, q, n, a->n_head, D, a->pos, p->n_rot, p->base, p->freq_scale, p->freq_factors, p->q_scale);
    if (a->write_kv) {
        if (p->k_norm) cpu_rmsnorm(b, k, k, kv_rows, D, p->k_norm, p->eps);
        cpu_rope(b, k, n, a->n_head_kv, D, a->pos, p->n_rot, p->base, p->freq_scale, p->freq_factors, 1.0f);
    }
}

static void cpu_attention(gm_backend *b, const gm_attn_args *a) {
    cpu_backend *c = cpu(b);
    const gm_kv_layer *l = &a->kv->layer[a->kv_layer];
    const int32_t D = a->head_dim, row = a->n_head_kv * D;
    if (a->prep) attn_prep(b, a);
    if (a->write_kv)
        for (int32_t t = 0; t < a->n_tokens; t++) {
            const float *ks = a->k + (int64_t)t * row, *vs = a->v + (int64_t)t * row;
            uint8_t *kslot = gm_kv_k(l, a->seq[t], a->pos[t]), *vslot = gm_kv_v(l, a->seq[t], a->pos[t]);
            switch (l->type) {
            case GM_KV_F32: /* head rows of D floats, back to back: the slot is the token's row */
                memcpy(kslot, ks, sizeof(float) * (size_t)row);
                memcpy(vslot, vs, sizeof(float) * (size_t)row);
                break;
            case GM_KV_F16: {
                gm_f16 *kd = (gm_f16 *)kslot, *vd = (gm_f16 *)vslot;
                for (int32_t j = 0; j < row; j++) {
                    kd[j] = gm_f32_to_f16(ks[j]);
                    vd[j] = gm_f32_to_f16(vs[j]);
                }
                break;
            }
            case GM_KV_Q8_0:
                for (int32_t h = 0; h < a->n_head_kv; h++) {
                    gm_ref_kv_q8_store(ks + (size_t)h * D, D, kslot + (size_t)h * l->head_bytes);
                    gm_ref_kv_q8_store(vs + (size_t)h * D, D, vslot + (size_t)h * l->head_bytes);
                }
                break;
            }
        }
    attn_ctx x = {c, a, l};
    const int32_t group = a->n_head / a->n_head_kv;
    const long chunks = (group + ATTN_MAX_GROUP - 1) / ATTN_MAX_GROUP;
    parallel_for(c, (long)a->n_tokens * a->n_head_kv * chunks, 1, attn_range, &x);
}

/* ---- lifetime ---- */
static gemmac_status cpu_reserve(gm_backend *b, int32_t n_tokens, int64_t max_row, int32_t max_keys, gm_error *err) {
    cpu_backend *c = cpu(b);
    /* The widest activation type is f32 (4 bytes per element); quantized rows are smaller. */
    const size_t need = (size_t)n_tokens * (size_t)max_row * sizeof(float);
    if (need > c->wdata_size) {
        uint8_t *w = realloc(c->wdata, need);
        if (!w) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "CPU backend: no memory for %zu bytes of scratch", need);
        c->wdata = w;
        c->wdata_size = need;
    }
    /* project's scratch: a normalised input row and an up row per token, each at most max_row wide */
    const size_t proj_floats = (size_t)n_tokens * 2 * (size_t)max_row;
    if (proj_floats > c->proj_floats) {
        float *p = realloc(c->proj, proj_floats * sizeof(float));
        if (!p) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "CPU backend: no memory for projection scratch");
        c->proj = p;
        c->proj_floats = proj_floats;
    }
    if (max_keys > c->attn_cap) {
        const size_t nth = (size_t)gm_pool_size(c->pool);
        float *s = realloc(c->attn_scores, sizeof(float) * nth * ATTN_MAX_GROUP * (size_t)max_keys);
        if (s) c->attn_scores = s;
        const void **r = realloc(c->attn_rows, sizeof(*r) * 2 * nth * (size_t)max_keys);
        if (r) c->attn_rows = r;
        if (!s || !r) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "CPU backend: no memory for attention scratch");
        c->attn_cap = max_keys;
    }
    return GEMMAC_OK;
}

static void cpu_free(gm_backend *b) {
    cpu_backend *c = cpu(b);
    if (!c) return;
    gm_pool_free(c->pool);
    for (size_t i = 0; i < c->packed.cap; i++)
        if (c->packed.slots[i].key) {
            packed_weight *pw = c->packed.slots[i].value;
            free(pw->data);
            free(pw);
        }
    gm_ptrmap_free(&c->packed);
    free(c->wdata);
    free(c->proj);
    free(c->attn_scores);
    free(c->attn_rows);
    free(c);
}

/* ---- Gemma 4: moe ---- */
/* Routing per token (scalar reference), then per expert that any token chose: its tokens gathered, the
 * expert's gate, up and down slices as 2-D weight views through the threaded matmul, the weighted result
 * added to each token's row (experts in increasing index, as transformers adds them). */
static void cpu_moe(gm_backend *b, const float *logits, const float *x, int32_t n, int32_t n_used,
                    const float *expert_scale, const gm_tensor *gate_up, const gm_tensor *down, float *out) {
    const int64_t H = gate_up->ne[0], F = gate_up->ne[1] / 2;
    const int32_t E = (int32_t)gate_up->ne[2];
    memset(out, 0, sizeof(float) * (size_t)n * (size_t)H);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * n_used), *tok = malloc(sizeof(int32_t) * (size_t)n);
    float *wts = malloc(sizeof(float) * (size_t)n * n_used), *tw = malloc(sizeof(float) * (size_t)n);
    float *probs = malloc(sizeof(float) * (size_t)E);
    float *xs = malloc(sizeof(float) * (size_t)n * H), *ys = malloc(sizeof(float) * (size_t)n * H);
    float *g = malloc(sizeof(float) * (size_t)n * F), *u = malloc(sizeof(float) * (size_t)n * F);
    if (ids && tok && wts && tw && probs && xs && ys && g && u) {
        for (int32_t t = 0; t < n; t++)
            gm_ref_moe_route(logits + (int64_t)t * E, E, n_used, expert_scale, probs, ids + (int64_t)t * n_used,
                             wts + (int64_t)t * n_used);
        for (int32_t e = 0; e < E; e++) {
            int32_t m = 0;
            for (int32_t t = 0; t < n; t++)
                for (int32_t j = 0; j < n_used; j++)
                    if (ids[(int64_t)t * n_used + j] == e) {
                        tok[m] = t;
                        tw[m++] = wts[(int64_t)t * n_used + j];
                    }
            if (!m) continue;
            for (int32_t i = 0; i < m; i++) memcpy(xs + i * H, x + (int64_t)tok[i] * H, sizeof(float) * (size_t)H);
            gm_tensor gate = *gate_up, up, dn = *down;
            gate.ne[1] = F, gate.ne[2] = 1;
            gate.data = (const uint8_t *)gate_up->data + (uint64_t)e * 2 * F * gate_up->row_bytes;
            up = gate;
            up.data = (const uint8_t *)gate.data + (uint64_t)F * gate_up->row_bytes;
            dn.ne[2] = 1;
            dn.data = (const uint8_t *)down->data + (uint64_t)e * down->ne[1] * down->row_bytes;
            matmul(cpu(b), &gate, xs, m, g, false);
            matmul(cpu(b), &up, xs, m, u, false);
            cpu_gelu_mul(b, g, u, (int64_t)m * F);
            matmul(cpu(b), &dn, g, m, ys, false);
            for (int32_t i = 0; i < m; i++) {
                float *o = out + (int64_t)tok[i] * H;
                const float *y = ys + i * H;
                for (int64_t j = 0; j < H; j++) o[j] += tw[i] * y[j];
            }
        }
    }
    free(ids), free(tok), free(wts), free(tw), free(probs), free(xs), free(ys), free(g), free(u);
}

/* ---- Gemma 3n: mul_rows, transpose, rms_match, sparsity_gate, altup_predict, altup_correct ---- */
typedef struct g3n_rows_ctx {
    float *y;
    const float *x;
    const float *w;
    int32_t d;
    float k;
} g3n_rows_ctx;

static void mul_rows_range(void *p, long b, long e, int ith) {
    (void)ith;
    g3n_rows_ctx *r = p;
    for (long i = b; i < e; i++) {
        const float *x = r->x + i * r->d;
        float *y = r->y + i * r->d;
        for (int32_t j = 0; j < r->d; j++) y[j] = x[j] * r->w[j];
    }
}

static void cpu_mul_rows(gm_backend *b, const float *x, float *y, int64_t n_rows, int32_t d, const float *w) {
    g3n_rows_ctx r = {.y = y, .x = x, .w = w, .d = d};
    parallel_for(cpu(b), n_rows, 64, mul_rows_range, &r);
}

static void cpu_transpose(gm_backend *b, const float *src, float *dst, int32_t n0, int32_t n1, int32_t d) {
    (void)b;
    for (int32_t i = 0; i < n0; i++)
        for (int32_t j = 0; j < n1; j++)
            memcpy(dst + ((int64_t)j * n0 + i) * d, src + ((int64_t)i * n1 + j) * d, sizeof(float) * (size_t)d);
}

static void rms_match_range(void *p, long b, long e, int ith) {
    (void)ith;
    g3n_rows_ctx *r = p;
    for (long i = b; i < e; i++) gm_ref_rms_match(r->y + i * r->d, r->x + i * r->d, r->d, r->k);
}

static void cpu_rms_match(gm_backend *b, float *y, const float *ref, int64_t n_rows, int32_t d, float eps) {
    g3n_rows_ctx r = {.y = y, .x = ref, .d = d, .k = eps};
    parallel_for(cpu(b), n_rows, 16, rms_match_range, &r);
}

static void sparsity_gate_range(void *p, long b, long e, int ith) {
    (void)ith;
    g3n_rows_ctx *r = p;
    for (long i = b; i < e; i++) gm_ref_sparsity_gate(r->y + i * r->d, r->d, r->k);
}

static void cpu_sparsity_gate(gm_backend *b, float *g, int64_t n_rows, int32_t d, float k) {
    g3n_rows_ctx r = {.y = g, .d = d, .k = k};
    parallel_for(cpu(b), n_rows, 4, sparsity_gate_range, &r);
}

typedef struct altup_ctx {
    const float *x, *act, *c;
    float *y;
    int32_t K, active, n, d;
} altup_ctx;

static void altup_predict_range(void *p, long b, long e, int ith) {
    (void)ith;
    altup_ctx *a = p;
    const int64_t stride = (int64_t)a->n * a->d;
    for (long t = b; t < e; t++)
        gm_ref_altup_predict(a->x + t * a->d, stride, a->c + t * a->K * a->K, a->y + t * a->d, a->K, a->d);
}

static void cpu_altup_predict(gm_backend *b, const float *x, const float *c, float *y, int32_t K, int32_t n,
                              int32_t d) {
    altup_ctx a = {.x = x, .c = c, .y = y, .K = K, .n = n, .d = d};
    parallel_for(cpu(b), n, 4, altup_predict_range, &a);
}

static void altup_correct_range(void *p, long b, long e, int ith) {
    (void)ith;
    altup_ctx *a = p;
    const int64_t stride = (int64_t)a->n * a->d;
    for (long t = b; t < e; t++)
        gm_ref_altup_correct(a->x + t * a->d, stride, a->act + t * a->d, a->c + t * a->K, a->y + t * a->d, a->K,
                             a->active, a->d);
}

static void cpu_altup_correct(gm_backend *b, const float *pred, const float *act, const float *c, float *y, int32_t K,
                              int32_t active, int32_t n, int32_t d) {
    altup_ctx a = {.x = pred, .act = act, .c = c, .y = y, .K = K, .active = active, .n = n, .d = d};
    parallel_for(cpu(b), n, 4, altup_correct_range, &a);
}

static void cpu_copy_bytes(gm_backend *b, void *dst, const void *src, size_t n) {
    (void)b;
    memcpy(dst, src, n);
}

/* Copies of 256 MiB split over the workers, best of 4 (bytes read + written per second). */
typedef struct copy_job {
    uint8_t *dst;
    const uint8_t *src;
} copy_job;
static void copy_range(void *p, long b, long e, int ith) {
    (void)ith;
    const copy_job *j = p;
    memcpy(j->dst + (b << 20), j->src + (b << 20), (size_t)(e - b) << 20);
}
static double cpu_copy_gbps(gm_backend *b) {
    const size_t n = (size_t)256 << 20;
    uint8_t *src = malloc(n), *dst = malloc(n);
    double best = 0;
    if (src && dst) {
        memset(src, 1, n), memset(dst, 0, n);
        copy_job j = {dst, src};
        for (int r = 0; r < 4; r++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            parallel_for(cpu(b), (long)(n >> 20), 1, copy_range, &j);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            if (s > 0 && 2.0 * n / s / 1e9 > best) best = 2.0 * n / s / 1e9;
        }
    }
    free(src);
    free(dst);
    return best;
}

static const gm_backend_ops cpu_ops = {
    .name = "cpu",
    .free = cpu_free,
    .copy_bytes = cpu_copy_bytes,
    .copy_gbps = cpu_copy_gbps,
    .alloc_bytes = cpu_alloc_bytes,
    .free_bytes = cpu_free_bytes,
    .begin_batch = cpu_begin_batch,
    .end_batch = cpu_end_batch,
    .reserve = cpu_reserve,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .read = cpu_read,
    .get_rows = cpu_get_rows,
    .gather = cpu_gather,
    .matmul = cpu_matmul,
    .project = cpu_project,
    .rmsnorm = cpu_rmsnorm,
    .rmsnorm_add = cpu_rmsnorm_add,
    .rope = cpu_rope,
    .gelu_mul = cpu_gelu_mul,
    .softcap = cpu_softcap,
    .attention = cpu_attention,
    .scale = cpu_scale,
    .add_scale = cpu_add_scale,
    .moe = cpu_moe,
    .mul_rows = cpu_mul_rows,
    .transpose = cpu_transpose,
    .rms_match = cpu_rms_match,
    .sparsity_gate = cpu_sparsity_gate,
    .altup_predict = cpu_altup_predict,
    .altup_correct = cpu_altup_correct,
};

gemmac_status gm_backend_cpu_new(int n_threads, gm_backend **out, gm_error *err) {
    *out = NULL;
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return gm_fail(err, GEMMAC_ERR_NO_MEMORY, "CPU backend: out of memory");
    c->base.ops = &cpu_ops;
    const bool avx2 = gm_cpu_isa() >= GM_ISA_AVX2;
    c->attention_group = avx2 ? gm_avx2_attention_group : gm_ref_attention_group;
    c->gelu_mul = avx2 ? gm_avx2_gelu_mul : gelu_mul_ref;
    gemmac_status st = gm_pool_new(n_threads, &c->pool, err);
    if (st != GEMMAC_OK) {
        free(c);
        return st;
    }
    *out = &c->base;
    return GEMMAC_OK;
}
