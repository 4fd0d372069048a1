// Portable scalar codec kernels: the reference every other implementation
// (AVX2, CUDA) must match bit for bit. Written so the compiler can still
// auto-vectorize the simple loops; the arithmetic order is the contract.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/codec/internal/kernels.h"

namespace gradstream {
namespace internal {
namespace {

inline float X(const float* grad, const float* residual, uint32_t i) {
  return residual ? grad[i] + residual[i] : grad[i];
}

void Moments(const float* grad, const float* residual, uint32_t n, float* max_abs, double* sum,
             double* sum_sq) {
  double s[kSumLanes] = {0}, q[kSumLanes] = {0};
  float m = 0.0f;
  bool nan = false;
  for (uint32_t i = 0; i < n; ++i) {
    const float x = X(grad, residual, i);
    const double d = x;
    s[i % kSumLanes] += d;
    q[i % kSumLanes] += d * d;
    const float a = std::fabs(x);
    nan |= std::isnan(a);
    m = std::max(m, a);
  }
  double ts = 0, tq = 0;
  for (int l = 0; l < kSumLanes; ++l) {
    ts += s[l];
    tq += q[l];
  }
  *max_abs = nan ? NAN : m;
  *sum = ts;
  *sum_sq = tq;
}

// |x| as an unsigned bit pattern orders finite < inf < NaN (see MaxAbsF32).
float MaxAbs(const float* grad, const float* residual, uint32_t n) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const float x = X(grad, residual, i);
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    m = std::max(m, bits & 0x7fffffffu);
  }
  float v;
  std::memcpy(&v, &m, 4);
  return v;
}

double SumAbs(const float* grad, const float* residual, uint32_t n) {
  double s[kSumLanes] = {0};
  for (uint32_t i = 0; i < n; ++i) s[i % kSumLanes] += std::fabs(X(grad, residual, i));
  double t = 0;
  for (int l = 0; l < kSumLanes; ++l) t += s[l];
  return t;
}

void SignSums(const float* grad, const float* residual, uint32_t n, double* pos_sum,
              uint32_t* pos_count, double* neg_sum, uint32_t* neg_count) {
  double p[kSumLanes] = {0}, q[kSumLanes] = {0};
  uint32_t pc = 0, nc = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const float x = X(grad, residual, i);
    if (x > 0.0f) {
      p[i % kSumLanes] += x;
      ++pc;
    } else if (!(x == 0.0f)) {
      q[i % kSumLanes] += x;  // NaN lands here and poisons the sum, which callers check
      ++nc;
    }
  }
  double tp = 0, tq = 0;
  for (int l = 0; l < kSumLanes; ++l) {
    tp += p[l];
    tq += q[l];
  }
  *pos_sum = tp;
  *pos_count = pc;
  *neg_sum = tq;
  *neg_count = nc;
}

bool EncodeF32(const float* grad, float* residual, uint32_t n, uint8_t* out) {
  bool bad = false;
  for (uint32_t i = 0; i < n; ++i) {
    const float x = X(grad, residual, i);
    bad |= !(std::fabs(x) <= FLT_MAX);
    std::memcpy(out + 4 * static_cast<size_t>(i), &x, 4);
    if (residual) residual[i] = 0.0f;
  }
  return !bad;
}

bool EncodeTwoBit(const float* grad, float* residual, uint32_t n, float t, uint8_t* out) {
  std::memset(out, 0, (static_cast<size_t>(n) + 3) / 4);
  bool bad = false;
  for (uint32_t i = 0; i < n; ++i) {
    const float x = X(grad, residual, i);
    bad |= !(std::fabs(x) <= FLT_MAX);
    uint32_t code = 0;
    float r = x;
    if (x >= t) {
      code = 1;
      r = x - t;
    } else if (x <= -t) {
      code = 2;
      r = x + t;
    }
    out[i / 4] |= static_cast<uint8_t>(code << (2 * (i % 4)));
    if (residual) residual[i] = r;
  }
  return !bad;
}

void EncodeTernary(const float* grad, float* residual, uint32_t n, TernaryParams p, PhiloxKey key,
                   uint32_t worker, uint32_t clock, uint8_t* out) {
  std::memset(out, 0, (static_cast<size_t>(n) + 3) / 4);
  EncodeTernaryRange(grad, residual, residual, 0, n, p, key, worker, clock, out);
}

bool EncodeTernaryChunk(const float* grad, float* residual, uint32_t n, float clip_factor,
                        PhiloxKey key, uint32_t worker, uint32_t clock, uint8_t* out,
                        float* scale) {
  float max_abs;
  double sum, sum_sq;
  Moments(grad, residual, n, &max_abs, &sum, &sum_sq);
  if (!std::isfinite(max_abs) || !std::isfinite(sum_sq)) return false;
  const TernaryParams p = TernaryParamsFromMoments(max_abs, sum, sum_sq, n, clip_factor);
  *scale = p.scale;
  if (p.scale > 0.0f) {
    EncodeTernary(grad, residual, n, p, key, worker, clock, out);
  } else {  // nothing to send: zero codes, residual = x
    (void)EncodeTwoBit(grad, residual, n, INFINITY, out);
  }
  return true;
}

void EncodeOneBit(const float* grad, float* residual, uint32_t n, OneBitParams p, uint8_t* out) {
  std::memset(out, 0, (static_cast<size_t>(n) + 7) / 8);
  const bool zero_bit = OneBitZeroBit(p.pos, p.neg);
  for (uint32_t i = 0; i < n; ++i) {
    const float x = X(grad, residual, i);
    const bool bit = x > 0.0f || (x == 0.0f && zero_bit);
    out[i / 8] |= static_cast<uint8_t>(bit) << (i % 8);
    if (residual) residual[i] = x - (bit ? p.pos : p.neg);
  }
}

void EncodeF16(const float* grad, float* residual, uint32_t n, float scale, uint8_t* out) {
  const float inv = 1.0f / scale;  // a power of two: exact
  for (uint32_t i = 0; i < n; ++i) {
    const float x = X(grad, residual, i);
    const uint16_t h = FloatToHalfBits(x * inv);
    std::memcpy(out + 2 * static_cast<size_t>(i), &h, 2);
    if (residual) residual[i] = x - HalfBitsToFloat(h) * scale;
  }
}

// The code of x / scale (int8, int4), rounded in the default mode, to nearest
// even; through an integer so that a code 0 decodes to +0, as the AVX2 twins'
// do. *r = x - code * scale, exact for a power-of-two scale.
inline int32_t ScaledCode(float x, float inv, float scale, float* r) {
  const int32_t q = static_cast<int32_t>(std::nearbyint(x * inv));
  *r = x - static_cast<float>(q) * scale;
  return q;
}

void EncodeI8(const float* grad, float* residual, uint32_t n, float scale, uint8_t* out) {
  const float inv = 1.0f / scale;  // a power of two: exact
  float r;
  for (uint32_t i = 0; i < n; ++i) {
    const int32_t q = ScaledCode(X(grad, residual, i), inv, scale, &r);
    out[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    if (residual) residual[i] = r;
  }
}

void DecodeAddI8(const uint8_t* payload, uint32_t n, float ws, float* acc) {
  for (uint32_t i = 0; i < n; ++i) {
    acc[i] += ws * static_cast<float>(static_cast<int8_t>(payload[i]));
  }
}

void DecodeI8(const uint8_t* payload, uint32_t n, float* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int8_t>(payload[i]));
}

void EncodeI4(const float* grad, float* residual, uint32_t n, float scale, uint8_t* out) {
  const float inv = 1.0f / scale;  // a power of two: exact
  float r0, r1;
  uint32_t i = 0;
  for (; i + 1 < n; i += 2) {
    const int32_t q0 = ScaledCode(X(grad, residual, i), inv, scale, &r0);
    const int32_t q1 = ScaledCode(X(grad, residual, i + 1), inv, scale, &r1);
    out[i / 2] = static_cast<uint8_t>((q0 & 0xf) | ((q1 & 0xf) << 4));
    if (residual) {
      residual[i] = r0;
      residual[i + 1] = r1;
    }
  }
  if (i < n) {
    out[i / 2] = static_cast<uint8_t>(ScaledCode(X(grad, residual, i), inv, scale, &r0) & 0xf);
    if (residual) residual[i] = r0;
  }
}

// The two codes of each byte as floats, low nibble first.
struct Int4PairTable {
  float v[256][2];
  constexpr Int4PairTable() : v() {
    for (int b = 0; b < 256; ++b) {
      v[b][0] = static_cast<float>(((b & 0xf) ^ 8) - 8);
      v[b][1] = static_cast<float>(((b >> 4) ^ 8) - 8);
    }
  }
};
constexpr Int4PairTable kInt4Pairs;

bool ValidI4(const uint8_t* payload, uint32_t n) {
  const size_t bytes = (static_cast<size_t>(n) + 1) / 2;
  for (size_t b = 0; b < bytes; ++b) {
    if ((payload[b] & 0xf) == 8 || (payload[b] >> 4) == 8) return false;
  }
  return n % 2 == 0 || (payload[bytes - 1] >> 4) == 0;
}

void DecodeAddI4(const uint8_t* payload, uint32_t n, float ws, float* acc) {
  for (uint32_t i = 0; i < n; ++i) acc[i] += ws * kInt4Pairs.v[payload[i / 2]][i % 2];
}

void DecodeI4(const uint8_t* payload, uint32_t n, float* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = kInt4Pairs.v[payload[i / 2]][i % 2];
}

bool Valid2Bit(const uint8_t* payload, uint32_t n) {
  const size_t bytes = (static_cast<size_t>(n) + 3) / 4;
  for (size_t b = 0; b < bytes; ++b) {
    const uint8_t v = payload[b];
    if (v & (v >> 1) & 0x55) return false;
  }
  if (n % 4 != 0 && (payload[bytes - 1] >> (2 * (n % 4))) != 0) return false;
  return true;
}

float MaxAbsF32(const uint8_t* payload, uint32_t n) {
  // |v| as an unsigned bit pattern orders finite < inf < NaN, so an integer
  // max needs no special cases and matches the AVX2 twin exactly.
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, payload + 4 * static_cast<size_t>(i), 4);
    m = std::max(m, bits & 0x7fffffffu);
  }
  float v;
  std::memcpy(&v, &m, 4);
  return v;
}

float MaxAbsF16(const uint8_t* payload, uint32_t n) {
  uint16_t m = 0;  // as MaxAbsF32: finite < inf < NaN as bit patterns
  for (uint32_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, payload + 2 * static_cast<size_t>(i), 2);
    m = std::max<uint16_t>(m, h & 0x7fffu);
  }
  return HalfBitsToFloat(m);
}

void DecodeAddF16(const uint8_t* payload, uint32_t n, float ws, float* acc) {
  for (uint32_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, payload + 2 * static_cast<size_t>(i), 2);
    acc[i] += ws * HalfBitsToFloat(h);
  }
}

void DecodeF16(const uint8_t* payload, uint32_t n, float* out) {
  for (uint32_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, payload + 2 * static_cast<size_t>(i), 2);
    out[i] = HalfBitsToFloat(h);
  }
}

void DecodeAdd2Bit(const uint8_t* payload, uint32_t n, float ws, float* acc) {
  for (uint32_t i = 0; i < n; ++i) acc[i] += kTwoBitSigns.v[payload[i / 4]][i % 4] * ws;
}

void DecodeAdd1Bit(const uint8_t* payload, uint32_t n, float wpos, float wneg, float* acc) {
  for (uint32_t i = 0; i < n; ++i) acc[i] += ((payload[i / 8] >> (i % 8)) & 1) ? wpos : wneg;
}

void DecodeAddF32(const uint8_t* payload, uint32_t n, float weight, float* acc) {
  for (uint32_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, payload + 4 * static_cast<size_t>(i), 4);
    acc[i] += weight * v;
  }
}

void Decode2Bit(const uint8_t* payload, uint32_t n, float scale, float* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = kTwoBitSigns.v[payload[i / 4]][i % 4] * scale;
}

void Decode1Bit(const uint8_t* payload, uint32_t n, float pos, float neg, float* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = ((payload[i / 8] >> (i % 8)) & 1) ? pos : neg;
}

// 8 floats at a time in a GCC/Clang vector (two SSE2 registers here; -O2
// does not vectorize the plain loop).
void Subtract(const float* a, const float* b, uint32_t n, float* out) {
  using Float8 = float __attribute__((vector_size(32)));
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Float8 x, y;
    std::memcpy(&x, a + i, sizeof(x));
    std::memcpy(&y, b + i, sizeof(y));
    x -= y;
    std::memcpy(out + i, &x, sizeof(x));
  }
  for (; i < n; ++i) out[i] = a[i] - b[i];
}

}  // namespace

void EncodeTernaryRange(const float* grad, const float* residual_in, float* residual_out,
                        uint32_t begin, uint32_t end, TernaryParams p, PhiloxKey key,
                        uint32_t worker, uint32_t clock, uint8_t* out) {
  PhiloxCounter rnd{};
  const float inv_s = InverseScale(p.scale);
  for (uint32_t i = begin; i < end; ++i) {
    const uint32_t j = i % kDrawsPerBlock;
    if (j == 0 || i == begin) {
      rnd = CodecPhilox(PhiloxCounter{i / kDrawsPerBlock, worker, clock, 0}, key);
    }
    const float x = X(grad, residual_in, i);
    // |clamp(x, -clip, clip)| and the sign of x (clip > 0 whenever s > 0).
    const float prob = std::min(std::fabs(x), p.clip) * inv_s;
    uint32_t code = 0;
    float r = x;
    if (Uniform8(BlockBits8(rnd, j)) < prob) {
      if (x > 0.0f) {
        code = 1;
        r = x - p.scale;
      } else {
        code = 2;
        r = x + p.scale;
      }
    }
    out[i / 4] |= static_cast<uint8_t>(code << (2 * (i % 4)));
    if (residual_out) residual_out[i] = r;
  }
}

const CodecKernels& PortableKernels() {
  static const CodecKernels k = {
      Moments,       MaxAbs,        SumAbs,       SignSums,   EncodeF32,
      EncodeTwoBit,  EncodeTernary, EncodeTernaryChunk,       EncodeOneBit,
      EncodeF16,     Valid2Bit,     MaxAbsF32,    MaxAbsF16,  DecodeAdd2Bit,
      DecodeAdd1Bit, DecodeAddF32,  DecodeAddF16, Decode2Bit, Decode1Bit,
      DecodeF16,     EncodeI8,      DecodeAddI8,  DecodeI8,   EncodeI4,
      ValidI4,       DecodeAddI4,   DecodeI4,     Subtract};
  return k;
}

}  // namespace internal
}  // namespace gradstream
