// ps.proto's control messages <-> the core's shard calls (shard_client.h):
// the one converter of the ParameterServer service on the coordinator's
// side. Pure functions.
#ifndef GRADSTREAM_SERVER_COORDINATOR_RPC_SHARD_CONVERT_H_
#define GRADSTREAM_SERVER_COORDINATOR_RPC_SHARD_CONVERT_H_

#include "ps.pb.h"
#include "server/coordinator/shard_client.h"

namespace gradstream::coordinator {

// The optimizer, consistency, pull codec and checkpoint interval come from
// the job's spec (JobSpec::wire).
gradstream::v1::CreateJobRequest CreateJobToProto(const ShardJob& job);
ShardJobCreated CreatedFromProto(const gradstream::v1::CreateJobResponse& proto);
gradstream::v1::MembershipUpdate UpdateToProto(const std::string& job_id,
                                               const MembershipEpoch& epoch);
ShardJobStats StatsFromProto(const gradstream::v1::StatsResponse& proto);

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_RPC_SHARD_CONVERT_H_
