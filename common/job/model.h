// What a model is, independent of any device: its type, its configuration,
// its layer sequence and the ordered list of named parameter tensors.
//
// This is the one place that knows what "softmax", "mlp" and "cnn" mean (see
// [model tensor naming]). The coordinator builds a job's shard map from the
// tensor list, the worker's CPU and GPU models execute the NetworkSpec, so
// the three cannot disagree. No Eigen, no CUDA, no protobuf: cheap to link.
//
// NOTE: [model tensor naming] Layers in forward order, each weight before its
// bias: "fc1.weight" [out, in], "fc1.bias" [out], "conv1.weight"
// [out_channels, in_channels, k, k], ... (BuildNetwork makes them).
#ifndef GRADSTREAM_COMMON_JOB_MODEL_H_
#define GRADSTREAM_COMMON_JOB_MODEL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gradstream {

// Shape of one example. Flat feature vectors of d dimensions use
// {channels = d, height = 1, width = 1}, i.e. a 1x1 "image" with d channels.
struct InputShape {
  int channels = 1;
  int height = 1;
  int width = 1;

  int64_t elems() const { return int64_t{channels} * height * width; }
  bool is_flat() const { return height == 1 && width == 1; }
  bool operator==(const InputShape&) const = default;
};

// "CxHxW", e.g. "1x28x28"; for debugging and error messages.
std::string ShapeString(const InputShape& shape);

enum class ModelType { kSoftmax, kMlp, kCnn };
// "softmax" / "mlp" / "cnn" and back (NotFound for other names).
std::string_view ModelTypeName(ModelType type);
[[nodiscard]] absl::StatusOr<ModelType> ModelTypeFromName(std::string_view name);

// LeNet-like: conv(k x k, pad) -> relu -> maxpool 2x2 -> conv -> relu ->
// maxpool 2x2 -> fc(fc_hidden) -> relu -> fc(num_classes). Convolutions have
// stride 1; pooling floors odd sizes. With the defaults, 1x28x28 (MNIST)
// gives 6x24x24 -> 6x12x12 -> 16x8x8 -> 16x4x4 and 3x32x32 (CIFAR-10) gives
// 16x5x5 before the first fc layer.
struct CnnConfig {
  int conv1_channels = 6;
  int conv2_channels = 16;
  int kernel = 5;
  int padding = 0;
  int fc_hidden = 120;
};

struct ModelConfig {
  ModelType type = ModelType::kMlp;
  InputShape input{20, 1, 1};  // flat inputs for softmax/mlp; CxHxW for cnn
  int num_classes = 10;
  std::vector<int> hidden = {64};  // mlp: widths of the ReLU hidden layers
  CnnConfig cnn;
  uint64_t init_seed = 1;
};

// One named parameter tensor of a model: what the shard map cuts into chunks
// and what a worker's model exposes. Weight shapes: dense [out, in]
// (y = W x + b), conv [out_channels, in_channels, k, k] (cross-correlation, as
// in cuDNN and PyTorch); biases [out]. `shape` may be empty for a tensor known
// only by its size; num_elems is then authoritative.
struct TensorSpec {
  std::string name;
  int64_t num_elems = 0;
  std::vector<int64_t> shape;
  // A row-sparse table of shape [rows, dim] that lives on the shards
  // (docs/design/sparse-tables.md); its rows start as N(0, init_std^2).
  bool table = false;
  float init_std = 1.0f;
};

enum class LayerKind { kDense, kRelu, kConv, kMaxPool };

// One layer; shapes are per example. Dense layers read their input flattened
// (CHW order), which for NCHW activations is the same memory.
struct LayerSpec {
  LayerKind kind = LayerKind::kDense;
  InputShape in;
  InputShape out;
  int weight = -1;  // index into NetworkSpec::params, dense/conv only
  int bias = -1;
  int kernel = 0;   // conv: square kernel size, stride 1
  int padding = 0;  // conv: zero padding on every side
};

// A built-in model as a layer sequence; the CPU and GPU models both execute
// it, which keeps them layer-for-layer identical.
struct NetworkSpec {
  ModelConfig config;
  std::vector<LayerSpec> layers;  // input -> logits
  std::vector<TensorSpec> params;
  // Largest per-example activation (input included), for buffer sizing.
  int64_t max_activation_elems = 0;
};

// InvalidArgument when the config cannot form a network (non-positive sizes,
// an input too small for the CNN's kernels and pools, too many elements).
[[nodiscard]] absl::StatusOr<NetworkSpec> BuildNetwork(const ModelConfig& config);

// The model's tensors, in shard-map order (BuildNetwork's params).
[[nodiscard]] absl::StatusOr<std::vector<TensorSpec>> ModelParams(const ModelConfig& config);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_MODEL_H_
