// See fault_injection_env.h.
#include "common/env/testing/fault_injection_env.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gradstream::testing {

class FaultInjectionEnv::File final : public WritableFile {
 public:
  File(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> target)
      : env_(env), path_(std::move(path)), target_(std::move(target)) {}

  absl::Status Append(std::string_view data) override {
    const size_t fits = env_->Reserve(data.size());
    if (absl::Status s = target_->Append(data.substr(0, fits)); !s.ok()) return s;
    if (fits < data.size()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("write ", path_, ": No space left on device (injected)"));
    }
    return absl::OkStatus();
  }
  // Overwrites: takes no free space.
  absl::Status WriteAt(uint64_t offset, std::string_view data) override {
    return target_->WriteAt(offset, data);
  }
  absl::Status Sync() override {
    if (absl::Status s = env_->Check(FaultPoint::kSync, path_); !s.ok()) return s;
    return target_->Sync();
  }
  absl::Status Close() override {
    // Close the real file either way, so an injected failure leaks nothing.
    absl::Status s = target_->Close();
    if (absl::Status injected = env_->Check(FaultPoint::kClose, path_); !injected.ok()) {
      return injected;
    }
    return s;
  }

 private:
  FaultInjectionEnv* const env_;
  const std::string path_;
  const std::unique_ptr<WritableFile> target_;
};

void FaultInjectionEnv::SetFreeBytes(std::optional<int64_t> bytes) {
  absl::MutexLock l(&mu_);
  free_bytes_ = bytes;
}

void FaultInjectionEnv::FailAt(FaultPoint point) {
  absl::MutexLock l(&mu_);
  fail_at_ = point;
}

size_t FaultInjectionEnv::Reserve(size_t want) {
  absl::MutexLock l(&mu_);
  if (!free_bytes_.has_value()) return want;
  const size_t fits =
      std::min<size_t>(want, static_cast<size_t>(std::max<int64_t>(*free_bytes_, 0)));
  *free_bytes_ -= static_cast<int64_t>(fits);
  return fits;
}

absl::Status FaultInjectionEnv::Check(FaultPoint point, const std::string& path) {
  absl::MutexLock l(&mu_);
  if (fail_at_ != point) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(path, ": injected I/O error"));
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(
    const std::string& path) {
  if (absl::Status s = Check(FaultPoint::kOpen, path); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<WritableFile>> file = EnvWrapper::NewWritableFile(path);
  if (!file.ok()) return file.status();
  return std::make_unique<File>(this, path, *std::move(file));
}

absl::Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  if (absl::Status s = Check(FaultPoint::kRename, from); !s.ok()) return s;
  return EnvWrapper::RenameFile(from, to);
}

absl::Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  if (absl::Status s = Check(FaultPoint::kSyncDir, dir); !s.ok()) return s;
  return EnvWrapper::SyncDir(dir);
}

}  // namespace gradstream::testing
