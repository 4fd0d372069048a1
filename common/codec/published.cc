#include "common/codec/published.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "common/codec/decoder.h"
#include "common/codec/internal/codec_table.h"
#include "common/codec/internal/kernels.h"
#include "common/codec/registry.h"
#include "common/env/crc32c.h"
#include "common/status.h"

namespace gradstream {

uint32_t PublishedChecksum(absl::Span<const float> copy) {
  return Crc32c(std::string_view(reinterpret_cast<const char*>(copy.data()),
                                 copy.size() * sizeof(float)));
}

absl::StatusOr<uint32_t> ApplyPublishedDelta(const ChunkHeader& header,
                                              absl::string_view payload, absl::Span<float> copy) {
  GS_ASSIGN_OR_RETURN(const ChunkDecoder delta,
                      ChunkDecoder::Create(header, payload, copy.size(), 1.0f));
  return ApplyPublishedDelta(delta, copy);
}

uint32_t ApplyPublishedDelta(const ChunkDecoder& delta, absl::Span<float> copy) {
  uint32_t crc = 0;
  for (size_t begin = 0; begin < copy.size(); begin += kPublishBlock) {
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(kPublishBlock, copy.size() - begin));
    float* block = copy.data() + begin;
    delta.AddRangeTo(static_cast<uint32_t>(begin), n, block);
    crc = Crc32c(std::string_view(reinterpret_cast<const char*>(block), n * sizeof(float)), crc);
  }
  return crc;
}

namespace {

absl::Status NonFiniteDelta() {
  return absl::InvalidArgumentError("published delta holds NaN or Inf");
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeltaPublisher>> DeltaPublisher::Create(CodecType type,
                                                                       uint32_t num_elems) {
  if (type == CodecType::kNone || !IsKnownCodec(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no pull codec ", static_cast<int>(type), " to publish deltas with"));
  }
  std::unique_ptr<Codec> encoder;
  if (type != CodecType::kTwoBit && type != CodecType::kTernary512) {
    GS_ASSIGN_OR_RETURN(encoder, MakeChunkEncoder(CodecTypeName(type), PullCodecOptions(),
                                                  /*error_feedback=*/false, num_elems));
  }
  return absl::WrapUnique(new DeltaPublisher(type, num_elems, std::move(encoder)));
}

DeltaPublisher::DeltaPublisher(CodecType type, uint32_t num_elems, std::unique_ptr<Codec> encoder)
    : type_(type), num_elems_(num_elems), encoder_(std::move(encoder)) {
  // No error feedback decorator: the residual is params - copy (see [pull codec]).
  scratch_.resize(encoder_ == nullptr ? std::min(num_elems, kPublishBlock) : num_elems);
}

absl::StatusOr<uint32_t> DeltaPublisher::Publish(absl::Span<const float> params,
                                                 const EncodeKey& key, absl::Span<float> copy,
                                                 ChunkHeader* header, std::string* payload) {
  if (params.size() != num_elems_ || copy.size() != num_elems_) {
    return absl::InvalidArgumentError(absl::StrCat("publishing ", params.size(),
                                                   " parameters over a copy of ", copy.size(),
                                                   ", chunk of ", num_elems_));
  }
  if (type_ == CodecType::kTwoBit) return PublishTwoBit(params, copy, header, payload);
  if (type_ == CodecType::kTernary512) return PublishTernary512(params, key, copy, header, payload);
  internal::ActiveKernels().subtract(params.data(), copy.data(), num_elems_, scratch_.data());
  GS_RETURN_IF_ERROR(encoder_->Encode(scratch_, key, header, payload));
  return ApplyPublishedDelta(*header, *payload, copy);
}

absl::StatusOr<uint32_t> DeltaPublisher::PublishTwoBit(absl::Span<const float> params,
                                                       absl::Span<float> copy,
                                                       ChunkHeader* header,
                                                       std::string* payload) {
  const internal::CodecKernels& k = internal::ActiveKernels();
  const uint32_t n = num_elems_;
  float* d = scratch_.data();
  double sum_abs = 0;
  for (uint32_t begin = 0; begin < n; begin += kPublishBlock) {
    const uint32_t m = std::min(kPublishBlock, n - begin);
    k.subtract(params.data() + begin, copy.data() + begin, m, d);
    sum_abs += k.sum_abs(d, nullptr, m);
  }
  if (!std::isfinite(sum_abs)) return NonFiniteDelta();
  // The threshold and the decode as TwoBitCodec and DecodeAdd (weight 1)
  // have them: an all-zero delta sends zeros (no code reaches an infinite
  // threshold) and decodes with scale 0.
  const float t = internal::AdaptiveThreshold(sum_abs, n);
  *header = ChunkHeader{CodecType::kTwoBit, n, t, 0.0f};
  payload->resize(PayloadBytes(CodecType::kTwoBit, n));
  auto* out = reinterpret_cast<uint8_t*>(payload->data());
  const float send_at = t > 0.0f ? t : std::numeric_limits<float>::infinity();
  uint32_t crc = 0;
  for (uint32_t begin = 0; begin < n; begin += kPublishBlock) {
    const uint32_t m = std::min(kPublishBlock, n - begin);
    float* q = copy.data() + begin;
    k.subtract(params.data() + begin, q, m, d);
    // A block starts on a payload byte (kPublishBlock % 4 == 0).
    if (!k.encode_twobit(d, nullptr, m, send_at, out + begin / 4)) return NonFiniteDelta();
    k.decode_add_2bit(out + begin / 4, m, 1.0f * t, q);
    crc = Crc32c(std::string_view(reinterpret_cast<const char*>(q), m * sizeof(float)), crc);
  }
  return crc;
}

absl::StatusOr<uint32_t> DeltaPublisher::PublishTernary512(absl::Span<const float> params,
                                                          const EncodeKey& key,
                                                          absl::Span<float> copy,
                                                          ChunkHeader* header,
                                                          std::string* payload) {
  const internal::CodecKernels& k = internal::ActiveKernels();
  const uint32_t n = num_elems_;
  const internal::CodecRow* row = internal::FindCodec(CodecType::kTernary512);
  *header = ChunkHeader{CodecType::kTernary512, n, 0.0f, 0.0f};
  payload->resize(PayloadBytes(CodecType::kTernary512, n));
  auto* out = reinterpret_cast<uint8_t*>(payload->data());
  const float clip = PullCodecOptions().ternary_clip;
  float* d = scratch_.data();
  uint32_t crc = 0;
  // Every scale block lies within one kPublishBlock (a multiple of 512), so
  // each block is whole once its scales and codes are written.
  static_assert(kPublishBlock % kTernaryScaleBlock == 0);
  for (uint32_t begin = 0; begin < n; begin += kPublishBlock) {
    const uint32_t m = std::min(kPublishBlock, n - begin);
    float* q = copy.data() + begin;
    k.subtract(params.data() + begin, q, m, d);
    if (!internal::EncodeTernary512Range(d, nullptr, n, begin, m, clip, key, out)) {
      return NonFiniteDelta();
    }
    row->decode_add(*header, out, begin, m, 1.0f, q);  // as ApplyPublishedDelta's
    crc = Crc32c(std::string_view(reinterpret_cast<const char*>(q), m * sizeof(float)), crc);
  }
  return crc;
}

CodecOptions PullCodecOptions() {
  CodecOptions o;
  o.twobit_threshold = -1.0f;  // adaptive: t = mean |d| of the chunk
  o.ternary_clip = 2.5f;
  return o;
}

}  // namespace gradstream
