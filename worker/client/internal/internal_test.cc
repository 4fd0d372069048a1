// Unit tests of the client's building blocks that need no network.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "worker/client/internal/pending.h"
#include "worker/client/internal/stream_lifecycle.h"

namespace gradstream::client::internal {
namespace {

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

TEST(Completion, FirstErrorWinsAndWaitsHaveDeadlines) {
  Completion c(3);
  EXPECT_EQ(c.Wait(absl::Milliseconds(10)).code(), absl::StatusCode::kDeadlineExceeded);
  c.Done(absl::OkStatus());
  c.Done(absl::NotFoundError("first"));
  c.Done(absl::InternalError("second"));
  absl::Status s = c.Wait(absl::ZeroDuration());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "first");
}

TEST(Completion, ErrorCompletesBeforeTheCount) {
  Completion c(5);
  c.Done(absl::UnavailableError("down"));
  EXPECT_TRUE(c.done());
  EXPECT_EQ(c.Wait(absl::ZeroDuration()).code(), absl::StatusCode::kUnavailable);
}

// Two chunks (ids 0, 1) of 2 elements into one buffer, both on shard 0.
struct PullFixture {
  std::vector<float> out = std::vector<float>(4, -1.0f);
  std::shared_ptr<PullState> state;
  PullFixture() {
    std::vector<PullTarget> targets = {{out.data(), 2}, {out.data() + 2, 2}};
    state = std::make_shared<PullState>(std::move(targets),
                                        std::vector<std::vector<uint64_t>>{{0, 1}});
  }
};

// One PullAnswer of fp32 chunks (id, values) from shard 0.
void Answer(PullState& state, const std::vector<std::pair<uint64_t, std::string>>& chunks,
            bool last) {
  std::vector<AnsweredChunk> answer;
  for (const auto& [id, bytes] : chunks) answer.push_back(AnsweredChunk{id, bytes, nullptr});
  state.OnAnswer(0, answer, last);
}

TEST(PullState, CopiesChunksAndCompletesOnLast) {
  PullFixture f;
  Answer(*f.state, {{1, Bytes({3, 4})}}, false);
  EXPECT_FALSE(f.state->completion().done());
  EXPECT_EQ(f.state->chunks_done(), 1u);
  Answer(*f.state, {{0, Bytes({1, 2})}}, true);
  EXPECT_TRUE(f.state->completion().Wait(absl::ZeroDuration()).ok());
  EXPECT_EQ(f.out, (std::vector<float>{1, 2, 3, 4}));
}

TEST(PullState, OneAnswerCarriesSeveralChunks) {
  PullFixture f;
  Answer(*f.state, {{1, Bytes({3, 4})}, {0, Bytes({1, 2})}}, true);
  EXPECT_TRUE(f.state->completion().Wait(absl::ZeroDuration()).ok());
  EXPECT_EQ(f.state->chunks_done(), 2u);
  EXPECT_EQ(f.out, (std::vector<float>{1, 2, 3, 4}));
}

TEST(PullState, MissingChunkAtLastIsInternal) {
  PullFixture f;
  Answer(*f.state, {{0, Bytes({1, 2})}}, true);
  EXPECT_EQ(f.state->completion().Wait(absl::ZeroDuration()).code(), absl::StatusCode::kInternal);
}

TEST(PullState, AnAnswerWithABadChunkWritesNothing) {
  PullFixture f;  // the second chunk is one float too long
  Answer(*f.state, {{0, Bytes({1, 2})}, {1, Bytes({3, 4, 5})}}, false);
  EXPECT_EQ(f.state->completion().Wait(absl::ZeroDuration()).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(f.out, std::vector<float>(4, -1.0f));
  PullFixture g;  // chunk 7 was not asked for
  Answer(*g.state, {{0, Bytes({1, 2})}, {7, Bytes({1, 2})}}, false);
  EXPECT_EQ(g.state->completion().Wait(absl::ZeroDuration()).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(g.out, std::vector<float>(4, -1.0f));
}

TEST(PullState, NothingIsWrittenAfterAbandon) {
  PullFixture f;
  f.state->Abandon();
  Answer(*f.state, {{0, Bytes({1, 2})}}, true);
  EXPECT_EQ(f.out[0], -1.0f);
  EXPECT_TRUE(f.state->abandoned(0));
}

TEST(PullState, ShardFailureCarriesItsStatus) {
  PullFixture f;
  f.state->Fail(0, absl::DeadlineExceededError("parked too long"));
  EXPECT_EQ(f.state->completion().Wait(absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(StreamLifecycle, LeaveThenLeaveWrittenThenWriterExitCloses) {
  StreamPhase p = StreamPhase::kOpen;
  p = NextStreamPhase(p, StreamEvent::kLeave);
  EXPECT_EQ(p, StreamPhase::kLeaving);
  EXPECT_EQ(NextStreamPhase(p, StreamEvent::kLeave), StreamPhase::kLeaving);
  p = NextStreamPhase(p, StreamEvent::kLeaveWritten);
  EXPECT_EQ(p, StreamPhase::kLeft);
  p = NextStreamPhase(p, StreamEvent::kWriterExited);
  EXPECT_EQ(p, StreamPhase::kClosed);
}

TEST(StreamLifecycle, StopWinsOverLeavingAndFailureOverEverything) {
  for (StreamPhase p : {StreamPhase::kOpen, StreamPhase::kLeaving, StreamPhase::kLeft,
                        StreamPhase::kClosed}) {
    EXPECT_EQ(NextStreamPhase(p, StreamEvent::kStop), StreamPhase::kStopping)
        << StreamPhaseName(p);
    EXPECT_EQ(NextStreamPhase(p, StreamEvent::kFail), StreamPhase::kFailed);
  }
  const StreamPhase stopping = StreamPhase::kStopping;
  EXPECT_EQ(NextStreamPhase(stopping, StreamEvent::kLeave), stopping);
  EXPECT_EQ(NextStreamPhase(stopping, StreamEvent::kLeaveWritten), stopping);
  EXPECT_EQ(NextStreamPhase(stopping, StreamEvent::kWriterExited), stopping);
  EXPECT_EQ(NextStreamPhase(stopping, StreamEvent::kFail), StreamPhase::kFailed);
  const StreamPhase failed = StreamPhase::kFailed;
  for (StreamEvent e : {StreamEvent::kLeave, StreamEvent::kStop, StreamEvent::kWriterExited,
                        StreamEvent::kFail}) {
    EXPECT_EQ(NextStreamPhase(failed, e), failed);
  }
}

TEST(StreamLifecycleDeathTest, TransitionsTheStreamCannotMakeAreProgrammerErrors) {
  EXPECT_DEATH(NextStreamPhase(StreamPhase::kOpen, StreamEvent::kLeaveWritten), "Leave written");
  EXPECT_DEATH(NextStreamPhase(StreamPhase::kOpen, StreamEvent::kWriterExited), "writer exited");
  EXPECT_DEATH(NextStreamPhase(StreamPhase::kLeaving, StreamEvent::kWriterExited),
               "writer exited");
}

TEST(ConnectionLifecycle, NetworkEventsInAnyOrderNeverCrash) {
  ConnectionPhase c = ConnectionPhase::kAwaitingHelloAck;
  c = NextConnectionPhase(c, ConnectionEvent::kHelloAcked);
  EXPECT_EQ(c, ConnectionPhase::kReady);
  EXPECT_EQ(NextConnectionPhase(c, ConnectionEvent::kHelloAcked), ConnectionPhase::kReady);
  c = NextConnectionPhase(c, ConnectionEvent::kBroken);
  EXPECT_EQ(c, ConnectionPhase::kBroken);
  // A HelloAck after a mismatching one broke the connection does not revive it.
  EXPECT_EQ(NextConnectionPhase(c, ConnectionEvent::kHelloAcked), ConnectionPhase::kBroken);
  EXPECT_EQ(NextConnectionPhase(ConnectionPhase::kAwaitingHelloAck, ConnectionEvent::kBroken),
            ConnectionPhase::kBroken);
}

}  // namespace
}  // namespace gradstream::client::internal
