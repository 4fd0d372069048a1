// Bounded staleness (SSP, Ho et al. NIPS 2013; Li et al. OSDI 2014): each push
// is applied on arrival scaled by 1/members; reads wait for the slowest
// member. See NOTE: [staleness bound] in consistency.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/shard/consistency.h"

namespace gradstream::shard {
namespace internal {

absl::StatusOr<bool> ApplyOnArrival(ChunkState& chunk, const PushArgs& push, JobContext& job,
                                    bool scale_stale) {
  auto it = chunk.applied.find(push.worker);
  if (it != chunk.applied.end() && it->second.Contains(push.clock)) return true;
  uint64_t epoch = 0;
  const std::vector<uint64_t> members = job.MembersAt(push.clock, &epoch);
  if (std::find(members.begin(), members.end(), push.worker) == members.end()) {
    if (job.LeftBefore(push.worker, push.clock)) return true;  // see [late leave]
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", push.worker, " is not a member at clock ", push.clock, " (epoch ", epoch, ")"));
  }
  if (!chunk.initialized.load()) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk ", chunk.chunk_id, " has no parameters yet (no InitChunk)"));
  }
  float weight = 1.0f / static_cast<float>(members.size());
  if (scale_stale) {
    // Staleness in clocks: updates applied since this worker last read the
    // chunk, divided by the updates one clock brings (one per member).
    const uint64_t now = chunk.version.load();
    auto r = chunk.read_version.find(push.worker);
    const uint64_t read = r == chunk.read_version.end() ? 0 : r->second;
    const uint64_t tau = now > read ? (now - read) / members.size() : 0;
    weight /= static_cast<float>(1 + tau);
  }
  absl::Status s = push.rows != nullptr
                       ? ApplyRowGrads(job.optimizer(), *push.rows, weight, chunk.rows.get(),
                                       &chunk.opt)
                       : job.optimizer().ApplyEncoded(push.header, push.payload, weight,
                                                      &chunk.params, &chunk.opt);
  if (!s.ok()) return s;
  chunk.applied[push.worker].Add(push.clock, job.MemberClock(push.worker));  // [applied floor]
  chunk.version.fetch_add(1);
  return false;
}

}  // namespace internal

namespace {

class SspController final : public ConsistencyController {
 public:
  SspController(uint32_t staleness, bool scale) : staleness_(staleness), scale_(scale) {}

  absl::StatusOr<bool> Push(ChunkState& chunk, const PushArgs& push, JobContext& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) override {
    return internal::ApplyOnArrival(chunk, push, job, scale_);
  }

  bool PullReady(uint64_t clock, uint64_t min_clock, uint64_t min_version) const override {
    return min_clock + staleness_ >= clock;
  }

 private:
  const uint64_t staleness_;
  const bool scale_;
};

}  // namespace

std::unique_ptr<ConsistencyController> NewSspController(uint32_t staleness, bool scale_stale) {
  return std::make_unique<SspController>(staleness, scale_stale);
}

}  // namespace gradstream::shard
