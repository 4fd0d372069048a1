// The membership planner as a pure function: no clock, threads or RPCs.
#include "server/coordinator/membership_planner.h"

#include "gtest/gtest.h"

namespace gradstream::coordinator {
namespace {

using Action = MembershipPlan::Action;

// A running job with members 1 and 2 at clock 40, a lead time of 2 s and
// nothing measured yet.
PlanInput Running() {
  PlanInput in;
  in.desired_workers = 2;
  in.members = {{1, false, 40, 0}, {2, false, 40, 0}};
  in.shards.min_clock = 38;
  in.shards.max_version = 38;
  in.steps = 1000;
  in.lead_time = absl::Seconds(2);
  return in;
}

TEST(PlanStart, WaitsForTheWantedWorkersUntilTheGraceIsOver) {
  MembershipPlan plan = PlanStart(3, {7, 8}, /*grace_over=*/false);
  EXPECT_EQ(plan.action, Action::kWait);
  EXPECT_EQ(plan.message, "waiting for workers: 2 idle of 3 wanted");
  plan = PlanStart(3, {7, 8}, /*grace_over=*/true);
  EXPECT_EQ(plan.action, Action::kJoin);
  EXPECT_EQ(plan.join, (std::vector<uint64_t>{7, 8}));
  EXPECT_EQ(plan.clock, 0u);
  EXPECT_EQ(plan.reason, "start");
}

TEST(PlanStart, NeverStartsWithoutWorkersAndTakesOnlyWhatItWants) {
  EXPECT_EQ(PlanStart(2, {}, /*grace_over=*/true).action, Action::kWait);
  MembershipPlan plan = PlanStart(2, {4, 5, 6}, /*grace_over=*/false);
  EXPECT_EQ(plan.action, Action::kJoin);
  EXPECT_EQ(plan.join, (std::vector<uint64_t>{4, 5}));
}

TEST(PlanScaling, NothingToDoAtTheDesiredSize) {
  PlanInput in = Running();
  in.free_workers = {9};
  EXPECT_EQ(PlanScaling(in).action, Action::kNone);
}

TEST(PlanScaling, ScaleUpJoinsAheadOfTheFastestMember) {
  PlanInput in = Running();
  in.desired_workers = 4;
  in.members[1].clock = 45;
  in.free_workers = {5, 6, 7};
  const MembershipPlan plan = PlanScaling(in);
  EXPECT_EQ(plan.action, Action::kJoin);
  EXPECT_EQ(plan.join, (std::vector<uint64_t>{5, 6}));  // only the two it needs
  EXPECT_EQ(plan.clock, 45u + 10);                       // no rate measured: margin only
  EXPECT_EQ(plan.reason, "scale up to 4");
}

TEST(PlanScaling, TheLeadCoversTheFastestRateOverTheLeadTime) {
  PlanInput in = Running();
  in.job_clock_rate = 3;
  in.members[0].clock_rate = 5.2;  // faster than the shards say: use it
  // 40 + 10 + ceil(5.2 clocks/s * 2 s)
  EXPECT_EQ(LeadClock(in), 40u + 10 + 11);
  in.members[0].clock_rate = 0;
  EXPECT_EQ(LeadClock(in), 40u + 10 + 6);
}

TEST(PlanScaling, BoundedJobsLeadFromTheFastestAMemberMayBe) {
  PlanInput in = Running();
  in.members = {{1, false, 0, 0}};
  in.bounded = true;
  in.staleness = 4;
  EXPECT_EQ(LeadClock(in), 38u + 4 + 1 + 10);
  in.shards.max_version = 100;  // sync rounds applied dominate
  EXPECT_EQ(LeadClock(in), 110u);
}

// In BOUNDED and ASYNC mode the chunk versions count pushes: the coordinator
// gives the planner no max_version there, and the fastest member's clock
// from the shards counts (issue 15: a scale planned ~6000 clocks ahead).
TEST(PlanScaling, AsyncJobsLeadFromTheFastestMembersClock) {
  PlanInput in = Running();
  in.members = {{1, false, 900, 0}, {2, false, 950, 0}};
  in.shards = {890, 0, 1000};
  in.job_clock_rate = 100;
  in.lead_time = absl::Seconds(1);
  EXPECT_EQ(LeadClock(in), 1000u + 10 + 100);
  in.desired_workers = 1;
  in.steps = 5000;
  const MembershipPlan plan = PlanScaling(in);
  EXPECT_EQ(plan.action, Action::kLeave);
  EXPECT_EQ(plan.clock, 1110u);
}

TEST(PlanScaling, AnIdleJobTakesJoinersWhereItStoppedWithoutLead) {
  PlanInput in = Running();
  in.members = {{1, true, 40, 0}};  // leaving: not active
  in.shards = {30, 31};
  in.last_epoch_clock = 35;
  in.free_workers = {3};
  const MembershipPlan plan = PlanScaling(in);
  EXPECT_EQ(plan.action, Action::kJoin);
  EXPECT_EQ(plan.clock, 35u);
  EXPECT_EQ(plan.join, (std::vector<uint64_t>{3}));
}

TEST(PlanScaling, ScaleUpWithoutFreeWorkersWaits) {
  PlanInput in = Running();
  in.desired_workers = 3;
  const MembershipPlan plan = PlanScaling(in);
  EXPECT_EQ(plan.action, Action::kWait);
  EXPECT_EQ(plan.message, "waiting for workers: 2 of 3 active, none idle");
}

TEST(PlanScaling, ScaleDownLetsTheNewestLeaveAndKeepsRankZero) {
  PlanInput in = Running();
  in.members = {{1, false, 40, 0}, {2, true, 40, 0}, {3, false, 40, 0}, {4, false, 40, 0}};
  in.desired_workers = 1;
  const MembershipPlan plan = PlanScaling(in);
  EXPECT_EQ(plan.action, Action::kLeave);
  EXPECT_EQ(plan.leave, (std::vector<uint64_t>{3, 4}));  // 2 is leaving already
  EXPECT_EQ(plan.clock, LeadClock(in));
  EXPECT_EQ(plan.reason, "scale down to 1");
}

TEST(PlanScaling, NoChangePastTheLastStep) {
  PlanInput in = Running();
  in.steps = 50;  // lead clock 50: the job has ended by then
  in.desired_workers = 1;
  const MembershipPlan plan = PlanScaling(in);
  EXPECT_EQ(plan.action, Action::kWait);
  EXPECT_EQ(plan.message,
            "the job ends at clock 50 before a membership change could take effect (clock 50)");
}

TEST(DepartureClock, TheClockTheWorkerNeverCompleted) {
  EXPECT_EQ(DepartureClock(7, 5), 7u);
  EXPECT_EQ(DepartureClock(3, 5), 5u);  // the shards moved on without it
}

// ---------------------------------------------------------------- elastic jobs

TEST(PlanStart, AnElasticJobStartsAtMinWithAllItCanTakeUpToMax) {
  // 1 of min 2 idle: waits, grace or not.
  MembershipPlan plan = PlanStart(4, {7}, /*grace_over=*/true, /*min_workers=*/2);
  EXPECT_EQ(plan.action, Action::kWait);
  EXPECT_EQ(plan.message, "waiting for workers: 1 idle of min 2 (range 2:4)");
  // MIN idle: starts at once, no grace needed, with every idle one up to MAX.
  plan = PlanStart(4, {7, 8, 9}, /*grace_over=*/false, /*min_workers=*/2);
  EXPECT_EQ(plan.action, Action::kJoin);
  EXPECT_EQ(plan.join, (std::vector<uint64_t>{7, 8, 9}));
  plan = PlanStart(4, {3, 4, 5, 6, 7, 8}, /*grace_over=*/false, /*min_workers=*/1);
  EXPECT_EQ(plan.join, (std::vector<uint64_t>{3, 4, 5, 6}));
  EXPECT_EQ(PlanStart(4, {}, /*grace_over=*/true, /*min_workers=*/1).action, Action::kWait);
}

// A 1:4 job with members 1 and 2 running.
PlanInput Elastic() {
  PlanInput in = Running();
  in.desired_workers = 4;
  in.min_workers = 1;
  return in;
}

TEST(PlanScaling, AnElasticJobGrowsWithEveryIdleWorkerInOneEpoch) {
  PlanInput in = Elastic();
  in.free_workers = {5, 6, 7};
  MembershipPlan plan = PlanScaling(in);
  EXPECT_EQ(plan.action, Action::kJoin);
  EXPECT_EQ(plan.join, (std::vector<uint64_t>{5, 6}));  // up to MAX only
  EXPECT_EQ(plan.clock, 40u + 10);
  EXPECT_EQ(plan.reason, "grew: workers 5, 6 idle");
  in.free_workers = {9};
  EXPECT_EQ(PlanScaling(in).reason, "grew: worker 9 idle");
  // At MAX: idle workers stay idle.
  in.members.push_back({5, false, 40, 0});
  in.members.push_back({6, false, 40, 0});
  EXPECT_EQ(PlanScaling(in).action, Action::kNone);
}

TEST(PlanScaling, AnElasticJobInsideItsRangeWaitsForNothing) {
  PlanInput in = Elastic();  // 2 of 1:4, nobody idle
  EXPECT_EQ(PlanScaling(in).action, Action::kNone);
  in.members = {{1, false, 40, 0}};  // shrank to MIN: still fine
  EXPECT_EQ(PlanScaling(in).action, Action::kNone);
  // A leaving member does not count towards MIN.
  in.min_workers = 2;
  in.members = {{1, false, 40, 0}, {2, true, 40, 0}};
  const MembershipPlan plan = PlanScaling(in);
  EXPECT_EQ(plan.action, Action::kWait);
  EXPECT_EQ(plan.message, "waiting: below min, 1 of min 2 active, none idle");
}

TEST(PlanScaling, AnElasticJobBelowMinTakesWhatComesAndResumesWithoutMembers) {
  PlanInput in = Elastic();
  in.min_workers = 3;
  in.members.clear();  // every member died
  in.last_epoch_clock = 57;
  MembershipPlan plan = PlanScaling(in);
  EXPECT_EQ(plan.action, Action::kWait);
  EXPECT_EQ(plan.message, "waiting: below min, 0 of min 3 active, none idle");
  // One worker turns up: it joins (below MIN still, but it trains) where the
  // idle job stopped, with no lead.
  in.free_workers = {8};
  plan = PlanScaling(in);
  EXPECT_EQ(plan.action, Action::kJoin);
  EXPECT_EQ(plan.join, (std::vector<uint64_t>{8}));
  EXPECT_EQ(plan.clock, 57u);
  EXPECT_EQ(plan.reason, "grew: worker 8 idle");
}

TEST(PlanScaling, AnElasticJobScaledBelowItsSizeShedsTheNewest) {
  PlanInput in = Elastic();
  in.desired_workers = 1;  // `gradstream scale JOB --workers 1`
  const MembershipPlan plan = PlanScaling(in);
  EXPECT_EQ(plan.action, Action::kLeave);
  EXPECT_EQ(plan.leave, (std::vector<uint64_t>{2}));
  EXPECT_EQ(plan.reason, "scale down to 1");
}

}  // namespace
}  // namespace gradstream::coordinator
