// The device encode path (LABELS gpu): the codes it pushes are the host
// path's, and its residuals keep g + r_old == decoded + r_new. Skips only when
// no CUDA device is present; the unavailable-path answer is tested anywhere.
#include "worker/runtime/internal/device_pusher.h"

#include <cmath>
#include <map>
#include <memory>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/codec/cuda_codec.h"
#include "gtest/gtest.h"
#include "worker/client/internal/tensor_encoder.h"

#ifdef GS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gradstream::internal {
namespace {

TEST(DeviceEncode, UnavailableSaysWhy) {
  const absl::Status cpu = DeviceEncodeSupported(Device::kCpu);
  EXPECT_EQ(cpu.code(), absl::StatusCode::kFailedPrecondition);
  const absl::Status gpu = DeviceEncodeSupported(Device::kGpu);
  if (!gpu.ok()) {
    EXPECT_EQ(gpu.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(gpu.message(), "CUDA")) << gpu;
  }
}

#ifdef GS_HAVE_CUDA

// Records what the pusher hands over; answers every push at once.
class CapturingClient final : public client::PsClient {
 public:
  explicit CapturingClient(ShardMap map) : map_(std::move(map)) {}

  struct Pushed {
    uint32_t tensor;
    uint64_t clock;
    std::vector<ChunkHeader> headers;
    std::vector<std::string> payloads;
    std::vector<bool> raised;
  };

  client::PushHandle Push(uint32_t, absl::Span<const float>, uint64_t) override { return {}; }
  client::PushHandle PushEncoded(uint32_t tensor, absl::Span<const client::EncodedChunkView> chunks,
                                 uint64_t clock) override {
    Pushed p{tensor, clock, {}, {}, {}};
    for (const auto& c : chunks) {
      p.headers.push_back(c.header);
      p.payloads.emplace_back(c.payload);
      p.raised.push_back(c.raised);
    }
    pushed.push_back(std::move(p));
    return {};
  }
  client::PullHandle Pull(uint64_t, std::vector<absl::Span<float>>) override { return {}; }
  client::PullHandle PullRows(uint32_t, absl::Span<const uint64_t>, uint64_t,
                              absl::Span<float>) override {
    return {};
  }
  client::PushHandle PushRows(uint32_t, absl::Span<const uint64_t>, absl::Span<const float>,
                              uint64_t) override {
    return {};
  }
  absl::Status InitParams(absl::Span<const absl::Span<const float>>, absl::Duration) override {
    return absl::OkStatus();
  }
  void Flush(uint64_t) override {}
  absl::Status AdvanceClock(uint64_t) override { return absl::OkStatus(); }
  absl::Status Leave(absl::Duration) override { return absl::OkStatus(); }
  client::ClientStats stats() const override { return {}; }
  double ResidualNorm() const override { return 0; }
  const ShardMap& shard_map() const override { return map_; }

  std::vector<Pushed> pushed;  // only the push thread writes, Finish() orders it

 private:
  const ShardMap map_;
};

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.3f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The host encoders of every tensor of `map`: what the device must match.
std::vector<std::unique_ptr<client::internal::TensorEncoder>> HostEncoders(
    const ShardMap& map, const CodecPolicy& policy) {
  std::vector<std::unique_ptr<client::internal::TensorEncoder>> host;
  for (const auto& t : map.tensors) {
    auto enc = client::internal::TensorEncoder::Create(map, t.index, t.codec, policy);
    EXPECT_TRUE(enc.ok()) << enc.status();
    if (!enc.ok()) return {};
    host.push_back(*std::move(enc));
  }
  return host;
}

class DevicePusherTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device is present";
  }
};

// Three clocks of the CNN's gradients, cut into ragged 1000-element chunks:
// every tensor's residual invariant holds, and for the scale-free codecs the
// pushed bytes equal the host encoders' (which the same clocks drive).
TEST_P(DevicePusherTest, ResidualInvariantAndHostBytes) {
  const std::string codec = GetParam();
  ModelConfig config;
  config.type = ModelType::kCnn;
  config.input = {1, 28, 28};
  auto model = CreateModel(config, Device::kGpu);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<TensorSpec>& tensors = (*model)->params();
  CodecPolicy policy;
  policy.default_codec = codec;
  auto map = SplitModel(tensors, {"shard:0"}, 1000, policy);
  ASSERT_TRUE(map.ok()) << map.status();
  CapturingClient client(*map);
  DevicePusherOptions options;
  options.seed = 9;
  options.worker_id = 3;
  options.codec = policy;
  auto pusher = DevicePusher::Create(model->get(), &client, options);
  ASSERT_TRUE(pusher.ok()) << pusher.status();

  const auto host = HostEncoders(*map, policy);
  ASSERT_EQ(host.size(), map->tensors.size());
  const bool scale_free = codec == "twobit" || codec == "none";
  for (uint64_t clock = 0; clock < 3; ++clock) {
    std::vector<std::vector<float>> grads, before;
    for (int t = 0; t < (*model)->num_tensors(); ++t) {
      grads.push_back(Random((*model)->params()[t].num_elems, 100 * clock + t));
      ASSERT_EQ(cudaMemcpy((*model)->grad_data(t), grads[t].data(), grads[t].size() * 4,
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      auto r = (*pusher)->Residuals(t);
      ASSERT_TRUE(r.ok()) << r.status();
      before.push_back(*std::move(r));
    }
    client.pushed.clear();
    // Backward's order: last layer first.
    for (int t = (*model)->num_tensors() - 1; t >= 0; --t) {
      ASSERT_TRUE((*pusher)->Enqueue(t, clock).ok());
    }
    double seconds = 0;
    auto handles = (*pusher)->Finish(&seconds);
    ASSERT_TRUE(handles.ok()) << handles.status();
    EXPECT_EQ(handles->size(), static_cast<size_t>((*model)->num_tensors()));
    EXPECT_GT(seconds, 0.0);
    ASSERT_EQ(client.pushed.size(), handles->size());
    for (const auto& p : client.pushed) {
      const uint32_t t = p.tensor;
      EXPECT_EQ(p.clock, clock);
      auto after = (*pusher)->Residuals(static_cast<int>(t));
      ASSERT_TRUE(after.ok());
      std::vector<float> decoded(grads[t].size(), 0.0f);
      const client::internal::TensorEncoder& enc = *host[t];
      ASSERT_EQ(p.headers.size(), enc.num_chunks());
      for (size_t i = 0; i < enc.num_chunks(); ++i) {
        const ChunkInfo& c = enc.chunk(i);
        ASSERT_TRUE(DecodeAdd(p.headers[i], p.payloads[i],
                              absl::MakeSpan(decoded.data() + c.offset, c.num_elems), 1.0f)
                        .ok());
        ChunkHeader h;
        std::string payload;
        ASSERT_TRUE(host[t]->EncodeChunk(i, grads[t], 9, 3, clock, &h, &payload).ok());
        if (scale_free) {
          EXPECT_EQ(p.headers[i].scale, h.scale);
          EXPECT_EQ(p.payloads[i], payload) << codec << " tensor " << t << " chunk " << i;
        } else {
          EXPECT_NEAR(p.headers[i].scale, h.scale, 1e-5f * std::fabs(h.scale));
        }
      }
      for (size_t j = 0; j < decoded.size(); ++j) {
        const float lhs = grads[t][j] + before[t][j];
        const float rhs = decoded[j] + (*after)[j];
        ASSERT_NEAR(lhs, rhs, 1e-6f * (1 + std::fabs(lhs) + std::fabs(decoded[j])))
            << codec << " tensor " << t << "[" << j << "] clock " << clock;
      }
    }
  }
  auto norm = (*pusher)->ResidualNorm();
  ASSERT_TRUE(norm.ok());
  if (codec != "none") {
    EXPECT_GT(*norm, 0.0);
  }
}

// The push guard on the device ([device encode]): twobit with a threshold
// no gradient reaches passes nothing, so every chunk's residual grows by the
// same gradient each clock. The device pusher's controllers flush each chunk (send
// it exact, "none", residual to zero) and then raise it, at the same clocks
// as the host encoders driven with the same gradients, and say so in the
// pushes (raised; the device's report is a clock behind the host's, as it
// reads a push's error at the tensor's next push).
TEST(DevicePusherGuard, RaisesAChunkWhoseCodecPassesNothingLikeTheHost) {
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device is present";
  ModelConfig config;
  config.type = ModelType::kCnn;
  config.input = {1, 28, 28};
  auto model = CreateModel(config, Device::kGpu);
  ASSERT_TRUE(model.ok()) << model.status();
  CodecPolicy policy;
  policy.default_codec = "twobit";
  policy.twobit_threshold = 10.0f;  // gradients are N(0, 0.3): nothing gets through
  policy.twobit_min_elems = 1;
  policy.precision_bound = 2;
  auto map = SplitModel((*model)->params(), {"shard:0"}, 1000, policy);
  ASSERT_TRUE(map.ok()) << map.status();
  CapturingClient client(*map);
  DevicePusherOptions options;
  options.codec = policy;
  auto pusher = DevicePusher::Create(model->get(), &client, options);
  ASSERT_TRUE(pusher.ok()) << pusher.status();
  const auto host = HostEncoders(*map, policy);
  ASSERT_EQ(host.size(), map->tensors.size());
  int exact = 0, raised = 0;
  std::map<std::pair<uint32_t, size_t>, bool> host_raised;  // at the clock before
  for (uint64_t clock = 0; clock < 16; ++clock) {
    std::vector<std::vector<float>> grads;
    for (int t = 0; t < (*model)->num_tensors(); ++t) {
      // The same gradient every clock: the residual grows linearly.
      grads.push_back(Random((*model)->params()[t].num_elems, t));
      ASSERT_EQ(cudaMemcpy((*model)->grad_data(t), grads[t].data(), grads[t].size() * 4,
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    client.pushed.clear();
    for (int t = (*model)->num_tensors() - 1; t >= 0; --t) {
      ASSERT_TRUE((*pusher)->Enqueue(t, clock).ok());
    }
    double seconds = 0;
    ASSERT_TRUE((*pusher)->Finish(&seconds).ok());
    for (const auto& p : client.pushed) {
      auto residual = (*pusher)->Residuals(static_cast<int>(p.tensor));
      ASSERT_TRUE(residual.ok());
      for (size_t i = 0; i < p.headers.size(); ++i) {
        ChunkHeader h;
        std::string payload;
        client::internal::PushPrecisionReport report;
        ASSERT_TRUE(
            host[p.tensor]->EncodeChunk(i, grads[p.tensor], 1, 0, clock, &h, &payload, &report)
                .ok());
        // The host's ladder climbs through int4 and int8 where the device's
        // goes straight to fp32 (DeviceLadderFrom in common/job/precision.h).
        const CodecType host_codec = h.codec == CodecType::kTwoBit ? h.codec : CodecType::kNone;
        ASSERT_EQ(p.headers[i].codec, host_codec)
            << "tensor " << p.tensor << " chunk " << i << " clock " << clock;
        bool& was_raised = host_raised[std::make_pair(p.tensor, i)];
        EXPECT_EQ(p.raised[i], was_raised);
        was_raised = report.raised;
        if (p.headers[i].codec == CodecType::kNone) {
          ++exact;
          const ChunkInfo& c = host[p.tensor]->chunk(i);
          for (uint32_t j = 0; j < c.num_elems; ++j) {
            ASSERT_EQ((*residual)[c.offset + j], 0.0f) << "an exact push leaves no residual";
          }
        }
        raised += p.raised[i];
      }
    }
  }
  EXPECT_GT(exact, 0) << "no chunk was flushed";
  EXPECT_GT(raised, 0) << "no chunk was raised";
}

// A CNN on the GPU, its map (ragged 1000-element chunks) and a pusher for
// `codec` on every tensor, every gradient set to Random(seed t).
struct Rig {
  explicit Rig(const std::string& codec) {
    ModelConfig config;
    config.type = ModelType::kCnn;
    config.input = {1, 28, 28};
    auto m = CreateModel(config, Device::kGpu);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return;
    model = *std::move(m);
    CodecPolicy policy;
    policy.default_codec = codec;
    policy.min_compress_elems = 1;  // every tensor, biases too
    auto map = SplitModel(model->params(), {"shard:0"}, 1000, policy);
    EXPECT_TRUE(map.ok()) << map.status();
    if (!map.ok()) return;
    client = std::make_unique<CapturingClient>(*map);
    DevicePusherOptions options;
    options.codec = policy;
    auto p = DevicePusher::Create(model.get(), client.get(), options);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return;
    pusher = *std::move(p);
    for (int t = 0; t < model->num_tensors(); ++t) {
      const auto g = Random(model->params()[t].num_elems, t);
      EXPECT_EQ(cudaMemcpy(model->grad_data(t), g.data(), g.size() * 4, cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  bool ok() const { return pusher != nullptr; }

  std::unique_ptr<Model> model;
  std::unique_ptr<CapturingClient> client;
  std::unique_ptr<DevicePusher> pusher;
};

// Enqueue reads nothing back ([device encode]), also for a codec whose scale
// is a statistic: with the model's stream held by a host function that
// waits for the test, two tensors (both slots) are enqueued; had Enqueue
// waited for the GPU, the host function would have run out its deadline
// first.
TEST(DevicePusherAsync, EnqueueDoesNotWaitForTheGpu) {
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device is present";
  Rig rig("ternary");
  ASSERT_TRUE(rig.ok());
  struct Gate {
    absl::Notification release;
    bool timed_out = false;
  } gate;
  auto hold = [](void* arg) {
    auto* g = static_cast<Gate*>(arg);
    g->timed_out = !g->release.WaitForNotificationWithTimeout(absl::Seconds(60));
  };
  ASSERT_EQ(cudaLaunchHostFunc(static_cast<cudaStream_t>(rig.model->stream()), hold, &gate),
            cudaSuccess);
  const int last = rig.model->num_tensors() - 1;
  ASSERT_TRUE(rig.pusher->Enqueue(last, 0).ok());
  ASSERT_TRUE(rig.pusher->Enqueue(last - 1, 0).ok());
  gate.release.Notify();
  double seconds = 0;
  auto handles = rig.pusher->Finish(&seconds);
  ASSERT_TRUE(handles.ok()) << handles.status();
  EXPECT_EQ(handles->size(), 2u);
  EXPECT_FALSE(gate.timed_out) << "Enqueue waited for the model's stream";
  ASSERT_EQ(rig.client->pushed.size(), 2u);
  for (const auto& p : rig.client->pushed) {
    for (const ChunkHeader& h : p.headers) {
      EXPECT_EQ(h.codec, CodecType::kTernary);
      EXPECT_GT(h.scale, 0.0f) << "the header came back with the codes";
    }
  }
}

// A gradient holding NaN under a codec with a statistic: Finish says so, that
// tensor (one chunk) is not pushed and keeps its residual; the others are
// pushed.
TEST(DevicePusherAsync, NonFiniteGradientIsNotPushed) {
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device is present";
  Rig rig("ternary");
  ASSERT_TRUE(rig.ok());
  const int n = rig.model->num_tensors();
  for (int t = n - 1; t >= 0; --t) ASSERT_TRUE(rig.pusher->Enqueue(t, 0).ok());
  double seconds = 0;
  ASSERT_TRUE(rig.pusher->Finish(&seconds).ok());
  auto before = rig.pusher->Residuals(0);
  ASSERT_TRUE(before.ok());
  const float nan = NAN;
  ASSERT_EQ(cudaMemcpy(rig.model->grad_data(0) + 7, &nan, 4, cudaMemcpyHostToDevice), cudaSuccess);
  rig.client->pushed.clear();
  for (int t = n - 1; t >= 0; --t) ASSERT_TRUE(rig.pusher->Enqueue(t, 1).ok());
  auto handles = rig.pusher->Finish(&seconds);
  EXPECT_EQ(handles.status().code(), absl::StatusCode::kInvalidArgument) << handles.status();
  EXPECT_TRUE(absl::StrContains(handles.status().message(), "NaN")) << handles.status();
  ASSERT_EQ(rig.client->pushed.size(), static_cast<size_t>(n - 1));
  for (const auto& p : rig.client->pushed) EXPECT_NE(p.tensor, 0u);
  auto after = rig.pusher->Residuals(0);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);
}

INSTANTIATE_TEST_SUITE_P(Codecs, DevicePusherTest,
                         ::testing::Values("none", "twobit", "ternary", "onebit"));

#endif  // GS_HAVE_CUDA

}  // namespace
}  // namespace gradstream::internal
