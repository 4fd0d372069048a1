#include "common/codec/half_rows.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/codec/internal/kernels.h"

namespace gradstream {

float HalfRowsScale(absl::Span<const float> x) {
  const internal::CodecKernels& k = internal::ActiveKernels();
  const float max_abs =
      x.empty() ? 0.0f : k.max_abs(x.data(), nullptr, static_cast<uint32_t>(x.size()));
  return internal::HalfScale(std::isfinite(max_abs) ? max_abs : 0.0f);
}

void EncodeHalfRows(absl::Span<const float> x, float scale, std::string* out) {
  const size_t at = out->size();
  out->resize(at + 2 * x.size());
  if (x.empty()) return;
  internal::ActiveKernels().encode_f16(x.data(), nullptr, static_cast<uint32_t>(x.size()), scale,
                                       reinterpret_cast<uint8_t*>(out->data() + at));
}

absl::Status DecodeHalfRows(absl::string_view bytes, float scale, absl::Span<float> out) {
  if (bytes.size() != 2 * out.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp16 rows of ", bytes.size(), " bytes, want ", 2 * out.size()));
  }
  if (!(scale > 0.0f) || !std::isfinite(scale)) {
    return absl::InvalidArgumentError(absl::StrCat("fp16 rows with scale ", scale));
  }
  if (out.empty()) return absl::OkStatus();
  const uint32_t n = static_cast<uint32_t>(out.size());
  internal::ActiveKernels().decode_f16(reinterpret_cast<const uint8_t*>(bytes.data()), n,
                                       out.data());
  for (float& v : out) v *= scale;
  return absl::OkStatus();
}

}  // namespace gradstream
