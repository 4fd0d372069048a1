// The coordinator in coordinator.proto's terms: each call converts its
// request (coordinator_convert.h), checks what only a request can get wrong
// (a spec's fields, a scale count), asks the core (coordinator.h) and
// converts the answer. The gRPC service (service.h) adds the token check and
// the call counts; tests and tools drive it in-process.
#ifndef GRADSTREAM_SERVER_COORDINATOR_RPC_COORDINATOR_API_H_
#define GRADSTREAM_SERVER_COORDINATOR_RPC_COORDINATOR_API_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator.pb.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/job_models.h"
#include "server/coordinator/rpc/state_store.h"
#include "server/coordinator/shard_client.h"

namespace gradstream::coordinator {

// Thread-safe (the core is). `core` must outlive it.
class CoordinatorApi {
 public:
  explicit CoordinatorApi(Coordinator* core) : core_(core) {}

  absl::StatusOr<gradstream::v1::RegisterShardResponse> RegisterShard(
      const gradstream::v1::RegisterShardRequest& request);
  absl::StatusOr<gradstream::v1::RegisterWorkerResponse> RegisterWorker(
      const gradstream::v1::RegisterWorkerRequest& request);
  // NotFound: unknown worker; FailedPrecondition: stale incarnation or
  // removed (see Coordinator::Heartbeat).
  absl::StatusOr<gradstream::v1::HeartbeatResponse> Heartbeat(
      const gradstream::v1::HeartbeatRequest& request);
  // InvalidArgument naming the bad field(s) of the spec.
  absl::StatusOr<gradstream::v1::SubmitJobResponse> SubmitJob(
      const gradstream::v1::SubmitJobRequest& request);
  absl::StatusOr<gradstream::v1::JobStatus> GetJob(const gradstream::v1::GetJobRequest& request);
  // One page, newest first (see ListJobsRequest); InvalidArgument for a
  // page token that is not a job id.
  absl::StatusOr<gradstream::v1::ListJobsResponse> ListJobs(
      const gradstream::v1::ListJobsRequest& request);
  // NotFound; FailedPrecondition for a finished job; InvalidArgument for 0.
  absl::StatusOr<gradstream::v1::ScaleJobResponse> ScaleJob(
      const gradstream::v1::ScaleJobRequest& request);
  absl::StatusOr<gradstream::v1::CancelJobResponse> CancelJob(
      const gradstream::v1::CancelJobRequest& request);
  gradstream::v1::ClusterStatus GetCluster();

 private:
  Coordinator* const core_;
};

// The JobModels of common/job (BuildShardMap, DeclaredTensors) over a
// spec's wire form. Lives as long as the process.
const JobModels& SpecJobModels();

// The core over the SQLite state at `state_file` ("" = in memory only; the
// errors of StateStore::Open and of loading it) with SpecJobModels().
// `shards` must outlive it.
absl::StatusOr<std::unique_ptr<Coordinator>> OpenCoordinator(CoordinatorOptions options,
                                                             ShardClient* shards,
                                                             const std::string& state_file,
                                                             StateStoreOptions store = {});

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_RPC_COORDINATOR_API_H_
