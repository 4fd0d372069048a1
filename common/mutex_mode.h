// absl::Mutex's lock-order checking: off in the shipped binaries, on in tests.
#ifndef GRADSTREAM_COMMON_MUTEX_MODE_H_
#define GRADSTREAM_COMMON_MUTEX_MODE_H_

#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace gradstream {

// NOTE: [mutex deadlock detection] The Abseil this builds against (Debian's)
// checks every absl::Mutex acquisition, gRPC's own locks included, against a
// process-wide lock-order graph, as a debug build of Abseil does, whatever
// our NDEBUG. gs_shard, gs_worker, gs_coordinator and libgradstream_c
// (gs_open) turn that off unless GRADSTREAM_MUTEX_DEADLOCK_DETECTION=1 is in
// their environment, which every ctest entry sets (cmake/gradstream.cmake,
// GS_TEST_ENVIRONMENT): the tests, and the daemons they start, keep finding
// lock-order inversions. The measurement: docs/design/mutex-deadlock-detection.md.
inline void SkipMutexDeadlockDetection() {
  const char* keep = std::getenv("GRADSTREAM_MUTEX_DEADLOCK_DETECTION");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_MUTEX_MODE_H_
