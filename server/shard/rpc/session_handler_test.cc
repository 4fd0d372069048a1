// SessionHandler in-process, against a real Job: what a stream holds of a
// push of rows in pieces ([row pieces]) counts against its worker's budget
// across all its streams, and a stream that ends gives it back; a clock
// advance riding in a message ([advance rides]).
#include "server/shard/rpc/session_handler.h"

#include <memory>
#include <string>
#include <vector>

#include "common/env/testing/mem_env.h"
#include "common/executor.h"
#include "gtest/gtest.h"

namespace gradstream::shard {
namespace {

namespace pb = ::gradstream::v1;

constexpr uint64_t kTable = 0;
constexpr uint32_t kDim = 2;

class RecordingStream final : public SessionHandler::Stream {
 public:
  void Send(pb::ServerMessage msg) override { sent.push_back(std::move(msg)); }
  void Fail(absl::StatusCode code, const std::string& message) override {
    if (!may_fail) ADD_FAILURE() << "stream failed: " << message;
    failure = message;
  }
  absl::StatusOr<PullCallback> StartPull() override { return PullCallback(); }
  uint64_t stream_id() const override { return 1; }
  // The Ack of `seq`, or null.
  const pb::Ack* AckOf(uint64_t seq) const {
    for (const pb::ServerMessage& m : sent) {
      if (m.has_ack() && m.ack().seq() == seq) return &m.ack();
    }
    return nullptr;
  }
  std::vector<pb::ServerMessage> sent;
  bool may_fail = false;
  std::string failure;  // the StreamError's message
};

class SessionHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobOptions o;
    o.job_id = "job";
    o.optimizer.type = OptimizerType::kSgd;
    o.optimizer.learning_rate = 0.5f;
    ChunkSpec table;
    table.chunk_id = kTable;
    table.table = TableSpec{/*table=*/0, /*table_rows=*/100, kDim, /*partition=*/0,
                            /*partitions=*/1, /*init_std=*/1.0f, /*seed=*/1};
    o.chunks = {table};
    o.membership.epoch = 1;
    o.membership.workers = {1};
    // Room for one piece of 4 rows (4 x 2 floats and 4 ids: 64 bytes).
    o.max_held_piece_bytes = 100;
    auto opened = Job::Open(o, &env_, &executor_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    job_ = opened->job;
  }

  std::unique_ptr<SessionHandler> Connect(RecordingStream* stream) {
    auto h = std::make_unique<SessionHandler>(
        [this](const pb::Hello&) -> absl::StatusOr<std::shared_ptr<Job>> { return job_; }, &env_,
        absl::Seconds(1), 1 << 20, stream);
    pb::WorkerMessage hello;
    hello.mutable_hello()->set_job_id("job");
    hello.mutable_hello()->set_worker_id(1);
    hello.mutable_hello()->set_incarnation(1);
    hello.mutable_hello()->set_protocol(pb::SESSION_PROTOCOL_ADVANCE);
    h->Handle(hello);
    EXPECT_TRUE(stream->sent.size() == 1 && stream->sent[0].has_hello_ack());
    return h;
  }

  static pb::WorkerMessage Rows(uint64_t seq, std::vector<uint64_t> ids, bool more,
                                uint64_t clock = 0) {
    pb::WorkerMessage m;
    m.mutable_push()->set_seq(seq);
    m.mutable_push()->set_clock(clock);
    pb::PushedRows* r = m.mutable_push()->add_rows();
    r->set_chunk_id(kTable);
    for (uint64_t id : ids) r->add_ids(id);
    const std::vector<float> g(ids.size() * kDim, 1.0f);
    r->set_values(std::string(reinterpret_cast<const char*>(g.data()), g.size() * sizeof(float)));
    r->set_more(more);
    return m;
  }

  testing::MemEnv env_;
  Executor executor_{1};
  std::shared_ptr<Job> job_;
};

TEST_F(SessionHandlerTest, HeldPiecesCountAgainstTheWorkerAcrossItsStreams) {
  RecordingStream a, b;
  std::unique_ptr<SessionHandler> ha = Connect(&a);
  std::unique_ptr<SessionHandler> hb = Connect(&b);
  pb::WorkerMessage m = Rows(1, {1, 2, 3, 4}, true);
  ha->Handle(m);
  EXPECT_EQ(a.AckOf(1), nullptr);  // held until its last piece
  m = Rows(1, {5, 6, 7, 8}, true);
  hb->Handle(m);  // the same worker's other stream: past its 100 bytes
  ASSERT_NE(b.AckOf(1), nullptr);
  EXPECT_EQ(b.AckOf(1)->code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(b.AckOf(1)->message().find("worker 1's streams hold pieces past 100 bytes"),
            std::string::npos)
      << b.AckOf(1)->message();

  ha.reset();  // the stream ended holding its piece: nothing applied, its bytes back
  b.sent.clear();
  m = Rows(2, {5, 6, 7, 8}, true);
  hb->Handle(m);
  EXPECT_EQ(b.AckOf(2), nullptr);
  m = Rows(3, {9}, false);  // the last piece: 80 bytes held in all
  hb->Handle(m);
  ASSERT_NE(b.AckOf(2), nullptr);
  ASSERT_NE(b.AckOf(3), nullptr);
  EXPECT_EQ(b.AckOf(2)->code(), 0) << b.AckOf(2)->message();
  EXPECT_EQ(b.AckOf(3)->code(), 0) << b.AckOf(3)->message();
  const JobStats st = job_->Stats(false);
  EXPECT_EQ(st.pushes_applied, 1u);   // the five rows of seqs 2 and 3, as one push
  EXPECT_EQ(st.pushes_rejected, 1u);  // b's first piece

  // Everything given back: a full piece is held again.
  m = Rows(4, {1, 2, 3, 4}, true);
  hb->Handle(m);
  EXPECT_EQ(b.AckOf(4), nullptr);
}

// WorkerMessage.advance is handled as a ClockAdvance just before the
// message: the worker's clock moves, no ClockAdvance message is counted, and
// one outside the worker's window ends the stream before the push reaches
// the job.
TEST_F(SessionHandlerTest, AnAdvanceInAPushMovesTheClockFirst) {
  RecordingStream a;
  std::unique_ptr<SessionHandler> h = Connect(&a);
  pb::WorkerMessage m = Rows(1, {1}, false, /*clock=*/0);
  h->Handle(m);
  ASSERT_NE(a.AckOf(1), nullptr);
  m = Rows(2, {2}, false, /*clock=*/1);
  m.set_advance(1);
  h->Handle(m);
  ASSERT_NE(a.AckOf(2), nullptr);
  EXPECT_EQ(a.AckOf(2)->code(), 0) << a.AckOf(2)->message();
  JobStats st = job_->Stats(false);
  EXPECT_EQ(st.max_clock, 1u);
  EXPECT_EQ(st.clock_messages, 0u);
  EXPECT_EQ(st.pushes_applied, 2u);

  pb::WorkerMessage alone;
  alone.mutable_clock()->set_clock(2);
  h->Handle(alone);
  st = job_->Stats(false);
  EXPECT_EQ(st.max_clock, 2u);
  EXPECT_EQ(st.clock_messages, 1u);

  a.may_fail = true;
  m = Rows(3, {3}, false, /*clock=*/2);
  m.set_advance(1'000'000);
  h->Handle(m);
  EXPECT_NE(a.failure.find("outside its window"), std::string::npos) << a.failure;
  EXPECT_EQ(a.AckOf(3), nullptr);
  st = job_->Stats(false);
  EXPECT_EQ(st.max_clock, 2u);
  EXPECT_EQ(st.push_messages, 2u);
}

}  // namespace
}  // namespace gradstream::shard
