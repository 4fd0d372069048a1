// Membership plans; see [membership plan] in membership_planner.h.
#include "server/coordinator/membership_planner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gradstream::coordinator {

namespace {

// A plan that waits because `clock` lies at or past the last step.
bool EndsBefore(const PlanInput& in, uint64_t clock, MembershipPlan& plan) {
  if (clock < in.steps) return false;
  plan.action = MembershipPlan::Action::kWait;
  plan.message = absl::StrCat("the job ends at clock ", in.steps,
                              " before a membership change could take effect (clock ", clock, ")");
  return true;
}

}  // namespace

MembershipPlan PlanStart(uint32_t desired, const std::vector<uint64_t>& free_workers,
                         bool grace_over, uint32_t min_workers) {
  MembershipPlan plan;
  const bool wait = min_workers > 0
                        ? free_workers.size() < min_workers
                        : free_workers.size() < desired && (free_workers.empty() || !grace_over);
  if (wait) {
    plan.action = MembershipPlan::Action::kWait;
    plan.message = min_workers > 0 ? absl::StrCat("waiting for workers: ", free_workers.size(),
                                                  " idle of min ", min_workers, " (range ",
                                                  min_workers, ":", desired, ")")
                                   : absl::StrCat("waiting for workers: ", free_workers.size(),
                                                  " idle of ", desired, " wanted");
    return plan;
  }
  plan.action = MembershipPlan::Action::kJoin;
  plan.join.assign(free_workers.begin(),
                   free_workers.begin() + std::min<size_t>(free_workers.size(), desired));
  plan.clock = 0;
  plan.reason = "start";
  return plan;
}

uint64_t LeadClock(const PlanInput& in) {
  uint64_t base = std::max(in.shards.min_clock, in.shards.max_version);
  if (in.bounded) base = in.shards.min_clock + in.staleness + 1;
  base = std::max({base, in.shards.max_version, in.shards.max_clock});
  double rate = in.job_clock_rate;
  for (const MemberClock& m : in.members) {
    base = std::max(base, m.clock);
    rate = std::max(rate, m.clock_rate);
  }
  return base + 10 + static_cast<uint64_t>(std::ceil(rate * absl::ToDoubleSeconds(in.lead_time)));
}

uint64_t IdleJoinClock(const PlanInput& in) {
  return std::max(
      {in.shards.min_clock, in.shards.max_version, in.shards.max_clock, in.last_epoch_clock});
}

MembershipPlan PlanScaling(const PlanInput& in) {
  MembershipPlan plan;
  std::vector<uint64_t> active;
  for (const MemberClock& m : in.members) {
    if (!m.leaving) active.push_back(m.worker_id);
  }
  const size_t desired = in.desired_workers;
  if (active.size() < desired) {
    const bool elastic = in.min_workers > 0;
    if (in.free_workers.empty()) {
      // Inside its range an elastic job waits for nothing ([elastic jobs]).
      if (elastic && active.size() >= in.min_workers) return plan;
      plan.action = MembershipPlan::Action::kWait;
      plan.message = elastic ? absl::StrCat("waiting: below min, ", active.size(), " of min ",
                                            in.min_workers, " active, none idle")
                             : absl::StrCat("waiting for workers: ", active.size(), " of ",
                                            desired, " active, none idle");
      return plan;
    }
    const uint64_t at = active.empty() ? IdleJoinClock(in) : LeadClock(in);
    if (EndsBefore(in, at, plan)) return plan;
    const size_t take = std::min(in.free_workers.size(), desired - active.size());
    plan.action = MembershipPlan::Action::kJoin;
    plan.join.assign(in.free_workers.begin(), in.free_workers.begin() + take);
    plan.clock = at;
    plan.reason = elastic ? absl::StrCat("grew: worker", take > 1 ? "s " : " ",
                                         absl::StrJoin(plan.join, ", "), " idle")
                          : absl::StrCat("scale up to ", active.size() + take);
  } else if (active.size() > desired) {
    const uint64_t at = LeadClock(in);
    if (EndsBefore(in, at, plan)) return plan;
    plan.action = MembershipPlan::Action::kLeave;
    plan.leave.assign(active.begin() + desired, active.end());
    plan.clock = at;
    plan.reason = absl::StrCat("scale down to ", desired);
  }
  return plan;
}

}  // namespace gradstream::coordinator
