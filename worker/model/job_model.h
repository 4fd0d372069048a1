// The model a job spec describes. Both the coordinator (to build the shard
// map) and the worker (to build the model) derive it here, from the spec
// alone -- the dataset's shape is known from its kind without loading it.
#ifndef GRADSTREAM_WORKER_MODEL_JOB_MODEL_H_
#define GRADSTREAM_WORKER_MODEL_JOB_MODEL_H_

#include "absl/status/statusor.h"
#include "job.pb.h"
#include "worker/model/model_spec.h"

namespace gradstream {

// Input shape and class count of a dataset spec: synthetic = dims x 1 x 1
// (defaults 20 dims, 10 classes), MNIST = 1 x 28 x 28, CIFAR-10 = 3 x 32 x 32
// (10 classes each).
void DatasetShape(const v1::DatasetSpec& dataset, InputShape* shape, int* classes);

// ModelConfig for a job: model.type (default "mlp"), model.hidden (MLP widths,
// default [64]; for the CNN, hidden[0] is the fully connected width), the
// dataset's shape, and the job seed as init seed. InvalidArgument naming the
// field for an unknown model type or a zero width.
absl::StatusOr<ModelConfig> ModelConfigForJob(const v1::JobSpec& spec);

// The tensors of the job's model, in shard-map order (what the coordinator
// splits into chunks and what the worker's model exposes). InvalidArgument
// naming the field: an unknown type, fewer than 2 classes, a CNN on inputs it
// does not fit, more than kMaxModelElems parameters.
inline constexpr int64_t kMaxModelElems = int64_t{1} << 28;
absl::StatusOr<std::vector<TensorSpec>> ModelParamsForJob(const v1::JobSpec& spec);

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_MODEL_JOB_MODEL_H_
