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

// What an encode leaves in device memory for the host to copy back with the
// codes: the chunk's header, scale included, and whether its input held
// NaN/Inf (then neither the payload nor the residual was written).
struct DeviceEncodeResult {
  ChunkHeader header;
  uint32_t non_finite = 0;
};

// Device scratch for one chunk's statistics (EncodeOnDeviceAsync).
inline constexpr size_t kEncodeStatsBytes = 64;

// Whether encoding `type` reduces statistics of the chunk into its scale
// (ternary, onebit, twobit with an adaptive threshold): such an encode needs
// zeroed `d_stats`, and its header is known only on the device.
inline bool EncodeReducesStats(CodecType type, const CodecOptions& options) {
  return type == CodecType::kTernary || type == CodecType::kOneBit ||
         (type == CodecType::kTwoBit && options.twobit_threshold <= 0.0f);
}

// Encodes `n` device floats at `d_grad` without reading anything back: every
// launch is queued on `stream` and the call returns. `d_residual` (device, n
// floats) may be null for no error feedback; otherwise it is updated as in
// Codec::EncodeWithResidual. `d_payload` is a device buffer of at least
// PayloadBytes(type, n). The header is computed on the device and written to
// `*d_result` (device; may be null). Codecs whose scale is a statistic of the
// chunk (ternary, onebit, twobit with an adaptive threshold) reduce it into
// `d_stats` (device, kEncodeStatsBytes, 8-byte aligned, zeroed by the caller)
// and flag NaN/Inf input in d_result->non_finite. "none" and twobit with a
// fixed threshold do not look for NaN/Inf: such elements get code 0 and keep
// the NaN/Inf in the residual. Kernel launch errors are Internal.
[[nodiscard]] absl::Status EncodeOnDeviceAsync(CodecType type, const CodecOptions& options,
                                               const float* d_grad, float* d_residual, uint32_t n,
                                               const EncodeKey& key, uint8_t* d_payload,
                                               DeviceEncodeResult* d_result, void* d_stats,
                                               void* stream);

// EncodeOnDeviceAsync with the header on the host. Codecs whose scale is a
// statistic synchronize `stream` once to read it back and answer NaN/Inf
// input with InvalidArgument, as the CPU encoders do; "none" and fixed
// twobit read nothing back and return as soon as the kernel is queued.
[[nodiscard]] absl::Status EncodeOnDevice(CodecType type, const CodecOptions& options,
                                          const float* d_grad, float* d_residual, uint32_t n,
                                          const EncodeKey& key, uint8_t* d_payload,
                                          ChunkHeader* header, void* stream);

// The sums of common/job/path_sums.h's SumPath for a push, over n device
// floats: d_out[0] += |d_error|^2, d_out[1] += |d_signal|^2 and d_out[2] +=
// d_error . d_signal (fp64, device memory; the caller zeroes them). Queued on
// `stream`; reads nothing back. For error measurements ([device encode]).
[[nodiscard]] absl::Status SumPathOnDevice(const float* d_error, const float* d_signal, uint32_t n,
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
