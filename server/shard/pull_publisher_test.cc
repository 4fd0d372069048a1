// PullPublisher on its own: what a pull gets (deltas, snapshot, nothing),
// that the published copy trails the parameters by a bounded residual, that
// the history stays within a snapshot's weight, the checkpoint section, and
// eager publication (see [eager publish]).
#include "server/shard/pull_publisher.h"

#include <cmath>
#include <cstring>
#include <random>

#include "common/codec/published.h"
#include "common/job/precision.h"
#include "gtest/gtest.h"
#include "server/shard/checkpoint.h"

namespace gradstream::shard {
namespace {

constexpr uint32_t kElems = 4096;

std::vector<float> Step(std::vector<float> p, std::mt19937& rng, float size) {
  std::normal_distribution<float> d(0.0f, size);
  for (float& x : p) x += d(rng);
  return p;
}

// The worker's side: what PublishedCopies does, without the network.
struct Worker {
  std::vector<float> copy;
  HeldCopy held;
  bool has = false;
  void Take(const PulledChunk& out) {
    ASSERT_TRUE(out.published);
    if (!out.values.empty()) {
      copy.resize(out.values.size() / sizeof(float));
      std::memcpy(copy.data(), out.values.data(), out.values.size());
    }
    for (const EncodedDelta& d : out.deltas) {
      ASSERT_TRUE(ApplyPublishedDelta(d.header, d.payload, absl::MakeSpan(copy)).ok());
    }
    ASSERT_EQ(PublishedChecksum(copy), out.checksum) << "worker drifted at " << out.version;
    held = HeldCopy{out.chunk_id, out.version, out.checksum};
    has = true;
  }
  const HeldCopy* held_or_null() const { return has ? &held : nullptr; }
};

// Chunk 7 (kElems) of `pub` at version 0, its first pull taken by `w`.
std::vector<float> FirstPull(PullPublisher& pub, std::mt19937& rng, Worker* w) {
  std::vector<float> params = Step(std::vector<float>(kElems, 0.0f), rng, 1.0f);
  PulledChunk out;
  pub.Serve(7, params, 0, 0, nullptr, &out);
  w->Take(out);
  return params;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double{a[i]} - b[i]));
  return m;
}

double SquaredDistance(const std::vector<float>& a, const std::vector<float>& b) {
  double d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) d2 += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
  return d2;
}

TEST(PullPublisher, WorkersFollowByDeltasAndNeverDrift) {
  for (CodecType codec : {CodecType::kTwoBit, CodecType::kTernary, CodecType::kOneBit}) {
    SCOPED_TRACE(CodecTypeName(codec));
    PullPublisher pub(codec, /*once_per_clock=*/false, {{7, kElems}});
    std::mt19937 rng(1);
    std::vector<float> params = Step(std::vector<float>(kElems, 0.0f), rng, 1.0f);
    Worker fast, slow;
    PulledChunk out;
    out.chunk_id = 7;
    // First pull: the parameters whole, exactly.
    EXPECT_EQ(pub.Serve(7, params, 0, 0, nullptr, &out), kElems * sizeof(float));
    fast.Take(out);
    EXPECT_EQ(fast.copy, params);
    slow = fast;
    size_t delta_bytes = 0;
    for (uint64_t v = 1; v <= 40; ++v) {
      params = Step(params, rng, 0.01f);
      delta_bytes += pub.Serve(7, params, v, v, fast.held_or_null(), &out);
      EXPECT_TRUE(out.values.empty());
      ASSERT_EQ(out.deltas.size(), 1u);
      fast.Take(out);
      // Error feedback keeps the published copy near the parameters.
      EXPECT_LT(MaxAbsDiff(fast.copy, params), 0.2) << "version " << v;
      if (v % 3 == 0) {  // a slower worker catches up with a chain of 3
        pub.Serve(7, params, v, v, slow.held_or_null(), &out);
        EXPECT_EQ(out.deltas.size(), 3u);
        slow.Take(out);
        EXPECT_EQ(slow.copy, fast.copy);
      }
    }
    EXPECT_LT(delta_bytes * 8, 40 * kElems * sizeof(float)) << "deltas must be compressed";
    // Asking again at the same version: nothing to send.
    EXPECT_EQ(pub.Serve(7, params, 40, 40, fast.held_or_null(), &out), 0u);
    EXPECT_TRUE(out.values.empty() && out.deltas.empty());
  }
}

// Stochastic ternary's error is as large as what it encodes, so with error
// feedback p - q random-walks; the precision control holds it to its bound
// in clocks of update by flushes. A flush goes out as an int8 delta chained
// after the clock's ternary one ([fine flush]): a quarter of a snapshot's
// bytes at most, and the copy left a small fraction of the bound away.
TEST(PullPublisher, ErrorIsHeldToTheBoundByFlushes) {
  auto run = [](double bound, double* worst_ratio, PathPrecision* last) {
    PrecisionPolicy policy;
    policy.bound = bound;
    PullPublisher pub(CodecType::kTernary, false, {{7, kElems}}, policy);
    std::mt19937 rng(3);
    Worker w;
    std::vector<float> params = FirstPull(pub, rng, &w);
    PulledChunk out;
    *worst_ratio = 0;
    int flushed = 0;
    for (uint64_t v = 1; v <= 400; ++v) {
      const std::vector<float> before = params;
      params = Step(params, rng, 0.01f);
      const size_t bytes = pub.Serve(7, params, v, v, w.held_or_null(), &out);
      EXPECT_TRUE(out.values.empty()) << "no snapshot after the first, version " << v;
      w.Take(out);
      // The worker's copy against this clock's update, measured here at every
      // version (the shard measures at the publications MeasureDue names).
      const double ratio =
          std::sqrt(SquaredDistance(params, w.copy) / SquaredDistance(params, before));
      if (out.deltas.size() == 2) {
        ++flushed;
        EXPECT_EQ(out.deltas[0].header.codec, CodecType::kTernary);
        EXPECT_EQ(out.deltas[1].header.codec, kFlushCodec);
        EXPECT_LT(bytes, kElems * sizeof(float) / 3)
            << "the clock's delta and the int8 flush weigh under a third of a snapshot";
        EXPECT_LE(ratio, kFlushLeft * bound) << "a flush leaves little, version " << v;
      } else {
        ASSERT_EQ(out.deltas.size(), 1u);
      }
      *worst_ratio = std::max(*worst_ratio, ratio);
    }
    *last = *pub.Precision(7);
    EXPECT_EQ(static_cast<uint64_t>(flushed), last->flushes);
  };
  double controlled, uncontrolled;
  PathPrecision with, without;
  run(8.0, &controlled, &with);
  run(-1.0, &uncontrolled, &without);
  EXPECT_GT(uncontrolled, 16.0) << "ternary's residual grows without control";
  // Measured every kMeasureEvery publications: at most that many clocks'
  // growth past the bound.
  EXPECT_LE(controlled, 8.0 + kMeasureEvery);
  EXPECT_GT(with.flushes, 2u);
  EXPECT_EQ(with.codec, CodecType::kTernary) << "flushes far apart: not raised";
  EXPECT_TRUE(with.events.empty());
  EXPECT_EQ(without.flushes, 0u);
  EXPECT_GT(with.relative, 0.0);
}

// A path at int8 or finer gains nothing from an int8 delta: its flush is the
// exact snapshot, which the worker then holds bit for bit.
TEST(PullPublisher, AFlushOfAnInt8PathIsTheSnapshot) {
  PrecisionPolicy policy;
  policy.bound = 1e-4;  // int8's own error is past it: every allowed clock flushes
  PullPublisher pub(CodecType::kInt8, false, {{7, kElems}}, policy);
  std::mt19937 rng(3);
  Worker w;
  std::vector<float> params = FirstPull(pub, rng, &w);
  PulledChunk out;
  int snapshots = 0;
  for (uint64_t v = 1; v <= 40; ++v) {
    params = Step(params, rng, 0.01f);
    pub.Serve(7, params, v, v, w.held_or_null(), &out);
    w.Take(out);
    if (!out.values.empty()) {
      ++snapshots;
      EXPECT_TRUE(out.deltas.empty());
      EXPECT_EQ(w.copy, params) << "a flush publishes p exactly";
    }
  }
  EXPECT_GT(snapshots, 0);
  EXPECT_EQ(static_cast<uint64_t>(snapshots), pub.Precision(7)->flushes);
}

// The controller's figures are the published copy's distance from the
// parameters, against the update and the parameters, as fp64 sums would give
// them ([error sums]): on a chunk that is not a whole number of vectors or
// blocks, and on parameters whose squares overflow fp32.
TEST(PullPublisher, TheMeasuredErrorIsTheCopysDistance) {
  constexpr uint32_t kOdd = 3 * 1024 + 13;
  for (const float magnitude : {1.0f, 1e20f}) {
    SCOPED_TRACE(magnitude);
    PrecisionPolicy policy;
    policy.bound = -1.0;  // measure only
    PullPublisher pub(CodecType::kTernary, false, {{7, kOdd}}, policy);
    std::mt19937 rng(5);
    std::vector<float> params = Step(std::vector<float>(kOdd, 0.0f), rng, magnitude);
    Worker w;
    PulledChunk out;
    pub.Serve(7, params, 0, 0, nullptr, &out);
    w.Take(out);
    for (uint64_t v = 1; v <= 2 * kMeasureEvery; ++v) {
      const std::vector<float> before = params;
      params = Step(params, rng, 0.01f * magnitude);
      pub.Serve(7, params, v, v, w.held_or_null(), &out);
      w.Take(out);
      if (v % kMeasureEvery != 0) continue;  // measure-only: no level's first clocks to measure
      double e2 = 0, s2 = 0, v2 = 0;
      for (uint32_t i = 0; i < kOdd; ++i) {
        const double p = params[i];
        e2 += (p - w.copy[i]) * (p - w.copy[i]);
        s2 += (p - before[i]) * (p - before[i]);
        v2 += p * p;
      }
      ASSERT_GT(e2, 0.0);
      const PathPrecision got = *pub.Precision(7);
      EXPECT_NEAR(got.ratio, std::sqrt(e2 / s2), 1e-5 * std::sqrt(e2 / s2)) << "version " << v;
      EXPECT_NEAR(got.relative, std::sqrt(e2 / v2), 1e-5 * std::sqrt(e2 / v2)) << "version " << v;
    }
  }
}

// A pull is measured where MeasureDue says: at each of its level's first
// publications after the first (a codec unfit for the chunk is caught there),
// then every kMeasureEvery-th; the publications between cost no pass over
// the chunk. Each measurement reports a new ratio; no other moves it.
TEST(PullPublisher, MeasuredAtTheLevelsFirstPublicationsThenEveryFourth) {
  PrecisionPolicy policy;
  policy.bound = 1e9;  // never flushes nor raises: one level throughout
  PullPublisher pub(CodecType::kTernary, false, {{7, kElems}}, policy);
  std::mt19937 rng(6);
  Worker w;
  std::vector<float> params = FirstPull(pub, rng, &w);
  PulledChunk out;
  std::vector<uint64_t> measured;
  double last_ratio = 0.0;
  for (uint64_t v = 1; v <= 16; ++v) {
    params = Step(params, rng, 0.01f);
    pub.Serve(7, params, v, v, w.held_or_null(), &out);
    w.Take(out);
    const double ratio = pub.Precision(7)->ratio;
    if (ratio != last_ratio) measured.push_back(v);
    last_ratio = ratio;
  }
  EXPECT_EQ(measured, (std::vector<uint64_t>{1, 2, 3, 4, 8, 12, 16}));
}

// Raised, a chunk publishes int4 deltas (an eighth of a snapshot's bytes, an
// error of half a step at most); raised past int4 and int8, whole.
TEST(PullPublisher, FlushesTooCloseRaiseTheChunkToInt4ThenFp32) {
  for (const double bound : {0.5, 0.0}) {
    SCOPED_TRACE(bound);
    PrecisionPolicy policy;
    policy.bound = bound == 0.0 ? 1e-9 : bound;  // 1e-9: even int8 leaves more
    policy.min_flush_interval = 1000;
    PullPublisher pub(CodecType::kTernary, false, {{7, kElems}}, policy);
    std::mt19937 rng(4);
    std::vector<float> params = Step(std::vector<float>(kElems, 0.0f), rng, 1.0f);
    Worker w;
    PulledChunk out;
    pub.Serve(7, params, 0, 0, nullptr, &out);
    w.Take(out);
    for (uint64_t v = 1; v <= 10; ++v) {
      params = Step(params, rng, 0.01f);
      pub.Serve(7, params, v, v, w.held_or_null(), &out);
      w.Take(out);
    }
    const PathPrecision p = *pub.Precision(7);
    EXPECT_TRUE(p.raised);
    ASSERT_FALSE(p.events.empty());
    EXPECT_EQ(p.events.front().kind, PrecisionEvent::Kind::kRaise);
    EXPECT_EQ(p.events.front().from, CodecType::kTernary);
    EXPECT_EQ(p.events.front().to, CodecType::kInt4);
    params = Step(params, rng, 0.01f);
    const size_t bytes = pub.Serve(7, params, 11, 11, w.held_or_null(), &out);
    w.Take(out);
    if (bound == 0.5) {
      EXPECT_EQ(p.codec, CodecType::kInt4);
      ASSERT_EQ(out.deltas.size(), 1u);
      EXPECT_EQ(out.deltas[0].header.codec, CodecType::kInt4);
      EXPECT_LT(bytes, kElems * sizeof(float) * 15 / 100);
      EXPECT_LE(MaxAbsDiff(w.copy, params), out.deltas[0].header.scale / 2)
          << "error feedback leaves at most half an int4 step";
    } else {  // every version published whole: the worker holds p exactly
      EXPECT_EQ(p.codec, CodecType::kNone);
      EXPECT_FALSE(out.values.empty());
      EXPECT_EQ(w.copy, params);
    }
  }
}

// [owed descent] on the pull side: updates that keep a direction (heavy-
// tailed, as a layer's are). A onebit copy lags along them and the chunk is
// raised for it; a ternary copy's error is noise and owes nothing.
TEST(PullPublisher, ACopyThatOwesDescentIsRaised) {
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> m(kElems);
  for (float& x : m) x = d(rng) * std::fabs(d(rng));
  for (CodecType codec : {CodecType::kOneBit, CodecType::kTernary}) {
    SCOPED_TRACE(CodecTypeName(codec));
    PullPublisher pub(codec, false, {{7, kElems}});
    std::vector<float> params = Step(std::vector<float>(kElems, 0.0f), rng, 1.0f);
    Worker w;
    PulledChunk out;
    pub.Serve(7, params, 0, 0, nullptr, &out);
    w.Take(out);
    for (uint64_t v = 1; v <= 100; ++v) {
      for (size_t j = 0; j < kElems; ++j) params[j] -= 0.01f * (m[j] + 0.5f * d(rng));
      pub.Serve(7, params, v, v, w.held_or_null(), &out);
      w.Take(out);
    }
    const PathPrecision p = *pub.Precision(7);
    bool owed = false;
    for (const PrecisionEvent& e : p.events) owed |= e.owed;
    if (codec == CodecType::kOneBit) {
      ASSERT_FALSE(p.events.empty());
      EXPECT_TRUE(p.events.front().owed) << DescribeEvent(p.events.front());
      EXPECT_EQ(p.events.front().to, CodecType::kInt4);
      // Its 9th measurement: each of the level's first 4 publications, then
      // every kMeasureEvery-th (13 when every publication was measured).
      EXPECT_LE(p.events.front().clock, 7 * kMeasureEvery);
    } else {
      EXPECT_FALSE(owed);
    }
  }
}

TEST(PullPublisher, SnapshotForUnknownCopiesAndTooLongChains) {
  PullPublisher pub(CodecType::kTwoBit, false, {{0, kElems}});
  std::mt19937 rng(2);
  std::vector<float> params = Step(std::vector<float>(kElems, 0.0f), rng, 1.0f);
  Worker w;
  PulledChunk out;
  pub.Serve(0, params, 0, 0, nullptr, &out);
  w.Take(out);
  const HeldCopy old = w.held;
  // 20 twobit deltas weigh more than a snapshot (16): the oldest are gone.
  for (uint64_t v = 1; v <= 20; ++v) {
    params = Step(params, rng, 0.01f);
    pub.Serve(0, params, v, v, nullptr, &out);
  }
  pub.Serve(0, params, 20, 20, &old, &out);
  EXPECT_EQ(out.values.size(), kElems * sizeof(float)) << "too far behind: snapshot";
  w.Take(out);
  // A copy with the right version but other bits (a restarted shard's) is
  // not taken forward either.
  HeldCopy forged = w.held;
  forged.checksum ^= 1;
  pub.Serve(0, params, 20, 20, &forged, &out);
  EXPECT_FALSE(out.values.empty());
}

TEST(PullPublisher, OncePerClockPublishesForTheFastestReaderOnly) {
  PullPublisher pub(CodecType::kTwoBit, /*once_per_clock=*/true, {{0, kElems}});
  std::mt19937 rng(3);
  std::vector<float> params = Step(std::vector<float>(kElems, 0.0f), rng, 1.0f);
  PulledChunk out;
  pub.Serve(0, params, 0, /*reader_clock=*/5, nullptr, &out);
  params = Step(params, rng, 0.01f);
  pub.Serve(0, params, 1, /*reader_clock=*/4, nullptr, &out);  // slower reader
  EXPECT_EQ(out.version, 0u);
  pub.Serve(0, params, 1, /*reader_clock=*/6, nullptr, &out);
  EXPECT_EQ(out.version, 1u);
}

TEST(PullPublisher, Fp32ChunksArePublishedWholeEveryVersion) {
  // See [layer-wise pull]: a small tensor's chunk under a pull codec is the
  // true parameters at every version, still versioned and checksummed.
  PullPublisher pub(CodecType::kTwoBit, false, {{0, kElems}, {1, 64, /*pull_fp32=*/true}});
  std::mt19937 rng(5);
  std::vector<float> params = Step(std::vector<float>(64, 0.0f), rng, 1.0f);
  Worker w;
  PulledChunk out;
  out.chunk_id = 1;
  pub.Serve(1, params, 0, 0, nullptr, &out);
  w.Take(out);
  for (uint64_t v = 1; v <= 5; ++v) {
    params = Step(params, rng, 0.01f);
    EXPECT_EQ(pub.Serve(1, params, v, v, w.held_or_null(), &out), 64 * sizeof(float));
    EXPECT_TRUE(out.deltas.empty());
    w.Take(out);
    EXPECT_EQ(w.copy, params) << "version " << v;
  }
  EXPECT_EQ(pub.Serve(1, params, 5, 5, w.held_or_null(), &out), 0u) << "current: nothing to send";
}

TEST(PullPublisher, EagerPublishIsWhatAPullWouldHavePublished) {
  // See [eager publish]: publishing ahead of the pull changes nothing a
  // worker receives, bit for bit, and the pull then publishes nothing.
  PullPublisher eager(CodecType::kTwoBit, false, {{0, kElems}});
  PullPublisher lazy(CodecType::kTwoBit, false, {{0, kElems}});
  std::mt19937 rng(5);
  std::vector<float> params = Step(std::vector<float>(kElems, 0.0f), rng, 1.0f);
  Worker a, b;
  PulledChunk out;
  eager.Publish(0, params, 0, 0);
  eager.Serve(0, params, 0, 0, nullptr, &out);
  a.Take(out);
  lazy.Serve(0, params, 0, 0, nullptr, &out);
  b.Take(out);
  for (uint64_t v = 1; v <= 5; ++v) {
    params = Step(params, rng, 0.01f);
    eager.Publish(0, params, v, v);
    eager.Publish(0, params, v, v);  // a second call at the same version: no-op
    // The pull sees other parameters (a later push), yet gets version v:
    // the copy is current, so it is not published again.
    std::vector<float> later = Step(params, rng, 0.01f);
    eager.Serve(0, later, v, v, a.held_or_null(), &out);
    ASSERT_EQ(out.deltas.size(), 1u);
    a.Take(out);
    lazy.Serve(0, params, v, v, b.held_or_null(), &out);
    b.Take(out);
    EXPECT_EQ(a.held.checksum, b.held.checksum) << "version " << v;
    EXPECT_EQ(a.copy, b.copy);
  }
}

// [link choice] for pulls: with the link choice on, the probe's exact
// windows (reader clocks 2-3 and 6-7 for start 0, window 2) publish the
// parameters whole (a worker gets them exact, as values), the codec windows
// deltas; the worker never drifts across the switches. (No abort: this
// test's clocks take microseconds, whatever they publish.)
TEST(PullPublisher, TheLinkChoiceProbesWithWholePublications) {
  LinkChoicePolicy link;
  link.enabled = true;
  link.start = 0;
  link.window = 2;
  link.hold = 4;
  link.abort_ratio = 1e9;
  PullPublisher pub(CodecType::kTernary, /*once_per_clock=*/false, {{7, kElems}},
                    PrecisionPolicy{}, link);
  std::mt19937 rng(3);
  std::vector<float> params = Step(std::vector<float>(kElems, 0.0f), rng, 1.0f);
  Worker w;
  PulledChunk out;
  out.chunk_id = 7;
  pub.Serve(7, params, 0, 0, nullptr, &out);
  w.Take(out);
  for (uint64_t v = 1; v < 8; ++v) {
    params = Step(params, rng, 0.01f);
    pub.Serve(7, params, v, v, w.held_or_null(), &out);
    const bool exact = (v / 2) % 2 == 1;
    EXPECT_EQ(!out.values.empty(), exact) << "reader clock " << v;
    EXPECT_EQ(out.deltas.empty(), exact) << "reader clock " << v;
    w.Take(out);
    if (exact) {
      EXPECT_EQ(w.copy, params) << "reader clock " << v;
    }
    // Decided as the probe's last clock (7) ends; the stats carry it.
    EXPECT_FALSE(pub.LinkDecided().has_value()) << "reader clock " << v;
  }
  params = Step(params, rng, 0.01f);
  pub.Serve(7, params, 8, 8, w.held_or_null(), &out);
  const std::optional<LinkDecision> d = pub.LinkDecided();
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->clock, 7u);
  EXPECT_GT(d->codec_seconds, 0);
  EXPECT_EQ(out.values.empty(), !d->exact);
}

TEST(PullPublisher, CheckpointKeepsThePublishedCopy) {
  PullPublisher pub(CodecType::kTernary, false, {{3, kElems}});
  std::mt19937 rng(4);
  std::vector<float> params = Step(std::vector<float>(kElems, 0.0f), rng, 1.0f);
  PulledChunk out;
  pub.Serve(3, params, 0, 0, nullptr, &out);
  params = Step(params, rng, 0.01f);
  pub.Serve(3, params, 1, 1, nullptr, &out);
  JobSnapshot snap;
  snap.job_id = "j";
  snap.published.push_back(*pub.Save(3));
  absl::StatusOr<JobSnapshot> back = DecodeCheckpoint(EncodeCheckpoint(snap));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->published.size(), 1u);
  PullPublisher restored(CodecType::kTernary, false, {{3, kElems}});
  ASSERT_TRUE(restored.Restore(back->published[0]));
  // A worker holding the checkpointed copy goes on from it with no snapshot.
  Worker held;
  pub.Serve(3, params, 1, 1, nullptr, &out);
  held.Take(out);
  params = Step(params, rng, 0.01f);
  restored.Serve(3, params, 2, 2, held.held_or_null(), &out);
  EXPECT_TRUE(out.values.empty());
  EXPECT_EQ(out.deltas.size(), 1u);
  held.Take(out);
  // A checkpoint without the section (every older file) still loads.
  snap.published.clear();
  back = DecodeCheckpoint(EncodeCheckpoint(snap));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->published.empty());
}

}  // namespace
}  // namespace gradstream::shard
