// Shard map <-> job.proto. See shard_map_proto.h.
#include "common/job/shard_map_proto.h"

#include <algorithm>

#include "common/job/job_spec.h"
#include "common/status.h"

namespace gradstream {

absl::StatusOr<ShardMap> ShardMapFromProto(const v1::ShardMap& proto) {
  ShardMap map;
  map.shards.assign(proto.shards().begin(), proto.shards().end());
  for (const v1::TensorInfo& t : proto.tensors()) {
    map.tensors.push_back(TensorInfo{t.name(), t.index(), t.num_elems(), t.codec(),
                                     t.pull_codec().empty() ? "none" : t.pull_codec(),
                                     t.table_rows(), t.table_dim()});
  }
  for (const v1::ChunkInfo& c : proto.chunks()) {
    ChunkInfo& info = map.chunks.emplace_back(
        ChunkInfo{c.chunk_id(), c.tensor(), c.offset(), c.num_elems(), c.shard(), c.pull_fp32()});
    if (c.has_rows()) {
      const v1::TablePartition& r = c.rows();
      info.table = TablePart{r.table_rows(), r.dim(), r.partition(), r.partitions(), r.init_std()};
    }
  }
  GS_RETURN_IF_ERROR(ValidateShardMap(map));
  return map;
}

v1::ShardMap ShardMapToProto(const ShardMap& map) {
  v1::ShardMap proto;
  for (const std::string& s : map.shards) proto.add_shards(s);
  for (const TensorInfo& t : map.tensors) {
    v1::TensorInfo* p = proto.add_tensors();
    p->set_name(t.name);
    p->set_index(t.index);
    p->set_num_elems(t.num_elems);
    p->set_codec(t.codec);
    p->set_pull_codec(t.pull_codec);
    p->set_table_rows(t.table_rows);
    p->set_table_dim(t.table_dim);
  }
  for (const ChunkInfo& c : map.chunks) *proto.add_chunks() = ChunkInfoToProto(c);
  return proto;
}

v1::ChunkInfo ChunkInfoToProto(const ChunkInfo& c) {
  v1::ChunkInfo p;
  p.set_chunk_id(c.chunk_id);
  p.set_tensor(c.tensor);
  p.set_offset(c.offset);
  p.set_num_elems(c.num_elems);
  p.set_shard(c.shard);
  p.set_pull_fp32(c.pull_fp32);
  if (c.table.has_value()) {
    v1::TablePartition* r = p.mutable_rows();
    r->set_table_rows(c.table->table_rows);
    r->set_dim(c.table->dim);
    r->set_partition(c.table->partition);
    r->set_partitions(c.table->partitions);
    r->set_init_std(c.table->init_std);
  }
  return p;
}

namespace {

// NOTE: [fair chunks] No dense chunk holds more than a shard's share of the
// model's dense elements (rounded up to whole 512-element codec blocks, and
// never under 4096 elements, whose bytes no link notices): largest-first
// placement can then spread a model whose bytes sit in one tensor (a
// click-through model's MLP beside its table, a char-LSTM's recurrent
// weight) evenly, and every shard's link carries its share of each step.
// See docs/design/fair-chunks.md.
uint32_t FairChunkElems(const std::vector<TensorSpec>& specs, size_t shards,
                        uint32_t chunk_elems) {
  constexpr uint64_t kBlock = 512, kMinFair = 4096;
  uint64_t dense = 0;
  for (const TensorSpec& t : specs) dense += t.table ? 0 : static_cast<uint64_t>(t.num_elems);
  if (shards <= 1 || dense == 0) return chunk_elems;
  const uint64_t share = (dense + shards - 1) / shards;
  const uint64_t fair = std::max(kMinFair, (share + kBlock - 1) / kBlock * kBlock);
  return static_cast<uint32_t>(std::min<uint64_t>(chunk_elems, fair));
}

}  // namespace

absl::StatusOr<ShardMap> BuildShardMap(const v1::JobSpec& spec,
                                       const std::vector<std::string>& shards) {
  absl::StatusOr<std::vector<TensorSpec>> tensors = JobTensors(spec);
  if (!tensors.ok()) return tensors.status();
  const std::vector<TensorSpec>& specs = *tensors;
  const uint32_t chunk_elems = FairChunkElems(specs, shards.size(), spec.chunk_elems());

  // A shard without chunks would refuse the job ("job has no chunks"): use
  // at most as many shards as there are chunks. Largest-first placement then
  // gives every shard at least one.
  uint64_t chunks = 0;
  for (const TensorSpec& t : specs) {
    chunks += t.table ? shards.size()  // a partition on every shard
                      : (static_cast<uint64_t>(t.num_elems) + chunk_elems - 1) / chunk_elems;
  }
  std::vector<std::string> used = shards;
  if (chunks > 0 && used.size() > chunks) used.resize(chunks);
  return SplitModel(specs, used, chunk_elems, CodecPolicyFromProto(spec.codec()));
}

}  // namespace gradstream
