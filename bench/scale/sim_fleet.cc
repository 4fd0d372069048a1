// Simulated workers; see sim_fleet.h.
#include "bench/scale/sim_fleet.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/job/job_state.h"
#include "common/job/shard_map_proto.h"
#include "common/rpc/rpc.h"
#include "grpcpp/grpcpp.h"
#include "worker/client/ps_client.h"

namespace gradstream::bench {

namespace v1 = gradstream::v1;

namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

void Samples::Add(double ms) {
  absl::MutexLock lock(&mu_);
  ms_.push_back(ms);
}

void Samples::Clear() {
  absl::MutexLock lock(&mu_);
  ms_.clear();
}

size_t Samples::count() const {
  absl::MutexLock lock(&mu_);
  return ms_.size();
}

double Samples::Percentile(double p) const {
  std::vector<double> v;
  {
    absl::MutexLock lock(&mu_);
    v = ms_;
  }
  if (v.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100 * static_cast<double>(v.size())));
  const size_t k = std::min(v.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// One simulated worker. Only its heartbeat thread changes it, except
// `assignment` (read by StartPushers) and `clock` (written by its pusher).
struct SimFleet::Worker {
  int index = 0;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  uint64_t id = 0;
  uint64_t incarnation = 0;
  std::string job;  // the job it reports for; "" when idle
  v1::WorkerState state = v1::IDLE;
  absl::Time next_due;
  std::atomic<uint64_t> clock{0};  // progress reported in heartbeats
  absl::Mutex mu;
  // The latest assignment and the identity it was given to.
  v1::Assignment assignment ABSL_GUARDED_BY(mu);
  uint64_t assigned_id ABSL_GUARDED_BY(mu) = 0;
  uint64_t assigned_incarnation ABSL_GUARDED_BY(mu) = 0;
};

// Pushes every tensor of one job's model per clock until stopped or until a
// push fails (e.g. the job was cancelled and its shards dropped it).
class SimFleet::Pusher {
 public:
  Pusher(SimFleet* fleet, Worker* worker, v1::Assignment a, uint64_t worker_id,
         uint64_t incarnation)
      : fleet_(fleet), worker_(worker), a_(std::move(a)), worker_id_(worker_id),
        incarnation_(incarnation), thread_([this] { Run(); }) {}
  ~Pusher() {
    stop_.store(true);
    thread_.join();
  }

 private:
  void Run() {
    absl::StatusOr<ShardMap> map = ShardMapFromProto(a_.shard_map());
    if (!map.ok()) {
      fleet_->push_errors_.fetch_add(1);
      return;
    }
    client::ClientOptions opt;
    opt.job_id = a_.job_id();
    opt.worker_id = worker_id_;
    opt.incarnation = incarnation_;
    opt.epoch = a_.epoch();
    opt.seed = worker_id_;
    opt.job_token = a_.job_token();
    opt.connect_deadline = absl::Seconds(10);
    opt.reconnect.max_attempts = 3;
    absl::StatusOr<std::unique_ptr<client::PsClient>> c = client::PsClient::Connect(*map, opt);
    if (!c.ok()) {
      fleet_->push_errors_.fetch_add(1);
      return;
    }
    std::vector<std::vector<float>> grads;
    for (const auto& t : map->tensors) grads.emplace_back(t.num_elems, 1e-3f);
    for (uint64_t clock = a_.join_clock(); !stop_.load(); ++clock) {
      const absl::Time start = absl::Now();
      std::vector<client::PushHandle> handles;
      for (uint32_t t = 0; t < grads.size(); ++t) handles.push_back((*c)->Push(t, grads[t], clock));
      // Waited in tensor order: a sample is when that push was seen acknowledged.
      for (const auto& h : handles) {
        if (!client::PsClient::Wait(h, absl::Seconds(10)).ok()) {
          fleet_->push_errors_.fetch_add(1);
          return;
        }
        fleet_->push_ms_.Add(Ms(absl::Now() - start));
        fleet_->pushes_.fetch_add(1);
      }
      if (!(*c)->AdvanceClock(clock + 1).ok()) return;
      worker_->clock.store(clock + 1);
    }
  }

  SimFleet* const fleet_;
  Worker* const worker_;
  const v1::Assignment a_;
  const uint64_t worker_id_;
  const uint64_t incarnation_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once the rest is built
};

SimFleet::SimFleet(FleetOptions options) : options_(std::move(options)) {
  rpc::RpcConfig config;
  for (int i = 0; i < options_.workers; ++i) {
    auto w = std::make_unique<Worker>();
    w->index = i;
    // One TCP connection per worker, as N worker processes would have.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    w->stub = v1::Coordinator::NewStub(rpc::NewChannel(options_.coordinator, config, args));
    workers_.push_back(std::move(w));
  }
}

SimFleet::~SimFleet() {
  StopPushers();
  stop_.store(true);
  for (auto& t : threads_) t.join();
}

absl::Status SimFleet::Start(absl::Duration deadline) {
  const int threads = std::max(1, std::min(options_.threads, options_.workers));
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t] { Serve(t); });
  const absl::Time until = absl::Now() + deadline;
  while (registered_.load() < options_.workers) {
    if (absl::Now() > until) {
      return absl::DeadlineExceededError(absl::StrCat(registered_.load(), " of ",
                                                      options_.workers, " workers registered"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

absl::Status SimFleet::Register(Worker& w) {
  v1::RegisterWorkerRequest req;
  req.set_name(absl::StrCat("sim-", w.index));
  req.set_worker_id(w.id);
  req.set_incarnation(w.incarnation);
  v1::RegisterWorkerResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_deadline));
  const grpc::Status s = w.stub->RegisterWorker(&ctx, req, &resp);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  w.id = resp.worker_id();
  w.incarnation = resp.incarnation();
  w.job.clear();
  w.state = v1::IDLE;
  w.clock.store(0);
  interval_ms_.store(resp.heartbeat_interval_ms());
  return absl::OkStatus();
}

void SimFleet::Beat(Worker& w) {
  v1::HeartbeatRequest req;
  req.set_worker_id(w.id);
  req.set_incarnation(w.incarnation);
  req.set_job_id(w.job);
  req.set_state(w.state);
  req.mutable_progress()->set_clock(w.clock.load());
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_deadline));
  const absl::Time start = absl::Now();
  const grpc::Status s = w.stub->Heartbeat(&ctx, req, &resp);
  heartbeat_ms_.Add(Ms(absl::Now() - start));
  heartbeats_.fetch_add(1);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
      s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    // Removed (e.g. it missed heartbeats): join again, as gs_worker does.
    reregistrations_.fetch_add(1);
    if (!Register(w).ok()) heartbeat_errors_.fetch_add(1);
    return;
  }
  if (!s.ok()) {
    heartbeat_errors_.fetch_add(1);
    return;
  }
  const v1::Assignment& a = resp.assignment();
  {
    absl::MutexLock lock(&w.mu);
    w.assignment = a;
    w.assigned_id = w.id;
    w.assigned_incarnation = w.incarnation;
  }
  if (a.job_id().empty() || IsTerminal(a.job_state())) {
    // No job, or it ended: the coordinator has released us with this reply.
    w.job.clear();
    w.state = v1::IDLE;
    w.clock.store(0);
  } else if (a.leave()) {
    // Scaled down: a simulated member has no clock to finish, so it leaves
    // at its leave clock at once.
    w.job = a.job_id();
    w.state = v1::LEFT;
    w.clock.store(std::max(w.clock.load(), a.leave_clock()));
  } else {
    if (w.job != a.job_id()) w.clock.store(a.join_clock());
    w.job = a.job_id();
    w.state = v1::TRAINING;
  }
}

void SimFleet::Serve(int thread) {
  const int threads = std::max(1, std::min(options_.threads, options_.workers));
  std::vector<Worker*> mine;
  for (int i = thread; i < options_.workers; i += threads) mine.push_back(workers_[i].get());
  for (Worker* w : mine) {
    while (!stop_.load() && !Register(*w).ok()) absl::SleepFor(absl::Milliseconds(100));
    registered_.fetch_add(1);
  }
  // Spread the first beats over one interval, as workers started at random
  // times would be.
  const absl::Duration interval = absl::Milliseconds(interval_ms_.load());
  const absl::Time now = absl::Now();
  for (Worker* w : mine) w->next_due = now + interval * w->index / options_.workers;
  while (!stop_.load()) {
    for (Worker* w : mine) {
      while (!stop_.load() && absl::Now() < w->next_due) {
        absl::SleepFor(std::min(w->next_due - absl::Now(), absl::Milliseconds(50)));
      }
      if (stop_.load()) return;
      Beat(*w);
      w->next_due += absl::Milliseconds(interval_ms_.load());
      // A thread that fell behind does not fire a burst to catch up.
      w->next_due = std::max(w->next_due, absl::Now());
    }
  }
}

int SimFleet::StartPushers(int max_pushers, int per_job) {
  absl::MutexLock lock(&pushers_mu_);
  int started = 0;
  for (auto& w : workers_) {
    if (started >= max_pushers) break;
    v1::Assignment a;
    uint64_t id = 0, incarnation = 0;
    {
      absl::MutexLock wl(&w->mu);
      a = w->assignment;
      id = w->assigned_id;
      incarnation = w->assigned_incarnation;
    }
    if (a.job_id().empty() || a.job_state() != v1::RUNNING || a.leave() ||
        a.rank() >= static_cast<uint32_t>(per_job) || a.shard_map().shards().empty()) {
      continue;
    }
    // A pusher of an incarnation the coordinator has since replaced is
    // refused by the shards and counts a push error.
    pushers_.push_back(std::make_unique<Pusher>(this, w.get(), std::move(a), id, incarnation));
    ++started;
  }
  return started;
}

void SimFleet::StopPushers() {
  std::vector<std::unique_ptr<Pusher>> stopping;
  {
    absl::MutexLock lock(&pushers_mu_);
    stopping.swap(pushers_);
  }
  stopping.clear();  // each destructor stops and joins its thread
}

FleetCounters SimFleet::counters() const {
  FleetCounters c;
  c.heartbeats = heartbeats_.load();
  c.heartbeat_errors = heartbeat_errors_.load();
  c.reregistrations = reregistrations_.load();
  c.pushes = pushes_.load();
  c.push_errors = push_errors_.load();
  return c;
}

void SimFleet::ResetWindow() {
  heartbeat_ms_.Clear();
  push_ms_.Clear();
  for (auto* c : {&heartbeats_, &heartbeat_errors_, &reregistrations_, &pushes_,
                  &push_errors_}) {
    c->store(0);
  }
}

}  // namespace gradstream::bench
