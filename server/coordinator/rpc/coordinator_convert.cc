// See coordinator_convert.h.
#include "server/coordinator/rpc/coordinator_convert.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job/precision_proto.h"
#include "common/job/shard_map_proto.h"

namespace gradstream::coordinator {

namespace v1 = gradstream::v1;

JobSpec JobSpecFromProto(const v1::JobSpec& proto) {
  JobSpec spec;
  spec.name = proto.name();
  spec.model_type = proto.model().type();
  spec.model_tensors = static_cast<uint32_t>(proto.model().tensors_size());
  spec.steps = proto.steps();
  spec.batch_size = proto.batch_size();
  spec.consistency = static_cast<ConsistencyMode>(proto.consistency().mode());
  spec.staleness = proto.consistency().staleness();
  spec.workers = proto.workers();
  spec.shards = proto.shards();
  spec.entrypoint = proto.entrypoint();
  spec.workers_min = proto.workers_min();
  spec.min_workers_timeout_s = proto.min_workers_timeout_s();
  spec.wire = proto.SerializeAsString();
  return spec;
}

v1::JobSpec JobSpecToProto(const JobSpec& spec) {
  v1::JobSpec proto;
  // The wire is what JobSpecFromProto serialized: it parses.
  (void)proto.ParseFromString(spec.wire);
  return proto;
}

DeclaredTensor DeclaredTensorFromProto(const v1::DeclaredTensor& proto) {
  return DeclaredTensor{proto.name(), {proto.shape().begin(), proto.shape().end()},
                        proto.table(), proto.init_std()};
}

v1::DeclaredTensor DeclaredTensorToProto(const DeclaredTensor& tensor) {
  v1::DeclaredTensor proto;
  proto.set_name(tensor.name);
  for (int64_t d : tensor.shape) proto.add_shape(d);
  proto.set_table(tensor.table);
  proto.set_init_std(tensor.init_std);
  return proto;
}

JobProgress JobProgressFromProto(const v1::JobProgress& proto) {
  JobProgress p;
  p.clock = proto.clock();
  p.max_clock = proto.max_clock();
  if (proto.has_loss()) p.loss = proto.loss();
  p.accuracy = proto.accuracy();
  p.accuracy_clock = proto.accuracy_clock();
  if (proto.has_samples_per_sec()) p.samples_per_sec = proto.samples_per_sec();
  if (proto.has_bytes_pushed()) p.bytes_pushed = proto.bytes_pushed();
  if (proto.has_fp32_bytes_pushed()) p.fp32_bytes_pushed = proto.fp32_bytes_pushed();
  if (proto.has_compression_ratio()) p.compression_ratio = proto.compression_ratio();
  p.max_staleness = proto.max_staleness();
  p.residual_norm = proto.residual_norm();
  if (proto.has_bytes_pulled()) p.bytes_pulled = proto.bytes_pulled();
  if (proto.has_fp32_bytes_pulled()) p.fp32_bytes_pulled = proto.fp32_bytes_pulled();
  p.bytes_pulled_discarded = proto.bytes_pulled_discarded();
  p.stalled_seconds = proto.stalled_seconds();
  p.checkpoint_failures = proto.checkpoint_failures();
  p.checkpoint_error = proto.checkpoint_error();
  p.samples = proto.samples();
  if (proto.has_eta_seconds()) p.eta_seconds = proto.eta_seconds();
  return p;
}

v1::JobProgress JobProgressToProto(const JobProgress& p) {
  v1::JobProgress proto;
  proto.set_clock(p.clock);
  proto.set_max_clock(p.max_clock);
  if (p.loss) proto.set_loss(*p.loss);
  proto.set_accuracy(p.accuracy);
  proto.set_accuracy_clock(p.accuracy_clock);
  if (p.samples_per_sec) proto.set_samples_per_sec(*p.samples_per_sec);
  if (p.bytes_pushed) proto.set_bytes_pushed(*p.bytes_pushed);
  if (p.fp32_bytes_pushed) proto.set_fp32_bytes_pushed(*p.fp32_bytes_pushed);
  if (p.compression_ratio) proto.set_compression_ratio(*p.compression_ratio);
  proto.set_max_staleness(p.max_staleness);
  proto.set_residual_norm(p.residual_norm);
  if (p.bytes_pulled) proto.set_bytes_pulled(*p.bytes_pulled);
  if (p.fp32_bytes_pulled) proto.set_fp32_bytes_pulled(*p.fp32_bytes_pulled);
  proto.set_bytes_pulled_discarded(p.bytes_pulled_discarded);
  proto.set_stalled_seconds(p.stalled_seconds);
  proto.set_checkpoint_failures(p.checkpoint_failures);
  proto.set_checkpoint_error(p.checkpoint_error);
  proto.set_samples(p.samples);
  if (p.eta_seconds) proto.set_eta_seconds(*p.eta_seconds);
  return proto;
}

namespace {

// A member's figures are shown and summed into its job's, never acted on,
// so one outside its domain (a NaN rate, a share of 7) is taken at the
// nearest value inside it: one member cannot garble the job's view. (Its
// clocks are held to the shards': [claimed clocks] in reconciler.cc. A NaN
// loss is kept: a diverged model reports it.)
float Within(float x, float lo, float hi) { return std::isnan(x) ? lo : std::clamp(x, lo, hi); }

// No worker trains a billion examples a second; a rate past it is a lie
// that would overflow the samples counted from it.
constexpr float kMaxSamplesPerSec = 1e9f;

WorkerProgress WorkerProgressFromProto(const v1::WorkerProgress& proto) {
  WorkerProgress p;
  p.clock = proto.clock();
  p.loss = proto.loss();
  p.accuracy = Within(proto.accuracy(), 0.0f, 1.0f);
  p.accuracy_clock = proto.accuracy_clock();
  p.samples_per_sec = Within(proto.samples_per_sec(), 0.0f, kMaxSamplesPerSec);
  p.bytes_pushed = proto.bytes_pushed();
  p.fp32_bytes_pushed = proto.fp32_bytes_pushed();
  p.residual_norm = proto.residual_norm();
  p.max_staleness = proto.max_staleness();
  p.encode_path = proto.encode_path();
  p.encode_share = Within(proto.encode_share(), 0.0f, 1.0f);
  if (proto.has_push_link()) p.push_link = LinkDecisionFromProto(proto.push_link());
  p.wait_share = Within(proto.wait_share(), 0.0f, 1.0f);
  p.bytes_pulled = proto.bytes_pulled();
  p.fp32_bytes_pulled = proto.fp32_bytes_pulled();
  p.bytes_pulled_discarded = proto.bytes_pulled_discarded();
  return p;
}

ProgressPoint ProgressPointFromProto(const v1::ProgressPoint& proto) {
  return ProgressPoint{proto.clock(),           proto.loss(),         proto.accuracy(),
                       proto.samples_per_sec(), proto.bytes_pushed(), proto.fp32_bytes_pushed(),
                       proto.unix_ms()};
}

void ProgressPointToProto(const ProgressPoint& p, v1::ProgressPoint* proto) {
  proto->set_clock(p.clock);
  proto->set_loss(p.loss);
  proto->set_accuracy(p.accuracy);
  proto->set_samples_per_sec(p.samples_per_sec);
  proto->set_bytes_pushed(p.bytes_pushed);
  proto->set_fp32_bytes_pushed(p.fp32_bytes_pushed);
  proto->set_unix_ms(p.unix_ms);
}

MembershipEpoch EpochFromProto(const v1::MembershipEpoch& proto) {
  MembershipEpoch e;
  e.epoch = proto.epoch();
  e.effective_clock = proto.effective_clock();
  e.worker_ids.assign(proto.worker_ids().begin(), proto.worker_ids().end());
  e.created_unix_ms = proto.created_unix_ms();
  e.reason = proto.reason();
  e.departed.assign(proto.departed().begin(), proto.departed().end());
  return e;
}

void EpochToProto(const MembershipEpoch& e, v1::MembershipEpoch* proto) {
  proto->set_epoch(e.epoch);
  proto->set_effective_clock(e.effective_clock);
  for (uint64_t w : e.worker_ids) proto->add_worker_ids(w);
  proto->set_created_unix_ms(e.created_unix_ms);
  proto->set_reason(e.reason);
  for (uint64_t w : e.departed) proto->add_departed(w);
}

JobMember MemberFromProto(const v1::JobMember& proto) {
  JobMember m;
  m.worker_id = proto.worker_id();
  m.incarnation = proto.incarnation();
  m.rank = proto.rank();
  m.join_clock = proto.join_clock();
  m.leaving = proto.leaving();
  m.leave_clock = proto.leave_clock();
  m.clock = proto.clock();
  if (proto.has_loss()) m.loss = proto.loss();
  if (proto.has_samples_per_sec()) m.samples_per_sec = proto.samples_per_sec();
  m.encode_path = proto.encode_path();
  m.encode_share = proto.encode_share();
  if (proto.has_push_link()) m.push_link = LinkDecisionFromProto(proto.push_link());
  m.wait_share = proto.wait_share();
  return m;
}

void MemberToProto(const JobMember& m, v1::JobMember* proto) {
  proto->set_worker_id(m.worker_id);
  proto->set_incarnation(m.incarnation);
  proto->set_rank(m.rank);
  proto->set_join_clock(m.join_clock);
  proto->set_leaving(m.leaving);
  proto->set_leave_clock(m.leave_clock);
  proto->set_clock(m.clock);
  if (m.loss) proto->set_loss(*m.loss);
  if (m.samples_per_sec) proto->set_samples_per_sec(*m.samples_per_sec);
  proto->set_encode_path(m.encode_path);
  proto->set_encode_share(m.encode_share);
  if (m.push_link) LinkDecisionToProto(*m.push_link, proto->mutable_push_link());
  proto->set_wait_share(m.wait_share);
}

}  // namespace

absl::StatusOr<JobStatus> JobStatusFromProto(const v1::JobStatus& proto) {
  JobStatus s;
  s.job_id = proto.job_id();
  s.spec = JobSpecFromProto(proto.spec());
  s.state = static_cast<JobState>(proto.state());
  s.message = proto.message();
  s.desired_workers = proto.desired_workers();
  s.active_workers = proto.active_workers();
  s.progress = JobProgressFromProto(proto.progress());
  for (const auto& e : proto.epochs()) s.epochs.push_back(EpochFromProto(e));
  if (proto.shard_map().shards_size() > 0) {
    absl::StatusOr<ShardMap> map = ShardMapFromProto(proto.shard_map());
    if (!map.ok()) {
      return absl::DataLossError(
          absl::StrCat("job ", proto.job_id(), ": ", map.status().message()));
    }
    s.shard_map = *std::move(map);
  }
  for (const auto& m : proto.members()) s.members.push_back(MemberFromProto(m));
  s.submitted_unix_ms = proto.submitted_unix_ms();
  s.started_unix_ms = proto.started_unix_ms();
  s.finished_unix_ms = proto.finished_unix_ms();
  s.committed_epoch = proto.committed_epoch();
  s.worker_errors = proto.worker_errors();
  for (const auto& p : proto.history()) s.history.push_back(ProgressPointFromProto(p));
  s.min_workers = proto.min_workers();
  s.below_min_since_unix_ms = proto.below_min_since_unix_ms();
  s.size_reason = proto.size_reason();
  for (const auto& t : proto.precision()) {
    TensorPrecision tp{t.tensor(), std::nullopt, std::nullopt};
    if (t.has_pull()) tp.pull = PathPrecisionFromProto(t.pull());
    if (t.has_push()) tp.push = PathPrecisionFromProto(t.push());
    s.precision.push_back(std::move(tp));
  }
  for (const auto& t : proto.tables()) {
    s.tables.push_back(TableProgress{t.tensor(), TableRowStatsFromProto(t.rows())});
  }
  for (const auto& l : proto.pull_links()) {
    s.pull_links.emplace_back(l.shard(), LinkDecisionFromProto(l.decision()));
  }
  return s;
}

v1::JobStatus JobStatusToProto(const JobStatus& s) {
  v1::JobStatus proto;
  proto.set_job_id(s.job_id);
  *proto.mutable_spec() = JobSpecToProto(s.spec);
  proto.set_state(static_cast<v1::JobState>(s.state));
  proto.set_message(s.message);
  proto.set_desired_workers(s.desired_workers);
  proto.set_active_workers(s.active_workers);
  *proto.mutable_progress() = JobProgressToProto(s.progress);
  for (const MembershipEpoch& e : s.epochs) EpochToProto(e, proto.add_epochs());
  if (!s.shard_map.shards.empty()) *proto.mutable_shard_map() = ShardMapToProto(s.shard_map);
  for (const JobMember& m : s.members) MemberToProto(m, proto.add_members());
  proto.set_submitted_unix_ms(s.submitted_unix_ms);
  proto.set_started_unix_ms(s.started_unix_ms);
  proto.set_finished_unix_ms(s.finished_unix_ms);
  proto.set_committed_epoch(s.committed_epoch);
  proto.set_worker_errors(s.worker_errors);
  for (const ProgressPoint& p : s.history) ProgressPointToProto(p, proto.add_history());
  proto.set_min_workers(s.min_workers);
  proto.set_below_min_since_unix_ms(s.below_min_since_unix_ms);
  proto.set_size_reason(s.size_reason);
  for (const TensorPrecision& t : s.precision) {
    v1::TensorPrecision* tp = proto.add_precision();
    tp->set_tensor(t.tensor);
    if (t.pull) PathPrecisionToProto(*t.pull, tp->mutable_pull());
    if (t.push) PathPrecisionToProto(*t.push, tp->mutable_push());
  }
  for (const TableProgress& t : s.tables) {
    v1::TableProgress* tp = proto.add_tables();
    tp->set_tensor(t.tensor);
    TableRowStatsToProto(t.rows, tp->mutable_rows());
  }
  for (const auto& [shard, d] : s.pull_links) {
    v1::ShardLinkDecision* l = proto.add_pull_links();
    l->set_shard(shard);
    LinkDecisionToProto(d, l->mutable_decision());
  }
  return proto;
}

WorkerStatus WorkerStatusFromProto(const v1::WorkerStatus& proto) {
  WorkerStatus w;
  w.worker_id = proto.worker_id();
  w.incarnation = proto.incarnation();
  w.name = proto.name();
  w.healthy = proto.healthy();
  w.last_heartbeat_unix_ms = proto.last_heartbeat_unix_ms();
  w.job_id = proto.job_id();
  w.rank = proto.rank();
  w.state = static_cast<WorkerState>(proto.state());
  w.clock = proto.clock();
  w.has_gpu = proto.has_gpu();
  w.stopping = proto.stopping();
  return w;
}

v1::WorkerStatus WorkerStatusToProto(const WorkerStatus& w) {
  v1::WorkerStatus proto;
  proto.set_worker_id(w.worker_id);
  proto.set_incarnation(w.incarnation);
  proto.set_name(w.name);
  proto.set_healthy(w.healthy);
  proto.set_last_heartbeat_unix_ms(w.last_heartbeat_unix_ms);
  proto.set_job_id(w.job_id);
  proto.set_rank(w.rank);
  proto.set_state(static_cast<v1::WorkerState>(w.state));
  proto.set_clock(w.clock);
  proto.set_has_gpu(w.has_gpu);
  proto.set_stopping(w.stopping);
  return proto;
}

ShardStatus ShardStatusFromProto(const v1::ShardStatus& proto) {
  return ShardStatus{proto.shard_id(),          proto.address(), proto.healthy(),
                     proto.last_seen_unix_ms(), proto.message(), proto.jobs()};
}

v1::ShardStatus ShardStatusToProto(const ShardStatus& s) {
  v1::ShardStatus proto;
  proto.set_shard_id(s.shard_id);
  proto.set_address(s.address);
  proto.set_healthy(s.healthy);
  proto.set_last_seen_unix_ms(s.last_seen_unix_ms);
  proto.set_message(s.message);
  proto.set_jobs(s.jobs);
  return proto;
}

absl::StatusOr<DurableState> DurableStateFromProto(const v1::CoordinatorState& proto) {
  DurableState state;
  state.next_job = proto.next_job();
  state.next_worker_id = proto.next_worker_id();
  for (const auto& s : proto.shards()) state.shards.push_back(ShardStatusFromProto(s));
  for (const auto& w : proto.workers()) state.workers.push_back(WorkerStatusFromProto(w));
  for (const auto& j : proto.jobs()) {
    absl::StatusOr<JobStatus> status = JobStatusFromProto(j);
    if (!status.ok()) return status.status();
    JobRecord& record = state.jobs.emplace_back();
    record.status = *std::move(status);
    if (auto r = proto.retired().find(j.job_id()); r != proto.retired().end()) {
      record.retired = JobProgressFromProto(r->second);
    }
    if (auto t = proto.job_tokens().find(j.job_id()); t != proto.job_tokens().end()) {
      record.token = t->second;
    }
  }
  return state;
}

v1::CoordinatorState DurableStateToProto(const DurableState& state) {
  v1::CoordinatorState proto;
  proto.set_next_job(state.next_job);
  proto.set_next_worker_id(state.next_worker_id);
  for (const ShardStatus& s : state.shards) *proto.add_shards() = ShardStatusToProto(s);
  for (const WorkerStatus& w : state.workers) *proto.add_workers() = WorkerStatusToProto(w);
  for (const JobRecord& j : state.jobs) {
    *proto.add_jobs() = JobStatusToProto(j.status);
    (*proto.mutable_retired())[j.status.job_id] = JobProgressToProto(j.retired);
    if (!j.token.empty()) (*proto.mutable_job_tokens())[j.status.job_id] = j.token;
  }
  return proto;
}

WorkerRegistration RegistrationFromProto(const v1::RegisterWorkerRequest& proto) {
  return WorkerRegistration{proto.name(), proto.worker_id(), proto.incarnation(), proto.has_gpu()};
}

v1::RegisterWorkerResponse RegisteredToProto(const RegisteredWorker& r) {
  v1::RegisterWorkerResponse proto;
  proto.set_worker_id(r.worker_id);
  proto.set_incarnation(r.incarnation);
  proto.set_heartbeat_interval_ms(r.heartbeat_interval_ms);
  proto.set_heartbeat_timeout_ms(r.heartbeat_timeout_ms);
  return proto;
}

HeartbeatReport HeartbeatFromProto(const v1::HeartbeatRequest& proto) {
  HeartbeatReport r;
  r.worker_id = proto.worker_id();
  r.incarnation = proto.incarnation();
  r.job_id = proto.job_id();
  r.state = static_cast<WorkerState>(proto.state());
  r.progress = WorkerProgressFromProto(proto.progress());
  r.message = proto.message();
  for (const auto& t : proto.declared_tensors()) {
    r.declared_tensors.push_back(DeclaredTensorFromProto(t));
  }
  r.stopping = proto.stopping();
  return r;
}

v1::Assignment AssignmentToProto(const Assignment& a) {
  v1::Assignment proto;
  proto.set_job_id(a.job_id);
  proto.set_job_state(static_cast<v1::JobState>(a.job_state));
  proto.set_rank(a.rank);
  proto.set_world_size(a.world_size);
  proto.set_epoch(a.epoch);
  proto.set_join_clock(a.join_clock);
  proto.set_leave(a.leave);
  proto.set_leave_clock(a.leave_clock);
  if (!a.spec.wire.empty()) *proto.mutable_spec() = JobSpecToProto(a.spec);
  if (!a.shard_map.shards.empty()) *proto.mutable_shard_map() = ShardMapToProto(a.shard_map);
  proto.set_epoch_clock(a.epoch_clock);
  proto.set_job_token(a.job_token);
  return proto;
}

v1::ClusterStatus ClusterToProto(const ClusterStatus& cluster) {
  v1::ClusterStatus proto;
  for (const ShardStatus& s : cluster.shards) *proto.add_shards() = ShardStatusToProto(s);
  for (const WorkerStatus& w : cluster.workers) *proto.add_workers() = WorkerStatusToProto(w);
  proto.set_heartbeat_timeout_ms(cluster.heartbeat_timeout_ms);
  return proto;
}

}  // namespace gradstream::coordinator
