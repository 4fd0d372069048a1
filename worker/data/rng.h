// Portable deterministic random numbers for data generation and model init.
//
// SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number
// generators", OOPSLA 2014; the constants are Vigna's public-domain
// splitmix64.c) plus Box–Muller. Everything is integer arithmetic except
// UniformDouble's scaling (exact) and Normal's log/sqrt/cos in double, so the
// same seed yields the same bits on every platform with a correctly rounded
// libm (glibc, musl, macOS); results are rounded to float only by callers.
// std::normal_distribution is not used because its algorithm is
// implementation-defined.
//
// Not thread-safe: one generator per thread/stream.
#ifndef GRADSTREAM_WORKER_DATA_RNG_H_
#define GRADSTREAM_WORKER_DATA_RNG_H_

#include <cmath>
#include <cstdint>

namespace gradstream {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  // Next 64 random bits: state += golden gamma, then the murmur3-style mix.
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  // Uniform in the open interval (0, 1): ((Next() >> 12) + 0.5) * 2^-52.
  // Exact in double (53 significant bits), never 0 or 1, so log() in
  // Normal() is always finite.
  double UniformDouble() { return (static_cast<double>(Next() >> 12) + 0.5) * 0x1.0p-52; }

  // Uniform integer in [0, n) as floor(UniformDouble() * n); n > 0. The bias
  // is below 2^-52 * n, far under anything a test could see, and the formula
  // is trivial to reproduce elsewhere.
  uint64_t UniformInt(uint64_t n) {
    const uint64_t v = static_cast<uint64_t>(UniformDouble() * static_cast<double>(n));
    return v < n ? v : n - 1;
  }

  // Standard normal via Box–Muller, one value per call: u1 = UniformDouble(),
  // u2 = UniformDouble(), return sqrt(-2 ln u1) * cos(2 pi u2). The sine half
  // is discarded on purpose so that every draw consumes exactly two words and
  // a stream position is a simple function of the number of draws.
  double Normal() {
    const double u1 = UniformDouble();
    const double u2 = UniformDouble();
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
  }

 private:
  uint64_t state_;
};

// Mixes several 64-bit keys into one seed (e.g. (seed, rank, epoch)), so that
// nearby keys give unrelated streams. Order matters.
inline uint64_t MixSeed(uint64_t a, uint64_t b) {
  SplitMix64 g(a ^ (b * 0xD1B54A32D192ED03ULL));
  return g.Next();
}
inline uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c) { return MixSeed(MixSeed(a, b), c); }

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_DATA_RNG_H_
