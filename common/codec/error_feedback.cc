#include "common/codec/error_feedback.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/codec/registry.h"
#include "common/status.h"

namespace gradstream {

absl::Status ErrorFeedback::Encode(absl::Span<const float> grad, const EncodeKey& key,
                                   ChunkHeader* header, std::string* payload) {
  if (grad.size() != residual_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("error feedback sized for ", residual_.size(),
                                                   " elements, got ", grad.size()));
  }
  // The inner codec fuses r += g, quantize, r -= decoded into one pass.
  return inner_->EncodeWithResidual(grad, absl::MakeSpan(residual_), key, header, payload);
}

absl::Status ErrorFeedback::EncodeWithResidual(absl::Span<const float>, absl::Span<float>,
                                               const EncodeKey&, ChunkHeader*, std::string*) {
  return absl::FailedPreconditionError("error feedback cannot wrap another residual");
}

absl::Status ErrorFeedback::EncodeAs(CodecType level, absl::Span<const float> grad,
                                     const EncodeKey& key, ChunkHeader* header,
                                     std::string* payload) {
  if (level == inner_->type()) return Encode(grad, key, header, payload);
  if (grad.size() != residual_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("error feedback sized for ", residual_.size(),
                                                   " elements, got ", grad.size()));
  }
  if (!IsKnownCodec(level)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown codec id ", static_cast<int>(level)));
  }
  std::unique_ptr<Codec>& codec = levels_[static_cast<int>(level)];
  if (codec == nullptr) {
    GS_ASSIGN_OR_RETURN(codec,
                        CodecRegistry::Global().Create(CodecTypeName(level), CodecOptions()));
  }
  // The level's fused pass: x = g + r sent at that level, r = x - decoded
  // (0 for none).
  return codec->EncodeWithResidual(grad, absl::MakeSpan(residual_), key, header, payload);
}

double ErrorFeedback::ResidualNorm() const {
  double s = 0;
  for (float r : residual_) s += static_cast<double>(r) * r;
  return std::sqrt(s);
}

}  // namespace gradstream
