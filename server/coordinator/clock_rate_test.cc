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

}  // namespace
}  // namespace gradstream::coordinator
