#include "common/job/job_spec.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gradstream {
namespace {

std::vector<std::pair<std::string, int64_t>> Flat(const std::vector<TensorSpec>& t) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& x : t) out.emplace_back(x.name, x.num_elems);
  return out;
}

v1::JobSpec Spec(const std::string& type, std::vector<uint32_t> hidden = {}) {
  v1::JobSpec s;
  s.mutable_model()->set_type(type);
  for (uint32_t h : hidden) s.mutable_model()->add_hidden(h);
  ApplyJobDefaults(&s);  // consumers see normalized specs (see [normalized spec])
  return s;
}

TEST(JobTensors, Softmax) {
  auto t = JobTensors(Spec("softmax"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Flat(*t), (decltype(Flat(*t)){{"fc.weight", 200}, {"fc.bias", 10}}));
}

TEST(JobTensors, MlpLayersInForwardOrderWeightBeforeBias) {
  auto t = JobTensors(Spec("mlp", {64, 32}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Flat(*t), (decltype(Flat(*t)){{"fc1.weight", 20 * 64},
                                          {"fc1.bias", 64},
                                          {"fc2.weight", 64 * 32},
                                          {"fc2.bias", 32},
                                          {"fc3.weight", 32 * 10},
                                          {"fc3.bias", 10}}));
}

TEST(JobTensors, CnnOnMnistShapeWithoutLoadingData) {
  v1::JobSpec s = Spec("cnn");
  s.mutable_dataset()->set_mnist_dir("/nonexistent");  // never read
  auto t = JobTensors(s);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Flat(*t), (decltype(Flat(*t)){{"conv1.weight", 6 * 1 * 25},
                                          {"conv1.bias", 6},
                                          {"conv2.weight", 16 * 6 * 25},
                                          {"conv2.bias", 16},
                                          {"fc1.weight", 16 * 4 * 4 * 120},
                                          {"fc1.bias", 120},
                                          {"fc2.weight", 120 * 10},
                                          {"fc2.bias", 10}}));
}

TEST(JobTensors, MatchesTheModelTheWorkerBuilds) {
  // The coordinator's shard map and the worker's model come from one place.
  auto config = ModelConfigForJob(Spec("mlp", {48}));
  ASSERT_TRUE(config.ok());
  auto direct = ModelParams(*config);
  auto via_job = JobTensors(Spec("mlp", {48}));
  ASSERT_TRUE(direct.ok() && via_job.ok());
  EXPECT_EQ(Flat(*direct), Flat(*via_job));
}

TEST(JobTensors, ErrorsNameTheField) {
  EXPECT_EQ(JobTensors(Spec("rnn")).status().message(),
            "model.type: unknown 'rnn' (want softmax|mlp|cnn)");
  auto cnn = JobTensors(Spec("cnn"));  // synthetic 20-dim vectors are no images
  EXPECT_TRUE(absl::StartsWith(cnn.status().message(), "model.type: 'cnn' does not fit"))
      << cnn.status();
  EXPECT_EQ(JobTensors(Spec("mlp", {64, 0})).status().message(),
            "model.hidden[1]: must be > 0");
  auto huge = JobTensors(Spec("mlp", {60000, 60000}));
  EXPECT_FALSE(huge.ok());
  v1::JobSpec one_class = Spec("mlp");
  one_class.mutable_dataset()->mutable_synthetic()->set_classes(1);
  EXPECT_EQ(JobTensors(one_class).status().message(), "dataset: needs at least 2 classes");
}

}  // namespace
}  // namespace gradstream
