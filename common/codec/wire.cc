// ChunkHeader <-> v1::EncodedChunk. See wire.h.
#include "common/codec/wire.h"

#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace gradstream {
namespace {

// Every CodecType beside its v1::Codec. Adding a codec without its wire value
// (or a wire value without its codec) fails to compile here.
constexpr std::pair<CodecType, v1::Codec> kWireCodecs[] = {
    {CodecType::kNone, v1::CODEC_NONE},
    {CodecType::kTwoBit, v1::CODEC_TWOBIT},
    {CodecType::kTernary, v1::CODEC_TERNARY},
    {CodecType::kOneBit, v1::CODEC_ONEBIT},
    {CodecType::kHalf, v1::CODEC_FP16},
    {CodecType::kInt8, v1::CODEC_INT8},
    {CodecType::kInt4, v1::CODEC_INT4},
    {CodecType::kTernary512, v1::CODEC_TERNARY512},
};

constexpr bool EnumsAgree() {
  for (int i = 0; i < kNumCodecTypes; ++i) {
    const auto [ours, wire] = kWireCodecs[i];
    if (static_cast<int>(ours) != i || static_cast<int>(wire) != i) return false;
  }
  return true;
}
static_assert(std::size(kWireCodecs) == kNumCodecTypes, "a v1::Codec for every CodecType");
static_assert(v1::Codec_MIN == 0 && v1::Codec_MAX == kNumCodecTypes - 1,
              "a CodecType for every v1::Codec");
// So conversion is a cast once the value is known to be in range.
static_assert(EnumsAgree(), "CodecType and v1::Codec values are equal");

}  // namespace

v1::Codec CodecToWire(CodecType type) {
  CHECK(IsKnownCodec(type)) << "codec id " << static_cast<int>(type);
  return static_cast<v1::Codec>(type);
}

void ChunkToWire(const ChunkHeader& header, v1::EncodedChunk* chunk) {
  chunk->set_codec(CodecToWire(header.codec));
  chunk->set_num_elems(header.num_elems);
  chunk->set_scale(header.scale);
  chunk->set_scale2(header.scale2);
}

void ChunkToWire(const ChunkHeader& header, std::string payload, v1::EncodedChunk* chunk) {
  ChunkToWire(header, chunk);
  *chunk->mutable_payload() = std::move(payload);
}

absl::StatusOr<ChunkHeader> ChunkHeaderFromWire(const v1::EncodedChunk& chunk) {
  // An open proto3 enum: the field may hold any int32.
  const int codec = chunk.codec();
  if (codec < 0 || codec >= kNumCodecTypes) {
    return absl::InvalidArgumentError(absl::StrCat("unknown codec ", codec));
  }
  ChunkHeader h;
  h.codec = static_cast<CodecType>(codec);
  h.num_elems = chunk.num_elems();
  h.scale = chunk.scale();
  h.scale2 = chunk.scale2();
  return h;
}

}  // namespace gradstream
