// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11) and splitmix64, written once for host and device.
//
// NOTE: [reproducible rounding]
// Stochastic codecs (ternary) draw one 16-bit uniform per element from Philox
// keyed by (job seed, tensor, chunk) with counter (element / 8, worker,
// clock, 0): element i uses the 16-bit half (i % 2) of word (i % 8) / 2 of
// block i / 8 (low half first). Because the draw depends only on the key and
// the element index, the CPU (portable and AVX2) and CUDA encoders produce
// bit-identical codes for the same input and scale, and a re-encoding after a
// retry sends the same bytes. 16 bits, not 32, per draw halves the cost of
// the generator (it dominates ternary encode); P(u < p) then exceeds p by at
// most 2^-16, a bias of at most s/65536 per element, far below the codec's
// own variance (s^2/4).
#ifndef GRADSTREAM_COMMON_PHILOX_H_
#define GRADSTREAM_COMMON_PHILOX_H_

#include <cstdint>

#if defined(__CUDACC__)
#define GS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GS_HOST_DEVICE inline
#endif

namespace gradstream {

struct PhiloxKey {
  uint32_t k0, k1;
};

struct PhiloxCounter {
  uint32_t c0, c1, c2, c3;
};

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

GS_HOST_DEVICE uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

GS_HOST_DEVICE PhiloxCounter PhiloxRound(PhiloxCounter c, PhiloxKey k) {
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c.c0;
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c.c2;
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return PhiloxCounter{hi1 ^ c.c1 ^ k.k0, lo1, hi0 ^ c.c3 ^ k.k1, lo0};
}

// The full 10-round Philox4x32 bijection (Random123's philox4x32_R(10, ...)).
GS_HOST_DEVICE PhiloxCounter Philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k.k0 += kPhiloxW0;
      k.k1 += kPhiloxW1;
    }
    c = PhiloxRound(c, k);
  }
  return c;
}

// The key of one chunk's stream (see [reproducible rounding]).
GS_HOST_DEVICE PhiloxKey ChunkPhiloxKey(uint64_t seed, uint32_t tensor, uint32_t chunk) {
  const uint64_t k =
      SplitMix64(seed ^ SplitMix64((static_cast<uint64_t>(tensor) << 32) | chunk));
  return PhiloxKey{static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
}

// Uniform in [0, 1) from 16 random bits, exact in fp32 on every device.
GS_HOST_DEVICE float Uniform16(uint32_t bits16) {
  return static_cast<float>(bits16 & 0xFFFFu) * (1.0f / 65536.0f);
}

// The 16 random bits of element i of a block (i in 0..7), see above.
GS_HOST_DEVICE uint32_t BlockBits16(const PhiloxCounter& c, uint32_t i) {
  const uint32_t w = (i >> 1) == 0 ? c.c0 : (i >> 1) == 1 ? c.c1 : (i >> 1) == 2 ? c.c2 : c.c3;
  return (w >> (16 * (i & 1))) & 0xFFFFu;
}

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_PHILOX_H_
