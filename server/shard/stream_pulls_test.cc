// [pull schedule]: the per-stream cap and the deadline clamp, alone.
#include "server/shard/stream_pulls.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gradstream::shard {
namespace {

TEST(StreamPulls, TheCapRefusesOneMoreAndAnAnswerFreesASlot) {
  StreamPulls pulls;
  for (int i = 0; i < StreamPulls::kMaxWaiting; ++i) ASSERT_TRUE(pulls.Admit().ok()) << i;
  EXPECT_EQ(pulls.waiting(), StreamPulls::kMaxWaiting);
  const absl::Status refused = pulls.Admit();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.message(), "at most 16 per stream")) << refused;
  EXPECT_EQ(pulls.waiting(), StreamPulls::kMaxWaiting) << "a refused pull is not counted";
  pulls.Answered();
  EXPECT_EQ(pulls.waiting(), StreamPulls::kMaxWaiting - 1);
  EXPECT_TRUE(pulls.Admit().ok());
  for (int i = 0; i < StreamPulls::kMaxWaiting; ++i) pulls.Answered();
  EXPECT_EQ(pulls.waiting(), 0);
}

TEST(PullDeadline, TheWorkersTimeoutIsClampedToTheShards) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  const absl::Duration longest = absl::Seconds(60);
  EXPECT_EQ(PullDeadline(now, 2000, longest), now + absl::Seconds(2));
  EXPECT_EQ(PullDeadline(now, 60000, longest), now + longest);
  EXPECT_EQ(PullDeadline(now, 3600 * 1000, longest), now + longest) << "clamped";
  EXPECT_EQ(PullDeadline(now, 0, longest), now + longest) << "none asked";
  EXPECT_EQ(PullDeadline(now, -5, longest), now + longest) << "nonsense asked";
}

}  // namespace
}  // namespace gradstream::shard
