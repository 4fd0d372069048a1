// gs_worker: joins the coordinator's worker pool and trains whatever job it is
// assigned, until killed.
//
//   gs_worker --coordinator=localhost:7070 [--device=auto|cpu|gpu] [--name=...]
//             [--device_encode]
//
// One thread heartbeats (progress out, assignment in); the main thread trains.
//
// NOTE: [worker stop] SIGTERM or SIGINT (how docker and Kubernetes stop a
// container) is a graceful leave: the trainer finishes the clock it is in,
// sends Leave to every shard (see [graceful stop] in trainer.h), the worker
// reports LEFT in one last heartbeat, so the coordinator removes it at once
// at the clock it did not do, and exits 0. That takes one step plus two RPCs;
// if it has not happened within --stop_grace_s (a wedged shard), the worker
// exits 1 anyway, and a second signal exits at once. The deployments give
// it more than that: docker-compose stop_grace_period 30s, Kubernetes
// terminationGracePeriodSeconds 30. Every heartbeat after the signal says
// `stopping`: the coordinator hands the exiting process no job, not even
// the one it just left.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/env/env.h"
#include "common/grpc_util.h"
#include "common/job/shard_map_proto.h"
#include "common/log_flags.h"
#include "common/metrics/metrics_server.h"
#include "common/mutex_mode.h"
#include "common/rpc/flags.h"
#include "common/rpc/malloc_tuning.h"
#include "common/status.h"
#include "coordinator.grpc.pb.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "worker/client/ps_client.h"
#include "worker/runtime/internal/device_pusher.h"
#include "worker/runtime/session.h"
#include "worker/trainer/job_setup.h"
#include "worker/trainer/script_runner.h"
#include "worker/trainer/trainer.h"
#include "worker/trainer/worker_metrics.h"

ABSL_FLAG(std::string, coordinator, "",
          "coordinator host:port (default: $GRADSTREAM_COORDINATOR or localhost:7070)");
ABSL_FLAG(std::string, device, "auto", "auto (GPU when present), cpu or gpu");
ABSL_FLAG(bool, device_encode, false,
          "encode gradients on the GPU and copy only the codes to host (needs a CUDA build "
          "and --device=gpu or auto on a GPU host); off: copy fp32 gradients, encode on the CPU");
ABSL_FLAG(std::string, name, "", "name shown by `gradstream cluster` (default: host name)");
ABSL_FLAG(int, rpc_timeout_ms, 5000, "deadline of each coordinator RPC");
ABSL_FLAG(int, register_timeout_s, 120, "give up when the coordinator is unreachable this long");
ABSL_FLAG(int, metrics_port, -1, "Prometheus /metrics HTTP port; 0 = any free, -1 = off");
ABSL_FLAG(std::string, metrics_port_file, "", "if set, the bound metrics port is written here");
ABSL_FLAG(int, stop_grace_s, 20,
          "after SIGTERM/SIGINT, leave the job gracefully within this many seconds or exit 1 "
          "(see [worker stop])");
ABSL_FLAG(std::string, python_path, "",
          "script jobs: folder put first on the script's PYTHONPATH (default: the gradstream "
          "package next to this binary, if there is one; none when it is pip-installed)");
ABSL_FLAG(int, script_init_timeout_s, 120,
          "script jobs: a script that has not called gradstream's init after this long is "
          "stopped and fails the job");

namespace gradstream {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int sig) {
  if (g_stop.exchange(true)) _exit(128 + sig);  // the second signal: now
}

std::string CoordinatorAddress() {
  std::string a = absl::GetFlag(FLAGS_coordinator);
  if (a.empty()) {
    const char* env = std::getenv("GRADSTREAM_COORDINATOR");
    a = env != nullptr && *env != '\0' ? env : "localhost:7070";
  }
  return a;
}

using runtime::Assignment;
using runtime::AssignmentFromProto;

// Everything the heartbeat thread and the training thread share.
class WorkerState {
 public:
  // NOTE: [new incarnation] Registering again after the coordinator removed
  // this worker (e.g. the process was stopped past the heartbeat timeout)
  // makes it a new incarnation. What the old one was doing dies with it: its
  // last assignment is dropped, and the outcome its trainer reports later
  // (typically an error: the shards refuse the removed worker's pushes) is
  // not sent under the new identity. Otherwise the coordinator takes the old
  // failure for the new incarnation's and removes it again from the job it
  // has just rejoined, and RunJob() keeps waiting on a job "still active"
  // that it is in fact being asked to join afresh.
  void SetIdentity(uint64_t id, uint64_t incarnation) {
    absl::MutexLock l(&mu_);
    if (id != id_ || incarnation != incarnation_) {
      job_.clear();
      declared_.Clear();
      state_ = v1::IDLE;
      message_.clear();
      latest_.Clear();
    }
    id_ = id;
    incarnation_ = incarnation;
  }
  std::pair<uint64_t, uint64_t> Identity() const {
    absl::MutexLock l(&mu_);
    return {id_, incarnation_};
  }
  // What incarnation `incarnation` reports; ignored once the worker is a
  // newer incarnation (see [new incarnation]).
  void SetJob(uint64_t incarnation, std::string job, v1::WorkerState state,
              std::string message = "") {
    absl::MutexLock l(&mu_);
    if (incarnation != incarnation_) return;
    if (job != job_) declared_.Clear();
    job_ = std::move(job);
    state_ = state;
    message_ = std::move(message);
  }
  void Fill(v1::HeartbeatRequest* req, const runtime::ProgressBoard& board) const {
    absl::MutexLock l(&mu_);
    req->set_worker_id(id_);
    req->set_incarnation(incarnation_);
    req->set_job_id(job_);
    req->set_state(state_);
    req->set_message(message_);
    // Until the assignment carries the map built from them ([script jobs]).
    if (latest_.shard_map().shards_size() == 0) *req->mutable_declared_tensors() = declared_;
    *req->mutable_progress() = runtime::ProgressToProto(board.Get());
  }
  // The tensors the script of the current job declared.
  void SetDeclared(const google::protobuf::RepeatedPtrField<v1::DeclaredTensor>& tensors) {
    absl::MutexLock l(&mu_);
    declared_ = tensors;
  }
  void SetLatest(const v1::Assignment& a) {
    absl::MutexLock l(&mu_);
    latest_ = a;
  }
  v1::Assignment Latest() const {
    absl::MutexLock l(&mu_);
    return latest_;
  }
  // The newest assignment and the incarnation it was given to.
  std::pair<v1::Assignment, uint64_t> LatestAndIncarnation() const {
    absl::MutexLock l(&mu_);
    return {latest_, incarnation_};
  }

 private:
  mutable absl::Mutex mu_;
  uint64_t id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string job_ ABSL_GUARDED_BY(mu_);
  v1::WorkerState state_ ABSL_GUARDED_BY(mu_) = v1::IDLE;
  std::string message_ ABSL_GUARDED_BY(mu_);
  v1::Assignment latest_ ABSL_GUARDED_BY(mu_);
  google::protobuf::RepeatedPtrField<v1::DeclaredTensor> declared_ ABSL_GUARDED_BY(mu_);
};

class Worker {
 public:
  Worker(const std::string& coordinator, rpc::RpcConfig rpc, Device device)
      : rpc_(std::move(rpc)),
        stub_(v1::Coordinator::NewStub(rpc::NewChannel(coordinator, rpc_))),
        shard_channels_(client::ChannelFactory::ForConfig(rpc_)),
        device_(device) {}

  absl::Status Register() {
    const absl::Time give_up = env_->Now() + absl::Seconds(absl::GetFlag(FLAGS_register_timeout_s));
    absl::Duration backoff = absl::Milliseconds(100);
    for (;;) {
      v1::RegisterWorkerRequest req;
      std::string name = absl::GetFlag(FLAGS_name);
      if (name.empty()) {
        char host[256] = {0};
        gethostname(host, sizeof(host) - 1);
        name = absl::StrCat(host, "/", getpid());
      }
      req.set_name(name);
      auto [id, inc] = state_.Identity();
      req.set_worker_id(id);
      req.set_incarnation(inc);
      req.set_has_gpu(device_ == Device::kGpu);
      v1::RegisterWorkerResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() +
                                          absl::Milliseconds(absl::GetFlag(FLAGS_rpc_timeout_ms))));
      rpc::AttachToken(&ctx, rpc_.auth_token);
      const grpc::Status s = stub_->RegisterWorker(&ctx, req, &resp);
      if (s.ok()) {
        state_.SetIdentity(resp.worker_id(), resp.incarnation());
        interval_ = absl::Milliseconds(std::max<uint32_t>(50, resp.heartbeat_interval_ms()));
        LOG(INFO) << "registered as worker " << resp.worker_id() << " incarnation "
                  << resp.incarnation();
        return absl::OkStatus();
      }
      if (env_->Now() > give_up || g_stop) {
        return absl::UnavailableError(absl::StrCat("cannot register with the coordinator: ",
                                                   s.error_message()));
      }
      LOG(WARNING) << "register: " << s.error_message() << "; retrying";
      env_->SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(2));
    }
  }

  // Heartbeats until stopped; re-registers when the coordinator forgot us.
  void HeartbeatLoop() {
    while (!g_stop && !done_) {
      HeartbeatOnce();
      // In slices: a stop must not wait out the interval (see [worker stop]).
      // 100 ms: a stop's last heartbeat waits at most that; shorter slices
      // woke the agent 50 times a second through every job it ran.
      const absl::Time next = env_->Now() + interval_;
      while (!g_stop && !done_ && env_->Now() < next) {
        env_->SleepFor(std::min(absl::Milliseconds(100), next - env_->Now()));
      }
    }
  }

  // One heartbeat: reports the state, takes the assignment.
  void HeartbeatOnce() {
    v1::HeartbeatRequest req;
    state_.Fill(&req, board_);
    req.set_stopping(g_stop);
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() +
                                        absl::Milliseconds(absl::GetFlag(FLAGS_rpc_timeout_ms))));
    rpc::AttachToken(&ctx, rpc_.auth_token);
    const grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
    if (s.ok()) {
      state_.SetLatest(resp.assignment());
      feed_.Set(AssignmentFromProto(resp.assignment()));
    } else if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
               s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      // Removed (e.g. missed heartbeats) or unknown: the old incarnation is
      // dead to the shards, so drop the job and join again, unless exiting.
      feed_.Set(Assignment{});
      if (g_stop) return;
      LOG(WARNING) << "coordinator: " << s.error_message() << "; registering again";
      if (!Register().ok()) LOG(ERROR) << "re-register failed";
    } else {
      LOG(WARNING) << "heartbeat: " << s.error_message();
    }
  }

  // Trains one job end to end; returns when it is done, left or stopped.
  // Trains `a`, which was assigned to incarnation `incarnation`.
  void RunJob(const v1::Assignment& a, uint64_t incarnation) {
    const std::string job = a.job_id();
    state_.SetJob(incarnation, job, v1::TRAINING);
    board_.Set(runtime::Progress{});
    absl::StatusOr<TrainOutcome> outcome = TrainJob(a, incarnation);
    if (!outcome.ok()) {
      LOG(ERROR) << "job " << job << ": " << outcome.status();
      state_.SetJob(incarnation, job, v1::ERROR, std::string(outcome.status().message()));
    } else if (*outcome == TrainOutcome::kDone) {
      state_.SetJob(incarnation, job, v1::DONE);
    } else if (*outcome == TrainOutcome::kLeft) {
      state_.SetJob(incarnation, job, v1::LEFT);
      if (g_stop) return;  // Run() sends the last heartbeat at once: see [worker stop]
    } else {
      state_.SetJob(incarnation, "", v1::IDLE);
    }
    // Wait until the coordinator moves us off this job before taking another,
    // adds us back to it (runtime::RejoinsAfter), or until we are a new
    // incarnation, for which any assignment is a fresh one (see [new
    // incarnation]).
    const Assignment trained = AssignmentFromProto(a);
    while (!g_stop && state_.Identity().second == incarnation) {
      const Assignment now = AssignmentFromProto(state_.Latest());
      if (!runtime::StillOurs(now, job) || runtime::RejoinsAfter(trained, now)) break;
      env_->SleepFor(interval_);
    }
    state_.SetJob(incarnation, "", v1::IDLE);
  }

  // What --metrics_port exports (worker_metrics.h). Thread-safe.
  WorkerSample MetricsSample() const {
    return WorkerSample{state_.Identity().first, std::string(DeviceName(device_)), board_.Get()};
  }

  void Run() {
    std::thread hb = env_->StartThread("gs-heartbeat", [this] { HeartbeatLoop(); });
    while (!g_stop) {
      const auto [a, incarnation] = state_.LatestAndIncarnation();
      if (runtime::Trains(AssignmentFromProto(a))) {
        RunJob(a, incarnation);
      } else {
        env_->SleepFor(absl::Milliseconds(50));
      }
    }
    done_ = true;
    hb.join();
    HeartbeatOnce();  // LEFT or idle, and `stopping`: see [worker stop]
  }

 private:
  absl::StatusOr<TrainOutcome> TrainJob(const v1::Assignment& a, uint64_t incarnation) {
    if (!a.spec().entrypoint().empty()) return RunScriptJob(a, incarnation);
    GS_ASSIGN_OR_RETURN(TrainSetup setup, LoadTrainSetup(a.spec()));
    GS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel(setup.model, device_));
    GS_ASSIGN_OR_RETURN(ShardMap map, ShardMapFromProto(a.shard_map()));
    // The map and the model must describe the same tensors, in order.
    if (map.tensors.size() != model->params().size()) {
      return absl::FailedPreconditionError(absl::StrCat("shard map has ", map.tensors.size(),
                                                        " tensors, the model ",
                                                        model->params().size()));
    }
    for (size_t i = 0; i < map.tensors.size(); ++i) {
      const auto& t = model->params()[i];
      if (map.tensors[i].name != t.name ||
          map.tensors[i].num_elems != static_cast<uint64_t>(t.num_elems)) {
        return absl::FailedPreconditionError(
            absl::StrCat("shard map tensor ", i, " is ", map.tensors[i].name, " [",
                         map.tensors[i].num_elems, "], the model's is ", t.name, " [",
                         t.num_elems, "]"));
      }
    }
    client::ClientOptions opt;
    opt.job_id = a.job_id();
    opt.worker_id = state_.Identity().first;
    opt.incarnation = incarnation;
    opt.epoch = a.epoch();
    opt.seed = setup.seed;
    opt.codec = setup.codec;
    opt.job_token = a.job_token();
    opt.first_bucket_bytes = client::kStepLoopFirstBucketBytes;
    opt.bucket_bytes = client::kStepLoopBucketBytes;
    GS_ASSIGN_OR_RETURN(std::unique_ptr<client::PsClient> ps,
                        client::PsClient::Connect(map, opt, shard_channels_.get()));
    TrainerOptions topt;
    topt.device_encode = absl::GetFlag(FLAGS_device_encode);
    topt.worker_id = opt.worker_id;
    topt.stop = &g_stop;
    topt.loop = runtime::LoopOptionsFor(a.spec());
    if (a.spec().consistency().mode() == v1::BOUNDED) {
      topt.final_pull_slack = a.spec().consistency().staleness();
    }
    Trainer trainer(&setup, model.get(), ps.get(), &feed_, &board_, topt);
    LOG(INFO) << "job " << a.job_id() << ": training " << ModelTypeName(setup.model.type)
              << " on " << DeviceName(device_) << " from clock " << a.join_clock();
    return trainer.Run(a.join_clock());
  }

  // A script job: the user's command, see script_runner.h.
  absl::StatusOr<TrainOutcome> RunScriptJob(const v1::Assignment& a, uint64_t incarnation) {
    ScriptOptions o;
    o.coordinator = CoordinatorAddress();
    o.python_path = absl::GetFlag(FLAGS_python_path);
    if (o.python_path.empty()) o.python_path = FindPythonPackage("/proc/self/exe");
    o.tls = rpc_.tls;
    o.init_deadline = absl::Seconds(absl::GetFlag(FLAGS_script_init_timeout_s));
    o.stop = &g_stop;
    ScriptHooks hooks;
    hooks.latest = [this] { return state_.Latest(); };
    hooks.declare = [this](const auto& tensors) { state_.SetDeclared(tensors); };
    hooks.epochs = [this, job = a.job_id()] { return CommittedEpochs(job); };
    hooks.board = &board_;
    return RunScript(a, state_.Identity().first, incarnation, o, hooks);
  }

  // The job's committed epochs, asked of the coordinator again only when
  // the assignment names a newer epoch than the ones known. Thread-safe.
  std::vector<v1::MembershipEpoch> CommittedEpochs(const std::string& job) {
    const uint64_t newest = state_.Latest().epoch();
    absl::MutexLock l(&epochs_mu_);
    if (epochs_job_ != job) {
      epochs_.clear();
      epochs_job_ = job;
    }
    if (!epochs_.empty() && epochs_.back().epoch() >= newest) return epochs_;
    v1::GetJobRequest req;
    req.set_job_id(job);
    v1::JobStatus status;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() +
                                        absl::Milliseconds(absl::GetFlag(FLAGS_rpc_timeout_ms))));
    rpc::AttachToken(&ctx, rpc_.auth_token);
    if (!stub_->GetJob(&ctx, req, &status).ok()) return epochs_;  // the next Sync asks again
    epochs_.clear();
    for (const auto& e : status.epochs()) {
      if (e.epoch() <= status.committed_epoch()) epochs_.push_back(e);
    }
    return epochs_;
  }

  // The clock of registration retries, heartbeats and the waits between
  // jobs ([env time] in common/env/env.h); gRPC call deadlines are real time.
  Env* const env_ = Env::Default();
  const rpc::RpcConfig rpc_;
  const std::unique_ptr<v1::Coordinator::Stub> stub_;
  const std::unique_ptr<client::ChannelFactory> shard_channels_;
  const Device device_;
  absl::Mutex epochs_mu_;
  std::string epochs_job_ ABSL_GUARDED_BY(epochs_mu_);
  std::vector<v1::MembershipEpoch> epochs_ ABSL_GUARDED_BY(epochs_mu_);
  absl::Duration interval_ = absl::Milliseconds(500);
  WorkerState state_;
  runtime::AssignmentFeed feed_;
  runtime::ProgressBoard board_;
  std::atomic<bool> done_{false};
};

}  // namespace
}  // namespace gradstream

int main(int argc, char** argv) {
  gradstream::ParseFlagsAndInitLogging(argc, argv);  // [log flags]
  gradstream::SkipMutexDeadlockDetection();          // [mutex deadlock detection]
  // Pull answers are large messages too: see [receive memory].
  if (!gradstream::rpc::KeepFreedMemoryForReuse()) {
    LOG(INFO) << "malloc settings for large messages not applied (not glibc malloc)";
  }
  std::signal(SIGTERM, gradstream::OnSignal);
  std::signal(SIGINT, gradstream::OnSignal);
  using gradstream::Device;
  Device device = gradstream::DefaultDevice();
  const std::string dev = absl::GetFlag(FLAGS_device);
  if (dev != "auto") {
    auto d = gradstream::DeviceFromName(dev);
    if (!d.ok()) {
      LOG(ERROR) << "--device: " << d.status();
      return 2;
    }
    device = *d;
  }
  if (absl::GetFlag(FLAGS_device_encode)) {
    if (absl::Status s = gradstream::internal::DeviceEncodeSupported(device); !s.ok()) {
      LOG(ERROR) << "--device_encode: " << s.message();
      return 2;
    }
  }
  absl::StatusOr<gradstream::rpc::RpcConfig> rpc = gradstream::rpc::RpcConfigFromFlags();
  if (!rpc.ok()) {
    LOG(ERROR) << rpc.status();
    return 2;
  }
  const std::string addr = gradstream::CoordinatorAddress();
  LOG(INFO) << "gs_worker: coordinator " << addr << ", device " << gradstream::DeviceName(device)
            << ", encoding on the " << (absl::GetFlag(FLAGS_device_encode) ? "device" : "host")
            << (rpc->tls.enabled() ? " (TLS)" : " (INSECURE: plaintext gRPC; pass --tls_ca)");
  gradstream::Worker worker(addr, *std::move(rpc), device);
  // Serving before registering: a scrape during a long registration shows
  // the process is up (no job series yet).
  gradstream::WorkerMetrics exporter(gradstream::metrics::Registry::Default(),
                                     [&worker] { return worker.MetricsSample(); });
  auto metrics_server = gradstream::metrics::ServeMetrics(gradstream::metrics::Registry::Default(),
                                                          absl::GetFlag(FLAGS_metrics_port),
                                                          absl::GetFlag(FLAGS_metrics_port_file));
  if (!metrics_server.ok()) {
    LOG(ERROR) << "--metrics_port: " << metrics_server.status();
    return 1;
  }
  if (*metrics_server != nullptr) {
    LOG(INFO) << "metrics on :" << (*metrics_server)->port() << "/metrics";
  }
  if (absl::Status s = worker.Register(); !s.ok()) {
    LOG(ERROR) << s;
    return 1;
  }
  // See [worker stop]: the grace period is enforced, not hoped for.
  std::thread watchdog([] {
    while (!gradstream::g_stop) absl::SleepFor(absl::Milliseconds(100));
    absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_stop_grace_s)));
    LOG(ERROR) << "did not stop within --stop_grace_s=" << absl::GetFlag(FLAGS_stop_grace_s)
               << "s of the signal; exiting";
    _exit(1);
  });
  watchdog.detach();
  worker.Run();
  LOG(INFO) << "gs_worker: stopped";
  // Nothing is left to save or report. The teardown after this point (the
  // worker's gRPC channels, then global state) was seen to take up to 12 s
  // (faults_operator_test's SIGTERM case): a stopped worker exits now.
  google::FlushLogFiles(google::GLOG_INFO);
  std::fflush(nullptr);
  std::_Exit(0);
}
