#include "worker/trainer/job_setup.h"

#include "absl/strings/str_cat.h"
#include "common/job/codec_policy.h"
#include "common/job/job_spec.h"
#include "common/status.h"
#include "worker/data/cifar10.h"
#include "worker/data/mnist.h"
#include "worker/data/synthetic.h"

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
  const v1::SyntheticData& s = spec.synthetic();
  SyntheticConfig c;
  c.num_classes = static_cast<int>(s.classes());
  c.clusters_per_class = static_cast<int>(s.clusters_per_class());
  c.dims = static_cast<int>(s.dims());
  c.noise = s.noise();
  c.seed = s.seed();
  c.num_train = s.train_size();
  c.num_test = s.test_size();
  return GenerateSynthetic(c);
}

}  // namespace

absl::StatusOr<TrainSetup> LoadTrainSetup(const v1::JobSpec& assigned) {
  // The coordinator sent a normalized spec; normalizing again at this entry
  // point costs nothing and keeps [normalized spec] true for a spec from
  // anywhere else.
  GS_ASSIGN_OR_RETURN(const v1::JobSpec spec, NormalizeJobSpec(assigned));
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
  setup.codec = CodecPolicyFromProto(spec.codec());
  setup.batch_size = static_cast<int>(spec.batch_size());
  setup.steps = spec.steps();
  setup.seed = setup.model.init_seed;
  setup.eval_every = spec.eval_every();
  return setup;
}

}  // namespace gradstream
