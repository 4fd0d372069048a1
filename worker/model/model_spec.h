// What a model is, independent of any device: its type, its configuration
// and the ordered list of named parameter tensors. This is the one place the
// tensor list is derived (see [model tensor naming]); the coordinator builds a
// job's shard map from it and the worker's model exposes exactly these
// tensors, so the two cannot disagree. No Eigen, no CUDA: cheap to link.
//
// NOTE: [model tensor naming] Layers in forward order, each weight before its
// bias: "fc1.weight" [out, in], "fc1.bias" [out], "conv1.weight"
// [out_channels, in_channels, k, k], ... (internal/network.cc builds them).
#ifndef GRADSTREAM_WORKER_MODEL_MODEL_SPEC_H_
#define GRADSTREAM_WORKER_MODEL_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace gradstream {

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

// One parameter tensor. Weight shapes: dense [out, in] (y = W x + b), conv
// [out_channels, in_channels, k, k] (cross-correlation, as in cuDNN and
// PyTorch); biases [out]. Names: "fc1.weight", "conv2.bias", ...
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t num_elems = 0;
};

// The model's tensors, in shard-map order. InvalidArgument when the config
// cannot form a network (non-positive sizes, an input too small for the CNN).
[[nodiscard]] absl::StatusOr<std::vector<TensorSpec>> ModelParams(const ModelConfig& config);

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_MODEL_MODEL_SPEC_H_
