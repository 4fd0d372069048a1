// libgradstream_c: see gradstream_c.h.
#include "worker/capi/gradstream_c.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent.grpc.pb.h"
#include "common/env/env.h"
#include "common/job/codec_policy.h"
#include "common/job/shard_map_proto.h"
#include "common/mutex_mode.h"
#include "common/optim/optimizer_options.h"
#include "common/rpc/rpc.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/grpcpp.h"
#include "worker/capi/internal/session.h"
#include "worker/client/ps_client.h"
#include "worker/client/step_loop.h"
#include "worker/runtime/data_split.h"
#include "worker/runtime/membership.h"
#include "worker/runtime/progress.h"
#include "worker/runtime/session.h"

namespace v1 = gradstream::v1;
using gradstream::client::PsClient;
using gradstream::client::PullHandle;
using gradstream::client::PushHandle;
namespace runtime = gradstream::runtime;

namespace {

thread_local std::string g_error;

using gradstream::client::kMaxRowAskBytes;  // the rows gs_end_clock_rows asks in all

int Fail(const absl::Status& s) {
  g_error = std::string(s.message());
  return s.ok() ? 0 : static_cast<int>(s.code());
}

int Ok() {
  g_error.clear();
  return 0;
}

}  // namespace

// Thread-safe as [C ABI threads] says: `client`, `session` and `sizes` are
// written by gs_declare before any other thread uses the session and only
// read afterwards; everything else is guarded. The step loop, init and
// leave policy and progress are the worker runtime's (worker/runtime/),
// the same the built-in trainer drives.
struct gs_session {
  // The clock of the report cadence, of the open/declare/leave deadlines and
  // of the step loop ([env time] in common/env/env.h); gRPC's own call
  // deadlines are real time. Not owned.
  gradstream::Env* const env = gradstream::Env::Default();
  std::unique_ptr<v1::WorkerAgent::Stub> agent;
  std::unique_ptr<gradstream::client::ChannelFactory> channels;
  std::unique_ptr<PsClient> client;                  // set by gs_declare
  std::unique_ptr<runtime::WorkerSession> session;  // set by gs_declare
  std::vector<uint64_t> sizes;                       // elements per tensor, map order

  absl::Mutex mu;
  v1::SyncResponse latest ABSL_GUARDED_BY(mu);
  // Read off `latest` by each Sync, so that the questions every step asks
  // (active? leaving? the membership at a clock) copy a few fields, not the
  // response with its shard map and job spec.
  runtime::Assignment assignment ABSL_GUARDED_BY(mu);
  std::vector<v1::MembershipEpoch> epochs ABSL_GUARDED_BY(mu);
  // The reporter thread's mailbox (see gs_report).
  std::optional<v1::SyncRequest> report ABSL_GUARDED_BY(mu);
  absl::Status report_error ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  std::thread reporter;

  ~gs_session() {
    {
      absl::MutexLock l(&mu);
      stopping = true;
    }
    if (reporter.joinable()) reporter.join();
    session.reset();  // abandons the pull in flight before the client goes
  }

  absl::Status Sync(const v1::SyncRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::SyncResponse resp;
    const grpc::Status st = agent->Sync(&ctx, req, &resp);
    if (!st.ok()) {
      return absl::UnavailableError(
          absl::StrCat("gradstream: the worker agent does not answer: ", st.error_message()));
    }
    absl::MutexLock l(&mu);
    latest = std::move(resp);
    assignment = runtime::AssignmentFromProto(latest.assignment());
    epochs.assign(latest.epochs().begin(), latest.epochs().end());
    return absl::OkStatus();
  }
  v1::SyncResponse Latest() {
    absl::MutexLock l(&mu);
    return latest;
  }
  runtime::Assignment Assignment() {
    absl::MutexLock l(&mu);
    return assignment;
  }
  bool Active() {
    absl::MutexLock l(&mu);
    return assignment.job_active;
  }
  uint64_t WorkerId() {
    absl::MutexLock l(&mu);
    return latest.worker_id();
  }
  // The membership as it holds at `clock` (the job's committed epochs).
  runtime::Assignment AssignmentAt(uint64_t clock) {
    absl::MutexLock l(&mu);
    return runtime::MembershipAt(assignment, epochs, latest.worker_id(), clock);
  }

  // Every 250 ms: sends the newest report, or an empty request, which also
  // refreshes the membership. A report waits for the next round instead of
  // waking this thread: one wake-up per step cost the training thread's core
  // a context switch, and the agent a call, for progress nobody reads faster.
  void ReportLoop() {
    absl::Time last = absl::InfinitePast();
    for (;;) {
      v1::SyncRequest req;
      {
        absl::MutexLock l(&mu);
        auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stopping; };
        env->AwaitWithDeadline(&mu, absl::Condition(&stop), last + absl::Milliseconds(250));
        if (stopping) return;
        if (report.has_value()) req = *std::exchange(report, std::nullopt);
      }
      last = env->Now();
      const absl::Status st = Sync(req);
      absl::MutexLock l(&mu);
      report_error = st;
    }
  }

  // A progress report: the runtime's meter (before gs_declare, the clock
  // alone) with the accuracy measured at `accuracy_clock` (0: none new).
  v1::SyncRequest Progress(uint64_t clock, float accuracy, uint64_t accuracy_clock,
                           int32_t state) {
    v1::SyncRequest req;
    req.set_state(state == 2 ? v1::SCRIPT_LEFT : v1::SCRIPT_RUNNING);
    runtime::Progress p;
    p.clock = clock;
    if (session != nullptr) {
      if (accuracy_clock > 0) session->meter().SetAccuracy(accuracy, accuracy_clock);
      p = session->ProgressAt(clock);
    }
    *req.mutable_progress() = runtime::ProgressToProto(p);
    return req;
  }

  // One span per tensor over `params`.
  std::vector<absl::Span<float>> Spans(float* const* params) const {
    std::vector<absl::Span<float>> out;
    for (size_t i = 0; i < sizes.size(); ++i) out.emplace_back(params[i], sizes[i]);
    return out;
  }
};

namespace gradstream::capi {
client::PsClient* SessionClient(gs_session* s) { return s->client.get(); }
}  // namespace gradstream::capi

extern "C" {

const char* gs_last_error(void) { return g_error.c_str(); }

gs_session* gs_open(const char* agent, int64_t timeout_ms) {
  gradstream::SkipMutexDeadlockDetection();  // [mutex deadlock detection]
  auto s = std::make_unique<gs_session>();
  grpc::ChannelArguments args;
  s->agent = v1::WorkerAgent::NewStub(
      grpc::CreateCustomChannel(agent, grpc::InsecureChannelCredentials(), args));
  // TLS to the shards as gs_worker's: it passes its files in the
  // environment (GRADSTREAM_TLS_*), which BuildConfig falls back to.
  absl::StatusOr<gradstream::rpc::RpcConfig> rpc = gradstream::rpc::BuildConfig({});
  if (!rpc.ok()) {
    Fail(rpc.status());
    return nullptr;
  }
  s->channels = gradstream::client::ChannelFactory::ForConfig(*rpc);
  const absl::Time give_up = s->env->Now() + absl::Milliseconds(timeout_ms);
  v1::SyncRequest req;
  req.set_state(v1::SCRIPT_RUNNING);
  for (;;) {
    absl::Status st = s->Sync(req);
    if (st.ok() && s->Active()) break;
    if (s->env->Now() > give_up) {
      Fail(st.ok() ? absl::DeadlineExceededError("gradstream: this worker has no active job")
                   : st);
      return nullptr;
    }
    s->env->SleepFor(absl::Milliseconds(100));
  }
  gs_session* raw = s.release();
  raw->reporter =
      gradstream::StartHelperThread(raw->env, "gs-report", [raw] { raw->ReportLoop(); });
  Ok();
  return raw;
}

int gs_declare(gs_session* s, int32_t num_tensors, const char* const* names, const int32_t* ndims,
               const int64_t* dims, const float* table_std, int64_t timeout_ms) {
  if (s->client != nullptr) {
    return Fail(absl::FailedPreconditionError("gradstream: declared twice"));
  }
  v1::SyncRequest req;
  req.set_state(v1::SCRIPT_RUNNING);
  size_t d = 0;
  for (int32_t i = 0; i < num_tensors; ++i) {
    v1::DeclaredTensor* t = req.add_tensors();
    t->set_name(names[i]);
    for (int32_t k = 0; k < ndims[i]; ++k) t->add_shape(dims[d++]);
    if (table_std != nullptr && table_std[i] >= 0) {
      t->set_table(true);
      t->set_init_std(table_std[i]);
    }
  }
  const absl::Time give_up = s->env->Now() + absl::Milliseconds(timeout_ms);
  for (;;) {
    if (absl::Status st = s->Sync(req); !st.ok()) return Fail(st);
    if (!s->Active()) return Fail(absl::CancelledError("gradstream: the job is no longer active"));
    if (s->Latest().assignment().shard_map().shards_size() > 0) break;
    if (s->env->Now() > give_up) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          "gradstream: no shard map within ", timeout_ms,
          " ms (rank 0 declares the tensors; is it running?)")));
    }
    s->env->SleepFor(absl::Milliseconds(50));
  }
  const v1::SyncResponse r = s->Latest();
  const v1::Assignment& a = r.assignment();
  // The job's tensors are rank 0's declaration: this script's must match.
  const auto& declared = a.spec().model().tensors();
  auto shape_str = [](const v1::DeclaredTensor& t) {
    return absl::StrCat("[", absl::StrJoin(t.shape(), ", "), "]");
  };
  if (declared.size() != req.tensors_size()) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "gradstream: this script declares ", req.tensors_size(), " tensors, the job's (rank 0's) ",
        declared.size(), ": every rank must run the same model")));
  }
  for (int i = 0; i < declared.size(); ++i) {
    const v1::DeclaredTensor& mine = req.tensors(i);
    const v1::DeclaredTensor& job = declared[i];
    if (mine.name() != job.name() ||
        !std::equal(mine.shape().begin(), mine.shape().end(), job.shape().begin(),
                    job.shape().end()) ||
        mine.table() != job.table()) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          "gradstream: tensor ", i, " is ", mine.table() ? "table " : "", mine.name(), " ",
          shape_str(mine), " in this script but ", job.table() ? "table " : "", job.name(), " ",
          shape_str(job), " in the job (declared by rank 0): every rank must run the same model")));
    }
  }
  absl::StatusOr<gradstream::ShardMap> map = gradstream::ShardMapFromProto(a.shard_map());
  if (!map.ok()) return Fail(map.status());
  gradstream::client::ClientOptions opt;
  opt.job_id = a.job_id();
  opt.worker_id = r.worker_id();
  opt.incarnation = r.incarnation();
  opt.epoch = a.epoch();
  opt.seed = a.spec().seed();
  opt.codec = gradstream::CodecPolicyFromProto(a.spec().codec());
  opt.job_token = a.job_token();
  opt.first_bucket_bytes = gradstream::client::kStepLoopFirstBucketBytes;
  opt.bucket_bytes = gradstream::client::kStepLoopBucketBytes;
  if (const char* env = std::getenv("GRADSTREAM_BUCKET_BYTES"); env != nullptr && *env != 0) {
    std::vector<std::string> parts = absl::StrSplit(env, ',');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &opt.first_bucket_bytes) ||
        !absl::SimpleAtoi(parts[1], &opt.bucket_bytes)) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "gradstream: GRADSTREAM_BUCKET_BYTES='", env, "': want FIRST,REST (bytes)")));
    }
  }
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Connect(*map, opt, s->channels.get());
  if (!client.ok()) return Fail(client.status());
  s->client = *std::move(client);
  // A table is never whole on a worker: its span in every pull is empty.
  for (const auto& t : map->tensors) s->sizes.push_back(t.is_table() ? 0 : t.num_elems);
  runtime::SessionOptions so;
  so.loop = runtime::LoopOptionsFor(a.spec());
  so.loop.env = s->env;
  // A script's model is built by each process under torch's own seed.
  so.initial_values = runtime::InitialValues::kRankZeroOnly;
  so.check = [s]() -> absl::Status {
    if (!s->Active()) return absl::CancelledError("gradstream: the job is no longer active");
    return absl::OkStatus();
  };
  // A leave's clock is not pulled (gs_end_clock_rows asks no next pull then).
  so.will_pull = [s](uint64_t clock) {
    const runtime::Assignment now = s->Assignment();
    return now.job_active && !runtime::LeavesAt(now, clock);
  };
  s->session = std::make_unique<runtime::WorkerSession>(s->client.get(), std::move(so));
  return Ok();
}

namespace {
void FillMembership(const runtime::Assignment& a, uint64_t worker_id, gs_membership* out) {
  *out = gs_membership{};
  out->active = a.job_active ? 1 : 0;
  out->rank = a.rank;
  out->world_size = a.world_size;
  out->epoch = a.epoch;
  out->epoch_clock = a.epoch_clock;
  out->join_clock = a.join_clock;
  out->leave = a.leave ? 1 : 0;
  out->leave_clock = a.leave_clock;
  out->worker_id = worker_id;
}
}  // namespace

int gs_membership_get(gs_session* s, gs_membership* out) {
  FillMembership(s->Assignment(), s->WorkerId(), out);
  return Ok();
}

int gs_membership_at(gs_session* s, uint64_t clock, gs_membership* out) {
  FillMembership(s->AssignmentAt(clock), s->WorkerId(), out);
  return Ok();
}

int gs_job_spec(gs_session* s, char* buf, int64_t size, int64_t* len) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(s->Latest().assignment().spec(), &text);
  *len = static_cast<int64_t>(text.size());
  if (size > 0) {
    const size_t n = std::min<size_t>(text.size(), static_cast<size_t>(size - 1));
    std::copy(text.begin(), text.begin() + n, buf);
    buf[n] = '\0';
  }
  return Ok();
}

namespace {

// A test-set accuracy is a fraction: 85 for 85% would show as 8500%.
absl::Status CheckAccuracy(float accuracy, uint64_t accuracy_clock) {
  if (accuracy_clock == 0 || (accuracy >= 0.0f && accuracy <= 1.0f)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "accuracy ", accuracy, " is outside [0, 1]: report a fraction (0.85 for 85%)"));
}

}  // namespace

int gs_sync(gs_session* s, uint64_t clock, float accuracy, uint64_t accuracy_clock,
            int32_t state) {
  if (absl::Status st = CheckAccuracy(accuracy, accuracy_clock); !st.ok()) return Fail(st);
  if (absl::Status st = s->Sync(s->Progress(clock, accuracy, accuracy_clock, state)); !st.ok()) {
    return Fail(st);
  }
  return Ok();
}

int gs_report(gs_session* s, uint64_t clock, float accuracy, uint64_t accuracy_clock) {
  if (absl::Status st = CheckAccuracy(accuracy, accuracy_clock); !st.ok()) return Fail(st);
  v1::SyncRequest req = s->Progress(clock, accuracy, accuracy_clock, 1);
  absl::MutexLock l(&s->mu);
  s->report = std::move(req);
  return Fail(s->report_error);
}

int gs_record_step(gs_session* s, double loss, uint64_t samples) {
  if (s->session == nullptr) {
    return Fail(absl::FailedPreconditionError("gradstream: not declared"));
  }
  s->session->meter().AddStep(std::isnan(loss) ? std::nullopt : std::optional<double>(loss),
                              samples);
  return Ok();
}

int gs_set_encode_path(gs_session* s, const char* path) {
  if (s->session == nullptr) {
    return Fail(absl::FailedPreconditionError("gradstream: not declared"));
  }
  s->session->meter().SetEncodePath(path);
  return Ok();
}

int gs_init_params(gs_session* s, const float* const* params, int64_t timeout_ms) {
  if (s->session == nullptr) {
    return Fail(absl::FailedPreconditionError("gradstream: not declared"));
  }
  std::vector<absl::Span<const float>> spans;
  for (size_t i = 0; i < s->sizes.size(); ++i) spans.emplace_back(params[i], s->sizes[i]);
  const uint64_t start = s->Assignment().join_clock;
  return Fail(s->session->Init(s->AssignmentAt(start).rank, start, spans,
                               absl::Milliseconds(timeout_ms)));
}

int gs_push(gs_session* s, uint32_t tensor, const float* grad, uint64_t num_elems, uint64_t clock) {
  if (s->session == nullptr) {
    return Fail(absl::FailedPreconditionError("gradstream: not declared"));
  }
  return Fail(s->session->loop().Push(tensor, absl::MakeConstSpan(grad, num_elems), clock));
}

// A row pull. An ask of gs_end_clock_rows shares the clock's pull: its rows
// land in `rows` (held by that pull) and are copied into `out` by
// gs_rows_wait, so dropping it never has to stop the pull.
struct gs_rows {
  PullHandle handle;
  uint32_t tensor = 0;
  std::shared_ptr<std::vector<float>> rows;  // null: the rows land in the caller's `out`
  float* out = nullptr;
};

int gs_pull_rows_start(gs_session* s, uint32_t tensor, const uint64_t* ids, int64_t n,
                       uint64_t clock, float* out, gs_rows** pull) {
  *pull = nullptr;
  if (s->session == nullptr) {
    return Fail(absl::FailedPreconditionError("gradstream: not declared"));
  }
  if (n < 0) return Fail(absl::InvalidArgumentError("gs_pull_rows: negative row count"));
  const auto& tensors = s->client->shard_map().tensors;
  const uint64_t dim = tensor < tensors.size() ? tensors[tensor].table_dim : 0;
  *pull = new gs_rows{s->client->PullRows(tensor, absl::MakeConstSpan(ids, n), clock,
                                          absl::MakeSpan(out, static_cast<size_t>(n) * dim))};
  return Ok();
}

int gs_rows_wait(gs_session* s, gs_rows* pull, int64_t timeout_ms) {
  std::unique_ptr<gs_rows> owned(pull);
  if (owned->rows != nullptr) {
    const uint32_t table = owned->tensor;
    absl::Status st = PsClient::WaitTensors(owned->handle, absl::MakeConstSpan(&table, 1),
                                            absl::Milliseconds(timeout_ms), s->env);
    if (st.ok()) std::copy(owned->rows->begin(), owned->rows->end(), owned->out);
    return Fail(st);
  }
  absl::Status st = PsClient::Wait(owned->handle, absl::Milliseconds(timeout_ms), s->env);
  if (!st.ok()) PsClient::Abandon(owned->handle);  // nothing is written into `out` after this
  return Fail(st);
}

void gs_rows_drop(gs_rows* pull) {
  // An ask of gs_end_clock_rows writes into no memory of the caller's.
  if (pull != nullptr && pull->rows == nullptr) PsClient::Abandon(pull->handle);
  delete pull;
}

int gs_pull_rows(gs_session* s, uint32_t tensor, const uint64_t* ids, int64_t n, uint64_t clock,
                 float* out, int64_t timeout_ms) {
  gs_rows* pull = nullptr;
  if (int rc = gs_pull_rows_start(s, tensor, ids, n, clock, out, &pull); rc != 0) return rc;
  return gs_rows_wait(s, pull, timeout_ms);
}

int gs_push_rows(gs_session* s, uint32_t tensor, const uint64_t* ids, int64_t n,
                 const float* grads, uint64_t clock) {
  if (s->session == nullptr) {
    return Fail(absl::FailedPreconditionError("gradstream: not declared"));
  }
  if (n < 0) return Fail(absl::InvalidArgumentError("gs_push_rows: negative row count"));
  const auto& tensors = s->client->shard_map().tensors;
  const uint64_t dim = tensor < tensors.size() ? tensors[tensor].table_dim : 0;
  PushHandle h = s->client->PushRows(tensor, absl::MakeConstSpan(ids, n),
                                     absl::MakeConstSpan(grads, static_cast<size_t>(n) * dim),
                                     clock);
  // A refused call fails now; the acknowledgement is gs_end_clock's.
  if (absl::Status st = PsClient::Wait(h, absl::ZeroDuration(), s->env);
      !st.ok() && !absl::IsDeadlineExceeded(st)) {
    return Fail(st);
  }
  s->session->loop().AddPush(tensor, std::move(h));
  return Ok();
}

int gs_end_clock(gs_session* s, uint64_t clock, float* const* next, int32_t* leave) {
  return gs_end_clock_rows(s, clock, next, leave, 0, nullptr, nullptr, nullptr, nullptr, nullptr);
}

int gs_end_clock_rows(gs_session* s, uint64_t clock, float* const* next, int32_t* leave, int32_t n,
                      const uint32_t* tensors, const uint64_t* const* ids, const int64_t* counts,
                      float* const* outs, gs_rows** pulls) {
  if (n < 0 || (n > 0 && (tensors == nullptr || ids == nullptr || counts == nullptr ||
                          outs == nullptr || pulls == nullptr))) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "gs_end_clock_rows: ", n, " asks need their tensors, ids, counts, outs and pulls: "
        "the clock was not ended")));
  }
  for (int32_t k = 0; k < n; ++k) pulls[k] = nullptr;
  if (s->session == nullptr) {
    return Fail(absl::FailedPreconditionError("gradstream: not declared"));
  }
  const bool leaving = runtime::LeavesAt(s->Assignment(), clock + 1);
  if (leave != nullptr) *leave = leaving ? 1 : 0;
  std::optional<std::vector<absl::Span<float>>> spans;
  if (next != nullptr && !leaving) spans = s->Spans(next);
  // Only asks that cannot fail the pull they ride with: the rest are the
  // caller's to ask (and to hear refused) on their own.
  std::vector<PsClient::RowsAsk> asks;
  std::vector<int32_t> asked;  // asks[i] is ask asked[i]
  if (spans.has_value()) {
    const auto& map = s->client->shard_map().tensors;
    std::vector<bool> seen(map.size(), false);
    uint64_t bytes = 0;
    for (int32_t k = 0; k < n; ++k) {
      if (tensors[k] >= map.size() || !map[tensors[k]].is_table() || seen[tensors[k]] ||
          counts[k] < 0 || (counts[k] > 0 && ids[k] == nullptr) || outs[k] == nullptr) {
        continue;
      }
      const auto& t = map[tensors[k]];
      const uint64_t ask_bytes = uint64_t(counts[k]) * t.table_dim * sizeof(float);
      if (bytes + ask_bytes > kMaxRowAskBytes) continue;
      const absl::Span<const uint64_t> row_ids(ids[k], counts[k]);
      if (std::any_of(row_ids.begin(), row_ids.end(),
                      [&](uint64_t id) { return id >= t.table_rows; })) {
        continue;
      }
      seen[tensors[k]] = true;
      bytes += ask_bytes;
      auto rows = std::make_shared<std::vector<float>>(ask_bytes / sizeof(float));
      asks.push_back(PsClient::RowsAsk{t.index, {row_ids.begin(), row_ids.end()},
                                       absl::MakeSpan(*rows), rows});
      pulls[k] = new gs_rows{PullHandle(), t.index, std::move(rows), outs[k]};
      asked.push_back(k);
    }
  }
  PullHandle rows_pull;
  absl::Status st = s->session->loop().EndClock(clock, std::move(spans), std::move(asks),
                                                &rows_pull);
  for (int32_t k : asked) {
    if (rows_pull.valid()) {
      pulls[k]->handle = rows_pull;
    } else {  // the pull of clock + 1 was in flight already: asked without them
      delete pulls[k];
      pulls[k] = nullptr;
    }
  }
  return Fail(st);
}

int gs_pull_start(gs_session* s, uint64_t clock, float* const* params) {
  if (s->session == nullptr) {
    return Fail(absl::FailedPreconditionError("gradstream: not declared"));
  }
  s->session->loop().StartPull(clock, s->Spans(params));
  return Ok();
}

int gs_wait_tensors(gs_session* s, const uint32_t* tensors, int32_t n) {
  if (s->session == nullptr) {
    return Fail(absl::FailedPreconditionError("gradstream: not declared"));
  }
  return Fail(s->session->loop().WaitTensors(absl::MakeConstSpan(tensors, n > 0 ? n : 0)));
}

int gs_tensors_ready(gs_session* s, const uint32_t* tensors, int32_t n) {
  if (s->session == nullptr) return 0;
  return s->session->loop().TensorsReady(absl::MakeConstSpan(tensors, n > 0 ? n : 0)) ? 1 : 0;
}

int gs_abandon_pull(gs_session* s) {
  if (s->session != nullptr) s->session->loop().AbandonPull();
  return Ok();
}

int gs_pull(gs_session* s, uint64_t clock, float* const* params) {
  if (int rc = gs_pull_start(s, clock, params); rc != 0) return rc;
  return gs_wait_tensors(s, nullptr, 0);
}

int gs_wait_pushes(gs_session* s, int64_t timeout_ms) {
  if (s->session == nullptr) return Ok();
  return Fail(s->session->loop().WaitPushes(absl::Milliseconds(timeout_ms)));
}

int gs_leave(gs_session* s, int64_t timeout_ms) {
  if (s->session == nullptr) return Ok();
  return Fail(s->session->Leave(absl::Milliseconds(timeout_ms)));
}

int gs_stats_get(gs_session* s, gs_stats* out) {
  *out = gs_stats{};
  if (s->client == nullptr) return Ok();
  const gradstream::client::ClientStats cs = s->client->stats();
  out->bytes_pushed = cs.bytes_pushed;
  out->fp32_bytes_pushed = cs.fp32_bytes_pushed;
  out->chunks_pushed = cs.chunks_pushed;
  out->bytes_pulled = cs.bytes_pulled;
  out->reconnects = cs.reconnects;
  out->fp32_bytes_pulled = cs.fp32_bytes_pulled;
  out->bytes_pulled_discarded = cs.bytes_pulled_discarded;
  out->push_messages = cs.push_messages;
  out->pull_messages = cs.pull_messages;
  if (s->session != nullptr) out->encode_wakeups = s->session->loop().encode_wakeups();
  return Ok();
}

int gs_split_pass(const int64_t* perm, int64_t n, uint32_t rank, uint32_t world_size,
                  int64_t batch_size, int64_t global_batch_size, int64_t* out, int64_t* sizes,
                  int64_t* num_batches) {
  *num_batches = 0;
  if (n < 0) return Fail(absl::InvalidArgumentError("gradstream: negative pass length"));
  absl::StatusOr<std::vector<std::vector<int64_t>>> batches = runtime::SplitPass(
      absl::MakeConstSpan(perm, static_cast<size_t>(n)), rank, world_size,
      runtime::BatchSize{.per_worker = batch_size, .global = global_batch_size});
  if (!batches.ok()) return Fail(batches.status());
  int64_t k = 0;
  for (const std::vector<int64_t>& b : *batches) {
    std::copy(b.begin(), b.end(), out + k);
    k += static_cast<int64_t>(b.size());
    sizes[(*num_batches)++] = static_cast<int64_t>(b.size());
  }
  return Ok();
}

int gs_optimizer_defaults_get(const char* type, gs_optimizer_defaults* out) {
  *out = gs_optimizer_defaults{};
  absl::StatusOr<gradstream::OptimizerType> t =
      gradstream::OptimizerTypeFromName(type == nullptr ? "" : type);
  if (!t.ok()) return Fail(t.status());
  const gradstream::OptimizerOptions d = gradstream::DefaultOptimizerOptions(*t);
  out->type = static_cast<int32_t>(d.type);
  out->learning_rate = d.learning_rate;
  out->momentum = d.momentum;
  out->epsilon = d.epsilon;
  out->initial_accumulator = d.initial_accumulator;
  out->beta1 = d.beta1;
  out->beta2 = d.beta2;
  out->weight_decay = d.weight_decay;
  return Ok();
}

void gs_close(gs_session* s) { delete s; }  // NULL: delete is a no-op

}  // extern "C"
