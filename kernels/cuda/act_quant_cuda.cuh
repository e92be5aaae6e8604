/* act_quant_cuda.cuh: the device side of the activation quantizers (f32 -> q8_0 / q8_K), the CPU's bit for bit
 * (kernels/ref: gm_quantize_q8_0_act_ref, gm_quantize_q8_K_ref; the meaning of each step is in matmul_cuda.cu's
 * note on the quantizers). Shared by every kernel that writes quantized activations: the quantize and
 * act_prep kernels (matmul_cuda.cu) and producers that quantize their own output (attention). No kernels here. */
#ifndef GM_ACT_QUANT_CUDA_CUH
#define GM_ACT_QUANT_CUDA_CUH

#include "common_cuda.cuh"

/* A q8_0 block's two scales from its amax, the only place both q8_0 quantizers below take them from: id
 * multiplies the values before rounding, d (f16-rounded, widened back) is stored. */
__device__ __forceinline__ float q8_0_inv_scale(float amax) { return amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f; }
__device__ __forceinline__ float q8_0_scale(float amax) { return __half2float(__float2half_rn(__fdiv_rn(amax, 127.0f))); }

__device__ __forceinline__ void quant_q8_0_block(const float v[32], int8_t *__restrict__ xq, float *__restrict__ xd) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(v[i]));
    const float id = q8_0_inv_scale(amax);
    uint32_t packed[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint32_t p = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int q = __float2int_rn(__fmul_rn(v[4 * i + j], id));
            p |= (uint32_t)(q & 0xff) << (8 * j);
        }
        packed[i] = p;
    }
    int4 *dst = (int4 *)xq;
    dst[0] = make_int4((int)packed[0], (int)packed[1], (int)packed[2], (int)packed[3]);
    dst[1] = make_int4((int)packed[4], (int)packed[5], (int)packed[6], (int)packed[7]);
    *xd = q8_0_scale(amax);
}

/* One q8_K block by one warp: lane holds values 8·lane .. 8·lane + 7 of the block. */
__device__ __forceinline__ void quant_q8_K_block_warp(const float v[8], int lane, int8_t *__restrict__ xq,
                                                      float *__restrict__ xd) {
    float amax = 0.0f, mx = 0.0f;
    int idx = 0x7fffffff; /* element index of mx within the block; none yet */
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (fabsf(v[i]) > amax) amax = fabsf(v[i]), mx = v[i], idx = 8 * lane + i;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, amax, o), om = __shfl_xor_sync(0xffffffffu, mx, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oa > amax || (oa == amax && oi < idx)) amax = oa, mx = om, idx = oi;
    }
    uint32_t p0 = 0, p1 = 0;
    float d = 0.0f;
    if (amax != 0.0f) {
        const float iscale = __fdiv_rn(-127.0f, mx);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = __float2int_rn(__fmul_rn(iscale, v[i]));
            q = q < 127 ? q : 127;
            if (i < 4) p0 |= (uint32_t)(q & 0xff) << (8 * i);
            else p1 |= (uint32_t)(q & 0xff) << (8 * (i - 4));
        }
        d = __fdiv_rn(1.0f, iscale);
    }
    *(uint2 *)(xq + 8 * lane) = make_uint2(p0, p1);
    if (lane == 0) *xd = d;
}

#endif
