// Host side of the device codecs. With CUDA the work is in codec_kernel.cu;
// without it, every entry point explains that this build has no CUDA.
#include "common/codec/cuda_codec.h"

#ifndef GS_HAVE_CUDA

namespace gradstream {
namespace cuda {

bool DeviceAvailable() { return false; }

absl::Status EncodeOnDevice(CodecType, const CodecOptions&, const float*, float*, uint32_t,
                            const EncodeKey&, uint8_t*, ChunkHeader*, void*) {
  return absl::FailedPreconditionError("gradstream was built without CUDA (GS_CUDA=OFF)");
}

absl::Status EncodeOnDeviceAsync(CodecType, const CodecOptions&, const float*, float*, uint32_t,
                                 const EncodeKey&, uint8_t*, DeviceEncodeResult*, void*, void*) {
  return absl::FailedPreconditionError("gradstream was built without CUDA (GS_CUDA=OFF)");
}

absl::Status SumPathOnDevice(const float*, const float*, uint32_t, double*, void*) {
  return absl::FailedPreconditionError("gradstream was built without CUDA (GS_CUDA=OFF)");
}

absl::Status DecodeAddOnDevice(const ChunkHeader&, const uint8_t*, size_t, float*, float, void*) {
  return absl::FailedPreconditionError("gradstream was built without CUDA (GS_CUDA=OFF)");
}

}  // namespace cuda
}  // namespace gradstream

#endif  // GS_HAVE_CUDA
