// PrecisionController: flushes, raises, relaxes and warm-up, driven by the
// error figures a lossy path reports.
#include "common/job/precision.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace gradstream {
namespace {

PrecisionPolicy Ternary(double bound = 8.0) {
  PrecisionPolicy p;
  p.ladder = LadderFrom(CodecType::kTernary);
  p.bound = bound;
  p.min_flush_interval = 8;  // the default (3 x bound) is checked below
  p.relax_after = 50;
  return p;
}

TEST(PrecisionController, AContractingPathIsLeftAlone) {
  PrecisionController c(Ternary());
  for (uint64_t clock = 0; clock < 1000; ++clock) {
    EXPECT_EQ(c.Codec(), CodecType::kTernary);
    c.Observe(clock, /*error2=*/4.0, /*signal2=*/1.0, /*value2=*/400.0);
  }
  EXPECT_DOUBLE_EQ(c.ratio(), 2.0);
  EXPECT_DOUBLE_EQ(c.relative(), 0.1);
  EXPECT_EQ(c.flushes(), 0u);
  EXPECT_TRUE(c.events().empty());
}

// A residual that random-walks (stochastic ternary with error feedback):
// its energy grows by the signal's each clock until a flush clears it.
TEST(PrecisionController, AGrowingResidualIsFlushedAtTheBound) {
  PrecisionController c(Ternary());
  double error2 = 0.0;
  int flushed_at_ratio_over_bound = 0;
  for (uint64_t clock = 0; clock < 1000; ++clock) {
    const bool flush = c.Flush();
    EXPECT_EQ(c.Codec(), flush ? CodecType::kNone : CodecType::kTernary);
    error2 = flush ? 0.0 : error2 + 1.0;
    c.Observe(clock, error2, 1.0, 0.0);
    if (c.Flush()) flushed_at_ratio_over_bound += c.ratio() > 8.0;
    EXPECT_LE(c.ratio(), std::sqrt(65.0));  // never more than one clock past the bound
  }
  // sqrt(t) > 8 after 65 clocks: a flush every 66 clocks, none raised.
  EXPECT_EQ(c.flushes(), 1000u / 66);
  EXPECT_EQ(flushed_at_ratio_over_bound, static_cast<int>(c.flushes()));
  EXPECT_EQ(c.level_codec(), CodecType::kTernary);
  EXPECT_TRUE(c.events().empty());
}

// See [owed descent]: a residual along the signal is raised however small
// its norm; one as large that points every way (noise) is not.
TEST(PrecisionController, APathThatOwesDescentIsRaised) {
  PrecisionPolicy onebit = Ternary();
  onebit.ladder = LadderFrom(CodecType::kOneBit);
  PrecisionController c(onebit);
  uint64_t clock = 0;
  for (; c.level_codec() == CodecType::kOneBit && clock < 100; clock += kMeasureEvery) {
    // |e| = |s| at 37 degrees to it: 0.8 clocks of descent owed, the error
    // ratio 1, far under 8.
    c.Observe(clock, /*error2=*/1.0, /*signal2=*/1.0, 0.0, /*dot=*/0.8);
  }
  // Raised as soon as the average counts: at its kMinOwedMeasurements-th
  // measurement (an average from 0 would have taken 8).
  EXPECT_EQ(clock, kMinOwedMeasurements * kMeasureEvery);
  EXPECT_EQ(c.level_codec(), CodecType::kInt4);
  EXPECT_EQ(c.Codec(), CodecType::kNone) << "the raise sends what onebit owed";
  EXPECT_EQ(c.flushes(), 0u);
  ASSERT_EQ(c.events().size(), 1u);
  EXPECT_TRUE(c.events().back().owed);
  EXPECT_EQ(DescribeEvent(c.events().back()),
            "onebit -> int4 at clock 13 (owes 0.8 clocks of descent on average)");

  // Owing just past the bound, with some scatter (onebit on the ViT's large
  // tensors): raised within 8 measurements.
  PrecisionController near(onebit);
  uint64_t t = 0;
  for (; near.level_codec() == CodecType::kOneBit && t < 400; t += kMeasureEvery) {
    const double dot = (t / kMeasureEvery) % 2 == 0 ? 0.60 : 0.52;
    near.Observe(t, 1.0, 1.0, 0.0, dot);
  }
  EXPECT_LE(t, 8 * kMeasureEvery);
  EXPECT_EQ(near.level_codec(), CodecType::kInt4);

  // As large, but along the signal one measurement in two and against it
  // the next; a spike of 3 clocks every 100 measurements, wherever they fall.
  for (uint64_t first = 0; first < 8; ++first) {
    PrecisionController noise(onebit);
    for (uint64_t i = 0; i < 1000; ++i) {
      const double dot = i >= first && (i - first) % 100 == 0 ? 3.0 : i % 2 == 0 ? 1.0 : -1.0;
      noise.Observe(i * kMeasureEvery, 1.0, 1.0, 0.0, dot);
    }
    EXPECT_EQ(noise.level_codec(), CodecType::kOneBit) << "first spike at " << first;
    EXPECT_TRUE(noise.events().empty());
  }

  onebit.max_owed = 0;  // off
  PrecisionController off(onebit);
  for (uint64_t t = 0; t < 400; t += kMeasureEvery) off.Observe(t, 1.0, 1.0, 0.0, 1.0);
  EXPECT_EQ(off.level_codec(), CodecType::kOneBit);
}

TEST(PrecisionController, FlushesTooCloseTogetherRaiseThePath) {
  PrecisionController c(Ternary());
  c.Observe(10, 100.0, 1.0, 0.0);  // 10 clocks of signal: flush
  EXPECT_TRUE(c.Flush());
  c.Observe(11, 0.0, 1.0, 0.0);
  c.Observe(12, 100.0, 1.0, 0.0);  // over again 2 clocks later: raise to int4
  EXPECT_EQ(c.level_codec(), CodecType::kInt4);
  EXPECT_TRUE(c.raised());
  EXPECT_EQ(c.Codec(), CodecType::kNone) << "the raise flushes what ternary owed";
  ASSERT_EQ(c.events().size(), 1u);
  const PrecisionEvent& e = c.events().back();
  EXPECT_EQ(e.kind, PrecisionEvent::Kind::kRaise);
  EXPECT_EQ(e.clock, 13u);
  EXPECT_EQ(e.from, CodecType::kTernary);
  EXPECT_EQ(e.to, CodecType::kInt4);
  EXPECT_DOUBLE_EQ(e.ratio, 10.0);
  EXPECT_EQ(DescribeEvent(e),
            "ternary -> int4 at clock 13 (error 10 clocks of signal again within the flush "
            "interval)");
  c.Observe(13, 0.0, 1.0, 0.0);
  EXPECT_EQ(c.Codec(), CodecType::kInt4);
  c.Observe(14, 100.0, 1.0, 0.0);  // int4 does not keep up either: int8
  EXPECT_EQ(c.level_codec(), CodecType::kInt8);
  EXPECT_EQ(c.events().back().from, CodecType::kInt4);
  EXPECT_EQ(c.events().back().to, CodecType::kInt8);
  c.Observe(15, 0.0, 1.0, 0.0);
  c.Observe(16, 100.0, 1.0, 0.0);  // nor int8: fp32
  EXPECT_EQ(c.level_codec(), CodecType::kNone);
  EXPECT_EQ(c.events().back().from, CodecType::kInt8);
  EXPECT_EQ(c.events().back().to, CodecType::kNone);
}

TEST(PrecisionController, TheLadderGoesThroughInt4AndInt8WhereTheEncoderHasThem) {
  EXPECT_EQ(LadderFrom(CodecType::kTernary),
            (std::vector<CodecType>{CodecType::kTernary, CodecType::kInt4, CodecType::kInt8,
                                    CodecType::kNone}));
  EXPECT_EQ(LadderFrom(CodecType::kInt4),
            (std::vector<CodecType>{CodecType::kInt4, CodecType::kInt8, CodecType::kNone}));
  EXPECT_EQ(LadderFrom(CodecType::kInt8),
            (std::vector<CodecType>{CodecType::kInt8, CodecType::kNone}));
  EXPECT_EQ(LadderFrom(CodecType::kHalf),
            (std::vector<CodecType>{CodecType::kHalf, CodecType::kNone}));
  EXPECT_EQ(LadderFrom(CodecType::kNone), (std::vector<CodecType>{CodecType::kNone}));
  EXPECT_EQ(DeviceLadderFrom(CodecType::kOneBit),
            (std::vector<CodecType>{CodecType::kOneBit, CodecType::kNone}));
  EXPECT_TRUE(MorePrecise(CodecType::kNone, CodecType::kHalf));
  EXPECT_TRUE(MorePrecise(CodecType::kHalf, CodecType::kInt8));
  EXPECT_TRUE(MorePrecise(CodecType::kInt8, CodecType::kInt4));
  EXPECT_TRUE(MorePrecise(CodecType::kInt4, CodecType::kTernary));
  EXPECT_FALSE(MorePrecise(CodecType::kTwoBit, CodecType::kTernary));
  // A tensor's chunks merge to the highest level any of them is at.
  PathPrecision t{CodecType::kTernary, 1.0, 0.0, 0, {}};
  MergePaths(PathPrecision{CodecType::kInt8, 2.0, 0.0, 1, {}, /*raised=*/true}, &t);
  EXPECT_EQ(t.codec, CodecType::kInt8);
  EXPECT_TRUE(t.raised);
  MergePaths(PathPrecision{CodecType::kTernary, 0.5, 0.0, 0, {}}, &t);
  EXPECT_EQ(t.codec, CodecType::kInt8);
  EXPECT_EQ(t.ratio, 2.0);
}

TEST(PrecisionController, ARaisedPathStepsDownAfterCalmAndWaitsLongerEachTime) {
  PrecisionController c(Ternary());
  c.Observe(0, 100.0, 1.0, 0.0);  // ternary -> int4
  c.Observe(1, 100.0, 1.0, 0.0);  // -> int8
  c.Observe(2, 100.0, 1.0, 0.0);  // -> fp32
  ASSERT_EQ(c.level_codec(), CodecType::kNone);
  uint64_t clock = 3;
  while (c.level_codec() == CodecType::kNone) c.Observe(clock++, 0.0, 1.0, 0.0);
  EXPECT_EQ(clock, 53u);  // relax_after = 50 calm clocks since the raise
  EXPECT_EQ(c.events().back().kind, PrecisionEvent::Kind::kRelax);
  // Raised again, the next step down waits 100 clocks.
  c.Observe(clock++, 100.0, 1.0, 0.0);
  c.Observe(clock++, 100.0, 1.0, 0.0);
  ASSERT_EQ(c.level_codec(), CodecType::kNone);
  const uint64_t raised = clock;
  while (c.level_codec() == CodecType::kNone) c.Observe(clock++, 0.0, 1.0, 0.0);
  EXPECT_EQ(clock - raised, 100u);
}

TEST(PrecisionController, WarmUpSendsFullPrecisionFirst) {
  PrecisionPolicy p = Ternary();
  p.warmup_clocks = 10;
  PrecisionController c(p);
  for (uint64_t clock = 0; clock < 10; ++clock) {
    EXPECT_EQ(c.Codec(), CodecType::kNone) << clock;
    c.Observe(clock, 1e6, 1.0, 0.0);  // no raise or flush while it warms up
  }
  EXPECT_EQ(c.Codec(), CodecType::kTernary);
  EXPECT_EQ(c.flushes(), 0u);
  ASSERT_EQ(c.events().size(), 1u);
  EXPECT_TRUE(c.events().back().warmup);
  EXPECT_EQ(DescribeEvent(c.events().back()), "none -> ternary at clock 10 (warm-up over)");
}

// A codec unfit for the tensor (twobit's fixed t far above the gradients:
// nothing passes, the residual is the sum of the gradients) is raised at its
// level's 4th clock, not at the 4th measurement of every kMeasureEvery:
// each level is measured at each of its first clocks, then every 4th.
TEST(PrecisionController, ALevelIsMeasuredAtEachOfItsFirstClocks) {
  PrecisionPolicy twobit = Ternary();
  twobit.ladder = LadderFrom(CodecType::kTwoBit);
  PrecisionController c(twobit);
  std::vector<uint64_t> measured;
  for (uint64_t clock = 0; clock < 40; ++clock) {
    if (!c.MeasureDue(clock)) {
      c.Skip();
      continue;
    }
    measured.push_back(clock);
    // Sent as twobit: nothing passes, clock + 1 gradients owed along s.
    // Sent exact (the raise's flush) or at int4: nothing owed.
    const double owed = c.Codec() == CodecType::kTwoBit ? clock + 1.0 : 0.0;
    c.Observe(clock, owed * owed, 1.0, 0.0, owed);
  }
  ASSERT_EQ(c.events().size(), 1u);
  EXPECT_EQ(DescribeEvent(c.events().back()),
            "twobit -> int4 at clock 4 (owes 2.7 clocks of descent on average)");
  // twobit's clocks 0-3, the raise's flush at 4, int4's first clocks 5-8,
  // then every 4th.
  EXPECT_EQ(measured, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 28,
                                             32, 36}));

  // The top of the ladder owes nothing to measure early; a warm-up neither.
  PrecisionController top(PrecisionPolicy{});
  EXPECT_TRUE(top.MeasureDue(0));
  EXPECT_FALSE(top.MeasureDue(1));
  twobit.warmup_clocks = 2;
  PrecisionController warm(twobit);
  EXPECT_FALSE(warm.MeasureDue(1));
  warm.Observe(1, 0.0, 1.0, 0.0);  // the warm-up's last clock: twobit from 2
  EXPECT_EQ(warm.Codec(), CodecType::kTwoBit);
  EXPECT_TRUE(warm.MeasureDue(2));
  EXPECT_TRUE(warm.MeasureDue(5));
}

TEST(PrecisionController, BoundZeroMeasuresOnly) {
  PrecisionController c(Ternary(/*bound=*/0.0));
  for (uint64_t clock = 0; clock < 100; ++clock) c.Observe(clock, 1e6, 1.0, 0.0);
  EXPECT_DOUBLE_EQ(c.ratio(), 1000.0);
  EXPECT_EQ(c.Codec(), CodecType::kTernary);
  EXPECT_EQ(c.flushes(), 0u);
}

TEST(PrecisionController, AClockWithoutSignalIsNotJudged) {
  PrecisionController c(Ternary());
  c.Observe(0, 1.0, 0.0, 0.0);  // a tensor backward did not reach
  EXPECT_EQ(c.ratio(), std::numeric_limits<double>::infinity());
  EXPECT_FALSE(c.Flush());
  c.Observe(1, 0.0, 0.0, 0.0);  // nothing owed, nothing sent: 0, not NaN
  EXPECT_EQ(c.ratio(), 0.0);
}

// A codec that passes nothing (a fixed threshold far above the gradients):
// the residual grows by one clock of gradient per clock and passes the bound
// after 9 clocks, well before a random walk would: raised at once (the
// start counts as a flush), its residual then sent whole.
TEST(PrecisionController, AStalledCodecIsRaisedAtItsFirstCrossing) {
  PrecisionPolicy p = Ternary();
  p.min_flush_interval = PrecisionPolicy().min_flush_interval;
  PrecisionController c(p);
  double error = 0;
  uint64_t clock = 0;
  for (; clock < 100 && !c.raised(); ++clock) {
    error += 1.0;
    c.Observe(clock, error * error, 1.0, 0.0);
  }
  ASSERT_EQ(c.level_codec(), CodecType::kInt4);
  EXPECT_EQ(c.events().back().clock, 9u);  // over after clock 8: int4 from clock 9
  EXPECT_EQ(c.flushes(), 0u);
}

// The flush spacing follows the bound (3 x bound): with a bound of 16 a
// crossing 40 clocks after the start is too close (raise); with a bound of 8,
// one 40 clocks after the start is not (flush).
TEST(PrecisionController, TheFlushSpacingFollowsTheBound) {
  for (double bound : {16.0, 8.0}) {
    PrecisionPolicy p = Ternary(bound);
    p.min_flush_interval = PrecisionPolicy().min_flush_interval;
    PrecisionController c(p);
    for (uint64_t clock = 0; clock < 40; ++clock) c.Observe(clock, 1.0, 1.0, 0.0);
    c.Observe(40, 4 * bound * bound, 1.0, 0.0);  // 2 x bound
    if (bound == 16.0) {
      EXPECT_EQ(c.level_codec(), CodecType::kInt4) << bound;
      EXPECT_EQ(c.flushes(), 0u) << bound;
    } else {
      EXPECT_EQ(c.level_codec(), CodecType::kTernary) << bound;
      EXPECT_EQ(c.flushes(), 1u) << bound;
    }
  }
}

TEST(PrecisionController, AnUncompressedPathNeverActs) {
  PrecisionPolicy p = Ternary();
  p.ladder = LadderFrom(CodecType::kNone);
  PrecisionController c(p);
  c.Observe(0, 100.0, 1.0, 0.0);
  c.Observe(1, 100.0, 1.0, 0.0);
  EXPECT_EQ(c.Codec(), CodecType::kNone);
  EXPECT_TRUE(c.events().empty());
}

// A pull is held to half the job's bound: the error that a push path keeps
// (6 clocks of signal under the default 8) makes a pull path flush.
TEST(PrecisionController, PullsAreHeldToHalfTheBound) {
  PrecisionController push(PushPrecisionPolicy(CodecType::kTernary, 8.0, 0));
  PrecisionController pull(PullPrecisionPolicy(CodecType::kTernary, 8.0, 0));
  push.Observe(50, 36.0, 1.0, 0.0);
  pull.Observe(50, 36.0, 1.0, 0.0);
  EXPECT_FALSE(push.Flush());
  EXPECT_TRUE(pull.Flush());
  PrecisionController off(PullPrecisionPolicy(CodecType::kTernary, -1.0, 0));  // measure only
  off.Observe(50, 1e6, 1.0, 0.0);
  EXPECT_FALSE(off.Flush());
}

// A pull bound of its own replaces half the job's: 3 clocks of error pass 2,
// not 4; and a negative one measures only, whatever the job's bound.
TEST(PrecisionController, APullBoundOfItsOwnReplacesHalfTheBound) {
  PrecisionController half(PullPrecisionPolicy(CodecType::kTernary, 8.0, 0));
  PrecisionController own(
      PullPrecisionPolicy(CodecType::kTernary, 8.0, 0, kDefaultPrecisionMaxOwed, 2.0));
  half.Observe(50, 9.0, 1.0, 0.0);
  own.Observe(50, 9.0, 1.0, 0.0);
  EXPECT_FALSE(half.Flush());
  EXPECT_TRUE(own.Flush());
  PrecisionController off(
      PullPrecisionPolicy(CodecType::kTernary, 8.0, 0, kDefaultPrecisionMaxOwed, -1.0));
  off.Observe(50, 1e6, 1.0, 0.0);
  EXPECT_FALSE(off.Flush());
}

// [link choice]: a probe of codec and exact windows decides by the median
// step time, holds, and probes again; the hold doubles while probes agree.
TEST(LinkChoice, ProbesThenKeepsTheFasterAndProbesAgain) {
  LinkChoicePolicy p;
  p.enabled = true;
  p.start = 10;
  p.window = 4;
  p.hold = 20;
  LinkChoice link(p);
  for (uint64_t c = 0; c < 10; ++c) EXPECT_FALSE(link.Exact(c)) << "codecs before the start";
  // The probe: clocks 10-13 codecs, 14-17 exact, 18-21 codecs, 22-25 exact.
  // Exact steps take 0.05 s, codec steps 0.08 s; a window's first clock
  // (the switch) 1 s, which the medians must ignore.
  for (uint64_t c = 10; c < 26; ++c) {
    const bool exact = link.Exact(c);
    EXPECT_EQ(exact, ((c - 10) / 4) % 2 == 1) << c;
    link.Observe(c, (c - 10) % 4 == 0 ? 1.0 : exact ? 0.05 : 0.08);
  }
  ASSERT_EQ(link.decisions().size(), 1u);
  EXPECT_TRUE(link.decisions().back().exact);
  EXPECT_DOUBLE_EQ(link.decisions().back().exact_seconds, 0.05);
  EXPECT_DOUBLE_EQ(link.decisions().back().codec_seconds, 0.08);
  for (uint64_t c = 26; c < 46; ++c) {
    EXPECT_TRUE(link.Exact(c)) << "held: " << c;
    link.Observe(c, 0.05);
  }
  // The next probe (46-49 codecs, 50-53 exact, ...) finds exact steps twice
  // as slow (the link got slower): the exact window's first measured clock
  // ends the probe at clock 51, and the codecs hold 20 clocks.
  for (uint64_t c = 46; c < 52; ++c) link.Observe(c, link.Exact(c) ? 0.2 : 0.1);
  ASSERT_EQ(link.decisions().size(), 2u);
  EXPECT_EQ(link.decisions().back().clock, 51u);
  EXPECT_FALSE(link.decisions().back().exact);
  for (uint64_t c = 52; c < 72; ++c) EXPECT_FALSE(link.Exact(c)) << "held: " << c;
  // A third probe that agrees holds twice as long: 40 clocks.
  for (uint64_t c = 72; c < 78; ++c) link.Observe(c, link.Exact(c) ? 0.2 : 0.1);
  ASSERT_EQ(link.decisions().size(), 3u);
  EXPECT_EQ(link.decisions().back().clock, 77u);
  EXPECT_FALSE(link.Exact(78 + 39));
  EXPECT_FALSE(link.Exact(78 + 40)) << "the fourth probe opens with codecs";
  EXPECT_TRUE(link.Exact(78 + 40 + 4)) << "then exact";
}

TEST(LinkChoice, ExactMustWinByTheMarginAndOffNeverProbes) {
  LinkChoicePolicy p;
  p.enabled = true;
  p.start = 0;
  p.window = 3;
  p.hold = 10;
  LinkChoice link(p);
  for (uint64_t c = 0; c < 12; ++c) link.Observe(c, link.Exact(c) ? 0.098 : 0.1);
  ASSERT_EQ(link.decisions().size(), 1u);
  EXPECT_FALSE(link.decisions().back().exact) << "2% faster is within the 5% margin";
  // Tick times consecutive clocks: step c lasts from Tick(c) to Tick(c + 1).
  // The probe (clocks 0-11) ends when Tick(12) observes step 11.
  LinkChoice ticked(p);
  absl::Time t = absl::FromUnixSeconds(1000);
  for (uint64_t c = 0; c < 12; ++c) {
    EXPECT_EQ(ticked.Tick(c, t), nullptr) << c;
    t += absl::Seconds(ticked.Exact(c) ? 0.05 : 0.1);
  }
  const LinkDecision* d = ticked.Tick(12, t);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->exact);
  EXPECT_DOUBLE_EQ(d->exact_seconds, 0.05);
  EXPECT_DOUBLE_EQ(d->codec_seconds, 0.1);
  EXPECT_EQ(DescribeLinkDecision(*d), "exact (median step 0.05 s exact, 0.1 s with the codecs)");
  LinkChoice off(LinkChoicePolicy{});
  for (uint64_t c = 0; c < 1000; ++c) {
    EXPECT_FALSE(off.Exact(c));
    off.Observe(c, 1.0);
  }
  EXPECT_TRUE(off.decisions().empty());
}

}  // namespace
}  // namespace gradstream
