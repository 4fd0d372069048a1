// A process's window on the outside world: files, time and threads. Every
// daemon (shard, coordinator) reaches the disk and the clock through an Env,
// and so does the worker's step loop for its deadlines, so tests can swap in
// memory files, a fake clock, or a disk that fills up (LevelDB's Env +
// EnvWrapper; see common/env/testing/).
//
// Durable files are written one way only, Env::WriteFileAtomically(); see
// [atomic file write]. Framed, checksummed records (checkpoints, the
// coordinator's state) put record.h's frame around their payload first.
#ifndef GRADSTREAM_COMMON_ENV_ENV_H_
#define GRADSTREAM_COMMON_ENV_ENV_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gradstream {

// A file being written. Not thread-safe; owned by one writer.
class WritableFile {
 public:
  // Closes the file if Close() was not called, ignoring the result.
  virtual ~WritableFile() = default;

  // ResourceExhausted when the disk is full; other codes from errno.
  [[nodiscard]] virtual absl::Status Append(std::string_view data) = 0;
  // Overwrites bytes already appended, from `offset` (a record's header once
  // its payload has been streamed: record.h's RecordWriter).
  [[nodiscard]] virtual absl::Status WriteAt(uint64_t offset, std::string_view data) = 0;
  // Returns once the data written so far is on stable storage (fsync).
  [[nodiscard]] virtual absl::Status Sync() = 0;
  // At most once; nothing may be called after it.
  [[nodiscard]] virtual absl::Status Close() = 0;
};

// A file being read from its start. Not thread-safe; owned by one reader.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Up to `n` bytes into `scratch`: fewer only at the end of the file, 0 there.
  [[nodiscard]] virtual absl::StatusOr<size_t> Read(char* scratch, size_t n) = 0;
  // The file's size in bytes.
  [[nodiscard]] virtual absl::StatusOr<uint64_t> Size() = 0;
};

// Thread-safe: every method may be called from any thread.
//
// Errors carry the path they concern and map errno as: ENOENT -> NotFound,
// EACCES/EPERM -> PermissionDenied, ENOSPC/EDQUOT -> ResourceExhausted, anything
// else -> Internal.
class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX implementation. Never deleted.
  static Env* Default();

  // NOTE: [atomic file write]
  // Writes `data` so that `path` holds either its old contents or all of
  // `data`, never a mix, even across a crash or power loss: a temp file in the
  // same directory (so the rename cannot cross file systems), write, fsync,
  // close, rename over `path`, fsync of the directory (the rename is durable
  // only once the directory entry is). Every step's result is checked and the
  // first failure comes back; the temp file is removed on any failure before
  // the rename, so a full disk leaves the old file and no litter. The
  // directory must exist (NotFound otherwise; see CreateDirs).
  //
  // Not virtual: every Env writes durably the same way, built on the virtual
  // primitives below, which is where tests inject faults.
  [[nodiscard]] absl::Status WriteFileAtomically(const std::string& path, std::string_view data);
  // The same for contents too large to hold at once: `write` appends them to
  // the temp file (its first error ends the write as a failed Append would).
  [[nodiscard]] absl::Status WriteFileAtomically(
      const std::string& path, absl::FunctionRef<absl::Status(WritableFile*)> write);

  // Creates or truncates `path`.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // The whole file; NotFound when it does not exist.
  [[nodiscard]] virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // The file in pieces, for files too large to hold twice; NotFound as above.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(
      const std::string& path) = 0;
  // Atomically replaces `to` (rename(2)).
  [[nodiscard]] virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;
  [[nodiscard]] virtual absl::Status RemoveFile(const std::string& path) = 0;
  // mkdir -p: OK when `dir` exists already.
  [[nodiscard]] virtual absl::Status CreateDirs(const std::string& dir) = 0;
  // Makes the entries of `dir` (creations, renames) durable (fsync of the
  // directory).
  [[nodiscard]] virtual absl::Status SyncDir(const std::string& dir) = 0;

  // NOTE: [env time]
  // Every time read that decides something (a deadline, a heartbeat, a
  // staleness bound, a backoff, a rate limit) goes through Now(), and every
  // wait for such a time through SleepFor() or AwaitWithDeadline(); times
  // that only measure may stay on absl::Now(). An Env that overrides Now()
  // must override both waits with the same clock, wake a wait once its clock
  // reaches the deadline, and never end one by timeout before. Why:
  // docs/design/env-time.md.

  // Wall-clock time.
  virtual absl::Time Now() = 0;

  // Blocks the calling thread until Now() has moved on by `d` (at once when
  // d <= 0).
  virtual void SleepFor(absl::Duration d);

  // With `mu` held: waits until `cond` holds (true) or Now() reaches
  // `deadline` (false, when `cond` is false at that point), as
  // absl::Mutex::AwaitWithDeadline does but on this Env's clock. `mu` is
  // released while waiting and held again on return; `cond` is evaluated
  // with `mu` held, whenever `mu` is released by anyone, as absl does.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool AwaitWithTimeout(absl::Mutex* mu, const absl::Condition& cond, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return AwaitWithDeadline(mu, cond, Now() + timeout);
  }

  // Starts a thread that runs `fn`, named `name` (its first 15 bytes: what
  // top -H, gdb and /proc show). The caller owns the thread and joins it.
  virtual std::thread StartThread(std::string_view name, std::function<void()> fn);
};

// Forwards everything to `target`, which must outlive the wrapper; subclass it
// and override what a test fakes. Thread-safe if `target` is.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}

  [[nodiscard]] absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    return target_->NewWritableFile(path);
  }
  [[nodiscard]] absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return target_->ReadFile(path);
  }
  [[nodiscard]] absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(
      const std::string& path) override {
    return target_->NewSequentialFile(path);
  }
  [[nodiscard]] absl::Status RenameFile(const std::string& from, const std::string& to) override {
    return target_->RenameFile(from, to);
  }
  [[nodiscard]] absl::Status RemoveFile(const std::string& path) override {
    return target_->RemoveFile(path);
  }
  [[nodiscard]] absl::Status CreateDirs(const std::string& dir) override {
    return target_->CreateDirs(dir);
  }
  [[nodiscard]] absl::Status SyncDir(const std::string& dir) override {
    return target_->SyncDir(dir);
  }
  absl::Time Now() override { return target_->Now(); }
  void SleepFor(absl::Duration d) override { target_->SleepFor(d); }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return target_->AwaitWithDeadline(mu, cond, deadline);
  }
  std::thread StartThread(std::string_view name, std::function<void()> fn) override {
    return target_->StartThread(name, std::move(fn));
  }

 private:
  Env* const target_;
};

// env->StartThread for a training process's stream and encode threads
// ([helper threads] in worker/client/step_loop.h): best effort (Linux), the
// thread runs SCHED_BATCH -- woken on a busy CPU it waits for the running
// thread's slice instead of preempting it -- unless
// GRADSTREAM_HELPER_SCHED=normal.
std::thread StartHelperThread(Env* env, std::string_view name, std::function<void()> fn);

// The directory part of `path`: "." for a bare name, "/" for "/name".
std::string DirName(std::string_view path);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_ENV_ENV_H_
