#include "common/job/job_spec.h"

#include <limits>

#include "absl/strings/match.h"
#include "common/job/codec_defaults.h"
#include "common/job/codec_policy.h"
#include "common/optim/optimizer_options.h"
#include "gtest/gtest.h"

namespace gradstream {
namespace {

using v1::JobSpec;

TEST(JobSpec, DefaultsFillEveryZeroField) {
  JobSpec spec;
  ApplyJobDefaults(&spec);
  EXPECT_EQ(spec.model().type(), "mlp");
  ASSERT_EQ(spec.model().hidden_size(), 1);
  EXPECT_EQ(spec.model().hidden(0), 64u);
  EXPECT_TRUE(spec.dataset().has_synthetic());
  EXPECT_EQ(spec.dataset().synthetic().dims(), 20u);
  EXPECT_EQ(spec.steps(), 1000u);
  EXPECT_EQ(spec.batch_size(), 32u);
  EXPECT_EQ(spec.optimizer().type(), "momentum");
  EXPECT_FLOAT_EQ(spec.optimizer().momentum(), 0.9f);
  EXPECT_EQ(spec.codec().default_codec(), kDefaultPushCodec);
  EXPECT_FLOAT_EQ(spec.codec().twobit_threshold(), kDefaultTwobitThreshold);
  EXPECT_FLOAT_EQ(spec.codec().ternary_clip(), kDefaultTernaryClip);
  EXPECT_EQ(spec.codec().twobit_min_elems(), kDefaultTwobitMinElems);
  EXPECT_EQ(spec.codec().pull_codec(), kDefaultPullCodec);
  EXPECT_EQ(spec.codec().pull_min_elems(), kDefaultPullMinElems);
  EXPECT_EQ(spec.codec().min_compress_elems(), kDefaultMinCompressElems);
  EXPECT_FLOAT_EQ(spec.codec().precision_bound(), kDefaultPrecisionBound);
  EXPECT_FLOAT_EQ(spec.codec().pull_precision_bound(), kDefaultPrecisionBound / 2);
  EXPECT_EQ(spec.codec().precision_warmup(), kDefaultPrecisionWarmup);
  EXPECT_EQ(spec.workers(), 2u);
  EXPECT_EQ(spec.chunk_elems(), 262144u);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
}

// [small tensors exact] holds under a codec picked by hand too (the word model
// diverged without it, docs/design/precision-control.md); 1 compresses every
// tensor.
TEST(JobSpec, SmallTensorsAreExactUnderEveryCodec) {
  JobSpec hand;
  hand.mutable_codec()->set_default_codec("twobit");
  ApplyJobDefaults(&hand);
  EXPECT_EQ(hand.codec().min_compress_elems(), kDefaultMinCompressElems);
  EXPECT_EQ(ResolveCodec(CodecPolicyFromProto(hand.codec()), "b", kDefaultMinCompressElems - 1),
            "none");
  JobSpec all;
  all.mutable_codec()->set_min_compress_elems(1);
  ApplyJobDefaults(&all);
  EXPECT_EQ(all.codec().default_codec(), kDefaultPushCodec);
  EXPECT_EQ(all.codec().min_compress_elems(), 1u);
}

TEST(JobSpec, ElasticRangeDefaultsAndLimits) {
  JobSpec spec;
  spec.set_workers_min(1);
  spec.set_workers(4);
  auto r = NormalizeJobSpec(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->min_workers_timeout_s(), kDefaultMinWorkersTimeoutS);
  // MIN alone: MAX is at least MIN.
  spec.clear_workers();
  spec.set_workers_min(3);
  r = NormalizeJobSpec(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->workers(), 3u);
  // Not elastic: no deadline.
  r = NormalizeJobSpec(JobSpec());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->min_workers_timeout_s(), 0u);

  spec.set_workers_min(5);
  spec.set_workers(2);
  EXPECT_EQ(NormalizeJobSpec(spec).status().message(),
            "workers_min: 5 is above workers 2 (an elastic range MIN:MAX wants 1 <= MIN <= MAX)");
  spec.set_workers_min(1);
  spec.set_workers(1000000);
  EXPECT_EQ(NormalizeJobSpec(spec).status().message(), "workers: 1000000 too many (max 4096)");
  spec.set_workers(4);
  spec.set_min_workers_timeout_s(UINT32_MAX);
  EXPECT_TRUE(absl::StrContains(NormalizeJobSpec(spec).status().message(),
                                "min_workers_timeout_s: 4294967295 too long"));
  spec.set_workers_min(0);
  spec.set_min_workers_timeout_s(5);
  EXPECT_EQ(NormalizeJobSpec(spec).status().message(),
            "min_workers_timeout_s: only for an elastic job (set workers_min)");
}

// [default policy]: the measured pull codec comes with the default push
// codec; a push codec chosen by hand keeps fp32 pulls unless a pull codec is
// chosen too, and a pull codec chosen alone is kept. Normalizing twice
// changes nothing.
TEST(JobSpec, DefaultPullsComeWithTheDefaultPushCodecOnly) {
  JobSpec by_hand;
  by_hand.mutable_codec()->set_default_codec("twobit");
  auto r = NormalizeJobSpec(by_hand);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->codec().pull_codec(), "none");

  JobSpec pull_only;
  pull_only.mutable_codec()->set_pull_codec("twobit");
  r = NormalizeJobSpec(pull_only);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->codec().default_codec(), kDefaultPushCodec);
  EXPECT_EQ(r->codec().pull_codec(), "twobit");

  auto once = NormalizeJobSpec(JobSpec());
  ASSERT_TRUE(once.ok()) << once.status();
  auto twice = NormalizeJobSpec(*once);
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_EQ(twice->codec().SerializeAsString(), once->codec().SerializeAsString());
  EXPECT_EQ(twice->codec().pull_codec(), kDefaultPullCodec);
}

// The spec is normalized from DefaultOptimizerOptions (common/optim), the
// numbers the shards' math would use for an option never set.
TEST(JobSpec, OptimizerDefaultsAreTheOptimizersOwnPerType) {
  for (const char* name : {"", "sgd", "momentum", "nesterov", "adagrad", "adam"}) {
    JobSpec spec;
    spec.mutable_optimizer()->set_type(name);
    auto r = NormalizeJobSpec(spec);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    const v1::OptimizerSpec& o = r->optimizer();
    absl::StatusOr<OptimizerType> type = OptimizerTypeFromName(name);
    ASSERT_TRUE(type.ok());
    const OptimizerOptions d = DefaultOptimizerOptions(*type);
    EXPECT_EQ(o.type(), OptimizerTypeName(*type));
    EXPECT_FLOAT_EQ(o.learning_rate(), d.learning_rate) << name;
    const bool momentum = *type == OptimizerType::kMomentum || *type == OptimizerType::kNesterov;
    EXPECT_FLOAT_EQ(o.momentum(), momentum ? d.momentum : 0) << name;
    const bool eps = *type == OptimizerType::kAdaGrad || *type == OptimizerType::kAdam;
    EXPECT_FLOAT_EQ(o.epsilon(), eps ? d.epsilon : 0) << name;
  }
  EXPECT_FLOAT_EQ(DefaultOptimizerOptions(OptimizerType::kAdam).epsilon, 1e-8f);
  EXPECT_FLOAT_EQ(DefaultOptimizerOptions(OptimizerType::kAdaGrad).epsilon, 1e-7f);
  EXPECT_FLOAT_EQ(DefaultOptimizerOptions(OptimizerType::kAdaGrad).initial_accumulator, 0.1f);
}

TEST(JobSpec, UnknownOptimizerIsNamed) {
  JobSpec spec;
  spec.mutable_optimizer()->set_type("adamx");
  auto r = NormalizeJobSpec(spec);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "optimizer.type: unknown 'adamx' (want sgd|momentum|nesterov|adagrad|adam)");
}

TEST(JobSpec, EveryInvalidFieldIsListed) {
  JobSpec spec;
  spec.mutable_model()->set_type("transformer");
  spec.mutable_codec()->set_default_codec("fourbit");
  spec.mutable_optimizer()->set_learning_rate(-1);
  spec.set_chunk_elems(1u << 30);
  auto r = NormalizeJobSpec(spec);
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  EXPECT_TRUE(absl::StrContains(msg, "model.type: unknown 'transformer'")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "codec.default_codec: unknown 'fourbit'")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "optimizer.learning_rate")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "chunk_elems")) << msg;
}

TEST(JobSpec, OverrideMustNameAModelTensor) {
  JobSpec spec;
  (*spec.mutable_codec()->mutable_overrides())["fc9.w"] = "none";
  (*spec.mutable_codec()->mutable_overrides())["fc1.bias"] = "bogus";
  auto r = NormalizeJobSpec(spec);
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  EXPECT_TRUE(absl::StrContains(msg, "codec.overrides[fc9.w]: the model has no such tensor"))
      << msg;
  EXPECT_TRUE(absl::StrContains(msg, "codec.overrides[fc1.bias]: unknown codec 'bogus'")) << msg;
}

TEST(JobSpec, CnnNeedsImages) {
  JobSpec spec;
  spec.mutable_model()->set_type("cnn");
  auto r = NormalizeJobSpec(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StartsWith(r.status().message(), "model.type: 'cnn' does not fit"))
      << r.status();
  spec.mutable_dataset()->set_mnist_dir("/data/mnist");
  EXPECT_TRUE(NormalizeJobSpec(spec).ok());
}

TEST(JobSpec, ScriptJobDefinesItsOwnModel) {
  JobSpec spec;
  spec.set_entrypoint("python3 train.py");
  auto r = NormalizeJobSpec(spec);
  ASSERT_TRUE(r.ok()) << r.status();  // no tensors yet: the script declares them later
  EXPECT_EQ(r->model().type(), "script");
  EXPECT_EQ(r->steps(), 0u);  // the script decides
  EXPECT_FALSE(JobTensors(*r).ok());

  auto* t = spec.mutable_model()->add_tensors();
  t->set_name("fc.weight");
  t->add_shape(3);
  t->add_shape(4);
  spec.mutable_model()->add_tensors()->set_name("scale");  // a scalar
  auto tensors = JobTensors(*NormalizeJobSpec(spec));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 2u);
  EXPECT_EQ((*tensors)[0].num_elems, 12);
  EXPECT_EQ((*tensors)[1].num_elems, 1);

  JobSpec mixed;
  mixed.mutable_model()->set_type("mlp");
  mixed.set_entrypoint("python3 train.py");
  EXPECT_TRUE(absl::StrContains(NormalizeJobSpec(mixed).status().message(),
                                "entrypoint: a script job defines its own model"));
  JobSpec no_command;
  no_command.mutable_model()->set_type("script");
  EXPECT_TRUE(absl::StrContains(NormalizeJobSpec(no_command).status().message(),
                                "'script' needs an entrypoint"));
}

TEST(JobSpec, DeclaredTensorsErrorsNameTheTensor) {
  v1::ModelSpec model;
  model.set_type("script");
  EXPECT_EQ(DeclaredTensors(model).status().message(),
            "model.tensors: none declared (the script declares them)");
  auto* a = model.add_tensors();
  a->set_name("w");
  a->add_shape(0);
  EXPECT_EQ(DeclaredTensors(model).status().message(),
            "model.tensors[0] 'w': shape dimension 0 must be > 0");
  a->set_shape(0, 2);
  model.add_tensors()->set_name("w");
  EXPECT_EQ(DeclaredTensors(model).status().message(),
            "model.tensors[1].name: 'w' declared twice");
}

TEST(JobSpec, PrecisionBoundMustBeFiniteAndReachesThePolicy) {
  v1::JobSpec spec;
  ApplyJobDefaults(&spec);
  spec.mutable_codec()->set_precision_bound(-1.0f);  // measure only
  spec.mutable_codec()->set_precision_warmup(50);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  const CodecPolicy policy = CodecPolicyFromProto(spec.codec());
  EXPECT_FLOAT_EQ(policy.precision_bound, -1.0f);
  EXPECT_EQ(policy.precision_warmup, 50u);
  spec.mutable_codec()->set_precision_bound(std::numeric_limits<float>::infinity());
  const absl::Status s = ValidateJobSpec(spec);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("precision_bound"), std::string::npos) << s;
}

// A pull bound of its own survives the defaults; without one, pulls get half
// the job's bound, whatever that bound is.
TEST(JobSpec, PullPrecisionBoundIsItsOwnOrHalfTheBound) {
  v1::JobSpec own;
  own.mutable_codec()->set_pull_precision_bound(2.0f);
  ApplyJobDefaults(&own);
  EXPECT_FLOAT_EQ(own.codec().pull_precision_bound(), 2.0f);
  EXPECT_FLOAT_EQ(own.codec().precision_bound(), kDefaultPrecisionBound);

  v1::JobSpec half;
  half.mutable_codec()->set_precision_bound(6.0f);
  ApplyJobDefaults(&half);
  EXPECT_FLOAT_EQ(half.codec().pull_precision_bound(), 3.0f);

  own.mutable_codec()->set_pull_precision_bound(std::numeric_limits<float>::quiet_NaN());
  const absl::Status s = ValidateJobSpec(own);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pull_precision_bound"), std::string::npos) << s;
}

TEST(JobSpec, LinkChoiceIsOnOrOffAndReachesThePolicy) {
  v1::JobSpec spec;
  ApplyJobDefaults(&spec);
  EXPECT_EQ(spec.codec().link_choice(), kDefaultLinkChoice ? "on" : "off");
  EXPECT_EQ(CodecPolicyFromProto(spec.codec()).link_choice, kDefaultLinkChoice);
  spec.mutable_codec()->set_link_choice("on");
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  EXPECT_TRUE(CodecPolicyFromProto(spec.codec()).link_choice);
  spec.mutable_codec()->set_link_choice("yes");
  const absl::Status s = ValidateJobSpec(spec);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("codec.link_choice: want on|off, got 'yes'"), std::string::npos) << s;
}

}  // namespace
}  // namespace gradstream
