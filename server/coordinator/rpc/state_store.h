// Durable storage of the coordinator's state in an SQLite database (WAL).
//
// One table per kind of row: `meta` (next job id, next worker id), `jobs`
// (one row per job: its JobStatus without epochs and history, with state
// and finished time as columns, the retired counters and the token),
// `epochs` (one row per membership epoch), `progress` (a job's progress
// history, see [history row]), `workers` and `shards` (one row each).
//
// Save() takes a CoordinatorState with the whole worker pool and shard
// table but only the jobs that may have changed (as the job log builds it),
// and the ids of jobs to delete, and writes only the rows that differ from
// what the database holds (the store keeps what it last wrote): upserts of
// the changed rows and deletes of the rows gone, in one transaction. So a
// scale-up writes one job row and one epoch row, not the world, and a job
// deleted by --keep_finished takes its epochs and progress rows with it.
//
// NOTE: [state db durability] WAL with synchronous=FULL: a commit returns
// only once it is on disk, which [write durably, then apply] needs. See
// docs/design/coordinator-state-db-durability.md.
//
// NOTE: [state db lock] Open() holds an exclusive flock() on `<path>.lock`
// until the store is destroyed: a second coordinator on the same file
// refuses to start (FailedPrecondition), while readers can still query the
// database. See docs/design/coordinator-state-db-lock.md.
//
// NOTE: [state file migration] A state file of the single-record format at
// `path` is renamed to `<path>.migrated` and imported once, while the
// database holds no state. See docs/design/coordinator-state-file-migration.md.
#ifndef GRADSTREAM_SERVER_COORDINATOR_RPC_STATE_STORE_H_
#define GRADSTREAM_SERVER_COORDINATOR_RPC_STATE_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator.pb.h"
#include "server/coordinator/state_storage.h"

struct sqlite3;

namespace gradstream::coordinator {

struct StateStoreOptions {
  // How long Open() waits for another process's lock (see [state db lock]),
  // and a write for a reader's (SQLite's busy_timeout).
  absl::Duration lock_timeout = absl::Seconds(2);
  // The database's size cap in pages (PRAGMA max_page_count); 0 = none. A
  // write past it fails as a full disk does (ResourceExhausted).
  int64_t max_page_count = 0;
  // Tests only: runs inside every write's transaction before its COMMIT;
  // a non-OK status rolls the transaction back and Save() returns it, as a
  // failed write. It may block, as a slow fsync does.
  std::function<absl::Status()> before_commit;
};

// Not thread-safe; the coordinator serializes calls.
class StateStore {
 public:
  // Opens (creating) the database at `path`, migrating a single-record
  // state file found there (see [state file migration]). FailedPrecondition
  // when another process holds the database ([state db lock]); DataLoss
  // naming the file when it is not a database or is damaged, or when the
  // file to migrate is; Internal / ResourceExhausted for other I/O errors.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(std::string path,
                                                         StateStoreOptions options = {});
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // The saved state, jobs in id order; NotFound when the database holds no
  // state yet (first start); DataLoss naming the file when a row is damaged.
  absl::StatusOr<gradstream::v1::CoordinatorState> Load();
  // Load() into `state` (empty; it may live on an arena).
  [[nodiscard]] absl::Status LoadInto(gradstream::v1::CoordinatorState* state);

  // In one transaction (none when nothing differs): the meta values, shards
  // and workers become `state`'s; each job in `state` becomes its record
  // there (with its epochs and history); the jobs in `removed` are deleted
  // with theirs; other jobs are left as they are. On failure the
  // transaction is rolled back and the database holds the previous state:
  // ResourceExhausted for a full disk (or max_page_count), Internal for
  // other I/O errors.
  [[nodiscard]] absl::Status Save(const gradstream::v1::CoordinatorState& state,
                                  const std::vector<std::string>& removed = {});

  const std::string& path() const { return path_; }
  // Rows upserted or deleted by the committed writes so far.
  uint64_t rows_written() const { return rows_written_; }

  // One row of a table: its key, and its columns (what Save compares).
  struct RowKey {
    int table = 0;
    std::string id;  // job id, or "" for integer-keyed tables
    int64_t n = 0;   // epoch index, worker / shard id, meta key
    bool operator<(const RowKey& o) const {
      return std::tie(table, id, n) < std::tie(o.table, o.id, o.n);
    }
  };
  struct Row {
    std::string payload;  // a serialized proto, or "" (meta)
    int64_t a = 0;        // jobs: state; meta: the value
    int64_t b = 0;        // jobs: finished_unix_ms
    std::string extra;    // jobs: serialized retired JobProgress
    std::string token;    // jobs: the job's token
    bool operator==(const Row& o) const {
      return std::tie(payload, a, b, extra, token) ==
             std::tie(o.payload, o.a, o.b, o.extra, o.token);
    }
  };
  using Rows = std::map<RowKey, Row>;

 private:
  StateStore(std::string path, StateStoreOptions options, int lock_fd, sqlite3* db);

  [[nodiscard]] absl::Status Init();
  [[nodiscard]] absl::Status Migrate(const std::string& from);
  // Within the key ranges `scope` (inclusive bounds), makes the database's
  // rows `rows` in one transaction, writing only the difference.
  [[nodiscard]] absl::Status WriteRows(Rows rows,
                                       const std::vector<std::pair<RowKey, RowKey>>& scope);
  [[nodiscard]] absl::Status Exec(const char* sql);
  absl::Status Error(int rc, const std::string& what) const;

  const std::string path_;
  const StateStoreOptions options_;
  const int lock_fd_;  // holds the flock of [state db lock]
  sqlite3* const db_;
  Rows written_;  // what the database holds: read at Open(), then each commit
  uint64_t rows_written_ = 0;
};

// The coordinator's StateStorage over the StateStore at `path` (converted
// with rpc/coordinator_convert.h); Open()'s errors, and Load()'s, with
// DataLoss for a shard map that does not validate.
absl::StatusOr<std::unique_ptr<StateStorage>> OpenStateStorage(std::string path,
                                                               StateStoreOptions options = {});

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_RPC_STATE_STORE_H_
