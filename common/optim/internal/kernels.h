// Update kernels behind Optimizer. Two builds of the same source
// (kernels_impl.inc): portable and AVX2; Dispatch() picks one at run time.
#ifndef GRADSTREAM_COMMON_OPTIM_INTERNAL_KERNELS_H_
#define GRADSTREAM_COMMON_OPTIM_INTERNAL_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace gradstream::optim_internal {

// Hyper-parameters with the per-step constants already folded in.
struct StepParams {
  int type = 0;  // OptimizerType
  float lr = 0, mu = 0, eps = 0, b1 = 0, b2 = 0, wd = 0;
  float inv_bc1 = 1, inv_bc2 = 1;  // adam: 1/(1-b1^t), 1/(1-b2^t)
};

struct KernelTable {
  // The update with g[i] = gscale * grad[i] (see optimizer.h), in place.
  // Encoded chunks arrive here block by block from ChunkDecoder::Block, so
  // decoding stays the codec's (common/codec/decoder.h).
  void (*apply)(const StepParams& sp, float* p, float* s0, float* s1, const float* grad,
                float gscale, size_t n);
  // The same update out of place: reads p, s0, s1 and writes the updated
  // values to po, s0o, s1o (buffers distinct from the inputs; null where the
  // optimizer has no such slot). Returns false when any value it wrote is
  // NaN or Inf (see [finite apply] in optimizer.h).
  bool (*apply_checked)(const StepParams& sp, const float* p, const float* s0, const float* s1,
                        const float* grad, float gscale, float* po, float* s0o, float* s1o,
                        size_t n);
  // The bits of the largest |x[i]| (> 0x7f800000 for a NaN).
  uint32_t (*max_abs_bits)(const float* x, size_t n);
};

const KernelTable& PortableKernels();
const KernelTable& Avx2Kernels();
// AVX2 when the CPU has it (and it was compiled in), else portable.
const KernelTable& Dispatch();

}  // namespace gradstream::optim_internal

#endif  // GRADSTREAM_COMMON_OPTIM_INTERNAL_KERNELS_H_
