// Model types, network construction and the tensor list; see model.h.
#include "common/job/model.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace gradstream {
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
    net_->params.push_back(TensorSpec{std::move(name), n, std::move(shape)});
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

std::string ShapeString(const InputShape& shape) {
  return absl::StrCat(shape.channels, "x", shape.height, "x", shape.width);
}

std::string_view ModelTypeName(ModelType type) {
  switch (type) {
    case ModelType::kSoftmax:
      return "softmax";
    case ModelType::kMlp:
      return "mlp";
    case ModelType::kCnn:
      return "cnn";
  }
  return "unknown";
}

absl::StatusOr<ModelType> ModelTypeFromName(std::string_view name) {
  if (name == "softmax") return ModelType::kSoftmax;
  if (name == "mlp") return ModelType::kMlp;
  if (name == "cnn") return ModelType::kCnn;
  return absl::NotFoundError(
      absl::StrCat("unknown model '", std::string(name), "' (want softmax, mlp or cnn)"));
}

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

absl::StatusOr<std::vector<TensorSpec>> ModelParams(const ModelConfig& config) {
  absl::StatusOr<NetworkSpec> net = BuildNetwork(config);
  if (!net.ok()) return net.status();
  return std::move(net->params);
}

}  // namespace gradstream
