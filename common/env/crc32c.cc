// See crc32c.h.
#include "common/env/crc32c.h"

#include <cstring>

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
    for (; n >= 3 * kLong; p += 3 * kLong, n -= 3 * kLong) c64 = ThreeStreams(p, kLong, c64, long_op);
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
#endif

}  // namespace

uint32_t Crc32c(std::string_view data, uint32_t crc) {
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

}  // namespace gradstream
