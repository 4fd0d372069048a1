#include "common/mutex_mode.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

namespace gradstream {
namespace {

// Takes two mutexes in one order, then in the other: a lock-order inversion,
// which Abseil's deadlock detection reports by aborting.
void InvertLockOrder() {
  absl::Mutex a, b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  absl::MutexLock lb(&b);
  absl::MutexLock la(&a);
}

// Whether this Abseil checks lock order at all (a release build of Abseil
// does not, whatever the mode).
bool AbseilChecksLockOrder() {
  const pid_t pid = fork();
  if (pid == 0) {
    InvertLockOrder();
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return true;  // then the tests say
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(MutexModeTest, CtestKeepsDetection) {
  const char* keep = std::getenv("GRADSTREAM_MUTEX_DEADLOCK_DETECTION");
  ASSERT_NE(keep, nullptr) << "ctest entries set it: GS_TEST_ENVIRONMENT in cmake/gradstream.cmake";
  EXPECT_STREQ(keep, "1");
}

TEST(MutexModeTest, InversionAbortsWithTheVariable) {
  if (!AbseilChecksLockOrder()) GTEST_SKIP() << "this Abseil does not check lock order";
  EXPECT_DEATH(
      {
        setenv("GRADSTREAM_MUTEX_DEADLOCK_DETECTION", "1", 1);
        SkipMutexDeadlockDetection();
        InvertLockOrder();
      },
      "");
}

TEST(MutexModeTest, SkippedWithoutTheVariable) {
  if (!AbseilChecksLockOrder()) GTEST_SKIP() << "this Abseil does not check lock order";
  EXPECT_EXIT(
      {
        unsetenv("GRADSTREAM_MUTEX_DEADLOCK_DETECTION");
        SkipMutexDeadlockDetection();
        InvertLockOrder();
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gradstream
