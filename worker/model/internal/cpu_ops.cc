// Eigen-backed CPU layer kernels. Eigen maps the caller's buffers, so no
// layer allocates in the training loop.
#include "worker/model/internal/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "Eigen/Core"

namespace gradstream::internal::cpu {
namespace {

using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<MatR>;
using CMap = Eigen::Map<const MatR>;
using CRowVec = Eigen::Map<const Eigen::RowVectorXf>;
using RowVec = Eigen::Map<Eigen::RowVectorXf>;
using Vec = Eigen::Map<Eigen::VectorXf>;
using CVec = Eigen::Map<const Eigen::VectorXf>;

}  // namespace

void DenseForward(const float* x, const float* w, const float* bias, int batch, int in, int out,
                  float* y) {
  Map Y(y, batch, out);
  Y.noalias() = CMap(x, batch, in) * CMap(w, out, in).transpose();
  Y.rowwise() += CRowVec(bias, out);
}

void DenseBackward(const float* x, const float* w, const float* dy, int batch, int in, int out,
                   float* dw, float* dbias, float* dx) {
  CMap dY(dy, batch, out);
  Map(dw, out, in).noalias() = dY.transpose() * CMap(x, batch, in);
  RowVec(dbias, out) = dY.colwise().sum();
  if (dx != nullptr) Map(dx, batch, in).noalias() = dY * CMap(w, out, in);
}

// Eigen array expressions rather than plain loops: GCC's -O2 cost model will
// not vectorize a loop whose input and output may alias.
void ReluForward(const float* x, int64_t n, float* y) {
  Eigen::Map<Eigen::ArrayXf>(y, n) = Eigen::Map<const Eigen::ArrayXf>(x, n).max(0.0f);
}

void ReluBackward(const float* y, const float* dy, int64_t n, float* dx) {
  Eigen::Map<Eigen::ArrayXf>(dx, n) = (Eigen::Map<const Eigen::ArrayXf>(y, n) > 0.0f)
                                          .select(Eigen::Map<const Eigen::ArrayXf>(dy, n), 0.0f);
}

namespace {

// Output columns [lo, hi) of a kernel column kx read inside the input row;
// the rest read padding. Hoisting this out of the pixel loop turns the
// inner loops into contiguous copies.
void ValidColumns(const ConvShape& s, int kx, int* lo, int* hi) {
  *lo = std::clamp(s.padding - kx, 0, s.out_width());
  *hi = std::clamp(s.width + s.padding - kx, *lo, s.out_width());
}

}  // namespace

void Im2Col(const float* x, const ConvShape& s, float* col) {
  const int oh = s.out_height(), ow = s.out_width(), k = s.kernel, p = s.padding;
  for (int c = 0; c < s.in_channels; ++c) {
    const float* plane = x + int64_t{c} * s.height * s.width;
    for (int ky = 0; ky < k; ++ky) {
      for (int kx = 0; kx < k; ++kx) {
        float* row = col + ((int64_t{c} * k + ky) * k + kx) * oh * ow;
        int lo, hi;
        ValidColumns(s, kx, &lo, &hi);
        for (int oy = 0; oy < oh; ++oy) {
          const int iy = oy + ky - p;
          float* dst = row + int64_t{oy} * ow;
          if (iy < 0 || iy >= s.height) {
            std::fill(dst, dst + ow, 0.0f);
            continue;
          }
          // Input column of output column ox is ox + kx - p.
          const float* src = plane + int64_t{iy} * s.width;
          std::fill(dst, dst + lo, 0.0f);
          std::copy(src + lo + kx - p, src + hi + kx - p, dst + lo);
          std::fill(dst + hi, dst + ow, 0.0f);
        }
      }
    }
  }
}

void Col2ImAdd(const float* col, const ConvShape& s, float* dx) {
  const int oh = s.out_height(), ow = s.out_width(), k = s.kernel, p = s.padding;
  for (int c = 0; c < s.in_channels; ++c) {
    float* plane = dx + int64_t{c} * s.height * s.width;
    for (int ky = 0; ky < k; ++ky) {
      for (int kx = 0; kx < k; ++kx) {
        const float* row = col + ((int64_t{c} * k + ky) * k + kx) * oh * ow;
        int lo, hi;
        ValidColumns(s, kx, &lo, &hi);
        if (lo >= hi) continue;
        for (int oy = 0; oy < oh; ++oy) {
          const int iy = oy + ky - p;
          if (iy < 0 || iy >= s.height) continue;
          const float* src = row + int64_t{oy} * ow;
          float* dst = plane + int64_t{iy} * s.width;
          Eigen::Map<Eigen::ArrayXf>(dst + lo + kx - p, hi - lo) +=
              Eigen::Map<const Eigen::ArrayXf>(src + lo, hi - lo);
        }
      }
    }
  }
}

void ConvForward(const float* x, const float* w, const float* bias, int batch, const ConvShape& s,
                 bool keep_cols, float* cols, float* y) {
  const int64_t rows = s.col_rows(), cc = s.col_cols();
  const int64_t in_elems = int64_t{s.in_channels} * s.height * s.width;
  const int64_t out_elems = int64_t{s.out_channels} * cc;
  CMap W(w, s.out_channels, rows);
  CVec b(bias, s.out_channels);
  // One GEMM per example keeps the output in NCHW without a transpose; the
  // per-example GEMMs are large enough (k*k*C x H*W) for Eigen's blocking.
  for (int n = 0; n < batch; ++n) {
    float* col = keep_cols ? cols + n * rows * cc : cols;
    Im2Col(x + n * in_elems, s, col);
    Map Y(y + n * out_elems, s.out_channels, cc);
    Y.noalias() = W * CMap(col, rows, cc);
    Y.colwise() += b;
  }
}

void ConvBackward(const float* cols, const float* w, const float* dy, int batch, const ConvShape& s,
                  float* dw, float* dbias, float* dx, float* dcol_scratch) {
  const int64_t rows = s.col_rows(), cc = s.col_cols();
  const int64_t in_elems = int64_t{s.in_channels} * s.height * s.width;
  const int64_t out_elems = int64_t{s.out_channels} * cc;
  Map dW(dw, s.out_channels, rows);
  Vec db(dbias, s.out_channels);
  dW.setZero();
  db.setZero();
  CMap W(w, s.out_channels, rows);
  if (dx != nullptr) std::memset(dx, 0, sizeof(float) * batch * in_elems);
  for (int n = 0; n < batch; ++n) {
    CMap dY(dy + n * out_elems, s.out_channels, cc);
    CMap col(cols + n * rows * cc, rows, cc);
    dW.noalias() += dY * col.transpose();
    db += dY.rowwise().sum();
    if (dx != nullptr) {
      Map dcol(dcol_scratch, rows, cc);
      dcol.noalias() = W.transpose() * dY;
      Col2ImAdd(dcol_scratch, s, dx + n * in_elems);
    }
  }
}

void MaxPoolForward(const float* x, int batch, int channels, int height, int width, float* y,
                    int32_t* argmax) {
  const int oh = height / 2, ow = width / 2;
  for (int n = 0; n < batch; ++n) {
    for (int c = 0; c < channels; ++c) {
      const int64_t plane = int64_t{c} * height * width;
      const float* xp = x + (int64_t{n} * channels) * height * width + plane;
      const int64_t obase = (int64_t{n} * channels + c) * oh * ow;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          int best = (2 * oy) * width + 2 * ox;
          for (int dy = 0; dy < 2; ++dy) {
            for (int dx = 0; dx < 2; ++dx) {
              const int i = (2 * oy + dy) * width + 2 * ox + dx;
              if (xp[i] > xp[best]) best = i;
            }
          }
          y[obase + oy * ow + ox] = xp[best];
          argmax[obase + oy * ow + ox] = static_cast<int32_t>(plane + best);
        }
      }
    }
  }
}

void MaxPoolBackward(const float* dy, const int32_t* argmax, int batch, int channels, int height,
                     int width, float* dx) {
  const int64_t in_elems = int64_t{channels} * height * width;
  const int64_t out_elems = int64_t{channels} * (height / 2) * (width / 2);
  std::memset(dx, 0, sizeof(float) * batch * in_elems);
  for (int n = 0; n < batch; ++n) {
    for (int64_t j = 0; j < out_elems; ++j) {
      dx[n * in_elems + argmax[n * out_elems + j]] += dy[n * out_elems + j];
    }
  }
}

double SoftmaxCrossEntropy(const float* logits, const int32_t* y, int batch, int classes,
                           float* dlogits, int* correct) {
  double total = 0;
  int right = 0;
  for (int n = 0; n < batch; ++n) {
    const float* z = logits + int64_t{n} * classes;
    int arg = 0;
    for (int j = 1; j < classes; ++j) {
      if (z[j] > z[arg]) arg = j;
    }
    right += (arg == y[n]);
    const double m = z[arg];
    double sum = 0;
    for (int j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(z[j]) - m);
    const double log_sum = std::log(sum);
    total += log_sum - (static_cast<double>(z[y[n]]) - m);
    if (dlogits != nullptr) {
      float* d = dlogits + int64_t{n} * classes;
      for (int j = 0; j < classes; ++j) {
        const double p = std::exp(static_cast<double>(z[j]) - m - log_sum);
        d[j] = static_cast<float>((p - (j == y[n] ? 1.0 : 0.0)) / batch);
      }
    }
  }
  if (correct != nullptr) *correct = right;
  return total / batch;
}

}  // namespace gradstream::internal::cpu
