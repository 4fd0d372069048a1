// Portable build of the update kernels, plus run-time dispatch.
#define GS_OPTIM_NS portable
#include "common/optim/internal/kernels_impl.inc"

namespace gradstream::optim_internal {

#if defined(__x86_64__) && defined(GS_OPTIM_HAVE_AVX2)
namespace avx2 {
const KernelTable& Table();
}
const KernelTable& Avx2Kernels() { return avx2::Table(); }
#else
const KernelTable& Avx2Kernels() { return portable::Table(); }
#endif

const KernelTable& PortableKernels() { return portable::Table(); }

const KernelTable& Dispatch() {
#if defined(__x86_64__) && defined(GS_OPTIM_HAVE_AVX2)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return Avx2Kernels();
#endif
  return PortableKernels();
}

}  // namespace gradstream::optim_internal
