// The GPU implementation of Model (cuBLAS + cuDNN + gpu_ops kernels).
// Compiled only when the build has CUDA and cuDNN (GS_WORKER_MODEL_GPU).
// Header free of CUDA types, so model.cc needs no CUDA includes.
#ifndef GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_MODEL_H_
#define GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_MODEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/model/internal/network.h"
#include "worker/model/model.h"

namespace gradstream::internal {

// Number of CUDA devices; 0 when the driver reports none or fails.
int GpuDeviceCount();

// A model on the calling thread's current CUDA device, with its own
// non-blocking stream and cuBLAS/cuDNN handles. Internal when any CUDA setup
// step fails.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Model>> CreateGpuModel(NetworkSpec net);

}  // namespace gradstream::internal

#endif  // GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_MODEL_H_
