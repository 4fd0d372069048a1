// Shard-map construction and validation. See shard_map.h.
#include "common/job/shard_map.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"

namespace gradstream {

absl::StatusOr<ShardMap> SplitModel(absl::Span<const TensorSpec> tensors,
                                    absl::Span<const std::string> shards, uint32_t chunk_elems,
                                    const CodecPolicy& policy) {
  if (shards.empty()) return absl::InvalidArgumentError("SplitModel: no shards");
  if (tensors.empty()) return absl::InvalidArgumentError("SplitModel: no tensors");
  if (chunk_elems == 0 || chunk_elems > kMaxChunkElems) {
    return absl::InvalidArgumentError(absl::StrCat("SplitModel: chunk_elems ", chunk_elems,
                                                   " outside 1..", kMaxChunkElems));
  }
  ShardMap map;
  map.shards.assign(shards.begin(), shards.end());
  std::set<std::string_view> names;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& spec = tensors[t];
    if (spec.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("SplitModel: tensor ", t, " has no name"));
    }
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("SplitModel: duplicate tensor name '",
                                                     spec.name, "'"));
    }
    if (spec.num_elems <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("SplitModel: tensor '", spec.name,
                                                     "' is empty"));
    }
    const uint64_t elems = static_cast<uint64_t>(spec.num_elems);
    const std::string pull_codec = ResolvePullCodec(policy, elems);
    map.tensors.push_back(TensorInfo{spec.name, static_cast<uint32_t>(t), elems,
                                     ResolveCodec(policy, spec.name, elems), pull_codec});
    for (uint64_t off = 0; off < elems; off += chunk_elems) {
      ChunkInfo c;
      c.chunk_id = map.chunks.size();
      c.tensor = static_cast<uint32_t>(t);
      c.offset = off;
      c.num_elems = static_cast<uint32_t>(std::min<uint64_t>(chunk_elems, elems - off));
      c.pull_fp32 = pull_codec == "none";
      map.chunks.push_back(c);
    }
  }

  // LPT: biggest chunk first onto the least-loaded shard. A stable sort keeps
  // equal-sized chunks in id order, which spreads consecutive chunks of one
  // tensor over all shards (both shards work on every large tensor).
  std::vector<size_t> order(map.chunks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return map.chunks[a].num_elems > map.chunks[b].num_elems;
  });
  std::vector<uint64_t> load(shards.size(), 0);
  for (size_t i : order) {
    size_t best = std::min_element(load.begin(), load.end()) - load.begin();
    map.chunks[i].shard = static_cast<uint32_t>(best);
    load[best] += uint64_t{map.chunks[i].num_elems} * sizeof(float);
  }
  return map;
}

absl::Status ValidateShardMap(const ShardMap& map) {
  if (map.shards.empty()) return absl::InvalidArgumentError("shard map: no shards");
  if (map.tensors.empty()) return absl::InvalidArgumentError("shard map: no tensors");
  for (size_t t = 0; t < map.tensors.size(); ++t) {
    if (map.tensors[t].index != t) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: tensor at position ", t,
                                                     " has index ", map.tensors[t].index));
    }
    if (map.tensors[t].num_elems == 0) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: tensor '", map.tensors[t].name,
                                                     "' is empty"));
    }
  }
  // Next uncovered element of each tensor; chunks must tile tensors in order.
  std::vector<uint64_t> covered(map.tensors.size(), 0);
  for (size_t i = 0; i < map.chunks.size(); ++i) {
    const ChunkInfo& c = map.chunks[i];
    if (c.chunk_id != i) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard map: chunk at position ", i, " has id ", c.chunk_id));
    }
    if (c.tensor >= map.tensors.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard map: chunk ", i, " names tensor ", c.tensor));
    }
    if (c.shard >= map.shards.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard map: chunk ", i, " names shard ", c.shard));
    }
    if (c.num_elems == 0 || c.num_elems > kMaxChunkElems) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: chunk ", i, " has ",
                                                     c.num_elems, " elements (max ",
                                                     kMaxChunkElems, ")"));
    }
    if (c.offset != covered[c.tensor]) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: chunk ", i, " starts at ",
                                                     c.offset, " of tensor ", c.tensor,
                                                     ", expected ", covered[c.tensor]));
    }
    covered[c.tensor] += c.num_elems;
    if (covered[c.tensor] > map.tensors[c.tensor].num_elems) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard map: chunk ", i, " runs past the end of tensor ", c.tensor));
    }
  }
  for (size_t t = 0; t < map.tensors.size(); ++t) {
    if (covered[t] != map.tensors[t].num_elems) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: tensor '", map.tensors[t].name,
                                                     "' covered up to ", covered[t], " of ",
                                                     map.tensors[t].num_elems));
    }
  }
  return absl::OkStatus();
}

std::vector<uint64_t> ShardLoads(const ShardMap& map) {
  std::vector<uint64_t> load(map.shards.size(), 0);
  for (const ChunkInfo& c : map.chunks) {
    if (c.shard < load.size()) load[c.shard] += uint64_t{c.num_elems} * sizeof(float);
  }
  return load;
}

}  // namespace gradstream
