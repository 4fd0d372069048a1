// Picks the codec kernel table once per process from the CPU's features, and
// holds the draw scratch the vector tables share.
#include <cpuid.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/codec/internal/kernels.h"

namespace gradstream {
namespace internal {

namespace {

// F16C (the fp16 conversions) by CPUID: clang's __builtin_cpu_supports does
// not know the name. Every AVX2 CPU has it; the check keeps the rule exact.
bool HasF16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

}  // namespace

uint8_t* DrawScratch(uint32_t n) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

bool HasAvx512() {
  static const bool has =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("bmi2") && Avx512Kernels() != nullptr;
  return has;
}

const CodecKernels& ActiveKernels() {
  static const CodecKernels* const active = [] {
    const char* force = std::getenv("GS_CODEC_ISA");
    if (force != nullptr && std::strcmp(force, "portable") == 0) return &PortableKernels();
    if (!(__builtin_cpu_supports("avx2") && HasF16c())) return &PortableKernels();
    if (force != nullptr && std::strcmp(force, "avx2") == 0) return Avx2Kernels();
    return HasAvx512() ? Avx512Kernels() : Avx2Kernels();
  }();
  return *active;
}

}  // namespace internal
}  // namespace gradstream
