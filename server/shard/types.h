// Plain structs the shard core works with. Protos stop at the RPC edge
// (server/shard/rpc/ converts); nothing below it includes generated headers
// (scripts/check_layering.sh checks it).
#ifndef GRADSTREAM_SERVER_SHARD_TYPES_H_
#define GRADSTREAM_SERVER_SHARD_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/job/precision.h"
#include "common/job/row_partition.h"
#include "common/job/table_rows.h"
#include "common/optim/optimizer.h"

namespace gradstream::shard {

enum class ConsistencyMode : uint8_t { kSync = 0, kBounded = 1, kAsync = 2 };

struct ConsistencyOptions {
  ConsistencyMode mode = ConsistencyMode::kSync;
  uint32_t staleness = 0;           // the bound s (kBounded)
  bool scale_stale_pushes = false;  // scale a push by 1/(1+staleness) (kBounded, kAsync)
};

// One partition of a row-sparse table (docs/design/sparse-tables.md).
struct TableSpec {
  uint32_t table = 0;       // the table's tensor index (salts RowPartition)
  uint64_t table_rows = 0;  // ids are 0..table_rows-1
  uint32_t dim = 0;         // floats per row
  uint32_t partition = 0;
  uint32_t partitions = 1;
  float init_std = 1.0f;  // a row starts as N(0, init_std^2) draws
  uint64_t seed = 0;
};

struct ChunkSpec {
  uint64_t chunk_id = 0;
  uint32_t num_elems = 0;  // 0 for a table partition
  // Served fp32 under a job pull codec (see [layer-wise pull] in
  // common/job/codec_defaults.h).
  bool pull_fp32 = false;
  std::optional<TableSpec> table;  // set: the chunk is a table partition
};

// The workers whose pushes count from `effective_clock` on.
struct MembershipEpoch {
  uint64_t epoch = 0;
  uint64_t effective_clock = 0;
  std::vector<uint64_t> workers;
  // Gone for good: see [departed] in membership.h. Not in checkpoints (the
  // coordinator sends every epoch again with CreateJob).
  std::vector<uint64_t> departed;
};

// Everything a job needs, filled once at CreateJob.
struct JobOptions {
  std::string job_id;
  uint32_t shard_index = 0;
  OptimizerOptions optimizer;
  ConsistencyOptions consistency;
  std::vector<ChunkSpec> chunks;
  MembershipEpoch membership;
  // Every epoch of the job, oldest first, when the coordinator sent them
  // (empty: only `membership` is known). They replace a restored
  // checkpoint's (see [re-initialization] in job.h).
  std::vector<MembershipEpoch> epochs;
  // The job already ran before this shard got it (the shard restarted or
  // lost it): see [re-initialization] in job.h.
  bool resume = false;
  uint64_t resume_clock = 0;
  uint32_t checkpoint_every = 0;  // clocks; 0 = only on request
  std::string checkpoint_dir;     // "" = checkpoints disabled
  // Sync rounds a chunk may hold open at once (pushes for clocks >= version +
  // this get RESOURCE_EXHAUSTED), which bounds pending-round memory to
  // max_pending_rounds * chunk bytes per chunk.
  uint32_t max_pending_rounds = 4;
  // The most bytes the rows of the job's tables may take on this shard
  // (values and optimizer state; 0 = no limit): a push or pull that would
  // create rows past it is refused (RESOURCE_EXHAUSTED), not an OOM kill.
  uint64_t max_row_bytes = 0;
  // The most bytes of rows the streams of one worker may hold as pieces
  // before their last ([row pieces] in server/shard/rpc/session_handler.cc):
  // a partition's clock of rows, twice (an old stream may not have ended
  // when the replay starts on the next).
  uint64_t max_held_piece_bytes = 2 * kMaxPushedRowsBytes;
  absl::Duration default_pull_timeout = absl::Seconds(60);
  // Bearer token a Session must present to join this job; "" = none beyond
  // the shard's cluster token (common/rpc/rpc.h [auth tokens]).
  std::string token;
  // Codec of the parameter deltas pulls carry (see [pull codec] in
  // common/codec/published.h); kNone = pulls carry the fp32 parameters.
  CodecType pull_codec = CodecType::kNone;
  // Error control of the compressed pulls (the ladder is filled from
  // pull_codec), and the link choice between them and exact pulls.
  PrecisionPolicy pull_precision;
  LinkChoicePolicy pull_link;
};

// Gradients of some rows of a table partition: ids.size() x dim
// little-endian fp32 in `values`, each id once. Views the message (or its
// fp32 decoding, `fp16`: the wire carried half as many bytes).
struct RowGrads {
  absl::Span<const uint64_t> ids;
  absl::string_view values;
  bool fp16 = false;
};

struct PushArgs {
  uint64_t worker = 0;
  uint64_t chunk_id = 0;
  uint64_t clock = 0;
  ChunkHeader header;
  absl::string_view payload;
  const RowGrads* rows = nullptr;  // set instead of header/payload for a table partition
};

// One Push message: a bucket of one worker's chunk gradients at one clock
// (see docs/design/fused-messages.md). Views the message.
struct PushBucket {
  struct Chunk {
    uint64_t chunk_id = 0;
    ChunkHeader header;
    absl::string_view payload;
    float error_clocks = 0;  // the worker's report (PushedChunk)
    bool raised = false;
    CodecType level = CodecType::kNone;  // when raised
    float owed_raise = 0;  // PushedChunk.owed_raise, >= 0 and finite
  };
  struct Rows {
    uint64_t chunk_id = 0;
    RowGrads grads;
  };
  uint64_t worker = 0;
  uint64_t clock = 0;
  std::vector<Chunk> chunks;
  std::vector<Rows> rows;  // table partitions' rows
};

// A worker's published copy of one chunk (see [pull codec]).
struct HeldCopy {
  uint64_t chunk_id = 0;
  uint64_t version = 0;
  uint32_t checksum = 0;
};

struct PullArgs {
  uint64_t worker = 0;
  uint64_t stream = 0;  // the Session stream that asked (0 = none); see Job::CancelStreamPulls
  uint64_t request_id = 0;
  std::vector<uint64_t> chunk_ids;  // empty = all
  uint64_t clock = 0;
  absl::Time deadline = absl::InfiniteFuture();
  std::vector<HeldCopy> held;  // pull codec: the copies the worker holds
  struct Rows {
    uint64_t chunk_id = 0;  // a table partition
    std::vector<uint64_t> ids;
    bool fp16 = false;  // answer in fp16 (PulledRows)
  };
  std::vector<Rows> rows;  // with chunk_ids empty: only these
};

// One encoded change of a published copy.
struct EncodedDelta {
  ChunkHeader header;
  std::string payload;
};

// A chunk's published copy as a checkpoint keeps it (see [pull codec]).
struct PublishedCopy {
  uint64_t chunk_id = 0;
  uint64_t version = 0;
  std::vector<float> copy;
};

struct PulledChunk {
  uint64_t chunk_id = 0;
  uint64_t version = 0;
  std::string values;  // little-endian fp32
  // Pull codec (see [pull codec]): `values` or `deltas` are the published
  // copy at `version`, whose CRC32C is `checksum`.
  bool published = false;
  std::vector<EncodedDelta> deltas;
  uint32_t checksum = 0;
};

struct PulledRows {
  uint64_t chunk_id = 0;
  uint64_t version = 0;
  // The requested rows in order: little-endian fp32, or with `fp16` half
  // of x / scale (common/codec/half_rows.h).
  std::string values;
  bool fp16 = false;
  float scale = 0;
};

// The answer to one pull: either status != OK, or every requested chunk.
struct PullResult {
  uint64_t request_id = 0;
  absl::Status status;
  std::vector<PulledChunk> chunks;
  std::vector<PulledRows> rows;
  uint64_t min_clock = 0;
};

// Who contributed to one applied sync update.
struct RoundInfo {
  uint64_t chunk_id = 0;
  uint64_t clock = 0;
  uint64_t epoch = 0;
  std::vector<uint64_t> contributors;
};

inline constexpr int kStalenessBuckets = 17;  // 0..15, then overflow

struct JobStats {
  uint64_t pushes_applied = 0;
  uint64_t pushes_duplicate = 0;
  uint64_t pushes_rejected = 0;
  uint64_t bytes_in = 0;
  uint64_t fp32_bytes_in = 0;
  uint64_t pulls_served = 0;
  uint64_t min_version = 0;
  uint64_t max_version = 0;
  uint64_t max_staleness = 0;
  std::vector<uint64_t> staleness_histogram;  // kStalenessBuckets
  uint64_t staleness_sum = 0;                 // over every served pull
  std::vector<RoundInfo> rounds;
  // Clocks of the newest epoch's members: the slowest and the fastest.
  uint64_t min_clock = 0;
  uint64_t max_clock = 0;
  uint64_t epoch = 0;
  uint32_t members = 0;  // workers in the newest epoch
  uint64_t bytes_out = 0;       // parameter bytes pulls carried (values + deltas)
  uint64_t fp32_bytes_out = 0;  // what the same pulls would be as fp32
  // Periodic checkpoints that could not be written, and the newest one's
  // error ("" once a later one was written): see [checkpoint failures].
  uint64_t checkpoint_failures = 0;
  std::string checkpoint_error;
  uint64_t push_messages = 0;   // buckets that reached the job (Job::Push)
  uint64_t clock_messages = 0;  // ClockAdvance messages (CountClockMessage)
  // Per table partition.
  struct TableStats {
    uint64_t chunk_id = 0;
    TableRowStats rows;
  };
  std::vector<TableStats> tables;
  // Compressed chunks' error and decisions, by chunk id.
  struct ChunkPrecision {
    uint64_t chunk_id = 0;
    std::optional<PathPrecision> pull, push;
  };
  std::vector<ChunkPrecision> precision;
  std::optional<LinkDecision> pull_link;  // the pulls' newest link decision
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_TYPES_H_
