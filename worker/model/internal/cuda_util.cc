// Error strings for CUDA, cuBLAS and cuDNN statuses.
#include "worker/model/internal/cuda_util.h"

#include "absl/strings/str_cat.h"

namespace gradstream::internal {

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": CUDA error ", static_cast<int>(e), " (", cudaGetErrorString(e), ")"));
}

absl::Status CublasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS error ", static_cast<int>(s), " (",
                                          cublasGetStatusString(s), ")"));
}

absl::Status CudnnStatus(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": cuDNN error ", static_cast<int>(s), " (", cudnnGetErrorString(s), ")"));
}

}  // namespace gradstream::internal
