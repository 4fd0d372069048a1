// Serves a metrics Registry over HTTP for Prometheus to scrape:
//   GET /metrics  -> text exposition format 0.0.4
//   GET /healthz  -> "ok"
// Uses cpp-httplib (Debian's libcpp-httplib-dev) on its own threads.
#ifndef GRADSTREAM_COMMON_METRICS_METRICS_SERVER_H_
#define GRADSTREAM_COMMON_METRICS_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/metrics/metrics.h"

namespace httplib {
class Server;
}

namespace gradstream::metrics {

// Thread-safe; stops and joins its threads on destruction.
class MetricsServer {
 public:
  // Binds `host`:`port` (port 0 = any free port) and starts serving
  // `registry`, which must outlive the server. Unavailable if the port
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(Registry* registry, int port,
                                                              const std::string& host = "0.0.0.0");
  ~MetricsServer();

  int port() const { return port_; }

 private:
  MetricsServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

// What the binaries' --metrics_port / --metrics_port_file flags do: nullptr
// when `port` < 0 (metrics off); else a server on `host`:`port` (0 = any
// free port) whose bound port is written to `port_file` (unless empty) with
// temp file + rename, so a reader never sees a partial number. Unavailable
// when the port cannot be bound; Internal when the file cannot be written.
[[nodiscard]] absl::StatusOr<std::unique_ptr<MetricsServer>> ServeMetrics(
    Registry* registry, int port, const std::string& port_file,
    const std::string& host = "0.0.0.0");

}  // namespace gradstream::metrics

#endif  // GRADSTREAM_COMMON_METRICS_METRICS_SERVER_H_
