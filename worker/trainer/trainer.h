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
#include "worker/trainer/internal/device_pusher.h"
#include "worker/trainer/job_setup.h"

namespace gradstream {

// A worker's place in a job at one membership epoch (plain form of
// coordinator.proto's Assignment).
struct Assignment {
  std::string job_id;
  bool job_active = false;   // PENDING or RUNNING; false = stop now
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint64_t epoch = 0;
  uint64_t epoch_clock = 0;  // rank / world_size hold from this clock on
  uint64_t join_clock = 0;
  bool leave = false;        // scale-down: finish clocks < leave_clock, then leave
  uint64_t leave_clock = 0;
};

// Whether `a` asks the worker to train: an active job, and not a leave at
// or before the clock it would join at (the coordinator shows that while a
// rejoin's epoch is not committed yet).
bool Trains(const Assignment& a);

// NOTE: [rejoin] A worker that left a job (scale-down) waits until the
// coordinator moves it off that job before it takes another assignment. The
// move shows as one heartbeat reply without a job, which a loaded training
// thread can miss when the worker is added back to the same job right after;
// waiting on regardless would keep it reporting LEFT and get it removed again
// by an epoch nobody asked for. So a new membership is recognized without the
// gap: it trains (Trains), in the same job, from a later join clock than the
// one `trained` gave.
bool RejoinsAfter(const Assignment& trained, const Assignment& now);

// Newest assignment, written by the heartbeat thread. Thread-safe.
class AssignmentFeed {
 public:
  void Set(Assignment a) ABSL_LOCKS_EXCLUDED(mu_);
  Assignment Get() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  Assignment current_ ABSL_GUARDED_BY(mu_);
};

struct Progress {
  std::string job_id;          // "" until the trainer first publishes
  uint32_t rank = 0;
  uint32_t world_size = 0;     // 0 before the first data shard is cut
  uint64_t clock = 0;          // clocks completed
  float loss = 0;              // moving average of the training loss
  float accuracy = 0;          // last test accuracy (rank 0; every member at the end)
  uint64_t accuracy_clock = 0;
  float samples_per_sec = 0;
  uint64_t bytes_pushed = 0;
  uint64_t fp32_bytes_pushed = 0;
  uint64_t bytes_pulled = 0;
  uint64_t fp32_bytes_pulled = 0;
  uint64_t bytes_pulled_discarded = 0;  // answers to pulls given up (ClientStats)
  double residual_norm = 0;
  uint64_t reconnects = 0;     // the client's reconnects to shards
  // "host" (gradients encoded on the CPU; a GPU model's are copied to host
  // as fp32 first) or "device" (encoded on the GPU, see [device encode] in
  // internal/device_pusher.h).
  std::string encode_path;
  // Share of the training steps' wall time (pull to clock) spent encoding
  // and copying gradients or codes: on the host path the time the training
  // thread spends copying to host plus the step loop's encode thread's time
  // (which overlaps backward), on the device path the GPU time of the encode
  // kernels and code copies.
  float encode_share = 0;
};

// Latest progress, written by the trainer. Thread-safe.
class ProgressBoard {
 public:
  void Set(const Progress& p) ABSL_LOCKS_EXCLUDED(mu_);
  Progress Get() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  Progress progress_ ABSL_GUARDED_BY(mu_);
};

struct TrainerOptions {
  // How often a waiting pull looks at the assignment and the stop flag (the
  // pull itself is asked once however long it takes, see [step loop]).
  absl::Duration pull_wait = absl::Milliseconds(500);
  // No chunk of a pull arrives for this long: an error.
  absl::Duration stall_deadline = absl::Minutes(3);
  absl::Duration push_wait = absl::Minutes(1);
  // Final pull clock = steps + final_pull_slack, so that in bounded
  // staleness (s) the members evaluate only once every member finished.
  uint64_t final_pull_slack = 0;
  // Encode a GPU model's gradients on the device (see [device encode]);
  // Run() fails with FailedPrecondition when that is unavailable.
  bool device_encode = false;
  uint64_t worker_id = 0;  // the client's ClientOptions::worker_id (the encode key)
  // NOTE: [graceful stop] Set (by a SIGTERM/SIGINT handler) to leave the job:
  // the trainer finishes the clock it is in (a pull that waits is given up
  // within pull_wait), sends Leave to every shard and returns kLeft; the
  // caller reports LEFT to the coordinator, which removes the worker at the
  // clock it did not do. Not owned; nullptr = never.
  const std::atomic<bool>* stop = nullptr;
  // The clock of the step loop's waits and of the reported rates ([env
  // time] in common/env/env.h). Not owned.
  Env* env = Env::Default();
};

enum class TrainOutcome {
  kDone,     // reached the job's steps
  kLeft,     // scaled down: left after leave_clock
  kStopped,  // the job was cancelled, failed or reassigned
};

// Runs one job on one thread. Not thread-safe; the pointers are not owned and
// must outlive the trainer.
class Trainer {
 public:
  Trainer(const TrainSetup* setup, Model* model, client::PsClient* client,
          const AssignmentFeed* feed, ProgressBoard* board, TrainerOptions options);

  // Trains from `start_clock` (the assignment's join clock). Rank 0 of a job
  // that starts at clock 0 sends the initial parameters first. Errors: the
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
  // Sends the model's current parameters as every chunk's InitChunk (only
  // chunks without parameters take them).
  absl::Status SendParams();
  bool Stopping() const { return options_.stop != nullptr && options_.stop->load(); }
  absl::Status Evaluate(uint64_t clock);
  absl::Status Step(uint64_t clock);
  // Whether rank 0 evaluates the parameters once `clock` is done.
  bool EvaluatesAfter(uint64_t clock) const;
  void Publish(uint64_t clock);
  bool Active(const Assignment& a) const { return a.job_active && a.job_id == job_id_; }

  const TrainSetup* const setup_;
  Model* const model_;
  client::PsClient* const client_;
  const AssignmentFeed* const feed_;
  ProgressBoard* const board_;
  const TrainerOptions options_;
  const std::string job_id_;

  std::unique_ptr<MinibatchIterator> batches_;
  uint32_t rank_ = 0, world_size_ = 0;
  std::vector<std::vector<float>> host_params_;  // staging for GPU models
  std::vector<std::vector<float>> host_grads_;
  std::unique_ptr<internal::DevicePusher> pusher_;  // null: the host path
  std::unique_ptr<client::StepLoop> loop_;          // during Run
  double encode_seconds_ = 0;  // see Progress::encode_share
  double step_seconds_ = 0;
  Progress progress_;
  double loss_ema_ = -1;
  absl::Time rate_start_;
  uint64_t rate_samples_ = 0;
};

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_TRAINER_TRAINER_H_
