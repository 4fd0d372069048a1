// An Env that fails on command, wrapping another (POSIX in a temp directory,
// or MemEnv): a disk that fills up after N more bytes, or one file-system
// operation that fails every time. What shard and coordinator tests use to
// check that a failed durable write loses nothing (see [atomic file write]).
#ifndef GRADSTREAM_COMMON_ENV_TESTING_FAULT_INJECTION_ENV_H_
#define GRADSTREAM_COMMON_ENV_TESTING_FAULT_INJECTION_ENV_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/env/env.h"

namespace gradstream::testing {

// The operations FailAt() can break.
enum class FaultPoint { kNone, kOpen, kSync, kClose, kRename, kSyncDir };

// Thread-safe.
class FaultInjectionEnv : public EnvWrapper {
 public:
  explicit FaultInjectionEnv(Env* target) : EnvWrapper(target) {}

  // A full disk: after `bytes` more bytes, Append writes what fits and returns
  // ResourceExhausted ("No space left on device"). nullopt = unlimited.
  void SetFreeBytes(std::optional<int64_t> bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Every call of `point` fails with Internal ("injected I/O error") until
  // the next FailAt; kNone clears.
  void FailAt(FaultPoint point) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::Status SyncDir(const std::string& dir) override;

 private:
  class File;

  // Takes up to `want` bytes of the free space; returns how many fit.
  size_t Reserve(size_t want) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Check(FaultPoint point, const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  std::optional<int64_t> free_bytes_ ABSL_GUARDED_BY(mu_);
  FaultPoint fail_at_ ABSL_GUARDED_BY(mu_) = FaultPoint::kNone;
};

}  // namespace gradstream::testing

#endif  // GRADSTREAM_COMMON_ENV_TESTING_FAULT_INJECTION_ENV_H_
