// Builds a job's wire ShardMap with the worker library's SplitModel()
// (worker/client/shard_map.h), so the coordinator and workers share one
// splitting rule.
#ifndef GRADSTREAM_SERVER_COORDINATOR_INTERNAL_SHARD_MAP_CONVERT_H_
#define GRADSTREAM_SERVER_COORDINATOR_INTERNAL_SHARD_MAP_CONVERT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "job.pb.h"

namespace gradstream::coordinator {

// The shard map of a defaults-filled `spec` over `shards` (addresses):
// the model's tensors (see [model tensor naming]) cut into spec.chunk_elems
// chunks, balanced by bytes, each tensor's codec chosen by spec.codec. Uses
// only the first min(#shards, #chunks) shards, so every shard owns a chunk.
// InvalidArgument from the model or the split.
absl::StatusOr<gradstream::v1::ShardMap> BuildShardMap(const gradstream::v1::JobSpec& spec,
                                                       const std::vector<std::string>& shards);

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_INTERNAL_SHARD_MAP_CONVERT_H_
