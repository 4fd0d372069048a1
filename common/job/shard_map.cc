// Shard-map construction and validation. See shard_map.h.
#include "common/job/shard_map.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/codec/codec.h"
#include "common/status.h"

namespace gradstream {

namespace {

// Payload bytes of `n` elements under the codec named `name` (fp32's for a
// name this build does not know: the map validates names elsewhere).
uint64_t WireBytes(absl::string_view name, uint32_t n) {
  absl::StatusOr<CodecType> type = CodecTypeFromName(name);
  return PayloadBytes(type.ok() ? *type : CodecType::kNone, n);
}

}  // namespace

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
    if (spec.table) {
      if (spec.shape.size() != 2 || spec.shape[0] <= 0 || spec.shape[1] <= 0 ||
          spec.shape[1] > kMaxTableDim) {
        return absl::InvalidArgumentError(absl::StrCat(
            "SplitModel: table '", spec.name, "' wants a shape [rows, dim] with dim 1..",
            kMaxTableDim));
      }
      // NOTE: [fp16 rows] A table's rows travel fp16 (common/codec/half_rows.h)
      // each way whose codec is lossy, fp32 where it is "none": fp16 is the
      // precision controller's first level, whose error (2^-12 of each value,
      // not carried over) is far under any bound, so it needs no guard
      // (docs/design/sparse-tables.md, "Rows at the fp16 level"). A table
      // whose own codec is "none" (an override by name) is fp32 both ways.
      const bool push16 = ResolveCodec(policy, spec.name, elems) != "none";
      const bool pull16 = push16 && ResolvePullCodec(policy, elems) != "none";
      TensorInfo info{spec.name, static_cast<uint32_t>(t), elems, push16 ? "fp16" : "none",
                      pull16 ? "fp16" : "none"};
      info.table_rows = static_cast<uint64_t>(spec.shape[0]);
      info.table_dim = static_cast<uint32_t>(spec.shape[1]);
      map.tensors.push_back(info);
      const uint32_t parts = static_cast<uint32_t>(shards.size());
      for (uint32_t p = 0; p < parts; ++p) {
        ChunkInfo c;
        c.chunk_id = map.chunks.size();
        c.tensor = static_cast<uint32_t>(t);
        c.shard = p;
        c.pull_fp32 = true;
        c.table = TablePart{info.table_rows, info.table_dim, p, parts, spec.init_std};
        map.chunks.push_back(c);
      }
      continue;
    }
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

  // NOTE: [wire placement] A dense chunk has two sizes: the bytes it puts on
  // its shard's link per step (push plus pull payload under its codecs) and
  // its elements (the shard's decode, optimizer and publish work). An fp32
  // element costs about 16 ternary512 elements on the wire, so balancing
  // elements alone put a model's few fp32 tensors on one shard, whose link
  // carried the step on a slow link; balancing bytes alone gave a shard up
  // to 1.19x its share of the elements, the step's critical path on a fast
  // one. Both are balanced: largest first (by the larger of its two shares
  // of the model), each chunk onto the shard where the larger of its two
  // shares ends smallest, ties to the lower index. A stable sort keeps equal
  // chunks in id order, spreading one tensor's chunks over all shards.
  // Table partitions are placed already, one per shard; their rows' bytes
  // depend on the batch and are alike on every shard, so they count nothing.
  // See docs/design/wire-placement.md.
  struct Size {
    uint64_t wire = 0, elems = 0;
  };
  std::vector<Size> size(map.chunks.size());
  Size total;
  std::vector<size_t> order;
  for (size_t i = 0; i < map.chunks.size(); ++i) {
    const ChunkInfo& c = map.chunks[i];
    if (c.table.has_value()) continue;
    const TensorInfo& t = map.tensors[c.tensor];
    size[i].wire = WireBytes(t.codec, c.num_elems) +
                   WireBytes(c.pull_fp32 ? "none" : t.pull_codec, c.num_elems);
    size[i].elems = c.num_elems;
    total.wire += size[i].wire;
    total.elems += size[i].elems;
    order.push_back(i);
  }
  auto share = [&](uint64_t wire, uint64_t elems) {  // totals > 0 once a chunk exists
    return std::max(static_cast<double>(wire) / static_cast<double>(total.wire),
                    static_cast<double>(elems) / static_cast<double>(total.elems));
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return share(size[a].wire, size[a].elems) > share(size[b].wire, size[b].elems);
  });
  std::vector<Size> load(shards.size());
  for (size_t i : order) {
    size_t best = 0;
    double best_share = std::numeric_limits<double>::infinity();
    for (size_t s = 0; s < load.size(); ++s) {
      const double after = share(load[s].wire + size[i].wire, load[s].elems + size[i].elems);
      if (after < best_share) {
        best = s;
        best_share = after;
      }
    }
    map.chunks[i].shard = static_cast<uint32_t>(best);
    load[best].wire += size[i].wire;
    load[best].elems += size[i].elems;
  }
  return map;
}

namespace {

// What CheckTablePart leaves in its count once a table's last partition passed.
constexpr uint64_t kTableComplete = uint64_t{1} << 62;

// A table's chunks are its partitions 0..P-1 in order, of the tensor's
// shape, on distinct shards; `next` counts the ones seen.
absl::Status CheckTablePart(const ShardMap& map, const ChunkInfo& c, size_t i, uint64_t* next) {
  const TensorInfo& t = map.tensors[c.tensor];
  if ((t.codec != "none" && t.codec != "fp16") ||
      (t.pull_codec != "none" && t.pull_codec != "fp16")) {
    return absl::InvalidArgumentError(absl::StrCat("shard map: table '", t.name, "' travels as ",
                                                   t.codec, " / ", t.pull_codec,
                                                   ": rows travel none or fp16 ([fp16 rows])"));
  }
  const bool fits = t.is_table() && c.table.has_value() && c.num_elems == 0 && c.offset == 0 &&
                    t.table_dim > 0 && t.table_dim <= kMaxTableDim &&
                    t.num_elems == t.table_rows * t.table_dim &&
                    c.table->table_rows == t.table_rows && c.table->dim == t.table_dim &&
                    c.table->partition == *next && c.table->partitions >= 1 &&
                    c.table->partition < c.table->partitions &&
                    c.table->partitions <= map.shards.size() &&
                    std::isfinite(c.table->init_std) && c.table->init_std >= 0;
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard map: chunk ", i, " of tensor '", t.name, "' is not partition ", *next,
        " of a table of ", t.table_rows, " rows x ", t.table_dim, " floats"));
  }
  for (const ChunkInfo& o : map.chunks) {
    if (o.chunk_id < c.chunk_id && o.tensor == c.tensor && o.shard == c.shard) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard map: table '", t.name, "' has two partitions on shard ", c.shard));
    }
  }
  ++*next;
  if (*next == c.table->partitions) *next = kTableComplete;  // no more partitions
  return absl::OkStatus();
}

}  // namespace

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
    const TensorInfo& tensor = map.tensors[c.tensor];
    if (tensor.is_table() || c.table.has_value()) {
      GS_RETURN_IF_ERROR(CheckTablePart(map, c, i, &covered[c.tensor]));
      continue;
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
    if (map.tensors[t].is_table()) {
      if (covered[t] != kTableComplete) {
        return absl::InvalidArgumentError(absl::StrCat(
            "shard map: table '", map.tensors[t].name, "' has ", covered[t],
            " partitions, not all its partition count"));
      }
      continue;
    }
    if (covered[t] != map.tensors[t].num_elems) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: tensor '", map.tensors[t].name,
                                                     "' covered up to ", covered[t], " of ",
                                                     map.tensors[t].num_elems));
    }
  }
  return absl::OkStatus();
}

}  // namespace gradstream
