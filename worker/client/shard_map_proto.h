// Conversion between the plain shard map (shard_map.h) and its wire form
// (job.proto). The only place in the client where job.proto types meet the
// plain structs.
#ifndef GRADSTREAM_WORKER_CLIENT_SHARD_MAP_PROTO_H_
#define GRADSTREAM_WORKER_CLIENT_SHARD_MAP_PROTO_H_

#include "absl/status/statusor.h"
#include "job.pb.h"
#include "worker/client/shard_map.h"

namespace gradstream::client {

// InvalidArgument when the result does not pass ValidateShardMap().
absl::StatusOr<ShardMap> ShardMapFromProto(const v1::ShardMap& proto);
v1::ShardMap ShardMapToProto(const ShardMap& map);

// Applies the job spec's defaults (job.proto): default codec "twobit",
// threshold 0.5, clip 2.5 where the proto holds 0.
CodecPolicy CodecPolicyFromProto(const v1::CodecPolicy& proto);

}  // namespace gradstream::client

#endif  // GRADSTREAM_WORKER_CLIENT_SHARD_MAP_PROTO_H_
