// CUDA, cuBLAS and cuDNN plumbing for the GPU model: error-to-Status
// conversion, RAII device arrays and cuDNN descriptors.
//
// Internal to worker/model and included only by its CUDA host sources (it
// needs the CUDA headers); public headers stay free of CUDA types.
// Every failure becomes absl::StatusCode::kInternal naming the call, so a
// worker can report it and fall back instead of crashing.
#ifndef GRADSTREAM_WORKER_MODEL_INTERNAL_CUDA_UTIL_H_
#define GRADSTREAM_WORKER_MODEL_INTERNAL_CUDA_UTIL_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "common/status.h"

namespace gradstream::internal {

absl::Status CudaStatus(cudaError_t e, const char* what);
absl::Status CublasStatus(cublasStatus_t s, const char* what);
absl::Status CudnnStatus(cudnnStatus_t s, const char* what);

#define GS_CUDA_RETURN_IF_ERROR(expr) \
  GS_RETURN_IF_ERROR(::gradstream::internal::CudaStatus((expr), #expr))
#define GS_CUBLAS_RETURN_IF_ERROR(expr) \
  GS_RETURN_IF_ERROR(::gradstream::internal::CublasStatus((expr), #expr))
#define GS_CUDNN_RETURN_IF_ERROR(expr) \
  GS_RETURN_IF_ERROR(::gradstream::internal::CudnnStatus((expr), #expr))

// Owns `size()` elements of device memory (or pinned host memory when
// kPinnedHost). Grow() keeps the allocation when it is large enough and
// otherwise reallocates without preserving contents. Move-only.
template <typename T, bool kPinnedHost = false>
class CudaArray {
 public:
  CudaArray() = default;
  CudaArray(const CudaArray&) = delete;
  CudaArray& operator=(const CudaArray&) = delete;
  CudaArray(CudaArray&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), size_(o.size_) {}
  ~CudaArray() { Free(); }

  [[nodiscard]] absl::Status Grow(size_t n) {
    if (n <= size_) return absl::OkStatus();
    Free();
    void* p = nullptr;
    if constexpr (kPinnedHost) {
      GS_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, n * sizeof(T)));
    } else {
      GS_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, n * sizeof(T)));
    }
    ptr_ = static_cast<T*>(p);
    size_ = n;
    return absl::OkStatus();
  }
  T* get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  void Free() {
    if (ptr_ == nullptr) return;
    if constexpr (kPinnedHost) {
      cudaFreeHost(ptr_);
    } else {
      cudaFree(ptr_);
    }
    ptr_ = nullptr;
    size_ = 0;
  }

  T* ptr_ = nullptr;
  size_t size_ = 0;
};

// Owns one cuDNN descriptor of type T, destroyed with Destroy.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() = default;
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  ~CudnnDescriptor() {
    if (d_ != nullptr) Destroy(d_);
  }
  [[nodiscard]] absl::Status Init() {
    GS_CUDNN_RETURN_IF_ERROR(Create(&d_));
    return absl::OkStatus();
  }
  T get() const { return d_; }

 private:
  T d_ = nullptr;
};

using TensorDesc = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                                   cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                                   cudnnDestroyFilterDescriptor>;
using ConvDesc = CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                 cudnnDestroyConvolutionDescriptor>;
using PoolDesc = CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                                 cudnnDestroyPoolingDescriptor>;

}  // namespace gradstream::internal

#endif  // GRADSTREAM_WORKER_MODEL_INTERNAL_CUDA_UTIL_H_
