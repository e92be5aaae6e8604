/* common_cuda.cuh: what every .cu file of the CUDA backend shares: the GGUF block layouts (mirrors of
 * src/quant/quant_blocks.h, which is C11-only), unaligned word loads, warp reductions, and the error
 * recording behind gm_cuda_last_error(). No kernels live here. */
#ifndef GM_COMMON_CUDA_CUH
#define GM_COMMON_CUDA_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "ops_cuda.h"

/* GGML type numbers (src/quant/quant.h). */
enum {
    GMC_F32 = 0, GMC_F16 = 1, GMC_Q4_0 = 2, GMC_Q5_0 = 6, GMC_Q8_0 = 8, GMC_Q4_K = 12, GMC_Q5_K = 13, GMC_Q6_K = 14,
    GMC_Q8_K = 15 /* activations only */, GMC_BF16 = 30
};

/* Block byte sizes and offsets of the GGUF layouts (see quant_blocks.h for the meaning of each field). */
#define GMC_QK 32
#define GMC_QK_K 256
enum { Q4_0_BYTES = 18, Q5_0_BYTES = 22, Q8_0_BYTES = 34, Q4_K_BYTES = 144, Q5_K_BYTES = 176, Q6_K_BYTES = 210 };
/* q5_0: d 0, qh 2..5 (bit j: the fifth bit of element j), qs 6..21 (element j < 16: low nibble of qs[j],
 * element j + 16: high nibble).
 * q4_K: d 0, dmin 2, scales 4..15, qs 16..143.  q5_K: d 0, dmin 2, scales 4..15, qh 16..47, qs 48..175.
 * q6_K: ql 0..127, qh 128..191, scales 192..207 (int8), d 208. */

/* Records a failure for gm_cuda_last_error(); returns code. */
int gmc_fail(int code, const char *fmt, ...);
/* Checks the launch just made (cudaGetLastError); 0 or the recorded error. */
int gmc_check_launch(const char *what);

__device__ __forceinline__ float gmc_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float gmc_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* 16-bit little-endian field at p (2-byte aligned). */
__device__ __forceinline__ uint16_t gmc_ld16(const uint8_t *p) { return __ldg((const unsigned short *)p); }

/* NW consecutive 32-bit words of the byte stream starting at p, for p only 2-byte aligned: loads NW + 1
 * aligned words and shifts (reads at most 3 bytes before p and after p + 4·NW, inside the same 4-byte words
 * when p is 2-aligned: at most 2 bytes past p + 4·NW). */
template <int NW>
__device__ __forceinline__ void gmc_ld_words_a2(const uint8_t *p, uint32_t out[NW]) {
    const uintptr_t a = (uintptr_t)p;
    const uint32_t *w = (const uint32_t *)(a & ~(uintptr_t)3);
    const uint32_t sh = (uint32_t)(a & 3) * 8;
    uint32_t raw[NW + 1];
#pragma unroll
    for (int i = 0; i < NW + 1; i++) raw[i] = (sh == 0 && i == NW) ? 0u : __ldg(w + i);
#pragma unroll
    for (int i = 0; i < NW; i++) out[i] = __funnelshift_r(raw[i], raw[i + 1], sh);
}

__device__ __forceinline__ float gmc_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float gmc_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

#endif
