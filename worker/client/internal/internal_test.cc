// Unit tests of the client's building blocks that need no network.
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/codec/published.h"
#include "gtest/gtest.h"
#include "worker/client/internal/pending.h"
#include "worker/client/internal/published_copies.h"
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

// [deferred answers]: three chunks on shard 0 asked in two requests. Two
// answers are kept while the pull defers; once it stops, an answer that
// arrives is written at once, ahead of the kept ones, the kept ones run
// first chunks first, whatever order they came in, and a waiter runs those
// it waits for itself.
TEST(PullState, StoppedDeferringWritesNewAnswersAtOnceAndKeptOnesFirstChunksFirst) {
  std::vector<float> out(3, -1.0f);
  std::vector<PullTarget> targets = {{&out[0], 1, 0}, {&out[1], 1, 1}, {&out[2], 1, 2}};
  auto state = std::make_shared<PullState>(std::move(targets),
                                           std::vector<std::vector<uint64_t>>{{0, 1, 2}},
                                           nullptr, /*deferred=*/true);
  state->SplitPart(0, 2);
  std::vector<uint64_t> ran;
  auto kept = [&](uint64_t id, float v, bool last) {
    const std::string bytes = Bytes({v});
    return state->Defer(0, id, [&ran, id, bytes, last](PullState& p) {
      ran.push_back(id);
      p.OnAnswer(0, {AnsweredChunk{id, bytes, nullptr}}, last);
    });
  };
  ASSERT_TRUE(kept(2, 3.0f, true));   // the second request, whole
  ASSERT_TRUE(kept(1, 2.0f, false));  // the first request's first answer
  EXPECT_EQ(out, std::vector<float>(3, -1.0f));
  std::function<void()> run = state->StopDeferring();
  EXPECT_FALSE(state->deferring());
  EXPECT_FALSE(state->Defer(0, 0, [](PullState&) {}));
  Answer(*state, {{0, Bytes({1.0f})}}, true);  // the first request's last answer
  EXPECT_EQ(out, (std::vector<float>{1.0f, -1.0f, -1.0f}));
  const uint32_t first[] = {0}, second[] = {1};
  EXPECT_TRUE(state->WaitTensors(first, absl::ZeroDuration()).ok());
  EXPECT_TRUE(ran.empty());
  EXPECT_FALSE(state->completion().done());  // every last is in, not every chunk
  EXPECT_TRUE(state->WaitTensors(second, absl::ZeroDuration()).ok());  // ran it
  EXPECT_EQ(ran, (std::vector<uint64_t>{1}));
  EXPECT_EQ(out, (std::vector<float>{1.0f, 2.0f, -1.0f}));
  run();
  EXPECT_EQ(ran, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(out, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_TRUE(state->completion().Wait(absl::ZeroDuration()).ok());
}

// A part whose last answer came short fails only once the answers kept for
// it ran: they might have held the rest.
TEST(PullState, AShortPartFailsOnlyAfterItsKeptAnswersRan) {
  std::vector<float> out(4, -1.0f);
  std::vector<PullTarget> targets = {{out.data(), 2}, {out.data() + 2, 2}};
  auto state = std::make_shared<PullState>(std::move(targets),
                                           std::vector<std::vector<uint64_t>>{{0, 1}},
                                           nullptr, /*deferred=*/true);
  const std::string bytes = Bytes({1, 2});
  ASSERT_TRUE(state->Defer(0, 0, [&bytes](PullState& p) {
    p.OnAnswer(0, {AnsweredChunk{0, bytes, nullptr}}, false);
  }));
  std::function<void()> run = state->StopDeferring();
  Answer(*state, {}, true);  // the request's end, without chunk 1
  EXPECT_FALSE(state->completion().done());
  run();
  EXPECT_EQ(state->completion().Wait(absl::ZeroDuration()).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(state->chunks_done(), 1u);
}

// One chunk's publications as a shard makes them (DeltaPublisher): a
// snapshot, then ternary512 deltas as the parameters move.
class Publications {
 public:
  explicit Publications(uint32_t n) : params_(n), copy_(n) {
    std::normal_distribution<float> d(0.0f, 0.1f);
    for (float& x : params_) x = d(rng_);
    publisher_ = *DeltaPublisher::Create(CodecType::kTernary512, n);
  }
  PublishedAnswer Snapshot() {
    copy_ = params_;
    bytes_.push_back(Bytes(copy_));
    return Answer(PublishedChecksum(copy_), bytes_.back(), {});
  }
  // `count` publications after the copy the worker holds, in one answer.
  PublishedAnswer Deltas(int count = 1) {
    std::vector<std::pair<ChunkHeader, std::string_view>> deltas;
    uint32_t checksum = 0;
    for (int i = 0; i < count; ++i) {
      std::normal_distribution<float> d(0.0f, 1e-3f);
      for (float& x : params_) x += d(rng_);
      ChunkHeader h;
      std::string payload;
      checksum = *publisher_->Publish(params_, {.seed = 1, .clock = version_ + 1},
                                      absl::MakeSpan(copy_), &h, &payload);
      bytes_.push_back(std::move(payload));
      deltas.emplace_back(h, bytes_.back());
    }
    return Answer(checksum, {}, std::move(deltas));
  }
  const std::vector<float>& copy() const { return copy_; }

 private:
  PublishedAnswer Answer(uint32_t checksum, std::string_view snapshot,
                         std::vector<std::pair<ChunkHeader, std::string_view>> deltas) {
    PublishedAnswer a;
    a.version = ++version_;
    a.checksum = checksum;
    a.snapshot = snapshot;
    a.deltas = std::move(deltas);
    return a;
  }
  std::mt19937 rng_{7};
  std::vector<float> params_, copy_;
  std::unique_ptr<DeltaPublisher> publisher_;
  std::deque<std::string> bytes_;  // what the answers view
  uint32_t version_ = 0;
};

constexpr uint32_t kCopyElems = 3 * kPublishBlock + 5;

// [copy in place]: the copy is the buffer answered into; a pull into
// another one holds nothing there, and deltas for it are refused untouched.
TEST(PublishedCopies, TheCopyLivesInTheBufferAnsweredInto) {
  Publications shard(kCopyElems);
  PublishedCopies copies({kCopyElems});
  std::vector<float> a(kCopyElems, -7.0f), b(kCopyElems, -7.0f);
  EXPECT_FALSE(copies.held(0, a.data()).has_value());
  ASSERT_TRUE(copies.Apply(0, shard.Snapshot(), a.data()).ok());
  EXPECT_EQ(a, shard.copy());
  ASSERT_TRUE(copies.Apply(0, shard.Deltas(), a.data()).ok());
  EXPECT_EQ(0, std::memcmp(a.data(), shard.copy().data(), kCopyElems * sizeof(float)));
  ASSERT_TRUE(copies.held(0, a.data()).has_value());
  EXPECT_EQ(copies.held(0, a.data())->version, 2u);
  EXPECT_FALSE(copies.held(0, b.data()).has_value());

  const absl::Status s = copies.Apply(0, shard.Deltas(), b.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(b, std::vector<float>(kCopyElems, -7.0f));
  EXPECT_FALSE(copies.held(0, a.data()).has_value());  // dropped: a snapshot comes next
  ASSERT_TRUE(copies.Apply(0, shard.Snapshot(), b.data()).ok());
  EXPECT_EQ(b, shard.copy());
  EXPECT_TRUE(copies.held(0, b.data()).has_value());
}

// A buffer changed between answers no longer holds the shard's copy: the
// next delta's checksum says so (DataLoss), the copy is dropped, and a
// snapshot mends it.
TEST(PublishedCopies, AChangedBufferIsDataLossThenASnapshot) {
  Publications shard(kCopyElems);
  PublishedCopies copies({kCopyElems});
  std::vector<float> a(kCopyElems);
  ASSERT_TRUE(copies.Apply(0, shard.Snapshot(), a.data()).ok());
  a[kPublishBlock + 3] += 0.5f;
  const absl::Status s = copies.Apply(0, shard.Deltas(2), a.data());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_FALSE(copies.held(0, a.data()).has_value());
  ASSERT_TRUE(copies.Apply(0, shard.Snapshot(), a.data()).ok());
  EXPECT_EQ(a, shard.copy());
}

// Every delta of an answer is checked before the first is applied: a bad
// one anywhere leaves the buffer as it was.
TEST(PublishedCopies, AnUndecodableDeltaLeavesTheBufferUntouched) {
  Publications shard(kCopyElems);
  PublishedCopies copies({kCopyElems});
  std::vector<float> a(kCopyElems);
  ASSERT_TRUE(copies.Apply(0, shard.Snapshot(), a.data()).ok());
  const std::vector<float> before = a;
  PublishedAnswer answer = shard.Deltas(3);
  answer.deltas[2].first.num_elems = kCopyElems - 1;
  const absl::Status s = copies.Apply(0, answer, a.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(0, std::memcmp(a.data(), before.data(), kCopyElems * sizeof(float)));
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
