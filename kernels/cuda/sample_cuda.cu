/* sample_cuda.cu: the k best logits of each row on the device (gm_cuda_top_logits, ops_cuda.h), so a context hands
 * the sampler k (id, value) pairs instead of a row of n_vocab floats. The oracle is the host selection
 * gm_top_logits_row (src/sample/top_logits.c): logits read as gm_logit_read (NaN -> -inf, +inf -> FLT_MAX, -0 ->
 * +0), order (value desc, id asc), the first k in that order. Leaves to others: the sampling itself (src/sample),
 * which rows are asked for and where the pairs go (the backend).
 *
 * Keys: each logit, as read, becomes an order-preserving 32-bit key (positive floats: the bits with the sign bit
 * set; negative: the bits inverted), and with its id a 64-bit key (key32 << 32) | ~id. Larger 64-bit key <=> earlier
 * in (value desc, id asc), and two elements of a row never share one, so "the k largest 64-bit keys" is exactly
 * the oracle's set, ties included, and sorting them by key is its order. 0 is never a real key (the smallest,
 * -inf with id 2^31 - 1, is 0x007FFFFF80000000): it marks empty slots and padding ("sentinels", below every
 * real element, never counted, never selected).
 *
 * Selection, one block: radix select over the 64-bit keys, 8 bits per pass from the top: a shared 256-bin
 * histogram (plain shared atomics) of the digit of the elements still matching the prefix chosen so far, then
 * warp 0 finds the bin b holding the need-th largest (need = k minus those already above); b joins the prefix.
 * It stops as soon as bin b holds exactly the number still needed (keys are distinct, so at the 8th pass at the
 * latest; typically the 2nd-3rd for random logits, whose top 16-24 bits already separate them; rows of ties go
 * on into the id bits). The selected elements are those whose masked key is >= the prefix: exactly
 * min(k, elements). The slices kernel counts the value passes on 32-bit keys alone.
 *
 * Kernels:
 *   slices (LOGITS): grid (ceil(n_vocab / 8192), n_rows), 512 threads x 16 logits held in registers: each row is
 *     read from HBM exactly once (streaming loads); each block writes its slice's best k keys (unordered; a
 *     short last slice pads with 0) to the scratch: [n_rows][n_slices · k] u64.
 *   merge: grid (groups, n_rows), 1024 threads x 8 keys: each block selects the best k of up to
 *     floor(8192 / k) · k candidates. One group per row (n_slices · k <= that: n_vocab <= 2^18 for k = 256,
 *     ~1.7M for k = 40) is the last level: its block sorts the k winners (the rank of each is the number of
 *     winners with a larger key, the keys being distinct; 4 threads per winner, 2 in the slices kernel) and
 *     writes ids / vals. Otherwise the groups' winners go to the other half of the scratch and merge again
 *     (2^24 logits, k = 256: 3 merge levels).
 *   n_vocab <= 8192: the slices kernel alone, as the last level (one launch).
 * Registers: merge 48, slices 64 (its cap for two blocks of 512 per SM; 16 bytes spilled, outside the loops).
 *
 * Cost: Gemma's 262144 logits, k = 256, per row: 1 MiB of logits read once, 32 x 2 KiB of candidates written and
 * read back (64 KiB, L2), 2 KiB of output; 256 rows: 256 MiB + 2 x 16 MiB = ~302 MB, ~75 us at 4 TB/s.
 * Expected: 1 row ~10-15 us (latency: 32 blocks each loading 32 KiB then ~3 passes of two barriers, then one merge
 * block); 256 rows ~100 us if the passes hid behind the loads.
 * Measured (H200, 2026-12-01, CUDA events over 50 calls, PDL on; ncu, kernels serialized, for the split):
 *   normal logits (sigma 4), k = 40 / 256: 1 row 12.3 / 17.0 us (k = 256: slices 10.4 + merge 10.1 us under ncu,
 *     latency bound); 256 rows 290 / 341 us (0.93 / 0.79 TB/s of logits; k = 256: slices 324 + merge 23 us).
 *   rows of 4 levels (ties) or all -inf: 1 row 24-29 us, 256 rows 527-608 us (6-8 passes instead of 2-3).
 * The 256-row case is issue bound (ncu: 64% of issue slots used, DRAM 17%): every pass looks at all 16 keys of
 * every thread, so the instructions per logit, not the bytes, set the time; a pre-filter that leaves only the
 * likely winners for the passes (e.g. a threshold from the per-thread maxima) is the next step if it matters.
 * Variants measured slower: aggregating equal digits per warp before the atomics (ballot / match.any: +15-60%,
 * even on rows of ties), every warp finding the bin itself with one barrier per pass (+15-20%). */
#include <math.h>
#include <stdint.h>

#include "common_cuda.cuh"

enum {
    TL_SLICE_THREADS = 512,
    TL_SLICE_ITEMS = 16,
    TL_SLICE = TL_SLICE_THREADS * TL_SLICE_ITEMS, /* logits per slice block */
    TL_MERGE_THREADS = 1024,
    TL_MERGE_ITEMS = 8,
    TL_MERGE_CAP = TL_MERGE_THREADS * TL_MERGE_ITEMS, /* candidates per merge block, at most */
    TL_MAX_VOCAB = 1 << 24,
    TL_MAX_ROWS = 65535 /* gridDim.y */
};

#define TL_FULL 0xffffffffu

/* The order-preserving key of gm_logit_read(v), never 0 (integer operations only: no fast-math surprises). */
__device__ __forceinline__ uint32_t tl_key(float v) {
    uint32_t b = __float_as_uint(v);
    const uint32_t a = b & 0x7fffffffu;
    if (a > 0x7f800000u) b = 0xff800000u;       /* NaN -> -inf */
    else if (b == 0x7f800000u) b = 0x7f7fffffu; /* +inf -> FLT_MAX */
    else if (a == 0) b = 0;                     /* -0 -> +0 */
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* The 64-bit key of element id with 32-bit key key32 (0: an empty slot stays 0). */
__device__ __forceinline__ uint64_t tl_full_key(uint32_t key32, int id) {
    return key32 ? ((uint64_t)key32 << 32) | (uint32_t)~(uint32_t)id : 0ull;
}

/* The value as read and the id back from a 64-bit key. */
__device__ __forceinline__ float tl_value(uint64_t c) {
    const uint32_t key = (uint32_t)(c >> 32);
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}
__device__ __forceinline__ int32_t tl_id(uint64_t c) { return (int32_t) ~(uint32_t)c; }

struct tl_shared {
    unsigned hist[256];
    unsigned total, above, hb, b; /* the last pass: elements matching the prefix, above bin b, in bin b, b */
    unsigned cnt;                 /* selected so far */
    unsigned long long sel[GM_CUDA_TOP_LOGITS_MAX]; /* the last level's winners */
};

/* One block: the best k of its group of a row, the group being TL_SLICE logits (LOGITS) or span candidates (64-bit
 * keys, 0 = empty) of the row's n_in. Not the last level (gridDim.x > 1): the winners, unordered, then 0s up to k,
 * at cout[row][blockIdx.x · k ..] (row stride gridDim.x · k). Last level: ids / vals [row][k] in order. */
template <int BLOCK, int ITEMS, bool LOGITS>
__global__ void __launch_bounds__(BLOCK, LOGITS ? 2 : 1)
    top_logits_kernel(const float *__restrict__ logits, const uint64_t *__restrict__ cin, int n_in, int span, int k,
                      uint64_t *__restrict__ cout, int32_t *__restrict__ ids, float *__restrict__ vals) {
    static_assert(BLOCK % 32 == 0 && BLOCK >= GM_CUDA_TOP_LOGITS_MAX && BLOCK <= 1024, "block size");
    constexpr int TPI = BLOCK / GM_CUDA_TOP_LOGITS_MAX; /* threads per winner in the rank sort */
    static_assert(TPI >= 1 && TPI <= 32 && (TPI & (TPI - 1)) == 0, "threads per winner");
    __shared__ tl_shared sh;
    gmc_pdl_wait();
    const int tid = threadIdx.x;
    const unsigned lane = (unsigned)tid & 31u;
    const int row = blockIdx.y, grp = blockIdx.x;
    const int base = grp * span;

    /* the group's elements, read once: 32-bit keys of logits (id from the position) or 64-bit candidate keys */
    uint32_t key[LOGITS ? ITEMS : 1];
    uint64_t cand[LOGITS ? 1 : ITEMS];
    if constexpr (LOGITS) {
        const float *x = logits + (int64_t)row * n_in;
#pragma unroll
        for (int j = 0; j < ITEMS; j++) {
            const int i = base + j * BLOCK + tid;
            key[j] = i < n_in ? tl_key(__ldcs(x + i)) : 0u;
        }
    } else {
        const uint64_t *x = cin + (int64_t)row * n_in;
#pragma unroll
        for (int j = 0; j < ITEMS; j++) {
            const int li = j * BLOCK + tid, i = base + li;
            cand[j] = li < span && i < n_in ? x[i] : 0ull;
        }
    }
    /* the 64-bit key of item j (j a constant after unrolling) */
#define TL_ITEM(j) (LOGITS ? tl_full_key(key[LOGITS ? (j) : 0], base + (j) * BLOCK + tid) : cand[LOGITS ? 0 : (j)])

    for (int i = tid; i < 256; i += BLOCK) sh.hist[i] = 0;
    if (tid == 0) sh.cnt = 0;
    __syncthreads();

    /* radix select: prefix P under mask M (the top 8·passes bits), kk still needed among those matching it. Per
     * pass: the histogram (plain shared atomics: measured faster than aggregating equal digits per warp, even on
     * rows of ties), a barrier, warp 0 finds the bin and clears the histogram, a barrier. (Every warp finding the
     * bin itself, with three histograms and one barrier per pass, measured slower: the kernel is issue bound.) */
    uint64_t P = 0, M = 0;
    unsigned kk = (unsigned)k, keff = 0;
    for (int pass = 0; pass < 8; pass++) {
        const int s = 56 - 8 * pass;
        unsigned *hist = sh.hist;
        if (LOGITS && pass < 4) { /* the value digits: 32-bit keys alone */
            const uint32_t P32 = (uint32_t)(P >> 32), M32 = (uint32_t)(M >> 32);
#pragma unroll
            for (int j = 0; j < ITEMS; j++) {
                const uint32_t kj = key[LOGITS ? j : 0];
                if (kj != 0 && (kj & M32) == P32) atomicAdd(hist + ((kj >> (s - 32)) & 255u), 1u);
            }
        } else {
#pragma unroll
            for (int j = 0; j < ITEMS; j++) {
                const uint64_t c = TL_ITEM(j);
                if (c != 0 && (c & M) == P) atomicAdd(hist + ((unsigned)(c >> s) & 255u), 1u);
            }
        }
        __syncthreads();
        if (tid < 32) { /* warp 0: lane l holds bins 255 - 8l .. 248 - 8l, highest first */
            unsigned h[8], sum = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) h[i] = hist[255 - 8 * (int)lane - i], sum += h[i];
            unsigned incl = sum;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned n = __shfl_up_sync(TL_FULL, incl, o);
                if ((int)lane >= o) incl += n;
            }
            const unsigned total = __shfl_sync(TL_FULL, incl, 31), excl = incl - sum;
            const unsigned need = kk < total ? kk : total;
            if (need > 0 && excl < need && incl >= need) { /* the one lane whose bins reach the need-th */
                unsigned acc = excl;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    if (acc + h[i] >= need) {
                        sh.b = 255u - 8u * lane - (unsigned)i, sh.above = acc, sh.hb = h[i];
                        break;
                    }
                    acc += h[i];
                }
            }
            if (lane == 0) sh.total = total;
#pragma unroll
            for (int i = 0; i < 8; i++) hist[255 - 8 * (int)lane - i] = 0; /* for the next pass */
        }
        __syncthreads();
        const unsigned total = sh.total;
        if (kk > total) kk = total; /* pass 0: fewer elements than k (a short slice) */
        if (pass == 0) keff = kk;
        if (kk == 0) break; /* no element at all */
        const unsigned b = sh.b, above = sh.above, hb = sh.hb;
        kk -= above;
        P |= (uint64_t)b << s;
        M |= 0xffull << s;
        if (hb == kk) break; /* the whole bin is needed: done */
    }

    /* the winners: masked key >= P (exactly keff of them); one slot range per warp */
    const bool last = gridDim.x == 1;
    if (keff > 0) {
        unsigned mine = 0;
#pragma unroll
        for (int j = 0; j < ITEMS; j++) {
            const uint64_t c = TL_ITEM(j);
            mine += c != 0 && (c & M) >= P;
        }
        unsigned incl = mine;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned n = __shfl_up_sync(TL_FULL, incl, o);
            if ((int)lane >= o) incl += n;
        }
        unsigned wbase = 0;
        if (lane == 31 && incl > 0) wbase = atomicAdd(&sh.cnt, incl);
        unsigned slot = __shfl_sync(TL_FULL, wbase, 31) + incl - mine;
        if (mine > 0) {
#pragma unroll
            for (int j = 0; j < ITEMS; j++) {
                const uint64_t c = TL_ITEM(j);
                if (c != 0 && (c & M) >= P) {
                    if (slot < (unsigned)k) {
                        if (last) sh.sel[slot] = c;
                        else cout[((int64_t)row * gridDim.x + grp) * k + slot] = c;
                    }
                    slot++;
                }
            }
        }
    }
#undef TL_ITEM
    __syncthreads();
    const unsigned cnt = sh.cnt < (unsigned)k ? sh.cnt : (unsigned)k;
    if (!last) {
        for (unsigned i = cnt + (unsigned)tid; i < (unsigned)k; i += BLOCK)
            cout[((int64_t)row * gridDim.x + grp) * k + i] = 0ull;
        return;
    }

    /* last level: winner i goes to its rank (distinct keys: a permutation of 0..cnt) */
    const unsigned i = (unsigned)tid / TPI, q = (unsigned)tid % TPI;
    uint64_t c = 0;
    unsigned r = 0;
    if (i < cnt) {
        c = sh.sel[i];
        for (unsigned j = q; j < cnt; j += TPI) r += sh.sel[j] > c;
    }
#pragma unroll
    for (int o = 1; o < TPI; o <<= 1) r += __shfl_xor_sync(TL_FULL, r, o);
    int32_t *id_row = ids + (int64_t)row * k;
    float *val_row = vals + (int64_t)row * k;
    if (i < cnt && q == 0) id_row[r] = tl_id(c), val_row[r] = tl_value(c);
    /* fewer than k elements: never when k <= n_vocab (checked by the caller) */
    for (unsigned t = cnt + (unsigned)tid; t < (unsigned)k; t += BLOCK) id_row[t] = -1, val_row[t] = -INFINITY;
}

static int64_t tl_group(int32_t k) { return (int64_t)(TL_MERGE_CAP / k) * k; }

static bool tl_args_ok(int32_t n_rows, int32_t n_vocab, int32_t k) {
    return n_rows >= 1 && n_rows <= TL_MAX_ROWS && n_vocab >= 1 && n_vocab <= TL_MAX_VOCAB && k >= 1 &&
           k <= GM_CUDA_TOP_LOGITS_MAX && k <= n_vocab;
}

/* Scratch: level 0 (the slices' candidates, [n_rows][n_slices · k]) then level 1 ([n_rows][groups · k], when the
 * first merge is not the last); later levels reuse them in turn, each smaller than the one two before. */
extern "C" size_t gm_cuda_top_logits_scratch_bytes(int32_t n_rows, int32_t n_vocab, int32_t k) {
    if (!tl_args_ok(n_rows, n_vocab, k)) return 0;
    const int64_t n_slices = ((int64_t)n_vocab + TL_SLICE - 1) / TL_SLICE;
    if (n_slices == 1) return 0;
    const int64_t c0 = n_slices * k, g1 = (c0 + tl_group(k) - 1) / tl_group(k);
    const int64_t c1 = g1 > 1 ? g1 * k : 0;
    return (size_t)n_rows * (size_t)(c0 + c1) * sizeof(uint64_t);
}

extern "C" int gm_cuda_top_logits(const float *logits, int32_t n_rows, int32_t n_vocab, int32_t k, int32_t *ids,
                                  float *vals, void *scratch, size_t scratch_bytes, gm_cuda_stream stream) {
    if (!logits || !ids || !vals || !tl_args_ok(n_rows, n_vocab, k))
        return gmc_fail(-1, "top_logits: bad arguments (n_rows %d, n_vocab %d, k %d)", (int)n_rows, (int)n_vocab,
                        (int)k);
    const size_t need = gm_cuda_top_logits_scratch_bytes(n_rows, n_vocab, k);
    if (need > 0 && (!scratch || scratch_bytes < need || ((uintptr_t)scratch & 7u) != 0))
        return gmc_fail(-1, "top_logits: scratch of %zu bytes, %zu needed (8-byte aligned)", scratch_bytes, need);
    void (*slices)(const float *, const uint64_t *, int, int, int, uint64_t *, int32_t *, float *) =
        top_logits_kernel<TL_SLICE_THREADS, TL_SLICE_ITEMS, true>;
    void (*merge)(const float *, const uint64_t *, int, int, int, uint64_t *, int32_t *, float *) =
        top_logits_kernel<TL_MERGE_THREADS, TL_MERGE_ITEMS, false>;
    const uint64_t *no_cand = NULL;
    const int n_slices = (n_vocab + TL_SLICE - 1) / TL_SLICE;
    if (n_slices == 1) { /* one launch: the slice is the row */
        gmc_launch(slices, dim3(1, (unsigned)n_rows), dim3(TL_SLICE_THREADS), 0, stream, logits, no_cand, n_vocab,
                   (int)TL_SLICE, k, (uint64_t *)NULL, ids, vals);
        return gmc_check_launch("top_logits");
    }
    uint64_t *buf[2] = {(uint64_t *)scratch, (uint64_t *)scratch + (size_t)n_rows * n_slices * k};
    gmc_launch(slices, dim3((unsigned)n_slices, (unsigned)n_rows), dim3(TL_SLICE_THREADS), 0, stream, logits,
               no_cand, n_vocab, (int)TL_SLICE, k, buf[0], ids, vals);
    int rc = gmc_check_launch("top_logits (slices)");
    if (rc) return rc;
    const int64_t G = tl_group(k);
    int64_t n_in = (int64_t)n_slices * k;
    for (int cur = 0;; cur ^= 1) {
        const int64_t groups = (n_in + G - 1) / G;
        gmc_launch(merge, dim3((unsigned)groups, (unsigned)n_rows), dim3(TL_MERGE_THREADS), 0, stream,
                   (const float *)NULL, (const uint64_t *)buf[cur], (int)n_in, (int)G, k,
                   groups > 1 ? buf[cur ^ 1] : (uint64_t *)NULL, ids, vals);
        rc = gmc_check_launch("top_logits (merge)");
        if (rc || groups == 1) return rc;
        n_in = groups * k;
    }
}
