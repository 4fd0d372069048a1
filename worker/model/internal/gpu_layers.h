// cuBLAS dense layers and cuDNN convolution / pooling layers of the GPU
// model, with the same semantics as cpu_ops.h.
//
// Internal CUDA host code (it needs cuBLAS/cuDNN types); included only by
// gpu_model.cc and gpu_layers.cc. Layers hold descriptors sized for one
// batch size at a time (SetBatch); they are not thread-safe and enqueue
// all work on the stream already set on the cuBLAS/cuDNN handle.
#ifndef GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_LAYERS_H_
#define GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_LAYERS_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/internal/cuda_util.h"
#include "worker/model/internal/network.h"

namespace gradstream::internal::gpu {

// Row-major y[batch, out] = x[batch, in] * w[out, in]^T + bias (cuBLAS is
// column-major, so this is y^T = w * x^T without any transposed copy).
[[nodiscard]] absl::Status DenseForward(cublasHandle_t blas, cudaStream_t stream, const float* x,
                                        const float* w, const float* bias, int batch, int in,
                                        int out, float* y);
// dw = dy^T x; dbias = column sums of dy; dx = dy w unless dx is null.
[[nodiscard]] absl::Status DenseBackward(cublasHandle_t blas, cudaStream_t stream, const float* x,
                                         const float* w, const float* dy, int batch, int in,
                                         int out, float* dw, float* dbias, float* dx);

// Stride-1 cross-correlation with zero padding (cuDNN), NCHW float.
// Algorithms are deterministic ones (implicit GEMM forward, ALGO_1 for both
// backward passes; if cuDNN refuses one, the first deterministic algorithm
// its heuristics offer) and math is plain FP32 FMA (no TF32), so results
// are reproducible and match the CPU path to float rounding.
class ConvLayer {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ConvLayer>> Create(const LayerSpec& spec);
  // Sets descriptors for `batch` examples and returns the workspace bytes
  // forward and backward need at that size.
  [[nodiscard]] absl::Status SetBatch(cudnnHandle_t dnn, int batch, size_t* workspace_bytes);
  [[nodiscard]] absl::Status Forward(cudnnHandle_t dnn, const float* x, const float* w,
                                     const float* bias, float* y, void* workspace,
                                     size_t workspace_bytes);
  // dw, dbias overwritten; dx skipped when null.
  [[nodiscard]] absl::Status Backward(cudnnHandle_t dnn, const float* x, const float* w,
                                      const float* dy, float* dw, float* dbias, float* dx,
                                      void* workspace, size_t workspace_bytes);

 private:
  explicit ConvLayer(const LayerSpec& spec) : spec_(spec) {}

  // Keeps the preferred algorithms when cuDNN supports them at this batch
  // size, else picks deterministic ones from the heuristics.
  [[nodiscard]] absl::Status ChooseAlgorithms(cudnnHandle_t dnn);

  const LayerSpec spec_;
  int batch_ = 0;
  cudnnConvolutionFwdAlgo_t fwd_algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_ = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  TensorDesc x_desc_, y_desc_, bias_desc_;
  FilterDesc w_desc_;
  ConvDesc conv_desc_;
};

// 2x2 max pool, stride 2 (cuDNN, deterministic max). Output sizes floor, as
// on CPU; Create checks cuDNN agrees with the spec.
class PoolLayer {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PoolLayer>> Create(const LayerSpec& spec);
  [[nodiscard]] absl::Status SetBatch(int batch);
  [[nodiscard]] absl::Status Forward(cudnnHandle_t dnn, const float* x, float* y);
  [[nodiscard]] absl::Status Backward(cudnnHandle_t dnn, const float* x, const float* y,
                                      const float* dy, float* dx);

 private:
  explicit PoolLayer(const LayerSpec& spec) : spec_(spec) {}

  const LayerSpec spec_;
  int batch_ = 0;
  TensorDesc x_desc_, y_desc_;
  PoolDesc pool_desc_;
};

}  // namespace gradstream::internal::gpu

#endif  // GRADSTREAM_WORKER_MODEL_INTERNAL_GPU_LAYERS_H_
