// Built-in codecs (none, twobit, ternary, onebit), chunk validation and the
// fused decode-accumulate entry point. The arithmetic lives in the kernel
// tables (internal/kernels.h); this file owns the semantics: statistics ->
// parameters -> header, and what counts as malformed.
#include "common/codec/codec.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/codec/internal/builtin.h"
#include "common/codec/internal/kernels.h"
#include "common/status.h"

namespace gradstream {
namespace {

using internal::ActiveKernels;

// An infinite threshold sends all-zero codes and keeps x in the residual:
// the encoding of a chunk whose scale is 0.
constexpr float kSendNothing = std::numeric_limits<float>::infinity();

absl::Status NonFinite(CodecType type) {
  return absl::InvalidArgumentError(
      absl::StrCat(CodecTypeName(type), " encode: gradient holds NaN or Inf"));
}

// The shared frame of every built-in codec: size checks, header, payload
// sizing; the derived class only fills in EncodeImpl(grad, residual-or-null).
template <CodecType kType>
class BuiltinCodec : public Codec {
 public:
  CodecType type() const override { return kType; }

  absl::Status Encode(absl::Span<const float> grad, const EncodeKey& key, ChunkHeader* header,
                      std::string* payload) override {
    GS_RETURN_IF_ERROR(Frame(grad.size(), header, payload));
    return EncodeImpl(grad.data(), nullptr, header->num_elems, key, header,
                      reinterpret_cast<uint8_t*>(payload->data()));
  }

  absl::Status EncodeWithResidual(absl::Span<const float> grad, absl::Span<float> residual,
                                  const EncodeKey& key, ChunkHeader* header,
                                  std::string* payload) override {
    if (residual.size() != grad.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "residual has ", residual.size(), " elements, gradient has ", grad.size()));
    }
    GS_RETURN_IF_ERROR(Frame(grad.size(), header, payload));
    return EncodeImpl(grad.data(), residual.data(), header->num_elems, key, header,
                      reinterpret_cast<uint8_t*>(payload->data()));
  }

 protected:
  virtual absl::Status EncodeImpl(const float* grad, float* residual, uint32_t n,
                                  const EncodeKey& key, ChunkHeader* header, uint8_t* out) = 0;

 private:
  static absl::Status Frame(size_t n, ChunkHeader* header, std::string* payload) {
    if (n > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk of ", n, " elements exceeds the 2^32-1 limit"));
    }
    *header = ChunkHeader{kType, static_cast<uint32_t>(n), 0.0f, 0.0f};
    payload->resize(PayloadBytes(kType, header->num_elems));
    return absl::OkStatus();
  }
};

class NoneCodec final : public BuiltinCodec<CodecType::kNone> {
  absl::Status EncodeImpl(const float* grad, float* residual, uint32_t n, const EncodeKey&,
                          ChunkHeader*, uint8_t* out) override {
    if (!ActiveKernels().encode_f32(grad, residual, n, out)) return NonFinite(type());
    return absl::OkStatus();
  }
};

// MXNet-style threshold quantization (gradient_compression-inl.h):
// x >= t -> +1, x <= -t -> -1, else 0; decoded value code * t.
class TwoBitCodec final : public BuiltinCodec<CodecType::kTwoBit> {
 public:
  explicit TwoBitCodec(float threshold) : threshold_(threshold) {}

 private:
  absl::Status EncodeImpl(const float* grad, float* residual, uint32_t n, const EncodeKey&,
                          ChunkHeader* header, uint8_t* out) override {
    const auto& k = ActiveKernels();
    float t = threshold_;
    if (t <= 0.0f) {  // adaptive: t = mean |x| of this chunk
      const double sum_abs = k.sum_abs(grad, residual, n);
      if (!std::isfinite(sum_abs)) return NonFinite(type());
      t = internal::AdaptiveThreshold(sum_abs, n);
    }
    header->scale = t;
    if (!k.encode_twobit(grad, residual, n, t > 0.0f ? t : kSendNothing, out)) {
      return NonFinite(type());
    }
    return absl::OkStatus();
  }

  const float threshold_;
};

// TernGrad (Wen et al. 2017): clip to [-c*sigma, c*sigma], s = max |x|,
// code = sign(x) * Bernoulli(|x| / s); E[code * s] = x (unbiased).
class TernaryCodec final : public BuiltinCodec<CodecType::kTernary> {
 public:
  explicit TernaryCodec(float clip_factor) : clip_factor_(clip_factor) {}

 private:
  absl::Status EncodeImpl(const float* grad, float* residual, uint32_t n, const EncodeKey& key,
                          ChunkHeader* header, uint8_t* out) override {
    const auto& k = ActiveKernels();
    float max_abs;
    double sum, sum_sq;
    k.moments(grad, residual, n, &max_abs, &sum, &sum_sq);
    if (!std::isfinite(max_abs) || !std::isfinite(sum_sq)) return NonFinite(type());
    const internal::TernaryParams p =
        internal::TernaryParamsFromMoments(max_abs, sum, sum_sq, n, clip_factor_);
    header->scale = p.scale;
    if (p.scale > 0.0f) {
      k.encode_ternary(grad, residual, n, p, ChunkPhiloxKey(key.seed, key.tensor, key.chunk),
                       key.worker, key.clock, out);
    } else {
      (void)k.encode_twobit(grad, residual, n, kSendNothing, out);
    }
    return absl::OkStatus();
  }

  const float clip_factor_;
};

// 1-bit SGD (Seide et al. 2014): bit = (x > 0); a 1 decodes to the mean of
// the positive entries, a 0 to the mean of the negative ones; exact zeros
// are in neither mean (see [onebit zeros] in internal/kernels.h).
class OneBitCodec final : public BuiltinCodec<CodecType::kOneBit> {
  absl::Status EncodeImpl(const float* grad, float* residual, uint32_t n, const EncodeKey&,
                          ChunkHeader* header, uint8_t* out) override {
    const auto& k = ActiveKernels();
    double pos_sum, neg_sum;
    uint32_t pos_count, neg_count;
    k.sign_sums(grad, residual, n, &pos_sum, &pos_count, &neg_sum, &neg_count);
    if (!std::isfinite(pos_sum) || !std::isfinite(neg_sum)) return NonFinite(type());
    const internal::OneBitParams p =
        internal::OneBitParamsFromSums(pos_sum, pos_count, neg_sum, neg_count);
    header->scale = p.pos;
    header->scale2 = p.neg;
    k.encode_onebit(grad, residual, n, p, out);
    return absl::OkStatus();
  }
};

bool KnownCodec(CodecType type) { return static_cast<uint8_t>(type) <= 3; }

}  // namespace

absl::string_view CodecTypeName(CodecType type) {
  switch (type) {
    case CodecType::kNone:
      return "none";
    case CodecType::kTwoBit:
      return "twobit";
    case CodecType::kTernary:
      return "ternary";
    case CodecType::kOneBit:
      return "onebit";
  }
  return "unknown";
}

absl::StatusOr<CodecType> CodecTypeFromName(absl::string_view name) {
  for (CodecType t :
       {CodecType::kNone, CodecType::kTwoBit, CodecType::kTernary, CodecType::kOneBit}) {
    if (CodecTypeName(t) == name) return t;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown codec '", name, "' (known: none, twobit, ternary, onebit)"));
}

size_t PayloadBytes(CodecType type, uint32_t num_elems) {
  const size_t n = num_elems;
  switch (type) {
    case CodecType::kNone:
      return 4 * n;
    case CodecType::kTwoBit:
    case CodecType::kTernary:
      return (n + 3) / 4;
    case CodecType::kOneBit:
      return (n + 7) / 8;
  }
  return 0;
}

namespace {

// Validates a chunk and reports the largest magnitude any element decodes to,
// so DecodeAdd can prove that weight * value stays finite before it writes.
absl::Status ValidateAndBound(const ChunkHeader& h, absl::string_view payload,
                              size_t expected_elems, float* max_magnitude) {
  if (!KnownCodec(h.codec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown codec id ", static_cast<int>(h.codec)));
  }
  if (h.num_elems != expected_elems) {
    return absl::InvalidArgumentError(absl::StrCat("chunk header says ", h.num_elems,
                                                   " elements, expected ", expected_elems));
  }
  const size_t want = PayloadBytes(h.codec, h.num_elems);
  if (payload.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(CodecTypeName(h.codec), " payload of ",
                                                   payload.size(), " bytes for ", h.num_elems,
                                                   " elements, expected ", want));
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(payload.data());
  const auto& k = ActiveKernels();
  switch (h.codec) {
    case CodecType::kNone:
      *max_magnitude = k.max_abs_f32(bytes, h.num_elems);
      if (!(*max_magnitude <= FLT_MAX)) {
        return absl::InvalidArgumentError("none payload holds NaN or Inf");
      }
      break;
    case CodecType::kTwoBit:
    case CodecType::kTernary:
      if (!std::isfinite(h.scale) || h.scale < 0.0f) {
        return absl::InvalidArgumentError(
            absl::StrCat(CodecTypeName(h.codec), " scale ", h.scale, " is not finite and >= 0"));
      }
      if (!k.valid_2bit(bytes, h.num_elems)) {
        return absl::InvalidArgumentError(absl::StrCat(
            CodecTypeName(h.codec), " payload has an invalid code 11 or nonzero padding"));
      }
      *max_magnitude = h.scale;
      break;
    case CodecType::kOneBit:
      if (!std::isfinite(h.scale) || !std::isfinite(h.scale2)) {
        return absl::InvalidArgumentError("onebit reconstruction values are not finite");
      }
      if (h.num_elems % 8 != 0 && (bytes[want - 1] >> (h.num_elems % 8)) != 0) {
        return absl::InvalidArgumentError("onebit payload has nonzero padding bits");
      }
      *max_magnitude = std::max(std::fabs(h.scale), std::fabs(h.scale2));
      break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateChunk(const ChunkHeader& h, absl::string_view payload, size_t expected_elems) {
  float unused;
  return ValidateAndBound(h, payload, expected_elems, &unused);
}

absl::Status DecodeAdd(const ChunkHeader& h, absl::string_view payload, absl::Span<float> acc,
                       float weight) {
  if (!std::isfinite(weight)) return absl::InvalidArgumentError("decode weight is not finite");
  float max_magnitude = 0.0f;
  GS_RETURN_IF_ERROR(ValidateAndBound(h, payload, acc.size(), &max_magnitude));
  // Every term added is finite; only the accumulator's own growth can still
  // overflow, and that is the optimizer's divergence check, not bad input.
  if (!std::isfinite(std::fabs(weight) * max_magnitude)) {
    return absl::InvalidArgumentError(absl::StrCat("decode weight ", weight, " times value ",
                                                   max_magnitude, " overflows fp32"));
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(payload.data());
  const auto& k = ActiveKernels();
  switch (h.codec) {
    case CodecType::kNone:
      k.decode_add_f32(bytes, h.num_elems, weight, acc.data());
      break;
    case CodecType::kTwoBit:
    case CodecType::kTernary:
      k.decode_add_2bit(bytes, h.num_elems, weight * h.scale, acc.data());
      break;
    case CodecType::kOneBit:
      k.decode_add_1bit(bytes, h.num_elems, weight * h.scale, weight * h.scale2, acc.data());
      break;
  }
  return absl::OkStatus();
}

namespace internal {

std::unique_ptr<Codec> NewBuiltinCodec(CodecType type, const CodecOptions& options) {
  switch (type) {
    case CodecType::kNone:
      return std::make_unique<NoneCodec>();
    case CodecType::kTwoBit:
      return std::make_unique<TwoBitCodec>(options.twobit_threshold);
    case CodecType::kTernary:
      return std::make_unique<TernaryCodec>(options.ternary_clip);
    case CodecType::kOneBit:
      return std::make_unique<OneBitCodec>();
  }
  return nullptr;
}

}  // namespace internal
}  // namespace gradstream
