// SumPath. See path_sums.h.
#include "common/job/path_sums.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace gradstream {
namespace {

// NOTE: [error sums] The sums run in fp32 lanes over blocks of kBlock
// elements, each block's lanes then added into the fp64 totals in a fixed
// order, in one pass. The fp64 loops it replaced took 27% of a wide-head
// shard's CPU and 4.4% of a worker's (docs/design/precision-control.md,
// "What the measurement costs"). A lane adds kBlock / 8 terms, so the
// relative error is about 1e-5, far below what the controller's thresholds
// resolve. A block whose fp32 sums are not finite (values past about 1e19)
// is summed again in fp64. The order is fixed, so a run's sums, and the
// controller's decisions, repeat; the AVX2 build of the loop does the same
// arithmetic, so it gives the same bits.
constexpr size_t kBlock = 1024;
using F8 = float __attribute__((vector_size(32)));

// Elements [begin, end) in fp64, one by one.
template <bool kB, bool kD>
void SumBlockF64(const float* a, const float* b, const float* c, const float* d, size_t begin,
                 size_t end, PathSums* out) {
  for (size_t i = begin; i < end; ++i) {
    const double x = a[i];
    const double e = kB ? x - b[i] : x;
    const double s = kD ? double{c[i]} - d[i] : double{c[i]};
    out->error2 += e * e;
    out->signal2 += s * s;
    out->value2 += x * x;
    out->dot += e * s;
  }
}

template <bool kB, bool kD>
__attribute__((always_inline)) inline PathSums SumAll(const float* a, const float* b,
                                                      const float* c, const float* d,
                                                      float* keep, size_t n) {
  PathSums out;
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    const size_t vec = m - m % 8;
    F8 e2{}, s2{}, v2{}, t{};
    for (size_t i = base; i < base + vec; i += 8) {
      F8 x, y, z, w{};
      std::memcpy(&x, a + i, sizeof x);
      std::memcpy(&z, c + i, sizeof z);
      F8 e = x, s = z;
      if constexpr (kB) {
        std::memcpy(&y, b + i, sizeof y);
        e = x - y;
      }
      if constexpr (kD) {
        std::memcpy(&w, d + i, sizeof w);
        s = z - w;
      }
      e2 += e * e;
      s2 += s * s;
      v2 += x * x;
      t += e * s;
    }
    PathSums block;
    for (int k = 0; k < 8; ++k) {
      block.error2 += e2[k];
      block.signal2 += s2[k];
      block.value2 += v2[k];
      block.dot += t[k];
    }
    if (!std::isfinite(block.error2 + block.signal2 + block.value2 + block.dot)) {
      block = PathSums();
      SumBlockF64<kB, kD>(a, b, c, d, base, base + vec, &block);
    }
    SumBlockF64<kB, kD>(a, b, c, d, base + vec, base + m, &block);
    if (keep != nullptr) std::memcpy(keep + base, a + base, m * sizeof(float));  // in L1
    out.error2 += block.error2;
    out.signal2 += block.signal2;
    out.value2 += block.value2;
    out.dot += block.dot;
  }
  return out;
}

template <bool kB, bool kD>
__attribute__((target("avx2"))) PathSums SumAvx2(const float* a, const float* b, const float* c,
                                                 const float* d, float* keep, size_t n) {
  return SumAll<kB, kD>(a, b, c, d, keep, n);
}

template <bool kB, bool kD>
PathSums SumPortable(const float* a, const float* b, const float* c, const float* d, float* keep,
                     size_t n) {
  return SumAll<kB, kD>(a, b, c, d, keep, n);
}

template <bool kB, bool kD>
PathSums Sum(const float* a, const float* b, const float* c, const float* d, float* keep,
             size_t n) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2 ? SumAvx2<kB, kD>(a, b, c, d, keep, n) : SumPortable<kB, kD>(a, b, c, d, keep, n);
}

}  // namespace

PathSums SumPath(const float* a, const float* b, const float* c, const float* d, float* keep,
                 size_t n) {
  if (b != nullptr) {
    return d != nullptr ? Sum<true, true>(a, b, c, d, keep, n)
                        : Sum<true, false>(a, b, c, d, keep, n);
  }
  return d != nullptr ? Sum<false, true>(a, b, c, d, keep, n)
                      : Sum<false, false>(a, b, c, d, keep, n);
}

}  // namespace gradstream
