// The shard map as plain structs, and the pure functions that build and check
// it: which chunk of which tensor lives on which shard.
//
// The coordinator computes the map once per job with SplitModel() and hands
// the same map to every worker and shard; nobody
// recomputes it. Workers only validate what they were given. Conversion to
// and from the wire form is in shard_map_proto.h.
#ifndef GRADSTREAM_COMMON_JOB_SHARD_MAP_H_
#define GRADSTREAM_COMMON_JOB_SHARD_MAP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/job/codec_policy.h"
#include "common/job/model.h"  // TensorSpec

namespace gradstream {

// A chunk is the unit of sharding, encoding and versioning. Its fp32 form must
// fit in one gRPC message well under the 4 MiB default receive limit, so a
// chunk holds at most 1 MiB of fp32.
inline constexpr uint32_t kMaxChunkElems = 262144;  // 1 MiB of fp32
// A table row is pulled and pushed whole: at most this many floats.
inline constexpr uint32_t kMaxTableDim = 65536;

struct TensorInfo {
  std::string name;
  uint32_t index = 0;      // position in ShardMap::tensors
  uint64_t num_elems = 0;
  std::string codec;       // chosen by the policy; empty = resolve on the worker
  std::string pull_codec = "none";  // see [layer-wise pull]
  // > 0: a row-sparse table of table_rows x table_dim (num_elems their
  // product), pulled and pushed by row (docs/design/sparse-tables.md).
  uint64_t table_rows = 0;
  uint32_t table_dim = 0;
  bool is_table() const { return table_rows > 0; }
};

// A table partition's chunk: the rows RowPartition assigns to `partition`.
struct TablePart {
  uint64_t table_rows = 0;
  uint32_t dim = 0;
  uint32_t partition = 0;
  uint32_t partitions = 0;
  float init_std = 1.0f;
};

struct ChunkInfo {
  uint64_t chunk_id = 0;   // dense 0..N-1 over the whole model
  uint32_t tensor = 0;     // index into ShardMap::tensors
  uint64_t offset = 0;     // first element within the tensor
  uint32_t num_elems = 0;  // 1..kMaxChunkElems
  uint32_t shard = 0;      // index into ShardMap::shards
  bool pull_fp32 = false;  // pulled fp32 under a job pull codec (see [layer-wise pull])
  // Set for a table partition: num_elems and offset are 0.
  std::optional<TablePart> table;
};

struct ShardMap {
  std::vector<std::string> shards;  // shard addresses, host:port
  std::vector<TensorInfo> tensors;
  std::vector<ChunkInfo> chunks;    // chunks[i].chunk_id == i, in tensor/offset order
};

// Cuts every tensor into chunks of at most `chunk_elems` elements (the last
// chunk of a tensor may be shorter) and assigns chunks to shards balanced both
// by the bytes each puts on the wire per step (push plus pull payload under
// its codecs) and by elements ([wire placement]): largest first, ties to the
// lower index, so the result is deterministic. Chunk ids are dense in tensor
// order. Each TensorInfo's codec comes from `policy`. A table
// (TensorSpec::table) gets one partition per shard, partition p on shard p.
// InvalidArgument for no shards, no tensors, an empty or duplicate tensor
// name, a zero-sized tensor, or chunk_elems outside 1..kMaxChunkElems.
absl::StatusOr<ShardMap> SplitModel(absl::Span<const TensorSpec> tensors,
                                    absl::Span<const std::string> shards,
                                    uint32_t chunk_elems = kMaxChunkElems,
                                    const CodecPolicy& policy = CodecPolicy());

// Checks a map received from elsewhere: tensor indices match positions, chunk
// ids are dense, every chunk is 1..kMaxChunkElems elements on a valid shard,
// and each tensor is covered exactly once, in order, without gaps or overlap.
// InvalidArgument naming the first violation.
[[nodiscard]] absl::Status ValidateShardMap(const ShardMap& map);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_SHARD_MAP_H_
