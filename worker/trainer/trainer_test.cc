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
#include "worker/client/testing/recording_client.h"
#include "worker/data/synthetic.h"

namespace gradstream {
namespace {

using client::testing::RecordingClient;
using runtime::Assignment;

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
    std::vector<std::pair<std::string, uint64_t>> tensors;
    for (const TensorSpec& t : model->params()) tensors.emplace_back(t.name, t.num_elems);
    client.SetTensors(tensors);
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
  runtime::AssignmentFeed feed;
  runtime::ProgressBoard board;
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

}  // namespace
}  // namespace gradstream
