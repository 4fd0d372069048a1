#include "common/rpc/worker_token.h"

#include "gtest/gtest.h"

namespace gradstream::rpc {
namespace {

TEST(WorkerToken, BindsJobWorkerAndIncarnation) {
  const std::string t = WorkerToken("secret", "job", 7, 2);
  EXPECT_EQ(t.substr(0, 3), "w1.");
  EXPECT_EQ(t.size(), 3u + 64u);
  EXPECT_TRUE(IsWorkerToken(t, "secret", "job", 7, 2));
  EXPECT_FALSE(IsWorkerToken(t, "secret", "job", 8, 2));     // another worker
  EXPECT_FALSE(IsWorkerToken(t, "secret", "job", 7, 1002));  // another incarnation
  EXPECT_FALSE(IsWorkerToken(t, "secret", "job2", 7, 2));    // another job
  EXPECT_FALSE(IsWorkerToken(t, "other", "job", 7, 2));      // another job token
  EXPECT_FALSE(IsWorkerToken("", "secret", "job", 7, 2));
  // Fields are separated: (job "a1", worker 2) is not (job "a", worker 12).
  EXPECT_NE(WorkerToken("s", "a1", 2, 0), WorkerToken("s", "a", 12, 0));
  EXPECT_EQ(WorkerToken("", "job", 7, 2), "");
}

// The value a second implementation (tests/security/hostile_test.py) computes.
TEST(WorkerToken, IsHmacSha256OfTheFields) {
  EXPECT_EQ(WorkerToken("key", "j", 1, 0),
            "w1.740b6addfbc2e682e30f74574218b9ade61ae0a9e4a3f9c754f09bfe2abee316");
}

}  // namespace
}  // namespace gradstream::rpc
