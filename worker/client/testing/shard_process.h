// Test and benchmark support: runs the real shard binary (server/shard,
// `gs_shard`) as a child process on a loopback port, and plays the
// coordinator's part of installing a job on it. Not for production code.
#ifndef GRADSTREAM_WORKER_CLIENT_TESTING_SHARD_PROCESS_H_
#define GRADSTREAM_WORKER_CLIENT_TESTING_SHARD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/job/shard_map.h"
#include "job.pb.h"
#include "ps.pb.h"

namespace gradstream::client::testing {

// One gs_shard child. Not thread-safe.
class ShardProcess {
 public:
  // Starts `binary --port=<port> --port_file=<tmp> <extra_args>` and waits
  // (polling, up to `deadline`) until it wrote the port it bound. port 0 lets
  // the kernel choose. DeadlineExceeded when it does not, Internal when the
  // child exits first.
  static absl::StatusOr<std::unique_ptr<ShardProcess>> Start(
      const std::string& binary, std::vector<std::string> extra_args, int port = 0,
      absl::Duration deadline = absl::Seconds(20));
  ~ShardProcess();  // SIGKILL

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return pid_; }

  // kill -9 and reap.
  void Kill();
  // SIGSTOP, and returns once every thread of the child has stopped
  // (waitpid WUNTRACED): kill() only queues the signal, and a loaded machine
  // can run the shard for a while after it. Resume() is SIGCONT.
  [[nodiscard]] absl::Status Pause();
  [[nodiscard]] absl::Status Resume();
  // Graceful stop: SIGTERM, then waits up to `deadline` for the child to
  // exit and returns its exit code (a sanitizer that found something exits
  // non-zero here). Internal when it died of a signal; DeadlineExceeded
  // (after a SIGKILL) when it did not exit in time; FailedPrecondition when
  // no child runs.
  absl::StatusOr<int> Stop(absl::Duration deadline = absl::Seconds(30));
  // Starts the binary again on the same port (after Kill()).
  [[nodiscard]] absl::Status Restart(absl::Duration deadline = absl::Seconds(20));

 private:
  ShardProcess(std::string binary, std::vector<std::string> args, std::string dir)
      : binary_(std::move(binary)), args_(std::move(args)), dir_(std::move(dir)) {}
  absl::Status Launch(int port, absl::Duration deadline);

  const std::string binary_;
  const std::vector<std::string> args_;
  const std::string dir_;  // holds the port file
  pid_t pid_ = -1;
  int port_ = 0;
};

// What a test's coordinator installs on each shard.
struct JobSetup {
  std::string job_id = "job";
  v1::OptimizerSpec optimizer;      // e.g. type "sgd", learning_rate 1
  v1::ConsistencySpec consistency;  // default SYNC
  std::vector<uint64_t> workers = {1};
  uint64_t epoch = 1;
  uint32_t checkpoint_every = 0;
  v1::Codec pull_codec = v1::CODEC_NONE;  // see [pull codec]
  // The coordinator's re-creation of a running job on a shard that lost it
  // (see [re-initialization] in server/shard/job.h).
  bool resume = false;
  uint64_t resume_clock = 0;
  uint64_t seed = 1;  // tables' rows start from it
};

// CreateJob on every shard of `map` with the chunks the map gives it.
// Returns the responses by shard.
absl::StatusOr<std::vector<v1::CreateJobResponse>> CreateJob(const ShardMap& map,
                                                             const JobSetup& setup,
                                                             absl::Duration deadline);
// CreateJob on shard `shard` only.
absl::StatusOr<v1::CreateJobResponse> CreateJobOn(const ShardMap& map, uint32_t shard,
                                                  const JobSetup& setup, absl::Duration deadline);
// Unary helpers against one shard address. `include_rounds` asks for the
// recent sync-round records too.
absl::StatusOr<v1::StatsResponse> GetStats(const std::string& address, const std::string& job_id,
                                           absl::Duration deadline, bool include_rounds = false);
[[nodiscard]] absl::Status DropJob(const std::string& address, const std::string& job_id,
                                  absl::Duration deadline);
absl::StatusOr<v1::CheckpointResponse> Checkpoint(const std::string& address,
                                                  const std::string& job_id,
                                                  absl::Duration deadline);

}  // namespace gradstream::client::testing

#endif  // GRADSTREAM_WORKER_CLIENT_TESTING_SHARD_PROCESS_H_
