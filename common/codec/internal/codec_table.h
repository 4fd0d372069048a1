// The codec table: one row per codec. Internal to common/codec.
//
// NOTE: [codec table] Everything the library knows about one codec -- its
// name, payload size, what counts as a malformed chunk, how to decode it and
// how to make its encoder -- is one CodecRow, listed in codec.cc in
// CodecType order. CodecTypeName, PayloadBytes, the registry's built-ins,
// ChunkDecoder (and so DecodeAdd and the optimizer's fused apply) all read
// the table; none of them switches on CodecType. Adding a codec is adding a
// row (see README.md, "How to add a codec").
#ifndef GRADSTREAM_COMMON_CODEC_INTERNAL_CODEC_TABLE_H_
#define GRADSTREAM_COMMON_CODEC_INTERNAL_CODEC_TABLE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"

namespace gradstream {
namespace internal {

struct CodecRow {
  CodecType type;
  // CodecTypeName(type): the name job specs and the registry use.
  const char* name;
  // The payload is 4 * ceil(num_elems / scale_block) bytes of fp32 scales
  // (none when scale_block is 0), then ceil(num_elems * bits_per_elem / 8).
  uint32_t bits_per_elem;
  uint32_t scale_block;
  // Checks the header's scales and the payload's content of a chunk whose
  // element count and payload length are already right. InvalidArgument
  // naming what is wrong; on OK *max_magnitude is the largest |value| any
  // element decodes to (before the weight), so ChunkDecoder can prove that
  // weight * value stays finite. See [chunk validation] in decoder.h.
  absl::Status (*validate)(const ChunkHeader& h, const uint8_t* payload, float* max_magnitude);
  // acc[i - begin] += weight * value_i for i in [begin, begin + n) of a
  // validated chunk (begin % 8 == 0).
  void (*decode_add)(const ChunkHeader& h, const uint8_t* payload, uint32_t begin, uint32_t n,
                     float weight, float* acc);
  // Elements [begin, begin + n) of a validated chunk (begin % 8 == 0) as u_i
  // with weight * value_i == block_scale(h, weight) * u_i. Writes `scratch`
  // (n floats) and returns it, or returns a pointer into the payload when
  // the payload already holds u (aligned raw fp32).
  const float* (*decode_block)(const ChunkHeader& h, const uint8_t* payload, uint32_t begin,
                               uint32_t n, float* scratch);
  float (*block_scale)(const ChunkHeader& h, float weight);
  // A fresh per-chunk encoder.
  std::unique_ptr<Codec> (*new_encoder)(const CodecOptions& options);
};

// The row of `type`; nullptr for an unknown type.
const CodecRow* FindCodec(CodecType type);
// All rows, in CodecType order (row i has type i).
absl::Span<const CodecRow> CodecRows();

// Encodes elements [begin, begin + n) of a `num_elems`-element ternary512
// chunk into `payload` (PayloadBytes long): their blocks' scales and codes,
// the bits a whole-chunk encode writes there. x[0] (and residual[0], when
// not null) is element `begin`; begin % kTernaryScaleBlock == 0. False when
// some x is not finite.
bool EncodeTernary512Range(const float* x, float* residual, uint32_t num_elems, uint32_t begin,
                           uint32_t n, float clip_factor, const EncodeKey& key, uint8_t* payload);

}  // namespace internal
}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_INTERNAL_CODEC_TABLE_H_
