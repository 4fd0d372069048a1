// GPU model against the CPU reference (LABELS gpu). Skips only when no CUDA
// device is present; a build without the GPU backend does not build this.
#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data/rng.h"
#include "worker/data/synthetic.h"
#include "worker/model/model.h"

namespace gradstream {
namespace {

class GpuModelTest : public ::testing::TestWithParam<ModelType> {
 protected:
  void SetUp() override {
    if (NumGpuDevices() == 0) GTEST_SKIP() << "no CUDA device is present";
  }
};

ModelConfig ConfigFor(ModelType type) {
  ModelConfig c;
  c.type = type;
  if (type == ModelType::kMlp) c.hidden = {64, 32};
  if (type == ModelType::kCnn) c.input = {1, 28, 28};  // MNIST-shaped LeNet
  return c;
}

void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu, const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  float scale = 0;
  for (float v : cpu) scale = std::max(scale, std::abs(v));
  for (size_t j = 0; j < cpu.size(); ++j) {
    ASSERT_NEAR(gpu[j], cpu[j], 1e-5f + 1e-3f * scale) << what << "[" << j << "]";
  }
}

TEST_P(GpuModelTest, ForwardBackwardMatchesCpu) {
  const ModelConfig c = ConfigFor(GetParam());
  auto cpu = CreateModel(c, Device::kCpu);
  auto gpu = CreateModel(c, Device::kGpu);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_NE((*gpu)->stream(), nullptr);

  SplitMix64 rng(21);
  const int batch = 32;
  std::vector<float> x(batch * c.input.elems());
  for (float& v : x) v = static_cast<float>(rng.Normal());
  std::vector<int32_t> y(batch);
  for (int32_t& v : y) v = static_cast<int32_t>(rng.UniformInt(c.num_classes));

  std::vector<int> cpu_order, gpu_order;
  (*cpu)->set_grad_ready_callback([&](int i) { cpu_order.push_back(i); });
  (*gpu)->set_grad_ready_callback([&](int i) { gpu_order.push_back(i); });
  StepStats cs, gs;
  ASSERT_TRUE((*cpu)->ForwardBackward(x.data(), y.data(), batch, &cs).ok());
  const absl::Status st = (*gpu)->ForwardBackward(x.data(), y.data(), batch, &gs);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE((*gpu)->Synchronize().ok());
  EXPECT_NEAR(gs.loss, cs.loss, 1e-4 * std::max(1.0, cs.loss));
  EXPECT_EQ(gs.correct, cs.correct);
  EXPECT_EQ(gpu_order, cpu_order);
  for (int i = 0; i < (*cpu)->num_tensors(); ++i) {
    const TensorSpec& t = (*cpu)->params()[i];
    std::vector<float> gc(t.num_elems), gg(t.num_elems), pc(t.num_elems), pg(t.num_elems);
    ASSERT_TRUE((*cpu)->GetGrad(i, gc).ok());
    ASSERT_TRUE((*gpu)->GetGrad(i, gg).ok());
    ExpectClose(gg, gc, t.name.c_str());
    ASSERT_TRUE((*cpu)->GetParam(i, pc).ok());
    ASSERT_TRUE((*gpu)->GetParam(i, pg).ok());
    EXPECT_EQ(pg, pc) << "initial " << t.name << " differs";
  }
}

TEST_P(GpuModelTest, EvaluateMatchesCpuAndSetParamRoundTrips) {
  ModelConfig c = ConfigFor(GetParam());
  Dataset d;
  d.num_classes = c.num_classes;
  d.shape = c.input;
  SplitMix64 rng(5);
  const int n = 300;  // not a multiple of the evaluation batch
  d.features.resize(n * c.input.elems());
  for (float& v : d.features) v = static_cast<float>(rng.Normal());
  for (int i = 0; i < n; ++i) d.labels.push_back(static_cast<int32_t>(rng.UniformInt(10)));
  auto cpu = CreateModel(c, Device::kCpu);
  auto gpu = CreateModel(c, Device::kGpu);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  // Load different weights into both through SetParam.
  for (int i = 0; i < (*cpu)->num_tensors(); ++i) {
    std::vector<float> p((*cpu)->params()[i].num_elems);
    for (float& v : p) v = 0.1f * static_cast<float>(rng.Normal());
    ASSERT_TRUE((*cpu)->SetParam(i, p).ok());
    ASSERT_TRUE((*gpu)->SetParam(i, p).ok());
    std::vector<float> back(p.size());
    ASSERT_TRUE((*gpu)->GetParam(i, back).ok());
    EXPECT_EQ(back, p);
  }
  EvalStats ce, ge;
  ASSERT_TRUE((*cpu)->Evaluate(d, &ce).ok());
  const absl::Status st = (*gpu)->Evaluate(d, &ge);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_NEAR(ge.loss, ce.loss, 1e-4 * std::max(1.0, ce.loss));
  EXPECT_NEAR(ge.accuracy, ce.accuracy, 2.0 / n);  // a near-tie may flip
  EXPECT_EQ(ge.examples, n);
}

INSTANTIATE_TEST_SUITE_P(AllModels, GpuModelTest,
                         ::testing::Values(ModelType::kSoftmax, ModelType::kMlp, ModelType::kCnn),
                         [](const auto& info) { return std::string(ModelTypeName(info.param)); });

// Plain local SGD through host copies (in the system the optimizer runs on
// the server): the GPU path must learn the synthetic task like the CPU one.
TEST(GpuTraining, MlpLearnsTheSyntheticClusters) {
  if (NumGpuDevices() == 0) GTEST_SKIP() << "no CUDA device is present";
  SyntheticConfig sc;
  sc.num_train = 8000;
  sc.num_test = 2000;
  auto data = GenerateSynthetic(sc);
  ASSERT_TRUE(data.ok());
  auto m = CreateModel(ModelConfig{}, Device::kGpu);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<int64_t> all(data->train.num_examples());
  for (int64_t i = 0; i < data->train.num_examples(); ++i) all[i] = i;
  auto it = MinibatchIterator::Create(&data->train, all, 32, 7, 0);
  ASSERT_TRUE(it.ok());
  std::vector<std::vector<float>> p, g;
  for (int i = 0; i < (*m)->num_tensors(); ++i) {
    p.emplace_back((*m)->params()[i].num_elems);
    g.emplace_back((*m)->params()[i].num_elems);
    ASSERT_TRUE((*m)->GetParam(i, p[i]).ok());
  }
  for (int step = 0; step < 3000; ++step) {
    const Batch& b = (*it)->Next();
    ASSERT_TRUE((*m)->ForwardBackward(b.x.data(), b.y.data(), b.size, nullptr).ok());
    for (int i = 0; i < (*m)->num_tensors(); ++i) {
      ASSERT_TRUE((*m)->GetGrad(i, g[i]).ok());
      for (size_t j = 0; j < p[i].size(); ++j) p[i][j] -= 0.05f * g[i][j];
      ASSERT_TRUE((*m)->SetParam(i, p[i]).ok());
    }
  }
  EvalStats e;
  ASSERT_TRUE((*m)->Evaluate(data->test, &e).ok());
  EXPECT_GE(e.accuracy, 0.85);
}

}  // namespace
}  // namespace gradstream
