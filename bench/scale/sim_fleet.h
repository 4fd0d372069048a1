// Simulated workers for the control-plane scale benchmark (scale_bench.cc):
// N workers in one process, each with its own gRPC channel (its own TCP
// connection) to a real gs_coordinator, doing what worker/trainer/worker_main.cc
// does on the control plane: register, heartbeat at the interval the
// coordinator asks for, take assignments, report LEFT at a scale-down and go
// back to the pool when a job ends. They train nothing, except the ones
// StartPushers() turns into real pushers: those push a job's gradients to
// the real gs_shard processes through worker/client's PsClient.
#ifndef GRADSTREAM_BENCH_SCALE_SIM_FLEET_H_
#define GRADSTREAM_BENCH_SCALE_SIM_FLEET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator.grpc.pb.h"

namespace gradstream::bench {

// Latency samples in milliseconds. Thread-safe.
class Samples {
 public:
  void Add(double ms) ABSL_LOCKS_EXCLUDED(mu_);
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);
  size_t count() const ABSL_LOCKS_EXCLUDED(mu_);
  // The p-th percentile (0..100, nearest rank); 0 with no samples.
  double Percentile(double p) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::vector<double> ms_ ABSL_GUARDED_BY(mu_);
};

struct FleetOptions {
  std::string coordinator;  // host:port
  int workers = 16;
  int threads = 32;  // heartbeat threads; each serves workers/threads of them in turn
  absl::Duration rpc_deadline = absl::Seconds(5);
};

// Counters since Start(), or since the last ResetWindow().
struct FleetCounters {
  uint64_t heartbeats = 0;
  uint64_t heartbeat_errors = 0;  // failed RPCs (deadline, unavailable, ...)
  uint64_t reregistrations = 0;   // NOT_FOUND / FAILED_PRECONDITION: removed by the coordinator
  uint64_t pushes = 0;            // tensor pushes acknowledged by every shard
  uint64_t push_errors = 0;
};

// Thread-safe. Stops and joins every thread on destruction.
class SimFleet {
 public:
  explicit SimFleet(FleetOptions options);
  ~SimFleet();

  // Registers every worker (from the heartbeat threads, concurrently) and
  // starts heartbeating; returns once all are registered, or the first
  // error (DeadlineExceeded after `deadline`).
  [[nodiscard]] absl::Status Start(absl::Duration deadline);

  // Turns up to `max_pushers` members into pushers, at most `per_job` of each
  // job (its lowest ranks), each with its own PsClient pushing every tensor
  // of the job's model per clock as fast as the shards acknowledge. A worker
  // that is not a member of a running job at an epoch it was told of is
  // skipped. Returns how many started.
  int StartPushers(int max_pushers, int per_job);
  // Stops and joins every pusher.
  void StopPushers();

  // Heartbeat round trips (ms) and push round trips (ms, one tensor's push
  // until every shard acknowledged it).
  Samples& heartbeat_ms() { return heartbeat_ms_; }
  Samples& push_ms() { return push_ms_; }
  FleetCounters counters() const;
  void ResetWindow();

  uint32_t heartbeat_interval_ms() const { return interval_ms_.load(); }

 private:
  struct Worker;
  class Pusher;

  void Serve(int thread);
  absl::Status Register(Worker& w);
  void Beat(Worker& w);

  const FleetOptions options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int> registered_{0};
  std::atomic<uint32_t> interval_ms_{1000};

  Samples heartbeat_ms_;
  Samples push_ms_;
  std::atomic<uint64_t> heartbeats_{0}, heartbeat_errors_{0}, reregistrations_{0};
  std::atomic<uint64_t> pushes_{0}, push_errors_{0};

  absl::Mutex pushers_mu_;
  std::vector<std::unique_ptr<Pusher>> pushers_ ABSL_GUARDED_BY(pushers_mu_);
};

}  // namespace gradstream::bench

#endif  // GRADSTREAM_BENCH_SCALE_SIM_FLEET_H_
