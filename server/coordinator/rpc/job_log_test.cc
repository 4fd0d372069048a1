// The job log over the real state database: a change is on disk before it
// is in memory, and a failed write changes nothing.
#include "server/coordinator/job_log.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>

#include "gtest/gtest.h"
#include "server/coordinator/rpc/state_store.h"

namespace gradstream::coordinator {
namespace {

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
    absl::StatusOr<std::unique_ptr<StateStorage>> store =
        OpenStateStorage(dir_ + "/state", options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    log_ = std::make_unique<JobLog>(
        store_.get(), [](DurableState& s) { s.next_worker_id = 42; }, &metrics_);
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
  DurableState OnDisk() {
    absl::StatusOr<DurableState> s = store_->Load();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : DurableState();
  }
  static JobRecord Pending(uint32_t workers) {
    JobRecord r;
    r.status.state = JobState::kPending;
    r.status.desired_workers = workers;
    r.token = "secret";
    return r;
  }

  std::string dir_;
  bool broken_ = false;
  metrics::Registry registry_;
  CoordinatorMetrics metrics_{&registry_};
  std::unique_ptr<StateStorage> store_;
  std::unique_ptr<JobLog> log_;
};

TEST_F(JobLogTest, CreateWritesTheJobAndTheRestBeforeItExists) {
  absl::StatusOr<std::string> id = log_->Create(Pending(2));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "job-000001");
  ASSERT_NE(log_->Find(*id), nullptr);
  EXPECT_EQ(log_->Find(*id)->status.job_id, *id);
  const DurableState disk = OnDisk();
  ASSERT_EQ(disk.jobs.size(), 1u);
  EXPECT_EQ(disk.jobs[0].status.job_id, *id);
  EXPECT_EQ(disk.next_job, 2u);
  EXPECT_EQ(disk.next_worker_id, 42u);  // from WriteRest
  EXPECT_EQ(disk.jobs[0].token, "secret");
}

TEST_F(JobLogTest, UpdateIsDurableBeforeItIsVisible) {
  const std::string id = *log_->Create(Pending(2));
  ASSERT_TRUE(log_->Update(id, [](JobRecord& j) {
                    j.status.members.push_back(JobMember{.worker_id = 5});
                    j.status.members.push_back(JobMember{.worker_id = 6});
                    AppendEpoch(j, 0, "start", kNow);
                  }).ok());
  EXPECT_EQ(log_->Find(id)->status.epochs.size(), 1u);
  EXPECT_EQ(OnDisk().jobs[0].status.epochs.size(), 1u);
  EXPECT_EQ(registry_.GetCounter("gs_coordinator_membership_changes_total", "")->value(), 1);

  BreakDisk();
  absl::Status s = log_->Update(id, [](JobRecord& j) { AppendEpoch(j, 10, "more", kNow); });
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(log_->Find(id)->status.epochs.size(), 1u);  // unchanged
  EXPECT_FALSE(log_->Create(Pending(1)).ok());
  EXPECT_EQ(log_->records().size(), 1u);
  EXPECT_EQ(log_->next_job(), 2u);  // the id is not used up
  EXPECT_EQ(log_->Update("job-999999", [](JobRecord&) {}).code(), absl::StatusCode::kNotFound);
}

TEST_F(JobLogTest, AmendIsVisibleAtOnceAndWrittenWithTheNextWrite) {
  const std::string id = *log_->Create(Pending(2));
  const std::string other = *log_->Create(Pending(1));
  ASSERT_TRUE(log_->Amend(id, [](JobRecord& j) { j.status.message = "amended"; }).ok());
  EXPECT_EQ(log_->Find(id)->status.message, "amended");
  EXPECT_EQ(OnDisk().jobs[0].status.message, "");  // not written by itself
  ASSERT_TRUE(log_->Update(other, [](JobRecord& j) { j.status.desired_workers = 3; }).ok());
  EXPECT_EQ(OnDisk().jobs[0].status.message, "amended");  // carried by the next write
  EXPECT_EQ(log_->Amend("job-999999", [](JobRecord&) {}).code(), absl::StatusCode::kNotFound);
}

TEST_F(JobLogTest, AppendEpochNeverGoesBackAndRanksTheActiveMembers) {
  JobRecord j;
  j.status.members.push_back(JobMember{.worker_id = 1});
  j.status.members.push_back(JobMember{.worker_id = 2, .leaving = true});
  j.status.members.push_back(JobMember{.worker_id = 3});
  AppendEpoch(j, 20, "a", kNow);
  AppendEpoch(j, 15, "b", kNow);
  ASSERT_EQ(j.status.epochs.size(), 2u);
  EXPECT_EQ(j.status.epochs[1].epoch, 2u);
  EXPECT_EQ(j.status.epochs[1].effective_clock, 20u);
  EXPECT_EQ(j.status.epochs[1].worker_ids.size(), 2u);
  EXPECT_EQ(j.status.members[2].rank, 1u);
  EXPECT_EQ(j.status.epochs[0].created_unix_ms, absl::ToUnixMillis(kNow));
}

TEST_F(JobLogTest, CheckpointRefreshesProgressOnlyWhenWritten) {
  const std::string id = *log_->Create(Pending(1));
  auto progress = [](const JobRecord&) {
    JobProgress p;
    p.clock = 9;
    return p;
  };
  ASSERT_TRUE(log_->Checkpoint(progress).ok());
  EXPECT_EQ(log_->Find(id)->status.progress.clock, 9u);
  EXPECT_EQ(OnDisk().jobs[0].status.progress.clock, 9u);
  BreakDisk();
  EXPECT_FALSE(log_->Checkpoint([](const JobRecord&) { return JobProgress(); }).ok());
  EXPECT_EQ(log_->Find(id)->status.progress.clock, 9u);
}

TEST_F(JobLogTest, RestoreReadsWhatWasWritten) {
  const std::string id = *log_->Create(Pending(3));
  JobLog again(store_.get(), [](DurableState&) {}, &metrics_);
  DurableState disk = OnDisk();
  again.Restore(disk);
  ASSERT_NE(again.Find(id), nullptr);
  EXPECT_EQ(again.Find(id)->status.desired_workers, 3u);
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
  EXPECT_EQ(OnDisk().jobs.size(), 2u);
  broken_ = false;
  ASSERT_TRUE(log_->Remove({a, "job-999999"}).ok());  // an unknown id is skipped
  EXPECT_EQ(log_->Find(a), nullptr);
  ASSERT_NE(log_->Find(b), nullptr);
  const DurableState disk = OnDisk();
  ASSERT_EQ(disk.jobs.size(), 1u);
  EXPECT_EQ(disk.jobs[0].status.job_id, b);
  EXPECT_EQ(log_->next_job(), 3u);  // ids are not reused
}

TEST(JobLogInMemory, EveryWriteSucceeds) {
  metrics::Registry registry;
  CoordinatorMetrics metrics(&registry);
  JobLog log(nullptr, [](DurableState&) { FAIL() << "nothing to write"; }, &metrics);
  const std::string id = *log.Create(JobRecord());
  EXPECT_TRUE(log.Update(id, [](JobRecord& j) { j.status.message = "m"; }).ok());
  EXPECT_EQ(log.Find(id)->status.message, "m");
}

}  // namespace
}  // namespace gradstream::coordinator
