// gs_coordinator: the gradstream control plane (job table, worker pool,
// membership epochs, shard maps). See server/coordinator/coordinator.h.
//
//   gs_coordinator --port=7070 --state_file=/var/lib/gradstream/coordinator.db
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/log_flags.h"
#include "common/metrics/metrics_server.h"
#include "common/mutex_mode.h"
#include "common/port_file.h"
#include "common/rpc/flags.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "server/coordinator/rpc/coordinator_api.h"
#include "server/coordinator/rpc/service.h"
#include "server/coordinator/rpc/shard_client.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 7070, "gRPC port; 0 = any free port (see --port_file).");
ABSL_FLAG(std::string, port_file, "", "Write the bound gRPC port here (atomically) once serving.");
ABSL_FLAG(std::string, state_file, "",
          "SQLite database of the job table, workers and shards (survives restarts; "
          "F-wal beside it); an old-format state file found here is migrated once and kept "
          "as F.migrated. Empty = in memory only.");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(10),
          "A worker silent this long is removed from its job.");
ABSL_FLAG(absl::Duration, start_grace, absl::Seconds(2),
          "A pending job starts with fewer than its workers after waiting this long.");
ABSL_FLAG(absl::Duration, shard_rpc_deadline, absl::Seconds(2), "Deadline of each shard RPC.");
ABSL_FLAG(uint64_t, keep_finished, 10000,
          "Finished jobs kept (newest first); older ones are deleted with their epochs and "
          "history. See also --keep_finished_for.");
ABSL_FLAG(absl::Duration, keep_finished_for, absl::Hours(24 * 30),
          "A finished job is deleted this long after it ended (720h = 30 days; inf = never).");
ABSL_FLAG(bool, drop_finished_jobs, false, "Tell shards to drop a job once it completes.");
ABSL_FLAG(std::vector<std::string>, shards, {},
          "Shard addresses to register at start (host:port,...); shards may also register "
          "themselves with RegisterShard.");
ABSL_FLAG(int, metrics_port, -1, "Prometheus /metrics HTTP port; 0 = any free, -1 = off.");
ABSL_FLAG(std::string, metrics_port_file, "", "Write the bound metrics port here.");

namespace {

absl::Notification* g_stop = nullptr;

void OnSignal(int) {
  if (g_stop != nullptr && !g_stop->HasBeenNotified()) g_stop->Notify();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("gradstream coordinator: gs_coordinator --port=7070 --state_file=F");
  gradstream::ParseFlagsAndInitLogging(argc, argv);  // [log flags]
  gradstream::SkipMutexDeadlockDetection();          // [mutex deadlock detection]

  gradstream::coordinator::CoordinatorOptions options;
  options.heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  options.start_grace = absl::GetFlag(FLAGS_start_grace);
  options.drop_finished_jobs = absl::GetFlag(FLAGS_drop_finished_jobs);
  options.keep_finished = absl::GetFlag(FLAGS_keep_finished);
  options.keep_finished_for = absl::GetFlag(FLAGS_keep_finished_for);
  absl::StatusOr<gradstream::rpc::RpcConfig> rpc = gradstream::rpc::RpcConfigFromFlags();
  if (!rpc.ok()) {
    LOG(ERROR) << rpc.status();
    return 2;
  }
  auto shard_client =
      gradstream::coordinator::NewGrpcShardClient(absl::GetFlag(FLAGS_shard_rpc_deadline), *rpc);
  auto coordinator = gradstream::coordinator::OpenCoordinator(options, shard_client.get(),
                                                              absl::GetFlag(FLAGS_state_file));
  if (!coordinator.ok()) {
    LOG(ERROR) << "cannot open the coordinator state: " << coordinator.status();
    return 1;
  }
  if (absl::Status s = (*coordinator)->AddConfiguredShards(absl::GetFlag(FLAGS_shards)); !s.ok()) {
    LOG(ERROR) << s;
    return 2;
  }

  auto metrics_server = gradstream::metrics::ServeMetrics(
      gradstream::metrics::Registry::Default(), absl::GetFlag(FLAGS_metrics_port),
      absl::GetFlag(FLAGS_metrics_port_file));
  if (!metrics_server.ok()) {
    LOG(ERROR) << "--metrics_port: " << metrics_server.status();
    return 1;
  }
  if (*metrics_server != nullptr) {
    LOG(INFO) << "metrics on :" << (*metrics_server)->port() << "/metrics";
  }

  gradstream::coordinator::CoordinatorApi api(coordinator->get());
  auto service = gradstream::coordinator::NewCoordinatorService(
      &api, gradstream::metrics::Registry::Default(), rpc->auth_token);
  int bound_port = 0;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port));
  if (absl::Status s =
          gradstream::rpc::ConfigureServer(*rpc, address, "gs_coordinator", &builder, &bound_port);
      !s.ok()) {
    LOG(ERROR) << s;
    return 2;
  }
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    LOG(ERROR) << "cannot listen on " << address
               << ": the port is in use or the address is not local (--port=0 picks a free port)";
    return 1;
  }
  (*coordinator)->StartTicker();
  LOG(INFO) << "gs_coordinator listening on :" << bound_port;
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    if (absl::Status s = gradstream::WritePortFile(absl::GetFlag(FLAGS_port_file), bound_port);
        !s.ok()) {
      LOG(ERROR) << "--port_file: " << s;
      return 1;
    }
  }

  absl::Notification stop;
  g_stop = &stop;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  stop.WaitForNotification();
  LOG(INFO) << "gs_coordinator shutting down";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
