// How fast something advances its clock (steps per second): a worker from
// its heartbeats, a job from its shards' slowest member. The coordinator
// plans membership changes that far ahead (see [membership plan] in
// membership_planner.h).
#ifndef GRADSTREAM_SERVER_COORDINATOR_CLOCK_RATE_H_
#define GRADSTREAM_SERVER_COORDINATOR_CLOCK_RATE_H_

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"

namespace gradstream::coordinator {

// A smoothed clock rate. Observe() takes (time, clock) samples; once a
// sample lies at least `min_interval` after the kept one, with a clock not
// behind it, the measured rate
//     r = (clock - kept_clock) / (now - kept_time)      [clocks per second]
// updates the smoothed one as an exponential moving average of weight 1/2:
//     rate = (rate == 0) ? r : (rate + r) / 2
// and the sample becomes the kept one. Samples closer than `min_interval`
// are ignored (too noisy), and a clock that went backwards (the clock's
// owner restarted) is kept as the new start without touching `rate`.
//
// NOTE: [planning rate]
// `rate` falls towards 0 while the clock stands still (a sync job waiting
// for a dead member to be removed), and a lead planned from it would be
// passed as soon as the job moves again. So the smoother also keeps `peak`,
// the rate the clock runs at when it runs: it follows `rate` up at once and
// decays towards it by 10% per measurement only while the clock moves; a
// measurement of 0 leaves it as it is. Plans use PlanningRate() =
// max(rate, peak).
//
// A value type; not thread-safe.
struct ClockRate {
  explicit ClockRate(absl::Duration min_interval) : min_interval(min_interval) {}

  void Observe(absl::Time now, uint64_t clock) {
    if (!has_sample || clock < sample_clock) {
      has_sample = true;
      sample_time = now;
      sample_clock = clock;
      return;
    }
    const absl::Duration dt = now - sample_time;
    if (dt < min_interval || dt <= absl::ZeroDuration()) return;
    const double r = static_cast<double>(clock - sample_clock) / absl::ToDoubleSeconds(dt);
    rate = rate == 0 ? r : 0.5 * rate + 0.5 * r;
    if (r > 0) peak = std::max(rate, 0.9 * peak);
    sample_time = now;
    sample_clock = clock;
  }

  // Keeps (now, clock) as the start of the next measurement, rates as they
  // are (see [joiner rate] in worker_pool.cc).
  void Restart(absl::Time now, uint64_t clock) {
    has_sample = true;
    sample_time = now;
    sample_clock = clock;
  }

  // The rate to plan with: see [planning rate].
  double PlanningRate() const { return std::max(rate, peak); }

  // Forgets the samples and the rate (the owner starts something new).
  void Reset() { *this = ClockRate(min_interval); }

  absl::Duration min_interval;
  double rate = 0;  // clocks per second; 0 until two samples were far enough apart
  double peak = 0;  // see [planning rate]
  bool has_sample = false;
  absl::Time sample_time;
  uint64_t sample_clock = 0;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_CLOCK_RATE_H_
