#include "worker/trainer/job_setup.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/client/shard_map_proto.h"
#include "worker/data/cifar10.h"
#include "worker/data/mnist.h"
#include "worker/data/synthetic.h"
#include "worker/model/job_model.h"

namespace gradstream {
namespace {

absl::StatusOr<TrainTest> LoadData(const v1::DatasetSpec& spec) {
  switch (spec.source_case()) {
    case v1::DatasetSpec::kMnistDir:
      return LoadMnist(spec.mnist_dir());
    case v1::DatasetSpec::kCifar10Dir:
      return LoadCifar10(spec.cifar10_dir());
    case v1::DatasetSpec::kSynthetic:
    case v1::DatasetSpec::SOURCE_NOT_SET:
      break;
  }
  // Zero fields keep SyntheticConfig's defaults (the job.proto defaults).
  const v1::SyntheticData& s = spec.synthetic();
  SyntheticConfig c;
  if (s.classes()) c.num_classes = static_cast<int>(s.classes());
  if (s.clusters_per_class()) c.clusters_per_class = static_cast<int>(s.clusters_per_class());
  if (s.dims()) c.dims = static_cast<int>(s.dims());
  if (s.noise() > 0) c.noise = s.noise();
  if (s.seed()) c.seed = s.seed();
  if (s.train_size()) c.num_train = s.train_size();
  if (s.test_size()) c.num_test = s.test_size();
  return GenerateSynthetic(c);
}

}  // namespace

absl::StatusOr<TrainSetup> LoadTrainSetup(const v1::JobSpec& spec) {
  TrainSetup setup;
  GS_ASSIGN_OR_RETURN(setup.model, ModelConfigForJob(spec));
  GS_ASSIGN_OR_RETURN(setup.data, LoadData(spec.dataset()));
  if (setup.data.train.shape != setup.model.input ||
      setup.data.train.num_classes > setup.model.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset has shape ", ShapeString(setup.data.train.shape), " and ",
        setup.data.train.num_classes, " classes; the job's model expects ",
        ShapeString(setup.model.input), " and ", setup.model.num_classes));
  }
  setup.codec = client::CodecPolicyFromProto(spec.codec());
  setup.batch_size = spec.batch_size() ? static_cast<int>(spec.batch_size()) : 32;
  setup.steps = spec.steps() ? spec.steps() : 1000;
  setup.seed = setup.model.init_seed;
  setup.eval_every = spec.eval_every() ? spec.eval_every() : 100;
  return setup;
}

}  // namespace gradstream
