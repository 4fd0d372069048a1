#include "server/coordinator/state_store.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace gradstream::coordinator
