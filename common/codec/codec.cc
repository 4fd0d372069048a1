// The built-in codecs (none, twobit, ternary, onebit, fp16, int8, int4, ternary512) and the
// codec table
// (see [codec table]): per codec its encoder, what counts as a malformed
// chunk, and its decoders. The arithmetic lives in the kernel tables
// (internal/kernels.h); this file owns the semantics: statistics ->
// parameters -> header on the way out, header -> values on the way in.
#include "common/codec/codec.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/codec/internal/codec_table.h"
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
    float scale = 0.0f;
    if (!ActiveKernels().encode_ternary_chunk(grad, residual, n, clip_factor_,
                                              ChunkPhiloxKey(key.seed, key.tensor, key.chunk),
                                              key.worker, key.clock, out, &scale)) {
      return NonFinite(type());
    }
    header->scale = scale;
    return absl::OkStatus();
  }

  const float clip_factor_;
};

// Scales of a ternary512 chunk of n elements.
uint32_t ScaleBlocks(uint32_t n) { return (n + kTernaryScaleBlock - 1) / kTernaryScaleBlock; }

// Ternary with a scale per block of kTernaryScaleBlock elements (QSGD's
// buckets, Alistarh et al. 2017): one scale for a whole chunk is set by its
// largest elements, so the elements of a block of small gradients (rare
// classes' output rows, a layer's quiet units) go out as +-s or 0 with noise
// far above their own size; per block, the noise follows the block's
// magnitude, for 4 bytes per 512 elements (docs/design/precision-control.md,
// "Ternary scales per block"). Each block is a ternary chunk of its own, with
// its own key.
class Ternary512Codec final : public BuiltinCodec<CodecType::kTernary512> {
 public:
  explicit Ternary512Codec(float clip_factor) : clip_factor_(clip_factor) {}

 private:
  absl::Status EncodeImpl(const float* grad, float* residual, uint32_t n, const EncodeKey& key,
                          ChunkHeader*, uint8_t* out) override {
    if (!internal::EncodeTernary512Range(grad, residual, n, 0, n, clip_factor_, key, out)) {
      return NonFinite(type());
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

// fp16 and int8: x / 2^k with 2^k = kScale(max |x|), a power of two fitted
// to the chunk, then the kernel kEncode.
using ScaledEncoder = void (*)(const float*, float*, uint32_t, float, uint8_t*);
template <CodecType kType, float (*kScale)(float), ScaledEncoder internal::CodecKernels::*kEncode>
class ScaledCodec final : public BuiltinCodec<kType> {
  absl::Status EncodeImpl(const float* grad, float* residual, uint32_t n, const EncodeKey&,
                          ChunkHeader* header, uint8_t* out) override {
    const auto& k = ActiveKernels();
    const float max_abs = k.max_abs(grad, residual, n);
    if (!(max_abs <= FLT_MAX)) return NonFinite(kType);
    header->scale = kScale(max_abs);
    (k.*kEncode)(grad, residual, n, header->scale, out);
    return absl::OkStatus();
  }
};

// IEEE half of x / 2^k (see [fp16 scale]): half the bytes of fp32 at 2^-11
// relative error, which error feedback carries on.
using HalfCodec = ScaledCodec<CodecType::kHalf, internal::HalfScale,
                              &internal::CodecKernels::encode_f16>;

// x / 2^k rounded to a signed byte (see [int8 scale]): a quarter of fp32's
// bytes at 1/254 to 1/127 of max |x| per element; deterministic and
// contracting, so error feedback's residual stays under half a step (QSGD's
// 8-bit level, without its random rounding).
using Int8Codec = ScaledCodec<CodecType::kInt8, internal::Int8Scale,
                              &internal::CodecKernels::encode_i8>;

// The same within +-7 (see [int4 scale]): an eighth of fp32's bytes at 1/8 to
// 1/16 of max |x| per element, still contracting; the rung between 2-bit
// codes, whose error random-walks, and int8 (common/job/precision.h).
using Int4Codec = ScaledCodec<CodecType::kInt4, internal::Int4Scale,
                              &internal::CodecKernels::encode_i4>;

// ---------------------------------------------------------------- decoding --
// Each validate_* runs after ChunkDecoder checked the element count and the
// payload length; see [chunk validation] in decoder.h.

absl::Status ValidateNone(const ChunkHeader& h, const uint8_t* payload, float* max_magnitude) {
  *max_magnitude = ActiveKernels().max_abs_f32(payload, h.num_elems);
  if (!(*max_magnitude <= FLT_MAX)) {
    return absl::InvalidArgumentError("none payload holds NaN or Inf");
  }
  return absl::OkStatus();
}

// twobit and ternary share the 2-bit layout and its decoders.
absl::Status Validate2Bit(const ChunkHeader& h, const uint8_t* payload, float* max_magnitude) {
  if (!std::isfinite(h.scale) || h.scale < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat(CodecTypeName(h.codec), " scale ", h.scale, " is not finite and >= 0"));
  }
  if (!ActiveKernels().valid_2bit(payload, h.num_elems)) {
    return absl::InvalidArgumentError(absl::StrCat(
        CodecTypeName(h.codec), " payload has an invalid code 11 or nonzero padding"));
  }
  *max_magnitude = h.scale;
  return absl::OkStatus();
}

// A ternary512 chunk: every block's scale finite and >= 0, the codes as
// ternary's.
float BlockScale(const uint8_t* payload, uint32_t block) {
  float s;
  std::memcpy(&s, payload + 4 * size_t{block}, 4);
  return s;
}

absl::Status ValidateTernary512(const ChunkHeader& h, const uint8_t* payload,
                                float* max_magnitude) {
  const uint32_t blocks = ScaleBlocks(h.num_elems);
  float max_scale = 0.0f;
  for (uint32_t b = 0; b < blocks; ++b) {
    const float s = BlockScale(payload, b);
    if (!std::isfinite(s) || s < 0.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat("ternary512 scale ", s, " of block ", b, " is not finite and >= 0"));
    }
    max_scale = std::max(max_scale, s);
  }
  if (!ActiveKernels().valid_2bit(payload + 4 * size_t{blocks}, h.num_elems)) {
    return absl::InvalidArgumentError(
        "ternary512 payload has an invalid code 11 or nonzero padding");
  }
  *max_magnitude = max_scale;
  return absl::OkStatus();
}

absl::Status ValidateOneBit(const ChunkHeader& h, const uint8_t* payload, float* max_magnitude) {
  if (!std::isfinite(h.scale) || !std::isfinite(h.scale2)) {
    return absl::InvalidArgumentError("onebit reconstruction values are not finite");
  }
  if (h.num_elems % 8 != 0 && (payload[h.num_elems / 8] >> (h.num_elems % 8)) != 0) {
    return absl::InvalidArgumentError("onebit payload has nonzero padding bits");
  }
  *max_magnitude = std::max(std::fabs(h.scale), std::fabs(h.scale2));
  return absl::OkStatus();
}

// fp16's and int8's scale must be a power of two (a normal float with no
// mantissa bits), so that weight * scale * value rounds once whatever the
// grouping; times the largest value (at least 1, so that weight * scale is
// finite too) it must not overflow fp32.
absl::Status ValidatePowerOfTwoScale(const ChunkHeader& h, float max_value,
                                     float* max_magnitude) {
  uint32_t bits;
  std::memcpy(&bits, &h.scale, 4);
  const uint32_t exponent = bits >> 23;  // the sign bit must be 0 too
  if ((bits & 0x7fffffu) != 0 || exponent == 0 || exponent >= 255) {
    return absl::InvalidArgumentError(absl::StrCat(CodecTypeName(h.codec), " scale ", h.scale,
                                                   " is not a positive power of two"));
  }
  *max_magnitude = h.scale * std::max(max_value, 1.0f);
  if (!(*max_magnitude <= FLT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(CodecTypeName(h.codec),
                                                   " values times scale ", h.scale,
                                                   " overflow fp32"));
  }
  return absl::OkStatus();
}

absl::Status ValidateHalf(const ChunkHeader& h, const uint8_t* payload, float* max_magnitude) {
  const float max_half = ActiveKernels().max_abs_f16(payload, h.num_elems);
  if (!(max_half <= 65504.0f)) {
    return absl::InvalidArgumentError("fp16 payload holds NaN or Inf");
  }
  return ValidatePowerOfTwoScale(h, max_half, max_magnitude);
}

// No code -128: the encoders never write it.
absl::Status ValidateInt8(const ChunkHeader& h, const uint8_t* payload, float* max_magnitude) {
  if (std::memchr(payload, 0x80, h.num_elems) != nullptr) {
    return absl::InvalidArgumentError("int8 payload holds the code -128");
  }
  return ValidatePowerOfTwoScale(h, 127.0f, max_magnitude);
}

absl::Status ValidateInt4(const ChunkHeader& h, const uint8_t* payload, float* max_magnitude) {
  if (!ActiveKernels().valid_i4(payload, h.num_elems)) {
    return absl::InvalidArgumentError("int4 payload holds the code -8 or nonzero padding");
  }
  return ValidatePowerOfTwoScale(h, 7.0f, max_magnitude);
}

// The decode-add of a codec whose payload has no scales: elements [begin,
// begin + n) start on a payload byte (begin % 8 == 0 for every layout of 32,
// 16, 8, 4, 2 or 1 bits) and the kernels keep no state across elements, so
// the range decodes as a chunk of its own.
using WholeDecodeAdd = void (*)(const ChunkHeader&, const uint8_t*, float, float*);
template <WholeDecodeAdd kWhole, uint32_t kBits>
void Ranged(const ChunkHeader& h, const uint8_t* payload, uint32_t begin, uint32_t n,
            float weight, float* acc) {
  ChunkHeader range = h;
  range.num_elems = n;
  kWhole(range, payload + size_t{begin} * kBits / 8, weight, acc);
}

// Block by block, each with its own scale.
void DecodeAddTernary512(const ChunkHeader& h, const uint8_t* payload, uint32_t begin,
                         uint32_t n, float weight, float* acc) {
  const uint8_t* codes = payload + 4 * size_t{ScaleBlocks(h.num_elems)};
  for (uint32_t i = begin, end = begin + n; i < end;) {
    const uint32_t block = i / kTernaryScaleBlock;
    const uint32_t stop = std::min(end, (block + 1) * kTernaryScaleBlock);
    ActiveKernels().decode_add_2bit(codes + i / 4, stop - i,
                                    weight * BlockScale(payload, block), acc + (i - begin));
    i = stop;
  }
}

void DecodeAddNone(const ChunkHeader& h, const uint8_t* payload, float weight, float* acc) {
  ActiveKernels().decode_add_f32(payload, h.num_elems, weight, acc);
}
void DecodeAdd2Bit(const ChunkHeader& h, const uint8_t* payload, float weight, float* acc) {
  ActiveKernels().decode_add_2bit(payload, h.num_elems, weight * h.scale, acc);
}
void DecodeAddOneBit(const ChunkHeader& h, const uint8_t* payload, float weight, float* acc) {
  ActiveKernels().decode_add_1bit(payload, h.num_elems, weight * h.scale, weight * h.scale2, acc);
}

void DecodeAddHalf(const ChunkHeader& h, const uint8_t* payload, float weight, float* acc) {
  ActiveKernels().decode_add_f16(payload, h.num_elems, weight * h.scale, acc);
}

void DecodeAddInt8(const ChunkHeader& h, const uint8_t* payload, float weight, float* acc) {
  ActiveKernels().decode_add_i8(payload, h.num_elems, weight * h.scale, acc);
}

void DecodeAddInt4(const ChunkHeader& h, const uint8_t* payload, float weight, float* acc) {
  ActiveKernels().decode_add_i4(payload, h.num_elems, weight * h.scale, acc);
}

// Raw fp32 needs no decoding: an aligned payload is read in place.
const float* DecodeBlockNone(const ChunkHeader&, const uint8_t* payload, uint32_t begin,
                             uint32_t n, float* scratch) {
  const uint8_t* p = payload + 4 * static_cast<size_t>(begin);
  if (reinterpret_cast<uintptr_t>(p) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(p);
  }
  std::memcpy(scratch, p, 4 * static_cast<size_t>(n));
  return scratch;
}
const float* DecodeBlock2Bit(const ChunkHeader&, const uint8_t* payload, uint32_t begin,
                             uint32_t n, float* scratch) {
  ActiveKernels().decode_2bit(payload + begin / 4, n, 1.0f, scratch);
  return scratch;
}
const float* DecodeBlockOneBit(const ChunkHeader& h, const uint8_t* payload, uint32_t begin,
                               uint32_t n, float* scratch) {
  ActiveKernels().decode_1bit(payload + begin / 8, n, h.scale, h.scale2, scratch);
  return scratch;
}

const float* DecodeBlockHalf(const ChunkHeader&, const uint8_t* payload, uint32_t begin,
                            uint32_t n, float* scratch) {
  ActiveKernels().decode_f16(payload + 2 * static_cast<size_t>(begin), n, scratch);
  return scratch;
}

const float* DecodeBlockInt8(const ChunkHeader&, const uint8_t* payload, uint32_t begin,
                            uint32_t n, float* scratch) {
  ActiveKernels().decode_i8(payload + begin, n, scratch);
  return scratch;
}

const float* DecodeBlockInt4(const ChunkHeader&, const uint8_t* payload, uint32_t begin,
                            uint32_t n, float* scratch) {
  ActiveKernels().decode_i4(payload + begin / 2, n, scratch);
  return scratch;
}

// Signs times each block's scale: the weight alone multiplies them.
const float* DecodeBlockTernary512(const ChunkHeader& h, const uint8_t* payload, uint32_t begin,
                                   uint32_t n, float* scratch) {
  const auto decode = ActiveKernels().decode_2bit;
  const uint8_t* codes = payload + 4 * size_t{ScaleBlocks(h.num_elems)};
  for (uint32_t i = begin, end = begin + n; i < end;) {
    const uint32_t block = i / kTernaryScaleBlock;
    const uint32_t stop = std::min(end, (block + 1) * kTernaryScaleBlock);
    decode(codes + i / 4, stop - i, BlockScale(payload, block), scratch + (i - begin));
    i = stop;
  }
  return scratch;
}

// The weight multiplies the stored values (none, onebit) or the sign
// (twobit, ternary: value = sign * scale) or the half or code (fp16, int8, int4:
// x = half * scale, code * scale).
float WeightOnly(const ChunkHeader&, float weight) { return weight; }
float WeightTimesScale(const ChunkHeader& h, float weight) { return weight * h.scale; }

template <typename T>
std::unique_ptr<Codec> New(const CodecOptions&) {
  return std::make_unique<T>();
}
std::unique_ptr<Codec> NewTwoBit(const CodecOptions& o) {
  return std::make_unique<TwoBitCodec>(o.twobit_threshold);
}
std::unique_ptr<Codec> NewTernary(const CodecOptions& o) {
  return std::make_unique<TernaryCodec>(o.ternary_clip);
}
std::unique_ptr<Codec> NewTernary512(const CodecOptions& o) {
  return std::make_unique<Ternary512Codec>(o.ternary_clip);
}

// ------------------------------------------------------------ codec table --

constexpr internal::CodecRow kCodecs[] = {
    {CodecType::kNone, "none", 32, 0, ValidateNone, Ranged<DecodeAddNone, 32>, DecodeBlockNone,
     WeightOnly, New<NoneCodec>},
    {CodecType::kTwoBit, "twobit", 2, 0, Validate2Bit, Ranged<DecodeAdd2Bit, 2>, DecodeBlock2Bit,
     WeightTimesScale, NewTwoBit},
    {CodecType::kTernary, "ternary", 2, 0, Validate2Bit, Ranged<DecodeAdd2Bit, 2>,
     DecodeBlock2Bit, WeightTimesScale, NewTernary},
    {CodecType::kOneBit, "onebit", 1, 0, ValidateOneBit, Ranged<DecodeAddOneBit, 1>,
     DecodeBlockOneBit, WeightOnly, New<OneBitCodec>},
    {CodecType::kHalf, "fp16", 16, 0, ValidateHalf, Ranged<DecodeAddHalf, 16>, DecodeBlockHalf,
     WeightTimesScale, New<HalfCodec>},
    {CodecType::kInt8, "int8", 8, 0, ValidateInt8, Ranged<DecodeAddInt8, 8>, DecodeBlockInt8,
     WeightTimesScale, New<Int8Codec>},
    {CodecType::kInt4, "int4", 4, 0, ValidateInt4, Ranged<DecodeAddInt4, 4>, DecodeBlockInt4,
     WeightTimesScale, New<Int4Codec>},
    {CodecType::kTernary512, "ternary512", 2, kTernaryScaleBlock, ValidateTernary512,
     DecodeAddTernary512, DecodeBlockTernary512, WeightOnly, NewTernary512},
};

constexpr bool RowsInTypeOrder() {
  for (int i = 0; i < kNumCodecTypes; ++i) {
    if (static_cast<int>(kCodecs[i].type) != i) return false;
  }
  return true;
}
static_assert(std::size(kCodecs) == kNumCodecTypes, "one codec table row per CodecType");
static_assert(RowsInTypeOrder(), "row i of the codec table has type i");

}  // namespace

namespace internal {

const CodecRow* FindCodec(CodecType type) {
  return IsKnownCodec(type) ? &kCodecs[static_cast<int>(type)] : nullptr;
}

absl::Span<const CodecRow> CodecRows() { return kCodecs; }

bool EncodeTernary512Range(const float* x, float* residual, uint32_t num_elems, uint32_t begin,
                           uint32_t n, float clip_factor, const EncodeKey& key,
                           uint8_t* payload) {
  const auto& k = ActiveKernels();
  const PhiloxKey chunk_key = ChunkPhiloxKey(key.seed, key.tensor, key.chunk);
  uint8_t* codes = payload + 4 * size_t{ScaleBlocks(num_elems)};
  for (uint32_t i = 0; i < n; i += kTernaryScaleBlock) {
    const uint32_t block = (begin + i) / kTernaryScaleBlock;
    const uint32_t len = std::min(kTernaryScaleBlock, n - i);
    float scale = 0.0f;
    if (!k.encode_ternary_chunk(x + i, residual != nullptr ? residual + i : nullptr, len,
                                clip_factor, BlockPhiloxKey(chunk_key, block), key.worker,
                                key.clock, codes + (begin + i) / 4, &scale)) {
      return false;
    }
    std::memcpy(payload + 4 * size_t{block}, &scale, 4);
  }
  return true;
}

}  // namespace internal

absl::string_view CodecTypeName(CodecType type) {
  const internal::CodecRow* row = internal::FindCodec(type);
  return row != nullptr ? row->name : "unknown";
}

absl::StatusOr<CodecType> CodecTypeFromName(absl::string_view name) {
  std::vector<absl::string_view> known;
  for (const internal::CodecRow& row : kCodecs) {
    if (row.name == name) return row.type;
    known.push_back(row.name);
  }
  return absl::NotFoundError(absl::StrCat("unknown codec '", name,
                                          "' (known: ", absl::StrJoin(known, ", "), ")"));
}

size_t PayloadBytes(CodecType type, uint32_t num_elems) {
  const internal::CodecRow* row = internal::FindCodec(type);
  if (row == nullptr) return 0;
  const size_t scales =
      row->scale_block == 0 ? 0 : (size_t{num_elems} + row->scale_block - 1) / row->scale_block;
  return 4 * scales + (size_t{num_elems} * row->bits_per_elem + 7) / 8;
}

}  // namespace gradstream
