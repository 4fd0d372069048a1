#include "worker/runtime/membership.h"

#include <algorithm>
#include <utility>

namespace gradstream::runtime {

Assignment AssignmentFromProto(const v1::Assignment& p) {
  Assignment a;
  a.job_id = p.job_id();
  a.job_active = !p.job_id().empty() &&
                 (p.job_state() == v1::PENDING || p.job_state() == v1::RUNNING);
  a.rank = p.rank();
  a.world_size = std::max<uint32_t>(1, p.world_size());
  a.epoch = p.epoch();
  a.epoch_clock = p.epoch_clock();
  a.join_clock = p.join_clock();
  a.leave = p.leave();
  a.leave_clock = p.leave_clock();
  return a;
}

bool StillOurs(const Assignment& a, const std::string& job) {
  return a.job_active && a.job_id == job;
}

bool Trains(const Assignment& a) {
  return a.job_active && !(a.leave && a.join_clock >= a.leave_clock);
}

bool LeavesAt(const Assignment& a, uint64_t clock) { return a.leave && clock >= a.leave_clock; }

bool RejoinsAfter(const Assignment& trained, const Assignment& now) {
  return Trains(now) && now.job_id == trained.job_id && now.join_clock > trained.join_clock;
}

Assignment MembershipAt(const Assignment& latest, const std::vector<v1::MembershipEpoch>& epochs,
                        uint64_t worker_id, uint64_t clock) {
  const v1::MembershipEpoch* at = nullptr;
  for (const v1::MembershipEpoch& e : epochs) {
    if (e.effective_clock() <= clock) at = &e;
  }
  if (at == nullptr) return latest;
  Assignment out = latest;
  const auto& ids = at->worker_ids();
  const auto pos = std::find(ids.begin(), ids.end(), worker_id);
  if (pos == ids.end()) {
    out.job_active = false;
    return out;
  }
  out.rank = static_cast<uint32_t>(pos - ids.begin());
  out.world_size = static_cast<uint32_t>(ids.size());
  out.epoch = at->epoch();
  out.epoch_clock = at->effective_clock();
  return out;
}

void AssignmentFeed::Set(Assignment a) {
  absl::MutexLock lock(&mu_);
  current_ = std::move(a);
}

Assignment AssignmentFeed::Get() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

}  // namespace gradstream::runtime
