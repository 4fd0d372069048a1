// PullWaitList: park, satisfy, expire, close; each pull answered once.
#include "server/shard/pull_waitlist.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gradstream::shard {
namespace {

// Records every answer, by request id.
struct Answers {
  std::vector<PullResult> results;
  PendingPull Pull(uint64_t id, uint64_t clock, absl::Time deadline = absl::InfiniteFuture()) {
    PendingPull p;
    p.args.request_id = id;
    p.args.clock = clock;
    p.args.deadline = deadline;
    p.done = [this](PullResult r) { results.push_back(std::move(r)); };
    return p;
  }
};

TEST(PullWaitList, AReadyPullComesBackAndAnUnreadyOneParks) {
  PullWaitList list;
  Answers a;
  uint64_t version = 3;
  auto ready = [&](const PullArgs& p) { return p.clock <= version; };
  std::optional<PendingPull> now = list.ParkUnlessReady(a.Pull(1, 3), ready);
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->args.request_id, 1u);
  EXPECT_FALSE(list.ParkUnlessReady(a.Pull(2, 4), ready).has_value());
  EXPECT_EQ(list.size(), 1u);
  EXPECT_TRUE(a.results.empty());  // parked, not answered
}

TEST(PullWaitList, TakeReadyUnparksWhatBecameReadyInArrivalOrder) {
  PullWaitList list;
  Answers a;
  uint64_t version = 0;
  auto ready = [&](const PullArgs& p) { return p.clock <= version; };
  for (uint64_t id = 1; id <= 4; ++id) {
    EXPECT_FALSE(list.ParkUnlessReady(a.Pull(id, id % 2 == 0 ? 5 : 9), ready).has_value());
  }
  EXPECT_TRUE(list.TakeReady(ready).empty());
  version = 5;
  std::vector<PendingPull> now = list.TakeReady(ready);
  ASSERT_EQ(now.size(), 2u);
  EXPECT_EQ(now[0].args.request_id, 2u);
  EXPECT_EQ(now[1].args.request_id, 4u);
  EXPECT_EQ(list.size(), 2u);
  EXPECT_TRUE(a.results.empty());  // the caller answers what it took
}

// Expire also says when the next parked pull is due: the shard's sweeper
// sleeps until then.
TEST(PullWaitList, ExpireFailsOnlyPullsPastTheirDeadlineAndNamesTheNextOne) {
  PullWaitList list;
  Answers a;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  auto never = [](const PullArgs&) { return false; };
  EXPECT_EQ(list.Expire(t0, [](const PullArgs&) { return absl::DeadlineExceededError(""); }),
            absl::InfiniteFuture());
  EXPECT_FALSE(list.ParkUnlessReady(a.Pull(1, 7, t0), never).has_value());
  EXPECT_FALSE(list.ParkUnlessReady(a.Pull(2, 7, t0 + absl::Seconds(3)), never).has_value());
  EXPECT_FALSE(list.ParkUnlessReady(a.Pull(3, 7, t0 + absl::Seconds(1)), never).has_value());
  const absl::Time next = list.Expire(t0, [](const PullArgs& p) {
    return absl::DeadlineExceededError(absl::StrCat("pull ", p.request_id));
  });
  EXPECT_EQ(next, t0 + absl::Seconds(1));
  ASSERT_EQ(a.results.size(), 1u);
  EXPECT_EQ(a.results[0].request_id, 1u);
  EXPECT_EQ(a.results[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(a.results[0].status.message(), "pull 1");
  EXPECT_TRUE(a.results[0].chunks.empty());
  EXPECT_EQ(list.size(), 2u);
}

TEST(PullWaitList, CloseFailsEveryPullAndEveryLaterOneThatWouldPark) {
  PullWaitList list;
  Answers a;
  auto never = [](const PullArgs&) { return false; };
  auto always = [](const PullArgs&) { return true; };
  EXPECT_FALSE(list.ParkUnlessReady(a.Pull(1, 1), never).has_value());
  EXPECT_FALSE(list.ParkUnlessReady(a.Pull(2, 1), never).has_value());
  list.Close(absl::AbortedError("job dropped"));
  ASSERT_EQ(a.results.size(), 2u);
  for (const PullResult& r : a.results) EXPECT_EQ(r.status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(list.size(), 0u);

  EXPECT_FALSE(list.ParkUnlessReady(a.Pull(3, 1), never).has_value());
  ASSERT_EQ(a.results.size(), 3u);
  EXPECT_EQ(a.results[2].request_id, 3u);
  EXPECT_EQ(a.results[2].status.message(), "job dropped");
  // A pull that is ready is still answered by its caller.
  EXPECT_TRUE(list.ParkUnlessReady(a.Pull(4, 1), always).has_value());

  list.Close(absl::UnavailableError("later"));  // the first status stays
  EXPECT_FALSE(list.ParkUnlessReady(a.Pull(5, 1), never).has_value());
  EXPECT_EQ(a.results.back().status.code(), absl::StatusCode::kAborted);
}

TEST(PullWaitList, CloseWithOkCancels) {
  PullWaitList list;
  Answers a;
  EXPECT_FALSE(
      list.ParkUnlessReady(a.Pull(1, 1), [](const PullArgs&) { return false; }).has_value());
  list.Close(absl::OkStatus());
  ASSERT_EQ(a.results.size(), 1u);
  EXPECT_EQ(a.results[0].status.code(), absl::StatusCode::kCancelled);
}

TEST(PullWaitList, FailAnswersWithTheStatusAndNoChunks) {
  Answers a;
  PendingPull p = a.Pull(9, 2);
  PullWaitList::Fail(p.args, p.done, absl::NotFoundError("no chunk"));
  ASSERT_EQ(a.results.size(), 1u);
  EXPECT_EQ(a.results[0].request_id, 9u);
  EXPECT_EQ(a.results[0].status.code(), absl::StatusCode::kNotFound);
}

TEST(PullWaitList, CallbacksRunWithoutTheLockHeld) {
  // A callback that calls back into the list (as a stream answering a pull
  // may) must not deadlock.
  PullWaitList list;
  size_t seen = 99;
  PendingPull p;
  p.args.deadline = absl::UnixEpoch();
  p.done = [&](PullResult) { seen = list.size(); };
  EXPECT_FALSE(
      list.ParkUnlessReady(std::move(p), [](const PullArgs&) { return false; }).has_value());
  list.Expire(absl::Now(), [](const PullArgs&) { return absl::DeadlineExceededError("late"); });
  EXPECT_EQ(seen, 0u);
}

TEST(PullWaitList, CancelStreamFailsOnlyThatStreamsPulls) {
  PullWaitList list;
  std::vector<uint64_t> failed;
  for (uint64_t stream : {1, 2, 1}) {
    PendingPull p;
    p.args.stream = stream;
    p.done = [&failed, stream](PullResult r) {
      EXPECT_EQ(r.status.code(), absl::StatusCode::kCancelled);
      failed.push_back(stream);
    };
    EXPECT_FALSE(
        list.ParkUnlessReady(std::move(p), [](const PullArgs&) { return false; }).has_value());
  }
  list.CancelStream(1, absl::CancelledError("stream ended"));
  EXPECT_EQ(failed, (std::vector<uint64_t>{1, 1}));
  EXPECT_EQ(list.size(), 1u);
  // The list stays open: a later pull of another stream still parks.
  PendingPull p;
  p.args.stream = 3;
  p.done = [](PullResult) {};
  EXPECT_FALSE(
      list.ParkUnlessReady(std::move(p), [](const PullArgs&) { return false; }).has_value());
  EXPECT_EQ(list.size(), 2u);
  list.Close(absl::OkStatus());
}

}  // namespace
}  // namespace gradstream::shard
