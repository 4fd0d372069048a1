// AVX-512 (F, BW, DQ, VL) forms of the kernels that the ternary512 paths
// spend their time in: the wide draws, the whole ternary chunk, and the
// 2-bit decoders. Compiled with those flags (this file only) and selected at
// run time by dispatch.cc; every other kernel of the table is the AVX2 one.
// Each function mirrors its portable twin's arithmetic exactly (same fp32
// operations, same [lane reduction] order), so outputs are bit-identical.
// Measured: docs/design/ternary-encode.md, "AVX-512 blocks".
#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/codec/internal/kernels.h"

namespace gradstream {
namespace internal {

namespace {

// NOTE: [wide draws] The draws of elements [0, n) (n % 128 == 0), one byte
// each: sixteen Philox blocks at once, one per 32-bit lane (SoA), transposed
// so that each block's 128 bits are contiguous. The same counters, rounds
// and byte order as the AVX2 table's eight-lane Draws128, so the same bytes.
void DrawsWide(uint32_t n, uint32_t worker, uint32_t clock, PhiloxKey key, uint8_t* dst) {
  __m512i k0[kPhiloxRounds], k1[kPhiloxRounds];
  for (int r = 0; r < kPhiloxRounds; ++r) {
    const uint32_t rr = static_cast<uint32_t>(r);
    k0[r] = _mm512_set1_epi32(static_cast<int>(key.k0 + rr * kPhiloxW0));
    k1[r] = _mm512_set1_epi32(static_cast<int>(key.k1 + rr * kPhiloxW1));
  }
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(kPhiloxM1));
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  constexpr __mmask16 kOdd = 0xAAAA;
  constexpr uint32_t kWide = 16 * kDrawsPerBlock;  // 256 draws a round of blocks
  for (uint32_t i = 0; i < n; i += kWide) {
    __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(i / kDrawsPerBlock)), lanes);
    __m512i c1 = _mm512_set1_epi32(static_cast<int>(worker));
    __m512i c2 = _mm512_set1_epi32(static_cast<int>(clock));
    __m512i c3 = _mm512_setzero_si512();
    for (int r = 0; r < kPhiloxRounds; ++r) {  // PhiloxRound, sixteen lanes
      const __m512i pe0 = _mm512_mul_epu32(c0, m0);
      const __m512i po0 = _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), m0);
      const __m512i pe1 = _mm512_mul_epu32(c2, m1);
      const __m512i po1 = _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), m1);
      const __m512i lo0 = _mm512_mask_blend_epi32(kOdd, pe0, _mm512_slli_epi64(po0, 32));
      const __m512i hi0 = _mm512_mask_blend_epi32(kOdd, _mm512_srli_epi64(pe0, 32), po0);
      const __m512i lo1 = _mm512_mask_blend_epi32(kOdd, pe1, _mm512_slli_epi64(po1, 32));
      const __m512i hi1 = _mm512_mask_blend_epi32(kOdd, _mm512_srli_epi64(pe1, 32), po1);
      c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), k0[r]);
      c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), k1[r]);
      c1 = lo1;
      c3 = lo0;
    }
    // u_j's 128-bit lane L is block 4L + j, words c0..c3; out_k holds blocks
    // 4k..4k+3.
    const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
    const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
    const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
    const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
    const __m512i x0 = _mm512_shuffle_i64x2(u0, u1, _MM_SHUFFLE(2, 0, 2, 0));  // 0 8 1 9
    const __m512i y0 = _mm512_shuffle_i64x2(u2, u3, _MM_SHUFFLE(2, 0, 2, 0));  // 2 10 3 11
    const __m512i x1 = _mm512_shuffle_i64x2(u0, u1, _MM_SHUFFLE(3, 1, 3, 1));  // 4 12 5 13
    const __m512i y1 = _mm512_shuffle_i64x2(u2, u3, _MM_SHUFFLE(3, 1, 3, 1));  // 6 14 7 15
    const __m512i out[4] = {_mm512_shuffle_i64x2(x0, y0, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i64x2(x1, y1, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i64x2(x0, y0, _MM_SHUFFLE(3, 1, 3, 1)),
                            _mm512_shuffle_i64x2(x1, y1, _MM_SHUFFLE(3, 1, 3, 1))};
    if (i + kWide <= n) {
      std::memcpy(dst + i, out, kWide);
    } else {  // the last 128 (n % 128 == 0): blocks 0..7 of this round
      std::memcpy(dst + i, out, n - i);
    }
  }
}

// The [lane reduction] accumulators: sums and sums of squares in 16 fp64
// lanes (elements 16k..16k+7 in s[0], 16k+8.. in s[1]; AVX2's four 4-wide
// accumulators in the same lanes), max |x| in 16 fp32 lanes.
struct MomentAcc16 {
  __m512d s[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
  __m512d q[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
  __m512 m = _mm512_setzero_ps();

  void Add(__m512 x) {
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
    s[0] = _mm512_add_pd(s[0], lo);
    s[1] = _mm512_add_pd(s[1], hi);
    q[0] = _mm512_add_pd(q[0], _mm512_mul_pd(lo, lo));
    q[1] = _mm512_add_pd(q[1], _mm512_mul_pd(hi, hi));
    m = _mm512_max_ps(m, _mm512_abs_ps(x));
  }
  // Folds in elements [begin, end) one at a time (the scalar tail, as the
  // portable loop adds them) and reduces. No NaN flag: the callers check
  // that the sum of squares is finite, which a NaN or Inf breaks.
  void Finish(const float* x, uint32_t begin, uint32_t end, float* max_abs, double* sum,
              double* sum_sq) const {
    double sl[kSumLanes], ql[kSumLanes];
    _mm512_storeu_pd(sl, s[0]);
    _mm512_storeu_pd(sl + 8, s[1]);
    _mm512_storeu_pd(ql, q[0]);
    _mm512_storeu_pd(ql + 8, q[1]);
    float mx = _mm512_reduce_max_ps(m);
    for (uint32_t i = begin; i < end; ++i) {
      const double d = x[i];
      sl[i % kSumLanes] += d;
      ql[i % kSumLanes] += d * d;
      mx = std::fabs(x[i]) > mx ? std::fabs(x[i]) : mx;
    }
    double ts = 0, tq = 0;
    for (int l = 0; l < kSumLanes; ++l) {
      ts += sl[l];
      tq += ql[l];
    }
    *max_abs = mx;
    *sum = ts;
    *sum_sq = tq;
  }
};

// NOTE: [wide ternary] The ternary chunk of [ternary passes] sixteen
// elements a step: draws first (DrawsWide), then the statistics pass (x =
// grad + residual stored into the residual), then the encode pass from the
// end back. A code's two bits come from the take and sign masks by PDEP
// instead of the AVX2 table's pack and movemask.
template <bool kResidual>
bool EncodeTernaryChunkT(const float* grad, float* residual, uint32_t n, float clip_factor,
                         PhiloxKey key, uint32_t worker, uint32_t clock, uint8_t* out,
                         float* scale) {
  constexpr uint32_t kStep = 8 * kDrawsPerBlock;
  const uint32_t n_vec = n / kStep * kStep;
  if (n_vec > kMaxScratchElems) {  // the AVX2 kernel draws in its encode pass
    return Avx2Kernels()->encode_ternary_chunk(grad, residual, n, clip_factor, key, worker,
                                               clock, out, scale);
  }
  uint8_t* draws = DrawScratch(n_vec);
  DrawsWide(n_vec, worker, clock, key, draws);
  MomentAcc16 acc;
  const uint32_t n16 = n & ~15u;
  for (uint32_t i = 0; i < n16; i += 16) {
    __m512 x = _mm512_loadu_ps(grad + i);
    if (kResidual) {
      x = _mm512_add_ps(x, _mm512_loadu_ps(residual + i));
      _mm512_storeu_ps(residual + i, x);
    }
    acc.Add(x);
  }
  // From here x is grad (no residual) or residual.
  const float* xs = kResidual ? residual : grad;
  if (kResidual) {
    for (uint32_t i = n16; i < n; ++i) residual[i] += grad[i];
  }
  float max_abs;
  double sum, sum_sq;
  acc.Finish(xs, n16, n, &max_abs, &sum, &sum_sq);
  if (!std::isfinite(max_abs) || !std::isfinite(sum_sq)) return false;
  const TernaryParams p = TernaryParamsFromMoments(max_abs, sum, sum_sq, n, clip_factor);
  *scale = p.scale;
  const float inv_s256 = InverseScale(p.scale) * 256.0f;
  // A zero scale sends zero codes, and the residual holds x already; a scale
  // whose inverse times 256 overflows goes to the portable rule (see
  // InverseScale256 in kernels_avx2.cc).
  if (!(p.scale > 0.0f) || !(inv_s256 <= FLT_MAX)) {
    std::memset(out, 0, (static_cast<size_t>(n) + 3) / 4);
    if (p.scale > 0.0f) EncodeTernaryRange(xs, nullptr, residual, 0, n, p, key, worker, clock, out);
    return true;
  }
  std::memset(out + n_vec / 4, 0, (static_cast<size_t>(n) + 3) / 4 - n_vec / 4);
  const __m512 clip = _mm512_set1_ps(p.clip), s = _mm512_set1_ps(p.scale);
  const __m512 scale256 = _mm512_set1_ps(inv_s256), half_bin = _mm512_set1_ps(0.5f);
  const __m512i sign = _mm512_set1_epi32(INT32_MIN);
  for (uint32_t k = 0; k < n_vec; k += 16) {
    const uint32_t e = n_vec - 16 - k;
    // 256 * Uniform8(b) = b + 0.5, against min(|x|, clip) / s * 256.
    const __m512i b =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(draws + e)));
    const __m512 uni256 = _mm512_add_ps(_mm512_cvtepi32_ps(b), half_bin);
    const __m512 x = _mm512_loadu_ps(xs + e);
    const __m512 prob256 = _mm512_mul_ps(_mm512_min_ps(_mm512_abs_ps(x), clip), scale256);
    const __mmask16 take = _mm512_cmp_ps_mask(uni256, prob256, _CMP_LT_OQ);
    if (kResidual) {
      // x - copysign(s, x) where taken, x - 0 elsewhere (a taken x is never 0).
      const __m512 sent = _mm512_maskz_mov_ps(
          take, _mm512_or_ps(_mm512_and_ps(x, _mm512_castsi512_ps(sign)), s));
      _mm512_storeu_ps(residual + e, _mm512_sub_ps(x, sent));
    }
    const __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(x));
    const uint32_t pos_bits = _cvtmask16_u32(_kandn_mask16(neg, take));
    const uint32_t neg_bits = _cvtmask16_u32(_kand_mask16(neg, take));
    const uint32_t word = _pdep_u32(pos_bits, 0x55555555u) | _pdep_u32(neg_bits, 0xAAAAAAAAu);
    std::memcpy(out + e / 4, &word, 4);
  }
  EncodeTernaryRange(xs, nullptr, residual, n_vec, n, p, key, worker, clock, out);
  return true;
}

// The signs (0, +1, -1; see [2-bit signs]) of the sixteen codes in `word`:
// code 01 is +1, 10 is -1, 00 and 11 are 0.
inline __m512 Signs16(uint32_t word) {
  const uint32_t lo = _pext_u32(word, 0x55555555u), hi = _pext_u32(word, 0xAAAAAAAAu);
  const __mmask16 pos = _cvtu32_mask16(lo & ~hi), neg = _cvtu32_mask16(hi & ~lo);
  const __m512 plus = _mm512_maskz_mov_ps(pos, _mm512_set1_ps(1.0f));
  return _mm512_mask_mov_ps(plus, neg, _mm512_set1_ps(-1.0f));
}

// out[i] = sign_i * s, or with kAdd out[i] += sign_i * s: the table's
// decode_2bit and decode_add_2bit.
template <bool kAdd>
void Decode2BitT(const uint8_t* payload, uint32_t n, float s, float* out) {
  const __m512 vs = _mm512_set1_ps(s);
  const uint32_t n16 = n & ~15u;
  for (uint32_t i = 0; i < n16; i += 16) {
    uint32_t word;
    std::memcpy(&word, payload + i / 4, 4);
    __m512 v = _mm512_mul_ps(Signs16(word), vs);
    if (kAdd) v = _mm512_add_ps(_mm512_loadu_ps(out + i), v);
    _mm512_storeu_ps(out + i, v);
  }
  if (n16 < n) {
    const CodecKernels& ref = PortableKernels();
    (kAdd ? ref.decode_add_2bit : ref.decode_2bit)(payload + n16 / 4, n - n16, s, out + n16);
  }
}

}  // namespace

const CodecKernels* Avx512Kernels() {
  static const CodecKernels* const table = []() -> const CodecKernels* {
    const CodecKernels* avx2 = Avx2Kernels();
    if (avx2 == nullptr) return nullptr;
    static CodecKernels k = *avx2;
    k.encode_ternary_chunk =
        TernaryChunkByResidual<EncodeTernaryChunkT<true>, EncodeTernaryChunkT<false>>;
    k.decode_add_2bit = Decode2BitT<true>;
    k.decode_2bit = Decode2BitT<false>;
    return &k;
  }();
  return table;
}

}  // namespace internal
}  // namespace gradstream
