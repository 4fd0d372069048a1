// libFuzzer target for the codec decoders (and, on the same bytes, the
// encoders). Built by scripts/fuzz.sh with clang, ASan and UBSan.
//
// Input layout: [codec:1][num_elems:2][scale:4][scale2:4][weight:4][payload...]
// Properties checked beyond "no crash, no sanitizer report":
//  - a rejected chunk leaves the accumulator bit-for-bit unchanged;
//  - an accepted chunk leaves it finite;
//  - the block decoder (the optimizer's path) accepts exactly the same chunks
//    and decodes the same values as DecodeAdd;
//  - encoding any finite floats with any codec decodes back to finite values
//    and keeps the error-feedback identity g == decoded + residual.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/decoder.h"
#include "common/codec/registry.h"

namespace {

template <typename T>
T Take(const uint8_t*& data, size_t& size) {
  T v{};
  const size_t k = std::min(sizeof(T), size);
  std::memcpy(&v, data, k);
  data += k;
  size -= k;
  return v;
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradstream;
  gradstream::ChunkHeader h;
  // Two ids past the last codec stand for unknown ones.
  h.codec = static_cast<CodecType>(Take<uint8_t>(data, size) % (kNumCodecTypes + 2));
  h.num_elems = Take<uint16_t>(data, size);
  h.scale = Take<float>(data, size);
  h.scale2 = Take<float>(data, size);
  const float weight = Take<float>(data, size);
  const std::string payload(reinterpret_cast<const char*>(data), size);

  // Sometimes claim the right element count, sometimes not.
  const size_t n = (h.num_elems & 1) ? h.num_elems : PayloadBytes(h.codec, h.num_elems) == size
                                                         ? h.num_elems
                                                         : (h.num_elems + 1) % 4096;
  std::vector<float> acc(n, 0.5f);
  const std::vector<float> before = acc;
  const absl::Status s = DecodeAdd(h, payload, absl::MakeSpan(acc), weight);
  if (!s.ok()) {
    Check(n == 0 || std::memcmp(acc.data(), before.data(), n * sizeof(float)) == 0,
          "rejected chunk modified the accumulator");
    Check(s.code() == absl::StatusCode::kInvalidArgument, "rejection is not InvalidArgument");
  } else {
    for (float v : acc) Check(std::isfinite(v), "accepted chunk produced a non-finite value");
  }
  // The block decoder (the optimizer's path) accepts exactly what DecodeAdd
  // accepts and decodes the same values.
  const absl::StatusOr<ChunkDecoder> chunk = ChunkDecoder::Create(h, payload, n, weight);
  Check(chunk.ok() == s.ok(), "block decoder and DecodeAdd disagree on validity");
  if (chunk.ok()) {
    std::vector<float> scratch(256);
    for (uint32_t base = 0; base < n; base += 256) {
      const uint32_t m = std::min<uint32_t>(256, static_cast<uint32_t>(n) - base);
      const float* u = chunk->Block(base, m, scratch.data());
      for (uint32_t i = 0; i < m; ++i) {
        const float got = before[base + i] + chunk->block_scale() * u[i];
        Check(std::isfinite(chunk->block_scale() * u[i]), "block value overflows");
        Check(got == acc[base + i], "block decode differs from DecodeAdd");
      }
    }
  }

  // Encode the payload bytes reinterpreted as floats with every codec.
  std::vector<float> grad(size / 4);
  if (!grad.empty()) std::memcpy(grad.data(), data, grad.size() * 4);
  for (int type = 0; type < kNumCodecTypes; ++type) {
    auto enc = MakeChunkEncoder(CodecTypeName(static_cast<CodecType>(type)), {},
                                /*error_feedback=*/false, grad.size());
    Check(enc.ok(), "built-in codec missing");
    std::vector<float> residual(grad.size(), 0.0f);
    ChunkHeader eh;
    std::string ep;
    const absl::Status es =
        (*enc)->EncodeWithResidual(grad, absl::MakeSpan(residual), {}, &eh, &ep);
    bool finite = true;
    for (float g : grad) finite &= std::isfinite(g);
    if (!es.ok()) continue;  // NaN/Inf input, or sums that overflow
    std::vector<float> dec(grad.size(), 0.0f);
    const absl::Status ds = DecodeAdd(eh, ep, absl::MakeSpan(dec), 1.0f);
    if (!ds.ok()) {
      // Only an overflowing scale (|g| near FLT_MAX) may make a chunk we
      // produced undecodable.
      Check(finite, "encoder accepted non-finite input");
      continue;
    }
    for (size_t i = 0; i < grad.size(); ++i) {
      // "Up to fp32 rounding": residual = x - decoded rounds relative to the
      // larger of the two, so the bound scales with |decoded| too.
      const double lhs = grad[i], rhs = double(dec[i]) + residual[i];
      const double tol = 1e-6 * (1.0 + std::fabs(lhs) + std::fabs(dec[i]));
      Check(std::fabs(lhs - rhs) <= tol || !std::isfinite(rhs), "g != decoded + residual");
    }
  }
  return 0;
}
