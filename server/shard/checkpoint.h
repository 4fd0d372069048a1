// Checkpoint file format of one job on one shard, written and read in pieces
// (see [streamed table checkpoint] in job.cc).
//
// A durable record (common/env/record.h: magic "GSSHCKPT", version 1,
// length, CRC32C) whose payload, the body, is little-endian: job id, shard
// index, consistency mode, optimizer type, progress clock, membership epochs,
// worker clocks, worker incarnations, then per chunk: id, num_elems, version,
// initialized, params, optimizer step + slots, per-worker applied clocks;
// then, only for jobs with a pull codec, the tag "PUBL" and per chunk its
// published copy: id, version, values (see [pull codec]; a body without the
// section, as every file written before it, loads with none); then, only
// for jobs with row-sparse tables, the tag "ROWS" and per table partition:
// id, row ids, row values, state slots (docs/design/sparse-tables.md).
// Open sync rounds are not saved: their pushes
// were not applied, so after a restore the workers push them again (the
// applied-clock sets make re-pushes of applied clocks duplicates). Files in
// the older frame of the same body still load; see [legacy checkpoint frame].
#ifndef GRADSTREAM_SERVER_SHARD_CHECKPOINT_H_
#define GRADSTREAM_SERVER_SHARD_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env/env.h"
#include "common/optim/optimizer.h"
#include "server/shard/chunk_state.h"
#include "server/shard/row_array.h"
#include "server/shard/types.h"

namespace gradstream::shard {

// A table partition's rows as WriteCheckpoint reads them, in blocks: an open
// [row snapshot] (row_store.h) of a live store, locked per block by the
// implementation (job.cc).
class RowBlocks {
 public:
  virtual ~RowBlocks() = default;
  virtual uint64_t rows() = 0;
  virtual uint32_t dim() = 0;
  virtual int num_slots() = 0;
  // An error fails the checkpoint.
  virtual absl::Status Ids(uint64_t begin, uint64_t end, uint64_t* out) = 0;
  // `array` -1: values; k: state slot k.
  virtual absl::Status Floats(int array, uint64_t begin, uint64_t end, float* out) = 0;
};

struct ChunkSnapshot {
  uint64_t chunk_id = 0;
  uint32_t num_elems = 0;
  uint64_t version = 0;
  bool initialized = false;
  std::vector<float> params;
  OptimizerState opt;
  std::vector<std::pair<uint64_t, AppliedClocks>> applied;
  // A table partition's rows, in the ROWS section: written from `rows` when
  // set, else from the vectors, which ReadCheckpoint fills.
  bool table = false;
  RowBlocks* rows = nullptr;
  std::vector<uint64_t> row_ids;
  RowArray row_values;
  std::vector<RowArray> row_slots;
};

struct JobSnapshot {
  std::string job_id;
  uint32_t shard_index = 0;
  ConsistencyMode mode = ConsistencyMode::kSync;
  OptimizerType optimizer = OptimizerType::kSgd;
  uint64_t clock = 0;  // sync: min chunk version; otherwise min member clock
  std::vector<MembershipEpoch> epochs;
  std::vector<std::pair<uint64_t, uint64_t>> worker_clocks;
  std::vector<std::pair<uint64_t, uint64_t>> incarnations;
  std::vector<ChunkSnapshot> chunks;
  std::vector<PublishedCopy> published;  // pull codec: chunks already published
};

// Streams the framed checkpoint into `file` (an Env::WriteFileAtomically
// producer) in pieces of about 1 MiB, a table's rows a block at a time: it
// takes no memory in proportion to the job. Returns the bytes written.
[[nodiscard]] absl::StatusOr<uint64_t> WriteCheckpoint(const JobSnapshot& snapshot,
                                                       WritableFile* file);

// Reads one from `file` in pieces: the snapshot's memory plus a piece. The
// file's read error, or DataLoss (naming what is wrong) for a bad magic or
// version, a length or checksum mismatch, or a body that does not parse.
[[nodiscard]] absl::StatusOr<JobSnapshot> ReadCheckpoint(SequentialFile* file,
                                                         std::string_view name);

// The same in memory (tests, the fuzzer).
std::string EncodeCheckpoint(const JobSnapshot& snapshot);
[[nodiscard]] absl::StatusOr<JobSnapshot> DecodeCheckpoint(std::string_view data);

// <dir>/<job id with unsafe characters replaced>.shard<index>.ckpt
std::string CheckpointPath(const std::string& dir, const std::string& job_id, uint32_t shard_index);

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_CHECKPOINT_H_
