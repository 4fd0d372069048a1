// coordinator.proto <-> the core's plain structs (types.h, state_storage.h):
// the one converter of the Coordinator service and of the state database,
// field for field. Pure functions.
#ifndef GRADSTREAM_SERVER_COORDINATOR_RPC_COORDINATOR_CONVERT_H_
#define GRADSTREAM_SERVER_COORDINATOR_RPC_COORDINATOR_CONVERT_H_

#include "absl/status/statusor.h"
#include "coordinator.pb.h"
#include "job.pb.h"
#include "server/coordinator/state_storage.h"
#include "server/coordinator/types.h"

namespace gradstream::coordinator {

// A normalized spec (see [normalized spec] in common/job/job_spec.h): the
// fields the core reads, and the whole of it as JobSpec::wire.
JobSpec JobSpecFromProto(const gradstream::v1::JobSpec& proto);
// The spec JobSpec::wire holds (an empty spec for an empty wire).
gradstream::v1::JobSpec JobSpecToProto(const JobSpec& spec);

DeclaredTensor DeclaredTensorFromProto(const gradstream::v1::DeclaredTensor& proto);
gradstream::v1::DeclaredTensor DeclaredTensorToProto(const DeclaredTensor& tensor);

// DataLoss naming the job for a shard map that does not validate.
absl::StatusOr<JobStatus> JobStatusFromProto(const gradstream::v1::JobStatus& proto);
gradstream::v1::JobStatus JobStatusToProto(const JobStatus& status);
JobProgress JobProgressFromProto(const gradstream::v1::JobProgress& proto);
gradstream::v1::JobProgress JobProgressToProto(const JobProgress& progress);
WorkerStatus WorkerStatusFromProto(const gradstream::v1::WorkerStatus& proto);
gradstream::v1::WorkerStatus WorkerStatusToProto(const WorkerStatus& status);
ShardStatus ShardStatusFromProto(const gradstream::v1::ShardStatus& proto);
gradstream::v1::ShardStatus ShardStatusToProto(const ShardStatus& status);

// The state database's contents (jobs with their retired counters and
// tokens, workers, shards, next ids); DataLoss as JobStatusFromProto.
absl::StatusOr<DurableState> DurableStateFromProto(const gradstream::v1::CoordinatorState& proto);
gradstream::v1::CoordinatorState DurableStateToProto(const DurableState& state);

// The calls and their answers.
WorkerRegistration RegistrationFromProto(const gradstream::v1::RegisterWorkerRequest& proto);
gradstream::v1::RegisterWorkerResponse RegisteredToProto(const RegisteredWorker& registered);
HeartbeatReport HeartbeatFromProto(const gradstream::v1::HeartbeatRequest& proto);
gradstream::v1::Assignment AssignmentToProto(const Assignment& assignment);
gradstream::v1::ClusterStatus ClusterToProto(const ClusterStatus& cluster);

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_RPC_COORDINATOR_CONVERT_H_
