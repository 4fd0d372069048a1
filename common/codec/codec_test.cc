#include "common/codec/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/codec/decoder.h"
#include "common/codec/error_feedback.h"
#include "common/codec/internal/codec_table.h"
#include "common/codec/internal/kernels.h"
#include "common/codec/registry.h"
#include "common/philox.h"
#include "gtest/gtest.h"

namespace gradstream {
namespace {

using internal::CodecKernels;

std::unique_ptr<Codec> Make(absl::string_view name, CodecOptions opt = {}) {
  auto c = CodecRegistry::Global().Create(name, opt);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(c).value();
}

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::vector<float> RandomGrad(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> g(n);
  for (auto& x : g) x = d(rng);
  return g;
}

std::vector<float> Decode(const ChunkHeader& h, const std::string& p) {
  std::vector<float> out(h.num_elems, 0.0f);
  EXPECT_TRUE(DecodeAdd(h, p, absl::MakeSpan(out), 1.0f).ok());
  return out;
}

// ---------------------------------------------------------------- Philox --

TEST(Philox, MatchesRandom123KnownAnswers) {
  // kat_vectors from Random123 for philox4x32_10 and philox4x32_7.
  PhiloxCounter r = Philox4x32<10>({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r.c0, 0x6627e8d5u);
  EXPECT_EQ(r.c1, 0xe169c58du);
  EXPECT_EQ(r.c2, 0xbc57ac4cu);
  EXPECT_EQ(r.c3, 0x9b00dbd8u);
  r = Philox4x32<10>({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff});
  EXPECT_EQ(r.c0, 0x408f276du);
  EXPECT_EQ(r.c1, 0x41c83b0eu);
  EXPECT_EQ(r.c2, 0xa20bc7c6u);
  EXPECT_EQ(r.c3, 0x6d5451fdu);
  r = Philox4x32<10>({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0});
  EXPECT_EQ(r.c0, 0xd16cfe09u);
  EXPECT_EQ(r.c1, 0x94fdccebu);
  EXPECT_EQ(r.c2, 0x5001e420u);
  EXPECT_EQ(r.c3, 0x24126ea1u);
  // The codecs' generator (see [reproducible rounding]).
  ASSERT_EQ(kPhiloxRounds, 7);
  r = CodecPhilox({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r.c0, 0x5f6fb709u);
  EXPECT_EQ(r.c1, 0x0d893f64u);
  EXPECT_EQ(r.c2, 0x4f121f81u);
  EXPECT_EQ(r.c3, 0x4f730a48u);
  r = CodecPhilox({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff});
  EXPECT_EQ(r.c0, 0x5207ddc2u);
  EXPECT_EQ(r.c1, 0x45165e59u);
  EXPECT_EQ(r.c2, 0x4d8ee751u);
  EXPECT_EQ(r.c3, 0x8c52f662u);
  r = CodecPhilox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0});
  EXPECT_EQ(r.c0, 0x4dfccabau);
  EXPECT_EQ(r.c1, 0x190a87f0u);
  EXPECT_EQ(r.c2, 0xc47362bau);
  EXPECT_EQ(r.c3, 0xb6b5242au);
}

// The bias bound of NOTE [reproducible rounding], checked exhaustively: for
// a keep probability p, P(Uniform8(b) < p) over the 256 values of b is
// within 1/512 of p, exact at 0 and 1. p sweeps every fp32 grid point
// k/2^16 of [0, 1] plus the bin edges and midpoints and their neighbours.
TEST(Philox, EightBitDrawBias) {
  std::vector<float> ps;
  for (uint32_t k = 0; k <= 65536; ++k) ps.push_back(k / 65536.0f);
  for (uint32_t k = 0; k <= 512; ++k) {
    const float edge = k / 512.0f;
    ps.insert(ps.end(), {edge, std::nextafter(edge, 0.0f), std::nextafter(edge, 1.0f)});
  }
  double worst = 0;
  for (float p : ps) {
    if (p < 0.0f || p > 1.0f) continue;
    int taken = 0;
    for (uint32_t b = 0; b < 256; ++b) taken += Uniform8(b) < p;
    const double err = taken / 256.0 - p;
    worst = std::max(worst, std::fabs(err));
    ASSERT_LE(std::fabs(err), 1.0 / 512) << "p=" << p;
  }
  EXPECT_GT(worst, 1.0 / 512 - 1e-6);  // the bound is tight
  for (uint32_t b = 0; b < 256; ++b) {
    EXPECT_FALSE(Uniform8(b) < 0.0f);  // p = 0: never sent
    EXPECT_TRUE(Uniform8(b) < 1.0f);   // p = 1: always sent
  }
  // Each byte of a block feeds one element, lowest byte of c0 first.
  const PhiloxCounter c{0x03020100u, 0x07060504u, 0x0b0a0908u, 0x0f0e0d0cu};
  for (uint32_t j = 0; j < kDrawsPerBlock; ++j) EXPECT_EQ(BlockBits8(c, j), j);
}

// --------------------------------------------------------- golden bytes --

TEST(NoneCodec, GoldenBytesAreLittleEndianFp32) {
  auto c = Make("none");
  std::vector<float> g = {1.0f, -2.0f};
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  EXPECT_EQ(h.codec, CodecType::kNone);
  EXPECT_EQ(h.num_elems, 2u);
  EXPECT_EQ(Bytes(p), (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0}));
}

TEST(TwoBitCodec, GoldenBytesLowestBitsFirst) {
  auto c = Make("twobit", {.twobit_threshold = 0.5f});
  // codes: +1 -1 0 +1 | -1 0 +1 0 | 0
  std::vector<float> g = {0.6f, -0.7f, 0.1f, 0.5f, -0.5f, 0.49f, 1.2f, -0.2f, 0.3f};
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  EXPECT_EQ(h.codec, CodecType::kTwoBit);
  EXPECT_EQ(h.num_elems, 9u);
  EXPECT_EQ(h.scale, 0.5f);
  EXPECT_EQ(Bytes(p), (std::vector<uint8_t>{0x49, 0x12, 0x00}));
  EXPECT_EQ(Decode(h, p),
            (std::vector<float>{0.5f, -0.5f, 0, 0.5f, -0.5f, 0, 0.5f, 0, 0}));
}

TEST(TernaryCodec, GoldenBytesWhenEveryProbabilityIsZeroOrOne) {
  auto c = Make("ternary", {.ternary_clip = 0.0f});  // no clipping: s = max|g|
  std::vector<float> g = {2.0f, -2.0f, 0.0f, 2.0f, -2.0f};
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {.seed = 7}, &h, &p).ok());
  EXPECT_EQ(h.codec, CodecType::kTernary);
  EXPECT_EQ(h.scale, 2.0f);
  EXPECT_EQ(Bytes(p), (std::vector<uint8_t>{0x49, 0x02}));
}

TEST(Ternary512Codec, GoldenBytesScalesFirstThenTernaryCodes) {
  auto c = Make("ternary512", {.ternary_clip = 0.0f});  // no clipping: s = max|g| per block
  std::vector<float> g(514, 0.0f);
  g[0] = 2.0f, g[1] = -2.0f;        // block 0: scale 2
  g[512] = -0.5f, g[513] = 0.5f;    // block 1 (2 elements): scale 0.5, not 2
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {.seed = 7}, &h, &p).ok());
  EXPECT_EQ(h.codec, CodecType::kTernary512);
  EXPECT_EQ(h.scale, 0.0f);
  std::vector<uint8_t> want(4 * 2 + 129, 0);
  const uint8_t scales[8] = {0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x3f};  // 2.0f, 0.5f
  std::copy(scales, scales + 8, want.begin());
  want[8] = 0x09;        // +1 -1
  want[8 + 128] = 0x06;  // -1 +1
  EXPECT_EQ(Bytes(p), want);
  EXPECT_EQ(Decode(h, p), g);
}

TEST(OneBitCodec, GoldenBytesAndReconstructionValues) {
  auto c = Make("onebit");
  std::vector<float> g = {1, -2, 3, -4, 0, 5, -6, 7, 8};
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  // The 0 is in neither mean and takes the 0 bit: |-4| < 4.8.
  EXPECT_EQ(Bytes(p), (std::vector<uint8_t>{0xA5, 0x01}));
  EXPECT_FLOAT_EQ(h.scale, 4.8f);    // mean of 1,3,5,7,8
  EXPECT_FLOAT_EQ(h.scale2, -4.0f);  // mean of -2,-4,-6
}

TEST(HalfCodec, GoldenBytesAreHalvesOfXOverAPowerOfTwo) {
  auto c = Make("fp16");
  // max |g| = 3 < 2^2, so the scale is 2^(2-15) and g / scale is 8192,
  // -16384, 4096, 24576: halves 0x7000, 0xF400, 0x6C00, 0x7600.
  std::vector<float> g = {1.0f, -2.0f, 0.5f, 3.0f};
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  EXPECT_EQ(h.codec, CodecType::kHalf);
  EXPECT_EQ(h.scale, std::ldexp(1.0f, -13));
  EXPECT_EQ(Bytes(p), (std::vector<uint8_t>{0x00, 0x70, 0x00, 0xF4, 0x00, 0x6C, 0x00, 0x76}));
  EXPECT_EQ(Decode(h, p), g);
}

TEST(Int8Codec, GoldenBytesAreCodesOfXOverAPowerOfTwo) {
  auto c = Make("int8");
  // max |g| = 3 < 2^2, so the scale is 2^(2-7): g / scale is 32, -64, 16,
  // 96, and 0.1 / 2^-5 = 3.2 rounds to 3.
  std::vector<float> g = {1.0f, -2.0f, 0.5f, 3.0f, 0.1f};
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  EXPECT_EQ(h.codec, CodecType::kInt8);
  EXPECT_EQ(h.scale, std::ldexp(1.0f, -5));
  EXPECT_EQ(Bytes(p), (std::vector<uint8_t>{0x20, 0xC0, 0x10, 0x60, 0x03}));
  EXPECT_EQ(Decode(h, p), (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f, 3.0f / 32}));
}

// NOTE: [int8 scale]: max |x| just under 128 steps of 2^k would round to 128,
// which a byte does not hold: the scale doubles. Ties go to even.
TEST(Int8Codec, NoCodeIsPast127AndTiesRoundToEven) {
  auto c = Make("int8");
  std::vector<float> g = {127.75f, -1.0f, 2.5f, 3.5f};  // 127.75 would round to 128
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  EXPECT_EQ(h.scale, 2.0f);
  // 127.75 / 2 = 63.875 -> 64; -0.5 -> -0 (even); 1.25 -> 1; 1.75 -> 2.
  EXPECT_EQ(Bytes(p), (std::vector<uint8_t>{0x40, 0x00, 0x01, 0x02}));
  g = {127.25f, 0.5f, 1.5f};  // 127.25 rounds to 127 at scale 1
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  EXPECT_EQ(h.scale, 1.0f);
  EXPECT_EQ(Bytes(p), (std::vector<uint8_t>{0x7F, 0x00, 0x02}));
  // Error feedback keeps exactly what the code left behind.
  auto ef = MakeChunkEncoder("int8", {}, /*error_feedback=*/true, 3);
  ASSERT_TRUE(ef.ok());
  ASSERT_TRUE((*ef)->Encode(g, {}, &h, &p).ok());
  auto* feedback = static_cast<ErrorFeedback*>(ef->get());
  EXPECT_DOUBLE_EQ(feedback->ResidualNorm(), std::sqrt(0.25 * 0.25 + 0.5 * 0.5 + 0.5 * 0.5));
}

TEST(Int4Codec, GoldenBytesAreTwoCodesAByte) {
  auto c = Make("int4");
  // max |g| = 3 < 2^2, so the scale is 2^(2-3): g / scale is 2, -4, 1, 6,
  // and 0.1 / 0.5 = 0.2 rounds to 0. Low nibble first; the odd chunk's last
  // high nibble is padding.
  std::vector<float> g = {1.0f, -2.0f, 0.5f, 3.0f, 0.1f};
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  EXPECT_EQ(h.codec, CodecType::kInt4);
  EXPECT_EQ(h.scale, 0.5f);
  EXPECT_EQ(Bytes(p), (std::vector<uint8_t>{0xC2, 0x61, 0x00}));
  EXPECT_EQ(Decode(h, p), (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f, 0.0f}));
}

// NOTE: [int4 scale]: as int8's, within +-7.
TEST(Int4Codec, NoCodeIsPast7AndTiesRoundToEven) {
  auto c = Make("int4");
  std::vector<float> g = {7.75f, -1.0f, 2.5f, 3.5f};  // 7.75 would round to 8
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  EXPECT_EQ(h.scale, 2.0f);
  // 7.75 / 2 = 3.875 -> 4; -0.5 -> -0 (even); 1.25 -> 1; 1.75 -> 2.
  EXPECT_EQ(Bytes(p), (std::vector<uint8_t>{0x04, 0x21}));
  g = {7.25f, 0.5f, 1.5f};  // 7.25 rounds to 7 at scale 1
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  EXPECT_EQ(h.scale, 1.0f);
  EXPECT_EQ(Bytes(p), (std::vector<uint8_t>{0x07, 0x02}));
  auto ef = MakeChunkEncoder("int4", {}, /*error_feedback=*/true, 3);
  ASSERT_TRUE(ef.ok());
  ASSERT_TRUE((*ef)->Encode(g, {}, &h, &p).ok());
  auto* feedback = static_cast<ErrorFeedback*>(ef->get());
  EXPECT_DOUBLE_EQ(feedback->ResidualNorm(), std::sqrt(0.25 * 0.25 + 0.5 * 0.5 + 0.5 * 0.5));
}

// NOTE: [fp16 scale]: a plain cast would send gradients under 6e-5 as half
// subnormals (1e-7 with 17% error); scaled, every element within 2^-29 of
// the chunk's largest keeps half's 11 bits, and a tie rounds to even.
TEST(HalfCodec, SmallGradientsKeepElevenBitsAndTiesRoundToEven) {
  auto c = Make("fp16");
  std::vector<float> g = RandomGrad(4099, 31);
  for (float& x : g) x *= 1e-7f;
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  const std::vector<float> d = Decode(h, p);
  float max_abs = 0.0f;
  for (float x : g) max_abs = std::max(max_abs, std::fabs(x));
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::fabs(g[i]) < max_abs * std::ldexp(1.0f, -29)) continue;
    EXPECT_LE(std::fabs(d[i] - g[i]), std::ldexp(std::fabs(g[i]), -11)) << i;
  }
  // With max 1.5 the scale is 2^-14, so 1 + 2^-11 becomes 2^14 + 8, halfway
  // between the halves 2^14 and 2^14 + 16, and goes to the even 2^14; 1 +
  // 3 * 2^-11 (2^14 + 24) goes up to the even 2^14 + 32.
  std::vector<float> ties = {1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11),
                             1.5f};
  ASSERT_TRUE(c->Encode(ties, {}, &h, &p).ok());
  EXPECT_EQ(h.scale, std::ldexp(1.0f, -14));  // max 1.5 < 2^1
  EXPECT_EQ(Decode(h, p),
            (std::vector<float>{1.0f, 1.0f + 4 * std::ldexp(1.0f, -11), 1.5f}));
}

TEST(HalfCodec, ConversionsRoundTripEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = internal::HalfBitsToFloat(bits);
    if (std::isnan(f)) {
      EXPECT_EQ(internal::FloatToHalfBits(f) & 0x7c00u, 0x7c00u);
      continue;
    }
    EXPECT_EQ(internal::FloatToHalfBits(f), bits) << h;
  }
  EXPECT_EQ(internal::FloatToHalfBits(65520.0f), 0x7c00u);  // rounds past 65504
  EXPECT_EQ(internal::FloatToHalfBits(65519.0f), 0x7bffu);
  EXPECT_EQ(internal::FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000u);  // tie to even 0
  EXPECT_EQ(internal::FloatToHalfBits(std::ldexp(3.0f, -25)), 0x0002u);  // tie to even 2
}

// NOTE: [onebit zeros]: zeros are in neither mean, take the bit whose value
// is nearer to 0 (1 on a tie), and error feedback keeps the difference.
TEST(OneBitCodec, ExactZerosTakeTheValueNearerToZero) {
  struct Case {
    std::vector<float> g;
    uint8_t byte;
    float pos, neg;
  };
  const Case cases[] = {
      {{3, 0, -1, 0, -2, 0}, 0x01, 3.0f, -1.5f},       // zeros -> 0 bit (-1.5)
      {{1, 0, -4, -0.0f}, 0x0B, 1.0f, -4.0f},          // zeros, -0 too -> 1 bit (1)
      {{0, 0, 2, 0, 4}, 0x14, 3.0f, 0.0f},             // dead ReLU units: decode to 0
      {{-0.0f, 0, -2, 0}, 0x0B, 0.0f, -2.0f},          // one-sided the other way
      {{0, 0, 0}, 0x07, 0.0f, 0.0f},                   // all zero: a tie, exact
      {{2, -2, 0}, 0x05, 2.0f, -2.0f},                 // tie -> 1 bit
  };
  for (const Case& c : cases) {
    auto enc = MakeChunkEncoder("onebit", {}, /*error_feedback=*/true, c.g.size());
    ASSERT_TRUE(enc.ok());
    ChunkHeader h;
    std::string p;
    ASSERT_TRUE((*enc)->Encode(c.g, {}, &h, &p).ok());
    EXPECT_EQ(Bytes(p), std::vector<uint8_t>{c.byte}) << "g[0]=" << c.g[0];
    EXPECT_EQ(h.scale, c.pos);
    EXPECT_EQ(h.scale2, c.neg);
    // With error feedback a zero leaves minus its decoded value behind, which
    // the next step sends back: g == decoded + r_new elementwise (r_old = 0).
    const auto d = Decode(h, p);
    const CodecKernels& k = internal::PortableKernels();
    std::vector<float> r(c.g.size(), 0.0f);
    uint8_t byte = 0;
    k.encode_onebit(c.g.data(), r.data(), c.g.size(), {h.scale, h.scale2}, &byte);
    EXPECT_EQ(byte, c.byte);
    for (size_t i = 0; i < c.g.size(); ++i) EXPECT_EQ(d[i] + r[i], c.g[i]) << i;
  }
}

// ------------------------------------------------------ MXNet semantics --

double Norm(const std::vector<float>& r) {
  double s = 0;
  for (float x : r) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

TEST(TwoBitCodec, ResidualFollowsMxnetSemanticsExactly) {
  // r += g; if r >= t: +1, r -= t; elif r <= -t: -1, r += t; else 0.
  // The bare codec with an explicit residual shows the rule; the
  // ErrorFeedback decorator must send the same bytes and keep the same
  // residual (its norm is all it exposes).
  const float t = 0.5f;
  auto enc = MakeChunkEncoder("twobit", {.twobit_threshold = t}, true, 9);
  ASSERT_TRUE(enc.ok());
  auto* ef = dynamic_cast<ErrorFeedback*>(enc->get());
  ASSERT_NE(ef, nullptr);
  auto bare = Make("twobit", {.twobit_threshold = t});
  std::vector<float> kept(9, 0.0f);
  std::vector<float> g = {0.6f, -0.7f, 0.1f, 0.5f, -0.5f, 0.49f, 1.2f, -0.2f, 0.3f};
  std::vector<float> r(9, 0.0f);
  for (int step = 0; step < 4; ++step) {
    ChunkHeader h, hb;
    std::string p, pb;
    ASSERT_TRUE((*enc)->Encode(g, {}, &h, &p).ok());
    ASSERT_TRUE(bare->EncodeWithResidual(g, absl::MakeSpan(kept), {}, &hb, &pb).ok());
    std::vector<float> want(9, 0.0f);
    for (int i = 0; i < 9; ++i) {
      r[i] += g[i];
      if (r[i] >= t) {
        want[i] = t;
        r[i] -= t;
      } else if (r[i] <= -t) {
        want[i] = -t;
        r[i] += t;
      }
    }
    EXPECT_EQ(Decode(h, p), want) << "step " << step;
    EXPECT_EQ(pb, p) << "step " << step;
    for (int i = 0; i < 9; ++i) EXPECT_EQ(kept[i], r[i]) << "step " << step << " i " << i;
    EXPECT_EQ(ef->ResidualNorm(), Norm(r)) << "step " << step;
  }
}

TEST(TwoBitCodec, AdaptiveThresholdIsMeanAbsAndTravelsInHeader) {
  auto c = Make("twobit", {.twobit_threshold = -1.0f});
  std::vector<float> g = {1.0f, -3.0f, 0.5f, 0.5f};  // mean |g| = 1.25
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  EXPECT_FLOAT_EQ(h.scale, 1.25f);
  EXPECT_EQ(Decode(h, p), (std::vector<float>{0, -1.25f, 0, 0}));
  // An all-zero chunk sends zeros, not +t.
  std::vector<float> z(5, 0.0f);
  ASSERT_TRUE(c->Encode(z, {}, &h, &p).ok());
  EXPECT_EQ(Decode(h, p), z);
}

// ------------------------------------------------- error feedback law --

class EveryCodec : public ::testing::TestWithParam<const char*> {};

TEST_P(EveryCodec, ErrorFeedbackKeepsWhatWasNotSent) {
  const uint32_t n = 1037;
  auto enc = MakeChunkEncoder(GetParam(), {}, /*error_feedback=*/true, n);
  ASSERT_TRUE(enc.ok());
  auto* ef = dynamic_cast<ErrorFeedback*>(enc->get());
  ASSERT_NE(ef, nullptr);
  // The same codec with the residual in our hands: the decorator must send
  // the same bytes, so it keeps the same residual.
  auto bare = Make(GetParam());
  std::vector<float> kept(n, 0.0f);
  for (uint32_t step = 0; step < 5; ++step) {
    const std::vector<float> g = RandomGrad(n, 100 + step);
    const std::vector<float> r_old = kept;
    ChunkHeader h, hb;
    std::string p, pb;
    const EncodeKey key{.seed = 1, .clock = step};
    ASSERT_TRUE((*enc)->Encode(g, key, &h, &p).ok());
    ASSERT_TRUE(bare->EncodeWithResidual(g, absl::MakeSpan(kept), key, &hb, &pb).ok());
    EXPECT_EQ(pb, p) << GetParam() << " step " << step;
    EXPECT_EQ(hb.scale, h.scale);
    const std::vector<float> dec = Decode(h, p);
    for (uint32_t i = 0; i < n; ++i) {
      const float lhs = g[i] + r_old[i], rhs = dec[i] + kept[i];
      EXPECT_NEAR(lhs, rhs, 1e-6f * (1.0f + std::fabs(lhs))) << GetParam() << " i=" << i;
    }
    EXPECT_EQ(ef->ResidualNorm(), Norm(kept)) << GetParam() << " step " << step;
  }
  if (absl::string_view(GetParam()) == "none") {
    EXPECT_EQ(ef->ResidualNorm(), 0.0) << "fp32 sends everything";
  } else {
    EXPECT_GT(ef->ResidualNorm(), 0.0) << "a compressing codec leaves something behind";
  }
}

TEST_P(EveryCodec, SameKeySameBytes) {
  const auto g = RandomGrad(999, 3);
  auto a = Make(GetParam()), b = Make(GetParam());
  ChunkHeader ha, hb;
  std::string pa, pb;
  EncodeKey key{.seed = 42, .worker = 1, .clock = 9, .tensor = 2, .chunk = 3};
  ASSERT_TRUE(a->Encode(g, key, &ha, &pa).ok());
  ASSERT_TRUE(b->Encode(g, key, &hb, &pb).ok());
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(ha.scale, hb.scale);
}

TEST_P(EveryCodec, PayloadSizeIsSixteenthOrLessOrFixedWidth) {
  const auto g = RandomGrad(4096, 5);
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(Make(GetParam())->Encode(g, {}, &h, &p).ok());
  EXPECT_EQ(p.size(), PayloadBytes(h.codec, 4096));
  if (absl::string_view(GetParam()) == "fp16") {
    EXPECT_EQ(p.size() * 2, 4096u * 4);
  } else if (absl::string_view(GetParam()) == "int8") {
    EXPECT_EQ(p.size() * 4, 4096u * 4);
  } else if (absl::string_view(GetParam()) == "int4") {
    EXPECT_EQ(p.size() * 8, 4096u * 4);
  } else if (absl::string_view(GetParam()) == "ternary512") {
    EXPECT_EQ(p.size(), 4u * 4096 / 512 + 4096 / 4);  // a scale per 512 elements, then 2 bits each
  } else if (absl::string_view(GetParam()) != "none") {
    EXPECT_LE(p.size() * 16, 4096u * 4);
  }
}

TEST_P(EveryCodec, NanGradientIsRejected) {
  auto g = RandomGrad(64, 6);
  g[17] = NAN;
  ChunkHeader h;
  std::string p;
  auto s = Make(GetParam())->Encode(g, {}, &h, &p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// Every row of the codec table, so a new codec is covered without editing this.
std::vector<const char*> AllCodecNames() {
  std::vector<const char*> names;
  for (const internal::CodecRow& row : internal::CodecRows()) names.push_back(row.name);
  return names;
}

TEST_P(EveryCodec, BlockDecodeMatchesDecodeAddBitForBit) {
  const uint32_t n = 2 * 1024 + 77;
  const auto g = RandomGrad(n, 21);
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(Make(GetParam())->Encode(g, {.seed = 9}, &h, &p).ok());
  for (bool misaligned : {false, true}) {
    const std::string buffer = (misaligned ? std::string(1, 'x') : std::string()) + p;
    const absl::string_view view = absl::string_view(buffer).substr(misaligned ? 1 : 0);
    const float weight = 0.3f;
    const std::vector<float> acc0 = RandomGrad(n, 22);
    std::vector<float> fused = acc0, blocks = acc0;
    ASSERT_TRUE(DecodeAdd(h, view, absl::MakeSpan(fused), weight).ok());
    absl::StatusOr<ChunkDecoder> chunk = ChunkDecoder::Create(h, view, n, weight);
    ASSERT_TRUE(chunk.ok()) << chunk.status();
    EXPECT_EQ(chunk->num_elems(), n);
    std::vector<float> scratch(1024);
    for (uint32_t base = 0; base < n; base += 1024) {
      const uint32_t m = std::min<uint32_t>(1024, n - base);
      const float* u = chunk->Block(base, m, scratch.data());
      for (uint32_t i = 0; i < m; ++i) blocks[base + i] += chunk->block_scale() * u[i];
    }
    EXPECT_EQ(fused, blocks) << GetParam() << (misaligned ? " misaligned" : "");
    // Ranges that start and end inside ternary512's scale blocks.
    std::vector<float> ranged = acc0;
    for (uint32_t begin = 0; begin < n; begin += 200) {
      chunk->AddRangeTo(begin, std::min<uint32_t>(200, n - begin), ranged.data() + begin);
    }
    EXPECT_EQ(fused, ranged) << GetParam() << (misaligned ? " misaligned" : "");
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, EveryCodec, ::testing::ValuesIn(AllCodecNames()));

// ---------------------------------------------------------- codec table --

TEST(CodecTable, OneRowPerTypeInOrderWithMatchingNames) {
  ASSERT_EQ(internal::CodecRows().size(), static_cast<size_t>(kNumCodecTypes));
  for (int i = 0; i < kNumCodecTypes; ++i) {
    const auto type = static_cast<CodecType>(i);
    const internal::CodecRow* row = internal::FindCodec(type);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(row->type, type);
    EXPECT_EQ(CodecTypeName(type), row->name);
    EXPECT_EQ(*CodecTypeFromName(row->name), type);
    EXPECT_EQ(row->new_encoder({})->type(), type);
  }
  EXPECT_EQ(internal::FindCodec(static_cast<CodecType>(kNumCodecTypes)), nullptr);
  EXPECT_EQ(CodecTypeName(static_cast<CodecType>(200)), "unknown");
}

TEST(CodecTable, PayloadBytesFollowBitsPerElement) {
  EXPECT_EQ(PayloadBytes(CodecType::kNone, 3), 12u);
  EXPECT_EQ(PayloadBytes(CodecType::kTwoBit, 9), 3u);
  EXPECT_EQ(PayloadBytes(CodecType::kTernary, 8), 2u);
  EXPECT_EQ(PayloadBytes(CodecType::kOneBit, 9), 2u);
  EXPECT_EQ(PayloadBytes(CodecType::kOneBit, 0), 0u);
  EXPECT_EQ(PayloadBytes(CodecType::kTernary512, 512), 4u + 128);
  EXPECT_EQ(PayloadBytes(CodecType::kTernary512, 513), 8u + 129);
  EXPECT_EQ(PayloadBytes(CodecType::kNone, 0xFFFFFFFFu), 4 * size_t{0xFFFFFFFFu});
  EXPECT_EQ(PayloadBytes(static_cast<CodecType>(9), 10), 0u);
}

// ------------------------------------------------------------- TernGrad --

TEST(TernaryCodec, IsUnbiased) {
  const uint32_t n = 512, trials = 4000;
  const auto g = RandomGrad(n, 11);
  auto c = Make("ternary", {.ternary_clip = 0.0f});
  std::vector<double> mean(n, 0.0);
  float s = 0;
  for (uint32_t t = 0; t < trials; ++t) {
    ChunkHeader h;
    std::string p;
    ASSERT_TRUE(c->Encode(g, {.seed = 5, .clock = t}, &h, &p).ok());
    s = h.scale;
    const auto d = Decode(h, p);
    for (uint32_t i = 0; i < n; ++i) mean[i] += d[i] / trials;
  }
  // Each decoded value is s * Bernoulli(|g|/s) * sign: variance <= s^2 / 4.
  const double se = s * 0.5 / std::sqrt(trials);
  double total_err = 0;
  for (uint32_t i = 0; i < n; ++i) {
    EXPECT_NEAR(mean[i], g[i], 5.0 * se) << "i=" << i;
    total_err += mean[i] - g[i];
  }
  // The average error over all elements is far tighter: no systematic bias.
  EXPECT_NEAR(total_err / n, 0.0, 5.0 * se / std::sqrt(n));
}

// The encoder (whichever kernels this CPU picks) against NOTE [reproducible
// rounding] read literally: element i keeps its sign iff
// Uniform8(byte i % 16 of block i / 16) < |x| / s.
TEST(TernaryCodec, DrawsFollowTheNote) {
  const uint32_t n = 1000;  // not a multiple of 128: the AVX2 tail runs too
  const auto g = RandomGrad(n, 21);
  auto c = Make("ternary", {.ternary_clip = 0.0f});
  const EncodeKey key{.seed = 9, .worker = 3, .clock = 41, .tensor = 5, .chunk = 2};
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, key, &h, &p).ok());
  const PhiloxKey k = ChunkPhiloxKey(key.seed, key.tensor, key.chunk);
  const float inv_s = 1.0f / h.scale;
  int sent = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const PhiloxCounter block =
        Philox4x32<7>({i / 16, key.worker, key.clock, 0}, k);
    const bool keep = Uniform8(BlockBits8(block, i % 16)) < std::fabs(g[i]) * inv_s;
    const uint32_t want = keep ? (g[i] > 0 ? 1 : 2) : 0;
    ASSERT_EQ((static_cast<uint8_t>(p[i / 4]) >> (2 * (i % 4))) & 3, want) << "i=" << i;
    sent += keep;
  }
  EXPECT_GT(sent, 0);
  EXPECT_LT(sent, static_cast<int>(n));
}

TEST(TernaryCodec, ClipsAtCSigma) {
  std::vector<float> g = RandomGrad(10000, 12);
  g[123] = 1000.0f;  // one outlier far beyond 2.5 sigma
  auto c = Make("ternary", {.ternary_clip = 2.5f});
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(c->Encode(g, {}, &h, &p).ok());
  double mean = 0, sq = 0;
  for (float x : g) {
    mean += x;
    sq += double(x) * x;
  }
  mean /= g.size();
  const double sigma = std::sqrt(sq / g.size() - mean * mean);
  EXPECT_NEAR(h.scale, 2.5 * sigma, 1e-4 * sigma);
  EXPECT_LT(h.scale, 1000.0f);
  const auto d = Decode(h, p);
  EXPECT_EQ(d[123], h.scale) << "the outlier's probability is clipped to 1";
  for (float v : d) EXPECT_LE(std::fabs(v), h.scale);
}

// -------------------------------------------------------- malformed input --

class Malformed : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto g = RandomGrad(10, 13);
    ASSERT_TRUE(Make("twobit", {.twobit_threshold = 0.3f})->Encode(g, {}, &h_, &p_).ok());
  }
  void ExpectRejected(const ChunkHeader& h, const std::string& p, size_t n, const char* what) {
    std::vector<float> acc(n, 1.5f);
    auto s = DecodeAdd(h, p, absl::MakeSpan(acc), 1.0f);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
    EXPECT_FALSE(s.message().empty());
    EXPECT_EQ(acc, std::vector<float>(n, 1.5f)) << what << ": accumulator must be untouched";
  }
  ChunkHeader h_;
  std::string p_;
};

TEST_F(Malformed, WeightTimesValueOverflowIsRejected) {
  std::vector<float> acc(10, 1.5f);
  ChunkHeader h = h_;
  h.scale = 1e30f;
  EXPECT_EQ(DecodeAdd(h, p_, absl::MakeSpan(acc), 1e10f).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChunkDecoder::Create(h, p_, 10, 1e10f).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(acc, std::vector<float>(10, 1.5f));
  EXPECT_EQ(DecodeAdd(h_, p_, absl::MakeSpan(acc), NAN).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(Malformed, EveryClassIsInvalidArgumentAndLeavesAccUntouched) {
  ExpectRejected(h_, p_.substr(0, 2), 10, "truncated payload");
  ExpectRejected(h_, p_ + "x", 10, "long payload");
  ExpectRejected(h_, p_, 11, "count mismatch");
  std::string bad = p_;
  bad[1] = static_cast<char>(0x03);  // element 4 is code 11
  ExpectRejected(h_, bad, 10, "code 11");
  bad = p_;
  bad[2] = static_cast<char>(bad[2] | 0x40);  // padding bits of element 11
  ExpectRejected(h_, bad, 10, "padding");
  ChunkHeader h = h_;
  h.scale = NAN;
  ExpectRejected(h, p_, 10, "NaN scale");
  h.scale = INFINITY;
  ExpectRejected(h, p_, 10, "Inf scale");
  h.scale = -1.0f;
  ExpectRejected(h, p_, 10, "negative scale");
  h = h_;
  h.codec = static_cast<CodecType>(9);
  ExpectRejected(h, p_, 10, "unknown codec");
  h = h_;
  h.num_elems = 0xFFFFFFFFu;  // count overflow: payload would be 1 GiB
  ExpectRejected(h, p_, 10, "count overflow");
  ChunkHeader none{CodecType::kNone, 2, 0, 0};
  const float vals[2] = {1.0f, NAN};
  ExpectRejected(none, std::string(reinterpret_cast<const char*>(vals), 8), 2, "NaN in fp32");
  ChunkHeader one{CodecType::kOneBit, 3, 1.0f, NAN};
  ExpectRejected(one, std::string(1, '\x01'), 3, "onebit NaN value");
  one.scale2 = -1.0f;
  ExpectRejected(one, std::string(1, '\x81'), 3, "onebit padding");
  ChunkHeader half{CodecType::kHalf, 2, 1.0f, 0};
  const std::string ok_half("\x00\x3c\x00\xbc", 4);  // 1, -1
  std::vector<float> acc(2, 0.0f);
  ASSERT_TRUE(DecodeAdd(half, ok_half, absl::MakeSpan(acc), 1.0f).ok());
  EXPECT_EQ(acc, (std::vector<float>{1.0f, -1.0f}));
  ExpectRejected(half, std::string("\x00\x3c\x00\x7c", 4), 2, "fp16 Inf");
  ExpectRejected(half, std::string("\x00\x3c\x01\xfc", 4), 2, "fp16 NaN");
  for (float scale : {0.75f, 0.0f, -1.0f, INFINITY, NAN, std::ldexp(1.0f, -140)}) {
    half.scale = scale;
    ExpectRejected(half, ok_half, 2, "fp16 scale not a positive normal power of two");
  }
  half.scale = std::ldexp(1.0f, 127);  // 65504 * 2^127 overflows
  ExpectRejected(half, std::string("\xff\x7b\x00\x00", 4), 2, "fp16 overflow");
  ChunkHeader i8{CodecType::kInt8, 2, 0.5f, 0};
  const std::string ok_i8("\x7f\x81", 2);  // 127, -127
  acc.assign(2, 0.0f);
  ASSERT_TRUE(DecodeAdd(i8, ok_i8, absl::MakeSpan(acc), 1.0f).ok());
  EXPECT_EQ(acc, (std::vector<float>{63.5f, -63.5f}));
  ExpectRejected(i8, std::string("\x01\x80", 2), 2, "int8 code -128");
  for (float scale : {0.75f, 0.0f, -1.0f, INFINITY, NAN, std::ldexp(1.0f, -140)}) {
    i8.scale = scale;
    ExpectRejected(i8, ok_i8, 2, "int8 scale not a positive normal power of two");
  }
  i8.scale = std::ldexp(1.0f, 127);  // 127 * 2^127 overflows
  ExpectRejected(i8, ok_i8, 2, "int8 overflow");
  ChunkHeader i4{CodecType::kInt4, 3, 0.5f, 0};
  const std::string ok_i4("\x97\x09", 2);  // 7, -7, -7 and a zero padding nibble
  acc.assign(3, 0.0f);
  ASSERT_TRUE(DecodeAdd(i4, ok_i4, absl::MakeSpan(acc), 1.0f).ok());
  EXPECT_EQ(acc, (std::vector<float>{3.5f, -3.5f, -3.5f}));
  ExpectRejected(i4, std::string("\x87\x09", 2), 3, "int4 code -8");
  ExpectRejected(i4, std::string("\x97\x08", 2), 3, "int4 code -8 in the last byte");
  ExpectRejected(i4, std::string("\x97\x19", 2), 3, "int4 nonzero padding");
  for (float scale : {0.75f, 0.0f, -1.0f, INFINITY, NAN, std::ldexp(1.0f, -140)}) {
    i4.scale = scale;
    ExpectRejected(i4, ok_i4, 3, "int4 scale not a positive normal power of two");
  }
  i4.scale = std::ldexp(1.0f, 127);  // 7 * 2^127 overflows
  ExpectRejected(i4, ok_i4, 3, "int4 overflow");
  // ternary512 with 513 elements: two scales, then 129 bytes of codes.
  ChunkHeader t5{CodecType::kTernary512, 513, 0, 0};
  std::string ok_t5(8 + 129, '\0');
  const float t5_scales[2] = {1.0f, 0.25f};
  std::memcpy(ok_t5.data(), t5_scales, 8);
  ok_t5[8] = '\x09';    // +1 -1
  ok_t5[136] = '\x02';  // element 512: -1
  acc.assign(513, 0.0f);
  ASSERT_TRUE(DecodeAdd(t5, ok_t5, absl::MakeSpan(acc), 1.0f).ok());
  EXPECT_EQ(acc[0], 1.0f);
  EXPECT_EQ(acc[1], -1.0f);
  EXPECT_EQ(acc[512], -0.25f);
  for (float scale : {-1.0f, INFINITY, NAN}) {
    std::string bad_scale = ok_t5;
    std::memcpy(bad_scale.data() + 4, &scale, 4);
    ExpectRejected(t5, bad_scale, 513, "ternary512 block scale not finite and >= 0");
  }
  std::string bad_code = ok_t5;
  bad_code[9] = '\x03';
  ExpectRejected(t5, bad_code, 513, "ternary512 code 11");
  bad_code = ok_t5;
  bad_code[136] = '\x06';
  ExpectRejected(t5, bad_code, 513, "ternary512 nonzero padding");
  ExpectRejected(t5, ok_t5.substr(0, 136), 513, "ternary512 payload without its last byte");
  float huge = 1e38f;
  std::string big = ok_t5;
  std::memcpy(big.data(), &huge, 4);
  std::vector<float> big_acc(513, 1.5f);
  EXPECT_EQ(DecodeAdd(t5, big, absl::MakeSpan(big_acc), 1e10f).code(),
            absl::StatusCode::kInvalidArgument)
      << "weight times the largest block scale overflows";
}

TEST(Encode, OversizedChunkIsInvalidArgumentWithoutTouchingMemory) {
  float dummy = 0;
  // A span that claims 2^32 elements; Encode must refuse before reading it.
  absl::Span<const float> huge(&dummy, size_t{1} << 32);
  ChunkHeader h;
  std::string p;
  EXPECT_EQ(Make("twobit")->Encode(huge, {}, &h, &p).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Registry, UnknownNameIsNotFoundAndNamesTheKnownOnes) {
  auto c = CodecRegistry::Global().Create("fivebit", {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("twobit"), std::string::npos);
  EXPECT_EQ(CodecTypeFromName("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*CodecTypeFromName("ternary"), CodecType::kTernary);
  EXPECT_EQ(*CodecTypeFromName("fp16"), CodecType::kHalf);
  EXPECT_EQ(*CodecTypeFromName("int8"), CodecType::kInt8);
  EXPECT_EQ(*CodecTypeFromName("int4"), CodecType::kInt4);
  EXPECT_EQ(CodecRegistry::Global().Names().size(), static_cast<size_t>(kNumCodecTypes));
  RegisterBuiltinCodecs(CodecRegistry::Global());  // idempotent
  EXPECT_EQ(CodecRegistry::Global().Names().size(), static_cast<size_t>(kNumCodecTypes));
}

TEST(ErrorFeedback, WrongSizeIsInvalidArgument) {
  auto enc = MakeChunkEncoder("twobit", {}, true, 8);
  ASSERT_TRUE(enc.ok());
  std::vector<float> g(9, 1.0f);
  ChunkHeader h;
  std::string p;
  EXPECT_EQ((*enc)->Encode(g, {}, &h, &p).code(), absl::StatusCode::kInvalidArgument);
}

// -------------------------------------------- portable == AVX2, bit for bit --

// (gradient, residual) pairs of n elements that reach every branch of the
// kernels: plain; exact zeros of both signs (onebit's zero rule); one-sided
// chunks (onebit's zeros take 1 or 0); a ternary scale so small that the
// AVX2 loop hands the chunk to the portable one; a range so wide that
// |x| / s underflows.
std::vector<std::pair<std::vector<float>, std::vector<float>>> KernelInputs(uint32_t n) {
  std::vector<std::pair<std::vector<float>, std::vector<float>>> in;
  in.push_back({RandomGrad(n, n), RandomGrad(n, n + 1, 0.1f)});
  auto zeros = in[0];
  for (uint32_t i = 0; i < n; i += 3) {
    const float z = (i / 3) % 2 ? -0.0f : 0.0f;  // -0 + -0 is -0, so x keeps the sign
    zeros.first[i] = z;
    zeros.second[i] = z;
  }
  in.push_back(zeros);
  const std::vector<float> no_r(n, 0.0f);
  std::vector<float> nonneg = zeros.first, nonpos = zeros.first, tiny = in[0].first,
                     wide = in[0].first;
  for (uint32_t i = 0; i < n; ++i) {
    nonneg[i] = std::fabs(nonneg[i]);
    nonpos[i] = -std::fabs(nonpos[i]);
    tiny[i] *= 1e-38f;
    wide[i] *= i % 2 ? 1e30f : 1e-20f;
  }
  for (auto* v : {&nonneg, &nonpos, &tiny, &wide}) in.push_back({*v, no_r});
  return in;
}

// The vector tables this CPU runs: AVX2, and AVX-512 where it has that too.
std::vector<std::pair<std::string, const CodecKernels*>> VectorTables() {
  std::vector<std::pair<std::string, const CodecKernels*>> tables;
  if (internal::Avx2Kernels() != nullptr && __builtin_cpu_supports("avx2")) {
    tables.emplace_back("avx2", internal::Avx2Kernels());
  }
  if (internal::HasAvx512()) tables.emplace_back("avx512", internal::Avx512Kernels());
  return tables;
}

TEST(Kernels, VectorTablesMatchPortableBitForBit) {
  const auto tables = VectorTables();
  if (tables.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  const CodecKernels& ref = internal::PortableKernels();
  const PhiloxKey key = ChunkPhiloxKey(99, 3, 4);
  for (const auto& [name, avx] : tables)
  for (uint32_t n : {1u, 7u, 8u, 31u, 32u, 33u, 127u, 128u, 129u, 512u, 1000u, 4099u, 65536u + 5})
  for (const auto& [g, r0] : KernelInputs(n)) {
    SCOPED_TRACE(name);
    // statistics
    float m1, m2;
    double s1, s2, q1, q2;
    ref.moments(g.data(), r0.data(), n, &m1, &s1, &q1);
    avx->moments(g.data(), r0.data(), n, &m2, &s2, &q2);
    EXPECT_EQ(m1, m2);
    EXPECT_EQ(s1, s2) << n;
    EXPECT_EQ(q1, q2) << n;
    EXPECT_EQ(ref.sum_abs(g.data(), r0.data(), n), avx->sum_abs(g.data(), r0.data(), n));
    double ps1, ps2, ns1, ns2;
    uint32_t c1, c2, nc1, nc2;
    ref.sign_sums(g.data(), r0.data(), n, &ps1, &c1, &ns1, &nc1);
    avx->sign_sums(g.data(), r0.data(), n, &ps2, &c2, &ns2, &nc2);
    EXPECT_EQ(ps1, ps2);
    EXPECT_EQ(c1, c2);
    EXPECT_EQ(ns1, ns2);
    EXPECT_EQ(nc1, nc2);
    // encoders, with and without residual
    for (bool with_r : {false, true}) {
      auto ra = r0, rb = r0;
      float* pa = with_r ? ra.data() : nullptr;
      float* pb = with_r ? rb.data() : nullptr;
      std::vector<uint8_t> oa(4 * n + 8, 0xEE), ob(4 * n + 8, 0xEE);
      ref.encode_twobit(g.data(), pa, n, 0.4f, oa.data());
      avx->encode_twobit(g.data(), pb, n, 0.4f, ob.data());
      EXPECT_EQ(oa, ob) << "twobit n=" << n;
      EXPECT_EQ(ra, rb);
      const internal::TernaryParams tp = internal::TernaryParamsFromMoments(m1, s1, q1, n, 2.5f);
      ref.encode_ternary(g.data(), pa, n, tp, key, 2, 17, oa.data());
      avx->encode_ternary(g.data(), pb, n, tp, key, 2, 17, ob.data());
      EXPECT_EQ(oa, ob) << "ternary n=" << n;
      EXPECT_EQ(ra, rb);
      // the whole chunk (see [ternary passes]): the same bytes as moments +
      // encode_ternary above, and the AVX2 twin the same as the portable one
      for (float clip : {2.5f, 0.0f}) {
        auto rc = r0, rd = r0;
        std::vector<uint8_t> ca(4 * n + 8, 0xEE), cb(4 * n + 8, 0xEE);
        float sa = -1.0f, sb = -2.0f;
        ASSERT_TRUE(ref.encode_ternary_chunk(g.data(), with_r ? rc.data() : nullptr, n, clip, key,
                                             2, 17, ca.data(), &sa));
        ASSERT_TRUE(avx->encode_ternary_chunk(g.data(), with_r ? rd.data() : nullptr, n, clip,
                                              key, 2, 17, cb.data(), &sb));
        EXPECT_EQ(sa, sb);
        EXPECT_EQ(ca, cb) << "ternary chunk n=" << n;
        EXPECT_EQ(rc, rd);
        float m;
        double sum, sq;
        ref.moments(g.data(), with_r ? r0.data() : nullptr, n, &m, &sum, &sq);
        const internal::TernaryParams cp = internal::TernaryParamsFromMoments(m, sum, sq, n, clip);
        EXPECT_EQ(sa, cp.scale);
        if (cp.scale > 0.0f) {
          auto re = r0;
          std::vector<uint8_t> ce(4 * n + 8, 0xEE);
          ref.encode_ternary(g.data(), with_r ? re.data() : nullptr, n, cp, key, 2, 17, ce.data());
          EXPECT_EQ(ca, ce);
          EXPECT_EQ(rc, re);
        }
      }
      const internal::OneBitParams op = internal::OneBitParamsFromSums(ps1, c1, ns1, nc1);
      ref.encode_onebit(g.data(), pa, n, op, oa.data());
      avx->encode_onebit(g.data(), pb, n, op, ob.data());
      EXPECT_EQ(oa, ob) << "onebit n=" << n;
      EXPECT_EQ(ra, rb);
      ref.encode_f32(g.data(), pa, n, oa.data());
      avx->encode_f32(g.data(), pb, n, ob.data());
      EXPECT_EQ(oa, ob);
      EXPECT_EQ(ra, rb);
      ra = r0, rb = r0;
      const float mx = ref.max_abs(g.data(), pa, n);
      EXPECT_EQ(mx, avx->max_abs(g.data(), pb, n));
      for (float scale : {internal::HalfScale(mx), std::ldexp(1.0f, -20)}) {  // + overflows
        ref.encode_f16(g.data(), pa, n, scale, oa.data());
        avx->encode_f16(g.data(), pb, n, scale, ob.data());
        EXPECT_EQ(oa, ob) << "fp16 n=" << n;
        EXPECT_EQ(ra, rb);
        EXPECT_EQ(ref.max_abs_f16(oa.data(), n), avx->max_abs_f16(oa.data(), n));
      }
    }
    // fp16 decoders, over the halves of the last encode (overflows included)
    {
      std::vector<uint8_t> h16(2 * n + 8);
      ref.encode_f16(g.data(), nullptr, n, 0.5f, h16.data());
      std::vector<float> a = r0, b = r0;
      ref.decode_add_f16(h16.data(), n, 0.375f, a.data());
      avx->decode_add_f16(h16.data(), n, 0.375f, b.data());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 4 * size_t{n}));  // NaN-safe
      ref.decode_f16(h16.data(), n, a.data());
      avx->decode_f16(h16.data(), n, b.data());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 4 * size_t{n}));
    }
    // int8 at the chunk's scale, then its decoders
    {
      const float mx = ref.max_abs(g.data(), r0.data(), n);
      const float scale = internal::Int8Scale(mx);
      std::vector<uint8_t> ia(n), ib(n);
      std::vector<float> ra = r0, rb = r0;
      ref.encode_i8(g.data(), ra.data(), n, scale, ia.data());
      avx->encode_i8(g.data(), rb.data(), n, scale, ib.data());
      EXPECT_EQ(ia, ib) << "int8 n=" << n;
      EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), 4 * size_t{n}));
      std::vector<float> a = r0, b = r0;
      ref.decode_add_i8(ia.data(), n, 0.375f, a.data());
      avx->decode_add_i8(ia.data(), n, 0.375f, b.data());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 4 * size_t{n}));
      ref.decode_i8(ia.data(), n, a.data());
      avx->decode_i8(ia.data(), n, b.data());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 4 * size_t{n}));
    }
    // int4 likewise, and its validation of a payload with a -8 planted
    {
      const float mx = ref.max_abs(g.data(), r0.data(), n);
      const float scale = internal::Int4Scale(mx);
      std::vector<uint8_t> ia((n + 1) / 2), ib((n + 1) / 2);
      std::vector<float> ra = r0, rb = r0;
      ref.encode_i4(g.data(), ra.data(), n, scale, ia.data());
      avx->encode_i4(g.data(), rb.data(), n, scale, ib.data());
      EXPECT_EQ(ia, ib) << "int4 n=" << n;
      EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), 4 * size_t{n}));
      EXPECT_TRUE(ref.valid_i4(ia.data(), n));
      EXPECT_TRUE(avx->valid_i4(ia.data(), n));
      std::vector<float> a = r0, b = r0;
      ref.decode_add_i4(ia.data(), n, 0.375f, a.data());
      avx->decode_add_i4(ia.data(), n, 0.375f, b.data());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 4 * size_t{n}));
      ref.decode_i4(ia.data(), n, a.data());
      avx->decode_i4(ia.data(), n, b.data());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 4 * size_t{n}));
      if (n > 0) {
        std::vector<uint8_t> bad = ia;
        bad[(n - 1) / 2] = static_cast<uint8_t>((n - 1) % 2 ? 0x80 : 0x08);
        EXPECT_FALSE(ref.valid_i4(bad.data(), n)) << "n=" << n;
        EXPECT_FALSE(avx->valid_i4(bad.data(), n)) << "n=" << n;
        bad = ia;
        bad[0] = 0x08;
        EXPECT_FALSE(ref.valid_i4(bad.data(), n)) << "n=" << n;
        EXPECT_FALSE(avx->valid_i4(bad.data(), n)) << "n=" << n;
      }
    }
    // decoders
    std::vector<uint8_t> codes((n + 3) / 4);
    ref.encode_twobit(g.data(), nullptr, n, 0.4f, codes.data());
    EXPECT_TRUE(avx->valid_2bit(codes.data(), n));
    std::vector<float> acc_a = r0, acc_b = r0;
    ref.decode_add_2bit(codes.data(), n, 0.7f, acc_a.data());
    avx->decode_add_2bit(codes.data(), n, 0.7f, acc_b.data());
    EXPECT_EQ(acc_a, acc_b);
    ref.decode_add_1bit(codes.data(), n, 0.3f, -0.2f, acc_a.data());
    avx->decode_add_1bit(codes.data(), n, 0.3f, -0.2f, acc_b.data());
    EXPECT_EQ(acc_a, acc_b);
    ref.decode_add_f32(reinterpret_cast<const uint8_t*>(g.data()), n, 0.25f, acc_a.data());
    avx->decode_add_f32(reinterpret_cast<const uint8_t*>(g.data()), n, 0.25f, acc_b.data());
    EXPECT_EQ(acc_a, acc_b);
    // block decoders
    std::vector<float> out_a(n, 9.0f), out_b(n, 9.0f);
    ref.decode_2bit(codes.data(), n, 1.0f, out_a.data());
    avx->decode_2bit(codes.data(), n, 1.0f, out_b.data());
    EXPECT_EQ(out_a, out_b);
    for (uint32_t i = 0; i < n; ++i) {
      const int code = (codes[i / 4] >> (2 * (i % 4))) & 3;
      ASSERT_EQ(out_a[i], code == 1 ? 1.0f : code == 2 ? -1.0f : 0.0f) << i;
    }
    ref.decode_2bit(codes.data(), n, 0.37f, out_a.data());  // a ternary512 block's scale
    avx->decode_2bit(codes.data(), n, 0.37f, out_b.data());
    EXPECT_EQ(out_a, out_b);
    for (uint32_t i = 0; i < n; ++i) {
      const int code = (codes[i / 4] >> (2 * (i % 4))) & 3;
      ASSERT_EQ(out_a[i], code == 1 ? 0.37f : code == 2 ? -0.37f : 0.0f) << i;
    }
    ref.subtract(g.data(), r0.data(), n, out_a.data());
    avx->subtract(g.data(), r0.data(), n, out_b.data());
    EXPECT_EQ(out_a, out_b);
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(out_a[i], g[i] - r0[i]) << i;
    ref.decode_1bit(codes.data(), n, 0.3f, -0.2f, out_a.data());
    avx->decode_1bit(codes.data(), n, 0.3f, -0.2f, out_b.data());
    EXPECT_EQ(out_a, out_b);
    // an invalid code anywhere is found by both, and decodes as 0 in both
    codes[codes.size() / 2] |= 0x03;
    EXPECT_FALSE(ref.valid_2bit(codes.data(), n));
    EXPECT_FALSE(avx->valid_2bit(codes.data(), n));
    ref.decode_2bit(codes.data(), n, 0.37f, out_a.data());
    avx->decode_2bit(codes.data(), n, 0.37f, out_b.data());
    EXPECT_EQ(out_a, out_b);
    ref.decode_add_2bit(codes.data(), n, 0.7f, acc_a.data());
    avx->decode_add_2bit(codes.data(), n, 0.7f, acc_b.data());
    EXPECT_EQ(acc_a, acc_b);
  }
}

// Chunks above the draw scratch's limit (2^21 elements, see [ternary
// passes]) take the other path through the AVX2 kernel (which the AVX-512
// table hands them to): still the portable
// bytes and residual.
TEST(Kernels, VectorTernaryChunkMatchesPortableForALargeChunk) {
  const auto tables = VectorTables();
  if (tables.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  const CodecKernels& ref = internal::PortableKernels();
  const uint32_t n = (1u << 21) + 133;
  const auto g = RandomGrad(n, 21);
  const auto r0 = RandomGrad(n, 22);
  for (const auto& [name, avx] : tables)
  for (bool with_r : {false, true}) {
    SCOPED_TRACE(name);
    auto ra = r0, rb = r0;
    std::vector<uint8_t> oa((n + 3) / 4, 0xEE), ob((n + 3) / 4, 0xEE);
    float sa = -1.0f, sb = -2.0f;
    ASSERT_TRUE(ref.encode_ternary_chunk(g.data(), with_r ? ra.data() : nullptr, n, 2.5f,
                                         PhiloxKey{5, 6}, 1, 9, oa.data(), &sa));
    ASSERT_TRUE(avx->encode_ternary_chunk(g.data(), with_r ? rb.data() : nullptr, n, 2.5f,
                                          PhiloxKey{5, 6}, 1, 9, ob.data(), &sb));
    EXPECT_EQ(sa, sb);
    EXPECT_TRUE(oa == ob) << "codes differ, residual " << with_r;
    EXPECT_TRUE(ra == rb) << "residuals differ";
  }
}

// The fused ternary chunk has no NaN flag of its own in the AVX2 loop: a NaN
// or Inf anywhere, with or without residual, must still be reported.
TEST(Kernels, TernaryChunkRejectsNonFiniteAnywhere) {
  std::vector<const CodecKernels*> tables = {&internal::PortableKernels()};
  for (const auto& [name, k] : VectorTables()) tables.push_back(k);
  const uint32_t n = 1000;
  for (const CodecKernels* k : tables)
  for (float bad : {NAN, INFINITY, -INFINITY})
  for (uint32_t at : {0u, 5u, 127u, 128u, 700u, 999u})
  for (bool with_r : {false, true}) {
    std::vector<float> g(n, 0.25f), r(n, -0.125f);
    (with_r && at % 2 ? r : g)[at] = bad;
    std::vector<uint8_t> out(n / 4);
    float scale;
    EXPECT_FALSE(k->encode_ternary_chunk(g.data(), with_r ? r.data() : nullptr, n, 2.5f,
                                         PhiloxKey{1, 2}, 0, 0, out.data(), &scale))
        << bad << " at " << at;
  }
}

}  // namespace
}  // namespace gradstream
