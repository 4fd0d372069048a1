// Conversion between the plain shard map (shard_map.h) and its wire form
// (job.proto), and the map of a job: BuildShardMap is what the coordinator
// calls once per job.
#ifndef GRADSTREAM_COMMON_JOB_SHARD_MAP_PROTO_H_
#define GRADSTREAM_COMMON_JOB_SHARD_MAP_PROTO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job/job_spec.h"
#include "common/job/shard_map.h"
#include "job.pb.h"

namespace gradstream {

// InvalidArgument when the result does not pass ValidateShardMap().
absl::StatusOr<ShardMap> ShardMapFromProto(const v1::ShardMap& proto);
v1::ShardMap ShardMapToProto(const ShardMap& map);
// One chunk of ShardMapToProto (a shard's CreateJob carries its own).
v1::ChunkInfo ChunkInfoToProto(const ChunkInfo& chunk);

// The shard map of a normalized `spec` over `shards` (addresses): the model's
// tensors (JobTensors, see [model tensor naming]) cut into chunks of at most
// spec.chunk_elems and a shard's fair share ([fair chunks] in the .cc),
// balanced by wire bytes and elements ([wire placement]), each tensor's
// codec chosen by spec.codec. Uses only the first min(#shards, #chunks)
// shards, so every shard owns a chunk. InvalidArgument from the model or the
// split.
absl::StatusOr<ShardMap> BuildShardMap(const v1::JobSpec& spec,
                                       const std::vector<std::string>& shards);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_SHARD_MAP_PROTO_H_
