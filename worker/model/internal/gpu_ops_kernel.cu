// Kernels behind gpu_ops.h. Arithmetic mirrors cpu_ops.cc (softmax in
// double, first-max argmax) so GPU and CPU agree to float rounding.
#include <cuda_runtime.h>

#include "worker/model/internal/gpu_ops.cuh"
#include "worker/model/internal/gpu_ops.h"

namespace gradstream::internal::gpu {
namespace {

__global__ void AddBiasKernel(float* y, const float* bias, int64_t n, int cols) {
  GS_GRID_STRIDE_LOOP(i, n) { y[i] += bias[i % cols]; }
}

__global__ void BiasGradKernel(const float* dy, int rows, int cols, float* dbias) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.0f;
  for (int r = 0; r < rows; ++r) sum += dy[int64_t{r} * cols + c];
  dbias[c] = sum;
}

__global__ void ReluForwardKernel(const float* x, int64_t n, float* y) {
  GS_GRID_STRIDE_LOOP(i, n) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; }
}

__global__ void ReluBackwardKernel(const float* y, const float* dy, int64_t n, float* dx) {
  GS_GRID_STRIDE_LOOP(i, n) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; }
}

// One thread per row: class counts are small (10 here), and a row-serial
// loop keeps the summation order identical to the CPU reference.
__global__ void SoftmaxXentKernel(const float* logits, const int32_t* y, int batch, int classes,
                                  float* dlogits, double* row_loss, int32_t* row_correct) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= batch) return;
  const float* z = logits + int64_t{r} * classes;
  int arg = 0;
  for (int j = 1; j < classes; ++j) {
    if (z[j] > z[arg]) arg = j;
  }
  const int label = y[r];
  row_correct[r] = arg == label ? 1 : 0;
  const double m = z[arg];
  double sum = 0.0;
  for (int j = 0; j < classes; ++j) sum += exp(static_cast<double>(z[j]) - m);
  const double log_sum = log(sum);
  row_loss[r] = log_sum - (static_cast<double>(z[label]) - m);
  if (dlogits != nullptr) {
    float* d = dlogits + int64_t{r} * classes;
    for (int j = 0; j < classes; ++j) {
      const double p = exp(static_cast<double>(z[j]) - m - log_sum);
      d[j] = static_cast<float>((p - (j == label ? 1.0 : 0.0)) / batch);
    }
  }
}

}  // namespace

absl::Status AddBias(float* y, const float* bias, int rows, int cols, Stream stream) {
  const int64_t n = int64_t{rows} * cols;
  AddBiasKernel<<<BlocksFor(n), kThreads, 0, stream>>>(y, bias, n, cols);
  return LaunchStatus("AddBias");
}

absl::Status BiasGrad(const float* dy, int rows, int cols, float* dbias, Stream stream) {
  BiasGradKernel<<<(cols + kThreads - 1) / kThreads, kThreads, 0, stream>>>(dy, rows, cols, dbias);
  return LaunchStatus("BiasGrad");
}

absl::Status ReluForward(const float* x, int64_t n, float* y, Stream stream) {
  ReluForwardKernel<<<BlocksFor(n), kThreads, 0, stream>>>(x, n, y);
  return LaunchStatus("ReluForward");
}

absl::Status ReluBackward(const float* y, const float* dy, int64_t n, float* dx, Stream stream) {
  ReluBackwardKernel<<<BlocksFor(n), kThreads, 0, stream>>>(y, dy, n, dx);
  return LaunchStatus("ReluBackward");
}

absl::Status SoftmaxCrossEntropy(const float* logits, const int32_t* y, int batch, int classes,
                                 float* dlogits, double* row_loss, int32_t* row_correct,
                                 Stream stream) {
  SoftmaxXentKernel<<<(batch + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      logits, y, batch, classes, dlogits, row_loss, row_correct);
  return LaunchStatus("SoftmaxCrossEntropy");
}

}  // namespace gradstream::internal::gpu
