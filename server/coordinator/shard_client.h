// How the coordinator reaches the shards' control RPCs (CreateJob,
// UpdateMembership, DropJob, GetStats), in plain structs. An interface so
// that tests can record the calls and inject failures; the real one speaks
// gRPC (rpc/shard_client.h).
#ifndef GRADSTREAM_SERVER_COORDINATOR_SHARD_CLIENT_H_
#define GRADSTREAM_SERVER_COORDINATOR_SHARD_CLIENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job/precision.h"
#include "common/job/shard_map.h"
#include "server/coordinator/types.h"

namespace gradstream::coordinator {

// A job installed on one shard of its map (CreateJob).
struct ShardJob {
  std::string job_id;
  uint32_t shard_index = 0;       // within the job's map
  JobSpec spec;                   // optimizer, consistency, pull codec, checkpoint interval
  std::vector<ChunkInfo> chunks;  // the chunks of this shard
  MembershipEpoch membership;     // the newest epoch (0: no workers yet)
  // Every epoch, oldest first: they replace a restored checkpoint's (see
  // [re-initialization] in server/shard/job.h).
  std::vector<MembershipEpoch> epochs;
  std::string job_token;
  bool resume = false;  // the job ran before: the shard lost it
  uint64_t resume_clock = 0;
};

// A shard's answer to CreateJob.
struct ShardJobCreated {
  bool restored = false;  // from its checkpoint
  uint64_t restored_clock = 0;
};

// A shard's GetStats of one job.
struct ShardJobStats {
  uint64_t min_clock = 0;    // slowest member's clock
  uint64_t max_version = 0;  // newest chunk version
  uint64_t max_clock = 0;    // fastest member's clock
  uint64_t min_version = 0;  // oldest chunk version: sync rounds applied everywhere
  uint64_t checkpoint_failures = 0;
  std::string checkpoint_error;
  uint64_t max_staleness = 0;
  // Per compressed chunk: its pull and push error and precision decisions.
  std::vector<std::pair<uint64_t, PathPrecision>> pull_precision;
  std::vector<std::pair<uint64_t, PathPrecision>> push_precision;
  // Per table partition, by chunk id (docs/design/sparse-tables.md).
  std::vector<std::pair<uint64_t, TableRowStats>> tables;
  std::optional<LinkDecision> pull_link;  // its pulls' newest link decision
};

// Implementations are thread-safe. Every call has a deadline; a shard that
// does not answer in time is DeadlineExceeded / Unavailable. Otherwise the
// shard's own status comes back (NotFound for a job it does not have,
// AlreadyExists for one it has).
class ShardClient {
 public:
  virtual ~ShardClient() = default;
  virtual absl::StatusOr<ShardJobCreated> CreateJob(const std::string& address,
                                                    const ShardJob& job) = 0;
  virtual absl::Status UpdateMembership(const std::string& address, const std::string& job_id,
                                        const MembershipEpoch& epoch) = 0;
  virtual absl::Status DropJob(const std::string& address, const std::string& job_id) = 0;
  // `job_id` "" asks for no job: a health probe.
  virtual absl::StatusOr<ShardJobStats> GetStats(const std::string& address,
                                                 const std::string& job_id) = 0;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_SHARD_CLIENT_H_
