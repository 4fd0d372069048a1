#include "server/shard/env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gradstream::shard {
namespace {

absl::Status ErrnoStatus(const std::string& what, const std::string& path) {
  const int e = errno;
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  if (e == ENOSPC) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty() || dir == "." || dir == "/") return absl::OkStatus();
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) return absl::OkStatus();
  const absl::Status parent = MakeDirs(DirName(dir));
  if (!parent.ok()) return parent;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", dir);
  return absl::OkStatus();
}

class PosixEnv final : public Env {
 public:
  absl::Status WriteFileAtomically(const std::string& path, std::string_view data) override {
    const std::string dir = DirName(path);
    if (absl::Status s = MakeDirs(dir); !s.ok()) return s;
    const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus("open", tmp);
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        absl::Status s = ErrnoStatus("write", tmp);
        ::close(fd);
        ::unlink(tmp.c_str());
        return s;
      }
      off += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0) {
      absl::Status s = ErrnoStatus("fsync", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    if (::close(fd) != 0) return ErrnoStatus("close", tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      absl::Status s = ErrnoStatus("rename", tmp);
      ::unlink(tmp.c_str());
      return s;
    }
    // The rename is durable only once the directory entry is.
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return ErrnoStatus("open dir", dir);
    const int rc = ::fsync(dfd);
    ::close(dfd);
    if (rc != 0) return ErrnoStatus("fsync dir", dir);
    return absl::OkStatus();
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
    ::close(fd);
    return out;
  }

  absl::Time Now() override { return absl::Now(); }
};

}  // namespace

Env* Env::Default() {
  static Env* env = new PosixEnv();
  return env;
}

}  // namespace gradstream::shard
