// CPU layer kernels against direct (naive) definitions.
#include "worker/model/internal/cpu_ops.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data/rng.h"

namespace gradstream::internal::cpu {
namespace {

std::vector<float> Random(int64_t n, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Normal());
  return v;
}

TEST(CpuOps, ConvMatchesDirectDefinition) {
  const ConvShape s{2, 7, 6, 3, 3, 1};  // non-square input, padding 1
  const int batch = 2;
  const auto x = Random(batch * 2 * 7 * 6, 1);
  const auto w = Random(3 * 2 * 3 * 3, 2);
  const auto b = Random(3, 3);
  std::vector<float> cols(batch * s.col_rows() * s.col_cols());
  std::vector<float> y(batch * 3 * s.col_cols());
  ConvForward(x.data(), w.data(), b.data(), batch, s, true, cols.data(), y.data());
  const int oh = s.out_height(), ow = s.out_width();
  ASSERT_EQ(oh, 7);
  ASSERT_EQ(ow, 6);
  for (int n = 0; n < batch; ++n)
    for (int o = 0; o < 3; ++o)
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox) {
          double acc = b[o];
          for (int c = 0; c < 2; ++c)
            for (int ky = 0; ky < 3; ++ky)
              for (int kx = 0; kx < 3; ++kx) {
                const int iy = oy + ky - 1, ix = ox + kx - 1;
                if (iy < 0 || iy >= 7 || ix < 0 || ix >= 6) continue;
                acc +=
                    double{w[((o * 2 + c) * 3 + ky) * 3 + kx]} * x[((n * 2 + c) * 7 + iy) * 6 + ix];
              }
          EXPECT_NEAR(y[((n * 3 + o) * oh + oy) * ow + ox], acc, 1e-4);
        }
}

// <Im2Col(x), c> == <x, Col2Im(c)>: the backward unfolding is the adjoint.
TEST(CpuOps, Col2ImIsTheAdjointOfIm2Col) {
  const ConvShape s{3, 5, 6, 1, 3, 2};
  const auto x = Random(3 * 5 * 6, 4);
  const auto c = Random(s.col_rows() * s.col_cols(), 5);
  std::vector<float> col(c.size());
  Im2Col(x.data(), s, col.data());
  std::vector<float> back(x.size(), 0.0f);
  Col2ImAdd(c.data(), s, back.data());
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < c.size(); ++i) lhs += double{col[i]} * c[i];
  for (size_t i = 0; i < x.size(); ++i) rhs += double{x[i]} * back[i];
  EXPECT_NEAR(lhs, rhs, 1e-3);
}

TEST(CpuOps, MaxPoolFloorsOddSizesAndRoutesGradient) {
  // One 3x5 plane -> 1x2 outputs; the last row and column are dropped.
  const std::vector<float> x = {1, 5, 2, 0, 9,  //
                                3, 4, 8, 1, 9,  //
                                9, 9, 9, 9, 9};
  std::vector<float> y(2);
  std::vector<int32_t> arg(2);
  MaxPoolForward(x.data(), 1, 1, 3, 5, y.data(), arg.data());
  EXPECT_EQ(y, (std::vector<float>{5, 8}));
  EXPECT_EQ(arg, (std::vector<int32_t>{1, 7}));
  const std::vector<float> dy = {10, 20};
  std::vector<float> dx(15, -1.0f);
  MaxPoolBackward(dy.data(), arg.data(), 1, 1, 3, 5, dx.data());
  std::vector<float> want(15, 0.0f);
  want[1] = 10;
  want[7] = 20;
  EXPECT_EQ(dx, want);
}

TEST(CpuOps, SoftmaxCrossEntropyKnownValues) {
  const std::vector<float> logits = {0, 0, 0, 1000, 0, 0};
  const std::vector<int32_t> y = {1, 1};
  std::vector<float> d(6);
  int correct = -1;
  const double loss = SoftmaxCrossEntropy(logits.data(), y.data(), 2, 3, d.data(), &correct);
  EXPECT_NEAR(loss, (std::log(3.0) + 1000.0) / 2, 1e-9);  // stable for huge logits
  EXPECT_EQ(correct, 0);  // row 0: a tie goes to class 0, not the label
  EXPECT_NEAR(d[1], (1.0 / 3 - 1) / 2, 1e-7);
  EXPECT_NEAR(d[3], 0.5, 1e-7);
  EXPECT_NEAR(d[4], -0.5, 1e-7);
}

TEST(CpuOps, DenseBackwardMatchesDefinition) {
  const int batch = 3, in = 4, out = 2;
  const auto x = Random(batch * in, 6);
  const auto w = Random(out * in, 7);
  const auto dy = Random(batch * out, 8);
  std::vector<float> dw(out * in), db(out), dx(batch * in);
  DenseBackward(x.data(), w.data(), dy.data(), batch, in, out, dw.data(), db.data(), dx.data());
  for (int o = 0; o < out; ++o) {
    double sb = 0;
    for (int n = 0; n < batch; ++n) sb += dy[n * out + o];
    EXPECT_NEAR(db[o], sb, 1e-5);
    for (int i = 0; i < in; ++i) {
      double s = 0;
      for (int n = 0; n < batch; ++n) s += double{dy[n * out + o]} * x[n * in + i];
      EXPECT_NEAR(dw[o * in + i], s, 1e-5);
    }
  }
  for (int n = 0; n < batch; ++n)
    for (int i = 0; i < in; ++i) {
      double s = 0;
      for (int o = 0; o < out; ++o) s += double{dy[n * out + o]} * w[o * in + i];
      EXPECT_NEAR(dx[n * in + i], s, 1e-5);
    }
}

}  // namespace
}  // namespace gradstream::internal::cpu
