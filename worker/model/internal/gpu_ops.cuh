// Device helpers shared by the model's .cu files.
#ifndef GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_OPS_CUH_
#define GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_OPS_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gradstream::internal::gpu {

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements; capped because a grid-stride
// loop needs no more than a few waves of blocks.
inline int BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

// Statuses for the launch just made on this thread.
inline absl::Status LaunchStatus(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("launch of ", kernel, " failed: ", cudaGetErrorString(e)));
}

#define GS_GRID_STRIDE_LOOP(i, n)                                           \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{blockDim.x} * gridDim.x)

}  // namespace gradstream::internal::gpu

#endif  // GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_OPS_CUH_
