// The order of the trainer's client calls, against a recording PsClient: the
// next clock's pull goes out right after a step's pushes (see [overlapped
// pull] in worker/client/ps_client.h) unless the parameters are read before
// it is waited on, and a failed early pull is handled as any pull is.
#include "worker/trainer/trainer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "worker/client/internal/pending.h"
#include "worker/data/synthetic.h"

namespace gradstream {
namespace {

// Answers every call at once and records it as "push C", "pull C",
// "clock C", "init" or "leave". Pulls listed in `fail_pulls` (by clock, each
// once) end with DATA_LOSS.
class RecordingClient final : public client::PsClient {
 public:
  client::PushHandle Push(uint32_t tensor, absl::Span<const float> grad,
                          uint64_t clock) override {
    Record(absl::StrCat("push ", clock));
    return client::PushHandle();
  }
  client::PushHandle PushEncoded(uint32_t, absl::Span<const client::EncodedChunkView>,
                                 uint64_t) override {
    ADD_FAILURE() << "PushEncoded is the device path's";
    return client::PushHandle();
  }
  client::PullHandle Pull(uint64_t clock, std::vector<absl::Span<float>> out) override {
    Record(absl::StrCat("pull ", clock));
    absl::MutexLock lock(&mu_);
    for (auto it = fail_pulls_.begin(); it != fail_pulls_.end(); ++it) {
      if (*it != clock) continue;
      fail_pulls_.erase(it);
      auto state = std::make_shared<client::internal::PullState>(
          std::vector<client::internal::PullTarget>(1), std::vector<std::vector<uint64_t>>{{0}});
      state->Fail(0, absl::DataLossError("shard lost its parameters"));
      return MakePullHandle(std::move(state));
    }
    // Asks no shard: complete at once, as a real pull's handle once answered.
    return MakePullHandle(std::make_shared<client::internal::PullState>(
        std::vector<client::internal::PullTarget>(), std::vector<std::vector<uint64_t>>()));
  }
  absl::Status InitParams(absl::Span<const absl::Span<const float>>, absl::Duration) override {
    Record("init");
    return absl::OkStatus();
  }
  void Flush() override {}
  absl::Status AdvanceClock(uint64_t clock) override {
    Record(absl::StrCat("clock ", clock));
    return absl::OkStatus();
  }
  absl::Status Leave(absl::Duration) override {
    Record("leave");
    return absl::OkStatus();
  }
  client::ClientStats stats() const override { return {}; }
  double ResidualNorm() const override { return 0; }
  const ShardMap& shard_map() const override { return map_; }

  // The model's tensors, as the shard map would list them (StepLoop checks
  // tensor indices against it).
  void SetTensors(const std::vector<TensorSpec>& params) {
    for (size_t i = 0; i < params.size(); ++i) {
      TensorInfo t;
      t.name = params[i].name;
      t.num_elems = params[i].num_elems;
      t.index = static_cast<uint32_t>(i);
      map_.tensors.push_back(t);
    }
  }
  void FailPull(uint64_t clock) {
    absl::MutexLock lock(&mu_);
    fail_pulls_.push_back(clock);
  }
  std::vector<std::string> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }

 private:
  void Record(std::string event) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }

  ShardMap map_;
  mutable absl::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> fail_pulls_ ABSL_GUARDED_BY(mu_);
};

// One worker (rank 0 of 1) training the default MLP on synthetic clusters.
struct Fixture {
  explicit Fixture(uint64_t steps, uint64_t eval_every) {
    SyntheticConfig sc;
    sc.num_train = 256;
    sc.num_test = 64;
    absl::StatusOr<TrainTest> data = GenerateSynthetic(sc);
    CHECK(data.ok()) << data.status();
    setup.data = *std::move(data);
    setup.steps = steps;
    setup.eval_every = eval_every;
    absl::StatusOr<std::unique_ptr<Model>> m = CreateModel(setup.model, Device::kCpu);
    CHECK(m.ok()) << m.status();
    model = *std::move(m);
    client.SetTensors(model->params());
    feed.Set(Assignment{.job_id = "job", .job_active = true, .rank = 0, .world_size = 1});
  }

  absl::StatusOr<TrainOutcome> Run() {
    Trainer trainer(&setup, model.get(), &client, &feed, &board, TrainerOptions{});
    return trainer.Run(0);
  }

  // Index of the first event equal to `e` at or after `from`; events.size()
  // when there is none.
  size_t Find(const std::string& e, size_t from = 0) const {
    const std::vector<std::string> ev = client.events();
    for (size_t i = from; i < ev.size(); ++i) {
      if (ev[i] == e) return i;
    }
    return ev.size();
  }
  size_t Count(const std::string& e) const {
    size_t n = 0;
    for (const std::string& x : client.events()) n += x == e;
    return n;
  }
  // Index of the last event equal to `e`.
  size_t FindLast(const std::string& e) const {
    const std::vector<std::string> ev = client.events();
    for (size_t i = ev.size(); i > 0; --i) {
      if (ev[i - 1] == e) return i - 1;
    }
    return ev.size();
  }

  TrainSetup setup;
  std::unique_ptr<Model> model;
  RecordingClient client;
  AssignmentFeed feed;
  ProgressBoard board;
};

TEST(Trainer, PullsTheNextClockRightAfterItsPushes) {
  Fixture f(/*steps=*/4, /*eval_every=*/0);
  absl::StatusOr<TrainOutcome> outcome = f.Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, TrainOutcome::kDone);
  const size_t tensors = static_cast<size_t>(f.model->num_tensors());
  for (uint64_t c = 0; c < 4; ++c) {
    EXPECT_EQ(f.Count(absl::StrCat("push ", c)), tensors) << "clock " << c;
    // Each clock pulled once, the final pull (clock 4, no slack) included.
    EXPECT_EQ(f.Count(absl::StrCat("pull ", c + 1)), 1u) << "clock " << c + 1;
  }
  for (uint64_t c = 0; c + 1 < 4; ++c) {
    const size_t pull = f.Find(absl::StrCat("pull ", c + 1));
    EXPECT_GT(pull, f.FindLast(absl::StrCat("push ", c))) << "clock " << c;
    EXPECT_LT(pull, f.Find(absl::StrCat("clock ", c + 1))) << "clock " << c;
  }
  // After the last step: no early pull; rank 0's final pull comes after the
  // last clock, then Leave.
  EXPECT_GT(f.Find("pull 4"), f.Find("clock 4"));
  EXPECT_EQ(f.client.events().back(), "leave");
}

TEST(Trainer, NoEarlyPullWhenAnEvaluationReadsTheParameters) {
  Fixture f(/*steps=*/5, /*eval_every=*/2);  // rank 0 evaluates after clocks 1 and 3
  absl::StatusOr<TrainOutcome> outcome = f.Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  for (uint64_t c : {2, 4}) {
    EXPECT_EQ(f.Count(absl::StrCat("pull ", c)), 1u);
    EXPECT_GT(f.Find(absl::StrCat("pull ", c)), f.Find(absl::StrCat("clock ", c))) << c;
  }
  for (uint64_t c : {1, 3}) {
    EXPECT_LT(f.Find(absl::StrCat("pull ", c)), f.Find(absl::StrCat("clock ", c))) << c;
  }
}

TEST(Trainer, NoEarlyPullOfAClockItLeavesBefore) {
  Fixture f(/*steps=*/5, /*eval_every=*/0);
  f.feed.Set(Assignment{.job_id = "job", .job_active = true, .rank = 0, .world_size = 1,
                        .leave = true, .leave_clock = 2});
  absl::StatusOr<TrainOutcome> outcome = f.Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, TrainOutcome::kLeft);
  EXPECT_LT(f.Find("pull 1"), f.Find("clock 1"));
  EXPECT_EQ(f.Count("pull 2"), 0u);
  EXPECT_EQ(f.client.events().back(), "leave");
}

// Not only rank 0: every member pulls the final parameters and reports
// their accuracy, so the job's accuracy survives rank 0 dying after its last
// clock (faults_chaos_test hit that).
TEST(Trainer, EveryMemberEvaluatesTheFinalParameters) {
  Fixture f(/*steps=*/3, /*eval_every=*/0);
  f.feed.Set(Assignment{.job_id = "job", .job_active = true, .rank = 1, .world_size = 2});
  absl::StatusOr<TrainOutcome> outcome = f.Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, TrainOutcome::kDone);
  EXPECT_EQ(f.Count("pull 3"), 1u);
  EXPECT_GT(f.Find("pull 3"), f.Find("clock 3"));
  EXPECT_EQ(f.board.Get().accuracy_clock, 3u);
}

TEST(Trainer, AFailedEarlyPullReinitializesAndPullsAgain) {
  Fixture f(/*steps=*/3, /*eval_every=*/0);
  f.client.FailPull(2);
  absl::StatusOr<TrainOutcome> outcome = f.Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, TrainOutcome::kDone);
  // The early pull of clock 2 lost its data: the parameters go out again
  // (a second init) and clock 2 is asked for once more, after the clock.
  const size_t first = f.Find("pull 2");
  EXPECT_LT(first, f.Find("clock 2"));
  EXPECT_EQ(f.Count("init"), 2u);
  const size_t again = f.Find("pull 2", first + 1);
  EXPECT_GT(again, f.Find("init", 1));
  EXPECT_GT(again, f.Find("clock 2"));
  EXPECT_LT(again, f.Find("push 2"));
}

// See [rejoin] in trainer.h: the assignments a worker that left job "j" at
// clock 300 sees while the coordinator scales it back in at clock 900.
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

}  // namespace
}  // namespace gradstream
