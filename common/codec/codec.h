// Gradient codecs: the interface, the chunk header and the free decode entry.
//
// A codec turns one chunk of an fp32 gradient (at most 2^32-1 elements) into
// a ChunkHeader plus a packed payload, and back, fused with accumulation.
// The payload layouts and the header's wire form are in README.md beside this
// file ("Wire format"); so is the checklist for adding a codec. Everything the
// library knows about one codec is one row of the codec table, see
// [codec table] in internal/codec_table.h.
//
// Two rules every implementation (portable, AVX2, AVX-512, CUDA) follows:
//   ternary : stochastic, one 8-bit Philox4x32-7 draw per element, so
//             E[decoded] is within s/512 of the clipped g (NOTE:
//             [reproducible rounding] in common/philox.h: the bound, why).
//   ternary512: ternary with one scale (and clip) per block of
//             kTernaryScaleBlock elements, the scales at the payload's start;
//             block b draws with BlockPhiloxKey(chunk key, b) (QSGD's
//             buckets: the noise of a block follows its own magnitude).
//   onebit  : 1 -> scale (the mean of the positive entries), 0 -> scale2
//             (the mean of the negative ones). An exact zero is in neither
//             mean and gets the bit whose value is nearer to 0 (1 on a tie);
//             error feedback keeps the difference (NOTE: [onebit zeros] in
//             internal/kernels.h).
//   fp16    : x / 2^k rounded to the nearest IEEE half (ties to even), 2^k
//             the chunk's scale, chosen so max |x| / 2^k < 2^15 (NOTE: [fp16
//             scale] in internal/kernels.h).
//   int8    : x / 2^k rounded to the nearest integer (ties to even), 2^k the
//             chunk's scale, chosen so every code is within +-127 (NOTE:
//             [int8 scale] in internal/kernels.h).
//   int4    : the same rule within +-7, two codes a byte (NOTE: [int4
//             scale] in internal/kernels.h).
//
// Encoders are per-chunk objects (like BytePS compressors, one per tensor
// partition): the error-feedback decorator owns residual state, so Encode is
// non-const and an encoder belongs to one thread. Decoding is stateless and
// goes through ChunkDecoder (decoder.h) or the free function DecodeAdd(), so a
// server never needs an encoder object.
#ifndef GRADSTREAM_COMMON_CODEC_CODEC_H_
#define GRADSTREAM_COMMON_CODEC_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gradstream {

// The values are the wire's v1::Codec values (a static_assert in wire.cc ties
// the two enums) and run 0..kNumCodecTypes-1 without gaps.
enum class CodecType : uint8_t {
  kNone = 0, kTwoBit = 1, kTernary = 2, kOneBit = 3, kHalf = 4, kInt8 = 5, kInt4 = 6,
  kTernary512 = 7
};
inline constexpr int kNumCodecTypes = 8;

// False for a byte that names no codec of this build (a header read off the
// wire or fuzzed may hold any value).
constexpr bool IsKnownCodec(CodecType type) {
  return static_cast<int>(type) < kNumCodecTypes;
}

// "none", "twobit", "ternary", "onebit", "fp16", "int8", "int4", "ternary512"; "unknown" for an
// unknown value.
absl::string_view CodecTypeName(CodecType type);
// Inverse of CodecTypeName; NotFound for an unknown name.
absl::StatusOr<CodecType> CodecTypeFromName(absl::string_view name);

// Metadata of one encoded chunk. Travels beside the payload.
struct ChunkHeader {
  CodecType codec = CodecType::kNone;
  uint32_t num_elems = 0;
  float scale = 0.0f;   // twobit: t; ternary: s; onebit: value of a 1 bit; fp16, int8, int4: 2^k;
                        // ternary512: unused (its scales are in the payload)
  float scale2 = 0.0f;  // onebit: value of a 0 bit; unused otherwise
};

// Elements per scale of a ternary512 chunk (the last block may be shorter).
inline constexpr uint32_t kTernaryScaleBlock = 512;

// Exact payload size in bytes for `num_elems` elements of `type` (0 for an
// unknown type).
size_t PayloadBytes(CodecType type, uint32_t num_elems);

// Keys the counter-based generator used for stochastic rounding. The element
// index is the counter, so encodings are reproducible on any device.
// See NOTE: [reproducible rounding] in common/philox.h.
struct EncodeKey {
  uint64_t seed = 0;
  uint32_t worker = 0;
  uint32_t clock = 0;
  uint32_t tensor = 0;
  uint32_t chunk = 0;
};

// Typed options of the built-in codecs, filled once from a job's codec policy.
struct CodecOptions {
  // twobit threshold t (MXNet default 0.5). <= 0 selects the adaptive
  // threshold t = mean(|g + r|) of the chunk (Hylo-style, per chunk).
  float twobit_threshold = 0.5f;
  // ternary clip factor c: clip to [-c*sigma, c*sigma] before taking the
  // scale (TernGrad uses 2.5). <= 0 disables clipping.
  float ternary_clip = 2.5f;
};

// A chunk encoder. Not thread-safe: one instance per (tensor, chunk) per
// worker, because decorators such as ErrorFeedback keep per-chunk state.
class Codec {
 public:
  virtual ~Codec() = default;

  virtual CodecType type() const = 0;

  // Encodes `grad` into `header` and `payload` (resized to PayloadBytes).
  // InvalidArgument when grad has more than 2^32-1 elements or holds NaN/Inf
  // that would make the scale non-finite.
  [[nodiscard]] virtual absl::Status Encode(absl::Span<const float> grad, const EncodeKey& key,
                                            ChunkHeader* header, std::string* payload) = 0;

  // Error-feedback encode fused into one pass (1-bit SGD, Seide 2014):
  //   x = grad + residual; encode x; residual = x - decoded(x).
  // so grad + r_old == decoded + r_new elementwise up to fp32 rounding.
  // `residual` must have grad.size() elements. After an error for NaN/Inf
  // its contents are unspecified (the encoders that find it while encoding,
  // or in a pass that already wrote x = grad + residual, have changed it).
  [[nodiscard]] virtual absl::Status EncodeWithResidual(absl::Span<const float> grad,
                                                        absl::Span<float> residual,
                                                        const EncodeKey& key, ChunkHeader* header,
                                                        std::string* payload) = 0;
};

// acc[i] += weight * decoded[i] for a chunk in any built-in codec.
// Validates the whole chunk before touching `acc` (ChunkDecoder::Create in
// decoder.h: InvalidArgument with a message for an unknown codec,
// num_elems != acc.size(), a payload length that does not match, an invalid
// 2-bit code 11, nonzero padding, a NaN/Inf scale or value, or a weight whose
// product with some decoded value overflows fp32); `acc` is then unchanged.
[[nodiscard]] absl::Status DecodeAdd(const ChunkHeader& header, absl::string_view payload,
                                     absl::Span<float> acc, float weight);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_CODEC_H_
