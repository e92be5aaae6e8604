/* cuda_check.cuh: the CUDA developer tools' (bench/*.cu) error checks, one place for them: CU(call) exits with the
 * file, line, call and CUDA's message when a runtime call fails; CK(call), where ops_cuda.h is included first, when
 * a gm_cuda_* call returns non-zero (with gm_cuda_last_error()). No part of libgemmac. */
#ifndef GM_BENCH_CUDA_CHECK_CUH
#define GM_BENCH_CUDA_CHECK_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CU(call)                                                                                            \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) {                                                                            \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));           \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

#ifdef GM_OPS_CUDA_H
#define CK(call)                                                                                            \
    do {                                                                                                    \
        if ((call) != 0) {                                                                                  \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, gm_cuda_last_error());             \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)
#endif

#endif
