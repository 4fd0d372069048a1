// ChunkDecoder: the one way to read an encoded chunk.
//
// NOTE: [chunk validation] A chunk from the network is checked completely
// before any of it is decoded, so a rejected chunk changes nothing. The rules,
// the same for every consumer (DecodeAdd, the optimizer's fused apply, the
// fuzzers), all InvalidArgument:
//   - the codec is known and num_elems is what the consumer expects;
//   - the payload is exactly PayloadBytes(codec, num_elems) long;
//   - the codec's own rules (its validate in the codec table): no 2-bit code
//     11, zero padding bits, finite scales (>= 0 for twobit/ternary), finite
//     raw fp32 values;
//   - the weight is finite and weight * (largest |decoded value|) does not
//     overflow fp32, so every term a decoder adds or applies is finite.
// Only the accumulator's own growth can still overflow afterwards; that is
// the optimizer's divergence check, not bad input.
#ifndef GRADSTREAM_COMMON_CODEC_DECODER_H_
#define GRADSTREAM_COMMON_CODEC_DECODER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"

namespace gradstream {
namespace internal {
struct CodecRow;
}  // namespace internal

// A validated chunk, decoded either fused into an accumulator (AddTo) or
// block by block into a caller's buffer (Block, for consumers that fuse the
// decode with their own arithmetic, like Optimizer::ApplyEncoded). Views the
// payload, which must outlive it. Immutable, so thread-compatible.
class ChunkDecoder {
 public:
  // Validates `header` + `payload` for a consumer that expects
  // `expected_elems` elements and scales every value by `weight`; see
  // [chunk validation] for the InvalidArgument cases.
  [[nodiscard]] static absl::StatusOr<ChunkDecoder> Create(const ChunkHeader& header,
                                                           absl::string_view payload,
                                                           size_t expected_elems, float weight);

  uint32_t num_elems() const { return header_.num_elems; }

  // acc[i] += weight * value_i; acc has num_elems() elements.
  void AddTo(float* acc) const;
  // The same for elements [begin, begin + n) only (begin % 8 == 0, begin +
  // n <= num_elems()): acc[i] += weight * value_{begin + i}, with the same
  // arithmetic per element as AddTo, so a chunk added range by range is
  // bit-identical to AddTo.
  void AddRangeTo(uint32_t begin, uint32_t n, float* acc) const;

  // Elements [begin, begin + n) (begin % 8 == 0, begin + n <= num_elems())
  // as u with weight * value_i == block_scale() * u_i: fills `scratch` (n
  // floats) and returns it, or returns a pointer into the payload where it
  // already holds u.
  const float* Block(uint32_t begin, uint32_t n, float* scratch) const;
  float block_scale() const { return block_scale_; }
  // The largest |weight * value_i| (found while validating; finite).
  float max_abs() const { return max_abs_; }

 private:
  ChunkDecoder(const internal::CodecRow* row, const ChunkHeader& header, const uint8_t* payload,
               float weight, float block_scale, float max_abs)
      : row_(row),
        header_(header),
        payload_(payload),
        weight_(weight),
        block_scale_(block_scale),
        max_abs_(max_abs) {}

  const internal::CodecRow* row_;
  ChunkHeader header_;
  const uint8_t* payload_;
  float weight_;
  float block_scale_;
  float max_abs_;
};

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_DECODER_H_
