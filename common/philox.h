// Philox4x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11) and splitmix64, written once for host and device.
//
// NOTE: [reproducible rounding] Stochastic codecs (ternary) draw one 8-bit
// uniform per element from Philox4x32-7 keyed by (job seed, tensor, chunk)
// with counter (element / 16, worker, clock, 0): element i uses byte i % 4
// (lowest first) of word (i % 16) / 4 of block i / 16, and the uniform is
// the bin's midpoint (2b + 1) / 512. The draw depends only on the key and
// the element index, so CPU and CUDA encoders give identical codes; a
// ternary element decodes to x + e with |e| <= s/512 (s the chunk's scale),
// checked exhaustively by Philox.EightBitDrawBias. Why 7 rounds and 8 bits:
// docs/design/reproducible-rounding.md.
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

// The R-round Philox4x32 bijection (Random123's philox4x32_R(R, ...)).
template <int R>
GS_HOST_DEVICE PhiloxCounter Philox4x32(PhiloxCounter c, PhiloxKey k) {
  for (int r = 0; r < R; ++r) {
    if (r > 0) {
      k.k0 += kPhiloxW0;
      k.k1 += kPhiloxW1;
    }
    c = PhiloxRound(c, k);
  }
  return c;
}

// The rounds the codecs use (see [reproducible rounding]).
inline constexpr int kPhiloxRounds = 7;
// Elements per Philox block: 128 bits, 8 bits per element.
inline constexpr uint32_t kDrawsPerBlock = 16;

GS_HOST_DEVICE PhiloxCounter CodecPhilox(PhiloxCounter c, PhiloxKey k) {
  return Philox4x32<kPhiloxRounds>(c, k);
}

// The key of one chunk's stream (see [reproducible rounding]).
GS_HOST_DEVICE PhiloxKey ChunkPhiloxKey(uint64_t seed, uint32_t tensor, uint32_t chunk) {
  const uint64_t k =
      SplitMix64(seed ^ SplitMix64((static_cast<uint64_t>(tensor) << 32) | chunk));
  return PhiloxKey{static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
}

// The key of block `block` of a chunk whose key is `chunk` (ternary512 draws
// each block's elements with its own key, counters from 0).
GS_HOST_DEVICE PhiloxKey BlockPhiloxKey(PhiloxKey chunk, uint32_t block) {
  const uint64_t k = SplitMix64(((static_cast<uint64_t>(chunk.k1) << 32) | chunk.k0) ^
                                SplitMix64(block));
  return PhiloxKey{static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
}

// Uniform in (0, 1) from 8 random bits: the midpoint (2b + 1) / 512 of bin
// b, exact in fp32 on every device (see [reproducible rounding]).
GS_HOST_DEVICE float Uniform8(uint32_t bits8) {
  return static_cast<float>(2 * (bits8 & 0xFFu) + 1) * (1.0f / 512.0f);
}

// The 8 random bits of element i of a block (i in 0..15), see above.
GS_HOST_DEVICE uint32_t BlockBits8(const PhiloxCounter& c, uint32_t i) {
  const uint32_t w = (i >> 2) == 0 ? c.c0 : (i >> 2) == 1 ? c.c1 : (i >> 2) == 2 ? c.c2 : c.c3;
  return (w >> (8 * (i & 3))) & 0xFFu;
}

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_PHILOX_H_
