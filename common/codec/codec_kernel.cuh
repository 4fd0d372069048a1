// Per-element codec rules shared by the CUDA kernels. They restate the
// portable CPU kernels' arithmetic (internal/kernels_portable.cc) operation
// for operation; the translation unit is compiled with -fmad=false so no
// multiply-add is fused and fp32 results match the CPU's bit for bit.
#ifndef GRADSTREAM_COMMON_CODEC_CODEC_KERNEL_CUH_
#define GRADSTREAM_COMMON_CODEC_CODEC_KERNEL_CUH_

#include <cstdint>

#include "common/philox.h"

namespace gradstream {
namespace cuda {
namespace device {

__device__ __forceinline__ float LoadX(const float* g, const float* r, uint32_t i) {
  return r ? __fadd_rn(g[i], r[i]) : g[i];
}

// 2-bit code of x for threshold t; writes the residual x - decoded.
__device__ __forceinline__ uint32_t TwoBitCode(float x, float t, float* r) {
  if (x >= t) {
    *r = __fsub_rn(x, t);
    return 1;
  }
  if (x <= -t) {
    *r = __fadd_rn(x, t);
    return 2;
  }
  *r = x;
  return 0;
}

// The ternary rule of EncodeTernaryRange (internal/kernels.h), for one
// element and its 8 random bits.
__device__ __forceinline__ uint32_t TernaryCode(float x, float clip, float s, float inv_s,
                                                uint32_t bits8, float* r) {
  const float prob = __fmul_rn(fminf(fabsf(x), clip), inv_s);
  *r = x;
  if (Uniform8(bits8) < prob) {
    if (x > 0.0f) {
      *r = __fsub_rn(x, s);
      return 1;
    }
    *r = __fadd_rn(x, s);
    return 2;
  }
  return 0;
}

}  // namespace device
}  // namespace cuda
}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_CODEC_KERNEL_CUH_
