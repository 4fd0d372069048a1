// The shard's control messages as the core's structs: one converter for the
// ParameterServer service's unary calls (the Session stream's messages are
// session_handler.h's).
#ifndef GRADSTREAM_SERVER_SHARD_RPC_JOB_CONVERT_H_
#define GRADSTREAM_SERVER_SHARD_RPC_JOB_CONVERT_H_

#include "absl/status/statusor.h"
#include "ps.pb.h"
#include "server/shard/rpc/shard_server.h"
#include "server/shard/types.h"

namespace gradstream::shard {

// Bytes a message may carry beside a chunk's payload (headers, ids).
inline constexpr int kMessageOverhead = 1024;
// The receive limit a shard needs to hold a row-sparse table.
inline constexpr int kMinTableMessageBytes = 8 << 20;

// The job a CreateJobRequest asks for on a shard run with `server`'s
// options. InvalidArgument for an unknown optimizer, consistency mode or
// pull codec, a non-finite precision bound, or a chunk whose fp32 push
// would not fit the shard's message limit.
absl::StatusOr<JobOptions> JobOptionsFromProto(const v1::CreateJobRequest& req,
                                               const ShardServerOptions& server);

// A membership epoch (CreateJobRequest.membership and .epochs,
// MembershipUpdate.membership).
MembershipEpoch MembershipEpochFromProto(const v1::Membership& m);

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_RPC_JOB_CONVERT_H_
