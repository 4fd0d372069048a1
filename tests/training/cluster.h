// A whole gradstream cluster on loopback for tests and benchmarks: real
// gs_shard, gs_coordinator and gs_worker processes on port 0, driven through
// the coordinator's gRPC API. Every wait has a deadline.
#ifndef GRADSTREAM_TESTS_TRAINING_CLUSTER_H_
#define GRADSTREAM_TESTS_TRAINING_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator.grpc.pb.h"
#include "ps.grpc.pb.h"
#include "tests/control/process.h"

namespace gradstream::testing {

struct ClusterBinaries {
  std::string coordinator, shard, worker;
};

struct ClusterOptions {
  int shards = 2;
  int workers = 2;
  absl::Duration heartbeat_timeout = absl::Seconds(3);
  std::vector<std::string> coordinator_args;
  std::vector<std::string> worker_args;
};

// Not thread-safe. Kills every process it started on destruction.
class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const ClusterBinaries& bin,
                                                             const ClusterOptions& options);

  v1::Coordinator::Stub* coordinator() { return coordinator_stub_.get(); }
  const std::string& coordinator_address() const { return coordinator_address_; }
  const std::vector<std::string>& shard_addresses() const { return shard_addresses_; }
  const std::string& dir() const { return dir_; }

  // Starts one more worker process; returns its index.
  absl::StatusOr<int> AddWorker();
  Process& worker(int i) { return *workers_[i]; }
  int num_workers() const { return static_cast<int>(workers_.size()); }
  // Kills (SIGKILL) and restarts the coordinator with the same state file.
  absl::Status RestartCoordinator();
  Process& coordinator_process() { return *coordinator_; }

  // Waits until `n` workers are registered and healthy.
  absl::Status WaitForWorkers(int n, absl::Duration timeout);
  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec);
  absl::StatusOr<v1::JobStatus> GetJob(const std::string& job, bool shard_map = false);
  // Polls until the job is COMPLETED, FAILED or CANCELLED.
  absl::StatusOr<v1::JobStatus> WaitForJob(const std::string& job, absl::Duration timeout);
  // Polls until the job's slowest member reached `clock`.
  absl::StatusOr<v1::JobStatus> WaitForClock(const std::string& job, uint64_t clock,
                                             absl::Duration timeout);
  absl::StatusOr<v1::StatsResponse> ShardStats(int shard, const std::string& job,
                                               bool rounds = false);
  absl::Status Scale(const std::string& job, uint32_t workers);

 private:
  LocalCluster() = default;
  absl::Status StartCoordinator(int port);

  ClusterBinaries bin_;
  ClusterOptions options_;
  std::string dir_;
  std::vector<std::unique_ptr<Process>> shards_;
  std::vector<std::string> shard_addresses_;
  std::unique_ptr<Process> coordinator_;
  std::string coordinator_address_;
  std::unique_ptr<v1::Coordinator::Stub> coordinator_stub_;
  std::vector<std::unique_ptr<Process>> workers_;
  int coordinator_starts_ = 0;
  int coordinator_port_ = 0;
};

}  // namespace gradstream::testing

#endif  // GRADSTREAM_TESTS_TRAINING_CLUSTER_H_
