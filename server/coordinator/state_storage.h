// Where the coordinator's durable state lives: the job table, the worker
// pool and the shard table. The job log writes through this interface; the
// SQLite database at the edge implements it (rpc/state_store.h).
#ifndef GRADSTREAM_SERVER_COORDINATOR_STATE_STORAGE_H_
#define GRADSTREAM_SERVER_COORDINATOR_STATE_STORAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/coordinator/types.h"

namespace gradstream::coordinator {

// What a write carries: the whole worker pool and shard table, and the jobs
// the write changes (the others stay as they are).
struct DurableState {
  uint64_t next_job = 0;
  uint64_t next_worker_id = 0;
  std::vector<ShardStatus> shards;
  std::vector<WorkerStatus> workers;
  std::vector<JobRecord> jobs;
};

// Implementations need not be thread-safe; the coordinator serializes calls.
class StateStorage {
 public:
  virtual ~StateStorage() = default;

  // Everything saved, jobs in id order. NotFound when nothing was saved yet
  // (first start); DataLoss naming the file for a damaged store.
  virtual absl::StatusOr<DurableState> Load() = 0;

  // In one transaction: the next ids, shards and workers become `state`'s,
  // each job in `state` becomes its record there, the jobs in `removed` are
  // deleted, other jobs are left as they are. On failure nothing changed:
  // ResourceExhausted for a full disk, Internal for other I/O errors.
  [[nodiscard]] virtual absl::Status Save(const DurableState& state,
                                          const std::vector<std::string>& removed) = 0;

  // Where the state is, for logs.
  virtual const std::string& path() const = 0;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_STATE_STORAGE_H_
