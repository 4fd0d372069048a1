// See mem_env.h.
#include "common/env/testing/mem_env.h"

#include "absl/strings/str_cat.h"
#include "common/env/string_file.h"

namespace gradstream::testing {

// Appends straight into the map, like a file whose writes are visible before
// the sync.
class MemEnv::File final : public WritableFile {
 public:
  File(MemEnv* env, std::string path) : env_(env), path_(std::move(path)) {}
  absl::Status Append(std::string_view data) override {
    absl::MutexLock l(&env_->mu_);
    env_->files_[path_].append(data);
    return absl::OkStatus();
  }
  absl::Status WriteAt(uint64_t offset, std::string_view data) override {
    absl::MutexLock l(&env_->mu_);
    std::string& file = env_->files_[path_];
    if (offset + data.size() > file.size()) {
      return absl::OutOfRangeError(absl::StrCat(path_, ": WriteAt past the end"));
    }
    file.replace(offset, data.size(), data);
    return absl::OkStatus();
  }
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::Status Close() override { return absl::OkStatus(); }

 private:
  MemEnv* const env_;
  const std::string path_;
};

absl::StatusOr<std::unique_ptr<WritableFile>> MemEnv::NewWritableFile(const std::string& path) {
  absl::MutexLock l(&mu_);
  files_[path].clear();
  return std::make_unique<File>(this, path);
}

absl::StatusOr<std::string> MemEnv::ReadFile(const std::string& path) {
  absl::MutexLock l(&mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file ", path));
  return it->second;
}

absl::StatusOr<std::unique_ptr<SequentialFile>> MemEnv::NewSequentialFile(
    const std::string& path) {
  absl::StatusOr<std::string> data = ReadFile(path);
  if (!data.ok()) return data.status();
  return std::make_unique<StringFile>(*std::move(data));
}

absl::Status MemEnv::RenameFile(const std::string& from, const std::string& to) {
  absl::MutexLock l(&mu_);
  auto it = files_.find(from);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("rename: no file ", from));
  std::string data = std::move(it->second);
  files_.erase(it);
  files_[to] = std::move(data);
  return absl::OkStatus();
}

absl::Status MemEnv::RemoveFile(const std::string& path) {
  absl::MutexLock l(&mu_);
  if (files_.erase(path) == 0) return absl::NotFoundError(absl::StrCat("remove: no file ", path));
  return absl::OkStatus();
}

void MemEnv::PutFile(const std::string& path, std::string_view data) {
  absl::MutexLock l(&mu_);
  files_[path] = std::string(data);
}

std::vector<std::string> MemEnv::FileNames() const {
  absl::MutexLock l(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, data] : files_) names.push_back(name);
  return names;
}

}  // namespace gradstream::testing
