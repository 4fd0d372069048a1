// PushPrecisionBook: the shard's record of what the workers' push controls
// decided, per chunk: each worker's level, the flushes, the events.
#include "server/shard/push_precision.h"

#include "gtest/gtest.h"

namespace gradstream::shard {
namespace {

constexpr CodecType kNone = CodecType::kNone, kHalf = CodecType::kHalf,
                    kTernary = CodecType::kTernary;

TEST(PushPrecisionBook, AnUncompressedChunkIsNotRecorded) {
  PushPrecisionBook book;
  book.Record(3, 1, 0, kNone, 0.0f, false, kNone);
  EXPECT_FALSE(book.Report(3).has_value());
}

// A worker raised to fp16 and then fp32, another staying ternary: the chunk
// reports the highest level, each change is an event from the level the
// worker was at, and a none push below the top level is a flush.
TEST(PushPrecisionBook, LevelsAreEachWorkersAndTheChunkShowsTheHighest) {
  PushPrecisionBook book;
  book.Record(7, 1, 0, kTernary, 1.0f, false, kNone);
  book.Record(7, 2, 0, kTernary, 1.0f, false, kNone);
  book.Record(7, 1, 1, kNone, 9.0f, false, kNone);  // a flush at ternary
  book.Record(7, 1, 2, kNone, 9.5f, true, kHalf);   // raised: the raise's flush
  book.Record(7, 1, 3, kHalf, 0.01f, true, kHalf);  // at fp16
  std::optional<PathPrecision> p = book.Report(7);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->codec, kHalf);
  EXPECT_TRUE(p->raised);
  EXPECT_EQ(p->flushes, 2u);
  ASSERT_EQ(p->events.size(), 1u);
  EXPECT_EQ(p->events[0].kind, PrecisionEvent::Kind::kRaise);
  EXPECT_EQ(p->events[0].from, kTernary);
  EXPECT_EQ(p->events[0].to, kHalf);
  EXPECT_EQ(p->events[0].clock, 2u);

  book.Record(7, 1, 4, kNone, 20.0f, true, kNone);  // raised again: fp32, not a flush
  p = book.Report(7);
  EXPECT_EQ(p->codec, kNone);
  EXPECT_EQ(p->flushes, 2u);
  EXPECT_EQ(p->events.back().from, kHalf);
  EXPECT_EQ(p->events.back().to, kNone);
  EXPECT_FLOAT_EQ(p->ratio, 20.0f);

  book.Record(7, 1, 5, kHalf, 0.1f, true, kHalf);  // steps down to fp16
  book.Record(7, 1, 6, kTernary, 0.1f, false, kNone);  // and to ternary
  p = book.Report(7);
  EXPECT_EQ(p->codec, kTernary);
  EXPECT_FALSE(p->raised);
  EXPECT_EQ(p->events.back().kind, PrecisionEvent::Kind::kRelax);
  EXPECT_EQ(p->events.back().from, kHalf);
  EXPECT_EQ(p->events.back().to, kTernary);
}

// A raise for owed descent ([owed descent] in common/job/precision.h) is
// recorded with what the path owed, not its error ratio.
TEST(PushPrecisionBook, ARaiseForOwedDescentSaysSo) {
  PushPrecisionBook book;
  constexpr CodecType kOneBit = CodecType::kOneBit, kInt8 = CodecType::kInt8;
  book.Record(7, 1, 0, kOneBit, 1.5f, false, kNone);
  book.Record(7, 1, 24, kOneBit, 1.4f, true, kInt8, /*owed_raise=*/0.62f);
  std::optional<PathPrecision> p = book.Report(7);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->codec, kInt8);
  ASSERT_EQ(p->events.size(), 1u);
  EXPECT_TRUE(p->events[0].owed);
  EXPECT_FLOAT_EQ(p->events[0].ratio, 0.62f);
  EXPECT_EQ(p->flushes, 0u) << "the raise's push went at onebit";
}

// A worker that warms up (raised to fp32 from its first push, before any
// ternary push named the chunk's codec) adds no event until the codec is
// known; stepping down to it is the first, and ends the warm-up; a later
// step down does not.
TEST(PushPrecisionBook, WarmUpBeforeTheCodecIsKnown) {
  PushPrecisionBook book(/*warmup_clocks=*/20);
  book.Record(1, 1, 0, kNone, 0.0f, true, kNone);
  std::optional<PathPrecision> p = book.Report(1);
  EXPECT_FALSE(p.has_value()) << "no compressed push yet";
  book.Record(1, 1, 20, kTernary, 0.0f, false, kNone);
  p = book.Report(1);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->codec, kTernary);
  EXPECT_EQ(p->flushes, 0u);
  ASSERT_EQ(p->events.size(), 1u);
  EXPECT_EQ(p->events[0].kind, PrecisionEvent::Kind::kRelax);
  EXPECT_EQ(p->events[0].from, kNone);
  EXPECT_EQ(p->events[0].to, kTernary);
  EXPECT_TRUE(p->events[0].warmup);
  EXPECT_EQ(DescribeEvent(p->events[0]), "none -> ternary at clock 20 (warm-up over)");

  constexpr CodecType kInt4 = CodecType::kInt4;
  book.Record(1, 1, 40, kInt4, 9.0f, true, kInt4);     // raised
  book.Record(1, 1, 1100, kTernary, 1.0f, false, kNone);  // and down again
  p = book.Report(1);
  ASSERT_EQ(p->events.size(), 3u);
  EXPECT_FALSE(p->events[2].warmup);

  // Without a warm-up a worker first seen raised (by a shard restored
  // mid-job) was raised for its error: its step down says so.
  PushPrecisionBook none;
  none.Record(1, 1, 0, kTernary, 1.0f, false, kNone);
  none.Record(1, 2, 500, kInt4, 9.0f, true, kInt4);
  none.Record(1, 2, 1600, kTernary, 1.0f, false, kNone);
  p = none.Report(1);
  ASSERT_EQ(p->events.size(), 2u);  // seen raised, then stepped down
  EXPECT_EQ(p->events[1].from, kInt4);
  EXPECT_FALSE(p->events[1].warmup);

  // With a warm-up: a worker that joins after it starts raised for its
  // first push only; one first seen raised by a shard restored mid-job was
  // raised for its error, and its step down is not the warm-up's end.
  PushPrecisionBook warm(/*warmup_clocks=*/20);
  warm.Record(1, 1, 0, kTernary, 1.0f, false, kNone);
  warm.Record(1, 2, 300, kNone, 0.0f, true, kNone);      // joined at 300
  warm.Record(1, 2, 301, kTernary, 1.0f, false, kNone);
  warm.Record(1, 3, 500, kInt4, 9.0f, true, kInt4);      // seen raised at 500
  warm.Record(1, 3, 1600, kTernary, 1.0f, false, kNone);
  p = warm.Report(1);
  ASSERT_EQ(p->events.size(), 4u);  // each seen raised, then stepped down
  EXPECT_EQ(DescribeEvent(p->events[1]), "none -> ternary at clock 301 (warm-up over)");
  EXPECT_EQ(p->events[3].from, kInt4);
  EXPECT_FALSE(p->events[3].warmup) << DescribeEvent(p->events[3]);
}

}  // namespace
}  // namespace gradstream::shard
