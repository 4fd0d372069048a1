#include "worker/model/job_model.h"

#include "absl/strings/str_cat.h"

namespace gradstream {

void DatasetShape(const v1::DatasetSpec& dataset, InputShape* shape, int* classes) {
  switch (dataset.source_case()) {
    case v1::DatasetSpec::kMnistDir:
      *shape = InputShape{1, 28, 28};
      *classes = 10;
      return;
    case v1::DatasetSpec::kCifar10Dir:
      *shape = InputShape{3, 32, 32};
      *classes = 10;
      return;
    case v1::DatasetSpec::kSynthetic:
    case v1::DatasetSpec::SOURCE_NOT_SET:
      break;
  }
  const v1::SyntheticData& s = dataset.synthetic();
  *shape = InputShape{s.dims() ? static_cast<int>(s.dims()) : 20, 1, 1};
  *classes = s.classes() ? static_cast<int>(s.classes()) : 10;
}

absl::StatusOr<ModelConfig> ModelConfigForJob(const v1::JobSpec& spec) {
  ModelConfig config;
  const std::string type = spec.model().type().empty() ? "mlp" : spec.model().type();
  absl::StatusOr<ModelType> t = ModelTypeFromName(type);
  if (!t.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.type: unknown '", type, "' (want softmax|mlp|cnn)"));
  }
  config.type = *t;
  for (int i = 0; i < spec.model().hidden_size(); ++i) {
    if (spec.model().hidden(i) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("model.hidden[", i, "]: must be > 0"));
    }
  }
  if (spec.model().hidden_size() > 0) {
    if (config.type == ModelType::kCnn) {
      config.cnn.fc_hidden = static_cast<int>(spec.model().hidden(0));
    } else {
      config.hidden.assign(spec.model().hidden().begin(), spec.model().hidden().end());
    }
  }
  DatasetShape(spec.dataset(), &config.input, &config.num_classes);
  config.init_seed = spec.seed() ? spec.seed() : 1;
  if (config.num_classes < 2) return absl::InvalidArgumentError("dataset: needs at least 2 classes");
  return config;
}

absl::StatusOr<std::vector<TensorSpec>> ModelParamsForJob(const v1::JobSpec& spec) {
  absl::StatusOr<ModelConfig> config = ModelConfigForJob(spec);
  if (!config.ok()) return config.status();
  absl::StatusOr<std::vector<TensorSpec>> params = ModelParams(*config);
  if (!params.ok()) {
    const InputShape& in = config->input;
    return absl::InvalidArgumentError(absl::StrCat(
        "model.type: '", std::string(ModelTypeName(config->type)), "' does not fit the dataset's ",
        in.channels, "x", in.height, "x", in.width, " inputs: ", params.status().message(),
        config->type == ModelType::kCnn
            ? " (a cnn needs images: dataset.mnist_dir or dataset.cifar10_dir)"
            : ""));
  }
  int64_t elems = 0;
  for (const TensorSpec& t : *params) elems += t.num_elems;
  if (elems > kMaxModelElems) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: ", elems, " parameters, more than the limit of ", kMaxModelElems));
  }
  return params;
}

}  // namespace gradstream
