// Device-independent helpers of the CPU and GPU models: deterministic initial
// values, batch and dataset checks, batched evaluation. Both models execute a
// NetworkSpec (common/job/model.h), which keeps them layer-for-layer identical.
#ifndef GRADSTREAM_WORKER_MODEL_INTERNAL_NETWORK_H_
#define GRADSTREAM_WORKER_MODEL_INTERNAL_NETWORK_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job/model.h"
#include "worker/data/dataset.h"
#include "worker/model/model.h"

namespace gradstream::internal {

// Initial values for every tensor in params order: weights He normal
// N(0, 2 / fan_in) drawn from SplitMix64(MixSeed(seed, tensor index)) with
// Box–Muller (worker/data/rng.h), biases zero. Per-tensor streams keep a
// tensor's init unchanged when other layers change.
std::vector<std::vector<float>> InitialParams(const NetworkSpec& net, uint64_t seed);

// Validates a batch's labels (host) against the class count.
[[nodiscard]] absl::Status CheckBatch(const int32_t* y, int batch, int num_classes);

// InvalidArgument unless 0 <= i < params.size() and `size` is that tensor's
// element count.
[[nodiscard]] absl::Status CheckTensor(const std::vector<TensorSpec>& params, int i, size_t size);

// InvalidArgument unless `data` fits the model: the CNN needs the exact input
// shape, dense models the same element count; at most num_classes classes.
[[nodiscard]] absl::Status CheckDatasetFits(const ModelConfig& config, const Dataset& data);

// The loss summed over a batch and how many it classified right.
struct BatchEval {
  double loss_sum = 0;
  int correct = 0;
};

// Model::Evaluate for any device: checks that `data` fits `config`, runs
// `batch_fn(x, y, b)` over it in slices of at most `max_batch` examples (the
// labels of each checked first), and averages into `stats`.
[[nodiscard]] absl::Status EvaluateInBatches(
    const ModelConfig& config, const Dataset& data, int max_batch,
    const std::function<absl::StatusOr<BatchEval>(const float* x, const int32_t* y, int b)>&
        batch_fn,
    EvalStats* stats);

}  // namespace gradstream::internal

#endif  // GRADSTREAM_WORKER_MODEL_INTERNAL_NETWORK_H_
