// SumPath against fp64 sums, element by element ([error sums]).
#include "common/job/path_sums.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gradstream {
namespace {

PathSums Reference(const std::vector<float>& a, const std::vector<float>* b,
                   const std::vector<float>& c, const std::vector<float>* d) {
  PathSums r;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = double{a[i]} - (b != nullptr ? (*b)[i] : 0.0f);
    const double s = double{c[i]} - (d != nullptr ? (*d)[i] : 0.0f);
    r.error2 += e * e;
    r.signal2 += s * s;
    r.value2 += double{a[i]} * a[i];
    r.dot += e * s;
  }
  return r;
}

void ExpectClose(const PathSums& got, const PathSums& want) {
  EXPECT_NEAR(got.error2, want.error2, 1e-5 * want.error2);
  EXPECT_NEAR(got.signal2, want.signal2, 1e-5 * want.signal2);
  EXPECT_NEAR(got.value2, want.value2, 1e-5 * want.value2);
  EXPECT_NEAR(got.dot, want.dot, 1e-5 * std::sqrt(want.error2 * want.signal2));
}

// Sizes around the vector width and the block, magnitudes whose squares fit
// fp32 and ones whose squares do not (the block's fp64 fallback), with and
// without the subtrahends, and `keep` = a after the sums, also when it is d.
TEST(SumPath, MatchesFp64SumsAndKeepsA) {
  std::mt19937 rng(7);
  for (const size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{1023}, size_t{1024},
                         size_t{3 * 1024 + 13}}) {
    for (const float magnitude : {1.0f, 1e20f}) {
      SCOPED_TRACE(testing::Message() << n << " elements, magnitude " << magnitude);
      std::normal_distribution<float> dist(0.0f, magnitude);
      std::vector<float> a(n), b(n), c(n), d(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = dist(rng);
        b[i] = a[i] + 0.01f * dist(rng);
        c[i] = dist(rng);
        d[i] = dist(rng);
      }
      ExpectClose(SumPath(a.data(), nullptr, c.data(), nullptr, nullptr, n),
                  Reference(a, nullptr, c, nullptr));
      ExpectClose(SumPath(a.data(), b.data(), c.data(), nullptr, nullptr, n),
                  Reference(a, &b, c, nullptr));
      ExpectClose(SumPath(a.data(), nullptr, c.data(), d.data(), nullptr, n),
                  Reference(a, nullptr, c, &d));
      const PathSums want = Reference(a, &b, c, &d);
      std::vector<float> kept = d;
      ExpectClose(SumPath(a.data(), b.data(), c.data(), kept.data(), kept.data(), n), want);
      EXPECT_EQ(kept, a);
      // The same sums again give the same bits.
      std::vector<float> again = d;
      const PathSums first = SumPath(a.data(), b.data(), c.data(), d.data(), nullptr, n);
      const PathSums second = SumPath(a.data(), b.data(), c.data(), again.data(), nullptr, n);
      EXPECT_EQ(first.error2, second.error2);
      EXPECT_EQ(first.dot, second.dot);
    }
  }
}

}  // namespace
}  // namespace gradstream
