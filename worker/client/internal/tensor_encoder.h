// The encoding half of a push: one tensor's chunks, each with its own encoder
// (and, under error feedback, its own residual), as the shard map cuts it.
#ifndef GRADSTREAM_WORKER_CLIENT_INTERNAL_TENSOR_ENCODER_H_
#define GRADSTREAM_WORKER_CLIENT_INTERNAL_TENSOR_ENCODER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/job/precision.h"
#include "common/job/shard_map.h"

namespace gradstream::client::internal {

// What a push says of its chunk's error control (PushedChunk in ps.proto).
struct PushPrecisionReport {
  float error_clocks = 0;  // |residual| / |gradient| at the last measurement
  bool raised = false;     // the chunk's pushes are above its codec's level
  CodecType level = CodecType::kNone;  // the level they are at, when raised
  float owed_raise = 0;  // raised by this encode for owed descent: what it owed
};

// Not thread-safe: the client holds a per-tensor lock while encoding.
class TensorEncoder {
 public:
  // Encoders for every chunk of `map.tensors[tensor]` with codec `codec_name`
  // and the codec options of `policy`. Error feedback wraps every compressing
  // codec when policy.error_feedback (the default), never "none".
  // NotFound for an unknown codec.
  static absl::StatusOr<std::unique_ptr<TensorEncoder>> Create(const ShardMap& map,
                                                               uint32_t tensor,
                                                               const std::string& codec_name,
                                                               const CodecPolicy& policy);

  // The codec every chunk of the tensor travels with (PushEncoded checks
  // device-encoded chunks against it); guarded(): a PrecisionController may
  // send a chunk exact (kNone) instead.
  CodecType codec() const { return codec_; }
  bool guarded() const { return !precision_.empty(); }
  size_t num_chunks() const { return chunks_.size(); }
  const ChunkInfo& chunk(size_t i) const { return chunks_[i]; }

  // Encodes chunk `i` of `grad` (the whole tensor). The stochastic-rounding key
  // is (seed, worker, clock, tensor index, global chunk id). Under error
  // feedback the chunk's PrecisionController decides: its codec, or the
  // residual sent whole (a flush, or a chunk raised to fp32); when it says
  // (MeasureDue) the residual is measured against the gradient.
  // `exact` (the link choice's) sends the residual whole too, unmeasured.
  [[nodiscard]] absl::Status EncodeChunk(size_t i, absl::Span<const float> grad, uint64_t seed,
                                         uint64_t worker, uint64_t clock, ChunkHeader* header,
                                         std::string* payload,
                                         PushPrecisionReport* report = nullptr,
                                         bool exact = false);

  // Sum of squared residuals over the chunks (0 without error feedback).
  double ResidualNormSquared() const;

 private:
  TensorEncoder() = default;
  CodecType codec_ = CodecType::kNone;
  std::vector<ChunkInfo> chunks_;
  std::vector<std::unique_ptr<Codec>> encoders_;
  std::vector<std::unique_ptr<PrecisionController>> precision_;  // empty without error feedback
};

}  // namespace gradstream::client::internal

#endif  // GRADSTREAM_WORKER_CLIENT_INTERNAL_TENSOR_ENCODER_H_
