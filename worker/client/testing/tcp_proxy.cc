// Loopback TCP forwarder. See tcp_proxy.h.
#include "worker/client/testing/tcp_proxy.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gradstream::client::testing {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(int upstream_port) {
  std::unique_ptr<TcpProxy> p(new TcpProxy());
  p->upstream_port_ = upstream_port;
  p->listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = Loopback(0);
  if (::bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(p->listen_fd_, 64) != 0) {
    return absl::InternalError(absl::StrCat("proxy listen: ", std::strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  p->port_ = ntohs(addr.sin_port);
  p->acceptor_ = std::thread([raw = p.get()] { raw->AcceptLoop(); });
  return p;
}

TcpProxy::~TcpProxy() {
  stopping_.store(true);
  ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listen_fd_);
  SeverAll();
  std::vector<std::thread> pumps;
  {
    absl::MutexLock lock(&mu_);
    pumps.swap(pumps_);
  }
  for (auto& t : pumps) t.join();
  absl::MutexLock lock(&mu_);
  for (int fd : fds_) ::close(fd);
}

void TcpProxy::SeverAll() {
  absl::MutexLock lock(&mu_);
  for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
}

void TcpProxy::AcceptLoop() {
  while (!stopping_.load()) {
    const int client = ::accept(listen_fd_, nullptr, nullptr);
    if (client < 0) {
      if (stopping_.load()) return;
      continue;
    }
    const int server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in up = Loopback(upstream_port_);
    if (::connect(server, reinterpret_cast<sockaddr*>(&up), sizeof(up)) != 0) {
      ::close(server);
      ::close(client);
      continue;
    }
    int one = 1;
    ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    accepted_.fetch_add(1);
    absl::MutexLock lock(&mu_);
    fds_.push_back(client);
    fds_.push_back(server);
    pumps_.emplace_back([this, client, server] { Pump(client, server, false); });
    pumps_.emplace_back([this, client, server] { Pump(server, client, true); });
  }
}

void TcpProxy::Pump(int from, int to, bool downstream) {
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(from, buf, sizeof(buf));
    if (n <= 0) break;
    if (downstream && drop_downstream_.load()) continue;
    ssize_t off = 0;
    while (off < n) {
      const ssize_t w = ::send(to, buf + off, n - off, MSG_NOSIGNAL);
      if (w <= 0) {
        off = -1;
        break;
      }
      off += w;
    }
    if (off < 0) break;
  }
  // Propagate the end both ways so the peer pump stops too.
  ::shutdown(from, SHUT_RDWR);
  ::shutdown(to, SHUT_RDWR);
}

}  // namespace gradstream::client::testing
