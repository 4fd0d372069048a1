// PrecisionController. See precision.h.
#include "common/job/precision.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gradstream {

std::vector<CodecType> LadderFrom(CodecType base) {
  std::vector<CodecType> ladder = {base};
  for (CodecType level : {CodecType::kInt4, CodecType::kInt8, CodecType::kNone}) {
    if (MorePrecise(level, base)) ladder.push_back(level);
  }
  return ladder;
}

std::vector<CodecType> DeviceLadderFrom(CodecType base) {
  if (base == CodecType::kNone) return {CodecType::kNone};
  return {base, CodecType::kNone};
}

// By bytes per element of a large chunk: a scale per block costs a few bytes
// in a small one.
bool MorePrecise(CodecType a, CodecType b) {
  return PayloadBytes(a, 1u << 20) > PayloadBytes(b, 1u << 20);
}

PrecisionPolicy PushPrecisionPolicy(CodecType base, double bound, uint32_t warmup_clocks,
                                    double max_owed) {
  PrecisionPolicy p;
  p.ladder = LadderFrom(base);
  p.bound = bound;
  p.warmup_clocks = warmup_clocks;
  p.max_owed = max_owed;
  return p;
}

PrecisionPolicy PullPrecisionPolicy(CodecType base, double bound, uint32_t warmup_clocks,
                                    double max_owed, double pull_bound) {
  return PushPrecisionPolicy(base, PullBound(bound, pull_bound), warmup_clocks, max_owed);
}

std::string DescribeEvent(const PrecisionEvent& e) {
  std::string out = absl::StrCat(CodecTypeName(e.from), " -> ", CodecTypeName(e.to),
                                 " at clock ", e.clock);
  if (e.kind == PrecisionEvent::Kind::kRaise && e.owed) {
    absl::StrAppend(&out, absl::StrFormat(" (owes %.2g clocks of descent on average)", e.ratio));
  } else if (e.kind == PrecisionEvent::Kind::kRaise) {
    absl::StrAppend(&out, absl::StrFormat(
                              " (error %.3g clocks of signal again within the flush interval)",
                              e.ratio));
  } else if (e.warmup) {
    absl::StrAppend(&out, " (warm-up over)");
  } else {
    absl::StrAppend(&out, " (error under half the bound since)");
  }
  return out;
}

PrecisionController::PrecisionController(const PrecisionPolicy& policy)
    : policy_(policy), relax_wait_(policy.relax_after) {
  if (policy_.ladder.empty()) policy_.ladder = {CodecType::kNone};
  if (policy_.min_flush_interval == 0 && policy_.bound > 0) {
    policy_.min_flush_interval = static_cast<uint32_t>(std::ceil(3.0 * policy_.bound));
  }
  if (policy_.warmup_clocks > 0 && policy_.ladder.size() > 1) {
    level_ = policy_.ladder.size() - 1;
    warming_ = true;
  }
  StartLevel();
}

void MergePaths(const PathPrecision& p, PathPrecision* into) {
  if (MorePrecise(p.codec, into->codec)) into->codec = p.codec;
  into->raised |= p.raised;
  into->ratio = std::max(into->ratio, p.ratio);
  into->relative = std::max(into->relative, p.relative);
  into->flushes += p.flushes;
  into->events.insert(into->events.end(), p.events.begin(), p.events.end());
  std::stable_sort(
      into->events.begin(), into->events.end(),
      [](const PrecisionEvent& a, const PrecisionEvent& b) { return a.clock < b.clock; });
  if (into->events.size() > PrecisionController::kMaxEvents) {
    into->events.erase(into->events.begin(),
                       into->events.end() - PrecisionController::kMaxEvents);
  }
}

PathPrecision PrecisionController::Report() const {
  return PathPrecision{level_codec(), ratio_, relative_, flushes_,
                       {events_.begin(), events_.end()}, raised()};
}

void PrecisionController::Record(PrecisionEvent::Kind kind, uint64_t clock, CodecType from,
                                 CodecType to, bool owed, bool warmup) {
  events_.push_back(
      PrecisionEvent{kind, clock, from, to, owed ? this->owed() : ratio_, owed, warmup});
  while (events_.size() > kMaxEvents) events_.pop_front();
}

void PrecisionController::Raise(uint64_t clock, bool owed) {
  const CodecType from = policy_.ladder[level_];
  ++level_;
  Record(PrecisionEvent::Kind::kRaise, clock + 1, from, policy_.ladder[level_], owed);
  flush_next_ = policy_.ladder[level_] != CodecType::kNone;
  last_flush_ = clock;
  StartLevel();
}

void PrecisionController::StartLevel() {
  owed_ = owed_sq_ = owed_weight_ = owed_weight2_ = 0.0;
  owed_measured_ = 0;
  // A level that can be raised for owed descent is measured at each of its
  // first clocks, so that the owed average counts from its 4th clock.
  const bool top = level_ + 1 >= policy_.ladder.size();
  dense_left_ = !warming_ && !top && policy_.bound > 0 && policy_.max_owed > 0
                    ? kMinOwedMeasurements
                    : 0;
}

double PrecisionController::OwedError() const {
  if (owed_weight_ <= 0.0) return 0.0;
  const double mean = owed_ / owed_weight_;
  const double var = std::max(0.0, owed_sq_ / owed_weight_ - mean * mean);
  // The weights' effective count: (sum w)^2 / sum w^2.
  const double n = owed_weight_ * owed_weight_ / owed_weight2_;
  return std::sqrt(var / n);
}

void PrecisionController::Observe(uint64_t clock, double error2, double signal2,
                                  double value2, double dot) {
  flush_next_ = false;  // what was asked has been sent
  if (dense_left_ > 0) --dense_left_;
  if (error2 <= 0.0) {
    ratio_ = 0.0;
  } else if (signal2 <= 0.0) {
    ratio_ = std::numeric_limits<double>::infinity();
  } else {
    ratio_ = std::sqrt(error2 / signal2);
  }
  relative_ = (error2 > 0.0 && value2 > 0.0) ? std::sqrt(error2 / value2) : 0.0;
  if (warming_) {
    if (clock + 1 >= policy_.warmup_clocks) {
      warming_ = false;
      const CodecType from = policy_.ladder[level_];
      level_ = 0;
      ratio_ = 0.0;
      Record(PrecisionEvent::Kind::kRelax, clock + 1, from, policy_.ladder[level_],
             /*owed=*/false, /*warmup=*/true);
      calm_since_ = clock + 1;
      last_flush_ = clock + 1;
      StartLevel();
    }
    return;
  }
  if (policy_.bound <= 0.0) return;
  // No signal this clock (a tensor backward did not reach): nothing to judge
  // the residual against; it goes out with the next gradients.
  if (signal2 <= 0.0) return;
  // The average over about 8 measurements, weighted as an EMA and corrected
  // for its start from 0 (as Adam's moments), so that a path owing from the
  // start is raised within kMinOwedMeasurements, not the ~18 an uncorrected
  // one takes at 0.55. Raised only when the average passes the bound by more
  // than twice its own standard error: a path whose measurements scatter (a
  // tiny tensor's clipped outliers, ternary's noise) must owe clearly more.
  const double measured = dot / signal2;
  constexpr double kAlpha = 1.0 / 8;
  owed_ += kAlpha * (measured - owed_);
  owed_sq_ += kAlpha * (measured * measured - owed_sq_);
  owed_weight_ += kAlpha * (1.0 - owed_weight_);
  owed_weight2_ = (1 - kAlpha) * (1 - kAlpha) * owed_weight2_ + kAlpha * kAlpha;
  ++owed_measured_;
  const bool top = level_ + 1 >= policy_.ladder.size();
  if (policy_.max_owed > 0 && owed_measured_ >= kMinOwedMeasurements && !top &&
      owed() - 2 * OwedError() > policy_.max_owed) {
    calm_since_ = clock + 1;
    Raise(clock, /*owed=*/true);
    return;
  }
  if (ratio_ > policy_.bound) {
    calm_since_ = clock + 1;
    if (clock >= last_flush_ + policy_.min_flush_interval) {
      flush_next_ = true;
      last_flush_ = clock;
      ++flushes_;
    } else if (!top) {
      Raise(clock, /*owed=*/false);
    }
    return;
  }
  if (ratio_ > policy_.bound / 2) {
    calm_since_ = clock + 1;
    return;
  }
  if (level_ > 0 && clock + 1 >= calm_since_ + relax_wait_) {
    const CodecType from = policy_.ladder[level_];
    --level_;
    Record(PrecisionEvent::Kind::kRelax, clock + 1, from, policy_.ladder[level_]);
    relax_wait_ *= 2;  // raised again, it waits twice as long next time
    calm_since_ = clock + 1;
    last_flush_ = clock + 1;
    StartLevel();
  }
}

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

bool LinkChoice::Exact(uint64_t clock) const {
  if (!Probing(clock)) return exact_;
  return ((clock - next_probe_) / policy_.window) % 2 == 1;  // windows 1 and 3
}

void LinkChoice::Observe(uint64_t clock, double seconds) {
  if (!Probing(clock)) return;
  const uint64_t phase = clock - next_probe_;
  const bool exact_window = (phase / policy_.window) % 2 == 1;
  if (phase % policy_.window != 0) {  // a window's first clock carries the switch
    (exact_window ? exact_s_ : codec_s_).push_back(seconds);
  }
  if (exact_window && phase % policy_.window == 1 && !codec_s_.empty()) {
    const double codec = Median(codec_s_);
    if (seconds > policy_.abort_ratio * codec) {  // exact is far slower: stop paying for it
      Decide(clock, false, seconds, codec);
      return;
    }
  }
  if (phase + 1 != 4ull * policy_.window) return;
  const double exact = Median(exact_s_), codec = Median(codec_s_);
  Decide(clock, !exact_s_.empty() && !codec_s_.empty() && exact < (1.0 - policy_.margin) * codec,
         exact, codec);
}

const LinkDecision* LinkChoice::Tick(uint64_t clock, absl::Time now) {
  const bool consecutive = tick_time_ != absl::InfinitePast() && clock == tick_clock_ + 1;
  const double seconds = absl::ToDoubleSeconds(now - tick_time_);
  tick_clock_ = clock;
  tick_time_ = now;
  if (!consecutive) return nullptr;
  const size_t before = decisions_.size();
  Observe(clock - 1, seconds);
  return decisions_.size() != before ? &decisions_.back() : nullptr;
}

std::string DescribeLinkDecision(const LinkDecision& d) {
  return absl::StrFormat("%s (median step %.4g s exact, %.4g s with the codecs)",
                         d.exact ? "exact" : "the codecs", d.exact_seconds, d.codec_seconds);
}

void LinkChoice::Decide(uint64_t clock, bool exact, double exact_s, double codec_s) {
  const bool agrees = !decisions_.empty() && decisions_.back().exact == exact;
  hold_ = agrees ? std::min(2 * hold_, std::max(policy_.max_hold, policy_.hold)) : policy_.hold;
  exact_ = exact;
  next_probe_ = clock + 1 + hold_;
  exact_s_.clear();
  codec_s_.clear();
  decisions_.push_back(LinkDecision{clock, exact, exact_s, codec_s});
  while (decisions_.size() > kMaxDecisions) decisions_.pop_front();
}

}  // namespace gradstream
