// The job description: defaults, validation, and what a spec implies (the
// model config and its tensor list).
//
// NOTE: [normalized spec] proto3 scalars have no presence, so 0 / "" in a
// JobSpec mean "use the default". The defaults written in proto/job.proto are
// applied here and nowhere else, by NormalizeJobSpec at each entry point of a
// spec into a process: the coordinator on submit (the CLI too, for early
// errors), the worker when it is assigned a job, the shard on CreateJob (its
// optimizer part, ApplyOptimizerDefaults). Everything downstream — the shard
// map, the codec policy, the optimizer, the models, the data loaders —
// trusts a normalized spec and applies no default of its own. Normalizing is
// idempotent, so a spec normalized twice is unchanged.
#ifndef GRADSTREAM_COMMON_JOB_JOB_SPEC_H_
#define GRADSTREAM_COMMON_JOB_JOB_SPEC_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job/codec_policy.h"
#include "common/job/model.h"
#include "job.pb.h"
#include "ps.pb.h"

namespace gradstream {

// Limits a valid spec stays within.
inline constexpr uint32_t kMaxJobWorkers = 4096;
inline constexpr uint32_t kMaxBatchSize = 1 << 20;
inline constexpr int64_t kMaxModelElems = int64_t{1} << 28;
// Rows of one table (docs/design/sparse-tables.md); tables are not counted
// in kMaxModelElems (they live on the shards).
inline constexpr int64_t kMaxTableRows = int64_t{1} << 40;
// How long an elastic job may stay below its workers_min (see [elastic
// jobs] in server/coordinator/membership_planner.h), by default and at most.
inline constexpr uint32_t kDefaultMinWorkersTimeoutS = 600;
inline constexpr uint32_t kMaxMinWorkersTimeoutS = 7 * 24 * 3600;

// Fills every unset (zero) field of `spec` with its documented default.
void ApplyJobDefaults(v1::JobSpec* spec);
// The optimizer part of ApplyJobDefaults, for the shard's CreateJob, which
// receives the optimizer spec alone.
void ApplyOptimizerDefaults(v1::OptimizerSpec* optimizer);

// Checks a defaults-filled spec. OK, or InvalidArgument whose message lists
// every invalid field by its path, e.g.
//   "optimizer.type: unknown 'adamx' (want sgd|momentum|nesterov|adagrad|adam)"
// joined with "; " when there are several.
[[nodiscard]] absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// ApplyJobDefaults + ValidateJobSpec; returns the normalized spec.
absl::StatusOr<v1::JobSpec> NormalizeJobSpec(v1::JobSpec spec);

// The pull codec of a normalized spec as CreateJobRequest.pull_codec carries
// it (see [pull codec] in common/codec/published.h).
v1::Codec PullCodecForJob(const v1::JobSpec& spec);

// The typed policy of a normalized spec's codec field.
CodecPolicy CodecPolicyFromProto(const v1::CodecPolicy& proto);

// Input shape and class count of a normalized dataset spec: synthetic =
// dims x 1 x 1, MNIST = 1 x 28 x 28, CIFAR-10 = 3 x 32 x 32 (10 classes each).
void DatasetShape(const v1::DatasetSpec& dataset, InputShape* shape, int* classes);

// ModelConfig of a normalized spec: model.type, model.hidden (MLP widths; for
// the CNN, hidden[0] is the fully connected width), the dataset's shape, and
// the job seed as init seed. InvalidArgument naming the field for an unknown
// model type or a zero width.
absl::StatusOr<ModelConfig> ModelConfigForJob(const v1::JobSpec& spec);

// The tensors a script job's model declared (ModelSpec.tensors), in order.
// InvalidArgument naming the field: none declared, an empty or repeated
// name, a non-positive dimension, more than kMaxModelElems parameters.
absl::StatusOr<std::vector<TensorSpec>> DeclaredTensors(const v1::ModelSpec& model);

// The tensors of a normalized spec's model, in shard-map order (what the
// coordinator splits into chunks and what the worker's model exposes; see
// [model tensor naming]; a script job's: DeclaredTensors). InvalidArgument
// naming the field: an unknown type,
// fewer than 2 classes, a CNN on inputs it does not fit, more than
// kMaxModelElems parameters.
absl::StatusOr<std::vector<TensorSpec>> JobTensors(const v1::JobSpec& spec);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_JOB_SPEC_H_
