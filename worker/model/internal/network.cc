// Device-independent helpers shared by the CPU and GPU models: initial
// values, input checks, batched evaluation. The network itself is built by
// common/job/model.cc.
#include "worker/model/internal/network.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/data/rng.h"

namespace gradstream::internal {

std::vector<std::vector<float>> InitialParams(const NetworkSpec& net, uint64_t seed) {
  std::vector<std::vector<float>> out(net.params.size());
  for (size_t i = 0; i < net.params.size(); ++i) out[i].assign(net.params[i].num_elems, 0.0f);
  for (const LayerSpec& l : net.layers) {
    if (l.weight < 0) continue;
    const TensorSpec& w = net.params[l.weight];
    const int64_t fan_in = w.num_elems / w.shape[0];
    const double stddev = std::sqrt(2.0 / static_cast<double>(fan_in));
    SplitMix64 rng(MixSeed(seed, static_cast<uint64_t>(l.weight)));
    for (float& v : out[l.weight]) v = static_cast<float>(stddev * rng.Normal());
  }
  return out;
}

absl::Status CheckBatch(const int32_t* y, int batch, int num_classes) {
  if (batch <= 0) return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
  if (y == nullptr) return absl::InvalidArgumentError("null labels");
  for (int i = 0; i < batch; ++i) {
    if (y[i] < 0 || y[i] >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", y[i], " of example ", i, " is outside [0, ", num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTensor(const std::vector<TensorSpec>& params, int i, size_t size) {
  if (i < 0 || i >= static_cast<int>(params.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor index ", i, " outside [0, ", params.size(), ")"));
  }
  if (static_cast<int64_t>(size) != params[i].num_elems) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", params[i].name, " has ", params[i].num_elems, " elements, buffer has ", size));
  }
  return absl::OkStatus();
}

absl::Status CheckDatasetFits(const ModelConfig& config, const Dataset& data) {
  const InputShape& want = config.input;
  const bool shape_ok =
      config.type == ModelType::kCnn ? data.shape == want : data.shape.elems() == want.elems();
  if (!shape_ok || data.num_classes > config.num_classes ||
      static_cast<int64_t>(data.features.size()) != data.num_examples() * want.elems()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset of ", data.num_examples(), " x ", ShapeString(data.shape), " with ",
                     data.num_classes, " classes does not fit a model of ", ShapeString(want),
                     " with ", config.num_classes, " classes"));
  }
  return absl::OkStatus();
}

absl::Status EvaluateInBatches(
    const ModelConfig& config, const Dataset& data, int max_batch,
    const std::function<absl::StatusOr<BatchEval>(const float* x, const int32_t* y, int b)>&
        batch_fn,
    EvalStats* stats) {
  if (absl::Status s = CheckDatasetFits(config, data); !s.ok()) return s;
  double loss_sum = 0;
  int64_t correct = 0;
  const int64_t n = data.num_examples();
  for (int64_t start = 0; start < n; start += max_batch) {
    const int b = static_cast<int>(std::min<int64_t>(max_batch, n - start));
    const int32_t* y = data.labels.data() + start;
    if (absl::Status s = CheckBatch(y, b, config.num_classes); !s.ok()) return s;
    absl::StatusOr<BatchEval> e = batch_fn(data.example(start), y, b);
    if (!e.ok()) return e.status();
    loss_sum += e->loss_sum;
    correct += e->correct;
  }
  EvalStats s;
  s.examples = n;
  s.loss = n > 0 ? loss_sum / n : 0.0;
  s.accuracy = n > 0 ? static_cast<double>(correct) / n : 0.0;
  if (stats != nullptr) *stats = s;
  return absl::OkStatus();
}

}  // namespace gradstream::internal
