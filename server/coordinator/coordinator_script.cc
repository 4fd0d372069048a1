// Script jobs (JobSpec.entrypoint, model.type "script"): the job's tensor
// list comes from the user's training script, so the coordinator places the
// job on shards only once the script declared it. Also the placement of any
// job on the healthy shards.
//
// NOTE: [script jobs]
//   * submit: the spec carries the command and no tensors; nothing is placed.
//   * start: the planner assigns workers as for any job (epoch 1, clock 0).
//     The epoch has no shard to acknowledge it, so it is committed at once
//     and the workers learn their rank: every gs_worker starts the script.
//   * declare: the script's init sends its tensors to its gs_worker, which
//     sends them on every heartbeat until its assignment carries a shard map.
//     Rank 0's declaration becomes ModelSpec.tensors; the coordinator builds
//     the shard map from it (as for a built-in model) and installs the job on
//     the shards with the current epoch. Other ranks' declarations are not
//     used: each gs_worker compares its script's tensors with the map it gets
//     and fails the script with a clear error when they differ.
//   * the shard map is revealed to workers only once every shard of the map
//     has the job (AssignmentLocked), so no script connects to a shard that
//     would refuse it as an unknown job.
//   * scripts decide when they are done, and may disagree by a few clocks
//     (a joiner that computed its step count from a larger world): a member
//     that reports DONE while another trains on leaves the job at its clock
//     (ScriptDoneEarlyLocked), so no sync round waits for it, and the
//     desired count drops by one, so nobody replaces it; the job
//     completes when the last members are DONE.
//   * a script that fails (non-zero exit, no init within the deadline) makes
//     its worker report ERROR with the exit code and its last stderr lines;
//     that fails the whole job with that message (a bug in the user's script
//     fails every rank alike: retrying on other workers would not help).
#include "absl/strings/str_cat.h"
#include "common/job/job_spec.h"
#include "common/job/shard_map_proto.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"

namespace gradstream::coordinator {

namespace v1 = gradstream::v1;

bool AwaitsDeclaration(const v1::JobSpec& spec) {
  return spec.model().type() == "script" && spec.model().tensors_size() == 0;
}

bool Coordinator::PlaceJobLocked(const std::string& id) {
  const JobRecord* job = jobs_.Find(id);
  if (job == nullptr) return false;
  if (job->status.shard_map().shards_size() > 0) return true;
  if (AwaitsDeclaration(job->status.spec())) return false;
  std::vector<std::string> healthy;
  for (const auto& s : shards_) {
    if (s.status.healthy()) healthy.push_back(s.status.address());
  }
  const uint32_t want = job->status.spec().shards();
  if (healthy.empty() || healthy.size() < want) {
    SetMessageLocked(id, absl::StrCat("waiting for shards: ", healthy.size(),
                                      " healthy registered, job wants ",
                                      want == 0 ? std::string("at least 1") : absl::StrCat(want)));
    return false;
  }
  if (want > 0) healthy.resize(want);
  absl::StatusOr<v1::ShardMap> map = BuildShardMap(job->status.spec(), healthy);
  if (!map.ok()) {
    (void)FinishLocked(id, v1::FAILED, absl::StrCat("shard map: ", map.status().message()));
    return false;
  }
  if (!jobs_.Update(id, [&](JobRecord& j) { *j.status.mutable_shard_map() = *map; }).ok()) {
    return false;
  }
  JobShards& js = job_shards_[id];
  const size_t used = job->status.shard_map().shards_size();
  js.created.assign(used, false);
  js.acked.assign(used, 0);
  return true;
}

void Coordinator::DeclareTensorsLocked(const std::string& job_id, uint64_t worker_id,
                                       const v1::HeartbeatRequest& request) {
  const JobRecord* job = jobs_.Find(job_id);
  if (job == nullptr || job->status.state() != v1::RUNNING ||
      job->status.spec().model().type() != "script" || job->status.shard_map().shards_size() > 0) {
    return;
  }
  if (AwaitsDeclaration(job->status.spec())) {
    // Only rank 0 of the newest committed epoch declares.
    const uint64_t committed = job->status.committed_epoch();
    if (request.declared_tensors().empty() || committed == 0 ||
        committed > static_cast<uint64_t>(job->status.epochs_size())) {
      return;
    }
    const v1::MembershipEpoch& epoch = job->status.epochs(static_cast<int>(committed - 1));
    if (epoch.worker_ids().empty() || epoch.worker_ids(0) != worker_id) return;
    v1::ModelSpec model = job->status.spec().model();
    *model.mutable_tensors() = request.declared_tensors();
    if (absl::Status s = DeclaredTensors(model).status(); !s.ok()) {
      (void)FinishLocked(job_id, v1::FAILED,
                         absl::StrCat("the script of worker ", worker_id,
                                      " (rank 0) declared invalid tensors: ", s.message()));
      return;
    }
    if (!jobs_.Update(job_id,
                      [&](JobRecord& j) { *j.status.mutable_spec()->mutable_model() = model; })
             .ok()) {
      return;  // the next heartbeat declares again
    }
    LOG(INFO) << "coordinator: job " << job_id << ": rank 0 (worker " << worker_id
              << ") declared " << model.tensors_size() << " tensors";
  }
  // Declared but not placed yet (e.g. no healthy shard a moment ago): every
  // heartbeat of a member tries again.
  (void)PlaceJobLocked(job_id);
}

bool Coordinator::ScriptDoneEarlyLocked(const JobRecord& job, uint64_t worker_id,
                                        v1::WorkerState state) const {
  if (state != v1::DONE || job.status.spec().entrypoint().empty()) return false;
  for (const auto& m : job.status.members()) {
    if (m.worker_id() == worker_id || m.leaving()) continue;
    const WorkerRecord* w = workers_.Find(m.worker_id());
    if (w != nullptr && w->status.state() != v1::DONE) return true;
  }
  return false;
}

bool Coordinator::MapRevealedLocked(const std::string& job_id) const {
  auto it = job_shards_.find(job_id);
  if (it == job_shards_.end() || it->second.created.empty()) return false;
  for (bool c : it->second.created) {
    if (!c) return false;
  }
  return true;
}

}  // namespace gradstream::coordinator
