// The coordinator's state in SQLite; see state_store.h.
#include "server/coordinator/rpc/state_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdint>
#include <fstream>
#include <string_view>
#include <vector>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/env/env.h"
#include "common/env/record.h"
#include "common/status.h"
#include "glog/logging.h"
#include "google/protobuf/arena.h"
#include "server/coordinator/rpc/coordinator_convert.h"

namespace gradstream::coordinator {

namespace v1 = gradstream::v1;

namespace {

// The single-record state file (see [state file migration]).
constexpr RecordFormat kLegacyFormat{"coordinator state", "GSCOORDS", 1};

enum Table : int { kMeta = 0, kShards, kWorkers, kJobs, kEpochs, kProgress, kTables };
enum MetaKey : int64_t { kNextJob = 1, kNextWorkerId = 2 };

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key INTEGER PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS shards(id INTEGER PRIMARY KEY, status BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS workers(id INTEGER PRIMARY KEY, status BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS jobs(id TEXT PRIMARY KEY, state INTEGER NOT NULL,
  finished_unix_ms INTEGER NOT NULL, status BLOB NOT NULL, retired BLOB NOT NULL,
  token TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS epochs(job_id TEXT NOT NULL, epoch INTEGER NOT NULL,
  data BLOB NOT NULL, PRIMARY KEY(job_id, epoch)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS progress(job_id TEXT PRIMARY KEY, history BLOB NOT NULL)
  WITHOUT ROWID;
)sql";

// Per table: the statements that read, upsert and delete its rows. Column
// order in `select` and `upsert`: the key (id and/or n), then the row's
// columns as Bind()/Read() lay them out.
struct TableSql {
  const char* select;
  const char* upsert;
  const char* remove;
};
constexpr TableSql kSql[kTables] = {
    {"SELECT key, value FROM meta", "INSERT OR REPLACE INTO meta VALUES(?1, ?2)",
     "DELETE FROM meta WHERE key = ?1"},
    {"SELECT id, status FROM shards", "INSERT OR REPLACE INTO shards VALUES(?1, ?2)",
     "DELETE FROM shards WHERE id = ?1"},
    {"SELECT id, status FROM workers", "INSERT OR REPLACE INTO workers VALUES(?1, ?2)",
     "DELETE FROM workers WHERE id = ?1"},
    {"SELECT id, state, finished_unix_ms, status, retired, token FROM jobs",
     "INSERT OR REPLACE INTO jobs VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
     "DELETE FROM jobs WHERE id = ?1"},
    {"SELECT job_id, epoch, data FROM epochs", "INSERT OR REPLACE INTO epochs VALUES(?1, ?2, ?3)",
     "DELETE FROM epochs WHERE job_id = ?1 AND epoch = ?2"},
    {"SELECT job_id, history FROM progress", "INSERT OR REPLACE INTO progress VALUES(?1, ?2)",
     "DELETE FROM progress WHERE job_id = ?1"},
};
bool KeyedById(int table) { return table >= kJobs; }
// Whether the table's key has an integer part (all but jobs and progress).
bool KeyedByN(int table) { return table != kJobs && table != kProgress; }

// The first bytes of the file at `path` ("" when it cannot be read).
std::string Head(const std::string& path) {
  std::string head(kRecordMagicSize, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  return in ? head : std::string();
}

// A prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  int prepare_rc() const { return rc_; }
  sqlite3_stmt* get() const { return stmt_; }

  void BindKey(int table, const StateStore::RowKey& key) {
    int i = 1;
    if (KeyedById(table)) BindText(i++, key.id);
    if (KeyedByN(table)) sqlite3_bind_int64(stmt_, i, key.n);
  }
  void BindText(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_STATIC);
  }
  void BindBlob(int i, const std::string& s) {
    sqlite3_bind_blob(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_STATIC);
  }
  std::string Column(int i) const {
    const void* p = sqlite3_column_blob(stmt_, i);
    return p == nullptr ? std::string()
                        : std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt_, i));
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

// The rows of `state`: see the table layout in state_store.h.
StateStore::Rows ToRows(const v1::CoordinatorState& state) {
  StateStore::Rows rows;
  rows[{kMeta, "", kNextJob}].a = static_cast<int64_t>(state.next_job());
  rows[{kMeta, "", kNextWorkerId}].a = static_cast<int64_t>(state.next_worker_id());
  for (const auto& s : state.shards()) {
    rows[{kShards, "", static_cast<int64_t>(s.shard_id())}].payload = s.SerializeAsString();
  }
  for (const auto& w : state.workers()) {
    rows[{kWorkers, "", static_cast<int64_t>(w.worker_id())}].payload = w.SerializeAsString();
  }
  v1::JobStatus bare;
  for (const auto& j : state.jobs()) {
    bare = j;
    bare.clear_epochs();
    bare.clear_history();
    StateStore::Row& row = rows[{kJobs, j.job_id(), 0}];
    row.payload = bare.SerializeAsString();
    row.a = j.state();
    row.b = j.finished_unix_ms();
    auto retired = state.retired().find(j.job_id());
    if (retired != state.retired().end()) row.extra = retired->second.SerializeAsString();
    auto token = state.job_tokens().find(j.job_id());
    if (token != state.job_tokens().end()) row.token = token->second;
    for (int e = 0; e < j.epochs_size(); ++e) {
      rows[{kEpochs, j.job_id(), e}].payload = j.epochs(e).SerializeAsString();
    }
    // NOTE: [history row] The whole history is one row (a JobStatus with
    // only `history`). See docs/design/coordinator-history-row.md.
    if (j.history_size() > 0) {
      v1::JobStatus history;
      *history.mutable_history() = j.history();
      rows[{kProgress, j.job_id(), 0}].payload = history.SerializeAsString();
    }
  }
  return rows;
}

}  // namespace

StateStore::StateStore(std::string path, StateStoreOptions options, int lock_fd, sqlite3* db)
    : path_(std::move(path)), options_(std::move(options)), lock_fd_(lock_fd), db_(db) {}

StateStore::~StateStore() {
  sqlite3_close_v2(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // drops the flock
}

absl::Status StateStore::Error(int rc, const std::string& what) const {
  const std::string message = absl::StrCat(path_, ": ", what, ": ", sqlite3_errstr(rc),
                                           db_ ? absl::StrCat(" (", sqlite3_errmsg(db_), ")") : "");
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(message);
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return absl::DataLossError(
          absl::StrCat(message, "; move the damaged file away to start empty"));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(absl::StrCat(message, "; a reader held the database"));
    default:
      return absl::InternalError(message);
  }
}

absl::Status StateStore::Exec(const char* sql) {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? absl::OkStatus() : Error(rc, sql);
}

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(std::string path,
                                                             StateStoreOptions options) {
  Env* env = Env::Default();
  const std::string migrated = path + ".migrated";
  // See [state db lock]; closed by the store, or here on an early return.
  const std::string lock_path = path + ".lock";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return absl::InternalError(absl::StrCat(lock_path, ": cannot open: ", std::strerror(errno)));
  }
  const absl::Time deadline = absl::Now() + options.lock_timeout;
  while (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || absl::Now() >= deadline) {
      const int error = errno;
      ::close(lock_fd);
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": locked by another process (another coordinator on this --state_file?) for ",
          absl::FormatDuration(options.lock_timeout), ": ", std::strerror(error)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::unique_ptr<StateStore> store;
  auto fail = [&](absl::Status s) {
    if (store == nullptr) ::close(lock_fd);
    return s;
  };
  // An old state file at `path` (see [state file migration]).
  if (Head(path) == kLegacyFormat.magic) {
    if (!Head(migrated).empty()) {
      return fail(absl::FailedPreconditionError(
          absl::StrCat(path, " is an old state file and ", migrated,
                       " exists too: move one of them away")));
    }
    if (absl::Status s = env->RenameFile(path, migrated); !s.ok()) return fail(s);
    LOG(INFO) << "coordinator: old state file renamed to " << migrated << " for migration";
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 nullptr);
  store.reset(new StateStore(path, std::move(options), lock_fd, db));
  if (rc != SQLITE_OK) return store->Error(rc, "cannot open");
  GS_RETURN_IF_ERROR(store->Init());
  if (store->written_.empty() && !Head(migrated).empty()) {
    GS_RETURN_IF_ERROR(store->Migrate(migrated));
  }
  return store;
}

absl::Status StateStore::Init() {
  sqlite3_busy_timeout(db_, static_cast<int>(absl::ToInt64Milliseconds(options_.lock_timeout)));
  sqlite3_extended_result_codes(db_, 1);
  // See [state db durability].
  GS_RETURN_IF_ERROR(Exec("PRAGMA journal_mode=WAL"));
  GS_RETURN_IF_ERROR(Exec("PRAGMA synchronous=FULL"));
  if (options_.max_page_count > 0) {
    GS_RETURN_IF_ERROR(
        Exec(absl::StrCat("PRAGMA max_page_count=", options_.max_page_count).c_str()));
  }
  GS_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  if (absl::Status s = Exec(kSchema); !s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  GS_RETURN_IF_ERROR(Exec("COMMIT"));
  for (int table = 0; table < kTables; ++table) {
    Statement select(db_, kSql[table].select);
    if (select.prepare_rc() != SQLITE_OK) return Error(select.prepare_rc(), kSql[table].select);
    int rc;
    while ((rc = sqlite3_step(select.get())) == SQLITE_ROW) {
      RowKey key{table, "", 0};
      int c = 0;
      if (KeyedById(table)) key.id = select.Column(c++);
      if (KeyedByN(table)) key.n = sqlite3_column_int64(select.get(), c++);
      Row& row = written_[key];
      if (table == kMeta) {
        row.a = sqlite3_column_int64(select.get(), c);
      } else if (table == kJobs) {
        row.a = sqlite3_column_int64(select.get(), c++);
        row.b = sqlite3_column_int64(select.get(), c++);
        row.payload = select.Column(c++);
        row.extra = select.Column(c++);
        row.token = select.Column(c);
      } else {
        row.payload = select.Column(c);
      }
    }
    if (rc != SQLITE_DONE) return Error(rc, kSql[table].select);
  }
  return absl::OkStatus();
}

absl::Status StateStore::Migrate(const std::string& from) {
  absl::StatusOr<std::string> data = Env::Default()->ReadFile(from);
  if (!data.ok()) return data.status();
  absl::StatusOr<std::string_view> body = DecodeRecord(kLegacyFormat, from, *data);
  if (!body.ok()) return body.status();
  v1::CoordinatorState state;
  if (!state.ParseFromArray(body->data(), static_cast<int>(body->size()))) {
    return absl::DataLossError(absl::StrCat(from, ": unparsable state"));
  }
  GS_RETURN_IF_ERROR(Save(state));
  LOG(INFO) << "coordinator: imported " << state.jobs_size() << " jobs and "
            << state.workers_size() << " workers from " << from << " into " << path_;
  return absl::OkStatus();
}

absl::StatusOr<v1::CoordinatorState> StateStore::Load() {
  v1::CoordinatorState state;
  GS_RETURN_IF_ERROR(LoadInto(&state));
  return state;
}

absl::Status StateStore::LoadInto(v1::CoordinatorState* out) {
  if (written_.empty()) return absl::NotFoundError(absl::StrCat("no state in ", path_));
  v1::CoordinatorState& state = *out;
  for (const auto& [key, row] : written_) {
    bool ok = true;
    switch (key.table) {
      case kMeta:
        if (key.n == kNextJob) state.set_next_job(static_cast<uint64_t>(row.a));
        if (key.n == kNextWorkerId) state.set_next_worker_id(static_cast<uint64_t>(row.a));
        break;
      case kShards:
        ok = state.add_shards()->ParseFromString(row.payload);
        break;
      case kWorkers:
        ok = state.add_workers()->ParseFromString(row.payload);
        break;
      case kJobs: {
        v1::JobStatus* job = state.add_jobs();
        ok = job->ParseFromString(row.payload) && job->job_id() == key.id &&
             (*state.mutable_retired())[key.id].ParseFromString(row.extra);
        if (!row.token.empty()) (*state.mutable_job_tokens())[key.id] = row.token;
        break;
      }
      default:  // epochs, then progress points, of jobs in id order
        break;
    }
    if (!ok) {
      return absl::DataLossError(absl::StrCat(path_, ": unparsable row ", key.id, "/", key.n,
                                              " of table ", key.table));
    }
  }
  // Epochs and history rows follow all jobs in key order; index the jobs.
  std::map<std::string, v1::JobStatus*> by_id;
  for (auto& j : *state.mutable_jobs()) by_id[j.job_id()] = &j;
  for (auto it = written_.lower_bound({kEpochs, "", INT64_MIN}); it != written_.end(); ++it) {
    const auto& [key, row] = *it;
    auto j = by_id.find(key.id);
    const bool ok = j != by_id.end() &&
                    (key.table == kEpochs ? j->second->add_epochs()->ParseFromString(row.payload)
                                          : j->second->MergeFromString(row.payload));
    if (!ok) {
      return absl::DataLossError(absl::StrCat(path_, ": unparsable or orphan row ", key.id, "/",
                                              key.n, " of table ", key.table));
    }
  }
  return absl::OkStatus();
}

absl::Status StateStore::Save(const v1::CoordinatorState& state,
                              const std::vector<std::string>& removed) {
  std::vector<std::pair<RowKey, RowKey>> scope = {
      {{kMeta, "", INT64_MIN}, {kWorkers, "", INT64_MAX}}};
  auto job_scope = [&](const std::string& id) {
    for (int t : {kJobs, kEpochs, kProgress}) {
      scope.push_back({{t, id, INT64_MIN}, {t, id, INT64_MAX}});
    }
  };
  for (const auto& j : state.jobs()) job_scope(j.job_id());
  for (const std::string& id : removed) job_scope(id);
  return WriteRows(ToRows(state), scope);
}

absl::Status StateStore::WriteRows(Rows rows,
                                   const std::vector<std::pair<RowKey, RowKey>>& scope) {
  // The difference, as (key, row or nullptr for a delete).
  std::vector<std::pair<const RowKey*, const Row*>> changes;
  for (const auto& [lo, hi] : scope) {
    auto old_it = written_.lower_bound(lo);
    const auto old_end = written_.upper_bound(hi);
    for (auto it = rows.lower_bound(lo); it != rows.end() && !(hi < it->first); ++it) {
      const auto& [key, row] = *it;
      for (; old_it != old_end && old_it->first < key; ++old_it) {
        changes.emplace_back(&old_it->first, nullptr);
      }
      const bool here = old_it != old_end && !(key < old_it->first);
      if (!here || !(old_it->second == row)) changes.emplace_back(&key, &row);
      if (here) ++old_it;
    }
    for (; old_it != old_end; ++old_it) changes.emplace_back(&old_it->first, nullptr);
  }
  if (changes.empty()) return absl::OkStatus();

  GS_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status s = [&]() -> absl::Status {
    for (const auto& [key, row] : changes) {
      const int t = key->table;
      Statement stmt(db_, row == nullptr ? kSql[t].remove : kSql[t].upsert);
      if (stmt.prepare_rc() != SQLITE_OK) return Error(stmt.prepare_rc(), "prepare");
      stmt.BindKey(t, *key);
      if (row != nullptr) {
        const int next = t == kEpochs ? 3 : 2;
        if (t == kMeta) {
          sqlite3_bind_int64(stmt.get(), next, row->a);
        } else if (t == kJobs) {
          sqlite3_bind_int64(stmt.get(), 2, row->a);
          sqlite3_bind_int64(stmt.get(), 3, row->b);
          stmt.BindBlob(4, row->payload);
          stmt.BindBlob(5, row->extra);
          stmt.BindText(6, row->token);
        } else {
          stmt.BindBlob(next, row->payload);
        }
      }
      if (const int rc = sqlite3_step(stmt.get()); rc != SQLITE_DONE) return Error(rc, "write");
    }
    if (options_.before_commit) GS_RETURN_IF_ERROR(options_.before_commit());
    return Exec("COMMIT");
  }();
  if (!s.ok()) {
    if (sqlite3_get_autocommit(db_) == 0) (void)Exec("ROLLBACK");
    return s;
  }
  rows_written_ += changes.size();
  for (const auto& [lo, hi] : scope) {
    written_.erase(written_.lower_bound(lo), written_.upper_bound(hi));
  }
  written_.merge(rows);
  return absl::OkStatus();
}

namespace {

class SqliteStorage final : public StateStorage {
 public:
  explicit SqliteStorage(std::unique_ptr<StateStore> store) : store_(std::move(store)) {}

  absl::StatusOr<DurableState> Load() override {
    // On an arena: the messages are dropped at once after the conversion,
    // not freed one by one (10,000 jobs' worth at a restart).
    google::protobuf::Arena arena;
    auto* state = google::protobuf::Arena::CreateMessage<v1::CoordinatorState>(&arena);
    GS_RETURN_IF_ERROR(store_->LoadInto(state));
    return DurableStateFromProto(*state);
  }

  absl::Status Save(const DurableState& state, const std::vector<std::string>& removed) override {
    return store_->Save(DurableStateToProto(state), removed);
  }

  const std::string& path() const override { return store_->path(); }

 private:
  const std::unique_ptr<StateStore> store_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StateStorage>> OpenStateStorage(std::string path,
                                                               StateStoreOptions options) {
  absl::StatusOr<std::unique_ptr<StateStore>> store =
      StateStore::Open(std::move(path), std::move(options));
  if (!store.ok()) return store.status();
  return std::make_unique<SqliteStorage>(*std::move(store));
}

}  // namespace gradstream::coordinator
