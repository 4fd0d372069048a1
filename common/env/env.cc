// Env's one durable writer, built on the virtual primitives; see
// [atomic file write] in env.h.
#include "common/env/env.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace gradstream {
namespace {

// Unique per process and call, so two threads (or two processes sharing a
// directory) writing the same path never write into one temp file.
std::string TempPathFor(const std::string& path) {
  static std::atomic<uint64_t> next{0};
  return absl::StrCat(path, ".tmp.", ::getpid(), ".", next.fetch_add(1));
}

}  // namespace

std::string DirName(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

absl::Status Env::WriteFileAtomically(const std::string& path, std::string_view data) {
  return WriteFileAtomically(path, [data](WritableFile* file) { return file->Append(data); });
}

absl::Status Env::WriteFileAtomically(const std::string& path,
                                      absl::FunctionRef<absl::Status(WritableFile*)> write) {
  const std::string dir = DirName(path);
  const std::string tmp = TempPathFor(path);
  absl::Status s;
  if (absl::StatusOr<std::unique_ptr<WritableFile>> file = NewWritableFile(tmp); !file.ok()) {
    s = file.status();
  } else {
    s = write(file->get());
    if (s.ok()) s = (*file)->Sync();
    // Close even after a failure: the descriptor must not leak. Its own error
    // matters only when everything before succeeded (NFS reports some there).
    const absl::Status closed = (*file)->Close();
    if (s.ok()) s = closed;
  }
  if (s.ok()) s = RenameFile(tmp, path);
  if (!s.ok()) {
    // NotFound: the open failed before creating it.
    if (absl::Status removed = RemoveFile(tmp); !removed.ok() && !absl::IsNotFound(removed)) {
      return absl::Status(
          s.code(),
          absl::StrCat(s.message(), " (and the temp file stays: ", removed.message(), ")"));
    }
    return s;
  }
  // The rename happened; without this the new entry may vanish on power loss.
  return SyncDir(dir);
}

// The real clock: what every Env gets unless it fakes time ([env time]).
void Env::SleepFor(absl::Duration d) { absl::SleepFor(d); }

bool Env::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline) {
  return mu->AwaitWithDeadline(cond, deadline);
}

std::thread Env::StartThread(std::string_view name, std::function<void()> fn) {
  return std::thread([name = std::string(name.substr(0, 15)), fn = std::move(fn)] {
    ::pthread_setname_np(::pthread_self(), name.c_str());  // best effort: only a label
    fn();
  });
}

std::thread StartHelperThread(Env* env, std::string_view name, std::function<void()> fn) {
  return env->StartThread(name, [fn = std::move(fn)] {
    const char* policy = std::getenv("GRADSTREAM_HELPER_SCHED");
    const bool normal = policy != nullptr && std::strcmp(policy, "normal") == 0;
    if (policy != nullptr && *policy != 0 && !normal) {
      LOG_FIRST_N(WARNING, 1) << "GRADSTREAM_HELPER_SCHED='" << policy
                              << "' is not 'normal': helper threads run SCHED_BATCH";
    }
#ifdef SCHED_BATCH
    const sched_param param{};
    if (!normal) ::sched_setscheduler(0, SCHED_BATCH, &param);  // 0: this thread
#endif
    fn();
  });
}

}  // namespace gradstream
