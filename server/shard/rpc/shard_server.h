// The shard's gRPC server: the ParameterServer service (ps.proto) on gRPC's
// callback API, plus grpc.health.v1 and server reflection.
//
// Threads: gRPC's callback threads only move messages; every decode, apply,
// pull snapshot and file write runs on the shard's Executor. Pulls that must
// wait are parked in their Job (no thread blocks) and answered when ready or,
// at most 100 ms past their deadline, by the sweeper thread with
// DEADLINE_EXCEEDED.
#ifndef GRADSTREAM_SERVER_SHARD_RPC_SHARD_SERVER_H_
#define GRADSTREAM_SERVER_SHARD_RPC_SHARD_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rpc/rpc.h"
#include "common/env/env.h"

namespace gradstream::metrics {
class Registry;
}

namespace gradstream::shard {

struct ShardServerOptions {
  std::string address = "0.0.0.0";  // host to bind
  int port = 0;                     // 0 = pick a free port
  uint32_t shard_index = 0;
  std::string checkpoint_dir;       // "" = no checkpoints
  int max_message_bytes = 8 << 20;  // receive limit: 1 MiB chunks fit with room
  int executor_threads = 0;         // 0 = hardware concurrency
  absl::Duration default_pull_timeout = absl::Seconds(60);
  // A pull's answer travels in messages of chunks up to this many bytes
  // (PullResultToProto in session_handler.h).
  size_t pull_answer_bytes = size_t{1} << 20;
  uint32_t max_pending_rounds = 4;
  // Resource limits: CreateJob answers RESOURCE_EXHAUSTED past these, so a
  // runaway client cannot make the shard allocate without bound.
  uint32_t max_jobs = 64;
  uint64_t max_chunks = 1 << 16;                   // over all jobs
  uint64_t max_param_bytes = uint64_t{16} << 30;   // fp32 parameters over all jobs
  // TLS, cluster token, keepalive (max_message_bytes above wins over
  // rpc.max_message_bytes).
  rpc::RpcConfig rpc;
  Env* env = nullptr;  // nullptr = Env::Default()
  // Where the jobs' gs_shard_* series go (shard_metrics.h); must outlive the
  // server. nullptr = none.
  metrics::Registry* metrics = nullptr;
};

// Thread-safe.
class ShardServer {
 public:
  virtual ~ShardServer() = default;
  // Binds and starts serving. Unavailable when the port cannot be bound
  // (the message names the address); InvalidArgument for a TLS config
  // without a server certificate.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShardServer>> Start(
      const ShardServerOptions& options);
  // The bound port.
  virtual int port() const = 0;
  // Blocks until Shutdown().
  virtual void Wait() = 0;
  // Stops accepting, fails parked pulls, ends streams. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_RPC_SHARD_SERVER_H_
