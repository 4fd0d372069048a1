// Bounded staleness (s = 2) and async against a real gs_shard: the server
// holds pulls that would read more than s clocks ahead of the slowest member,
// answers those within the bound at once, and records the staleness it served.
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/shard/shard_testing.h"

namespace gradstream::testing {
namespace {

constexpr uint32_t kElems = 16;
constexpr int kDeadlineExceeded = 4;

class ShardStalenessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto proc = ShardProcess::Start({});
    ASSERT_TRUE(proc.ok()) << proc.status();
    shard_ = std::move(*proc);
  }
  static void TearDownTestSuite() { shard_.reset(); }

  void CreateJob(const std::string& job, pb::ConsistencyMode mode, uint32_t staleness,
                 std::vector<uint64_t> workers) {
    pb::CreateJobRequest req;
    req.set_job_id(job);
    req.mutable_optimizer()->set_type("sgd");
    req.mutable_optimizer()->set_learning_rate(0.1f);
    req.mutable_consistency()->set_mode(mode);
    req.mutable_consistency()->set_staleness(staleness);
    req.add_chunks()->set_chunk_id(0);
    req.mutable_chunks(0)->set_num_elems(kElems);
    req.mutable_membership()->set_epoch(1);
    for (uint64_t w : workers) req.mutable_membership()->add_worker_ids(w);
    pb::CreateJobResponse resp;
    auto stub = shard_->Stub();
    ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, req, &resp).ok());
  }

  pb::StatsResponse Stats(const std::string& job) {
    pb::StatsRequest req;
    req.set_job_id(job);
    pb::StatsResponse resp;
    auto stub = shard_->Stub();
    EXPECT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::GetStats, req, &resp).ok());
    return resp;
  }

  // Pull at `clock`, push a gradient for it, advance to clock + 1.
  static void Step(SessionClient& s, uint64_t clock, uint64_t* seq) {
    auto pulled = s.Pull(++*seq, clock, {}, /*timeout_ms=*/20000);
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    ASSERT_EQ(pulled->back().code(), 0) << pulled->back().message();
    auto ack = s.Push(++*seq, 0, clock, RawChunk(std::vector<float>(kElems, 0.5f)));
    ASSERT_TRUE(ack.ok()) << ack.status();
    ASSERT_EQ(ack->code(), 0) << ack->message();
    ASSERT_TRUE(s.Clock(clock + 1));
  }

  static std::unique_ptr<ShardProcess> shard_;
};
std::unique_ptr<ShardProcess> ShardStalenessTest::shard_;

TEST_F(ShardStalenessTest, BoundedStalenessHoldsOnlyPullsBeyondTheBound) {
  CreateJob("ssp", pb::BOUNDED, 2, {1, 2, 3});
  SessionClient w1(shard_->Connect()), w2(shard_->Connect()), slow(shard_->Connect());
  ASSERT_TRUE(w1.Hello("ssp", 1).ok());
  ASSERT_TRUE(w2.Hello("ssp", 2).ok());
  ASSERT_TRUE(slow.Hello("ssp", 3).ok());
  ASSERT_TRUE(w1.Init(100, 0, std::vector<float>(kElems, 1.0f))->code() == 0);

  // The fast workers run clocks 0..2 while the slow one stays at clock 0:
  // every pull is within the bound and is answered without it.
  uint64_t seq1 = 0, seq2 = 1000, seq3 = 2000;
  for (uint64_t c = 0; c <= 2; ++c) {
    Step(w1, c, &seq1);
    Step(w2, c, &seq2);
  }
  // Clock 3 would read 3 ahead of the slowest: held until its deadline.
  auto held = w1.Pull(++seq1, 3, {}, /*timeout_ms=*/300);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ(held->front().code(), kDeadlineExceeded) << held->front().message();

  // Parked pulls are answered as soon as the slowest member catches up.
  const uint64_t r1 = ++seq1, r2 = ++seq2;
  ASSERT_TRUE(w1.SendPull(r1, 3, {}, 20000));
  ASSERT_TRUE(w2.SendPull(r2, 3, {}, 20000));
  Step(slow, 0, &seq3);
  for (auto [sess, id] : {std::pair{&w1, r1}, std::pair{&w2, r2}}) {
    auto got = sess->AwaitPull(id);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->back().code(), 0) << got->back().message();
    EXPECT_GE(got->back().min_clock(), 1u);
    // Applied on arrival: 7 pushes so far, each one update.
    EXPECT_EQ(got->back().version(), 7u);
  }

  const pb::StatsResponse st = Stats("ssp");
  EXPECT_LE(st.max_staleness(), 2u);
  EXPECT_EQ(st.max_staleness(), 2u);  // the bound was reached, not exceeded
  uint64_t total = 0;
  for (int i = 0; i < st.staleness_histogram_size(); ++i) {
    total += st.staleness_histogram(i);
    if (i > 2) {
      EXPECT_EQ(st.staleness_histogram(i), 0u) << "staleness " << i;
    }
  }
  EXPECT_EQ(total, st.pulls_served());
  EXPECT_EQ(st.pushes_applied(), 7u);
}

// Three free-running workers, one of them slow (it does 40x the compute per
// clock): the server never serves a pull more than 2 clocks ahead.
TEST_F(ShardStalenessTest, FreeRunningWorkersStayWithinTheBound) {
  CreateJob("ssp-run", pb::BOUNDED, 2, {1, 2, 3});
  constexpr uint64_t kClocks = 12;
  absl::Mutex mu;
  std::vector<std::string> errors;
  {
    SessionClient init(shard_->Connect());
    ASSERT_TRUE(init.Hello("ssp-run", 1).ok());
    ASSERT_EQ(init.Init(1, 0, std::vector<float>(kElems, 1.0f))->code(), 0);
    ASSERT_TRUE(init.Finish().ok());
  }
  std::vector<std::thread> threads;
  for (uint64_t w = 1; w <= 3; ++w) {
    threads.emplace_back([&, w] {
      SessionClient s(shard_->Connect());
      if (!s.Hello("ssp-run", w).ok()) return;
      uint64_t seq = 0;
      volatile double sink = 0;
      for (uint64_t c = 0; c < kClocks; ++c) {
        auto pulled = s.Pull(++seq, c, {}, 20000);
        if (!pulled.ok() || pulled->back().code() != 0) {
          absl::MutexLock l(&mu);
          errors.push_back(absl::StrCat("worker ", w, " pull ", c, " failed"));
          return;
        }
        for (int i = 0; i < (w == 3 ? 400000 : 10000); ++i) sink = sink + std::sin(i * 1e-3);
        auto ack = s.Push(++seq, 0, c, RawChunk(std::vector<float>(kElems, 0.1f)));
        if (!ack.ok() || ack->code() != 0) {
          absl::MutexLock l(&mu);
          errors.push_back(absl::StrCat("worker ", w, " push ", c, " failed"));
          return;
        }
        s.Clock(c + 1);
      }
      s.Finish();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ADD_FAILURE() << e;
  const pb::StatsResponse st = Stats("ssp-run");
  EXPECT_LE(st.max_staleness(), 2u);
  EXPECT_EQ(st.pushes_applied(), 3 * kClocks);
  EXPECT_EQ(st.min_clock(), kClocks);
}

TEST_F(ShardStalenessTest, AsyncNeverBlocks) {
  CreateJob("async", pb::ASYNC, 0, {1, 2});
  SessionClient w1(shard_->Connect()), w2(shard_->Connect());
  ASSERT_TRUE(w1.Hello("async", 1).ok());
  ASSERT_TRUE(w2.Hello("async", 2).ok());
  ASSERT_EQ(w1.Init(1, 0, std::vector<float>(kElems, 1.0f))->code(), 0);
  uint64_t seq = 10;
  for (uint64_t c = 0; c < 50; ++c) Step(w1, c, &seq);
  // Worker 2 never advanced: a pull 50 clocks ahead is still answered.
  auto got = w1.Pull(++seq, 50, {}, 20000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->back().code(), 0);
  EXPECT_EQ(got->back().min_clock(), 0u);
  EXPECT_EQ(got->back().version(), 50u);
  const pb::StatsResponse st = Stats("async");
  EXPECT_EQ(st.max_staleness(), 50u);
  EXPECT_GT(st.staleness_histogram(st.staleness_histogram_size() - 1), 0u);  // overflow bucket
}

}  // namespace
}  // namespace gradstream::testing
