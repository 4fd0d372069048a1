// A worker's training progress in one struct, from the step loop to the
// coordinator's heartbeat: both front-ends measure it with one
// ProgressMeter, and it crosses the wire (agent, heartbeat) through one
// pair of converters.
#ifndef GRADSTREAM_WORKER_RUNTIME_PROGRESS_H_
#define GRADSTREAM_WORKER_RUNTIME_PROGRESS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env/env.h"
#include "coordinator.pb.h"
#include "worker/client/ps_client.h"

namespace gradstream::runtime {

struct Progress {
  std::string job_id;          // "" until the worker first publishes
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
  // "host" (encoded on the CPU), "host-from-cuda" (a GPU model's gradients
  // copied to host as fp32 first) or "device" (encoded on the GPU, see
  // internal/device_pusher.h).
  std::string encode_path = "host";
  // Share of the training steps' wall time spent encoding and copying
  // gradients or codes (docs/design/device-encode.md says what each path counts).
  float encode_share = 0;
  std::optional<LinkDecision> push_link;  // ClientStats::push_link
  float wait_share = 0;  // StepLoop::wait_share(): the step's share spent waiting
};

// The heartbeat's and the agent's form of `p` (coordinator.proto's
// WorkerProgress; job, rank and world size travel beside it).
v1::WorkerProgress ProgressToProto(const Progress& p);
// Merges a reported `in` into `p`: an accuracy only when one was measured
// (accuracy_clock > 0), every other field as reported.
void MergeProgress(const v1::WorkerProgress& in, Progress* p);

// Latest progress, written by the training thread, read by the heartbeat.
// Thread-safe.
class ProgressBoard {
 public:
  void Set(const Progress& p) ABSL_LOCKS_EXCLUDED(mu_);
  Progress Get() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  Progress progress_ ABSL_GUARDED_BY(mu_);
};

// The loss average, the samples/s window and the byte counters of one
// worker's session. Thread-safe.
class ProgressMeter {
 public:
  // Rates are measured on env->Now() ([env time] in common/env/env.h). Not
  // owned.
  explicit ProgressMeter(Env* env = Env::Default());

  // A step on `samples` samples ended with `loss` (nullopt: not measured).
  // The reported loss is an exponential average, 0.9 old + 0.1 new.
  void AddStep(std::optional<double> loss, uint64_t samples) ABSL_LOCKS_EXCLUDED(mu_);
  void SetAccuracy(float accuracy, uint64_t clock) ABSL_LOCKS_EXCLUDED(mu_);
  void SetEncodePath(std::string path) ABSL_LOCKS_EXCLUDED(mu_);

  // The progress at `clock` with `stats`'s byte counters (none when null).
  // samples_per_sec is the rate over the last window of at least one
  // second; `new_window`, when given, says whether this call closed one
  // (what a caller paces costly figures such as the residual norm by).
  Progress At(uint64_t clock, const client::ClientStats* stats, bool* new_window = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Env* const env_;
  mutable absl::Mutex mu_;
  Progress progress_ ABSL_GUARDED_BY(mu_);
  std::optional<double> loss_ema_ ABSL_GUARDED_BY(mu_);
  absl::Time window_start_ ABSL_GUARDED_BY(mu_);
  uint64_t window_samples_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gradstream::runtime

#endif  // GRADSTREAM_WORKER_RUNTIME_PROGRESS_H_
