// GPU codec tests: the CUDA encoders must produce the CPU's bytes, and the
// CUDA decoder the CPU's sums. Skipped only when no CUDA device is present.
#include <cmath>
#include <random>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/cuda_codec.h"
#include "common/codec/internal/codec_table.h"
#include "common/codec/internal/kernels.h"
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
  explicit DeviceBuffer(size_t n) : n(n) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(T) + 16), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  void Put(const std::vector<T>& v) { ASSERT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess); }
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

class CudaCodec : public ::testing::TestWithParam<CodecType> {
 protected:
  void SetUp() override {
    if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

// GPU bytes == CPU bytes for the GPU's scales; scales agree to a few ulps.
TEST_P(CudaCodec, EncodeMatchesCpuBitForBit) {
  const CodecType type = GetParam();
  const auto& cpu = internal::PortableKernels();
  for (uint32_t n : {1u, 5u, 4096u, 1000003u}) {
    const auto g = RandomGrad(n, n), r = RandomGrad(n, n + 7);
    DeviceBuffer<float> dg(n), dr(n);
    DeviceBuffer<uint8_t> dp(PayloadBytes(type, n));
    dg.Put(g);
    dr.Put(r);
    ChunkHeader h;
    const EncodeKey key{.seed = 3, .worker = 1, .clock = 5, .tensor = 2, .chunk = 9};
    CodecOptions opt;
    opt.twobit_threshold = 0.4f;
    ASSERT_TRUE(cuda::EncodeOnDevice(type, opt, dg.p, dr.p, n, key, dp.p, &h, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
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
    }
    EXPECT_EQ(dp.Get(), want) << CodecTypeName(type) << " n=" << n;
    EXPECT_EQ(dr.Get(), rc) << "residuals";
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
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device";
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
