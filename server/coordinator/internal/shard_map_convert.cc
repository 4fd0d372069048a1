// SplitModel() result -> wire ShardMap; see shard_map_convert.h.
#include "server/coordinator/internal/shard_map_convert.h"

#include "server/coordinator/job_spec.h"
#include "worker/client/shard_map.h"
#include "worker/client/shard_map_proto.h"

namespace gradstream::coordinator {

absl::StatusOr<gradstream::v1::ShardMap> BuildShardMap(const gradstream::v1::JobSpec& spec,
                                                       const std::vector<std::string>& shards) {
  absl::StatusOr<std::vector<TensorSpec>> tensors = JobModelTensors(spec);
  if (!tensors.ok()) return tensors.status();
  std::vector<client::TensorSpec> specs;
  for (const auto& t : *tensors) specs.push_back({t.name, static_cast<uint64_t>(t.num_elems)});

  // A shard without chunks would refuse the job ("job has no chunks"): use
  // at most as many shards as there are chunks. Largest-first placement then
  // gives every shard at least one.
  uint64_t chunks = 0;
  for (const auto& t : specs) {
    if (spec.chunk_elems() > 0)
      chunks += (t.num_elems + spec.chunk_elems() - 1) / spec.chunk_elems();
  }
  std::vector<std::string> used = shards;
  if (chunks > 0 && used.size() > chunks) used.resize(chunks);
  absl::StatusOr<client::ShardMap> map =
      client::SplitModel(specs, used, spec.chunk_elems(), client::CodecPolicyFromProto(spec.codec()));
  if (!map.ok()) return map.status();
  return client::ShardMapToProto(*map);
}

}  // namespace gradstream::coordinator
