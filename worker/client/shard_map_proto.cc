// Shard map <-> job.proto. See shard_map_proto.h.
#include "worker/client/shard_map_proto.h"

#include "common/status.h"

namespace gradstream::client {

absl::StatusOr<ShardMap> ShardMapFromProto(const v1::ShardMap& proto) {
  ShardMap map;
  map.shards.assign(proto.shards().begin(), proto.shards().end());
  for (const v1::TensorInfo& t : proto.tensors()) {
    map.tensors.push_back(TensorInfo{t.name(), t.index(), t.num_elems(), t.codec()});
  }
  for (const v1::ChunkInfo& c : proto.chunks()) {
    map.chunks.push_back(ChunkInfo{c.chunk_id(), c.tensor(), c.offset(), c.num_elems(), c.shard()});
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
  }
  for (const ChunkInfo& c : map.chunks) {
    v1::ChunkInfo* p = proto.add_chunks();
    p->set_chunk_id(c.chunk_id);
    p->set_tensor(c.tensor);
    p->set_offset(c.offset);
    p->set_num_elems(c.num_elems);
    p->set_shard(c.shard);
  }
  return proto;
}

CodecPolicy CodecPolicyFromProto(const v1::CodecPolicy& proto) {
  CodecPolicy policy;
  if (!proto.default_codec().empty()) policy.default_codec = proto.default_codec();
  policy.overrides.insert(proto.overrides().begin(), proto.overrides().end());
  policy.min_compress_elems = proto.min_compress_elems();
  if (proto.twobit_threshold() != 0.0f) policy.twobit_threshold = proto.twobit_threshold();
  if (proto.ternary_clip() != 0.0f) policy.ternary_clip = proto.ternary_clip();
  policy.error_feedback = !proto.disable_error_feedback();
  return policy;
}

}  // namespace gradstream::client
