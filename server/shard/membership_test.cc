// Membership and CheckpointProgress: the bookkeeping Job composes.
#include "server/shard/membership.h"

#include "gtest/gtest.h"
#include "server/shard/checkpoint_progress.h"

namespace gradstream::shard {
namespace {

TEST(Membership, StaleIncarnationsAreRefused) {
  Membership m(MembershipEpoch{1, 0, {10}});
  EXPECT_EQ(*m.Hello(10, 2), 1u);
  EXPECT_EQ(m.Hello(10, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(m.CheckIncarnation(10, 2).ok());
  EXPECT_TRUE(m.Hello(10, 3).ok());
  EXPECT_EQ(m.CheckIncarnation(10, 2).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(m.CheckIncarnation(11, 0).ok());  // never said Hello
}

// See [clock windows].
TEST(Membership, ClocksAreCheckedAgainstTheMembersWindow) {
  Membership m(MembershipEpoch{1, 0, {10}});
  EXPECT_TRUE(m.CheckClock(10, 4, 4, "push").ok());
  const absl::Status far = m.CheckClock(10, uint64_t{1} << 62, 4, "ClockAdvance");
  EXPECT_EQ(far.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(far.message().find("ClockAdvance clock 4611686018427387904"), std::string::npos);
  EXPECT_NE(far.message().find("at most 4"), std::string::npos);
  EXPECT_TRUE(m.AdvanceClock(10, 3));
  EXPECT_TRUE(m.CheckClock(10, 7, 4, "push").ok());
  EXPECT_FALSE(m.CheckClock(10, 8, 4, "push").ok());
  // No overflow near the top of the range.
  EXPECT_TRUE(m.CheckClock(10, 9, ~uint64_t{0}, "push").ok());
  // A worker joining at clock 50 is at 50 for the window before it advances.
  ASSERT_TRUE(m.Update(MembershipEpoch{2, 50, {10, 20}}).ok());
  EXPECT_EQ(m.MemberClock(20), 50u);
  EXPECT_TRUE(m.CheckClock(20, 54, 4, "pull").ok());
  EXPECT_FALSE(m.CheckClock(20, 55, 4, "pull").ok());
  // After a restore each member's next advance may jump, once.
  m.AllowCatchUp();
  EXPECT_TRUE(m.CheckClock(10, 1000, 4, "ClockAdvance").ok());
  EXPECT_TRUE(m.AdvanceClock(10, 1000));
  EXPECT_FALSE(m.CheckClock(10, 2000, 4, "ClockAdvance").ok());
  EXPECT_TRUE(m.CheckClock(20, 2000, 4, "ClockAdvance").ok());  // 20 has not caught up yet
}

TEST(Membership, ALeaverPastItsLeaveClockIsToldApartFromAStranger) {
  // See [late leave].
  Membership m(MembershipEpoch{1, 0, {10, 20}});
  ASSERT_TRUE(m.Update(MembershipEpoch{2, 100, {10}}).ok());
  EXPECT_FALSE(m.LeftBefore(20, 99));   // still a member there
  EXPECT_TRUE(m.LeftBefore(20, 100));   // let go at 100, heard of it late
  EXPECT_TRUE(m.LeftBefore(20, 150));
  EXPECT_FALSE(m.LeftBefore(10, 150));  // a member
  EXPECT_FALSE(m.LeftBefore(30, 150));  // never listed
}

TEST(Membership, ClocksOnlyMoveForward) {
  Membership m(MembershipEpoch{1, 0, {10, 11}});
  EXPECT_EQ(m.WorkerClock(10), 0u);
  EXPECT_TRUE(m.AdvanceClock(10, 3));
  EXPECT_FALSE(m.AdvanceClock(10, 3));
  EXPECT_FALSE(m.AdvanceClock(10, 2));
  EXPECT_EQ(m.WorkerClock(10), 3u);
  EXPECT_EQ(m.MinClock(), 0u);  // 11 never advanced
  EXPECT_TRUE(m.AdvanceClock(11, 5));
  EXPECT_EQ(m.MinClock(), 3u);
  const Membership::Summary s = m.Summarize();
  EXPECT_EQ(s.min_clock, 3u);
  EXPECT_EQ(s.max_clock, 5u);
  EXPECT_EQ(s.epoch, 1u);
  EXPECT_EQ(s.members, 2u);
}

TEST(Membership, AJoinerStartsAtTheClockItJoinedAt) {
  Membership m(MembershipEpoch{1, 0, {10}});
  EXPECT_TRUE(m.AdvanceClock(10, 9));
  EXPECT_EQ(*m.Update(MembershipEpoch{2, 7, {10, 11}}), 2u);
  EXPECT_EQ(m.MinClock(), 7u);  // 11 is at 7, not 0
  EXPECT_EQ(*m.Update(MembershipEpoch{3, 8, {10}}), 3u);
  EXPECT_EQ(m.MinClock(), 9u);  // a removed worker holds nothing back
}

// Bounded staleness, scale 1 -> 2 -> 1 -> 2 with the same worker: its clock
// from before it left must not pull MinClock back when it rejoins (see
// [rejoin clock]).
TEST(Membership, ARejoinerForgetsItsOldClock) {
  Membership m(MembershipEpoch{1, 0, {10}});
  ASSERT_TRUE(m.Update(MembershipEpoch{2, 20, {10, 11}}).ok());
  EXPECT_TRUE(m.AdvanceClock(10, 40));
  EXPECT_TRUE(m.AdvanceClock(11, 40));
  ASSERT_TRUE(m.Update(MembershipEpoch{3, 40, {10}}).ok());  // 11 leaves at 40
  EXPECT_TRUE(m.AdvanceClock(10, 5000));
  EXPECT_EQ(m.MinClock(), 5000u);
  ASSERT_TRUE(m.Update(MembershipEpoch{4, 5010, {10, 11}}).ok());  // 11 comes back
  EXPECT_EQ(m.WorkerClock(11), 5010u);
  EXPECT_EQ(m.MinClock(), 5000u);  // 10, not 11's old 40
  EXPECT_TRUE(m.AdvanceClock(10, 5020));
  EXPECT_EQ(m.MinClock(), 5010u);
}

// A join this shard hears of after it applied rounds past the join clock
// starts where the shard is.
TEST(Membership, ALateJoinerStartsWhereTheShardIs) {
  Membership m(MembershipEpoch{1, 0, {10}});
  EXPECT_TRUE(m.AdvanceClock(10, 30));
  Membership::Joined joined;
  ASSERT_TRUE(m.Update(MembershipEpoch{2, 20, {10, 11}}, /*passed=*/25, &joined).ok());
  EXPECT_EQ(joined.workers, (std::vector<uint64_t>{11}));
  EXPECT_EQ(joined.start, 25u);
  EXPECT_EQ(m.WorkerClock(11), 25u);
  EXPECT_EQ(m.MinClock(), 25u);
  ASSERT_TRUE(m.Update(MembershipEpoch{3, 40, {10, 11, 12}}, 0, &joined).ok());
  EXPECT_EQ(joined.workers, (std::vector<uint64_t>{12}));
  EXPECT_EQ(joined.start, 40u);  // on time: the epoch's clock
}

// A checkpoint from before worker 11 left and came back: the coordinator's
// epochs replace the restored ones, and 11's old clock counts from its
// current run on.
TEST(Membership, TheCoordinatorsEpochsReplaceARestoredCheckpoints) {
  Membership m(MembershipEpoch{1, 0, {10, 11}});
  EXPECT_TRUE(m.AdvanceClock(10, 50));
  EXPECT_TRUE(m.AdvanceClock(11, 12));
  EXPECT_EQ(m.ReplaceEpochs({MembershipEpoch{2, 5, {}}, MembershipEpoch{1, 9, {}}}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.ReplaceEpochs({MembershipEpoch{1, 0, {10, 11}}, MembershipEpoch{2, 12, {10}},
                               MembershipEpoch{3, 45, {10, 11}}})
                  .ok());
  EXPECT_EQ(m.WorkerClock(11), 45u);
  EXPECT_EQ(m.MinClock(), 45u);
  uint64_t epoch = 0;
  EXPECT_EQ(m.MembersAt(20, &epoch), (std::vector<uint64_t>{10}));
  EXPECT_EQ(epoch, 2u);
}

TEST(Membership, EpochsApplyFromTheirEffectiveClock) {
  Membership m(MembershipEpoch{1, 0, {10, 11}});
  EXPECT_EQ(*m.Update(MembershipEpoch{2, 4, {}}), 2u);
  EXPECT_EQ(*m.Update(MembershipEpoch{3, 6, {12}}), 3u);
  EXPECT_EQ(*m.Update(MembershipEpoch{2, 9, {13}}), 3u);  // not newer: no-op
  EXPECT_EQ(m.Update(MembershipEpoch{4, 5, {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  uint64_t epoch = 0;
  EXPECT_EQ(m.MembersAt(3, &epoch), (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(epoch, 1u);
  EXPECT_TRUE(m.MembersAt(5, &epoch).empty());
  EXPECT_EQ(epoch, 2u);
  EXPECT_EQ(m.MembersAt(6, &epoch), (std::vector<uint64_t>{12}));
  EXPECT_EQ(m.NextStaffedClock(3), 3u);
  EXPECT_EQ(m.NextStaffedClock(4), 6u);
  EXPECT_EQ(m.NextStaffedClock(7), 7u);
}

TEST(Membership, RestoreKeepsANewerCreateJobEpoch) {
  Membership saved(MembershipEpoch{1, 0, {10, 11}});
  ASSERT_TRUE(saved.Hello(10, 4).ok());
  saved.AdvanceClock(10, 6);
  saved.AdvanceClock(11, 5);
  JobSnapshot snap;
  EXPECT_EQ(saved.SaveTo(&snap), 5u);

  Membership newer(MembershipEpoch{2, 5, {10}});
  newer.RestoreFrom(snap);
  EXPECT_EQ(newer.Summarize().epoch, 2u);
  EXPECT_EQ(newer.MinClock(), 6u);
  EXPECT_EQ(newer.CheckIncarnation(10, 3).code(), absl::StatusCode::kFailedPrecondition);

  Membership older(MembershipEpoch{1, 0, {10, 11}});
  older.RestoreFrom(snap);
  EXPECT_EQ(older.Summarize().epoch, 1u);
  EXPECT_EQ(older.MinClock(), 5u);
}

TEST(CheckpointProgress, SyncCountsVersionsOtherModesMemberClocks) {
  EXPECT_EQ(CheckpointProgress(ConsistencyMode::kSync, 0).Clock(4, 9), 4u);
  EXPECT_EQ(CheckpointProgress(ConsistencyMode::kBounded, 0).Clock(4, 9), 9u);
  EXPECT_EQ(CheckpointProgress(ConsistencyMode::kAsync, 0).Clock(4, 9), 9u);
}

TEST(CheckpointProgress, DueOncePerMultipleAndOneAtATime) {
  CheckpointProgress p(ConsistencyMode::kSync, 5);
  EXPECT_TRUE(p.periodic());
  EXPECT_FALSE(p.TrySchedule(4));
  EXPECT_TRUE(p.TrySchedule(5));
  EXPECT_FALSE(p.TrySchedule(6));  // already scheduled
  p.Written(5);
  p.EndScheduled();
  EXPECT_FALSE(p.TrySchedule(9));  // same multiple as the last one written
  EXPECT_TRUE(p.TrySchedule(10));
  p.Written(3);  // an older checkpoint finishing late does not go back
  EXPECT_EQ(p.last_written(), 5u);
  EXPECT_FALSE(CheckpointProgress(ConsistencyMode::kSync, 0).TrySchedule(100));
}

}  // namespace
}  // namespace gradstream::shard
