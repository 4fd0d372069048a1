// In-process tests of the shard core (no gRPC): checkpoint format,
// exactly-once bookkeeping, sync rounds and membership, parked pulls.
#include <cstring>
#include <limits>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/env/crc32c.h"
#include "common/env/record.h"
#include "common/env/testing/fake_clock_env.h"
#include "common/env/testing/fault_injection_env.h"
#include "common/env/testing/mem_env.h"
#include "gtest/gtest.h"
#include "server/shard/checkpoint.h"
#include "server/shard/job.h"

namespace gradstream::shard {
namespace {

TEST(AppliedClocks, CompactsInOrderAndRemembersGaps) {
  AppliedClocks a;
  EXPECT_FALSE(a.Contains(0));
  a.Add(3);  // first clock of a late joiner
  a.Add(5);
  EXPECT_TRUE(a.Contains(3));
  EXPECT_FALSE(a.Contains(4));
  EXPECT_TRUE(a.Contains(5));
  a.Add(4);
  EXPECT_EQ(a.below, 6u);
  EXPECT_TRUE(a.above.empty());
}

// A worker that left after clock 9 and rejoined at 100 never pushes 10..99:
// the set stays bounded instead of growing by one clock per step.
TEST(AppliedClocks, AGapThatNeverFillsIsClosedOnceTheSetGrowsPastItsBound) {
  AppliedClocks a;
  for (uint64_t c = 0; c < 10; ++c) a.Add(c);
  for (uint64_t c = 100; c < 1000; ++c) {
    a.Add(c);
    ASSERT_LE(a.above.size(), AppliedClocks::kMaxSparse);
  }
  EXPECT_TRUE(a.above.empty());
  EXPECT_EQ(a.below, 1000u);
  EXPECT_TRUE(a.Contains(999));
  EXPECT_FALSE(a.Contains(1000));
}

// See [applied floor]: a first clock far ahead of the floor lands in the
// sparse part, so the worker's next normal clock is still applied.
TEST(AppliedClocks, AFirstClockStartsAtTheFloorAndRangesAreOneStep) {
  AppliedClocks a;
  a.Add(uint64_t{1} << 62, 5);
  EXPECT_EQ(a.below, 5u);
  EXPECT_FALSE(a.Contains(5));
  a.Add(5, 5);
  EXPECT_TRUE(a.Contains(5));
  EXPECT_FALSE(a.Contains(6));
  AppliedClocks r;
  r.AddRange(0, uint64_t{1} << 62);  // one step, whatever the length
  EXPECT_EQ(r.below, uint64_t{1} << 62);
  EXPECT_TRUE(r.above.empty());
  r.AddRange((uint64_t{1} << 62) + 10, (uint64_t{1} << 62) + 12);  // a gap of 10: kept
  EXPECT_EQ(r.above.size(), 2u);
  EXPECT_FALSE(r.Contains((uint64_t{1} << 62) + 9));
  r.AddRange((uint64_t{1} << 62) + 100, (uint64_t{1} << 62) + 1000);  // longer than kMaxSparse
  EXPECT_EQ(r.below, (uint64_t{1} << 62) + 1000);
  EXPECT_TRUE(r.above.empty());
}

JobSnapshot SampleSnapshot() {
  JobSnapshot s;
  s.job_id = "j/1";
  s.shard_index = 2;
  s.mode = ConsistencyMode::kBounded;
  s.optimizer = OptimizerType::kAdam;
  s.clock = 7;
  s.epochs = {MembershipEpoch{1, 0, {1, 2, 3}}, MembershipEpoch{2, 5, {1, 3}}};
  s.worker_clocks = {{1, 7}, {3, 8}};
  s.incarnations = {{1, 4}};
  ChunkSnapshot c;
  c.chunk_id = 9;
  c.num_elems = 3;
  c.version = 12;
  c.initialized = true;
  c.params = {1.0f, -2.0f, 3.5f};
  c.opt.step = 12;
  c.opt.slots = {{0.1f, 0.2f, 0.3f}, {1, 2, 3}};
  AppliedClocks a;
  a.Add(0);
  a.Add(1);
  a.Add(4);
  c.applied = {{1, a}};
  s.chunks.push_back(std::move(c));
  return s;
}

TEST(Checkpoint, RoundTrips) {
  const std::string data = EncodeCheckpoint(SampleSnapshot());
  absl::StatusOr<JobSnapshot> back = DecodeCheckpoint(data);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job_id, "j/1");
  EXPECT_EQ(back->clock, 7u);
  ASSERT_EQ(back->epochs.size(), 2u);
  EXPECT_EQ(back->epochs[1].workers, (std::vector<uint64_t>{1, 3}));
  ASSERT_EQ(back->chunks.size(), 1u);
  EXPECT_EQ(back->chunks[0].params, (std::vector<float>{1.0f, -2.0f, 3.5f}));
  EXPECT_EQ(back->chunks[0].opt.slots[1], (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(back->chunks[0].applied[0].second.below, 2u);
  EXPECT_TRUE(back->chunks[0].applied[0].second.Contains(4));
  EXPECT_EQ(CheckpointPath("/d", "j/1", 2), "/d/j_1.shard2.ckpt");
}

// A table partition's rows (the ROWS section), read back into blocks of
// rows (row_array.h) with the width the values' count gives.
TEST(Checkpoint, RoundTripsATablesRows) {
  JobSnapshot s = SampleSnapshot();
  ChunkSnapshot& t = s.chunks.emplace_back();
  t.chunk_id = 4;
  t.table = true;
  t.row_ids = {5, 9, 2};
  t.row_values = RowArray(2);
  t.row_slots.emplace_back(2);
  for (uint64_t i = 0; i < t.row_ids.size(); ++i) {
    float* v = t.row_values.Append();
    float* a = t.row_slots[0].Append();
    v[0] = i, v[1] = -1.5f * i, a[0] = 0.1f, a[1] = 10.0f + i;
  }
  absl::StatusOr<JobSnapshot> back = DecodeCheckpoint(EncodeCheckpoint(s));
  ASSERT_TRUE(back.ok()) << back.status();
  const ChunkSnapshot& r = back->chunks.at(1);
  EXPECT_TRUE(r.table);
  EXPECT_EQ(r.row_ids, t.row_ids);
  ASSERT_EQ(r.row_values.dim(), 2u);
  ASSERT_EQ(r.row_values.rows(), 3u);
  ASSERT_EQ(r.row_slots.size(), 1u);
  std::vector<float> values(6), slot(6);
  r.row_values.CopyOut(0, 3, values.data());
  r.row_slots[0].CopyOut(0, 3, slot.data());
  EXPECT_EQ(values, (std::vector<float>{0, 0, 1, -1.5f, 2, -3}));
  EXPECT_EQ(slot, (std::vector<float>{0.1f, 10, 0.1f, 11, 0.1f, 12}));

  // Values that are not a whole number of floats per row do not parse.
  t.row_ids.push_back(7);
  EXPECT_EQ(DecodeCheckpoint(EncodeCheckpoint(s)).status().code(), absl::StatusCode::kDataLoss);
}

TEST(Checkpoint, DetectsCorruption) {
  const std::string data = EncodeCheckpoint(SampleSnapshot());
  for (size_t i : {size_t{0}, size_t{9}, size_t{30}, data.size() / 2, data.size() - 1}) {
    std::string bad = data;
    bad[i] ^= 0x40;
    absl::StatusOr<JobSnapshot> r = DecodeCheckpoint(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << "flipped byte " << i;
  }
  EXPECT_EQ(DecodeCheckpoint(data.substr(0, data.size() - 5)).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeCheckpoint("").status().code(), absl::StatusCode::kDataLoss);
}

// See [legacy checkpoint frame].
TEST(Checkpoint, LoadsTheLegacyFrame) {
  const std::string body = EncodeCheckpoint(SampleSnapshot()).substr(kRecordHeaderSize);
  std::string legacy = "GSCKPT01";
  const uint64_t len = body.size();
  legacy.append(reinterpret_cast<const char*>(&len), 8);
  legacy += body;
  const uint32_t crc = Crc32c(legacy);
  legacy.append(reinterpret_cast<const char*>(&crc), 4);
  absl::StatusOr<JobSnapshot> back = DecodeCheckpoint(legacy);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job_id, "j/1");
  EXPECT_EQ(EncodeCheckpoint(*back), EncodeCheckpoint(SampleSnapshot()));
  legacy[legacy.size() / 2] ^= 0x40;
  EXPECT_EQ(DecodeCheckpoint(legacy).status().code(), absl::StatusCode::kDataLoss);
}

std::string Floats(std::vector<float> v) {
  std::string s(v.size() * 4, 0);
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

struct SyncJob {
  std::unique_ptr<Executor> executor = std::make_unique<Executor>(1);
  std::shared_ptr<Job> job;
  explicit SyncJob(ConsistencyMode mode = ConsistencyMode::kSync, uint32_t s = 0,
                   bool scale_stale = false) {
    JobOptions o;
    o.job_id = "t";
    o.optimizer.type = OptimizerType::kSgd;
    o.optimizer.learning_rate = 1.0f;
    o.consistency.mode = mode;
    o.consistency.staleness = s;
    o.consistency.scale_stale_pushes = scale_stale;
    o.chunks = {ChunkSpec{0, 2}};
    o.membership = MembershipEpoch{1, 0, {10, 11, 12}};
    auto opened = Job::Open(o, Env::Default(), executor.get());
    EXPECT_TRUE(opened.ok()) << opened.status();
    job = opened->job;
    EXPECT_FALSE(*job->Init(0, Floats({0, 0})));
  }
  absl::StatusOr<bool> Push(uint64_t w, uint64_t clock, std::vector<float> g) {
    static std::string payload;  // kept alive across the call
    payload = Floats(g);
    PushArgs p;
    p.worker = w;
    p.chunk_id = 0;
    p.clock = clock;
    p.header.codec = CodecType::kNone;
    p.header.num_elems = static_cast<uint32_t>(g.size());
    p.payload = payload;
    return job->Push(p);
  }
  // A twobit push of `n` elements, every code +1, with `scale`.
  absl::StatusOr<bool> PushAllPlusOne(uint64_t w, uint64_t clock, float scale) {
    static std::string payload;
    payload.assign(1, static_cast<char>(0x05));  // two elements, codes +1 +1
    PushArgs p;
    p.worker = w;
    p.chunk_id = 0;
    p.clock = clock;
    p.header.codec = CodecType::kTwoBit;
    p.header.num_elems = 2;
    p.header.scale = scale;
    p.payload = payload;
    return job->Push(p);
  }
  absl::Status PullStatus(uint64_t w, uint64_t clock) {
    absl::Status status = absl::UnknownError("not answered");
    PullArgs p;
    p.worker = w;
    p.clock = clock;
    job->Pull(p, [&](PullResult r) { status = r.status; });
    return status;
  }
  std::vector<float> Params() {
    std::vector<float> out;
    PullArgs p;
    p.clock = 0;
    job->Pull(p, [&](PullResult r) {
      out.resize(2);
      std::memcpy(out.data(), r.chunks[0].values.data(), 8);
    });
    return out;
  }
};

TEST(SyncJob, AveragesOneRoundAndIgnoresDuplicates) {
  SyncJob t;
  EXPECT_FALSE(*t.Push(10, 0, {3, 0}));
  EXPECT_FALSE(*t.Push(11, 0, {0, 3}));
  EXPECT_TRUE(*t.Push(11, 0, {100, 100}));  // duplicate while the round is open
  EXPECT_EQ(t.Params(), (std::vector<float>{0, 0}));
  EXPECT_FALSE(*t.Push(12, 0, {3, 3}));
  EXPECT_EQ(t.Params(), (std::vector<float>{-2, -2}));  // lr 1, mean (2, 2)
  EXPECT_TRUE(*t.Push(10, 0, {100, 100}));              // duplicate after the apply
  EXPECT_EQ(t.Params(), (std::vector<float>{-2, -2}));
  JobStats s = t.job->Stats(true);
  EXPECT_EQ(s.pushes_duplicate, 2u);
  ASSERT_EQ(s.rounds.size(), 1u);
  EXPECT_EQ(s.rounds[0].contributors.size(), 3u);
}

TEST(SyncJob, RemovingADeadMemberCompletesTheRound) {
  SyncJob t;
  EXPECT_FALSE(*t.Push(10, 0, {2, 0}));
  EXPECT_FALSE(*t.Push(11, 0, {0, 2}));
  bool answered = false;
  PullArgs pull;
  pull.clock = 1;
  t.job->Pull(pull, [&](PullResult r) { answered = true; });
  EXPECT_FALSE(answered);  // parked: version 0 < 1
  ASSERT_TRUE(t.job->UpdateMembership(MembershipEpoch{2, 0, {10, 11}}).ok());
  EXPECT_TRUE(answered);
  EXPECT_EQ(t.Params(), (std::vector<float>{-1, -1}));  // re-normalized by 2
  EXPECT_EQ(t.Push(12, 1, {1, 1}).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Everyone died at clock 2 (shard at version 1: worker 12's round 1 never
// came), then a replacement joins at clock 50: see [unstaffed clocks].
TEST(SyncJob, ClocksWithoutMembersArePassedOverToTheNextJoin) {
  SyncJob t;
  for (uint64_t w : {10, 11, 12}) EXPECT_FALSE(*t.Push(w, 0, {3, 3}));
  EXPECT_FALSE(*t.Push(10, 1, {3, 3}));
  ASSERT_TRUE(t.job->UpdateMembership(MembershipEpoch{2, 1, {}}).ok());
  bool answered = false;
  PullArgs pull;
  pull.worker = 20;
  pull.clock = 50;
  t.job->Pull(pull, [&](PullResult r) {
    answered = true;
    EXPECT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(r.chunks.size(), 1u);
    EXPECT_EQ(r.chunks[0].version, 50u);
  });
  EXPECT_FALSE(answered);  // no epoch with members yet: nothing to skip to
  ASSERT_TRUE(t.job->UpdateMembership(MembershipEpoch{3, 50, {20}}).ok());
  EXPECT_TRUE(answered);
  // Round 1 held worker 10's push from before everyone was removed: with no
  // member left at clock 1 it was complete, and applied alone.
  EXPECT_EQ(t.Params(), (std::vector<float>{-6, -6}));
  EXPECT_FALSE(*t.Push(20, 50, {1, 1}));
  EXPECT_EQ(t.Params(), (std::vector<float>{-7, -7}));
  // Worker 10 was let go at clock 1: a push of its for a later clock is a
  // leaver's that heard late, dropped as a duplicate ([late leave]); a
  // worker never listed is refused.
  auto late = t.Push(10, 2, {1, 1});
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(*late);
  EXPECT_EQ(t.Params(), (std::vector<float>{-7, -7}));
  EXPECT_EQ(t.Push(30, 51, {1, 1}).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A shard restored from a checkpoint at clock 0 while its members finished
// clocks it never saw (their pushes went to its earlier run): see
// [lost rounds]. Worker 10 is at clock 5 and replays its push for 5, worker
// 11 finished 5 too (its push for 5 was lost), worker 12 is at clock 5.
TEST(SyncJob, RoundsEveryMemberFinishedElsewhereAreClosed) {
  SyncJob t;
  t.job->AllowCatchUp();  // as Open does after a restore: see [clock windows]
  ASSERT_TRUE(t.job->AdvanceClock(10, 5).ok());
  ASSERT_TRUE(t.job->AdvanceClock(11, 6).ok());
  // Beyond the open-round window, but 10 says it finished every clock below.
  EXPECT_FALSE(*t.Push(10, 5, {3, 3}));
  EXPECT_EQ(t.Push(11, 9, {1, 1}).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t.job->Stats(false).min_version, 0u);  // 12 may still push round 0
  ASSERT_TRUE(t.job->AdvanceClock(12, 5).ok());
  JobStats s = t.job->Stats(true);
  EXPECT_EQ(s.min_version, 5u);  // rounds 0-4 passed over, round 5 waits for 12
  ASSERT_EQ(s.rounds.size(), 5u);
  for (const RoundInfo& r : s.rounds) EXPECT_TRUE(r.contributors.empty()) << r.clock;
  EXPECT_EQ(t.Params(), (std::vector<float>{0, 0}));
  EXPECT_FALSE(*t.Push(12, 5, {1, 1}));
  EXPECT_EQ(t.Params(), (std::vector<float>{-2, -2}));  // mean of what arrived
  EXPECT_EQ(t.job->Stats(false).min_version, 6u);
  EXPECT_TRUE(*t.Push(11, 5, {100, 100}));  // 11's lost push, late: settled
  EXPECT_EQ(t.Params(), (std::vector<float>{-2, -2}));
}

// The shard applied rounds 0-2 before it heard of worker 20's join at
// clock 1: 20's pushes for 1 and 2 are settled, not refused, and round 3
// waits for it (see [late join]).
TEST(SyncJob, ALateJoinerIsSettledNotFailed) {
  SyncJob t;
  for (uint64_t c = 0; c < 3; ++c) {
    for (uint64_t w : {10, 11, 12}) {
      EXPECT_FALSE(*t.Push(w, c, {3, 3}));
      EXPECT_TRUE(t.job->AdvanceClock(w, c + 1).ok());
    }
  }
  ASSERT_EQ(t.job->Stats(false).min_version, 3u);
  ASSERT_TRUE(t.job->UpdateMembership(MembershipEpoch{2, 1, {10, 11, 12, 20}}).ok());
  EXPECT_TRUE(*t.Push(20, 1, {100, 100}));
  EXPECT_TRUE(*t.Push(20, 2, {100, 100}));
  EXPECT_EQ(t.Params(), (std::vector<float>{-9, -9}));
  for (uint64_t w : {10, 11, 12}) EXPECT_FALSE(*t.Push(w, 3, {4, 4}));
  EXPECT_EQ(t.job->Stats(false).min_version, 3u);  // waits for 20
  EXPECT_FALSE(*t.Push(20, 3, {0, 0}));
  EXPECT_EQ(t.Params(), (std::vector<float>{-12, -12}));  // mean (3, 3) of 4
}

// A shard restarted without a checkpoint of a job whose members are at
// clock 40 (see [re-initialization]): pulls say DATA_LOSS until a worker
// sends its parameters, then the job goes on from there.
TEST(ResumedJob, TakesAWorkersParametersAndGoesOn) {
  Executor executor(1);
  JobOptions o;
  o.job_id = "r";
  o.optimizer.type = OptimizerType::kSgd;
  o.optimizer.learning_rate = 1.0f;
  o.chunks = {ChunkSpec{0, 2}};
  o.membership = MembershipEpoch{3, 30, {10, 11}};
  o.epochs = {MembershipEpoch{1, 0, {10, 11, 12}}, MembershipEpoch{2, 20, {10, 11}},
              o.membership};
  o.resume = true;
  o.resume_clock = 38;
  auto opened = Job::Open(o, Env::Default(), &executor);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Job& job = *opened->job;
  EXPECT_EQ(job.Stats(false).min_version, 38u);
  absl::Status status;
  PullArgs pull;
  pull.worker = 10;
  pull.clock = 40;
  job.Pull(pull, [&](PullResult r) { status = r.status; });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  for (uint64_t w : {10, 11}) EXPECT_TRUE(job.AdvanceClock(w, 40).ok());  // replayed on reconnect
  EXPECT_FALSE(*job.Init(0, Floats({5, 5})));
  EXPECT_TRUE(*job.Init(0, Floats({7, 7})));  // the first one wins
  std::vector<float> got;
  job.Pull(pull, [&](PullResult r) {
    ASSERT_TRUE(r.status.ok()) << r.status;
    got.resize(2);
    std::memcpy(got.data(), r.chunks[0].values.data(), 8);
  });
  EXPECT_EQ(got, (std::vector<float>{5, 5}));  // rounds 38 and 39 passed over as lost
  std::string payload = Floats({2, 4});
  PushArgs p;
  p.chunk_id = 0;
  p.clock = 40;
  p.header.codec = CodecType::kNone;
  p.header.num_elems = 2;
  p.payload = payload;
  for (uint64_t w : {10, 11}) {
    p.worker = w;
    EXPECT_FALSE(*job.Push(p));
  }
  EXPECT_EQ(job.Stats(false).min_version, 41u);
}

// Worker 12 dies at clock 1 while a scale-up planned for clock 5 is known:
// its removal can only take effect at 5, but it departed, so rounds 1-4 do
// not wait for it (see [departed]).
TEST(SyncJob, ADepartedWorkerHoldsUpNoRoundBeforeItsRemoval) {
  SyncJob t;
  for (uint64_t w : {10, 11, 12}) EXPECT_FALSE(*t.Push(w, 0, {3, 3}));
  ASSERT_TRUE(t.job->UpdateMembership(MembershipEpoch{2, 5, {10, 11, 12, 20}}).ok());
  EXPECT_FALSE(*t.Push(10, 1, {2, 2}));
  EXPECT_FALSE(*t.Push(11, 1, {2, 2}));
  EXPECT_EQ(t.job->Stats(false).min_version, 1u);  // waits for 12
  ASSERT_TRUE(t.job->UpdateMembership(MembershipEpoch{3, 5, {10, 11, 20}, {12}}).ok());
  EXPECT_EQ(t.job->Stats(false).min_version, 2u);  // round 1 closed with 10 and 11
  EXPECT_EQ(t.Params(), (std::vector<float>{-5, -5}));
}

TEST(SyncJob, BadChunkLeavesStateUnchanged) {
  SyncJob t;
  EXPECT_EQ(t.Push(10, 0, {1, 2, 3}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(*t.Push(10, 0, {1, 1}));  // the failed push left no trace
  EXPECT_EQ(t.Push(10, 9, {1, 1}).status().code(), absl::StatusCode::kResourceExhausted);
}

// See [clock windows]: a ClockAdvance, pull or push beyond the member's
// window is refused before anything changes.
TEST(ClockWindows, FarFutureClocksAreRefusedAndChangeNothing) {
  for (ConsistencyMode mode :
       {ConsistencyMode::kSync, ConsistencyMode::kBounded, ConsistencyMode::kAsync}) {
    SyncJob t(mode, 2);
    const uint64_t far = uint64_t{1} << 62;
    absl::Status s = t.job->AdvanceClock(10, far);
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "window")) << s;
    EXPECT_EQ(t.job->Stats(false).max_clock, 0u);
    EXPECT_EQ(t.PullStatus(10, far).code(), absl::StatusCode::kOutOfRange);
    EXPECT_TRUE(t.job->AdvanceClock(10, 1).ok());  // the next clock is fine
    const uint64_t window = ClockWindow(t.job->options().consistency, 4);
    EXPECT_TRUE(t.job->AdvanceClock(10, 1 + window).ok());
    EXPECT_EQ(t.job->AdvanceClock(10, 2 + 2 * window).code(), absl::StatusCode::kOutOfRange);
    if (mode == ConsistencyMode::kSync) continue;
    // A far-future push is refused, so a normal one after
    // it is applied, not taken for a duplicate.
    EXPECT_EQ(t.Push(11, far, {1, 1}).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(t.Params(), (std::vector<float>{0, 0}));
    absl::StatusOr<bool> normal = t.Push(11, 0, {3, 3});
    ASSERT_TRUE(normal.ok()) << normal.status();
    EXPECT_FALSE(*normal);
    EXPECT_EQ(t.Params(), (std::vector<float>{-1, -1}));
  }
}

// The wedge of the bug: the only member of a sync job, restored (so allowed
// to catch up), says it finished clock 2^62. The lost clocks are passed in
// one step, not one per loop iteration.
TEST(ClockWindows, ACatchUpOfAnyLengthIsOneStep) {
  SyncJob t;
  ASSERT_TRUE(t.job->UpdateMembership(MembershipEpoch{2, 0, {10}}).ok());
  t.job->AllowCatchUp();
  const uint64_t far = uint64_t{1} << 62;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(t.job->AdvanceClock(10, far).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  const JobStats s = t.job->Stats(true);
  EXPECT_EQ(s.min_version, far);
  EXPECT_LE(s.rounds.size(), 64u);
  EXPECT_EQ(t.Params(), (std::vector<float>{0, 0}));
  // Caught up: the window holds again.
  EXPECT_EQ(t.job->AdvanceClock(10, far + 100).code(), absl::StatusCode::kOutOfRange);
}

// See [finite apply]: FLT_MAX scales with every code +1 pass the per-push
// checks; the push whose apply would overflow is refused, the chunk as it was.
TEST(FiniteApply, OverflowingPushesAreRefusedInEveryMode) {
  for (ConsistencyMode mode :
       {ConsistencyMode::kSync, ConsistencyMode::kBounded, ConsistencyMode::kAsync}) {
    SyncJob t(mode, 100);
    ASSERT_TRUE(t.job->UpdateMembership(MembershipEpoch{2, 0, {10}}).ok());
    const float huge = std::numeric_limits<float>::max();
    absl::Status refused;
    for (uint64_t clock = 0; clock < 30 && refused.ok(); ++clock) {
      const std::vector<float> before = t.Params();
      absl::StatusOr<bool> r = t.PushAllPlusOne(10, clock, huge);
      if (!r.ok()) {
        refused = r.status();
        EXPECT_EQ(t.Params(), before);
      }
      if (mode != ConsistencyMode::kSync) {
        ASSERT_TRUE(t.job->AdvanceClock(10, clock + 1).ok());
      }
    }
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_TRUE(absl::StrContains(refused.message(), "non-finite")) << refused;
    for (float x : t.Params()) EXPECT_TRUE(std::isfinite(x));
  }
}

// Sync with several members: a sum that would overflow refuses the push
// that would make it, and leaves the round as it was.
TEST(FiniteApply, ARoundSumThatWouldOverflowRefusesThePush) {
  SyncJob t;
  const float huge = std::numeric_limits<float>::max();
  EXPECT_FALSE(*t.PushAllPlusOne(10, 0, huge));
  EXPECT_EQ(t.PushAllPlusOne(11, 0, huge).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(*t.PushAllPlusOne(11, 0, 1.0f));  // the refused push left no trace
  EXPECT_FALSE(*t.Push(12, 0, {0, 0}));
  for (float x : t.Params()) EXPECT_TRUE(std::isfinite(x));
  EXPECT_EQ(t.job->Stats(false).min_version, 1u);
}

// See [parked pulls]: a stream's parked pulls end with it.
TEST(ParkedPulls, EndWithTheirStream) {
  SyncJob t;
  int cancelled = 0, other = 0;
  PullArgs p;
  p.worker = 10;
  p.clock = 3;
  p.stream = 7;
  t.job->Pull(p, [&](PullResult r) { cancelled += absl::IsCancelled(r.status); });
  t.job->Pull(p, [&](PullResult r) { cancelled += absl::IsCancelled(r.status); });
  p.stream = 8;
  t.job->Pull(p, [&](PullResult) { ++other; });
  t.job->CancelStreamPulls(7, absl::CancelledError("stream ended"));
  EXPECT_EQ(cancelled, 2);
  EXPECT_EQ(other, 0);  // another stream's pull still waits
  t.job->CancelPulls(absl::CancelledError("end"));
  EXPECT_EQ(other, 1);
}

TEST(SspJob, PullWaitsForTheSlowestWithinTheBound) {
  SyncJob t(ConsistencyMode::kBounded, 2);
  int answered = 0;
  PullArgs pull;
  pull.worker = 10;
  pull.clock = 2;
  t.job->Pull(pull, [&](PullResult) { ++answered; });
  EXPECT_EQ(answered, 1);  // 2 - 0 <= s
  pull.clock = 3;
  t.job->Pull(pull, [&](PullResult) { ++answered; });
  EXPECT_EQ(answered, 1);
  ASSERT_TRUE(t.job->AdvanceClock(10, 3).ok());
  ASSERT_TRUE(t.job->AdvanceClock(11, 1).ok());
  EXPECT_EQ(answered, 1);
  ASSERT_TRUE(t.job->AdvanceClock(12, 1).ok());
  EXPECT_EQ(answered, 2);
  const JobStats s = t.job->Stats(false);
  EXPECT_EQ(s.max_staleness, 2u);
  EXPECT_EQ(s.staleness_histogram[2], 2u);
  EXPECT_EQ(s.staleness_sum, 4u);  // both pulls read 2 clocks ahead of the slowest
  EXPECT_EQ(s.min_clock, 1u);
  EXPECT_EQ(s.max_clock, 3u);
  EXPECT_EQ(s.members, 3u);
  pull.clock = 9;
  pull.deadline = absl::Now() - absl::Seconds(1);
  absl::Status status;
  t.job->Pull(pull, [&](PullResult r) { status = r.status; });
  t.job->ExpirePulls(absl::Now());
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(SspJob, OptionalStalenessScaling) {
  SyncJob t(ConsistencyMode::kAsync, 0, /*scale_stale=*/true);
  PullArgs pull;
  pull.worker = 10;
  t.job->Pull(pull, [](PullResult) {});  // worker 10 reads at update count 0
  for (uint64_t clock : {0, 1}) {
    EXPECT_FALSE(*t.Push(11, clock, {3, 3}));  // weight 1/3 each (fresh reads)
    EXPECT_FALSE(*t.Push(12, clock, {3, 3}));
  }
  // Staleness = updates since the pusher's last read / members (3), each
  // unscaled push moving p by lr * 3 / 3 = 1:
  //   11@0 (0 updates) -1, 12@0 (1) -1, 11@1 (2) -1, 12@1 (3: 1 clock) -0.5
  EXPECT_FALSE(*t.Push(10, 0, {3, 3}));
  const std::vector<float> p = t.Params();  // 10@0 (4 updates: 1 clock) -0.5
  EXPECT_FLOAT_EQ(p[0], -4.0f);
  EXPECT_FLOAT_EQ(p[1], -4.0f);
}

TEST(JobCheckpoint, RestoresThroughEnvAndRefusesCorruptFiles) {
  testing::MemEnv files;  // in memory; writes can be made to fail
  testing::FaultInjectionEnv env(&files);
  Executor executor(1);
  JobOptions o;
  o.job_id = "mem";
  o.optimizer.type = OptimizerType::kAdaGrad;
  o.optimizer.learning_rate = 0.5f;
  o.chunks = {ChunkSpec{3, 2}};
  o.membership = MembershipEpoch{1, 0, {1}};
  o.checkpoint_dir = "/ckpt";
  auto opened = Job::Open(o, &env, &executor);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<Job> job = opened->job;
  ASSERT_FALSE(*job->Init(3, Floats({1, 2})));
  const std::string g = Floats({1, -1});
  PushArgs p;
  p.worker = 1;
  p.chunk_id = 3;
  p.header.num_elems = 2;
  p.payload = g;
  ASSERT_FALSE(*job->Push(p));
  auto info = job->Checkpoint();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->clock, 1u);
  const std::string saved = *files.ReadFile(info->path);

  env.SetFreeBytes(0);  // a full disk: the write reports and keeps the old file
  p.clock = 1;
  ASSERT_FALSE(*job->Push(p));
  EXPECT_EQ(job->Checkpoint().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*files.ReadFile(info->path), saved);
  EXPECT_EQ(files.FileNames(), std::vector<std::string>{info->path});  // no temp file
  env.SetFreeBytes(std::nullopt);

  auto again = Job::Open(o, &env, &executor);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->restored);
  EXPECT_EQ(again->restored_clock, 1u);
  EXPECT_TRUE(*again->job->Push([&] {
    PushArgs q = p;
    q.clock = 0;
    return q;
  }()));  // clock 0 is in the checkpoint: duplicate

  std::string corrupt = saved;
  corrupt[saved.size() / 2] ^= 1;
  files.PutFile(info->path, corrupt);
  EXPECT_EQ(Job::Open(o, &env, &executor).status().code(), absl::StatusCode::kDataLoss);
  o.chunks = {ChunkSpec{3, 5}};
  files.PutFile(info->path, saved);
  EXPECT_EQ(Job::Open(o, &env, &executor).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Returns once every task submitted to `executor` before the call has run
// (its one thread runs them in order).
void Drain(Executor& executor) {
  absl::Notification done;
  executor.Submit([&done] { done.Notify(); });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
}

// A disk that is full: the periodic checkpoints fail, are counted and
// retried at most once a second, not once per push (see [checkpoint
// failures]); the next one that is written clears the error. The second is
// on a fake clock ([env time]): the test decides when it has passed, so a
// slow machine cannot make 200 pushes "take longer than a second".
TEST(JobCheckpoint, PeriodicFailuresAreCountedAndRateLimited) {
  testing::MemEnv files;
  testing::FaultInjectionEnv disk(&files);
  testing::FakeClockEnv env(&disk);
  Executor executor(1);
  JobOptions o;
  o.job_id = "full";
  o.optimizer.type = OptimizerType::kSgd;
  o.chunks = {ChunkSpec{3, 2}};
  o.membership = MembershipEpoch{1, 0, {1}};
  o.checkpoint_dir = "/ckpt";
  o.checkpoint_every = 1;
  auto opened = Job::Open(o, &env, &executor);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<Job> job = opened->job;
  ASSERT_FALSE(*job->Init(3, Floats({1, 2})));
  disk.SetFreeBytes(0);
  const std::string g = Floats({1, -1});
  PushArgs p;
  p.worker = 1;
  p.chunk_id = 3;
  p.header.num_elems = 2;
  p.payload = g;
  uint64_t clock = 0;
  auto push = [&](int n) {
    for (int i = 0; i < n; ++i) {
      p.clock = clock++;
      ASSERT_FALSE(*job->Push(p));
      Drain(executor);  // the checkpoint it scheduled, if any, has run
    }
  };
  push(200);
  JobStats s = job->Stats(false);
  EXPECT_EQ(s.checkpoint_failures, 1u);  // the clock stood still: one try
  EXPECT_NE(s.checkpoint_error.find("RESOURCE_EXHAUSTED"), std::string::npos)
      << s.checkpoint_error;
  env.Advance(absl::Milliseconds(999));
  push(10);
  EXPECT_EQ(job->Stats(false).checkpoint_failures, 1u);  // not yet a second later
  env.Advance(absl::Milliseconds(1));
  push(10);
  EXPECT_EQ(job->Stats(false).checkpoint_failures, 2u);  // one more try, once a second
  disk.SetFreeBytes(std::nullopt);
  ASSERT_TRUE(job->Checkpoint().ok());  // an explicit one is not rate-limited
  EXPECT_EQ(job->Stats(false).checkpoint_failures, 2u);
  env.Advance(absl::Seconds(1));
  push(1);  // a periodic one succeeds again
  EXPECT_EQ(job->Stats(false).checkpoint_error, "");
  EXPECT_EQ(job->Stats(false).checkpoint_failures, 2u);
}

}  // namespace
}  // namespace gradstream::shard
