// Env::Default(): POSIX files (open/write/fsync/rename) and absl::Now().
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/env/env.h"

namespace gradstream {
namespace {

// Reads errno: call right after the failing system call.
absl::Status ErrnoStatus(const std::string& what, const std::string& path) {
  const int e = errno;
  const std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  if (e == ENOSPC || e == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(std::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("write", path_);
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  absl::Status WriteAt(uint64_t offset, std::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("pwrite", path_);
      }
      data.remove_prefix(static_cast<size_t>(n));
      offset += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (::fsync(fd_) != 0) return ErrnoStatus("fsync", path_);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    // No retry on EINTR: Linux frees the descriptor either way.
    if (::close(fd) != 0) return ErrnoStatus("close", path_);
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  int fd_;
};

class PosixSequentialFile final : public SequentialFile {
 public:
  PosixSequentialFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixSequentialFile() override { ::close(fd_); }  // read-only: nothing to lose

  absl::StatusOr<size_t> Read(char* scratch, size_t n) override {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(fd_, scratch + got, n - got);
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("read", path_);
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

  absl::StatusOr<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoStatus("fstat", path_);
    return static_cast<uint64_t>(st.st_size);
  }

 private:
  const std::string path_;
  const int fd_;
};

class PosixEnv final : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus("open", path);
    return std::make_unique<PosixWritableFile>(path, fd);
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", path);
    std::string out;
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0) {
        if (errno == EINTR) continue;
        absl::Status s = ErrnoStatus("read", path);
        ::close(fd);
        return s;
      }
      if (n == 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);  // read-only: nothing to lose
    return out;
  }

  absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(
      const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", path);
    return std::make_unique<PosixSequentialFile>(path, fd);
  }

  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus("rename", absl::StrCat(from, " -> ", to));
    }
    return absl::OkStatus();
  }

  absl::Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoStatus("unlink", path);
    return absl::OkStatus();
  }

  absl::Status CreateDirs(const std::string& dir) override {
    if (dir.empty() || dir == "." || dir == "/") return absl::OkStatus();
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
    }
    if (absl::Status s = CreateDirs(DirName(dir)); !s.ok()) return s;
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", dir);
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open directory", dir);
    if (::fsync(fd) != 0) {
      absl::Status s = ErrnoStatus("fsync directory", dir);
      ::close(fd);
      return s;
    }
    ::close(fd);  // read-only descriptor: nothing to lose
    return absl::OkStatus();
  }

  absl::Time Now() override { return absl::Now(); }
};

}  // namespace

Env* Env::Default() {
  static Env* env = new PosixEnv();
  return env;
}

}  // namespace gradstream
