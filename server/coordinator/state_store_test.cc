#include "server/coordinator/state_store.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/env/testing/fault_injection_env.h"
#include "common/env/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "zlib.h"

namespace gradstream::coordinator {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name + "." + std::to_string(::getpid());
}

TEST(StateStore, MissingFileIsNotFound) {
  StateStore store(TempPath("missing_state"));
  EXPECT_EQ(store.Load().status().code(), absl::StatusCode::kNotFound);
}

TEST(StateStore, SaveThenLoadRoundTrips) {
  const std::string path = TempPath("roundtrip_state");
  StateStore store(path);
  gradstream::v1::CoordinatorState state;
  state.set_next_job(7);
  state.add_jobs()->set_job_id("job-000006");
  ASSERT_TRUE(store.Save(state).ok());
  state.set_next_job(8);
  ASSERT_TRUE(store.Save(state).ok());  // replaces
  auto loaded = store.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->next_job(), 8u);
  EXPECT_EQ(loaded->jobs(0).job_id(), "job-000006");
  std::remove(path.c_str());
}

TEST(StateStore, TruncatedOrCorruptFileIsDataLoss) {
  const std::string path = TempPath("corrupt_state");
  StateStore store(path);
  gradstream::v1::CoordinatorState state;
  state.set_next_job(3);
  state.add_jobs()->set_job_id("job-000001");
  ASSERT_TRUE(store.Save(state).ok());
  std::string data;
  {
    std::ifstream in(path, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), {});
  }
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << data.substr(0, data.size() - 3);
  }
  EXPECT_EQ(store.Load().status().code(), absl::StatusCode::kDataLoss);
  data[data.size() - 1] ^= 0x55;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << data;
  }
  EXPECT_EQ(store.Load().status().code(), absl::StatusCode::kDataLoss);
  std::remove(path.c_str());
}

// A directory of its own, so a test can check that nothing but the state file
// is left in it.
class StateStoreOnDisk : public ::testing::Test {
 protected:
  static gradstream::v1::CoordinatorState State(uint64_t next_job) {
    gradstream::v1::CoordinatorState state;
    state.set_next_job(next_job);
    state.add_jobs()->set_job_id("job-000001");
    return state;
  }
  void WriteRaw(const std::string& data) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << data;
  }

  testing::TempDir dir_;
  const std::string path_ = dir_.path() + "/coordinator.state";
};

TEST_F(StateStoreOnDisk, FullDiskKeepsThePreviousStateAndLeavesNoTempFile) {
  testing::FaultInjectionEnv env(Env::Default());
  StateStore store(path_, &env);
  ASSERT_TRUE(store.Save(State(3)).ok());
  env.SetFreeBytes(10);  // less than the new file
  const absl::Status s = store.Save(State(4));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(dir_.Names(), std::vector<std::string>{"coordinator.state"});
  absl::StatusOr<gradstream::v1::CoordinatorState> loaded = store.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->next_job(), 3u);
  // A fresh store (a restarted coordinator) sees the same.
  loaded = StateStore(path_).Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->next_job(), 3u);
}

TEST_F(StateStoreOnDisk, EveryFailingStepReportsAndLosesNothing) {
  using testing::FaultPoint;
  testing::FaultInjectionEnv env(Env::Default());
  StateStore store(path_, &env);
  ASSERT_TRUE(store.Save(State(3)).ok());
  for (FaultPoint p :
       {FaultPoint::kOpen, FaultPoint::kSync, FaultPoint::kClose, FaultPoint::kRename}) {
    env.FailAt(p);
    EXPECT_EQ(store.Save(State(4)).code(), absl::StatusCode::kInternal);
    EXPECT_EQ(dir_.Names(), std::vector<std::string>{"coordinator.state"});
    absl::StatusOr<gradstream::v1::CoordinatorState> loaded = store.Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->next_job(), 3u);
  }
  // The directory fsync comes after the rename: the error still comes back.
  env.FailAt(FaultPoint::kSyncDir);
  EXPECT_EQ(store.Save(State(4)).code(), absl::StatusCode::kInternal);
  env.FailAt(FaultPoint::kNone);
  ASSERT_TRUE(store.Save(State(5)).ok());
  EXPECT_EQ(store.Load()->next_job(), 5u);
}

TEST_F(StateStoreOnDisk, TruncatedCorruptOrForeignFileIsDataLossNamingTheFile) {
  StateStore store(path_);
  ASSERT_TRUE(store.Save(State(3)).ok());
  std::string data;
  {
    std::ifstream in(path_, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string flipped = data;
  flipped[flipped.size() / 2] ^= 0x01;
  for (const std::string& bad :
       {data.substr(0, data.size() - 1), data.substr(0, 10), flipped, std::string("4242\n")}) {
    WriteRaw(bad);
    const absl::Status s = store.Load().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find(path_), std::string::npos) << s;
  }
}

// See [legacy state file].
TEST_F(StateStoreOnDisk, LegacyFileStillLoadsAndIsRewrittenInTheNewFrame) {
  std::string body;
  ASSERT_TRUE(State(9).SerializeToString(&body));
  std::string legacy = "GSCOORD1";
  for (int i = 0; i < 8; ++i) legacy.push_back(static_cast<char>(uint64_t{body.size()} >> (8 * i)));
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
  for (int i = 0; i < 4; ++i) legacy.push_back(static_cast<char>(crc >> (8 * i)));
  WriteRaw(legacy + body);
  StateStore store(path_);
  absl::StatusOr<gradstream::v1::CoordinatorState> loaded = store.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->next_job(), 9u);
  EXPECT_EQ(loaded->jobs(0).job_id(), "job-000001");

  WriteRaw(legacy + body.substr(0, body.size() - 1));
  EXPECT_EQ(store.Load().status().code(), absl::StatusCode::kDataLoss);

  ASSERT_TRUE(store.Save(*loaded).ok());
  std::ifstream in(path_, std::ios::binary);
  std::string magic(8, '\0');
  in.read(magic.data(), 8);
  EXPECT_EQ(magic, "GSCOORDS");
  EXPECT_EQ(store.Load()->next_job(), 9u);
}

}  // namespace
}  // namespace gradstream::coordinator
