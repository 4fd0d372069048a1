#include "worker/model/model_spec.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/model/internal/network.h"

namespace gradstream {

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

absl::StatusOr<std::vector<TensorSpec>> ModelParams(const ModelConfig& config) {
  GS_ASSIGN_OR_RETURN(internal::NetworkSpec net, internal::BuildNetwork(config));
  return std::move(net.params);
}

}  // namespace gradstream
