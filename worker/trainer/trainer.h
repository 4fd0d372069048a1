// The worker's training loop for one job: pull -> forward/backward -> encode
// and push each tensor as soon as backward produces it -> ask for the next
// clock's pull -> clock.
//
// The trainer knows nothing of the coordinator's RPCs: the heartbeat thread
// drops the newest assignment into an AssignmentFeed and reads progress from
// a ProgressBoard, both thread-safe mailboxes. Membership changes (new rank or
// world size, scale-down) take effect at clock boundaries, as the coordinator
// announces them (README.md, "Membership and scaling").
#ifndef GRADSTREAM_WORKER_TRAINER_TRAINER_H_
#define GRADSTREAM_WORKER_TRAINER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env/env.h"
#include "worker/client/ps_client.h"
#include "worker/client/step_loop.h"
#include "worker/model/model.h"
#include "worker/runtime/internal/device_pusher.h"
#include "worker/runtime/membership.h"
#include "worker/runtime/progress.h"
#include "worker/runtime/session.h"
#include "worker/trainer/job_setup.h"

namespace gradstream {

struct TrainerOptions {
  // The step loop's waits and clock: a waiting pull looks at the assignment
  // and the stop flag every loop.wait_slice (it is asked once however long
  // it takes, see [step loop] in worker/client/step_loop.h).
  client::StepLoopOptions loop;
  // Final pull clock = steps + final_pull_slack, so that in bounded
  // staleness (s) the members evaluate only once every member finished.
  uint64_t final_pull_slack = 0;
  // Encode a GPU model's gradients on the device (see [device encode]);
  // Run() fails with FailedPrecondition when that is unavailable.
  bool device_encode = false;
  uint64_t worker_id = 0;  // the client's ClientOptions::worker_id (the encode key)
  // NOTE: [graceful stop] Set (by a SIGTERM/SIGINT handler) to leave the job:
  // the trainer finishes the clock it is in (a pull that waits is given up
  // within loop.wait_slice), sends Leave to every shard and returns kLeft;
  // the caller reports LEFT to the coordinator, which removes the worker at
  // the clock it did not do. Not owned; nullptr = never.
  const std::atomic<bool>* stop = nullptr;
};

enum class TrainOutcome {
  kDone,     // reached the job's steps
  kLeft,     // scaled down: left after leave_clock
  kStopped,  // the job was cancelled, failed or reassigned
};

// Runs one job of a built-in model on one thread, driving a
// runtime::WorkerSession (worker/runtime/session.h) with the model and its
// data. Not thread-safe; the pointers are not owned and must outlive the
// trainer.
class Trainer {
 public:
  Trainer(const TrainSetup* setup, Model* model, client::PsClient* client,
          const runtime::AssignmentFeed* feed, runtime::ProgressBoard* board,
          TrainerOptions options);

  // Trains from `start_clock` (the assignment's join clock). Every worker
  // starting a job at clock 0 sends the initial parameters first (the same
  // values everywhere, built from the job seed: see runtime::InitialValues). Errors: the
  // client's or model's status; DeadlineExceeded when the job stalls past
  // options.stall_deadline.
  absl::StatusOr<TrainOutcome> Run(uint64_t start_clock);

 private:
  absl::Status Reshard(uint32_t rank, uint32_t world_size);
  // Pulls every tensor at reader clock `clock` into the model (waiting on
  // the pull Step asked for, if any). Returns kStopped-worthy Cancelled
  // when the assignment ends while waiting.
  absl::Status PullInto(uint64_t clock);
  // Cancelled when the worker is stopping or the job no longer active.
  absl::Status CheckActive() const;
  // Where a pull writes: the model's parameters, or host staging for a GPU.
  std::vector<absl::Span<float>> PullTargets();
  // The model's current parameters, to send as the job's initial values.
  absl::Status InitParams(uint64_t start_clock);
  bool Stopping() const { return options_.stop != nullptr && options_.stop->load(); }
  absl::Status Evaluate(uint64_t clock);
  absl::Status Step(uint64_t clock);
  // Whether rank 0 evaluates the parameters once `clock` is done.
  bool EvaluatesAfter(uint64_t clock) const;
  void Publish(uint64_t clock);
  bool Active(const runtime::Assignment& a) const { return runtime::StillOurs(a, job_id_); }
  // Whether the loop will pull `clock`: not past the last step, the job
  // still ours, no stop and no leave at `clock`. Any thread.
  bool WillPull(uint64_t clock) const;

  const TrainSetup* const setup_;
  Model* const model_;
  client::PsClient* const client_;
  const runtime::AssignmentFeed* const feed_;
  runtime::ProgressBoard* const board_;
  const TrainerOptions options_;
  const std::string job_id_;

  std::unique_ptr<MinibatchIterator> batches_;
  uint32_t rank_ = 0, world_size_ = 0;
  std::vector<std::vector<float>> host_params_;  // staging for GPU models
  std::vector<std::vector<float>> host_grads_;
  std::unique_ptr<internal::DevicePusher> pusher_;  // null: the host path
  std::unique_ptr<runtime::WorkerSession> session_;  // during Run
  double encode_seconds_ = 0;  // see Progress::encode_share
  double step_seconds_ = 0;
  double residual_norm_ = 0;
};

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_TRAINER_TRAINER_H_
