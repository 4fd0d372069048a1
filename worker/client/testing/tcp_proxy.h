// A loopback TCP forwarder for fault injection in tests: it can silently drop
// what the server sends (lost acks) and sever every connection at once (a
// network break the client must recover from). Not for production code.
#ifndef GRADSTREAM_WORKER_CLIENT_TESTING_TCP_PROXY_H_
#define GRADSTREAM_WORKER_CLIENT_TESTING_TCP_PROXY_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gradstream::client::testing {

// Thread-safe.
class TcpProxy {
 public:
  // Listens on a free loopback port and forwards to 127.0.0.1:`upstream_port`.
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(int upstream_port);
  ~TcpProxy();

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // While set, bytes from the server are read and thrown away.
  void set_drop_downstream(bool drop) { drop_downstream_.store(drop); }
  // Shuts down every open connection (new ones are still accepted).
  void SeverAll();
  int connections_accepted() const { return accepted_.load(); }

 private:
  TcpProxy() = default;
  void AcceptLoop();
  void Pump(int from, int to, bool downstream);

  int listen_fd_ = -1;
  int port_ = 0;
  int upstream_port_ = 0;
  std::atomic<bool> drop_downstream_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> pumps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradstream::client::testing

#endif  // GRADSTREAM_WORKER_CLIENT_TESTING_TCP_PROXY_H_
