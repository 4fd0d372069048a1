// The state database: round trips, row-sized writes, migration of the old
// state file, and bad input (garbage, damaged pages, a second process, a
// full disk, a failed commit).
#include "server/coordinator/rpc/state_store.h"

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/env/env.h"
#include "common/env/record.h"
#include "common/env/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace gradstream::coordinator {
namespace {

namespace v1 = gradstream::v1;

// `jobs` jobs, each with two epochs, a history point, counters and a
// token, plus a shard and a worker.
v1::CoordinatorState State(int jobs, uint64_t next_worker = 2) {
  v1::CoordinatorState state;
  state.set_next_job(jobs + 1);
  state.set_next_worker_id(next_worker);
  state.add_shards()->set_shard_id(1);
  state.add_workers()->set_worker_id(1);
  for (int i = 1; i <= jobs; ++i) {
    v1::JobStatus* job = state.add_jobs();
    job->set_job_id(absl::StrFormat("job-%06d", i));
    job->set_state(v1::COMPLETED);
    job->set_finished_unix_ms(1000 * i);
    job->mutable_spec()->set_name(absl::StrCat("job number ", i));
    for (int e = 1; e <= 2; ++e) {
      v1::MembershipEpoch* epoch = job->add_epochs();
      epoch->set_epoch(e);
      epoch->add_worker_ids(1);
    }
    job->add_history()->set_clock(i);
    (*state.mutable_retired())[job->job_id()].set_samples(i);
    (*state.mutable_job_tokens())[job->job_id()] = absl::StrCat("token", i);
  }
  return state;
}

std::string Text(const v1::CoordinatorState& state) { return state.DebugString(); }

// Rows of `table` in the database at `path` (closed by the store).
int64_t CountRows(const std::string& path, const std::string& table) {
  sqlite3* db = nullptr;
  int64_t n = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    const std::string sql = "SELECT COUNT(*) FROM " + table;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      n = sqlite3_column_int64(stmt, 0);
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return n;
}

class StateStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<StateStore> MustOpen(StateStoreOptions options = {}) {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path_, options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
  std::string ReadRaw(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void WriteRaw(const std::string& path, const std::string& data) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << data;
  }
  // A state file as the code before the database wrote it: one record.
  void WriteOldStateFile(const std::string& path, const v1::CoordinatorState& state) {
    constexpr RecordFormat kOld{"coordinator state", "GSCOORDS", 1};
    ASSERT_TRUE(
        Env::Default()->WriteFileAtomically(path, EncodeRecord(kOld, state.SerializeAsString()))
            .ok());
  }

  testing::TempDir dir_;
  const std::string path_ = dir_.path() + "/coordinator.db";
};

TEST_F(StateStoreTest, AFreshDatabaseHoldsNoState) {
  auto store = MustOpen();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Load().status().code(), absl::StatusCode::kNotFound);
}

TEST_F(StateStoreTest, SaveThenLoadRoundTripsAcrossAReopen) {
  const v1::CoordinatorState state = State(3);
  {
    auto store = MustOpen();
    ASSERT_TRUE(store->Save(state).ok());
    absl::StatusOr<v1::CoordinatorState> loaded = store->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(Text(*loaded), Text(state));
  }
  auto store = MustOpen();
  absl::StatusOr<v1::CoordinatorState> loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(Text(*loaded), Text(state));
}

// A change writes its rows, not the world; a deleted job takes its epochs
// and history with it.
TEST_F(StateStoreTest, AWriteIsAsSmallAsTheChange) {
  auto store = MustOpen();
  v1::CoordinatorState state = State(100);
  ASSERT_TRUE(store->Save(state).ok());
  uint64_t before = store->rows_written();
  EXPECT_GE(before, 100u * 4);  // job, 2 epochs, history point each
  ASSERT_TRUE(store->Save(state).ok());
  EXPECT_EQ(store->rows_written(), before);  // nothing changed, nothing written

  v1::MembershipEpoch* epoch = state.mutable_jobs(41)->add_epochs();
  epoch->set_epoch(3);
  state.mutable_jobs(41)->set_committed_epoch(3);
  ASSERT_TRUE(store->Save(state).ok());
  EXPECT_EQ(store->rows_written(), before + 2);  // the job row and its new epoch
  before = store->rows_written();

  // Jobs left out of a write are left as they are.
  v1::CoordinatorState one = state;
  one.clear_jobs();
  *one.add_jobs() = state.jobs(7);
  one.mutable_jobs(0)->set_message("changed");
  ASSERT_TRUE(store->Save(one).ok());
  EXPECT_EQ(store->rows_written(), before + 1);
  *state.mutable_jobs(7) = one.jobs(0);
  EXPECT_EQ(Text(*store->Load()), Text(state));
  before = store->rows_written();

  state.mutable_jobs()->DeleteSubrange(0, 1);
  state.mutable_retired()->erase("job-000001");
  state.mutable_job_tokens()->erase("job-000001");
  one.clear_jobs();
  ASSERT_TRUE(store->Save(one, {"job-000001"}).ok());
  EXPECT_EQ(store->rows_written(), before + 4);
  store.reset();
  EXPECT_EQ(CountRows(path_, "jobs"), 99);
  EXPECT_EQ(CountRows(path_, "epochs"), 99 * 2 + 1);
  EXPECT_EQ(CountRows(path_, "progress"), 99);
  EXPECT_EQ(Text(*MustOpen()->Load()), Text(state));
}

// See [state file migration].
TEST_F(StateStoreTest, AnOldStateFileIsImportedOnceAndKept) {
  const v1::CoordinatorState old = State(5);
  WriteOldStateFile(path_, old);
  {
    auto store = MustOpen();
    ASSERT_NE(store, nullptr);
    absl::StatusOr<v1::CoordinatorState> loaded = store->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(Text(*loaded), Text(old));
    ASSERT_TRUE(store->Save(State(6)).ok());  // the coordinator goes on
  }
  EXPECT_TRUE(absl::StartsWith(ReadRaw(path_), "SQLite format 3"));
  EXPECT_TRUE(absl::StartsWith(ReadRaw(path_ + ".migrated"), "GSCOORDS"));
  // A second start does not import it again.
  auto store = MustOpen();
  absl::StatusOr<v1::CoordinatorState> loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(Text(*loaded), Text(State(6)));
}

// A crash after the rename, before the import committed: the next start
// imports the renamed file.
TEST_F(StateStoreTest, AnInterruptedMigrationIsRedone) {
  WriteOldStateFile(path_ + ".migrated", State(2));
  auto store = MustOpen();
  absl::StatusOr<v1::CoordinatorState> loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(Text(*loaded), Text(State(2)));
}

TEST_F(StateStoreTest, ADamagedOldStateFileIsDataLossAndIsKept) {
  WriteOldStateFile(path_, State(2));
  std::string data = ReadRaw(path_);
  data[data.size() - 3] ^= 0x10;
  WriteRaw(path_, data);
  const absl::Status s = StateStore::Open(path_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path_ + ".migrated")) << s;
  EXPECT_EQ(ReadRaw(path_ + ".migrated"), data);
}

TEST_F(StateStoreTest, GarbageIsDataLossNamingTheFile) {
  WriteRaw(path_, std::string(10000, '\x5a'));
  const absl::Status s = StateStore::Open(path_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path_)) << s;
  EXPECT_EQ(ReadRaw(path_), std::string(10000, '\x5a'));  // left as it was
}

TEST_F(StateStoreTest, ADamagedPageIsDataLoss) {
  ASSERT_TRUE(MustOpen()->Save(State(300)).ok());
  std::string data = ReadRaw(path_);
  ASSERT_GT(data.size(), 8u * 4096);
  for (size_t i = 2 * 4096; i < data.size() - 4096; ++i) data[i] = '\xff';
  WriteRaw(path_, data);
  const absl::Status s = StateStore::Open(path_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path_)) << s;
}

// See [state db lock]: another process refuses within its timeout.
TEST_F(StateStoreTest, ASecondProcessOnTheSameFileIsRefused) {
  auto store = MustOpen();
  ASSERT_TRUE(store->Save(State(1)).ok());
  const absl::Time start = absl::Now();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    StateStoreOptions options;
    options.lock_timeout = absl::Milliseconds(300);
    const absl::Status s = StateStore::Open(path_, options).status();
    const bool clear = s.code() == absl::StatusCode::kFailedPrecondition &&
                       absl::StrContains(s.message(), path_) &&
                       absl::StrContains(s.message(), "another coordinator");
    ::_exit(clear ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the second process was not refused clearly";
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  // The first one keeps writing.
  EXPECT_TRUE(store->Save(State(2)).ok());
  // In the same process too.
  StateStoreOptions options;
  options.lock_timeout = absl::Milliseconds(100);
  EXPECT_EQ(StateStore::Open(path_, options).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(StateStoreTest, AFullDiskFailsTheWriteAndKeepsThePreviousState) {
  StateStoreOptions capped;
  capped.max_page_count = 16;
  auto store = MustOpen(capped);
  absl::Status s;
  int saved = 0;
  for (int jobs = 10; jobs < 5000 && s.ok(); jobs += 10) {
    s = store->Save(State(jobs));
    if (s.ok()) saved = jobs;
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path_)) << s;
  ASSERT_GT(saved, 0);
  EXPECT_EQ(Text(*store->Load()), Text(State(saved)));
  store.reset();
  EXPECT_EQ(Text(*MustOpen()->Load()), Text(State(saved)));
}

TEST_F(StateStoreTest, AFailedCommitRollsBackAndTheNextWriteCarriesTheChange) {
  bool fail = false;
  StateStoreOptions options;
  options.before_commit = [&fail] {
    return fail ? absl::InternalError("fsync failed") : absl::OkStatus();
  };
  auto store = MustOpen(options);
  ASSERT_TRUE(store->Save(State(2)).ok());
  fail = true;
  EXPECT_EQ(store->Save(State(3)).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(Text(*store->Load()), Text(State(2)));
  fail = false;
  ASSERT_TRUE(store->Save(State(3)).ok());
  store.reset();
  EXPECT_EQ(Text(*MustOpen()->Load()), Text(State(3)));
}

}  // namespace
}  // namespace gradstream::coordinator
