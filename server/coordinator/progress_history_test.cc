#include "server/coordinator/progress_history.h"

#include "gtest/gtest.h"

namespace gradstream::coordinator {
namespace {

ProgressPoint At(uint64_t clock) {
  ProgressPoint p;
  p.clock = clock;
  p.accuracy = clock / 1000.0f;
  return p;
}

TEST(ProgressHistory, AppendsOnlyNewerEvaluations) {
  JobStatus job;
  AppendProgressPoint(At(0), &job);  // no evaluation yet
  EXPECT_EQ(job.history.size(), 0u);
  AppendProgressPoint(At(100), &job);
  AppendProgressPoint(At(100), &job);  // the same evaluation reported again
  AppendProgressPoint(At(50), &job);   // an older one (a late heartbeat)
  AppendProgressPoint(At(200), &job);
  ASSERT_EQ(job.history.size(), 2u);
  EXPECT_EQ(job.history[0].clock, 100u);
  EXPECT_EQ(job.history[1].clock, 200u);
}

TEST(ProgressHistory, StaysBoundedAndCoversTheWholeRun) {
  JobStatus job;
  constexpr size_t kMax = 16;
  for (uint64_t c = 1; c <= 1000; ++c) {
    AppendProgressPoint(At(c * 10), &job, kMax);
    ASSERT_LE(job.history.size(), kMax);
  }
  EXPECT_EQ(job.history.front().clock, 10u);   // the start is kept
  EXPECT_EQ(job.history.back().clock, 10000u);  // and the newest
  for (size_t i = 1; i < job.history.size(); ++i) {
    EXPECT_LT(job.history[i - 1].clock, job.history[i].clock);
  }
  EXPECT_GE(job.history.size(), kMax / 2);
}

TEST(ProgressHistory, EvaluationsCloserThanTheIntervalAreThinnedButTheLastIsKept) {
  JobStatus job;
  job.spec.steps = 1000;
  auto at = [](uint64_t clock, int64_t ms) {
    ProgressPoint p = At(clock);
    p.unix_ms = ms;
    return p;
  };
  EXPECT_TRUE(ShouldRecordProgress(job, at(1, 0)));  // the first one
  AppendProgressPoint(at(1, 0), &job);
  EXPECT_FALSE(ShouldRecordProgress(job, at(2, kMinProgressIntervalMs - 1)));
  EXPECT_TRUE(ShouldRecordProgress(job, at(3, kMinProgressIntervalMs)));
  EXPECT_TRUE(ShouldRecordProgress(job, at(1000, 1)));  // the final evaluation
  EXPECT_FALSE(ShouldRecordProgress(job, at(1, 10000)));  // not new
}

}  // namespace
}  // namespace gradstream::coordinator
