/* tensor.h: a view of one weight tensor as the forward pass sees it: type, shape, where its bytes are.
 * Weights are never copied on the CPU: data points into the mapped file. */
#ifndef GM_TENSOR_H
#define GM_TENSOR_H

#include <stdint.h>

#include "quant/quant.h"

typedef struct gm_tensor {
    const char *name;          /* as in the file, for messages (points into the model's name storage) */
    gm_type type;
    int64_t ne[4];             /* GGML order: ne[0] = elements per row (the input dim of a matmul) */
    uint64_t row_bytes;        /* bytes of one ne[0] row */
    const void *data;          /* NULL when the tensor is absent (optional tensors) */
} gm_tensor;

static inline int64_t gm_tensor_rows(const gm_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

#endif
