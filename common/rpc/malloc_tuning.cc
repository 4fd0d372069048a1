// See malloc_tuning.h and [receive memory].
#include "common/rpc/malloc_tuning.h"

#include <cstdlib>  // defines __GLIBC__ with glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gradstream::rpc {

bool KeepFreedMemoryForReuse() {
#if defined(__GLIBC__)
  constexpr int kMmapThreshold = 32 << 20;   // glibc's maximum (HEAP_MAX_SIZE / 2)
  constexpr int kTrimThreshold = 256 << 20;
  // Setting either threshold also turns off glibc's dynamic adjustment of
  // both, so the values hold.
  return mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 &&
         mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
#else
  return false;
#endif
}

}  // namespace gradstream::rpc
