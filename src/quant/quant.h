/* quant.h: the tensor element types gemmac reads from GGUF files, as one traits table (block size, bytes,
 * scalar reference kernels), plus the run-time chosen fast CPU kernels. Type numbers are GGML's, so a GGUF
 * type field is looked up directly. Block structs and their layouts live in quant_blocks.h. */
#ifndef GM_QUANT_H
#define GM_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum gm_type {
    GM_TYPE_F32 = 0,
    GM_TYPE_F16 = 1,
    GM_TYPE_Q4_0 = 2,
    GM_TYPE_Q4_1 = 3,
    GM_TYPE_Q5_0 = 6,
    GM_TYPE_Q5_1 = 7,
    GM_TYPE_Q8_0 = 8,
    GM_TYPE_Q8_1 = 9,   /* activation-side only (dot with Q4_1 / Q5_1) */
    GM_TYPE_Q2_K = 10,  /* named for error messages; not supported */
    GM_TYPE_Q3_K = 11,  /* named for error messages; not supported */
    GM_TYPE_Q4_K = 12,
    GM_TYPE_Q5_K = 13,
    GM_TYPE_Q6_K = 14,
    GM_TYPE_Q8_K = 15,  /* activation-side only (dot with the K-quants) */
    GM_TYPE_BF16 = 30,
    GM_TYPE_COUNT = 41  /* one past the largest GGML type number we name */
} gm_type;

/* Conversions over n elements; n is a multiple of the type's block size. Row pointers have the alignment
 * of the type's element or block struct (2 bytes; 4 for f32 and q8_K), as GGUF tensor data always has. */
typedef void (*gm_dequantize_fn)(const void *src, float *dst, int64_t n);
typedef void (*gm_quantize_fn)(const float *src, void *dst, int64_t n);
/* *out = dot(w, a) over n elements: w is a row of the weight type, a a row of its vec_dot_type. */
typedef void (*gm_vec_dot_fn)(int64_t n, float *out, const void *w, const void *a);

typedef struct gm_type_traits {
    const char *name;              /* "q4_K" as GGML spells it */
    int32_t block_size;            /* elements per block */
    uint32_t block_bytes;          /* bytes per block */
    bool weight_ok;                /* accepted as a tensor type in a model file */
    gm_type vec_dot_type;          /* activations are quantized to this type before vec_dot */
    gm_dequantize_fn dequantize;   /* scalar reference (the oracle) */
    gm_quantize_fn quantize;       /* scalar reference; bit-exact with GGML's for the activation types */
    gm_quantize_fn quantize_act;   /* how activations become this type before a vec_dot (NULL: not an
                                      activation type): the scalar statement of the quantizer llama.cpp's CPU
                                      backend runs on x86, so that our rounding of activations is its rounding.
                                      Differs from quantize only for q8_0 (id = 127/amax, round half even). */
    gm_vec_dot_fn vec_dot;         /* scalar reference */
} gm_type_traits;

/* Traits of a GGML type number, or NULL when the number names no type we know (including negatives). */
const gm_type_traits *gm_type_traits_of(int64_t type);
/* The name of any GGML type number, known or not ("type 77"); buf is used only for unknown ones. */
const char *gm_type_name(int64_t type, char buf[32]);

/* Bytes of a row of n elements (n a multiple of the block size). */
static inline uint64_t gm_row_bytes(const gm_type_traits *t, int64_t n) {
    return (uint64_t)(n / t->block_size) * t->block_bytes;
}

/* ---- Fast CPU kernels (kernels/cpu), chosen once at run time ---- */
typedef enum gm_isa { GM_ISA_SCALAR = 0, GM_ISA_AVX2 = 1, GM_ISA_AVX512 = 2 } gm_isa;

/* out[c] = dot(w, a[c]) for c = 0..3: one weight row against four activation rows (each a row of the
 * vec_dot_type), every weight block unpacked once for the four. out[c] is BIT-IDENTICAL to what the same
 * table's vec_dot gives for a[c] alone (same integer block sums, same float operations in the same order
 * per column), so a token's result never depends on which tokens share its batch. */
typedef void (*gm_vec_dot_nc_fn)(int64_t n, float out[4], const void *w, const void *const a[4]);

/* out[4·r + c] = dot(row r, a[c]) for the four weight rows of w4, a group packed by gm_pack_rows4, and the first
 * nc (1..4) activation rows (out[4·r + c] for c >= nc untouched): each weight block unpacked once for the nc
 * columns, each activation block loaded (its scale widened) once for the four rows. BIT-IDENTICAL per (row,
 * column) to vec_dot on the unpacked row, as vec_dot_x4. With nc = 1 it is the decode mat-vec, four rows at a time. */
typedef void (*gm_vec_dot_4xn_fn)(int64_t n, float out[16], const void *w4, const void *const a[4], int nc);

/* Packs four rows of nb blocks (block_bytes each; row r at src + r·rb) into one stream at dst (4·nb blocks): for
 * each pair j of blocks the four rows' blocks 2j, 2j + 1 (row 0's pair first), then, if nb is odd, the four rows'
 * last blocks. The layout vec_dot_4xn reads. */
void gm_pack_rows4(void *dst, const void *src, uint64_t rb, int64_t nb, size_t block_bytes);

typedef struct gm_type_cpu {
    gm_dequantize_fn dequantize;
    gm_quantize_fn quantize;       /* activation quantizer: same bytes as the traits' quantize_act */
    gm_vec_dot_fn vec_dot;
    gm_vec_dot_nc_fn vec_dot_x4;   /* NULL: none for this type and ISA, call vec_dot per column */
    gm_vec_dot_4xn_fn vec_dot_4xn; /* NULL: none for this type and ISA, call vec_dot_x4 / vec_dot per row */
} gm_type_cpu;

/* The best ISA this CPU runs (honours the environment variable GEMMAC_ISA=scalar|avx2|avx512 to go lower). */
gm_isa gm_cpu_isa(void);
const char *gm_isa_name(gm_isa isa);
/* Kernels of type t for a given ISA (for tests), or for the best one (gm_cpu_kernels). Entries never NULL
 * for a type with traits: a missing fast kernel falls back to the reference. NULL if isa is not runnable
 * on this CPU, or t has no kernels at all (unknown numbers, q2_K, q3_K). The activation-only types q8_1
 * and q8_K have dequantize and quantize but a NULL vec_dot. */
const gm_type_cpu *gm_cpu_kernels_isa(gm_type t, gm_isa isa);
const gm_type_cpu *gm_cpu_kernels(gm_type t);

/* ---- Scalar reference kernels (kernels/ref), the oracle the traits table points at ----
 * Named gm_<op>_<type>_ref; vec_dot's a is a row of the type's vec_dot_type. */
void gm_dequantize_f32_ref(const void *src, float *dst, int64_t n);
void gm_quantize_f32_ref(const float *src, void *dst, int64_t n);
void gm_vec_dot_f32_ref(int64_t n, float *out, const void *w, const void *a);
void gm_dequantize_f16_ref(const void *src, float *dst, int64_t n);
void gm_quantize_f16_ref(const float *src, void *dst, int64_t n);
void gm_vec_dot_f16_ref(int64_t n, float *out, const void *w, const void *a);
void gm_dequantize_bf16_ref(const void *src, float *dst, int64_t n);
void gm_quantize_bf16_ref(const float *src, void *dst, int64_t n);
void gm_vec_dot_bf16_ref(int64_t n, float *out, const void *w, const void *a);
void gm_dequantize_q4_0_ref(const void *src, float *dst, int64_t n);
void gm_quantize_q4_0_ref(const float *src, void *dst, int64_t n);
void gm_vec_dot_q4_0_ref(int64_t n, float *out, const void *w, const void *a);
void gm_dequantize_q4_1_ref(const void *src, float *dst, int64_t n);
void gm_quantize_q4_1_ref(const float *src, void *dst, int64_t n);
void gm_vec_dot_q4_1_ref(int64_t n, float *out, const void *w, const void *a);
void gm_dequantize_q5_0_ref(const void *src, float *dst, int64_t n);
void gm_quantize_q5_0_ref(const float *src, void *dst, int64_t n);
void gm_vec_dot_q5_0_ref(int64_t n, float *out, const void *w, const void *a);
void gm_dequantize_q5_1_ref(const void *src, float *dst, int64_t n);
void gm_quantize_q5_1_ref(const float *src, void *dst, int64_t n);
void gm_vec_dot_q5_1_ref(int64_t n, float *out, const void *w, const void *a);
void gm_dequantize_q8_0_ref(const void *src, float *dst, int64_t n);
void gm_quantize_q8_0_ref(const float *src, void *dst, int64_t n);
/* q8_0 as llama.cpp's CPU backend quantizes activations on x86: d = f16(amax / 127), q = round-half-even(x ·
 * (127 / amax)). gm_quantize_q8_0_ref is ggml's reference (id = 1/d, roundf), which gguf-py mirrors. */
void gm_quantize_q8_0_act_ref(const float *src, void *dst, int64_t n);
void gm_vec_dot_q8_0_ref(int64_t n, float *out, const void *w, const void *a);
void gm_dequantize_q4_K_ref(const void *src, float *dst, int64_t n);
void gm_quantize_q4_K_ref(const float *src, void *dst, int64_t n);
void gm_vec_dot_q4_K_ref(int64_t n, float *out, const void *w, const void *a);
void gm_dequantize_q5_K_ref(const void *src, float *dst, int64_t n);
void gm_quantize_q5_K_ref(const float *src, void *dst, int64_t n);
void gm_vec_dot_q5_K_ref(int64_t n, float *out, const void *w, const void *a);
void gm_dequantize_q6_K_ref(const void *src, float *dst, int64_t n);
void gm_quantize_q6_K_ref(const float *src, void *dst, int64_t n);
void gm_vec_dot_q6_K_ref(int64_t n, float *out, const void *w, const void *a);
void gm_dequantize_q8_1_ref(const void *src, float *dst, int64_t n);
void gm_quantize_q8_1_ref(const float *src, void *dst, int64_t n);
void gm_dequantize_q8_K_ref(const void *src, float *dst, int64_t n);
void gm_quantize_q8_K_ref(const float *src, void *dst, int64_t n);

/* ---- Per-ISA kernel sets (kernels/cpu), for the dispatcher ----
 * Each fills the entries of tab[type] it has a kernel for and leaves the others untouched. */
void gm_quant_fill_avx2(gm_type_cpu tab[GM_TYPE_COUNT]);
void gm_quant_fill_avx512(gm_type_cpu tab[GM_TYPE_COUNT]);
/* Replaces entries of an AVX-512 table with kernels that also use AVX512-VNNI (same results bit for bit);
 * the dispatcher calls it after gm_quant_fill_avx512 on CPUs that have VNNI (unless GEMMAC_VNNI=0). */
void gm_quant_fill_avx512_vnni(gm_type_cpu tab[GM_TYPE_COUNT]);
/* Every f16 bit pattern as f32, as F16C converts it (exactly), so that kernels broadcast a block's scale
 * straight from memory. Filled by gm_quant_fill_avx2, which the dispatcher runs before any kernel. */
extern float gm_f16_f32[1 << 16];

#endif
