// HTTP exposition of a Registry with cpp-httplib; see metrics_server.h.
#include "common/metrics/metrics_server.h"

#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/port_file.h"

namespace gradstream::metrics {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(Registry* registry, int port,
                                                                    const std::string& host) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->server_ = std::make_unique<httplib::Server>();
  // httplib's default also sets SO_REUSEPORT, which lets a second process
  // silently share a busy port; a metrics port must be ours alone.
  s->server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s->server_->Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s->server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  if (port == 0) {
    s->port_ = s->server_->bind_to_any_port(host);
  } else {
    s->port_ = s->server_->bind_to_port(host, port) ? port : -1;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot bind ", host, ":", port));
  }
  httplib::Server* raw = s->server_.get();
  s->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  // httplib's stop() is a no-op until the listen loop runs, so a server
  // destroyed right after Start() would never join: wait for the loop.
  for (int i = 0; i < 5000 && !raw->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return s;
}

MetricsServer::~MetricsServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<std::unique_ptr<MetricsServer>> ServeMetrics(Registry* registry, int port,
                                                           const std::string& port_file,
                                                           const std::string& host) {
  if (port < 0) return nullptr;
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start(registry, port, host);
  if (!server.ok() || port_file.empty()) return server;
  if (absl::Status s = WritePortFile(port_file, (*server)->port()); !s.ok()) return s;
  return server;
}

}  // namespace gradstream::metrics
