// Env with files in memory, for tests and the fuzzer: fast, deterministic and
// free of disk state. Directories are implicit (CreateDirs and SyncDir
// succeed); Now() is the real clock unless a subclass overrides it.
#ifndef GRADSTREAM_COMMON_ENV_TESTING_MEM_ENV_H_
#define GRADSTREAM_COMMON_ENV_TESTING_MEM_ENV_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/env/env.h"

namespace gradstream::testing {

// Thread-safe.
class MemEnv : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  // Reads a copy of the file as it is at the call.
  absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(
      const std::string& path) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status CreateDirs(const std::string& dir) override { return absl::OkStatus(); }
  absl::Status SyncDir(const std::string& dir) override { return absl::OkStatus(); }
  absl::Time Now() override { return absl::Now(); }

  // Sets a file's bytes directly: to plant a damaged or foreign file.
  void PutFile(const std::string& path, std::string_view data) ABSL_LOCKS_EXCLUDED(mu_);
  // Every file's path, sorted: to check that no temp file is left behind.
  std::vector<std::string> FileNames() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class File;

  mutable absl::Mutex mu_;
  std::map<std::string, std::string> files_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradstream::testing

#endif  // GRADSTREAM_COMMON_ENV_TESTING_MEM_ENV_H_
