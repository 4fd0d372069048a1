// GPU codec tests: the CUDA encoders must produce the CPU's bytes, and the
// CUDA decoder the CPU's sums, for every codec, for sizes that end on and off
// a packed byte, a Philox block and a thread block (ragged tails). Skipped
// only when no CUDA device is present.
#include <cmath>
#include <random>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/cuda_codec.h"
#include "common/codec/internal/codec_table.h"
#include "common/codec/internal/kernels.h"
#include "common/codec/registry.h"
#include "gtest/gtest.h"

#ifdef GS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gradstream {
namespace {

#ifndef GS_HAVE_CUDA

TEST(CudaCodec, ReportsMissingCudaClearly) {
  EXPECT_FALSE(cuda::DeviceAvailable());
  ChunkHeader h;
  auto s = cuda::EncodeOnDevice(CodecType::kTwoBit, {}, nullptr, nullptr, 4, {}, nullptr, &h,
                                nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  GTEST_SKIP() << "built without CUDA";
}

#else

template <typename T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : n(n) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T) + 16), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p); }
  void Put(const std::vector<T>& v) {
    ASSERT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> Get() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  T* p = nullptr;
  size_t n;
};

std::vector<float> RandomGrad(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> g(n);
  for (auto& x : g) x = d(rng);
  return g;
}

// Off and on every boundary: a 2-bit byte (4), a Philox block and 1-bit
// byte (8), a thread block of bytes (256 threads x 4 or 8 elements), and a
// chunk of the default size (2^18) plus a ragged tail.
constexpr uint32_t kSizes[] = {1,    2,    3,    4,    5,    7,    8,      9,     15,
                               16,   17,   31,   33,   1023, 1024, 1025,   2047,  2048,
                               2049, 4095, 4096, 4097, 65537, 262144, 262147, 1000003};

class CudaCodec : public ::testing::TestWithParam<CodecType> {
 protected:
  void SetUp() override {
    if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device is present";
  }
};

// Encodes on the device: EncodeOnDevice, or with `async` EncodeOnDeviceAsync
// and the header copied back from device memory afterwards.
void DeviceEncode(bool async, CodecType type, const CodecOptions& opt, const float* g, float* r,
                  uint32_t n, const EncodeKey& key, uint8_t* payload, ChunkHeader* h) {
  if (!async) {
    ASSERT_TRUE(cuda::EncodeOnDevice(type, opt, g, r, n, key, payload, h, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return;
  }
  DeviceBuffer<uint8_t> stats(cuda::kEncodeStatsBytes);
  DeviceBuffer<cuda::DeviceEncodeResult> result(1);
  ASSERT_EQ(cudaMemset(stats.p, 0, cuda::kEncodeStatsBytes), cudaSuccess);
  ASSERT_TRUE(
      cuda::EncodeOnDeviceAsync(type, opt, g, r, n, key, payload, result.p, stats.p, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const cuda::DeviceEncodeResult got = result.Get()[0];
  EXPECT_EQ(got.non_finite, 0u);
  EXPECT_EQ(got.header.codec, type);
  EXPECT_EQ(got.header.num_elems, n);
  *h = got.header;
}

// GPU bytes == CPU bytes for the GPU's scales; scales agree to a few ulps.
// Both forms: the header read back by the call, and the header the device
// wrote for the host to copy later (the device pusher's).
TEST_P(CudaCodec, EncodeMatchesCpuBitForBit) {
  const CodecType type = GetParam();
  const auto& cpu = internal::PortableKernels();
  for (bool async : {false, true}) {
    for (uint32_t n : kSizes) {
      SCOPED_TRACE(async ? "EncodeOnDeviceAsync" : "EncodeOnDevice");
      const auto g = RandomGrad(n, n), r = RandomGrad(n, n + 7);
      DeviceBuffer<float> dg(n), dr(n);
      DeviceBuffer<uint8_t> dp(PayloadBytes(type, n));
      dg.Put(g);
      dr.Put(r);
      ChunkHeader h;
      const EncodeKey key{.seed = 3, .worker = 1, .clock = 5, .tensor = 2, .chunk = 9};
      CodecOptions opt;
      opt.twobit_threshold = async ? 0.0f : 0.4f;  // the adaptive threshold once
      DeviceEncode(async, type, opt, dg.p, dr.p, n, key, dp.p, &h);
      if (HasFatalFailure()) return;
      std::vector<uint8_t> want(PayloadBytes(type, n));
      auto rc = r;
      switch (type) {
        case CodecType::kNone:
          cpu.encode_f32(g.data(), rc.data(), n, want.data());
          break;
        case CodecType::kTwoBit:
          cpu.encode_twobit(g.data(), rc.data(), n, h.scale, want.data());
          break;
        case CodecType::kTernary: {
          float m;
          double s, q;
          cpu.moments(g.data(), r.data(), n, &m, &s, &q);
          auto p = internal::TernaryParamsFromMoments(m, s, q, n, opt.ternary_clip);
          EXPECT_NEAR(h.scale, p.scale, 1e-5f * p.scale);
          p.scale = h.scale;  // same rules, GPU's scale
          cpu.encode_ternary(g.data(), rc.data(), n, p, ChunkPhiloxKey(3, 2, 9), 1, 5, want.data());
          break;
        }
        case CodecType::kOneBit:
          cpu.encode_onebit(g.data(), rc.data(), n, {h.scale, h.scale2}, want.data());
          break;
        default:  // not instantiated: no CUDA encoder (cuda_codec.h)
          GTEST_SKIP();
      }
      EXPECT_EQ(dp.Get(), want) << CodecTypeName(type) << " n=" << n;
      EXPECT_EQ(dr.Get(), rc) << "residuals";
    }
  }
}

// Codecs whose scale needs no reduction (none, twobit with a fixed
// threshold, ternary without clipping: a max is order-free) match the CPU
// codec object end to end, header included, over several rounds of error
// feedback: the device residual carries over exactly like the host one.
TEST_P(CudaCodec, ScaleFreeCodecsMatchTheCpuCodecObject) {
  const CodecType type = GetParam();
  if (type == CodecType::kOneBit) GTEST_SKIP() << "onebit's scales are sums (see cuda_codec.h)";
  CodecOptions opt;
  opt.twobit_threshold = 0.4f;
  opt.ternary_clip = 0.0f;
  for (uint32_t n : kSizes) {
    auto cpu = MakeChunkEncoder(CodecTypeName(type), opt, type != CodecType::kNone, n);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    DeviceBuffer<float> dg(n), dr(n);
    DeviceBuffer<uint8_t> dp(PayloadBytes(type, n));
    dr.Put(std::vector<float>(n, 0.0f));
    for (uint32_t round = 0; round < 3; ++round) {
      const auto g = RandomGrad(n, 31 * n + round);
      dg.Put(g);
      const EncodeKey key{.seed = 5, .worker = 2, .clock = round, .tensor = 1, .chunk = 4};
      ChunkHeader gpu_h, cpu_h;
      std::string cpu_p;
      ASSERT_TRUE(cuda::EncodeOnDevice(type, opt, dg.p, type == CodecType::kNone ? nullptr : dr.p,
                                       n, key, dp.p, &gpu_h, nullptr)
                      .ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_TRUE((*cpu)->Encode(g, key, &cpu_h, &cpu_p).ok());
      EXPECT_EQ(gpu_h.codec, cpu_h.codec);
      EXPECT_EQ(gpu_h.num_elems, cpu_h.num_elems);
      EXPECT_EQ(gpu_h.scale, cpu_h.scale) << CodecTypeName(type) << " n=" << n;
      EXPECT_EQ(gpu_h.scale2, cpu_h.scale2);
      const auto got = dp.Get();
      ASSERT_EQ(std::string(got.begin(), got.end()), cpu_p)
          << CodecTypeName(type) << " n=" << n << " round " << round;
    }
  }
}

// A chunk holding NaN, for the codecs whose scale is a statistic (twobit with
// an adaptive threshold): refused like on the CPU, with the residual and the
// payload untouched; the asynchronous form flags it in the device result.
TEST_P(CudaCodec, NonFiniteInputIsRefusedAndTouchesNothing) {
  const CodecType type = GetParam();
  if (type == CodecType::kNone) GTEST_SKIP() << "none has no statistic (cuda_codec.h)";
  CodecOptions opt;
  opt.twobit_threshold = 0.0f;  // adaptive
  const uint32_t n = 4097;
  auto g = RandomGrad(n, 4);
  g[1234] = NAN;
  const auto r = RandomGrad(n, 5);
  const std::vector<uint8_t> sentinel(PayloadBytes(type, n), 0xA5);
  for (bool async : {false, true}) {
    DeviceBuffer<float> dg(n), dr(n);
    DeviceBuffer<uint8_t> dp(sentinel.size()), stats(cuda::kEncodeStatsBytes);
    DeviceBuffer<cuda::DeviceEncodeResult> result(1);
    dg.Put(g);
    dr.Put(r);
    dp.Put(sentinel);
    if (async) {
      ASSERT_EQ(cudaMemset(stats.p, 0, cuda::kEncodeStatsBytes), cudaSuccess);
      ASSERT_TRUE(cuda::EncodeOnDeviceAsync(type, opt, dg.p, dr.p, n, {}, dp.p, result.p, stats.p,
                                            nullptr)
                      .ok());
      EXPECT_EQ(result.Get()[0].non_finite, 1u) << CodecTypeName(type);
    } else {
      ChunkHeader h;
      EXPECT_EQ(cuda::EncodeOnDevice(type, opt, dg.p, dr.p, n, {}, dp.p, &h, nullptr).code(),
                absl::StatusCode::kInvalidArgument)
          << CodecTypeName(type);
    }
    EXPECT_EQ(dr.Get(), r) << CodecTypeName(type) << (async ? " async" : "");
    EXPECT_EQ(dp.Get(), sentinel) << CodecTypeName(type) << (async ? " async" : "");
  }
}

TEST_P(CudaCodec, DecodeAddMatchesCpu) {
  const CodecType type = GetParam();
  const uint32_t n = 77777;
  const auto g = RandomGrad(n, 1);
  auto codec = internal::FindCodec(type)->new_encoder({});
  ChunkHeader h;
  std::string p;
  ASSERT_TRUE(codec->Encode(g, {}, &h, &p).ok());
  std::vector<float> acc = RandomGrad(n, 2);
  DeviceBuffer<float> dacc(n);
  DeviceBuffer<uint8_t> dp(p.size());
  dacc.Put(acc);
  dp.Put(std::vector<uint8_t>(p.begin(), p.end()));
  ASSERT_TRUE(cuda::DecodeAddOnDevice(h, dp.p, p.size(), dacc.p, 0.5f, nullptr).ok());
  ASSERT_TRUE(DecodeAdd(h, p, absl::MakeSpan(acc), 0.5f).ok());
  const auto got = dacc.Get();
  for (uint32_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], acc[i], 1e-6f * (1 + std::fabs(acc[i])));
}

TEST(CudaCodecMalformed, InvalidCodeLeavesAccumulatorUntouched) {
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device is present";
  ChunkHeader h{CodecType::kTwoBit, 8, 0.5f, 0};
  std::vector<uint8_t> bad = {0x03, 0x00};
  DeviceBuffer<float> dacc(8);
  DeviceBuffer<uint8_t> dp(2);
  dacc.Put(std::vector<float>(8, 2.0f));
  dp.Put(bad);
  EXPECT_EQ(cuda::DecodeAddOnDevice(h, dp.p, 2, dacc.p, 1.0f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dacc.Get(), std::vector<float>(8, 2.0f));
}

INSTANTIATE_TEST_SUITE_P(Codecs, CudaCodec,
                         ::testing::Values(CodecType::kNone, CodecType::kTwoBit,
                                           CodecType::kTernary, CodecType::kOneBit));

#endif  // GS_HAVE_CUDA

}  // namespace
}  // namespace gradstream
