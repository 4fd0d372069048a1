// An optimizer's type and hyperparameters, and the job's defaults for them:
// what the job spec (common/job) is normalized from and the shards' math
// (optimizer.h) runs with. No math here, so the job library links none.
#ifndef GRADSTREAM_COMMON_OPTIM_OPTIMIZER_OPTIONS_H_
#define GRADSTREAM_COMMON_OPTIM_OPTIMIZER_OPTIONS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace gradstream {

enum class OptimizerType : uint8_t {
  kSgd = 0,
  kMomentum = 1,
  kNesterov = 2,
  kAdaGrad = 3,
  kAdam = 4
};

// "sgd", "momentum", "nesterov", "adagrad", "adam".
std::string_view OptimizerTypeName(OptimizerType type);
// Inverse of OptimizerTypeName; "" maps to momentum (the job default).
// InvalidArgument for an unknown name.
[[nodiscard]] absl::StatusOr<OptimizerType> OptimizerTypeFromName(std::string_view name);

// Typed options, converted at the RPC edge from a normalized optimizer spec
// (see [normalized spec] in common/job/job_spec.h) and used as they are. The
// member values are the job defaults; DefaultOptimizerOptions adds the one
// that depends on the type.
struct OptimizerOptions {
  OptimizerType type = OptimizerType::kMomentum;
  float learning_rate = 0.05f;
  float momentum = 0.9f;
  float epsilon = 1e-7f;
  float initial_accumulator = 0.1f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float weight_decay = 0.0f;
};

// The job's defaults for `type` (the one home of every default number: a
// spec is normalized from these, ApplyOptimizerDefaults).
OptimizerOptions DefaultOptimizerOptions(OptimizerType type);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_OPTIM_OPTIMIZER_OPTIONS_H_
