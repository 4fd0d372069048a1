// Chunk validation and decoding; the per-codec rules and kernels come from
// the codec table (see [codec table]).
#include "common/codec/decoder.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/codec/internal/codec_table.h"
#include "common/status.h"

namespace gradstream {

absl::StatusOr<ChunkDecoder> ChunkDecoder::Create(const ChunkHeader& h, absl::string_view payload,
                                                  size_t expected_elems, float weight) {
  if (!std::isfinite(weight)) return absl::InvalidArgumentError("decode weight is not finite");
  const internal::CodecRow* row = internal::FindCodec(h.codec);
  if (row == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown codec id ", static_cast<int>(h.codec)));
  }
  if (h.num_elems != expected_elems) {
    return absl::InvalidArgumentError(absl::StrCat("chunk header says ", h.num_elems,
                                                   " elements, expected ", expected_elems));
  }
  const size_t want = PayloadBytes(h.codec, h.num_elems);
  if (payload.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(row->name, " payload of ", payload.size(),
                                                   " bytes for ", h.num_elems,
                                                   " elements, expected ", want));
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(payload.data());
  float max_magnitude = 0.0f;
  GS_RETURN_IF_ERROR(row->validate(h, bytes, &max_magnitude));
  if (!std::isfinite(std::fabs(weight) * max_magnitude)) {
    return absl::InvalidArgumentError(absl::StrCat("decode weight ", weight, " times value ",
                                                   max_magnitude, " overflows fp32"));
  }
  return ChunkDecoder(row, h, bytes, weight, row->block_scale(h, weight),
                      std::fabs(weight) * max_magnitude);
}

void ChunkDecoder::AddTo(float* acc) const {
  row_->decode_add(header_, payload_, 0, header_.num_elems, weight_, acc);
}

void ChunkDecoder::AddRangeTo(uint32_t begin, uint32_t n, float* acc) const {
  row_->decode_add(header_, payload_, begin, n, weight_, acc);
}

const float* ChunkDecoder::Block(uint32_t begin, uint32_t n, float* scratch) const {
  return row_->decode_block(header_, payload_, begin, n, scratch);
}

absl::Status DecodeAdd(const ChunkHeader& h, absl::string_view payload, absl::Span<float> acc,
                       float weight) {
  GS_ASSIGN_OR_RETURN(const ChunkDecoder chunk,
                      ChunkDecoder::Create(h, payload, acc.size(), weight));
  chunk.AddTo(acc.data());
  return absl::OkStatus();
}

}  // namespace gradstream
