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
#include "common/rpc/rpc.h"
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
  // Given to every shard, the coordinator and every worker (e.g. the TLS
  // flags and --auth_token_file).
  std::vector<std::string> common_args;
  // How the test itself reaches the coordinator and shards (credentials,
  // cluster token); the default is plaintext without a token.
  rpc::RpcConfig client;
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
  // Shard i's current process (RestartShard replaces it).
  Process& shard(int i) { return *shards_[i]; }
  // kill -9 of shard i; its checkpoint directory stays.
  void KillShard(int i);
  // Starts shard i again with the command line it was started with, pinned
  // to the port it had bound (so the coordinator and the workers find it
  // where they left it) and the same checkpoint directory; kills it first if
  // it still runs. Its log goes to shard<i>.restart<n>.log (see
  // ShardLogPath). Fails if it cannot bind that port within the deadline.
  absl::Status RestartShard(int i);
  // Log of shard i's latest process.
  std::string ShardLogPath(int i) const;
  // Kills (SIGKILL) and restarts the coordinator with the same state file.
  absl::Status RestartCoordinator();
  Process& coordinator_process() { return *coordinator_; }

  // Waits until `n` workers are registered and healthy.
  absl::Status WaitForWorkers(int n, absl::Duration timeout);
  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec);
  absl::StatusOr<v1::JobStatus> GetJob(const std::string& job, bool shard_map = false);
  // Polls until the job is COMPLETED, FAILED or CANCELLED.
  absl::StatusOr<v1::JobStatus> WaitForJob(const std::string& job, absl::Duration timeout);
  // Polls until the job's slowest member reached `clock`; the deadline's
  // error carries Describe(job).
  absl::StatusOr<v1::JobStatus> WaitForClock(const std::string& job, uint64_t clock,
                                             absl::Duration timeout);
  // Who waits for what, for a test that timed out: the job's state, clock
  // and epochs (committed or not), each member's join/leave clocks and
  // reported clock, each worker's state and health as the coordinator sees
  // it, and each shard's slowest and fastest member clock, epoch and
  // versions. Whatever cannot be read is named in its place.
  std::string Describe(const std::string& job);
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
