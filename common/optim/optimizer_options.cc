#include "common/optim/optimizer_options.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace gradstream {

std::string_view OptimizerTypeName(OptimizerType type) {
  switch (type) {
    case OptimizerType::kSgd:
      return "sgd";
    case OptimizerType::kMomentum:
      return "momentum";
    case OptimizerType::kNesterov:
      return "nesterov";
    case OptimizerType::kAdaGrad:
      return "adagrad";
    case OptimizerType::kAdam:
      return "adam";
  }
  return "unknown";
}

absl::StatusOr<OptimizerType> OptimizerTypeFromName(std::string_view name) {
  if (name.empty() || name == "momentum") return OptimizerType::kMomentum;
  if (name == "sgd") return OptimizerType::kSgd;
  if (name == "nesterov") return OptimizerType::kNesterov;
  if (name == "adagrad") return OptimizerType::kAdaGrad;
  if (name == "adam") return OptimizerType::kAdam;
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer '", std::string(name),
                                                 "' (sgd, momentum, nesterov, adagrad, adam)"));
}

OptimizerOptions DefaultOptimizerOptions(OptimizerType type) {
  OptimizerOptions o;
  o.type = type;
  if (type == OptimizerType::kAdam) o.epsilon = 1e-8f;  // Kingma & Ba's
  return o;
}

}  // namespace gradstream
