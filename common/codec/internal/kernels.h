// CPU codec kernels behind a function table, one table per instruction set.
//
// The portable, AVX2 and AVX-512 tables produce bit-identical outputs: all
// follow the same arithmetic (no fused multiply-add; -ffp-contract=off) and
// the same reduction order. NOTE: [lane reduction] Sums over a chunk are
// accumulated in fp64 in kSumLanes = 16 lanes, element i into lane i % 16,
// and the lanes are added in order 0..15 at the end: the order a vector loop
// over 16 elements with four 4-wide fp64 accumulators produces, which the
// scalar loop copies, so scales and clip bounds agree to the bit. Sixteen,
// not eight, so the sums do not run at the latency of one fp64 add per 8
// elements (docs/design/ternary-encode.md). The CUDA kernels reduce in
// another order; see cuda_codec.h.
//
// All kernels take `residual` == nullptr to mean "no error feedback": then
// x = grad; otherwise x = grad + residual and residual is overwritten with
// x - decoded(x) (see error_feedback.h).
#ifndef GRADSTREAM_COMMON_CODEC_INTERNAL_KERNELS_H_
#define GRADSTREAM_COMMON_CODEC_INTERNAL_KERNELS_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/philox.h"

namespace gradstream {
namespace internal {

inline constexpr int kSumLanes = 16;  // see [lane reduction]

struct TernaryParams {
  float clip;   // |x| is clamped to clip; +inf when clipping is off
  float scale;  // s = max |clamped x|; 0 for an all-zero chunk
};

// P(code != 0) = |xc| * (1/s), with 1/s rounded to fp32 once: a multiply
// instead of a divide per element (the divide was the bottleneck), and the
// same rounding on every device.
GS_HOST_DEVICE float InverseScale(float scale) { return 1.0f / scale; }

// NOTE: [onebit zeros] Zeros carry no sign, so they are left out of both
// means, and an exact zero (+0 or -0; common: gradients of dead ReLU units)
// gets the bit whose value is nearer to 0 (1 on a tie), with error feedback
// keeping the difference. Counting zeros on the positive side instead would
// shrink the positive value toward 0 by the share of dead units and then
// send every dead unit as +pos: a push one way on every step that error
// feedback must take back later. Excluded, the two values describe
// the entries that have a sign, and a zero costs the least error one bit
// can give, min(pos, -neg), carried to the next step like any other error.
// When one side is empty its value is 0, so zeros decode exactly.
struct OneBitParams {
  float pos;  // value of a 1 bit: mean of x over x > 0 (0 if none)
  float neg;  // value of a 0 bit: mean of x over x < 0 (0 if none)
};

// The bit of an exact zero (see [onebit zeros]); host and device code.
GS_HOST_DEVICE bool OneBitZeroBit(float pos, float neg) { return pos <= -neg; }

// NOTE: [2-bit signs] The one 2-bit decode table: kTwoBitSigns.v[b][j] is
// the sign (0, +1, -1) of code j of payload byte b (element 4k+j of byte k).
// Code 11 never reaches a decoder (validation rejects it) and maps to 0.
// Every 2-bit decoder (decode-add and block decode, portable and AVX2) reads
// this table, and the AVX-512 ones make the same signs from the codes' bits
// (codec_test checks them against it), so a twobit or ternary value is
// sign * scale everywhere.
struct TwoBitSignTable {
  alignas(16) float v[256][4];
  constexpr TwoBitSignTable() : v() {
    for (int b = 0; b < 256; ++b) {
      for (int j = 0; j < 4; ++j) {
        const int code = (b >> (2 * j)) & 3;
        v[b][j] = code == 1 ? 1.0f : code == 2 ? -1.0f : 0.0f;
      }
    }
  }
};
inline constexpr TwoBitSignTable kTwoBitSigns;

// NOTE: [fp16 scale] An fp16 chunk is sent as x / 2^k in IEEE half, with
// 2^k = HalfScale(max |x|) in the header: max |x| / 2^k < 2^15, so no value
// overflows half's 65504, and every x down to max |x| * 2^-29 keeps half's
// 11 significant bits (a plain cast would lose gradients under 6e-5 to half's
// subnormals). Dividing by a power of two is exact, so the only rounding is
// the half's, ties to even: the same bits from the portable conversions
// below, F16C and CUDA's __float2half_rn.
inline float HalfScale(float max_abs) {
  int e = 0;
  std::frexp(max_abs, &e);  // max_abs < 2^e (e = 0 for 0)
  return std::ldexp(1.0f, std::max(e - 15, -126));
}

// NOTE: [int8 scale] An int8 chunk is sent as round(x / 2^k), ties to even,
// with 2^k = Int8Scale(max |x|): the smallest power of two that keeps every
// code within +-127 (so -128 never occurs and the codes are symmetric). The
// division is exact, so the only rounding is to the integer, the same on
// every device; q * 2^k is exact too, so error feedback keeps x - decoded
// with no further rounding. The step is 1/127 to 1/254 of max |x|.
//
// The smallest power of two 2^k with round(max_abs / 2^k) <= 2^bits - 1.
inline float CodeScale(float max_abs, int bits) {
  int e = 0;
  std::frexp(max_abs, &e);  // max_abs < 2^e (e = 0 for 0)
  float s = std::ldexp(1.0f, std::max(e - bits, -126));
  if (max_abs / s >= std::ldexp(1.0f, bits) - 0.5f) s *= 2.0f;  // would round to 2^bits
  return s;
}
inline float Int8Scale(float max_abs) { return CodeScale(max_abs, 7); }

// NOTE: [int4 scale] int4 is int8's rule within +-7 (no code -8): 2^k =
// Int4Scale(max |x|), the step 1/4 to 1/8 of max |x|. Two codes a byte,
// element 2i in the low nibble, 2i+1 in the high one (two's complement); an
// odd chunk's last high nibble is 0.
inline float Int4Scale(float max_abs) { return CodeScale(max_abs, 3); }

// float -> IEEE half bits, round to nearest even; +-inf past 65504 (F. Giesen,
// "float_to_half_fast3_rtne"). NaN -> a quiet NaN.
inline uint16_t FloatToHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint32_t o;
  if (x >= (127u + 16u) << 23) {  // >= 2^16: inf, or NaN
    o = x > (255u << 23) ? 0x7e00u : 0x7c00u;
  } else if (x < (113u << 23)) {  // < 2^-14: half subnormal; the fp32 add rounds
    const uint32_t magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;  // 0.5f
    float magic, v;
    std::memcpy(&magic, &magic_bits, 4);
    std::memcpy(&v, &x, 4);
    v += magic;
    uint32_t vb;
    std::memcpy(&vb, &v, 4);
    o = vb - magic_bits;
  } else {
    const uint32_t mant_odd = (x >> 13) & 1u;
    x += ((15u - 127u) << 23) + 0xfffu;  // rebias; round half up, then ...
    x += mant_odd;                       // ... ties to even
    o = x >> 13;
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

// IEEE half bits -> float, exact.
inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t bits;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in fp32
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &v, 4);
  } else if (e == 31) {
    bits = 0x7f800000u | (m << 13);
  } else {
    bits = ((e + 112u) << 23) | (m << 13);
  }
  bits |= sign;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct CodecKernels {
  // ---- statistics (fp64, [lane reduction]) ----
  // max |x| over the chunk (NaN if any x is NaN), and sum / sum of squares.
  void (*moments)(const float* grad, const float* residual, uint32_t n, float* max_abs,
                  double* sum, double* sum_sq);
  // max |x| compared as bit patterns: NaN when any x is NaN, else +inf when
  // any is infinite (as max_abs_f32).
  float (*max_abs)(const float* grad, const float* residual, uint32_t n);
  // sum |x|.
  double (*sum_abs)(const float* grad, const float* residual, uint32_t n);
  // sums and counts of the x > 0 and x < 0 parts; zeros are in neither
  // (see [onebit zeros]) and a NaN lands in the negative sum.
  void (*sign_sums)(const float* grad, const float* residual, uint32_t n, double* pos_sum,
                    uint32_t* pos_count, double* neg_sum, uint32_t* neg_count);

  // ---- encoders: write PayloadBytes(codec, n) bytes to `out` ----
  // These two have no statistics pass to catch NaN/Inf, so they report it:
  // false when some x is not finite (outputs are then unspecified).
  bool (*encode_f32)(const float* grad, float* residual, uint32_t n, uint8_t* out);
  bool (*encode_twobit)(const float* grad, float* residual, uint32_t n, float threshold,
                        uint8_t* out);
  void (*encode_ternary)(const float* grad, float* residual, uint32_t n, TernaryParams p,
                         PhiloxKey key, uint32_t worker, uint32_t clock, uint8_t* out);
  // A whole ternary chunk, what the codec calls: moments, then
  // TernaryParamsFromMoments(clip_factor) (its scale goes to *scale), then
  // encode_ternary -- or, for a scale of 0, all-zero codes and residual = x.
  // False when some x is not finite (max |x| NaN or sum of squares not
  // finite); the residual is then unspecified. See [ternary passes].
  bool (*encode_ternary_chunk)(const float* grad, float* residual, uint32_t n, float clip_factor,
                               PhiloxKey key, uint32_t worker, uint32_t clock, uint8_t* out,
                               float* scale);
  void (*encode_onebit)(const float* grad, float* residual, uint32_t n, OneBitParams p,
                        uint8_t* out);
  // Half bits of x / scale, little-endian, 2 bytes each; residual = x -
  // half * scale. `scale` is HalfScale(max |x|) of finite x (see [fp16 scale]).
  void (*encode_f16)(const float* grad, float* residual, uint32_t n, float scale, uint8_t* out);

  // ---- validation and fused decode-accumulate ----
  // True when no 2-bit code is 11 and the padding bits of the last byte are 0.
  bool (*valid_2bit)(const uint8_t* payload, uint32_t n);
  // max |value| over an fp32 payload, compared as bit patterns so that the
  // result is NaN when any value is NaN and +inf when any is infinite (and
  // none is NaN). One pass gives both the finiteness check and the bound a
  // decoder needs to prove weight * value cannot overflow.
  float (*max_abs_f32)(const uint8_t* payload, uint32_t n);
  // max |value| over an fp16 payload, as max_abs_f32 (NaN, +inf, or the
  // largest finite half as a float).
  float (*max_abs_f16)(const uint8_t* payload, uint32_t n);
  // acc[i] += sign_i * ws (ws = weight * scale; see [2-bit signs]).
  void (*decode_add_2bit)(const uint8_t* payload, uint32_t n, float ws, float* acc);
  // acc[i] += bit_i ? wpos : wneg.
  void (*decode_add_1bit)(const uint8_t* payload, uint32_t n, float wpos, float wneg,
                          float* acc);
  // acc[i] += weight * value_i.
  void (*decode_add_f32)(const uint8_t* payload, uint32_t n, float weight, float* acc);
  // acc[i] += ws * half_i (ws = weight * scale).
  void (*decode_add_f16)(const uint8_t* payload, uint32_t n, float ws, float* acc);
  // Block decoders for ChunkDecoder::Block, `payload` at the block's first
  // byte: out[i] = sign_i * scale (one IEEE product; twobit passes 1,
  // ternary512 each scale block's scale), and out[i] = bit_i ? pos : neg.
  void (*decode_2bit)(const uint8_t* payload, uint32_t n, float scale, float* out);
  void (*decode_1bit)(const uint8_t* payload, uint32_t n, float pos, float neg, float* out);
  // out[i] = half_i as a float.
  void (*decode_f16)(const uint8_t* payload, uint32_t n, float* out);

  // int8 ([int8 scale]): the code of x / scale, rounded to nearest even, one
  // signed byte each; residual = x - code * scale. `scale` is Int8Scale(max
  // |x|) of finite x.
  void (*encode_i8)(const float* grad, float* residual, uint32_t n, float scale, uint8_t* out);
  // acc[i] += ws * code_i (ws = weight * scale).
  void (*decode_add_i8)(const uint8_t* payload, uint32_t n, float ws, float* acc);
  // out[i] = code_i as a float.
  void (*decode_i8)(const uint8_t* payload, uint32_t n, float* out);

  // int4 ([int4 scale]): as int8, two codes a byte.
  void (*encode_i4)(const float* grad, float* residual, uint32_t n, float scale, uint8_t* out);
  // True when no code is -8 and an odd chunk's padding nibble is 0.
  bool (*valid_i4)(const uint8_t* payload, uint32_t n);
  void (*decode_add_i4)(const uint8_t* payload, uint32_t n, float ws, float* acc);
  // `payload` at the block's first byte (blocks start at even elements).
  void (*decode_i4)(const uint8_t* payload, uint32_t n, float* out);

  // out[i] = a[i] - b[i], one IEEE subtraction each (a published delta,
  // params - copy).
  void (*subtract)(const float* a, const float* b, uint32_t n, float* out);
};

const CodecKernels& PortableKernels();

// Scalar ternary encode of elements [begin, end) (begin % 4 == 0), with
// x = grad + residual_in (x = grad when residual_in is null); writes
// residual_out = x - decoded(x) when residual_out is not null (it may be
// residual_in, or grad when grad holds x). `out` bytes covering the range
// must be zero. Shared by the portable table and the AVX2 table's tail so both
// draw the same random words. The rule, on every device:
// prob = min(|x|, clip) * InverseScale(s); code = sign(x) when
// Uniform8(draw) < prob, else 0 (see [reproducible rounding]).
void EncodeTernaryRange(const float* grad, const float* residual_in, float* residual_out,
                        uint32_t begin, uint32_t end, TernaryParams p, PhiloxKey key,
                        uint32_t worker, uint32_t clock, uint8_t* out);
// The vector tables' ternary chunks of up to this many elements make their
// draws before the encode pass, into DrawScratch(n): one byte per element,
// reused by the calling thread. Larger ones draw in the encode pass. See
// [ternary passes] in kernels_avx2.cc.
inline constexpr uint32_t kMaxScratchElems = uint32_t{1} << 21;
uint8_t* DrawScratch(uint32_t n);
// nullptr when this binary was built without AVX2 support.
const CodecKernels* Avx2Kernels();
// The AVX2 table with AVX-512 (F, BW, DQ, VL) ternary chunk and 2-bit
// decoders (kernels_avx512.cc); nullptr where Avx2Kernels() is.
const CodecKernels* Avx512Kernels();
// Whether this CPU runs Avx512Kernels().
bool HasAvx512();
// The fastest table this CPU supports (AVX-512, else AVX2, else portable),
// chosen once. The environment variable GS_CODEC_ISA=portable or avx2 caps
// it at that table.
const CodecKernels& ActiveKernels();

// The table entry of a ternary chunk kernel made in two instantiations,
// with error feedback (kWithResidual) and without (kWithout).
using TernaryChunkFn = bool (*)(const float* grad, float* residual, uint32_t n, float clip_factor,
                                PhiloxKey key, uint32_t worker, uint32_t clock, uint8_t* out,
                                float* scale);
template <TernaryChunkFn kWithResidual, TernaryChunkFn kWithout>
bool TernaryChunkByResidual(const float* grad, float* residual, uint32_t n, float clip_factor,
                            PhiloxKey key, uint32_t worker, uint32_t clock, uint8_t* out,
                            float* scale) {
  return (residual != nullptr ? kWithResidual : kWithout)(grad, residual, n, clip_factor, key,
                                                          worker, clock, out, scale);
}

// Parameters derived from statistics; shared by every table and by the CUDA
// kernels, which compute them on the device, so the derived floats are
// identical whichever kernels computed the sums. (The comparisons are
// spelled out: std::min and std::max are not device functions.)
GS_HOST_DEVICE TernaryParams TernaryParamsFromMoments(float max_abs, double sum, double sum_sq,
                                                      uint32_t n, float clip_factor) {
  TernaryParams p{INFINITY, max_abs};
  if (clip_factor > 0.0f && n > 0) {
    // TernGrad (bingrad_common.py): sigma is the standard deviation of the
    // chunk around its mean; values beyond c*sigma are clipped, so the scale
    // is min(max|g|, c*sigma).
    const double mean = sum / n;
    const double v = sum_sq / n - mean * mean;
    const double var = 0.0 < v ? v : 0.0;
    p.clip = static_cast<float>(clip_factor * ::sqrt(var));
    p.scale = p.clip < max_abs ? p.clip : max_abs;
  }
  return p;
}
GS_HOST_DEVICE float AdaptiveThreshold(double sum_abs, uint32_t n) {
  return n == 0 ? 0.0f : static_cast<float>(sum_abs / n);
}
GS_HOST_DEVICE OneBitParams OneBitParamsFromSums(double pos_sum, uint32_t pos_count,
                                                 double neg_sum, uint32_t neg_count) {
  OneBitParams p{0.0f, 0.0f};
  if (pos_count > 0) p.pos = static_cast<float>(pos_sum / pos_count);
  if (neg_count > 0) p.neg = static_cast<float>(neg_sum / neg_count);
  return p;
}

}  // namespace internal
}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_INTERNAL_KERNELS_H_
