// Consistency modes behind one interface, one file per mode:
//   bsp_controller.cc   sync (BSP): one aggregated update per clock
//   ssp_controller.cc   bounded staleness (SSP)
//   async_controller.cc no bound
//
// NOTE: [staleness bound]
// The bound is enforced on reads, by the server: a pull by a worker at clock c
// is answered only when min_clock (the slowest current member's clock) is
// >= c - s. A worker cannot start clock c+1 before its pull for c+1 returns,
// so no worker is ever more than s clocks ahead of the slowest. The observed
// staleness of a served pull, c - min_clock, is recorded per job (histogram +
// max); tests read it through GetStats. Sync mode instead waits until every
// requested chunk reached version c (which implies all members pushed c-1).
//
// NOTE: [clock windows]
// Every clock a member sends is checked against the clock the shard knows for
// it (JobContext::MemberClock) before anything changes: a ClockAdvance and an
// SSP/async push may name at most ClockWindow() clocks beyond it, a pull at
// most PullWindow(), or they are refused with OUT_OF_RANGE naming the clock
// and the window; a sync push is further held to the chunk's open rounds.
// After a restore each member's first ClockAdvance may jump
// (Membership::AllowCatchUp). The windows per mode and why:
// docs/design/clock-windows.md.
#ifndef GRADSTREAM_SERVER_SHARD_CONSISTENCY_H_
#define GRADSTREAM_SERVER_SHARD_CONSISTENCY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <optional>

#include "absl/status/statusor.h"
#include "common/optim/optimizer.h"
#include "server/shard/chunk_state.h"
#include "server/shard/types.h"

namespace gradstream::shard {

// What a controller needs from its job. Implemented by Job; thread-safe.
class JobContext {
 public:
  virtual ~JobContext() = default;
  virtual const Optimizer& optimizer() const = 0;
  // Members of the epoch in effect at `clock`, and that epoch's number. Empty
  // when no epoch is in effect yet.
  virtual std::vector<uint64_t> MembersAt(uint64_t clock, uint64_t* epoch) const = 0;
  // The first clock >= `clock` at which some epoch with members is in
  // effect; nullopt when every known epoch from `clock` on is empty.
  virtual std::optional<uint64_t> NextStaffedClock(uint64_t clock) const = 0;
  virtual uint32_t max_pending_rounds() const = 0;
  // `worker`'s clock: it has finished every clock below it (its latest
  // ClockAdvance); 0 when it never advanced. See [lost rounds].
  virtual uint64_t WorkerClock(uint64_t worker) const = 0;
  // `worker`'s clock as the windows see it (see [clock windows]): its latest
  // ClockAdvance, or the clock it joined at when that is later.
  virtual uint64_t MemberClock(uint64_t worker) const = 0;
  // The effective clock of the first epoch that starts after `clock`;
  // nullopt when none does.
  virtual std::optional<uint64_t> NextEpochClock(uint64_t clock) const = 0;
  // NOTE: [late leave] Whether `worker` is not a member at `clock` because a
  // planned change let it go at an earlier clock (an epoch in effect before
  // `clock` lists it; it is not departed, i.e. it did not die). Such a
  // worker heard of its leave clock late (after it started a clock at or
  // past it): its pushes there are acknowledged as duplicates and dropped,
  // not refused, so it is not failed for clocks it could not know to skip;
  // it leaves when its assignment says so. A worker never listed before
  // `clock` is still refused.
  virtual bool LeftBefore(uint64_t worker, uint64_t clock) const = 0;
  // Appends to the bounded ring of round records.
  virtual void RecordRound(RoundInfo round) = 0;
};

// What a consistency mode decides beyond a chunk's pushes and pulls: the Job
// asks its controller instead of testing the mode.
struct ModeRules {
  // Versions count closed rounds, one per clock (sync): a resumed chunk
  // starts at the resume clock, a joiner after the rounds already closed,
  // and a publication follows every version change, not a reader's clock.
  bool rounds = false;
  // Pushes are held to the member's clock window (see [clock windows]);
  // rounds hold them to the chunk's open rounds instead.
  bool push_clock_window = true;
  // Pushes for a chunk awaiting re-initialization are acknowledged and
  // dropped (they apply on arrival; rounds wait for the init instead).
  bool drop_pushes_awaiting_init = true;
  // A chunk is published as soon as its version moves ([eager publish]);
  // otherwise per reader clock, which only a pull names.
  bool eager_publish = false;
  // A ClockAdvance that leaves every member past an unclosed round closes it
  // with what arrived (see [lost rounds]).
  bool close_lost_rounds = false;
};

// Thread-safe: stateless apart from options; per-chunk state is passed in
// with its lock held.
class ConsistencyController {
 public:
  virtual ~ConsistencyController() = default;

  // This mode's rules (constant).
  virtual ModeRules rules() const { return ModeRules{}; }

  // Decodes and accumulates or applies one push. Returns true for a
  // duplicate (already applied/accumulated: ignored). Errors leave the chunk
  // unchanged: InvalidArgument (bad chunk), FailedPrecondition (not a member
  // at that clock, round already closed, chunk not initialized),
  // ResourceExhausted (too many open rounds).
  [[nodiscard]] virtual absl::StatusOr<bool> Push(ChunkState& chunk, const PushArgs& push,
                                                  JobContext& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) = 0;

  // Applies whatever became ready (sync rounds that are now complete after a
  // membership change or an InitChunk). Returns true when `version` moved.
  virtual bool Advance(ChunkState& chunk, JobContext& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) {
    return false;
  }

  // Whether a pull at `clock` can be answered now; `min_clock` is the slowest
  // current member's clock, `min_version` the lowest version among the
  // requested (initialized) chunks.
  virtual bool PullReady(uint64_t clock, uint64_t min_clock, uint64_t min_version) const = 0;
};

// The async mode's window (see [clock windows]): far beyond any pipelining of
// an honest worker, far below anything that could wrap or wedge.
inline constexpr uint64_t kAsyncClockWindow = 64;
// How far beyond its clock a member may name a clock in a ClockAdvance or a
// push, and in a pull (see [clock windows]).
uint64_t ClockWindow(const ConsistencyOptions& options, uint32_t max_pending_rounds);
uint64_t PullWindow(const ConsistencyOptions& options, uint32_t max_pending_rounds);

std::unique_ptr<ConsistencyController> NewBspController();
std::unique_ptr<ConsistencyController> NewSspController(uint32_t staleness, bool scale_stale);
std::unique_ptr<ConsistencyController> NewAsyncController(bool scale_stale);
std::unique_ptr<ConsistencyController> NewController(const ConsistencyOptions& options);

namespace internal {
// Shared by SSP and async: apply one push on arrival, scaled by 1/members
// (and 1/(1+staleness) when `scale_stale`). See [staleness bound].
[[nodiscard]] absl::StatusOr<bool> ApplyOnArrival(ChunkState& chunk, const PushArgs& push,
                                                  JobContext& job, bool scale_stale)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
}  // namespace internal

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_CONSISTENCY_H_
