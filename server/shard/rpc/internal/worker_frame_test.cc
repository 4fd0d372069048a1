// [push frames]: ParseWorkerMessage accepts exactly what protobuf accepts and
// yields the same message, whatever the frame and however it is split into
// slices; canonical pushes reuse pooled payload buffers.
#include "server/shard/rpc/internal/worker_frame.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gradstream::shard::internal {
namespace {

namespace pb = ::gradstream::v1;

// `frame` cut at `cuts` (sorted positions; repeats make empty pieces).
std::vector<absl::string_view> Split(const std::string& frame, const std::vector<size_t>& cuts) {
  std::vector<absl::string_view> pieces;
  size_t from = 0;
  for (size_t c : cuts) {
    pieces.push_back(absl::string_view(frame).substr(from, c - from));
    from = c;
  }
  pieces.push_back(absl::string_view(frame).substr(from));
  return pieces;
}

std::vector<size_t> RandomCuts(size_t size, std::mt19937& rng) {
  std::vector<size_t> cuts(rng() % 6);
  for (size_t& c : cuts) c = size == 0 ? 0 : rng() % (size + 1);
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// Parses `frame` both ways and checks they agree.
void ExpectSameAsProtobuf(const std::string& frame, const std::vector<size_t>& cuts,
                          BufferPool* pool) {
  pb::WorkerMessage want;
  const bool want_ok = want.ParseFromString(frame);
  pb::WorkerMessage got;
  const bool got_ok = ParseWorkerMessage(Split(frame, cuts), pool, &got);
  ASSERT_EQ(got_ok, want_ok) << "frame of " << frame.size() << " bytes";
  if (!want_ok) return;
  EXPECT_EQ(got.msg_case(), want.msg_case());
  EXPECT_EQ(got.push().has_chunk(), want.push().has_chunk());
  EXPECT_EQ(got.SerializeAsString(), want.SerializeAsString());
}

pb::WorkerMessage Push(uint64_t seq, pb::Codec codec, size_t payload_bytes, float scale) {
  pb::WorkerMessage m;
  pb::Push* p = m.mutable_push();
  p->set_seq(seq);
  p->set_chunk_id(seq * 7 + 3);
  p->set_clock(seq / 2);
  pb::EncodedChunk* c = p->mutable_chunk();
  c->set_codec(codec);
  c->set_num_elems(static_cast<uint32_t>(payload_bytes / 4));
  c->set_scale(scale);
  c->set_scale2(-scale);
  std::string payload(payload_bytes, '\0');
  for (size_t i = 0; i < payload_bytes; ++i) payload[i] = static_cast<char>(i * 131 + seq);
  c->set_payload(std::move(payload));
  return m;
}

TEST(WorkerFrame, CanonicalPushesAnySplit) {
  std::mt19937 rng(12);
  BufferPool pool(size_t{8} << 20);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{65536 + 7},
                       size_t{1} << 20}) {
    for (uint64_t seq : {uint64_t{0}, uint64_t{1}, uint64_t{300}, ~uint64_t{0}}) {
      const std::string frame = Push(seq, pb::CODEC_NONE, bytes, seq == 0 ? 0.0f : 0.5f)
                                    .SerializeAsString();
      for (int split = 0; split < 4; ++split) {
        ExpectSameAsProtobuf(frame, RandomCuts(frame.size(), rng), &pool);
        ExpectSameAsProtobuf(frame, RandomCuts(frame.size(), rng), nullptr);
      }
    }
  }
}

TEST(WorkerFrame, OtherMessagesAndEmptyFrame) {
  std::vector<pb::WorkerMessage> msgs(6);
  msgs[0].mutable_hello()->set_job_id("job");
  msgs[0].mutable_hello()->set_worker_id(4);
  msgs[1].mutable_init()->set_values(std::string(5000, 'v'));
  msgs[2].mutable_pull()->add_chunk_ids(9);
  msgs[2].mutable_pull()->set_clock(3);
  msgs[3].mutable_clock()->set_clock(11);
  msgs[4].mutable_leave();
  msgs[5].mutable_push();  // a push with no fields: "12 00"
  for (const pb::WorkerMessage& m : msgs) {
    ExpectSameAsProtobuf(m.SerializeAsString(), {}, nullptr);
  }
  ExpectSameAsProtobuf("", {}, nullptr);
  ExpectSameAsProtobuf("", {0, 0}, nullptr);
}

TEST(WorkerFrame, UnusualEncodingsMatchProtobuf) {
  const std::string push = Push(5, pb::CODEC_TWOBIT, 40, 0.25f).SerializeAsString();
  const std::string body = push.substr(2);  // the Push's bytes (its length fits one byte)
  const std::string chunk = Push(5, pb::CODEC_TWOBIT, 40, 0.25f).push().chunk().SerializeAsString();
  auto frame = [](const std::string& push_body) {
    return std::string("\x12") + static_cast<char>(push_body.size()) + push_body;
  };
  const std::vector<std::string> frames = {
      push + push,                                        // push twice: merged
      frame(body + "\x22\x02\x10\x07"),                   // chunk twice: merged
      frame(body + std::string("\x08\x09", 2)),           // seq again: last wins
      frame(body + std::string("\x30\x01", 2)),           // unknown field 6 in Push
      frame(body + std::string("\x18\x80\x80\x00", 4)),   // non-minimal varint
      frame(std::string("\x88\x00\x05", 3) + body),       // non-minimal tag
      frame(std::string("\x22\x03\x28\x01\x00", 5)),      // payload as a varint
      frame(std::string("\x22\x02\x2a\x05", 4)),          // payload longer than the chunk
      frame(std::string("\x22\x06\x08\xff\xff\xff\xff\x0f", 8)),  // codec -1... as uint32
      frame(std::string("\x22\x0b\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 13)),  // -1
      frame(std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 11)),  // 10th byte > 1
      frame(std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12)),  // 11 bytes
      std::string("\x12\x80\x80\x80\x80\x00", 6),         // 5-byte length of 0
      std::string("\x12\x80\x00", 3),                     // non-minimal length of 0
      push + std::string("\x0a\x00", 2),                  // then a Hello: the oneof switches
      std::string("\x0a\x00", 2) + push,                  // a Hello, then the push
      push + std::string("\x00", 1),                      // tag 0
      frame(body + std::string("\x00", 1)),               // tag 0 inside the push
      frame(std::string("\x22", 1) + static_cast<char>(chunk.size() + 2) + chunk +
            std::string("\x00\x00", 2)),                  // tag 0 inside the chunk
      frame(std::string("\x22\x05\x1d\x00\x00\x80", 6)),  // truncated scale
  };
  for (const std::string& f : frames) {
    for (size_t cut = 0; cut <= f.size(); ++cut) ExpectSameAsProtobuf(f, {cut}, nullptr);
  }
}

// Every truncation and many single-byte changes of a push frame.
TEST(WorkerFrame, MutatedPushesMatchProtobuf) {
  std::mt19937 rng(7);
  BufferPool pool(size_t{1} << 20);
  const std::string frame = Push(1234567, pb::CODEC_TERNARY, 5000, 1.5f).SerializeAsString();
  for (size_t n = 0; n <= frame.size(); n += (n < 64 ? 1 : 257)) {
    ExpectSameAsProtobuf(frame.substr(0, n), RandomCuts(n, rng), &pool);
  }
  const size_t header = frame.size() - 5000;  // mutate the header bytes, where parsing decides
  for (size_t pos = 0; pos < header; ++pos) {
    for (int v : {0x00, 0x01, 0x7f, 0x80, 0xff, -1}) {
      std::string f = frame;
      f[pos] = static_cast<char>(v >= 0 ? v : f[pos] ^ (1 << (rng() % 8)));
      ExpectSameAsProtobuf(f, RandomCuts(f.size(), rng), &pool);
    }
  }
}

TEST(WorkerFrame, CanonicalPushReusesPooledBuffer) {
  BufferPool pool(size_t{4} << 20);
  std::string buffer;
  buffer.reserve(size_t{1} << 20);
  const char* const data = buffer.data();
  pool.Give(std::move(buffer));
  EXPECT_EQ(pool.pooled_bytes() > 0, true);
  const std::string frame = Push(1, pb::CODEC_NONE, size_t{1} << 20, 0.0f).SerializeAsString();
  pb::WorkerMessage m;
  ASSERT_TRUE(ParseWorkerMessage(Split(frame, {100, 70000, 70000, 500000}), &pool, &m));
  EXPECT_EQ(m.push().chunk().payload().data(), data);
  EXPECT_EQ(pool.pooled_bytes(), 0u);
  EXPECT_EQ(m.push().chunk().payload(), Push(1, pb::CODEC_NONE, size_t{1} << 20, 0.0f)
                                            .push().chunk().payload());
  pool.Give(std::move(*m.mutable_push()->mutable_chunk()->mutable_payload()));
  EXPECT_GE(pool.pooled_bytes(), size_t{1} << 20);
}

// What the pool itself promises is tested in common/buffer_pool_test.cc; this
// is how the parse uses it: only payloads of at least kMinPooledBytes come
// from the pool, and every payload's buffer has room for it up front.
TEST(WorkerFrame, SmallPayloadsAndPoolMissesGetFreshBuffers) {
  BufferPool pool(size_t{4} << 20);
  std::string buffer;
  buffer.reserve(size_t{64} << 10);
  pool.Give(std::move(buffer));
  const size_t pooled = pool.pooled_bytes();
  ASSERT_GT(pooled, 0u);
  const size_t small = BufferPool::kMinPooledBytes - 1;
  const std::string small_frame = Push(2, pb::CODEC_NONE, small, 0.0f).SerializeAsString();
  pb::WorkerMessage m;
  ASSERT_TRUE(ParseWorkerMessage(Split(small_frame, {}), &pool, &m));
  EXPECT_EQ(m.push().chunk().payload().size(), small);
  EXPECT_EQ(pool.pooled_bytes(), pooled);  // left for a payload worth it

  // Larger than anything pooled: a miss, reserved at the payload's size.
  const size_t big = size_t{1} << 20;
  const std::string big_frame = Push(3, pb::CODEC_NONE, big, 0.0f).SerializeAsString();
  pb::WorkerMessage b;
  ASSERT_TRUE(ParseWorkerMessage(Split(big_frame, {1000, 300000}), &pool, &b));
  EXPECT_EQ(b.push().chunk().payload(), Push(3, pb::CODEC_NONE, big, 0.0f).push().chunk().payload());
  EXPECT_GE(b.push().chunk().payload().capacity(), big);
  EXPECT_EQ(pool.pooled_bytes(), pooled);
}

}  // namespace
}  // namespace gradstream::shard::internal
