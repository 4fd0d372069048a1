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
  // g[i] = gscale * grad[i] (grad may be unaligned: read with memcpy semantics).
  void (*apply_dense)(const StepParams& sp, float* p, float* s0, float* s1, const void* grad,
                      float gscale, size_t n);
  // 2-bit codes (00=0, 01=+1, 10=-1; already validated): g[i] = gscale * code[i].
  void (*apply_twobit)(const StepParams& sp, float* p, float* s0, float* s1, const uint8_t* codes,
                       float gscale, size_t n);
};

const KernelTable& PortableKernels();
const KernelTable& Avx2Kernels();
// AVX2 when the CPU has it (and it was compiled in), else portable.
const KernelTable& Dispatch();

}  // namespace gradstream::optim_internal

#endif  // GRADSTREAM_COMMON_OPTIM_INTERNAL_KERNELS_H_
