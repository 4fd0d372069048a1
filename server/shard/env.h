// The shard's window on the outside world: files and time. Injectable (like
// LevelDB's Env) so tests can make writes fail or corrupt what is read.
#ifndef GRADSTREAM_SERVER_SHARD_ENV_H_
#define GRADSTREAM_SERVER_SHARD_ENV_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gradstream::shard {

// Thread-safe.
class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX implementation. Never deleted.
  static Env* Default();

  // Writes `data` so that `path` holds either its old contents or all of
  // `data`, never a mix: temp file in the same directory, fsync, rename, fsync
  // of the directory. Creates the directory if missing. Internal/other codes
  // from errno on failure.
  [[nodiscard]] virtual absl::Status WriteFileAtomically(const std::string& path,
                                                         std::string_view data) = 0;
  // NotFound when the file does not exist.
  [[nodiscard]] virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  virtual absl::Time Now() = 0;
};

// Forwards everything to `target`; subclass and override what a test fakes.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  [[nodiscard]] absl::Status WriteFileAtomically(const std::string& path,
                                                 std::string_view data) override {
    return target_->WriteFileAtomically(path, data);
  }
  [[nodiscard]] absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return target_->ReadFile(path);
  }
  absl::Time Now() override { return target_->Now(); }

 private:
  Env* const target_;
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_ENV_H_
