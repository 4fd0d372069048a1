// Exactly-once, incarnations, membership changes and bad input against a real
// gs_shard: every bad message gets a clear status, parameters stay unchanged
// and the shard keeps serving the other streams.
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/shard/shard_testing.h"

namespace gradstream::testing {
namespace {

constexpr int kInvalidArgument = 3;
constexpr int kDeadlineExceeded = 4;
constexpr int kNotFound = 5;

// A sync SGD job (lr 0.5) of worker 1: `dense` chunks of 4 elements, then
// one partition of a table (tensor 1) of 100 rows x 2.
pb::CreateJobRequest TableJobRequest(const std::string& job, uint64_t dense) {
  pb::CreateJobRequest req;
  req.set_job_id(job);
  req.mutable_optimizer()->set_type("sgd");
  req.mutable_optimizer()->set_learning_rate(0.5f);
  req.mutable_consistency()->set_mode(pb::SYNC);
  for (uint64_t i = 0; i < dense; ++i) {
    req.add_chunks()->set_chunk_id(i);
    req.mutable_chunks(i)->set_num_elems(4);
  }
  pb::ChunkInfo* t = req.add_chunks();
  t->set_chunk_id(dense);
  t->set_tensor(1);
  t->mutable_rows()->set_table_rows(100);
  t->mutable_rows()->set_dim(2);
  t->mutable_rows()->set_partitions(1);
  t->mutable_rows()->set_init_std(1.0f);
  t->mutable_rows()->set_seed(7);
  req.mutable_membership()->set_epoch(1);
  req.mutable_membership()->add_worker_ids(1);
  return req;
}

class ShardProtocolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto proc = ShardProcess::Start({"--max_message_bytes=8388608"});
    ASSERT_TRUE(proc.ok()) << proc.status();
    shard_ = std::move(*proc);
  }
  static void TearDownTestSuite() { shard_.reset(); }

  static void CreateJob(const std::string& job, pb::ConsistencyMode mode,
                        std::vector<uint64_t> workers, std::vector<uint32_t> chunk_sizes) {
    pb::CreateJobRequest req;
    req.set_job_id(job);
    req.mutable_optimizer()->set_type("sgd");
    req.mutable_optimizer()->set_learning_rate(0.1f);
    req.mutable_consistency()->set_mode(mode);
    for (size_t i = 0; i < chunk_sizes.size(); ++i) {
      req.add_chunks()->set_chunk_id(i);
      req.mutable_chunks(i)->set_num_elems(chunk_sizes[i]);
    }
    req.mutable_membership()->set_epoch(1);
    for (uint64_t w : workers) req.mutable_membership()->add_worker_ids(w);
    pb::CreateJobResponse resp;
    auto stub = shard_->Stub();
    grpc::Status s = Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  static pb::StatsResponse Stats(const std::string& job, bool rounds = false) {
    pb::StatsRequest req;
    req.set_job_id(job);
    req.set_include_rounds(rounds);
    pb::StatsResponse resp;
    auto stub = shard_->Stub();
    EXPECT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::GetStats, req, &resp).ok());
    return resp;
  }

  static std::vector<float> PullValues(SessionClient& s, uint64_t id, uint64_t clock,
                                       uint64_t chunk) {
    auto got = s.Pull(id, clock, {chunk}, 20000);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok() || got->back().code() != 0) return {};
    return BytesFloats(got->back().values());
  }

  static std::unique_ptr<ShardProcess> shard_;
};
std::unique_ptr<ShardProcess> ShardProtocolTest::shard_;

TEST_F(ShardProtocolTest, DuplicatePushIsAppliedOnce) {
  for (auto mode : {pb::SYNC, pb::BOUNDED}) {
    const std::string job = absl::StrCat("dup-", mode);
    CreateJob(job, mode, {1}, {4});
    SessionClient s(shard_->Connect());
    ASSERT_TRUE(s.Hello(job, 1).ok());
    ASSERT_EQ(s.Init(1, 0, {1, 1, 1, 1})->code(), 0);
    const pb::EncodedChunk g = RawChunk({1, 2, 3, 4});
    auto first = s.Push(2, 0, 0, g);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(first->code(), 0);
    EXPECT_FALSE(first->duplicate());
    auto again = s.Push(3, 0, 0, g);  // a retry of the same (worker, clock, chunk)
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->code(), 0);
    EXPECT_TRUE(again->duplicate());
    ASSERT_TRUE(s.Clock(1));  // SSP reads wait on the slowest clock, not on versions
    const std::vector<float> p = PullValues(s, 4, 1, 0);
    ASSERT_EQ(p.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(p[i], 1.0f - 0.1f * (i + 1)) << i;
    EXPECT_TRUE(s.Push(5, 0, 0, g)->duplicate());  // and after the apply too
    const pb::StatsResponse st = Stats(job);
    EXPECT_EQ(st.pushes_applied(), 1u);
    EXPECT_EQ(st.pushes_duplicate(), 2u);
    EXPECT_EQ(st.max_version(), 1u);
  }
}

TEST_F(ShardProtocolTest, StaleIncarnationIsRefused) {
  CreateJob("inc", pb::SYNC, {1}, {4});
  SessionClient current(shard_->Connect());
  ASSERT_TRUE(current.Hello("inc", 1, /*incarnation=*/2).ok());

  SessionClient stale(shard_->Connect());
  auto refused = stale.Hello("inc", 1, /*incarnation=*/1);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("incarnation"), std::string::npos);
  EXPECT_TRUE(stale.WaitClosed().ok());  // the shard closed the stream after the error

  // A newer incarnation replaces the current one: its next push is refused.
  SessionClient newer(shard_->Connect());
  ASSERT_TRUE(newer.Hello("inc", 1, /*incarnation=*/3).ok());
  auto push = current.Push(1, 0, 0, RawChunk({1, 1, 1, 1}));
  EXPECT_EQ(push.status().code(), absl::StatusCode::kFailedPrecondition) << push.status();
  EXPECT_TRUE(current.WaitClosed().ok());
  EXPECT_EQ(Stats("inc").pushes_applied(), 0u);
}

TEST_F(ShardProtocolTest, RemovingADeadWorkerCompletesThePendingRound) {
  CreateJob("member", pb::SYNC, {1, 2, 3}, {2});
  SessionClient w1(shard_->Connect()), w2(shard_->Connect());
  ASSERT_TRUE(w1.Hello("member", 1).ok());
  ASSERT_TRUE(w2.Hello("member", 2).ok());
  ASSERT_EQ(w1.Init(1, 0, {0, 0})->code(), 0);
  ASSERT_EQ(w1.Push(2, 0, 0, RawChunk({1, 3}))->code(), 0);
  ASSERT_EQ(w2.Push(2, 0, 0, RawChunk({3, 5}))->code(), 0);
  ASSERT_TRUE(w1.SendPull(3, 1, {}, 20000));  // waits on worker 3, who is dead

  pb::MembershipUpdate up;
  up.set_job_id("member");
  up.mutable_membership()->set_epoch(2);
  up.mutable_membership()->set_effective_clock(0);
  up.mutable_membership()->add_worker_ids(1);
  up.mutable_membership()->add_worker_ids(2);
  pb::MembershipAck ack;
  auto stub = shard_->Stub();
  ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::UpdateMembership, up, &ack).ok());
  EXPECT_EQ(ack.epoch(), 2u);

  auto got = w1.AwaitPull(3);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->back().code(), 0);
  const std::vector<float> p = BytesFloats(got->back().values());
  EXPECT_FLOAT_EQ(p[0], -0.2f);  // mean over the two contributors: (2, 4)
  EXPECT_FLOAT_EQ(p[1], -0.4f);
  const pb::StatsResponse st = Stats("member", true);
  ASSERT_EQ(st.rounds_size(), 1);
  EXPECT_EQ(st.rounds(0).epoch(), 2u);
  EXPECT_EQ(st.rounds(0).contributors_size(), 2);
  EXPECT_EQ(st.epoch(), 2u);
}

TEST_F(ShardProtocolTest, PullPastItsDeadlineFails) {
  CreateJob("deadline", pb::SYNC, {1}, {2});
  SessionClient s(shard_->Connect());
  ASSERT_TRUE(s.Hello("deadline", 1).ok());
  ASSERT_EQ(s.Init(1, 0, {0, 0})->code(), 0);
  const absl::Time asked = absl::Now();
  auto got = s.Pull(2, 5, {}, /*timeout_ms=*/200);
  ASSERT_TRUE(got.ok());
  EXPECT_GE(absl::Now() - asked, absl::Milliseconds(200));  // not before its deadline
  EXPECT_EQ(got->back().code(), kDeadlineExceeded);
  EXPECT_FALSE(got->back().message().empty());
}

pb::EncodedChunk TwoBit(uint32_t n, std::string payload, float scale) {
  pb::EncodedChunk c;
  c.set_codec(pb::CODEC_TWOBIT);
  c.set_num_elems(n);
  c.set_scale(scale);
  c.set_payload(std::move(payload));
  return c;
}

TEST_F(ShardProtocolTest, BadInputGetsAClearStatusAndChangesNothing) {
  constexpr uint32_t kN = 1000;
  CreateJob("bad", pb::SYNC, {1, 2}, {kN, 8});
  SessionClient w1(shard_->Connect()), w2(shard_->Connect());
  ASSERT_TRUE(w1.Hello("bad", 1).ok());
  ASSERT_TRUE(w2.Hello("bad", 2).ok());
  std::vector<float> init(kN);
  for (uint32_t i = 0; i < kN; ++i) init[i] = static_cast<float>(i) * 0.01f;
  ASSERT_EQ(w1.Init(1, 0, init)->code(), 0);
  ASSERT_EQ(w1.Init(2, 1, std::vector<float>(8, 0.0f))->code(), 0);

  struct Bad {
    const char* what;
    uint64_t chunk;
    pb::EncodedChunk enc;
    int code;
  };
  std::string invalid_code((kN + 3) / 4, 0);
  invalid_code[10] = static_cast<char>(0xFF);  // code 11
  pb::EncodedChunk unknown_codec = RawChunk(std::vector<float>(kN, 1.0f));
  unknown_codec.set_codec(static_cast<pb::Codec>(9));
  pb::EncodedChunk inf_ternary = TwoBit(kN, std::string((kN + 3) / 4, 0), INFINITY);
  inf_ternary.set_codec(pb::CODEC_TERNARY);
  const Bad cases[] = {
      {"unknown chunk", 77, RawChunk(std::vector<float>(kN, 1.0f)), kNotFound},
      {"count mismatch", 0, RawChunk(std::vector<float>(kN - 1, 1.0f)), kInvalidArgument},
      {"header/payload count mismatch", 0,
       [] {
         pb::EncodedChunk c = RawChunk(std::vector<float>(kN, 1.0f));
         c.set_num_elems(kN + 4);
         return c;
       }(),
       kInvalidArgument},
      {"truncated payload", 0, TwoBit(kN, std::string((kN + 3) / 4 - 1, 0), 0.5f),
       kInvalidArgument},
      {"invalid code 11", 0, TwoBit(kN, invalid_code, 0.5f), kInvalidArgument},
      {"NaN scale", 0, TwoBit(kN, std::string((kN + 3) / 4, 0), NAN), kInvalidArgument},
      {"Inf scale", 0, inf_ternary, kInvalidArgument},
      {"unknown codec", 0, unknown_codec, kInvalidArgument},
  };
  uint64_t seq = 10;
  for (const Bad& b : cases) {
    auto ack = w1.Push(++seq, b.chunk, 0, b.enc);
    ASSERT_TRUE(ack.ok()) << b.what << ": " << ack.status();
    EXPECT_EQ(ack->code(), b.code) << b.what << ": " << ack->message();
    EXPECT_FALSE(ack->message().empty()) << b.what;
  }
  // Init of the wrong size.
  auto bad_init = w1.Init(++seq, 1, std::vector<float>(7, 0.0f));
  ASSERT_TRUE(bad_init.ok());
  EXPECT_EQ(bad_init->code(), kInvalidArgument);
  // Pull of an unknown chunk.
  auto pull = w1.Pull(++seq, 0, {77});
  ASSERT_TRUE(pull.ok());
  EXPECT_EQ(pull->back().code(), kNotFound) << pull->back().message();
  // Hello for an unknown job.
  {
    SessionClient s(shard_->Connect());
    EXPECT_EQ(s.Hello("no-such-job", 1).status().code(), absl::StatusCode::kNotFound);
  }
  // Push before Hello.
  {
    SessionClient s(shard_->Connect());
    auto ack = s.Push(1, 0, 0, RawChunk(std::vector<float>(kN, 1.0f)));
    EXPECT_EQ(ack.status().code(), absl::StatusCode::kFailedPrecondition) << ack.status();
    EXPECT_TRUE(s.WaitClosed().ok());
  }
  // A message over the shard's receive limit ends that stream only.
  {
    SessionClient s(shard_->Connect());
    ASSERT_TRUE(s.Hello("bad", 1).ok());
    pb::WorkerMessage m;
    m.mutable_push()->set_seq(1);
    *m.mutable_push()->add_chunks()->mutable_chunk() =
        RawChunk(std::vector<float>(9 << 18, 1.0f));  // 9 MiB
    s.Write(m);
    grpc::Status st = s.WaitClosed();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  }

  // Nothing changed, and the other streams still work.
  EXPECT_EQ(PullValues(w2, 100, 0, 0), init);
  EXPECT_GE(Stats("bad").pushes_rejected(), 8u);
  EXPECT_EQ(Stats("bad").pushes_applied(), 0u);
  ASSERT_EQ(w1.Push(++seq, 0, 0, RawChunk(std::vector<float>(kN, 1.0f)))->code(), 0);
  ASSERT_EQ(w2.Push(++seq, 0, 0, RawChunk(std::vector<float>(kN, 1.0f)))->code(), 0);
  const std::vector<float> after = PullValues(w2, 101, 1, 0);
  ASSERT_EQ(after.size(), kN);
  for (uint32_t i = 0; i < kN; ++i) ASSERT_FLOAT_EQ(after[i], init[i] - 0.1f);
}

pb::PushedChunk Pushed(uint64_t chunk, pb::EncodedChunk enc) {
  pb::PushedChunk c;
  c.set_chunk_id(chunk);
  *c.mutable_chunk() = std::move(enc);
  return c;
}

pb::Push Bucket(uint64_t clock, std::vector<pb::PushedChunk> chunks) {
  pb::Push p;
  p.set_clock(clock);
  for (pb::PushedChunk& c : chunks) *p.add_chunks() = std::move(c);
  return p;
}

// A bucket is checked whole before any chunk is applied ([fused messages]):
// a good chunk beside a bad one is not applied either, and each refusal
// says which chunk and why.
TEST_F(ShardProtocolTest, MalformedBucketGetsAClearStatusAndChangesNothing) {
  CreateJob("bucket", pb::SYNC, {1, 2}, {4, 8, 4});
  SessionClient w1(shard_->Connect()), w2(shard_->Connect());
  ASSERT_TRUE(w1.Hello("bucket", 1).ok());
  ASSERT_TRUE(w2.Hello("bucket", 2).ok());
  uint64_t seq = 0;
  for (uint64_t c = 0; c < 3; ++c) {
    ASSERT_EQ(w1.Init(++seq, c, std::vector<float>(c == 1 ? 8 : 4, 1.0f))->code(), 0);
  }
  const pb::PushedChunk good = Pushed(0, RawChunk({1, 1, 1, 1}));
  pb::EncodedChunk short_payload = RawChunk(std::vector<float>(8, 1.0f));
  short_payload.mutable_payload()->resize(28);
  pb::EncodedChunk unknown_codec = RawChunk(std::vector<float>(8, 1.0f));
  unknown_codec.set_codec(static_cast<pb::Codec>(9));
  pb::EncodedChunk nan_value = RawChunk(std::vector<float>(8, 1.0f));
  nan_value.mutable_payload()->replace(4, 4, FloatBytes({NAN}));
  struct Bad {
    const char* what;
    pb::Push push;
    int code;
    const char* says;  // in the Ack's message
  };
  const Bad cases[] = {
      {"no chunk", Bucket(0, {}), kInvalidArgument, "no chunks"},
      {"a chunk twice", Bucket(0, {good, Pushed(1, RawChunk(std::vector<float>(8, 1.0f))), good}),
       kInvalidArgument, "chunk 0 is in the Push twice"},
      {"a chunk not on the shard", Bucket(0, {good, Pushed(77, RawChunk({1}))}), kNotFound,
       "chunk 77"},
      {"a short payload", Bucket(0, {good, Pushed(1, short_payload)}), kInvalidArgument,
       "chunk 1 (2 of 2 in the Push)"},
      {"an unknown codec", Bucket(0, {good, Pushed(1, unknown_codec)}), kInvalidArgument,
       "chunk 1 of the Push: unknown codec 9"},
      {"a NaN value", Bucket(0, {good, Pushed(1, nan_value)}), kInvalidArgument,
       "chunk 1 (2 of 2 in the Push)"},
  };
  for (const Bad& b : cases) {
    auto ack = w1.PushMessage(++seq, b.push);
    ASSERT_TRUE(ack.ok()) << b.what << ": " << ack.status();
    EXPECT_EQ(ack->code(), b.code) << b.what << ": " << ack->message();
    EXPECT_NE(ack->message().find(b.says), std::string::npos) << b.what << ": " << ack->message();
  }
  pb::StatsResponse st = Stats("bucket");
  EXPECT_EQ(st.pushes_applied(), 0u);  // not even the good chunks beside the bad ones
  EXPECT_EQ(st.pushes_duplicate(), 0u);
  EXPECT_EQ(st.push_messages(), std::size(cases));

  // The same chunks, well formed: one message each, every chunk applied
  // (none was held back as a duplicate by a refused bucket).
  const pb::Push whole = Bucket(0, {good, Pushed(1, RawChunk(std::vector<float>(8, 3.0f))),
                                    Pushed(2, RawChunk({5, 5, 5, 5}))});
  auto a1 = w1.PushMessage(++seq, whole);
  auto a2 = w2.PushMessage(++seq, whole);
  ASSERT_TRUE(a1.ok() && a2.ok());
  ASSERT_EQ(a1->code(), 0) << a1->message();
  ASSERT_EQ(a2->code(), 0) << a2->message();
  EXPECT_FALSE(a1->duplicate());
  st = Stats("bucket");
  EXPECT_EQ(st.pushes_applied(), 6u);
  EXPECT_EQ(st.pushes_duplicate(), 0u);
  EXPECT_EQ(st.push_messages(), std::size(cases) + 2);
  // Replayed whole (a reconnect): every chunk a duplicate, the Ack says so.
  auto again = w1.PushMessage(++seq, whole);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->code(), 0);
  EXPECT_TRUE(again->duplicate());
  EXPECT_EQ(PullValues(w1, 100, 1, 1), std::vector<float>(8, 1.0f - 0.1f * 3.0f));
  EXPECT_EQ(PullValues(w1, 101, 1, 2), std::vector<float>(4, 1.0f - 0.1f * 5.0f));
}

// A pull's chunks come back several to a PullAnswer, up to the shard's
// --pull_answer_bytes (a larger chunk alone).
// Rows of one partition pushed in pieces (PushedRows.more): held, not
// answered, until the last, then applied as one push and every piece
// answered with its status; a replay of the pieces is that push's duplicate.
// Pieces that something else interrupts, or that a stream ends with, change
// nothing, and `more` in a Push that holds more than the piece is refused.
TEST_F(ShardProtocolTest, RowsInPiecesAreOnePushAndBrokenPiecesChangeNothing) {
  // Chunk 0: 4 dense elements; chunk 1: a table of 100 rows x 2.
  const pb::CreateJobRequest req = TableJobRequest("pieces", 1);
  pb::CreateJobResponse created;
  auto stub = shard_->Stub();
  ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, req, &created).ok());

  auto rows_push = [](uint64_t clock, std::vector<uint64_t> ids, const std::vector<float>& g,
                      bool more) {
    pb::Push p;
    p.set_clock(clock);
    pb::PushedRows* r = p.add_rows();
    r->set_chunk_id(1);
    for (uint64_t id : ids) r->add_ids(id);
    r->set_values(FloatBytes(g));
    r->set_more(more);
    return p;
  };
  auto send = [](SessionClient& s, uint64_t seq, pb::Push p) {
    pb::WorkerMessage m;
    *m.mutable_push() = std::move(p);
    m.mutable_push()->set_seq(seq);
    return s.Write(m);
  };
  // Rows 1-4 at `clock`.
  auto pull_rows = [](SessionClient& s, uint64_t request, uint64_t clock) {
    pb::WorkerMessage m;
    m.mutable_pull()->set_request_id(request);
    m.mutable_pull()->set_clock(clock);
    pb::RowRequest* r = m.mutable_pull()->add_rows();
    r->set_chunk_id(1);
    for (uint64_t id : {1, 2, 3, 4}) r->add_ids(id);
    EXPECT_TRUE(s.Write(m));
    for (int i = 0; i < 20; ++i) {
      std::optional<pb::ServerMessage> a = s.Next();
      if (!a.has_value()) break;
      if (a->has_pull() && a->pull().request_id() == request) {
        EXPECT_EQ(a->pull().code(), 0) << a->pull().message();
        EXPECT_EQ(a->pull().rows_size(), 1);
        if (a->pull().rows_size() == 1) return BytesFloats(a->pull().rows(0).values());
        break;
      }
    }
    return std::vector<float>();
  };
  auto applied = [&]() { return Stats("pieces").pushes_applied(); };

  SessionClient w(shard_->Connect());
  ASSERT_TRUE(w.Hello("pieces", 1).ok());
  ASSERT_EQ(w.Init(1, 0, std::vector<float>(4, 0.0f))->code(), 0);
  const std::vector<float> before = pull_rows(w, 1, 0);
  ASSERT_EQ(before.size(), 8u);
  const std::vector<float> g12 = {1, 2, 3, 4}, g34 = {-1, -2, 0.5f, 8};

  // Interrupted by a push of another chunk: the piece is refused, the
  // other push applied.
  ASSERT_TRUE(send(w, 2, rows_push(0, {1, 2}, g12, true)));
  absl::StatusOr<pb::Ack> dense = w.Push(3, 0, 0, RawChunk({1, 1, 1, 1}));
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ(dense->code(), 0) << dense->message();
  absl::StatusOr<pb::Ack> refused = w.AwaitAck(2);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->code(), kInvalidArgument);
  EXPECT_NE(refused->message().find("were refused, nothing applied: the next Push (seq 3) does "
                                    "not continue them"),
            std::string::npos)
      << refused->message();
  EXPECT_EQ(applied(), 1u);

  // `more` in a Push that also carries a chunk.
  pb::Push mixed = rows_push(0, {1, 2}, g12, true);
  pb::PushedChunk* c = mixed.add_chunks();
  c->set_chunk_id(0);
  *c->mutable_chunk() = RawChunk({1, 1, 1, 1});
  absl::StatusOr<pb::Ack> bad = w.PushMessage(4, mixed);
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_EQ(bad->code(), kInvalidArgument);
  EXPECT_NE(bad->message().find("continued (`more`) in a Push that holds more than them"),
            std::string::npos)
      << bad->message();

  // fp16 rows with a hostile scale or byte count: refused, nothing applied.
  for (float scale : {-1.0f, 0.0f, NAN, INFINITY}) {
    pb::Push p = rows_push(0, {1, 2}, {}, false);
    p.mutable_rows(0)->set_fp16(true);
    p.mutable_rows(0)->set_scale(scale);
    p.mutable_rows(0)->set_values(std::string(8, '\0'));  // 2 rows x 2 halves
    absl::StatusOr<pb::Ack> half = w.PushMessage(10, p);
    ASSERT_TRUE(half.ok()) << half.status();
    EXPECT_EQ(half->code(), kInvalidArgument) << scale;
    EXPECT_NE(half->message().find("fp16 rows with scale"), std::string::npos)
        << half->message();
  }
  pb::Push odd = rows_push(0, {1, 2}, {}, false);
  odd.mutable_rows(0)->set_fp16(true);
  odd.mutable_rows(0)->set_scale(1.0f);
  odd.mutable_rows(0)->set_values(std::string(7, '\0'));
  absl::StatusOr<pb::Ack> odd_ack = w.PushMessage(11, odd);
  ASSERT_TRUE(odd_ack.ok()) << odd_ack.status();
  EXPECT_EQ(odd_ack->code(), kInvalidArgument);
  EXPECT_NE(odd_ack->message().find("7 bytes of fp16 values"), std::string::npos)
      << odd_ack->message();
  // A finite scale past half's range: rows past fp32's range are refused.
  pb::Push huge = rows_push(0, {1, 2}, {}, false);
  huge.mutable_rows(0)->set_fp16(true);
  huge.mutable_rows(0)->set_scale(1e38f);
  const uint16_t max_half = 0x7bff;  // 65504
  std::string halves;
  for (int i = 0; i < 4; ++i) halves.append(reinterpret_cast<const char*>(&max_half), 2);
  huge.mutable_rows(0)->set_values(halves);
  absl::StatusOr<pb::Ack> huge_ack = w.PushMessage(12, huge);
  ASSERT_TRUE(huge_ack.ok()) << huge_ack.status();
  EXPECT_EQ(huge_ack->code(), kInvalidArgument) << huge_ack->message();
  EXPECT_EQ(applied(), 1u);

  // A stream that ends holding a piece: nothing applied.
  {
    SessionClient gone(shard_->Connect());
    ASSERT_TRUE(gone.Hello("pieces", 1).ok());
    ASSERT_TRUE(send(gone, 5, rows_push(0, {1, 2}, g12, true)));
    EXPECT_EQ(gone.AwaitAck(5, absl::Milliseconds(300)).status().code(),
              absl::StatusCode::kDeadlineExceeded);  // held, not answered
  }
  EXPECT_EQ(applied(), 1u);

  // Two pieces: the first answered only with the last, both OK.
  ASSERT_TRUE(send(w, 6, rows_push(0, {1, 2}, g12, true)));
  EXPECT_EQ(w.AwaitAck(6, absl::Milliseconds(300)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<pb::Ack> last = w.PushMessage(7, rows_push(0, {3, 4}, g34, false));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->code(), 0) << last->message();
  EXPECT_FALSE(last->duplicate());
  absl::StatusOr<pb::Ack> first = w.AwaitAck(6);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->code(), 0) << first->message();
  EXPECT_EQ(applied(), 2u);

  // The same pieces again on a new stream (a replay): a duplicate.
  SessionClient again(shard_->Connect());
  ASSERT_TRUE(again.Hello("pieces", 1).ok());
  ASSERT_TRUE(send(again, 6, rows_push(0, {1, 2}, g12, true)));
  absl::StatusOr<pb::Ack> replayed = again.PushMessage(7, rows_push(0, {3, 4}, g34, false));
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_TRUE(replayed->duplicate());
  EXPECT_TRUE(again.AwaitAck(6)->duplicate());

  ASSERT_TRUE(w.Clock(1));
  const std::vector<float> after = pull_rows(w, 2, 1);
  ASSERT_EQ(after.size(), 8u);
  const std::vector<float> g = {1, 2, 3, 4, -1, -2, 0.5f, 8};
  for (size_t i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(after[i], before[i] - 0.5f * g[i]) << i;
  const pb::StatsResponse st = Stats("pieces");
  EXPECT_EQ(st.pushes_applied(), 2u);
  EXPECT_EQ(st.pushes_duplicate(), 1u);
  EXPECT_EQ(st.pushes_rejected(), 8u);  // 2 above, and the 6 bad fp16 pushes
}

// A shard whose receive limit is under what rows travel in refuses a job
// with a table at CreateJob, saying so, instead of failing its pushes.
TEST(ShardTableLimitTest, ASmallMessageLimitRefusesTablesAtCreate) {
  auto shard = ShardProcess::Start({"--max_message_bytes=4194304", "--pull_answer_bytes=1048576"});
  ASSERT_TRUE(shard.ok()) << shard.status();
  pb::CreateJobRequest req = TableJobRequest("small", 0);
  pb::CreateJobResponse resp;
  auto stub = (*shard)->Stub();
  grpc::Status s = Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("table 1: a shard holds tables only with --max_message_bytes "
                                   "of at least 8388608"),
            std::string::npos)
      << s.error_message();
  req.mutable_chunks(0)->clear_rows();  // the same job without the table
  req.mutable_chunks(0)->set_num_elems(8);
  s = Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(ShardProtocolTest, PullAnswersCarrySeveralChunksUpToTheBound) {
  auto small = ShardProcess::Start({"--pull_answer_bytes=40"});
  ASSERT_TRUE(small.ok()) << small.status();
  for (ShardProcess* shard : {shard_.get(), small->get()}) {
    pb::CreateJobRequest req;
    req.set_job_id("answers");
    req.mutable_optimizer()->set_type("sgd");
    req.mutable_consistency()->set_mode(pb::SYNC);
    const uint32_t sizes[] = {4, 4, 4, 16, 2};  // 16, 16, 16, 64, 8 bytes
    for (uint32_t i = 0; i < std::size(sizes); ++i) {
      pb::ChunkInfo* c = req.add_chunks();
      c->set_chunk_id(i);
      c->set_num_elems(sizes[i]);
    }
    req.mutable_membership()->set_epoch(1);
    req.mutable_membership()->add_worker_ids(1);
    pb::CreateJobResponse resp;
    auto stub = shard->Stub();
    ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, req, &resp).ok());
    SessionClient s(shard->Connect());
    ASSERT_TRUE(s.Hello("answers", 1).ok());
    for (uint32_t i = 0; i < std::size(sizes); ++i) {
      ASSERT_EQ(s.Init(i + 1, i, std::vector<float>(sizes[i], 1.0f))->code(), 0);
    }
    ASSERT_TRUE(s.SendPull(1, 0));
    std::vector<int> per_message;
    for (;;) {
      std::optional<pb::ServerMessage> m = s.Next();
      ASSERT_TRUE(m.has_value() && m->has_pull());
      ASSERT_EQ(m->pull().code(), 0) << m->pull().message();
      per_message.push_back(m->pull().chunks_size());
      if (m->pull().last()) break;
    }
    if (shard == shard_.get()) {
      EXPECT_EQ(per_message, std::vector<int>{5});  // 120 bytes, under 1 MiB
    } else {
      EXPECT_EQ(per_message, (std::vector<int>{2, 1, 1, 1}));  // 16+16 | 16 | 64 | 8
    }
  }
}

// A worker of another protocol version is refused at Hello, saying so.
TEST_F(ShardProtocolTest, HelloOfAnotherProtocolIsRefused) {
  CreateJob("protocol", pb::SYNC, {1}, {4});
  SessionClient s(shard_->Connect());
  absl::StatusOr<pb::HelloAck> ack =
      s.Hello("protocol", 1, 1, 1, pb::SESSION_PROTOCOL_UNSPECIFIED);
  EXPECT_EQ(ack.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(ack.status().message().find("speaks Session protocol 0, this shard 4"),
            std::string::npos)
      << ack.status();
}

TEST_F(ShardProtocolTest, DropJobEndsItsPullsAndStreams) {
  CreateJob("drop", pb::SYNC, {1}, {2});
  SessionClient s(shard_->Connect());
  ASSERT_TRUE(s.Hello("drop", 1).ok());
  ASSERT_TRUE(s.SendPull(1, 5, {}, 20000));
  // Handled in order: once this push is acked the pull is parked.
  ASSERT_EQ(s.Push(3, 99, 0, RawChunk({1}))->code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  pb::DropJobRequest req;
  req.set_job_id("drop");
  pb::DropJobResponse resp;
  auto stub = shard_->Stub();
  ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::DropJob, req, &resp).ok());
  auto got = s.AwaitPull(1);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->back().code(), static_cast<int>(grpc::StatusCode::ABORTED));
  auto push = s.Push(2, 0, 0, RawChunk({1, 1}));
  EXPECT_EQ(push.status().code(), absl::StatusCode::kNotFound) << push.status();
  EXPECT_EQ(Call(stub.get(), &pb::ParameterServer::Stub::DropJob, req, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  CreateJob("drop", pb::SYNC, {1}, {2});  // the id can be used again
}

TEST_F(ShardProtocolTest, UnaryCallsValidate) {
  auto stub = shard_->Stub();
  pb::CreateJobRequest req;
  req.set_job_id("too-big");
  req.add_chunks()->set_num_elems(4 << 20);  // 16 MiB as fp32: over the limit
  pb::CreateJobResponse resp;
  EXPECT_EQ(Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, req, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  req.mutable_chunks(0)->set_num_elems(4);
  req.mutable_optimizer()->set_type("rmsprop");
  EXPECT_EQ(Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, req, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  pb::StatsRequest sreq;
  sreq.set_job_id("nope");
  pb::StatsResponse sresp;
  EXPECT_EQ(Call(stub.get(), &pb::ParameterServer::Stub::GetStats, sreq, &sresp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  pb::CheckpointRequest creq;
  creq.set_job_id("nope");
  pb::CheckpointResponse cresp;
  EXPECT_EQ(Call(stub.get(), &pb::ParameterServer::Stub::Checkpoint, creq, &cresp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace gradstream::testing
