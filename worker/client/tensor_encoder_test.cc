// The encoding half of a push, without a network: chunks follow the map, each
// chunk keeps its own residual, and decoding what was sent plus the residual
// gives back the gradient.
#include "worker/client/internal/tensor_encoder.h"

#include <cmath>
#include <random>

#include "common/job/codec_defaults.h"
#include "common/job/job_spec.h"
#include "gtest/gtest.h"

namespace gradstream::client::internal {
namespace {

std::vector<float> RandomGrad(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> g(n);
  for (auto& x : g) x = d(rng);
  return g;
}

ShardMap TwoTensorMap() {
  auto map = SplitModel({{"w", 1000}, {"b", 10}}, {"s0:1", "s1:1"}, 256);
  EXPECT_TRUE(map.ok());
  return *map;
}

// Encodes every chunk of `grad`, decodes it into `decoded`.
void EncodeDecode(TensorEncoder& enc, const std::vector<float>& grad, uint64_t clock,
                  std::vector<float>* decoded, uint64_t* bytes) {
  decoded->assign(grad.size(), 0.0f);
  *bytes = 0;
  for (size_t i = 0; i < enc.num_chunks(); ++i) {
    const ChunkInfo& c = enc.chunk(i);
    ChunkHeader h;
    std::string payload;
    ASSERT_TRUE(enc.EncodeChunk(i, grad, 1, 3, clock, &h, &payload).ok());
    EXPECT_EQ(h.num_elems, c.num_elems);
    EXPECT_EQ(payload.size(), PayloadBytes(h.codec, h.num_elems));
    EXPECT_LE(payload.size(), 1u << 20);
    ASSERT_TRUE(DecodeAdd(h, payload, absl::MakeSpan(decoded->data() + c.offset, c.num_elems), 1.0f)
                    .ok());
    *bytes += payload.size();
  }
}

TEST(TensorEncoder, ChunksFollowTheMap) {
  ShardMap map = TwoTensorMap();
  CodecPolicy policy;
  auto enc = TensorEncoder::Create(map, 0, "none", policy);
  ASSERT_TRUE(enc.ok()) << enc.status();
  ASSERT_EQ((*enc)->num_chunks(), 4u);  // 256, 256, 256, 232
  EXPECT_EQ((*enc)->chunk(3).num_elems, 232u);
  auto g = RandomGrad(1000, 1);
  std::vector<float> decoded;
  uint64_t bytes;
  EncodeDecode(**enc, g, 0, &decoded, &bytes);
  EXPECT_EQ(bytes, 4000u);
  EXPECT_EQ(decoded, g);  // none is exact
}

TEST(TensorEncoder, TwoBitResidualKeepsWhatWasNotSent) {
  ShardMap map = TwoTensorMap();
  CodecPolicy policy;
  policy.twobit_threshold = 0.5f;
  // t = 0.5 keeps back every element under it: the guard would raise the
  // path at its 4th clock (OnebitThatOwesDescentIsRaisedTernaryIsNot below).
  policy.precision_max_owed = -1;
  auto enc = TensorEncoder::Create(map, 0, "twobit", policy);
  ASSERT_TRUE(enc.ok()) << enc.status();
  // Sum over steps of decoded == sum of gradients - final residual.
  std::vector<float> sent_sum(1000, 0.0f), grad_sum(1000, 0.0f);
  for (uint64_t step = 0; step < 5; ++step) {
    auto g = RandomGrad(1000, 10 + step);
    std::vector<float> decoded;
    uint64_t bytes;
    EncodeDecode(**enc, g, step, &decoded, &bytes);
    EXPECT_EQ(bytes, 250u);  // 2 bits per element, 16x less than fp32
    for (size_t i = 0; i < 1000; ++i) {
      sent_sum[i] += decoded[i];
      grad_sum[i] += g[i];
      EXPECT_TRUE(decoded[i] == 0.0f || std::fabs(decoded[i]) == 0.5f);
    }
  }
  const double residual_sq = (*enc)->ResidualNormSquared();
  double diff_sq = 0.0;
  for (size_t i = 0; i < 1000; ++i) {
    diff_sq += double(grad_sum[i] - sent_sum[i]) * (grad_sum[i] - sent_sum[i]);
  }
  EXPECT_GT(residual_sq, 0.0);
  EXPECT_NEAR(residual_sq, diff_sq, 1e-3 * diff_sq);
}

// Elements of `enc`'s first encoding of `grad` (clock 0) that were sent
// non-zero, and the dot product of what was sent with the gradient.
void FirstClock(TensorEncoder& enc, const std::vector<float>& grad, size_t* nonzero,
                double* dot) {
  std::vector<float> decoded;
  uint64_t bytes;
  EncodeDecode(enc, grad, 0, &decoded, &bytes);
  *nonzero = 0;
  *dot = 0.0;
  for (size_t i = 0; i < grad.size(); ++i) {
    *nonzero += decoded[i] != 0.0f;
    *dot += double(decoded[i]) * grad[i];
  }
}

// The out-of-the-box policy ([default policy] in common/job/codec_defaults.h)
// on a tensor of a wide layer, whose per-element gradients are ~1e-3: the
// fixed twobit threshold t = 0.5 of the old defaults sends nothing at the
// first clock (and, through error feedback, for hundreds of clocks), while
// the defaults' scale, taken from each chunk, sends a good share of the
// elements at once, along the gradient and of its scale.
TEST(TensorEncoder, DefaultPolicySendsSmallGradientsFromTheFirstClock) {
  v1::JobSpec spec;
  ApplyJobDefaults(&spec);
  const CodecPolicy policy = CodecPolicyFromProto(spec.codec());
  constexpr uint64_t kElems = 4 * kDefaultTwobitMinElems;  // above every size rule
  auto map = SplitModel({{"fc.weight", kElems}}, {"s0:1"}, kDefaultTwobitMinElems, policy);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->tensors[0].codec, kDefaultPushCodec);
  auto g = RandomGrad(kElems, 21);
  double g_sq = 0.0;
  for (auto& x : g) {
    x *= 1e-3f;
    g_sq += double(x) * x;
  }

  auto defaults = TensorEncoder::Create(*map, 0, map->tensors[0].codec, policy);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  size_t nonzero;
  double dot;
  FirstClock(**defaults, g, &nonzero, &dot);
  EXPECT_GT(nonzero, kElems / 5) << "elements sent at clock 0 under the defaults";
  EXPECT_GT(dot, 0.3 * g_sq) << "what was sent points along the gradient";
  EXPECT_LT(dot, 3.0 * g_sq) << "and is of its scale";

  CodecPolicy fixed = policy;
  fixed.twobit_threshold = 0.5f;
  auto old = TensorEncoder::Create(*map, 0, "twobit", fixed);
  ASSERT_TRUE(old.ok()) << old.status();
  FirstClock(**old, g, &nonzero, &dot);
  EXPECT_EQ(nonzero, 0u) << "t = 0.5 is far above every element of this gradient";
}

// [owed descent] in common/job/precision.h, with the real codecs: gradients
// that keep a direction (m + noise, m heavy-tailed as a layer's are). onebit
// sends every element the mean of its sign, keeps back part of each large
// one, and owes descent along m: its chunks are raised to int4. twobit with
// the hand-chosen t = 0.5 sends nothing of them and owes it all: raised at
// the 4th clock (a level is measured at each of its first clocks). Ternary is
// unbiased and stays ternary.
TEST(TensorEncoder, OnebitThatOwesDescentIsRaisedTernaryIsNot) {
  auto map = SplitModel({{"fc.weight", 1 << 16}}, {"s0:1"}, 1 << 14);
  ASSERT_TRUE(map.ok()) << map.status();
  const size_t n = 1 << 16;
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> m(n);
  for (float& x : m) x = d(rng) * std::fabs(d(rng));  // heavy-tailed
  CodecPolicy policy;  // error feedback and the guard at their defaults
  policy.twobit_threshold = 0.5f;
  for (const char* codec : {"onebit", "twobit", "ternary"}) {
    SCOPED_TRACE(codec);
    auto enc = TensorEncoder::Create(*map, 0, codec, policy);
    ASSERT_TRUE(enc.ok()) << enc.status();
    uint64_t raised_at = 0;
    CodecType level = CodecType::kNone;
    std::vector<float> g(n);
    for (uint64_t clock = 0; clock < 200 && raised_at == 0; ++clock) {
      for (size_t j = 0; j < n; ++j) g[j] = 1e-3f * (m[j] + 0.5f * d(rng));
      for (size_t i = 0; i < (*enc)->num_chunks(); ++i) {
        ChunkHeader h;
        std::string payload;
        PushPrecisionReport report;
        ASSERT_TRUE((*enc)->EncodeChunk(i, g, 1, 3, clock, &h, &payload, &report).ok());
        if (report.raised && raised_at == 0) {
          raised_at = clock;
          level = report.level;
        }
      }
    }
    if (std::string(codec) == "onebit") {
      EXPECT_GT(raised_at, 0u) << "onebit was never raised";
      EXPECT_LE(raised_at, 40u);
      EXPECT_EQ(level, CodecType::kInt4);
    } else if (std::string(codec) == "twobit") {
      EXPECT_EQ(raised_at, kMinOwedMeasurements - 1);
      EXPECT_EQ(level, CodecType::kInt4);
    } else {
      EXPECT_EQ(raised_at, 0u) << "ternary raised at clock " << raised_at;
    }
  }
}

TEST(TensorEncoder, TernaryIsReproducibleAndBounded) {
  ShardMap map = TwoTensorMap();
  CodecPolicy policy;
  policy.error_feedback = false;
  auto a = TensorEncoder::Create(map, 0, "ternary", policy);
  auto b = TensorEncoder::Create(map, 0, "ternary", policy);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->ResidualNormSquared(), 0.0);
  auto g = RandomGrad(1000, 5);
  for (size_t i = 0; i < (*a)->num_chunks(); ++i) {
    ChunkHeader ha, hb;
    std::string pa, pb;
    ASSERT_TRUE((*a)->EncodeChunk(i, g, 9, 2, 4, &ha, &pa).ok());
    ASSERT_TRUE((*b)->EncodeChunk(i, g, 9, 2, 4, &hb, &pb).ok());
    EXPECT_EQ(pa, pb);  // same key, same bits
    EXPECT_EQ(ha.scale, hb.scale);
    EXPECT_GT(ha.scale, 0.0f);
  }
}

TEST(TensorEncoder, UnknownCodecIsNotFound) {
  ShardMap map = TwoTensorMap();
  auto enc = TensorEncoder::Create(map, 0, "sevenbit", CodecPolicy());
  EXPECT_EQ(enc.status().code(), absl::StatusCode::kNotFound);
}

TEST(TensorEncoder, ShortGradientIsInvalidArgument) {
  ShardMap map = TwoTensorMap();
  auto enc = TensorEncoder::Create(map, 1, "none", CodecPolicy());
  ASSERT_TRUE(enc.ok());
  std::vector<float> g(5);
  ChunkHeader h;
  std::string p;
  EXPECT_EQ((*enc)->EncodeChunk(0, g, 1, 1, 1, &h, &p).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradstream::client::internal
