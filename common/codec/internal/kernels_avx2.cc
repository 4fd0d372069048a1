// AVX2 codec kernels. Compiled with -mavx2 -mf16c (this file only) and
// selected at run time by dispatch.cc (kernels_avx512.cc replaces a few of
// them where the CPU has AVX-512). Each function
// mirrors its portable twin's arithmetic exactly -- same fp32 operations,
// same [lane reduction] order, selects instead of arithmetic on masks -- so
// outputs are bit-identical.
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/codec/internal/kernels.h"

namespace gradstream {
namespace internal {
namespace {

// kSpread[b] moves bit j of b to bit 2j: turns an 8-lane mask into the low
// (or, shifted by one, the high) bits of eight 2-bit codes.
struct SpreadTable {
  uint16_t v[256];
  constexpr SpreadTable() : v() {
    for (int b = 0; b < 256; ++b) {
      uint16_t s = 0;
      for (int j = 0; j < 8; ++j) s |= static_cast<uint16_t>(((b >> j) & 1) << (2 * j));
      v[b] = s;
    }
  }
};
constexpr SpreadTable kSpread;


inline __m256 LoadX(const float* grad, const float* residual, uint32_t i) {
  __m256 x = _mm256_loadu_ps(grad + i);
  if (residual) x = _mm256_add_ps(x, _mm256_loadu_ps(residual + i));
  return x;
}
inline float X(const float* grad, const float* residual, uint32_t i) {
  return residual ? grad[i] + residual[i] : grad[i];
}
inline __m256 Abs(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
inline __m256 NotFinite(__m256 x) {
  return _mm256_cmp_ps(Abs(x), _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ);
}
inline void StoreCodes(uint8_t* out, int pos_mask, int neg_mask) {
  const uint16_t w = static_cast<uint16_t>(kSpread.v[pos_mask] | (kSpread.v[neg_mask] << 1));
  std::memcpy(out, &w, 2);
}

// Adds the eight floats of v, widened to fp64, to lanes 0..3 (lo) and 4..7
// (hi) of one half of the kSumLanes accumulators; see [lane reduction].
inline void AddWidened(__m256d& lo, __m256d& hi, __m256 v) {
  lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}
inline void StoreLanes(const __m256d (&acc)[4], double (&lanes)[kSumLanes]) {
  for (int k = 0; k < 4; ++k) _mm256_storeu_pd(lanes + 4 * k, acc[k]);
}
inline double AddLanes(const double (&lanes)[kSumLanes]) {
  double t = 0;
  for (int l = 0; l < kSumLanes; ++l) t += lanes[l];
  return t;
}

// NOTE: [prefetch] The first pass over a chunk reads grad and residual from
// memory; one 64-byte line of each per 16 elements is asked for 4 KiB ahead,
// which the hardware prefetcher alone does not keep up with. The ternary
// encode pass does the same for a chunk larger than the cache. Measured:
// docs/design/ternary-encode.md.
constexpr uint32_t kPrefetchElems = 1024;
inline void PrefetchAhead(const float* grad, const float* residual, uint32_t i) {
  _mm_prefetch(reinterpret_cast<const char*>(grad + i + kPrefetchElems), _MM_HINT_T0);
  if (residual) {
    _mm_prefetch(reinterpret_cast<const char*>(residual + i + kPrefetchElems), _MM_HINT_T0);
  }
}

// The [lane reduction] accumulators of Moments: sums and sums of squares in
// 16 fp64 lanes, max |x| and a NaN flag in 8 fp32 lanes.
struct MomentAcc {
  __m256d s[4], q[4];
  __m256 m, nan;

  MomentAcc() {
    for (int k = 0; k < 4; ++k) s[k] = q[k] = _mm256_setzero_pd();
    m = nan = _mm256_setzero_ps();
  }
  // Adds x0 (elements 16k..16k+7) and x1 (16k+8..16k+15).
  template <bool kTrackNaN = true>
  void Add16(__m256 x0, __m256 x1) {
    AddOne<kTrackNaN>(x0, 0);
    AddOne<kTrackNaN>(x1, 2);
  }
  template <bool kTrackNaN>
  void AddOne(__m256 x, int a) {
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    s[a] = _mm256_add_pd(s[a], lo);
    s[a + 1] = _mm256_add_pd(s[a + 1], hi);
    q[a] = _mm256_add_pd(q[a], _mm256_mul_pd(lo, lo));
    q[a + 1] = _mm256_add_pd(q[a + 1], _mm256_mul_pd(hi, hi));
    if (kTrackNaN) nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    m = _mm256_max_ps(m, Abs(x));
  }
  // Adds elements [begin, end) (begin % 16 == 0) and folds the lanes. With
  // kStoreX, x = grad + residual is also written to x_out.
  template <bool kStoreX>
  void Finish(const float* grad, const float* residual, float* x_out, uint32_t begin,
              uint32_t end, float* max_abs, double* sum, double* sum_sq) {
    const uint32_t end16 = begin + ((end - begin) & ~15u);
    for (uint32_t i = begin; i < end16; i += 16) {
      PrefetchAhead(grad, residual, i);  // see [prefetch]
      const __m256 x0 = LoadX(grad, residual, i), x1 = LoadX(grad, residual, i + 8);
      if (kStoreX) {
        _mm256_storeu_ps(x_out + i, x0);
        _mm256_storeu_ps(x_out + i + 8, x1);
      }
      Add16(x0, x1);
    }
    double sl[kSumLanes], ql[kSumLanes];
    StoreLanes(s, sl);
    StoreLanes(q, ql);
    alignas(32) float mv[8];
    _mm256_store_ps(mv, m);
    bool any_nan = _mm256_movemask_ps(nan) != 0;
    float mx = 0.0f;
    for (int l = 0; l < 8; ++l) mx = mv[l] > mx ? mv[l] : mx;
    for (uint32_t i = end16; i < end; ++i) {
      const float x = X(grad, residual, i);
      if (kStoreX) x_out[i] = x;
      const double d = x;
      sl[i % kSumLanes] += d;
      ql[i % kSumLanes] += d * d;
      any_nan |= std::isnan(x);
      mx = std::fabs(x) > mx ? std::fabs(x) : mx;
    }
    *max_abs = any_nan ? NAN : mx;
    *sum = AddLanes(sl);
    *sum_sq = AddLanes(ql);
  }
};

void Moments(const float* grad, const float* residual, uint32_t n, float* max_abs, double* sum,
             double* sum_sq) {
  MomentAcc().Finish<false>(grad, residual, nullptr, 0, n, max_abs, sum, sum_sq);
}

double SumAbs(const float* grad, const float* residual, uint32_t n) {
  __m256d acc[4];
  for (auto& a : acc) a = _mm256_setzero_pd();
  const uint32_t n16 = n & ~15u;
  for (uint32_t i = 0; i < n16; i += 16) {
    PrefetchAhead(grad, residual, i);  // see [prefetch]
    AddWidened(acc[0], acc[1], Abs(LoadX(grad, residual, i)));
    AddWidened(acc[2], acc[3], Abs(LoadX(grad, residual, i + 8)));
  }
  double s[kSumLanes];
  StoreLanes(acc, s);
  for (uint32_t i = n16; i < n; ++i) s[i % kSumLanes] += std::fabs(X(grad, residual, i));
  return AddLanes(s);
}

void SignSums(const float* grad, const float* residual, uint32_t n, double* pos_sum,
              uint32_t* pos_count, double* neg_sum, uint32_t* neg_count) {
  __m256d p_acc[4], q_acc[4];
  for (int k = 0; k < 4; ++k) p_acc[k] = q_acc[k] = _mm256_setzero_pd();
  uint32_t pc = 0, nc = 0;
  const __m256 zero = _mm256_setzero_ps();
  const uint32_t n16 = n & ~15u;
  for (uint32_t i = 0; i < n16; i += 16) {
    PrefetchAhead(grad, residual, i);  // see [prefetch]
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 x = LoadX(grad, residual, i + 8 * h);
      const __m256 gt = _mm256_cmp_ps(x, zero, _CMP_GT_OQ);
      const __m256 neq = _mm256_cmp_ps(x, zero, _CMP_NEQ_UQ);  // x < 0 or NaN, or x > 0
      const __m256 lt = _mm256_andnot_ps(gt, neq);
      // +0.0 elsewhere, as the portable sum skips
      AddWidened(p_acc[2 * h], p_acc[2 * h + 1], _mm256_and_ps(gt, x));
      AddWidened(q_acc[2 * h], q_acc[2 * h + 1], _mm256_and_ps(lt, x));
      pc += __builtin_popcount(_mm256_movemask_ps(gt));
      nc += __builtin_popcount(_mm256_movemask_ps(lt));
    }
  }
  double p[kSumLanes], q[kSumLanes];
  StoreLanes(p_acc, p);
  StoreLanes(q_acc, q);
  for (uint32_t i = n16; i < n; ++i) {
    const float x = X(grad, residual, i);
    if (x > 0.0f) {
      p[i % kSumLanes] += x;
      ++pc;
    } else if (!(x == 0.0f)) {
      q[i % kSumLanes] += x;
      ++nc;
    }
  }
  *pos_sum = AddLanes(p);
  *pos_count = pc;
  *neg_sum = AddLanes(q);
  *neg_count = nc;
}

float MaxAbs(const float* grad, const float* residual, uint32_t n) {
  // Unsigned max of |x|'s bit pattern, as in the portable reference.
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  __m256i m = _mm256_setzero_si256();
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(LoadX(grad, residual, i)),
                                             abs_mask));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), m);
  const float tail = PortableKernels().max_abs(grad + n8, residual ? residual + n8 : nullptr,
                                               n - n8);
  uint32_t best;
  std::memcpy(&best, &tail, 4);
  for (uint32_t l : lanes) best = std::max(best, l);
  float v;
  std::memcpy(&v, &best, 4);
  return v;
}

// F16C's conversion rounds to nearest even, as FloatToHalfBits does.
void EncodeF16(const float* grad, float* residual, uint32_t n, float scale, uint8_t* out) {
  const float inv = 1.0f / scale;
  const __m256 vinv = _mm256_set1_ps(inv), vs = _mm256_set1_ps(scale);
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const __m256 x = LoadX(grad, residual, i);
    const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(x, vinv),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * size_t{i}), h);
    if (residual) {
      _mm256_storeu_ps(residual + i, _mm256_sub_ps(x, _mm256_mul_ps(_mm256_cvtph_ps(h), vs)));
    }
  }
  if (n8 < n) {
    PortableKernels().encode_f16(grad + n8, residual ? residual + n8 : nullptr, n - n8, scale,
                                 out + 2 * size_t{n8});
  }
}

bool EncodeF32(const float* grad, float* residual, uint32_t n, uint8_t* out) {
  __m256 bad = _mm256_setzero_ps();
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const __m256 x = LoadX(grad, residual, i);
    bad = _mm256_or_ps(bad, NotFinite(x));
    _mm256_storeu_ps(reinterpret_cast<float*>(out) + i, x);
    if (residual) _mm256_storeu_ps(residual + i, _mm256_setzero_ps());
  }
  bool ok = _mm256_movemask_ps(bad) == 0;
  for (uint32_t i = n8; i < n; ++i) {
    const float x = X(grad, residual, i);
    ok &= std::fabs(x) <= FLT_MAX;
    std::memcpy(out + 4 * static_cast<size_t>(i), &x, 4);
    if (residual) residual[i] = 0.0f;
  }
  return ok;
}

bool EncodeTwoBit(const float* grad, float* residual, uint32_t n, float t, uint8_t* out) {
  const __m256 vt = _mm256_set1_ps(t), vnt = _mm256_set1_ps(-t);
  __m256 bad = _mm256_setzero_ps();
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const __m256 x = LoadX(grad, residual, i);
    bad = _mm256_or_ps(bad, NotFinite(x));
    const __m256 pos = _mm256_cmp_ps(x, vt, _CMP_GE_OQ);
    const __m256 neg = _mm256_cmp_ps(x, vnt, _CMP_LE_OQ);
    StoreCodes(out + i / 4, _mm256_movemask_ps(pos), _mm256_movemask_ps(neg));
    if (residual) {
      __m256 r = _mm256_blendv_ps(x, _mm256_sub_ps(x, vt), pos);
      r = _mm256_blendv_ps(r, _mm256_add_ps(x, vt), neg);
      _mm256_storeu_ps(residual + i, r);
    }
  }
  bool ok = _mm256_movemask_ps(bad) == 0;
  if (n8 < n) {
    // The tail is byte aligned (n8 % 8 == 0): let the reference finish it.
    ok &= PortableKernels().encode_twobit(grad + n8, residual ? residual + n8 : nullptr, n - n8, t,
                                          out + n8 / 4);
  }
  return ok;
}

// Round r's key of Philox4x32 (philox.h adds the Weyl constants once a
// round): key + r * (W0, W1), mod 2^32.
inline PhiloxKey RoundKey(PhiloxKey key, int r) {
  const uint32_t n = static_cast<uint32_t>(r);
  return PhiloxKey{key.k0 + n * kPhiloxW0, key.k1 + n * kPhiloxW1};
}

// The round keys of a Philox key, broadcast once per chunk.
struct RoundKeys {
  __m256i k0[kPhiloxRounds], k1[kPhiloxRounds];
  explicit RoundKeys(PhiloxKey key) {
    for (int r = 0; r < kPhiloxRounds; ++r) {
      k0[r] = _mm256_set1_epi32(static_cast<int>(RoundKey(key, r).k0));
      k1[r] = _mm256_set1_epi32(static_cast<int>(RoundKey(key, r).k1));
    }
  }
};

// Eight Philox4x32 blocks at once (kPhiloxRounds rounds), one per 32-bit
// lane (SoA).
inline void Philox8(__m256i& c0, __m256i& c1, __m256i& c2, __m256i& c3, const RoundKeys& key) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(kPhiloxM1));
  for (int r = 0; r < kPhiloxRounds; ++r) {
    const __m256i pe0 = _mm256_mul_epu32(c0, m0);
    const __m256i po0 = _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), m0);
    const __m256i pe1 = _mm256_mul_epu32(c2, m1);
    const __m256i po1 = _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), m1);
    const __m256i lo0 = _mm256_blend_epi32(pe0, _mm256_slli_epi64(po0, 32), 0xAA);
    const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(pe0, 32), po0, 0xAA);
    const __m256i lo1 = _mm256_blend_epi32(pe1, _mm256_slli_epi64(po1, 32), 0xAA);
    const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(pe1, 32), po1, 0xAA);
    const __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), key.k0[r]);
    const __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), key.k1[r]);
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
}

// The 128 draws of elements i..i+127 (i % 128 == 0), one byte each in
// element order (see [reproducible rounding]): eight Philox blocks, one per
// lane, transposed so that each block's 128 bits are contiguous.
inline void Draws128(uint32_t i, uint32_t worker, uint32_t clock, const RoundKeys& key,
                     uint8_t* dst) {
  __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(i / kDrawsPerBlock)),
                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i c1 = _mm256_set1_epi32(static_cast<int>(worker));
  __m256i c2 = _mm256_set1_epi32(static_cast<int>(clock));
  __m256i c3 = _mm256_setzero_si256();
  Philox8(c0, c1, c2, c3, key);
  // u0 = blocks 0|4, u1 = 1|5, u2 = 2|6, u3 = 3|7 (each word order c0..c3).
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  auto* d = reinterpret_cast<__m256i*>(dst);
  _mm256_storeu_si256(d + 0, _mm256_permute2x128_si256(u0, u1, 0x20));
  _mm256_storeu_si256(d + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
  _mm256_storeu_si256(d + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
  _mm256_storeu_si256(d + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
}

// Where the encode pass finds x: kFromGrad (x = grad, no residual),
// kFromBoth (x = grad + residual) or kFromResidual (x already in residual).
enum XSource { kFromGrad, kFromBoth, kFromResidual };

struct TernaryConsts {
  __m256 clip, s, sign, scale256, half_bin;
  __m256i low_byte;
  explicit TernaryConsts(TernaryParams p, float inv_s256)
      : clip(_mm256_set1_ps(p.clip)), s(_mm256_set1_ps(p.scale)),
        sign(_mm256_set1_ps(-0.0f)), scale256(_mm256_set1_ps(inv_s256)),
        half_bin(_mm256_set1_ps(0.5f)), low_byte(_mm256_set1_epi16(0x00FF)) {}
};

// The take mask of eight elements (Uniform8(draw) < prob, scaled by 256:
// see InverseScale256); writes x - decoded(x) to the residual unless kX is
// kFromGrad.
template <XSource kX>
inline __m256 Take8(const float* grad, float* residual, const uint8_t* draws, uint32_t e,
                    const TernaryConsts& c, __m256* x_out) {
  const float* x_src = kX == kFromResidual ? residual : grad;
  // 256 * Uniform8(b) = b + 0.5.
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(draws)));
  const __m256 uni256 = _mm256_add_ps(_mm256_cvtepi32_ps(b), c.half_bin);
  __m256 x = _mm256_loadu_ps(x_src + e);
  if (kX == kFromBoth) x = _mm256_add_ps(x, _mm256_loadu_ps(residual + e));
  const __m256 prob256 = _mm256_mul_ps(_mm256_min_ps(Abs(x), c.clip), c.scale256);
  const __m256 take = _mm256_cmp_ps(uni256, prob256, _CMP_LT_OQ);
  if (kX != kFromGrad) {
    // x - copysign(s, x) where taken, x - 0 elsewhere: the portable
    // x -/+ s and x, bit for bit (a taken x is never 0).
    const __m256 sent = _mm256_and_ps(take, _mm256_or_ps(_mm256_and_ps(x, c.sign), c.s));
    _mm256_storeu_ps(residual + e, _mm256_sub_ps(x, sent));
  }
  *x_out = x;
  return take;
}

// Encodes elements [begin, end) (multiples of 16) from their draws
// (draws[e - begin] for element e), 16 elements and 4 payload bytes a step,
// last first (see [ternary passes]).
template <XSource kX>
inline void EncodeWithDraws(const float* grad, float* residual, const uint8_t* draws,
                            uint32_t begin, uint32_t end, const TernaryConsts& c, uint8_t* out) {
  const float* x_src = kX == kFromResidual ? residual : grad;
  for (uint32_t k = begin; k < end; k += 16) {
    const uint32_t e = end - 16 - (k - begin);
    if (e >= kPrefetchElems) {
      _mm_prefetch(reinterpret_cast<const char*>(x_src + e - kPrefetchElems), _MM_HINT_T0);
    }
    __m256 xa, xb;
    const __m256 ta = Take8<kX>(grad, residual, draws + (e - begin), e, c, &xa);
    const __m256 tb = Take8<kX>(grad, residual, draws + (e - begin) + 8, e + 8, c, &xb);
    // The 2-bit codes of 16 elements as one movemask: element j's int16
    // lane is 0x00FF when it is taken and x > 0 (code 01), 0xFF00 when
    // taken and x < 0 (code 10), 0 else; the byte signs are then bits 2j
    // and 2j+1. A taken x is neither 0 nor NaN (callers reject NaN first),
    // so the sign bit of x is the code's sign. packs works per 128-bit
    // half, hence the permute back to element order.
    const __m256i take16 = _mm256_packs_epi32(_mm256_castps_si256(ta), _mm256_castps_si256(tb));
    const __m256i neg16 = _mm256_srai_epi16(
        _mm256_packs_epi32(_mm256_castps_si256(xa), _mm256_castps_si256(xb)), 15);
    const __m256i codes = _mm256_permute4x64_epi64(
        _mm256_and_si256(take16, _mm256_xor_si256(neg16, c.low_byte)), 0xD8);
    const uint32_t word = static_cast<uint32_t>(_mm256_movemask_epi8(codes));
    std::memcpy(out + e / 4, &word, 4);
  }
}

// Uniform8(b) < prob, scaled by 256 on both sides: b + 0.5 < a * (inv_s *
// 256) with a = min(|x|, clip). Scaling by a power of two is exact, so this
// is the portable comparison bit for bit, except when inv_s * 256
// overflows (s below about 2^-120) -- then the portable loop does the chunk
// -- or a * inv_s is subnormal, where both sides say "not taken"
// (b + 0.5 >= 0.5). Returns false in the overflow case.
inline bool InverseScale256(float scale, float* inv_s256) {
  *inv_s256 = InverseScale(scale) * 256.0f;
  return *inv_s256 <= FLT_MAX;
}

constexpr uint32_t kStep = 8 * kDrawsPerBlock;  // one Draws128

// The encode pass over [0, n_vec) (n_vec % kStep == 0), last block first (see
// [ternary passes]), with the draws from `draws` (draws[e] for element e) or,
// when it is null, from Philox here with `keys` (read only then).
template <XSource kX>
void EncodeBlocks(const float* grad, float* residual, const uint8_t* draws, uint32_t n_vec,
                  const TernaryConsts& c, const RoundKeys* keys, uint32_t worker, uint32_t clock,
                  uint8_t* out) {
  alignas(32) uint8_t local[kStep];
  for (uint32_t i = n_vec; i > 0;) {
    i -= kStep;
    if (draws == nullptr) Draws128(i, worker, clock, *keys, local);
    EncodeWithDraws<kX>(grad, residual, draws ? draws + i : local, i, i + kStep, c, out);
  }
}

void EncodeTernary(const float* grad, float* residual, uint32_t n, TernaryParams p, PhiloxKey key,
                   uint32_t worker, uint32_t clock, uint8_t* out) {
  std::memset(out, 0, (static_cast<size_t>(n) + 3) / 4);
  float inv_s256;
  if (!InverseScale256(p.scale, &inv_s256)) {
    return EncodeTernaryRange(grad, residual, residual, 0, n, p, key, worker, clock, out);
  }
  const TernaryConsts c(p, inv_s256);
  const RoundKeys keys(key);
  const uint32_t n_vec = n / kStep * kStep;
  if (residual) {
    EncodeBlocks<kFromBoth>(grad, residual, nullptr, n_vec, c, &keys, worker, clock, out);
  } else {
    EncodeBlocks<kFromGrad>(grad, nullptr, nullptr, n_vec, c, &keys, worker, clock, out);
  }
  EncodeTernaryRange(grad, residual, residual, n_vec, n, p, key, worker, clock, out);
}

// NOTE: [ternary passes] The statistics pass stores x = grad + residual into
// the residual (with error feedback) and, for a chunk of at most
// kMaxScratchElems, computes its draws into a per-thread scratch; the encode
// pass then reads one stream and runs no Philox, from the chunk's end back
// to its start. Results are bit for bit those of moments + encode_ternary
// (codec_test). Why and the measurement: docs/design/ternary-encode.md.
template <bool kResidual>
bool EncodeTernaryChunkT(const float* grad, float* residual, uint32_t n, float clip_factor,
                         PhiloxKey key, uint32_t worker, uint32_t clock, uint8_t* out,
                         float* scale) {
  const uint32_t n_vec = n / kStep * kStep;
  uint8_t* draws = n_vec <= kMaxScratchElems ? DrawScratch(n_vec) : nullptr;
  const RoundKeys keys(key);
  MomentAcc acc;
  for (uint32_t i = 0; i < n_vec; i += kStep) {
    if (draws) Draws128(i, worker, clock, keys, draws + i);
#pragma GCC unroll 8
    for (uint32_t k = 0; k < kStep; k += 16) {
      PrefetchAhead(grad, residual, i + k);  // see [prefetch]
      const __m256 x0 = LoadX(grad, residual, i + k), x1 = LoadX(grad, residual, i + k + 8);
      if (kResidual) {
        _mm256_storeu_ps(residual + i + k, x0);
        _mm256_storeu_ps(residual + i + k + 8, x1);
      }
      // No NaN flag: a NaN or Inf makes the sum of squares non-finite.
      acc.Add16</*kTrackNaN=*/false>(x0, x1);
    }
  }
  float max_abs;
  double sum, sum_sq;
  acc.Finish<kResidual>(grad, residual, residual, n_vec, n, &max_abs, &sum, &sum_sq);
  if (!std::isfinite(max_abs) || !std::isfinite(sum_sq)) return false;
  const TernaryParams p = TernaryParamsFromMoments(max_abs, sum, sum_sq, n, clip_factor);
  *scale = p.scale;
  // From here x is grad (no residual) or residual.
  const float* x = kResidual ? residual : grad;
  float inv_s256;
  if (!(p.scale > 0.0f) || !InverseScale256(p.scale, &inv_s256)) {
    std::memset(out, 0, (static_cast<size_t>(n) + 3) / 4);
    // A zero scale sends zero codes, and the residual holds x already.
    if (p.scale > 0.0f) EncodeTernaryRange(x, nullptr, residual, 0, n, p, key, worker, clock, out);
    return true;
  }
  // The vector pass writes every byte of its range.
  std::memset(out + n_vec / 4, 0, (static_cast<size_t>(n) + 3) / 4 - n_vec / 4);
  EncodeBlocks<kResidual ? kFromResidual : kFromGrad>(grad, residual, draws, n_vec,
                                                      TernaryConsts(p, inv_s256), &keys, worker,
                                                      clock, out);
  EncodeTernaryRange(x, nullptr, residual, n_vec, n, p, key, worker, clock, out);
  return true;
}

// bit = x > 0 (kCmp = _CMP_GT_OQ), or x >= 0 when zeros take the 1 bit
// (_CMP_GE_OQ; see [onebit zeros]); NaN gives 0 either way, as in the
// portable rule.
template <int kCmp>
void EncodeOneBitT(const float* grad, float* residual, uint32_t n, OneBitParams p,
                   uint8_t* out) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 vpos = _mm256_set1_ps(p.pos), vneg = _mm256_set1_ps(p.neg);
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const __m256 x = LoadX(grad, residual, i);
    const __m256 one = _mm256_cmp_ps(x, zero, kCmp);
    out[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(one));
    if (residual) {
      _mm256_storeu_ps(residual + i, _mm256_sub_ps(x, _mm256_blendv_ps(vneg, vpos, one)));
    }
  }
  if (n8 < n) {
    PortableKernels().encode_onebit(grad + n8, residual ? residual + n8 : nullptr, n - n8, p,
                                    out + n8 / 8);
  }
}

void EncodeOneBit(const float* grad, float* residual, uint32_t n, OneBitParams p, uint8_t* out) {
  if (OneBitZeroBit(p.pos, p.neg)) {
    EncodeOneBitT<_CMP_GE_OQ>(grad, residual, n, p, out);
  } else {
    EncodeOneBitT<_CMP_GT_OQ>(grad, residual, n, p, out);
  }
}

void DecodeAdd2Bit(const uint8_t* payload, uint32_t n, float ws, float* acc) {
  const __m256 w = _mm256_set1_ps(ws);
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const uint8_t b0 = payload[i / 4], b1 = payload[i / 4 + 1];
    const __m256 sign =
        _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_load_ps(kTwoBitSigns.v[b0])),
                             _mm_load_ps(kTwoBitSigns.v[b1]), 1);
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(sign, w)));
  }
  if (n8 < n) PortableKernels().decode_add_2bit(payload + n8 / 4, n - n8, ws, acc + n8);
}

void DecodeAdd1Bit(const uint8_t* payload, uint32_t n, float wpos, float wneg, float* acc) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 vpos = _mm256_set1_ps(wpos), vneg = _mm256_set1_ps(wneg);
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const __m256i b = _mm256_and_si256(_mm256_set1_epi32(payload[i / 8]), bit);
    const __m256 set = _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, bit));
    _mm256_storeu_ps(acc + i,
                     _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_blendv_ps(vneg, vpos, set)));
  }
  if (n8 < n) PortableKernels().decode_add_1bit(payload + n8 / 8, n - n8, wpos, wneg, acc + n8);
}

void DecodeAddF32(const uint8_t* payload, uint32_t n, float weight, float* acc) {
  const __m256 w = _mm256_set1_ps(weight);
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const __m256 v = _mm256_loadu_ps(reinterpret_cast<const float*>(payload) + i);
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(w, v)));
  }
  if (n8 < n) PortableKernels().decode_add_f32(payload + 4 * static_cast<size_t>(n8), n - n8,
                                               weight, acc + n8);
}

void DecodeAddF16(const uint8_t* payload, uint32_t n, float ws, float* acc) {
  const __m256 w = _mm256_set1_ps(ws);
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const __m256 v = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(payload + 2 * size_t{i})));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(w, v)));
  }
  if (n8 < n) PortableKernels().decode_add_f16(payload + 2 * size_t{n8}, n - n8, ws, acc + n8);
}

void DecodeF16(const uint8_t* payload, uint32_t n, float* out) {
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i*>(payload + 2 * size_t{i}))));
  }
  if (n8 < n) PortableKernels().decode_f16(payload + 2 * size_t{n8}, n - n8, out + n8);
}

// The codes of the 8 elements at `i` (int8, int4) as int32, and their
// residuals; cvtps_epi32 rounds in the default mode, to nearest even, as
// nearbyint does.
inline __m256i ScaledCodes(const float* grad, float* residual, uint32_t i, __m256 vinv,
                           __m256 vs) {
  const __m256 x = LoadX(grad, residual, i);
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(x, vinv));
  if (residual) {
    _mm256_storeu_ps(residual + i, _mm256_sub_ps(x, _mm256_mul_ps(_mm256_cvtepi32_ps(q), vs)));
  }
  return q;
}

void EncodeI8(const float* grad, float* residual, uint32_t n, float scale, uint8_t* out) {
  const __m256 vinv = _mm256_set1_ps(1.0f / scale), vs = _mm256_set1_ps(scale);
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const __m256i q = ScaledCodes(grad, residual, i, vinv, vs);
    const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm_packs_epi16(q16, q16));
  }
  if (n8 < n) {
    PortableKernels().encode_i8(grad + n8, residual ? residual + n8 : nullptr, n - n8, scale,
                                out + n8);
  }
}

inline __m256 LoadI8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

void DecodeAddI8(const uint8_t* payload, uint32_t n, float ws, float* acc) {
  const __m256 w = _mm256_set1_ps(ws);
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i),
                                            _mm256_mul_ps(w, LoadI8(payload + i))));
  }
  if (n8 < n) PortableKernels().decode_add_i8(payload + n8, n - n8, ws, acc + n8);
}

void DecodeI8(const uint8_t* payload, uint32_t n, float* out) {
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) _mm256_storeu_ps(out + i, LoadI8(payload + i));
  if (n8 < n) PortableKernels().decode_i8(payload + n8, n - n8, out + n8);
}

void EncodeI4(const float* grad, float* residual, uint32_t n, float scale, uint8_t* out) {
  const __m256 vinv = _mm256_set1_ps(1.0f / scale), vs = _mm256_set1_ps(scale);
  const __m128i nibble = _mm_set1_epi8(0x0f), low_byte = _mm_set1_epi16(0x00ff);
  const uint32_t n16 = n & ~15u;
  for (uint32_t i = 0; i < n16; i += 16) {
    const __m256i a = ScaledCodes(grad, residual, i, vinv, vs);
    const __m256i b = ScaledCodes(grad, residual, i + 8, vinv, vs);
    const __m128i codes = _mm_packs_epi16(
        _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)),
        _mm_packs_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
    // Each 16-bit lane holds an even element's nibble (low byte) and an odd
    // one's (high byte); v | v >> 4 puts both in the low byte.
    const __m128i v = _mm_and_si128(codes, nibble);
    const __m128i packed = _mm_and_si128(_mm_or_si128(v, _mm_srli_epi16(v, 4)), low_byte);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i / 2), _mm_packus_epi16(packed, packed));
  }
  if (n16 < n) {
    PortableKernels().encode_i4(grad + n16, residual ? residual + n16 : nullptr, n - n16, scale,
                                out + n16 / 2);
  }
}

// Elements i..i+7 of an int4 payload as floats (4 bytes at p).
inline __m256 LoadI4(const uint8_t* p) {
  int32_t word;
  std::memcpy(&word, p, 4);
  const __m128i b = _mm_cvtsi32_si128(word), nibble = _mm_set1_epi8(0x0f);
  const __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(b, nibble),
                                          _mm_and_si128(_mm_srli_epi16(b, 4), nibble));
  const __m128i eight = _mm_set1_epi8(8);
  const __m128i signed_codes = _mm_sub_epi8(_mm_xor_si128(codes, eight), eight);
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(signed_codes));
}

void DecodeAddI4(const uint8_t* payload, uint32_t n, float ws, float* acc) {
  const __m256 w = _mm256_set1_ps(ws);
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i),
                                            _mm256_mul_ps(w, LoadI4(payload + i / 2))));
  }
  if (n8 < n) PortableKernels().decode_add_i4(payload + n8 / 2, n - n8, ws, acc + n8);
}

void DecodeI4(const uint8_t* payload, uint32_t n, float* out) {
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) _mm256_storeu_ps(out + i, LoadI4(payload + i / 2));
  if (n8 < n) PortableKernels().decode_i4(payload + n8 / 2, n - n8, out + n8);
}

// No nibble 8 (code -8): both nibbles of 16 bytes at a time compared with 8.
bool ValidI4(const uint8_t* payload, uint32_t n) {
  const size_t b16 = (static_cast<size_t>(n) / 2) & ~size_t{15};  // whole bytes only
  const __m128i nibble = _mm_set1_epi8(0x0f), eights = _mm_set1_epi8(0x08);
  __m128i bad = _mm_setzero_si128();
  for (size_t b = 0; b < b16; b += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(payload + b));
    bad = _mm_or_si128(bad, _mm_cmpeq_epi8(_mm_and_si128(v, nibble), eights));
    bad = _mm_or_si128(bad, _mm_cmpeq_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), nibble), eights));
  }
  if (_mm_movemask_epi8(bad) != 0) return false;
  // The rest, including the padding check, is the reference's.
  return PortableKernels().valid_i4(payload + b16, n - static_cast<uint32_t>(2 * b16));
}

float MaxAbsF16(const uint8_t* payload, uint32_t n) {
  const __m256i abs_mask = _mm256_set1_epi16(0x7fff);
  __m256i m = _mm256_setzero_si256();
  const uint32_t n16 = n & ~15u;
  for (uint32_t i = 0; i < n16; i += 16) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(payload + 2 * size_t{i}));
    m = _mm256_max_epu16(m, _mm256_and_si256(v, abs_mask));
  }
  alignas(32) uint16_t lanes[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), m);
  uint16_t best = 0;
  for (uint16_t l : lanes) best = std::max(best, l);
  for (uint32_t i = n16; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, payload + 2 * size_t{i}, 2);
    best = std::max<uint16_t>(best, h & 0x7fffu);
  }
  return HalfBitsToFloat(best);
}

void Decode2Bit(const uint8_t* payload, uint32_t n, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const uint8_t b0 = payload[i / 4], b1 = payload[i / 4 + 1];
    const __m256 sign = _mm256_insertf128_ps(
        _mm256_castps128_ps256(_mm_load_ps(kTwoBitSigns.v[b0])), _mm_load_ps(kTwoBitSigns.v[b1]),
        1);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(sign, s));
  }
  if (n8 < n) PortableKernels().decode_2bit(payload + n8 / 4, n - n8, scale, out + n8);
}

void Decode1Bit(const uint8_t* payload, uint32_t n, float pos, float neg, float* out) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 vpos = _mm256_set1_ps(pos), vneg = _mm256_set1_ps(neg);
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const __m256i b = _mm256_and_si256(_mm256_set1_epi32(payload[i / 8]), bit);
    const __m256 set = _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, bit));
    _mm256_storeu_ps(out + i, _mm256_blendv_ps(vneg, vpos, set));
  }
  if (n8 < n) PortableKernels().decode_1bit(payload + n8 / 8, n - n8, pos, neg, out + n8);
}

void Subtract(const float* a, const float* b, uint32_t n, float* out) {
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) out[i] = a[i] - b[i];
}

float MaxAbsF32(const uint8_t* payload, uint32_t n) {
  // Unsigned max of |v|'s bit pattern, as in the portable reference.
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  __m256i m = _mm256_setzero_si256();
  const uint32_t n8 = n & ~7u;
  for (uint32_t i = 0; i < n8; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(payload + 4 * size_t{i}));
    m = _mm256_max_epu32(m, _mm256_and_si256(v, abs_mask));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), m);
  const float tail = PortableKernels().max_abs_f32(payload + 4 * static_cast<size_t>(n8), n - n8);
  uint32_t best;
  std::memcpy(&best, &tail, 4);
  for (uint32_t l : lanes) best = std::max(best, l);
  float v;
  std::memcpy(&v, &best, 4);
  return v;
}

bool Valid2Bit(const uint8_t* payload, uint32_t n) {
  // 32 payload bytes (128 codes) per step: a code is 11 where both bits are set.
  // Only whole bytes go through the vector loop; the last (maybe padded)
  // bytes are left to the reference so its padding check applies.
  const size_t b32 = (static_cast<size_t>(n) / 4) & ~size_t{31};
  const __m256i low = _mm256_set1_epi8(0x55);
  __m256i bad = _mm256_setzero_si256();
  for (size_t b = 0; b < b32; b += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(payload + b));
    bad = _mm256_or_si256(bad, _mm256_and_si256(_mm256_and_si256(v, _mm256_srli_epi16(v, 1)), low));
  }
  if (!_mm256_testz_si256(bad, bad)) return false;
  // The rest, including the padding check, is the reference's.
  return PortableKernels().valid_2bit(payload + b32, n - static_cast<uint32_t>(4 * b32));
}

constexpr TernaryChunkFn EncodeTernaryChunk =
    TernaryChunkByResidual<EncodeTernaryChunkT<true>, EncodeTernaryChunkT<false>>;

}  // namespace

const CodecKernels* Avx2Kernels() {
  static const CodecKernels k = {
      Moments,       MaxAbs,        SumAbs,       SignSums,   EncodeF32,
      EncodeTwoBit,  EncodeTernary, EncodeTernaryChunk,       EncodeOneBit,
      EncodeF16,     Valid2Bit,     MaxAbsF32,    MaxAbsF16,  DecodeAdd2Bit,
      DecodeAdd1Bit, DecodeAddF32,  DecodeAddF16, Decode2Bit, Decode1Bit,
      DecodeF16,     EncodeI8,      DecodeAddI8,  DecodeI8,   EncodeI4,
      ValidI4,       DecodeAddI4,   DecodeI4,     Subtract};
  return &k;
}

}  // namespace internal
}  // namespace gradstream
