// gs_shard: one parameter-server shard process.
//
//   gs_shard --port=0 --port_file=/tmp/p --checkpoint_dir=/var/lib/gs --shard_index=0
//
// With --port=0 the kernel picks a free port; it is logged and written to
// --port_file (atomically: temp file + rename) so a parent process can read
// it as soon as the file appears. SIGTERM/SIGINT shut down gracefully.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/log_flags.h"
#include "common/metrics/metrics_server.h"
#include "common/mutex_mode.h"
#include "common/port_file.h"
#include "common/rpc/flags.h"
#include "common/rpc/malloc_tuning.h"
#include "glog/logging.h"
#include "server/shard/rpc/shard_server.h"

// From SIGTERM/SIGINT to exit at the latest (compose and Kubernetes wait
// 10 s, then kill).
constexpr absl::Duration kShutdownGrace = absl::Seconds(8);

ABSL_FLAG(std::string, address, "0.0.0.0", "Host/interface to bind.");
ABSL_FLAG(int, port, 0, "Port to listen on; 0 picks a free port.");
ABSL_FLAG(std::string, port_file, "", "If set, the bound port is written here.");
ABSL_FLAG(std::string, checkpoint_dir, "", "Directory for checkpoints; empty disables them.");
ABSL_FLAG(int, max_message_bytes, 8 << 20, "Receive limit per gRPC message.");
ABSL_FLAG(uint32_t, shard_index, 0, "This shard's index (logs; jobs carry their own).");
ABSL_FLAG(int, executor_threads, 0, "Decode/apply threads; 0 = hardware concurrency.");
ABSL_FLAG(int, pull_timeout_ms, 60000, "Default deadline of a parked pull.");
ABSL_FLAG(int, pull_answer_bytes,
          static_cast<int>(gradstream::shard::ShardServerOptions().pull_answer_bytes),
          "A pull's chunks travel in messages of up to this many bytes (a larger chunk alone).");
ABSL_FLAG(uint32_t, max_pending_rounds, 4, "Open sync rounds allowed per chunk.");
ABSL_FLAG(uint32_t, max_jobs, 64, "Jobs this shard holds at once (RESOURCE_EXHAUSTED past it).");
ABSL_FLAG(uint64_t, max_chunks, 1 << 16, "Chunks over all jobs (RESOURCE_EXHAUSTED past it).");
ABSL_FLAG(uint64_t, max_param_bytes, uint64_t{16} << 30,
          "fp32 parameter bytes over all jobs (RESOURCE_EXHAUSTED past it).");
ABSL_FLAG(int, metrics_port, -1, "Prometheus /metrics HTTP port; 0 = any free, -1 = off.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "If set, the bound metrics port is written here (before --port_file).");

int main(int argc, char** argv) {
  gradstream::ParseFlagsAndInitLogging(argc, argv);  // [log flags]
  gradstream::SkipMutexDeadlockDetection();          // [mutex deadlock detection]
  // Before any thread starts: see [receive memory].
  if (!gradstream::rpc::KeepFreedMemoryForReuse()) {
    LOG(INFO) << "malloc settings for large messages not applied (not glibc malloc)";
  }

  // Block the shutdown signals in every thread; one thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  gradstream::shard::ShardServerOptions options;
  options.address = absl::GetFlag(FLAGS_address);
  options.port = absl::GetFlag(FLAGS_port);
  options.shard_index = absl::GetFlag(FLAGS_shard_index);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.executor_threads = absl::GetFlag(FLAGS_executor_threads);
  options.default_pull_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_pull_timeout_ms));
  if (absl::GetFlag(FLAGS_pull_answer_bytes) <= 0 ||
      absl::GetFlag(FLAGS_pull_answer_bytes) > absl::GetFlag(FLAGS_max_message_bytes) / 2) {
    std::fprintf(stderr, "gs_shard: --pull_answer_bytes must be in 1..max_message_bytes/2\n");
    return 2;
  }
  options.pull_answer_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_pull_answer_bytes));
  options.max_pending_rounds = absl::GetFlag(FLAGS_max_pending_rounds);
  options.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  options.max_chunks = absl::GetFlag(FLAGS_max_chunks);
  options.max_param_bytes = absl::GetFlag(FLAGS_max_param_bytes);
  absl::StatusOr<gradstream::rpc::RpcConfig> rpc = gradstream::rpc::RpcConfigFromFlags();
  if (!rpc.ok()) {
    LOG(ERROR) << rpc.status();
    return 2;
  }
  options.rpc = *std::move(rpc);
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    options.metrics = gradstream::metrics::Registry::Default();
  }
  auto server = gradstream::shard::ShardServer::Start(options);
  if (!server.ok()) {
    LOG(ERROR) << server.status();
    return 1;
  }
  const int port = (*server)->port();
  LOG(INFO) << "gs_shard " << options.shard_index << " listening on port " << port;
  std::printf("gs_shard listening on port %d\n", port);
  std::fflush(stdout);
  // Bound before --port_file is written: a parent that waits for that file
  // finds the metrics port file in place too.
  auto metrics_server = gradstream::metrics::ServeMetrics(
      gradstream::metrics::Registry::Default(), absl::GetFlag(FLAGS_metrics_port),
      absl::GetFlag(FLAGS_metrics_port_file), options.address);
  if (!metrics_server.ok()) {
    LOG(ERROR) << "--metrics_port: " << metrics_server.status();
    return 1;
  }
  if (*metrics_server != nullptr) {
    LOG(INFO) << "metrics on :" << (*metrics_server)->port() << "/metrics";
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (absl::Status s = gradstream::WritePortFile(port_file, port); !s.ok()) {
      LOG(ERROR) << "--port_file: " << s;
      return 1;
    }
  }
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    LOG(INFO) << "signal " << sig << ": shutting down";
    // Whatever a stream left running, the process ends within the grace
    // period: Shutdown gives streams 2 s, the rest is the executor's queue.
    std::thread([] {
      absl::SleepFor(kShutdownGrace);
      LOG(ERROR) << "still stopping after " << absl::FormatDuration(kShutdownGrace)
                 << " since the signal: exiting now";
      std::_Exit(3);
    }).detach();
    (*server)->Shutdown();
  });
  (*server)->Wait();
  waiter.detach();  // still parked in sigwait when Shutdown came from elsewhere
  metrics_server->reset();  // no scrape runs while the jobs go
  server->reset();
  return 0;
}
