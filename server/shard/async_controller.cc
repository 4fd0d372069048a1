// Async: pushes applied on arrival (as in SSP), reads never wait: the
// staleness bound is infinite. Observed staleness is still recorded.
#include "server/shard/consistency.h"

namespace gradstream::shard {
namespace {

class AsyncController final : public ConsistencyController {
 public:
  explicit AsyncController(bool scale) : scale_(scale) {}

  absl::StatusOr<bool> Push(ChunkState& chunk, const PushArgs& push, JobContext& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) override {
    return internal::ApplyOnArrival(chunk, push, job, scale_);
  }

  bool PullReady(uint64_t, uint64_t, uint64_t) const override { return true; }

 private:
  const bool scale_;
};

}  // namespace

std::unique_ptr<ConsistencyController> NewAsyncController(bool scale_stale) {
  return std::make_unique<AsyncController>(scale_stale);
}

}  // namespace gradstream::shard
