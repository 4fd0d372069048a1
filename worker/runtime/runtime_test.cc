// The worker runtime both front-ends drive: the reading of an assignment,
// the progress meter and its wire form, who sends initial parameters, and
// the session's answers to a lost shard and to leaving.
#include <cmath>
#include <set>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "common/env/testing/fake_clock_env.h"
#include "gtest/gtest.h"
#include "worker/client/testing/recording_client.h"
#include "worker/runtime/data_split.h"
#include "worker/runtime/membership.h"
#include "worker/runtime/progress.h"
#include "worker/runtime/session.h"

namespace gradstream::runtime {
namespace {

// The assignments a worker that left job "j" at clock 300 sees while the
// coordinator scales it back in at clock 900.
TEST(Rejoin, ANewMembershipOfTheSameJobIsSeenWithoutTheGapBetween) {
  const Assignment trained{.job_id = "j", .job_active = true, .join_clock = 120,
                           .leave = true, .leave_clock = 300};
  // The reply that moved it off the job, the one naming its old membership
  // while the rejoin is not committed, and the committed rejoin.
  const Assignment moved_off{};
  const Assignment uncommitted{.job_id = "j", .job_active = true, .join_clock = 900,
                               .leave = true, .leave_clock = 300};
  const Assignment rejoin{.job_id = "j", .job_active = true, .rank = 1, .world_size = 2,
                          .join_clock = 900};
  EXPECT_FALSE(Trains(moved_off));
  EXPECT_FALSE(Trains(uncommitted));
  EXPECT_TRUE(Trains(rejoin));
  EXPECT_FALSE(RejoinsAfter(trained, trained));
  EXPECT_FALSE(RejoinsAfter(trained, uncommitted));
  EXPECT_TRUE(RejoinsAfter(trained, rejoin));
  // Another job, an ended one, or the same membership again is no rejoin.
  Assignment other = rejoin;
  other.job_id = "k";
  EXPECT_FALSE(RejoinsAfter(trained, other));
  Assignment ended = rejoin;
  ended.job_active = false;
  EXPECT_FALSE(RejoinsAfter(trained, ended));
  Assignment same = rejoin;
  same.join_clock = trained.join_clock;
  EXPECT_FALSE(RejoinsAfter(trained, same));
}

TEST(Membership, FromProtoReadsTheJobStateAndAtLeastOneMember) {
  v1::Assignment p;
  p.set_job_id("j");
  p.set_job_state(v1::RUNNING);
  p.set_rank(2);
  p.set_world_size(0);
  p.set_leave(true);
  p.set_leave_clock(40);
  Assignment a = AssignmentFromProto(p);
  EXPECT_TRUE(a.job_active);
  EXPECT_EQ(a.rank, 2u);
  EXPECT_EQ(a.world_size, 1u);
  EXPECT_TRUE(StillOurs(a, "j"));
  EXPECT_FALSE(StillOurs(a, "k"));
  EXPECT_FALSE(LeavesAt(a, 39));
  EXPECT_TRUE(LeavesAt(a, 40));
  p.set_job_state(v1::CANCELLED);
  EXPECT_FALSE(StillOurs(AssignmentFromProto(p), "j"));
  p.set_job_state(v1::PENDING);
  p.clear_job_id();
  EXPECT_FALSE(AssignmentFromProto(p).job_active);
}

TEST(Membership, TheRankAtAClockIsTheNewestEffectiveEpochs) {
  std::vector<v1::MembershipEpoch> epochs(2);
  epochs[0].set_epoch(1);
  epochs[0].set_effective_clock(0);
  epochs[0].add_worker_ids(5);
  epochs[0].add_worker_ids(7);
  epochs[1].set_epoch(2);
  epochs[1].set_effective_clock(10);
  epochs[1].add_worker_ids(7);
  const Assignment latest{.job_id = "j", .job_active = true, .rank = 0, .world_size = 1,
                          .epoch = 2, .epoch_clock = 10};
  Assignment at = MembershipAt(latest, epochs, 7, 9);
  EXPECT_TRUE(at.job_active);
  EXPECT_EQ(at.rank, 1u);
  EXPECT_EQ(at.world_size, 2u);
  EXPECT_EQ(at.epoch, 1u);
  at = MembershipAt(latest, epochs, 7, 10);
  EXPECT_EQ(at.rank, 0u);
  EXPECT_EQ(at.world_size, 1u);
  EXPECT_EQ(at.epoch, 2u);
  EXPECT_FALSE(MembershipAt(latest, epochs, 5, 10).job_active);  // removed at clock 10
  EXPECT_TRUE(MembershipAt(latest, epochs, 5, 9).job_active);
  EXPECT_EQ(MembershipAt(latest, {}, 5, 9).epoch, 2u);  // no epochs known: the latest
}

TEST(InitialParams, SameValuesEverywhereLetEveryStarterSendThem) {
  EXPECT_TRUE(SendsInitialParams(InitialValues::kSameOnEveryWorker, 0, 0));
  EXPECT_TRUE(SendsInitialParams(InitialValues::kSameOnEveryWorker, 3, 0));
  EXPECT_FALSE(SendsInitialParams(InitialValues::kSameOnEveryWorker, 0, 5));
  EXPECT_TRUE(SendsInitialParams(InitialValues::kRankZeroOnly, 0, 0));
  EXPECT_FALSE(SendsInitialParams(InitialValues::kRankZeroOnly, 3, 0));
  EXPECT_FALSE(SendsInitialParams(InitialValues::kRankZeroOnly, 0, 5));
}

TEST(ProgressMeter, AveragesTheLossAndMeasuresRatesOverWindowsOfASecond) {
  testing::FakeClockEnv env;
  ProgressMeter meter(&env);
  meter.AddStep(2.0, 10);
  meter.AddStep(1.0, 10);
  meter.AddStep(std::nullopt, 10);  // no loss measured: the average stays
  bool new_window = true;
  Progress p = meter.At(3, nullptr, &new_window);
  EXPECT_FALSE(new_window);
  EXPECT_FLOAT_EQ(p.loss, 1.9f);
  EXPECT_EQ(p.samples_per_sec, 0);
  EXPECT_EQ(p.clock, 3u);
  env.Advance(absl::Seconds(2));
  client::ClientStats stats;
  stats.bytes_pushed = 100;
  stats.fp32_bytes_pulled = 400;
  stats.push_link = LinkDecision{43, false, 0.09, 0.055};
  p = meter.At(3, &stats, &new_window);
  EXPECT_TRUE(new_window);
  ASSERT_TRUE(p.push_link.has_value());
  EXPECT_FALSE(p.push_link->exact);
  EXPECT_FLOAT_EQ(p.samples_per_sec, 15);  // 30 samples in 2 s
  EXPECT_EQ(p.bytes_pushed, 100u);
  EXPECT_EQ(p.fp32_bytes_pulled, 400u);
  // The rate holds until the next window closes.
  meter.AddStep(1.0, 50);
  env.Advance(absl::Milliseconds(500));
  EXPECT_FLOAT_EQ(meter.At(4, nullptr).samples_per_sec, 15);
  env.Advance(absl::Milliseconds(500));
  EXPECT_FLOAT_EQ(meter.At(4, nullptr).samples_per_sec, 50);
}

TEST(Progress, TheWireFormKeepsEveryFieldAndAnAccuracyUntilANewOne) {
  Progress p;
  p.clock = 7;
  p.loss = 0.5f;
  p.accuracy = 0.9f;
  p.accuracy_clock = 6;
  p.samples_per_sec = 123;
  p.bytes_pushed = 1;
  p.fp32_bytes_pushed = 2;
  p.bytes_pulled = 3;
  p.fp32_bytes_pulled = 4;
  p.bytes_pulled_discarded = 5;
  p.residual_norm = 0.25;
  p.encode_path = "host-from-cuda";
  p.encode_share = 0.125f;
  p.push_link = LinkDecision{43, true, 0.041, 0.055};
  p.wait_share = 0.375f;
  Progress back;
  MergeProgress(ProgressToProto(p), &back);
  EXPECT_EQ(ProgressToProto(back).SerializeAsString(), ProgressToProto(p).SerializeAsString());
  // A report without an evaluation keeps the last one.
  v1::WorkerProgress later = ProgressToProto(p);
  later.set_clock(8);
  later.set_accuracy(0);
  later.set_accuracy_clock(0);
  MergeProgress(later, &back);
  EXPECT_EQ(back.clock, 8u);
  EXPECT_FLOAT_EQ(back.accuracy, 0.9f);
  EXPECT_EQ(back.accuracy_clock, 6u);
  ASSERT_TRUE(back.push_link.has_value());
  EXPECT_EQ(back.push_link->clock, 43u);
  later.clear_push_link();  // as reported, like every field but the accuracy
  MergeProgress(later, &back);
  EXPECT_FALSE(back.push_link.has_value());
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * 7919) % n;  // a permutation
  return v;
}

// With a global batch every clock consumes the same samples whatever the
// world size: the ranks' pieces are disjoint and make up the global batch,
// every rank makes the same number of clocks, a last batch too small for
// every rank is padded from the pass's first indices.
TEST(SplitPass, GlobalBatchesArePartitionedAmongTheRanks) {
  for (auto [n, g] : std::vector<std::pair<int64_t, int64_t>>{
           {600, 64}, {129, 64}, {128, 64}, {1000, 30}, {7, 4}}) {
    const std::vector<int64_t> perm = Iota(n);
    const size_t steps = static_cast<size_t>((n + g - 1) / g);
    for (uint32_t world = 1; world <= 4; ++world) {
      if (g < world) continue;
      std::vector<std::vector<std::vector<int64_t>>> per_rank;
      for (uint32_t r = 0; r < world; ++r) {
        auto b = SplitPass(perm, r, world, BatchSize{.global = g});
        ASSERT_TRUE(b.ok()) << b.status();
        ASSERT_EQ(b->size(), steps) << n << " " << g << " " << world;
        per_rank.push_back(*b);
      }
      for (size_t k = 0; k < steps; ++k) {
        std::multiset<int64_t> got, want;
        for (uint32_t r = 0; r < world; ++r) {
          EXPECT_FALSE(per_rank[r][k].empty());
          got.insert(per_rank[r][k].begin(), per_rank[r][k].end());
        }
        const int64_t end = std::min<int64_t>(n, static_cast<int64_t>(k + 1) * g);
        want.insert(perm.begin() + static_cast<int64_t>(k) * g, perm.begin() + end);
        if (want.size() >= world) {
          EXPECT_EQ(got, want) << n << " " << g << " " << world << " clock " << k;
        } else {
          EXPECT_EQ(got.size(), world);  // padded to one index per rank
        }
      }
    }
  }
  // 129 over 3 ranks in 64s: 64, 64, then 1 index padded to 3.
  auto b = SplitPass(Iota(129), 2, 3, BatchSize{.global = 64});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[0].size(), 21u);
  EXPECT_EQ((*b)[1].size(), 21u);
  EXPECT_EQ((*b)[2].size(), 1u);
}

TEST(SplitPass, PerWorkerBatchesTakeEveryWorldSizethIndex) {
  std::vector<int64_t> perm(20);
  for (int64_t i = 0; i < 20; ++i) perm[static_cast<size_t>(i)] = i;
  auto b = SplitPass(perm, 1, 2, BatchSize{.per_worker = 4});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, (std::vector<std::vector<int64_t>>{{1, 3, 5, 7}, {9, 11, 13, 15}, {17, 19}}));
  // 5 over 2: padded with the first index, as DistributedSampler pads.
  b = SplitPass(std::vector<int64_t>{10, 11, 12, 13, 14}, 0, 2, BatchSize{.per_worker = 8});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (std::vector<std::vector<int64_t>>{{10, 12, 14}}));
  b = SplitPass(std::vector<int64_t>{10, 11, 12, 13, 14}, 1, 2, BatchSize{.per_worker = 8});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (std::vector<std::vector<int64_t>>{{11, 13, 10}}));
}

TEST(SplitPass, BadSizesAndRanksAreInvalidArgument) {
  const std::vector<int64_t> perm = Iota(12);
  EXPECT_EQ(SplitPass(perm, 0, 4, BatchSize{.global = 3}).status().code(),
            absl::StatusCode::kInvalidArgument);  // a global batch smaller than the world
  EXPECT_FALSE(SplitPass(perm, 0, 2, BatchSize{}).ok());
  EXPECT_FALSE(SplitPass(perm, 0, 2, BatchSize{.per_worker = 4, .global = 8}).ok());
  EXPECT_FALSE(SplitPass(perm, 2, 2, BatchSize{.per_worker = 4}).ok());
  EXPECT_FALSE(SplitPass(perm, 0, 0, BatchSize{.per_worker = 4}).ok());
  EXPECT_TRUE(SplitPass({}, 0, 2, BatchSize{.per_worker = 4})->empty());
}

struct SessionFixture {
  SessionFixture() { client.SetTensors({{"w", 2}, {"b", 1}}); }
  std::unique_ptr<WorkerSession> Open(InitialValues values) {
    SessionOptions o;
    o.initial_values = values;
    return std::make_unique<WorkerSession>(&client, o);
  }
  size_t Count(const std::string& e) const {
    size_t n = 0;
    for (const std::string& x : client.events()) n += x == e;
    return n;
  }
  client::testing::RecordingClient client;
};

TEST(WorkerSession, OnlyTheWorkersThePolicyNamesSendTheInitialValues) {
  SessionFixture f;
  const std::vector<float> w = {1, 2}, b = {3};
  const std::vector<absl::Span<const float>> params = {w, b};
  auto script = f.Open(InitialValues::kRankZeroOnly);
  ASSERT_TRUE(script->Init(/*rank=*/1, /*start_clock=*/0, params, absl::Seconds(10)).ok());
  EXPECT_EQ(f.Count("init"), 0u);
  ASSERT_TRUE(script->Init(/*rank=*/0, /*start_clock=*/0, params, absl::Seconds(10)).ok());
  EXPECT_EQ(f.Count("init"), 1u);
  auto builtin = f.Open(InitialValues::kSameOnEveryWorker);
  ASSERT_TRUE(builtin->Init(/*rank=*/1, /*start_clock=*/0, params, absl::Seconds(10)).ok());
  EXPECT_EQ(f.Count("init"), 2u);
  ASSERT_TRUE(
      builtin->Init(/*rank=*/0, /*start_clock=*/4, params, absl::Seconds(10)).ok());  // a joiner
  EXPECT_EQ(f.Count("init"), 2u);
}

// See [re-initialization] in server/shard/job.h: the values a lost shard
// gets are the ones this worker last pulled, whichever front-end drives it.
TEST(WorkerSession, AShardThatLostItsParametersGetsTheValuesLastPulled) {
  SessionFixture f;
  auto session = f.Open(InitialValues::kRankZeroOnly);
  std::vector<float> w = {4, 5}, b = {6};
  f.client.FailPull(3);
  session->loop().StartPull(3, {absl::MakeSpan(w), absl::MakeSpan(b)});
  ASSERT_TRUE(session->loop().WaitTensors({}).ok());
  EXPECT_EQ(f.Count("init"), 1u);
  EXPECT_EQ(f.Count("pull 3"), 2u);  // asked again after the values went out
  EXPECT_EQ(f.client.init_values(), (std::vector<std::vector<float>>{{4, 5}, {6}}));
}

// The recording client acknowledges pushes at once, so this shows the pull
// given up and Leave last, not the wait for the pushes (ps_client_test's).
TEST(WorkerSession, LeavingGivesUpThePullAndSendsLeaveLast) {
  SessionFixture f;
  auto session = f.Open(InitialValues::kRankZeroOnly);
  const std::vector<float> g = {1, 1};
  ASSERT_TRUE(session->loop().Push(0, g, 0).ok());
  ASSERT_TRUE(session->loop().EndClock(0, std::nullopt).ok());
  std::vector<float> w(2), b(1);
  session->loop().StartPull(1, {absl::MakeSpan(w), absl::MakeSpan(b)});
  ASSERT_TRUE(session->Leave(absl::Seconds(10)).ok());
  EXPECT_FALSE(session->loop().pull_clock().has_value());
  EXPECT_EQ(f.client.events().back(), "leave");
}

}  // namespace
}  // namespace gradstream::runtime
