// The clock-rate smoother with a manual clock.
#include "server/coordinator/clock_rate.h"

#include "gtest/gtest.h"

namespace gradstream::coordinator {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

TEST(ClockRate, AveragesMeasuredRatesWithWeightOneHalf) {
  ClockRate rate(absl::Milliseconds(500));
  rate.Observe(kT0, 0);
  EXPECT_EQ(rate.rate, 0);
  rate.Observe(kT0 + absl::Seconds(1), 10);  // 10/s: the first measurement is taken as is
  EXPECT_DOUBLE_EQ(rate.rate, 10);
  rate.Observe(kT0 + absl::Seconds(2), 30);  // 20/s
  EXPECT_DOUBLE_EQ(rate.rate, 15);
}

TEST(ClockRate, IgnoresSamplesCloserThanTheMinimumInterval) {
  ClockRate rate(absl::Milliseconds(500));
  rate.Observe(kT0, 0);
  rate.Observe(kT0 + absl::Milliseconds(100), 50);
  EXPECT_EQ(rate.rate, 0);
  rate.Observe(kT0 + absl::Milliseconds(500), 50);  // measured from the kept sample at kT0
  EXPECT_DOUBLE_EQ(rate.rate, 100);
}

TEST(ClockRate, AClockGoingBackStartsOverAndKeepsTheRate) {
  ClockRate rate(absl::Milliseconds(50));
  rate.Observe(kT0, 100);
  rate.Observe(kT0 + absl::Seconds(1), 104);
  ASSERT_DOUBLE_EQ(rate.rate, 4);
  rate.Observe(kT0 + absl::Seconds(2), 3);  // restarted
  EXPECT_DOUBLE_EQ(rate.rate, 4);
  rate.Observe(kT0 + absl::Seconds(3), 7);
  EXPECT_DOUBLE_EQ(rate.rate, 4);  // (4 + 4) / 2
  rate.Reset();
  EXPECT_EQ(rate.rate, 0);
  EXPECT_FALSE(rate.has_sample);
  EXPECT_EQ(rate.min_interval, absl::Milliseconds(50));
}

// A sync job stalled for a dead member: `rate` falls to nothing, the rate
// to plan with stays what the job runs at (see [planning rate]).
TEST(ClockRate, ThePlanningRateOutlivesAStall) {
  ClockRate rate(absl::Milliseconds(500));
  rate.Observe(kT0, 0);
  rate.Observe(kT0 + absl::Seconds(1), 300);
  ASSERT_DOUBLE_EQ(rate.PlanningRate(), 300);
  for (int i = 2; i < 12; ++i) rate.Observe(kT0 + absl::Seconds(i), 300);  // stalled 10 s
  EXPECT_LT(rate.rate, 1);
  EXPECT_DOUBLE_EQ(rate.PlanningRate(), 300);
  rate.Observe(kT0 + absl::Seconds(12), 400);  // moving again at 100/s
  EXPECT_DOUBLE_EQ(rate.PlanningRate(), 270);  // decays only while it moves
  rate.Reset();
  EXPECT_EQ(rate.PlanningRate(), 0);
}

}  // namespace
}  // namespace gradstream::coordinator
