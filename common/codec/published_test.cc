// The published copy's fused apply (see [fused apply]): block by block, the
// same bits as DecodeAdd followed by a checksum, for every codec and for
// sizes around the block length; refused deltas change nothing.
#include "common/codec/published.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/codec/registry.h"
#include "gtest/gtest.h"

namespace gradstream {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float size) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, size);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(FusedApply, SameBitsAsDecodeAddThenChecksum) {
  for (const char* codec : {"none", "twobit", "ternary", "onebit", "ternary512"}) {
    for (size_t n : {1u, 7u, 9u, kPublishBlock - 1, kPublishBlock, kPublishBlock + 1,
                     3 * kPublishBlock + 8, 3 * kPublishBlock + 13, 262144u}) {
      SCOPED_TRACE(testing::Message() << codec << " n=" << n);
      auto encoder = *MakeChunkEncoder(codec, PullCodecOptions(), /*error_feedback=*/false, n);
      ChunkHeader header;
      std::string payload;
      ASSERT_TRUE(encoder->Encode(Random(n, 1, 1e-3f), {.seed = 3, .clock = 1}, &header, &payload)
                      .ok());
      const std::vector<float> start = Random(n, 2, 0.1f);
      std::vector<float> want = start;
      ASSERT_TRUE(DecodeAdd(header, payload, absl::MakeSpan(want), 1.0f).ok());

      std::vector<float> copy = start;
      absl::StatusOr<uint32_t> crc = ApplyPublishedDelta(header, payload, absl::MakeSpan(copy));
      ASSERT_TRUE(crc.ok()) << crc.status();
      EXPECT_TRUE(SameBits(copy, want));
      EXPECT_EQ(*crc, PublishedChecksum(want));
    }
  }
}

TEST(FusedApply, RefusedDeltaChangesNothing) {
  const size_t n = 3 * kPublishBlock + 5;
  auto encoder = *MakeChunkEncoder("twobit", PullCodecOptions(), false, n);
  ChunkHeader header;
  std::string payload;
  ASSERT_TRUE(encoder->Encode(Random(n, 4, 1.0f), {}, &header, &payload).ok());
  const std::vector<float> start = Random(n, 5, 1.0f);

  std::string bad_code = payload;
  bad_code.back() = static_cast<char>(0xff);  // code 11 and padding bits
  ChunkHeader bad_scale = header;
  bad_scale.scale = std::numeric_limits<float>::infinity();
  ChunkHeader wrong_size = header;
  wrong_size.num_elems = n - 1;
  const std::pair<ChunkHeader, std::string> cases[] = {
      {header, bad_code}, {bad_scale, payload}, {wrong_size, payload}, {header, payload + "x"}};
  for (const auto& [h, p] : cases) {
    std::vector<float> copy = start;
    absl::StatusOr<uint32_t> crc = ApplyPublishedDelta(h, p, absl::MakeSpan(copy));
    EXPECT_TRUE(absl::IsInvalidArgument(crc.status())) << crc.status();
    EXPECT_TRUE(SameBits(copy, start));
  }
}

// What the shard publishes is what a worker reconstructs: the worker's copy
// after ApplyPublishedDelta has the shard's bits and checksum, over many
// steps, for every pull codec and sizes around the block length.
TEST(DeltaPublisher, WorkersReconstructTheShardsCopyBitForBit) {
  for (CodecType type : {CodecType::kTwoBit, CodecType::kTernary, CodecType::kOneBit,
                         CodecType::kTernary512, CodecType::kHalf, CodecType::kInt8,
                         CodecType::kInt4}) {
    for (uint32_t n : {1u, 9u, kPublishBlock, kPublishBlock + 3, 3 * kPublishBlock + 13}) {
      SCOPED_TRACE(testing::Message() << CodecTypeName(type) << " n=" << n);
      auto publisher = DeltaPublisher::Create(type, n);
      ASSERT_TRUE(publisher.ok()) << publisher.status();
      std::vector<float> params = Random(n, 6, 1.0f), shard = params, worker = params;
      std::mt19937 rng(7);
      std::normal_distribution<float> step(0.0f, 1e-3f);
      for (uint32_t clock = 1; clock <= 5; ++clock) {
        for (float& x : params) x += step(rng);
        ChunkHeader h;
        std::string payload;
        absl::StatusOr<uint32_t> crc =
            (*publisher)
                ->Publish(params, {.seed = 9, .clock = clock}, absl::MakeSpan(shard), &h, &payload);
        ASSERT_TRUE(crc.ok()) << crc.status();
        EXPECT_EQ(h.codec, type);
        EXPECT_EQ(*crc, PublishedChecksum(shard));
        absl::StatusOr<uint32_t> mine = ApplyPublishedDelta(h, payload, absl::MakeSpan(worker));
        ASSERT_TRUE(mine.ok()) << mine.status();
        EXPECT_EQ(*mine, *crc);
        ASSERT_TRUE(SameBits(worker, shard)) << "clock " << clock;
      }
    }
  }
}

// The fused twobit publish sends what the one-call encoder sends with the
// same threshold, and its threshold is mean |d| (to rounding).
TEST(DeltaPublisher, TwoBitIsTheEncoderWithTheMeanThreshold) {
  const uint32_t n = 3 * kPublishBlock + 13;
  const std::vector<float> params = Random(n, 10, 1.0f), copy_start = Random(n, 11, 1.0f);
  std::vector<float> copy = copy_start, d(n);
  double sum_abs = 0;
  for (uint32_t i = 0; i < n; ++i) {
    d[i] = params[i] - copy_start[i];
    sum_abs += std::fabs(double{d[i]});
  }
  auto publisher = *DeltaPublisher::Create(CodecType::kTwoBit, n);
  ChunkHeader h;
  std::string payload;
  ASSERT_TRUE(publisher->Publish(params, {}, absl::MakeSpan(copy), &h, &payload).ok());
  EXPECT_NEAR(h.scale, sum_abs / n, 1e-6 * sum_abs / n);
  auto fixed = *MakeChunkEncoder("twobit", {.twobit_threshold = h.scale}, false, n);
  ChunkHeader want_h;
  std::string want;
  ASSERT_TRUE(fixed->Encode(d, {}, &want_h, &want).ok());
  EXPECT_EQ(want_h.scale, h.scale);
  EXPECT_EQ(payload, want);
}

// The fused ternary512 publish sends the whole-chunk encoder's bits and
// leaves the copy as encode-then-apply does, for sizes around both blocks.
TEST(DeltaPublisher, Ternary512IsTheWholeChunkEncodeThenApply) {
  for (uint32_t n : {1u, 511u, 513u, kPublishBlock - 1, kPublishBlock + 1, 3 * kPublishBlock + 700,
                     262144u}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const std::vector<float> params = Random(n, 12, 1.0f), start = Random(n, 13, 1.0f);
    const EncodeKey key{.seed = 9, .worker = 4, .clock = 3, .tensor = 2, .chunk = 5};
    std::vector<float> d(n);
    for (uint32_t i = 0; i < n; ++i) d[i] = params[i] - start[i];
    auto whole = *MakeChunkEncoder("ternary512", PullCodecOptions(), false, n);
    ChunkHeader want_h;
    std::string want;
    ASSERT_TRUE(whole->Encode(d, key, &want_h, &want).ok());
    std::vector<float> want_copy = start;
    absl::StatusOr<uint32_t> want_crc =
        ApplyPublishedDelta(want_h, want, absl::MakeSpan(want_copy));
    ASSERT_TRUE(want_crc.ok());

    auto publisher = *DeltaPublisher::Create(CodecType::kTernary512, n);
    std::vector<float> copy = start;
    ChunkHeader h;
    std::string payload = "stale bytes of an earlier publication";
    absl::StatusOr<uint32_t> crc = publisher->Publish(params, key, absl::MakeSpan(copy), &h,
                                                      &payload);
    ASSERT_TRUE(crc.ok()) << crc.status();
    EXPECT_EQ(h.codec, want_h.codec);
    EXPECT_EQ(h.num_elems, n);
    EXPECT_EQ(payload, want);
    EXPECT_TRUE(SameBits(copy, want_copy));
    EXPECT_EQ(*crc, *want_crc);
  }
}

// An all-zero delta sends zeros with scale 0; -0 in the copy becomes +0 as
// DecodeAdd makes it on every worker.
TEST(DeltaPublisher, NothingMovedSendsZeros) {
  const uint32_t n = kPublishBlock + 5;
  std::vector<float> params(n, 0.5f), copy(n, 0.5f);
  params[3] = copy[3] = -0.0f;
  auto publisher = *DeltaPublisher::Create(CodecType::kTwoBit, n);
  ChunkHeader h;
  std::string payload;
  absl::StatusOr<uint32_t> crc = publisher->Publish(params, {}, absl::MakeSpan(copy), &h, &payload);
  ASSERT_TRUE(crc.ok());
  EXPECT_EQ(h.scale, 0.0f);
  EXPECT_EQ(payload, std::string(payload.size(), '\0'));
  std::vector<float> worker = params;
  EXPECT_EQ(*ApplyPublishedDelta(h, payload, absl::MakeSpan(worker)), *crc);
  EXPECT_TRUE(SameBits(worker, copy));
}

TEST(DeltaPublisher, NonFiniteParametersAndWrongSizesAreRefused) {
  const uint32_t n = 2 * kPublishBlock;
  for (CodecType type : {CodecType::kTwoBit, CodecType::kTernary, CodecType::kOneBit,
                         CodecType::kTernary512, CodecType::kHalf, CodecType::kInt8,
                         CodecType::kInt4}) {
    auto publisher = *DeltaPublisher::Create(type, n);
    for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
      std::vector<float> params(n, 1.0f), copy(n, 0.0f);
      params[kPublishBlock + 17] = bad;
      ChunkHeader h;
      std::string payload;
      EXPECT_TRUE(absl::IsInvalidArgument(
          publisher->Publish(params, {}, absl::MakeSpan(copy), &h, &payload).status()))
          << CodecTypeName(type);
    }
    std::vector<float> params(n - 1, 1.0f), copy(n, 0.0f);
    ChunkHeader h;
    std::string payload;
    EXPECT_TRUE(absl::IsInvalidArgument(
        publisher->Publish(params, {}, absl::MakeSpan(copy), &h, &payload).status()));
  }
  EXPECT_FALSE(DeltaPublisher::Create(CodecType::kNone, 8).ok());
}

}  // namespace
}  // namespace gradstream
