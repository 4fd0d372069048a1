// Job spec defaults, validation and the model a spec implies; see job_spec.h.
#include "common/job/job_spec.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/codec/codec.h"
#include "common/job/codec_defaults.h"
#include "common/job/codec_policy.h"
#include "common/job/precision.h"
#include "common/optim/optimizer_options.h"
#include "common/job/shard_map.h"

namespace gradstream {

namespace {

using v1::JobSpec;

bool OneOf(const std::string& v, std::initializer_list<const char*> options) {
  for (const char* o : options) {
    if (v == o) return true;
  }
  return false;
}

bool Finite(float f) { return std::isfinite(f); }

}  // namespace

void ApplyOptimizerDefaults(v1::OptimizerSpec* opt) {
  const absl::StatusOr<OptimizerType> type = OptimizerTypeFromName(opt->type());
  const OptimizerOptions d = DefaultOptimizerOptions(type.value_or(OptimizerType::kMomentum));
  if (opt->learning_rate() == 0) opt->set_learning_rate(d.learning_rate);
  if (!type.ok()) return;  // ValidateJobSpec names the type
  opt->set_type(std::string(OptimizerTypeName(*type)));
  const bool momentum = *type == OptimizerType::kMomentum || *type == OptimizerType::kNesterov;
  const bool adagrad = *type == OptimizerType::kAdaGrad;
  const bool adam = *type == OptimizerType::kAdam;
  if (opt->momentum() == 0 && momentum) opt->set_momentum(d.momentum);
  if (opt->epsilon() == 0 && (adagrad || adam)) opt->set_epsilon(d.epsilon);
  if (opt->initial_accumulator() == 0 && adagrad) {
    opt->set_initial_accumulator(d.initial_accumulator);
  }
  if (adam) {
    if (opt->beta1() == 0) opt->set_beta1(d.beta1);
    if (opt->beta2() == 0) opt->set_beta2(d.beta2);
  }
}

void ApplyJobDefaults(JobSpec* spec) {
  auto* model = spec->mutable_model();
  if (model->type().empty()) model->set_type(spec->entrypoint().empty() ? "mlp" : "script");
  if (model->hidden_size() == 0 && model->type() == "mlp") model->add_hidden(64);

  auto* dataset = spec->mutable_dataset();
  if (dataset->source_case() == v1::DatasetSpec::SOURCE_NOT_SET) {
    dataset->mutable_synthetic();
  }
  if (dataset->has_synthetic()) {
    auto* s = dataset->mutable_synthetic();
    if (s->classes() == 0) s->set_classes(10);
    if (s->clusters_per_class() == 0) s->set_clusters_per_class(3);
    if (s->dims() == 0) s->set_dims(20);
    if (s->noise() == 0) s->set_noise(1.0f);
    if (s->seed() == 0) s->set_seed(12345);
    if (s->train_size() == 0) s->set_train_size(20000);
    if (s->test_size() == 0) s->set_test_size(5000);
  }

  // A script job's script decides its steps ([script jobs]): 0 stays.
  if (spec->steps() == 0 && spec->entrypoint().empty()) spec->set_steps(1000);
  if (spec->batch_size() == 0) spec->set_batch_size(32);

  ApplyOptimizerDefaults(spec->mutable_optimizer());

  auto* codec = spec->mutable_codec();
  // Every value from [codec defaults] in common/job/codec_defaults.h. A job
  // that names no push codec gets the measured default policy, pulls
  // included ([default policy]); one that picks its push codec by hand keeps
  // fp32 pulls unless it picks a pull codec too ([pull codec default] in
  // common/codec/published.h). Small tensors are exact under either
  // ([small tensors exact]).
  if (codec->default_codec().empty()) {
    codec->set_default_codec(kDefaultPushCodec);
    if (codec->pull_codec().empty()) codec->set_pull_codec(kDefaultPullCodec);
  }
  if (codec->min_compress_elems() == 0) codec->set_min_compress_elems(kDefaultMinCompressElems);
  if (codec->pull_codec().empty()) codec->set_pull_codec(kHandPickedPullCodec);
  if (codec->twobit_threshold() == 0) codec->set_twobit_threshold(kDefaultTwobitThreshold);
  if (codec->ternary_clip() == 0) codec->set_ternary_clip(kDefaultTernaryClip);
  if (codec->twobit_min_elems() == 0) codec->set_twobit_min_elems(kDefaultTwobitMinElems);
  if (codec->pull_min_elems() == 0) codec->set_pull_min_elems(kDefaultPullMinElems);
  if (codec->precision_bound() == 0) codec->set_precision_bound(kDefaultPrecisionBound);
  if (codec->pull_precision_bound() == 0) {
    codec->set_pull_precision_bound(PullBound(codec->precision_bound()));
  }
  if (codec->precision_max_owed() == 0) codec->set_precision_max_owed(kDefaultPrecisionMaxOwed);
  if (codec->link_choice().empty()) codec->set_link_choice(kDefaultLinkChoice ? "on" : "off");

  if (spec->workers() == 0) spec->set_workers(std::max(2u, spec->workers_min()));
  if (spec->workers_min() > 0 && spec->min_workers_timeout_s() == 0) {
    spec->set_min_workers_timeout_s(kDefaultMinWorkersTimeoutS);
  }
  if (spec->seed() == 0) spec->set_seed(1);
  if (spec->chunk_elems() == 0) spec->set_chunk_elems(kMaxChunkElems);
  if (spec->eval_every() == 0) spec->set_eval_every(100);
}

absl::Status ValidateJobSpec(const JobSpec& spec) {
  std::vector<std::string> errors;
  auto bad = [&errors](auto&&... parts) { errors.push_back(absl::StrCat(parts...)); };

  if (spec.name().size() > 128) bad("name: longer than 128 characters");

  const auto& model = spec.model();
  if (!OneOf(model.type(), {"softmax", "mlp", "cnn", "script"})) {
    bad("model.type: unknown '", model.type(), "' (want softmax|mlp|cnn|script)");
  }
  const bool script = model.type() == "script";
  if (script && spec.entrypoint().empty()) {
    bad("model.type: 'script' needs an entrypoint (the command that trains the model)");
  }
  if (!script && !spec.entrypoint().empty()) {
    bad("entrypoint: a script job defines its own model (model.type must be 'script', not '",
        model.type(), "')");
  }
  if (!script && model.tensors_size() > 0) bad("model.tensors: only for model.type 'script'");
  for (int i = 0; i < model.hidden_size(); ++i) {
    if (model.hidden(i) == 0 || model.hidden(i) > 65536) {
      bad("model.hidden[", i, "]: ", model.hidden(i), " out of range (want 1..65536)");
    }
  }

  const auto& dataset = spec.dataset();
  if (dataset.has_synthetic()) {
    const auto& s = dataset.synthetic();
    if (s.classes() < 2 || s.classes() > 10000) {
      bad("dataset.synthetic.classes: ", s.classes(), " out of range (want 2..10000)");
    }
    if (s.dims() > 1000000) bad("dataset.synthetic.dims: ", s.dims(), " too large (max 1000000)");
    if (!Finite(s.noise()) || s.noise() < 0) {
      bad("dataset.synthetic.noise: ", s.noise(), " must be finite and >= 0");
    }
  } else if (dataset.has_mnist_dir() && dataset.mnist_dir().empty()) {
    bad("dataset.mnist_dir: empty (give the directory with the four IDX files)");
  } else if (dataset.has_cifar10_dir() && dataset.cifar10_dir().empty()) {
    bad("dataset.cifar10_dir: empty (give the directory with data_batch_*.bin)");
  }

  if (spec.batch_size() > kMaxBatchSize) {
    bad("batch_size: ", spec.batch_size(), " too large (max ", kMaxBatchSize, ")");
  }

  const auto& opt = spec.optimizer();
  if (!OneOf(opt.type(), {"sgd", "momentum", "nesterov", "adagrad", "adam"})) {
    bad("optimizer.type: unknown '", opt.type(), "' (want sgd|momentum|nesterov|adagrad|adam)");
  }
  if (!Finite(opt.learning_rate()) || opt.learning_rate() <= 0) {
    bad("optimizer.learning_rate: ", opt.learning_rate(), " must be finite and > 0");
  }
  if (!Finite(opt.momentum()) || opt.momentum() < 0 || opt.momentum() >= 1) {
    bad("optimizer.momentum: ", opt.momentum(), " out of range (want 0 <= momentum < 1)");
  }
  if (!Finite(opt.epsilon()) || opt.epsilon() < 0) {
    bad("optimizer.epsilon: ", opt.epsilon(), " must be finite and >= 0");
  }
  if (!Finite(opt.initial_accumulator()) || opt.initial_accumulator() < 0) {
    bad("optimizer.initial_accumulator: ", opt.initial_accumulator(), " must be >= 0");
  }
  if (!Finite(opt.beta1()) || opt.beta1() < 0 || opt.beta1() >= 1) {
    bad("optimizer.beta1: ", opt.beta1(), " out of range (want 0 <= beta1 < 1)");
  }
  if (!Finite(opt.beta2()) || opt.beta2() < 0 || opt.beta2() >= 1) {
    bad("optimizer.beta2: ", opt.beta2(), " out of range (want 0 <= beta2 < 1)");
  }
  if (!Finite(opt.weight_decay()) || opt.weight_decay() < 0) {
    bad("optimizer.weight_decay: ", opt.weight_decay(), " must be finite and >= 0");
  }

  const auto& codec = spec.codec();
  // The codec table knows the names (common/codec/README.md, adding a codec).
  auto valid_codec = [](const std::string& c) { return CodecTypeFromName(c).ok(); };
  std::vector<std::string> codec_names;
  for (int t = 0; t < kNumCodecTypes; ++t) {
    codec_names.emplace_back(CodecTypeName(static_cast<CodecType>(t)));
  }
  const std::string want_codec = absl::StrCat(" (want ", absl::StrJoin(codec_names, "|"), ")");
  if (!valid_codec(codec.default_codec())) {
    bad("codec.default_codec: unknown '", codec.default_codec(),
        "'", want_codec);
  }
  if (!valid_codec(codec.pull_codec())) {
    bad("codec.pull_codec: unknown '", codec.pull_codec(), "'", want_codec);
  }
  if (!Finite(codec.twobit_threshold())) bad("codec.twobit_threshold: must be finite");
  if (!Finite(codec.ternary_clip())) bad("codec.ternary_clip: must be finite");
  if (!Finite(codec.precision_bound())) bad("codec.precision_bound: must be finite");
  if (!Finite(codec.pull_precision_bound())) bad("codec.pull_precision_bound: must be finite");
  if (!Finite(codec.precision_max_owed())) bad("codec.precision_max_owed: must be finite");
  if (!codec.link_choice().empty() && codec.link_choice() != "on" &&
      codec.link_choice() != "off") {
    bad("codec.link_choice: want on|off, got '", codec.link_choice(), "'");
  }

  // Override keys must name tensors of the model; only checkable when the
  // model itself is valid.
  absl::StatusOr<std::vector<TensorSpec>> tensors = JobTensors(spec);
  // A script job's tensors arrive after submission (see [script jobs]).
  const bool undeclared = script && model.tensors_size() == 0;
  if (!tensors.ok() && !undeclared) {
    std::string msg(tensors.status().message());
    if (std::find(errors.begin(), errors.end(), msg) == errors.end()) errors.push_back(msg);
  }
  std::set<std::string> names;
  if (tensors.ok()) {
    for (const auto& t : *tensors) names.insert(t.name);
  }
  for (const auto& [tensor, c] : codec.overrides()) {
    if (!valid_codec(c)) {
      bad("codec.overrides[", tensor, "]: unknown codec '", c,
          "'", want_codec);
    }
    if (tensors.ok() && names.count(tensor) == 0) {
      bad("codec.overrides[", tensor, "]: the model has no such tensor (it has ",
          absl::StrJoin(names, ","), ")");
    }
  }

  const auto mode = spec.consistency().mode();
  if (!v1::ConsistencyMode_IsValid(mode)) {
    bad("consistency.mode: unknown value ", static_cast<int>(mode), " (want SYNC|BOUNDED|ASYNC)");
  }
  if (spec.workers() > kMaxJobWorkers) {
    bad("workers: ", spec.workers(), " too many (max ", kMaxJobWorkers, ")");
  }
  if (spec.workers_min() > spec.workers()) {
    bad("workers_min: ", spec.workers_min(), " is above workers ", spec.workers(),
        " (an elastic range MIN:MAX wants 1 <= MIN <= MAX)");
  }
  if (spec.min_workers_timeout_s() > kMaxMinWorkersTimeoutS) {
    bad("min_workers_timeout_s: ", spec.min_workers_timeout_s(), " too long (max ",
        kMaxMinWorkersTimeoutS, ", a week)");
  }
  if (spec.workers_min() == 0 && spec.min_workers_timeout_s() > 0) {
    bad("min_workers_timeout_s: only for an elastic job (set workers_min)");
  }
  if (spec.chunk_elems() > kMaxChunkElems) {
    bad("chunk_elems: ", spec.chunk_elems(), " too large (max ", kMaxChunkElems,
        ": a chunk must fit one gRPC message)");
  }
  if (spec.shards() > 1024) bad("shards: ", spec.shards(), " too many (max 1024)");

  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

absl::StatusOr<JobSpec> NormalizeJobSpec(JobSpec spec) {
  ApplyJobDefaults(&spec);
  if (absl::Status s = ValidateJobSpec(spec); !s.ok()) return s;
  return spec;
}

v1::Codec PullCodecForJob(const JobSpec& spec) {
  const absl::StatusOr<CodecType> type = CodecTypeFromName(spec.codec().pull_codec());
  // CodecType and v1::Codec share their values (a static_assert in common/codec/wire.cc).
  return type.ok() ? static_cast<v1::Codec>(static_cast<int>(*type)) : v1::CODEC_NONE;
}

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
  *shape = InputShape{static_cast<int>(s.dims()), 1, 1};
  *classes = static_cast<int>(s.classes());
}

absl::StatusOr<std::vector<TensorSpec>> DeclaredTensors(const v1::ModelSpec& model) {
  if (model.tensors_size() == 0) {
    return absl::InvalidArgumentError("model.tensors: none declared (the script declares them)");
  }
  std::vector<TensorSpec> out;
  std::set<std::string> names;
  int64_t total = 0;
  for (int i = 0; i < model.tensors_size(); ++i) {
    const v1::DeclaredTensor& d = model.tensors(i);
    if (d.name().empty() || d.name().size() > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.tensors[", i, "].name: want 1..256 characters"));
    }
    if (!names.insert(d.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.tensors[", i, "].name: '", d.name(), "' declared twice"));
    }
    TensorSpec t{d.name(), 1, {}};
    if (d.table()) {
      // A table lives on the shards, never whole on a worker: it is not
      // counted in the model's limit (docs/design/sparse-tables.md).
      if (d.shape_size() != 2 || d.shape(0) <= 0 || d.shape(0) > kMaxTableRows ||
          d.shape(1) <= 0 || d.shape(1) > kMaxTableDim) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model.tensors[", i, "] '", d.name(), "': a table wants a shape [rows, dim] with rows"
            " 1..", kMaxTableRows, " and dim 1..", kMaxTableDim));
      }
      if (!std::isfinite(d.init_std()) || d.init_std() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model.tensors[", i, "] '", d.name(), "': init_std ", d.init_std(),
            " must be finite and not negative"));
      }
      t.num_elems = d.shape(0) * d.shape(1);
      t.shape = {d.shape(0), d.shape(1)};
      t.table = true;
      t.init_std = d.init_std();
      out.push_back(std::move(t));
      continue;
    }
    for (int64_t dim : d.shape()) {
      if (dim <= 0 || dim > kMaxModelElems || t.num_elems * dim > kMaxModelElems) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model.tensors[", i, "] '", d.name(), "': shape dimension ", dim,
            dim <= 0 ? " must be > 0" : " too large"));
      }
      t.num_elems *= dim;
      t.shape.push_back(dim);
    }
    total += t.num_elems;
    if (total > kMaxModelElems) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.tensors: more than the limit of ", kMaxModelElems, " parameters"));
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<ModelConfig> ModelConfigForJob(const v1::JobSpec& spec) {
  ModelConfig config;
  const std::string& type = spec.model().type();
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
  config.init_seed = spec.seed();
  if (config.num_classes < 2) {
    return absl::InvalidArgumentError("dataset: needs at least 2 classes");
  }
  return config;
}

absl::StatusOr<std::vector<TensorSpec>> JobTensors(const v1::JobSpec& spec) {
  if (spec.model().type() == "script") return DeclaredTensors(spec.model());
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

CodecPolicy CodecPolicyFromProto(const v1::CodecPolicy& proto) {
  CodecPolicy policy;
  policy.default_codec = proto.default_codec();
  policy.overrides.insert(proto.overrides().begin(), proto.overrides().end());
  policy.min_compress_elems = proto.min_compress_elems();
  policy.twobit_threshold = proto.twobit_threshold();
  policy.ternary_clip = proto.ternary_clip();
  policy.error_feedback = !proto.disable_error_feedback();
  policy.twobit_min_elems = proto.twobit_min_elems();
  if (!proto.pull_codec().empty()) policy.pull_codec = proto.pull_codec();
  policy.pull_min_elems = proto.pull_min_elems();
  // A spec stored before the bound existed has 0: the default applies.
  if (proto.precision_bound() != 0) policy.precision_bound = proto.precision_bound();
  policy.precision_warmup = proto.precision_warmup();
  if (proto.precision_max_owed() != 0) policy.precision_max_owed = proto.precision_max_owed();
  if (!proto.link_choice().empty()) policy.link_choice = proto.link_choice() == "on";
  return policy;
}

}  // namespace gradstream
