// Turns a ModelConfig into layers and tensors; the only place that knows what
// "softmax", "mlp" and "cnn" mean.
#include "worker/model/internal/network.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/data/rng.h"

namespace gradstream::internal {
namespace {

// Keeps every buffer index comfortably inside int (cuBLAS/cuDNN take int).
constexpr int64_t kMaxElems = int64_t{1} << 28;

class Builder {
 public:
  explicit Builder(NetworkSpec* net, InputShape input) : net_(net), shape_(input) {
    net_->max_activation_elems = input.elems();
  }

  void Dense(const std::string& name, int out) {
    LayerSpec l;
    l.kind = LayerKind::kDense;
    l.in = shape_;
    l.out = InputShape{out, 1, 1};
    l.weight = AddTensor(name + ".weight", {out, shape_.elems()});
    l.bias = AddTensor(name + ".bias", {out});
    Push(l);
  }
  void Relu() {
    LayerSpec l;
    l.kind = LayerKind::kRelu;
    l.in = l.out = shape_;
    Push(l);
  }
  void Conv(const std::string& name, int out_channels, int kernel, int padding) {
    LayerSpec l;
    l.kind = LayerKind::kConv;
    l.in = shape_;
    l.kernel = kernel;
    l.padding = padding;
    l.out = InputShape{out_channels, shape_.height + 2 * padding - kernel + 1,
                       shape_.width + 2 * padding - kernel + 1};
    l.weight = AddTensor(name + ".weight", {out_channels, shape_.channels, kernel, kernel});
    l.bias = AddTensor(name + ".bias", {out_channels});
    Push(l);
  }
  void MaxPool() {
    LayerSpec l;
    l.kind = LayerKind::kMaxPool;
    l.in = shape_;
    l.out = InputShape{shape_.channels, shape_.height / 2, shape_.width / 2};
    Push(l);
  }
  const InputShape& shape() const { return shape_; }

 private:
  int AddTensor(std::string name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    net_->params.push_back(TensorSpec{std::move(name), std::move(shape), n});
    return static_cast<int>(net_->params.size()) - 1;
  }
  void Push(const LayerSpec& l) {
    net_->layers.push_back(l);
    shape_ = l.out;
    net_->max_activation_elems = std::max(net_->max_activation_elems, shape_.elems());
  }

  NetworkSpec* const net_;
  InputShape shape_;
};

absl::Status CheckShape(const InputShape& s, const char* what) {
  if (s.channels <= 0 || s.height <= 0 || s.width <= 0 || s.elems() > kMaxElems) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has invalid shape ", ShapeString(s)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NetworkSpec> BuildNetwork(const ModelConfig& config) {
  if (config.num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 2, got ", config.num_classes));
  }
  if (absl::Status s = CheckShape(config.input, "model input"); !s.ok()) return s;
  NetworkSpec net;
  net.config = config;
  Builder b(&net, config.input);
  switch (config.type) {
    case ModelType::kSoftmax:
      b.Dense("fc", config.num_classes);
      break;
    case ModelType::kMlp:
      for (size_t i = 0; i < config.hidden.size(); ++i) {
        if (config.hidden[i] <= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("mlp hidden width ", i, " must be > 0, got ", config.hidden[i]));
        }
        b.Dense(absl::StrCat("fc", i + 1), config.hidden[i]);
        b.Relu();
      }
      b.Dense(absl::StrCat("fc", config.hidden.size() + 1), config.num_classes);
      break;
    case ModelType::kCnn: {
      const CnnConfig& c = config.cnn;
      if (c.conv1_channels <= 0 || c.conv2_channels <= 0 || c.kernel <= 0 || c.padding < 0 ||
          c.fc_hidden <= 0) {
        return absl::InvalidArgumentError("cnn channels, kernel and fc_hidden must be > 0");
      }
      b.Conv("conv1", c.conv1_channels, c.kernel, c.padding);
      b.Relu();
      b.MaxPool();
      b.Conv("conv2", c.conv2_channels, c.kernel, c.padding);
      b.Relu();
      b.MaxPool();
      if (b.shape().height <= 0 || b.shape().width <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cnn input ", ShapeString(config.input), " is too small for two ", c.kernel, "x",
            c.kernel, " convolutions (padding ", c.padding, ") and two 2x2 pools"));
      }
      b.Dense("fc1", c.fc_hidden);
      b.Relu();
      b.Dense("fc2", config.num_classes);
      break;
    }
    default:
      return absl::InvalidArgumentError("unknown model type");
  }
  for (const LayerSpec& l : net.layers) {
    if (absl::Status s = CheckShape(l.out, "layer output"); !s.ok()) return s;
  }
  for (const TensorSpec& t : net.params) {
    if (t.num_elems > kMaxElems) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " has ", t.num_elems,
                                                     " elements, more than ", kMaxElems));
    }
  }
  return net;
}

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
