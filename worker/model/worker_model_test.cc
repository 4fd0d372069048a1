// Model API, determinism and finite-difference gradient checks (CPU).
#include "worker/model/model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data/rng.h"

namespace gradstream {
namespace {

struct TestBatch {
  std::vector<float> x;
  std::vector<int32_t> y;
  int size = 0;
};

TestBatch RandomBatch(const ModelConfig& c, int size, uint64_t seed) {
  SplitMix64 rng(seed);
  TestBatch b;
  b.size = size;
  b.x.resize(size * c.input.elems());
  for (float& v : b.x) v = static_cast<float>(rng.Normal());
  for (int i = 0; i < size; ++i) b.y.push_back(static_cast<int32_t>(rng.UniformInt(c.num_classes)));
  return b;
}

ModelConfig Softmax() {
  ModelConfig c;
  c.type = ModelType::kSoftmax;
  c.input = {6, 1, 1};
  c.num_classes = 4;
  return c;
}

ModelConfig Mlp() {
  ModelConfig c;
  c.type = ModelType::kMlp;
  c.input = {7, 1, 1};
  c.hidden = {9, 5};
  c.num_classes = 3;
  return c;
}

// Small enough for many finite differences, yet covers padding, two convs,
// odd-size flooring in the second pool (5 -> 2) and both fc layers.
ModelConfig TinyCnn() {
  ModelConfig c;
  c.type = ModelType::kCnn;
  c.input = {2, 10, 10};
  c.num_classes = 3;
  c.cnn = CnnConfig{
      .conv1_channels = 3, .conv2_channels = 4, .kernel = 3, .padding = 1, .fc_hidden = 8};
  return c;
}

double LossAt(Model& m, const TestBatch& b) {
  StepStats s;
  EXPECT_TRUE(m.ForwardBackward(b.x.data(), b.y.data(), b.size, &s).ok());
  return s.loss;
}

// Central differences on `coords` random coordinates of every tensor plus
// its largest-gradient coordinate, with a relative tolerance over an absolute
// floor. The model is fp32, so `eps` must stay well above fp32 rounding of
// the loss (computed in double from fp32 logits); but ReLU and max-pool make
// the loss piecewise smooth, and a step that straddles a kink measures the
// average of two slopes. Early conv weights move hundreds of downstream
// pre-activations, so kinks lie within ~1e-3 of the start and the CNN needs a
// smaller step (and hence a larger absolute floor) than the dense models.
void CheckGradients(Model& m, const TestBatch& b, int coords, uint64_t seed, double eps,
                    double abs_tol) {
  ASSERT_TRUE(m.ForwardBackward(b.x.data(), b.y.data(), b.size, nullptr).ok());
  std::vector<std::vector<float>> grads;
  for (int i = 0; i < m.num_tensors(); ++i) {
    grads.emplace_back(m.params()[i].num_elems);
    ASSERT_TRUE(m.GetGrad(i, grads.back()).ok());
  }
  SplitMix64 rng(seed);
  for (int i = 0; i < m.num_tensors(); ++i) {
    const TensorSpec& t = m.params()[i];
    std::vector<float> p(t.num_elems);
    ASSERT_TRUE(m.GetParam(i, p).ok());
    std::vector<int64_t> picks;
    for (int k = 0; k < coords; ++k)
      picks.push_back(static_cast<int64_t>(rng.UniformInt(t.num_elems)));
    picks.push_back(std::max_element(grads[i].begin(), grads[i].end(),
                                     [](float a, float c) { return std::abs(a) < std::abs(c); }) -
                    grads[i].begin());
    for (int64_t j : picks) {
      std::vector<float> q = p;
      q[j] = p[j] + static_cast<float>(eps);
      ASSERT_TRUE(m.SetParam(i, q).ok());
      const double plus = LossAt(m, b);
      q[j] = p[j] - static_cast<float>(eps);
      ASSERT_TRUE(m.SetParam(i, q).ok());
      const double minus = LossAt(m, b);
      ASSERT_TRUE(m.SetParam(i, p).ok());
      const double numeric = (plus - minus) / (2 * eps);
      const double analytic = grads[i][j];
      EXPECT_NEAR(analytic, numeric,
                  abs_tol + 2e-2 * std::max(std::abs(analytic), std::abs(numeric)))
          << t.name << "[" << j << "]";
    }
  }
}

TEST(ModelNames, RoundTrip) {
  for (ModelType t : {ModelType::kSoftmax, ModelType::kMlp, ModelType::kCnn}) {
    auto back = ModelTypeFromName(ModelTypeName(t));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, t);
  }
  EXPECT_EQ(ModelTypeFromName("resnet").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*DeviceFromName("gpu"), Device::kGpu);
  EXPECT_EQ(DeviceFromName("tpu").status().code(), absl::StatusCode::kNotFound);
}

TEST(Model, TensorsOfTheDefaultMlp) {
  auto m = CreateModel(ModelConfig{}, Device::kCpu);
  ASSERT_TRUE(m.ok()) << m.status();
  const auto& p = (*m)->params();
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].name, "fc1.weight");
  EXPECT_EQ(p[0].shape, (std::vector<int64_t>{64, 20}));
  EXPECT_EQ(p[1].name, "fc1.bias");
  EXPECT_EQ(p[2].shape, (std::vector<int64_t>{10, 64}));
  EXPECT_EQ((*m)->total_elems(), 20 * 64 + 64 + 64 * 10 + 10);
}

TEST(Model, LeNetShapesForMnistAndCifar) {
  ModelConfig c;
  c.type = ModelType::kCnn;
  c.input = {1, 28, 28};
  auto mnist = CreateModel(c, Device::kCpu);
  ASSERT_TRUE(mnist.ok()) << mnist.status();
  EXPECT_EQ((*mnist)->params()[0].shape, (std::vector<int64_t>{6, 1, 5, 5}));
  EXPECT_EQ((*mnist)->params()[4].shape, (std::vector<int64_t>{120, 16 * 4 * 4}));
  c.input = {3, 32, 32};
  auto cifar = CreateModel(c, Device::kCpu);
  ASSERT_TRUE(cifar.ok()) << cifar.status();
  EXPECT_EQ((*cifar)->params()[4].shape, (std::vector<int64_t>{120, 16 * 5 * 5}));
  c.input = {1, 8, 8};
  EXPECT_EQ(CreateModel(c, Device::kCpu).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Model, InitIsDeterministicHeAndZeroBias) {
  ModelConfig c;
  c.hidden = {256};
  auto a = CreateModel(c, Device::kCpu);
  auto b = CreateModel(c, Device::kCpu);
  ASSERT_TRUE(a.ok() && b.ok());
  const int64_t n = (*a)->params()[0].num_elems;
  std::vector<float> wa(n), wb(n);
  ASSERT_TRUE((*a)->GetParam(0, wa).ok());
  ASSERT_TRUE((*b)->GetParam(0, wb).ok());
  EXPECT_EQ(wa, wb);
  double sum2 = 0;
  for (float v : wa) sum2 += double{v} * v;
  EXPECT_NEAR(sum2 / n, 2.0 / 20, 0.01);  // He: variance 2 / fan_in
  const float* bias = (*a)->param_data(1);
  EXPECT_TRUE(std::all_of(bias, bias + 256, [](float v) { return v == 0.0f; }));
  c.init_seed = 2;
  auto other = CreateModel(c, Device::kCpu);
  ASSERT_TRUE(other.ok());
  std::vector<float> wc(n);
  ASSERT_TRUE((*other)->GetParam(0, wc).ok());
  EXPECT_NE(wa, wc);
}

TEST(Model, RejectsBadInput) {
  auto m = CreateModel(Mlp(), Device::kCpu);
  ASSERT_TRUE(m.ok());
  TestBatch b = RandomBatch(Mlp(), 4, 1);
  b.y[2] = 3;
  EXPECT_EQ((*m)->ForwardBackward(b.x.data(), b.y.data(), 4, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*m)->ForwardBackward(b.x.data(), b.y.data(), 0, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> wrong(3);
  EXPECT_EQ((*m)->SetParam(0, wrong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*m)->SetParam(99, wrong).code(), absl::StatusCode::kInvalidArgument);
  Dataset d;
  d.shape = {5, 1, 1};
  d.num_classes = 3;
  EvalStats e;
  EXPECT_EQ((*m)->Evaluate(d, &e).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Model, GpuWithoutDeviceIsFailedPrecondition) {
  if (NumGpuDevices() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(DefaultDevice(), Device::kCpu);
  EXPECT_EQ(CreateModel(Mlp(), Device::kGpu).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(Model, GradReadyComesInBackwardOrderForEveryTensor) {
  auto m = CreateModel(TinyCnn(), Device::kCpu);
  ASSERT_TRUE(m.ok());
  std::vector<int> order;
  (*m)->set_grad_ready_callback([&](int i) { order.push_back(i); });
  const TestBatch b = RandomBatch(TinyCnn(), 2, 3);
  ASSERT_TRUE((*m)->ForwardBackward(b.x.data(), b.y.data(), b.size, nullptr).ok());
  EXPECT_EQ(order, (std::vector<int>{6, 7, 4, 5, 2, 3, 0, 1}));
}

TEST(Model, LossAtInitIsNearLogClasses) {
  ModelConfig c;
  auto m = CreateModel(c, Device::kCpu);
  ASSERT_TRUE(m.ok());
  const TestBatch b = RandomBatch(c, 64, 5);
  StepStats s;
  ASSERT_TRUE((*m)->ForwardBackward(b.x.data(), b.y.data(), b.size, &s).ok());
  EXPECT_GT(s.loss, 1.0);
  EXPECT_LT(s.loss, 6.0);
}

// `correct` counts the examples whose argmax logit is the label: with every
// weight 0 the logits are the output bias, so the model predicts class 2 for
// every example, and exactly the examples labelled 2 are correct.
TEST(Model, CorrectCountsTheExamplesWhoseArgmaxIsTheLabel) {
  ModelConfig c;
  auto m = CreateModel(c, Device::kCpu);
  ASSERT_TRUE(m.ok());
  for (int i = 0; i < (*m)->num_tensors(); ++i) {
    std::vector<float> zeros((*m)->params()[i].num_elems, 0.0f);
    ASSERT_TRUE((*m)->SetParam(i, zeros).ok());
  }
  const int out_bias = (*m)->num_tensors() - 1;
  ASSERT_EQ((*m)->params()[out_bias].num_elems, c.num_classes);
  std::vector<float> bias(c.num_classes, 0.0f);
  bias[2] = 1.0f;
  ASSERT_TRUE((*m)->SetParam(out_bias, bias).ok());
  const TestBatch b = RandomBatch(c, 64, 5);
  const int labelled_2 = static_cast<int>(std::count(b.y.begin(), b.y.end(), 2));
  ASSERT_GT(labelled_2, 0);
  ASSERT_LT(labelled_2, 64);
  StepStats s;
  ASSERT_TRUE((*m)->ForwardBackward(b.x.data(), b.y.data(), b.size, &s).ok());
  EXPECT_EQ(s.correct, labelled_2);
}

TEST(GradientCheck, Softmax) {
  auto m = CreateModel(Softmax(), Device::kCpu);
  ASSERT_TRUE(m.ok());
  CheckGradients(**m, RandomBatch(Softmax(), 8, 11), 6, 1, 2e-3, 2e-4);
}

TEST(GradientCheck, Mlp) {
  auto m = CreateModel(Mlp(), Device::kCpu);
  ASSERT_TRUE(m.ok());
  CheckGradients(**m, RandomBatch(Mlp(), 8, 12), 6, 2, 2e-3, 2e-4);
}

TEST(GradientCheck, CnnIncludingConvLayers) {
  auto m = CreateModel(TinyCnn(), Device::kCpu);
  ASSERT_TRUE(m.ok());
  CheckGradients(**m, RandomBatch(TinyCnn(), 4, 13), 8, 3, 1e-4, 1e-3);
}

}  // namespace
}  // namespace gradstream
