// Picks the codec kernel table once per process from the CPU's features.
#include <cstdlib>
#include <cstring>

#include "common/codec/internal/kernels.h"

namespace gradstream {
namespace internal {

const CodecKernels& ActiveKernels() {
  static const CodecKernels* const active = [] {
    const char* force = std::getenv("GS_CODEC_ISA");
    if (force != nullptr && std::strcmp(force, "portable") == 0) return &PortableKernels();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) return Avx2Kernels();
    return &PortableKernels();
  }();
  return *active;
}

}  // namespace internal
}  // namespace gradstream
