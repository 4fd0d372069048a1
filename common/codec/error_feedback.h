// Error feedback as a decorator (BytePS error_feedback.h; Seide et al. 2014,
// "1-bit SGD"): owns the inner codec and one residual per chunk; each Encode
// sends Q(g + r) and keeps r = g + r - Q^-1(Q(g + r)) for the next step.
// Without it, biased codecs (twobit, onebit) stall or diverge.
#ifndef GRADSTREAM_COMMON_CODEC_ERROR_FEEDBACK_H_
#define GRADSTREAM_COMMON_CODEC_ERROR_FEEDBACK_H_

#include <memory>
#include <vector>

#include "common/codec/codec.h"

namespace gradstream {

// Not thread-safe; one per (tensor, chunk).
class ErrorFeedback final : public Codec {
 public:
  ErrorFeedback(std::unique_ptr<Codec> inner, uint32_t num_elems)
      : inner_(std::move(inner)), residual_(num_elems, 0.0f) {}

  CodecType type() const override { return inner_->type(); }

  // InvalidArgument when grad.size() differs from the residual's size.
  [[nodiscard]] absl::Status Encode(absl::Span<const float> grad, const EncodeKey& key,
                                    ChunkHeader* header, std::string* payload) override;

  // Decorators do not stack: an outer residual would double-count.
  [[nodiscard]] absl::Status EncodeWithResidual(absl::Span<const float> grad,
                                                absl::Span<float> residual, const EncodeKey& key,
                                                ChunkHeader* header,
                                                std::string* payload) override;

  // Sends grad + residual with codec `level` instead (fp16, or none: whole,
  // clearing the residual), keeping what it did not send: the levels of the
  // precision control (common/job/precision.h). A level other than the inner
  // codec is made with default options.
  [[nodiscard]] absl::Status EncodeAs(CodecType level, absl::Span<const float> grad,
                                      const EncodeKey& key, ChunkHeader* header,
                                      std::string* payload);

  // L2 norm of the residual (exported as a metric by workers).
  double ResidualNorm() const;
  const std::vector<float>& residual() const { return residual_; }

 private:
  const std::unique_ptr<Codec> inner_;
  std::unique_ptr<Codec> levels_[kNumCodecTypes];  // made at a level's first send
  std::vector<float> residual_;
};

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_ERROR_FEEDBACK_H_
