// CPU reference kernels for the model layers (Eigen GEMMs, im2col conv).
// Activations are NCHW float, row-major per example; weights as documented in
// model.h. These are also the reference the GPU path is tested against.
// Stateless functions; thread-compatible.
#ifndef GRADSTREAM_WORKER_MODEL_INTERNAL_CPU_OPS_H_
#define GRADSTREAM_WORKER_MODEL_INTERNAL_CPU_OPS_H_

#include <cstdint>

#include "worker/data/dataset.h"

namespace gradstream::internal::cpu {

// y[b, out] = sum_i x[b, i] * w[out, i] + bias[out].
void DenseForward(const float* x, const float* w, const float* bias, int batch, int in, int out,
                  float* y);
// dw = dy^T x, dbias = column sums of dy; dx = dy w unless dx is null.
void DenseBackward(const float* x, const float* w, const float* dy, int batch, int in, int out,
                   float* dw, float* dbias, float* dx);

void ReluForward(const float* x, int64_t n, float* y);
// dx = dy where y > 0, else 0 (y is the forward output).
void ReluBackward(const float* y, const float* dy, int64_t n, float* dx);

// Geometry of a stride-1, square-kernel convolution.
struct ConvShape {
  int in_channels, height, width;  // input
  int out_channels, kernel, padding;
  int out_height() const { return height + 2 * padding - kernel + 1; }
  int out_width() const { return width + 2 * padding - kernel + 1; }
  int64_t col_rows() const { return int64_t{in_channels} * kernel * kernel; }
  int64_t col_cols() const { return int64_t{out_height()} * out_width(); }
};

// Unfolds one example into col [in_channels*k*k, out_h*out_w]; row
// (c*k + ky)*k + kx, column oy*out_w + ox holds x[c, oy+ky-p, ox+kx-p] (0
// outside), so a conv is W[out_c, in_c*k*k] * col.
void Im2Col(const float* x, const ConvShape& s, float* col);
// Adds col's entries back onto dx (the adjoint of Im2Col); dx is not cleared.
void Col2ImAdd(const float* col, const ConvShape& s, float* dx);

// Forward for `batch` examples. With keep_cols, `cols` receives
// batch * col_rows * col_cols floats for the backward pass; without, it is
// one example's scratch (col_rows * col_cols), reused (inference).
void ConvForward(const float* x, const float* w, const float* bias, int batch, const ConvShape& s,
                 bool keep_cols, float* cols, float* y);
// Uses the cols of ConvForward; dx is skipped when null.
void ConvBackward(const float* cols, const float* w, const float* dy, int batch, const ConvShape& s,
                  float* dw, float* dbias, float* dx, float* dcol_scratch);

// 2x2 max pool, stride 2, floor of odd sizes. argmax[j] is the index (within
// the example) of the input that won output j; ties go to the first in
// row-major window order.
void MaxPoolForward(const float* x, int batch, int channels, int height, int width, float* y,
                    int32_t* argmax);
void MaxPoolBackward(const float* dy, const int32_t* argmax, int batch, int channels, int height,
                     int width, float* dx);

// Mean softmax cross-entropy of `batch` rows of logits; writes
// dlogits = (softmax - onehot(y)) / batch unless dlogits is null, and counts
// rows whose first maximal logit is the label. Computed in double per row.
double SoftmaxCrossEntropy(const float* logits, const int32_t* y, int batch, int classes,
                           float* dlogits, int* correct);

}  // namespace gradstream::internal::cpu

#endif  // GRADSTREAM_WORKER_MODEL_INTERNAL_CPU_OPS_H_
