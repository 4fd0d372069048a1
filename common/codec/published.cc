#include "common/codec/published.h"

#include <string_view>

#include "common/env/crc32c.h"

namespace gradstream {

uint32_t PublishedChecksum(absl::Span<const float> copy) {
  return Crc32c(std::string_view(reinterpret_cast<const char*>(copy.data()),
                                 copy.size() * sizeof(float)));
}

absl::Status ApplyPublishedDelta(const ChunkHeader& header, absl::string_view payload,
                                 absl::Span<float> copy) {
  return DecodeAdd(header, payload, copy, 1.0f);
}

CodecOptions PullCodecOptions() {
  CodecOptions o;
  o.twobit_threshold = -1.0f;  // adaptive: t = mean |d| of the chunk
  o.ternary_clip = 2.5f;
  return o;
}

}  // namespace gradstream
