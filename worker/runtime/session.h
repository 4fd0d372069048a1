// One worker's session in a job, under both front-ends: the built-in
// trainer (worker/trainer/) and the C ABI the Python package calls
// (worker/capi/). It owns the step loop over the client, who sends the
// initial parameters, the answer to a shard that lost them, leaving, and
// the progress meter; a front-end only drives it (its model, its data).
#ifndef GRADSTREAM_WORKER_RUNTIME_SESSION_H_
#define GRADSTREAM_WORKER_RUNTIME_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "job.pb.h"
#include "worker/client/ps_client.h"
#include "worker/client/step_loop.h"
#include "worker/runtime/progress.h"

namespace gradstream::runtime {

// Where a job's initial parameters come from, which decides who sends them.
enum class InitialValues {
  // Every worker builds the same values from the job seed (the built-in
  // models): every worker starting at clock 0 sends them and the first to
  // reach a chunk sets it, so a job starts even when rank 0 is gone.
  kSameOnEveryWorker,
  // Each process builds its own (a script's model under torch's own seed):
  // only rank 0's reach the shards, or a job would start from a mix.
  kRankZeroOnly,
};

// Whether a worker of rank `rank` starting at `start_clock` sends the
// initial parameters.
bool SendsInitialParams(InitialValues values, uint32_t rank, uint64_t start_clock);

// The step-loop options a job's spec implies: the early pull in sync mode
// (see [early pull] in worker/client/step_loop.h).
client::StepLoopOptions LoopOptionsFor(const v1::JobSpec& spec);

struct SessionOptions {
  client::StepLoopOptions loop;
  InitialValues initial_values = InitialValues::kRankZeroOnly;
  // Called while a pull waits: non-OK (Cancelled when the job ended or the
  // worker stops) ends the wait with it. Null: always OK.
  std::function<absl::Status()> check;
  // Whether the caller will pull `clock` (see StepLoopHooks::will_pull).
  // Null: always.
  std::function<bool(uint64_t clock)> will_pull;
};

// Thread-safe as client::StepLoop is. `client` is not owned and outlives the
// session.
class WorkerSession {
 public:
  // A shard that lost its parameters (DATA_LOSS) is sent this worker's: the
  // failed pull's targets, the values last pulled (see [re-initialization]
  // in server/shard/job.h).
  WorkerSession(client::PsClient* client, SessionOptions options);
  // Abandons the pull in flight: nothing is written into its targets after.
  ~WorkerSession();
  WorkerSession(const WorkerSession&) = delete;
  WorkerSession& operator=(const WorkerSession&) = delete;

  client::StepLoop& loop() { return *loop_; }
  ProgressMeter& meter() { return meter_; }

  // Sends `params` (one span per tensor) as the job's initial values when
  // SendsInitialParams says this worker does, and waits for the shards
  // (within `timeout`).
  [[nodiscard]] absl::Status Init(uint32_t rank, uint64_t start_clock,
                                  absl::Span<const absl::Span<const float>> params,
                                  absl::Duration timeout);
  // Leaves the job: gives up the pull in flight, waits for the pushes made
  // and sends Leave to every shard, within `timeout` in all.
  [[nodiscard]] absl::Status Leave(absl::Duration timeout);
  // The meter's progress at `clock` with the client's counters.
  Progress ProgressAt(uint64_t clock, bool* new_window = nullptr);

 private:
  client::PsClient* const client_;
  const SessionOptions options_;
  ProgressMeter meter_;
  std::unique_ptr<client::StepLoop> loop_;  // last: destroyed first
};

}  // namespace gradstream::runtime

#endif  // GRADSTREAM_WORKER_RUNTIME_SESSION_H_
