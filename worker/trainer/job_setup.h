// Turns a job spec (normalized here, see [normalized spec]) into the typed
// pieces a worker trains with: the model config, the datasets and the codec
// policy. Filled once when a worker is assigned to a job.
#ifndef GRADSTREAM_WORKER_TRAINER_JOB_SETUP_H_
#define GRADSTREAM_WORKER_TRAINER_JOB_SETUP_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/job/codec_policy.h"
#include "common/job/model.h"
#include "job.pb.h"
#include "worker/data/dataset.h"

namespace gradstream {

struct TrainSetup {
  ModelConfig model;
  TrainTest data;
  CodecPolicy codec;
  int batch_size = 32;
  uint64_t steps = 0;
  uint64_t seed = 1;
  uint64_t eval_every = 100;
};

// Loads the dataset the spec names (synthetic data is generated; MNIST and
// CIFAR-10 are read from the directory given, nothing is downloaded) and
// derives the model config from it. InvalidArgument for an unknown model
// type, NotFound / InvalidArgument from the loaders for missing or bad files.
absl::StatusOr<TrainSetup> LoadTrainSetup(const v1::JobSpec& assigned);

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_TRAINER_JOB_SETUP_H_
