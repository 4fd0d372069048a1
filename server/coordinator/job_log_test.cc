// The job log: a change is on disk before it is in memory, and a failed
// write changes nothing.
#include "server/coordinator/job_log.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>

#include "gtest/gtest.h"

namespace gradstream::coordinator {
namespace {

namespace v1 = gradstream::v1;

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

class JobLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/job_log_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    StateStoreOptions options;
    options.before_commit = [this] {
      return broken_ ? absl::InternalError("the disk is gone") : absl::OkStatus();
    };
    absl::StatusOr<std::unique_ptr<StateStore>> store =
        StateStore::Open(dir_ + "/state", options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    log_ = std::make_unique<JobLog>(
        store_.get(), [](v1::CoordinatorState& s) { s.set_next_worker_id(42); }, &metrics_);
  }
  void TearDown() override {
    log_.reset();
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm", ".lock"}) {
      std::remove((dir_ + "/state" + suffix).c_str());
    }
    ::rmdir(dir_.c_str());
  }
  // Makes every later write fail (its transaction rolls back).
  void BreakDisk() { broken_ = true; }
  v1::CoordinatorState OnDisk() {
    absl::StatusOr<v1::CoordinatorState> s = store_->Load();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::CoordinatorState();
  }
  static JobRecord Pending(uint32_t workers) {
    JobRecord r;
    r.status.set_state(v1::PENDING);
    r.status.set_desired_workers(workers);
    r.token = "secret";
    return r;
  }

  std::string dir_;
  bool broken_ = false;
  metrics::Registry registry_;
  CoordinatorMetrics metrics_{&registry_};
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<JobLog> log_;
};

TEST_F(JobLogTest, CreateWritesTheJobAndTheRestBeforeItExists) {
  absl::StatusOr<std::string> id = log_->Create(Pending(2));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "job-000001");
  ASSERT_NE(log_->Find(*id), nullptr);
  EXPECT_EQ(log_->Find(*id)->status.job_id(), *id);
  const v1::CoordinatorState disk = OnDisk();
  ASSERT_EQ(disk.jobs_size(), 1);
  EXPECT_EQ(disk.jobs(0).job_id(), *id);
  EXPECT_EQ(disk.next_job(), 2u);
  EXPECT_EQ(disk.next_worker_id(), 42u);  // from WriteRest
  EXPECT_EQ(disk.job_tokens().at(*id), "secret");
}

TEST_F(JobLogTest, UpdateIsDurableBeforeItIsVisible) {
  const std::string id = *log_->Create(Pending(2));
  ASSERT_TRUE(log_->Update(id, [](JobRecord& j) {
                    j.status.add_members()->set_worker_id(5);
                    j.status.add_members()->set_worker_id(6);
                    AppendEpoch(j, 0, "start", kNow);
                  }).ok());
  EXPECT_EQ(log_->Find(id)->status.epochs_size(), 1);
  EXPECT_EQ(OnDisk().jobs(0).epochs_size(), 1);
  EXPECT_EQ(registry_.GetCounter("gs_coordinator_membership_changes_total", "")->value(), 1);

  BreakDisk();
  absl::Status s = log_->Update(id, [](JobRecord& j) { AppendEpoch(j, 10, "more", kNow); });
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(log_->Find(id)->status.epochs_size(), 1);  // unchanged
  EXPECT_FALSE(log_->Create(Pending(1)).ok());
  EXPECT_EQ(log_->records().size(), 1u);
  EXPECT_EQ(log_->next_job(), 2u);  // the id is not used up
  EXPECT_EQ(log_->Update("job-999999", [](JobRecord&) {}).code(), absl::StatusCode::kNotFound);
}

TEST_F(JobLogTest, AmendIsVisibleAtOnceAndWrittenWithTheNextWrite) {
  const std::string id = *log_->Create(Pending(2));
  const std::string other = *log_->Create(Pending(1));
  ASSERT_TRUE(log_->Amend(id, [](JobRecord& j) { j.status.set_message("amended"); }).ok());
  EXPECT_EQ(log_->Find(id)->status.message(), "amended");
  EXPECT_EQ(OnDisk().jobs(0).message(), "");  // not written by itself
  ASSERT_TRUE(log_->Update(other, [](JobRecord& j) { j.status.set_desired_workers(3); }).ok());
  EXPECT_EQ(OnDisk().jobs(0).message(), "amended");  // carried by the next write
  EXPECT_EQ(log_->Amend("job-999999", [](JobRecord&) {}).code(), absl::StatusCode::kNotFound);
}

TEST_F(JobLogTest, AppendEpochNeverGoesBackAndRanksTheActiveMembers) {
  JobRecord j;
  j.status.add_members()->set_worker_id(1);
  v1::JobMember* leaving = j.status.add_members();
  leaving->set_worker_id(2);
  leaving->set_leaving(true);
  j.status.add_members()->set_worker_id(3);
  AppendEpoch(j, 20, "a", kNow);
  AppendEpoch(j, 15, "b", kNow);
  ASSERT_EQ(j.status.epochs_size(), 2);
  EXPECT_EQ(j.status.epochs(1).epoch(), 2u);
  EXPECT_EQ(j.status.epochs(1).effective_clock(), 20u);
  EXPECT_EQ(j.status.epochs(1).worker_ids_size(), 2);
  EXPECT_EQ(j.status.members(2).rank(), 1u);
  EXPECT_EQ(j.status.epochs(0).created_unix_ms(), absl::ToUnixMillis(kNow));
}

TEST_F(JobLogTest, CheckpointRefreshesProgressOnlyWhenWritten) {
  const std::string id = *log_->Create(Pending(1));
  auto progress = [](const JobRecord&) {
    v1::JobProgress p;
    p.set_clock(9);
    return p;
  };
  ASSERT_TRUE(log_->Checkpoint(progress).ok());
  EXPECT_EQ(log_->Find(id)->status.progress().clock(), 9u);
  EXPECT_EQ(OnDisk().jobs(0).progress().clock(), 9u);
  BreakDisk();
  EXPECT_FALSE(log_->Checkpoint([](const JobRecord&) { return v1::JobProgress(); }).ok());
  EXPECT_EQ(log_->Find(id)->status.progress().clock(), 9u);
}

TEST_F(JobLogTest, RestoreReadsWhatWasWritten) {
  const std::string id = *log_->Create(Pending(3));
  JobLog again(store_.get(), [](v1::CoordinatorState&) {}, &metrics_);
  v1::CoordinatorState disk = OnDisk();
  again.Restore(disk);
  ASSERT_NE(again.Find(id), nullptr);
  EXPECT_EQ(again.Find(id)->status.desired_workers(), 3u);
  EXPECT_EQ(again.Find(id)->token, "secret");
  EXPECT_EQ(again.next_job(), 2u);
}

TEST_F(JobLogTest, RemoveIsDurableBeforeTheRecordGoes) {
  const std::string a = *log_->Create(Pending(1));
  const std::string b = *log_->Create(Pending(1));
  ASSERT_TRUE(log_->Update(a, [](JobRecord& j) { AppendEpoch(j, 0, "start", kNow); }).ok());
  BreakDisk();
  EXPECT_FALSE(log_->Remove({a}).ok());
  EXPECT_NE(log_->Find(a), nullptr);  // nothing changed
  EXPECT_EQ(OnDisk().jobs_size(), 2);
  broken_ = false;
  ASSERT_TRUE(log_->Remove({a, "job-999999"}).ok());  // an unknown id is skipped
  EXPECT_EQ(log_->Find(a), nullptr);
  ASSERT_NE(log_->Find(b), nullptr);
  const v1::CoordinatorState disk = OnDisk();
  ASSERT_EQ(disk.jobs_size(), 1);
  EXPECT_EQ(disk.jobs(0).job_id(), b);
  EXPECT_EQ(disk.job_tokens().count(a), 0u);
  EXPECT_EQ(log_->next_job(), 3u);  // ids are not reused
}

TEST(JobLogInMemory, EveryWriteSucceeds) {
  metrics::Registry registry;
  CoordinatorMetrics metrics(&registry);
  JobLog log(nullptr, [](v1::CoordinatorState&) { FAIL() << "nothing to write"; }, &metrics);
  const std::string id = *log.Create(JobRecord());
  EXPECT_TRUE(log.Update(id, [](JobRecord& j) { j.status.set_message("m"); }).ok());
  EXPECT_EQ(log.Find(id)->status.message(), "m");
}

}  // namespace
}  // namespace gradstream::coordinator
