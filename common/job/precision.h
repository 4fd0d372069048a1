// Per-chunk precision control of a lossy path: one PrecisionController per
// chunk per direction (a worker's pushes of it, a shard's pulls of it), fed
// with the error each send left behind, deciding how the next send is
// encoded. The one home of that policy; see docs/design/precision-control.md.
//
// The error is measured in clocks of signal: ratio = |e| / |s|, where e is
// the residual the path still owes (a push's error-feedback residual, a
// pull's p - q) and s what this clock added (the gradient, the parameter
// update). A codec that contracts keeps the ratio bounded; one whose error
// is as large as what it encodes (stochastic ternary) lets it grow without
// bound. Past `bound` the next send is exact (a flush: the residual goes out
// whole and is zero after it; a pull's nearly so, [fine flush]); flushes
// needed closer together than `min_flush_interval` clocks raise the path one
// level of its ladder, and a raised path steps back down after
// `relax_after` clocks under bound / 2 (the wait doubles with each step
// down, so a path that keeps needing the higher level stays there).
#ifndef GRADSTREAM_COMMON_JOB_PRECISION_H_
#define GRADSTREAM_COMMON_JOB_PRECISION_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/codec/codec.h"
#include "common/job/codec_defaults.h"

namespace gradstream {

// NOTE: [owed descent] The error ratio above is blind to which way the
// residual points. An unbiased codec (ternary) leaves noise, orthogonal to
// the gradient on average; a biased one (onebit, twobit) keeps back part of
// every large element, so the residual points along the gradient: the path
// owes descent, owed = <e, s> / |s|^2 clocks of it, and the model trains
// that far behind on the coordinates that matter most. A path whose average
// (over the last ~8 measurements, at least kMinOwedMeasurements) passes
// `max_owed` by more than twice its standard error is raised at once: a
// flush would not help, the codec keeps back the same part again.
// (docs/design/precision-control.md, "Owed descent")

struct PrecisionPolicy {
  // Precision levels, lowest first; ends with kNone. One level: no control.
  std::vector<CodecType> ladder = {CodecType::kNone};
  double bound = 8.0;  // <= 0: measure only, never act
  // A residual that grows linearly (nothing gets through: a codec whose scale
  // does not fit the signal) reaches the bound in `bound` clocks; one that
  // random-walks (stochastic rounding) in about bound^2 / c^2. Flushes closer
  // than 3 * bound clocks say the codec passes too little of the signal.
  // The start and each step down count as a flush: a codec that passes
  // nothing is raised at its first crossing, `bound` clocks in.
  // 0: 3 * bound.
  uint32_t min_flush_interval = 0;
  // A raised path steps down after this many calm clocks, twice as many each
  // time: a codec unfit for the tensor then costs at most bound / relax_after
  // of its clocks.
  uint32_t relax_after = 1000;
  // Clocks sent at the top of the ladder before the first step down
  // (a full-precision warm-up); 0: start at the bottom.
  uint32_t warmup_clocks = 0;
  // Past this many clocks of descent owed, on average, the path is raised
  // (see [owed descent]); <= 0: never.
  double max_owed = kDefaultPrecisionMaxOwed;
};

// The ladder of a path whose configured codec is `base`: base, int4, int8,
// kNone, each level above base (a 2-bit or 1-bit path raised goes to an
// eighth of fp32's bytes first; an fp16 path straight to kNone).
std::vector<CodecType> LadderFrom(CodecType base);
// base, kNone: the CUDA encoders have no int4 or int8 (cuda_codec.h).
std::vector<CodecType> DeviceLadderFrom(CodecType base);
// Whether `a` carries more bits per element than `b` (kNone the most): the
// order of a ladder's levels.
bool MorePrecise(CodecType a, CodecType b);

// The policy of a worker's pushes of a chunk encoded with `base`:
// LadderFrom(base), the job's bound, warm-up and owed bound (a device
// encoder swaps in DeviceLadderFrom).
PrecisionPolicy PushPrecisionPolicy(CodecType base, double bound, uint32_t warmup_clocks,
                                    double max_owed = kDefaultPrecisionMaxOwed);

// The policy of a shard's pulls of a chunk encoded with `base`: the ladder
// from base, PullBound(bound, pull_bound).
PrecisionPolicy PullPrecisionPolicy(CodecType base, double bound, uint32_t warmup_clocks,
                                    double max_owed = kDefaultPrecisionMaxOwed,
                                    double pull_bound = 0);
// A pull's bound: `pull_bound` when set (non-zero), else half the job's bound
// (a pull's error is one copy every worker computes at, not averaged over
// workers as their push residuals are; docs/design/precision-control.md,
// "Pulls at half the bound").
inline double PullBound(double bound, double pull_bound = 0) {
  return pull_bound != 0 ? pull_bound : bound / 2;
}

// NOTE: [fine flush] A pull's flush goes out as an int8 delta of p - q
// (kFlushCodec), a quarter of the snapshot's bytes, when the path is below
// int8 and the delta leaves at most kFlushLeft of the bound
// (PrecisionController::FlushLeftLittle); otherwise as the exact snapshot.
// int8 leaves each element within max |p - q| / 254, so the walk restarts
// from a small fraction of a clock instead of zero. Why:
// docs/design/precision-control.md, "Flushes as int8 deltas".
inline constexpr CodecType kFlushCodec = CodecType::kInt8;
inline constexpr double kFlushLeft = 0.25;

// A path's error is measured every this many sends (and after each flush,
// and at a level's first sends: MeasureDue): a worker's pushes by clock, a
// shard's pulls by publication. A measurement is one more pass over the
// chunk (a push's gradient and residual; a pull's p, copy and last p), and
// the error moves slowly (like the square root of the clocks unflushed).
inline constexpr uint64_t kMeasureEvery = 4;

// A path is raised for owed descent at this many measurements at the
// earliest (a push's 4th is at its level's 4th clock, a pull's at its 4th
// publication).
inline constexpr uint32_t kMinOwedMeasurements = 4;

struct PrecisionEvent {
  enum class Kind : uint8_t { kRaise, kRelax };
  Kind kind = Kind::kRaise;
  uint64_t clock = 0;
  CodecType from = CodecType::kNone;
  CodecType to = CodecType::kNone;
  double ratio = 0.0;  // what decided it: the error ratio, or the owed descent
  bool owed = false;   // a raise for owed descent ([owed descent])
  bool warmup = false; // the step down that ends the warm-up
};

// "ternary -> int4 at clock 112 (error 9.3 clocks of signal again within the
// flush interval)" or "none -> ternary at clock 20 (warm-up over)".
std::string DescribeEvent(const PrecisionEvent& e);

// What a path reports: its level, its last error and its decisions.
struct PathPrecision {
  CodecType codec = CodecType::kNone;  // the level it is at
  double ratio = 0.0;                  // |e| / |signal| at the last send
  double relative = 0.0;               // |e| / |value| (0: not measured)
  uint64_t flushes = 0;
  std::vector<PrecisionEvent> events;  // oldest first
  bool raised = false;                 // above its ladder's first level
};

// `into` += `p`, for a tensor's paths over its chunks: the more precise
// codec (the higher level) wins, raised if either is, the larger errors, the flushes summed, the
// newest kMaxEvents events of both by clock.
void MergePaths(const PathPrecision& p, PathPrecision* into);

// Not thread-safe: the owner serializes calls (one path of one chunk).
class PrecisionController {
 public:
  explicit PrecisionController(const PrecisionPolicy& policy);

  // How the next send is encoded: kNone for a flush (the residual goes out
  // whole), else the current level's codec.
  CodecType Codec() const { return flush_next_ ? CodecType::kNone : policy_.ladder[level_]; }
  bool Flush() const { return flush_next_; }
  // Whether send `clock` (a push's clock, a pull's publication) is measured:
  // every kMeasureEvery sends, after a flush, and at each of a level's first
  // kMinOwedMeasurements sends (a codec unfit for the tensor is raised within
  // them, not 12 sends in).
  bool MeasureDue(uint64_t clock) const {
    return flush_next_ || dense_left_ > 0 || clock % kMeasureEvery == 0;
  }

  // A send without a measurement: a flush asked for has gone out.
  void Skip() { flush_next_ = false; }

  // Whether a flush that left |e|^2 = error2 against this clock's |s|^2 =
  // signal2 counts as one ([fine flush]): at most kFlushLeft of the bound.
  bool FlushLeftLittle(double error2, double signal2) const {
    const double most = kFlushLeft * policy_.bound;
    return error2 <= most * most * signal2;
  }

  // After the send of `clock`: the residual's energy |e|^2 and the signal's
  // |s|^2 (both >= 0), |value|^2 of what the path carries (the parameters;
  // 0 when unknown), and <e, s> (0 when not measured). Decides the next send.
  void Observe(uint64_t clock, double error2, double signal2, double value2, double dot = 0.0);

  // The last observation: |e| / |s| (0 when e is 0, +inf when s is 0 and e
  // is not) and |e| / |value| (0 when unknown).
  double ratio() const { return ratio_; }
  // Clocks of descent owed, averaged over the last measurements ([owed descent]).
  double owed() const { return owed_weight_ > 0.0 ? owed_ / owed_weight_ : 0.0; }
  double relative() const { return relative_; }
  CodecType level_codec() const { return policy_.ladder[level_]; }
  // Above the ladder's first level (raised, or warming up).
  bool raised() const { return level_ > 0; }
  uint64_t flushes() const { return flushes_; }
  // The newest events, oldest first (at most kMaxEvents).
  static constexpr size_t kMaxEvents = 8;
  const std::deque<PrecisionEvent>& events() const { return events_; }
  PathPrecision Report() const;

 private:
  void Record(PrecisionEvent::Kind kind, uint64_t clock, CodecType from, CodecType to,
              bool owed = false, bool warmup = false);
  // One level up at `clock`, the residual sent whole with the first send there.
  void Raise(uint64_t clock, bool owed);
  // A level's start: its own owed average, measured at each of its first clocks.
  void StartLevel();
  // The standard error of owed(): its measurements' spread over the square
  // root of their effective count.
  double OwedError() const;

  PrecisionPolicy policy_;
  size_t level_ = 0;
  bool flush_next_ = false;
  uint64_t last_flush_ = 0;  // or the start, or the last step down
  uint64_t calm_since_ = 0;    // first clock of the current run under bound / 2
  uint32_t relax_wait_ = 0;    // clocks under bound / 2 before stepping down
  bool warming_ = false;
  uint32_t dense_left_ = 0;  // clocks of this level still all measured
  double ratio_ = 0.0;
  double relative_ = 0.0;
  // The owed descent's weighted sums since the level's start: of the
  // measurements, their squares, the weights (1 - (7/8)^n after n) and the
  // weights' squares.
  double owed_ = 0.0;
  double owed_sq_ = 0.0;
  double owed_weight_ = 0.0;
  double owed_weight2_ = 0.0;
  uint32_t owed_measured_ = 0;
  uint64_t flushes_ = 0;
  std::deque<PrecisionEvent> events_;
};

// NOTE: [link choice] Where the wire is not the bottleneck, exact (fp32) sends
// cost less CPU than a codec and no accuracy. A LinkChoice picks between a
// path's codecs and exact sends by measurement: from clock `start`, a probe
// of four windows of `window` clocks (codecs, exact, codecs, exact) compares
// the median step times, each window's first clock left out (it carries the
// switch); exact wins when faster by `margin`. An exact window whose first
// measured clock is over `abort_ratio` times the codecs' median ends the
// probe at once (a slow link pays two exact clocks, not a window). The
// winner holds `hold` clocks, doubled (up to `max_hold`) each time the next
// probe agrees. Workers time their pushes, shards their publications, each
// deciding for itself. See docs/design/link-choice.md.
struct LinkChoicePolicy {
  bool enabled = false;
  uint32_t start = 20;
  uint32_t window = 6;
  uint32_t hold = 400;
  uint32_t max_hold = 6400;
  double margin = 0.05;
  double abort_ratio = 1.5;
};

struct LinkDecision {
  uint64_t clock = 0;        // the probe's last clock
  bool exact = false;        // what won
  double exact_seconds = 0;  // median step time of the exact windows (0: none measured)
  double codec_seconds = 0;  // ... of the codec windows
};

// Not thread-safe: the owner serializes calls.
class LinkChoice {
 public:
  explicit LinkChoice(const LinkChoicePolicy& policy)
      : policy_(policy), next_probe_(policy.start), hold_(policy.hold) {}

  bool enabled() const { return policy_.enabled; }
  // Whether the sends of `clock` go exact.
  bool Exact(uint64_t clock) const;
  // Step `clock` took `seconds` (wall time). Clocks are observed in order.
  void Observe(uint64_t clock, double seconds);
  // Clock `clock` starts at `now`: when the last Tick was clock - 1, that
  // step's time is observed. Returns the decision it made, else null.
  const LinkDecision* Tick(uint64_t clock, absl::Time now);
  // The decisions so far, newest last (at most kMaxDecisions).
  static constexpr size_t kMaxDecisions = 8;
  const std::deque<LinkDecision>& decisions() const { return decisions_; }

 private:
  bool Probing(uint64_t clock) const {
    return policy_.enabled && policy_.window > 0 && clock >= next_probe_ &&
           clock - next_probe_ < 4ull * policy_.window;
  }
  void Decide(uint64_t clock, bool exact, double exact_s, double codec_s);

  const LinkChoicePolicy policy_;
  uint64_t next_probe_;  // first clock of the next (or current) probe
  uint32_t hold_;
  bool exact_ = false;  // the last probe's winner
  std::vector<double> exact_s_, codec_s_;  // this probe's step times
  std::deque<LinkDecision> decisions_;
  uint64_t tick_clock_ = 0;                       // the last Tick's
  absl::Time tick_time_ = absl::InfinitePast();
};

// "exact (median step 0.05 s exact, 0.08 s with the codecs)".
std::string DescribeLinkDecision(const LinkDecision& d);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_PRECISION_H_
