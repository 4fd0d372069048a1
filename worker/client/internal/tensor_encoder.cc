// Per-chunk encoders of one tensor. See tensor_encoder.h.
#include "worker/client/internal/tensor_encoder.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/codec/error_feedback.h"
#include "common/codec/registry.h"
#include "common/job/path_sums.h"
#include "common/job/precision.h"
#include "common/status.h"

namespace gradstream::client::internal {

absl::StatusOr<std::unique_ptr<TensorEncoder>> TensorEncoder::Create(
    const ShardMap& map, uint32_t tensor, const std::string& codec_name,
    const CodecPolicy& policy) {
  GS_ASSIGN_OR_RETURN(CodecType type, CodecTypeFromName(codec_name));
  // Off only when the job asks (an ablation: without it twobit and onebit
  // drop what falls under the threshold for good; see the convergence test).
  const bool error_feedback = type != CodecType::kNone && policy.error_feedback;
  CodecOptions options;
  options.twobit_threshold = policy.twobit_threshold;
  options.ternary_clip = policy.ternary_clip;
  std::unique_ptr<TensorEncoder> enc(new TensorEncoder());
  enc->codec_ = type;
  const PrecisionPolicy precision =
      PushPrecisionPolicy(type, policy.precision_bound, policy.precision_warmup,
                          policy.precision_max_owed);
  for (const ChunkInfo& c : map.chunks) {
    if (c.tensor != tensor) continue;
    GS_ASSIGN_OR_RETURN(std::unique_ptr<Codec> codec,
                        MakeChunkEncoder(codec_name, options, error_feedback, c.num_elems));
    enc->chunks_.push_back(c);
    enc->encoders_.push_back(std::move(codec));
    if (error_feedback) enc->precision_.push_back(std::make_unique<PrecisionController>(precision));
  }
  return enc;
}

absl::Status TensorEncoder::EncodeChunk(size_t i, absl::Span<const float> grad, uint64_t seed,
                                        uint64_t worker, uint64_t clock, ChunkHeader* header,
                                        std::string* payload, PushPrecisionReport* report,
                                        bool exact) {
  const ChunkInfo& c = chunks_[i];
  if (c.offset + c.num_elems > grad.size()) {
    return absl::InvalidArgumentError(absl::StrCat("gradient of ", grad.size(),
                                                   " elements is too short for chunk ",
                                                   c.chunk_id));
  }
  EncodeKey key;
  key.seed = seed;
  key.worker = static_cast<uint32_t>(worker);
  key.clock = static_cast<uint32_t>(clock);
  key.tensor = c.tensor;
  key.chunk = static_cast<uint32_t>(c.chunk_id);
  const absl::Span<const float> g = grad.subspan(c.offset, c.num_elems);
  if (precision_.empty()) return encoders_[i]->Encode(g, key, header, payload);
  PrecisionController& ctl = *precision_[i];
  auto* ef = static_cast<ErrorFeedback*>(encoders_[i].get());
  exact |= ctl.Codec() == CodecType::kNone;
  GS_RETURN_IF_ERROR(ef->EncodeAs(exact ? CodecType::kNone : ctl.Codec(), g, key, header, payload));
  if (exact && ctl.Codec() != CodecType::kNone) {
    ctl.Skip();  // the link's choice: nothing to measure, a flush asked for went out
  } else if (ctl.MeasureDue(clock)) {
    // |s|^2, |e|^2 and <e, s> in one pass ([owed descent] in precision.h).
    const PathSums sums =
        SumPath(ef->residual().data(), nullptr, g.data(), nullptr, nullptr, g.size());
    ctl.Observe(clock, sums.error2, sums.signal2, 0.0, sums.dot);
  } else {
    ctl.Skip();
  }
  if (report != nullptr) {
    report->error_clocks = static_cast<float>(
        std::min(ctl.ratio(), static_cast<double>(std::numeric_limits<float>::max())));
    report->raised = ctl.raised();
    report->level = ctl.level_codec();
    const auto& events = ctl.events();
    report->owed_raise = !events.empty() && events.back().owed && events.back().clock == clock + 1
                             ? static_cast<float>(events.back().ratio)
                             : 0.0f;
  }
  return absl::OkStatus();
}

double TensorEncoder::ResidualNormSquared() const {
  double sum = 0.0;
  for (const auto& e : encoders_) {
    if (const auto* ef = dynamic_cast<const ErrorFeedback*>(e.get())) {
      const double n = ef->ResidualNorm();
      sum += n * n;
    }
  }
  return sum;
}

}  // namespace gradstream::client::internal
