// Env::WriteFileAtomically() against the real file system, with faults
// injected at every step: the old file survives, no temp file is left, and
// the error comes back.
#include "common/env/env.h"

#include <filesystem>
#include <string>
#include <vector>

#include "common/env/testing/fault_injection_env.h"
#include "common/status.h"
#include "common/env/testing/mem_env.h"
#include "common/env/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace gradstream {
namespace {

using testing::FaultInjectionEnv;
using testing::FaultPoint;
using testing::TempDir;

TEST(PosixEnv, WritesReadsAndReplaces) {
  TempDir dir;
  Env* env = Env::Default();
  const std::string path = dir.path() + "/a/b/file";
  EXPECT_EQ(env->WriteFileAtomically(path, "first").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(env->CreateDirs(dir.path() + "/a/b").ok());
  ASSERT_TRUE(env->CreateDirs(dir.path() + "/a/b").ok());  // exists: fine
  ASSERT_TRUE(env->WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(env->WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(*env->ReadFile(path), "second");
  EXPECT_EQ(std::filesystem::directory_iterator(dir.path() + "/a/b")->path().filename(), "file");
  EXPECT_EQ(env->ReadFile(dir.path() + "/missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(PosixEnv, ErrorsNameThePath) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing";
  absl::Status s = Env::Default()->RemoveFile(missing);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find(missing), std::string::npos) << s;
}

TEST(WriteFileAtomically, FullDiskKeepsTheOldFileAndLeavesNoTempFile) {
  TempDir dir;
  FaultInjectionEnv env(Env::Default());
  const std::string path = dir.path() + "/state";
  ASSERT_TRUE(env.WriteFileAtomically(path, "old contents").ok());
  env.SetFreeBytes(4);
  absl::Status s = env.WriteFileAtomically(path, "new contents, longer");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(*env.ReadFile(path), "old contents");
  EXPECT_EQ(dir.Names(), std::vector<std::string>{"state"});
  env.SetFreeBytes(std::nullopt);  // space freed: the next write goes through
  ASSERT_TRUE(env.WriteFileAtomically(path, "new").ok());
  EXPECT_EQ(*env.ReadFile(path), "new");
}

// Contents written in pieces land whole or not at all, as with one string;
// the first failed piece ends the write, its error comes back, and the old
// file stays.
TEST(WriteFileAtomically, WritesPiecesAndStopsAtTheFirstFailure) {
  TempDir dir;
  FaultInjectionEnv env(Env::Default());
  const std::string path = dir.path() + "/state";
  ASSERT_TRUE(env.WriteFileAtomically(path, [](WritableFile* f) {
                   GS_RETURN_IF_ERROR(f->Append("hello, "));
                   GS_RETURN_IF_ERROR(f->Append("world"));
                   return f->WriteAt(0, "H");
                 }).ok());
  EXPECT_EQ(*env.ReadFile(path), "Hello, world");
  int pieces = 0;
  env.SetFreeBytes(10);
  absl::Status s = env.WriteFileAtomically(path, [&](WritableFile* f) {
    for (;; ++pieces) GS_RETURN_IF_ERROR(f->Append("1234"));
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(pieces, 2);
  EXPECT_EQ(*env.ReadFile(path), "Hello, world");
  EXPECT_EQ(dir.Names(), std::vector<std::string>{"state"});
  // And read back in pieces.
  std::unique_ptr<SequentialFile> in = *env.NewSequentialFile(path);
  char buf[8];
  EXPECT_EQ(*in->Read(buf, 8), 8u);
  EXPECT_EQ(*in->Read(buf, 8), 4u);
  EXPECT_EQ(std::string(buf, 4), "orld");
  EXPECT_EQ(*in->Read(buf, 8), 0u);
  EXPECT_EQ(env.NewSequentialFile(dir.path() + "/missing").status().code(),
            absl::StatusCode::kNotFound);
}

class FailingStep : public ::testing::TestWithParam<FaultPoint> {};

TEST_P(FailingStep, ReportsAndLeavesNoTempFile) {
  TempDir dir;
  FaultInjectionEnv env(Env::Default());
  const std::string path = dir.path() + "/state";
  ASSERT_TRUE(env.WriteFileAtomically(path, "old").ok());
  env.FailAt(GetParam());
  absl::Status s = env.WriteFileAtomically(path, "new");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("injected"), std::string::npos) << s;
  EXPECT_EQ(dir.Names(), std::vector<std::string>{"state"});
  // Until the rename the old contents stay; a failed directory sync comes
  // after it, so the new contents are in place but maybe not durable.
  EXPECT_EQ(*env.ReadFile(path), GetParam() == FaultPoint::kSyncDir ? "new" : "old");
}

INSTANTIATE_TEST_SUITE_P(EveryStep, FailingStep,
                         ::testing::Values(FaultPoint::kOpen, FaultPoint::kSync, FaultPoint::kClose,
                                           FaultPoint::kRename, FaultPoint::kSyncDir));

TEST(MemEnv, BehavesLikeFilesAndLeavesNoTempFile) {
  testing::MemEnv mem;
  FaultInjectionEnv env(&mem);
  ASSERT_TRUE(env.WriteFileAtomically("/d/f", "one").ok());
  env.SetFreeBytes(0);
  EXPECT_EQ(env.WriteFileAtomically("/d/f", "two").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*mem.ReadFile("/d/f"), "one");
  EXPECT_EQ(mem.FileNames(), std::vector<std::string>{"/d/f"});
  EXPECT_EQ(mem.RenameFile("/d/x", "/d/y").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gradstream
