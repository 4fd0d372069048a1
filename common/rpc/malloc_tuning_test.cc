// [receive memory]: once tuned, a freed message-sized buffer is reused
// without page faults.
#include "common/rpc/malloc_tuning.h"

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

// Sanitizers bring their own allocator: glibc's settings do not apply.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GS_SANITIZED_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define GS_SANITIZED_MALLOC 1
#endif
#endif

namespace gradstream::rpc {
namespace {

long MinorFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Allocates, writes and frees `n` buffers of `bytes`, `rounds` times.
long FaultsOf(size_t bytes, int n, int rounds) {
  const long before = MinorFaults();
  for (int r = 0; r < rounds; ++r) {
    void* p[16];
    for (int i = 0; i < n; ++i) {
      p[i] = std::malloc(bytes);
      std::memset(p[i], r + 1, bytes);
    }
    for (int i = n - 1; i >= 0; --i) std::free(p[i]);
  }
  return MinorFaults() - before;
}

TEST(MallocTuning, FreedBuffersAreReusedWithoutFaults) {
#if !defined(__GLIBC__) || defined(GS_SANITIZED_MALLOC)
  GTEST_SKIP() << "glibc malloc only";
#else
  ASSERT_TRUE(KeepFreedMemoryForReuse());
  constexpr size_t kBytes = 4 << 20;  // past glibc's default mmap threshold
  FaultsOf(kBytes, 8, 1);             // first use: the heap grows
  // 20 rounds of 32 MiB written: 160,000 faults if every page came fresh.
  EXPECT_LT(FaultsOf(kBytes, 8, 20), 2000);
#endif
}

}  // namespace
}  // namespace gradstream::rpc
