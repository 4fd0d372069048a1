// Small custom CUDA kernels of the GPU model (bias, ReLU, softmax
// cross-entropy); cuBLAS and cuDNN do the heavy layers (gpu_layers.h).
//
// Host declarations only, without CUDA types: the stream is CUstream_st*,
// which is what cudaStream_t is. Each launcher enqueues on `stream`, checks
// the launch and returns Internal on failure. Pointers are device memory
// unless stated otherwise. CPU references: cpu_ops.h (same semantics).
#ifndef GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_OPS_H_
#define GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_OPS_H_

#include <cstdint>

#include "absl/status/status.h"

struct CUstream_st;

namespace gradstream::internal::gpu {

using Stream = CUstream_st*;

// y[r, c] += bias[c] for a row-major rows x cols matrix (dense layers).
[[nodiscard]] absl::Status AddBias(float* y, const float* bias, int rows, int cols, Stream stream);
// dbias[c] = sum_r dy[r, c]; one thread per column, summed in row order, so
// the result is deterministic.
[[nodiscard]] absl::Status BiasGrad(const float* dy, int rows, int cols, float* dbias,
                                    Stream stream);

[[nodiscard]] absl::Status ReluForward(const float* x, int64_t n, float* y, Stream stream);
// dx = dy where y > 0, else 0.
[[nodiscard]] absl::Status ReluBackward(const float* y, const float* dy, int64_t n, float* dx,
                                        Stream stream);

// Per row r of `batch` x `classes` logits: row_loss[r] = cross-entropy in
// double, row_correct[r] = 1 if the first maximal logit is label y[r];
// dlogits = (softmax - onehot) / batch unless dlogits is null. Labels must
// already be validated.
[[nodiscard]] absl::Status SoftmaxCrossEntropy(const float* logits, const int32_t* y, int batch,
                                               int classes, float* dlogits, double* row_loss,
                                               int32_t* row_correct, Stream stream);

}  // namespace gradstream::internal::gpu

#endif  // GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_OPS_H_
