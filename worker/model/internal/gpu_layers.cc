// cuBLAS/cuDNN calls of the GPU layers. Every call's status is checked.
#include "worker/model/internal/gpu_layers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/model/internal/gpu_ops.h"

namespace gradstream::internal::gpu {
namespace {

// The first deterministic, supported entry of cuDNN's heuristic ranking.
template <typename Perf, typename Algo>
absl::Status PickDeterministic(const Perf* perf, int n, const char* pass, Algo* algo) {
  for (int i = 0; i < n; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC) {
      *algo = perf[i].algo;
      return absl::OkStatus();
    }
  }
  return absl::InternalError(absl::StrCat("cuDNN offers no deterministic ", pass, " algorithm"));
}

absl::Status SetNchw(const TensorDesc& d, int n, const InputShape& s) {
  GS_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                      n, s.channels, s.height, s.width));
  return absl::OkStatus();
}

}  // namespace

absl::Status DenseForward(cublasHandle_t blas, cudaStream_t stream, const float* x, const float* w,
                          const float* bias, int batch, int in, int out, float* y) {
  const float one = 1.0f, zero = 0.0f;
  // Column-major view: w is (in x out), x is (in x batch), y is (out x batch).
  GS_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, &one, w, in,
                                        x, in, &zero, y, out));
  return AddBias(y, bias, batch, out, stream);
}

absl::Status DenseBackward(cublasHandle_t blas, cudaStream_t stream, const float* x, const float* w,
                           const float* dy, int batch, int in, int out, float* dw, float* dbias,
                           float* dx) {
  const float one = 1.0f, zero = 0.0f;
  // dw (in x out, column-major) = x (in x batch) * dy^T (batch x out).
  GS_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch, &one, x, in,
                                        dy, out, &zero, dw, in));
  GS_RETURN_IF_ERROR(BiasGrad(dy, batch, out, dbias, stream));
  if (dx != nullptr) {
    // dx (in x batch) = w (in x out) * dy (out x batch).
    GS_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out, &one, w,
                                          in, dy, out, &zero, dx, in));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ConvLayer>> ConvLayer::Create(const LayerSpec& spec) {
  std::unique_ptr<ConvLayer> l(new ConvLayer(spec));
  GS_RETURN_IF_ERROR(l->x_desc_.Init());
  GS_RETURN_IF_ERROR(l->y_desc_.Init());
  GS_RETURN_IF_ERROR(l->bias_desc_.Init());
  GS_RETURN_IF_ERROR(l->w_desc_.Init());
  GS_RETURN_IF_ERROR(l->conv_desc_.Init());
  GS_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(l->w_desc_.get(), CUDNN_DATA_FLOAT,
                                                      CUDNN_TENSOR_NCHW, spec.out.channels,
                                                      spec.in.channels, spec.kernel, spec.kernel));
  GS_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
      l->conv_desc_.get(), spec.padding, spec.padding, /*u=*/1, /*v=*/1, /*dilation_h=*/1,
      /*dilation_w=*/1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // Plain FP32: TF32 tensor cores would change results at the 1e-3 level.
  GS_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(l->conv_desc_.get(), CUDNN_FMA_MATH));
  GS_RETURN_IF_ERROR(SetNchw(l->bias_desc_, 1, InputShape{spec.out.channels, 1, 1}));
  return l;
}

absl::Status ConvLayer::SetBatch(cudnnHandle_t dnn, int batch, size_t* workspace_bytes) {
  if (batch != batch_) {
    GS_RETURN_IF_ERROR(SetNchw(x_desc_, batch, spec_.in));
    int n, c, h, w;
    GS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(conv_desc_.get(), x_desc_.get(),
                                                                   w_desc_.get(), &n, &c, &h, &w));
    if (n != batch || c != spec_.out.channels || h != spec_.out.height || w != spec_.out.width) {
      return absl::InternalError(absl::StrCat("cuDNN conv output ", n, "x", c, "x", h, "x", w,
                                              " differs from the spec's ", batch, "x",
                                              ShapeString(spec_.out)));
    }
    GS_RETURN_IF_ERROR(SetNchw(y_desc_, batch, spec_.out));
    batch_ = batch;
  }
  GS_RETURN_IF_ERROR(ChooseAlgorithms(dnn));
  size_t fwd = 0, bwd_data = 0, bwd_filter = 0;
  GS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardWorkspaceSize(
      dnn, x_desc_.get(), w_desc_.get(), conv_desc_.get(), y_desc_.get(), fwd_algo_, &fwd));
  GS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataWorkspaceSize(
      dnn, w_desc_.get(), y_desc_.get(), conv_desc_.get(), x_desc_.get(), bwd_data_algo_,
      &bwd_data));
  GS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterWorkspaceSize(
      dnn, x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(), bwd_filter_algo_,
      &bwd_filter));
  *workspace_bytes = std::max({fwd, bwd_data, bwd_filter});
  return absl::OkStatus();
}

absl::Status ConvLayer::ChooseAlgorithms(cudnnHandle_t dnn) {
  size_t unused = 0;
  if (cudnnGetConvolutionForwardWorkspaceSize(dnn, x_desc_.get(), w_desc_.get(), conv_desc_.get(),
                                              y_desc_.get(), fwd_algo_,
                                              &unused) != CUDNN_STATUS_SUCCESS) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    GS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(
        dnn, x_desc_.get(), w_desc_.get(), conv_desc_.get(), y_desc_.get(),
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
    GS_RETURN_IF_ERROR(PickDeterministic(perf, n, "forward", &fwd_algo_));
  }
  if (cudnnGetConvolutionBackwardDataWorkspaceSize(dnn, w_desc_.get(), y_desc_.get(),
                                                   conv_desc_.get(), x_desc_.get(), bwd_data_algo_,
                                                   &unused) != CUDNN_STATUS_SUCCESS) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    GS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        dnn, w_desc_.get(), y_desc_.get(), conv_desc_.get(), x_desc_.get(),
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
    GS_RETURN_IF_ERROR(PickDeterministic(perf, n, "backward-data", &bwd_data_algo_));
  }
  if (cudnnGetConvolutionBackwardFilterWorkspaceSize(
          dnn, x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(), bwd_filter_algo_,
          &unused) != CUDNN_STATUS_SUCCESS) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n = 0;
    GS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        dnn, x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(),
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
    GS_RETURN_IF_ERROR(PickDeterministic(perf, n, "backward-filter", &bwd_filter_algo_));
  }
  return absl::OkStatus();
}

absl::Status ConvLayer::Forward(cudnnHandle_t dnn, const float* x, const float* w,
                                const float* bias, float* y, void* workspace,
                                size_t workspace_bytes) {
  const float one = 1.0f, zero = 0.0f;
  GS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(dnn, &one, x_desc_.get(), x, w_desc_.get(), w,
                                                   conv_desc_.get(), fwd_algo_, workspace,
                                                   workspace_bytes, &zero, y_desc_.get(), y));
  GS_CUDNN_RETURN_IF_ERROR(
      cudnnAddTensor(dnn, &one, bias_desc_.get(), bias, &one, y_desc_.get(), y));
  return absl::OkStatus();
}

absl::Status ConvLayer::Backward(cudnnHandle_t dnn, const float* x, const float* w, const float* dy,
                                 float* dw, float* dbias, float* dx, void* workspace,
                                 size_t workspace_bytes) {
  const float one = 1.0f, zero = 0.0f;
  GS_CUDNN_RETURN_IF_ERROR(
      cudnnConvolutionBackwardBias(dnn, &one, y_desc_.get(), dy, &zero, bias_desc_.get(), dbias));
  GS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
      dnn, &one, x_desc_.get(), x, y_desc_.get(), dy, conv_desc_.get(), bwd_filter_algo_, workspace,
      workspace_bytes, &zero, w_desc_.get(), dw));
  if (dx != nullptr) {
    GS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
        dnn, &one, w_desc_.get(), w, y_desc_.get(), dy, conv_desc_.get(), bwd_data_algo_, workspace,
        workspace_bytes, &zero, x_desc_.get(), dx));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PoolLayer>> PoolLayer::Create(const LayerSpec& spec) {
  std::unique_ptr<PoolLayer> l(new PoolLayer(spec));
  GS_RETURN_IF_ERROR(l->x_desc_.Init());
  GS_RETURN_IF_ERROR(l->y_desc_.Init());
  GS_RETURN_IF_ERROR(l->pool_desc_.Init());
  // The deterministic variant routes each gradient to one input (no atomics).
  GS_CUDNN_RETURN_IF_ERROR(cudnnSetPooling2dDescriptor(
      l->pool_desc_.get(), CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN,
      /*windowHeight=*/2, /*windowWidth=*/2, /*verticalPadding=*/0, /*horizontalPadding=*/0,
      /*verticalStride=*/2, /*horizontalStride=*/2));
  return l;
}

absl::Status PoolLayer::SetBatch(int batch) {
  if (batch == batch_) return absl::OkStatus();
  GS_RETURN_IF_ERROR(SetNchw(x_desc_, batch, spec_.in));
  int n, c, h, w;
  GS_CUDNN_RETURN_IF_ERROR(
      cudnnGetPooling2dForwardOutputDim(pool_desc_.get(), x_desc_.get(), &n, &c, &h, &w));
  if (n != batch || c != spec_.out.channels || h != spec_.out.height || w != spec_.out.width) {
    return absl::InternalError(absl::StrCat("cuDNN pool output ", n, "x", c, "x", h, "x", w,
                                            " differs from the spec's ", batch, "x",
                                            ShapeString(spec_.out)));
  }
  GS_RETURN_IF_ERROR(SetNchw(y_desc_, batch, spec_.out));
  batch_ = batch;
  return absl::OkStatus();
}

absl::Status PoolLayer::Forward(cudnnHandle_t dnn, const float* x, float* y) {
  const float one = 1.0f, zero = 0.0f;
  GS_CUDNN_RETURN_IF_ERROR(
      cudnnPoolingForward(dnn, pool_desc_.get(), &one, x_desc_.get(), x, &zero, y_desc_.get(), y));
  return absl::OkStatus();
}

absl::Status PoolLayer::Backward(cudnnHandle_t dnn, const float* x, const float* y, const float* dy,
                                 float* dx) {
  const float one = 1.0f, zero = 0.0f;
  GS_CUDNN_RETURN_IF_ERROR(cudnnPoolingBackward(dnn, pool_desc_.get(), &one, y_desc_.get(), y,
                                                y_desc_.get(), dy, x_desc_.get(), x, &zero,
                                                x_desc_.get(), dx));
  return absl::OkStatus();
}

}  // namespace gradstream::internal::gpu
