// The CPU implementation of Model: executes a NetworkSpec with cpu_ops.
#ifndef GRADSTREAM_WORKER_MODEL_INTERNAL_CPU_MODEL_H_
#define GRADSTREAM_WORKER_MODEL_INTERNAL_CPU_MODEL_H_

#include <memory>

#include "worker/model/internal/network.h"
#include "worker/model/model.h"

namespace gradstream::internal {

// Never fails for a NetworkSpec that BuildNetwork accepted.
std::unique_ptr<Model> CreateCpuModel(NetworkSpec net);

}  // namespace gradstream::internal

#endif  // GRADSTREAM_WORKER_MODEL_INTERNAL_CPU_MODEL_H_
