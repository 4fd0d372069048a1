// Plain structs the coordinator's core works with, field for field the
// messages of proto/coordinator.proto that make up its state and answers.
// Protos stop at the edge (server/coordinator/rpc/ converts); nothing
// outside it includes generated headers (scripts/check_layering.sh checks).
#ifndef GRADSTREAM_SERVER_COORDINATOR_TYPES_H_
#define GRADSTREAM_SERVER_COORDINATOR_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/job/precision.h"
#include "common/job/shard_map.h"
#include "common/job/table_rows.h"

namespace gradstream::coordinator {

// A job's lifecycle (v1::JobState, same numbers).
enum class JobState : int {
  kUnspecified = 0,
  kPending = 1,
  kRunning = 2,
  kCompleted = 3,  // every member finished its last step
  kFailed = 4,
  kCancelled = 5,
};

// True for the states a job never leaves (completed, failed, cancelled).
bool IsTerminal(JobState state);
// The state as coordinator.proto spells it ("PENDING", ...), for messages.
const char* JobStateName(JobState state);

// What a worker reports about itself (v1::WorkerState, same numbers).
enum class WorkerState : int {
  kUnspecified = 0,
  kIdle = 1,
  kTraining = 2,
  kLeft = 3,   // finished its last clock and sent Leave
  kDone = 4,   // reached the job's last step
  kError = 5,  // gave up on the job
};

enum class ConsistencyMode : int { kSync = 0, kBounded = 1, kAsync = 2 };

// One tensor a training script declared.
struct DeclaredTensor {
  std::string name;
  std::vector<int64_t> shape;  // empty = a scalar
  // A row-sparse table [rows, dim] on the shards, rows from N(0, init_std^2)
  // (docs/design/sparse-tables.md).
  bool table = false;
  float init_std = 0.0f;
};

// A normalized job spec (see [normalized spec] in common/job/job_spec.h):
// the fields the coordinator decides on, and the whole spec in its wire
// form, which the core hands on unread (to workers, shards, the state file
// and the views) and only the edge reads (see
// docs/design/coordinator-spec-at-the-edge.md).
struct JobSpec {
  std::string name;
  std::string model_type;      // "script": the tensors come from the script
  uint32_t model_tensors = 0;  // tensors the model declares (script jobs)
  uint32_t steps = 0;
  uint32_t batch_size = 0;
  ConsistencyMode consistency = ConsistencyMode::kSync;
  uint32_t staleness = 0;  // the bound of kBounded
  uint32_t workers = 0;
  uint32_t shards = 0;     // 0 = every healthy shard
  std::string entrypoint;  // "" = a built-in model
  uint32_t workers_min = 0;
  uint32_t min_workers_timeout_s = 0;
  std::string wire;  // the serialized v1::JobSpec
};

// A script job whose script has not declared its tensors yet.
inline bool AwaitsDeclaration(const JobSpec& spec) {
  return spec.model_type == "script" && spec.model_tensors == 0;
}

// A worker's report (v1::WorkerProgress): cumulative for its incarnation in
// its current job.
struct WorkerProgress {
  uint64_t clock = 0;
  float loss = 0;
  float accuracy = 0;
  uint64_t accuracy_clock = 0;
  float samples_per_sec = 0;
  uint64_t bytes_pushed = 0;
  uint64_t fp32_bytes_pushed = 0;
  double residual_norm = 0;
  uint64_t max_staleness = 0;
  std::string encode_path;
  float encode_share = 0;
  std::optional<LinkDecision> push_link;  // its pushes' newest link decision
  float wait_share = 0;
  uint64_t bytes_pulled = 0;
  uint64_t fp32_bytes_pulled = 0;
  uint64_t bytes_pulled_discarded = 0;
};

// A job's aggregated progress (v1::JobProgress); the optional fields are
// unset until measured (see [not measured] in proto/coordinator.proto).
struct JobProgress {
  uint64_t clock = 0;
  uint64_t max_clock = 0;
  std::optional<float> loss;
  float accuracy = 0;
  uint64_t accuracy_clock = 0;
  std::optional<float> samples_per_sec;
  std::optional<uint64_t> bytes_pushed;
  std::optional<uint64_t> fp32_bytes_pushed;
  std::optional<double> compression_ratio;
  uint64_t max_staleness = 0;
  double residual_norm = 0;
  std::optional<uint64_t> bytes_pulled;
  std::optional<uint64_t> fp32_bytes_pulled;
  uint64_t bytes_pulled_discarded = 0;
  double stalled_seconds = 0;
  uint64_t checkpoint_failures = 0;
  std::string checkpoint_error;
  uint64_t samples = 0;
  std::optional<double> eta_seconds;

  bool operator==(const JobProgress& o) const;
  bool operator!=(const JobProgress& o) const { return !(*this == o); }
};

// The job's progress when rank 0 evaluated the model at `clock`.
struct ProgressPoint {
  uint64_t clock = 0;
  float loss = 0;
  float accuracy = 0;
  float samples_per_sec = 0;
  uint64_t bytes_pushed = 0;
  uint64_t fp32_bytes_pushed = 0;
  int64_t unix_ms = 0;
};

// The workers whose pushes count from `effective_clock` on (see [membership
// epochs] in coordinator.h).
struct MembershipEpoch {
  uint64_t epoch = 0;
  uint64_t effective_clock = 0;
  std::vector<uint64_t> worker_ids;
  int64_t created_unix_ms = 0;
  std::string reason;
  std::vector<uint64_t> departed;  // gone for good with this epoch
};

struct JobMember {
  uint64_t worker_id = 0;
  uint64_t incarnation = 0;
  uint32_t rank = 0;
  uint64_t join_clock = 0;
  bool leaving = false;
  uint64_t leave_clock = 0;
  // Views only: what the member reported.
  uint64_t clock = 0;
  std::optional<float> loss;
  std::optional<float> samples_per_sec;
  std::string encode_path;
  float encode_share = 0;
  std::optional<LinkDecision> push_link;
  float wait_share = 0;
};

// A job (v1::JobStatus): its durable record, and in views its answer.
// One tensor's lossy paths (views only): over its chunks, the highest level,
// the largest errors, every flush and every decision (see
// common/job/precision.h).
struct TensorPrecision {
  std::string tensor;
  std::optional<PathPrecision> pull, push;  // unset: that path is not compressed
};

// One table of a job (views only): its partitions' stats summed.
struct TableProgress {
  std::string tensor;
  TableRowStats rows;
};

struct JobStatus {
  std::string job_id;
  JobSpec spec;
  JobState state = JobState::kUnspecified;
  std::string message;
  uint32_t desired_workers = 0;
  uint32_t active_workers = 0;  // views only
  JobProgress progress;
  std::vector<MembershipEpoch> epochs;
  ShardMap shard_map;  // no shards: not placed yet
  std::vector<JobMember> members;
  int64_t submitted_unix_ms = 0;
  int64_t started_unix_ms = 0;
  int64_t finished_unix_ms = 0;
  uint64_t committed_epoch = 0;
  uint32_t worker_errors = 0;
  std::vector<ProgressPoint> history;
  uint32_t min_workers = 0;
  int64_t below_min_since_unix_ms = 0;
  std::string size_reason;  // views only
  std::vector<TensorPrecision> precision;  // views only
  std::vector<TableProgress> tables;       // views only
  // Views only: each shard's newest pull link decision, by shard index.
  std::vector<std::pair<uint32_t, LinkDecision>> pull_links;
};

struct WorkerStatus {
  uint64_t worker_id = 0;
  uint64_t incarnation = 0;
  std::string name;
  bool healthy = false;
  int64_t last_heartbeat_unix_ms = 0;
  std::string job_id;
  uint32_t rank = 0;
  WorkerState state = WorkerState::kUnspecified;
  uint64_t clock = 0;
  bool has_gpu = false;
  bool stopping = false;  // said it is exiting (SIGTERM): never free for a job
};

struct ShardStatus {
  uint32_t shard_id = 0;
  std::string address;
  bool healthy = false;
  int64_t last_seen_unix_ms = 0;
  std::string message;  // last probe error
  uint32_t jobs = 0;    // views only
};

// The durable part of one job.
struct JobRecord {
  JobStatus status;     // spec, state, members, epochs, map, progress...
  JobProgress retired;  // counters of the workers that left it
  std::string token;    // [auth tokens]: members and shards only
};

// ---------------------------------------------------------------- calls

// A worker joining the pool (v1::RegisterWorkerRequest); worker_id 0 = new.
struct WorkerRegistration {
  std::string name;
  uint64_t worker_id = 0;
  uint64_t incarnation = 0;
  bool has_gpu = false;
};

// v1::RegisterWorkerResponse.
struct RegisteredWorker {
  uint64_t worker_id = 0;
  uint64_t incarnation = 0;
  uint32_t heartbeat_interval_ms = 0;
  uint32_t heartbeat_timeout_ms = 0;
};

// A worker's heartbeat (v1::HeartbeatRequest).
struct HeartbeatReport {
  uint64_t worker_id = 0;
  uint64_t incarnation = 0;
  std::string job_id;  // the job the progress belongs to; "" when idle
  WorkerState state = WorkerState::kUnspecified;
  WorkerProgress progress;
  std::string message;
  std::vector<DeclaredTensor> declared_tensors;  // script jobs, see [script jobs]
  bool stopping = false;  // the process is exiting: it takes no job from now on
};

// A worker's place in a job (v1::Assignment); no job_id = stay in the pool.
struct Assignment {
  std::string job_id;
  JobState job_state = JobState::kUnspecified;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint64_t epoch = 0;
  uint64_t join_clock = 0;
  bool leave = false;
  uint64_t leave_clock = 0;
  JobSpec spec;  // no wire: not told
  ShardMap shard_map;
  uint64_t epoch_clock = 0;
  std::string job_token;
};

// Shards and workers with their health (v1::ClusterStatus).
struct ClusterStatus {
  std::vector<ShardStatus> shards;
  std::vector<WorkerStatus> workers;
  uint32_t heartbeat_timeout_ms = 0;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_TYPES_H_
