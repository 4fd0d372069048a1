// Job spec defaults and validation, applied by the coordinator when a job is
// submitted (and by the CLI before it sends one, for early errors).
//
// proto3 scalars have no presence, so 0 / "" mean "use the default"; the
// defaults written in proto/job.proto are applied here, in one place.
#ifndef GRADSTREAM_SERVER_COORDINATOR_JOB_SPEC_H_
#define GRADSTREAM_SERVER_COORDINATOR_JOB_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "job.pb.h"
#include "worker/model/job_model.h"

namespace gradstream::coordinator {

// Fills every unset (zero) field of `spec` with its documented default.
void ApplyJobDefaults(gradstream::v1::JobSpec* spec);

// Checks a defaults-filled spec. OK, or InvalidArgument whose message lists
// every invalid field by its path, e.g.
//   "optimizer.type: unknown 'adamx' (want sgd|momentum|nesterov|adagrad|adam)"
// joined with "; " when there are several.
[[nodiscard]] absl::Status ValidateJobSpec(const gradstream::v1::JobSpec& spec);

// ApplyJobDefaults + ValidateJobSpec; returns the filled spec.
absl::StatusOr<gradstream::v1::JobSpec> NormalizeJobSpec(gradstream::v1::JobSpec spec);

// The model's tensors for a defaults-filled spec (see [model tensor naming]
// in worker/model/model_spec.h): the same list the worker's model exposes.
absl::StatusOr<std::vector<TensorSpec>> JobModelTensors(const gradstream::v1::JobSpec& spec);

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_JOB_SPEC_H_
