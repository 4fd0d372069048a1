// Device-side codecs: encode-with-residual and decode-accumulate on CUDA
// buffers, so a GPU worker copies only packed codes over PCIe.
//
// No CUDA types here (ATen's host/kernel split): streams are passed as
// `void*` (a cudaStream_t). In a build without CUDA every call returns
// FailedPrecondition and DeviceAvailable() is false.
//
// Bit-exactness with the CPU codecs: the per-element rules and the Philox
// draws are the same (see [reproducible rounding]), so for the same header
// scales the payload bytes are identical. The scales come from a parallel
// fp64 reduction whose order differs from the CPU's [lane reduction]; they
// agree to within a few fp32 ulps, and tests compare bytes by re-encoding on
// the CPU with the GPU's scales (internal/kernels.h takes scales explicitly).
#ifndef GRADSTREAM_COMMON_CODEC_CUDA_CODEC_H_
#define GRADSTREAM_COMMON_CODEC_CUDA_CODEC_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "common/codec/codec.h"

namespace gradstream {
namespace cuda {

// True when this build has CUDA and at least one device is usable.
bool DeviceAvailable();

// Encodes `n` device floats at `d_grad`. `d_residual` (device, n floats) may
// be null for no error feedback; otherwise it is updated as in
// Codec::EncodeWithResidual. `d_payload` is a device buffer of at least
// PayloadBytes(type, n). Fills `header` on the host. Codecs whose scale is a
// statistic of the chunk (ternary, onebit, twobit with an adaptive
// threshold) synchronize `stream` once to read it back and answer NaN/Inf
// input with InvalidArgument, as the CPU encoders do. "none" and twobit with
// a fixed threshold read nothing back, so the call returns as soon as the
// kernel is queued (the GPU worker's asynchronous path) and, unlike the CPU
// encoders, does not notice NaN/Inf: such elements get code 0 and keep the
// NaN/Inf in the residual. Kernel launch and runtime errors are Internal.
[[nodiscard]] absl::Status EncodeOnDevice(CodecType type, const CodecOptions& options,
                                          const float* d_grad, float* d_residual, uint32_t n,
                                          const EncodeKey& key, uint8_t* d_payload,
                                          ChunkHeader* header, void* stream);

// d_out[0] += |d_a|^2 and d_out[1] += |d_b|^2 over n device floats (fp64
// sums, device memory; the caller zeroes them). Queued on `stream`; reads
// nothing back. For error measurements ([device encode]).
[[nodiscard]] absl::Status SumSquaresOnDevice(const float* d_a, const float* d_b, uint32_t n,
                                              double* d_out, void* stream);

// d_acc[i] += weight * decoded[i] for a chunk whose payload is on the device.
// Validates first (same rules as the CPU DecodeAdd; one synchronization) and
// leaves d_acc untouched on InvalidArgument.
[[nodiscard]] absl::Status DecodeAddOnDevice(const ChunkHeader& header, const uint8_t* d_payload,
                                             size_t payload_bytes, float* d_acc, float weight,
                                             void* stream);

}  // namespace cuda
}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_CUDA_CODEC_H_
