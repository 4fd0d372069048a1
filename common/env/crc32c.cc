// See crc32c.h.
#include "common/env/crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gradstream {
namespace {

struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
};

const Tables& T() {
  static const Tables* tables = new Tables();
  return *tables;
}

#if defined(__x86_64__)
// NOTE: [crc streams] One crc32 chain runs at a third of the instruction's
// throughput (each depends on the last), so the bulk runs three independent
// chains over adjacent blocks of kLong (then kShort) bytes and joins them:
// the register after A||B is Shift(register after A, |B|) xor (register
// after B from 0), Shift being a 32x32 GF(2) matrix applied with four
// 256-entry tables per block length (Mark Adler's construction in crc32c.c,
// zlib license). Bit for bit one chain's result (crc32c_test). Why:
// docs/design/fused-publish.md.
constexpr size_t kLong = 8192;
constexpr size_t kShort = 256;

// mat * vec over GF(2): mat[i] is the image of bit i.
uint32_t Gf2Times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, ++mat) {
    if (vec & 1) sum ^= *mat;
  }
  return sum;
}

void Gf2Square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = Gf2Times(mat, mat[n]);
}

// Tables that append `len` zero bytes (a power of two >= 2) to a register.
struct ZerosOp {
  uint32_t t[4][256];
  explicit ZerosOp(size_t len) {
    uint32_t odd[32], even[32];
    odd[0] = 0x82F63B78u;  // one zero bit
    for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
    Gf2Square(even, odd);  // two zero bits
    Gf2Square(odd, even);  // four
    // Each square doubles: even holds 1 byte after the first, odd 2, ...
    const uint32_t* op = nullptr;
    for (;;) {
      Gf2Square(even, odd);
      len >>= 1;
      if (len == 0) {
        op = even;
        break;
      }
      Gf2Square(odd, even);
      len >>= 1;
      if (len == 0) {
        op = odd;
        break;
      }
    }
    for (uint32_t n = 0; n < 256; ++n) {
      for (int k = 0; k < 4; ++k) t[k][n] = Gf2Times(op, n << (8 * k));
    }
  }
  uint32_t Shift(uint32_t crc) const {
    return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^ t[2][(crc >> 16) & 0xFF] ^
           t[3][crc >> 24];
  }
};

const ZerosOp& LongOp() {
  static const ZerosOp* op = new ZerosOp(kLong);
  return *op;
}
const ZerosOp& ShortOp() {
  static const ZerosOp* op = new ZerosOp(kShort);
  return *op;
}

// Three chains over [p, p + block), [p + block, ...), [p + 2 block, ...),
// joined into c; returns the register after 3 * block bytes.
__attribute__((target("sse4.2"))) inline uint64_t ThreeStreams(const uint8_t* p, size_t block,
                                                               uint64_t c, const ZerosOp& op) {
  uint64_t c1 = 0, c2 = 0;
  for (const uint8_t* end = p + block; p < end; p += 8) {
    uint64_t w0, w1, w2;
    std::memcpy(&w0, p, 8);
    std::memcpy(&w1, p + block, 8);
    std::memcpy(&w2, p + 2 * block, 8);
    c = __builtin_ia32_crc32di(c, w0);
    c1 = __builtin_ia32_crc32di(c1, w1);
    c2 = __builtin_ia32_crc32di(c2, w2);
  }
  c = op.Shift(static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1);
  return op.Shift(static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c2);
}

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(const uint8_t* p, size_t n,
                                                         uint32_t c) {
  uint64_t c64 = c;
  if (n >= 3 * kShort) {
    const ZerosOp& long_op = LongOp();
    const ZerosOp& short_op = ShortOp();
    for (; n >= 3 * kLong; p += 3 * kLong, n -= 3 * kLong) {
      c64 = ThreeStreams(p, kLong, c64, long_op);
    }
    for (; n >= 3 * kShort; p += 3 * kShort, n -= 3 * kShort) {
      c64 = ThreeStreams(p, kShort, c64, short_op);
    }
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n--) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}

bool HaveHardwareCrc() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}

// NOTE: [crc fold] Where the CPU has VPCLMULQDQ and AVX-512F, inputs of
// kFoldMin bytes or more are folded instead: the register depends on the
// message only modulo P, so a 16-byte lane X = hi:lo (reflected 64-bit
// halves) may be replaced by X * x^(8D) mod P XORed into the lane D bytes
// on, that is clmul(lo, x^(8D+31) mod P) xor clmul(hi, x^(8D-33) mod P),
// the constants bit-reflected (as in Intel's "Fast CRC Computation for
// Generic Polynomials Using PCLMULQDQ"). Four 64-byte accumulators take 256
// bytes a round; the register enters as an XOR into the first four bytes,
// and the one lane left runs through crc32 from zero. Bit for bit the
// chains' result (crc32c_test), at twice their speed (env_benchmark). Why:
// docs/design/fused-publish.md.
constexpr size_t kFoldMin = 256;

struct FoldK {
  uint64_t lo, hi;  // multiply a lane's low and high half
};
constexpr FoldK kFold16{0xf20c0dfe, 0x493c7d27};
constexpr FoldK kFold32{0x3da6d0cb, 0xba4fc28e};
constexpr FoldK kFold48{0x1c291d04, 0xddc0152b};
constexpr FoldK kFold64{0x740eef02, 0x9e4addf8};
constexpr FoldK kFold256{0xdcb17aa4, 0xb9e02b86};

#define GS_FOLD_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))

GS_FOLD_TARGET inline __m512i Broadcast(FoldK k) {
  const auto lo = static_cast<long long>(k.lo), hi = static_cast<long long>(k.hi);
  return _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo);
}

// The 16-byte lane i of x (maskz: GCC 12 warns of the plain form's
// undefined upper half).
#define Lane(x, i) _mm512_maskz_extracti32x4_epi32(0xF, x, i)

// Each of x's four lanes moved D bytes on (k for D) and XORed into next.
GS_FOLD_TARGET inline __m512i Fold(__m512i x, __m512i k, __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                   _mm512_clmulepi64_epi128(x, k, 0x11), next, 0x96);
}

GS_FOLD_TARGET inline __m128i Fold(__m128i x, FoldK k, __m128i next) {
  const __m128i kk = _mm_set_epi64x(static_cast<long long>(k.hi), static_cast<long long>(k.lo));
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, kk, 0x00),
                                     _mm_clmulepi64_si128(x, kk, 0x11)),
                       next);
}

// Requires n >= kFoldMin; c is the register (inverted), as Crc32cHardware's.
GS_FOLD_TARGET uint32_t Crc32cFold(const uint8_t* p, size_t n, uint32_t c) {
  __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64);
  __m512i x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
  x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  p += 256;
  n -= 256;
  const __m512i k256 = Broadcast(kFold256);
  for (; n >= 256; p += 256, n -= 256) {
    x0 = Fold(x0, k256, _mm512_loadu_si512(p));
    x1 = Fold(x1, k256, _mm512_loadu_si512(p + 64));
    x2 = Fold(x2, k256, _mm512_loadu_si512(p + 128));
    x3 = Fold(x3, k256, _mm512_loadu_si512(p + 192));
  }
  const __m512i k64 = Broadcast(kFold64);
  x1 = Fold(x0, k64, x1);
  x2 = Fold(x1, k64, x2);
  x3 = Fold(x2, k64, x3);
  for (; n >= 64; p += 64, n -= 64) x3 = Fold(x3, k64, _mm512_loadu_si512(p));
  __m128i v = Lane(x3, 3);
  v = Fold(Lane(x3, 0), kFold48, v);
  v = Fold(Lane(x3, 1), kFold32, v);
  v = Fold(Lane(x3, 2), kFold16, v);
  for (; n >= 16; p += 16, n -= 16) {
    v = Fold(v, kFold16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  uint64_t c64 = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(v)));
  c64 = _mm_crc32_u64(c64, static_cast<uint64_t>(_mm_extract_epi64(v, 1)));
  c = static_cast<uint32_t>(c64);
  if (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = static_cast<uint32_t>(_mm_crc32_u64(c, w));
    p += 8;
    n -= 8;
  }
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}
#undef Lane
#undef GS_FOLD_TARGET

bool HaveFold() {
  static const bool have = __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("vpclmulqdq") &&
                           __builtin_cpu_supports("pclmul") && HaveHardwareCrc();
  return have;
}
#endif

}  // namespace

uint32_t Crc32c(std::string_view data, uint32_t crc) {
#if defined(__x86_64__)
  if (data.size() >= kFoldMin && HaveFold()) {
    return ~Crc32cFold(reinterpret_cast<const uint8_t*>(data.data()), data.size(), ~crc);
  }
#endif
  return crc32c_internal::WithoutFold(data, crc);
}

namespace crc32c_internal {

bool Folds() {
#if defined(__x86_64__)
  return HaveFold();
#else
  return false;
#endif
}

uint32_t WithoutFold(std::string_view data, uint32_t crc) {
#if defined(__x86_64__)
  if (HaveHardwareCrc()) {
    return ~Crc32cHardware(reinterpret_cast<const uint8_t*>(data.data()), data.size(), ~crc);
  }
#endif
  const Tables& tb = T();
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  size_t n = data.size();
  uint32_t c = ~crc;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian hosts only (x86-64, aarch64)
    w ^= c;
    c = tb.t[7][w & 0xFF] ^ tb.t[6][(w >> 8) & 0xFF] ^ tb.t[5][(w >> 16) & 0xFF] ^
        tb.t[4][(w >> 24) & 0xFF] ^ tb.t[3][(w >> 32) & 0xFF] ^ tb.t[2][(w >> 40) & 0xFF] ^
        tb.t[1][(w >> 48) & 0xFF] ^ tb.t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ tb.t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

}  // namespace crc32c_internal
}  // namespace gradstream
