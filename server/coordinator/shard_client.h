// How the coordinator reaches the shards' unary control RPCs (CreateJob,
// UpdateMembership, DropJob, GetStats). An interface so that tests of the
// coordinator's logic can inject failures; the real one speaks gRPC.
#ifndef GRADSTREAM_SERVER_COORDINATOR_SHARD_CLIENT_H_
#define GRADSTREAM_SERVER_COORDINATOR_SHARD_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rpc/rpc.h"
#include "ps.pb.h"

namespace gradstream::coordinator {

// Implementations are thread-safe. Every call has a deadline; a shard that
// does not answer in time is DeadlineExceeded / Unavailable.
class ShardClient {
 public:
  virtual ~ShardClient() = default;
  virtual absl::StatusOr<gradstream::v1::CreateJobResponse> CreateJob(
      const std::string& address, const gradstream::v1::CreateJobRequest& request) = 0;
  virtual absl::Status UpdateMembership(const std::string& address,
                                        const gradstream::v1::MembershipUpdate& update) = 0;
  virtual absl::Status DropJob(const std::string& address, const std::string& job_id) = 0;
  virtual absl::StatusOr<gradstream::v1::StatsResponse> GetStats(
      const std::string& address, const gradstream::v1::StatsRequest& request) = 0;
};

// gRPC client with one cached channel per address and `deadline` per call;
// channels use `config`'s credentials and every call carries its cluster
// token.
std::unique_ptr<ShardClient> NewGrpcShardClient(absl::Duration deadline,
                                                const rpc::RpcConfig& config = {});

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_SHARD_CLIENT_H_
